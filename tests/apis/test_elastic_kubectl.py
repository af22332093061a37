"""The elastic example through kubectl against a real hub (issue 19): apply, re-apply, explain, a bad bound
refused with 422 naming the field, and a placed job's bounds frozen while its other fields still change."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.controllers.jobs import update_job_status

from ..hub.hubtest_support import RunningHub, start_hub

pytestmark = pytest.mark.kubectl

JOBS = "/apis/federator.dev/v1alpha1/namespaces/vision/trainingjobs"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "elastic-workers.yaml"


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[RunningHub]:
    async with start_hub(tmp_path / "hub") as running:
        yield running


async def _stored(hub: RunningHub, name: str) -> dict[str, Any]:
    return await hub.context.storage.get(hub.context.kind("TrainingJob"), namespace="vision", name=name)


def _manifest(**worker: Any) -> str:
    job = yaml.safe_load(EXAMPLE.read_text())
    job["spec"]["roles"][0].update(worker)
    return yaml.safe_dump(job)


async def test_elastic_example_through_kubectl(hub: RunningHub) -> None:
    code, out, err = await hub.kubectl("admin", "apply", "-f", str(EXAMPLE))
    assert code == 0, err
    assert out.strip() == "trainingjob.federator.dev/bert-elastic created"
    stored = await _stored(hub, "bert-elastic")
    assert stored["spec"] == yaml.safe_load(EXAMPLE.read_text())["spec"]
    code, out, err = await hub.kubectl("admin", "apply", "-f", str(EXAMPLE))
    assert code == 0 and out.strip() == "trainingjob.federator.dev/bert-elastic unchanged", (out, err)

    code, out, err = await hub.kubectl("viewer", "explain", "tj.spec.roles")
    assert code == 0, err
    for field in ("minReplicas", "maxReplicas", "restartPolicy", "onWorkerLoss"):
        assert f"  {field}\t" in out, field
    code, out, err = await hub.kubectl("viewer", "explain", "tj.spec.backoffLimit")
    assert code == 0 and "BackoffLimitExceeded" in out, (out, err)  # the description says what is enforced


@pytest.mark.parametrize(("worker", "field", "fragment"), [
    ({"minReplicas": 9}, "spec.roles[0].minReplicas", "must be less than or equal to replicas (8)"),
    ({"maxReplicas": 5000}, "spec.roles[0].maxReplicas", "must be less than or equal to 1024"),
    ({"onWorkerLoss": "restart", "restartPolicy": "Never"}, "spec.roles[0].onWorkerLoss",
     "needs restartPolicy OnFailure"),
])
async def test_bad_bounds_are_422_and_store_nothing(hub: RunningHub, worker: dict[str, Any], field: str,
                                                    fragment: str) -> None:
    code, out, err = await hub.kubectl("admin", "apply", "-f", "-", stdin=_manifest(**worker))
    assert code != 0 and out == ""
    assert 'The TrainingJob "bert-elastic" is invalid' in err and field in err and fragment in err, err
    status, body = await hub.request("POST", JOBS, body=yaml.safe_load(_manifest(**worker)))
    assert status == 422 and body["reason"] == "Invalid", body
    assert [cause["field"] for cause in body["details"]["causes"]] == [field]
    status, body = await hub.request("GET", JOBS)
    assert status == 200 and body["items"] == []


async def test_bounds_are_frozen_while_placed(hub: RunningHub) -> None:
    code, _, err = await hub.kubectl("admin", "apply", "-f", str(EXAMPLE))
    assert code == 0, err

    def placed(job: dict[str, Any]) -> dict[str, Any]:
        job["status"].update(phase="Running", placement={"cluster": "onprem-a", "epoch": 1},
                             replicas={"worker": 12})
        return job

    assert await update_job_status(hub.context, namespace="vision", name="bert-elastic", mutate=placed)
    code, out, err = await hub.kubectl("admin", "apply", "-f", "-", stdin=_manifest(minReplicas=2))
    assert code != 0 and "spec.roles[0].minReplicas" in err and "may not be changed while the job is placed" in err
    before = await _stored(hub, "bert-elastic")
    assert before["spec"]["roles"][0]["minReplicas"] == 4 and before["status"]["replicas"] == {"worker": 12}
    # other fields still change while placed
    code, out, err = await hub.kubectl("admin", "apply", "-f", "-", stdin=_manifest(restartPolicy="Never"))
    assert code == 0 and out.strip() == "trainingjob.federator.dev/bert-elastic configured", (out, err)
    assert (await _stored(hub, "bert-elastic"))["spec"]["roles"][0]["restartPolicy"] == "Never"
