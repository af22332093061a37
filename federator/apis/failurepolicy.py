"""spec.failurePolicy of a TrainingJob: retries by kind of failure, in the style of batch/v1 Job's podFailurePolicy.

The API types (`FailurePolicy` with its rules, each an action and one of `onExitCodes` or `onPodConditions`, and
for Requeue what it excludes, `requeue.exclude`: Cluster, the default, or Node),
their cross-field checks (`failure_policy_errors`, with kube's wording and limits: at most 20 rules, at most 20
pod condition patterns, 1..255 exit code values, ordered, without duplicates, 0 not allowed with In; kube's
pkg/apis/batch/validation/validation.go `validatePodFailurePolicyRule*`), and the pure matching of one failed
pod against a policy (`match_pod_failure` -> `FailureMatch`: which rule, which action, why), defaults
included. Status sync (controllers/status_sync.py) is the one place that acts on a match.

Defaults, when no rule matches, and for every job without a spec.failurePolicy (kube would count the failure;
we know more about why ML pods fail):
- a lost node (a DisruptionTarget=True condition: taint eviction, PodGC, preemption; or the NodeLost reason a
  lost node's pods carry) -> Ignore: never counted;
- a GPU fault (a container's allocatedResourcesStatus names an Unhealthy GPU, or its message an Xid) ->
  Requeue excluding the node: the gang is placed again away from the failed pod's node for a while (the same
  cluster's other nodes may take it);
- OOMKilled -> FailJob with the member's message: the same template at the same size would be killed again
  (placement does not change a container's memory limit), so a retry only burns GPU-hours;
- an image pull error (a container waiting with ErrImagePull, ImagePullBackOff, InvalidImageName or
  ErrImageNeverPull: the pod never fails by itself, kube retries the pull forever) -> FailJob at once with
  the member's message;
- anything else -> Count (today's handling: counted toward spec.backoffLimit).

Bottom layer: pydantic and stdlib only, no I/O. It never changes the objects it reads.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, StrictInt, StrictStr

from federator.apis.common import ApiModel, FieldError

__all__ = [
    "FAILURE_POLICY_ACTIONS",
    "IMAGE_PULL_REASONS",
    "MAX_EXIT_CODE_VALUES",
    "MAX_POD_CONDITIONS",
    "MAX_RULES",
    "ExcludeScope",
    "FailureAction",
    "FailureMatch",
    "FailurePolicy",
    "FailurePolicyRule",
    "OnExitCodes",
    "OnPodCondition",
    "RequeueOptions",
    "container_names",
    "failure_policy_errors",
    "failure_policy_of",
    "first_failure",
    "image_pull_error",
    "match_pod_failure",
]

#: kube's limits (pkg/apis/batch/validation: maxPodFailurePolicyRules, maxPodFailurePolicyOnExitCodesValues,
#: maxPodFailurePolicyOnPodConditionsPatterns)
MAX_RULES = 20
MAX_EXIT_CODE_VALUES = 255
MAX_POD_CONDITIONS = 20

#: container waiting reasons of an image that cannot be pulled (kubelet's images.ErrImagePull & co)
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
#: the reason the simulator and kube's node lifecycle give the pods of a lost node
NODE_LOST_REASON = "NodeLost"


class FailureAction(enum.StrEnum):
    """What a matched rule does (docs/failover.md, "Retries by kind of failure")."""

    #: the failed pod is created again in place where its role tolerates it (restartPolicy OnFailure, or an
    #: elastic role with onWorkerLoss shrink), counted toward spec.backoffLimit; else the whole gang is placed
    #: again (counted in status.requeues, at most spec.failover.maxRequeues)
    RESTART_POD = "RestartPod"
    #: the gang moves whole elsewhere, its cluster excluded for a while (status.requeues, maxRequeues)
    REQUEUE = "Requeue"
    #: the job fails with the pod's reason (condition Failed, reason PodFailurePolicy)
    FAIL_JOB = "FailJob"
    #: as RestartPod, never counted
    IGNORE = "Ignore"
    #: kube's default handling: counted toward spec.backoffLimit (a role with restartPolicy Never fails the gang)
    COUNT = "Count"


FAILURE_POLICY_ACTIONS = tuple(a.value for a in FailureAction)


class ExcludeScope(enum.StrEnum):
    """What a Requeue keeps the gang away from for a while (HubSettings.stuck.exclusion_seconds)."""

    #: the whole cluster the gang ran in (status.placement.excludedClusters)
    CLUSTER = "Cluster"
    #: only the failed pod's node (status.placement.excludedNodes): the gang may stay in the cluster
    NODE = "Node"

Action = Literal["RestartPod", "Requeue", "FailJob", "Ignore", "Count"]


class OnExitCodes(ApiModel):
    """The requirement on the containers' exit codes (kube's PodFailurePolicyOnExitCodesRequirement)."""

    container_name: StrictStr | None = Field(default=None, alias="containerName", max_length=63, description=(
        "Only this container's exit code is checked; left out, every container's."))
    operator: Literal["In", "NotIn"] = Field(description=(
        "In: at least one container's exit code is in values; NotIn: at least one is not. Containers that "
        "exited 0 are left out."))
    values: list[StrictInt] = Field(max_length=MAX_EXIT_CODE_VALUES, json_schema_extra={
        "x-kubernetes-list-type": "set"}, description=(
        "Exit codes (0..255), ordered, without duplicates; 0 is not allowed with In. 1 to 255 of them."))


class OnPodCondition(ApiModel):
    """A pattern on the pod's conditions (kube's PodFailurePolicyOnPodConditionsPattern)."""

    type: StrictStr = Field(min_length=1, max_length=316, description="A pod condition type, e.g. DisruptionTarget.")
    status: Literal["True", "False", "Unknown"] = Field(default="True", description="The condition's status.")


class RequeueOptions(ApiModel):
    """How a Requeue rule moves the gang."""

    exclude: Literal["Cluster", "Node"] = Field(default="Cluster", description=(
        "Cluster (the default): the gang goes to another cluster, its cluster excluded for a while; Node: only "
        "the failed pod's node is excluded for a while, so the gang may be placed again in the same cluster."))


class FailurePolicyRule(ApiModel):
    """One rule: an action and one of onExitCodes or onPodConditions, not both."""

    action: Action = Field(description=(
        "RestartPod (the failed pod again in place where its role tolerates it, else the whole gang; counted), "
        "Requeue (the gang elsewhere, its cluster or node excluded: requeue.exclude), FailJob, Ignore (as "
        "RestartPod, never counted) or Count (counted toward spec.backoffLimit, the default handling)."))
    requeue: RequeueOptions | None = Field(default=None, description=(
        "Only with action Requeue: what the gang is kept away from (exclude: Cluster, the default, or Node)."))
    on_exit_codes: OnExitCodes | None = Field(default=None, alias="onExitCodes")
    on_pod_conditions: list[OnPodCondition] | None = Field(
        default=None, alias="onPodConditions", max_length=MAX_POD_CONDITIONS, json_schema_extra={
            "x-kubernetes-list-type": "atomic"},
        description="Satisfied when at least one pattern matches a condition of the pod.")


class FailurePolicy(ApiModel):
    """How the hub handles a failed pod of the gang, by kind of failure (batch/v1 Job's podFailurePolicy)."""

    rules: list[FailurePolicyRule] = Field(default_factory=list, max_length=MAX_RULES, json_schema_extra={
        "x-kubernetes-list-type": "atomic"}, description=(
        "Evaluated in order; the first that matches a pod's failure decides. When none matches the defaults "
        "apply: a lost node is ignored, a GPU fault requeues the gang away from the node, OOMKilled and an image "
        "pull error fail the job, anything else counts toward spec.backoffLimit. At most 20 rules."))


# ---------------------------------------------------------------- validation (kube's rules and wording)


def container_names(roles: object) -> frozenset[str]:
    """The names a rule's onExitCodes.containerName may take: each full-form template's containers and init
    containers, and each short-form role's one container (named after the role, as dispatch renders it)."""
    names: set[str] = set()
    for role in roles if isinstance(roles, list) else ():
        template = role.get("template") if isinstance(role, Mapping) else None
        if not isinstance(template, Mapping):
            continue
        spec = template.get("spec")
        if isinstance(spec, Mapping):
            for key in ("containers", "initContainers"):
                names.update(str(c["name"]) for c in spec.get(key) or () if isinstance(c, Mapping)
                             and isinstance(c.get("name"), str))
        elif isinstance(role.get("name"), str):
            names.add(role["name"])
    return frozenset(names)


def failure_policy_errors(policy: object, *, path: str, containers: frozenset[str] | None = None) -> list[FieldError]:
    """The cross-field rules the model cannot say, with exact paths; tolerates any shape. With `containers`
    (`container_names` of the job's roles), a containerName must be one of them, as kube requires."""
    if not isinstance(policy, Mapping):
        return []
    rules = policy.get("rules")
    if not isinstance(rules, list):
        return []
    errors: list[FieldError] = []
    for index, rule in enumerate(rules[:MAX_RULES]):
        if not isinstance(rule, Mapping):
            continue
        where = f"{path}.rules[{index}]"
        codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
        if codes is not None and conditions is not None:
            errors.append((where, "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported"))
        elif codes is None and conditions is None:
            errors.append((where, "Invalid value: specifying one of OnExitCodes and OnPodConditions is required"))
        if isinstance(codes, Mapping):
            errors += _exit_code_errors(codes, path=f"{where}.onExitCodes")
            name = codes.get("containerName")
            if containers is not None and isinstance(name, str) and name not in containers:
                errors.append((f"{where}.onExitCodes.containerName", f'Invalid value: "{name}": must be one of the '
                                                                      "container or initContainer names in the pod "
                                                                      "templates"))
        if isinstance(conditions, list) and not conditions and codes is None:
            errors.append((f"{where}.onPodConditions", "Required value: at least one pattern"))
        if rule.get("requeue") is not None and rule.get("action") != FailureAction.REQUEUE.value:
            errors.append((f"{where}.requeue", "Invalid value: only with action Requeue"))
    return errors


def _exit_code_errors(codes: Mapping[str, Any], *, path: str) -> list[FieldError]:
    values = codes.get("values")
    if not isinstance(values, list):
        return []
    if not values:
        return [(f"{path}.values", "Required value: at least one value is required")]
    errors: list[FieldError] = []
    ints = [v for v in values[:MAX_EXIT_CODE_VALUES] if type(v) is int]
    for i, value in enumerate(values[:MAX_EXIT_CODE_VALUES]):
        if type(value) is not int:
            continue
        if not 0 <= value <= 255:
            errors.append((f"{path}.values[{i}]", f"Invalid value: {value}: must be an exit code between 0 and 255"))
        elif value == 0 and codes.get("operator") == "In":
            errors.append((f"{path}.values[{i}]", "Invalid value: 0: must not be 0 for the In operator"))
    seen: set[int] = set()
    for i, value in enumerate(ints):
        if value in seen:
            errors.append((f"{path}.values[{i}]", f"Duplicate value: {value}"))
        seen.add(value)
    if not any(m[1].startswith("Duplicate") for m in errors) and ints != sorted(ints):
        errors.append((f"{path}.values", "Invalid value: must be ordered"))
    return errors


# ---------------------------------------------------------------- matching


@dataclass(frozen=True, slots=True)
class FailureMatch:
    """Which rule (or default) a pod failure matched and what it does."""

    action: FailureAction
    #: index in spec.failurePolicy.rules, None for a default
    rule: int | None
    #: the default's name (lost node, GPU fault, OOMKilled, image pull error, other) or the rule's requirement
    why: str
    #: Requeue: what the gang is kept away from (the rule's requeue.exclude; a GPU fault's default: the node)
    exclude: ExcludeScope = ExcludeScope.CLUSTER

    def describe(self) -> str:
        """`spec.failurePolicy.rules[1] (exit code In [42]): FailJob` or `default (OOMKilled): FailJob`."""
        where = f"spec.failurePolicy.rules[{self.rule}]" if self.rule is not None else "default"
        return f"{where} ({self.why}): {self.action.value}"


def _conditions(status: Mapping[str, Any]) -> dict[str, str]:
    return {str(c.get("type")): str(c.get("status")) for c in status.get("conditions") or ()
            if isinstance(c, Mapping) and isinstance(c.get("type"), str)}


def _containers(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for key in ("initContainerStatuses", "containerStatuses") for c in status.get(key) or ()
            if isinstance(c, Mapping)]


def _state(container: Mapping[str, Any], which: str) -> Mapping[str, Any]:
    state = container.get("state")
    found = state.get(which) if isinstance(state, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _exit_codes(status: Mapping[str, Any], container_name: str | None) -> list[int]:
    """The non-zero exit codes of the pod's terminated containers (kube leaves out those that exited 0)."""
    codes = []
    for container in _containers(status):
        if container_name is not None and container.get("name") != container_name:
            continue
        code = _state(container, "terminated").get("exitCode")
        if type(code) is int and code != 0:
            codes.append(code)
    return codes


def image_pull_error(status: Mapping[str, Any]) -> str | None:
    """The member's words when a container of the pod cannot get its image (waiting reason ErrImagePull &
    co), else None."""
    for container in _containers(status):
        waiting = _state(container, "waiting")
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            message = waiting.get("message")
            return (f"container {container.get('name')}: {waiting['reason']}"
                    + (f": {message}" if isinstance(message, str) and message else ""))[:512]
    return None


def _node_lost(status: Mapping[str, Any]) -> bool:
    if _conditions(status).get("DisruptionTarget") == "True" or status.get("reason") == NODE_LOST_REASON:
        return True
    return any(_state(c, "terminated").get("reason") == NODE_LOST_REASON for c in _containers(status))


def _gpu_fault(status: Mapping[str, Any]) -> bool:
    for container in _containers(status):
        for rs in container.get("allocatedResourcesStatus") or ():
            if isinstance(rs, Mapping) and any(isinstance(r, Mapping) and r.get("health") == "Unhealthy"
                                               for r in rs.get("resources") or ()):
                return True
        message = _state(container, "terminated").get("message")
        if isinstance(message, str) and "Xid " in message:
            return True
    return False


def _oom_killed(status: Mapping[str, Any]) -> bool:
    return any(_state(c, "terminated").get("reason") == "OOMKilled" for c in _containers(status))


def _rule_matches(rule: Mapping[str, Any], status: Mapping[str, Any]) -> str | None:
    """What the rule's requirement saw in the pod, or None when it does not match (an unknown operator
    never matches, as kube's clients are told to assume)."""
    codes = rule.get("onExitCodes")
    if isinstance(codes, Mapping):
        values = {v for v in codes.get("values") or () if type(v) is int}
        name = codes.get("containerName") if isinstance(codes.get("containerName"), str) else None
        found = _exit_codes(status, name)
        operator = codes.get("operator")
        hit = [c for c in found if (c in values) == (operator == "In")] if operator in ("In", "NotIn") else []
        return f"exit code {hit[0]} {operator} {sorted(values)}" if hit else None
    patterns = rule.get("onPodConditions")
    if isinstance(patterns, list):
        conditions = _conditions(status)
        for p in patterns:
            if isinstance(p, Mapping) and conditions.get(str(p.get("type"))) == str(p.get("status") or "True"):
                return f"condition {p.get('type')}={p.get('status') or 'True'}"
    return None


def match_pod_failure(policy: Mapping[str, Any], pod_status: Mapping[str, Any]) -> FailureMatch:
    """The first rule of `policy` (spec.failurePolicy, as stored) that matches the failed pod's status,
    else the default for the failure's kind (the module docstring's table)."""
    rules = policy.get("rules")
    for index, rule in enumerate(rules if isinstance(rules, list) else ()):
        if not isinstance(rule, Mapping) or rule.get("action") not in FAILURE_POLICY_ACTIONS:
            continue  # kube: clients skip a rule with an unknown action
        seen = _rule_matches(rule, pod_status)
        if seen is not None:
            options = rule.get("requeue")
            scope = options.get("exclude") if isinstance(options, Mapping) else None
            return FailureMatch(action=FailureAction(rule["action"]), rule=index, why=seen,
                                exclude=ExcludeScope(scope) if scope in ("Cluster", "Node") else ExcludeScope.CLUSTER)
    if image_pull_error(pod_status) is not None:
        return FailureMatch(action=FailureAction.FAIL_JOB, rule=None, why="image pull error")
    if _node_lost(pod_status):
        return FailureMatch(action=FailureAction.IGNORE, rule=None, why="node lost")
    if _gpu_fault(pod_status):
        return FailureMatch(action=FailureAction.REQUEUE, rule=None, why="GPU fault", exclude=ExcludeScope.NODE)
    if _oom_killed(pod_status):
        return FailureMatch(action=FailureAction.FAIL_JOB, rule=None,
                            why="OOMKilled: not retried at the same size; raise the container's memory limit")
    return FailureMatch(action=FailureAction.COUNT, rule=None, why="other failure")


def failure_policy_of(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """spec.failurePolicy as stored, or None when the job has none (the defaults alone apply then)."""
    policy = spec.get("failurePolicy")
    return policy if isinstance(policy, Mapping) else None


def first_failure(matches: Sequence[FailureMatch]) -> FailureMatch | None:
    """The match that decides for the gang: FailJob over Requeue over the rest (the first of its kind)."""
    for action in (FailureAction.FAIL_JOB, FailureAction.REQUEUE):
        for m in matches:
            if m.action is action:
                return m
    return None
