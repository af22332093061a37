"""The adapters against a real member: a SimCluster running Volcano-, coscheduling-, kube-batch-,
Kubernetes-native- and KAI-style gang schedulers and the default scheduler, reached with the official
`kubernetes` client over HTTPS with its kubeconfig. What an adapter renders is created as the dispatch
controller will create it (PodGroup, then pods owned by it where the adapter says so), the member schedules
it (or says why not), and read_status reads it back through the adapter's own label selectors."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from delegation_support import make_job, wait_until
from kubernetes import client
from kubernetes.client.rest import ApiException
from simapi_support import ThreadedSim

from federator.delegation import (
    GangPhase,
    GangStatus,
    MemberObject,
    Ownership,
    adapter_for,
    ownership_of,
    selector_for,
    stale_selector,
)
from federator.delegation.adapter import NO_GANG_GUARANTEE, POD_GVK, SERVICE_GVK, SchedulerAdapter

HUB = "hub-test"
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
ON_GPU_NODES = {"federator.test/pool": "gpu"}
SCHEDULER_NAMES = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler",
                   "kube-batch": "kube-batch", "native": "native-scheduler", "kai": "kai-scheduler",
                   "default": "default-scheduler"}
GANG_SCHEDULERS = ["volcano", "coscheduling", "kube-batch", "native", "kai"]
ANNOTATION_DURATION = "sim.federator.dev/duration-seconds"
ANNOTATION_FAIL_AFTER = "sim.federator.dev/fail-after-seconds"

JSON = dict[str, Any]


def gpu_job(*, workers: int, gpus: int, name: str = "llm") -> JSON:
    """One CPU-only parameter server (on a CPU node) and `workers` GPU workers (on the tainted GPU nodes)."""
    return make_job(name=name, roles=[
        {"name": "ps", "replicas": 1,
         "template": {"image": "trainer:1.4", "resources": {"cpu": "2", "memory": "4Gi"},
                      "nodeSelector": {"federator.test/pool": "cpu"}}},
        {"name": "worker", "replicas": workers,
         "template": {"image": "trainer:1.4", "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": gpus},
                      "nodeSelector": ON_GPU_NODES, "tolerations": GPU_TOLERATION}},
    ])


class Member:
    """The member cluster as the hub's dispatcher sees it: the official client and one namespace."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace

    def create(self, obj: MemberObject) -> JSON:
        """Create one object; the member's stored copy comes back as a dict."""
        if obj.gvk.group == "":
            create = {"Pod": self.core.create_namespaced_pod, "Service": self.core.create_namespaced_service,
                      "ConfigMap": self.core.create_namespaced_config_map}[obj.gvk.kind]
            resp = create(obj.namespace, obj.body, _preload_content=False)
            created: JSON = json.loads(resp.data)
            return created
        g = obj.gvk
        return dict(self.custom.create_namespaced_custom_object(g.group, g.version, obj.namespace, g.plural,
                                                                obj.body))

    def dispatch(self, objects: list[MemberObject], *, owned: bool = True) -> list[JSON]:
        """What the dispatch controller does: the PodGroup first, then pods owned by the created group
        (unless the adapter says pods must not be owned: `owned`)."""
        created: list[JSON] = []
        group: JSON | None = None
        for obj in objects:
            if obj.gvk.group == "" and obj.gvk != POD_GVK:  # the gang's Service and ConfigMaps
                created.append(self.create(obj))
            elif obj.gvk != POD_GVK:
                group = self.create(obj)
                created.append(group)
            else:
                created.append(self.create(obj.owned_by(group) if group is not None and owned else obj))
        return created

    def pods(self, selector: str) -> list[JSON]:
        resp = self.core.list_namespaced_pod(self.namespace, label_selector=selector, _preload_content=False)
        items: list[JSON] = json.loads(resp.data)["items"]
        return items

    def pod(self, name: str) -> JSON:
        resp = self.core.read_namespaced_pod(name, self.namespace, _preload_content=False)
        pod: JSON = json.loads(resp.data)
        return pod

    def podgroups(self, adapter: SchedulerAdapter, selector: str) -> list[JSON]:
        if adapter.pod_group is None:
            return []
        g = adapter.pod_group.gvk
        listed = self.custom.list_namespaced_custom_object(g.group, g.version, self.namespace, g.plural,
                                                           label_selector=selector)
        items: list[JSON] = listed["items"]
        return items

    def status(self, adapter: SchedulerAdapter, job_uid: str, epoch: int = 0) -> GangStatus:
        selector = selector_for(job_uid, epoch)
        groups = self.podgroups(adapter, selector)
        assert len(groups) <= 1, groups
        return adapter.read_status(groups[0] if groups else None, self.pods(selector))

    def delete_job(self, adapter: SchedulerAdapter, selector: str) -> None:
        """GC by label selector: pods, the Service, then the PodGroup; wait until the pods are really gone."""
        self.core.delete_collection_namespaced_pod(self.namespace, label_selector=selector, grace_period_seconds=0)
        for svc in self.core.list_namespaced_service(self.namespace, label_selector=selector).items:
            self.core.delete_namespaced_service(svc.metadata.name, self.namespace)
        if adapter.pod_group is not None:
            g = adapter.pod_group.gvk
            for group in self.podgroups(adapter, selector):
                self.custom.delete_namespaced_custom_object(g.group, g.version, self.namespace, g.plural,
                                                            group["metadata"]["name"])
        wait_until(f"pods matching {selector} to be deleted", lambda: not self.pods(selector))


@pytest.fixture
def ns(member: ThreadedSim, member_api: client.ApiClient) -> Iterator[Member]:
    m = Member(member_api, member.new_namespace("dlg"))
    yield m
    # free the member's capacity for the next test
    m.delete_job(adapter_for("default"), "app.kubernetes.io/managed-by=federator")


def render(adapter: SchedulerAdapter, job: JSON, namespace: str, *, epoch: int = 0) -> list[MemberObject]:
    return adapter.render(job, cluster_scheduler_name=SCHEDULER_NAMES[adapter.name], epoch=epoch, hub_id=HUB,
                          namespace=namespace)


@pytest.mark.parametrize("name", [*GANG_SCHEDULERS, "default"])
def test_gang_is_accepted_scheduled_and_runs(name: str, ns: Member) -> None:
    adapter = adapter_for(name)
    job = gpu_job(workers=2, gpus=8)
    uid = job["metadata"]["uid"]
    objects = render(adapter, job, ns.namespace)
    created = ns.dispatch(objects, owned=adapter.pods_owned_by_group)
    # the member stored exactly what was rendered (plus its own metadata and defaults)
    for obj, stored in zip(objects, created, strict=True):
        assert stored["metadata"]["name"] == obj.name
        assert stored["metadata"]["labels"] == obj.labels
        assert stored["metadata"]["annotations"] == obj.body["metadata"]["annotations"]
        if obj.gvk == POD_GVK:
            assert stored["spec"]["schedulerName"] == obj.body["spec"]["schedulerName"]
            assert stored["spec"].get("schedulingGroup") == obj.body["spec"].get("schedulingGroup")
        else:
            assert {k: stored["spec"][k] for k in obj.body["spec"]} == obj.body["spec"]
    pods = [c for c in created if c["kind"] == "Pod"]
    if adapter.pods_owned_by_group:
        group_uid = created[0]["metadata"]["uid"]
        assert all(p["metadata"]["ownerReferences"][0]["uid"] == group_uid for p in pods)
    else:  # KAI's pod-grouper would re-group a pod that has an owner
        assert all("ownerReferences" not in p["metadata"] for p in pods)

    admitted = wait_until(f"{name} to admit the gang",
                          lambda: (s := ns.status(adapter, uid)).phase in (GangPhase.ADMITTED, GangPhase.RUNNING)
                          and s)
    assert admitted.bound == admitted.expected == 3
    # the pods are the truth; the member's scheduler updates its PodGroup's phase a moment later
    # (Kubernetes' own PodGroup and KAI's have no phase)
    group_phase = "Running" if name in ("volcano", "coscheduling", "kube-batch") else None
    running = wait_until(f"{name} gang to run", lambda: (s := ns.status(adapter, uid)).phase is GangPhase.RUNNING
                         and s.podgroup_phase == group_phase and s)
    assert {role: c.as_dict() for role, c in running.counts.items()} == {
        "ps": {"pending": 0, "running": 1, "succeeded": 0, "failed": 0},
        "worker": {"pending": 0, "running": 2, "succeeded": 0, "failed": 0},
    }
    # the member honoured nodeSelector and tolerations: workers on the two GPU nodes, one each, ps on a CPU node
    pods = {p["metadata"]["labels"]["federator.dev/role"] + p["metadata"]["labels"]["federator.dev/index"]:
            p["spec"]["nodeName"] for p in ns.pods(selector_for(uid))}
    assert pods["ps0"] in ("cpu-0000", "cpu-0001")
    assert sorted([pods["worker0"], pods["worker1"]]) == ["gpu-0000", "gpu-0001"]
    if group_phase is not None:
        (group,) = ns.podgroups(adapter, selector_for(uid, 0))
        assert group["status"]["phase"] == "Running" and running.podgroup_phase == "Running"
    elif name == "native":
        (group,) = ns.podgroups(adapter, selector_for(uid, 0))
        (scheduled,) = group["status"]["conditions"]
        assert (scheduled["type"], scheduled["status"], scheduled["reason"]) == ("PodGroupScheduled", "True",
                                                                                  "Scheduled")
        assert "phase" not in group["status"]
    elif name == "kai":
        (group,) = ns.podgroups(adapter, selector_for(uid, 0))
        assert group["metadata"]["annotations"]["kai.scheduler/last-start-timestamp"].endswith("Z")
        assert "phase" not in group.get("status", {}) and "schedulingConditions" not in group.get("status", {})


@pytest.mark.parametrize(("name", "reason", "explained_by", "fragment"), [
    ("volcano", "NotEnoughResources", "PodGroup", "minAvailable"),
    ("kube-batch", "NotEnoughResources", "PodGroup", "minAvailable"),
    ("coscheduling", "Unschedulable", "pod", "minAvailable"),
    # PodGroupScheduled=False, reason Unschedulable, "pod group is unschedulable"; the rejected pod says why
    ("native", "Unschedulable", "PodGroup", "pod group is unschedulable (pod "),
    # schedulingConditions UnschedulableOnNodePool; the specific reason is KAI's reasons[0]
    ("kai", "PodSchedulingErrors", "PodGroup", "required for gang scheduling"),
])
def test_gang_that_does_not_fit_stays_unbound_and_says_why(
    name: str, reason: str, explained_by: str, fragment: str, ns: Member
) -> None:
    adapter = adapter_for(name)
    job = gpu_job(workers=3, gpus=8)  # three whole GPU nodes; the member has two
    uid = job["metadata"]["uid"]
    ns.dispatch(render(adapter, job, ns.namespace), owned=adapter.pods_owned_by_group)
    # the pods' reasons and the PodGroup's explanation are separate writes: wait for the one that explains
    waiting = wait_until(f"{name} to explain the wait",
                         lambda: (s := ns.status(adapter, uid)).reason == reason
                         and s.message.startswith(explained_by) and s)
    assert waiting.phase is GangPhase.PLACED
    assert waiting.bound == 0 and waiting.existing == waiting.expected == 4
    assert fragment in waiting.message and "nvidia.com/gpu" in waiting.message
    # all or nothing: the two workers that would fit and the parameter server were not bound either
    assert all(not p["spec"].get("nodeName") for p in ns.pods(selector_for(uid)))


def test_kai_gang_in_a_queue_that_does_not_exist_is_never_scheduled(ns: Member) -> None:
    assert adapter_for("kai").pod_group is not None
    adapter = dataclasses.replace(adapter_for("kai"), pod_group=dataclasses.replace(
        adapter_for("kai").pod_group, queue="team-x"))  # type: ignore[arg-type]
    job = gpu_job(workers=1, gpus=1)
    uid = job["metadata"]["uid"]
    ns.dispatch(render(adapter, job, ns.namespace), owned=False)
    waiting = wait_until("KAI to refuse the queue",
                         lambda: (s := ns.status(adapter, uid)).reason == "QueueDoesNotExist" and s)
    assert waiting.phase is GangPhase.PLACED and waiting.bound == 0
    assert "Queue 'team-x' does not exist" in waiting.message
    (group,) = ns.podgroups(adapter, selector_for(uid))
    (condition,) = group["status"]["schedulingConditions"]
    assert (condition["type"], condition["reason"], condition["status"], condition["nodePool"],
            condition["transitionID"]) == ("UnschedulableOnNodePool", "Unschedulable", "True", "default", "1")
    assert "kai.scheduler/last-start-timestamp" not in group["metadata"].get("annotations", {})


def test_default_scheduler_binds_pods_one_by_one_without_a_gang_guarantee(ns: Member) -> None:
    adapter = adapter_for("default")
    job = gpu_job(workers=3, gpus=8)
    uid = job["metadata"]["uid"]
    ns.dispatch(render(adapter, job, ns.namespace))
    partial = wait_until("the default scheduler to start part of the gang",
                         lambda: (s := ns.status(adapter, uid)).bound == 3 and s.reason == "Unschedulable" and s)
    assert partial.phase is GangPhase.PLACED
    assert partial.message.endswith(NO_GANG_GUARANTEE) and "3 of 4 pods bound" in partial.message
    assert "Insufficient nvidia.com/gpu" in partial.message
    started = wait_until("the bound pods to run", lambda: (s := ns.status(adapter, uid)).counts["worker"].running
                         == 2 and s)
    assert started.counts["worker"].pending == 1 and started.counts["ps"].running == 1


def test_gang_runs_to_success(ns: Member) -> None:
    adapter = adapter_for("coscheduling")
    job = gpu_job(workers=2, gpus=4)
    uid = job["metadata"]["uid"]
    objects = render(adapter, job, ns.namespace)
    for obj in objects:  # the member's kubelet: each pod's process exits 0 after a moment
        if obj.gvk == POD_GVK:
            obj.body["metadata"]["annotations"][ANNOTATION_DURATION] = "0.3"
    ns.dispatch(objects)
    done = wait_until("the gang to succeed and its PodGroup to finish",
                      lambda: (s := ns.status(adapter, uid)).phase is GangPhase.SUCCEEDED
                      and s.podgroup_phase == "Finished" and s)
    assert done.counts["worker"].succeeded == 2 and done.counts["ps"].succeeded == 1


def test_a_failed_member_fails_the_gang(ns: Member) -> None:
    adapter = adapter_for("kube-batch")
    job = gpu_job(workers=2, gpus=4)
    uid = job["metadata"]["uid"]
    objects = render(adapter, job, ns.namespace)
    victim = objects[-1]
    victim.body["metadata"]["annotations"][ANNOTATION_FAIL_AFTER] = "0.2"
    ns.dispatch(objects)
    failed = wait_until("the gang to fail", lambda: (s := ns.status(adapter, uid)).phase is GangPhase.FAILED and s)
    assert failed.reason == "PodFailed" and f"pod {victim.name} (worker 1)" in failed.message
    assert failed.counts["worker"].failed == 1


def test_redispatch_after_a_crash_creates_nothing_twice_and_fences_older_epochs(ns: Member) -> None:
    adapter = adapter_for("volcano")
    job = gpu_job(workers=2, gpus=2)
    uid = job["metadata"]["uid"]
    first = render(adapter, job, ns.namespace, epoch=0)
    ns.dispatch(first[:3])  # the hub died after the PodGroup, the Service and one pod

    # restart: render again (identical), create what is missing, treat AlreadyExists as done if it is ours
    again = render(adapter, job, ns.namespace, epoch=0)
    assert again == first
    group = None
    outcomes = []
    for obj in again:
        try:
            created = ns.create(obj.owned_by(group) if group is not None and obj.gvk == POD_GVK else obj)
            outcomes.append("created")
        except ApiException as e:
            assert e.status == 409 and json.loads(e.body)["reason"] == "AlreadyExists"
            if obj.kind == "Service":
                created = json.loads(ns.core.read_namespaced_service(obj.name, ns.namespace,
                                                                     _preload_content=False).data)
            else:
                created = (ns.podgroups(adapter, selector_for(uid, 0))[0] if obj.gvk != POD_GVK
                           else ns.pod(obj.name))
            assert ownership_of(created, job_uid=uid, epoch=0, hub_id=HUB) is Ownership.CURRENT
            outcomes.append("exists")
        if obj.gvk not in (POD_GVK, SERVICE_GVK):
            group = created
    assert outcomes == ["exists", "exists", "exists", "created", "created"]
    assert len(ns.pods(selector_for(uid))) == 3 and len(ns.podgroups(adapter, selector_for(uid))) == 1
    wait_until("epoch 0 to run", lambda: ns.status(adapter, uid, 0).phase is GangPhase.RUNNING)

    # the gang is pulled back and re-placed into the same cluster at epoch 1: the pod names are a lock
    second = render(adapter, job, ns.namespace, epoch=1)
    # (the headless Service keeps its name too, so the pods' DNS names stay the same across epochs)
    assert [o.name for o in second[1:]] == [o.name for o in first[1:]] and second[0].name != first[0].name
    assert second[1].kind == "Service" and second[1].body["spec"]["selector"]["federator.dev/epoch"] == "1"
    ns.create(second[0])
    for held in second[1:3]:
        with pytest.raises(ApiException) as blocked:
            ns.create(held)
        assert blocked.value.status == 409
    found = ns.pod(second[2].name)
    assert ownership_of(found, job_uid=uid, epoch=1, hub_id=HUB) is Ownership.STALE
    # fencing: everything of other epochs goes first, found through the stale selector
    stale = ns.pods(stale_selector(uid, 1))
    assert len(stale) == 3 and all(ownership_of(p, job_uid=uid, epoch=1, hub_id=HUB) is Ownership.STALE
                                   for p in stale)
    ns.delete_job(adapter, stale_selector(uid, 1))
    assert [g["metadata"]["name"] for g in ns.podgroups(adapter, selector_for(uid))] == [second[0].name]
    new_group = ns.podgroups(adapter, selector_for(uid, 1))[0]
    for obj in second[1:]:
        ns.create(obj.owned_by(new_group))
    status = wait_until("epoch 1 to run", lambda: (s := ns.status(adapter, uid, 1)).phase is GangPhase.RUNNING
                        and s)
    assert status.existing == 3 and not ns.pods(stale_selector(uid, 1))


FULL_TEMPLATE: JSON = {
    "metadata": {"labels": {"app": "resnet"}, "annotations": {"example.com/owner": "vision"}},
    "spec": {
        "nodeSelector": ON_GPU_NODES,
        "securityContext": {"runAsUser": 1000},
        "initContainers": [
            {"name": "warm", "image": "fetcher:1", "command": ["true"],
             "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
            {"name": "shipper", "image": "shipper:2", "restartPolicy": "Always",
             "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}],
        "containers": [{
            "name": "trainer", "image": "trainer:1.4",
            "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
            "envFrom": [{"configMapRef": {"name": "cfg", "optional": True}}],
            "ports": [{"name": "dist", "containerPort": 29500}],
            "resources": {"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 8}},
            "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "shm", "mountPath": "/dev/shm"}]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}},
                    {"name": "shm", "emptyDir": {"medium": "Memory"}}],
    },
}


@pytest.mark.parametrize("name", [*GANG_SCHEDULERS, "default"])
def test_a_full_template_gang_is_created_and_scheduled(name: str, ns: Member) -> None:
    """Issue 27: what the hub renders from a full pod template (init containers, a sidecar, volumes, env from
    secrets, security context) is accepted by the simulated member and its gang scheduler places it."""
    adapter = adapter_for(name)
    job = make_job(name="full", roles=[{"name": "worker", "replicas": 2, "template": FULL_TEMPLATE}])
    objects = render(adapter, job, ns.namespace)
    created = ns.dispatch(objects, owned=adapter.pods_owned_by_group)
    pods = [p for p in created if p["kind"] == "Pod"]
    assert len(pods) == 2
    for pod in pods:
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["warm", "shipper"]
        assert pod["spec"]["volumes"][1] == {"name": "shm", "emptyDir": {"medium": "Memory"}}
        assert pod["metadata"]["labels"]["app"] == "resnet"
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    admitted = wait_until(f"{name} to admit the gang",
                          lambda: (s := ns.status(adapter, job["metadata"]["uid"])).phase
                          in (GangPhase.ADMITTED, GangPhase.RUNNING) and s)
    assert admitted.bound == 2
