"""HA benchmark: how fast a follower replica takes over after kill -9 of the leading hub (issue 13, item 2).

    .venv/bin/python bench/ha.py [--runs 5] [--leader-ttl 10s] [--clusters 3] [--submit-interval 0.5]
                                 [--workdir DIR]

Example: .venv/bin/python bench/ha.py --runs 5        (about 3 minutes; prints a table and the medians)
`--quick`: leader TTL 4s (unless given); `--json FILE`: every run's figures in the format of
bench/benchresult.py (`federator bench` reads it).

It builds the chaos lab of tests/chaos/lab.py (imported from the source tree: ROOT is put first on
sys.path, then `from tests.chaos.lab import ...`): 3 etcd members (processes), `--clusters` simulated
member clusters in this process with their fence agents, and 2 `federator up` replicas on that etcd
(`--leader-ttl`, failover grace and member lease at 60 s so that no cluster is judged lost and no agent
fences while a takeover runs). Jobs are submitted through the follower every `--submit-interval` seconds
the whole time, so the leader is in the middle of placing and dispatching when it dies. Each run:

1. waits until every job runs and the replicas are leader + follower; counts the member LIST requests
   of an equal window before the kill (the baseline: the leader's own periodic LISTs, if any);
2. kill -9 the leader, and right after the kill submits a probe job through the follower;
3. measures, from the kill: (a) until the follower logs "hub leads" (its log's timestamp), (b) until it
   logged "controller started" for every controller of its new term (hub_controllers()), (c) until the
   probe job reaches Placed (and Running), polled every 0.1 s;
4. counts the LIST requests the member clusters served from the kill until 5 s after the probe ran, per
   resource (the issue wants the new leader to resume from the stored snapshots and resourceVersions with
   no member re-LIST; the figure is reported as measured, whatever it is);
5. waits until the federation is quiet, checks that no acknowledged job was lost and that every job runs
   once (the lab's sampler watched for two copies at once the whole time), then restarts the killed
   replica (it comes back as a follower) and goes again with the roles swapped.

It prints one row per run, the medians, and the bar: takeover (a) <= leader TTL + 2 s. Never part of the
tests. Times come from the hubs' own JSON logs (UTC wall clock) and this process's wall clock, on one host.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchresult import BenchResult  # noqa: E402 - the script's directory, bench/, is on sys.path
from tests.chaos.lab import (  # noqa: E402 - after the sys.path change above
    CLUSTERS,
    NAMESPACE,
    Lab,
    LabSettings,
    Ledger,
    Replica,
    Sampler,
    Timeline,
    Violations,
    final_checks,
    settle,
)
from tests.controllers.jobtest_support import json_log_records  # noqa: E402

STEADY_TIMEOUT = 240.0


def probe_body(name: str) -> dict[str, Any]:
    """A small one-pod job (a quarter CPU): hundreds fit, so the submissions never fill the clusters."""
    return {
        "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"roles": [{"name": "worker", "replicas": 1,
                            "template": {"image": "trainer:1.4", "resources": {"cpu": "250m", "memory": "256Mi"}}}],
                 "placement": {"network": "any"}},
    }


def log_records(path: Path, event: str) -> list[dict[str, Any]]:
    return [r for r in json_log_records(path) if r.get("event") == event]


def wall(record: dict[str, Any]) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(str(record["timestamp"]).replace("Z", "+00:00")).timestamp()


def list_counts(lab: Lab) -> Counter[str]:
    counts: Counter[str] = Counter()
    for name, sim in lab.fed.sims.items():
        for (verb, resource), n in sim.api.counts.items():
            if verb == "list":
                counts[f"{name}/{resource}"] += n
    return counts


class Submitter:
    """Submits a small job through the follower every `interval` seconds until stopped."""

    def __init__(self, lab: Lab, ledger: Ledger, interval: float) -> None:
        self.lab, self.ledger, self.interval = lab, ledger, interval
        self.count = 0
        self.task: asyncio.Task[None] | None = None
        self.follower: int | None = None
        #: cleared while the bench waits for the federation to be quiet
        self.running = asyncio.Event()

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="ha-bench-submitter")

    async def _run(self) -> None:
        pending: set[asyncio.Task[Any]] = set()
        while True:
            await self.running.wait()
            name = f"bg-{self.count:04d}"
            self.count += 1
            task = asyncio.create_task(self.ledger.submit(name, probe_body(name), via=self.follower, timeout=60))
            pending.add(task)
            task.add_done_callback(pending.discard)
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


async def steady(lab: Lab, ledger: Ledger) -> Replica:
    """Until one replica leads, the other follows, and every job rests; returns the leader."""
    problem = await settle(lab, ledger, timeout=STEADY_TIMEOUT)
    if problem is not None:
        raise RuntimeError(f"the federation did not settle: {problem}")
    leader = await lab.find_leader(timeout=60)
    if leader is None:
        raise RuntimeError("no replica leads")
    return leader


async def one_takeover(lab: Lab, ledger: Ledger, submitter: Submitter, run: int, violations: Violations,
                       ttl: float) -> dict[str, Any]:
    submitter.running.clear()
    leader = await steady(lab, ledger)
    follower = next(r for r in lab.replicas if r is not leader)
    submitter.follower = lab.replicas.index(follower)
    submitter.running.set()
    assert follower.hub.log is not None
    follower_log = follower.hub.log
    # the baseline: LISTs served in a window before the kill as long as the one measured after it
    window = ttl + 10.0
    before = list_counts(lab)
    await asyncio.sleep(min(window, 15.0))
    baseline = sum((list_counts(lab) - before).values()) * window / min(window, 15.0)

    counts_at_kill = list_counts(lab)
    killed_at = time.time()
    await leader.kill()
    lab.timeline.add("bench", f"run {run}: kill -9 {leader.name} (leader)")
    probe = f"probe-{run}"
    record = await ledger.submit(probe, probe_body(probe), via=lab.replicas.index(follower), timeout=120)
    if not record.acked:
        raise RuntimeError(f"the probe job was never acknowledged: {record.attempts}")
    acked_at = time.time() - killed_at

    placed_at = running_at = None
    deadline = time.monotonic() + ttl + 120
    while running_at is None and time.monotonic() < deadline:
        assert follower.api is not None
        try:
            job = await asyncio.wait_for(follower.api.get(NAMESPACE, probe), 5)
        except Exception:  # noqa: BLE001 - retried
            await asyncio.sleep(0.1)
            continue
        phase = (job.get("status") or {}).get("phase")
        now = time.time() - killed_at
        if phase in ("Placed", "Admitted", "Running") and placed_at is None:
            placed_at = now
        if phase == "Running":
            running_at = now
        await asyncio.sleep(0.1)

    leads = [r for r in log_records(follower_log, "hub leads") if wall(r) >= killed_at]
    leads_at = wall(leads[0]) - killed_at if leads else math.nan
    term = leads[0]["term"] if leads else None
    from federator.hub.app import hub_controllers

    expected = {getattr(f, "__name__", repr(f)) for f in hub_controllers()}
    started = [r for r in log_records(follower_log, "controller started") if r.get("term") == term]
    names = {r.get("controller") for r in started}
    controllers_at = (max(wall(r) for r in started) - killed_at) if names >= expected else math.nan

    await asyncio.sleep(5.0)
    lists = list_counts(lab) - counts_at_kill
    measured_for = time.time() - killed_at
    # who re-listed: the member reflectors log each LIST ("listed", with their component and reason); the rest
    # are reads that do not log (the GC's epoch-fence pass lists every member's objects by label)
    relisted = Counter(f"{r.get('component')} ({r.get('reason')})" for r in log_records(follower_log, "listed")
                       if wall(r) >= killed_at)

    submitter.running.clear()
    await leader.start()  # back as a follower
    await steady(lab, ledger)
    await final_checks(lab, ledger, violations)
    listed = {j["metadata"]["uid"] for j in (await lab.call(lab.list_jobs))[1]}
    lost = sum(1 for r in ledger.jobs.values() if r.expected and r.uid not in listed)
    row = {
        "run": run, "killed": leader.name, "kill->leads s": leads_at, "kill->controllers s": controllers_at,
        "kill->probe acked s": acked_at, "kill->probe Placed s": placed_at if placed_at is not None else math.nan,
        "kill->probe Running s": running_at if running_at is not None else math.nan,
        "member LISTs after": sum(lists.values()), "LIST window s": measured_for,
        "baseline LISTs (same window)": baseline, "LISTs by resource": dict(sorted(lists.items())),
        "LISTs logged by": dict(sorted(relisted.items())),
        "jobs": sum(r.expected for r in ledger.jobs.values()), "lost": lost, "violations": len(violations),
    }
    print(f"  run {run}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in row.items()
                                      if k not in ("LISTs by resource", "LISTs logged by")),
          file=sys.stderr, flush=True)
    return row


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.2f}"
    return str(value)


async def bench(args: argparse.Namespace, workdir: Path) -> int:
    from federator.apis.common import parse_duration_seconds
    from federator.obs import configure_logging

    configure_logging(level="warning", json=False)
    ttl = parse_duration_seconds(args.leader_ttl)
    settings = LabSettings(clusters=CLUSTERS[:args.clusters], leader_ttl=args.leader_ttl,
                           cluster_loss_grace="60s", member_lease="60s", lease_margin="5s", agent_poll="1")
    lab = Lab(workdir / "lab", settings, Timeline())
    ledger = Ledger(lab)
    violations = Violations()
    sampler = Sampler(lab, ledger, violations)
    submitter = Submitter(lab, ledger, args.submit_interval)
    rows: list[dict[str, Any]] = []
    try:
        print(f"starting the lab in {workdir} (3 etcd members, 2 replicas, {args.clusters} clusters, "
              f"leader TTL {args.leader_ttl})", file=sys.stderr, flush=True)
        await lab.start()
        sampler.start()
        submitter.start()
        for run in range(1, args.runs + 1):
            rows.append(await one_takeover(lab, ledger, submitter, run, violations, ttl))
    finally:
        await submitter.stop()
        await sampler.stop()
        await lab.stop()
    report(rows, ttl=ttl, violations=violations, sampler=sampler)
    result = BenchResult("ha")
    figures = ("kill->leads s", "kill->controllers s", "kill->probe acked s", "kill->probe Placed s",
               "kill->probe Running s", "member LISTs after", "baseline LISTs (same window)", "lost")
    result.add_runs([{k: float(row[k]) for k in figures} for row in rows],
                    bars={"kill->leads s": ("<=", ttl + 2.0), "lost": ("<=", 0.0)},
                    units={"member LISTs after": "requests", "baseline LISTs (same window)": "requests",
                           "lost": "jobs"})
    result.notes.append(f"leader TTL {args.leader_ttl}, {args.clusters} clusters; invariant violations: "
                        f"{len(violations)}")
    result.write(args.json)
    return 0 if not violations and all(r["lost"] == 0 for r in rows) else 1


def report(rows: list[dict[str, Any]], *, ttl: float, violations: Violations, sampler: Sampler) -> None:
    columns = ["run", "killed", "kill->leads s", "kill->controllers s", "kill->probe acked s", "kill->probe Placed s",
               "kill->probe Running s", "member LISTs after", "baseline LISTs (same window)", "jobs", "lost"]
    widths = [max(len(c), 8) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for row in rows:
        print("  ".join(_fmt(row[c]).rjust(w) for c, w in zip(columns, widths, strict=True)))
    medians = {}
    for c in columns[2:9]:
        values = [float(r[c]) for r in rows if not math.isnan(float(r[c]))]
        medians[c] = statistics.median(values) if values else math.nan
    print("  ".join(["median".rjust(widths[0]), "".rjust(widths[1])]
                    + [_fmt(medians[c]).rjust(w) for c, w in zip(columns[2:9], widths[2:9], strict=True)]))
    for row in rows:
        if row["LISTs by resource"]:
            print(f"  run {row['run']} LISTs after the kill ({row['LIST window s']:.1f}s): {row['LISTs by resource']}; "
                  f"logged by {row['LISTs logged by'] or 'none'} (unlogged: the GC's epoch-fence pass)")
    bar = ttl + 2.0
    takeover = medians["kill->leads s"]
    print(f"bar: takeover (kill -> 'hub leads') <= leader TTL + 2 s = {bar:g} s: median {_fmt(takeover)} s "
          f"({'met' if takeover <= bar else 'NOT met'}; worst {_fmt(max(float(r['kill->leads s']) for r in rows))} s)")
    print(f"member re-LIST after takeover: median {_fmt(medians['member LISTs after'])} LIST requests "
          f"(the issue wants 0)")
    print(f"jobs lost: {sum(r['lost'] for r in rows)}; sampler: {sampler.summary()}; "
          f"invariant violations: {len(violations)}")
    if violations:
        print(violations.format())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="takeovers to measure (default: 5)")
    parser.add_argument("--leader-ttl", default="10s", help="the replicas' --leader-ttl (default: 10s)")
    parser.add_argument("--clusters", type=int, default=3, choices=(2, 3), help="simulated clusters (default: 3)")
    parser.add_argument("--submit-interval", type=float, default=0.5,
                        help="seconds between background job submissions (default: 0.5)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the lab's files (hub, agent and etcd logs) here instead of a temporary directory")
    parser.add_argument("--quick", action="store_true", help="leader TTL 4s (unless given)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every run's figures to FILE (bench/benchresult.py)")
    args = parser.parse_args()
    if args.quick and "--leader-ttl" not in sys.argv[1:]:
        args.leader_ttl = "4s"
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return asyncio.run(bench(args, args.workdir))
    with tempfile.TemporaryDirectory(prefix="federator-bench-ha-") as tmp:
        return asyncio.run(bench(args, Path(tmp)))


if __name__ == "__main__":
    sys.exit(main())
