"""spec.failurePolicy's types, checks (kube's podFailurePolicy limits and wording) and pure matching
(federator/apis/failurepolicy.py). Against the simulator's pods: tests/sim/test_pod_failures.py and
tests/controllers/test_failure_policy.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from federator.apis.failurepolicy import (
    ExcludeScope,
    FailureAction,
    container_names,
    first_failure,
    image_pull_error,
    match_pod_failure,
)
from federator.apis.trainingjob import validate_trainingjob

BASE: dict[str, Any] = {
    "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "j", "namespace": "ns"},
    "spec": {"roles": [{"name": "worker", "replicas": 1, "template": {"image": "trainer:1.4"}}]},
}


def errors(policy: Any) -> list[tuple[str, str]]:
    obj = copy.deepcopy(BASE)
    obj["spec"]["failurePolicy"] = policy
    return validate_trainingjob(obj)


def exited(*codes: int, reason: str = "Error", name: str = "main", **extra: Any) -> dict[str, Any]:
    return {"phase": "Failed", **extra, "containerStatuses": [
        {"name": f"{name}{i or ''}", "state": {"terminated": {"exitCode": c, "reason": reason}}}
        for i, c in enumerate(codes)]}


def test_a_valid_policy_passes_unchanged() -> None:
    policy = {"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "worker", "operator": "In", "values": [1, 42, 255]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}, {"type": "X", "status": "False"}]},
        {"action": "Requeue", "onExitCodes": {"operator": "NotIn", "values": [0, 1]}},
        {"action": "Requeue", "requeue": {"exclude": "Node"}, "onExitCodes": {"operator": "In", "values": [79]}},
        {"action": "Requeue", "requeue": {"exclude": "Cluster"}, "onExitCodes": {"operator": "In", "values": [80]}},
        {"action": "Requeue", "requeue": {}, "onExitCodes": {"operator": "In", "values": [81]}},
        {"action": "RestartPod", "onExitCodes": {"operator": "In", "values": [3]}},
        {"action": "Count", "onPodConditions": [{"type": "Ready", "status": "Unknown"}]},
    ]}
    assert errors(policy) == []
    assert errors({}) == [] and errors({"rules": []}) == []
    assert errors({"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}}] * 20}) == []


@pytest.mark.parametrize(("policy", "field", "words"), [
    ({"rules": [{"action": "Retry", "onExitCodes": {"operator": "In", "values": [1]}}]},
     "spec.failurePolicy.rules[0].action", 'Unsupported value: "Retry"'),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [-1]}}]},
     "spec.failurePolicy.rules[0].onExitCodes.values[0]", "between 0 and 255"),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [256]}}]},
     "spec.failurePolicy.rules[0].onExitCodes.values[0]", "between 0 and 255"),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2**40]}}]},
     "spec.failurePolicy.rules[0].onExitCodes.values[0]", "between 0 and 255"),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": ["1"]}}]},
     "spec.failurePolicy.rules[0].onExitCodes.values[0]", "integer"),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "in", "values": [1]}}]},
     "spec.failurePolicy.rules[0].onExitCodes.operator", 'supported values: "In", "NotIn"'),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"values": [1]}}]},
     "spec.failurePolicy.rules[0].onExitCodes.operator", "Required value"),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": []}}]},
     "spec.failurePolicy.rules[0].onExitCodes.values", "Required value"),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0]}}]},
     "spec.failurePolicy.rules[0].onExitCodes.values[0]", "must not be 0 for the In operator"),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [2, 1]}}]},
     "spec.failurePolicy.rules[0].onExitCodes.values", "must be ordered"),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1, 1]}}]},
     "spec.failurePolicy.rules[0].onExitCodes.values[1]", "Duplicate value: 1"),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": list(range(256))}}]},
     "spec.failurePolicy.rules[0].onExitCodes.values", "at most 255 items"),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}}] * 21},
     "spec.failurePolicy.rules", "at most 20 items"),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}}] * 1000},
     "spec.failurePolicy.rules", "at most 20 items"),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]},
                 "onPodConditions": [{"type": "DisruptionTarget"}]}]},
     "spec.failurePolicy.rules[0]", "specifying both OnExitCodes and OnPodConditions is not supported"),
    ({"rules": [{"action": "FailJob"}]},
     "spec.failurePolicy.rules[0]", "specifying one of OnExitCodes and OnPodConditions is required"),
    ({"rules": [{"action": "FailJob", "onPodConditions": []}]},
     "spec.failurePolicy.rules[0].onPodConditions", "Required value"),
    ({"rules": [{"action": "FailJob", "onPodConditions": [{"type": "X"}] * 21}]},
     "spec.failurePolicy.rules[0].onPodConditions", "at most 20 items"),
    ({"rules": [{"action": "FailJob", "onPodConditions": [{"type": "X", "status": "Maybe"}]}]},
     "spec.failurePolicy.rules[0].onPodConditions[0].status", "Unsupported value"),
    ({"rules": [{"action": "FailJob", "onPodConditions": [{"type": ""}]}]},
     "spec.failurePolicy.rules[0].onPodConditions[0].type", ""),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1], "x": 1}}]},
     "spec.failurePolicy.rules[0].onExitCodes.x", ""),
    ({"rules": [{"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [1]}}]},
     "spec.failurePolicy.rules[0].onExitCodes.containerName",
     '"main": must be one of the container or initContainer names'),
    ({"rules": "all"}, "spec.failurePolicy.rules", ""),
    ({"rules": [{"action": "Requeue", "requeue": {"exclude": "Rack"}, "onExitCodes": {"operator": "In", "values": [1]}}]},
     "spec.failurePolicy.rules[0].requeue.exclude", 'supported values: "Cluster", "Node"'),
    ({"rules": [{"action": "Requeue", "requeue": {"exclude": "x" * 100_000},
                 "onExitCodes": {"operator": "In", "values": [1]}}]},
     "spec.failurePolicy.rules[0].requeue.exclude", "Unsupported value"),
    ({"rules": [{"action": "Requeue", "requeue": {"exclude": "Node", "nodes": ["n1"]},
                 "onExitCodes": {"operator": "In", "values": [1]}}]},
     "spec.failurePolicy.rules[0].requeue.nodes", ""),
    ({"rules": [{"action": "Requeue", "requeue": "Node", "onExitCodes": {"operator": "In", "values": [1]}}]},
     "spec.failurePolicy.rules[0].requeue", ""),
    ({"rules": [{"action": "FailJob", "requeue": {"exclude": "Node"}, "onExitCodes": {"operator": "In", "values": [1]}}]},
     "spec.failurePolicy.rules[0].requeue", "only with action Requeue"),
    ("ignore", "spec.failurePolicy", ""),
])
def test_bad_policies_name_the_field(policy: Any, field: str, words: str) -> None:
    found = errors(policy)
    assert any(path == field and words in message for path, message in found), found


def test_container_names_are_the_templates() -> None:
    full = {"name": "w", "template": {"spec": {"containers": [{"name": "main"}, {"name": "side"}],
                                               "initContainers": [{"name": "init"}]}}}
    short = {"name": "ps", "template": {"image": "x"}}
    assert container_names([full, short, None, {"name": "x"}]) == {"main", "side", "init", "ps"}
    assert container_names("x") == frozenset()


def test_rules_match_in_order_and_kube_semantics() -> None:
    policy = {"rules": [
        {"action": "Bogus", "onExitCodes": {"operator": "In", "values": [5]}},  # an unknown action is skipped
        {"action": "FailJob", "onExitCodes": {"containerName": "sidecar", "operator": "In", "values": [5]}},
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [5]}},
        {"action": "Requeue", "onExitCodes": {"operator": "NotIn", "values": [1, 5]}},
        {"action": "RestartPod", "onPodConditions": [{"type": "Custom", "status": "False"}]},
    ]}
    hit = match_pod_failure(policy, exited(5))
    assert (hit.action, hit.rule, hit.why) == (FailureAction.IGNORE, 2, "exit code 5 In [5]")
    assert hit.describe() == "spec.failurePolicy.rules[2] (exit code 5 In [5]): Ignore"
    # NotIn: at least one non-zero code outside the values; exit code 0 is never looked at
    assert match_pod_failure(policy, exited(0, 1, 7)).rule == 3
    assert match_pod_failure(policy, exited(0, 1)).action is FailureAction.COUNT
    cond = exited(1, conditions=[{"type": "Custom", "status": "False"}])
    assert match_pod_failure(policy, cond).action is FailureAction.RESTART_POD
    # containerName restricts the check to that container
    assert match_pod_failure(policy, exited(5, name="sidecar")).action is FailureAction.FAIL_JOB
    # a rule comes before the defaults
    oom = exited(137, reason="OOMKilled")
    assert match_pod_failure({"rules": [{"action": "Requeue", "onExitCodes": {"operator": "In", "values": [137]}}]},
                             oom).action is FailureAction.REQUEUE
    # a Requeue rule excludes the cluster unless it says Node (a stored object may hold anything: a bad value
    # is the default)
    for options, scope in ((None, ExcludeScope.CLUSTER), ({}, ExcludeScope.CLUSTER),
                           ({"exclude": "Node"}, ExcludeScope.NODE), ({"exclude": "Cluster"}, ExcludeScope.CLUSTER),
                           ({"exclude": "Rack"}, ExcludeScope.CLUSTER), ("Node", ExcludeScope.CLUSTER)):
        rule = {"action": "Requeue", "requeue": options, "onExitCodes": {"operator": "In", "values": [137]}}
        assert match_pod_failure({"rules": [rule]}, oom).exclude is scope, options


def test_the_defaults() -> None:
    lost = {"phase": "Failed", "reason": "NodeLost", "containerStatuses": []}
    assert match_pod_failure({}, lost).action is FailureAction.IGNORE
    evicted = {"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert match_pod_failure({}, evicted).why == "node lost"
    not_evicted = {"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "False"}]}
    assert match_pod_failure({}, not_evicted).action is FailureAction.COUNT
    unhealthy = exited(134)
    unhealthy["containerStatuses"][0]["allocatedResourcesStatus"] = [
        {"name": "nvidia.com/gpu", "resources": [{"resourceID": "GPU-1", "health": "Unhealthy"}]}]
    gpu = match_pod_failure({}, unhealthy)
    assert gpu.action is FailureAction.REQUEUE and gpu.exclude is ExcludeScope.NODE  # off the node, not the cluster
    xid = exited(134)
    xid["containerStatuses"][0]["state"]["terminated"]["message"] = "Xid 79: GPU has fallen off the bus"
    assert match_pod_failure({}, xid).why == "GPU fault"
    assert match_pod_failure({}, exited(137, reason="OOMKilled")).action is FailureAction.FAIL_JOB
    assert match_pod_failure({}, exited(1)).action is FailureAction.COUNT
    pull = {"phase": "Pending", "containerStatuses": [
        {"name": "main", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}
    assert image_pull_error(pull) == "container main: ImagePullBackOff: Back-off pulling image"
    assert match_pod_failure({}, pull).action is FailureAction.FAIL_JOB
    assert image_pull_error({"containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]}) is None


def test_hostile_statuses_match_nothing_and_raise_nothing() -> None:
    for status in ({}, {"containerStatuses": "x"}, {"containerStatuses": [None, 3, {"state": "x"}]},
                   {"conditions": [None, {"type": 3}]}, {"containerStatuses": [{"state": {"terminated": {
                       "exitCode": "5"}}}]}, {"containerStatuses": [{"state": {"terminated": {"exitCode": True}}}]}):
        assert match_pod_failure({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [5, 1]}}]},
                                 status).action is FailureAction.COUNT, status
    assert match_pod_failure({"rules": "x"}, {}).action is FailureAction.COUNT
    assert first_failure([]) is None
