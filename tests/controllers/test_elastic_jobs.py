"""Elastic jobs in the hub's controllers (issue 19): status sync expects the size the gang was placed at
(status.replicas), not the spec's preferred size, so an elastic gang placed smaller or larger reads as whole."""

from __future__ import annotations

from typing import Any

from federator.controllers.status_sync import expected_roles
from federator.delegation import GangPhase, adapter_for


def elastic_job(placed: dict[str, int] | None) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "bert", "namespace": "nlp", "uid": "0b6c3f1e-5d7a-4a53-9b8e-1f0c2d3e4a5b"},
        "spec": {"roles": [
            {"name": "worker", "replicas": 8, "minReplicas": 4, "maxReplicas": 16,
             "template": {"image": "trainer:1.4", "resources": {"cpu": "2", "nvidia.com/gpu": 1}}}]},
        "status": {"phase": "Placed", "placement": {"cluster": "dc-a", "epoch": 1}},
    }
    if placed is not None:
        job["status"]["replicas"] = placed
    return job


def _running_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    objects = adapter_for("volcano").render(job, cluster_scheduler_name="volcano", epoch=1, hub_id="hub",
                                            namespace="nlp")
    pods = [o.body for o in objects[1:]]
    for pod in pods:
        pod["spec"]["nodeName"] = "gpu-0"
        pod["status"] = {"phase": "Running"}
    return pods


def test_status_sync_expects_the_placed_size() -> None:
    assert expected_roles(elastic_job(None)) == {"worker": 8}
    for workers in (4, 11, 16):
        job = elastic_job({"worker": workers})
        assert expected_roles(job) == {"worker": workers}
        gang = adapter_for("volcano").read_status(None, _running_pods(job), expected=expected_roles(job))
        assert gang.phase is GangPhase.RUNNING and gang.expected == workers, gang
    # placed at 5, the spec's 8 would have read as three pods missing
    job = elastic_job({"worker": 5})
    gang = adapter_for("volcano").read_status(None, _running_pods(job), expected={"worker": 8})
    assert gang.phase is GangPhase.PLACED and gang.reason == "PodsMissing"
