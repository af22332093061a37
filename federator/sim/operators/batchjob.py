"""kube-controller-manager's Job controller (K/pkg/controller/job, k8s.io/kubernetes v1.36.3), emulated.

For each batch/v1 Job not managed by another controller (spec.managedBy) it:
- creates the pods the job still needs, from its template with the template's labels, annotations and
  schedulerName, a controlling ownerReference to the Job, and generateName `<job>-` (NonIndexed) or
  `<job>-<index>-` (Indexed; podGenerateNameWithIndex). An Indexed job's pods also get the
  batch.kubernetes.io/job-completion-index annotation and label, spec.hostname `<job>-<index>`, and env
  JOB_COMPLETION_INDEX from the label (downward API) in every container and init container;
- wants min(completions - succeeded, parallelism) pods active (at most 500 created per sync, as
  MaxPodCreateDeletePerSync) (NonIndexed without completions: parallelism until
  one succeeded), the missing indexes for Indexed (lowest first);
- while spec.suspend is true it creates none and deletes the active ones (condition Suspended=True reason
  JobSuspended, startTime cleared); resuming sets Suspended=False reason JobResumed and a new startTime;
- counts active, ready, terminating, succeeded, failed (and completedIndexes) into status; more failed pods than
  spec.backoffLimit: FailureTarget then, once no pod is left running, Failed (reason BackoffLimitExceeded); all
  completions reached: SuccessCriteriaMet then Complete (reason CompletionsReached) with completionTime, the
  remaining active pods deleted.

Where this differs from the real controller (no job-tracking finalizer, no pod back-off delay, ...) is in
docs/simulator-fidelity.md. It never imports the hub.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any, Final

from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.apiserver.registry import Registry
from federator.apiserver.storage import ObjectStorage
from federator.sim import kinds
from federator.sim.operators.loop import (
    condition_true,
    controller_ref,
    delete_quietly,
    now,
    owned_by,
    run_reconciler,
    set_condition,
    write_status,
)
from federator.sim.operators.served import JOB, JOB_CONTROLLER_UID_LABEL

COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_ENV: Final = "JOB_COMPLETION_INDEX"
JOB_CONTROLLER_NAME: Final = "kubernetes.io/job-controller"
_MAX_GENERATED_NAME_LENGTH: Final = 58  # apiserver names.MaxGeneratedNameLength (63 - 5 random)
#: job_controller.go MaxPodCreateDeletePerSync: pods created in one sync; the next sync creates more
MAX_POD_CREATE_PER_SYNC: Final = 500


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def pod_generate_name(job_name: str, index: int | None) -> str:
    """podGenerateNameWithIndex for Indexed jobs; `<job>-` otherwise (controller.getPodsPrefix)."""
    if index is None:
        prefix = f"{job_name}-"
        return prefix if len(prefix) <= _MAX_GENERATED_NAME_LENGTH else prefix[:_MAX_GENERATED_NAME_LENGTH]
    suffix = f"-{index}-"
    prefix = job_name + suffix
    if len(prefix) > _MAX_GENERATED_NAME_LENGTH:
        prefix = prefix[:_MAX_GENERATED_NAME_LENGTH - len(suffix)] + suffix
    return prefix


def _add_index_env(container: dict[str, Any]) -> None:
    env = container.setdefault("env", [])
    if any(isinstance(e, dict) and e.get("name") == COMPLETION_INDEX_ENV for e in env):
        return
    env.append({"name": COMPLETION_INDEX_ENV,
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{COMPLETION_INDEX}']"}}})


def job_pod(job: Mapping[str, Any], index: int | None) -> dict[str, Any]:
    """The pod the Job controller creates (generateName; the API server names it)."""
    template = copy.deepcopy(job["spec"]["template"])
    meta = Body(template)
    spec = template.get("spec") or {}
    labels = dict(meta.labels)
    annotations = dict(meta.annotations)
    if index is not None:
        for container in (*spec.get("initContainers", ()), *spec.get("containers", ())):
            _add_index_env(container)
        annotations[COMPLETION_INDEX] = str(index)
        labels[COMPLETION_INDEX] = str(index)
        spec["hostname"] = f"{job['metadata']['name']}-{index}"
    pod_meta: dict[str, Any] = {"generateName": pod_generate_name(job["metadata"]["name"], index),
                                "namespace": job["metadata"]["namespace"], "labels": labels,
                                "ownerReferences": [controller_ref(job)]}
    if annotations:
        pod_meta["annotations"] = annotations
    if meta.finalizers:
        pod_meta["finalizers"] = list(meta.finalizers)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def _index_of(pod: Mapping[str, Any]) -> int | None:
    raw = Body(pod).annotations.get(COMPLETION_INDEX)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or () if isinstance(c, dict))


def format_indexes(indexes: set[int]) -> str:
    """status.completedIndexes: sorted, runs as `a-b`, comma separated."""
    out: list[str] = []
    ordered = sorted(indexes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def parse_indexes(text: Any) -> set[int]:
    found: set[int] = set()
    if not isinstance(text, str):
        return found
    for part in text.split(","):
        low, _, high = part.partition("-")
        try:
            found.update(range(int(low), int(high or low) + 1))
        except ValueError:
            continue
    return found


class JobController:
    """One reconcile of a batch/v1 Job (module docstring)."""

    def __init__(self, *, storage: ObjectStorage, logger: Any) -> None:
        self.storage = storage
        self.log = logger

    async def reconcile(self, namespace: str, name: str) -> float | None:
        try:
            job = await self.storage.get(JOB, namespace=namespace, name=name)
        except ApiError as e:
            if e.code == 404:
                return None  # its pods go with it (the garbage collector)
            raise
        meta, spec = job["metadata"], job.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return None
        if spec.get("managedBy") not in (None, JOB_CONTROLLER_NAME):
            return None
        uid = meta["uid"]
        selector = f"{JOB_CONTROLLER_UID_LABEL}={uid}" if not spec.get("manualSelector") else None
        listed = await self.storage.list(kinds.PODS, namespace=namespace, label_selector=selector)
        pods = [p for p in listed.items if owned_by(p, job)]
        status: dict[str, Any] = copy.deepcopy(job.get("status") or {})
        conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
        finished = condition_true(job, "Complete") or condition_true(job, "Failed")

        active = [p for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
                  and not p["metadata"].get("deletionTimestamp")]
        terminating = [p for p in pods if p["metadata"].get("deletionTimestamp")
                       and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        succeeded_pods = [p for p in pods if p.get("status", {}).get("phase") == "Succeeded"]
        failed_pods = [p for p in pods if p.get("status", {}).get("phase") == "Failed"]
        indexed = spec.get("completionMode") == "Indexed"
        completions = spec.get("completions")
        parallelism = _int(spec.get("parallelism"), 1)
        # without the job-tracking finalizer a removed pod would uncount itself: counts never go down
        succeeded = max(len(succeeded_pods), _int(status.get("succeeded"), 0))
        failed = max(len(failed_pods), _int(status.get("failed"), 0))
        done_indexes = parse_indexes(status.get("completedIndexes"))
        if indexed:
            done_indexes |= {i for p in succeeded_pods if (i := _index_of(p)) is not None
                             and isinstance(completions, int) and 0 <= i < completions}
            succeeded = len(done_indexes)

        if finished:
            for pod in active:
                await delete_quietly(self.storage, kinds.PODS, pod)
            self._counts(status, active=[], terminating=terminating, succeeded=succeeded, failed=failed,
                         indexes=done_indexes if indexed else None)
            await write_status(self.storage, JOB, job, status)
            return None

        suspended = spec.get("suspend") is True
        if suspended:
            for pod in active:
                await delete_quietly(self.storage, kinds.PODS, pod)
            active = []
            if set_condition(conditions, "Suspended", "True", "JobSuspended", "Job suspended", probe=True):
                status.pop("startTime", None)
        else:
            if condition_true(job, "Suspended"):
                set_condition(conditions, "Suspended", "False", "JobResumed", "Job resumed", probe=True)
            status.setdefault("startTime", now())

        backoff_limit = _int(spec.get("backoffLimit"), 6)
        if not suspended and (failed > backoff_limit or condition_true(job, "FailureTarget")):
            set_condition(conditions, "FailureTarget", "True", "BackoffLimitExceeded",
                          "Job has reached the specified backoff limit", probe=True)
            for pod in active:
                await delete_quietly(self.storage, kinds.PODS, pod)
            if not active and not terminating:
                set_condition(conditions, "Failed", "True", "BackoffLimitExceeded",
                              "Job has reached the specified backoff limit", probe=True)
            self._counts(status, active=[], terminating=terminating + active, succeeded=succeeded, failed=failed,
                         indexes=done_indexes if indexed else None)
            await write_status(self.storage, JOB, job, status)
            return None

        if indexed:
            complete = isinstance(completions, int) and len(done_indexes) >= completions
        elif isinstance(completions, int):
            complete = succeeded >= completions
        else:
            complete = succeeded > 0 and not active
        if complete and not suspended:
            set_condition(conditions, "SuccessCriteriaMet", "True", "CompletionsReached",
                          "Reached expected number of succeeded pods", probe=True)
            for pod in active:
                await delete_quietly(self.storage, kinds.PODS, pod)
            if not active and not terminating:
                set_condition(conditions, "Complete", "True", "CompletionsReached",
                              "Reached expected number of succeeded pods", probe=True)
                status["completionTime"] = now()
            self._counts(status, active=[], terminating=terminating + active, succeeded=succeeded, failed=failed,
                         indexes=done_indexes if indexed else None)
            await write_status(self.storage, JOB, job, status)
            return None

        created: list[dict[str, Any]] = []
        wanted = [] if suspended else self._to_create(active=active, indexed=indexed, completions=completions,
                                                      parallelism=parallelism, succeeded=succeeded,
                                                      done=done_indexes)
        if wanted:
            for index in wanted[:MAX_POD_CREATE_PER_SYNC]:
                try:
                    created.append(await self.storage.create(kinds.PODS, job_pod(job, index), namespace=namespace))
                except ApiError as e:
                    self.log.info("pod create refused", job=name, namespace=namespace, code=e.code, error=e.message)
                    if e.code >= 500:
                        raise
                    break
        self._counts(status, active=active + created, terminating=terminating, succeeded=succeeded,
                     failed=failed, indexes=done_indexes if indexed else None)
        await write_status(self.storage, JOB, job, status)
        return 0.0 if len(wanted) > MAX_POD_CREATE_PER_SYNC else None

    @staticmethod
    def _to_create(*, active: list[dict[str, Any]], indexed: bool, completions: Any, parallelism: int,
                   succeeded: int, done: set[int]) -> list[int | None]:
        if indexed:
            if not isinstance(completions, int):
                return []
            running = {i for p in active if (i := _index_of(p)) is not None}
            missing = [i for i in range(completions) if i not in done and i not in running]
            return list(missing[:max(0, parallelism - len(active))])
        if isinstance(completions, int):
            want = min(completions - succeeded, parallelism)
        else:
            want = parallelism if succeeded == 0 else len(active)
        return [None] * max(0, want - len(active))

    @staticmethod
    def _counts(status: dict[str, Any], *, active: list[dict[str, Any]], terminating: list[dict[str, Any]],
                succeeded: int, failed: int, indexes: set[int] | None) -> None:
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if _ready(p))
        status["terminating"] = len(terminating)
        status["succeeded"] = succeeded
        status["failed"] = failed
        status["uncountedTerminatedPods"] = {}
        if indexes is not None:
            text = format_indexes(indexes)
            if text:
                status["completedIndexes"] = text
        for key in ("active", "succeeded", "failed"):
            if status[key] == 0:
                del status[key]  # omitempty, as kube serves them
        if not status.get("conditions"):
            status.pop("conditions", None)


async def run_job_controller(*, storage: ObjectStorage, registry: Registry, stop: asyncio.Event, logger: Any,
                             **_: Any) -> None:
    """The Job controller of a simulated cluster, until `stop` is set."""
    controller = JobController(storage=storage, logger=logger)
    await run_reconciler(storage=storage, stop=stop, logger=logger, owner=JOB, children=[kinds.PODS],
                         reconcile=controller.reconcile)
