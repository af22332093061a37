"""Deadlines (issue 29 item 5): spec.activeDeadlineSeconds stops every copy and fails the job
(DeadlineExceeded); spec.placement.giveUpAfterSeconds fails a job that fits nowhere (Unplaceable) with its
why-not table; a job placed in time is unaffected; a requeue restarts the pending clock, not the active one.

The `due` cases are the sweep's verdicts on stored jobs (times given); the rest runs real SimClusters and a hub
with every lifecycle controller and waits for phases, never for a moment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from federator.apis.timestamps import format_time
from federator.controllers.deadlines import DEADLINE_EXCEEDED, DEADLINE_MESSAGE, UNPLACEABLE, due, why_not_text
from federator.controllers.jobs import reservations

from .jobtest_support import condition, phase, placement_of, wait_until
from .lifecycle_support import aimed_job, history, lifecycle_env

NOW = 1_800_000_000.0
HOME, OTHER = "onprem-rdma-a100", "cloud-eth-h100"


def stored(*, created: float, status: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "ns", "uid": "u1", "creationTimestamp": format_time(created)},
            "spec": {"roles": [], **spec}, "status": status}


def requeued(at: float) -> dict[str, Any]:
    return {"time": format_time(at), "event": "Requeued", "message": "requeued: cluster lost", "epoch": 1}


PENDING_10 = {"placement": {"giveUpAfterSeconds": 10}}


@pytest.mark.parametrize(("created", "status", "spec", "reason"), [
    # pending since creation: judged from it
    (NOW - 5, {"phase": "Pending"}, PENDING_10, None),
    (NOW - 10, {"phase": "Pending"}, PENDING_10, UNPLACEABLE),
    # requeued: the pending clock starts again at the newest requeue, whenever the job was created
    (NOW - 1000, {"phase": "Pending", "history": [requeued(NOW - 3)]}, PENDING_10, None),
    (NOW - 1000, {"phase": "Pending", "history": [requeued(NOW - 900), requeued(NOW - 11)]}, PENDING_10,
     UNPLACEABLE),
    # placed, suspended, finished, or without the field: never Unplaceable
    (NOW - 1000, {"phase": "Placed", "placement": {"cluster": "c", "epoch": 1}}, PENDING_10, None),
    (NOW - 1000, {"phase": "Suspended"}, PENDING_10, None),
    (NOW - 1000, {"phase": "Failed"}, PENDING_10, None),
    (NOW - 1000, {"phase": "Pending"}, {}, None),
    # the active deadline counts from status.startTime, across requeues (kube: startTime is kept)
    (NOW - 1000, {"phase": "Running", "startTime": format_time(NOW - 59),
                  "placement": {"cluster": "c", "epoch": 1}}, {"activeDeadlineSeconds": 60}, None),
    (NOW - 1000, {"phase": "Running", "startTime": format_time(NOW - 60),
                  "placement": {"cluster": "c", "epoch": 1}}, {"activeDeadlineSeconds": 60}, DEADLINE_EXCEEDED),
    (NOW - 1000, {"phase": "Pending", "startTime": format_time(NOW - 61), "history": [requeued(NOW - 1)]},
     {"activeDeadlineSeconds": 60, **PENDING_10}, DEADLINE_EXCEEDED),
    # never started: no active clock yet (a pending job's wait is the pending deadline's business)
    (NOW - 1000, {"phase": "Pending"}, {"activeDeadlineSeconds": 60}, None),
    (NOW - 1000, {"phase": "Succeeded", "startTime": format_time(NOW - 999)}, {"activeDeadlineSeconds": 60}, None),
])
def test_the_sweeps_verdict(created: float, status: dict[str, Any], spec: dict[str, Any], reason: str | None) -> None:
    verdict = due(stored(created=created, status=status, spec=spec), now=NOW)
    assert (verdict.reason if verdict else None) == reason


def test_the_why_not_table_in_the_message_is_bounded() -> None:
    rows = [{"cluster": f"c{i:04d}", "filter": "gpu-model", "reason": "NoGPUModel", "message": "m" * 1000}
            for i in range(500)]
    job = stored(created=NOW - 100, status={"phase": "Pending", "placement": {"whyNot": rows}}, spec=PENDING_10)
    text = why_not_text(job)
    assert text.startswith("c0000: gpu-model/NoGPUModel (") and text.endswith("; and 468 more clusters")
    assert len(text) < 4200
    verdict = due(job, now=NOW)
    assert verdict is not None and "c0000" in verdict.message and len(verdict.message) < 4400


def _unplaceable(name: str, *, give_up: int) -> dict[str, Any]:
    job = aimed_job(name, HOME)
    job["spec"]["placement"] = {"gpuModels": ["B200"], "giveUpAfterSeconds": give_up}  # no cluster has one
    return job


def _failed(reason: str) -> Any:
    return lambda j: phase(j) == "Failed" and (condition(j, "Failed") or {}).get("reason") == reason


@pytest.mark.slow
async def test_a_job_that_fits_nowhere_gives_up_and_one_placed_in_time_runs_on(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [HOME, OTHER], run_seconds=None) as env:
        placed = aimed_job("placed", HOME)
        placed["spec"]["placement"]["giveUpAfterSeconds"] = 2
        await env.api.submit(placed)
        await env.api.wait_job("team-a", "placed", lambda j: phase(j) == "Running", timeout=30,
                               what="the placeable job running")
        created = await env.api.submit(_unplaceable("nowhere", give_up=2))
        failed = await env.api.wait_job("team-a", "nowhere", _failed(UNPLACEABLE), timeout=30,
                                        what="the unplaceable job Failed")
        message = (condition(failed, "Failed") or {})["message"]
        assert "spec.placement.giveUpAfterSeconds 2" in message
        assert HOME in message and OTHER in message, message  # the why-not table, cluster by cluster
        assert history(failed, "Failed")[-1]["message"] == message
        assert placement_of(failed).get("cluster") is None
        assert reservations(env.hub.context).get(created["metadata"]["uid"]) is None
        # The sweep that failed it judged the older, placed job too: it runs on.
        job = await env.api.get("team-a", "placed")
        assert phase(job) == "Running" and condition(job, "Failed") is None


@pytest.mark.slow
async def test_a_job_past_its_active_deadline_is_stopped_in_the_member_and_failed(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [HOME], run_seconds=None) as env:
        created = await env.api.submit(aimed_job("long", HOME))
        uid = created["metadata"]["uid"]
        running = await env.api.wait_job("team-a", "long", lambda j: phase(j) == "Running", timeout=30,
                                         what="the gang running")
        epoch = placement_of(running)["epoch"]
        assert running["status"]["startTime"] == history(running, "Placed")[0]["time"]
        _, pods = await env.fed.member_objects(HOME, uid)
        assert len(pods) == 3
        # Like a Job's, the deadline may be set on a running job; it counts from status.startTime.
        await env.api.patch("team-a", "long", {"spec": {"activeDeadlineSeconds": 1}})
        failed = await env.api.wait_job("team-a", "long", _failed(DEADLINE_EXCEEDED), timeout=30,
                                        what="the job Failed past its deadline")
        assert DEADLINE_MESSAGE in (condition(failed, "Failed") or {})["message"]
        assert placement_of(failed).get("cluster") is None and placement_of(failed)["epoch"] == epoch + 1
        assert failed["status"]["startTime"] == running["status"]["startTime"]

        async def gone() -> bool:
            return await env.fed.member_objects(HOME, uid) == ([], [])

        await wait_until(gone, timeout=30, what="the gang's member objects deleted")
        assert reservations(env.hub.context).get(uid) is None
        # It stays Failed: nothing places or dispatches it again.
        job = await env.api.get("team-a", "long")
        assert phase(job) == "Failed" and placement_of(job).get("cluster") is None
