"""Run a command while CPU hogs compete for the machine's cores (`make test-loaded`).

    python scripts/with_cpu_hogs.py [--hogs 2] [--runs 1] -- make test

Starts `--hogs` busy-loop processes (each takes one core while it can), runs the command
`--runs` times in a row (stopping at the first failure), stops the hogs and exits with the
command's exit code. It prints how long each run took. Tests must pass like this: they wait
for events, never for a moment that usually comes first (issue 13).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import subprocess
import sys
import time


def _burn() -> None:  # pragma: no cover - runs in the hog processes
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the command; we stop the hogs
    x = 0
    while True:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="with_cpu_hogs.py",
        description="Run COMMAND while busy-loop processes compete for the CPU (default: 2 hogs).",
        epilog="Example: python scripts/with_cpu_hogs.py --hogs 2 --runs 3 -- make test",
    )
    parser.add_argument("--hogs", type=int, default=2, help="busy-loop processes to run (default: 2)")
    parser.add_argument("--runs", type=int, default=1, help="run COMMAND this many times in a row (default: 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given: put it after --, e.g. -- make test")
    if not 0 <= args.hogs <= 64:
        parser.error(f"--hogs {args.hogs}: must be between 0 and 64")
    if not 1 <= args.runs <= 100:
        parser.error(f"--runs {args.runs}: must be between 1 and 100")
    hogs = [multiprocessing.Process(target=_burn, daemon=True, name=f"cpu-hog-{i}") for i in range(args.hogs)]
    for hog in hogs:
        hog.start()
    print(f"with_cpu_hogs: {args.hogs} hogs on {os.cpu_count()} cores; running {' '.join(command)} "
          f"{args.runs} time(s)", flush=True)
    code = 0
    try:
        for run in range(1, args.runs + 1):
            started = time.monotonic()
            code = subprocess.call(command)
            print(f"with_cpu_hogs: run {run}/{args.runs} exited {code} after {time.monotonic() - started:.0f}s",
                  flush=True)
            if code != 0:
                break
    except KeyboardInterrupt:
        code = 130
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join(timeout=10)
    return code


if __name__ == "__main__":
    sys.exit(main())
