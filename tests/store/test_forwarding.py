"""federator.store.forwarding: the wrappers of a store (FencedStore, the hub's store slot) forward watch,
revisions, compaction, usage and leases to the store they wrap, the one there now."""

from __future__ import annotations

import pytest

from federator.store.forwarding import ForwardsUpkeep
from federator.store.memory import MemoryStore
from federator.store.protocol import Compacted, LeaseNotFound, Store

PREFIX = "/fwd/"


class Slot(ForwardsUpkeep):
    def __init__(self, store: Store) -> None:
        self.store = store

    def forward_to(self) -> Store:
        return self.store


async def test_every_upkeep_call_reaches_the_store_forwarded_to() -> None:
    first, second = MemoryStore(prefix=PREFIX), MemoryStore(prefix=PREFIX)
    try:
        slot = Slot(first)
        await first.put(PREFIX + "a", b"1")
        await first.put(PREFIX + "a", b"2")
        assert await slot.current_revision() == await first.current_revision() != await second.current_revision()
        assert (await slot.usage()).keys == 1
        await slot.compact(await first.current_revision())
        assert await slot.compact_revision() == await first.compact_revision() > 0
        with pytest.raises(Compacted):
            async for _ in slot.watch(PREFIX, from_revision=1):
                break
        lease = await slot.lease_grant(30)
        await slot.lease_keepalive(lease)
        await first.put(PREFIX + "leased", b"x", lease=lease)
        await slot.lease_revoke(lease)
        assert await first.get(PREFIX + "leased") is None
        with pytest.raises(LeaseNotFound):
            await slot.lease_keepalive(lease)
        # the store forwarded to is looked up on each call
        slot.store = second
        assert await slot.current_revision() == await second.current_revision()
        assert await slot.compact_revision() == await second.compact_revision() == 0
    finally:
        await first.close()
        await second.close()


def test_a_wrapper_that_names_no_store_says_so() -> None:
    with pytest.raises(NotImplementedError):
        ForwardsUpkeep().forward_to()
