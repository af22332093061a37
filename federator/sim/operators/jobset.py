"""The JobSet controller (sigs.k8s.io/jobset v0.10.1, pkg/controllers/jobset_controller.go), emulated.

For each JobSet not managed by another controller (spec.managedBy) it:
- creates the headless Service `<spec.network.subdomain or jobset name>` (clusterIP None, selector
  jobset.sigs.k8s.io/jobset-name, publishNotReadyAddresses as spec.network says) when enableDNSHostnames is on
  (the webhook's default), owned by the JobSet;
- creates one batch/v1 Job per replicatedJob replica, `<jobset>-<replicatedJob>-<jobIndex>` (constructJob): the
  replicatedJob's Job template with the labels and annotations labelAndAnnotateObject puts on both the Job and
  its pod template (jobset-name, jobset-uid, replicatedjob-name, replicatedjob-replicas, restart-attempt,
  global-replicas, job-index, job-key, job-global-index, group-name, group-replicas, job-group-index, and the
  coordinator's endpoint when spec.coordinator is set), pod template subdomain set when DNS hostnames are on,
  spec.suspend as the JobSet's; the Job controller then creates the pods (Indexed: `<job>-<index>-<random>`,
  hostname `<job>-<index>`);
- suspends (spec.suspend of every active Job, condition Suspended=True reason SuspendedJobs) and resumes
  (Suspended=False reason ResumeJobs) its Jobs with the JobSet; startupPolicy InOrder creates a replicatedJob's
  Jobs only once the previous ones are all ready, then StartupPolicyCompleted;
- writes status.replicatedJobsStatus (ready, succeeded, failed, active, suspended per replicatedJob, as
  calculateReplicatedJobStatuses counts them);
- successPolicy (All / Any over targetReplicatedJobs, all by default): condition Completed reason AllJobsCompleted,
  terminalState Completed; a failed Job with failurePolicy.maxRestarts left: restart (status.restarts + 1, every
  Job deleted and created again with the new restart-attempt); otherwise condition Failed (reason FailedJobs, or
  ReachedMaxRestarts), terminalState Failed; a finished JobSet's active Jobs are deleted.

Differences from the real controller are in docs/simulator-fidelity.md. It never imports the hub.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
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
    owned_by,
    run_reconciler,
    set_condition,
    write_status,
)
from federator.sim.operators.served import JOB, JOBSET

PREFIX: Final = "jobset.sigs.k8s.io/"
JOBSET_NAME: Final = PREFIX + "jobset-name"
JOBSET_UID: Final = PREFIX + "jobset-uid"
REPLICATED_JOB_NAME: Final = PREFIX + "replicatedjob-name"
REPLICATED_JOB_REPLICAS: Final = PREFIX + "replicatedjob-replicas"
RESTARTS: Final = PREFIX + "restart-attempt"
GLOBAL_REPLICAS: Final = PREFIX + "global-replicas"
JOB_INDEX: Final = PREFIX + "job-index"
JOB_KEY: Final = PREFIX + "job-key"
JOB_GLOBAL_INDEX: Final = PREFIX + "job-global-index"
GROUP_NAME: Final = PREFIX + "group-name"
GROUP_REPLICAS: Final = PREFIX + "group-replicas"
JOB_GROUP_INDEX: Final = PREFIX + "job-group-index"
COORDINATOR: Final = PREFIX + "coordinator"
EXCLUSIVE: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY: Final = "alpha.jobset.sigs.k8s.io/node-selector"
JOBSET_CONTROLLER_NAME: Final = "jobset.sigs.k8s.io/jobset-controller"
DEFAULT_GROUP: Final = "default"


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def job_name(jobset: str, rjob: str, index: int) -> str:
    """placement.GenJobName."""
    return f"{jobset}-{rjob}-{index}"


def subdomain(js: Mapping[str, Any]) -> str:
    """GetSubdomain: spec.network.subdomain, else the JobSet's name."""
    network = (js.get("spec") or {}).get("network") or {}
    return str(network.get("subdomain") or js["metadata"]["name"])


def dns_hostnames(js: Mapping[str, Any]) -> bool:
    return ((js.get("spec") or {}).get("network") or {}).get("enableDNSHostnames") is True


def _rjobs(js: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [r for r in (js.get("spec") or {}).get("replicatedJobs") or () if isinstance(r, dict)]


def _group(rjob: Mapping[str, Any]) -> str:
    return str(rjob.get("groupName") or DEFAULT_GROUP)


def labels_and_annotations(js: Mapping[str, Any], rjob: Mapping[str, Any], index: int) -> dict[str, str]:
    """The keys labelAndAnnotateObject puts, as labels and as annotations, on a child Job and its pod template."""
    meta = js["metadata"]
    rjobs = _rjobs(js)
    name = job_name(meta["name"], rjob["name"], index)
    total = sum(_int(r.get("replicas"), 1) for r in rjobs)
    before = 0
    group_before = 0
    for r in rjobs:
        if r.get("name") == rjob["name"]:
            break
        before += _int(r.get("replicas"), 1)
        if _group(r) == _group(rjob):
            group_before += _int(r.get("replicas"), 1)
    group_total = sum(_int(r.get("replicas"), 1) for r in rjobs if _group(r) == _group(rjob))
    status = js.get("status") or {}
    out = {
        JOBSET_NAME: meta["name"],
        JOBSET_UID: meta["uid"],
        REPLICATED_JOB_NAME: rjob["name"],
        RESTARTS: str(_int(status.get("restarts"))),
        REPLICATED_JOB_REPLICAS: str(_int(rjob.get("replicas"), 1)),
        GLOBAL_REPLICAS: str(total),
        JOB_INDEX: str(index),
        JOB_KEY: hashlib.sha1(f"{meta['namespace']}/{name}".encode()).hexdigest(),
        JOB_GLOBAL_INDEX: str(before + index),
        GROUP_NAME: _group(rjob),
        GROUP_REPLICAS: str(group_total),
        JOB_GROUP_INDEX: str(group_before + index),
    }
    coordinator = (js.get("spec") or {}).get("coordinator")
    if isinstance(coordinator, dict):
        out[COORDINATOR] = (f"{meta['name']}-{coordinator.get('replicatedJob')}-{_int(coordinator.get('jobIndex'))}-"
                            f"{_int(coordinator.get('podIndex'))}.{subdomain(js)}")
    return out


def _label_and_annotate(obj: dict[str, Any], js: Mapping[str, Any], rjob: Mapping[str, Any], index: int) -> None:
    keys = labels_and_annotations(js, rjob, index)
    meta = obj.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **keys}
    annotations = {**(meta.get("annotations") or {}), **keys}
    for source in (Body(js).annotations, Body(rjob.get("template")).annotations):
        if EXCLUSIVE in source:
            annotations[EXCLUSIVE] = source[EXCLUSIVE]
            if NODE_SELECTOR_STRATEGY in source:
                annotations[NODE_SELECTOR_STRATEGY] = source[NODE_SELECTOR_STRATEGY]
    meta["annotations"] = annotations


def child_job(js: Mapping[str, Any], rjob: Mapping[str, Any], index: int) -> dict[str, Any]:
    """constructJob: the Job the JobSet controller creates for replica `index` of `rjob`."""
    template = copy.deepcopy(rjob.get("template") or {})
    t_meta = Body(template)
    job: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(js["metadata"]["name"], rjob["name"], index),
                     "namespace": js["metadata"]["namespace"],
                     "labels": dict(t_meta.labels), "annotations": dict(t_meta.annotations),
                     "ownerReferences": [controller_ref(js)]},
        "spec": template.get("spec") or {},
    }
    pod_template = job["spec"].setdefault("template", {})
    _label_and_annotate(job, js, rjob, index)
    _label_and_annotate(pod_template, js, rjob, index)
    if dns_hostnames(js):
        pod_template.setdefault("spec", {})["subdomain"] = subdomain(js)
    job["spec"]["suspend"] = (js.get("spec") or {}).get("suspend") is True
    return job


def headless_service(js: Mapping[str, Any]) -> dict[str, Any]:
    network = (js.get("spec") or {}).get("network") or {}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": subdomain(js), "namespace": js["metadata"]["namespace"],
                         "ownerReferences": [controller_ref(js)]},
            "spec": {"clusterIP": "None", "selector": {JOBSET_NAME: js["metadata"]["name"]},
                     "publishNotReadyAddresses": network.get("publishNotReadyAddresses") is not False}}


def _job_finished(job: Mapping[str, Any]) -> str | None:
    if condition_true(job, "Complete"):
        return "Complete"
    if condition_true(job, "Failed"):
        return "Failed"
    return None


class JobSetController:
    def __init__(self, *, storage: ObjectStorage, logger: Any) -> None:
        self.storage = storage
        self.log = logger

    async def reconcile(self, namespace: str, name: str) -> float | None:
        try:
            js = await self.storage.get(JOBSET, namespace=namespace, name=name)
        except ApiError as e:
            if e.code == 404:
                return None
            raise
        meta, spec = js["metadata"], js.get("spec") or {}
        if meta.get("deletionTimestamp") or spec.get("managedBy") not in (None, JOBSET_CONTROLLER_NAME):
            return None
        status: dict[str, Any] = copy.deepcopy(js.get("status") or {})
        conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
        restarts = _int(status.get("restarts"))
        listed = await self.storage.list(JOB, namespace=namespace, label_selector=f"{JOBSET_NAME}={name}")
        jobs = [j for j in listed.items if owned_by(j, js)]
        previous = [j for j in jobs if _int_label(j, RESTARTS) < restarts]
        current = [j for j in jobs if _int_label(j, RESTARTS) >= restarts]
        for job in previous:
            await delete_quietly(self.storage, JOB, job)
        active = [j for j in current if _job_finished(j) is None and not j["metadata"].get("deletionTimestamp")]
        successful = [j for j in current if _job_finished(j) == "Complete"]
        failed = [j for j in current if _job_finished(j) == "Failed"]
        status["replicatedJobsStatus"] = self._replicated_statuses(js, active, successful, failed)

        finished = condition_true(js, "Completed") or condition_true(js, "Failed")
        if finished:  # reconcile(): a finished JobSet's active Jobs are deleted (successPolicy Any leaves some)
            for job in active:
                await delete_quietly(self.storage, JOB, job)
            await write_status(self.storage, JOBSET, js, _clean(status))
            return None

        if failed:
            policy = spec.get("failurePolicy") or {}
            max_restarts = _int(policy.get("maxRestarts"))
            if restarts < max_restarts:
                status["restarts"] = restarts + 1
                status["restartsCountTowardsMax"] = _int(status.get("restartsCountTowardsMax")) + 1
                await write_status(self.storage, JOBSET, js, _clean(status))
                return 0.0  # the next pass deletes the previous attempt's Jobs and creates the new ones
            reason, message = ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts") \
                if max_restarts else ("FailedJobs", "jobset failed due to one or more job failures")
            set_condition(conditions, "Failed", "True", reason, message)
            status["terminalState"] = "Failed"
            for job in active:
                await delete_quietly(self.storage, JOB, job)
            await write_status(self.storage, JOBSET, js, _clean(status))
            return None

        if self._succeeded(js, successful):
            set_condition(conditions, "Completed", "True", "AllJobsCompleted", "jobset completed successfully")
            status["terminalState"] = "Completed"
            await write_status(self.storage, JOBSET, js, _clean(status))
            return 0.0  # the next pass deletes what is still active

        if dns_hostnames(js):
            try:
                await self.storage.create(kinds.SERVICES, headless_service(js), namespace=namespace)
            except ApiError as e:
                if e.code != 409:
                    raise

        suspended = spec.get("suspend") is True
        for job in active:
            if (job.get("spec") or {}).get("suspend") is not suspended:
                await self._set_job_suspend(job, suspended)
        if suspended:
            set_condition(conditions, "Suspended", "True", "SuspendedJobs", "jobset is suspended")
        elif any(c.get("type") == "Suspended" for c in conditions):
            set_condition(conditions, "Suspended", "False", "ResumeJobs", "jobset is resumed")

        existing = {j["metadata"]["name"] for j in current}
        in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        statuses = {s["name"]: s for s in status["replicatedJobsStatus"]}
        all_started = True
        for rjob in _rjobs(js):
            for index in range(_int(rjob.get("replicas"), 1)):
                child = child_job(js, rjob, index)
                if child["metadata"]["name"] in existing:
                    continue
                try:
                    await self.storage.create(JOB, child, namespace=namespace)
                except ApiError as e:
                    if e.code != 409:
                        self.log.info("job create refused", jobset=name, job=child["metadata"]["name"],
                                      code=e.code, error=e.message)
                        if e.code >= 500:
                            raise
            if in_order:
                st = statuses.get(rjob["name"]) or {}
                if _int(st.get("ready")) + _int(st.get("succeeded")) < _int(rjob.get("replicas"), 1):
                    all_started = False
                    break
        if in_order and not suspended:
            if all_started:
                set_condition(conditions, "StartupPolicyCompleted", "True", "InOrderStartupPolicyCompleted",
                              "in order startup policy has completed")
            else:
                set_condition(conditions, "StartupPolicyInProgress", "True", "InOrderStartupPolicyInProgress",
                              "in order startup policy is in progress")
        await write_status(self.storage, JOBSET, js, _clean(status))
        return None

    async def _set_job_suspend(self, job: Mapping[str, Any], suspend: bool) -> None:
        uid = job["metadata"]["uid"]

        def mutate(current: dict[str, Any]) -> dict[str, Any] | None:
            if current["metadata"].get("uid") != uid:
                return None
            current.setdefault("spec", {})["suspend"] = suspend
            return current

        try:
            await self.storage.guaranteed_update(JOB, namespace=job["metadata"]["namespace"],
                                                 name=job["metadata"]["name"], mutate=mutate)
        except ApiError as e:
            if e.code != 404:
                raise

    @staticmethod
    def _replicated_statuses(js: Mapping[str, Any], active: list[dict[str, Any]], successful: list[dict[str, Any]],
                             failed: list[dict[str, Any]]) -> list[dict[str, Any]]:
        counts = {r["name"]: {"name": r["name"], "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
                  for r in _rjobs(js)}
        for job in active:
            entry = counts.get(_label(job, REPLICATED_JOB_NAME))
            if entry is None:
                continue
            jspec, jstatus = job.get("spec") or {}, job.get("status") or {}
            pods = _int(jspec.get("parallelism"), 1)
            completions = jspec.get("completions")
            if isinstance(completions, int) and completions < pods:
                pods = completions
            if _int(jstatus.get("succeeded")) + _int(jstatus.get("ready")) >= pods:
                entry["ready"] += 1
            if _int(jstatus.get("active")) > 0:
                entry["active"] += 1
            if jspec.get("suspend") is True:
                entry["suspended"] += 1
        for group, key in ((successful, "succeeded"), (failed, "failed")):
            for job in group:
                entry = counts.get(_label(job, REPLICATED_JOB_NAME))
                if entry is not None:
                    entry[key] += 1
        return list(counts.values())

    @staticmethod
    def _succeeded(js: Mapping[str, Any], successful: list[dict[str, Any]]) -> bool:
        policy = (js.get("spec") or {}).get("successPolicy") or {}
        targets = set(policy.get("targetReplicatedJobs") or ()) or {r["name"] for r in _rjobs(js)}
        done: dict[str, int] = {}
        for job in successful:
            done[_label(job, REPLICATED_JOB_NAME)] = done.get(_label(job, REPLICATED_JOB_NAME), 0) + 1
        if policy.get("operator") == "Any":
            return any(done.get(t, 0) > 0 for t in targets)
        wanted = {r["name"]: _int(r.get("replicas"), 1) for r in _rjobs(js) if r["name"] in targets}
        return bool(wanted) and all(done.get(t, 0) >= n for t, n in wanted.items())


def _label(obj: Mapping[str, Any], key: str) -> str:
    return str(Body(obj).labels.get(key, ""))


def _int_label(obj: Mapping[str, Any], key: str) -> int:
    try:
        return int(_label(obj, key) or 0)
    except ValueError:
        return 0


def _clean(status: dict[str, Any]) -> dict[str, Any]:
    if not status.get("conditions"):
        status.pop("conditions", None)
    return status


async def run_jobset_controller(*, storage: ObjectStorage, registry: Registry, stop: asyncio.Event, logger: Any,
                                **_: Any) -> None:
    """The JobSet controller of a simulated cluster, until `stop` is set."""
    controller = JobSetController(storage=storage, logger=logger)
    await run_reconciler(storage=storage, stop=stop, logger=logger, owner=JOBSET, children=[JOB],
                         reconcile=controller.reconcile)
