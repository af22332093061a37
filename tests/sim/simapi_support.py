"""Helpers for tests of the simulated cluster's API (fixtures: conftest.py).

`ThreadedSim` runs one real SimCluster (HTTPS on a loopback port, bearer
token, the gang scheduler and kubelet running) in a background thread with
its own event loop, so that the blocking official client and kubectl
subprocesses can talk to it from the test, and async tests can too. The
cluster lives for one test module; tests isolate themselves with their own
namespace (`sim_cluster.new_namespace()`).

Other helpers may add fixtures here with small additive edits.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from federator.sim.profile import ClusterProfile, parse_profile
from federator.sim.server import SimCluster

T = TypeVar("T")

#: A small cluster running every kind of scheduler: 2 GPU nodes, 2 CPU nodes.
TEST_PROFILE: dict[str, Any] = {
    "apiVersion": "sim.federator.dev/v1alpha1",
    "kind": "ClusterProfile",
    "name": "apitest",
    "location": {"type": "on-prem", "region": "lab-1", "site": "lab"},
    "network": {"fabric": "infiniband", "bandwidthGbps": 200},
    "schedulers": [{"type": "default"}, {"type": "volcano"}, {"type": "coscheduling"}, {"type": "kube-batch"}],
    "kubelet": {"startDelaySeconds": 0.2, "terminationSeconds": 0.1},
    "nodePools": [
        {"name": "gpu", "count": 2, "cpu": "32", "memory": "256Gi", "gpus": 8, "gpuProduct": "NVIDIA-A100-SXM4-80GB",
         "rdmaHca": 1},
        {"name": "cpu", "count": 2, "cpu": "16", "memory": "64Gi"},
    ],
}


def make_test_profile(**overrides: Any) -> ClusterProfile:
    data = dict(TEST_PROFILE)
    data.update(overrides)
    return parse_profile(data, source="tests/sim/conftest.py")


class ThreadedSim:
    """A SimCluster served from its own thread and event loop."""

    def __init__(self, profile: ClusterProfile, workdir: Path, **cluster_kw: Any) -> None:
        self.profile = profile
        self.workdir = workdir
        self._cluster_kw = cluster_kw
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=f"sim-{profile.name}", daemon=True)
        self._names = itertools.count()
        self.cluster: SimCluster | None = None
        self.kubeconfig = workdir / f"{profile.name}.kubeconfig"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> ThreadedSim:
        self._thread.start()

        async def boot() -> SimCluster:
            cluster = SimCluster(self.profile, **self._cluster_kw)
            await cluster.start()
            return cluster

        self.cluster = self.run(boot)
        self.cluster.write_kubeconfig(self.kubeconfig)
        return self

    def run(self, fn: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
        """Run a coroutine on the cluster's loop and wait for its result."""
        fut: Future[T] = asyncio.run_coroutine_threadsafe(_call(fn), self.loop)
        return fut.result(timeout)

    async def arun(self, fn: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
        """`run` for async tests (does not block the test's own loop)."""
        fut = asyncio.run_coroutine_threadsafe(_call(fn), self.loop)
        return await asyncio.wait_for(asyncio.wrap_future(fut), timeout)

    @property
    def c(self) -> SimCluster:
        assert self.cluster is not None
        return self.cluster

    def new_namespace(self, prefix: str = "t") -> str:
        name = f"{prefix}-{next(self._names)}"
        from federator.sim import kinds

        async def create() -> None:
            await self.c.storage.create(kinds.NAMESPACES, {"metadata": {"name": name}}, namespace=None)

        self.run(create)
        return name

    def stop(self) -> None:
        if self.cluster is not None:
            self.run(self.cluster.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


async def _call(fn: Callable[[], Awaitable[T]]) -> T:
    return await fn()


def raw_request(sim: ThreadedSim, method: str, path: str, body: bytes | None = None,
                content_type: str = "application/json") -> tuple[int, Any]:
    """One HTTPS request with the cluster's token, bypassing every client-side check."""
    import json
    import ssl
    import urllib.error
    import urllib.request

    ctx = ssl.create_default_context(cadata=sim.c.ca_pem.decode())
    req = urllib.request.Request(sim.c.url + path, data=body, method=method,
                                 headers={"Authorization": f"Bearer {sim.c.token}", "Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=20) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.loads(e.read() or b"null")


def fault_lab_profile(name: str = "fault-lab") -> ClusterProfile:
    """A small cluster (two 8-GPU nodes, default scheduler, fast kubelet) for the fault tests."""
    return parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
        "location": {"type": "on-prem", "region": "lab"},
        "network": {"fabric": "roce", "bandwidthGbps": 100},
        "schedulers": [{"type": "default"}],
        "kubelet": {"startDelaySeconds": 0.05, "terminationSeconds": 0.05},
        "nodePools": [{"name": "gpu", "count": 2, "cpu": "32", "memory": "256Gi", "gpus": 8,
                       "gpuProduct": "A100-SXM4-80GB"}],
    })


async def wait_for(what: str, check: Callable[[], Awaitable[Any]], timeout: float = 15.0) -> Any:
    """Poll the async `check` until it returns something truthy; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)
