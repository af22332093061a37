"""The hub's namespace controller: kube's, over the hub registry.

`NamespaceCache` (`hub.parts.namespaces`) is the term's one list+watch of the
hub's Namespaces (one watch per kind per process, as the job cache is for
TrainingJobs): it runs while anyone holds it (`hold()`/`release()`: the
placement loop's Queue checks read namespaces' labels through it, this
controller its deletions) and tells its subscribers of every change.

`namespace_lifecycle` (a factory in hub/app.py's hub_controllers()) makes sure
kube's system namespaces exist (`default`, `kube-system`, `kube-public`) at the
start of each term, then follows Namespaces through the cache. A Namespace with a
deletionTimestamp (phase Terminating) gets one worker (`NamespaceDeleter`) that,
pass after pass:

1. deletes every object of every namespaced kind of the hub registry that can
   be deleted (generic: TrainingJobs, the upstream job kinds, anything added
   later), except Events, in-process through `hub.storage`. A TrainingJob
   with the member-cleanup finalizer only turns Terminating: controllers/
   cleanup.py removes its member objects through dispatch, then the finalizer;
2. once no such object is left, deletes the namespace's Events (what the
   deletions above recorded included);
3. writes the namespace's status conditions as kube's namespace controller
   does (NamespaceDeletionContentFailure, NamespaceContentRemaining,
   NamespaceFinalizersRemaining);
4. when the namespace is empty, removes the "kubernetes" finalizer from
   spec.finalizers (the finalize subresource) and deletes the namespace.

A pass that leaves objects behind is repeated after `namespace_retry_seconds`
(HubSettings.namespaces), doubling up to 2 s. Views stored as another kind
(events.k8s.io Events are core Events) are not deleted twice.

It never writes member clusters (cleanup and dispatch do) and never creates
objects other than the system namespaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.apiserver.namespaces import (
    CONDITION_CONTENT_FAILURE,
    CONDITION_CONTENT_REMAINING,
    CONDITION_FINALIZERS_REMAINING,
    KUBERNETES_FINALIZER,
    NAMESPACES,
    SYSTEM_NAMESPACES,
    ensure_namespaces,
)
from federator.apiserver.registry import ResourceType
from federator.controllers.context import HubContext
from federator.controllers.jobs import set_condition
from federator.controllers.loops import watch_hub_kind
from federator.hub.kinds import namespace_labels
from federator.obs import RepeatedFailureLog, get_logger
from federator.runtime.tasks import spawn, stop_task
from federator.store.protocol import StoreError

__all__ = ["NamespaceCache", "NamespaceDeleter", "NamespaceListener", "PassResult", "namespace_lifecycle"]

_log = get_logger("controllers.namespaces")

#: The longest wait between two passes over a Terminating namespace.
MAX_RETRY_SECONDS = 2.0


#: listener(namespace name, the stored Namespace or None once it is gone)
NamespaceListener = Callable[[str, dict[str, Any] | None], None]


class NamespaceCache:
    """The hub's Namespaces by name, kept by one list+watch (re-list after 410) that runs while it is held.

    `hold()` starts the watch for the first holder and returns once the first list is in; `release()` by the
    last holder stops it. Subscribers are told every change, in order, and must not block or change the
    object they are handed. It never writes."""

    def __init__(self, hub: HubContext) -> None:
        self.hub = hub
        #: None when the hub's registry serves no Namespace kind (then no namespace has labels of its own)
        self.rt: ResourceType | None = hub.registry.get(NAMESPACES.group, NAMESPACES.version, NAMESPACES.plural)
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self._listeners: list[NamespaceListener] = []
        self._holders = 0
        self._task: asyncio.Task[None] | None = None

    def subscribe(self, listener: NamespaceListener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: NamespaceListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def labels_of(self, namespace: str) -> dict[str, str]:
        """The labels of `namespace` as a Queue's namespaceSelector sees them (its name label when not stored)."""
        return namespace_labels(namespace, self.objects.get(namespace))

    async def hold(self) -> None:
        """Keep the cache filled until `release()`; returns once it has listed the Namespaces."""
        self._holders += 1
        if self.rt is None:
            self.synced.set()
            return
        if self._task is None:
            self._task = spawn(watch_hub_kind(self.hub, self.rt, relist=self._relist, apply=self._apply, log=_log),
                               name="namespaces:watch", log=_log, event="Namespace cache watch failed")
        await self.synced.wait()

    async def release(self) -> None:
        self._holders = max(0, self._holders - 1)
        if self._holders == 0 and self._task is not None:
            task, self._task = self._task, None
            await stop_task(task)

    def _tell(self, name: str, obj: dict[str, Any] | None) -> None:
        for listener in list(self._listeners):
            try:
                listener(name, obj)
            except Exception as e:  # noqa: BLE001 - a subscriber's bug must not stop the others or the watch
                _log.error("a namespace cache subscriber failed", namespace=name, error=f"{type(e).__name__}: {e}",
                           exc_info=True)

    async def _relist(self) -> str:
        assert self.rt is not None
        listing = await self.hub.storage.list(self.rt)
        present = set()
        for obj in listing.items:
            present.add(Body(obj).name)
            self._apply("ADDED", obj)
        for name in set(self.objects) - present:
            self._apply("DELETED", {"metadata": {"name": name}})
        self.synced.set()
        return listing.resource_version

    def _apply(self, event: str, obj: dict[str, Any]) -> None:
        name = Body(obj).name
        if not name:
            return
        if event == "DELETED":
            if self.objects.pop(name, None) is not None:
                self._tell(name, None)
        elif event in ("ADDED", "MODIFIED"):
            self.objects[name] = obj
            self._tell(name, obj)


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one pass over a Terminating namespace found: objects left (by qualified resource), objects left
    that wait on finalizers (by finalizer), and deletes that failed (their messages)."""

    remaining: Mapping[str, int]
    finalizers: Mapping[str, int]
    failures: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.remaining and not self.failures


def _content_kinds(hub: HubContext) -> list[ResourceType]:
    """Every namespaced kind the hub stores and can delete, Events last (the deletions record Events)."""
    kinds = [rt for rt in hub.registry if rt.namespaced and "delete" in rt.verbs and rt.stored_as is None]
    return sorted(kinds, key=lambda rt: rt.kind == "Event")


class NamespaceDeleter:
    """Empties Terminating namespaces and then removes them (see the module docstring)."""

    def __init__(self, hub: HubContext, namespaces: NamespaceCache) -> None:
        self.hub = hub
        self.namespaces = namespaces
        self.workers: dict[str, asyncio.Task[None]] = {}
        self._failures = RepeatedFailureLog(_log, "namespace deletion pass failed; will retry", every_seconds=60.0)

    async def start(self) -> None:
        """Follow the namespace cache: every Terminating namespace, those already listed first."""
        self.namespaces.subscribe(self._apply)
        await self.namespaces.hold()
        for name, obj in list(self.namespaces.objects.items()):
            self._apply(name, obj)

    async def stop(self) -> None:
        self.namespaces.unsubscribe(self._apply)
        await self.namespaces.release()
        workers, self.workers = list(self.workers.values()), {}
        for task in workers:
            task.cancel()
        for task in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _apply(self, name: str, obj: dict[str, Any] | None) -> None:
        if obj is None or not Body(obj).deleting:
            return
        task = self.workers.get(name)
        if task is None or task.done():
            self.workers[name] = asyncio.get_running_loop().create_task(
                self._delete_namespace(name), name=f"hub-namespace-delete:{name}")

    async def _delete_namespace(self, name: str) -> None:
        wait = self.hub.settings.namespaces.retry_seconds
        rng = random.Random()
        while True:
            try:
                if await self.step(name):
                    return
            except (ApiError, StoreError) as e:
                self._failures.failed(e, now=time.monotonic())
            await asyncio.sleep(wait * (0.5 + rng.random() / 2))
            wait = min(MAX_RETRY_SECONDS, wait * 2)

    async def step(self, name: str) -> bool:
        """One pass over namespace `name`: True when it is gone (or was never Terminating)."""
        try:
            ns = await self.hub.storage.get(NAMESPACES, namespace=None, name=name)
        except ApiError as e:
            if e.code == 404:
                return True
            raise
        if not Body(ns).deleting:
            return True
        result = await self.delete_content(name)
        await self._write_conditions(name, result)
        if not result.empty:
            return False
        await self._finalize(name)
        return True

    async def delete_content(self, namespace: str) -> PassResult:
        """Delete what is left in `namespace` (Events only once nothing else is left)."""
        remaining: dict[str, int] = {}
        finalizers: dict[str, int] = {}
        failures: list[str] = []
        for rt in _content_kinds(self.hub):
            if rt.kind == "Event" and remaining:
                continue
            # read from the store at its current revision (never a cache that may lag): a namespace found
            # empty is removed for good
            now = await self.hub.storage.current_resource_version()
            listing = await self.hub.storage.list(rt, namespace=namespace, resource_version=now,
                                                  resource_version_match="Exact")
            for obj in listing.items:
                body = Body(obj)
                remaining[rt.qualified_resource] = remaining.get(rt.qualified_resource, 0) + 1
                for finalizer in body.finalizers:
                    if isinstance(finalizer, str):
                        finalizers[finalizer] = finalizers.get(finalizer, 0) + 1
                if body.deleting:
                    continue  # its finalizers' controllers finish it
                try:
                    deleted = await self.hub.storage.delete_ex(rt, namespace=namespace, name=body.name)
                except ApiError as e:
                    if e.code == 404:
                        remaining[rt.qualified_resource] -= 1
                        continue
                    failures.append(f"Failed to delete {rt.qualified_resource} {body.name}: {e.message}")
                    continue
                if deleted.deleted:
                    remaining[rt.qualified_resource] -= 1
        return PassResult(remaining={k: v for k, v in remaining.items() if v > 0}, finalizers=finalizers,
                          failures=tuple(failures))

    async def _write_conditions(self, name: str, result: PassResult) -> None:
        now = time.time()

        def mutate(ns: dict[str, Any]) -> dict[str, Any] | None:
            status = ns.setdefault("status", {})
            changed = False
            if result.failures:
                changed |= set_condition(status, type=CONDITION_CONTENT_FAILURE, state="True",
                                         reason="ContentDeletionFailed", message="; ".join(result.failures),
                                         now=now)
            else:
                changed |= set_condition(status, type=CONDITION_CONTENT_FAILURE, state="False",
                                         reason="ContentDeleted", message="All content successfully deleted, "
                                         "may be waiting on finalization", now=now)
            if result.remaining:
                shown = ", ".join(f"{k} has {v} resource instances" for k, v in sorted(result.remaining.items()))
                changed |= set_condition(status, type=CONDITION_CONTENT_REMAINING, state="True",
                                         reason="SomeResourcesRemain", message=f"Some resources are remaining: "
                                         f"{shown}", now=now)
            else:
                changed |= set_condition(status, type=CONDITION_CONTENT_REMAINING, state="False",
                                         reason="ContentRemoved", message="All content successfully removed",
                                         now=now)
            if result.finalizers and result.remaining:
                shown = ", ".join(f"{k} in {v} resource instances" for k, v in sorted(result.finalizers.items()))
                changed |= set_condition(status, type=CONDITION_FINALIZERS_REMAINING, state="True",
                                         reason="SomeFinalizersRemain", message="Some content in the namespace has "
                                         f"finalizers remaining: {shown}", now=now)
            else:
                changed |= set_condition(status, type=CONDITION_FINALIZERS_REMAINING, state="False",
                                         reason="ContentHasNoFinalizers", message="All content-preserving "
                                         "finalizers finished", now=now)
            return ns if changed else None

        await self.hub.storage.guaranteed_update(NAMESPACES, namespace=None, name=name, mutate=mutate,
                                                 subresource="status")

    async def _finalize(self, name: str) -> None:
        def finalize(ns: dict[str, Any]) -> dict[str, Any]:
            spec = ns.setdefault("spec", {})
            spec["finalizers"] = [f for f in spec.get("finalizers") or () if f != KUBERNETES_FINALIZER]
            return ns

        try:
            ns = await self.hub.storage.guaranteed_update(NAMESPACES, namespace=None, name=name, mutate=finalize,
                                                          subresource="finalize")
            others = Body(ns).spec.get("finalizers") if ns is not None else None
            if others:  # someone else's spec.finalizers: the namespace goes once they remove theirs
                _log.info("namespace emptied; waiting for other finalizers", namespace=name, finalizers=others)
                return
            await self.hub.storage.delete(NAMESPACES, namespace=None, name=name, grace_period_seconds=0)
        except ApiError as e:
            if e.code != 404:
                raise
        _log.info("namespace deleted", namespace=name)


async def namespace_lifecycle(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: the system namespaces, then the deleter of Terminating namespaces."""
    try:
        await ensure_namespaces(hub.storage, SYSTEM_NAMESPACES)
    except (ApiError, StoreError) as e:  # the API's start made them too; a term must not fail on this
        _log.warning("could not make sure the system namespaces exist", error=str(e))
    deleter = NamespaceDeleter(hub, hub.parts.namespaces)
    await deleter.start()
    try:
        yield
    finally:
        await deleter.stop()
