"""JobSet as one gang: the upstream examples translate (one role per replicatedJob of replicas x parallelism pods),
the twin validates, the pod contract is the JobSet controller's (jobset v0.10.1 labelAndAnnotateObject) plus the
child Job's, and bad input gives errors at the JobSet's paths."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from federator.apis.common import FieldError, ValidationSettings
from federator.apis.jobkinds.base import Translation
from federator.apis.jobkinds.jobset import JOBSET

UPSTREAM = Path(__file__).resolve().parent / "upstream"
SETTINGS = ValidationSettings()


def example(name: str) -> dict[str, Any]:
    data = yaml.safe_load((UPSTREAM / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def translate(obj: Any, settings: ValidationSettings = SETTINGS) -> Translation:
    return JOBSET.translate(obj, settings)


@pytest.mark.parametrize("name", ["jobset-paralleljobs.yaml", "jobset-with-network.yaml"])
def test_the_upstream_examples_translate_unchanged(name: str, twin_errors: Callable[[Translation], list[FieldError]],
                                                   schema_unknown: Callable[..., list[str]]) -> None:
    obj = example(name)
    jsonschema.Draft7Validator(JOBSET.schema).validate(obj)
    assert schema_unknown(JOBSET.schema, obj) == []
    before = copy.deepcopy(obj)
    result = translate(obj)
    assert obj == before
    assert result.errors == []
    assert twin_errors(result) == []
    assert result.spec is not None
    assert "framework" not in result.spec  # none: JobSet injects no framework environment
    assert result.spec["backoffLimit"] == 0 and result.spec["suspend"] is False


def test_paralleljobs_roles() -> None:
    result = translate(example("jobset-paralleljobs.yaml"))
    assert result.spec is not None
    assert [(r["name"], r["replicas"], r["restartPolicy"]) for r in result.spec["roles"]] == [
        ("workers", 4, "OnFailure"), ("driver", 1, "OnFailure")]
    assert result.role_paths == {"workers": "spec.replicatedJobs[0].template.spec.template",
                                 "driver": "spec.replicatedJobs[1].template.spec.template"}


def test_replicas_times_parallelism_is_the_role() -> None:
    obj = example("jobset-with-network.yaml")
    obj["spec"]["replicatedJobs"][1]["replicas"] = 3
    result = translate(obj)
    assert result.spec is not None
    assert {r["name"]: r["replicas"] for r in result.spec["roles"]} == {"leader": 1, "workers": 6}


def test_the_pod_contract_is_the_jobset_controllers() -> None:
    obj = example("jobset-with-network.yaml")
    obj["metadata"]["uid"] = "js-uid"
    obj["spec"]["replicatedJobs"][1]["replicas"] = 3
    obj["spec"]["coordinator"] = {"replicatedJob": "leader", "jobIndex": 0, "podIndex": 0}
    result = translate(obj)
    assert result.errors == []
    assert JOBSET.pod_contract is not None
    # pod 5 of role workers (3 Jobs of 2 pods): Job 2, completion index 1
    pod = JOBSET.pod_contract("network-jobset", "default", "workers", 5, result.annotations)
    job_name = "network-jobset-workers-2"
    expected = {
        "jobset.sigs.k8s.io/jobset-name": "network-jobset",
        "jobset.sigs.k8s.io/jobset-uid": "js-uid",
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/restart-attempt": "0",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "3",
        "jobset.sigs.k8s.io/global-replicas": "4",
        "jobset.sigs.k8s.io/job-index": "2",
        "jobset.sigs.k8s.io/job-key": hashlib.sha1(f"default/{job_name}".encode()).hexdigest(),
        "jobset.sigs.k8s.io/job-global-index": "3",
        "jobset.sigs.k8s.io/group-name": "default",
        "jobset.sigs.k8s.io/group-replicas": "4",
        "jobset.sigs.k8s.io/job-group-index": "3",
        "jobset.sigs.k8s.io/coordinator": "network-jobset-leader-0-0.example",
    }
    assert pod.labels == {**expected, "batch.kubernetes.io/job-name": job_name, "job-name": job_name,
                          "batch.kubernetes.io/job-completion-index": "1"}
    assert pod.annotations == {**expected, "batch.kubernetes.io/job-completion-index": "1"}
    assert [e["name"] for e in pod.env] == ["JOB_COMPLETION_INDEX"]


def test_groups_count_within_their_group() -> None:
    obj = example("jobset-paralleljobs.yaml")
    obj["spec"]["replicatedJobs"][0]["groupName"] = "a"
    obj["spec"]["replicatedJobs"][0]["replicas"] = 2
    obj["spec"]["replicatedJobs"][1]["groupName"] = "b"
    result = translate(obj)
    assert JOBSET.pod_contract is not None
    pod = JOBSET.pod_contract("paralleljobs", "ns", "driver", 0, result.annotations)
    assert (pod.labels["jobset.sigs.k8s.io/group-name"], pod.labels["jobset.sigs.k8s.io/group-replicas"],
            pod.labels["jobset.sigs.k8s.io/job-group-index"], pod.labels["jobset.sigs.k8s.io/job-global-index"]) == (
        "b", "1", "0", "2")


def test_accepted_policies() -> None:
    obj = example("jobset-paralleljobs.yaml")
    obj["spec"]["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["driver", "workers"]}
    obj["spec"]["failurePolicy"] = {"maxRestarts": 3}
    obj["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    obj["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "workers", "status": "Ready"}]
    obj["spec"]["managedBy"] = "jobset.sigs.k8s.io/jobset-controller"
    obj["spec"]["suspend"] = True
    result = translate(obj)
    assert result.errors == []
    assert result.spec is not None and result.spec["suspend"] is True


def edit(change: Callable[[dict[str, Any]], None]) -> Translation:
    obj = example("jobset-paralleljobs.yaml")
    change(obj)
    return translate(obj)


@pytest.mark.parametrize(("path", "value", "where", "words"), [
    ("spec.replicatedJobs.0.replicas", 300, "spec.replicatedJobs[0].replicas", "at most 1024"),
    ("spec.replicatedJobs.0.replicas", 0, "spec.replicatedJobs[0].replicas", "at least 1"),
    ("spec.replicatedJobs.0.replicas", "2", "spec.replicatedJobs[0].replicas", "at least 1"),
    ("spec.replicatedJobs.0.template.spec.parallelism", 5000, "spec.replicatedJobs[0].template.spec.parallelism",
     "less than or equal to 1024"),
    ("spec.replicatedJobs.0.template.spec.completions", 8, "spec.replicatedJobs[0].template.spec.completions",
     "must equal parallelism"),
    ("spec.replicatedJobs.0.template.spec.completionMode", "NonIndexed",
     "spec.replicatedJobs[0].template.spec.completionMode", "must be Indexed"),
    ("spec.replicatedJobs.0.template.spec.podFailurePolicy", {"rules": []},
     "spec.replicatedJobs[0].template.spec.podFailurePolicy", "Forbidden"),
    ("spec.replicatedJobs.0.template.spec.template.spec.restartPolicy", "Always",
     "spec.replicatedJobs[0].template.spec.template.spec.restartPolicy", "Unsupported value"),
    ("spec.replicatedJobs.1.name", "workers", "spec.replicatedJobs[1].name", "Duplicate value"),
    ("spec.replicatedJobs.1.name", "Driver_1", "spec.replicatedJobs[1].name", "RFC 1123"),
    ("spec.replicatedJobs.1.name", "d" * 10_000, "spec.replicatedJobs[1].name", "no more than 63"),
    ("spec.replicatedJobs.1.dependsOn", [{"name": "workers", "status": "Complete"}],
     "spec.replicatedJobs[1].dependsOn[0].status", "Unsupported value"),
    ("spec.replicatedJobs.1.template", ..., "spec.replicatedJobs[1].template", "Required value"),
    ("spec.replicatedJobs", [], "spec.replicatedJobs", "Required value"),
    ("spec.replicatedJobs", {"a": 1}, "spec.replicatedJobs", "must be of type array"),
    ("spec.successPolicy", {"operator": "Any"}, "spec.successPolicy.operator", "Unsupported value"),
    ("spec.successPolicy", {"operator": "All", "targetReplicatedJobs": ["driver"]},
     "spec.successPolicy.targetReplicatedJobs", "Forbidden"),
    ("spec.managedBy", "kueue.x-k8s.io/multikueue", "spec.managedBy", "Unsupported value"),
    ("spec.suspend", 1, "spec.suspend", "boolean"),
    ("spec.coordinator", {"replicatedJob": "workers", "jobIndex": 0, "podIndex": 9}, "spec.coordinator",
     "Invalid value"),
    ("metadata.annotations", {"federator.dev/network": "carrier-pigeon"},
     "metadata.annotations[federator.dev/network]", "Unsupported value"),
])
def test_bad_input_names_the_field(path: str, value: Any, where: str, words: str,
                                   edited: Callable[[dict[str, Any], str, Any], dict[str, Any]],
                                   assert_refused: Callable[[Translation, str, str], None]) -> None:
    assert_refused(translate(edited(example("jobset-paralleljobs.yaml"), path, value)), where, words)


def test_the_gang_and_role_caps() -> None:
    small = ValidationSettings(max_total_replicas=4, max_roles=1)
    result = translate(example("jobset-paralleljobs.yaml"), small)
    assert [p for p, _ in result.errors] == ["spec.replicatedJobs"]
    assert "at most 1 items" in result.errors[0][1]
    result = translate(example("jobset-paralleljobs.yaml"), ValidationSettings(max_total_replicas=4))
    assert [p for p, _ in result.errors] == ["spec.replicatedJobs"]
    assert "5 pods in all" in result.errors[0][1]


def test_different_priority_classes_are_refused() -> None:
    def change(obj: dict[str, Any]) -> None:
        obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["priorityClassName"] = "high"
        obj["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["priorityClassName"] = "low"
    result = edit(change)
    assert [p for p, _ in result.errors] == ["spec.replicatedJobs[1].template.spec.template.spec.priorityClassName"]


def test_unknown_fields_are_the_schemas_to_find(schema_unknown: Callable[..., list[str]]) -> None:
    obj = example("jobset-paralleljobs.yaml")
    obj["spec"]["replicatedJobz"] = []
    obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["imag"] = "x"
    assert sorted(schema_unknown(JOBSET.schema, obj)) == [
        "spec.replicatedJobs[0].template.spec.template.spec.containers[0].imag", "spec.replicatedJobz"]


@pytest.mark.parametrize("obj", [None, 7, [], {}, {"spec": []}, {"spec": {"replicatedJobs": [None, 3, "x"]}},
                                 {"spec": {"replicatedJobs": [{"name": "a", "template": {"spec": []}}]}},
                                 {"spec": {"replicatedJobs": [{"name": 5}], "coordinator": 3, "network": 4}},
                                 {"metadata": 5, "spec": {"replicatedJobs": [{"name": "a", "groupName": 3}]}}])
def test_any_shape_gives_errors_not_exceptions(obj: Any) -> None:
    result = translate(obj)
    assert result.spec is None and result.errors


def test_a_contract_annotation_of_any_shape_is_survived() -> None:
    assert JOBSET.pod_contract is not None
    for value in ("", "[]", "nope", '{"replicatedJobs": 5}', '{"replicatedJobs": [1, {"name": "w", "parallelism": 0}]}'):
        pod = JOBSET.pod_contract("js", "ns", "w", 3, {"federator.dev/pod-contract": value})
        assert pod.labels["jobset.sigs.k8s.io/jobset-name"] == "js"
