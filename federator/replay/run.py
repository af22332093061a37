"""Running a replay: check the inputs, replay each policy in its own process, write the report.

`replay_options(...)` turns command-line text into `ReplayOptions` or raises
`ReplayInputError` with one line naming the bad flag; `run_replay(options)`
then loads the trace and clusters file (errors again as ReplayInputError,
before anything is written), replays every policy (in `workers` spawned
processes, policies in parallel, or in this process with one worker; a
rich progress bar per policy), and only
then creates `--out` and writes report.json, report.md and the PNG plots
(report.py).

Everything a policy's figures depend on is (trace, clusters file, seed,
rule): each worker loads the same files and draws the same attributes, and
the engine is deterministic for a seed.

With `queues` (`--queues`): every job also gets a drawn priority (the
rule's mix), the policy `federator-queues` (federator with one queue per
trace cluster, `replay/queues.py`) is replayed beside `federator` (added
if not chosen: the same jobs without queues, on the same machine in the
same invocation), and the report gains its `queues` section. Every job
also gets a checkpoint interval (attributes.py): an evicted job loses only
the work since its last checkpoint. With `compare_victims`
(`--compare-victims`) `federator-queues-by-start` is replayed too: the same
queues, jobs and checkpoints, with the victim order before checkpoints
(equal priority: most recently started first); the `queues` section then
gains `checkpointAwareVictims`, GPU-hours lost to preemption with the
checkpoint-aware order (federator-queues) and without it, same run.

With `tiers` (`--tiers`; the clusters file must have `tiers:`): the
policy `federator-tiers` (federator whose gangs carry the file's tiers, as
a Queue's spec.tiers) is replayed beside `federator` (added if not
chosen: the same jobs, no tiers). Every report has the `spend` section
(money, GPU-hours by location and tier, delay; report.py).

With `elastic_share` F > 0 (`--elastic-share`): the rule marks a seeded
share F of the multi-GPU jobs elastic, each one worker per GPU
(attributes.py), every chosen policy is replayed twice, with elasticity
(report.json's `policies`, the plots and the metrics tables) and without
(the rule's `elastic_fixed`: the same jobs, the same one-GPU workers,
min = max; same seed), and the report gains its `elasticity` section
(with and without, per policy). At 0 (the default) nothing changes.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import platform
import queue as queue_module
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from federator.replay.attributes import RULE, AttributeRule, ReplayJob, assign_attributes, describe_rule
from federator.replay.clusters import ClustersFileError, Federation, load_clusters
from federator.replay.engine import Engine, Policy, PolicyResult
from federator.replay.federated import TIER_POLICY, FederatorPolicy
from federator.placement import Profile
from federator.replay.queues import QUEUE_POLICY, QUEUE_POLICY_BY_START, trace_queues
from federator.replay.policies import (
    ArmadaPolicy,
    FirstFitPolicy,
    KarmadaPolicy,
    MultiKueuePolicy,
    NonePolicy,
    RandomPolicy,
)
from federator.replay.trace import TraceError, load_trace

__all__ = [
    "POLICIES",
    "QUEUE_POLICY",
    "QUEUE_POLICY_BY_START",
    "TIER_POLICY",
    "ReplayInputError",
    "ReplayOptions",
    "default_clusters_file",
    "default_trace_dir",
    "load_inputs",
    "make_policy",
    "replay_options",
    "run_policy",
    "run_replay",
]

POLICIES: tuple[str, ...] = (
    "federator",
    "multikueue-allatonce",
    "multikueue-incremental",
    "karmada",
    "karmada-estimator",
    "armada",
    "none",
    "first-fit",
    "random",
)
MAX_SEED = 2**63 - 1
MAX_WORKERS = 32
_REPO = Path(__file__).resolve().parents[2]


class ReplayInputError(ValueError):
    """Bad input to a replay (a flag, the trace, the clusters file): one line, nothing written."""


def default_trace_dir() -> Path:
    """../shared/traces/itp beside the repository (or the working directory)."""
    beside_repo = _REPO.parent / "shared" / "traces" / "itp"
    return beside_repo if beside_repo.is_dir() else Path("../shared/traces/itp")


def default_clusters_file() -> Path:
    return _REPO / "bench" / "replay" / "clusters" / "default.yaml"


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    trace: Path
    clusters: Path
    seed: int
    jobs: int | None
    policies: tuple[str, ...]
    workers: int
    out: Path
    progress: bool = True
    queues: bool = False
    elastic_share: float = 0.0
    compare_victims: bool = False
    tiers: bool = False

    @property
    def rule(self) -> AttributeRule:
        return dataclasses.replace(RULE, elastic_share=self.elastic_share) if self.elastic_share else RULE

    @property
    def runs(self) -> tuple[tuple[str, bool], ...]:
        """(policy, fixed) of every replay: each policy as chosen, and with elasticity fixed if the share is not 0."""
        runs = tuple((name, False) for name in self.policies)
        if self.elastic_share:
            runs += tuple((name, True) for name in self.policies)
        return runs


def _share(text: str | None) -> float:
    if text is None:
        return 0.0
    value = text.strip()
    digits = value.replace(".", "", 1)
    if not value or len(value) > 12 or not digits.isdigit() or not digits.isascii():
        raise ReplayInputError(f"--elastic-share must be a number from 0 to 1, got {text!r}")
    number = float(value)
    if not 0 <= number <= 1:
        raise ReplayInputError(f"--elastic-share must be a number from 0 to 1, got {text!r}")
    return number


def _int(text: str | None, *, flag: str, low: int, high: int) -> int | None:
    if text is None:
        return None
    value = text.strip()
    if not value.isdigit() or len(value) > 20:
        raise ReplayInputError(f"{flag} must be an integer from {low} to {high}, got {text!r}")
    number = int(value)
    if not low <= number <= high:
        raise ReplayInputError(f"{flag} must be an integer from {low} to {high}, got {text!r}")
    return number


def replay_options(
    *,
    trace: str | None,
    clusters: str | None,
    seed: str | None,
    jobs: str | None,
    policies: str | None,
    workers: str | None,
    out: str,
    progress: bool = True,
    queues: bool = False,
    elastic_share: str | None = None,
    compare_victims: bool = False,
    tiers: bool = False,
) -> ReplayOptions:
    """Check the flags (not the files: `load_inputs` does) and return the options."""
    share = _share(elastic_share)
    if compare_victims and not queues:
        raise ReplayInputError("--compare-victims needs --queues (victims exist only with queues)")
    if share and queues:
        raise ReplayInputError("--elastic-share and --queues cannot be combined yet (elastic gangs are replayed "
                               "without queues)")
    if jobs is not None and jobs.strip().startswith("-"):
        raise ReplayInputError(f"--jobs must be a positive integer, got {jobs!r}")
    seed_value = _int(seed if seed is not None else "1", flag="--seed", low=0, high=MAX_SEED)
    assert seed_value is not None
    jobs_value = _int(jobs, flag="--jobs", low=1, high=10_000_000)
    if policies is None:
        chosen = POLICIES
    else:
        names = [p.strip() for p in policies.split(",")]
        if not names or any(not n for n in names):
            raise ReplayInputError(f"--policies must be a comma-separated list of: {', '.join(POLICIES)}")
        if QUEUE_POLICY in names or QUEUE_POLICY_BY_START in names or TIER_POLICY in names:
            raise ReplayInputError(f"--policies: {QUEUE_POLICY} is replayed by --queues (beside federator), "
                                   f"{QUEUE_POLICY_BY_START} by --compare-victims, {TIER_POLICY} by --tiers")
        unknown = [n for n in names if n not in POLICIES]
        if unknown:
            raise ReplayInputError(f"--policies: unknown policy {unknown[0]!r}; known: {', '.join(POLICIES)}")
        if len(set(names)) != len(names):
            raise ReplayInputError("--policies names a policy twice")
        chosen = tuple(names)
    if queues or tiers:
        if "federator" not in chosen:
            chosen = ("federator", *chosen)
        at = chosen.index("federator") + 1
        extra = ((TIER_POLICY,) if tiers else ()) + ((QUEUE_POLICY,) if queues else ())
        extra += (QUEUE_POLICY_BY_START,) if compare_victims else ()
        chosen = (*chosen[:at], *extra, *chosen[at:])
    cpus = os.cpu_count() or 1
    workers_value = _int(workers, flag="--workers", low=1, high=MAX_WORKERS)
    if workers_value is None:
        workers_value = max(1, min(cpus, 4, len(chosen)))
    if not out or not out.strip():
        raise ReplayInputError("--out must name a directory")
    out_path = Path(out)
    if out_path.exists() and not out_path.is_dir():
        raise ReplayInputError(f"--out {out} exists and is not a directory")
    return ReplayOptions(
        trace=Path(trace) if trace else default_trace_dir(),
        clusters=Path(clusters) if clusters else default_clusters_file(),
        seed=seed_value,
        jobs=jobs_value,
        policies=chosen,
        workers=workers_value,
        out=out_path,
        progress=progress,
        queues=queues,
        elastic_share=share,
        compare_victims=compare_victims,
        tiers=tiers,
    )


def load_inputs(options: ReplayOptions, *, fixed: bool = False) -> tuple[list[ReplayJob], Federation]:
    """The jobs (first --jobs by submission time) with their attributes, and the federation.

    `fixed`: the jobs of the replay without elasticity (the same jobs drawn elastic, in the same shape, min = max).
    """
    try:
        trace = load_trace(options.trace)
        federation = load_clusters(options.clusters)
        federation.check_trace({job.cluster for job in trace})
    except (TraceError, ClustersFileError) as e:
        raise ReplayInputError(str(e)) from None
    if options.tiers and not federation.tiers:
        raise ReplayInputError(f"--tiers: clusters file {options.clusters} has no tiers: list (for example "
                               "bench/replay/clusters/tiers.yaml)")
    if options.jobs is not None:
        trace = trace[: options.jobs]
    rule = dataclasses.replace(options.rule, elastic_fixed=True) if fixed else options.rule
    jobs = assign_attributes(trace, federation, seed=options.seed, rule=rule, priorities=options.queues)
    return jobs, federation


def make_policy(
    name: str, *, seed: int, jobs: Sequence[ReplayJob] = (), federation: Federation | None = None
) -> Policy:
    """The named policy; `federator-queues` builds its queues from the jobs and the federation."""
    if name == "federator":
        return FederatorPolicy()
    if name == TIER_POLICY:
        if federation is None or not federation.tiers:
            raise ReplayInputError(f"{name} needs a clusters file with tiers")
        return FederatorPolicy(tiers=federation.tiers)
    if name in (QUEUE_POLICY, QUEUE_POLICY_BY_START):
        if federation is None:
            raise ReplayInputError(f"{name} needs the jobs and the federation to build its queues")
        profile = Profile(victims_by_lost_work=name == QUEUE_POLICY)
        return FederatorPolicy(queues=trace_queues(jobs, federation), profile=profile)
    if name == "multikueue-allatonce":
        return MultiKueuePolicy(incremental=False)
    if name == "multikueue-incremental":
        return MultiKueuePolicy(incremental=True)
    if name == "karmada":
        return KarmadaPolicy(estimator=False)
    if name == "karmada-estimator":
        return KarmadaPolicy(estimator=True)
    if name == "armada":
        return ArmadaPolicy()
    if name == "none":
        return NonePolicy()
    if name == "first-fit":
        return FirstFitPolicy()
    if name == "random":
        return RandomPolicy(seed)
    raise ReplayInputError(f"unknown policy {name!r}")


def run_policy(
    name: str,
    jobs: Sequence[ReplayJob],
    federation: Federation,
    *,
    seed: int,
    progress: Callable[[int], None] | None = None,
) -> PolicyResult:
    policy = make_policy(name, seed=seed, jobs=jobs, federation=federation)
    return Engine(jobs=jobs, federation=federation, policy=policy, seed=seed, progress=progress).run()


# ---------------------------------------------------------------- worker processes

_PROGRESS: Any = None


def _init_worker(progress_queue: Any) -> None:
    global _PROGRESS
    _PROGRESS = progress_queue


def _label(name: str, fixed: bool) -> str:
    return f"{name} (no elastic)" if fixed else name


def _worker(name: str, fixed: bool, options: ReplayOptions) -> PolicyResult:
    jobs, federation = load_inputs(options, fixed=fixed)
    sink = _PROGRESS
    label = _label(name, fixed)

    def report(n: int) -> None:
        if sink is not None:
            sink.put((label, n))

    return run_policy(name, jobs, federation, seed=options.seed, progress=report)


def machine_description(workers: int) -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError):
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpus": os.cpu_count() or 1,
        "cpuModel": model,
        "memoryBytes": memory,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "loadAverageAtStart": [round(x, 2) for x in load],
        "workers": workers,
    }


def _run_all(options: ReplayOptions, *, total_jobs: int) -> tuple[dict[tuple[str, bool], PolicyResult], float]:
    """Every run of `options.runs`, keyed by (policy, fixed)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    started = time.perf_counter()
    labels = {_label(name, fixed): (name, fixed) for name, fixed in options.runs}
    results: dict[tuple[str, bool], PolicyResult] = {}
    columns = (TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not options.progress, transient=False) as bar:
        tasks = {label: bar.add_task(label, total=total_jobs) for label in labels}
        if options.workers == 1:
            # One worker: replay in this process, one policy after another (no process start-up).
            inputs = {fixed: load_inputs(options, fixed=fixed) for fixed in sorted({f for _, f in options.runs})}
            for label, (name, fixed) in labels.items():
                task = tasks[label]
                jobs, federation = inputs[fixed]

                def advance(n: int, task: Any = task) -> None:
                    bar.advance(task, n)

                results[(name, fixed)] = run_policy(name, jobs, federation, seed=options.seed, progress=advance)
                bar.update(task, completed=total_jobs)
            return results, time.perf_counter() - started
        ctx = multiprocessing.get_context("spawn")
        progress_queue = ctx.Queue()
        with ProcessPoolExecutor(max_workers=options.workers, mp_context=ctx, initializer=_init_worker,
                                 initargs=(progress_queue,)) as pool:
            futures: dict[str, Future[PolicyResult]] = {
                label: pool.submit(_worker, name, fixed, options) for label, (name, fixed) in labels.items()
            }
            pending = set(futures)
            while pending:
                try:
                    name, n = progress_queue.get(timeout=0.2)
                    bar.advance(tasks[name], n)
                except queue_module.Empty:
                    pass
                for label in [n for n in pending if futures[n].done()]:
                    pending.discard(label)
                    results[labels[label]] = futures[label].result()
                    bar.update(tasks[label], completed=total_jobs)
    return results, time.perf_counter() - started


def run_replay(options: ReplayOptions) -> dict[str, Any]:
    """Replay every chosen policy and write the report; returns report.json's content."""
    from federator.replay.report import elasticity_section, queue_section, spend_section, write_report

    jobs, federation = load_inputs(options)
    if not jobs:
        raise ReplayInputError(f"trace {options.trace} has no jobs to replay")
    machine = machine_description(options.workers)
    runs, wall = _run_all(options, total_jobs=len(jobs))
    share = options.elastic_share
    results = {name: runs[(name, False)] for name in options.policies}
    ordered = [results[n] for n in options.policies]
    report: dict[str, Any] = {
        "trace": str(options.trace),
        "clustersFile": str(options.clusters),
        "seed": options.seed,
        "rule": describe_rule(options.rule, priorities=options.queues),
        "machine": machine,
        "policies": {name: results[name].metrics for name in options.policies},
        "spend": spend_section(ordered, federation=federation),
    }
    if options.queues:
        report["queues"] = queue_section(ordered, queues=trace_queues(jobs, federation), jobs=jobs)
    if share:
        report["elasticity"] = elasticity_section(
            share, ordered, [runs[(name, True)] for name in options.policies], jobs=jobs
        )
    write_report(options.out, report=report, results=ordered, federation=federation, wall_seconds=wall,
                 jobs=len(jobs))
    return report
