"""The interfaces the placement loop's parts are handed, and nothing else.

The loop (`controllers/placement.py`) builds its parts (`decisions.py`,
`queue_accounting.py`, `preemption.py`, `elastic.py`) over these small
typed seams, as Kueue's scheduler is handed a cache and a client:

- `JobStore`: read one TrainingJob, and write its status (read-mutate-CAS,
  fenced: `jobs.update_job_status` in the hub);
- `MemberWrites`: what placement asks of dispatch (`controllers/dispatch.py`'s
  `Dispatcher`, the only writer of member objects): delete a moved or
  evicted gang's previous copy, delete some pods of a gang (a shrink),
  create some pods of a gang again (a growth, a fill); for a gang the member's
  own operator runs (operator mode), resize its member copy instead;
- `EventSink`: where Events go (the hub's recorder);
- `MemberViews`: what placement reads of the members beyond the frozen
  snapshots: status sync's index of this hub's member objects (a gang's
  pods, its member copy) and member sync's snapshot builder (what a gang's pods hold per node).

Unit tests hand the parts in-memory fakes of these; the hub hands them the
real ones: `HubJobStore`, `HubMemberViews` here, and the `Dispatcher`.
Must never: hold state of its own, or write anything but a job's status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from federator.apiserver.errors import ApiError
from federator.clusters.snapshot_builder import SnapshotBuilder
from federator.controllers.context import HubContext
from federator.controllers.jobs import JOB_KIND, JobRef, update_job_status
from federator.obs import get_logger
from federator.placement import Resources
from federator.placement.snapshot import ClusterSnapshot
from federator.store.protocol import StoreError

__all__ = ["EventSink", "GangPods", "HubJobStore", "HubMemberViews", "JobAmounts", "JobStore", "MemberViews",
           "MemberWrites", "Mutate"]

_log = get_logger("controllers.placement")

#: a status mutation: the stored job changed in place and returned, or None to leave it as it is
Mutate = Callable[[dict[str, Any]], dict[str, Any] | None]


class JobStore(Protocol):
    async def read(self, ref: JobRef) -> dict[str, Any]:
        """The stored job (ApiError or StoreError when it cannot be read)."""
        ...

    async def write_status(self, ref: JobRef, mutate: Mutate, *, failed: str,
                           **log_fields: Any) -> tuple[bool, dict[str, Any] | None]:
        """(False, None) when the write failed (logged as `failed`), else (True, the stored job, or None
        when `mutate` left it alone or the job is gone)."""
        ...


class MemberWrites(Protocol):
    """Dispatch's member writes that placement asks for (implemented by `dispatch.Dispatcher`)."""

    async def delete_previous(self, job: Mapping[str, Any], *, cluster: str) -> int:
        ...

    async def delete_pods(self, job: Mapping[str, Any], *, cluster: str, epoch: int, names: Sequence[str]) -> int:
        ...

    async def recreate_pods(self, job: Mapping[str, Any], *, cluster: str, epoch: int,
                            pods: Mapping[str, Mapping[str, str]]) -> int:
        ...

    def operated_gang(self, job: Mapping[str, Any], *, cluster: str, epoch: int | None) -> bool:
        """Whether the member's own operator runs the gang (operator mode): the hub creates and deletes none of
        its pods, it resizes the member copy (`resize_member_copy`)."""
        ...

    async def resize_member_copy(self, job: Mapping[str, Any], *, cluster: str, epoch: int) -> bool:
        ...


class EventSink(Protocol):
    """Where Events are recorded (`apiserver.events.EventRecorder`, the hub's `hub.events`)."""

    def record(self, obj: Mapping[str, Any], *, controller: str, reason: str, message: str, warning: bool = False,
               action: str = "") -> None:
        ...


class GangPods(Protocol):
    """Status sync's index of this hub's objects in one member (`status_sync.ClusterObjects`)."""

    def gang(self, job_uid: str, epoch: int) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        ...

    def member_copy(self, job_uid: str, source_key: str, epoch: int | None = None) -> tuple[Any, dict[str, Any]] | None:
        """The job's member copy (operator mode) of kind `source_key` at `epoch`, as (its resource, the object)."""
        ...


class JobAmounts(Protocol):
    """Member sync's snapshot builder of one member (`clusters.snapshot_builder.SnapshotBuilder`)."""

    def job_amounts(self, job_uid: str, *, epoch: int | None = None, up_to: bool = False) -> dict[str, Resources]:
        ...


class MemberViews(Protocol):
    def pods(self, cluster: str) -> GangPods | None:
        """The member's object index once it has listed everything; else None (nothing is planned on it)."""
        ...

    def amounts(self, cluster: str, snapshot: ClusterSnapshot | None) -> JobAmounts | None:
        """The member's snapshot builder when `snapshot` is the one it built (its tables then hold exactly
        the pods `snapshot` counts); else None."""
        ...


class HubJobStore:
    """The hub's `JobStore`: TrainingJobs in the hub store (status writes fenced: `jobs.update_job_status`)."""

    def __init__(self, hub: HubContext) -> None:
        self.hub = hub
        self.rt = hub.kind(JOB_KIND)

    async def read(self, ref: JobRef) -> dict[str, Any]:
        return await self.hub.storage.get(self.rt, namespace=ref.namespace, name=ref.name)

    async def write_status(self, ref: JobRef, mutate: Mutate, *, failed: str,
                           **log_fields: Any) -> tuple[bool, dict[str, Any] | None]:
        """`update_job_status` for placement's writes: (False, None) when the write failed (logged as
        `failed`: the job stays queued and the next cycle tries again), else (True, the stored job or None
        when `mutate` left it alone)."""
        try:
            return True, await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate,
                                                 uid=ref.uid)
        except (ApiError, StoreError) as e:
            _log.warning(failed, job=ref.key, error=str(e), **log_fields)
            return False, None


class HubMemberViews:
    """The hub's `MemberViews`: the member object index's and member sync's state of each member cluster
    (the term's pipeline parts, `hub.parts`)."""

    def __init__(self, hub: HubContext) -> None:
        self.hub = hub

    def pods(self, cluster: str) -> GangPods | None:
        index = self.hub.parts.objects.get(cluster)
        return index if index is not None and index.ready else None

    def amounts(self, cluster: str, snapshot: ClusterSnapshot | None) -> JobAmounts | None:
        sync = self.hub.parts.members.syncs.get(cluster)
        builder = getattr(sync, "builder", None)
        if not isinstance(builder, SnapshotBuilder) or snapshot is None or builder.snapshot is not snapshot:
            return None
        return builder
