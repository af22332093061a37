"""`federator describe job` says what spec.suspend does to a job in each phase (issue 31 item 6)."""

from __future__ import annotations

from typing import Any

from federator.cli.jobs import describe_job


def _job(*, suspend: bool, status: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"suspend": suspend, "roles": [{"name": "worker", "replicas": 1, "template": {"image": "t:1"}}]},
            "status": status}


def _phase(text: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith("Phase:")]
    return line


SUSPENDED = {"type": "Suspended", "status": "True", "reason": "Suspended", "message": "m",
             "lastTransitionTime": "2026-01-01T00:05:00Z"}


def test_a_suspended_job_says_since_when() -> None:
    job = _job(suspend=True, status={"phase": "Suspended", "conditions": [SUSPENDED]})
    assert _phase(describe_job(job)) == (
        "Phase:        Suspended since 2026-01-01T00:05:00Z: spec.suspend is true, so the job is not placed (a "
        "placed gang's member objects are deleted) until it is set to false")
    resumed = _job(suspend=False, status={"phase": "Suspended", "conditions": [SUSPENDED]})
    assert _phase(describe_job(resumed)) == (
        "Phase:        Suspended since 2026-01-01T00:05:00Z: spec.suspend is false again, so the job is queued for "
        "a placement")


def test_a_running_job_just_suspended_says_its_gang_is_being_stopped() -> None:
    job = _job(suspend=True, status={"phase": "Running", "placement": {"cluster": "a", "epoch": 2}})
    assert _phase(describe_job(job)) == ("Phase:        Running (spec.suspend is true: its gang is being deleted "
                                         "and the job suspended)")


def test_a_condition_without_a_time_says_no_time() -> None:
    job = _job(suspend=True, status={"phase": "Suspended", "conditions": [{"type": "Suspended",
                                                                                "status": "True"}]})
    assert _phase(describe_job(job)).startswith("Phase:        Suspended: spec.suspend is true")


def test_a_status_with_junk_entries_still_describes() -> None:
    """A status a hostile client wrote through /status with non-object conditions or history entries is
    described from the entries that are objects, not a crash."""
    job = _job(suspend=True, status={"phase": "Suspended", "conditions": ["junk", 3, None, SUSPENDED],
                                     "history": ["junk", {"time": "2026-01-01T00:05:00Z", "event": "Suspended"}],
                                     "placement": {"scores": ["junk"]}})
    text = describe_job(job)
    assert "Suspended since 2026-01-01T00:05:00Z" in text
    assert "junk" not in text
