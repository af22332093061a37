"""A gang's headless Service and framework env through the real pipeline: real SimClusters, a real hub with every
lifecycle controller. Dispatch creates the Service with the gang (the pods carry hostname, subdomain and the
framework's variables), and it goes with the gang: when the job is deleted, and when the GC collects an
orphaned gang (its job gone) or an older epoch's copy, only that gang's Service and ConfigMaps, never another
hub's or the live gang's."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from federator.clusters.client import PODS, ResourceKind
from federator.delegation import service_name
from federator.delegation.adapter import LABEL_EPOCH, LABEL_HUB, LABEL_JOB_NAME, LABEL_JOB_NAMESPACE, LABEL_JOB_UID
from federator.sim import kinds

from .jobtest_support import phase, placement_of, wait_until
from .lifecycle_support import Env, aimed_job, lifecycle_env

pytestmark = pytest.mark.slow
CLUSTER = "onprem-rdma-a100"
SERVICES = ResourceKind(group="", version="v1", plural="services", kind="Service", namespaced=True)
CONFIG_MAPS = ResourceKind(group="", version="v1", plural="configmaps", kind="ConfigMap", namespaced=True)


def mpi_job(name: str) -> dict[str, Any]:
    job = aimed_job(name, CLUSTER, ps=0, workers=2, gpus=1)
    job["spec"]["framework"] = "mpi"
    job["spec"]["frameworkSettings"] = {"slotsPerWorker": 1}
    job["spec"]["roles"].insert(0, {"name": "launcher", "replicas": 1,
                                    "template": {"image": "trainer:1.4", "resources": {"cpu": "1"}}})
    return job


async def live(env: Env, kind: ResourceKind, namespace: str) -> dict[str, dict[str, Any]]:
    client = await env.member(CLUSTER)
    items = (await client.list(kind, namespace=namespace)).items
    return {i["metadata"]["name"]: i for i in items if not i["metadata"].get("deletionTimestamp")}


def labels_of(uid: str, epoch: int, name: str) -> dict[str, str]:
    return {LABEL_HUB: "federator", LABEL_JOB_UID: uid, LABEL_EPOCH: str(epoch), LABEL_JOB_NAMESPACE: "team-a",
            LABEL_JOB_NAME: name}


async def test_the_service_and_hostfile_are_created_with_the_gang_and_go_with_its_deletion(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        created = await env.api.submit(mpi_job("allreduce"))
        uid = created["metadata"]["uid"]
        job = await env.api.wait_job("team-a", "allreduce", lambda j: phase(j) == "Running", what="running")
        epoch = placement_of(job)["epoch"]
        svc_name = service_name(job_name="allreduce", job_uid=uid)
        services = await live(env, SERVICES, "team-a")
        assert set(services) == {svc_name}
        svc = services[svc_name]
        assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
        assert svc["spec"]["selector"][LABEL_EPOCH] == str(epoch)
        maps = await live(env, CONFIG_MAPS, "team-a")
        assert list(maps) == [f"{svc_name}-config"]
        pods = [p for p in await env.live_pods(CLUSTER, uid) if not p["metadata"].get("deletionTimestamp")]
        assert len(pods) == 3
        for pod in pods:
            assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (pod["metadata"]["name"], svc_name)
            assert all(pod["metadata"]["labels"][k] == v for k, v in svc["spec"]["selector"].items())
        launcher = next(p for p in pods if p["metadata"]["labels"]["federator.dev/role"] == "launcher")
        hostfile = maps[f"{svc_name}-config"]["data"]["hostfile"]
        workers = sorted(p["metadata"]["name"] for p in pods if p is not launcher)
        assert hostfile == "".join(f"{w}.{svc_name}.team-a.svc slots=1\n" for w in workers)
        env_names = {e["name"] for e in launcher["spec"]["containers"][0]["env"]}
        assert {"OMPI_MCA_orte_default_hostfile", "K_MPI_JOB_ROLE", "FEDERATOR_EPOCH"} <= env_names

        await env.api.delete("team-a", "allreduce")

        async def all_gone() -> bool:
            return not await live(env, SERVICES, "team-a") and not await live(env, CONFIG_MAPS, "team-a")

        await wait_until(all_gone, timeout=20, what="the gang's Service and hostfile to be deleted")
        assert await env.fed.where(uid) == {}


async def test_the_gc_takes_an_orphaned_gangs_service_and_leaves_the_live_and_foreign_ones(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        created = await env.api.submit(aimed_job("live", CLUSTER))
        uid = created["metadata"]["uid"]
        job = await env.api.wait_job("team-a", "live", lambda j: phase(j) == "Running", what="running")
        epoch = placement_of(job)["epoch"]
        live_svc = service_name(job_name="live", job_uid=uid)
        client = await env.member(CLUSTER)
        ghost = str(uuid.uuid4())
        foreign = {**labels_of(str(uuid.uuid4()), 1, "theirs"), LABEL_HUB: "another-hub"}
        for name, labels in (("ghost", labels_of(ghost, 1, "ghost")), ("theirs", foreign)):
            # an orphaned gang: its pod (what the GC sees in its index) and its Service (which nothing watches)
            await client.create(PODS, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-0", "labels": labels},
                "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]}},
                namespace="team-a")
            await client.create(SERVICES, {
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{name}-svc", "labels": labels},
                "spec": {"clusterIP": "None", "selector": {LABEL_JOB_UID: labels[LABEL_JOB_UID]}}},
                namespace="team-a")

        async def ghost_gone() -> bool:
            return "ghost-svc" not in await live(env, SERVICES, "team-a")

        await wait_until(ghost_gone, timeout=20, what="the orphaned gang's Service to be collected")
        services = await live(env, SERVICES, "team-a")
        assert set(services) == {live_svc, "theirs-svc"}
        assert services[live_svc]["metadata"]["labels"][LABEL_EPOCH] == str(epoch)
        assert phase(await env.api.get("team-a", "live")) == "Running"
        # the simulator serves what kube does: the Service kept its own defaults
        stored = await env.fed.sims[CLUSTER].storage.get(kinds.SERVICES, namespace="team-a", name=live_svc)
        assert stored["spec"]["type"] == "ClusterIP" and stored["spec"]["clusterIP"] == "None"


async def test_a_pass_that_reads_the_member_takes_a_service_left_without_its_gang(tmp_path: Path) -> None:
    # a hub that died after deleting a gang's pods and before its Service: nothing indexes the Service, so the
    # GC pass that reads the member (the first after a (re)connection) finds it and has dispatch delete it
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        created = await env.api.submit(aimed_job("live", CLUSTER))
        uid = created["metadata"]["uid"]
        job = await env.api.wait_job("team-a", "live", lambda j: phase(j) == "Running", what="running")
        epoch = placement_of(job)["epoch"]
        assert epoch >= 1  # the first placement takes epoch 1
        live_svc = service_name(job_name="live", job_uid=uid)
        client = await env.member(CLUSTER)
        left = {"stale": labels_of(uid, epoch - 1, "live"), "ghost": labels_of(str(uuid.uuid4()), 1, "ghost"),
                "theirs": {**labels_of(str(uuid.uuid4()), 1, "theirs"), LABEL_HUB: "another-hub"}}
        for name, labels in left.items():
            await client.create(SERVICES, {
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{name}-svc", "labels": labels},
                "spec": {"clusterIP": "None", "selector": {LABEL_JOB_UID: labels[LABEL_JOB_UID]}}},
                namespace="team-a")
            await client.create(CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                              "metadata": {"name": f"{name}-config", "labels": labels},
                                              "data": {"hostfile": ""}}, namespace="team-a")
        collected = dict(env.gc.collected)
        await env.gc.collect(CLUSTER, listed=True)
        assert set(await live(env, SERVICES, "team-a")) == {live_svc, "theirs-svc"}
        assert set(await live(env, CONFIG_MAPS, "team-a")) == {"theirs-config"}
        assert env.gc.collected == collected  # the orphans counted are pods and PodGroups
        assert phase(await env.api.get("team-a", "live")) == "Running"
