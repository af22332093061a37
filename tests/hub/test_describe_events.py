"""`kubectl describe tj` lists the Events the hub's controllers recorded (real SimCluster, real hub
running every lifecycle controller, real /usr/bin/kubectl 1.32).

kubectl describe asks GET /api/v1/namespaces/NS/events?fieldSelector=involvedObject.name=N,
involvedObject.namespace=NS,involvedObject.kind=TrainingJob,involvedObject.uid=UID&limit=500 and prints
Type, Reason, Age, From, Message. A job that runs shows Placed (cluster and score), Dispatched, Admitted
and Running; one that fits nowhere shows a Warning with the short why-not. A researcher sees the same
for a job in their namespace and is refused Events elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..controllers.jobtest_support import API, phase, placement_of, wait_until
from ..controllers.lifecycle_support import Env, aimed_job, lifecycle_env

pytestmark = [pytest.mark.kubectl, pytest.mark.slow]

CLUSTER = "onprem-rdma-a100"
FALLBACK = "cloud-eth-h100"


async def described(env: Env, *args: str, reasons: set[str]) -> list[list[str]] | None:
    """The Events rows of `kubectl describe ARGS` (admin), once they show every one of `reasons`."""
    code, out, err = await env.hub.kubectl("admin", "describe", *args)
    assert code == 0, err
    rows = event_rows(out) if "Events:" in out else []
    return rows if reasons <= {row[1] for row in rows} else None


def event_rows(described: str) -> list[list[str]]:
    """The rows of the Events table of `kubectl describe` (type, reason, age..., from, message...)."""
    lines = described.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Events:"))
    return [line.split() for line in lines[start + 3:] if line.strip()]


async def test_describe_lists_what_happened_to_a_job(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        await env.api.submit(aimed_job("resnet", CLUSTER, namespace="default"))
        await env.api.wait_job("default", "resnet", lambda j: phase(j) == "Running", timeout=30, what="Running")
        await env.api.submit(aimed_job("huge", CLUSTER, namespace="default", workers=40))
        await env.api.wait_job("default", "huge", lambda j: phase(j) == "Pending", timeout=30, what="Pending")

        async def described(name: str, reasons: set[str]) -> list[list[str]] | None:
            code, out, err = await env.hub.kubectl("researcher", "describe", "tj", name)
            assert code == 0, err
            rows = event_rows(out) if "Events:" in out else []
            return rows if reasons <= {row[1] for row in rows} else None

        rows = await wait_until(lambda: described("resnet", {"Placed", "Dispatched", "Admitted", "Running"}),
                                timeout=30, what="describe lists the job's Events")
        by_reason = {row[1]: row for row in rows}
        # (on a loaded machine a member create may time out: then the job is placed again at the next epoch)
        placed = " ".join(by_reason["Placed"])
        assert "federator-placement" in placed and f"placed in {CLUSTER}" in placed and "score" in placed
        assert "at epoch" in placed
        assert "federator-dispatch" in by_reason["Dispatched"] and "federator-status-sync" in by_reason["Running"]
        assert {by_reason[r][0] for r in ("Placed", "Dispatched", "Admitted", "Running")} == {"Normal"}, rows

        rows = await wait_until(lambda: described("huge", {"TooLargeForAnyCluster"}), timeout=30,
                                what="describe lists why the job fits nowhere")
        [why] = [row for row in rows if row[1] == "TooLargeForAnyCluster"]
        assert why[0] == "Warning" and f"{CLUSTER}:" in " ".join(why)

        # a researcher's Events stay in their namespaces
        await env.api.submit(aimed_job("elsewhere", CLUSTER, namespace="team-b"))
        code, out, err = await env.hub.kubectl("researcher", "get", "events", "-n", "team-b")
        assert code == 1 and "Forbidden" in err


async def test_describe_shows_a_cluster_loss_on_the_job_and_the_cluster(tmp_path: Path) -> None:
    """The job's gang is cut off with its cluster (the simulator's partition), moves whole to FALLBACK,
    and the old copy is killed when the cluster returns: each step is an Event, the loss and the return
    are Events of the MemberCluster too (kubectl describe mc lists them from namespace default)."""
    async with lifecycle_env(tmp_path, [CLUSTER, FALLBACK], run_seconds=None, cluster_loss_grace_seconds=2.0,
                             member_lease=False) as env:
        job = {"apiVersion": API, "kind": "TrainingJob", "metadata": {"name": "moved", "namespace": "team-a"},
               "spec": {"roles": [{"name": "worker", "replicas": 2, "template": {
                   "image": "trainer:1.4", "resources": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4}}}],
                   "placement": {"network": "any", "gpuModels": ["A100", "H100"], "datasets": ["imagenet-22k"]}}}
        await env.api.submit(job)
        await env.api.wait_job("team-a", "moved", lambda j: phase(j) == "Running"
                               and placement_of(j).get("cluster") == CLUSTER, timeout=30, what="Running at home")
        env.fed.sims[CLUSTER].faults.start_partition(None)
        await env.api.wait_job("team-a", "moved", lambda j: phase(j) == "Running"
                               and placement_of(j).get("cluster") == FALLBACK, timeout=30, what="Running elsewhere")
        env.fed.sims[CLUSTER].faults.end_partition()
        rows = await wait_until(lambda: described(env, "tj", "moved", "-n", "team-a",
                                                  reasons={"ClusterLost", "StaleCopyKilled"}),
                                timeout=30, what="describe tj lists the loss and the kill")
        text = [" ".join(row) for row in rows]
        [lost] = [t for t in text if " ClusterLost " in f" {t} "]
        assert lost.startswith("Warning ClusterLost") and f"cluster {CLUSTER} lost" in lost
        assert "requeued" in lost and "epoch 2" in lost and "federator-failover" in lost
        placed = [t for t in text if t.startswith("Normal Placed")]
        assert any(f"placed in {CLUSTER}" in t for t in placed) and any(f"placed in {FALLBACK}" in t for t in placed)
        [killed] = [t for t in text if " StaleCopyKilled " in f" {t} "]
        assert killed.startswith("Warning") and f"stale copy killed in cluster {CLUSTER}" in killed

        rows = await wait_until(lambda: described(env, "mc", CLUSTER, reasons={"ClusterLost", "ClusterReturned"}),
                                timeout=30, what="describe mc lists the loss and the return")
        kinds = {row[1]: row[0] for row in rows}
        assert kinds["ClusterLost"] == "Warning" and kinds["ClusterReturned"] == "Normal"
