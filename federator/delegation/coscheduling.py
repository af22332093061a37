"""The scheduler-plugins coscheduling adapter: a scheduling.x-k8s.io/v1alpha1 PodGroup plus pods.

Pods join the group through the *label* `scheduling.x-k8s.io/pod-group`
(so the group's name must be a valid label value: at most 63 characters)
and go to the scheduler the MemberCluster names (the standard install calls
it `scheduler-plugins-scheduler`). The PodGroup has minMember = every pod
(an elastic gang's minimum: adapter.py) and minResources = those pods' summed requests (the plugin's PreFilter
rejects the gang early when the cluster cannot hold them);
scheduleTimeoutSeconds is left to the plugin's default unless set with
`dataclasses.replace`.

Phases are Pending | Scheduling | Running | Finished | Failed | Unknown.
Scheduling means some members are bound or waiting at Permit, which is not
the whole gang; Running means minMember pods run, so the gang was scheduled;
Failed is the gang failed. (Releases up to v0.24 used the group
`scheduling.sigs.k8s.io` and another label; not supported.) kube-api-notes §11.

Data only: all behaviour lives in `adapter.py`. Never does I/O.
"""

from __future__ import annotations

from federator.delegation.adapter import Gvk, PodGroupKind, SchedulerAdapter

__all__ = ["COSCHEDULING", "COSCHEDULING_PODGROUP"]

COSCHEDULING_PODGROUP = Gvk(group="scheduling.x-k8s.io", version="v1alpha1", kind="PodGroup", plural="podgroups")

COSCHEDULING = SchedulerAdapter(
    name="coscheduling",
    default_scheduler_name="scheduler-plugins-scheduler",
    pod_group=PodGroupKind(
        gvk=COSCHEDULING_PODGROUP,
        member_key="scheduling.x-k8s.io/pod-group",
        member_by="label",
        has_min_resources=True,
        queue=None,
        schedule_timeout_seconds=None,
        admitted_phases=frozenset({"Running", "Finished"}),
        failed_phases=frozenset({"Failed"}),
    ),
)
