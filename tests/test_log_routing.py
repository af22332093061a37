"""configure_logging routes the standard library's logging through structlog: in a real process serving aiohttp,
a malformed HTTP request (garbage request line, header line without a colon, oversized header, bad
Content-Length) is one JSON line `malformed HTTP request` that does not repeat the request's bytes (a
malformed header line can carry a token), and a handler's crash is one JSON line with its traceback inside;
nothing reaches stderr as plain text."""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from federator.obs import StdlibToStructlog

ROOT = Path(__file__).resolve().parents[1]

SERVER = """
import asyncio, sys
from aiohttp import web
from federator.obs import configure_logging
configure_logging(json=True)

async def main():
    app = web.Application()

    async def ok(request):
        return web.Response(text="ok")

    async def boom(request):
        raise RuntimeError("a handler bug")

    app.router.add_get("/", ok)
    app.router.add_get("/boom", boom)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await runner.cleanup()

asyncio.run(main())
"""


def _exchange(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(payload)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
        return answer


def test_malformed_requests_and_handler_crashes_are_json_lines_without_the_request_bytes() -> None:
    marker = "planted-" + secrets.token_hex(16)
    process = subprocess.Popen([sys.executable, "-c", SERVER], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        malformed = [
            f"GARBAGE-{marker} / HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
            f"GET / HTTP/1.1\r\nHost: x\r\nAuthorization Bearer {marker}\r\n\r\n".encode(),
            f"GET / HTTP/1.1\r\nHost: x\r\nX-Token: {marker}{'a' * 9000}\r\n\r\n".encode(),
            f"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: {marker}\r\n\r\n".encode(),
        ]
        for payload in malformed:
            answer = _exchange(port, payload)
            assert answer.startswith(b"HTTP/1.0 400 Bad Request"), answer[:200]
        assert b"500 Internal Server Error" in _exchange(port, b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"ok" in _exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        _, stderr = process.communicate("\n", timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    lines = [line for line in stderr.splitlines() if line.strip()]
    records: list[dict[str, Any]] = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"a plain-text line reached stderr: {line!r}\n{stderr[-3000:]}") from None
    assert marker not in stderr
    bad = [r for r in records if r.get("event") == "malformed HTTP request"]
    assert len(bad) == len(malformed), records
    assert all(r["level"] == "warning" and r["status"] == 400 and r["remote"] == "127.0.0.1" for r in bad), bad
    assert {r["error_type"] for r in bad} >= {"BadHttpMethod", "BadHttpMessage", "LineTooLong"}, bad
    assert {r["error"] for r in bad} >= {"Invalid header token", "Got more than 8190 bytes when reading"}, bad
    crashes = [r for r in records if r.get("event", "").startswith("Error handling request")]
    assert len(crashes) == 1 and crashes[0]["level"] == "error", records
    assert "RuntimeError: a handler bug" in crashes[0]["exception"]


def test_the_handler_is_installed_once_however_often_logging_is_configured() -> None:
    script = ("import logging\nfrom federator.obs import configure_logging, StdlibToStructlog\n"
              "configure_logging(json=True)\nconfigure_logging(json=True, level='debug')\n"
              "print(sum(isinstance(h, StdlibToStructlog) for h in logging.getLogger().handlers))\n"
              "logging.getLogger('some.library').info('library chatter')\n"
              "logging.getLogger('some.library').warning('library warning %s', 42)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    records = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    assert [(r["event"], r["component"], r["level"]) for r in records] == [
        ("library warning 42", "some.library", "warning")]
    assert StdlibToStructlog.__doc__
