"""The member-cluster sync controller: one `ClusterSync` per registered MemberCluster.

`member_sync(hub)` is a cleanup_ctx-style factory (hub/app.py lists it with the
other controllers). While the hub runs it
- loads every stored checkpoint (one range read) and publishes each
  cluster's checkpointed snapshot at once, unhealthy until re-synced;
- watches MemberCluster objects through `hub.storage` and starts, restarts
  (connection or scheduler changed) and stops per-cluster syncs; other spec
  changes (labels, cost, datasets, cordon, fabric) only update the
  snapshot's ClusterInfo;
- keeps the latest frozen snapshot of every cluster and the syncs themselves
  in the term's `MemberClusters` (`hub.parts.members`, defined here: name ->
  ClusterSnapshot, which placement reads, and name -> ClusterSync, whose
  clients, health and leases the other controllers use); it is their only
  writer;
- writes MemberCluster.status (conditions, first loss of contact, capacity,
  datasets seen, observed resourceVersions, sync lag), rate-limited: a
  condition change within `STATUS_DEBOUNCE_SECONDS`, everything else at
  most every `member_status_interval_seconds` (HubSettings.member_sync, default 5);
- runs one `CheckpointWriter` for all clusters and removes a deleted
  cluster's checkpoint.

Its settings are `HubSettings.member_sync` (probes, health, timeouts, watches,
checkpoints, LISTs in flight, the `on_applied` hook for benchmarks) and
`HubSettings.lease` (the fencing Lease, fencing/hublease.py); controllers/settings.py
documents each.

Every loop is a named task started and stopped by the factory. Credentials
live only in the spec this controller reads in-process; they never reach a
log line, metric, status or error message.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

from federator.apis.membercluster import cluster_labels
from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.clusters.checkpoint import CheckpointWriter, StoredCheckpoint, load_checkpoints
from federator.clusters.client import ClientTimeouts, MemberClient
from federator.clusters.health import ClusterHealth, HealthSettings
from federator.clusters.reflector import Backoff
from federator.clusters.sync import ClusterSync, HubLease, LeaseFactory, SyncSettings
from federator.controllers.context import HubContext
from federator.controllers.jobs import hub_id
from federator.controllers.loops import watch_hub_kind
from federator.fencing.hublease import LeaseSettings, MemberLease
from federator.obs import get_logger
from federator.placement.snapshot import ClusterSnapshot
from federator.runtime.tasks import spawn, stop_tasks
from federator.store.protocol import StoreError

__all__ = ["MemberClusters", "MemberSyncController", "MemberWatchListener", "member_sync", "sync_settings"]

KIND = "MemberCluster"
STATUS_DEBOUNCE_SECONDS = 0.2

_log = get_logger("controllers.membercluster")


class MemberWatchListener(Protocol):
    """What follows member sync's watches (memberobjects.MemberObjects): told of each sync started and
    stopped, and handed every batch its reflectors apply (one member watch per cluster and kind)."""

    def sync_started(self, sync: ClusterSync) -> None: ...

    def sync_stopped(self, name: str) -> None: ...

    def applied(self, cluster: str, resource: str, events: Sequence[tuple[str, Mapping[str, Any]]]) -> None: ...


class MemberClusters:
    """The member clusters this term syncs: name -> ClusterSync and name -> its latest frozen snapshot.

    Written only by `MemberSyncController`; every other controller reads it (a cluster's client, spec, health
    and fencing lease; placement's snapshots). Followers (`follow`) get every batch the syncs' watches apply."""

    def __init__(self) -> None:
        self.syncs: dict[str, ClusterSync] = {}
        self.snapshots: dict[str, ClusterSnapshot] = {}
        self._followers: list[MemberWatchListener] = []

    def follow(self, listener: MemberWatchListener) -> None:
        self._followers.append(listener)

    def started(self, sync: ClusterSync) -> None:
        for follower in self._followers:
            follower.sync_started(sync)

    def stopped(self, name: str) -> None:
        for follower in self._followers:
            follower.sync_stopped(name)

    def applied(self, cluster: str, resource: str, events: Sequence[tuple[str, Mapping[str, Any]]],
                received_at: float) -> None:
        """Called by the sync's reflectors after each batch: a follower that fails is logged, and neither the
        sync's watch nor the snapshot stops for it."""
        for follower in self._followers:
            try:
                follower.applied(cluster, resource, events)
            except Exception as e:  # noqa: BLE001 - the member watch feeds the snapshot too: it must go on
                _log.error("a follower of the member watch failed on a batch", cluster=cluster, resource=resource,
                           follower=type(follower).__name__, error=f"{type(e).__name__}: {e}", exc_info=True)

    def client(self, cluster: str) -> MemberClient | None:
        """The member client of `cluster` (None when not registered or not connected)."""
        sync = self.syncs.get(cluster)
        return sync.client if sync is not None else None

    def lease(self, cluster: str) -> HubLease | None:
        """The hub's fencing lease in `cluster` (None when not registered or leases are off)."""
        sync = self.syncs.get(cluster)
        return sync.lease if sync is not None else None


def lease_factory(hub: HubContext, settings: SyncSettings) -> LeaseFactory | None:
    """How each member's fencing Lease is made (fencing/hublease.py); None when `member_lease` is off."""
    wanted = hub.settings.lease
    lease = LeaseSettings(duration_seconds=wanted.duration_seconds, margin_seconds=wanted.margin_seconds,
                          enabled=wanted.enabled)
    if not lease.enabled:
        return None

    def make(cluster: str, client: MemberClient, health: ClusterHealth) -> MemberLease:
        return MemberLease(client=client, cluster=cluster, identity=settings.hub_identity, settings=lease,
                           health=health, request_timeout_seconds=settings.timeouts.request, metrics=hub.metrics)

    return make


def sync_settings(hub: HubContext) -> SyncSettings:
    """SyncSettings from HubSettings.member_sync and .watch."""
    s = hub.settings.member_sync
    return SyncSettings(
        health=HealthSettings(unreachable_after_failures=s.unreachable_after_failures,
                              watch_loss_grace_seconds=s.watch_loss_grace_seconds,
                              loss_grace_seconds=s.cluster_loss_grace_seconds),
        hub_identity=hub_id(hub),
        probe_interval_seconds=s.probe_interval_seconds,
        backoff=Backoff(initial=hub.settings.watch.backoff_initial_seconds,
                        maximum=hub.settings.watch.backoff_max_seconds),
        watch_timeout_seconds=s.watch_timeout_seconds,
        timeouts=ClientTimeouts(
            connect=s.connect_timeout_seconds,
            request=s.request_timeout_seconds,
            probe=s.probe_timeout_seconds,
            watch_idle=s.watch_idle_seconds,
            exec_plugin=hub.settings.cluster_profiles.exec_timeout_seconds,
        ),
        exec_plugins={p.name: p.exec_config for p in hub.settings.cluster_profiles.providers},
        write_log=hub.member_writes,
    )


class MemberSyncController:
    """See the module docstring. Use `member_sync(hub)` to run it."""

    def __init__(self, hub: HubContext) -> None:
        self.hub = hub
        self.rt = hub.kind(KIND)
        self.settings = sync_settings(hub)
        self.lease_factory = lease_factory(hub, self.settings)
        knobs = hub.settings.member_sync
        self.status_interval = knobs.status_interval_seconds
        self.writer = CheckpointWriter(
            hub.store, interval=knobs.checkpoint_interval_seconds, metrics=hub.metrics,
            meta_refresh_seconds=knobs.checkpoint_meta_refresh_seconds,
        )
        members = hub.parts.members
        self.members = members
        self.syncs: dict[str, ClusterSync] = members.syncs
        self.snapshots: dict[str, ClusterSnapshot] = members.snapshots
        self._stored: dict[str, StoredCheckpoint] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._status_due: dict[str, bool] = {}  # name -> urgent
        self._status_wake = asyncio.Event()
        self._last_status: dict[str, float] = {}
        self._written_status: dict[str, dict[str, Any]] = {}
        #: hook for benchmarks: called with (cluster, resource, events, received_at) after each batch
        self.bench_on_applied = knobs.on_applied
        #: at most this many member LISTs at once, across all clusters (clusters/reflector.py says why)
        self.list_gate = asyncio.Semaphore(knobs.concurrent_lists)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._stored = await load_checkpoints(self.hub.store)
        listing = await self.hub.storage.list(self.rt)
        present = await self._upsert_all(listing.items)
        for name in set(self._stored) - present:
            _log.info("removing the checkpoint of a cluster that is no longer registered", cluster=name)
            self.writer.unregister(name, delete=True)
        self._stored.clear()
        self._tasks = [
            spawn(self._watch_loop(listing.resource_version), name="membersync:watch", log=_log,
                  event="member sync loop failed", loop="watch"),
            spawn(self.writer.run(), name="membersync:checkpoint", log=_log, event="member sync loop failed",
                  loop="checkpoint"),
            spawn(self._status_loop(), name="membersync:status", log=_log, event="member sync loop failed",
                  loop="status"),
        ]
        _log.info("member sync started", clusters=sorted(self.syncs))

    async def stop(self) -> None:
        await stop_tasks(self._tasks)
        self._tasks.clear()
        for sync in list(self.syncs.values()):
            await sync.stop()
            self.members.stopped(sync.name)
        try:
            # the builders outlive their stopped loops: this persists their final state
            await self.writer.flush_all()
        except StoreError as e:
            _log.warning("final checkpoint flush failed", error=str(e))
        self.syncs.clear()
        _log.info("member sync stopped")

    # ------------------------------------------------------------ MemberCluster objects

    async def _watch_loop(self, resource_version: str) -> None:
        """The MemberCluster watch from `start`'s list on (`loops.watch_hub_kind`: a re-list after 410 Gone,
        a capped backoff with jitter after a store error)."""
        await watch_hub_kind(self.hub, self.rt, relist=self._relist, apply=self._apply, log=_log,
                             resource_version=resource_version)

    async def _relist(self) -> str:
        """Start, restart or keep a sync for every registered cluster; stop those no longer registered."""
        listing = await self.hub.storage.list(self.rt)
        for name in set(self.syncs) - await self._upsert_all(listing.items):
            await self._remove(name)
        return listing.resource_version

    async def _upsert_all(self, listed: Sequence[Mapping[str, Any]]) -> set[str]:
        """`_upsert` every listed MemberCluster; the names listed."""
        names = set()
        for obj in listed:
            names.add(Body(obj).name)
            await self._upsert(obj)
        return names

    async def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            meta = Body(obj)
            await self._remove(meta.name, uid=meta.uid or None)
        elif kind in ("ADDED", "MODIFIED"):
            await self._upsert(obj)

    async def _upsert(self, obj: Mapping[str, Any]) -> None:
        meta = Body(obj)
        name, uid = meta.name, meta.uid
        spec = obj.get("spec")
        if not name or not isinstance(spec, Mapping):
            return
        labels = cluster_labels(obj)
        current = self.syncs.get(name)
        if current is not None:
            if current.uid == uid and not current.needs_restart(spec):
                # `kubectl label mc` changes metadata only (no new generation): compared here all the same
                if spec != current.spec or labels != current.labels:
                    current.update_spec(spec, labels)
                    self._mark_status(name, urgent=False)
                return
            same_object = current.uid == uid
            _log.info("restarting member sync", cluster=name,
                      reason="connection or scheduler changed" if same_object else "cluster re-created")
            await self._remove(name, keep_checkpoint=False)
        sync = ClusterSync(
            name=name, uid=str(uid), spec=spec, settings=self.settings, writer=self.writer,
            stored=self._stored.get(name), on_snapshot=self._publish, on_status_change=self._status_changed,
            on_applied=self._applied, metrics=self.hub.metrics, list_gate=self.list_gate,
            lease_factory=self.lease_factory, labels=labels,
        )
        self.syncs[name] = sync
        self.members.started(sync)  # before its first batch: the followers see every one
        await sync.start()
        self._mark_status(name, urgent=True)
        _log.info("member sync running", cluster=name, resources=list(sync.resource_keys))

    async def _remove(self, name: str, *, uid: str | None = None, keep_checkpoint: bool = False) -> None:
        sync = self.syncs.get(name)
        if sync is None or (uid is not None and sync.uid != uid):
            return
        del self.syncs[name]
        self.writer.unregister(name, delete=not keep_checkpoint)
        await sync.stop()
        self.members.stopped(name)
        self.snapshots.pop(name, None)
        self._status_due.pop(name, None)
        self._written_status.pop(name, None)
        _log.info("member sync stopped", cluster=name)

    def _applied(self, name: str, resource: str, events: Sequence[tuple[str, Mapping[str, Any]]],
                 received_at: float) -> None:
        """Every batch a sync's reflectors applied: to the followers of the member watch, and the
        benchmarks' hook."""
        self.members.applied(name, resource, events, received_at)
        if self.bench_on_applied is not None:
            self.bench_on_applied(name, resource, events, received_at)

    def _publish(self, name: str, snapshot: ClusterSnapshot) -> None:
        if name in self.syncs:
            self.snapshots[name] = snapshot

    # ------------------------------------------------------------ status

    def _status_changed(self, name: str, urgent: bool) -> None:
        self._mark_status(name, urgent=urgent)

    def _mark_status(self, name: str, *, urgent: bool) -> None:
        self._status_due[name] = self._status_due.get(name, False) or urgent
        if urgent:
            self._status_wake.set()

    async def _status_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:  # asyncio.timeout: wait_for may swallow a cancel on 3.11 (see clusters/checkpoint.py)
                async with asyncio.timeout(min(1.0, self.status_interval)):
                    await self._status_wake.wait()
            except TimeoutError:
                pass
            self._status_wake.clear()
            await asyncio.sleep(STATUS_DEBOUNCE_SECONDS)
            now = loop.time()
            for name, sync in list(self.syncs.items()):
                urgent = self._status_due.get(name, False)
                last = self._last_status.get(name, float("-inf"))
                if not urgent and now - last < self.status_interval:
                    continue
                status = sync.status()
                if status == self._written_status.get(name) and not urgent:
                    self._last_status[name] = now
                    continue
                try:
                    await self._write_status(sync, status)
                except (ApiError, StoreError) as e:
                    _log.warning("could not write MemberCluster status; will retry", cluster=name, error=str(e))
                    self._status_wake.set()
                    continue
                self._status_due.pop(name, None)
                self._last_status[name] = now
                self._written_status[name] = status

    async def _write_status(self, sync: ClusterSync, status: dict[str, Any]) -> None:
        lost_before: list[Any] = [None]

        def mutate(obj: dict[str, Any]) -> dict[str, Any] | None:
            meta = Body(obj)
            if meta.uid != sync.uid:
                return None  # a different object of the same name: its own sync writes it
            lost_before[0] = _condition(obj, "Lost")
            merged = dict(meta.status)
            for key in ("firstLossOfContact", "lastSyncTime", "capacity", "datasetsSeen"):
                if key not in status:
                    merged.pop(key, None)
            merged.update(status)
            generation = meta.generation
            if generation:  # the store numbers generations from 1
                merged["observedGeneration"] = generation
            if merged == obj.get("status"):
                return None
            obj["status"] = merged
            return obj

        try:
            stored = await self.hub.storage.guaranteed_update(self.rt, namespace=None, name=sync.name, mutate=mutate,
                                                              subresource="status")
        except ApiError as e:
            if e.code != 404:
                raise
            return
        lost, before = _condition(stored, "Lost"), lost_before[0]
        if stored is not None and lost is not None and lost.get("status") in ("True", "False") and before is not None \
                and lost.get("status") != before.get("status") and (lost["status"] == "True" or
                                                                    before.get("status") == "True"):
            returned = lost["status"] == "False"
            self.hub.events.record(stored, controller="member-sync", reason="ClusterReturned" if returned
                                   else "ClusterLost", action="Sync", warning=not returned,
                                   message=str(lost.get("message") or ""))


def _condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for condition in Body(obj).status.get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == type_:
            return condition
    return None


async def member_sync(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: runs member-cluster sync while the hub runs."""
    controller = MemberSyncController(hub)
    running = hub.parts.running
    running.member_sync = controller
    await controller.start()
    try:
        yield
    finally:
        await controller.stop()
        running.member_sync = None
