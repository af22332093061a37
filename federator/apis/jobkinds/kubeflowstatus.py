"""The status the Kubeflow operators show on a job, made from its twin TrainingJob (issue 28): conditions
Created, Running, Succeeded, Failed and Suspended with the operators' reasons (`<Kind>Created`, `<Kind>Running`,
`<Kind>Succeeded`, ...; the twin's own condition messages where it has them), `replicaStatuses` per replica type
(active = pending + running, succeeded, failed, from the twin's pod counts), `startTime` and `completionTime`,
plus what the hub adds to every served kind's status: `phase`, `cluster` and `epoch` of the twin's placement.
Transition times are kept while a condition's status does not change.

Pure: no I/O. The twin controller (controllers/jobkinds.py) writes what it returns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from federator.apis.jobkinds.base import JSON, StatusMirror
from federator.apis.jobkinds.kubeflow import REPLICA_TYPES_ANNOTATION
from federator.apis.views import Body

__all__ = ["kubeflow_status", "kubeflow_status_of"]


def _condition(existing: list[Any], ctype: str, status: str, reason: str, message: str, now: str) -> dict[str, Any]:
    old = next((c for c in existing if isinstance(c, Mapping) and c.get("type") == ctype), None)
    changed = old is None or old.get("status") != status
    return {"type": ctype, "status": status, "reason": reason, "message": message[:4096],
            "lastUpdateTime": now if changed or old is None else old.get("lastUpdateTime", now),
            "lastTransitionTime": now if changed or old is None else old.get("lastTransitionTime", now)}


def kubeflow_status(kind: str, source: Mapping[str, Any], twin: Mapping[str, Any] | None, *,
                    now: str, blocked: str | None = None) -> JSON:
    """The source's status from its twin (None: not created yet), keeping transition times that did not change.
    `blocked` is why the twin cannot be created (condition Created=False, reason NameTaken or TwinRefused)."""
    old = Body(source).status
    existing = list(old.get("conditions") or []) if isinstance(old.get("conditions"), list) else []
    name = Body(source).name
    status: dict[str, Any] = {}
    conditions: list[dict[str, Any]] = []
    if twin is None:
        reason, message = (blocked.split(":", 1) + [""])[:2] if blocked else ("Pending", "")
        conditions.append(_condition(existing, "Created", "False", reason, message.strip()
                                     or f"{kind} {name} waits for its TrainingJob.", now))
        status["phase"] = "Pending"
        status["conditions"] = conditions
        return status
    tstatus = Body(twin).status
    raw_phase, raw_placement, raw_conditions = tstatus.get("phase"), tstatus.get("placement"), tstatus.get("conditions")
    phase: str = raw_phase if isinstance(raw_phase, str) and raw_phase else "Pending"
    placement: Mapping[str, Any] = raw_placement if isinstance(raw_placement, Mapping) else {}
    twin_conditions: list[Any] = raw_conditions if isinstance(raw_conditions, list) else []
    by_type = {c.get("type"): c for c in twin_conditions if isinstance(c, Mapping)}

    def said(ctype: str, default: str) -> str:
        cond = by_type.get(ctype)
        message = cond.get("message") if isinstance(cond, Mapping) else None
        return message if isinstance(message, str) and message else default

    conditions.append(_condition(existing, "Created", "True", f"{kind}Created",
                                 f"{kind} {name} is created.", now))
    if phase == "Suspended":
        conditions.append(_condition(existing, "Suspended", "True", f"{kind}Suspended",
                                     f"{kind} {name} is suspended.", now))
    running = phase in ("Running",)
    finished = phase in ("Succeeded", "Failed")
    if running or finished or any(c.get("type") == "Running" for c in existing if isinstance(c, Mapping)):
        conditions.append(_condition(existing, "Running", "True" if running else "False",
                                     f"{kind}{phase if finished else 'Running'}",
                                     f"{kind} {name} is running." if running else said(phase, phase), now))
    if phase == "Succeeded":
        conditions.append(_condition(existing, "Succeeded", "True", f"{kind}Succeeded",
                                     said("Succeeded", f"{kind} {name} successfully completed."), now))
    if phase == "Failed":
        conditions.append(_condition(existing, "Failed", "True", f"{kind}Failed",
                                     said("Failed", f"{kind} {name} has failed."), now))
    status["conditions"] = conditions
    status["replicaStatuses"] = _replica_statuses(twin, tstatus)
    start = old.get("startTime")
    if isinstance(start, str):
        status["startTime"] = start
    elif phase in ("Running", "Succeeded", "Failed"):
        status["startTime"] = now
    done = old.get("completionTime")
    if isinstance(done, str):
        status["completionTime"] = done
    elif phase == "Succeeded":
        status["completionTime"] = now
    status["phase"] = phase
    cluster = placement.get("cluster")
    if isinstance(cluster, str) and cluster:
        status["cluster"] = cluster
    epoch = placement.get("epoch")
    if type(epoch) is int:
        status["epoch"] = epoch
    return status


def _replica_statuses(twin: Mapping[str, Any], tstatus: Mapping[str, Any]) -> dict[str, Any]:
    """Per source replica type: active, succeeded, failed pods, from the twin's pod counts."""
    annotations = Body(twin).annotations
    try:
        types = json.loads(annotations.get(REPLICA_TYPES_ANNOTATION, "[]"))
    except ValueError:
        types = []
    spec_roles = Body(twin).spec.get("roles")
    roles = [str(r.get("name")) for r in spec_roles if isinstance(r, Mapping)] if isinstance(spec_roles, list) else []
    names = dict(zip(roles, types)) if isinstance(types, list) and len(types) == len(roles) else {
        r: str(r) for r in roles}
    raw_counts = tstatus.get("podCounts")
    counts: Mapping[str, Any] = raw_counts if isinstance(raw_counts, Mapping) else {}
    out: dict[str, Any] = {}
    for role, rtype in names.items():
        raw = counts.get(role)
        c: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        out[str(rtype)] = {"active": int(c.get("pending", 0)) + int(c.get("running", 0)),
                           "succeeded": int(c.get("succeeded", 0)), "failed": int(c.get("failed", 0))}
    return out




def kubeflow_status_of(kind: str) -> StatusMirror:
    """`kubeflow_status` of kind `kind` (its name in the reasons), as a `JobKind.mirror_status`."""

    def mirror(source: Mapping[str, Any], twin: Mapping[str, Any] | None, *, now: str,
               blocked: str | None = None) -> JSON:
        return kubeflow_status(kind, source, twin, now=now, blocked=blocked)

    return mirror
