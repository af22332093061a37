"""The Volcano adapter: a scheduling.volcano.sh/v1beta1 PodGroup plus pods (schedulerName `volcano`).

Pods join the group through the annotation `scheduling.k8s.io/group-name`
(Volcano also reads `scheduling.volcano.sh/group-name`; the former is the
one its own controllers write). The PodGroup has minMember = every pod of
the gang (an elastic gang's minimum: adapter.py), minResources = those pods' summed requests (Volcano's enqueue
action admits a group into its queue only when the queue has room for
them), the queue (`default`; another with `dataclasses.replace`) and, for a
job with a priority, spec.priorityClassName (Volcano orders jobs by it).

Volcano's phases are Pending | Inqueue | Running | Unknown | Completed.
Inqueue means the queue accepted the group but nothing is allocated yet, so
it is *not* admitted; Running means minMember pods are allocated or bound
(Volcano counts Allocated/Binding/Bound/Running), which is the gang
scheduled. kube-api-notes §11.

Data only: all behaviour lives in `adapter.py`. Never does I/O.
"""

from __future__ import annotations

from federator.delegation.adapter import Gvk, PodGroupKind, SchedulerAdapter

__all__ = ["VOLCANO", "VOLCANO_PODGROUP"]

VOLCANO_PODGROUP = Gvk(group="scheduling.volcano.sh", version="v1beta1", kind="PodGroup", plural="podgroups")

VOLCANO = SchedulerAdapter(
    name="volcano",
    default_scheduler_name="volcano",
    pod_group=PodGroupKind(
        gvk=VOLCANO_PODGROUP,
        member_key="scheduling.k8s.io/group-name",
        member_by="annotation",
        has_min_resources=True,
        queue="default",
        schedule_timeout_seconds=None,
        admitted_phases=frozenset({"Running", "Completed"}),
        failed_phases=frozenset(),
        has_priority_class=True,
    ),
)
