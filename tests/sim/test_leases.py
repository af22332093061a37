"""The Lease kind (coordination.k8s.io/v1) of a real SimCluster, over HTTPS with its kubeconfig:
the official client (create, get, replace, watch, kube's validation as 422), real kubectl (apply,
get, get -w, describe node without "Failed to get lease", errors), and the node Leases the
simulated kubelets keep (one per node, owned by the Node, renewed; a dead kubelet's goes stale)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from simapi_support import ThreadedSim, make_test_profile, raw_request

from federator.sim import kinds
from federator.sim.kubelet import fail_node, recover_node
from federator.sim.nodelease import (
    NODE_LEASE_NAMESPACE,
    NodeLeases,
    NodeState,
    lease_slot,
)
from federator.sim.server import SimCluster

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
needs_kubectl = pytest.mark.skipif(not os.path.exists(KUBECTL), reason=f"kubectl not found at {KUBECTL}")


@pytest.fixture(scope="module")
def coordination(sim_cluster: ThreadedSim) -> Iterator[client.CoordinationV1Api]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim_cluster.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        yield client.CoordinationV1Api(api)


def micro(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": spec}


def wait_until(what: str, check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


# ---------------------------------------------------------------- the official client


def test_create_get_replace_and_watch_a_lease(sim_cluster: ThreadedSim,
                                              coordination: client.CoordinationV1Api) -> None:
    ns = sim_cluster.new_namespace("lease")
    acquired = dt.datetime(2025, 3, 1, 12, 0, 0, 250_000, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    created = coordination.create_namespaced_lease(ns, client.V1Lease(
        metadata=client.V1ObjectMeta(name="hub-a"),
        spec=client.V1LeaseSpec(holder_identity="hub-a", lease_duration_seconds=3, acquire_time=acquired,
                                renew_time=acquired, lease_transitions=0)))
    assert created.spec.holder_identity == "hub-a" and created.spec.lease_duration_seconds == 3
    assert created.spec.renew_time == acquired  # the same instant...
    raw = raw_request(sim_cluster, "GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/hub-a")[1]
    assert raw["spec"]["acquireTime"] == "2025-03-01T10:00:00.250000Z"  # ...served in UTC, as kube does
    rv = created.metadata.resource_version

    w = watch.Watch()
    events = w.stream(coordination.list_namespaced_lease, ns, resource_version=rv, timeout_seconds=20)
    created.spec.renew_time = acquired + dt.timedelta(seconds=1, microseconds=1)
    replaced = coordination.replace_namespaced_lease("hub-a", ns, created)
    assert replaced.metadata.resource_version != rv
    event = next(events)
    events.close()  # ends the stream and closes its connection
    assert event["type"] == "MODIFIED" and event["object"].metadata.name == "hub-a"
    assert event["object"].spec.renew_time == acquired + dt.timedelta(seconds=1, microseconds=1)
    # a stale resourceVersion conflicts, like any kind
    with pytest.raises(ApiException) as e:
        coordination.replace_namespaced_lease("hub-a", ns, created)
    assert e.value.status == 409
    listed = coordination.list_namespaced_lease(ns)
    assert [item.metadata.name for item in listed.items] == ["hub-a"]


@pytest.mark.parametrize(("spec", "field", "detail"), [
    ({"leaseDurationSeconds": 0}, "spec.leaseDurationSeconds", "must be greater than 0"),
    ({"leaseDurationSeconds": -5}, "spec.leaseDurationSeconds", "must be greater than 0"),
    ({"leaseDurationSeconds": 1.5}, "spec.leaseDurationSeconds", "integer"),
    ({"leaseTransitions": -1}, "spec.leaseTransitions", "must be greater than or equal to 0"),
    ({"holderIdentity": 7}, "spec.holderIdentity", "string"),
    ({"renewTime": "2025-03-01T10:00:00Z"}, "spec.renewTime", "2006-01-02T15:04:05.000000Z07:00"),
    ({"renewTime": "2025-03-01T10:00:00.123Z"}, "spec.renewTime", "six fraction digits"),
    ({"acquireTime": "2025-02-30T10:00:00.000000Z"}, "spec.acquireTime", "MicroTime"),
    ({"renewTime": 1700000000}, "spec.renewTime", "string"),
    ({"preferredHolder": "b"}, "spec.preferredHolder", "may only be specified if `strategy` is defined"),
    ({"strategy": "Newest"}, "spec.strategy", "Unsupported value"),
    ({"strategy": "example.com/mine\n"}, "spec.strategy", "name part must consist of alphanumeric characters"),
    ({"strategy": "a/b/c"}, "spec.strategy", "a qualified name must consist"),
    ({"renewTime": "2025-03-01T10:00:00.000000Z\n"}, "spec.renewTime", "MicroTime"),
])
def test_invalid_leases_are_422_and_change_nothing(sim_cluster: ThreadedSim, spec: dict[str, Any], field: str,
                                                   detail: str) -> None:
    ns = sim_cluster.new_namespace("lease")
    code, body = raw_request(sim_cluster, "POST", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                             json.dumps(lease_body("bad", **{"holderIdentity": "x", **spec})).encode())
    assert code == 422, body
    assert body["kind"] == "Status" and body["reason"] == "Invalid"
    assert body["details"]["kind"] == "Lease" and body["details"]["group"] == "coordination.k8s.io"
    causes = body["details"]["causes"]
    assert any(c["field"] == field and detail in c["message"] for c in causes), causes
    code, listing = raw_request(sim_cluster, "GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases")
    assert code == 200 and listing["items"] == []


def test_a_valid_update_then_an_invalid_one(sim_cluster: ThreadedSim) -> None:
    ns = sim_cluster.new_namespace("lease")
    path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    code, made = raw_request(sim_cluster, "POST", path, json.dumps(lease_body(
        "ok", holderIdentity="a", leaseDurationSeconds=2, strategy="example.com/mine",
        preferredHolder="b", renewTime=micro(dt.datetime.now(dt.UTC)))).encode())
    assert code == 201, made
    made["spec"]["leaseDurationSeconds"] = 0
    code, body = raw_request(sim_cluster, "PUT", f"{path}/ok", json.dumps(made).encode())
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec.leaseDurationSeconds"
    code, body = raw_request(sim_cluster, "PATCH", f"{path}/ok", b'{"spec": {"renewTime": "yesterday"}}',
                             content_type="application/merge-patch+json")
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec.renewTime"
    code, kept = raw_request(sim_cluster, "GET", f"{path}/ok")
    assert kept["spec"]["leaseDurationSeconds"] == 2 and kept["metadata"]["resourceVersion"] == \
        made["metadata"]["resourceVersion"]


def test_discovery_serves_leases(sim_cluster: ThreadedSim) -> None:
    code, group = raw_request(sim_cluster, "GET", "/apis/coordination.k8s.io/v1")
    assert code == 200
    leases = next(r for r in group["resources"] if r["name"] == "leases")
    assert leases["kind"] == "Lease" and leases["namespaced"] is True
    assert set(leases["verbs"]) >= {"create", "get", "list", "watch", "update", "patch", "delete"}


# ---------------------------------------------------------------- kubectl


class Kubectl:
    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "KUBECONFIG": str(kubeconfig)}
        self.home = home

    def argv(self, *args: str) -> list[str]:
        return [KUBECTL, "--cache-dir", str(self.home / "cache"), "--request-timeout=20s", *args]

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc


@pytest.fixture(scope="module")
def kubectl(sim_cluster: ThreadedSim, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return Kubectl(sim_cluster.kubeconfig, tmp_path_factory.mktemp("kubectl-home"))


@needs_kubectl
@pytest.mark.kubectl
def test_kubectl_apply_get_watch_and_errors(sim_cluster: ThreadedSim, kubectl: Kubectl, tmp_path: Path) -> None:
    ns = sim_cluster.new_namespace("kc-lease")
    manifest = tmp_path / "lease.yaml"
    manifest.write_text(f"""\
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {{name: federator, namespace: {ns}}}
spec: {{holderIdentity: federator, leaseDurationSeconds: 15, renewTime: "2025-03-01T10:00:00.000001Z"}}
""")
    assert kubectl("apply", "-f", str(manifest)).stdout.strip() == "lease.coordination.k8s.io/federator created"
    rows = [line.split() for line in kubectl("get", "leases", "-n", ns).stdout.splitlines()]
    assert rows[0] == ["NAME", "HOLDER", "AGE"] and rows[1][:2] == ["federator", "federator"]
    proc = subprocess.Popen(kubectl.argv("get", "lease", "federator", "-n", ns, "-w", "-o",
                                         "jsonpath={.spec.renewTime}{\"\\n\"}"),
                            env=kubectl.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "2025-03-01T10:00:00.000001Z"
        kubectl("patch", "lease", "federator", "-n", ns, "--type=merge", "-p",
                '{"spec": {"renewTime": "2025-03-01T10:00:05.000002Z"}}')
        assert proc.stdout.readline().strip() == "2025-03-01T10:00:05.000002Z"
    finally:
        proc.kill()
        proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()
    bad = tmp_path / "bad.yaml"
    bad.write_text(manifest.read_text().replace("leaseDurationSeconds: 15", "leaseDurationSeconds: 0"))
    done = kubectl("apply", "-f", str(bad), check=False)
    assert done.returncode != 0
    assert done.stderr.strip() == ('The Lease "federator" is invalid: spec.leaseDurationSeconds: Invalid value: 0: '
                                   "must be greater than 0")
    assert kubectl("get", "lease", "federator", "-n", ns, "-o",
                   "jsonpath={.spec.leaseDurationSeconds}").stdout == "15"
    out = kubectl("explain", "lease.spec.renewTime").stdout
    assert "renewTime" in out and "KIND:       Lease" in out


@needs_kubectl
@pytest.mark.kubectl
def test_kubectl_describe_node_shows_its_lease(sim_cluster: ThreadedSim, kubectl: Kubectl) -> None:
    node = "gpu-0000"
    wait_until("the node's lease", lambda: kubectl("get", "lease", node, "-n", NODE_LEASE_NAMESPACE,
                                                   check=False).returncode == 0)
    done = kubectl("describe", "node", node)
    assert "Failed to get lease" not in done.stdout + done.stderr
    assert "Lease:" in done.stdout and f"HolderIdentity:  {node}" in done.stdout
    assert "RenewTime:" in done.stdout and "RenewTime:       <unset>" not in done.stdout


# ---------------------------------------------------------------- node leases


def _node_leases(sim: ThreadedSim) -> dict[str, dict[str, Any]]:
    async def read() -> dict[str, dict[str, Any]]:
        listed = await sim.c.storage.list(kinds.LEASES, namespace=NODE_LEASE_NAMESPACE)
        return {item["metadata"]["name"]: item for item in listed.items}

    return sim.run(read)


def test_every_node_has_a_lease_owned_by_it_and_renewed(sim_cluster: ThreadedSim) -> None:
    async def nodes() -> dict[str, str]:
        listed = await sim_cluster.c.storage.list(kinds.NODES)
        return {n["metadata"]["name"]: n["metadata"]["uid"] for n in listed.items}

    uids = sim_cluster.run(nodes)
    leases = wait_until("a lease per node", lambda: (found := _node_leases(sim_cluster)).keys() == uids.keys()
                        and found)
    for name, lease in leases.items():
        assert lease["spec"]["holderIdentity"] == name and lease["spec"]["leaseDurationSeconds"] == 40
        assert lease["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uids[name]}]
    first = {name: lease["spec"]["renewTime"] for name, lease in leases.items()}
    # the kubelets renew every 10 s: wait for every node's renewTime to move on (an event, not a sleep)
    wait_until("every node lease renewed", lambda: all(
        lease["spec"]["renewTime"] > first[name] for name, lease in _node_leases(sim_cluster).items()), timeout=60)


async def _bare_cluster() -> SimCluster:
    profile = make_test_profile(name="leases-unit")
    cluster = SimCluster(profile, run_controllers=False)
    await cluster.start()
    return cluster


async def _node_states(cluster: SimCluster) -> dict[str, NodeState]:
    listed = await cluster.storage.list(kinds.NODES)
    return {n["metadata"]["name"]: NodeState(uid=n["metadata"]["uid"], ready=True) for n in listed.items}


async def _renew_times(cluster: SimCluster) -> dict[str, str]:
    listed = await cluster.storage.list(kinds.LEASES, namespace=NODE_LEASE_NAMESPACE)
    return {item["metadata"]["name"]: item["spec"]["renewTime"] for item in listed.items}


async def test_renewals_go_one_slot_at_a_time_and_skip_dead_kubelets() -> None:
    cluster = await _bare_cluster()
    try:
        import structlog

        leases = NodeLeases(storage=cluster.storage, registry=cluster.registry, cluster=cluster.name,
                            logger=structlog.get_logger(), slots=2)
        states = await _node_states(cluster)
        assert await leases.renew_pass(states, slot=None) == len(states)  # the first pass creates them all
        assert leases.created == len(states) and set(await _renew_times(cluster)) == set(states)
        for slot in (0, 1):
            before = await _renew_times(cluster)
            await asyncio.sleep(0.001)  # renewTime has microseconds: make the next one differ
            written = await leases.renew_pass(states, slot=slot)
            after = await _renew_times(cluster)
            moved = {n for n in states if after[n] != before[n]}
            assert moved == {n for n in states if lease_slot(n, 2) == slot} and written == len(moved)
        # a dead kubelet renews nothing; the others go on
        dead = sorted(states)[0]
        states[dead] = NodeState(uid=states[dead].uid, ready=False)
        before = await _renew_times(cluster)
        await asyncio.sleep(0.001)
        await leases.renew_pass(states, slot=lease_slot(dead, 2))
        assert (await _renew_times(cluster))[dead] == before[dead]
        # a deleted node's lease goes (the garbage collector's work, through the ownerReference)
        leases.node_deleted(dead)
        del states[dead]
        await leases.renew_pass(states, slot=0)
        assert dead not in await _renew_times(cluster) and leases.deleted == 1
    finally:
        await cluster.stop()


async def test_a_failed_node_stops_renewing_until_it_recovers() -> None:
    from federator.sim.kubelet import Kubelet

    cluster = await _bare_cluster()
    try:
        import structlog

        kubelet = Kubelet(storage=cluster.storage, registry=cluster.registry, cluster=cluster.profile,
                          logger=structlog.get_logger())
        await kubelet._sync()
        leases = kubelet.leases
        await leases.renew_pass(kubelet.lease_nodes(), slot=None)
        await fail_node(cluster.storage, cluster.registry, node="cpu-0000")
        kubelet.apply_node(await cluster.storage.get(kinds.NODES, namespace=None, name="cpu-0000"))
        before = await _renew_times(cluster)
        await asyncio.sleep(0.001)
        await leases.renew_pass(kubelet.lease_nodes(), slot=None)
        after = await _renew_times(cluster)
        assert after["cpu-0000"] == before["cpu-0000"] and after["gpu-0000"] != before["gpu-0000"]
        await recover_node(cluster.storage, cluster.registry, node="cpu-0000")
        kubelet.apply_node(await cluster.storage.get(kinds.NODES, namespace=None, name="cpu-0000"))
        await leases.renew_pass(kubelet.lease_nodes(), slot=None)
        assert (await _renew_times(cluster))["cpu-0000"] != before["cpu-0000"]
    finally:
        await cluster.stop()
