"""Queue budgets end to end (issue 30): a queue's jobs run on a priced cloud cluster; its status.spend
matches the GPU-hours they ran (from the jobs' own recorded Running and Succeeded times) x the cloud's price;
over its budget, a new job that only the cloud could take waits with the reason, one that may run on-prem
(price 0, already paid) goes there. Real hub (every lifecycle controller), simulated members."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .jobtest_support import API, GROUP, VERSION, condition, phase, placement_of, wait_until
from .lifecycle_support import Env, RunningFederation, history, lifecycle_env, seconds

pytestmark = [pytest.mark.slow]
ONPREM = "onprem-rdma-a100"
CLOUD = "cloud-eth-h100"
CLOUD_PRICE = 3.9
ONE_NODE = {ONPREM: {"gpu_nodes": 1, "cpu_nodes": 0}, CLOUD: {"gpu_nodes": 1, "cpu_nodes": 0}}
#: 8 GPUs on the cloud cost 31.2 an hour, about 0.0087 a second: a job of a few seconds spends it
BUDGET = "0.01"


class PricedFederation(RunningFederation):
    """The on-prem cluster is already paid for (price 0); the cloud one charges CLOUD_PRICE per GPU-hour."""

    async def start(self, names: list[str] | None = None, **overrides: dict[str, Any]) -> None:
        await super().start(names, **overrides)
        self.registrations[ONPREM]["spec"]["costPerGpuHour"] = 0.0
        self.registrations[CLOUD]["spec"]["costPerGpuHour"] = CLOUD_PRICE


def budget_queue() -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Queue", "metadata": {"name": "team"},
            "spec": {"namespaces": {"names": ["team-a"]}, "quota": {"gpus": {"A100": 64, "H100": 64}},
                     "budget": {"amount": BUDGET, "currency": "USD"}}}


def node_job(name: str, models: list[str]) -> dict[str, Any]:
    """One pod of 8 GPUs (a whole node) of one of `models`, in the budgeted queue."""
    return {"apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"queue": "team", "placement": {"gpuModels": models},
                     "roles": [{"name": "worker", "replicas": 1, "template": {
                         "image": "trainer:1.4", "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 8}}}]}}


def why_not(job: dict[str, Any]) -> str:
    found = condition(job, "Schedulable")
    return str(found.get("message") or "") if found else ""


async def queue_of(env: Env) -> dict[str, Any]:
    obj: dict[str, Any] = await env.api.objects.get_cluster_custom_object(GROUP, VERSION, "queues", "team")
    return obj


async def test_spend_follows_what_ran_and_over_budget_only_paid_capacity_takes_new_jobs(tmp_path: Path) -> None:
    fed = PricedFederation(tmp_path / "members", run_seconds=3.0)
    async with lifecycle_env(tmp_path, [ONPREM, CLOUD], federation=fed, profile_overrides=ONE_NODE,
                             queue_spend_interval_seconds=0.2) as env:
        await env.api.objects.create_cluster_custom_object(GROUP, VERSION, "queues", budget_queue())
        # H100 only: the cloud is the one cluster that can take it
        await env.api.submit(node_job("on-cloud", ["H100"]))
        done = await env.api.wait_job("team-a", "on-cloud", lambda j: phase(j) == "Succeeded", timeout=90,
                                      what="the cloud job Succeeded")
        assert placement_of(done)["cluster"] == CLOUD
        [started] = history(done, "Running")
        [ended] = history(done, "Succeeded")
        ran = seconds(ended["time"]) - seconds(started["time"])
        assert ran > 0, done["status"]["history"]
        expected = 8 * ran / 3600 * CLOUD_PRICE

        async def accrued() -> dict[str, Any] | None:
            spend = ((await queue_of(env)).get("status") or {}).get("spend") or {}
            at = spend.get("lastAccruedAt")
            return spend if at and seconds(at) >= seconds(ended["time"]) else None

        spend = await wait_until(accrued, timeout=30, what="the queue's spend accrued past the job's end")
        assert float(spend["spent"]) == pytest.approx(expected, rel=0.01), (spend, ran)
        assert spend["gpuHours"] == pytest.approx(8 * ran / 3600, rel=0.01)
        assert spend["currency"] == "USD" and spend["period"] == ended["time"][:7]
        assert float(spend["remaining"]) == pytest.approx(float(BUDGET) - expected, abs=1e-4)
        queue = await queue_of(env)
        over = condition(queue, "OverBudget")
        assert over is not None and over["status"] == "True", queue["status"]
        assert f"of {float(BUDGET):,.2f} USD this month" in over["message"]

        # over budget: a job only the cloud could take waits, saying why
        await env.api.submit(node_job("cloud-only", ["H100"]))
        waiting = await env.api.wait_job(
            "team-a", "cloud-only", lambda j: phase(j) == "Pending" and "over its budget" in why_not(j),
            timeout=60, what="Pending: the queue is over its budget")
        assert "queue team is over its budget (" in why_not(waiting)
        assert "USD this month): only already-paid clusters" in why_not(waiting)
        # one that may run on either goes to the already-paid on-prem cluster
        await env.api.submit(node_job("either", ["H100", "A100"]))
        running = await env.api.wait_job("team-a", "either", lambda j: phase(j) in ("Running", "Succeeded"),
                                         timeout=60, what="the job that may run on-prem placed")
        assert placement_of(running)["cluster"] == ONPREM
        still = await env.api.get("team-a", "cloud-only")
        assert phase(still) == "Pending" and not history(still, "Placed")
