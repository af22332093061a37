"""The hub's one reservation ledger: the only writer of placement's assumed state.

A reservation (`placement.Reservation`) holds room in a member cluster for
a gang that was decided but whose pods the member does not show bound yet
(design.md invariant 4: placement never double-books). The hub keeps one
`ReservationLedger` per process (`jobs.reservations(hub)`); every change of
its book goes through one of these methods, Kueue's assume / forget:

- `adopt(book, base=...)`: the book a placement cycle or a growth plan
  computed from `base` (its decisions assumed, expired, shown and dropped
  reservations gone) replaces the ledger's; refused if the ledger changed
  since `base` was read (a lost update);
- `assume(reservation)`: one gang's reservation added (a drain's move, a
  reservation rebuilt after a restart), before anything is written;
- `rebuild(gang, snapshot, profile)`: a job left Placed by an earlier hub
  (its pods maybe not bound yet, so the snapshot does not count them) is
  fitted again on its cluster's snapshot and its reservation assumed;
- `forget(uid)`: a gang's reservation goes (its write or dispatch failed,
  its member objects were deleted, it was pulled back, it finished);
  idempotent, as kube-scheduler's Unreserve;
- `release_when_bound(uid, snapshots)`: a placed reservation goes once the
  cluster's snapshot (newer than the one it was decided at) shows every pod
  of the gang bound: the nodes' allocation counts them from then on.

A deleted job's reservation is not dropped with the job (its pods may still
get bound); it ends when the snapshot shows them, when cleanup forgets it,
or at its TTL (a cycle's `adopt`).

Must never: do I/O, or let a caller replace the book with one computed
from an older book (every other writer's change would be lost).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from federator.obs import get_logger
from federator.placement import GangRequest, Profile, ReservationKind, run_cycle
from federator.placement.reservation import EMPTY_BOOK, Reservation, ReservationBook
from federator.placement.snapshot import ClusterSnapshot

__all__ = ["ReservationLedger"]

_log = get_logger("controllers.reservations")


class ReservationLedger:
    """See the module docstring. `book` is read-only: change it through the methods."""

    def __init__(self) -> None:
        self._book: ReservationBook = EMPTY_BOOK

    @property
    def book(self) -> ReservationBook:
        return self._book

    def get(self, gang_uid: str) -> Reservation | None:
        return self._book.get(gang_uid)

    def __len__(self) -> int:
        return len(self._book)

    def adopt(self, book: ReservationBook, *, base: ReservationBook) -> None:
        """Take `book`, computed (by a pure placement call) from `base`, which must still be the ledger's
        book: ValueError (nothing changes) when someone changed the ledger since `base` was read."""
        if base is not self._book:
            raise ValueError("the reservation ledger changed since the book this one was computed from was read")
        self._book = book

    def assume(self, reservation: Reservation) -> None:
        """Add one gang's reservation (ValueError if it already holds a placed one: forget it first)."""
        self._book = self._book.reserve(reservation)

    def rebuild(self, gang: GangRequest, snapshot: ClusterSnapshot, profile: Profile, *, now: float) -> bool:
        """Reserve again what a gang decided before this hub started holds on `snapshot`'s cluster, until its
        pods show as bound: a job left in phase Placed by a crashed hub has member pods that may not be bound
        yet, so the snapshot does not count them; without a reservation the next decision could take the
        same room. The amounts come from fitting the gang on the snapshot (health and cordon ignored: the
        decision is already made). True if a reservation was assumed."""
        cluster = snapshot.name
        if snapshot.bound_pods.get(gang.uid, 0) >= gang.pod_count:
            _log.info("no reservation needed for a job placed before this hub started: its pods are bound",
                      job=gang.key, cluster=cluster, pods=gang.pod_count)
            return False
        view = snapshot.with_info(replace(snapshot.info, healthy=True, cordoned=False))
        gang = replace(gang, excluded_clusters={})
        result = run_cycle([gang], {cluster: view}, profile, now=now, reservations=self._book)
        rebuilt = result.reservations.get(gang.uid)
        if result.decisions and rebuilt is not None:
            self._book = self._book.reserve(rebuilt)
            _log.info("reservation rebuilt for a job placed before this hub started", job=gang.key,
                      cluster=cluster, pods=gang.pod_count)
            return True
        why = next((str(u.why_not.get(cluster)) for u in result.unplaced if cluster in u.why_not), None)
        _log.info("no room found to re-reserve for a job placed before this hub started; its member "
                  "pods will show in the snapshot once bound", job=gang.key, cluster=cluster,
                  why_not=(why or "")[:512])
        return False

    def forget(self, gang_uid: str) -> bool:
        """Drop the gang's reservation, if any (idempotent); True if it had one."""
        had = self._book.get(gang_uid) is not None
        if had:
            self._book = self._book.forget(gang_uid)
        return had

    def release_when_bound(self, gang_uid: str, snapshots: Mapping[str, ClusterSnapshot]) -> bool:
        """Forget the gang's placed reservation if its cluster's snapshot (in `snapshots`, by cluster name)
        is newer than the one it was decided at and shows every pod of the gang bound (keeping it would
        count them twice). True if released."""
        reservation = self._book.get(gang_uid)
        if reservation is None or reservation.kind is not ReservationKind.PLACED:
            return False
        snapshot = snapshots.get(reservation.cluster)
        if snapshot is None or snapshot.resource_version == reservation.resource_version:
            return False
        if snapshot.bound_pods.get(gang_uid, 0) < reservation.pods:
            return False
        self._book = self._book.forget(gang_uid)
        _log.info("reservation released: the member shows the gang", job_uid=gang_uid, cluster=reservation.cluster,
                  pods=reservation.pods)
        return True
