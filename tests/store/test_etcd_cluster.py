"""EtcdStore over a real 3-member etcd cluster (EtcdCluster): one store
connected to all three endpoints keeps serving through the crash of a
follower and of the raft leader, fails clearly and comes back by itself
across a quorum loss, and keeps a lease alive across a leader election.

Every wait polls for the condition it asserts on, with a generous deadline;
nothing asserts how long etcd took. etcd runs with fsync off."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest

from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdCluster
from federator.store.open import open_store
from federator.store.protocol import Event, KeyValue, Store, StoreUnavailable

pytestmark = [pytest.mark.etcd, pytest.mark.timeout(180)]

PREFIX = "/federator/"
DEADLINE = 60.0  # generous: a loaded 2-core machine may take long to elect and catch up
T = TypeVar("T")


@pytest.fixture
def cluster(etcd_cluster: EtcdCluster) -> EtcdCluster:
    return etcd_cluster  # tests/conftest.py: 3 members, fsync off


@pytest.fixture
async def store(cluster: EtcdCluster) -> AsyncIterator[Store]:
    opened = await open_store(cluster.url)  # etcd://a,b,c: one store over every member
    try:
        yield opened
    finally:
        await opened.close()


async def wait_until(what: str, check: Callable[[], T | None], *, timeout: float = DEADLINE) -> T:
    """Poll `check` (run in a thread: EtcdCluster's calls block) until it returns a value other than None/False."""
    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(check)
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


async def served(what: str, call: Callable[[], Awaitable[T]], *, timeout: float = DEADLINE) -> T:
    """`call` again while the store says StoreUnavailable (its retry budget spent, or a write whose outcome
    it cannot know), until it succeeds; any other error fails the test at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except StoreUnavailable:
            if time.monotonic() > deadline:
                raise AssertionError(f"the store did not serve {what} within {timeout}s") from None
            await asyncio.sleep(0.1)


def raft_term(cluster: EtcdCluster) -> int:
    """The newest raft term any answering member reports (it grows with every election)."""
    terms = []
    for member in cluster.members:
        status = member.status() if member.running else None
        header = status.get("header") if status else None
        if isinstance(header, dict):
            terms.append(int(str(header.get("raft_term") or 0)))
    return max(terms, default=0)


async def test_a_follower_crash_disturbs_neither_writes_nor_a_running_watch_and_it_catches_up(
    cluster: EtcdCluster, store: Store,
) -> None:
    assert isinstance(store, EtcdStore) and store.endpoints == cluster.endpoints and len(store.endpoints) == 3
    seen: list[Event] = []
    start = await store.current_revision() + 1

    async def follow() -> None:
        async for event in store.watch(PREFIX, from_revision=start):
            seen.append(event)

    watcher = asyncio.create_task(follow())
    try:
        before = await store.put(PREFIX + "before", b"1")
        await wait_until("the watch to deliver the put made before the crash",
                         lambda: any(e.kv == before for e in seen))

        leader = await wait_until("a leader", cluster.leader_index)
        follower = (leader + 1) % 3
        term = await asyncio.to_thread(raft_term, cluster)
        cluster.kill(follower)

        written: list[KeyValue] = []
        for i in range(5):
            try:
                written.append(await store.put(PREFIX + f"after-{i}", b"2"))
            except StoreUnavailable:
                # Only an election (a loaded machine can cause one) may cost a write, never the crash itself.
                assert await asyncio.to_thread(raft_term, cluster) > term, "a follower crash failed a write"
                written.append(await served("a write", lambda i=i: store.put(PREFIX + f"after-{i}", b"2")))
        assert [kv.key for kv in written] == [PREFIX + f"after-{i}" for i in range(5)]
        await wait_until("the watch to deliver every put made after the crash",
                         lambda: all(any(e.kv == kv for e in seen) for kv in written))
        assert not watcher.done()

        await asyncio.to_thread(cluster.restart, follower)
        alone = await EtcdStore.connect([cluster.endpoints[follower]])  # only the restarted member
        try:
            # A linearizable read on that member answers from its own state once it has applied
            # everything the leader committed: the writes made while it was down are there.
            for kv in written:
                assert await served(f"{kv.key} from the restarted member", lambda kv=kv: alone.get(kv.key)) == kv
        finally:
            await alone.close()
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)


async def test_a_leader_crash_elects_a_new_leader_and_the_store_keeps_serving_writes(
    cluster: EtcdCluster, store: Store,
) -> None:
    first = await store.put(PREFIX + "k", b"before")
    leader = await wait_until("a leader", cluster.leader_index)
    cluster.kill(leader)

    # A write sent just after the crash may be forwarded to the dead leader and time out with an unknown
    # outcome (StoreUnavailable); the store must serve a write again once the others have elected.
    second = await served("a write after the leader crash", lambda: store.put(PREFIX + "k", b"after"))
    new_leader = await wait_until("a new leader", cluster.leader_index)
    assert new_leader != leader
    assert second.mod_revision > first.mod_revision
    assert await store.get(PREFIX + "k") == second
    third = await store.put(PREFIX + "k2", b"next")  # and goes on serving
    assert third.mod_revision > second.mod_revision


async def test_quorum_loss_fails_writes_clearly_and_the_same_store_serves_again_when_quorum_returns(
    cluster: EtcdCluster, store: Store,
) -> None:
    before = [await store.put(PREFIX + f"k{i}", f"v{i}".encode()) for i in range(10)]
    leader = await wait_until("a leader", cluster.leader_index)
    lost = [leader, (leader + 1) % 3]
    for i in lost:
        cluster.kill(i)

    async with asyncio.timeout(DEADLINE):  # the store's own budget ends it well before; never a hang
        with pytest.raises(StoreUnavailable) as failed:
            await store.put(PREFIX + "during", b"x")
    message = str(failed.value)
    assert all(endpoint in message for endpoint in cluster.endpoints), message

    for i in lost:
        await asyncio.to_thread(cluster.restart, i, wait=False)
    await asyncio.to_thread(cluster.wait_healthy, DEADLINE)

    # The same store object, with no reconnect: everything written before the loss is there.
    listed = await served("a list after quorum returned", lambda: store.range(PREFIX + "k"))
    assert list(listed.kvs) == before
    after = await served("a write after quorum returned", lambda: store.put(PREFIX + "after", b"y"))
    assert after.mod_revision > before[-1].mod_revision
    assert await store.get(PREFIX + "after") == after


async def test_a_lease_granted_before_a_leader_crash_survives_the_election(
    cluster: EtcdCluster, store: Store,
) -> None:
    ttl = 3
    lease = await store.lease_grant(ttl)
    held = await store.put(PREFIX + "held", b"mine", lease=lease)
    leader = await wait_until("a leader", cluster.leader_index)
    cluster.kill(leader)
    killed_at = time.monotonic()

    await served("a keepalive after the leader crash", lambda: store.lease_keepalive(lease))
    assert await wait_until("a new leader", cluster.leader_index) != leader
    # Keep it alive past two TTLs from the crash: without working keepalives etcd would have expired
    # the lease and deleted the key by then (the time is what is being tested, not a guess at a moment).
    while time.monotonic() < killed_at + 2 * ttl:
        await served("a keepalive", lambda: store.lease_keepalive(lease))
        await asyncio.sleep(ttl / 6)
    assert await store.get(PREFIX + "held") == held
    await store.lease_revoke(lease)
    assert await store.get(PREFIX + "held") is None


async def test_a_paused_leader_is_replaced_and_rejoins_when_resumed(cluster: EtcdCluster) -> None:
    leader = await wait_until("a leader", cluster.leader_index)
    cluster.pause(leader)

    def replaced() -> bool:
        now = cluster.leader_index()
        return now is not None and now != leader

    try:
        await wait_until("another member to lead", replaced)
    finally:
        cluster.resume(leader)
    await asyncio.to_thread(cluster.wait_healthy, DEADLINE)
    assert await asyncio.to_thread(cluster.members[leader].healthy)
