"""Cordon, drain and the failover plan: gangs move whole, within the budget, never two copies at once.

Real SimClusters and a real hub with every lifecycle controller (drain included); the CLI runs as a
real process against the hub. Member pods are sampled while the drain runs: no job may ever have
running pods in two clusters, and no more gangs than the budget may be moving at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from federator.delegation.adapter import LABEL_HUB, LABEL_JOB_UID
from federator.sim import kinds

from .jobtest_support import API, phase, placement_of, wait_until
from .lifecycle_support import CLUSTER_LABEL, Env, aimed_job, events, history, lifecycle_env

pytestmark = pytest.mark.slow
HOME, FALLBACK = "onprem-rdma-a100", "cloud-eth-h100"
NS = "team-a"
PLAN = "/apis/federator.dev/v1alpha1/memberclusters/{}/failoverplan"


def _job(name: str) -> dict[str, Any]:
    """A gang that prefers HOME (its dataset is cached there) and fits FALLBACK too."""
    return {"apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name, "namespace": NS}, "spec": {
        "roles": [{"name": "worker", "replicas": 2, "template": {
            "image": "trainer:1.4", "resources": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4}}}],
        "placement": {"network": "any", "gpuModels": ["A100", "H100"], "datasets": ["imagenet-22k"]}}}


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with lifecycle_env(tmp_path, [HOME, FALLBACK], run_seconds=None) as e:
        yield e


async def _running_in(env: Env, name: str, cluster: str) -> dict[str, Any]:
    return await env.api.wait_job(NS, name, lambda j: placement_of(j).get("cluster") == cluster
                                  and phase(j) == "Running", timeout=40, what=f"{name} running in {cluster}")


async def _running_clusters(env: Env) -> dict[str, set[str]]:
    """job uid -> clusters where its pods run now (read in-process from every member)."""
    where: dict[str, set[str]] = {}
    for name, sim in env.fed.sims.items():
        pods = (await sim.storage.list(kinds.PODS, label_selector=LABEL_HUB)).items
        for pod in pods:
            if (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp"):
                where.setdefault(pod["metadata"]["labels"][LABEL_JOB_UID], set()).add(name)
    return where


class Sampler:
    """Samples every member and the drain's progress until stopped: the most clusters any job ran in at
    once, and the most gangs moving at once."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.max_copies = 0
        self.max_moving = 0
        self.samples = 0

    async def run(self) -> None:
        while True:
            where = await _running_clusters(self.env)
            self.max_copies = max([self.max_copies, *(len(c) for c in where.values())])
            moving = sum(1 for j in await self.env.api.list()
                         if phase(j) == "Placed" and (placement_of(j).get("previous") or {}).get("cluster") == HOME)
            self.max_moving = max(self.max_moving, moving)
            self.samples += 1
            await asyncio.sleep(0.1)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Sampler]:
        task = asyncio.get_running_loop().create_task(self.run())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_drain_moves_every_gang_whole_within_its_budget_and_never_runs_two_copies(env: Env) -> None:
    names = ["d1", "d2", "d3"]
    uids = {}
    for name in names:
        uids[name] = (await env.api.submit(_job(name)))["metadata"]["uid"]
    epochs = {name: placement_of(await _running_in(env, name, HOME))["epoch"] for name in names}

    # The plan says where each would go, and changes nothing.
    status, plan = await env.hub.request("GET", PLAN.format(HOME) + "?for=drain")
    assert status == 200, plan
    assert plan["kind"] == "FailoverPlan" and plan["cluster"] == HOME and plan["for"] == "drain"
    assert sorted(g["name"] for g in plan["gangs"]) == names
    assert {g["target"] for g in plan["gangs"]} == {FALLBACK} and plan["movable"] == 3 and plan["unplaceable"] == 0
    for name in names:
        assert placement_of(await env.api.get(NS, name))["cluster"] == HOME

    sampler = Sampler(env)
    async with sampler.running():
        code, out, err = await env.hub.cli("admin", "cluster", "drain", HOME, "--max-concurrent", "1",
                                           "--timeout", "2m", timeout=150)
        assert code == 0, (out, err)
        assert f"drained {HOME}: 3 gangs moved" in out and "draining" in err
        for name in names:
            await _running_in(env, name, FALLBACK)
    assert sampler.samples > 0 and sampler.max_copies == 1 and sampler.max_moving <= 1

    for name in names:
        job = await env.api.get(NS, name)
        placement = placement_of(job)
        assert placement["epoch"] == epochs[name] + 1 and placement["previous"] == {"cluster": HOME,
                                                                                   "epoch": epochs[name]}
        assert placement["scores"][0]["cluster"] == FALLBACK  # the move's own decision, not the first one's
        assert all(row["cluster"] != HOME for row in placement["scores"])
        (drained,) = history(job, "Drained")
        assert drained["cluster"] == HOME and drained["epoch"] == epochs[name]
        steps = events(job)
        assert steps[steps.index("Drained") + 1] == "Placed"
        assert await env.fed.member_objects(HOME, uids[name]) == ([], [])
    mc = await env.api.objects.get_cluster_custom_object("federator.dev", "v1alpha1", "memberclusters", HOME)
    assert mc["spec"]["cordoned"] is True and mc["status"]["drain"]["phase"] == "Complete"
    assert mc["status"]["drain"]["moved"] == 3 and mc["status"]["drain"]["gangs"] == 3

    # Cordoned: a new gang that prefers HOME goes to FALLBACK; uncordon ends the drain.
    await env.api.submit(_job("after"))
    await _running_in(env, "after", FALLBACK)
    code, out, err = await env.hub.cli("admin", "cluster", "uncordon", HOME)
    assert code == 0 and out.strip() == f"membercluster.federator.dev/{HOME} uncordoned", err
    mc = await env.api.objects.get_cluster_custom_object("federator.dev", "v1alpha1", "memberclusters", HOME)
    assert mc["spec"].get("cordoned") is False and "drain" not in mc["spec"]

    async def drain_status_cleared() -> bool:
        obj = await env.api.objects.get_cluster_custom_object("federator.dev", "v1alpha1", "memberclusters", HOME)
        return "drain" not in (obj.get("status") or {})

    await wait_until(drain_status_cleared, what="status.drain cleared after uncordon")


async def test_a_gang_that_fits_nowhere_else_stays_and_is_listed_with_why(env: Env) -> None:
    await env.api.submit(aimed_job("pinned", HOME))
    epoch = placement_of(await _running_in(env, "pinned", HOME))["epoch"]
    status, plan = await env.hub.request("GET", PLAN.format(HOME) + "?for=drain")
    assert status == 200 and plan["unplaceable"] == 1 and plan["gangs"][0]["target"] is None
    assert any(row["cluster"] == FALLBACK for row in plan["gangs"][0]["whyNot"]), plan
    assert all(row["cluster"] != HOME for row in plan["gangs"][0]["whyNot"]), plan  # the drained one: no row
    code, out, err = await env.hub.cli("admin", "cluster", "drain", HOME, "--timeout", "1m", timeout=90)
    assert code == 1, (out, err)
    assert "1 gangs fit nowhere else now" in out and "pinned" in out and FALLBACK in out
    job = await env.api.get(NS, "pinned")
    assert placement_of(job)["cluster"] == HOME and placement_of(job)["epoch"] == epoch and phase(job) == "Running"
    mc = await env.api.objects.get_cluster_custom_object("federator.dev", "v1alpha1", "memberclusters", HOME)
    drain = mc["status"]["drain"]
    assert drain["phase"] == "Stuck" and drain["unplaceable"][0]["name"] == "pinned"
    assert CLUSTER_LABEL in drain["unplaceable"][0]["message"] or "selector" in drain["unplaceable"][0]["message"]


async def test_cordon_and_the_plan_endpoint_refuse_bad_requests(env: Env) -> None:
    code, out, err = await env.hub.cli("admin", "cluster", "cordon", HOME)
    assert code == 0 and out.strip() == f"membercluster.federator.dev/{HOME} cordoned", err
    await env.api.submit(_job("elsewhere"))
    await _running_in(env, "elsewhere", FALLBACK)  # HOME has the dataset, but takes no new gangs
    code, _, err = await env.hub.cli("admin", "cluster", "cordon", "no-such-cluster")
    assert code == 1 and "NotFound" in err and "no-such-cluster" in err
    code, _, err = await env.hub.cli("researcher", "cluster", "cordon", HOME)
    assert code == 1 and "Forbidden" in err
    code, _, err = await env.hub.cli("admin", "cluster", "drain", HOME, "--timeout", "soon")
    assert code == 2 and err.strip() == "error: --timeout 'soon': not a duration (examples: 30s, 2m, 1h, 90)"

    status, body = await env.hub.request("GET", PLAN.format("no-such-cluster"))
    assert status == 404 and body["reason"] == "NotFound"
    status, body = await env.hub.request("GET", PLAN.format(HOME) + "?for=everything")
    assert status == 400 and "supported values" in body["message"]
    status, body = await env.hub.request("GET", PLAN.format(HOME), who="researcher")
    assert status == 403 and body["reason"] == "Forbidden"
    status, body = await env.hub.request("POST", PLAN.format(HOME), body={})
    assert status == 405
    status, plan = await env.hub.request("GET", PLAN.format(FALLBACK), who="viewer")
    assert status == 200 and [g["name"] for g in plan["gangs"]] == ["elsewhere"]
    assert plan["gangs"][0]["target"] is None  # HOME is cordoned: nowhere to go
    assert any(row["cluster"] == HOME for row in plan["gangs"][0]["whyNot"]), plan
