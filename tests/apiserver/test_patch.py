"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from federator.apiserver.patch import (
    PatchApplyError,
    PatchError,
    apply_patch,
    json_merge_patch,
    json_patch,
    strategic_merge_patch,
)
from federator.apiserver.registry import SMPListStrategy

# RFC 7386 appendix A, all test cases.
RFC7386 = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), RFC7386)
def test_json_merge_patch_rfc7386(target: Any, patch: Any, expected: Any) -> None:
    before = copy.deepcopy(target)
    assert json_merge_patch(target, patch) == expected
    assert target == before  # inputs are never mutated


# RFC 6902 appendix A (the applicable examples).
RFC6902 = [
    ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
    ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}], {"foo": ["bar", "qux", "baz"]}),
    ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
    ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
    ({"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}], {"baz": "boo", "foo": "bar"}),
    ({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
     [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
     {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),
    ({"foo": ["all", "grass", "cows", "eat"]}, [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
     {"foo": ["all", "cows", "eat", "grass"]}),
    ({"baz": "qux", "foo": ["a", 2, "c"]},
     [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
     {"baz": "qux", "foo": ["a", 2, "c"]}),
    ({"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
     {"foo": "bar", "child": {"grandchild": {}}}),
    ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}], {"foo": ["bar", ["abc", "def"]]}),
    ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
    ({"a": 1}, [{"op": "copy", "from": "/a", "path": "/b"}], {"a": 1, "b": 1}),
    # kube's use: an extended resource on a node (`~1` escapes `/`)
    ({"status": {"capacity": {"cpu": "4"}}},
     [{"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "4"}],
     {"status": {"capacity": {"cpu": "4", "example.com/dongle": "4"}}}),
]


@pytest.mark.parametrize(("target", "ops", "expected"), RFC6902)
def test_json_patch_rfc6902(target: Any, ops: list[Any], expected: Any) -> None:
    before = copy.deepcopy(target)
    assert json_patch(target, ops) == expected
    assert target == before


@pytest.mark.parametrize(
    ("target", "ops"),
    [
        ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}]),
        ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}]),
        ({"foo": "bar"}, [{"op": "remove", "path": "/nope"}]),
        ({"foo": "bar"}, [{"op": "replace", "path": "/nope", "value": 1}]),
        ({"foo": [1]}, [{"op": "add", "path": "/foo/5", "value": 1}]),
        ({"foo": [1]}, [{"op": "remove", "path": "/foo/01"}]),
        ({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/c"}]),
    ],
)
def test_json_patch_that_does_not_apply(target: Any, ops: list[Any]) -> None:
    with pytest.raises(PatchApplyError):
        json_patch(target, ops)


@pytest.mark.parametrize(
    "ops",
    [
        {"op": "add"},
        [{"op": "frobnicate", "path": "/a"}],
        [{"op": "add", "path": "a", "value": 1}],
        [{"op": "add", "value": 1}],
        [{"op": "add", "path": "/a"}],
        [{"op": "move", "path": "/a"}],
        ["not an op"],
    ],
)
def test_malformed_json_patch(ops: Any) -> None:
    with pytest.raises(PatchError):
        json_patch({"a": 1}, ops)


SCHEMA = {
    "spec.containers": SMPListStrategy("name"),
    "spec.containers[].env": SMPListStrategy("name"),
    "spec.containers[].ports": SMPListStrategy("containerPort"),
    "metadata.finalizers": SMPListStrategy(None),
    "status.conditions": SMPListStrategy("type"),
    "spec.volumes": SMPListStrategy("name", retain_keys=True),
}

POD = {
    "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}, "finalizers": ["x/one", "x/two"]},
    "spec": {
        "containers": [
            {"name": "main", "image": "img:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
             "ports": [{"containerPort": 80}]},
            {"name": "side", "image": "side:1"},
        ],
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "volumes": [{"name": "v", "emptyDir": {}}],
    },
    "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]},
}


def smp(patch: dict[str, Any]) -> Any:
    before = copy.deepcopy(POD)
    out = strategic_merge_patch(POD, patch, schema=SCHEMA)
    assert POD == before
    return out


def test_smp_merges_lists_by_key() -> None:
    out = smp({"spec": {"containers": [{"name": "main", "image": "img:2", "env": [{"name": "C", "value": "3"}]}]}})
    main, side = out["spec"]["containers"]
    assert main["image"] == "img:2"
    assert [e["name"] for e in main["env"]] == ["A", "B", "C"]
    assert main["ports"] == [{"containerPort": 80}]
    assert side == {"name": "side", "image": "side:1"}


def test_smp_replaces_lists_without_strategy() -> None:
    out = smp({"spec": {"tolerations": [{"key": "other", "operator": "Exists"}]}})
    assert out["spec"]["tolerations"] == [{"key": "other", "operator": "Exists"}]


def test_smp_delete_directives() -> None:
    out = smp({
        "spec": {"containers": [{"name": "side", "$patch": "delete"}]},
        "metadata": {"labels": {"a": None}, "$deleteFromPrimitiveList/finalizers": ["x/one"]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
    assert [c["name"] for c in out["spec"]["containers"]] == ["main"]
    assert out["metadata"]["labels"] == {"b": "2"}
    assert out["metadata"]["finalizers"] == ["x/two"]
    assert out["status"]["conditions"][0] == {"type": "Ready", "status": "True"}
    assert len(out["status"]["conditions"]) == 2


def test_smp_primitive_list_merges_as_a_set() -> None:
    out = smp({"metadata": {"finalizers": ["x/two", "x/three"]}})
    assert out["metadata"]["finalizers"] == ["x/one", "x/two", "x/three"]


def test_smp_set_element_order_and_replace() -> None:
    out = smp({"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "main"}],
                        "containers": [{"name": "side", "image": "side:2"}]}})
    assert [c["name"] for c in out["spec"]["containers"]] == ["side", "main"]
    assert out["spec"]["containers"][0]["image"] == "side:2"
    assert not any(k.startswith("$") for k in out["spec"])
    out = smp({"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}})
    assert out["spec"]["containers"] == [{"name": "only", "image": "x"}]
    out = smp({"spec": {"$patch": "replace", "containers": [{"name": "n", "image": "i"}]}})
    assert out["spec"] == {"containers": [{"name": "n", "image": "i"}]}


def test_smp_retain_keys() -> None:
    out = smp({"spec": {"volumes": [{"name": "v", "hostPath": {"path": "/x"}, "$retainKeys": ["name", "hostPath"]}]}})
    assert out["spec"]["volumes"] == [{"name": "v", "hostPath": {"path": "/x"}}]


def test_smp_errors() -> None:
    with pytest.raises(PatchError):
        strategic_merge_patch(POD, ["not", "a", "map"], schema=SCHEMA)
    with pytest.raises(PatchError):
        strategic_merge_patch(POD, {"spec": {"containers": [{"image": "no-name"}]}}, schema=SCHEMA)
    with pytest.raises(PatchError):
        strategic_merge_patch(POD, {"spec": {"$patch": "explode"}}, schema=SCHEMA)


def test_apply_patch_dispatch() -> None:
    def apply(target: Any, patch: Any, ct: str) -> Any:
        return apply_patch(target, patch, content_type=ct, schema=None)

    assert apply({"a": 1}, {"b": 2}, "application/merge-patch+json") == {"a": 1, "b": 2}
    assert apply({"a": 1}, [{"op": "remove", "path": "/a"}], "application/json-patch+json") == {}
    with pytest.raises(PatchError):
        apply({"a": 1}, {"b": 2}, "application/strategic-merge-patch+json")
    with pytest.raises(PatchError):
        apply({"a": 1}, [1], "application/merge-patch+json")
