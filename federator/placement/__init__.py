"""federator.placement: pure gang placement over frozen cluster snapshots.

Given pending gangs (GangRequest) and immutable snapshots of every member
cluster (ClusterSnapshot), `run_cycle` chooses for each gang the one cluster
where all of it fits node by node, on the right fabric and GPU model,
nearest its data, and says for every other cluster why not. Decisions
reserve what they take (reservation.py) until the member shows the pods.
An elastic gang (roles with min_replicas < max_replicas) is placed whole at
the largest size that fits in one cluster; preemption shrinks running
elastic gangs toward their minimum before it evicts whole gangs, and
`plan_growth` (growth.py) says which running elastic gangs may grow now.
With queues (admission.py), a gang is placed only within its queue's GPU
quota (own or borrowed from its cohort), queues are served by fair share,
and a gang its queue is entitled to place may preempt whole lower-priority
or borrowing gangs of one cluster (preemption.py).

This package must never do I/O, use asyncio, read clocks, or import the
store, the API server, member clients or the simulator (import-linter
checks it). Time and state come in as arguments and go out as values.
"""

from federator.placement.admission import (
    QueueQuota,
    QueueUsage,
    QuotaAmounts,
    RunningGang,
    RunningPod,
    WithinQueue,
)
from federator.placement.cycle import CycleResult, evaluate_gang, queue_order, run_cycle
from federator.placement.decision import (
    Decision,
    Hold,
    PodAssignment,
    Preemption,
    QuotaBlock,
    Rejection,
    ScoreBreakdown,
    Shrink,
    Unplaced,
    Victim,
    VictimReason,
)
from federator.placement.framework import PluginRegistry, Profile, ProfileError
from federator.placement.gang import (
    GangRequest,
    LabelRequirement,
    LabelSelector,
    Network,
    RoleRequest,
    Toleration,
)
from federator.placement.growth import Growth, GrowthResult, plan_growth
from federator.placement.reservation import (
    EMPTY_BOOK,
    Reservation,
    ReservationBook,
    ReservationKind,
    assume,
    reconcile_reservations,
)
from federator.placement.resources import Resources
from federator.placement.snapshot import (
    ClusterInfo,
    ClusterSnapshot,
    Fabric,
    Location,
    NodeState,
    RdmaKind,
    Taint,
    TaintEffect,
)

__all__ = [
    "EMPTY_BOOK",
    "ClusterInfo",
    "ClusterSnapshot",
    "CycleResult",
    "Decision",
    "Fabric",
    "GangRequest",
    "Growth",
    "GrowthResult",
    "Hold",
    "LabelRequirement",
    "LabelSelector",
    "Location",
    "Network",
    "NodeState",
    "PluginRegistry",
    "PodAssignment",
    "Preemption",
    "Profile",
    "ProfileError",
    "QueueQuota",
    "QueueUsage",
    "QuotaAmounts",
    "QuotaBlock",
    "RdmaKind",
    "Rejection",
    "Reservation",
    "ReservationBook",
    "ReservationKind",
    "Resources",
    "RoleRequest",
    "RunningGang",
    "RunningPod",
    "ScoreBreakdown",
    "Shrink",
    "Taint",
    "TaintEffect",
    "Toleration",
    "Unplaced",
    "Victim",
    "VictimReason",
    "WithinQueue",
    "assume",
    "evaluate_gang",
    "plan_growth",
    "queue_order",
    "reconcile_reservations",
    "run_cycle",
]
