"""MemberCluster credentials are stored by the hub and never leave it: not in any API
response (GET, LIST, WATCH, Table rows, write answers, errors), not in kubectl or CLI
output, not in the hub's logs, not in /metrics. Controllers (in-process) see them."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import aiohttp
import pytest
import structlog

from .hubtest_support import TOKENS, RunningHub, clusters_url

MEMBER_TOKEN = "s3cr3t-member-token-7d1c5e9a2b4f6c8e0a1b3d5f"
CERT_SECRET = "CERTSECRETf00dfeedbeefcafe"
KEY_SECRET = "KEYSECRET0ddba11c0ffee1234"
CERT_DATA = base64.b64encode(f"-----BEGIN CERTIFICATE-----\n{CERT_SECRET}\n-----END CERTIFICATE-----\n".encode()).decode()
KEY_DATA = base64.b64encode(f"-----BEGIN PRIVATE KEY-----\n{KEY_SECRET}\n-----END PRIVATE KEY-----\n".encode()).decode()
SECRETS = (MEMBER_TOKEN, CERT_SECRET, KEY_SECRET, CERT_DATA, KEY_DATA, MEMBER_TOKEN[7:25])
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def token_cluster(name: str = "with-token", *, bandwidth: float = 100.0) -> dict[str, Any]:
    return {
        "apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": name},
        "spec": {
            "connection": {"server": "https://10.0.0.1:6443", "credentials": {"token": MEMBER_TOKEN}},
            "location": {"type": "onPrem"},
            "network": {"type": "rdma", "rdmaKind": "infiniband", "bandwidthGbps": bandwidth},
            "scheduler": {"name": "volcano"},
            "labels": {"tier": "research"},
        },
    }


def cert_cluster(name: str = "with-cert") -> dict[str, Any]:
    cluster = token_cluster(name)
    cluster["spec"]["connection"]["credentials"] = {"clientCertificateData": CERT_DATA, "clientKeyData": KEY_DATA}
    return cluster


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a credential leaked into {where}"


async def test_credentials_never_leave_the_hub(hub: RunningHub) -> None:
    with structlog.testing.capture_logs() as logs:
        await _exercise_every_read_and_write(hub)
    assert logs, "the hub logged nothing at all: the capture is not working"
    assert_no_secret(json.dumps(logs, default=str), "the hub's logs")
    status, metrics = await hub.request("GET", "/metrics")
    assert status == 200 and "federator_api_requests_total" in metrics
    assert_no_secret(metrics, "/metrics")


async def _exercise_every_read_and_write(hub: RunningHub) -> None:
    shown: list[tuple[str, str]] = []

    async def call(method: str, path: str, *, body: Any = None, headers: dict[str, str] | None = None,
                   expect: int = 200) -> Any:
        status, answer = await hub.request(method, path, body=body, headers=headers)
        assert status == expect, (method, path, answer)
        shown.append((f"{method} {path} {headers or ''}", json.dumps(answer)))
        return answer

    created = await call("POST", clusters_url(), body=token_cluster(), expect=201)
    assert created["spec"]["connection"]["credentials"] == {"token": "<redacted>"}
    await call("POST", clusters_url(), body=cert_cluster(), expect=201)
    # The controllers' view (in-process storage) has the real credentials.
    rt = hub.context.kind("MemberCluster")
    stored = await hub.context.storage.get(rt, namespace=None, name="with-token")
    assert stored["spec"]["connection"]["credentials"]["token"] == MEMBER_TOKEN

    got = await call("GET", clusters_url("with-token"))
    await call("GET", clusters_url("with-cert"))
    await call("GET", clusters_url(), headers={"Accept": TABLE})
    await call("GET", clusters_url() + "?includeObject=Object", headers={"Accept": TABLE})
    await call("GET", clusters_url("with-cert"), headers={"Accept": TABLE})
    listing = await call("GET", clusters_url())
    assert {i["spec"]["connection"]["credentials"].get("clientKeyData", "<redacted>") for i in listing["items"]} \
        == {"<redacted>"}
    await call("POST", clusters_url(), body=token_cluster(), expect=409)
    await call("POST", clusters_url(), body=token_cluster("bad", bandwidth=-5), expect=422)
    status, answer = await hub.request(
        "POST", clusters_url(), headers={"Content-Type": "application/yaml"},
        data=f"kind: MemberCluster\nspec: {{token: {MEMBER_TOKEN}, x: [\n".encode())
    assert status == 400
    shown.append(("malformed YAML", json.dumps(answer)))

    # Refused requests that carry a credential are logged (who, what), never with the body.
    status, answer = await hub.request("PUT", clusters_url("with-token"), who="researcher", body=token_cluster())
    assert status == 403
    shown.append(("forbidden", json.dumps(answer)))
    status, answer = await hub.request("POST", clusters_url(), who="wrong", body=token_cluster("x"))
    assert status == 401

    # A client writes back what it read (redacted): the stored credential stays.
    got["spec"]["cordoned"] = True
    updated = await call("PUT", clusters_url("with-token"), body=got)
    assert updated["spec"]["cordoned"] is True
    stored = await hub.context.storage.get(rt, namespace=None, name="with-token")
    assert stored["spec"]["connection"]["credentials"]["token"] == MEMBER_TOKEN
    patched = await call("PATCH", clusters_url("with-token"), body={"spec": {"cordoned": False}},
                         headers={"Content-Type": "application/merge-patch+json"})
    assert patched["spec"]["cordoned"] is False
    stored = await hub.context.storage.get(rt, namespace=None, name="with-token")
    status_write = dict(stored)
    status_write["status"] = {"capacity": {"nodes": 3, "totalGPUs": 24, "freeGPUs": 8}}
    await call("PUT", clusters_url("with-token", "status"), body=status_write)

    # Watches, plain and as kubectl's Table, from the start (synthetic ADDED) and live.
    events = await _watch_lines(hub, clusters_url() + "?watch=true&resourceVersion=0", {}, want=2)
    table_events = await _watch_lines(hub, clusters_url() + "?watch=true&resourceVersion=0&includeObject=Object",
                                      {"Accept": TABLE}, want=2)
    shown += [("watch", events), ("watch table", table_events)]
    assert "<redacted>" in events

    live = asyncio.create_task(_watch_lines(hub, clusters_url() + f"?watch=true&resourceVersion="
                                            f"{patched['metadata']['resourceVersion']}", {}, want=2))
    await asyncio.sleep(0)  # the watch may start before or after the writes: both must be redacted
    await call("PATCH", clusters_url("with-token"), body={"metadata": {"labels": {"tier": "batch"}}},
               headers={"Content-Type": "application/merge-patch+json"})
    await call("DELETE", clusters_url("with-cert"))
    shown.append(("live watch", await asyncio.wait_for(live, 30)))

    for where, text in shown:
        assert_no_secret(text, where)


async def _watch_lines(hub: RunningHub, path: str, headers: dict[str, str], *, want: int) -> str:
    lines: list[str] = []
    async with aiohttp.ClientSession() as session:
        async with session.get(hub.url + path, ssl=hub.ssl_context(),
                               headers={"Authorization": f"Bearer {TOKENS['admin']}", **headers},
                               timeout=aiohttp.ClientTimeout(total=30)) as response:
            assert response.status == 200
            async for line in response.content:
                if b'"BOOKMARK"' in line:
                    continue
                lines.append(line.decode())
                if len(lines) >= want:
                    break
    return "".join(lines)


@pytest.mark.kubectl
async def test_kubectl_apply_and_get_never_show_credentials(hub: RunningHub) -> None:
    # kubectl apply copies the whole manifest, token included, into the last-applied annotation.
    manifest = json.dumps(token_cluster("applied"))
    with structlog.testing.capture_logs() as logs:
        code, out, err = await hub.kubectl("admin", "apply", "-f", "-", stdin=manifest)
        assert code == 0 and "membercluster.federator.dev/applied created" in out, err
        # kubectl sees "<redacted>" where its manifest has the token, so it sends the token again
        # ("configured"); the hub finds nothing changed and writes nothing.
        code, out2, err2 = await hub.kubectl("admin", "apply", "-f", "-", stdin=manifest)
        assert code == 0 and ("unchanged" in out2 or "configured" in out2), err2
        rt = hub.context.kind("MemberCluster")
        again = await hub.context.storage.get(rt, namespace=None, name="applied")
        assert again["metadata"]["generation"] == 1
        outputs = [out, err, out2, err2]
        for args in (("get", "mc", "-o", "yaml"), ("get", "mc", "applied", "-o", "json"), ("get", "mc"),
                     ("get", "mc", "-o", "wide"), ("describe", "mc", "applied")):
            code, out, err = await hub.kubectl("viewer", *args)
            assert code == 0, (args, err)
            outputs += [out, err]
        code, out, err = await hub.kubectl("researcher", "get", "mc", "applied", "-o", "yaml")
        assert code == 0, err
        outputs += [out, err]
        assert "connection" not in out and "10.0.0.1" not in out  # researchers see no connection at all
        code, out, err = await hub.kubectl("admin", "get", "mc", "applied", "-o", "yaml")
        assert code == 0, err
        outputs += [out, err]
        assert "<redacted>" in out
    for text in outputs:
        assert_no_secret(text, "kubectl output")
    assert_no_secret(json.dumps(logs, default=str), "the hub's logs")
    rt = hub.context.kind("MemberCluster")
    stored = await hub.context.storage.get(rt, namespace=None, name="applied")
    assert stored["spec"]["connection"]["credentials"]["token"] == MEMBER_TOKEN
    code, out, err = await hub.kubectl("admin", "get", "mc")
    assert out.splitlines()[0].split() == ["NAME", "READY", "LOST", "FABRIC", "GPUS", "AGE"], out
    assert out.splitlines()[1].split()[:2] == ["applied", "rdma"] or out.splitlines()[1].split()[0] == "applied"
