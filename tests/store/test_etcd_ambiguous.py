"""Ambiguous commits: a guarded etcd write (create, compare-and-swap update, guarded delete) whose
connection is cut after etcd received it is sent again, and the resent attempt whose guard fails is
resolved by reading back. A real etcd behind a small TCP proxy that cuts the client's connection at a
chosen moment: after the request was forwarded and committed but before the answer was relayed (the
client cannot tell whether it committed), or before the request was forwarded (it did not).

The chaos suite saw the lost answer once: a create sent again after UNAVAILABLE met its own committed
write and answered 409 AlreadyExists (seed 1767591202)."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress

import pytest

from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdProcess
from federator.store.leader import FencedStore, FencingToken
from federator.store.protocol import Compare, FencedOut, Get, KeyExists, KeyValue, Put, RevisionMismatch

PREFIX = "/federator/ambiguous/"


class Mode(enum.Enum):
    RELAY = "relay"
    HOLD_ANSWERS = "hold answers"  # requests reach etcd, nothing etcd says reaches the client
    SWALLOW_REQUESTS = "swallow requests"  # nothing the client says reaches etcd


class CuttingProxy:
    """A TCP relay to etcd. `hold_answers()` / `swallow_requests()` stop one direction from then on; `cut()`
    aborts every relayed connection (the client sees its socket reset) and relays normally again."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.mode = Mode.RELAY
        self.connections = 0
        self.stopped_bytes = asyncio.Event()  # some bytes were held or swallowed since the mode was set
        self._open: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    def hold_answers(self) -> None:
        self.stopped_bytes.clear()
        self.mode = Mode.HOLD_ANSWERS

    def swallow_requests(self) -> None:
        self.stopped_bytes.clear()
        self.mode = Mode.SWALLOW_REQUESTS

    def cut(self) -> None:
        self.mode = Mode.RELAY
        for client, server in self._open:
            client.transport.abort()
            server.transport.abort()
        self._open.clear()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with suppress(asyncio.CancelledError):
                await task

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        server_reader, server_writer = await asyncio.open_connection(*self.upstream)
        self._open.append((client_writer, server_writer))
        pumps = [
            asyncio.create_task(self._pump(client_reader, server_writer, Mode.SWALLOW_REQUESTS)),
            asyncio.create_task(self._pump(server_reader, client_writer, Mode.HOLD_ANSWERS)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._tasks.difference_update(pumps)
            client_writer.transport.abort()
            server_writer.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stops_in: Mode) -> None:
        while data := await reader.read(65536):
            if self.mode is stops_in:
                self.stopped_bytes.set()
                continue  # dropped: the connection is cut before anything after it could matter
            writer.write(data)
            await writer.drain()


@asynccontextmanager
async def behind_proxy(etcd: EtcdProcess) -> AsyncIterator[tuple[CuttingProxy, EtcdStore, EtcdStore]]:
    """(proxy, a store through the proxy, a store straight to etcd)."""
    proxy = CuttingProxy(etcd.endpoint)
    await proxy.start()
    through = await EtcdStore.connect([proxy.endpoint], retry_budget_seconds=20.0)
    direct = await EtcdStore.connect([etcd.endpoint], retry_budget_seconds=20.0)
    try:
        yield proxy, through, direct
    finally:
        await through.close()
        await direct.close()
        await proxy.close()


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    async with asyncio.timeout(30):
        while not await check():
            await asyncio.sleep(0.02)


def holds(store: EtcdStore, key: str, value: bytes) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        now = await store.get(key)
        return now is not None and now.value == value

    return check


async def commit_unanswered(proxy: CuttingProxy, write: Awaitable[KeyValue],
                            committed: Callable[[], Awaitable[bool]]) -> KeyValue:
    """Run `write` through the proxy with etcd's answers held; once `committed` sees its effect straight in
    etcd, cut the connection: the client learns nothing of the commit and must send the write again."""
    proxy.hold_answers()
    task = asyncio.ensure_future(write)
    await until(committed)
    assert not task.done()  # the answer is held: the client is still waiting
    connections = proxy.connections
    proxy.cut()
    async with asyncio.timeout(60):
        kv = await task
    assert proxy.connections > connections  # the write was sent again on a new connection
    return kv


async def test_a_create_whose_answer_was_lost_is_its_own_success(etcd_server: EtcdProcess) -> None:
    async with behind_proxy(etcd_server) as (proxy, through, direct):
        key, value = PREFIX + "create", b'{"metadata":{"uid":"u-1"}}'

        async def committed() -> bool:
            return await direct.get(key) is not None

        kv = await commit_unanswered(proxy, through.create(key, value), committed)
        assert kv == await direct.get(key)
        assert kv.value == value and kv.version == 1


async def test_an_update_whose_answer_was_lost_is_its_own_success(etcd_server: EtcdProcess) -> None:
    async with behind_proxy(etcd_server) as (proxy, through, direct):
        key = PREFIX + "update"
        before = await through.create(key, b"v1")

        kv = await commit_unanswered(
            proxy, through.update(key, b"v2", expected_mod_revision=before.mod_revision), holds(direct, key, b"v2")
        )
        assert kv == await direct.get(key)
        assert kv.mod_revision > before.mod_revision and kv.version == 2


async def test_an_apiserver_shaped_txn_update_whose_answer_was_lost_succeeds(etcd_server: EtcdProcess) -> None:
    """The API server writes updates as txn(mod == N, Put, Get) and takes the txn's revision as the new
    resourceVersion."""
    async with behind_proxy(etcd_server) as (proxy, through, direct):
        key = PREFIX + "txn-update"
        before = await through.create(key, b"v1")

        async def write() -> KeyValue:
            r = await through.txn([Compare(key, "mod", "=", before.mod_revision)], [Put(key, b"v2")], [Get(key)])
            assert r.succeeded
            kv = r.results[0]
            assert kv is not None and kv.mod_revision == r.revision
            return kv

        kv = await commit_unanswered(proxy, write(), holds(direct, key, b"v2"))
        assert kv == await direct.get(key)


async def test_a_leaders_fenced_update_whose_answer_was_lost_succeeds(etcd_server: EtcdProcess) -> None:
    """The hub's controllers write through a FencedStore: each write also compares the leader key."""
    async with behind_proxy(etcd_server) as (proxy, through, direct):
        key, leader_key = PREFIX + "fenced-update", PREFIX + "leader"
        lead = await direct.create(leader_key, b"me")
        fenced = FencedStore(through, FencingToken(leader_key, lead.create_revision, "me"))
        before = await fenced.create(key, b"v1")

        kv = await commit_unanswered(
            proxy, fenced.update(key, b"v2", expected_mod_revision=before.mod_revision), holds(direct, key, b"v2")
        )
        assert kv == await direct.get(key)
        await direct.delete(leader_key)
        with pytest.raises(FencedOut):  # a deposed leader still writes nothing
            await fenced.update(key, b"v3", expected_mod_revision=kv.mod_revision)


async def test_a_delete_whose_answer_was_lost_is_its_own_success(etcd_server: EtcdProcess) -> None:
    async with behind_proxy(etcd_server) as (proxy, through, direct):
        key = PREFIX + "delete"
        before = await through.create(key, b"v1")

        async def committed() -> bool:
            return await direct.get(key) is None

        prev = await commit_unanswered(
            proxy, through.delete(key, expected_mod_revision=before.mod_revision), committed
        )
        assert prev == before


async def swallowed_then(proxy: CuttingProxy, write: Awaitable[KeyValue],
                         other_writer: Callable[[], Awaitable[object]]) -> asyncio.Future[KeyValue]:
    """Run `write` through the proxy with its request swallowed (it never reaches etcd), let another writer
    write straight to etcd, then cut the connection: the write is sent again and meets the other's write."""
    proxy.swallow_requests()
    task = asyncio.ensure_future(write)
    async with asyncio.timeout(30):
        await proxy.stopped_bytes.wait()
    await other_writer()
    proxy.cut()
    async with asyncio.timeout(60):
        await asyncio.wait([task])
    return task


async def test_a_create_resent_into_another_writers_object_is_still_a_conflict(etcd_server: EtcdProcess) -> None:
    async with behind_proxy(etcd_server) as (proxy, through, direct):
        key = PREFIX + "create-conflict"
        theirs: list[KeyValue] = []

        async def other() -> None:
            theirs.append(await direct.create(key, b'{"metadata":{"uid":"theirs"}}'))

        task = await swallowed_then(proxy, through.create(key, b'{"metadata":{"uid":"ours"}}'), other)
        with pytest.raises(KeyExists):
            task.result()
        assert await direct.get(key) == theirs[0]


async def test_identical_bytes_stored_before_the_create_was_sent_are_a_conflict(etcd_server: EtcdProcess) -> None:
    """The read-back takes a stored object for its own only when it was committed after the highest
    revision this client had seen before sending: an object already there, even byte for byte the
    same, is a 409."""
    async with behind_proxy(etcd_server) as (proxy, through, direct):
        key, value = PREFIX + "create-same-bytes", b'{"metadata":{"uid":"u-same"}}'
        existing = await direct.create(key, value)
        assert await through.get(key) == existing  # this client has now seen the object's revision

        async def nothing() -> None:
            return None

        task = await swallowed_then(proxy, through.create(key, value), nothing)
        with pytest.raises(KeyExists):
            task.result()
        assert proxy.connections >= 2


async def test_an_update_resent_after_another_writers_update_is_still_a_conflict(etcd_server: EtcdProcess) -> None:
    async with behind_proxy(etcd_server) as (proxy, through, direct):
        key = PREFIX + "update-conflict"
        before = await through.create(key, b"v1")

        async def other() -> None:
            await direct.update(key, b"theirs", expected_mod_revision=before.mod_revision)

        task = await swallowed_then(
            proxy, through.update(key, b"ours", expected_mod_revision=before.mod_revision), other
        )
        with pytest.raises(RevisionMismatch):
            task.result()
        now = await direct.get(key)
        assert now is not None and now.value == b"theirs"


async def test_a_guarded_delete_resent_after_another_writers_update_is_still_a_conflict(
    etcd_server: EtcdProcess,
) -> None:
    async with behind_proxy(etcd_server) as (proxy, through, direct):
        key = PREFIX + "delete-conflict"
        before = await through.create(key, b"v1")

        async def other() -> None:
            await direct.update(key, b"theirs", expected_mod_revision=before.mod_revision)

        task = await swallowed_then(proxy, through.delete(key, expected_mod_revision=before.mod_revision), other)
        with pytest.raises(RevisionMismatch):
            task.result()
        assert await direct.get(key) is not None
