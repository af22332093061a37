"""The hub's socket: TLS (untrusted clients refused, generated kubeconfigs work), hostile
bodies (oversized 413, malformed 400, unknown media 415), and slow clients that must not
block anyone else; plus `federator up` as a real process in development mode."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from federator.apiserver.errors import DEFAULT_MAX_BODY_BYTES

from .hubtest_support import EXAMPLE_FILE, ROOT, TOKENS, RunningHub, job, jobs_url


# ---------------------------------------------------------------- TLS


async def test_a_client_that_does_not_trust_the_ca_is_refused(hub: RunningHub) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(hub.url + "/healthz", ssl=ssl.create_default_context())
        # Plain HTTP to the TLS port gets no answer at all, let alone a 200.
        with pytest.raises(aiohttp.ClientError):
            async with session.get(f"http://127.0.0.1:{hub.port}/healthz",
                                   timeout=aiohttp.ClientTimeout(total=10)) as response:
                assert response.status != 200
                raise aiohttp.ClientError("answered plain HTTP")


@pytest.mark.kubectl
async def test_kubectl_refuses_a_hub_its_kubeconfig_does_not_trust(hub: RunningHub) -> None:
    code, _, err = await hub.kubectl("untrusting", "get", "tj")
    assert code != 0
    assert "certificate" in err and "x509" in err, err
    code, out, err = await hub.kubectl("admin", "get", "tj", "-A")
    assert code == 0 and "No resources found" in err + out


async def test_the_cli_refuses_a_hub_its_kubeconfig_does_not_trust(hub: RunningHub) -> None:
    code, out, err = await hub.cli("untrusting", "get", "jobs")
    assert code == 1 and out == ""
    assert err.strip() == f"error: cannot verify the certificate of the hub at {hub.url} " \
                          "(does the kubeconfig carry the hub's CA?)"


# ---------------------------------------------------------------- hostile bodies


async def test_oversized_bodies_get_413_and_store_nothing(hub: RunningHub) -> None:
    big = job("default", "big")
    big["metadata"]["annotations"] = {"padding": "x" * (DEFAULT_MAX_BODY_BYTES + 1024)}
    status, answer = await hub.request("POST", jobs_url("default"), body=big)
    assert status == 413
    assert answer["reason"] == "RequestEntityTooLarge" and answer["code"] == 413

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit holds while streaming
        payload = json.dumps(big).encode()
        for start in range(0, len(payload), 256 * 1024):
            yield payload[start:start + 256 * 1024]

    async with aiohttp.ClientSession() as session:
        async with session.post(hub.url + jobs_url("default"), data=chunks(), ssl=hub.ssl_context(),
                                headers={"Authorization": f"Bearer {TOKENS['admin']}",
                                         "Content-Type": "application/json"}) as response:
            assert response.status == 413
            assert (await response.json())["reason"] == "RequestEntityTooLarge"
    assert (await hub.request("GET", jobs_url("default")))[1]["items"] == []


@pytest.mark.parametrize(("content_type", "data", "code", "reason"), [
    ("application/json", b"{not json", 400, "BadRequest"),
    ("application/json", b"", 400, "BadRequest"),
    ("application/json", b"[1, 2, 3]", 400, "BadRequest"),
    ("application/json", b'"a string"', 400, "BadRequest"),
    ("application/json", b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}', 400, "BadRequest"),
    ("application/json", b"\xff\xfe\x00garbage", 400, "BadRequest"),
    ("application/yaml", b"a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n", 400, "BadRequest"),
    ("application/yaml", b"kind: TrainingJob\n---\nkind: TrainingJob\n", 400, "BadRequest"),
    ("application/yaml", b"key: [unclosed\n", 400, "BadRequest"),
    ("text/plain", b"hello", 415, "UnsupportedMediaType"),
])
async def test_malformed_bodies_get_a_status_and_store_nothing(
    hub: RunningHub, content_type: str, data: bytes, code: int, reason: str
) -> None:
    status, answer = await hub.request("POST", jobs_url("default"), data=data,
                                       headers={"Content-Type": content_type})
    assert status == code, answer
    assert answer["kind"] == "Status" and answer["reason"] == reason
    assert (await hub.request("GET", jobs_url("default")))[1]["items"] == []


async def test_a_bad_patch_gets_a_status(hub: RunningHub) -> None:
    assert (await hub.request("POST", jobs_url("default"), body=job("default", "p")))[0] == 201
    for content_type, data, code in (("application/merge-patch+json", b"{nope", 400),
                                     ("application/strategic-merge-patch+json", b"{}", 415),
                                     ("application/json-patch+json", b'[{"op": "explode"}]', 400),
                                     ("application/merge-patch+json", b'{"spec": {"priority": "high"}}', 422)):
        status, answer = await hub.request("PATCH", jobs_url("default", "p"), data=data,
                                           headers={"Content-Type": content_type})
        assert status == code, (content_type, answer)
        assert answer["kind"] == "Status"
    status, stored = await hub.request("GET", jobs_url("default", "p"))
    assert stored["metadata"]["generation"] == 1


# ---------------------------------------------------------------- slow clients


async def _raw_tls(hub: RunningHub) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", hub.port, ssl=hub.ssl_context(),
                                         server_hostname="127.0.0.1")


async def test_a_client_sending_slowly_does_not_block_others(hub: RunningHub) -> None:
    body = json.dumps(job("default", "slow")).encode()
    reader, writer = await _raw_tls(hub)
    headers_only_reader, headers_only = await _raw_tls(hub)
    try:
        writer.write(
            f"POST {jobs_url('default')} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKENS['admin']}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body[:20])
        await writer.drain()
        headers_only.write(f"GET {jobs_url('default')} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthoriz".encode())
        await headers_only.drain()
        # Both stall mid-request; everyone else is served meanwhile.
        for i in range(3):
            status, _ = await hub.request("POST", jobs_url("default"), body=job("default", f"fast-{i}"), timeout=10)
            assert status == 201
        status, listing = await hub.request("GET", jobs_url("default"), timeout=10)
        assert sorted(i["metadata"]["name"] for i in listing["items"]) == ["fast-0", "fast-1", "fast-2"]
        # The slow client finishes and gets its answer too.
        writer.write(body[20:])
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
        assert status_line.startswith(b"HTTP/1.1 201"), status_line
    finally:
        for w in (writer, headers_only):
            w.close()
        for r in (reader, headers_only_reader):
            del r


async def test_a_stalled_watch_reader_does_not_block_writers_or_other_watchers(hub: RunningHub) -> None:
    reader, writer = await _raw_tls(hub)
    writer.write(f"GET {jobs_url('default')}?watch=true HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 f"Authorization: Bearer {TOKENS['viewer']}\r\n\r\n".encode())
    await writer.drain()
    assert (await asyncio.wait_for(reader.readline(), 10)).startswith(b"HTTP/1.1 200")
    # From here on the stalled watcher reads nothing; ~12 MiB of events fill every buffer on its path.
    seen: list[str] = []
    created = 120

    async def watch_everything() -> None:
        async with aiohttp.ClientSession() as session:
            async with session.get(hub.url + jobs_url("default") + "?watch=true&resourceVersion=0",
                                   ssl=hub.ssl_context(),
                                   headers={"Authorization": f"Bearer {TOKENS['viewer']}"}) as response:
                async for line in response.content:
                    event = json.loads(line)
                    seen.append(event["object"]["metadata"]["name"])
                    if len(seen) == created:
                        return

    follower = asyncio.create_task(watch_everything())
    try:
        padding = "p" * 100_000
        for i in range(created):
            body = job("default", f"j-{i:03d}")
            body["metadata"]["annotations"] = {"padding": padding}
            status, _ = await hub.request("POST", jobs_url("default"), body=body, timeout=10)
            assert status == 201
        await asyncio.wait_for(follower, 30)
        assert seen == [f"j-{i:03d}" for i in range(created)]
        # The stalled watcher really is stalled: the server holds unsent bytes for it.
        server = hub.runner.server
        assert server is not None
        backlog = max(c.transport.get_write_buffer_size() for c in server.connections if c.transport is not None)
        assert backlog > 64 * 1024, backlog
        status, _ = await hub.request("GET", jobs_url("default", "j-000"), timeout=10)
        assert status == 200
    finally:
        follower.cancel()
        writer.close()


# ---------------------------------------------------------------- federator up (dev mode, real process)


async def _read_until(stream: asyncio.StreamReader, event: str, deadline: float) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    while True:
        remaining = deadline - loop.time()
        assert remaining > 0, f"no {event!r} log line in time"
        line = await asyncio.wait_for(stream.readline(), remaining)
        assert line, f"the hub exited before logging {event!r}"
        if line.startswith(b"{"):
            record: dict[str, Any] = json.loads(line)
            if record.get("event") == event:
                return record


async def _start_up(state: Path, *extra: str) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "federator.cli", "up", "--store", f"sqlite://{state / 'hub.db'}",
        "--state-dir", str(state), "--listen", "127.0.0.1:0", "--no-sim", *extra,
        cwd=str(state.parent), env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    ready = await _read_until(process.stderr, "hub ready", asyncio.get_running_loop().time() + 60)
    return process, ready


async def _kubectl(kubeconfig: Path, cache: Path, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), "--request-timeout", "20s", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin else None), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def _stop(process: asyncio.subprocess.Process) -> tuple[int, str]:
    process.send_signal(signal.SIGINT)
    assert process.stdout is not None
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode()


@pytest.mark.kubectl
@pytest.mark.slow
async def test_federator_up_dev_mode_writes_kubeconfigs_that_work(tmp_path: Path) -> None:
    state = tmp_path / "dot-federator"
    process, ready = await _start_up(state)
    try:
        kubeconfigs = {k: Path(v) for k, v in ready["kubeconfigs"].items()}
        assert set(kubeconfigs) == {"admin", "researcher"}
        for path in [*kubeconfigs.values(), state / "tokens.csv", state / "tls" / "server.key"]:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        tokens_before = (state / "tokens.csv").read_text()
        cache = tmp_path / "kubectl-cache"
        # `federator up` answers as kube does: the job's namespace must exist (README's quick start creates it)
        code, out, err = await _kubectl(kubeconfigs["admin"], cache, "apply", "-f", str(EXAMPLE_FILE))
        assert code != 0 and 'namespaces "vision" not found' in err, (out, err)
        code, out, err = await _kubectl(kubeconfigs["admin"], cache, "create", "namespace", "vision")
        assert code == 0, err
        code, out, err = await _kubectl(kubeconfigs["admin"], cache, "apply", "-f", str(EXAMPLE_FILE))
        assert code == 0 and "trainingjob.federator.dev/resnet-ps created" in out, err
        code, out, err = await _kubectl(kubeconfigs["admin"], cache, "get", "tj", "-A")
        assert code == 0 and out.splitlines()[1].split()[:2] == ["vision", "resnet-ps"], err
        # The researcher's kubeconfig works in its namespace (default) and nowhere else.
        code, out, err = await _kubectl(kubeconfigs["researcher"], cache, "get", "tj")
        assert code == 0 and "No resources found in default namespace." in err, err
        code, out, err = await _kubectl(kubeconfigs["researcher"], cache, "get", "tj", "-n", "vision")
        assert code != 0 and "Error from server (Forbidden)" in err
    finally:
        code, out = await _stop(process)
    assert code == 0
    assert f"export KUBECONFIG={kubeconfigs['admin']}" in out
    assert "kubectl get tj -A" in out and "federator submit -f " in out and "examples/resnet-ps.yaml" in out
    assert TOKENS["admin"] not in out

    # A restart reuses the tokens (old kubeconfigs keep their credentials) and the data.
    process, ready = await _start_up(state)
    try:
        assert (state / "tokens.csv").read_text() == tokens_before
        code, out, err = await _kubectl(Path(ready["kubeconfigs"]["admin"]), cache, "get", "tj", "-n", "vision")
        assert code == 0 and "resnet-ps" in out, err
    finally:
        code, _ = await _stop(process)
    assert code == 0


@pytest.mark.parametrize(("args", "message"), [
    (("--tls-cert", "/nonexistent.crt", "--tls-key", "/nonexistent.key"), "error: --tls-cert /nonexistent.crt: no such file"),
    (("--tls-cert", "/nonexistent.crt"), "error: --tls-cert and --tls-key go together"),
    (("--token-file", "/nonexistent.csv"), "error: token file /nonexistent.csv: cannot read it"),
    (("--listen", "localhost"), "error: --listen 'localhost': expected HOST:PORT"),
    (("--store", "nosuch://x"), "error: bad store URL 'nosuch://x'"),
])
async def test_federator_up_bad_flags_give_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    state = tmp_path / "state"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "federator.cli", "up", "--state-dir", str(state),
        "--store", f"sqlite://{state / 'hub.db'}", "--listen", "127.0.0.1:0", "--no-sim", *args,
        cwd=str(ROOT), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode not in (0, None)
    lines = [line for line in err.decode().splitlines() if not line.startswith("{")]
    assert len(lines) == 1 and lines[0].startswith(message), err.decode()
    assert b"Traceback" not in err


async def test_federator_up_with_given_tls_and_token_file(tmp_path: Path) -> None:
    from federator.dev.certs import generate_ca, generate_server_certificate, write_private_file

    ca_pem, ca_key = generate_ca(common_name="production-ca")
    cert_pem, key_pem = generate_server_certificate(ca_pem, ca_key)
    for name, data in (("ca.crt", ca_pem), ("server.crt", cert_pem), ("server.key", key_pem)):
        write_private_file(tmp_path / name, data)
    token_file = tmp_path / "tokens.csv"
    write_private_file(token_file, f'{TOKENS["viewer"]},carol,uid-carol,"federator:viewer"\n'.encode())
    state = tmp_path / "state"
    process, ready = await _start_up(state, "--tls-cert", str(tmp_path / "server.crt"), "--tls-key",
                                     str(tmp_path / "server.key"), "--token-file", str(token_file))
    try:
        assert ready["kubeconfigs"] == {}  # no generated tokens, so no kubeconfigs to write
        assert not (state / "tls").exists() and not (state / "tokens.csv").exists()
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        async with aiohttp.ClientSession() as session:
            async with session.get(ready["url"] + jobs_url(), ssl=context,
                                   headers={"Authorization": f"Bearer {TOKENS['viewer']}"}) as response:
                assert response.status == 200 and (await response.json())["kind"] == "TrainingJobList"
            async with session.get(ready["url"] + jobs_url(), ssl=context,
                                   headers={"Authorization": f"Bearer {TOKENS['admin']}"}) as response:
                assert response.status == 401
    finally:
        code, _ = await _stop(process)
    assert code == 0
