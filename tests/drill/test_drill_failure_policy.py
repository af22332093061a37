"""Issue 29 item 7: a node-failure drill moves or restarts gangs by their spec.failurePolicy and reports jobsLost 0.

`federator drill --fault node-failure` (a real process) fails the node of HOME that runs most of this hub's pods
through the simulator's fault API; the simulated kubelet fails that node's pods as kube's taint eviction marks
them (reason NodeLost, DisruptionTarget=True). Two gangs each have a pod on every node of HOME (two nodes of 8
GPUs: "restart"'s two 6-GPU workers take one node each, then "requeue"'s two 2-GPU workers fill what is left
of each), so whichever node fails, both are affected:

- "restart": restartPolicy OnFailure and a failurePolicy with no rules: the default for a lost node, Ignore,
  creates the lost pod again in place, not counted (restarted in place);
- "requeue": a rule Requeue on DisruptionTarget: the gang moves whole to the other cluster (moved).

The drill's five figures add up to gangsAffected (drilltest_support.figures) and no job is lost. Every wait is
for an event, with a deadline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..controllers.lifecycle_support import history
from .drilltest_support import drill_env, figures, gang, stored_name

pytestmark = pytest.mark.slow
HOME, FALLBACK = "onprem-rdma-a100", "cloud-eth-h100"
TWO_NODES = {HOME: {"gpu_nodes": 2, "cpu_nodes": 0}}


def _restarting() -> dict[str, Any]:
    job = gang("restart", gpus=6)
    job["spec"]["roles"][0]["restartPolicy"] = "OnFailure"
    job["spec"]["failurePolicy"] = {"rules": []}
    return job


def _requeueing() -> dict[str, Any]:
    job = gang("requeue", gpus=2)
    job["spec"]["failurePolicy"] = {"rules": [
        {"action": "Requeue", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
    return job


async def test_a_node_failure_drill_restarts_or_moves_each_gang_by_its_failure_policy_and_loses_no_job(
        tmp_path: Path) -> None:
    async with drill_env(tmp_path, [HOME, FALLBACK], cluster_loss_grace_seconds=30.0, member_lease=False,
                         profile_overrides=TWO_NODES) as env:
        uids: dict[str, str] = {}
        placed: dict[str, dict[str, Any]] = {}
        for job in (_restarting(), _requeueing()):  # in this order: the 6-GPU workers spread the gang out
            name = job["metadata"]["name"]
            uids[name] = (await env.env.api.submit(job))["metadata"]["uid"]
            placed[name] = await env.running_in(name, HOME)
        nodes = {name: {p["spec"]["nodeName"] for p in await env.env.live_pods(HOME, uid)}
                 for name, uid in uids.items()}
        assert len(nodes["restart"]) == 2 and nodes["requeue"] == nodes["restart"], nodes

        code, out, err = await env.drill("--cluster", HOME, "--fault", "node-failure", "--duration", "5s",
                                         "--settle-timeout", "120s", "-o", "json", timeout=300)
        assert code == 0, err
        found = figures(out)  # the five figures sum to gangsAffected
        assert found["fault"] == "node-failure" and found["gangsAffected"] == 2, (found, err)
        assert found["gangsRestartedInPlace"] == 1 and found["gangsMoved"] == 1, (found, err)
        assert found["gangsLost"] == 0 and found["jobsLost"] == 0 and found["gangsUnplaceable"] == 0, found
        assert found["duplicates"] == 0 and found["maxConcurrentCopies"] == 1, found
        report = await env.report(stored_name(out, err))
        outcomes = {g["name"]: g for g in report["spec"]["gangs"]}
        assert outcomes["restart"]["outcome"] == "restartedInPlace" and outcomes["restart"]["cluster"] == HOME
        assert outcomes["restart"]["epoch"] == outcomes["restart"]["fromEpoch"], outcomes["restart"]
        assert outcomes["requeue"]["outcome"] == "moved" and outcomes["requeue"]["cluster"] == FALLBACK

        # what the hub did, read independently of the drill: each by its policy, with its reason
        restarted = await env.running_in("restart", HOME, timeout=120)
        assert restarted["status"]["placement"]["epoch"] == placed["restart"]["status"]["placement"]["epoch"]
        said = [h["message"] for h in history(restarted, "PodRestarted")]
        assert said and "default (node lost): Ignore" in said[0] and "0 of spec.backoffLimit" in said[0], said
        assert len(await env.env.live_pods(HOME, uids["restart"])) == 2
        moved = await env.running_in("requeue", FALLBACK, timeout=120)
        (entry,) = history(moved, "FailurePolicy")
        assert "spec.failurePolicy.rules[0]" in entry["message"] and "Requeue" in entry["message"], entry
        assert entry["cluster"] == HOME
        assert moved["status"]["placement"]["epoch"] > placed["requeue"]["status"]["placement"]["epoch"]
        assert [p for p in await env.env.live_pods(HOME, uids["requeue"])
                if not p["metadata"].get("deletionTimestamp")] == []
        assert {h["event"] for h in restarted["status"]["history"] + moved["status"]["history"]}.isdisjoint(
            {"Failed"})
