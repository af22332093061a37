"""WATCH over a real socket: framing, resume, bookmarks, timeouts, 410,
selector transitions, Table events, fan-out to many watchers."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from apitest_support import GROUP, Api, widget

W = f"/apis/{GROUP}/v1"
NSW = f"{W}/namespaces/ns1/widgets"
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


class Stream:
    """One open watch: raw lines with a deadline per read."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        line = await asyncio.wait_for(self.resp.content.readline(), timeout)
        assert line, "stream ended"
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        event: dict[str, Any] = orjson.loads(line)
        return event

    async def until(self, pred: Any, timeout: float = 5.0) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            ev = await self.next(max(0.01, deadline - loop.time()))
            if pred(ev):
                return ev

    async def ended(self, timeout: float = 5.0) -> bool:
        line = await asyncio.wait_for(self.resp.content.readline(), timeout)
        return line == b""


async def open_watch(api: Api, path: str, **headers: str) -> Stream:
    resp = await api.session.get(api.url(path), headers=headers or None)
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/json"
    assert resp.headers.get("Transfer-Encoding") == "chunked"
    return Stream(resp)


async def create(api: Api, name: str, **kw: Any) -> dict[str, Any]:
    status, body, _ = await api.request("POST", NSW, json=widget(name, **kw))
    assert status == 201, body
    result: dict[str, Any] = body
    return result


async def test_headers_arrive_before_any_event(api: Api) -> None:
    # opening returns (status + headers) although no event exists yet
    stream = await asyncio.wait_for(open_watch(api, f"{W}/widgets?watch=1&resourceVersion=1"), 5)
    w = await create(api, "w1")
    ev = await stream.next()
    assert ev["type"] == "ADDED" and ev["object"]["metadata"]["resourceVersion"] == w["metadata"]["resourceVersion"]
    stream.resp.close()


async def test_watch_from_resource_version_then_live(api: Api) -> None:
    w1 = await create(api, "w1")
    await create(api, "w2")
    # from w1's RV: only later changes, no synthetic ADDED of w1
    stream = await open_watch(api, f"{W}/widgets?watch=true&resourceVersion={w1['metadata']['resourceVersion']}")
    ev = await stream.next()
    assert (ev["type"], ev["object"]["metadata"]["name"]) == ("ADDED", "w2")
    assert ev["object"]["kind"] == "Widget" and ev["object"]["apiVersion"] == f"{GROUP}/v1"
    status, patched, _ = await api.request("PATCH", f"{NSW}/w1", data=b'{"spec":{"size":5}}',
                                           headers={"Content-Type": "application/merge-patch+json"})
    ev = await stream.next()
    assert ev["type"] == "MODIFIED" and ev["object"]["spec"]["size"] == 5
    assert ev["object"]["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
    await api.request("DELETE", f"{NSW}/w2")
    ev = await stream.next()
    assert ev["type"] == "DELETED" and ev["object"]["metadata"]["name"] == "w2"
    # DELETED carries the last state stamped with the delete's resourceVersion
    status, listing, _ = await api.request("GET", f"{W}/widgets")
    assert ev["object"]["metadata"]["resourceVersion"] == listing["metadata"]["resourceVersion"]
    stream.resp.close()


async def test_watch_without_resource_version_starts_with_synthetic_adds(api: Api) -> None:
    await create(api, "w1")
    await create(api, "w2")
    existing = ["w1", "w2"]
    for i, rv in enumerate(("", "&resourceVersion=0")):
        stream = await open_watch(api, f"{NSW}?watch=1{rv}")
        events = [await stream.next() for _ in existing]
        assert {e["type"] for e in events} == {"ADDED"}
        assert sorted(e["object"]["metadata"]["name"] for e in events) == existing
        await create(api, f"x{i}")
        assert (await stream.next())["object"]["metadata"]["name"] == f"x{i}"
        existing.append(f"x{i}")
        stream.resp.close()


async def test_namespace_and_selector_transitions(api: Api) -> None:
    status, listing, _ = await api.request("GET", f"{W}/widgets")
    rv = listing["metadata"]["resourceVersion"]
    stream = await open_watch(api, f"{NSW}?watch=1&resourceVersion={rv}&labelSelector=app%3Dx")
    await api.request("POST", f"{W}/namespaces/ns2/widgets", json=widget("other", ns="ns2", labels={"app": "x"}))
    await create(api, "w1", labels={"app": "y"})
    # starts matching -> ADDED
    await api.request("PATCH", f"{NSW}/w1", data=b'{"metadata":{"labels":{"app":"x"}}}',
                      headers={"Content-Type": "application/merge-patch+json"})
    ev = await stream.next()
    assert (ev["type"], ev["object"]["metadata"]["name"]) == ("ADDED", "w1")
    # stops matching -> DELETED (with the new state)
    await api.request("PATCH", f"{NSW}/w1", data=b'{"metadata":{"labels":{"app":"z"}}}',
                      headers={"Content-Type": "application/merge-patch+json"})
    ev = await stream.next()
    assert ev["type"] == "DELETED" and ev["object"]["metadata"]["labels"] == {"app": "z"}
    stream.resp.close()


async def test_field_selector_watch_as_kubectl_delete_uses_it(api: Api) -> None:
    await create(api, "w1")
    await create(api, "w2")
    status, listing, _ = await api.request("GET", f"{NSW}?fieldSelector=metadata.name%3Dw1")
    assert [o["metadata"]["name"] for o in listing["items"]] == ["w1"]
    stream = await open_watch(
        api, f"{NSW}?watch=1&fieldSelector=metadata.name%3Dw1&resourceVersion={listing['metadata']['resourceVersion']}")
    await api.request("DELETE", f"{NSW}/w2")
    await api.request("DELETE", f"{NSW}/w1")
    ev = await stream.next()
    assert (ev["type"], ev["object"]["metadata"]["name"]) == ("DELETED", "w1")
    stream.resp.close()


async def test_timeout_seconds_ends_the_stream(api: Api) -> None:
    stream = await open_watch(api, f"{W}/widgets?watch=1&timeoutSeconds=1&resourceVersion=1")
    assert await stream.ended(timeout=5)


async def test_bookmarks(api: Api) -> None:
    w = await create(api, "w1")
    rv = w["metadata"]["resourceVersion"]
    stream = await open_watch(api, f"{W}/widgets?watch=1&allowWatchBookmarks=true&resourceVersion={rv}")
    await create(api, "w2")
    await stream.until(lambda e: e["type"] == "ADDED")
    ev = await stream.until(lambda e: e["type"] == "BOOKMARK", timeout=5)
    assert ev["object"] == {"kind": "Widget", "apiVersion": f"{GROUP}/v1",
                            "metadata": {"resourceVersion": ev["object"]["metadata"]["resourceVersion"]}}
    assert int(ev["object"]["metadata"]["resourceVersion"]) >= int(rv) + 1
    stream.resp.close()
    # without allowWatchBookmarks there are none
    stream = await open_watch(api, f"{W}/widgets?watch=1&timeoutSeconds=1&resourceVersion={rv}")
    types = []
    while True:
        line = await asyncio.wait_for(stream.resp.content.readline(), 5)
        if not line:
            break
        types.append(orjson.loads(line)["type"])
    assert types == ["ADDED"]


async def test_send_initial_events_ends_with_annotated_bookmark(api: Api) -> None:
    await create(api, "w1")
    stream = await open_watch(api, f"{W}/widgets?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
                                   f"&resourceVersionMatch=NotOlderThan")
    assert (await stream.next())["type"] == "ADDED"
    ev = await stream.next()
    assert ev["type"] == "BOOKMARK"
    assert ev["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    stream.resp.close()
    status, body, _ = await api.request("GET", f"{W}/widgets?watch=1&sendInitialEvents=true")
    assert status == 422 and body["reason"] == "Invalid"


async def test_compacted_resource_version_is_a_200_stream_with_one_410_error(api: Api) -> None:
    w = await create(api, "w1")
    for i in range(3):
        await create(api, f"x{i}")
    await api.store.compact(await api.store.current_revision())
    stream = await open_watch(api, f"{W}/widgets?watch=1&resourceVersion={w['metadata']['resourceVersion']}")
    ev = await stream.next()
    assert ev["type"] == "ERROR"
    status = ev["object"]
    assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"
    assert status["message"].startswith(f"too old resource version: {w['metadata']['resourceVersion']} (")
    assert await stream.ended()


@pytest.mark.parametrize("query", ["resourceVersion=abc", "labelSelector=%3D%3D", "timeoutSeconds=soon",
                                   "fieldSelector=spec.size%3D1"])
async def test_bad_watch_parameters_fail_before_streaming(api: Api, query: str) -> None:
    status, body, _ = await api.request("GET", f"{W}/widgets?watch=1&{query}")
    assert status == 400 and body["kind"] == "Status" and body["reason"] == "BadRequest"


async def test_table_watch_sends_column_definitions_once(api: Api) -> None:
    status, listing, _ = await api.request("GET", f"{W}/widgets")
    rv = listing["metadata"]["resourceVersion"]
    stream = await open_watch(api, f"{NSW}?watch=1&resourceVersion={rv}", Accept=TABLE_ACCEPT)
    await create(api, "w1", size=3)
    await create(api, "w2", size=4)
    first, second = await stream.next(), await stream.next()
    for ev, name in ((first, "w1"), (second, "w2")):
        assert ev["type"] == "ADDED" and ev["object"]["kind"] == "Table"
        assert ev["object"]["apiVersion"] == "meta.k8s.io/v1"
        assert ev["object"]["rows"][0]["cells"][0] == name
        assert ev["object"]["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert [c["name"] for c in first["object"]["columnDefinitions"]] == ["Name", "Size", "Color", "Age"]
    assert second["object"]["columnDefinitions"] is None
    stream.resp.close()


async def test_many_watchers_get_every_event_in_order(api: Api) -> None:
    status, listing, _ = await api.request("GET", f"{W}/widgets")
    rv = listing["metadata"]["resourceVersion"]
    streams = [await open_watch(api, f"{W}/widgets?watch=1&resourceVersion={rv}") for _ in range(20)]
    created = [await create(api, f"w{i}") for i in range(30)]
    expected = [c["metadata"]["resourceVersion"] for c in created]

    async def drain(s: Stream) -> list[str]:
        return [(await s.next())["object"]["metadata"]["resourceVersion"] for _ in range(30)]

    results = await asyncio.gather(*(drain(s) for s in streams))
    assert all(r == expected for r in results)
    for s in streams:
        s.resp.close()


async def test_server_shutdown_ends_open_watches(api: Api) -> None:
    stream = await open_watch(api, f"{W}/widgets?watch=1&resourceVersion=1")
    await asyncio.wait_for(api.server.close(), 10)
    assert await stream.ended(timeout=5)
