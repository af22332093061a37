"""Hub high availability in-process: a deposed leader steps down to follower (it keeps serving
and campaigns again) instead of exiting; every controller write of a term is fenced with that
term's token; a store outage answers 503 with Retry-After and fails /readyz, and service comes
back by itself; two replicas on one etcd both serve the API while only one runs controllers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from federator.controllers.context import HubContext
from federator.store.etcd_process import EtcdCluster, EtcdProcess
from federator.store.leader import FencedStore
from federator.store.protocol import FencedOut

from .hubtest_support import GROUP_PATH, RunningHub, start_hub

MC_PATH = f"{GROUP_PATH}/memberclusters"


class Recorder:
    """A controller that only records the terms it ran in (the context it was handed)."""

    def __init__(self) -> None:
        self.entered: list[HubContext] = []
        self.left: list[HubContext] = []

    async def __call__(self, hub: HubContext) -> AsyncIterator[None]:
        self.entered.append(hub)
        yield
        self.left.append(hub)


def _recorder_factory(recorder: Recorder) -> Callable[[HubContext], AsyncIterator[None]]:
    def recorded(hub: HubContext) -> AsyncIterator[None]:
        return recorder(hub)

    recorded.__name__ = "recorder"
    return recorded


async def wait_until(predicate: Callable[[], bool], *, what: str, timeout: float = 90.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def readyz(hub: RunningHub) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(hub.url + "/readyz", ssl=hub.ssl_context(),
                               timeout=aiohttp.ClientTimeout(total=20)) as response:
            return response.status, await response.text()


async def wait_readyz(hub: RunningHub, status: int, *, what: str, timeout: float = 90.0) -> str:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        code, text = await readyz(hub)
        if code == status:
            return text
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"/readyz never answered {status} ({what}); last {code} {text!r}")
        await asyncio.sleep(0.1)


def cluster_body(name: str) -> dict[str, Any]:
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": name},
            "spec": {"connection": {"kubeconfigPath": f"/etc/federator/clusters/{name}.kubeconfig"},
                     "location": {"type": "onPrem", "provider": "dc1", "region": "eu-west"},
                     "network": {"type": "ethernet", "bandwidthGbps": 100},
                     "scheduler": {"name": "default"}}}


async def test_a_deposed_leader_steps_down_serves_and_leads_again_with_a_fresh_fenced_context(tmp_path: Path) -> None:
    recorder = Recorder()
    async with start_hub(tmp_path, controllers=[_recorder_factory(recorder)], leader_ttl_seconds=3) as hub:
        await wait_until(lambda: len(recorder.entered) == 1, what="the first term's controllers")
        first = recorder.entered[0]
        assert isinstance(first.store, FencedStore) and first.fencing is not None
        assert first.storage.store is first.store  # the controllers' storage writes through the fence
        assert hub.state.terms == 1 and hub.state.step_downs == 0

        # The leader's lease vanishes (what a pause or a partition past the TTL does).
        base = hub.state.base
        assert base is not None
        # An API watch open across the step-down (the term's storage is a view on the API's cache:
        # closing it at the term's end must not end the API's watchers).
        rt = base.kind("MemberCluster")
        seen: list[str] = []

        async def watch() -> None:
            async for event in base.storage.watch(rt):
                seen.append(event.object["metadata"]["name"])

        watcher = asyncio.create_task(watch())
        leader = await base.store.get(hub.state.leader_key)
        assert leader is not None and leader.lease
        await base.store.lease_revoke(leader.lease)

        await wait_until(lambda: hub.state.step_downs == 1, what="the step-down")
        await wait_until(lambda: hub.state.terms == 2 and hub.state.leading.is_set(), what="the second term")
        await wait_until(lambda: len(recorder.entered) == 2, what="the second term's controllers")
        assert recorder.left == [first]  # the first term's controllers were stopped
        second = recorder.entered[1]
        assert second is not first and hub.state.context is second
        assert second.fencing is not None and second.fencing.revision > first.fencing.revision

        # The old term's writes are refused however late they come; the new term's land.
        with pytest.raises(FencedOut):
            await first.store.put(f"{base.store.prefix}ha-test/late", b"stale")
        assert isinstance(first.store, FencedStore) and first.store.refused == 1
        await second.store.put(f"{base.store.prefix}ha-test/now", b"fresh")

        # The API was never down: it answers as before.
        status, body = await hub.request("POST", MC_PATH, body=cluster_body("after-step-down"))
        assert status == 201, body
        await wait_until(lambda: "after-step-down" in seen, what="the API watch to see the new object")
        watcher.cancel()
        assert second.storage.store is second.store and isinstance(second.store, FencedStore)
        code, text = await readyz(hub)
        assert code == 200 and text.startswith("ok: leader (token") and "term 2" in text


async def test_etcd_outage_past_the_lease_gives_503_and_failing_readyz_then_the_hub_leads_again(
    tmp_path: Path, etcd_factory: Callable[[], EtcdProcess],
) -> None:
    etcd = etcd_factory()
    recorder = Recorder()
    async with start_hub(tmp_path, store_url=etcd.url, controllers=[_recorder_factory(recorder)],
                         leader_ttl_seconds=2) as hub:
        await wait_until(lambda: len(recorder.entered) == 1, what="the first term")
        status, _ = await hub.request("POST", MC_PATH, body=cluster_body("before"))
        assert status == 201
        etcd.kill()

        text = await wait_readyz(hub, 500, what="the store is gone")
        assert "not ready: the hub store does not answer" in text
        async with aiohttp.ClientSession() as session:
            async with session.get(hub.url + MC_PATH, ssl=hub.ssl_context(),
                                   headers={"Authorization": f"Bearer {_admin_token()}"},
                                   timeout=aiohttp.ClientTimeout(total=60)) as response:
                body = json.loads(await response.text())
                assert response.status == 503, body
                assert response.headers.get("Retry-After") == "1"
        assert body["kind"] == "Status" and body["reason"] == "ServiceUnavailable"
        assert body["details"]["retryAfterSeconds"] == 1
        status, body = await hub.request("POST", MC_PATH, body=cluster_body("during"), timeout=60)
        assert status == 503 and body["reason"] == "ServiceUnavailable"

        await wait_until(lambda: hub.state.step_downs == 1, what="the step-down (lease not renewed for a TTL)")
        assert not hub.state.failed.is_set()
        etcd.start()

        await wait_until(lambda: hub.state.terms == 2 and hub.state.leading.is_set(), what="leading again")
        await wait_until(lambda: len(recorder.entered) == 2, what="the second term's controllers")
        text = await wait_readyz(hub, 200, what="the store is back")
        assert text.startswith("ok: leader")
        status, body = await hub.request("GET", MC_PATH)
        assert status == 200 and [i["metadata"]["name"] for i in body["items"]] == ["before"]
        status, _ = await hub.request("POST", MC_PATH, body=cluster_body("after"), timeout=60)
        assert status == 201


async def test_two_replicas_on_one_etcd_both_serve_and_one_leads(
    tmp_path: Path, etcd_factory: Callable[[], EtcdProcess],
) -> None:
    etcd = etcd_factory()
    first_recorder, second_recorder = Recorder(), Recorder()
    # The default lease TTL, not a short one: this test asserts that the leadership never changes, which a
    # 2 s TTL cannot promise on a loaded machine (one stalled renewal and the leader rightly steps down).
    async with start_hub(tmp_path / "a", store_url=etcd.url, controllers=[_recorder_factory(first_recorder)]) as leader:
        async with start_hub(tmp_path / "b", store_url=etcd.url, controllers=[_recorder_factory(second_recorder)],
                             wait_for_lead=False) as follower:
            assert leader.state.leading.is_set() and not follower.state.leading.is_set()
            code, text = await readyz(follower)
            assert code == 200 and text.startswith("ok: follower"), text
            assert "watch cache in sync at revision" in text or "behind the store's last probe" in text, text
            # A write through the follower is seen by the leader, and the other way round.
            status, _ = await follower.request("POST", MC_PATH, body=cluster_body("via-follower"))
            assert status == 201
            status, _ = await leader.request("POST", MC_PATH, body=cluster_body("via-leader"))
            assert status == 201
            for hub in (leader, follower):
                status, body = await hub.request("GET", MC_PATH)
                assert sorted(i["metadata"]["name"] for i in body["items"]) == ["via-follower", "via-leader"]
            assert second_recorder.entered == []

        # The follower went away cleanly: nothing changes for the leader.
        assert leader.state.leading.is_set() and leader.state.step_downs == 0
    assert len(first_recorder.entered) == 1 and len(first_recorder.left) == 1


async def test_the_follower_takes_over_when_the_leader_stops(
    tmp_path: Path, etcd_factory: Callable[[], EtcdProcess],
) -> None:
    etcd = etcd_factory()
    recorder = Recorder()
    async with start_hub(tmp_path / "b", store_url=etcd.url, controllers=[_recorder_factory(recorder)],
                         leader_ttl_seconds=2, wait_for_lead=False) as follower:
        async with start_hub(tmp_path / "a", store_url=etcd.url, leader_ttl_seconds=2, wait_for_lead=False) as other:
            await wait_until(lambda: other.state.leading.is_set() or follower.state.leading.is_set(),
                             what="someone to lead")
            first_leader = other if other.state.leading.is_set() else follower
        if first_leader is other:
            await wait_until(lambda: follower.state.leading.is_set(), what="the follower to take over")
        await wait_until(lambda: len(recorder.entered) == 1, what="the new leader's controllers")
        code, text = await readyz(follower)
        assert code == 200 and text.startswith("ok: leader")


@pytest.mark.xdist_group("etcd-tls")
async def test_replicas_over_mutual_tls_elect_one_leader_and_hand_over(
    tmp_path: Path, etcd_tls_cluster: EtcdCluster,
) -> None:
    # The store and the leader election both ride the etcds:// connection (conftest's 3-member TLS etcd).
    url, tls = etcd_tls_cluster.url, etcd_tls_cluster.client_tls
    recorder = Recorder()
    async with start_hub(tmp_path / "b", store_url=url, etcd_tls=tls, controllers=[_recorder_factory(recorder)],
                         leader_ttl_seconds=2, wait_for_lead=False) as follower:
        async with start_hub(tmp_path / "a", store_url=url, etcd_tls=tls, leader_ttl_seconds=2,
                             wait_for_lead=False) as other:
            await wait_until(lambda: other.state.leading.is_set() or follower.state.leading.is_set(),
                             what="someone to lead")
            assert not (other.state.leading.is_set() and follower.state.leading.is_set())
            status, _ = await other.request("POST", MC_PATH, body=cluster_body("over-tls"))
            assert status == 201
        await wait_until(lambda: follower.state.leading.is_set(), what="the remaining replica to lead")
        await wait_until(lambda: len(recorder.entered) >= 1, what="the leader's controllers")
        status, body = await follower.request("GET", MC_PATH)
        assert "over-tls" in [i["metadata"]["name"] for i in body["items"]]


def _admin_token() -> str:
    from .hubtest_support import TOKENS

    return TOKENS["admin"]
