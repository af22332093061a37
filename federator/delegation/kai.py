"""The NVIDIA KAI Scheduler adapter: a scheduling.run.ai/v2alpha2 PodGroup plus pods (schedulerName
`kai-scheduler`).

Followed: KAI Scheduler v0.13 (github.com/NVIDIA/KAI-Scheduler:
pkg/apis/scheduling/v2alpha2/podgroup_types.go, pkg/common/constants,
pkg/podgrouper, pkg/scheduler/cache/status_updater, docs/quickstart).

- The PodGroup has `spec.minMember` = every pod (an elastic gang's minimum:
  adapter.py; the CRD wants >= 1) and
  `spec.queue`; the queue is also the label `kai.scheduler/queue` on the
  PodGroup and on every pod, as KAI's docs ask of a workload. The queue is
  `default-queue`, the leaf queue a fresh install creates; a PodGroup whose
  queue does not exist is never scheduled (QueueDoesNotExist). A job with a
  priority also sets `spec.priorityClassName`, by which KAI orders gangs.
- A pod joins through the annotation `pod-group-name`. Pods get **no**
  ownerReference to the PodGroup: KAI's pod-grouper leaves alone only pods
  that carry that annotation and have no owner; a pod with an owner is
  re-grouped under a PodGroup of its top owner (minMember 1), which would
  undo the gang.
- KAI writes no status.phase. When it allocates the gang it stamps the
  PodGroup with the annotation `kai.scheduler/last-start-timestamp`
  (binding then goes through KAI's binder); that, or every pod bound, is
  Admitted. When the gang does not fit it appends
  status.schedulingConditions[{type: UnschedulableOnNodePool, nodePool,
  reason: Unschedulable, message, reasons: [{reason, message}], status:
  "True", transitionID}]; the specific reason (PodSchedulingErrors,
  QueueDoesNotExist, OverLimit, ...) is in reasons[].

Data only: all behaviour lives in `adapter.py`. Never does I/O.
"""

from __future__ import annotations

from federator.delegation.adapter import Gvk, PodGroupKind, SchedulerAdapter

__all__ = ["KAI", "KAI_PODGROUP"]

KAI_PODGROUP = Gvk(group="scheduling.run.ai", version="v2alpha2", kind="PodGroup", plural="podgroups")

KAI = SchedulerAdapter(
    name="kai",
    default_scheduler_name="kai-scheduler",
    pod_group=PodGroupKind(
        gvk=KAI_PODGROUP,
        member_key="pod-group-name",
        member_by="annotation",
        has_min_resources=False,
        queue="default-queue",
        schedule_timeout_seconds=None,
        admitted_phases=frozenset(),
        failed_phases=frozenset(),
        admitted_annotation="kai.scheduler/last-start-timestamp",
        unschedulable_condition=("schedulingConditions", "UnschedulableOnNodePool", "True"),
        queue_label="kai.scheduler/queue",
        pods_owned_by_group=False,
        has_priority_class=True,
    ),
)
