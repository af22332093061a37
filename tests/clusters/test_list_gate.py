"""The hub's member LISTs run at most `member_concurrent_lists` at a time, across clusters, and every cluster
still syncs (the gate bounds the heap a many-cluster initial sync holds at once; reflector.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from clustertest_support import Hub, Sims, profile, registration, running, wait_until

from federator.clusters.client import MemberClient


class ListWatcher:
    """Wraps MemberClient.list_all (the seam to the members): how many LISTs are in flight at most. Each LIST
    lingers until another one starts, or 0.3 s: without a gate the lists of different clusters overlap."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.lists = 0
        self.started = asyncio.Event()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = MemberClient.list_all

        async def list_all(client: MemberClient, *args: Any, **kwargs: Any) -> Any:
            self.in_flight += 1
            self.lists += 1
            self.most = max(self.most, self.in_flight)
            self.started.set()
            self.started = asyncio.Event()
            waiting = self.started
            try:
                result = await original(client, *args, **kwargs)
                try:
                    async with asyncio.timeout(0.3):
                        await waiting.wait()
                except TimeoutError:
                    pass
                return result
            finally:
                self.in_flight -= 1

        monkeypatch.setattr(MemberClient, "list_all", list_all)


async def _sync_three(sims: Sims, monkeypatch: pytest.MonkeyPatch, concurrent_lists: int) -> ListWatcher:
    watcher = ListWatcher()
    watcher.install(monkeypatch)
    names = ["gate-a", "gate-b", "gate-c"]
    for name in names:
        await sims.start(profile(name, scheduler="default", gpu_nodes=2, cpu_nodes=0, fabric="ethernet",
                                 datasets=False))
    hub = await Hub.open("memory://", member_concurrent_lists=concurrent_lists, member_lease=False)
    try:
        async with running(hub):
            for name in names:
                await hub.register(registration(name, sims.kubeconfigs[name], scheduler="default",
                                                network="ethernet"))
            for name in names:
                await hub.wait_condition(name, "Ready", "True", timeout=30)
            await wait_until(lambda: all(len(hub.snapshot(n).nodes) == 2 for n in names),  # type: ignore[union-attr]
                             what="every cluster's nodes in its snapshot")
    finally:
        await hub.close()
    return watcher


async def test_one_list_at_a_time_and_every_cluster_syncs(sims: Sims, monkeypatch: pytest.MonkeyPatch) -> None:
    watcher = await _sync_three(sims, monkeypatch, 1)
    assert watcher.lists >= 6  # nodes and pods of three clusters
    assert watcher.most == 1


async def test_without_a_tight_gate_lists_overlap(sims: Sims, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: with room for every cluster, their LISTs do run at once."""
    watcher = await _sync_three(sims, monkeypatch, 100)
    assert watcher.most > 1
