"""spec.framework and spec.frameworkSettings through a real hub: a good job is stored as sent and `kubectl explain`
documents the fields; bad input (an unknown framework, roles that do not fit it, a setting of another framework,
a port out of range, an oversized value) gets one 422 naming the field, and nothing is stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ..hub.hubtest_support import RunningHub, start_hub

pytestmark = pytest.mark.kubectl

JOBS = "/apis/federator.dev/v1alpha1/namespaces/vision/trainingjobs"


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[RunningHub]:
    async with start_hub(tmp_path / "hub") as running:
        yield running


def job(framework: Any = "pytorch", roles: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "ddp", "namespace": "vision"},
            "spec": {"framework": framework, **spec, "roles": roles or [
                {"name": "master", "replicas": 1, "template": {"image": "trainer:1.4"}},
                {"name": "worker", "replicas": 2, "template": {"image": "trainer:1.4"}}]}}


def r(name: str, replicas: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "template": {"image": "trainer:1.4"}, **extra}


async def test_a_framework_job_is_stored_as_sent_and_explained(hub: RunningHub) -> None:
    sent = job(frameworkSettings={"port": 29500, "nprocPerNode": "gpu"})
    status, body = await hub.request("POST", JOBS, body=sent)
    assert status == 201, body
    assert body["spec"]["framework"] == "pytorch" and body["spec"]["frameworkSettings"] == \
        {"port": 29500, "nprocPerNode": "gpu"}
    code, out, err = await hub.kubectl("viewer", "explain", "tj.spec.frameworkSettings")
    assert code == 0 and "slotsPerWorker" in out and "nprocPerNode" in out, (out, err)
    code, out, err = await hub.kubectl("viewer", "explain", "tj.spec.framework")
    assert code == 0 and "TF_CONFIG" in out, (out, err)


@pytest.mark.parametrize(("sent", "field"), [
    (job("caffe"), "spec.framework"),
    (job(["pytorch"]), "spec.framework"),
    (job("x" * 10_000), "spec.framework"),
    (job("pytorch", [r("chief"), r("worker", 2)]), "spec.roles[0].name"),
    (job("pytorch", [r("master", 2), r("worker", 2)]), "spec.roles[0].replicas"),
    (job("tensorflow", [r("ps"), r("worker", 3, minReplicas=2)]), "spec.roles[1].minReplicas"),
    (job("tensorflow", [r("chief"), r("master"), r("worker")]), "spec.roles[1].name"),
    (job("mpi", [r("worker", 2)]), "spec.roles"),
    (job("paddle", [r("ps"), r("pserver"), r("trainer")]), "spec.roles[1].name"),
    (job("jax", [r("coordinator"), r("worker")]), "spec.roles[0].name"),
    (job(frameworkSettings={"port": 70000}), "spec.frameworkSettings.port"),
    (job(frameworkSettings={"port": 0}), "spec.frameworkSettings.port"),
    (job(frameworkSettings={"port": "23456"}), "spec.frameworkSettings.port"),
    (job(frameworkSettings={"nprocPerNode": "lots"}), "spec.frameworkSettings.nprocPerNode"),
    (job(frameworkSettings={"slotsPerWorker": 4}), "spec.frameworkSettings.slotsPerWorker"),
    (job("mpi", [r("launcher"), r("worker")], frameworkSettings={"mpiImplementation": "LAM"}),
     "spec.frameworkSettings.mpiImplementation"),
])
async def test_bad_framework_input_is_one_422_naming_the_field_and_stores_nothing(
        hub: RunningHub, sent: dict[str, Any], field: str) -> None:
    status, body = await hub.request("POST", JOBS, body=sent)
    assert status == 422 and body["reason"] == "Invalid", body
    assert [cause["field"] for cause in body["details"]["causes"]] == [field], body
    status, body = await hub.request("GET", JOBS)
    assert status == 200 and body["items"] == []
