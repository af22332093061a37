"""The `federator` command: the one front door for operators and researchers.

One module per command group (kubectl's `pkg/cmd/<verb>` layout), each with
`register(sub)` adding its commands to the parser:

    up.py          federator up                         the hub (and simulated clusters in dev mode)
    jobs.py        federator submit|get|describe|delete
    cluster.py     federator cluster add|list|remove
    kubeconfig.py  federator kubeconfig
    version.py     federator version
    sim.py         federator sim (simfault.py: federator sim fault)
    drill.py       federator drill [list|show]          failover drills (drillrun.py runs one) and their reports
    agent.py       federator agent                      the member-side fence agent
    etcd.py        federator etcd                       a local N-member etcd cluster for development
    bench.py       federator bench [replay|scale]       every benchmark into one report; the trace replay; scale
    common.py      UserError, InputError, hub access flags and runner, manifests, tables and printers

A command module imports `common` and never another command module (sim.py
registers its own `fault` from simfault.py; drill.py runs a drill with
drillrun.py, which calls the simulator's fault API through simfault.py's
helpers; none of these imports back), and nothing below the CLI
imports this package. `main` turns every error a user can cause into one
clear line on stderr and a non-zero exit code. No traceback reaches a user
(set FEDERATOR_DEBUG=1 to see one).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from federator import __version__
from federator.cli.common import Handler, UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="federator",
        description=(
            "federator: a multi-cluster federation hub for ML training gangs. "
            "It keeps snapshots of member clusters, places each whole gang into one "
            "cluster and delegates it to that cluster's gang scheduler."
        ),
        epilog="Run 'federator COMMAND --help' for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"federator {__version__}")
    parser.add_argument(
        "--log-level", default=os.environ.get("FEDERATOR_LOG_LEVEL", "info"),
        choices=["debug", "info", "warning", "error"], help="log verbosity (default: info)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    # The command groups, in the order `federator --help` lists their commands; a new group is a
    # module of this package with `register(sub)`, added here. (Imported here, not at the top, so that
    # `from federator.cli.common import ...` does not load every command.)
    from federator.cli import agent, bench, cluster, drill, etcd, jobs, kubeconfig, sim, up, version

    for group in (up, jobs, cluster, drill, kubeconfig, version, sim, agent, etcd, bench):
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - last line of defence: one line, no traceback
        if os.environ.get("FEDERATOR_DEBUG"):
            raise
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
