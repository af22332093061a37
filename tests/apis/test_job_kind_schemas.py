"""The upstream job kinds' schemas and Trainer's runtimes' (federator/apis/jobkinds/*.json) are what scripts/gen_job_kind_schemas.py
extracts from the pinned sources in the Go module cache (CRDs, and kube's OpenAPI document for batch/v1 Job), and
its kube OpenAPI inliner makes one structural schema."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from federator.apis.jobkinds.base import load_upstream_schema

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_job_kind_schemas.py"
SCHEMA_DIR = ROOT / "federator" / "apis" / "jobkinds"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_job_kind_schemas", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_each_committed_schema_cites_its_pinned_source() -> None:
    files = sorted(SCHEMA_DIR.glob("*.json"))
    rows = {row.kind: row for row in script().UPSTREAM_KINDS}
    assert {f.name for f in files} == {"pytorchjobs.json", "tfjobs.json", "paddlejobs.json", "mpijobs.json",
                                       "jobsets.json", "trainjobs.json", "jobs.json", "clustertrainingruntimes.json",
                                       "trainingruntimes.json"}
    kinds = set()
    for path in files:
        data = load_upstream_schema(path.name)
        row = rows[data["kind"]]
        kinds.add(data["kind"])
        assert data["source"].startswith(f"{row.module}@{row.version} {row.crd_path}: "), path
        assert "@v" in data["source"] and (".yaml" in data["source"]) == (row.openapi_root is None), path
        assert data["generator"] == "scripts/gen_job_kind_schemas.py"
        assert data["version"] == row.served_version
        assert data["schema"]["type"] == "object" and "spec" in data["schema"]["properties"]
        assert path.name == f"{data['plural']}.json"
    assert kinds == set(rows)
    assert json.loads((SCHEMA_DIR / "jobs.json").read_text())["source"].startswith(
        "k8s.io/kubernetes@v1.36.3 api/openapi-spec/v3/apis__batch__v1_openapi.json")


def test_a_missing_schema_file_is_an_error() -> None:
    with pytest.raises(FileNotFoundError):
        load_upstream_schema("nosuchjobs.json")


@pytest.mark.skipif(shutil.which("go") is None, reason="needs go (the sources are read from the Go module cache)")
def test_the_committed_schemas_are_what_the_generator_makes() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=900)
    if result.returncode == 2 and "module unavailable" in result.stderr:
        pytest.skip(result.stderr.strip())
    assert result.returncode == 0, result.stderr


def test_an_unknown_kind_is_refused() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--check", "NoSuchJob"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "unknown kind(s) NoSuchJob" in result.stderr


def test_references_are_inlined_and_kube_types_made_structural() -> None:
    document = {"components": {"schemas": {
        "Root": {"type": "object", "properties": {
            "metadata": {"allOf": [{"$ref": "#/components/schemas/Meta"}], "default": {}},
            "spec": {"allOf": [{"$ref": "#/components/schemas/Spec"}], "description": "the spec", "default": {}}}},
        "Meta": {"type": "object", "properties": {"name": {"type": "string"}}},
        "Spec": {"type": "object", "properties": {
            "size": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"},
            "port": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Meta"},
                      "x-kubernetes-patch-merge-key": "name"}}},
    }}}
    schema = script().kube_object_schema(document, "Root")
    assert schema["properties"]["metadata"] == {"type": "object"}
    spec = schema["properties"]["spec"]
    assert spec["description"] == "the spec" and "default" not in spec
    assert spec["properties"]["size"]["x-kubernetes-int-or-string"] is True
    assert spec["properties"]["port"] == {"anyOf": [{"type": "integer"}, {"type": "string"}],
                                          "x-kubernetes-int-or-string": True}
    assert spec["properties"]["items"] == {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}}}}
    assert "$ref" not in json.dumps(schema)


def test_a_recursive_schema_is_refused() -> None:
    document = {"components": {"schemas": {
        "A": {"type": "object", "properties": {"b": {"$ref": "#/components/schemas/B"}}},
        "B": {"type": "object", "properties": {"a": {"$ref": "#/components/schemas/A"}}}}}}
    with pytest.raises(SystemExit, match="recursive reference A -> B -> A"):
        script().kube_object_schema(document, "A")
