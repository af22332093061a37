"""Spill-over tiers end to end (issue 30): a Queue orders the clusters in tiers by their labels; its jobs go
only to the first tier until they have waited its spillAfterSeconds with no room there, then the next tier
is considered too, a lower tier always first. Real hub (every lifecycle controller), simulated members,
labels set with real kubectl."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .jobtest_support import API, GROUP, VERSION, condition, phase, placement_of
from .lifecycle_support import Env, history, lifecycle_env, seconds

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]
ONPREM = "onprem-rdma-a100"
CLOUD = "cloud-eth-h100"
SPILL = 6
ONE_NODE = {ONPREM: {"gpu_nodes": 1, "cpu_nodes": 0}, CLOUD: {"gpu_nodes": 1, "cpu_nodes": 0}}


def tiered_queue(spill: int = SPILL) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Queue", "metadata": {"name": "team"},
            "spec": {"namespaces": {"names": ["team-a"]}, "quota": {"gpus": {"A100": 64, "H100": 64}},
                     "tiers": [{"name": "on-prem", "clusterSelector": {"matchLabels": {"site": "on-prem"}},
                                "spillAfterSeconds": spill},
                               {"name": "cloud", "clusterSelector": {"matchLabels": {"site": "cloud"}}}]}}


def node_job(name: str) -> dict[str, Any]:
    """One pod of 8 GPUs (a whole node), A100 or H100, in the tiered queue."""
    return {"apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"queue": "team", "placement": {"gpuModels": ["A100", "H100"]},
                     "roles": [{"name": "worker", "replicas": 1, "template": {
                         "image": "trainer:1.4", "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 8}}}]}}


async def label_sites(env: Env) -> None:
    for cluster, site in ((ONPREM, "on-prem"), (CLOUD, "cloud")):
        code, _, err = await env.hub.kubectl("admin", "label", "membercluster", cluster, f"site={site}")
        assert code == 0, err
    await env.api.objects.create_cluster_custom_object(GROUP, VERSION, "queues", tiered_queue())


def why_not(job: dict[str, Any]) -> str:
    found = condition(job, "Schedulable")
    return str(found.get("message") or "") if found else ""


def placed_time(job: dict[str, Any]) -> float:
    [entry] = history(job, "Placed")
    return seconds(entry["time"])


async def test_with_tier_one_full_a_job_waits_its_spill_time_then_lands_in_tier_two(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [ONPREM, CLOUD], run_seconds=None, profile_overrides=ONE_NODE) as env:
        await label_sites(env)
        await env.api.submit(node_job("filler"))
        filler = await env.api.wait_job("team-a", "filler", lambda j: phase(j) == "Running", timeout=60,
                                        what="the filler Running")
        assert placement_of(filler)["cluster"] == ONPREM

        await env.api.submit(node_job("spills"))
        waiting = await env.api.wait_job(
            "team-a", "spills", lambda j: phase(j) == "Pending" and "tier 2 (cloud) not yet" in why_not(j),
            timeout=60, what="Pending on tier 1")
        assert "tier 1 (on-prem) full for" in why_not(waiting) and f"of {SPILL}s" in why_not(waiting)
        moved = await env.api.wait_job("team-a", "spills", lambda j: phase(j) == "Running", timeout=60,
                                       what="Running in tier 2 once tier 1 was full for the spill time")
        assert placement_of(moved)["cluster"] == CLOUD
        created = seconds(moved["metadata"]["creationTimestamp"])
        # never before the tier opened (timestamps are whole seconds)
        assert placed_time(moved) - created >= SPILL - 1, moved["status"]["history"]


async def test_with_room_in_tier_one_a_job_never_goes_to_tier_two(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [ONPREM, CLOUD], run_seconds=None, profile_overrides=ONE_NODE) as env:
        await label_sites(env)
        # a queue that opens tier 2 at once: the score still puts tier 1 first
        code, _, err = await env.hub.kubectl("admin", "patch", "queue", "team", "--type=json", "-p",
                                             '[{"op": "replace", "path": "/spec/tiers/0/spillAfterSeconds", "value": 0}]')
        assert code == 0, err
        await env.api.submit(node_job("stays"))
        job = await env.api.wait_job("team-a", "stays", lambda j: phase(j) == "Running", timeout=60,
                                     what="Running")
        assert placement_of(job)["cluster"] == ONPREM
        assert len(history(job, "Placed")) == 1

        # a cluster in no tier never takes the queue's jobs, whatever its room
        code, _, err = await env.hub.kubectl("admin", "label", "membercluster", CLOUD, "site-")
        assert code == 0, err
        await env.api.submit(node_job("nowhere"))
        waiting = await env.api.wait_job(
            "team-a", "nowhere", lambda j: phase(j) == "Pending" and "none of queue team's tiers" in why_not(j),
            timeout=60, what="Pending: the free cluster is in no tier")
        assert CLOUD in why_not(waiting), why_not(waiting)
