"""apis/jobkinds/kubeflowstatus.py: the twin's state as the Kubeflow operators show a job's."""

from __future__ import annotations

from typing import Any

from federator.apis.jobkinds.kubeflow import REPLICA_TYPES_ANNOTATION
from federator.apis.jobkinds.kubeflowstatus import kubeflow_status_of

mirrored_status = kubeflow_status_of("PyTorchJob")
SOURCE = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}}


def twin(phase: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "annotations": {REPLICA_TYPES_ANNOTATION: '["Master","Worker"]'}},
            "spec": {"roles": [{"name": "master"}, {"name": "worker"}]},
            "status": {"phase": phase, **status}}


def types(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_running_then_failed_keeps_times_and_says_why() -> None:
    running = mirrored_status(SOURCE, twin("Running", placement={"cluster": "a", "epoch": 2},
                                                       podCounts={"worker": {"running": 2, "pending": 1}}),
                              now="2026-01-01T00:00:00Z")
    assert types(running) == {"Created": ("True", "PyTorchJobCreated"), "Running": ("True", "PyTorchJobRunning")}
    assert (running["phase"], running["cluster"], running["epoch"]) == ("Running", "a", 2)
    assert running["replicaStatuses"] == {"Master": {"active": 0, "succeeded": 0, "failed": 0},
                                          "Worker": {"active": 3, "succeeded": 0, "failed": 0}}
    assert running["startTime"] == "2026-01-01T00:00:00Z"
    failed_twin = twin("Failed", conditions=[{"type": "Failed", "status": "True", "message": "worker 1 OOMKilled"}])
    failed = mirrored_status({**SOURCE, "status": running}, failed_twin, now="2026-01-01T00:05:00Z")
    assert types(failed)["Failed"] == ("True", "PyTorchJobFailed")
    assert types(failed)["Running"] == ("False", "PyTorchJobFailed")
    assert next(c for c in failed["conditions"] if c["type"] == "Failed")["message"] == "worker 1 OOMKilled"
    created = next(c for c in failed["conditions"] if c["type"] == "Created")
    assert created["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # unchanged since it became True
    assert failed["startTime"] == "2026-01-01T00:00:00Z" and "completionTime" not in failed


def test_no_twin_yet_or_a_name_taken() -> None:
    pending = mirrored_status(SOURCE, None, now="t")
    assert pending["phase"] == "Pending" and types(pending) == {"Created": ("False", "Pending")}
    taken = mirrored_status(SOURCE, None, now="t", blocked="NameTaken: someone else's job")
    assert types(taken) == {"Created": ("False", "NameTaken")}
    assert taken["conditions"][0]["message"] == "someone else's job"


def test_suspended_and_a_garbled_twin_status() -> None:
    suspended = mirrored_status(SOURCE, twin("Suspended"), now="t")
    assert types(suspended)["Suspended"] == ("True", "PyTorchJobSuspended")
    garbled = mirrored_status(SOURCE, {"metadata": {}, "spec": {"roles": "x"},
                                                   "status": {"phase": 7, "placement": [], "podCounts": "x"}},
                              now="t")
    assert garbled["phase"] == "Pending" and "cluster" not in garbled
