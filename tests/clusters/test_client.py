"""MemberClient against a real SimCluster over HTTPS: paging, watch batches and bookmarks, typed 410
Expired (HTTP and ERROR event), API errors, timeouts, unreachable servers, silent watches, object
writes, and kubeconfig/connection errors that never repeat a credential."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from clustertest_support import Sims, create_pod, profile

from federator.clusters.client import (
    NODES,
    PODS,
    ClientTimeouts,
    Expired,
    KubeconfigError,
    MemberApiError,
    MemberClient,
    MemberUnreachable,
    podgroup_resource,
)
from federator.clusters.reflector import relist_difference


async def test_list_pages_and_watch_batches(sims: Sims) -> None:
    sim = await sims.start(profile("c", gpu_nodes=5, cpu_nodes=2))
    async with await MemberClient.from_kubeconfig(sims.kubeconfigs["c"], cluster="c") as client:
        page = await client.list(NODES, limit=3)
        assert len(page.items) == 3 and page.continue_token
        everything = await client.list_all(NODES, page_size=3)
        assert len(everything.items) == 7 and everything.resource_version == page.resource_version
        assert sim.list_count("nodes") == 1 + 3
        await create_pod(sim, name="w", node="gpu-0000", gpus=1)
        seen = []
        async for batch in client.watch_batches(PODS, resource_version=everything.resource_version,
                                                timeout_seconds=1):
            seen += [(e.type, (e.object.get("metadata") or {}).get("name")) for e in batch]
        assert ("ADDED", "w") in seen
        assert any(kind == "BOOKMARK" for kind, _ in seen)  # the sim sends bookmarks every 0.5 s
        groups = await client.list(podgroup_resource("volcano"))  # type: ignore[arg-type]
        assert groups.items == []


async def test_expired_is_typed_for_watches_and_continue_tokens(sims: Sims) -> None:
    sim = await sims.start(profile("c", gpu_nodes=3, cpu_nodes=0))
    async with await MemberClient.from_kubeconfig(sims.kubeconfigs["c"], cluster="c") as client:
        first = await client.list(NODES, limit=1)
        await sim.faults.force_compaction()
        with pytest.raises(Expired) as raised:
            async for _ in client.watch(NODES, resource_version=first.resource_version, timeout_seconds=2):
                pass
        assert raised.value.code == 410
        with pytest.raises(Expired):
            await client.list(NODES, limit=1, continue_token=first.continue_token)
        # list_all starts over on its own
        assert len((await client.list_all(NODES, page_size=1)).items) == 3


async def test_api_errors_and_object_writes(sims: Sims) -> None:
    sim = await sims.start(profile("c", gpu_nodes=1, cpu_nodes=0))
    async with await MemberClient.from_kubeconfig(sims.kubeconfigs["c"], cluster="c") as client:
        with pytest.raises(MemberApiError) as raised:
            await client.get(PODS, namespace="default", name="nope")
        assert raised.value.code == 404 and raised.value.reason == "NotFound"
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "labels": {"a": "1"}},
               "spec": {"containers": [{"name": "c", "image": "i"}], "schedulerName": "none"}}
        created = await client.create(PODS, pod, namespace="default")
        assert created["metadata"]["uid"]
        patched = await client.patch(PODS, namespace="default", name="x", patch={"metadata": {"labels": {"b": "2"}}})
        assert patched["metadata"]["labels"] == {"a": "1", "b": "2"}
        with pytest.raises(MemberApiError) as conflict:
            await client.create(PODS, pod, namespace="default")
        assert conflict.value.code == 409
        await client.delete(PODS, namespace="default", name="x", grace_period_seconds=0,
                            precondition_uid=created["metadata"]["uid"])
        with pytest.raises(MemberApiError):
            await client.get(PODS, namespace="default", name="x")
        with pytest.raises(ValueError):
            PODS.object_path(namespace="default", name="../secrets")
    bad = await MemberClient.from_connection(
        {"server": sim.url, "insecureSkipTLSVerify": True, "credentials": {"token": "not-the-token"}}, cluster="c")
    async with bad:
        with pytest.raises(MemberApiError) as raised:
            await bad.list(NODES)
        assert raised.value.code == 401
        assert "not-the-token" not in str(raised.value)


async def test_timeouts_and_unreachable_servers(sims: Sims) -> None:
    sim = await sims.start(profile("c", gpu_nodes=1, cpu_nodes=0))
    fast = ClientTimeouts(connect=1.0, request=0.3, probe=0.3, watch_idle=0.5)
    async with await MemberClient.from_kubeconfig(sims.kubeconfigs["c"], cluster="c", timeouts=fast) as client:
        await client.probe()
        sim.faults.set_latency(2.0)
        with pytest.raises(MemberUnreachable, match="timed out"):
            await client.list(NODES)
        sim.faults.clear_latency()
        listed = await client.list(NODES)
        # a partition: the watch stays open and goes silent; the idle limit ends it
        sim.faults.start_partition(30)
        with pytest.raises(MemberUnreachable):
            async for _ in client.watch_batches(NODES, resource_version=listed.resource_version, timeout_seconds=60):
                pass
        sim.faults.end_partition()
        await sim.stop()
        with pytest.raises(MemberUnreachable, match="Cannot connect|Connect") as refused:
            await client.probe()
        # the message reaches job status and history, which researchers read: it names the cluster only
        host_port = client.server.split("://", 1)[1]
        assert "cluster c:" in str(refused.value)
        assert host_port not in str(refused.value) and "127.0.0.1" not in str(refused.value), refused.value


async def test_connection_from_stored_credentials(sims: Sims) -> None:
    sim = await sims.start(profile("c", gpu_nodes=1, cpu_nodes=0))
    ca = base64.b64encode(sim.ca_pem).decode()
    client = await MemberClient.from_connection(
        {"server": sim.url, "certificateAuthorityData": ca, "credentials": {"token": sim.token}}, cluster="c")
    async with client:
        assert len((await client.list(NODES)).items) == 1
        assert sim.token not in repr(client) and client.server == sim.url
    # without the CA the server's certificate is not trusted
    untrusted = await MemberClient.from_connection({"server": sim.url, "credentials": {"token": sim.token}},
                                                   cluster="c")
    async with untrusted:
        with pytest.raises(MemberUnreachable) as raised:
            await untrusted.list(NODES)
        assert sim.token not in str(raised.value)


async def test_kubeconfig_errors_name_the_file_never_the_token(tmp_path: Path) -> None:
    token = "s3cr3t-token-value-abcdef"
    with pytest.raises(KubeconfigError, match="cannot read"):
        await MemberClient.from_kubeconfig(tmp_path / "missing", cluster="c")
    broken = tmp_path / "broken"
    broken.write_text(f"users:\n- name: u\n  user: {{token: {token}\n")
    with pytest.raises(KubeconfigError) as raised:
        await MemberClient.from_kubeconfig(broken, cluster="c")
    assert "not valid YAML" in str(raised.value) and token not in str(raised.value)
    no_context = tmp_path / "no-context"
    no_context.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        f"users: [{{name: u, user: {{token: {token}}}}}]\n"
        "contexts: [{name: ctx, context: {cluster: k, user: u}}]\ncurrent-context: ctx\n")
    with pytest.raises(KubeconfigError) as raised:
        await MemberClient.from_kubeconfig(no_context, cluster="c", context="other")
    assert token not in str(raised.value)
    with pytest.raises(KubeconfigError, match="user information"):
        await MemberClient.from_connection(
            {"server": "https://admin:pw@127.0.0.1:1", "credentials": {"token": token}}, cluster="c")
    with pytest.raises(KubeconfigError, match="neither"):
        await MemberClient.from_connection({}, cluster="c")
    with pytest.raises(KubeconfigError):
        await MemberClient.from_connection(
            {"server": "https://127.0.0.1:1", "certificateAuthorityData": base64.b64encode(b"junk").decode(),
             "credentials": {"token": token}}, cluster="c")


def test_relist_difference() -> None:
    items = [{"metadata": {"name": "a", "namespace": "n", "resourceVersion": "5"}},
             {"metadata": {"name": "b", "namespace": "n", "resourceVersion": "7"}},
             {"metadata": {"name": "c", "namespace": "n", "resourceVersion": "2"}}]
    known = {"n/a": "5", "n/b": "6", "n/gone": "3"}
    events = relist_difference(items, known, resource_version="9")
    assert [(t, o["metadata"]["name"]) for t, o in events] == [("MODIFIED", "b"), ("ADDED", "c"), ("DELETED", "gone")]
    assert events[-1][1]["metadata"] == {"name": "gone", "namespace": "n", "resourceVersion": "9"}
