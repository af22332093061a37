"""Rendering, table-driven per adapter: the exact PodGroup and pods each member scheduler gets (labels,
annotations, names, minMember, schedulerName, resources, tolerations, node hints), determinism, owner
references, selectors, ownership, and hostile input that must be refused with a clear error."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from delegation_support import make_job
from hypothesis import given, settings
from hypothesis import strategies as st

from federator.delegation import (
    ADAPTERS,
    GangPhase,
    Ownership,
    RenderError,
    adapter_for,
    gpu_node_labels,
    hub_selector,
    is_system_priority_class,
    member_priority_class,
    ownership_of,
    selector_for,
    stale_selector,
)
from federator.delegation.adapter import (
    MAX_NAME_LENGTH,
    NO_GANG_GUARANTEE,
    CONFIG_MAP_GVK,
    POD_GVK,
    PRIORITY_CLASS_GVK,
    SERVICE_GVK,
    Gvk,
    MemberObject,
    SchedulerAdapter,
    pod_name,
    podgroup_name,
)
from federator.placement.decision import PodAssignment
from federator.placement.gang import MAX_GANG_PODS
from federator.placement.resources import Resources
from federator.placement.snapshot import NodeState

UID = "6f1c7a1e-2b1d-4c8e-9a43-0d5b1e7f3a20"
HUB = "hub-eu-1"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

#: Golden names. They must never change between releases: a hub upgraded in the middle of a dispatch
#: has to find what the old version created instead of creating it again.
GOLDEN_GROUP = "resnet-ps-mssxt-e3"
GOLDEN_WORKER_7 = "resnet-ps-mssxt-worker-7"
#: the gang's headless Service: the same name at every epoch (pods keep their DNS names across requeues)
GOLDEN_SERVICE = "resnet-ps-mssxt"


def example_job(**overrides: Any) -> dict[str, Any]:
    job = make_job(uid=UID, roles=[
        {"name": "ps", "replicas": 2,
         "template": {"image": "trainer:1.4", "command": ["python", "-m", "train"], "args": ["--role=ps"],
                      "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                      "resources": {"cpu": "8", "memory": "32Gi"}}},
        {"name": "worker", "replicas": 8,
         "template": {"image": "trainer:1.4",
                      "resources": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 4, "rdma/hca": 1},
                      "nodeSelector": {"federator.test/pool": "gpu"},
                      "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}},
    ])
    job.update(overrides)
    return job


COMMON_LABELS = {
    "app.kubernetes.io/managed-by": "federator",
    "federator.dev/hub": HUB,
    "federator.dev/job-uid": UID,
    "federator.dev/job-namespace": "vision",
    "federator.dev/job-name": "resnet-ps",
    "federator.dev/epoch": "3",
    "federator.dev/on-cluster-loss": "requeue",
}
COMMON_ANNOTATIONS = {"federator.dev/job": "vision/resnet-ps", "federator.dev/gang": "ps=2,worker=8"}
GANG_TOTAL = {"cpu": "144", "memory": "576Gi", "nvidia.com/gpu": "32", "rdma/hca": "8"}


def expected_worker_7(scheduler_name: str) -> dict[str, Any]:
    """Pod 7 of the worker role, before the scheduler-specific group membership is added."""
    requests = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4", "rdma/hca": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": GOLDEN_WORKER_7,
            "namespace": "team-a",
            "labels": {**COMMON_LABELS, "federator.dev/role": "worker", "federator.dev/index": "7"},
            "annotations": dict(COMMON_ANNOTATIONS),
        },
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "containers": [{
                "name": "worker",
                "image": "trainer:1.4",
                "resources": {"requests": requests, "limits": dict(requests)},
                "env": [
                    {"name": "FEDERATOR_JOB_NAMESPACE", "value": "vision"},
                    {"name": "FEDERATOR_JOB_NAME", "value": "resnet-ps"},
                    {"name": "FEDERATOR_ROLE", "value": "worker"},
                    {"name": "FEDERATOR_ROLE_INDEX", "value": "7"},
                    {"name": "FEDERATOR_ROLE_REPLICAS", "value": "8"},
                    {"name": "FEDERATOR_GANG_SIZE", "value": "10"},
                    {"name": "FEDERATOR_EPOCH", "value": "3"},
                ],
            }],
            "nodeSelector": {"federator.test/pool": "gpu"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "hostname": GOLDEN_WORKER_7,
            "subdomain": GOLDEN_SERVICE,
        },
    }


def expected_service() -> dict[str, Any]:
    """The gang's headless Service: every pod of this epoch, in DNS before it is ready."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": GOLDEN_SERVICE, "namespace": "team-a", "labels": dict(COMMON_LABELS),
                     "annotations": dict(COMMON_ANNOTATIONS)},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": {"federator.dev/hub": HUB, "federator.dev/job-uid": UID, "federator.dev/epoch": "3"}},
    }


def podgroup(api_version: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {"name": GOLDEN_GROUP, "namespace": "team-a", "labels": dict(COMMON_LABELS),
                     "annotations": dict(COMMON_ANNOTATIONS)},
        "spec": spec,
    }


def kai_podgroup() -> dict[str, Any]:
    group = podgroup("scheduling.run.ai/v2alpha2", {"minMember": 10, "queue": "default-queue"})
    group["metadata"]["labels"]["kai.scheduler/queue"] = "default-queue"
    return group


# adapter, schedulerName in the MemberCluster, expected PodGroup (or None), how a pod joins its group
# (labels / annotations / spec, key), labels a pod gets besides the common ones
CASES = [
    pytest.param(
        "volcano", "volcano",
        podgroup("scheduling.volcano.sh/v1beta1", {"minMember": 10, "minResources": GANG_TOTAL, "queue": "default"}),
        ("annotations", "scheduling.k8s.io/group-name"),
        id="volcano"),
    pytest.param(
        "coscheduling", "scheduler-plugins-scheduler",
        podgroup("scheduling.x-k8s.io/v1alpha1", {"minMember": 10, "minResources": GANG_TOTAL}),
        ("labels", "scheduling.x-k8s.io/pod-group"),
        id="coscheduling"),
    pytest.param(
        "kube-batch", "kube-batch",
        podgroup("scheduling.incubator.k8s.io/v1alpha1", {"minMember": 10, "queue": "default"}),
        ("annotations", "scheduling.k8s.io/group-name"),
        id="kube-batch"),
    # Kubernetes v1.36: a standalone PodGroup with a gang policy; pods name it in their own spec
    pytest.param(
        "native", "default-scheduler",
        podgroup("scheduling.k8s.io/v1alpha2", {"schedulingPolicy": {"gang": {"minCount": 10}}}),
        ("spec", "schedulingGroup.podGroupName"),
        id="native"),
    # KAI: minMember, the queue in spec and as the kai.scheduler/queue label on the group and every pod
    pytest.param(
        "kai", "kai-scheduler", kai_podgroup(),
        ("annotations", "pod-group-name"),
        {"kai.scheduler/queue": "default-queue"},
        id="kai"),
    pytest.param("default", "default-scheduler", None, None, id="default"),
]


def render(adapter: str, scheduler_name: str, **kw: Any) -> list[MemberObject]:
    args: dict[str, Any] = {"cluster_scheduler_name": scheduler_name, "epoch": 3, "hub_id": HUB,
                            "namespace": "team-a"}
    args.update(kw)
    job = args.pop("job", None) or example_job()
    return adapter_for(adapter).render(job, **args)


CASES = [case if len(case.values) == 5 else pytest.param(*case.values, {}, id=case.id) for case in CASES]


@pytest.mark.parametrize(("adapter", "scheduler_name", "group", "membership", "pod_labels"), CASES)
def test_rendered_objects_are_exactly_right(
    adapter: str, scheduler_name: str, group: dict[str, Any] | None, membership: tuple[str, str] | None,
    pod_labels: dict[str, str],
) -> None:
    objects = render(adapter, scheduler_name)
    pods = [o for o in objects if o.gvk == POD_GVK]
    assert len(pods) == 10
    if group is None:
        assert len(objects) == 11
        assert objects[0].body == expected_service() and objects[1:] == pods
    else:
        assert objects[0].body == group  # the PodGroup comes first: dispatch order, then the Service
        assert objects[0].name == GOLDEN_GROUP and objects[0].namespace == "team-a"
        assert objects[0].api_version == group["apiVersion"] and objects[0].plural == "podgroups"
        assert objects[1].body == expected_service() and objects[1].plural == "services"
        assert objects[2:] == pods
    # pods in role order, index order
    assert [(p.labels["federator.dev/role"], p.labels["federator.dev/index"]) for p in pods] == \
        [("ps", "0"), ("ps", "1")] + [("worker", str(i)) for i in range(8)]
    expected = expected_worker_7(scheduler_name)
    if membership is not None:
        where, key = membership
        if where == "spec":
            head, tail = key.split(".")
            expected["spec"][head] = {tail: GOLDEN_GROUP}
        else:
            expected["metadata"][where][key] = GOLDEN_GROUP
    expected["metadata"]["labels"].update(pod_labels)
    assert pods[9].body == expected
    assert pods[9].name == GOLDEN_WORKER_7 and pods[9].kind == "Pod" and pods[9].api_version == "v1"


@pytest.mark.parametrize(("adapter", "scheduler_name", "group", "membership", "pod_labels"), CASES)
def test_parameter_server_pod_keeps_command_args_and_user_env(
    adapter: str, scheduler_name: str, group: dict[str, Any] | None, membership: tuple[str, str] | None,
    pod_labels: dict[str, str],
) -> None:
    ps0 = next(o for o in render(adapter, scheduler_name) if o.name == "resnet-ps-mssxt-ps-0")
    container = ps0.body["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "train"] and container["args"] == ["--role=ps"]
    assert container["env"][-1] == {"name": "NCCL_DEBUG", "value": "INFO"}
    assert container["resources"] == {"requests": {"cpu": "8", "memory": "32Gi"},
                                      "limits": {"cpu": "8", "memory": "32Gi"}}
    assert "nodeSelector" not in ps0.body["spec"] and "tolerations" not in ps0.body["spec"]
    assert "affinity" not in ps0.body["spec"]  # no assignment, no node hint


def test_user_env_wins_over_injected_gang_env() -> None:
    job = example_job()
    job["spec"]["roles"][0]["template"]["env"] = [{"name": "FEDERATOR_ROLE", "value": "chief"}]
    ps0 = render("volcano", "volcano", job=job)[2]
    env = ps0.body["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] == "FEDERATOR_ROLE"] == [{"name": "FEDERATOR_ROLE", "value": "chief"}]


def test_role_without_resources_has_no_resources_and_no_min_resources() -> None:
    job = make_job(uid=UID, roles=[{"name": "w", "replicas": 3, "template": {"image": "busybox"}}])
    objects = render("coscheduling", "scheduler-plugins-scheduler", job=job)
    assert objects[0].body["spec"] == {"minMember": 3}
    assert "resources" not in objects[2].body["spec"]["containers"][0]


def test_min_resources_are_exact_sums() -> None:
    job = make_job(uid=UID, roles=[
        {"name": "a", "replicas": 3, "template": {"image": "x", "resources": {"cpu": "500m", "memory": "1G"}}},
        {"name": "b", "replicas": 1, "template": {"image": "x", "resources": {"cpu": "0.25", "memory": "1536Mi"}}},
    ])
    spec = render("volcano", "volcano", job=job)[0].body["spec"]
    # 3 x 1e9 bytes + 1.5 GiB is not a whole number of Ki: written in bytes, never rounded down
    assert spec["minResources"] == {"cpu": "1750m", "memory": str(3 * 10**9 + 1536 * 2**20)}
    assert spec["minMember"] == 4


def test_scheduler_name_comes_from_the_member_cluster() -> None:
    pods = render("coscheduling", "my-coscheduler")[2:]
    assert {p.body["spec"]["schedulerName"] for p in pods} == {"my-coscheduler"}


def test_node_hints_become_preferred_affinity_not_a_binding() -> None:
    assignment = [PodAssignment(role="worker", index=i, node=f"gpu-{i % 2}") for i in range(8)]
    objects = render("volcano", "volcano", assignment=assignment)
    w3 = next(o for o in objects if o.name == "resnet-ps-mssxt-worker-3")
    assert "nodeName" not in w3.body["spec"]
    assert w3.body["metadata"]["annotations"]["federator.dev/node-hint"] == "gpu-1"
    assert w3.body["spec"]["affinity"] == {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}}]}}
    ps0 = next(o for o in objects if o.name == "resnet-ps-mssxt-ps-0")
    assert "affinity" not in ps0.body["spec"]  # no hint for pods the assignment leaves out


@pytest.mark.parametrize("bad", [
    PodAssignment(role="chief", index=0, node="n1"),
    PodAssignment(role="worker", index=8, node="n1"),
    PodAssignment(role="worker", index=0, node="Bad_Node"),
])
def test_assignment_that_does_not_match_the_job_is_refused(bad: PodAssignment) -> None:
    with pytest.raises(RenderError, match="assignment"):
        render("volcano", "volcano", assignment=[bad])


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_rendering_is_deterministic_and_returns_fresh_objects(adapter: str) -> None:
    scheduler = ADAPTERS[adapter].default_scheduler_name
    first = render(adapter, scheduler)
    first[0].body["metadata"]["labels"]["tampered"] = "yes"
    second, third = render(adapter, scheduler), render(adapter, scheduler)
    assert second == third
    assert "tampered" not in second[0].body["metadata"]["labels"]
    assert [o.name for o in first] == [o.name for o in second]
    # the stored job's status and resourceVersion do not matter; the epoch does, for the PodGroup only
    other_status = example_job(status={"phase": "Running"})
    other_status["metadata"]["resourceVersion"] = "99"
    assert render(adapter, scheduler, job=other_status) == second
    next_epoch = render(adapter, scheduler, epoch=4)
    pod_names = [o.name for o in second if o.gvk == POD_GVK]
    assert [o.name for o in next_epoch if o.gvk == POD_GVK] == pod_names
    if ADAPTERS[adapter].gang_guarantee:
        assert next_epoch[0].name == "resnet-ps-mssxt-e4" != second[0].name


def test_render_does_not_modify_the_job() -> None:
    job = example_job()
    before = copy.deepcopy(job)
    render("volcano", "volcano", job=job)
    assert job == before


def test_owner_reference_to_the_created_podgroup() -> None:
    objects = render("volcano", "volcano")
    created_group = {**objects[0].body, "metadata": {**objects[0].body["metadata"], "uid": "pg-uid-1"}}
    owned = objects[2].owned_by(created_group)
    assert owned.body["metadata"]["ownerReferences"] == [{
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "name": GOLDEN_GROUP,
        "uid": "pg-uid-1", "controller": False, "blockOwnerDeletion": False}]
    assert "ownerReferences" not in objects[2].body["metadata"]  # the rendered object is untouched
    assert owned.name == objects[2].name and owned.gvk == objects[2].gvk
    with pytest.raises(RenderError, match="uid"):
        objects[2].owned_by(objects[0].body)  # not created yet: no uid
    elsewhere = {**created_group, "metadata": {**created_group["metadata"], "namespace": "other"}}
    with pytest.raises(RenderError, match="cannot cross namespaces"):
        objects[2].owned_by(elsewhere)


def test_gvk_lists_in_creation_order() -> None:
    assert adapter_for("volcano").gvk_list() == (
        Gvk("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups"), SERVICE_GVK, CONFIG_MAP_GVK, POD_GVK)
    assert adapter_for("coscheduling").gvk_list()[0].key == "podgroups.scheduling.x-k8s.io"
    assert adapter_for("kube-batch").gvk_list()[0].api_version == "scheduling.incubator.k8s.io/v1alpha1"
    assert adapter_for("native").gvk_list()[0].key == "podgroups.scheduling.k8s.io"
    assert adapter_for("native").gvk_list()[0].api_version == "scheduling.k8s.io/v1alpha2"
    assert adapter_for("kai").gvk_list() == (Gvk("scheduling.run.ai", "v2alpha2", "PodGroup", "podgroups"),
                                             SERVICE_GVK, CONFIG_MAP_GVK, POD_GVK)
    assert adapter_for("default").gvk_list() == (SERVICE_GVK, CONFIG_MAP_GVK, POD_GVK)


def test_registry_and_gang_guarantee_conditions() -> None:
    assert sorted(ADAPTERS) == ["coscheduling", "default", "kai", "kube-batch", "native", "volcano"]
    for name, adapter in ADAPTERS.items():
        assert adapter_for(name) is adapter and isinstance(adapter, SchedulerAdapter)
    (default,) = adapter_for("default").job_conditions()
    assert (default.type, default.status, default.reason) == ("GangGuarantee", "False", "DefaultScheduler")
    assert default.message == NO_GANG_GUARANTEE == \
        "the default scheduler gives no gang guarantee: pods may start partially"
    (volcano,) = adapter_for("volcano").job_conditions()
    assert (volcano.type, volcano.status) == ("GangGuarantee", "True") and "minMember" in volcano.message
    (native,) = adapter_for("native").job_conditions()
    assert native.status == "True" and "schedulingPolicy.gang.minCount = every pod" in native.message
    for unknown in ("Volcano", "yunikorn", "", "default "):
        with pytest.raises(KeyError, match="known: coscheduling, default, kai, kube-batch, native, volcano"):
            adapter_for(unknown)


def test_selectors() -> None:
    assert selector_for(UID) == f"federator.dev/job-uid={UID}"
    assert selector_for(UID, 3) == adapter_for("kube-batch").selector_for(UID, 3) == \
        f"federator.dev/job-uid={UID},federator.dev/epoch=3"
    assert stale_selector(UID, 3) == f"federator.dev/job-uid={UID},federator.dev/epoch!=3"
    assert hub_selector(HUB) == "federator.dev/hub=hub-eu-1"
    for bad in ("", "a,b", "x=y", "a" * 64, "uid with space"):
        with pytest.raises(RenderError):
            selector_for(bad)
    with pytest.raises(RenderError, match="epoch"):
        selector_for(UID, -1)
    with pytest.raises(RenderError, match="hub id"):
        hub_selector("hub!")


def test_ownership_of_found_objects() -> None:
    pod = render("volcano", "volcano")[1].body
    assert ownership_of(pod, job_uid=UID, epoch=3, hub_id=HUB) is Ownership.CURRENT
    assert ownership_of(pod, job_uid=UID, epoch=4, hub_id=HUB) is Ownership.STALE
    assert ownership_of(pod, job_uid=UID, epoch=2, hub_id=HUB) is Ownership.NEWER
    assert ownership_of(pod, job_uid="other-uid", epoch=3, hub_id=HUB) is Ownership.FOREIGN
    assert ownership_of(pod, job_uid=UID, epoch=3, hub_id="hub-us-1") is Ownership.FOREIGN
    assert ownership_of({"metadata": {"name": "someone-elses"}}, job_uid=UID, epoch=3, hub_id=HUB) is \
        Ownership.FOREIGN
    mangled = copy.deepcopy(pod)
    mangled["metadata"]["labels"]["federator.dev/epoch"] = "-1"
    assert ownership_of(mangled, job_uid=UID, epoch=3, hub_id=HUB) is Ownership.FOREIGN
    assert ownership_of("not an object", job_uid=UID, epoch=3, hub_id=HUB) is Ownership.FOREIGN  # type: ignore[arg-type]


# ---------------------------------------------------------------- names


def test_golden_names() -> None:
    assert podgroup_name(job_name="resnet-ps", job_uid=UID, epoch=3) == GOLDEN_GROUP
    assert pod_name(job_name="resnet-ps", job_uid=UID, role="worker", index=7) == GOLDEN_WORKER_7
    assert pod_name(job_name="j" * 63, job_uid=UID, role="r" * 63, index=9999) == \
        "jjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjj-q2qcxnwm-9999"
    assert podgroup_name(job_name="j" * 63, job_uid=UID, epoch=2**31 - 1) == \
        "jjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjj-mssxt-e2147483647"


def test_jobs_whose_plain_names_would_collide_get_different_names() -> None:
    # job "a-b" role "c" and job "a" role "b-c" would both be "a-b-c-0" without the uid token
    one = pod_name(job_name="a-b", job_uid="uid-1", role="c", index=0)
    two = pod_name(job_name="a", job_uid="uid-2", role="b-c", index=0)
    assert one != two
    # a job re-created under the same name gets new names (the old pods may still be terminating)
    assert pod_name(job_name="a", job_uid="uid-1", role="w", index=0) != \
        pod_name(job_name="a", job_uid="uid-3", role="w", index=0)


def test_names_near_the_limit_stay_valid_unique_and_keep_the_index() -> None:
    long_job = "j" + "-x" * 31  # 63 characters, the longest TrainingJob name
    roles = [{"name": "w" * 62 + c, "replicas": 12, "template": {"image": "x"}} for c in "ab"]
    roles.append({"name": "9", "replicas": 2, "template": {"image": "x"}})
    roles.append({"name": "a--b", "replicas": 1, "template": {"image": "x"}})
    job = make_job(name=long_job, uid=UID, roles=roles)
    objects = render("coscheduling", "scheduler-plugins-scheduler", job=job, epoch=MAX_EPOCH_FOR_TEST)
    names = [o.name for o in objects]
    assert len(set(names)) == len(names) == 1 + 1 + 12 + 12 + 2 + 1  # PodGroup, Service, pods
    for obj in objects:
        assert len(obj.name) <= MAX_NAME_LENGTH and DNS1123_LABEL.match(obj.name), obj.name
    pods = [o for o in objects if o.gvk == POD_GVK]
    assert all(p.name.endswith(f"-{p.labels['federator.dev/index']}") for p in pods)
    # the coscheduling group label value names the group, and is a valid (<= 63) label value
    assert {p.labels["scheduling.x-k8s.io/pod-group"] for p in pods} == {objects[0].name}


MAX_EPOCH_FOR_TEST = 2**31 - 1

dns_label = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z", fullmatch=True)


@settings(max_examples=150, deadline=None)
@given(job=dns_label, roles=st.lists(dns_label, min_size=1, max_size=4, unique=True),
       uid=st.uuids(), index=st.integers(0, MAX_GANG_PODS - 1), epoch=st.integers(0, 2**31 - 1))
def test_names_are_always_valid_labels_and_distinct(
    job: str, roles: list[str], uid: Any, index: int, epoch: int
) -> None:
    names = {pod_name(job_name=job, job_uid=str(uid), role=r, index=i) for r in roles for i in (0, index)}
    group = podgroup_name(job_name=job, job_uid=str(uid), epoch=epoch)
    names_count = len(roles) * len({0, index})
    assert len(names) == names_count and group not in names
    for name in names | {group}:
        assert len(name) <= MAX_NAME_LENGTH and DNS1123_LABEL.match(name), name
    assert pod_name(job_name=job, job_uid=str(uid), role=roles[0], index=index) == \
        pod_name(job_name=job, job_uid=str(uid), role=roles[0], index=index)


# ---------------------------------------------------------------- hostile input


def job_with(path: str, value: Any) -> dict[str, Any]:
    job = example_job()
    target: Any = job
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if isinstance(target, list):
        target[int(keys[-1])] = value
    else:
        target[keys[-1]] = value
    return job


@pytest.mark.parametrize(("job", "message"), [
    pytest.param(job_with("metadata.name", "j" * 64), "metadata.name", id="name-64-chars"),
    pytest.param(job_with("metadata.name", "Resnet"), "metadata.name", id="name-uppercase"),
    pytest.param(job_with("metadata.name", "a.b"), "metadata.name", id="name-with-dot"),
    pytest.param(job_with("spec.roles.0.name", "PS"), r"spec.roles\[0\].name", id="role-uppercase"),
    pytest.param(job_with("spec.roles.0.name", "p_s"), r"spec.roles\[0\].name", id="role-underscore"),
    pytest.param(job_with("spec.roles.0.name", "r" * 64), r"spec.roles\[0\].name", id="role-64-chars"),
    pytest.param(job_with("spec.roles.1.name", "ps"), "spec.roles", id="duplicate-role"),
    pytest.param(job_with("spec.roles.0.replicas", 0), r"spec.roles\[0\].replicas", id="zero-replicas"),
    pytest.param(job_with("spec.roles.0.replicas", MAX_GANG_PODS + 1), r"spec.roles\[0\].replicas",
                 id="huge-replicas"),
    pytest.param(job_with("spec.roles.0.replicas", 10**30), r"spec.roles\[0\].replicas", id="absurd-replicas"),
    pytest.param(job_with("spec.roles.0.replicas", "2"), r"spec.roles\[0\].replicas", id="replicas-string"),
    pytest.param(job_with("spec.roles.1.template.resources.cpu", "lots"), "cpu", id="bad-quantity"),
    pytest.param(job_with("spec.roles", []), "spec.roles", id="no-roles"),
    pytest.param(job_with("spec.roles.0.template.image", "a b"), "image", id="image-with-space"),
    pytest.param(job_with("metadata.uid", "a/b"), "metadata.uid", id="uid-not-a-label-value"),
    pytest.param(job_with("metadata.uid", None), "metadata.uid", id="no-uid"),
    pytest.param(job_with("metadata.namespace", None), "metadata.namespace", id="no-namespace"),
    pytest.param({"spec": "nope"}, "spec", id="spec-not-an-object"),
    pytest.param([], "JSON object", id="not-an-object"),
])
def test_bad_jobs_are_refused_naming_the_field(job: Any, message: str) -> None:
    for adapter in ADAPTERS.values():
        with pytest.raises(RenderError, match=message):
            adapter.render(job, cluster_scheduler_name=adapter.default_scheduler_name, epoch=3, hub_id=HUB,
                           namespace="team-a")


def test_total_pods_beyond_the_gang_limit_is_refused() -> None:
    per_role = MAX_GANG_PODS // 2 + 1
    job = make_job(uid=UID, roles=[{"name": r, "replicas": per_role, "template": {"image": "x"}} for r in "ab"])
    with pytest.raises(RenderError, match=f"spec.roles: .*{2 * per_role}.* at most {MAX_GANG_PODS} pods"):
        render("volcano", "volcano", job=job)


def test_the_largest_gang_renders_with_unique_valid_names() -> None:
    job = make_job(name="n" * 63, uid=UID, roles=[
        {"name": "worker", "replicas": MAX_GANG_PODS - 1, "template": {"image": "x", "resources": {"cpu": "1"}}},
        {"name": "chief", "replicas": 1, "template": {"image": "x"}}])
    objects = render("volcano", "volcano", job=job)
    assert objects[0].body["spec"]["minMember"] == MAX_GANG_PODS
    names = {o.name for o in objects}
    assert len(names) == MAX_GANG_PODS + 2  # PodGroup, Service, pods
    assert all(len(n) <= MAX_NAME_LENGTH and DNS1123_LABEL.match(n) for n in names)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"epoch": -1}, "epoch"),
    ({"epoch": 2**31}, "epoch"),
    ({"epoch": True}, "epoch"),
    ({"epoch": 1.0}, "epoch"),
    ({"hub_id": ""}, "hub id"),
    ({"hub_id": "hub/eu"}, "hub id"),
    ({"hub_id": "h" * 64}, "hub id"),
    ({"namespace": "Team"}, "member namespace"),
    ({"namespace": "n" * 64}, "member namespace"),
    ({"namespace": ""}, "member namespace"),
    ({"cluster_scheduler_name": ""}, "cluster_scheduler_name"),
    ({"cluster_scheduler_name": "Volcano Scheduler"}, "schedulerName"),
])
def test_bad_dispatch_parameters_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render("volcano", "volcano", **kwargs)


def test_gang_phases_are_the_job_lifecycle_names() -> None:
    assert [p.value for p in GangPhase] == ["Placed", "Admitted", "Running", "Succeeded", "Failed"]


def test_only_kai_pods_are_not_owned_by_their_podgroup() -> None:
    # KAI's pod-grouper re-groups a pod that has an owner under a PodGroup of its top owner (minMember 1)
    assert {name: a.pods_owned_by_group for name, a in ADAPTERS.items()} == {
        "volcano": True, "coscheduling": True, "kube-batch": True, "native": True, "kai": False, "default": False}


def test_native_and_kai_podgroups_have_no_min_resources_and_native_no_queue() -> None:
    native = render("native", "default-scheduler")
    assert native[0].body["spec"] == {"schedulingPolicy": {"gang": {"minCount": 10}}}
    assert all("pod-group-name" not in p.body["metadata"]["annotations"] for p in native[2:])
    kai = render("kai", "kai-scheduler")
    assert kai[0].body["spec"] == {"minMember": 10, "queue": "default-queue"}
    assert all(p.body["metadata"]["annotations"]["pod-group-name"] == GOLDEN_GROUP
               and p.labels["kai.scheduler/queue"] == "default-queue" and "schedulingGroup" not in p.body["spec"]
               for p in kai[2:])


# ---------------------------------------------------------------- priority and the chosen GPU model


@pytest.mark.parametrize(("spec", "name", "value"), [
    ({}, None, None),
    ({"priority": 0}, None, None),
    ({"priority": 100}, "federator-priority-100", 100),
    ({"priority": -5}, "federator-priority-minus-5", -5),
    ({"priority": 2**31 - 1}, "federator-priority-1000000000", 1_000_000_000),   # kube's cap for user classes
    pytest.param({"priority": 500, "priorityClassName": "research-high"}, "research-high", 500),
    pytest.param({"priority": 0, "priorityClassName": "batch"}, "batch", 0),
], ids=["none", "zero", "positive", "negative", "capped", "named", "named-zero"])
def test_the_member_priority_class_of_a_job(spec: dict[str, Any], name: str | None, value: int | None) -> None:
    found = member_priority_class(make_job(uid=UID, **spec))
    if name is None:
        assert found is None
        return
    assert found is not None
    assert (found.gvk, found.name, found.namespace) == (PRIORITY_CLASS_GVK, name, "")
    assert found.body == {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "federator"}},
        "value": value, "preemptionPolicy": "Never", "description": found.body["description"]}
    assert is_system_priority_class(name) is False


@pytest.mark.parametrize("bad", ["Bad_Class", "x" * 254, "-lead", 7])
def test_a_bad_priority_class_name_is_refused(bad: Any) -> None:
    with pytest.raises(RenderError, match="priorityClassName|cannot render"):
        member_priority_class(make_job(uid=UID, priority=1, priorityClassName=bad))
    with pytest.raises(RenderError, match="priority_class_name"):
        render("volcano", "volcano", priority_class_name=bad)


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_the_priority_class_goes_on_every_pod_and_the_podgroups_that_have_the_field(adapter: str) -> None:
    objects = render(adapter, "sched", priority_class_name="federator-priority-100")
    pods = [o for o in objects if o.gvk == POD_GVK]
    assert {p.body["spec"]["priorityClassName"] for p in pods} == {"federator-priority-100"}
    assert all("priority" not in p.body["spec"] for p in pods)  # the member's Priority admission resolves it
    groups = [o for o in objects if o.gvk not in (POD_GVK, SERVICE_GVK)]
    has_field = adapter in ("volcano", "kube-batch", "kai")
    assert [g.body["spec"].get("priorityClassName") for g in groups] == (
        ["federator-priority-100"] if has_field else [None] * len(groups))
    # without a class name nothing names one
    assert all("priorityClassName" not in o.body["spec"] for o in render(adapter, "sched"))


def test_gpu_pods_are_pinned_to_the_chosen_model_and_keep_their_node_hint() -> None:
    pin = {"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"]}
    objects = render("volcano", "volcano", gpu_node_labels=pin,
                     assignment=[PodAssignment(role="worker", index=3, node="gpu-1")])
    w3 = next(o for o in objects if o.name == "resnet-ps-mssxt-worker-3")
    assert w3.body["spec"]["affinity"]["nodeAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In",
             "values": ["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}}]}
    assert w3.body["spec"]["nodeSelector"] == {"federator.test/pool": "gpu"}   # the template's own, kept
    ps0 = next(o for o in objects if o.name == "resnet-ps-mssxt-ps-0")
    assert "affinity" not in ps0.body["spec"]   # no GPUs: not pinned
    assert render("volcano", "volcano", gpu_node_labels={})[1:] == render("volcano", "volcano")[1:]


def test_excluded_nodes_keep_every_pod_off_them_anded_with_the_gpu_pin() -> None:
    pin = {"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB"]}
    objects = render("volcano", "volcano", gpu_node_labels=pin, avoid_hostnames=["gpu-7", "gpu-3", "gpu-7"])
    avoid = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-3", "gpu-7"]}
    w0 = next(o for o in objects if o.name == "resnet-ps-mssxt-worker-0")
    assert w0.body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}, avoid]}]}
    # a pod without GPUs is kept off them too (the node is suspect, not only its GPUs)
    ps0 = next(o for o in objects if o.name == "resnet-ps-mssxt-ps-0")
    assert ps0.body["spec"]["affinity"]["nodeAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [avoid]}]}}
    # the template's own required terms are ORed: the exclusion is ANDed into each of them
    job = example_job()
    job["spec"]["roles"][0]["template"] = {"spec": {"containers": [{"name": "main", "image": "trainer:1.4"}],
                                                    "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}}}
    role = job["spec"]["roles"][0]["name"]
    pod = next(o for o in render("volcano", "volcano", job=job, avoid_hostnames=["gpu-3"])
               if o.kind == "Pod" and o.body["metadata"]["labels"]["federator.dev/role"] == role)
    terms = pod.body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert [t["matchExpressions"][-1] for t in terms] == [
        {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-3"]}] * 2
    assert render("volcano", "volcano", avoid_hostnames=[])[1:] == render("volcano", "volcano")[1:]


@pytest.mark.parametrize("bad", ["gpu-1", [""], [7], ["not a hostname!"], [f"n{i}" for i in range(257)]])
def test_bad_excluded_nodes_are_refused(bad: Any) -> None:
    with pytest.raises(RenderError, match="avoid_hostnames"):
        render("volcano", "volcano", avoid_hostnames=bad)


@pytest.mark.parametrize("bad", [
    {"nvidia.com/gpu.product": []},
    {"nvidia.com/gpu.product": "A100"},
    {"nvidia.com/gpu.product": ["A100 SXM"]},
    {"nvidia.com/gpu.product": [""]},
    {"nvidia.com/gpu.product": [7]},
    {"nvidia.com/gpu.product": [f"p{i}" for i in range(65)]},
    {"bad key!": ["A100"]},
    ["nvidia.com/gpu.product"],
])
def test_a_bad_gpu_pin_is_refused(bad: Any) -> None:
    with pytest.raises(RenderError, match="gpu_node_labels"):
        render("volcano", "volcano", gpu_node_labels=bad)


def _node(name: str, model: str, product: str | None, *, gpus: int = 8) -> NodeState:
    labels = {"kubernetes.io/hostname": name}
    if product is not None:
        labels["nvidia.com/gpu.product"] = product
    return NodeState(name=name, allocatable=Resources(cpu_milli=64_000, memory=2**39, gpu=gpus), gpu_model=model,
                     labels=labels)


TWO_MODELS = {n.name: n for n in (
    _node("a-40", "A100", "NVIDIA-A100-SXM4-40GB"), _node("a-80", "A100", "NVIDIA-A100-SXM4-80GB"),
    _node("h-1", "H100", "NVIDIA-H100-80GB-HBM3"), _node("h-unlabelled", "H100", None),
    _node("cpu-1", "", None, gpus=0))}


@pytest.mark.parametrize(("assignment", "spec", "expected"), [
    # the model of the nodes the GPU workers were assigned: every product of that model in the cluster
    ([PodAssignment("worker", 0, "a-40"), PodAssignment("ps", 0, "cpu-1")], {},
     ["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"]),
    ([PodAssignment("worker", 0, "h-1")], {"placement": {"gpuModels": ["A100", "H100"]}}, ["NVIDIA-H100-80GB-HBM3"]),
    # a CPU pod on a GPU node of another model does not widen the pin
    ([PodAssignment("worker", 0, "h-1"), PodAssignment("ps", 0, "a-80")], {}, ["NVIDIA-H100-80GB-HBM3"]),
    # no assignment (a re-dispatch after a restart): the job's own models
    ([], {"placement": {"gpuModels": ["A100"]}}, ["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"]),
    ([], {}, None),                                           # nothing known: no pin
    ([PodAssignment("worker", 0, "gone")], {}, None),         # a node the snapshot no longer has
    ([], {"placement": {"gpuModels": ["B200"]}}, None),       # a model the cluster does not have
], ids=["assigned-a100", "assigned-h100", "cpu-pod-elsewhere", "job-models", "unknown", "vanished-node",
        "absent-model"])
def test_the_gpu_pin_follows_the_model_placement_chose(assignment: list[PodAssignment], spec: dict[str, Any],
                                                       expected: list[str] | None) -> None:
    job = make_job(uid=UID, **spec)
    pin = gpu_node_labels(job, nodes=TWO_MODELS, assignment=assignment, label="nvidia.com/gpu.product")
    assert pin == ({"nvidia.com/gpu.product": expected} if expected else {})


def test_a_job_without_gpu_pods_is_never_pinned() -> None:
    job = make_job(uid=UID, roles=[{"name": "w", "replicas": 1,
                                    "template": {"image": "x", "resources": {"cpu": "1"}}}])
    assert gpu_node_labels(job, nodes=TWO_MODELS, assignment=[PodAssignment("w", 0, "a-40")],
                           label="nvidia.com/gpu.product") == {}
