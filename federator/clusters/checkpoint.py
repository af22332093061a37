"""Checkpoints: member-cluster snapshots and reflector resourceVersions in the hub store.

Layout, under the hub store's prefix:

    membersync/<cluster>/meta         uid, endpoint hash, resources, resourceVersions, shard count, seq
    membersync/<cluster>/shard-NNN    nodes (what the member says), the pods bound to them, PodGroups

Values are zlib-compressed JSON. A cluster's state is split into shards (a
node and its pods hash to one shard) so that a flush rewrites only what
changed. Every write of a cluster puts its dirty shards *and* its meta in
the same transaction, at the same instant of the builder, so what is stored
is always one consistent state at the meta's resourceVersions: a restarted
hub loads it and resumes every watch from those resourceVersions.

`CheckpointWriter` (one per hub) coalesces and batches: at most one store
transaction per `interval` seconds whatever the event rate, each holding
whole clusters (oldest change first) up to `max_ops` keys and `max_bytes`
bytes (etcd's default limits are 128 ops and 1.5 MiB per request), and
encoding for at most `encode_budget_seconds` of event-loop time; what does
not fit waits for the next flush. A cluster whose resourceVersions moved
(bookmarks) but whose shards did not gets its meta refreshed every
`meta_refresh_seconds`, so a quiet cluster resumes inside the member's window.

This module must never store or log a credential: checkpoints hold node
and pod facts, and the endpoint only as a hash.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from federator.clusters.snapshot_builder import SnapshotBuilder
from federator.obs import METRICS, Metrics, get_logger
from federator.store.protocol import MAX_VALUE_BYTES, Delete, Put, Store, StoreError

__all__ = [
    "CHECKPOINT_PREFIX",
    "CheckpointIdentity",
    "CheckpointSource",
    "CheckpointWriter",
    "StoredCheckpoint",
    "endpoint_hash",
    "load_checkpoints",
]

CHECKPOINT_PREFIX = "membersync/"
FORMAT = 1
_MAGIC = b"Z1"

_log = get_logger("clusters.checkpoint")


def endpoint_hash(server: str) -> str:
    """A short, non-reversible name of the member's API endpoint (a different endpoint voids a checkpoint)."""
    return hashlib.sha256(server.encode()).hexdigest()[:16]


def _encode(doc: Mapping[str, Any]) -> bytes:
    return _MAGIC + zlib.compress(orjson.dumps(doc), 1)


def _decode(raw: bytes) -> dict[str, Any]:
    if not raw.startswith(_MAGIC):
        raise ValueError("not a federator checkpoint value")
    doc = orjson.loads(zlib.decompress(raw[len(_MAGIC):]))
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError("unknown checkpoint format")
    return doc


@dataclass(frozen=True, slots=True)
class CheckpointIdentity:
    """What a checkpoint must match to be reused: the same MemberCluster object, endpoint and resources."""

    uid: str
    endpoint: str
    resources: tuple[str, ...]


@dataclass(slots=True)
class StoredCheckpoint:
    cluster: str
    identity: CheckpointIdentity
    resource_versions: dict[str, str]
    shard_count: int
    shards: dict[int, dict[str, Any]]
    seq: int
    written_at: float
    keys: set[str] = field(default_factory=set)

    def problem(self, identity: CheckpointIdentity) -> str | None:
        """Why this checkpoint cannot seed `identity`'s sync (None if it can)."""
        if self.identity.uid != identity.uid:
            return "it belongs to an earlier MemberCluster of the same name"
        if self.identity.endpoint != identity.endpoint:
            return "the cluster's API endpoint changed"
        if self.identity.resources != identity.resources:
            return "the synced resources changed (gang scheduler)"
        missing = [i for i in range(self.shard_count) if i not in self.shards]
        if missing:
            return f"shards {missing[:5]} are missing"
        if any(not rv for rv in self.resource_versions.values()) or \
                set(self.resource_versions) != set(identity.resources):
            return "its resourceVersions are incomplete"
        return None


async def load_checkpoints(store: Store) -> dict[str, StoredCheckpoint]:
    """Every cluster's checkpoint (one range read). Undecodable entries are skipped and logged."""
    root = store.prefix + CHECKPOINT_PREFIX
    result = await store.range(root)
    metas: dict[str, dict[str, Any]] = {}
    shards: dict[str, dict[int, dict[str, Any]]] = {}
    keys: dict[str, set[str]] = {}
    for kv in result.kvs:
        rest = kv.key[len(root):]
        cluster, _, leaf = rest.partition("/")
        keys.setdefault(cluster, set()).add(kv.key)
        try:
            doc = _decode(kv.value)
        except (ValueError, zlib.error, orjson.JSONDecodeError) as e:
            _log.warning("skipping an unreadable checkpoint entry", cluster=cluster, entry=leaf, error=str(e))
            continue
        if leaf == "meta":
            metas[cluster] = doc
        elif leaf.startswith("shard-") and leaf[6:].isdigit():
            shards.setdefault(cluster, {})[int(leaf[6:])] = doc
    loaded: dict[str, StoredCheckpoint] = {}
    for cluster, meta in metas.items():
        try:
            identity = CheckpointIdentity(uid=str(meta["uid"]), endpoint=str(meta["endpoint"]),
                                          resources=tuple(str(r) for r in meta["resources"]))
            seq = int(meta["seq"])
            count = int(meta["shards"])
            rvs = {str(k): str(v) for k, v in dict(meta["resourceVersions"]).items()}
            written_at = float(meta.get("writtenAt", 0.0))
        except (KeyError, TypeError, ValueError) as e:
            _log.warning("skipping a malformed checkpoint", cluster=cluster, error=f"{type(e).__name__}: {e}")
            continue
        own = {i: doc for i, doc in shards.get(cluster, {}).items()
               if i < count and doc.get("uid") == identity.uid and int(doc.get("seq", seq + 1)) <= seq}
        loaded[cluster] = StoredCheckpoint(cluster=cluster, identity=identity, resource_versions=rvs,
                                           shard_count=count, shards=own, seq=seq, written_at=written_at,
                                           keys=keys.get(cluster, set()))
    for cluster in set(keys) - set(loaded):
        loaded_keys = keys[cluster]
        _log.info("checkpoint without a usable meta entry", cluster=cluster, keys=len(loaded_keys))
    return loaded


async def checkpoint_keys(store: Store, cluster: str) -> set[str]:
    result = await store.range(f"{store.prefix}{CHECKPOINT_PREFIX}{cluster}/")
    return {kv.key for kv in result.kvs}


class CheckpointSource(Protocol):
    """A cluster sync as the writer sees it."""

    name: str
    builder: SnapshotBuilder
    identity: CheckpointIdentity

    def checkpoint_ready(self) -> bool:
        """True once the builder holds one consistent state of every resource (after the first sync)."""
        ...


@dataclass
class _Entry:
    source: CheckpointSource
    dirty_since: float | None = None
    meta_written_at: float = float("-inf")
    rv_at_meta: dict[str, str] = field(default_factory=dict)
    #: keys stored for this cluster (None: unknown, read them before the first write)
    stored_keys: set[str] | None = None
    seq: int = 0


@dataclass
class FlushReport:
    clusters: int = 0
    keys: int = 0
    bytes: int = 0


class CheckpointWriter:
    """Coalesced, batched checkpoint writes for every cluster of one hub (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        interval: float = 0.5,
        max_ops: int = 100,
        max_bytes: int = 1_000_000,
        meta_refresh_seconds: float = 30.0,
        encode_budget_seconds: float = 0.02,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0 or max_ops < 2 or max_bytes < 1024:
            raise ValueError("checkpoint interval must be > 0, max_ops >= 2 and max_bytes >= 1024")
        self.store = store
        self.interval = interval
        self.max_ops = max_ops
        self.max_bytes = max_bytes
        self.meta_refresh_seconds = meta_refresh_seconds
        self.encode_budget_seconds = encode_budget_seconds
        self.metrics = metrics or METRICS
        self._clock = clock
        self._wall = wall_clock
        self._root = store.prefix + CHECKPOINT_PREFIX
        self._entries: dict[str, _Entry] = {}
        self._deletions: set[str] = set()
        self._wake = asyncio.Event()
        self._last_flush = float("-inf")
        self._rng = random.Random()
        self._lock = asyncio.Lock()
        #: totals since start (benchmarks read them)
        self.flushes = 0
        self.keys_written = 0
        self.bytes_written = 0

    # ------------------------------------------------------------ registration

    def register(self, source: CheckpointSource, *, stored: StoredCheckpoint | None = None) -> None:
        """Start checkpointing `source`; `stored` is what the store holds for it (from load_checkpoints)."""
        self._deletions.discard(source.name)
        entry = _Entry(source=source, stored_keys=set(stored.keys) if stored is not None else None)
        if stored is not None and stored.problem(source.identity) is None:
            entry.seq = stored.seq
            entry.rv_at_meta = dict(stored.resource_versions)
            entry.meta_written_at = self._clock()
        self._entries[source.name] = entry
        self._wake.set()

    def unregister(self, name: str, *, delete: bool) -> None:
        """Stop checkpointing a cluster; with `delete`, its stored checkpoint is removed on the next flush."""
        self._entries.pop(name, None)
        if delete:
            self._deletions.add(name)
            self._wake.set()

    def touch(self, name: str) -> None:
        """Something of `name` changed (cheap: called per applied batch)."""
        entry = self._entries.get(name)
        if entry is not None:
            if entry.dirty_since is None:
                entry.dirty_since = self._clock()
            self._wake.set()

    # ------------------------------------------------------------ loop

    async def run(self) -> None:
        """Flush until cancelled: at most one transaction per `interval`."""
        failures = 0
        while True:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that races its
            # timeout, and this loop would then outlive the hub's shutdown.
            try:
                async with asyncio.timeout(max(self.interval, self.meta_refresh_seconds / 2)):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            wait = self._last_flush + self.interval - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                report = await self.flush_once()
                failures = 0
            except StoreError as e:
                delay = min(10.0, self.interval * 2 ** min(failures, 10)) * (0.5 + 0.5 * self._rng.random())
                failures += 1
                _log.warning("checkpoint flush failed; retrying", waiting_for="the hub store to accept writes",
                             attempt=failures, delay_s=round(delay, 3), error=str(e))
                self._wake.set()
                await asyncio.sleep(delay)
                continue
            if report.clusters and self._pending():
                self._wake.set()

    def _pending(self) -> bool:
        return bool(self._deletions) or any(
            (e.source.builder.has_dirty or not e.source.builder.shard_count) and e.source.checkpoint_ready()
            for e in self._entries.values())

    async def flush_all(self, *, max_rounds: int = 1000) -> None:
        """Flush until nothing is dirty (shutdown), ignoring the interval."""
        for _ in range(max_rounds):
            if not self._pending() and not self._meta_candidates(force=True):
                return
            await self.flush_once(force_meta=True)

    def _meta_candidates(self, *, force: bool = False) -> list[_Entry]:
        now = self._clock()
        out = []
        for e in self._entries.values():
            b = e.source.builder
            if not e.source.checkpoint_ready() or b.has_dirty or not b.shard_count:
                continue
            if b.resource_versions != e.rv_at_meta and (force or now - e.meta_written_at >= self.meta_refresh_seconds):
                out.append(e)
        return out

    async def flush_once(self, *, force_meta: bool = False) -> FlushReport:
        """One transaction: pending deletions, then whole clusters, oldest change first, within budget."""
        async with self._lock:
            return await self._flush_once(force_meta=force_meta)

    async def _flush_once(self, *, force_meta: bool) -> FlushReport:
        loop_phase = self.metrics.loop_phase_seconds
        started = self._clock()
        ops: list[Put | Delete] = []
        size = 0
        deleting = sorted(self._deletions)
        for name in deleting:
            for key in sorted(await checkpoint_keys(self.store, name)):
                ops.append(Delete(key))
        for entry in list(self._entries.values()):
            if entry.stored_keys is None and entry.source.checkpoint_ready():
                entry.stored_keys = await checkpoint_keys(self.store, entry.source.name)
        # Each cluster is encoded without an await (its shards and meta are one instant of its builder);
        # between clusters the loop may run, and encoding stops once `encode_budget_seconds` is spent, so
        # a flush never blocks the event loop for long (what is left stays dirty for the next flush).
        dirty = [e for e in self._entries.values()
                 if e.source.checkpoint_ready() and (e.source.builder.has_dirty or not e.source.builder.shard_count)]
        dirty.sort(key=lambda e: e.dirty_since if e.dirty_since is not None else started)
        candidates = dirty + [e for e in self._meta_candidates(force=force_meta) if e not in dirty]
        included: list[tuple[_Entry, set[int], float | None, set[str]]] = []
        encode_started = self._clock()
        for entry in candidates:
            if included:
                if self._clock() - encode_started > self.encode_budget_seconds:
                    break
                await asyncio.sleep(0)
                if self._entries.get(entry.source.name) is not entry:
                    continue  # unregistered meanwhile
            builder = entry.source.builder
            builder.ensure_shards()
            shards = builder.take_dirty()
            seq = entry.seq + 1
            cluster_ops: list[Put | Delete] = []
            cluster_bytes = 0
            base = f"{self._root}{entry.source.name}/"
            for shard in sorted(shards):
                doc = builder.encode_shard(shard)
                doc.update(format=FORMAT, uid=entry.source.identity.uid, shard=shard, seq=seq)
                value = _encode(doc)
                if len(value) > MAX_VALUE_BYTES:
                    _log.error("checkpoint shard too large; this cluster is not checkpointed",
                               cluster=entry.source.name, shard=shard, bytes=len(value))
                    cluster_ops = []
                    break
                cluster_ops.append(Put(f"{base}shard-{shard:03d}", value))
                cluster_bytes += len(value)
            else:
                meta = _encode({
                    "format": FORMAT, "cluster": entry.source.name, "uid": entry.source.identity.uid,
                    "endpoint": entry.source.identity.endpoint, "resources": list(entry.source.identity.resources),
                    "resourceVersions": dict(builder.resource_versions), "shards": builder.shard_count, "seq": seq,
                    "writtenAt": self._wall(),
                })
                cluster_ops.append(Put(f"{base}meta", meta))
                cluster_bytes += len(meta)
                wanted = {f"{base}meta"} | {f"{base}shard-{i:03d}" for i in range(builder.shard_count)}
                cluster_ops += [Delete(k) for k in sorted((entry.stored_keys or set()) - wanted)]
            if not cluster_ops:
                continue
            if included and (len(ops) + len(cluster_ops) > self.max_ops or size + cluster_bytes > self.max_bytes):
                builder.mark_dirty(shards)  # next flush
                break
            ops += cluster_ops
            size += cluster_bytes
            included.append((entry, shards, entry.dirty_since, wanted))
            entry.dirty_since = None
            rvs_now = dict(builder.resource_versions)
            entry.rv_at_meta = rvs_now
            entry.seq = seq
        encoded = self._clock()
        loop_phase.labels(loop="checkpoint", phase="encode").observe(encoded - started)
        if not ops:
            return FlushReport()
        try:
            await self.store.txn([], ops)
        except StoreError:
            for entry, shards, since, _ in included:
                entry.source.builder.mark_dirty(shards)
                entry.meta_written_at = float("-inf")
                entry.rv_at_meta = {}
                if since is not None and (entry.dirty_since is None or since < entry.dirty_since):
                    entry.dirty_since = since
                elif entry.dirty_since is None:
                    entry.dirty_since = started
            self.metrics.checkpoint_flushes.labels(result="error").inc()
            raise
        finished = self._clock()
        loop_phase.labels(loop="checkpoint", phase="txn").observe(finished - encoded)
        self._last_flush = finished
        self._deletions.difference_update(deleting)
        for entry, _, _, wanted in included:
            entry.meta_written_at = finished
            entry.stored_keys = wanted
        self.flushes += 1
        self.keys_written += len(ops)
        self.bytes_written += size
        self.metrics.checkpoint_flushes.labels(result="ok").inc()
        self.metrics.checkpoint_keys_written.inc(len(ops))
        self.metrics.checkpoint_bytes_written.inc(size)
        return FlushReport(clusters=len(included), keys=len(ops), bytes=size)
