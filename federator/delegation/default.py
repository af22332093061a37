"""The default-scheduler adapter: pods only (schedulerName `default-scheduler`), no PodGroup.

There is no gang guarantee: kube-scheduler binds pods one by one, so a gang
may start partially and hold part of a cluster while the rest waits.
`DEFAULT.job_conditions()` says so (GangGuarantee=False, reason
DefaultScheduler, message `NO_GANG_GUARANTEE`), and the lifecycle
controller copies that into the job's conditions; status messages of a
waiting gang repeat it. The gang counts as admitted once every pod is bound.

Data only: all behaviour lives in `adapter.py`. Never does I/O.
"""

from __future__ import annotations

from federator.delegation.adapter import NO_GANG_GUARANTEE, SchedulerAdapter

__all__ = ["DEFAULT", "NO_GANG_GUARANTEE"]

DEFAULT = SchedulerAdapter(name="default", default_scheduler_name="default-scheduler", pod_group=None)
