"""The upstream job kinds served by the hub (issue 28): `kubectl apply -f` of the unchanged upstream examples,
`kubectl get <plural>` with Phase, Cluster and Age, strict field validation against the upstream schema, and bad
input refused with nothing stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.apis.jobkinds import JOB_KINDS

from ..apis.test_job_kinds_kubeflow import EXAMPLES, upstream_example
from .hubtest_support import RunningHub

pytestmark = pytest.mark.kubectl

KINDS = {k.kind: k for k in JOB_KINDS}


def object_url(obj: dict[str, Any], namespace: str) -> str:
    kind = KINDS[obj["kind"]]
    return f"/apis/{kind.api_version}/namespaces/{namespace}/{kind.plural}/{obj['metadata']['name']}"


def write(tmp_path: Path, obj: dict[str, Any]) -> str:
    path = tmp_path / f"{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj))
    return str(path)


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
async def test_the_unchanged_upstream_example_is_applied_with_kubectl(hub: RunningHub, kind: str,
                                                                      tmp_path: Path) -> None:
    example = upstream_example(*EXAMPLES[kind])
    namespace = example["metadata"].get("namespace", "default")
    code, out, err = await hub.kubectl("admin", "apply", "--validate=strict", "-f", write(tmp_path, example))
    assert code == 0, err
    assert "created" in out
    status, stored = await hub.request("GET", object_url(example, namespace))
    assert status == 200 and stored["spec"] == example["spec"]
    plural = KINDS[kind].plural
    code, out, err = await hub.kubectl("admin", "get", plural, "-n", namespace)
    assert code == 0, err
    assert out.split("\n")[0].split() == ["NAME", "PHASE", "CLUSTER", "AGE"]
    assert example["metadata"]["name"] in out
    code, out, err = await hub.kubectl("admin", "explain", f"{plural}.spec")
    assert code == 0, err
    assert "runPolicy" in out


async def test_an_unknown_field_is_refused_under_strict_validation(hub: RunningHub, tmp_path: Path) -> None:
    example = upstream_example(*EXAMPLES["PyTorchJob"])
    example["spec"]["pytorchReplicaSpecs"]["Worker"]["replicaz"] = 3
    code, _, err = await hub.kubectl("admin", "apply", "--validate=strict", "-f", write(tmp_path, example))
    assert code != 0 and "replicaz" in err
    status, _ = await hub.request("GET", object_url(example, "kubeflow"))
    assert status == 404


@pytest.mark.parametrize(("change", "field"), [
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update({"replicas": 5000}),
     "spec.pytorchReplicaSpecs[Worker].replicas"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update({"replicas": "two"}),
     "spec.pytorchReplicaSpecs[Worker].replicas"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update({"containers": []}),
     "spec.pytorchReplicaSpecs[Worker].template.spec.containers"),
    (lambda j: j["spec"].update({"runPolicy": {"activeDeadlineSeconds": 5}}), "spec.runPolicy.activeDeadlineSeconds"),
    (lambda j: j["metadata"].update({"annotations": {"federator.dev/network": "smoke-signals"}}),
     "metadata.annotations[federator.dev/network]"),
])
async def test_bad_input_is_a_422_naming_the_source_field(hub: RunningHub, change: Any, field: str) -> None:
    example = upstream_example(*EXAMPLES["PyTorchJob"])
    change(example)
    url = object_url(example, "kubeflow").rsplit("/", 1)[0]
    status, body = await hub.request("POST", url, body=example)
    assert status == 422, body
    assert field in [c["field"] for c in body["details"]["causes"]], body
    status, _ = await hub.request("GET", object_url(example, "kubeflow"))
    assert status == 404


async def test_only_suspend_and_elastic_bounds_may_change(hub: RunningHub) -> None:
    example = upstream_example(*EXAMPLES["PyTorchJob"])
    url = object_url(example, "kubeflow")
    status, stored = await hub.request("POST", url.rsplit("/", 1)[0], body=example)
    assert status == 201, stored
    stored["spec"]["runPolicy"] = {"suspend": True}
    status, stored = await hub.request("PUT", url, body=stored)
    assert status == 200, stored
    stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    status, body = await hub.request("PUT", url, body=stored)
    assert status == 422 and "only runPolicy.suspend" in json.dumps(body)


async def test_a_researcher_may_submit_in_their_namespace_only(hub: RunningHub) -> None:
    example = upstream_example(*EXAMPLES["TFJob"])
    example["metadata"]["namespace"] = "default"
    status, body = await hub.request("POST", object_url(example, "default").rsplit("/", 1)[0], body=example,
                                     who="researcher")
    assert status == 201, body
    status, body = await hub.request("POST", object_url(example, "team-b").rsplit("/", 1)[0],
                                     body={**example, "metadata": {"name": "x", "namespace": "team-b"}},
                                     who="researcher")
    assert status == 403, body
