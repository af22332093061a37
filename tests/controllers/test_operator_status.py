"""Status of an operator-mode gang (issue 28), the pure parts: the member copy's terminal condition ends the twin,
single pods that ended or went missing do not (the operator's business), the copy's conditions are kept
(sanitised) in the twin's status.operator, and the twin controller's mirror puts them on the source object."""

from __future__ import annotations

import json
from typing import Any

import pytest

from federator.apis.jobkinds import JOB_KINDS
from federator.apis.jobkinds.status import operator_conditions
from federator.apis.trainingjob import validate_trainingjob
from federator.controllers.status_sync import operated_gang_status, operator_status, synced_status, with_operator
from federator.delegation import GangPhase, GangStatus, RoleCounts, adapter_for

KINDS = {k.kind: k for k in JOB_KINDS}


def gs(phase: GangPhase, *, running: int = 0, succeeded: int = 0, failed: int = 0, reason: str = "x") -> GangStatus:
    counts = {"workers": RoleCounts(running=running, succeeded=succeeded, failed=failed)}
    return GangStatus(phase=phase, counts=counts, expected=4, existing=running + succeeded + failed, bound=4,
                      reason=reason, message="m")


def job(phase: str = "Running", operator: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "placement": {"cluster": "c1", "epoch": 2}}
    if operator is not None:
        status["operator"] = operator
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "paralleljobs", "namespace": "default", "uid": "u1"},
            "spec": {"roles": [{"name": "workers", "replicas": 4, "template": {"image": "busybox"}}]},
            "status": status}


def jobset(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "paralleljobs", "namespace": "default"}, "status": {"conditions": list(conditions)}}


COMPLETED = {"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
             "message": "jobset completed successfully", "lastTransitionTime": "2026-01-01T00:00:00Z"}
FAILED = {"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed",
          "lastTransitionTime": "2026-01-01T00:00:00Z"}


def test_the_copys_terminal_condition_ends_the_gang() -> None:
    kind = KINDS["JobSet"]
    done = operated_gang_status(job(), gs(GangPhase.RUNNING, running=4), jobset(COMPLETED), kind=kind)
    assert (done.phase, done.reason) == (GangPhase.SUCCEEDED, "AllJobsCompleted")
    assert "jobset completed successfully" in done.message and "JobSet default/paralleljobs" in done.message
    failed = operated_gang_status(job(), gs(GangPhase.RUNNING, running=4), jobset(COMPLETED, FAILED), kind=kind)
    assert (failed.phase, failed.reason) == (GangPhase.FAILED, "FailedJobs")
    odd = operated_gang_status(job(), gs(GangPhase.RUNNING), jobset({**FAILED, "reason": "not camel case!"}),
                               kind=kind)
    assert (odd.phase, odd.reason) == (GangPhase.FAILED, "Failed")


def test_single_pods_that_end_or_go_missing_are_the_operators_business() -> None:
    kind = KINDS["JobSet"]
    copy = jobset({"type": "Completed", "status": "False"})
    failed_pod = operated_gang_status(job(), gs(GangPhase.FAILED, running=3, failed=1), copy, kind=kind)
    assert (failed_pod.phase, failed_pod.reason) == (GangPhase.RUNNING, "OperatorRunning")
    all_done = operated_gang_status(job(), gs(GangPhase.SUCCEEDED, succeeded=4), copy, kind=kind)
    assert all_done.phase is GangPhase.ADMITTED  # never Succeeded before the operator says so
    missing = operated_gang_status(job("Running"), gs(GangPhase.PLACED, reason="PodsMissing"), copy, kind=kind)
    assert (missing.phase, missing.reason) == (GangPhase.ADMITTED, "OperatorRecreatingPods")
    not_yet = operated_gang_status(job("Placed"), gs(GangPhase.PLACED, reason="PodsMissing"), copy, kind=kind)
    assert not_yet.phase is GangPhase.PLACED
    # no copy in the index (gone, or not seen yet): what the pods show, as for any gang
    assert operated_gang_status(job(), gs(GangPhase.FAILED, failed=1), None, kind=kind).phase is GangPhase.FAILED


def test_a_succeeded_gang_is_written_with_the_operators_conditions_kept() -> None:
    kind = KINDS["JobSet"]
    copy = jobset(COMPLETED)
    operator = operator_status(copy, kind=kind, cluster="c1", epoch=2)
    assert operator == {"cluster": "c1", "epoch": 2, "kind": "JobSet.jobset.x-k8s.io", "conditions": [COMPLETED],
                        "status": {}}
    current = job()
    new = with_operator(current, synced_status(current, operated_gang_status(current, gs(GangPhase.RUNNING), copy,
                                                                             kind=kind),
                                               adapter=adapter_for("volcano"), cluster="c1", epoch=2, now=1.0),
                        operator)
    assert new is not None and new["phase"] == "Succeeded" and new["operator"] == operator
    stored = {**current, "status": new}
    assert validate_trainingjob(stored) == []
    # nothing new: no write
    assert with_operator(stored, None, operator) is None
    assert with_operator(stored, None, {**operator, "conditions": []})["operator"]["conditions"] == []


@pytest.mark.parametrize("conditions", [
    "garbage", [None, 3, "x"], [{"type": 1, "status": "True"}],
    [{"type": "Completed", "status": "True", "message": "m" * 100_000, "extra": {"nested": True}}],
    [{"type": f"T{i}", "status": "True"} for i in range(100)],
])
def test_the_copys_conditions_are_sanitised_so_the_twin_stays_valid(conditions: Any) -> None:
    copy = {"status": {"conditions": conditions}}
    operator = operator_status(copy, kind=KINDS["Job"], cluster="c1", epoch=2)
    assert len(operator["conditions"]) <= 32
    assert all(set(c) <= {"type", "status", "reason", "message", "lastTransitionTime", "lastProbeTime",
                          "lastUpdateTime"} for c in operator["conditions"])
    assert validate_trainingjob(job(operator=operator)) == []


def test_the_source_shows_the_copys_conditions_of_the_current_placement_only() -> None:
    mirrored = {"phase": "Running", "cluster": "c1", "epoch": 2,
                "conditions": [{"type": "Created", "status": "True"}]}
    twin = job(operator={"cluster": "c1", "epoch": 2, "kind": "JobSet.jobset.x-k8s.io",
                         "conditions": [COMPLETED]})
    out = operator_conditions(dict(mirrored), twin)
    assert out["conditions"] == [COMPLETED] and out["phase"] == "Running" and out["cluster"] == "c1"
    old_epoch = job(operator={"cluster": "c1", "epoch": 1, "kind": "x", "conditions": [COMPLETED]})
    assert operator_conditions(dict(mirrored), old_epoch) == mirrored
    no_conditions = job(operator={"cluster": "c1", "epoch": 2, "kind": "x", "conditions": []})
    assert operator_conditions(dict(mirrored), no_conditions) == mirrored
    assert operator_conditions(dict(mirrored), None) == mirrored
    assert operator_conditions(dict(mirrored), job()) == mirrored


@pytest.mark.parametrize("status", [
    {"replicatedJobsStatus": "garbage", "restarts": "x", "terminalState": "t" * 100_000},
    {"replicatedJobsStatus": [{"name": "w", "ready": 1}], "restartsCountTowardsMax": 2},
    {"replicatedJobsStatus": [{"name": f"w{i}", "ready": 1} for i in range(5000)]},
    "not an object",
])
def test_the_copys_status_fields_are_checked_and_bounded_so_the_twin_stays_valid(status: Any) -> None:
    copy = {"status": status} if not isinstance(status, dict) else {"status": {**status, "conditions": [COMPLETED]}}
    problems: dict[str, str] = {}
    operator = operator_status(copy, kind=KINDS["JobSet"], cluster="c1", epoch=2, problems=problems)
    assert set(operator.get("statusDropped") or ()) == set(problems)
    assert set(operator["status"]) | set(problems) == (set(status) if isinstance(status, dict) else set())
    assert len(json.dumps(operator["status"])) <= 128 * 1024
    assert validate_trainingjob(job(operator=operator)) == []
