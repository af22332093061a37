"""federator/dev/tcpproxy.py: bytes pass both ways; a cut closes the open connection and every new one until
restore; stop is idempotent. Real sockets on loopback, an echo server in a thread."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from federator.dev.tcpproxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)  # so that the accepting thread sees `stop`
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(10)
    server.close()


def _roundtrip(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = conn.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def _closed(conn: socket.socket) -> bool:
    """The peer closed (EOF) or reset the connection."""
    try:
        return conn.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_bytes_pass_both_ways(echo: int) -> None:
    with TcpProxy(target_port=echo) as proxy:
        payload = bytes(range(256)) * 1000
        assert _roundtrip(proxy.port, payload) == payload


def test_a_cut_closes_open_connections_and_refuses_new_ones_until_restored(echo: int) -> None:
    with TcpProxy(target_port=echo) as proxy:
        conn = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        conn.sendall(b"ping")
        assert conn.recv(4) == b"ping"
        assert proxy.cut() == 2  # the client's side and the upstream side
        assert _closed(conn)
        conn.close()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as refused:
            assert _closed(refused)
        assert proxy.refused >= 1
        proxy.restore()
        assert _roundtrip(proxy.port, b"again") == b"again"
    proxy.stop()  # idempotent


def test_only_loopback_targets() -> None:
    with pytest.raises(ValueError):
        TcpProxy(target_port=80, target_host="10.0.0.1")
