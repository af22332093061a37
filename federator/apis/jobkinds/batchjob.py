"""batch/v1 Job as a gang (issue 28): an Indexed Job whose parallelism equals its completions runs every index at
once, so it is a gang of `parallelism` pods; the hub's twin TrainingJob has one role, `worker`, with that many
replicas and the Job's own pod template.

The rules (each refusal is a 422 naming the Job's field):

- spec.completionMode Indexed: spec.completions must equal spec.parallelism (default 1). Completions beyond the
  pods that run at once need a Job controller that starts new pods as old ones finish, which a gang is not.
- spec.completionMode NonIndexed (kube's default): only a single pod (parallelism 1 and completions 1 or unset);
  several interchangeable pods are a work queue, not a gang (make the Job Indexed).
- spec.parallelism 0 is refused (suspend the Job instead); more than the hub's pod cap per role is refused.
- spec.template.spec.restartPolicy Never or OnFailure becomes the role's restartPolicy (the twin's template then
  states none: the hub renders it); it is required, as kube requires it.
- spec.backoffLimit (default 6) becomes the twin's backoffLimit; spec.suspend its suspend;
  spec.template.spec.priorityClassName its priorityClassName (it must agree with the hints' priority class).
- spec.podFailurePolicy becomes the twin's spec.failurePolicy (federator/apis/failurepolicy.py: the same rules,
  the same matching; an unmatched failure gets the hub's defaults, docs/failover.md), with kube's own rules: only
  with restartPolicy Never, and actions FailJob, Ignore and Count (kube's FailIndex needs spec.backoffLimitPerIndex,
  which a gang cannot express: it is refused, as kube refuses it without one; the hub's own actions Requeue and
  RestartPod are not batch/v1's). Its errors come back at spec.podFailurePolicy's paths.
- Refused, since a gang cannot express them: spec.successPolicy, spec.backoffLimitPerIndex, spec.maxFailedIndexes,
  and a spec.managedBy other than kube's own Job controller (kubernetes.io/job-controller); a JobSet's Job template's
  spec.podFailurePolicy (one policy per Job, while a JobSet's twin has one for the whole gang).
- spec.activeDeadlineSeconds becomes the twin's activeDeadlineSeconds (the hub enforces it, counted from the
  twin's first placement; in operator mode the member's Job controller enforces the copy's own as well).
- Documented defaults: spec.ttlSecondsAfterFinished, spec.podReplacementPolicy,
  spec.selector and spec.manualSelector are not part of the gang; a member whose own Job controller runs the Job
  (operator mode) honours them, the hub's own rendering does not.
- Queue, priority class, placement and failover come from the labels and annotations (`hints.py`).

The pod contract (what kube's Job controller, k8s.io/kubernetes@v1.36.3 pkg/controller/job, and the Job
registry strategy, pkg/registry/batch/job/strategy.go, put on a pod): labels `batch.kubernetes.io/job-name` and
`job-name` (the Job's name); for an Indexed Job the label and annotation `batch.kubernetes.io/job-completion-index`
(the pod's index in the role) and env `JOB_COMPLETION_INDEX` from the label by fieldRef, as
`addCompletionIndexEnvVariable` adds it; `batch.kubernetes.io/controller-uid` and `controller-uid` only when the
source Job's uid was known at translation (it rides on the twin, annotation `federator.dev/pod-contract`): they
are the Job's uid, which no rendered pod can know otherwise. The DNS identity (the contract's `dns`): an Indexed
Job's pod gets hostname `<job>-<index>` (kube's Job controller sets spec.hostname) and, when the template sets
spec.subdomain (kept in the contract annotation), that subdomain, for which the hub's rendering makes a headless
Service of that name selecting the gang's pods (under kube the user makes it); a NonIndexed Job's pod keeps the
hub's identity (kube's hostname is its random pod name). Not in the contract: the pod's name
(`<job>-<index>-<random>`), which the hub's rendering chooses itself.

Pure: no I/O; imports only `federator.apis` modules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from federator.apis.common import FieldError, ValidationSettings, json_type
from federator.apis.failurepolicy import MAX_RULES
from federator.apis.jobkinds.base import JobKind, PodContract, PodDns, Translation, load_upstream_schema
from federator.apis.jobkinds.hints import hints_from_metadata
from federator.apis.jobkinds.status import (
    condition,
    existing_conditions,
    failure,
    hub_fields,
    suspension,
    twin_state,
    was_true,
)
from federator.apis.trainingjob import DEFAULT_BACKOFF_LIMIT
from federator.apis.views import Body

__all__ = [
    "CONTRACT_ANNOTATION",
    "JOB",
    "JOB_CONTROLLER",
    "KUBE_POD_FAILURE_ACTIONS",
    "JobGang",
    "batch_job_pod_contract",
    "batch_job_status",
    "job_gang",
    "job_pod_contract",
    "merge_hints",
    "pod_failure_policy_of",
    "read_contract",
    "shown",
    "spec_of",
    "translate_batch_job",
]

#: on the twin: what the kind's pod contract needs (JSON), written by `translate` and read by `pod_contract`
CONTRACT_ANNOTATION: Final = "federator.dev/pod-contract"
#: the value of spec.managedBy that names kube's own Job controller (k8s.io/api batch/v1 JobControllerName)
JOB_CONTROLLER: Final = "kubernetes.io/job-controller"
#: the role of the twin
ROLE: Final = "worker"

LABEL_JOB_NAME: Final = "batch.kubernetes.io/job-name"
LABEL_LEGACY_JOB_NAME: Final = "job-name"
LABEL_CONTROLLER_UID: Final = "batch.kubernetes.io/controller-uid"
LABEL_LEGACY_CONTROLLER_UID: Final = "controller-uid"
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_ENV: Final = "JOB_COMPLETION_INDEX"

_INT32_MAX: Final = 2**31 - 1
_UNSUPPORTED: Final[Mapping[str, str]] = {
    "podFailurePolicy": "the hub's gang has one failure policy, not one per Job (a batch Job's own "
                        "spec.podFailurePolicy, or a TrainingJob's spec.failurePolicy)",
    "successPolicy": "the hub's gang succeeds when every pod has succeeded",
    "backoffLimitPerIndex": "the hub counts failures for the whole gang (spec.backoffLimit)",
    "maxFailedIndexes": "the hub's gang fails when any index fails past spec.backoffLimit",
}


def shown(value: object) -> str:
    """A submitted value as an error message may repeat it: a string quoted and cut at 64 characters, a
    number or boolean as JSON, anything else by its JSON type."""
    if isinstance(value, str):
        text = value if len(value) <= 64 else value[:64] + "..."
        return json.dumps(text)
    if isinstance(value, bool) or value is None or isinstance(value, int | float):
        return json.dumps(value)[:64]
    return json_type(value)


def spec_of(obj: object) -> tuple[Mapping[str, Any] | None, list[FieldError]]:
    """The source object's spec, or why there is none (the translators' first step)."""
    if not isinstance(obj, Mapping):
        return None, [("", "Invalid value: must be a JSON object")]
    source = obj.get("spec")
    if not isinstance(source, Mapping):
        return None, [("spec", "Required value" if source is None
                       else f"Invalid value: {json_type(source)}: must be of type object")]
    return source, []


def _int_field(spec: Mapping[str, Any], key: str, path: str, errors: list[FieldError], *,
               default: int | None) -> int | None:
    value = spec.get(key)
    if value is None:
        return default
    if type(value) is not int:
        errors.append((f"{path}.{key}", f"Invalid value: {shown(value)}: must be of type integer"))
        return None
    if value < 0:
        errors.append((f"{path}.{key}", f"Invalid value: {value}: must be greater than or equal to 0"))
        return None
    if value > _INT32_MAX:  # kube's int32 fields
        errors.append((f"{path}.{key}", f"Invalid value: {shown(value)}: must be less than or equal to {_INT32_MAX}"))
        return None
    return value


@dataclass(frozen=True, slots=True)
class JobGang:
    """What one batch/v1 JobSpec gives the gang: its pods that run at once, their restart policy, its backoff
    limit, the pod template for the twin (restartPolicy removed) and whether it is Indexed."""

    pods: int
    restart_policy: str
    backoff_limit: int
    template: dict[str, Any]
    indexed: bool
    priority_class: str | None


def job_gang(spec: object, *, path: str, settings: ValidationSettings,
             default_restart_policy: str | None = None,
             default_indexed: bool = False,
             pod_failure_policy: bool = False) -> tuple[JobGang | None, list[FieldError]]:
    """The gang a batch/v1 JobSpec at `path` runs (the module docstring's rules), or the errors at its paths.
    `default_restart_policy`: what a template without restartPolicy gets, `default_indexed`: whether a Job without
    completionMode is Indexed (JobSet's webhook defaults OnFailure and Indexed; a plain Job must state its
    restartPolicy and is NonIndexed by default); `pod_failure_policy`: spec.podFailurePolicy is the caller's to
    translate (`pod_failure_policy_of`), not refused."""
    if not isinstance(spec, Mapping):
        return None, [(path, f"Invalid value: {json_type(spec)}: must be of type object")]
    errors: list[FieldError] = []
    for key, why in _UNSUPPORTED.items():
        if key == "podFailurePolicy" and pod_failure_policy:
            continue
        if spec.get(key) is not None:
            errors.append((f"{path}.{key}", f"Forbidden: not supported by the hub: {why}"))
    managed_by = spec.get("managedBy")
    if managed_by is not None and managed_by != JOB_CONTROLLER:
        errors.append((f"{path}.managedBy", f"Unsupported value: {shown(managed_by)}: supported values: "
                                            f'"{JOB_CONTROLLER}" (or leave it out: the hub manages the Job)'))
    parallelism = _int_field(spec, "parallelism", path, errors, default=1)
    completions = _int_field(spec, "completions", path, errors, default=None)
    backoff = _int_field(spec, "backoffLimit", path, errors, default=DEFAULT_BACKOFF_LIMIT)
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("Indexed", "NonIndexed"):
        errors.append((f"{path}.completionMode", f'Unsupported value: {shown(mode)}: supported values: "Indexed", '
                                                 '"NonIndexed"'))
    indexed = mode == "Indexed" or (mode is None and default_indexed)
    if parallelism is not None:
        if parallelism == 0:
            errors.append((f"{path}.parallelism", "Invalid value: 0: a gang needs at least one pod (to hold the "
                                                  "Job back, set spec.suspend)"))
        elif parallelism > settings.max_replicas_per_role:
            errors.append((f"{path}.parallelism", f"Invalid value: {parallelism}: must be less than or equal to "
                                                  f"{settings.max_replicas_per_role} (the hub's pods per role)"))
        elif indexed:
            if completions is None and "completions" not in spec:
                errors.append((f"{path}.completions", "Required value: when completion mode is Indexed"))
            elif completions is not None and completions != parallelism:
                errors.append((f"{path}.completions", f"Invalid value: {completions}: must equal parallelism "
                                                      f"({parallelism}): the hub runs a Job as a gang, every "
                                                      "index at once"))
        else:
            if parallelism > 1:
                errors.append((f"{path}.completionMode", f"Invalid value: {shown(mode or 'NonIndexed')}: must be "
                                                         "Indexed for a gang of more than one pod (parallelism "
                                                         f"{parallelism})"))
            elif completions is not None and completions > 1:
                errors.append((f"{path}.completions", f"Invalid value: {completions}: a NonIndexed Job runs as a "
                                                      "gang of one pod: must be 1"))
    template = spec.get("template")
    pod_spec = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(template, Mapping):
        errors.append((f"{path}.template", "Required value" if template is None
                       else f"Invalid value: {json_type(template)}: must be of type object"))
    elif not isinstance(pod_spec, Mapping):
        errors.append((f"{path}.template.spec", "Required value" if pod_spec is None
                       else f"Invalid value: {json_type(pod_spec)}: must be of type object"))
    restart = pod_spec.get("restartPolicy") if isinstance(pod_spec, Mapping) else None
    if isinstance(pod_spec, Mapping):
        if restart is None:
            restart = default_restart_policy
            if restart is None:
                errors.append((f"{path}.template.spec.restartPolicy", 'Required value: supported values: "Never", '
                                                                      '"OnFailure"'))
        elif restart not in ("Never", "OnFailure"):
            errors.append((f"{path}.template.spec.restartPolicy", f"Unsupported value: {shown(restart)}: "
                                                                  'supported values: "Never", "OnFailure"'))
    priority_class = pod_spec.get("priorityClassName") if isinstance(pod_spec, Mapping) else None
    if priority_class is not None and not isinstance(priority_class, str):
        errors.append((f"{path}.template.spec.priorityClassName",
                       f"Invalid value: {json_type(priority_class)}: must be of type string"))
    if errors or not isinstance(template, Mapping) or not isinstance(pod_spec, Mapping):
        return None, errors
    assert parallelism is not None and backoff is not None and isinstance(restart, str)
    twin_template: dict[str, Any] = {"spec": {k: v for k, v in pod_spec.items() if k != "restartPolicy"}}
    if template.get("metadata") is not None:
        twin_template["metadata"] = template["metadata"]
    return JobGang(pods=parallelism, restart_policy=restart, backoff_limit=backoff, template=twin_template,
                   indexed=indexed, priority_class=priority_class or None), []


#: batch/v1 PodFailurePolicyAction values (k8s.io/api batch/v1 types.go)
KUBE_POD_FAILURE_ACTIONS: Final = ("Count", "FailIndex", "FailJob", "Ignore")


def pod_failure_policy_of(spec: Mapping[str, Any], *, restart_policy: str | None,
                          errors: list[FieldError]) -> dict[str, Any] | None:
    """A batch/v1 JobSpec's podFailurePolicy as the twin's spec.failurePolicy (the rules as written: the twin's
    validator checks them, at spec.podFailurePolicy's paths through `Translation.field_paths`), or None when there
    is none. kube's own rules go to `errors`: restartPolicy Never only, actions Count, FailJob and Ignore (FailIndex
    needs backoffLimitPerIndex, which the hub refuses)."""
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return None
    if not isinstance(policy, Mapping):
        errors.append(("spec.podFailurePolicy", f"Invalid value: {json_type(policy)}: must be of type object"))
        return None
    if restart_policy is not None and restart_policy != "Never":
        # kube's validatePodFailurePolicy: the Job controller must see every failed pod
        errors.append(("spec.template.spec.restartPolicy", f"Invalid value: {shown(restart_policy)}: only "
                                                           '"Never" is supported when podFailurePolicy is specified'))
    rules = policy.get("rules")
    for index, rule in enumerate(rules[:MAX_RULES] if isinstance(rules, list) else ()):
        action = rule.get("action") if isinstance(rule, Mapping) else None
        where = f"spec.podFailurePolicy.rules[{index}].action"
        if action == "FailIndex":
            errors.append((where, 'Invalid value: "FailIndex": requires spec.backoffLimitPerIndex, which the hub does '
                                  "not support: a gang fails whole (use FailJob)"))
        elif action is not None and action not in KUBE_POD_FAILURE_ACTIONS:
            errors.append((where, f"Unsupported value: {shown(action)}: supported values: "
                                  + ", ".join(f'"{a}"' for a in KUBE_POD_FAILURE_ACTIONS)))
    return dict(policy)


def merge_hints(spec: dict[str, Any], metadata: object, *, priority_class: str | None, priority_path: str,
                settings: ValidationSettings) -> list[FieldError]:
    """Add the metadata's hints (`hints_from_metadata`) to a twin spec; the kind's own priority class (at
    `priority_path`) must agree with the hints' one. Returns the errors."""
    hinted, errors = hints_from_metadata(metadata, settings=settings)
    spec.update(hinted)
    if priority_class is not None:
        if hinted.get("priorityClassName") not in (None, priority_class):
            errors.append((priority_path, f"Invalid value: {shown(priority_class)}: must agree with the "
                                          f"priority class the labels or annotations name "
                                          f"({shown(hinted['priorityClassName'])})"))
        spec["priorityClassName"] = priority_class
    return errors


def _uid(metadata: object) -> str | None:
    uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
    return uid if isinstance(uid, str) and uid and len(uid) <= 128 else None


def translate_batch_job(obj: Mapping[str, Any], settings: ValidationSettings) -> Translation:
    """A batch/v1 Job's twin TrainingJob spec (the module docstring's rules), or its errors at the Job's paths."""
    if not isinstance(obj, Mapping):
        return Translation(spec=None, errors=[("", "Invalid value: must be a JSON object")])
    gang, errors = job_gang(obj.get("spec"), path="spec", settings=settings, pod_failure_policy=True)
    spec: dict[str, Any] = {}
    source = obj.get("spec")
    failure_policy = pod_failure_policy_of(source, restart_policy=gang.restart_policy if gang else None,
                                           errors=errors) if isinstance(source, Mapping) else None
    suspend = source.get("suspend") if isinstance(source, Mapping) else None
    if suspend is not None and not isinstance(suspend, bool):
        errors.append(("spec.suspend", f"Invalid value: {shown(suspend)}: must be of type boolean"))
    deadline = source.get("activeDeadlineSeconds") if isinstance(source, Mapping) else None
    if deadline is not None and type(deadline) is not int:
        errors.append(("spec.activeDeadlineSeconds", f"Invalid value: {shown(deadline)}: must be of type integer"))
    errors += merge_hints(spec, obj.get("metadata"), priority_class=gang.priority_class if gang else None,
                          priority_path="spec.template.spec.priorityClassName", settings=settings)
    if errors or gang is None:
        return Translation(spec=None, errors=errors)
    spec.update({
        "roles": [{"name": ROLE, "replicas": gang.pods, "restartPolicy": gang.restart_policy,
                   "template": gang.template}],
        "backoffLimit": gang.backoff_limit,
        "suspend": bool(suspend),
    })
    if deadline is not None:  # the twin's own field, same path and meaning: the hub enforces it
        spec["activeDeadlineSeconds"] = deadline
    if failure_policy is not None:
        spec["failurePolicy"] = failure_policy
    contract: dict[str, Any] = {"indexed": gang.indexed}
    template_spec = gang.template.get("spec") if isinstance(gang.template, Mapping) else None
    subdomain = template_spec.get("subdomain") if isinstance(template_spec, Mapping) else None
    if isinstance(subdomain, str) and subdomain:
        contract["subdomain"] = subdomain
    uid = _uid(obj.get("metadata"))
    if uid is not None:
        contract["uid"] = uid
    return Translation(spec=spec, role_paths={ROLE: "spec.template"},
                       annotations={CONTRACT_ANNOTATION: json.dumps(contract, separators=(",", ":"))},
                       field_paths={"spec.failurePolicy": "spec.podFailurePolicy"})


def read_contract(annotations: Mapping[str, str]) -> Mapping[str, Any]:
    """The twin's CONTRACT_ANNOTATION as an object ({} when absent or malformed: the contract then holds what
    needs no more than the names)."""
    try:
        data = json.loads(annotations.get(CONTRACT_ANNOTATION) or "{}")
    except (TypeError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def job_pod_contract(job_name: str, index: int, *, indexed: bool, uid: object) -> PodContract:
    """What kube's Job controller and Job strategy put on pod `index` of the Job `job_name` (module docstring)."""
    labels = {LABEL_JOB_NAME: job_name, LABEL_LEGACY_JOB_NAME: job_name}
    if isinstance(uid, str) and uid:
        labels[LABEL_CONTROLLER_UID] = uid
        labels[LABEL_LEGACY_CONTROLLER_UID] = uid
    if not indexed:
        return PodContract(labels=labels)
    labels[COMPLETION_INDEX] = str(index)
    return PodContract(
        labels=labels, annotations={COMPLETION_INDEX: str(index)},
        env=({"name": COMPLETION_INDEX_ENV,
              "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{COMPLETION_INDEX}']"}}},))


def batch_job_pod_contract(job_name: str, namespace: str, role: str, index: int,
                           annotations: Mapping[str, str]) -> PodContract:
    """`JobKind.pod_contract` of batch/v1 Job: pod `index` of the role is the Job's completion index `index`."""
    contract = read_contract(annotations)
    indexed = contract.get("indexed") is True
    pods = job_pod_contract(job_name, index, indexed=indexed, uid=contract.get("uid"))
    if not indexed:  # kube names a NonIndexed Job's pod (and so its hostname) with a random suffix
        return pods
    subdomain = contract.get("subdomain")
    dns = PodDns(hostname=f"{job_name}-{index}", subdomain=subdomain if isinstance(subdomain, str) else "")
    return PodContract(labels=pods.labels, annotations=pods.annotations, env=pods.env, dns=dns)


#: kube Job conditions' times (batch/v1 JobCondition)
_JOB_TIMES = ("lastProbeTime", "lastTransitionTime")


def batch_job_status(source: Mapping[str, Any], twin: Mapping[str, Any] | None, *, now: str,
                     blocked: str | None = None) -> dict[str, Any]:
    """`JobKind.mirror_status` of batch/v1 Job: the status kube's Job controller (pkg/controller/job) writes, from
    the twin. active (pending + running pods), ready (running), succeeded, failed; conditions Suspended
    (JobSuspended "Job suspended", then False JobResumed "Job resumed"), SuccessCriteriaMet and Complete
    (CompletionsReached "Reached expected number of succeeded pods"), FailureTarget and Failed (the twin's reason,
    BackoffLimitExceeded "Job has reached the specified backoff limit" when it gives none); startTime once it
    runs, completionTime when it succeeds; plus the hub's phase, cluster and epoch. Without a twin (or `blocked`:
    the controller's Event says why) only the hub's phase Pending."""
    if twin is None:
        return hub_fields({}, None)
    state = twin_state(twin)
    existing = existing_conditions(source)
    old = Body(source).status
    pods = state.pods()
    status: dict[str, Any] = {"active": pods["pending"] + pods["running"], "ready": pods["running"],
                              "succeeded": pods["succeeded"], "failed": pods["failed"]}
    conditions = suspension(existing, state, now, ("JobSuspended", "Job suspended"), ("JobResumed", "Job resumed"),
                            times=_JOB_TIMES)
    if state.phase == "Succeeded":
        for ctype in ("SuccessCriteriaMet", "Complete"):
            conditions.append(condition(existing, ctype, "True", "CompletionsReached",
                                        "Reached expected number of succeeded pods", now, times=_JOB_TIMES))
    if state.phase == "Failed":
        reason, message = failure(state, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        for ctype in ("FailureTarget", "Failed"):
            conditions.append(condition(existing, ctype, "True", reason, message, now, times=_JOB_TIMES))
    if conditions:
        status["conditions"] = conditions
    start = old.get("startTime")
    if isinstance(start, str):
        status["startTime"] = start
    elif state.phase in ("Running", "Succeeded", "Failed"):
        status["startTime"] = now
    done = old.get("completionTime")
    if isinstance(done, str) and was_true(existing, "Complete"):
        status["completionTime"] = done
    elif state.phase == "Succeeded":
        status["completionTime"] = now
    return hub_fields(status, state)


_SCHEMA = load_upstream_schema("jobs.json")

JOB = JobKind(
    group="batch", version="v1", kind="Job", plural="jobs", singular="job", short_names=(),
    schema=_SCHEMA["schema"], upstream=str(_SCHEMA["source"]), openapi_name="io.k8s.api.batch.v1.Job",
    translate=translate_batch_job, pod_contract=batch_job_pod_contract, mirror_status=batch_job_status,
    description="A batch/v1 Job run as a gang: Indexed, parallelism = completions pods at once (one role, worker).",
    terminal_conditions={"Complete": "Succeeded", "Failed": "Failed"},
    mirrored_status_fields=("active", "ready", "succeeded", "failed", "terminating", "startTime", "completionTime",
                            "completedIndexes", "failedIndexes", "uncountedTerminatedPods"),
)
