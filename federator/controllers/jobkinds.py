"""The twin controller of the upstream job kinds (issue 28, render mode): every object of a kind in
`federator.apis.jobkinds.JOB_KINDS` (a PyTorchJob, ...) gets a *twin* TrainingJob of the same namespace and name,
owned by it (ownerReference, controller=true) and annotated with the source kind; placement, quotas, failover and
the rest handle the twin as any TrainingJob, and this controller mirrors the twin's state back onto the source.

Per source object (one watch per served kind; the twins' changes come from the term's job cache):
- no twin: create it from the translation (`jobkinds.base.twin_trainingjob`); admission (priority class, queue)
  runs on it as on any TrainingJob;
- a TrainingJob of that name that this object does not own is never adopted or overwritten: the source gets
  condition Created=False, reason NameTaken, and an Event, and waits (deleting the other job lets it go on);
- an owned twin follows what TrainingJob lets change: spec.suspend and the worker's elastic bounds;
- status: the kind's `JobKind.mirror_status` of the twin (default: the Kubeflow operators' status,
  apis/jobkinds/kubeflowstatus.py: conditions Created, Running, Succeeded, Failed, Suspended, replicaStatuses,
  startTime, completionTime), which also carries the hub's status.phase, status.cluster and status.epoch (the
  Phase and Cluster columns, and status.mode: the Mode column of `-o wide`); in operator mode the conditions and
  the kind's `JobKind.mirrored_status_fields` (JobSet's replicatedJobsStatus, Kubeflow's replicaStatuses, a
  Job's counts, ...) are the member copy's, as its operator wrote them (the twin's status.operator, which status
  sync keeps: `jobkinds.status.operator_conditions`);
- deletion: the source carries SOURCE_FINALIZER (hub/kinds.py puts it on when this controller runs); it deletes
  the twin and removes the finalizer once the twin is gone (the twin's own cleanup finalizer goes only after its
  member objects are gone).

It writes only source objects (their status and finalizer) and twins (create, the two spec fields, delete); it
never writes a TrainingJob it does not own, and never member objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from federator.apis.jobkinds import (
    JOB_KINDS,
    SOURCE_KIND_ANNOTATION,
    JobKind,
    controller_of_kind,
    job_kind_by_source,
)
from federator.apis.jobkinds.base import twin_trainingjob
from federator.apis.jobkinds.kubeflowstatus import kubeflow_status_of
from federator.apis.jobkinds.status import operator_conditions
from federator.apis.timestamps import format_time
from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.apiserver.registry import ResourceType
from federator.controllers.context import HubContext
from federator.delegation.membercopy import suspended
from federator.controllers.loops import background_loop, watch_hub_kind
from federator.hub.kinds import SOURCE_FINALIZER, translate_source
from federator.obs import get_logger
from federator.store.protocol import StoreError

__all__ = ["JobKindTwins", "job_kind_twins"]

_log = get_logger("controllers.jobkinds")
_CONTROLLER = "jobkinds"
_RETRY_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class _Key:
    source: str  # JobKind.source_key
    namespace: str
    name: str


def _owner_uid(job: Mapping[str, Any], kind: JobKind) -> str | None:
    """The uid of the `kind` object that controls `job`, if any."""
    ref = controller_of_kind(job, kind)
    return ref["uid"] if ref is not None else None


class JobKindTwins:
    """One watch per served kind, the job cache for the twins, one worker that reconciles keys in order."""

    def __init__(self, hub: HubContext) -> None:
        self.hub = hub
        self.tj: ResourceType = hub.kind("TrainingJob")
        self.kinds: dict[str, tuple[JobKind, ResourceType]] = {}
        for kind in JOB_KINDS:
            rt = hub.registry.by_kind(kind.api_version, kind.kind)
            if rt is not None:
                self.kinds[kind.source_key] = (kind, rt)
        self._queue: asyncio.Queue[_Key] = asyncio.Queue()
        self._pending: set[_Key] = set()
        self._twins: dict[str, _Key] = {}  # twin uid -> source key
        #: every TrainingJob's uid -> (namespace, name), and the sources waiting for a foreign job of that
        #: (namespace, name) to go (NameTaken): its deletion brings them back
        self._names: dict[str, tuple[str, str]] = {}
        self._blocked: dict[tuple[str, str], _Key] = {}

    def enqueue(self, key: _Key) -> None:
        if key not in self._pending:
            self._pending.add(key)
            self._queue.put_nowait(key)

    def on_twin(self, uid: str, job: dict[str, Any] | None) -> None:
        """Job cache listener: a twin changed or went away."""
        if job is None:
            key = self._twins.pop(uid, None)
            if key is not None:
                self.enqueue(key)
            waiting = self._blocked.pop(self._names.pop(uid, ("", "")), None)
            if waiting is not None:
                self.enqueue(waiting)
            return
        self._names[uid] = (Body(job).namespace, Body(job).name)
        source = Body(job).annotations.get(SOURCE_KIND_ANNOTATION)
        if isinstance(source, str) and source in self.kinds:
            key = _Key(source, Body(job).namespace, Body(job).name)
            self._twins[uid] = key
            self.enqueue(key)

    async def watch(self, source: str) -> None:
        kind, rt = self.kinds[source]

        async def relist() -> str:
            listing = await self.hub.storage.list(rt)
            for obj in listing.items:
                self.enqueue(_Key(source, Body(obj).namespace, Body(obj).name))
            return listing.resource_version

        def apply(event: str, obj: dict[str, Any]) -> None:
            if event in ("ADDED", "MODIFIED", "DELETED"):
                self.enqueue(_Key(source, Body(obj).namespace, Body(obj).name))

        await watch_hub_kind(self.hub, rt, relist=relist, apply=apply, log=_log)

    async def work(self) -> None:
        while True:
            key = await self._queue.get()
            self._pending.discard(key)
            try:
                await self.reconcile(key)
            except (ApiError, StoreError) as e:
                _log.warning("reconciling a job kind's twin failed; retrying", kind=key.source,
                             namespace=key.namespace, name=key.name, error=str(e)[:300],
                             waiting_for="the hub store")
                asyncio.get_running_loop().call_later(_RETRY_SECONDS, self.enqueue, key)

    async def _get(self, rt: ResourceType, key: _Key) -> dict[str, Any] | None:
        try:
            return await self.hub.storage.get(rt, namespace=key.namespace, name=key.name)
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    async def reconcile(self, key: _Key) -> None:
        kind, rt = self.kinds[key.source]
        source = await self._get(rt, key)
        twin = await self._get(self.tj, key)
        owned = twin is not None and source is not None and _owner_uid(twin, kind) == Body(source).uid
        if source is None:
            # deleted without our finalizer (or it is gone already): a twin it owned goes too
            if twin is not None and _owner_uid(twin, kind) is not None and job_kind_by_source(
                    Body(twin).annotations.get(SOURCE_KIND_ANNOTATION, "")) is kind:
                await self._delete_twin(twin, key)
            return
        if Body(source).deleting:
            if owned and twin is not None:
                await self._delete_twin(twin, key)
                return  # the twin's deletion (after its member objects) brings us back
            await self._drop_finalizer(rt, key, Body(source).uid)
            return
        blocked = None
        if twin is None:
            translation = await translate_source(self.hub.storage, kind, source, self.hub.settings.validation)
            if translation.spec is None:
                blocked = "TranslationFailed: " + "; ".join(f"{p}: {m}" for p, m in translation.errors[:5])
            else:
                try:
                    twin = await self.hub.storage.create(self.tj, twin_trainingjob(kind, source, translation),
                                                         namespace=key.namespace)
                    owned = True
                    self.hub.events.record(source, controller=_CONTROLLER, reason="TwinCreated",
                                           message=f"TrainingJob {key.namespace}/{key.name} created to run this "
                                                   f"{kind.kind}")
                except ApiError as e:
                    if e.code == 409:
                        self.enqueue(key)  # someone made one meanwhile: look again
                        return
                    blocked = f"TwinRefused: {e.message[:1000]}"
                    self.hub.events.record(source, controller=_CONTROLLER, reason="TwinRefused", warning=True,
                                           message=blocked)
        elif not owned:
            self._blocked[(key.namespace, key.name)] = key
            blocked = (f"NameTaken: a TrainingJob {key.namespace}/{key.name} that this {kind.kind} does not own "
                       "exists; the hub never adopts or overwrites it (delete it or rename this job)")
            if Body(source).status.get("conditions") is None or "NameTaken" not in json.dumps(
                    Body(source).status.get("conditions")):
                self.hub.events.record(source, controller=_CONTROLLER, reason="NameTaken", warning=True,
                                       message=blocked.split(": ", 1)[1])
            twin = None
        else:
            assert twin is not None
            twin = await self._follow_spec(kind, source, twin, key)
        await self._write_status(kind, rt, key, Body(source).uid, twin if owned else None, blocked)

    async def _follow_spec(self, kind: JobKind, source: Mapping[str, Any], twin: dict[str, Any],
                           key: _Key) -> dict[str, Any]:
        translation = await translate_source(self.hub.storage, kind, source, self.hub.settings.validation)
        wanted = translation.spec
        if wanted is None:
            if kind.reference is None:
                return twin
            # the object it reads is gone (a TrainJob's runtime deleted): the twin keeps its gang, follows suspend
            wanted = {"suspend": suspended(kind, source)}
        bounds = {r["name"]: (r.get("minReplicas"), r.get("maxReplicas")) for r in wanted.get("roles") or ()}

        def mutate(job: dict[str, Any]) -> dict[str, Any] | None:
            spec = job.get("spec")
            if not isinstance(spec, dict):
                return None
            changed = False
            if spec.get("suspend", False) != wanted.get("suspend", False):
                spec["suspend"] = wanted.get("suspend", False)
                changed = True
            for role in spec.get("roles") or ():
                if isinstance(role, dict) and role.get("name") in bounds:
                    for field, value in zip(("minReplicas", "maxReplicas"), bounds[role["name"]]):
                        if role.get(field) != value:
                            if value is None:
                                role.pop(field, None)
                            else:
                                role[field] = value
                            changed = True
            return job if changed else None

        try:
            updated = await self.hub.storage.guaranteed_update(self.tj, namespace=key.namespace, name=key.name,
                                                               mutate=mutate)
        except ApiError as e:
            if e.code != 422:
                raise
            self.hub.events.record(source, controller=_CONTROLLER, reason="TwinNotUpdated", warning=True,
                                   message=e.message[:1000])
            return twin
        return updated if updated is not None else twin

    async def _write_status(self, kind: JobKind, rt: ResourceType, key: _Key, uid: str,
                            twin: Mapping[str, Any] | None, blocked: str | None) -> None:
        now = format_time(time.time())
        mirror = kind.mirror_status or kubeflow_status_of(kind.kind)

        def mutate(obj: dict[str, Any]) -> dict[str, Any] | None:
            if Body(obj).uid != uid:
                return None
            # operator mode: the member copy's own conditions and status fields (with the hub's phase, cluster,
            # epoch and mode)
            status = operator_conditions(mirror(obj, twin, now=now, blocked=blocked), twin,
                                         kind.mirrored_status_fields)
            if _comparable(status) == _comparable(obj.get("status") or {}):
                return None
            obj["status"] = status
            return obj

        try:
            await self.hub.storage.guaranteed_update(rt, namespace=key.namespace, name=key.name, mutate=mutate,
                                                     subresource="status", trusted_status=True)
        except ApiError as e:
            if e.code != 404:
                raise

    async def _delete_twin(self, twin: Mapping[str, Any], key: _Key) -> None:
        try:
            await self.hub.storage.delete(self.tj, namespace=key.namespace, name=key.name,
                                          precondition_uid=Body(twin).uid)
        except ApiError as e:
            if e.code not in (404, 409):
                raise

    async def _drop_finalizer(self, rt: ResourceType, key: _Key, uid: str) -> None:
        def mutate(obj: dict[str, Any]) -> dict[str, Any] | None:
            finalizers = list(Body(obj).finalizers)
            if Body(obj).uid != uid or SOURCE_FINALIZER not in finalizers:
                return None
            obj["metadata"]["finalizers"] = [f for f in finalizers if f != SOURCE_FINALIZER]
            return obj

        try:
            await self.hub.storage.guaranteed_update(rt, namespace=key.namespace, name=key.name, mutate=mutate)
        except ApiError as e:
            if e.code != 404:
                raise


def _comparable(status: Mapping[str, Any]) -> Any:
    """A status without its times, to skip writes that would change nothing else."""
    out = {k: v for k, v in status.items()}
    out["conditions"] = [{k: v for k, v in c.items() if k not in ("lastUpdateTime", "lastTransitionTime")}
                         for c in status.get("conditions") or () if isinstance(c, Mapping)]
    return out


async def job_kind_twins(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: the watches of the served kinds and the twin worker."""
    twins = JobKindTwins(hub)
    jobs = hub.parts.jobs
    jobs.subscribe(twins.on_twin)
    for job in list(jobs.jobs.values()):
        twins.on_twin(Body(job).uid, job)
    try:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(background_loop(
                twins.work(), name="jobkinds:worker", what="job kind twin worker", log=_log))
            for source in twins.kinds:
                await stack.enter_async_context(background_loop(
                    twins.watch(source), name=f"jobkinds:watch:{source}", what=f"{source} watch", log=_log))
            yield
    finally:
        jobs.unsubscribe(twins.on_twin)
