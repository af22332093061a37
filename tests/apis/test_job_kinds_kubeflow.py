"""The Kubeflow kinds' translation into the twin TrainingJob, against the unchanged upstream examples in the Go
module cache (training-operator v1.8.1, mpi-operator v0.6.0), and bad input."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.apis.common import ValidationSettings
from federator.apis.jobkinds import JOB_KINDS, SOURCE_KIND_ANNOTATION, job_kind_by_source
from federator.apis.jobkinds.base import Translation, source_errors
from federator.apis.jobkinds.kubeflow import MPIJOB, PADDLEJOB, PYTORCHJOB, REPLICA_TYPES_ANNOTATION, TFJOB
from federator.apis.trainingjob import validate_trainingjob

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ValidationSettings()


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("gen_job_kind_schemas", ROOT / "scripts" / "gen_job_kind_schemas.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def upstream_example(module: str, version: str, path: str) -> dict[str, Any]:
    script = _script()
    try:
        directory = script.module_dir(module, version)
    except script.ModuleUnavailable as exc:
        pytest.skip(str(exc))
    loaded = yaml.safe_load((directory / path).read_text())
    assert isinstance(loaded, dict)
    return loaded


TO = ("github.com/kubeflow/training-operator", "v1.8.1")
MPI = ("github.com/kubeflow/mpi-operator", "v0.6.0")
EXAMPLES = {
    "PyTorchJob": (*TO, "examples/pytorch/simple.yaml"),
    "TFJob": (*TO, "examples/tensorflow/simple.yaml"),
    "PaddleJob": (*TO, "examples/paddlepaddle/simple-cpu.yaml"),
    "MPIJob": (*MPI, "examples/v2beta1/pi/pi.yaml"),
}
KINDS = {k.kind: k for k in JOB_KINDS}


def twin_errors(translation: Translation) -> list[tuple[str, str]]:
    assert translation.spec is not None
    twin = {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "x", "namespace": "ns"}, "spec": translation.spec}
    return validate_trainingjob(twin, settings=SETTINGS)


@pytest.mark.parametrize(("kind", "framework", "roles", "settings"), [
    ("PyTorchJob", "pytorch", [("master", 1, "OnFailure"), ("worker", 1, "OnFailure")], None),
    ("TFJob", "tensorflow", [("worker", 2, "OnFailure")], None),
    ("PaddleJob", "paddle", [("worker", 2, "OnFailure")], None),
    ("MPIJob", "mpi", [("launcher", 1, "Never"), ("worker", 2, "Never")], {"slotsPerWorker": 1}),
])
def test_the_upstream_example_translates_into_a_valid_twin(kind: str, framework: str, roles: list[Any],
                                                           settings: Any) -> None:
    example = upstream_example(*EXAMPLES[kind])
    source = copy.deepcopy(example)
    translation = KINDS[kind].translate(example, SETTINGS)
    assert example == source  # pure: the source is not changed
    assert translation.errors == []
    assert translation.spec is not None
    assert translation.spec["framework"] == framework
    assert [(r["name"], r["replicas"], r["restartPolicy"]) for r in translation.spec["roles"]] == roles
    assert translation.spec.get("frameworkSettings") == settings
    for role in translation.spec["roles"]:
        assert translation.role_paths[role["name"]].endswith(".template")
        assert role["template"]["spec"]["containers"]
    assert twin_errors(translation) == []


def test_every_kind_has_its_schema_names_and_contract() -> None:
    assert {k.kind for k in JOB_KINDS} >= {"PyTorchJob", "TFJob", "PaddleJob", "MPIJob"}
    assert PYTORCHJOB.api_version == "kubeflow.org/v1" and MPIJOB.api_version == "kubeflow.org/v2beta1"
    assert PYTORCHJOB.plural == "pytorchjobs" and TFJOB.plural == "tfjobs"
    assert "training-operator@v1.8.1" in PYTORCHJOB.upstream and "mpi-operator@v0.6.0" in MPIJOB.upstream
    assert job_kind_by_source("PyTorchJob.kubeflow.org") is PYTORCHJOB
    assert job_kind_by_source("Nope.example") is None
    assert SOURCE_KIND_ANNOTATION == "federator.dev/source-kind"
    for kind in JOB_KINDS:
        assert "pytorchReplicaSpecs" in json.dumps(PYTORCHJOB.schema) and kind.schema["type"] == "object"


def pytorch(**spec: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]}}
    base: dict[str, Any] = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                            "metadata": {"name": "p", "namespace": "ns"},
                            "spec": {"pytorchReplicaSpecs": {
                                "Master": {"replicas": 1, "template": template},
                                "Worker": {"replicas": 3, "restartPolicy": "OnFailure", "template": template}}}}
    base["spec"].update(spec)
    return base


def test_pytorch_elastic_policy_run_policy_and_hints() -> None:
    job = pytorch(elasticPolicy={"minReplicas": 2, "maxReplicas": 5, "nProcPerNode": 4, "rdzvBackend": "c10d"},
                  runPolicy={"backoffLimit": 2, "suspend": True, "cleanPodPolicy": "Running",
                             "schedulingPolicy": {"queue": "research", "priorityClass": "high"}})
    job["metadata"]["annotations"] = {"federator.dev/gpu-models": "A100, H100", "federator.dev/network": "rdma",
                                      "federator.dev/datasets": "imagenet", "federator.dev/on-cluster-loss": "fail",
                                      "federator.dev/max-requeues": "2",
                                      "federator.dev/cluster-selector": "tier=research"}
    translation = PYTORCHJOB.translate(job, SETTINGS)
    assert translation.errors == []
    spec = translation.spec
    assert spec is not None
    worker = spec["roles"][1]
    assert (worker["minReplicas"], worker["maxReplicas"]) == (2, 5)
    assert spec["frameworkSettings"] == {"nprocPerNode": "4"}
    assert (spec["backoffLimit"], spec["suspend"], spec["queue"], spec["priorityClassName"]) == (
        2, True, "research", "high")
    assert spec["placement"] == {"gpuModels": ["A100", "H100"], "network": "rdma", "datasets": ["imagenet"],
                                 "clusterSelector": {"matchLabels": {"tier": "research"}}}
    assert spec["failover"] == {"onClusterLoss": "fail", "maxRequeues": 2}
    assert json.loads(translation.annotations[REPLICA_TYPES_ANNOTATION]) == ["Master", "Worker"]
    assert twin_errors(translation) == []


def test_the_kueue_queue_label_names_the_queue() -> None:
    job = pytorch()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
    translation = PYTORCHJOB.translate(job, SETTINGS)
    assert translation.spec is not None and translation.spec["queue"] == "team-a"
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": "team-b"}}
    assert PYTORCHJOB.translate(job, SETTINGS).errors == [
        ("metadata.labels[kueue.x-k8s.io/queue-name]",
         'Invalid value: "team-a": spec.runPolicy.schedulingPolicy.queue names another queue ("team-b")')]


def test_restart_policies() -> None:
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Always"
    translation = PYTORCHJOB.translate(job, SETTINGS)
    assert translation.spec is not None and translation.spec["roles"][1]["restartPolicy"] == "OnFailure"
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    [(path, message)] = PYTORCHJOB.translate(job, SETTINGS).errors
    assert path == "spec.pytorchReplicaSpecs[Worker].restartPolicy" and "exit codes" in message


@pytest.mark.parametrize(("change", "path"), [
    (lambda j: j["spec"]["pytorchReplicaSpecs"].update({"Chief": {"replicas": 1}}), "spec.pytorchReplicaSpecs[Chief]"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update({"replicas": 100000}),
     "spec.pytorchReplicaSpecs[Worker].replicas"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update({"replicas": "3"}),
     "spec.pytorchReplicaSpecs[Worker].replicas"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update({"replicas": True}),
     "spec.pytorchReplicaSpecs[Worker].replicas"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update({"replicas": 0}),
     "spec.pytorchReplicaSpecs[Worker].replicas"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].pop("template"),
     "spec.pytorchReplicaSpecs[Worker].template"),
    (lambda j: j["spec"].update({"pytorchReplicaSpecs": []}), "spec.pytorchReplicaSpecs"),
    (lambda j: j["spec"].update({"runPolicy": {"activeDeadlineSeconds": "10"}}), "spec.runPolicy.activeDeadlineSeconds"),
    (lambda j: j["spec"].update({"runPolicy": {"activeDeadlineSeconds": 1.5}}), "spec.runPolicy.activeDeadlineSeconds"),
    (lambda j: j["spec"].update({"runPolicy": {"cleanPodPolicy": "Sometimes"}}), "spec.runPolicy.cleanPodPolicy"),
    (lambda j: j["spec"].update({"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}}),
     "spec.runPolicy.managedBy"),
    (lambda j: j["spec"].update({"runPolicy": {"backoffLimit": "6"}}), "spec.runPolicy.backoffLimit"),
    (lambda j: j["spec"].update({"runPolicy": {"suspend": "yes"}}), "spec.runPolicy.suspend"),
    (lambda j: j["spec"].update({"runPolicy": {"schedulingPolicy": {"queue": 7}}}),
     "spec.runPolicy.schedulingPolicy.queue"),
    (lambda j: j["spec"].update({"elasticPolicy": {"minReplicas": 4}}), "spec.elasticPolicy.minReplicas"),
    (lambda j: j["spec"].update({"elasticPolicy": {"maxReplicas": 2}}), "spec.elasticPolicy.maxReplicas"),
    (lambda j: j["spec"].update({"elasticPolicy": {"metrics": [{"type": "Resource"}]}}), "spec.elasticPolicy.metrics"),
    (lambda j: j["spec"].update({"elasticPolicy": {"rdzvBackend": "etcd"}}), "spec.elasticPolicy.rdzvBackend"),
    (lambda j: j["spec"].update({"nprocPerNode": 4}), "spec.nprocPerNode"),
    (lambda j: j["metadata"].update({"annotations": {"federator.dev/max-requeues": "9" * 40}}),
     "metadata.annotations[federator.dev/max-requeues]"),
    (lambda j: j["metadata"].update({"annotations": {"federator.dev/cluster-selector": "novalue"}}),
     "metadata.annotations[federator.dev/cluster-selector]"),
])
def test_bad_input_is_an_error_at_the_source_field(change: Any, path: str) -> None:
    job = pytorch()
    change(job)
    translation = PYTORCHJOB.translate(job, SETTINGS)
    assert translation.spec is None
    assert path in [p for p, _ in translation.errors], translation.errors


@pytest.mark.parametrize("hostile", [None, [], "x", 7, {"spec": None}, {"spec": {"pytorchReplicaSpecs": {"Worker": 5}}},
                                     {"spec": {"pytorchReplicaSpecs": {"W" * 100000: {}}}},
                                     {"spec": {"runPolicy": [], "pytorchReplicaSpecs": {}}}])
def test_hostile_shapes_are_errors_never_exceptions(hostile: Any) -> None:
    for kind in JOB_KINDS:
        translation = kind.translate(hostile, SETTINGS)
        assert translation.spec is None and translation.errors
        assert all(len(path) < 300 and len(message) < 1000 for path, message in translation.errors)


def test_twin_validator_errors_map_back_to_source_paths() -> None:
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] = {"spec": {"containers": []}}
    translation = PYTORCHJOB.translate(job, SETTINGS)
    mapped = [p for p, _ in source_errors(twin_errors(translation), translation)]
    assert "spec.pytorchReplicaSpecs[Worker].template.spec.containers" in mapped
    # a bad hint is refused by the translation itself (hints.py), at the annotation's path
    job["metadata"]["annotations"] = {"federator.dev/network": "carrier-pigeon"}
    refused = PYTORCHJOB.translate(job, SETTINGS)
    assert refused.spec is None
    assert [p for p, _ in refused.errors] == ["metadata.annotations[federator.dev/network]"]


def test_other_kinds_specifics() -> None:
    tf = upstream_example(*EXAMPLES["TFJob"])
    tf["spec"]["enableDynamicWorker"] = True
    assert [p for p, _ in TFJOB.translate(tf, SETTINGS).errors] == ["spec.enableDynamicWorker"]
    paddle = upstream_example(*EXAMPLES["PaddleJob"])
    paddle["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 4}
    assert [p for p, _ in PADDLEJOB.translate(paddle, SETTINGS).errors] == ["spec.elasticPolicy"]
    mpi = upstream_example(*EXAMPLES["MPIJob"])
    mpi["spec"]["runLauncherAsWorker"] = True
    mpi["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert [p for p, _ in MPIJOB.translate(mpi, SETTINGS).errors] == ["spec.runPolicy.managedBy",
                                                                      "spec.runLauncherAsWorker"]
    mpi["spec"]["runPolicy"]["managedBy"] = "kubeflow.org/mpi-operator"
    mpi["spec"]["runLauncherAsWorker"] = False
    mpi["spec"]["mpiImplementation"] = "Intel"
    translation = MPIJOB.translate(mpi, SETTINGS)
    assert translation.spec is not None and translation.spec["frameworkSettings"] == {
        "slotsPerWorker": 1, "mpiImplementation": "Intel"}


def test_pod_contracts_follow_the_operators() -> None:
    contract = PYTORCHJOB.pod_contract
    assert contract is not None
    both = {REPLICA_TYPES_ANNOTATION: '["Master","Worker"]'}
    assert contract("p", "ns", "master", 0, both).labels == {
        "training.kubeflow.org/operator-name": "pytorchjob-controller", "training.kubeflow.org/job-name": "p",
        "training.kubeflow.org/replica-type": "master", "training.kubeflow.org/replica-index": "0",
        "training.kubeflow.org/job-role": "master"}
    assert "training.kubeflow.org/job-role" not in contract("p", "ns", "worker", 0, both).labels
    workers_only = {REPLICA_TYPES_ANNOTATION: '["Worker"]'}
    assert contract("p", "ns", "worker", 0, workers_only).labels["training.kubeflow.org/job-role"] == "master"
    assert "training.kubeflow.org/job-role" not in contract("p", "ns", "worker", 1, workers_only).labels
    assert contract("p", "ns", "worker", 1, {REPLICA_TYPES_ANNOTATION: "not json"}).labels[
        "training.kubeflow.org/replica-index"] == "1"
    tf = TFJOB.pod_contract
    assert tf is not None
    assert tf("t", "ns", "ps", 1, {REPLICA_TYPES_ANNOTATION: '["PS","Worker"]'}).labels[
        "training.kubeflow.org/replica-type"] == "ps"
    assert tf("t", "ns", "chief", 0, {REPLICA_TYPES_ANNOTATION: '["Chief","Worker"]'}).labels[
        "training.kubeflow.org/job-role"] == "master"
    mpi = MPIJOB.pod_contract
    assert mpi is not None
    assert mpi("m", "ns", "launcher", 0, {}).labels == {
        "training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/job-name": "m",
        "training.kubeflow.org/job-role": "launcher"}
    assert mpi("m", "ns", "worker", 1, {}).labels["training.kubeflow.org/replica-index"] == "1"


def test_the_twin_is_owned_by_the_source_and_names_its_kind() -> None:
    from federator.apis.jobkinds.base import twin_trainingjob
    example = pytorch()
    example["metadata"]["uid"] = "u-1"
    example["metadata"]["labels"] = {"team": "vision"}
    translation = PYTORCHJOB.translate(example, SETTINGS)
    twin = twin_trainingjob(PYTORCHJOB, example, translation)
    assert twin["metadata"]["ownerReferences"] == [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                                    "name": "p", "uid": "u-1", "controller": True,
                                                    "blockOwnerDeletion": True}]
    assert twin["metadata"]["annotations"][SOURCE_KIND_ANNOTATION] == "PyTorchJob.kubeflow.org"
    assert twin["metadata"]["labels"] == {"team": "vision"}
    assert validate_trainingjob(twin, settings=SETTINGS) == []
