"""jobset.x-k8s.io/v1alpha2 JobSet as a gang (issue 28; upstream sigs.k8s.io/jobset@v0.10.1).

Each replicatedJob (`replicas` N Jobs, each Job a gang of its template's parallelism P pods, the rules of
batchjob.py with JobSet's defaults: Indexed, restartPolicy OnFailure) becomes ONE role of the twin named after
the replicatedJob, with N x P replicas: pod k of the role is pod k % P (its completion index) of Job k // P (its
job-index), so the pod contract can say both (one role per Job would spend the hub's role cap on Jobs). No role
is elastic: JobSet v0.10.1 has no range of sizes.

The rules (each refusal is a 422 naming the JobSet's field):

- each replicatedJob's Job template as batchjob.py's `job_gang` (completions = parallelism, no podFailurePolicy,
  ...); N x P at most the hub's pods per role, the whole gang at most its pods per job, at most its roles;
  the pod templates' priorityClassName the same in every replicatedJob (it is the twin's).
- successPolicy: only operator All over every replicatedJob (no targetReplicatedJobs, or all of them): the gang
  succeeds when all its pods have. Any, or a subset, is refused.
- dependsOn with status Complete is refused (a gang starts whole, it has no stages); with status Ready, and
  startupPolicy InOrder, the gang's start satisfies them (all pods start together): accepted.
- failurePolicy (maxRestarts, rules): a documented default, not a refusal: a member whose JobSet controller runs
  the JobSet (operator mode) honours it; the hub's own rendering fails the gang when a Job exceeds its backoff
  limit. The twin's backoffLimit is the smallest of the Jobs' backoffLimits (default 6).
- managedBy: absent or the JobSet controller's own name (jobset.sigs.k8s.io/jobset-controller); another is refused.
- suspend -> the twin's suspend. network.enableDNSHostnames (default true) and network.subdomain (default the
  JobSet's name) are kept in the contract annotation: the hub's rendering gives each pod JobSet's DNS name, hostname
  `<jobset>-<rjob>-<job index>-<pod index>` and that subdomain, with a headless Service of that name selecting the
  gang's pods (the contract's `dns`); with enableDNSHostnames false, the hub's own (delegation/network.py).
- ttlSecondsAfterFinished, network.publishNotReadyAddresses: operator mode only (documented default).
- Framework none: JobSet itself injects no framework environment.
- Queue, priority class, placement and failover: the labels and annotations (hints.py).

The pod contract, as the JobSet controller (pkg/controllers/jobset_controller.go labelAndAnnotateObject) puts on
each Job and pod template, labels and annotations alike: jobset.sigs.k8s.io/jobset-name, replicatedjob-name,
replicatedjob-replicas, global-replicas, job-index, job-global-index, job-key (sha1 of "<namespace>/<job name>",
the Job named <jobset>-<rjob>-<job-index>), group-name (default "default"), group-replicas, job-group-index,
restart-attempt ("0": the hub does not restart the JobSet in place), coordinator (when spec.coordinator is set),
jobset-uid (only when the JobSet's uid was known at translation); plus what kube's Job controller adds for the
child Job (batchjob.py: job-name, completion index, JOB_COMPLETION_INDEX).

Pure: no I/O; imports only `federator.apis` modules.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from federator.apis.common import FieldError, ValidationSettings, dns1123_label_errors, json_type
from federator.apis.jobkinds.base import JobKind, PodContract, PodDns, Translation, load_upstream_schema
from federator.apis.jobkinds.batchjob import (
    CONTRACT_ANNOTATION,
    job_gang,
    job_pod_contract,
    merge_hints,
    read_contract,
    shown,
    spec_of,
)
from federator.apis.jobkinds.status import condition, existing_conditions, failure, hub_fields, suspension, twin_state
from federator.apis.views import Body

__all__ = ["JOBSET", "JOBSET_CONTROLLER", "jobset_pod_contract", "jobset_pods", "jobset_status",
           "translate_jobset"]

JOBSET_CONTROLLER: Final = "jobset.sigs.k8s.io/jobset-controller"
_KEY = "jobset.sigs.k8s.io/"
DEFAULT_GROUP: Final = "default"


def _success_errors(policy: object, names: list[str]) -> list[FieldError]:
    if policy is None:
        return []
    if not isinstance(policy, Mapping):
        return [("spec.successPolicy", f"Invalid value: {json_type(policy)}: must be of type object")]
    errors: list[FieldError] = []
    if policy.get("operator") != "All":
        errors.append(("spec.successPolicy.operator", f"Unsupported value: {shown(policy.get('operator'))}: "
                                                      'supported values: "All" (the hub\'s gang succeeds when '
                                                      "all its pods have)"))
    targets = policy.get("targetReplicatedJobs")
    if targets is not None and targets != [] and (not isinstance(targets, list) or set(
            t for t in targets if isinstance(t, str)) != set(names) or not all(isinstance(t, str) for t in targets)):
        errors.append(("spec.successPolicy.targetReplicatedJobs", "Forbidden: the hub's gang succeeds when every "
                                                                  "replicatedJob has: leave it out or name them all"))
    return errors


def translate_jobset(obj: Mapping[str, Any], settings: ValidationSettings) -> Translation:
    """A JobSet's twin TrainingJob spec (the module docstring's rules), or its errors at the JobSet's paths."""
    source, errors = spec_of(obj)
    if source is None:
        return Translation(spec=None, errors=errors)
    rjobs = source.get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        errors.append(("spec.replicatedJobs", "Required value: at least one replicatedJob" if not rjobs else
                       f"Invalid value: {json_type(rjobs)}: must be of type array"))
        rjobs = []
    elif len(rjobs) > settings.max_roles:
        errors.append(("spec.replicatedJobs", f"Too many: {len(rjobs)}: must have at most {settings.max_roles} "
                                              "items (the hub's roles per job)"))
        rjobs = []
    managed_by = source.get("managedBy")
    if managed_by is not None and managed_by != JOBSET_CONTROLLER:
        errors.append(("spec.managedBy", f"Unsupported value: {shown(managed_by)}: supported values: "
                                         f'"{JOBSET_CONTROLLER}" (or leave it out: the hub manages the JobSet)'))
    suspend = source.get("suspend")
    if suspend is not None and not isinstance(suspend, bool):
        errors.append(("spec.suspend", f"Invalid value: {json_type(suspend)}: must be of type boolean"))
    roles: list[dict[str, Any]] = []
    role_paths: dict[str, str] = {}
    contract_jobs: list[dict[str, Any]] = []
    names: list[str] = []
    backoffs: list[int] = []
    classes: dict[str, str] = {}
    total = 0
    for index, rjob in enumerate(rjobs):
        path = f"spec.replicatedJobs[{index}]"
        if not isinstance(rjob, Mapping):
            errors.append((path, f"Invalid value: {json_type(rjob)}: must be of type object"))
            continue
        name = rjob.get("name")
        if not isinstance(name, str):
            errors.append((f"{path}.name", "Required value" if name is None
                           else f"Invalid value: {json_type(name)}: must be of type string"))
            continue
        name_errors = dns1123_label_errors(name)
        if name_errors:
            errors += [(f"{path}.name", f"Invalid value: {shown(name)}: {e}") for e in name_errors]
            continue
        if name in names:
            errors.append((f"{path}.name", f"Duplicate value: {shown(name)}"))
            continue
        names.append(name)
        replicas = rjob.get("replicas", 1)
        if type(replicas) is not int or replicas < 1:
            errors.append((f"{path}.replicas", f"Invalid value: {shown(replicas)}: must be an integer of at least 1"))
            continue
        group = rjob.get("groupName", DEFAULT_GROUP) or DEFAULT_GROUP
        if not isinstance(group, str):
            errors.append((f"{path}.groupName", f"Invalid value: {json_type(group)}: must be of type string"))
            continue
        for d_index, dep in enumerate(rjob.get("dependsOn") or () if isinstance(rjob.get("dependsOn"), list) else ()):
            if isinstance(dep, Mapping) and dep.get("status") == "Complete":
                errors.append((f"{path}.dependsOn[{d_index}].status",
                               'Unsupported value: "Complete": supported values: "Ready" (the hub starts the gang '
                               "whole: a replicatedJob cannot wait for another to finish)"))
        template = rjob.get("template")
        if not isinstance(template, Mapping):
            errors.append((f"{path}.template", "Required value" if template is None
                           else f"Invalid value: {json_type(template)}: must be of type object"))
            continue
        gang, found = job_gang(template.get("spec"), path=f"{path}.template.spec", settings=settings,
                               default_restart_policy="OnFailure", default_indexed=True)
        errors += found
        if gang is None:
            continue
        pods = replicas * gang.pods
        if pods > settings.max_replicas_per_role:
            errors.append((f"{path}.replicas", f"Invalid value: {replicas}: {replicas} Jobs of {gang.pods} pods is "
                                               f"{pods} pods: must be at most {settings.max_replicas_per_role} "
                                               "(the hub's pods per role)"))
            continue
        total += pods
        if gang.priority_class is not None:
            classes[f"{path}.template.spec.template.spec.priorityClassName"] = gang.priority_class
        backoffs.append(gang.backoff_limit)
        roles.append({"name": name, "replicas": pods, "restartPolicy": gang.restart_policy,
                      "template": gang.template})
        role_paths[name] = f"{path}.template.spec.template"
        contract_jobs.append({"name": name, "replicas": replicas, "parallelism": gang.pods, "indexed": gang.indexed,
                              "group": group})
    if total > settings.max_total_replicas:
        errors.append(("spec.replicatedJobs", f"Invalid value: {total} pods in all: the gang may have at most "
                                              f"{settings.max_total_replicas}"))
    if len(set(classes.values())) > 1:
        errors += [(p, f"Invalid value: {shown(c)}: every replicatedJob's pods must have the same priority class "
                       "(the gang has one)") for p, c in list(classes.items())[1:]]
    errors += _success_errors(source.get("successPolicy"), names)
    spec: dict[str, Any] = {}
    first_class = next(iter(classes.items()), None)
    errors += merge_hints(spec, obj.get("metadata"), priority_class=first_class[1] if first_class else None,
                          priority_path=first_class[0] if first_class else "", settings=settings)
    contract = _contract(obj, source, contract_jobs, errors)
    if errors:
        return Translation(spec=None, errors=errors)
    spec.update({"roles": roles, "backoffLimit": min(backoffs), "suspend": bool(suspend)})
    return Translation(spec=spec, role_paths=role_paths,
                       annotations={CONTRACT_ANNOTATION: json.dumps(contract, separators=(",", ":"))})


def _contract(obj: Mapping[str, Any], source: Mapping[str, Any], jobs: list[dict[str, Any]],
              errors: list[FieldError]) -> dict[str, Any]:
    """What the pod contract needs beyond the names: the replicatedJobs in order (replicas, parallelism,
    Indexed, group), the subdomain, the coordinator endpoint, the uid."""
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    network = source.get("network")
    network = network if isinstance(network, Mapping) else {}
    subdomain = network.get("subdomain") or (name if isinstance(name, str) else "")
    contract: dict[str, Any] = {"replicatedJobs": jobs,
                                "dnsHostnames": network.get("enableDNSHostnames") is not False,
                                "subdomain": subdomain if isinstance(subdomain, str) else ""}
    coordinator = source.get("coordinator")
    if isinstance(coordinator, Mapping) and isinstance(name, str):
        rjob, job_index, pod_index = (coordinator.get("replicatedJob"), coordinator.get("jobIndex", 0),
                                      coordinator.get("podIndex", 0))
        target = next((j for j in jobs if j["name"] == rjob), None)
        if target is None or type(job_index) is not int or type(pod_index) is not int or not (
                0 <= job_index < target["replicas"] and 0 <= pod_index < target["parallelism"]):
            errors.append(("spec.coordinator", "Invalid value: must name a replicatedJob of this JobSet and a Job "
                                               "and pod index within it"))
        else:
            contract["coordinator"] = f"{name}-{rjob}-{job_index}-{pod_index}.{contract['subdomain']}"
    uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
    if isinstance(uid, str) and uid and len(uid) <= 128:
        contract["uid"] = uid
    return contract


def jobset_pods(jobset_name: str, namespace: str, rjob_name: str, index: int,
                contract: Mapping[str, Any]) -> PodContract:
    """The labels, annotations and env the JobSet controller (and its Jobs' controller) give pod `index` of the
    replicatedJob `rjob_name` as the twin numbers them (Job index // parallelism, completion index % parallelism)."""
    listed = contract.get("replicatedJobs")
    jobs = [j for j in listed if isinstance(j, Mapping)] if isinstance(listed, list) else []
    mine = next((j for j in jobs if j.get("name") == rjob_name), None)
    parallelism = mine.get("parallelism") if mine else None
    parallelism = parallelism if type(parallelism) is int and parallelism > 0 else 1
    job_index, completion = divmod(index, parallelism)
    job_name = f"{jobset_name}-{rjob_name}-{job_index}"

    def count(job: Mapping[str, Any]) -> int:
        value = job.get("replicas")
        return value if type(value) is int else 0

    group = str(mine.get("group") or DEFAULT_GROUP) if mine else DEFAULT_GROUP
    before = sum(count(j) for j in jobs[: jobs.index(mine)]) if mine else 0
    group_jobs = [j for j in jobs if str(j.get("group") or DEFAULT_GROUP) == group]
    group_before = sum(count(j) for j in group_jobs[: group_jobs.index(mine)]) if mine else 0
    values = {
        f"{_KEY}jobset-name": jobset_name,
        f"{_KEY}replicatedjob-name": rjob_name,
        f"{_KEY}restart-attempt": "0",
        f"{_KEY}replicatedjob-replicas": str(count(mine) if mine else 1),
        f"{_KEY}global-replicas": str(sum(count(j) for j in jobs)),
        f"{_KEY}job-index": str(job_index),
        f"{_KEY}job-key": hashlib.sha1(f"{namespace}/{job_name}".encode()).hexdigest(),
        f"{_KEY}job-global-index": str(before + job_index),
        f"{_KEY}group-name": group,
        f"{_KEY}group-replicas": str(sum(count(j) for j in group_jobs)),
        f"{_KEY}job-group-index": str(group_before + job_index),
    }
    uid = contract.get("uid")
    if isinstance(uid, str) and uid:
        values[f"{_KEY}jobset-uid"] = uid
    coordinator = contract.get("coordinator")
    if isinstance(coordinator, str) and coordinator:
        values[f"{_KEY}coordinator"] = coordinator
    child = job_pod_contract(job_name, completion, indexed=bool(mine.get("indexed", True)) if mine else True,
                             uid=None)
    subdomain = contract.get("subdomain")
    dns = None
    if contract.get("dnsHostnames", True) is not False:
        # pod_control.go: hostname <jobset>-<rjob>-<job index>-<pod index>, subdomain network.subdomain or the name
        dns = PodDns(hostname=f"{job_name}-{completion}",
                     subdomain=subdomain if isinstance(subdomain, str) and subdomain else jobset_name)
    return PodContract(labels={**child.labels, **values}, annotations={**child.annotations, **values},
                       env=child.env, dns=dns)


def jobset_pod_contract(job_name: str, namespace: str, role: str, index: int,
                        annotations: Mapping[str, str]) -> PodContract:
    """`JobKind.pod_contract` of JobSet: the twin's role is the replicatedJob of that name."""
    return jobset_pods(job_name, namespace, role, index, read_contract(annotations))


def _replicated_jobs_status(twin: Mapping[str, Any], phase: str, counts: Any) -> list[dict[str, Any]]:
    """Per replicatedJob (the twin's role of that name): its Jobs by state, from the role's pod counts (a Job is
    `parallelism` pods): succeeded Jobs = succeeded pods // parallelism; when the gang failed, the rest failed;
    while it runs, the rest active, those with all pods running ready; when suspended, all suspended."""
    jobs = read_contract(Body(twin).annotations).get("replicatedJobs")
    out: list[dict[str, Any]] = []
    for job in jobs if isinstance(jobs, list) else ():
        if not isinstance(job, Mapping) or not isinstance(job.get("name"), str):
            continue
        replicas, parallelism = job.get("replicas"), job.get("parallelism")
        replicas = replicas if type(replicas) is int and replicas >= 0 else 0
        parallelism = parallelism if type(parallelism) is int and parallelism > 0 else 1
        pods = counts(job["name"])
        succeeded = min(replicas, pods["succeeded"] // parallelism)
        failed = replicas - succeeded if phase == "Failed" else 0
        active = replicas - succeeded - failed if phase in ("Admitted", "Running") else 0
        out.append({"name": job["name"], "ready": min(active, pods["running"] // parallelism),
                    "succeeded": succeeded, "failed": failed, "active": active,
                    "suspended": replicas if phase == "Suspended" else 0})
    return out


def jobset_status(source: Mapping[str, Any], twin: Mapping[str, Any] | None, *, now: str,
                  blocked: str | None = None) -> dict[str, Any]:
    """`JobKind.mirror_status` of JobSet: the status the JobSet controller (sigs.k8s.io/jobset@v0.10.1) writes,
    from the twin: conditions Suspended (SuspendedJobs "jobset is suspended", then False ResumeJobs "jobset is
    resumed"), Completed (AllJobsCompleted "jobset completed successfully"), Failed (FailedJobs "jobset failed
    due to one or more job failures", or the twin's reason and message when it failed otherwise, e.g.
    ClusterLost); terminalState Completed or Failed; restarts (the twin's requeues: each recreates every Job
    elsewhere); replicatedJobsStatus; plus the hub's phase, cluster and epoch. Without a twin (or `blocked`: the
    controller's Event says why) only the hub's phase Pending."""
    if twin is None:
        return hub_fields({}, None)
    state = twin_state(twin)
    existing = existing_conditions(source)
    conditions = suspension(existing, state, now, ("SuspendedJobs", "jobset is suspended"),
                            ("ResumeJobs", "jobset is resumed"))
    status: dict[str, Any] = {"restarts": state.requeues}
    if state.phase == "Succeeded":
        conditions.append(condition(existing, "Completed", "True", "AllJobsCompleted",
                                    "jobset completed successfully", now))
        status["terminalState"] = "Completed"
    if state.phase == "Failed":
        reason, message = failure(state, "FailedJobs", "jobset failed due to one or more job failures")
        conditions.append(condition(existing, "Failed", "True", reason, message, now))
        status["terminalState"] = "Failed"
    if conditions:
        status["conditions"] = conditions
    status["replicatedJobsStatus"] = _replicated_jobs_status(twin, state.phase, state.pods)
    return hub_fields(status, state)


_SCHEMA = load_upstream_schema("jobsets.json")

JOBSET = JobKind(
    group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet", plural="jobsets", singular="jobset",
    short_names=tuple(_SCHEMA.get("shortNames") or ()), schema=_SCHEMA["schema"], upstream=str(_SCHEMA["source"]),
    openapi_name="io.x-k8s.jobset.v1alpha2.JobSet", translate=translate_jobset, pod_contract=jobset_pod_contract,
    mirror_status=jobset_status,
    description="A JobSet run as one gang: each replicatedJob a role of replicas x parallelism pods.",
    terminal_conditions={"Completed": "Succeeded", "Failed": "Failed"},
    mirrored_status_fields=("replicatedJobsStatus", "restarts", "restartsCountTowardsMax", "terminalState"),
)
