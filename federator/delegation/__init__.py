"""federator.delegation: one adapter per member scheduler renders a placed gang as that scheduler's
PodGroup plus pods and reads their state back (see `adapter.py`). Pure data and functions; the
dispatch controller does the I/O through `clusters/client.py`."""

from federator.delegation.adapter import (
    NO_GANG_GUARANTEE,
    POD_GVK,
    Adapter,
    GangPhase,
    GangStatus,
    Gvk,
    JobCondition,
    MemberObject,
    Ownership,
    RenderError,
    RoleCounts,
    SchedulerAdapter,
    gpu_node_labels,
    hub_selector,
    is_system_priority_class,
    member_priority_class,
    ownership_of,
    pod_name,
    podgroup_name,
    selector_for,
    stale_selector,
)
from federator.delegation.registry import ADAPTERS, adapter_for

__all__ = [
    "ADAPTERS",
    "NO_GANG_GUARANTEE",
    "POD_GVK",
    "Adapter",
    "GangPhase",
    "GangStatus",
    "Gvk",
    "JobCondition",
    "MemberObject",
    "Ownership",
    "RenderError",
    "RoleCounts",
    "SchedulerAdapter",
    "adapter_for",
    "gpu_node_labels",
    "hub_selector",
    "is_system_priority_class",
    "member_priority_class",
    "ownership_of",
    "pod_name",
    "podgroup_name",
    "selector_for",
    "stale_selector",
]
