"""delegation/contracts.py: the twin's source kind picks the pod contract put on each rendered pod."""

from __future__ import annotations

from typing import Any

from federator.apis.jobkinds import JOB_KINDS, SOURCE_KIND_ANNOTATION
from federator.apis.jobkinds.kubeflow import REPLICA_TYPES_ANNOTATION
from federator.delegation.contracts import CONTRACTS, apply_contract


def pod(**labels: str) -> dict[str, Any]:
    return {"metadata": {"name": "p", "labels": dict(labels)},
            "spec": {"containers": [{"name": "pytorch", "image": "x"}]}}


def test_every_kind_with_a_contract_is_registered_by_its_source_key() -> None:
    assert set(CONTRACTS) == {k.source_key for k in JOB_KINDS if k.pod_contract is not None}
    assert "PyTorchJob.kubeflow.org" in CONTRACTS and "MPIJob.kubeflow.org" in CONTRACTS


def test_the_contract_labels_a_rendered_pod_and_keeps_the_users_own() -> None:
    body = pod(**{"training.kubeflow.org/job-name": "mine"})
    notes = {SOURCE_KIND_ANNOTATION: "PyTorchJob.kubeflow.org", REPLICA_TYPES_ANNOTATION: '["Worker"]'}
    apply_contract(body, job_name="job", namespace="ns", role="worker", index=0, job_annotations=notes)
    labels = body["metadata"]["labels"]
    assert labels["training.kubeflow.org/job-name"] == "mine"  # the template's own label wins
    assert labels["training.kubeflow.org/replica-type"] == "worker"
    assert labels["training.kubeflow.org/job-role"] == "master"  # worker 0 without a Master


def test_a_plain_trainingjob_or_an_unknown_kind_gets_nothing() -> None:
    for notes in ({}, {SOURCE_KIND_ANNOTATION: "Nope.example.com"}, {SOURCE_KIND_ANNOTATION: "x" * 10000}):
        body = pod()
        apply_contract(body, job_name="job", namespace="ns", role="worker", index=0, job_annotations=notes)
        assert body == pod()
