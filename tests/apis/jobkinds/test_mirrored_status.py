"""Operator mode's mirrored status fields (issue 28), the pure parts: `mirrored_status` keeps the member copy's own
status fields of its kind (`JobKind.mirrored_status_fields`) that fit the kind's upstream schema and the size
limits, and says why it leaves any out; `operator_conditions` puts them on the hub's object in place of the
computed ones, for the twin's current cluster and epoch only; `hub_fields` shows the dispatch's mode."""

from __future__ import annotations

import json
from typing import Any

import pytest

from federator.apis.jobkinds import JOB_KINDS
from federator.apis.jobkinds.jobset import jobset_status
from federator.apis.jobkinds.status import (
    MAX_MIRRORED_BYTES,
    MAX_MIRRORED_FIELD_BYTES,
    hub_fields,
    mirrored_status,
    operator_conditions,
    twin_state,
)

KINDS = {k.kind: k for k in JOB_KINDS}
JOBSET = KINDS["JobSet"]
PYTORCH = KINDS["PyTorchJob"]
JOB = KINDS["Job"]

REPLICATED = [{"name": "workers", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}]
REPLICA_STATUSES = {"Master": {"active": 1}, "Worker": {"active": 1, "succeeded": 0,
                                                         "selector": "training.kubeflow.org/job-name=x"}}


def mirrored(kind: Any, status: Any) -> tuple[dict[str, Any], dict[str, str]]:
    return mirrored_status(kind.schema, kind.mirrored_status_fields, status)


def test_every_operated_kind_names_fields_of_its_own_schema() -> None:
    for kind in JOB_KINDS:
        properties = kind.schema["properties"]["status"]["properties"]
        assert set(kind.mirrored_status_fields) <= set(properties), kind.kind
        assert "conditions" not in kind.mirrored_status_fields and "phase" not in kind.mirrored_status_fields
        assert kind.mirrored_status_fields or not kind.operator_copyable, kind.kind


def test_the_copys_own_fields_are_kept_as_written() -> None:
    kept, dropped = mirrored(JOBSET, {"replicatedJobsStatus": REPLICATED, "restarts": 1, "terminalState": "Completed",
                                      "conditions": [{"type": "Completed", "status": "True"}]})
    assert kept == {"replicatedJobsStatus": REPLICATED, "restarts": 1, "terminalState": "Completed"}
    assert dropped == {}
    kept, dropped = mirrored(PYTORCH, {"replicaStatuses": REPLICA_STATUSES, "startTime": "2026-01-01T00:00:00Z",
                                       "lastReconcileTime": "2026-01-01T00:00:01Z"})
    assert kept == {"replicaStatuses": REPLICA_STATUSES, "startTime": "2026-01-01T00:00:00Z"}  # only its fields
    kept, _ = mirrored(JOB, {"active": 3, "ready": 2, "completedIndexes": "0-1",
                             "uncountedTerminatedPods": {"succeeded": ["u1"]}})
    assert kept == {"active": 3, "ready": 2, "completedIndexes": "0-1", "uncountedTerminatedPods": {"succeeded": ["u1"]}}


@pytest.mark.parametrize(("status", "field"), [
    ({"replicatedJobsStatus": "lots"}, "replicatedJobsStatus"),
    ({"replicatedJobsStatus": [{"name": "w", "ready": "two"}]}, "replicatedJobsStatus"),
    ({"replicatedJobsStatus": [{"name": "w", "ready": True}]}, "replicatedJobsStatus"),
    ({"replicatedJobsStatus": [{"name": "w", "ready": 1, "extra": {"deep": 1}}]}, "replicatedJobsStatus"),
    ({"replicatedJobsStatus": [None]}, "replicatedJobsStatus"),
    ({"restarts": 1.5}, "restarts"),
    ({"restarts": None}, "restarts"),
    ({"terminalState": ["Completed"]}, "terminalState"),
    ({"terminalState": "x" * (MAX_MIRRORED_FIELD_BYTES + 1)}, "terminalState"),
    ({"replicatedJobsStatus": [dict(REPLICATED[0], name=f"w{i}") for i in range(2000)]}, "replicatedJobsStatus"),
])
def test_a_malformed_or_oversized_field_is_left_out_whole_with_its_reason(status: dict[str, Any],
                                                                         field: str) -> None:
    kept, dropped = mirrored(JOBSET, {**status, "restartsCountTowardsMax": 2})
    assert field not in kept and set(dropped) == {field}
    assert dropped[field].startswith(f"status.{field}") and len(dropped[field]) < 400
    assert kept == {"restartsCountTowardsMax": 2}  # the others stay


def test_the_fields_together_are_bounded_too() -> None:
    names = tuple(f"f{i}" for i in range(6))
    schema = {"properties": {"status": {"properties": {name: {"type": "string"} for name in names}}}}
    value = "x" * (MAX_MIRRORED_FIELD_BYTES - 10)
    kept, dropped = mirrored_status(schema, names, {name: value for name in names})
    fit = MAX_MIRRORED_BYTES // (len(value) + 2)
    assert list(kept) == list(names[:fit]) and set(dropped) == set(names[fit:])
    assert sum(len(json.dumps(v)) for v in kept.values()) <= MAX_MIRRORED_BYTES
    assert all("over the limit" in why for why in dropped.values())


@pytest.mark.parametrize("status", [None, "garbage", 3, [], {}])
def test_a_copy_without_a_status_object_gives_nothing(status: Any) -> None:
    kept, dropped = mirrored(JOBSET, status)
    assert kept == {}
    assert (dropped == {}) == (status is None or isinstance(status, dict))


def test_deep_nesting_and_odd_schemas_never_raise() -> None:
    deep: Any = "x"
    for _ in range(100):
        deep = {"a": deep}
    schema = {"properties": {"status": {"properties": {"odd": {"x-kubernetes-preserve-unknown-fields": True,
                                                               "type": "object"},
                                                       "untyped": {}}}}}
    kept, dropped = mirrored_status(schema, ("odd", "untyped", "absent"), {"odd": deep, "untyped": 1})
    assert kept == {"odd": deep} and set(dropped) == {"untyped"}
    nested_schema: dict[str, Any] = {"type": "object", "additionalProperties": {}}
    node = nested_schema
    for _ in range(30):
        child: dict[str, Any] = {"type": "object", "additionalProperties": {}}
        node["additionalProperties"] = child
        node = child
    kept, dropped = mirrored_status({"properties": {"status": {"properties": {"m": nested_schema}}}}, ("m",),
                                    {"m": deep})
    assert kept == {} and "nested too deeply" in dropped["m"]


def twin(operator: dict[str, Any] | None, *, mode: str | None = "operator") -> dict[str, Any]:
    placement: dict[str, Any] = {"cluster": "c1", "epoch": 2}
    if mode is not None:
        placement["mode"] = mode
    status: dict[str, Any] = {"phase": "Running", "placement": placement,
                              "podCounts": {"workers": {"running": 4}}}
    if operator is not None:
        status["operator"] = operator
    return {"metadata": {"name": "j", "namespace": "default", "uid": "u"}, "status": status}


def source() -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "j", "namespace": "default"},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2,
                                         "template": {"spec": {"parallelism": 2}}}]}}


def test_the_hubs_object_takes_the_copys_fields_of_the_current_placement_only() -> None:
    operator = {"cluster": "c1", "epoch": 2, "kind": JOBSET.source_key, "conditions": [],
                "status": {"replicatedJobsStatus": REPLICATED, "restartsCountTowardsMax": 3}}
    now = "2026-01-01T00:00:00Z"
    computed = jobset_status(source(), twin(operator), now=now)
    assert computed["restarts"] == 0 and computed["replicatedJobsStatus"] != REPLICATED
    out = operator_conditions(dict(computed), twin(operator), JOBSET.mirrored_status_fields)
    assert out["replicatedJobsStatus"] == REPLICATED and out["restartsCountTowardsMax"] == 3
    assert "restarts" not in out  # the operator has not written it: as the copy shows
    assert (out["phase"], out["cluster"], out["epoch"], out["mode"]) == ("Running", "c1", 2, "operator")
    # the fields the kind does not mirror, and the hub's own, are never taken from the copy
    hostile = {**operator, "status": {"phase": "Succeeded", "cluster": "elsewhere", "mode": "render",
                                      "replicatedJobsStatus": REPLICATED}}
    out = operator_conditions(dict(computed), twin(hostile), ("phase", "cluster", "mode", "replicatedJobsStatus"))
    assert (out["phase"], out["cluster"], out["mode"]) == ("Running", "c1", "operator")
    # a field status sync dropped as malformed keeps the computed value
    dropped = {**operator, "statusDropped": ["replicatedJobsStatus"], "status": {}}
    out = operator_conditions(dict(computed), twin(dropped), JOBSET.mirrored_status_fields)
    assert out["replicatedJobsStatus"] == computed["replicatedJobsStatus"]
    # another epoch's or cluster's copy, or none (render mode), or an old twin without status: computed
    for other in ({**operator, "epoch": 1}, {**operator, "cluster": "c2"}, None,
                  {k: v for k, v in operator.items() if k != "status"}):
        assert operator_conditions(dict(computed), twin(other), JOBSET.mirrored_status_fields)[
            "replicatedJobsStatus"] == computed["replicatedJobsStatus"]


@pytest.mark.parametrize(("mode", "shown"), [("operator", "operator"), ("render", "render"), (None, None),
                                             ("sometimes", None), (3, None)])
def test_the_mode_shows_once_dispatched(mode: Any, shown: str | None) -> None:
    state = twin_state(twin(None, mode=mode))
    assert hub_fields({}, state).get("mode") == shown
    requeued = twin(None, mode=mode)
    requeued["status"]["placement"].pop("cluster")
    assert "mode" not in hub_fields({}, twin_state(requeued))
