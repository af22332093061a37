"""Two `federator up` replicas on one etcd, as processes: the follower serves the API, and a leader
paused (SIGSTOP) past its lease writes nothing once it wakes (SIGCONT): every write of its term
landed before its leader key vanished from the store, and it comes back as a follower."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from federator.hub.app import HUB_STORE_PREFIX
from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdProcess
from federator.store.protocol import EventType

from .jobtest_support import Federation, HubProcess, gpu_job, phase, wait_until

pytestmark = pytest.mark.timeout(300)

LEADER_KEY = f"{HUB_STORE_PREFIX}leader/hub"


@pytest.fixture
async def fed(tmp_path: Path) -> AsyncIterator[Federation]:
    federation = Federation(tmp_path / "members")
    await federation.start(["onprem-rdma-a100", "cloud-eth-h100"])
    try:
        yield federation
    finally:
        await federation.stop()


async def leader_key_deleted_at(endpoint: str, token: int) -> int:
    """The revision at which the leader key created at `token` vanished (its lease expired)."""
    store = await EtcdStore.connect([endpoint], prefix=HUB_STORE_PREFIX)
    try:
        async with asyncio.timeout(60):
            async for event in store.watch(LEADER_KEY, from_revision=token):
                if event.kv.key == LEADER_KEY and event.type is EventType.DELETE:
                    return event.revision
    finally:
        await store.close()
    raise AssertionError("the leader key's history ended without a delete")


async def test_a_leader_paused_past_its_lease_writes_nothing_after_losing_it(
    tmp_path: Path, fed: Federation, etcd_factory: Callable[[], EtcdProcess],
) -> None:
    etcd = etcd_factory()
    clusters = fed.write_registrations(tmp_path / "clusters")
    ttl = ["--leader-ttl", "2s"]
    first = HubProcess(tmp_path / "a", clusters, store_url=etcd.url, extra_args=ttl)
    second = HubProcess(tmp_path / "b", clusters, store_url=etcd.url, extra_args=ttl)
    leader_api = follower_api = None
    try:
        leader_api = await first.start()
        await wait_until(lambda: first.logged("hub leads"), timeout=60, what="the first replica to lead")
        follower_api = await second.start()
        assert second.records("hub ready")[0]["role"] == "follower"

        # Work submitted through the follower; the leader's controllers place and run it.
        for i in range(4):
            await follower_api.submit(gpu_job(f"before-{i}", workers=2, gpus=1))
        for i in range(4):
            await follower_api.wait_job("team-a", f"before-{i}", lambda j: phase(j) == "Running", timeout=120)
        token = int(first.records("hub leads")[0]["leader_token"])

        assert first.process is not None
        first.process.send_signal(signal.SIGSTOP)
        try:
            await wait_until(lambda: second.logged("hub leads"), timeout=90, what="the follower to take over")
            # More work while the old leader sleeps: it will see these events when it wakes.
            for i in range(3):
                await follower_api.submit(gpu_job(f"during-{i}", workers=2, gpus=1))
        finally:
            first.process.send_signal(signal.SIGCONT)

        await wait_until(lambda: first.logged("hub term ended", term=1), timeout=90,
                         what="the woken leader to end its term")
        ended = first.records("hub term ended", term=1)[0]
        deleted_at = await leader_key_deleted_at(etcd.endpoint, token)
        print("term 1 of the paused leader:", ended, "leader key deleted at revision", deleted_at)
        assert ended["leader_token"] == token and ended["writes"] > 0
        # 0 writes after the loss: the term's last write landed before its leader key vanished.
        assert ended["last_write_revision"] < deleted_at, (ended, deleted_at)
        assert first.logged("hub leadership lost; stepping down to follower (serving the API, campaigning again)")
        assert first.process.returncode is None  # a follower now, not an exited process
        assert not first.logged("hub leads", term=2)

        # The new leader finishes the work; the old one still serves the API.
        for i in range(3):
            await leader_api.wait_job("team-a", f"during-{i}", lambda j: phase(j) == "Running", timeout=120)
        jobs = await leader_api.list()
        assert sorted(j["metadata"]["name"] for j in jobs) == sorted(
            [f"before-{i}" for i in range(4)] + [f"during-{i}" for i in range(3)])
    finally:
        for api in (leader_api, follower_api):
            if api is not None:
                await api.close()
        await first.stop()
        await second.stop()
