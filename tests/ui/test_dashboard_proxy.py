"""`federator dashboard`: the local proxy that signs the dashboard's requests with the user's kubeconfig.

A real hub (tests/hub/hubtest_support.py) and the real command as a process. It binds 127.0.0.1 only (read
back from /proc/net/tcp), prints the address, passes the hub's answers through (a researcher's 403 stays a
403, a watch streams), drops the browser's own Authorization and Cookie headers, refuses what a browser
could be tricked into sending (a rebound Host, another Origin, Sec-Fetch-Site cross-site) and an oversized
body, answers 502 when the hub goes away, and never prints the kubeconfig's token, whatever happened.
A kubeconfig that cannot be used is one line and exit code 2; one the hub refuses, exit code 1.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from federator.cli import main

from ..hub.hubtest_support import ROOT, TOKENS, RunningHub, job, jobs_url, start_hub


@dataclass
class Dashboard:
    process: asyncio.subprocess.Process
    url: str
    port: int
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    async def stop(self) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(self.process.communicate(), 20)
        self.stdout += out.decode().splitlines()
        self.stderr += err.decode().splitlines()
        assert self.process.returncode is not None
        return self.process.returncode


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    env.pop("FEDERATOR_DEBUG", None)
    env.pop("KUBECONFIG", None)
    return env


async def run_dashboard(*args: str, timeout: float = 30) -> tuple[int, str, str]:
    """`federator dashboard ARGS` expected to exit by itself: (code, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "federator.cli", "dashboard", *args, cwd=str(ROOT), env=_env(),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def start_dashboard(kubeconfig: Path) -> Dashboard:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "federator.cli", "dashboard", "--port", "0", "--kubeconfig", str(kubeconfig),
        cwd=str(ROOT), env=_env(), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    lines: list[str] = []
    while True:
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        if not line:
            err = await process.stderr.read() if process.stderr else b""
            raise AssertionError(f"federator dashboard exited: {lines} {err.decode()}")
        lines.append(line.rstrip("\n"))
        if line.startswith("Dashboard: "):
            url = line.split()[1]
        if "Ctrl-C stops it" in line:
            break
    port = int(url.split(":")[2].split("/")[0])
    return Dashboard(process=process, url=url, port=port, stdout=lines)


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[RunningHub]:
    async with start_hub(tmp_path / "hub") as running:
        yield running


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a socket listening on `port` (Linux /proc/net/tcp and tcp6)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.split(":")
            if int(hex_port, 16) == port and state == "0A":  # LISTEN
                found.add(address)
    return found


async def call(url: str, path: str, *, method: str = "GET", headers: dict[str, str] | None = None,
               body: bytes | None = None) -> tuple[int, dict[str, object] | str]:
    data = io.BytesIO(body) if body is not None and len(body) > 512 * 1024 else body  # aiohttp warns on big bytes
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url.rsplit("/ui/", 1)[0] + path, headers=headers or {}, data=data,
                                   timeout=aiohttp.ClientTimeout(total=20)) as response:
            text = await response.text()
            if response.content_type == "application/json":
                return response.status, json.loads(text)
            return response.status, text


def test_bad_kubeconfigs_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # in this process (the command's own main), each as a user would type it
    monkeypatch.delenv("KUBECONFIG", raising=False)
    not_yaml = tmp_path / "not-yaml"
    not_yaml.write_text("clusters: [unclosed\n")
    no_server = tmp_path / "no-server"
    no_server.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {}}]\n"
                         "users: [{name: u, user: {token: secret-in-kubeconfig-0123456789}}]\n"
                         "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    for args, words in (
        (["--kubeconfig", str(tmp_path / "missing")], "no kubeconfig at"),
        (["--kubeconfig", str(not_yaml)], "not valid YAML"),
        (["--kubeconfig", str(no_server)], "no server URL"),
        (["--kubeconfig", str(binary)], "cannot use kubeconfig"),
    ):
        code = main(["dashboard", *args])
        out, err = capsys.readouterr()
        assert code == 2, (args, err)
        assert out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], (args, err)
        assert "secret-in-kubeconfig" not in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exited:
        main(["dashboard", "--port", "70000"])
    assert exited.value.code == 2 and "70000 is not between 0 and 65535" in capsys.readouterr().err


async def test_a_refused_token_exits_1_and_a_taken_port_exits_2(hub: RunningHub) -> None:
    code, out, err = await run_dashboard("--kubeconfig", str(hub.kubeconfigs["wrong"]), "--port", "0")
    assert code == 1 and out == ""
    assert err.strip().splitlines() == ["error: You must be logged in to the server (Unauthorized)"]
    busy = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    try:
        port = busy.sockets[0].getsockname()[1]
        code, out, err = await run_dashboard("--kubeconfig", str(hub.kubeconfigs["admin"]), "--port", str(port))
        assert code == 2, err
        assert len(err.strip().splitlines()) == 1 and f"cannot listen on 127.0.0.1:{port}" in err
    finally:
        busy.close()
        await busy.wait_closed()


async def test_proxy_serves_the_dashboard_and_the_api_as_the_kubeconfig_user_on_loopback_only(
        hub: RunningHub) -> None:
    dashboard = await start_dashboard(hub.kubeconfigs["researcher"])
    try:
        assert dashboard.url == f"http://127.0.0.1:{dashboard.port}/ui/"
        assert any("Signed in as bob (federator:researcher)" in line for line in dashboard.stdout)
        assert listening_addresses(dashboard.port) == {"0100007F"}  # 127.0.0.1, nothing else, no IPv6
        # the page and its modules
        status, page = await call(dashboard.url, "/ui/")
        assert status == 200 and isinstance(page, str) and "js/app.js" in page
        # the API as bob: his namespace yes, another no (the hub's own 403 passes through)
        assert (await hub.request("POST", jobs_url("default"), who="admin", body=job("default", "mine")))[0] == 201
        status, listing = await call(dashboard.url, jobs_url("default"))
        assert status == 200 and isinstance(listing, dict)
        assert [i["metadata"]["name"] for i in listing["items"]] == ["mine"]
        status, refused = await call(dashboard.url, jobs_url("team-b"))
        assert status == 403 and isinstance(refused, dict) and 'User "bob" cannot list' in str(refused["message"])
        status, refused = await call(dashboard.url, jobs_url(None))
        assert status == 403
        # the browser's own credentials are dropped: the kubeconfig's identity is used, whatever was sent
        status, review = await call(
            dashboard.url, "/apis/authentication.k8s.io/v1/selfsubjectreviews", method="POST",
            headers={"Authorization": f"Bearer {TOKENS['admin']}", "Cookie": "session=x",
                     "Content-Type": "application/json"},
            body=json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode())
        assert status == 201 and isinstance(review, dict)
        assert review["status"]["userInfo"]["username"] == "bob"
        # writes go through (and are the hub's to allow): bob deletes his job
        status, _ = await call(dashboard.url, jobs_url("default", "mine"), method="DELETE",
                               headers={"Origin": f"http://127.0.0.1:{dashboard.port}",
                                        "Sec-Fetch-Site": "same-origin"})
        assert status == 200
    finally:
        assert await dashboard.stop() == 0


async def test_a_watch_streams_through_the_proxy(hub: RunningHub) -> None:
    dashboard = await start_dashboard(hub.kubeconfigs["admin"])
    try:
        base = dashboard.url.rsplit("/ui/", 1)[0]
        async with aiohttp.ClientSession() as session:
            status, listing = await call(dashboard.url, jobs_url("vision"))
            assert status == 200 and isinstance(listing, dict)
            rv = listing["metadata"]["resourceVersion"]
            async with session.get(base + jobs_url("vision"), params={"watch": "1", "resourceVersion": rv},
                                   timeout=aiohttp.ClientTimeout(total=30)) as response:
                assert response.status == 200
                created = await hub.request("POST", jobs_url("vision"), who="admin", body=job("vision", "watched"))
                assert created[0] == 201
                line = await asyncio.wait_for(response.content.readline(), 20)
                event = json.loads(line)
                assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "watched"
    finally:
        assert await dashboard.stop() == 0


async def test_requests_a_browser_could_be_tricked_into_are_refused(hub: RunningHub) -> None:
    dashboard = await start_dashboard(hub.kubeconfigs["admin"])
    port = dashboard.port
    try:
        body = json.dumps(job("vision", "csrf")).encode()
        for headers, why in (
            ({"Host": f"attacker.example:{port}"}, "not a loopback name"),
            ({"Host": "127.0.0.1.attacker.example"}, "not a loopback name"),
            ({"Host": ""}, "not a loopback name"),
            ({"Origin": "https://attacker.example"}, "another origin"),
            ({"Origin": "null"}, "another origin"),
            ({"Origin": f"http://localhost:{port + 1}"}, "another origin"),
            ({"Sec-Fetch-Site": "cross-site"}, "cross-site"),
            ({"Sec-Fetch-Site": "same-site"}, "cross-site"),
        ):
            status, answer = await call(dashboard.url, jobs_url("vision"), method="POST",
                                        headers={"Content-Type": "application/json", **headers}, body=body)
            assert status == 403, headers
            assert isinstance(answer, dict) and why in str(answer["message"]), (headers, answer)
        # nothing was created by any of them
        status, listing = await hub.request("GET", jobs_url("vision"))
        assert status == 200 and listing["items"] == []
        # the same request from the proxy's own page is fine
        for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
            status, answer = await call(dashboard.url, "/version", headers={"Host": host, "Origin": f"http://{host}",
                                                                           "Sec-Fetch-Site": "same-origin"})
            assert status == 200 and isinstance(answer, dict) and "gitVersion" in answer
        # a body larger than the hub takes is refused here
        status, _ = await call(dashboard.url, jobs_url("vision"), method="POST",
                               headers={"Content-Type": "application/json"}, body=b" " * (4 * 1024 * 1024))
        assert status == 413
    finally:
        assert await dashboard.stop() == 0
    assert any("refused POST /apis/federator.dev/v1alpha1/namespaces/vision/trainingjobs" in line
               for line in dashboard.stderr)


async def test_the_token_is_never_printed_and_a_hub_gone_is_a_502(tmp_path: Path) -> None:
    async with start_hub(tmp_path / "hub") as hub:
        dashboard = await start_dashboard(hub.kubeconfigs["admin"])
        status, _ = await call(dashboard.url, "/ui/")
        assert status == 200
        status, _ = await call(dashboard.url, "/nope")
        assert status in (403, 404)
        status, _ = await call(dashboard.url, "/version", headers={"Host": "evil.example"})
        assert status == 403
    # the hub is gone now
    try:
        status, answer = await call(dashboard.url, "/version")
        assert status == 502 and isinstance(answer, dict) and answer["reason"] == "BadGateway"
    finally:
        assert await dashboard.stop() == 0
    output = "\n".join(dashboard.stdout + dashboard.stderr)
    assert any("did not answer" in line for line in dashboard.stderr), output
    for token in TOKENS.values():
        assert token not in output
        assert token[:16] not in output
