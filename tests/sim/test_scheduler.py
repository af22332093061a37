"""The gang scheduler running in a real SimCluster (MemoryStore +
ObjectStorage + controllers), driven and observed in-process: gangs bound
all-or-nothing for each PodGroup kind, reasons for what does not fit,
PodGroup status, state rebuilt from the store on restart, and a property
test of arrivals and deletions against the running loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from federator.apiserver.errors import ApiError
from federator.sim import kinds
from federator.sim.fit import pod_requirements, resource_units
from federator.sim.profile import ClusterProfile, parse_profile
from federator.sim.scheduler import COSCHEDULING, KAI, KUBE_BATCH, NATIVE, VOLCANO, GroupKind
from federator.sim.server import SimCluster

GANG = {VOLCANO: "volcano", COSCHEDULING: "scheduler-plugins-scheduler", KUBE_BATCH: "kube-batch",
        NATIVE: "native-scheduler", KAI: "kai-scheduler"}
GROUP_RT = {VOLCANO: kinds.VOLCANO_PODGROUPS, COSCHEDULING: kinds.COSCHEDULING_PODGROUPS,
            KUBE_BATCH: kinds.KUBE_BATCH_PODGROUPS, NATIVE: kinds.NATIVE_PODGROUPS, KAI: kinds.KAI_PODGROUPS}
#: native runs as a second kube-scheduler profile here, beside the default scheduler
SCHEDULER_SPECS = {"native": {"type": "native", "schedulerName": "native-scheduler"}}


def profile(*, nodes: int = 4, gpus: int = 8, schedulers: list[str] | None = None, start_delay: float = 0.05,
            name: str = "test-sched") -> ClusterProfile:
    return parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
        "location": {"type": "on-prem", "region": "lab"},
        "network": {"fabric": "infiniband", "bandwidthGbps": 200},
        "schedulers": [SCHEDULER_SPECS.get(t, {"type": t}) for t in (
            schedulers or ["volcano", "coscheduling", "kube-batch", "native", "kai", "default"])],
        "kubelet": {"startDelaySeconds": start_delay, "terminationSeconds": 0.05},
        "nodePools": [{"name": "gpu", "count": nodes, "cpu": "64", "memory": "512Gi", "gpus": gpus,
                       "gpuProduct": "A100-SXM4-40GB", "rdmaHca": 4}],
    })


async def wait_for(what: str, check: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def pod(name: str, *, gpus: int = 0, cpu: str = "1", kind: GroupKind | None = None, group: str | None = None,
        scheduler: str | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team", "labels": {}, "annotations": dict(annotations or {})}
    requests = {"cpu": cpu, "memory": "1Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {
        "schedulerName": scheduler or (GANG[kind] if kind else "default-scheduler"), "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "trainer:1", "resources": {"requests": requests}}]}}
    if kind is not None and group is not None:
        kind.join(body, group)  # label, annotation or spec field (tests/sim/test_native_kai.py spells them out)
    return body


def podgroup(kind: GroupKind, name: str, min_member: int) -> dict[str, Any]:
    return {"apiVersion": f"{kind.group}/{kind.version}", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team"}, "spec": kind.group_spec(min_member)}


async def start(prof: ClusterProfile) -> SimCluster:
    cluster = SimCluster(prof)
    await cluster.start()
    await cluster.storage.create(kinds.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": "team"}}, namespace=None)
    return cluster


async def pods_of(cluster: SimCluster) -> list[dict[str, Any]]:
    return (await cluster.storage.list(kinds.PODS, namespace="team")).items


def bound(pods: list[dict[str, Any]], prefix: str = "") -> list[dict[str, Any]]:
    return [p for p in pods if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")]


def condition(p: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in p.get("status", {}).get("conditions") or [] if c["type"] == type_), None)


async def check_no_overcommit(cluster: SimCluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in (await cluster.storage.list(kinds.NODES)).items}
    used: dict[str, dict[str, int]] = {}
    for p in (await cluster.storage.list(kinds.PODS)).items:
        node = p["spec"].get("nodeName")
        if node and p["status"].get("phase") not in ("Succeeded", "Failed"):
            for r, u in pod_requirements(p).requests:
                used.setdefault(node, {})[r] = used.setdefault(node, {}).get(r, 0) + u
    for node, res in used.items():
        alloc = nodes[node]["status"]["allocatable"]
        for r, u in res.items():
            assert u <= resource_units(r, alloc.get(r, "0")), (node, r, u)


@pytest.mark.parametrize("kind", [VOLCANO, COSCHEDULING, KUBE_BATCH], ids=lambda k: k.scheduler_type)
async def test_gang_binds_whole_and_group_status_follows(kind: GroupKind) -> None:
    cluster = await start(profile())
    try:
        rt = GROUP_RT[kind]
        await cluster.storage.create(rt, podgroup(kind, "job", 6), namespace="team")
        for i in range(5):
            await cluster.storage.create(kinds.PODS, pod(f"job-{i}", gpus=4, kind=kind, group="job"),
                                         namespace="team")

        async def not_enough_tasks() -> bool:
            g = await cluster.storage.get(rt, namespace="team", name="job")
            if kind.has_conditions:
                conds = g.get("status", {}).get("conditions") or []
                return any(c["type"] == "Unschedulable" and c["reason"] == "NotEnoughTasks" for c in conds)
            return all(condition(p, "PodScheduled") for p in await pods_of(cluster))

        await wait_for("NotEnoughTasks", not_enough_tasks)
        assert bound(await pods_of(cluster)) == []
        await cluster.storage.create(kinds.PODS, pod("job-5", gpus=4, kind=kind, group="job"), namespace="team")

        async def all_running() -> bool:
            pods = await pods_of(cluster)
            return len(pods) == 6 and all(p["status"].get("phase") == "Running" for p in pods)

        await wait_for("the whole gang running", all_running)
        running_phase = {VOLCANO: "Running", COSCHEDULING: "Running", KUBE_BATCH: "Running"}[kind]

        async def group_running() -> dict[str, Any] | None:
            g = await cluster.storage.get(rt, namespace="team", name="job")
            st_ = g.get("status") or {}
            return st_ if st_.get("phase") == running_phase and st_.get("running") == 6 else None

        status = await wait_for("PodGroup Running with 6 running", group_running)
        if kind is VOLCANO:
            assert status["conditions"][0]["type"] == "Scheduled"
        pods = await pods_of(cluster)
        assert all(condition(p, "PodScheduled")["status"] == "True" for p in pods)  # type: ignore[index]
        await check_no_overcommit(cluster)
    finally:
        await cluster.stop()


async def test_unschedulable_gang_reports_then_binds_when_capacity_frees() -> None:
    cluster = await start(profile(nodes=2))
    try:
        # a filler occupies one node's GPUs
        await cluster.storage.create(kinds.PODS, pod("filler", gpus=8), namespace="team")
        await cluster.storage.create(kinds.VOLCANO_PODGROUPS, podgroup(VOLCANO, "big", 4), namespace="team")
        for i in range(4):
            await cluster.storage.create(kinds.PODS, pod(f"big-{i}", gpus=4, kind=VOLCANO, group="big"),
                                         namespace="team")

        async def reported() -> dict[str, Any] | None:
            p = await cluster.storage.get(kinds.PODS, namespace="team", name="big-0")
            c = condition(p, "PodScheduled")
            return c if c and c["status"] == "False" else None

        cond = await wait_for("PodScheduled=False on the gang", reported)
        assert cond["reason"] == "Unschedulable"
        assert "4/4 tasks in gang unschedulable" in cond["message"]
        assert cond["message"].endswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")

        async def event() -> list[dict[str, Any]]:
            evs = (await cluster.storage.list(kinds.EVENTS, namespace="team")).items
            return [e for e in evs if e["involvedObject"]["name"] == "big-0" and e["reason"] == "FailedScheduling"]

        (ev,) = await wait_for("a FailedScheduling event", event)
        assert ev["type"] == "Warning" and ev["source"]["component"] == "volcano"

        async def group_unschedulable() -> dict[str, Any] | None:
            g = await cluster.storage.get(kinds.VOLCANO_PODGROUPS, namespace="team", name="big")
            s = g.get("status") or {}
            conds = s.get("conditions") or []
            return s if s.get("phase") == "Pending" and conds and conds[0]["reason"] == "NotEnoughResources" \
                else None

        await wait_for("PodGroup Pending/NotEnoughResources", group_unschedulable)
        assert bound(await pods_of(cluster), "big-") == []
        await cluster.storage.delete(kinds.PODS, namespace="team", name="filler")

        async def gang_bound() -> bool:
            return len(bound(await pods_of(cluster), "big-")) == 4

        await wait_for("the gang bound after the filler left", gang_bound)
        await check_no_overcommit(cluster)
    finally:
        await cluster.stop()


async def test_default_scheduler_single_pods_and_fit_error_text() -> None:
    cluster = await start(profile(nodes=3, schedulers=["default"]))
    try:
        for i in range(3):
            await cluster.storage.create(kinds.PODS, pod(f"p{i}", gpus=8), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("too-big", gpus=16), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("foreign", scheduler="other-scheduler"), namespace="team")

        async def placed() -> bool:
            return len(bound(await pods_of(cluster), "p")) == 3

        await wait_for("three single pods bound", placed)
        nodes = {p["spec"]["nodeName"] for p in bound(await pods_of(cluster), "p")}
        assert len(nodes) == 3  # 8 GPUs each: one per node

        async def reason() -> str | None:
            c = condition(await cluster.storage.get(kinds.PODS, namespace="team", name="too-big"), "PodScheduled")
            return c["message"] if c else None

        assert await wait_for("a reason", reason) == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
        foreign = await cluster.storage.get(kinds.PODS, namespace="team", name="foreign")
        assert not foreign["spec"].get("nodeName") and condition(foreign, "PodScheduled") is None
    finally:
        await cluster.stop()


async def test_restart_rebuilds_usage_from_the_store() -> None:
    prof = profile(nodes=2, schedulers=["default"])
    cluster = SimCluster(prof, run_controllers=False)
    await cluster.start()
    try:
        await cluster.storage.create(kinds.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": "team"}}, namespace=None)
        # pods bound while no scheduler ran (by another scheduler, say)
        for i, node in enumerate(["gpu-0000", "gpu-0001"]):
            await cluster.storage.create(kinds.PODS, pod(f"old{i}", gpus=6), namespace="team")
            await kinds.bind_pod(cluster.storage, namespace="team", pod_name=f"old{i}",
                                 binding={"target": {"name": node}})
        await cluster.storage.create(kinds.PODS, pod("new", gpus=4), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("small", gpus=2), namespace="team")
        from federator.obs import get_logger
        from federator.sim.scheduler import run_gang_scheduler

        stop = asyncio.Event()
        task = asyncio.create_task(run_gang_scheduler(storage=cluster.storage, registry=cluster.registry,
                                                      cluster=prof, stop=stop, logger=get_logger("test")))
        try:
            async def small_bound() -> bool:
                p = await cluster.storage.get(kinds.PODS, namespace="team", name="small")
                return bool(p["spec"].get("nodeName"))

            await wait_for("the small pod bound", small_bound)

            async def new_reported() -> str | None:
                c = condition(await cluster.storage.get(kinds.PODS, namespace="team", name="new"), "PodScheduled")
                return c["message"] if c else None

            assert await wait_for("new unschedulable", new_reported) == \
                "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
            await check_no_overcommit(cluster)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
    finally:
        await cluster.stop()


async def test_bind_refused_for_a_pod_being_deleted() -> None:
    cluster = await start(profile(nodes=1, schedulers=["default"]))
    try:
        await cluster.storage.create(kinds.PODS, pod("p", gpus=1), namespace="team")

        async def is_bound() -> bool:
            return bool((await cluster.storage.get(kinds.PODS, namespace="team", name="p"))["spec"].get("nodeName"))

        await wait_for("bound", is_bound)
        with pytest.raises(ApiError) as err:
            await kinds.bind_pod(cluster.storage, namespace="team", pod_name="p",
                                 binding={"target": {"name": "gpu-0000"}})
        assert err.value.code == 409
    finally:
        await cluster.stop()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("gang"), st.sampled_from([VOLCANO, COSCHEDULING, KUBE_BATCH, NATIVE, KAI]),
                  st.integers(1, 4),
                  st.integers(0, 2), st.integers(1, 8)),
        st.tuples(st.just("single"), st.integers(0, 8)),
        st.tuples(st.just("delete"), st.integers(0, 10_000)),
        st.tuples(st.just("pause"), st.floats(0, 0.05)),
    ),
    min_size=1, max_size=14,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops)
def test_running_loop_never_splits_or_overcommits(ops: list[tuple[Any, ...]]) -> None:
    asyncio.run(_drive(ops))


async def _drive(ops: list[tuple[Any, ...]]) -> None:
    cluster = await start(profile(nodes=3, start_delay=0.02, name="prop"))
    disturbed: set[str] = set()
    groups: dict[str, tuple[GroupKind, int]] = {}
    try:
        names: list[str] = []
        for n, o in enumerate(ops):
            if o[0] == "gang":
                _, kind, min_member, extra, gpus = o
                g = f"g{n}"
                groups[g] = (kind, min_member)
                await cluster.storage.create(GROUP_RT[kind], podgroup(kind, g, min_member), namespace="team")
                for j in range(min_member + extra - 1 if n % 4 == 0 else min_member + extra):
                    await cluster.storage.create(kinds.PODS, pod(f"{g}-{j}", gpus=gpus, kind=kind, group=g),
                                                 namespace="team")
                    names.append(f"{g}-{j}")
            elif o[0] == "single":
                await cluster.storage.create(kinds.PODS, pod(f"s{n}", gpus=o[1]), namespace="team")
                names.append(f"s{n}")
            elif o[0] == "delete":
                if not names:
                    continue
                victim = names.pop(o[1] % len(names))
                # a gang that loses a member is disturbed even if that pod was not bound yet: the
                # scheduler may be writing the gang's binds right then (one pod at a time), and the bind
                # of the deleted pod fails after the others were written, as in a real cluster
                disturbed.add(victim.split("-")[0])
                await cluster.storage.delete(kinds.PODS, namespace="team", name=victim, grace_period_seconds=0)
            elif o[0] == "pause":
                await asyncio.sleep(o[1])
            await check_invariants(cluster, groups, disturbed)

        async def settled() -> bool:
            pods = await pods_of(cluster)
            return all(p["spec"].get("nodeName") or condition(p, "PodScheduled") or
                       any(p["metadata"]["name"].startswith(g + "-") for g in groups) for p in pods)

        await wait_for("every single pod bound or explained", settled)
        await check_invariants(cluster, groups, disturbed)
    finally:
        await cluster.stop()


async def check_invariants(cluster: SimCluster, groups: dict[str, tuple[GroupKind, int]],
                           disturbed: set[str]) -> None:
    await check_no_overcommit(cluster)

    async def split_gangs() -> list[tuple[str, int, int]]:
        pods = await pods_of(cluster)
        split = []
        for g, (kind, min_member) in groups.items():
            if g in disturbed:
                continue
            n = sum(1 for p in pods if kind.group_of(p) == g and p["spec"].get("nodeName"))
            if not (n == 0 or n >= min_member):
                split.append((g, n, min_member))
        return split

    # The scheduler writes a gang's binds one pod at a time (as kube-scheduler and Volcano do, one
    # binding call per pod), and this check runs in the same loop: it may look between two binds of one
    # gang. A gang that stays split once the binds are written is the failure.
    if await split_gangs():
        async def whole() -> bool:
            return not await split_gangs()

        try:
            await wait_for("every gang bound whole or not at all", whole, timeout=10.0)
        except AssertionError:
            raise AssertionError(f"gangs split (group, bound, minimum): {await split_gangs()}") from None
