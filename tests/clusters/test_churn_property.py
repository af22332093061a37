"""Property: after any churn, the hub's snapshot of a member equals a snapshot built from a fresh LIST.

Hypothesis draws sequences of member-side changes (pods created bound or bound later, finished,
deleted; nodes failing and recovering, cordoned, GPUs turning unhealthy, dataset labels; watch
connections dropped) against one real SimCluster that a running hub syncs; after each sequence
the hub must converge to exactly what a fresh LIST shows, through the incremental path only
(no re-list: dropped watches resume from their resourceVersion).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from clustertest_support import (
    Hub,
    Sims,
    bind,
    create_pod,
    describe_difference,
    expected_snapshot,
    profile,
    registration,
    same_state,
    wait_until,
)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from federator.apiserver.errors import ApiError
from federator.sim import kinds

NODES = ["gpu-0000", "gpu-0001", "gpu-0002", "cpu-0000"]

op = st.one_of(
    st.tuples(st.just("bound"), st.sampled_from(NODES), st.integers(0, 4), st.sampled_from(["j1", "j2", ""]),
              st.sampled_from([None, 0.1, 0.3])),
    st.tuples(st.just("bind-later"), st.sampled_from(NODES), st.integers(0, 2)),
    st.tuples(st.just("delete"), st.integers(0, 30), st.booleans()),
    st.tuples(st.just("node-fail"), st.sampled_from(NODES)),
    st.tuples(st.just("node-recover"), st.sampled_from(NODES)),
    st.tuples(st.just("gpu-unhealthy"), st.sampled_from(NODES[:3]), st.integers(0, 3)),
    st.tuples(st.just("cordon"), st.sampled_from(NODES), st.booleans()),
    st.tuples(st.just("dataset"), st.sampled_from(NODES), st.sampled_from(["coco", "imagenet-1k"])),
    st.tuples(st.just("drop-watches")),
)

_names = itertools.count()


async def _apply(sims: Sims, pods: list[str], step: tuple) -> None:
    sim = sims.clusters["prop"]
    kind = step[0]
    if kind == "bound":
        _, node, gpus, job, duration = step
        name = f"p{next(_names)}"
        await create_pod(sim, name=name, node=node, gpus=gpus, job=job or None, duration=duration,
                         restart="Always" if duration is None else "Never")
        pods.append(name)
    elif kind == "bind-later":
        _, node, gpus = step
        name = f"p{next(_names)}"
        await create_pod(sim, name=name, gpus=gpus, job="j3", restart="Always")
        pods.append(name)
        await bind(sim, name=name, node=node)
    elif kind == "delete":
        _, index, graceful = step
        if pods:
            name = pods[index % len(pods)]
            try:
                await sim.storage.delete(kinds.PODS, namespace="default", name=name,
                                         grace_period_seconds=None if graceful else 0)
            except ApiError as e:
                if e.code != 404:
                    raise
    elif kind == "node-fail":
        await sim.faults.node_failure(step[1])
    elif kind == "node-recover":
        await sim.faults.node_recover(step[1])
    elif kind == "gpu-unhealthy":
        await sim.faults.gpu_unhealthy(step[1], step[2])
    elif kind == "cordon":
        await sim.storage.patch(kinds.NODES, namespace=None, name=step[1],
                                patch={"spec": {"unschedulable": step[2]}},
                                content_type="application/merge-patch+json")
    elif kind == "dataset":
        await sim.storage.patch(kinds.NODES, namespace=None, name=step[1],
                                patch={"metadata": {"labels": {f"federator.dev/dataset.{step[2]}": "1000"}}},
                                content_type="application/merge-patch+json")
    elif kind == "drop-watches":
        sim.faults.drop_watches()


@dataclass
class Env:
    sims: Sims
    hub: Hub
    body: dict[str, Any]
    pods: list[str] = field(default_factory=list)


@pytest.fixture
async def env(sims: Sims) -> AsyncIterator[Env]:
    await sims.start(profile("prop", gpu_nodes=3, cpu_nodes=1))
    hub = await Hub.open("memory://")
    body = registration("prop", sims.kubeconfigs["prop"])
    await hub.start_sync()
    try:
        await hub.register(body)
        await hub.wait_condition("prop", "Ready", "True")
        yield Env(sims=sims, hub=hub, body=body)
    finally:
        await hub.close()


# No shrinking: every example costs real seconds against a live cluster, and state carries over.
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck),
          phases=(Phase.explicit, Phase.reuse, Phase.generate), database=None)
@given(steps=st.lists(op, min_size=1, max_size=12))
async def test_snapshot_equals_a_fresh_list_after_random_churn(env: Env, steps: list[tuple[Any, ...]]) -> None:
    sim, hub = env.sims.clusters["prop"], env.hub
    for step in steps:
        await _apply(env.sims, env.pods, step)

    async def converged() -> bool:
        want = await expected_snapshot(sim, env.sims.kubeconfigs["prop"], env.body["spec"])
        return same_state(hub.snapshot("prop"), want)

    try:
        await wait_until(converged, timeout=8, interval=0.1, what="snapshot equal to a fresh LIST")
    except AssertionError:
        want = await expected_snapshot(sim, env.sims.kubeconfigs["prop"], env.body["spec"])
        raise AssertionError(f"after {steps}:\n{describe_difference(hub.snapshot('prop'), want)}") from None
    snap = hub.snapshot("prop")
    assert snap is not None
    sync = hub.controller.syncs["prop"]
    # the incrementally maintained index equals one built from scratch
    assert snap.index == sync.builder.rebuilt().index
    # churn, dropped watches and node failures never needed a re-list: one LIST per resource
    assert all(r.lists == 1 for r in sync.reflectors.values()), [r.lists for r in sync.reflectors.values()]
