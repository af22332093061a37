"""Property tests (hypothesis) for the placement invariants.

- A gang is never placed where it does not fit node by node (checked by an
  independent checker over all decisions of a cycle together, which also
  means no double-booking), nor across two cycles whose reservations carry.
- The same inputs give the same decisions, whatever the input order.
- Every cluster not chosen has a reason or a lower score; every rejection
  has a filter, a code and a message.
- For a one-role gang the greedy fit is exact: if gang-fit rejects a
  cluster, an independent count of how many pods fit node by node agrees.
"""

from __future__ import annotations

import dataclasses
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import GI, check_decisions, cluster, node

from federator.placement import (
    ClusterSnapshot,
    GangRequest,
    Profile,
    Resources,
    RoleRequest,
    Taint,
    Toleration,
    run_cycle,
)
from federator.placement.cycle import CycleResult

MODELS = ["A100", "H100"]


@st.composite
def node_states(draw: st.DrawFn, name: str) -> object:
    gpus = draw(st.sampled_from([0, 4, 8]))
    cpu = draw(st.sampled_from([32, 64, 96]))
    mem = draw(st.sampled_from([256, 512]))
    return node(
        name,
        gpus=gpus,
        used=draw(st.integers(0, gpus)),
        model=draw(st.sampled_from(MODELS)),
        cpu=cpu,
        mem_gi=mem,
        rdma=draw(st.integers(0, 2)),
        used_cpu=draw(st.integers(0, cpu)),
        used_mem_gi=draw(st.integers(0, mem)),
        used_rdma=0,
        ready=draw(st.booleans()) or draw(st.booleans()),
        schedulable=draw(st.integers(0, 9)) > 0,
        taints=[Taint("dedicated", "infra")] if draw(st.integers(0, 5)) == 0 else [],
        labels={"pool": draw(st.sampled_from(["train", "serve"]))},
        datasets=draw(st.sets(st.sampled_from(["d1", "d2"]), max_size=1)),
    )


@st.composite
def clusters(draw: st.DrawFn) -> dict[str, ClusterSnapshot]:
    count = draw(st.integers(1, 4))
    out = {}
    for c in range(count):
        name = f"c{c}"
        fabric = draw(st.sampled_from(["rdma", "ethernet"]))
        cluster_nodes = [draw(node_states(f"{name}-n{i}")) for i in range(draw(st.integers(1, 8)))]
        out[name] = cluster(
            name,
            cluster_nodes,  # type: ignore[arg-type]
            fabric=fabric,
            location=draw(st.sampled_from(["on-prem", "cloud"])),
            cost=draw(st.sampled_from([1.0, 2.5, 4.0])),
            bandwidth=draw(st.sampled_from([50.0, 200.0])),
            datasets={"d1": 100 * GI} if draw(st.booleans()) else {},
            labels={"tier": draw(st.sampled_from(["research", "prod"]))},
            cordoned=draw(st.integers(0, 7)) == 0,
            healthy=draw(st.integers(0, 7)) > 0,
            rv=str(draw(st.integers(1, 100))),
        )
    return out


@st.composite
def gangs(draw: st.DrawFn, count: int | None = None, single_role: bool = False) -> list[GangRequest]:
    out = []
    for g in range(count if count is not None else draw(st.integers(1, 6))):
        roles = []
        for r in range(1 if single_role else draw(st.integers(1, 2))):
            roles.append(
                RoleRequest(
                    f"role{r}",
                    draw(st.integers(1, 4)),
                    Resources(
                        draw(st.integers(1, 32)) * 1000,
                        draw(st.integers(1, 128)) * GI,
                        draw(st.sampled_from([0, 1, 2, 4, 8])),
                        draw(st.integers(0, 1)),
                    ),
                )
            )
        out.append(
            GangRequest(
                key=f"ns/g{g}",
                uid=f"uid-{g}",
                roles=tuple(roles),
                network=draw(st.sampled_from(["rdma", "ethernet", "any"])),  # type: ignore[arg-type]
                gpu_models=tuple(draw(st.lists(st.sampled_from(MODELS), unique=True, max_size=2))),
                datasets=tuple(draw(st.lists(st.sampled_from(["d1", "d2"]), unique=True, max_size=1))),
                node_selector={"pool": "train"} if draw(st.integers(0, 4)) == 0 else {},
                tolerations=(Toleration("dedicated", "Exists"),) if draw(st.booleans()) else (),  # type: ignore[arg-type]
                priority=draw(st.integers(0, 2)),
                submitted_at=float(draw(st.integers(0, 1000))),
            )
        )
    return out


PROFILE = Profile(hold_after_seconds=500.0)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _fingerprint(result: CycleResult) -> object:
    return (
        result.decisions,
        tuple((d.gang_uid, tuple(s.parts for s in d.scores)) for d in result.decisions),
        result.unplaced,
        result.reservations,
    )


@SETTINGS
@given(snapshots=clusters(), pending=gangs(), now=st.sampled_from([100.0, 2000.0]))
def test_decisions_fit_node_by_node_and_never_double_book(
    snapshots: dict[str, ClusterSnapshot], pending: list[GangRequest], now: float
) -> None:
    result = run_cycle(pending, snapshots, PROFILE, now=now)
    by_uid = {g.uid: g for g in pending}
    check_decisions(result.decisions, by_uid, snapshots)
    # The next cycle, on the same fresh snapshots (the members show nothing yet), must respect them.
    more = [
        GangRequest(key=f"{g.key}-b", uid=f"{g.uid}-b", roles=g.roles, network=g.network, submitted_at=now)
        for g in pending
    ]
    second = run_cycle(more, snapshots, PROFILE, now=now + 1, reservations=result.reservations)
    check_decisions(result.decisions + second.decisions, by_uid | {g.uid: g for g in more}, snapshots)
    # Assumed views after the cycle are consistent with their nodes.
    for name, view in result.snapshots.items():
        rebuilt = ClusterSnapshot(name=name, info=view.info, nodes=dict(view.nodes))
        assert view.index == rebuilt.index


@SETTINGS
@given(snapshots=clusters(), pending=gangs(), seed=st.integers(0, 2**16))
def test_same_inputs_same_decisions_whatever_the_order(
    snapshots: dict[str, ClusterSnapshot], pending: list[GangRequest], seed: int
) -> None:
    first = run_cycle(pending, snapshots, PROFILE, now=1000.0)
    again = run_cycle(list(pending), dict(snapshots), PROFILE, now=1000.0)
    shuffled_gangs = list(pending)
    random.Random(seed).shuffle(shuffled_gangs)
    names = list(snapshots)
    random.Random(seed + 1).shuffle(names)
    shuffled = run_cycle(shuffled_gangs, {n: snapshots[n] for n in names}, PROFILE, now=1000.0)
    assert _fingerprint(first) == _fingerprint(again) == _fingerprint(shuffled)


@SETTINGS
@given(snapshots=clusters(), pending=gangs())
def test_every_cluster_not_chosen_has_a_reason(snapshots: dict[str, ClusterSnapshot], pending: list[GangRequest]) -> None:
    result = run_cycle(pending, snapshots, PROFILE, now=1000.0)
    assert len(result.decisions) + len(result.unplaced) + len(result.already_placed) == len(pending)
    for decision in result.decisions:
        scored = [s.cluster for s in decision.scores]
        assert scored[0] == decision.cluster
        parts = [set(scored), set(decision.why_not), set(decision.outranked)]
        assert sum(len(p) for p in parts) == len(snapshots) and set.union(*parts) == set(snapshots)
        totals = [s.total for s in decision.scores]
        assert totals == sorted(totals, reverse=True)
        best = decision.scores[0]
        for name, bound in decision.outranked.items():
            assert bound < best.total or (bound == best.total and name > best.cluster)
    for entry in result.unplaced:
        assert set(entry.why_not) == set(snapshots)
    for why_not in [d.why_not for d in result.decisions] + [u.why_not for u in result.unplaced]:
        for name, rejection in why_not.items():
            assert rejection.cluster == name
            assert rejection.filter and rejection.code and rejection.message


@SETTINGS
@given(snapshots=clusters(), pending=gangs())
def test_pruning_never_changes_a_decision(snapshots: dict[str, ClusterSnapshot], pending: list[GangRequest]) -> None:
    pruned = run_cycle(pending, snapshots, PROFILE, now=1000.0)
    full = run_cycle(pending, snapshots, dataclasses.replace(PROFILE, exhaustive=True), now=1000.0)
    assert [(d.gang_uid, d.cluster, d.assignment) for d in pruned.decisions] == [
        (d.gang_uid, d.cluster, d.assignment) for d in full.decisions
    ]
    assert [u.gang_uid for u in pruned.unplaced] == [u.gang_uid for u in full.unplaced]
    for short, long in zip(pruned.decisions, full.decisions, strict=True):
        assert short.scores[0] == long.scores[0]
        assert short.scores[0].parts == long.scores[0].parts
        exact = {s.cluster: s.total for s in long.scores}
        for name, bound in short.outranked.items():
            assert name in long.why_not or exact[name] <= bound


def _independent_max_pods(g: GangRequest, snapshot: ClusterSnapshot) -> int:
    """Most pods of a one-role gang that fit node by node, for the best single GPU model (no shared code)."""
    (role,) = g.roles
    req = role.requests
    best = 0
    models = [None] if not req.gpu else sorted({n.gpu_model for n in snapshot.nodes.values() if n.allocatable.gpu})
    for model in models:
        if model is not None and g.gpu_models and model not in g.gpu_models:
            continue
        total = 0
        for n in snapshot.nodes.values():
            if not (n.ready and n.schedulable):
                continue
            if any(n.labels.get(k) != v for k, v in g.node_selector.items()):
                continue
            if n.taints and not g.tolerations:
                continue
            if req.gpu and n.gpu_model != model:
                continue
            free = n.allocatable.minus_clamped(n.allocated)
            fits = role.replicas
            for need, have in ((req.cpu_milli, free.cpu_milli), (req.memory, free.memory),
                               (req.gpu, free.gpu), (req.rdma, free.rdma)):
                if need:
                    fits = min(fits, have // need)
            total += fits
        best = max(best, total)
    return best


@SETTINGS
@given(snapshots=clusters(), pending=gangs(count=1, single_role=True))
def test_gang_fit_is_exact_for_one_role_gangs(snapshots: dict[str, ClusterSnapshot], pending: list[GangRequest]) -> None:
    (g,) = pending
    # Exhaustive, so that every cluster that passes the cheap filters is fitted node by node.
    result = run_cycle([g], snapshots, dataclasses.replace(PROFILE, exhaustive=True), now=0.0)
    why_not = result.decisions[0].why_not if result.decisions else result.unplaced[0].why_not
    for name, snapshot in snapshots.items():
        fits = _independent_max_pods(g, snapshot)
        rejection = why_not.get(name)
        if rejection is None:
            assert fits >= g.pod_count, f"{name} passed but only {fits} pods fit"
        elif rejection.filter == "gang-fit" and rejection.code in ("InsufficientGpu", "GangDoesNotFit"):
            assert fits < g.pod_count, f"{name} rejected ({rejection.message}) but {fits} pods fit"
