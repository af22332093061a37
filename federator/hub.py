"""The hub process: wires store + API + controllers into one aiohttp app.

At this stage `run_hub` (behind `federator up`) runs what exists: it opens
the store named by --store (creating the state directory for sqlite), takes
the hub leadership (a lease-backed leader key whose create revision is the
fencing token later controllers attach to their writes), reports what it
holds, and runs until Ctrl-C or SIGTERM; then it releases leadership and
closes the store cleanly. Later issues replace the body with the aiohttp app.

It must never import federator.sim: the hub cannot tell a simulator from a
real cluster; only the CLI starts both.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from federator import __version__
from federator.obs import configure_logging, get_logger
from federator.store.leader import FencingToken, LeaderElection
from federator.store.open import open_store
from federator.store.protocol import StoreError

_log = get_logger("hub")

#: How long a crashed leader's key outlives it (etcd; sqlite revokes at open).
LEADER_TTL_SECONDS = 10.0


def run_hub(args: argparse.Namespace) -> int:
    """Run the hub until interrupted; returns the process exit code."""
    configure_logging(level=getattr(args, "log_level", "info"))
    store_url: str = args.store
    state_dir = Path(args.state_dir)
    try:
        _prepare_state(store_url, state_dir)
    except OSError as e:
        print(f"error: cannot create the hub's state directory: {e}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(store_url))
    except StoreError as e:
        _log.error("hub stopped: store error", error=str(e))
        print(f"error: {e}", file=sys.stderr)
        return 1


def _prepare_state(store_url: str, state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    if store_url.startswith("sqlite://"):
        db_path = Path(store_url.removeprefix("sqlite://").split("?", 1)[0])
        if db_path.parent != Path(""):
            db_path.parent.mkdir(parents=True, exist_ok=True)


async def _serve(store_url: str) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    _log.info("hub starting", version=__version__, store=store_url)
    store = await open_store(store_url)
    election = LeaderElection(store, name="hub", ttl_seconds=LEADER_TTL_SECONDS)
    exit_code = 0
    try:
        token = await _lead_or_stop(election, stop)
        if token is None:
            return 0
        _log.info(
            "hub ready",
            store=store_url,
            revision=await store.current_revision(),
            leader_key=election.key,
            leader_token=token.revision,
            holder=election.holder,
            note="API server and member clusters arrive in later issues; Ctrl-C stops the hub",
        )
        stopped = asyncio.create_task(stop.wait(), name="hub-stop-signal")
        lost = asyncio.create_task(election.lost.wait(), name="hub-leadership-watch")
        await asyncio.wait({stopped, lost}, return_when=asyncio.FIRST_COMPLETED)
        for task in (stopped, lost):
            task.cancel()
        if election.lost.is_set() and not stop.is_set():
            _log.error("hub stopping: leadership lost", leader_key=election.key)
            exit_code = 1
        else:
            _log.info("hub stopping", reason="signal")
    finally:
        await election.resign()
        await store.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    _log.info("hub stopped", exit_code=exit_code)
    return exit_code


async def _lead_or_stop(election: LeaderElection, stop: asyncio.Event) -> FencingToken | None:
    """Campaign for leadership; None if a stop signal came first."""
    first = await election.try_acquire()
    if first is not None:
        return first
    holder = await election.current_leader()
    _log.info("waiting for leadership", leader_key=election.key,
              held_by=holder.value.decode(errors="replace") if holder else "nobody")
    campaign = asyncio.create_task(election.campaign(), name="hub-campaign")
    stopped = asyncio.create_task(stop.wait(), name="hub-stop-signal")
    await asyncio.wait({campaign, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if campaign.done():
        return campaign.result()
    campaign.cancel()
    try:
        await campaign
    except asyncio.CancelledError:
        pass
    return None
