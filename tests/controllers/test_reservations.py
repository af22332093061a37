"""The reservation ledger (controllers/reservations.py), built without a hub: the only writer of the book.

assume / forget (idempotent) / adopt a cycle's book only over the book it was computed from /
release-when-bound only on a newer snapshot that shows every pod / rebuild a reservation for a job an
earlier hub placed, and none when its pods are already bound."""

from __future__ import annotations

import dataclasses

import pytest

from federator.controllers.jobs import ReservationLedger as ExportedLedger
from federator.controllers.reservations import ReservationLedger
from federator.placement import Profile, Reservation, ReservationKind, Resources, run_cycle
from federator.placement.gang import GangRequest, RoleRequest

from .placement_parts_support import GI, T0, snapshot


def placed(uid: str, *, cluster: str = "a", pods: int = 2, rv: str = "10") -> Reservation:
    return Reservation(gang_uid=uid, gang_key=f"ns/{uid}", cluster=cluster, kind=ReservationKind.PLACED,
                       amounts={"n-0": Resources(gpu=8), "n-1": Resources(gpu=8)}, pods=pods, resource_version=rv,
                       created_at=T0, expires_at=T0 + 300)


def hold(uid: str) -> Reservation:
    return Reservation(gang_uid=uid, gang_key=f"ns/{uid}", cluster="a", kind=ReservationKind.HOLD,
                       amounts={"n-0": Resources(gpu=8)}, pods=1, resource_version="10", created_at=T0)


def gang(uid: str, *, pods: int = 2) -> GangRequest:
    return GangRequest(key=f"ns/{uid}", uid=uid, roles=(RoleRequest("worker", pods, Resources(64_000, 512 * GI, 8, 0)),),
                       submitted_at=T0)


def test_the_hub_has_one_ledger_type() -> None:
    assert ExportedLedger is ReservationLedger


def test_assume_then_forget_is_idempotent() -> None:
    ledger = ReservationLedger()
    ledger.assume(placed("g1"))
    assert ledger.get("g1") is not None and len(ledger) == 1
    assert ledger.forget("g1") is True
    assert ledger.forget("g1") is False
    assert ledger.get("g1") is None and len(ledger) == 0


def test_a_gang_is_never_assumed_twice() -> None:
    ledger = ReservationLedger()
    ledger.assume(placed("g1"))
    with pytest.raises(ValueError, match="already has a placed reservation"):
        ledger.assume(placed("g1", cluster="b"))
    kept = ledger.get("g1")
    assert kept is not None and kept.cluster == "a"


def test_the_book_cannot_be_assigned() -> None:
    ledger = ReservationLedger()
    with pytest.raises(AttributeError):
        ledger.book = ledger.book.reserve(placed("g1"))  # type: ignore[misc]


def test_adopt_takes_a_cycles_book_only_over_the_book_it_read() -> None:
    ledger = ReservationLedger()
    base = ledger.book
    result = run_cycle([gang("g1")], {"a": snapshot("a")}, Profile(), now=T0, reservations=base)
    assert result.reservations.get("g1") is not None
    ledger.assume(placed("other", cluster="b"))  # someone wrote meanwhile: the cycle's book would lose it
    with pytest.raises(ValueError, match="changed since"):
        ledger.adopt(result.reservations, base=base)
    assert ledger.get("g1") is None and ledger.get("other") is not None
    base = ledger.book
    result = run_cycle([gang("g1")], {"a": snapshot("a")}, Profile(), now=T0, reservations=base)
    ledger.adopt(result.reservations, base=base)
    assert ledger.get("g1") is not None and ledger.get("other") is not None


@pytest.mark.parametrize(("rv", "bound", "released"), [
    ("10", 2, False),  # the snapshot the decision saw: its pods may be counted in neither
    ("11", 1, False),  # newer, but one pod is not bound yet
    ("11", 2, True),
    ("12", 3, True),
])
def test_release_when_bound(rv: str, bound: int, released: bool) -> None:
    ledger = ReservationLedger()
    ledger.assume(placed("g1", rv="10", pods=2))
    shown = {"a": snapshot("a", rv=rv, bound_pods={"g1": bound})}
    assert ledger.release_when_bound("g1", shown) is released
    assert (ledger.get("g1") is None) is released


def test_release_when_bound_needs_its_own_clusters_snapshot_and_leaves_holds() -> None:
    ledger = ReservationLedger()
    ledger.assume(placed("g1", cluster="a", rv="10"))
    ledger.assume(hold("h1"))
    other = {"b": snapshot("b", rv="11", bound_pods={"g1": 2})}
    assert ledger.release_when_bound("g1", other) is False
    assert ledger.release_when_bound("h1", {"a": snapshot("a", rv="11", bound_pods={"h1": 1})}) is False
    assert ledger.release_when_bound("nobody", {"a": snapshot("a", rv="11")}) is False
    assert ledger.get("g1") is not None and ledger.get("h1") is not None


def test_rebuild_reserves_a_gang_placed_by_an_earlier_hub_even_on_an_unhealthy_cluster() -> None:
    ledger = ReservationLedger()
    busy = snapshot("a", nodes=3, used={"n-0": 8})
    unhealthy = busy.with_info(dataclasses.replace(busy.info, healthy=False, cordoned=True))
    assert ledger.rebuild(gang("g1", pods=2), unhealthy, Profile(), now=T0) is True
    rebuilt = ledger.get("g1")
    assert rebuilt is not None and rebuilt.kind is ReservationKind.PLACED and rebuilt.cluster == "a"
    assert rebuilt.pods == 2 and "n-0" not in rebuilt.amounts  # the busy node holds nothing of it


def test_rebuild_reserves_nothing_for_bound_pods_or_no_room() -> None:
    ledger = ReservationLedger()
    assert ledger.rebuild(gang("g1", pods=2), snapshot("a", bound_pods={"g1": 2}), Profile(), now=T0) is False
    full = snapshot("a", nodes=2, used={"n-0": 8, "n-1": 8})
    assert ledger.rebuild(gang("g2", pods=2), full, Profile(), now=T0) is False
    assert len(ledger) == 0
