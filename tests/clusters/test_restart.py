"""A hub restart resumes from its checkpoints: snapshots load at once (stale until re-synced) and
every watch resumes from the stored resourceVersion with zero LIST calls (counted by the simulator).
The hub store is a real SQLite file, reopened by the second hub."""

from __future__ import annotations

from pathlib import Path

from clustertest_support import (
    Hub,
    Sims,
    create_pod,
    expected_snapshot,
    profile,
    registration,
    running,
    same_state,
    wait_until,
)

from federator.clusters.checkpoint import load_checkpoints
from federator.sim import kinds


async def test_restart_resumes_without_relist(sims: Sims, tmp_path: Path) -> None:
    a = await sims.start(profile("site-a", gpu_nodes=3, cpu_nodes=1))
    b = await sims.start(profile("site-b", scheduler="kube-batch", gpu_nodes=2, cpu_nodes=0,
                                 product="H100-80GB-HBM3", datasets=False))
    bodies = {"site-a": registration("site-a", sims.kubeconfigs["site-a"]),
              "site-b": registration("site-b", sims.kubeconfigs["site-b"], scheduler="kube-batch")}
    url = f"sqlite://{tmp_path / 'hub.db'}"

    hub = await Hub.open(url)
    try:
        async with running(hub):
            for body in bodies.values():
                await hub.register(body)
            for name in bodies:
                await hub.wait_condition(name, "Ready", "True")
            await create_pod(a, name="p1", node="gpu-0000", gpus=8, job="job-1", restart="Always")
            await create_pod(b, name="p2", node="gpu-0001", gpus=4, job="job-2", restart="Always")
            await wait_until(lambda: (s := hub.snapshot("site-b")) is not None and s.bound_pods.get("job-2") == 1,
                             what="site-b shows job-2")
            await wait_until(lambda: (s := hub.snapshot("site-a")) is not None and s.bound_pods.get("job-1") == 1,
                             what="site-a shows job-1")
            before_stop = {name: hub.snapshot(name) for name in bodies}
        # the controller flushed its final state on the way out
        stored = await load_checkpoints(hub.store)
        assert set(stored) == {"site-a", "site-b"}
    finally:
        await hub.close()

    # While the hub is down the members move on (still inside their watch windows).
    await create_pod(a, name="p3", node="gpu-0001", gpus=2, job="job-3", restart="Always")
    await a.storage.delete(kinds.PODS, namespace="default", name="p1", grace_period_seconds=0)
    await b.faults.gpu_unhealthy("gpu-0000", 2)
    lists_before = {name: dict(sims.clusters[name].stats()["requests"].get("list", {})) for name in bodies}
    for name, counts in lists_before.items():  # the first hub listed each resource exactly once
        assert counts and set(counts.values()) == {1}, (name, counts)

    hub2 = await Hub.open(url)
    try:
        async with running(hub2):
            # loaded at once, before any member answered: the checkpointed state, marked unhealthy (stale)
            for name in bodies:
                snap = hub2.snapshot(name)
                assert snap is not None and not snap.info.healthy
                assert same_state(snap, before_stop[name]), name
            for name in bodies:
                await hub2.wait_condition(name, "Ready", "True")
            # the stored Ready=True may still be the first hub's: wait for this hub's snapshot to be healthy too
            await wait_until(
                lambda: (s := hub2.snapshot("site-a")) and s.info.healthy and "job-1" not in s.bound_pods
                and s.bound_pods.get("job-3"), what="site-a caught up and healthy")
            await wait_until(lambda: (s := hub2.snapshot("site-b")) and s.nodes["gpu-0000"].allocatable.gpu == 6,
                             what="site-b caught up")
            # Zero LIST calls on resume, as the members count them (before the test lists anything itself).
            for name in bodies:
                assert sims.clusters[name].stats()["requests"].get("list", {}) == lists_before[name], name
                assert all(r.lists == 0 for r in hub2.controller.syncs[name].reflectors.values()), name
            for name, body in bodies.items():
                await wait_until(lambda name=name, body=body: _converged(hub2, sims, name, body),
                                 what=f"{name} equal to a fresh LIST after resume")
    finally:
        await hub2.close()


async def _converged(hub: Hub, sims: Sims, name: str, body: dict) -> bool:
    want = await expected_snapshot(sims.clusters[name], sims.kubeconfigs[name], body["spec"])
    return same_state(hub.snapshot(name), want)
