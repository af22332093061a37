"""The `federator` command: the one front door for operators and researchers.

Each subcommand registers itself in `build_parser`; `main` turns every error a
user can cause into one clear line on stderr and a non-zero exit code. No
traceback reaches a user (set FEDERATOR_DEBUG=1 to see one).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from federator import __version__


class UserError(Exception):
    """An error the user caused or can fix; printed as one line, exit code 2 by default."""

    def __init__(self, message: str, *, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


Handler = Callable[[argparse.Namespace], int]


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

    from federator import cli_jobs, cli_up  # local imports keep `federator --help` fast

    cli_up.register(sub)
    cli_jobs.register(sub)  # submit, get, describe, delete, cluster, kubeconfig, version

    from federator import cli_sim

    cli_sim.register(sub)
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


if __name__ == "__main__":
    sys.exit(main())
