"""Elastic gangs in delegation (issue 19): every adapter renders the size placement chose (status.replicas)
and gives its PodGroup the sum of the roles' minimums (minMember, the native API's minCount), minResources
being what that minimum requests; a fixed-size gang renders as before. Against the real member too: each gang
scheduler takes an elastic gang placed above its minimum and binds every placed pod."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from delegation_support import make_job, wait_until
from kubernetes import client
from simapi_support import ThreadedSim
from test_member import GPU_TOLERATION, ON_GPU_NODES, SCHEDULER_NAMES, Member

from federator.delegation import ADAPTERS, GangPhase, RenderError, adapter_for, selector_for
from federator.delegation.adapter import POD_GVK, MemberObject, SchedulerAdapter
from federator.placement.decision import PodAssignment

HUB = "hub-elastic"
GANG_ADAPTERS = sorted(name for name, adapter in ADAPTERS.items() if adapter.pod_group is not None)


def elastic_job(*, placed: dict[str, int] | None, low: int = 2, preferred: int = 4, high: int = 6) -> dict[str, Any]:
    """One fixed parameter server and an elastic worker role [low, high] preferring `preferred`; `placed` is
    the status.replicas the placement controller wrote with the decision (None: not recorded)."""
    job = make_job(roles=[
        {"name": "ps", "replicas": 1, "template": {"image": "trainer:1.4", "resources": {"cpu": "2", "memory": "4Gi"}}},
        {"name": "worker", "replicas": preferred, "minReplicas": low, "maxReplicas": high,
         "template": {"image": "trainer:1.4", "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 2}}},
    ])
    if placed is not None:
        job["status"]["replicas"] = placed
    return job


def render(adapter: SchedulerAdapter, job: dict[str, Any], **kwargs: Any) -> list[MemberObject]:
    return adapter.render(job, cluster_scheduler_name=SCHEDULER_NAMES[adapter.name], epoch=3, hub_id=HUB,
                          namespace="team-a", **kwargs)


def _dig(spec: dict[str, Any], dotted: str) -> Any:
    for key in dotted.split("."):
        spec = spec[key]
    return spec


def _pods(objects: list[MemberObject]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for obj in objects:
        if obj.gvk == POD_GVK:
            labels = obj.labels
            out.setdefault(labels["federator.dev/role"], []).append(int(labels["federator.dev/index"]))
    return out


def _env(obj: MemberObject) -> dict[str, str]:
    return {e["name"]: e["value"] for e in obj.body["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("name", sorted(ADAPTERS))
@pytest.mark.parametrize("workers", [2, 3, 6])
def test_an_elastic_gang_renders_its_placed_size_with_its_minimum(name: str, workers: int) -> None:
    adapter = adapter_for(name)
    objects = render(adapter, elastic_job(placed={"ps": 1, "worker": workers}))
    assert _pods(objects) == {"ps": [0], "worker": list(range(workers))}
    for obj in objects:
        assert obj.body["metadata"]["annotations"]["federator.dev/gang"] == f"ps=1,worker={workers}"
    worker = next(o for o in objects if o.labels.get("federator.dev/role") == "worker")
    assert (_env(worker)["FEDERATOR_ROLE_REPLICAS"], _env(worker)["FEDERATOR_GANG_SIZE"]) == (str(workers),
                                                                                               str(1 + workers))
    group = adapter.pod_group
    if group is None:
        assert all(o.gvk == POD_GVK for o in objects[1:]) and objects[0].kind == "Service"
        return
    spec = objects[0].body["spec"]
    assert objects[0].gvk == group.gvk
    assert _dig(spec, group.min_member_field) == 3  # ps 1 + worker minimum 2, whatever the placed size
    if group.has_min_resources:
        # what the minimum requests: 1 x (2 cpu, 4Gi) + 2 x (4 cpu, 16Gi, 2 GPUs)
        assert spec["minResources"] == {"cpu": "10", "memory": "36Gi", "nvidia.com/gpu": "4"}
    else:
        assert "minResources" not in spec


@pytest.mark.parametrize("name", GANG_ADAPTERS)
def test_a_fixed_gang_keeps_every_pod_as_its_minimum(name: str) -> None:
    adapter = adapter_for(name)
    assert adapter.pod_group is not None
    job = elastic_job(placed={"ps": 1, "worker": 4}, low=4, high=4)  # min = replicas = max
    objects = render(adapter, job)
    assert _dig(objects[0].body["spec"], adapter.pod_group.min_member_field) == 5
    assert _pods(objects) == {"ps": [0], "worker": [0, 1, 2, 3]}
    # without bounds at all, exactly as before elastic roles: the whole gang
    plain = make_job()
    objects = render(adapter, plain)
    assert _dig(objects[0].body["spec"], adapter.pod_group.min_member_field) == 10
    assert _pods(objects) == {"ps": [0, 1], "worker": list(range(8))}


@pytest.mark.parametrize("recorded", [
    None,                                   # not placed yet, or placed before status.replicas existed
    {"ps": 1, "worker": 7},                 # above maxReplicas
    {"ps": 1, "worker": 1},                 # below minReplicas
    {"ps": 2, "worker": 4},                 # a fixed role at another size
    {"worker": 5},                          # a role missing
    {"ps": 1, "worker": 5, "chief": 1},     # a role the spec does not have
    {"ps": 1, "worker": "5"},
])
def test_a_record_that_does_not_fit_the_spec_renders_the_preferred_size(recorded: Any) -> None:
    job = elastic_job(placed=recorded)
    assert _pods(render(adapter_for("volcano"), job)) == {"ps": [0], "worker": [0, 1, 2, 3]}


def test_a_restarted_hub_renders_the_same_objects_again() -> None:
    job = elastic_job(placed={"ps": 1, "worker": 5})
    first = render(adapter_for("kai"), job)
    # what a re-dispatch reads back from the store: the same job, later in its life
    again = copy.deepcopy(job)
    again["status"].update(phase="Placed", podCounts={"worker": {"pending": 5}})
    assert [o.body for o in render(adapter_for("kai"), again)] == [o.body for o in first]


def test_hints_must_name_pods_of_the_placed_size() -> None:
    job = elastic_job(placed={"ps": 1, "worker": 3})
    hints = [PodAssignment("worker", 2, "gpu-0001")]
    (pod,) = [o for o in render(adapter_for("volcano"), job, assignment=hints) if o.name.endswith("worker-2")]
    assert pod.body["metadata"]["annotations"]["federator.dev/node-hint"] == "gpu-0001"
    with pytest.raises(RenderError, match="names pod worker 3, which the job does not have"):
        render(adapter_for("volcano"), job, assignment=[PodAssignment("worker", 3, "gpu-0001")])


@pytest.mark.parametrize("name", GANG_ADAPTERS)
def test_the_member_binds_an_elastic_gang_placed_above_its_minimum(
    name: str, member: ThreadedSim, member_api: client.ApiClient,
) -> None:
    """Placed at 3 workers (minimum 1): the member's PodGroup says 2 (ps + 1 worker), every placed pod binds
    and runs, and the status reader expects the placed 4 pods."""
    adapter = adapter_for(name)
    ns = Member(member_api, member.new_namespace("elastic"))
    job = make_job(roles=[
        {"name": "ps", "replicas": 1,
         "template": {"image": "trainer:1.4", "resources": {"cpu": "1", "memory": "1Gi"},
                      "nodeSelector": {"federator.test/pool": "cpu"}}},
        {"name": "worker", "replicas": 2, "minReplicas": 1, "maxReplicas": 4,
         "template": {"image": "trainer:1.4", "resources": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1},
                      "nodeSelector": ON_GPU_NODES, "tolerations": GPU_TOLERATION}},
    ])
    job["status"]["replicas"] = {"ps": 1, "worker": 3}
    uid = job["metadata"]["uid"]
    try:
        objects = adapter.render(job, cluster_scheduler_name=SCHEDULER_NAMES[name], epoch=0, hub_id=HUB,
                                 namespace=ns.namespace)
        created = ns.dispatch(objects, owned=adapter.pods_owned_by_group)
        assert adapter.pod_group is not None
        assert _dig(created[0]["spec"], adapter.pod_group.min_member_field) == 2
        running = wait_until(f"{name} to run the elastic gang",
                             lambda: (s := ns.status(adapter, uid)).phase is GangPhase.RUNNING and s)
        assert running.expected == running.existing == running.bound == 4
        assert {role: c.running for role, c in running.counts.items()} == {"ps": 1, "worker": 3}
    finally:
        ns.delete_job(adapter, selector_for(uid))
