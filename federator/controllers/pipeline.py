"""The parts the hub's controllers share within one term, as typed fields (no service locator).

    job cache --> placement (decide, write the decision) --> dispatch (the ONLY writer of member objects)
                                                                 |
    member watch --> member object index --> status sync (the only reader of member pods) --> job status

`Pipeline` is built in order by hub/app.py's `build_pipeline` each time the hub
takes the leadership (and for tests that run single controllers), before any
controller starts, and reached as `hub.parts`. Each controller's factory takes
from it exactly the collaborators it needs and hands them to its controller's
constructor: a controller asks another through the typed object it is handed
(`Dispatcher`, `JobCache`, `MemberObjects`, `EpochFence`, ...), never through a
dict of well-known names.

- `members` (`MemberClusters`): the member syncs and the latest frozen snapshot
  of each cluster; member sync is its only writer.
- `jobs` (`JobCache`): the one list+watch of TrainingJobs; `job_cache` runs it.
- `objects` (`MemberObjects`): this hub's member Pods and PodGroups, indexed by
  job; status sync keeps its watches following member sync.
- `reservations` (`jobs.ReservationLedger`) and `in_flight` (`jobs.InFlight`).
- `fence` (`EpochFence`): the GC raises it per cluster, dispatch waits for it.
- `namespaces` (`NamespaceCache`): the one list+watch of the hub's Namespaces,
  run while held (placement's Queue checks read their labels; the namespace
  controller follows their deletion).
- `pulling_back`: the pull-backs the stuck-gang detector has in progress (status
  sync leaves those jobs alone).
- `dispatcher`: dispatch, the only code that creates or deletes member objects;
  placement, status sync (worker restarts), stuck gangs, drain and cleanup (GC,
  deletion) ask it.
- `running` (`RunningControllers`): the controllers a factory started, for the
  hub's API (the failover plan) and for tests to observe; set and cleared by
  each factory.

This module holds types only; it starts nothing and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from federator.controllers.jobcache import JobCache
from federator.controllers.jobs import InFlight, ReservationLedger
from federator.controllers.membercluster import MemberClusters
from federator.controllers.memberobjects import MemberObjects
from federator.controllers.namespaces import NamespaceCache

if TYPE_CHECKING:
    from federator.controllers.cleanup import GarbageCollector
    from federator.controllers.dispatch import Dispatcher
    from federator.controllers.drain import ClusterDrain
    from federator.controllers.failover import ClusterFailover
    from federator.controllers.membercluster import MemberSyncController
    from federator.controllers.placement import PlacementController
    from federator.controllers.status_sync import StatusSync
    from federator.controllers.stuck import PullBack, StuckGangs

__all__ = ["EpochFence", "Pipeline", "RunningControllers"]


class EpochFence:
    """Per member cluster: does the epoch fence hold (since the hub last regained contact with it, a GC pass
    deleted every older epoch's object there)? The GC (cleanup.py) is its only writer; dispatch waits for it
    before it creates anything in a cluster back in contact.

    `held` is None while no GC runs (tests of other controllers): then nothing is waited for."""

    def __init__(self, objects: MemberObjects) -> None:
        self.objects = objects
        #: cluster -> True once the first GC pass since (re)connection issued its deletes; None: no GC running
        self.held: dict[str, bool] | None = None
        #: clusters whose latest GC pass could not read the member (its list failed): not in contact, whatever
        #: the watches say, so a dispatch does not wait for a pass that cannot complete
        self.unreadable: set[str] = set()

    def holds(self, cluster: str) -> bool:
        if self.held is None:
            return True
        return bool(self.held.get(cluster, False))

    def pending(self, cluster: str) -> bool:
        """True when `cluster` is in contact (member sync Ready, this hub's watches up) but its fence does not
        hold yet: the GC pass that deletes older epochs there is due within a tick. A cluster out of contact is
        not pending: its fence cannot rise until it returns."""
        return not self.holds(cluster) and cluster not in self.unreadable and self.objects.reachable(cluster)


@dataclass(slots=True)
class RunningControllers:
    """The controllers running in this term, each set by its own factory while it runs (None otherwise). Read
    by the hub's API and by tests; a controller reads at most placement's profile from here (drain's plan)."""

    member_sync: MemberSyncController | None = None
    placement: PlacementController | None = None
    status_sync: StatusSync | None = None
    stuck: StuckGangs | None = None
    failover: ClusterFailover | None = None
    drain: ClusterDrain | None = None
    gc: GarbageCollector | None = None


@dataclass(eq=False, slots=True)
class Pipeline:
    """See the module docstring."""

    members: MemberClusters
    jobs: JobCache
    objects: MemberObjects
    reservations: ReservationLedger
    in_flight: InFlight
    fence: EpochFence
    dispatcher: Dispatcher
    #: the one Namespace list+watch (placement's Queue checks, the namespace controller)
    namespaces: NamespaceCache
    #: uid -> the pull-back of a stuck gang in progress (stuck.py writes; status sync skips those jobs)
    pulling_back: dict[str, PullBack] = field(default_factory=dict)
    running: RunningControllers = field(default_factory=RunningControllers)
