"""Authentication, roles and TLS through a real endpoint: the kube-style API app over a memory store,
served over HTTPS with the dev certificate, driven by kubectl and the official Python client."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
import yaml
from aiohttp import web
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.rest import ApiException

from federator.apis.common import API_GROUP, API_VERSION, split_cause
from federator.apis.crd import KINDS, column_getter, openapi_schema
from federator.apis.membercluster import membercluster_validator
from federator.apis.trainingjob import trainingjob_validator
from federator.apiserver.app import build_api_app
from federator.apiserver.auth import TokenAuthenticator, auth_middleware
from federator.apiserver.errors import FieldError
from federator.apiserver.registry import Registry, ResourceType, TableColumn
from federator.apiserver.storage import ObjectStorage
from federator.dev.certs import ensure_dev_tls, generate_ca, server_ssl_context, write_kubeconfig
from federator.store.memory import MemoryStore

from ..apis.test_trainingjob import EXAMPLE_YAML

TOKENS = {
    "admin": "admin-7c1e0d9a4b2f4e8c9a6d3b5f1e2c4a70",
    "researcher": "research-5b3a9c7e1d2f4a6b8c0e9d7f5a3b1c20",
    "viewer": "viewer-2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a10",
}
TOKEN_FILE = f"""\
{TOKENS["admin"]},alice,uid-alice,"federator:admin"
{TOKENS["researcher"]},bob,uid-bob,"federator:researcher,ns:default"
{TOKENS["viewer"]},carol,uid-carol,"federator:viewer"
"""
WRONG_TOKEN = "wrong-0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c"
JOBS = f"/apis/{API_GROUP}/{API_VERSION}"


def hub_resource_type(kind: str) -> ResourceType:
    info = KINDS[kind]
    validator = trainingjob_validator() if kind == "TrainingJob" else membercluster_validator()

    def validate(obj: dict[str, Any]) -> list[FieldError]:
        return [FieldError(path, *split_cause(message)) for path, message in validator(obj)]

    return ResourceType(
        group=API_GROUP, version=API_VERSION, kind=info.kind, plural=info.plural, singular=info.singular,
        namespaced=info.namespaced, short_names=info.short_names, categories=info.categories,
        validate=validate, name_format="label", openapi_schema=openapi_schema(kind),
        columns=tuple(TableColumn(c.name, column_getter(c.json_path), type=c.type, description=c.description,
                                  priority=c.priority) for c in info.columns if c.name != "Age"),
    )


@dataclass
class Hub:
    url: str
    ca: Path
    kubeconfigs: dict[str, Path]
    state: Path


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[Hub]:
    tls = ensure_dev_tls(tmp_path / "state")
    token_file = tmp_path / "tokens.csv"
    token_file.write_text(TOKEN_FILE)
    token_file.chmod(0o600)
    logger = structlog.get_logger("auth-test")
    authenticator = TokenAuthenticator.from_file(token_file, logger=logger)
    registry = Registry([hub_resource_type("TrainingJob"), hub_resource_type("MemberCluster")])
    storage = ObjectStorage(MemoryStore(), registry)
    # auth_middleware authenticates and authorizes; the app's own authenticate hook would only repeat the first.
    app = build_api_app(storage=storage, registry=registry, server_name="hub-under-test",
                        middlewares=[auth_middleware(authenticator, logger=logger)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl_context(tls.server_cert, tls.server_key))
    await site.start()
    port = runner.addresses[0][1]
    url = f"https://127.0.0.1:{port}"
    kubeconfigs = {
        role: write_kubeconfig(tmp_path / f"{role}.kubeconfig", server=url, ca_pem=tls.ca_pem(), token=token,
                               user=role, namespace="default", cluster_name="hub")
        for role, token in TOKENS.items()
    }
    kubeconfigs["wrong"] = write_kubeconfig(tmp_path / "wrong.kubeconfig", server=url, ca_pem=tls.ca_pem(),
                                            token=WRONG_TOKEN, user="mallory", cluster_name="hub")
    kubeconfigs["untrusting"] = write_kubeconfig(tmp_path / "untrusting.kubeconfig", server=url,
                                                 ca_pem=generate_ca()[0], token=TOKENS["admin"], user="alice",
                                                 cluster_name="hub")
    try:
        yield Hub(url=url, ca=tls.ca_cert, kubeconfigs=kubeconfigs, state=tmp_path)
    finally:
        # Let the server see its clients hang up first: a TLS connection that the server has to
        # close itself finishes its shutdown only after this test's event loop is gone.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while runner.server is not None and runner.server.connections and loop.time() < deadline:
            await asyncio.sleep(0.01)
        await runner.cleanup()


async def kubectl(hub: Hub, who: str, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(hub.kubeconfigs[who]), "--cache-dir", str(hub.state / "kubectl-cache"),
        "--request-timeout", "20s", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin else None), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def raw(hub: Hub, method: str, path: str, *, token: str | None = None,
              headers: dict[str, str] | None = None, body: Any = None) -> tuple[int, Any]:
    context = ssl.create_default_context(cafile=str(hub.ca))
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with aiohttp.ClientSession() as session:
        async with session.request(method, hub.url + path, ssl=context, headers=sent, json=body,
                                   timeout=aiohttp.ClientTimeout(total=20)) as response:
            text = await response.text()
            if response.content_type == "application/json":
                return response.status, json.loads(text)
            return response.status, text


needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


def _job(namespace: str, name: str) -> dict[str, Any]:
    job = yaml.safe_load(EXAMPLE_YAML)
    job["metadata"] = {"name": name, "namespace": namespace}
    assert isinstance(job, dict)
    return job


async def test_missing_and_wrong_tokens_get_401_status(hub: Hub) -> None:
    for token, headers in ((None, {}), (WRONG_TOKEN, {}), (None, {"Authorization": "Basic YWxpY2U6cHc="}),
                           (None, {"Authorization": "Bearer"})):
        status, body = await raw(hub, "GET", f"{JOBS}/namespaces/default/trainingjobs", token=token, headers=headers)
        assert status == 401
        assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    status, _ = await raw(hub, "GET", "/apis", token=None)
    assert status == 401
    status, _ = await raw(hub, "GET", "/healthz")
    assert status == 200


async def test_header_name_and_scheme_are_case_insensitive(hub: Hub) -> None:
    for header, scheme in (("authorization", "Bearer"), ("AUTHORIZATION", "bearer"), ("Authorization", "BEARER")):
        status, body = await raw(hub, "GET", f"{JOBS}/namespaces/default/trainingjobs",
                                 headers={header: f"{scheme} {TOKENS['researcher']}"})
        assert status == 200, body
        assert body["kind"] == "TrainingJobList"


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", f"{JOBS}/namespaces/other/trainingjobs/j1", None),
    ("GET", f"{JOBS}/namespaces/other/trainingjobs", None),
    ("GET", f"{JOBS}/namespaces/other/trainingjobs?watch=true", None),
    ("GET", f"{JOBS}/trainingjobs", None),
    ("POST", f"{JOBS}/namespaces/other/trainingjobs", _job("other", "j1")),
    ("DELETE", f"{JOBS}/namespaces/other/trainingjobs/j1", None),
    ("PUT", f"{JOBS}/namespaces/default/trainingjobs/j1/status", _job("default", "j1")),
    ("POST", f"{JOBS}/memberclusters", {"metadata": {"name": "c1"}}),
])
async def test_researcher_outside_own_namespace_gets_403(hub: Hub, method: str, path: str,
                                                         body: dict[str, Any] | None) -> None:
    status, answer = await raw(hub, method, path, token=TOKENS["researcher"], body=body)
    assert status == 403, answer
    assert answer["kind"] == "Status" and answer["reason"] == "Forbidden" and answer["code"] == 403
    assert answer["details"]["group"] == API_GROUP
    assert 'User "bob" cannot' in answer["message"]
    assert " is forbidden: " in answer["message"]


async def test_roles_through_the_python_client(hub: Hub) -> None:
    api_clients: list[kube_client.ApiClient] = []

    def api(who: str) -> kube_client.CustomObjectsApi:
        configuration = kube_client.Configuration()
        kube_config.load_kube_config(config_file=str(hub.kubeconfigs[who]), client_configuration=configuration)
        api_client = kube_client.ApiClient(configuration)
        # kubernetes 37 reads responses with preload_content=False and its keep-alive sockets survive
        # ApiClient.close() and pool clearing (seen here), leaving them to the garbage collector in some
        # later test; so ask the server to close each connection after answering.
        api_client.set_default_header("Connection", "close")
        api_clients.append(api_client)
        return kube_client.CustomObjectsApi(api_client)

    def run() -> None:
        admin, researcher, viewer = api("admin"), api("researcher"), api("viewer")
        created = researcher.create_namespaced_custom_object(API_GROUP, API_VERSION, "default", "trainingjobs",
                                                             _job("default", "mine"))
        assert created["metadata"]["namespace"] == "default"
        admin.create_namespaced_custom_object(API_GROUP, API_VERSION, "vision", "trainingjobs",
                                              _job("vision", "resnet-ps"))
        listed = researcher.list_namespaced_custom_object(API_GROUP, API_VERSION, "default", "trainingjobs")
        assert [i["metadata"]["name"] for i in listed["items"]] == ["mine"]
        for call in (
            lambda: researcher.list_namespaced_custom_object(API_GROUP, API_VERSION, "vision", "trainingjobs"),
            lambda: researcher.get_namespaced_custom_object(API_GROUP, API_VERSION, "vision", "trainingjobs",
                                                            "resnet-ps"),
            lambda: researcher.list_namespaced_custom_object(API_GROUP, API_VERSION, "vision", "trainingjobs",
                                                             watch=True, timeout_seconds=1),
            lambda: researcher.create_namespaced_custom_object(API_GROUP, API_VERSION, "vision", "trainingjobs",
                                                               _job("vision", "sneaky")),
            lambda: viewer.create_namespaced_custom_object(API_GROUP, API_VERSION, "default", "trainingjobs",
                                                           _job("default", "viewer-job")),
            lambda: viewer.delete_namespaced_custom_object(API_GROUP, API_VERSION, "default", "trainingjobs", "mine"),
        ):
            with pytest.raises(ApiException) as caught:
                call()
            assert caught.value.status == 403
            assert json.loads(caught.value.body)["reason"] == "Forbidden"
        seen = viewer.list_cluster_custom_object(API_GROUP, API_VERSION, "trainingjobs")
        assert sorted(i["metadata"]["name"] for i in seen["items"]) == ["mine", "resnet-ps"]
        with pytest.raises(ApiException) as caught:
            api("wrong").list_namespaced_custom_object(API_GROUP, API_VERSION, "default", "trainingjobs")
        assert caught.value.status == 401

    try:
        await asyncio.to_thread(run)
    finally:
        for api_client in api_clients:
            api_client.close()


@needs_kubectl
async def test_kubectl_with_generated_kubeconfigs(hub: Hub) -> None:
    code, out, err = await kubectl(hub, "admin", "apply", "-f", "-", stdin=EXAMPLE_YAML)
    assert code == 0, err
    assert "trainingjob.federator.dev/resnet-ps created" in out
    code, out, err = await kubectl(hub, "viewer", "get", "tj", "-n", "vision")
    assert code == 0, err
    assert out.split("\n")[0].split() == ["NAME", "PHASE", "CLUSTER", "AGE"]
    assert out.split("\n")[1].startswith("resnet-ps")

    code, out, err = await kubectl(hub, "researcher", "get", "tj", "-n", "vision")
    assert code != 0
    assert 'Error from server (Forbidden): trainingjobs.federator.dev is forbidden: User "bob" cannot list' in err
    code, out, err = await kubectl(hub, "researcher", "get", "tj")  # its own namespace (default)
    assert code == 0, err
    code, out, err = await kubectl(hub, "viewer", "delete", "tj", "resnet-ps", "-n", "vision")
    assert code != 0 and "Forbidden" in err

    code, out, err = await kubectl(hub, "wrong", "get", "--raw", f"{JOBS}/namespaces/default/trainingjobs")
    assert code != 0 and "error: You must be logged in to the server" in err
    code, out, err = await kubectl(hub, "untrusting", "get", "--raw", "/version")
    assert code != 0 and "certificate signed by unknown authority" in err


async def test_no_token_reaches_the_logs(hub: Hub, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as captured:
        for token in (*TOKENS.values(), WRONG_TOKEN):
            await raw(hub, "GET", f"{JOBS}/namespaces/other/trainingjobs", token=token)
            await raw(hub, "POST", f"{JOBS}/namespaces/default/trainingjobs", token=token, body={"spec": "junk"})
        await raw(hub, "GET", f"{JOBS}/trainingjobs", headers={"Authorization": f"Basic {WRONG_TOKEN}"})
    events = [entry["event"] for entry in captured]
    assert "authentication failed" in events and "request forbidden" in events
    text = repr(captured) + caplog.text
    for token in (*TOKENS.values(), WRONG_TOKEN):
        assert token not in text
        assert token[-12:] not in text


@needs_kubectl
async def test_kubectl_explain_and_server_side_validation(hub: Hub) -> None:
    code, out, err = await kubectl(hub, "researcher", "explain", "tj.spec")
    assert code == 0, err
    assert "KIND:" in out and "TrainingJob" in out
    assert "roles" in out and "placement" in out and "failover" in out
    code, out, err = await kubectl(hub, "researcher", "explain", "tj.spec.placement.network")
    assert code == 0, err
    assert "rdma, ethernet or any" in out

    bad = yaml.safe_load(EXAMPLE_YAML)
    bad["metadata"]["namespace"] = "default"
    bad["spec"]["roles"][0]["replicas"] = 0
    bad["spec"]["roles"][1]["name"] = "ps"
    bad["spec"]["placement"]["network"] = "carrier-pigeon"
    code, out, err = await kubectl(hub, "researcher", "create", "-f", "-", stdin=yaml.safe_dump(bad))
    assert code != 0
    assert 'The TrainingJob "resnet-ps" is invalid' in err
    for field in ("spec.roles[0].replicas", "spec.roles[1].name", "spec.placement.network"):
        assert field in err
    code, out, err = await kubectl(hub, "researcher", "get", "tj", "-o", "name")
    assert code == 0 and out == "", "a rejected job must not be stored"
