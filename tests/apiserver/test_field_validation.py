"""Field validation as kube-apiserver does it, against a real hub: `fieldValidation=Ignore|Warn|Strict`
on create, update and patch; Warn (no parameter: what the Python client sends) drops unknown fields
with one `Warning: 299 - "unknown field \\"spec.foo\\""` header each; Strict (what kubectl sends)
refuses them, and repeated JSON/YAML keys, with kube's `strict decoding error` text; a body without
kind or apiVersion is a 400; an invalid value stays a 422. Whatever is refused is not stored."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes import client as kube_client
from kubernetes import config as kube_config

from ..hub.hubtest_support import TOKENS, RunningHub, job, jobs_url, start_hub

CLUSTERS = "/apis/federator.dev/v1alpha1/memberclusters"


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[RunningHub]:
    async with start_hub(tmp_path / "hub") as running:
        yield running


async def send(hub: RunningHub, method: str, path: str, body: Any, *, who: str = "researcher",
               content_type: str = "application/json") -> tuple[int, Any, list[str]]:
    """(status, decoded body, Warning headers) of one request; `body` bytes are sent as they are."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {TOKENS[who]}", "Content-Type": content_type}
    async with aiohttp.ClientSession() as session:
        async with session.request(method, hub.url + path, data=data, headers=headers,
                                   ssl=hub.ssl_context()) as response:
            return response.status, json.loads(await response.text()), response.headers.getall("Warning", [])


async def stored(hub: RunningHub, name: str) -> dict[str, Any] | None:
    status, body = await hub.request("GET", jobs_url("default", name), who="admin")
    return body if status == 200 else None


def with_unknown(name: str) -> dict[str, Any]:
    obj = job("default", name)
    obj["spec"]["colour"] = "red"
    obj["spec"]["roles"][0]["template"]["gpu"] = 1
    obj["metadata"]["bogus"] = True
    return obj


UNKNOWN_WARNINGS = ['299 - "unknown field \\"metadata.bogus\\""', '299 - "unknown field \\"spec.colour\\""',
                    '299 - "unknown field \\"spec.roles[0].template.gpu\\""']


async def test_default_and_warn_drop_unknown_fields_with_one_warning_each(hub: RunningHub) -> None:
    for query, name in (("", "plain"), ("?fieldValidation=Warn", "warned")):
        status, body, warnings = await send(hub, "POST", jobs_url("default") + query, with_unknown(name))
        assert status == 201, body
        assert warnings == UNKNOWN_WARNINGS
        kept = await stored(hub, name)
        assert kept is not None
        assert "colour" not in kept["spec"] and "gpu" not in kept["spec"]["roles"][0]["template"]
        assert "bogus" not in kept["metadata"]
        assert kept["spec"]["roles"] == job("default", name)["spec"]["roles"]


async def test_ignore_drops_them_silently(hub: RunningHub) -> None:
    status, body, warnings = await send(hub, "POST", jobs_url("default") + "?fieldValidation=Ignore",
                                        with_unknown("quiet"))
    assert status == 201 and warnings == [], body
    kept = await stored(hub, "quiet")
    assert kept is not None and "colour" not in kept["spec"]


async def test_strict_refuses_unknown_fields_and_stores_nothing(hub: RunningHub) -> None:
    status, body, warnings = await send(hub, "POST", jobs_url("default") + "?fieldValidation=Strict",
                                        with_unknown("strict"))
    assert status == 400 and warnings == []
    assert body["reason"] == "BadRequest"
    assert body["message"] == (
        'TrainingJob in version "v1alpha1" cannot be handled as a TrainingJob: strict decoding error: '
        'unknown field "metadata.bogus", unknown field "spec.colour", unknown field "spec.roles[0].template.gpu"')
    assert await stored(hub, "strict") is None


def _repeated_name_body(name: str) -> bytes:
    text = json.dumps(job("default", name))
    # {"metadata": {"name": "first", "name": "<name>", ...}: the last one wins, as in Go's decoder.
    return text.replace('"metadata": {', '"metadata": {"name": "first", ', 1).encode()


async def test_repeated_json_keys(hub: RunningHub) -> None:
    status, body, _ = await send(hub, "POST", jobs_url("default") + "?fieldValidation=Strict",
                                 _repeated_name_body("dup-strict"))
    assert status == 400
    assert body["message"].endswith('strict decoding error: duplicate field "metadata.name"'), body
    assert await stored(hub, "dup-strict") is None and await stored(hub, "first") is None
    status, body, warnings = await send(hub, "POST", jobs_url("default"), _repeated_name_body("dup-warn"))
    assert status == 201, body
    assert warnings == ['299 - "duplicate field \\"metadata.name\\""']
    assert await stored(hub, "dup-warn") is not None and await stored(hub, "first") is None
    status, body, warnings = await send(hub, "POST", jobs_url("default") + "?fieldValidation=Ignore",
                                        _repeated_name_body("dup-ignore"))
    assert status == 201 and warnings == []


async def test_repeated_yaml_keys(hub: RunningHub) -> None:
    text = yaml.safe_dump(job("default", "y1"), sort_keys=False).replace("  name: y1\n", "  name: y0\n  name: y1\n")
    line = text.splitlines().index("  name: y1") + 1
    status, body, _ = await send(hub, "POST", jobs_url("default") + "?fieldValidation=Strict", text.encode(),
                                 content_type="application/yaml")
    assert status == 400
    assert body["message"].endswith(
        f'strict decoding error: yaml: unmarshal errors:\n  line {line}: key "name" already set in map'), body
    status, body, warnings = await send(hub, "POST", jobs_url("default"), text.encode(),
                                        content_type="application/yaml")
    assert status == 201 and warnings == [f'299 - "line {line}: key \\"name\\" already set in map"'], body
    assert await stored(hub, "y1") is not None


async def test_update_and_status_update_validate_fields(hub: RunningHub) -> None:
    status, created, _ = await send(hub, "POST", jobs_url("default"), job("default", "u"))
    assert status == 201
    changed = dict(created, spec=dict(created["spec"], priority=5, colour="red"))
    status, body, _ = await send(hub, "PUT", jobs_url("default", "u") + "?fieldValidation=Strict", changed)
    assert status == 400 and 'unknown field "spec.colour"' in body["message"]
    assert (await stored(hub, "u"))["spec"].get("priority") != 5  # type: ignore[index]
    status, body, warnings = await send(hub, "PUT", jobs_url("default", "u"), changed)
    assert status == 200 and warnings == ['299 - "unknown field \\"spec.colour\\""'], body
    assert body["spec"]["priority"] == 5 and "colour" not in body["spec"]
    status_body = dict(body, status={"phase": "Pending", "shade": "blue"})
    status, body, _ = await send(hub, "PUT", jobs_url("default", "u", "status") + "?fieldValidation=Strict",
                                 status_body, who="admin")
    assert status == 400 and 'unknown field "status.shade"' in body["message"], body


async def test_patches_validate_the_patched_object_and_the_patch(hub: RunningHub) -> None:
    assert (await send(hub, "POST", jobs_url("default"), job("default", "p")))[0] == 201
    merge = "application/merge-patch+json"
    status, body, _ = await send(hub, "PATCH", jobs_url("default", "p") + "?fieldValidation=Strict",
                                 {"spec": {"colour": "red", "priority": 9}}, content_type=merge)
    # kube's patch handler: 422 Invalid on the field "patch", the object itself not repeated.
    assert status == 422 and body["reason"] == "Invalid", body
    assert body["message"] == ('TrainingJob.federator.dev "p" is invalid: patch: Invalid value: '
                               'strict decoding error: unknown field "spec.colour"')
    assert body["details"]["causes"][0]["field"] == "patch"
    assert (await stored(hub, "p"))["spec"].get("priority") != 9  # type: ignore[index]
    status, body, warnings = await send(hub, "PATCH", jobs_url("default", "p"),
                                        {"spec": {"colour": "red", "priority": 9}}, content_type=merge)
    assert status == 200 and warnings == ['299 - "unknown field \\"spec.colour\\""'], body
    assert body["spec"]["priority"] == 9 and "colour" not in body["spec"]
    repeated = b'{"spec": {"priority": 1, "priority": 2}}'
    status, body, _ = await send(hub, "PATCH", jobs_url("default", "p") + "?fieldValidation=Strict", repeated,
                                 content_type=merge)
    assert status == 422 and body["message"].endswith('strict decoding error: duplicate field "spec.priority"')
    status, body, warnings = await send(hub, "PATCH", jobs_url("default", "p"), repeated, content_type=merge)
    assert status == 200 and body["spec"]["priority"] == 2
    assert warnings == ['299 - "duplicate field \\"spec.priority\\""']
    ops = [{"op": "replace", "path": "/spec/priority", "value": 3, "colour": "red"}]
    status, body, _ = await send(hub, "PATCH", jobs_url("default", "p") + "?fieldValidation=Strict", ops,
                                 content_type="application/json-patch+json")
    assert status == 422 and body["message"].endswith('json patch unknown field "[0].colour"'), body
    status, body, warnings = await send(hub, "PATCH", jobs_url("default", "p"), ops,
                                        content_type="application/json-patch+json")
    assert status == 200 and body["spec"]["priority"] == 3
    assert warnings == ['299 - "json patch unknown field \\"[0].colour\\""']


@pytest.mark.parametrize(("method", "options"), [("POST", "CreateOptions"), ("PUT", "UpdateOptions"),
                                                 ("PATCH", "PatchOptions")])
async def test_an_unknown_directive_is_422_and_changes_nothing(hub: RunningHub, method: str, options: str) -> None:
    if method != "POST":
        assert (await send(hub, "POST", jobs_url("default"), job("default", "d")))[0] == 201
    path = jobs_url("default") if method == "POST" else jobs_url("default", "d")
    before = await stored(hub, "d")
    body: Any = job("default", "d") if method != "PATCH" else {"spec": {"priority": 4}}
    if method == "PUT":
        body["metadata"]["resourceVersion"] = before["metadata"]["resourceVersion"]  # type: ignore[index]
        body["spec"]["priority"] = 4
    status, answer, _ = await send(hub, method, path + "?fieldValidation=strict", body,
                                   content_type="application/merge-patch+json" if method == "PATCH"
                                   else "application/json")
    assert status == 422 and answer["reason"] == "Invalid", answer
    assert answer["message"] == (f'{options}.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: '
                                 '"strict": supported values: "", "Ignore", "Strict", "Warn"')
    assert await stored(hub, "d") == before


async def test_kind_and_api_version_are_required(hub: RunningHub) -> None:
    no_kind = job("default", "k")
    del no_kind["kind"]
    status, body, _ = await send(hub, "POST", jobs_url("default"), no_kind)
    assert status == 400 and body["reason"] == "BadRequest"
    assert body["message"].startswith("Object 'Kind' is missing in '{") and '"name":"k"' in body["message"]
    no_version = job("default", "k")
    del no_version["apiVersion"]
    status, body, _ = await send(hub, "POST", jobs_url("default"), no_version)
    assert status == 400 and body["message"].startswith("Object 'apiVersion' is missing in '{")
    assert await stored(hub, "k") is None
    # A PUT too; and the echo of a MemberCluster never repeats its credentials.
    secret = "tok-" + "s3cr3t" * 8
    cluster = {"apiVersion": "federator.dev/v1alpha1", "metadata": {"name": "c1"},
               "spec": {"connection": {"server": "https://10.0.0.1:6443", "credentials": {"token": secret}}}}
    status, body, _ = await send(hub, "POST", CLUSTERS, cluster, who="admin")
    assert status == 400 and body["message"].startswith("Object 'Kind' is missing"), body
    assert secret not in json.dumps(body) and "s3cr3t" not in json.dumps(body)
    huge = job("default", "k")
    del huge["kind"]
    huge["spec"]["roles"][0]["template"]["env"] = [{"name": f"V{i}", "value": "x" * 100} for i in range(500)]
    status, body, _ = await send(hub, "PUT", jobs_url("default", "k"), huge)
    assert status == 400 and len(body["message"]) < 1200


async def test_invalid_values_and_malformed_bodies(hub: RunningHub) -> None:
    bad = job("default", "v")
    bad["spec"]["priority"] = "high"
    for query in ("", "?fieldValidation=Strict", "?fieldValidation=Ignore"):
        status, body, _ = await send(hub, "POST", jobs_url("default") + query, bad)
        assert status == 422 and body["reason"] == "Invalid", body
        assert 'spec.priority: Invalid value: "high"' in body["message"]
    status, body, _ = await send(hub, "POST", jobs_url("default"), b'{"apiVersion": ')
    assert status == 400 and "error decoding request body as JSON" in body["message"]
    # An unknown field next to an invalid value: Strict answers the decoding error first, as kube does.
    both = with_unknown("v")
    both["spec"]["priority"] = "high"
    status, body, _ = await send(hub, "POST", jobs_url("default") + "?fieldValidation=Strict", both)
    assert status == 400 and "strict decoding error" in body["message"]
    status, body, warnings = await send(hub, "POST", jobs_url("default"), both)
    assert status == 422 and warnings == UNKNOWN_WARNINGS, (body, warnings)
    assert await stored(hub, "v") is None


async def test_hostile_field_names_cannot_split_or_flood_headers(hub: RunningHub) -> None:
    obj = job("default", "h")
    obj["spec"]["evil\r\nSet-Cookie: x=1"] = 1
    obj["spec"].update({f"field{i:04d}-{'z' * 40}": i for i in range(2000)})
    status, body, warnings = await send(hub, "POST", jobs_url("default"), obj)
    assert status == 201, body
    assert warnings[0] == '299 - "unknown field \\"spec.evil  Set-Cookie: x=1\\""'
    assert 10 < len(warnings) < 2000 and sum(len(w) for w in warnings) < 6000
    status, body, _ = await send(hub, "POST", jobs_url("default") + "?fieldValidation=Strict", dict(obj, metadata={
        "name": "h2", "namespace": "default"}))
    assert status == 400 and await stored(hub, "h2") is None


async def create_with_python_client(hub: RunningHub, obj: dict[str, Any]) -> tuple[dict[str, Any], int, Any]:
    """(created object, status, headers) of a TrainingJob create through the official client."""
    api_clients: list[kube_client.ApiClient] = []

    def run() -> tuple[dict[str, Any], int, Any]:
        configuration = kube_client.Configuration()
        kube_config.load_kube_config(config_file=str(hub.kubeconfigs["researcher"]),
                                     client_configuration=configuration)
        api_client = kube_client.ApiClient(configuration)
        api_client.set_default_header("Connection", "close")
        api_clients.append(api_client)
        api = kube_client.CustomObjectsApi(api_client)
        result: tuple[dict[str, Any], int, Any] = api.create_namespaced_custom_object_with_http_info(
            "federator.dev", "v1alpha1", "default", "trainingjobs", obj)
        return result

    try:
        return await asyncio.to_thread(run)
    finally:
        for api_client in api_clients:
            api_client.close()


async def test_the_python_client_gets_warnings(hub: RunningHub) -> None:
    created, status, headers = await create_with_python_client(hub, with_unknown("py"))
    assert status == 201 and "colour" not in created["spec"]
    assert 'unknown field \\"spec.colour\\"' in headers["Warning"]


async def test_many_short_unknown_fields_stay_within_what_clients_read(hub: RunningHub) -> None:
    """A schemathesis run sent a body with hundreds of one-letter unknown fields: the answer carried more
    Warning headers than Python's http.client reads (100), so the official client got no answer at all."""
    obj = with_unknown("many")
    obj["spec"].update({f"f{i}": i for i in range(400)})
    status, body, warnings = await send(hub, "POST", jobs_url("default"), obj)
    assert status == 201, body
    assert len(warnings) == 50 and warnings[:2] == UNKNOWN_WARNINGS[:2]
    assert warnings[-1] == f'299 - "{403 - 49} more warnings not shown"'
    created, status, _ = await create_with_python_client(hub, dict(obj, metadata={"name": "many-py"}))
    assert status == 201 and "f0" not in created["spec"]


@pytest.mark.kubectl
async def test_kubectl_gets_errors_for_unknown_fields(hub: RunningHub) -> None:
    manifest = json.dumps(with_unknown("kc"))
    code, out, err = await hub.kubectl("researcher", "create", "-f", "-", stdin=manifest)
    assert code == 1
    assert ('Error from server (BadRequest): error when creating "STDIN": TrainingJob in version "v1alpha1" '
            'cannot be handled as a TrainingJob: strict decoding error: unknown field "metadata.bogus"') in err, err
    assert await stored(hub, "kc") is None
    code, out, err = await hub.kubectl("researcher", "create", "--validate=warn", "-f", "-", stdin=manifest)
    assert code == 0, err
    assert 'Warning: unknown field "spec.colour"' in err and "trainingjob.federator.dev/kc created" in out
    kept = await stored(hub, "kc")
    assert kept is not None and "colour" not in kept["spec"]
