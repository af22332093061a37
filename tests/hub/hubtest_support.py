"""A real hub for tests: `build_hub_app` served over HTTPS on 127.0.0.1:0, in-process.

    async with start_hub(tmp_path) as hub:                       # sqlite store in tmp_path
        await hub.kubectl("admin", "get", "tj", "-A")
        status, body = await hub.request("GET", "/apis/federator.dev/v1alpha1/memberclusters", who="viewer")
        hub.context.storage  # in-process ObjectStorage (controllers' view, credentials unredacted)

Options: `store_url` (e.g. an etcd URL), `controllers` (ControllerFactory list;
e.g. [member_sync]), `settings` (HubSettings), `clusters_dir`, `job_finalizers`, `source_finalizers`,
`max_body_bytes`, `limits` (read timeouts and request-head limits, serving.py). The hub has four users (TOKENS): admin, researcher
(namespace default), other (researcher in namespace team-b) and viewer, and a
kubeconfig for each plus `wrong` (unknown token) and `untrusting` (a CA that
did not sign the hub's certificate).

Other test areas reuse it with `from ..hub.hubtest_support import start_hub`
(or the `hub` fixture of tests/hub/conftest.py inside tests/hub/).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import ssl
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from federator.apiserver.audit import AuditLog
from federator.apiserver.auth import TokenAuthenticator
from federator.apiserver.errors import DEFAULT_MAX_BODY_BYTES
from federator.apiserver.serving import DEFAULT_LIMITS, ServerLimits, api_runner
from federator.controllers.context import ControllerFactory, HubContext, HubSettings
from federator.controllers.settings import NamespaceSettings
from federator.dev.certs import ensure_dev_tls, generate_ca, server_ssl_context, write_kubeconfig
from federator.hub.app import HubState, build_hub_app, hub_state
from federator.obs import Metrics, get_logger
from federator.store.encryption import EncryptionConfig
from federator.store.open import EtcdTLS

ROOT = Path(__file__).resolve().parents[2]
GROUP_PATH = "/apis/federator.dev/v1alpha1"
EXAMPLE_FILE = ROOT / "examples" / "resnet-ps.yaml"

TOKENS = {
    "admin": "admin-3f0c9e1d7b5a4c2e8f6d4b2a0c9e7f51",
    "researcher": "research-8d6b4f2a0c9e7d5b3a1f8e6c4d2b0a93",
    "other": "other-2b4d6f8a0c1e3a5c7e9b1d3f5a7c9e02",
    "viewer": "viewer-6e8a0c2e4a6c8e0b2d4f6a8c0e2b4d74",
}
TOKEN_FILE = f"""\
{TOKENS["admin"]},alice,uid-alice,"federator:admin"
{TOKENS["researcher"]},bob,uid-bob,"federator:researcher,ns:default"
{TOKENS["other"]},dave,uid-dave,"federator:researcher,ns:team-b"
{TOKENS["viewer"]},carol,uid-carol,"federator:viewer"
"""
WRONG_TOKEN = "wrong-0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c"


@dataclass
class RunningHub:
    url: str
    port: int
    app: web.Application
    state: HubState
    ca_file: Path
    directory: Path
    kubeconfigs: dict[str, Path]
    metrics: Metrics
    runner: web.AppRunner
    _ssl: ssl.SSLContext = field(repr=False, default_factory=ssl.create_default_context)

    @property
    def context(self) -> HubContext:
        return self.state.context

    def ssl_context(self) -> ssl.SSLContext:
        return self._ssl

    async def request(
        self, method: str, path: str, *, who: str | None = "admin", body: Any = None, data: bytes | None = None,
        headers: dict[str, str] | None = None, timeout: float = 20.0,
    ) -> tuple[int, Any]:
        """One HTTPS request as `who` (None: no token); (status, decoded JSON or text)."""
        sent = dict(headers or {})
        if who is not None:
            sent["Authorization"] = f"Bearer {TOKENS.get(who, WRONG_TOKEN)}"
        payload = data if data is not None else (json.dumps(body).encode() if body is not None else None)
        if payload is not None:
            sent.setdefault("Content-Type", "application/json")
        async with aiohttp.ClientSession() as session:
            # aiohttp warns about large bytes bodies (they are sent in one go); a file object streams.
            sendable: Any = io.BytesIO(payload) if payload is not None and len(payload) > 512 * 1024 else payload
            async with session.request(method, self.url + path, ssl=self._ssl, headers=sent, data=sendable,
                                       timeout=aiohttp.ClientTimeout(total=timeout)) as response:
                text = await response.text()
                if response.content_type == "application/json":
                    return response.status, json.loads(text)
                return response.status, text

    async def kubectl(self, who: str, *args: str, stdin: str | None = None,
                      timeout: float = 60.0) -> tuple[int, str, str]:
        """kubectl with `who`'s kubeconfig and a private discovery cache."""
        process = await asyncio.create_subprocess_exec(
            "kubectl", "--kubeconfig", str(self.kubeconfigs[who]), "--cache-dir", str(self.directory / "kubectl-cache"),
            "--request-timeout", "20s", *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin is not None else None),
                                          timeout)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    async def cli(self, who: str | None, *args: str, stdin: str | None = None,
                  timeout: float = 60.0, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        """The `federator` CLI as a real process, with `who`'s kubeconfig in $KUBECONFIG."""
        environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        environment.pop("FEDERATOR_DEBUG", None)
        if who is not None:
            environment["KUBECONFIG"] = str(self.kubeconfigs[who])
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "federator.cli", *args, cwd=str(ROOT), env=environment,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin is not None else None),
                                          timeout)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()


@asynccontextmanager
async def start_hub(
    directory: Path,
    *,
    store_url: str | None = None,
    etcd_tls: EtcdTLS | None = None,
    controllers: Sequence[ControllerFactory] = (),
    settings: HubSettings | None = None,
    clusters_dir: Path | None = None,
    job_finalizers: Sequence[str] = (),
    source_finalizers: Sequence[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    limits: ServerLimits = DEFAULT_LIMITS,
    bookmark_interval: float = 1.0,
    leader_ttl_seconds: float | None = None,
    wait_for_lead: bool = True,
    encryption: EncryptionConfig | None = None,
    audit: AuditLog | None = None,
) -> AsyncIterator[RunningHub]:
    """Serve a hub until the block ends; its files live under `directory`. With `wait_for_lead`
    it yields once the hub leads, else once its first campaign has an answer (a follower)."""
    directory.mkdir(parents=True, exist_ok=True)
    tls = ensure_dev_tls(directory / "state")
    token_file = directory / "tokens.csv"
    token_file.write_text(TOKEN_FILE)
    token_file.chmod(0o600)
    metrics = Metrics()
    app = build_hub_app(
        # jobs go into namespaces nobody created; tests of the lifecycle pass settings of their own
        settings or HubSettings(state_dir=directory / "state", namespaces=NamespaceSettings(mode="autoprovision")),
        store_url=store_url or f"sqlite://{directory / 'hub.db'}",
        etcd_tls=etcd_tls,
        controllers=controllers,
        authenticator=TokenAuthenticator.from_file(token_file, logger=get_logger("hub.auth")),
        job_finalizers=job_finalizers,
        source_finalizers=source_finalizers,
        metrics=metrics,
        clusters_dir=clusters_dir,
        max_body_bytes=max_body_bytes,
        limits=limits,
        bookmark_interval=bookmark_interval,
        encryption=encryption,
        audit=audit,
        **({"leader_ttl_seconds": leader_ttl_seconds} if leader_ttl_seconds is not None else {}),
    )
    runner = api_runner(app, access_log=None, shutdown_timeout=2.0, handler_cancellation=True)
    try:
        await runner.setup()
    except BaseException:
        await runner.cleanup()  # what started before the failure (the store, the leadership) stops
        raise
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl_context(tls.server_cert, tls.server_key))
        await site.start()
        port = runner.addresses[0][1]
        url = f"https://127.0.0.1:{port}"
        kubeconfigs = {
            who: write_kubeconfig(directory / f"{who}.kubeconfig", server=url, ca_pem=tls.ca_pem(), token=token,
                                  user=who, namespace="default", cluster_name="hub")
            for who, token in TOKENS.items()
        }
        kubeconfigs["wrong"] = write_kubeconfig(directory / "wrong.kubeconfig", server=url, ca_pem=tls.ca_pem(),
                                                token=WRONG_TOKEN, user="mallory", cluster_name="hub")
        kubeconfigs["untrusting"] = write_kubeconfig(directory / "untrusting.kubeconfig", server=url,
                                                     ca_pem=generate_ca()[0], token=TOKENS["admin"], user="alice",
                                                     cluster_name="hub")
        state = hub_state(app)
        await asyncio.wait_for((state.leading if wait_for_lead else state.campaigned).wait(), 60)
        yield RunningHub(url=url, port=port, app=app, state=state, ca_file=tls.ca_cert, directory=directory,
                         kubeconfigs=kubeconfigs, metrics=metrics, runner=runner,
                         _ssl=ssl.create_default_context(cafile=str(tls.ca_cert)))
    finally:
        await stop_runner(runner)


async def stop_runner(runner: web.AppRunner) -> None:
    """Stop listening, cut open connections (a TLS close would wait for the
    peer's close_notify), then run the app's cleanup."""
    for site in list(runner.sites):
        await site.stop()
    server = runner.server
    for connection in list(server.connections if server is not None else ()):
        if connection.transport is not None:
            connection.transport.abort()
    await runner.cleanup()


def job(namespace: str, name: str, **spec_changes: Any) -> dict[str, Any]:
    """The design.md example job under another name/namespace."""
    import yaml

    obj = yaml.safe_load(EXAMPLE_FILE.read_text())
    assert isinstance(obj, dict)
    obj["metadata"] = {"name": name, "namespace": namespace}
    obj["spec"].update(spec_changes)
    return obj


def jobs_url(namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    path = f"{GROUP_PATH}/namespaces/{namespace}/trainingjobs" if namespace else f"{GROUP_PATH}/trainingjobs"
    if name:
        path += f"/{name}"
    if sub:
        path += f"/{sub}"
    return path


def clusters_url(name: str | None = None, sub: str | None = None) -> str:
    path = f"{GROUP_PATH}/memberclusters"
    if name:
        path += f"/{name}"
    if sub:
        path += f"/{sub}"
    return path
