"""Lists served from the watch cache, with kube's consistency rules, on every
store backend (memory, sqlite on a temp file, etcd on the session's etcd).

The store is wrapped in `WatchedStore`, a pass-through that counts reads
(to tell a list served from the cache from one that read the store), can
hold its watch streams (a lagging cache) and can fail every call with
StoreUnavailable (an outage). Its current_revision lets the event loop run
once, as a network store's does: that is what lets a consistent list wait
for the cache (against an in-process store that answers at once, a list
reads the store instead of adding a suspension point; see
test_in_process_consistent_list_never_suspends).
"""

from __future__ import annotations

import asyncio
import gc
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from apitest_support import GADGETS, GROUP, WIDGETS, make_registry, widget

from federator.apiserver.errors import ApiError
from federator.apiserver.registry import ResourceType
from federator.apiserver.storage import ObjectList, ObjectStorage
from federator.obs import Metrics
from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdProcess
from federator.store.memory import MemoryStore
from federator.store.protocol import Compacted, Event, Store, StoreUnavailable
from federator.store.sqlite import SqliteStore

BACKENDS = ["memory", "sqlite", "etcd"]
#: long enough that a list served by the store instead of the cache means the cache could not catch up
PATIENT = 60.0


def gadget(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Gadget", "metadata": {"name": name, **meta}, "spec": {"a": 1}}


class WatchedStore:
    """A pass-through Store that counts reads, can hold its watches, inject
    a compaction into them, and fail like an unreachable store."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.prefix = inner.prefix
        self.reads: dict[str, int] = {"range": 0, "get": 0, "current_revision": 0}
        self.down = False
        self.compact_watches = False
        #: current_revision lets the loop run once (as etcd's round trip does)
        self.yields = True
        self.flowing = asyncio.Event()
        self.flowing.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("test outage: the store does not answer")

    def read_count(self) -> int:
        return sum(self.reads.values())

    async def range(self, prefix: str, **kw: Any) -> Any:
        self._check()
        self.reads["range"] += 1
        return await self.inner.range(prefix, **kw)

    async def get(self, key: str) -> Any:
        self._check()
        self.reads["get"] += 1
        return await self.inner.get(key)

    async def current_revision(self) -> int:
        self._check()
        self.reads["current_revision"] += 1
        if self.yields:
            await asyncio.sleep(0)
        return await self.inner.current_revision()

    async def txn(self, *args: Any, **kw: Any) -> Any:
        self._check()
        return await self.inner.txn(*args, **kw)

    async def create(self, *args: Any, **kw: Any) -> Any:
        self._check()
        return await self.inner.create(*args, **kw)

    def watch(self, prefix: str, *, from_revision: int) -> AsyncIterator[Event]:
        self._check()
        return self._watch(prefix, from_revision)

    async def _watch(self, prefix: str, from_revision: int) -> AsyncIterator[Event]:
        inner = self.inner.watch(prefix, from_revision=from_revision)
        try:
            async for ev in inner:
                if not self.flowing.is_set():
                    await self.flowing.wait()
                self._check()
                if self.compact_watches:
                    self.compact_watches = False
                    raise Compacted(ev.revision, ev.revision + 1)
                yield ev
        finally:
            await inner.aclose()  # type: ignore[attr-defined]


@pytest.fixture(params=BACKENDS)
async def inner_store(request: pytest.FixtureRequest, tmp_path: Path, unique_prefix: str) -> AsyncIterator[Store]:
    store: Store
    if request.param == "memory":
        store = MemoryStore(prefix=unique_prefix, metrics=Metrics())
    elif request.param == "sqlite":
        store = await SqliteStore.open(tmp_path / "store.db", prefix=unique_prefix, metrics=Metrics())
    else:
        etcd: EtcdProcess = request.getfixturevalue("etcd_server")
        store = await EtcdStore.connect([etcd.endpoint], prefix=unique_prefix, retry_budget_seconds=5,
                                        metrics=Metrics())
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def backend(inner_store: Store) -> str:
    return type(inner_store).__name__


@pytest.fixture
def store(inner_store: Store) -> WatchedStore:
    return WatchedStore(inner_store)


@pytest.fixture
async def storage(store: WatchedStore, backend: str) -> AsyncIterator[ObjectStorage]:
    # On etcd other tests' leases may expire outside our prefix (revisions the
    # cache cannot see): there a list may read the store, so only memory and
    # sqlite tests assert where a list was served from.
    st = ObjectStorage(store, make_registry(), enforce_namespaces=False,
                       consistent_read_timeout=PATIENT if backend != "EtcdStore" else 1.0)
    await st.start()
    try:
        yield st
    finally:
        await st.close()


def names(listing: ObjectList) -> list[str]:
    return [o["metadata"]["name"] for o in listing.items]


def from_cache(backend: str) -> bool:
    return backend != "EtcdStore"


async def direct(store: WatchedStore, storage: ObjectStorage, rt: ResourceType, namespace: str | None = None,
                 revision: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """What the store itself holds: the objects (stamped like the API) and the revision."""
    rr = await store.inner.range(storage.collection_prefix(rt, namespace), revision=revision)
    objs = []
    for kv in rr.kvs:
        obj = orjson.loads(kv.value)
        obj["metadata"]["resourceVersion"] = str(kv.mod_revision)
        objs.append(obj)
    return objs, rr.revision


async def settle(storage: ObjectStorage) -> None:
    """Wait until the cache has taken in every write so far (on an in-process
    store a list right after a write reads the store instead of waiting). The
    barrier is a write of our own, past all of them: on the shared etcd the
    current revision may belong to another test's key, which no cache of our
    prefix ever sees."""
    barrier = await storage.store.put(storage.store.prefix + "barrier", b"1")
    for rt in (WIDGETS, GADGETS):
        assert await storage.feed(rt).wait_fresh(barrier.mod_revision, 30), \
            f"the cache of {rt.plural} never reached {barrier.mod_revision}"


# ---------------------------------------------------------------- resourceVersion="0"


async def test_rv0_list_reads_nothing_from_the_store(storage: ObjectStorage, store: WatchedStore) -> None:
    for i in range(5):
        await storage.create(WIDGETS, widget(f"w{i}"), namespace="ns1")
    await storage.create(GADGETS, gadget("g0"), namespace=None)
    await settle(storage)
    before = dict(store.reads)
    listing = await storage.list(WIDGETS, resource_version="0")
    cluster = await storage.list(GADGETS, resource_version="0")
    one = await storage.list(WIDGETS, resource_version="0", namespace="ns1", field_selector="metadata.name=w3")
    assert store.reads == before  # not a range, not even the current revision
    assert names(listing) == [f"w{i}" for i in range(5)]
    assert names(cluster) == ["g0"] and names(one) == ["w3"]
    objs, _ = await direct(store, storage, WIDGETS)
    assert listing.items == objs and int(listing.resource_version) >= max(
        int(o["metadata"]["resourceVersion"]) for o in objs)


async def test_rv0_list_ignores_limit_as_kubes_cacher_does(storage: ObjectStorage, store: WatchedStore) -> None:
    for i in range(4):
        await storage.create(WIDGETS, widget(f"w{i}"), namespace="ns1")
    await settle(storage)
    listing = await storage.list(WIDGETS, resource_version="0", limit=2)
    assert names(listing) == ["w0", "w1", "w2", "w3"]
    assert listing.continue_token is None and listing.remaining is None
    both = await storage.list(WIDGETS, resource_version="0", resource_version_match="NotOlderThan", limit=1)
    assert len(both.items) == 4 and both.continue_token is None


async def test_list_items_are_fresh_copies(storage: ObjectStorage) -> None:
    await storage.create(WIDGETS, widget("w0", size=1), namespace="ns1")
    first = await storage.list(WIDGETS)
    first.items[0]["spec"]["size"] = 99
    first.items[0]["metadata"]["labels"] = {"mutated": "yes"}
    again = await storage.list(WIDGETS, resource_version="0")
    assert again.items[0]["spec"]["size"] == 1 and "labels" not in again.items[0]["metadata"]


# ---------------------------------------------------------------- consistent reads


async def test_consistent_list_reads_its_own_writes(
    storage: ObjectStorage, store: WatchedStore, backend: str,
) -> None:
    ranges = store.reads["range"]
    for i in range(15):
        created = await storage.create(WIDGETS, widget(f"w{i:02d}"), namespace="ns1")
        listing = await storage.list(WIDGETS)
        assert names(listing)[-1] == f"w{i:02d}" and len(listing.items) == i + 1
        assert int(listing.resource_version) >= int(created["metadata"]["resourceVersion"])
        assert listing.items[-1] == created
    w3 = await storage.get(WIDGETS, namespace="ns1", name="w03")
    w3["spec"]["size"] = 7
    updated = await storage.update(WIDGETS, w3)
    assert [o for o in (await storage.list(WIDGETS)).items if o["metadata"]["name"] == "w03"] == [updated]
    gone = await storage.delete_ex(WIDGETS, namespace="ns1", name="w05")
    after = await storage.list(WIDGETS)
    assert "w05" not in names(after) and int(after.resource_version) >= int(gone.object["metadata"]["resourceVersion"])
    g = await storage.create(GADGETS, gadget("g0"), namespace=None)
    assert (await storage.list(GADGETS)).items == [g]
    if from_cache(backend):
        assert store.reads["range"] == ranges  # every one of those lists came from the cache


async def test_cache_equals_the_store_after_many_writes_and_deletes(
    storage: ObjectStorage, store: WatchedStore, backend: str,
) -> None:
    rng = random.Random(13)
    live: dict[tuple[str, str], bool] = {}
    for step in range(300):
        ns = rng.choice(["ns1", "ns2", "ns3"])
        name = f"w{rng.randrange(40)}"
        if rng.random() < 0.15:
            gname = f"g{rng.randrange(8)}"
            try:
                await storage.create(GADGETS, gadget(gname), namespace=None)
            except ApiError:
                await storage.delete(GADGETS, namespace=None, name=gname)
            continue
        if (ns, name) not in live:
            await storage.create(WIDGETS, widget(name, ns=ns, size=step), namespace=ns)
            live[(ns, name)] = True
        elif rng.random() < 0.4:
            await storage.delete(WIDGETS, namespace=ns, name=name)
            del live[(ns, name)]
        else:
            obj = await storage.get(WIDGETS, namespace=ns, name=name)
            obj["spec"]["size"] = step
            await storage.update(WIDGETS, obj)
    ranges = store.reads["range"]
    listing = await storage.list(WIDGETS)
    gadgets = await storage.list(GADGETS)
    per_ns = {ns: await storage.list(WIDGETS, namespace=ns) for ns in ("ns1", "ns2", "ns3", "nobody")}
    if from_cache(backend):
        assert store.reads["range"] == ranges
    # the store at the list's revision holds exactly what the cache served
    revision = int(listing.resource_version)
    assert listing.items == (await direct(store, storage, WIDGETS, revision=revision))[0]
    assert gadgets.items == (await direct(store, storage, GADGETS, revision=int(gadgets.resource_version)))[0]
    for ns, page in per_ns.items():
        assert page.items == (await direct(store, storage, WIDGETS, ns, revision=int(page.resource_version)))[0]
    assert sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in listing.items) == sorted(live)


async def test_in_process_consistent_list_never_suspends() -> None:
    """Against a store that answers at once, a consistent list right after a
    write does not wait for the cache (that would let other tasks run in the
    middle of a controller's write-then-list): it reads the store, at once.
    Once the cache has caught up, the list comes from it."""
    store = WatchedStore(MemoryStore(prefix="/p/", metrics=Metrics()))
    store.yields = False
    storage = ObjectStorage(store, make_registry(), enforce_namespaces=False, consistent_read_timeout=PATIENT)
    loop = asyncio.get_running_loop()
    try:
        await storage.start()
        for i in range(3):
            created = await storage.create(WIDGETS, widget(f"w{i}"), namespace="ns1")
            ranges = store.reads["range"]
            ran: list[int] = []
            loop.call_soon(ran.append, 1)
            listing = await storage.list(WIDGETS)
            assert ran == []  # the loop did not run during the list
            assert listing.items[-1] == created and store.reads["range"] == ranges + 1
        await settle(storage)
        ranges = store.reads["range"]
        ran = []
        loop.call_soon(ran.append, 1)
        assert names(await storage.list(WIDGETS)) == ["w0", "w1", "w2"]
        assert ran == [] and store.reads["range"] == ranges
    finally:
        await storage.close()
        await store.inner.close()


async def test_list_before_the_cache_runs_reads_the_store(store: WatchedStore) -> None:
    storage = ObjectStorage(store, make_registry(), enforce_namespaces=False)
    try:
        await storage.create(WIDGETS, widget("w0"), namespace="ns1")
        ranges = store.reads["range"]
        assert names(await storage.list(WIDGETS, resource_version="0")) == ["w0"]
        assert names(await storage.list(WIDGETS)) == ["w0"]
        assert store.reads["range"] == ranges + 2  # no cache was started by a list
    finally:
        await storage.close()
    assert names(await storage.list(WIDGETS)) == ["w0"]  # closed: the store still answers


async def test_resource_version_n_waits_for_the_cache(storage: ObjectStorage, store: WatchedStore, backend: str) -> None:
    w0 = await storage.create(WIDGETS, widget("w0"), namespace="ns1")
    rv = w0["metadata"]["resourceVersion"]
    ranges = store.reads["range"]
    for match in (None, "NotOlderThan"):
        listing = await storage.list(WIDGETS, resource_version=rv, resource_version_match=match)
        assert names(listing) == ["w0"] and int(listing.resource_version) >= int(rv)
    if from_cache(backend):
        assert store.reads["range"] == ranges
    with pytest.raises(ApiError) as e:
        await storage.list(WIDGETS, resource_version=str(int(rv) + 1000))
    assert (e.value.code, e.value.reason) == (504, "Timeout")
    assert e.value.message.startswith(f"Too large resource version: {int(rv) + 1000}, current: ")


# ---------------------------------------------------------------- selectors and namespaces


async def test_selectors_and_namespaces_from_the_cache_match_the_store(
    storage: ObjectStorage, store: WatchedStore,
) -> None:
    for i in range(12):
        ns = f"ns{i % 3}"
        labels = {"app": "a" if i % 2 else "b", "tier": str(i % 4)}
        await storage.create(WIDGETS, widget(f"w{i}", ns=ns, labels=labels,
                                              spec={"color": "red" if i % 3 else "blue"}), namespace=ns)
    for i in range(3):
        await storage.create(GADGETS, gadget(f"g{i}", labels={"app": "a" if i else "b"}), namespace=None)
    revision = (await storage.list(WIDGETS)).resource_version
    cases: list[tuple[ResourceType, dict[str, Any]]] = [
        (WIDGETS, {}),
        (WIDGETS, {"namespace": "ns1"}),
        (WIDGETS, {"label_selector": "app=a"}),
        (WIDGETS, {"label_selector": "app=a,tier in (1,3)", "namespace": "ns1"}),
        (WIDGETS, {"label_selector": "!tier"}),
        (WIDGETS, {"field_selector": "spec.color=blue"}),
        (WIDGETS, {"field_selector": "spec.color!=blue,metadata.namespace=ns2"}),
        (WIDGETS, {"field_selector": "metadata.name=w4", "namespace": "ns1"}),
        (WIDGETS, {"field_selector": "metadata.name=w4,metadata.namespace=ns1"}),
        (WIDGETS, {"field_selector": "metadata.name=w4", "namespace": "ns2"}),
        (WIDGETS, {"field_selector": "metadata.name=w4"}),  # across namespaces
        (WIDGETS, {"field_selector": "metadata.name=w4", "label_selector": "app=b", "namespace": "ns1"}),
        (GADGETS, {"label_selector": "app=a"}),
        (GADGETS, {"field_selector": "metadata.name=g1"}),
    ]
    for rt, kw in cases:
        exact = await storage.list(rt, resource_version=revision, resource_version_match="Exact", **kw)
        for rv in ("0", "", revision):
            served = await storage.list(rt, resource_version=rv, **kw)
            assert served.items == exact.items, (rt.plural, kw, rv)
    assert names(await storage.list(WIDGETS, field_selector="metadata.name=w4", namespace="ns1")) == ["w4"]
    assert names(await storage.list(GADGETS, label_selector="app=a")) == ["g1", "g2"]


# ---------------------------------------------------------------- paging


async def test_consistent_list_with_limit_pages_from_the_cache_then_the_store_at_its_revision(
    storage: ObjectStorage, store: WatchedStore, backend: str,
) -> None:
    for i in range(7):
        await storage.create(WIDGETS, widget(f"w{i}"), namespace="ns1")
    ranges = store.reads["range"]
    page = await storage.list(WIDGETS, limit=3)
    if from_cache(backend):
        assert store.reads["range"] == ranges  # the first page: the cache (kube v1.33, limit applied)
    assert names(page) == ["w0", "w1", "w2"] and page.remaining == 4 and page.continue_token
    first_rv = page.resource_version
    await storage.create(WIDGETS, widget("w05a"), namespace="ns1")  # after the snapshot: never shown
    await storage.delete(WIDGETS, namespace="ns1", name="w6")
    seen = names(page)
    while page.continue_token:
        page = await storage.list(WIDGETS, limit=3, continue_token=page.continue_token)
        assert page.resource_version == first_rv
        seen += names(page)
    assert seen == [f"w{i}" for i in range(7)]
    if from_cache(backend):
        assert store.reads["range"] > ranges  # the continued pages: the store, at the first page's revision


async def test_filtered_page_from_the_cache(storage: ObjectStorage) -> None:
    for i in range(10):
        await storage.create(WIDGETS, widget(f"w{i}", labels={"even": str(i % 2 == 0).lower()}), namespace="ns1")
    seen: list[str] = []
    page = await storage.list(WIDGETS, limit=2, label_selector="even=true")
    while True:
        assert page.remaining is None  # unknown with a selector (as kube)
        seen += names(page)
        if not page.continue_token:
            break
        page = await storage.list(WIDGETS, limit=2, label_selector="even=true", continue_token=page.continue_token)
    assert seen == ["w0", "w2", "w4", "w6", "w8"]


async def test_resource_version_n_with_limit_is_exact_and_read_from_the_store(
    storage: ObjectStorage, store: WatchedStore,
) -> None:
    await storage.create(WIDGETS, widget("w0"), namespace="ns1")
    rv = (await storage.list(WIDGETS)).resource_version
    await storage.create(WIDGETS, widget("w1"), namespace="ns1")
    ranges = store.reads["range"]
    exact = await storage.list(WIDGETS, resource_version=rv, limit=10)  # legacy exact: resourceVersion=N + limit
    assert names(exact) == ["w0"] and exact.resource_version == rv
    assert store.reads["range"] == ranges + 1
    match_exact = await storage.list(WIDGETS, resource_version=rv, resource_version_match="Exact")
    assert names(match_exact) == ["w0"] and match_exact.resource_version == rv
    newer = await storage.list(WIDGETS, resource_version=rv, resource_version_match="NotOlderThan", limit=1)
    assert names(newer) == ["w0"] and newer.continue_token and int(newer.resource_version) > int(rv)
    rest = await storage.list(WIDGETS, limit=1, continue_token=newer.continue_token)
    assert names(rest) == ["w1"] and rest.continue_token is None


# ---------------------------------------------------------------- bad input


_HOSTILE: list[dict[str, Any]] = [
    {"resource_version": "abc"},
    {"resource_version": "-1"},
    {"resource_version": " 1"},
    {"resource_version": "99999999999999999999"},
    {"resource_version": "9999999999999999999"},
    {"resource_version": "9999999999999999999", "limit": 5},
    {"resource_version": "0", "resource_version_match": "Exact"},
    {"resource_version": "", "resource_version_match": "NotOlderThan"},
    {"resource_version_match": "Exact"},
    {"resource_version": "1", "resource_version_match": "Newest"},
    {"resource_version": "1", "continue_token": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"},
    {"resource_version_match": "NotOlderThan", "continue_token": "abc"},
    {"continue_token": "garbage!"},
    {"limit": -1},
    {"limit": True},
    {"label_selector": "a in (b"},
    {"field_selector": "spec.size=1"},
]


@pytest.mark.parametrize("query", _HOSTILE, ids=[repr(q) for q in _HOSTILE])
async def test_hostile_input_gets_the_same_status_with_or_without_the_cache(
    storage: ObjectStorage, store: WatchedStore, query: dict[str, Any],
) -> None:
    await storage.create(WIDGETS, widget("w0"), namespace="ns1")
    cold = ObjectStorage(store, make_registry(), enforce_namespaces=False)  # never starts its cache
    try:
        errors = []
        for st in (storage, cold):
            with pytest.raises(ApiError) as e:
                await st.list(WIDGETS, **query)
            errors.append((e.value.code, e.value.reason, e.value.message))
    finally:
        await cold.close()
    assert errors[0] == errors[1]
    assert errors[0][0] in (400, 422, 504)


# ---------------------------------------------------------------- compaction


async def test_compaction_past_the_cache_rebuilds_its_state() -> None:
    store = MemoryStore(prefix="/c/", retain_revisions=50, metrics=Metrics())
    storage = ObjectStorage(store, make_registry(), enforce_namespaces=False, consistent_read_timeout=PATIENT)
    try:
        await storage.start()
        for i in range(5):
            await storage.create(WIDGETS, widget(f"keep{i}"), namespace="ns1")
        rv = (await storage.list(WIDGETS)).resource_version
        feed = storage.feed(WIDGETS)
        epoch = feed.epoch
        stream = storage.watch(WIDGETS, resource_version=rv)
        await storage.create(WIDGETS, widget("first"), namespace="ns1")
        first = await asyncio.wait_for(stream.__anext__(), 30)  # the watcher follows the cache
        assert first.object["metadata"]["name"] == "first"
        # 200 writes and deletes without yielding to the loop: the store's
        # 50-revision window moves past the cache's one watch
        for i in range(100):
            await storage.create(WIDGETS, widget(f"w{i}"), namespace="ns1")
        for i in range(0, 100, 2):
            await storage.delete(WIDGETS, namespace="ns1", name=f"w{i}")
        assert [ev async for ev in stream] == []  # the watcher ends: the cache lost continuity
        await feed.ensure_started()  # ... and lists again
        assert feed.epoch > epoch and feed.ready
        want = ["first", "keep0", "keep1", "keep2", "keep3", "keep4"] + [f"w{i}" for i in range(1, 100, 2)]
        before = store.range
        calls = 0

        async def counting_range(*args: Any, **kw: Any) -> Any:
            nonlocal calls
            calls += 1
            return await before(*args, **kw)

        store.range = counting_range  # type: ignore[method-assign]
        listing = await storage.list(WIDGETS, resource_version="0")
        consistent = await storage.list(WIDGETS)
        assert calls == 0  # both from the rebuilt cache
        assert sorted(names(listing)) == sorted(want) and consistent.items == listing.items
    finally:
        await storage.close()
        await store.close()


async def test_a_compacted_store_watch_relists_on_every_backend(
    storage: ObjectStorage, store: WatchedStore, backend: str,
) -> None:
    feed = storage.feed(WIDGETS)
    epoch = feed.epoch
    rv = (await storage.list(WIDGETS)).resource_version
    stream = storage.watch(WIDGETS, resource_version=rv)
    await storage.create(WIDGETS, widget("w0"), namespace="ns1")
    assert (await asyncio.wait_for(stream.__anext__(), 30)).object["metadata"]["name"] == "w0"
    store.compact_watches = True  # the next event the cache's watch delivers: Compacted instead
    await storage.create(WIDGETS, widget("w1"), namespace="ns1")  # lost to the cache
    assert [ev.object["metadata"]["name"] async for ev in stream] == []  # its watchers end
    await storage.create(WIDGETS, widget("w2"), namespace="ns1")
    listing = await storage.list(WIDGETS)
    assert names(listing) == ["w0", "w1", "w2"]
    await feed.ensure_started()
    assert feed.epoch > epoch
    if from_cache(backend):
        ranges = store.reads["range"]
        assert names(await storage.list(WIDGETS)) == ["w0", "w1", "w2"]
        assert store.reads["range"] == ranges


# ---------------------------------------------------------------- store outage


async def test_store_outage_fails_lists_and_the_cache_recovers(
    storage: ObjectStorage, store: WatchedStore, backend: str,
) -> None:
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    try:
        rv = (await storage.list(WIDGETS)).resource_version
        stream = storage.watch(WIDGETS, resource_version=rv)
        await storage.create(WIDGETS, widget("w0"), namespace="ns1")
        assert (await asyncio.wait_for(stream.__anext__(), 30)).object["metadata"]["name"] == "w0"
        store.down = True
        with pytest.raises(StoreUnavailable):
            await storage.list(WIDGETS)  # a consistent read needs the store's revision
        stale = await storage.list(WIDGETS, resource_version="0")  # "any": the cache as it is
        assert names(stale) == ["w0"]
        # the cache's watch notices the outage at its next event (written past the wrapper)
        await store.inner.put(storage.object_key(WIDGETS, "ns1", "w1"), orjson.dumps(widget("w1")))
        assert [ev async for ev in stream] == []  # the cache closed: its watchers end
        assert storage.feed(WIDGETS).closed is False  # the next use makes a new cache ...
        for query in ({}, {"resource_version": "0"}, {"limit": 1}):
            with pytest.raises(StoreUnavailable):
                await storage.list(WIDGETS, **query)  # ... which cannot start while the store is down
        store.down = False
        listing = await storage.list(WIDGETS)
        assert names(listing) == ["w0", "w1"]
        feed = storage.feed(WIDGETS)
        await feed.ensure_started()
        ranges = store.reads["range"]
        assert names(await storage.list(WIDGETS, resource_version="0")) == ["w0", "w1"]
        assert store.reads["range"] == ranges and feed.ready
        created = await storage.create(WIDGETS, widget("w2"), namespace="ns1")
        assert (await storage.list(WIDGETS)).items[-1] == created
        gc.collect()
        await asyncio.sleep(0)
        assert [c for c in unhandled if "never retrieved" in str(c.get("message"))] == []
    finally:
        loop.set_exception_handler(previous)


async def test_etcd_outage_and_return(etcd_factory: Callable[[], EtcdProcess]) -> None:
    etcd = etcd_factory()
    store = await EtcdStore.connect([etcd.endpoint], prefix="/o/", retry_budget_seconds=1.0, metrics=Metrics())
    storage = ObjectStorage(store, make_registry(), enforce_namespaces=False)
    try:
        await storage.start()
        rv = (await storage.list(WIDGETS)).resource_version
        stream = storage.watch(WIDGETS, resource_version=rv)
        await storage.create(WIDGETS, widget("w0"), namespace="ns1")
        assert (await asyncio.wait_for(stream.__anext__(), 30)).object["metadata"]["name"] == "w0"
        etcd.kill()
        async with asyncio.timeout(60):
            with pytest.raises(StoreUnavailable):
                await storage.list(WIDGETS)
            assert [ev async for ev in stream] == []  # the cache's watch gave up: it closed
        etcd.start()  # same ports, same data
        async with asyncio.timeout(60):
            while True:
                try:
                    listing = await storage.list(WIDGETS)
                    break
                except StoreUnavailable:
                    await storage.feed(WIDGETS).cache.progressed(0.2)
        assert names(listing) == ["w0"]
        await storage.feed(WIDGETS).ensure_started()
        assert storage.feed(WIDGETS).ready
        created = await storage.create(WIDGETS, widget("w1"), namespace="ns1")
        assert (await storage.list(WIDGETS)).items[-1] == created
    finally:
        await storage.close()
        await store.close()


# ---------------------------------------------------------------- watches


async def test_watch_without_rv_starts_from_the_cache(storage: ObjectStorage, store: WatchedStore, backend: str) -> None:
    for i in range(3):
        await storage.create(WIDGETS, widget(f"w{i}"), namespace="ns1")
    await settle(storage)
    ranges = store.reads["range"]
    stop = asyncio.Event()
    stream = storage.watch(WIDGETS, namespace="ns1", stop=stop)
    initial = [await asyncio.wait_for(stream.__anext__(), 30) for _ in range(3)]
    assert [(e.type, e.object["metadata"]["name"]) for e in initial] == [("ADDED", f"w{i}") for i in range(3)]
    if from_cache(backend):
        assert store.reads["range"] == ranges
    await storage.create(WIDGETS, widget("w3"), namespace="ns1")
    live = await asyncio.wait_for(stream.__anext__(), 30)
    assert (live.type, live.object["metadata"]["name"]) == ("ADDED", "w3")
    stop.set()
    await stream.aclose()  # type: ignore[attr-defined]


async def test_watch_after_a_store_list_skips_what_the_lagging_cache_delivers_late(
    store: WatchedStore,
) -> None:
    storage = ObjectStorage(store, make_registry(), enforce_namespaces=False, consistent_read_timeout=0.05)
    try:
        await storage.start()
        store.flowing.clear()  # the cache's watch holds its events
        await storage.create(WIDGETS, widget("w0"), namespace="ns1")
        stop = asyncio.Event()
        stream = storage.watch(WIDGETS, namespace="ns1", stop=stop)
        # the cache cannot show w0 in time: the initial ADDED comes from the store
        first = await asyncio.wait_for(stream.__anext__(), 30)
        assert (first.type, first.object["metadata"]["name"]) == ("ADDED", "w0")
        store.flowing.set()  # now the cache delivers w0's event: the watcher must not see it again
        await storage.create(WIDGETS, widget("w1"), namespace="ns1")
        second = await asyncio.wait_for(stream.__anext__(), 30)
        assert (second.type, second.object["metadata"]["name"]) == ("ADDED", "w1")
        stop.set()
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await storage.close()
