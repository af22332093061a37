"""TrainingJob validation: the design.md example passes; each kind of bad input names its field."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.apis.common import ValidationSettings
from federator.apis.trainingjob import TrainingJob, trainingjob_validator, validate_trainingjob

# Verbatim from shared/design.md, "Example job" (indentation removed only).
EXAMPLE_YAML = """\
apiVersion: federator.dev/v1alpha1
kind: TrainingJob
metadata: {name: resnet-ps, namespace: vision}
spec:
  priority: 100
  roles:
    - name: ps
      replicas: 2
      template: {image: trainer:1.4, resources: {cpu: "8", memory: 32Gi}}
    - name: worker
      replicas: 8
      template: {image: trainer:1.4, resources: {cpu: "16", memory: 64Gi,
                 nvidia.com/gpu: 4, rdma/hca: 1}}
  placement:
    network: rdma            # rdma | ethernet | any
    gpuModels: [A100, H100]
    datasets: [imagenet-22k]
    clusterSelector: {matchLabels: {tier: research}}
  failover: {onClusterLoss: requeue, maxRequeues: 3}
"""


def example() -> dict[str, Any]:
    loaded = yaml.safe_load(EXAMPLE_YAML)
    assert isinstance(loaded, dict)
    return loaded


def test_design_example_validates_unchanged() -> None:
    assert validate_trainingjob(example()) == []
    job = TrainingJob.model_validate(example())
    assert [r.name for r in job.spec.roles] == ["ps", "worker"]
    assert job.spec.roles[1].template.resources is not None
    assert job.spec.roles[1].template.resources.gpu == 4
    assert job.spec.roles[1].template.resources.memory == "64Gi"
    assert job.spec.placement is not None and job.spec.placement.network == "rdma"
    # What a client reads back is what it sent (plus defaults), in wire names.
    dumped = job.model_dump(exclude_none=True)
    assert dumped["spec"]["roles"] == example()["spec"]["roles"]
    assert dumped["spec"]["placement"] == example()["spec"]["placement"]


def test_embedded_example_matches_design_md() -> None:
    design = Path(__file__).resolve().parents[3] / "shared" / "design.md"
    if not design.is_file():
        pytest.skip("shared/design.md is not beside the repository")
    text = design.read_text()
    block = text.split("## Example job", 1)[1].split("\n## ", 1)[0]
    lines = [line[4:] for line in block.splitlines() if line.startswith("    ")]
    assert yaml.safe_load("\n".join(lines)) == example()
    assert "\n".join(lines).strip() == EXAMPLE_YAML.strip()


def _set(obj: dict[str, Any], path: str, value: Any) -> None:
    """Set a value by a kube-style path ("spec.roles[1].replicas"); a value of DELETE removes the key."""
    tokens: list[str | int] = [
        int(t[1:-1]) if t[1:-1].isdigit() else t.strip("[]") if t.startswith("[") else t
        for t in re.findall(r"[^.\[\]]+|\[[^\]]+\]", path)
    ]
    current: Any = obj
    for token in tokens[:-1]:
        current = current[token] if isinstance(token, int) else current.setdefault(token, {})
    if value is DELETE:
        del current[tokens[-1]]
    else:
        current[tokens[-1]] = value


DELETE = object()

# (case id, edits, expected field path, message fragment)
BAD_SPECS: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown-field", {"spec.rolez": []}, "spec.rolez", "field not declared in schema"),
    ("unknown-template-field", {"spec.roles[0].template.imagePullPolicy": "Always"},
     "spec.roles[0].template.imagePullPolicy", "field not declared in schema"),
    ("unknown-resource", {"spec.roles[1].template.resources[nvidia.com/gpus]": 4},
     "spec.roles[1].template.resources[nvidia.com/gpus]", "field not declared in schema"),
    ("replicas-wrong-type", {"spec.roles[0].replicas": "2"}, "spec.roles[0].replicas", "must be of type integer"),
    ("replicas-bool", {"spec.roles[0].replicas": True}, "spec.roles[0].replicas", "must be of type integer"),
    ("priority-wrong-type", {"spec.priority": "high"}, "spec.priority", "must be of type integer"),
    ("roles-not-list", {"spec.roles": {"name": "ps"}}, "spec.roles", "must be of type array"),
    ("suspend-string", {"spec.suspend": "yes"}, "spec.suspend", "must be of type boolean"),
    ("negative-cpu", {"spec.roles[0].template.resources.cpu": "-1"},
     "spec.roles[0].template.resources.cpu", "greater than or equal to 0"),
    ("malformed-cpu", {"spec.roles[0].template.resources.cpu": "eight"},
     "spec.roles[0].template.resources.cpu", "quantities must match"),
    ("absurd-cpu", {"spec.roles[0].template.resources.cpu": "1M"},
     "spec.roles[0].template.resources.cpu", "at most 1024 per pod"),
    ("absurd-memory", {"spec.roles[0].template.resources.memory": "1Ei"},
     "spec.roles[0].template.resources.memory", "at most 64Ti per pod"),
    ("int64-overflow-memory", {"spec.roles[0].template.resources.memory": "99999999999Ei"},
     "spec.roles[0].template.resources.memory", "out of range"),
    ("fractional-gpu", {"spec.roles[1].template.resources[nvidia.com/gpu]": "0.5"},
     "spec.roles[1].template.resources[nvidia.com/gpu]", "whole number"),
    ("absurd-gpu", {"spec.roles[1].template.resources[nvidia.com/gpu]": 4096},
     "spec.roles[1].template.resources[nvidia.com/gpu]", "at most 64 per pod"),
    ("negative-rdma", {"spec.roles[1].template.resources[rdma/hca]": -1},
     "spec.roles[1].template.resources[rdma/hca]", "greater than or equal to 0"),
    ("zero-replicas", {"spec.roles[0].replicas": 0}, "spec.roles[0].replicas", "greater than or equal to 1"),
    ("negative-replicas", {"spec.roles[0].replicas": -3}, "spec.roles[0].replicas", "greater than or equal to 1"),
    ("huge-replicas", {"spec.roles[1].replicas": 1_000_000}, "spec.roles[1].replicas", "less than or equal to 1024"),
    ("no-roles", {"spec.roles": []}, "spec.roles", "at least 1"),
    ("duplicate-roles", {"spec.roles[1].name": "ps"}, "spec.roles[1].name", 'Duplicate value: "ps"'),
    ("bad-role-name", {"spec.roles[0].name": "PS_1"}, "spec.roles[0].name", "RFC 1123 label"),
    ("bad-name", {"metadata.name": "ResNet_PS"}, "metadata.name", "RFC 1123 label"),
    ("long-name", {"metadata.name": "a" * 64}, "metadata.name", "no more than 63 characters"),
    ("missing-name", {"metadata.name": DELETE}, "metadata.name", "Required value"),
    ("bad-namespace", {"metadata.namespace": "Vision"}, "metadata.namespace", "RFC 1123 label"),
    ("bad-label", {"metadata.labels": {"team": "-x-"}}, "metadata.labels[team]", "valid label"),
    ("bad-network", {"spec.placement.network": "infiniband"}, "spec.placement.network",
     'Unsupported value: "infiniband": supported values: "rdma", "ethernet", "any"'),
    ("bad-on-cluster-loss", {"spec.failover.onClusterLoss": "retry"}, "spec.failover.onClusterLoss",
     "Unsupported value"),
    ("negative-requeues", {"spec.failover.maxRequeues": -1}, "spec.failover.maxRequeues", "greater than or equal"),
    ("duplicate-gpu-model", {"spec.placement.gpuModels": ["A100", "A100"]}, "spec.placement.gpuModels[1]",
     "Duplicate value"),
    ("selector-in-without-values", {"spec.placement.clusterSelector.matchExpressions": [
        {"key": "tier", "operator": "In"}]}, "spec.placement.clusterSelector.matchExpressions[0].values",
     "Required value"),
    ("selector-bad-operator", {"spec.placement.clusterSelector.matchExpressions": [
        {"key": "tier", "operator": "Near", "values": ["x"]}]},
     "spec.placement.clusterSelector.matchExpressions[0].operator", "Unsupported value"),
    ("bad-spot", {"spec.placement.spot": "sometimes"}, "spec.placement.spot", "Unsupported value"),
    ("affinity-weight-zero", {"spec.placement.affinity": {"preferred": [
        {"weight": 0, "preference": {"matchLabels": {"site": "cloud"}}}]}},
     "spec.placement.affinity.preferred[0].weight", "greater than or equal to 1"),
    ("affinity-weight-high", {"spec.placement.affinity": {"preferred": [
        {"weight": 101, "preference": {}}]}}, "spec.placement.affinity.preferred[0].weight", "less than or equal"),
    ("affinity-term-selects-nothing", {"spec.placement.affinity": {"required": [{"matchExpressions": [
        {"key": "site", "operator": "Exists"}, {"key": "site", "operator": "DoesNotExist"}]}]}},
     "spec.placement.affinity.required[0]", "selects no cluster"),
    ("affinity-pin-duplicate", {"spec.placement.affinity": {"clusterNames": ["a", "a"]}},
     "spec.placement.affinity.clusterNames[1]", "Duplicate value"),
    ("affinity-pin-bad-name", {"spec.placement.affinity": {"clusterNames": ["Not A Cluster"]}},
     "spec.placement.affinity.clusterNames[0]", "RFC 1123"),
    ("affinity-too-many-terms", {"spec.placement.affinity": {"required": [{} for _ in range(1000)]}},
     "spec.placement.affinity.required", "at most 16"),
    ("affinity-unknown-field", {"spec.placement.affinity": {"preferredDuringScheduling": []}},
     "spec.placement.affinity.preferredDuringScheduling", "Forbidden"),
    ("missing-image", {"spec.roles[0].template.image": DELETE}, "spec.roles[0].template.image", "Required value"),
    ("image-with-space", {"spec.roles[0].template.image": "trainer 1.4"}, "spec.roles[0].template.image",
     "without whitespace"),
    ("duplicate-env", {"spec.roles[0].template.env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
     "spec.roles[0].template.env[1].name", "Duplicate value"),
    ("bad-env-name", {"spec.roles[0].template.env": [{"name": "1=A"}]}, "spec.roles[0].template.env[0].name",
     "regular expression"),
    ("bad-toleration", {"spec.roles[0].template.tolerations": [{"key": "gpu", "operator": "Exists",
                                                                "value": "x"}]},
     "spec.roles[0].template.tolerations[0].operator", "must be empty"),  # the field kube names
    ("bad-api-version", {"apiVersion": "federator.dev/v1"}, "apiVersion", "Unsupported value"),
    ("bad-phase", {"status": {"phase": "Exploded"}}, "status.phase", "Unsupported value"),
    ("bad-condition-status", {"status": {"conditions": [
        {"type": "Placed", "status": "Yes", "lastTransitionTime": "2024-05-01T12:00:00Z"}]}},
     "status.conditions[0].status", "Unsupported value"),
    ("bad-time", {"status": {"history": [{"time": "yesterday", "event": "Placed"}]}},
     "status.history[0].time", "RFC 3339"),
]


@pytest.mark.parametrize(("edits", "path", "fragment"), [c[1:] for c in BAD_SPECS], ids=[c[0] for c in BAD_SPECS])
def test_bad_spec_names_the_field(edits: dict[str, Any], path: str, fragment: str) -> None:
    job = example()
    for where, value in edits.items():
        _set(job, where, value)
    errors = validate_trainingjob(job)
    assert errors, "expected the spec to be rejected"
    messages = [message for field, message in errors if field == path]
    assert messages, f"no error for {path}; got {errors}"
    assert any(fragment in message for message in messages), errors
    # Every reported field exists in the submission or is required by the model: no stray paths.
    for field, _ in errors:
        assert field.split(".")[0].split("[")[0] in ("metadata", "spec", "status", "apiVersion", "kind"), field


def test_every_bad_field_is_reported_at_once() -> None:
    job = example()
    _set(job, "metadata.name", "Bad_Name")
    _set(job, "spec.rolez", 1)
    _set(job, "spec.roles[0].replicas", 0)
    _set(job, "spec.roles[0].template.resources.cpu", "-2")
    _set(job, "spec.roles[1].name", "ps")
    _set(job, "spec.roles[1].replicas", 5000)
    _set(job, "spec.placement.network", "carrier-pigeon")
    fields = {field for field, _ in validate_trainingjob(job)}
    assert {
        "metadata.name", "spec.rolez", "spec.roles[0].replicas", "spec.roles[0].template.resources.cpu",
        "spec.roles[1].name", "spec.roles[1].replicas", "spec.placement.network",
    } <= fields


def test_replica_cap_is_configurable() -> None:
    strict = ValidationSettings(max_replicas_per_role=4)
    errors = validate_trainingjob(example(), settings=strict)
    assert errors == [("spec.roles[1].replicas", "Invalid value: 8: must be less than or equal to 4")]
    assert trainingjob_validator(strict)(example()) == errors
    assert trainingjob_validator()(example()) == []


def test_total_replicas_cap() -> None:
    job = example()
    job["spec"]["roles"] = [
        {"name": f"r{i}", "replicas": 1000, "template": {"image": "x"}} for i in range(9)
    ]
    assert ("spec.roles", "Invalid value: 9000: the gang may have at most 8192 pods in all") in validate_trainingjob(
        job
    )


def test_resource_caps_are_configurable() -> None:
    settings = ValidationSettings(max_memory_per_pod="16Gi", max_cpu_per_pod="4", max_gpus_per_pod=2)
    paths = {p for p, _ in validate_trainingjob(example(), settings=settings)}
    assert paths == {
        "spec.roles[0].template.resources.cpu", "spec.roles[0].template.resources.memory",
        "spec.roles[1].template.resources.cpu", "spec.roles[1].template.resources.memory",
        "spec.roles[1].template.resources[nvidia.com/gpu]",
    }


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_replicas_per_role"):
        ValidationSettings(max_replicas_per_role=0)
    with pytest.raises(ValueError, match="quantit"):
        ValidationSettings(max_memory_per_pod="lots")


def test_a_full_status_validates() -> None:
    job = example()
    job["metadata"].update({
        "uid": "0b6c3f1e-5d7a-4a53-9b8e-1f0c2d3e4a5b", "resourceVersion": "10245", "generation": 1,
        "creationTimestamp": "2024-05-01T12:00:00Z", "finalizers": ["federator.dev/cleanup"],
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
    })
    job["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Placed", "status": "True", "reason": "Fits",
                        "message": "placed on onprem-a", "lastTransitionTime": "2024-05-01T12:00:01Z"}],
        "placement": {"cluster": "onprem-a", "epoch": 2, "decisionResourceVersion": "10250",
                      "whyNot": [{"cluster": "cloud-b", "filter": "network", "reason": "NoRDMA",
                                  "message": "cluster fabric is ethernet"}]},
        "history": [{"time": "2024-05-01T12:00:01.123456789Z", "event": "Placed", "cluster": "onprem-a",
                     "epoch": 2, "message": "placed"}],
        "podCounts": {"ps": {"running": 2}, "worker": {"pending": 1, "running": 7}},
        "requeues": 1,
    }
    assert validate_trainingjob(job) == []
    parsed = TrainingJob.model_validate(job)
    assert parsed.status is not None and parsed.status.placement is not None
    assert parsed.status.placement.why_not is not None and parsed.status.placement.why_not[0].reason == "NoRDMA"


def test_duplicate_condition_types_are_rejected() -> None:
    job = example()
    condition = {"type": "Placed", "status": "True", "lastTransitionTime": "2024-05-01T12:00:01Z"}
    job["status"] = {"conditions": [condition, dict(condition)]}
    assert ("status.conditions[1].type", 'Duplicate value: "Placed"') in validate_trainingjob(job)


def test_snake_case_names_are_unknown_fields() -> None:
    job = example()
    job["spec"]["failover"] = {"on_cluster_loss": "requeue"}
    assert ("spec.failover.on_cluster_loss", "Forbidden: field not declared in schema") in validate_trainingjob(job)


def test_not_an_object() -> None:
    assert validate_trainingjob([1, 2]) == [("", "Invalid value: must be a JSON object")]
    assert ("spec", "Required value") in validate_trainingjob({"metadata": {"name": "x"}})


def test_hostile_input_gives_bounded_errors_and_short_messages() -> None:
    job = example()
    for i in range(5000):
        job["spec"][f"junk{i}"] = i
    errors = validate_trainingjob(job)
    assert len(errors) == 101 and errors[-1] == ("", "Invalid value: too many errors, 4900 more not shown")

    job = example()
    job["metadata"]["name"] = "X" * 1_000_000
    errors = validate_trainingjob(job)
    assert errors and all(len(message) < 1000 for _, message in errors)

    job = example()
    deep: dict[str, Any] = {}
    cursor = deep
    for _ in range(200):
        cursor["a"] = {}
        cursor = cursor["a"]
    job["spec"]["placement"] = deep
    assert ("spec.placement.a", "Forbidden: field not declared in schema") in validate_trainingjob(job)


def test_validation_does_not_change_the_input() -> None:
    job = example()
    before = copy.deepcopy(job)
    validate_trainingjob(job)
    TrainingJob.model_validate(job)
    assert job == before


def test_generate_name_instead_of_name() -> None:
    job = example()
    del job["metadata"]["name"]
    job["metadata"]["generateName"] = "resnet-"
    assert validate_trainingjob(job) == []
    job["metadata"]["generateName"] = "ResNet_"
    assert [p for p, _ in validate_trainingjob(job)] == ["metadata.generateName"]


def test_apiserver_hook_leaves_generic_metadata_checks_to_the_apiserver() -> None:
    job = example()
    job["metadata"]["name"] = "Bad_Name"
    job["metadata"]["labels"] = {"team": "-x-"}
    job["metadata"]["colour"] = "blue"
    job["spec"]["roles"][0]["replicas"] = 0
    full = {p for p, _ in validate_trainingjob(job)}
    assert {"metadata.name", "metadata.labels[team]", "metadata.colour", "spec.roles[0].replicas"} <= full
    hook = {p for p, _ in trainingjob_validator()(job)}
    assert hook == {"metadata.colour", "spec.roles[0].replicas"}
