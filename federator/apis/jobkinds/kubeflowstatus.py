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
from federator.apis.jobkinds.status import condition, hub_fields, twin_state
from federator.apis.views import Body

__all__ = ["kubeflow_status", "kubeflow_status_of"]


_TIMES = ("lastUpdateTime", "lastTransitionTime")


def _condition(existing: list[Any], ctype: str, status: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return condition(existing, ctype, status, reason, message, now, times=_TIMES)


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
        status["conditions"] = conditions
        return hub_fields(status, None)
    state = twin_state(twin)
    phase, said = state.phase, state.said
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
    status["replicaStatuses"] = _replica_statuses(twin, state.counts)
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
    return hub_fields(status, state)


def _replica_statuses(twin: Mapping[str, Any], counts: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
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
    out: dict[str, Any] = {}
    for role, rtype in names.items():
        c = counts.get(role, {})
        out[str(rtype)] = {"active": c.get("pending", 0) + c.get("running", 0),
                           "succeeded": c.get("succeeded", 0), "failed": c.get("failed", 0)}
    return out


def kubeflow_status_of(kind: str) -> StatusMirror:
    """`kubeflow_status` of kind `kind` (its name in the reasons), as a `JobKind.mirror_status`."""

    def mirror(source: Mapping[str, Any], twin: Mapping[str, Any] | None, *, now: str,
               blocked: str | None = None) -> JSON:
        return kubeflow_status(kind, source, twin, now=now, blocked=blocked)

    return mirror
