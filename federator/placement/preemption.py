"""Preemption planning: the one cluster and the fewest whole gangs to evict so that a gang fits there.

Asked by the cycle for a gang with a queue that fits nowhere (or that its
queue cannot admit) when its queue's policy lets it evict someone:
- withinQueue LowerPriority: gangs of its own queue of strictly lower
  priority (never equal or higher);
- reclaimBorrowed: gangs that other queues of its cohort run on borrowed
  quota, but only for a gang its own queue's nominal quota covers once the
  plan's victims are gone (it takes back what it lent; it does not evict
  others in order to borrow). See `QuotaLedger.victim_candidates`.

Rules of the plan:
- Whole gangs only: a victim's every pod in the cluster is freed (its
  per-node `amounts`, from the member's pods), never part of a gang.
- The victims and the preemptor's cluster are chosen together: every
  victim runs in the cluster the gang then fits in, node by node, on the
  real (assumed) view with the victims' amounts released; room made in one
  cluster is never used to land elsewhere.
- The gang's queue must admit it once the victims' quota is freed (the
  same quota rules as admission).
- Fewest victims first, across all clusters. Candidates are ranked
  borrowed first, then lowest priority, then most recently started (then
  uid); among sets of the fewest victims the one whose most senior victim
  is least senior wins (then the next most senior, ...), then the cluster
  name. A gang that fits without victims gets no plan.

Search, per (cluster, GPU model), over the candidates that free room on a
node the gang may use or quota it needs:
1. Feasible at all? Release every candidate; if the gang still does not
   fit (or its queue still cannot admit it), no plan there.
2. Two greedy plans (candidates in rank order; whole nodes' worth of
   candidates, nodes with the fewest victims first), each pruned to an
   irreducible set (dropping the most senior victims first while the gang
   still fits): the better is an upper bound U.
3. A lower bound L: the gang's missing pods, against the most pods each
   victim could free (per node, the largest ceil(freed / asked) over the
   resources a pod asks).
4. If the subsets of size L..U number at most `budget`, they are checked
   in rank order (colex over the ranked candidates), smallest size first:
   the first that fits is the plan, proven minimal. Otherwise the greedy
   plan is used (`minimal` False unless L == U).
Checking a subset is O(nodes it touches): the gang's pods that fit on a
node are counted from the node's free resources, which for a one-role gang
is exactly what the packing finds (see `nodefit`); a gang of several roles
is confirmed by the packing itself. The chosen plan is always packed on the
view without the victims, and that packing is what the decision assigns.

Pure: no I/O, no clocks; reads snapshots and the ledger, returns values.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from federator.placement.admission import QuotaLedger, RunningGang
from federator.placement.decision import Preemption, Victim, VictimReason
from federator.placement.framework import GANG_FIT, EvalContext, FederationStats, ResolvedProfile
from federator.placement.gang import GangRequest
from federator.placement.nodefit import GangFit, candidate_gpu_models, fit_gang, node_accepts_gang
from federator.placement.resources import Resources
from federator.placement.snapshot import ClusterSnapshot, NodeState

__all__ = ["SEARCH_BUDGET", "PreemptionPlan", "plan_preemption", "released_view"]

# Subsets checked exactly per (cluster, GPU model); beyond it the greedy plan stands.
SEARCH_BUDGET = 512
_QUOTA_FILTER = "quota"


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """Evict `victims` (whole, all in `cluster`); then `fit` places the gang on `released`."""

    gang_uid: str
    cluster: str
    gpu_model: str | None
    victims: tuple[tuple[RunningGang, VictimReason], ...]
    fit: GangFit
    # The assumed view of `cluster` with the victims' amounts released: where `fit` was packed.
    released: ClusterSnapshot
    minimal: bool

    @property
    def victim_uids(self) -> tuple[str, ...]:
        return tuple(victim.uid for victim, _ in self.victims)

    def preemption(self) -> Preemption:
        freed = {node for victim, _ in self.victims for node in victim.amounts}
        used = sorted({placement.node for placement in self.fit.placements} & freed)
        return Preemption(
            cluster=self.cluster,
            gpu_model=self.gpu_model,
            victims=tuple(
                Victim(v.uid, v.key, v.queue, v.priority, v.borrowed, reason) for v, reason in self.victims
            ),
            nodes=tuple(used),
            minimal=self.minimal,
        )


def _rank(victim: RunningGang) -> tuple[int, int, float, str]:
    """Eviction order: borrowed first, lowest priority, most recently started, uid."""
    return (0 if victim.borrowed else 1, victim.priority, -victim.started_at, victim.uid)


def released_view(view: ClusterSnapshot, victims: Sequence[RunningGang]) -> ClusterSnapshot:
    """The view with the victims' per-node amounts taken off `allocated` (never below zero)."""
    changes: dict[str, Resources] = {}
    for victim in victims:
        for name, amount in victim.amounts.items():
            if name in view.nodes:
                previous = changes.get(name)
                changes[name] = amount if previous is None else previous + amount
    clamped: dict[str, Resources] = {}
    for name, amount in changes.items():
        allocated = view.nodes[name].allocated
        clamped[name] = Resources(
            min(amount.cpu_milli, allocated.cpu_milli),
            min(amount.memory, allocated.memory),
            min(amount.gpu, allocated.gpu),
            min(amount.rdma, allocated.rdma),
        )
    return view.with_allocation_changes(clamped, release=True)


# (replicas, cpu, memory, gpu, rdma) of one role.
_Role = tuple[int, int, int, int, int]


def _pods(free: tuple[int, int, int, int], role: _Role) -> int:
    n, rc, rm, rg, rr = role
    if rg:
        n = min(n, free[2] // rg)
    if rc:
        n = min(n, free[0] // rc)
    if rm:
        n = min(n, free[1] // rm)
    if rr:
        n = min(n, free[3] // rr)
    return n


def _free_after(node: NodeState, freed: list[int] | None) -> tuple[int, int, int, int]:
    cap, alloc = node.allocatable, node.allocated
    if freed is None:
        free = node.free
        return (free.cpu_milli, free.memory, free.gpu, free.rdma)
    return (
        max(0, cap.cpu_milli - max(0, alloc.cpu_milli - freed[0])),
        max(0, cap.memory - max(0, alloc.memory - freed[1])),
        max(0, cap.gpu - max(0, alloc.gpu - freed[2])),
        max(0, cap.rdma - max(0, alloc.rdma - freed[3])),
    )


class _Tally:
    """Pods of each role that fit once some candidates are released; updated one candidate at a time."""

    __slots__ = ("search", "freed", "pods")

    def __init__(self, search: _Search) -> None:
        self.search = search
        self.freed: dict[str, list[int]] = {}
        self.pods = list(search.base)

    def add(self, i: int) -> None:
        search = self.search
        nodes = search.view.nodes
        for name, amount in search.amounts[i]:
            accepts = search.accepts(name)
            if not any(accepts):
                continue
            node = nodes[name]
            slot = self.freed.get(name)
            before = _free_after(node, slot)
            if slot is None:
                slot = self.freed[name] = [0, 0, 0, 0]
            slot[0] += amount.cpu_milli
            slot[1] += amount.memory
            slot[2] += amount.gpu
            slot[3] += amount.rdma
            after = _free_after(node, slot)
            for r, role in enumerate(search.roles):
                if accepts[r]:
                    self.pods[r] += _pods(after, role) - _pods(before, role)

    def enough(self) -> bool:
        return all(have >= role[0] for have, role in zip(self.pods, self.search.roles, strict=True))


class _Search:
    """One (cluster, GPU model): which subsets of the ranked candidates let the gang fit."""

    def __init__(
        self,
        gang: GangRequest,
        view: ClusterSnapshot,
        model: str | None,
        candidates: list[tuple[RunningGang, VictimReason]],
        ledger: QuotaLedger,
    ) -> None:
        self.gang = gang
        self.view = view
        self.model = model
        self.ledger = ledger
        self.roles: list[_Role] = [
            (r.replicas, r.requests.cpu_milli, r.requests.memory, r.requests.gpu, r.requests.rdma)
            for r in gang.fit_order
        ]
        self._accepts: dict[str, tuple[bool, ...]] = {}
        self._packed: dict[frozenset[int], bool] = {}
        self.quota_free = ledger.fits_after(gang, model, (), own_only=False)
        nodes = view.nodes
        kept: list[tuple[RunningGang, VictimReason, list[tuple[str, Resources]]]] = []
        for victim, reason in candidates:
            amounts = [(name, amount) for name, amount in victim.amounts.items() if name in nodes]
            useful = any(any(self.accepts(name)) for name, _ in amounts)
            if not useful and not self.quota_free:
                useful = _shares_quota(victim, gang, model)
            if useful:
                kept.append((victim, reason, amounts))
        kept.sort(key=lambda entry: _rank(entry[0]))
        self.victims = [entry[0] for entry in kept]
        self.reasons = [entry[1] for entry in kept]
        self.amounts = [entry[2] for entry in kept]
        self.keys = [_rank(v) for v in self.victims]
        self.base = self._base_pods()
        # Most pods each candidate could add, per role: the lower bound's currency.
        self.gains = [self._max_gain(i) for i in range(len(self.victims))]

    # -------------------------------------------------------------- node arithmetic

    def accepts(self, name: str) -> tuple[bool, ...]:
        """For each role: may its pods use this node?"""
        known = self._accepts.get(name)
        if known is None:
            node = self.view.nodes[name]
            ok = node_accepts_gang(self.gang, node)
            known = tuple(ok and (not role[3] or node.model_key == self.model) for role in self.roles)
            self._accepts[name] = known
        return known

    def _base_pods(self) -> list[int]:
        """Pods of each role that fit on the free resources now (each role alone), as the packing walks."""
        view = self.view
        index = view.index
        tolerant = bool(self.gang.tolerations)
        out: list[int] = []
        for r, role in enumerate(self.roles):
            names: list[str] = []
            if role[3]:
                if self.model is not None:
                    for blocked in (False, True) if tolerant else (False,):
                        for k in index.free_counts.get((self.model, blocked), ()):
                            if k >= role[3]:
                                names.extend(index.buckets[(self.model, k, blocked)])
            else:
                for key in index.bucket_order:
                    if tolerant or not key[2]:
                        names.extend(index.buckets[key])
            total = 0
            for name in names:
                if self.accepts(name)[r]:
                    total += _pods(_free_after(view.nodes[name], None), role)
            out.append(total)
        return out

    def _max_gain(self, i: int) -> list[int]:
        gains = [0] * len(self.roles)
        for name, amount in self.amounts[i]:
            accepts = self.accepts(name)
            freed = (amount.cpu_milli, amount.memory, amount.gpu, amount.rdma)
            for r, role in enumerate(self.roles):
                if not accepts[r]:
                    continue
                best = 0
                for asked, got in zip(role[1:], freed, strict=True):
                    if asked and got:
                        best = max(best, -(-got // asked))
                gains[r] += min(best, role[0])
        return gains

    def tally(self, chosen: Sequence[int]) -> _Tally:
        tally = _Tally(self)
        for i in chosen:
            tally.add(i)
        return tally

    def quota_fits(self, chosen: Sequence[int]) -> bool:
        victims = [self.victims[i] for i in chosen]
        reclaiming = any(self.reasons[i] is VictimReason.RECLAIM_BORROWED for i in chosen)
        return self.ledger.fits_after(self.gang, self.model, victims, own_only=reclaiming)

    def fits(self, chosen: Sequence[int], tally: _Tally | None = None) -> bool:
        """Does the gang fit, node by node and in quota, once `chosen` are released?"""
        if not (tally or self.tally(chosen)).enough() or not self.quota_fits(chosen):
            return False
        if len(self.roles) == 1:
            return True
        # Several roles share nodes: the per-role counts are only necessary; the packing decides.
        key = frozenset(chosen)
        known = self._packed.get(key)
        if known is None:
            released = released_view(self.view, [self.victims[i] for i in chosen])
            known = fit_gang(self.gang, released, gpu_model=self.model).ok
            self._packed[key] = known
        return known

    # -------------------------------------------------------------- bounds and search

    def lower_bound(self) -> int:
        """No smaller subset can make the gang fit (>= 1: it does not fit without victims)."""
        bound = 1
        for r, role in enumerate(self.roles):
            missing = role[0] - self.base[r]
            if missing <= 0:
                continue
            total = 0
            for count, gain in enumerate(sorted((g[r] for g in self.gains), reverse=True), start=1):
                total += gain
                if total >= missing:
                    bound = max(bound, count)
                    break
            else:
                return len(self.victims) + 1
        return bound

    def _may_fit(self, chosen: Sequence[int]) -> bool:
        for r, role in enumerate(self.roles):
            if self.base[r] + sum(self.gains[i][r] for i in chosen) < role[0]:
                return False
        return True

    def _prune(self, chosen: list[int]) -> list[int]:
        """Drop the most senior victims first while the gang still fits: an irreducible set."""
        kept = sorted(chosen)
        for i in sorted(chosen, reverse=True):
            trial = [j for j in kept if j != i]
            if self.fits(trial):
                kept = trial
        return kept

    def _greedy_in_rank(self, pool: list[int]) -> list[int] | None:
        tally = _Tally(self)
        chosen: list[int] = []
        for i in pool:
            chosen.append(i)
            tally.add(i)
            if tally.enough() and self.fits(chosen, tally):
                return self._prune(chosen)
        return None

    def _greedy_by_node(self, pool: list[int]) -> list[int] | None:
        by_node: dict[str, list[int]] = {}
        for i in pool:
            for name, _ in self.amounts[i]:
                if any(self.accepts(name)):
                    by_node.setdefault(name, []).append(i)
        order = sorted(by_node, key=lambda name: (len(by_node[name]), max(by_node[name]), name))
        tally = _Tally(self)
        chosen: list[int] = []
        for name in order:
            if tally.enough():
                break
            for i in by_node[name]:
                if i not in chosen:
                    chosen.append(i)
                    tally.add(i)
        if not tally.enough():
            return None
        for i in pool:
            if self.fits(chosen, tally):
                return self._prune(chosen)
            if i not in chosen:
                chosen.append(i)
                tally.add(i)
        return self._prune(chosen) if self.fits(chosen, tally) else None

    def _first_in_colex(self, sizes: range) -> list[int] | None:
        n = len(self.victims)
        for k in sizes:
            for chosen in _colex(n, k):
                if self._may_fit(chosen) and self.fits(chosen):
                    return list(chosen)
        return None

    def plan(self, *, budget: int, at_most: int) -> tuple[list[int] | None, bool]:
        """The best subset of at most `at_most` victims (or None), and whether that answer is proven."""
        n = len(self.victims)
        everyone = list(range(n))
        if n == 0 or not self.fits(everyone):
            return None, True
        own = [i for i in everyone if self.reasons[i] is VictimReason.LOWER_PRIORITY]
        pools = (everyone, own) if own and len(own) < n else (everyone,)
        found = [
            chosen
            for pool in pools
            for greedy in (self._greedy_in_rank, self._greedy_by_node)
            if (chosen := greedy(pool)) is not None
        ]
        best = min(found, key=lambda chosen: (len(chosen), sorted(chosen, reverse=True))) if found else None
        lower = self.lower_bound()
        upper = at_most if best is None else min(len(best), at_most)
        if lower > upper:
            return None, True
        if sum(math.comb(n, k) for k in range(lower, upper + 1)) <= budget:
            # Exhaustive in rank order: the first subset that fits is the fewest and least senior.
            return self._first_in_colex(range(lower, upper + 1)), True
        if best is None or len(best) > at_most:
            return None, False
        if lower == len(best):
            return best, True
        if sum(math.comb(n, k) for k in range(lower, len(best))) <= budget:
            smaller = self._first_in_colex(range(lower, len(best)))
            return (smaller if smaller is not None else best), True
        return best, False


def _shares_quota(victim: RunningGang, gang: GangRequest, model: str | None) -> bool:
    """Would evicting the victim free quota the gang asks for?"""
    total = gang.total
    if total.cpu_milli and victim.demand.cpu_milli:
        return True
    if total.memory and victim.demand.memory:
        return True
    return bool(total.gpu and model is not None and victim.gpu_model == model and victim.demand.gpu)


def _colex(n: int, k: int) -> Iterator[tuple[int, ...]]:
    """k-subsets of range(n) as ascending tuples, in colex order (by largest element, then the next...)."""
    if k == 0:
        yield ()
        return
    for last in range(k - 1, n):
        for rest in _colex(last, k - 1):
            yield (*rest, last)


def _cluster_models(
    gang: GangRequest, view: ClusterSnapshot, resolved: ResolvedProfile, *, now: float, federation: FederationStats
) -> tuple[str | None, ...]:
    """The GPU models to try on this cluster if every filter but quota and gang-fit passes; () if one fails."""
    ctx = EvalContext(now=now, profile=resolved.profile, federation=federation)
    for name, check in resolved.cheap_checks:
        if name in (_QUOTA_FILTER, GANG_FIT):
            continue
        if not check(gang, view, ctx).ok:
            return ()
    if not gang.needs_gpu:
        return (None,)
    return ctx.gpu_models if ctx.gpu_models is not None else candidate_gpu_models(gang, view.index)


def plan_preemption(
    gang: GangRequest,
    views: Sequence[ClusterSnapshot],
    *,
    ledger: QuotaLedger,
    resolved: ResolvedProfile,
    now: float,
    federation: FederationStats,
    excluded: frozenset[str] | set[str] = frozenset(),
    budget: int = SEARCH_BUDGET,
) -> PreemptionPlan | None:
    """The cluster and fewest victims that let `gang` fit (see the module docstring), or None.

    `views` are the assumed views the gang sees (the cycle's, minus the holds
    it may ignore); `excluded` are uids never to evict (gangs with a placed
    reservation still in flight, gangs already evicted in this cycle).
    """
    searches: list[tuple[int, str, int, _Search]] = []
    for view in sorted(views, key=lambda v: v.name):
        candidates = ledger.victim_candidates(gang, view.name, excluded=excluded)
        if not candidates:
            continue
        for position, model in enumerate(_cluster_models(gang, view, resolved, now=now, federation=federation)):
            search = _Search(gang, view, model, candidates, ledger)
            if search.quota_free and search.fits([]):
                return None  # it fits without victims: that is a placement, not a preemption
            if search.victims:
                searches.append((search.lower_bound(), view.name, position, search))
    searches.sort(key=lambda entry: (entry[0], entry[1], entry[2]))
    # (victims, their rank keys most senior first, cluster, model position), search, chosen
    best: tuple[tuple[int, tuple[tuple[int, int, float, str], ...], str, int], _Search, list[int]] | None = None
    proven = True
    for lower, name, position, search in searches:
        if best is not None and lower > best[0][0]:
            break  # no cheaper plan is possible in the remaining clusters
        at_most = best[0][0] if best is not None else len(search.victims)
        chosen, sure = search.plan(budget=budget, at_most=at_most)
        proven = proven and sure
        if chosen is None:
            continue
        key = (len(chosen), tuple(search.keys[i] for i in sorted(chosen, reverse=True)), name, position)
        if best is None or key < best[0]:
            best = (key, search, chosen)
    if best is None:
        return None
    (_, _, name, _), search, chosen = best
    ordered = sorted(chosen)
    victims = [search.victims[i] for i in ordered]
    released = released_view(search.view, victims)
    fit = fit_gang(gang, released, gpu_model=search.model)
    if not fit.ok:
        return None  # cannot happen for a one-role gang (the count is exact); several roles were packed
    return PreemptionPlan(
        gang_uid=gang.uid,
        cluster=name,
        gpu_model=search.model,
        victims=tuple((search.victims[i], search.reasons[i]) for i in ordered),
        fit=fit,
        released=released,
        minimal=proven,
    )
