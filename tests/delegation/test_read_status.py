"""read_status, table-driven: member PodGroup and pod states (as the member schedulers and kubelets write
them) in, the job phase, counts per role and the reason that explains a wait or a failure out. The
objects are the adapter's own rendered objects with the status a member would give them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from delegation_support import make_job

from federator.delegation import GangPhase, RoleCounts, adapter_for
from federator.delegation.adapter import NO_GANG_GUARANTEE, POD_GVK

UID = "0d7f4c8a-95a2-4d7e-b2d4-7e2b0c3f9a61"
JOB = make_job(uid=UID, roles=[
    {"name": "ps", "replicas": 1, "template": {"image": "trainer:1.4", "resources": {"cpu": "1"}}},
    {"name": "worker", "replicas": 3, "template": {"image": "trainer:1.4", "resources": {"cpu": "2"}}},
])

JSON = dict[str, Any]


def rendered(adapter: str) -> tuple[JSON | None, list[JSON]]:
    a = adapter_for(adapter)
    objects = a.render(JOB, cluster_scheduler_name=a.default_scheduler_name, epoch=0, hub_id="hub", namespace="ns")
    group = next((copy.deepcopy(o.body) for o in objects if o.gvk != POD_GVK), None)
    pods = [copy.deepcopy(o.body) for o in objects if o.gvk == POD_GVK]
    return group, pods


def bound(pod: JSON, node: str = "node-1") -> JSON:
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    return pod


def phase(pod: JSON, value: str, **status: Any) -> JSON:
    bound(pod)
    pod["status"].update({"phase": value, **status})
    return pod


def unschedulable(pod: JSON, message: str) -> JSON:
    pod["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}
    return pod


def group_status(group: JSON | None, **status: Any) -> JSON | None:
    if group is not None:
        group["status"] = status
    return group


GANG_MESSAGE = ("4/4 tasks in gang unschedulable: pod group is not ready, 4 minAvailable; only 2 of the 4 pods "
                "still needed fit: 0/4 nodes are available: 4 Insufficient cpu.")
UNSCHEDULABLE = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": GANG_MESSAGE,
                 "transitionID": "x", "lastTransitionTime": "2024-05-01T12:00:00Z"}

Scenario = Callable[[JSON | None, list[JSON]], tuple[JSON | None, list[JSON]]]


def s_nothing(group: JSON | None, pods: list[JSON]) -> tuple[JSON | None, list[JSON]]:
    return None, []


def s_created(group: JSON | None, pods: list[JSON]) -> tuple[JSON | None, list[JSON]]:
    return group, pods


def s_group_says_unschedulable(group: JSON | None, pods: list[JSON]) -> tuple[JSON | None, list[JSON]]:
    return group_status(group, phase="Pending", conditions=[UNSCHEDULABLE]), \
        [unschedulable(p, GANG_MESSAGE) for p in pods]


def s_pods_say_unschedulable(group: JSON | None, pods: list[JSON]) -> tuple[JSON | None, list[JSON]]:
    return group_status(group, phase="Pending"), [unschedulable(p, "0/4 nodes are available: 4 Insufficient cpu.")
                                                  for p in pods]


def s_one_pod_missing(group: JSON | None, pods: list[JSON]) -> tuple[JSON | None, list[JSON]]:
    return group, pods[:-1]


def s_all_bound(group: JSON | None, pods: list[JSON]) -> tuple[JSON | None, list[JSON]]:
    return group_status(group, phase="Pending"), [bound(p) for p in pods]


def s_partly_bound(group: JSON | None, pods: list[JSON]) -> tuple[JSON | None, list[JSON]]:
    return group, [bound(p) for p in pods[:2]] + pods[2:]


def s_running(group: JSON | None, pods: list[JSON]) -> tuple[JSON | None, list[JSON]]:
    return group_status(group, phase="Running", running=4), [phase(p, "Running") for p in pods]


def s_ps_running_workers_done(group: JSON | None, pods: list[JSON]) -> tuple[JSON | None, list[JSON]]:
    return group, [phase(pods[0], "Running")] + [phase(p, "Succeeded") for p in pods[1:]]


def s_succeeded(group: JSON | None, pods: list[JSON]) -> tuple[JSON | None, list[JSON]]:
    return group, [phase(p, "Succeeded") for p in pods]


def s_worker_failed(group: JSON | None, pods: list[JSON]) -> tuple[JSON | None, list[JSON]]:
    failed = phase(pods[2], "Failed", reason="Error", containerStatuses=[{
        "name": "worker", "ready": False, "restartCount": 0, "image": "trainer:1.4", "imageID": "",
        "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}])
    return group, [phase(pods[0], "Running"), phase(pods[1], "Running"), failed, phase(pods[3], "Running")]


def s_group_gone(group: JSON | None, pods: list[JSON]) -> tuple[JSON | None, list[JSON]]:
    return None, pods


PODS_MESSAGE = "0/4 nodes are available: 4 Insufficient cpu."
WORKERS = RoleCounts(pending=3)
PS = RoleCounts(pending=1)

# scenario, adapter, phase, reason, message fragment, counts (ps, worker)
CASES = [
    (s_nothing, "volcano", GangPhase.PLACED, "NotCreated", "no member objects", (PS, WORKERS)),
    (s_created, "volcano", GangPhase.PLACED, "WaitingForScheduler", "0 of 4 pods bound; waiting for volcano",
     (PS, WORKERS)),
    (s_group_says_unschedulable, "volcano", GangPhase.PLACED, "NotEnoughResources",
     f"PodGroup resnet-ps-", (PS, WORKERS)),
    (s_group_says_unschedulable, "kube-batch", GangPhase.PLACED, "NotEnoughResources", GANG_MESSAGE, (PS, WORKERS)),
    (s_pods_say_unschedulable, "coscheduling", GangPhase.PLACED, "Unschedulable",
     "pod resnet-ps-vkk42-ps-0: 0/4 nodes are available: 4 Insufficient cpu. (0 of 4 pods bound)", (PS, WORKERS)),
    (s_pods_say_unschedulable, "default", GangPhase.PLACED, "Unschedulable", NO_GANG_GUARANTEE, (PS, WORKERS)),
    (s_one_pod_missing, "volcano", GangPhase.PLACED, "PodsMissing", "1 of 4 pods do not exist", (PS, WORKERS)),
    (s_one_pod_missing, "default", GangPhase.PLACED, "PodsMissing", "1 of 4 pods do not exist", (PS, WORKERS)),
    (s_all_bound, "coscheduling", GangPhase.ADMITTED, "Scheduled", "4 of 4 pods bound, 0 running", (PS, WORKERS)),
    (s_all_bound, "default", GangPhase.ADMITTED, "Scheduled", "4 of 4 pods bound", (PS, WORKERS)),
    (s_partly_bound, "default", GangPhase.PLACED, "WaitingForScheduler",
     f"2 of 4 pods bound; waiting for default; {NO_GANG_GUARANTEE}", (PS, WORKERS)),
    (s_running, "volcano", GangPhase.RUNNING, "Running", "all 4 pods are running",
     (RoleCounts(running=1), RoleCounts(running=3))),
    (s_ps_running_workers_done, "kube-batch", GangPhase.RUNNING, "Running", "all 4",
     (RoleCounts(running=1), RoleCounts(succeeded=3))),
    (s_succeeded, "coscheduling", GangPhase.SUCCEEDED, "Succeeded", "all 4 pods succeeded",
     (RoleCounts(succeeded=1), RoleCounts(succeeded=3))),
    (s_worker_failed, "volcano", GangPhase.FAILED, "PodFailed",
     "1 of 4 pods failed; first: pod resnet-ps-", (RoleCounts(running=1), RoleCounts(running=2, failed=1))),
    (s_group_gone, "volcano", GangPhase.PLACED, "PodGroupMissing", "PodGroup (podgroups.scheduling.volcano.sh)",
     (PS, WORKERS)),
]


@pytest.mark.parametrize(("scenario", "adapter", "expected_phase", "reason", "fragment", "counts"), [
    pytest.param(*case, id=f"{case[0].__name__[2:]}-{case[1]}") for case in CASES])
def test_read_status(
    scenario: Scenario, adapter: str, expected_phase: GangPhase, reason: str, fragment: str,
    counts: tuple[RoleCounts, RoleCounts],
) -> None:
    group, pods = scenario(*rendered(adapter))
    expected = {"ps": 1, "worker": 3} if not pods and group is None else None
    status = adapter_for(adapter).read_status(group, pods, expected=expected)
    assert (status.phase, status.reason) == (expected_phase, reason), status.message
    assert fragment in status.message
    assert dict(status.counts) == {"ps": counts[0], "worker": counts[1]}
    assert status.expected == 4


def test_worker_failure_message_names_the_pod_and_exit_code() -> None:
    group, pods = s_worker_failed(*rendered("volcano"))
    status = adapter_for("volcano").read_status(group, pods)
    assert status.message == ("1 of 4 pods failed; first: pod resnet-ps-vkk42-worker-1 (worker 1): Error; "
                              "container worker terminated (Error) with exit code 3")


def test_group_phase_admits_before_the_pods_show_their_binding() -> None:
    # Volcano writes PodGroup phase Running once minMember pods are allocated; the pods' own
    # watch events may lag. Inqueue only means the queue accepted the group: not admitted.
    group, pods = rendered("volcano")
    assert adapter_for("volcano").read_status(group_status(copy.deepcopy(group), phase="Running"), pods).phase \
        is GangPhase.ADMITTED
    inqueue = adapter_for("volcano").read_status(group_status(copy.deepcopy(group), phase="Inqueue"), pods)
    assert inqueue.phase is GangPhase.PLACED and "PodGroup phase Inqueue" in inqueue.message
    # coscheduling's Scheduling is part of the gang at Permit: not admitted either
    cgroup, cpods = rendered("coscheduling")
    assert adapter_for("coscheduling").read_status(group_status(cgroup, phase="Scheduling"), cpods).phase \
        is GangPhase.PLACED


def test_coscheduling_group_failed_fails_the_gang() -> None:
    group, pods = rendered("coscheduling")
    status = adapter_for("coscheduling").read_status(group_status(group, phase="Failed", failed=1), pods)
    assert (status.phase, status.reason, status.podgroup_phase) == (GangPhase.FAILED, "PodGroupFailed", "Failed")


def test_expected_comes_from_the_objects_annotation_or_the_caller() -> None:
    group, pods = rendered("volcano")
    status = adapter_for("volcano").read_status(None, pods[:1])
    assert (status.expected, status.existing, status.missing) == (4, 1, 3)
    assert status.counts["worker"] == RoleCounts(pending=3)
    # the caller's expectation wins (e.g. the job's spec)
    status = adapter_for("volcano").read_status(group, pods, expected={"ps": 1, "worker": 5})
    assert (status.expected, status.phase, status.reason) == (6, GangPhase.PLACED, "PodsMissing")
    assert status.counts["worker"] == RoleCounts(pending=5)


@pytest.mark.parametrize("garbage", [
    "", "ps", "ps=one", "ps=1,ps=2", "=1", "ps=1,,worker=2", "ps=99999999", None, 42, ["ps=1"]])
def test_malformed_gang_annotation_is_ignored(garbage: Any) -> None:
    _, pods = rendered("default")
    for pod in pods:
        pod["metadata"]["annotations"]["federator.dev/gang"] = garbage
    status = adapter_for("default").read_status(None, [phase(p, "Running") for p in pods])
    # without a usable annotation the pods that exist are the gang
    assert (status.expected, status.phase) == (4, GangPhase.RUNNING)


@pytest.mark.parametrize("junk", [
    {"metadata": None, "spec": None, "status": None},
    {"metadata": {"labels": {"federator.dev/index": "9" * 50}}, "status": {"phase": 7, "conditions": "x"}},
    {"status": {"conditions": [None, {"type": "PodScheduled", "status": "False"}],
                "containerStatuses": [None, {"state": None}]}},
    {},
])
def test_hostile_member_objects_do_not_break_status_reading(junk: JSON) -> None:
    group, pods = rendered("kube-batch")
    status = adapter_for("kube-batch").read_status(
        {"status": {"conditions": [None, {"type": "Unschedulable", "status": "True", "reason": "bad reason!"}]}},
        pods + [junk, "not a pod"],  # type: ignore[list-item]
    )
    assert status.phase is GangPhase.PLACED
    assert status.reason in ("Unschedulable", "WaitingForScheduler")


def test_pod_counts_convert_to_the_job_status_shape() -> None:
    assert RoleCounts(pending=1, running=2, succeeded=3, failed=4).as_dict() == \
        {"pending": 1, "running": 2, "succeeded": 3, "failed": 4}
    assert RoleCounts(pending=1, running=2).total == 3


# ---------------------------------------------------------------- Kubernetes' own PodGroup and KAI's

NATIVE_UNSCHEDULABLE = {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable",
                        "message": "0/4 nodes are available: 4 Insufficient cpu.", "observedGeneration": 1,
                        "lastTransitionTime": "2026-05-01T12:00:00Z"}
NATIVE_SCHEDULED = {**NATIVE_UNSCHEDULABLE, "status": "True", "reason": "Scheduled", "message": ""}


def kai_condition(reason: str, message: str, transition: str, pool: str = "default") -> JSON:
    return {"type": "UnschedulableOnNodePool", "nodePool": pool, "reason": "Unschedulable",
            "message": f"{reason}: {message}.", "reasons": [{"reason": reason, "message": message}],
            "status": "True", "transitionID": transition, "lastTransitionTime": "2026-05-01T12:00:00Z"}


def test_native_gang_is_admitted_by_its_podgroupscheduled_condition() -> None:
    group, pods = rendered("native")
    assert group is not None and "phase" not in group.get("status", {})
    waiting = adapter_for("native").read_status(group, pods)
    assert (waiting.phase, waiting.reason) == (GangPhase.PLACED, "WaitingForScheduler")
    assert waiting.message == "0 of 4 pods bound; waiting for native"
    # kube-scheduler says the gang went to binding before the pods' binds show
    admitted = adapter_for("native").read_status(group_status(copy.deepcopy(group), conditions=[NATIVE_SCHEDULED]),
                                                 pods)
    assert (admitted.phase, admitted.reason, admitted.podgroup_phase) == (GangPhase.ADMITTED, "Scheduled", None)


def test_native_unschedulable_condition_explains_the_wait() -> None:
    group, pods = rendered("native")
    status = adapter_for("native").read_status(
        group_status(group, conditions=[{"type": "DisruptionTarget", "status": "False", "reason": "X"},
                                        NATIVE_UNSCHEDULABLE]),
        [unschedulable(p, "0/4 nodes are available: 4 Insufficient cpu.") for p in pods])
    assert (status.phase, status.reason) == (GangPhase.PLACED, "Unschedulable")
    assert status.message.startswith("PodGroup resnet-ps-vkk42-e0: 0/4 nodes are available")
    # Volcano's condition type means nothing on Kubernetes' PodGroup, and the reverse
    group, pods = rendered("native")
    foreign = adapter_for("native").read_status(group_status(group, conditions=[UNSCHEDULABLE]), pods)
    assert foreign.reason == "WaitingForScheduler"
    vgroup, vpods = rendered("volcano")
    assert adapter_for("volcano").read_status(group_status(vgroup, conditions=[NATIVE_SCHEDULED]), vpods).phase \
        is GangPhase.PLACED


def test_kai_gang_is_admitted_by_its_last_start_timestamp() -> None:
    group, pods = rendered("kai")
    assert group is not None
    assert adapter_for("kai").read_status(group, pods).phase is GangPhase.PLACED
    group["metadata"]["annotations"]["kai.scheduler/last-start-timestamp"] = "2026-05-01T12:00:00Z"
    status = adapter_for("kai").read_status(group, pods)
    assert (status.phase, status.reason) == (GangPhase.ADMITTED, "Scheduled")


def test_kai_scheduling_conditions_explain_the_wait_with_the_latest_specific_reason() -> None:
    group, pods = rendered("kai")
    older = kai_condition("PodSchedulingErrors", "Resources were found for 1 pods while 4 are required", "1",
                          pool="pool-a")
    newer = kai_condition("QueueDoesNotExist", "Queue 'default-queue' does not exist", "2")
    status = adapter_for("kai").read_status(group_status(group, schedulingConditions=[older, newer]), pods)
    assert (status.phase, status.reason) == (GangPhase.PLACED, "QueueDoesNotExist")
    assert status.message == ("PodGroup resnet-ps-vkk42-e0: QueueDoesNotExist: Queue 'default-queue' does not "
                              "exist.")
    # several explanations: KAI's generic condition reason
    both = {**newer, "reasons": [older["reasons"][0], newer["reasons"][0]]}
    group, pods = rendered("kai")
    assert adapter_for("kai").read_status(group_status(group, schedulingConditions=[both]), pods).reason == \
        "Unschedulable"


@pytest.mark.parametrize(("adapter", "status", "metadata"), [
    ("native", {"conditions": "PodGroupScheduled"}, {}),
    ("native", {"conditions": [None, 7, {"type": "PodGroupScheduled", "status": "true", "reason": "Scheduled"}]}, {}),
    ("native", {"conditions": [{"type": ["PodGroupScheduled"], "status": "True"}]}, {}),
    ("native", {"conditions": [{"type": "PodGroupScheduled", "status": "False", "reason": "no such reason!",
                                "message": 42}]}, {}),
    ("kai", {"schedulingConditions": {"type": "UnschedulableOnNodePool"}}, {}),
    ("kai", {"schedulingConditions": [{"type": "UnschedulableOnNodePool", "status": "True",
                                       "reasons": [{"reason": "bad reason!"}, None]}]}, {}),
    ("kai", {"schedulingConditions": [{"type": "UnschedulableOnNodePool", "status": "True",
                                       "reasons": "QueueDoesNotExist", "message": None}]}, {}),
    ("kai", {}, {"annotations": {"kai.scheduler/last-start-timestamp": 12}}),
    ("kai", {}, {"annotations": {"kai.scheduler/last-start-timestamp": ""}}),
    ("kai", {}, {"annotations": ["kai.scheduler/last-start-timestamp"]}),
    ("kai", {}, "not metadata"),
])
def test_hostile_native_and_kai_status_neither_admits_nor_breaks(adapter: str, status: JSON, metadata: Any) -> None:
    group, pods = rendered(adapter)
    assert group is not None
    group["status"] = status
    group["metadata"] = metadata
    read = adapter_for(adapter).read_status(group, pods)
    assert read.phase is GangPhase.PLACED
    assert read.reason in ("Unschedulable", "WaitingForScheduler")
    assert isinstance(read.message, str) and read.message
