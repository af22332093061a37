"""A loopback TCP proxy that a test can cut and restore: the hub's connection to one member's API server
goes through it while the member's fence agent talks to the API server directly (issue 25, failover and
partition drills on real members).

    proxy = TcpProxy(target_port=6443)          # listens on 127.0.0.1:<free port>, forwards to 127.0.0.1:6443
    proxy.start(); proxy.port                   # the port to put into the hub's kubeconfig
    proxy.cut()                                 # every open connection is closed now, new ones are closed at once
    proxy.restore()                             # new connections are forwarded again
    proxy.stop()                                # idempotent; also a context manager

It is bytes only (TLS passes through end to end: the member's certificate names 127.0.0.1, so a
kubeconfig whose server is the proxy's address verifies as before). A cut connection is closed
(the client sees a reset or an EOF), never held open: a cut shows as "connection refused/reset" to the
hub's client, as a member API server that is down would. It runs its own asyncio loop in a daemon
thread, so synchronous tests drive it. It binds loopback only and must never be used outside
development and tests.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

__all__ = ["TcpProxy"]

_CHUNK = 64 * 1024


class TcpProxy:
    """See the module docstring."""

    def __init__(self, *, target_port: int, target_host: str = "127.0.0.1", listen_port: int = 0) -> None:
        if target_host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("TcpProxy forwards to loopback only")
        self.target_host = target_host
        self.target_port = target_port
        self._listen_port = listen_port
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._cut = False
        #: connections accepted (forwarded or closed at once) and closed by a cut, for tests and logs
        self.accepted = 0
        self.refused = 0
        self.killed = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._cut

    def start(self) -> TcpProxy:
        if self._thread is not None:
            return self
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name=f"tcpproxy-{self.target_port}", daemon=True)
        self._thread.start()
        self._call(self._listen()).result(30)
        return self

    def cut(self) -> int:
        """Close every open connection and refuse (close at once) new ones; returns how many were closed."""
        return int(self._call(self._do_cut()).result(30))

    def restore(self) -> None:
        """Forward new connections again."""
        self._call(self._do_restore()).result(30)

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self._call(self._shutdown()).result(30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
            loop.close()
            self._loop = None
            self._thread = None

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ the loop's side

    def _call(self, coro: Any) -> Future[Any]:
        if self._loop is None:
            coro.close()
            raise RuntimeError("the proxy is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, host="127.0.0.1", port=self._listen_port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _do_cut(self) -> int:
        self._cut = True
        writers, self._writers = self._writers, set()
        for writer in writers:
            _abort(writer)
        self.killed += len(writers)
        return len(writers)

    async def _do_restore(self) -> None:
        self._cut = False

    async def _shutdown(self) -> None:
        await self._do_cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self._cut:
            self.refused += 1
            _abort(client_writer)
            return
        self.accepted += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            _abort(client_writer)
            return
        if self._cut:  # cut while connecting upstream
            _abort(client_writer)
            _abort(upstream_writer)
            return
        self._writers.update((client_writer, upstream_writer))
        try:
            await asyncio.gather(_pipe(client_reader, upstream_writer), _pipe(upstream_reader, client_writer))
        finally:
            for writer in (client_writer, upstream_writer):
                self._writers.discard(writer)
                _abort(writer)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(_CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        _abort(writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close at once, without flushing: the peer sees a reset (a cut cable, not a polite goodbye)."""
    transport = writer.transport
    if not transport.is_closing():
        transport.abort()
