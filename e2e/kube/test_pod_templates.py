"""Full pod templates (issue 27 item 1) against a real kube-apiserver v1.36: the hub's verdict on a role
template is the member's.

For each invalid template, the hub refuses the job with a 422 naming a field under
spec.roles[0].template, and the real kube-apiserver refuses the pod made from that template (server-side
dryRun create, `--validate=strict` as kubectl sends) naming the same field. For each valid template, the
hub accepts the job, and every pod the hub renders from it (through each gang scheduler adapter's render) is
accepted by the real kube-apiserver (the PodGroup kinds are not installed there, so only the pods are sent).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from federator.apis.trainingjob import validate_trainingjob
from federator.delegation import ADAPTERS, adapter_for
from federator.dev.kube import KubeBinaries, KubeMember
from federator.sim.profile import load_profile_file

from ..e2e_support import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.xdist_group("kube-templates"),
              pytest.mark.timeout(300, func_only=True)]

PROFILE = ROOT / "clusterconfigs" / "sim" / "cloud-native-gang.yaml"
WHERE = "spec.roles[0].template."


@pytest.fixture(scope="module")
def member(kube_binaries: KubeBinaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeMember]:
    with KubeMember(load_profile_file(PROFILE), directory=tmp_path_factory.mktemp("kube-templates"),
                    binaries=kube_binaries) as running:
        running.kubectl("create", "serviceaccount", "trainer")
        yield running


def _container(**extra: Any) -> dict[str, Any]:
    return {"name": "main", "image": "trainer:1.4", **extra}


def _template(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "resnet"}}, "spec": {"containers": [_container()], **spec}}


def _job(template: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "tpl", "namespace": "default", "uid": "8f0c1f7e-9b3e-4c55-a2f4-6a1f2b3c4d5e"},
            "spec": {"roles": [{"name": "worker", "replicas": 2, "template": template}]}}


def _dry_run(member: KubeMember, pod: dict[str, Any]) -> tuple[bool, str]:
    result = member.kubectl("create", "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-",
                            input=json.dumps(pod), check=False)
    return result.returncode == 0, result.stderr


def _plain_pod(template: dict[str, Any]) -> dict[str, Any]:
    """The pod the template describes, with the hub's restartPolicy: what kube judges for the invalid cases."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "tpl-check", "namespace": "default", **copy.deepcopy(template.get("metadata", {}))},
            "spec": {**copy.deepcopy(template["spec"]), "restartPolicy": "Never"}}


def _edit_container(**extra: Any) -> dict[str, Any]:
    return _template(containers=[_container(**extra)])


INVALID: list[Any] = [
    pytest.param(_edit_container(gpuCount=1), "spec.containers[0].gpuCount", id="unknown-field"),
    pytest.param(_edit_container(ports=[{"containerPort": "8080"}]), "spec.containers[0].ports[0].containerPort",
                 id="wrong-type"),
    pytest.param(_template(containers=[{"image": "trainer:1.4"}]), "spec.containers[0].name", id="no-name"),
    pytest.param(_template(containers=[_container(name="Main_1")]), "spec.containers[0].name", id="name-not-dns"),
    pytest.param(_template(containers=[_container(), _container()]), "spec.containers[1].name",
                 id="duplicate-name"),
    pytest.param(_template(containers=[{"name": "main"}]), "spec.containers[0].image", id="no-image"),
    pytest.param(_edit_container(resources={"requests": {"cpu": "2 cpus"}}),
                 "spec.containers[0].resources.requests", id="bad-quantity"),
    pytest.param(_edit_container(resources={"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}),
                 "spec.containers[0].resources.requests", id="request-above-limit"),
    pytest.param(_edit_container(resources={"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}),
                 "spec.containers[0].resources.requests", id="extended-request-not-limit"),
    pytest.param(_edit_container(resources={"requests": {"gpu": 1}, "limits": {"gpu": 1}}),
                 "spec.containers[0].resources", id="resource-name-without-domain"),
    pytest.param(_edit_container(volumeMounts=[{"name": "data", "mountPath": "/data"}]),
                 "spec.containers[0].volumeMounts[0].name", id="mount-of-no-volume"),
    pytest.param(_template(volumes=[{"name": "data", "emptyDir": {}, "hostPath": {"path": "/x"}}]),
                 "spec.volumes[0]", id="two-volume-sources"),
    pytest.param(_edit_container(env=[{"name": "A", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k"}, "configMapKeyRef": {"name": "c", "key": "k"}}}]),
        "spec.containers[0].env[0].valueFrom", id="two-env-sources"),
    pytest.param(_edit_container(env=[{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.foo"}}}]),
                 "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath", id="bad-field-ref"),
    pytest.param(_edit_container(ports=[{"containerPort": 70000}]), "spec.containers[0].ports[0].containerPort",
                 id="port-out-of-range"),
    pytest.param(_template(initContainers=[_container(name="init", restartPolicy="Sometimes")]),
                 "spec.initContainers[0].restartPolicy", id="init-restart-policy"),
    pytest.param(_template(initContainers=[_container(name="init", readinessProbe={
        "exec": {"command": ["true"]}})]), "spec.initContainers[0].readinessProbe", id="probe-on-plain-init"),
    pytest.param(_template(volumes=[{"name": "Data", "emptyDir": {}}]), "spec.volumes[0].name",
                 id="volume-name-not-dns"),
    pytest.param(_template(dnsPolicy="Sometimes"), "spec.dnsPolicy", id="bad-dns-policy"),
    pytest.param(_template(overhead={"cpu": "100m"}), "spec.overhead", id="overhead-by-hand"),
    pytest.param(_template(tolerations=[{"key": "a", "operator": "Exists", "value": "b"}]),
                 "spec.tolerations[0].operator", id="toleration-exists-with-value"),
    pytest.param(_template(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}),
                 "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
                 id="node-affinity-without-terms"),
]


@pytest.mark.parametrize(("template", "field"), INVALID)
def test_kube_refuses_what_the_hub_refuses(member: KubeMember, template: dict[str, Any], field: str) -> None:
    errors = validate_trainingjob(_job(template))
    assert errors, "the hub accepted it"
    fields = [path.removeprefix(WHERE) for path, _ in errors]
    assert any(f == field or f.startswith((field + ".", field + "[")) for f in fields), errors
    accepted, stderr = _dry_run(member, _plain_pod(template))
    assert not accepted, "the real kube-apiserver accepted a template the hub refuses"
    if "cannot be handled as a Pod" in stderr and "strict decoding error" not in stderr:
        return  # kube's decoder refused the value itself (a quantity, a type) and names no field
    if "(Forbidden)" in stderr and "is forbidden: pod rejected" in stderr:
        return  # an admission plugin refused it (RuntimeClass: overhead), in words, not by field
    # kube names the same field (422 Invalid; its strict decoder quotes the path of an unknown field)
    assert field in stderr, stderr


SIDECAR = _container(name="log-shipper", image="shipper:2", restartPolicy="Always",
                     resources={"requests": {"cpu": "100m", "memory": "64Mi"}})
FULL = {
    "metadata": {"labels": {"app": "resnet", "team": "vision"}, "annotations": {"example.com/owner": "ml"}},
    "spec": {
        "serviceAccountName": "trainer",
        "imagePullSecrets": [{"name": "registry"}],
        "securityContext": {"runAsUser": 1000, "runAsNonRoot": True, "fsGroup": 2000},
        "initContainers": [_container(name="fetch", image="fetcher:1", command=["sh", "-c", "true"],
                                      volumeMounts=[{"name": "data", "mountPath": "/data"}]), SIDECAR],
        "containers": [_container(
            command=["python", "train.py"], args=["--epochs", "3"],
            ports=[{"name": "dist", "containerPort": 23456}],
            env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                 {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
                 {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                 {"name": "PLAIN", "value": "1"}],
            envFrom=[{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "hf", "optional": True}}],
            volumeMounts=[{"name": "data", "mountPath": "/data", "readOnly": True},
                          {"name": "shm", "mountPath": "/dev/shm"}],
            securityContext={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            resources={"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 2, "amd.com/gpu": 1},
                       "limits": {"memory": "16Gi", "nvidia.com/gpu": 2}})],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}},
                    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 60,
    },
}
VALID: list[Any] = [
    pytest.param(FULL, id="full"),
    pytest.param({"spec": {"containers": [_container(resources={"requests": {"amd.com/gpu": 1}})]}},
                 id="extended-request-without-limit"),
    pytest.param({"image": "trainer:1.4", "command": ["python"], "env": [{"name": "A", "value": "1"}],
                  "resources": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1}}, id="short-form"),
]


@pytest.mark.parametrize("template", VALID)
@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_kube_accepts_every_pod_the_hub_renders(member: KubeMember, template: dict[str, Any], adapter: str) -> None:
    job = _job(template)
    assert validate_trainingjob(job) == []
    objects = adapter_for(adapter).render(
        job, cluster_scheduler_name="default-scheduler", epoch=1, hub_id="hub-a", namespace="default",
        gpu_node_labels={"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB"]})
    pods = [o.body for o in objects if o.kind == "Pod"]
    assert len(pods) == 2
    for pod in pods:
        accepted, stderr = _dry_run(member, pod)
        assert accepted, stderr
