"""`federator dashboard`: the hub's web dashboard through a local proxy that signs in with your kubeconfig.

    federator dashboard [--port 8001] [--kubeconfig FILE] [--hub-context NAME]

Like `kubectl proxy`: it listens on 127.0.0.1 only, forwards every request to
the hub named by the kubeconfig with the kubeconfig's credentials (bearer
token, token file, client certificate, exec plugin; resolved once at start by
`federator.cli.hubclient`, as every command does), and prints the address to open,
http://127.0.0.1:PORT/ui/. The page then needs no token: the browser never
sees one. Before serving it asks the hub who the kubeconfig's user is
(SelfSubjectReview), so a kubeconfig the hub refuses fails at once.

Because anything that reaches this port acts as that user, it refuses (403
Status) what a browser could be tricked into sending: a Host other than a
loopback name (DNS rebinding), an Origin other than its own, a request a
browser marks cross-site (Sec-Fetch-Site). The browser's own Authorization
and Cookie headers are dropped; only the kubeconfig's credentials are sent.

A kubeconfig that cannot be used or a port that cannot be bound is one line
on stderr and exit code 2; a hub that does not answer or refuses the
credentials, exit code 1. It never prints or logs a credential: refused and
failed requests are logged by method, path and reason only. It imports
`common` of the CLI and no other command module.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import signal
import sys
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from federator.apiserver.errors import DEFAULT_MAX_BODY_BYTES, ApiError
from federator.cli.common import hub_flags
from federator.cli.hubclient import HubClient, HubConnection, HubError, load_connection

LOOPBACK: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8001
#: Host names a browser on this machine uses for the proxy; any other Host is a rebound DNS name.
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})
#: Request headers passed on to the hub (never Authorization, Cookie, Origin, Referer...).
FORWARDED_REQUEST_HEADERS: Final = ("Accept", "Content-Type", "If-None-Match", "User-Agent")
#: Response headers passed back to the browser.
FORWARDED_RESPONSE_HEADERS: Final = (
    "Content-Type", "ETag", "Cache-Control", "Content-Security-Policy", "X-Content-Type-Options",
    "X-Frame-Options", "Referrer-Policy", "Cross-Origin-Opener-Policy", "Warning", "Retry-After", "Location",
    "Allow", "Audit-Id",
)
_SAME_SITE: Final = frozenset({"same-origin", "none"})


def register(sub: Any) -> None:
    """Add `dashboard` to the `federator` parser."""
    p = sub.add_parser(
        "dashboard", help="open the web dashboard through a local proxy signed in with your kubeconfig",
        description="Serve the hub's web dashboard on http://127.0.0.1:PORT/ui/ through a local proxy that adds "
                    "the kubeconfig's credentials to every request (like kubectl proxy). Ctrl-C stops it.",
    )
    p.add_argument("-p", "--port", type=_port, default=DEFAULT_PORT, metavar="PORT",
                   help=f"local port on 127.0.0.1 (default: {DEFAULT_PORT}; 0 picks a free one)")
    hub_flags(p)
    p.set_defaults(handler=_cmd_dashboard)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not between 0 and 65535")
    return port


def _cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        connection = load_connection(kubeconfig=args.hub_kubeconfig, context=args.hub_context)
    except HubError as e:
        print(str(e), file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(connection, port=args.port, timeout=args.request_timeout))
    except HubError as e:
        print(str(e), file=sys.stderr)
        return 1


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(ApiError(code, reason, message).to_status(), status=code)


def refusal(headers: Mapping[str, str]) -> str | None:
    """Why a request must not be proxied (a browser tricked into sending it), or None."""
    host = headers.get("Host", "")
    hostname = urlsplit(f"//{host}").hostname if host else None
    if hostname is None or (hostname not in LOOPBACK_HOSTS and f"[{hostname}]" not in LOOPBACK_HOSTS):
        return "the Host header is not a loopback name (DNS rebinding?)"
    origin = headers.get("Origin")
    if origin is not None and origin != f"http://{host}":
        return "a request from another origin"
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site not in _SAME_SITE:
        return "a cross-site request"
    return None


def build_proxy_app(client: HubClient, *, log: Any = None) -> web.Application:
    """The proxy as an aiohttp Application over an open HubClient (see the module docstring)."""
    server = client.connection.server
    say = log or (lambda text: print(text, file=sys.stderr, flush=True))

    async def proxy(request: web.Request) -> web.StreamResponse:
        why = refusal(request.headers)
        if why is not None:
            say(f"dashboard: refused {request.method} {request.path}: {why}")
            return _status(403, "Forbidden", f"federator dashboard refused this request: {why}")
        headers = {k: request.headers[k] for k in FORWARDED_REQUEST_HEADERS if k in request.headers}
        headers["Accept-Encoding"] = "identity"  # bodies pass through as they are
        body = await request.read() if request.can_read_body else None
        # a large body goes as a stream (aiohttp would block its loop writing raw bytes in one go)
        data: bytes | io.BytesIO | None = io.BytesIO(body) if body and len(body) > 512 * 1024 else body
        try:
            upstream = await client.session.request(
                request.method, server + request.path_qs, data=data, headers=headers,
                ssl=client.connection.ssl_context, allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=client.timeout_seconds),
            )
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            say(f"dashboard: {request.method} {request.path}: the hub at {server} did not answer "
                f"({type(e).__name__})")
            return _status(502, "BadGateway", f"federator dashboard cannot reach the hub at {server}")
        try:
            response = web.StreamResponse(status=upstream.status)
            for name in FORWARDED_RESPONSE_HEADERS:
                for value in upstream.headers.getall(name, ()):
                    response.headers.add(name, value)
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                pass  # the hub ended the stream (a watch's timeout, a restart): the browser's watch resumes
            await response.write_eof()
            return response
        finally:
            upstream.release()

    app = web.Application(client_max_size=DEFAULT_MAX_BODY_BYTES + 64 * 1024)
    app.router.add_route("*", "/{tail:.*}", proxy)
    return app


async def _serve(connection: HubConnection, *, port: int, timeout: float) -> int:
    async with HubClient(connection, timeout_seconds=timeout) as client:
        review = await client.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                      body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        user = ((review.get("status") or {}).get("userInfo") or {})
        runner = web.AppRunner(build_proxy_app(client), access_log=None, shutdown_timeout=1.0,
                               handler_cancellation=True)
        await runner.setup()
        try:
            site = web.TCPSite(runner, LOOPBACK, port)
            try:
                await site.start()
            except OSError as e:
                print(f"error: cannot listen on {LOOPBACK}:{port}: {e.strerror or e}", file=sys.stderr)
                return 2
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):  # before the address is printed: Ctrl-C is a clean stop
                loop.add_signal_handler(sig, stop.set)
            bound = runner.addresses[0][1] if runner.addresses else port
            groups = ", ".join(str(g) for g in user.get("groups") or () if str(g).startswith("federator:")) or "no role"
            print(f"Dashboard: http://{LOOPBACK}:{bound}/ui/\n"
                  f"Signed in as {user.get('username') or '?'} ({groups}) to {connection.describe()}.\n"
                  "Only this machine can use this address; whoever uses it acts as that user. Ctrl-C stops it.",
                  flush=True)
            try:
                await stop.wait()
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
        finally:
            await runner.cleanup()
    return 0
