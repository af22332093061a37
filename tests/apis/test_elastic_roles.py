"""Elastic roles (issue 19): minReplicas / maxReplicas, restart and worker-loss policies, backoffLimit,
status.replicas and Resized history entries; every bad spec names its field; bounds frozen while placed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.apis.common import ValidationSettings
from federator.apis.trainingjob import (
    DEFAULT_BACKOFF_LIMIT,
    TrainingJob,
    placed_replicas,
    trainingjob_update_validator,
    validate_trainingjob,
)

from .test_trainingjob import example

ELASTIC_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "elastic-workers.yaml"


def elastic(**worker: Any) -> dict[str, Any]:
    """The design example with an elastic worker role (4..16, 8 preferred) plus `worker` changes."""
    job = example()
    job["spec"]["roles"][1].update({"minReplicas": 4, "maxReplicas": 16, **worker})
    return job


def test_elastic_role_validates_and_reads_back() -> None:
    job = elastic(onWorkerLoss="shrink", restartPolicy="OnFailure")
    job["spec"]["backoffLimit"] = 2
    assert validate_trainingjob(job) == []
    parsed = TrainingJob.model_validate(job)
    ps, worker = parsed.spec.roles
    assert (ps.fewest, ps.replicas, ps.most, ps.elastic) == (2, 2, 2, False)
    assert (worker.fewest, worker.replicas, worker.most, worker.elastic) == (4, 8, 16, True)
    assert worker.on_worker_loss == "shrink" and worker.restart_policy == "OnFailure"
    assert parsed.spec.backoff_limit == 2
    dumped = parsed.model_dump(exclude_none=True)["spec"]["roles"][1]
    assert {k: dumped[k] for k in ("minReplicas", "maxReplicas", "onWorkerLoss", "restartPolicy")} == {
        "minReplicas": 4, "maxReplicas": 16, "onWorkerLoss": "shrink", "restartPolicy": "OnFailure"}


def test_defaults_leave_a_role_fixed_and_backoff_at_six() -> None:
    parsed = TrainingJob.model_validate(example())
    assert all(not role.elastic and role.restart_policy is None and role.on_worker_loss is None
               for role in parsed.spec.roles)
    assert parsed.spec.backoff_limit == DEFAULT_BACKOFF_LIMIT == 6


@pytest.mark.parametrize(("worker", "low", "high"), [
    ({"minReplicas": 8}, 8, 8),            # min = replicas: a bound may equal the preferred size
    ({"maxReplicas": 8}, 8, 8),
    ({"minReplicas": 1, "maxReplicas": 8}, 1, 8),
    ({"minReplicas": 8, "maxReplicas": 1024}, 8, 1024),
])
def test_edge_bounds_are_accepted(worker: dict[str, Any], low: int, high: int) -> None:
    job = example()
    job["spec"]["roles"][1].update(worker)
    assert validate_trainingjob(job) == []
    role = TrainingJob.model_validate(job).spec.roles[1]
    assert (role.fewest, role.most) == (low, high)


# (case id, worker role changes, field, message fragment)
BAD_ELASTIC: list[tuple[str, dict[str, Any], str, str]] = [
    ("min-above-replicas", {"minReplicas": 9}, "spec.roles[1].minReplicas",
     "Invalid value: 9: must be less than or equal to replicas (8)"),
    ("max-below-replicas", {"maxReplicas": 7}, "spec.roles[1].maxReplicas",
     "Invalid value: 7: must be greater than or equal to replicas (8)"),
    ("min-zero", {"minReplicas": 0}, "spec.roles[1].minReplicas", "greater than or equal to 1"),
    ("min-negative", {"minReplicas": -4}, "spec.roles[1].minReplicas", "greater than or equal to 1"),
    ("max-zero", {"maxReplicas": 0}, "spec.roles[1].maxReplicas", "greater than or equal to 1"),
    ("min-string", {"minReplicas": "4"}, "spec.roles[1].minReplicas", "must be of type integer"),
    ("min-bool", {"minReplicas": True}, "spec.roles[1].minReplicas", "must be of type integer"),
    ("max-float", {"maxReplicas": 16.0}, "spec.roles[1].maxReplicas", "must be of type integer"),
    ("max-null-string", {"maxReplicas": "null"}, "spec.roles[1].maxReplicas", "must be of type integer"),
    ("max-huge", {"maxReplicas": 10**30}, "spec.roles[1].maxReplicas", "less than or equal to 1024"),
    ("max-above-role-cap", {"maxReplicas": 1025}, "spec.roles[1].maxReplicas", "less than or equal to 1024"),
    ("min-above-role-cap", {"replicas": 2000, "minReplicas": 1025}, "spec.roles[1].minReplicas",
     "less than or equal to 1024"),
    ("restart-policy-always", {"restartPolicy": "Always"}, "spec.roles[1].restartPolicy",
     'Unsupported value: "Always": supported values: "Never", "OnFailure"'),
    ("restart-policy-case", {"restartPolicy": "onfailure"}, "spec.roles[1].restartPolicy", "Unsupported value"),
    ("worker-loss-unknown", {"onWorkerLoss": "ignore"}, "spec.roles[1].onWorkerLoss",
     'Unsupported value: "ignore": supported values: "shrink", "restart"'),
    ("worker-loss-on-fixed-role", {"minReplicas": 8, "maxReplicas": 8, "onWorkerLoss": "shrink"},
     "spec.roles[1].onWorkerLoss", "Forbidden: only an elastic role"),
    ("worker-loss-restart-without-onfailure", {"minReplicas": 4, "onWorkerLoss": "restart"},
     "spec.roles[1].onWorkerLoss", "needs restartPolicy OnFailure"),
    ("worker-loss-restart-with-never", {"maxReplicas": 9, "onWorkerLoss": "restart", "restartPolicy": "Never"},
     "spec.roles[1].onWorkerLoss", "needs restartPolicy OnFailure"),
    ("snake-case-min", {"min_replicas": 4}, "spec.roles[1].min_replicas", "field not declared in schema"),
]


@pytest.mark.parametrize(("worker", "path", "fragment"), [c[1:] for c in BAD_ELASTIC],
                         ids=[c[0] for c in BAD_ELASTIC])
def test_bad_elastic_spec_names_the_field(worker: dict[str, Any], path: str, fragment: str) -> None:
    job = example()
    job["spec"]["roles"][1].update(worker)
    errors = validate_trainingjob(job)
    assert any(field == path and fragment in message for field, message in errors), errors
    assert all(field.startswith(("spec.roles[1]", "spec.roles")) for field, _ in errors), errors


def test_onworkerloss_on_a_fixed_role_without_bounds() -> None:
    job = example()
    job["spec"]["roles"][0]["onWorkerLoss"] = "shrink"
    assert validate_trainingjob(job) == [
        ("spec.roles[0].onWorkerLoss", "Forbidden: only an elastic role (minReplicas < maxReplicas) may set "
                                       "onWorkerLoss")]


@pytest.mark.parametrize(("value", "fragment"), [
    (-1, "greater than or equal to 0"), (2**31, "less than or equal to 2147483647"), (10**40, "less than"),
    ("6", "must be of type integer"), (6.5, "must be of type integer"), (False, "must be of type integer"),
])
def test_bad_backoff_limit(value: Any, fragment: str) -> None:
    job = example()
    job["spec"]["backoffLimit"] = value
    errors = validate_trainingjob(job)
    assert [field for field, _ in errors] == ["spec.backoffLimit"] and fragment in errors[0][1], errors


def test_backoff_limit_zero_is_allowed() -> None:
    job = example()
    job["spec"]["backoffLimit"] = 0
    assert validate_trainingjob(job) == []


def test_every_elastic_error_is_reported_at_once() -> None:
    job = example()
    job["spec"]["roles"][0].update(minReplicas=3, onWorkerLoss="shrink")
    job["spec"]["roles"][1].update(maxReplicas=2, restartPolicy="Sometimes")
    job["spec"]["backoffLimit"] = -2
    fields = {field for field, _ in validate_trainingjob(job)}
    assert fields == {"spec.roles[0].minReplicas", "spec.roles[1].maxReplicas", "spec.roles[1].restartPolicy",
                      "spec.backoffLimit"}


def test_gang_size_counts_every_role_at_its_maximum() -> None:
    job = example()
    job["spec"]["roles"] = [{"name": f"r{i}", "replicas": 1, "maxReplicas": 1000, "template": {"image": "x"}}
                            for i in range(9)]
    assert validate_trainingjob(job) == [
        ("spec.roles", "Invalid value: 9000: the gang may have at most 8192 pods in all (each role at maxReplicas)")]
    # at the limit exactly: fine
    job["spec"]["roles"] = [{"name": f"r{i}", "replicas": 1, "maxReplicas": 1024, "template": {"image": "x"}}
                            for i in range(8)]
    assert validate_trainingjob(job) == []
    # the configured caps apply to the bounds as to replicas
    strict = ValidationSettings(max_replicas_per_role=10, max_total_replicas=12)
    job = elastic()
    errors = validate_trainingjob(job, settings=strict)
    assert ("spec.roles[1].maxReplicas", "Invalid value: 16: must be less than or equal to 10") in errors
    job["spec"]["roles"][1]["maxReplicas"] = 10
    assert validate_trainingjob(job, settings=strict) == []  # 2 + 10 = 12: at the limit
    job["spec"]["roles"][0]["replicas"] = 3
    assert validate_trainingjob(job, settings=strict) == [
        ("spec.roles", "Invalid value: 13: the gang may have at most 12 pods in all (each role at maxReplicas)")]


def test_hostile_elastic_input_stays_bounded() -> None:
    job = example()
    job["spec"]["roles"] = [{"name": f"r{i}", "replicas": 5, "minReplicas": 10**18, "maxReplicas": -(10**18),
                             "onWorkerLoss": "x" * 100_000, "template": {"image": "x"}} for i in range(32)]
    errors = validate_trainingjob(job)
    assert 0 < len(errors) <= 101 and all(len(message) < 1000 for _, message in errors)
    assert ("spec.roles[31].minReplicas", "Invalid value: 1000000000000000000: must be less than or equal to 1024") \
        in errors


def test_status_replicas_and_resized_history() -> None:
    job = elastic()
    job["status"] = {
        "phase": "Running", "replicas": {"ps": 2, "worker": 6},
        "history": [{"time": "2024-05-01T12:00:01Z", "event": "Resized", "from": {"ps": 2, "worker": 8},
                     "to": {"ps": 2, "worker": 6}, "reason": "Preempted",
                     "message": "shrunk by 2 workers to make room for vision/urgent"}],
    }
    assert validate_trainingjob(job) == []
    status = TrainingJob.model_validate(job).status
    assert status is not None and status.replicas == {"ps": 2, "worker": 6}
    assert status.history is not None and status.history[0].to_replicas == {"ps": 2, "worker": 6}
    assert status.history[0].from_replicas == {"ps": 2, "worker": 8} and status.history[0].reason == "Preempted"

    bad = copy.deepcopy(job)
    bad["status"]["history"][0].pop("from")
    bad["status"]["replicas"] = {"Worker_1": 2, "ps": -1}
    bad["status"]["history"][0]["reason"] = "R" * 200
    fields = {field for field, _ in validate_trainingjob(bad)}
    assert fields == {"status.history[0].from", "status.replicas[Worker_1]", "status.replicas[ps]",
                      "status.history[0].reason"}


def test_placed_replicas_prefers_a_valid_status_record() -> None:
    job = elastic()
    assert placed_replicas(job) == {"ps": 2, "worker": 8}  # not placed yet: spec.replicas
    job["status"] = {"replicas": {"ps": 2, "worker": 13}}
    assert placed_replicas(job) == {"ps": 2, "worker": 13}
    for recorded in ({"ps": 2, "worker": 17}, {"ps": 2, "worker": 3}, {"ps": 1, "worker": 8}, {"worker": 8},
                     {"ps": 2, "worker": 8, "ghost": 1}, {"ps": 2, "worker": "12"}, {"ps": 2, "worker": True},
                     [1, 2], "worker=8"):
        job["status"] = {"replicas": recorded}
        assert placed_replicas(job) == {"ps": 2, "worker": 8}, recorded
    assert placed_replicas({"spec": "junk"}) == {}
    assert placed_replicas({"spec": {"roles": [{"name": "a"}, "x", {"name": "b", "replicas": 3}]}}) == {"b": 3}


def _placed(job: dict[str, Any]) -> dict[str, Any]:
    placed = copy.deepcopy(job)
    placed["status"] = {"phase": "Running", "placement": {"cluster": "onprem-a", "epoch": 1}}
    return placed


@pytest.mark.parametrize(("change", "path"), [
    ({"minReplicas": 5}, "spec.roles[1].minReplicas"),
    ({"maxReplicas": 12}, "spec.roles[1].maxReplicas"),
    ({"minReplicas": None}, "spec.roles[1].minReplicas"),
])
def test_bounds_are_frozen_while_placed(change: dict[str, Any], path: str) -> None:
    old = _placed(elastic())
    new = copy.deepcopy(old)
    for key, value in change.items():
        if value is None:
            del new["spec"]["roles"][1][key]
        else:
            new["spec"]["roles"][1][key] = value
    errors = trainingjob_update_validator()(new, old)
    assert [field for field, _ in errors] == [path]
    assert errors[0][1].startswith("Forbidden: may not be changed while the job is placed (in cluster onprem-a)")
    # not placed (pending, requeued, finished): the bounds may change
    old["status"] = {"phase": "Pending", "placement": {"epoch": 1}}
    assert trainingjob_update_validator()(new, old) == []


def test_placed_job_may_become_elastic_only_when_not_placed() -> None:
    old = _placed(example())
    new = elastic()
    assert [f for f, _ in trainingjob_update_validator()(new, old)] == ["spec.roles[1].minReplicas",
                                                                        "spec.roles[1].maxReplicas"]
    # other changes while placed stay allowed, as before
    same = copy.deepcopy(old)
    same["spec"]["roles"][1]["template"]["image"] = "trainer:1.5"
    same["spec"]["backoffLimit"] = 1
    assert trainingjob_update_validator()(same, old) == []


def test_the_elastic_example_file_validates() -> None:
    job = yaml.safe_load(ELASTIC_EXAMPLE.read_text())
    assert validate_trainingjob(job) == []
    worker = TrainingJob.model_validate(job).spec.roles[0]
    assert (worker.fewest, worker.replicas, worker.most) == (4, 8, 16)
