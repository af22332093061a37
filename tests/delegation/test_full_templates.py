"""Rendering a role's full pod template (issue 27 item 1): the template's pod spec with the hub's fields on
top, for every adapter; the short form unchanged. Creation on a member: test_member.py
(test_a_full_template_gang_is_created_and_scheduled); on a real kube-apiserver: e2e/kube/test_pod_templates.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from delegation_support import make_job

from federator.apis.podtemplate import HUB_OWNED_KEYS, is_hub_owned_key
from federator.delegation import ADAPTERS, adapter_for
from federator.delegation.adapter import MemberObject
from federator.placement.decision import PodAssignment
from federator.placement.resources import Resources

PIN = {"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB"]}
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "resnet"}, "annotations": {"example.com/owner": "vision"}},
    "spec": {
        "serviceAccountName": "trainer",
        "restartPolicy": "Never",
        "initContainers": [
            {"name": "warm", "image": "fetcher:1", "resources": {"requests": {"cpu": "6"}}},
            {"name": "shipper", "image": "shipper:2", "restartPolicy": "Always",
             "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}],
        "containers": [
            {"name": "trainer", "image": "trainer:1.4",
             "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                     {"name": "FEDERATOR_ROLE", "value": "mine"}],
             "resources": {"requests": {"cpu": 4, "memory": "16Gi", "nvidia.com/gpu": 2, "amd.com/gpu": 1},
                           "limits": {"memory": "16Gi"}}},
            {"name": "exporter", "image": "exporter:1", "resources": {"requests": {"cpu": "1"}}}],
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": [
                        {"key": "disk", "operator": "In", "values": ["ssd"]}]}}]},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                  "labelSelector": {"matchLabels": {"app": "resnet"}}}}]},
        },
    },
}


def full_job(template: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return make_job(name="full", roles=[{"name": "worker", "replicas": 2, "template": template or TEMPLATE}],
                    **spec)


def render(adapter: str, job: dict[str, Any], **kw: Any) -> list[MemberObject]:
    return adapter_for(adapter).render(job, cluster_scheduler_name="sched", epoch=3, hub_id="hub-a",
                                       namespace="team-a", **kw)


def pods(objects: list[MemberObject]) -> list[dict[str, Any]]:
    return [o.body for o in objects if o.kind == "Pod"]


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_the_template_is_the_pod_spec_with_the_hubs_fields_on_top(adapter: str) -> None:
    job = full_job(priorityClassName="high")
    before = copy.deepcopy(job)
    objects = render(adapter, job, priority_class_name="high", gpu_node_labels=PIN,
                     assignment=[PodAssignment(role="worker", index=0, node="gpu-0")])
    assert job == before
    first, second = pods(objects)
    spec = first["spec"]
    # the template's own fields, as given
    assert spec["serviceAccountName"] == "trainer" and spec["volumes"] == TEMPLATE["spec"]["volumes"]
    assert [c["name"] for c in spec["initContainers"]] == ["warm", "shipper"]
    assert [c["name"] for c in spec["containers"]] == ["trainer", "exporter"]
    assert spec["affinity"]["podAntiAffinity"] == TEMPLATE["spec"]["affinity"]["podAntiAffinity"]
    # the hub's
    assert spec["schedulerName"] == "sched" and spec["restartPolicy"] == "Never"
    assert spec["priorityClassName"] == "high"
    assert first["metadata"]["labels"]["app"] == "resnet"
    assert first["metadata"]["annotations"]["example.com/owner"] == "vision"
    assert first["metadata"]["labels"]["federator.dev/role"] == "worker"
    assert all(is_hub_owned_key(k) or k == "app" for k in first["metadata"]["labels"])
    # every container, init containers too, gets the gang env; the user's names win
    for container in [*spec["initContainers"], *spec["containers"]]:
        names = [e["name"] for e in container["env"]]
        assert "FEDERATOR_ROLE_INDEX" in names and "FEDERATOR_GANG_SIZE" in names
    trainer_env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert trainer_env["FEDERATOR_ROLE"] == {"name": "FEDERATOR_ROLE", "value": "mine"}
    assert trainer_env["TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert {e["name"]: e["value"] for e in second["spec"]["containers"][1]["env"]}["FEDERATOR_ROLE_INDEX"] == "1"
    # extended resources get limit = request; quantities are strings
    resources = spec["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == "4"
    assert resources["limits"] == {"memory": "16Gi", "nvidia.com/gpu": "2", "amd.com/gpu": "1"}
    # the GPU toleration joins the template's; the GPU pin is ANDed into every required term
    assert spec["tolerations"] == [*TEMPLATE["spec"]["tolerations"],
                                   {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pin = {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}, pin]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}], "matchExpressions": [pin]}]
    preferred = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred[0]["weight"] == 5 and preferred[1]["preference"]["matchFields"][0]["values"] == ["gpu-0"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" in second["spec"]["affinity"]["nodeAffinity"]
    assert len(second["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]) == 1


def test_the_podgroup_minimum_counts_sidecars_and_init_containers_as_kube_scheduler() -> None:
    group = render("volcano", full_job())[0].body
    # per pod: max(4 + 1 + 0.5 (sidecar), 6 (warm)) = 6 cpu; two pods
    assert group["spec"]["minResources"] == {"cpu": "12", "memory": "33280Mi", "nvidia.com/gpu": "4"}


def test_placement_counts_the_same_requests() -> None:
    from federator.controllers.jobs import gang_request

    job = full_job()
    gang = gang_request(job, now=0.0)
    assert gang.roles[0].requests == Resources(cpu_milli=6000, memory=16 * 2**30 + 256 * 2**20, gpu=2)
    # the pod spec's tolerations count for placement, as the short form's do
    assert any(t.key == "dedicated" for t in gang.tolerations)


def test_no_gpu_no_pin_and_no_gpu_toleration() -> None:
    template = {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}
    spec = pods(render("default", full_job(template), gpu_node_labels=PIN))[0]["spec"]
    assert "affinity" not in spec and "tolerations" not in spec


def test_the_short_form_renders_as_before() -> None:
    job = make_job(roles=[{"name": "ps", "replicas": 1, "template": {
        "image": "trainer:1.4", "command": ["python"], "env": [{"name": "A", "value": "1"}],
        "resources": {"cpu": "8", "nvidia.com/gpu": 1}, "nodeSelector": {"pool": "gpu"}}}])
    spec = pods(render("default", job))[0]["spec"]
    container = spec["containers"][0]
    assert container["name"] == "ps" and container["command"] == ["python"]
    assert container["resources"] == {"requests": {"cpu": "8", "nvidia.com/gpu": "1"},
                                      "limits": {"cpu": "8", "nvidia.com/gpu": "1"}}
    assert [e["name"] for e in container["env"]][-1] == "A"
    assert spec["nodeSelector"] == {"pool": "gpu"}


def test_the_hubs_pod_group_keys_are_what_the_adapters_use() -> None:
    keys = {adapter.pod_group.member_key for adapter in ADAPTERS.values()
            if adapter.pod_group is not None and adapter.pod_group.member_by != "spec"}
    keys |= {adapter.pod_group.queue_label for adapter in ADAPTERS.values()
             if adapter.pod_group is not None and adapter.pod_group.queue_label}
    assert keys <= HUB_OWNED_KEYS
    for obj in render("kai", full_job()) + render("volcano", full_job()):
        assert all(is_hub_owned_key(k) for k in obj.body["metadata"]["labels"] if k != "app")
