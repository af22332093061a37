"""PriorityClass validation (kube's rules) and priority resolution (kube's Priority admission plugin), pure."""

from __future__ import annotations

from typing import Any

import pytest

from federator.apis.priorityclass import (
    HIGHEST_USER_DEFINABLE_PRIORITY,
    PriorityResolution,
    default_conflict,
    default_priority_class,
    priorityclass_defaults,
    priorityclass_update_validator,
    resolve_priority,
    validate_priorityclass,
)


def pc(name: str, value: Any = 1000, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, **fields}


def test_what_kubectl_create_priorityclass_sends_validates() -> None:
    sent = pc("high", 1000, globalDefault=False, description="", preemptionPolicy="PreemptLowerPriority")
    assert validate_priorityclass(sent) == []
    assert validate_priorityclass(pc("low", -5, preemptionPolicy="Never")) == []
    assert validate_priorityclass(pc("system-node-critical", 2_000_001_000)) == []
    assert validate_priorityclass(pc("top", HIGHEST_USER_DEFINABLE_PRIORITY)) == []


@pytest.mark.parametrize(("obj", "path", "words"), [
    (pc("x", HIGHEST_USER_DEFINABLE_PRIORITY + 1), "value", "maximum allowed value of a user defined priority"),
    (pc("x", 2**31), "value", "less than or equal to"),
    (pc("x", "1000"), "value", "integer"),
    (pc("x", 1.5), "value", "integer"),
    ({k: v for k, v in pc("x").items() if k != "value"}, "value", "Required value"),
    (pc("x", preemptionPolicy="Sometimes"), "preemptionPolicy", "Unsupported value"),
    (pc("x", globalDefault="yes"), "globalDefault", "boolean"),
    (pc("x", description="d" * 40_000), "description", "at most 32768 characters"),
    (pc("x", spec={"value": 1}), "spec", "Forbidden"),
    (pc("system-mine", 10), "metadata.name", "reserved for system use only. error: system-mine is not a known"),
    # kube's IsKnownSystemPriorityClass, reported on metadata.name
    (pc("system-node-critical", 10), "metadata.name", "error: value of system-node-critical PriorityClass must be "
                                                      "2000001000"),
    (pc("system-node-critical", 2_000_001_000, globalDefault=True), "metadata.name",
     "error: globalDefault of system-node-critical PriorityClass must be false"),
])
def test_bad_classes_name_their_field(obj: dict[str, Any], path: str, words: str) -> None:
    errors = validate_priorityclass(obj)
    assert any(p == path and words in m for p, m in errors), errors


def test_value_and_preemption_policy_are_immutable() -> None:
    validate = priorityclass_update_validator()
    old = pc("high", 1000, preemptionPolicy="Never")
    assert validate(pc("high", 1000, preemptionPolicy="Never", description="new words"), old) == []
    assert validate(pc("high", 1001, preemptionPolicy="Never"), old) == [
        ("value", "Forbidden: may not be changed in an update.")]
    # kube's ValidateImmutableField: Invalid, echoing the new value
    assert validate(pc("high", 1000, preemptionPolicy="PreemptLowerPriority"), old) == [
        ("preemptionPolicy", 'Invalid value: "PreemptLowerPriority": field is immutable')]


def test_defaults_are_what_kube_apiserver_stores() -> None:
    """SetDefaults_PriorityClass, and decoding into the Go type: an absent value is 0, false is omitted."""
    sent: dict[str, Any] = {"metadata": {"name": "x"}, "globalDefault": False}
    priorityclass_defaults(sent)
    assert sent == {"metadata": {"name": "x"}, "value": 0, "preemptionPolicy": "PreemptLowerPriority"}
    kept = pc("y", 5, preemptionPolicy="Never", globalDefault=True)
    priorityclass_defaults(kept)
    assert kept == pc("y", 5, preemptionPolicy="Never", globalDefault=True)


CLASSES = [pc("high", 1000), pc("low", 10, globalDefault=True), pc("zero", 0)]


@pytest.mark.parametrize(("spec", "classes", "expected"), [
    ({"priorityClassName": "high"}, CLASSES, PriorityResolution(priority=1000, class_name="high")),
    ({"priorityClassName": "high", "priority": 1000}, CLASSES, PriorityResolution(priority=1000, class_name="high")),
    ({}, CLASSES, PriorityResolution(priority=10, class_name="low")),
    ({}, [pc("high", 1000)], PriorityResolution(priority=0)),
    ({}, [], PriorityResolution(priority=0)),
    # an explicit priority without a class is the job's own (it predates classes)
    ({"priority": 50}, CLASSES, PriorityResolution(priority=50)),
    ({"priorityClassName": "zero"}, CLASSES, PriorityResolution(priority=0, class_name="zero")),
])
def test_resolution(spec: dict[str, Any], classes: list[dict[str, Any]], expected: PriorityResolution) -> None:
    assert resolve_priority(spec, classes) == expected


def test_unknown_classes_and_contradictions_are_refused_naming_the_field() -> None:
    missing = resolve_priority({"priorityClassName": "urgent"}, CLASSES)
    assert (missing.field, missing.error) == ("spec.priorityClassName", "no PriorityClass with name urgent was found")
    clash = resolve_priority({"priorityClassName": "high", "priority": 5}, CLASSES)
    assert clash.field == "spec.priority" and "(5)" in clash.error and "computed 1000" in clash.error
    malformed = resolve_priority({"priorityClassName": "broken"}, [pc("broken", "NaN")])
    assert malformed.field == "spec.priorityClassName"


def test_several_defaults_resolve_to_the_lowest_value_and_a_second_default_is_a_conflict() -> None:
    classes = [pc("b", 300, globalDefault=True), pc("a", 200, globalDefault=True), pc("c", 100)]
    chosen = default_priority_class(classes)
    assert chosen is not None and chosen["metadata"]["name"] == "a"
    assert default_priority_class([pc("c", 100), pc("d", 1, globalDefault="true")]) is None
    # kube names the default getDefaultPriorityClass picks (the lowest value), and lets that class itself be
    # updated; any other class marked default is refused, on create and on update
    assert default_conflict(pc("new", 5, globalDefault=True), classes) == \
        "PriorityClass a is already marked as default. Only one default can exist"
    assert default_conflict(pc("a", 200, globalDefault=True, description="x"), classes) is None
    assert default_conflict(pc("b", 300, globalDefault=True), classes) == \
        "PriorityClass a is already marked as default. Only one default can exist"
    assert default_conflict(pc("b", 300, globalDefault=True), [pc("b", 300, globalDefault=True)]) is None
    assert default_conflict(pc("new", 5), classes) is None


POD_CLASSES = [pc("high", 1000), pc("polite", 500, preemptionPolicy="Never"), pc("low", 10, globalDefault=True)]


@pytest.mark.parametrize(("spec", "classes", "expected"), [
    ({"priorityClassName": "polite"}, POD_CLASSES,
     PriorityResolution(priority=500, class_name="polite", preemption_policy="Never")),
    ({}, POD_CLASSES, PriorityResolution(priority=10, class_name="low")),
    ({"priorityClassName": ""}, [pc("polite", 500, preemptionPolicy="Never", globalDefault=True)],
     PriorityResolution(priority=500, class_name="polite", preemption_policy="Never")),
    ({"priority": 0}, [], PriorityResolution(priority=0)),
    ({"priority": "7", "preemptionPolicy": 3}, [], PriorityResolution(priority=0)),  # wrong types: validation's
])
def test_pod_resolution(spec: dict[str, Any], classes: list[dict[str, Any]], expected: PriorityResolution) -> None:
    assert resolve_priority(spec, classes, subject="pod") == expected


@pytest.mark.parametrize(("spec", "field", "message"), [
    ({"priority": 7}, "spec.priority",
     "the integer value of priority (7) must not be provided in pod spec; priority admission controller computed "
     "10 from the given PriorityClass name"),
    ({"priorityClassName": "high", "priority": 7}, "spec.priority",
     "the integer value of priority (7) must not be provided in pod spec; priority admission controller computed "
     "1000 from the given PriorityClass name"),
    ({"priorityClassName": "polite", "preemptionPolicy": "PreemptLowerPriority"}, "spec.preemptionPolicy",
     "the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided in pod spec; priority "
     "admission controller computed Never from the given PriorityClass name"),
    ({"priorityClassName": "x" * 100_000}, "spec.priorityClassName",
     f"no PriorityClass with name {'x' * 253}... was found"),
])
def test_pod_refusals_are_kubes(spec: dict[str, Any], field: str, message: str) -> None:
    """A pod, unlike a job, may not state a priority its (default) class does not give."""
    assert resolve_priority(spec, POD_CLASSES, subject="pod") == PriorityResolution(error=message, field=field)
