"""Member-cluster sync end to end: several real SimClusters and a hub running `member_sync`.

Registration -> Ready with the right capacity; the snapshot follows churn and equals a fresh
LIST; a forced compaction (410) is survived by a re-list; an outage turns Reachable false and
keeps the first loss of contact; a hub restart resumes every watch without a LIST.
"""

from __future__ import annotations

import asyncio

from clustertest_support import (
    Hub,
    Sims,
    create_pod,
    describe_difference,
    expected_snapshot,
    profile,
    registration,
    running,
    same_state,
    wait_until,
)

from federator.apis.membercluster import OPERATOR_KINDS
from federator.clusters.client import JOB_KIND_RESOURCES
from federator.placement.snapshot import Fabric, Location


async def wait_in_sync(hub: Hub, sims: Sims, name: str, spec: dict, *, timeout: float = 15.0) -> None:
    sim = sims.clusters[name]

    async def check() -> bool:
        want = await expected_snapshot(sim, sims.kubeconfigs[name], spec)
        return same_state(hub.snapshot(name), want)

    try:
        await wait_until(check, timeout=timeout, what=f"{name} snapshot equal to a fresh LIST")
    except AssertionError:
        want = await expected_snapshot(sim, sims.kubeconfigs[name], spec)
        raise AssertionError(describe_difference(hub.snapshot(name), want)) from None


async def test_registration_reaches_ready_with_capacity(sims: Sims, tmp_path) -> None:
    await sims.start(profile("rdma-a100", scheduler="volcano", gpu_nodes=4, cpu_nodes=2))
    await sims.start(profile("eth-h100", scheduler="coscheduling", gpu_nodes=3, cpu_nodes=1,
                             product="H100-80GB-HBM3", fabric="ethernet", datasets=False))
    await sims.start(profile("plain", scheduler="default", gpu_nodes=2, cpu_nodes=0, product="Tesla-V100-SXM2-32GB",
                             fabric="ethernet", datasets=False))
    hub = await Hub.open("memory://")
    try:
        async with running(hub):
            specs = {
                "rdma-a100": registration("rdma-a100", sims.kubeconfigs["rdma-a100"]),
                "eth-h100": registration("eth-h100", sims.kubeconfigs["eth-h100"], scheduler="coscheduling",
                                         network="ethernet", location={"type": "cloud", "provider": "aws"}),
                "plain": registration("plain", sims.kubeconfigs["plain"], scheduler="default", network="ethernet"),
            }
            for body in specs.values():
                await hub.register(body)
            for name in specs:
                await hub.wait_condition(name, "Ready", "True")
            status = (await hub.get("rdma-a100"))["status"]
            assert status["capacity"] == {
                "nodes": 6, "readyNodes": 6, "totalGPUs": 32, "freeGPUs": 32,
                "gpusByModel": {"A100": {"total": 32, "free": 32}},
                "nodesByFabric": {"rdma": 4, "ethernet": 2},
            }
            assert status["datasetsSeen"] == ["imagenet-22k"]
            assert set(status["observedResourceVersions"]) == {"nodes", "pods", "podgroups.scheduling.volcano.sh"}
            assert "firstLossOfContact" not in status
            assert {c["type"]: c["status"] for c in status["conditions"]} == {
                "Reachable": "True", "Synced": "True", "Ready": "True", "Lost": "False"}
            h100 = (await hub.get("eth-h100"))["status"]
            assert h100["capacity"]["gpusByModel"] == {"H100": {"total": 24, "free": 24}}
            assert h100["capacity"]["nodesByFabric"] == {"ethernet": 4}
            assert set(h100["observedResourceVersions"]) == {"nodes", "pods", "podgroups.scheduling.x-k8s.io"}
            plain = (await hub.get("plain"))["status"]
            assert set(plain["observedResourceVersions"]) == {"nodes", "pods"}  # default scheduler: no PodGroups
            assert plain["capacity"]["gpusByModel"] == {"V100": {"total": 16, "free": 16}}

            snap = hub.snapshot("eth-h100")
            assert snap is not None and snap.info.healthy
            assert snap.info.location is Location.CLOUD and snap.info.fabric is Fabric.ETHERNET
            assert snap.info.provider == "aws" and dict(snap.info.labels) == {"tier": "research"}
            assert snap.index.free_gpu_by_model["H100"] == 24
            # one LIST per resource, never more
            assert sims.clusters["rdma-a100"].stats()["requests"]["list"] == {
                "nodes": 1, "pods": 1, "podgroups.scheduling.volcano.sh": 1}
            for name, body in specs.items():
                await wait_in_sync(hub, sims, name, body["spec"])
    finally:
        await hub.close()


async def test_spec_changes_update_info_and_deletion_stops_sync(sims: Sims) -> None:
    sim = await sims.start(profile("one", gpu_nodes=1, cpu_nodes=0))
    hub = await Hub.open("memory://")
    try:
        async with running(hub):
            await hub.register(registration("one", sims.kubeconfigs["one"]))
            await hub.wait_condition("one", "Ready", "True")
            await hub.storage.patch(hub.rt, namespace=None, name="one", patch={"spec": {"cordoned": True,
                                    "labels": {"tier": "batch"}}}, content_type="application/merge-patch+json")
            snap = await wait_until(lambda: (s := hub.snapshot("one")) is not None and s.info.cordoned and s,
                                    what="cordoned snapshot")
            assert dict(snap.info.labels) == {"tier": "batch"}
            await hub.storage.delete(hub.rt, namespace=None, name="one")
            await wait_until(lambda: hub.snapshot("one") is None, what="snapshot removed")
            await wait_until(lambda: sim.stats()["openWatches"] == 0, what="member watches closed")
            assert hub.controller.syncs == {}
            await wait_until(lambda: _no_checkpoint(hub, "one"), what="checkpoint removed")
    finally:
        await hub.close()


async def _no_checkpoint(hub: Hub, name: str) -> bool:
    result = await hub.store.range(hub.store.prefix + f"membersync/{name}/")
    return not result.kvs


async def test_pods_bound_and_finished_follow_into_the_snapshot(sims: Sims) -> None:
    sim = await sims.start(profile("churn", gpu_nodes=2, cpu_nodes=1))
    hub = await Hub.open("memory://")
    body = registration("churn", sims.kubeconfigs["churn"])
    try:
        async with running(hub):
            await hub.register(body)
            await hub.wait_condition("churn", "Ready", "True")
            await create_pod(sim, name="w0", node="gpu-0000", gpus=4, cpu="8", memory="64Gi", job="job-a",
                             restart="Always")
            await create_pod(sim, name="w1", node="gpu-0001", gpus=8, cpu="8", memory="64Gi", job="job-a",
                             duration=3)
            snap = await wait_until(lambda: (s := hub.snapshot("churn")) and s.bound_pods.get("job-a") == 2 and s,
                                    what="two bound pods of job-a")
            assert snap.nodes["gpu-0000"].free.gpu == 4
            # w1 finishes: its GPUs come back, job-a keeps one bound pod
            snap = await wait_until(lambda: (s := hub.snapshot("churn")) and s.bound_pods.get("job-a") == 1 and s,
                                    what="w1 finished")
            assert snap.nodes["gpu-0001"].free.gpu == 8
            assert snap.nodes["gpu-0000"].allocated.cpu_milli == 8000
            await wait_in_sync(hub, sims, "churn", body["spec"])
            status = await wait_until(lambda: _status_free(hub, "churn", 12), what="status shows 12 free GPUs")
            assert status["capacity"]["totalGPUs"] == 16
    finally:
        await hub.close()


async def _status_free(hub: Hub, name: str, free: int) -> dict | None:
    status = (await hub.get(name)).get("status") or {}
    return status if (status.get("capacity") or {}).get("freeGPUs") == free else None


async def test_forced_compaction_relists_and_converges(sims: Sims) -> None:
    sim = await sims.start(profile("compact", gpu_nodes=3, cpu_nodes=0))
    hub = await Hub.open("memory://")
    body = registration("compact", sims.kubeconfigs["compact"])
    try:
        async with running(hub):
            await hub.register(body)
            await hub.wait_condition("compact", "Ready", "True")
            await create_pod(sim, name="a", node="gpu-0000", gpus=2, restart="Always", job="j1")
            await create_pod(sim, name="b", node="gpu-0001", gpus=2, restart="Always", job="j1")
            await wait_in_sync(hub, sims, "compact", body["spec"])
            sync = hub.controller.syncs["compact"]
            lists_before = {k: r.lists for k, r in sync.reflectors.items()}
            # Changes the hub cannot see (watches dropped), then history compacted past them: 410 on re-watch.
            await sim.faults.force_compaction()
            await sim.storage.delete(__import__("federator.sim.kinds", fromlist=["PODS"]).PODS,
                                     namespace="default", name="a", grace_period_seconds=0)
            await sim.faults.gpu_unhealthy("gpu-0002", 3)
            await sim.faults.force_compaction()
            await wait_until(lambda: all(r.lists > lists_before[k] for k, r in sync.reflectors.items()),
                             what="every reflector re-listed after 410")
            await wait_in_sync(hub, sims, "compact", body["spec"])
            snap = hub.snapshot("compact")
            assert snap is not None and snap.bound_pods.get("j1") == 1
            assert snap.nodes["gpu-0002"].allocatable.gpu == 5
            await hub.wait_condition("compact", "Ready", "True")
            assert sim.list_count("pods") >= 2
    finally:
        await hub.close()


async def test_outage_turns_unreachable_and_keeps_first_loss(sims: Sims) -> None:
    sim = await sims.start(profile("flaky", gpu_nodes=1, cpu_nodes=0))
    hub = await Hub.open("memory://")
    body = registration("flaky", sims.kubeconfigs["flaky"])
    try:
        async with running(hub):
            await hub.register(body)
            await hub.wait_condition("flaky", "Ready", "True")
            await sim.faults.start_outage(30, mode="refuse")
            reach = await hub.wait_condition("flaky", "Reachable", "False")
            assert reach["reason"] in ("ProbeFailed", "WatchLost")
            first = (await hub.get("flaky"))["status"]["firstLossOfContact"]
            ready = await hub.condition("flaky", "Ready")
            assert ready is not None and ready["status"] == "False"
            snap = hub.snapshot("flaky")
            assert snap is not None and not snap.info.healthy
            # more failed probes and reconnects: the first loss stays where it was
            probes = hub.metrics.member_requests.labels(cluster="flaky", verb="probe", code="ClientConnectorError")
            seen = probes._value.get()
            await wait_until(lambda: probes._value.get() >= seen + 3, what="three more failed probes")
            await asyncio.sleep(0)  # let the status loop run once more
            status = await wait_until(lambda: _status_written_after(hub, "flaky", reach), what="a later status write")
            assert status["firstLossOfContact"] == first
            lists_before = sim.list_count("nodes")
            await sim.faults.end_outage()
            await hub.wait_condition("flaky", "Ready", "True")
            status = (await hub.get("flaky"))["status"]
            assert "firstLossOfContact" not in status
            assert sim.list_count("nodes") == lists_before  # resumed from the last resourceVersion
            await wait_in_sync(hub, sims, "flaky", body["spec"])
    finally:
        await hub.close()


async def _status_written_after(hub: Hub, name: str, reach: dict) -> dict | None:
    status = (await hub.get(name)).get("status") or {}
    # the probe-failure count in the message changes as failures accumulate
    conds = {c["type"]: c for c in status.get("conditions") or []}
    cond = conds.get("Reachable")
    if cond and cond["status"] == "False" and cond["message"] != reach["message"]:
        return status
    return None


def test_dataset_names_in_status_are_dns_subdomains() -> None:
    """datasetsSeen takes only what could be a dataset's name: a trailing newline is not one."""
    from federator.clusters.sync import _valid_dataset_name

    assert _valid_dataset_name("imagenet-22k") and _valid_dataset_name("c4.en")
    for bad in ("imagenet\n", "ImageNet", "x" * 254, "", "a..b"):
        assert not _valid_dataset_name(bad), bad


async def test_status_operators_is_what_the_members_discovery_serves(sims: Sims) -> None:
    """A member that serves none of the upstream job kinds (a simulator started without operators) shows every
    kind as "render" in status.operators, read once per sync start; spec.operators overrides it per kind."""
    await sims.start(profile("plain-ops", scheduler="volcano", gpu_nodes=1, cpu_nodes=0))
    hub = await Hub.open("memory://")
    try:
        async with running(hub):
            body = registration("plain-ops", sims.kubeconfigs["plain-ops"])
            body["spec"]["operators"] = {"Job.batch": "operator"}
            await hub.register(body)

            async def discovered() -> dict | None:
                return (await hub.get("plain-ops")).get("status", {}).get("operators")

            found = await wait_until(discovered, what="status.operators written")
            assert found == {key: "render" for key in OPERATOR_KINDS}
            sync = hub.controller.syncs["plain-ops"]
            assert sync.operator_mode("Job.batch") == "operator"  # the spec's override
            assert sync.operator_mode("PyTorchJob.kubeflow.org") == "render"
            # one discovery read per group/version of the kinds (kubeflow.org/v1 serves four of them)
            reads = sum(sample.value for metric in hub.ctx.metrics.member_requests.collect()
                        for sample in metric.samples if sample.name.endswith("_total")
                        and sample.labels.get("cluster") == "plain-ops" and sample.labels.get("verb") == "discovery")
            assert reads == len(set(JOB_KIND_RESOURCES[k].api_version for k in OPERATOR_KINDS))
    finally:
        await hub.close()
