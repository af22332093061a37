"""Failover of a lost cluster's gangs: requeue, fail, wait, maxRequeues, a blip, a mass loss, fencing on return.

Real SimClusters and a real hub with every lifecycle controller (failover included). A cluster is cut
off with the simulator's partition fault (it keeps running its pods and answers nobody), so the hub
loses contact while the old copy keeps running in the member, exactly the case the epoch fence must
handle when the cluster returns. These tests turn the member-side fencing lease off (no agent runs
here; tests/test_fence_agent*.py and test_partition_fencing.py cover it), so only the grace counts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from federator.controllers.jobs import reservations
from federator.delegation.adapter import LABEL_JOB_UID
from federator.sim import kinds

from .jobtest_support import API, condition, phase, placement_of, wait_until
from .lifecycle_support import Env, events, history, lifecycle_env

pytestmark = pytest.mark.slow
HOME, NODATA, FALLBACK = "onprem-rdma-a100", "onprem-rdma-nodata", "cloud-eth-h100"
NS = "team-a"


def _job(name: str, **failover: Any) -> dict[str, Any]:
    """A gang that prefers HOME (its dataset is cached there) and fits FALLBACK too."""
    spec: dict[str, Any] = {
        "roles": [{"name": "worker", "replicas": 2, "template": {
            "image": "trainer:1.4", "resources": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4}}}],
        "placement": {"network": "any", "gpuModels": ["A100", "H100"], "datasets": ["imagenet-22k"]},
    }
    if failover:
        spec["failover"] = failover
    return {"apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name, "namespace": NS}, "spec": spec}


async def _running_in(env: Env, name: str, cluster: str) -> dict[str, Any]:
    return await env.api.wait_job(NS, name, lambda j: placement_of(j).get("cluster") == cluster
                                  and phase(j) == "Running", timeout=30, what=f"{name} running in {cluster}")


async def _member_pods(env: Env, cluster: str, uid: str) -> list[dict[str, Any]]:
    """The job's live pods in `cluster`, read in-process (a partitioned member answers nobody)."""
    pods = (await env.fed.sims[cluster].storage.list(kinds.PODS, label_selector=f"{LABEL_JOB_UID}={uid}")).items
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


async def _mc_condition(env: Env, cluster: str, type_: str) -> dict[str, Any]:
    obj = await env.api.objects.get_cluster_custom_object("federator.dev", "v1alpha1", "memberclusters", cluster)
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == type_:
            return dict(c)
    return {}


@pytest.fixture
async def env(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    knobs: dict[str, Any] = {"cluster_loss_grace_seconds": 2.0, "member_lease": False, "run_seconds": None}
    knobs.update(getattr(request, "param", {}))
    names = knobs.pop("names", [HOME, FALLBACK])
    run_seconds = knobs.pop("run_seconds")
    async with lifecycle_env(tmp_path, names, run_seconds=run_seconds, **knobs) as e:
        yield e


async def test_a_lost_clusters_gang_is_requeued_and_runs_whole_elsewhere_and_the_old_copy_is_killed_on_return(
        env: Env) -> None:
    created = await env.api.submit(_job("moved"))
    uid = created["metadata"]["uid"]
    first = await _running_in(env, "moved", HOME)
    epoch = placement_of(first)["epoch"]
    assert len(await _member_pods(env, HOME, uid)) == 2

    env.fed.sims[HOME].faults.start_partition(None)
    moved = await _running_in(env, "moved", FALLBACK)
    placement = placement_of(moved)
    assert placement["epoch"] == epoch + 1
    (lost,) = history(moved, "ClusterLost")
    assert lost["cluster"] == HOME and lost["epoch"] == epoch
    assert f"at epoch {epoch + 1}" in lost["message"] and "grace 2s" in lost["message"]
    steps = events(moved)
    assert steps.index("ClusterLost") < steps.index("Requeued") < len(steps) - steps[::-1].index("Placed") - 1
    assert moved["status"]["requeues"] == 1
    lost_condition = await _mc_condition(env, HOME, "Lost")
    assert lost_condition["status"] == "True" and lost_condition["reason"] == "NoContact", lost_condition
    assert (await _mc_condition(env, FALLBACK, "Lost"))["status"] == "False"
    # The whole gang is in FALLBACK at the new epoch; the reservation follows it.
    _, pods = await env.fed.member_objects(FALLBACK, uid)
    assert len(pods) == 2 and {p["metadata"]["labels"]["federator.dev/epoch"] for p in pods} == {str(epoch + 1)}
    reservation = reservations(env.hub.context).get(uid)
    assert reservation is None or reservation.cluster == FALLBACK
    assert env.failover.handled == {"requeued": 1}

    # The old copy kept running in the partitioned member (no agent here): it dies when HOME returns.
    assert len(await _member_pods(env, HOME, uid)) == 2
    env.fed.sims[HOME].faults.end_partition()
    await wait_until(lambda: _no_pods(env, HOME, uid), timeout=30, what="the stale copy deleted in HOME")
    killed = await env.api.wait_job(NS, "moved", lambda j: bool(history(j, "StaleCopyKilled")),
                                    what="the kill in the job's history")
    (kill,) = history(killed, "StaleCopyKilled")
    assert kill["cluster"] == HOME and kill["epoch"] == epoch and "2 pods" in kill["message"]
    assert placement_of(killed)["cluster"] == FALLBACK and phase(killed) == "Running"
    await wait_until(lambda: _lost_status(env, HOME, "False"), what="HOME no longer Lost")


async def _no_pods(env: Env, cluster: str, uid: str) -> bool:
    return not await _member_pods(env, cluster, uid)


async def _lost_status(env: Env, cluster: str, status: str) -> bool:
    return (await _mc_condition(env, cluster, "Lost")).get("status") == status


async def test_on_cluster_loss_fail_fails_the_job_and_fences_its_old_copy(env: Env) -> None:
    created = await env.api.submit(_job("fails", onClusterLoss="fail"))
    uid = created["metadata"]["uid"]
    epoch = placement_of(await _running_in(env, "fails", HOME))["epoch"]
    env.fed.sims[HOME].faults.start_partition(None)
    failed = await env.api.wait_job(NS, "fails", lambda j: phase(j) == "Failed", timeout=30, what="Failed")
    failed_condition = condition(failed, "Failed") or {}
    assert failed_condition.get("reason") == "ClusterLost" and HOME in failed_condition["message"]
    placement = placement_of(failed)
    assert placement.get("cluster") is None and placement["epoch"] == epoch + 1
    (lost,) = history(failed, "ClusterLost")
    assert lost["cluster"] == HOME and lost["epoch"] == epoch
    assert await env.fed.member_objects(FALLBACK, uid) == ([], [])  # nothing started anywhere else
    env.fed.sims[HOME].faults.end_partition()
    await wait_until(lambda: _no_pods(env, HOME, uid), timeout=30, what="the failed job's old copy deleted")
    assert phase(await env.api.get(NS, "fails")) == "Failed"
    assert env.failover.handled == {"failed": 1}


async def test_on_cluster_loss_wait_keeps_the_gang_and_says_so_until_the_cluster_returns(env: Env) -> None:
    created = await env.api.submit(_job("waits", onClusterLoss="wait"))
    uid = created["metadata"]["uid"]
    epoch = placement_of(await _running_in(env, "waits", HOME))["epoch"]
    env.fed.sims[HOME].faults.start_partition(None)
    waiting = await env.api.wait_job(NS, "waits", lambda j: (condition(j, "WaitingForCluster") or {}).get(
        "status") == "True", timeout=30, what="WaitingForCluster")
    assert placement_of(waiting) == {**placement_of(waiting), "cluster": HOME, "epoch": epoch}
    assert phase(waiting) == "Running" and history(waiting, "ClusterLost")[0]["cluster"] == HOME
    env.fed.sims[HOME].faults.end_partition()
    back = await env.api.wait_job(NS, "waits", lambda j: (condition(j, "WaitingForCluster") or {}).get(
        "status") == "False", timeout=30, what="the wait over")
    assert (condition(back, "WaitingForCluster") or {})["reason"] == "ClusterReturned"
    assert history(back, "ClusterReturned")[0]["cluster"] == HOME
    assert placement_of(back)["cluster"] == HOME and placement_of(back)["epoch"] == epoch
    assert len(await _member_pods(env, HOME, uid)) == 2  # the same copy runs on: nothing was fenced
    assert env.failover.handled == {"waiting": 1}


async def test_max_requeues_reached_fails_the_job_with_requeue_limit(env: Env) -> None:
    await env.api.submit(_job("limited", maxRequeues=0))
    epoch = placement_of(await _running_in(env, "limited", HOME))["epoch"]
    env.fed.sims[HOME].faults.start_partition(None)
    failed = await env.api.wait_job(NS, "limited", lambda j: phase(j) == "Failed", timeout=30, what="Failed")
    assert (condition(failed, "Failed") or {}).get("reason") == "RequeueLimit"
    assert "maxRequeues 0" in (condition(failed, "Failed") or {})["message"]
    assert placement_of(failed)["epoch"] == epoch + 1 and placement_of(failed).get("cluster") is None
    assert env.failover.handled == {"requeue_limit": 1}
    env.fed.sims[HOME].faults.end_partition()


@pytest.mark.parametrize("env", [{"cluster_loss_grace_seconds": 30.0}], indirect=True)
async def test_a_blip_shorter_than_the_grace_moves_nothing(env: Env) -> None:
    created = await env.api.submit(_job("steady"))
    uid = created["metadata"]["uid"]
    epoch = placement_of(await _running_in(env, "steady", HOME))["epoch"]
    sync = env.hub.context.parts.members.syncs[HOME]
    env.fed.sims[HOME].faults.start_partition(None)
    await wait_until(lambda: sync.health.first_loss_of_contact is not None, what="the hub losing contact")
    lost_condition = await wait_until(
        lambda: _condition_with(env, HOME, "Lost", reason="WithinGrace"), what="Lost=False WithinGrace")
    assert lost_condition["status"] == "False"
    env.fed.sims[HOME].faults.end_partition()
    await wait_until(lambda: sync.health.first_loss_of_contact is None and sync.health.ready,
                     what="contact back")
    job = await env.api.get(NS, "steady")
    assert placement_of(job)["cluster"] == HOME and placement_of(job)["epoch"] == epoch
    assert "ClusterLost" not in events(job) and env.failover.handled == {}
    assert len(await _member_pods(env, HOME, uid)) == 2


async def _condition_with(env: Env, cluster: str, type_: str, *, reason: str) -> dict[str, Any] | None:
    found = await _mc_condition(env, cluster, type_)
    return found if found.get("reason") == reason else None


@pytest.mark.parametrize("env", [{"names": [HOME, NODATA, FALLBACK], "cluster_loss_grace_seconds": 8.0}],
                         indirect=True)
async def test_losing_most_clusters_at_once_means_the_hub_is_cut_off_and_nothing_moves(env: Env) -> None:
    created = await env.api.submit(_job("stays"))
    uid = created["metadata"]["uid"]
    epoch = placement_of(await _running_in(env, "stays", HOME))["epoch"]
    # Two of three clusters cut off at once (>= 0.5 of them, and at least 2): the hub blames itself.
    env.fed.sims[HOME].faults.start_partition(None)
    env.fed.sims[NODATA].faults.start_partition(None)
    for cluster in (HOME, NODATA):
        await wait_until(lambda c=cluster: _condition_with(env, c, "Lost", reason="HubPartitioned"),  # type: ignore[misc]
                         timeout=40, what=f"{cluster} Lost as HubPartitioned")
    assert env.failover.partitioned
    status, text = await env.hub.request("GET", "/metrics")
    assert status == 200 and "federator_hub_partitioned 1.0" in text
    # A full failover tick has seen both clusters Lost and moved nothing, though FALLBACK has room.
    ticks = env.failover.handled
    job = await env.api.get(NS, "stays")
    assert placement_of(job)["cluster"] == HOME and placement_of(job)["epoch"] == epoch
    assert "ClusterLost" not in events(job) and ticks == {}
    assert await env.fed.member_objects(FALLBACK, uid) == ([], [])
    env.fed.sims[HOME].faults.end_partition()
    env.fed.sims[NODATA].faults.end_partition()
    await wait_until(lambda: not env.failover.partitioned, timeout=30, what="the hub no longer cut off")
    assert placement_of(await env.api.get(NS, "stays"))["epoch"] == epoch
