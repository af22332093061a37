"""Preemption of whole gangs (federator.placement.preemption): table-driven cases, properties, brute force.

The brute force enumerates every subset of the gangs a preemptor may evict,
releases them from an independently rebuilt snapshot, and asks the engine
(without queues) whether the gang then fits: the planner must find the
fewest victims, in the same cluster, and never evict when none is needed.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import GI, by_name, check_decisions, cluster, gang, node, per_gpu, running_gang

from federator.placement import (
    ClusterSnapshot,
    GangRequest,
    NodeState,
    Profile,
    Resources,
    RoleRequest,
    run_cycle,
)
from federator.placement.admission import QueueQuota, QuotaAmounts, QuotaLedger, RunningGang, WithinQueue
from federator.placement.cycle import CycleResult
from federator.placement.explain import render_decision, render_unplaced
from federator.placement.framework import ProfileError
from federator.placement.reservation import ReservationKind

PROFILE = Profile(hold_after_seconds=10_000.0)
LOWER = WithinQueue.LOWER_PRIORITY


def victim(key: str, on: Mapping[str, int], *, cluster_name: str = "a", **kwargs: Any) -> RunningGang:
    """A running gang with `on[node]` GPUs (8 cores, 64Gi each) on each node of `cluster_name`."""
    return running_gang(key, on=on, cluster=cluster_name, **kwargs)


def occupied(name: str, node_gpus: Mapping[str, int], running: Sequence[RunningGang], **kwargs: object) -> ClusterSnapshot:
    """A cluster whose nodes (name -> GPUs) are allocated exactly what the running gangs there hold."""
    load: dict[str, Resources] = {}
    for gang_ in running:
        if gang_.cluster == name:
            for node_name, amount in gang_.amounts.items():
                load[node_name] = load.get(node_name, Resources()) + amount
    built = []
    for node_name, gpus in node_gpus.items():
        base = node(node_name, gpus=gpus)
        built.append(base.with_allocated(load.get(node_name, Resources())))
    return cluster(name, built, **kwargs)  # type: ignore[arg-type]


def vision(**kwargs: object) -> dict[str, QueueQuota]:
    """Queue vision (LowerPriority by default) and nlp in cohort research; nlp lends vision's idle quota."""
    options: dict[str, object] = {"within_queue": LOWER, "cohort": "research"}
    options.update(kwargs)
    nominal = options.pop("nominal", {"A100": 1000})
    return {
        "vision": QueueQuota("vision", QuotaAmounts(nominal), **options),  # type: ignore[arg-type]
        "nlp": QueueQuota("nlp", QuotaAmounts({}), cohort="research"),
    }


@dataclass
class Case:
    name: str
    clusters: Sequence[tuple[str, Mapping[str, int]]]
    running: Sequence[RunningGang]
    gang: GangRequest
    queues: Mapping[str, QueueQuota] = field(default_factory=vision)
    # Expected: (cluster, victim keys in eviction-rank order) or None for "no preemption".
    expect: tuple[str, tuple[str, ...]] | None = None
    # If no preemption: placed without one ("placed") or left waiting ("unplaced").
    otherwise: str = "unplaced"


TWO_FULL = [("a", {"n-0": 8, "n-1": 8})]
HI = gang("vision/hi", gpus=8, queue="vision", priority=5)

CASES = [
    Case(
        "lowest priority first",
        TWO_FULL,
        [victim("low1", {"n-0": 8}, priority=1), victim("low0", {"n-1": 8}, priority=0)],
        HI,
        expect=("a", ("low0",)),
    ),
    Case(
        "then the most recently started",
        TWO_FULL,
        [victim("old", {"n-0": 8}, started_at=10.0), victim("new", {"n-1": 8}, started_at=20.0)],
        HI,
        expect=("a", ("new",)),
    ),
    Case(
        "never a gang of equal priority",
        TWO_FULL,
        [victim("peer0", {"n-0": 8}, priority=5), victim("peer1", {"n-1": 8}, priority=5)],
        HI,
    ),
    Case(
        "never a gang of higher priority",
        TWO_FULL,
        [victim("boss", {"n-0": 8}, priority=9), victim("peer", {"n-1": 8}, priority=5)],
        HI,
    ),
    Case(
        "withinQueue Never evicts nobody of its queue",
        TWO_FULL,
        [victim("low", {"n-0": 8}), victim("low2", {"n-1": 8})],
        HI,
        queues=vision(within_queue=WithinQueue.NEVER),
    ),
    Case(
        "fewest victims beats lower priority",
        [("a", {"n-0": 8, "n-1": 8})],
        [victim("x", {"n-0": 4}, priority=0), victim("y", {"n-0": 4}, priority=0), victim("z", {"n-1": 8}, priority=3)],
        HI,
        expect=("a", ("z",)),
    ),
    Case(
        "a whole gang even when part of it would do",
        [("a", {"n-0": 8, "n-1": 8})],
        [victim("wide", {"n-0": 8, "n-1": 8})],
        HI,
        expect=("a", ("wide",)),
    ),
    Case(
        "victims and the preemptor's cluster are chosen together",
        [("a", {"n-0": 8}), ("b", {"m-0": 8})],
        [
            victim("a-small", {"n-0": 4}, cluster_name="a"),
            victim("a-rest", {"n-0": 4}, cluster_name="a", priority=9),
            victim("b-one", {"m-0": 8}, cluster_name="b", priority=1),
        ],
        HI,
        expect=("b", ("b-one",)),
    ),
    Case(
        "reclaim: a gang within its nominal quota takes back what another queue borrowed",
        TWO_FULL,
        [
            victim("nlp-borrowed", {"n-0": 8}, queue="nlp", borrowed=True, priority=9),
            victim("own-peer", {"n-1": 8}, priority=5),
        ],
        HI,
        queues=vision(reclaim_borrowed=True),
        expect=("a", ("nlp-borrowed",)),
    ),
    Case(
        "no reclaim without reclaimBorrowed",
        TWO_FULL,
        [victim("nlp-borrowed", {"n-0": 8}, queue="nlp", borrowed=True), victim("peer", {"n-1": 8}, priority=5)],
        HI,
    ),
    Case(
        "no reclaim of a gang admitted within its own queue's quota",
        TWO_FULL,
        [victim("nlp-own", {"n-0": 8}, queue="nlp", borrowed=False), victim("peer", {"n-1": 8}, priority=5)],
        HI,
        queues=vision(reclaim_borrowed=True),
    ),
    Case(
        "no reclaim for a gang that would itself borrow",
        TWO_FULL,
        [
            victim("nlp-borrowed", {"n-0": 8}, queue="nlp", borrowed=True),
            victim("v-peer", {"n-1": 8}, priority=5),
        ],
        HI,
        # vision uses 8 of 8 (its own peer): the preemptor needs to borrow, so it may not reclaim.
        queues={
            "vision": QueueQuota("vision", QuotaAmounts({"A100": 8}), cohort="research", within_queue=LOWER,
                                 reclaim_borrowed=True),
            "nlp": QueueQuota("nlp", QuotaAmounts({"A100": 8}), cohort="research"),
        },
    ),
    Case(
        "no eviction within its queue to run on borrowed quota",
        TWO_FULL,
        [
            victim("own-low", {"n-0": 8}, priority=0, borrowed=True),
            victim("nlp-own", {"n-1": 8}, queue="nlp"),
        ],
        HI,
        # vision's nominal is 4: HI in own-low's place would borrow 4, and could then be reclaimed by nlp,
        # whose own higher-priority gang would do the same to it: a cycle of evictions (found by the replay).
        queues={
            "vision": QueueQuota("vision", QuotaAmounts({"A100": 4}), cohort="research", within_queue=LOWER,
                                 reclaim_borrowed=True),
            "nlp": QueueQuota("nlp", QuotaAmounts({"A100": 12}), cohort="research", within_queue=LOWER,
                              reclaim_borrowed=True),
        },
    ),
    Case(
        "within its queue when it stays within its nominal quota",
        TWO_FULL,
        [
            victim("own-low", {"n-0": 8}, priority=0),
            victim("nlp-own", {"n-1": 8}, queue="nlp"),
        ],
        HI,
        queues={
            "vision": QueueQuota("vision", QuotaAmounts({"A100": 8}), cohort="research", within_queue=LOWER),
            "nlp": QueueQuota("nlp", QuotaAmounts({"A100": 8}), cohort="research"),
        },
        expect=("a", ("own-low",)),
    ),
    Case(
        "borrowed gangs of its own queue go first",
        TWO_FULL,
        [victim("own-low", {"n-0": 8}, priority=0), victim("own-borrowed", {"n-1": 8}, priority=2, borrowed=True)],
        HI,
        expect=("a", ("own-borrowed",)),
    ),
    Case(
        "gangs without a queue are never victims",
        TWO_FULL,
        [victim("plain0", {"n-0": 8}, queue=""), victim("plain1", {"n-1": 8}, queue="")],
        HI,
    ),
    Case(
        "a gang that fits without victims evicts nobody",
        [("a", {"n-0": 8, "n-1": 8, "n-2": 8})],
        [victim("low", {"n-0": 8}), victim("low2", {"n-1": 8})],
        HI,
        otherwise="placed",
    ),
    Case(
        "a gang that cannot fit even with every candidate gone evicts nobody",
        TWO_FULL,
        [victim("low", {"n-0": 8}), victim("peer", {"n-1": 8}, priority=5)],
        gang("vision/big", pods=2, gpus=8, queue="vision", priority=5),
    ),
    Case(
        "quota: evicting a lower-priority gang of its queue frees the quota, in the cluster it lands in",
        [("free", {"f-0": 8}), ("busy", {"n-0": 8, "n-1": 8})],
        [victim("low", {"n-0": 8}, cluster_name="busy")],
        HI,
        queues=vision(nominal={"A100": 8}),
        expect=("busy", ("low",)),
    ),
    Case(
        "multi-node gang: the nodes with the fewest victims",
        [("a", {"n-0": 8, "n-1": 8, "n-2": 8})],
        [
            victim("p", {"n-0": 2}), victim("q", {"n-0": 2}), victim("r", {"n-0": 4}),
            victim("s", {"n-1": 8}, priority=2), victim("t", {"n-2": 8}, priority=3),
        ],
        gang("vision/pair", pods=2, gpus=8, queue="vision", priority=5),
        expect=("a", ("s", "t")),
    ),
    # Checkpoint-aware order (issue 29 item 3), at now=100: among equal priority the fewest GPU-seconds lost
    # (GPUs x seconds since the later of its start and its last checkpoint) first, then today's order.
    Case(
        "equal priority: the gang that loses least since its last checkpoint, not the newest",
        TWO_FULL,
        [victim("fresh", {"n-0": 8}, started_at=20.0), victim("saved", {"n-1": 8}, started_at=10.0,
                                                                 checkpointed_at=95.0)],
        HI,
        expect=("a", ("saved",)),  # 8 x 5 = 40 GPU-seconds, against 8 x 80 = 640
    ),
    Case(
        "a fresh checkpoint never outranks priority",
        TWO_FULL,
        [victim("low", {"n-0": 8}, priority=0), victim("mid", {"n-1": 8}, priority=1, checkpointed_at=99.0)],
        HI,
        expect=("a", ("low",)),  # 800 GPU-seconds lost rather than 8, but priority comes first
    ),
    Case(
        "equal loss falls back to the most recently started",
        TWO_FULL,
        [victim("old", {"n-0": 8}, started_at=10.0, checkpointed_at=90.0),
         victim("new", {"n-1": 8}, started_at=20.0, checkpointed_at=90.0)],
        HI,
        expect=("a", ("new",)),
    ),
    Case(
        "a checkpoint older than the current copy's start counts as none",
        TWO_FULL,
        [victim("stale", {"n-0": 8}, started_at=50.0, checkpointed_at=40.0),
         victim("young", {"n-1": 8}, started_at=30.0, checkpointed_at=80.0)],
        HI,
        expect=("a", ("young",)),  # 8 x 20 = 160, against 8 x 50 = 400 (its start, not 40)
    ),
    Case(
        "the loss counts GPUs times seconds",
        TWO_FULL,
        [victim("wide", {"n-0": 8}, started_at=60.0), victim("narrow", {"n-1": 4}, started_at=40.0),
         victim("peer", {"n-1": 4}, priority=5)],
        gang("vision/four", gpus=4, queue="vision", priority=5),
        expect=("a", ("narrow",)),  # 4 x 60 = 240, against 8 x 40 = 320
    ),
    Case(
        "fewer victims still beat a smaller loss",
        TWO_FULL,
        [victim("x", {"n-0": 4}, checkpointed_at=99.0), victim("y", {"n-0": 4}, checkpointed_at=99.0),
         victim("z", {"n-1": 8})],
        HI,
        expect=("a", ("z",)),
    ),
]


def _run(case: Case, **kwargs: object) -> CycleResult:
    snaps = by_name(*(occupied(name, node_gpus, case.running) for name, node_gpus in case.clusters))
    return run_cycle([case.gang], snaps, PROFILE, now=100.0, queues=case.queues, running=case.running, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_preemption_table(case: Case) -> None:
    result = _run(case)
    if case.expect is None:
        assert result.evictions == ()
        if case.otherwise == "placed":
            (decision,) = result.decisions
            assert decision.preemption is None and decision.preempts == ()
        else:
            assert result.decisions == () and result.unplaced[0].preemption is None
        return
    (decision,) = result.decisions
    cluster_name, keys = case.expect
    assert decision.preemption is not None and decision.cluster == cluster_name
    assert tuple(v.key for v in decision.preemption.victims) == keys
    assert decision.preempts == tuple(f"run-{k}" for k in keys) == result.evictions
    assert decision.preemption.minimal
    # The preemptor fits on the snapshot without its victims, node by node.
    gone = set(decision.preempts)
    fresh = {
        name: occupied(name, node_gpus, [g for g in case.running if g.uid not in gone])
        for name, node_gpus in case.clusters
    }
    check_decisions([decision], {case.gang.uid: case.gang}, fresh)
    assert cluster_name not in decision.why_not


def test_the_decision_explains_whom_it_preempts_and_explain_mode_evicts_nothing() -> None:
    case = CASES[0]
    (decision,) = _run(case).decisions
    text = render_decision(decision)
    assert "Preempts 1 gang in a (evicted whole before it starts):" in text
    assert "low0  vision  0         lower priority" in text
    assert "room made on 1 nodes: n-1" in text
    explained = _run(case, preempt=False)
    assert explained.decisions == () and explained.evictions == () and len(explained.reservations) == 0
    (waiting,) = explained.unplaced
    assert waiting.preemption is not None
    assert waiting.preemption.describe() == (
        "would fit on a after preempting low0 (queue vision, priority 0, lower priority, "
        "loses 800 GPU-seconds since it started (no checkpoint))"
    )
    assert "Would fit on a after preempting low0" in render_unplaced(waiting)


def test_the_plan_shows_the_gpu_seconds_each_eviction_loses() -> None:
    saved = victim("saved", {"n-0": 8}, started_at=10.0, checkpointed_at=95.0)
    fresh = victim("fresh", {"n-1": 8}, started_at=20.0)
    case = Case("", TWO_FULL, [saved, fresh], gang("vision/pair", pods=2, gpus=8, queue="vision", priority=5))
    (decision,) = _run(case).decisions
    assert decision.preemption is not None
    by_key = {v.key: v for v in decision.preemption.victims}
    assert set(by_key) == {"saved", "fresh"}
    assert (by_key["saved"].lost_gpu_seconds, by_key["saved"].checkpointed) == (40.0, True)
    assert (by_key["fresh"].lost_gpu_seconds, by_key["fresh"].checkpointed) == (640.0, False)
    assert by_key["saved"].describe() == (
        "saved (queue vision, priority 0, lower priority, loses 40 GPU-seconds since its last checkpoint)"
    )
    text = render_decision(decision)
    assert "GPU-SECONDS LOST" in text
    assert "40 (since checkpoint)" in text and "640 (since start)" in text
    (waiting,) = _run(case, preempt=False).unplaced
    assert waiting.preemption is not None
    assert "fresh (queue vision, priority 0, lower priority, loses 640 GPU-seconds since it started (no " \
           "checkpoint))" in waiting.preemption.describe()


def test_with_the_checkpoint_rule_off_equal_priority_goes_by_start_again() -> None:
    running = [victim("fresh", {"n-0": 8}, started_at=20.0),
               victim("saved", {"n-1": 8}, started_at=10.0, checkpointed_at=95.0)]
    snaps = by_name(occupied("a", {"n-0": 8, "n-1": 8}, running))
    off = Profile(hold_after_seconds=10_000.0, victims_by_lost_work=False)
    (decision,) = run_cycle([HI], snaps, off, now=100.0, queues=vision(), running=running).decisions
    assert decision.preempts == ("run-fresh",)
    # The plan still says what the eviction loses.
    assert decision.preemption is not None and decision.preemption.victims[0].lost_gpu_seconds == 640.0


@settings(max_examples=200, deadline=None)
@given(
    gangs=st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 99), st.one_of(st.none(), st.integers(0, 100))),
        min_size=1, max_size=6,
    )
)
def test_one_victim_is_the_lowest_priority_then_the_smallest_loss(
    gangs: list[tuple[int, int, int | None]],
) -> None:
    """Every node full with one 8-GPU gang of random priority, start and checkpoint; the preemptor (priority 5)
    evicts exactly the candidate of lowest priority, then least loss, then newest, then uid, or none."""
    running = [
        victim(f"g{i}", {f"n-{i}": 8}, priority=p, started_at=float(s),
               checkpointed_at=None if c is None else float(c))
        for i, (p, s, c) in enumerate(gangs)
    ]
    snaps = by_name(occupied("a", {f"n-{i}": 8 for i in range(len(gangs))}, running))
    result = run_cycle([HI], snaps, PROFILE, now=100.0, queues=vision(), running=running)
    candidates = [r for r in running if r.priority < HI.priority]
    if not candidates:
        assert result.evictions == () and result.decisions == ()
        return
    expected = min(candidates, key=_rank)
    assert result.evictions == (expected.uid,)


def test_bad_checkpoint_times_and_clocks_are_refused() -> None:
    for bad in (float("nan"), float("inf"), True, "95"):
        with pytest.raises(ValueError, match="checkpointed_at"):
            victim("bad", {"n-0": 8}, checkpointed_at=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lost_work_at"):
        QuotaLedger(vision(), [], lost_work_at=float("nan"))
    with pytest.raises(ProfileError, match="victims_by_lost_work"):
        Profile(victims_by_lost_work=1)  # type: ignore[arg-type]
    # A checkpoint in the future (a skewed clock) loses nothing, never a negative loss.
    ahead = victim("ahead", {"n-0": 8}, started_at=10.0, checkpointed_at=500.0)
    assert ahead.lost_gpu_seconds(100.0) == 0.0


def test_the_preemptors_reservation_keeps_a_third_gang_off_the_freed_room_until_it_runs() -> None:
    low = victim("low", {"n-0": 8})
    snaps = by_name(occupied("a", {"n-0": 8}, [low]))
    qs = vision()
    first = run_cycle([HI], snaps, PROFILE, now=100.0, queues=qs, running=[low])
    (decision,) = first.decisions
    assert decision.preempts == ("run-low",)
    reservation = first.reservations.get(HI.uid)
    assert reservation is not None and reservation.kind is ReservationKind.PLACED
    assert dict(reservation.amounts) == {"n-0": per_gpu(8)}
    third = gang("plain/third", gpus=8)  # no queue: it could not preempt, only take free room
    # Victims' pods still terminating (the snapshot still shows them; the caller no longer lists them).
    still = run_cycle([third], snaps, PROFILE, now=101.0, reservations=first.reservations, queues=qs)
    assert still.decisions == ()
    # Victims gone, the preemptor's pods not bound yet: the room is still the preemptor's.
    emptied = by_name(occupied("a", {"n-0": 8}, [], rv="2"))
    gone = run_cycle([third], emptied, PROFILE, now=102.0, reservations=first.reservations, queues=qs)
    assert gone.decisions == ()
    # The preemptor's pods bound: its reservation is released, and the snapshot counts them instead.
    bound = by_name(cluster("a", [node("n-0", used=8)], rv="3", bound_pods={HI.uid: 1}))
    shown = run_cycle([third], bound, PROFILE, now=103.0, reservations=first.reservations, queues=qs)
    assert [r.reason.value for r in shown.released] == ["shown"] and shown.decisions == ()


def test_two_preemptors_in_one_cycle_never_share_a_victim_and_in_flight_gangs_are_spared() -> None:
    running = [victim("low0", {"n-0": 8}), victim("low1", {"n-1": 8}, started_at=5.0)]
    snaps = by_name(occupied("a", {"n-0": 8, "n-1": 8}, running))
    first = gang("vision/hi1", gpus=8, queue="vision", priority=5, submitted_at=1.0)
    second = gang("vision/hi2", gpus=8, queue="vision", priority=5, submitted_at=2.0)
    result = run_cycle([first, second], snaps, PROFILE, now=100.0, queues=vision(), running=running)
    assert [(d.gang_key, d.preempts) for d in result.decisions] == [
        ("vision/hi1", ("run-low1",)),
        ("vision/hi2", ("run-low0",)),
    ]
    assert sorted(result.evictions) == ["run-low0", "run-low1"]
    # A gang whose placement is still in flight (placed reservation, pods not shown) is not a victim.
    in_flight = replace(running[1], uid="uid-flying")
    booked = run_cycle([gang("flying", gpus=8, uid="uid-flying")], by_name(cluster("z", [node("z-0")])), PROFILE,
                       now=90.0)
    result = run_cycle([first], snaps, PROFILE, now=100.0, reservations=booked.reservations, queues=vision(),
                       running=[running[0], in_flight])
    assert result.decisions[0].preempts == ("run-low0",)


def test_a_gang_of_several_roles_is_packed_on_the_view_without_its_victims() -> None:
    running = [victim("low", {"n-0": 8}), victim("low-b", {"n-1": 6})]
    snaps = by_name(occupied("a", {"n-0": 8, "n-1": 8}, running))
    ps_workers = GangRequest(
        key="vision/ps",
        uid="uid-ps",
        queue="vision",
        priority=5,
        roles=(
            RoleRequest("ps", 2, Resources(4000, 16 * GI, 0, 0)),
            RoleRequest("worker", 1, per_gpu(8)),
        ),
    )
    result = run_cycle([ps_workers], snaps, PROFILE, now=100.0, queues=vision(), running=running)
    (decision,) = result.decisions
    # Either alone makes room; low-b loses less (6 GPUs x 100 s, against 8 x 100).
    assert decision.preempts == ("run-low-b",)
    fresh = {"a": occupied("a", {"n-0": 8, "n-1": 8}, running[:1])}
    check_decisions([decision], {ps_workers.uid: ps_workers}, fresh)


# ---------------------------------------------------------------- properties and brute force


@dataclass
class World:
    node_gpus: dict[str, dict[str, int]]  # cluster -> node -> GPUs
    running: list[RunningGang]
    queues: dict[str, QueueQuota]
    gang: GangRequest


@st.composite
def worlds(draw: st.DrawFn) -> World:
    node_gpus: dict[str, dict[str, int]] = {}
    running: list[RunningGang] = []
    count = 0
    for c in range(draw(st.integers(1, 2))):
        name = f"c{c}"
        node_gpus[name] = {f"{name}-n{i}": draw(st.sampled_from([4, 8])) for i in range(draw(st.integers(1, 3)))}
        left = dict(node_gpus[name])
        for _ in range(draw(st.integers(0, 5))):
            on: dict[str, int] = {}
            for node_name in draw(st.lists(st.sampled_from(sorted(left)), min_size=1, max_size=2, unique=True)):
                if left[node_name]:
                    # Mostly whatever is left on the node, so that clusters are busy and preemption is needed.
                    take = left[node_name] if draw(st.booleans()) else draw(st.integers(1, left[node_name]))
                    on[node_name] = take
                    left[node_name] -= take
            if not on:
                continue
            queue = draw(st.sampled_from(["vision", "vision", "nlp", ""]))
            running.append(
                victim(
                    f"g{count}",
                    on,
                    cluster_name=name,
                    queue=queue,
                    priority=draw(st.integers(0, 3)),
                    started_at=float(draw(st.integers(0, 5))),
                    borrowed=queue == "nlp" and draw(st.booleans()),
                    checkpointed_at=draw(st.one_of(st.none(), st.integers(0, 100).map(float))),
                )
            )
            count += 1
        for node_name in sorted(left):
            if left[node_name] and draw(st.integers(0, 3)):  # most nodes end up full
                queue = draw(st.sampled_from(["vision", "nlp", ""]))
                running.append(
                    victim(f"g{count}", {node_name: left[node_name]}, cluster_name=name, queue=queue,
                           priority=draw(st.integers(0, 3)), borrowed=queue == "nlp" and draw(st.booleans()))
                )
                count += 1
    queues = vision(
        within_queue=draw(st.sampled_from([LOWER, LOWER, WithinQueue.NEVER])),
        reclaim_borrowed=draw(st.booleans()),
    )
    if draw(st.booleans()):
        # Naming the (only) model takes the planner's path for gangs that name theirs.
        g = gang("vision/p", pods=draw(st.integers(1, 3)), gpus=draw(st.sampled_from([2, 4, 8])), queue="vision",
                 priority=draw(st.integers(1, 4)), models=["A100"] if draw(st.booleans()) else [])
    else:
        g = GangRequest(
            key="vision/p",
            uid="uid-vision/p",
            queue="vision",
            priority=draw(st.integers(1, 4)),
            roles=(RoleRequest("ps", draw(st.integers(1, 2)), Resources(8000, 32 * GI, 0, 0)),
                   RoleRequest("worker", draw(st.integers(1, 2)), per_gpu(draw(st.sampled_from([2, 4, 8]))))),
        )
    return World(node_gpus, running, queues, g)


def _eligible(world: World) -> list[RunningGang]:
    """Independent reading of who may be evicted (quota is generous here, so the preemptor never borrows)."""
    vision_q = world.queues["vision"]
    out = []
    for r in world.running:
        if r.queue == "vision" and vision_q.within_queue is LOWER and r.priority < world.gang.priority:
            out.append(r)
        elif r.queue == "nlp" and r.borrowed and vision_q.reclaim_borrowed:
            out.append(r)
    return out


def _snapshots(world: World, gone: set[str]) -> dict[str, ClusterSnapshot]:
    """Rebuilt from scratch (no engine code): each node allocated what the remaining gangs hold there."""
    out = {}
    for name, node_gpus in world.node_gpus.items():
        load: dict[str, list[int]] = {}
        for r in world.running:
            if r.cluster == name and r.uid not in gone:
                for node_name, amount in r.amounts.items():
                    slot = load.setdefault(node_name, [0, 0, 0, 0])
                    for i, value in enumerate((amount.cpu_milli, amount.memory, amount.gpu, amount.rdma)):
                        slot[i] += value
        built = [
            NodeState(
                name=node_name,
                allocatable=Resources(96_000, 1024 * GI, gpus, 1),
                allocated=Resources(*load.get(node_name, [0, 0, 0, 0])),
                gpu_model="A100",
            )
            for node_name, gpus in node_gpus.items()
        ]
        out[name] = cluster(name, built)
    return out


def _fits_plainly(world: World, cluster_name: str, gone: set[str]) -> bool:
    plain = replace(world.gang, queue="")
    return bool(run_cycle([plain], {cluster_name: _snapshots(world, gone)[cluster_name]}, PROFILE, now=0.0).decisions)


def _rank(r: RunningGang) -> tuple[int, int, float, float, str]:
    """The eviction order at now=100, read independently: borrowed first, lowest priority, then the fewest
    GPU-seconds lost (GPUs x seconds since the later of its start and its checkpoint), most recently started."""
    since = r.started_at if r.checkpointed_at is None else max(r.started_at, r.checkpointed_at)
    return (0 if r.borrowed else 1, r.priority, r.demand.gpu * (100.0 - since), -r.started_at, r.uid)


PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(world=worlds())
def test_preemption_is_whole_minimal_in_one_cluster_and_only_when_needed(world: World) -> None:
    result = run_cycle([world.gang], _snapshots(world, set()), PROFILE, now=100.0, queues=world.queues,
                       running=world.running)
    eligible = _eligible(world)
    by_uid = {r.uid: r for r in world.running}
    fits_without = any(_fits_plainly(world, name, set()) for name in world.node_gpus)
    # Brute force: the fewest eligible victims, all in one cluster, that let the gang fit there.
    best: tuple[int, tuple[tuple[int, int, float, float, str], ...], str] | None = None
    for name in sorted(world.node_gpus):
        here = [r for r in eligible if r.cluster == name]
        for size in range(1, len(here) + 1):
            if best is not None and size > best[0]:
                break
            for subset in itertools.combinations(here, size):
                if _fits_plainly(world, name, {r.uid for r in subset}):
                    key = (size, tuple(sorted((_rank(r) for r in subset), reverse=True)), name)
                    if best is None or key < best:
                        best = key
    if fits_without:
        # Never a victim set when the gang fits without one.
        assert result.evictions == ()
        assert result.decisions and result.decisions[0].preemption is None
        return
    if best is None:
        assert result.decisions == () and result.evictions == ()
        return
    (decision,) = result.decisions
    preemption = decision.preemption
    assert preemption is not None
    victims = [by_uid[uid] for uid in decision.preempts]
    assert len(set(decision.preempts)) == len(victims) == len(result.evictions)
    # Only eligible gangs; never equal or higher priority in the queue; all in the preemptor's cluster.
    assert all(v in eligible for v in victims)
    assert all(v.priority < world.gang.priority for v in victims if v.queue == world.gang.queue)
    assert {v.cluster for v in victims} == {decision.cluster} == {preemption.cluster}
    # The preemptor fits on the real snapshot once its victims' whole gangs are gone...
    gone = set(decision.preempts)
    check_decisions([decision], {world.gang.uid: world.gang}, _snapshots(world, gone))
    # ...and with any one of them spared it would not (whole gangs, none evicted for nothing).
    for spared in gone:
        assert not _fits_plainly(world, decision.cluster, gone - {spared})
    # Minimal, with the brute force's tie-break (least senior most-senior victim, then the cluster name).
    assert preemption.minimal
    key = (len(victims), tuple(sorted((_rank(v) for v in victims), reverse=True)), decision.cluster)
    assert key == best


@PROPERTY_SETTINGS
@given(world=worlds())
def test_explain_mode_tells_the_same_plan_without_doing_it(world: World) -> None:
    snaps = _snapshots(world, set())
    done = run_cycle([world.gang], snaps, PROFILE, now=100.0, queues=world.queues, running=world.running)
    told = run_cycle([world.gang], snaps, PROFILE, now=100.0, queues=world.queues, running=world.running,
                     preempt=False)
    assert told.evictions == ()
    plan = done.decisions[0].preemption if done.decisions else None
    if plan is None:
        assert all(u.preemption is None for u in told.unplaced)
        assert [d.gang_uid for d in done.decisions] == [d.gang_uid for d in told.decisions]
    else:
        assert told.decisions == () and told.unplaced[0].preemption == plan
