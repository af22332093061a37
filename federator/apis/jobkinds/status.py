"""What every served kind's status mirror reads from its twin TrainingJob (issue 28), and the conditions it writes:
`TwinState` (the twin's phase, placement, pod counts and conditions), `condition` (one condition, keeping its
times while its status does not change) and `hub_fields` (the hub's status.phase, status.cluster and status.epoch,
which every served kind's status carries beside its own fields: hub/kinds.py adds them to the schema and shows
Phase and Cluster as columns).

The kinds' mirrors are beside their translators (`JobKind.mirror_status`): kubeflowstatus.py, batchjob.py,
jobset.py, trainjob.py. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from federator.apis.views import Body

__all__ = ["MAX_MIRRORED_BYTES", "MAX_MIRRORED_FIELD_BYTES", "META_TIMES", "MODES", "TwinState", "condition",
           "existing_conditions", "failure", "hub_fields", "mirrored_status", "operator_conditions", "suspension",
           "twin_state", "was_true"]

#: metav1.Condition's times (JobSet, TrainJob)
META_TIMES = ("lastTransitionTime",)
#: how a dispatch runs a gang in its member (the twin's status.placement.mode, the Mode column)
MODES = ("operator", "render")
#: operator mode: at most this many bytes of JSON per status field mirrored from the member copy, and in all
MAX_MIRRORED_FIELD_BYTES = 32 * 1024
MAX_MIRRORED_BYTES = 128 * 1024
_MAX_DEPTH = 16


@dataclass(frozen=True, slots=True)
class TwinState:
    """The twin's status as the mirrors read it (defaults where a field is absent or malformed)."""

    phase: str
    cluster: str | None
    epoch: int | None
    #: role -> {"pending", "running", "succeeded", "failed"}: int
    counts: Mapping[str, Mapping[str, int]]
    #: condition type -> the condition
    conditions: Mapping[str, Mapping[str, Any]]
    requeues: int
    #: how the dispatch of the current placement runs the gang: "operator" (the member's own operator runs the
    #: member copy) or "render" (the hub renders the pods); None before that dispatch recorded it
    mode: str | None = None

    def said(self, ctype: str, default: str) -> str:
        """The message of the twin's condition `ctype`, or `default`."""
        message = self.conditions.get(ctype, {}).get("message")
        return message if isinstance(message, str) and message else default

    def reason(self, ctype: str) -> str | None:
        reason = self.conditions.get(ctype, {}).get("reason")
        return reason if isinstance(reason, str) and reason else None

    def pods(self, role: str | None = None) -> dict[str, int]:
        """Pod counts of `role` (None: all roles summed)."""
        out = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
        for name, counts in self.counts.items():
            if role is None or name == role:
                for key in out:
                    out[key] += counts.get(key, 0)
        return out


def _count(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0


def twin_state(twin: Mapping[str, Any]) -> TwinState:
    status = Body(twin).status
    raw_phase, raw_placement = status.get("phase"), status.get("placement")
    placement: Mapping[str, Any] = raw_placement if isinstance(raw_placement, Mapping) else {}
    cluster, epoch = placement.get("cluster"), placement.get("epoch")
    raw_counts = status.get("podCounts")
    counts = {str(role): {k: _count(c.get(k)) for k in ("pending", "running", "succeeded", "failed")}
              for role, c in (raw_counts.items() if isinstance(raw_counts, Mapping) else ()) if isinstance(c, Mapping)}
    raw_conditions = status.get("conditions")
    conditions = {str(c.get("type")): c for c in (raw_conditions if isinstance(raw_conditions, list) else ())
                  if isinstance(c, Mapping)}
    return TwinState(
        phase=raw_phase if isinstance(raw_phase, str) and raw_phase else "Pending",
        cluster=cluster if isinstance(cluster, str) and cluster else None,
        epoch=epoch if type(epoch) is int else None,
        counts=counts, conditions=conditions, requeues=_count(status.get("requeues")),
        mode=placement.get("mode") if placement.get("mode") in MODES else None)


def existing_conditions(source: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The source's current status.conditions (their times are kept where nothing changed)."""
    raw = Body(source).status.get("conditions")
    return [c for c in raw if isinstance(c, Mapping)] if isinstance(raw, list) else []


def condition(existing: list[Mapping[str, Any]], ctype: str, status: str, reason: str, message: str, now: str, *,
              times: tuple[str, ...] = META_TIMES) -> dict[str, Any]:
    """Condition `ctype` with `times` (e.g. lastTransitionTime; Kubeflow's also lastUpdateTime, kube Job's
    lastProbeTime) set to `now` when its status changes, else kept from `existing`."""
    old = next((c for c in existing if c.get("type") == ctype), None)
    changed = old is None or old.get("status") != status
    out: dict[str, Any] = {"type": ctype, "status": status, "reason": reason, "message": message[:4096]}
    for key in times:
        kept = None if changed or old is None else old.get(key)
        out[key] = kept if isinstance(kept, str) else now
    return out


def was_true(existing: list[Mapping[str, Any]], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True" for c in existing)


def hub_fields(status: dict[str, Any], state: TwinState | None) -> dict[str, Any]:
    """`status` with the hub's phase, cluster and epoch of the twin's placement (None: no twin yet, Pending)."""
    status["phase"] = state.phase if state is not None else "Pending"
    if state is not None and state.cluster is not None:
        status["cluster"] = state.cluster
    if state is not None and state.epoch is not None:
        status["epoch"] = state.epoch
    if state is not None and state.cluster is not None and state.mode is not None:
        status["mode"] = state.mode
    return status


def suspension(existing: list[Mapping[str, Any]], state: TwinState, now: str, suspended: tuple[str, str],
               resumed: tuple[str, str], *, times: tuple[str, ...] = META_TIMES) -> list[dict[str, Any]]:
    """The kind's Suspended condition: True with `suspended` (reason, message) while the twin is suspended, then
    False with `resumed` once it was there; none before it ever was."""
    if state.phase == "Suspended":
        return [condition(existing, "Suspended", "True", *suspended, now, times=times)]
    if any(c.get("type") == "Suspended" for c in existing):
        return [condition(existing, "Suspended", "False", *resumed, now, times=times)]
    return []


def failure(state: TwinState, reason: str, message: str) -> tuple[str, str]:
    """(reason, message) of the kind's Failed condition: the kind's own when the gang ran out of retries (the
    twin's BackoffLimitExceeded, or no reason), else the hub's (e.g. ClusterLost) with the twin's message."""
    own = state.reason("Failed")
    if own in (None, "BackoffLimitExceeded"):
        return reason, message
    return str(own), state.said("Failed", str(own))


def operator_conditions(status: dict[str, Any], twin: Mapping[str, Any] | None,
                        fields: Sequence[str] = ()) -> dict[str, Any]:
    """`status` (a mirror's answer) with what the member copy's operator wrote, when the member's own operator
    runs the job (operator mode: the twin's status.operator, written by status sync, of the twin's current
    cluster and epoch): its conditions (when it has at least one), and those of its status fields `fields`
    (the kind's `JobKind.mirrored_status_fields`) as status sync kept them (status.operator.status), in place of
    the ones computed from the hub's pod counts: a field the copy does not have is left out as the operator
    leaves it out, one status sync dropped as malformed (status.operator.statusDropped) keeps the computed
    value; else `status` unchanged. The hub's status.phase,
    status.cluster, status.epoch and status.mode stay."""
    if twin is None:
        return status
    state = twin_state(twin)
    operator = Body(twin).status.get("operator")
    if not isinstance(operator, Mapping) or operator.get("cluster") != state.cluster \
            or operator.get("epoch") != state.epoch:
        return status
    out = dict(status)
    conditions = operator.get("conditions")
    if isinstance(conditions, list) and conditions:
        out["conditions"] = [dict(c) for c in conditions if isinstance(c, Mapping)]
    own, dropped = operator.get("status"), operator.get("statusDropped")
    if isinstance(own, Mapping):
        for name in fields:
            if name in _HUB_FIELDS or (isinstance(dropped, list) and name in dropped):
                continue  # the hub's own, or what status sync left out as malformed: the computed value stays
            if name in own:
                out[name] = own[name]
            else:
                out.pop(name, None)  # the operator has not written it (or omits it when empty, as kube does)
    return out


#: the hub's own fields of every served kind's status, never taken from a member copy
_HUB_FIELDS = frozenset({"phase", "cluster", "epoch", "mode", "conditions"})


def mirrored_status(schema: Mapping[str, Any], fields: Sequence[str],
                    copy_status: object) -> tuple[dict[str, Any], dict[str, str]]:
    """The member copy's own status fields named in `fields` (operator mode: what its operator wrote, e.g.
    JobSet's replicatedJobsStatus), each checked against the kind's upstream schema `schema` (the whole
    object's: its status.properties; types, known properties, nesting at most 16 deep) and within
    MAX_MIRRORED_FIELD_BYTES of JSON (MAX_MIRRORED_BYTES in all). Returns (the fields kept, field name -> why
    it was left out): a malformed or oversized field is left out whole (the hub's computed value stands), never
    cut. Total: any input gives an answer."""
    if not isinstance(copy_status, Mapping):
        if copy_status is None:
            return {}, {}
        return {}, {name: "status is not an object" for name in fields if name not in _HUB_FIELDS}
    properties = _properties(_properties(schema).get("status"))
    kept: dict[str, Any] = {}
    dropped: dict[str, str] = {}
    total = 0
    for name in fields:
        if name not in copy_status or name in _HUB_FIELDS:
            continue
        value = copy_status[name]
        node = properties.get(name)
        error = _shape_error(value, node, f"status.{name}", 0) if isinstance(node, Mapping) \
            else f"status.{name}: not in the kind's schema"
        if error is None:
            size = len(json.dumps(value, separators=(",", ":")))
            room = min(MAX_MIRRORED_FIELD_BYTES, MAX_MIRRORED_BYTES - total)
            if size > room:
                error = f"status.{name}: {size} bytes of JSON, over the limit of {room}"
            else:
                total += size
                kept[name] = value
        if error is not None:
            dropped[name] = error
    return kept, dropped


def _properties(node: object) -> Mapping[str, Any]:
    raw = node.get("properties") if isinstance(node, Mapping) else None
    return raw if isinstance(raw, Mapping) else {}


def _shape_error(value: object, node: Mapping[str, Any], path: str, depth: int) -> str | None:
    """The first way `value` does not fit the structural schema `node`, or None."""
    if depth > _MAX_DEPTH:
        return f"{path}: nested too deeply"
    if node.get("x-kubernetes-int-or-string"):
        return None if type(value) in (int, str) else f"{path}: must be an integer or a string"
    if node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
        return None
    kind = node.get("type")
    if kind == "object":
        if not isinstance(value, Mapping):
            return f"{path}: must be an object"
        properties = node.get("properties")
        extra = node.get("additionalProperties")
        for key, child in value.items():
            if not isinstance(key, str):
                return f"{path}: keys must be strings"
            if isinstance(properties, Mapping) and key in properties and isinstance(properties[key], Mapping):
                error = _shape_error(child, properties[key], f"{path}.{key}", depth + 1)
            elif isinstance(extra, Mapping):
                error = _shape_error(child, extra, f"{path}[{key[:64]}]", depth + 1)
            elif node.get("x-kubernetes-preserve-unknown-fields"):
                error = None
            else:
                error = f"{path}.{key[:64]}: unknown field"
            if error is not None:
                return error
        return None
    if kind == "array":
        if not isinstance(value, list):
            return f"{path}: must be an array"
        items = node.get("items")
        for index, child in enumerate(value):
            error = _shape_error(child, items, f"{path}[{index}]", depth + 1) if isinstance(items, Mapping) \
                else None
            if error is not None:
                return error
        return None
    checks: dict[object, tuple[type, ...]] = {"string": (str,), "integer": (int,), "boolean": (bool,),
                                              "number": (int, float)}
    if kind in checks:
        return None if type(value) in checks[kind] else f"{path}: must be of type {kind}"
    return f"{path}: the schema gives no type"
