"""Authentication and roles on the real hub: 401 without or with a wrong token, 403 outside a
researcher's namespaces (get, list, watch, create alike), read-only viewers, admin-only
MemberCluster writes; checked over HTTPS and through kubectl."""

from __future__ import annotations

from typing import Any

import pytest

from .hubtest_support import RunningHub, clusters_url, job, jobs_url

UNAUTHORIZED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def _cluster(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": name},
        "spec": {
            "connection": {"server": "https://10.0.0.1:6443", "credentials": {"token": "member-token-aaaaaaaaaaaa"}},
            "location": {"type": "cloud", "provider": "aws", "region": "us-east-1"},
            "network": {"type": "ethernet", "bandwidthGbps": 100.0},
            "scheduler": {"name": "coscheduling"},
        },
    }


@pytest.mark.parametrize("path", [jobs_url("default"), jobs_url(), clusters_url(), "/apis", "/version", "/metrics"])
@pytest.mark.parametrize("who", [None, "wrong"])
async def test_no_token_and_wrong_token_get_401(hub: RunningHub, who: str | None, path: str) -> None:
    status, body = await hub.request("GET", path, who=who)
    assert status == 401
    assert body == UNAUTHORIZED


async def test_malformed_authorization_headers_get_401(hub: RunningHub) -> None:
    for header in ("Basic YWxpY2U6cHc=", "Bearer", "Bearer a b", "Token abc"):
        status, body = await hub.request("GET", jobs_url("default"), who=None, headers={"Authorization": header})
        assert status == 401 and body == UNAUTHORIZED, header
    status, body = await hub.request("GET", "/healthz", who=None)
    assert status == 200


@pytest.mark.kubectl
async def test_kubectl_with_a_wrong_token_is_told_to_log_in(hub: RunningHub) -> None:
    code, _, err = await hub.kubectl("wrong", "get", "tj")
    assert code != 0
    assert "error: You must be logged in to the server" in err


_FORBIDDEN_FOR_RESEARCHER = [
    ("get", "GET", jobs_url("team-b", "j1"), None),
    ("list", "GET", jobs_url("team-b"), None),
    ("watch", "GET", jobs_url("team-b") + "?watch=true", None),
    ("watch (old path)", "GET", "/apis/federator.dev/v1alpha1/watch/namespaces/team-b/trainingjobs", None),
    ("list all namespaces", "GET", jobs_url(), None),
    ("watch all namespaces", "GET", jobs_url() + "?watch=1", None),
    ("create", "POST", jobs_url("team-b"), job("team-b", "sneaky")),
    ("update", "PUT", jobs_url("team-b", "j1"), job("team-b", "j1")),
    ("delete", "DELETE", jobs_url("team-b", "j1"), None),
    ("delete collection", "DELETE", jobs_url("team-b"), None),
    ("status write", "PUT", jobs_url("default", "j1", "status"), job("default", "j1")),
    ("create cluster", "POST", clusters_url(), _cluster("c1")),
    ("update cluster", "PUT", clusters_url("c1"), _cluster("c1")),
    ("patch cluster", "PATCH", clusters_url("c1"), {"spec": {"cordoned": True}}),
    ("delete cluster", "DELETE", clusters_url("c1"), None),
    ("cluster status", "PUT", clusters_url("c1", "status"), _cluster("c1")),
    ("metrics", "GET", "/metrics", None),
]


@pytest.mark.parametrize(("what", "method", "path", "body"), _FORBIDDEN_FOR_RESEARCHER,
                         ids=[c[0] for c in _FORBIDDEN_FOR_RESEARCHER])
async def test_researcher_outside_its_namespace_or_writing_clusters_gets_403(
    hub: RunningHub, what: str, method: str, path: str, body: Any
) -> None:
    # The objects exist, so a 403 cannot be a 404 in disguise.
    assert (await hub.request("POST", jobs_url("team-b"), body=job("team-b", "j1")))[0] == 201
    assert (await hub.request("POST", jobs_url("default"), body=job("default", "j1")))[0] == 201
    assert (await hub.request("POST", clusters_url(), body=_cluster("c1")))[0] == 201
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else None
    status, answer = await hub.request(method, path, who="researcher", body=body, headers=headers)
    assert status == 403, (what, answer)
    assert answer["kind"] == "Status" and answer["reason"] == "Forbidden" and answer["code"] == 403
    if path != "/metrics":
        assert 'User "bob" cannot' in answer["message"], answer
    # Nothing changed: the team-b job and the cluster are as the admin left them.
    status, kept = await hub.request("GET", jobs_url("team-b", "j1"))
    assert status == 200 and kept["metadata"]["generation"] == 1 and not kept["metadata"].get("deletionTimestamp")
    status, cluster = await hub.request("GET", clusters_url("c1"))
    assert status == 200 and cluster["metadata"]["generation"] == 1
    status, listing = await hub.request("GET", jobs_url("team-b"))
    assert [i["metadata"]["name"] for i in listing["items"]] == ["j1"]


async def test_researcher_works_in_its_own_namespace_and_reads_clusters(hub: RunningHub) -> None:
    assert (await hub.request("POST", clusters_url(), body=_cluster("c1")))[0] == 201
    status, created = await hub.request("POST", jobs_url("default"), who="researcher", body=job("default", "mine"))
    assert status == 201, created
    for path in (jobs_url("default"), jobs_url("default", "mine"), jobs_url("default", "mine", "status"),
                 clusters_url(), clusters_url("c1")):
        status, answer = await hub.request("GET", path, who="researcher")
        assert status == 200, (path, answer)
    status, _ = await hub.request("PATCH", jobs_url("default", "mine"), who="researcher",
                                  body={"spec": {"suspend": True}},
                                  headers={"Content-Type": "application/merge-patch+json"})
    assert status == 200
    status, _ = await hub.request("DELETE", jobs_url("default", "mine"), who="researcher")
    assert status == 200


async def test_viewer_reads_everything_and_writes_nothing(hub: RunningHub) -> None:
    assert (await hub.request("POST", jobs_url("team-b"), body=job("team-b", "j1")))[0] == 201
    for path in (jobs_url(), jobs_url("team-b"), jobs_url("team-b", "j1"), clusters_url(), "/metrics"):
        status, answer = await hub.request("GET", path, who="viewer")
        assert status == 200, (path, answer)
    for method, path, body in (("POST", jobs_url("default"), job("default", "v")),
                               ("DELETE", jobs_url("team-b", "j1"), None),
                               ("POST", clusters_url(), _cluster("c2"))):
        status, answer = await hub.request(method, path, who="viewer", body=body)
        assert status == 403 and answer["reason"] == "Forbidden", (method, path)
    assert (await hub.request("GET", jobs_url("default")))[1]["items"] == []


async def test_admin_writes_member_clusters(hub: RunningHub) -> None:
    status, created = await hub.request("POST", clusters_url(), body=_cluster("c1"))
    assert status == 201, created
    status, patched = await hub.request("PATCH", clusters_url("c1"), body={"spec": {"cordoned": True}},
                                        headers={"Content-Type": "application/merge-patch+json"})
    assert status == 200 and patched["spec"]["cordoned"] is True
    status, _ = await hub.request("DELETE", clusters_url("c1"))
    assert status == 200
    assert (await hub.request("GET", clusters_url("c1")))[0] == 404


@pytest.mark.kubectl
async def test_kubectl_shows_forbidden_like_kube_apiserver(hub: RunningHub) -> None:
    for args in (("get", "tj", "-n", "team-b"), ("get", "tj", "-A"), ("get", "tj", "x", "-n", "team-b"),
                 ("create", "-n", "team-b", "-f", "-")):
        stdin = None
        if args[0] == "create":
            import json

            stdin = json.dumps(job("team-b", "sneaky"))
        code, _, err = await hub.kubectl("researcher", *args, stdin=stdin)
        assert code != 0, args
        assert "Error from server (Forbidden)" in err and 'User "bob" cannot' in err, (args, err)
    code, out, err = await hub.kubectl("researcher", "get", "tj")
    assert code == 0, err
    code, _, err = await hub.kubectl("viewer", "delete", "tj", "nothing", "-n", "default")
    assert code != 0 and "Error from server (Forbidden)" in err
