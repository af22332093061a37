"""Label and field selectors: kube's grammar, matching rules and errors."""

from __future__ import annotations

import pytest

from federator.apiserver.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
    path_getter,
    selector_from_dict,
)

LABELS = {"app": "trainer", "tier": "gpu", "team": "vision", "replicas": "8"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=trainer", True),
        ("app==trainer", True),
        ("app=other", False),
        ("app!=other", True),
        ("app!=trainer", False),
        ("missing!=x", True),  # != matches objects without the key
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("tier in (gpu,rdma)", True),
        ("tier in (cpu)", False),
        ("tier notin (cpu,rdma)", True),
        ("tier notin (gpu)", False),
        ("missing notin (a)", True),  # notin matches objects without the key
        ("missing in (a)", False),
        ("app=trainer,tier in (gpu,rdma),!preempted", True),
        ("app=trainer,tier=cpu", False),
        ("replicas>4", True),
        ("replicas<4", False),
        ("app>4", False),  # not an integer label: no match
        ("  app = trainer , team in ( vision ) ", True),
        ("example.com/role", False),
        ("app=", False),
        ("empty=", True),
    ],
)
def test_label_selector_matching(selector: str, matches: bool) -> None:
    labels = dict(LABELS, empty="")
    assert parse_label_selector(selector).matches(labels) is matches


@pytest.mark.parametrize(
    "selector",
    [
        "app=trainer,",  # dangling comma
        "=x",
        "app in gpu",
        "app in ()",
        "app in (a",
        "app notin (a b)",
        "!app=x",
        "app=x=y",
        "app>x",
        "app<",
        "bad key=x",
        "app=has space",
        "-bad=x",
        "UPPER.example.com/x=y",
        "a" * 64 + "=x",
        "app=" + "v" * 64,
        "app=(x)",
    ],
)
def test_label_selector_errors(selector: str) -> None:
    with pytest.raises(SelectorError) as e:
        parse_label_selector(selector)
    assert "unable to parse requirement" in str(e.value)


def test_label_selector_roundtrip_string() -> None:
    sel = parse_label_selector("app=trainer,tier in (rdma,gpu),!x")
    again = parse_label_selector(str(sel))
    assert again == sel


def test_selector_from_dict() -> None:
    sel = selector_from_dict({
        "matchLabels": {"app": "trainer"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["gpu", "rdma"]},
            {"key": "preempted", "operator": "DoesNotExist"},
        ],
    })
    assert sel.matches({"app": "trainer", "tier": "rdma"})
    assert not sel.matches({"app": "trainer", "tier": "rdma", "preempted": "1"})
    assert selector_from_dict(None).matches({})
    with pytest.raises(SelectorError):
        selector_from_dict({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})
    with pytest.raises(SelectorError):
        selector_from_dict({"matchExpressions": [{"key": "a", "operator": "Near"}]})



@pytest.mark.parametrize("spec", [
    {"matchLabels": {"app\n": "trainer"}},
    {"matchLabels": {"app": "trainer\n"}},
    {"matchExpressions": [{"key": "example.com/tier\n", "operator": "Exists"}]},
])
def test_selector_from_dict_refuses_a_trailing_newline(spec: dict[str, object]) -> None:
    with pytest.raises(SelectorError):
        selector_from_dict(spec)


POD = {
    "metadata": {"name": "p1", "namespace": "team-a"},
    "spec": {"nodeName": "node-7", "unschedulable": True},
    "status": {"phase": "Running"},
}
SUPPORTED = {"spec.nodeName": path_getter("spec.nodeName"), "status.phase": path_getter("status.phase"),
             "spec.unschedulable": path_getter("spec.unschedulable")}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("metadata.name=p1", True),
        ("metadata.name==p1", True),
        ("metadata.name!=p1", False),
        ("metadata.namespace=team-a,spec.nodeName=node-7", True),
        ("spec.nodeName=", False),
        ("spec.nodeName!=", True),
        ("status.phase!=Failed,status.phase!=Succeeded", True),
        ("spec.unschedulable=true", True),
        ("spec.unschedulable=false", False),
    ],
)
def test_field_selector_matching(selector: str, matches: bool) -> None:
    assert parse_field_selector(selector, SUPPORTED).matches(POD) is matches


def test_field_selector_escapes() -> None:
    obj = {"metadata": {"name": "a,b=c"}}
    assert parse_field_selector(r"metadata.name=a\,b\=c").matches(obj)
    with pytest.raises(SelectorError):
        parse_field_selector(r"metadata.name=a\qb")
    with pytest.raises(SelectorError):
        parse_field_selector("metadata.name=a=b")


def test_unknown_field_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(SelectorError) as e:
        parse_field_selector("foo.bar=baz", resource="ingresses")
    message = str(e.value)
    assert '"foo.bar" is not a known field selector' in message
    assert 'only "metadata.name", "metadata.namespace"' in message
    with pytest.raises(SelectorError):
        parse_field_selector("nonsense")


def test_single_value_narrowing() -> None:
    sel = parse_field_selector("metadata.name=p1,status.phase!=Failed", SUPPORTED)
    assert sel.single_value("metadata.name") == "p1"
    assert sel.single_value("status.phase") is None
