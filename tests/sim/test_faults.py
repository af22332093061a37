"""Faults through a real SimCluster on a real socket (TLS, bearer token),
observed with aiohttp and the official kubernetes client: 503 and refused
connections during an outage, added latency, dropped watches, 410 after a
forced compaction, node failure and unhealthy GPUs through the admin API, a
full partition, bad admin input, and the `federator sim fault` CLI."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

from federator.obs import METRICS
from federator.sim import kinds
from federator.sim.faults import FaultError, FaultState, is_watch_request
from simapi_support import fault_lab_profile, wait_for

from federator.sim.server import SimCluster

ROOT = Path(__file__).resolve().parents[2]
#: the installed console script (the real front door)
FEDERATOR = str(Path(sys.executable).with_name("federator"))






class Client:
    """aiohttp against one SimCluster, trusting its CA, with its token."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.ssl = ssl.create_default_context(cadata=cluster.ca_pem.decode())
        self.headers = {"Authorization": f"Bearer {cluster.token}"}
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl))

    async def request(self, method: str, path: str, *, timeout: float = 5.0, token: bool = True,
                      headers: dict[str, str] | None = None, **kw: Any) -> tuple[int, Any, Any]:
        sent = {**(self.headers if token else {}), **(headers or {})}
        async with self.session.request(method, self.cluster.url + path, headers=sent,
                                        timeout=aiohttp.ClientTimeout(total=timeout), **kw) as r:
            body = await r.read()
            try:
                data = json.loads(body)
            except ValueError:
                data = body
            return r.status, data, r.headers

    async def admin(self, method: str, fault: str = "", body: Any = None, **kw: Any) -> tuple[int, Any]:
        path = "/_sim/faults" + (f"/{fault}" if fault else "")
        status, data, _ = await self.request(method, path, json=body, **kw)
        return status, data

    async def close(self) -> None:
        await self.session.close()


@pytest.fixture
async def sim() -> AsyncIterator[tuple[SimCluster, Client]]:
    cluster = SimCluster(fault_lab_profile())
    await cluster.start()
    c = Client(cluster)
    try:
        yield cluster, c
    finally:
        await c.close()
        await cluster.stop()


def fault_count(cluster: str, fault: str) -> float:
    return METRICS.registry.get_sample_value("federator_sim_faults_total", {"cluster": cluster, "fault": fault}) or 0


async def test_outage_503_then_recovers(sim: tuple[SimCluster, Client]) -> None:
    cluster, c = sim
    before = fault_count(cluster.name, "outage")
    # 3 s: long enough to be on for the next request however slow the machine, then it lifts itself
    status, answer = await c.admin("POST", "outage", {"seconds": 3.0, "mode": "503"})
    assert status == 200 and answer["mode"] == "503"
    code, body, headers = await c.request("GET", "/api/v1/nodes")
    assert code == 503 and body["kind"] == "Status" and body["reason"] == "ServiceUnavailable"
    assert int(headers["Retry-After"]) >= 1
    assert fault_count(cluster.name, "outage") == before + 1

    async def served() -> bool:
        return (await c.request("GET", "/api/v1/nodes"))[0] == 200

    await wait_for("the API to come back", served)


async def test_outage_refuses_connections_then_reopens(sim: tuple[SimCluster, Client]) -> None:
    cluster, c = sim
    assert (await c.request("GET", "/api/v1/nodes"))[0] == 200  # a keep-alive connection exists now
    status, answer = await c.admin("POST", "outage", {"seconds": 3.0})
    assert status == 200 and answer["mode"] == "refuse"

    async def refused() -> bool:
        try:
            await c.request("GET", "/api/v1/nodes", timeout=2)
        except aiohttp.ClientConnectorError:
            return True
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False
        return False

    await wait_for("connection refused", refused, timeout=5)
    # a fresh socket is refused too (not just the pool's connections)
    with pytest.raises(OSError):
        _, writer = await asyncio.open_connection(cluster.host, cluster.port)
        writer.close()

    async def served() -> bool:
        try:
            return (await c.request("GET", "/api/v1/nodes", timeout=2))[0] == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    await wait_for("the listener to reopen on the same port", served)


async def test_added_latency_and_clear(sim: tuple[SimCluster, Client]) -> None:
    _, c = sim
    assert (await c.admin("POST", "latency", {"seconds": 0.3}))[0] == 200
    t0 = time.monotonic()
    assert (await c.request("GET", "/api/v1/namespaces"))[0] == 200
    assert time.monotonic() - t0 >= 0.3  # a lower bound: the delay was applied
    status, state = await c.admin("GET")
    assert status == 200 and state["latency"]["seconds"] == 0.3
    assert (await c.admin("DELETE", "latency"))[0] == 200
    assert (await c.admin("GET"))[1]["latency"] is None


async def _open_watch(c: Client, path: str) -> aiohttp.ClientResponse:
    resp = await c.session.get(c.cluster.url + path, headers=c.headers, timeout=aiohttp.ClientTimeout(total=30))
    assert resp.status == 200
    return resp


async def _read_event(resp: aiohttp.ClientResponse, timeout: float = 5.0) -> dict[str, Any]:
    line = await asyncio.wait_for(resp.content.readline(), timeout)
    if not line:
        raise EOFError("watch stream ended")
    return dict(json.loads(line))


async def test_drop_watches_cuts_open_streams(sim: tuple[SimCluster, Client]) -> None:
    cluster, c = sim
    resp = await _open_watch(c, "/api/v1/nodes?watch=1")
    first = await _read_event(resp)
    assert first["type"] == "ADDED"
    await wait_for("the watch to be tracked", lambda: _open_watches(c, 1))
    status, answer = await c.admin("POST", "drop-watches")
    assert status == 200 and answer["dropped"] >= 1
    with pytest.raises((EOFError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError)):
        while True:
            await _read_event(resp)
    resp.release()
    assert (await c.admin("GET"))[1]["openWatches"] == 0


async def _open_watches(c: Client, n: int) -> bool:
    return bool((await c.admin("GET"))[1]["openWatches"] >= n)


async def test_forced_compaction_makes_rewatch_expire(sim: tuple[SimCluster, Client]) -> None:
    cluster, c = sim
    code, listing, _ = await c.request("GET", "/api/v1/namespaces/default/pods")
    rv = listing["metadata"]["resourceVersion"]
    resp = await _open_watch(c, f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}")
    await wait_for("the watch to be tracked", lambda: _open_watches(c, 1))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w1"},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    assert (await c.request("POST", "/api/v1/namespaces/default/pods", json=pod))[0] == 201
    ev = await _read_event(resp)
    last_rv = ev["object"]["metadata"]["resourceVersion"]
    status, answer = await c.admin("POST", "compact")
    assert status == 200 and int(answer["compactedTo"]) > int(last_rv)
    with pytest.raises((EOFError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError)):
        while True:
            await _read_event(resp)
    resp.release()
    # re-watching from the last resourceVersion seen: 410 Expired (ERROR event, as kube-apiserver does)
    code, body, _ = await c.request("GET", f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={last_rv}",
                                    timeout=5)
    assert code in (200, 410)
    if code == 200:
        body = json.loads(body.splitlines()[0]) if isinstance(body, bytes) else body
        assert body["type"] == "ERROR"
        body = body["object"]
    assert body["code"] == 410 and body["reason"] == "Expired"
    # the official client sees the same 410
    kc = await asyncio.to_thread(_official_client, cluster)

    def rewatch() -> int:
        w = k8s_watch.Watch()
        try:
            for _ in w.stream(kc.list_namespaced_pod, "default", resource_version=last_rv, timeout_seconds=5):
                pass
        except ApiException as e:
            return int(e.status)
        return 0

    assert await asyncio.to_thread(rewatch) == 410


def _official_client(cluster: SimCluster) -> k8s.CoreV1Api:
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"federator-test-{cluster.name}-{cluster.port}.kubeconfig"
    cluster.write_kubeconfig(path)
    try:
        return k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(path)))
    finally:
        path.unlink()


async def test_node_failure_and_gpu_faults_through_admin(sim: tuple[SimCluster, Client]) -> None:
    cluster, c = sim
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job"},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "resources": {
               "requests": {"nvidia.com/gpu": "8"}}}]}}
    assert (await c.request("POST", "/api/v1/namespaces/default/pods", json=pod))[0] == 201

    async def running() -> dict[str, Any] | None:
        _, p, _ = await c.request("GET", "/api/v1/namespaces/default/pods/job")
        return p if p["status"].get("phase") == "Running" else None

    node = (await wait_for("job Running", running))["spec"]["nodeName"]
    status, _ = await c.admin("POST", "node-failure", {"node": node})
    assert status == 200

    async def lost() -> dict[str, Any] | None:
        _, p, _ = await c.request("GET", "/api/v1/namespaces/default/pods/job")
        return p if p["status"].get("reason") == "NodeLost" else None

    assert (await wait_for("job failed with NodeLost", lost))["status"]["phase"] == "Failed"
    _, n, _ = await c.request("GET", f"/api/v1/nodes/{node}")
    assert next(x for x in n["status"]["conditions"] if x["type"] == "Ready")["status"] == "Unknown"
    assert (await c.admin("POST", "node-recover", {"node": node}))[0] == 200
    _, n, _ = await c.request("GET", f"/api/v1/nodes/{node}")
    assert next(x for x in n["status"]["conditions"] if x["type"] == "Ready")["status"] == "True"

    status, _ = await c.admin("POST", "gpu-unhealthy", {"node": node, "count": 2})
    assert status == 200
    _, n, _ = await c.request("GET", f"/api/v1/nodes/{node}")
    assert n["status"]["allocatable"]["nvidia.com/gpu"] == "6"
    assert fault_count(cluster.name, "gpu-unhealthy") >= 1
    # bad input changes nothing
    status, err = await c.admin("POST", "gpu-unhealthy", {"node": node, "count": 99})
    assert status == 422 and "cannot mark 99" in err["message"]
    status, err = await c.admin("POST", "gpu-unhealthy", {"node": "no-such-node", "count": 1})
    assert status == 404 and err["reason"] == "NotFound"
    status, err = await c.admin("POST", "node-failure", {"node": node, "extra": 1})
    assert status == 400 and "unknown field" in err["message"]
    _, n, _ = await c.request("GET", f"/api/v1/nodes/{node}")
    assert n["status"]["allocatable"]["nvidia.com/gpu"] == "6"
    assert next(x for x in n["status"]["conditions"] if x["type"] == "Ready")["status"] == "True"


async def test_bad_admin_requests(sim: tuple[SimCluster, Client]) -> None:
    cluster, c = sim
    status, body, _ = await c.request("POST", "/_sim/faults/outage", json={"seconds": 5}, token=False)
    assert status == 401 and body["reason"] == "Unauthorized"
    for payload, code in ((b"{not json", 400), (b"[1,2]", 400), (b'{"seconds": "soon"}', 422),
                          (b'{"seconds": -1}', 422), (b'{"seconds": 1e9}', 422),
                          (b'{"seconds": 1, "mode": "maybe"}', 422)):
        status, body, _ = await c.request("POST", "/_sim/faults/outage", data=payload,
                                          headers={"Content-Type": "application/json"})
        assert status == code, (payload, body)
        assert body["kind"] == "Status"
    status, body, _ = await c.request("POST", "/_sim/faults/latency", data=b"x" * 70_000)
    assert status == 400
    assert (await c.admin("GET"))[1]["outage"] is None  # nothing was injected
    assert (await c.request("GET", "/api/v1/nodes"))[0] == 200


async def test_partition_silences_watches_and_requests(sim: tuple[SimCluster, Client]) -> None:
    cluster, c = sim
    _, listing, _ = await c.request("GET", "/api/v1/namespaces/default/pods")
    rv = listing["metadata"]["resourceVersion"]
    resp = await _open_watch(c, f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}")
    await wait_for("the watch to be tracked", lambda: _open_watches(c, 1))
    assert (await c.admin("POST", "partition", {"seconds": 30}))[0] == 200
    # the cluster keeps running: a pod created inside it is scheduled and run...
    await cluster.storage.create(kinds.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "inside"},
                                              "spec": {"containers": [{"name": "c", "image": "x"}]}},
                                 namespace="default")

    async def inside_running() -> bool:
        p = await cluster.storage.get(kinds.PODS, namespace="default", name="inside")
        return p["status"].get("phase") == "Running"

    await wait_for("the pod to run inside the partition", inside_running)
    # ...but the open watch stays silent (connection open, nothing arrives)
    with pytest.raises(asyncio.TimeoutError):
        await _read_event(resp, timeout=0.5)
    assert not resp.connection or not resp.connection.closed
    # and a new request gets no answer
    with pytest.raises(asyncio.TimeoutError):
        await c.request("GET", "/api/v1/nodes", timeout=0.5)
    # the admin side still answers, and lifts it
    status, state = await c.admin("GET")
    assert status == 200 and state["partition"] is not None
    assert (await c.admin("DELETE", "partition"))[0] == 200
    # the silenced watch connection is gone for good (never cleanly finished)
    with pytest.raises((EOFError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError)):
        while True:
            await _read_event(resp)
    resp.release()
    assert (await c.request("GET", "/api/v1/nodes"))[0] == 200


async def test_cli_injects_and_reports(sim: tuple[SimCluster, Client], tmp_path: Path) -> None:
    cluster, c = sim
    kubeconfig = cluster.write_kubeconfig(tmp_path / "lab.kubeconfig")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([FEDERATOR, "sim", "fault", "--kubeconfig", str(kubeconfig), *args],
                              capture_output=True, text=True, timeout=60, cwd=ROOT)

    done = await asyncio.to_thread(run, "gpu-unhealthy", "--node", "gpu-0001", "--count", "3")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"count": 3, "fault": "gpu-unhealthy", "node": "gpu-0001"}
    _, n, _ = await c.request("GET", "/api/v1/nodes/gpu-0001")
    assert n["status"]["allocatable"]["nvidia.com/gpu"] == "5"
    done = await asyncio.to_thread(run, "latency", "--seconds", "0.01", "--duration", "60")
    assert done.returncode == 0, done.stderr
    done = await asyncio.to_thread(run, "status")
    assert done.returncode == 0 and json.loads(done.stdout)["latency"]["seconds"] == 0.01
    done = await asyncio.to_thread(run, "node-failure", "--node", "nope")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "nodes \"nope\" not found" in done.stderr
    assert cluster.token not in done.stderr + done.stdout
    bad = tmp_path / "bad.kubeconfig"
    bad.write_text("current-context: x\ncontexts: []\n")
    done = await asyncio.to_thread(lambda: subprocess.run(
        [FEDERATOR, "sim", "fault", "--kubeconfig", str(bad), "status"],
        capture_output=True, text=True, timeout=60, cwd=ROOT))
    assert done.returncode == 2 and "contexts: no entry named 'x'" in done.stderr


async def test_fault_state_validation_without_a_server() -> None:
    state = FaultState(cluster="x")
    with pytest.raises(FaultError):
        state.set_latency(-1)
    with pytest.raises(FaultError):
        await state.start_outage(0)
    with pytest.raises(FaultError, match="no storage"):
        await state.force_compaction()
    # no listener: a refuse outage falls back to 503 and says so
    assert await state.start_outage(0.01, mode="refuse") == "503"
    await state.close()


def test_is_watch_request() -> None:
    from aiohttp.test_utils import make_mocked_request

    assert is_watch_request(make_mocked_request("GET", "/api/v1/pods?watch=1"))
    assert is_watch_request(make_mocked_request("GET", "/api/v1/pods?watch=true"))
    assert is_watch_request(make_mocked_request("GET", "/api/v1/pods?watch="))
    assert not is_watch_request(make_mocked_request("GET", "/api/v1/pods?watch=false"))
    assert not is_watch_request(make_mocked_request("GET", "/api/v1/pods?watch=0"))
    assert is_watch_request(make_mocked_request("GET", "/api/v1/watch/pods"))


async def test_site_listener_closes_and_reopens_a_plain_http_site() -> None:
    from aiohttp import web

    from federator.sim.faults import SiteListener, admin_routes, fault_middleware

    state = FaultState(cluster="plain")

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "status": "Success"})

    app = web.Application(middlewares=[fault_middleware(state)])
    app.router.add_get("/api", hello)
    app.router.add_routes(admin_routes(state))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.listener = SiteListener(runner, host="127.0.0.1", port=port)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{url}/_sim/faults/outage", json={"seconds": 3.0}) as r:
                assert r.status == 200 and (await r.json())["mode"] == "refuse"

            async def state_of_api() -> str:
                try:
                    async with s.get(f"{url}/api", timeout=aiohttp.ClientTimeout(total=2)) as r:
                        return "up" if r.status == 200 else "down"
                except aiohttp.ClientConnectorError:
                    return "refused"
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    return "down"

            async def is_refused() -> bool:
                return await state_of_api() == "refused"

            async def is_up() -> bool:
                return await state_of_api() == "up"

            await wait_for("refused", is_refused)
            await wait_for("reopened on the same port", is_up)
    finally:
        await state.close()
        await runner.cleanup()
