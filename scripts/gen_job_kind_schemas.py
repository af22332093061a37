#!/usr/bin/env python3
"""Extract the OpenAPI v3 schema of each upstream job kind the hub serves (issue 28) from the kind's own CRD in
its Go module, pinned to a release, into federator/apis/jobkinds/<plural>.json (beside the kind's module).

The CRD YAML is read from the Go module cache (`go mod download -json <module>@<version>` fetches the module
through the Go module proxy and gives its directory):

    python scripts/gen_job_kind_schemas.py            # write the files
    python scripts/gen_job_kind_schemas.py --check    # exit 1 if a committed file differs
    python scripts/gen_job_kind_schemas.py --check PyTorchJob   # only the named kinds

Each file holds the source (module@version and the file in it), the kind's names as the CRD gives them, and
the CRD version's `schema.openAPIV3Schema` as it is, except that descriptions inside pod templates (the bulk of
every file: kube's own PodSpec documentation, which `kubectl explain` of core kinds already has) are dropped.

To add a kind, add a row to UPSTREAM_KINDS.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "federator" / "apis" / "jobkinds"


@dataclass(frozen=True)
class UpstreamKind:
    kind: str
    #: Go module path and version, e.g. github.com/kubeflow/training-operator, v1.8.1
    module: str
    version: str
    #: the CRD file inside the module
    crd_path: str
    #: the CRD version whose schema is served
    served_version: str

    @property
    def upstream(self) -> str:
        return f"{self.module}@{self.version} {self.crd_path}"


_TRAINING_OPERATOR = ("github.com/kubeflow/training-operator", "v1.8.1")
_MPI_OPERATOR = ("github.com/kubeflow/mpi-operator", "v0.6.0")

#: kind -> where its CRD is. One row per served kind.
UPSTREAM_KINDS: tuple[UpstreamKind, ...] = (
    UpstreamKind("PyTorchJob", *_TRAINING_OPERATOR, "manifests/base/crds/kubeflow.org_pytorchjobs.yaml", "v1"),
    UpstreamKind("TFJob", *_TRAINING_OPERATOR, "manifests/base/crds/kubeflow.org_tfjobs.yaml", "v1"),
    UpstreamKind("PaddleJob", *_TRAINING_OPERATOR, "manifests/base/crds/kubeflow.org_paddlejobs.yaml", "v1"),
    UpstreamKind("MPIJob", *_MPI_OPERATOR, "manifests/base/kubeflow.org_mpijobs.yaml", "v2beta1"),
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


def _drop_template_descriptions(node: Any, *, inside: bool = False) -> Any:
    if isinstance(node, list):
        return [_drop_template_descriptions(item, inside=inside) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if inside and key == "description" and isinstance(value, str):
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _drop_template_descriptions(child, inside=inside or name == "template")
                        for name, child in value.items()}
        else:
            out[key] = _drop_template_descriptions(value, inside=inside)
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
        "generator": "scripts/gen_job_kind_schemas.py",
        "group": spec["group"],
        "version": upstream.served_version,
        "kind": names["kind"],
        "plural": names["plural"],
        "singular": names.get("singular") or names["kind"].lower(),
        "shortNames": list(names.get("shortNames") or []),
        "schema": _drop_template_descriptions(version["schema"]["openAPIV3Schema"]),
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
        crd = yaml.load((directory / upstream.crd_path).read_text(encoding="utf-8"),
                        Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        data = extract(crd, upstream)
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
            print(f"{out.relative_to(ROOT)} is out of date: run scripts/gen_job_kind_schemas.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
