"""How a kube-style API app meets the network: request size limits, read timeouts, and a kube
Status for whatever the HTTP parser refuses.

`ServerLimits` are kube-apiserver's defaults where kube has one (AS/pkg/server/secure_serving.go:
ReadHeaderTimeout 32 s; the `--request-timeout` class: 60 s for a request to arrive in full) and
aiohttp's former defaults for sizes (8 KiB request line, 8 KiB per header field):

    header_timeout_seconds   a connection must deliver a complete request head within this
                             long of opening, or of its previous answer (idle keep-alive
                             connections count as waiting for one), else it is closed; so a
                             slowloris client holds nothing for long
    body_timeout_seconds     a request body must arrive in full within this long (`read_body`):
                             504 Timeout Status and the connection is closed
    max_url_bytes            a longer request line is 414 URITooLong
    max_header_bytes         a longer header line (name and value) is 431
                             RequestHeaderFieldsTooLarge; so are more than 128 headers

`build_api_app` puts the limits into the aiohttp app itself (`handler_args`), so any runner
enforces them. `api_runner` serves an app so that the parser's refusals (oversized URL or header,
malformed request line...) are a JSON `kind: Status` like every other error (aiohttp would answer
in plain text), with one `malformed HTTP request` log line that never repeats the request's bytes.

This module must never log request bytes (a header may carry a credential) and never import the
simulator or the hub.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from federator.apiserver.errors import ApiError
from federator.obs import get_logger

__all__ = ["DEFAULT_LIMITS", "ServerLimits", "api_runner", "handler_args"]

_log = get_logger("apiserver.http")

#: How long aiohttp keeps reading a body nobody read, after answering, before it closes (default 10 s).
_LINGER_SECONDS: Final = 2.0


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Read timeouts and request-head size limits of one API server (see the module docstring)."""

    header_timeout_seconds: float = 32.0
    body_timeout_seconds: float = 60.0
    max_url_bytes: int = 8192
    max_header_bytes: int = 8190

    def __post_init__(self) -> None:
        if self.header_timeout_seconds <= 0 or self.body_timeout_seconds <= 0:
            raise ValueError("read timeouts must be positive")
        if self.max_url_bytes == self.max_header_bytes:
            # The parser names the limit it hit, not the part; equal limits could not tell 414 from 431.
            raise ValueError("max_url_bytes and max_header_bytes must differ")


DEFAULT_LIMITS: Final = ServerLimits()


def handler_args(limits: ServerLimits) -> dict[str, Any]:
    """aiohttp RequestHandler arguments (web.Application(handler_args=...)) enforcing `limits`.

    aiohttp arms its keep-alive timer when a connection opens and after every answer, and at
    expiry closes a connection still waiting for a complete request head: that is the header
    read timeout (kube's ReadHeaderTimeout), idle keep-alive connections included."""
    return {
        "keepalive_timeout": limits.header_timeout_seconds,
        "max_line_size": limits.max_url_bytes,
        "max_field_size": limits.max_header_bytes,
        "lingering_time": _LINGER_SECONDS,
    }


def _status_body(code: int, reason: str, message: str) -> bytes:
    return orjson.dumps(ApiError(code, reason, message).to_status())


def _parse_error_answer(error: BaseException, max_url_bytes: int) -> tuple[int, str, str]:
    """(code, Status reason, message) for what the HTTP parser refused; never the request's bytes."""
    if isinstance(error, LineTooLong):
        limit = error.args[1] if len(error.args) > 1 else None
        if limit == max_url_bytes:
            return 414, "RequestURITooLong", f"the request URI is longer than {max_url_bytes} bytes"
        return 431, "RequestHeaderFieldsTooLarge", f"a request header field is longer than {limit} bytes"
    if isinstance(error, BadHttpMessage) and "Too many headers" in str(error.args[0] if error.args else ""):
        return 431, "RequestHeaderFieldsTooLarge", "the request has too many header fields"
    return 400, "BadRequest", f"the request is not valid HTTP/1.1 ({type(error).__name__})"


class _StatusRequestHandler(RequestHandler):
    """aiohttp's protocol handler, answering its own errors with a kube Status in JSON."""

    __slots__ = ()

    def handle_error(self, request: BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError):
            # Not the parser's doing (aiohttp only gets here when a handler's error escaped every
            # middleware): aiohttp logs it; the client still gets a Status, never a traceback.
            response = super().handle_error(request, status, exc, message)
            code, reason, text = response.status, "InternalError", "Internal error occurred"
        else:
            if request.writer.output_size > 0:
                raise ConnectionError("Response is sent already, cannot send another response with the error")
            code, reason, text = _parse_error_answer(exc, self.max_line_size)
            _log.warning("malformed HTTP request", status=code, error=text, error_type=type(exc).__name__,
                         remote=str(request.remote) if request.remote is not None else None)
        answer = web.Response(status=code, body=_status_body(code, reason, text), content_type="application/json")
        answer.force_close()
        return answer


class _StatusServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _StatusRequestHandler(self, loop=self._loop, **self._kwargs)


class _ApiRunner(web.AppRunner):
    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # The app builds its Server (with its handler_args); only the protocol class changes.
        server.__class__ = _StatusServer
        return server


def api_runner(app: web.Application, **kwargs: Any) -> web.AppRunner:
    """A web.AppRunner for an API app (same arguments) whose HTTP parser errors are kube Statuses."""
    return _ApiRunner(app, **kwargs)
