"""End to end: `federator up` stopped (SIGTERM) and started again with the same state directory leaves a
Running job Running, on the very same member pods (same uids), because each simulated cluster keeps its
objects in `.federator/sim/<cluster>.db`; the restarted setup goes on working (a new job runs), and the
logs of the job's pods read through the member (kubectl logs) and through the hub (federator logs)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .e2e_support import ROOT, FederatorUp, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

ETH = "cloud-eth-h100"
FLAGS = ("--sim-profile", str(ROOT / "clusterconfigs" / "sim" / f"{ETH}.yaml"), "--sim-run-seconds", "3600")


def job(name: str) -> dict[str, Any]:
    def role(role_name: str, replicas: int, resources: dict[str, Any]) -> dict[str, Any]:
        return {"name": role_name, "replicas": replicas, "template": {"image": "trainer:1.4", "resources": resources}}

    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"roles": [role("ps", 1, {"cpu": "2", "memory": "8Gi"}),
                               role("worker", 2, {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1})],
                     "placement": {"network": "ethernet"}}}


def phase(up: FederatorUp, name: str) -> str:
    return str((up.json("get", "tj", name, "-n", "default").get("status") or {}).get("phase") or "")


def member_pods(up: FederatorUp, name: str) -> dict[str, tuple[str, str]]:
    listing = up.json("get", "pods", "-n", "default", "-l", f"federator.dev/job-name={name}",
                      kubeconfig=up.member(ETH))
    return {p["metadata"]["name"]: (p["metadata"]["uid"], p["status"].get("phase", "")) for p in listing["items"]}


def test_running_jobs_stay_running_across_a_restart(tmp_path: Path) -> None:
    first = FederatorUp(tmp_path, *FLAGS)
    try:
        first.start()
        subprocess.run(["kubectl", "--kubeconfig", str(first.admin), "--cache-dir", str(tmp_path / "cache"),
                        "apply", "-f", "-"], input=json.dumps(job("before")), text=True, check=True,
                       capture_output=True, timeout=60)
        wait_for("job before Running", lambda: phase(first, "before") == "Running", timeout=90)
        pods = wait_for("three Running member pods",
                        lambda: (found := member_pods(first, "before")) and len(found) == 3
                        and all(p == "Running" for _, p in found.values()) and found, timeout=60)
    finally:
        code = first.stop(sig=signal.SIGTERM)
    assert code == 0
    assert (tmp_path / ".federator" / "sim" / f"{ETH}.db").is_file()

    again = FederatorUp(tmp_path, *FLAGS)
    try:
        ready = again.start()
        assert ready["registrations"] == {ETH: "unchanged"}
        # the restarted setup works: a new job runs (so placement, dispatch and status sync ran since)
        subprocess.run(["kubectl", "--kubeconfig", str(again.admin), "--cache-dir", str(tmp_path / "cache"),
                        "apply", "-f", "-"], input=json.dumps(job("after")), text=True, check=True,
                       capture_output=True, timeout=60)
        wait_for("job after Running", lambda: phase(again, "after") == "Running", timeout=90)
        # the first job never left Running: same member pods, still Running, and no step back in its history
        assert phase(again, "before") == "Running"
        assert member_pods(again, "before") == pods
        history = [h["event"] for h in again.json("get", "tj", "before", "-n", "default")["status"]["history"]]
        assert not {"Failed", "Requeued", "Pending"} & set(history[history.index("Running"):]), history

        # logs from one place: the member's kubectl logs, and the hub's federator logs
        worker = next(name for name in pods if "-worker-0" in name)
        out = again.kubectl("logs", worker, "-n", "default", "--tail=2", kubeconfig=again.member(ETH)).stdout
        assert len(out.splitlines()) == 2 and all(line.startswith("INFO trainer: ") for line in out.splitlines())
        logs = subprocess.run([sys.executable, "-m", "federator.cli", "logs", "before", "--role", "worker",
                               "--index", "0", "--kubeconfig", str(again.admin)],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert logs.returncode == 0, logs.stderr
        first_line = logs.stdout.splitlines()[0]
        assert first_line.startswith("INFO trainer: starting trainer:1.4 as worker 0 of 2 (job default/before, ")
    finally:
        assert again.stop(sig=signal.SIGTERM) == 0
