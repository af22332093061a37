"""hints_from_metadata: Kueue's labels and the federator.dev/ annotations become TrainingJob spec fields;
every bad one is an error at its source path; hostile input stays bounded and never raises."""

from __future__ import annotations

from typing import Any

import pytest

from federator.apis.common import ValidationSettings
from federator.apis.jobkinds.hints import hints_from_metadata
from federator.apis.trainingjob import validate_trainingjob


def test_every_hint_maps_to_its_field() -> None:
    spec, errors = hints_from_metadata({
        "labels": {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/priority-class": "high"},
        "annotations": {
            "federator.dev/gpu-models": "A100, H100",
            "federator.dev/network": "rdma",
            "federator.dev/datasets": "imagenet.v2,c4",
            "federator.dev/on-cluster-loss": "wait",
            "federator.dev/max-requeues": "5",
            "federator.dev/something-else": "left alone",
        },
    })
    assert errors == []
    assert spec == {
        "queue": "team-a", "priorityClassName": "high",
        "placement": {"gpuModels": ["A100", "H100"], "datasets": ["imagenet.v2", "c4"], "network": "rdma"},
        "failover": {"onClusterLoss": "wait", "maxRequeues": 5},
    }
    # the fields are the TrainingJob's own: a twin made with them validates
    job = {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "j", "namespace": "ns"},
           "spec": {"roles": [{"name": "worker", "replicas": 1, "template": {"image": "busybox"}}], **spec}}
    assert validate_trainingjob(job) == []


def test_nothing_set_gives_nothing() -> None:
    assert hints_from_metadata({"name": "x"}) == ({}, [])
    assert hints_from_metadata({"labels": {"app": "x"}, "annotations": {}}) == ({}, [])


def test_the_annotation_queue_must_agree_with_the_label() -> None:
    spec, errors = hints_from_metadata({"labels": {"kueue.x-k8s.io/queue-name": "a"},
                                        "annotations": {"federator.dev/queue": "a"}})
    assert (spec, errors) == ({"queue": "a"}, [])
    spec, errors = hints_from_metadata({"labels": {"kueue.x-k8s.io/queue-name": "a"},
                                        "annotations": {"federator.dev/queue": "b"}})
    assert spec == {}
    assert [p for p, _ in errors] == ["metadata.annotations[federator.dev/queue]"]
    assert "must agree with metadata.labels[kueue.x-k8s.io/queue-name]" in errors[0][1]


@pytest.mark.parametrize(("metadata", "path", "words"), [
    ({"annotations": {"federator.dev/queue": "Team_A"}}, "metadata.annotations[federator.dev/queue]", "RFC 1123"),
    ({"annotations": {"federator.dev/queue": "  "}}, "metadata.annotations[federator.dev/queue]", "empty"),
    ({"labels": {"kueue.x-k8s.io/priority-class": "Hi!"}}, "metadata.labels[kueue.x-k8s.io/priority-class]",
     "RFC 1123"),
    ({"annotations": {"federator.dev/network": "infiniband"}}, "metadata.annotations[federator.dev/network]",
     "Unsupported value"),
    ({"annotations": {"federator.dev/gpu-models": "A100,,H100"}}, "metadata.annotations[federator.dev/gpu-models]",
     "empty items"),
    ({"annotations": {"federator.dev/gpu-models": "A100,A100"}}, "metadata.annotations[federator.dev/gpu-models]",
     "Duplicate value"),
    ({"annotations": {"federator.dev/gpu-models": "A 100"}}, "metadata.annotations[federator.dev/gpu-models]",
     "Invalid value"),
    ({"annotations": {"federator.dev/datasets": "Not_A_Name"}}, "metadata.annotations[federator.dev/datasets]",
     "Invalid value"),
    ({"annotations": {"federator.dev/on-cluster-loss": "retry"}},
     "metadata.annotations[federator.dev/on-cluster-loss]", "Unsupported value"),
    ({"annotations": {"federator.dev/max-requeues": "-1"}}, "metadata.annotations[federator.dev/max-requeues]",
     "non-negative decimal integer"),
    ({"annotations": {"federator.dev/max-requeues": "٣"}}, "metadata.annotations[federator.dev/max-requeues]",
     "non-negative decimal integer"),
    ({"annotations": {"federator.dev/max-requeues": "1001"}}, "metadata.annotations[federator.dev/max-requeues]",
     "less than or equal to 1000"),
    ({"annotations": {"federator.dev/max-requeues": "9" * 5000}}, "metadata.annotations[federator.dev/max-requeues]",
     "non-negative decimal integer"),
    ({"labels": "queue=a"}, "metadata.labels", "must be of type object"),
    ({"annotations": {"federator.dev/network": 3}}, "metadata.annotations[federator.dev/network]",
     "must be of type string"),
])
def test_a_bad_hint_is_an_error_at_its_source_path(metadata: dict[str, Any], path: str, words: str) -> None:
    spec, errors = hints_from_metadata(metadata)
    assert spec == {}
    assert any(p == path and words in m for p, m in errors), errors
    assert all(len(m) < 600 for _, m in errors)


def test_hostile_sizes_stay_bounded() -> None:
    huge = ",".join(f"m{i}" for i in range(100_000))
    spec, errors = hints_from_metadata({"annotations": {"federator.dev/gpu-models": huge,
                                                        "federator.dev/queue": "q" * 100_000}})
    assert spec == {}
    assert {p for p, _ in errors} == {"metadata.annotations[federator.dev/gpu-models]",
                                      "metadata.annotations[federator.dev/queue]"}
    assert all(len(m) < 600 for _, m in errors)
    # 65 models: over PlacementSpec's cap
    spec, errors = hints_from_metadata({"annotations": {"federator.dev/gpu-models": ",".join(
        f"m{i}" for i in range(65))}})
    assert spec == {} and errors[0][0] == "metadata.annotations[federator.dev/gpu-models]"


def test_settings_cap_requeues() -> None:
    spec, errors = hints_from_metadata({"annotations": {"federator.dev/max-requeues": "7"}},
                                       settings=ValidationSettings(max_requeues=5))
    assert spec == {} and errors[0][0] == "metadata.annotations[federator.dev/max-requeues]"


@pytest.mark.parametrize("metadata", [None, 3, "x", [], {"labels": None}, {"annotations": [1, 2]},
                                      {"labels": {1: "x", "kueue.x-k8s.io/queue-name": None}}])
def test_any_shape_is_total(metadata: Any) -> None:
    spec, errors = hints_from_metadata(metadata)
    assert isinstance(spec, dict) and isinstance(errors, list)


def _twin_validates(spec: dict[str, Any]) -> None:
    job = {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "j", "namespace": "ns"},
           "spec": {"roles": [{"name": "worker", "replicas": 1, "template": {"image": "busybox"}}], **spec}}
    assert validate_trainingjob(job) == []


def test_checkpoint_hints_map_to_spec_checkpoint() -> None:
    spec, errors = hints_from_metadata({"annotations": {
        "federator.dev/checkpoint-claim": "ckpt", "federator.dev/checkpoint-mount-path": " /ckpt ",
        "federator.dev/save-grace-seconds": "90"}})
    assert errors == [] and spec == {"checkpoint": {"volume": {"claimName": "ckpt"}, "mountPath": "/ckpt",
                                                    "saveGraceSeconds": 90}}
    _twin_validates(spec)
    spec, errors = hints_from_metadata({"annotations": {"federator.dev/checkpoint-uri": "s3://b/run-7"}})
    assert errors == [] and spec == {"checkpoint": {"uri": "s3://b/run-7"}}
    _twin_validates(spec)


@pytest.mark.parametrize(("annotations", "path", "words"), [
    ({"federator.dev/save-grace-seconds": "-5"}, "metadata.annotations[federator.dev/save-grace-seconds]",
     "non-negative decimal integer"),
    ({"federator.dev/save-grace-seconds": "99999999"}, "metadata.annotations[federator.dev/save-grace-seconds]",
     "less than or equal to 3600"),
    ({"federator.dev/checkpoint-uri": "not a uri"}, "metadata.annotations[federator.dev/checkpoint-uri]",
     "regular expression"),
    ({"federator.dev/checkpoint-claim": "Bad_Claim", "federator.dev/checkpoint-mount-path": "/c"},
     "metadata.annotations[federator.dev/checkpoint-claim]", ""),
    ({"federator.dev/checkpoint-claim": "c", "federator.dev/checkpoint-mount-path": "rel"},
     "metadata.annotations[federator.dev/checkpoint-mount-path]", "regular expression"),
    ({"federator.dev/checkpoint-claim": "c", "federator.dev/checkpoint-uri": "s3://b/r",
      "federator.dev/checkpoint-mount-path": "/c"}, "metadata.annotations", "exclusive"),
])
def test_bad_checkpoint_hints_are_errors(annotations: dict[str, str], path: str, words: str) -> None:
    spec, errors = hints_from_metadata({"annotations": annotations})
    assert spec == {}
    assert any(p == path and words in m for p, m in errors), errors
