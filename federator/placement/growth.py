"""Growth of running elastic gangs: which may grow now, by how many pods, onto which nodes (a pure rule).

`plan_growth(running, snapshots, pending, profile, now=..., last_resized=..., cooldown_seconds=...)` is
what a periodic pass of the controller calls. A running gang is a candidate when its `request` is
elastic, it lists its `pods`, its size is not `fixed` (held back with that reason), some role runs
below its max_replicas, its cluster has a snapshot, no reservation of it is in flight, and it was not
resized within `cooldown_seconds` before `now` (the caller keeps the times: `last_resized`, uid ->
time of its placement or last resize, same clock).

Pending gangs first: the pending queue is run through `run_cycle` in explain mode (`preempt=False`)
on the same snapshots, reservations, queues and running gangs, and only what is left afterwards may be
grown into:
- node room: the views after that cycle (its placements and head-of-line holds reserved); a pending
  gang left unplaced did not fit even with all of that room, so nothing pending could use it. Holds
  are respected whatever the priorities.
- a cluster where a pending gang would preempt (its explain-mode plan) grows nothing: the free room
  is part of what the plan counts on.
- quota: a gang grows only within its queue's own nominal quota (it does not borrow to grow, as at
  placement), by the room rule of `admission` on the cycle's ledger: the usage after that cycle,
  what its unplaced pending gangs hold there, and the growth planned before it. No gang of a
  queue grows while a pending gang of that queue, or of another queue of its cohort, waits for
  quota (QuotaExceeded, not "never"): the quota it would take is what they wait for.
Gangs grow in order of priority (highest first), then start time (oldest first), key and uid, each
into what the ones before it left. A gang grows by whole size steps (see `gang`: every role to at
least its count at the step, never below what runs now), to the largest step whose new pods fit node
by node on its GPU model (the one it is charged to) and within quota (a binary search over steps).

The answer: one `Growth` per gang that grows (the new pods, with their role, index and node, the pods
per role after growing, the amounts), a reservation book with a PLACED reservation of the new pods'
amounts for each (pods = the gang's size after growing: it is released when the member shows them all,
like any placement's), and for every candidate that does not grow, why (`held_back`).

Pure: no I/O, no clocks (`now` and the resize times are arguments).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from immutables import Map

from federator.placement.admission import QUOTA_EXCEEDED, QueueQuota, RunningGang
from federator.placement.cycle import cycle_and_ledger
from federator.placement.decision import PodAssignment
from federator.placement.framework import PluginRegistry, Profile
from federator.placement.gang import GangRequest, RoleRequest
from federator.placement.nodefit import GangFit, fit_gang
from federator.placement.reservation import EMPTY_BOOK, Reservation, ReservationBook, ReservationKind
from federator.placement.resources import Resources
from federator.placement.snapshot import ClusterSnapshot

__all__ = ["Growth", "GrowthResult", "plan_growth"]

@dataclass(frozen=True, slots=True)
class Growth:
    """A running elastic gang grows now: create `added` (role, index, node) so that it runs `replicas`."""

    gang_uid: str
    gang_key: str
    cluster: str
    gpu_model: str | None
    # Pods per role once grown (every role of its request).
    replicas: Mapping[str, int]
    # The new pods: each role's indices continue after the highest it runs.
    added: tuple[PodAssignment, ...]
    # What the new pods take on each node (what the growth's reservation holds).
    amounts: Mapping[str, Resources] = field(default_factory=Map)

    @property
    def pods(self) -> int:
        return len(self.added)


@dataclass(frozen=True, slots=True)
class GrowthResult:
    growths: tuple[Growth, ...]
    # The book passed in, plus a PLACED reservation of each growth's new pods.
    reservations: ReservationBook
    # Candidates that do not grow now: uid -> why (cooling down, no room, quota, pending gangs first).
    held_back: Mapping[str, str] = field(default_factory=Map)


def _validate(
    running: Sequence[RunningGang], *, now: float, last_resized: Mapping[str, float], cooldown_seconds: float
) -> None:
    if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
        raise ValueError(f"now must be a finite number, got {now!r}")
    if (
        isinstance(cooldown_seconds, bool)
        or not isinstance(cooldown_seconds, int | float)
        or not math.isfinite(cooldown_seconds)
        or cooldown_seconds < 0
    ):
        raise ValueError(f"cooldown_seconds must be a finite number >= 0, got {cooldown_seconds!r}")
    if not isinstance(last_resized, Mapping):
        raise TypeError("last_resized must map gang uids to times")
    for uid, when in last_resized.items():
        if not isinstance(uid, str) or isinstance(when, bool) or not isinstance(when, int | float) or not math.isfinite(when):
            raise ValueError(f"last_resized must map gang uids to finite times, got {uid!r}: {when!r}")
    for gang in running:
        if not isinstance(gang, RunningGang):
            raise TypeError(f"{gang!r} is not a RunningGang")


def _delta_gang(gang: RunningGang, request: GangRequest, target: Mapping[str, int]) -> GangRequest | None:
    """The new pods as a fixed gang of their own (None if there are none): same placement constraints."""
    now = gang.replicas()
    roles = tuple(
        RoleRequest(role.name, target[role.name] - now.get(role.name, 0), role.requests)
        for role in request.roles
        if target[role.name] > now.get(role.name, 0)
    )
    if not roles:
        return None
    return GangRequest(
        key=request.key,
        uid=request.uid,
        roles=roles,
        network=request.network,
        gpu_models=(gang.gpu_model,) if gang.gpu_model is not None and any(r.requests.gpu for r in roles) else (),
        node_selector=request.node_selector,
        tolerations=request.tolerations,
        priority=request.priority,
        excluded_nodes=request.excluded_nodes,
        queue=request.queue,
    )


def _target(gang: RunningGang, request: GangRequest, step: int) -> dict[str, int]:
    """Pods per role at `step`, never fewer than run now, never more than the role's maximum."""
    now = gang.replicas()
    counts = request.counts(step)
    return {role.name: min(role.high, max(now.get(role.name, 0), counts[role.name])) for role in request.roles}


def _added(gang: RunningGang, fit: GangFit) -> tuple[PodAssignment, ...]:
    following: dict[str, int] = {}
    for pod in gang.pods:
        following[pod.role] = max(following.get(pod.role, 0), pod.index + 1)
    out: list[PodAssignment] = []
    for placement in fit.placements:
        start = following.get(placement.role, 0)
        out.extend(PodAssignment(placement.role, i, placement.node) for i in range(start, start + placement.pods))
        following[placement.role] = start + placement.pods
    out.sort(key=lambda p: (p.role, p.index))
    return tuple(out)


def plan_growth(
    running: Iterable[RunningGang],
    snapshots: Mapping[str, ClusterSnapshot],
    pending: Iterable[GangRequest],
    profile: Profile,
    *,
    now: float,
    last_resized: Mapping[str, float] = Map(),
    cooldown_seconds: float = 300.0,
    reservations: ReservationBook = EMPTY_BOOK,
    queues: Mapping[str, QueueQuota] | None = None,
    registry: PluginRegistry | None = None,
) -> GrowthResult:
    """Which running elastic gangs may grow now, by how many pods, where (see the module docstring).

    `running` is every running gang (as for `run_cycle`: quota usage counts them all); the elastic ones
    with `pods` and an elastic `request` are the candidates. `pending` is the pending queue.
    """
    running_list = list(running)
    pending_list = list(pending)
    _validate(running_list, now=now, last_resized=last_resized, cooldown_seconds=cooldown_seconds)
    held_back: dict[str, str] = {}
    candidates: list[RunningGang] = []
    for gang in running_list:
        request = gang.request
        if gang.fixed and request is not None and request.elastic:
            held_back[gang.uid] = gang.fixed
            continue
        if request is None or not request.elastic or not gang.pods or gang.cluster not in snapshots:
            continue
        counts = gang.replicas()
        if all(counts.get(role.name, 0) >= role.high for role in request.roles):
            continue  # at its maximum
        since = last_resized.get(gang.uid)
        if since is not None and now - since < cooldown_seconds:
            held_back[gang.uid] = f"resized at {since:g}; cooling down until {since + cooldown_seconds:g}"
            continue
        if reservations.get(gang.uid) is not None:
            held_back[gang.uid] = "a placement or growth of it is still in flight (its reservation is not released)"
            continue
        candidates.append(gang)
    if not candidates:
        return GrowthResult(growths=(), reservations=reservations, held_back=Map(held_back))

    # Pending gangs first: what is left after them is what may be grown into. The ledger, as the cycle
    # left it, counts its admissions and what its unplaced gangs hold in quota.
    first, ledger = cycle_and_ledger(
        pending_list, snapshots, profile, now=now, reservations=reservations, registry=registry, queues=queues,
        running=running_list, preempt=False,
    )
    views = dict(first.snapshots)
    by_uid = {gang.uid: gang for gang in pending_list}
    waiting_quota: dict[str, str] = {}  # queue -> the pending gang that waits for its quota
    preempting: dict[str, str] = {}  # cluster -> the pending gang that would preempt there
    for unplaced in first.unplaced:
        waiting = by_uid[unplaced.gang_uid]
        block = unplaced.quota
        if block is not None and block.code == QUOTA_EXCEEDED and not unplaced.never_fits:
            waiting_quota.setdefault(block.queue, waiting.key)
        if unplaced.preemption is not None:
            preempting.setdefault(unplaced.preemption.cluster, waiting.key)
    blocked_cohorts = {
        queues[name].cohort for name in waiting_quota if queues is not None and name in queues and queues[name].cohort
    }

    book = reservations
    growths: list[Growth] = []
    candidates.sort(key=lambda g: (-g.priority, g.started_at, g.key, g.uid))
    for gang in candidates:
        request = gang.request
        assert request is not None
        if gang.cluster in preempting:
            held_back[gang.uid] = f"pending gang {preempting[gang.cluster]} would preempt in {gang.cluster}"
            continue
        if ledger is not None and gang.queue:
            quota = ledger.queue(gang.queue)
            if gang.queue in waiting_quota:
                held_back[gang.uid] = f"pending gang {waiting_quota[gang.queue]} waits for quota of queue {gang.queue}"
                continue
            if quota is not None and quota.cohort and quota.cohort in blocked_cohorts:
                held_back[gang.uid] = f"a pending gang waits for quota in cohort {quota.cohort}"
                continue
        view = views[gang.cluster]
        best: tuple[dict[str, int], GangFit, GangRequest] | None = None
        why = "no room on its nodes for another size step"
        low, high = 0, request.steps
        while low <= high:
            middle = (low + high) // 2
            target = _target(gang, request, middle)
            delta = _delta_gang(gang, request, target)
            ok = False
            if delta is not None:
                short = ledger.nominal_shortfall(delta, gang.gpu_model) if ledger is not None and gang.queue else None
                if short is not None:
                    why = short
                else:
                    fit = fit_gang(delta, view, gpu_model=gang.gpu_model if delta.needs_gpu else None)
                    if fit.ok:
                        ok = True
                        if best is None or sum(target.values()) > sum(best[0].values()):
                            best = (target, fit, delta)
            if ok or delta is None:
                low = middle + 1
            else:
                high = middle - 1
        if best is None:
            held_back[gang.uid] = why
            continue
        target, fit, delta = best
        amounts = fit.node_amounts(delta)
        views[gang.cluster] = view.with_allocation_changes(amounts)
        if ledger is not None and gang.queue:
            ledger.charge(delta, gang.gpu_model)
        added = _added(gang, fit)
        book = book.reserve(
            Reservation(
                gang_uid=gang.uid,
                gang_key=gang.key,
                cluster=gang.cluster,
                kind=ReservationKind.PLACED,
                amounts=amounts,
                pods=sum(target.values()),
                resource_version=snapshots[gang.cluster].resource_version,
                created_at=now,
                expires_at=now + profile.reservation_ttl_seconds,
            )
        )
        growths.append(
            Growth(
                gang_uid=gang.uid,
                gang_key=gang.key,
                cluster=gang.cluster,
                gpu_model=gang.gpu_model,
                replicas=Map(target),
                added=added,
                amounts=Map(amounts),
            )
        )
    return GrowthResult(growths=tuple(growths), reservations=book, held_back=Map(held_back))
