"""Server-side Table rendering for `kubectl get` (kube-api-notes §9).

kubectl prints cells verbatim, so ages are rendered here with kube's
HumanDuration. Rows carry a PartialObjectMetadata (or the full object, or
nothing, per `includeObject`) so that `-A` and `--show-labels` work. Pure:
it must never do I/O or touch a store.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from federator.apis.views import Body
from federator.apiserver.registry import JSONObject, ResourceType
from federator.apis.timestamps import parse_time

TABLE_API_VERSION = "meta.k8s.io/v1"


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m" if rem == 0 else f"{minutes}m{rem}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rem = minutes % 60
        return f"{hours}h" if rem == 0 else f"{hours}h{rem}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rem = hours % 24
        return f"{hours // 24}d" if rem == 0 else f"{hours // 24}d{rem}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, (hours // 24) % 365
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{hours // 24 // 365}y"


def age(value: Any, now: dt.datetime) -> str:
    ts = parse_time(value)
    if ts is None:
        return "<unknown>"
    return human_duration((now - ts).total_seconds())


def column_definitions(rt: ResourceType) -> list[dict[str, Any]]:
    cols: list[dict[str, Any]] = []
    if not _has_name(rt):
        cols.append({"name": "Name", "type": "string", "format": "name", "priority": 0,
                     "description": "Name must be unique within a namespace. Cannot be updated."})
    for c in rt.columns:
        cols.append({
            "name": c.name, "type": "string" if c.type == "date" else c.type, "format": c.format,
            "description": c.description, "priority": c.priority,
        })
    if not _has_age(rt):
        cols.append({
            "name": "Age", "type": "string", "format": "", "priority": 0,
            "description": "CreationTimestamp is a timestamp representing the server time when this object was created.",
        })
    return cols


def _has_name(rt: ResourceType) -> bool:
    """A kind may place NAME itself (events show it only with -o wide)."""
    return any(c.name == "Name" for c in rt.columns)


def _has_age(rt: ResourceType) -> bool:
    """A kind may place AGE itself (nodes print VERSION after it); a kind that
    places NAME itself lays out every column (events have no AGE)."""
    return _has_name(rt) or any(c.name == "Age" for c in rt.columns)


def _row_object(obj: JSONObject, include_object: str) -> JSONObject | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": TABLE_API_VERSION, "metadata": dict(Body(obj).metadata)}


def table_row(rt: ResourceType, obj: JSONObject, *, now: dt.datetime, include_object: str = "Metadata") -> JSONObject:
    meta = Body(obj)
    cells: list[Any] = [] if _has_name(rt) else [meta.name]
    for c in rt.columns:
        try:
            value = c.cell(obj)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            value = None
        if c.type == "date" and value is not None:
            value = age(value, now)
        cells.append(value)
    if not _has_age(rt):
        cells.append(age(meta.creation_timestamp, now))
    row: JSONObject = {"cells": cells}
    row_obj = _row_object(obj, include_object)
    if row_obj is not None:
        row["object"] = row_obj
    return row


def build_table(
    rt: ResourceType,
    objects: Iterable[JSONObject],
    *,
    resource_version: str,
    continue_token: str | None = None,
    remaining: int | None = None,
    include_object: str = "Metadata",
    with_columns: bool = True,
    now: dt.datetime | None = None,
) -> JSONObject:
    now = now or dt.datetime.now(dt.UTC)
    meta: JSONObject = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    if remaining is not None:
        meta["remainingItemCount"] = remaining
    return {
        "kind": "Table",
        "apiVersion": TABLE_API_VERSION,
        "metadata": meta,
        "columnDefinitions": column_definitions(rt) if with_columns else None,
        "rows": [table_row(rt, o, now=now, include_object=include_object) for o in objects],
    }


def wants_table(accept: str) -> bool:
    """True when the Accept header asks for meta.k8s.io Table before plain JSON."""
    if "as=Table" not in accept:
        return False
    for part in accept.split(","):
        params = {}
        pieces = [p.strip() for p in part.split(";")]
        for p in pieces[1:]:
            k, _, v = p.partition("=")
            params[k.strip()] = v.strip()
        if params.get("as") == "Table" and params.get("g", "meta.k8s.io") == "meta.k8s.io" \
                and params.get("v", "v1") in ("v1", "v1beta1"):
            return True
        if pieces[0] in ("application/json", "*/*") and "as" not in params:
            return False
    return False
