#!/usr/bin/env python3
"""Extract core/v1 PodTemplateSpec (and everything it references) from Kubernetes' published OpenAPI v3
document into the compact schema the hub validates role templates with (federator/apis/podtemplatespec.json).

The source is kube's own `api/openapi-spec/v3/api__v1_openapi.json` of the release the members run
(k8s.io/kubernetes in e2e/kube/tools/go.mod), read from the Go module cache:

    python scripts/gen_pod_template_schema.py            # write the file
    python scripts/gen_pod_template_schema.py --check    # exit 1 if the committed file differs

Compaction keeps only what validation reads: type, format, properties, required, items,
additionalProperties and references ($ref, with `allOf: [{$ref}]` collapsed and the
`#/components/schemas/` prefix dropped); descriptions, defaults and patch hints are dropped.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GO_MOD = ROOT / "e2e" / "kube" / "tools" / "go.mod"
OUTPUT = ROOT / "federator" / "apis" / "podtemplatespec.json"
ROOT_SCHEMA = "io.k8s.api.core.v1.PodTemplateSpec"
_PREFIX = "#/components/schemas/"
_KEPT = ("type", "format", "required")


def kube_version() -> str:
    match = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", GO_MOD.read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        raise SystemExit(f"no k8s.io/kubernetes requirement in {GO_MOD}")
    return match.group(1)


def spec_path(version: str) -> Path:
    cache = subprocess.run(["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True).stdout.strip()
    return Path(cache) / f"k8s.io/kubernetes@{version}" / "api" / "openapi-spec" / "v3" / "api__v1_openapi.json"


def _compact(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    refs = [item["$ref"] for item in node.get("allOf") or () if isinstance(item, dict) and "$ref" in item]
    ref = node.get("$ref") or (refs[0] if refs else None)
    if ref is not None:
        return {"$ref": str(ref).removeprefix(_PREFIX)}
    out: dict[str, Any] = {k: node[k] for k in _KEPT if k in node}
    if "properties" in node:
        out["properties"] = {k: _compact(v) for k, v in sorted(node["properties"].items())}
    if "items" in node:
        out["items"] = _compact(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _compact(node["additionalProperties"])
    if "oneOf" in node:  # Quantity and IntOrString: the types they take
        out["oneOf"] = [{"type": branch["type"]} for branch in node["oneOf"]]
    return out


def _references(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {str(node["$ref"])} if "$ref" in node else set()
        for value in node.values():
            found |= _references(value)
        return found
    if isinstance(node, list):
        found = set()
        for value in node:
            found |= _references(value)
        return found
    return set()


def extract(document: dict[str, Any], *, version: str) -> dict[str, Any]:
    schemas = document["components"]["schemas"]
    compact: dict[str, Any] = {}
    todo = [ROOT_SCHEMA]
    while todo:
        name = todo.pop()
        if name in compact:
            continue
        compact[name] = _compact(schemas[name])
        todo += sorted(_references(compact[name]) - set(compact))
    return {
        "source": f"k8s.io/kubernetes@{version} api/openapi-spec/v3/api__v1_openapi.json, components.schemas: "
                  f"the transitive closure of {ROOT_SCHEMA}",
        "generator": "scripts/gen_pod_template_schema.py",
        "root": ROOT_SCHEMA,
        "schemas": dict(sorted(compact.items())),
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file is out of date")
    parser.add_argument("--spec", type=Path, help="the OpenAPI document (default: from the Go module cache)")
    args = parser.parse_args(argv)
    version = kube_version()
    source = args.spec or spec_path(version)
    text = render(extract(json.loads(source.read_text(encoding="utf-8")), version=version))
    if args.check:
        if not OUTPUT.is_file() or OUTPUT.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT} is out of date: run scripts/gen_pod_template_schema.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT} ({len(text)} bytes) from {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
