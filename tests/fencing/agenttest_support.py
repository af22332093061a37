"""Helpers for the fence agent tests (fixtures: conftest.py).

- `Member`: a real SimCluster on the test's loop with its admin kubeconfig (what the hub uses) and
  its agent kubeconfig (the `federator-agent` identity), plus helpers to make and read the objects
  a hub dispatches (pods and PodGroups labelled `federator.dev/hub`);
- `Renewer`: renews the hub's Lease over HTTPS as the admin identity, like the hub does, until
  stopped (so a partition `from` the admin stops it);
- `RecordingLog`: a logger that keeps every line, for asserting on what the agent said;
- `wait_until`: polling with a deadline (never a bare sleep).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from federator.clusters.client import LEASES, ClientTimeouts, MemberApiError, MemberClient, MemberClientError
from federator.delegation.adapter import LABEL_HUB, LABEL_ON_CLUSTER_LOSS
from federator.sim import kinds
from federator.sim.profile import parse_profile
from federator.sim.server import SimCluster

HUB = "hub-a"
OTHER_HUB = "hub-b"
NAMESPACE = "federator-system"


async def wait_until(what: str, check: Callable[[], Any], *, timeout: float = 30.0) -> Any:
    """Poll `check` (sync or async) until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class RecordingLog:
    """A structlog-like logger that records (level, event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def bind(self, **_: Any) -> RecordingLog:
        return self

    def _add(self, level: str, event: str, **fields: Any) -> None:
        self.lines.append((level, event, fields))

    def debug(self, event: str, **fields: Any) -> None:
        self._add("debug", event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self._add("info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._add("warning", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self._add("error", event, **fields)

    def find(self, text: str) -> list[dict[str, Any]]:
        return [fields for _, event, fields in self.lines if text in event]


class Member:
    """A simulated member cluster serving Volcano and coscheduling PodGroups (not kube-batch)."""

    def __init__(self, cluster: SimCluster, directory: Path) -> None:
        self.cluster = cluster
        self.admin_kubeconfig = cluster.write_kubeconfig(directory / f"{cluster.name}.kubeconfig")
        self.agent_kubeconfig = cluster.write_agent_kubeconfig(directory / f"{cluster.name}-agent.kubeconfig")
        self._names = 0

    @classmethod
    async def start(cls, directory: Path) -> Member:
        profile = parse_profile({
            "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": "fence-lab",
            "location": {"type": "on-prem", "region": "lab"},
            "network": {"fabric": "infiniband", "bandwidthGbps": 200},
            "schedulers": [{"type": "default"}, {"type": "volcano"}, {"type": "coscheduling"}],
            "kubelet": {"startDelaySeconds": 0.05, "terminationSeconds": 0.05},
            "nodePools": [{"name": "cpu", "count": 2, "cpu": "32", "memory": "128Gi"}],
        }, source="tests/fencing")
        cluster = SimCluster(profile)
        await cluster.start()
        return cls(cluster, directory)

    async def stop(self) -> None:
        await self.cluster.stop()

    @property
    def storage(self) -> Any:
        return self.cluster.storage

    async def namespace(self, prefix: str = "ns") -> str:
        self._names += 1
        name = f"{prefix}-{self._names}"
        await self.storage.create(kinds.NAMESPACES, {"metadata": {"name": name}}, namespace=None)
        return name

    async def pod(self, namespace: str, name: str, *, hub: str | None, scheduler: str = "nobody",
                  on_loss: str | None = None) -> dict[str, Any]:
        labels = {LABEL_HUB: hub} if hub else {}
        if on_loss:
            labels[LABEL_ON_CLUSTER_LOSS] = on_loss
        created: dict[str, Any] = await self.storage.create(kinds.PODS, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "image": "trainer:1.4"}]},
        }, namespace=namespace)
        return created

    async def podgroup(self, rt: Any, namespace: str, name: str, *, hub: str | None,
                       on_loss: str | None = None) -> dict[str, Any]:
        labels = {LABEL_HUB: hub} if hub else {}
        if on_loss:
            labels[LABEL_ON_CLUSTER_LOSS] = on_loss
        created: dict[str, Any] = await self.storage.create(rt, {
            "apiVersion": rt.api_version, "kind": "PodGroup", "metadata": {"name": name, "labels": labels},
            "spec": {"minMember": 1},
        }, namespace=namespace)
        return created

    async def objects(self) -> set[tuple[str, str, str]]:
        """(kind, namespace, name) of every pod and PodGroup in the cluster."""
        found: set[tuple[str, str, str]] = set()
        for rt, tag in ((kinds.PODS, "pod"), (kinds.VOLCANO_PODGROUPS, "volcano"),
                        (kinds.COSCHEDULING_PODGROUPS, "coscheduling")):
            for item in (await self.storage.list(rt)).items:
                found.add((tag, item["metadata"]["namespace"], item["metadata"]["name"]))
        return found

    async def events(self, reason: str) -> list[dict[str, Any]]:
        listed = await self.storage.list(kinds.EVENTS, namespace=NAMESPACE)
        return [e for e in listed.items if e.get("reason") == reason]


class Renewer:
    """The test's hub: creates the Lease, then renews it every `every` seconds over HTTPS (admin)."""

    def __init__(self, client: MemberClient, *, identity: str = HUB, duration: int = 2, every: float = 0.3) -> None:
        self.client = client
        self.identity = identity
        self.duration = duration
        self.every = every
        self.renewals = 0
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, member: Member, **kw: Any) -> Renewer:
        client = await MemberClient.from_kubeconfig(member.admin_kubeconfig, cluster=member.cluster.name,
                                                    timeouts=ClientTimeouts(connect=1.0, request=1.0))
        return cls(client, **kw)

    async def renew_once(self) -> None:
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration, "renewTime": micro_now()}
        try:
            await self.client.patch(LEASES, namespace=NAMESPACE, name=self.identity, patch={"spec": spec})
        except MemberApiError as e:
            if e.code != 404:
                raise
            await self.client.create(LEASES, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.identity, "namespace": NAMESPACE},
                "spec": {**spec, "acquireTime": spec["renewTime"], "leaseTransitions": 0},
            }, namespace=NAMESPACE)
        self.renewals += 1

    def start(self) -> None:
        async def loop() -> None:
            while True:
                try:
                    await self.renew_once()
                except MemberClientError:
                    self.failures += 1
                await asyncio.sleep(self.every)

        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(loop(), name="test-hub-renewer")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        await self.stop()
        await self.client.close()
