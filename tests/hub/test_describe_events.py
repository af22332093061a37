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

from ..controllers.jobtest_support import phase, wait_until
from ..controllers.lifecycle_support import aimed_job, lifecycle_env

pytestmark = [pytest.mark.kubectl, pytest.mark.slow]

CLUSTER = "onprem-rdma-a100"


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
        placed = " ".join(by_reason["Placed"])
        assert by_reason["Placed"][0] == "Normal" and "federator-placement" in placed
        assert f"placed in {CLUSTER}" in placed and "score" in placed and "epoch 1" in placed
        assert "federator-dispatch" in by_reason["Dispatched"] and "federator-status-sync" in by_reason["Running"]
        assert not any(row[0] == "Warning" for row in rows), rows

        rows = await wait_until(lambda: described("huge", {"TooLargeForAnyCluster"}), timeout=30,
                                what="describe lists why the job fits nowhere")
        [why] = [row for row in rows if row[1] == "TooLargeForAnyCluster"]
        assert why[0] == "Warning" and f"{CLUSTER}:" in " ".join(why)

        # a researcher's Events stay in their namespaces
        await env.api.submit(aimed_job("elsewhere", CLUSTER, namespace="team-b"))
        code, out, err = await env.hub.kubectl("researcher", "get", "events", "-n", "team-b")
        assert code == 1 and "Forbidden" in err
