"""Queues end to end (issue 17): quota admission, borrowing and reclaim, priority order and whole-gang
preemption, through a real hub (every lifecycle controller) and simulated member clusters.

Each test runs one small cluster (one or two GPU nodes of 8 A100s, no CPU nodes) whose pods run until
deleted; every job is a one-pod gang of 8 GPUs aimed at that cluster, so "room" and "quota" are whole
nodes. The tests wait for the phases, conditions and member pods they assert on.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from federator.apis.checkpoint import ANNOTATION_CHECKPOINT
from federator.apis.timestamps import parse_epoch
from federator.cli.jobs import describe_job
from federator.clusters.client import PODS
from federator.delegation.adapter import LABEL_JOB_UID

from .jobtest_support import GROUP, VERSION, condition, phase, placement_of, wait_until
from .lifecycle_support import Env, aimed_job, history, lifecycle_env

pytestmark = pytest.mark.slow
CLUSTER = "onprem-rdma-a100"
QUEUES = "queues"


def _nodes(count: int) -> dict[str, dict[str, Any]]:
    return {CLUSTER: {"gpu_nodes": count, "cpu_nodes": 0}}


def team_queue(name: str, namespaces: list[str], *, gpus: int, cohort: str | None = None,
               within: str = "LowerPriority", reclaim: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"namespaces": {"names": namespaces}, "quota": {"gpus": {"A100": gpus}},
                            "preemption": {"withinQueue": within, "reclaimBorrowed": reclaim}}
    if cohort:
        spec["cohort"] = cohort
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def gang(name: str, *, queue: str | None, namespace: str = "team-a", priority: int = 0) -> dict[str, Any]:
    """One pod of 8 A100 GPUs, 4 cpu, 16Gi, only for CLUSTER."""
    body = aimed_job(name, CLUSTER, namespace=namespace, workers=1, gpus=8, ps=0)
    if queue is not None:
        body["spec"]["queue"] = queue
    if priority:
        body["spec"]["priority"] = priority
    return body


async def create_queue(env: Env, body: dict[str, Any]) -> None:
    await env.api.objects.create_cluster_custom_object(GROUP, VERSION, QUEUES, body)


async def get_queue(env: Env, name: str) -> dict[str, Any]:
    found: dict[str, Any] = await env.api.objects.get_cluster_custom_object(GROUP, VERSION, QUEUES, name)
    return found


async def running(env: Env, name: str, *, namespace: str = "team-a") -> dict[str, Any]:
    return await env.api.wait_job(namespace, name, lambda j: phase(j) == "Running", timeout=40, what="Running")


def reason_is(reason: str) -> Any:
    def check(job: dict[str, Any]) -> bool:
        found = condition(job, "Schedulable")
        return phase(job) == "Pending" and found is not None and found["status"] == "False" \
            and found["reason"] == reason
    return check


async def pods_of(env: Env, uid: str) -> list[dict[str, Any]]:
    """The job's pods in CLUSTER that are not being deleted."""
    client = await env.member(CLUSTER)
    listed = (await client.list_all(PODS, label_selector=f"{LABEL_JOB_UID}={uid}")).items
    return [p for p in listed if not p["metadata"].get("deletionTimestamp")]


async def test_quota_blocks_explains_and_admits_when_freed(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, profile_overrides=_nodes(2)) as env:
        await create_queue(env, team_queue("vision", ["team-a"], gpus=8, within="Never"))
        await env.api.submit(gang("first", queue="vision"))
        await running(env, "first")
        # room for a second gang (two nodes), but not in the queue's quota
        await env.api.submit(gang("second", queue="vision"))
        blocked = await env.api.wait_job("team-a", "second", reason_is("QuotaExceeded"), timeout=30,
                                         what="QuotaExceeded")
        why = condition(blocked, "Schedulable")
        assert why is not None
        assert why["message"].startswith("queue vision uses 8 of 8 A100 GPUs") and "waits for 8" in why["message"]
        assert [r["reason"] for r in placement_of(blocked)["whyNot"]] == ["QuotaExceeded"]
        assert [h["message"] for h in history(blocked, "Unschedulable")] == [why["message"]]
        await wait_until(lambda: _reasons_include(env, "team-a", "second", {"QuotaExceeded"}), timeout=20,
                         what="the QuotaExceeded Event")
        text = describe_job(blocked)
        assert f"Waiting:    QuotaExceeded: {why['message']}" in text
        assert "QuotaExceeded" in text.split("Why not the other clusters:")[1]

        async def status_shows(check: Any) -> dict[str, Any] | None:
            status = (await get_queue(env, "vision")).get("status") or {}
            return status if check(status) else None

        status = await wait_until(lambda: status_shows(lambda s: s.get("pendingJobs") == 1), timeout=20,
                                  what="the queue's status counts the waiting job")
        assert status["used"] == {"gpus": {"A100": 8}, "cpu": "4", "memory": "16Gi"}
        assert "borrowed" not in status and status["admittedJobs"] == 1
        [admitting] = status["conditions"]
        assert (admitting["type"], admitting["status"], admitting["reason"]) == ("Admitting", "False", "QuotaExceeded")
        assert "team-a/second: queue vision uses 8 of 8 A100 GPUs" in admitting["message"]

        # a queue that does not exist: the job waits and says so
        await env.api.submit(gang("lost", queue="nope"))
        lost = await env.api.wait_job("team-a", "lost", reason_is("QueueNotFound"), timeout=30, what="QueueNotFound")
        assert "queue nope does not exist" in (condition(lost, "Schedulable") or {})["message"]

        # the queue stops selecting the namespace: its waiting job says so (admission re-checks it)
        await env.api.objects.patch_cluster_custom_object(GROUP, VERSION, QUEUES, "vision",
                                                          {"spec": {"namespaces": {"names": ["team-z"]}}})
        moved = await env.api.wait_job("team-a", "second", reason_is("NamespaceNotInQueue"), timeout=30,
                                       what="NamespaceNotInQueue")
        assert "queue vision does not select namespace team-a" in (condition(moved, "Schedulable") or {})["message"]
        await env.api.objects.patch_cluster_custom_object(GROUP, VERSION, QUEUES, "vision",
                                                          {"spec": {"namespaces": {"names": ["team-a"]}}})
        await env.api.wait_job("team-a", "second", reason_is("QuotaExceeded"), timeout=30, what="QuotaExceeded")

        # the quota frees up: the waiting job is admitted and runs
        await env.api.delete("team-a", "first")
        placed = await running(env, "second")
        assert (condition(placed, "QuotaReserved") or {}).get("reason") == "WithinQuota"
        status = await wait_until(lambda: status_shows(lambda s: s.get("pendingJobs") == 0
                                                       and s["conditions"][0]["status"] == "True"),
                                  timeout=20, what="the queue admits again")
        assert status["admittedJobs"] == 1 and status["used"]["gpus"] == {"A100": 8}
        assert (condition(await env.api.get("team-a", "lost"), "Schedulable") or {})["reason"] == "QueueNotFound"


async def test_borrowing_from_an_idle_queue_and_reclaim_when_the_lender_needs_it(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, profile_overrides=_nodes(2)) as env:
        await create_queue(env, team_queue("vision", ["team-a"], gpus=8, cohort="research"))
        await create_queue(env, team_queue("speech", ["team-b"], gpus=8, cohort="research"))
        await env.api.submit(gang("own", queue="vision"))
        own = await running(env, "own")
        await env.api.submit(gang("borrowing", queue="vision"))
        borrowing = await running(env, "borrowing")
        assert (condition(own, "QuotaReserved") or {}).get("reason") == "WithinQuota"
        assert (condition(borrowing, "QuotaReserved") or {}).get("reason") == "Borrowed"
        status = await wait_until(lambda: _status_if(env, "vision", lambda s: s.get("admittedJobs") == 2),
                                  timeout=20, what="vision counts both gangs")
        assert status["borrowed"] == {"gpus": {"A100": 8}} and status["used"]["gpus"] == {"A100": 16}
        victim_pods = await pods_of(env, borrowing["metadata"]["uid"])
        assert len(victim_pods) == 1

        # speech wants its quota back: the borrowed gang goes, whole; the one within quota stays
        await env.api.submit(gang("lender", queue="speech", namespace="team-b"))
        lender = await running(env, "lender", namespace="team-b")
        assert placement_of(lender)["cluster"] == CLUSTER
        victim = await env.api.wait_job("team-a", "borrowing", lambda j: bool(history(j, "Preempted")), timeout=20,
                                        what="the borrowed gang preempted")
        [preempted] = history(victim, "Preempted")
        assert preempted["message"].startswith(
            "preempted by team-b/lender (reason: reclaiming borrowed quota of queue speech)")
        assert preempted["epoch"] == placement_of(borrowing)["epoch"] and preempted["cluster"] == CLUSTER
        assert phase(victim) == "Pending" and "cluster" not in placement_of(victim)
        assert [p["spec"].get("nodeName") for p in await _pods_when(env, lender)] == \
            [victim_pods[0]["spec"]["nodeName"]]  # the preemptor landed where room was made
        assert await wait_until(lambda: _gone(env, borrowing["metadata"]["uid"]), timeout=20,
                                what="the victim's pods deleted")
        still = await env.api.get("team-a", "own")
        assert phase(still) == "Running" and placement_of(still)["epoch"] == placement_of(own)["epoch"]
        # the victim waits for quota now: vision is back within its nominal quota and speech uses its own
        await env.api.wait_job("team-a", "borrowing", reason_is("QuotaExceeded"), timeout=20, what="QuotaExceeded")
        assert [h["event"] for h in history(lender, "Preempting")] == ["Preempting"]
        await wait_until(lambda: _reasons_include(env, "team-a", "borrowing", {"Preempted"}), timeout=20,
                         what="the victim's Event")
        await wait_until(lambda: _reasons_include(env, "team-b", "lender", {"Preempting", "Placed"}), timeout=20,
                         what="the preemptor's Events")


async def _reasons_include(env: Env, namespace: str, name: str, wanted: set[str]) -> bool:
    return wanted <= await event_reasons(env, namespace, name)


async def event_reasons(env: Env, namespace: str, name: str) -> set[str]:
    """The reasons of the Events recorded for the TrainingJob `name` (through the hub's API)."""
    code, body = await env.hub.request(
        "GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={name}")
    assert code == 200, body
    return {str(item.get("reason")) for item in body.get("items") or ()}


async def _status_if(env: Env, name: str, check: Any) -> dict[str, Any] | None:
    status = (await get_queue(env, name)).get("status") or {}
    return status if check(status) else None


async def _pods_when(env: Env, job: dict[str, Any]) -> list[dict[str, Any]]:
    return await wait_until(lambda: _bound(env, job["metadata"]["uid"]), timeout=20, what="the job's pod bound")


async def _bound(env: Env, uid: str) -> list[dict[str, Any]] | None:
    pods = await pods_of(env, uid)
    return pods if pods and all(p["spec"].get("nodeName") for p in pods) else None


async def _gone(env: Env, uid: str) -> bool:
    client = await env.member(CLUSTER)
    return not (await client.list_all(PODS, label_selector=f"{LABEL_JOB_UID}={uid}")).items


async def test_priority_order_within_a_queue(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, profile_overrides=_nodes(1)) as env:
        await create_queue(env, team_queue("vision", ["team-a"], gpus=8))
        await env.api.submit(gang("blocker", queue="vision", priority=100))
        await running(env, "blocker")
        await env.api.submit(gang("low", queue="vision", priority=1))
        await env.api.wait_job("team-a", "low", reason_is("QuotaExceeded"), timeout=30, what="low waits")
        await env.api.submit(gang("high", queue="vision", priority=10))
        await env.api.wait_job("team-a", "high", reason_is("QuotaExceeded"), timeout=30, what="high waits")
        await env.api.delete("team-a", "blocker")
        await running(env, "high")
        low = await env.api.wait_job("team-a", "low", reason_is("QuotaExceeded"), timeout=30, what="low still waits")
        assert "cluster" not in placement_of(low) and not history(low, "Placed")


async def test_preemption_evicts_the_fewest_lowest_priority_gangs_whole(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, profile_overrides=_nodes(2)) as env:
        await create_queue(env, team_queue("vision", ["team-a"], gpus=64))
        await env.api.submit(gang("low", queue="vision", priority=1))
        low = await running(env, "low")
        await env.api.submit(gang("mid", queue="vision", priority=5))
        mid = await running(env, "mid")
        low_pods = await pods_of(env, low["metadata"]["uid"])

        # equal priority never preempts: it waits for room
        await env.api.submit(gang("peer", queue="vision", priority=1))
        peer = await env.api.wait_job("team-a", "peer", reason_is("NoClusterFits"), timeout=30, what="peer waits")
        assert not history(peer, "Placed") and not history(await env.api.get("team-a", "low"), "Preempted")

        await env.api.submit(gang("urgent", queue="vision", priority=10))
        urgent = await running(env, "urgent")
        assert placement_of(urgent)["cluster"] == CLUSTER
        assert [p["spec"]["nodeName"] for p in await _pods_when(env, urgent)] == [low_pods[0]["spec"]["nodeName"]]
        [preempting] = history(urgent, "Preempting")
        # the plan names each victim with the GPU-seconds its eviction loses (no checkpoint: since it started)
        assert re.search(r"team-a/low \(queue vision, priority 1, lower priority, loses \d[\d,]* GPU-seconds since "
                         r"it started \(no checkpoint\)\)", preempting["message"]), preempting["message"]
        assert "team-a/mid" not in preempting["message"]
        victim = await env.api.get("team-a", "low")
        [preempted] = history(victim, "Preempted")
        assert preempted["message"].startswith("preempted by team-a/urgent (reason: lower priority in queue vision)")
        assert phase(victim) == "Pending" and placement_of(victim)["epoch"] == placement_of(low)["epoch"]
        assert env.hub.context.metrics.registry.get_sample_value(
            "federator_job_requeues_total", {"reason": "Preempted"}) == 1
        assert await wait_until(lambda: _gone(env, low["metadata"]["uid"]), timeout=20, what="low's pods deleted")
        kept = await env.api.get("team-a", "mid")
        assert phase(kept) == "Running" and placement_of(kept)["epoch"] == placement_of(mid)["epoch"]
        assert not history(await env.api.get("team-a", "peer"), "Preempted")

        # room again: the victim comes back at the next epoch (peer, of equal priority, was waiting longer)
        await env.api.delete("team-a", "urgent")
        await env.api.delete("team-a", "peer")
        back = await running(env, "low")
        assert placement_of(back)["epoch"] == placement_of(low)["epoch"] + 1
        assert [h["event"] for h in history(back, "Placed")][-1] == "Placed"


async def test_explain_mode_says_whom_it_would_preempt_and_evicts_nobody(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, profile_overrides=_nodes(1),
                             placement_preemption=False) as env:
        await create_queue(env, team_queue("vision", ["team-a"], gpus=64))
        await env.api.submit(gang("low", queue="vision", priority=1))
        low = await running(env, "low")
        await env.api.submit(gang("urgent", queue="vision", priority=10))
        waiting = await env.api.wait_job("team-a", "urgent", reason_is("NoClusterFits"), timeout=30,
                                         what="urgent waits")
        message = (condition(waiting, "Schedulable") or {})["message"]
        assert re.search(f"would fit on {CLUSTER} after preempting team-a/low \\(queue vision, priority 1, "
                         r"lower priority, loses \d[\d,]* GPU-seconds since it started \(no checkpoint\)\)$",
                         message), message
        assert f"would fit on {CLUSTER} after preempting team-a/low" in describe_job(waiting)
        still = await env.api.get("team-a", "low")
        assert phase(still) == "Running" and placement_of(still)["epoch"] == placement_of(low)["epoch"]
        assert not history(still, "Preempted")


async def test_among_equal_priority_the_victim_that_checkpointed_loses_least_and_the_plan_says_so(
        tmp_path: Path) -> None:
    """Issue 29 item 3: "older" would be spared by the order before checkpoints (the most recently started goes
    first), but it reported a checkpoint after "newer" started, so its eviction loses fewer GPU-seconds."""
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, profile_overrides=_nodes(2)) as env:
        await create_queue(env, team_queue("vision", ["team-a"], gpus=64))
        await env.api.submit(gang("older", queue="vision", priority=1))
        older = await running(env, "older")
        await env.api.submit(gang("newer", queue="vision", priority=1))
        newer = await running(env, "newer")
        newer_placed = parse_epoch(history(newer, "Placed")[-1]["time"])
        assert newer_placed is not None
        [pod] = await pods_of(env, older["metadata"]["uid"])
        client = await env.member(CLUSTER)
        step = 0
        while True:  # status times are whole seconds: report until one is recorded after newer was placed
            step += 1
            await client.patch(PODS, namespace=pod["metadata"]["namespace"], name=pod["metadata"]["name"],
                               patch={"metadata": {"annotations": {ANNOTATION_CHECKPOINT: json.dumps(
                                   {"step": step, "location": f"s3://ckpt/older/{step}"})}}})
            recorded = await env.api.wait_job(
                "team-a", "older", lambda j, s=step: ((j.get("status") or {}).get("checkpoint") or {}).get("step")
                == s, timeout=30, what=f"status.checkpoint at step {step}")
            at = parse_epoch(recorded["status"]["checkpoint"]["time"])
            if at is not None and at > newer_placed:
                break
            assert step < 20, "status.checkpoint.time never passed newer's placement"

        await env.api.submit(gang("urgent", queue="vision", priority=10))
        urgent = await running(env, "urgent")
        [preempting] = history(urgent, "Preempting")
        assert re.search(r"preempting team-a/older \(queue vision, priority 1, lower priority, loses \d[\d,]* "
                         r"GPU-seconds since its last checkpoint\)$", preempting["message"]), preempting["message"]
        assert "team-a/newer" not in preempting["message"]
        assert "GPU-seconds since its last checkpoint" in describe_job(urgent)
        evicted = await env.api.get("team-a", "older")
        [preempted] = history(evicted, "Preempted")
        assert re.search(r"; it loses \d[\d,]* GPU-seconds since its last checkpoint$", preempted["message"])
        kept = await env.api.get("team-a", "newer")
        assert phase(kept) == "Running" and placement_of(kept)["epoch"] == placement_of(newer)["epoch"]
