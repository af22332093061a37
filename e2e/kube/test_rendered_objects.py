"""Every member object the hub renders is accepted by a real kube-apiserver (v1.36, federator/dev/kube.py): for
each gang scheduler adapter (federator/delegation/registry.py) and each spec.framework, the PodGroup, the gang's
headless Service, the MPI hostfile ConfigMap and every pod are created with server-side dry run (`kubectl create
--dry-run=server`: admission and validation run in full, nothing is stored).

Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2) is built in. The other schedulers' PodGroup kinds are
installed as minimal CRDs written here (group, version, kind, scope, an object schema that keeps unknown
fields): kube-apiserver checks their metadata and type, not their spec, so what this proves for them is that
the apiserver takes the objects' shape; their specs are checked against each scheduler's schema by the
simulator (federator/sim/kinds.py) in tests/delegation. The Service and ConfigMap are also created (dry run) as
the hub's member identity with deploy/member's RBAC, which must allow it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from federator.apis.frameworks import FRAMEWORKS
from federator.delegation import ADAPTERS, adapter_for
from federator.dev.kube import KubeBinaries, KubeMember
from federator.sim.profile import load_profile_file

from ..e2e_support import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.xdist_group("kube-rendered"),
              pytest.mark.timeout(300, func_only=True)]

PROFILE = ROOT / "clusterconfigs" / "sim" / "cloud-native-gang.yaml"
NAMESPACE = "vision"  # a namespace deploy/member manages
SCHEDULER_NAMES = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler", "kube-batch": "kube-batch",
                   "native": "default-scheduler", "kai": "kai-scheduler", "default": "default-scheduler"}


def podgroup_crd(group: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        # kube-batch's group is under k8s.io, which kube protects: an unapproved CRD must say so
        "metadata": {"name": f"podgroups.{group}", "annotations": {
            "api-approved.kubernetes.io": "unapproved, a test's stand-in for kube-batch's CRD"}},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup", "shortNames": ["pg"]},
                 "versions": [{"name": version, "served": True, "storage": True, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


@pytest.fixture(scope="module")
def member(kube_binaries: KubeBinaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeMember]:
    with KubeMember(load_profile_file(PROFILE), directory=tmp_path_factory.mktemp("kube-rendered"),
                    binaries=kube_binaries) as running:
        crds = [podgroup_crd(a.pod_group.gvk.group, a.pod_group.gvk.version) for a in ADAPTERS.values()
                if a.pod_group is not None and a.pod_group.gvk.group != "scheduling.k8s.io"]
        running.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(crds))
        for crd in crds:
            running.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                            f"crd/{crd['metadata']['name']}")
        running.apply_member_rbac()
        if running.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0:
            running.kubectl("create", "namespace", NAMESPACE)
        yield running


def role(name: str, replicas: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, **extra, "template": {
        "image": "trainer:1.4", "command": ["python", "train.py"],
        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
        "resources": {"cpu": "1", "memory": "1Gi"}}}


ROLES: dict[str, list[dict[str, Any]]] = {
    "none": [role("ps", 1), role("worker", 2)],
    "pytorch": [role("master", 1), role("worker", 2, minReplicas=1, maxReplicas=4)],
    "tensorflow": [role("chief", 1), role("ps", 1), role("worker", 2), role("evaluator", 1)],
    "paddle": [role("pserver", 2), role("trainer", 2)],
    "mpi": [role("launcher", 1), {"name": "worker", "replicas": 2, "template": {"image": "mpi:1"}}],
    "jax": [role("worker", 3)],
}


def job(framework: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"framework": framework, "roles": ROLES[framework]}
    if framework == "mpi":
        spec["frameworkSettings"] = {"slotsPerWorker": 4, "mpiImplementation": "OpenMPI"}
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": f"{framework}-job", "namespace": NAMESPACE,
                         "uid": f"0d5b1e7f-3a20-4c8e-9a43-{abs(hash(framework)) % 10**12:012d}"},
            "spec": spec}


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_every_rendered_object_is_accepted_by_kube_apiserver(member: KubeMember, adapter: str,
                                                             framework: str) -> None:
    objects = adapter_for(adapter).render(job(framework), cluster_scheduler_name=SCHEDULER_NAMES[adapter], epoch=2,
                                          hub_id="federator", namespace=NAMESPACE)
    kinds = [o.kind for o in objects]
    assert "Service" in kinds and ("ConfigMap" in kinds) == (framework == "mpi")
    listing = {"apiVersion": "v1", "kind": "List", "items": [o.body for o in objects]}
    result = member.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(listing),
                            check=False)
    assert result.returncode == 0, result.stderr
    items: list[dict[str, Any]] = []
    decoder, text, at = json.JSONDecoder(), result.stdout, 0
    while text[at:].strip():  # kubectl prints one JSON document per object
        at += len(text[at:]) - len(text[at:].lstrip())
        doc, at = decoder.raw_decode(text, at)
        items += doc["items"] if doc.get("kind") == "List" else [doc]
    assert [(i["kind"], i["metadata"]["name"]) for i in items] == [(o.kind, o.name) for o in objects]
    for item in items:
        if item["kind"] == "Pod":
            spec = item["spec"]
            assert spec["hostname"] == item["metadata"]["name"] and spec["subdomain"] == objects[
                kinds.index("Service")].name
        if item["kind"] == "Service":
            assert item["spec"]["clusterIP"] == "None" and item["spec"]["publishNotReadyAddresses"] is True
    # the hub's own identity (deploy/member's RBAC) may create the gang's Service and ConfigMap
    companions = [o.body for o in objects if o.kind in ("Service", "ConfigMap")]
    as_hub = member.kubectl("create", "--dry-run=server", "-f", "-", kubeconfig=member.hub_kubeconfig, check=False,
                            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": companions}))
    assert as_hub.returncode == 0, as_hub.stderr


FRAMEWORK_EXAMPLES = ("pytorch-ddp/pytorch-ddp.yaml", "tensorflow-ps.yaml", "paddle-ps.yaml")


@pytest.mark.parametrize("example", FRAMEWORK_EXAMPLES)
def test_the_framework_examples_render_to_pods_kube_apiserver_accepts(member: KubeMember, example: str) -> None:
    """examples/'s framework jobs (full templates with dataset, /dev/shm and checkpoint volumes), rendered for
    Volcano: kube-apiserver takes every pod, volumes and framework variables included."""
    manifest = yaml.safe_load((ROOT / "examples" / example).read_text(encoding="utf-8"))
    manifest["metadata"]["uid"] = "6a1f0c2e-8d3b-4f7a-9c5e-1b2d3e4f5a6b"
    objects = adapter_for("volcano").render(manifest, cluster_scheduler_name="volcano", epoch=1,
                                            hub_id="federator", namespace=NAMESPACE)
    listing = {"apiVersion": "v1", "kind": "List", "items": [o.body for o in objects]}
    result = member.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", input=json.dumps(listing),
                            check=False)
    assert result.returncode == 0, result.stderr
    pods = sum(role["replicas"] for role in manifest["spec"]["roles"])
    assert sum(line.startswith("pod/") for line in result.stdout.split()) == pods, result.stdout
