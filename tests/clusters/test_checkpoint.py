"""Checkpoints in a real SQLite hub store: coalesced and batched writes (at most one transaction per
interval, within op and byte budgets), consistent round trips, meta refresh for quiet clusters,
deletion, identity checks, and retry after a failed write."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from federator.clusters.checkpoint import (
    CheckpointIdentity,
    CheckpointWriter,
    load_checkpoints,
)
from federator.clusters.snapshot_builder import SnapshotBuilder
from federator.placement.snapshot import ClusterInfo
from federator.store.open import open_store
from federator.store.protocol import Compare, Op, Store, StoreUnavailable, TxnResult

from test_snapshot_builder import node, pod  # noqa: I001 - shared object builders

INFO = ClusterInfo(location="on-prem", fabric="rdma", rdma_kind="infiniband")  # type: ignore[arg-type]
RES = ("nodes", "pods")


@dataclass
class Source:
    name: str
    builder: SnapshotBuilder
    identity: CheckpointIdentity

    def checkpoint_ready(self) -> bool:
        return True


def source(name: str, nodes: int = 10, pods: int = 20) -> Source:
    b = SnapshotBuilder(cluster=name, info=INFO, resources=RES)
    b.apply("nodes", [("ADDED", node(f"n{i}")) for i in range(nodes)], resource_version="100")
    b.apply("pods", [("ADDED", pod(f"p{i}", node_name=f"n{i % nodes}", gpus=1, job="j")) for i in range(pods)],
            resource_version="101")
    return Source(name, b, CheckpointIdentity(uid=f"uid-{name}", endpoint="e1", resources=RES))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await open_store(f"sqlite://{tmp_path / 'hub.db'}", prefix="/hub/")
    try:
        yield s
    finally:
        await s.close()


async def test_round_trip_restores_the_same_snapshot(store: Store) -> None:
    src = source("a", nodes=150, pods=400)  # several shards
    writer = CheckpointWriter(store, interval=0.01)
    writer.register(src)
    report = await writer.flush_once()
    assert report.clusters == 1 and src.builder.shard_count == 3 and report.keys == 4
    loaded = (await load_checkpoints(store))["a"]
    assert loaded.problem(src.identity) is None
    restored = SnapshotBuilder.restore(cluster="a", info=INFO, resources=RES,
                                       resource_versions=loaded.resource_versions, shard_count=loaded.shard_count,
                                       shards=[loaded.shards[i] for i in range(loaded.shard_count)])
    assert dict(restored.snapshot.nodes) == dict(src.builder.snapshot.nodes)
    assert loaded.resource_versions == {"nodes": "100", "pods": "101"}
    # only what changed is rewritten: one pod -> one shard + meta
    src.builder.apply("pods", [("DELETED", pod("p3", node_name="n3"))], resource_version="102")
    writer.touch("a")
    report = await writer.flush_once()
    assert report.keys == 2
    assert (await load_checkpoints(store))["a"].resource_versions["pods"] == "102"


async def test_identity_mismatch_is_explained(store: Store) -> None:
    src = source("a")
    writer = CheckpointWriter(store, interval=0.01)
    writer.register(src)
    await writer.flush_once()
    loaded = (await load_checkpoints(store))["a"]
    assert "earlier MemberCluster" in (loaded.problem(CheckpointIdentity("other", "e1", RES)) or "")
    assert "endpoint" in (loaded.problem(CheckpointIdentity("uid-a", "e2", RES)) or "")
    assert "resources" in (loaded.problem(CheckpointIdentity("uid-a", "e1", ("nodes",))) or "")


async def test_batches_respect_op_and_byte_budgets_and_oldest_first(store: Store) -> None:
    sources = [source(f"c{i}", nodes=130) for i in range(10)]  # 3 shards + meta = 4 ops each
    writer = CheckpointWriter(store, interval=0.01, max_ops=10)
    for s in sources:
        writer.register(s)
        writer.touch(s.name)
    written: list[int] = []
    for _ in range(10):
        report = await writer.flush_once()
        if not report.clusters:
            break
        assert report.keys <= 10
        written.append(report.clusters)
    assert sum(written) == 10 and max(written) == 2
    assert set(await load_checkpoints(store)) == {s.name for s in sources}
    # a cluster bigger than the budget still goes, alone
    big = source("big", nodes=700)
    writer.register(big)
    report = await writer.flush_once()
    assert report.clusters == 1 and report.keys == big.builder.shard_count + 1 > 10


async def test_at_most_one_transaction_per_interval_whatever_the_event_rate(store: Store) -> None:
    sources = [source(f"c{i}") for i in range(5)]
    interval = 0.1
    writer = CheckpointWriter(store, interval=interval)
    for s in sources:
        writer.register(s)
    task = asyncio.create_task(writer.run(), name="test-checkpoint-writer")
    start_rev = await store.current_revision()
    started = time.monotonic()
    events = 0
    rv = 200
    try:
        while time.monotonic() - started < 1.0:
            for s in sources:
                rv += 1
                s.builder.apply("pods", [("MODIFIED", pod(f"p{rv % 20}", node_name=f"n{rv % 10}", gpus=rv % 3,
                                                           rv=str(rv)))], resource_version=str(rv))
                writer.touch(s.name)
                events += 1
            await asyncio.sleep(0)
        elapsed = time.monotonic() - started
        await asyncio.sleep(interval * 2)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    txns = await store.current_revision() - start_rev
    assert events > 200
    assert 1 <= txns <= elapsed / interval + 3  # one revision per flush transaction
    assert writer.flushes == txns
    # the last flush captured a consistent, recent state
    loaded = await load_checkpoints(store)
    for s in sources:
        assert int(loaded[s.name].resource_versions["pods"]) > 200


async def test_quiet_cluster_gets_its_meta_refreshed(store: Store) -> None:
    src = source("quiet")
    now = [1000.0]  # the writer's clock, moved by the test: "too soon" must not depend on the machine
    writer = CheckpointWriter(store, interval=0.01, meta_refresh_seconds=0.05, clock=lambda: now[0])
    writer.register(src)
    await writer.flush_once()
    src.builder.apply("nodes", [], resource_version="555")  # a bookmark: nothing else changed
    assert (await writer.flush_once()).keys == 0  # too soon
    now[0] += 0.06
    report = await writer.flush_once()
    assert report.keys == 1
    assert (await load_checkpoints(store))["quiet"].resource_versions["nodes"] == "555"


async def test_delete_and_shrinking_shard_counts_leave_no_garbage(store: Store) -> None:
    big = source("a", nodes=300)
    writer = CheckpointWriter(store, interval=0.01)
    writer.register(big)
    await writer.flush_once()
    assert (await load_checkpoints(store))["a"].shard_count == 5
    # the same cluster re-created smaller (new builder, new uid): old shards are removed
    small = source("a", nodes=10)
    small.identity = CheckpointIdentity(uid="uid-a2", endpoint="e1", resources=RES)
    writer.unregister("a", delete=False)
    writer.register(small, stored=(await load_checkpoints(store))["a"])
    await writer.flush_once()
    result = await store.range(store.prefix + "membersync/a/")
    assert sorted(kv.key.rsplit("/", 1)[1] for kv in result.kvs) == ["meta", "shard-000"]
    writer.unregister("a", delete=True)
    await writer.flush_once()
    assert (await store.range(store.prefix + "membersync/")).kvs == ()


class FailingOnce:
    """The real store, except that the first transaction fails (a store outage)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.prefix = inner.prefix
        self.failures = 1

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("store is down")
        return await self.inner.txn(compares, success, failure)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def test_failed_write_keeps_shards_dirty_and_succeeds_later(store: Store) -> None:
    src = source("a")
    writer = CheckpointWriter(FailingOnce(store), interval=0.01)  # type: ignore[arg-type]
    writer.register(src)
    with pytest.raises(StoreUnavailable):
        await writer.flush_once()
    assert src.builder.has_dirty
    report = await writer.flush_once()
    assert report.clusters == 1
    assert "a" in await load_checkpoints(store)


async def test_flush_all_writes_a_cluster_never_flushed_before(store: Store) -> None:
    """Shutdown right after a first sync: the final flush must still persist it."""
    src = source("fresh")
    writer = CheckpointWriter(store, interval=10.0)
    writer.register(src)
    await writer.flush_all()
    assert "fresh" in await load_checkpoints(store)
    await writer.flush_all()  # nothing left: returns without writing
    assert writer.flushes == 1
