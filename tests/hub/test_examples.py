"""Every manifest under examples/ is accepted by the hub through real kubectl (issue 27 item 5): a server-side
dry run of each file stores nothing, then `kubectl apply` of every file creates every object as written
(examples/hub-config/ holds files the hub reads at start, not manifests).
The framework examples (PyTorch DDP, TensorFlow PS, PaddlePaddle PS) are also checked for what they show:
`spec.framework`, a full pod template per role, the dataset claim mounted read-only, /dev/shm as a
memory-backed emptyDir and a checkpoint volume shared by every pod of the job."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.apis.jobkinds import JOB_KINDS
from federator.controllers.settings import HubSettings, NamespaceSettings

from .hubtest_support import RunningHub, start_hub

pytestmark = pytest.mark.kubectl

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HUB_CONFIG = EXAMPLES / "hub-config"
FILES = sorted(p for p in EXAMPLES.rglob("*.yaml") if HUB_CONFIG not in p.parents)
PLURALS = {"TrainingJob": "trainingjobs", "Queue": "queues", "PriorityClass": "priorityclasses",
           "Namespace": "namespaces", "ClusterProfile": "clusterprofiles", **{kind.kind: kind.plural for kind in JOB_KINDS}}
NAMESPACES_FILE = EXAMPLES / "00-namespaces.yaml"
FRAMEWORK_EXAMPLES = {
    "pytorch-ddp/pytorch-ddp.yaml": ("pytorch", {"worker"}),
    "tensorflow-ps.yaml": ("tensorflow", {"ps", "chief", "worker"}),
    "paddle-ps.yaml": ("paddle", {"pserver", "trainer"}),
}


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def url(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    where = f"namespaces/{meta['namespace']}/" if "namespace" in meta else ""
    root = "/api" if obj["apiVersion"] == "v1" else "/apis"
    return f"{root}/{obj['apiVersion']}/{where}{PLURALS[obj['kind']]}/{meta['name']}"


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[RunningHub]:
    """A hub as `federator up` runs it: a job in a namespace that does not exist is refused (404)."""
    settings = HubSettings(state_dir=tmp_path / "hub" / "state", namespaces=NamespaceSettings(mode="lifecycle"))
    async with start_hub(tmp_path / "hub", settings=settings) as running:
        yield running


def test_every_namespace_the_examples_use_is_in_the_examples() -> None:
    """`kubectl apply -R -f examples/` on a fresh hub needs each namespace the jobs name (other than
    `default`) created first: 00-namespaces.yaml holds them and sorts first."""
    declared = {doc["metadata"]["name"] for doc in documents(NAMESPACES_FILE) if doc["kind"] == "Namespace"}
    used = {doc["metadata"].get("namespace") for path in FILES for doc in documents(path)} - {None, "default"}
    assert used <= declared, used - declared
    assert FILES[0] == NAMESPACES_FILE


def test_the_framework_examples_are_among_the_applied_files() -> None:
    names = {str(p.relative_to(EXAMPLES)) for p in FILES}
    assert set(FRAMEWORK_EXAMPLES) <= names, names
    assert "resnet-full-template.yaml" in names and "resnet-ps.yaml" in names


@pytest.mark.parametrize("name", sorted(FRAMEWORK_EXAMPLES))
def test_a_framework_example_shows_volumes_and_framework(name: str) -> None:
    (job,) = documents(EXAMPLES / name)
    framework, roles = FRAMEWORK_EXAMPLES[name]
    assert job["kind"] == "TrainingJob" and job["spec"]["framework"] == framework
    assert {r["name"] for r in job["spec"]["roles"]} == roles
    claims: set[str] = set()
    for role in job["spec"]["roles"]:
        spec = role["template"]["spec"]  # the full form
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container in spec["containers"]:
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            data = volumes[mounts["/data"]["name"]]
            assert data["persistentVolumeClaim"]["readOnly"] is True and mounts["/data"]["readOnly"] is True
            assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"
            checkpoints = volumes[mounts["/checkpoints"]["name"]]
            assert not mounts["/checkpoints"].get("readOnly")
            claims.add(checkpoints["persistentVolumeClaim"]["claimName"])
    assert len(claims) == 1, claims  # one checkpoint claim shared by every role


async def test_every_example_is_accepted_by_the_hub(hub: RunningHub) -> None:
    assert FILES
    objects = [obj for path in FILES for obj in documents(path)]
    namespaces = [obj for obj in objects if obj["kind"] == "Namespace"]
    for obj in objects:  # nothing of it exists yet; a job's namespace neither
        status, _ = await hub.request("GET", url(obj))
        assert status == 404, obj["metadata"]
    code, _, err = await hub.kubectl("admin", "apply", "--dry-run=server", "-f", str(EXAMPLES / "resnet-ps.yaml"))
    assert code != 0 and 'namespaces "vision" not found' in err, err
    # a server-side dry run creates no namespace, so the jobs' dry runs need them first (as with kube)
    code, out, err = await hub.kubectl("admin", "apply", "-f", str(NAMESPACES_FILE))
    assert code == 0 and out.count(" created") == len(namespaces), (out, err)
    for path in FILES:
        code, out, err = await hub.kubectl("admin", "apply", "--dry-run=server", "-f", str(path))
        assert code == 0, (path, err)
        assert out.count("(server dry run)") == len(documents(path)), (path, out)
    for obj in objects:  # the dry run stored nothing
        if obj["kind"] != "Namespace":
            status, _ = await hub.request("GET", url(obj))
            assert status == 404, obj["metadata"]
    code, out, err = await hub.kubectl("admin", "apply", *(arg for path in FILES for arg in ("-f", str(path))))
    assert code == 0, err
    assert out.count(" created") == len(objects) - len(namespaces), out
    assert out.count(" unchanged") == len(namespaces), out
    for obj in objects:
        status, stored = await hub.request("GET", url(obj))
        assert status == 200, (obj["metadata"], stored)
        assert isinstance(stored, dict)
        for key, value in obj.items():  # as written (the hub may add defaults beside it)
            if key != "metadata":
                merged = {**stored[key], **value} if isinstance(value, dict) else value
                assert stored[key] == merged, (obj["metadata"], key)
    for name in FRAMEWORK_EXAMPLES:
        (job,) = documents(EXAMPLES / name)
        _, stored = await hub.request("GET", url(job))
        assert isinstance(stored, dict) and stored["spec"]["roles"] == job["spec"]["roles"], name


async def test_a_broken_framework_example_is_refused_naming_the_field(hub: RunningHub) -> None:
    (job,) = documents(EXAMPLES / "tensorflow-ps.yaml")
    job["spec"]["roles"][0]["name"] = "parameter-server"  # not a TFJob replica type
    code, _, err = await hub.kubectl("admin", "apply", "-f", str(NAMESPACES_FILE))
    assert code == 0, err
    code, _, err = await hub.kubectl("admin", "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(job))
    assert code != 0 and "spec.roles[0].name" in err, err
    status, _ = await hub.request("GET", url(job))
    assert status == 404
