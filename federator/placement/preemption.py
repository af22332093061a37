"""Preemption planning: the one cluster, and the fewest whole gangs to evict (or elastic ones to shrink) there.

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
- The gang must fit within its queue's nominal quota once the victims'
  quota is freed: no preemption in order to borrow (Kueue's classical
  default, borrowWithinCohort: Never), whatever the victims' reason.
  Otherwise a gang above its nominal quota could evict a lower-priority
  gang of its own queue and run on borrowed quota, which another queue of
  the cohort then reclaims for its own lower-priority gang, whose queue's
  higher-priority gang does the same: evictions without end (the trace
  replay with queues found such a cycle of four gangs at one instant). A
  preemptor is thus never on borrowed quota, and can be evicted again only
  by a gang of higher priority in its own queue.
- Fewest victims first, across all clusters. Candidates are ranked
  borrowed first, then lowest priority; among equal priority, the fewest
  GPU-seconds their eviction loses at the cycle's `now` (their GPUs times
  the seconds since their last checkpoint on their current copy, or since
  it started: `RunningGang.lost_gpu_seconds`; Profile
  `victims_by_lost_work`, on by default; off, every loss counts as 0),
  then most recently started (then uid): `QuotaLedger.eviction_rank`.
  Priority always comes first: a gang of higher priority is never evicted
  to save GPU-seconds. Among sets of the fewest victims the one whose most
  senior victim is least senior (ranks last) wins (then the next most
  senior, ...), then the cluster name. So among plans of as many victims,
  a plan of equal-priority victims that lose less wins; the number of
  victims still comes first. A gang that fits without victims gets no
  plan. Each victim of the plan carries the GPU-seconds its eviction
  loses (`Victim.lost_gpu_seconds`), which the decision's texts show.
- Shrink instead of kill. A candidate that is a running elastic gang with
  pods above its minimum (`RunningGang.removable`) may be shrunk instead of
  evicted: its newest pods above the minimum are removed (never one below
  it, never an older one before a newer one), it keeps running with the
  rest, and the removed pods' quota is freed like a victim's. The order of
  plans (`PlanKey`): fewest evicted gangs; among those, the least senior
  evicted set (the rule above, unchanged); then the fewest pods removed by
  shrinking; then, among as few pods, those of the least senior gangs (the
  fewest taken from the most senior gang first); then the cluster name. So
  a plan that only shrinks beats every eviction, a shrink never makes the
  search evict a more senior gang than it would have, and where no
  candidate is elastic the plans are exactly as before. A gang whose size
  is `fixed` (its member's operator cannot resize it in place) has nothing
  removable: it is evicted whole, if at all.

Search: best first over the clusters, exact wherever the budget allows.
- Each cluster enters a priority queue with a bound on the best plan it
  could hold: (fewest victims, then the best rank tuple, most senior
  first). The bound tightens each time the cluster comes up: first the
  best-ranked candidate that could be a plan by itself (for a one-role gang
  whose quota is not short: one whose eviction alone makes room for a pod;
  a borrowed gang of another queue only if the gang is within its nominal
  quota now), then the same per GPU model, then the search's exact best
  one-victim plan (or "two or more"), then its lower bound L. The search
  stops when the best plan found is no worse than every bound left, so the
  plan is the one an exhaustive search of every cluster would choose.
- Within a (cluster, model), over the candidates that free room on a node
  the gang may use (or quota it needs): L is a lower bound on the victims
  (per node, the fewest victims there whose amounts cover what x more pods
  ask, a victim on k of the gang's nodes counting 1/k; nodes added up by a
  small knapsack over the missing pods). The subsets of size L are tried
  first, in rank (colex) order: the first that fits is the plan, proven
  minimal. Otherwise a greedy plan (nodes with the fewest victims first,
  topped up in rank order while quota is short), pruned to an irreducible
  set, gives an upper bound U; if the subsets of sizes L..U number at most `budget`,
  they are all tried in rank order; if not, the greedy plan stands and
  `minimal` is False unless U == L.
- A (cluster, model) where some candidate can be shrunk is searched by
  `_ShrinkSearch` (it enters the best-first queue with the least bound):
  for each number of evicted gangs w from 0, the sets of w gangs in rank
  order; the first that lets the gang fit with every other elastic
  candidate shrunk to its minimum is the evicted set, then the shrinks
  are made as small as they can be, totals tried upward in the order
  above. Exact within `budget` fit checks; beyond it a greedy plan
  (irreducible: no victim can be spared, no shrink made smaller) with
  `minimal` False.
Checking a subset is O(nodes it touches): the gang's pods that fit on a
node are counted from the node's free resources, which for a one-role gang
is exactly what the packing finds (see `nodefit`); a gang of several roles
is confirmed by the packing itself. The chosen plan is always packed on the
view without the victims, and that packing is what the decision assigns.

Pure: no I/O, no clocks; reads snapshots and the ledger, returns values.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from immutables import Map

from federator.placement.admission import NO_ROOM, EvictionRank, QuotaLedger, RoomTerm, RunningGang, RunningPod
from federator.placement.decision import Preemption, Shrink, Victim, VictimReason
from federator.placement.framework import GANG_FIT, EvalContext, FederationStats, ResolvedProfile
from federator.placement.gang import GangRequest
from federator.placement.nodefit import GangFit, candidate_gpu_models, fit_gang, node_accepts_gang, pods_on
from federator.placement.plugins.gang_fit import EXCEEDS_CAPACITY, NO_MATCHING_NODES
from federator.placement.resources import Resources
from federator.placement.snapshot import ClusterSnapshot, NodeState

__all__ = ["SEARCH_BUDGET", "PreemptionPlan", "plan_preemption", "released_view"]

# Subsets checked exactly per (cluster, GPU model); beyond it the greedy plan stands.
SEARCH_BUDGET = 512
_QUOTA_FILTER = "quota"


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """Evict `victims` (whole) and shrink `shrinks` (these pods of each), all in `cluster`; then `fit`
    places the gang on `released`."""

    gang_uid: str
    cluster: str
    gpu_model: str | None
    victims: tuple[tuple[RunningGang, VictimReason], ...]
    fit: GangFit
    # The assumed view of `cluster` with the victims' amounts released: where `fit` was packed.
    released: ClusterSnapshot
    minimal: bool
    # Running elastic gangs shrunk toward their minimum, with the pods removed (newest first).
    shrinks: tuple[tuple[RunningGang, VictimReason, tuple[RunningPod, ...]], ...] = ()
    # When the plan was made: the victims' lost GPU-seconds are counted to it (None: not shown).
    now: float | None = None

    @property
    def victim_uids(self) -> tuple[str, ...]:
        return tuple(victim.uid for victim, _ in self.victims)

    @property
    def removed(self) -> list[RunningGang]:
        """What the plan takes away, as running gangs (a shrink as the part it removes): for quota checks."""
        return [victim for victim, _ in self.victims] + [shrunk_part(v, pods) for v, _, pods in self.shrinks]

    def preemption(self, fit: GangFit | None = None) -> Preemption:
        """The plan as the Decision shows it; `fit` is the preemptor's final fit if it grew (elastic)."""
        freed = {node for victim, _ in self.victims for node in victim.amounts}
        freed.update(pod.node for _, _, pods in self.shrinks for pod in pods)
        used = sorted({placement.node for placement in (fit or self.fit).placements} & freed)
        return Preemption(
            cluster=self.cluster,
            gpu_model=self.gpu_model,
            victims=tuple(
                Victim(
                    v.uid,
                    v.key,
                    v.queue,
                    v.priority,
                    v.borrowed,
                    reason,
                    lost_gpu_seconds=None if self.now is None else v.lost_gpu_seconds(self.now),
                    checkpointed=v.checkpointed_at is not None and v.checkpointed_at >= v.started_at,
                )
                for v, reason in self.victims
            ),
            nodes=tuple(used),
            minimal=self.minimal,
            shrinks=tuple(
                Shrink(v.uid, v.key, v.queue, v.priority, v.borrowed, reason, tuple(pod.name for pod in pods))
                for v, reason, pods in self.shrinks
            ),
        )


def shrunk_part(victim: RunningGang, pods: Sequence[RunningPod]) -> RunningGang:
    """The part of a running gang that a shrink removes, as a running gang of its own (same identity):
    its amounts and demand are the removed pods' requests."""
    amounts: dict[str, Resources] = {}
    demand = Resources()
    for pod in pods:
        previous = amounts.get(pod.node)
        amounts[pod.node] = pod.requests if previous is None else previous + pod.requests
        demand = demand + pod.requests
    return replace(victim, amounts=Map(amounts), demand=demand, pods=(), request=None)


# Eviction rank of a candidate (`QuotaLedger.eviction_rank`); smaller goes first.
Rank = EvictionRank


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


def _pods(free: Sequence[int], role: _Role) -> int:
    """Pods of the role that fit in `free` (cpu, memory, GPUs, rdma), at most its replicas."""
    return pods_on(free, role[1], role[2], role[3], role[4], role[0])


def _free_now(node: NodeState) -> tuple[int, int, int, int]:
    free = node.free
    return (free.cpu_milli, free.memory, free.gpu, free.rdma)


# Per node of a search: pods of each role may use it?, pods of each role that fit now, allocatable, allocated.
_NodeInfo = tuple[tuple[bool, ...], list[int], tuple[int, int, int, int], tuple[int, int, int, int]]
_Amount = tuple[int, int, int, int]


def _free_with(cap: _Amount, alloc: _Amount, freed: Sequence[int]) -> _Amount:
    return (
        max(0, cap[0] - max(0, alloc[0] - freed[0])),
        max(0, cap[1] - max(0, alloc[1] - freed[1])),
        max(0, cap[2] - max(0, alloc[2] - freed[2])),
        max(0, cap[3] - max(0, alloc[3] - freed[3])),
    )


class _Tally:
    """Pods of each role that fit once some candidates are released; updated one candidate at a time."""

    __slots__ = ("search", "freed", "node_pods", "pods")

    def __init__(self, search: _Search) -> None:
        self.search = search
        self.freed: dict[str, list[int]] = {}
        self.node_pods: dict[str, list[int]] = {}
        self.pods = list(search.base)

    def add(self, i: int) -> None:
        search = self.search
        roles = search.roles
        pods = self.pods
        for name, amount in search.amounts[i]:
            info = search.node_info(name)
            if info is None:
                continue
            accepts, before, cap, alloc = info
            slot = self.freed.get(name)
            if slot is None:
                slot = self.freed[name] = [0, 0, 0, 0]
                previous = before
            else:
                previous = self.node_pods[name]
            slot[0] += amount[0]
            slot[1] += amount[1]
            slot[2] += amount[2]
            slot[3] += amount[3]
            after = _free_with(cap, alloc, slot)
            now = [_pods(after, role) if accepts[r] else 0 for r, role in enumerate(roles)]
            for r in range(len(roles)):
                pods[r] += now[r] - previous[r]
            self.node_pods[name] = now

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
        *,
        quota_free: bool,
        keep_all: bool = False,
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
        self._nodes: dict[str, _NodeInfo | None] = {}
        self._packed: dict[frozenset[int], bool] = {}
        self._lower: int | None = None
        self._single: int | None = None
        self.quota_free = quota_free
        nodes = view.nodes
        kept: list[tuple[RunningGang, VictimReason, list[tuple[str, _Amount]]]] = []
        for victim, reason in candidates:
            amounts = [
                (name, (a.cpu_milli, a.memory, a.gpu, a.rdma)) for name, a in victim.amounts.items() if name in nodes
            ]
            useful = keep_all or any(any(self.accepts(name)) for name, _ in amounts)
            if not useful and not self.quota_free:
                useful = _shares_quota(victim, gang, model)
            if useful:
                kept.append((victim, reason, amounts))
        kept.sort(key=lambda entry: ledger.eviction_rank(entry[0]))  # already in rank order: a cheap check
        self.victims = [entry[0] for entry in kept]
        self.reasons = [entry[1] for entry in kept]
        self.amounts = [entry[2] for entry in kept]
        self.keys = [ledger.eviction_rank(v) for v in self.victims]
        # The quota rule's numbers now, and what each candidate's eviction frees of each (queue, cohort).
        self.terms = ledger.room_terms(gang, model)
        self.freeing = [[ledger.removal(gang, v, term.key) for term in self.terms] for v in self.victims]
        self.base = self._base_pods()
        self._gains: list[list[int]] | None = None

    # -------------------------------------------------------------- node arithmetic

    def accepts(self, name: str) -> tuple[bool, ...]:
        """For each role: may its pods use this node?"""
        known = self._accepts.get(name)
        if known is None:
            node = self.view.nodes[name]
            ok = node_accepts_gang(self.gang, node, cluster=self.view.name)
            known = tuple(ok and (not role[3] or node.model_key == self.model) for role in self.roles)
            self._accepts[name] = known
        return known

    def node_info(self, name: str) -> _NodeInfo | None:
        """What a tally needs of one node (None if no role of the gang may use it); cached."""
        if name in self._nodes:
            return self._nodes[name]
        accepts = self.accepts(name)
        info: _NodeInfo | None = None
        if any(accepts):
            node = self.view.nodes[name]
            cap, alloc = node.allocatable, node.allocated
            free = node.free
            now = (free.cpu_milli, free.memory, free.gpu, free.rdma)
            info = (
                accepts,
                [_pods(now, role) if accepts[r] else 0 for r, role in enumerate(self.roles)],
                (cap.cpu_milli, cap.memory, cap.gpu, cap.rdma),
                (alloc.cpu_milli, alloc.memory, alloc.gpu, alloc.rdma),
            )
        self._nodes[name] = info
        return info

    def alone_fits(self, i: int) -> bool:
        """Does releasing candidate `i` alone let every role fit node by node? (A tally of one, inlined.)"""
        roles = self.roles
        pods = list(self.base)
        for name, amount in self.amounts[i]:
            info = self.node_info(name)
            if info is None:
                continue
            accepts, before, cap, alloc = info
            after = _free_with(cap, alloc, amount)
            for r, role in enumerate(roles):
                if accepts[r]:
                    pods[r] += _pods(after, role) - before[r]
        return all(have >= role[0] for have, role in zip(pods, roles, strict=True))

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
                    total += _pods(_free_now(view.nodes[name]), role)
            out.append(total)
        return out

    @property
    def gains(self) -> list[list[int]]:
        """Most pods each candidate could add, per role (computed when first needed)."""
        if self._gains is None:
            self._gains = [self._max_gain(i) for i in range(len(self.victims))]
        return self._gains

    def _max_gain(self, i: int) -> list[int]:
        gains = [0] * len(self.roles)
        for name, freed in self.amounts[i]:
            accepts = self.accepts(name)
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
        """Within its queue's nominal quota once `chosen` are gone, whoever they are (see "Rules of the plan")."""
        freeing = self.freeing
        for t, term in enumerate(self.terms):
            of_queue = of_cohort = 0
            for i in chosen:
                q, c = freeing[i][t]
                of_queue += q
                of_cohort += c
            if term.room(of_queue, of_cohort, own_only=True) == NO_ROOM:
                return False
        return True

    def _quota_bound(self) -> int | None:
        """Fewest victims that could bring the gang within nominal (each resource alone, largest first)."""
        bound = 0
        for t, term in enumerate(self.terms):
            if term.room(own_only=True) != NO_ROOM:
                continue
            of_queue = sorted((f[t][0] for f in self.freeing), reverse=True)
            freed = 0
            for count, amount in enumerate(of_queue, start=1):
                freed += amount
                if term.room(freed, own_only=True) != NO_ROOM:
                    bound = max(bound, count)
                    break
            else:
                return None
        return bound

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
        if self._lower is None:
            self._lower = self._lower_bound()
        return self._lower

    def first_alone(self) -> int | None:
        """The best-ranked candidate whose eviction alone lets the gang fit, node by node and in quota."""
        if self._single is None:
            self._single = next(
                (
                    i
                    for i in range(len(self.victims))
                    if self.alone_fits(i) and self.quota_fits((i,)) and (len(self.roles) == 1 or self.fits((i,)))
                ),
                -1,
            )
        return self._single if self._single >= 0 else None

    def _lower_bound(self) -> int:
        if not self.victims:
            return 1
        # One victim suffices only if the gang fits without it alone.
        if self.first_alone() is not None:
            return 1
        quota = self._quota_bound()
        if quota is None:
            return len(self.victims) + 1
        bound = max(2, quota)
        for r, role in enumerate(self.roles):
            missing = role[0] - self.base[r]
            if missing <= 0:
                continue
            need = self._fewest_for(r, missing)
            if need is None:
                return len(self.victims) + 1
            bound = max(bound, need)
        return bound

    def _fewest_for(self, r: int, missing: int) -> int | None:
        """A lower bound on the victims needed for `missing` more pods of role `r`; None if impossible.

        Per node: x more pods there need at least x more pods' worth of every resource they ask, so at
        least the fewest victims on that node whose amounts there cover it (a victim on k of the
        role's nodes weighs 1/k, so a victim set is never charged more than its size). Nodes add up
        (a min-cost knapsack over `missing`, which is small).
        """
        role = self.roles[r]
        on_node: dict[str, list[tuple[float, tuple[int, int, int, int]]]] = {}
        for amounts in self.amounts:
            useful = [(name, freed) for name, freed in amounts if self.accepts(name)[r]]
            for name, freed in useful:
                on_node.setdefault(name, []).append((1.0 / len(useful), freed))
        best = [0.0] + [math.inf] * missing
        nodes = self.view.nodes
        for name, victims in on_node.items():
            free = _free_now(nodes[name])
            now = _pods(free, role)
            options: list[tuple[int, float]] = []
            for extra in range(1, missing + 1):
                cost = _cover(victims, [max(0, (now + extra) * asked - have) for asked, have in zip(role[1:], free, strict=True)])
                if cost is None:
                    break
                options.append((extra, cost))
            if not options:
                continue
            nxt = list(best)
            for have in range(missing + 1):
                if best[have] == math.inf:
                    continue
                for extra, cost in options:
                    reach = min(missing, have + extra)
                    if best[have] + cost < nxt[reach]:
                        nxt[reach] = best[have] + cost
            best = nxt
        if best[missing] == math.inf:
            return None
        return max(1, math.ceil(best[missing] - 1e-9))

    def _may_fit(self, chosen: Sequence[int]) -> bool:
        gains = self.gains
        for r, role in enumerate(self.roles):
            if self.base[r] + sum(gains[i][r] for i in chosen) < role[0]:
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

    def key_bound(self, size: int) -> tuple[Rank, ...]:
        """No subset of `size` victims here has a better (smaller) most-senior-first rank tuple than this."""
        if size == 1:
            alone = self.first_alone()
            return (self.keys[alone if alone is not None else 0],)
        return tuple(self.keys[i] for i in range(min(size, len(self.keys)) - 1, -1, -1))

    def plan(self, *, budget: int, at_most: int) -> tuple[list[int] | None, bool]:
        """The best subset of at most `at_most` victims (or None), and whether that answer is proven."""
        n = len(self.victims)
        everyone = list(range(n))
        lower = self.lower_bound()
        if n == 0 or lower > min(at_most, n):
            return None, True
        alone = self.first_alone()
        if alone is not None:
            return [alone], True  # the best-ranked plan of one victim: fewest, then least senior
        if not self.fits(everyone):
            return None, True
        # The common case first: a subset of the lower bound's size, in rank order, is proven best.
        spent = math.comb(n, lower)
        if spent <= budget:
            first = self._first_in_colex(range(lower, lower + 1))
            if first is not None:
                return first, True
            lower += 1
        else:
            spent = 0
        own = [i for i in everyone if self.reasons[i] is VictimReason.LOWER_PRIORITY]
        pools = (everyone, own) if own and len(own) < n else (everyone,)
        found = [chosen for pool in pools if (chosen := self._greedy_by_node(pool)) is not None]
        best = min(found, key=lambda chosen: (len(chosen), sorted(chosen, reverse=True))) if found else None
        upper = at_most if best is None else min(len(best), at_most)
        if lower > upper:
            return None, True
        if spent + sum(math.comb(n, k) for k in range(lower, upper + 1)) <= budget:
            # Exhaustive in rank order: the first subset that fits is the fewest and least senior.
            return self._first_in_colex(range(lower, upper + 1)), True
        if best is None or len(best) > at_most:
            return None, False
        if lower == len(best):
            return best, True
        if spent + sum(math.comb(n, k) for k in range(lower, len(best))) <= budget:
            smaller = self._first_in_colex(range(lower, len(best)))
            return (smaller if smaller is not None else best), True
        return best, False


# A plan's place in the order of plans (smaller is better): evicted gangs, their ranks (most senior first),
# pods removed by shrinks, the ranks of the removed pods' gangs (most senior first).
PlanKey = tuple[int, tuple[Rank, ...], int, tuple[Rank, ...]]


class _ShrinkSearch:
    """One (cluster, GPU model) where some candidates are elastic: evict whole gangs, shrink elastic ones.

    Options per candidate gang: keep it, shrink it by its j newest removable pods (1 <= j <= all of
    them: never below its minimum), or evict it whole. Plans are ordered by `PlanKey` (see the module
    docstring). Exact within `budget` fit checks: for each number of evicted gangs w (from 0), the sets
    W of w gangs in rank order (colex); the first that lets the gang fit with every other elastic gang
    shrunk to its minimum is the evicted set; then the fewest pods to remove, each total tried with
    the fewest taken from the most senior gang first. Beyond the budget, a greedy plan (W by rank until
    it fits with the others at their minimum, pruned most senior first, then each shrink made as small
    as it can be, most senior first): irreducible, not proven minimal.
    """

    def __init__(
        self,
        gang: GangRequest,
        view: ClusterSnapshot,
        model: str | None,
        candidates: list[tuple[RunningGang, VictimReason]],
        ledger: QuotaLedger,
        *,
        quota_free: bool,
    ) -> None:
        self.ledger = ledger
        self.gangs: list[tuple[RunningGang, VictimReason]] = sorted(
            candidates, key=lambda c: ledger.eviction_rank(c[0])
        )
        self.removable: list[tuple[RunningPod, ...]] = []
        options: list[tuple[RunningGang, VictimReason]] = []
        self.whole: list[int] = []
        self.shrink: list[list[int]] = []
        for victim, reason in self.gangs:
            pods = tuple(pod for pod in victim.removable if pod.node in view.nodes)
            self.removable.append(pods)
            self.whole.append(len(options))
            options.append((victim, reason))
            steps = []
            for j in range(1, len(pods) + 1):
                steps.append(len(options))
                options.append((shrunk_part(victim, pods[:j]), reason))
            self.shrink.append(steps)
        self.full = _Search(gang, view, model, options, ledger, quota_free=quota_free, keep_all=True)
        full = self.full
        self.useful = [
            g
            for g, (victim, _) in enumerate(self.gangs)
            if any(any(full.accepts(name)) for name in victim.amounts if name in view.nodes)
            or (not quota_free and _shares_quota(victim, gang, model))
        ]
        self.spent = 0

    @property
    def model(self) -> str | None:
        return self.full.model

    def fits_without(self) -> bool:
        return self.full.quota_free and self.full.fits([])

    def _fits(self, whole: Sequence[int], vector: dict[int, int]) -> bool:
        self.spent += 1
        chosen = [self.whole[g] for g in whole] + [self.shrink[g][j - 1] for g, j in vector.items() if j > 0]
        return self.full.fits(sorted(chosen))

    def key(self, whole: Sequence[int], vector: Mapping[int, int]) -> PlanKey:
        rank = self.ledger.eviction_rank
        evicted = tuple(sorted((rank(self.gangs[g][0]) for g in whole), reverse=True))
        pods = tuple(sorted((rank(self.gangs[g][0]) for g, j in vector.items() for _ in range(j)), reverse=True))
        return (len(whole), evicted, sum(vector.values()), pods)

    def _elastic(self, whole: Sequence[int]) -> list[int]:
        """Useful elastic gangs not evicted, most senior first."""
        return [g for g in reversed(self.useful) if self.removable[g] and g not in whole]

    def _fewest_pods(self, whole: Sequence[int], *, below: int, budget: int) -> dict[int, int] | None:
        """With `whole` evicted: the first shrink vector, in plan order, of fewer than `below` pods that fits."""
        elastic = self._elastic(whole)
        caps = [len(self.removable[g]) for g in elastic]
        top = min(below - 1, sum(caps))
        for total in range(top + 1):
            for vector in _compositions(total, caps):
                if self.spent > budget:
                    return None
                if self._fits(whole, dict(zip(elastic, vector, strict=True))):
                    return dict(zip(elastic, vector, strict=True))
        return None

    def plan(self, *, budget: int, at_most: int) -> tuple[list[int], dict[int, int], bool] | None:
        """The best plan with at most `at_most` evicted gangs: (evicted gang indices, gang -> pods removed,
        proven); None if there is none."""
        useful = self.useful
        n = len(useful)
        for w in range(min(at_most, n) + 1):
            for subset in _colex(n, w):
                whole = [useful[i] for i in subset]
                if self.spent > budget:
                    return self._greedy()
                at_minimum = {g: len(self.removable[g]) for g in self._elastic(whole)}
                if not self._fits(whole, at_minimum):
                    continue
                # The least senior set of w gangs that can make room: now the fewest pods to remove.
                vector = self._fewest_pods(whole, below=sum(at_minimum.values()) + 1, budget=budget)
                if vector is None:  # only when the budget ran out (the shrinks at the minimum fit)
                    return self._greedy()
                return whole, {g: j for g, j in vector.items() if j}, True
        return None

    def _greedy(self) -> tuple[list[int], dict[int, int], bool] | None:
        useful = self.useful
        whole: list[int] = []
        at_minimum = {g: len(self.removable[g]) for g in self._elastic(whole)}
        if not self._fits(whole, at_minimum):
            for g in useful:  # rank order: the least senior first
                whole.append(g)
                at_minimum = {e: len(self.removable[e]) for e in self._elastic(whole)}
                if self._fits(whole, at_minimum):
                    break
            else:
                return None
            for g in sorted(whole, reverse=True):  # prune, the most senior first
                trial = [e for e in whole if e != g]
                if self._fits(trial, {e: len(self.removable[e]) for e in self._elastic(trial)}):
                    whole = trial
        vector = {g: len(self.removable[g]) for g in self._elastic(whole)}
        for g in self._elastic(whole):  # the most senior first: take as few of its pods as still fits
            low, high = 0, vector[g]
            while low < high:
                middle = (low + high) // 2
                if self._fits(whole, {**vector, g: middle}):
                    high = middle
                else:
                    low = middle + 1
            vector[g] = low
        return sorted(whole), {g: j for g, j in vector.items() if j}, False


def _compositions(total: int, caps: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Ways to take `total` pods from gangs with these caps (the most senior first), fewest from the first."""
    if not caps:
        if total == 0:
            yield ()
        return
    rest = sum(caps[1:])
    for first in range(max(0, total - rest), min(total, caps[0]) + 1):
        for tail in _compositions(total - first, caps[1:]):
            yield (first, *tail)


def _cover(victims: list[tuple[float, tuple[int, int, int, int]]], need: list[int]) -> float | None:
    """Least total weight of victims whose amounts cover `need` in each resource (a lower bound); None if none."""
    if not any(need):
        return 0.0
    if any(sum(freed[k] for _, freed in victims) < need[k] for k in range(4)):
        return None
    if len(victims) <= 8:
        least: float | None = None
        for size in range(1, len(victims) + 1):
            for subset in itertools.combinations(victims, size):
                if all(sum(freed[k] for _, freed in subset) >= need[k] for k in range(4)):
                    weight = sum(w for w, _ in subset)
                    least = weight if least is None else min(least, weight)
        return least
    # Many victims on one node: per resource, the fewest largest amounts that cover it, at the least weight.
    count = 0
    for k in range(4):
        if need[k]:
            amounts = sorted((freed[k] for _, freed in victims), reverse=True)
            total = 0
            for taken, amount in enumerate(amounts, start=1):
                total += amount
                if total >= need[k]:
                    count = max(count, taken)
                    break
    return count * min(w for w, _ in victims)


def _shares_quota(victim: RunningGang, gang: GangRequest, model: str | None) -> bool:
    """Would evicting the victim free quota the gang asks for?"""
    total = gang.total
    if total.cpu_milli and victim.demand.cpu_milli:
        return True
    if total.memory and victim.demand.memory:
        return True
    return bool(total.gpu and model is not None and victim.gpu_model == model and victim.demand.gpu)


def _may_free_room(victim: RunningGang, gang: GangRequest, model: str | None) -> bool:
    """Could evicting the victim free room the gang can use? (No snapshot needed; exactness is kept.)

    A gang whose every role asks GPUs uses only nodes of `model`; a victim's GPU pods all sit on nodes
    of the model it is charged to, so it frees room there only if that is `model`, or through a pod
    without GPUs (which may sit on any node).
    """
    if model is None or any(not role.requests.gpu for role in gang.roles):
        return True
    return victim.gpu_model == model or victim.gpu_model is None or victim.has_gpu_free_pods


def _frees_a_pod(view: ClusterSnapshot, victim: RunningGang, gang: GangRequest, model: str | None) -> bool:
    """Does evicting the victim alone make room for one more pod of the gang on one of its nodes?

    Used only as a bound, for a one-role gang whose quota is not what is missing: a plan of one victim
    needs a victim that makes room for a pod by itself, and a plan of more victims loses to any plan of
    one; so (1 victim, the best rank among these) bounds every plan in the cluster. With `model` None,
    any GPU model is accepted.
    """
    nodes = view.nodes
    for name, amount in victim.amounts.items():
        node = nodes.get(name)
        if node is None or not node_accepts_gang(gang, node, cluster=view.name):
            continue
        cap, alloc = node.allocatable, node.allocated
        before = _free_now(node)
        after = _free_with(
            (cap.cpu_milli, cap.memory, cap.gpu, cap.rdma),
            (alloc.cpu_milli, alloc.memory, alloc.gpu, alloc.rdma),
            (amount.cpu_milli, amount.memory, amount.gpu, amount.rdma),
        )
        for role in gang.fit_order:
            r = role.requests
            if r.gpu and model is not None and node.model_key != model:
                continue
            shape = (role.replicas, r.cpu_milli, r.memory, r.gpu, r.rdma)
            if _pods(after, shape) > _pods(before, shape):
                return True
    return False


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
    """The cluster and fewest victims (and shrinks) that let `gang` fit (see the module docstring), or None.

    `views` are the assumed views the gang sees (the cycle's, minus the holds
    it may ignore); `excluded` are uids never to evict (gangs with a placed
    reservation still in flight, gangs already evicted in this cycle).
    """
    if not ledger.may_preempt(gang):
        return None
    # Best first. Each cluster enters with a bound on the best plan it could hold (fewest victims, then
    # the best possible rank tuple, most senior first), made tighter step by step as it comes up: its
    # filters and models (position -1), then per model the candidates that can free room there (no
    # search yet), then the search's exact lower bound. The search stops when the best plan found
    # beats every bound left. A bound never exceeds what its cluster can hold, so nothing is missed.
    # Bounds and plans are ordered like `PlanKey` (evicted gangs, their ranks, pods removed by shrinks); a
    # cluster with elastic candidates enters with the least bound (0, (), 0) and is searched when it comes up.
    Entry = tuple[
        int, tuple[Rank, ...], int, str, int, int, "_Search | None", list[tuple[RunningGang, VictimReason]]
    ]
    heap: list[Entry] = []
    by_name = {view.name: view for view in views}
    models_of: dict[str, tuple[str | None, ...]] = {}
    quota_free: dict[str | None, bool] = {}
    def free_of(model: str | None) -> bool:
        """Quota is not what is missing: the gang is within its nominal quota now on `model`."""
        known = quota_free.get(model)
        if known is None:
            known = quota_free[model] = ledger.fits_after(gang, model, (), own_only=True)
        return known

    terms: dict[str | None, list[RoomTerm]] = {}

    def alone_on(victim: RunningGang, model: str | None, view: ClusterSnapshot) -> bool:
        """Could evicting this candidate alone be a plan on `model`? It must bring the gang within its
        nominal quota by itself, and, when the gang does not fit by nodes there now (quota is not what
        is missing, so it fits nowhere by nodes, or it would have been placed; or the index says so),
        make room for a pod by itself (one-role gangs)."""
        model_terms = terms.get(model)
        if model_terms is None:
            model_terms = terms[model] = ledger.room_terms(gang, model)
        for term in model_terms:
            of_queue, of_cohort = ledger.removal(gang, victim, term.key)
            if term.room(of_queue, of_cohort, own_only=True) == NO_ROOM:
                return False
        if len(gang.roles) == 1 and (free_of(model) or view.name in short):
            return _frees_a_pod(view, victim, gang, model)
        return True

    def may_be_alone(victim: RunningGang, view: ClusterSnapshot) -> bool:
        """`alone_on` for some model the gang may use here (a gang that accepts any model: not known yet)."""
        if not gang.needs_gpu:
            return alone_on(victim, None, view)
        return any(alone_on(victim, m, view) for m in gang.gpu_models) if gang.gpu_models else True

    # A gang that names its models, none short of quota, can use room only on nodes of those models.
    named = gang.gpu_models if gang.needs_gpu and gang.gpu_models and all(map(free_of, gang.gpu_models)) else ()
    if named and any(not role.requests.gpu for role in gang.roles):
        named = ()
    # Clusters where the index alone says the gang does not fit now (memoised per index and shape).
    short: set[str] = set()
    precheck = dict(resolved.cheap_checks).get(GANG_FIT)
    def scan(name: str) -> Entry | None:
        """A cluster's first tightening: the best-ranked candidate that could be a plan by itself."""
        view = by_name[name]
        if precheck is not None:
            verdict = precheck(gang, view, EvalContext(now=now, profile=resolved.profile, federation=federation))
            if verdict.code in (EXCEEDS_CAPACITY, NO_MATCHING_NODES):
                return None  # no eviction helps: it does not fit even with every node empty
            if not verdict.ok:
                short.add(name)
        if ledger.has_shrinkable(name):
            return (0, (), 0, name, -1, 0, None, [])  # a plan may evict nobody and only shrink
        for victim, _ in ledger.iter_candidates(gang, name, excluded=excluded, models=named):
            if may_be_alone(victim, view):
                return (1, (ledger.eviction_rank(victim),), 0, name, -1, 0, None, [])
        # Candidates, but none is a plan by itself: plans here have two victims or more.
        lowest: Rank = (-1, 0, 0.0, 0.0, "")
        return (2, (lowest, lowest), 0, name, -1, 0, None, [])

    # Each cluster enters with its best-ranked candidate (any plan's best victim ranks no better); the scan
    # above runs only when that comes up (position -2).
    for name in sorted(by_name):
        head = next(ledger.iter_candidates(gang, name, excluded=excluded, models=named), None)
        if head is not None:
            if ledger.has_shrinkable(name):
                heapq.heappush(heap, (0, (), 0, name, -2, len(heap), None, []))
            else:
                heapq.heappush(heap, (1, (ledger.eviction_rank(head[0]),), 0, name, -2, len(heap), None, []))
    # (plan key, cluster, model position), and the search with its plan: whole victims (indices into
    # `_Search.victims`) or, from a `_ShrinkSearch`, (evicted gangs, gang -> pods removed).
    Best = tuple[
        tuple[int, tuple[Rank, ...], int, tuple[Rank, ...], str, int],
        "_Search | _ShrinkSearch",
        "list[int] | tuple[list[int], dict[int, int]]",
    ]
    best: Best | None = None
    proven = True
    serial = len(heap)
    while heap:
        size, keys, pods, name, position, _, search, candidates = heapq.heappop(heap)
        if best is not None and (size, keys, pods) >= best[0][:3]:
            break  # no plan left can beat the best one
        serial += 1
        if position == -2:
            scanned = scan(name)
            if scanned is not None:
                heapq.heappush(heap, (*scanned[:5], serial, None, []))
            continue
        if position < 0:
            candidates = ledger.victim_candidates(gang, name, excluded=excluded, models=named)
            models = models_of[name] = _cluster_models(gang, by_name[name], resolved, now=now, federation=federation)
            for index, model in enumerate(models):
                # When quota is not what is missing, only gangs that can free room on its nodes matter,
                # and a plan's best victim frees room for a pod by itself.
                pool = [c for c in candidates if _may_free_room(c[0], gang, model)] if free_of(model) else candidates
                view = by_name[name]
                if any(victim.removable for victim, _ in pool):
                    shrinking = _ShrinkSearch(gang, view, model, pool, ledger, quota_free=free_of(model))
                    if shrinking.fits_without():
                        return None  # it fits without victims: that is a placement, not a preemption
                    found = shrinking.plan(budget=budget, at_most=best[0][0] if best is not None else len(pool))
                    if found is not None:
                        whole, vector, sure = found
                        proven = proven and sure
                        plan_key = (*shrinking.key(whole, vector), name, index)
                        if best is None or plan_key < best[0]:
                            best = (plan_key, shrinking, (whole, vector))
                    continue
                first = next((v for v, _ in pool if alone_on(v, model, view)), None)
                if first is not None:
                    heapq.heappush(heap, (1, (ledger.eviction_rank(first),), 0, name, index, serial, None, pool))
                elif pool:
                    lowest = (-1, 0, 0.0, 0.0, "")
                    heapq.heappush(heap, (2, (lowest, lowest), 0, name, index, serial, None, pool))
            continue
        if search is None:
            model = models_of[name][position]
            search = _Search(gang, by_name[name], model, candidates, ledger, quota_free=free_of(model))
            if search.quota_free and search.fits([]):
                return None  # it fits without victims: that is a placement, not a preemption
            if search.victims:
                # One victim alone, or at least two: the exact bound waits until this cluster comes up again.
                quick = 1 if search.first_alone() is not None else 2
                heapq.heappush(heap, (quick, search.key_bound(quick), 0, name, position, serial, search, candidates))
            continue
        if size < search.lower_bound():
            lower = search.lower_bound()
            heapq.heappush(heap, (lower, search.key_bound(lower), 0, name, position, serial, search, candidates))
            continue
        at_most = best[0][0] if best is not None else len(search.victims)
        chosen, sure = search.plan(budget=budget, at_most=at_most)
        proven = proven and sure
        if chosen is None:
            continue
        key = (len(chosen), tuple(search.keys[i] for i in sorted(chosen, reverse=True)), 0, (), name, position)
        if best is None or key < best[0]:
            best = (key, search, chosen)
    if best is None:
        return None
    name = best[0][4]
    found_by = best[1]
    victims: list[tuple[RunningGang, VictimReason]]
    shrinks: list[tuple[RunningGang, VictimReason, tuple[RunningPod, ...]]] = []
    if isinstance(found_by, _ShrinkSearch):
        assert isinstance(best[2], tuple)
        whole, vector = best[2]
        victims = [found_by.gangs[g] for g in sorted(whole)]
        for g in sorted(vector):
            victim, reason = found_by.gangs[g]
            shrinks.append((victim, reason, found_by.removable[g][: vector[g]]))
        view, model = found_by.full.view, found_by.model
    else:
        assert isinstance(best[2], list)
        ordered = sorted(best[2])
        victims = [(found_by.victims[i], found_by.reasons[i]) for i in ordered]
        view, model = found_by.view, found_by.model
    released = released_view(view, [v for v, _ in victims] + [shrunk_part(v, pods) for v, _, pods in shrinks])
    fit = fit_gang(gang, released, gpu_model=model)
    if not fit.ok:
        return None  # cannot happen for a one-role gang (the count is exact); several roles were packed
    return PreemptionPlan(
        gang_uid=gang.uid,
        cluster=name,
        gpu_model=model,
        victims=tuple(victims),
        fit=fit,
        released=released,
        minimal=proven,
        shrinks=tuple(shrinks),
        now=now,
    )
