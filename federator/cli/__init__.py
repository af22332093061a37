"""The `federator` command: the one front door for operators and researchers.

One module per command group (kubectl's `pkg/cmd/<verb>` layout), each with
`register(sub)` adding its commands to the parser:

    up.py          federator up                         the hub (and simulated clusters in dev mode)
    jobs.py        federator submit|get|describe|delete (get: jobs, clusters, queues)
    cluster.py     federator cluster add|list|remove
    kubeconfig.py  federator kubeconfig
    version.py     federator version
    sim.py         federator sim (simfault.py: federator sim fault)
    drill.py       federator drill [list|show]          failover drills (drillrun.py runs one) and their reports
    dashboard.py   federator dashboard                  the web dashboard through a local proxy (kubeconfig credentials)
    agent.py       federator agent                      the member-side fence agent
    etcd.py        federator etcd                       a local N-member etcd cluster for development
    store.py       federator store rewrite              re-encrypt the hub store after a key rotation
    bench.py       federator bench [replay|scale]       every benchmark into one report; the trace replay; scale
    common.py      UserError, InputError, hub access flags and runner, manifests, tables and printers
    hubclient.py   the one way the CLI talks to the hub API (kubeconfig loading like kubectl, then HTTPS)

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
    from federator.cli import agent, bench, cluster, dashboard, drill, etcd, jobs, kubeconfig, sim, store, up, version

    for group in (up, jobs, cluster, drill, dashboard, kubeconfig, version, sim, agent, etcd, store, bench):
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Bytes that are not UTF-8 (in a file name, say) are written back as they came, never a UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="surrogateescape")
    try:
        try:
            code = _main(argv)
        except SystemExit:  # argparse's --help, --version and usage errors: printed, not yet flushed
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # here, not at the interpreter's exit, where a closed pipe is an ignored traceback
        return code
    except BrokenPipeError:
        # `federator ... | head`: the reader has what it wanted. Say nothing, and let the interpreter's
        # last flush of stdout go nowhere instead of failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    undecodable = _undecodable_argument(parser, args)
    if undecodable is not None:
        print(f"error: {undecodable}", file=sys.stderr)
        return 2
    handler: Handler = args.handler
    try:
        return handler(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise
    except RecursionError:
        # Only hostile input gets this deep (a YAML or JSON file of thousands of nested levels).
        print("error: an input file is nested too deeply to read", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - last line of defence: one line, no traceback
        if os.environ.get("FEDERATOR_DEBUG"):
            raise
        print(f"error: federator failed unexpectedly ({type(e).__name__}: {e}); this is a bug: please report it "
              "(FEDERATOR_DEBUG=1 shows where)", file=sys.stderr)
        return 1


#: Arguments that name files or pass arguments through: any bytes the OS allows may be in them.
_PATH_METAVARS = frozenset({"FILE", "DIR", "PATH"})
_PATH_DESTS = frozenset({"state_dir", "store", "kubeconfig", "data_dir", "scale_args", "bench_args"})


def _undecodable_argument(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The message for the first argument that is not UTF-8 text (the OS hands Python such bytes as lone
    surrogates) and is not a file name, or None. Names, namespaces, selectors and the like are sent to the
    hub as UTF-8: such an argument could only fail later with Python's words."""
    shown: dict[str, str] = {}
    paths: set[str] = set()
    pending = [parser]
    while pending:
        for action in pending.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
                continue
            shown.setdefault(action.dest, "/".join(action.option_strings) or str(action.metavar or action.dest))
            if action.metavar in _PATH_METAVARS or action.dest in _PATH_DESTS:
                paths.add(action.dest)
    for dest, value in vars(args).items():
        values = value if isinstance(value, list) else [value]
        for text in values:
            if not isinstance(text, str) or dest in paths:
                continue
            if any("\ud800" <= ch <= "\udfff" for ch in text):
                try:
                    encoded = text.encode("utf-8", "surrogateescape")
                except UnicodeEncodeError:
                    encoded = text.encode("utf-8", "backslashreplace")
                raw = encoded.decode("ascii", "backslashreplace")
                return f"argument {shown.get(dest, dest)}: {raw!s} is not UTF-8 text"
    return None
