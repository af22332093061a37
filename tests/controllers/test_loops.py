"""background_loop: a controller loop runs while the block runs, its failure is
logged (not lost), and it never outlives the block. watch_hub_kind: a watch from
a compacted resourceVersion lists again, and an async apply is awaited per event
(over a real MemoryStore and the hub's ObjectStorage)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from federator.apis.views import Body
from federator.apiserver.storage import ObjectStorage
from federator.controllers.context import HubContext, HubSettings
from federator.controllers.loops import background_loop, watch_hub_kind
from federator.hub.kinds import hub_registry
from federator.obs import Metrics
from federator.store.memory import MemoryStore


class RecordingLog:
    def __init__(self) -> None:
        self.errors: list[tuple[str, dict[str, Any]]] = []
        self.infos: list[str] = []
        self.relisted = asyncio.Event()

    def error(self, event: str, **kw: Any) -> None:
        self.errors.append((event, kw))

    def info(self, event: str, **kw: Any) -> None:
        self.infos.append(event)
        self.relisted.set()

    def warning(self, event: str, **kw: Any) -> None:
        self.errors.append((event, kw))


def _queue(name: str) -> dict[str, Any]:
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name},
            "spec": {"namespaces": {"names": ["team-a"]}}}


async def test_the_loop_is_cancelled_when_the_block_ends() -> None:
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    log = RecordingLog()
    async with background_loop(forever(), name="t:forever", what="test loop", log=log) as task:
        await asyncio.wait_for(started.wait(), 5)
        assert task.get_name() == "t:forever" and not task.done()
    assert task.cancelled()
    assert log.errors == []


async def test_a_failing_loop_is_logged_and_the_block_still_exits() -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    log = RecordingLog()
    async with background_loop(broken(), name="t:broken", what="test loop", log=log) as task:
        with_exc = await asyncio.wait({task}, timeout=5)
        assert with_exc[0] == {task}
    assert isinstance(task.exception(), RuntimeError)
    assert [event for event, _ in log.errors] == ["test loop failed"]
    assert log.errors[0][1]["error"] == "RuntimeError: boom"


async def test_a_hub_kind_watch_relists_after_410_and_awaits_an_async_apply(tmp_path: Path) -> None:
    """watch_hub_kind (the job cache's, the queue cache's and member sync's MemberCluster watch): a watch
    from a compacted resourceVersion (410 Gone) lists again, and an async `apply` (member sync starts and
    stops a cluster's sync per event) is awaited for every event, in order."""
    store = MemoryStore()
    registry = hub_registry()
    hub = HubContext(store=store, storage=ObjectStorage(store, registry), registry=registry,
                     settings=HubSettings(state_dir=tmp_path), metrics=Metrics())
    rt = hub.kind("Queue")
    await hub.storage.create(rt, _queue("q1"), namespace=None)
    old = (await hub.storage.list(rt)).resource_version
    await hub.storage.create(rt, _queue("q2"), namespace=None)
    await hub.storage.create(rt, _queue("q4"), namespace=None)
    await store.compact(await store.current_revision())  # the events since `old` are gone
    relists: list[list[str]] = []
    applied: list[tuple[str, str]] = []
    seen = asyncio.Event()

    async def relist() -> str:
        listing = await hub.storage.list(rt)
        relists.append(sorted(Body(q).name for q in listing.items))
        return listing.resource_version

    async def apply(kind: str, obj: dict[str, Any]) -> None:
        await asyncio.sleep(0)  # an apply that is not awaited records nothing (and warns: an error here)
        applied.append((kind, Body(obj).name))
        seen.set()

    log = RecordingLog()
    async with background_loop(watch_hub_kind(hub, rt, relist=relist, apply=apply, log=log, resource_version=old),
                               name="t:watch", what="test watch", log=log):
        await asyncio.wait_for(log.relisted.wait(), 10)
        await hub.storage.create(rt, _queue("q3"), namespace=None)
        await asyncio.wait_for(seen.wait(), 10)
        await hub.storage.delete(rt, namespace=None, name="q1")

        async def deleted() -> None:
            while ("DELETED", "q1") not in applied:
                seen.clear()
                await seen.wait()

        await asyncio.wait_for(deleted(), 10)
    assert log.infos == ["Queue watch expired; re-listing"] and log.errors == []
    assert relists == [["q1", "q2", "q4"]]
    assert applied == [("ADDED", "q3"), ("DELETED", "q1")]
