"""Issue 29's bar: a job that checkpoints every N steps is failed over by a partition drill, and its new copy
starts with FEDERATOR_RESTORE_FROM equal to the last checkpoint the old copy reported.

The training process is played by the test: it reports each checkpoint as the process would, a merge PATCH of
annotation federator.dev/checkpoint on its own pod through the member API, every 100 steps, from either pod,
and waits for the hub to record each one (status.checkpoint) before the next. Then `federator drill
--fault partition` (a real process) cuts the hub off; the fence agent in the member kills the old copy, the hub
requeues the gang (onClusterLoss requeue, the default) to the other cluster, and the drill reports it moved,
no job lost, and the checkpoint step its new copy restores from. Every wait is for an event, with a deadline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from federator.apis.checkpoint import ANNOTATION_CHECKPOINT, ENV_RESTORE_FROM
from federator.clusters.client import PODS

from .drilltest_support import NS, DrillEnv, drill_env, figures, gang, stored_name

pytestmark = pytest.mark.slow
HOME, FALLBACK = "onprem-rdma-a100", "cloud-eth-h100"
FENCED = {"cluster_loss_grace_seconds": 2.0, "member_lease": True, "member_lease_duration_seconds": 2.0,
          "member_lease_margin_seconds": 1.0}
URI = "s3://bucket/drill-run"
EVERY = 100


def _location(step: int) -> str:
    return f"{URI}/step-{step}"


async def _report(env: DrillEnv, pod: dict[str, Any], step: int) -> None:
    """What the training process does after saving: a merge PATCH of its own pod's annotation."""
    client = await env.env.member(HOME)
    await client.patch(PODS, namespace=pod["metadata"]["namespace"], name=pod["metadata"]["name"],
                       patch={"metadata": {"annotations": {
                           ANNOTATION_CHECKPOINT: json.dumps({"step": step, "location": _location(step)})}}})


def _env_of(pod: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for c in pod["spec"]["containers"] for e in c.get("env") or ()}


async def test_a_partition_drill_moves_a_checkpointing_job_and_its_new_copy_restores_from_the_last_checkpoint(
        tmp_path: Path) -> None:
    async with drill_env(tmp_path, [HOME, FALLBACK], **FENCED) as env:
        await env.start_agent(HOME)
        job = gang("ckpt")
        job["spec"]["checkpoint"] = {"uri": URI, "saveGraceSeconds": 5}
        uid = (await env.env.api.submit(job))["metadata"]["uid"]
        running = await env.running_in("ckpt", HOME)
        epoch = running["status"]["placement"]["epoch"]
        pods = sorted(await env.env.live_pods(HOME, uid), key=lambda p: p["metadata"]["name"])
        assert len(pods) == 2
        assert all(ENV_RESTORE_FROM not in _env_of(p) for p in pods)  # the first copy restores from nothing

        last = 0
        for step in range(EVERY, 4 * EVERY + 1, EVERY):
            await _report(env, pods[(step // EVERY) % 2], step)  # rank 0 or 1: whichever saved
            recorded = await env.env.api.wait_job(
                NS, "ckpt", lambda j, s=step: ((j.get("status") or {}).get("checkpoint") or {}).get("step") == s,
                timeout=30, what=f"status.checkpoint at step {step}")
            assert recorded["status"]["checkpoint"]["location"] == _location(step)
            last = step
        assert last == 4 * EVERY

        code, out, err = await env.drill("--cluster", HOME, "--fault", "partition", "--duration", "15s",
                                         "--settle-timeout", "120s", "-o", "json", timeout=300)
        assert code == 0, err
        found = figures(out)  # the five figures add up to gangsAffected
        assert found["gangsAffected"] == 1 and found["gangsMoved"] == 1, (found, err)
        assert found["jobsLost"] == 0 and found["gangsLost"] == 0, found
        assert found["duplicates"] == 0 and found["maxConcurrentCopies"] == 1, found
        report = await env.report(stored_name(out, err))
        (outcome,) = report["spec"]["gangs"]
        assert outcome["outcome"] == "moved" and outcome["cluster"] == FALLBACK, outcome
        assert outcome["restoredFromStep"] == last, outcome

        moved = await env.running_in("ckpt", FALLBACK)
        assert moved["status"]["placement"]["epoch"] > epoch
        new_pods = await env.env.live_pods(FALLBACK, uid)
        assert len(new_pods) == 2
        for pod in new_pods:
            assert _env_of(pod)[ENV_RESTORE_FROM] == _location(last), pod["metadata"]["name"]
        # the record is the old copy's last report until the new copy reports its own
        assert moved["status"]["checkpoint"]["step"] == last and moved["status"]["checkpoint"]["epoch"] == epoch

        code, text, err = await env.drill("show", stored_name(out, err))
        assert code == 0, err
        assert f"restored from step {last}" in text, text
