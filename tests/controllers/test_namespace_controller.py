"""The namespace controller's passes over one Terminating namespace, in-process (sqlite-free memory store,
the hub registry plus a stand-in namespaced kind of another group: deletion is generic over namespaced kinds).

A pass deletes every namespaced object (Events only once nothing else is left), reports what remains and
which finalizers hold it in the namespace's conditions, and finalizes and removes the namespace once it is
empty; other namespaces are untouched.
"""

from __future__ import annotations

import asyncio
import contextlib

from pathlib import Path
from typing import Any

from federator.apiserver.errors import ApiError
from federator.apiserver.namespaces import NAMESPACES, ensure_namespaces
from federator.apiserver.registry import Registry, ResourceType
from federator.apiserver.storage import ObjectStorage
from federator.controllers.context import HubContext, HubSettings
from federator.controllers.namespaces import NamespaceCache, NamespaceDeleter
from federator.hub.kinds import hub_registry
from federator.obs import Metrics
from federator.store.memory import MemoryStore

API = "federator.dev/v1alpha1"
#: a namespaced kind of another group that no controller knows of (deletion must be generic over the registry)
WIDGETS = ResourceType(group="example.com", version="v1", kind="Widget", plural="widgets",
                           singular="widget", namespaced=True)


def _hub(tmp_path: Path) -> HubContext:
    store = MemoryStore()
    registry = Registry([*hub_registry(), WIDGETS])
    return HubContext(store=store, storage=ObjectStorage(store, registry), registry=registry,
                      settings=HubSettings(state_dir=tmp_path), metrics=Metrics())


def _job(namespace: str, name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name, "namespace": namespace, **meta},
            "spec": {"roles": [{"name": "worker", "replicas": 1,
                                "template": {"image": "trainer:1.4", "resources": {"cpu": "1"}}}]}}


def _event(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {"kind": "TrainingJob", "namespace": namespace, "name": "a"},
            "reason": "Placed", "message": "placed", "type": "Normal", "count": 1,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
            "source": {"component": "test"}}


async def _names(hub: HubContext, rt: ResourceType, namespace: str) -> list[str]:
    return [o["metadata"]["name"] for o in (await hub.storage.list(rt, namespace=namespace)).items]


async def test_passes_empty_the_namespace_then_remove_it(tmp_path: Path) -> None:
    hub = _hub(tmp_path)
    storage = hub.storage
    await storage.start()
    try:
        jobs = hub.kind("TrainingJob")
        events = hub.registry.get("", "v1", "events")
        assert events is not None
        await ensure_namespaces(storage, ["doomed", "kept"])
        for ns in ("doomed", "kept"):
            await storage.create(jobs, _job(ns, "a"), namespace=ns)
            await storage.create(jobs, _job(ns, "held", finalizers=["example.com/hold"]), namespace=ns)
            await storage.create(WIDGETS, {"apiVersion": "example.com/v1", "kind": "Widget",
                                               "metadata": {"name": "pt", "namespace": ns}}, namespace=ns)
            await storage.create(events, _event(ns, "a.1"), namespace=ns)
        deleter = NamespaceDeleter(hub, NamespaceCache(hub))
        assert await deleter.step("doomed")  # not Terminating: nothing to do
        assert await _names(hub, jobs, "doomed") == ["a", "held"]

        await storage.delete(NAMESPACES, namespace=None, name="doomed")
        assert not await deleter.step("doomed")
        # everything but the held job is gone; the Events wait until nothing else is left
        assert await _names(hub, jobs, "doomed") == ["held"]
        assert await _names(hub, WIDGETS, "doomed") == []
        assert await _names(hub, events, "doomed") == ["a.1"]
        ns = await storage.get(NAMESPACES, namespace=None, name="doomed")
        assert ns["status"]["phase"] == "Terminating" and ns["spec"]["finalizers"] == ["kubernetes"]
        conditions = {c["type"]: c for c in ns["status"]["conditions"]}
        assert conditions["NamespaceContentRemaining"]["status"] == "True"
        assert conditions["NamespaceContentRemaining"]["message"] == (
            "Some resources are remaining: trainingjobs.federator.dev has 1 resource instances")
        assert conditions["NamespaceFinalizersRemaining"]["message"] == (
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")
        assert conditions["NamespaceDeletionContentFailure"]["status"] == "False"

        await storage.guaranteed_update(jobs, namespace="doomed", name="held", mutate=lambda j: {
            **j, "metadata": {**j["metadata"], "finalizers": []}})
        assert await _names(hub, jobs, "doomed") == []
        assert await deleter.step("doomed")
        assert await _names(hub, events, "doomed") == []
        try:
            await storage.get(NAMESPACES, namespace=None, name="doomed")
            raise AssertionError("the namespace is still there")
        except ApiError as e:
            assert e.code == 404
        # the other namespace is untouched
        assert await _names(hub, jobs, "kept") == ["a", "held"]
        assert await _names(hub, WIDGETS, "kept") == ["pt"]
        assert await _names(hub, events, "kept") == ["a.1"]
        assert await deleter.step("doomed")  # gone: done
    finally:
        await storage.close()


async def test_the_queue_cache_follows_the_namespaces_labels(tmp_path: Path) -> None:
    """What placement's queue check sees of a namespace: its stored labels (kept by the one Namespace cache,
    which the queue cache holds while it runs) and its name; a change wakes placement."""
    from federator.controllers.queues import QueueCache

    from .jobtest_support import wait_until

    hub = _hub(tmp_path)
    await hub.storage.start()
    changes: list[int] = []
    namespaces = NamespaceCache(hub)
    cache = QueueCache(hub, namespaces=namespaces, on_change=lambda: changes.append(1))
    try:
        await hub.storage.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": "team", "labels": {"org": "vision"}}},
                                 namespace=None)
        rv = await cache.list()
        assert cache.labels_of("team") == {"org": "vision", "kubernetes.io/metadata.name": "team"}
        assert cache.labels_of("unknown") == {"kubernetes.io/metadata.name": "unknown"}
        task = asyncio.create_task(cache.run(rv))
        try:
            before = len(changes)
            await hub.storage.guaranteed_update(NAMESPACES, namespace=None, name="team", mutate=lambda ns: {
                **ns, "metadata": {**ns["metadata"], "labels": {"org": "nlp"}}})
            await wait_until(lambda: cache.labels_of("team").get("org") == "nlp", what="the label change")
            assert len(changes) > before  # placement is woken
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await cache.stop()
        # the last holder let go: the cache's watch stopped
        assert namespaces._task is None and namespaces._holders == 0
    finally:
        await hub.storage.close()
