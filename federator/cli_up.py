"""`federator up`: run the hub on its embedded default (sqlite in ./.federator/).

At this stage of the project the hub is its store and its leadership: it opens
the store, takes the leader lease, reports what it holds, and keeps running
until Ctrl-C. Later issues add the API server, cluster sync and controllers.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "up",
        help="run the hub (sqlite store in ./.federator/ unless --store is given)",
        description="Run the federator hub until interrupted (Ctrl-C stops it cleanly).",
    )
    p.add_argument(
        "--store", default="sqlite://.federator/hub.db",
        help="store URL: sqlite://PATH (default: sqlite://.federator/hub.db), "
             "etcd://HOST:PORT[,HOST:PORT...], or memory://",
    )
    p.add_argument("--state-dir", default=".federator", help="where the hub keeps its files (default: .federator)")
    p.set_defaults(handler=_cmd_up)


def _cmd_up(args: argparse.Namespace) -> int:
    from federator.hub import run_hub

    return run_hub(args)
