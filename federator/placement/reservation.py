"""Reservations: what placement has promised but the member clusters do not show yet.

Assume, then delegate, forget on failure (Kueue's cache, kube-scheduler's
Reserve/Unreserve):
- a PLACED reservation holds the node-level amounts of a decision from the
  moment it is made until the member's snapshot shows the gang's pods bound
  to nodes (`ClusterSnapshot.bound_pods[uid] >= pods`; from then on the
  nodes' `allocated` counts them, so keeping the reservation would count
  them twice), until the decision is rolled back (`forget`, idempotent), or
  until it expires (`expires_at`, the profile's reservation TTL), whichever
  comes first. While only some pods are bound the whole reservation stays:
  placement over-reserves for a moment rather than double-books.
- a HOLD reservation keeps nodes for a head-of-line gang (see `cycle`); it
  has no expiry and ends when that gang is placed or leaves the queue.

`assume` applies a book's reservations for one cluster to a fresh snapshot
in one batched update of only the reserved nodes: the "assumed" view.

Every reservation records the member resourceVersion it was decided at; a
snapshot at that same resourceVersion cannot show the gang's pods yet.

Pure: the book is an immutable value; every operation returns a new book.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from immutables import Map

from federator.placement.resources import Resources
from federator.placement.snapshot import ClusterSnapshot

__all__ = [
    "EMPTY_BOOK",
    "Release",
    "ReleaseReason",
    "Reservation",
    "ReservationBook",
    "ReservationKind",
    "assume",
    "expire_reservations",
    "reconcile_reservations",
]


class ReservationKind(StrEnum):
    PLACED = "placed"
    HOLD = "hold"


class ReleaseReason(StrEnum):
    SHOWN = "shown"  # the member shows the gang's pods bound to nodes
    EXPIRED = "expired"  # the member did not show them within the TTL
    DROPPED = "dropped"  # a hold whose gang left the queue or whose cluster is gone
    SUPERSEDED = "superseded"  # a hold replaced by a placement or a new hold


@dataclass(frozen=True, slots=True)
class Reservation:
    gang_uid: str
    gang_key: str
    cluster: str
    kind: ReservationKind
    # node name -> what this reservation holds there.
    amounts: Mapping[str, Resources]
    pods: int
    # Member resourceVersion of the snapshot the reservation was decided at.
    resource_version: str
    created_at: float
    # None for holds, which last while their gang is queued.
    expires_at: float | None = None

    def __post_init__(self) -> None:
        if not self.gang_uid or not self.cluster:
            raise ValueError("a reservation needs a gang uid and a cluster")
        object.__setattr__(self, "kind", ReservationKind(self.kind))
        if not isinstance(self.amounts, Mapping) or not all(
            isinstance(node, str) and isinstance(amount, Resources) for node, amount in self.amounts.items()
        ):
            raise TypeError("reservation amounts must map node names to Resources")
        object.__setattr__(self, "amounts", Map(self.amounts))
        if type(self.pods) is not int or self.pods < 0:
            raise ValueError("reservation pods must be a non-negative int")
        if self.expires_at is not None and not math.isfinite(self.expires_at):
            raise ValueError("reservation expires_at must be finite")
        if self.kind is ReservationKind.PLACED and self.expires_at is None:
            raise ValueError("a placed reservation must expire")

    @property
    def total(self) -> Resources:
        total = Resources()
        for amount in self.amounts.values():
            total = total + amount
        return total


@dataclass(frozen=True, slots=True)
class Release:
    gang_uid: str
    cluster: str
    kind: ReservationKind
    reason: ReleaseReason


@dataclass(frozen=True, slots=True)
class ReservationBook:
    """All reservations, at most one per gang, keyed by gang uid."""

    by_gang: Map[str, Reservation] = field(default_factory=Map)

    def __len__(self) -> int:
        return len(self.by_gang)

    def __iter__(self) -> Iterator[Reservation]:
        # Sorted so that anything built by iterating is deterministic.
        for uid in sorted(self.by_gang):
            yield self.by_gang[uid]

    def get(self, gang_uid: str) -> Reservation | None:
        return self.by_gang.get(gang_uid)

    def reserve(self, reservation: Reservation) -> ReservationBook:
        """Add a reservation. A gang's hold may be replaced; a placed reservation may not (that would
        place the gang twice): forget it first."""
        existing = self.by_gang.get(reservation.gang_uid)
        if existing is not None and existing.kind is ReservationKind.PLACED:
            raise ValueError(
                f"gang {existing.gang_key} ({existing.gang_uid}) already has a placed reservation on "
                f"{existing.cluster}; forget it before reserving again"
            )
        return ReservationBook(self.by_gang.set(reservation.gang_uid, reservation))

    def forget(self, gang_uid: str) -> ReservationBook:
        """Drop a gang's reservation (rollback after a failed delegation). Idempotent."""
        if gang_uid not in self.by_gang:
            return self
        return ReservationBook(self.by_gang.delete(gang_uid))

    def for_cluster(self, cluster: str) -> tuple[Reservation, ...]:
        return tuple(r for r in self if r.cluster == cluster)

    def clusters(self) -> frozenset[str]:
        """Clusters that have at least one reservation."""
        return frozenset(r.cluster for r in self.by_gang.values())

    def holds(self) -> tuple[Reservation, ...]:
        return tuple(r for r in self if r.kind is ReservationKind.HOLD)


EMPTY_BOOK = ReservationBook()


def _summed(reservations: tuple[Reservation, ...]) -> dict[str, Resources]:
    amounts: dict[str, Resources] = {}
    for reservation in reservations:
        for node, amount in reservation.amounts.items():
            previous = amounts.get(node)
            amounts[node] = amount if previous is None else previous + amount
    return amounts


def assume(snapshot: ClusterSnapshot, book: ReservationBook) -> ClusterSnapshot:
    """The snapshot as placement must see it: the book's reservations on this cluster added to `allocated`.

    Cost: O(reservations + reserved nodes x log n); the rest of the snapshot is shared.
    """
    mine = book.for_cluster(snapshot.name)
    if not mine:
        return snapshot
    return snapshot.with_allocation_changes(_summed(mine))


def expire_reservations(book: ReservationBook, *, now: float) -> tuple[ReservationBook, tuple[Release, ...]]:
    """Drop placed reservations whose TTL has passed."""
    released: list[Release] = []
    for reservation in book:
        if reservation.expires_at is not None and reservation.expires_at <= now:
            book = book.forget(reservation.gang_uid)
            released.append(Release(reservation.gang_uid, reservation.cluster, reservation.kind, ReleaseReason.EXPIRED))
    return book, tuple(released)


def reconcile_reservations(
    book: ReservationBook, snapshot: ClusterSnapshot, *, now: float
) -> tuple[ReservationBook, tuple[Release, ...]]:
    """Release this cluster's placed reservations that the snapshot shows, or that expired."""
    released: list[Release] = []
    for reservation in book.for_cluster(snapshot.name):
        if reservation.kind is not ReservationKind.PLACED:
            continue
        reason: ReleaseReason | None = None
        if (
            snapshot.resource_version != reservation.resource_version
            and snapshot.bound_pods.get(reservation.gang_uid, 0) >= reservation.pods
        ):
            reason = ReleaseReason.SHOWN
        elif reservation.expires_at is not None and reservation.expires_at <= now:
            reason = ReleaseReason.EXPIRED
        if reason is not None:
            book = book.forget(reservation.gang_uid)
            released.append(Release(reservation.gang_uid, reservation.cluster, reservation.kind, reason))
    return book, tuple(released)
