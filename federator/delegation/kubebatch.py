"""The kube-batch adapter: a scheduling.incubator.k8s.io/v1alpha1 PodGroup plus pods (schedulerName `kube-batch`).

Pods join the group through the annotation `scheduling.k8s.io/group-name`.
This PodGroup version has minMember, queue and priorityClassName (set for a
job with a priority: kube-batch orders jobs by it) but no minResources, so
none is sent (the API would reject the field). Phases are Pending | Running |
Unknown; Running means minMember pods are allocated, the gang scheduled.
kube-batch was archived in 2021 (v1alpha2 moved to `scheduling.sigs.dev`,
not supported). kube-api-notes §11.

Data only: all behaviour lives in `adapter.py`. Never does I/O.
"""

from __future__ import annotations

from federator.delegation.adapter import Gvk, PodGroupKind, SchedulerAdapter

__all__ = ["KUBE_BATCH", "KUBE_BATCH_PODGROUP"]

KUBE_BATCH_PODGROUP = Gvk(group="scheduling.incubator.k8s.io", version="v1alpha1", kind="PodGroup",
                          plural="podgroups")

KUBE_BATCH = SchedulerAdapter(
    name="kube-batch",
    default_scheduler_name="kube-batch",
    pod_group=PodGroupKind(
        gvk=KUBE_BATCH_PODGROUP,
        member_key="scheduling.k8s.io/group-name",
        member_by="annotation",
        has_min_resources=False,
        queue="default",
        schedule_timeout_seconds=None,
        admitted_phases=frozenset({"Running"}),
        failed_phases=frozenset(),
        has_priority_class=True,
    ),
)
