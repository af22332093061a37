"""End to end, the issue's drill bar: `federator drill --cluster X --fault partition --duration 20s -o json`
on `federator up`'s simulated clusters (with the fence agents `federator up` runs beside them) reports
jobsLost 0, duplicates 0, maxConcurrentCopies 1; the report is stored (`kubectl get dr`, `federator drill
show`). Everything goes through the public endpoint and the kubeconfigs `federator up` writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from .e2e_support import EXAMPLE, ROOT, FederatorUp, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

RDMA = "onprem-rdma-a100"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FederatorUp]:
    running = FederatorUp(tmp_path_factory.mktemp("e2e-drill"), "--sim-run-seconds", "600")
    try:
        running.start()
        yield running
    finally:
        code = running.stop()
        assert code == 0, running.other_stderr[-20:]


def _federator(up: FederatorUp, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    env.pop("KUBECONFIG", None)
    env.pop("FEDERATOR_DEBUG", None)
    # run from federator up's working directory: the drill finds .federator/admin.kubeconfig and .federator/sim
    return subprocess.run([sys.executable, "-m", "federator.cli", *args], cwd=up.workdir, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_a_20s_partition_drill_on_federator_up_loses_nothing_and_runs_nothing_twice(up: FederatorUp) -> None:
    up.kubectl("apply", "-f", str(EXAMPLE))

    def running() -> bool:
        job = up.json("get", "tj", "-n", "vision", "resnet-ps")
        status = job.get("status") or {}
        return status.get("phase") == "Running" and (status.get("placement") or {}).get("cluster") == RDMA

    wait_for("the example running in the RDMA cluster", running, timeout=120)
    plan = _federator(up, "drill", "--cluster", RDMA, "--fault", "partition", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "vision      resnet-ps" in plan.stdout and "Nothing was changed" in plan.stdout

    result = _federator(up, "drill", "--cluster", RDMA, "--fault", "partition", "--duration", "20s", "-o", "json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["cluster"] == RDMA and found["fault"] == "partition" and found["gangsAffected"] == 1
    assert found["jobsLost"] == 0 and found["duplicates"] == 0 and found["maxConcurrentCopies"] == 1, found
    name = next(line.split("/", 1)[1].split()[0] for line in result.stderr.splitlines()
                if line.startswith("drillreport.federator.dev/"))
    listed = up.kubectl("get", "dr").stdout
    assert name in listed and "MAXCONCURRENTCOPIES" in listed.splitlines()[0]
    shown = _federator(up, "drill", "show", name, "-o", "json")
    assert shown.returncode == 0 and json.loads(shown.stdout) == found, shown.stderr
    # the partition is over: the cluster is back and the job still runs there
    wait_for("the example still running", running, timeout=60)
