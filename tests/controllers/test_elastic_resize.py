"""Elastic gangs resized by the hub (issue 19 items 3-4), through a real hub (every lifecycle controller) and
a simulated volcano cluster of two GPU nodes (8 A100s each) whose pods run until deleted:

- a higher-priority job that needs room shrinks a lower-priority elastic gang toward its minimum (its
  newest pods, the highest indices) instead of evicting a whole gang;
- once room frees and nothing pending could use it, the grow pass grows an elastic gang after its
  cooldown (status.replicas, history Resized, the missing pods created);
- a pending job takes freed room before any growth.

The tests wait for the phases, history entries, member pods and grow plans they assert on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from federator.controllers.jobs import update_job_status
from federator.controllers.placement import PlacementController

from .jobtest_support import placement_of, wait_until
from .lifecycle_support import CLUSTER_LABEL, Env, aimed_job, history, lifecycle_env
from .test_queue_flow import create_queue, event_reasons, gang, pods_of, running, team_queue

pytestmark = pytest.mark.slow
CLUSTER = "onprem-rdma-a100"
TWO_NODES = {CLUSTER: {"gpu_nodes": 2, "cpu_nodes": 0}}


def elastic(name: str, *, low: int, preferred: int, high: int, gpus: int = 4, queue: str | None = None,
            priority: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "roles": [{"name": "worker", "replicas": preferred, "minReplicas": low, "maxReplicas": high,
                   "template": {"image": "trainer:1.4",
                                "resources": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": gpus}}}],
        "placement": {"clusterSelector": {"matchLabels": {CLUSTER_LABEL: CLUSTER}}}}
    if queue:
        spec["queue"] = queue
    if priority:
        spec["priority"] = priority
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}


def controller(env: Env) -> PlacementController:
    found = env.hub.context.parts.running.placement
    assert isinstance(found, PlacementController)
    return found


async def indices(env: Env, uid: str) -> list[int] | None:
    """The worker indices of the job's live pods, once each of them is bound and running."""
    pods = await pods_of(env, uid)
    if any((p.get("status") or {}).get("phase") != "Running" for p in pods):
        return None
    return sorted(int(p["metadata"]["labels"]["federator.dev/index"]) for p in pods)


async def indices_are(env: Env, uid: str, want: list[int]) -> bool:
    return await indices(env, uid) == want


def held_back_for(env: Env, uid: str, words: str) -> bool:
    """The latest grow plan held the gang back for a reason containing `words`."""
    plan = controller(env).last_growth
    return plan is not None and words in plan.held_back.get(uid, "")


async def test_a_higher_priority_job_shrinks_an_elastic_gang_instead_of_evicting(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, profile_overrides=TWO_NODES,
                             elastic_tick_seconds=0.2, elastic_grow_cooldown_seconds=3600) as env:
        await create_queue(env, team_queue("vision", ["team-a"], gpus=64))
        fixed_body = aimed_job("fixed", CLUSTER, workers=1, gpus=4, ps=0)
        fixed_body["spec"].update(queue="vision", priority=1)
        await env.api.submit(fixed_body)
        fixed = await running(env, "fixed")
        await env.api.submit(elastic("flex", low=1, preferred=1, high=3, queue="vision", priority=1))
        flex = await running(env, "flex")
        uid = flex["metadata"]["uid"]
        assert flex["status"]["replicas"] == {"worker": 3}  # 12 of the 16 GPUs are free
        await wait_until(lambda: indices_are(env, uid, [0, 1, 2]), timeout=20, what="3 workers running")

        # two 4-GPU workers of higher priority: shrinking flex by two beats evicting fixed (and one more)
        urgent_body = aimed_job("urgent", CLUSTER, workers=2, gpus=4, ps=0)
        urgent_body["spec"].update(queue="vision", priority=10)
        await env.api.submit(urgent_body)
        await running(env, "urgent")
        shrunk = await env.api.wait_job("team-a", "flex", lambda j: bool(history(j, "Resized")), timeout=20,
                                        what="flex resized")
        [resized] = history(shrunk, "Resized")
        assert resized["from"] == {"worker": 3} and resized["to"] == {"worker": 1}
        assert resized["reason"] == "Preempted" and resized["epoch"] == placement_of(flex)["epoch"]
        assert resized["message"] == ("shrunk worker 3 -> 1: room for team-a/urgent (reason: lower priority in "
                                      "queue vision)")
        assert shrunk["status"]["replicas"] == {"worker": 1} and shrunk["status"]["phase"] == "Running"
        assert not history(shrunk, "Preempted")
        # the newest pods (the highest indices) went, the minimum kept running
        await wait_until(lambda: indices_are(env, uid, [0]), timeout=20, what="flex at 1 worker")
        kept = await env.api.get("team-a", "fixed")
        assert not history(kept, "Preempted") and placement_of(kept)["epoch"] == placement_of(fixed)["epoch"]
        urgent = await env.api.get("team-a", "urgent")
        [placed] = history(urgent, "Placed")[-1:]
        assert "after shrinking team-a/flex by 2 pods" in placed["message"]
        await wait_until(lambda: _has_reason(env, "flex", "Shrunk"), timeout=20, what="the Shrunk Event")
        # no grow back while urgent holds the room (and flex's cooldown runs)
        await wait_until(lambda: held_back_for(env, uid, "cooling down"), timeout=20, what="a grow pass")
        assert (await env.api.get("team-a", "flex"))["status"]["replicas"] == {"worker": 1}


async def _has_reason(env: Env, name: str, reason: str) -> bool:
    return reason in await event_reasons(env, "team-a", name)


async def flex_beside_a_blocker(env: Env) -> str:
    """A one-node gang "blocker", then elastic "flex" (1..4 workers of 4 GPUs) placed at 2 on the other node,
    and a grow pass that holds flex back for want of room (past its cooldown). Returns flex's uid."""
    await env.api.submit(gang("blocker", queue=None))
    await running(env, "blocker")
    await env.api.submit(elastic("flex", low=1, preferred=1, high=4))
    flex = await running(env, "flex")
    uid: str = flex["metadata"]["uid"]
    assert flex["status"]["replicas"] == {"worker": 2}
    await wait_until(lambda: held_back_for(env, uid, "no room"), timeout=20, what="flex held back: no room")
    return uid


async def test_an_elastic_gang_grows_after_its_cooldown_when_room_frees(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, profile_overrides=TWO_NODES,
                             elastic_tick_seconds=0.2, elastic_grow_cooldown_seconds=1.0) as env:
        uid = await flex_beside_a_blocker(env)
        await env.api.delete("team-a", "blocker")
        grown = await env.api.wait_job("team-a", "flex", lambda j: bool(history(j, "Resized")), timeout=30,
                                       what="flex grown")
        [resized] = history(grown, "Resized")
        assert (resized["from"], resized["to"], resized["reason"]) == ({"worker": 2}, {"worker": 4}, "Grown")
        assert resized["message"].startswith(f"grew worker 2 -> 4: room in {CLUSTER}")
        assert grown["status"]["replicas"] == {"worker": 4}
        await wait_until(lambda: indices_are(env, uid, [0, 1, 2, 3]), timeout=20, what="4 workers running")
        await wait_until(lambda: _has_reason(env, "flex", "Grown"), timeout=20, what="the Grown Event")
        # at its maximum: nothing more to grow, and the gang stays at 4
        await wait_until(lambda: controller(env).last_growth is not None
                         and uid not in controller(env).last_growth.held_back
                         and not controller(env).last_growth.growths, timeout=20, what="a quiet pass")
        assert len(history(await env.api.get("team-a", "flex"), "Resized")) == 1


async def test_a_pending_job_takes_freed_room_before_a_growth(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, profile_overrides=TWO_NODES,
                             elastic_tick_seconds=0.2, elastic_grow_cooldown_seconds=0.5) as env:
        uid = await flex_beside_a_blocker(env)
        await env.api.submit(gang("waiter", queue=None))  # equal priority: waits, preempts nothing
        await env.api.wait_job("team-a", "waiter", lambda j: (j.get("status") or {}).get("phase") == "Pending"
                               and bool(history(j, "Unschedulable")), timeout=20, what="waiter waits")
        await env.api.delete("team-a", "blocker")
        waiter = await running(env, "waiter")
        assert placement_of(waiter)["cluster"] == CLUSTER
        # a pass after the waiter was placed still finds no room for flex: the waiter took it
        before = controller(env).last_growth
        await wait_until(lambda: controller(env).last_growth is not before and held_back_for(env, uid, "no room"),
                         timeout=20, what="a grow pass after the waiter runs")
        still = await env.api.get("team-a", "flex")
        assert not history(still, "Resized") and still["status"]["replicas"] == {"worker": 2}
        await wait_until(lambda: indices_are(env, uid, [0, 1]), timeout=20, what="flex's pods")



async def test_a_resize_written_before_a_crash_converges_on_the_member(tmp_path: Path) -> None:
    """A hub that died between writing status.replicas and changing the member: the elastic pass deletes the
    pods above the written size (a shrink) and creates the missing ones below it (a growth), never below the
    minimum, never a second copy of a pod."""
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, profile_overrides=TWO_NODES,
                             elastic_tick_seconds=0.2, elastic_grow_cooldown_seconds=3600) as env:
        await env.api.submit(elastic("flex", low=1, preferred=1, high=4))
        flex = await running(env, "flex")
        uid = flex["metadata"]["uid"]
        assert flex["status"]["replicas"] == {"worker": 4}
        await wait_until(lambda: indices_are(env, uid, [0, 1, 2, 3]), timeout=20, what="4 workers")

        async def write(replicas: dict[str, int]) -> None:
            def mutate(stored: dict[str, Any]) -> dict[str, Any]:
                stored["status"]["replicas"] = replicas
                return stored
            await update_job_status(env.hub.context, namespace="team-a", name="flex", mutate=mutate, uid=uid)

        await write({"worker": 2})  # a shrink recorded, its pods not deleted yet
        await wait_until(lambda: indices_are(env, uid, [0, 1]), timeout=20, what="trimmed to 2")
        await write({"worker": 3})  # a growth recorded, its pod not created yet
        await wait_until(lambda: indices_are(env, uid, [0, 1, 2]), timeout=20, what="filled to 3")
        names = [p["metadata"]["name"] for p in await pods_of(env, uid)]
        assert len(names) == len(set(names)) == 3
        # a size outside the role's bounds is not a size: the gang is left as it runs
        await write({"worker": 9})
        await wait_until(lambda: controller(env).jobs[uid]["status"]["replicas"] == {"worker": 9}, timeout=20,
                         what="the controller saw the bad size")
        before = controller(env).last_growth
        await wait_until(lambda: controller(env).last_growth is not before, timeout=20, what="an elastic pass")
        assert await indices(env, uid) == [0, 1, 2]
