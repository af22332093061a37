"""The hub on a real 3-member etcd cluster: it keeps serving (and leading) through the kill -9 of
one etcd member and then of the member holding etcd leadership; a quorum loss makes writes fail
with a clear 503 Status (nothing half-written), /readyz fails, and service comes back by itself
once quorum returns."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from federator.store.etcd_process import EtcdCluster

from .hubtest_support import GROUP_PATH, RunningHub, start_hub
from .test_ha import cluster_body, readyz, wait_readyz

pytestmark = [pytest.mark.etcd, pytest.mark.timeout(240)]

MC_PATH = f"{GROUP_PATH}/memberclusters"
DEADLINE = 90.0
T = TypeVar("T")


@pytest.fixture
def etcd(etcd_cluster: EtcdCluster) -> EtcdCluster:
    return etcd_cluster  # tests/conftest.py: 3 members, fsync off


async def eventually(what: str, attempt: Callable[[], Awaitable[T | None]]) -> T:
    deadline = time.monotonic() + DEADLINE
    while True:
        value = await attempt()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def create_cluster(hub: RunningHub, name: str) -> None:
    """Create a MemberCluster the way kubectl would: a 503 with Retry-After is retried."""
    async def once() -> bool | None:
        status, body = await hub.request("POST", MC_PATH, body=cluster_body(name), timeout=60)
        if status == 201:
            return True
        assert status == 503 and body["reason"] == "ServiceUnavailable", (status, body)
        return None

    await eventually(f"{name} to be created", once)


async def names(hub: RunningHub) -> list[str]:
    status, body = await hub.request("GET", MC_PATH, timeout=60)
    assert status == 200, body
    return sorted(item["metadata"]["name"] for item in body["items"])


async def test_the_hub_serves_through_the_loss_of_any_one_etcd_member_and_recovers_from_quorum_loss(
    tmp_path: Path, etcd: EtcdCluster,
) -> None:
    async with start_hub(tmp_path / "hub", store_url=etcd.url, leader_ttl_seconds=3) as hub:
        await create_cluster(hub, "before")

        # 1. a follower member dies
        leader = await asyncio.to_thread(etcd.leader_index)
        assert leader is not None
        follower = next(i for i in range(3) if i != leader)
        etcd.kill(follower)
        await create_cluster(hub, "after-follower-loss")
        assert await names(hub) == ["after-follower-loss", "before"]
        etcd.restart(follower)

        # 2. the member holding etcd leadership dies: a new one is elected, the hub goes on
        leader = await eventually("an etcd leader", lambda: asyncio.to_thread(etcd.leader_index))
        etcd.kill(leader)
        await create_cluster(hub, "after-leader-loss")
        assert await names(hub) == ["after-follower-loss", "after-leader-loss", "before"]
        code, text = await readyz(hub)
        assert code == 200, text
        etcd.restart(leader)

        # 3. quorum lost: writes answer 503 ServiceUnavailable, /readyz fails
        etcd.kill(0)
        etcd.kill(1)
        status, body = await hub.request("POST", MC_PATH, body=cluster_body("during-quorum-loss"), timeout=60)
        assert status == 503 and body["kind"] == "Status" and body["reason"] == "ServiceUnavailable", body
        assert body["details"]["retryAfterSeconds"] == 1
        text = await wait_readyz(hub, 500, what="quorum lost")
        assert "the hub store does not answer" in text

        # ... and service returns by itself with quorum; nothing was corrupted or half-written
        etcd.restart(0)
        etcd.restart(1)
        await wait_readyz(hub, 200, what="quorum back")
        listed: list[str] = await eventually("a list to answer", lambda: _names_or_none(hub))
        assert set(listed) >= {"after-follower-loss", "after-leader-loss", "before"}
        assert set(listed) <= {"after-follower-loss", "after-leader-loss", "before", "during-quorum-loss"}
        await create_cluster(hub, "after-quorum")
        await eventually("the hub to lead again", lambda: _leads(hub))
        assert not hub.state.failed.is_set()


async def _names_or_none(hub: RunningHub) -> list[str] | None:
    status, body = await hub.request("GET", MC_PATH, timeout=60)
    return sorted(i["metadata"]["name"] for i in body["items"]) if status == 200 else None


async def _leads(hub: RunningHub) -> Any:
    return True if hub.state.leading.is_set() else None
