"""The simulated cluster's scheduler: gang scheduling as Volcano, the
scheduler-plugins coscheduling plugin, kube-batch, Kubernetes' own gang
scheduling (kube-scheduler with scheduling.k8s.io/v1alpha2 PodGroups) and
NVIDIA KAI Scheduler do it, plus the default scheduler for pods without a
group.

Two halves:
- `SchedulerState` + `schedule_cycle`: pure. The state is an informer-style
  cache of nodes, pods and PodGroups with a `ClusterLedger` of node usage; a
  cycle takes the pending pods (gangs as one unit), places them with
  `fit.CyclePlanner` and returns the binds and the reasons for the rest. A
  gang is bound all-or-nothing: only once `minMember` of its pods (counting
  members already bound) fit node by node. Units go in priority order, then
  oldest first: a Volcano, kube-batch or KAI gang has its PodGroup's
  spec.priorityClassName's value (the globalDefault class's, else 0, when it
  names none or an unknown class), as their scheduler caches resolve it; a
  coscheduling or native gang and a single pod have their pods' spec.priority
  (which the API's Priority admission resolved). Equal priority: the older
  PodGroup (or pod) first. A gang with more pods than its minimum is
  elastic: once its minimum is bound, its other pods are bound one by one as
  room appears (a pod created later into a running group too), and never
  preempt anything; Volcano, kube-batch and KAI place them after the gangs of
  the same priority still short of their minimum, coscheduling and native in
  the gang's own turn (`GroupKind.extras_last`). Deleting pods above the
  minimum leaves the group admitted.
- `run_gang_scheduler`: the loop. It lists and watches nodes, pods,
  PriorityClasses and every PodGroup kind through `ObjectStorage` (in-process, not HTTP), runs cycles
  when something changed, binds, writes PodScheduled=False conditions and
  FailedScheduling events for pods that do not fit, and keeps PodGroup status
  (phase, counts, conditions; Kubernetes' PodGroupScheduled condition; KAI's
  schedulingConditions and last-start-timestamp annotation) as the real
  scheduler of that kind does.

It serves only pods whose spec.schedulerName the profile lists. It must
never bind a part of a gang (below minMember) and never overcommit a node;
it never imports anything of the hub.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.apis.priorityclass import default_priority_class
from federator.apis.timestamps import format_time
from federator.obs import METRICS
from federator.sim import kinds
from federator.sim.fit import (
    ClusterLedger,
    CyclePlanner,
    InvalidPodSpec,
    PodRequirements,
    explain,
    node_info,
    pod_requirements,
)
from federator.runtime.waits import wait_event

if TYPE_CHECKING:
    from federator.apiserver.registry import Registry, ResourceType
    from federator.apiserver.storage import ObjectStorage
    from federator.sim.profile import ClusterProfile

JSON = dict[str, Any]

# ---------------------------------------------------------------- group kinds


@dataclass(frozen=True, slots=True)
class GroupKind:
    """One gang scheduler's PodGroup API and how a pod names its group."""

    scheduler_type: str
    group: str
    version: str
    #: pod label naming the group (coscheduling)
    pod_label: str | None
    #: pod annotations naming the group, first found wins (Volcano, kube-batch, KAI)
    pod_annotations: tuple[str, ...]
    #: status has conditions (Volcano, kube-batch); coscheduling has none
    has_conditions: bool
    plural: str = "podgroups"
    #: pod spec field naming the group, as a path (Kubernetes: schedulingGroup.podGroupName)
    pod_spec_field: tuple[str, ...] = ()
    #: where the gang's minimum sits in the PodGroup's spec
    min_member_field: tuple[str, ...] = ("minMember",)
    #: pods of a group below its minimum wait unseen, with no reason written anywhere (kube-scheduler's
    #: PreEnqueue gate; KAI's "not ready for scheduling")
    quiet_below_minimum: bool = False
    #: spec.queue a new group gets when it names none (None: the kind has no queue)
    default_queue: str | None = None
    #: the gang's priority is its PodGroup's spec.priorityClassName, resolved through the PriorityClasses (the
    #: globalDefault class's value, else 0, when it names none or an unknown one): Volcano's and kube-batch's
    #: scheduler cache, KAI's podgroup info. False: the highest priority of its pods (coscheduling's QueueSort,
    #: kube-scheduler's PrioritySort)
    group_priority_class: bool = False
    #: pods beyond the minimum of an admitted gang wait until every gang of the same priority still short of its
    #: minimum had its turn, then go one pod per gang in turn, each gang stopping at its first pod that fits
    #: nowhere: Volcano's and kube-batch's allocate action re-queues a ready job after each task and their gang
    #: JobOrderFn puts ready jobs last; KAI's elastic JobOrderFn puts jobs at or above their minimum last and its
    #: allocate takes one pod of a satisfied gang at a time. False (coscheduling, native): the gang's pods go in
    #: its own turn, minimum and beyond, as far as they fit (pods are queued by priority, then group age).
    extras_last: bool = False

    def group_of(self, pod: Mapping[str, Any]) -> str | None:
        meta = Body(pod)
        if self.pod_spec_field:
            value = _dig(pod.get("spec"), self.pod_spec_field)
            return value if isinstance(value, str) and value else None
        if self.pod_label:
            value = meta.labels.get(self.pod_label)
            if value:
                return str(value)
        annotations = meta.annotations
        for key in self.pod_annotations:
            value = annotations.get(key)
            if value:
                return str(value)
        return None

    def min_member_of(self, group: Mapping[str, Any]) -> int | None:
        """The group's minimum; None when the group is no gang (Kubernetes' basic policy)."""
        if self is NATIVE and _dig(group.get("spec"), ("schedulingPolicy", "gang")) is None:
            return None
        raw = _dig(group.get("spec"), self.min_member_field)
        return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else 0

    def join(self, pod: JSON, group_name: str) -> None:
        """Make the pod body a member of the group, as a user of this scheduler would write it."""
        meta = pod.setdefault("metadata", {})
        if self.pod_spec_field:
            target = pod.setdefault("spec", {})
            for key in self.pod_spec_field[:-1]:
                target = target.setdefault(key, {})
            target[self.pod_spec_field[-1]] = group_name
        elif self.pod_label:
            meta.setdefault("labels", {})[self.pod_label] = group_name
        else:
            meta.setdefault("annotations", {})[self.pod_annotations[0]] = group_name

    def group_spec(self, min_member: int) -> JSON:
        """A PodGroup spec with this minimum (and the kind's default queue)."""
        spec: JSON = {}
        target = spec
        for key in self.min_member_field[:-1]:
            target = target.setdefault(key, {})
        target[self.min_member_field[-1]] = min_member
        if self.default_queue is not None:
            spec["queue"] = self.default_queue
        return spec


def _dig(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


VOLCANO = GroupKind(
    scheduler_type="volcano", group="scheduling.volcano.sh", version="v1beta1", pod_label=None,
    pod_annotations=("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name"), has_conditions=True,
    default_queue="default", group_priority_class=True, extras_last=True,
)
COSCHEDULING = GroupKind(
    scheduler_type="coscheduling", group="scheduling.x-k8s.io", version="v1alpha1",
    pod_label="scheduling.x-k8s.io/pod-group", pod_annotations=(), has_conditions=False,
)
KUBE_BATCH = GroupKind(
    scheduler_type="kube-batch", group="scheduling.incubator.k8s.io", version="v1alpha1", pod_label=None,
    pod_annotations=("scheduling.k8s.io/group-name",), has_conditions=True, default_queue="default",
    group_priority_class=True, extras_last=True,
)
#: Kubernetes v1.36 gang scheduling: pods name their group in spec.schedulingGroup.podGroupName
NATIVE = GroupKind(
    scheduler_type="native", group="scheduling.k8s.io", version="v1alpha2", pod_label=None, pod_annotations=(),
    has_conditions=True, pod_spec_field=("schedulingGroup", "podGroupName"),
    min_member_field=("schedulingPolicy", "gang", "minCount"), quiet_below_minimum=True,
)
#: NVIDIA KAI Scheduler: pods name their group in the annotation pod-group-name
KAI = GroupKind(
    scheduler_type="kai", group="scheduling.run.ai", version="v2alpha2", pod_label=None,
    pod_annotations=("pod-group-name",), has_conditions=False, quiet_below_minimum=True,
    default_queue="default-queue", group_priority_class=True, extras_last=True,
)
GROUP_KINDS: dict[str, GroupKind] = {k.scheduler_type: k for k in (VOLCANO, COSCHEDULING, KUBE_BATCH, NATIVE, KAI)}

#: KAI's annotation on a PodGroup whose gang it allocated (pkg/common/constants LastStartTimeStamp)
KAI_LAST_START_ANNOTATION = "kai.scheduler/last-start-timestamp"
#: KAI's node-pool label (a PodGroup without it is in pool "default")
KAI_NODE_POOL_LABEL = "kai.scheduler/node-pool"

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

# ---------------------------------------------------------------- cache


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int(Body(obj).resource_version or 0)
    except (TypeError, ValueError):
        return 0


def pod_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def group_key(kind: GroupKind, namespace: str, name: str) -> str:
    return f"{kind.group}/{namespace}/{name}"


@dataclass(slots=True)
class PodEntry:
    key: str
    namespace: str
    name: str
    uid: str
    rv: int
    scheduler_name: str
    node_name: str
    phase: str
    deleting: bool
    group: str | None
    requirements: PodRequirements | None
    invalid: str | None
    priority: int
    seq: int
    #: metadata.creationTimestamp (orders pods of equal priority, then seq)
    created: str = ""

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def holds_resources(self) -> bool:
        return self.bound and self.phase not in TERMINAL_PHASES


@dataclass(slots=True)
class GroupVerdict:
    """The last scheduling outcome of a gang: scheduled, or why not."""

    scheduled: bool
    reason: str = ""
    message: str = ""
    #: when the verdict was reached (KAI stamps the PodGroup with it)
    at: str = ""


@dataclass(slots=True)
class GroupEntry:
    key: str
    kind: GroupKind
    namespace: str
    name: str
    uid: str
    rv: int
    min_member: int
    obj: JSON
    members: set[str] = field(default_factory=set)
    verdict: GroupVerdict | None = None
    first_attempt: str | None = None
    #: False for a group that is no gang (Kubernetes' basic policy): its pods are scheduled one by one
    gang: bool = True
    #: spec.queue ("" if none)
    queue: str = ""
    #: spec.priorityClassName ("" if none); see GroupKind.group_priority_class
    priority_class: str = ""
    #: metadata.creationTimestamp and the order in which the cache first saw the group: gangs of equal
    #: priority go oldest first (Volcano's JobOrderFn falls back to the PodGroup's creation time)
    created: str = ""
    seq: int = 0


@dataclass(frozen=True, slots=True)
class CycleResult:
    #: pod key -> node name, accounted in the ledger (assumed until written)
    binds: dict[str, str]
    #: pod key -> FitError-style message
    unschedulable: dict[str, str]
    #: groups whose verdict changed this cycle
    groups: set[str]
    #: True when pending work was left for the next cycle
    more: bool


class SchedulerState:
    """What the scheduler knows: nodes (in a ledger), pods and PodGroups.
    Fed by watch events; changed by `schedule_cycle`. Pure and synchronous."""

    def __init__(self, *, scheduler_types: Mapping[str, str], kai_queues: Iterable[str] = ()) -> None:
        #: schedulerName -> scheduler type ("volcano", "default", ...)
        self.scheduler_types = dict(scheduler_types)
        #: the KAI queues that exist (a KAI PodGroup naming another is never scheduled)
        self.kai_queues = frozenset(kai_queues)
        self.ledger = ClusterLedger()
        self.pods: dict[str, PodEntry] = {}
        self.groups: dict[str, GroupEntry] = {}
        self._orphans: dict[str, set[str]] = {}  # group key -> members whose group does not exist yet
        self.pending: dict[str, None] = {}  # insertion-ordered set of pod keys
        #: unit key -> (ledger generation, unit version) of its last failed attempt
        self._attempts: dict[str, tuple[int, tuple[int, ...]]] = {}
        #: pods whose bind is being written: a watch event showing them
        #: unbound must not undo the assumption
        self.in_flight: set[str] = set()
        self._seq = 0
        self.dirty_groups: set[str] = set()
        #: PriorityClass name -> the class (name, value, globalDefault)
        self.priority_classes: dict[str, Mapping[str, Any]] = {}

    # ------------------------------------------------------------ priority classes

    def apply_priority_class(self, obj: Mapping[str, Any]) -> None:
        name = Body(obj).name
        value = obj.get("value")
        if not name or not isinstance(value, int) or isinstance(value, bool):
            self.delete_priority_class(name)
            return
        self.priority_classes[name] = {"metadata": {"name": name}, "value": value,
                                       "globalDefault": obj.get("globalDefault") is True}

    def delete_priority_class(self, name: str) -> None:
        self.priority_classes.pop(name, None)

    @property
    def default_priority(self) -> int:
        """The globalDefault class's value (as Priority admission picks it), else 0."""
        default = default_priority_class(self.priority_classes.values())
        return int(default["value"]) if default is not None else 0

    def gang_order(self, key: str, members: Iterable[PodEntry]) -> tuple[int, str, int]:
        """(-priority, created, seq) of the gang `key` whose pending members are `members`: higher
        priority first, then the older group (see GroupKind.group_priority_class)."""
        pods = list(members)
        group = self.groups.get(key)
        pod_priority = max((m.priority for m in pods), default=0)
        if group is None:
            return (-pod_priority, min((m.created for m in pods), default=""), min((m.seq for m in pods), default=0))
        if group.kind.group_priority_class:
            named = self.priority_classes.get(group.priority_class) if group.priority_class else None
            value = int(named["value"]) if named is not None else None
            priority = value if value is not None else self.default_priority
        else:
            priority = pod_priority
        return (-priority, group.created, group.seq)

    # ------------------------------------------------------------ nodes

    def apply_node(self, obj: Mapping[str, Any]) -> None:
        self.ledger.upsert_node(node_info(obj))

    def delete_node(self, name: str) -> None:
        self.ledger.remove_node(name)

    # ------------------------------------------------------------ pods

    def _group_for(self, pod: Mapping[str, Any], scheduler_name: str, namespace: str) -> str | None:
        kind = GROUP_KINDS.get(self.scheduler_types.get(scheduler_name, ""))
        if kind is None:
            return None
        name = kind.group_of(pod)
        return group_key(kind, namespace, name) if name else None

    def apply_pod(self, obj: Mapping[str, Any]) -> None:
        meta = Body(obj)
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        namespace, name = meta.namespace, meta.name
        key = pod_key(namespace, name)
        rv = _rv(obj)
        old = self.pods.get(key)
        uid = meta.uid
        if old is not None and old.uid == uid and rv and rv <= old.rv:
            return  # stale: we already know a newer version (e.g. our own bind)
        if old is not None and old.uid != uid:
            self.delete_pod(namespace, name)
            old = None
        scheduler_name = str(spec.get("schedulerName") or "default-scheduler")
        node_name = str(spec.get("nodeName") or "")
        if old is not None and old.node_name and not node_name:
            # spec.nodeName never goes back to unset: this event predates our
            # bind (written, or being written)
            node_name = old.node_name
        phase = str(status.get("phase") or "Pending")
        requirements: PodRequirements | None = None
        invalid: str | None = None
        try:
            requirements = pod_requirements(obj)
        except InvalidPodSpec as e:
            invalid = str(e)
        priority = spec.get("priority")
        if old is None:
            self._seq += 1
        entry = PodEntry(
            key=key, namespace=namespace, name=name, uid=uid, rv=rv, scheduler_name=scheduler_name,
            node_name=node_name, phase=phase, deleting=meta.deleting,
            group=self._group_for(obj, scheduler_name, namespace), requirements=requirements, invalid=invalid,
            priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
            seq=old.seq if old is not None else self._seq, created=meta.creation_timestamp or "",
        )
        self.pods[key] = entry
        if old is not None and old.group != entry.group:
            self._leave_group(old)
        if entry.group is not None:
            self._join_group(entry)
        # resources
        if entry.holds_resources and entry.requirements is not None:
            self.ledger.account(key, entry.node_name, entry.requirements.requests)
        elif entry.holds_resources:
            self.ledger.account(key, entry.node_name, (("pods", 1),))
        else:
            self.ledger.release(key)
        # pending set
        if not entry.bound and not entry.deleting and scheduler_name in self.scheduler_types \
                and entry.phase not in TERMINAL_PHASES:
            self.pending[key] = None
        else:
            self.pending.pop(key, None)

    def delete_pod(self, namespace: str, name: str) -> None:
        key = pod_key(namespace, name)
        entry = self.pods.pop(key, None)
        self.pending.pop(key, None)
        self.ledger.release(key)
        if entry is not None:
            self._leave_group(entry)

    def _join_group(self, entry: PodEntry) -> None:
        assert entry.group is not None
        g = self.groups.get(entry.group)
        if g is not None:
            g.members.add(entry.key)
        else:
            self._orphans.setdefault(entry.group, set()).add(entry.key)
        self.dirty_groups.add(entry.group)

    def _leave_group(self, entry: PodEntry) -> None:
        if entry.group is None:
            return
        g = self.groups.get(entry.group)
        if g is not None:
            g.members.discard(entry.key)
        orphans = self._orphans.get(entry.group)
        if orphans is not None:
            orphans.discard(entry.key)
            if not orphans:
                del self._orphans[entry.group]
        self.dirty_groups.add(entry.group)

    # ------------------------------------------------------------ groups

    def apply_group(self, kind: GroupKind, obj: Mapping[str, Any]) -> None:
        meta = Body(obj)
        namespace, name = meta.namespace, meta.name
        key = group_key(kind, namespace, name)
        rv = _rv(obj)
        old = self.groups.get(key)
        uid = meta.uid
        if old is not None and old.uid == uid and rv and rv < old.rv:
            return
        min_member = kind.min_member_of(obj)
        raw_spec = obj.get("spec")
        spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
        queue, priority_class = spec.get("queue"), spec.get("priorityClassName")
        entry = GroupEntry(key=key, kind=kind, namespace=namespace, name=name, uid=uid, rv=rv,
                           min_member=min_member or 0, obj=dict(obj), gang=min_member is not None,
                           queue=queue if isinstance(queue, str) else "",
                           priority_class=priority_class if isinstance(priority_class, str) else "",
                           created=meta.creation_timestamp or "")
        if old is not None and old.uid == uid:
            entry.members = old.members
            entry.verdict = old.verdict
            entry.first_attempt = old.first_attempt
            entry.seq = old.seq
        else:
            self._seq += 1
            entry.seq = self._seq
            entry.members = self._orphans.pop(key, set()) | (old.members if old is not None else set())
        self.groups[key] = entry
        self.dirty_groups.add(key)

    def delete_group(self, kind: GroupKind, namespace: str, name: str) -> None:
        key = group_key(kind, namespace, name)
        entry = self.groups.pop(key, None)
        if entry is not None and entry.members:
            self._orphans.setdefault(key, set()).update(entry.members)

    # ------------------------------------------------------------ assume / forget

    def bound(self, key: str, obj: Mapping[str, Any] | None) -> None:
        """The bind of `key` was written (obj, if given, is the stored pod;
        otherwise the watch brings it)."""
        self.in_flight.discard(key)
        if obj is not None:
            self.apply_pod(obj)

    def forget(self, key: str) -> None:
        """The bind of `key` failed: undo the assumption."""
        self.in_flight.discard(key)
        entry = self.pods.get(key)
        self.ledger.release(key)
        if entry is not None:
            entry.node_name = ""
            if not entry.deleting and entry.phase not in TERMINAL_PHASES:
                self.pending[key] = None
            if entry.group:
                self.dirty_groups.add(entry.group)

    def members_of(self, group: GroupEntry) -> list[PodEntry]:
        return [self.pods[k] for k in group.members if k in self.pods]


# ---------------------------------------------------------------- the cycle


#: kube-scheduler v1.36's PodGroupScheduled=False message (schedule_one_podgroup.go errPodGroupUnschedulable)
NATIVE_UNSCHEDULABLE = "pod group is unschedulable"
#: ... and the PodScheduled=False message of a gang's pods that fit but wait for the rest (gangscheduling Permit)
NATIVE_WAITING = ("pod group is unschedulable, waiting for minCount pods from a gang to be scheduled, one or more "
                  "plugins asked to wait and no plugin rejected pod")


_FIT_ERROR = re.compile(r"^0/(\d+) nodes are available: (.*)\.$")


def _with_postfilter(why: str) -> str:
    """kube-scheduler's FitError with what its PostFilter plugins add (v1.36, seen on a real member): the DRA
    plugin's "no new claims to deallocate", then default preemption's verdict. Only where every node failed
    for resources (preemption could help in principle, and the simulator's gangs find no lower-priority
    victims); a FitError with other reasons is left as it was (docs/simulator-fidelity.md)."""
    match = _FIT_ERROR.match(why)
    if match is None:
        return why
    nodes, reasons = match.group(1), match.group(2).split(", ")
    if not all(r.split(" ", 1)[1] == "Too many pods" or r.split(" ", 1)[1].startswith("Insufficient ")
               for r in reasons if " " in r):
        return why
    return (f"{why} no new claims to deallocate, preemption: 0/{nodes} nodes are available: {nodes} No preemption "
            "victims found for incoming pod.")


def _unfit_verdict(group: GroupEntry, *, total: int, pending: int, fitted: int, need: int, bound: int,
                   why: str) -> tuple[GroupVerdict, str]:
    """The verdict on a gang that does not fit, and the message its pods get, in each scheduler's words."""
    if group.kind is KAI:
        # pkg/scheduler/actions/common/allocate.go: one PodSchedulingErrors fit error
        inner = (f"Resources were found for {bound + fitted} pods while {group.min_member} are required for gang "
                 f"scheduling. Additional pods cannot be scheduled due to: {why}")
        return GroupVerdict(scheduled=False, reason="PodSchedulingErrors", message=inner, at=_now()), \
            f"PodSchedulingErrors: {inner}."
    if group.kind is NATIVE:
        # pkg/scheduler/schedule_one_podgroup.go: the condition carries errPodGroupUnschedulable's text only;
        # the why is in the rejected pod's own PodScheduled message (see the caller)
        return GroupVerdict(scheduled=False, reason="Unschedulable", message=NATIVE_UNSCHEDULABLE,
                            at=_now()), _with_postfilter(why)
    msg = (f"{pending}/{total} tasks in gang unschedulable: pod group is not ready, {group.min_member} minAvailable; "
           f"only {fitted} of the {need} pods still needed fit: {why}")
    return GroupVerdict(scheduled=False, reason="NotEnoughResources", message=msg), msg


def _admitted(group: GroupEntry) -> None:
    group.verdict = GroupVerdict(scheduled=True, reason="tasks in gang are ready to be scheduled", at=_now())


@dataclass(slots=True)
class _Extras:
    """The pending pods beyond the minimum of one admitted gang, in its placement order."""

    group: GroupEntry
    pods: list[PodEntry]
    #: (minMember, pending members, bound members) at the start of the cycle (SchedulerState._attempts)
    version: tuple[int, ...]
    #: its pods bound this cycle so far
    placed: int = 0

    def version_after(self) -> tuple[int, ...]:
        """The gang's version once this cycle's binds are in (what the next cycle will compute)."""
        return _version_after(self.version, self.placed)


def _version_after(version: tuple[int, ...], placed: int) -> tuple[int, ...]:
    min_member, pending, bound = version
    return (min_member, pending - placed, bound + placed)


def _place_extras(state: SchedulerState, planner: CyclePlanner, extras: list[_Extras], *, binds: dict[str, str],
                  unschedulable: dict[str, str], generation: int) -> None:
    """One pod per gang in turn (gangs in `extras` order); a gang stops at its first pod that fits nowhere, and
    its pods not placed get that pod's FitError (see GroupKind.extras_last). Never preempts."""
    turn = [(e, iter(e.pods)) for e in extras]
    while turn:
        waiting: list[tuple[_Extras, Iterator[PodEntry]]] = []
        for e, pods in turn:
            pod = next(pods, None)
            if pod is None:
                state._attempts.pop(e.group.key, None)
                continue
            assert pod.requirements is not None
            node = planner.place_one(pod.key, pod.requirements)
            if node is not None:
                binds[pod.key] = node
                e.placed += 1
                waiting.append((e, pods))
                continue
            why = explain(pod.requirements, state.ledger.ordered_nodes())
            for m in [pod, *pods]:
                unschedulable[m.key] = why
            state._attempts[e.group.key] = (generation, e.version_after())
        turn = waiting


def schedule_cycle(state: SchedulerState, *, max_pods: int = 2000) -> CycleResult:
    """Place pending pods (gangs all-or-nothing) onto nodes, accounting the
    placements in `state.ledger` and marking them assumed. Pods and gangs that
    did not fit, and whose situation has not changed since they last failed,
    are skipped."""
    planner = CyclePlanner(state.ledger)
    binds: dict[str, str] = {}
    unschedulable: dict[str, str] = {}
    touched_groups: set[str] = set()
    pods = state.pods
    generation = state.ledger.generation

    # Units: a gang (every pending member of one group) or a single pod, ordered by priority (a gang's:
    # SchedulerState.gang_order), then age.
    gangs: dict[str, list[PodEntry]] = {}
    ordered: list[tuple[tuple[int, str, int], str, list[PodEntry]]] = []
    for key in state.pending:
        entry = pods.get(key)
        if entry is None:
            continue
        if entry.group is not None:
            members = gangs.get(entry.group)
            if members is None:
                gangs[entry.group] = members = []
            members.append(entry)
        else:
            ordered.append(((-entry.priority, entry.created, entry.seq), key, [entry]))
    for unit_key, members in gangs.items():
        members.sort(key=lambda m: (-m.priority, m.seq))
        ordered.append((state.gang_order(unit_key, members), unit_key, members))
    ordered.sort(key=lambda u: u[0])

    budget = max_pods
    more = False
    # Pods beyond the minimum of admitted extras_last gangs at the current priority level: placed once the
    # level's other units had their turn.
    extras: list[_Extras] = []
    level: int | None = None
    for order, unit_key, members in ordered:
        if level is not None and order[0] != level and extras:
            _place_extras(state, planner, extras, binds=binds, unschedulable=unschedulable, generation=generation)
            extras = []
        level = order[0]
        if budget <= 0:
            more = True
            break
        if unit_key in gangs:
            group = state.groups.get(unit_key)
            bound_ready = 0
            if group is not None:
                for m in state.members_of(group):
                    if m.bound and not m.deleting and m.phase != "Failed":
                        bound_ready += 1
            # Pod specs are immutable where it matters (requests,
            # nodeSelector); what can change a gang's fate besides free
            # capacity is its membership and minMember.
            version: tuple[int, ...] = (group.min_member if group else -1, len(members), bound_ready)
        else:
            bound_ready = 0
            group = None
            version = (0,)
        last = state._attempts.get(unit_key)
        if last is not None and last == (generation, version):
            continue
        budget -= len(members)
        invalid = [m for m in members if m.requirements is None]
        for m in invalid:
            unschedulable[m.key] = f"pod spec cannot be scheduled: {m.invalid}"
        if unit_key not in gangs:
            entry = members[0]
            if entry.requirements is None:
                state._attempts[unit_key] = (generation, version)
                continue
            node = planner.place_one(entry.key, entry.requirements)
            if node is None:
                unschedulable[entry.key] = explain(entry.requirements, state.ledger.ordered_nodes())
                state._attempts[unit_key] = (generation, version)
            else:
                binds[entry.key] = node
                state._attempts.pop(unit_key, None)
            continue
        # a gang
        touched_groups.add(unit_key)
        if group is None:
            ns, name = unit_key.split("/", 2)[1:]
            msg = f'podgroup "{ns}/{name}" not found'
            for m in members:
                unschedulable.setdefault(m.key, msg)
            state._attempts[unit_key] = (generation, version)
            continue
        if group.first_attempt is None:
            group.first_attempt = _now()
        valid = [m for m in members if m.requirements is not None]
        need = max(0, group.min_member - bound_ready)
        total = len(group.members)
        if group.kind is KAI and group.queue not in state.kai_queues:
            msg = f"Queue '{group.queue}' does not exist"
            group.verdict = GroupVerdict(scheduled=False, reason="QueueDoesNotExist", message=msg, at=_now())
            for m in valid:
                unschedulable[m.key] = f"QueueDoesNotExist: {msg}."
            state._attempts[unit_key] = (generation, version)
            continue
        if len(valid) < need:
            if not group.kind.quiet_below_minimum:
                msg = (
                    f"{len(members)}/{total} tasks in gang unschedulable: pod group is not ready, "
                    f"{group.min_member} minAvailable, {bound_ready + len(valid)} schedulable pods exist"
                )
                group.verdict = GroupVerdict(scheduled=False, reason="NotEnoughTasks", message=msg)
                for m in valid:
                    unschedulable[m.key] = msg
            state._attempts[unit_key] = (generation, version)
            continue
        if group.kind.extras_last and need == 0:
            # admitted already: every pending pod is beyond the minimum
            _admitted(group)
            extras.append(_Extras(group=group, pods=valid, version=version))
            continue
        limit = need if group.kind.extras_last else None
        outcome = planner.place_gang([(m.key, m.requirements) for m in valid if m.requirements], need=need,
                                     limit=limit)
        if outcome.committed:
            binds.update(outcome.placed)
            if outcome.placed or need == 0:
                _admitted(group)
            left = [m for m in valid if m.key not in outcome.placed]
            if group.kind.extras_last:
                if left:
                    extras.append(_Extras(group=group, pods=left, version=version, placed=len(outcome.placed)))
                else:
                    state._attempts.pop(unit_key, None)
                continue
            for m in left:
                unschedulable[m.key] = outcome.message or "no node fits"
            if left:
                state._attempts[unit_key] = (generation, _version_after(version, len(outcome.placed)))
            else:
                state._attempts.pop(unit_key, None)
        else:
            why = outcome.message or "no node fits"
            group.verdict, pod_message = _unfit_verdict(group, total=total, pending=len(members),
                                                        fitted=outcome.fitted, need=need, bound=bound_ready, why=why)
            for index, m in enumerate(valid):
                # kube-scheduler's pod-group cycle: the pods that fit wait at Permit (gangscheduling's message),
                # the first one that does not is rejected with its FitError, and so are those after it
                waiting = group.kind is NATIVE and index < outcome.fitted
                unschedulable[m.key] = NATIVE_WAITING if waiting else pod_message
            state._attempts[unit_key] = (generation, version)
    if extras:
        _place_extras(state, planner, extras, binds=binds, unschedulable=unschedulable, generation=generation)

    for key, node in binds.items():
        entry = pods[key]
        entry.node_name = node
        state.pending.pop(key, None)
        state.in_flight.add(key)
        if entry.group:
            touched_groups.add(entry.group)
    state.dirty_groups |= touched_groups
    # Attempts recorded this cycle were made at `generation`; binds do not
    # free capacity, so they stay valid.
    return CycleResult(binds=binds, unschedulable=unschedulable, groups=touched_groups, more=more)


# ---------------------------------------------------------------- group status


def _now() -> str:
    return format_time(datetime.now(UTC))


@dataclass(frozen=True, slots=True)
class GroupCounts:
    pending: int  # not bound
    starting: int  # bound, not running yet
    running: int
    succeeded: int
    failed: int

    @property
    def total(self) -> int:
        return self.pending + self.starting + self.running + self.succeeded + self.failed


def count_members(members: Iterable[PodEntry]) -> GroupCounts:
    pending = starting = running = succeeded = failed = 0
    for m in members:
        if m.phase == "Succeeded":
            succeeded += 1
        elif m.phase == "Failed":
            failed += 1
        elif m.phase == "Running":
            running += 1
        elif m.bound:
            starting += 1
        else:
            pending += 1
    return GroupCounts(pending, starting, running, succeeded, failed)


def group_phase(kind: GroupKind, min_member: int, c: GroupCounts, *, previous: str | None = None) -> str:
    """The phase the real scheduler of `kind` would show (`previous`: the phase the group shows now)."""
    active = c.running + c.succeeded
    all_done = c.total > 0 and c.pending == c.starting == c.running == 0
    ever_scheduled = c.starting + c.running + c.succeeded + c.failed > 0
    if kind is COSCHEDULING:
        # scheduler-plugins' PodGroup controller: Pending | Scheduling | Running | Finished | Failed | Unknown.
        # Finished and Failed are final (it stops reconciling the group). Failed as soon as any member pod
        # failed once the group's pods reached minMember, even while enough others still run (an elastic group
        # that loses one pod stays Failed); Finished once minMember pods succeeded, even with others running.
        if previous in ("Finished", "Failed"):
            return previous
        if c.total > 0 and c.succeeded >= max(1, min_member):
            return "Finished"
        if c.failed > 0 and c.failed + active >= min_member:
            return "Failed"
        if c.running > 0 and active >= min_member:
            return "Running"
        if ever_scheduled:
            return "Scheduling"
        return "Pending"
    if kind is VOLCANO:
        # Volcano: Pending | Inqueue | Running | Unknown | Completed
        if all_done and c.succeeded >= min_member:
            return "Completed"
        if c.running > 0 and active >= min_member:
            return "Running"
        if ever_scheduled and active + c.starting < min_member:
            return "Unknown"
        if active + c.starting >= min_member and ever_scheduled:
            return "Inqueue"
        return "Pending"
    # kube-batch: Pending | Running | Unknown
    if c.running > 0 and active >= min_member:
        return "Running"
    if ever_scheduled and active + c.starting < min_member:
        return "Unknown"
    return "Pending"


def desired_group_status(group: GroupEntry, members: Iterable[PodEntry], *, now: str) -> JSON:
    """The status to write for `group`, keeping condition timestamps when the
    condition itself did not change (so an unchanged group is not rewritten)."""
    if group.kind is NATIVE:
        return _native_status(group, now=now)
    if group.kind is KAI:
        return _kai_status(group, members, now=now)
    c = count_members(members)
    kind = group.kind
    old: JSON = dict(group.obj.get("status") or {})
    previous = old.get("phase")
    status: JSON = {"phase": group_phase(kind, group.min_member, c,
                                         previous=previous if isinstance(previous, str) else None)}
    for name, value in (("running", c.running), ("succeeded", c.succeeded), ("failed", c.failed)):
        if value:
            status[name] = value
    if kind is COSCHEDULING:
        start = old.get("scheduleStartTime") or group.first_attempt
        if start:
            status["scheduleStartTime"] = start
        if old.get("occupiedBy"):
            status["occupiedBy"] = old["occupiedBy"]
        return status
    verdict = group.verdict
    conditions = list(old.get("conditions") or [])
    if verdict is not None and (verdict.scheduled or status["phase"] in ("Pending", "Inqueue", "Unknown")):
        wanted = {
            "type": "Scheduled" if verdict.scheduled else "Unschedulable",
            "status": "True",
            "reason": verdict.reason,
            "message": verdict.message,
        }
        prev = next((cd for cd in conditions if isinstance(cd, dict) and cd.get("type") == wanted["type"]), None)
        if prev is not None and all(prev.get(k) == v for k, v in wanted.items()):
            conditions = [prev]
        else:
            wanted["transitionID"] = str(uuid.uuid4())
            wanted["lastTransitionTime"] = now
            conditions = [wanted]
    if conditions:
        status["conditions"] = conditions
    return status


def _native_status(group: GroupEntry, *, now: str) -> JSON:
    """kube-scheduler's updatePodGroupCondition: PodGroupScheduled True (reason Scheduled) once the gang
    went to binding, False (reason Unschedulable, the scheduler's message) when it does not fit; a True
    condition never goes back to False; lastTransitionTime moves only when the status does
    (apimachinery SetStatusCondition). No phase, no counts. A basic-policy group gets nothing."""
    old: JSON = dict(group.obj.get("status") or {})
    verdict = group.verdict
    if verdict is None or not group.gang:
        return old
    conditions = [c for c in old.get("conditions") or [] if isinstance(c, dict)]
    prev = next((c for c in conditions if c.get("type") == "PodGroupScheduled"), None)
    if prev is not None and prev.get("status") == "True" and not verdict.scheduled:
        return old
    wanted: JSON = {
        "type": "PodGroupScheduled",
        "status": "True" if verdict.scheduled else "False",
        "observedGeneration": Body(group.obj).generation,
        "lastTransitionTime": now,
        "reason": "Scheduled" if verdict.scheduled else verdict.reason,
        "message": "" if verdict.scheduled else verdict.message,
    }
    if prev is not None and prev.get("status") == wanted["status"]:
        wanted["lastTransitionTime"] = prev.get("lastTransitionTime") or now
    old["conditions"] = [wanted if c is prev else c for c in conditions] if prev is not None \
        else conditions + [wanted]
    return old


def _kai_status(group: GroupEntry, members: Iterable[PodEntry], *, now: str) -> JSON:
    """KAI's status updater (pkg/scheduler/cache/status_updater): an unschedulable gang gets a
    schedulingConditions entry {type UnschedulableOnNodePool, nodePool, reason Unschedulable, message,
    reasons [{reason, message}], status True, transitionID = last + 1}, replacing its node pool's entry and
    appended last; nothing changes while any member holds an allocation, or when the entry is the same.
    No phase: KAI writes none (status.resourcesStatus is the podgroup-controller's)."""
    old: JSON = dict(group.obj.get("status") or {})
    verdict = group.verdict
    if verdict is None or verdict.scheduled:
        return old
    if any(m.holds_resources for m in members):
        return old
    pool = Body(group.obj).labels.get(KAI_NODE_POOL_LABEL)
    wanted: JSON = {
        "type": "UnschedulableOnNodePool",
        "nodePool": pool if isinstance(pool, str) and pool else "default",
        "reason": "Unschedulable",
        "message": f"{verdict.reason}: {verdict.message}.",
        "reasons": [{"reason": verdict.reason, "message": verdict.message}],
        "status": "True",
    }
    entries = [c for c in old.get("schedulingConditions") or [] if isinstance(c, dict)]

    def transition(c: JSON) -> int:
        try:
            return int(c.get("transitionID") or -1)
        except (TypeError, ValueError):
            return -1

    last = max(entries, key=transition, default=None)
    same = last is not None and all(last.get(k) == wanted[k] for k in ("type", "nodePool", "reason", "message",
                                                                        "status"))
    if same and entries and entries[-1] is last and last.get("nodePool") == wanted["nodePool"]:
        return old
    wanted["transitionID"] = str(max(0, transition(last) if last is not None else 0) + 1)
    wanted["lastTransitionTime"] = now
    old["schedulingConditions"] = [c for c in entries if c.get("nodePool") != wanted["nodePool"]] + [wanted]
    return old


def desired_group_annotations(group: GroupEntry) -> dict[str, str] | None:
    """Annotations the scheduler adds to the PodGroup itself: KAI stamps an allocated gang with
    kai.scheduler/last-start-timestamp (status_updater setPodGroupLastStartTimeStamp). None: nothing."""
    if group.kind is not KAI or group.verdict is None or not group.verdict.scheduled:
        return None
    if Body(group.obj).annotations.get(KAI_LAST_START_ANNOTATION):
        return None
    return {KAI_LAST_START_ANNOTATION: group.verdict.at or _now()}


# ---------------------------------------------------------------- the loop

#: How many pods one cycle considers at most (the rest go to the next cycle).
CYCLE_MAX_PODS = 2000
#: Events from the scheduler stay this long (kube-apiserver's default --event-ttl is 1h).
EVENT_TTL_SECONDS = 3600.0


class GangScheduler:
    """The scheduler of one simulated cluster (see module docstring)."""

    def __init__(
        self,
        *,
        storage: ObjectStorage,
        registry: Registry,
        cluster: ClusterProfile,
        logger: Any,
        cycle_max_pods: int = CYCLE_MAX_PODS,
    ) -> None:
        self.storage = storage
        self.cluster = cluster
        self.log = logger
        self.cycle_max_pods = cycle_max_pods
        pods = registry.get("", "v1", "pods")
        nodes = registry.get("", "v1", "nodes")
        if pods is None or nodes is None:
            raise RuntimeError("the simulator's registry must serve pods and nodes")
        self.pods_rt: ResourceType = pods
        self.nodes_rt: ResourceType = nodes
        self.events_rt: ResourceType | None = registry.get("", "v1", "events")
        self.priority_classes_rt: ResourceType | None = registry.get("scheduling.k8s.io", "v1", "priorityclasses")
        self.group_rts: dict[str, tuple[GroupKind, ResourceType]] = {}
        for spec in cluster.gang_schedulers:
            kind = GROUP_KINDS[spec.type]
            rt = registry.get(kind.group, kind.version, kind.plural)
            if rt is None:
                raise RuntimeError(f"the registry does not serve {kind.plural}.{kind.group}/{kind.version}")
            self.group_rts[kind.group] = (kind, rt)
        self.scheduler_types = {s.name: s.type for s in cluster.schedulers}
        self.kai_queues = frozenset(q for s in cluster.schedulers if s.type == "kai" for q in s.existing_queues)
        self.state = SchedulerState(scheduler_types=self.scheduler_types, kai_queues=self.kai_queues)
        self._wake = asyncio.Event()
        #: pod key -> (uid, last message written) so unchanged reasons are not rewritten
        self._reported: dict[str, tuple[str, str]] = {}
        self._events: dict[str, float] = {}  # "ns/name" of our Events -> created (monotonic)
        self._restart = asyncio.Event()

    # ------------------------------------------------------------ informers

    async def _sync(self) -> list[tuple[ResourceType, str, GroupKind | None]]:
        """List everything into a fresh state; return what to watch from where."""
        state = SchedulerState(scheduler_types=self.scheduler_types, kai_queues=self.kai_queues)
        watches: list[tuple[ResourceType, str, GroupKind | None]] = []
        nodes = await self.storage.list(self.nodes_rt)
        for obj in nodes.items:
            state.apply_node(obj)
        watches.append((self.nodes_rt, nodes.resource_version, None))
        if self.priority_classes_rt is not None:
            classes = await self.storage.list(self.priority_classes_rt)
            for obj in classes.items:
                state.apply_priority_class(obj)
            watches.append((self.priority_classes_rt, classes.resource_version, None))
        for kind, rt in self.group_rts.values():
            groups = await self.storage.list(rt)
            for obj in groups.items:
                state.apply_group(kind, obj)
            watches.append((rt, groups.resource_version, kind))
        pods = await self.storage.list(self.pods_rt)
        for obj in pods.items:
            state.apply_pod(obj)
        watches.append((self.pods_rt, pods.resource_version, None))
        self.state = state
        self._reported = {k: v for k, v in self._reported.items() if k in state.pods}
        return watches

    async def _watch(self, rt: ResourceType, resource_version: str, kind: GroupKind | None) -> None:
        try:
            async for ev in self.storage.watch(rt, resource_version=resource_version):
                if ev.type == "BOOKMARK":
                    continue
                self._apply(rt, kind, ev.type, ev.object)
                self._wake.set()
        except ApiError as e:
            self.log.info("watch ended; re-listing", resource=rt.plural, code=e.code, reason=e.reason)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the loop re-lists; say why
            self.log.warning("watch failed; re-listing", resource=rt.plural, error=str(e))
        self._restart.set()
        self._wake.set()

    def _apply(self, rt: ResourceType, kind: GroupKind | None, type_: str, obj: JSON) -> None:
        state = self.state
        meta = Body(obj)
        if rt is self.nodes_rt:
            if type_ == "DELETED":
                state.delete_node(meta.name)
            else:
                state.apply_node(obj)
        elif rt is self.pods_rt:
            if type_ == "DELETED":
                state.delete_pod(meta.namespace, meta.name)
                self._reported.pop(pod_key(meta.namespace, meta.name), None)
            else:
                state.apply_pod(obj)
        elif rt is self.priority_classes_rt:
            if type_ == "DELETED":
                state.delete_priority_class(meta.name)
            else:
                state.apply_priority_class(obj)
        elif kind is not None:
            if type_ == "DELETED":
                state.delete_group(kind, meta.namespace, meta.name)
            else:
                state.apply_group(kind, obj)

    # ------------------------------------------------------------ main loop

    async def run(self, stop: asyncio.Event) -> None:
        attempt = 0
        while not stop.is_set():
            tasks: list[asyncio.Task[None]] = []
            try:
                watches = await self._sync()
                self._restart.clear()
                for rt, rv, kind in watches:
                    tasks.append(asyncio.create_task(
                        self._watch(rt, rv, kind), name=f"sim-scheduler-watch-{self.cluster.name}-{rt.plural}"
                        f"{'-' + rt.group if rt.group else ''}"))
                self.log.info("scheduler synced", nodes=len(self.state.ledger.nodes), pods=len(self.state.pods),
                              pending=len(self.state.pending), groups=len(self.state.groups))
                attempt = 0
                await self._serve(stop)
            except _RestartNeeded:
                continue
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - keep scheduling; log and back off
                attempt += 1
                delay = min(10.0, 0.1 * 2 ** min(attempt, 8)) * random.uniform(0.5, 1.0)
                self.log.warning("scheduler loop failed; re-listing after backoff", error=f"{type(e).__name__}: {e}",
                                 wait_seconds=round(delay, 2), attempt=attempt)
                await wait_event(stop, delay)
            finally:
                for t in tasks:
                    t.cancel()
                for t in tasks:
                    try:
                        await t
                    except asyncio.CancelledError:
                        pass

    async def _serve(self, stop: asyncio.Event) -> None:
        stop_wait = asyncio.ensure_future(stop.wait())
        try:
            self._wake.set()
            while not stop.is_set():
                wake_wait = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait({stop_wait, wake_wait}, timeout=self._next_gc_in(),
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    wake_wait.cancel()
                if stop.is_set():
                    return
                if self._restart.is_set():
                    raise _RestartNeeded()
                self._wake.clear()
                await self._one_round()
                await self._gc_events()
        finally:
            stop_wait.cancel()

    async def _one_round(self) -> None:
        """Cycle, then write binds, reasons and group statuses. Yields to the
        watch tasks between cycles so the cache stays fresh."""
        state = self.state
        more = True
        while more:
            t0 = time.perf_counter()
            result = schedule_cycle(state, max_pods=self.cycle_max_pods)
            METRICS.loop_phase_seconds.labels(loop="sim-scheduler", phase="cycle").observe(time.perf_counter() - t0)
            more = result.more
            t0 = time.perf_counter()
            bound = await self._write_binds(result.binds)
            if bound:
                METRICS.sim_pods_bound.labels(cluster=self.cluster.name).inc(bound)
            METRICS.loop_phase_seconds.labels(loop="sim-scheduler", phase="bind").observe(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await self._write_unschedulable(result.unschedulable)
            await self._write_group_statuses()
            METRICS.loop_phase_seconds.labels(loop="sim-scheduler", phase="status").observe(time.perf_counter() - t0)
            if self._restart.is_set():
                raise _RestartNeeded()
            await asyncio.sleep(0)  # let watch events in before the next cycle

    # ------------------------------------------------------------ writes

    async def _write_binds(self, binds: Mapping[str, str]) -> int:
        done = 0
        for key, node in binds.items():
            entry = self.state.pods.get(key)
            if entry is None:
                self.state.forget(key)
                continue
            try:
                ok = await bind_pod(self.storage, namespace=entry.namespace, name=entry.name, uid=entry.uid,
                                    node_name=node)
            except ApiError as e:
                self.log.info("bind failed", pod=key, node=node, code=e.code, reason=e.reason, message=e.message)
                ok = False
            if not ok:
                self.state.forget(key)
                continue
            self.state.bound(key, None)
            self._reported.pop(key, None)
            done += 1
        return done

    async def _write_unschedulable(self, reasons: Mapping[str, str]) -> None:
        for key, message in reasons.items():
            entry = self.state.pods.get(key)
            if entry is None or self._reported.get(key) == (entry.uid, message):
                continue
            self._reported[key] = (entry.uid, message)
            try:
                await self._set_unschedulable(entry, message)
                await self._record_event(entry, message)
            except ApiError as e:
                if e.code != 404:
                    self.log.info("could not report unschedulable pod", pod=key, code=e.code, message=e.message)

    async def _set_unschedulable(self, entry: PodEntry, message: str) -> None:
        now = _now()

        def mutate(pod: JSON) -> JSON | None:
            if Body(pod).uid != entry.uid or (pod.get("spec") or {}).get("nodeName"):
                return None
            status = pod.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            prev = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
            if prev and prev.get("status") == "False" and prev.get("message") == message:
                return None
            conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                               "message": message, "lastProbeTime": None, "lastTransitionTime": now})
            status["conditions"] = conditions
            status.setdefault("phase", "Pending")
            return pod

        await self.storage.guaranteed_update(self.pods_rt, namespace=entry.namespace, name=entry.name,
                                             mutate=mutate, subresource="status")

    async def _record_event(self, entry: PodEntry, message: str) -> None:
        """One FailedScheduling Event per pod, updated in place (count, last
        timestamp, message) like kube's event correlator aggregates."""
        if self.events_rt is None:
            return
        now = _now()
        suffix = hashlib.sha256(entry.uid.encode()).hexdigest()[:16]
        name = f"{entry.name[:230]}.{suffix}"
        reporter = self._reporter(entry)

        def mutate(ev: JSON) -> JSON | None:
            ev["count"] = int(ev.get("count") or 1) + 1
            ev["lastTimestamp"] = now
            ev["message"] = message
            return ev

        try:
            await self.storage.guaranteed_update(self.events_rt, namespace=entry.namespace, name=name, mutate=mutate)
            return
        except ApiError as e:
            if e.code != 404:
                raise
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": entry.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": entry.namespace,
                               "name": entry.name, "uid": entry.uid},
            "reason": "FailedScheduling", "message": message, "type": "Warning",
            "source": {"component": reporter}, "reportingComponent": reporter,
            "reportingInstance": f"{reporter}-{self.cluster.name}",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            await self.storage.create(self.events_rt, event, namespace=entry.namespace)
            self._events[f"{entry.namespace}/{name}"] = time.monotonic()
        except ApiError as e:
            if e.code != 409:
                raise

    def _reporter(self, entry: PodEntry) -> str:
        return entry.scheduler_name

    def _next_gc_in(self) -> float | None:
        if not self._events:
            return None
        # insertion order is creation order: the first entry is the oldest
        oldest = next(iter(self._events.values()))
        return max(0.05, oldest + EVENT_TTL_SECONDS - time.monotonic())

    async def _gc_events(self) -> None:
        if self.events_rt is None or not self._events:
            return
        cutoff = time.monotonic() - EVENT_TTL_SECONDS
        for key in [k for k, t in self._events.items() if t < cutoff]:
            del self._events[key]
            ns, name = key.split("/", 1)
            try:
                await self.storage.delete(self.events_rt, namespace=ns, name=name)
            except ApiError:
                pass

    async def _write_group_statuses(self) -> None:
        state = self.state
        dirty, state.dirty_groups = state.dirty_groups, set()
        now = _now()
        for key in dirty:
            group = state.groups.get(key)
            if group is None:
                continue
            kind_rt = self.group_rts.get(group.kind.group)
            if kind_rt is None:
                continue
            await self._write_group_annotations(group, kind_rt[1])
            desired = desired_group_status(group, state.members_of(group), now=now)
            if desired == (group.obj.get("status") or {}):
                continue
            rt = kind_rt[1]
            uid = group.uid

            def mutate(obj: JSON, desired: JSON = desired, uid: str = uid) -> JSON | None:
                if Body(obj).uid != uid or obj.get("status") == desired:
                    return None
                obj["status"] = desired
                return obj

            try:
                written = await self.storage.guaranteed_update(
                    rt, namespace=group.namespace, name=group.name, mutate=mutate,
                    subresource="status" if rt.status_subresource else None)
            except ApiError as e:
                if e.code != 404:
                    self.log.info("could not update podgroup status", group=key, code=e.code, message=e.message)
                continue
            if written is not None:
                state.apply_group(group.kind, written)
                state.dirty_groups.discard(key)


    async def _write_group_annotations(self, group: GroupEntry, rt: ResourceType) -> None:
        wanted = desired_group_annotations(group)
        if wanted is None:
            return
        uid = group.uid

        def mutate(obj: JSON) -> JSON | None:
            body = Body(obj)
            current = body.annotations
            if body.uid != uid or all(current.get(k) == v for k, v in wanted.items()):
                return None
            obj["metadata"]["annotations"] = {**current, **wanted}  # a stored object: metadata is a dict
            return obj

        try:
            written = await self.storage.guaranteed_update(rt, namespace=group.namespace, name=group.name,
                                                           mutate=mutate)
        except ApiError as e:
            if e.code != 404:
                self.log.info("could not annotate podgroup", group=group.key, code=e.code, message=e.message)
            return
        if written is not None:
            self.state.apply_group(group.kind, written)


class _RestartNeeded(Exception):
    """A watch ended or expired (410): re-list everything."""


async def bind_pod(
    storage: ObjectStorage, *, namespace: str, name: str, uid: str, node_name: str
) -> bool:
    """Bind through the same code as POST pods/binding (one write: nodeName
    plus PodScheduled=True). False when the pod is gone, was replaced, is
    already bound or is being deleted."""
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "uid": uid},
               "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}
    try:
        await kinds.bind_pod(storage, namespace=namespace, pod_name=name, binding=binding)
    except ApiError as e:
        if e.code in (404, 409):
            return False
        raise
    return True


async def run_gang_scheduler(
    *,
    storage: ObjectStorage,
    registry: Registry,
    cluster: ClusterProfile,
    stop: asyncio.Event,
    logger: Any,
) -> None:
    """Run the cluster's scheduler until `stop` is set (the entry point
    `federator.sim.server` starts as a named task)."""
    scheduler = GangScheduler(storage=storage, registry=registry, cluster=cluster, logger=logger)
    await scheduler.run(stop)
