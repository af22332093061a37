"""Checkpoints the hub knows about (issue 29): a pod reports its checkpoint through the member API (annotation
federator.dev/checkpoint on its own pod), status sync records the latest in status.checkpoint with one history
entry per copy, a drain deletes the old copy's pods with spec.checkpoint.saveGraceSeconds, and the new copy's
pods carry FEDERATOR_RESTORE_FROM = the last reported location.

Real SimClusters and a real hub with every lifecycle controller; the drain is the CLI, as a real process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from federator.apis.checkpoint import ANNOTATION_CHECKPOINT
from federator.clusters.client import PODS
from federator.delegation.adapter import LABEL_HUB, LABEL_JOB_UID
from federator.sim import kinds

from .jobtest_support import API, phase, placement_of
from .lifecycle_support import Env, history, lifecycle_env

pytestmark = pytest.mark.slow
HOME, FALLBACK = "onprem-rdma-a100", "cloud-eth-h100"
NS = "team-a"
GRACE = 3


def _job(name: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name, "namespace": NS}, "spec": {
        "roles": [{"name": "worker", "replicas": 2, "template": {
            "image": "trainer:1.4", "resources": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4}}}],
        "placement": {"network": "any", "gpuModels": ["A100", "H100"], "datasets": ["imagenet-22k"]},
        "checkpoint": {"uri": "s3://bucket/run-7", "saveGraceSeconds": GRACE}}}


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with lifecycle_env(tmp_path, [HOME, FALLBACK], run_seconds=None) as e:
        yield e


async def _report(env: Env, pod: dict[str, Any], value: str) -> None:
    """What the training process does: a merge PATCH of its own pod's annotation through the member API."""
    client = await env.member(HOME)
    await client.patch(PODS, namespace=pod["metadata"]["namespace"], name=pod["metadata"]["name"],
                       patch={"metadata": {"annotations": {ANNOTATION_CHECKPOINT: value}}})


def _env_of(pod: dict[str, Any]) -> list[dict[str, str]]:
    return [e for c in pod["spec"]["containers"] for e in c.get("env") or ()]


async def test_a_drained_gang_restores_from_its_last_reported_checkpoint_after_a_graceful_eviction(env: Env) -> None:
    job = await env.api.submit(_job("ck"))
    uid = job["metadata"]["uid"]
    running = await env.api.wait_job(NS, "ck", lambda j: placement_of(j).get("cluster") == HOME
                                     and phase(j) == "Running", timeout=40, what="ck running in HOME")
    epoch = placement_of(running)["epoch"]
    pods = sorted(await env.live_pods(HOME, uid), key=lambda p: p["metadata"]["name"])
    assert len(pods) == 2
    for pod in pods:  # the first copy restores from nothing; it is told where its checkpoints go
        names = {e["name"]: e.get("value") for e in _env_of(pod)}
        assert "FEDERATOR_RESTORE_FROM" not in names and names["FEDERATOR_CHECKPOINT_URI"] == "s3://bucket/run-7"

    await _report(env, pods[0], json.dumps({"step": 100, "location": "s3://bucket/run-7/step-100"}))
    await _report(env, pods[1], json.dumps({"step": 120, "location": "s3://bucket/run-7/step-120"}))
    job = await env.api.wait_job(NS, "ck", lambda j: ((j.get("status") or {}).get("checkpoint") or {}).get("step")
                                 == 120, timeout=30, what="status.checkpoint at step 120")
    checkpoint = job["status"]["checkpoint"]
    assert checkpoint["location"] == "s3://bucket/run-7/step-120"
    assert checkpoint["cluster"] == HOME and checkpoint["epoch"] == epoch and checkpoint["time"]
    # a malformed or hostile report is ignored; a later good one wins; history keeps one entry for the copy
    await _report(env, pods[1], '{"step": 10**9, "location": "/etc"}')
    await _report(env, pods[0], json.dumps({"step": 140, "location": "s3://bucket/run-7/step-140"}))
    job = await env.api.wait_job(NS, "ck", lambda j: j["status"]["checkpoint"]["step"] == 140, timeout=30,
                                 what="status.checkpoint at step 140")
    (entry,) = history(job, "Checkpointed")
    assert entry["epoch"] == epoch and entry["message"] == "step 140 at s3://bucket/run-7/step-140"

    graces: dict[str, object] = {}

    async def sample() -> None:  # the old copy's pods as they are deleted: their grace period
        sim = env.fed.sims[HOME]
        while True:
            for pod in (await sim.storage.list(kinds.PODS, label_selector=LABEL_HUB)).items:
                meta = pod["metadata"]
                if meta["labels"].get(LABEL_JOB_UID) == uid and meta.get("deletionTimestamp"):
                    graces[meta["name"]] = meta.get("deletionGracePeriodSeconds")
            await asyncio.sleep(0.05)

    task = asyncio.get_running_loop().create_task(sample())
    try:
        code, out, err = await env.hub.cli("admin", "cluster", "drain", HOME, "--timeout", "2m", timeout=150)
        assert code == 0, (out, err)
        moved = await env.api.wait_job(NS, "ck", lambda j: placement_of(j).get("cluster") == FALLBACK
                                       and phase(j) == "Running", timeout=60, what="ck running in FALLBACK")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert graces and set(graces.values()) == {GRACE}, graces
    assert placement_of(moved)["epoch"] > epoch
    new_pods = await env.live_pods(FALLBACK, uid)
    assert len(new_pods) == 2
    for pod in new_pods:
        names = {e["name"]: e.get("value") for e in _env_of(pod)}
        assert names["FEDERATOR_RESTORE_FROM"] == "s3://bucket/run-7/step-140", names
    # the record stays until the new copy reports its own
    assert moved["status"]["checkpoint"]["step"] == 140 and moved["status"]["checkpoint"]["epoch"] == epoch
