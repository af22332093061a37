"""Render mode gives an upstream kind's pods the DNS names its operator's pods have (hostname, subdomain, and the
headless Services that make them resolve), keeps the hub's pod names, and the framework env names them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from federator.apis.common import ValidationSettings
from federator.apis.jobkinds.runtimes import BUILTIN_TORCH_DISTRIBUTED
from federator.apis.jobkinds import JOB_KINDS
from federator.apis.jobkinds.base import twin_trainingjob
from federator.delegation import adapter_for
from federator.delegation.adapter import (
    CONFIG_MAP_GVK,
    LABEL_EPOCH,
    LABEL_INDEX,
    LABEL_ROLE,
    POD_GVK,
    SERVICE_GVK,
    MemberObject,
    pod_name,
    service_name,
)

from ..apis.jobkinds.test_trainjob import small as small_trainjob

JSON = dict[str, Any]
KINDS = {k.kind: k for k in JOB_KINDS}
UID = "twin-uid-7"
NS = "team"


def container(name: str) -> JSON:
    return {"name": name, "image": "registry.example/train:1", "command": ["python", "train.py"]}


def replica(replicas: int, name: str = "pytorch") -> JSON:
    return {"replicas": replicas, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container(name)]}}}


def kubeflow(kind: str, name: str, field: str, replicas: dict[str, JSON]) -> JSON:
    version = "v2beta1" if kind == "MPIJob" else "v1"
    return {"apiVersion": f"kubeflow.org/{version}", "kind": kind, "metadata": {"name": name, "namespace": NS},
            "spec": {field: replicas}}


def jobset(name: str, network: JSON | None = None) -> JSON:
    job = {"parallelism": 2, "completions": 2, "completionMode": "Indexed",
           "template": {"spec": {"restartPolicy": "Never", "containers": [container("main")]}}}
    spec: JSON = {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": job}}]}
    if network is not None:
        spec["network"] = network
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": NS},
            "spec": spec}


def batch_job(name: str, subdomain: str | None = None) -> JSON:
    pod: JSON = {"restartPolicy": "Never", "containers": [container("main")]}
    if subdomain is not None:
        pod["subdomain"] = subdomain
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
            "spec": {"completionMode": "Indexed", "parallelism": 3, "completions": 3, "template": {"spec": pod}}}


def render(source: JSON, *, epoch: int = 1) -> tuple[JSON, list[MemberObject]]:
    kind = KINDS[source["kind"]]
    source["metadata"].setdefault("uid", "source-uid-7")
    translation = (kind.translate_referenced(source, ValidationSettings(), BUILTIN_TORCH_DISTRIBUTED)
                   if kind.translate_referenced is not None else kind.translate(source, ValidationSettings()))
    assert translation.spec is not None, translation.errors
    twin = twin_trainingjob(kind, source, translation)
    twin["metadata"]["uid"] = UID
    adapter = adapter_for("volcano")
    objects = adapter.render(twin, cluster_scheduler_name="volcano", epoch=epoch, hub_id="hub-a", namespace=NS)
    return twin, objects


def pods(objects: list[MemberObject]) -> dict[str, JSON]:
    """hostname -> pod body."""
    return {o.body["spec"]["hostname"]: o.body for o in objects if o.gvk == POD_GVK}


def services(objects: list[MemberObject]) -> dict[str, JSON]:
    return {o.name: o.body for o in objects if o.gvk == SERVICE_GVK}


def env(pod: JSON) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or ()}


def selects(service: JSON, pod: JSON) -> bool:
    labels = pod["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in service["spec"]["selector"].items())


def hub_service(name: str) -> str:
    return service_name(job_name=name, job_uid=UID)


def test_pytorchjob_pods_get_the_operators_names_and_a_service_each() -> None:
    source = kubeflow("PyTorchJob", "mnist", "pytorchReplicaSpecs", {"Master": replica(1), "Worker": replica(2)})
    _, objects = render(source)
    by_host = pods(objects)
    assert set(by_host) == {"mnist-master-0", "mnist-worker-0", "mnist-worker-1"}
    # the pod names stay the hub's: they are the per-cluster lock across epochs
    assert by_host["mnist-worker-1"]["metadata"]["name"] == pod_name(job_name="mnist", job_uid=UID, role="worker",
                                                                     index=1)
    assert all("subdomain" not in p["spec"] for p in by_host.values())  # the operator sets none
    svcs = services(objects)
    assert set(svcs) == {hub_service("mnist"), "mnist-master-0", "mnist-worker-0", "mnist-worker-1"}
    for host, pod in by_host.items():
        service = svcs[host]
        assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
        assert [h for h, p in by_host.items() if selects(service, p)] == [host]  # that pod alone
        assert service["metadata"]["labels"][LABEL_EPOCH] == "1"  # goes with the gang
    assert all(selects(svcs[hub_service("mnist")], p) for p in by_host.values())
    worker = env(by_host["mnist-worker-1"])
    assert worker["MASTER_ADDR"] == worker["PET_MASTER_ADDR"] == "mnist-master-0"  # as master.go writes it
    assert worker["RANK"] == "2"
    # dispatch order: every Service before the pods
    kinds = [o.gvk for o in objects]
    assert max(i for i, g in enumerate(kinds) if g == SERVICE_GVK) < kinds.index(POD_GVK)


def test_an_elastic_pytorchjob_rendezvous_at_the_operators_worker_0() -> None:
    workers = replica(2)
    source = kubeflow("PyTorchJob", "el", "pytorchReplicaSpecs", {"Worker": workers})
    source["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d"}
    _, objects = render(source)
    first = env(pods(objects)["el-worker-1"])
    assert first["PET_RDZV_ENDPOINT"] == "el-worker-0:23456"
    assert first["MASTER_ADDR"] == "el-worker-0"


def test_tfjob_tf_config_names_the_operators_services() -> None:
    source = kubeflow("TFJob", "tf", "tfReplicaSpecs",
                      {"PS": replica(1, "tensorflow"), "Worker": replica(2, "tensorflow")})
    _, objects = render(source)
    config = json.loads(env(pods(objects)["tf-worker-1"])["TF_CONFIG"])
    assert config["cluster"] == {"ps": ["tf-ps-0.team.svc:2222"],
                                 "worker": ["tf-worker-0.team.svc:2222", "tf-worker-1.team.svc:2222"]}
    assert config["task"] == {"type": "worker", "index": 1}
    assert set(services(objects)) == {hub_service("tf"), "tf-ps-0", "tf-worker-0", "tf-worker-1"}


def test_paddlejob_master_is_the_operators_name() -> None:
    source = kubeflow("PaddleJob", "pd", "paddleReplicaSpecs",
                      {"Master": replica(1, "paddle"), "Worker": replica(2, "paddle")})
    _, objects = render(source)
    trainer = env(pods(objects)["pd-worker-0"])
    assert trainer["PADDLE_MASTER"] == "pd-master-0:36543"
    assert trainer["PADDLE_TRAINER_ENDPOINTS"] == "pd-worker-0.team.svc:36543,pd-worker-1.team.svc:36543"


def test_mpijob_workers_and_launcher_share_the_jobs_subdomain_and_the_hostfile_names_them() -> None:
    source = kubeflow("MPIJob", "pi", "mpiReplicaSpecs",
                      {"Launcher": replica(1, "launcher"), "Worker": replica(2, "worker")})
    source["spec"]["slotsPerWorker"] = 2
    _, objects = render(source)
    by_host = pods(objects)
    assert set(by_host) == {"pi-launcher", "pi-worker-0", "pi-worker-1"}
    assert {p["spec"]["subdomain"] for p in by_host.values()} == {"pi"}
    svcs = services(objects)
    assert set(svcs) == {hub_service("pi"), "pi"}
    assert all(selects(svcs["pi"], p) for p in by_host.values())
    hostfile = next(o.body for o in objects if o.gvk == CONFIG_MAP_GVK)["data"]["hostfile"]
    assert hostfile == "pi-worker-0.pi.team.svc slots=2\npi-worker-1.pi.team.svc slots=2\n"
    assert by_host["pi-worker-0"]["spec"]["dnsConfig"]["searches"] == ["pi.team.svc.cluster.local"]


def test_jobset_pods_get_jobsets_hostnames_under_its_subdomain() -> None:
    _, objects = render(jobset("js"))
    by_host = pods(objects)
    assert set(by_host) == {"js-workers-0-0", "js-workers-0-1", "js-workers-1-0", "js-workers-1-1"}
    assert {p["spec"]["subdomain"] for p in by_host.values()} == {"js"}
    svcs = services(objects)
    assert set(svcs) == {hub_service("js"), "js"}
    assert all(selects(svcs["js"], p) for p in by_host.values())
    assert by_host["js-workers-1-0"]["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "1"


def test_jobset_network_subdomain_and_dns_hostnames_off() -> None:
    _, objects = render(jobset("js", {"subdomain": "net"}))
    assert {p["spec"]["subdomain"] for p in pods(objects).values()} == {"net"}
    assert set(services(objects)) == {hub_service("js"), "net"}
    _, objects = render(jobset("js", {"enableDNSHostnames": False}))
    bodies = [o.body for o in objects if o.gvk == POD_GVK]
    # JobSet makes no DNS names then: the hub's own identity
    assert all(b["spec"]["hostname"] == b["metadata"]["name"] for b in bodies)
    assert {b["spec"]["subdomain"] for b in bodies} == {hub_service("js")}
    assert set(services(objects)) == {hub_service("js")}


def test_an_indexed_job_gets_job_index_hostnames_and_its_templates_subdomain() -> None:
    _, objects = render(batch_job("pj"))
    by_host = pods(objects)
    assert set(by_host) == {"pj-0", "pj-1", "pj-2"}
    assert all("subdomain" not in p["spec"] for p in by_host.values())
    assert set(services(objects)) == {hub_service("pj")}
    _, objects = render(batch_job("pj", subdomain="pj-svc"))
    by_host = pods(objects)
    assert {p["spec"]["subdomain"] for p in by_host.values()} == {"pj-svc"}
    assert set(services(objects)) == {hub_service("pj"), "pj-svc"}
    assert all(selects(services(objects)["pj-svc"], p) for p in by_host.values())


def test_trainjob_pods_are_its_jobsets_and_pet_master_addr_names_node_0() -> None:
    source = small_trainjob()
    source["metadata"]["namespace"] = NS
    _, objects = render(source)
    by_host = pods(objects)
    assert set(by_host) == {f"mnist-node-0-{i}" for i in range(4)}
    assert {p["spec"]["subdomain"] for p in by_host.values()} == {"mnist"}
    assert set(services(objects)) == {hub_service("mnist"), "mnist"}
    assert env(by_host["mnist-node-0-3"])["PET_MASTER_ADDR"] == "mnist-node-0-0.mnist"


def test_every_epoch_names_the_same_services_and_selects_its_own_pods() -> None:
    source = kubeflow("PyTorchJob", "mnist", "pytorchReplicaSpecs", {"Worker": replica(2)})
    _, first = render(source, epoch=1)
    _, second = render(source, epoch=2)
    old, new = services(first), services(second)
    assert set(old) == set(new)
    for name in new:
        assert new[name]["spec"]["selector"][LABEL_EPOCH] == "2"
        assert not any(selects(new[name], p) for p in pods(first).values())  # the old copy never answers


def test_a_plain_trainingjob_keeps_the_hubs_identity() -> None:
    source = kubeflow("PyTorchJob", "mnist", "pytorchReplicaSpecs", {"Worker": replica(2)})
    twin, _ = render(source)
    twin["metadata"]["annotations"] = {}
    objects = adapter_for("volcano").render(twin, cluster_scheduler_name="volcano", epoch=1, hub_id="hub-a",
                                            namespace=NS)
    bodies = [o.body for o in objects if o.gvk == POD_GVK]
    assert all(b["spec"]["hostname"] == b["metadata"]["name"] for b in bodies)
    assert set(services(objects)) == {hub_service("mnist")}
    first = pod_name(job_name="mnist", job_uid=UID, role="worker", index=0)
    assert env(bodies[1])["MASTER_ADDR"] == f"{first}.{hub_service('mnist')}.{NS}.svc"


@pytest.mark.parametrize("subdomain", ["Not_A_Label", "x" * 64, "9starts-with-digit"])
def test_a_name_the_operator_could_not_use_falls_back_to_the_hubs_identity(subdomain: str) -> None:
    source = batch_job("pj", subdomain=subdomain)
    kind = KINDS["Job"]
    if kind.translate(source, ValidationSettings()).spec is None:
        pytest.skip("the hub refuses this template already")
    _, objects = render(source)
    bodies = [o.body for o in objects if o.gvk == POD_GVK]
    assert all(b["spec"]["hostname"] == b["metadata"]["name"] for b in bodies)
    assert {b["spec"]["subdomain"] for b in bodies} == {hub_service("pj")}
    assert set(services(objects)) == {hub_service("pj")}


def test_a_kubeflow_name_too_long_for_its_service_falls_back_for_the_whole_gang() -> None:
    name = "a" * 50  # "<name>-worker-10" is 60 characters: every name fits
    source = kubeflow("PyTorchJob", name, "pytorchReplicaSpecs", {"Master": replica(1), "Worker": replica(11)})
    kind = KINDS["PyTorchJob"]
    if kind.translate(source, ValidationSettings()).spec is None:
        pytest.skip("the hub refuses this name already")
    _, objects = render(source)
    bodies = [o.body for o in objects if o.gvk == POD_GVK]
    assert {b["spec"]["hostname"] for b in bodies} == {f"{name}-master-0"} | {f"{name}-worker-{i}"
                                                                               for i in range(11)}
    long_name = "b" * 56  # "<name>-worker-0" is 65 characters: no valid Service name
    source = kubeflow("PyTorchJob", long_name, "pytorchReplicaSpecs", {"Worker": replica(2)})
    if kind.translate(source, ValidationSettings()).spec is None:
        pytest.skip("the hub refuses this name already")
    _, objects = render(source)
    bodies = [o.body for o in objects if o.gvk == POD_GVK]
    assert all(b["spec"]["hostname"] == b["metadata"]["name"] for b in bodies)
    assert set(services(objects)) == {hub_service(long_name)}
    assert env(bodies[1])["MASTER_ADDR"].endswith(f".{hub_service(long_name)}.{NS}.svc")
    assert all(o.body["metadata"]["labels"].get(LABEL_ROLE) is None for o in objects if o.gvk == SERVICE_GVK)
    assert all(o.body["metadata"]["labels"].get(LABEL_INDEX) is None for o in objects if o.gvk == SERVICE_GVK)
