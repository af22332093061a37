"""ClusterSync: everything the hub runs for one member cluster.

A `MemberClient` built from the MemberCluster's `spec.connection`; one
`Reflector` per synced resource (Nodes, Pods, and the PodGroups of the
cluster's gang scheduler) feeding a `SnapshotBuilder`; a probe loop and a
`ClusterHealth`; and, for the checkpoint writer, the identity and builder
of the cluster (`CheckpointSource`).

Started from a stored checkpoint, it publishes the checkpoint's snapshot
at once (marked unhealthy: stale until every reflector has resumed) and
resumes each watch from the stored resourceVersion; without one, it lists.
Every applied batch publishes a new frozen snapshot through `on_snapshot` and
is handed, as received, to `on_applied` (the hub's index of its own member
objects takes it in there: one member watch per cluster and kind feeds both the
snapshot and that index; `resumed` says whether the watches resumed from a
checkpoint, so that objects unchanged since were not sent again).

The loops are named asyncio tasks owned by the sync (`start`/`stop`),
which the hub's membercluster controller owns in turn. Nothing here writes
the hub's API objects, and nothing logs a credential. `status()` also
exports the capacity it reports (GPUs free and allocatable per model) as
`federator_member_free_gpus` / `federator_member_allocatable_gpus`; `stop()`
removes this cluster's series of every gauge (capacity, nodes, conditions),
so a removed cluster, or a replica that no longer leads, shows no stale
values.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from federator.apis.clusterprofile import ExecConfig
from federator.apis.common import dns1123_subdomain_errors
from federator.apis.membercluster import OperatorMode, cluster_labels, effective_operator_mode
from federator.clusters.checkpoint import CheckpointIdentity, CheckpointWriter, StoredCheckpoint, endpoint_hash
from federator.clusters.client import (
    JOB_KIND_RESOURCES,
    NODES,
    PODS,
    ClientTimeouts,
    KubeconfigError,
    MemberApiError,
    MemberClient,
    MemberClientError,
    MemberWriteLog,
    ResourceKind,
    podgroup_resource,
)
from federator.apis.timestamps import format_time
from federator.clusters.health import LOST, ClusterHealth, HealthSettings
from federator.clusters.reflector import Backoff, Reflector
from federator.clusters.snapshot_builder import SnapshotBuilder, capacity_summary, datasets_seen, object_key
from federator.apis.views import Body
from federator.obs import MAX_GPU_MODELS_PER_CLUSTER, METRICS, OTHER_GPU_MODEL, Metrics, get_logger
from federator.placement.snapshot import ClusterInfo, ClusterSnapshot, Fabric, Location, RdmaKind
from federator.runtime.tasks import spawn, stop_task, stop_tasks

__all__ = ["ClusterSync", "SyncSettings", "cluster_info", "discover_operators", "loss_grace_seconds",
           "synced_resources"]


@dataclass(frozen=True, slots=True)
class SyncSettings:
    health: HealthSettings = field(default_factory=HealthSettings)
    probe_interval_seconds: float = 5.0
    backoff: Backoff = field(default_factory=Backoff)
    #: each watch asks the member to end it after a random time in this range (client-go: 5-10 min)
    watch_timeout_seconds: tuple[int, int] = (300, 600)
    timeouts: ClientTimeouts = field(default_factory=ClientTimeouts)
    page_size: int = 500
    #: the hub identity: the Lease's name and holder (jobs.hub_id)
    hub_identity: str = "federator"
    #: the exec credential plugins a connection's accessProvider may name (the hub's access-provider file)
    exec_plugins: Mapping[str, ExecConfig] = field(default_factory=dict)
    #: where the member client reports the hub's writes (the audit log); None: nowhere
    write_log: MemberWriteLog | None = None


class HubLease(Protocol):
    """The hub's fencing Lease in one member, as member sync runs it and the controllers ask it.

    Implemented by `federator.fencing.hublease.MemberLease`; member sync only starts it once a client
    exists (the fencing package sits above member access, so it is handed in, not imported)."""

    async def run(self) -> None: ...

    def fenced_after(self) -> float: ...

    def fence_may_be_up(self, now: float | None = None) -> bool: ...

    def fence_verdict(self, *, placed: float, missing_since: float) -> bool | None: ...


#: builds the Lease of one member: (cluster name, its client, its health) -> the lease to run
LeaseFactory = Callable[[str, MemberClient, ClusterHealth], HubLease]


def synced_resources(spec: Mapping[str, Any]) -> tuple[ResourceKind, ...]:
    """Nodes, Pods, and the PodGroup kind of the cluster's gang scheduler (none for the default scheduler)."""
    scheduler = spec.get("scheduler") if isinstance(spec.get("scheduler"), Mapping) else {}
    assert isinstance(scheduler, Mapping)
    podgroups = podgroup_resource(str(scheduler.get("name") or "default"))
    return (NODES, PODS) if podgroups is None else (NODES, PODS, podgroups)


async def discover_operators(client: MemberClient) -> dict[str, OperatorMode]:
    """Which upstream job kinds the member serves (issue 28's operator mode): "operator" for a kind whose
    group/version resource its discovery lists, else "render"; one discovery read per group/version."""
    served: dict[tuple[str, str], frozenset[str]] = {}
    out: dict[str, OperatorMode] = {}
    for key, resource in JOB_KIND_RESOURCES.items():
        gv = (resource.group, resource.version)
        if gv not in served:
            served[gv] = await client.served_resources(group=resource.group, version=resource.version)
        out[key] = "operator" if resource.plural in served[gv] else "render"
    return out


def cluster_info(spec: Mapping[str, Any], *, healthy: bool, labels: Mapping[str, str] | None = None) -> ClusterInfo:
    """Placement's ClusterInfo from a (validated) MemberCluster spec and the labels clusterSelector matches
    (`membercluster.cluster_labels`: metadata.labels over the deprecated spec.labels; without `labels`,
    spec.labels alone)."""
    location = spec.get("location") or {}
    network = spec.get("network") or {}
    datasets = {}
    for ds in spec.get("datasets") or []:
        if isinstance(ds, Mapping) and isinstance(ds.get("name"), str) and isinstance(ds.get("sizeBytes"), int):
            datasets[ds["name"]] = ds["sizeBytes"]
    fabric = Fabric.RDMA if network.get("type") == "rdma" else Fabric.ETHERNET
    rdma_kind = network.get("rdmaKind")
    raw_cost = spec.get("cost")
    cost: Mapping[str, Any] = raw_cost if isinstance(raw_cost, Mapping) else {}
    per_gpu_hour = cost.get("perGpuHour", spec.get("costPerGpuHour"))
    raw_models = cost.get("perModel")
    per_model: Mapping[str, Any] = raw_models if isinstance(raw_models, Mapping) else {}
    return ClusterInfo(
        location=Location.CLOUD if location.get("type") == "cloud" else Location.ON_PREM,
        fabric=fabric,
        provider=str(location.get("provider") or ""),
        region=str(location.get("region") or ""),
        rdma_kind=RdmaKind(rdma_kind) if fabric is Fabric.RDMA and rdma_kind in ("infiniband", "roce") else None,
        bandwidth_gbps=float(network.get("bandwidthGbps") or 0.0),
        labels=dict(labels) if labels is not None else cluster_labels({"spec": spec}),
        cost_per_gpu_hour=float(per_gpu_hour or 0.0),
        cost_per_model={str(model): float(price) for model, price in per_model.items()},
        spot=cost.get("spot") is True,
        interruption_rate_per_hour=float(cost.get("interruptionRatePerHour") or 0.0),
        datasets=datasets,
        cordoned=spec.get("cordoned") is True or isinstance(spec.get("drain"), Mapping),
        healthy=healthy,
    )


def loss_grace_seconds(spec: Mapping[str, Any], health: HealthSettings) -> float:
    """The cluster's loss grace: spec.failover.gracePeriodSeconds, else the hub's default."""
    failover = spec.get("failover")
    grace = failover.get("gracePeriodSeconds") if isinstance(failover, Mapping) else None
    return float(grace) if isinstance(grace, int) and not isinstance(grace, bool) and grace > 0 \
        else health.loss_grace_seconds


def _valid_dataset_name(name: str) -> bool:
    return not dns1123_subdomain_errors(name)


def _remove_series(gauge: Any, *labels: str) -> None:
    try:
        gauge.remove(*labels)
    except KeyError:
        pass


SnapshotCallback = Callable[[str, ClusterSnapshot], None]
AppliedCallback = Callable[[str, str, Sequence[tuple[str, Mapping[str, Any]]], float], None]


class MemberCopies:
    """The watches of the upstream job kinds the member serves (issue 28's operator mode: the hub's member copies
    of JobSets, PyTorchJobs, ... live there): a ReflectorSink and ReflectorListener whose batches go only to
    `on_applied` (the hub's member object index), not into the placement snapshot or the cluster's health."""

    def __init__(self, sync: ClusterSync) -> None:
        self.sync = sync
        #: resource key -> object key -> resourceVersion, of every object of the kind the watch holds
        self.objects: dict[str, dict[str, str]] = {}

    def known(self, resource: str) -> Mapping[str, str]:
        return dict(self.objects.get(resource, {}))

    def apply(self, resource: str, events: Sequence[tuple[str, Mapping[str, Any]]], *, resource_version: str,
              received_at: float) -> None:
        store = self.objects.setdefault(resource, {})
        for kind, obj in events:
            key = object_key(obj)
            if not key:
                continue
            if kind == "DELETED":
                store.pop(key, None)
            else:
                store[key] = Body(obj).resource_version
        if self.sync.on_applied is not None:
            self.sync.on_applied(self.sync.name, resource, events, received_at)

    def watch_established(self, resource: str) -> None:
        self.sync.watches_lost.pop(resource, None)

    def watch_lost(self, resource: str, error: MemberClientError) -> None:
        self.sync.watches_lost[resource] = str(error)[:256]

    def relisting(self, resource: str, reason: str) -> None:
        pass


class ClusterSync:
    """One member cluster's sync (see the module docstring)."""

    def __init__(
        self,
        *,
        name: str,
        uid: str,
        spec: Mapping[str, Any],
        settings: SyncSettings | None = None,
        writer: CheckpointWriter | None = None,
        stored: StoredCheckpoint | None = None,
        on_snapshot: SnapshotCallback | None = None,
        on_status_change: Callable[[str, bool], None] | None = None,
        on_applied: AppliedCallback | None = None,
        metrics: Metrics | None = None,
        list_gate: asyncio.Semaphore | None = None,
        lease_factory: LeaseFactory | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        #: builds the hub's fencing Lease in this member once a client exists (None: leases off)
        self.lease_factory = lease_factory
        #: shared by the hub's reflectors: how many LISTs run at once (reflector.py)
        self.list_gate = list_gate
        self.uid = uid
        self.spec = spec
        #: what clusterSelector matches (`membercluster.cluster_labels` of the registration)
        self.labels: dict[str, str] = dict(labels) if labels is not None else cluster_labels({"spec": spec})
        self.settings = settings or SyncSettings()
        self.writer = writer
        self.stored = stored
        self.metrics = metrics or METRICS
        self.on_snapshot = on_snapshot or (lambda name, snap: None)
        self.on_status_change = on_status_change or (lambda name, urgent: None)
        self.on_applied = on_applied
        self.log = get_logger("clusters.sync").bind(cluster=name)
        self.resources = synced_resources(spec)
        self.resource_keys = tuple(r.key for r in self.resources)
        self.health = ClusterHealth(cluster=name, resources=self.resource_keys, settings=self.settings.health,
                                    metrics=self.metrics)
        self.health.loss_grace_seconds = loss_grace_seconds(spec, self.settings.health)
        self.builder = SnapshotBuilder(cluster=name, info=cluster_info(spec, healthy=False, labels=self.labels),
                                       resources=self.resource_keys)
        self.client: MemberClient | None = None
        #: the hub's fencing lease in this member, once a client exists (None when leases are off)
        self.lease: HubLease | None = None
        self.identity = CheckpointIdentity(uid=uid, endpoint="", resources=self.resource_keys)
        self.reflectors: dict[str, Reflector] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._synced_once = False
        self._last_lag = 0.0
        self._rng = random.Random()
        self._stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.client_error: str | None = None
        #: True once the watches resumed from the stored checkpoint (no initial LIST: batches carry only
        #: what changed since); False when they listed. Decided when the loops start.
        self.resumed = False
        #: resource key -> the error of its watch, while lost (from the loss until the watch is back)
        self.watches_lost: dict[str, str] = {}
        self._lag_metric = self.metrics.member_sync_lag_seconds.labels(cluster=name)
        self._nodes_metric = self.metrics.member_snapshot_nodes.labels(cluster=name)
        #: GPU models this cluster's capacity gauges have series for
        self._gpu_models: set[str] = set()
        #: the upstream job kinds the member serves, by source key (`discover_operators`), read once per start
        #: and once each time the member becomes Ready again; None until the first read answered
        self.operators: dict[str, OperatorMode] | None = None
        self._discovered = asyncio.Event()
        #: the watches of the job kinds the member serves (started once discovery found them)
        self.copies = MemberCopies(self)
        self.copy_reflectors: dict[str, Reflector] = {}
        #: the member was Ready once and then not: its next Ready is a reconnect (discovery is read again)
        self._lost_readiness = False

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Build the client (local work only), seed from the checkpoint, start the loops."""
        self._loop = asyncio.get_running_loop()
        try:
            await self._connect()
        except KubeconfigError as e:
            self.client_error = str(e)
            self.health.first_loss_of_contact = time.time()
            self.log.warning("cannot build a client for the member; will retry", error=str(e))
            self._spawn("connect", self._connect_loop())
            self.on_status_change(self.name, True)
            return
        self._begin()

    async def _connect(self) -> None:
        self.client = await MemberClient.from_connection(
            self.spec.get("connection") or {}, cluster=self.name, timeouts=self.settings.timeouts,
            metrics=self.metrics, exec_plugins=self.settings.exec_plugins)
        self.client.write_log = self.settings.write_log
        self.client_error = None
        self.identity = CheckpointIdentity(uid=self.uid, endpoint=endpoint_hash(self.client.server),
                                           resources=self.resource_keys)

    async def _connect_loop(self) -> None:
        attempt = 0
        while True:
            delay = self.settings.backoff.delay(attempt, self._rng)
            self.log.info("waiting before rebuilding the member client", waiting_for="a usable kubeconfig",
                          delay_s=round(delay, 3), attempt=attempt + 1)
            await asyncio.sleep(delay)
            attempt += 1
            try:
                await self._connect()
            except KubeconfigError as e:
                if str(e) != self.client_error:
                    self.client_error = str(e)
                    self.on_status_change(self.name, True)
                continue
            self.health.first_loss_of_contact = None
            self.on_status_change(self.name, True)
            self._begin()
            return

    def _begin(self) -> None:
        assert self.client is not None
        resume: dict[str, str] = {}
        stored, self.stored = self.stored, None
        if stored is not None:
            problem = stored.problem(self.identity)
            if problem is None:
                try:
                    self.builder = SnapshotBuilder.restore(
                        cluster=self.name, info=self.builder.info, resources=self.resource_keys,
                        resource_versions=stored.resource_versions, shard_count=stored.shard_count,
                        shards=(stored.shards[i] for i in range(stored.shard_count)))
                    resume = dict(stored.resource_versions)
                    self.resumed = True
                    self.health.resuming = True
                    self._synced_once = True
                    self.log.info("snapshot loaded from checkpoint; resuming watches",
                                  nodes=len(self.builder.snapshot.nodes), resource_versions=resume,
                                  age_s=round(max(0.0, time.time() - stored.written_at), 1))
                except ValueError as e:
                    self.log.warning("checkpoint unusable; re-listing", reason=str(e))
            else:
                self.log.info("checkpoint not reused; re-listing", reason=problem)
        self._publish(self.builder.snapshot)
        if self.writer is not None:
            self.writer.register(self, stored=stored)
        for resource in self.resources:
            reflector = Reflector(
                client=self.client, resource=resource, sink=self, listener=self, backoff=self.settings.backoff,
                resume_from=resume.get(resource.key), watch_timeout_seconds=self.settings.watch_timeout_seconds,
                page_size=self.settings.page_size, metrics=self.metrics, rng=self._rng, list_gate=self.list_gate,
            )
            self.reflectors[resource.key] = reflector
            self._spawn(f"reflector:{resource.key}", reflector.run())
        self._spawn("health", self._health_loop())
        self._spawn("discovery", self._discovery_loop())
        if self.lease_factory is not None:
            self.lease = self.lease_factory(self.name, self.client, self.health)
            self._spawn("lease", self.lease.run())

    async def _discovery_loop(self) -> None:
        """One discovery read of the job kinds the member serves, retried with backoff until it answers."""
        assert self.client is not None
        attempt = 0
        while True:
            try:
                found = await discover_operators(self.client)
            except MemberClientError as e:
                delay = self.settings.backoff.delay(attempt, self._rng)
                if attempt == 0:
                    self.log.info("cannot read which job kinds the member serves; will retry", error=str(e)[:300],
                                  waiting_for="the member's discovery", delay_s=round(delay, 3))
                attempt += 1
                await asyncio.sleep(delay)
                continue
            if found != self.operators:
                self.log.info("job kinds the member serves", operators=found)
            self.operators = found
            self._watch_copies(found)
            self._discovered.set()
            self.on_status_change(self.name, True)
            return

    def _watch_copies(self, served: Mapping[str, OperatorMode]) -> None:
        """One watch per upstream job kind the member serves (not yet watched: discovery read again after a
        reconnect keeps the running watches, which resume; no new LIST), feeding the member object index."""
        assert self.client is not None
        for key, mode in served.items():
            resource = JOB_KIND_RESOURCES[key]
            if mode != "operator" or resource.key in self.copy_reflectors:
                continue
            reflector = Reflector(
                client=self.client, resource=resource, sink=self.copies, listener=self.copies,
                backoff=self.settings.backoff, resume_from=None,
                watch_timeout_seconds=self.settings.watch_timeout_seconds, page_size=self.settings.page_size,
                metrics=self.metrics, rng=self._rng, list_gate=self.list_gate)
            self.copy_reflectors[resource.key] = reflector
            self._spawn(f"reflector:{resource.key}", reflector.run())

    def operator_mode(self, source_key: str) -> OperatorMode:
        """How the hub runs `source_key`'s jobs here now (`effective_operator_mode`: spec.operators, else what
        discovery found, else render)."""
        return effective_operator_mode(self.spec.get("operators"), self.operators, source_key)

    async def wait_discovered(self, timeout: float) -> bool:
        """Whether the member's job kinds are known (discovery answered once), waiting up to `timeout`."""
        if self._discovered.is_set():
            return True
        try:
            async with asyncio.timeout(timeout):
                await self._discovered.wait()
        except TimeoutError:
            return False
        return True

    def _spawn(self, what: str, coro: Any) -> None:
        name = f"member:{self.name}:{what}"
        self.tasks[what] = spawn(coro, name=name, log=self.log, event="member sync loop failed", loop=what)

    async def stop(self) -> None:
        self._stopped = True
        await stop_tasks(self.tasks.values())
        self.tasks.clear()
        if self.client is not None:
            await self.client.close()
        self._export_capacity({})
        _remove_series(self.metrics.member_snapshot_nodes, self.name)
        for condition in self.health.conditions.values():
            _remove_series(self.metrics.member_condition, self.name, condition.type)

    def update_spec(self, spec: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> None:
        """A change that keeps the connection and scheduler (labels, cost, datasets, cordon, network...)."""
        self.spec = spec
        self.labels = dict(labels) if labels is not None else cluster_labels({"spec": spec})
        self.health.loss_grace_seconds = loss_grace_seconds(spec, self.settings.health)
        self._publish(self.builder.set_info(cluster_info(spec, healthy=self.health.ready, labels=self.labels)))

    def needs_restart(self, spec: Mapping[str, Any]) -> bool:
        return (spec.get("connection") != self.spec.get("connection")
                or synced_resources(spec) != self.resources)

    # ------------------------------------------------------------ CheckpointSource

    def checkpoint_ready(self) -> bool:
        return self._synced_once and self.client is not None

    # ------------------------------------------------------------ ReflectorSink

    def known(self, resource: str) -> Mapping[str, str]:
        return self.builder.known(resource)

    def apply(self, resource: str, events: Sequence[tuple[str, Mapping[str, Any]]], *, resource_version: str,
              received_at: float) -> None:
        rv_before = self.builder.resource_versions.get(resource)
        result = self.builder.apply(resource, events, resource_version=resource_version)
        self._publish(result.snapshot)
        assert self._loop is not None
        lag = self._loop.time() - received_at
        if events:
            self._last_lag = lag
            self._lag_metric.observe(lag)
        if not self._synced_once and all(self.builder.resource_versions.get(k) for k in self.resource_keys):
            self._synced_once = True
        if self.writer is not None and (self.builder.has_dirty or rv_before != resource_version):
            self.writer.touch(self.name)
        if self.on_applied is not None:
            self.on_applied(self.name, resource, events, received_at)

    def _publish(self, snapshot: ClusterSnapshot) -> None:
        self._nodes_metric.set(len(snapshot.nodes))
        self.on_snapshot(self.name, snapshot)

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self.builder.snapshot

    # ------------------------------------------------------------ ReflectorListener

    def watch_established(self, resource: str) -> None:
        assert self._loop is not None
        self.watches_lost.pop(resource, None)
        self.health.watch_established(resource, now=self._loop.time())
        self._evaluate()

    def watch_lost(self, resource: str, error: MemberClientError) -> None:
        assert self._loop is not None
        self.watches_lost[resource] = str(error)[:256]
        self.health.watch_lost(resource, error, now=self._loop.time(), now_wall=time.time())
        self._evaluate()

    def relisting(self, resource: str, reason: str) -> None:
        assert self._loop is not None
        self.health.relisting(resource, now=self._loop.time())
        self._evaluate()

    # ------------------------------------------------------------ health

    async def _probe_once(self) -> None:
        assert self.client is not None
        # A probe that fails dates the loss of contact when it was sent (the member was already out of reach
        # then), not when its timeout ran out.
        sent = time.time()
        try:
            await self.client.probe()
            self.health.probe_succeeded()
        except MemberApiError as e:
            # It answered: an auth problem shows in Synced (the reflectors fail), not in Reachable.
            if e.code in (401, 403):
                self.health.probe_succeeded()
            else:
                self.health.probe_failed(e, now_wall=sent)
        except MemberClientError as e:
            self.health.probe_failed(e, now_wall=sent)

    async def _health_loop(self) -> None:
        """Probes every `probe_interval_seconds` (from send to send; never two at once) in a task of their
        own, so a probe hanging until its timeout never delays a grace period's end (Lost on time)."""
        assert self.client is not None and self._loop is not None
        interval = self.settings.probe_interval_seconds
        next_probe = self._loop.time()
        probe: asyncio.Task[None] | None = None
        try:
            while True:
                now = self._loop.time()
                if probe is not None and probe.done():
                    failure = None if probe.cancelled() else probe.exception()
                    if failure is not None:  # a bug, not a member's answer: visible, and probing goes on
                        self.log.error("health probe failed unexpectedly", error=f"{type(failure).__name__}: "
                                       f"{failure}")
                    probe = None
                if probe is None and now >= next_probe:
                    probe = self._loop.create_task(self._probe_once(), name=f"member:{self.name}:probe")
                    next_probe = now + interval
                self._evaluate()
                now = self._loop.time()
                deadline = self.health.next_deadline(now)
                wake = next_probe if deadline is None else min(next_probe, deadline + 0.01)
                timeout = max(0.01, wake - now)
                if probe is not None:
                    await asyncio.wait({probe}, timeout=timeout)
                else:
                    await asyncio.sleep(timeout)
        finally:
            if probe is not None:
                await stop_task(probe)

    def refresh_health(self) -> None:
        """Re-evaluate the conditions now (a fact from outside changed, e.g. health.hub_partitioned)."""
        if self._loop is not None:
            self._evaluate()

    def _evaluate(self) -> None:
        assert self._loop is not None
        was_ready = self.health.ready
        changed = self.health.evaluate(now=self._loop.time())
        if self.health.ready != was_ready:
            info = dataclasses.replace(self.builder.info, healthy=self.health.ready)
            self._publish(self.builder.set_info(info))
            running = self.tasks.get("discovery")
            if self.health.ready and self._lost_readiness and self.client is not None and not self._stopped \
                    and (running is None or running.done()):
                self._spawn("discovery", self._discovery_loop())  # back in contact: the member may have changed
            self._lost_readiness = self._lost_readiness or was_ready
        if changed:
            self.on_status_change(self.name, True)

    # ------------------------------------------------------------ status

    def sync_lag_seconds(self) -> float:
        """How far behind the member the snapshot may be: the last batch's processing lag while every
        resource is watched, else the time since a watch went down."""
        if self.health.synced or self._loop is None:
            lag = self._last_lag
            return round(lag, 3) if lag < 1 else float(round(lag))
        since = self.health.out_of_sync_since
        if since is None:
            return 0.0
        return float(round(max(0.0, self._loop.time() - since)))

    def _export_capacity(self, by_model: Mapping[str, Mapping[str, int]]) -> None:
        """Set the GPU capacity gauges from status.capacity.gpusByModel ({} removes them). At most
        MAX_GPU_MODELS_PER_CLUSTER models get series of their own (the largest); the rest add up under
        OTHER_GPU_MODEL."""
        ranked = sorted(by_model, key=lambda m: (-int(by_model[m].get("total", 0)), m))
        kept = ranked if len(ranked) <= MAX_GPU_MODELS_PER_CLUSTER else ranked[:MAX_GPU_MODELS_PER_CLUSTER - 1]
        values: dict[str, list[int]] = {m: [int(by_model[m].get("free", 0)), int(by_model[m].get("total", 0))]
                                        for m in kept}
        for model in ranked[len(kept):]:
            other = values.setdefault(OTHER_GPU_MODEL, [0, 0])
            other[0] += int(by_model[model].get("free", 0))
            other[1] += int(by_model[model].get("total", 0))
        free, allocatable = self.metrics.member_free_gpus, self.metrics.member_allocatable_gpus
        for model in self._gpu_models - values.keys():
            _remove_series(free, self.name, model)
            _remove_series(allocatable, self.name, model)
        for model, (free_gpus, total_gpus) in values.items():
            free.labels(cluster=self.name, gpu_model=model).set(free_gpus)
            allocatable.labels(cluster=self.name, gpu_model=model).set(total_gpus)
        self._gpu_models = set(values)

    def status(self) -> dict[str, Any]:
        """MemberCluster.status as this sync sees it (conditions, loss of contact, capacity, ...)."""
        if self.client_error is not None:
            first = self.health.first_loss_of_contact or time.time()
            status: dict[str, Any] = {
                "conditions": [
                    {"type": t, "status": "False", "reason": "KubeconfigInvalid", "message": self.client_error[:1024],
                     "lastTransitionTime": format_time(self.health.conditions[t].last_transition)}
                    for t in ("Reachable", "Synced", "Ready")] + [self.health.conditions[LOST].as_dict()],
                "firstLossOfContact": format_time(first),
            }
            self._export_capacity({})
            return status
        snapshot = self.builder.snapshot
        capacity = capacity_summary(snapshot)
        self._export_capacity(capacity.get("gpusByModel") or {})
        status = {
            "conditions": self.health.status_conditions(),
            "capacity": capacity,
            "datasetsSeen": [d for d in datasets_seen(snapshot) if _valid_dataset_name(d)][:4096],
            "observedResourceVersions": {k: v[:64] for k, v in self.builder.resource_versions.items() if v},
            "syncLagSeconds": self.sync_lag_seconds(),
        }
        if self.health.first_loss_of_contact is not None:
            status["firstLossOfContact"] = format_time(self.health.first_loss_of_contact)
        if self.health.last_synced_at is not None:
            status["lastSyncTime"] = format_time(self.health.last_synced_at)
        if self.operators is not None:
            status["operators"] = dict(self.operators)
        return status
