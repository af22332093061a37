"""Admission before placement: quota per queue and GPU model, borrowing in a cohort, fair share, holds.

See federator.placement.admission for the rules these tests pin down.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from placement_builders import GI, by_name, cluster, gang, node, nodes, running_gang
from test_properties import clusters as cluster_sets
from test_properties import gangs as gang_lists

from federator.placement import ClusterSnapshot, GangRequest, Profile, ProfileError, run_cycle
from federator.placement.admission import QueueQuota, QuotaAmounts, QuotaLedger, RunningGang, WithinQueue
from federator.placement.explain import render_decision, render_unplaced

PROFILE = Profile(hold_after_seconds=600.0)


def quota(name: str, gpus: Mapping[str, int], **kwargs: object) -> QueueQuota:
    return QueueQuota(name, QuotaAmounts(dict(gpus)), **kwargs)  # type: ignore[arg-type]


def queues(*items: QueueQuota) -> dict[str, QueueQuota]:
    return {q.name: q for q in items}


def running(key: str, queue: str, gpus: int, *, cluster_name: str = "elsewhere", **kwargs: Any) -> RunningGang:
    """A running gang of `queue` charged `gpus` GPUs (of A100 unless `model`), on nodes `on` (node -> GPUs)."""
    return running_gang(key, queue=queue, gpus=gpus, cluster=cluster_name, **kwargs)


ROOMY = by_name(cluster("a", nodes("n", 16)))


def test_quota_blocks_and_explains_in_the_unplaced_record_every_row_and_describe() -> None:
    qs = queues(quota("vision", {"A100": 96}, cohort="research"), quota("nlp", {}, cohort="research"))
    result = run_cycle(
        [gang("vision/resnet", pods=1, gpus=8, queue="vision")],
        ROOMY,
        PROFILE,
        now=0.0,
        queues=qs,
        running=[running("vision/old", "vision", 96)],
    )
    assert result.decisions == ()
    (waiting,) = result.unplaced
    assert waiting.quota is not None and waiting.quota.code == "QuotaExceeded"
    assert waiting.quota.message == "queue vision uses 96 of 96 A100 GPUs (cohort research lends 0); waits for 8"
    assert dict(waiting.quota.numbers) == {"used": 96, "nominal": 96, "held": 0, "lendable": 0, "demand": 8}
    row = waiting.why_not["a"]
    assert (row.filter, row.code, row.message) == ("quota", "QuotaExceeded", waiting.quota.message)
    assert not waiting.never_fits and waiting.hold is None
    assert render_unplaced(waiting).splitlines()[0] == (
        "vision/resnet is waiting for quota: queue vision uses 96 of 96 A100 GPUs (cohort research lends 0); waits for 8"
    )


def test_unhealthy_clusters_keep_their_own_reason_and_the_rest_say_quota() -> None:
    snaps = by_name(cluster("down", nodes("n", 2), healthy=False), cluster("up", nodes("n", 2)))
    result = run_cycle(
        [gang("v/g", gpus=8, queue="vision")],
        snaps,
        PROFILE,
        now=0.0,
        queues=queues(quota("vision", {"A100": 8})),
        running=[running("v/old", "vision", 4)],
    )
    (waiting,) = result.unplaced
    assert waiting.why_not["down"].filter == "health"
    assert waiting.why_not["up"].code == "QuotaExceeded"
    assert "(no cohort to borrow from); waits for 8" in waiting.why_not["up"].message


def test_usage_counts_gangs_admitted_earlier_in_the_same_cycle() -> None:
    first = gang("v/first", gpus=8, queue="vision", submitted_at=1.0)
    second = gang("v/second", gpus=8, queue="vision", submitted_at=2.0)
    result = run_cycle([second, first], ROOMY, PROFILE, now=10.0, queues=queues(quota("vision", {"A100": 12})))
    assert [d.gang_key for d in result.decisions] == ["v/first"]
    assert result.decisions[0].queue == "vision" and not result.decisions[0].borrowed
    (waiting,) = result.unplaced
    assert waiting.quota is not None
    assert waiting.quota.message == "queue vision uses 8 of 12 A100 GPUs (no cohort to borrow from); waits for 8"
    usage = result.usage["vision"]
    assert dict(usage.used.gpus) == {"A100": 8} and usage.gangs == 1 and dict(usage.borrowed.gpus) == {}


@pytest.mark.parametrize(
    ("limit", "placed", "message"),
    [
        (None, True, ""),
        (QuotaAmounts({"A100": 8}), True, ""),
        (
            QuotaAmounts({"A100": 4}),
            False,
            "queue vision uses 16 of 16 A100 GPUs (cohort research lends 4, borrowing limit 4); waits for 8",
        ),
        # A limit that does not list the model leaves it unlimited.
        (QuotaAmounts({"H100": 0}), True, ""),
    ],
)
def test_borrowing_idle_quota_of_the_cohort_up_to_the_borrowing_limit(
    limit: QuotaAmounts | None, placed: bool, message: str
) -> None:
    qs = queues(
        quota("vision", {"A100": 16}, cohort="research", borrowing_limit=limit),
        quota("nlp", {"A100": 32}, cohort="research"),
        quota("alone", {"A100": 64}),  # no cohort: lends nothing
    )
    result = run_cycle(
        [gang("v/g", gpus=8, queue="vision")],
        ROOMY,
        PROFILE,
        now=0.0,
        queues=qs,
        running=[running("v/old", "vision", 16), running("nlp/old", "nlp", 20)],
    )
    if placed:
        (decision,) = result.decisions
        assert decision.borrowed
        assert "Queue vision, on quota borrowed from its cohort" in render_decision(decision)
        assert dict(result.usage["vision"].borrowed.gpus) == {"A100": 8}
    else:
        assert result.unplaced[0].quota is not None and result.unplaced[0].quota.message == message


def test_the_cohort_lends_only_what_its_other_queues_leave_idle() -> None:
    qs = queues(quota("vision", {"A100": 16}, cohort="research"), quota("nlp", {"A100": 32}, cohort="research"))
    result = run_cycle(
        [gang("v/g", gpus=8, queue="vision")],
        ROOMY,
        PROFILE,
        now=0.0,
        queues=qs,
        running=[running("v/old", "vision", 16), running("nlp/old", "nlp", 28)],
    )
    assert result.unplaced[0].quota is not None
    assert result.unplaced[0].quota.message == (
        "queue vision uses 16 of 16 A100 GPUs (cohort research lends 4); waits for 8"
    )


def test_a_gang_accepting_two_models_is_placed_only_on_one_its_queue_has_room_for() -> None:
    # The A100 cluster scores better (cheaper, on-prem); quota leaves only H100.
    snaps = by_name(
        cluster("a100", nodes("n", 4)), cluster("h100", nodes("n", 4, model="H100"), location="cloud", cost=9.0)
    )
    g = gang("v/g", gpus=8, models=["A100", "H100"], queue="vision")
    qs = queues(quota("vision", {"A100": 8, "H100": 8}))
    free = run_cycle([g], snaps, PROFILE, now=0.0, queues=qs)
    assert free.decisions[0].cluster == "a100"
    full = run_cycle([g], snaps, PROFILE, now=0.0, queues=qs, running=[running("v/old", "vision", 8)])
    (decision,) = full.decisions
    assert (decision.cluster, decision.gpu_model) == ("h100", "H100")
    assert full.decisions[0].why_not["a100"].code == "QuotaExceeded"
    assert "has room only for H100 GPUs" in full.decisions[0].why_not["a100"].message
    # Charged to the model it was placed on.
    assert dict(full.usage["vision"].used.gpus) == {"A100": 8, "H100": 8}


def test_own_quota_models_are_tried_before_borrowed_ones_in_one_cluster() -> None:
    snaps = by_name(cluster("mixed", nodes("a", 2) + nodes("h", 2, model="H100")))
    qs = queues(
        quota("vision", {"H100": 8}, cohort="research"), quota("nlp", {"A100": 64}, cohort="research")
    )
    g = gang("v/g", gpus=8, models=["A100", "H100"], queue="vision")
    (decision,) = run_cycle([g], snaps, PROFILE, now=0.0, queues=qs).decisions
    assert decision.gpu_model == "H100" and not decision.borrowed


def test_a_gang_with_any_model_may_borrow_a_model_its_queue_has_no_quota_of() -> None:
    qs = queues(quota("vision", {}, cohort="research"), quota("nlp", {"A100": 64}, cohort="research"))
    (decision,) = run_cycle([gang("v/g", gpus=8, queue="vision")], ROOMY, PROFILE, now=0.0, queues=qs).decisions
    assert decision.borrowed and decision.gpu_model == "A100"


def test_cpu_and_memory_quota_when_set() -> None:
    qs = queues(QueueQuota("etl", QuotaAmounts(cpu_milli=16_000, memory=128 * GI)))
    small = gang("etl/small", gpus=0, cpu=8, mem_gi=64, queue="etl")
    big = gang("etl/big", gpus=0, cpu=12, mem_gi=64, queue="etl", submitted_at=1.0)
    result = run_cycle([small, big], ROOMY, PROFILE, now=0.0, queues=qs)
    assert [d.gang_key for d in result.decisions] == ["etl/small"]
    assert result.unplaced[0].quota is not None
    assert result.unplaced[0].quota.message == "queue etl uses 8 of 16 cpu (no cohort to borrow from); waits for 12"
    # A queue without a cpu or memory quota does not limit them.
    unlimited = run_cycle([big], ROOMY, PROFILE, now=0.0, queues=queues(QueueQuota("etl")))
    assert unlimited.decisions


def test_a_gang_its_queue_can_never_admit_says_so_and_holds_nothing() -> None:
    qs = queues(quota("vision", {"A100": 16}, cohort="research", borrowing_limit=QuotaAmounts({"A100": 8})),
                quota("nlp", {"A100": 64}, cohort="research"))
    huge = gang("v/huge", pods=4, gpus=8, queue="vision")
    result = run_cycle([huge], ROOMY, PROFILE, now=10_000.0, queues=qs)
    (waiting,) = result.unplaced
    assert waiting.never_fits and waiting.quota is not None and not waiting.quota.holding
    assert "it can never have 32 (at most 24: nominal 16 + what cohort research can lend)" in waiting.quota.message
    assert render_unplaced(waiting).startswith("v/huge can never be admitted by its queue: ")


def test_unknown_queue_waits_with_its_own_reason() -> None:
    result = run_cycle([gang("x/g", queue="nope")], ROOMY, PROFILE, now=0.0, queues=queues(quota("vision", {})))
    (waiting,) = result.unplaced
    assert waiting.quota is not None and waiting.quota.code == "QueueNotFound"
    assert waiting.why_not["a"].code == "QueueNotFound"
    assert "queue nope does not exist" in waiting.quota.message


def test_fair_share_serves_the_queue_with_the_lowest_weighted_dominant_share_first() -> None:
    one_slot = by_name(cluster("a", [node("n-0"), node("n-1", used=8)]))
    # vision uses half its quota (share 0.5); nlp uses a quarter (0.25): nlp goes first, despite priority.
    qs = queues(quota("vision", {"A100": 16}), quota("nlp", {"A100": 16}))
    busy = [running("v/old", "vision", 8), running("nlp/old", "nlp", 4)]
    v = gang("v/urgent", gpus=8, queue="vision", priority=100, submitted_at=0.0)
    n = gang("nlp/late", gpus=8, queue="nlp", priority=0, submitted_at=50.0)
    result = run_cycle([v, n], one_slot, PROFILE, now=60.0, queues=qs, running=busy)
    assert [d.gang_key for d in result.decisions] == ["nlp/late"]
    # A weight of 4 makes vision's share 0.125: it goes first.
    weighted = queues(quota("vision", {"A100": 16}, weight=4.0), quota("nlp", {"A100": 16}))
    result = run_cycle([v, n], one_slot, PROFILE, now=60.0, queues=weighted, running=busy)
    assert [d.gang_key for d in result.decisions] == ["v/urgent"]


def test_fair_share_counts_this_cycles_admissions() -> None:
    qs = queues(quota("vision", {"A100": 32}), quota("nlp", {"A100": 32}))
    pending = [gang(f"v/{i}", gpus=8, queue="vision", submitted_at=float(i)) for i in range(3)]
    pending += [gang(f"nlp/{i}", gpus=8, queue="nlp", submitted_at=10.0 + i) for i in range(3)]
    # Room for four gangs of 8: two each, alternating (equal shares go by age), although every
    # vision gang is older than every nlp gang.
    four = by_name(cluster("a", nodes("n", 4)))
    result = run_cycle(pending, four, PROFILE, now=100.0, queues=qs)
    assert [d.gang_key for d in result.decisions] == ["v/0", "nlp/0", "v/1", "nlp/1"]


def test_priority_orders_within_a_queue_and_smaller_gangs_backfill() -> None:
    qs = queues(quota("vision", {"A100": 16}))
    low_old = gang("v/low-old", gpus=8, queue="vision", priority=0, submitted_at=0.0)
    high_new = gang("v/high-new", pods=2, gpus=8, queue="vision", priority=5, submitted_at=50.0)
    small = gang("v/small", gpus=4, queue="vision", priority=0, submitted_at=60.0)
    result = run_cycle([low_old, high_new, small], ROOMY, PROFILE, now=100.0, queues=qs,
                       running=[running("v/run", "vision", 4)])
    # high-new (16) does not fit the 12 left; low-old (8) and then small (4) backfill the quota.
    assert [d.gang_key for d in result.decisions] == ["v/low-old", "v/small"]
    assert result.unplaced[0].gang_key == "v/high-new"


def test_an_aged_gang_blocked_by_quota_holds_its_queues_quota_against_smaller_ones() -> None:
    qs = queues(quota("vision", {"A100": 16}))
    big = gang("v/big", pods=2, gpus=8, queue="vision", submitted_at=0.0)
    small = gang("v/small", gpus=8, queue="vision", submitted_at=5.0)
    busy = [running("v/run", "vision", 8)]
    young = run_cycle([big, small], ROOMY, PROFILE, now=100.0, queues=qs, running=busy)
    assert [d.gang_key for d in young.decisions] == ["v/small"]  # backfill while the big one is young
    aged = run_cycle([big, small], ROOMY, PROFILE, now=700.0, queues=qs, running=busy)
    assert aged.decisions == ()
    by_key = {u.gang_key: u for u in aged.unplaced}
    assert by_key["v/big"].quota is not None and by_key["v/big"].quota.holding
    assert "Holding its demand in queue vision's quota" in render_unplaced(by_key["v/big"])
    small_block = by_key["v/small"].quota
    assert small_block is not None and not small_block.holding
    assert small_block.message == (
        "queue vision uses 8 of 16 A100 GPUs and holds 16 for v/big (no cohort to borrow from); waits for 8"
    )
    # Once the running gang finishes, the big one is admitted (and placed) first.
    done = run_cycle([big, small], ROOMY, PROFILE, now=800.0, queues=qs)
    assert [d.gang_key for d in done.decisions] == ["v/big"]
    # A higher-priority gang of the queue is not held back.
    urgent = gang("v/urgent", gpus=8, queue="vision", priority=9, submitted_at=700.0)
    result = run_cycle([big, urgent], ROOMY, PROFILE, now=700.0, queues=qs, running=busy)
    assert [d.gang_key for d in result.decisions] == ["v/urgent"]


def test_a_node_hold_also_holds_quota_and_is_dropped_when_its_queue_no_longer_admits_it() -> None:
    snaps = by_name(cluster("a", nodes("busy", 2, used=4) + nodes("free", 2)))
    qs = queues(quota("vision", {"A100": 36}))
    big = gang("v/big", pods=4, gpus=8, queue="vision", submitted_at=0.0)
    small = gang("v/small", pods=1, gpus=8, queue="vision", submitted_at=650.0)
    first = run_cycle([big, small], snaps, PROFILE, now=700.0, queues=qs)
    by_key = {u.gang_key: u for u in first.unplaced}
    assert by_key["v/big"].hold is not None and by_key["v/big"].hold.cluster == "a"
    # The small gang is blocked by the held quota, not only by the held nodes.
    small_block = by_key["v/small"].quota
    assert small_block is not None and "holds 32 for a gang holding nodes" in small_block.message
    # Next cycle the queue's quota is used elsewhere: the big gang is not admitted and loses its hold.
    second = run_cycle(
        [big], snaps, PROFILE, now=701.0, reservations=first.reservations, queues=qs,
        running=[running("v/other", "vision", 16)],
    )
    assert second.unplaced[0].hold is None and second.unplaced[0].quota is not None
    assert [(r.gang_uid, r.reason.value) for r in second.released] == [(big.uid, "dropped")]
    assert second.reservations.holds() == ()


def test_gangs_without_a_queue_have_no_quota_and_a_share_of_zero() -> None:
    one_slot = by_name(cluster("a", [node("n-0")]))
    qs = queues(quota("vision", {"A100": 64}))
    queued = gang("v/g", gpus=8, queue="vision", priority=10)
    plain = gang("plain", gpus=8, priority=0, submitted_at=100.0)
    # vision uses some of its quota: the no-queue lane (share 0) goes first, whatever the priorities.
    result = run_cycle([queued, plain], one_slot, PROFILE, now=200.0, queues=qs,
                       running=[running("v/old", "vision", 8)])
    assert [d.gang_key for d in result.decisions] == ["plain"]
    assert result.decisions[0].queue == "" and not result.decisions[0].borrowed
    assert result.usage["vision"].gangs == 1 and "" not in result.usage
    # An idle queue also has share 0: then priority decides.
    result = run_cycle([queued, plain], one_slot, PROFILE, now=200.0, queues=qs)
    assert [d.gang_key for d in result.decisions] == ["v/g"]


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(snapshots=cluster_sets(), pending=gang_lists())
def test_queues_absent_or_unused_change_nothing(snapshots: dict[str, ClusterSnapshot], pending: list[GangRequest]) -> None:
    plain = run_cycle(pending, snapshots, PROFILE, now=1000.0)
    explicit = run_cycle(pending, snapshots, PROFILE, now=1000.0, queues=None, running=())
    # Queues exist, but no gang names one: same decisions in the same order.
    unused = run_cycle(pending, snapshots, PROFILE, now=1000.0, queues=queues(quota("vision", {"A100": 1})))
    for other in (explicit, unused):
        assert other.decisions == plain.decisions
        assert other.unplaced == plain.unplaced
        assert other.reservations == plain.reservations


@SETTINGS
@given(snapshots=cluster_sets(), pending=gang_lists())
def test_admitted_usage_never_exceeds_nominal_plus_what_the_cohort_lends(
    snapshots: dict[str, ClusterSnapshot], pending: list[GangRequest]
) -> None:
    names = ["vision", "nlp", "solo"]
    queued = [dataclasses.replace(g, queue=names[i % 3]) for i, g in enumerate(pending)]
    qs = queues(
        quota("vision", {"A100": 8, "H100": 4}, cohort="research", borrowing_limit=QuotaAmounts({"A100": 4})),
        quota("nlp", {"A100": 4}, cohort="research"),
        quota("solo", {"H100": 8}),
    )
    result = run_cycle(queued, snapshots, PROFILE, now=1000.0, queues=qs)
    usage = result.usage
    for model in ("A100", "H100"):
        cohort_used = sum(usage[q].used.gpus.get(model, 0) for q in ("vision", "nlp"))
        cohort_nominal = sum(qs[q].nominal.gpus.get(model, 0) for q in ("vision", "nlp"))
        assert cohort_used <= cohort_nominal
        assert usage["solo"].used.gpus.get(model, 0) <= qs["solo"].nominal.gpus.get(model, 0)
    assert usage["vision"].borrowed.gpus.get("A100", 0) <= 4
    for decision in result.decisions:
        g = next(x for x in queued if x.uid == decision.gang_uid)
        assert decision.queue == g.queue
    for waiting in result.unplaced:
        if waiting.quota is not None:
            assert all(r.code == "QuotaExceeded" or r.filter != "quota" for r in waiting.why_not.values())


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda: QueueQuota(""), "queue name"),
        (lambda: QueueQuota("q", weight=0), "weight must be a positive finite number"),
        (lambda: QueueQuota("q", weight=float("nan")), "weight must be a positive finite number"),
        (lambda: QueueQuota("q", QuotaAmounts({"A100": -1})), "non-negative int"),
        (lambda: QueueQuota("q", QuotaAmounts({"": 1})), "quota GPU model"),
        (lambda: QueueQuota("q", QuotaAmounts(cpu_milli=-5)), "non-negative int"),
        (lambda: QueueQuota("q", QuotaAmounts({"A100": 1.5})), "non-negative int"),  # type: ignore[dict-item]
        (lambda: QueueQuota("q", within_queue="Sometimes"), "Sometimes"),  # type: ignore[arg-type]
        (lambda: QueueQuota("q", cohort="x" * 300), "cohort"),
        (lambda: running("k", "q", 8, model=None), "needs the gpu_model"),
        (lambda: dataclasses.replace(running("k", "q", 8), started_at=float("inf")), "finite"),
        (lambda: gang("g", queue="q" * 254), "queue must be a string"),
        (lambda: QuotaLedger({"a": QueueQuota("b")}, ()), "named 'b'"),
        (lambda: QuotaLedger({}, [running("k", "q", 8), running("k", "q", 8)]), "appears twice"),
    ],
)
def test_bad_quota_inputs_are_refused_with_a_clear_error(build: object, error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error):
        build()  # type: ignore[operator]


def test_run_cycle_refuses_queues_without_the_quota_filter_and_gangs_both_pending_and_running() -> None:
    g = gang("v/g", queue="vision")
    no_quota = Profile(filters=("health", "gpu-model", "gang-fit"))
    with pytest.raises(ProfileError, match="filter 'quota' is required"):
        run_cycle([g], ROOMY, no_quota, now=0.0, queues=queues(quota("vision", {})))
    twin = dataclasses.replace(running("v/g", "vision", 8), uid=g.uid)
    with pytest.raises(ValueError, match="both pending and running"):
        run_cycle([g], ROOMY, PROFILE, now=0.0, queues=queues(quota("vision", {})), running=[twin])


def test_candidates_lazily_and_in_full_agree_on_order_and_reasons() -> None:
    qs = queues(
        quota("vision", {"A100": 16}, cohort="research", within_queue=WithinQueue.LOWER_PRIORITY,
              reclaim_borrowed=True),
        quota("nlp", {"A100": 0}, cohort="research"),
    )
    gangs_running = [
        running("v/low", "vision", 4, cluster_name="a", on={"n-0": 4}, priority=1, started_at=5.0),
        running("v/lower", "vision", 4, cluster_name="a", on={"n-1": 4}, priority=0, started_at=1.0),
        running("v/peer", "vision", 4, cluster_name="a", on={"n-2": 4}, priority=5),
        running("nlp/borrowed", "nlp", 4, cluster_name="a", on={"n-3": 4}, priority=9, borrowed=True),
        running("nlp/own", "nlp", 4, cluster_name="a", on={"n-4": 4}, priority=0),
        running("v/elsewhere", "vision", 4, cluster_name="b", on={"m-0": 4}, priority=0),
    ]
    ledger = QuotaLedger(qs, gangs_running, models=("A100",))
    g = gang("v/hi", gpus=4, queue="vision", priority=5)
    full = ledger.victim_candidates(g, "a")
    assert [(v.key, r.value) for v, r in full] == [
        ("nlp/borrowed", "ReclaimBorrowed"),  # borrowed first, whatever its priority
        ("v/lower", "LowerPriority"),
        ("v/low", "LowerPriority"),
    ]
    assert list(ledger.iter_candidates(g, "a")) == full
    assert list(ledger.iter_candidates(g, "a", models=("A100",))) == full
    assert ledger.victim_candidates(g, "a", excluded={"run-v/lower"}) == [full[0], full[2]]
    # Evicted gangs are no candidates any more.
    ledger.evict(full[1][0])
    assert list(ledger.iter_candidates(g, "a")) == ledger.victim_candidates(g, "a") == [full[0], full[2]]
