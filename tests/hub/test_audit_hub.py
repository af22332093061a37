"""The hub's audit log (federator/apiserver/audit.py) for real requests to a real hub: kube's Event fields for
create/get/list/patch/delete and for the refusals (401, 403, 404, 422), watches with ResponseStarted and
ResponseComplete, and no credential or token anywhere in the file at RequestResponse, whatever was sent."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from federator.apiserver.audit import AuditLog, AuditLogSettings, iter_events, parse_policy

from .hubtest_support import TOKENS, RunningHub, clusters_url, job, jobs_url, start_hub
from .test_credentials import MEMBER_TOKEN, SECRETS, _exercise_every_read_and_write, token_cluster

EVERYTHING = b"""apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: None
    nonResourceURLs: ["/readyz*", "/healthz*", "/livez*"]
  - level: RequestResponse
"""


@pytest.fixture
async def audited(tmp_path: Path) -> AsyncIterator[tuple[RunningHub, AuditLog, Path]]:
    path = tmp_path / "audit" / "audit.log"
    audit = AuditLog(AuditLogSettings(path=str(path), policy=parse_policy(EVERYTHING)))
    async with start_hub(tmp_path / "hub", audit=audit) as hub:
        yield hub, audit, path


async def _events(audit: AuditLog, path: Path) -> list[dict[str, Any]]:
    await asyncio.to_thread(audit.flush)
    return list(iter_events(path))


def _find(events: list[dict[str, Any]], *, verb: str, code: int, stage: str = "ResponseComplete",
          **ref: str) -> dict[str, Any]:
    found = [e for e in events if e["verb"] == verb and e["stage"] == stage and e["responseStatus"]["code"] == code
             and all(e.get("objectRef", {}).get(k) == v for k, v in ref.items())]
    assert len(found) == 1, (verb, code, ref, [(e["verb"], e["requestURI"], e.get("responseStatus")) for e in events])
    return found[0]


_MICROS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


async def test_requests_are_events_with_verb_object_user_and_code(
        audited: tuple[RunningHub, AuditLog, Path]) -> None:
    hub, audit, path = audited
    status, created = await hub.request("POST", jobs_url("default"), who="researcher", body=job("default", "a"))
    assert status == 201, created
    assert (await hub.request("GET", jobs_url("default", "a"), who="researcher"))[0] == 200
    assert (await hub.request("GET", jobs_url("default"), who="researcher"))[0] == 200
    status, _ = await hub.request("PATCH", jobs_url("default", "a"), who="researcher", body={"spec": {"priority": 7}},
                                  headers={"Content-Type": "application/merge-patch+json"})
    assert status == 200
    assert (await hub.request("GET", jobs_url("default", "nope"), who="researcher"))[0] == 404
    assert (await hub.request("POST", jobs_url("team-b"), who="researcher", body=job("team-b", "b")))[0] == 403
    assert (await hub.request("GET", jobs_url("default"), who="nobody"))[0] == 401
    bad = job("default", "bad")
    bad["spec"]["roles"][0]["replicas"] = -1
    assert (await hub.request("POST", jobs_url("default"), who="researcher", body=bad))[0] == 422
    assert (await hub.request("DELETE", jobs_url("default", "a"), who="researcher"))[0] == 200

    events = await _events(audit, path)
    ref = {"apiGroup": "federator.dev", "apiVersion": "v1alpha1", "resource": "trainingjobs", "namespace": "default"}
    create = _find(events, verb="create", code=201, **ref)
    assert create["kind"] == "Event" and create["apiVersion"] == "audit.k8s.io/v1"
    assert create["level"] == "RequestResponse" and create["requestURI"] == jobs_url("default")
    assert create["user"] == {"username": "bob", "uid": "uid-bob", "groups": ["federator:researcher", "ns:default"]}
    assert create["sourceIPs"] == ["127.0.0.1"] and create["userAgent"]
    assert create["requestObject"]["metadata"]["name"] == "a" and create["responseObject"]["metadata"]["uid"]
    assert _MICROS.match(create["requestReceivedTimestamp"]) and _MICROS.match(create["stageTimestamp"])
    assert create["stageTimestamp"] >= create["requestReceivedTimestamp"]
    assert create["responseStatus"] == {"metadata": {}, "code": 201}
    # the same request's RequestReceived (this policy omits no stage), same auditID
    received = [e for e in events if e["auditID"] == create["auditID"] and e["stage"] == "RequestReceived"]
    assert len(received) == 1 and "responseStatus" not in received[0]

    assert _find(events, verb="get", code=200, name="a", **ref)["objectRef"]["name"] == "a"
    assert _find(events, verb="list", code=200, **ref)["responseObject"]["kind"] == "TrainingJobList"
    patch = _find(events, verb="patch", code=200, name="a", **ref)
    assert patch["requestObject"] == {"spec": {"priority": 7}}
    _find(events, verb="delete", code=200, name="a", **ref)
    missing = _find(events, verb="get", code=404, name="nope", **ref)
    assert missing["responseStatus"]["reason"] == "NotFound" and missing["responseStatus"]["status"] == "Failure"
    forbidden = _find(events, verb="create", code=403, namespace="team-b")
    assert forbidden["user"]["username"] == "bob" and forbidden["responseStatus"]["reason"] == "Forbidden"
    assert "requestObject" not in forbidden  # refused before the body was read
    unauthenticated = _find(events, verb="list", code=401, **ref)
    assert unauthenticated["user"] == {}
    invalid = _find(events, verb="create", code=422, **ref)
    assert invalid["responseStatus"]["reason"] == "Invalid" and "replicas" in invalid["responseStatus"]["message"]
    # every answer carries its event's auditID, as kube-apiserver's Audit-Id header
    async with aiohttp.ClientSession() as session:
        async with session.get(hub.url + "/version", ssl=hub.ssl_context(),
                               headers={"Authorization": f"Bearer {TOKENS['admin']}"}) as response:
            audit_id = response.headers["Audit-Id"]
    events = await _events(audit, path)
    version = [e for e in events if e["auditID"] == audit_id and e["stage"] == "ResponseComplete"]
    assert len(version) == 1 and version[0]["requestURI"] == "/version" and "objectRef" not in version[0]


async def test_a_watch_is_logged_when_it_starts_and_when_it_ends(audited: tuple[RunningHub, AuditLog, Path]) -> None:
    hub, audit, path = audited
    async with aiohttp.ClientSession() as session:
        async with session.get(hub.url + jobs_url("default") + "?watch=true&timeoutSeconds=1", ssl=hub.ssl_context(),
                               headers={"Authorization": f"Bearer {TOKENS['admin']}"}) as response:
            assert response.status == 200
            audit_id = response.headers["Audit-Id"]
            await response.read()  # the server ends it after timeoutSeconds
    for _ in range(200):  # the handler's last event follows the end of the stream
        events = [e for e in await _events(audit, path) if e["auditID"] == audit_id]
        if any(e["stage"] == "ResponseComplete" for e in events):
            break
        await asyncio.sleep(0.05)
    assert [e["stage"] for e in events] == ["RequestReceived", "ResponseStarted", "ResponseComplete"]
    assert {e["verb"] for e in events} == {"watch"} and events[-1]["responseStatus"]["code"] == 200
    assert "responseObject" not in events[-1]  # a stream is not an object

    # a client that leaves a watch ends it: ResponseComplete still, with the code the stream began with
    async with aiohttp.ClientSession() as session:
        async with session.get(hub.url + jobs_url("default") + "?watch=true&allowWatchBookmarks=true",
                               ssl=hub.ssl_context(), headers={"Authorization": f"Bearer {TOKENS['admin']}"}) as response:
            assert response.status == 200
            left = response.headers["Audit-Id"]

    async def completed() -> list[dict[str, Any]]:
        events = [e for e in await _events(audit, path) if e["auditID"] == left]
        return events if any(e["stage"] == "ResponseComplete" for e in events) else []

    for _ in range(400):
        if events := await completed():
            break
        await asyncio.sleep(0.05)
    assert [e["stage"] for e in events] == ["RequestReceived", "ResponseStarted", "ResponseComplete"]
    assert events[-1]["responseStatus"]["code"] == 200


async def test_no_credential_or_token_reaches_the_audit_log(audited: tuple[RunningHub, AuditLog, Path]) -> None:
    hub, audit, path = audited
    await _exercise_every_read_and_write(hub)
    # patches that carry a credential: merge (redacted as an object) and JSON patch (left out)
    status, _ = await hub.request("POST", clusters_url(), body=token_cluster("second"))
    assert status == 201
    status, _ = await hub.request("PATCH", clusters_url("second"), headers={"Content-Type": "application/merge-patch+json"},
                                  body={"spec": {"connection": {"credentials": {"token": MEMBER_TOKEN + "2"}}}})
    assert status == 200
    status, _ = await hub.request(
        "PATCH", clusters_url("second"), headers={"Content-Type": "application/json-patch+json"},
        body=[{"op": "replace", "path": "/spec/connection/credentials/token", "value": MEMBER_TOKEN + "3"}])
    assert status == 200
    status, _ = await hub.request("PATCH", clusters_url("second") + "?fieldManager=t&force=true", data=json.dumps(
        token_cluster("second")).encode(), headers={"Content-Type": "application/apply-patch+yaml"})
    assert status == 200
    code, out, err = await hub.kubectl("admin", "apply", "-f", "-", stdin=json.dumps(token_cluster("applied")))
    assert code == 0, err

    events = await _events(audit, path)
    text = path.read_text()
    secrets = [*SECRETS, MEMBER_TOKEN + "2", MEMBER_TOKEN + "3", *TOKENS.values()]
    for secret in [*secrets, *(base64.b64encode(s.encode()).decode() for s in secrets)]:
        assert secret not in text, "a credential or token reached the audit log"
    assert not any("headers" in e or "Authorization" in json.dumps(e.get("annotations", {})) for e in events)
    created = _find(events, verb="create", code=201, resource="memberclusters", name="second")
    assert created["requestObject"]["spec"]["connection"]["credentials"] == {"token": "<redacted>"}
    json_patch = [e for e in events if e["verb"] == "patch" and e["stage"] == "ResponseComplete"
                  and e.get("objectRef", {}).get("name") == "second"
                  and e.get("annotations", {}).get("federator.dev/omitted-requestObject")]
    assert len(json_patch) == 1 and "requestObject" not in json_patch[0]
    assert json_patch[0]["responseObject"]["spec"]["connection"]["credentials"] == {"token": "<redacted>"}
