"""This hub's member objects (Pods and PodGroups it created), per cluster, indexed by job uid and epoch.

`MemberObjects` follows the member syncs (`MemberClusters`, which member sync
fills): for every member cluster with a client, one list/watch per member kind
the hub creates there (Pods, and the PodGroups of the cluster's gang
scheduler), cluster-wide, restricted by label selector to the objects *this
hub* labelled (`federator.dev/hub=<hub id>`). It reuses member sync's
`MemberClient` (no second connection) and the `Reflector` (resume from the
last resourceVersion, re-list only after 410, capped backoff with jitter), so
there is one watch per cluster and kind, never one per job. Objects are kept
slimmed (metadata, nodeName, status) and indexed by job uid and epoch. Status
sync reads it (the member's state of each gang), and so do the GC
(cleanup.py), the stuck-gang detector (stuck.py) and dispatch (a moved gang's
previous copy); subscribers hear which jobs each applied batch touched.

The hub builds one per term (hub/app.py `build_pipeline`); status sync's loop
calls `refresh` to follow member sync's clusters and clients. It only reads
members: it never creates or deletes a member object, and never logs an
object body or a credential.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from federator.clusters.client import NODES, PODS, MemberClientError, ResourceKind
from federator.clusters.reflector import Backoff, Reflector
from federator.controllers.context import HubContext
from federator.controllers.jobs import hub_id
from federator.controllers.membercluster import MemberClusters
from federator.delegation import hub_selector
from federator.delegation.adapter import LABEL_EPOCH, LABEL_JOB_NAME, LABEL_JOB_NAMESPACE, LABEL_JOB_UID
from federator.obs import get_logger

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


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _slim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What status sync, GC and stuck detection read of a member object (not its spec or env)."""
    meta = _mapping(obj.get("metadata"))
    kept_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "labels", "annotations",
                                      "deletionTimestamp") if k in meta}
    slim: dict[str, Any] = {"metadata": kept_meta}
    for key in ("apiVersion", "kind"):
        if key in obj:
            slim[key] = obj[key]
    spec = _mapping(obj.get("spec"))
    if spec.get("nodeName"):
        slim["spec"] = {"nodeName": spec["nodeName"]}
    elif "minMember" in spec:
        slim["spec"] = {"minMember": spec["minMember"]}
    status = obj.get("status")
    if isinstance(status, Mapping):
        slim["status"] = status
    return slim


def _epoch_of(labels: Mapping[str, Any]) -> int | None:
    raw = labels.get(LABEL_EPOCH)
    return int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) <= 10 else None


def _key_of(obj: Mapping[str, Any]) -> str:
    meta = _mapping(obj.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return ""
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name


class ClusterObjects:
    """This hub's Pods and PodGroups in one member cluster, indexed by job uid (a ReflectorSink)."""

    def __init__(self, cluster: str, resources: Sequence[ResourceKind],
                 on_change: Callable[[str, set[str]], None]) -> None:
        self.cluster = cluster
        self.resources = tuple(resources)
        self._by_key_resource = {r.key: r for r in self.resources}
        self.objects: dict[str, dict[str, dict[str, Any]]] = {r.key: {} for r in self.resources}
        self._by_job: dict[str, set[tuple[str, str]]] = {}
        self._job_of: dict[tuple[str, str], str] = {}
        self.synced: set[str] = set()
        self.on_change = on_change
        #: bumped on every applied batch (tests and waiters poll it)
        self.generation = 0

    @property
    def podgroup_resource(self) -> ResourceKind | None:
        return next((r for r in self.resources if r.key != PODS.key), None)

    @property
    def ready(self) -> bool:
        """Every kind has been listed at least once: absence in the index means absence in the member."""
        return all(r.key in self.synced for r in self.resources)

    # ReflectorSink

    def known(self, resource: str) -> Mapping[str, str]:
        return {key: str(_mapping(obj.get("metadata")).get("resourceVersion") or "")
                for key, obj in self.objects.get(resource, {}).items()}

    def apply(self, resource: str, events: Sequence[tuple[str, Mapping[str, Any]]], *, resource_version: str,
              received_at: float) -> None:
        store = self.objects.get(resource)
        if store is None:
            return
        touched: set[str] = set()
        for kind, obj in events:
            key = _key_of(obj)
            if not key:
                continue
            ref = (resource, key)
            old_job = self._job_of.pop(ref, None)
            if old_job is not None:
                touched.add(old_job)
                members = self._by_job.get(old_job)
                if members is not None:
                    members.discard(ref)
                    if not members:
                        del self._by_job[old_job]
            if kind == "DELETED":
                store.pop(key, None)
                continue
            slim = _slim(obj)
            store[key] = slim
            job_uid = _mapping(_mapping(slim["metadata"]).get("labels")).get(LABEL_JOB_UID)
            if isinstance(job_uid, str) and job_uid:
                self._job_of[ref] = job_uid
                self._by_job.setdefault(job_uid, set()).add(ref)
                touched.add(job_uid)
        self.synced.add(resource)
        self.generation += 1
        if touched:
            self.on_change(self.cluster, touched)

    # reads

    def gang(self, job_uid: str, epoch: int) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """(PodGroup, pods) of the job's gang at `epoch` in this cluster."""
        podgroup: dict[str, Any] | None = None
        pods: list[dict[str, Any]] = []
        for resource, key in sorted(self._by_job.get(job_uid, ())):
            obj = self.objects[resource].get(key)
            if obj is None or _epoch_of(_mapping(_mapping(obj.get("metadata")).get("labels"))) != epoch:
                continue
            if resource == PODS.key:
                pods.append(obj)
            else:
                podgroup = obj
        return podgroup, pods

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
    meta = _mapping(obj.get("metadata"))
    labels = _mapping(meta.get("labels"))
    return MemberObject(
        cluster=cluster, resource=resource, namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""),
        job_uid=str(labels.get(LABEL_JOB_UID) or ""), job_namespace=str(labels.get(LABEL_JOB_NAMESPACE) or ""),
        job_name=str(labels.get(LABEL_JOB_NAME) or ""), epoch=_epoch_of(labels),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def in_delete_order(objects: list[MemberObject]) -> list[MemberObject]:
    """Pods first (a PodGroup outliving its pods is harmless; the reverse leaves pods ungrouped)."""
    objects.sort(key=lambda o: (o.resource.key != PODS.key, o.namespace, o.name))
    return objects


class _ClusterWatch:
    """The reflectors of one cluster's ClusterObjects, over member sync's client."""

    def __init__(self, *, objects: ClusterObjects, client: Any, selector: str, backoff: Backoff,
                 watch_timeout_seconds: tuple[int, int]) -> None:
        self.objects = objects
        self.client = client
        self.tasks: list[asyncio.Task[None]] = []
        self.lost: dict[str, str] = {}
        rng = random.Random()
        self.reflectors = [
            Reflector(client=client, resource=resource, sink=objects, listener=self, backoff=backoff,
                      watch_timeout_seconds=watch_timeout_seconds, rng=rng, label_selector=selector,
                      logger=get_logger("controllers.memberobjects.reflector"))
            for resource in objects.resources
        ]

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for reflector in self.reflectors:
            self.tasks.append(loop.create_task(
                self._supervised(reflector), name=f"statussync:{self.objects.cluster}:{reflector.key}"))

    async def _supervised(self, reflector: Reflector) -> None:
        try:
            await reflector.run()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a dead loop must be visible
            _log.error("member object watch failed", cluster=self.objects.cluster, resource=reflector.key,
                       error=f"{type(e).__name__}: {e}", exc_info=True)
            raise

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - logged by _supervised
                pass
        self.tasks.clear()

    # ReflectorListener

    def watch_established(self, resource: str) -> None:
        self.lost.pop(resource, None)

    def watch_lost(self, resource: str, error: MemberClientError) -> None:
        self.lost[resource] = str(error)[:256]

    def relisting(self, resource: str, reason: str) -> None:
        pass


class MemberObjects:
    """Every member cluster's ClusterObjects, following member sync's clusters and clients."""

    def __init__(self, hub: HubContext, *, members: MemberClusters) -> None:
        self.hub = hub
        self.members = members
        self.selector = hub_selector(hub_id(hub))
        self.clusters: dict[str, ClusterObjects] = {}
        self._watches: dict[str, _ClusterWatch] = {}
        self._listeners: list[Callable[[str, set[str]], None]] = []
        s = hub.settings
        self.backoff = Backoff(initial=s.backoff_initial_seconds, maximum=s.backoff_max_seconds)
        timeout = s.extra.get("member_watch_timeout_seconds", (300, 600))
        self.watch_timeout_seconds = (int(timeout[0]), int(timeout[1]))

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
        """Member sync says the cluster is Ready and our own watches are up."""
        sync = self.members.syncs.get(cluster)
        health = getattr(sync, "health", None)
        watch = self._watches.get(cluster)
        return bool(getattr(health, "ready", False)) and watch is not None and not watch.lost

    async def refresh(self) -> None:
        """Start, restart (new client or scheduler) and stop per-cluster watches to match member sync."""
        syncs = self.members.syncs
        for name in list(self._watches):
            if name not in syncs:
                await self._watches.pop(name).stop()
                gone = self.clusters.pop(name, None)
                if gone is not None and gone.job_uids():
                    self._changed(name, gone.job_uids())
        for name, sync in list(syncs.items()):
            client = getattr(sync, "client", None)
            if client is None:
                continue
            resources = tuple(r for r in getattr(sync, "resources", ()) if r.key != NODES.key)
            watch = self._watches.get(name)
            if watch is not None and watch.client is client and watch.objects.resources == resources:
                continue
            if watch is not None:
                await watch.stop()
            objects = self.clusters.get(name)
            if objects is None or objects.resources != resources:
                objects = ClusterObjects(name, resources, self._changed)
                self.clusters[name] = objects
            watch = _ClusterWatch(objects=objects, client=client, selector=self.selector, backoff=self.backoff,
                                  watch_timeout_seconds=self.watch_timeout_seconds)
            self._watches[name] = watch
            watch.start()
            _log.info("watching this hub's member objects", cluster=name, resources=[r.key for r in resources],
                      selector=self.selector)

    async def stop(self) -> None:
        for watch in self._watches.values():
            await watch.stop()
        self._watches.clear()
