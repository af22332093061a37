#!/usr/bin/env python3
"""Extract the upstream OpenAPI v3 schemas of JobSet, Trainer's TrainJob and batch/v1 Job (issue 28) into
federator/apis/jobkinds/<plural>.json, in the format of scripts/gen_job_kind_schemas.py (source, generator, group,
version, kind, plural, singular, shortNames, schema), so `base.load_upstream_schema` reads them alike.

Sources, each pinned and read from the Go module cache (`go mod download -json <module>@<version>` fetches them
through the Go module proxy):

- JobSet: sigs.k8s.io/jobset@v0.10.1 config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml, version v1alpha2
- TrainJob: github.com/kubeflow/trainer/v2@v2.0.0 manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml,
  version v1alpha1
- Job: k8s.io/kubernetes@<the release in e2e/kube/tools/go.mod> api/openapi-spec/v3/apis__batch__v1_openapi.json,
  the closure of io.k8s.api.batch.v1.Job with every $ref inlined into one structural schema as a CRD would
  publish it (metadata: {type: object} at the top; Quantity and IntOrString as x-kubernetes-int-or-string;
  FieldsV1 and RawExtension free-form; defaults and patch hints dropped)

Descriptions inside pod templates are dropped, as scripts/gen_job_kind_schemas.py does.

    python scripts/gen_job_kind_schemas_extra.py            # write the files
    python scripts/gen_job_kind_schemas_extra.py --check    # exit 1 if a committed file differs

`extract_schema(crd_yaml_path, version)` and `kube_object_schema(openapi_document, root)` are the two extractors,
for folding into the shared script.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "federator" / "apis" / "jobkinds"
GO_MOD = ROOT / "e2e" / "kube" / "tools" / "go.mod"
GENERATOR = "scripts/gen_job_kind_schemas_extra.py"
_PREFIX = "#/components/schemas/"


@dataclass(frozen=True)
class CrdKind:
    kind: str
    module: str
    version: str
    crd_path: str
    served_version: str

    @property
    def upstream(self) -> str:
        return f"{self.module}@{self.version} {self.crd_path}"


CRD_KINDS: tuple[CrdKind, ...] = (
    CrdKind("JobSet", "sigs.k8s.io/jobset", "v0.10.1",
            "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml", "v1alpha2"),
    CrdKind("TrainJob", "github.com/kubeflow/trainer/v2", "v2.0.0",
            "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml", "v1alpha1"),
)
JOB_ROOT = "io.k8s.api.batch.v1.Job"
JOB_DOCUMENT = "api/openapi-spec/v3/apis__batch__v1_openapi.json"


def module_dir(module: str, version: str) -> Path:
    """The module's directory in the Go module cache (downloaded through the module proxy if needed)."""
    result = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"],
                            capture_output=True, text=True, timeout=600, cwd="/")
    try:
        info = json.loads(result.stdout)
    except json.JSONDecodeError:
        info = {}
    directory = info.get("Dir") if isinstance(info, dict) else None
    if result.returncode != 0 or not directory:
        raise SystemExit(f"go mod download {module}@{version}: {info.get('Error') or result.stderr.strip()}")
    return Path(directory)


def kube_version() -> str:
    match = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", GO_MOD.read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        raise SystemExit(f"no k8s.io/kubernetes requirement in {GO_MOD}")
    return match.group(1)


def drop_template_descriptions(node: Any, *, inside: bool = False) -> Any:
    """Descriptions under any property named `template` removed (kube's PodSpec documentation)."""
    if isinstance(node, list):
        return [drop_template_descriptions(item, inside=inside) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if inside and key == "description" and isinstance(value, str):
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: drop_template_descriptions(child, inside=inside or name == "template")
                        for name, child in value.items()}
        else:
            out[key] = drop_template_descriptions(value, inside=inside)
    return out


def extract_schema(crd_yaml_path: Path | str, version: str) -> dict[str, Any]:
    """The file content for one CRD version: names, group, and `schema.openAPIV3Schema` (template descriptions
    dropped). `source` is left for the caller (it knows the module and version)."""
    crd = yaml.load(Path(crd_yaml_path).read_text(encoding="utf-8"),
                    Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    spec = crd["spec"]
    names = spec["names"]
    served = [v for v in spec["versions"] if v["name"] == version]
    if not served:
        raise SystemExit(f"{crd_yaml_path} has no version {version}")
    return {
        "group": spec["group"],
        "version": version,
        "kind": names["kind"],
        "plural": names["plural"],
        "singular": names.get("singular") or names["kind"].lower(),
        "shortNames": list(names.get("shortNames") or []),
        "schema": drop_template_descriptions(served[0]["schema"]["openAPIV3Schema"]),
    }


_INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
_SPECIAL = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        **_INT_OR_STRING,
        "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)"
                   r"|(\.[0-9]+))))?$"},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": dict(_INT_OR_STRING),
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    "io.k8s.apimachinery.pkg.runtime.RawExtension": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
}
_DROPPED = ("default", "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key", "x-kubernetes-unions",
            "x-kubernetes-group-version-kind")


def kube_object_schema(document: dict[str, Any], root: str) -> dict[str, Any]:
    """`root` of a kube OpenAPI v3 document as one self-contained structural schema: every $ref (and
    `allOf: [{$ref}]`) inlined, descriptions beside a reference kept; the top-level metadata {type: object} as a
    CRD's is (the API server checks ObjectMeta itself)."""
    schemas = document["components"]["schemas"]

    def inline(node: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [inline(item, stack) for item in node]
        if not isinstance(node, dict):
            return node
        refs = [item["$ref"] for item in node.get("allOf") or () if isinstance(item, dict) and "$ref" in item]
        ref = node.get("$ref") or (refs[0] if refs else None)
        if ref is not None:
            name = str(ref).removeprefix(_PREFIX)
            if name in stack:
                raise SystemExit(f"{root}: recursive reference {' -> '.join(stack + (name,))}")
            target = dict(_SPECIAL[name]) if name in _SPECIAL else inline(schemas[name], stack + (name,))
            if isinstance(node.get("description"), str):
                target = {"description": node["description"], **{k: v for k, v in target.items()
                                                                 if k != "description"}}
            return target
        return {key: inline(value, stack) if key not in ("enum", "required") else value
                for key, value in node.items() if key not in _DROPPED}

    schema: dict[str, Any] = inline(schemas[root], (root,))
    schema["properties"]["metadata"] = {"type": "object"}
    schema["type"] = "object"
    dropped: dict[str, Any] = drop_template_descriptions(schema)
    return dropped


def build_all() -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = []
    for row in CRD_KINDS:
        data = extract_schema(module_dir(row.module, row.version) / row.crd_path, row.served_version)
        if data["kind"] != row.kind:
            raise SystemExit(f"{row.upstream} defines {data['kind']}, not {row.kind}")
        files.append({"source": f"{row.upstream}: spec.versions[{row.served_version}].schema.openAPIV3Schema "
                                "(descriptions inside pod templates dropped)",
                      "generator": GENERATOR, **data})
    version = kube_version()
    document = json.loads((module_dir("k8s.io/kubernetes", version) / JOB_DOCUMENT).read_text(encoding="utf-8"))
    files.append({
        "source": f"k8s.io/kubernetes@{version} {JOB_DOCUMENT}: components.schemas[{JOB_ROOT}] with its references "
                  "inlined (descriptions inside pod templates dropped)",
        "generator": GENERATOR, "group": "batch", "version": "v1", "kind": "Job", "plural": "jobs",
        "singular": "job", "shortNames": [],
        "schema": kube_object_schema(document, JOB_ROOT),
    })
    return files


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for data in build_all():
        out = OUT_DIR / f"{data['plural']}.json"
        text = render(data)
        if args.check:
            if not out.is_file() or out.read_text(encoding="utf-8") != text:
                stale.append(out)
            continue
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out.relative_to(ROOT)} ({len(text)} bytes)")
    for out in stale:
        print(f"{out.relative_to(ROOT)} is out of date: run {GENERATOR}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
