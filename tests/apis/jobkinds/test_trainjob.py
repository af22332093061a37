"""Trainer's TrainJob on the torch-distributed runtime: the upstream example (trainer v2.0.0 CONTRIBUTING.md, from
the Go module cache) translates into a pytorch gang whose twin validates; the built-in default is the module's own
torch_distributed.yaml; bad input is a 422 at the TrainJob's paths. Other runtimes: test_training_runtimes.py."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from federator.apis.common import FieldError, ValidationSettings
from federator.apis.jobkinds.base import Translation
from federator.apis.jobkinds.runtimes import BUILTIN_TORCH_DISTRIBUTED
from federator.apis.jobkinds.trainjob import TRAINJOB

TRAINER = "github.com/kubeflow/trainer/v2@v2.0.0"
SETTINGS = ValidationSettings()


def translate(obj: Any, settings: ValidationSettings = SETTINGS) -> Translation:
    """The translation on torch-distributed, as admission makes it (the source-only check first)."""
    alone = TRAINJOB.translate(obj, settings)
    assert TRAINJOB.translate_referenced is not None
    on = TRAINJOB.translate_referenced(obj, settings, BUILTIN_TORCH_DISTRIBUTED)
    assert alone.spec is None
    assert set(alone.errors) <= set(on.errors)
    return on


def node_container() -> dict[str, Any]:
    (rjob,) = BUILTIN_TORCH_DISTRIBUTED["spec"]["template"]["spec"]["replicatedJobs"]
    (container,) = rjob["template"]["spec"]["template"]["spec"]["containers"]
    return dict(container)


@pytest.fixture
def upstream_example(go_module: Callable[[str], Path]) -> dict[str, Any]:
    """The TrainJob of trainer v2.0.0's CONTRIBUTING.md ("pytorch-mnist-example"), unchanged."""
    text = (go_module(TRAINER) / "CONTRIBUTING.md").read_text(encoding="utf-8")
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)]
    found = [b for b in blocks if isinstance(b, dict) and b.get("kind") == "TrainJob"]
    assert len(found) == 1
    return found[0]


def small() -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "mnist", "namespace": "ns"},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"image": "docker.io/kubeflow/pytorch-mnist:v1", "command": ["torchrun", "train.py"],
                                 "numNodes": 4, "numProcPerNode": 2,
                                 "env": [{"name": "EPOCHS", "value": "3"}],
                                 "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}}}}


def test_the_upstream_example_translates(upstream_example: dict[str, Any],
                                         twin_errors: Callable[[Translation], list[FieldError]],
                                         schema_unknown: Callable[..., list[str]]) -> None:
    jsonschema.Draft7Validator(TRAINJOB.schema).validate(upstream_example)
    assert schema_unknown(TRAINJOB.schema, upstream_example) == []
    before = copy.deepcopy(upstream_example)
    result = translate(upstream_example)
    assert upstream_example == before
    assert result.errors == []
    assert twin_errors(result) == []
    assert result.spec is not None
    assert result.spec["framework"] == "pytorch"
    assert result.spec["frameworkSettings"] == {"port": 29500, "nprocPerNode": "auto"}
    role = result.spec["roles"][0]
    assert (role["name"], role["replicas"], role["restartPolicy"]) == ("worker", 1, "OnFailure")
    assert role["template"]["spec"]["containers"] == [node_container()]
    assert result.role_paths == {}


def test_the_builtin_runtime_is_the_modules_own(go_module: Callable[[str], Path]) -> None:
    runtime = yaml.safe_load((go_module(TRAINER) / "manifests/base/runtimes/torch_distributed.yaml").read_text())
    assert runtime == BUILTIN_TORCH_DISTRIBUTED


def test_the_trainer_fields(twin_errors: Callable[[Translation], list[FieldError]]) -> None:
    result = translate(small())
    assert result.errors == []
    assert twin_errors(result) == []
    assert result.spec is not None
    assert result.spec["frameworkSettings"] == {"port": 29500, "nprocPerNode": "2"}
    role = result.spec["roles"][0]
    assert role["replicas"] == 4
    assert role["template"]["spec"]["containers"] == [{
        "name": "node", "image": "docker.io/kubeflow/pytorch-mnist:v1", "command": ["torchrun", "train.py"],
        "env": [{"name": "EPOCHS", "value": "3"}], "resources": {"limits": {"nvidia.com/gpu": 2}}}]


def test_pod_spec_overrides(twin_errors: Callable[[Translation], list[FieldError]]) -> None:
    job = small()
    job["spec"]["podSpecOverrides"] = [{
        "targetJobs": [{"name": "node"}], "serviceAccountName": "trainer", "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "containers": [{"name": "node", "env": [{"name": "X", "value": "1"}],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}]
    result = translate(job)
    assert result.errors == []
    assert twin_errors(result) == []
    assert result.spec is not None
    pod = result.spec["roles"][0]["template"]["spec"]
    assert pod["serviceAccountName"] == "trainer" and pod["nodeSelector"] == {"pool": "gpu"}
    assert [v["name"] for v in pod["volumes"]] == ["data"]
    assert [e["name"] for e in pod["containers"][0]["env"]] == ["EPOCHS", "X"]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]


def test_the_pod_contract_is_trainers_jobsets() -> None:
    result = translate(small())
    assert TRAINJOB.pod_contract is not None
    pod = TRAINJOB.pod_contract("mnist", "ns", "worker", 3, result.annotations)
    assert pod.labels["jobset.sigs.k8s.io/jobset-name"] == "mnist"
    assert pod.labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
    assert pod.labels["jobset.sigs.k8s.io/job-index"] == "0"
    assert pod.labels["batch.kubernetes.io/job-name"] == "mnist-node-0"
    assert pod.labels["batch.kubernetes.io/job-completion-index"] == "3"
    assert pod.annotations["batch.kubernetes.io/job-completion-index"] == "3"
    # torchrun's PET_* are the pytorch framework's, not the contract's
    assert [e["name"] for e in pod.env] == ["JOB_COMPLETION_INDEX"]
    assert TRAINJOB.pod_contract("mnist", "ns", "worker", 2, {}).labels["jobset.sigs.k8s.io/job-index"] == "0"


@pytest.mark.parametrize(("path", "value", "where", "words"), [
    ("spec.runtimeRef.name", "r" * 100_000, "spec.runtimeRef.name", "no more than 253 characters"),
    ("spec.runtimeRef.name", "Torch_Distributed", "spec.runtimeRef.name", "RFC 1123 subdomain"),
    ("spec.runtimeRef.name", 5, "spec.runtimeRef.name", "must be of type string"),
    ("spec.runtimeRef.name", "", "spec.runtimeRef.name", "Required value"),
    ("spec.runtimeRef.kind", "TrainJob", "spec.runtimeRef.kind", "Unsupported value"),
    ("spec.runtimeRef.apiGroup", "kubeflow.org", "spec.runtimeRef.apiGroup", "Unsupported value"),
    ("spec.runtimeRef", ..., "spec.runtimeRef", "Required value"),
    ("spec.trainer.numNodes", 1025, "spec.trainer.numNodes", "less than or equal to 1024"),
    ("spec.trainer.numNodes", 0, "spec.trainer.numNodes", "at least 1"),
    ("spec.trainer.numNodes", "4", "spec.trainer.numNodes", "at least 1"),
    ("spec.trainer.numProcPerNode", "many", "spec.trainer.numProcPerNode", "must be a number"),
    ("spec.trainer.numProcPerNode", 10_000, "spec.trainer.numProcPerNode", "must be a number"),
    ("spec.trainer.image", ["a"], "spec.trainer.image", "must be of type string"),
    ("spec.trainer.command", "torchrun", "spec.trainer.command", "must be of type array"),
    ("spec.trainer.env", [{"name": "PET_MASTER_ADDR", "value": "x"}], "spec.trainer.env[0].name", "reserved"),
    ("spec.trainer", "go", "spec.trainer", "must be of type object"),
    ("spec.initializer", {"dataset": {"storageUri": "hf://x"}}, "spec.initializer", "Forbidden"),
    ("spec.managedBy", "kueue.x-k8s.io/multikueue", "spec.managedBy", "Unsupported value"),
    ("spec.suspend", "no", "spec.suspend", "must be of type boolean"),
    ("spec.podSpecOverrides", [{"targetJobs": [{"name": "launcher"}]}], "spec.podSpecOverrides[0].targetJobs[0].name",
     "Unsupported value"),
    ("spec.podSpecOverrides", [{"targetJobs": [{"name": "node"}], "containers": [{"name": "sidecar"}]}],
     "spec.podSpecOverrides[0].containers[0].name", "Unsupported value"),
    ("spec.podSpecOverrides", [{"targetJobs": [{"name": "node"}], "initContainers": [{"name": "x"}]}],
     "spec.podSpecOverrides[0].initContainers", "Forbidden"),
    ("spec.podSpecOverrides", "all", "spec.podSpecOverrides", "must be of type array"),
    ("metadata.labels", {"kueue.x-k8s.io/queue-name": "Not A Queue"}, "metadata.labels[kueue.x-k8s.io/queue-name]",
     "Invalid value"),
])
def test_bad_input_names_the_field(path: str, value: Any, where: str, words: str,
                                   edited: Callable[[dict[str, Any], str, Any], dict[str, Any]],
                                   assert_refused: Callable[[Translation, str, str], None]) -> None:
    assert_refused(translate(edited(small(), path, value)), where, words)


def test_trainers_own_controller_may_manage_it() -> None:
    job = small()
    job["spec"]["managedBy"] = "trainer.kubeflow.org/trainjob-controller"
    assert translate(job).errors == []


def test_hints_apply() -> None:
    job = small()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "research"}
    job["metadata"]["annotations"] = {"federator.dev/max-requeues": "2", "federator.dev/network": "rdma"}
    result = translate(job)
    assert result.spec is not None
    assert (result.spec["queue"], result.spec["failover"], result.spec["placement"]) == (
        "research", {"maxRequeues": 2}, {"network": "rdma"})


def test_unknown_fields_are_the_schemas_to_find(schema_unknown: Callable[..., list[str]]) -> None:
    job = small()
    job["spec"]["trainer"]["numNode"] = 2
    assert schema_unknown(TRAINJOB.schema, job) == ["spec.trainer.numNode"]


@pytest.mark.parametrize("obj", [None, 0, [], {}, {"spec": 1}, {"spec": {"runtimeRef": []}},
                                 {"spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"env": "x"}}},
                                 {"spec": {"runtimeRef": {"name": "torch-distributed"},
                                           "podSpecOverrides": [None, {"targetJobs": 3, "containers": [None]}]}}])
def test_any_shape_gives_errors_not_exceptions(obj: Any) -> None:
    result = translate(obj)
    assert result.spec is None and result.errors
