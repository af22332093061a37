"""Leader election and fencing, on every backend: a deposed leader's write fails."""

from __future__ import annotations

import asyncio

import pytest

from federator.store.leader import LeaderElection, fenced_txn
from federator.store.protocol import Compare, FencedOut, Get, Put, StoreError

from .conftest import StoreFactory

WAIT = 15.0


async def test_one_leader_and_a_deposed_leader_cannot_write(store_factory: StoreFactory) -> None:
    store_a, store_b = await store_factory(), await store_factory()
    a = LeaderElection(store_a, holder="a", ttl_seconds=5)
    b = LeaderElection(store_b, holder="b", ttl_seconds=5)
    token_a = await a.campaign(timeout_seconds=WAIT)
    assert a.is_leader and token_a.holder == "a"
    assert await b.try_acquire() is None and not b.is_leader

    k = store_a.prefix + "jobs/j1"
    r = await fenced_txn(store_a, token_a, [Compare(k, "create", "=", 0)], [Put(k, b"by a")])
    assert r.succeeded

    waiting = asyncio.create_task(b.campaign(timeout_seconds=WAIT))
    await asyncio.sleep(0)
    assert not waiting.done()
    # A's lease lapses (revoked here, as an expiry would): its key vanishes.
    await store_a.lease_revoke(a.lease)
    token_b = await waiting
    assert token_b.revision > token_a.revision
    async with asyncio.timeout(WAIT):
        await a.lost.wait()
    assert not a.is_leader and b.is_leader

    before = await store_a.current_revision()
    with pytest.raises(FencedOut, match="not the leader"):
        await fenced_txn(store_a, token_a, [], [Put(k, b"late write by a")])
    with pytest.raises(FencedOut):
        await fenced_txn(store_a, token_a, [Compare(k, "version", "=", 99)], [Put(k, b"x")], [Get(k)])
    assert await store_a.current_revision() == before
    assert (await store_a.get(k)).value == b"by a"  # type: ignore[union-attr]

    r = await fenced_txn(store_b, token_b, [], [Put(k, b"by b")])
    assert r.succeeded and (await store_b.get(k)).value == b"by b"  # type: ignore[union-attr]

    # A's resign must not delete B's key.
    await a.resign()
    current = await b.current_leader()
    assert current is not None and current.create_revision == token_b.revision
    await b.resign()
    assert await b.current_leader() is None


async def test_leader_whose_keepalive_stops_is_replaced_after_the_ttl(store_factory: StoreFactory) -> None:
    store_a, store_b = await store_factory(), await store_factory()
    # a 2 s TTL: A's keepalive (every TTL/3) survives a loop stall of over a second on a loaded machine
    a = LeaderElection(store_a, holder="a", ttl_seconds=2)
    b = LeaderElection(store_b, holder="b", ttl_seconds=2)
    token_a = await a.campaign(timeout_seconds=WAIT)
    # A keeps its lease alive for a while ...
    candidate = asyncio.create_task(b.campaign(timeout_seconds=WAIT))
    loop = asyncio.get_running_loop()
    until = loop.time() + 2.5  # longer than the TTL
    while loop.time() < until:
        assert not candidate.done()
        await asyncio.sleep(0.1)
    assert a.is_leader
    # ... then stalls (a paused process): its keepalive task stops.
    task = a.keepalive_task
    assert task is not None
    task.cancel()
    token_b = await candidate
    assert token_b.revision > token_a.revision
    with pytest.raises(FencedOut):
        await fenced_txn(store_a, token_a, [], [Put(store_a.prefix + "x", b"stale")])
    assert await store_a.get(store_a.prefix + "x") is None
    await b.resign()
    await a.resign()


async def test_resign_hands_over_at_once_and_fenced_compares_still_apply(store_factory: StoreFactory) -> None:
    store_a, store_b = await store_factory(), await store_factory()
    a = LeaderElection(store_a, holder="a", ttl_seconds=30)
    token_a = await a.campaign(timeout_seconds=WAIT)
    k = store_a.prefix + "k"
    kv = await store_a.put(k, b"1")
    # The caller's own compare failing is not fencing: succeeded=False, reads returned.
    r = await fenced_txn(store_a, token_a, [Compare(k, "mod", "=", kv.mod_revision + 1)], [Put(k, b"2")], [Get(k)])
    assert not r.succeeded and r.results == (kv,)
    with pytest.raises(StoreError, match="only contain Get"):
        await fenced_txn(store_a, token_a, [], [], [Put(k, b"no")])
    await a.resign()
    assert a.lost.is_set() and not a.is_leader
    b = LeaderElection(store_b, holder="b", ttl_seconds=30)
    token_b = await b.campaign(timeout_seconds=WAIT)  # no TTL wait after a resign
    assert token_b.revision > token_a.revision
    with pytest.raises(FencedOut):
        await fenced_txn(store_a, token_a, [], [Put(k, b"x")])
    await b.resign()


async def test_a_candidate_that_wins_on_a_later_try_still_tells_who_waits_on_lost(
        store_factory: StoreFactory) -> None:
    # Issue 13: the hub watched the `lost` event it saw at start; winning later replaced that event, so
    # the hub never noticed losing the leadership it had won on a second try.
    store_a, store_b = await store_factory(), await store_factory()
    a = LeaderElection(store_a, holder="a", ttl_seconds=1)
    b = LeaderElection(store_b, holder="b", ttl_seconds=1)
    await a.campaign(timeout_seconds=WAIT)
    watching = asyncio.create_task(b.lost.wait())  # what hub._watch_leadership does at start
    token_b = asyncio.create_task(b.campaign(timeout_seconds=WAIT))
    await a.resign()
    won = await token_b
    assert b.is_leader and not watching.done()
    # B's leader key vanishes (an expiry, an operator): its keepalive notices, and whoever waits hears it.
    await store_b.delete(won.key)
    async with asyncio.timeout(WAIT):
        await watching
    assert not b.is_leader
    await b.resign()
