"""The hub's namespace controller: kube's, over the hub registry.

`namespace_lifecycle` (a factory in hub/app.py's hub_controllers()) makes sure
kube's system namespaces exist (`default`, `kube-system`, `kube-public`) at the
start of each term, then watches Namespaces. A Namespace with a
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
from collections.abc import AsyncIterator, Mapping
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
from federator.controllers.loops import background_loop, watch_hub_kind
from federator.obs import RepeatedFailureLog, get_logger
from federator.store.protocol import StoreError

__all__ = ["NamespaceDeleter", "PassResult", "namespace_lifecycle"]

_log = get_logger("controllers.namespaces")

#: The longest wait between two passes over a Terminating namespace.
MAX_RETRY_SECONDS = 2.0


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

    def __init__(self, hub: HubContext) -> None:
        self.hub = hub
        self.workers: dict[str, asyncio.Task[None]] = {}
        self._failures = RepeatedFailureLog(_log, "namespace deletion pass failed; will retry", every_seconds=60.0)

    async def run(self) -> None:
        try:
            await watch_hub_kind(self.hub, NAMESPACES, relist=self._relist, apply=self._apply, log=_log)
        finally:
            for task in self.workers.values():
                task.cancel()
            for task in self.workers.values():
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _relist(self) -> str:
        listed = await self.hub.storage.list(NAMESPACES)
        for obj in listed.items:
            self._apply("ADDED", obj)
        return listed.resource_version

    def _apply(self, event: str, obj: dict[str, Any]) -> None:
        body = Body(obj)
        if event == "DELETED" or not body.deleting:
            return
        task = self.workers.get(body.name)
        if task is None or task.done():
            self.workers[body.name] = asyncio.get_running_loop().create_task(
                self._delete_namespace(body.name), name=f"hub-namespace-delete:{body.name}")

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
    deleter = NamespaceDeleter(hub)
    async with background_loop(deleter.run(), name="hub-namespaces", what="namespace controller", log=_log):
        yield
