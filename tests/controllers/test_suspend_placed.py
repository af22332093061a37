"""Suspend stops a gang (issue 31 item 6): spec.suspend true on a placed or running job deletes its member
objects (fenced, as a requeue does), releases its quota, and leaves it Suspended (history and Event
Suspended); false places it again at a higher epoch. A real hub (every lifecycle controller) over simulated
members whose pods run until deleted; every wait is on what the hub or the member shows.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from federator.apis.checkpoint import ANNOTATION_CHECKPOINT, ENV_RESTORE_FROM
from federator.cli.jobs import describe_job
from federator.apiserver.audit import AuditLog, AuditLogSettings, iter_events
from federator.clusters.client import PODS

from .jobtest_support import condition, phase, placement_of, wait_until
from .lifecycle_support import Env, aimed_job, history, lifecycle_env
from .test_queue_flow import CLUSTER, _reasons_include, create_queue, gang, reason_is, running, team_queue

pytestmark = pytest.mark.slow
ACTIVE = ("Placed", "Admitted", "Running")


async def _gone_from_member(env: Env, uid: str) -> bool:
    """Neither a PodGroup nor a pod of the job is left in CLUSTER (not even one being deleted)."""
    groups, pods = await env.fed.member_objects(CLUSTER, uid)
    return not groups and not pods


async def test_a_running_gang_is_deleted_on_suspend_and_placed_again_on_resume(tmp_path: Path) -> None:
    # the hub's audit log (default policy) says which member writes placed the gang and which suspended it
    audit = AuditLog(AuditLogSettings(path=str(tmp_path / "audit.log")))
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, audit=audit,
                             profile_overrides={CLUSTER: {"gpu_nodes": 2, "cpu_nodes": 0}}) as env:
        await create_queue(env, team_queue("vision", ["team-a"], gpus=8, within="Never"))
        await env.api.submit(gang("first", queue="vision"))
        first = await running(env, "first")
        uid, epoch = first["metadata"]["uid"], placement_of(first)["epoch"]
        groups, pods = await env.fed.member_objects(CLUSTER, uid)
        assert groups and pods
        # its copy reports a checkpoint: the resumed copy restores from it
        client = await env.member(CLUSTER)
        await client.patch(PODS, namespace=pods[0]["metadata"]["namespace"], name=pods[0]["metadata"]["name"],
                           patch={"metadata": {"annotations": {ANNOTATION_CHECKPOINT: json.dumps(
                               {"step": 7, "location": "s3://ckpt/first/7"})}}})
        await env.api.wait_job("team-a", "first", lambda j: (j["status"].get("checkpoint") or {}).get("step") == 7,
                               timeout=30, what="status.checkpoint at step 7")
        await env.api.submit(gang("second", queue="vision"))
        await env.api.wait_job("team-a", "second", reason_is("QuotaExceeded"), timeout=30, what="QuotaExceeded")

        # the bar: kubectl patch over the hub, as a user types it
        code, out, err = await env.hub.kubectl("admin", "patch", "tj", "first", "-n", "team-a",
                                               "--type=merge", "-p", '{"spec":{"suspend":true}}')
        assert code == 0, err
        await wait_until(lambda: _gone_from_member(env, uid), timeout=40, what="the gang gone from its member")
        suspended = await env.api.wait_job("team-a", "first", lambda j: phase(j) == "Suspended", what="Suspended")
        await asyncio.to_thread(audit.flush)
        member_writes = {(e["verb"], e["objectRef"]["resource"], e["annotations"]["federator.dev/reason"])
                         for e in iter_events(tmp_path / "audit.log")
                         if e.get("annotations", {}).get("federator.dev/cluster") == CLUSTER}
        assert ("create", "pods", "place") in member_writes and ("delete", "pods", "suspend") in member_writes, \
            member_writes
        assert placement_of(suspended).get("cluster") is None
        assert placement_of(suspended)["epoch"] == epoch
        assert placement_of(suspended)["previous"] == {"cluster": CLUSTER, "epoch": epoch}
        said = condition(suspended, "Suspended")
        assert said is not None and said["status"] == "True" and said["reason"] == "Suspended"
        assert (condition(suspended, "QuotaReserved") or {}).get("status") == "False"
        entries = history(suspended, "Suspended")
        assert [(h["cluster"], h["epoch"]) for h in entries] == [(CLUSTER, epoch)]
        assert "deleted" in entries[0]["message"]
        assert suspended["status"].get("requeues", 0) == 0  # a suspend is no failure: not counted
        assert suspended["status"]["checkpoint"]["location"] == "s3://ckpt/first/7"
        text = describe_job(suspended)
        assert "Phase:        Suspended since " in text and "Cluster:      <none>" in text
        await wait_until(lambda: _reasons_include(env, "team-a", "first", {"Suspended"}), timeout=20,
                         what="the Suspended Event")

        # its quota went with it: the queue's other job is admitted now
        second = await running(env, "second")
        assert second["status"]["placement"]["cluster"] == CLUSTER

        # resumed, it waits for the quota like any queued job, then runs at a higher epoch
        code, out, err = await env.hub.kubectl("admin", "patch", "tj", "first", "-n", "team-a",
                                               "--type=merge", "-p", '{"spec":{"suspend":false}}')
        assert code == 0, err
        waiting = await env.api.wait_job("team-a", "first", reason_is("QuotaExceeded"), timeout=30,
                                         what="queued again, waiting for quota")
        assert (condition(waiting, "Suspended") or {}).get("reason") == "Resumed"
        await env.api.delete("team-a", "second")
        back = await running(env, "first")
        assert placement_of(back)["cluster"] == CLUSTER and placement_of(back)["epoch"] > epoch
        groups, pods = await env.fed.member_objects(CLUSTER, uid)
        assert pods and all(int(p["metadata"]["labels"]["federator.dev/epoch"]) > epoch for p in pods)
        envs = [{e["name"]: e.get("value") for e in c.get("env") or ()} for p in pods
                for c in p["spec"]["containers"]]
        assert envs and all(e.get(ENV_RESTORE_FROM) == "s3://ckpt/first/7" for e in envs), envs


async def test_a_placed_gang_not_yet_dispatched_is_suspended_and_never_reaches_its_member(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        hold = asyncio.Event()
        env.hold_dispatches(CLUSTER, hold, monkeypatch)
        await env.api.submit(aimed_job("held", CLUSTER))
        placed = await env.api.wait_job("team-a", "held", lambda j: phase(j) == "Placed", what="Placed")
        uid, epoch = placed["metadata"]["uid"], placement_of(placed)["epoch"]
        await env.api.patch("team-a", "held", {"spec": {"suspend": True}})
        await env.api.wait_job("team-a", "held", lambda j: phase(j) == "Suspended", what="Suspended")
        hold.set()  # the dispatch goes on, reads the job again and finds it moved on
        await wait_until(lambda: uid not in env.hub.context.parts.dispatcher.in_flight, timeout=30,
                         what="the held dispatch done")
        await wait_until(lambda: _gone_from_member(env, uid), timeout=30, what="nothing of it in the member")
        job = await env.api.get("team-a", "held")
        assert phase(job) == "Suspended" and placement_of(job)["epoch"] == epoch

        await env.api.patch("team-a", "held", {"spec": {"suspend": False}})
        back = await env.api.wait_job("team-a", "held", lambda j: phase(j) == "Running", timeout=40,
                                      what="Running after resuming")
        assert placement_of(back)["epoch"] == epoch + 1


async def test_suspend_then_delete_leaves_nothing(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        await env.api.submit(aimed_job("brief", CLUSTER))
        job = await env.api.wait_job("team-a", "brief", lambda j: phase(j) == "Running", timeout=40, what="Running")
        uid = job["metadata"]["uid"]
        await env.api.patch("team-a", "brief", {"spec": {"suspend": True}})
        await env.api.delete("team-a", "brief")

        async def gone() -> bool:
            return not any(j["metadata"]["name"] == "brief" for j in await env.api.list())

        await wait_until(gone, timeout=40, what="the job deleted")
        await wait_until(lambda: _gone_from_member(env, uid), timeout=40, what="nothing of it in the member")


async def test_a_suspend_that_is_not_a_boolean_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        await env.api.submit(aimed_job("steady", CLUSTER))
        job = await env.api.wait_job("team-a", "steady", lambda j: phase(j) == "Running", timeout=40,
                                     what="Running")
        for hostile in ("yes", 1, "true", {"a": 1}, ["x"], "x" * 100_000):
            code, body = await env.hub.request(
                "PATCH", "/apis/federator.dev/v1alpha1/namespaces/team-a/trainingjobs/steady",
                body={"spec": {"suspend": hostile}}, headers={"Content-Type": "application/merge-patch+json"})
            assert code == 422, (hostile if not isinstance(hostile, str) else hostile[:20], body)
            assert body["kind"] == "Status" and "spec.suspend" in json.dumps(body["details"])
        after = await env.api.get("team-a", "steady")
        assert phase(after) == "Running"
        assert after["spec"].get("suspend", False) is False
        assert placement_of(after)["epoch"] == placement_of(job)["epoch"]
        assert await env.live_pods(CLUSTER, job["metadata"]["uid"])
