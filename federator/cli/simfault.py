"""`federator sim fault`: inject faults into a running simulated cluster.

    federator sim fault --kubeconfig F outage --seconds 10 [--mode refuse|503]
    federator sim fault --kubeconfig F latency --seconds 0.2 [--jitter 0.1] [--duration 60]
    federator sim fault --kubeconfig F latency --clear
    federator sim fault --kubeconfig F drop-watches
    federator sim fault --kubeconfig F compact
    federator sim fault --kubeconfig F node-failure --node a100-0003
    federator sim fault --kubeconfig F node-recover --node a100-0003
    federator sim fault --kubeconfig F gpu-unhealthy --node a100-0003 --count 2
    federator sim fault --kubeconfig F partition [--seconds 30] [--from TOKEN-OR-USER]
    federator sim fault --kubeconfig F partition --end
    federator sim fault --kubeconfig F status | clear

It reads the cluster's URL, CA and bearer token from the kubeconfig that
`federator sim` wrote and calls the cluster's admin API under /_sim/faults.
Errors are one line. This module never prints or logs the token, and imports
no other command module of the CLI (`federator/cli/sim.py` registers it).
"""

from __future__ import annotations

import argparse
import base64
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from federator.cli.common import UserError

FAULTS_PATH = "/_sim/faults"
TIMEOUT_SECONDS = 15.0


def register(sub: Any) -> None:
    """Add `fault` to the sub-commands of `federator sim`."""
    p = sub.add_parser(
        "fault",
        help="inject a fault into a running simulated cluster",
        description="Inject a fault (outage, latency, dropped watches, compaction, node failure, unhealthy GPUs, "
                    "partition) into a simulated cluster served by `federator sim`.",
        epilog="Example: federator sim fault --kubeconfig .federator/sim/onprem-rdma-a100.kubeconfig outage "
               "--seconds 10",
    )
    p.add_argument("--kubeconfig", required=True, help="the cluster's kubeconfig (written by `federator sim`)")
    p.add_argument("--context", default=None, help="kubeconfig context (default: the current context)")
    faults = p.add_subparsers(dest="fault", metavar="FAULT")
    faults.required = True

    f = faults.add_parser("outage", help="refuse connections (or answer 503) for N seconds")
    f.add_argument("--seconds", type=float, required=True)
    f.add_argument("--mode", choices=["refuse", "503"], default="refuse")
    f = faults.add_parser("latency", help="add latency to every API request")
    f.add_argument("--seconds", type=float, default=None)
    f.add_argument("--jitter", type=float, default=0.0, help="extra random delay up to this many seconds")
    f.add_argument("--duration", type=float, default=None, help="lift the latency after this many seconds")
    f.add_argument("--clear", action="store_true", help="remove added latency")
    faults.add_parser("drop-watches", help="cut every open watch stream")
    faults.add_parser("compact", help="compact history past every watcher and drop watches (watchers get 410)")
    for name, text in (("node-failure", "the node stops reporting: NotReady, its pods fail"),
                       ("node-recover", "the node reports Ready again")):
        f = faults.add_parser(name, help=text)
        f.add_argument("--node", required=True)
    f = faults.add_parser("gpu-unhealthy", help="mark the first COUNT GPUs of a node unhealthy: lowers allocatable "
                                                "and crashes the running pods holding them (exit 134, reason Error)")
    f.add_argument("--node", required=True)
    f.add_argument("--count", type=int, required=True, help="unhealthy GPUs (0 heals them)")
    f = faults.add_parser("partition",
                          help="the cluster keeps running but answers nobody (with --from: nobody of that identity)")
    f.add_argument("--seconds", type=float, default=None, help="end after this many seconds (default: until --end)")
    f.add_argument("--from", dest="source", default=None, metavar="TOKEN-OR-USER",
                   help="cut off only the requests of this identity, a user name (sim-admin: what the hub uses; "
                        "federator-agent: the fence agent) or a bearer token; everyone else is answered "
                        "(default: everyone is cut off). A user name keeps the token out of your shell history")
    f.add_argument("--end", action="store_true", help="end the partition now")
    faults.add_parser("status", help="show the faults in effect")
    faults.add_parser("clear", help="lift outage, latency and partition")
    p.set_defaults(sim_handler=_cmd_fault)


@dataclass(frozen=True)
class Target:
    server: str
    token: str
    ssl_context: ssl.SSLContext | None


def read_kubeconfig(path: str | Path, *, context: str | None = None) -> Target:
    """The server, token and TLS trust of a kubeconfig context. Raises
    UserError naming the file and the missing field (never the token)."""
    import yaml

    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise UserError(f"{p}: cannot read kubeconfig: {e.strerror or e}") from None
    except (yaml.YAMLError, UnicodeDecodeError):
        raise UserError(f"{p}: not a valid kubeconfig (YAML does not parse)") from None
    if not isinstance(doc, dict):
        raise UserError(f"{p}: not a valid kubeconfig (expected a mapping)")

    def named(section: str, name: str | None) -> dict[str, Any]:
        for item in doc.get(section) or []:
            if isinstance(item, dict) and item.get("name") == name:
                body = item.get(section[:-1])
                if isinstance(body, dict):
                    return body
        raise UserError(f"{p}: {section}: no entry named {name!r}")

    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise UserError(f"{p}: current-context is not set (pass --context)")
    ctx = named("contexts", ctx_name)
    cluster = named("clusters", ctx.get("cluster"))
    user = named("users", ctx.get("user"))
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("http://", "https://")):
        raise UserError(f"{p}: clusters[{ctx.get('cluster')}].server must be an http(s) URL")
    token = user.get("token")
    if not token and user.get("tokenFile"):
        try:
            token = Path(str(user["tokenFile"])).read_text(encoding="utf-8").strip()
        except OSError as e:
            raise UserError(f"{p}: users[{ctx.get('user')}].tokenFile: cannot read: {e.strerror}") from None
    if not isinstance(token, str) or not token:
        raise UserError(f"{p}: users[{ctx.get('user')}] has no bearer token")
    ssl_context = None
    if server.startswith("https://"):
        if cluster.get("insecure-skip-tls-verify"):
            ssl_context = ssl.create_default_context()
            ssl_context.check_hostname = False
            ssl_context.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            try:
                pem = base64.b64decode(str(cluster["certificate-authority-data"]), validate=True).decode("ascii")
                ssl_context = ssl.create_default_context(cadata=pem)
            except (ValueError, ssl.SSLError):
                raise UserError(f"{p}: clusters[{ctx.get('cluster')}].certificate-authority-data is not a "
                                "base64 PEM certificate") from None
        elif cluster.get("certificate-authority"):
            try:
                ssl_context = ssl.create_default_context(cafile=str(cluster["certificate-authority"]))
            except (OSError, ssl.SSLError) as e:
                raise UserError(f"{p}: clusters[{ctx.get('cluster')}].certificate-authority: {e}") from None
        else:
            ssl_context = ssl.create_default_context()
    return Target(server=server.rstrip("/"), token=token, ssl_context=ssl_context)


def call(target: Target, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """One admin call; returns the JSON answer. UserError on failure."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(target.server + path, data=data, method=method, headers={
        "Authorization": f"Bearer {target.token}", "Content-Type": "application/json",
        "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_SECONDS, context=target.ssl_context) as resp:
            answer = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            status = json.loads(e.read())
            message = status.get("message") or e.reason
        except ValueError:
            message = e.reason
        raise UserError(f"the cluster refused the fault ({e.code}): {message}") from None
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        raise UserError(f"cannot reach the cluster at {target.server}: {reason}") from None
    except ValueError:
        raise UserError(f"the cluster at {target.server} did not answer with JSON") from None
    if not isinstance(answer, dict):
        raise UserError(f"the cluster at {target.server} answered with unexpected JSON")
    return answer


def request_for(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None]:
    """(method, path, body) of the admin call for parsed arguments."""
    fault = args.fault
    p = FAULTS_PATH
    if fault == "outage":
        return "POST", f"{p}/outage", {"seconds": args.seconds, "mode": args.mode}
    if fault == "latency":
        if args.clear:
            return "DELETE", f"{p}/latency", None
        if args.seconds is None:
            raise UserError("latency needs --seconds S (or --clear)")
        body: dict[str, Any] = {"seconds": args.seconds, "jitterSeconds": args.jitter}
        if args.duration is not None:
            body["durationSeconds"] = args.duration
        return "POST", f"{p}/latency", body
    if fault in ("drop-watches", "compact"):
        return "POST", f"{p}/{fault}", None
    if fault in ("node-failure", "node-recover"):
        return "POST", f"{p}/{fault}", {"node": args.node}
    if fault == "gpu-unhealthy":
        return "POST", f"{p}/gpu-unhealthy", {"node": args.node, "count": args.count}
    if fault == "partition":
        if args.end:
            if args.source is not None:
                raise UserError("partition --end ends whatever partition is in effect; it takes no --from")
            return "DELETE", f"{p}/partition", None
        partition: dict[str, Any] = {"seconds": args.seconds}
        if args.source is not None:
            partition["from"] = args.source
        return "POST", f"{p}/partition", partition
    if fault == "status":
        return "GET", p, None
    if fault == "clear":
        return "DELETE", p, None
    raise UserError(f"unknown fault {fault!r}")  # pragma: no cover - argparse restricts choices


def _cmd_fault(args: argparse.Namespace) -> int:
    target = read_kubeconfig(args.kubeconfig, context=args.context)
    method, path, body = request_for(args)
    answer = call(target, method, path, body)
    print(json.dumps(answer, indent=2, sort_keys=True))
    return 0
