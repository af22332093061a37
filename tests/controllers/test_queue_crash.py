"""Crash safety of preemption: kill -9 a real hub (`federator up` in a subprocess, sqlite) between evicting
a victim and writing the preemptor's decision, restart it, and check what placement.py promises:

- the victim was evicted by a fenced status write (Pending, history Preempted, its old copy named in
  status.placement.previous) and its gang deleted, and it never runs again beside anything of itself;
- the preemptor is not lost: still Pending in the store after the crash, placed by the next hub where
  the room was made, at epoch 1, without evicting anyone else (the victim's leftovers do not count
  against it), and the gang of higher priority is never touched.

The member is a SimCluster served by this test process (two GPU nodes of 8 A100s; pods run until
deleted); FEDERATOR_TEST_CRASH_AT=after-eviction is the hook (controllers/dispatch.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .jobtest_support import (
    API,
    GROUP,
    VERSION,
    Federation,
    HubApi,
    HubProcess,
    gpu_job,
    phase,
    placement_of,
    stored_jobs,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
CLUSTER = "onprem-rdma-a100"
NS = "crash"


def gang(name: str, priority: int) -> dict[str, Any]:
    body = gpu_job(name, namespace=NS, workers=1, gpus=8, models=["A100"])
    body["spec"].update(queue="vision", priority=priority)
    return body


def history(job: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [h for h in (job.get("status") or {}).get("history") or () if h["event"] == event]


async def running(api: HubApi, name: str) -> dict[str, Any]:
    return await api.wait_job(NS, name, lambda j: phase(j) == "Running", timeout=60, what="Running")


async def test_kill_9_between_eviction_and_placement(tmp_path: Path) -> None:
    fed = Federation(tmp_path / "members")
    await fed.start([CLUSTER], **{CLUSTER: {"gpu_nodes": 2, "cpu_nodes": 0}})
    hub = HubProcess(tmp_path / "hub", fed.write_registrations(tmp_path / "clusters"))
    try:
        # the hook fires only for the preemptor, once it has evicted
        api = await hub.start(crash_at="after-eviction", crash_job=f"{NS}/urgent")
        await api.objects.create_cluster_custom_object(GROUP, VERSION, "queues", {
            "apiVersion": API, "kind": "Queue", "metadata": {"name": "vision"},
            "spec": {"namespaces": {"names": [NS]}, "quota": {"gpus": {"A100": 64}}}})
        await api.submit(gang("low", 1))
        low = await running(api, "low")
        await api.submit(gang("mid", 5))
        mid = await running(api, "mid")
        _, low_pods = await fed.member_objects(CLUSTER, low["metadata"]["uid"])
        await api.submit(gang("urgent", 10))
        await hub.killed()
        await api.close()
        assert hub.crash_logged("after-eviction")
        jobs = await stored_jobs(hub.store_url)
        victim, urgent = jobs["low"], jobs["urgent"]
        [preempted] = history(victim, "Preempted")
        assert preempted["message"].startswith(f"preempted by {NS}/urgent (reason: lower priority in queue vision)")
        assert phase(victim) == "Pending" and placement_of(victim)["previous"] == {"cluster": CLUSTER, "epoch": 1}
        # still queued: nothing of the decision was written (a job decided in its first cycle has no phase yet)
        assert phase(urgent) in (None, "Pending") and not history(urgent, "Placed")
        assert "cluster" not in placement_of(urgent)
        assert phase(jobs["mid"]) == "Running" and not history(jobs["mid"], "Preempted")
        assert hub.logged("gang preempted", job=f"{NS}/low", cluster=CLUSTER, epoch=1)

        api = await hub.start()
        placed = await running(api, "urgent")
        assert placement_of(placed)["cluster"] == CLUSTER and placement_of(placed)["epoch"] == 1
        _, urgent_pods = await fed.member_objects(CLUSTER, placed["metadata"]["uid"])
        assert [p["spec"]["nodeName"] for p in urgent_pods] == [p["spec"]["nodeName"] for p in low_pods]
        after = {j["metadata"]["name"]: j for j in await api.list() if j["metadata"]["namespace"] == NS}
        assert not history(after["urgent"], "Preempting")  # placed into the room made before the crash
        assert phase(after["mid"]) == "Running" and placement_of(after["mid"]) == placement_of(mid)
        assert not history(after["mid"], "Preempted")
        assert phase(after["low"]) == "Pending" and len(history(after["low"], "Preempted")) == 1
        assert await fed.where(low["metadata"]["uid"]) == {}  # the victim runs nowhere
        await api.close()
    finally:
        await hub.stop()
        await fed.stop()
