"""This hub's member objects (Pods and PodGroups it created, and its member copies of upstream job objects in
operator mode), per cluster, indexed by job uid and epoch.

There is one member watch per cluster and kind in the hub: member sync's
reflectors (clusters/sync.py). `MemberObjects` follows them
(`MemberClusters.follow`): each batch they apply goes into the cluster's
`ClusterObjects` too, which keeps only the objects *this hub* labelled
(`federator.dev/hub=<hub id>`), slimmed (metadata, nodeName, status), indexed
by job uid and epoch. A sync that resumed its watches from a checkpoint sends
only what changed since; its index is complete (`ready`) once one list of this
hub's objects per kind (`refresh`, from status sync's loop) has filled in the
rest. Status sync reads it (the member's state of each gang; it is the only
reader of member pods for the job lifecycle), and so do the GC (cleanup.py),
the stuck-gang detector (stuck.py) and dispatch (a moved gang's previous copy);
subscribers hear which jobs each batch touched. A pod that leaves the index
carrying a checkpoint report (annotation federator.dev/checkpoint, as its
deletion showed it last) is kept aside (`departed`, the newest
MAX_DEPARTED_REPORTS per cluster): an evicted copy that saves, reports and
exits at once leaves its last report nowhere else.

The hub builds one per term (hub/app.py `build_pipeline`), before member sync
starts, so that it sees every sync's first batch. It only reads members: it
never creates or deletes a member object, and never logs an object body or a
credential.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from federator.apis.checkpoint import ANNOTATION_CHECKPOINT
from federator.apis.jobkinds import JOB_KINDS, JobKind
from federator.apis.views import Body
from federator.clusters.client import (
    JOB_KIND_KEYS,
    JOB_KIND_RESOURCES,
    NODES,
    PODS,
    MemberClient,
    MemberClientError,
    ResourceKind,
)
from federator.clusters.snapshot_builder import object_key
from federator.clusters.sync import ClusterSync
from federator.controllers.context import HubContext
from federator.controllers.jobs import hub_id
from federator.controllers.membercluster import MemberClusters
from federator.delegation import hub_selector
from federator.delegation.adapter import LABEL_EPOCH, LABEL_HUB, LABEL_JOB_NAME, LABEL_JOB_NAMESPACE, LABEL_JOB_UID
from federator.delegation.membercopy import resized_to
from federator.obs import RepeatedFailureLog, get_logger
from federator.runtime.tasks import stop_tasks

__all__ = ["ClusterObjects", "MemberObject", "MemberObjects", "in_delete_order", "member_object"]

_log = get_logger("controllers.memberobjects")


@dataclass(frozen=True, slots=True)
class MemberObject:
    """One object this hub made in a member cluster, as last seen there."""

    cluster: str
    resource: ResourceKind
    namespace: str
    name: str
    uid: str
    job_uid: str
    job_namespace: str
    job_name: str
    #: None when the epoch label is missing or malformed
    epoch: int | None
    deleting: bool


def _slim(obj: Mapping[str, Any], resource: str = "") -> dict[str, Any]:
    """What status sync, GC and stuck detection read of a member object (not its spec or env)."""
    body = Body(obj)
    meta = body.metadata
    kept_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "labels", "annotations",
                                      "deletionTimestamp") if k in meta}
    slim: dict[str, Any] = {"metadata": kept_meta}
    for key in ("apiVersion", "kind"):
        if key in obj:
            slim[key] = obj[key]
    spec = body.spec
    if spec.get("nodeName"):
        slim["spec"] = {"nodeName": spec["nodeName"]}
    elif "minMember" in spec:
        slim["spec"] = {"minMember": spec["minMember"]}
    kind = _RESIZABLE.get(resource)
    count = resized_to(kind, obj) if kind is not None else None
    if kind is not None and kind.in_place_resize is not None and count is not None:
        # a member copy's size (operator mode), what dispatch's `resize_member_copy` compares with the gang's
        node = slim
        path = kind.in_place_resize.replicas_path
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = count
    status = obj.get("status")
    if isinstance(status, Mapping):
        slim["status"] = status
    return slim


#: resource key -> the upstream job kind, for the kinds whose operator resizes a job in place
_RESIZABLE: dict[str, JobKind] = {JOB_KIND_RESOURCES[kind.source_key].key: kind for kind in JOB_KINDS
                                  if kind.in_place_resize is not None}


def _epoch_of(labels: Mapping[str, Any]) -> int | None:
    raw = labels.get(LABEL_EPOCH)
    return int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) <= 10 else None


#: pods kept per cluster after they left the index with a checkpoint report (the oldest go first)
MAX_DEPARTED_REPORTS = 4096


class ClusterObjects:
    """This hub's Pods and PodGroups in one member cluster, indexed by job uid (a ReflectorSink).

    With `hub_id`, only objects labelled federator.dev/hub=<hub_id> are kept (the member watch it is fed
    from sees every pod of the cluster); an object that loses the label leaves the index."""

    def __init__(self, cluster: str, resources: Sequence[ResourceKind],
                 on_change: Callable[[str, set[str]], None], *, hub_id: str | None = None,
                 copies: Sequence[ResourceKind] = ()) -> None:
        self.cluster = cluster
        self.hub_id = hub_id
        self.resources = tuple(resources)
        #: the upstream job kinds whose member copies (operator mode) the index holds too; watched only where
        #: the member serves them, so they do not count for `ready`
        self.copy_resources = tuple(copies)
        self._by_key_resource = {r.key: r for r in (*self.resources, *self.copy_resources)}
        self.objects: dict[str, dict[str, dict[str, Any]]] = {key: {} for key in self._by_key_resource}
        self._by_job: dict[str, set[tuple[str, str]]] = {}
        self._job_of: dict[tuple[str, str], str] = {}
        self.synced: set[str] = set()
        self.on_change = on_change
        #: bumped on every applied batch (tests and waiters poll it)
        self.generation = 0
        #: kinds whose batches do not make the index complete until a seeding list has (the member sync
        #: resumed its watch from a checkpoint: objects unchanged since then are never sent again)
        self.awaiting_seed: set[str] = set()
        #: kind -> keys the watch touched while a seeding list of that kind is in flight
        self.seeding: dict[str, set[str]] = {}
        #: pod uid -> (job uid, epoch, the pod as it left) for pods that left with a checkpoint report
        self._departed: dict[str, tuple[str, int | None, dict[str, Any]]] = {}

    @property
    def podgroup_resource(self) -> ResourceKind | None:
        return next((r for r in self.resources if r.key != PODS.key and r.key not in JOB_KIND_KEYS), None)

    @property
    def ready(self) -> bool:
        """Every kind has been listed at least once: absence in the index means absence in the member."""
        return all(r.key in self.synced for r in self.resources)

    # ReflectorSink

    def known(self, resource: str) -> Mapping[str, str]:
        return {key: Body(obj).resource_version
                for key, obj in self.objects.get(resource, {}).items()}

    def apply(self, resource: str, events: Sequence[tuple[str, Mapping[str, Any]]], *, resource_version: str,
              received_at: float) -> None:
        store = self.objects.get(resource)
        if store is None:
            return
        touched: set[str] = set()
        seeding = self.seeding.get(resource)
        for kind, obj in events:
            key = object_key(obj)
            if not key:
                continue
            if seeding is not None:
                seeding.add(key)
            ref = (resource, key)
            old_job = self._job_of.pop(ref, None)
            if old_job is not None:
                touched.add(old_job)
                members = self._by_job.get(old_job)
                if members is not None:
                    members.discard(ref)
                    if not members:
                        del self._by_job[old_job]
            if kind == "DELETED" or not self._mine(obj):
                gone = store.pop(key, None)
                if resource == PODS.key:
                    self._depart(obj if kind == "DELETED" and self._mine(obj) else gone)
                continue
            slim = _slim(obj, resource)
            store[key] = slim
            job_uid = Body(slim).labels.get(LABEL_JOB_UID)
            if isinstance(job_uid, str) and job_uid:
                self._job_of[ref] = job_uid
                self._by_job.setdefault(job_uid, set()).add(ref)
                touched.add(job_uid)
        if resource not in self.awaiting_seed:
            self.synced.add(resource)
        self.generation += 1
        if touched:
            self.on_change(self.cluster, touched)

    def _depart(self, pod: Mapping[str, Any] | None) -> None:
        """Keep a pod that left the index if it carries a checkpoint report (see the module docstring)."""
        if pod is None:
            return
        body = Body(pod)
        job_uid = body.labels.get(LABEL_JOB_UID)
        if not body.uid or not isinstance(job_uid, str) or not job_uid \
                or ANNOTATION_CHECKPOINT not in body.annotations:
            return
        self._departed.pop(body.uid, None)
        self._departed[body.uid] = (job_uid, _epoch_of(body.labels), _slim(pod, PODS.key))
        while len(self._departed) > MAX_DEPARTED_REPORTS:
            del self._departed[next(iter(self._departed))]

    def departed(self, job_uid: str, epoch: int) -> list[dict[str, Any]]:
        """The job's pods at `epoch` that left this cluster's index with a checkpoint report, as they left."""
        return [pod for uid, at, pod in self._departed.values() if uid == job_uid and at == epoch]

    def _mine(self, obj: Mapping[str, Any]) -> bool:
        if self.hub_id is None:
            return True
        return Body(obj).labels.get(LABEL_HUB) == self.hub_id

    def seeded(self, resource: str, items: Sequence[Mapping[str, Any]]) -> None:
        """A seeding list of `resource` answered with `items` (this hub's objects as the member listed them,
        started after `begin_seed`): each object the watch did not touch meanwhile goes in (what the watch
        touched it holds as new or newer), and the kind counts as listed."""
        touched = self.seeding.pop(resource, set())
        self.awaiting_seed.discard(resource)
        self.apply(resource, [("ADDED", item) for item in items if object_key(item) not in touched],
                   resource_version="", received_at=0.0)

    def begin_seed(self, resource: str) -> None:
        self.seeding[resource] = set()

    def seed_failed(self, resource: str) -> None:
        self.seeding.pop(resource, None)

    # reads

    def gang(self, job_uid: str, epoch: int) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """(PodGroup, pods) of the job's gang at `epoch` in this cluster."""
        podgroup: dict[str, Any] | None = None
        pods: list[dict[str, Any]] = []
        for resource, key in sorted(self._by_job.get(job_uid, ())):
            obj = self.objects[resource].get(key)
            if obj is None or _epoch_of(Body(obj).labels) != epoch:
                continue
            if resource == PODS.key:
                pods.append(obj)
            elif resource not in JOB_KIND_KEYS:
                podgroup = obj
        return podgroup, pods

    def member_copy(self, job_uid: str, source_key: str, epoch: int | None = None
                    ) -> tuple[ResourceKind, dict[str, Any]] | None:
        """(its kind, the object) of the job's member copy (operator mode) of kind `source_key` ("JobSet.jobset.x-k8s.io")
        at `epoch` (any epoch: the newest), as last seen in this cluster; None when there is none. (Objects the
        copy's operator made that carry its labels, e.g. a JobSet's child Jobs, are of another kind.)"""
        wanted = JOB_KIND_RESOURCES.get(source_key)
        best: tuple[ResourceKind, dict[str, Any]] | None = None
        for resource, key in sorted(self._by_job.get(job_uid, ())):
            obj = self.objects[resource].get(key)
            if obj is None or wanted is None or resource != wanted.key:
                continue
            found = _epoch_of(Body(obj).labels)
            if epoch is not None and found != epoch:
                continue
            if best is None or (found or 0) > (_epoch_of(Body(best[1]).labels) or 0):
                best = (self._by_key_resource[resource], obj)
        return best

    def objects_of(self, job_uid: str | None = None) -> list[MemberObject]:
        """Every indexed object (of one job, if given), pods first (delete order)."""
        refs: Iterable[tuple[str, str]]
        if job_uid is None:
            refs = [(r, k) for r, objs in self.objects.items() for k in objs]
        else:
            refs = self._by_job.get(job_uid, ())
        out: list[MemberObject] = []
        for resource, key in refs:
            obj = self.objects.get(resource, {}).get(key)
            if obj is not None:
                out.append(member_object(self.cluster, self._by_key_resource[resource], obj))
        return in_delete_order(out)

    def job_uids(self) -> set[str]:
        return set(self._by_job)


def member_object(cluster: str, resource: ResourceKind, obj: Mapping[str, Any]) -> MemberObject:
    """What the hub needs of one of its member objects (an indexed one or a listed one)."""
    body = Body(obj)
    labels = body.labels
    return MemberObject(
        cluster=cluster, resource=resource, namespace=body.namespace, name=body.name, uid=body.uid,
        job_uid=str(labels.get(LABEL_JOB_UID) or ""), job_namespace=str(labels.get(LABEL_JOB_NAMESPACE) or ""),
        job_name=str(labels.get(LABEL_JOB_NAME) or ""), epoch=_epoch_of(labels),
        deleting=body.deleting,
    )


def in_delete_order(objects: list[MemberObject]) -> list[MemberObject]:
    """Member copies first (their operator would make the pods again), then pods (a PodGroup outliving its pods
    is harmless; the reverse leaves pods ungrouped), then the rest."""
    objects.sort(key=lambda o: (0 if o.resource.key in JOB_KIND_KEYS else 1 if o.resource.key == PODS.key else 2,
                                o.namespace, o.name))
    return objects


class MemberObjects:
    """Every member cluster's ClusterObjects, fed by member sync's own watches (`MemberClusters.follow`):
    one member watch per cluster and kind in the process, whose batches both the cluster's snapshot and
    this index take in."""

    def __init__(self, hub: HubContext, *, members: MemberClusters) -> None:
        self.hub = hub
        self.members = members
        self.hub_id = hub_id(hub)
        self.selector = hub_selector(self.hub_id)
        self.clusters: dict[str, ClusterObjects] = {}
        #: cluster -> the member sync its index follows (a restarted sync gets a fresh index)
        self._sources: dict[str, ClusterSync] = {}
        self._listeners: list[Callable[[str, set[str]], None]] = []
        #: (cluster, resource key) -> the seeding list in flight
        self._seeds: dict[tuple[str, str], asyncio.Task[None]] = {}
        #: (cluster, resource key) -> its seeding list's failures (the first logged in full, then a summary)
        self._seed_failures: dict[tuple[str, str], RepeatedFailureLog] = {}
        members.follow(self)

    def subscribe(self, listener: Callable[[str, set[str]], None]) -> None:
        """`listener(cluster, job_uids)` after every batch that touched those jobs' objects."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[str, set[str]], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _changed(self, cluster: str, job_uids: set[str]) -> None:
        for listener in self._listeners:
            listener(cluster, job_uids)

    def get(self, cluster: str) -> ClusterObjects | None:
        return self.clusters.get(cluster)

    def reachable(self, cluster: str) -> bool:
        """Member sync says the cluster is Ready and the watches that feed this index are up (a lost one
        counts at once, not after the health's grace)."""
        sync = self.members.syncs.get(cluster)
        objects = self.clusters.get(cluster)
        if sync is None or objects is None or self._sources.get(cluster) is not sync or not sync.health.ready:
            return False
        return not any(resource.key in sync.watches_lost for resource in objects.resources)

    # ------------------------------------------------------------ MemberWatchListener (member sync calls these)

    def sync_started(self, sync: ClusterSync) -> None:
        """A (new or restarted) member sync: a fresh index, fed from its first batch on."""
        self._drop(sync.name)
        resources = tuple(r for r in sync.resources if r.key != NODES.key)
        self.clusters[sync.name] = ClusterObjects(sync.name, resources, self._changed, hub_id=self.hub_id,
                                                  copies=tuple(JOB_KIND_RESOURCES.values()))
        self._sources[sync.name] = sync

    def sync_stopped(self, name: str) -> None:
        self._drop(name)

    def applied(self, cluster: str, resource: str, events: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        objects = self.clusters.get(cluster)
        if objects is None:
            return
        sync = self._sources.get(cluster)
        if sync is not None and sync.resumed and resource in objects.objects and resource not in objects.synced \
                and resource not in objects.seeding:
            # The sync resumed from a checkpoint: its watch sends only what changed since. The index is
            # complete once a seeding list (this hub's objects only) has filled in the rest.
            objects.awaiting_seed.add(resource)
        objects.apply(resource, events, resource_version="", received_at=0.0)

    def _drop(self, name: str) -> None:
        for key in [k for k in self._seeds if k[0] == name]:
            self._seeds.pop(key).cancel()
        for key in [k for k in self._seed_failures if k[0] == name]:
            del self._seed_failures[key]
        self._sources.pop(name, None)
        gone = self.clusters.pop(name, None)
        if gone is not None and gone.job_uids():
            self._changed(name, gone.job_uids())

    # ------------------------------------------------------------ seeding after a resumed watch

    async def refresh(self) -> None:
        """Start the seeding lists the indexes of resumed member syncs wait for (and retry failed ones)."""
        for name, objects in list(self.clusters.items()):
            sync = self._sources.get(name)
            client = sync.client if sync is not None else None
            if client is None:
                continue
            for resource in objects.resources:
                key = (name, resource.key)
                if sync is not None and sync.resumed and resource.key not in objects.synced:
                    objects.awaiting_seed.add(resource.key)
                if resource.key not in objects.awaiting_seed or key in self._seeds:
                    continue
                objects.begin_seed(resource.key)
                self._seeds[key] = asyncio.get_running_loop().create_task(
                    self._seed(objects, resource, client), name=f"memberobjects:seed:{name}:{resource.key}")

    async def _seed(self, objects: ClusterObjects, resource: ResourceKind, client: MemberClient) -> None:
        key = (objects.cluster, resource.key)
        failures = self._seed_failures.get(key)
        if failures is None:
            failures = self._seed_failures[key] = RepeatedFailureLog(
                _log, "could not list this hub's member objects after a resumed watch; retrying every tick",
                cluster=objects.cluster, resource=resource.key)
        try:
            listed = await client.list_all(resource, label_selector=self.selector)
        except MemberClientError as e:
            objects.seed_failed(resource.key)
            failures.failed(str(e)[:256], now=time.monotonic())
            return
        finally:
            if self._seeds.get(key) is asyncio.current_task():
                del self._seeds[key]
        failures.succeeded("this hub's member objects listed again after failed attempts")
        if self.clusters.get(objects.cluster) is objects:
            objects.seeded(resource.key, listed.items)
            _log.info("this hub's member objects listed after a resumed watch", cluster=objects.cluster,
                      resource=resource.key, objects=len(listed.items))

    async def stop(self) -> None:
        tasks = list(self._seeds.values())
        self._seeds.clear()
        await stop_tasks(tasks)  # a seed's failure was logged
