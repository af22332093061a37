"""The web dashboard's static files, served by the hub at /ui/ (issue 18).

The page (`static/`: plain ES modules and CSS, no build step, nothing loaded
from anywhere but the hub) talks only to the hub's own kube-style API with the
user's bearer token, or through `federator dashboard`'s local proxy, which
adds the kubeconfig's credentials. So serving it needs no token: `ui_middleware`
answers every request under /ui before the hub's authentication runs, and
the files it serves hold nothing that is not already in the package.

What it serves is a fixed table (`UI_FILES`), built once from the files
shipped in `static/`: a request names one of them or gets a 404 Status, so
no path (`..`, encoded slashes, backslashes, NUL bytes, symlinks) can
reach anything else. GET and HEAD only (405 otherwise). Every answer carries
a Content-Security-Policy that allows scripts, styles and connections to
this origin only, no framing, `nosniff`, and no Referer; an ETag lets the
browser revalidate instead of downloading again.

It must never read a request's Authorization header, log a request, or
serve a file that is not in `static/`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from aiohttp import web

from federator.apiserver.errors import ApiError

__all__ = ["UI_FILES", "UI_PREFIX", "UiFile", "load_ui_files", "ui_middleware"]

UI_PREFIX: Final = "/ui"
STATIC_DIR: Final = Path(__file__).resolve().parent / "static"

#: Content types by file suffix; a shipped file with another suffix is not served.
CONTENT_TYPES: Final[Mapping[str, str]] = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

#: The page may load and connect to this origin only; nothing inline, no frames, no plugins.
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Final[Mapping[str, str]] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    # revalidate every time (the ETag makes that cheap): a new hub version is seen at the next load
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True, slots=True)
class UiFile:
    """One shipped file, read once: its bytes, content type and ETag."""

    body: bytes
    content_type: str
    etag: str


def load_ui_files(directory: Path = STATIC_DIR) -> dict[str, UiFile]:
    """Every servable file under `directory`, by its path below /ui/ ("index.html", "js/app.js"); "" is
    index.html. Symlinks and files of unknown types are left out."""
    files: dict[str, UiFile] = {}
    if not directory.is_dir():
        return files
    for path in sorted(directory.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        content_type = CONTENT_TYPES.get(path.suffix)
        if content_type is None:
            continue
        body = path.read_bytes()
        digest = hashlib.sha256(body).hexdigest()[:32]
        files[path.relative_to(directory).as_posix()] = UiFile(body, content_type, f'"{digest}"')
    if "index.html" in files:
        files[""] = files["index.html"]
    return files


UI_FILES: Final[Mapping[str, UiFile]] = load_ui_files()

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _status(error: ApiError, headers: Mapping[str, str] | None = None) -> web.Response:
    response = web.json_response(error.to_status(), status=error.code)
    response.headers.update(SECURITY_HEADERS)
    response.headers.update(headers or {})
    return response


def serve_ui(request: web.Request, files: Mapping[str, UiFile] = UI_FILES) -> web.StreamResponse:
    """The answer to one request under /ui (see the module docstring)."""
    path = request.path
    if path == UI_PREFIX:
        return web.Response(status=308, headers={**SECURITY_HEADERS, "Location": f"{UI_PREFIX}/"})
    if request.method not in ("GET", "HEAD"):
        return _status(ApiError(405, "MethodNotAllowed", f"the dashboard's files are read with GET, not "
                                                         f"{request.method[:16]}"), {"Allow": "GET, HEAD"})
    found = files.get(path[len(UI_PREFIX) + 1:])
    if found is None:
        return _status(ApiError(404, "NotFound", "the dashboard has no such file"))
    headers = {**SECURITY_HEADERS, "ETag": found.etag}
    if found.etag in (value.strip() for value in request.headers.get("If-None-Match", "").split(",")):
        return web.Response(status=304, headers=headers)
    return web.Response(body=found.body, headers={**headers, "Content-Type": found.content_type})


@web.middleware
async def ui_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Serves /ui and everything below it (before authentication: the files are public); every other
    request goes on to `handler`."""
    path = request.path
    if path == UI_PREFIX or path.startswith(UI_PREFIX + "/"):
        return serve_ui(request)
    return await handler(request)
