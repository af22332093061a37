"""The shape every emulated operator shares: controller-runtime's reconcile loop, reduced.

`run_reconciler` watches the owner kind and the kinds it owns, turns every event into the key (namespace, name)
of the owner (a child maps to its controller ownerReference of the owner's kind), and one worker reconciles the
keys in order, each at most once at a time (a key that changes while it is reconciled is queued again). A
reconcile returns the seconds after which to look again (a requeue), or None. `watch_forever` (also the garbage
collector's) starts a watch that ends (410 after a compaction) or fails again from a fresh list, after a capped
back-off. Also the owner references and conditions helpers the operators use.

It never imports the hub.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

from federator.apis.views import Body
from federator.apis.timestamps import format_time
from federator.apiserver.errors import ApiError
from federator.apiserver.registry import JSONObject, ResourceType
from federator.apiserver.storage import ObjectStorage
from federator.runtime.tasks import spawn, stop_tasks
from federator.runtime.waits import wait_event

Key = tuple[str, str]
Reconcile = Callable[[str, str], Awaitable[float | None]]


def now() -> str:
    return format_time(dt.datetime.now(dt.UTC))


def controller_ref(owner: Mapping[str, Any]) -> dict[str, Any]:
    """metav1.NewControllerRef: the owner as a controlling, deletion-blocking reference."""
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in Body(obj).metadata.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def owned_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    ref = controller_of(obj)
    return ref is not None and ref.get("uid") == owner["metadata"]["uid"]


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return None


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    c = condition(obj, kind)
    return c is not None and c.get("status") == "True"


def set_condition(conditions: list[dict[str, Any]], kind: str, status: str, reason: str, message: str, *,
                  probe: bool = False) -> bool:
    """Set one condition in place (the transition time changes only with the status; with `probe`,
    lastProbeTime too, as batch Job conditions carry it). True when something changed."""
    stamp = now()
    for c in conditions:
        if c.get("type") == kind:
            if c.get("status") == status and c.get("reason") == reason and c.get("message") == message:
                return False
            if c.get("status") != status:
                c["lastTransitionTime"] = stamp
                if probe:
                    c["lastProbeTime"] = stamp
            c.update(status=status, reason=reason, message=message)
            return True
    new: dict[str, Any] = {"type": kind, "status": status, "reason": reason, "message": message,
                           "lastTransitionTime": stamp}
    if probe:
        new["lastProbeTime"] = stamp
    conditions.append(new)
    return True


async def delete_quietly(storage: ObjectStorage, rt: ResourceType, obj: Mapping[str, Any]) -> None:
    """Delete `obj` (its uid as precondition); gone already or replaced is fine."""
    meta = obj["metadata"]
    try:
        await storage.delete(rt, namespace=meta.get("namespace"), name=meta["name"], precondition_uid=meta["uid"])
    except ApiError as e:
        if e.code not in (404, 409):
            raise


async def write_status(storage: ObjectStorage, rt: ResourceType, obj: JSONObject,
                       status: Mapping[str, Any]) -> None:
    """Replace the status of `obj` (same uid) when it differs."""
    meta = obj["metadata"]

    def mutate(current: JSONObject) -> JSONObject | None:
        if current["metadata"].get("uid") != meta["uid"] or current.get("status") == status:
            return None
        current["status"] = dict(status)
        return current

    try:
        await storage.guaranteed_update(rt, namespace=meta["namespace"], name=meta["name"], mutate=mutate,
                                        subresource="status", trusted_status=True)
    except ApiError as e:
        if e.code != 404:
            raise


async def run_until_stopped(loops: Mapping[str, Coroutine[Any, Any, None]], *, stop: asyncio.Event,
                            logger: Any) -> None:
    """Run `loops` (name -> coroutine) as supervised tasks (`runtime.tasks.spawn`: a failure is logged in full)
    until `stop` is set or one of them fails; then stop them all and raise the first failure."""
    tasks = [spawn(coro, name=name, log=logger, event="operator loop failed") for name, coro in loops.items()]
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        failures = await stop_tasks([*tasks, stopper])
    failures = [f for f in failures if not isinstance(f, asyncio.CancelledError)]
    if failures:
        raise failures[0]


async def watch_forever(storage: ObjectStorage, rt: ResourceType, *, stop: asyncio.Event, logger: Any,
                        handle: Callable[[ResourceType, str, JSONObject], Awaitable[None]],
                        on_restart: Callable[[], Awaitable[None]] | None = None) -> None:
    """Every watch event of `rt` to `handle(rt, type, object)` until `stop`; a watch that ends (410 after a
    compaction) or fails starts again from a fresh list after a capped, jittered back-off (`on_restart` first)."""
    attempt = 0
    while not stop.is_set():
        try:
            async for ev in storage.watch(rt, stop=stop):
                attempt = 0
                await handle(rt, ev.type, ev.object)
            delay = 0.05  # the storage closed under it: the cluster is stopping
        except ApiError as e:
            attempt += 1
            delay = min(5.0, 0.05 * 2 ** attempt) * (0.5 + random.random() / 2)
            logger.info("watch ended; watching again", resource=rt.plural, code=e.code, wait_s=round(delay, 3))
        except Exception:  # the operator must keep watching; the cause is logged in full
            attempt += 1
            delay = min(5.0, 0.05 * 2 ** attempt)
            logger.exception("watch failed; watching again", resource=rt.plural)
        if await wait_event(stop, delay):
            return
        if on_restart is not None:
            await on_restart()


async def run_reconciler(
    *,
    storage: ObjectStorage,
    stop: asyncio.Event,
    logger: Any,
    owner: ResourceType,
    children: Sequence[ResourceType],
    reconcile: Reconcile,
) -> None:
    """Watch `owner` and `children`, reconcile owner keys until `stop` (module docstring). A child maps to its
    controller reference when that names the owner's kind."""
    queue: asyncio.Queue[Key] = asyncio.Queue()
    queued: set[Key] = set()
    loop = asyncio.get_running_loop()

    def enqueue(key: Key) -> None:
        if key not in queued:
            queued.add(key)
            queue.put_nowait(key)

    def key_of(rt: ResourceType, obj: Mapping[str, Any]) -> Key | None:
        meta = Body(obj)
        if rt is owner:
            return meta.namespace, meta.name
        ref = controller_of(obj)
        if ref is None or ref.get("kind") != owner.kind:
            return None
        return meta.namespace, str(ref.get("name", ""))

    async def on_event(rt: ResourceType, kind: str, obj: JSONObject) -> None:
        key = key_of(rt, obj)
        if key is not None:
            enqueue(key)

    async def work() -> None:
        while not stop.is_set():  # cancelled when `stop` is set (below)
            key = await queue.get()
            queued.discard(key)
            try:
                again = await reconcile(*key)
            except ApiError as e:
                logger.info("reconcile failed; trying again", namespace=key[0], name=key[1], code=e.code,
                            error=e.message)
                again = 0.5
            except Exception:  # a bug in one reconcile must not stop the operator; it is logged in full
                logger.exception("reconcile crashed; trying again", namespace=key[0], name=key[1])
                again = 2.0
            if again is not None:
                loop.call_later(again, enqueue, key)

    loops: dict[str, Coroutine[Any, Any, None]] = {
        f"watch:{rt.plural}": watch_forever(storage, rt, stop=stop, logger=logger, handle=on_event)
        for rt in (owner, *children)}
    loops[f"reconcile:{owner.plural}"] = work()
    await run_until_stopped(loops, stop=stop, logger=logger)
