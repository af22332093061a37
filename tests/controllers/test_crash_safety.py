"""Crash safety: kill -9 a real hub process at each point of a job's delegation, restart it, and check
that every job ends with exactly one copy (one epoch) in exactly one cluster, and that none is lost.

The member clusters are real SimClusters served by this test process; the hub is `federator up
--clusters DIR --store sqlite://...` in a subprocess. The dispatcher's test-only crash hook
(FEDERATOR_TEST_CRASH_AT + FEDERATOR_TEST_CRASH_JOB, see federator/controllers/dispatch.py) makes the hub
SIGKILL itself:

(a) after-decision: the decision is in the job's status, nothing exists in the member yet;
(b) mid-dispatch: the PodGroup and about half of the pods exist;
(c) after-dispatch: every object exists, the dispatch is not recorded in the job's status yet.

Each crash is checked to have happened where it should (the member state at the crash), then the next
hub start re-dispatches the Placed jobs. At the end every job (the three targets and bystanders
submitted around the crashes) is dispatched at epoch 1 (never placed twice), its objects live in one
cluster only, and objects that existed before a restart were not re-created (same uids).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from federator.delegation.adapter import LABEL_EPOCH

from .jobtest_support import (
    Federation,
    HubProcess,
    condition,
    gpu_job,
    placement_of,
    stored_jobs,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def fed(tmp_path: Path) -> AsyncIterator[Federation]:
    federation = Federation(tmp_path / "members")
    await federation.start(["onprem-rdma-a100", "cloud-eth-h100"], **{
        "onprem-rdma-a100": {"gpu_nodes": 4, "cpu_nodes": 2},
        "cloud-eth-h100": {"gpu_nodes": 2, "cpu_nodes": 1},
    })
    try:
        yield federation
    finally:
        await federation.stop()


def cpu_job(name: str, *, pods: int, namespace: str = "crash") -> dict[str, Any]:
    """Many small pods: a dispatch of many objects (so 'mid-dispatch' is really in the middle)."""
    body = gpu_job(name, namespace=namespace, workers=pods, gpus=0)
    body["spec"]["roles"][0]["template"]["resources"] = {"cpu": "500m", "memory": "1Gi"}
    return body


async def crashed_state(hub: HubProcess, fed: Federation, name: str) -> tuple[dict[str, Any], int, int]:
    """(job as stored, member pods of it, member PodGroups of it) right after a crash."""
    job = (await stored_jobs(hub.store_url))[name]
    where = await fed.where(job["metadata"]["uid"])
    groups = sum(len(g) for g, _ in where.values())
    pods = sum(len(p) for _, p in where.values())
    return job, pods, groups


async def test_kill_9_at_every_dispatch_point_leaves_one_copy_of_every_job(tmp_path: Path, fed: Federation) -> None:
    hub = HubProcess(tmp_path / "hub", fed.write_registrations(tmp_path / "clusters"))
    sizes = {"a": 6, "b": 40, "c": 6}
    targets = {**sizes, **{f"by-{i}": 3 for i in range(4)}}
    try:
        # (a) killed between the decision and the dispatch: decided (Placed, epoch 1), nothing in any member
        api = await hub.start(crash_at="after-decision", crash_job="crash/a")
        await api.submit(cpu_job("by-0", pods=3))
        await api.submit(cpu_job("a", pods=sizes["a"]))
        await hub.killed()
        await api.close()
        assert hub.crash_logged("after-decision")
        job, pods, groups = await crashed_state(hub, fed, "a")
        assert job["status"]["phase"] == "Placed" and placement_of(job)["epoch"] == 1
        assert (pods, groups) == (0, 0)

        # (b) killed in the middle of a 41-object dispatch (the restart first re-dispatches (a))
        api = await hub.start(crash_at="mid-dispatch", crash_job="crash/b")
        await api.submit(cpu_job("by-1", pods=3))
        await api.submit(cpu_job("b", pods=sizes["b"]))
        await hub.killed()
        await api.close()
        assert hub.crash_logged("mid-dispatch")
        # the restart dealt with the room (a) holds, decided by the crashed hub, before placing anything:
        # it rebuilt the reservation, or (a)'s re-dispatched pods were already bound when it first looked
        assert hub.logged("reservation rebuilt for a job placed before this hub started", job="crash/a") or \
            hub.logged("no reservation needed for a job placed before this hub started: its pods are bound",
                       job="crash/a")
        job, pods, groups = await crashed_state(hub, fed, "b")
        assert job["status"]["phase"] == "Placed" and placement_of(job)["epoch"] == 1
        assert groups == 1 and 0 < pods < sizes["b"], (groups, pods)

        # (c) killed after every object exists, before the dispatch is recorded
        api = await hub.start(crash_at="after-dispatch", crash_job="crash/c")
        await api.submit(cpu_job("by-2", pods=3))
        await api.submit(cpu_job("c", pods=sizes["c"]))
        await hub.killed()
        await api.close()
        assert hub.crash_logged("after-dispatch")
        job, pods, groups = await crashed_state(hub, fed, "c")
        assert job["status"]["phase"] in ("Placed", "Admitted") and condition(job, "Dispatched") is None
        assert (pods, groups) == (sizes["c"], 1)
        before_c = await fed.where(job["metadata"]["uid"])
        uids_c = {p["metadata"]["uid"] for _, live in before_c.values() for p in live}

        # a clean start: every Placed job is re-dispatched, idempotently
        api = await hub.start()
        await api.submit(cpu_job("by-3", pods=3))

        async def all_dispatched() -> bool:
            for name in targets:
                job = await api.get("crash", name)
                dispatched = (condition(job, "Dispatched") or {}).get("status") == "True"
                # a job the status sync saw admitted before the re-dispatch pass needs no re-dispatch
                if not dispatched and (job.get("status") or {}).get("phase") not in ("Admitted", "Running"):
                    return False
            return True

        await wait_until(all_dispatched, timeout=60, what="every job dispatched after the last restart")
        listed = {j["metadata"]["name"]: j for j in await api.list()}
        await api.close()
        assert set(listed) == set(targets), "a job was lost or invented"
        for name, size in targets.items():
            job = listed[name]
            placement = placement_of(job)
            placed = [h for h in job["status"]["history"] if h["event"] == "Placed"]
            assert placement["epoch"] == 1 and len(placed) == 1, f"{name} placed again: {job['status']['history']}"
            where = await fed.where(job["metadata"]["uid"])
            assert list(where) == [placement["cluster"]], f"{name} lives in {list(where)}"
            groups_, live = where[placement["cluster"]]
            assert len(live) == size and len({p["metadata"]["name"] for p in live}) == size, (name, len(live))
            assert len(groups_) == 1
            assert {o["metadata"]["labels"][LABEL_EPOCH] for o in groups_ + live} == {"1"}
        after_c = await fed.where(listed["c"]["metadata"]["uid"])
        assert {p["metadata"]["uid"] for _, live in after_c.values() for p in live} == uids_c, \
            "objects of (c) were re-created"
    finally:
        await hub.stop()
