"""scripts/gen_job_kind_schemas_extra.py: the committed JobSet, TrainJob and batch Job schemas are what it extracts
from the pinned upstream sources, and its kube OpenAPI inliner makes one structural schema."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "gen_job_kind_schemas_extra.py"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_job_kind_schemas_extra", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_each_file_cites_its_pinned_source() -> None:
    sources = {}
    for name in ("jobsets.json", "trainjobs.json", "jobs.json"):
        data = json.loads((ROOT / "federator" / "apis" / "jobkinds" / name).read_text())
        assert data["generator"] == "scripts/gen_job_kind_schemas_extra.py"
        assert data["schema"]["type"] == "object" and "spec" in data["schema"]["properties"]
        sources[data["kind"]] = data["source"]
    assert sources["JobSet"].startswith("sigs.k8s.io/jobset@v0.10.1 config/components/crd/bases/"
                                        "jobset.x-k8s.io_jobsets.yaml")
    assert sources["TrainJob"].startswith("github.com/kubeflow/trainer/v2@v2.0.0 manifests/base/crds/"
                                          "trainer.kubeflow.org_trainjobs.yaml")
    assert sources["Job"].startswith("k8s.io/kubernetes@v1.36.3 api/openapi-spec/v3/apis__batch__v1_openapi.json")


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


@pytest.mark.skipif(shutil.which("go") is None, reason="needs go (the sources are read from the Go module cache)")
def test_the_committed_schemas_are_what_the_generator_makes() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
