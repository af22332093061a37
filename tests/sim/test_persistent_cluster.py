"""A simulated cluster that survives a restart (`start_sim_cluster(..., directory=DIR)`, what `federator up`
and `federator sim` run unless --sim-ephemeral): its objects in DIR/<cluster>.db (the sqlite store), nodes
not duplicated, pods the same objects in the same phase, the kubelet taking up their timers, resourceVersions
going on (a watch from before the restart resumes; one from before a compaction gets 410), the port and
tokens of the last run, one process per directory, and --sim-ephemeral as it was."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from simapi_support import make_test_profile, wait_for

from federator.apiserver.errors import ApiError
from federator.cli import build_parser
from federator.sim import kinds
from federator.sim.server import SimCluster, start_sim_cluster, store_path
from federator.store.protocol import StoreUnavailable

PROFILE = make_test_profile(name="persist")


def pod(name: str, **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer:1.4"}]}}


async def phase_of(cluster: SimCluster, name: str, namespace: str = "default") -> str:
    obj = await cluster.storage.get(kinds.PODS, namespace=namespace, name=name)
    return str((obj.get("status") or {}).get("phase") or "")


async def reached(cluster: SimCluster, name: str, phase: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        obj = await cluster.storage.get(kinds.PODS, namespace="default", name=name)
        return obj if (obj.get("status") or {}).get("phase") == phase else None

    found: dict[str, Any] = await wait_for(f"pod {name} {phase}", check)
    return found


@pytest.fixture
async def started(tmp_path: Path) -> AsyncIterator[list[SimCluster]]:
    """Clusters a test starts (the list it appends to); each is stopped at the end."""
    running: list[SimCluster] = []
    try:
        yield running
    finally:
        for cluster in running:
            await cluster.stop()


async def start(directory: Path | None, running: list[SimCluster], **kw: Any) -> SimCluster:
    cluster = await start_sim_cluster(PROFILE, directory=directory, **kw)
    running.append(cluster)
    if directory is not None:
        cluster.write_kubeconfig(directory / f"{PROFILE.name}.kubeconfig")
        cluster.write_agent_kubeconfig(directory / f"{PROFILE.name}-agent.kubeconfig")
    return cluster


async def stop(cluster: SimCluster, running: list[SimCluster]) -> None:
    running.remove(cluster)
    await cluster.stop()


async def test_a_restarted_cluster_is_the_same_cluster(tmp_path: Path, started: list[SimCluster]) -> None:
    first = await start(tmp_path, started)
    nodes = {n["metadata"]["name"]: n["metadata"]["uid"] for n in (await first.storage.list(kinds.NODES)).items}
    assert len(nodes) == PROFILE.node_count
    await first.storage.create(kinds.PODS, pod("long"), namespace="default")
    await first.storage.create(kinds.PODS, pod("short", **{"sim.federator.dev/duration-seconds": "2"}),
                               namespace="default")
    running = await reached(first, "long", "Running")
    await reached(first, "short", "Running")
    await first.storage.create(kinds.PODS, pod("late", **{"sim.federator.dev/start-delay-seconds": "3600"}),
                               namespace="default")
    late = await wait_for("pod late bound", lambda: _bound(first, "late"))
    before = (await first.storage.list(kinds.PODS)).resource_version
    port, token, agent_token = first.port, first.token, first.agent_token
    await stop(first, started)
    assert store_path(tmp_path, PROFILE).is_file()

    second = await start(tmp_path, started)
    # the same nodes (none added twice), the same pods (uids), the same phases
    assert {n["metadata"]["name"]: n["metadata"]["uid"] for n in (await second.storage.list(kinds.NODES)).items} \
        == nodes
    again = await second.storage.get(kinds.PODS, namespace="default", name="long")
    assert again["metadata"]["uid"] == running["metadata"]["uid"]
    assert again["status"]["phase"] == "Running" and again["status"]["startTime"] == running["status"]["startTime"]
    assert (await second.storage.get(kinds.PODS, namespace="default", name="late"))["spec"]["nodeName"] == \
        late["spec"]["nodeName"]
    # resourceVersions go on from where they were
    assert int((await second.storage.list(kinds.PODS)).resource_version) >= int(before)
    # the same port and tokens: clients and a hub that kept running reconnect as to a restarted apiserver
    assert (second.port, second.token, second.agent_token) == (port, token, agent_token)
    # the kubelet takes up the timers: the short pod finishes after its duration, counted from its start
    done = await reached(second, "short", "Succeeded")
    term = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert _seconds(term["finishedAt"]) - _seconds(term["startedAt"]) >= 1   # whole-second stamps of a 2 s run
    assert await phase_of(second, "long") == "Running"
    # and the cluster still works: a new pod runs
    await second.storage.create(kinds.PODS, pod("new"), namespace="default")
    await reached(second, "new", "Running")


async def _bound(cluster: SimCluster, name: str) -> dict[str, Any] | None:
    obj = await cluster.storage.get(kinds.PODS, namespace="default", name=name)
    return obj if (obj.get("spec") or {}).get("nodeName") else None


def _seconds(stamp: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def test_watches_resume_across_a_restart_or_get_410(tmp_path: Path, started: list[SimCluster]) -> None:
    first = await start(tmp_path, started)
    await first.storage.create(kinds.PODS, pod("a"), namespace="default")
    resume_from = (await first.storage.list(kinds.PODS, namespace="default")).resource_version
    await stop(first, started)

    second = await start(tmp_path, started)
    await second.storage.create(kinds.PODS, pod("b"), namespace="default")
    stop_watch = asyncio.Event()
    seen: list[tuple[str, str]] = []

    async def watch() -> None:
        async for event in second.storage.watch(kinds.PODS, namespace="default", resource_version=resume_from,
                                                stop=stop_watch):
            seen.append((event.type, event.object["metadata"]["name"]))
            if (event.type, event.object["metadata"]["name"]) == ("ADDED", "b"):
                return

    await asyncio.wait_for(watch(), 20)
    assert ("ADDED", "b") in seen and ("ADDED", "a") not in seen   # what happened since, nothing before
    stop_watch.set()

    await second.faults.force_compaction()
    with pytest.raises(ApiError) as e:
        async for _ in second.storage.watch(kinds.PODS, namespace="default", resource_version=resume_from):
            break
    assert e.value.code == 410


async def test_one_process_per_directory_and_a_taken_port(tmp_path: Path, started: list[SimCluster]) -> None:
    first = await start(tmp_path, started)
    with pytest.raises(StoreUnavailable) as e:
        await start_sim_cluster(PROFILE, directory=tmp_path)
    assert str(store_path(tmp_path, PROFILE)) in str(e.value)
    port = first.port
    await stop(first, started)
    # the last run's port is taken by something else now: the cluster comes back on another one
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        second = await start(tmp_path, started)
        assert second.port != port
        assert len((await second.storage.list(kinds.NODES)).items) == PROFILE.node_count
    # an explicit port that is taken is an error, and leaves the file free for the next start
    await stop(second, started)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        with pytest.raises(OSError):
            await start_sim_cluster(PROFILE, directory=tmp_path, port=squatter.getsockname()[1])
    await start(tmp_path, started)


async def test_ephemeral_clusters_keep_nothing(tmp_path: Path, started: list[SimCluster]) -> None:
    first = await start(None, started)
    await first.storage.create(kinds.PODS, pod("gone"), namespace="default")
    await stop(first, started)
    second = await start(None, started)
    assert (await second.storage.list(kinds.PODS, namespace="default")).items == []
    assert list(tmp_path.iterdir()) == []


def test_both_commands_take_sim_ephemeral() -> None:
    parser = build_parser()
    assert parser.parse_args(["up", "--sim-ephemeral"]).sim_ephemeral is True
    assert parser.parse_args(["up"]).sim_ephemeral is False
    assert parser.parse_args(["sim", "--profile", "x", "--sim-ephemeral"]).sim_ephemeral is True
    assert parser.parse_args(["sim", "--profile", "x"]).sim_ephemeral is False


async def test_federator_sim_serves_the_same_clusters_again(tmp_path: Path) -> None:
    from federator.cli.sim import serve

    async def run(body: Any) -> None:
        ready, stop_event = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(serve([PROFILE], state_dir=tmp_path, port_base=None, ready=ready,
                                         stop=stop_event, ephemeral=False))
        await asyncio.wait_for(ready.wait(), 30)
        try:
            await body()
        finally:
            stop_event.set()
            assert await asyncio.wait_for(task, 30) == 0

    from federator.clusters.client import PODS, MemberClient

    kubeconfig = tmp_path / f"{PROFILE.name}.kubeconfig"

    async def create() -> None:
        async with await MemberClient.from_kubeconfig(kubeconfig, cluster=PROFILE.name) as client:
            await client.create(PODS, pod("kept"), namespace="default")

    uid: list[str] = []

    async def check() -> None:
        async with await MemberClient.from_kubeconfig(kubeconfig, cluster=PROFILE.name) as client:
            uid.append((await client.get(PODS, namespace="default", name="kept"))["metadata"]["uid"])

    await run(create)
    await run(check)
    assert uid and store_path(tmp_path, PROFILE).is_file()
