"""Job status that never lies (issue 16, item 9): real SimClusters, a real hub with every lifecycle controller.

- a Running job that is deleted never turns Failed (MemberObjectsDeleted) on its way out: it keeps its
  phase, gains the condition Terminating=True (DeletingMemberObjects), and every version of it the hub
  stored until it went is checked;
- while a job is being deleted, the hub's Table (kubectl get tj), `federator get jobs` and `federator
  describe job` say Terminating;
- a suspended job shows phase Suspended (condition Suspended=True) and nothing of it reaches a member; once
  resumed it is placed (Suspended=False, Resumed), or Pending with its why-not when it fits nowhere;
  `federator describe job` and `kubectl get tj` say Suspended.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest

from federator.cli.jobs import describe_job
from federator.controllers.cleanup import CONDITION_TERMINATING, REASON_DELETING_MEMBER_OBJECTS

from ..hub.hubtest_support import job as example_job
from ..hub.hubtest_support import jobs_url, start_hub
from .jobtest_support import condition, phase, wait_until
from .lifecycle_support import Env, aimed_job, lifecycle_env

pytestmark = pytest.mark.slow
CLUSTER = "onprem-rdma-a100"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
HOLD = "federator.test/hold"


async def _versions(env: Env, namespace: str, name: str, since: str, seen: list[dict[str, Any]],
                    gone: asyncio.Event) -> None:
    """Every stored version of the job from resourceVersion `since` until it is deleted."""
    rt = env.hub.context.kind("TrainingJob")
    async for event in env.hub.context.storage.watch(rt, namespace=namespace, resource_version=since,
                                                     field_selector=f"metadata.name={name}"):
        seen.append(event.object)
        if event.type == "DELETED":
            gone.set()
            return


def _count(histogram: Any) -> float:
    return float(sum(bucket.get() for bucket in histogram._buckets))


async def test_deleting_a_running_job_shows_terminating_never_failed(tmp_path: Path) -> None:
    # The fencing lease renewed every ~0.3 s: status sync learns soon after the gang's objects are gone that
    # no fence agent took them (the verdict before it would have judged the gang lost: MemberObjectsDeleted).
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=600, member_lease_duration_seconds=1,
                             status_resync_seconds=0.3) as env:
        body = aimed_job("deleted-running", CLUSTER)
        # A second finalizer nobody removes keeps the job (being deleted, its member objects gone) in view.
        body["metadata"]["finalizers"] = [HOLD]
        await env.api.submit(body)
        running = await env.api.wait_job("team-a", "deleted-running", lambda j: phase(j) == "Running",
                                         what="running")
        uid = running["metadata"]["uid"]
        seen: list[dict[str, Any]] = []
        gone = asyncio.Event()
        watcher = asyncio.create_task(_versions(env, "team-a", "deleted-running",
                                                running["metadata"]["resourceVersion"], seen, gone))
        try:
            await env.api.delete("team-a", "deleted-running")
            # the cleanup removed every member object, then its own finalizer
            await env.api.wait_job("team-a", "deleted-running",
                                   lambda j: j["metadata"].get("finalizers") == [HOLD], what="cleanup done")
            assert await env.live_pods(CLUSTER, uid) == []
            objects_gone = time.time()
            lease = env.hub.context.parts.members.syncs[CLUSTER].lease
            # a renewal acknowledged after that (the verdict is known), then three full passes of status sync
            # over every active job (status_resync_seconds): a gang judged lost would have been written Failed
            await wait_until(lambda: (lease.acked_sent_at or 0) > objects_gone, what="a renewal after the delete")
            passes = env.hub.metrics.loop_phase_seconds.labels(loop="status_sync", phase="refresh")
            ticks = _count(passes)
            await wait_until(lambda: _count(passes) >= ticks + 12, what="a dozen status sync ticks (0.1 s)")
            held = await env.api.get("team-a", "deleted-running")
            assert phase(held) == "Running"
            await env.api.patch("team-a", "deleted-running", {"metadata": {"finalizers": []}})
            await asyncio.wait_for(gone.wait(), 30)
        finally:
            watcher.cancel()
        deleting = [v for v in seen if (v.get("metadata") or {}).get("deletionTimestamp")]
        assert deleting, "the job was never seen being deleted"
        assert [phase(v) for v in seen] == ["Running"] * len(seen), [phase(v) for v in seen]
        assert not any(c.get("reason") == "MemberObjectsDeleted" or c.get("type") == "Failed"
                       for v in seen for c in (v.get("status") or {}).get("conditions") or ())
        said = [condition(v, CONDITION_TERMINATING) for v in deleting]
        terminating = [c for c in said if c is not None]
        assert terminating, "no version carried the Terminating condition"
        assert terminating[0]["status"] == "True"
        assert terminating[0]["reason"] == REASON_DELETING_MEMBER_OBJECTS
        assert CLUSTER in terminating[0]["message"] and "being removed" in terminating[0]["message"]


async def test_a_job_being_deleted_reads_terminating_everywhere(tmp_path: Path) -> None:
    async with start_hub(tmp_path) as hub:
        body = example_job("default", "held")
        body["metadata"]["finalizers"] = [HOLD]  # nobody removes it: the job stays terminating
        status, created = await hub.request("POST", jobs_url("default"), body=body)
        assert status == 201, created
        status, _ = await hub.request("PATCH", jobs_url("default", "held", "status"),
                                      body={"status": {"phase": "Running"}},
                                      headers={"Content-Type": "application/merge-patch+json"})
        assert status == 200
        status, _ = await hub.request("DELETE", jobs_url("default", "held"))
        assert status in (200, 202)

        status, table = await hub.request("GET", jobs_url("default"), headers={"Accept": TABLE})
        assert status == 200
        names = [c["name"] for c in table["columnDefinitions"]]
        row = next(r for r in table["rows"] if r["cells"][0] == "held")
        assert row["cells"][names.index("Phase")] == "Terminating"

        code, out, err = await hub.kubectl("researcher", "get", "tj", "held")
        assert code == 0, err
        assert "Terminating" in out.splitlines()[1]

        code, out, err = await hub.cli("researcher", "get", "jobs")
        assert code == 0, err
        assert [line.split()[:2] for line in out.splitlines()[1:]] == [["held", "Terminating"]]
        code, out, err = await hub.cli("researcher", "describe", "job", "held")
        assert code == 0, err
        assert "Phase:        Terminating (was Running)" in out

        # and a job not being deleted shows its phase
        status, _ = await hub.request("PATCH", jobs_url("default", "held"), body={"metadata": {"finalizers": []}},
                                      headers={"Content-Type": "application/merge-patch+json"})
        assert status == 200


async def test_a_suspended_job_shows_suspended_then_resumes(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=600) as env:
        fits = aimed_job("later", CLUSTER)
        fits["spec"]["suspend"] = True
        never = aimed_job("never-fits", CLUSTER, workers=64, gpus=8)
        never["spec"]["suspend"] = True
        for body in (fits, never):
            await env.api.submit(body)
        for name in ("later", "never-fits"):
            job = await env.api.wait_job("team-a", name, lambda j: phase(j) == "Suspended", what="Suspended")
            suspended = condition(job, "Suspended")
            assert suspended is not None and suspended["status"] == "True"
            assert (job["status"].get("placement") or {}).get("cluster") is None
        assert await env.live_pods(CLUSTER, job["metadata"]["uid"]) == []
        assert re.search(r"Phase:        Suspended since \S+Z: spec.suspend is true", describe_job(job))
        assert env.hub.metrics.jobs.labels(phase="Suspended")._value.get() == 2
        code, out, err = await env.hub.kubectl("admin", "get", "tj", "-n", "team-a")
        assert code == 0, err
        assert all("Suspended" in line for line in out.splitlines()[1:]), out

        for name in ("later", "never-fits"):
            await env.api.patch("team-a", name, {"spec": {"suspend": False}})
        placed = await env.api.wait_job("team-a", "later", lambda j: phase(j) in ("Placed", "Admitted", "Running"),
                                        what="placed after resuming")
        resumed = condition(placed, "Suspended")
        assert resumed is not None and resumed["status"] == "False" and resumed["reason"] == "Resumed"
        pending = await env.api.wait_job("team-a", "never-fits", lambda j: phase(j) == "Pending",
                                         what="Pending after resuming")
        assert (condition(pending, "Schedulable") or {}).get("status") == "False"
        assert (condition(pending, "Suspended") or {}).get("reason") == "Resumed"

        # suspending a running job stops its gang (tests/controllers/test_suspend_placed.py has the rest)
        running = await env.api.wait_job("team-a", "later", lambda j: phase(j) == "Running", what="running")
        await env.api.patch("team-a", "later", {"spec": {"suspend": True}})
        again = await env.api.wait_job("team-a", "later", lambda j: phase(j) == "Suspended", what="suspended")
        assert "Phase:        Suspended since " in describe_job(again)
        await wait_until(lambda: _no_pods(env, running["metadata"]["uid"]), what="its pods gone")


async def _no_pods(env: Env, uid: str) -> bool:
    return not await env.live_pods(CLUSTER, uid)
