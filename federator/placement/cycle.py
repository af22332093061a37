"""The placement cycle: pending gangs + frozen snapshots -> decisions, reasons, new reservations.

`run_cycle(gangs, snapshots, profile, now=..., reservations=...)`:
1. Release reservations the snapshots now show, and expired ones; drop the
   holds of gangs that left the queue (`reservation`).
2. Build the assumed view of every cluster: fresh snapshot + reservations.
3. Order the queue: priority (desc), then submission time, then key, uid.
4. For each gang: run the profile's filters on every cluster (the first "no"
   is that cluster's reason), score the clusters that pass, take the best
   (ties by cluster name), reserve its node-level fit: the view of that
   cluster for the next gang is a new snapshot with the gang's amounts
   allocated. Nothing is mutated; the result carries the new views and book.

Head-of-line rule: bounded backfill with hold aging.
- A gang that fits nowhere does not block the queue: the gangs behind it
  are still placed wherever they fit (backfill).
- So that a big gang is not starved by a stream of smaller ones, once a
  gang has waited `profile.hold_after_seconds` since submission and still
  fits nowhere, it takes a HOLD on the cluster that comes closest: among the
  clusters that pass every filter but gang-fit and could hold the gang if
  their nodes were empty, the one whose chosen nodes already have the
  largest share of what the gang needs free (ties by name). The hold keeps
  exactly the gang's requests on exactly those nodes (`fit_gang_on_capacity`).
- Smaller gangs may backfill anywhere except into held amounts: a held node
  offers others only what is left after the hold, so as running pods on it
  finish, what they free goes to the held gang, never to a backfill. Once
  the held nodes have drained enough, the gang fits and is placed.
- Holds are respected by every gang of equal or lower priority than the
  holder; a gang of strictly higher priority ignores them (priority still
  means priority).
- Bounded: at most `profile.max_holds_per_cluster` holds per cluster (1 by
  default), so aged giants cannot freeze the federation; a hold whose
  cluster stops passing the filters, or whose nodes change under it, is
  dropped and chosen again. A gang that exceeds every cluster's capacity
  gets no hold (it never fits) and says so.

Pure: no I/O, no clocks (`now` is an argument), no mutation of inputs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from immutables import Map

from federator.placement.decision import Decision, Hold, PodAssignment, Rejection, ScoreBreakdown, ScoreTable, Unplaced
from federator.placement.framework import GANG_FIT, EvalContext, PluginRegistry, Profile, ResolvedProfile
from federator.placement.gang import GangRequest
from federator.placement.nodefit import GangFit, candidate_gpu_models, fit_gang_on_capacity, node_accepts_gang
from federator.placement.plugins import default_registry
from federator.placement.plugins.gang_fit import EXCEEDS_CAPACITY
from federator.placement.reservation import (
    EMPTY_BOOK,
    Release,
    ReleaseReason,
    Reservation,
    ReservationBook,
    ReservationKind,
    assume,
    expire_reservations,
    reconcile_reservations,
)
from federator.placement.resources import Resources
from federator.placement.snapshot import ClusterSnapshot

__all__ = ["CycleResult", "GangEvaluation", "dataset_catalog", "evaluate_gang", "queue_order", "run_cycle"]


@dataclass(frozen=True, slots=True)
class GangEvaluation:
    """One gang against every cluster: reasons for the rejected, ranked scores and fits for the rest."""

    why_not: Mapping[str, Rejection]
    ranked: tuple[ScoreBreakdown, ...]
    fits: Mapping[str, GangFit]


@dataclass(frozen=True, slots=True)
class CycleResult:
    decisions: tuple[Decision, ...]
    unplaced: tuple[Unplaced, ...]
    # Reservations after the cycle: the caller keeps them for the next cycle.
    reservations: ReservationBook
    # Assumed views after the cycle (fresh snapshots + every reservation).
    snapshots: Mapping[str, ClusterSnapshot]
    released: tuple[Release, ...]
    # Gangs passed in that already hold a placed reservation (not decided again).
    already_placed: tuple[str, ...]


def queue_order(gangs: Iterable[GangRequest]) -> list[GangRequest]:
    """Priority (highest first), then submission time (oldest first), then key and uid."""
    return sorted(gangs, key=lambda g: (-g.priority, g.submitted_at, g.key, g.uid))


def dataset_catalog(snapshots: Iterable[ClusterSnapshot]) -> Map[str, int]:
    """Size of every dataset any cluster declares (the largest declaration wins)."""
    sizes: dict[str, int] = {}
    for snapshot in snapshots:
        for name, size in snapshot.info.datasets.items():
            if size > sizes.get(name, -1):
                sizes[name] = size
    return Map(sizes)


def _rank(
    gang: GangRequest,
    passed: list[tuple[ClusterSnapshot, EvalContext]],
    resolved: ResolvedProfile,
) -> tuple[ScoreBreakdown, ...]:
    if not passed:
        return ()
    totals = {snapshot.name: 0.0 for snapshot, _ in passed}
    raws: list[dict[str, float]] = []
    norms: list[dict[str, float]] = []
    for plugin, weight in resolved.scores:
        raw = {snapshot.name: plugin.score(gang, snapshot, ctx) for snapshot, ctx in passed}
        norm = plugin.normalize(raw)
        for name in totals:
            totals[name] += norm[name] * weight
        raws.append(raw)
        norms.append(norm)
    table = ScoreTable(
        plugins=tuple(plugin.name for plugin, _ in resolved.scores),
        weights=tuple(weight for _, weight in resolved.scores),
        raw=tuple(raws),
        normalized=tuple(norms),
    )
    breakdowns: list[ScoreBreakdown] = []
    for snapshot, ctx in passed:
        name = snapshot.name
        fit = ctx.fit
        breakdowns.append(
            ScoreBreakdown(
                cluster=name,
                # Rounded so that float noise never decides between equal clusters; the name does.
                total=round(totals[name], 6),
                gpu_model=fit.gpu_model if fit is not None else None,
                nodes_used=fit.nodes_used if fit is not None else 0,
                table=table,
            )
        )
    breakdowns.sort(key=lambda b: (-b.total, b.cluster))
    return tuple(breakdowns)


def evaluate_gang(
    gang: GangRequest,
    views: Sequence[ClusterSnapshot],
    resolved: ResolvedProfile,
    *,
    now: float,
    dataset_sizes: Mapping[str, int],
) -> GangEvaluation:
    """Filter every view (in the given order), then score and rank the ones that pass."""
    why_not: dict[str, Rejection] = {}
    passed: list[tuple[ClusterSnapshot, EvalContext]] = []
    profile = resolved.profile
    filters = resolved.filters
    for snapshot in views:
        ctx = EvalContext(now=now, profile=profile, dataset_sizes=dataset_sizes)
        for plugin in filters:
            result = plugin.filter(gang, snapshot, ctx)
            if not result.ok:
                why_not[snapshot.name] = Rejection(
                    snapshot.name, plugin.name, result.code, result.message, result.numbers
                )
                break
        else:
            if ctx.fit is None or not ctx.fit.ok:
                raise RuntimeError(f"filter {GANG_FIT!r} passed {snapshot.name} without leaving a fit")
            passed.append((snapshot, ctx))
    fits = {snapshot.name: ctx.fit for snapshot, ctx in passed if ctx.fit is not None}
    return GangEvaluation(why_not=why_not, ranked=_rank(gang, passed, resolved), fits=fits)


def _assignment(gang: GangRequest, fit: GangFit) -> tuple[PodAssignment, ...]:
    next_index: dict[str, int] = {role.name: 0 for role in gang.roles}
    pods: list[PodAssignment] = []
    for placement in fit.placements:
        start = next_index[placement.role]
        for i in range(start, start + placement.pods):
            pods.append(PodAssignment(placement.role, i, placement.node))
        next_index[placement.role] = start + placement.pods
    pods.sort(key=lambda p: (p.role, p.index))
    return tuple(pods)


def _hold_still_valid(
    hold: Reservation, gang: GangRequest, evaluation: GangEvaluation, view: ClusterSnapshot | None
) -> bool:
    if view is None:
        return False
    rejection = evaluation.why_not.get(hold.cluster)
    if rejection is None or rejection.filter != GANG_FIT or rejection.code == EXCEEDS_CAPACITY:
        return False
    for name, amount in hold.amounts.items():
        node = view.nodes.get(name)
        if node is None or not node_accepts_gang(gang, node) or not amount.fits_in(node.allocatable):
            return False
    return True


def _ready_fraction(gang: GangRequest, view: ClusterSnapshot, amounts: Mapping[str, Resources]) -> float:
    """Share of the held amount (GPUs, or CPU for GPU-less gangs) that is already free on the held nodes."""
    wanted = 0
    free = 0
    for name, amount in amounts.items():
        node = view.nodes[name]
        if gang.needs_gpu:
            wanted += amount.gpu
            free += min(amount.gpu, node.free.gpu)
        else:
            wanted += amount.cpu_milli
            free += min(amount.cpu_milli, node.free.cpu_milli)
    return free / wanted if wanted else 1.0


def _choose_hold(
    gang: GangRequest,
    evaluation: GangEvaluation,
    views: Mapping[str, ClusterSnapshot],
    holds_per_cluster: Counter[str],
    profile: Profile,
) -> tuple[str, GangFit, float] | None:
    best: tuple[float, str, GangFit] | None = None
    for cluster in sorted(evaluation.why_not):
        rejection = evaluation.why_not[cluster]
        if rejection.filter != GANG_FIT or rejection.code == EXCEEDS_CAPACITY:
            continue
        if holds_per_cluster[cluster] >= profile.max_holds_per_cluster:
            continue
        view = views[cluster]
        models: tuple[str | None, ...] = (
            tuple(candidate_gpu_models(gang, view.index)) if gang.needs_gpu else (None,)
        )
        for model in models:
            fit = fit_gang_on_capacity(gang, view, gpu_model=model)
            if not fit.ok:
                continue
            fraction = _ready_fraction(gang, view, fit.node_amounts(gang))
            if best is None or fraction > best[0]:
                best = (fraction, cluster, fit)
    if best is None:
        return None
    return best[1], best[2], best[0]


def _validate_inputs(gangs: Sequence[GangRequest], snapshots: Mapping[str, ClusterSnapshot]) -> None:
    for name, snapshot in snapshots.items():
        if not isinstance(snapshot, ClusterSnapshot):
            raise TypeError(f"snapshot {name!r} is not a ClusterSnapshot")
        if snapshot.name != name:
            raise ValueError(f"snapshot stored under {name!r} is for cluster {snapshot.name!r}")
    seen: set[str] = set()
    for gang in gangs:
        if not isinstance(gang, GangRequest):
            raise TypeError(f"{gang!r} is not a GangRequest")
        if gang.uid in seen:
            raise ValueError(f"gang uid {gang.uid!r} appears twice in one cycle")
        seen.add(gang.uid)


def run_cycle(
    gangs: Iterable[GangRequest],
    snapshots: Mapping[str, ClusterSnapshot],
    profile: Profile,
    *,
    now: float,
    reservations: ReservationBook = EMPTY_BOOK,
    registry: PluginRegistry | None = None,
) -> CycleResult:
    """Place as many gangs as fit; see the module docstring for the order and the head-of-line rule."""
    pending = list(gangs)
    _validate_inputs(pending, snapshots)
    resolved = (registry or default_registry()).resolve(profile)

    book, released_list = expire_reservations(reservations, now=now)
    released = list(released_list)
    for name in sorted(snapshots):
        book, shown = reconcile_reservations(book, snapshots[name], now=now)
        released.extend(shown)
    pending_uids = {gang.uid for gang in pending}
    for reservation in book.holds():
        if reservation.gang_uid not in pending_uids or reservation.cluster not in snapshots:
            book = book.forget(reservation.gang_uid)
            released.append(
                Release(reservation.gang_uid, reservation.cluster, reservation.kind, ReleaseReason.DROPPED)
            )

    views: dict[str, ClusterSnapshot] = {name: assume(snapshots[name], book) for name in sorted(snapshots)}
    dataset_sizes = dataset_catalog(snapshots.values())
    holds: dict[str, Reservation] = {r.gang_uid: r for r in book.holds()}
    holder_priority = {gang.uid: gang.priority for gang in pending}
    holds_per_cluster: Counter[str] = Counter(r.cluster for r in holds.values())

    decisions: list[Decision] = []
    unplaced: list[Unplaced] = []
    already_placed: list[str] = []

    for gang in queue_order(pending):
        existing = book.get(gang.uid)
        if existing is not None and existing.kind is ReservationKind.PLACED:
            already_placed.append(gang.uid)
            continue
        own_hold = holds.get(gang.uid)
        # What this gang may use: everything except its own hold and holds of lower-priority gangs.
        ignored = [
            hold
            for uid, hold in holds.items()
            if uid == gang.uid or holder_priority[uid] < gang.priority
        ]
        gang_views = dict(views)
        for hold in ignored:
            gang_views[hold.cluster] = gang_views[hold.cluster].with_allocation_changes(hold.amounts, release=True)
        ordered = [gang_views[name] for name in sorted(gang_views)]
        evaluation = evaluate_gang(gang, ordered, resolved, now=now, dataset_sizes=dataset_sizes)

        if evaluation.ranked:
            best = evaluation.ranked[0]
            fit = evaluation.fits[best.cluster]
            amounts = fit.node_amounts(gang)
            if own_hold is not None:
                views[own_hold.cluster] = views[own_hold.cluster].with_allocation_changes(
                    own_hold.amounts, release=True
                )
                del holds[gang.uid]
                holds_per_cluster[own_hold.cluster] -= 1
                book = book.forget(gang.uid)
                released.append(
                    Release(gang.uid, own_hold.cluster, ReservationKind.HOLD, ReleaseReason.SUPERSEDED)
                )
            views[best.cluster] = views[best.cluster].with_allocation_changes(amounts)
            chosen = snapshots[best.cluster]
            book = book.reserve(
                Reservation(
                    gang_uid=gang.uid,
                    gang_key=gang.key,
                    cluster=best.cluster,
                    kind=ReservationKind.PLACED,
                    amounts=amounts,
                    pods=gang.pod_count,
                    resource_version=chosen.resource_version,
                    created_at=now,
                    expires_at=now + profile.reservation_ttl_seconds,
                )
            )
            decisions.append(
                Decision(
                    gang_key=gang.key,
                    gang_uid=gang.uid,
                    cluster=best.cluster,
                    gpu_model=fit.gpu_model,
                    assignment=_assignment(gang, fit),
                    resource_version=chosen.resource_version,
                    decided_at=now,
                    why_not=Map(evaluation.why_not),
                    scores=evaluation.ranked,
                )
            )
            continue

        never_fits = bool(evaluation.why_not) and all(
            r.code == EXCEEDS_CAPACITY or r.filter != GANG_FIT for r in evaluation.why_not.values()
        ) and any(r.code == EXCEEDS_CAPACITY for r in evaluation.why_not.values())
        hold_out: Hold | None = None
        if own_hold is not None and _hold_still_valid(
            own_hold, gang, evaluation, gang_views.get(own_hold.cluster)
        ):
            view = gang_views[own_hold.cluster]
            hold_out = Hold(
                own_hold.cluster, tuple(sorted(own_hold.amounts)), _ready_fraction(gang, view, own_hold.amounts)
            )
        else:
            if own_hold is not None:
                if own_hold.cluster in views:
                    views[own_hold.cluster] = views[own_hold.cluster].with_allocation_changes(
                        own_hold.amounts, release=True
                    )
                del holds[gang.uid]
                holds_per_cluster[own_hold.cluster] -= 1
                book = book.forget(gang.uid)
                released.append(Release(gang.uid, own_hold.cluster, ReservationKind.HOLD, ReleaseReason.DROPPED))
            aged = now - gang.submitted_at >= profile.hold_after_seconds
            if aged and not never_fits and profile.max_holds_per_cluster > 0:
                choice = _choose_hold(gang, evaluation, gang_views, holds_per_cluster, profile)
                if choice is not None:
                    cluster, capacity_fit, fraction = choice
                    amounts = capacity_fit.node_amounts(gang)
                    hold = Reservation(
                        gang_uid=gang.uid,
                        gang_key=gang.key,
                        cluster=cluster,
                        kind=ReservationKind.HOLD,
                        amounts=amounts,
                        pods=gang.pod_count,
                        resource_version=snapshots[cluster].resource_version,
                        created_at=now,
                    )
                    book = book.reserve(hold)
                    holds[gang.uid] = hold
                    holds_per_cluster[cluster] += 1
                    views[cluster] = views[cluster].with_allocation_changes(amounts)
                    hold_out = Hold(cluster, tuple(sorted(amounts)), fraction)
        unplaced.append(
            Unplaced(
                gang_key=gang.key,
                gang_uid=gang.uid,
                why_not=Map(evaluation.why_not),
                hold=hold_out,
                never_fits=never_fits,
            )
        )

    return CycleResult(
        decisions=tuple(decisions),
        unplaced=tuple(unplaced),
        reservations=book,
        snapshots=Map(views),
        released=tuple(released),
        already_placed=tuple(already_placed),
    )
