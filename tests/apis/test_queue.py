"""Queue validation: the example validates; every bad spec names its field; hostile sizes stay bounded;
the CRD agrees; the Table cells render resource maps."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from federator.apis.crd import KINDS, crd
from federator.apis.queue import (
    MAX_GPU_MODELS,
    MAX_NAMESPACE_NAMES,
    Queue,
    resources_text,
    validate_queue,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "queues.yaml"


def example_queues() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(EXAMPLES.read_text()) if d["kind"] == "Queue"]


def queue() -> dict[str, Any]:
    return copy.deepcopy(example_queues()[0])


def test_the_examples_validate_unchanged() -> None:
    for obj in example_queues():
        before = copy.deepcopy(obj)
        assert validate_queue(obj) == [], obj["metadata"]["name"]
        assert obj == before
    parsed = Queue.model_validate(queue())
    assert parsed.spec.quota is not None and parsed.spec.quota.gpus == {"A100": 64, "H100": 16}
    assert parsed.spec.is_default and parsed.spec.weight == 2
    minimal = {"apiVersion": "federator.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "q"},
               "spec": {"namespaces": {"selector": {}}}}
    spec = Queue.model_validate(minimal).spec
    assert (spec.weight, spec.is_default, spec.quota, spec.cohort) == (1.0, False, None, None)


Edit = Callable[[dict[str, Any]], None]


@pytest.mark.parametrize(("edit", "path", "words"), [
    (lambda q: q["spec"]["quota"]["gpus"].update(A100=-1), "spec.quota.gpus[A100]", "greater than or equal to 0"),
    (lambda q: q["spec"]["quota"]["gpus"].update(A100=1.5), "spec.quota.gpus[A100]", "integer"),
    (lambda q: q["spec"]["quota"]["gpus"].update(A100="8"), "spec.quota.gpus[A100]", "integer"),
    (lambda q: q["spec"]["quota"]["gpus"].update(A100=10**30), "spec.quota.gpus[A100]", "less than or equal"),
    (lambda q: q["spec"]["quota"]["gpus"].update({"bad model!": 1}), "spec.quota.gpus[bad model!]", "regular"),
    (lambda q: q["spec"]["quota"].update(cpu="-4"), "spec.quota.cpu", "greater than or equal to 0"),
    (lambda q: q["spec"]["quota"].update(memory="lots"), "spec.quota.memory", "Invalid value"),
    (lambda q: q["spec"]["quota"].update(tpus=4), "spec.quota.tpus", "Forbidden"),
    (lambda q: q["spec"]["borrowingLimit"]["gpus"].update(H100=-2), "spec.borrowingLimit.gpus[H100]",
     "greater than or equal to 0"),
    (lambda q: q["spec"].pop("cohort"), "spec.borrowingLimit", "may only be set together with spec.cohort"),
    (lambda q: q["spec"].update(cohort="Research Team"), "spec.cohort", "RFC 1123"),
    (lambda q: q["spec"].update(weight=0), "spec.weight", "greater than 0"),
    (lambda q: q["spec"].update(weight=-1.5), "spec.weight", "greater than 0"),
    (lambda q: q["spec"].update(weight="2"), "spec.weight", "number"),
    (lambda q: q["spec"].update(weight=1e12), "spec.weight", "less than or equal"),
    (lambda q: q["spec"]["preemption"].update(withinQueue="Sometimes"), "spec.preemption.withinQueue",
     "Unsupported value"),
    (lambda q: q["spec"]["preemption"].update(reclaimBorrowed="yes"), "spec.preemption.reclaimBorrowed", "boolean"),
    (lambda q: q["spec"].update(default="true"), "spec.default", "boolean"),
    (lambda q: q["spec"].pop("namespaces"), "spec.namespaces", "Required value"),
    (lambda q: q["spec"].update(namespaces={}), "spec.namespaces", "names, selector, or both"),
    (lambda q: q["spec"]["namespaces"].update(names=["vision", "vision"]), "spec.namespaces.names[1]",
     "Duplicate value"),
    (lambda q: q["spec"]["namespaces"].update(names=["Not_A_Namespace"]), "spec.namespaces.names[0]", "RFC 1123"),
    (lambda q: q["spec"]["namespaces"].update(selector={"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "Near", "values": ["x"]}]}),
     "spec.namespaces.selector.matchExpressions[0].operator", "Unsupported value"),
    (lambda q: q["spec"]["namespaces"].update(selector={"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In"}]}),
     "spec.namespaces.selector.matchExpressions[0].values", "Required value"),
    (lambda q: q["spec"]["namespaces"].update(selector={"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["not a value"]}]}),
     "spec.namespaces.selector.matchExpressions[0].values[0]", "a valid label"),
    (lambda q: q["spec"]["namespaces"].update(selector={"matchLabels": {"bad key!": "x"}}),
     "spec.namespaces.selector.matchLabels[bad key!]", "Invalid value"),
    (lambda q: q["spec"]["namespaces"].update(selector="team=a"), "spec.namespaces.selector", "object"),
    (lambda q: q["spec"].update(tiers=[{"name": "on-prem", "clusterSelector": {"matchLabels": {"tier": "a"},
                                                                    "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}}]),
     "spec.tiers[0].clusterSelector", "selects no cluster"),
    (lambda q: q["spec"].update(tiers=[{"name": "x", "clusterSelector": {"matchExpressions": [
        {"key": "spot", "operator": "Exists"}, {"key": "spot", "operator": "DoesNotExist"}]}}]),
     "spec.tiers[0].clusterSelector", "both exist and not exist"),
    (lambda q: q["spec"].update(tiers=[{"name": "x", "clusterSelector": {"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["a"]}, {"key": "zone", "operator": "In", "values": ["b"]}]}}]),
     "spec.tiers[0].clusterSelector", "no value of label 'zone'"),
    (lambda q: q["spec"].update(tiers=[{"name": "x"}]), "spec.tiers[0].clusterSelector", "Required value"),
    (lambda q: q["spec"].update(tiers=[{"name": "x", "clusterSelector": {}, "spillAfterSeconds": -5}]),
     "spec.tiers[0].spillAfterSeconds", "greater than or equal to 0"),
    (lambda q: q["spec"].update(tiers=[{"name": "x", "clusterSelector": {}, "spillAfterSeconds": "5m"}]),
     "spec.tiers[0].spillAfterSeconds", "integer"),
    (lambda q: q["spec"].update(tiers=[{"name": "x", "clusterSelector": {}, "spillAfterSeconds": 10**9}]),
     "spec.tiers[0].spillAfterSeconds", "less than or equal"),
    (lambda q: q["spec"].update(tiers=[{"name": "x", "clusterSelector": {}}, {"name": "x", "clusterSelector": {}}]),
     "spec.tiers[1].name", "Duplicate value"),
    (lambda q: q["spec"].update(tiers=[{"name": f"t{i}", "clusterSelector": {}} for i in range(6)]),
     "spec.tiers", "at most 5"),
    (lambda q: q["spec"].update(tiers=[{"name": "On Prem", "clusterSelector": {}}]), "spec.tiers[0].name", "RFC 1123"),
    (lambda q: q["spec"].update(tiers="on-prem,cloud"), "spec.tiers", "array"),
    (lambda q: q["spec"].update(budget={"amount": -1, "currency": "USD"}), "spec.budget.amount",
     "greater than or equal to 0"),
    (lambda q: q["spec"].update(budget={"amount": "-1500.00", "currency": "USD"}), "spec.budget.amount",
     "greater than or equal to 0"),
    (lambda q: q["spec"].update(budget={"amount": "1500.001", "currency": "USD"}), "spec.budget.amount",
     "at most 2 decimals"),
    (lambda q: q["spec"].update(budget={"amount": "1,500", "currency": "USD"}), "spec.budget.amount",
     "not an amount"),
    (lambda q: q["spec"].update(budget={"amount": "1e3", "currency": "USD"}), "spec.budget.amount", "not an amount"),
    (lambda q: q["spec"].update(budget={"amount": 1500.5, "currency": "USD"}), "spec.budget.amount",
     "write it as a string"),
    (lambda q: q["spec"].update(budget={"amount": True, "currency": "USD"}), "spec.budget.amount", "not a bool"),
    (lambda q: q["spec"].update(budget={"amount": 10**13, "currency": "USD"}), "spec.budget.amount", "at most"),
    (lambda q: q["spec"].update(budget={"amount": "9" * 40, "currency": "USD"}), "spec.budget.amount",
     "not an amount"),
    (lambda q: q["spec"].update(budget={"amount": "100", "currency": "usd"}), "spec.budget.currency",
     "unknown currency format"),
    (lambda q: q["spec"].update(budget={"amount": "100", "currency": "US$"}), "spec.budget.currency",
     "unknown currency format"),
    (lambda q: q["spec"].update(budget={"amount": "100", "currency": "EURO"}), "spec.budget.currency",
     "unknown currency format"),
    (lambda q: q["spec"].update(budget={"amount": "100", "currency": 840}), "spec.budget.currency", "string"),
    (lambda q: q["spec"].update(budget={"amount": "100"}), "spec.budget.currency", "Required value"),
    (lambda q: q["spec"].update(budget={"gpuHours": 10, "currency": "USD"}), "spec.budget.currency", "Forbidden"),
    (lambda q: q["spec"].update(budget={"amount": "100", "currency": "USD", "gpuHours": 10}), "spec.budget",
     "not both"),
    (lambda q: q["spec"].update(budget={}), "spec.budget", "Required value"),
    (lambda q: q["spec"].update(budget={"gpuHours": -5}), "spec.budget.gpuHours", "greater than or equal to 0"),
    (lambda q: q["spec"].update(budget={"gpuHours": "2000"}), "spec.budget.gpuHours", "number"),
    (lambda q: q["spec"].update(budget={"gpuHours": 1e15}), "spec.budget.gpuHours", "less than or equal"),
    (lambda q: q["spec"].update(budget={"dollars": 5}), "spec.budget.dollars", "Forbidden"),
    (lambda q: q["spec"].update(budget="1500 USD"), "spec.budget", "object"),
    (lambda q: q.update(status={"pendingJobs": -1}), "status.pendingJobs", "greater than or equal to 0"),
    (lambda q: q.update(status={"used": {"gpus": {"A100": -3}}}), "status.used.gpus[A100]",
     "greater than or equal to 0"),
    (lambda q: q["metadata"].update(namespace="vision"), "metadata.namespace", "Forbidden"),
    (lambda q: q["metadata"].update(name="Vision.Team"), "metadata.name", "RFC 1123"),
])
def test_every_bad_spec_names_its_field(edit: Edit, path: str, words: str) -> None:
    bad = queue()
    edit(bad)
    errors = validate_queue(bad)
    assert any(p == path and words in message for p, message in errors), errors


@pytest.mark.parametrize("budget", [
    {"amount": "1500.00", "currency": "USD"}, {"amount": 1500, "currency": "EUR"}, {"amount": "0", "currency": "JPY"},
    {"amount": "1000000000000", "currency": "USD"}, {"gpuHours": 2000}, {"gpuHours": 0.5}, {"gpuHours": 0},
])
def test_good_budgets_validate_unchanged(budget: dict[str, Any]) -> None:
    good = queue()
    good["spec"]["budget"] = copy.deepcopy(budget)
    assert validate_queue(good) == []
    assert good["spec"]["budget"] == budget
    validator = jsonschema.Draft4Validator(crd("Queue")["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    assert list(validator.iter_errors(good)) == []


def test_too_many_models_or_namespaces_are_refused() -> None:
    many = queue()
    many["spec"]["quota"]["gpus"] = {f"model-{i}": 1 for i in range(MAX_GPU_MODELS + 1)}
    assert any(p == "spec.quota.gpus" and f"at most {MAX_GPU_MODELS} items" in m for p, m in validate_queue(many))
    crowded = queue()
    crowded["spec"]["namespaces"]["names"] = [f"ns-{i}" for i in range(MAX_NAMESPACE_NAMES + 1)]
    assert any(p == "spec.namespaces.names" for p, _ in validate_queue(crowded))


def test_hostile_input_gives_bounded_errors_and_short_messages() -> None:
    hostile = queue()
    hostile["spec"]["quota"]["gpus"] = {("x" * 10_000) + str(i): -1 for i in range(5_000)}
    hostile["spec"]["cohort"] = "c" * 100_000
    errors = validate_queue(hostile)
    assert len(errors) <= 101 and errors[-1][1].startswith("Invalid value: too many errors")
    assert max(len(m) for _, m in errors) < 600
    for bad in (None, [], "queue", 7):
        assert validate_queue(bad) == [("", "Invalid value: must be a JSON object")]
    nested = queue()
    nested["spec"]["quota"] = {"gpus": {"A100": {"a": [1, 2, {"b": 3}]}}}
    assert any(p == "spec.quota.gpus[A100]" for p, _ in validate_queue(nested))


def test_the_crd_schema_accepts_the_example_and_has_the_columns() -> None:
    version = crd("Queue")["spec"]["versions"][0]
    assert crd("Queue")["spec"]["scope"] == "Cluster" and version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if "priority" not in c]
    assert columns == ["Quota", "Used", "Borrowed", "Pending", "Admitted", "Budget", "Spent", "Age"]
    validator = jsonschema.Draft4Validator(version["schema"]["openAPIV3Schema"])
    for obj in example_queues():
        assert list(validator.iter_errors(obj)) == []
    bad = queue()
    bad["spec"]["quota"]["gpus"]["A100"] = -1
    bad["spec"]["preemption"]["withinQueue"] = "Sometimes"
    assert len(list(validator.iter_errors(bad))) == 2


def test_table_cells_show_resource_maps_in_one_line() -> None:
    assert resources_text({"gpus": {"H100": 16, "A100": 64}, "cpu": "2048", "memory": "16Ti"}) == \
        "A100=64,H100=16,cpu=2048,memory=16Ti"
    assert resources_text({}) == resources_text("") == resources_text(None) == ""
    assert resources_text({"gpus": {"A100": True, "B": "x" * 100}, "cpu": 4}) == "cpu=4"
    cells = {c.name: c.cell() for c in KINDS["Queue"].columns}
    obj = queue()
    obj["status"] = {"used": {"gpus": {"A100": 70}}, "borrowed": {"gpus": {"A100": 6}}, "pendingJobs": 3,
                     "admittedJobs": 9}
    assert (cells["Quota"](obj), cells["Used"](obj), cells["Borrowed"](obj)) == \
        ("A100=64,H100=16,cpu=2048,memory=16Ti", "A100=70", "A100=6")
    assert (cells["Pending"](obj), cells["Admitted"](obj), cells["Default"](obj)) == (3, 9, True)
    assert cells["Used"](queue()) == ""
    assert cells["Budget"](obj) == cells["Spent"](obj) == ""
    obj["spec"]["budget"] = {"amount": "1500.00", "currency": "USD"}
    obj["status"]["spend"] = {"spent": "1512.403219", "currency": "USD", "gpuHours": 380.54}
    assert (cells["Budget"](obj), cells["Spent"](obj)) == ("1500.00 USD", "1512.40 USD, 380.5 GPU-hours")
    obj["spec"]["budget"] = {"gpuHours": 2000}
    assert cells["Budget"](obj) == "2000 GPU-hours"
    obj["status"]["spend"] = {"spent": "x" * 10_000, "currency": ["USD"], "gpuHours": "many"}
    assert cells["Spent"](obj) == ""
    obj["status"]["spend"] = {"spent": "not-a-number", "currency": "USD"}
    assert cells["Spent"](obj) == ""
