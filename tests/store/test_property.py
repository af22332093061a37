"""Property: any sequence of operations gives the same results on memory,
sqlite and etcd (revisions compared relative to each store's start), and the
watch history replays exactly the changes that were acknowledged."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdProcess
from federator.store.memory import MemoryStore
from federator.store.protocol import Compare, Delete, Get, Put, Store, StoreError
from federator.store.sqlite import SqliteStore

KEYS = ["a", "b", "ab", "c/1"]

op_strategy = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(KEYS), st.binary(max_size=8)),
    st.tuples(st.just("create"), st.sampled_from(KEYS), st.binary(max_size=8)),
    st.tuples(st.just("update"), st.sampled_from(KEYS), st.integers(0, 12)),
    st.tuples(st.just("delete"), st.sampled_from(KEYS), st.none() | st.integers(0, 12)),
    st.tuples(st.just("get"), st.sampled_from(KEYS), st.none()),
    st.tuples(st.just("range"), st.sampled_from(["", "a", "c/"]), st.integers(0, 3)),
    st.tuples(st.just("txn"), st.sampled_from(KEYS), st.binary(max_size=2)),
    st.tuples(st.just("range_at"), st.sampled_from(["", "a"]), st.integers(0, 12)),
)


def _rel(kv: Any, base: int) -> Any:
    if kv is None:
        return None
    return (kv.key.split("/", 2)[-1], kv.value, kv.create_revision - base, kv.mod_revision - base, kv.version)


async def _apply(store: Store, ops: list[tuple[str, str, Any]]) -> list[Any]:
    p = store.prefix
    base = await store.current_revision()
    out: list[Any] = []
    for kind, key, arg in ops:
        k = p + key
        try:
            if kind == "put":
                out.append(_rel(await store.put(k, arg), base))
            elif kind == "create":
                out.append(_rel(await store.create(k, arg), base))
            elif kind == "update":
                out.append(_rel(await store.update(k, b"u", expected_mod_revision=base + arg), base))
            elif kind == "delete":
                expected = None if arg is None else base + arg
                out.append(_rel(await store.delete(k, expected_mod_revision=expected), base))
            elif kind == "get":
                out.append(_rel(await store.get(k), base))
            elif kind == "range":
                r = await store.range(p + key, limit=arg)
                out.append(([_rel(kv, base) for kv in r.kvs], r.more, r.count, r.revision - base))
            elif kind == "range_at":
                r = await store.range(p + key, revision=base + arg)
                out.append(([_rel(kv, base) for kv in r.kvs], r.revision - base))
            else:
                r2 = await store.txn(
                    [Compare(k, "value", ">", arg)],
                    [Put(k, arg + b"!"), Delete(p + "b" if key != "b" else p + "a"), Get(k)],
                    [Get(k)],
                )
                out.append((r2.succeeded, r2.revision - base, [_rel(kv, base) for kv in r2.results]))
        except StoreError as e:
            out.append(type(e).__name__)
    final = await store.current_revision()
    events = []
    if final > base:
        async with asyncio.timeout(15):
            async for ev in store.watch(p, from_revision=base + 1):
                events.append((ev.type.value, _rel(ev.kv, base), _rel(ev.prev_kv, base)))
                if ev.revision == final:
                    break
    out.append(events)
    out.append([_rel(kv, base) for kv in (await store.range(p)).kvs])
    return out


async def _run_all(ops: list[tuple[str, str, Any]], etcd_endpoint: str) -> list[list[Any]]:
    prefix = f"/prop-{uuid.uuid4().hex[:10]}/"
    with tempfile.TemporaryDirectory() as tmp:
        stores: list[Store] = [
            MemoryStore(prefix=prefix),
            await SqliteStore.open(Path(tmp) / "p.db", prefix=prefix),
            await EtcdStore.connect([etcd_endpoint], prefix=prefix),
        ]
        try:
            return [await _apply(s, ops) for s in stores]
        finally:
            for s in stores:
                await s.close()


def test_backends_agree_on_random_operation_sequences(etcd_server: EtcdProcess) -> None:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(op_strategy, min_size=1, max_size=14))
    def check(ops: list[tuple[str, str, Any]]) -> None:
        memory, sqlite, etcd = asyncio.run(_run_all(ops, etcd_server.endpoint))
        assert sqlite == memory
        assert etcd == memory

    check()
