"""spec.activeDeadlineSeconds and spec.placement.giveUpAfterSeconds (issue 29 item 5): valid values read back;
zero, negative, over int64, non-integer are errors naming the field; upstream kinds' deadlines map onto the twin."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from federator.apis.common import ValidationSettings
from federator.apis.jobkinds.batchjob import JOB
from federator.apis.jobkinds.kubeflow import PYTORCHJOB
from federator.apis.trainingjob import MAX_DEADLINE_SECONDS, TrainingJob, validate_trainingjob

from .test_trainingjob import example

SETTINGS = ValidationSettings()
FIELDS = {"spec.activeDeadlineSeconds": ("spec",), "spec.placement.giveUpAfterSeconds": ("spec", "placement")}


def with_field(path: str, value: Any) -> dict[str, Any]:
    job = example()
    where = job
    for key in FIELDS[path]:
        where = where.setdefault(key, {})
    where[path.rsplit(".", 1)[1]] = value
    return job


@pytest.mark.parametrize("path", sorted(FIELDS))
@pytest.mark.parametrize("value", [1, 2, 3600, MAX_DEADLINE_SECONDS])
def test_a_positive_int64_is_kept(path: str, value: int) -> None:
    job = with_field(path, value)
    before = copy.deepcopy(job)
    assert validate_trainingjob(job) == []
    assert job == before
    parsed = TrainingJob.model_validate(job)
    assert parsed.spec.active_deadline_seconds == (value if path == "spec.activeDeadlineSeconds" else None)
    placement = parsed.spec.placement
    assert placement is not None
    assert placement.give_up_after_seconds == (value if path == "spec.placement.giveUpAfterSeconds" else None)


@pytest.mark.parametrize("path", sorted(FIELDS))
@pytest.mark.parametrize("value", [0, -1, -(2**63), MAX_DEADLINE_SECONDS + 1, 10**40, 2.5, 1.0, "60", True,
                                   [60], {"seconds": 60}])
def test_bad_values_name_the_field(path: str, value: Any) -> None:
    errors = validate_trainingjob(with_field(path, value))
    assert [p for p, _ in errors] == [path], errors


def test_left_out_means_no_deadline() -> None:
    parsed = TrainingJob.model_validate(example())
    assert parsed.spec.active_deadline_seconds is None
    assert parsed.spec.placement is None or parsed.spec.placement.give_up_after_seconds is None


def test_kubeflow_run_policy_deadline_becomes_the_twins() -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p", "namespace": "ns"},
           "spec": {"runPolicy": {"activeDeadlineSeconds": 30}, "pytorchReplicaSpecs": {"Worker": {
               "replicas": 2, "template": {"spec": {"containers": [{"name": "pytorch", "image": "t:1"}]}}}}}}
    translation = PYTORCHJOB.translate(job, SETTINGS)
    assert translation.errors == [] and translation.spec is not None
    assert translation.spec["activeDeadlineSeconds"] == 30
    assert translation.field_paths["spec.activeDeadlineSeconds"] == "spec.runPolicy.activeDeadlineSeconds"


def _batch_job(deadline: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi", "namespace": "ns"},
            "spec": {"activeDeadlineSeconds": deadline, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "pi", "image": "perl:5"}]}}}}


def test_a_batch_jobs_deadline_becomes_the_twins() -> None:
    translation = JOB.translate(_batch_job(120), SETTINGS)
    assert translation.errors == [] and translation.spec is not None
    assert translation.spec["activeDeadlineSeconds"] == 120


@pytest.mark.parametrize("value", ["120", 1.5, [1]])
def test_a_batch_jobs_bad_deadline_names_the_field(value: Any) -> None:
    translation = JOB.translate(_batch_job(value), SETTINGS)
    assert translation.spec is None
    assert "spec.activeDeadlineSeconds" in [p for p, _ in translation.errors], translation.errors
