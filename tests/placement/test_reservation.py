"""Reservations: assume, release when shown, expire, forget idempotently, never reserve a gang twice."""

from __future__ import annotations

import pytest
from placement_builders import cluster, nodes

from federator.placement import EMPTY_BOOK, Reservation, ReservationKind, Resources, assume, reconcile_reservations
from federator.placement.reservation import ReleaseReason, expire_reservations


def placed(uid: str, *, cluster_name: str = "a", pods: int = 2, rv: str = "10", expires: float = 100.0) -> Reservation:
    return Reservation(
        gang_uid=uid,
        gang_key=f"ns/{uid}",
        cluster=cluster_name,
        kind=ReservationKind.PLACED,
        amounts={"n-000": Resources(gpu=4), "n-001": Resources(gpu=4)},
        pods=pods,
        resource_version=rv,
        created_at=0.0,
        expires_at=expires,
    )


def test_assume_applies_only_this_clusters_reservations() -> None:
    snap = cluster("a", nodes("n", 3), rv="10")
    book = EMPTY_BOOK.reserve(placed("g1")).reserve(placed("g2", cluster_name="b"))
    view = assume(snap, book)
    assert view.nodes["n-000"].free.gpu == 4 and view.nodes["n-001"].free.gpu == 4
    assert view.nodes["n-002"] is snap.nodes["n-002"]
    assert view.index.free_gpu_by_model["A100"] == 16
    assert assume(snap, EMPTY_BOOK) is snap


def test_released_when_the_member_shows_all_pods_bound() -> None:
    book = EMPTY_BOOK.reserve(placed("g1", pods=2))
    partly = cluster("a", nodes("n", 3), rv="11", bound_pods={"g1": 1})
    kept, released = reconcile_reservations(book, partly, now=1.0)
    assert kept.get("g1") is not None and released == ()
    shown = cluster("a", nodes("n", 3), rv="12", bound_pods={"g1": 2})
    after, released = reconcile_reservations(book, shown, now=1.0)
    assert after.get("g1") is None
    assert [(r.gang_uid, r.reason) for r in released] == [("g1", ReleaseReason.SHOWN)]


def test_a_snapshot_at_the_decided_resource_version_cannot_release() -> None:
    book = EMPTY_BOOK.reserve(placed("g1", rv="10"))
    same_rv = cluster("a", nodes("n", 3), rv="10", bound_pods={"g1": 2})
    kept, _ = reconcile_reservations(book, same_rv, now=1.0)
    assert kept.get("g1") is not None


def test_expiry() -> None:
    book = EMPTY_BOOK.reserve(placed("g1", expires=50.0)).reserve(placed("g2", expires=500.0))
    after, released = expire_reservations(book, now=50.0)
    assert after.get("g1") is None and after.get("g2") is not None
    assert [(r.gang_uid, r.reason) for r in released] == [("g1", ReleaseReason.EXPIRED)]
    after, released = reconcile_reservations(book, cluster("a", nodes("n", 3), rv="11"), now=60.0)
    assert after.get("g1") is None and [r.reason for r in released] == [ReleaseReason.EXPIRED]


def test_forget_is_idempotent_and_leaves_the_input_alone() -> None:
    book = EMPTY_BOOK.reserve(placed("g1"))
    once = book.forget("g1")
    assert once.get("g1") is None and book.get("g1") is not None
    assert once.forget("g1") is once
    assert EMPTY_BOOK.forget("never") is EMPTY_BOOK


def test_a_gang_is_never_reserved_twice() -> None:
    book = EMPTY_BOOK.reserve(placed("g1"))
    with pytest.raises(ValueError, match="already has a placed reservation"):
        book.reserve(placed("g1", cluster_name="b"))


def test_validation() -> None:
    with pytest.raises(ValueError, match="must expire"):
        Reservation("g", "ns/g", "a", ReservationKind.PLACED, {}, 1, "1", 0.0, None)
    with pytest.raises(TypeError):
        Reservation("g", "ns/g", "a", ReservationKind.HOLD, {"n": 4}, 1, "1", 0.0)  # type: ignore[dict-item]
    with pytest.raises(ValueError):
        Reservation("", "ns/g", "a", ReservationKind.HOLD, {}, 1, "1", 0.0)
