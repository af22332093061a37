"""`federator version`: the client's version and, unless --client, the hub's.

    federator version [--client]
"""

from __future__ import annotations

import argparse
from typing import Any

from federator import __version__
from federator.cli.common import hub_flags, run_on_hub
from federator.cli.hubclient import HubClient


def register(sub: Any) -> None:
    """Add `version` to the `federator` parser."""
    p = sub.add_parser("version", help="print the client and hub versions")
    p.add_argument("--client", action="store_true", help="only the client version (no hub needed)")
    hub_flags(p)
    p.set_defaults(handler=_cmd_version)


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"Client Version: federator {__version__}", flush=True)
    if args.client:
        return 0

    async def work(client: HubClient) -> int:
        info = await client.request("GET", "/version")
        hub = info.get("federatorVersion") or "unknown"
        print(f"Server Version: federator {hub} (Kubernetes API {info.get('gitVersion', '?')}) "
              f"at {client.connection.server}", flush=True)
        return 0

    return run_on_hub(args, work)
