"""The placement cycle: pending gangs + frozen snapshots -> decisions, reasons, new reservations.

`run_cycle(gangs, snapshots, profile, now=..., reservations=..., queues=..., running=..., preempt=...)`:
1. Release reservations the snapshots now show, and expired ones; drop the
   holds of gangs that left the queue (`reservation`).
2. Build the assumed view of every cluster: fresh snapshot + reservations.
3. Order the queue: priority (desc), then submission time, then key, uid.
   With `queues`, fair share first (`admission.FairQueue`): the next gang
   comes from the queue with the lowest weighted dominant share, counting
   what this cycle admitted; gangs without a queue form a lane of share 0.
4. Admission (only with `queues`): a gang with a queue is considered only
   for the GPU models its queue has room for, own or borrowed
   (`admission.QuotaLedger.admit`; the "quota" filter applies it per
   cluster); a gang its queue cannot admit gets every cluster's row
   "QuotaExceeded" and an `Unplaced.quota` that says which quota, how much
   is used and what it waits for. Usage counts the running gangs and every
   gang this cycle admitted before it.
5. For each gang (`evaluate_gang`): run the profile's cheap filters on every
   cluster (the first "no" is that cluster's reason), bound each survivor's
   score, fit node by node in bound order only the clusters that could still
   win, take the best (ties by cluster name), reserve its node-level fit:
   the view of that cluster for the next gang is a new snapshot with the
   gang's amounts allocated. Nothing is mutated; the result carries the new
   views and book.
6. Preemption (only with `queues`, for a gang with a queue that fits
   nowhere or that its queue cannot admit, when its queue's policy allows
   evicting someone): `preemption.plan_preemption` picks the cluster and the
   fewest whole victim gangs of that same cluster. With `preempt=True` the
   gang is decided there: a Decision with `preemption` (the victims, which
   the caller evicts) and a PLACED reservation of exactly the gang's fit on
   the view without the victims. The victims' pods still count in the
   snapshot until they are gone, and the reservation counts on top, so no
   third gang can take the room meanwhile; the reservation is released, as
   any, when the member shows the gang's pods bound. The victims' quota is
   freed at once (the caller stops listing them as running). With
   `preempt=False` (explain mode, for describe) nothing is evicted or
   reserved: the plan is only reported, "fits on X after preempting A, B",
   in `Unplaced.preemption`. A plan may shrink running elastic gangs
   instead of evicting them (`CycleResult.shrinks`: the pods the caller
   removes); a gang shrunk in a cycle is no candidate again in that cycle.
   An elastic preemptor is planned at its minimum and placed at the
   largest size that fits where room was made, within its nominal quota.

Elastic gangs (roles with min_replicas < max_replicas): admission, the
filters, holds and preemption judge the gang at its minimum; a placed
gang takes the largest size that fits in the cluster chosen (see
`evaluate_gang`), is charged and reserved at that size, and its Decision
says the size (`replicas`).

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
- Quota (with `queues`): holds apply within the quota-admitted set. Only a
  gang its queue admits takes or keeps a node hold (on a model it has
  quota for); a held gang its queue no longer admits loses its hold. A
  holder also holds its demand in its queue's quota, and an aged gang its
  queue cannot admit holds its demand in the quota (at most one per queue;
  none for a gang its queue can never admit), so that the smaller gangs
  behind it in its queue backfill only into what is left: they cannot take
  the quota (or the nodes) that free up for the head first. Preemption
  comes before holds: a gang that can make room does not wait.

Pure: no I/O, no clocks (`now` is an argument), no mutation of inputs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from immutables import Map

from federator.placement.admission import (
    QUEUE_NOT_FOUND,
    Admission,
    FairQueue,
    QueueQuota,
    QueueUsage,
    QuotaLedger,
    RunningGang,
)
from federator.placement.decision import (
    Decision,
    Hold,
    PodAssignment,
    Preemption,
    Rejection,
    ScoreBreakdown,
    ScoreTable,
    Unplaced,
)
from federator.placement.framework import ScorePlugin
from federator.placement.framework import (
    GANG_FIT,
    EvalContext,
    FederationStats,
    PluginRegistry,
    Profile,
    ProfileError,
    ResolvedProfile,
)
from federator.placement.gang import GangRequest
from federator.placement.nodefit import GangFit, candidate_gpu_models, fit_gang_on_capacity, node_accepts_gang
from federator.placement.plugins import default_registry
from federator.placement.plugins.gang_fit import EXCEEDS_CAPACITY
from federator.placement.plugins.gang_fit import largest_fit
from federator.placement.plugins.budget import OVER_BUDGET
from federator.placement.plugins.tier import TIER_NOT_YET
from federator.placement.preemption import PreemptionPlan, plan_preemption
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

__all__ = ["CycleResult", "GangEvaluation", "cycle_and_ledger", "evaluate_gang", "queue_order", "run_cycle"]


@dataclass(frozen=True, slots=True)
class GangEvaluation:
    """One gang against every cluster: reasons for the rejected, ranked scores and fits for the rest."""

    why_not: Mapping[str, Rejection]
    ranked: tuple[ScoreBreakdown, ...]
    fits: Mapping[str, GangFit]
    # Clusters that passed the cheap filters but whose score bound could not beat the winner.
    outranked: Mapping[str, float]
    # The gang at the size each fitted cluster takes (an elastic gang's largest that fits; else the gang).
    sized: Mapping[str, GangRequest] = Map()


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
    # With queues: every queue's usage after the cycle (running + admitted - evicted), for its status.
    usage: Mapping[str, QueueUsage] = Map()
    # Uids of the running gangs this cycle's decisions preempt (in decision order): the caller evicts them.
    evictions: tuple[str, ...] = ()
    # Running elastic gangs this cycle's decisions shrink: uid -> names of the pods the caller removes.
    shrinks: Mapping[str, tuple[str, ...]] = Map()


def queue_order(gangs: Iterable[GangRequest]) -> list[GangRequest]:
    """Priority (highest first), then submission time (oldest first), then key and uid."""
    return sorted(gangs, key=lambda g: (-g.priority, g.submitted_at, g.key, g.uid))


_BOUND_SLACK = 1e-9  # keeps a bound >= the exact total despite float summation order


def evaluate_gang(
    gang: GangRequest,
    views: Sequence[ClusterSnapshot],
    *,
    resolved: ResolvedProfile,
    now: float,
    federation: FederationStats,
    admission: Admission | None = None,
) -> GangEvaluation:
    """Filter every view, then fit and score, best bound first, the clusters that could win.

    Exactness of the pruning: a cluster's total is the sum over score
    plugins of weight x normalised score, and normalisation does not depend
    on the other clusters. Plugins that do not read the fit are exact before
    it; those that do are at most 100, or at most their `bound` (a
    `BoundedScore` proves a tighter one from the index). So `bound` = exact
    part + those maxima x their weights is >= the cluster's total. Clusters are fitted in order of
    (bound desc, name); once the best total found beats a cluster's bound
    (or equals it and wins the tie on name), that cluster cannot be chosen
    and is listed in `outranked` with its bound instead of being fitted.
    The choice is therefore the one an exhaustive evaluation makes
    (`Profile.exhaustive` does that, for fuller explanations).

    An elastic gang is filtered, fitted and pre-fit scored at its minimum
    (see `framework`); gang-fit finds the largest size each fitted cluster
    takes (`GangEvaluation.sized`), which the post-fit scores see.
    """
    profile = resolved.profile
    elastic = gang if gang.elastic else None
    base = gang.minimum if elastic is not None else gang
    top = gang.maximum if elastic is not None else gang
    why_not: dict[str, Rejection] = {}
    pre = list(resolved.pre_fit_scores)
    post = list(resolved.post_fit_scores)
    # Fit-dependent scores are at most 100, or at most what their plugin's `bound` says before the fit.
    post_fixed = resolved.unbounded_max
    post_bounded = resolved.bounded_scores
    candidates: list[tuple[float, str, ClusterSnapshot, EvalContext, float]] = []
    cheap_checks = resolved.cheap_checks
    for snapshot in views:
        ctx = EvalContext(now=now, profile=profile, federation=federation, admission=admission, elastic=elastic)
        for filter_name, check in cheap_checks:
            result = check(base, snapshot, ctx)
            if not result.ok:
                why_not[snapshot.name] = Rejection(snapshot.name, filter_name, result.code, result.message, result.numbers)
                break
        else:
            partial = 0.0
            for plugin, weight in pre:
                partial += weight * plugin.normalize(plugin.score(base, snapshot, ctx), base, ctx)
            bound = partial + post_fixed
            for bounded, weight in post_bounded:
                bound += weight * bounded.bound(top, snapshot, ctx)
            candidates.append((round(bound + _BOUND_SLACK, 6), snapshot.name, snapshot, ctx, partial))
    candidates.sort(key=lambda c: (-c[0], c[1]))

    best: tuple[float, str] | None = None
    outranked: dict[str, float] = {}
    scored: list[tuple[str, EvalContext, float, list[float], list[float]]] = []
    for bound, name, snapshot, ctx, partial in candidates:
        if best is not None and not profile.exhaustive and (bound < best[0] or (bound == best[0] and name > best[1])):
            outranked[name] = bound
            continue
        for filter_name, check in resolved.exact_checks:
            result = check(base, snapshot, ctx)
            if not result.ok:
                why_not[name] = Rejection(name, filter_name, result.code, result.message, result.numbers)
                break
        else:
            if ctx.fit is None or not ctx.fit.ok:
                raise RuntimeError(f"filter {GANG_FIT!r} passed {name} without leaving a fit")
            sized = ctx.sized if ctx.sized is not None else base
            post_raws = [plugin.score(sized, snapshot, ctx) for plugin, _ in post]
            post_norms = [plugin.normalize(raw, sized, ctx) for (plugin, _), raw in zip(post, post_raws, strict=True)]
            total = partial
            for norm, (_, weight) in zip(post_norms, post, strict=True):
                total += weight * norm
            total = round(total, 6)
            # The breakdown's pre-fit parts are recomputed only for the few clusters scored in full.
            raws = [plugin.score(base, snapshot, ctx) for plugin, _ in pre]
            norms = [plugin.normalize(raw, base, ctx) for (plugin, _), raw in zip(pre, raws, strict=True)]
            scored.append((name, ctx, total, raws + post_raws, norms + post_norms))
            if best is None or total > best[0] or (total == best[0] and name < best[1]):
                best = (total, name)
    return GangEvaluation(
        why_not=why_not,
        ranked=_breakdowns(scored, pre=pre, post=post),
        fits={name: ctx.fit for name, ctx, _, _, _ in scored if ctx.fit is not None},
        outranked=outranked,
        sized={name: ctx.sized if ctx.sized is not None else base for name, ctx, _, _, _ in scored},
    )


def _breakdowns(
    scored: list[tuple[str, EvalContext, float, list[float], list[float]]],
    *,
    pre: list[tuple[ScorePlugin, float]],
    post: list[tuple[ScorePlugin, float]],
) -> tuple[ScoreBreakdown, ...]:
    if not scored:
        return ()
    columns = pre + post
    table = ScoreTable(
        plugins=tuple(plugin.name for plugin, _ in columns),
        weights=tuple(weight for _, weight in columns),
        raw=tuple({name: raws[i] for name, _, _, raws, _ in scored} for i in range(len(columns))),
        normalized=tuple({name: norms[i] for name, _, _, _, norms in scored} for i in range(len(columns))),
    )
    breakdowns = [
        ScoreBreakdown(
            cluster=name,
            total=total,
            gpu_model=ctx.fit.gpu_model if ctx.fit is not None else None,
            nodes_used=ctx.fit.nodes_used if ctx.fit is not None else 0,
            table=table,
        )
        for name, ctx, total, _, _ in scored
    ]
    breakdowns.sort(key=lambda b: (-b.total, b.cluster))
    return tuple(breakdowns)


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


def _replicas(gang: GangRequest) -> Map[str, int]:
    """Pods per role of a fixed-size gang (an elastic gang's chosen size)."""
    return Map({role.name: role.replicas for role in gang.roles})


def _ranges(gang: GangRequest) -> Map[str, tuple[int, int]]:
    """(min, max) of the elastic roles of a request."""
    return Map({role.name: (role.low, role.high) for role in gang.roles if role.elastic})


def _preemptor_size(gang: GangRequest, plan: PreemptionPlan, ledger: QuotaLedger) -> tuple[GangRequest, GangFit]:
    """An elastic preemptor, planned at its minimum, at the largest size that fits where room was made.

    It grows only into room that is free once the plan's victims and shrinks are gone (no further
    victims), and within its queue's nominal quota (a preemptor never borrows; see `preemption`).
    """
    low, high = 0, gang.steps
    removed = plan.removed
    while low < high:
        middle = (low + high + 1) // 2
        if ledger.fits_after(gang.sized(middle), plan.gpu_model, removed, own_only=True):
            low = middle
        else:
            high = middle - 1
    return largest_fit(gang, plan.released, plan.fit, cap=low)


def _hold_still_valid(
    hold: Reservation,
    gang: GangRequest,
    *,
    evaluation: GangEvaluation,
    view: ClusterSnapshot | None,
    models: tuple[str, ...] | None,
) -> bool:
    if view is None:
        return False
    rejection = evaluation.why_not.get(hold.cluster)
    if rejection is None or rejection.filter != GANG_FIT or rejection.code == EXCEEDS_CAPACITY:
        return False
    for name, amount in hold.amounts.items():
        node = view.nodes.get(name)
        if node is None or not node_accepts_gang(gang, node, cluster=view.name) or not amount.fits_in(node.allocatable):
            return False
        if models is not None and amount.gpu and node.model_key not in models:
            return False  # its queue no longer has quota for the held nodes' model
    return True


def _hold_model(hold: Reservation, view: ClusterSnapshot | None) -> str | None:
    """The GPU model of a hold's nodes (None for a gang without GPUs)."""
    if view is None:
        return None
    for name, amount in sorted(hold.amounts.items()):
        node = view.nodes.get(name)
        if amount.gpu and node is not None:
            return node.model_key
    return None


def _ready_fraction(gang: GangRequest, view: ClusterSnapshot, *, amounts: Mapping[str, Resources]) -> float:
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
    *,
    evaluation: GangEvaluation,
    views: Mapping[str, ClusterSnapshot],
    holds_per_cluster: Counter[str],
    profile: Profile,
    models: tuple[str, ...] | None = None,
) -> tuple[str, GangFit, float] | None:
    best: tuple[float, str, GangFit] | None = None
    for cluster in sorted(evaluation.why_not):
        rejection = evaluation.why_not[cluster]
        if rejection.filter != GANG_FIT or rejection.code == EXCEEDS_CAPACITY:
            continue
        if holds_per_cluster[cluster] >= profile.max_holds_per_cluster:
            continue
        view = views[cluster]
        tried: tuple[str | None, ...] = (
            tuple(m for m in candidate_gpu_models(gang, view.index) if models is None or m in models)
            if gang.needs_gpu
            else (None,)
        )
        for model in tried:
            fit = fit_gang_on_capacity(gang, view, gpu_model=model)
            if not fit.ok:
                continue
            fraction = _ready_fraction(gang, view, amounts=fit.node_amounts(gang))
            if best is None or fraction > best[0]:
                best = (fraction, cluster, fit)
    if best is None:
        return None
    return best[1], best[2], best[0]


def _never_fits(evaluation: GangEvaluation) -> bool:
    """True if every cluster that passes the other filters lacks the capacity, even with all nodes free (a
    tier of the gang's spill-over order not open yet, or a cluster closed while its queue is over budget, may
    still have room: waiting helps then)."""
    rejections = evaluation.why_not.values()
    return any(r.code == EXCEEDS_CAPACITY for r in rejections) and all(
        r.code == EXCEEDS_CAPACITY or (r.filter != GANG_FIT and r.code not in (TIER_NOT_YET, OVER_BUDGET))
        for r in rejections
    )


def _validate_inputs(
    gangs: Sequence[GangRequest],
    snapshots: Mapping[str, ClusterSnapshot],
    *,
    profile: Profile,
    queues: Mapping[str, QueueQuota] | None,
    running: Sequence[RunningGang],
) -> None:
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
    if queues is not None and "quota" not in profile.filters:
        raise ProfileError(f"profile {profile.name!r}: queues were given, so filter 'quota' is required")
    for other in running:
        if isinstance(other, RunningGang) and other.uid in seen:
            raise ValueError(f"gang {other.key} ({other.uid}) is both pending and running; it must be one or the other")


def run_cycle(
    gangs: Iterable[GangRequest],
    snapshots: Mapping[str, ClusterSnapshot],
    profile: Profile,
    *,
    now: float,
    reservations: ReservationBook = EMPTY_BOOK,
    registry: PluginRegistry | None = None,
    queues: Mapping[str, QueueQuota] | None = None,
    running: Iterable[RunningGang] = (),
    preempt: bool = True,
) -> CycleResult:
    """Place as many gangs as fit; see the module docstring for the order, admission, preemption and holds.

    `queues` (None: no quota, no fair share, no preemption: placement as
    before queues existed) maps queue names to their quota; `running` lists
    every gang that holds quota and room (placed or running, not finished,
    not being evicted), with its per-node amounts. `preempt=False` only
    explains what preemption would do.
    """
    return cycle_and_ledger(
        gangs, snapshots, profile, now=now, reservations=reservations, registry=registry, queues=queues,
        running=running, preempt=preempt,
    )[0]


def cycle_and_ledger(
    gangs: Iterable[GangRequest],
    snapshots: Mapping[str, ClusterSnapshot],
    profile: Profile,
    *,
    now: float,
    reservations: ReservationBook = EMPTY_BOOK,
    registry: PluginRegistry | None = None,
    queues: Mapping[str, QueueQuota] | None = None,
    running: Iterable[RunningGang] = (),
    preempt: bool = True,
) -> tuple[CycleResult, QuotaLedger | None]:
    """`run_cycle`, and its quota ledger as the cycle left it (None without queues): for rules that come
    after the cycle and must see its admissions and holds (`growth`)."""
    pending = list(gangs)
    running_list = list(running)
    _validate_inputs(pending, snapshots, profile=profile, queues=queues, running=running_list)
    resolved = (registry or default_registry()).resolve(profile)

    book, released_list = expire_reservations(reservations, now=now)
    released = list(released_list)
    for name in sorted(book.clusters() & snapshots.keys()):
        book, shown = reconcile_reservations(book, snapshots[name], now=now)
        released.extend(shown)
    pending_uids = {gang.uid for gang in pending}
    for reservation in book.holds():
        if reservation.gang_uid not in pending_uids or reservation.cluster not in snapshots:
            book = book.forget(reservation.gang_uid)
            released.append(
                Release(reservation.gang_uid, reservation.cluster, reservation.kind, ReleaseReason.DROPPED)
            )

    names = sorted(snapshots)
    reserved = book.clusters()
    views: dict[str, ClusterSnapshot] = {
        name: assume(snapshots[name], book) if name in reserved else snapshots[name] for name in names
    }
    federation = FederationStats.of(snapshots[name] for name in names)
    holds: dict[str, Reservation] = {r.gang_uid: r for r in book.holds()}
    holder_priority = {gang.uid: gang.priority for gang in pending}
    holds_per_cluster: Counter[str] = Counter(r.cluster for r in holds.values())

    ledger: QuotaLedger | None = None
    order: Iterable[GangRequest]
    if queues is None:
        order = queue_order(pending)
    else:
        models: set[str] = set()
        for name in names:
            models.update(snapshots[name].index.gpu_models)
        ledger = QuotaLedger(
            queues, running_list, models=models, lost_work_at=now if profile.victims_by_lost_work else None
        )
        order = FairQueue(pending, ledger)
    # Gangs whose placement is still in flight are no victims (their pods may not even exist yet).
    in_flight = {r.gang_uid for r in book if r.kind is ReservationKind.PLACED}
    # Gangs shrunk in this cycle are no candidates again until the next (their pods are still in the views).
    shrunk: set[str] = set()

    decisions: list[Decision] = []
    unplaced: list[Unplaced] = []
    already_placed: list[str] = []
    evictions: list[str] = []
    shrinks: dict[str, tuple[str, ...]] = {}

    def drop_hold(gang: GangRequest, hold: Reservation, reason: ReleaseReason) -> None:
        nonlocal book
        if hold.cluster in views:
            views[hold.cluster] = views[hold.cluster].with_allocation_changes(hold.amounts, release=True)
        del holds[gang.uid]
        holds_per_cluster[hold.cluster] -= 1
        book = book.forget(gang.uid)
        released.append(Release(gang.uid, hold.cluster, ReservationKind.HOLD, reason))

    def reserve_placed(gang: GangRequest, cluster: str, amounts: Mapping[str, Resources]) -> None:
        """Reserve a decision's amounts; `gang` is the gang at the size placed."""
        nonlocal book
        views[cluster] = views[cluster].with_allocation_changes(amounts)
        book = book.reserve(
            Reservation(
                gang_uid=gang.uid,
                gang_key=gang.key,
                cluster=cluster,
                kind=ReservationKind.PLACED,
                amounts=amounts,
                pods=gang.pod_count,
                resource_version=snapshots[cluster].resource_version,
                created_at=now,
                expires_at=now + profile.reservation_ttl_seconds,
            )
        )

    for gang in order:
        existing = book.get(gang.uid)
        if existing is not None and existing.kind is ReservationKind.PLACED:
            already_placed.append(gang.uid)
            continue
        admission = ledger.admit(gang) if ledger is not None and gang.queue else None
        # Everything but the choice of size judges an elastic gang at its minimum (see `gang`).
        base = gang.minimum if gang.elastic else gang
        own_hold = holds.get(gang.uid)
        # What this gang may use: everything except its own hold and holds of lower-priority gangs.
        ignored = [
            hold
            for uid, hold in holds.items()
            if uid == gang.uid or holder_priority[uid] < gang.priority
        ]
        gang_views = views
        if ignored:
            gang_views = dict(views)
            for hold in ignored:
                gang_views[hold.cluster] = gang_views[hold.cluster].with_allocation_changes(
                    hold.amounts, release=True
                )
        evaluation = evaluate_gang(
            gang,
            [gang_views[name] for name in names],
            resolved=resolved,
            now=now,
            federation=federation,
            admission=admission,
        )

        if evaluation.ranked:
            best = evaluation.ranked[0]
            fit = evaluation.fits[best.cluster]
            chosen = evaluation.sized.get(best.cluster, base)
            if own_hold is not None:
                drop_hold(gang, own_hold, ReleaseReason.SUPERSEDED)
            reserve_placed(chosen, best.cluster, fit.node_amounts(chosen))
            decisions.append(
                Decision(
                    gang_key=gang.key,
                    gang_uid=gang.uid,
                    cluster=best.cluster,
                    gpu_model=fit.gpu_model,
                    assignment=_assignment(chosen, fit),
                    resource_version=snapshots[best.cluster].resource_version,
                    decided_at=now,
                    why_not=Map(evaluation.why_not),
                    scores=evaluation.ranked,
                    outranked=Map(evaluation.outranked),
                    queue=admission.queue if admission is not None else "",
                    borrowed=admission.borrows(fit.gpu_model) if admission is not None else False,
                    replicas=_replicas(chosen),
                    ranges=_ranges(gang),
                )
            )
            if ledger is not None:
                ledger.charge(chosen, fit.gpu_model)
            continue

        would_preempt: Preemption | None = None
        if ledger is not None and admission is not None and not admission.never and (
            admission.block is None or admission.block.code != QUEUE_NOT_FOUND
        ):
            plan = plan_preemption(
                base,
                [gang_views[name] for name in names],
                ledger=ledger,
                resolved=resolved,
                now=now,
                federation=federation,
                excluded=in_flight | shrunk if shrunk else in_flight,
            )
            if plan is not None and preempt:
                if own_hold is not None:
                    drop_hold(gang, own_hold, ReleaseReason.SUPERSEDED)
                removed = plan.removed
                chosen, fit = base, plan.fit
                if gang.elastic:
                    chosen, fit = _preemptor_size(gang, plan, ledger)
                within_nominal = ledger.fits_after(chosen, plan.gpu_model, removed, own_only=True)
                for victim, _ in plan.victims:
                    ledger.evict(victim)
                    evictions.append(victim.uid)
                for victim, _, pods in plan.shrinks:
                    ledger.shrink(victim, pods)
                    shrunk.add(victim.uid)
                    shrinks[victim.uid] = tuple(pod.name for pod in pods)
                ledger.charge(chosen, plan.gpu_model)
                reserve_placed(chosen, plan.cluster, fit.node_amounts(chosen))
                decisions.append(
                    Decision(
                        gang_key=gang.key,
                        gang_uid=gang.uid,
                        cluster=plan.cluster,
                        gpu_model=plan.gpu_model,
                        assignment=_assignment(chosen, fit),
                        resource_version=snapshots[plan.cluster].resource_version,
                        decided_at=now,
                        why_not=Map({k: v for k, v in evaluation.why_not.items() if k != plan.cluster}),
                        scores=(),
                        queue=gang.queue,
                        borrowed=not within_nominal,
                        preemption=plan.preemption(fit),
                        replicas=_replicas(chosen),
                        ranges=_ranges(gang),
                    )
                )
                continue
            if plan is not None:
                would_preempt = plan.preemption()

        admitted = admission is None or admission.admitted
        allowed = admission.models if admission is not None and gang.needs_gpu and admission.models else None
        if admission is None:
            never_fits = _never_fits(evaluation)
        elif admission.admitted:
            # A model left out for lack of quota may fit some day: only claim "never" if none was.
            never_fits = _never_fits(evaluation) and not admission.narrowed
        else:
            never_fits = admission.never
        hold_out: Hold | None = None
        if admitted and own_hold is not None and _hold_still_valid(
            own_hold, base, evaluation=evaluation, view=gang_views.get(own_hold.cluster), models=allowed
        ):
            view = gang_views[own_hold.cluster]
            hold_out = Hold(
                own_hold.cluster, tuple(sorted(own_hold.amounts)), _ready_fraction(base, view, amounts=own_hold.amounts)
            )
            if ledger is not None:
                ledger.hold(base, _hold_model(own_hold, view))
        else:
            if own_hold is not None:
                drop_hold(gang, own_hold, ReleaseReason.DROPPED)
            aged = now - gang.submitted_at >= profile.hold_after_seconds
            if admitted and aged and not never_fits and profile.max_holds_per_cluster > 0:
                choice = _choose_hold(
                    base,
                    evaluation=evaluation,
                    views=gang_views,
                    holds_per_cluster=holds_per_cluster,
                    profile=profile,
                    models=allowed,
                )
                if choice is not None:
                    cluster, capacity_fit, fraction = choice
                    amounts = capacity_fit.node_amounts(base)
                    hold = Reservation(
                        gang_uid=gang.uid,
                        gang_key=gang.key,
                        cluster=cluster,
                        kind=ReservationKind.HOLD,
                        amounts=amounts,
                        pods=base.pod_count,
                        resource_version=snapshots[cluster].resource_version,
                        created_at=now,
                    )
                    book = book.reserve(hold)
                    holds[gang.uid] = hold
                    holds_per_cluster[cluster] += 1
                    views[cluster] = views[cluster].with_allocation_changes(amounts)
                    hold_out = Hold(cluster, tuple(sorted(amounts)), fraction)
                    if ledger is not None:
                        ledger.hold(base, capacity_fit.gpu_model)
        block = admission.block if admission is not None else None
        if (
            ledger is not None
            and block is not None
            and block.code != QUEUE_NOT_FOUND
            and not never_fits
            and now - gang.submitted_at >= profile.hold_after_seconds
            and not ledger.holds_quota(gang.queue)
        ):
            ledger.hold(base, ledger.hold_model(base), quota_hold=True)
            block = replace(block, holding=True)
        unplaced.append(
            Unplaced(
                gang_key=gang.key,
                gang_uid=gang.uid,
                why_not=Map(evaluation.why_not),
                hold=hold_out,
                never_fits=never_fits,
                quota=block,
                preemption=would_preempt,
            )
        )

    result = CycleResult(
        decisions=tuple(decisions),
        unplaced=tuple(unplaced),
        reservations=book,
        snapshots=Map(views),
        released=tuple(released),
        already_placed=tuple(already_placed),
        usage=ledger.usage() if ledger is not None else Map(),
        evictions=tuple(evictions),
        shrinks=Map(shrinks),
    )
    return result, ledger
