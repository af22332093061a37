"""`federator kubeconfig`: where `federator up` wrote the admin and researcher kubeconfigs.

    federator kubeconfig [--role admin|researcher] [--state-dir DIR] [--export | --raw]

It reads only the hub's state directory and needs no hub. `--raw` prints the
file, which holds a token; nothing else here prints a credential.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    """Add `kubeconfig` to the `federator` parser."""
    p = sub.add_parser("kubeconfig", help="where `federator up` wrote the admin/researcher kubeconfigs",
                       description="Print the path (default), an export line, or the content of a kubeconfig "
                                   "written by `federator up` in development mode.")
    p.add_argument("--role", choices=["admin", "researcher"], default="admin")
    p.add_argument("--state-dir", default=".federator", help="the hub's --state-dir (default: .federator)")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--export", action="store_true", help="print `export KUBECONFIG=...`")
    shown.add_argument("--raw", action="store_true", help="print the file itself (it holds a token)")
    p.set_defaults(handler=_cmd_kubeconfig)


def _cmd_kubeconfig(args: argparse.Namespace) -> int:
    path = Path(args.state_dir) / f"{args.role}.kubeconfig"
    if not path.is_file():
        print(f"error: no {args.role} kubeconfig at {path}; start the hub with `federator up` "
              f"(it writes {args.role}.kubeconfig into its --state-dir)", file=sys.stderr)
        return 1
    if args.raw:
        sys.stdout.write(path.read_text(encoding="utf-8"))
    elif args.export:
        print(f"export KUBECONFIG={path.resolve()}")
    else:
        print(path.resolve())
    return 0
