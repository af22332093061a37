"""A persistent simulated member with operators (`start_sim_cluster(..., directory=DIR)`) comes back with its
Jobs, JobSets and their children, and its operators and garbage collector pick up where they were: a JobSet
resumed after the restart runs to Completed, and the Job its JobSet lost while the member was down (removed from
the store file directly, as if deleted without its dependents) leaves no pods behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from operators_support import JOBSET_EXAMPLES, condition_status, read_yaml
from simapi_support import make_test_profile, wait_for

from federator.sim import kinds
from federator.sim.operators.served import JOB, JOBSET
from federator.sim.server import SimCluster, start_sim_cluster

PROFILE = make_test_profile(name="oprestart", operators=["jobset"],
                            kubelet={"startDelaySeconds": 0.1, "terminationSeconds": 0.1, "defaultRunSeconds": 0.5})


@pytest.fixture
async def started() -> AsyncIterator[list[SimCluster]]:
    running: list[SimCluster] = []
    try:
        yield running
    finally:
        for cluster in running:
            await cluster.stop()


async def items(cluster: SimCluster, rt: Any, namespace: str = "default") -> list[dict[str, Any]]:
    return (await cluster.storage.list(rt, namespace=namespace)).items


async def test_operators_pick_up_after_a_restart(tmp_path: Path, started: list[SimCluster]) -> None:
    first = await start_sim_cluster(PROFILE, directory=tmp_path)
    started.append(first)
    body = read_yaml(JOBSET_EXAMPLES / "jobset-paralleljobs.yaml")
    body["spec"]["suspend"] = True
    await first.storage.create(JOBSET, body, namespace="default")
    single = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "lone"},
              "spec": {"template": {"metadata": {"annotations": {"sim.federator.dev/duration-seconds": "3600"}},
                                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}
    await first.storage.create(JOB, single, namespace="default")

    async def ready() -> bool:
        jobs = {j["metadata"]["name"] for j in await items(first, JOB)}
        pods = [p for p in await items(first, kinds.PODS) if p["metadata"]["name"].startswith("lone-")]
        return jobs == {"paralleljobs-workers-0", "paralleljobs-driver-0", "lone"} and len(pods) == 1

    await wait_for("the jobset's jobs and the lone job's pod", ready)
    started.remove(first)
    await first.stop()

    # while the member is down, the lone Job disappears without its pod (as a store edit would)
    from federator.store.sqlite import SqliteStore

    store = await SqliteStore.open(tmp_path / f"{PROFILE.name}.db", prefix=f"/sim/{PROFILE.name}/")
    try:
        keys = [kv.key for kv in (await store.range(f"/sim/{PROFILE.name}/")).kvs if kv.key.endswith("/default/lone")]
        assert len(keys) == 1
        await store.delete(keys[0])
    finally:
        await store.close()

    second = await start_sim_cluster(PROFILE, directory=tmp_path)
    started.append(second)

    async def orphan_gone() -> bool:
        return not [p for p in await items(second, kinds.PODS) if p["metadata"]["name"].startswith("lone-")]

    await wait_for("the lost job's pod to be collected", orphan_gone)
    js = await second.storage.get(JOBSET, namespace="default", name="paralleljobs")
    assert condition_status(js, "Suspended") == "True"

    def resume(obj: dict[str, Any]) -> dict[str, Any]:
        obj["spec"]["suspend"] = False
        return obj

    await second.storage.guaranteed_update(JOBSET, namespace="default", name="paralleljobs", mutate=resume)

    async def completed() -> bool:
        obj = await second.storage.get(JOBSET, namespace="default", name="paralleljobs")
        return condition_status(obj, "Completed") == "True"

    await wait_for("the resumed jobset to complete", completed, timeout=30)
