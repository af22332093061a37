"""`kubectl auth whoami` / `can-i` against a real hub: the reviews answer what the request gets.

The full matrix (every verb x every resource and subresource in discovery x namespace x role) goes
through the API: for each cell the
hub is asked with a SelfSubjectAccessReview, the request itself is sent, and the two must agree
(allowed <=> the request is not 403); the SelfSubjectRulesReview of the same user and namespace,
matched as kube's RBAC matches rules, must agree too. A sample goes through real kubectl, each
`can-i` answer checked against what kubectl then gets doing it. Hostile review bodies get a clear
Status and change nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from ..hub.hubtest_support import TOKENS, RunningHub, job, start_hub

G = "federator.dev"
GV = f"/apis/{G}/v1alpha1"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SSRR = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
ROLES = ("admin", "researcher", "other", "viewer")  # researcher owns "default", other owns "team-b"
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
SUB_VERBS = ("get", "create", "update", "patch", "delete")  # a subresource has no collection URL


@dataclass(frozen=True)
class Cell:
    """One request: its review attributes and how to send it."""

    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    method: str
    path: str


METHOD_OF = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT", "patch": "PATCH",
             "delete": "DELETE", "deletecollection": "DELETE"}


async def _cells(hub: RunningHub) -> list[Cell]:
    """Every resource and subresource the hub's discovery lists, with every verb that has a URL,
    in the researcher's own namespace, another one and (collections) across namespaces; plus a few
    non-resource paths."""
    cells: list[Cell] = []
    status, groups = await hub.request("GET", "/apis", who="admin")
    assert status == 200
    bases = [("", "/api/v1")] + [(g["name"], f"/apis/{g['preferredVersion']['groupVersion']}")
                                 for g in groups["groups"]]
    for group, base in bases:
        status, listing = await hub.request("GET", base, who="admin")
        assert status == 200
        for entry in listing["resources"]:
            plural, _, sub = entry["name"].partition("/")
            namespaced = entry["namespaced"]
            for ns in ("default", "team-b", "") if namespaced else ("",):
                prefix = f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"
                for verb in (VERBS if not sub else SUB_VERBS):
                    collection = not sub and verb in ("list", "watch", "create", "deletecollection")
                    if namespaced and not ns and not (collection and verb != "create"):
                        continue  # only list, watch and deletecollection have a URL across namespaces
                    if entry["verbs"] == ["create"] and verb != "create":
                        continue  # the reviews: create is all there is
                    path = prefix if collection else f"{prefix}/x" + (f"/{sub}" if sub else "")
                    if verb == "watch":
                        path += "?watch=1"
                    if (group, plural) == ("", "namespaces") and not collection:
                        # a Namespace is authorized in itself (kube's RequestInfo: /api/v1/namespaces/x is
                        # in namespace x), so ask about the researcher's own one and another
                        for name in ("default", "team-b"):
                            named = f"{prefix}/{name}" + (f"/{sub}" if sub else "")
                            cells.append(Cell(verb, group, plural, sub, name, METHOD_OF[verb], named))
                        continue
                    cells.append(Cell(verb, group, plural, sub, ns, METHOD_OF[verb], path))
    for path, verb in (("/metrics", "get"), ("/version", "get"), ("/apis", "get"), ("/openapi/v3", "get"),
                       ("/debug/pprof", "get"), ("/apis", "post")):
        cells.append(Cell(verb, "", "", "", "", verb.upper(), path))
    return cells


class Client:
    """One user's keep-alive HTTPS session to the hub."""

    def __init__(self, hub: RunningHub, who: str, session: aiohttp.ClientSession) -> None:
        self.hub, self.who, self.session = hub, who, session

    async def send(self, method: str, path: str, body: Any = None,
                   content_type: str = "application/json") -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {TOKENS[self.who]}"}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        async with self.session.request(method, self.hub.url + path, data=data, headers=headers,
                                        ssl=self.hub.ssl_context()) as response:
            if response.status == 200 and "watch=1" in path:
                return response.status, None  # an allowed watch: the stream is open, that is the answer
            text = await response.text()
            return response.status, json.loads(text) if response.content_type == "application/json" else text


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[RunningHub]:
    async with start_hub(tmp_path / "hub") as running:
        yield running


async def _clients(hub: RunningHub) -> tuple[aiohttp.ClientSession, dict[str, Client]]:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=8))
    return session, {who: Client(hub, who, session) for who in ROLES}


def _access_review(cell: Cell) -> dict[str, Any]:
    if not cell.resource:
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"nonResourceAttributes": {"path": cell.path, "verb": cell.verb}}}
    attributes = {"verb": cell.verb, "group": cell.group, "resource": cell.resource,
                  "subresource": cell.subresource, "namespace": cell.namespace,
                  "name": "" if cell.path.split("?")[0].endswith(cell.resource)
                  else cell.namespace if cell.resource == "namespaces" else "x"}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}}


def _rules_allow(status: dict[str, Any], cell: Cell) -> bool:
    """kube's RBAC rule matching (plugin/pkg/auth/authorizer/rbac/rbac.go RuleAllows), written
    independently of federator.apiserver.auth, over what the rules review returned."""
    if not cell.resource:
        return any((cell.verb in r["verbs"] or "*" in r["verbs"])
                   and any(u == cell.path or (u.endswith("*") and cell.path.startswith(u[:-1]))
                           for u in r["nonResourceURLs"]) for r in status["nonResourceRules"])
    wanted = f"{cell.resource}/{cell.subresource}" if cell.subresource else cell.resource
    return any((cell.verb in r["verbs"] or "*" in r["verbs"])
               and (cell.group in r["apiGroups"] or "*" in r["apiGroups"])
               and (wanted in r["resources"] or "*" in r["resources"]
                    or (cell.subresource and f"*/{cell.subresource}" in r["resources"]))
               for r in status["resourceRules"])


async def _body_for(cell: Cell) -> Any:
    return {} if cell.method in ("POST", "PUT", "PATCH") else None


async def test_can_i_answers_what_every_request_gets(hub: RunningHub) -> None:
    admin_jobs = [job("default", "x"), job("team-b", "x")]
    for obj in admin_jobs:
        status, body = await hub.request("POST", f"{GV}/namespaces/{obj['metadata']['namespace']}/trainingjobs",
                                         body=obj)
        assert status == 201, body
    cells = await _cells(hub)
    resources = {(c.group, c.resource, c.subresource) for c in cells if c.resource}
    assert {(G, "trainingjobs", "status"), (G, "trainingjobs", "log"), (G, "memberclusters", "failoverplan"),
            ("", "events", ""), ("events.k8s.io", "events", ""), (G, "drillreports", ""),
            ("authorization.k8s.io", "selfsubjectaccessreviews", "")} <= resources, resources
    session, clients = await _clients(hub)
    mismatches: list[str] = []
    counts = {"allowed": 0, "denied": 0}
    async with session:
        rules: dict[tuple[str, str], dict[str, Any]] = {}
        for who in ROLES:
            for ns in ("default", "team-b", ""):
                status, body = await clients[who].send("POST", SSRR, {"spec": {"namespace": ns}})
                assert status == 201, body
                assert body["status"]["incomplete"] is False
                rules[(who, ns)] = body["status"]
        semaphore = asyncio.Semaphore(8)

        async def check(who: str, cell: Cell) -> None:
            async with semaphore:
                status, review = await clients[who].send("POST", SSAR, _access_review(cell))
                assert status == 201, review
                answer = review["status"]["allowed"]
                code, body = await clients[who].send(cell.method, cell.path, await _body_for(cell))
            got = code != 403
            counts["allowed" if answer else "denied"] += 1
            if answer != got:
                mismatches.append(f"{who} {cell.verb} {cell.path}: can-i says {answer}, request got {code} {body}")
            if code == 403:
                assert body["reason"] == "Forbidden" and body["message"].endswith(review["status"]["reason"])
            if _rules_allow(rules[(who, cell.namespace)], cell) != answer:
                mismatches.append(f"{who} {cell.verb} {cell.path}: the rules review disagrees with can-i ({answer})")

        # Reads first, then writes, deletes last: a delete only changes 404s into 404s, never a 403.
        order = {"GET": 0, "POST": 1, "PUT": 1, "PATCH": 1, "DELETE": 2}
        for phase in (0, 1, 2):
            await asyncio.gather(*(check(who, cell) for who in ROLES for cell in cells
                                   if order[cell.method] == phase))
    assert not mismatches, "\n".join(mismatches)
    # The matrix is not trivially all-yes or all-no.
    assert counts["allowed"] > 100 and counts["denied"] > 100, counts


async def test_rules_review_lists_own_namespace_rules_only_there(hub: RunningHub) -> None:
    session, clients = await _clients(hub)
    async with session:
        mine = (await clients["researcher"].send("POST", SSRR, {"spec": {"namespace": "default"}}))[1]["status"]
        elsewhere = (await clients["researcher"].send("POST", SSRR, {"spec": {"namespace": "team-b"}}))[1]["status"]
    create_jobs = {"verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                   "apiGroups": [G], "resources": ["trainingjobs"]}
    assert create_jobs in mine["resourceRules"]
    assert create_jobs not in elsewhere["resourceRules"]
    assert {"verbs": ["get", "list", "watch"], "apiGroups": [G], "resources": ["memberclusters"]} in \
        elsewhere["resourceRules"]


async def test_whoami_names_the_caller(hub: RunningHub) -> None:
    status, body = await hub.request("POST", WHOAMI, who="researcher",
                                     body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert status == 201, body
    assert body["kind"] == "SelfSubjectReview" and body["apiVersion"] == "authentication.k8s.io/v1"
    assert body["status"]["userInfo"] == {
        "username": "bob", "uid": "uid-bob", "groups": ["federator:researcher", "ns:default", "system:authenticated"]}


async def test_reviews_are_in_discovery(hub: RunningHub) -> None:
    status, groups = await hub.request("GET", "/apis", who="researcher")
    assert status == 200
    names = {g["name"]: g for g in groups["groups"]}
    assert names["authorization.k8s.io"]["preferredVersion"]["groupVersion"] == "authorization.k8s.io/v1"
    assert "authentication.k8s.io" in names
    status, resources = await hub.request("GET", "/apis/authorization.k8s.io/v1", who="viewer")
    assert status == 200
    assert {(r["name"], r["kind"], tuple(r["verbs"]), r["namespaced"]) for r in resources["resources"]} == {
        ("selfsubjectaccessreviews", "SelfSubjectAccessReview", ("create",), False),
        ("selfsubjectrulesreviews", "SelfSubjectRulesReview", ("create",), False),
    }
    status, group = await hub.request("GET", "/apis/authentication.k8s.io", who="viewer")
    assert status == 200 and group["versions"] == [{"groupVersion": "authentication.k8s.io/v1", "version": "v1"}]
    assert (await hub.request("GET", "/apis/authorization.k8s.io/v2", who="viewer"))[0] == 404


BOTH = {"spec": {"resourceAttributes": {"verb": "get", "resource": "trainingjobs"},
                 "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}}


HOSTILE: list[tuple[str, Any, str, int, str]] = [
    (SSAR, BOTH, "application/json", 422, "exactly one of nonResourceAttributes or resourceAttributes"),
    (SSAR, {"spec": {}}, "application/json", 422, "exactly one of nonResourceAttributes or resourceAttributes"),
    (SSAR, {}, "application/json", 422, "exactly one of"),
    (SSAR, [1, 2], "application/json", 400, "must be a SelfSubjectAccessReview object"),
    (SSAR, {"kind": "Pod"}, "application/json", 400, "does not match the expected kind"),
    (SSAR, {"apiVersion": "v1"}, "application/json", 400, "does not match the expected API version"),
    (SSAR, {"spec": "all"}, "application/json", 400, "spec must be an object"),
    (SSAR, {"spec": {"resourceAttributes": {"verb": 7}}}, "application/json", 400, "must be a string"),
    (SSAR, {"spec": {"resourceAttributes": "x"}}, "application/json", 400, "must be an object"),
    (SSAR, b"{not json", "application/json", 400, "error decoding request body as JSON"),
    (SSAR, b"a: &a [1]\nb: *a\n", "application/yaml", 400, "YAML aliases are not accepted"),
    (SSAR, b"{}", "text/plain", 415, "the body of the request was in an unknown format"),
    (SSRR, {"spec": {"namespace": ["default"]}}, "application/json", 400, "spec.namespace must be a string"),
    (WHOAMI, {"kind": "SelfSubjectAccessReview"}, "application/json", 400, "does not match the expected kind"),
    (WHOAMI, b"", "application/json", 400, "the request body is empty"),
]


async def test_hostile_review_bodies_get_a_clear_status(hub: RunningHub) -> None:
    for path, body, content_type, code, words in HOSTILE:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        status, answer = await hub.request("POST", path, who="researcher", data=data,
                                           headers={"Content-Type": content_type})
        assert status == code, (body, answer)
        assert answer["kind"] == "Status" and words in answer["message"], (body, answer)
    # Nothing was stored: the reviews are not a collection anyone can read back.
    assert (await hub.request("GET", SSAR, who="admin"))[0] == 405


async def test_reviews_need_a_token_are_create_only_and_cluster_scoped(hub: RunningHub) -> None:
    assert (await hub.request("POST", SSAR, who=None, body={}))[0] == 401
    assert (await hub.request("POST", SSAR, who="wrong", body={}))[0] == 401
    for method in ("GET", "PUT", "DELETE", "PATCH"):
        status, body = await hub.request(method, SSAR, who="admin", body={} if method != "GET" else None)
        assert status == 405, (method, body)
    assert (await hub.request("POST", "/apis/authorization.k8s.io/v1/namespaces/default/selfsubjectaccessreviews",
                              who="admin", body={}))[0] == 404
    assert (await hub.request("GET", f"{SSAR}/x", who="admin"))[0] == 404
    big = {"spec": {"resourceAttributes": {"verb": "get", "resource": "x" * (4 * 1024 * 1024)}}}
    status, body = await hub.request("POST", SSAR, who="researcher", body=big)
    assert status == 413 and body["reason"] == "RequestEntityTooLarge"


# ------------------------------------------------------------------ real kubectl

JOB_YAML = yaml.safe_dump(job("default", "probe"))


@pytest.mark.kubectl
async def test_kubectl_whoami(hub: RunningHub) -> None:
    code, out, err = await hub.kubectl("researcher", "auth", "whoami")
    assert code == 0, err
    lines = [line.split(None, 1) for line in out.strip().splitlines()]
    assert lines[0] == ["ATTRIBUTE", "VALUE"]
    table = dict((k, v.strip()) for k, v in lines[1:])
    assert table == {"Username": "bob", "UID": "uid-bob",
                     "Groups": "[federator:researcher ns:default system:authenticated]"}


@dataclass(frozen=True)
class Sample:
    who: str
    can_i: tuple[str, ...]
    action: tuple[str, ...]
    stdin: str | None = None


SAMPLES = (
    Sample("researcher", ("create", "tj", "-n", "team-b"), ("create", "-n", "team-b", "-f", "-"),
           JOB_YAML.replace("namespace: default", "namespace: team-b")),
    Sample("researcher", ("create", "tj", "-n", "default"), ("create", "-n", "default", "-f", "-"), JOB_YAML),
    Sample("viewer", ("delete", "tj", "-n", "default"), ("delete", "tj", "probe", "-n", "default", "--wait=false")),
    Sample("other", ("list", "tj", "-n", "default"), ("get", "tj", "-n", "default")),
    Sample("researcher", ("list", "mc"), ("get", "mc")),
    Sample("researcher", ("get", "/metrics"), ("get", "--raw", "/metrics")),
    Sample("viewer", ("get", "/metrics"), ("get", "--raw", "/metrics")),
)


@pytest.mark.kubectl
async def test_kubectl_can_i_matches_what_kubectl_then_gets(hub: RunningHub) -> None:
    answers = await asyncio.gather(*(hub.kubectl(s.who, "auth", "can-i", *s.can_i) for s in SAMPLES))
    seen = set()
    for sample, (code, out, err) in zip(SAMPLES, answers, strict=True):
        said = out.strip().split()[0] if out.strip() else ""
        assert said in ("yes", "no"), (sample, out, err)
        assert code == (0 if said == "yes" else 1), (sample, code, err)
        seen.add(said)
        code, out, err = await hub.kubectl(sample.who, *sample.action, stdin=sample.stdin)
        forbidden = "Error from server (Forbidden)" in err
        assert forbidden == (said == "no"), (sample, said, code, out, err)
        if said == "yes":
            assert code == 0, (sample, err)
    assert seen == {"yes", "no"}


@pytest.mark.kubectl
async def test_kubectl_can_i_list(hub: RunningHub) -> None:
    code, out, err = await hub.kubectl("researcher", "auth", "can-i", "--list", "-n", "default")
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line and not line.startswith(" ")}
    assert "[create delete get list patch update watch]" in rows["trainingjobs.federator.dev"]
    assert "[get list watch]" in rows["memberclusters.federator.dev"]
    code, out, err = await hub.kubectl("researcher", "auth", "can-i", "--list", "-n", "team-b")
    assert code == 0, err
    assert "trainingjobs.federator.dev " not in out and "memberclusters.federator.dev" in out
