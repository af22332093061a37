"""Failover benchmark: 500 running gangs on one simulated cluster, partitioned from the hub.

    .venv/bin/python bench/failover.py [--runs 3] [--gangs 500] [--grace 10s] [--lease 5s] [--margin 2s]
                                       [--failover-rate 500] [--duration 60s] [--workdir DIR]
                                       [--quick] [--json FILE]

Each run starts, laid out as `federator up` lays it out (state in WORKDIR/.federator, simulated
clusters' kubeconfigs in .federator/sim/):

- three simulated member clusters in this process: `home` (the one to partition) and two others with
  room for every gang (`--nodes` nodes of 64 CPUs and 250 pods each; pods run for an hour);
- the hub in its own process, built as `federator up` builds it (`hub_controllers()`, HTTPS, token auth,
  the failover settings from `--grace`, `--lease`, `--margin`, `--failover-rate` through
  `hub.settings_knobs`, as `federator up --cluster-loss-grace ... --member-lease-duration ...
  --lease-margin ... --failover-rate ...`);
- the fence agent of `home` in its own process (`federator agent --kubeconfig
  .federator/sim/home-agent.kubeconfig --hub-identity federator`), as `federator up` runs it.

It submits `--gangs` 2-pod gangs while the other clusters are cordoned (so every gang lands in
`home`), waits until all run, uncordons the others, waits until the hub's failover plan has a new
home for every gang, then runs `federator drill --cluster home --fault partition --duration D -o json`
as a process (a partition `from` the hub's identity: the agent and the drill's reads of `home`
still get answers) and prints the drill report's figures: each run's and the median of `--runs`.
The bar (issue 12): every gang running elsewhere within grace + lease margin + 3 s of the partition
(the drill's runningAgainSeconds, counted only when every gang moved), jobsLost 0,
maxConcurrentCopies 1. Never part of the tests.
`--quick`: 60 gangs, the partition held 15 s (each unless given). `--json FILE`: every run's figures in
the format of bench/benchresult.py (`federator bench` reads it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
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

HOME = "home"
OTHERS = ("spare-a", "spare-b")
NAMESPACE = "bench"
GROUP_PATH = "/apis/federator.dev/v1alpha1"
JOBS = f"{GROUP_PATH}/namespaces/{NAMESPACE}/trainingjobs"
ALL_JOBS = f"{GROUP_PATH}/trainingjobs"
CLUSTERS = f"{GROUP_PATH}/memberclusters"
HUB_IDENTITY = "federator"
FIGURES = ("gangsAffected", "gangsMoved", "gangsUnplaceable", "detectSeconds", "redispatchSeconds",
           "runningAgainSeconds", "jobsLost", "maxConcurrentCopies", "duplicates", "stalePodsKilled", "planMatched")


def job_body(name: str) -> bytes:
    return json.dumps({
        "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"roles": [{"name": "worker", "replicas": 2,
                            "template": {"image": "trainer:1.4", "resources": {"cpu": "100m", "memory": "128Mi"}}}],
                 "placement": {"network": "any"}},
    }).encode()


# ---------------------------------------------------------------- the hub process


async def serve(state: Path, clusters: Path, knobs: dict[str, Any]) -> None:
    """The child process: the hub as `federator up` builds it, until SIGINT/SIGTERM."""
    from aiohttp import web

    from federator.apiserver.auth import TokenAuthenticator
    from federator.controllers.context import HubSettings
    from federator.dev.certs import ensure_dev_tls, server_ssl_context
    from federator.runtime.gcpolicy import server_gc
    from federator.hub.app import build_hub_app, ensure_dev_token_file, hub_controllers, write_dev_kubeconfigs
    from federator.obs import configure_logging

    configure_logging(level=os.environ.get("FEDERATOR_BENCH_HUB_LOG_LEVEL", "warning"), json=True)
    state.mkdir(parents=True, exist_ok=True)
    tls = ensure_dev_tls(state)
    token_file, tokens = ensure_dev_token_file(state)
    settings = HubSettings.from_mapping({"state_dir": state, **knobs})
    app = build_hub_app(settings, store_url=f"sqlite://{state / 'hub.db'}", controllers=hub_controllers(),
                        authenticator=TokenAuthenticator.from_file(token_file), clusters_dir=clusters)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl_context(tls.server_cert, tls.server_key))
    await site.start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    write_dev_kubeconfigs(state, server=url, ca_pem=tls.ca_pem(), tokens=tokens)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"hub is serving {url}", flush=True)
    with server_gc():
        await stop.wait()
        await runner.cleanup()


class Hub:
    """The hub (see `serve`) as a child process on a free port."""

    def __init__(self, state: Path, clusters: Path, knobs: dict[str, Any]) -> None:
        self.state = state
        self.clusters = clusters
        self.knobs = knobs
        self.process: asyncio.subprocess.Process | None = None
        self.url = ""
        self.token = ""
        self.ssl: ssl.SSLContext | None = None

    async def __aenter__(self) -> Hub:
        self.state.mkdir(parents=True, exist_ok=True)
        with (self.state.parent / "hub.log").open("wb") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--serve", str(self.state), str(self.clusters), json.dumps(self.knobs),
                cwd=str(self.state.parent), env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdout=asyncio.subprocess.PIPE, stderr=log)
        assert self.process.stdout is not None
        while True:
            line = (await asyncio.wait_for(self.process.stdout.readline(), 60)).decode()
            if not line:
                raise RuntimeError(f"the hub exited before serving; see {self.state.parent / 'hub.log'}")
            if "is serving https://" in line:
                self.url = line.rsplit(" ", 1)[-1].strip()
                break
        config = yaml.safe_load((self.state / "admin.kubeconfig").read_text())
        self.token = config["users"][0]["user"]["token"]
        self.ssl = ssl.create_default_context(cafile=str(self.state / "tls" / "ca.crt"))
        asyncio.get_running_loop().create_task(self.process.stdout.read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await stop_process(self.process, what="the hub")

    def session(self, *, limit: int = 64) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            connector=aiohttp.TCPConnector(limit=limit, ssl=self.ssl))


async def stop_process(process: asyncio.subprocess.Process | None, *, what: str) -> None:
    if process is None or process.returncode is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(process.wait(), 60)
    except TimeoutError:
        print(f"  {what} did not stop within 60 s of SIGINT; killed", file=sys.stderr)
        process.kill()
        await process.wait()


# ---------------------------------------------------------------- the member clusters and the agent


class Members:
    """The simulated clusters in this process, their kubeconfigs in STATE/sim, registrations in a directory."""

    def __init__(self, state: Path, *, nodes: int) -> None:
        self.state = state
        self.nodes = nodes
        self.sims: list[Any] = []

    async def start(self) -> Path:
        from federator.sim.profile import parse_profile
        from federator.sim.server import SimCluster

        sim_dir = self.state / "sim"
        registrations = sim_dir / "registrations"
        registrations.mkdir(parents=True)
        for name in (HOME, *OTHERS):
            profile = parse_profile({
                "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
                "location": {"type": "on-prem", "region": "bench"},
                "network": {"fabric": "ethernet", "bandwidthGbps": 100},
                "schedulers": [{"type": "volcano"}, {"type": "default"}],
                "kubelet": {"startDelaySeconds": 0.2, "defaultRunSeconds": 3600, "terminationSeconds": 0.05},
                "nodePools": [{"name": "cpu", "count": self.nodes, "cpu": "64", "memory": "256Gi",
                               "maxPods": 250}],
            }, source="bench/failover.py")
            sim = SimCluster(profile)
            await sim.start()
            self.sims.append(sim)
            kubeconfig = sim.write_kubeconfig(sim_dir / f"{name}.kubeconfig")
            sim.write_agent_kubeconfig(sim_dir / f"{name}-agent.kubeconfig")
            (registrations / f"{name}.yaml").write_text(yaml.safe_dump({
                "apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": name},
                "spec": {"connection": {"kubeconfigPath": str(kubeconfig.resolve())},
                         "location": {"type": "onPrem", "region": "bench"},
                         "network": {"type": "ethernet", "bandwidthGbps": 100.0},
                         "scheduler": {"name": "volcano"}, "costPerGpuHour": 1.0},
            }))
        return registrations

    async def stop(self) -> None:
        for sim in self.sims:
            await sim.stop()


async def start_agent(state: Path, *, poll: str) -> asyncio.subprocess.Process:
    """`federator agent` for HOME, as `federator up` starts it; returns once it watches the lease."""
    log = (state / "sim" / f"{HOME}-agent.log").open("ab")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "federator.cli", "agent", "--kubeconfig", str(state / "sim" / f"{HOME}-agent.kubeconfig"),
        "--hub-identity", HUB_IDENTITY, "--poll-seconds", poll,
        cwd=str(ROOT), env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.PIPE)
    assert process.stderr is not None
    while True:
        line = await asyncio.wait_for(process.stderr.readline(), 60)
        if not line:
            raise RuntimeError("the fence agent exited before it watched the lease")
        log.write(line)
        if b"fence agent watching" in line:
            break

    async def keep_logging() -> None:
        assert process.stderr is not None
        async for more in process.stderr:
            log.write(more)
        log.close()

    asyncio.get_running_loop().create_task(keep_logging())
    return process


# ---------------------------------------------------------------- one run


async def wait_for(what: str, check: Any, *, timeout: float, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(interval)


async def set_cordoned(session: aiohttp.ClientSession, hub: Hub, names: tuple[str, ...], cordoned: bool) -> None:
    for name in names:
        async with session.patch(f"{hub.url}{CLUSTERS}/{name}", data=json.dumps({"spec": {"cordoned": cordoned}}),
                                 headers={"Content-Type": "application/merge-patch+json"}) as response:
            if response.status != 200:
                raise RuntimeError(f"cordon {name}: {response.status} {await response.text()}")


async def run_once(args: argparse.Namespace, workdir: Path, run: int, knobs: dict[str, Any]) -> dict[str, float]:
    from federator.runtime.gcpolicy import server_gc

    state = workdir / ".federator"
    members = Members(state, nodes=args.nodes)
    clusters = await members.start()
    agent: asyncio.subprocess.Process | None = None
    try:
        with server_gc():
            async with Hub(state, clusters, knobs) as hub, hub.session() as session:
                async def all_ready() -> bool:
                    async with session.get(hub.url + CLUSTERS) as response:
                        items = (await response.json())["items"]
                    return {i["metadata"]["name"] for i in items if any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in (i.get("status") or {}).get("conditions") or ())} >= {HOME, *OTHERS}

                await wait_for("every cluster Ready", all_ready, timeout=60)
                await set_cordoned(session, hub, OTHERS, True)  # every gang lands in HOME

                async def post(name: str) -> None:
                    async with session.post(hub.url + JOBS, data=job_body(name)) as response:
                        if response.status != 201:
                            raise RuntimeError(f"create {name}: {response.status} {await response.text()}")

                names = [f"g{run}-{i:04d}" for i in range(args.gangs)]
                queue = list(reversed(names))

                async def client() -> None:
                    while queue:
                        await post(queue.pop())

                await asyncio.gather(*(client() for _ in range(16)))

                async def running_in_home() -> bool:
                    async with session.get(hub.url + ALL_JOBS) as response:
                        items = (await response.json())["items"]
                    running = sum(1 for j in items if (j.get("status") or {}).get("phase") == "Running"
                                  and ((j.get("status") or {}).get("placement") or {}).get("cluster") == HOME)
                    return running == args.gangs

                await wait_for(f"{args.gangs} gangs running in {HOME}", running_in_home, timeout=600)
                await set_cordoned(session, hub, OTHERS, False)

                async def plan_ready() -> bool:
                    async with session.get(f"{hub.url}{CLUSTERS}/{HOME}/failoverplan") as response:
                        plan = await response.json()
                    return response.status == 200 and plan.get("movable") == args.gangs

                await wait_for("a failover plan with a new home for every gang", plan_ready, timeout=120,
                               interval=2.0)
                agent = await start_agent(state, poll=args.agent_poll)
                drill = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "federator.cli", "drill", "--cluster", HOME, "--fault", "partition",
                    "--duration", args.duration, "--settle-timeout", args.settle_timeout, "-o", "json",
                    "--state-dir", str(state), "--kubeconfig", str(state / "admin.kubeconfig"),
                    cwd=str(ROOT), env={**os.environ, "PYTHONUNBUFFERED": "1"},
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
                out, err = await drill.communicate()
                (workdir / "drill.log").write_bytes(err)
                if drill.returncode != 0:
                    raise RuntimeError(f"the drill failed ({drill.returncode}): {err.decode()[-2000:]}")
                found = json.loads(out)
    finally:
        await stop_process(agent, what="the fence agent")
        await members.stop()
    result = {k: (math.nan if found.get(k) is None else float(found[k])) for k in FIGURES}
    every = found["gangsMoved"] == args.gangs and found.get("runningAgainSeconds") is not None
    result["partition -> every gang running elsewhere s"] = float(found["runningAgainSeconds"]) if every else math.inf
    print(f"  run {run}: " + ", ".join(f"{k} {found.get(k)}" for k in FIGURES), file=sys.stderr, flush=True)
    return result


def print_table(runs: list[dict[str, float]], *, bar: float, gangs: int) -> None:
    print(f"\nfailover of {gangs} gangs (median of {len(runs)} runs)")
    print(f"  {'figure':44} {'median':>10}   runs")
    for metric in runs[0]:
        values = [r[metric] for r in runs]
        print(f"  {metric:44} {statistics.median(values):>10.2f}   [{', '.join(f'{v:.2f}' for v in values)}]")
    running = statistics.median(r["partition -> every gang running elsewhere s"] for r in runs)
    lost = max(r["jobsLost"] for r in runs)
    copies = max(r["maxConcurrentCopies"] for r in runs)
    print(f"\nbars: every gang running elsewhere within {bar:g}s: {'ok' if running <= bar else 'MISSED'} "
          f"(median {running:.2f}s); jobsLost 0: {'ok' if lost == 0 else 'MISSED'}; "
          f"maxConcurrentCopies 1: {'ok' if copies == 1 else 'MISSED'}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gangs", type=int, default=500, help="running gangs in the partitioned cluster")
    parser.add_argument("--nodes", type=int, default=6, help="nodes per cluster (64 CPUs, 250 pods each)")
    parser.add_argument("--grace", default="10s", help="the hub's --cluster-loss-grace (default: 10s)")
    parser.add_argument("--lease", default="5s", help="the hub's --member-lease-duration (default: 5s)")
    parser.add_argument("--margin", default="2s", help="the hub's --lease-margin (default: 2s)")
    parser.add_argument("--failover-rate", default="500", help="the hub's --failover-rate, gangs/s (default: 500)")
    parser.add_argument("--agent-poll", default="1", help="the fence agent's --poll-seconds (default: 1)")
    parser.add_argument("--duration", default="60s", help="how long the partition is held (default: 60s)")
    parser.add_argument("--settle-timeout", default="3m", help="the drill's --settle-timeout (default: 3m)")
    parser.add_argument("--knob", action="append", default=[], metavar="KEY=JSON",
                        help="another hub setting (README: Hub settings), e.g. member_request_timeout_seconds=5 "
                             "(repeatable; printed with the results)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep each run's files (hub log, drill log, agent log, store) under this directory")
    parser.add_argument("--quick", action="store_true", help="60 gangs, the partition held 15 s (each unless given)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every run's figures to FILE (bench/benchresult.py)")
    parser.add_argument("--serve", nargs=3, metavar=("STATE_DIR", "CLUSTERS_DIR", "KNOBS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        await serve(Path(args.serve[0]), Path(args.serve[1]), json.loads(args.serve[2]))
        return
    if args.quick:
        given = set(sys.argv[1:])
        args.gangs = args.gangs if "--gangs" in given else 60
        args.duration = args.duration if "--duration" in given else "15s"
    if args.runs < 1 or args.gangs < 1:
        parser.error("--runs and --gangs must be positive")
    from federator.apis.common import parse_duration_seconds
    from federator.controllers.settings import HubSettings
    from federator.hub.app import settings_knobs
    from federator.obs import configure_logging

    configure_logging(level="error", json=True)
    knobs = settings_knobs(argparse.Namespace(cluster_loss_grace=args.grace, member_lease_duration=args.lease,
                                              lease_margin=args.margin, mass_loss_threshold=None,
                                              failover_rate=args.failover_rate))
    for item in args.knob:
        key, _, value = item.partition("=")
        try:
            knobs[key] = json.loads(value)
        except ValueError:
            raise SystemExit(f"--knob {item!r}: expected KEY=JSON, e.g. member_request_timeout_seconds=5") from None
    try:
        HubSettings.from_mapping(knobs)  # an unknown or mistyped --knob fails here, before anything starts
    except ValueError as e:
        raise SystemExit(f"--knob: {e}") from None
    bar = parse_duration_seconds(args.grace) + parse_duration_seconds(args.margin) + 3.0
    files: contextlib.AbstractContextManager[str]
    if args.workdir is None:
        files = tempfile.TemporaryDirectory(prefix="federator-bench-failover-")
    else:
        args.workdir.mkdir(parents=True, exist_ok=True)
        kept = tempfile.mkdtemp(prefix="federator-bench-failover-", dir=args.workdir)
        print(f"keeping the runs' files in {kept}", file=sys.stderr)
        files = contextlib.nullcontext(kept)
    with files as tmp:
        runs = []
        for run in range(args.runs):
            workdir = Path(tmp) / f"run-{run}"
            workdir.mkdir(parents=True)
            runs.append(await run_once(args, workdir, run, knobs))
        print_table(runs, bar=bar, gangs=args.gangs)
    result = BenchResult("failover")
    result.add_runs(runs, bars={"partition -> every gang running elsewhere s": ("<=", bar), "jobsLost": ("<=", 0.0),
                                "maxConcurrentCopies": ("<=", 1.0)},
                    units={"detectSeconds": "s", "redispatchSeconds": "s", "runningAgainSeconds": "s",
                           "partition -> every gang running elsewhere s": "s"})
    result.notes.append(f"{args.gangs} gangs; grace {args.grace}, lease {args.lease}, margin {args.margin}, "
                        f"partition held {args.duration}")
    result.write(args.json)
    print(f"\nmachine: {os.cpu_count()} cores; grace {args.grace}, lease {args.lease}, margin {args.margin}, "
          f"failover rate {args.failover_rate}/s, agent poll {args.agent_poll}s, partition held {args.duration}"
          + (f"; knobs {', '.join(args.knob)}" if args.knob else ""))


if __name__ == "__main__":
    asyncio.run(main())
