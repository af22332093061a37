"""A stuck gang is pulled back and lands elsewhere.

Real SimClusters and a real hub with every lifecycle controller. The hub places the gang into the
RDMA A100 cluster (cheapest, holds its dataset); between that decision and the dispatch (the test
holds the dispatch to that cluster until it is done), local workloads take every GPU there, so
Volcano cannot admit the gang. After `stuck_timeout_seconds` the hub pulls it back (deletes its member objects,
forgets the reservation), excludes the cluster, requeues it with epoch + 1, and the gang lands in the
H100 cluster, where it is admitted. Every step is in the job's history.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from federator.controllers.jobs import reservations
from federator.controllers.stuck import placed_at
from federator.sim import kinds

from .jobtest_support import API, condition, phase, placement_of, wait_until
from .lifecycle_support import events, history, lifecycle_env, local_pod, seconds

pytestmark = pytest.mark.slow
HOME, FALLBACK = "onprem-rdma-a100", "cloud-eth-h100"
# Long enough that status sync's explained wait (batched over 0.5 s) is seen before the pull-back
# even on a loaded 2-core CI machine (history times are whole seconds, so the pull-back can come
# up to a second early); the test polls the job every 50 ms.
TIMEOUT = 4.0


def _job() -> dict[str, Any]:
    return {
        "apiVersion": API, "kind": "TrainingJob", "metadata": {"name": "squeezed", "namespace": "team-a"},
        "spec": {
            "roles": [{"name": "worker", "replicas": 2, "template": {
                "image": "trainer:1.4", "resources": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 8}}}],
            "placement": {"network": "any", "gpuModels": ["A100", "H100"], "datasets": ["imagenet-22k"]},
        },
    }


async def test_a_gang_the_member_does_not_admit_is_pulled_back_and_lands_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with lifecycle_env(tmp_path, [HOME, FALLBACK], run_seconds=None, stuck_timeout_seconds=TIMEOUT,
                             stuck_exclusion_seconds=120.0) as env:
        home = env.fed.sims[HOME]
        hold = asyncio.Event()
        env.hold_dispatches(HOME, hold, monkeypatch)
        created = await env.api.submit(_job())
        uid = created["metadata"]["uid"]
        first = await env.api.wait_job("team-a", "squeezed", lambda j: placement_of(j).get("cluster") is not None,
                                       what="the first decision")
        assert placement_of(first)["cluster"] == HOME, placement_of(first)
        first_epoch = placement_of(first)["epoch"]
        # Local load takes the room before the gang's pods reach the member.
        nodes = (await home.storage.list(kinds.NODES)).items
        gpu_nodes = [n["metadata"]["name"] for n in nodes if n["status"]["allocatable"].get("nvidia.com/gpu")]
        for index, node in enumerate(gpu_nodes):
            await home.storage.create(kinds.PODS, local_pod(node, index), namespace="default")
        hold.set()

        # While it waits, the job says why, in the member's words.
        def explained(j: dict[str, Any]) -> bool:
            admitted = condition(j, "Admitted") or {}
            return phase(j) == "Placed" and admitted.get("status") == "False" \
                and "unschedulable" in str(admitted.get("message")).lower()

        waiting = await env.api.wait_job("team-a", "squeezed", explained, what="an explained wait")
        admitted = condition(waiting, "Admitted") or {}
        assert admitted["reason"] == "NotEnoughResources" and HOME in admitted["message"]

        landed = await env.api.wait_job(
            "team-a", "squeezed",
            lambda j: placement_of(j).get("cluster") == FALLBACK and phase(j) in ("Admitted", "Running"),
            timeout=30, what="the gang admitted in the fallback cluster")

        placement = placement_of(landed)
        assert placement["epoch"] == first_epoch + 1
        (excluded,) = [e for e in placement["excludedClusters"] if e["cluster"] == HOME]
        assert seconds(excluded["until"]) > time.time() + 60
        steps = events(landed)
        pull_back = ["NotAdmitted", "PulledBack", "ClusterExcluded", "Requeued"]
        start = steps.index("NotAdmitted")
        assert steps[start:start + 4] == pull_back, steps
        assert steps.index("Placed") < start < len(steps) - steps[::-1].index("Placed") - 1, steps
        for event in pull_back:
            (entry,) = history(landed, event)
            assert entry["cluster"] == HOME and entry["epoch"] == first_epoch
        (not_admitted,) = history(landed, "NotAdmitted")
        assert f"did not admit the gang within {TIMEOUT:g}s" in not_admitted["message"]
        # It waited at least the timeout after the placement before giving up.
        placed_first = placed_at({"status": {"history": history(landed, "Placed")}}, epoch=first_epoch)
        assert placed_first is not None and seconds(not_admitted["time"]) >= placed_first + TIMEOUT - 1
        # Nothing of it is left in the home cluster; the reservation there is gone.
        assert await env.fed.member_objects(HOME, uid) == ([], [])
        reservation = reservations(env.hub.context).get(uid)
        assert reservation is None or reservation.cluster == FALLBACK
        assert env.stuck.pulled_back == 1
        _, pods = await env.fed.member_objects(FALLBACK, uid)
        assert len(pods) == 2 and all(p["metadata"]["labels"]["federator.dev/epoch"] == str(first_epoch + 1)
                                      for p in pods)
        status, text = await env.hub.request("GET", "/metrics")
        assert status == 200 and f'federator_gangs_pulled_back_total{{cluster="{HOME}"}} 1.0' in text
