"""Full pod templates through the hub's API (issue 27 item 1): the full-template example applies with kubectl
and is stored as sent; `kubectl explain` shows both forms; every bad template (a field kube rejects, a
hub-owned field, 10,000 containers, requests no node can hold, the two forms mixed) is one 422 naming the
field, through kubectl and plain HTTP, and nothing is stored."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .hubtest_support import RunningHub, start_hub

pytestmark = pytest.mark.kubectl

JOBS = "/apis/federator.dev/v1alpha1/namespaces/vision/trainingjobs"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "resnet-full-template.yaml"
T = "spec.roles[0].template"


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[RunningHub]:
    async with start_hub(tmp_path / "hub") as running:
        yield running


def _example() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return loaded


async def test_the_full_template_example_through_kubectl(hub: RunningHub) -> None:
    code, out, err = await hub.kubectl("admin", "apply", "-f", str(EXAMPLE))
    assert code == 0, err
    assert out.strip() == "trainingjob.federator.dev/resnet-full created"
    stored = await hub.context.storage.get(hub.context.kind("TrainingJob"), namespace="vision", name="resnet-full")
    assert stored["spec"]["roles"] == _example()["spec"]["roles"]
    code, out, err = await hub.kubectl("admin", "apply", "-f", str(EXAMPLE))
    assert code == 0 and "unchanged" in out, (out, err)
    code, out, err = await hub.kubectl("viewer", "explain", "tj.spec.roles.template")
    assert code == 0, err
    for field in ("image", "metadata", "spec", "nodeSelector"):
        assert f"  {field}\t" in out, (field, out)
    assert "schedulerName" in out and "PodTemplateSpec" in out


async def test_server_side_apply_of_a_full_template(hub: RunningHub) -> None:
    code, _, err = await hub.kubectl("admin", "apply", "--server-side", "-f", str(EXAMPLE))
    assert code == 0, err
    job = _example()
    trainer = job["spec"]["roles"][0]["template"]["spec"]["containers"][0]
    trainer["args"] = ["--epochs", "1"]
    code, _, err = await hub.kubectl("admin", "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(job))
    assert code == 0, err
    stored = await hub.context.storage.get(hub.context.kind("TrainingJob"), namespace="vision", name="resnet-full")
    assert stored["spec"]["roles"] == job["spec"]["roles"]


def _container(**extra: Any) -> dict[str, Any]:
    return {"name": "trainer", "image": "trainer:1.4", **extra}


def _with_containers(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    job = _example()
    job["spec"]["roles"][0]["template"]["spec"] = {"containers": list(containers), **spec}
    return job


def _with_template(**template: Any) -> dict[str, Any]:
    job = _example()
    job["spec"]["roles"][0]["template"].update(template)
    return job


BAD: list[Any] = [
    pytest.param(_with_containers(_container(resources={"limits": {"cpu": "2"}, "requests": {"cpu": "3"}})),
                 f"{T}.spec.containers[0].resources.requests", "must be less than or equal to cpu limit",
                 id="kube-rejects-it"),
    pytest.param(_with_containers(_container(gpus=4)), f"{T}.spec.containers[0].gpus", "unknown field",
                 id="unknown-field"),
    pytest.param(_with_containers(_container(), schedulerName="my-scheduler"), f"{T}.spec.schedulerName",
                 "the hub sets this field", id="hub-owned-field"),
    pytest.param(_with_template(metadata={"labels": {"federator.dev/role": "ps"}}),
                 f"{T}.metadata.labels[federator.dev/role]", "the hub sets this key", id="hub-owned-label"),
    pytest.param(_with_containers(*[_container(name=f"c{i}") for i in range(10_000)]), f"{T}.spec.containers",
                 "10000: must have at most 64 items", id="ten-thousand-containers"),
    pytest.param(_with_containers(_container(resources={"requests": {"nvidia.com/gpu": 500},
                                                        "limits": {"nvidia.com/gpu": 500}})),
                 f"{T}.spec.containers", "must be at most 64 per pod", id="fits-no-node"),
    pytest.param(_with_template(image="trainer:1.4"), f"{T}.image", "may not be set in a full pod template",
                 id="forms-mixed"),
]


@pytest.mark.parametrize(("job", "field", "fragment"), BAD)
async def test_bad_templates_are_one_422_and_store_nothing(hub: RunningHub, job: dict[str, Any], field: str,
                                                           fragment: str) -> None:
    code, out, err = await hub.kubectl("admin", "create", "-f", "-", stdin=yaml.safe_dump(job))
    assert code != 0 and out == ""
    assert 'The TrainingJob "resnet-full" is invalid' in err and field in err and fragment in err, err[:2000]
    status, body = await hub.request("POST", JOBS, body=copy.deepcopy(job))
    assert status == 422 and body["reason"] == "Invalid", body
    assert [cause["field"] for cause in body["details"]["causes"]] == [field]
    status, body = await hub.request("GET", JOBS)
    assert status == 200 and body["items"] == []


def test_describe_shows_the_images_and_the_requests_placement_counts() -> None:
    from federator.cli.jobs import describe_job

    job = _example()
    job["metadata"].update(uid="u1", creationTimestamp="2026-01-01T00:00:00Z")
    text = describe_job(job)
    row = next(line for line in text.splitlines() if line.strip().startswith("worker"))
    # the trainer plus the sidecar (16 + 0.5 cpu, 64Gi + 256Mi), as kube-scheduler counts the pod
    assert "trainer:1.4, shipper:2.0 (sidecar)" in row
    assert "cpu=16500m, memory=65792Mi, nvidia.com/gpu=4, rdma/hca=1" in row
