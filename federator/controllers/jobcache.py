"""The hub's one TrainingJob cache: one list+watch of TrainingJobs per term, which every controller subscribes to.

`JobCache` keeps every stored TrainingJob by uid (re-list only after 410, the
watch resumed from the last resourceVersion otherwise: `loops.watch_hub_kind`)
and tells each subscriber `listener(uid, job or None when deleted)` after every
change, in order (kopf's one watcher per kind feeding per-object consumers).
Placement indexes its queue from it, status sync, stuck-gang detection,
failover, drain and cleanup read it and react to it; none of them lists or
watches TrainingJobs itself.

The hub builds one per term (hub/app.py `build_pipeline`) and `job_cache(hub)`
(a cleanup_ctx-style factory listed first among the job controllers in
hub_controllers()) runs its watch. Subscribers must not block and must not
change the job they are handed (it is the cache's object). It never writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from federator.apis.views import Body
from federator.controllers.context import HubContext
from federator.controllers.loops import background_loop, watch_hub_kind
from federator.obs import get_logger

__all__ = ["JobCache", "JobListener", "job_cache"]

_log = get_logger("controllers.jobcache")

#: the kind this cache holds (jobs.JOB_KIND; not imported from there: jobs.py imports nothing of the pipeline)
JOB_KIND = "TrainingJob"


JobListener = Callable[[str, dict[str, Any] | None], None]


class JobCache:
    """The hub's TrainingJobs by uid, kept by a list+watch (re-list after 410); notifies subscribers."""

    def __init__(self, hub: HubContext) -> None:
        self.hub = hub
        self.rt = hub.kind(JOB_KIND)
        self.jobs: dict[str, dict[str, Any]] = {}
        self._listeners: list[JobListener] = []
        self.synced = asyncio.Event()

    def subscribe(self, listener: JobListener) -> None:
        """`listener(uid, job or None when deleted)` on every change."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: JobListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def get(self, uid: str) -> dict[str, Any] | None:
        return self.jobs.get(uid)

    def _set(self, job: dict[str, Any]) -> None:
        uid = Body(job).uid
        if uid:
            self.jobs[uid] = job
            self._tell(uid, job)

    def _drop(self, uid: str) -> None:
        if self.jobs.pop(uid, None) is not None:
            self._tell(uid, None)

    def _tell(self, uid: str, job: dict[str, Any] | None) -> None:
        """Every subscriber, in order; one that fails is logged and the others (and the watch) go on."""
        for listener in list(self._listeners):
            try:
                listener(uid, job)
            except Exception as e:  # noqa: BLE001 - a subscriber's bug must not stop every controller's cache
                _log.error("a job cache subscriber failed", job_uid=uid, subscriber=repr(listener)[:200],
                           error=f"{type(e).__name__}: {e}", exc_info=True)

    async def _relist(self) -> str:
        listing = await self.hub.storage.list(self.rt)
        present = set()
        for job in listing.items:
            present.add(Body(job).uid)
            self._set(job)
        for uid in set(self.jobs) - present:
            self._drop(uid)
        self.synced.set()
        return listing.resource_version

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._drop(Body(obj).uid)
        elif kind in ("ADDED", "MODIFIED"):
            self._set(obj)

    async def run(self) -> None:
        await watch_hub_kind(self.hub, self.rt, relist=self._relist, apply=self._apply, log=_log)


async def job_cache(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: runs the term's job cache watch (`hub.parts.jobs`)."""
    jobs = hub.parts.jobs
    async with background_loop(jobs.run(), name="jobcache:watch", what="TrainingJob cache watch", log=_log):
        yield
