"""federator.apis.views: typed reads of raw objects that never fail on malformed input."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from federator.apis.views import Body, Meta, as_mapping

POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "p", "generateName": "p-", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                 "generation": 3, "labels": {"a": "1"}, "annotations": {"b": "2"},
                 "creationTimestamp": "2024-05-01T12:00:00Z", "deletionTimestamp": "2024-05-01T12:01:00Z",
                 "finalizers": ["f"], "managedFields": [{"manager": "m"}]},
    "spec": {"nodeName": "n1"},
    "status": {"phase": "Running"},
}


def test_a_well_formed_object_reads_as_stored() -> None:
    body = Body(POD)
    assert (body.name, body.generate_name, body.namespace, body.uid, body.resource_version, body.generation) == (
        "p", "p-", "ns", "u-1", "42", 3)
    assert body.labels == {"a": "1"} and body.annotations == {"b": "2"}
    assert body.creation_timestamp == "2024-05-01T12:00:00Z"
    assert body.deletion_timestamp == "2024-05-01T12:01:00Z" and body.deleting
    assert list(body.finalizers) == ["f"] and body.managed_fields == [{"manager": "m"}]
    assert body.spec == {"nodeName": "n1"} and body.status == {"phase": "Running"} and body.phase == "Running"
    # the object's own mappings, never copies: a view is free to take
    assert body.labels is POD["metadata"]["labels"] and body.obj is POD and body.metadata is POD["metadata"]
    assert Meta(POD["metadata"]).uid == "u-1"


EMPTY_READS = {"name": "", "generate_name": "", "namespace": "", "uid": "", "resource_version": "",
               "generation": 0, "labels": {}, "annotations": {}, "creation_timestamp": None,
               "deletion_timestamp": None, "deleting": False, "finalizers": (), "managed_fields": None,
               "spec": {}, "status": {}, "phase": ""}


@pytest.mark.parametrize(("obj", "well_formed"), [
    (None, ()), (0, ()), (1.5, ()), (True, ()), ("pod", ()), (b"pod", ()), (["metadata"], ()), ({}, ()),
    ({"metadata": None}, ()), ({"metadata": "name"}, ()), ({"metadata": ["name", "p"]}, ()), ({"metadata": 7}, ()),
    ({"metadata": {}, "spec": None, "status": "Running"}, ()),
    ({"metadata": {"name": None, "namespace": 5, "uid": ["u"], "resourceVersion": 42, "generation": "3",
                   "labels": ["a=1"], "annotations": "b=2", "creationTimestamp": 1714564800,
                   "deletionTimestamp": "", "finalizers": "f", "generateName": {}},
      "spec": [], "status": {"phase": 1}}, ("status",)),
    ({"metadata": {"generation": True}}, ()),  # a bool is not a generation
    ({"metadata": {"name": "x" * 1_000_000}, "status": {"phase": None}}, ("name", "status")),
])
def test_malformed_input_reads_as_empty(obj: object, well_formed: tuple[str, ...]) -> None:
    body = Body(obj)
    for field, expected in EMPTY_READS.items():
        value = getattr(body, field)
        if field in well_formed:
            continue
        assert value == expected, field
        if isinstance(expected, dict):
            assert isinstance(value, Mapping)


def test_an_empty_read_cannot_be_written_through() -> None:
    labels = Body({}).labels
    assert isinstance(labels, MappingProxyType)
    with pytest.raises(TypeError):
        labels["a"] = "1"  # type: ignore[index]


@pytest.mark.parametrize(("deletion", "deleting"), [
    ("2024-05-01T12:00:00Z", True), ("", False), (None, False), (0, False), (1, True),
])
def test_deleting_is_a_set_deletion_timestamp(deletion: object, deleting: bool) -> None:
    assert Body({"metadata": {"deletionTimestamp": deletion}}).deleting is deleting


def test_any_mapping_is_an_object() -> None:
    body = Body(MappingProxyType({"metadata": MappingProxyType({"name": "p", "labels": MappingProxyType({})})}))
    assert body.name == "p" and body.labels == {}


@pytest.mark.parametrize("value", [None, 0, 1.5, True, "state", b"state", ["terminated"], ("a", 1), {"a"}])
def test_as_mapping_reads_what_is_not_a_mapping_as_an_empty_one(value: object) -> None:
    empty = as_mapping(value)
    assert empty == {} and isinstance(empty, MappingProxyType)
    with pytest.raises(TypeError):
        empty["a"] = 1  # type: ignore[index]


def test_as_mapping_returns_a_mapping_itself() -> None:
    state = {"terminated": {"exitCode": 1}}
    proxy = MappingProxyType(state)
    assert as_mapping(state) is state and as_mapping(proxy) is proxy
    # a nested read of a container status, the way status sync reads one
    assert as_mapping(as_mapping({"state": "Running"}).get("state")).get("terminated") is None
    assert as_mapping(as_mapping(state).get("terminated")).get("exitCode") == 1
