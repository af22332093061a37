"""`federator bench`: benchmarks run from the installed command.

    federator bench replay [--trace DIR] [--clusters FILE] [--seed N] [--jobs N]
                           [--policies a,b,...] [--workers N] --out DIR

Each benchmark is a subcommand of `bench`, registered by its own function
below (`_register_replay`, ...); a subcommand's handler loads its engine
lazily, so `federator --help` does not import matplotlib.
"""

from __future__ import annotations

import argparse
from typing import Any

from federator.cli.common import UserError


def register(sub: Any) -> None:
    """Add `bench` and its subcommands to the `federator` parser."""
    p = sub.add_parser("bench", help="run benchmarks (trace replay, ...) and write their reports")
    benches = p.add_subparsers(dest="bench", metavar="BENCHMARK")
    benches.required = True
    _register_replay(benches)


# ---------------------------------------------------------------- replay


def _register_replay(benches: Any) -> None:
    p = benches.add_parser(
        "replay",
        help="replay the ITP GPU trace in virtual time through federator and baseline policies",
        description=(
            "Replay a GPU-cluster job trace in virtual time (a discrete-event simulation, no wall-clock "
            "waits) through the real placement engine and baseline dispatch policies, over simulated "
            "member clusters, and write report.json, report.md and PNG plots to --out."
        ),
    )
    p.add_argument("--trace", default=None, metavar="DIR",
                   help="directory of the trace's clusterNN.csv files (default: ../shared/traces/itp)")
    p.add_argument("--clusters", default=None, metavar="FILE",
                   help="clusters YAML (default: the file derived from the trace's peak demand)")
    p.add_argument("--seed", default="1", metavar="N", help="seed of the attribute rule (default: 1)")
    p.add_argument("--jobs", default=None, metavar="N",
                   help="replay only the first N jobs by submission time (default: all)")
    p.add_argument("--policies", default=None, metavar="a,b,...", help="policies to run (default: all)")
    p.add_argument("--workers", default=None, metavar="N",
                   help="policies replayed in parallel processes (default: the number of CPUs, at most 4)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for report.json, report.md, *.png")
    p.set_defaults(handler=_cmd_replay)


def _cmd_replay(args: argparse.Namespace) -> int:
    raise UserError("federator bench replay: the replay engine is not built yet")
