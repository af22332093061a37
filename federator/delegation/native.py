"""The Kubernetes-native gang adapter: a scheduling.k8s.io/v1alpha2 PodGroup plus pods (schedulerName
`default-scheduler`: kube-scheduler itself, with the GenericWorkload and GangScheduling feature gates).

Followed: Kubernetes v1.36, where the PodGroup is a standalone runtime object
(KEP-4671 "Gang Scheduling using Workload Object" and KEP-5832 "Decouple
PodGroup from Workload API", kubernetes/enhancements keps/sig-scheduling/);
the API types of staging/src/k8s.io/api/scheduling/v1alpha2/types.go; and the
docs https://kubernetes.io/docs/concepts/workloads/podgroup-api/ (with its
lifecycle page), https://kubernetes.io/docs/concepts/scheduling-eviction/gang-scheduling/
and https://kubernetes.io/docs/concepts/workloads/pods/scheduling-group/.

- The PodGroup is standalone (no Workload, no spec.podGroupTemplateRef: a
  "user-managed" PodGroup) with `spec.schedulingPolicy.gang.minCount` = every
  pod of the gang (an elastic gang's minimum: adapter.py). The API has no minResources and no queue.
- A pod joins through its own spec field `spec.schedulingGroup.podGroupName`
  (immutable), not a label or annotation.
- There is no phase. kube-scheduler's pod-group scheduling cycle writes the
  condition `PodGroupScheduled` (metav1.Condition): True, reason
  `Scheduled`, once at least minCount pods got placements and went to
  binding; False, reason `Unschedulable` (or `SchedulerError`) with the
  scheduler's message, when the gang does not fit. A True condition never
  goes back to False. Pods below the quorum wait in PreEnqueue and get no
  condition at all. So Admitted = PodGroupScheduled=True (or every pod
  bound), and a wait is explained by PodGroupScheduled=False.
- Earlier and later versions differ: 1.35 had v1alpha1 (PodGroups inside the
  Workload, pods linked by `spec.workloadRef`); 1.37 serves v1alpha3 and
  v1beta1, whose condition is `PodGroupInitiallyScheduled`. Another version
  is `dataclasses.replace(NATIVE, pod_group=...)` with its Gvk and condition.

Data only: all behaviour lives in `adapter.py`. Never does I/O.
"""

from __future__ import annotations

from federator.delegation.adapter import Gvk, PodGroupKind, SchedulerAdapter

__all__ = ["NATIVE", "NATIVE_PODGROUP"]

NATIVE_PODGROUP = Gvk(group="scheduling.k8s.io", version="v1alpha2", kind="PodGroup", plural="podgroups")

NATIVE = SchedulerAdapter(
    name="native",
    default_scheduler_name="default-scheduler",
    pod_group=PodGroupKind(
        gvk=NATIVE_PODGROUP,
        member_key="schedulingGroup.podGroupName",
        member_by="spec",
        has_min_resources=False,
        queue=None,
        schedule_timeout_seconds=None,
        admitted_phases=frozenset(),
        failed_phases=frozenset(),
        min_member_field="schedulingPolicy.gang.minCount",
        admitted_condition=("PodGroupScheduled", "True"),
        unschedulable_condition=("conditions", "PodGroupScheduled", "False"),
    ),
)
