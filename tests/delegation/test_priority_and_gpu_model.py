"""Priority and the chosen GPU model, passed down by the adapters, against a real member (a SimCluster with
an A100 node and an H100 node, every scheduler kind), reached with the official client over HTTPS.

- `member_priority_class(job)` is the PriorityClass the dispatcher makes sure of (created once, 409
  AlreadyExists afterwards); with its name, `render` puts priorityClassName on the pods (the member's
  Priority admission resolves spec.priority) and on the PodGroups that have the field. With room for one
  gang only, a job of higher priority delegated after a lower one is admitted first, for every gang
  scheduler.
- `gpu_node_labels` pins the GPU pods to the GPU model placement chose: they land only on nodes of that
  model, and a gang that does not fit on that model waits instead of spilling onto the other one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from delegation_support import make_job, wait_until
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from simapi_support import ThreadedSim

from federator.delegation import MemberObject, SchedulerAdapter, adapter_for, member_priority_class, selector_for
from federator.delegation.adapter import POD_GVK
from federator.sim.profile import parse_profile

JSON = dict[str, Any]
HUB = "hub-test"
PRODUCT = "nvidia.com/gpu.product"
A100, H100 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"
SCHEDULER_NAMES = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler",
                   "kube-batch": "kube-batch", "native": "native-scheduler", "kai": "kai-scheduler",
                   "default": "default-scheduler"}
GANG_SCHEDULERS = ["volcano", "coscheduling", "kube-batch", "native", "kai"]
TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]

PROFILE: JSON = {
    "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": "two-models",
    "location": {"type": "on-prem", "region": "lab-1"},
    "network": {"fabric": "infiniband", "bandwidthGbps": 200},
    "schedulers": [{"type": "default"}, {"type": "volcano"}, {"type": "coscheduling"}, {"type": "kube-batch"},
                   {"type": "native", "schedulerName": "native-scheduler"}, {"type": "kai"}],
    "kubelet": {"startDelaySeconds": 0.05, "terminationSeconds": 0.05},
    "nodePools": [
        {"name": "a100", "count": 1, "cpu": "32", "memory": "256Gi", "gpus": 8, "gpuProduct": A100,
         "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        {"name": "h100", "count": 1, "cpu": "32", "memory": "256Gi", "gpus": 8, "gpuProduct": H100,
         "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        {"name": "cpu", "count": 1, "cpu": "16", "memory": "64Gi"},
    ],
}


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedSim]:
    sim = ThreadedSim(parse_profile(PROFILE, source="tests/delegation"), tmp_path_factory.mktemp("two")).start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def api(two_models: ThreadedSim) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(two_models.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api_client:
        yield api_client


class Member:
    """The member as the dispatcher uses it: the job's PriorityClass first, then PodGroup and pods."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.scheduling = client.SchedulingV1Api(api)
        self.namespace = namespace

    def ensure_priority_class(self, job: JSON) -> str | None:
        """What the dispatcher does: create the class unless the member has it (409 is fine)."""
        wanted = member_priority_class(job)
        if wanted is None:
            return None
        try:
            self.scheduling.create_priority_class(wanted.body)
        except ApiException as e:
            assert e.status == 409, e
        return wanted.name

    def dispatch(self, adapter: SchedulerAdapter, job: JSON, *,
                 gpu_node_labels: dict[str, list[str]] | None = None) -> None:
        objects = adapter.render(job, cluster_scheduler_name=SCHEDULER_NAMES[adapter.name], epoch=0, hub_id=HUB,
                                 namespace=self.namespace, priority_class_name=self.ensure_priority_class(job),
                                 gpu_node_labels=gpu_node_labels)
        group: JSON | None = None
        for obj in objects:
            if obj.kind == "Service":  # the gang's headless Service
                self.core.create_namespaced_service(self.namespace, obj.body, _preload_content=False)
                continue
            if obj.gvk != POD_GVK:
                g = obj.gvk
                group = dict(self.custom.create_namespaced_custom_object(g.group, g.version, self.namespace,
                                                                         g.plural, obj.body))
                continue
            body = obj.owned_by(group) if group is not None and adapter.pods_owned_by_group else obj
            self.core.create_namespaced_pod(self.namespace, body.body, _preload_content=False)

    def pods(self, job: JSON) -> list[JSON]:
        resp = self.core.list_namespaced_pod(self.namespace, label_selector=selector_for(job["metadata"]["uid"]),
                                             _preload_content=False)
        items: list[JSON] = json.loads(resp.data)["items"]
        return items

    def podgroup(self, adapter: SchedulerAdapter, job: JSON) -> JSON | None:
        if adapter.pod_group is None:
            return None
        g = adapter.pod_group.gvk
        listed = self.custom.list_namespaced_custom_object(g.group, g.version, self.namespace, g.plural,
                                                           label_selector=selector_for(job["metadata"]["uid"]))
        items: list[JSON] = listed["items"]
        return items[0] if items else None

    def node_models(self) -> dict[str, str]:
        return {n.metadata.name: n.metadata.labels.get(PRODUCT, "") for n in self.core.list_node().items}

    def delete_everything(self) -> None:
        for svc in self.core.list_namespaced_service(self.namespace).items:
            self.core.delete_namespaced_service(svc.metadata.name, self.namespace)
        self.core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)
        wait_until("the namespace's pods to be gone",
                   lambda: not self.core.list_namespaced_pod(self.namespace).items)


@pytest.fixture
def member(two_models: ThreadedSim, api: client.ApiClient) -> Iterator[Member]:
    m = Member(api, two_models.new_namespace("prio"))
    yield m
    m.delete_everything()


def gpu_job(name: str, *, workers: int, gpus: int, ps: bool = False, **spec: Any) -> JSON:
    roles: list[JSON] = []
    if ps:
        roles.append({"name": "ps", "replicas": 1,
                      "template": {"image": "trainer:1.4", "resources": {"cpu": "1", "memory": "1Gi"}}})
    roles.append({"name": "worker", "replicas": workers,
                  "template": {"image": "trainer:1.4", "tolerations": TOLERATION,
                               "resources": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": gpus}}})
    return make_job(name=name, roles=roles, **spec)


def bound(pods: list[JSON]) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName"))


def unschedulable(pods: list[JSON]) -> bool:
    return bool(pods) and all(any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                                  for c in (p.get("status") or {}).get("conditions") or []) for p in pods)


# ---------------------------------------------------------------- the GPU model


@pytest.mark.parametrize("product", [A100, H100])
def test_gpu_pods_land_only_on_the_chosen_model(member: Member, product: str) -> None:
    """The member's scheduler fits first by node name, so one of the two cases goes against its choice."""
    job = gpu_job(f"pinned-{product[7:11].lower()}", workers=2, gpus=2, ps=True)
    member.dispatch(adapter_for("volcano"), job, gpu_node_labels={PRODUCT: [product]})
    pods = wait_until("the gang bound", lambda: (p := member.pods(job)) and len(bound(p)) == 3 and p)
    models = member.node_models()
    workers = [p for p in pods if p["metadata"]["labels"]["federator.dev/role"] == "worker"]
    assert {models[p["spec"]["nodeName"]] for p in workers} == {product}
    assert workers[0]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": [product]}]}]}
    # the CPU-only parameter server is not pinned to a GPU model
    (ps,) = [p for p in pods if p["metadata"]["labels"]["federator.dev/role"] == "ps"]
    assert "affinity" not in ps["spec"] and models[ps["spec"]["nodeName"]] == ""


def test_a_gang_that_does_not_fit_on_its_model_waits_instead_of_spilling_over(member: Member) -> None:
    job = gpu_job("too-big", workers=2, gpus=8)   # two full nodes; there is one A100 and one H100
    member.dispatch(adapter_for("volcano"), job, gpu_node_labels={PRODUCT: [A100]})
    pods = wait_until("the gang reported unschedulable", lambda: (p := member.pods(job)) and unschedulable(p) and p)
    assert bound(pods) == []
    (scheduled,) = [c for c in pods[0]["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert "didn't match Pod's node affinity/selector" in scheduled["message"]
    # the same gang unpinned spreads over both models: the pin is what held it back
    free = gpu_job("free", workers=2, gpus=8)
    member.delete_everything()
    member.dispatch(adapter_for("volcano"), free)
    pods = wait_until("the unpinned gang bound", lambda: (p := member.pods(free)) and len(bound(p)) == 2 and p)
    assert {member.node_models()[n] for n in bound(pods)} == {A100, H100}


# ---------------------------------------------------------------- priority


def test_the_priority_class_reaches_pods_and_podgroups(member: Member) -> None:
    for name in ("volcano", "coscheduling", "kube-batch", "native", "kai", "default"):
        adapter = adapter_for(name)
        job = gpu_job(f"classy-{name}", workers=1, gpus=1, priority=250)
        member.dispatch(adapter, job, gpu_node_labels={PRODUCT: [A100, H100]})
        (pod,) = member.pods(job)
        assert (pod["spec"]["priorityClassName"], pod["spec"]["priority"]) == ("federator-priority-250", 250)
        assert pod["spec"]["preemptionPolicy"] == "Never"
        group = member.podgroup(adapter, job)
        if name in ("volcano", "kube-batch", "kai"):
            assert group is not None and group["spec"]["priorityClassName"] == "federator-priority-250"
        elif group is not None:
            assert "priorityClassName" not in group["spec"]
    pc = member.scheduling.read_priority_class("federator-priority-250")
    assert (pc.value, pc.preemption_policy, pc.metadata.labels) == (
        250, "Never", {"app.kubernetes.io/managed-by": "federator"})
    # a job without priority gets no class at all
    plain = gpu_job("plain", workers=1, gpus=1)
    member.dispatch(adapter_for("volcano"), plain)
    (pod,) = member.pods(plain)
    assert (pod["spec"].get("priorityClassName"), pod["spec"]["priority"]) == (None, 0)


@pytest.mark.parametrize("name", GANG_SCHEDULERS)
def test_a_later_higher_priority_job_is_admitted_first(member: Member, name: str) -> None:
    """Room for one gang (the A100 node); a low-priority job, then a high-priority one; both wait behind a
    blocker; when it goes, the member admits the high one."""
    adapter = adapter_for(name)
    pin = {PRODUCT: [A100]}
    blocker = gpu_job(f"blocker-{name}", workers=1, gpus=8)
    member.dispatch(adapter_for("default"), blocker, gpu_node_labels=pin)
    wait_until("the blocker bound", lambda: bound(member.pods(blocker)))
    low = gpu_job(f"low-{name}", workers=2, gpus=4, priority=10)
    high = gpu_job(f"high-{name}", workers=2, gpus=4, priority=900)
    member.dispatch(adapter, low, gpu_node_labels=pin)
    wait_until("the low job waiting", lambda: unschedulable(member.pods(low)))
    member.dispatch(adapter, high, gpu_node_labels=pin)
    wait_until("the high job waiting", lambda: unschedulable(member.pods(high)))
    for pod in member.pods(blocker):
        member.core.delete_namespaced_pod(pod["metadata"]["name"], member.namespace, grace_period_seconds=0)
    wait_until("the high-priority job bound", lambda: len(bound(member.pods(high))) == 2)
    assert bound(member.pods(low)) == []
