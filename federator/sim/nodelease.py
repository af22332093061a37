"""Node Leases: the heartbeat every kubelet of a simulated cluster keeps.

A real kubelet holds one `coordination.k8s.io/v1` Lease per node in
`kube-node-lease` (name and holderIdentity = the node name,
leaseDurationSeconds 40, an ownerReference to its Node) and renews it every
10 s (a quarter of the duration); `kubectl describe node` shows it. Here one
`NodeLeases` renews the Leases of every node of the cluster from one timer:
nodes are spread over `slots` slots by a stable hash of their name, and each
tick (renew_seconds / slots) renews one slot in a batch. A thousand nodes
thus cost a hundred small writes a second, evenly, never a burst of all of
them. A node whose kubelet is down (not Ready) is not renewed, so its Lease
goes stale as a real one does; the Lease of a deleted node is deleted (the
garbage collector would, through the ownerReference).

It writes through `ObjectStorage` like every controller of the simulator,
keeps the last Lease it wrote per node (an update needs no read of its own)
and must never import anything of the hub.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import zlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from federator.apiserver.errors import ApiError
from federator.apis.timestamps import format_micro_time
from federator.obs import METRICS
from federator.runtime.waits import LoopSlice, wait_event

if TYPE_CHECKING:
    from federator.apiserver.registry import Registry, ResourceType
    from federator.apiserver.storage import ObjectStorage

JSON = dict[str, Any]

NODE_LEASE_NAMESPACE = "kube-node-lease"
#: the kubelet's defaults: --node-lease-duration-seconds 40, renewed every 0.25 of it
NODE_LEASE_DURATION_SECONDS = 40
NODE_LEASE_RENEW_SECONDS = 10.0
DEFAULT_SLOTS = 10


@dataclass(frozen=True, slots=True)
class NodeState:
    """What the lease renewer needs to know of a node."""

    uid: str
    ready: bool


def lease_slot(node: str, slots: int) -> int:
    """The slot a node's renewals fall in (stable across restarts and processes)."""
    return zlib.crc32(node.encode()) % slots


def _micro_now() -> str:
    return format_micro_time(dt.datetime.now(dt.UTC))


def node_lease(node: str, *, node_uid: str, renew_time: str,
               duration_seconds: int = NODE_LEASE_DURATION_SECONDS) -> JSON:
    """The Lease a kubelet creates for its node (component-helpers' lease controller)."""
    meta: JSON = {"name": node, "namespace": NODE_LEASE_NAMESPACE}
    if node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
    return {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
        "spec": {"holderIdentity": node, "leaseDurationSeconds": duration_seconds, "renewTime": renew_time},
    }


class NodeLeases:
    """The node Leases of every kubelet of one simulated cluster (see the module docstring)."""

    def __init__(
        self,
        *,
        storage: ObjectStorage,
        registry: Registry,
        cluster: str,
        logger: Any,
        renew_seconds: float = NODE_LEASE_RENEW_SECONDS,
        duration_seconds: int = NODE_LEASE_DURATION_SECONDS,
        slots: int = DEFAULT_SLOTS,
    ) -> None:
        self.rt: ResourceType | None = registry.get("coordination.k8s.io", "v1", "leases")
        self.storage = storage
        self.cluster = cluster
        self.log = logger
        self.renew_seconds = renew_seconds
        self.duration_seconds = duration_seconds
        self.slots = max(1, slots)
        #: node -> the Lease as last written (with its resourceVersion)
        self.leases: dict[str, JSON] = {}
        self._slot_of: dict[str, int] = {}
        self._gone: set[str] = set()
        self._loaded = False
        #: renewals written, creations, deletions (for tests and the bench)
        self.renewals = 0
        self.created = 0
        self.deleted = 0
        self.passes = 0

    # ------------------------------------------------------------ node changes

    def node_deleted(self, node: str) -> None:
        """The node is gone: its Lease goes at the next tick."""
        self._gone.add(node)

    def nodes_listed(self, nodes: Collection[str]) -> None:
        """After a full list of nodes: Leases of nodes that vanished meanwhile go too."""
        self._gone.update(n for n in self.leases if n not in nodes)

    # ------------------------------------------------------------ loop

    async def run(self, stop: asyncio.Event, nodes: Callable[[], Mapping[str, NodeState]]) -> None:
        """Renew one slot per tick until `stop`; `nodes()` is the kubelets' current view of the nodes."""
        if self.rt is None:
            self.log.info("the registry serves no Lease kind; no node leases")
            return
        tick_seconds = self.renew_seconds / self.slots
        tick = 0
        next_at = time.monotonic()
        while not stop.is_set():
            try:
                await self.renew_pass(nodes(), slot=None if not self._loaded else tick % self.slots)
            except ApiError as e:
                self.log.info("node lease pass failed; retrying next tick", code=e.code, message=e.message)
            tick += 1
            next_at += tick_seconds
            now = time.monotonic()
            if next_at < now:  # fell behind (a loaded machine): skip ahead, never burst to catch up
                next_at = now
            if await wait_event(stop, next_at - now):
                return

    async def renew_pass(self, nodes: Mapping[str, NodeState], *, slot: int | None) -> int:
        """Create missing Leases and renew those of Ready nodes in `slot` (None: every node); returns the
        number of writes. The first pass also learns the Leases that already exist (one list)."""
        rt = self.rt
        if rt is None:
            return 0
        t0 = time.perf_counter()
        if not self._loaded:
            listed = await self.storage.list(rt, namespace=NODE_LEASE_NAMESPACE)
            self.leases = {str(obj["metadata"]["name"]): obj for obj in listed.items}
            self._loaded = True
        writes = 0
        share = LoopSlice()
        for node in list(self._gone):
            self._gone.discard(node)
            if node in nodes:
                continue  # it came back meanwhile
            if self.leases.pop(node, None) is not None:
                try:
                    await self.storage.delete(rt, namespace=NODE_LEASE_NAMESPACE, name=node)
                    self.deleted += 1
                except ApiError as e:
                    if e.code != 404:
                        raise
        renew_time = _micro_now()
        for node, state in nodes.items():
            if not state.ready:
                continue  # a dead kubelet renews nothing
            known = self.leases.get(node)
            if known is not None and slot is not None and self._slot(node) != slot:
                continue
            await self._write(rt, node, state, known, renew_time)
            writes += 1
            await share.maybe_yield()
        self.passes += 1
        if writes:
            METRICS.loop_phase_seconds.labels(loop="sim-node-leases", phase="renew").observe(
                time.perf_counter() - t0)
        return writes

    def _slot(self, node: str) -> int:
        slot = self._slot_of.get(node)
        if slot is None:
            slot = self._slot_of[node] = lease_slot(node, self.slots)
        return slot

    async def _write(self, rt: ResourceType, node: str, state: NodeState, known: JSON | None,
                     renew_time: str) -> None:
        if known is not None:
            lease = dict(known)
            lease["spec"] = {**(known.get("spec") or {}), "holderIdentity": node,
                             "leaseDurationSeconds": self.duration_seconds, "renewTime": renew_time}
            try:
                self.leases[node] = await self.storage.update(rt, lease, namespace=NODE_LEASE_NAMESPACE, name=node)
                self.renewals += 1
                return
            except ApiError as e:
                if e.code == 409:  # someone else wrote it: take theirs, renew at the next turn
                    self.leases[node] = await self.storage.get(rt, namespace=NODE_LEASE_NAMESPACE, name=node)
                    return
                if e.code != 404:
                    raise
        try:
            self.leases[node] = await self.storage.create(
                rt, node_lease(node, node_uid=state.uid, renew_time=renew_time,
                               duration_seconds=self.duration_seconds), namespace=NODE_LEASE_NAMESPACE)
            self.created += 1
        except ApiError as e:
            if e.code != 409:
                raise
            self.leases[node] = await self.storage.get(rt, namespace=NODE_LEASE_NAMESPACE, name=node)
