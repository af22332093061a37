"""`federator agent`: the member-side fence agent (federator/fencing/agent.py) as a process.

    federator agent --kubeconfig MEMBER.kubeconfig --hub-identity ID
                    [--namespace federator-system] [--poll-seconds 1] [--log-level info]
                    [--audit-log-path FILE [--audit-policy-file FILE] [--audit-log-maxsize MB] ...]

It runs inside a member cluster (in a real cluster a Deployment from deploy/; beside each simulated
cluster, started by `federator up`) and deletes every pod and PodGroup the hub `ID` made there once
the hub's Lease has not been renewed for its leaseDurationSeconds. Runs until SIGINT or SIGTERM
(with the hidden `--stop-with-parent`, which `federator up` passes, also when its stdin closes: the
process that started it died). Bad arguments are one line on stderr and exit code 2. Never prints a
credential.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from federator.apis.common import dns1123_label_errors
from federator.cli.common import InputError, UserError, parse_duration

if TYPE_CHECKING:
    from federator.apiserver.audit import AuditLog, AuditLogSettings

DEFAULT_NAMESPACE = "federator-system"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "agent",
        help="run the member-side fence agent: kill a hub's pods and PodGroups once its lease expires",
        description=(
            "Run the fence agent inside one member cluster. The hub renews a coordination.k8s.io/v1 Lease "
            "named after its identity in the member (namespace federator-system by default). When that Lease "
            "has not changed for its leaseDurationSeconds, measured on this agent's own clock from the last "
            "change it saw (so clock skew between hub and member does not matter), the agent deletes every pod "
            "and PodGroup labelled federator.dev/hub=ID in every namespace, records an Event (reason "
            "HubLeaseExpired) and a log line, and keeps deleting what arrives until the Lease is renewed again. "
            "A Lease that does not exist yet means the hub never came: nothing is deleted. "
            "Runs until interrupted (Ctrl-C or SIGTERM)."
        ),
        epilog="Example: federator agent --kubeconfig .federator/sim/onprem-rdma-a100-agent.kubeconfig "
               "--hub-identity federator",
    )
    p.add_argument("--kubeconfig", required=True, metavar="FILE",
                   help="kubeconfig of the member cluster the agent runs in (its own identity: it needs to get "
                        "Leases, list and delete pods and PodGroups, and create Events)")
    p.add_argument("--hub-identity", required=True, metavar="ID",
                   help="the hub whose objects to fence: its Lease's name and the value of the federator.dev/hub "
                        "label on what it dispatches (a federator hub's default: federator)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                   help=f"namespace of the hub's Lease and of the agent's Events (default: {DEFAULT_NAMESPACE})")
    p.add_argument("--poll-seconds", default="1", metavar="SECONDS",
                   help="how often to read the Lease: seconds, or a duration such as 500ms (default: 1); the "
                        "agent fences at most about this much later than leaseDuration after the last renewal")
    p.add_argument("--log-level", default=argparse.SUPPRESS, choices=["debug", "info", "warning", "error"],
                   help="log verbosity (default: info)")
    audit = p.add_argument_group("audit log (docs/audit.md)")
    audit.add_argument("--audit-log-path", default=None, metavar="FILE",
                       help="log every write the agent makes to its member (its fencing deletes, the Lease's "
                            "fence-lifted mark, its Events) as kube audit events (audit.k8s.io/v1, one JSON per "
                            "line; - is stdout) at Metadata, user system:federator:fence-agent, annotations "
                            "federator.dev/cluster and federator.dev/reason: fence. Off without this flag")
    audit.add_argument("--audit-policy-file", default=None, metavar="FILE",
                       help="a kube audit Policy (as federator up's) to leave some of them out (default: all)")
    audit.add_argument("--audit-log-maxsize", default=0, type=int, metavar="MB",
                       help="rotate the file past MB megabytes (NAME-<UTC time>.EXT; default: 0, never)")
    audit.add_argument("--audit-log-maxbackup", default=0, type=int, metavar="N",
                       help="rotated files kept (default: 0, all)")
    audit.add_argument("--audit-log-maxage", default=0, type=int, metavar="DAYS",
                       help="rotated files older than DAYS are removed (default: 0, none)")
    # for a parent process (federator up) that gives the agent a stdin pipe only it holds
    p.add_argument("--stop-with-parent", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(handler=_cmd_agent)


def _settings(args: argparse.Namespace) -> tuple[Path, str, str, float]:
    """(kubeconfig, hub identity, namespace, poll seconds), or UserError naming the flag."""
    from federator.fencing.agent import check_hub_identity

    try:
        identity = check_hub_identity(args.hub_identity)
    except ValueError as e:
        raise UserError(f"--hub-identity: {e}") from None
    try:
        poll = parse_duration(args.poll_seconds, flag="--poll-seconds")
    except InputError as e:
        raise UserError(str(e)) from None
    if poll > 3600:
        raise UserError(f"--poll-seconds {args.poll_seconds!r}: at most an hour")
    kubeconfig = Path(args.kubeconfig)
    if not kubeconfig.is_file():
        what = "is not a file" if kubeconfig.exists() else "no such file"
        raise UserError(f"--kubeconfig {kubeconfig}: {what}")
    namespace = str(args.namespace)
    if dns1123_label_errors(namespace):
        raise UserError(f"--namespace {namespace[:80]!r}: not a valid namespace name (lowercase letters, digits "
                        "and '-', at most 63)")
    return kubeconfig, identity, namespace, poll


def _audit_settings(args: argparse.Namespace) -> AuditLogSettings | None:
    """The --audit-* flags, or UserError naming the flag (and the policy's field)."""
    from federator.apiserver.audit import settings_from_flags

    try:
        return settings_from_flags(path=args.audit_log_path, policy_file=args.audit_policy_file,
                                   max_size_mb=args.audit_log_maxsize, max_backups=args.audit_log_maxbackup,
                                   max_age_days=args.audit_log_maxage)
    except ValueError as e:
        raise UserError(str(e)) from None


def _cmd_agent(args: argparse.Namespace) -> int:
    kubeconfig, identity, namespace, poll = _settings(args)
    audit_settings = _audit_settings(args)
    from federator.apiserver.audit import open_audit_log
    from federator.obs import configure_logging

    configure_logging(level=args.log_level)
    try:
        audit = open_audit_log(audit_settings) if audit_settings is not None else None
    except ValueError as e:
        raise UserError(str(e)) from None
    try:
        return asyncio.run(_serve(kubeconfig, identity=identity, namespace=namespace, poll_seconds=poll,
                                  stop_with_parent=bool(getattr(args, "stop_with_parent", False)), audit=audit))
    finally:
        if audit is not None:
            audit.close()


def _stop_when_stdin_closes(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Set `stop` once stdin reaches end of file (the parent holding the pipe is gone). Read by the event
    loop, not by a thread: a daemon thread blocked in a buffered stdin read aborts interpreter shutdown."""
    fd = sys.stdin.fileno()

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            stop.set()

    os.set_blocking(fd, False)
    loop.add_reader(fd, readable)


async def _serve(kubeconfig: Path, *, identity: str, namespace: str, poll_seconds: float,
                 stop_with_parent: bool = False, audit: AuditLog | None = None) -> int:
    from federator.apiserver.audit import FENCE_AGENT_USER
    from federator.fencing.agent import FenceAgent
    from federator.clusters.client import KubeconfigError, member_write_reason

    try:
        agent = await FenceAgent.from_kubeconfig(kubeconfig, hub_identity=identity, namespace=namespace,
                                                 poll_seconds=poll_seconds)
    except (KubeconfigError, ValueError) as e:
        raise UserError(str(e)) from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - not the main thread / platform
            pass
    if stop_with_parent:
        _stop_when_stdin_closes(loop, stop)
    if audit is not None:
        agent.client.write_log = functools.partial(audit.record_member_write, user=FENCE_AGENT_USER)
    try:
        with member_write_reason("fence"):  # everything the agent writes is fencing
            await agent.run(stop)
    finally:
        if stop_with_parent:
            loop.remove_reader(sys.stdin.fileno())
        await agent.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover
                pass
    return 0
