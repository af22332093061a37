"""A partition that cuts one identity off (`from`: a user name or a bearer token), through a real
SimCluster on a real socket: the cluster's two identities (sim-admin, federator-agent) each with its
own token and kubeconfig; with the admin cut off, the agent's lists and watches keep working while
the admin's requests hang and its watch goes silent until the partition ends; `GET /_sim/faults`
names the user, never a token; bad `from` is a 400 that injects nothing."""

from __future__ import annotations

import asyncio
import json
import ssl
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from federator.sim import kinds
from federator.sim.faults import FaultState, IdentityError
from simapi_support import fault_lab_profile, wait_for

from federator.sim.server import ADMIN_USER, AGENT_USER, SimCluster






class As:
    """aiohttp against one SimCluster with one identity's token."""

    def __init__(self, cluster: SimCluster, token: str) -> None:
        self.cluster = cluster
        self.headers = {"Authorization": f"Bearer {token}"}
        ctx = ssl.create_default_context(cadata=cluster.ca_pem.decode())
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx))

    async def request(self, method: str, path: str, *, timeout: float = 10.0, **kw: Any) -> tuple[int, Any]:
        async with self.session.request(method, self.cluster.url + path, headers=self.headers,
                                        timeout=aiohttp.ClientTimeout(total=timeout), **kw) as r:
            raw = await r.read()
            try:
                return r.status, json.loads(raw)
            except ValueError:
                return r.status, raw

    async def watch(self, path: str) -> aiohttp.ClientResponse:
        resp = await self.session.get(self.cluster.url + path, headers=self.headers,
                                      timeout=aiohttp.ClientTimeout(total=60))
        assert resp.status == 200
        return resp

    async def close(self) -> None:
        await self.session.close()


async def next_event(resp: aiohttp.ClientResponse, timeout: float = 10.0) -> dict[str, Any]:
    line = await asyncio.wait_for(resp.content.readline(), timeout)
    if not line:
        raise EOFError("watch stream ended")
    return dict(json.loads(line))


@pytest.fixture
async def lab() -> AsyncIterator[tuple[SimCluster, As, As]]:
    cluster = SimCluster(fault_lab_profile("cut-lab"))
    await cluster.start()
    admin, agent = As(cluster, cluster.token), As(cluster, cluster.agent_token)
    try:
        yield cluster, admin, agent
    finally:
        await admin.close()
        await agent.close()
        await cluster.stop()


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}


async def test_two_identities_each_with_its_token_and_kubeconfig(lab: tuple[SimCluster, As, As],
                                                                 tmp_path: Path) -> None:
    cluster, admin, agent = lab
    assert cluster.agent_token != cluster.token
    assert (await admin.request("GET", "/api/v1/nodes"))[0] == 200
    assert (await agent.request("GET", "/api/v1/nodes"))[0] == 200
    # the admin side (faults, stats) is the operator's only
    assert (await agent.request("GET", "/_sim/faults"))[0] == 401
    assert (await agent.request("GET", "/_sim/stats"))[0] == 401
    assert (await admin.request("GET", "/_sim/faults"))[0] == 200
    path = cluster.write_agent_kubeconfig(tmp_path / "cut-lab-agent.kubeconfig")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = yaml.safe_load(path.read_text())
    assert doc["users"][0]["user"]["token"] == cluster.agent_token
    assert doc["contexts"][0]["context"]["namespace"] == "federator-system"
    assert doc["clusters"][0]["cluster"]["server"] == cluster.url
    assert "federator-system" in {ns["metadata"]["name"] for ns in
                                  (await admin.request("GET", "/api/v1/namespaces"))[1]["items"]}


async def test_partition_from_one_user_cuts_only_that_user(lab: tuple[SimCluster, As, As]) -> None:
    cluster, admin, agent = lab
    rv = (await admin.request("GET", "/api/v1/namespaces/default/pods"))[1]["metadata"]["resourceVersion"]
    path = f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}"
    admin_watch, agent_watch = await admin.watch(path), await agent.watch(path)

    async def watches_open() -> bool:
        return bool((await admin.request("GET", "/_sim/faults"))[1]["openWatches"] >= 2)

    await wait_for("both watches to be tracked", watches_open)
    status, answer = await admin.request("POST", "/_sim/faults/partition", json={"from": ADMIN_USER})
    assert status == 200 and answer == {"fault": "partition", "seconds": None, "from": ADMIN_USER}
    status, state = await admin.request("GET", "/_sim/faults")
    assert state["partition"] == {"remainingSeconds": None, "from": ADMIN_USER}
    # the admin's new request hangs...
    hanging = asyncio.ensure_future(admin.request("GET", "/api/v1/nodes", timeout=60))
    # ...while the agent is answered: a create, a list, and its watch sees the change
    status, _ = await agent.request("POST", "/api/v1/namespaces/default/pods", json=pod("during"))
    assert status == 201
    status, listing = await agent.request("GET", "/api/v1/namespaces/default/pods")
    assert status == 200 and [p["metadata"]["name"] for p in listing["items"]] == ["during"]
    event = await next_event(agent_watch)
    assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "during"
    # the admin's watch stays silent (its connection open) and its request has no answer yet
    with pytest.raises(asyncio.TimeoutError):
        await next_event(admin_watch, timeout=0.3)
    assert not hanging.done()
    # end it: the hanging request is answered, the silenced watch is gone for good
    assert (await admin.request("DELETE", "/_sim/faults/partition"))[0] == 200
    status, nodes = await hanging
    assert status == 200 and len(nodes["items"]) == 2
    with pytest.raises((EOFError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError)):
        while True:
            await next_event(admin_watch)
    admin_watch.release()
    # the agent's watch was never cut
    status, _ = await agent.request("DELETE", "/api/v1/namespaces/default/pods/during",
                                    json={"gracePeriodSeconds": 0})
    assert status == 200
    assert (await next_event(agent_watch))["object"]["metadata"]["name"] == "during"
    agent_watch.release()


async def test_partition_from_a_token_shows_the_user_never_the_token(lab: tuple[SimCluster, As, As]) -> None:
    cluster, admin, agent = lab
    status, answer = await admin.request("POST", "/_sim/faults/partition",
                                         json={"from": cluster.agent_token, "seconds": 60})
    assert status == 200 and answer["from"] == AGENT_USER
    status, state = await admin.request("GET", "/_sim/faults")
    assert state["partition"]["from"] == AGENT_USER and 0 < state["partition"]["remainingSeconds"] <= 60
    assert any(h["fault"] == "partition" and h.get("from") == AGENT_USER for h in state["history"])
    assert cluster.agent_token not in json.dumps(state) + json.dumps(answer)
    # now the agent is the one cut off, and the admin is answered
    hanging = asyncio.ensure_future(agent.request("GET", "/api/v1/nodes", timeout=60))
    assert (await admin.request("GET", "/api/v1/nodes"))[0] == 200
    assert not hanging.done()
    # a full partition replaces it: the admin is cut off too; lifting it answers both
    assert (await admin.request("POST", "/_sim/faults/partition", json={}))[0] == 200
    assert (await admin.request("GET", "/_sim/faults"))[1]["partition"]["from"] is None
    admin_hanging = asyncio.ensure_future(admin.request("GET", "/api/v1/namespaces", timeout=60))
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(admin_hanging), 0.3)
    assert (await admin.request("DELETE", "/_sim/faults"))[0] == 200
    assert (await hanging)[0] == 200 and (await admin_hanging)[0] == 200


@pytest.mark.parametrize(("payload", "says"), [
    ({"from": 42}, "must be a string"),
    ({"from": ["sim-admin"]}, "must be a string"),
    ({"from": ""}, "must not be empty"),
    ({"from": "x" * 2000}, "longer than 1024"),
    ({"from": "nobody"}, "names no user"),
    ({"from": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, "none of its bearer tokens"),
    ({"from": "sim-admin", "seconds": -1}, "seconds must be"),
])
async def test_bad_from_is_400_and_injects_nothing(lab: tuple[SimCluster, As, As], payload: dict[str, Any],
                                                   says: str) -> None:
    cluster, admin, _ = lab
    status, body = await admin.request("POST", "/_sim/faults/partition", json=payload)
    assert status in (400, 422) and body["kind"] == "Status" and says in body["message"], body
    if "seconds" not in payload:
        assert status == 400 and body["reason"] == "BadRequest"
        if payload["from"]:  # the value is never repeated (it may be another cluster's token)
            assert str(payload["from"])[:40] not in body["message"]
    assert (await admin.request("GET", "/_sim/faults"))[1]["partition"] is None
    assert (await admin.request("GET", "/api/v1/nodes"))[0] == 200


async def test_fault_state_resolves_from_without_a_server() -> None:
    users = {"hub": "hub-token-0123456789", "agent": "agent-token-0123456789"}

    def resolve(value: str) -> str | None:
        if value in users:
            return value
        return next((u for u, t in users.items() if t == value), None)

    state = FaultState(cluster="x", resolve_identity=resolve, users=tuple(users))
    assert state.partition_user("hub") == "hub"
    assert state.partition_user("agent-token-0123456789") == "agent"
    with pytest.raises(IdentityError) as raised:
        state.partition_user("hub-token-wrong")
    assert "hub-token-wrong" not in str(raised.value) and "users: hub, agent" in str(raised.value)
    state.start_partition(None, source="agent-token-0123456789")
    assert state.partition_from == "agent" and state.partition_blocks("agent")
    assert not state.partition_blocks("hub") and not state.partition_blocks(None)
    state.end_partition()
    assert not state.partition_blocks("agent")
    # no identities known: a partition `from` anyone is refused, a full one still works
    bare = FaultState(cluster="y")
    with pytest.raises(IdentityError):
        bare.start_partition(None, source="anyone")
    bare.start_partition(None)
    assert bare.partition_blocks(None) and bare.partition_blocks("anyone")
    await bare.close()
    await state.close()


async def test_the_cluster_keeps_running_for_the_cut_off_user(lab: tuple[SimCluster, As, As]) -> None:
    cluster, admin, agent = lab
    assert (await admin.request("POST", "/_sim/faults/partition", json={"from": ADMIN_USER, "seconds": 30}))[0] == 200
    await cluster.storage.create(kinds.PODS, pod("inside"), namespace="default")

    async def running() -> bool:
        status, p = await agent.request("GET", "/api/v1/namespaces/default/pods/inside")
        return status == 200 and p["status"].get("phase") == "Running"

    await wait_for("the pod to run, seen by the agent", running)
    assert (await admin.request("DELETE", "/_sim/faults/partition"))[0] == 200
