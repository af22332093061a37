"""`ForwardsUpkeep`: the Store operations that are neither reads nor writes (watch, revisions, compaction,
usage, leases), forwarded to another store. The wrappers of a store share it: leader.py's `FencedStore`
(fences writes, forwards the rest to its inner store) and the hub's store slot (hub/app.py: forwards
everything to the store opened at start-up)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from federator.store.protocol import Event, Store, StoreUsage

__all__ = ["ForwardsUpkeep"]


class ForwardsUpkeep:
    """Forwards watch, current_revision, compact, compact_revision, usage and the lease calls to
    `forward_to()`, which a subclass defines (called on every call: the store may change)."""

    def forward_to(self) -> Store:
        raise NotImplementedError

    def watch(self, prefix: str, *, from_revision: int) -> AsyncIterator[Event]:
        return self.forward_to().watch(prefix, from_revision=from_revision)

    async def current_revision(self) -> int:
        return await self.forward_to().current_revision()

    async def compact(self, revision: int) -> None:
        await self.forward_to().compact(revision)

    async def compact_revision(self) -> int:
        return await self.forward_to().compact_revision()

    async def usage(self) -> StoreUsage:
        return await self.forward_to().usage()

    async def lease_grant(self, ttl_seconds: float) -> int:
        return await self.forward_to().lease_grant(ttl_seconds)

    async def lease_keepalive(self, lease: int) -> None:
        await self.forward_to().lease_keepalive(lease)

    async def lease_revoke(self, lease: int) -> None:
        await self.forward_to().lease_revoke(lease)
