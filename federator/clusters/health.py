"""ClusterHealth: the Reachable, Synced and Ready conditions of one member cluster.

Inputs are facts the sync loops report: probe results, watches opened and
lost, re-lists. `evaluate(now)` turns them into conditions:

- Reachable turns False after `unreachable_after_failures` failed probes
  in a row, or when a watch was lost to a connection failure and has not
  come back within `watch_loss_grace_seconds`; it turns True again when a
  probe succeeds and no watch is lost.
- The time of the *first* loss of contact (first failed probe or lost
  watch) is kept, through every further failed retry, until contact is
  back; a failover timeout measures from it (Kueue's rule).
- Synced is True when every reflector has listed (or resumed) and is
  watching; a reflector out of its watch for longer than the grace, or
  re-listing, makes it False. A snapshot loaded from a checkpoint is not
  synced until every reflector has resumed.
- Ready = Reachable and Synced.
- Lost turns True when contact has been out for longer than the cluster's
  loss grace, counted from the first loss of contact; its reason is
  `NoContact`, or `HubPartitioned` while the failover controller judges
  that the hub itself is cut off (`hub_partitioned`, set from outside).
  A blip shorter than the grace never makes a cluster Lost.

Transitions are logged and counted (obs.Metrics). Messages carry error
texts from `MemberClient`, which never hold credentials. No I/O here; the
caller passes the clocks' readings in.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from federator.apis.timestamps import format_time
from federator.clusters.client import MemberClientError, MemberUnreachable
from federator.obs import METRICS, Metrics, get_logger

__all__ = ["CONDITION_TYPES", "DEFAULT_LOSS_GRACE_SECONDS", "LOST", "ClusterHealth", "ConditionState",
           "HealthSettings"]

REACHABLE, SYNCED, READY, LOST = "Reachable", "Synced", "Ready", "Lost"
CONDITION_TYPES = (REACHABLE, SYNCED, READY, LOST)
#: Default loss grace (the hub's --cluster-loss-grace).
DEFAULT_LOSS_GRACE_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class HealthSettings:
    unreachable_after_failures: int = 3
    watch_loss_grace_seconds: float = 15.0
    #: out of contact for longer than this (from the first loss) = Lost; a MemberCluster may override it
    loss_grace_seconds: float = DEFAULT_LOSS_GRACE_SECONDS


@dataclass(slots=True)
class ConditionState:
    type: str
    status: str = "Unknown"  # True | False | Unknown
    reason: str = "Pending"
    message: str = ""
    #: wall-clock seconds of the last status change
    last_transition: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, "status": self.status, "reason": self.reason, "message": self.message[:1024],
                "lastTransitionTime": format_time(self.last_transition)}


@dataclass
class _Watch:
    established: bool = False
    #: monotonic time the watch went down (None while watching)
    down_since: float | None = None
    #: the watch is down because the member cannot be reached (vs. an API error)
    unreachable: bool = False
    error: str = ""
    relisting: bool = False
    ever_synced: bool = False


@dataclass
class ClusterHealth:
    cluster: str
    resources: tuple[str, ...]
    settings: HealthSettings = field(default_factory=HealthSettings)
    metrics: Metrics = field(default_factory=lambda: METRICS)
    wall_clock: Callable[[], float] = field(default=lambda: dt.datetime.now(dt.UTC).timestamp())
    #: set when the snapshot came from a checkpoint and not every reflector has resumed yet
    resuming: bool = False

    def __post_init__(self) -> None:
        self.log = get_logger("clusters.health").bind(cluster=self.cluster)
        self.conditions = {t: ConditionState(t, last_transition=self.wall_clock()) for t in CONDITION_TYPES}
        self._watches = {r: _Watch() for r in self.resources}
        self._probe_failures = 0
        self._probe_error = ""
        self._probe_ok = False
        #: wall-clock time of the first loss of contact, kept until contact is back
        self.first_loss_of_contact: float | None = None
        #: wall-clock time the cluster last became Synced
        self.last_synced_at: float | None = None
        #: wall-clock time of the last successful probe or established watch (contact seen)
        self.last_contact: float | None = None
        #: this cluster's loss grace (MemberCluster spec.failover.gracePeriodSeconds, else the hub's)
        self.loss_grace_seconds = self.settings.loss_grace_seconds
        #: set by the failover controller while it judges the hub itself cut off (mass loss)
        self.hub_partitioned = False
        #: monotonic time since which some reflector is out of its watch (None if all watch)
        self.out_of_sync_since: float | None = None
        for cond in self.conditions.values():
            self.metrics.member_condition.labels(cluster=self.cluster, condition=cond.type).set(0)

    # ------------------------------------------------------------ facts

    def probe_succeeded(self) -> None:
        self.last_contact = self.wall_clock()
        self._probe_failures = 0
        self._probe_error = ""
        self._probe_ok = True

    def probe_failed(self, error: MemberClientError, *, now_wall: float) -> None:
        self._probe_failures += 1
        self._probe_error = str(error)
        self._probe_ok = False
        self._lost_contact(now_wall)

    def watch_established(self, resource: str, *, now: float) -> None:
        w = self._watches[resource]
        self.last_contact = self.wall_clock()
        w.established = True
        w.down_since = None
        w.unreachable = False
        w.error = ""
        w.relisting = False
        w.ever_synced = True

    def watch_lost(self, resource: str, error: MemberClientError, *, now: float, now_wall: float) -> None:
        w = self._watches[resource]
        w.established = False
        if w.down_since is None:
            w.down_since = now
        w.unreachable = isinstance(error, MemberUnreachable)
        w.error = str(error)
        if w.unreachable:
            self._lost_contact(now_wall)

    def relisting(self, resource: str, *, now: float) -> None:
        w = self._watches[resource]
        w.established = False
        w.relisting = True
        if w.down_since is None:
            w.down_since = now

    def _lost_contact(self, now_wall: float) -> None:
        if self.first_loss_of_contact is None:
            self.first_loss_of_contact = now_wall

    # ------------------------------------------------------------ evaluation

    def lost_at(self) -> float | None:
        """When (wall clock) the cluster is, or will be, Lost if contact does not come back; None in contact."""
        if self.first_loss_of_contact is None:
            return None
        return self.first_loss_of_contact + self.loss_grace_seconds

    def next_deadline(self, now: float) -> float | None:
        """When a grace period runs out (monotonic), so the caller can re-evaluate then."""
        grace = self.settings.watch_loss_grace_seconds
        downs = [w.down_since + grace for w in self._watches.values() if w.down_since is not None]
        lost_at = self.lost_at()
        if lost_at is not None and self.conditions[LOST].status != "True":
            downs.append(now + (lost_at - self.wall_clock()))
        future = [d for d in downs if d > now]
        return min(future) if future else None

    def evaluate(self, *, now: float) -> bool:
        """Recompute the conditions; True if any changed."""
        grace = self.settings.watch_loss_grace_seconds
        wall = self.wall_clock()
        lost_watches = [(r, w) for r, w in self._watches.items()
                        if w.unreachable and w.down_since is not None and now - w.down_since >= grace]
        if self._probe_ok and not any(w.unreachable and w.down_since is not None for w in self._watches.values()):
            self.first_loss_of_contact = None  # contact is back: the next loss starts a new count
        lost_at = self.lost_at()
        if lost_at is not None and wall >= lost_at:
            # Lost is never Reachable (nor Ready), whatever the probe count says: placement must not pick it.
            last = self._probe_error or next((w.error for w in self._watches.values() if w.error), "")
            reachable = ("False", "Lost", f"no contact since {format_time(self.first_loss_of_contact or wall)}, "
                                          f"longer than the cluster's grace ({self.loss_grace_seconds:g}s)"
                                          + (f"; last: {last}" if last else ""))
        elif self._probe_failures >= self.settings.unreachable_after_failures:
            reachable = ("False", "ProbeFailed",
                         f"{self._probe_failures} health probes failed in a row; last: {self._probe_error}")
        elif lost_watches:
            resource, w = lost_watches[0]
            reachable = ("False", "WatchLost",
                         f"watch of {resource} lost for more than {grace:g}s: {w.error}")
        elif self._probe_ok or any(w.established for w in self._watches.values()):
            reachable = ("True", "Contact", "the member API answers")
        else:
            reachable = ("Unknown", "Connecting", "no answer from the member API yet")

        not_synced = [(r, w) for r, w in self._watches.items() if not w.established]
        if not not_synced:
            synced = ("True", "Watching", "every resource is listed and watched")
            self.out_of_sync_since = None
        else:
            resource, w = not_synced[0]
            if self.out_of_sync_since is None:
                self.out_of_sync_since = min((x.down_since for _, x in not_synced if x.down_since is not None),
                                             default=now)
            if self.resuming and not w.ever_synced:
                synced = ("False", "Resuming", f"snapshot loaded from a checkpoint; {resource} not resumed yet")
            elif not w.ever_synced:
                synced = ("False", "ListFailing", f"{resource} cannot be listed: {w.error}") if w.error \
                    else ("False", "Listing", f"{resource} not listed yet")
            elif w.relisting:
                synced = ("False", "Relisting", f"{resource} is being re-listed")
            elif w.down_since is not None and now - w.down_since < grace and \
                    self.conditions[SYNCED].status == "True":
                synced = ("True", "Watching", f"watch of {resource} reconnecting")
            else:
                reason = "WatchLost" if w.unreachable else "WatchFailing"
                synced = ("False", reason, f"{resource}: {w.error or 'not watching'}")
        if all(w.ever_synced for w in self._watches.values()):
            self.resuming = False

        if reachable[0] == "True" and synced[0] == "True":
            ready = ("True", "Ready", "reachable and synced")
        elif reachable[0] != "True":
            ready = ("False" if reachable[0] == "False" else "Unknown", f"Not{REACHABLE}", reachable[2])
        else:
            ready = ("False", f"Not{SYNCED}", synced[2])
        lost_at = self.lost_at()
        if lost_at is not None and wall >= lost_at:
            assert self.first_loss_of_contact is not None
            since = format_time(self.first_loss_of_contact)
            if self.hub_partitioned:
                lost = ("True", "HubPartitioned",
                        f"no contact since {since}, but so many clusters were lost at once that the hub assumes "
                        "it is itself cut off: nothing fails over")
            else:
                lost = ("True", "NoContact", f"no contact since {since} (grace {self.loss_grace_seconds:g}s): "
                                             "its gangs fail over")
        elif lost_at is not None and reachable[0] == "False":
            lost = ("False", "WithinGrace", f"out of contact since {format_time(self.first_loss_of_contact or wall)}; "
                                            f"Lost after {self.loss_grace_seconds:g}s")
        else:
            lost = ("False", "Contact", "in contact")
        changed = False
        for ctype, (status, reason, message) in ((REACHABLE, reachable), (SYNCED, synced), (READY, ready),
                                                 (LOST, lost)):
            changed |= self._set(ctype, status, reason, message, wall)
        if synced[0] == "True" and self.last_synced_at is None:
            self.last_synced_at = wall
        return changed

    def _set(self, ctype: str, status: str, reason: str, message: str, wall: float) -> bool:
        cond = self.conditions[ctype]
        transition = cond.status != status
        if not transition and cond.reason == reason and cond.message == message:
            return False
        if transition:
            cond.last_transition = wall
            self.metrics.member_condition_transitions.labels(cluster=self.cluster, condition=ctype,
                                                             status=status).inc()
            self.metrics.member_condition.labels(cluster=self.cluster, condition=ctype).set(
                1 if status == "True" else 0)
            healthy = status != "True" if ctype == LOST else status == "True"
            log = self.log.info if healthy else self.log.warning
            log("member condition changed", condition=ctype, status=status, was=cond.status, reason=reason,
                message=message[:300])
            if ctype == SYNCED and status == "True":
                self.last_synced_at = wall
        cond.status, cond.reason, cond.message = status, reason, message
        return True

    @property
    def ready(self) -> bool:
        return self.conditions[READY].status == "True"

    @property
    def reachable(self) -> bool:
        return self.conditions[REACHABLE].status == "True"

    @property
    def lost(self) -> bool:
        return self.conditions[LOST].status == "True"

    @property
    def synced(self) -> bool:
        return self.conditions[SYNCED].status == "True"

    def status_conditions(self) -> list[dict[str, Any]]:
        return [self.conditions[t].as_dict() for t in CONDITION_TYPES]
