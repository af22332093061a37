"""Delegation adapters: how a placed gang becomes objects in a member cluster, and how their state reads back.

The shape is Kueue's MultiKueueAdapter (SyncJob / DeleteRemoteObject / GVK):
one adapter per member scheduler (volcano, coscheduling, kube-batch,
native, kai, default), and each is *data* (`SchedulerAdapter`: API group,
version, kind, the pod label, annotation or spec field that ties a pod to
its PodGroup, which spec fields the PodGroup has and where its minimum goes,
which of its phases, conditions or annotations mean "the gang is
scheduled" and where it explains a wait).
All behaviour is here, shared:

- `SchedulerAdapter.render(job, ...)`: the TrainingJob (a stored hub object,
  a plain dict) as a list of `MemberObject`s in dispatch order, PodGroup
  first, then the gang's headless Service and the framework's ConfigMaps,
  then the pods role by role, index by index (hostname, subdomain and the
  framework's environment are added over the rendered pods by network.py
  and frameworks.py).
- `SchedulerAdapter.read_status(podgroup, pods)`: a `GangStatus` (job phase
  Placed / Admitted / Running / Succeeded / Failed, pod counts per role, and
  a reason and message that explain a wait or a failure).
- `selector_for`, `stale_selector`, `hub_selector`: label selectors to list
  and delete a job's member objects (one epoch, every other epoch, or
  everything this hub made), and `gvk_list()`: the kinds an adapter creates.
- `ownership_of(obj, ...)`: whether an object found in a member (e.g. a 409
  on create) is this dispatch's own, an older epoch's, a newer epoch's or
  someone else's, so a re-dispatch after a crash creates nothing twice and
  never deletes what it does not own.

Names are deterministic, so re-dispatch after a crash finds what it already
created instead of creating it again:

- pods: `<job>-<token>-<role>-<index>`, where `<token>` is five characters
  hashed from the job's uid. Pod names become hostnames, which must be
  DNS-1123 labels of at most 63 characters (the kubelet truncates longer
  names, and truncation could make two pods share a hostname), so every name
  stays a DNS-1123 label of at most 63 characters: when the plain form is
  too long, it becomes `<job>-<role>` cut short, an 8-character hash of
  (uid, role) and the index, so the index stays readable and two long roles
  still differ. The uid token keeps two jobs apart that would otherwise
  render the same string (job `a-b` role `c` and job `a` role `b-c` both
  give `a-b-c-0`) and keeps a re-created job of the same name clear of the
  old job's pods while they terminate. Pod names do *not* carry the epoch:
  a pod name is a per-cluster lock across epochs, so a gang re-placed into
  the same cluster cannot start while a pod of its older epoch still
  exists there (the create answers 409 until the fenced copy is gone), and
  hostnames stay the same across requeues.
- PodGroups: `<job>-<token>-e<epoch>`, also a DNS-1123 label of at most 63
  characters, because coscheduling names the group in a pod *label* value.
  A new epoch gets a fresh PodGroup, so its status (phase, conditions,
  scheduleStartTime) never carries over from an older attempt, and pods of
  an older epoch never count towards the new group's minMember.
- the headless Service: `<job>-<token>` (a DNS-1035 label: a job named from
  a digit gets a leading "j"), the same at every epoch like pod names, so a
  pod's DNS name `<pod>.<service>.<namespace>.svc` survives requeues; its
  selector names the epoch. The MPI hostfile ConfigMap: `<service>-config`.
- hostnames: a TrainingJob's pod has hostname = its pod name and subdomain =
  the gang's Service. A twin of an upstream kind (render mode, issue 28) gets
  the DNS identity the kind's operator gives its pods instead (the pod
  contract's `dns`, `_operator_dns`), without renaming the pod: Kubeflow's
  `<job>-<type>-<i>` with a headless Service of that name selecting the pod
  alone, MPIJob's `<job>-worker-<i>` / `<job>-launcher` under subdomain
  `<job>`, JobSet's `<jobset>-<rjob>-<j>-<p>` under its subdomain, TrainJob's
  `<name>-node-0-<i>.<name>`, an Indexed Job's `<job>-<index>`; each
  subdomain gets a headless Service of its name selecting the gang's pods.
  These Services are named as the operator names them, the same at every
  epoch, select by epoch and carry the gang's labels, exactly as the gang's
  own Service (which is still made); the framework's environment names those
  hosts. A name that would be invalid or would clash gives the whole gang the
  hub's identity instead.

Every member object carries the labels `federator.dev/hub`,
`federator.dev/job-uid`, `federator.dev/job-namespace`,
`federator.dev/job-name`, `federator.dev/epoch` (pods also
`federator.dev/role` and `federator.dev/index`) and the annotations
`federator.dev/job` (namespace/name) and `federator.dev/gang` (the roles and
replicas, so a status reader knows how many pods there should be).

Size: the pods rendered per role are the job's placed size
(`apis.trainingjob.placed_replicas`: `status.replicas`, which the placement
controller writes with the decision, else each role's `spec.replicas`), so a
re-dispatch after a hub restart renders what was placed. The PodGroup's
minimum (minMember, or the native API's minCount) is the sum of the roles'
minimums (`minReplicas`, else `replicas`): every pod for a fixed-size gang,
and for an elastic gang the fewest it can run with, so the member's gang
scheduler admits it at that minimum and places the rest as they fit;
minResources (Volcano, coscheduling) is what that minimum requests.

Pods get the role's template (image, command, args, env, resources as
requests and limits, nodeSelector, tolerations), `restartPolicy: Never`
(a gang member that fails fails the gang), the cluster's schedulerName and,
when placement chose a node, a *preferred* node affinity for it: a hint the
member scheduler may ignore. Pods that request GPUs also get a *required*
node affinity for the GPU model placement chose (`gpu_node_labels`: the
`nvidia.com/gpu.product` values of that model's nodes in the cluster, which
the dispatcher reads from the cluster's snapshot), so the member scheduler
cannot put them on another model; and every pod a *required* node affinity
`kubernetes.io/hostname NotIn` the job's excluded nodes in that cluster
(`avoid_hostnames`: a failure policy's Requeue excluding a node). The
adapter never binds a pod itself; the member's scheduler decides.

Priority: a job with `spec.priorityClassName`, or with a non-zero
`spec.priority`, needs a PriorityClass in the member (`member_priority_class`:
the job's class name, else `federator-priority-<value>`, `-minus-<n>` below
zero; value = the job's priority, capped at kube's 1000000000 for user
classes; preemptionPolicy Never, because the hub preempts whole gangs and a
member scheduler must not evict single pods of one). The dispatcher creates it
if missing (409 AlreadyExists is fine: the member's own class wins) and
passes its name to `render`, which sets `priorityClassName` on every pod and
on the PodGroup where the kind has the field (Volcano, kube-batch, KAI order
their gangs by it; coscheduling and Kubernetes' own order by the pods'
priority, which the member's Priority admission resolves from the class). A
job with priority 0 and no class gets nothing.

Pure: no I/O, no asyncio, no global mutable state. It must never bind a
pod, never produce a name that is not a DNS-1123 label of at most 63
characters, and never render part of a job: bad input raises `RenderError`
naming the field, and nothing is returned.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Protocol

from pydantic import ValidationError

from federator.apis.common import (
    ValidationSettings,
    dns1035_label_errors,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_key_errors,
    label_value_errors,
)
from federator.apis.frameworks import FrameworkSettings
from federator.apis.checkpoint import ENV_CHECKPOINT_DIR, ENV_CHECKPOINT_URI, ENV_RESTORE_FROM, restore_from
from federator.apis.trainingjob import (
    CHECKPOINT_VOLUME,
    MAX_EXCLUDED_NODES,
    CheckpointSpec,
    Role,
    TrainingJob,
    placed_replicas,
    validate_trainingjob,
)
from federator.apis.jobkinds.base import PodContract, PodDns
from federator.delegation.contracts import contract_for, put_contract
from federator.delegation.frameworks import GangLayout, GangRole, apply_framework, framework_config_maps, service_ports
from federator.delegation.network import headless_service, set_dns
from federator.apis.views import Body
from federator.placement.decision import PodAssignment
from federator.placement.gang import MAX_GANG_PODS
from federator.apis.quantity import QuantityError
from federator.placement.resources import Resources, template_requests
from federator.placement.snapshot import NodeState

__all__ = [
    "ANNOTATION_GANG",
    "ANNOTATION_JOB",
    "ANNOTATION_NODE_HINT",
    "EXTENDED_RESOURCES",
    "LABEL_EPOCH",
    "LABEL_HUB",
    "LABEL_INDEX",
    "LABEL_JOB_NAME",
    "LABEL_JOB_NAMESPACE",
    "LABEL_JOB_UID",
    "LABEL_MANAGED_BY",
    "LABEL_ON_CLUSTER_LOSS",
    "LABEL_ROLE",
    "MANAGED_BY",
    "MAX_EPOCH",
    "MAX_NAME_LENGTH",
    "MAX_MEMBER_PRIORITY",
    "CONFIG_MAP_GVK",
    "POD_GVK",
    "SERVICE_GVK",
    "PRIORITY_CLASS_GVK",
    "PRIORITY_CLASS_PREFIX",
    "Adapter",
    "GangPhase",
    "GangStatus",
    "Gvk",
    "JobCondition",
    "MemberObject",
    "HOSTNAME_LABEL",
    "NO_GANG_GUARANTEE",
    "OperatorGang",
    "Ownership",
    "PodGroupKind",
    "RenderError",
    "RoleCounts",
    "checkpoint_pod_spec",
    "SchedulerAdapter",
    "extended_resource_tolerations",
    "gpu_node_labels",
    "hub_selector",
    "is_system_priority_class",
    "member_priority_class",
    "ownership_of",
    "podgroup_name",
    "pod_name",
    "priority_class_name_for",
    "selector_for",
    "service_name",
    "stale_selector",
]

JSON = dict[str, Any]

# ---------------------------------------------------------------- labels and annotations

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "federator"
LABEL_HUB = "federator.dev/hub"
LABEL_JOB_UID = "federator.dev/job-uid"
LABEL_JOB_NAMESPACE = "federator.dev/job-namespace"
LABEL_JOB_NAME = "federator.dev/job-name"
LABEL_EPOCH = "federator.dev/epoch"
#: the job's spec.failover.onClusterLoss; the member's fence agent spares "wait" gangs (the hub never moves
#: them, so they cannot run twice, and the job wants them kept through a partition)
LABEL_ON_CLUSTER_LOSS = "federator.dev/on-cluster-loss"
LABEL_ROLE = "federator.dev/role"
LABEL_INDEX = "federator.dev/index"
#: "<namespace>/<name>" of the TrainingJob on the hub
ANNOTATION_JOB = "federator.dev/job"
#: the gang's roles and replicas, "ps=2,worker=8", so a reader knows how many pods there should be
ANNOTATION_GANG = "federator.dev/gang"
#: the node placement chose for this pod (also a preferred node affinity); the member scheduler decides
ANNOTATION_NODE_HINT = "federator.dev/node-hint"

#: Pod names become hostnames: DNS-1123 labels, at most 63 characters. PodGroup
#: names travel in a pod label value (coscheduling): at most 63 characters too.
MAX_NAME_LENGTH = 63
#: Epochs are label values and name suffixes; int32 is far beyond any requeue cap.
MAX_EPOCH = 2**31 - 1

# Kubernetes' own alphabet for generated name suffixes: no vowels, so no words.
_TOKEN_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_UID_TOKEN_LENGTH = 5
_TRUNCATION_HASH_LENGTH = 8

# Render parses a job the hub's API server already accepted, perhaps under caps
# wider than the defaults; it enforces only what it must (a gang that no member
# can hold, names that would not be valid). The validator is the API's job.
_RENDER_SETTINGS = ValidationSettings(
    max_replicas_per_role=MAX_GANG_PODS,
    max_total_replicas=MAX_GANG_PODS,
    max_roles=MAX_GANG_PODS,
    max_cpu_per_pod="1M",
    max_memory_per_pod="1Ei",
    max_gpus_per_pod=1_000_000,
    max_rdma_per_pod=1_000_000,
    max_containers_per_pod=1_000_000,
    max_template_bytes=1 << 40,
)
_MAX_ERRORS_SHOWN = 5

_BINARY_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


class RenderError(ValueError):
    """A job that cannot be rendered for a member cluster; the message names the field."""


# ---------------------------------------------------------------- kinds and objects


@dataclass(frozen=True, slots=True)
class Gvk:
    """A member API collection: group, version, kind, plural and scope."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """"pods", "podgroups.scheduling.volcano.sh": how people and metrics name the collection."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


POD_GVK = Gvk(group="", version="v1", kind="Pod", plural="pods")
#: the gang's headless Service (network identity: delegation/network.py)
SERVICE_GVK = Gvk(group="", version="v1", kind="Service", plural="services")
#: a framework's files for the gang (the MPI hostfile: delegation/frameworks.py)
CONFIG_MAP_GVK = Gvk(group="", version="v1", kind="ConfigMap", plural="configmaps")
#: cluster-scoped; made sure of (not owned: shared by every job of that priority) before pods name it
PRIORITY_CLASS_GVK = Gvk(group="scheduling.k8s.io", version="v1", kind="PriorityClass", plural="priorityclasses",
                         namespaced=False)
#: the member class of a job that has an integer priority and no class name
PRIORITY_CLASS_PREFIX = "federator-priority-"
#: kube refuses user-defined PriorityClasses above this (HighestUserDefinablePriority)
MAX_MEMBER_PRIORITY = 1_000_000_000
#: class names kube reserves for its own classes: used as they are, never created
_SYSTEM_CLASS_PREFIX = "system-"
#: how many label values one GPU pin may list (one per GPU product of a model in a cluster)
_MAX_PIN_VALUES = 64


@dataclass(frozen=True, slots=True)
class MemberObject:
    """One object to create in a member cluster: where it goes and its body (a JSON object)."""

    gvk: Gvk
    namespace: str
    name: str
    body: JSON

    @property
    def api_version(self) -> str:
        return self.gvk.api_version

    @property
    def kind(self) -> str:
        return self.gvk.kind

    @property
    def plural(self) -> str:
        return self.gvk.plural

    @property
    def labels(self) -> Mapping[str, str]:
        labels: Mapping[str, str] = self.body["metadata"].get("labels") or {}
        return labels

    def owned_by(self, owner: Mapping[str, Any]) -> MemberObject:
        """A copy whose ownerReferences point at `owner`, an object as the member returned it (with a uid).

        Pods are owned by their PodGroup: when a member's garbage collector
        sees the group deleted (or never created, after a crash between the
        two creates) it deletes the pods too. The reference is not a
        controller reference and does not block the owner's deletion.
        """
        meta = owner.get("metadata") if isinstance(owner, Mapping) else None
        if not isinstance(meta, Mapping):
            raise RenderError("owner has no metadata")
        uid, name = meta.get("uid"), meta.get("name")
        api_version, kind = owner.get("apiVersion"), owner.get("kind")
        if not all(isinstance(v, str) and v for v in (uid, name, api_version, kind)):
            raise RenderError("owner needs apiVersion, kind, metadata.name and metadata.uid")
        if meta.get("namespace") not in (None, self.namespace):
            raise RenderError(f"owner {kind}/{name} is in namespace {meta.get('namespace')!r}, "
                              f"not {self.namespace!r}: owner references cannot cross namespaces")
        # Only metadata changes: the rest is shared with this object (neither is ever edited in place)
        body = dict(self.body)
        body["metadata"] = dict(self.body["metadata"])
        body["metadata"]["ownerReferences"] = [{
            "apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": False, "blockOwnerDeletion": False,
        }]
        return MemberObject(gvk=self.gvk, namespace=self.namespace, name=self.name, body=body)


def _copy_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value


# ---------------------------------------------------------------- status


class GangPhase(StrEnum):
    """The job phases a member's objects can show (TrainingJob.status.phase)."""

    PLACED = "Placed"  # delegated; the member's scheduler has not scheduled the whole gang yet
    ADMITTED = "Admitted"  # the gang is scheduled: every pod bound to a node
    RUNNING = "Running"  # every pod runs (or already succeeded)
    SUCCEEDED = "Succeeded"  # every pod succeeded
    FAILED = "Failed"  # a pod failed (restartPolicy Never: the gang cannot complete)


@dataclass(frozen=True, slots=True)
class RoleCounts:
    """Pods of one role by phase; pods that should exist but do not are counted as pending."""

    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0

    @property
    def total(self) -> int:
        return self.pending + self.running + self.succeeded + self.failed

    def as_dict(self) -> dict[str, int]:
        """The TrainingJob.status.podCounts entry."""
        return {"pending": self.pending, "running": self.running, "succeeded": self.succeeded,
                "failed": self.failed}


@dataclass(frozen=True, slots=True)
class GangStatus:
    """What a member's PodGroup and pods say about one gang."""

    phase: GangPhase
    #: role -> counts, every expected role present
    counts: Mapping[str, RoleCounts]
    #: pods the gang should have (from the objects' gang annotation or the caller), and how many of them exist
    expected: int
    existing: int
    #: pods bound to a node (spec.nodeName set)
    bound: int
    #: CamelCase code and a sentence: why the gang waits, why it failed, or what it is doing
    reason: str
    message: str
    #: the member PodGroup's phase, if there is a PodGroup
    podgroup_phase: str | None = None

    @property
    def missing(self) -> int:
        return max(0, self.expected - self.existing)


@dataclass(frozen=True, slots=True)
class JobCondition:
    """A condition the lifecycle controller puts into TrainingJob.status.conditions."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class OperatorGang:
    """`SchedulerAdapter.render_operator_gang`: the PodGroup to create first (None for the default scheduler) and
    what goes on the member copy of the source object: `labels` and `annotations` on the copy and on each of its
    pod templates (the same keys rendered pods carry: job uid, epoch, hub, ...; plus LABEL_ROLE per template),
    and on each pod template the adapter's gang membership (`pod_labels`, `pod_annotations`, and `pod_spec`:
    schedulerName, the PodGroup spec field, priorityClassName). `checkpoint` and `restore_from` go into every
    container of every pod template as into rendered pods (`checkpoint_pod_spec`)."""

    podgroup: MemberObject | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    roles: tuple[str, ...]
    pod_labels: Mapping[str, str]
    pod_annotations: Mapping[str, str]
    pod_spec: Mapping[str, Any]
    checkpoint: CheckpointSpec | None = None
    restore_from: str | None = None


class Ownership(StrEnum):
    """How an object found in a member cluster relates to one dispatch (job uid + epoch + hub)."""

    CURRENT = "current"  # ours, this epoch: the create already happened
    STALE = "stale"  # ours, an older epoch: fence it (delete) before creating the new epoch's objects
    NEWER = "newer"  # ours, a newer epoch: this dispatch is outdated and must not touch anything
    FOREIGN = "foreign"  # another job's, another hub's, or not federator's: never delete it


# ---------------------------------------------------------------- selectors


def _check_label_value(value: str, what: str) -> None:
    if not isinstance(value, str) or not value:
        raise RenderError(f"{what} must be a non-empty string")
    problems = label_value_errors(value)
    if problems:
        raise RenderError(f"{what} {value[:80]!r} cannot be a label value: {problems[0]}")


def _check_epoch(epoch: int) -> None:
    if type(epoch) is not int or not 0 <= epoch <= MAX_EPOCH:
        raise RenderError(f"epoch must be an integer from 0 to {MAX_EPOCH}, got {epoch!r}")


def selector_for(job_uid: str, epoch: int | None = None) -> str:
    """Label selector for a job's member objects (of one epoch, if given)."""
    _check_label_value(job_uid, "job uid")
    selector = f"{LABEL_JOB_UID}={job_uid}"
    if epoch is not None:
        _check_epoch(epoch)
        selector += f",{LABEL_EPOCH}={epoch}"
    return selector


def stale_selector(job_uid: str, current_epoch: int) -> str:
    """Label selector for a job's member objects of every epoch but `current_epoch` (to fence them).

    Objects of a *newer* epoch match too; `ownership_of` tells them apart
    before anything is deleted.
    """
    _check_label_value(job_uid, "job uid")
    _check_epoch(current_epoch)
    return f"{LABEL_JOB_UID}={job_uid},{LABEL_EPOCH}!={current_epoch}"


def hub_selector(hub_id: str) -> str:
    """Label selector for everything a hub created in a member (for GC of orphans)."""
    _check_label_value(hub_id, "hub id")
    return f"{LABEL_HUB}={hub_id}"


def ownership_of(obj: Mapping[str, Any], *, job_uid: str, epoch: int, hub_id: str) -> Ownership:
    """How `obj` (as read from a member) relates to the dispatch of `job_uid` at `epoch` by `hub_id`."""
    labels = Body(obj).labels
    if labels.get(LABEL_HUB) != hub_id or labels.get(LABEL_JOB_UID) != job_uid:
        return Ownership.FOREIGN
    raw = labels.get(LABEL_EPOCH)
    if not isinstance(raw, str) or not raw.isdigit() or len(raw) > 10:
        return Ownership.FOREIGN
    found = int(raw)
    if found == epoch:
        return Ownership.CURRENT
    return Ownership.STALE if found < epoch else Ownership.NEWER


# ---------------------------------------------------------------- names


def _token(text: str, length: int) -> str:
    number = int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")
    chars = []
    for _ in range(length):
        number, digit = divmod(number, len(_TOKEN_ALPHABET))
        chars.append(_TOKEN_ALPHABET[digit])
    return "".join(chars)


def _shorten(head: str, tail: str) -> str:
    """`head` cut so that head + tail fits MAX_NAME_LENGTH, never ending in '-'."""
    room = MAX_NAME_LENGTH - len(tail)
    return head[:room].rstrip("-") + tail


def pod_name(*, job_name: str, job_uid: str, role: str, index: int) -> str:
    """The member pod name of pod `index` of `role` (see the module docstring)."""
    plain = f"{job_name}-{_token(job_uid, _UID_TOKEN_LENGTH)}-{role}-{index}"
    if len(plain) <= MAX_NAME_LENGTH:
        return plain
    return _shorten(f"{job_name}-{role}", f"-{_token(f'{job_uid}/{role}', _TRUNCATION_HASH_LENGTH)}-{index}")


def podgroup_name(*, job_name: str, job_uid: str, epoch: int) -> str:
    """The member PodGroup name of the job's gang at `epoch` (see the module docstring)."""
    return _shorten(job_name, f"-{_token(job_uid, _UID_TOKEN_LENGTH)}-e{epoch}")


def service_name(*, job_name: str, job_uid: str) -> str:
    """The member name of the job's headless Service (see the module docstring): `<job>-<token>`, a DNS-1035
    label (it starts with a letter: a job named from a digit gets a leading "j")."""
    head = job_name if job_name[:1].isalpha() else f"j{job_name}"
    return _shorten(head, f"-{_token(job_uid, _UID_TOKEN_LENGTH)}")


# ---------------------------------------------------------------- quantities


def _format_memory(size: int) -> str:
    """Bytes exactly: the largest binary unit that divides them, else plain bytes (never rounded)."""
    for suffix, factor in _BINARY_SUFFIXES:
        if size >= factor and size % factor == 0:
            return f"{size // factor}{suffix}"
    return str(size)


def _gang_min_resources(total: Resources) -> dict[str, str]:
    out: dict[str, str] = {}
    if total.cpu_milli:
        out["cpu"] = str(total.cpu_milli // 1000) if total.cpu_milli % 1000 == 0 else f"{total.cpu_milli}m"
    if total.memory:
        out["memory"] = _format_memory(total.memory)
    if total.gpu:
        out["nvidia.com/gpu"] = str(total.gpu)
    if total.rdma:
        out["rdma/hca"] = str(total.rdma)
    return out


# ---------------------------------------------------------------- the adapter


@dataclass(frozen=True, slots=True)
class PodGroupKind:
    """A gang scheduler's PodGroup API and how pods join a group (kube-api-notes §11)."""

    gvk: Gvk
    #: how a pod names its group: a label (coscheduling), an annotation (Volcano, kube-batch, KAI) or a field
    #: of the pod's spec, dotted (Kubernetes' own: "schedulingGroup.podGroupName")
    member_key: str
    member_by: Literal["label", "annotation", "spec"]
    #: spec.minResources exists in this version
    has_min_resources: bool
    #: spec.queue exists; None = leave it out
    queue: str | None
    #: coscheduling's spec.scheduleTimeoutSeconds (None = the scheduler's default)
    schedule_timeout_seconds: int | None
    #: status.phase values that mean the whole gang was scheduled
    admitted_phases: frozenset[str]
    #: status.phase values that mean the gang failed
    failed_phases: frozenset[str]
    #: where the gang's minimum goes in the PodGroup's spec, dotted ("schedulingPolicy.gang.minCount")
    min_member_field: str = "minMember"
    #: a status.conditions entry (type, status) that means the whole gang was scheduled
    admitted_condition: tuple[str, str] | None = None
    #: a metadata annotation whose presence means the scheduler allocated the whole gang
    admitted_annotation: str | None = None
    #: where the scheduler says why the gang waits: (status list field, condition type, condition status)
    unschedulable_condition: tuple[str, str, str] = ("conditions", "Unschedulable", "True")
    #: a label naming the queue on the PodGroup and its pods, besides spec.queue
    queue_label: str | None = None
    #: pods get an ownerReference to their PodGroup (`MemberObject.owned_by`; the dispatcher asks)
    pods_owned_by_group: bool = True
    #: spec.priorityClassName exists (Volcano, kube-batch, KAI: their schedulers order gangs by it)
    has_priority_class: bool = False


class Adapter(Protocol):
    """What the dispatch, status and GC controllers need of a member scheduler's adapter."""

    @property
    def name(self) -> str: ...

    @property
    def default_scheduler_name(self) -> str: ...

    @property
    def gang_guarantee(self) -> bool: ...

    @property
    def pods_owned_by_group(self) -> bool: ...

    def render(
        self,
        job: Mapping[str, Any],
        *,
        cluster_scheduler_name: str,
        epoch: int,
        hub_id: str,
        namespace: str,
        assignment: Iterable[PodAssignment] = (),
        priority_class_name: str | None = None,
        gpu_node_labels: Mapping[str, Sequence[str]] | None = None,
        avoid_hostnames: Sequence[str] = (),
    ) -> list[MemberObject]: ...

    def read_status(
        self,
        podgroup: Mapping[str, Any] | None,
        pods: Sequence[Mapping[str, Any]],
        *,
        expected: Mapping[str, int] | None = None,
    ) -> GangStatus: ...

    def gvk_list(self) -> tuple[Gvk, ...]: ...

    def selector_for(self, job_uid: str, epoch: int | None = None) -> str: ...

    def job_conditions(self) -> tuple[JobCondition, ...]: ...


NO_GANG_GUARANTEE = "the default scheduler gives no gang guarantee: pods may start partially"
#: how kube-scheduler's gang scheduling words a pod that fit but waited at Permit for a gang that did not
#: (pkg/scheduler/framework/plugins/gangscheduling; the simulator's `sim.scheduler.NATIVE_WAITING` starts so too)
GANG_WAIT_MESSAGE = "pod group is unschedulable, waiting for minCount pods from a gang to be scheduled"


@dataclass(frozen=True, slots=True)
class SchedulerAdapter:
    """One member scheduler, as data; see the module docstring. Customise with `dataclasses.replace`."""

    name: str
    #: the pod schedulerName of the scheduler's standard install (MemberCluster may override)
    default_scheduler_name: str
    #: None: pods only (the default scheduler)
    pod_group: PodGroupKind | None

    @property
    def gang_guarantee(self) -> bool:
        return self.pod_group is not None

    @property
    def pods_owned_by_group(self) -> bool:
        """Whether the dispatcher should make the pods owned by the PodGroup it created first."""
        return self.pod_group is not None and self.pod_group.pods_owned_by_group

    def gvk_list(self) -> tuple[Gvk, ...]:
        """The kinds this adapter creates, in creation order (delete in reverse)."""
        gang = (SERVICE_GVK, CONFIG_MAP_GVK, POD_GVK)
        return (self.pod_group.gvk, *gang) if self.pod_group is not None else gang

    def selector_for(self, job_uid: str, epoch: int | None = None) -> str:
        return selector_for(job_uid, epoch)

    def job_conditions(self) -> tuple[JobCondition, ...]:
        """The GangGuarantee condition the lifecycle controller writes into the job once it is placed here."""
        if self.pod_group is None:
            return (JobCondition(type="GangGuarantee", status="False", reason="DefaultScheduler",
                                 message=NO_GANG_GUARANTEE),)
        return (JobCondition(
            type="GangGuarantee", status="True", reason="PodGroup",
            message=f"{self.name} starts the gang all or nothing ({self.pod_group.gvk.kind} "
                    f"{self.pod_group.gvk.api_version} with {self.pod_group.min_member_field} = every pod, or an "
                    f"elastic gang's minimum)"),)

    # ------------------------------------------------------------ render

    def render(
        self,
        job: Mapping[str, Any],
        *,
        cluster_scheduler_name: str,
        epoch: int,
        hub_id: str,
        namespace: str,
        assignment: Iterable[PodAssignment] = (),
        priority_class_name: str | None = None,
        gpu_node_labels: Mapping[str, Sequence[str]] | None = None,
        avoid_hostnames: Sequence[str] = (),
    ) -> list[MemberObject]:
        """The member objects of `job` at `epoch`, in dispatch order (PodGroup first, then pods).

        `namespace` is the member namespace (the dispatcher makes sure it
        exists); `assignment` (from the placement Decision) gives each pod a
        node hint; `priority_class_name` (the name of `member_priority_class(job)`,
        once the member has it) goes on the pods and the PodGroup;
        `gpu_node_labels` (label -> allowed values) pins the pods that request
        GPUs to nodes of the GPU model placement chose; `avoid_hostnames` (the
        kubernetes.io/hostname values of the job's excluded nodes in this
        cluster, status.placement.excludedNodes) keeps every pod off those
        nodes by a required node affinity. Each role gets its
        placed number of pods (`placed_replicas(job)`, see the module docstring).
        Raises RenderError, naming the field, for anything that would not make
        valid member objects.
        """
        model, where, counts, common_labels, common_annotations = _gang_identity(
            job, cluster_scheduler_name=cluster_scheduler_name, epoch=epoch, hub_id=hub_id, namespace=namespace,
            priority_class_name=priority_class_name)
        job_uid, job_name = str(model.metadata.uid), str(model.metadata.name)
        job_namespace = str(model.metadata.namespace)
        roles = model.spec.roles
        total_pods = sum(counts[role.name] for role in roles)
        hints = _node_hints(assignment, counts, where=where)
        gpu_pin = _gpu_pin(gpu_node_labels)
        avoid = _avoid_nodes(avoid_hostnames)
        restore = restore_from(job, epoch)
        group_name, podgroup = self._gang_podgroup(model, epoch=epoch, namespace=namespace, labels=common_labels,
                                                   annotations=common_annotations, where=where,
                                                   priority_class_name=priority_class_name)
        objects: list[MemberObject] = [podgroup] if podgroup is not None else []
        seen: set[str] = {group_name} if group_name else set()
        for role in roles:
            role_pod = _pod_of(role, where=where)
            for index in range(counts[role.name]):
                name = pod_name(job_name=job_name, job_uid=job_uid, role=role.name, index=index)
                if name in seen or dns1123_label_errors(name):  # cannot happen; refuse rather than send it
                    raise RenderError(f"{where}: rendered pod name {name!r} is not a unique DNS-1123 label")
                seen.add(name)
                pod_spec = _copy_json(role_pod.spec)
                for field in ("initContainers", "containers"):
                    for container in pod_spec.get(field) or ():
                        container["env"] = _gang_env(
                            job_namespace=job_namespace, job_name=job_name, role=role.name, index=index,
                            role_size=counts[role.name], gang_size=total_pods, epoch=epoch,
                            user_env=container.get("env") or ())
                checkpoint_pod_spec(pod_spec, checkpoint=model.spec.checkpoint, restore=restore)
                objects.append(self._render_pod(
                    role, index=index, name=name, namespace=namespace, pod_spec=pod_spec, role_pod=role_pod,
                    scheduler_name=cluster_scheduler_name, group_name=group_name,
                    labels=common_labels, annotations=common_annotations, node=hints.get((role.name, index)),
                    priority_class_name=priority_class_name, gpu_pin=gpu_pin, avoid=avoid))
        # network identity and the framework's environment, over the rendered pods (network.py, frameworks.py)
        gang = _gang_objects(model, objects, counts=counts, namespace=namespace, labels=common_labels,
                             annotations=common_annotations, where=where)
        return objects[:len(objects) - sum(1 for o in objects if o.gvk == POD_GVK)] + gang

    def join_gang(self, labels: dict[str, str], annotations: dict[str, str], spec: JSON, *, scheduler_name: str,
                  group_name: str | None, priority_class_name: str | None) -> None:
        """Put on one pod (its labels, annotations and spec, in place) what makes it a member of the gang's
        PodGroup `group_name` for this scheduler: schedulerName, the PodGroup label, annotation or spec field,
        the queue label, and the priority class (or none). Rendered pods and, in operator mode, every pod
        template of the member copy get the same."""
        group = self.pod_group
        spec["schedulerName"] = scheduler_name
        spec.pop("priorityClassName", None)
        if priority_class_name is not None:
            spec["priorityClassName"] = priority_class_name
        if group is not None and group_name is not None:
            if group.member_by == "label":
                labels[group.member_key] = group_name
            elif group.member_by == "annotation":
                annotations[group.member_key] = group_name
            else:
                _set_dotted(spec, group.member_key, group_name)
            if group.queue_label is not None and group.queue is not None:
                labels[group.queue_label] = group.queue

    @property
    def joins_by_pod_field(self) -> bool:
        """Whether a pod joins this scheduler's PodGroup through a pod spec field (Kubernetes' own gang
        scheduling: spec.schedulingGroup.podGroupName). The job operators' CRDs (JobSet v0.10.1, training-operator
        v1.8.1) do not know that field: a member copy's pod templates lose it, so such a gang cannot be left to an
        operator (the hub renders it; e2e/kube/test_member_operators.py pins the field's loss)."""
        return self.pod_group is not None and self.pod_group.member_by == "spec"

    def render_operator_gang(
        self,
        job: Mapping[str, Any],
        *,
        cluster_scheduler_name: str,
        epoch: int,
        hub_id: str,
        namespace: str,
        priority_class_name: str | None = None,
    ) -> OperatorGang:
        """What dispatch creates for `job` at `epoch` when the member's own operator runs its source kind
        (issue 28's operator mode): the PodGroup as `render` makes it (None for the default scheduler), and the
        gang's labels and annotations for the member copy of the source object and its pod templates
        (`membercopy.member_copy`). No pods, Service or ConfigMaps: the operator makes its own. RenderError as
        `render`."""
        model, where, _, labels, annotations = _gang_identity(
            job, cluster_scheduler_name=cluster_scheduler_name, epoch=epoch, hub_id=hub_id, namespace=namespace,
            priority_class_name=priority_class_name)
        group_name, podgroup = self._gang_podgroup(model, epoch=epoch, namespace=namespace, labels=labels,
                                                   annotations=annotations, where=where,
                                                   priority_class_name=priority_class_name)
        pod_labels: dict[str, str] = {}
        pod_annotations: dict[str, str] = {}
        pod_spec: JSON = {}
        self.join_gang(pod_labels, pod_annotations, pod_spec, scheduler_name=cluster_scheduler_name,
                       group_name=group_name, priority_class_name=priority_class_name)
        return OperatorGang(podgroup=podgroup, labels=labels, annotations=annotations,
                            roles=tuple(role.name for role in model.spec.roles),
                            pod_labels=pod_labels, pod_annotations=pod_annotations, pod_spec=pod_spec,
                            checkpoint=model.spec.checkpoint, restore_from=restore_from(job, epoch))

    def _gang_podgroup(
        self, model: TrainingJob, *, epoch: int, namespace: str, labels: Mapping[str, str],
        annotations: Mapping[str, str], where: str, priority_class_name: str | None,
    ) -> tuple[str | None, MemberObject | None]:
        """The gang's PodGroup at `epoch` and its name (both None for a scheduler without one): the first object
        `render` makes, and the one `render_operator_gang` makes."""
        if self.pod_group is None:
            return None, None
        name = podgroup_name(job_name=str(model.metadata.name), job_uid=str(model.metadata.uid), epoch=epoch)
        return name, self._render_podgroup(
            self.pod_group, name=name, namespace=namespace, roles=model.spec.roles, labels=labels,
            annotations=annotations, where=where, priority_class_name=priority_class_name)

    def _render_podgroup(
        self, group: PodGroupKind, *, name: str, namespace: str, roles: Sequence[Role],
        labels: Mapping[str, str], annotations: Mapping[str, str], where: str, priority_class_name: str | None,
    ) -> MemberObject:
        # the gang's minimum: every pod of a fixed-size gang, the fewest an elastic one runs with
        spec: JSON = {}
        _set_dotted(spec, group.min_member_field, sum(role.fewest for role in roles))
        if group.has_min_resources:
            total = Resources()
            for role in roles:
                total = total + _requests_of(role, where=where).times(role.fewest)
            min_resources = _gang_min_resources(total)
            if min_resources:
                spec["minResources"] = min_resources
        if group.queue is not None:
            spec["queue"] = group.queue
        if group.schedule_timeout_seconds is not None:
            spec["scheduleTimeoutSeconds"] = group.schedule_timeout_seconds
        if group.has_priority_class and priority_class_name is not None:
            spec["priorityClassName"] = priority_class_name
        group_labels = dict(labels)
        if group.queue_label is not None and group.queue is not None:
            group_labels[group.queue_label] = group.queue
        body: JSON = {
            "apiVersion": group.gvk.api_version,
            "kind": group.gvk.kind,
            "metadata": {"name": name, "namespace": namespace, "labels": group_labels,
                         "annotations": dict(annotations)},
            "spec": spec,
        }
        return MemberObject(gvk=group.gvk, namespace=namespace, name=name, body=body)

    def _render_pod(
        self, role: Role, *, index: int, name: str, namespace: str, pod_spec: JSON, role_pod: _RolePod,
        scheduler_name: str, group_name: str | None, labels: Mapping[str, str], annotations: Mapping[str, str],
        node: str | None, priority_class_name: str | None, gpu_pin: list[JSON], avoid: list[JSON],
    ) -> MemberObject:
        """The role's pod spec (the template's, or the short form's one container) with the hub's fields set on
        top: schedulerName, restartPolicy Never, priorityClassName, the PodGroup membership, the toleration of
        the GPU taint, the GPU-model pin and the excluded nodes (`avoid`: both ANDed into every required node
        selector term of the template) and the node hint (added to its preferred terms). Template labels and annotations are kept; validation refused
        the hub's keys in them."""
        pod_labels = {**role_pod.labels, **labels, LABEL_ROLE: role.name, LABEL_INDEX: str(index)}
        pod_annotations = {**role_pod.annotations, **annotations}
        spec = pod_spec
        spec["restartPolicy"] = "Never"
        self.join_gang(pod_labels, pod_annotations, spec, scheduler_name=scheduler_name, group_name=group_name,
                       priority_class_name=priority_class_name)
        tolerations = [dict(t) for t in spec.get("tolerations") or ()]
        tolerations += extended_resource_tolerations(role_pod.requests_container, present=tolerations)
        if tolerations:
            spec["tolerations"] = tolerations
        affinity: JSON = dict(spec.get("affinity") or {})
        node_affinity: JSON = dict(affinity.get("nodeAffinity") or {})
        required_too = [*(gpu_pin if gpu_pin and _requests_gpus(role_pod.requests_container) else ()), *avoid]
        if required_too:
            required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
            terms = [dict(term) for term in required.get("nodeSelectorTerms") or ()] or [{}]
            for term in terms:  # terms are ORed, a term's expressions ANDed: the pin holds in every term
                term["matchExpressions"] = [*(term.get("matchExpressions") or ()), *_copy_json(required_too)]
            node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
        if node is not None:
            pod_annotations[ANNOTATION_NODE_HINT] = node
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
                *(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()), {
                    "weight": 100,
                    "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]},
                }]
        if node_affinity:
            affinity["nodeAffinity"] = node_affinity
        if affinity:
            spec["affinity"] = affinity
        body: JSON = {
            "apiVersion": POD_GVK.api_version,
            "kind": POD_GVK.kind,
            "metadata": {"name": name, "namespace": namespace, "labels": pod_labels,
                         "annotations": pod_annotations},
            "spec": spec,
        }
        return MemberObject(gvk=POD_GVK, namespace=namespace, name=name, body=body)

    # ------------------------------------------------------------ status

    def read_status(
        self,
        podgroup: Mapping[str, Any] | None,
        pods: Sequence[Mapping[str, Any]],
        *,
        expected: Mapping[str, int] | None = None,
    ) -> GangStatus:
        """The gang's state from its member PodGroup (None if there is none or it is gone) and pods.

        `expected` (role -> replicas) comes from the job when the caller has
        it; otherwise the objects' `federator.dev/gang` annotation says it.
        """
        pod_list = [p for p in pods if isinstance(p, Mapping)]
        roles = dict(expected) if expected is not None else _expected_from(podgroup, pod_list)
        observed: dict[str, list[_PodView]] = {}
        for pod in pod_list:
            view = _PodView.of(pod)
            observed.setdefault(view.role, []).append(view)
        counts: dict[str, RoleCounts] = {}
        for role in list(roles) + [r for r in observed if r not in roles]:
            views = observed.get(role, [])
            phases = [v.phase for v in views]
            missing = max(0, roles.get(role, 0) - len(views))
            counts[role] = RoleCounts(
                pending=sum(1 for p in phases if p not in ("Running", "Succeeded", "Failed")) + missing,
                running=phases.count("Running"),
                succeeded=phases.count("Succeeded"),
                failed=phases.count("Failed"),
            )
        views = sorted((v for vs in observed.values() for v in vs), key=lambda v: (v.role, v.index, v.name))
        expected_total = sum(roles.values()) if roles else len(views)
        existing = len(views)
        bound = sum(1 for v in views if v.bound)
        group_phase = _podgroup_phase(podgroup)

        def status(phase: GangPhase, reason: str, message: str) -> GangStatus:
            return GangStatus(phase=phase, counts=counts, expected=expected_total, existing=existing, bound=bound,
                              reason=reason, message=message, podgroup_phase=group_phase)

        group = self.pod_group
        failed = [v for v in views if v.phase == "Failed"]
        if failed:
            first = failed[0]
            why = f": {first.failure}" if first.failure else ""
            return status(GangPhase.FAILED, "PodFailed",
                          f"{len(failed)} of {expected_total} pods failed; first: pod {first.name} "
                          f"({first.role} {first.index}){why}")
        if group is not None and group_phase in group.failed_phases:
            return status(GangPhase.FAILED, "PodGroupFailed",
                          f"{group.gvk.kind} {_name_of(podgroup)} is in phase {group_phase}")
        complete = existing >= expected_total > 0
        if complete and all(v.phase == "Succeeded" for v in views):
            return status(GangPhase.SUCCEEDED, "Succeeded", f"all {existing} pods succeeded")
        if complete and all(v.phase in ("Running", "Succeeded") for v in views):
            return status(GangPhase.RUNNING, "Running", f"all {existing} pods are running")
        admitted_by_group = group is not None and (group_phase in group.admitted_phases
                                                   or _group_says_admitted(group, podgroup))
        if complete and (bound == existing or admitted_by_group):
            return status(GangPhase.ADMITTED, "Scheduled",
                          f"{self.name} scheduled the gang: {bound} of {existing} pods bound, "
                          f"{sum(1 for v in views if v.phase == 'Running')} running")
        reason, message = self._why_waiting(podgroup, views, expected_total=expected_total, existing=existing,
                                            bound=bound)
        return status(GangPhase.PLACED, reason, message)

    def _why_waiting(
        self, podgroup: Mapping[str, Any] | None, views: Sequence[_PodView], *, expected_total: int, existing: int,
        bound: int,
    ) -> tuple[str, str]:
        group = self.pod_group
        if existing == 0 and podgroup is None:
            return ("NotCreated", "no member objects of this gang exist yet")
        if existing < expected_total:
            return ("PodsMissing", f"{expected_total - existing} of {expected_total} pods do not exist in the "
                                   "member cluster (dispatch incomplete, or pods were deleted there)")
        if group is not None and podgroup is None:
            return ("PodGroupMissing", f"the gang's {group.gvk.kind} ({group.gvk.key}) does not exist in the "
                                       "member cluster")
        condition = _unschedulable_condition(podgroup, group.unschedulable_condition if group is not None
                                             else _DEFAULT_UNSCHEDULABLE)
        if condition is not None:
            reason = _single_explanation_reason(condition) or condition.get("reason")
            message = condition.get("message")
            text = message if isinstance(message, str) and message else "unschedulable"
            # kube-scheduler's gang scheduling says only "pod group is unschedulable" on the group; the why
            # (e.g. "0/2 nodes are available: 2 Too many pods.") is the rejected pod's own message
            detail = next((v for v in views if not v.bound and v.unschedulable and text not in v.unschedulable
                           and not v.unschedulable.startswith(text)), None)
            more = f" (pod {detail.name}: {detail.unschedulable})" if detail is not None else ""
            return (reason if isinstance(reason, str) and _camel(reason) else "Unschedulable",
                    f"{group.gvk.kind if group else 'PodGroup'} {_name_of(podgroup)}: {text}{more}")
        note = "" if group is not None else f"; {NO_GANG_GUARANTEE}"
        # kube-scheduler's gang scheduling writes the pods' PodScheduled conditions before the group's: a pod that
        # fit but waited for its gang says only GANG_WAIT_MESSAGE, which is no reason. Quote a pod that says why
        # (the rejected one's FitError); with a gang object and none yet, the verdict is still on its way.
        waiting = [v for v in views if not v.bound and v.unschedulable]
        explained = [v for v in waiting if not v.unschedulable.startswith(GANG_WAIT_MESSAGE)]
        for view in explained or ([] if group is not None else waiting):
            return ("Unschedulable", f"pod {view.name}: {view.unschedulable} ({bound} of {existing} pods "
                                     f"bound){note}")
        phase = _podgroup_phase(podgroup)
        in_phase = f" ({group.gvk.kind} phase {phase})" if group is not None and phase else ""
        return ("WaitingForScheduler", f"{bound} of {existing} pods bound; waiting for {self.name}{in_phase}{note}")


# ---------------------------------------------------------------- render helpers


def _gang_identity(
    job: Mapping[str, Any], *, cluster_scheduler_name: str, epoch: int, hub_id: str, namespace: str,
    priority_class_name: str | None,
) -> tuple[TrainingJob, str, dict[str, int], dict[str, str], dict[str, str]]:
    """What every member object of `job`'s gang at `epoch` starts from, checked (RenderError naming the field):
    (the parsed job, "TrainingJob ns/name" for messages, its placed size per role, the gang's labels, the gang's
    annotations). Shared by `render` and `render_operator_gang`."""
    model = _parse_job(job)
    meta = model.metadata
    job_uid, job_name, job_namespace = meta.uid, meta.name, meta.namespace
    if not job_uid or not job_name or not job_namespace:
        raise RenderError("metadata.uid, metadata.name and metadata.namespace are required "
                          "(render a job as the hub stored it)")
    where = f"TrainingJob {job_namespace}/{job_name}"
    _check_label_value(job_uid, f"{where}: metadata.uid")
    _check_label_value(hub_id, "hub id")
    _check_epoch(epoch)
    problems = dns1123_label_errors(namespace) if isinstance(namespace, str) else ["must be a string"]
    if problems:
        raise RenderError(f"member namespace {str(namespace)[:80]!r}: {problems[0]}")
    if not isinstance(cluster_scheduler_name, str) or not cluster_scheduler_name:
        raise RenderError("cluster_scheduler_name must be a non-empty string")
    problems = dns1123_subdomain_errors(cluster_scheduler_name)
    if problems:
        raise RenderError(f"schedulerName {cluster_scheduler_name[:80]!r}: {problems[0]}")
    roles = model.spec.roles
    counts = placed_replicas(job)
    total_pods = sum(counts[role.name] for role in roles)
    if total_pods > MAX_GANG_PODS:
        raise RenderError(f"{where}: spec.roles: {total_pods} pods exceeds the limit of {MAX_GANG_PODS} "
                          "per gang")
    if priority_class_name is not None:
        _check_class_name(priority_class_name, "priority_class_name")
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_HUB: hub_id,
        LABEL_JOB_UID: job_uid,
        LABEL_JOB_NAMESPACE: job_namespace,
        LABEL_JOB_NAME: job_name,
        LABEL_EPOCH: str(epoch),
        LABEL_ON_CLUSTER_LOSS: model.spec.failover.on_cluster_loss if model.spec.failover else "requeue",
    }
    annotations = {
        ANNOTATION_JOB: f"{job_namespace}/{job_name}",
        ANNOTATION_GANG: ",".join(f"{role.name}={counts[role.name]}" for role in roles),
    }
    return model, where, counts, labels, annotations


def _gang_objects(model: TrainingJob, objects: Sequence[MemberObject], *, counts: Mapping[str, int], namespace: str,
                  labels: Mapping[str, str], annotations: Mapping[str, str], where: str) -> list[MemberObject]:
    """The gang's headless Service (and, for an upstream kind, the Services its operator's DNS names need), the
    framework's ConfigMaps and the pods (copies of `objects`' pods with hostname, subdomain, the framework's
    environment and the kind's pod contract), in dispatch order."""
    meta = model.metadata
    assert meta.name and meta.uid
    service = service_name(job_name=meta.name, job_uid=meta.uid)
    if dns1035_label_errors(service):  # cannot happen; refuse rather than send it
        raise RenderError(f"{where}: rendered Service name {service!r} is not a DNS-1035 label")
    pods = [o for o in objects if o.gvk == POD_GVK]
    keys = [(p.labels[LABEL_ROLE], int(p.labels[LABEL_INDEX])) for p in pods]
    contracts = {key: contract_for(job_name=meta.name, namespace=namespace, role=key[0], index=key[1],
                                   job_annotations=meta.annotations or {}) for key in keys}
    dns = _operator_dns(contracts, hub_service=service)
    resolvable = bool(dns) and all(d.service or d.subdomain for d in dns.values())
    layout = GangLayout(
        framework=model.spec.framework or "none", settings=model.spec.framework_settings or FrameworkSettings(),
        job_name=meta.name, namespace=namespace, service=service,
        roles=tuple(GangRole(name=r.name, replicas=counts[r.name], fewest=r.fewest, most=r.most)
                    for r in model.spec.roles),
        pod_names={key: p.name for key, p in zip(keys, pods)},
        names={key: d.name for key, d in dns.items()} if resolvable else {},
        subdomain=next((d.subdomain for d in dns.values() if d.subdomain), "") if resolvable else "")
    selector = {LABEL_HUB: labels[LABEL_HUB], LABEL_JOB_UID: labels[LABEL_JOB_UID], LABEL_EPOCH: labels[LABEL_EPOCH]}
    ports = service_ports(layout)

    def headless(name: str, extra: Mapping[str, str]) -> MemberObject:
        return MemberObject(gvk=SERVICE_GVK, namespace=namespace, name=name, body=headless_service(
            name=name, namespace=namespace, labels={**labels, **extra}, annotations=annotations,
            selector={**selector, **extra}, ports=ports))

    out = [headless(service, {})]
    out += [headless(name, {}) for name in dict.fromkeys(d.subdomain for d in dns.values() if d.subdomain)]
    out += [headless(d.service, {LABEL_ROLE: key[0], LABEL_INDEX: str(key[1])}) for key, d in dns.items()
            if d.service]
    out += [MemberObject(gvk=CONFIG_MAP_GVK, namespace=namespace, name=body["metadata"]["name"], body=body)
            for body in framework_config_maps(layout, labels=labels, annotations=annotations)]
    for key, pod in zip(keys, pods):
        body = _copy_json(pod.body)
        own = dns.get(key)
        if own is not None:
            set_dns(body, hostname=own.hostname, subdomain=own.subdomain)
        else:
            set_dns(body, hostname=pod.name, subdomain=service)
        apply_framework(layout, body, role=key[0], index=key[1])
        contract = contracts[key]
        if contract is not None:
            put_contract(body, contract)
        out.append(MemberObject(gvk=POD_GVK, namespace=pod.namespace, name=pod.name, body=body))
    return out


def _operator_dns(contracts: Mapping[tuple[str, int], PodContract | None], *, hub_service: str
                  ) -> dict[tuple[str, int], PodDns]:
    """(role, index) -> the DNS identity the kind's operator gives that pod, for every pod, or {} (the hub's own
    identity for the whole gang) when a pod's contract gives none, or a name would not be valid (a hostname or
    subdomain that is no DNS-1123 label of at most 63 characters, a Service name that is no DNS-1035 label: the
    operator would refuse such a job) or would clash (two pods of one hostname and subdomain, a Service name used
    twice, or the gang's own Service's name)."""
    found = {key: c.dns for key, c in contracts.items() if c is not None and c.dns is not None}
    if not found or len(found) != len(contracts):
        return {}
    identities = [(d.hostname, d.subdomain) for d in found.values()]
    services = [d.service for d in found.values() if d.service]
    subdomains = set(d.subdomain for d in found.values() if d.subdomain)
    if len(set(identities)) != len(identities) or len(set(services)) != len(services) \
            or subdomains & set(services) or hub_service in subdomains | set(services):
        return {}
    for d in found.values():
        if dns1123_label_errors(d.hostname) or (d.subdomain and dns1035_label_errors(d.subdomain)) \
                or (d.service and dns1035_label_errors(d.service)):
            return {}
    return found


def _parse_job(job: Mapping[str, Any]) -> TrainingJob:
    if not isinstance(job, Mapping):
        raise RenderError(f"a TrainingJob must be a JSON object, not {type(job).__name__}")
    # Status is the controllers' business; only what is rendered is checked.
    subset = {k: job[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in job}
    try:
        return TrainingJob.model_validate(subset, context={"settings": _RENDER_SETTINGS})
    except ValidationError:
        errors = validate_trainingjob(subset, settings=_RENDER_SETTINGS) or [("", "invalid TrainingJob")]
        shown = "; ".join(f"{path}: {message}" if path else message for path, message in errors[:_MAX_ERRORS_SHOWN])
        more = f" (and {len(errors) - _MAX_ERRORS_SHOWN} more)" if len(errors) > _MAX_ERRORS_SHOWN else ""
        meta = Body(job)
        who = f" {meta.namespace[:63]}/{meta.name[:63]}" if meta.namespace and meta.name else ""
        raise RenderError(f"cannot render TrainingJob{who}: {shown}{more}") from None


def _node_hints(
    assignment: Iterable[PodAssignment], replicas: Mapping[str, int], *, where: str
) -> dict[tuple[str, int], str]:
    hints: dict[tuple[str, int], str] = {}
    for pod in assignment:
        if not isinstance(pod, PodAssignment):
            raise RenderError(f"{where}: assignment entries must be PodAssignment, not {type(pod).__name__}")
        if pod.role not in replicas or not 0 <= pod.index < replicas[pod.role]:
            raise RenderError(f"{where}: the assignment names pod {pod.role} {pod.index}, which the job does not "
                              "have (a decision for another job or an older spec)")
        if dns1123_subdomain_errors(pod.node) if isinstance(pod.node, str) else True:
            raise RenderError(f"{where}: the assignment's node {str(pod.node)[:80]!r} is not a valid node name")
        hints[(pod.role, pod.index)] = pod.node
    return hints


def _check_class_name(name: Any, what: str) -> None:
    problems = dns1123_subdomain_errors(name) if isinstance(name, str) else ["must be a string"]
    if problems:
        raise RenderError(f"{what} {str(name)[:80]!r} cannot be a PriorityClass name: {problems[0]}")


#: the node label kubelet sets to its hostname (k8s.io/api core/v1 LabelHostname): what `avoid_hostnames` names
HOSTNAME_LABEL = "kubernetes.io/hostname"


def _avoid_nodes(hostnames: Sequence[str]) -> list[JSON]:
    """The matchExpression (kubernetes.io/hostname NotIn values) that keeps pods off the excluded nodes."""
    if isinstance(hostnames, (str, bytes)) or not isinstance(hostnames, Sequence):
        raise RenderError("avoid_hostnames must be a list of node hostnames")
    values = sorted(set(hostnames))
    if not values:
        return []
    if len(values) > MAX_EXCLUDED_NODES:
        raise RenderError(f"avoid_hostnames: at most {MAX_EXCLUDED_NODES} nodes, got {len(values)}")
    for value in values:
        problems = (label_value_errors(value) or ([] if value else ["must not be empty"])) \
            if isinstance(value, str) else ["must be a string"]
        if problems:
            raise RenderError(f"avoid_hostnames: {str(value)[:80]!r} is not a label value: {problems[0]}")
    return [{"key": HOSTNAME_LABEL, "operator": "NotIn", "values": values}]


def _gpu_pin(labels: Mapping[str, Sequence[str]] | None) -> list[JSON]:
    """The matchExpressions (label In values) that keep GPU pods on the chosen GPU model's nodes."""
    if not labels:
        return []
    if not isinstance(labels, Mapping):
        raise RenderError("gpu_node_labels must map a node label to its allowed values")
    expressions: list[JSON] = []
    for key in sorted(labels):
        values = labels[key]
        problems = label_key_errors(key) if isinstance(key, str) else ["must be a string"]
        if problems:
            raise RenderError(f"gpu_node_labels: {str(key)[:80]!r} is not a label key: {problems[0]}")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values \
                or len(values) > _MAX_PIN_VALUES:
            raise RenderError(f"gpu_node_labels[{key}] must be a list of 1 to {_MAX_PIN_VALUES} label values")
        for value in values:
            problems = label_value_errors(value) if isinstance(value, str) and value else ["must be a non-empty string"]
            if problems:
                raise RenderError(f"gpu_node_labels[{key}]: {str(value)[:80]!r} is not a label value: {problems[0]}")
        expressions.append({"key": key, "operator": "In", "values": sorted(set(values))})
    return expressions


def gpu_node_labels(job: Mapping[str, Any], *, nodes: Mapping[str, NodeState], assignment: Iterable[PodAssignment],
                    label: str) -> dict[str, list[str]]:
    """The `gpu_node_labels` that keep `job`'s GPU pods on the GPU model placement chose in a cluster whose
    nodes are `nodes` (its snapshot): {label: every value of `label` (the GPU product) on a node of that
    model}. The model is that of the nodes `assignment` gives the GPU pods; with no assignment (a re-dispatch
    after a hub restart) the job's spec.placement.gpuModels. {} when nothing is known (no GPU pods, no
    model): then nothing is pinned."""
    model = _parse_job(job)
    gpu_roles = {role.name for role in model.spec.roles if _requests_of(role, where="gpu_node_labels").gpu}
    if not gpu_roles:
        return {}
    assigned = list(assignment)
    models = {nodes[pod.node].gpu_model for pod in assigned if pod.role in gpu_roles and pod.node in nodes
              and nodes[pod.node].allocatable.gpu} - {""}
    if not models and not assigned:
        placement = model.spec.placement
        models = set(placement.gpu_models or ()) if placement is not None else set()
    values = {node.labels.get(label) or "" for node in nodes.values() if node.gpu_model in models} - {""}
    return {label: sorted(values)} if values else {}


def _requests_gpus(container: Mapping[str, Any]) -> bool:
    requests = _mapping(_mapping(container.get("resources")).get("requests"))
    return requests.get(EXTENDED_RESOURCES[0]) not in (None, "", "0", 0)


def priority_class_name_for(value: int) -> str:
    """`federator-priority-<value>` (`-minus-<n>` below zero): the member class of an integer priority."""
    return f"{PRIORITY_CLASS_PREFIX}{value}" if value >= 0 else f"{PRIORITY_CLASS_PREFIX}minus-{-value}"


def member_priority_class(job: Mapping[str, Any]) -> MemberObject | None:
    """The PriorityClass a member needs before `job`'s pods can name it (see the module docstring), or None
    when the job has neither a class nor a non-zero priority. Raises RenderError for a job that cannot be
    rendered."""
    model = _parse_job(job)
    raw_spec = job.get("spec")
    name = raw_spec.get("priorityClassName") if isinstance(raw_spec, Mapping) else None
    priority = model.spec.priority
    if not name and priority == 0:
        return None
    value = min(priority, MAX_MEMBER_PRIORITY)
    if name:
        _check_class_name(name, "spec.priorityClassName")
    else:
        name = priority_class_name_for(value)
    body: JSON = {
        "apiVersion": PRIORITY_CLASS_GVK.api_version,
        "kind": PRIORITY_CLASS_GVK.kind,
        "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
        "value": value,
        "preemptionPolicy": "Never",
        "description": f"TrainingJobs of priority {value} delegated by federator. Never preempts: the hub "
                       "preempts whole gangs, a member scheduler must not evict single pods of one.",
    }
    return MemberObject(gvk=PRIORITY_CLASS_GVK, namespace="", name=name, body=body)


def is_system_priority_class(name: str) -> bool:
    """kube's own classes (system-node-critical, system-cluster-critical): used as they are, never created."""
    return name.startswith(_SYSTEM_CLASS_PREFIX)


#: Extended resources whose nodes are conventionally tainted with the resource name (NoSchedule): GPU
#: nodes (`nvidia.com/gpu=present:NoSchedule`). RDMA HCAs sit on CPU nodes too and are not tainted.
EXTENDED_RESOURCES = ("nvidia.com/gpu",)


def _tolerated(present: Sequence[Mapping[str, Any]], key: str) -> bool:
    for t in present:
        if t.get("effect") not in (None, "", "NoSchedule"):
            continue
        if (t.get("key") in (None, "") and t.get("operator") == "Exists") or \
                (t.get("key") == key and t.get("operator") == "Exists"):
            return True
    return False


def extended_resource_tolerations(container: Mapping[str, Any], *, present: Sequence[Mapping[str, Any]] = ()
                                  ) -> list[JSON]:
    """What kube-apiserver's ExtendedResourceToleration admission plugin adds to a pod, for the resources
    of EXTENDED_RESOURCES the container requests (GPUs): `{key: <resource>, operator: Exists, effect:
    NoSchedule}`, unless `present` already tolerates that. GPU nodes are tainted with the resource name so
    that only pods asking for GPUs land there; the hub renders the toleration itself, so a gang lands the
    same on members with and without the plugin (placement assumes the same: controllers/jobs.py)."""
    resources = _mapping(container.get("resources"))
    requests = _mapping(resources.get("requests")) or _mapping(resources.get("limits"))
    added: list[JSON] = []
    for name in EXTENDED_RESOURCES:
        quantity = requests.get(name)
        if quantity in (None, "", "0", 0) or _tolerated([*present, *added], name):
            continue
        added.append({"key": name, "operator": "Exists", "effect": "NoSchedule"})
    return added


def _requests_of(role: Role, *, where: str) -> Resources:
    """What one pod of the role requests, as placement counts it (`placement.resources.template_requests`)."""
    try:
        return template_requests(role.template.model_dump(by_alias=True, exclude_none=True))
    except (QuantityError, ValueError) as exc:
        raise RenderError(f"{where}: role {role.name}: resources: {exc}") from None


@dataclass(frozen=True, slots=True)
class _RolePod:
    """A role's pod as its template gives it, before the hub's fields: rendered once per role, copied per pod."""

    spec: JSON
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    #: a container-shaped {"resources": {"requests": ...}} with the pod's effective requests (GPU toleration, pin)
    requests_container: JSON


def _pod_of(role: Role, *, where: str) -> _RolePod:
    """The role's pod spec and metadata from its template. The short form: one container named after the role
    (limits = requests: extended resources (GPUs, HCAs) require it, and it makes the pods Guaranteed, so a
    member under memory pressure does not evict a gang member first), its nodeSelector and tolerations. The
    full form: the template's spec as given, except that an extended resource (or hugepages) requested
    without a limit gets limit = request, as kube requires."""
    template = role.template
    requests = _requests_of(role, where=where)  # refuse what no member could parse
    if not template.full:
        container: JSON = {"name": role.name, "image": template.image}
        if template.command:
            container["command"] = list(template.command)
        if template.args:
            container["args"] = list(template.args)
        if template.resources is not None:
            amounts = {name: str(value) for name, value in
                       template.resources.model_dump(by_alias=True, exclude_none=True).items()}
            if amounts:
                container["resources"] = {"requests": amounts, "limits": dict(amounts)}
        if template.env:
            container["env"] = [{"name": e.name, "value": e.value} for e in template.env]
        spec: JSON = {"containers": [container]}
        if template.node_selector:
            spec["nodeSelector"] = dict(template.node_selector)
        if template.tolerations:
            spec["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in template.tolerations]
        return _RolePod(spec=spec, labels={}, annotations={},
                        requests_container={"resources": {"requests": requests.to_kube()}})
    spec = _copy_json(template.spec or {})
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or ():
            _limit_extended_resources(container)
            container_resources = container.get("resources") or {}
            _quantity_strings(container_resources.get("requests"))
            _quantity_strings(container_resources.get("limits"))
    _quantity_strings((spec.get("resources") or {}).get("requests"))
    _quantity_strings((spec.get("resources") or {}).get("limits"))
    _quantity_strings(spec.get("overhead"))
    metadata = template.metadata
    return _RolePod(spec=spec, labels=dict(metadata.labels or {}) if metadata else {},
                    annotations=dict(metadata.annotations or {}) if metadata else {},
                    requests_container={"resources": {"requests": requests.to_kube()}})


def _quantity_strings(amounts: Any) -> None:
    """Quantities as strings, as kube serves them (a template may give 4 for "4"; clients type them str)."""
    if isinstance(amounts, dict):
        for name, value in amounts.items():
            if isinstance(value, int) and not isinstance(value, bool):
                amounts[name] = str(value)
            elif isinstance(value, float):  # finite: validation parsed it
                amounts[name] = format(value, "f").rstrip("0").rstrip(".") or "0"


def _limit_extended_resources(container: JSON) -> None:
    """kube requires limits == requests for resources that cannot be overcommitted (extended resources,
    hugepages): a request without a limit gets the limit set to it."""
    resources = container.get("resources")
    if not isinstance(resources, dict) or not isinstance(resources.get("requests"), dict):
        return
    limits = resources.setdefault("limits", {})
    for name, value in resources["requests"].items():
        if name not in limits and ("/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")
                                   or name.startswith("hugepages-")):
            limits[name] = value


def _gang_env(*, job_namespace: str, job_name: str, role: str, index: int, role_size: int, gang_size: int,
              epoch: int, user_env: Sequence[JSON]) -> list[JSON]:
    """What a training process needs to find its place in the gang, then the user's env (whose names win).
    The sizes are the gang's when the pod was rendered (an elastic gang's may change later)."""
    ours = (
        ("FEDERATOR_JOB_NAMESPACE", job_namespace),
        ("FEDERATOR_JOB_NAME", job_name),
        ("FEDERATOR_ROLE", role),
        ("FEDERATOR_ROLE_INDEX", str(index)),
        ("FEDERATOR_ROLE_REPLICAS", str(role_size)),
        ("FEDERATOR_GANG_SIZE", str(gang_size)),
        ("FEDERATOR_EPOCH", str(epoch)),
    )
    user_names = {e["name"] for e in user_env}
    return [{"name": n, "value": v} for n, v in ours if n not in user_names] + [dict(e) for e in user_env]


def checkpoint_pod_spec(pod_spec: JSON, *, checkpoint: CheckpointSpec | None, restore: str | None) -> None:
    """Put spec.checkpoint and the restore point into one pod spec (in place): env FEDERATOR_RESTORE_FROM (a
    later copy: `checkpoint.restore_from`), FEDERATOR_CHECKPOINT_DIR or FEDERATOR_CHECKPOINT_URI into every
    container and init container (the user's env of the same name wins), and the claim as volume
    federator-checkpoint mounted at mountPath in every container."""
    ours: list[tuple[str, str]] = []
    if restore is not None:
        ours.append((ENV_RESTORE_FROM, restore))
    if checkpoint is not None and checkpoint.mount_path is not None:
        ours.append((ENV_CHECKPOINT_DIR, checkpoint.mount_path))
    if checkpoint is not None and checkpoint.uri is not None:
        ours.append((ENV_CHECKPOINT_URI, checkpoint.uri))
    mount = checkpoint is not None and checkpoint.volume is not None and checkpoint.mount_path is not None
    if not ours and not mount:
        return  # nothing of the hub's: the pod spec stays as the template wrote it
    for field in ("initContainers", "containers"):
        for container in pod_spec.get(field) or ():
            env = list(container.get("env") or ())
            present = {e.get("name") for e in env}
            container["env"] = [*({"name": n, "value": v} for n, v in ours if n not in present), *env]
            if mount and checkpoint is not None and checkpoint.mount_path is not None:
                container["volumeMounts"] = [*(container.get("volumeMounts") or ()),
                                             {"name": CHECKPOINT_VOLUME, "mountPath": checkpoint.mount_path}]
    if mount and checkpoint is not None and checkpoint.volume is not None:
        pod_spec["volumes"] = [*(pod_spec.get("volumes") or ()), {
            "name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": checkpoint.volume.claim_name}}]


# ---------------------------------------------------------------- status helpers


@dataclass(frozen=True, slots=True)
class _PodView:
    name: str
    role: str
    index: int
    phase: str
    bound: bool
    unschedulable: str
    failure: str

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> _PodView:
        body = Body(pod)
        labels, spec, status = body.labels, body.spec, body.status
        raw_index = labels.get(LABEL_INDEX)
        index = int(raw_index) if isinstance(raw_index, str) and raw_index.isdigit() and len(raw_index) < 10 else -1
        unschedulable = ""
        for condition in status.get("conditions") or ():
            if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled" \
                    and condition.get("status") == "False":
                unschedulable = str(condition.get("message") or condition.get("reason") or "unschedulable")
        return cls(
            name=body.name,
            role=str(labels.get(LABEL_ROLE) or ""),
            index=index,
            phase=body.phase or "Pending",
            bound=bool(spec.get("nodeName")),
            unschedulable=unschedulable,
            failure=_failure_of(status),
        )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _failure_of(status: Mapping[str, Any]) -> str:
    parts = [str(status[k]) for k in ("reason", "message") if isinstance(status.get(k), str) and status[k]]
    for cs in status.get("containerStatuses") or ():
        terminated = _mapping(_mapping(_mapping(cs).get("state")).get("terminated"))
        if terminated:
            code = terminated.get("exitCode")
            reason = terminated.get("reason")
            parts.append(f"container {_mapping(cs).get('name')} terminated"
                         + (f" ({reason})" if reason else "") + (f" with exit code {code}" if code is not None else ""))
            break
    return "; ".join(parts)


def _podgroup_phase(podgroup: Mapping[str, Any] | None) -> str | None:
    if podgroup is None:
        return None
    phase = _mapping(podgroup.get("status")).get("phase")
    return phase if isinstance(phase, str) and phase else None


def _name_of(obj: Mapping[str, Any] | None) -> str:
    return Body(obj).name


_DEFAULT_UNSCHEDULABLE = ("conditions", "Unschedulable", "True")


def _unschedulable_condition(podgroup: Mapping[str, Any] | None, where: tuple[str, str, str]
                             ) -> Mapping[str, Any] | None:
    """The last entry of status.<field> with this type and status (KAI appends the newest last)."""
    if podgroup is None:
        return None
    field, type_, status = where
    entries = _mapping(podgroup.get("status")).get(field)
    found: Mapping[str, Any] | None = None
    for condition in entries if isinstance(entries, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == type_ and condition.get("status") == status:
            found = condition
    return found


def _single_explanation_reason(condition: Mapping[str, Any]) -> str | None:
    """KAI's one specific reason (reasons[].reason, e.g. QueueDoesNotExist) when it gives exactly one;
    its condition reason is always the generic "Unschedulable"."""
    reasons = condition.get("reasons")
    if not isinstance(reasons, list) or len(reasons) != 1:
        return None
    reason = _mapping(reasons[0]).get("reason")
    return reason if isinstance(reason, str) and _camel(reason) else None


def _group_says_admitted(group: PodGroupKind, podgroup: Mapping[str, Any] | None) -> bool:
    """The PodGroup's own word that the whole gang was scheduled: a condition or an annotation."""
    if podgroup is None:
        return False
    if group.admitted_condition is not None:
        type_, status = group.admitted_condition
        conditions = _mapping(podgroup.get("status")).get("conditions")
        for condition in conditions if isinstance(conditions, list) else ():
            if isinstance(condition, Mapping) and condition.get("type") == type_ \
                    and condition.get("status") == status:
                return True
    if group.admitted_annotation is not None:
        value = Body(podgroup).annotations.get(group.admitted_annotation)
        if isinstance(value, str) and value:
            return True
    return False


def _set_dotted(target: JSON, path: str, value: Any) -> None:
    """target[a][b][c] = value for path "a.b.c", creating the objects on the way."""
    *heads, last = path.split(".")
    for key in heads:
        target = target.setdefault(key, {})
    target[last] = value


def _camel(reason: str) -> bool:
    return reason[:1].isalpha() and all(c.isalnum() or c in "_,:" for c in reason) and len(reason) <= 128


def _expected_from(podgroup: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Role -> replicas from the first object with a well-formed gang annotation; {} if none has one."""
    for obj in ([podgroup] if podgroup is not None else []) + list(pods):
        parsed = _parse_gang(Body(obj).annotations.get(ANNOTATION_GANG))
        if parsed is not None:
            return parsed
    return {}


def _parse_gang(text: Any) -> dict[str, int] | None:
    if not isinstance(text, str) or not text or len(text) > 64 * 1024:
        return None
    out: dict[str, int] = {}
    for part in text.split(","):
        role, sep, count = part.partition("=")
        if not sep or not role or role in out or not count.isdigit() or len(count) > 6:
            return None
        out[role] = int(count)
    return out
