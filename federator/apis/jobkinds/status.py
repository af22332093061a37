"""What every served kind's status mirror reads from its twin TrainingJob (issue 28), and the conditions it writes:
`TwinState` (the twin's phase, placement, pod counts and conditions), `condition` (one condition, keeping its
times while its status does not change) and `hub_fields` (the hub's status.phase, status.cluster and status.epoch,
which every served kind's status carries beside its own fields: hub/kinds.py adds them to the schema and shows
Phase and Cluster as columns).

The kinds' mirrors are beside their translators (`JobKind.mirror_status`): kubeflowstatus.py, batchjob.py,
jobset.py, trainjob.py. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from federator.apis.views import Body

__all__ = ["META_TIMES", "TwinState", "condition", "existing_conditions", "failure", "hub_fields",
           "operator_conditions", "suspension", "twin_state", "was_true"]

#: metav1.Condition's times (JobSet, TrainJob)
META_TIMES = ("lastTransitionTime",)


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
        counts=counts, conditions=conditions, requeues=_count(status.get("requeues")))


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


def operator_conditions(status: dict[str, Any], twin: Mapping[str, Any] | None) -> dict[str, Any]:
    """`status` (a mirror's answer) with the conditions of the twin's member copy as its operator wrote them, when
    the member's own operator runs the job (operator mode: the twin's status.operator, written by status sync, of
    the twin's current cluster and epoch, with at least one condition); else `status` unchanged. The hub's
    status.phase, status.cluster and status.epoch stay."""
    if twin is None:
        return status
    state = twin_state(twin)
    operator = Body(twin).status.get("operator")
    if not isinstance(operator, Mapping) or operator.get("cluster") != state.cluster \
            or operator.get("epoch") != state.epoch:
        return status
    conditions = operator.get("conditions")
    if not isinstance(conditions, list) or not conditions:
        return status
    out = dict(status)
    out["conditions"] = [dict(c) for c in conditions if isinstance(c, Mapping)]
    return out
