"""Who sees how the hub reaches a member (issue 16, item 9): researchers and viewers read MemberClusters (what
each offers helps pick GPUs) but never spec.connection (kubeconfig path, server, CA, credentials), on every
read path: GET, LIST, Table rows (with and without the object), WATCH (plain and as a Table), kubectl and the
federator CLI; a server URL or kubeconfig path quoted by a status message reads "<hidden>" for them. Admins
see the connection with the credentials redacted, as before.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from federator.apis.membercluster import HIDDEN, hide_connection

from .hubtest_support import TOKENS, RunningHub, clusters_url

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
SERVER = "https://10.20.30.40:6443"
PATH = "/etc/federator/members/secret-place.kubeconfig"
TOKEN = "member-token-0a1b2c3d4e5f60718293a4b5c6d7e8f9"
#: what must never reach a researcher or a viewer
WHERE = ("10.20.30.40", "secret-place", TOKEN, "<redacted>", '"connection"', "connection:", "f:connection",
         "kubeconfigPath")


def _cluster(name: str, connection: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": name},
            "spec": {"connection": connection, "location": {"type": "onPrem"},
                     "network": {"type": "ethernet", "bandwidthGbps": 100}, "scheduler": {"name": "volcano"},
                     "gpuModels": ["A100"]}}


async def _registered(hub: RunningHub) -> None:
    for body in (_cluster("by-token", {"server": SERVER, "credentials": {"token": TOKEN}}),
                 _cluster("by-path", {"kubeconfigPath": PATH})):
        status, answer = await hub.request("POST", clusters_url(), body=body)
        assert status == 201, answer
    # a status whose messages quote where the member is, as a connection error does
    rt = hub.context.kind("MemberCluster")
    for name, quoted in (("by-token", f"GET /api/v1/nodes at {SERVER}: connection refused"),
                         ("by-path", f"cluster by-path: cannot read {PATH}: no such file")):
        stored = await hub.context.storage.get(rt, namespace=None, name=name)
        stored["status"] = {"conditions": [{"type": "Ready", "status": "False", "reason": "NotReachable",
                                            "message": quoted, "lastTransitionTime": "2024-05-01T12:00:00Z"}]}
        await hub.context.storage.update(rt, stored, namespace=None, subresource="status")


def _assert_hidden(text: str, where: str) -> None:
    for word in WHERE:
        assert word.lower() not in text.lower(), f"{where} shows {word!r}"


async def _watch(hub: RunningHub, who: str, headers: dict[str, str]) -> str:
    lines: list[str] = []
    async with aiohttp.ClientSession() as session:
        async with session.get(hub.url + clusters_url() + "?watch=true&resourceVersion=0&includeObject=Object",
                               ssl=hub.ssl_context(), headers={"Authorization": f"Bearer {TOKENS[who]}", **headers},
                               timeout=aiohttp.ClientTimeout(total=30)) as response:
            assert response.status == 200
            async for raw in response.content:
                if raw.strip():
                    lines.append(raw.decode())
                if len(lines) == 2:
                    break
    return "".join(lines)


async def test_researchers_and_viewers_never_see_the_connection(hub: RunningHub) -> None:
    await _registered(hub)
    for who in ("researcher", "viewer"):
        got: list[tuple[str, str]] = []
        for path, headers in ((clusters_url("by-token"), {}), (clusters_url("by-path"), {}), (clusters_url(), {}),
                              (clusters_url(), {"Accept": TABLE}),
                              (clusters_url() + "?includeObject=Object", {"Accept": TABLE}),
                              (clusters_url("by-path"), {"Accept": TABLE})):
            status, answer = await hub.request("GET", path, who=who, headers=headers)
            assert status == 200, (who, path, answer)
            got.append((f"{who} GET {path} {headers}", json.dumps(answer)))
        got.append((f"{who} watch", await _watch(hub, who, {})))
        got.append((f"{who} watch table", await _watch(hub, who, {"Accept": TABLE})))
        for args in (("get", "mc", "-o", "yaml"), ("get", "mc", "by-token", "-o", "json"), ("get", "mc", "-o", "wide"),
                     ("describe", "mc", "by-path")):
            code, out, err = await hub.kubectl(who, *args)
            assert code == 0, (who, args, err)
            got.append((f"{who} kubectl {args}", out + err))
        for args in (("get", "clusters", "-o", "yaml"), ("cluster", "list")):
            code, out, err = await hub.cli(who, *args)
            assert code == 0, (who, args, err)
            got.append((f"{who} federator {args}", out + err))
        for where, text in got:
            _assert_hidden(text, where)
        # what they do see: what the cluster offers, and the status, with the quoted places hidden
        status, listing = await hub.request("GET", clusters_url(), who=who)
        by_name = {item["metadata"]["name"]: item for item in listing["items"]}
        assert by_name["by-token"]["spec"]["gpuModels"] == ["A100"]
        assert by_name["by-token"]["status"]["conditions"][0]["message"] == \
            f"GET /api/v1/nodes at {HIDDEN}: connection refused"
        assert by_name["by-path"]["status"]["conditions"][0]["message"] == \
            f"cluster by-path: cannot read {HIDDEN}: no such file"

    # admins: the connection, credentials redacted
    status, got_admin = await hub.request("GET", clusters_url("by-token"))
    assert got_admin["spec"]["connection"] == {"server": SERVER, "credentials": {"token": "<redacted>"},
                                               "insecureSkipTLSVerify": False} or \
        got_admin["spec"]["connection"]["credentials"] == {"token": "<redacted>"}
    assert got_admin["status"]["conditions"][0]["message"].endswith(f"{SERVER}: connection refused")
    code, out, err = await hub.kubectl("admin", "get", "mc", "by-path", "-o", "yaml")
    assert code == 0 and PATH in out, err


async def test_kubectl_apply_annotation_hides_the_connection(hub: RunningHub) -> None:
    manifest = json.dumps(_cluster("applied", {"server": SERVER, "credentials": {"token": TOKEN}}))
    code, out, err = await hub.kubectl("admin", "apply", "-f", "-", stdin=manifest)
    assert code == 0, err
    code, out, err = await hub.kubectl("researcher", "get", "mc", "applied", "-o", "json")
    assert code == 0, err
    shown = json.loads(out)
    applied = json.loads(shown["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert "connection" not in applied["spec"] and applied["spec"]["gpuModels"] == ["A100"]
    _assert_hidden(out, "the last-applied annotation")


def test_hide_connection_takes_hostile_shapes() -> None:
    # whatever is stored, nothing of the connection comes through and nothing raises
    for obj in ({}, {"spec": None}, {"spec": {"connection": "https://10.20.30.40"}}, {"spec": []},
                {"metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{not json"}},
                 "spec": {"connection": {"kubeconfigPath": PATH}}},
                {"metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                                              json.dumps({"spec": "x", "connection": SERVER})}}},
                {"status": {"conditions": [None, {"message": 7}, {"message": f"at {SERVER}/api?x=1 and ftp://a"}]},
                 "spec": {"connection": {"kubeconfigPath": PATH}}}):
        shown = hide_connection(obj)
        text = json.dumps(shown)
        assert "10.20.30.40" not in text and "secret-place" not in text, text
        assert "ftp://a" not in text
