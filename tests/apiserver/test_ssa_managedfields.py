"""federator/apiserver/managedfields.py: kube's field-manager stack over the TrainingJob schema.

Identities, the managedFields wire format and its order, what an Update records (and when it
records nothing), the cap of ten Update managers, before-first-apply, the kubectl client-side
apply upgrade, kube's conflict wording, and managedFields a client sends (honoured, reset,
ignored) -- each as kube-apiserver does it (AM/pkg/util/managedfields/internal).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from federator.apis.crd import openapi_schema
from federator.apiserver import managedfields as mf
from federator.apiserver import ssa
from federator.apiserver.errors import ApiError
from tests.hub.hubtest_support import EXAMPLE_FILE

GV = "federator.dev/v1alpha1"
T0, T1, T2 = "2024-05-01T12:00:00Z", "2024-05-01T12:00:01Z", "2024-05-01T12:00:02Z"


def _fm(subresource: str = "") -> mf.FieldManager:
    return mf.field_manager_for(openapi_schema=openapi_schema("TrainingJob"), api_version=GV, kind="TrainingJob",
                                subresource=subresource, status_subresource=True)


def _job(**spec: Any) -> dict[str, Any]:
    obj = yaml.safe_load(EXAMPLE_FILE.read_text())
    obj["metadata"] = {"name": "j", "namespace": "default"}
    obj["spec"].update(spec)
    return obj


def _stored(obj: dict[str, Any], entries: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["uid"] = "uid-1"
    if entries:
        out["metadata"]["managedFields"] = entries
    return out


def _who(entries: Any) -> list[tuple[str, str]]:
    return [(e.get("manager", ""), e["operation"]) for e in entries or []]


def _owned(entries: Any, manager: str, operation: str) -> frozenset[ssa.Path]:
    for entry in entries:
        if entry.get("manager") == manager and entry["operation"] == operation:
            return ssa.parse_fields_v1(entry["fieldsV1"])
    raise AssertionError(f"no {operation} entry for {manager}: {_who(entries)}")


# ---------------------------------------------------------------- identities and names


def test_identities_and_how_kube_names_them() -> None:
    apply_id = mf.manager_id("kubectl", mf.APPLY, GV)
    update_id = mf.manager_id("kubectl-edit", mf.UPDATE, GV)
    status_id = mf.manager_id("ctl", mf.UPDATE, GV, "status")
    assert apply_id == '{"manager":"kubectl","operation":"Apply"}'
    assert update_id == '{"manager":"kubectl-edit","operation":"Update","apiVersion":"federator.dev/v1alpha1"}'
    assert mf.print_manager(apply_id) == '"kubectl"'
    assert mf.print_manager(update_id) == '"kubectl-edit" using federator.dev/v1alpha1'
    assert mf.print_manager(status_id) == '"ctl" with subresource "status" using federator.dev/v1alpha1'


@pytest.mark.parametrize(("agent", "manager"), [
    ("kubectl/v1.32.4 (linux/amd64) kubernetes/59526cd", "kubectl"),
    ("OpenAPI-Generator/37.0.2/python", "OpenAPI-Generator"),
    ("", ""),
    ("fed\x00erator\x7f/1", "federator"),
    ("x" * 300, "x" * 128),
    ("é" * 100, "é" * 64),  # 128 bytes, never half a character
])
def test_default_manager_comes_from_the_user_agent(agent: str, manager: str) -> None:
    assert mf.default_manager(agent) == manager


def test_field_manager_validation_in_kubes_words() -> None:
    assert mf.field_manager_errors("kubectl") == []
    [too_long] = mf.field_manager_errors("m" * 129)
    assert str(too_long) == "fieldManager: Too long: may not be more than 128 bytes"
    [bad] = mf.field_manager_errors("ab\ncd")
    assert str(bad) == 'fieldManager: Invalid value: "ab\ncd": invalid character U+000A (at position 2)'
    error = mf.options_invalid("PatchOptions", [too_long])
    assert error.code == 422
    assert error.message == 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Too long: may not be more than 128 bytes'


# ---------------------------------------------------------------- wire format


def test_entries_are_kubes_shape_and_order() -> None:
    managed = mf.Managed(
        fields={
            mf.manager_id("zeta", mf.UPDATE, GV): ssa.VersionedSet(frozenset({("f:spec", "f:priority")}), GV, False),
            mf.manager_id("alpha", mf.UPDATE, GV): ssa.VersionedSet(frozenset({("f:spec", "f:suspend")}), GV, False),
            mf.manager_id("kubectl", mf.APPLY, GV): ssa.VersionedSet(frozenset({("f:spec", "f:roles")}), GV, True),
            mf.manager_id("ctl", mf.UPDATE, GV, "status"): ssa.VersionedSet(
                frozenset({("f:status", "f:phase")}), GV, False),
        },
        times={mf.manager_id("zeta", mf.UPDATE, GV): T0, mf.manager_id("alpha", mf.UPDATE, GV): T1,
               mf.manager_id("ctl", mf.UPDATE, GV, "status"): T0})
    entries = mf.encode(managed)
    assert entries is not None
    # Apply first, then by time, then by manager
    assert _who(entries) == [("kubectl", "Apply"), ("ctl", "Update"), ("zeta", "Update"), ("alpha", "Update")]
    assert list(entries[1]) == ["manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1", "subresource"]
    assert list(entries[0]) == ["manager", "operation", "apiVersion", "fieldsType", "fieldsV1"]  # no time: never set
    decoded = mf.decode(json.loads(json.dumps(entries)))
    assert decoded.fields == managed.fields
    assert mf.encode(decoded) == entries


@pytest.mark.parametrize(("entries", "why"), [
    ("x", "must be a list"),
    ([{"manager": "m", "operation": "Patch", "apiVersion": GV, "fieldsType": "FieldsV1"}], "Apply` or `Update"),
    ([{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1"}], "apiVersion must not be empty"),
    ([{"manager": "m", "operation": "Update", "apiVersion": GV}], "missing fieldsType"),
    ([{"manager": "m", "operation": "Update", "apiVersion": GV, "fieldsType": "FieldsV2"}], "invalid fieldsType"),
    ([{"manager": 5, "operation": "Update", "apiVersion": GV, "fieldsType": "FieldsV1"}], "wrong type"),
    ([{"manager": "m", "operation": "Update", "apiVersion": GV, "fieldsType": "FieldsV1", "time": "yesterday"}],
     "invalid time"),
    ([{"manager": "m", "operation": "Update", "apiVersion": GV, "fieldsType": "FieldsV1",
       "fieldsV1": {"f:spec": 3}}], "versioned set"),
])
def test_decode_refuses_what_kube_refuses(entries: Any, why: str) -> None:
    with pytest.raises(mf.ManagedFieldsError, match=why):
        mf.decode(entries)


# ---------------------------------------------------------------- Update


def test_a_create_is_owned_by_its_writer_and_an_untracked_object_stays_untracked() -> None:
    fm = _fm()
    job = _job()
    job["status"] = {"phase": "Running"}
    entries = fm.update(None, job, manager="kubectl-create", now=T0)
    assert _who(entries) == [("kubectl-create", "Update")]
    owned = _owned(entries, "kubectl-create", "Update")
    assert ("f:spec", "f:priority") in owned and ("f:spec",) in owned  # a new map is itself owned (kube's "."
    assert not any(p[0] in ("f:status", "f:apiVersion", "f:kind") for p in owned)  # reset and stripped fields
    assert ("f:metadata", "f:name") not in owned
    # kube's skipNonApplied: an object that exists without managedFields is not tracked by updates
    changed = _job(priority=7)
    assert fm.update(_stored(_job(), None), changed, manager="kubectl-edit", now=T1) is None


def test_an_update_takes_what_it_changed_and_a_no_op_records_nothing() -> None:
    fm = _fm()
    created = _stored(_job(), fm.update(None, _job(), manager="creator", now=T0))
    same = fm.update(created, _job(), manager="idle", now=T1)
    assert same == created["metadata"]["managedFields"]  # nothing changed: no entry, no new time
    entries = fm.update(created, _job(priority=9), manager="kubectl-edit", now=T1)
    assert _owned(entries, "kubectl-edit", "Update") == {("f:spec", "f:priority")}
    assert ("f:spec", "f:priority") not in _owned(entries, "creator", "Update")
    assert [e.get("time") for e in entries] == [T0, T1]


def test_managed_fields_a_client_sends_are_honoured_reset_or_ignored() -> None:
    fm = _fm()
    created = _stored(_job(), fm.update(None, _job(), manager="creator", now=T0))
    rewritten = copy.deepcopy(created["metadata"]["managedFields"])
    rewritten[0]["manager"] = "adopted"  # what kubectl's csaupgrade does with a JSON patch
    assert _who(fm.update(created, _job(), request_fields=rewritten, manager="kubectl", now=T1)) == [
        ("adopted", "Update")]
    for reset in ([], [{}]):
        assert fm.update(created, _job(), request_fields=reset, manager="kubectl", now=T1) is None
    garbage = [{"manager": "x", "operation": "Bogus"}]
    assert fm.update(created, _job(), request_fields=garbage, manager="kubectl", now=T1) == \
        created["metadata"]["managedFields"]
    # a subresource never takes them from the request
    status_fm = _fm("status")
    assert _who(status_fm.update(created, _job(), request_fields=rewritten, manager="kubectl", now=T1)) == [
        ("creator", "Update")]


def test_status_writes_own_status_only() -> None:
    status_fm = _fm("status")
    created = _stored(_job(), _fm().update(None, _job(), manager="creator", now=T0))
    with_status = _job(priority=99)  # the spec change is reset on /status, so nobody gains it
    with_status["status"] = {"phase": "Running"}
    entries = status_fm.update(created, with_status, manager="hub", now=T1)
    entry = next(e for e in entries if e["manager"] == "hub")
    assert entry["subresource"] == "status"
    assert ssa.parse_fields_v1(entry["fieldsV1"]) == {("f:status",), ("f:status", "f:phase")}


def test_at_most_ten_update_managers_the_oldest_merged() -> None:
    fm = _fm()
    current = _stored(_job(), fm.update(None, _job(), manager="m00", now="2024-05-01T12:00:00Z"))
    for i in range(1, 12):  # each adds a label of its own, so every one keeps something
        new = _job()
        new["metadata"]["labels"] = {f"l{n}": "x" for n in range(1, i + 1)}
        entries = fm.update(current, new, manager=f"m{i:02d}", now=f"2024-05-01T12:00:{i:02d}Z")
        current = _stored(new, entries)
    managers = [e["manager"] for e in current["metadata"]["managedFields"]]
    # the 11th updater merged m00 and m01 into the bucket; the 12th merged m02 into it (kube's order:
    # oldest first, the bucket taking the time of the last one merged)
    assert managers == ["ancient-changes", *(f"m{i:02d}" for i in range(3, 12))]
    assert current["metadata"]["managedFields"][0]["time"] == "2024-05-01T12:00:02Z"
    ancient = _owned(current["metadata"]["managedFields"], "ancient-changes", "Update")
    assert ("f:spec", "f:roles") in ancient  # what m00 created lives on in the bucket


# ---------------------------------------------------------------- Apply


def test_apply_over_an_untracked_object_meets_before_first_apply() -> None:
    fm = _fm()
    untracked = _stored(_job(), None)
    with pytest.raises(ApiError) as caught:
        fm.apply(untracked, _job(priority=5), manager="ops", force=False, now=T1)
    assert caught.value.code == 409
    assert caught.value.message == ('Apply failed with 1 conflict: conflict with "before-first-apply" using '
                                    'federator.dev/v1alpha1: .spec.priority')
    assert caught.value.details == {"causes": [{
        "reason": "FieldManagerConflict", "message": 'conflict with "before-first-apply" using federator.dev/v1alpha1',
        "field": ".spec.priority"}]}
    result, entries, changed = fm.apply(untracked, _job(priority=5), manager="ops", force=True, now=T1)
    assert changed and result["spec"]["priority"] == 5
    assert _who(entries) == [("ops", "Apply"), ("before-first-apply", "Update")]


def test_many_conflicts_are_grouped_by_manager() -> None:
    fm = _fm()
    created = _stored(_job(), fm.update(None, _job(), manager="creator", now=T0))
    edited = _job(priority=3, suspend=True)
    created = _stored(edited, fm.update(created, edited, manager="editor", now=T1))
    config = _job(priority=4, suspend=False)
    config["spec"]["failover"]["maxRequeues"] = 1
    with pytest.raises(ApiError) as caught:
        fm.apply(created, config, manager="ops", force=False, now=T2)
    assert caught.value.message == (
        "Apply failed with 3 conflicts: "
        'conflicts with "creator" using federator.dev/v1alpha1:\n- .spec.failover.maxRequeues\n'
        'conflicts with "editor" using federator.dev/v1alpha1:\n- .spec.priority\n- .spec.suspend')


def test_kubectl_takes_over_client_side_apply_fields_that_still_hold_their_applied_values() -> None:
    fm = _fm()
    applied = _job(priority=1)
    annotated = copy.deepcopy(applied)
    annotated["metadata"]["annotations"] = {mf.LAST_APPLIED_ANNOTATION: json.dumps(applied)}
    live = _stored(annotated, fm.update(None, annotated, manager="kubectl-client-side-apply", now=T0))
    new_config = _job(priority=2)
    # another manager would conflict; kubectl may take the fields the annotation lists
    with pytest.raises(ApiError):
        fm.apply(live, new_config, manager="someone", force=False, now=T1)
    result, entries, changed = fm.apply(live, new_config, manager="kubectl", force=False, now=T1)
    assert changed and result["spec"]["priority"] == 2
    assert ("f:spec", "f:priority") in _owned(entries, "kubectl", "Apply")
    # kube keeps the annotation in step with what kubectl applied (JSON, sorted keys, a final newline)
    assert json.loads(result["metadata"]["annotations"][mf.LAST_APPLIED_ANNOTATION]) == new_config
    assert result["metadata"]["annotations"][mf.LAST_APPLIED_ANNOTATION].endswith("}\n")
    # a field someone changed after the client-side apply is not kubectl's to take
    edited = copy.deepcopy(live)
    edited["spec"]["suspend"] = True
    edited["metadata"]["managedFields"] = fm.update(live, edited, manager="kubectl-edit", now=T1)
    with pytest.raises(ApiError) as caught:
        fm.apply(edited, _job(priority=2, suspend=False), manager="kubectl", force=False, now=T2)
    assert caught.value.message.endswith(': .spec.suspend')


def test_an_apply_that_changes_nothing_keeps_the_time() -> None:
    fm = _fm()
    result, entries, changed = fm.apply(None, _job(), manager="kubectl", force=False, now=T0)
    assert changed
    again, entries_again, changed_again = fm.apply(_stored(result, entries), _job(), manager="kubectl", force=False,
                                                   now=T1)
    assert not changed_again
    assert entries_again == entries


def test_nulls_an_apply_sets_leave_no_field() -> None:
    fm = _fm()
    config = _job()
    config["spec"]["failover"] = None
    config["spec"]["priority"] = None
    result, _, _ = fm.apply(None, config, manager="kubectl", force=False, now=T0)
    assert "priority" not in result["spec"] and "failover" not in result["spec"]


def test_an_apply_leaves_its_configuration_and_the_live_object_alone() -> None:
    fm = _fm()
    config = _job()
    config["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u1",
                                              "controller": None}]  # an atomic map the merge hands back as is
    config["spec"]["priority"] = None
    before = copy.deepcopy(config)
    result, entries, _ = fm.apply(None, config, manager="kubectl", force=False, now=T0)
    assert config == before
    assert result["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                                      "uid": "u1"}]
    live = _stored(result, entries)
    live_before = copy.deepcopy(live)
    fm.apply(live, config, manager="other", force=True, now=T1)
    assert live == live_before and config == before
