"""CustomResourceDefinitions and OpenAPI v3 schemas of the hub's kinds, generated from the pydantic models.

`crd(kind)` builds an apiextensions.k8s.io/v1 CRD whose schema is the model's
JSON schema made *structural* (every node typed, no $ref, no anyOf other than
int-or-string, Optional turned into plain optional fields); `openapi_schema(kind)`
is the same schema as the hub serves it under /openapi/v3. `python -m
federator.apis.crd --write crds/` writes crds/<plural>.<group>.yaml; a test
fails when those files drift from the models.

Bottom layer: pydantic and stdlib only (so YAML is emitted by a small writer
here, not PyYAML). No I/O except in `main`, which writes the files it is told to.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from federator.apis import drillreport, membercluster, queue, trainingjob
from federator.apis.common import API_GROUP, API_VERSION

__all__ = [
    "KINDS",
    "KindInfo",
    "PrinterColumn",
    "column_getter",
    "crd",
    "crd_filename",
    "main",
    "model_openapi_schema",
    "openapi_schema",
    "render_crd",
    "structural_schema",
    "to_yaml",
]


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """A `kubectl get` column: CRD additionalPrinterColumns, and the hub's Table rows."""

    name: str
    type: str  # string | integer | number | boolean | date
    json_path: str
    description: str = ""
    priority: int = 0
    #: the cell says "Terminating" for an object being deleted (metadata.deletionTimestamp set), as
    #: kubectl's STATUS column of a pod does. The hub's Table rows and the CLI show it (`cell`); a CRD column
    #: is a plain JSONPath, so kubectl against a cluster holding crds/ shows the phase there.
    terminating: bool = False
    #: turns the value at json_path into the cell (e.g. a Queue's resource map into "A100=64,cpu=512") for
    #: the hub's Tables and the CLI; a CRD column shows the raw value
    render: Callable[[Any], Any] | None = None

    def cell(self) -> Callable[[Mapping[str, Any]], Any]:
        """The cell getter of this column (the one way to compute a cell: the API's Tables and the CLI)."""
        getter = column_getter(self.json_path)
        render = self.render
        if render is not None:
            return lambda obj: render(getter(obj))
        if not self.terminating:
            return getter

        def cell(obj: Mapping[str, Any]) -> Any:
            meta = obj.get("metadata")
            if isinstance(meta, Mapping) and meta.get("deletionTimestamp"):
                return "Terminating"
            return getter(obj)

        return cell


@dataclass(frozen=True, slots=True)
class KindInfo:
    """Everything about one hub kind that discovery, CRDs and OpenAPI need."""

    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    namespaced: bool
    model: type[BaseModel]
    columns: tuple[PrinterColumn, ...]
    categories: tuple[str, ...] = ("federator",)
    #: a /status subresource (False for a kind with no status, e.g. DrillReport)
    status_subresource: bool = True

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp")

KINDS: Mapping[str, KindInfo] = {
    trainingjob.KIND: KindInfo(
        kind=trainingjob.KIND,
        plural=trainingjob.PLURAL,
        singular=trainingjob.SINGULAR,
        short_names=trainingjob.SHORT_NAMES,
        namespaced=True,
        model=trainingjob.TrainingJob,
        columns=(
            PrinterColumn("Phase", "string", ".status.phase", "Lifecycle phase", terminating=True),
            PrinterColumn("Cluster", "string", ".status.placement.cluster", "Member cluster running the gang"),
            _AGE,
            PrinterColumn("Epoch", "integer", ".status.placement.epoch", "Fencing epoch", priority=1),
            PrinterColumn("Priority", "integer", ".spec.priority", "Placement priority", priority=1),
            PrinterColumn("Queue", "string", ".spec.queue", "The Queue whose quota the job uses", priority=1),
            PrinterColumn("Mode", "string", ".status.placement.mode",
                          "operator (the member's own operator runs it) or render (the hub renders the pods)",
                          priority=1),
        ),
    ),
    membercluster.KIND: KindInfo(
        kind=membercluster.KIND,
        plural=membercluster.PLURAL,
        singular=membercluster.SINGULAR,
        short_names=membercluster.SHORT_NAMES,
        namespaced=False,
        model=membercluster.MemberCluster,
        columns=(
            PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status', "Reachable and synced"),
            PrinterColumn("Lost", "string", '.status.conditions[?(@.type=="Lost")].status',
                          "Out of contact past its grace period: its gangs fail over"),
            PrinterColumn("Fabric", "string", ".spec.network.type", "rdma or ethernet"),
            PrinterColumn("GPUs", "integer", ".status.capacity.totalGPUs", "GPUs in the cluster"),
            _AGE,
            PrinterColumn("Free", "integer", ".status.capacity.freeGPUs", "GPUs not allocated", priority=1),
            PrinterColumn("Scheduler", "string", ".spec.scheduler.name", "Gang scheduler", priority=1),
            PrinterColumn("Cordoned", "boolean", ".spec.cordoned", "No new placements", priority=1),
        ),
    ),
    drillreport.KIND: KindInfo(
        kind=drillreport.KIND,
        plural=drillreport.PLURAL,
        singular=drillreport.SINGULAR,
        short_names=drillreport.SHORT_NAMES,
        namespaced=False,
        model=drillreport.DrillReport,
        columns=(
            PrinterColumn("Cluster", "string", ".spec.cluster", "The faulted cluster(s)"),
            PrinterColumn("Fault", "string", ".spec.fault", "partition, outage, node-failure or drain"),
            PrinterColumn("Moved", "integer", ".spec.gangsMoved", "Gangs placed elsewhere"),
            PrinterColumn("MaxConcurrentCopies", "integer", ".spec.maxConcurrentCopies",
                          "The most clusters one job ran in at once (must be 1)"),
            PrinterColumn("JobsLost", "integer", ".spec.jobsLost", "Jobs lost because of the drill (must be 0)"),
            _AGE,
            PrinterColumn("Affected", "integer", ".spec.gangsAffected", "Gangs in the faulted cluster", priority=1),
            PrinterColumn("Unplaceable", "integer", ".spec.gangsUnplaceable", "Gangs that left and fit nowhere",
                          priority=1),
            PrinterColumn("RodeOut", "integer", ".spec.gangsRodeOut", "Gangs that rode the fault out in place",
                          priority=1),
            PrinterColumn("RestartedInPlace", "integer", ".spec.gangsRestartedInPlace",
                          "Gangs restarted in the same cluster", priority=1),
            PrinterColumn("GangsLost", "integer", ".spec.gangsLost", "Affected gangs lost or failed", priority=1),
            PrinterColumn("Duplicates", "integer", ".spec.duplicates", "Jobs seen running twice", priority=1),
            PrinterColumn("RunningAgain", "number", ".spec.runningAgainSeconds",
                          "Seconds until every moved gang ran again", priority=1),
            PrinterColumn("PlanMatched", "number", ".spec.planMatched", "Share of moves the plan foresaw",
                          priority=1),
        ),
        status_subresource=False,
    ),
    queue.KIND: KindInfo(
        kind=queue.KIND,
        plural=queue.PLURAL,
        singular=queue.SINGULAR,
        short_names=queue.SHORT_NAMES,
        namespaced=False,
        model=queue.Queue,
        columns=(
            PrinterColumn("Quota", "string", ".spec.quota", "Nominal quota (GPUs per model, cpu, memory)",
                          render=queue.resources_text),
            PrinterColumn("Used", "string", ".status.used", "Resources of admitted jobs", render=queue.resources_text),
            PrinterColumn("Borrowed", "string", ".status.borrowed", "The part of used beyond the quota",
                          render=queue.resources_text),
            PrinterColumn("Pending", "integer", ".status.pendingJobs", "Jobs waiting for quota"),
            PrinterColumn("Admitted", "integer", ".status.admittedJobs", "Jobs holding quota"),
            PrinterColumn("Budget", "string", ".spec.budget", "Spending limit per calendar month (UTC)",
                          render=queue.budget_text),
            PrinterColumn("Spent", "string", ".status.spend", "Money and GPU-hours spent this month (UTC)",
                          render=queue.spend_text),
            _AGE,
            PrinterColumn("Cohort", "string", ".spec.cohort", "Queues that lend each other idle quota", priority=1),
            PrinterColumn("Weight", "number", ".spec.weight", "Fair-share weight", priority=1),
            PrinterColumn("Default", "boolean", ".spec.default", "Default queue of the namespaces it selects",
                          priority=1),
        ),
    ),
}

_SEGMENT = re.compile(r'\.([A-Za-z0-9_\-/]+)|\[\?\(@\.([A-Za-z0-9_]+)=="([^"]*)"\)\]')


def column_getter(json_path: str) -> Callable[[Mapping[str, Any]], Any]:
    """A cell getter for the JSONPath subset printer columns use: `.a.b` and `.list[?(@.key=="v")].field`.

    Returns "" when any step is missing, like kubectl's printer.
    """
    steps: list[tuple[str, str, str]] = []
    position = 0
    while position < len(json_path):
        match = _SEGMENT.match(json_path, position)
        if match is None:
            raise ValueError(f"unsupported JSONPath {json_path!r} at {position}")
        steps.append((match[1] or "", match[2] or "", match[3] or ""))
        position = match.end()

    def cell(obj: Mapping[str, Any]) -> Any:
        current: Any = obj
        for field, key, wanted in steps:
            if field:
                if not isinstance(current, Mapping) or field not in current:
                    return ""
                current = current[field]
            else:
                if not isinstance(current, list):
                    return ""
                current = next((i for i in current if isinstance(i, Mapping) and i.get(key) == wanted), None)
            if current is None:
                return ""
        return current

    return cell


# Keywords of pydantic's JSON Schema that a structural CRD schema cannot carry.
_DROPPED_KEYWORDS = {"title", "uniqueItems", "propertyNames", "examples", "$schema"}


def _inline(node: Any, defs: Mapping[str, Any], depth: int = 0) -> Any:
    if depth > 64:
        raise ValueError("schema nests too deeply (a recursive model cannot be a structural schema)")
    if isinstance(node, list):
        return [_inline(item, defs, depth + 1) for item in node]
    if not isinstance(node, Mapping):
        return node
    if "$ref" in node:
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        merged = dict(copy.deepcopy(defs[name]))
        merged.update({k: v for k, v in node.items() if k != "$ref"})
        return _inline(merged, defs, depth + 1)
    return {k: _inline(v, defs, depth + 1) for k, v in node.items() if k != "$defs"}


def _structural(node: dict[str, Any]) -> dict[str, Any]:
    """One schema node made structural (children first)."""
    node = {k: v for k, v in node.items() if k not in _DROPPED_KEYWORDS}
    if node.get("additionalProperties") is False:
        del node["additionalProperties"]
    if "default" in node and node["default"] is None:
        del node["default"]
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        branches = [b for b in node["anyOf"] if b != {"type": "null"}]
        if len(branches) != 1:
            raise ValueError(f"cannot express anyOf {node['anyOf']!r} in a structural schema")
        del node["anyOf"]
        inner = dict(branches[0])
        inner.update(node)  # the outer description/default win
        node = {k: v for k, v in inner.items() if k not in _DROPPED_KEYWORDS}
        if node.get("additionalProperties") is False:
            del node["additionalProperties"]
    if "patternProperties" in node:
        # CRDs reject patternProperties; the key rule stays in the hub's own validation.
        patterns = list(node.pop("patternProperties").values())
        if len(patterns) != 1:
            raise ValueError("cannot express several patternProperties in a structural schema")
        node["additionalProperties"] = patterns[0]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "enum" in node and "type" not in node:
        kinds = {type(v) for v in node["enum"]}
        node["type"] = "string" if kinds == {str} else "integer" if kinds == {int} else "string"
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), int | float) and not isinstance(node.get(bound), bool):
            node[plain] = node.pop(bound)
            node[bound] = True
    if "properties" in node:
        node["properties"] = {k: _structural(v) for k, v in node["properties"].items()}
        node.setdefault("type", "object")
    if isinstance(node.get("additionalProperties"), Mapping):
        node["additionalProperties"] = _structural(dict(node["additionalProperties"]))
        node.setdefault("type", "object")
    if "items" in node:
        node["items"] = _structural(dict(node["items"]))
    if "anyOf" in node:
        node["anyOf"] = [{k: v for k, v in b.items() if k == "type"} for b in node["anyOf"]]
    return node


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's validation JSON schema as a structural OpenAPI v3 schema for a CRD."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    inlined = _inline(raw, raw.get("$defs", {}))
    schema = _structural(inlined)
    properties = schema["properties"]
    # kube-apiserver owns these three at the root; a CRD may not constrain metadata beyond name.
    properties["apiVersion"] = {
        "type": "string",
        "description": "APIVersion defines the versioned schema of this representation of an object.",
    }
    properties["kind"] = {"type": "string", "description": "Kind is the REST resource this object represents."}
    properties["metadata"] = {"type": "object"}
    schema["required"] = [name for name in schema.get("required", []) if name not in ("metadata", "apiVersion")]
    if not schema["required"]:
        del schema["required"]
    return schema


def openapi_schema(kind: str) -> dict[str, Any]:
    """The component schema the hub serves for `kind` under /openapi/v3, with its GVK list."""
    info = KINDS[kind]
    return model_openapi_schema(info.model, group=API_GROUP, version=API_VERSION, kind=info.kind)


def model_openapi_schema(model: type[BaseModel], *, group: str, version: str, kind: str) -> dict[str, Any]:
    """The structural schema of any kind's model with its GVK list, as served under /openapi/v3 (the
    hub's own kinds, and the Kubernetes kinds it serves from a model, e.g. PriorityClass)."""
    schema = structural_schema(model)
    schema["x-kubernetes-group-version-kind"] = [{"group": group, "kind": kind, "version": version}]
    return schema


def crd(kind: str) -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition of a hub kind."""
    info = KINDS[kind]
    columns = [
        {"name": c.name, "type": c.type, "jsonPath": c.json_path}
        | ({"description": c.description} if c.description else {})
        | ({"priority": c.priority} if c.priority else {})
        for c in info.columns
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{info.plural}.{API_GROUP}"},
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": info.kind,
                "listKind": info.list_kind,
                "plural": info.plural,
                "singular": info.singular,
                "shortNames": list(info.short_names),
                "categories": list(info.categories),
            },
            "scope": "Namespaced" if info.namespaced else "Cluster",
            "versions": [{
                "name": API_VERSION,
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": structural_schema(info.model)},
                **({"subresources": {"status": {}}} if info.status_subresource else {}),
                "additionalPrinterColumns": columns,
            }],
        },
    }


def crd_filename(kind: str) -> str:
    info = KINDS[kind]
    return f"{info.plural}.{API_GROUP}.yaml"


# --------------------------------------------------------------------------- YAML

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if value == value and value not in (float("inf"), float("-inf")) else json.dumps(None)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid YAML double-quoted scalar
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


def _key(key: str) -> str:
    return key if _PLAIN_KEY.match(key) and key.lower() not in _YAML_WORDS else json.dumps(key)


def _yaml_lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, Mapping) and item:
                lines.append(f"{pad}{_key(key)}:")
                lines += _yaml_lines(item, indent + 2)
            elif isinstance(item, list) and item:
                lines.append(f"{pad}{_key(key)}:")
                lines += _yaml_lines(item, indent)
            else:
                lines.append(f"{pad}{_key(key)}: {_inline_value(item)}")
        return lines
    if isinstance(value, list):
        for item in value:
            if (isinstance(item, Mapping) or isinstance(item, list)) and item:
                nested = _yaml_lines(item, indent + 2)
                lines.append(f"{pad}- {nested[0].lstrip()}")
                lines += nested[1:]
            else:
                lines.append(f"{pad}- {_inline_value(item)}")
        return lines
    return [pad + _scalar(value)]


def _inline_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def to_yaml(document: Mapping[str, Any]) -> str:
    """Block-style YAML for JSON-like data; strings are always quoted, so nothing is misread."""
    return "\n".join(_yaml_lines(document, 0)) + "\n"


_HEADER = "# Generated from federator/apis by `python -m federator.apis.crd --write crds/`. Do not edit.\n"


def render_crd(kind: str) -> str:
    return _HEADER + to_yaml(crd(kind))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m federator.apis.crd", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="DIR", help="write one CRD file per kind into DIR")
    group.add_argument("--check", metavar="DIR", help="exit 1 if the CRD files in DIR differ from the models")
    args = parser.parse_args(argv)
    directory = Path(args.write or args.check)
    stale: list[str] = []
    for kind in KINDS:
        path = directory / crd_filename(kind)
        text = render_crd(kind)
        if args.write:
            directory.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        elif not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(str(path))
    if stale:
        print("out of date (run python -m federator.apis.crd --write crds/): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
