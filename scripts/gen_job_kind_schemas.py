#!/usr/bin/env python3
"""Extract the OpenAPI v3 schema of each upstream job kind the hub serves (issue 28), pinned to a release, into
federator/apis/jobkinds/<plural>.json (beside the kind's module).

Each source is read from the Go module cache (`go mod download -json <module>@<version>` fetches the module
through the Go module proxy and gives its directory):

    python scripts/gen_job_kind_schemas.py            # write the files
    python scripts/gen_job_kind_schemas.py --check    # exit 1 if a committed file differs
    python scripts/gen_job_kind_schemas.py --check PyTorchJob   # only the named kinds

A row of UPSTREAM_KINDS is either
- a CRD (the Kubeflow kinds, JobSet, TrainJob): the CRD version's `schema.openAPIV3Schema` as it is, or
- a kube built-in kind (batch/v1 Job, `openapi_root` set): the kind's closure in kube's OpenAPI v3 document
  (k8s.io/kubernetes at the release e2e/kube/tools/go.mod pins) with every $ref inlined into one structural
  schema as a CRD would publish it (metadata: {type: object} at the top; Quantity and IntOrString as
  x-kubernetes-int-or-string; FieldsV1 and RawExtension free-form; defaults and patch hints dropped).

Each file holds the source (module@version and the file in it), the kind's names, and the schema, except that
descriptions inside pod templates (the bulk of every file: kube's own PodSpec documentation, which
`kubectl explain` of core kinds already has) are dropped. `federator.apis.jobkinds.base.load_upstream_schema`
reads them.

To add a kind, add a row to UPSTREAM_KINDS.
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
GENERATOR = "scripts/gen_job_kind_schemas.py"
_PREFIX = "#/components/schemas/"


@dataclass(frozen=True)
class UpstreamKind:
    kind: str
    #: Go module path and version, e.g. github.com/kubeflow/training-operator, v1.8.1
    module: str
    version: str
    #: the CRD file inside the module (or, with openapi_root, kube's OpenAPI v3 document)
    crd_path: str
    #: the CRD version whose schema is served (or, with openapi_root, the kind's version)
    served_version: str
    #: a kube built-in kind: its schema name in the OpenAPI document at crd_path, and its names
    openapi_root: str | None = None
    group: str = ""
    plural: str = ""

    @property
    def upstream(self) -> str:
        return f"{self.module}@{self.version} {self.crd_path}"


_TRAINING_OPERATOR = ("github.com/kubeflow/training-operator", "v1.8.1")
_MPI_OPERATOR = ("github.com/kubeflow/mpi-operator", "v0.6.0")
_TRAINER = ("github.com/kubeflow/trainer/v2", "v2.0.0")


def kube_version() -> str:
    """The k8s.io/kubernetes release the e2e tools pin (the kube the tests run against)."""
    match = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", GO_MOD.read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        raise SystemExit(f"no k8s.io/kubernetes requirement in {GO_MOD}")
    return match.group(1)


#: kind -> where its CRD is. One row per served kind.
UPSTREAM_KINDS: tuple[UpstreamKind, ...] = (
    UpstreamKind("PyTorchJob", *_TRAINING_OPERATOR, "manifests/base/crds/kubeflow.org_pytorchjobs.yaml", "v1"),
    UpstreamKind("TFJob", *_TRAINING_OPERATOR, "manifests/base/crds/kubeflow.org_tfjobs.yaml", "v1"),
    UpstreamKind("PaddleJob", *_TRAINING_OPERATOR, "manifests/base/crds/kubeflow.org_paddlejobs.yaml", "v1"),
    UpstreamKind("MPIJob", *_MPI_OPERATOR, "manifests/base/kubeflow.org_mpijobs.yaml", "v2beta1"),
    UpstreamKind("JobSet", "sigs.k8s.io/jobset", "v0.10.1",
                 "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml", "v1alpha2"),
    UpstreamKind("TrainJob", *_TRAINER, "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml", "v1alpha1"),
    # not job kinds: the runtimes a TrainJob's spec.runtimeRef names (apis/trainingruntime.py)
    UpstreamKind("ClusterTrainingRuntime", *_TRAINER,
                 "manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml", "v1alpha1"),
    UpstreamKind("TrainingRuntime", *_TRAINER, "manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml",
                 "v1alpha1"),
    UpstreamKind("Job", "k8s.io/kubernetes", kube_version(), "api/openapi-spec/v3/apis__batch__v1_openapi.json",
                 "v1", openapi_root="io.k8s.api.batch.v1.Job", group="batch", plural="jobs"),
)


class ModuleUnavailable(Exception):
    """The Go module could not be downloaded (no go, no proxy)."""


def module_dir(module: str, version: str) -> Path:
    """The module's directory in the Go module cache, downloading it through the module proxy if needed."""
    try:
        result = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"],
                                capture_output=True, text=True, timeout=600, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModuleUnavailable(f"go mod download {module}@{version}: {exc}") from exc
    try:
        info = json.loads(result.stdout)
    except json.JSONDecodeError:
        info = {}
    directory = info.get("Dir") if isinstance(info, dict) else None
    if result.returncode != 0 or not directory:
        error = info.get("Error") if isinstance(info, dict) else None
        raise ModuleUnavailable(f"go mod download {module}@{version}: {error or result.stderr.strip()}")
    return Path(directory)


def drop_template_descriptions(node: Any, *, inside: bool = False) -> Any:
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


def extract(crd: dict[str, Any], upstream: UpstreamKind) -> dict[str, Any]:
    spec = crd["spec"]
    names = spec["names"]
    if names["kind"] != upstream.kind:
        raise SystemExit(f"{upstream.upstream} defines {names['kind']}, not {upstream.kind}")
    served = [v for v in spec["versions"] if v["name"] == upstream.served_version]
    if not served:
        raise SystemExit(f"{upstream.upstream} has no version {upstream.served_version}")
    version = served[0]
    return {
        "source": f"{upstream.upstream}: spec.versions[{upstream.served_version}].schema.openAPIV3Schema "
                  "(descriptions inside pod templates dropped)",
        "generator": GENERATOR,
        "group": spec["group"],
        "version": upstream.served_version,
        "kind": names["kind"],
        "plural": names["plural"],
        "singular": names.get("singular") or names["kind"].lower(),
        "shortNames": list(names.get("shortNames") or []),
        "schema": drop_template_descriptions(version["schema"]["openAPIV3Schema"]),
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


def extract_builtin(document: dict[str, Any], upstream: UpstreamKind) -> dict[str, Any]:
    root = upstream.openapi_root or ""
    if root not in document.get("components", {}).get("schemas", {}):
        raise SystemExit(f"{upstream.upstream} has no schema {root}")
    return {
        "source": f"{upstream.upstream}: components.schemas[{root}] with its references inlined "
                  "(descriptions inside pod templates dropped)",
        "generator": GENERATOR,
        "group": upstream.group,
        "version": upstream.served_version,
        "kind": upstream.kind,
        "plural": upstream.plural,
        "singular": upstream.kind.lower(),
        "shortNames": [],
        "schema": kube_object_schema(document, root),
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=False) + "\n"


def output_path(data: dict[str, Any]) -> Path:
    return OUT_DIR / f"{data['plural']}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file is out of date")
    parser.add_argument("kinds", nargs="*", help="only these kinds (default: every row of UPSTREAM_KINDS)")
    args = parser.parse_args(argv)
    known = {u.kind: u for u in UPSTREAM_KINDS}
    unknown = [k for k in args.kinds if k not in known]
    if unknown:
        parser.error(f"unknown kind(s) {', '.join(unknown)}; known: {', '.join(known)}")
    stale = []
    for upstream in [known[k] for k in args.kinds] or list(UPSTREAM_KINDS):
        try:
            directory = module_dir(upstream.module, upstream.version)
        except ModuleUnavailable as exc:
            print(f"module unavailable: {exc}", file=sys.stderr)
            return 2
        source = (directory / upstream.crd_path).read_text(encoding="utf-8")
        if upstream.openapi_root is not None:
            data = extract_builtin(json.loads(source), upstream)
        else:
            data = extract(yaml.load(source, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)), upstream)
        text = render(data)
        out = output_path(data)
        if args.check:
            if not out.is_file() or out.read_text(encoding="utf-8") != text:
                stale.append(out)
            continue
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out.relative_to(ROOT)} ({len(text)} bytes) from {upstream.upstream}")
    if stale:
        for out in stale:
            print(f"{out.relative_to(ROOT)} is out of date: run {GENERATOR}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
