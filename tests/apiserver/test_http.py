"""The REST surface over a real socket: verbs, discovery, OpenAPI, Table,
and bad input (each answered with the right Status, nothing stored)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from apitest_support import GROUP, Api, widget

from federator.apiserver.app import api_state

W = f"/apis/{GROUP}/v1"
NSW = f"{W}/namespaces/ns1/widgets"


def assert_status(status: int, body: Any, code: int, reason: str) -> None:
    assert status == code, body
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure", body
    assert body["code"] == code and body["reason"] == reason, body
    assert body["message"]


async def stored_widgets(api: Api) -> list[str]:
    status, body, _ = await api.request("GET", f"{W}/widgets")
    assert status == 200
    return [o["metadata"]["name"] for o in body["items"]]


async def test_crud_roundtrip(api: Api) -> None:
    status, created, resp = await api.request("POST", NSW, json=widget("w1"))
    assert status == 201 and resp.headers["Content-Type"].startswith("application/json")
    rv = created["metadata"]["resourceVersion"]
    assert isinstance(rv, str)
    status, got, _ = await api.request("GET", f"{NSW}/w1")
    assert status == 200 and got == created
    got["spec"]["size"] = 2
    status, updated, _ = await api.request("PUT", f"{NSW}/w1", json=got)
    assert status == 200 and updated["metadata"]["generation"] == 2
    status, patched, _ = await api.request(
        "PATCH", f"{NSW}/w1", data=b'{"spec":{"color":"red"}}',
        headers={"Content-Type": "application/merge-patch+json"})
    assert status == 200 and patched["spec"] == {"size": 2, "color": "red"}
    status, patched, _ = await api.request(
        "PATCH", f"{NSW}/w1/status", data=b'[{"op":"add","path":"/status","value":{"phase":"Ok"}}]',
        headers={"Content-Type": "application/json-patch+json"})
    assert status == 200 and patched["status"] == {"phase": "Ok"}
    status, listing, _ = await api.request("GET", f"{W}/widgets")
    assert listing["kind"] == "WidgetList" and listing["apiVersion"] == f"{GROUP}/v1"
    assert listing["items"][0]["kind"] == "Widget"
    assert listing["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
    status, gone, _ = await api.request("DELETE", f"{NSW}/w1")
    assert status == 200 and gone["kind"] == "Status" and gone["status"] == "Success"
    assert gone["details"] == {"name": "w1", "group": GROUP, "kind": "widgets", "uid": created["metadata"]["uid"]}
    status, body, _ = await api.request("GET", f"{NSW}/w1")
    assert_status(status, body, 404, "NotFound")
    assert body["message"] == 'widgets.test.federator.dev "w1" not found'
    assert body["details"] == {"name": "w1", "group": GROUP, "kind": "widgets"}


async def test_core_group_delete_returns_the_object_and_cluster_scope(api: Api) -> None:
    thing = {"apiVersion": "v1", "kind": "Thing", "metadata": {"name": "t1"}, "spec": {"quick": True}}
    status, _, _ = await api.request("POST", "/api/v1/namespaces/ns1/things", json=thing)
    assert status == 201
    status, body, _ = await api.request("DELETE", "/api/v1/namespaces/ns1/things/t1")
    assert status == 200 and body["kind"] == "Thing"
    status, body, _ = await api.request("POST", f"{W}/gadgets", json={"metadata": {"name": "g1"}})
    assert status == 201 and "namespace" not in body["metadata"]
    status, body, _ = await api.request("GET", f"{W}/namespaces/ns1/gadgets/g1")
    assert_status(status, body, 404, "NotFound")


async def test_yaml_create(api: Api) -> None:
    doc = f"apiVersion: {GROUP}/v1\nkind: Widget\nmetadata:\n  name: wy\nspec:\n  size: 3\n"
    status, body, _ = await api.request("POST", NSW, data=doc.encode(), headers={"Content-Type": "application/yaml"})
    assert status == 201 and body["spec"]["size"] == 3


@pytest.mark.parametrize(
    ("body", "content_type", "code", "reason"),
    [
        (b'{"apiVersion": "test.federator.dev/v1", "kind": "Widget", "metadata": {"name": "bad"', "application/json",
         400, "BadRequest"),
        (b"\xff\xfe not json", "application/json", 400, "BadRequest"),
        (b"", "application/json", 400, "BadRequest"),
        (b"[1, 2, 3]", "application/json", 400, "BadRequest"),
        (b"metadata: {name: bad\nspec: [", "application/yaml", 400, "BadRequest"),
        (b"a: &x [1]\nb: *x\n", "application/yaml", 400, "BadRequest"),
        (b"---\nmetadata: {name: a}\n---\nmetadata: {name: b}\n", "application/yaml", 400, "BadRequest"),
        (b"metadata:\n  name: bad\n  creationTimestamp: 2024-01-01\n", "application/yaml", 422, "Invalid"),
        (b'{"metadata":{"name":"bad"}}', "application/vnd.kubernetes.protobuf", 415, "UnsupportedMediaType"),
        (b'{"metadata":{"name":"bad"}}', "text/plain", 415, "UnsupportedMediaType"),
        (orjson.dumps({"apiVersion": f"{GROUP}/v1", "kind": "Gizmo", "metadata": {"name": "bad"}}),
         "application/json", 400, "BadRequest"),
        (orjson.dumps({"apiVersion": f"{GROUP}/v2", "kind": "Widget", "metadata": {"name": "bad"}}),
         "application/json", 400, "BadRequest"),
        (orjson.dumps({"apiVersion": "v1", "kind": "Thing", "metadata": {"name": "bad"}}),
         "application/json", 400, "BadRequest"),
        (orjson.dumps({"metadata": {"name": "bad"}}), "application/json", 422, "Invalid"),
        (orjson.dumps({"metadata": {"name": "bad"}, "spec": {"size": "big"}}), "application/json", 422, "Invalid"),
        (orjson.dumps({"metadata": {"name": "bad"}, "spec": {"size": 1.5}}), "application/json", 422, "Invalid"),
        (orjson.dumps({"metadata": "bad", "spec": {"size": 1}}), "application/json", 422, "Invalid"),
        (orjson.dumps({"metadata": {"name": "bad", "labels": ["x"]}, "spec": {"size": 1}}), "application/json",
         422, "Invalid"),
        (orjson.dumps({"metadata": {"namespace": "other", "name": "bad"}, "spec": {"size": 1}}),
         "application/json", 400, "BadRequest"),
        (orjson.dumps({"metadata": {}, "spec": {"size": 1}}), "application/json", 422, "Invalid"),
    ],
)
async def test_bad_bodies_store_nothing(api: Api, body: bytes, content_type: str, code: int, reason: str) -> None:
    rev = await api.store.current_revision()
    status, resp_body, _ = await api.request("POST", NSW, data=body, headers={"Content-Type": content_type})
    assert_status(status, resp_body, code, reason)
    assert await stored_widgets(api) == []
    assert await api.store.current_revision() == rev


async def test_invalid_names_the_field(api: Api) -> None:
    status, body, _ = await api.request("POST", NSW, json={"metadata": {"name": "w"}, "spec": {"size": "big"}})
    assert_status(status, body, 422, "Invalid")
    assert body["message"] == ('Widget.test.federator.dev "w" is invalid: spec.size: Invalid value: "big": '
                               "must be an integer")
    assert body["details"]["causes"] == [{"reason": "FieldValueTypeInvalid", "field": "spec.size",
                                          "message": 'Invalid value: "big": must be an integer'}]
    assert body["details"]["kind"] == "Widget" and body["details"]["group"] == GROUP


async def test_huge_bodies_are_413(api: Api) -> None:
    big = widget("big")
    big["metadata"]["annotations"] = {"x": "y" * 300_000}
    status, body, _ = await api.request("POST", NSW, data=orjson.dumps(big),
                                        headers={"Content-Type": "application/json"})
    assert_status(status, body, 413, "RequestEntityTooLarge")
    assert body["message"] == "Request entity too large: limit is 262144"

    async def chunks() -> Any:  # no Content-Length: the limit holds for chunked bodies too
        for _ in range(100):
            yield b" " * 4096

    status, body, _ = await api.request("POST", NSW, data=chunks(), headers={"Content-Type": "application/json"})
    assert_status(status, body, 413, "RequestEntityTooLarge")
    assert await stored_widgets(api) == []


async def test_conflicts(api: Api) -> None:
    status, created, _ = await api.request("POST", NSW, json=widget("w1"))
    status, body, _ = await api.request("POST", NSW, json=widget("w1"))
    assert_status(status, body, 409, "AlreadyExists")
    created["spec"]["size"] = 2
    status, _, _ = await api.request("PUT", f"{NSW}/w1", json=created)
    assert status == 200
    created["spec"]["size"] = 3
    status, body, _ = await api.request("PUT", f"{NSW}/w1", json=created)
    assert_status(status, body, 409, "Conflict")
    assert "the object has been modified" in body["message"]
    # a resourceVersion inside a patch is a precondition
    stale = orjson.dumps({"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
                          "spec": {"size": 9}})
    status, body, _ = await api.request("PATCH", f"{NSW}/w1", data=stale,
                                        headers={"Content-Type": "application/merge-patch+json"})
    assert_status(status, body, 409, "Conflict")
    status, got, _ = await api.request("GET", f"{NSW}/w1")
    assert got["spec"]["size"] == 2


async def test_patch_errors(api: Api) -> None:
    await api.request("POST", NSW, json=widget("w1"))
    cases = [
        (b'{"spec":', "application/merge-patch+json", 400, "BadRequest"),
        (b'{"spec":{"size":1}}', "application/strategic-merge-patch+json", 415, "UnsupportedMediaType"),
        (b'{"spec":{"size":1}}', "application/apply-patch+yaml", 415, "UnsupportedMediaType"),
        (b'[{"op":"test","path":"/spec/size","value":5}]', "application/json-patch+json", 422, "Invalid"),
        (b'{"spec":{"size":-4}}', "application/merge-patch+json", 422, "Invalid"),
        (b'{"metadata":{"name":"renamed"}}', "application/merge-patch+json", 400, "BadRequest"),
    ]
    for data, ct, code, reason in cases:
        status, body, _ = await api.request("PATCH", f"{NSW}/w1", data=data, headers={"Content-Type": ct})
        assert_status(status, body, code, reason)
    status, body, _ = await api.request("PATCH", f"{NSW}/nope", data=b"{}",
                                        headers={"Content-Type": "application/merge-patch+json"})
    assert_status(status, body, 404, "NotFound")
    status, got, _ = await api.request("GET", f"{NSW}/w1")
    assert got["spec"] == {"size": 1} and got["metadata"]["generation"] == 1


async def test_strategic_merge_patch_on_core_kind(api: Api) -> None:
    thing = {"metadata": {"name": "t1"}, "spec": {"items": [{"name": "a", "v": 1}, {"name": "b", "v": 2}]}}
    await api.request("POST", "/api/v1/namespaces/ns1/things", json=thing)
    patch = {"spec": {"items": [{"name": "b", "v": 3}, {"name": "a", "$patch": "delete"}],
                      "$setElementOrder/items": [{"name": "b"}]}}
    status, body, _ = await api.request("PATCH", "/api/v1/namespaces/ns1/things/t1", data=orjson.dumps(patch),
                                        headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert status == 200, body
    assert body["spec"] == {"items": [{"name": "b", "v": 3}]}


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("labelSelector=app%3D%3D%3Dx", 400),
        ("labelSelector=tier+in+gpu", 400),
        ("fieldSelector=spec.shape%3Dround", 400),
        ("fieldSelector=nonsense", 400),
        ("limit=-1", 400),
        ("limit=lots", 400),
        ("resourceVersion=abc", 400),
        ("continue=notatoken", 400),
    ],
)
async def test_bad_list_parameters(api: Api, query: str, code: int) -> None:
    status, body, _ = await api.request("GET", f"{W}/widgets?{query}")
    assert_status(status, body, code, "BadRequest")


async def test_unknown_field_selector_message(api: Api) -> None:
    status, body, _ = await api.request("GET", f"{W}/widgets?fieldSelector=foo.bar%3Dbaz")
    assert_status(status, body, 400, "BadRequest")
    assert '"foo.bar" is not a known field selector: only "metadata.name", "metadata.namespace", ' \
           '"spec.color", "status.phase"' in body["message"]


async def test_selectors_over_http(api: Api) -> None:
    for i in range(4):
        w = widget(f"w{i}", labels={"tier": "gpu" if i % 2 else "cpu"}, spec={"color": "red" if i < 2 else "blue"})
        await api.request("POST", NSW, json=w)
    status, body, _ = await api.request("GET", f"{W}/widgets?labelSelector=tier+in+(gpu),!missing"
                                               f"&fieldSelector=spec.color%3Dred")
    assert [o["metadata"]["name"] for o in body["items"]] == ["w1"]
    status, body, _ = await api.request("GET", f"{W}/widgets?limit=3")
    assert len(body["items"]) == 3 and body["metadata"]["continue"] and body["metadata"]["remainingItemCount"] == 1
    status, rest, _ = await api.request("GET", f"{W}/widgets?limit=3&continue={body['metadata']['continue']}")
    assert [o["metadata"]["name"] for o in rest["items"]] == ["w3"] and "continue" not in rest["metadata"]


@pytest.mark.parametrize(
    ("method", "path", "code", "reason"),
    [
        ("GET", "/apis/nope.example.com/v1/things", 404, "NotFound"),
        ("GET", f"/apis/{GROUP}/v9/widgets", 404, "NotFound"),
        ("GET", f"{W}/sprockets", 404, "NotFound"),
        ("GET", "/api/v2/pods", 404, "NotFound"),
        ("GET", "/api/v1/pods", 404, "NotFound"),
        ("GET", f"{W}/widgets/w1", 404, "NotFound"),
        ("GET", f"{NSW}/w1/explode", 404, "NotFound"),
        ("GET", "/nothing/here", 404, "NotFound"),
        ("POST", f"{NSW}/w1", 405, "MethodNotAllowed"),
        ("PUT", NSW, 405, "MethodNotAllowed"),
        ("DELETE", f"{NSW}/w1/status", 405, "MethodNotAllowed"),
        ("POST", "/apis", 405, "MethodNotAllowed"),
    ],
)
async def test_unknown_paths_and_methods(api: Api, method: str, path: str, code: int, reason: str) -> None:
    status, body, _ = await api.request(method, path, json={})
    assert_status(status, body, code, reason)


async def test_unknown_query_params_and_bool_parsing(api: Api) -> None:
    status, _, _ = await api.request(
        "POST", f"{NSW}?fieldManager=kubectl-client-side-apply&fieldValidation=Strict&pretty=true&x=y",
        json=widget("w1"))
    assert status == 201
    for value in ("false", "False", "0", "FALSE"):
        status, body, _ = await api.request("GET", f"{W}/widgets?watch={value}")
        assert status == 200 and body["kind"] == "WidgetList", value
    status, body, _ = await api.request("POST", f"{NSW}?dryRun=All", json=widget("w2"))
    assert status == 201 and await stored_widgets(api) == ["w1"]
    status, body, _ = await api.request("POST", f"{NSW}?dryRun=Some", json=widget("w3"))
    assert_status(status, body, 400, "BadRequest")


async def test_authentication(api: Api) -> None:
    for headers in ({"Authorization": "Bearer wrong"}, {"Authorization": ""}, {"Authorization": "Basic abc"}):
        async with api.session.get(api.url(f"{W}/widgets"), headers=headers) as resp:
            body = await resp.json()
            assert resp.status == 401 and resp.headers["Content-Type"].startswith("application/json")
            assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    import aiohttp

    async with aiohttp.ClientSession() as anonymous:
        async with anonymous.get(api.url("/version")) as resp:
            assert resp.status == 401
        async with anonymous.get(api.url("/healthz")) as resp:
            assert resp.status == 200 and await resp.text() == "ok"


async def test_discovery(api: Api) -> None:
    status, version, _ = await api.request("GET", "/version")
    assert status == 200 and version["gitVersion"].startswith("v1.")
    status, body, _ = await api.request("GET", "/api")
    assert body["kind"] == "APIVersions" and body["versions"] == ["v1"]
    status, body, _ = await api.request("GET", "/api/v1")
    names = {r["name"]: r for r in body["resources"]}
    assert names["things"]["kind"] == "Thing" and names["things"]["namespaced"] is True
    status, body, _ = await api.request("GET", "/apis")
    assert body["kind"] == "APIGroupList"
    assert body["groups"] == [{"name": GROUP, "versions": [{"groupVersion": f"{GROUP}/v1", "version": "v1"}],
                               "preferredVersion": {"groupVersion": f"{GROUP}/v1", "version": "v1"}}]
    status, body, _ = await api.request("GET", f"/apis/{GROUP}")
    assert body["kind"] == "APIGroup" and body["name"] == GROUP
    status, body, _ = await api.request("GET", W)
    res = {r["name"]: r for r in body["resources"]}
    assert res["widgets"]["shortNames"] == ["wd"] and res["widgets"]["singularName"] == "widget"
    assert res["widgets/status"]["verbs"] == ["get", "patch", "update"]
    assert "gadgets/status" not in res and res["gadgets"]["namespaced"] is False


async def test_openapi(api: Api) -> None:
    async with api.session.get(api.url("/openapi/v2")) as resp:
        assert resp.status == 200 and await resp.read() == b""
    status, index, _ = await api.request("GET", "/openapi/v3")
    url = index["paths"][f"apis/{GROUP}/v1"]["serverRelativeURL"]
    assert url.startswith(f"/openapi/v3/apis/{GROUP}/v1?hash=")
    assert "api/v1" in index["paths"]
    status, doc, _ = await api.request("GET", url)
    gvk = {"group": GROUP, "version": "v1", "kind": "Widget"}
    patch = doc["paths"][f"/apis/{GROUP}/v1/namespaces/{{namespace}}/widgets/{{name}}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == gvk
    assert any(p["name"] == "fieldValidation" for p in patch["parameters"])
    schema = doc["components"]["schemas"]["dev.federator.test.v1.Widget"]
    assert schema["x-kubernetes-group-version-kind"] == [gvk]
    assert schema["properties"]["spec"]["properties"]["size"]["type"] == "integer"
    status, body, _ = await api.request("GET", "/openapi/v3/apis/nope/v1")
    assert_status(status, body, 404, "NotFound")


async def test_table_output(api: Api) -> None:
    await api.request("POST", NSW, json=widget("w1", size=4, labels={"a": "b"}))
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io," \
             "application/json"
    status, table, _ = await api.request("GET", f"{W}/widgets?limit=500", headers={"Accept": accept})
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Size", "Color", "Age"]
    assert table["columnDefinitions"][2]["priority"] == 1
    row = table["rows"][0]
    assert row["cells"][:3] == ["w1", 4, None]
    assert row["cells"][3].endswith("s")
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["labels"] == {"a": "b"}
    status, table, _ = await api.request("GET", f"{NSW}/w1?includeObject=Object", headers={"Accept": accept})
    assert table["rows"][0]["object"]["kind"] == "Widget"


async def test_list_counts_are_recorded(api: Api) -> None:
    state = api_state(api.app)
    before = state.count("list", "widgets.test.federator.dev")
    await api.request("GET", f"{W}/widgets")
    await api.request("GET", f"{NSW}")
    assert state.count("list", "widgets.test.federator.dev") == before + 2


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b'{"metadata":{"name":"deep"},"spec":{"size":1,"x":' + b"[" * 300 + b"]" * 300 + b"}}", "application/json"),
        (b"[" * 2000 + b"]" * 2000, "application/json"),
        (b"spec: " + b"[" * 5000 + b"]" * 5000 + b"\n", "application/yaml"),
    ],
)
async def test_deeply_nested_bodies_are_400(api: Api, body: bytes, content_type: str) -> None:
    status, resp_body, _ = await api.request("POST", NSW, data=body, headers={"Content-Type": content_type})
    assert_status(status, resp_body, 400, "BadRequest")
    await api.request("POST", NSW, json=widget("w1"))
    deep_patch = b'{"spec":{"x":' + b"[" * 300 + b"]" * 300 + b"}}"
    status, resp_body, _ = await api.request("PATCH", f"{NSW}/w1", data=deep_patch,
                                             headers={"Content-Type": "application/merge-patch+json"})
    assert_status(status, resp_body, 400, "BadRequest")
    assert await stored_widgets(api) == ["w1"]
