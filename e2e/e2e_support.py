"""Helpers of the end-to-end tests: `federator up` as a real process, driven only through its public
endpoint and the kubeconfigs it writes (kubectl, the federator CLI).

- `FederatorUp(workdir, *flags)`: starts `python -m federator.cli up` with `workdir` as its working
  directory (state in `workdir/.federator`, the hub on a free port), collects stdout and the JSON log
  lines of stderr in background threads (the simulated clusters log a lot: a full pipe would stall the
  process), waits for the "hub ready" line, and stops it with SIGINT (Ctrl-C).
- `kubectl(...)`: /usr/bin/kubectl with a private discovery cache.
- `wait_for(...)`: polling with a deadline (never a bare sleep for synchronisation).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "resnet-ps.yaml"
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], *, timeout: float = 60.0, interval: float = 0.2) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


class FederatorUp:
    """`federator up` as a subprocess (see the module docstring)."""

    def __init__(self, workdir: Path, *flags: str) -> None:
        self.workdir = workdir
        self.state = workdir / ".federator"
        self.flags = flags
        self.process: subprocess.Popen[str] | None = None
        self.stdout: list[str] = []
        self.logs: list[dict[str, Any]] = []
        self.other_stderr: list[str] = []
        #: every stderr line as written (JSON or not)
        self.stderr_lines: list[str] = []
        self._ready = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def admin(self) -> Path:
        return self.state / "admin.kubeconfig"

    def member(self, cluster: str) -> Path:
        return self.state / "sim" / f"{cluster}.kubeconfig"

    def start(self, *, timeout: float = 120.0) -> dict[str, Any]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
        env.pop("FEDERATOR_DEBUG", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "federator.cli", "up", "--listen", "127.0.0.1:0", "--namespaces", "autoprovision",
             *self.flags],
            cwd=self.workdir, env=env, text=True, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self.process.poll() is not None:
                self._join()
                raise AssertionError(f"federator up exited with {self.process.returncode} before it was ready:\n"
                                     + "\n".join(self.other_stderr[-20:] + self.stdout[-20:]))
            if time.monotonic() > deadline:
                raise AssertionError(f"federator up was not ready within {timeout}s")
        return self.event("hub ready")

    def _read_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.stdout.append(line.rstrip("\n"))

    def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            text = line.rstrip("\n")
            self.stderr_lines.append(text)
            if text.startswith("{"):
                try:
                    record = json.loads(text)
                except json.JSONDecodeError:
                    self.other_stderr.append(text)
                    continue
                self.logs.append(record)
                if record.get("event") == "hub ready":
                    self._ready.set()
            else:
                self.other_stderr.append(text)

    def _join(self) -> None:
        for thread in self._threads:
            thread.join(10)
        if self.process is not None and self.process.poll() is not None:
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()

    def event(self, name: str) -> dict[str, Any]:
        for record in self.logs:
            if record.get("event") == name:
                return record
        raise AssertionError(f"no {name!r} log line")

    def stop(self, *, timeout: float = 60.0, sig: signal.Signals = signal.SIGINT) -> int:
        """Ctrl-C (or `sig`, e.g. SIGTERM as a service manager stops it); the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
                self._join()
                tail = [str(r) for r in self.logs[-15:]] + self.other_stderr[-15:]
                raise AssertionError(
                    f"federator up did not stop within {timeout}s of Ctrl-C; last output:\n" + "\n".join(tail)
                ) from None
        self._join()
        return self.process.returncode

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._join()

    def kubectl(self, *args: str, kubeconfig: Path | None = None, timeout: float = 60.0,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        return kubectl(*args, kubeconfig=kubeconfig or self.admin, cache=self.workdir / "kubectl-cache",
                       timeout=timeout, check=check)

    def json(self, *args: str, kubeconfig: Path | None = None) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json", kubeconfig=kubeconfig).stdout)


def kubectl(*args: str, kubeconfig: Path, cache: Path, timeout: float = 60.0,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), "--request-timeout", "20s", *args],
        capture_output=True, text=True, timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result
