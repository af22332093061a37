"""The hub's /ui/ route (federator/ui): the dashboard's files, served without a token, and nothing else.

A real hub (build_hub_app over HTTPS, token auth, tests/hub/hubtest_support.py). Hostile paths are sent
as raw request lines over TLS, so that no client normalises them first: `..` and its encodings, encoded
slashes, backslashes, NUL bytes, absolute paths and an oversized path never reach a file outside
federator/ui/static (a 404 Status, a 400, or a normalised path that is then an API path and needs a
token). Every shipped file has its content type and the security headers; the page loads nothing from
another origin and puts no token in a URL.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from federator.ui import CONTENT_SECURITY_POLICY, STATIC_DIR, UI_FILES, load_ui_files

from ..hub.hubtest_support import RunningHub, start_hub


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[RunningHub]:
    async with start_hub(tmp_path / "hub") as running:
        yield running


async def raw_get(hub: RunningHub, target: str, *, method: str = "GET",
                  headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request with `target` sent exactly as given; (status, headers, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", hub.port, ssl=hub.ssl_context(),
                                                   server_hostname="127.0.0.1")
    try:
        head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{hub.port}\r\nConnection: close\r\n"
        for name, value in (headers or {}).items():
            head += f"{name}: {value}\r\n"
        writer.write((head + "\r\n").encode("latin-1"))
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (ssl.SSLError, ConnectionError):
            pass
    head_bytes, _, body = raw.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    found: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        found[name.strip().lower()] = value.strip()
    if found.get("transfer-encoding") == "chunked":
        body = _unchunk(body)
    return status, found, body


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2:]
    return out


def test_every_page_module_and_style_is_shipped() -> None:
    names = set(UI_FILES)
    assert {"", "index.html", "style.css", "favicon.svg", "js/app.js", "js/api.js", "js/store.js",
            "js/pages/federation.js", "js/pages/jobs.js", "js/pages/job.js", "js/pages/drills.js"} <= names
    # what the shipped tree holds is what is served: nothing left out, nothing else
    on_disk = {p.relative_to(STATIC_DIR).as_posix() for p in STATIC_DIR.rglob("*") if p.is_file()}
    assert on_disk == names - {""}


def test_the_page_loads_nothing_from_another_origin_and_never_puts_a_token_in_a_url() -> None:
    for name, shipped in UI_FILES.items():
        if not name.endswith((".html", ".js", ".css")):
            continue
        text = shipped.body.decode("utf-8")
        # no CDN, no absolute URL of any origin, no protocol-relative URL
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), name
        # ES module imports are relative to /ui/
        for imported in re.findall(r"""^import .*? from ["']([^"']+)["'];$""", text, re.M):
            assert imported.startswith(("./", "../")), (name, imported)
        # the token goes only into the Authorization header: never a query parameter or a path
        assert not re.search(r"[?&](access_)?token=", text), name
        assert "localStorage" not in text, name  # sessionStorage only: gone with the tab
    app = UI_FILES["js/api.js"].body.decode()
    assert "headers.Authorization = `Bearer ${this.token}`" in app
    # every module is preloaded by the page at once (a module left out would load a round trip later)
    index = UI_FILES["index.html"].body.decode()
    preloaded = set(re.findall(r'<link rel="modulepreload" href="([^"]+)">', index))
    assert preloaded == {name for name in UI_FILES if name.endswith(".js") and name != "js/app.js"}


def test_only_regular_files_of_known_types_are_served(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<!doctype html>")
    (tmp_path / "secret.py").write_text("TOKEN = 'x'")
    (tmp_path / "notes.txt").write_text("hello")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.js"
    outside.write_text("export const x = 1;")
    (tmp_path / "linked.js").symlink_to(outside)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.js").write_text("export {};")
    files = load_ui_files(tmp_path)
    assert set(files) == {"", "index.html", "sub/a.js"}
    assert files["sub/a.js"].content_type == "text/javascript; charset=utf-8"
    assert load_ui_files(tmp_path / "missing") == {}


async def test_each_file_is_served_without_a_token_with_its_type_and_security_headers(hub: RunningHub) -> None:
    types = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
    for name, shipped in UI_FILES.items():
        status, headers, body = await raw_get(hub, f"/ui/{name}")
        assert status == 200, name
        assert body == shipped.body, name
        suffix = Path(name or "index.html").suffix
        assert headers["content-type"].startswith(types[suffix]), name
        assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["etag"] == shipped.etag
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY and "unsafe-inline" not in CONTENT_SECURITY_POLICY
    # a token, even a wrong one, changes nothing: the files are public and the header is not read
    status, _, body = await raw_get(hub, "/ui/js/app.js", headers={"Authorization": "Bearer not-a-token"})
    assert status == 200 and body == UI_FILES["js/app.js"].body


async def test_redirect_head_etag_and_methods(hub: RunningHub) -> None:
    status, headers, _ = await raw_get(hub, "/ui")
    assert status == 308 and headers["location"] == "/ui/"
    status, headers, body = await raw_get(hub, "/ui/style.css", method="HEAD")
    assert status == 200 and body == b"" and headers["content-type"].startswith("text/css")
    etag = UI_FILES["style.css"].etag
    status, headers, body = await raw_get(hub, "/ui/style.css", headers={"If-None-Match": etag})
    assert status == 304 and body == b""
    status, _, body = await raw_get(hub, "/ui/style.css", headers={"If-None-Match": '"stale"'})
    assert status == 200 and body == UI_FILES["style.css"].body
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, body = await raw_get(hub, "/ui/index.html", method=method,
                                              headers={"Content-Length": "0"})
        assert status == 405, method
        assert headers["allow"] == "GET, HEAD"
        assert json.loads(body)["reason"] == "MethodNotAllowed"


HOSTILE = [
    "/ui/nope.js", "/ui/js/", "/ui/js", "/ui/index.html/", "/ui/INDEX.HTML", "/ui/./../hub.db",
    "/ui/%2e%2e/%2e%2e/federator/hub/app.py", "/ui/..%2f..%2ffederator%2fhub.py", "/ui/js/..%2F..%2Fui%2F__init__.py",
    "/ui/..\\..\\federator\\hub/app.py", "/ui/%5c..%5c..%5ctokens.csv", "/ui/%00", "/ui/index.html%00.js",
    "/ui//etc/passwd", "/ui/%2Fetc%2Fpasswd", "/ui/__init__.py", "/ui/static/index.html", "/ui/js/app.js.map",
    "/ui/\u00e9".encode().decode("latin-1"), "/ui/" + "a" * 2000, "/ui/../tokens.csv", "/ui/../metrics",
    "/ui/js/../../apis/federator.dev/v1alpha1/trainingjobs", "/ui/../../../../etc/passwd",
]


async def test_hostile_and_unknown_paths_never_reach_another_file(hub: RunningHub) -> None:
    seen: dict[str, int] = {}
    for target in HOSTILE:
        status, headers, body = await raw_get(hub, target)
        seen[target[:40]] = status
        assert status in (400, 404), (target, status, body[:200])
        text = body.decode("utf-8", "replace")
        for secret in ("import ", "TOKEN", "root:", "federator:admin", "def "):
            assert secret not in text, (target, text[:200])
        if status == 404:
            assert json.loads(body)["kind"] == "Status"
            assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY, target
    assert list(seen.values()).count(404) >= len(HOSTILE) - 2, seen  # the dashboard's own 404, not a parser's 400


async def test_an_oversized_path_is_refused_before_anything_else(hub: RunningHub) -> None:
    status, _, body = await raw_get(hub, "/ui/" + "a" * 9000)
    assert status == 414
    assert json.loads(body)["kind"] == "Status"
