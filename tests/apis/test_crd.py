"""crds/ matches the models, the schemas are structural, and they accept and reject what the models do."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from federator.apis import crd as crdgen
from federator.apis.crd import KINDS, crd, crd_filename, openapi_schema, render_crd, to_yaml

from .test_membercluster import registration
from .test_trainingjob import example

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_committed_crd_matches_the_models(kind: str) -> None:
    path = CRDS / crd_filename(kind)
    assert path.is_file(), f"{path} is missing: run python -m federator.apis.crd --write crds/"
    assert path.read_text() == render_crd(kind), (
        f"{path} drifted from federator/apis: run python -m federator.apis.crd --write crds/"
    )
    assert yaml.safe_load(path.read_text()) == crd(kind)


def test_check_command_detects_drift(tmp_path: Path) -> None:
    assert crdgen.main(["--write", str(tmp_path)]) == 0
    assert crdgen.main(["--check", str(tmp_path)]) == 0
    target = tmp_path / crd_filename("TrainingJob")
    target.write_text(target.read_text().replace('"Phase"', '"State"'))
    assert crdgen.main(["--check", str(tmp_path)]) == 1
    target.unlink()
    assert crdgen.main(["--check", str(tmp_path)]) == 1


def test_generator_runs_as_a_module(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "federator.apis.crd", "--check", str(CRDS)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr


def _nodes(schema: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(schema, dict):
        return
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], f"{path}[*]")
    if "items" in schema:
        yield from _nodes(schema["items"], f"{path}[]")


_ALLOWED_KEYS = {
    "type", "description", "properties", "additionalProperties", "items", "required", "enum", "default",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems",
    "maxItems", "minProperties", "maxProperties", "pattern", "format", "nullable", "anyOf", "oneOf",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-preserve-unknown-fields",
}


def structural_problems(schema: dict[str, Any]) -> list[str]:
    """The rules of https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
    custom-resource-definitions/#specifying-a-structural-schema, plus what CRD validation forbids."""
    problems: list[str] = []
    for path, node in _nodes(schema):
        where = path or "<root>"
        unknown = set(node) - _ALLOWED_KEYS
        if unknown:
            problems.append(f"{where}: keywords not allowed in a CRD schema: {sorted(unknown)}")
        if "type" not in node and not node.get("x-kubernetes-int-or-string") and not node.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            problems.append(f"{where}: no type")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{where}: properties and additionalProperties together")
        if node.get("additionalProperties") is False or node.get("additionalProperties") is True:
            problems.append(f"{where}: additionalProperties must be a schema")
        if "anyOf" in node:
            if not node.get("x-kubernetes-int-or-string") or node["anyOf"] != [
                {"type": "integer"}, {"type": "string"}
            ]:
                problems.append(f"{where}: anyOf other than the int-or-string pattern")
        if "oneOf" in node and any(set(branch) != {"required"} for branch in node["oneOf"]):
            # a value validation: its branches may not carry types, descriptions or defaults
            problems.append(f"{where}: oneOf other than a choice of required fields")
        if node.get("x-kubernetes-list-type") == "map":
            item = node.get("items", {})
            for key in node.get("x-kubernetes-list-map-keys", []):
                if key not in item.get("required", []) and "default" not in item.get("properties", {}).get(key, {}):
                    problems.append(f"{where}: list-map key {key} must be required or defaulted")
        if node.get("x-kubernetes-list-type") == "set" and node.get("items", {}).get("type") not in (
            "string", "integer", "number", "boolean"
        ):
            problems.append(f"{where}: a set list must hold scalars")
        if "enum" in node and any(not isinstance(v, str | int | float | bool) for v in node["enum"]):
            problems.append(f"{where}: non-scalar enum")
        if isinstance(node.get("exclusiveMinimum"), int | float) and not isinstance(node["exclusiveMinimum"], bool):
            problems.append(f"{where}: exclusiveMinimum must be a boolean in OpenAPI v3.0")
    if schema.get("type") != "object":
        problems.append("<root>: must be an object")
    if schema.get("properties", {}).get("metadata") != {"type": "object"}:
        problems.append("<root>.metadata: may only be {type: object}")
    return problems


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_schemas_are_structural(kind: str) -> None:
    schema = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "$ref" not in to_yaml(schema) and "$defs" not in to_yaml(schema)
    assert "null" not in to_yaml(schema)
    assert structural_problems(schema) == []


def test_checker_catches_non_structural_schemas() -> None:
    bad = {"type": "object", "properties": {
        "metadata": {"type": "object"},
        "a": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "b": {"$ref": "#/$defs/B"},
        "c": {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False},
    }}
    problems = structural_problems(bad)
    assert any(".a: no type" in p for p in problems)
    assert any(".b: keywords not allowed" in p for p in problems)
    assert any(".c: properties and additionalProperties" in p for p in problems)


def test_crd_shape() -> None:
    tj = crd("TrainingJob")
    assert tj["metadata"]["name"] == "trainingjobs.federator.dev"
    spec = tj["spec"]
    assert spec["scope"] == "Namespaced" and spec["names"]["shortNames"] == ["tj"]
    version = spec["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert [c["name"] for c in version["additionalPrinterColumns"] if "priority" not in c] == [
        "Phase", "Cluster", "Age"
    ]
    assert columns["Cluster"]["jsonPath"] == ".status.placement.cluster"
    assert columns["Age"]["type"] == "date"
    roles = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["roles"]
    assert roles["x-kubernetes-list-type"] == "map" and roles["x-kubernetes-list-map-keys"] == ["name"]
    cpu = roles["items"]["properties"]["template"]["properties"]["resources"]["properties"]["cpu"]
    assert cpu["x-kubernetes-int-or-string"] is True

    mc = crd("MemberCluster")
    assert mc["spec"]["scope"] == "Cluster"
    mc_columns = [c["name"] for c in mc["spec"]["versions"][0]["additionalPrinterColumns"] if "priority" not in c]
    assert mc_columns == ["Ready", "Lost", "Fabric", "GPUs", "Age"]
    labels = mc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["labels"]
    assert labels["type"] == "object" and labels["additionalProperties"]["type"] == "string"


def test_openapi_schema_carries_the_gvk() -> None:
    schema = openapi_schema("TrainingJob")
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "federator.dev", "kind": "TrainingJob", "version": "v1alpha1"}
    ]
    assert "spec" in schema["properties"] and "status" in schema["properties"]
    assert structural_problems({k: v for k, v in schema.items() if k != "x-kubernetes-group-version-kind"}) == []


def _crd_validator(kind: str) -> jsonschema.Draft4Validator:
    # OpenAPI v3.0 schemas use draft-4 semantics (boolean exclusiveMinimum); x-kubernetes-* are ignored.
    return jsonschema.Draft4Validator(crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def test_crd_schema_accepts_what_the_models_accept() -> None:
    assert list(_crd_validator("TrainingJob").iter_errors(example())) == []
    assert list(_crd_validator("MemberCluster").iter_errors(registration())) == []


@pytest.mark.parametrize(("edit", "where"), [
    (lambda j: j["spec"]["roles"][0].update(replicas=0), "replicas"),
    (lambda j: j["spec"]["placement"].update(network="carrier-pigeon"), "network"),
    (lambda j: j["spec"].update(priority="high"), "priority"),
    (lambda j: j["spec"]["roles"][0].update(name="PS_1"), "name"),
    (lambda j: j["spec"]["roles"][0]["template"].pop("image"), "image"),
    (lambda j: j["spec"]["roles"][0]["template"]["resources"].update(memory="lots"), "memory"),
])
def test_crd_schema_rejects_what_the_models_reject(edit: Any, where: str) -> None:
    from federator.apis.trainingjob import validate_trainingjob

    job = copy.deepcopy(example())
    edit(job)
    assert validate_trainingjob(job) != []
    errors = list(_crd_validator("TrainingJob").iter_errors(job))
    assert errors, f"the CRD schema accepted a bad {where}"


def test_yaml_writer_round_trips_awkward_strings() -> None:
    document = {"a": "yes", "no": "null", "k": ["", "x: y", "#c", "multi\nline", "ünï"], "e": {}, "l": [],
                "n": 1.5, "b": False, "z": None, "nested": [{"p": 1, "q": [1, 2]}, [3, 4]]}
    assert yaml.safe_load(to_yaml(document)) == document
