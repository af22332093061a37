"""Head-of-line rule: bounded backfill with hold aging (see federator.placement.cycle)."""

from __future__ import annotations

from dataclasses import dataclass

from placement_builders import by_name, check_decisions, cluster, gang, node, nodes

from federator.placement import EMPTY_BOOK, GangRequest, Profile, Resources, run_cycle
from federator.placement.reservation import ReservationBook, ReservationKind

HOLD_AFTER = 180.0
PROFILE = Profile(hold_after_seconds=HOLD_AFTER)


def test_young_big_gang_gets_no_hold_and_smaller_ones_backfill() -> None:
    snaps = by_name(cluster("a", nodes("n", 4, used=4)))
    big = gang("big", pods=4, gpus=8, submitted_at=100.0)
    small = gang("small", pods=2, gpus=4, submitted_at=101.0)
    result = run_cycle([big, small], snaps, PROFILE, now=150.0)
    assert [d.gang_key for d in result.decisions] == ["small"]
    assert result.unplaced[0].hold is None
    assert result.reservations.holds() == ()


def test_aged_big_gang_holds_the_closest_cluster_and_backfill_uses_the_rest() -> None:
    snaps = by_name(
        cluster("far", nodes("n", 4, used=6)),  # could hold the gang, but little is free
        cluster("near", nodes("busy", 2, used=4) + nodes("free", 2) + nodes("spare", 2, used=6)),
    )
    big = gang("big", pods=4, gpus=8)
    small = gang("small", pods=1, gpus=2, submitted_at=50.0)
    result = run_cycle([big, small], snaps, PROFILE, now=HOLD_AFTER)
    (waiting,) = result.unplaced
    assert waiting.gang_key == "big" and waiting.hold is not None
    assert waiting.hold.cluster == "near"
    assert set(waiting.hold.nodes) == {"free-000", "free-001", "busy-000", "busy-001"}
    assert waiting.hold.ready_fraction == (8 + 8 + 4 + 4) / 32
    hold = result.reservations.get(big.uid)
    assert hold is not None and hold.kind is ReservationKind.HOLD
    # The small gang was placed, and not on a held node.
    (decision,) = result.decisions
    assert decision.gang_key == "small"
    held = {("near", n) for n in waiting.hold.nodes}
    assert all((decision.cluster, p.node) not in held for p in decision.assignment)


def test_hold_blocks_backfill_into_held_amounts_only() -> None:
    # One cluster, big gang aged: it holds all four nodes (two already free).
    snaps = by_name(cluster("a", nodes("busy", 2, used=4) + nodes("free", 2)))
    big = gang("big", pods=4, gpus=8)
    first = run_cycle([big], snaps, PROFILE, now=HOLD_AFTER)
    assert first.unplaced[0].hold is not None
    small = gang("small", pods=1, gpus=2, submitted_at=HOLD_AFTER)
    second = run_cycle([big, small], snaps, PROFILE, now=HOLD_AFTER + 1, reservations=first.reservations)
    assert second.decisions == ()
    rejection = next(u for u in second.unplaced if u.gang_key == "small").why_not["a"]
    assert rejection.code == "InsufficientGpu"
    # Without the hold the small gang would fit at once.
    assert run_cycle([small], snaps, PROFILE, now=HOLD_AFTER + 1).decisions


def test_higher_priority_ignores_a_lower_priority_hold() -> None:
    snaps = by_name(cluster("a", nodes("busy", 2, used=4) + nodes("free", 2)))
    big = gang("big", pods=4, gpus=8, priority=0)
    first = run_cycle([big], snaps, PROFILE, now=HOLD_AFTER)
    urgent = gang("urgent", pods=1, gpus=8, priority=10, submitted_at=HOLD_AFTER)
    second = run_cycle([big, urgent], snaps, PROFILE, now=HOLD_AFTER + 1, reservations=first.reservations)
    assert [d.gang_key for d in second.decisions] == ["urgent"]
    # The hold survives (it still could hold the gang once the nodes drain).
    assert second.reservations.get(big.uid) is not None


def test_holds_are_bounded_per_cluster() -> None:
    snaps = by_name(cluster("a", nodes("n", 4, used=4)), cluster("b", nodes("n", 4, used=4)))
    first = gang("first", pods=4, gpus=8, submitted_at=0.0)
    second = gang("second", pods=4, gpus=8, submitted_at=1.0)
    third = gang("third", pods=4, gpus=8, submitted_at=2.0)
    result = run_cycle([first, second, third], snaps, PROFILE, now=1_000.0)
    holds = {u.gang_key: u.hold.cluster if u.hold else None for u in result.unplaced}
    assert holds == {"first": "a", "second": "b", "third": None}
    assert len(result.reservations.holds()) == 2


def test_hold_is_dropped_when_its_gang_leaves_the_queue_or_its_cluster_is_cordoned() -> None:
    snaps = by_name(cluster("a", nodes("n", 4, used=4)), cluster("b", nodes("n", 4, used=6)))
    big = gang("big", pods=4, gpus=8)
    first = run_cycle([big], snaps, PROFILE, now=HOLD_AFTER)
    assert first.unplaced[0].hold is not None and first.unplaced[0].hold.cluster == "a"
    gone = run_cycle([], snaps, PROFILE, now=HOLD_AFTER + 1, reservations=first.reservations)
    assert len(gone.reservations) == 0 and [r.reason.value for r in gone.released] == ["dropped"]
    cordoned = by_name(cluster("a", nodes("n", 4, used=4), cordoned=True), snaps["b"])
    moved = run_cycle([big], cordoned, PROFILE, now=HOLD_AFTER + 1, reservations=first.reservations)
    assert moved.unplaced[0].hold is not None and moved.unplaced[0].hold.cluster == "b"


def test_gang_that_never_fits_takes_no_hold() -> None:
    snaps = by_name(cluster("a", nodes("n", 2)))
    result = run_cycle([gang("huge", pods=8, gpus=8)], snaps, PROFILE, now=10_000.0)
    assert result.unplaced[0].never_fits and result.unplaced[0].hold is None


@dataclass
class Running:
    uid: str
    cluster: str
    amounts: dict[str, Resources]
    ends: int


def _starvation_run(profile: Profile, *, cycles: int) -> tuple[int | None, int, list[str]]:
    """A big gang behind a steady stream of small ones, on a busy cluster "a" and a small cluster "b".

    Returns (cycle the big gang was placed or None, small gangs placed, problems found).
    Each cycle is 60 s. Background pods on "a" finish one node per cycle; small gangs
    (1 pod x 2 GPUs) arrive four per cycle and run three cycles.
    """
    base = {
        "a": [node(f"a-{i}", used=4) for i in range(4)],
        "b": [node(f"b-{i}") for i in range(2)],
    }
    background_ends = {f"a-{i}": i + 1 for i in range(4)}
    running: list[Running] = []
    queue: dict[str, GangRequest] = {}
    big = gang("big", pods=4, gpus=8, submitted_at=0.0)
    queue[big.uid] = big
    book: ReservationBook = EMPTY_BOOK
    small_placed = 0
    problems: list[str] = []
    for t in range(cycles):
        now = t * 60.0
        running = [r for r in running if r.ends > t]
        snaps = {}
        for name, cluster_nodes in base.items():
            built = []
            for n in cluster_nodes:
                allocated = n.allocated if background_ends.get(n.name, 0) > t else Resources()
                for r in running:
                    if r.cluster == name and n.name in r.amounts:
                        allocated = allocated + r.amounts[n.name]
                built.append(n.with_allocated(allocated))
            shown = {r.uid: 1 for r in running if r.cluster == name}
            snaps[name] = cluster(name, built, rv=str(t + 1), bound_pods=shown)
        for k in range(4):
            small = gang(f"small-{t}-{k}", pods=1, gpus=2, submitted_at=now + k * 0.01)
            queue[small.uid] = small
        result = run_cycle(list(queue.values()), snaps, profile, now=now, reservations=book)
        try:
            check_decisions(result.decisions, queue, snaps)
        except AssertionError as error:
            problems.append(f"cycle {t}: {error}")
        book = result.reservations
        for decision in result.decisions:
            reservation = book.get(decision.gang_uid)
            assert reservation is not None
            if decision.gang_uid == big.uid:
                return t, small_placed, problems
            running.append(Running(decision.gang_uid, decision.cluster, dict(reservation.amounts), t + 3))
            small_placed += 1
            del queue[decision.gang_uid]
    return None, small_placed, problems


def test_hold_aging_lets_a_big_gang_through_a_stream_of_small_ones() -> None:
    placed_at, small_placed, problems = _starvation_run(PROFILE, cycles=40)
    assert problems == []
    assert placed_at is not None, "the big gang starved despite its hold"
    # It waited for the hold age (3 cycles) plus the drain of the held nodes, not forever.
    assert placed_at <= 3 + 3 + 2
    # And the small gangs were not blocked meanwhile: cluster "b" and free room kept taking them.
    assert small_placed >= 2 * placed_at


def test_without_holds_the_same_stream_starves_the_big_gang() -> None:
    placed_at, small_placed, problems = _starvation_run(Profile(max_holds_per_cluster=0), cycles=40)
    assert problems == []
    assert placed_at is None
    assert small_placed > 100
