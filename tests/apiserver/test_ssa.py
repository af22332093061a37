"""federator/apiserver/ssa.py against structured-merge-diff's own cases and properties.

The table cases are ported from sigs.k8s.io/structured-merge-diff v6 (typed/merge_test.go "struct
grab bag" and "associative list"; merge/set_test.go; merge/multiple_appliers_test.go), with the
same objects and the same expected results and owners (one API version: conversions are SMD's
business, not ours). The properties run over the real TrainingJob schema: a single applier's object
is exactly what it last applied, applying twice changes nothing, conflicts name exactly the fields
another manager owns with another value, and fieldsV1 round-trips.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from federator.apis.crd import openapi_schema
from federator.apiserver import ssa

# ---------------------------------------------------------------- helpers


def P(*parts: Any) -> ssa.Path:  # noqa: N802 - SMD's _P
    """A path: strings are fields, dicts list keys, ("v", x) set values."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, dict):
            out.append(ssa._key_element(part.items()))
        elif isinstance(part, tuple):
            out.append(ssa._value_element(part[1]))
        else:
            out.append(ssa.field_element(part))
    return tuple(out)


def V(value: Any) -> tuple[str, Any]:  # noqa: N802 - SMD's _V
    return ("v", value)


def _y(text: str) -> Any:
    return yaml.safe_load(text) if text.strip() else {}


def _array(items: Any, list_type: str | None = None, keys: list[str] | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "array", "items": items}
    if list_type:
        node["x-kubernetes-list-type"] = list_type
    if keys:
        node["x-kubernetes-list-map-keys"] = keys
    return node


_STR = {"type": "string"}
_NUM = {"type": "number"}
_BOOL = {"type": "boolean"}

GRAB_BAG = ssa.atom_from_openapi({"type": "object", "properties": {
    "numeric": _NUM, "string": _STR, "bool": _BOOL,
    "setStr": _array(_STR, "set"), "setBool": _array(_BOOL, "set"), "setNumeric": _array(_NUM, "set")}})

ASSOCIATIVE = ssa.atom_from_openapi({"type": "object", "properties": {
    "list": _array({"type": "object", "properties": {
        "key": _STR, "id": _NUM, "value": {"type": "object", "additionalProperties": _STR},
        "bv": _BOOL, "nv": _NUM}}, "map", ["key", "id"]),
    "atomicList": _array(_STR)}})

SET_LIST = ssa.atom_from_openapi({"type": "object", "properties": {"list": _array(_STR, "set")}})

KEYED_LIST = ssa.atom_from_openapi({"type": "object", "properties": {
    "list": _array({"type": "object", "properties": {"name": _STR, "value": _NUM}}, "map", ["name"])}})

NESTED = ssa.atom_from_openapi({"type": "object", "properties": {
    "listOfLists": _array({"type": "object", "properties": {"name": _STR, "value": _array(_STR, "set")}},
                          "map", ["name"])}})

STRUCT = ssa.atom_from_openapi({"type": "object", "properties": {"struct": {"type": "object", "properties": {
    "name": _STR, "scalarField": _STR, "complexField": {"type": "object", "properties": {"name": _STR}}}}}})


# ---------------------------------------------------------------- merge (typed/merge_test.go)

GRAB_BAG_MERGES = [
    ('{"numeric":1}', '{"numeric":3.14159}', '{"numeric":3.14159}'),
    ('{"numeric":3.14159}', '{"numeric":1}', '{"numeric":1}'),
    ('{"string":"aoeu"}', '{"bool":true}', '{"string":"aoeu","bool":true}'),
    ('{"setStr":["a","b","c"]}', '{"setStr":["a","b"]}', '{"setStr":["a","b","c"]}'),
    ('{"setStr":["a","b"]}', '{"setStr":["a","b","c"]}', '{"setStr":["a","b","c"]}'),
    ('{"setStr":["a","b","c"]}', '{"setStr":[]}', '{"setStr":["a","b","c"]}'),
    ('{"setStr":[]}', '{"setStr":["a","b","c"]}', '{"setStr":["a","b","c"]}'),
    ('{"setStr":["a","b"]}', '{"setStr":["b","a"]}', '{"setStr":["b","a"]}'),
    ('{"setStr":["a","b","c"]}', '{"setStr":["d","e","f"]}', '{"setStr":["a","b","c","d","e","f"]}'),
    ('{"setStr":["a","b","c"]}', '{"setStr":["c","d","e","f"]}', '{"setStr":["a","b","c","d","e","f"]}'),
    ('{"setStr":["a","b","c","g","f"]}', '{"setStr":["c","d","e","f"]}', '{"setStr":["a","b","c","g","d","e","f"]}'),
    ('{"setStr":["a","b","c"]}', '{"setStr":["d","e","f","x","y","z"]}',
     '{"setStr":["a","b","c","d","e","f","x","y","z"]}'),
    ('{"setStr":["c","d","e","f"]}', '{"setStr":["a","c","e"]}', '{"setStr":["a","c","d","e","f"]}'),
    ('{"setStr":["a","b","c","x","y","z"]}', '{"setStr":["d","e","f"]}',
     '{"setStr":["a","b","c","x","y","z","d","e","f"]}'),
    ('{"setStr":["a","b","c","x","y","z"]}', '{"setStr":["d","e","f","x","y","z"]}',
     '{"setStr":["a","b","c","d","e","f","x","y","z"]}'),
    ('{"setStr":["c","a","g","f"]}', '{"setStr":["c","f","a","g"]}', '{"setStr":["c","f","a","g"]}'),
    ('{"setStr":["a","b","c","d"]}', '{"setStr":["d","e","f","a"]}', '{"setStr":["b","c","d","e","f","a"]}'),
    ('{"setStr":["c","d","e","f","g","h","i","j"]}', '{"setStr":["2","h","3","e","4","k","l"]}',
     '{"setStr":["c","d","f","g","2","h","i","j","3","e","4","k","l"]}'),
    ('{"setStr":["a","b","c","d","e","f","g","h","i","j"]}', '{"setStr":["1","b","2","h","3","e","4","k","l"]}',
     '{"setStr":["a","1","b","c","d","f","g","2","h","i","j","3","e","4","k","l"]}'),
    ('{"setStr":["a","b","b"]}', '{"setStr":["c"]}', '{"setStr":["a","b","b","c"]}'),
    ('{"setStr":["a","b","b"]}', '{"setStr":["b"]}', '{"setStr":["a","b"]}'),
    ('{"setStr":["a","b","b"]}', '{"setStr":["a"]}', '{"setStr":["a","b","b"]}'),
    ('{"setStr":["a","b","c","d","e","c"]}', '{"setStr":["1","b","2","e","d"]}',
     '{"setStr":["a","1","b","c","2","e","c","d"]}'),
    ('{"setStr":["a","b","c","d","e","c"]}', '{"setStr":["1","b","2","c","e","d"]}',
     '{"setStr":["a","1","b","2","c","e","d"]}'),
    ('{"setStr":["a","a","b","b"]}', '{"setStr":["b","c","d"]}', '{"setStr":["a","a","b","c","d"]}'),
    ('{"setStr":["a","a","b","b"]}', '{"setStr":[]}', '{"setStr":["a","a","b","b"]}'),
    ('{"setBool":[true]}', '{"setBool":[false]}', '{"setBool":[true, false]}'),
    ('{"setNumeric":[1,2,3.14159]}', '{"setNumeric":[1,2,3]}', '{"setNumeric":[1,2,3.14159,3]}'),
    ('{"setStr":["c","a","g","f","c","a"]}', '{"setStr":["c","f","a","g"]}', '{"setStr":["c","f","a","g"]}'),
    ('{"setNumeric":[1,2,3.14159,1,2]}', '{"setNumeric":[1,2,3]}', '{"setNumeric":[1,2,3.14159,3]}'),
    ('{"setBool":[true,false,true]}', '{"setBool":[false]}', '{"setBool":[true,false,true]}'),
    ('{"setBool":[true,false,true]}', '{"setBool":[true]}', '{"setBool":[true, false]}'),
]

ASSOCIATIVE_MERGES = [
    ('{"list":[{"key":"a","id":1,"value":{"a":"a"}}]}', '{"list":[{"key":"a","id":1,"value":{"a":"a"}}]}',
     '{"list":[{"key":"a","id":1,"value":{"a":"a"}}]}'),
    ('{"list":[{"key":"a","id":1,"value":{"a":"a"}}]}', '{"list":[{"key":"a","id":2,"value":{"a":"a"}}]}',
     '{"list":[{"key":"a","id":1,"value":{"a":"a"}},{"key":"a","id":2,"value":{"a":"a"}}]}'),
    ('{"list":[{"key":"a","id":1},{"key":"b","id":1}]}', '{"list":[{"key":"a","id":1},{"key":"a","id":2}]}',
     '{"list":[{"key":"a","id":1},{"key":"b","id":1},{"key":"a","id":2}]}'),
    ('{"list":[{"key":"b","id":2}]}', '{"list":[{"key":"a","id":1},{"key":"b","id":2},{"key":"c","id":3}]}',
     '{"list":[{"key":"a","id":1},{"key":"b","id":2},{"key":"c","id":3}]}'),
    ('{"list":[{"key":"a","id":1},{"key":"b","id":2},{"key":"c","id":3}]}',
     '{"list":[{"key":"c","id":3},{"key":"b","id":2}]}',
     '{"list":[{"key":"a","id":1},{"key":"c","id":3},{"key":"b","id":2}]}'),
    ('{"list":[{"key":"a","id":1},{"key":"b","id":2},{"key":"c","id":3}]}',
     '{"list":[{"key":"c","id":3},{"key":"a","id":1}]}',
     '{"list":[{"key":"b","id":2},{"key":"c","id":3},{"key":"a","id":1}]}'),
    ('{"atomicList":["a","a","a"]}', '{"atomicList":null}', '{"atomicList":null}'),
    ('{"atomicList":["a","b","c"]}', '{"atomicList":[]}', '{"atomicList":[]}'),
    ('{"atomicList":["a","a","a"]}', '{"atomicList":["a","a"]}', '{"atomicList":["a","a"]}'),
    ('{"list":[{"key":"a","id":1,"bv":true},{"key":"b","id":2},{"key":"a","id":1,"bv":false,"nv":2}]}',
     '{"list":[{"key":"a","id":1,"nv":3},{"key":"c","id":3},{"key":"b","id":2}]}',
     '{"list":[{"key":"a","id":1,"nv":3},{"key":"c","id":3},{"key":"b","id":2}]}'),
    ('{"list":[{"key":"a","id":1,"nv":1},{"key":"a","id":1,"nv":2}]}', '{"list":[]}',
     '{"list":[{"key":"a","id":1,"nv":1},{"key":"a","id":1,"nv":2}]}'),
    ('{"list":[{"key":"a","id":1,"nv":1},{"key":"a","id":1,"nv":2}]}', '{}',
     '{"list":[{"key":"a","id":1,"nv":1},{"key":"a","id":1,"nv":2}]}'),
]


@pytest.mark.parametrize(("atom", "lhs", "rhs", "out"),
                         [(GRAB_BAG, *t) for t in GRAB_BAG_MERGES] + [(ASSOCIATIVE, *t) for t in ASSOCIATIVE_MERGES])
def test_merge_matches_smd(atom: ssa.Atom, lhs: str, rhs: str, out: str) -> None:
    got = ssa.merge(json.loads(lhs), json.loads(rhs), atom)
    assert ssa.json_equal(got, json.loads(out)), got


def test_merge_refuses_what_smd_refuses_in_an_applied_list() -> None:
    with pytest.raises(ssa.MergeError, match=r'duplicate entries for key \[id=1,key="a"\]'):
        ssa.merge({}, {"list": [{"key": "a", "id": 1}, {"key": "a", "id": 1, "nv": 2}]}, ASSOCIATIVE)
    with pytest.raises(ssa.MergeError, match="omits all key fields"):
        ssa.merge({}, {"list": [{"nv": 2}]}, ASSOCIATIVE)
    with pytest.raises(ssa.MergeError, match="non-map elements"):
        ssa.merge({}, {"list": ["a"]}, ASSOCIATIVE)
    with pytest.raises(ssa.MergeError, match="explicit null"):
        ssa.check_keys({"setStr": ["a", None]}, GRAB_BAG)


# ---------------------------------------------------------------- field sets


def test_to_field_set_owns_leaves_list_items_and_map_keys_not_structs() -> None:
    value = {"list": [{"key": "a", "id": 1, "value": {"x": "1"}}], "atomicList": ["z"]}
    assert ssa.to_field_set(value, ASSOCIATIVE) == {
        P("list", {"key": "a", "id": 1}),
        P("list", {"key": "a", "id": 1}, "key"),
        P("list", {"key": "a", "id": 1}, "id"),
        P("list", {"key": "a", "id": 1}, "value", "x"),
        P("atomicList"),
    }
    # an empty struct or a null is owned itself; duplicates in a list are owned as one item
    assert ssa.to_field_set({"struct": {}}, STRUCT) == {P("struct")}
    assert ssa.to_field_set({"struct": None}, STRUCT) == {P("struct")}
    assert ssa.to_field_set({"setStr": ["a", "a", "b"]}, GRAB_BAG) == {P("setStr", V("a")), P("setStr", V("b"))}


def test_fields_v1_is_kube_spelling_in_smd_order() -> None:
    fields = {P("spec", "roles", {"name": "ps"}), P("spec", "roles", {"name": "ps"}, "replicas"),
              P("spec", "gpuModels", V("H100")), P("spec", "gpuModels", V("A100")), P("spec", "priority"),
              P("metadata", "labels", "a<b")}
    encoded = ssa.fields_v1(frozenset(fields))
    assert json.dumps(encoded, separators=(",", ":")) == (
        '{"f:metadata":{"f:labels":{"f:a<b":{}}},"f:spec":{"f:gpuModels":{"v:\\"A100\\"":{},"v:\\"H100\\"":{}},'
        '"f:priority":{},"f:roles":{"k:{\\"name\\":\\"ps\\"}":{".":{},"f:replicas":{}}}}}')
    assert ssa.parse_fields_v1(encoded) == fields
    # keys are canonical whatever order a client wrote them in; unknown element types are dropped
    assert ssa.parse_fields_v1({'k:{"id":1,"key":"a"}': {}, 'k:{"key":"a", "id":1}': {}, "x:y": {}}) == {
        P({"key": "a", "id": 1})}
    assert ssa.path_string(P("spec", "roles", {"name": "ps"}, "replicas")) == '.spec.roles[name="ps"].replicas'
    assert ssa.path_string(P("spec", "gpuModels", V("A100"))) == '.spec.gpuModels[="A100"]'


@pytest.mark.parametrize("bad", [
    [], {"f:spec": []}, {"f:spec": {"k:notjson": {}}}, {"f:spec": {"k:[1]": {}}}, {"i:x": {}}, {"z": {}},
    {"f:a": {"f:b": "c"}},
])
def test_parse_fields_v1_refuses_what_is_not_a_field_set(bad: Any) -> None:
    with pytest.raises(ssa.FieldsV1Error):
        ssa.parse_fields_v1(bad)


def test_compare_reports_new_maps_themselves() -> None:
    comparison = ssa.compare({"struct": {"name": "a"}}, {"struct": {"name": "b", "complexField": {"name": "c"}}},
                             STRUCT)
    assert comparison.modified == {P("struct", "name")}
    assert comparison.added == {P("struct", "complexField"), P("struct", "complexField", "name")}
    assert comparison.removed == frozenset()
    assert ssa.compare({"struct": {"name": "a"}}, {}, STRUCT).removed == {P("struct"), P("struct", "name")}
    assert ssa.compare({"a": 1}, {"a": True}, ssa.DEDUCED).modified == {P("a")}  # True is not 1


def test_recursive_difference_and_named_fields() -> None:
    fields = frozenset({P("status", "phase"), P("spec", "x"), P("status")})
    assert ssa.recursive_difference(fields, frozenset({P("status")})) == {P("spec", "x")}
    nested = frozenset({P("listOfLists", {"name": "a"}, "value", V("b"))})
    assert ssa.ensure_named_fields_are_members(nested, NESTED) == nested | {
        P("listOfLists"), P("listOfLists", {"name": "a"}, "value")}


def test_remove_items_drops_what_it_empties() -> None:
    value = {"list": [{"key": "a", "id": 1, "value": {"x": "1"}}, {"key": "b", "id": 2}]}
    out = ssa.remove_items(value, frozenset({P("list", {"key": "a", "id": 1}, "value", "x"),
                                             P("list", {"key": "b", "id": 2})}), ASSOCIATIVE)
    assert out == {"list": [{"key": "a", "id": 1}]}
    assert value["list"][0]["value"] == {"x": "1"}  # inputs are never changed


# ---------------------------------------------------------------- the updater (merge/*_test.go)


def _run(atom: ssa.Atom, ops: list[tuple[Any, ...]]) -> tuple[Any, ssa.Managers]:
    """SMD's test fixture: ("apply", manager, yaml[, force]) / ("update", manager, yaml) from {}."""
    live: Any = {}
    managers: ssa.Managers = {}
    for op in ops:
        kind, manager, text = op[:3]
        obj = _y(text)
        if kind == "apply":
            new, managers = ssa.apply(live, obj, managers=managers, manager=manager, api_version="v1",
                                      force=bool(op[3]) if len(op) > 3 else False, atom=atom)
            live = new if new is not None else live
        else:
            managers = ssa.update(live, obj, managers=managers, manager=manager, api_version="v1", atom=atom)
            live = obj
    return live, managers


def _owners(managers: ssa.Managers) -> dict[str, set[ssa.Path]]:
    return {m: set(s.fields) for m, s in managers.items()}


A, B, C, D = ({"name": n} for n in "abcd")

UPDATER_CASES: dict[str, tuple[ssa.Atom, list[tuple[Any, ...]], str, dict[str, set[ssa.Path]]]] = {
    "set apply_twice": (SET_LIST, [
        ("apply", "default", "list: [a, c]"), ("apply", "default", "list: [a, b, c, d]")],
        "list: [a, b, c, d]", {"default": {P("list", V(x)) for x in "abcd"}}),
    "set apply_update_apply_no_overlap": (SET_LIST, [
        ("apply", "default", "list: [a, c]"), ("update", "controller", "list: [a, b, c, d]"),
        ("apply", "default", "list: [a, aprime, c, cprime]")],
        "list: [a, b, aprime, c, d, cprime]",
        {"default": {P("list", V(x)) for x in ("a", "aprime", "c", "cprime")},
         "controller": {P("list", V("b")), P("list", V("d"))}}),
    "remove_one": (KEYED_LIST, [
        ("apply", "apply-one", "list: [{name: a}, {name: b}]"), ("apply", "apply-two", "list: [{name: c}]"),
        ("apply", "apply-one", "list: [{name: a}]")],
        "list: [{name: a}, {name: c}]",
        {"apply-one": {P("list", A), P("list", A, "name")}, "apply-two": {P("list", C), P("list", C, "name")}}),
    "same_value_no_conflict": (KEYED_LIST, [
        ("apply", "apply-one", "list: [{name: a, value: 0}]"), ("apply", "apply-two", "list: [{name: a, value: 0}]")],
        "list: [{name: a, value: 0}]",
        {m: {P("list", A), P("list", A, "name"), P("list", A, "value")} for m in ("apply-one", "apply-two")}),
    "remove_one_keep_one": (KEYED_LIST, [
        ("apply", "apply-one", "list: [{name: a}, {name: b}, {name: c}]"),
        ("apply", "apply-two", "list: [{name: c}, {name: d}]"), ("apply", "apply-one", "list: [{name: a}]")],
        "list: [{name: a}, {name: c}, {name: d}]",
        {"apply-one": {P("list", A), P("list", A, "name")},
         "apply-two": {P("list", C), P("list", C, "name"), P("list", D), P("list", D, "name")}}),
    "unset_scalar_sole_owner": (STRUCT, [
        ("apply", "apply-one", "struct: {name: a, scalarField: a}"), ("apply", "apply-one", "struct: {name: a}")],
        "struct: {name: a}", {"apply-one": {P("struct", "name")}}),
    "unset_scalar_shared_with_applier": (STRUCT, [
        ("apply", "apply-one", "struct: {name: a, scalarField: a}"),
        ("apply", "apply-two", "struct: {scalarField: a}"), ("apply", "apply-one", "struct: {name: a}")],
        "struct: {name: a, scalarField: a}",
        {"apply-one": {P("struct", "name")}, "apply-two": {P("struct", "scalarField")}}),
    "unset_scalar_shared_with_updater": (STRUCT, [
        ("update", "updater", "struct: {name: a, scalarField: a}"),
        ("apply", "applier", "struct: {name: a, scalarField: a}"), ("apply", "applier", "struct: {name: a}")],
        "struct: {name: a, scalarField: a}",
        {"updater": {P("struct"), P("struct", "name"), P("struct", "scalarField")},
         "applier": {P("struct", "name")}}),
    "updater_claims_field": (STRUCT, [
        ("apply", "applier", "struct: {name: a, scalarField: a}"),
        ("update", "updater", "struct: {name: a, scalarField: b}")],
        "struct: {name: a, scalarField: b}",
        {"updater": {P("struct", "scalarField")}, "applier": {P("struct", "name")}}),
    "unset_complex_sole_owner": (STRUCT, [
        ("apply", "apply-one", "struct: {name: a, complexField: {name: b}}"),
        ("apply", "apply-one", "struct: {name: a}")],
        "struct: {name: a}", {"apply-one": {P("struct", "name")}}),
    "unset_complex_shared_with_applier": (STRUCT, [
        ("apply", "apply-one", "struct: {name: a, complexField: {name: b}}"),
        ("apply", "apply-two", "struct: {complexField: {name: b}}"), ("apply", "apply-one", "struct: {name: a}")],
        "struct: {name: a, complexField: {name: b}}",
        {"apply-one": {P("struct", "name")}, "apply-two": {P("struct", "complexField", "name")}}),
    "remove_one_keep_one_with_two_sub_items": (NESTED, [
        ("apply", "apply-one", "listOfLists: [{name: a}, {name: b, value: [c]}]"),
        ("apply", "apply-two", "listOfLists: [{name: b, value: [d]}]"),
        ("apply", "apply-one", "listOfLists: [{name: a}]")],
        "listOfLists: [{name: a}, {name: b, value: [d]}]",
        {"apply-one": {P("listOfLists", A), P("listOfLists", A, "name")},
         "apply-two": {P("listOfLists", B), P("listOfLists", B, "name"), P("listOfLists", B, "value", V("d"))}}),
    "remove_one_keep_one_with_dangling_subitem": (NESTED, [
        ("apply", "apply-one", "listOfLists: [{name: a}, {name: b, value: [c]}]"),
        ("apply", "apply-two", "listOfLists: [{name: b, value: [d]}]"),
        ("update", "controller", "listOfLists: [{name: a}, {name: b, value: [c, d, e]}]"),
        ("apply", "apply-one", "listOfLists: [{name: a}]")],
        "listOfLists: [{name: a}, {name: b, value: [d, e]}]",
        {"apply-one": {P("listOfLists", A), P("listOfLists", A, "name")},
         "apply-two": {P("listOfLists", B), P("listOfLists", B, "name"), P("listOfLists", B, "value", V("d"))},
         "controller": {P("listOfLists", B, "value", V("e"))}}),
    "remove_one_with_dangling_subitem_keep_one": (NESTED, [
        ("apply", "apply-one", "listOfLists: [{name: a}, {name: b, value: [c]}]"),
        ("apply", "apply-two", "listOfLists: [{name: a, value: [b]}]"),
        ("update", "controller", "listOfLists: [{name: a, value: [b]}, {name: b, value: [c, d]}]"),
        ("apply", "apply-one", "listOfLists: [{name: a}]")],
        "listOfLists: [{name: a, value: [b]}]",
        {"apply-one": {P("listOfLists", A), P("listOfLists", A, "name")},
         "apply-two": {P("listOfLists", A), P("listOfLists", A, "name"), P("listOfLists", A, "value", V("b"))}}),
}


@pytest.mark.parametrize("case", sorted(UPDATER_CASES))
def test_updater_matches_smd(case: str) -> None:
    atom, ops, want, owners = UPDATER_CASES[case]
    live, managers = _run(atom, ops)
    assert ssa.json_equal(live, _y(want)), live
    assert _owners(managers) == owners


def test_apply_conflicts_name_the_owner_and_force_takes_the_field() -> None:
    ops: list[tuple[Any, ...]] = [("apply", "apply-one", "list: [{name: a, value: 0}]")]
    live, managers = _run(KEYED_LIST, ops)
    with pytest.raises(ssa.Conflicts) as caught:
        ssa.apply(live, _y("list: [{name: a, value: 1}]"), managers=managers, manager="apply-two",
                  api_version="v1", force=False, atom=KEYED_LIST)
    assert caught.value.conflicts == [("apply-one", P("list", A, "value"))]
    new, managers = ssa.apply(live, _y("list: [{name: a, value: 1}]"), managers=managers, manager="apply-two",
                              api_version="v1", force=True, atom=KEYED_LIST)
    assert new == {"list": [{"name": "a", "value": 1}]}
    assert _owners(managers) == {"apply-one": {P("list", A), P("list", A, "name")},
                                 "apply-two": {P("list", A), P("list", A, "name"), P("list", A, "value")}}


def test_ignored_fields_are_nobodys() -> None:
    ignored = frozenset({P("struct", "scalarField")})
    new, managers = ssa.apply({}, _y("struct: {name: a, scalarField: x}"), managers={}, manager="m",
                              api_version="v1", force=False, atom=STRUCT, ignored=ignored)
    assert new == {"struct": {"name": "a", "scalarField": "x"}}
    assert _owners(managers) == {"m": {P("struct", "name")}}
    managers = ssa.update(new, _y("struct: {name: b, scalarField: y}"), managers=managers, manager="u",
                          api_version="v1", atom=STRUCT, ignored=ignored)
    assert _owners(managers) == {"u": {P("struct", "name")}}


# ---------------------------------------------------------------- properties over the TrainingJob schema

JOB = ssa.object_atom(openapi_schema("TrainingJob"))
_names = st.sampled_from(["ps", "worker", "chief", "eval"])
_env_names = st.sampled_from(["A", "B", "C"])
_words = st.sampled_from(["x", "y", "z", "trainer:1", "trainer:2"])


def _role() -> st.SearchStrategy[dict[str, Any]]:
    template = st.fixed_dictionaries({"image": _words}, optional={
        "command": st.lists(_words, max_size=3),
        "env": st.lists(st.fixed_dictionaries({"name": _env_names}, optional={"value": _words}),
                        max_size=3, unique_by=lambda e: e["name"]),
        "resources": st.fixed_dictionaries({}, optional={"cpu": st.sampled_from(["1", "2"]),
                                                         "nvidia.com/gpu": st.integers(0, 8)}),
        "nodeSelector": st.dictionaries(_env_names, _words, max_size=2)})
    return st.fixed_dictionaries({"name": _names}, optional={"replicas": st.integers(1, 4), "template": template})


_configs = st.fixed_dictionaries(
    {"apiVersion": st.just("federator.dev/v1alpha1"), "kind": st.just("TrainingJob"),
     "metadata": st.fixed_dictionaries({"name": st.just("j")}, optional={
         "labels": st.dictionaries(st.sampled_from(["team", "tier", "app"]), _words, max_size=3),
         "finalizers": st.lists(st.sampled_from(["a.io/x", "b.io/y"]), unique=True, max_size=2)})},
    optional={"spec": st.fixed_dictionaries({}, optional={
        "priority": st.integers(-5, 5),
        "suspend": st.booleans(),
        "roles": st.lists(_role(), max_size=3, unique_by=lambda r: r["name"]),
        "placement": st.fixed_dictionaries({}, optional={
            "network": st.sampled_from(["rdma", "any"]),
            "gpuModels": st.lists(st.sampled_from(["A100", "H100", "V100"]), unique=True, max_size=3)})})})


def _normal(value: Any) -> Any:
    """Without empty maps and lists (an emptied field is gone, or null in SMD: the same to kube)."""
    if isinstance(value, dict):
        out = {k: _normal(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in ({}, [], None)}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


_PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_PROPERTY
@given(first=_configs, second=_configs)
def test_a_single_applier_gets_exactly_what_it_applied(first: dict[str, Any], second: dict[str, Any]) -> None:
    live, managers = ssa.apply({}, first, managers={}, manager="a", api_version="v1", force=False, atom=JOB)
    assert ssa.json_equal(live, first)
    new, managers = ssa.apply(live, second, managers=managers, manager="a", api_version="v1", force=False, atom=JOB)
    result = new if new is not None else live
    assert ssa.json_equal(_normal(result), _normal(second))
    # applying it again settles at once: at most an emptied container the configuration names comes
    # back empty (kube's null-then-pruned does the same), and after that nothing changes, not even owners
    again, managers = ssa.apply(result, second, managers=managers, manager="a", api_version="v1", force=False,
                                atom=JOB)
    if again is not None:
        assert ssa.json_equal(_normal(again), _normal(result))
        result = again
    settled, managers_settled = ssa.apply(result, second, managers=managers, manager="a", api_version="v1",
                                          force=False, atom=JOB)
    assert settled is None
    assert managers_settled == managers


@_PROPERTY
@given(first=_configs, second=_configs)
def test_conflicts_are_exactly_the_fields_owned_with_another_value(first: dict[str, Any],
                                                                   second: dict[str, Any]) -> None:
    live, managers = ssa.apply({}, first, managers={}, manager="a", api_version="v1", force=False, atom=JOB)
    changed = ssa.compare(live, ssa.merge(live, second, JOB), JOB)
    expected = managers["a"].fields & (changed.added | changed.modified) if "a" in managers else frozenset()
    try:
        new, after = ssa.apply(live, second, managers=managers, manager="b", api_version="v1", force=False,
                               atom=JOB)
    except ssa.Conflicts as conflicts:
        assert expected and {p for _, p in conflicts.conflicts} == expected
        assert {m for m, _ in conflicts.conflicts} == {"a"}
        new, after = ssa.apply(live, second, managers=managers, manager="b", api_version="v1", force=True,
                               atom=JOB)
    else:
        assert not expected
    result = new if new is not None else live
    owned_b = after["b"].fields if "b" in after else frozenset()
    assert owned_b == ssa.to_field_set(second, JOB)
    if "a" in after:  # a keeps only what b did not change
        assert not after["a"].fields & expected


@_PROPERTY
@given(config=_configs)
def test_fields_v1_round_trips(config: dict[str, Any]) -> None:
    fields = ssa.to_field_set(config, JOB)
    assert ssa.parse_fields_v1(json.loads(json.dumps(ssa.fields_v1(fields)))) == fields


@_PROPERTY
@given(old=_configs, new=_configs)
def test_an_update_takes_what_it_changed_from_everyone(old: dict[str, Any], new: dict[str, Any]) -> None:
    _, managers = ssa.apply({}, old, managers={}, manager="a", api_version="v1", force=False, atom=JOB)
    after = ssa.update(old, new, managers=managers, manager="u", api_version="v1", atom=JOB)
    changed = ssa.compare(old, new, JOB)
    owned_u = after["u"].fields if "u" in after else frozenset()
    assert owned_u == changed.added | changed.modified
    if "a" in after:
        assert not after["a"].fields & (changed.added | changed.modified | changed.removed)
