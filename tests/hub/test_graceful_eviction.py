"""Graceful eviction through the process runtime (issue 29, item 2): a drained copy's process gets SIGTERM and
spec.checkpoint.saveGraceSeconds to save before it is killed, and the new copy's process starts with
FEDERATOR_RESTORE_FROM = the last checkpoint the old copy reported.

A real hub with its controllers and two simulated members whose kubelets run pods as local processes (profile
processRuntime). The job's one pod runs a shell that traps SIGTERM, then "saves" until the test says it is done
(a file in the checkpoint claim, spec.checkpoint.volume, mounted by the hub) and writes a final checkpoint file.
Meanwhile the test reports the saved checkpoint as the process would (a PATCH of its pod's annotation through
the member API): the hub records it from the terminating copy, and the new copy restores from it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from federator.apis.checkpoint import ANNOTATION_CHECKPOINT
from federator.clusters.client import PODS
from federator.sim.profile import ProcessRuntimeSpec

from ..controllers.jobtest_support import API, phase, placement_of, wait_until
from ..controllers.lifecycle_support import Env, RunningFederation, lifecycle_env

HOME, FALLBACK = "onprem-rdma-a100", "cloud-eth-h100"
NS = "default"
CLAIM = "ck"

pytestmark = pytest.mark.xdist_group("process-runtime")

SCRIPT = (
    'echo "start epoch=$FEDERATOR_EPOCH restore=${FEDERATOR_RESTORE_FROM:-none}" '
    '>> "$FEDERATOR_CHECKPOINT_DIR/start-$FEDERATOR_EPOCH"; '
    'trap \'while [ ! -f "$FEDERATOR_CHECKPOINT_DIR/go-$FEDERATOR_EPOCH" ]; do sleep 0.1; done; '
    'echo "saved at SIGTERM epoch=$FEDERATOR_EPOCH" '
    '> "$FEDERATOR_CHECKPOINT_DIR/final-$FEDERATOR_EPOCH"; '
    'exit 0\' TERM; '
    'while true; do sleep 0.2; done'
)


def _job(mount: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "TrainingJob", "metadata": {"name": "gr", "namespace": NS}, "spec": {
        "roles": [{"name": "worker", "replicas": 1, "template": {
            "image": "busybox:1", "command": ["/bin/sh", "-c", SCRIPT],
            "resources": {"cpu": "1", "memory": "1Gi"}}}],
        "placement": {"network": "any", "datasets": ["imagenet-22k"]},
        "checkpoint": {"volume": {"claimName": CLAIM}, "mountPath": mount, "saveGraceSeconds": 30}}}


def _claim_dir(root: Path, cluster: str) -> Path:
    return root / cluster / "pvc" / NS / CLAIM


async def test_a_drained_process_gets_sigterm_and_saves_and_the_next_copy_restores(tmp_path: Path) -> None:
    root = tmp_path / "processes"
    mount = tmp_path / "ckpt-mount"  # an existing directory: the runtime binds the claim over it
    mount.mkdir()
    fed = RunningFederation(tmp_path / "members", run_seconds=None,
                            process_runtime=ProcessRuntimeSpec(root=str(root)))
    async with lifecycle_env(tmp_path, [HOME, FALLBACK], federation=fed) as env:
        await env.api.submit(_job(str(mount)))
        job = await env.api.wait_job(NS, "gr", lambda j: placement_of(j).get("cluster") == HOME
                                     and phase(j) == "Running", timeout=120, what="gr running in HOME")
        uid, epoch = job["metadata"]["uid"], placement_of(job)["epoch"]

        async def started(cluster: str, at: int) -> str | None:
            found = _claim_dir(root, cluster) / f"start-{at}"
            return found.read_text() if found.is_file() else None

        first = await wait_until(lambda: started(HOME, epoch), timeout=120, what="the first copy's process")
        assert "restore=none" in str(first)
        (pod,) = await env.live_pods(HOME, uid)
        client = await env.member(HOME)
        await client.patch(PODS, namespace=pod["metadata"]["namespace"], name=pod["metadata"]["name"],
                           patch={"metadata": {"annotations": {
                               ANNOTATION_CHECKPOINT: json.dumps({"step": 7, "location": f"{mount}/step-7"})}}})
        await env.api.wait_job(NS, "gr", lambda j: ((j.get("status") or {}).get("checkpoint") or {}).get("step")
                               == 7, timeout=60, what="status.checkpoint at step 7")

        drain = asyncio.get_running_loop().create_task(
            env.hub.cli("admin", "cluster", "drain", HOME, "--timeout", "3m", timeout=200))

        async def terminating() -> dict[str, Any] | None:
            for found in await env.live_pods(HOME, uid):
                if found["metadata"].get("deletionTimestamp"):
                    return found
            return None

        old = await wait_until(terminating, timeout=120, what="the old copy's pod terminating")
        assert old["metadata"]["deletionGracePeriodSeconds"] == 30
        # the process saves during its grace and reports it; the hub records it from the terminating copy
        await client.patch(PODS, namespace=NS, name=old["metadata"]["name"], patch={"metadata": {"annotations": {
            ANNOTATION_CHECKPOINT: json.dumps({"step": 9, "location": f"{mount}/step-9"})}}})
        await env.api.wait_job(NS, "gr", lambda j: j["status"]["checkpoint"]["step"] == 9, timeout=60,
                               what="status.checkpoint at step 9, reported during the grace")
        (_claim_dir(root, HOME) / f"go-{epoch}").write_text("saved\n")
        code, out, err = await drain
        assert code == 0, (out, err)
        moved = await env.api.wait_job(NS, "gr", lambda j: placement_of(j).get("cluster") == FALLBACK
                                       and phase(j) == "Running", timeout=120, what="gr running in FALLBACK")
        # SIGTERM first: the old process trapped it and saved before it went
        final = _claim_dir(root, HOME) / f"final-{epoch}"
        assert final.is_file() and final.read_text().strip() == f"saved at SIGTERM epoch={epoch}"
        new_epoch = placement_of(moved)["epoch"]
        second = await wait_until(lambda: started(FALLBACK, new_epoch), timeout=120, what="the new copy's process")
        assert f"restore={mount}/step-9" in str(second), second
