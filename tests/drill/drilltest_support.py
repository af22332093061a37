"""Helpers of the drill tests: a federation laid out as `federator up` lays it out, the drill CLI as a
real process, and the fence agent as a real process.

- `drill_env(tmp_path, names, **knobs)`: tests/controllers' lifecycle_env (real SimClusters, a real hub
  with every lifecycle controller, clusters registered and Ready), plus a state directory like `federator
  up`'s: `STATE/sim/<cluster>.kubeconfig` (the hub's identity in the member, as the hub's registration
  uses it) and `STATE/sim/<cluster>-agent.kubeconfig` (the fence agent's identity);
- `DrillEnv.drill(*args)`: `python -m federator.cli drill ... --state-dir STATE` with the hub's admin
  kubeconfig; (exit code, stdout, stderr);
- `DrillEnv.start_agent(cluster)`: `federator agent` against that cluster, as `federator up` runs it,
  stopped (SIGINT, then kill) when the environment ends; it returns once the agent says it watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from federator.apis.drillreport import ACCOUNTED, FIGURES
from federator.controllers.jobs import DEFAULT_HUB_ID

from ..controllers.jobtest_support import API, wait_until
from ..controllers.lifecycle_support import Env, lifecycle_env

ROOT = Path(__file__).resolve().parents[2]
NS = "team-a"
PLAN = "/apis/federator.dev/v1alpha1/memberclusters/{}/failoverplan"
REPORTS = "/apis/federator.dev/v1alpha1/drillreports"


def gang(name: str, *, gpus: int = 4, **failover: Any) -> dict[str, Any]:
    """A 2-worker gang that prefers the cluster with the imagenet-22k dataset and fits any A100/H100 one."""
    spec: dict[str, Any] = {
        "roles": [{"name": "worker", "replicas": 2, "template": {
            "image": "trainer:1.4", "resources": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": gpus}}}],
        "placement": {"network": "any", "gpuModels": ["A100", "H100"], "datasets": ["imagenet-22k"]},
    }
    if failover:
        spec["failover"] = failover
    return {"apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name, "namespace": NS}, "spec": spec}


@dataclass
class DrillEnv:
    env: Env
    state: Path
    agents: list[asyncio.subprocess.Process] = field(default_factory=list)

    async def drill(self, *args: str, timeout: float = 240.0) -> tuple[int, str, str]:
        return await run_cli("drill", *args, "--state-dir", str(self.state),
                             "--kubeconfig", str(self.env.hub.kubeconfigs["admin"]), timeout=timeout)

    async def start_agent(self, cluster: str) -> None:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "federator.cli", "agent",
            "--kubeconfig", str(self.state / "sim" / f"{cluster}-agent.kubeconfig"),
            "--hub-identity", DEFAULT_HUB_ID, "--poll-seconds", "0.2",
            cwd=str(ROOT), env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        self.agents.append(process)
        assert process.stderr is not None
        while True:
            line = await asyncio.wait_for(process.stderr.readline(), 60)
            if not line:
                raise AssertionError(f"the fence agent of {cluster} exited before it watched the lease")
            if b"fence agent watching" in line:
                break
        # keep draining its log so that a full pipe never stalls it
        asyncio.get_running_loop().create_task(process.stderr.read())

    async def stop_agents(self) -> None:
        for process in self.agents:
            if process.returncode is None:
                process.send_signal(signal.SIGINT)
                try:
                    await asyncio.wait_for(process.wait(), 20)
                except TimeoutError:
                    process.kill()
                    await process.wait()
        self.agents.clear()

    async def running_in(self, name: str, cluster: str, *, timeout: float = 60) -> dict[str, Any]:
        def check(job: dict[str, Any]) -> bool:
            status = job.get("status") or {}
            return (status.get("placement") or {}).get("cluster") == cluster and status.get("phase") == "Running"

        return await self.env.api.wait_job(NS, name, check, timeout=timeout, what=f"{name} running in {cluster}")

    async def plan(self, cluster: str, purpose: str) -> dict[str, Any]:
        status, plan = await self.env.hub.request("GET", PLAN.format(cluster) + f"?for={purpose}")
        assert status == 200, plan
        assert isinstance(plan, dict)
        return plan

    async def report(self, name: str) -> dict[str, Any]:
        status, report = await self.env.hub.request("GET", f"{REPORTS}/{name}")
        assert status == 200, report
        assert isinstance(report, dict)
        return report


async def run_cli(*args: str, timeout: float = 120.0, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The `federator` CLI as a real process; (exit code, stdout, stderr)."""
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    environment.pop("FEDERATOR_DEBUG", None)
    environment.pop("KUBECONFIG", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "federator.cli", *args, cwd=str(ROOT), env=environment,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.send_signal(signal.SIGINT)  # the drill lifts its fault on Ctrl-C
        out, err = await asyncio.wait_for(process.communicate(), 30)
        raise AssertionError(f"federator {' '.join(args)} did not finish within {timeout}s:\n{err.decode()}") from None
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "usage:" not in err
    return lines[0]


def stored_name(out: str, err: str) -> str:
    """The DrillReport name the drill printed (`drillreport.federator.dev/NAME stored`)."""
    for line in (out + "\n" + err).splitlines():
        if line.startswith("drillreport.federator.dev/") and line.endswith(" stored"):
            return line.split("/", 1)[1].rsplit(" ", 1)[0]
    raise AssertionError(f"no stored report named in the output:\n{out}\n{err}")


def figures(out: str) -> dict[str, Any]:
    """The `-o json` figures of a drill, checked for the accounting invariant every drill must keep: each
    affected gang is in exactly one of moved, unplaceable, rode out, restarted in place and lost."""
    found = json.loads(out)
    assert isinstance(found, dict)
    assert set(found) == set(FIGURES), found
    assert sum(found[key] for key in ACCOUNTED) == found["gangsAffected"], found
    return found


@contextlib.asynccontextmanager
async def drill_env(tmp_path: Path, names: list[str], **knobs: Any) -> AsyncIterator[DrillEnv]:
    async with lifecycle_env(tmp_path, names, run_seconds=None, **knobs) as env:
        state = tmp_path / "state"
        sim_dir = state / "sim"
        sim_dir.mkdir(parents=True)
        for name, sim in env.fed.sims.items():
            sim.write_kubeconfig(sim_dir / f"{name}.kubeconfig")
            sim.write_agent_kubeconfig(sim_dir / f"{name}-agent.kubeconfig")
        drill = DrillEnv(env, state)
        try:
            yield drill
        finally:
            await drill.stop_agents()


__all__ = ["DrillEnv", "NS", "drill_env", "figures", "gang", "one_error_line", "run_cli", "stored_name",
           "wait_until"]
