"""Full pod templates per role (issue 27 item 1): the model, the checks against kube's schema and pod rules,
the hub-owned fields, the caps, and pod requests counted as kube-scheduler counts them. The same verdicts
against a real kube-apiserver: e2e/kube/test_pod_templates.py."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.apis.common import ValidationSettings
from federator.apis.podtemplate import HUB_OWNED_SPEC_FIELDS, kube_release, pod_request_amounts
from federator.apis.trainingjob import TrainingJob, validate_trainingjob

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "resnet-full-template.yaml"
T = "spec.roles[0].template"


def job(template: Any, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "j", "namespace": "vision"},
            "spec": {"roles": [{"name": "worker", "replicas": 2, "template": template}], **spec}}


def full(**spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "image": "trainer:1.4"}], **spec}}


def fields(template: Any, **spec: Any) -> list[str]:
    return [path for path, _ in validate_trainingjob(job(template, **spec))]


def test_the_example_and_both_forms_are_accepted() -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    assert validate_trainingjob(example) == []
    model = TrainingJob.model_validate(example)
    assert model.spec.roles[0].template.full and model.spec.roles[0].template.image is None
    assert fields({"image": "trainer:1.4", "resources": {"cpu": "2"}}) == []
    assert fields(full()) == []
    assert fields({"metadata": {"labels": {"a": "b"}}, **full()}) == []
    short = TrainingJob.model_validate(job({"image": "trainer:1.4"}))
    assert not short.spec.roles[0].template.full


def test_the_schema_says_where_it_came_from() -> None:
    assert "k8s.io/kubernetes@v1.36.3" in kube_release()
    assert "PodTemplateSpec" in kube_release()


@pytest.mark.skipif(shutil.which("go") is None, reason="needs go (the schema is read from the Go module cache)")
def test_the_committed_schema_is_what_the_generator_makes() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_pod_template_schema.py"), "--check"],
                            capture_output=True, text=True, timeout=120)
    if "No such file" in result.stderr:
        pytest.skip("k8s.io/kubernetes is not in the Go module cache")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("template", "expected"), [
    ({"image": "x", **full()}, [f"{T}.image"]),
    ({"command": ["a"], "resources": {"cpu": "1"}, **full()}, [f"{T}.command", f"{T}.resources"]),
    ({}, [f"{T}.image"]),
    ({"metadata": {}}, [f"{T}.spec"]),
    (full(containers=[]), [f"{T}.spec.containers"]),
    ({"spec": {}}, [f"{T}.spec.containers"]),
])
def test_the_forms_are_told_apart_and_never_mixed(template: dict[str, Any], expected: list[str]) -> None:
    assert fields(template) == expected


@pytest.mark.parametrize(("template", "field"), [
    (full(containers=[{"name": "main", "image": "x", "gpus": 1}]), f"{T}.spec.containers[0].gpus"),
    (full(hostNetwork="yes"), f"{T}.spec.hostNetwork"),
    (full(terminationGracePeriodSeconds=2**70), f"{T}.spec.terminationGracePeriodSeconds"),
    (full(containers=[{"image": "x"}]), f"{T}.spec.containers[0].name"),
    (full(containers=[{"name": "a", "image": "x", "resources": {"limits": {"cpu": "lots"}}}]),
     f"{T}.spec.containers[0].resources.limits[cpu]"),
    (full(containers=[{"name": "a", "image": "x", "resources": {"limits": {"cpu": "-1"}}}]),
     f"{T}.spec.containers[0].resources.limits[cpu]"),
    (full(containers=[{"name": "a", "image": "x", "resources": {"limits": {"example.com/fpga": "500m"}}}]),
     f"{T}.spec.containers[0].resources.limits[example.com/fpga]"),
    (full(containers=[{"name": "a", "image": "x", "resources": {"requests": {"nvidia.com/gpu": 1},
                                                                 "limits": {"nvidia.com/gpu": 2}}}]),
     f"{T}.spec.containers[0].resources.requests"),
    (full(containers=[{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]), f"{T}.spec.containers[1].name"),
    (full(initContainers=[{"name": "main", "image": "x"}]), f"{T}.spec.containers[0].name"),
    (full(volumes=[{"name": "d", "emptyDir": {}}, {"name": "d", "emptyDir": {}}]), f"{T}.spec.volumes[1].name"),
    (full(volumes=[{"name": "d"}]), f"{T}.spec.volumes[0]"),
    (full(ephemeralContainers=[{"name": "dbg", "image": "x"}]), f"{T}.spec.ephemeralContainers"),
    (full(containers=[{"name": "a", "image": "x", "env": [{"name": "A=B", "value": "1"}]}]),
     f"{T}.spec.containers[0].env[0].name"),
    (full(containers=[{"name": "a", "image": "x", "env": [
        {"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]),
     f"{T}.spec.containers[0].env[0].valueFrom"),
    (full(containers=[{"name": "a", "image": "x", "ports": [{"containerPort": 80, "name": "Web_Port"}]}]),
     f"{T}.spec.containers[0].ports[0].name"),
    (full(containers=[{"name": "a", "image": "x", "volumeMounts": [{"name": "v", "mountPath": ""}]}],
          volumes=[{"name": "v", "emptyDir": {}}]), f"{T}.spec.containers[0].volumeMounts[0].mountPath"),
    ({"metadata": {"name": "x"}, **full()}, f"{T}.metadata.name"),
    ({"metadata": {"labels": {"a": "b" * 64}}, **full()}, f"{T}.metadata.labels[a]"),
    ({"spec": "containers"}, f"{T}.spec"),
])
def test_what_kube_would_refuse_is_a_field_error(template: dict[str, Any], field: str) -> None:
    found = fields(template)
    assert field in found, found


@pytest.mark.parametrize("field", sorted(HUB_OWNED_SPEC_FIELDS))
def test_hub_owned_spec_fields_are_refused(field: str) -> None:
    value: Any = {"podGroupName": "mine"} if field == "schedulingGroup" else 5 if field == "priority" else \
        "Always" if field == "restartPolicy" else "PreemptLowerPriority" if field == "preemptionPolicy" else "x"
    errors = validate_trainingjob(job(full(**{field: value})))
    assert [path for path, _ in errors] == [f"{T}.spec.{field}"]
    assert errors[0][1].startswith("Forbidden: the hub sets this field")


def test_hub_owned_fields_with_the_hubs_value_are_fine() -> None:
    assert fields(full(restartPolicy="Never")) == []
    assert fields(full(priorityClassName="high"), priorityClassName="high") == []
    assert fields(full(priorityClassName="low"), priorityClassName="high") == [f"{T}.spec.priorityClassName"]


@pytest.mark.parametrize("key", ["federator.dev/role", "federator.dev/anything", "scheduling.k8s.io/group-name",
                                 "scheduling.x-k8s.io/pod-group", "pod-group-name", "kai.scheduler/queue",
                                 "app.kubernetes.io/managed-by"])
@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_hub_owned_label_and_annotation_keys_are_refused(key: str, where: str) -> None:
    assert fields({"metadata": {where: {key: "x", "mine": "y"}}, **full()}) == [f"{T}.metadata.{where}[{key}]"]


def test_the_gpu_model_pin_is_the_hubs() -> None:
    pinned = full(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]},
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100"]}]}]}}})
    assert fields(pinned) == [f"{T}.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                              ".nodeSelectorTerms[0].matchExpressions[1].key"]


def test_ten_thousand_containers_is_one_error() -> None:
    many = full(containers=[{"name": f"c{i}", "image": "x"} for i in range(10_000)])
    errors = validate_trainingjob(job(many))
    assert errors == [(f"{T}.spec.containers", "Too many: 10000: must have at most 64 items")]


def test_an_oversized_template_is_one_error() -> None:
    big = full(containers=[{"name": "main", "image": "x", "args": ["y" * 4000] * 40}])
    errors = validate_trainingjob(job(big))
    assert [path for path, _ in errors] == [T] and errors[0][1].startswith("Too long:")
    assert validate_trainingjob(job(big), settings=ValidationSettings(max_template_bytes=1 << 20)) == []


def test_requests_above_the_per_pod_caps_are_refused_counting_sidecars() -> None:
    sidecar = {"name": "side", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "600"}}}
    main = {"name": "main", "image": "x", "resources": {"requests": {"cpu": "600"}}}
    errors = validate_trainingjob(job({"spec": {"containers": [main], "initContainers": [sidecar]}}))
    assert [path for path, _ in errors] == [f"{T}.spec.containers"] and "1200 cpu" in errors[0][1]
    plain_init = {**sidecar, "restartPolicy": None}  # a plain init container runs before: max, not sum
    assert validate_trainingjob(job({"spec": {"containers": [main], "initContainers": [plain_init]}})) == []
    gpus = {"name": "g", "image": "x", "resources": {"requests": {"nvidia.com/gpu": 65},
                                                     "limits": {"nvidia.com/gpu": 65}}}
    assert fields({"spec": {"containers": [gpus]}}) == [f"{T}.spec.containers"]


@pytest.mark.parametrize("hostile", [
    {"spec": {"containers": [{"name": "a", "image": "x", "env": [[]] * 3, "ports": "80"}]}},
    {"spec": {"containers": [None, 7, "x"]}},
    {"spec": {"volumes": {"name": "v"}, "containers": [{"name": "a", "image": "x"}]}},
    {"spec": {"containers": [{"name": "a", "image": "x", "resources": {"requests": ["cpu"]}}]}},
    {"spec": {"containers": [{"name": "a" * 5000, "image": "x"}]}},
    {"spec": {"containers": [{"name": "a", "image": "x", "securityContext": {"capabilities": {"add": [1]}}}]}},
    {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [None, 1]}}}, "containers": [{"name": "a", "image": "x"}]}},
])
def test_hostile_templates_get_field_errors_not_crashes(hostile: dict[str, Any]) -> None:
    errors = validate_trainingjob(job(hostile))
    assert errors and all(path.startswith(f"{T}.spec") for path, _ in errors), errors
    if hostile["spec"].get("containers") == [None, 7, "x"]:
        assert [path for path, _ in errors] == [f"{T}.spec.containers[{i}]" for i in range(3)]
    assert all(len(message) < 2000 for _, message in errors)


def test_deep_nesting_is_refused_without_recursion_errors() -> None:
    nested: Any = "x"
    for _ in range(5000):
        nested = {"a": nested}
    errors = validate_trainingjob(job(full(affinity=nested)))
    assert (T, "Invalid value: nested too deeply") in errors


def test_validation_never_changes_the_submitted_object() -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    before = copy.deepcopy(example)
    validate_trainingjob(example)
    assert example == before


def _c(cpu: str, **extra: Any) -> dict[str, Any]:
    return {"name": f"c{cpu}", "image": "x", "resources": {"requests": {"cpu": cpu}}, **extra}


@pytest.mark.parametrize(("spec", "cpu"), [
    # kube-scheduler's own cases (component-helpers resource/helpers_test.go TestPodRequests, in cpu)
    ({"containers": [_c("1"), _c("2")]}, "3"),
    ({"containers": [_c("1")], "initContainers": [_c("4")]}, "4"),
    ({"containers": [_c("1")], "initContainers": [_c("2", restartPolicy="Always")]}, "3"),
    # a plain init container after a sidecar needs itself plus the sidecar
    ({"containers": [_c("1")], "initContainers": [_c("2", restartPolicy="Always"), _c("3")]}, "5"),
    # before it, only itself
    ({"containers": [_c("1")], "initContainers": [_c("4"), _c("2", restartPolicy="Always")]}, "4"),
    ({"containers": [_c("1")], "overhead": {"cpu": "250m"}}, "1.25"),
    ({"containers": [_c("1"), _c("1")], "resources": {"requests": {"cpu": "5"}}}, "5"),
    ({"containers": [{"name": "a", "image": "x", "resources": {"limits": {"cpu": "2"}}}]}, "2"),
])
def test_pod_requests_are_counted_as_kube_scheduler_counts_them(spec: dict[str, Any], cpu: str) -> None:
    assert pod_request_amounts(spec)["cpu"] == Fraction(cpu)


def test_the_crd_schema_keeps_kubectl_explain_and_field_validation_working() -> None:
    from federator.apis.crd import crd

    schema = crd("TrainingJob")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    template = schema["properties"]["spec"]["properties"]["roles"]["items"]["properties"]["template"]
    assert template["oneOf"] == [{"required": ["image"]}, {"required": ["spec"]}]
    assert template["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] is True
    assert set(template["properties"]["metadata"]["properties"]) == {"labels", "annotations"}
    assert "schedulerName" in template["description"] and "federator.dev/" in template["description"]
    json.dumps(schema)
