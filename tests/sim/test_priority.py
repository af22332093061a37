"""Priority in a simulated member: PriorityClass (scheduling.k8s.io/v1), kube's Priority admission on pods,
and the gang schedulers ordering their queue by priority.

- PriorityClass through the official client and raw HTTP: defaults, Table, validation in kube's words
  (422 naming the field), one globalDefault only (403), value and preemptionPolicy immutable.
- Priority admission on pod create: spec.priorityClassName (or the globalDefault class) becomes
  spec.priority and spec.preemptionPolicy; an unknown class, or a priority or policy that contradicts the
  class, is 403 Forbidden with kube's message, and nothing is created; an update keeps what admission set.
- Every gang scheduler (Volcano, kube-batch and KAI by the PodGroup's spec.priorityClassName; coscheduling
  and native by the pods' priority): with room for one gang only, a high-priority gang submitted after two
  low ones goes first, and of two equal ones the older goes first.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from simapi_support import ThreadedSim, raw_request, wait_for

from federator.sim import kinds
from federator.sim.profile import ClusterProfile, parse_profile
from federator.sim.scheduler import COSCHEDULING, KAI, KUBE_BATCH, NATIVE, VOLCANO, GroupKind, SchedulerState
from federator.sim.server import SimCluster

JSON = dict[str, Any]
PC_PATH = "/apis/scheduling.k8s.io/v1/priorityclasses"
SCHEDULER_NAME = {VOLCANO: "volcano", COSCHEDULING: "scheduler-plugins-scheduler", KUBE_BATCH: "kube-batch",
                  NATIVE: "native-scheduler", KAI: "kai-scheduler"}
GROUP_RT = {VOLCANO: kinds.VOLCANO_PODGROUPS, COSCHEDULING: kinds.COSCHEDULING_PODGROUPS,
            KUBE_BATCH: kinds.KUBE_BATCH_PODGROUPS, NATIVE: kinds.NATIVE_PODGROUPS, KAI: kinds.KAI_PODGROUPS}


def priority_class(name: str, value: Any, **extra: Any) -> JSON:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, **extra}


def plain_pod(name: str, **spec: Any) -> JSON:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "trainer:1.4"}], **spec}}


def status_of(e: ApiException) -> JSON:
    body: JSON = json.loads(e.body)
    return body


# ---------------------------------------------------------------- the API: PriorityClass and admission


@pytest.fixture(scope="module")
def api(sim_cluster: ThreadedSim) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim_cluster.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api_client:
        yield api_client


def test_priority_classes_through_the_official_client(api: client.ApiClient) -> None:
    scheduling = client.SchedulingV1Api(api)
    created = scheduling.create_priority_class(priority_class("pc-batch", 100, description="batch"))
    assert (created.value, created.preemption_policy, created.global_default) == (100, "PreemptLowerPriority", None)
    assert "pc-batch" in {pc.metadata.name for pc in scheduling.list_priority_class().items}
    # value and preemptionPolicy are immutable (ValidatePriorityClassUpdate)
    with pytest.raises(ApiException) as e:
        scheduling.patch_priority_class("pc-batch", {"value": 101})
    assert e.value.status == 422
    assert status_of(e.value)["details"]["causes"][0]["field"] == "value"
    with pytest.raises(ApiException) as e:
        scheduling.patch_priority_class("pc-batch", {"preemptionPolicy": "Never"})
    assert e.value.status == 422 and status_of(e.value)["details"]["causes"][0]["field"] == "preemptionPolicy"
    assert scheduling.patch_priority_class("pc-batch", {"description": "nightly"}).description == "nightly"
    # discovery: the group prefers v1
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert groups["scheduling.k8s.io"].preferred_version.version == "v1"
    scheduling.delete_priority_class("pc-batch")


@pytest.mark.parametrize(("body", "field", "reason"), [
    (priority_class("pc-huge", 1_000_000_001), "value", "FieldValueForbidden"),
    (priority_class("system-mine", 5), "metadata.name", "FieldValueForbidden"),
    (priority_class("system-node-critical", 5), "metadata.name", "FieldValueForbidden"),
    (priority_class("pc-policy", 5, preemptionPolicy="Sometimes"), "preemptionPolicy", "FieldValueNotSupported"),
    (priority_class("pc-type", "high"), "value", "FieldValueTypeInvalid"),
    (priority_class("pc-int32", 2**31), "value", "FieldValueInvalid"),
    (priority_class("pc-default", 5, globalDefault="yes"), "globalDefault", "FieldValueTypeInvalid"),
    (priority_class("Not_A_Name", 5), "metadata.name", "FieldValueInvalid"),
], ids=["over-1e9", "system-prefix", "system-class-other-value", "policy", "value-type", "value-int32",
        "global-default-type", "name"])
def test_bad_priority_classes_are_422_naming_the_field(sim_cluster: ThreadedSim, body: JSON, field: str,
                                                       reason: str) -> None:
    code, status = raw_request(sim_cluster, "POST", PC_PATH, json.dumps(body).encode())
    assert code == 422, status
    assert status["reason"] == "Invalid"
    assert [(c["field"], c["reason"]) for c in status["details"]["causes"]][:1] == [(field, reason)]
    code, _ = raw_request(sim_cluster, "GET", f"{PC_PATH}/{body['metadata']['name']}")
    assert code == 404  # nothing was created


def test_malformed_and_unauthorised_priority_class_writes_change_nothing(sim_cluster: ThreadedSim) -> None:
    code, status = raw_request(sim_cluster, "POST", PC_PATH, b'{"metadata": {"name": "pc-x"}, "value": ')
    assert code == 400, status
    request = urllib.request.Request(sim_cluster.c.url + PC_PATH, method="POST",
                                     data=json.dumps(priority_class("pc-x", 5)).encode(),
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, context=ssl.create_default_context(cadata=sim_cluster.c.ca_pem.decode()),
                               timeout=20)
    assert e.value.code == 401
    e.value.close()
    assert raw_request(sim_cluster, "GET", f"{PC_PATH}/pc-x")[0] == 404


def test_pod_priority_admission(sim_cluster: ThreadedSim, api: client.ApiClient) -> None:
    ns = sim_cluster.new_namespace("prio")
    core, scheduling = client.CoreV1Api(api), client.SchedulingV1Api(api)
    scheduling.create_priority_class(priority_class("pc-high", 1000))
    scheduling.create_priority_class(priority_class("pc-polite", 500, preemptionPolicy="Never"))
    try:
        pod = core.create_namespaced_pod(ns, plain_pod("high", priorityClassName="pc-high"))
        assert (pod.spec.priority, pod.spec.preemption_policy) == (1000, "PreemptLowerPriority")
        polite = core.create_namespaced_pod(ns, plain_pod("polite", priorityClassName="pc-polite", priority=500))
        assert (polite.spec.priority, polite.spec.preemption_policy) == (500, "Never")
        plain = core.create_namespaced_pod(ns, plain_pod("plain"))
        assert (plain.spec.priority, plain.spec.priority_class_name) == (0, None)

        refusals = [
            (plain_pod("unknown", priorityClassName="pc-nowhere"),
             'pods "unknown" is forbidden: no PriorityClass with name pc-nowhere was found'),
            (plain_pod("contradicts", priorityClassName="pc-high", priority=7),
             'pods "contradicts" is forbidden: the integer value of priority (7) must not be provided in pod spec; '
             "priority admission controller computed 1000 from the given PriorityClass name"),
            (plain_pod("no-class", priority=7),
             'pods "no-class" is forbidden: the integer value of priority (7) must not be provided in pod spec; '
             "priority admission controller computed 0 from the given PriorityClass name"),
            (plain_pod("policy", priorityClassName="pc-polite", preemptionPolicy="PreemptLowerPriority"),
             'pods "policy" is forbidden: the string value of PreemptionPolicy (PreemptLowerPriority) must not be '
             "provided in pod spec; priority admission controller computed Never from the given PriorityClass name"),
        ]
        for body, message in refusals:
            code, status = raw_request(sim_cluster, "POST", f"/api/v1/namespaces/{ns}/pods", json.dumps(body).encode())
            assert (code, status["reason"], status["message"]) == (403, "Forbidden", message)
        # hostile: a class name no object can have is just not found, and the answer stays bounded
        huge = "x" * 100_000
        code, status = raw_request(sim_cluster, "POST", f"/api/v1/namespaces/{ns}/pods",
                                   json.dumps(plain_pod("huge", priorityClassName=huge)).encode())
        assert code == 403 and len(status["message"]) < 400 and "no PriorityClass with name xxx" in status["message"]
        for hostile in ("../pc-high", "pc-high/status"):
            code, status = raw_request(sim_cluster, "POST", f"/api/v1/namespaces/{ns}/pods",
                                       json.dumps(plain_pod("path", priorityClassName=hostile)).encode())
            assert code == 403, status
        code, status = raw_request(sim_cluster, "POST", f"/api/v1/namespaces/{ns}/pods",
                                   json.dumps(plain_pod("typed", priorityClassName=7)).encode())
        assert code == 422 and status["details"]["causes"][0]["field"] == "spec.priorityClassName"
        names = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
        assert names == {"high", "polite", "plain"}  # nothing refused was created

        # an update that leaves spec.priority out keeps what admission set (the client omits None fields)
        replaced = None
        for _ in range(50):  # the scheduler and kubelet write the pod too: read again after a 409
            pod = core.read_namespaced_pod("high", ns)
            pod.spec.priority = None
            pod.spec.preemption_policy = None
            pod.metadata.labels = {"touched": "yes"}
            try:
                replaced = core.replace_namespaced_pod("high", ns, pod)
                break
            except ApiException as conflict:
                assert conflict.status == 409, conflict
        assert replaced is not None
        assert (replaced.spec.priority, replaced.metadata.labels) == (1000, {"touched": "yes"})
        # and spec.priority stays immutable
        with pytest.raises(ApiException) as e:
            core.patch_namespaced_pod("high", ns, {"spec": {"priority": 1}})
        assert e.value.status == 422

        # one globalDefault class: pods that name none get it; a second default is refused
        scheduling.create_priority_class(priority_class("pc-default", 50, globalDefault=True))
        with pytest.raises(ApiException) as e:
            scheduling.create_priority_class(priority_class("pc-default-2", 60, globalDefault=True))
        assert (e.value.status, status_of(e.value)["message"]) == (
            403, 'priorityclasses.scheduling.k8s.io "pc-default-2" is forbidden: PriorityClass pc-default is already '
                 "marked as default. Only one default can exist")
        # and so is marking another class default by an update (kube's admission runs on update too)
        with pytest.raises(ApiException) as e:
            scheduling.patch_priority_class("pc-high", {"globalDefault": True})
        assert e.value.status == 403 and "PriorityClass pc-default is already marked" in status_of(e.value)["message"]
        assert scheduling.read_priority_class("pc-high").global_default is None
        defaulted = core.create_namespaced_pod(ns, plain_pod("defaulted"))
        assert (defaulted.spec.priority, defaulted.spec.priority_class_name) == (50, "pc-default")
    finally:
        for name in ("pc-high", "pc-polite", "pc-default"):
            try:
                scheduling.delete_priority_class(name)
            except ApiException as e:
                assert e.status == 404
    assert raw_request(sim_cluster, "GET", f"{PC_PATH}/pc-default-2")[0] == 404


# ---------------------------------------------------------------- the schedulers' queue order


def gang_profile() -> ClusterProfile:
    """One node with 8 GPUs: room for exactly one of the test's gangs (2 pods x 4 GPUs)."""
    return parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": "prio",
        "location": {"type": "on-prem", "region": "lab"},
        "network": {"fabric": "infiniband", "bandwidthGbps": 200},
        "schedulers": [{"type": "volcano"}, {"type": "coscheduling"}, {"type": "kube-batch"},
                       {"type": "native", "schedulerName": "native-scheduler"}, {"type": "kai"}, {"type": "default"}],
        "kubelet": {"startDelaySeconds": 0.05, "terminationSeconds": 0.05},
        "nodePools": [{"name": "gpu", "count": 1, "cpu": "64", "memory": "512Gi", "gpus": 8,
                       "gpuProduct": "A100-SXM4-40GB"}],
    })


def gang_pod(name: str, *, kind: GroupKind | None, group: str | None, gpus: int, priority_class: str | None) -> JSON:
    spec: JSON = {"schedulerName": SCHEDULER_NAME[kind] if kind else "default-scheduler", "restartPolicy": "Never",
                  "containers": [{"name": "c", "image": "trainer:1", "resources": {"requests": {
                      "cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    body: JSON = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"}, "spec": spec}
    if kind is not None and group is not None:
        kind.join(body, group)
    return body


def gang_group(kind: GroupKind, name: str, *, priority_class: str | None) -> JSON:
    spec = kind.group_spec(2)
    if priority_class and kind.group_priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": f"{kind.group}/{kind.version}", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team"}, "spec": spec}


@pytest.mark.parametrize("kind", [VOLCANO, KUBE_BATCH, KAI, COSCHEDULING, NATIVE], ids=lambda k: k.scheduler_type)
async def test_a_later_high_priority_gang_goes_first_and_equal_ones_keep_fifo(kind: GroupKind) -> None:
    cluster = SimCluster(gang_profile())
    await cluster.start()
    storage = cluster.storage
    try:
        await storage.create(kinds.NAMESPACES, {"metadata": {"name": "team"}}, namespace=None)
        for name, value in (("low", 10), ("high", 1000)):
            await storage.create(kinds.PRIORITY_CLASSES, priority_class(name, value), namespace=None)
        await storage.create(kinds.PODS, gang_pod("blocker", kind=None, group=None, gpus=8, priority_class=None),
                             namespace="team")

        async def pods() -> dict[str, JSON]:
            return {p["metadata"]["name"]: p for p in (await storage.list(kinds.PODS, namespace="team")).items}

        await wait_for("the blocker bound", lambda: _bound(pods, "blocker"))
        # first-low and second-low (equal priority, in that order), then high: all wait behind the blocker
        for gang, pc in (("first-low", "low"), ("second-low", "low"), ("high", "high")):
            await storage.create(GROUP_RT[kind], gang_group(kind, gang, priority_class=pc), namespace="team")
            for i in range(2):
                await storage.create(kinds.PODS, gang_pod(f"{gang}-{i}", kind=kind, group=gang, gpus=4,
                                                          priority_class=pc), namespace="team")

        async def all_tried() -> bool:
            found = await pods()
            return all(_unschedulable(found.get(f"{g}-{i}")) for g in ("first-low", "second-low", "high")
                       for i in range(2))

        await wait_for("every gang tried and found unschedulable", all_tried)
        await storage.delete(kinds.PODS, namespace="team", name="blocker")
        await wait_for("the high-priority gang bound", lambda: _bound(pods, "high-0", "high-1"))
        found = await pods()
        assert [n for n, p in found.items() if p["spec"].get("nodeName") and "low" in n] == []
        # the high gang leaves: of the two equal gangs, the older one goes first
        for i in range(2):
            await storage.delete(kinds.PODS, namespace="team", name=f"high-{i}")
        await wait_for("the first low gang bound", lambda: _bound(pods, "first-low-0", "first-low-1"))
        found = await pods()
        assert not found["second-low-0"]["spec"].get("nodeName") and not found["second-low-1"]["spec"].get("nodeName")
    finally:
        await cluster.stop()


async def _bound(pods: Callable[[], Awaitable[dict[str, JSON]]], *names: str) -> bool:
    found = await pods()
    return all(n in found and found[n]["spec"].get("nodeName") for n in names)


def _unschedulable(pod: JSON | None) -> bool:
    if pod is None:
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               for c in (pod.get("status") or {}).get("conditions") or [])


# ---------------------------------------------------------------- the order, without a cluster


def _group(kind: GroupKind, name: str, *, priority_class: str | None, created: str) -> JSON:
    body = gang_group(kind, name, priority_class=priority_class)
    body["metadata"].update(uid=f"uid-{name}", resourceVersion="1", creationTimestamp=created)
    return body


def _pod(kind: GroupKind, name: str, group: str, *, priority: int) -> JSON:
    body = gang_pod(name, kind=kind, group=group, gpus=1, priority_class=None)
    body["metadata"].update(uid=f"uid-{name}", resourceVersion="1", creationTimestamp="2030-01-01T00:00:00Z")
    body["spec"]["priority"] = priority
    return body


@pytest.mark.parametrize("kind", [VOLCANO, KUBE_BATCH, KAI, COSCHEDULING, NATIVE], ids=lambda k: k.scheduler_type)
def test_whose_priority_orders_a_gang(kind: GroupKind) -> None:
    """Volcano, kube-batch and KAI take the PodGroup's class (unknown or none: the globalDefault class's
    value, else 0) and ignore the pods' priority; coscheduling and native take the pods'. Then age."""
    state = SchedulerState(scheduler_types={name: k.scheduler_type for k, name in SCHEDULER_NAME.items()},
                           kai_queues=("default-queue",))
    state.apply_priority_class(priority_class("high", 1000))
    for name, pc, created, pod_priority in (("a", "high", "2030-01-01T00:00:05Z", 0),
                                            ("b", "nowhere", "2030-01-01T00:00:01Z", 2000),
                                            ("c", None, "2030-01-01T00:00:02Z", 0)):
        state.apply_group(kind, _group(kind, name, priority_class=pc, created=created))
        state.apply_pod(_pod(kind, f"{name}-0", name, priority=pod_priority))

    def order() -> list[str]:
        keys = {name: f"{kind.group}/team/{name}" for name in "abc"}
        ranked = sorted("abc", key=lambda n: state.gang_order(keys[n], [state.pods[f"team/{n}-0"]]))
        return ranked

    if kind.group_priority_class:
        assert order() == ["a", "b", "c"]  # class 1000 first; b (unknown class) and c (none): default 0, by age
        state.apply_priority_class({"metadata": {"name": "default"}, "value": 5000, "globalDefault": True})
        assert order() == ["b", "c", "a"]  # now b and c have the default 5000
        state.delete_priority_class("default")
        assert order() == ["a", "b", "c"]
    else:
        assert order() == ["b", "c", "a"]  # b's pods have 2000; a and c 0, c is older
