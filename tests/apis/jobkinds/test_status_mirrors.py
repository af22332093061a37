"""The status mirrors of batch/v1 Job, JobSet and TrainJob (their `JobKind.mirror_status`): the twin's state as
kube's Job controller, the JobSet controller and Trainer v2.0.0 write their kinds' status, with the hub's phase,
cluster and epoch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from federator.apis.common import ValidationSettings
from federator.apis.jobkinds import JOB_KINDS
from federator.apis.jobkinds.batchjob import JOB, batch_job_status
from federator.apis.jobkinds.jobset import JOBSET, jobset_status
from federator.apis.jobkinds.trainjob import TRAINJOB, trainjob_status

UPSTREAM = Path(__file__).resolve().parent / "upstream"
T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z"


def twin(phase: str, annotations: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "ns", "annotations": annotations or {}},
            "spec": {"roles": [{"name": "worker"}]}, "status": {"phase": phase, **status}}


def conds(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status.get("conditions", [])}


PLACED = {"placement": {"cluster": "east", "epoch": 3}}


def test_the_three_kinds_are_served_with_their_mirrors() -> None:
    assert all(any(k is kind for k in JOB_KINDS) for kind in (JOB, JOBSET, TRAINJOB))
    assert (JOB.mirror_status, JOBSET.mirror_status, TRAINJOB.mirror_status) == (
        batch_job_status, jobset_status, trainjob_status)
    assert len({(k.group, k.plural) for k in JOB_KINDS}) == len(JOB_KINDS)


def test_batch_job_runs_then_completes_as_kubes_job_controller_says() -> None:
    source: dict[str, Any] = {"metadata": {"name": "j"}}
    running = batch_job_status(source, twin("Running", podCounts={"worker": {"running": 3, "pending": 1,
                                                                           "succeeded": 1}}, **PLACED), now=T0)
    assert {k: running[k] for k in ("active", "ready", "succeeded", "failed")} == {
        "active": 4, "ready": 3, "succeeded": 1, "failed": 0}
    assert (running["phase"], running["cluster"], running["epoch"]) == ("Running", "east", 3)
    assert running["startTime"] == T0 and "completionTime" not in running and "conditions" not in running
    done = batch_job_status({**source, "status": running},
                            twin("Succeeded", podCounts={"worker": {"succeeded": 5}}, **PLACED), now=T1)
    assert conds(done) == {
        "SuccessCriteriaMet": ("True", "CompletionsReached", "Reached expected number of succeeded pods"),
        "Complete": ("True", "CompletionsReached", "Reached expected number of succeeded pods")}
    assert all(set(c) == {"type", "status", "reason", "message", "lastProbeTime", "lastTransitionTime"}
               for c in done["conditions"])
    assert (done["startTime"], done["completionTime"], done["active"], done["succeeded"]) == (T0, T1, 0, 5)
    again = batch_job_status({**source, "status": done},
                             twin("Succeeded", podCounts={"worker": {"succeeded": 5}}, **PLACED), now=T2)
    assert again == done  # nothing changed: times kept


def test_batch_job_suspended_resumed_and_failed() -> None:
    suspended = batch_job_status({}, twin("Suspended"), now=T0)
    assert conds(suspended) == {"Suspended": ("True", "JobSuspended", "Job suspended")}
    assert suspended["phase"] == "Suspended" and "startTime" not in suspended
    resumed = batch_job_status({"status": suspended}, twin("Running", **PLACED), now=T1)
    assert conds(resumed) == {"Suspended": ("False", "JobResumed", "Job resumed")}
    assert resumed["conditions"][0]["lastTransitionTime"] == T1
    failed = batch_job_status({"status": resumed}, twin("Failed", podCounts={"worker": {"failed": 7}}, conditions=[
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": ""}]), now=T2)
    assert conds(failed)["Failed"] == ("True", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    assert conds(failed)["FailureTarget"] == conds(failed)["Failed"]
    assert "completionTime" not in failed and failed["failed"] == 7
    lost = batch_job_status({}, twin("Failed", conditions=[
        {"type": "Failed", "status": "True", "reason": "ClusterLost", "message": "cluster east was lost"}]), now=T0)
    assert conds(lost)["Failed"] == ("True", "ClusterLost", "cluster east was lost")


def test_no_twin_or_a_garbled_one() -> None:
    for mirror in (batch_job_status, jobset_status, trainjob_status):
        assert mirror({}, None, now=T0) == {"phase": "Pending"}
        assert mirror({}, None, now=T0, blocked="NameTaken: x") == {"phase": "Pending"}
        garbled = mirror({"status": {"conditions": "x", "startTime": 5}},
                         {"metadata": {"annotations": {"federator.dev/pod-contract": "{"}}, "spec": [],
                          "status": {"phase": 7, "placement": [], "podCounts": {"worker": {"running": -1}},
                                     "conditions": "no", "requeues": "x"}}, now=T0)
        assert garbled["phase"] == "Pending" and "cluster" not in garbled and "epoch" not in garbled


def jobset_twin(phase: str, counts: dict[str, dict[str, int]], **status: Any) -> dict[str, Any]:
    obj = yaml.safe_load((UPSTREAM / "jobset-paralleljobs.yaml").read_text(encoding="utf-8"))
    translation = JOBSET.translate(obj, ValidationSettings())
    assert translation.spec is not None, translation.errors
    return {"metadata": {"name": "j", "annotations": dict(translation.annotations)}, "spec": translation.spec,
            "status": {"phase": phase, "podCounts": counts, **status}}


def test_jobset_replicated_jobs_and_conditions() -> None:
    obj = yaml.safe_load((UPSTREAM / "jobset-paralleljobs.yaml").read_text(encoding="utf-8"))
    shape = {r["name"]: (r.get("replicas", 1), r["template"]["spec"].get("parallelism", 1))
             for r in obj["spec"]["replicatedJobs"]}
    pods = {name: replicas * parallelism for name, (replicas, parallelism) in shape.items()}
    running = jobset_status({}, jobset_twin("Running", {n: {"running": p} for n, p in pods.items()},
                                            requeues=1, **PLACED), now=T0)
    assert (running["phase"], running["cluster"], running["epoch"], running["restarts"]) == ("Running", "east", 3, 1)
    assert "conditions" not in running and "terminalState" not in running
    assert running["replicatedJobsStatus"] == [
        {"name": n, "ready": r, "succeeded": 0, "failed": 0, "active": r, "suspended": 0}
        for n, (r, _) in shape.items()]
    done = jobset_status({"status": running},
                         jobset_twin("Succeeded", {n: {"succeeded": p} for n, p in pods.items()}), now=T1)
    assert conds(done) == {"Completed": ("True", "AllJobsCompleted", "jobset completed successfully")}
    assert set(done["conditions"][0]) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert done["terminalState"] == "Completed"
    assert [s["succeeded"] for s in done["replicatedJobsStatus"]] == [r for r, _ in shape.values()]
    failed = jobset_status({}, jobset_twin("Failed", {}), now=T1)
    assert conds(failed) == {"Failed": ("True", "FailedJobs", "jobset failed due to one or more job failures")}
    assert failed["terminalState"] == "Failed"
    assert [s["failed"] for s in failed["replicatedJobsStatus"]] == [r for r, _ in shape.values()]
    suspended = jobset_status({}, jobset_twin("Suspended", {}), now=T0)
    assert conds(suspended) == {"Suspended": ("True", "SuspendedJobs", "jobset is suspended")}
    assert [s["suspended"] for s in suspended["replicatedJobsStatus"]] == [r for r, _ in shape.values()]
    resumed = jobset_status({"status": suspended}, jobset_twin("Running", {}), now=T1)
    assert conds(resumed) == {"Suspended": ("False", "ResumeJobs", "jobset is resumed")}


def test_trainjob_conditions_as_trainer_writes_them() -> None:
    suspended = trainjob_status({}, twin("Suspended", **PLACED), now=T0)
    assert conds(suspended) == {"Suspended": ("True", "Suspended", "TrainJob is suspended")}
    assert (suspended["phase"], suspended["cluster"], suspended["epoch"]) == ("Suspended", "east", 3)
    resumed = trainjob_status({"status": suspended}, twin("Running"), now=T1)
    assert conds(resumed) == {"Suspended": ("False", "Resumed", "TrainJob is resumed")}
    done = trainjob_status({"status": resumed}, twin("Succeeded"), now=T2)
    assert conds(done) == {"Suspended": ("False", "Resumed", "TrainJob is resumed"),
                           "Complete": ("True", "AllJobsCompleted", "jobset completed successfully")}
    assert next(c for c in done["conditions"] if c["type"] == "Suspended")["lastTransitionTime"] == T1
    failed = trainjob_status({}, twin("Failed"), now=T0)
    assert conds(failed) == {"Failed": ("True", "FailedJobs", "jobset failed due to one or more job failures")}
    assert set(failed) == {"conditions", "phase"}
