"""Events through a real hub's HTTP API (HTTPS, token auth, sqlite) and real kubectl.

- core v1 Events: created by the admin, listed with kube's field selectors, one storage behind both
  views; events.k8s.io/v1 shows the same objects converted (regarding, note, deprecatedCount), in
  lists, gets and watches, and is read-only (405 for writes);
- who may do what: researchers read Events in their own namespaces through both APIs and nothing else
  (not other namespaces, not across namespaces, no writes); the viewer reads; without a token 401;
- bad input: malformed, hostile, oversized and wrongly typed Events are refused with a Status naming
  the field, and nothing is stored;
- `kubectl get events` / `events.events.k8s.io` print kube's columns; `kubectl api-resources` exits 0.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from federator.controllers.settings import EventSettings, HubSettings
from federator.controllers.events import event_recording

from ..controllers.jobtest_support import wait_until
from ..hub.hubtest_support import TOKENS, RunningHub, job, start_hub

CORE = "/api/v1"
V1 = "/apis/events.k8s.io/v1"


def event(name: str = "resnet.1", namespace: str = "default", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob", "name": "resnet",
                           "namespace": namespace, "uid": "uid-1"},
        "reason": "Placed", "message": "placed in c1", "type": "Normal",
        "source": {"component": "federator-placement"}, "reportingComponent": "federator.dev/placement",
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z", "count": 2,
        "eventTime": "2026-01-01T00:00:00.000000Z",
    }
    body.update(changes)
    return body


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[RunningHub]:
    async with start_hub(tmp_path / "hub") as running:
        yield running


async def test_both_views_show_one_stored_event(hub: RunningHub) -> None:
    status, created = await hub.request("POST", f"{CORE}/namespaces/default/events", body=event())
    assert status == 201, created
    status, other = await hub.request("POST", f"{CORE}/namespaces/team-b/events",
                                      body=event("other.1", "team-b", reason="Dispatched", involvedObject={
                                          "kind": "TrainingJob", "name": "other", "namespace": "team-b"}))
    assert status == 201, other
    status, shown = await hub.request("GET", f"{V1}/namespaces/default/events/resnet.1")
    assert status == 200
    assert shown["apiVersion"] == "events.k8s.io/v1" and shown["kind"] == "Event"
    assert shown["metadata"]["uid"] == created["metadata"]["uid"]
    assert shown["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert shown["regarding"] == created["involvedObject"] and shown["note"] == "placed in c1"
    assert shown["deprecatedCount"] == 2 and shown["reportingController"] == "federator.dev/placement"
    assert shown["deprecatedLastTimestamp"] == "2026-01-01T00:01:00Z"
    assert "involvedObject" not in shown and "message" not in shown
    # kubectl describe's query, on core v1
    describe = ("involvedObject.name=resnet,involvedObject.namespace=default,involvedObject.kind=TrainingJob,"
                "involvedObject.uid=uid-1")
    status, listing = await hub.request("GET", f"{CORE}/namespaces/default/events?fieldSelector={describe}&limit=500")
    assert status == 200 and [e["metadata"]["name"] for e in listing["items"]] == ["resnet.1"]
    assert listing["kind"] == "EventList" and listing["apiVersion"] == "v1"
    # the same through events.k8s.io, with its own field names
    status, listing = await hub.request("GET", f"{V1}/events?fieldSelector=regarding.name=resnet")
    assert status == 200 and listing["kind"] == "EventList" and listing["apiVersion"] == "events.k8s.io/v1"
    assert [(e["metadata"]["name"], e["note"]) for e in listing["items"]] == [("resnet.1", "placed in c1")]
    status, listing = await hub.request("GET", f"{V1}/events?fieldSelector=reportingController%21%3Dx,type=Normal")
    assert status == 200 and len(listing["items"]) == 2
    # each view takes only its own field names (kube: 400 BadRequest)
    for path, selector in ((CORE, "regarding.name=resnet"), (V1, "involvedObject.name=resnet"),
                           (V1, "source=x"), (CORE, "note=x")):
        status, error = await hub.request("GET", f"{path}/events?fieldSelector={selector}")
        assert status == 400 and error["reason"] == "BadRequest", (path, selector, error)
    # one object deleted through core v1 is gone from both
    status, _ = await hub.request("DELETE", f"{CORE}/namespaces/team-b/events/other.1")
    assert status == 200
    status, _ = await hub.request("GET", f"{V1}/namespaces/team-b/events/other.1")
    assert status == 404


async def test_the_events_v1_view_is_read_only(hub: RunningHub) -> None:
    assert (await hub.request("POST", f"{CORE}/namespaces/default/events", body=event()))[0] == 201
    v1_body = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x.1"},
               "eventTime": "2026-01-01T00:00:00.000000Z", "reason": "R", "action": "A",
               "reportingController": "c", "reportingInstance": "i", "regarding": {"kind": "X", "name": "y"}}
    for method, path, body in (("POST", f"{V1}/namespaces/default/events", v1_body),
                               ("PUT", f"{V1}/namespaces/default/events/resnet.1", v1_body),
                               ("PATCH", f"{V1}/namespaces/default/events/resnet.1", {"note": "x"}),
                               ("DELETE", f"{V1}/namespaces/default/events/resnet.1", None),
                               ("DELETE", f"{V1}/namespaces/default/events", None)):
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else None
        status, error = await hub.request(method, path, body=body, headers=headers)
        assert status == 405 and error["reason"] == "MethodNotAllowed", (method, path, error)
    status, kept = await hub.request("GET", f"{CORE}/namespaces/default/events/resnet.1")
    assert status == 200 and kept["message"] == "placed in c1"
    status, listing = await hub.request("GET", f"{V1}/namespaces/default/events")
    assert [e["metadata"]["name"] for e in listing["items"]] == ["resnet.1"]


async def test_a_watch_on_the_view_streams_converted_events(hub: RunningHub) -> None:
    status, listing = await hub.request("GET", f"{V1}/namespaces/default/events")
    assert status == 200
    rv = listing["metadata"]["resourceVersion"]
    url = f"{hub.url}{V1}/namespaces/default/events?watch=true&resourceVersion={rv}&timeoutSeconds=20"
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKENS['researcher']}"}) as session:
        async with session.get(url, ssl=hub.ssl_context()) as response:
            assert response.status == 200
            assert (await hub.request("POST", f"{CORE}/namespaces/default/events", body=event()))[0] == 201
            line = await asyncio.wait_for(response.content.readline(), 20)
    watched = json.loads(line)
    assert watched["type"] == "ADDED"
    assert watched["object"]["apiVersion"] == "events.k8s.io/v1" and watched["object"]["note"] == "placed in c1"
    assert "message" not in watched["object"]


@pytest.mark.parametrize(("who", "method", "path", "allowed"), [
    ("researcher", "GET", f"{CORE}/namespaces/default/events", True),
    ("researcher", "GET", f"{V1}/namespaces/default/events", True),
    ("researcher", "GET", f"{CORE}/namespaces/default/events/resnet.1", True),
    ("researcher", "GET", f"{V1}/namespaces/default/events/resnet.1", True),
    ("researcher", "GET", f"{CORE}/namespaces/team-b/events", False),
    ("researcher", "GET", f"{V1}/namespaces/team-b/events", False),
    ("researcher", "GET", f"{CORE}/events", False),
    ("researcher", "GET", f"{V1}/events", False),
    ("researcher", "POST", f"{CORE}/namespaces/default/events", False),
    ("researcher", "DELETE", f"{CORE}/namespaces/default/events/resnet.1", False),
    ("researcher", "PATCH", f"{CORE}/namespaces/default/events/resnet.1", False),
    ("other", "GET", f"{CORE}/namespaces/team-b/events", True),
    ("other", "GET", f"{CORE}/namespaces/default/events/resnet.1", False),
    ("viewer", "GET", f"{CORE}/events", True),
    ("viewer", "GET", f"{V1}/events", True),
    ("viewer", "POST", f"{CORE}/namespaces/default/events", False),
])
async def test_who_may_read_and_write_events(hub: RunningHub, who: str, method: str, path: str,
                                             allowed: bool) -> None:
    assert (await hub.request("POST", f"{CORE}/namespaces/default/events", body=event()))[0] == 201
    body = event("new.1") if method == "POST" else ({"message": "x"} if method == "PATCH" else None)
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else None
    status, answer = await hub.request(method, path, who=who, body=body, headers=headers)
    if allowed:
        assert status == 200, answer
        return
    assert status == 403 and answer["reason"] == "Forbidden", answer
    status, kept = await hub.request("GET", f"{CORE}/namespaces/default/events/resnet.1")
    assert status == 200 and kept["message"] == "placed in c1"
    assert (await hub.request("GET", f"{CORE}/namespaces/default/events/new.1"))[0] == 404


async def test_without_a_token_events_are_401(hub: RunningHub) -> None:
    for path in (f"{CORE}/namespaces/default/events", f"{V1}/events"):
        status, error = await hub.request("GET", path, who=None)
        assert status == 401 and error["reason"] == "Unauthorized"


@pytest.mark.parametrize(("body", "field", "code"), [
    ({"involvedObject": None}, "involvedObject", 422),
    ({"involvedObject": "resnet"}, "involvedObject", 422),
    ({"involvedObject": {"name": 7, "kind": "TrainingJob"}}, "involvedObject.name", 422),
    ({"involvedObject": {"name": "resnet", "namespace": "elsewhere"}}, "involvedObject.namespace", 422),
    ({"type": "Bogus"}, "type", 422),
    ({"count": -1}, "count", 422),
    ({"count": 2**40}, "count", 422),
    ({"count": "3"}, "count", 422),
    ({"reason": "R" * 129}, "reason", 422),
    ({"action": "A" * 129}, "action", 422),
    ({"message": ["a list"]}, "message", 422),
    ({"lastTimestamp": "yesterday"}, "lastTimestamp", 422),
    ({"eventTime": "2026-01-01T00:00:00Z"}, "eventTime", 422),
    ({"series": {"count": 2, "lastObservedTime": "soon"}}, "series.lastObservedTime", 422),
    ({"source": {"component": {"nested": True}}}, "source.component", 422),
    ({"metadata": {"name": "Bad_Name", "namespace": "default"}}, "metadata.name", 422),
])
async def test_bad_events_are_refused_and_nothing_is_stored(hub: RunningHub, body: dict[str, Any], field: str,
                                                            code: int) -> None:
    bad = event(**body)
    status, error = await hub.request("POST", f"{CORE}/namespaces/default/events", body=bad)
    assert status == code and error["reason"] == "Invalid", error
    assert field in [c.get("field") for c in error["details"]["causes"]], error
    status, listing = await hub.request("GET", f"{CORE}/events")
    assert status == 200 and listing["items"] == []


async def test_hostile_bodies_are_refused(hub: RunningHub) -> None:
    path = f"{CORE}/namespaces/default/events"
    cases: list[tuple[bytes, dict[str, str]]] = [
        (b"[1, 2, 3]", {}),
        (b"{not json", {}),
        (json.dumps(event(apiVersion="events.k8s.io/v1")).encode(), {}),
        (json.dumps(event(kind="Pod")).encode(), {}),
        (json.dumps(event(surprise="field")).encode(), {"X-Strict": "1"}),
        (json.dumps(event(message="x" * (4 * 1024 * 1024))).encode(), {}),
        (b"[" * 5000 + b"]" * 5000, {}),
    ]
    for data, flags in cases:
        query = "?fieldValidation=Strict" if flags else ""
        status, error = await hub.request("POST", path + query, data=data)
        assert status in (400, 413, 422), (data[:80], status, error)
        assert isinstance(error, dict) and error["kind"] == "Status", error
    status, listing = await hub.request("GET", f"{CORE}/events")
    assert status == 200 and listing["items"] == []


@pytest.mark.kubectl
async def test_kubectl_lists_events_through_both_apis(hub: RunningHub) -> None:
    assert (await hub.request("POST", f"{CORE}/namespaces/default/events", body=event()))[0] == 201
    code, out, err = await hub.kubectl("researcher", "get", "events")
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert row.split()[1:] == ["Normal", "Placed", "trainingjob/resnet", "placed", "in", "c1"]
    code, out, err = await hub.kubectl("researcher", "get", "events.events.k8s.io", "-o", "wide")
    assert code == 0, err
    assert "federator-placement" in out and "trainingjob/resnet" in out and "resnet.1" in out
    code, out, err = await hub.kubectl("researcher", "get", "events", "-n", "team-b")
    assert code == 1 and "Forbidden" in err
    code, out, err = await hub.kubectl("admin", "api-resources")
    assert code == 0, err
    rows = {tuple(line.split()[:3]) for line in out.splitlines()[1:]}
    assert ("events", "ev", "v1") in rows and ("events", "ev", "events.k8s.io/v1") in rows
    assert ("trainingjobs", "tj", "federator.dev/v1alpha1") in rows


async def test_the_leader_records_through_its_store_and_expires_old_events(tmp_path: Path) -> None:
    """kube's TTL runs from an Event's last write (or last observation, whichever is later): an Event
    written through the API and one the controllers record are both gone once that is past."""
    settings = HubSettings(state_dir=tmp_path / "hub" / "state",
                           events=EventSettings(ttl_seconds=2.0, gc_interval_seconds=0.1))
    async with start_hub(tmp_path / "hub", controllers=[event_recording], settings=settings) as hub:
        old = event("old.1", lastTimestamp="2020-01-01T00:00:00Z", firstTimestamp="2020-01-01T00:00:00Z",
                    eventTime=None)
        assert (await hub.request("POST", f"{CORE}/namespaces/default/events", body=old))[0] == 201
        status, created = await hub.request("POST", "/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs",
                                            body=job("default", "resnet"))
        assert status == 201, created
        hub.context.events.record(created, controller="placement", reason="Placed", message="placed in c1")

        async def names() -> list[str]:
            status, listing = await hub.request("GET", f"{CORE}/namespaces/default/events")
            assert status == 200
            return sorted(e["involvedObject"]["name"] for e in listing["items"])

        def recorded() -> bool:
            return hub.context.events.counts.get("written") == 1

        async def all_expired() -> bool:
            return await names() == []

        await wait_until(recorded, timeout=20, what="the recorded Event written by the leader")
        assert hub.state.context.fencing is not None  # the leader's context: its writes carry the fencing token
        await wait_until(all_expired, timeout=30, what="both Events expired")
        assert hub.context.events.counts.get("expired") == 2
