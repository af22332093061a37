"""The official asyncio client (`kubernetes.aio`) against a real SimCluster:
list, create, patch, watch with resume and 410, delete."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes.aio import client, config, watch
from kubernetes.aio.client.exceptions import ApiException
from simapi_support import ThreadedSim


@pytest.fixture
async def aio_api(sim_cluster: ThreadedSim) -> AsyncIterator[client.ApiClient]:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(sim_cluster.kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        yield api


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "main", "image": "trainer:1.4"}]}}


async def test_list_create_patch_delete(sim_cluster: ThreadedSim, aio_api: client.ApiClient) -> None:
    ns = sim_cluster.new_namespace("aio")
    v1 = client.CoreV1Api(aio_api)
    nodes = await v1.list_node()
    assert len(nodes.items) == 4 and nodes.metadata.resource_version.isdigit()
    created = await v1.create_namespaced_pod(ns, pod("a1"))
    assert created.status.phase == "Pending"
    patched = await v1.patch_namespaced_pod("a1", ns, {"metadata": {"labels": {"x": "y"}}})
    assert patched.metadata.labels == {"x": "y"}
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)
    listed = await v1.list_namespaced_pod(ns, field_selector="metadata.name=a1")
    assert [p.metadata.name for p in listed.items] == ["a1"]
    with pytest.raises(ApiException) as e:
        await v1.create_namespaced_pod(ns, pod("a1"))
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "AlreadyExists"
    await v1.delete_namespaced_pod("a1", ns)
    assert (await v1.list_namespaced_pod(ns)).items == []


async def test_watch_resume_and_expired(sim_cluster: ThreadedSim, aio_api: client.ApiClient) -> None:
    ns = sim_cluster.new_namespace("aio")
    v1 = client.CoreV1Api(aio_api)
    rv = (await v1.list_namespaced_pod(ns)).metadata.resource_version
    events: list[tuple[str, str, str]] = []
    w = watch.Watch()

    async def consume() -> None:
        async with w.stream(v1.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=10) as stream:
            async for ev in stream:
                events.append((ev["type"], ev["object"].metadata.name, ev["object"].metadata.resource_version))
                if len(events) == 2:
                    w.stop()

    task = asyncio.create_task(consume())
    await v1.create_namespaced_pod(ns, pod("a1"))
    await v1.create_namespaced_pod(ns, pod("a2"))
    await asyncio.wait_for(task, 15)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "a1"), ("ADDED", "a2")]
    # resume after the first event: only the second comes again
    resumed: list[str] = []
    w = watch.Watch()
    async with w.stream(v1.list_namespaced_pod, ns, resource_version=events[0][2], timeout_seconds=10) as stream:
        async for ev in stream:
            resumed.append(ev["object"].metadata.name)
            w.stop()
    assert resumed == ["a2"]

    async def compact() -> None:
        store = sim_cluster.c.store
        await store.put(store.prefix + "test/bump", b"1")
        await store.compact(await store.current_revision())

    await sim_cluster.arun(compact)
    with pytest.raises(ApiException) as e:
        async with watch.Watch().stream(v1.list_namespaced_pod, ns, resource_version=events[0][2],
                                        timeout_seconds=10) as stream:
            async for _ in stream:
                pytest.fail("no event may arrive from a compacted resourceVersion")
    assert e.value.status == 410


async def test_custom_objects(sim_cluster: ThreadedSim, aio_api: client.ApiClient) -> None:
    ns = sim_cluster.new_namespace("aio")
    co = client.CustomObjectsApi(aio_api)
    args = ("scheduling.x-k8s.io", "v1alpha1", ns, "podgroups")
    await co.create_namespaced_custom_object(*args, {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"},
        "spec": {"minMember": 2}})
    got = await co.patch_namespaced_custom_object(*args, "g", {"spec": {"minMember": 5}})
    assert got["spec"]["minMember"] == 5
    await co.delete_namespaced_custom_object(*args, "g")
    assert (await co.list_namespaced_custom_object(*args))["items"] == []
