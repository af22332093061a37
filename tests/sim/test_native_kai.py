"""Kubernetes' own gang scheduling (scheduling.k8s.io/v1alpha2 PodGroups, pods linked by
spec.schedulingGroup.podGroupName) and NVIDIA KAI Scheduler (scheduling.run.ai/v2alpha2 PodGroups, pods
linked by the pod-group-name annotation) in a real SimCluster: all-or-nothing at the minimum, quiet below
it, the status each real scheduler writes (PodGroupScheduled, which never goes back to False; KAI's
schedulingConditions and last-start-timestamp annotation), KAI queues, validation of both kinds, and real
kubectl against a cluster serving them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from simapi_support import ThreadedSim, wait_for
from test_kubectl import KUBECTL, Kubectl

from federator.apiserver.errors import ApiError
from federator.sim import kinds
from federator.sim.profile import ClusterProfile, ProfileError, parse_profile
from federator.sim.scheduler import KAI, NATIVE, GroupEntry, GroupVerdict, desired_group_status
from federator.sim.server import SimCluster

JSON = dict[str, Any]
KAI_STAMP = "kai.scheduler/last-start-timestamp"


def profile(*, nodes: int = 2, kai_queues: list[str] | None = None, name: str = "gangs") -> ClusterProfile:
    kai: JSON = {"type": "kai"}
    if kai_queues is not None:
        kai["queues"] = kai_queues
    return parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
        "location": {"type": "cloud", "provider": "gcp", "region": "lab"},
        "network": {"fabric": "ethernet", "bandwidthGbps": 100},
        # native is kube-scheduler itself: it schedules the plain pods too
        "schedulers": [{"type": "native"}, kai],
        "kubelet": {"startDelaySeconds": 0.05, "terminationSeconds": 0.05},
        "kubernetesVersion": "v1.36.0",
        "nodePools": [{"name": "gpu", "count": nodes, "cpu": "64", "memory": "512Gi", "gpus": 8,
                       "gpuProduct": "H100-80GB-HBM3"}],
    })


def native_group(name: str, min_count: int) -> JSON:
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}


def kai_group(name: str, min_member: int, queue: str = "default-queue") -> JSON:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team", "labels": {"kai.scheduler/queue": queue}},
            "spec": {"minMember": min_member, "queue": queue}}


def pod(name: str, *, gpus: int, native: str | None = None, kai: str | None = None) -> JSON:
    body: JSON = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"},
                  "spec": {"schedulerName": "kai-scheduler" if kai else "default-scheduler", "restartPolicy": "Never",
                           "containers": [{"name": "c", "image": "trainer:1", "resources": {"requests": {
                               "cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}}}]}}
    if native:
        body["spec"]["schedulingGroup"] = {"podGroupName": native}
    if kai:
        body["metadata"]["annotations"] = {"pod-group-name": kai}
    return body


async def start(prof: ClusterProfile) -> SimCluster:
    cluster = SimCluster(prof)
    await cluster.start()
    await cluster.storage.create(kinds.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": "team"}}, namespace=None)
    return cluster


async def get(cluster: SimCluster, rt: Any, name: str) -> JSON:
    obj: JSON = await cluster.storage.get(rt, namespace="team", name=name)
    return obj


async def nodes_of(cluster: SimCluster, prefix: str) -> dict[str, str]:
    pods = (await cluster.storage.list(kinds.PODS, namespace="team")).items
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods
            if p["metadata"]["name"].startswith(prefix)}


def condition(obj: JSON, type_: str) -> JSON | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


async def marker_bound(cluster: SimCluster, name: str) -> None:
    """Two plain pods created one after the other after the rest are bound: the scheduler has been through
    everything before them, and written what its round wrote (a round writes binds before reasons and group
    statuses, so the second marker's bind comes after the first round's writes)."""
    for n in (1, 2):
        await cluster.storage.create(kinds.PODS, pod(f"{name}-{n}", gpus=0), namespace="team")

        async def bound(n: int = n) -> bool:
            return bool((await get(cluster, kinds.PODS, f"{name}-{n}"))["spec"].get("nodeName"))

        await wait_for(f"marker pod {name}-{n} bound", bound)


# ---------------------------------------------------------------- Kubernetes' own gang scheduling


async def test_native_gang_waits_quietly_below_min_count_then_binds_whole() -> None:
    cluster = await start(profile())
    try:
        await cluster.storage.create(kinds.NATIVE_PODGROUPS, native_group("job", 3), namespace="team")
        for i in range(2):
            await cluster.storage.create(kinds.PODS, pod(f"job-{i}", gpus=4, native="job"), namespace="team")
        await marker_bound(cluster, "marker-1")
        # PreEnqueue: below minCount nothing is attempted, so nothing is written, on the pods or the group
        assert set((await nodes_of(cluster, "job-")).values()) == {""}
        for i in range(2):
            assert condition(await get(cluster, kinds.PODS, f"job-{i}"), "PodScheduled") is None
        assert "conditions" not in ((await get(cluster, kinds.NATIVE_PODGROUPS, "job")).get("status") or {})

        await cluster.storage.create(kinds.PODS, pod("job-2", gpus=4, native="job"), namespace="team")

        async def scheduled() -> JSON | None:
            group = await get(cluster, kinds.NATIVE_PODGROUPS, "job")
            c = condition(group, "PodGroupScheduled")
            return group if c and c["status"] == "True" else None

        group = await wait_for("PodGroupScheduled=True", scheduled)
        (c,) = group["status"]["conditions"]
        assert (c["reason"], c["message"], c["observedGeneration"]) == ("Scheduled", "", 1)
        assert c["lastTransitionTime"].endswith("Z") and "phase" not in group["status"]
        assert all(await nodes_of(cluster, "job-"))
    finally:
        await cluster.stop()


async def test_native_gang_is_all_or_nothing_and_its_scheduled_condition_never_regresses() -> None:
    cluster = await start(profile(nodes=3))
    try:
        await cluster.storage.create(kinds.PODS, pod("filler", gpus=8), namespace="team")
        await cluster.storage.create(kinds.NATIVE_PODGROUPS, native_group("big", 3), namespace="team")
        for i in range(3):
            await cluster.storage.create(kinds.PODS, pod(f"big-{i}", gpus=8, native="big"), namespace="team")

        async def unschedulable() -> JSON | None:
            c = condition(await get(cluster, kinds.NATIVE_PODGROUPS, "big"), "PodGroupScheduled")
            return c if c and c["status"] == "False" else None

        refused = await wait_for("PodGroupScheduled=False", unschedulable)
        assert refused["reason"] == "Unschedulable"
        # kube-scheduler v1.36's words (checked against a real one, e2e/kube): the group says only this; the
        # pods that fit wait at Permit, the one that does not carries the FitError
        assert refused["message"] == "pod group is unschedulable"
        # all or nothing: two of the three would fit, none is bound
        assert set((await nodes_of(cluster, "big-")).values()) == {""}

        async def pod_says_why() -> JSON | None:
            c = condition(await get(cluster, kinds.PODS, "big-0"), "PodScheduled")
            return c if c and c["status"] == "False" else None

        assert (await wait_for("the pods' PodScheduled=False", pod_says_why))["message"].startswith(
            "pod group is unschedulable, waiting for minCount pods from a gang to be scheduled")

        async def rejected() -> JSON | None:
            c = condition(await get(cluster, kinds.PODS, "big-2"), "PodScheduled")
            return c if c and c["status"] == "False" else None

        assert "Insufficient nvidia.com/gpu" in (await wait_for("the rejected pod's FitError", rejected))["message"]

        await cluster.storage.delete(kinds.PODS, namespace="team", name="filler", grace_period_seconds=0)

        async def flipped() -> JSON | None:
            c = condition(await get(cluster, kinds.NATIVE_PODGROUPS, "big"), "PodGroupScheduled")
            return c if c and c["status"] == "True" else None

        accepted = await wait_for("PodGroupScheduled=True once the filler left", flipped)
        assert accepted["reason"] == "Scheduled" and accepted["message"] == ""
        assert len({n for n in (await nodes_of(cluster, "big-")).values() if n}) == 3

        # a fourth member that cannot fit: it waits, but the group stays Scheduled (kube never regresses it)
        await cluster.storage.create(kinds.PODS, pod("big-3", gpus=8, native="big"), namespace="team")

        async def fourth_refused() -> bool:
            c = condition(await get(cluster, kinds.PODS, "big-3"), "PodScheduled")
            return bool(c and c["status"] == "False")

        await wait_for("the fourth member refused", fourth_refused)
        assert condition(await get(cluster, kinds.NATIVE_PODGROUPS, "big"), "PodGroupScheduled") == accepted
    finally:
        await cluster.stop()


def test_native_basic_policy_group_gets_no_condition() -> None:
    group = GroupEntry(key="k", kind=NATIVE, namespace="team", name="basic", uid="u", rv=1, min_member=0,
                       obj={"spec": {"schedulingPolicy": {"basic": {}}}, "status": {}}, gang=False,
                       verdict=GroupVerdict(scheduled=True, at="2026-05-01T12:00:00Z"))
    assert NATIVE.min_member_of(group.obj) is None
    assert desired_group_status(group, [], now="2026-05-01T12:00:00Z") == {}


@pytest.mark.parametrize(("spec", "field"), [
    ({}, "spec.schedulingPolicy"),
    ({"schedulingPolicy": {}}, "spec.schedulingPolicy"),
    ({"schedulingPolicy": {"basic": {}, "gang": {"minCount": 2}}}, "spec.schedulingPolicy"),
    ({"schedulingPolicy": {"gang": {}}}, "spec.schedulingPolicy.gang.minCount"),
    ({"schedulingPolicy": {"gang": {"minCount": 0}}}, "spec.schedulingPolicy.gang.minCount"),
    ({"schedulingPolicy": {"gang": {"minCount": 2**31}}}, "spec.schedulingPolicy.gang.minCount"),
    ({"schedulingPolicy": {"gang": {"minCount": "4"}}}, "spec.schedulingPolicy.gang.minCount"),
    ({"schedulingPolicy": {"gang": {"minCount": True}}}, "spec.schedulingPolicy.gang.minCount"),
    ({"schedulingPolicy": {"gang": [4]}}, "spec.schedulingPolicy.gang"),
    ({"schedulingPolicy": {"gang": {"minCount": 2}},
      "podGroupTemplateRef": {"workload": {"workloadName": "w", "podGroupTemplateName": "t"}}},
     "spec.podGroupTemplateRef"),
    (None, "spec"),
    ("gang", "spec"),
])
async def test_native_podgroup_validation(spec: Any, field: str) -> None:
    cluster = await start(profile(nodes=1))
    try:
        body = native_group("bad", 1)
        if spec is None:
            del body["spec"]
        else:
            body["spec"] = spec
        with pytest.raises(ApiError) as err:
            await cluster.storage.create(kinds.NATIVE_PODGROUPS, body, namespace="team")
        assert err.value.code == 422
        assert field in [c["field"] for c in err.value.details["causes"]], err.value.message
        assert (await cluster.storage.list(kinds.NATIVE_PODGROUPS, namespace="team")).items == []
        # the policy is immutable
        await cluster.storage.create(kinds.NATIVE_PODGROUPS, native_group("ok", 2), namespace="team")

        def grow(obj: JSON) -> JSON:
            obj["spec"]["schedulingPolicy"]["gang"]["minCount"] = 5
            return obj

        with pytest.raises(ApiError) as err:
            await cluster.storage.guaranteed_update(kinds.NATIVE_PODGROUPS, namespace="team", name="ok", mutate=grow)
        assert err.value.code == 422 and "immutable" in err.value.message
        stored = await get(cluster, kinds.NATIVE_PODGROUPS, "ok")
        assert stored["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    finally:
        await cluster.stop()


# ---------------------------------------------------------------- KAI Scheduler


async def test_kai_gang_waits_quietly_binds_whole_and_stamps_its_start() -> None:
    cluster = await start(profile())
    try:
        await cluster.storage.create(kinds.KAI_PODGROUPS, kai_group("job", 3), namespace="team")
        for i in range(2):
            await cluster.storage.create(kinds.PODS, pod(f"job-{i}", gpus=4, kai="job"), namespace="team")
        await marker_bound(cluster, "marker-2")
        # "Job is not ready for scheduling": no pod condition, no scheduling condition
        assert set((await nodes_of(cluster, "job-")).values()) == {""}
        assert condition(await get(cluster, kinds.PODS, "job-0"), "PodScheduled") is None
        group = await get(cluster, kinds.KAI_PODGROUPS, "job")
        assert "schedulingConditions" not in (group.get("status") or {})

        await cluster.storage.create(kinds.PODS, pod("job-2", gpus=4, kai="job"), namespace="team")

        async def stamped() -> JSON | None:
            g = await get(cluster, kinds.KAI_PODGROUPS, "job")
            return g if (g["metadata"].get("annotations") or {}).get(KAI_STAMP) else None

        group = await wait_for("kai.scheduler/last-start-timestamp", stamped)
        assert group["metadata"]["annotations"][KAI_STAMP].endswith("Z")
        assert "phase" not in (group.get("status") or {})  # KAI writes no phase
        assert all(await nodes_of(cluster, "job-"))
    finally:
        await cluster.stop()


async def test_kai_gang_is_all_or_nothing_and_explains_itself_in_scheduling_conditions() -> None:
    cluster = await start(profile(nodes=3))
    try:
        await cluster.storage.create(kinds.PODS, pod("filler", gpus=8), namespace="team")
        await cluster.storage.create(kinds.KAI_PODGROUPS, kai_group("big", 3), namespace="team")
        for i in range(3):
            await cluster.storage.create(kinds.PODS, pod(f"big-{i}", gpus=8, kai="big"), namespace="team")

        async def explained() -> JSON | None:
            status = (await get(cluster, kinds.KAI_PODGROUPS, "big")).get("status") or {}
            return status if status.get("schedulingConditions") else None

        status = await wait_for("an UnschedulableOnNodePool condition", explained)
        (c,) = status["schedulingConditions"]
        assert (c["type"], c["nodePool"], c["reason"], c["status"], c["transitionID"]) == \
            ("UnschedulableOnNodePool", "default", "Unschedulable", "True", "1")
        assert c["message"].startswith("PodSchedulingErrors: Resources were found for 2 pods while 3 are required "
                                       "for gang scheduling. Additional pods cannot be scheduled due to: ")
        assert [r["reason"] for r in c["reasons"]] == ["PodSchedulingErrors"]
        assert set((await nodes_of(cluster, "big-")).values()) == {""}

        await cluster.storage.delete(kinds.PODS, namespace="team", name="filler", grace_period_seconds=0)

        async def started() -> JSON | None:
            g = await get(cluster, kinds.KAI_PODGROUPS, "big")
            return g if (g["metadata"].get("annotations") or {}).get(KAI_STAMP) else None

        group = await wait_for("the gang allocated once the filler left", started)
        assert len({n for n in (await nodes_of(cluster, "big-")).values() if n}) == 3
        # KAI leaves its last scheduling condition in place once the gang runs
        assert group["status"]["schedulingConditions"] == status["schedulingConditions"]
    finally:
        await cluster.stop()


async def test_kai_queue_must_exist() -> None:
    cluster = await start(profile(nodes=1, kai_queues=["research"]))
    try:
        await cluster.storage.create(kinds.KAI_PODGROUPS, kai_group("lost", 1), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("lost-0", gpus=1, kai="lost"), namespace="team")
        await cluster.storage.create(kinds.KAI_PODGROUPS, kai_group("ok", 1, queue="research"), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("ok-0", gpus=1, kai="ok"), namespace="team")

        async def refused() -> JSON | None:
            status = (await get(cluster, kinds.KAI_PODGROUPS, "lost")).get("status") or {}
            return status if status.get("schedulingConditions") else None

        (c,) = (await wait_for("QueueDoesNotExist", refused))["schedulingConditions"]
        assert c["message"] == "QueueDoesNotExist: Queue 'default-queue' does not exist."
        assert c["reasons"] == [{"reason": "QueueDoesNotExist", "message": "Queue 'default-queue' does not exist"}]

        async def ok_bound() -> bool:
            return bool((await nodes_of(cluster, "ok-"))["ok-0"])

        await wait_for("the pod in an existing queue bound", ok_bound)
        assert (await nodes_of(cluster, "lost-"))["lost-0"] == ""
    finally:
        await cluster.stop()


@pytest.mark.parametrize(("spec", "field"), [
    ({"minMember": 0}, "spec.minMember"),
    ({"minMember": -3}, "spec.minMember"),
    ({"minMember": "3"}, "spec.minMember"),
    ({"minMember": 2, "queue": 7}, "spec.queue"),
    ({"minMember": 2, "preemptibility": "sometimes"}, "spec.preemptibility"),
    ({"minMember": 2, "subGroups": [{"minMember": 1}]}, "spec.subGroups[0].name"),
    ({"minMember": 2, "markUnschedulable": "yes"}, "spec.markUnschedulable"),
    ("x" * 100, "spec"),
])
async def test_kai_podgroup_validation(spec: Any, field: str) -> None:
    cluster = await start(profile(nodes=1))
    try:
        body = kai_group("bad", 1)
        body["spec"] = spec
        with pytest.raises(ApiError) as err:
            await cluster.storage.create(kinds.KAI_PODGROUPS, body, namespace="team")
        assert err.value.code == 422
        assert field in [c["field"] for c in err.value.details["causes"]], err.value.message
        assert (await cluster.storage.list(kinds.KAI_PODGROUPS, namespace="team")).items == []
    finally:
        await cluster.stop()


def test_profile_rules_for_native_and_kai() -> None:
    data = {"apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": "p",
            "location": {"type": "on-prem", "region": "lab"}, "network": {"fabric": "ethernet", "bandwidthGbps": 10},
            "nodePools": [{"name": "cpu", "count": 1, "cpu": "4", "memory": "8Gi"}]}
    with pytest.raises(ProfileError, match="native is the default scheduler"):
        parse_profile({**data, "schedulers": [{"type": "native"}, {"type": "default"}]})
    with pytest.raises(ProfileError, match="only a kai scheduler has queues"):
        parse_profile({**data, "schedulers": [{"type": "volcano", "queues": ["a"]}]})
    with pytest.raises(ProfileError, match="queue name"):
        parse_profile({**data, "schedulers": [{"type": "kai", "queues": ["Not A Queue"]}]})
    # native serves plain pods: background load on the default scheduler is fine with it
    ok = parse_profile({**data, "schedulers": [{"type": "native"}],
                        "backgroundLoad": {"arrivalsPerMinute": 1, "scheduler": "default"}})
    assert [s.name for s in ok.schedulers] == ["default-scheduler"]
    assert parse_profile({**data, "schedulers": [{"type": "kai"}]}).schedulers[0].existing_queues == \
        {"default-parent-queue", "default-queue"}
    assert KAI.min_member_of({"spec": {"minMember": 3}}) == 3


# ---------------------------------------------------------------- kubectl


@pytest.fixture(scope="module")
def gangs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedSim]:
    sim = ThreadedSim(profile(name="kubectl-gangs"), tmp_path_factory.mktemp("gangs")).start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.mark.kubectl
@pytest.mark.skipif(not Path(KUBECTL).exists(), reason=f"kubectl not found at {KUBECTL}")
def test_kubectl_shows_both_kinds(gangs: ThreadedSim, tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    kubectl = Kubectl(gangs.kubeconfig, tmp_path / "home")
    ns = gangs.new_namespace("kc")
    manifest = tmp_path / "gangs.yaml"
    manifest.write_text(f"""\
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {{name: train, namespace: {ns}}}
spec: {{schedulingPolicy: {{gang: {{minCount: 2}}}}}}
---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {{name: train, namespace: {ns}, labels: {{kai.scheduler/queue: default-queue}}}}
spec: {{minMember: 2, queue: default-queue}}
""" + "".join(f"""---
apiVersion: v1
kind: Pod
metadata: {{name: native-{i}, namespace: {ns}}}
spec:
  schedulingGroup: {{podGroupName: train}}
  containers: [{{name: c, image: trainer:1, resources: {{requests: {{nvidia.com/gpu: "1"}}}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: kai-{i}, namespace: {ns}, annotations: {{pod-group-name: train}}}}
spec:
  schedulerName: kai-scheduler
  containers: [{{name: c, image: trainer:1, resources: {{requests: {{nvidia.com/gpu: "1"}}}}}}]
""" for i in range(2)))
    out = kubectl("apply", "-f", str(manifest)).stdout.splitlines()
    assert out[:2] == ["podgroup.scheduling.k8s.io/train created", "podgroup.scheduling.run.ai/train created"]

    deadline = time.monotonic() + 15
    while True:
        table = kubectl("get", "podgroups.scheduling.k8s.io", "-n", ns).stdout.splitlines()
        if len(table) == 2 and table[1].split()[:3] == ["train", "Gang", "Scheduled"]:
            break
        assert time.monotonic() < deadline, table
        time.sleep(0.1)
    assert table[0].split() == ["NAME", "POLICY", "STATUS", "AGE"]
    wide = kubectl("get", "podgroups.scheduling.k8s.io", "-n", ns, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "POLICY", "STATUS", "MINCOUNT", "AGE"] and wide[1].split()[3] == "2"
    # KAI's CRD has no printer columns, and the short name pg
    kai = kubectl("get", "podgroups.scheduling.run.ai", "-n", ns).stdout.splitlines()
    assert kai[0].split() == ["NAME", "AGE"] and kai[1].split()[0] == "train"
    stamp = kubectl("get", "podgroups.scheduling.run.ai", "train", "-n", ns, "-o",
                    "jsonpath={.metadata.annotations.kai\\.scheduler/last-start-timestamp}")
    deadline = time.monotonic() + 15
    while not stamp.stdout:
        assert time.monotonic() < deadline, "KAI never stamped its gang"
        time.sleep(0.1)
        stamp = kubectl("get", "podgroups.scheduling.run.ai", "train", "-n", ns, "-o",
                        "jsonpath={.metadata.annotations.kai\\.scheduler/last-start-timestamp}")
    nodes = kubectl("get", "pods", "-n", ns, "-o", "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}")
    assert len([n for n in nodes.stdout.splitlines() if n]) == 4
    condition = kubectl("get", "podgroups.scheduling.k8s.io", "train", "-n", ns, "-o",
                        "jsonpath={.status.conditions[0].type}={.status.conditions[0].status}")
    assert condition.stdout == "PodGroupScheduled=True"
    explain = kubectl("explain", "podgroups.spec.schedulingPolicy.gang",
                      "--api-version=scheduling.k8s.io/v1alpha2").stdout
    assert "minCount" in explain
    # a bad PodGroup is one clear line and nothing is created
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"""\
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {{name: bad, namespace: {ns}}}
spec: {{schedulingPolicy: {{gang: {{minCount: 0}}}}}}
""")
    refused = kubectl("apply", "-f", str(bad), check=False)
    assert refused.returncode != 0
    assert "spec.schedulingPolicy.gang.minCount" in refused.stderr and "Invalid value" in refused.stderr
    assert kubectl("get", "podgroups.scheduling.k8s.io", "bad", "-n", ns, check=False).returncode != 0
    out = kubectl("delete", "-f", str(manifest), "--wait=false").stdout.splitlines()
    assert 'podgroup.scheduling.k8s.io "train" deleted' in out and 'podgroup.scheduling.run.ai "train" deleted' in out
