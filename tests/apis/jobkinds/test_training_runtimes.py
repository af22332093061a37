"""Trainer's runtimes (trainer v2.0.0, from the Go module cache): every runtime manifest Trainer ships is valid under
the served schemas and Trainer's webhook; a TrainJob translates on each runtime shape the hub's gang expresses (one
trainer replicatedJob; torch or plain ML policy) and is refused, at spec.runtimeRef naming the runtime's field, on
the others (MPI, initializers, several jobs, elastic); what the runtime reference names; hostile runtimes."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from federator.apis.common import FieldError, ValidationSettings
from federator.apis.jobkinds.base import Translation
from federator.apis.jobkinds.runtimes import (
    BUILTIN_TORCH_DISTRIBUTED,
    CLUSTER_RUNTIME,
    RUNTIME_KINDS,
    TRAINING_RUNTIME,
    runtime_reference,
    validate_runtime,
)
from federator.apis.jobkinds.trainjob import TRAINJOB, runtime_shape

from .test_trainjob import TRAINER, small

SETTINGS = ValidationSettings()
RUNTIMES = ("torch_distributed.yaml", "mpi_distributed.yaml", "deepspeed_distributed.yaml", "mlx_distributed.yaml",
            "torchtune/llama3_2/llama3_2_1B.yaml", "torchtune/llama3_2/llama3_2_3B.yaml")


def on(runtime: Any, job: dict[str, Any] | None = None) -> Translation:
    assert TRAINJOB.translate_referenced is not None
    return TRAINJOB.translate_referenced(job or small(), SETTINGS, runtime)


@pytest.fixture
def trainer_runtime(go_module: Callable[[str], Path]) -> Callable[[str], dict[str, Any]]:
    root = go_module(TRAINER) / "manifests/base/runtimes"

    def load(name: str) -> dict[str, Any]:
        found: dict[str, Any] = yaml.safe_load((root / name).read_text(encoding="utf-8"))
        return found

    return load


def training_runtime(**spec: Any) -> dict[str, Any]:
    """A namespaced TrainingRuntime: one replicatedJob `trainer` of a pod with the `node` container and a
    sidecar, the given spec fields over it."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": "plain", "namespace": "ns"},
            "spec": {"template": {"spec": {"replicatedJobs": [{
                "name": "trainer",
                "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                             "spec": {"backoffLimit": 2, "template": {
                                 "metadata": {"labels": {"team": "vision"}},
                                 "spec": {"restartPolicy": "Never", "nodeSelector": {"pool": "a100"},
                                          "containers": [
                                              {"name": "node", "image": "runtime:1",
                                               "env": [{"name": "EPOCHS", "value": "1"},
                                                       {"name": "KEEP", "value": "k"}]},
                                              {"name": "sidecar", "image": "side:1"}]}}}}}]}},
                     **spec}}


@pytest.mark.parametrize("name", RUNTIMES)
def test_trainers_runtimes_are_valid_under_the_served_schema(name: str, trainer_runtime: Callable[[str], Any],
                                                            schema_unknown: Callable[..., list[str]]) -> None:
    runtime = trainer_runtime(name)
    kind = next(k for k in RUNTIME_KINDS if k.kind == runtime["kind"])
    jsonschema.Draft7Validator(kind.schema).validate(runtime)
    assert schema_unknown(kind.schema, runtime) == []
    assert validate_runtime(runtime) == []


def test_the_served_schemas_are_the_crds(go_module: Callable[[str], Path]) -> None:
    for kind in RUNTIME_KINDS:
        crd = yaml.safe_load((go_module(TRAINER) / f"manifests/base/crds/trainer.kubeflow.org_{kind.plural}.yaml"
                              ).read_text(encoding="utf-8"))
        assert (crd["spec"]["names"]["kind"], crd["spec"]["scope"] == "Namespaced") == (kind.kind, kind.namespaced)
        assert kind.upstream.startswith(f"{TRAINER} manifests/base/crds/")
        (version,) = crd["spec"]["versions"]
        assert kind.schema["properties"]["spec"]["properties"].keys() == \
            version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].keys()


def test_torch_distributed_translates(trainer_runtime: Callable[[str], Any],
                                      twin_errors: Callable[[Translation], list[FieldError]]) -> None:
    result = on(trainer_runtime("torch_distributed.yaml"))
    assert result.errors == [] and twin_errors(result) == []
    assert result == on(BUILTIN_TORCH_DISTRIBUTED)


def test_a_plain_runtime_with_its_own_job_and_containers(twin_errors: Callable[[Translation], list[FieldError]]
                                                         ) -> None:
    job = small()
    del job["spec"]["trainer"]["numProcPerNode"]
    job["spec"]["trainer"]["env"] = [{"name": "EPOCHS", "value": "3"}]
    job["spec"]["podSpecOverrides"] = [{"targetJobs": [{"name": "trainer"}], "containers": [
        {"name": "sidecar", "env": [{"name": "S", "value": "1"}]}]}]
    result = on(training_runtime(mlPolicy={"numNodes": 3}), job)
    assert result.errors == [] and twin_errors(result) == []
    assert result.spec is not None
    assert result.spec["framework"] == "none" and "frameworkSettings" not in result.spec
    assert result.spec["backoffLimit"] == 2
    (role,) = result.spec["roles"]
    assert (role["replicas"], role["restartPolicy"]) == (4, "Never")  # the TrainJob's numNodes wins
    template = role["template"]
    assert template["metadata"] == {"labels": {"team": "vision"}}
    assert template["spec"]["nodeSelector"] == {"pool": "a100"} and "restartPolicy" not in template["spec"]
    node, sidecar = template["spec"]["containers"]
    assert node["image"] == "docker.io/kubeflow/pytorch-mnist:v1"
    assert node["env"] == [{"name": "KEEP", "value": "k"}, {"name": "EPOCHS", "value": "3"}]
    assert sidecar == {"name": "sidecar", "image": "side:1", "env": [{"name": "S", "value": "1"}]}
    assert TRAINJOB.pod_contract is not None
    pod = TRAINJOB.pod_contract("mnist", "ns", "worker", 1, result.annotations)
    assert pod.labels["jobset.sigs.k8s.io/replicatedjob-name"] == "trainer"
    assert pod.labels["batch.kubernetes.io/job-name"] == "mnist-trainer-0"


def test_the_runtimes_numnodes_and_numprocpernode_are_the_defaults() -> None:
    job = small()
    del job["spec"]["trainer"]["numNodes"], job["spec"]["trainer"]["numProcPerNode"]
    result = on(training_runtime(mlPolicy={"numNodes": 5, "torch": {"numProcPerNode": 8}}), job)
    assert result.spec is not None, result.errors
    assert result.spec["roles"][0]["replicas"] == 5
    assert result.spec["frameworkSettings"] == {"port": 29500, "nprocPerNode": "8"}


@pytest.mark.parametrize(("name", "field"), [
    ("mpi_distributed.yaml", "spec.mlPolicy.mpi"),
    ("deepspeed_distributed.yaml", "spec.mlPolicy.mpi"),
    ("mlx_distributed.yaml", "spec.mlPolicy.mpi"),
    ("torchtune/llama3_2/llama3_2_1B.yaml", "spec.template.spec.replicatedJobs[0]"),
])
def test_trainers_runtimes_the_gang_cannot_express_are_refused(name: str, field: str,
                                                               trainer_runtime: Callable[[str], Any]) -> None:
    result = on(trainer_runtime(name))
    assert result.spec is None
    assert {path for path, _ in result.errors} == {"spec.runtimeRef"}
    assert any(field + ":" in message for _, message in result.errors), result.errors


def _two_jobs(runtime: dict[str, Any]) -> None:
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    jobs.append({**copy.deepcopy(jobs[0]), "name": "evaluator"})


def _no_node_container(runtime: dict[str, Any]) -> None:
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"] = [{"name": "trainer", "image": "x"}]


@pytest.mark.parametrize(("change", "field", "words"), [
    (_two_jobs, "spec.template.spec.replicatedJobs", "2 replicatedJobs"),
    (_no_node_container, "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers",
     'the trainer\'s container "node"'),
    (lambda r: r["spec"]["template"]["spec"]["replicatedJobs"][0].update({"replicas": 2}),
     "spec.template.spec.replicatedJobs[0].replicas", "replicas 1"),
    (lambda r: r["spec"]["template"]["spec"].update({"replicatedJobs": []}), "spec.template.spec.replicatedJobs",
     "Required value"),
    (lambda r: r["spec"].update({"mlPolicy": {"torch": {"elasticPolicy": {"maxNodes": 4}}}}),
     "spec.mlPolicy.torch.elasticPolicy", "Unsupported"),
    (lambda r: r["spec"].update({"mlPolicy": {"numNodes": 0}}), "spec.mlPolicy.numNodes", "at least 1"),
    (lambda r: r["spec"].update({"mlPolicy": {"torch": {"numProcPerNode": "many"}}}),
     "spec.mlPolicy.torch.numProcPerNode", "must be a number"),
    (lambda r: r["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"].update(
        {"backoffLimit": -1}), "spec.template.spec.replicatedJobs[0].template.spec.backoffLimit", "non-negative"),
])
def test_a_runtime_the_gang_cannot_express_is_a_422_naming_its_field(change: Callable[[dict[str, Any]], None],
                                                                     field: str, words: str) -> None:
    runtime = training_runtime()
    change(runtime)
    result = on(runtime)
    assert result.spec is None
    (error,) = result.errors
    assert error[0] == "spec.runtimeRef" and f'TrainingRuntime "plain": {field}: ' in error[1] and words in error[1], \
        error


@pytest.mark.parametrize("runtime", [
    None, [], "torch-distributed", {"kind": "TrainJob", "apiVersion": "trainer.kubeflow.org/v1alpha1", "spec": {}},
    {"kind": "ClusterTrainingRuntime", "apiVersion": "kubeflow.org/v1", "spec": {}},
    {"kind": "ClusterTrainingRuntime", "apiVersion": "trainer.kubeflow.org/v1alpha1"},
])
def test_an_object_of_another_kind_is_no_runtime(runtime: Any) -> None:
    result = on(runtime)
    assert result.spec is None and [p for p, _ in result.errors] == ["spec.runtimeRef"]
    assert "not a trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime or TrainingRuntime" in result.errors[0][1]


def test_an_oversized_runtime_is_refused_by_what_it_holds() -> None:
    runtime = training_runtime()
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    jobs.extend({**copy.deepcopy(jobs[0]), "name": f"j{i}"} for i in range(2000))
    result = on(runtime)
    assert result.spec is None and len(result.errors) == 1 and "2001 replicatedJobs" in result.errors[0][1]
    errors: list[FieldError] = []
    assert runtime_shape(runtime, errors) is None and len(errors) == 1


def test_podspecoverrides_name_the_runtimes_job_and_containers() -> None:
    job = small()
    job["spec"]["podSpecOverrides"] = [{"targetJobs": [{"name": "node"}], "containers": [{"name": "ghost"}]}]
    result = on(training_runtime(mlPolicy={"torch": {}}), job)
    assert result.errors == [
        ("spec.podSpecOverrides[0].targetJobs[0].name", 'Unsupported value: "node": supported values: "trainer" '
                                                        "(the runtime's only job)"),
        ("spec.podSpecOverrides[0].containers[0].name", 'Unsupported value: "ghost": supported values: "node", '
                                                        '"sidecar" (the runtime\'s containers)')]


def test_numprocpernode_needs_a_torch_runtime() -> None:
    result = on(training_runtime())
    assert result.errors == [("spec.trainer.numProcPerNode", "Forbidden: the runtime has no mlPolicy.torch (its "
                                                             "pods run no torchrun)")]


def test_the_reference() -> None:
    errors: list[FieldError] = []
    job = small()
    ref = runtime_reference(job, errors)
    assert errors == [] and ref is not None
    assert (ref.kind, ref.plural, ref.namespace, ref.name, ref.fallback) == (
        "ClusterTrainingRuntime", "clustertrainingruntimes", None, "torch-distributed", BUILTIN_TORCH_DISTRIBUTED)
    job["spec"]["runtimeRef"] = {"name": "plain", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}
    ref = runtime_reference(job, errors)
    assert errors == [] and ref is not None
    assert (ref.kind, ref.namespace, ref.name, ref.fallback) == ("TrainingRuntime", "ns", "plain", None)
    assert ref.missing() == ("spec.runtimeRef.name", 'Not found: trainingruntimes.trainer.kubeflow.org "plain" in '
                                                     "namespace ns not found: specified trainingRuntime must be "
                                                     "created before the TrainJob is created")
    job["spec"]["runtimeRef"] = {"name": "torch-distributed", "kind": "TrainingRuntime"}
    ref = runtime_reference(job, errors)
    assert ref is not None and ref.fallback is None  # the built-in is a ClusterTrainingRuntime only
    assert (CLUSTER_RUNTIME.namespaced, TRAINING_RUNTIME.namespaced) == (False, True)


@pytest.mark.parametrize(("rjob", "bad"), [
    ({"name": "launcher", "replicas": 2}, True),
    ({"name": "x", "replicas": 3, "template": {"metadata": {"labels": {
        "trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}}}}, True),
    ({"name": "workers", "replicas": 3}, False),
    ({"name": "launcher"}, False),
])
def test_trainers_webhook_rule_on_replicas(rjob: dict[str, Any], bad: bool) -> None:
    runtime = training_runtime()
    runtime["spec"]["template"]["spec"]["replicatedJobs"].append(rjob)
    errors = validate_runtime(runtime)
    assert errors == ([("spec.template.spec.replicatedJobs[1].replicas",
                        f"Invalid value: {rjob.get('replicas')}: always must be 1")] if bad else [])


@pytest.mark.parametrize("runtime", [None, [], {"spec": []}, {"spec": {"template": {"spec": {"replicatedJobs": [
    None, 3, {"replicas": [], "template": {"metadata": {"labels": []}}}]}}}}])
def test_webhook_rule_on_any_shape(runtime: Any) -> None:
    assert isinstance(validate_runtime(runtime if isinstance(runtime, dict) else {"spec": runtime}), list)
