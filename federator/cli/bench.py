"""`federator bench`: benchmarks run from the installed command.

    federator bench [--quick] [--runs N] [--only a,b] [--skip a,b] [--bench-args NAME=ARGS]
                    [--bench-dir DIR] [--timeout SECONDS] --out DIR
    federator bench replay [--trace DIR] [--clusters FILE] [--seed N] [--jobs N]
                           [--policies a,b,...] [--workers N] [--queues] [--tiers] [--elastic-share F] --out DIR
    federator bench scale [bench/scale.py's arguments]

Each benchmark is a subcommand of `bench`, registered by its own function
below (`_register_replay`, ...); a subcommand's handler loads its engine
lazily, so `federator --help` does not import matplotlib.

`federator bench --out DIR` alone runs every benchmark (`_register_run_all`) but
bench/multikueue.py, which runs only when named (`--only multikueue`):
those under bench/ of the source checkout as processes (they are not part
of the installed package; without a checkout it says so and runs nothing),
the replay as `federator bench replay`; and writes one report (report.md,
report.json, plots/, each bench's log and raw figures) with the median and
spread of every figure and the machine it ran on. `federator bench scale`
runs bench/scale.py's `main(argv)` in this process.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import json
import math
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from federator.cli.common import UserError


def register(sub: Any) -> None:
    """Add `bench` and its subcommands to the `federator` parser."""
    p = sub.add_parser("bench", help="run benchmarks (trace replay, ...) and write their reports",
                       description="With --out DIR and no BENCHMARK: run every benchmark and write one report.")
    _register_run_all(p)
    benches = p.add_subparsers(dest="bench", metavar="BENCHMARK")
    benches.required = False  # `federator bench --out DIR` runs them all
    _register_replay(benches)
    _register_scale(benches)


# ---------------------------------------------------------------- replay


def _register_replay(benches: Any) -> None:
    p = benches.add_parser(
        "replay",
        help="replay the ITP GPU trace in virtual time through federator and baseline policies",
        description=(
            "Replay a GPU-cluster job trace in virtual time (a discrete-event simulation, no wall-clock "
            "waits) through the real placement engine and baseline dispatch policies, over simulated "
            "member clusters, and write report.json, report.md and PNG plots to --out."
        ),
    )
    p.add_argument("--trace", default=None, metavar="DIR",
                   help="directory of the trace's clusterNN.csv files (default: ../shared/traces/itp)")
    p.add_argument("--clusters", default=None, metavar="FILE",
                   help="clusters YAML (default: the file derived from the trace's peak demand)")
    p.add_argument("--seed", default="1", metavar="N", help="seed of the attribute rule (default: 1)")
    p.add_argument("--jobs", default=None, metavar="N",
                   help="replay only the first N jobs by submission time (default: all)")
    p.add_argument("--policies", default=None, metavar="a,b,...", help="policies to run (default: all)")
    p.add_argument("--workers", default=None, metavar="N",
                   help="policies replayed in parallel processes (default: the number of CPUs, at most 4)")
    p.add_argument("--queues", action="store_true",
                   help="also replay federator with one queue per trace cluster (quota, fair share, priorities, "
                        "preemption) beside federator without them, and report per-queue delay, Jain fairness "
                        "over queues and preemptions; jobs get a seeded checkpoint interval and an evicted job "
                        "resumes from its last checkpoint")
    p.add_argument("--compare-victims", action="store_true",
                   help="with --queues: also replay federator-queues-by-start (victims of equal priority most "
                        "recently started first, as before checkpoints; same jobs and checkpoints) and report "
                        "GPU-hours lost to preemption with the checkpoint-aware victim order and without it")
    p.add_argument("--tiers", action="store_true",
                   help="also replay federator-tiers: federator whose jobs carry the clusters file's tiers (a "
                        "Queue's spec.tiers: on-prem first, cloud after spillAfterSeconds), beside federator "
                        "without them; needs a clusters file with tiers: (bench/replay/clusters/tiers.yaml). Every "
                        "report shows per policy the money spent (cloud GPU-hours x price; on-prem is sunk), the "
                        "share of GPU-hours per tier and the median/p95 queueing delay")
    p.add_argument("--elastic-share", default=None, metavar="F",
                   help="make a seeded share F (0..1, default 0) of the multi-GPU jobs elastic (one worker per "
                        "GPU, min = half the workers, max = all); every policy is then replayed with and without "
                        "elasticity (the same jobs and workers, fixed) and the report gains an elasticity section "
                        "(queueing delay, GPU utilisation, JCT)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for report.json, report.md, *.png")
    p.set_defaults(handler=_cmd_replay)


def _cmd_replay(args: argparse.Namespace) -> int:
    try:
        from federator.replay.run import ReplayInputError, replay_options, run_replay
    except ImportError as e:  # matplotlib or rich missing: the `bench` extra
        raise UserError(f"federator bench replay needs the bench extra (pip install 'federator[bench]'): {e}") from None
    try:
        options = replay_options(
            trace=args.trace, clusters=args.clusters, seed=args.seed, jobs=args.jobs, policies=args.policies,
            workers=args.workers, out=args.out, progress=not args.no_progress, queues=args.queues,
            elastic_share=args.elastic_share, compare_victims=args.compare_victims, tiers=args.tiers,
        )
        report = run_replay(options)
    except ReplayInputError as e:
        raise UserError(str(e)) from None
    for name, metrics in report["policies"].items():
        print(f"{name:<24} mean delay {metrics['meanQueueDelaySeconds']:>10.1f} s   "
              f"p95 {metrics['p95QueueDelaySeconds']:>9.1f} s   writes/job {metrics['memberWritesPerJob']:>6.2f}   "
              f"copied {metrics['datasetBytesCopied'] / 2**40:>9.1f} TiB   wall {metrics['wallSeconds']:>6.1f} s",
              flush=True)
    if options.tiers:
        for name, spend in report["spend"]["policies"].items():
            print(f"{name:<24} money spent {spend['moneySpent']:>12,.1f}   cloud share {spend['cloudShare']:.3f}   "
                  f"median delay {spend['medianQueueDelaySeconds']:>8.1f} s   p95 {spend['p95QueueDelaySeconds']:>9.1f} s",
                  flush=True)
    queues = report.get("queues")
    if queues:
        for name, figures in queues["policies"].items():
            print(f"{name:<24} Jain over queues {figures['queueJainFairness']:.3f}   preemptions per 1,000 jobs "
                  f"{figures['preemptionsPer1000Jobs']:.2f}   GPU-hours lost {figures['gpuHoursLostToPreemption']:,.1f}",
                  flush=True)
        victims = queues.get("checkpointAwareVictims")
        if victims:
            print(f"GPU-hours lost to preemption: {victims['gpuHoursLostWith']:,.1f} with checkpoint-aware victims, "
                  f"{victims['gpuHoursLostWithout']:,.1f} without ({victims['gpuHoursSaved']:,.1f} fewer with)",
                  flush=True)
    elasticity = report.get("elasticity")
    if elasticity:
        for name, figures in elasticity["policies"].items():
            w, o = figures["with"], figures["without"]
            print(f"{name:<24} elastic {elasticity['share']:g}: mean delay {w['meanQueueDelaySeconds']:.1f} s "
                  f"(without {o['meanQueueDelaySeconds']:.1f})   p95 {w['p95QueueDelaySeconds']:.1f} s "
                  f"(without {o['p95QueueDelaySeconds']:.1f})   utilisation {w['gpuUtilization']:.3f} "
                  f"(without {o['gpuUtilization']:.3f})", flush=True)
    print(f"report: {options.out / 'report.md'}", flush=True)
    return 0


# ---------------------------------------------------------------- every benchmark: `federator bench --out DIR`
#
# The benchmarks live in the source checkout's bench/ (they are not part of the installed package), so
# `federator bench` runs each as a process, `python bench/NAME.py --runs N --json FILE [--quick]`, and
# reads FILE: bench/benchresult.py's format, one value per run for every figure. The replay engine is
# part of the package and runs as `federator bench replay`; it is deterministic (virtual time, seeded),
# so it runs once and its figures carry no spread.


@dataclass(frozen=True, slots=True)
class BenchSpec:
    """How full and `--quick` runs call one benchmark: default runs, arguments, seconds allowed."""

    name: str
    runs: int
    quick_runs: int
    quick_args: tuple[str, ...] = ("--quick",)
    full_args: tuple[str, ...] = ()
    timeout: float = 3600.0
    quick_timeout: float = 600.0
    #: "json": `python bench/NAME.py --runs N --json FILE`; "replay": `federator bench replay --out DIR`
    protocol: str = "json"
    #: run by `federator bench --out DIR` alone; False: only when named (`--only NAME`)
    by_default: bool = True


BENCHES: tuple[BenchSpec, ...] = (
    BenchSpec("store", runs=3, quick_runs=3, quick_args=("--quick", "--backends", "memory,sqlite")),
    BenchSpec("sim", runs=3, quick_runs=3),
    # bench/sync.py has no --quick: a small federation and a short window instead
    BenchSpec("sync", runs=3, quick_runs=2,
              quick_args=("--clusters", "4", "--nodes", "100", "--rate", "1000", "--seconds", "3", "--warmup", "1",
                          "--sim-procs", "1")),
    BenchSpec("placement", runs=3, quick_runs=3),
    BenchSpec("api", runs=3, quick_runs=3),
    BenchSpec("e2e", runs=3, quick_runs=1),
    BenchSpec("replay", runs=1, quick_runs=1, protocol="replay", quick_args=("--jobs", "3000"), timeout=900.0),
    BenchSpec("scale", runs=3, quick_runs=1, timeout=7200.0),
    BenchSpec("failover", runs=3, quick_runs=1),
    BenchSpec("ha", runs=5, quick_runs=1),
    # a full soak run is 30 minutes; a quick one a minute (compaction every 10 s)
    BenchSpec("soak", runs=1, quick_runs=1, quick_args=("--quick", "--minutes", "1"), timeout=7200.0),
    # four real control planes, Kueue built from its Go module on first use (tens of minutes cold): only when named
    BenchSpec("multikueue", runs=3, quick_runs=1, timeout=10800.0, quick_timeout=3600.0, by_default=False),
)
BENCH_NAMES = tuple(spec.name for spec in BENCHES)
#: modules of bench/ that are not benchmarks (imported by them; `python bench/NAME.py --json FILE` does nothing)
_HELPERS = ("benchresult", "gangarrivals", "kubemembers", "kubescale")


def benches_in(bench_dir: Path) -> tuple[BenchSpec, ...]:
    """The table above, then any other bench/NAME.py (a benchmark added since: called the same way)."""
    others = sorted(path.stem for path in bench_dir.glob("*.py")
                    if path.stem not in BENCH_NAMES and path.stem not in _HELPERS and not path.stem.startswith("_"))
    return BENCHES + tuple(BenchSpec(name, runs=3, quick_runs=1) for name in others)


_MAX_RUNS = 20
_MAX_BENCH_ARGS = 4096


def default_bench_dir() -> Path:
    """bench/ of the source checkout this package was imported from (absent in an installed package)."""
    import federator

    return Path(federator.__file__).resolve().parents[1] / "bench"


def _bench_dir(given: str | None) -> Path:
    where = Path(given) if given else default_bench_dir()
    if not where.is_dir():
        how = "" if given else (" (the benchmarks ship with the source checkout, not with the installed package: "
                                "run from a checkout, e.g. after `pip install -e .`, or pass --bench-dir)")
        raise UserError(f"no benchmark directory {where}{how}")
    scripts = [path for path in where.glob("*.py") if path.stem not in _HELPERS]
    if not (where / "benchresult.py").is_file() or not scripts:
        raise UserError(f"{where} holds no federator benchmarks (bench/benchresult.py and bench/NAME.py, e.g. NAME "
                        f"in {', '.join(n for n in BENCH_NAMES if n != 'replay')})")
    return where.resolve()


def _names(text: str | None, flag: str, known: Sequence[str]) -> list[str]:
    if text is None:
        return []
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UserError(f"{flag} {text[:100]!r}: unknown benchmark {unknown[0][:40]!r}; known: {', '.join(known)}"
                        if unknown else f"{flag}: no benchmark named")
    return names


def _bench_args(items: Sequence[str], known: Sequence[str]) -> dict[str, list[str]]:
    extra: dict[str, list[str]] = {}
    for item in items:
        if len(item) > _MAX_BENCH_ARGS:
            raise UserError(f"--bench-args: longer than {_MAX_BENCH_ARGS} characters")
        name, sep, text = item.partition("=")
        if not sep or name not in known:
            raise UserError(f"--bench-args {item[:80]!r}: expected NAME=ARGS with NAME one of {', '.join(known)}")
        try:
            words = shlex.split(text)
        except ValueError as e:
            raise UserError(f"--bench-args {item[:80]!r}: {e}") from None
        if any(w.split("=", 1)[0] in ("--json", "--out", "--runs") for w in words):
            raise UserError(f"--bench-args {item[:80]!r}: --json, --out and --runs are federator bench's to set")
        extra.setdefault(name, []).extend(words)
    return extra


def machine_info() -> dict[str, Any]:
    """What the figures were measured on: CPU model, cores, RAM, Python, OS, load average."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    ram = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) * 1024
    return {"cpuModel": model, "cores": os.cpu_count() or 0, "ramBytes": ram,
            "python": platform.python_version(), "platform": platform.platform(),
            "loadAverageAtStart": [round(x, 2) for x in os.getloadavg()]}


def _commit(checkout: Path) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(["git", "-C", str(checkout), "describe", "--always", "--dirty", "--abbrev=12"],
                              capture_output=True, text=True, timeout=10, check=False)
        if done.returncode == 0:
            return done.stdout.strip()
    return "unknown"


def summarise(figure: Mapping[str, Any]) -> dict[str, Any]:
    """A bench's figure (values per run) -> median, spread (min, max), runs, and whether the median meets its bar."""
    values = [float(v) for v in figure.get("values") or () if isinstance(v, int | float) and math.isfinite(v)]
    bar = figure.get("bar")
    median = statistics.median(values) if values else None
    met: bool | None = None
    if isinstance(bar, Mapping) and median is not None:
        met = median >= float(bar["value"]) if bar.get("op") == ">=" else median <= float(bar["value"])
    return {"name": str(figure.get("name", "")), "unit": str(figure.get("unit", "")), "median": median,
            "min": min(values) if values else None, "max": max(values) if values else None,
            "runs": len(figure.get("values") or ()), "values": list(figure.get("values") or ()),
            "bar": bar if isinstance(bar, Mapping) else None, "met": met}


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def read_result(path: Path) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """A bench's --json FILE (bench/benchresult.py): its figures, notes and plots; nothing if unreadable."""
    try:
        written = json.loads(path.read_bytes()[: 64 * 1024 * 1024])
    except (OSError, ValueError):
        return [], [], []
    if not isinstance(written, dict):
        return [], [], []
    figures = written.get("figures")
    kept = [f for f in figures if isinstance(f, dict) and isinstance(f.get("values"), list)] \
        if isinstance(figures, list) else []
    return kept, _strings(written.get("notes")), _strings(written.get("plots"))


def _run_process(command: list[str], *, log: Path, cwd: Path, timeout: float) -> tuple[int | None, str]:
    """Run `command` in its own process group, output to `log`; (exit code or None on timeout, the output)."""
    with log.open("ab") as out:
        out.write(f"$ {shlex.join(command)}\n".encode())
        out.flush()
        process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=out, start_new_session=True,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            stdout, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_group(process)
            stdout = b""
            code: int | None = None
        except BaseException:
            _stop_group(process)
            raise
        else:
            code = process.returncode
        out.write(stdout)
    return code, stdout.decode(errors="replace")


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the bench's process group (it started hubs, simulators, etcd), SIGKILL after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _log_tail(log: Path, lines: int = 15) -> list[str]:
    with contextlib.suppress(OSError):
        return log.read_text(errors="replace").splitlines()[-lines:]
    return []


def _replay_figures(report: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """`federator bench replay`'s report.json -> figures (policy.metric, one value) and notes."""
    policies = report.get("policies")
    if isinstance(policies, Sequence) and not isinstance(policies, str):
        policies = {str(p.get("policy") or p.get("name")): p for p in policies if isinstance(p, Mapping)}
    figures: list[dict[str, Any]] = []
    if isinstance(policies, Mapping):
        for policy, metrics in policies.items():
            if not isinstance(metrics, Mapping):
                continue
            for key, value in metrics.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    figures.append({"name": f"{policy}.{key}", "unit": _REPLAY_UNITS.get(key, ""),
                                    "values": [value], "bar": None})
    notes = [f"{key}: {report[key]}" for key in ("trace", "clustersFile", "seed", "rule") if key in report]
    return figures, notes


_REPLAY_UNITS = {"meanQueueDelaySeconds": "s", "p95QueueDelaySeconds": "s", "p99QueueDelaySeconds": "s",
                 "meanJctSeconds": "s", "makespanSeconds": "s", "gpuUtilization": "fraction",
                 "datasetBytesCopied": "bytes", "wallSeconds": "s", "jobs": "jobs"}


def _run_bench(spec: BenchSpec, *, bench_dir: Path, out: Path, quick: bool, runs: int,
               extra: Sequence[str], timeout: float) -> dict[str, Any]:
    """Run one benchmark; its entry of report.json."""
    log = out / "logs" / f"{spec.name}.log"
    raw = out / "raw" / f"{spec.name}.json"
    for path in (log, raw):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
    entry: dict[str, Any] = {"name": spec.name, "runs": runs, "log": str(log.relative_to(out)), "figures": [],
                             "notes": [], "plots": []}
    script = bench_dir / f"{spec.name}.py"
    if spec.protocol != "replay" and not script.is_file():
        entry.update(status="absent", error=f"{script.name} is not in {bench_dir}")
        return entry
    mode = list(spec.quick_args if quick else spec.full_args)
    shown = f"bench/{script.name}" if bench_dir == default_bench_dir().resolve() else str(script)
    started = time.monotonic()
    codes: list[int | None] = []
    raw_figures: Sequence[Mapping[str, Any]] = []
    if spec.protocol == "json":
        command = [sys.executable, str(script), "--runs", str(runs), "--json", str(raw), *mode, *extra]
        entry["command"] = [shown, *command[2:]]
        code, _ = _run_process(command, log=log, cwd=bench_dir.parent, timeout=timeout)
        codes.append(code)
        raw_figures, entry["notes"], entry["plots"] = read_result(raw)
    else:  # replay: `federator bench replay --out OUT/replay`
        replay_out = out / "replay"
        command = [sys.executable, "-m", "federator.cli", "bench", "replay", "--out", str(replay_out),
                   "--no-progress", *mode, *extra]
        entry["command"] = command[1:]
        code, _ = _run_process(command, log=log, cwd=bench_dir.parent, timeout=timeout)
        codes.append(code)
        with contextlib.suppress(OSError, ValueError):
            report = json.loads((replay_out / "report.json").read_text())
            raw_figures, entry["notes"] = _replay_figures(report)
            if isinstance(report.get("wallSeconds"), int | float):
                raw_figures.append({"name": "wallSeconds", "unit": "s", "values": [report["wallSeconds"]],
                                    "bar": None})
            entry["plots"] = sorted(str(p) for p in replay_out.glob("*.png"))
            entry["notes"].append("deterministic (virtual time, seeded): one run; the same inputs give the same figures")
            entry["layout"] = "policies"  # report.md shows one row per policy
            entry["notes"].append(f"the replay's own report, with federator's ratio to each baseline: "
                                  f"{(replay_out / 'report.md').relative_to(out)}")
    entry["seconds"] = round(time.monotonic() - started, 1)
    entry["exitCodes"] = codes
    if quick and "--quick" not in spec.quick_args:
        # made small by our arguments, not by its own --quick: its bars are for sizes it did not run
        raw_figures = [{**f, "bar": None} for f in raw_figures]
    entry["figures"] = [summarise(f) for f in raw_figures]
    if None in codes:
        entry.update(status="failed", error=f"timed out after {timeout:g} s")
    elif not entry["figures"]:
        entry.update(status="failed", error=f"exit code {codes[-1] if codes else '?'} and no figures written")
    else:
        entry["status"] = "ok"
        if any(code != 0 for code in codes):
            entry["notes"].append(f"exit codes {codes} (a bench may exit non-zero when a bar is missed)")
    if entry["status"] != "ok":
        entry["logTail"] = _log_tail(log)
    entry["plots"] = _copy_plots(entry["plots"], out=out, bench=spec.name)
    return entry


def _copy_plots(plots: Sequence[str], *, out: Path, bench: str) -> list[str]:
    """Plots the bench drew, copied under OUT/plots (a path outside OUT is copied, never moved); relative paths."""
    kept: list[str] = []
    for index, name in enumerate(plots):
        source = Path(name)
        if not source.is_file() or source.suffix.lower() not in (".png", ".svg"):
            continue
        target = out / "plots" / f"{bench}-{index:02d}-{source.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        kept.append(str(target.relative_to(out)))
    return kept


def _load_module(bench_dir: Path, name: str) -> Any:
    """bench/NAME.py as a module (bench/ is not a package; its scripts import each other by file name)."""
    if str(bench_dir) not in sys.path:
        sys.path.insert(0, str(bench_dir))
    spec = importlib.util.spec_from_file_location(name, bench_dir / f"{name}.py")
    if spec is None or spec.loader is None:
        raise UserError(f"cannot load {bench_dir / f'{name}.py'}")
    module = sys.modules.get(name)
    if module is None or getattr(module, "__file__", None) != str(bench_dir / f"{name}.py"):
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


def _number(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:,.2f}"
    return f"{value:.3g}"


def _bar_text(figure: Mapping[str, Any]) -> str:
    bar = figure.get("bar")
    if not bar:
        return ""
    verdict = "met" if figure["met"] else "MISSED" if figure["met"] is False else "n/a"
    return f"{bar['op']} {_number(float(bar['value']))}: {verdict}"


def _spread_text(figure: Mapping[str, Any]) -> str:
    if figure["runs"] <= 1 or figure["min"] is None:
        return "one run"
    return f"{_number(figure['min'])} - {_number(figure['max'])}"


def _policy_table(figures: Sequence[Mapping[str, Any]]) -> list[str]:
    """Figures named POLICY.METRIC (one run each) as one row per policy, one column per metric."""
    rows: dict[str, dict[str, str]] = {}
    metrics: list[str] = []
    other: list[Mapping[str, Any]] = []
    for f in figures:
        policy, dot, metric = str(f["name"]).partition(".")
        if not dot:
            other.append(f)
            continue
        if metric not in metrics:
            metrics.append(metric)
        rows.setdefault(policy, {})[metric] = _number(f["median"])
    lines = ["| policy | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    lines += [f"| {policy} | " + " | ".join(cells.get(m, "") for m in metrics) + " |" for policy, cells in rows.items()]
    lines += ["", *(f"- {f['name']}: {_number(f['median'])} {f['unit']}".rstrip() for f in other)]
    return [*lines, ""] if other else lines


def render_markdown(report: Mapping[str, Any]) -> str:
    m = report["machine"]
    load = " / ".join(f"{x:.2f}" for x in m["loadAverageAtStart"])
    end = " / ".join(f"{x:.2f}" for x in report.get("loadAverageAtEnd") or ())
    lines = [
        "# federator benchmarks", "",
        f"`{report['command']}`, {report['startedAt']} (commit {report['commit']}), {report['seconds']:.0f} s"
        + (", quick: smaller sizes (each bench's --help says which); a bar a quick size does not test is left out"
           if report["quick"] else "") + ".", "",
        f"Machine: {m['cpuModel']}, {m['cores']} cores, {m['ramBytes'] / 2**30:.1f} GiB RAM, Python {m['python']}, "
        f"{m['platform']}; load average {load} (1, 5, 15 min) at the start" + (f", {end} at the end" if end else "")
        + ".", "",
        "Each figure is the median of its runs; the spread is the lowest and highest run.", "",
    ]
    missed = [(b["name"], f) for b in report["benches"] for f in b["figures"] if f["met"] is False]
    problems = [b for b in report["benches"] if b["status"] != "ok"]
    lines += ["## Summary", "", "| benchmark | status | runs | seconds | bars met |", "|---|---|---|---|---|"]
    for b in report["benches"]:
        with_bar = [f for f in b["figures"] if f["met"] is not None]
        met = sum(1 for f in with_bar if f["met"])
        lines.append(f"| {b['name']} | {b['status']} | {b['runs']} | {b.get('seconds', 0):.0f} | "
                     f"{f'{met} of {len(with_bar)}' if with_bar else '-'} |")
    lines.append("")
    if missed:
        lines += ["Bars missed: " + "; ".join(f"{name} {f['name']} {_number(f['median'])} {f['unit']} "
                                              f"(bar {f['bar']['op']} {_number(float(f['bar']['value']))})"
                                              for name, f in missed) + ".", ""]
    for b in report["benches"]:
        lines += [f"## {b['name']}", ""]
        if b["status"] != "ok":
            lines += [f"**{b['status']}**: {b.get('error', '')}", ""]
            if b.get("logTail"):
                lines += ["```", *b["logTail"], "```", ""]
        if b.get("command"):
            lines += [f"`{shlex.join(['python', *b['command']])}` ({b['runs']} run{'s' if b['runs'] != 1 else ''}, "
                      f"log: {b['log']})", ""]
        if b["figures"] and b.get("layout") == "policies":
            lines += _policy_table(b["figures"])
        elif b["figures"]:
            lines += ["| figure | median | spread | unit | bar |", "|---|---|---|---|---|"]
            for f in b["figures"]:
                lines.append(f"| {f['name']} | {_number(f['median'])} | {_spread_text(f)} | {f['unit']} | "
                             f"{_bar_text(f)} |")
            lines.append("")
        lines += [f"- {note}" for note in b["notes"]]
        if b["notes"]:
            lines.append("")
        lines += [f"![{b['name']}]({plot})" for plot in b["plots"]]
        if b["plots"]:
            lines.append("")
    if problems:
        lines += [f"{len(problems)} benchmark(s) did not give figures: "
                  + ", ".join(f"{b['name']} ({b['status']})" for b in problems) + ".", ""]
    return "\n".join(lines)


def _register_run_all(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR",
                   help="run every benchmark and write report.md, report.json, plots/, logs/ and raw/ here")
    p.add_argument("--quick", action="store_true",
                   help="small sizes and fewer runs (a few minutes on two cores): a check, not the figures")
    p.add_argument("--runs", default=None, metavar="N",
                   help=f"runs of every benchmark (default: each one's own, fewer with --quick; at most {_MAX_RUNS})")
    p.add_argument("--only", metavar="a,b,...",
                   help=f"only these benchmarks ({', '.join(BENCH_NAMES)}, and any other bench/NAME.py)")
    p.add_argument("--skip", metavar="a,b,...", help="every benchmark but these")
    p.add_argument("--bench-args", action="append", default=[], metavar="NAME=ARGS",
                   help="more arguments for one benchmark, e.g. 'e2e=--backends sqlite,etcd' (repeatable)")
    p.add_argument("--bench-dir", metavar="DIR",
                   help="the benchmarks' directory (default: bench/ of the source checkout federator runs from)")
    p.add_argument("--timeout", default=None, metavar="SECONDS",
                   help="give up on one benchmark after this long (default: 10 min with --quick, else 1-2 h)")
    p.set_defaults(handler=_cmd_run_all)


def _runs(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        runs = int(text)
    except ValueError:
        runs = 0
    if not 1 <= runs <= _MAX_RUNS:
        raise UserError(f"--runs {text[:40]!r}: expected a whole number from 1 to {_MAX_RUNS}")
    return runs


def _timeout(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= 7 * 86400):
        raise UserError(f"--timeout {text[:40]!r}: expected seconds, more than 0 and at most a week")
    return seconds


def _command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this report (the flags as given, --out last)."""
    words = ["federator", "bench"]
    if args.quick:
        words.append("--quick")
    for flag, value in (("--runs", args.runs), ("--only", args.only), ("--skip", args.skip),
                        ("--bench-dir", args.bench_dir), ("--timeout", args.timeout)):
        if value is not None:
            words += [flag, str(value)]
    for item in args.bench_args:
        words += ["--bench-args", item]
    return shlex.join([*words, "--out", str(args.out)])


def _cmd_run_all(args: argparse.Namespace) -> int:
    if not args.out:
        raise UserError("federator bench: --out DIR is required (or name a benchmark: federator bench replay|scale)")
    runs = _runs(args.runs)
    timeout = _timeout(args.timeout)
    out = Path(args.out).absolute()  # the benches run in the checkout, not in our working directory
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {args.out}: exists and is not a directory")
    bench_dir = _bench_dir(args.bench_dir)
    specs = benches_in(bench_dir)
    known = [spec.name for spec in specs]
    chosen = _names(args.only, "--only", known) or [spec.name for spec in specs if spec.by_default]
    skipped = _names(args.skip, "--skip", known)
    chosen = [n for n in chosen if n not in skipped]
    if not chosen:
        raise UserError("--only and --skip leave no benchmark to run")
    per_bench = _bench_args(args.bench_args, known)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": _command_line(args), "startedAt": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(bench_dir.parent), "quick": bool(args.quick), "machine": machine_info(), "benches": []}
    started = time.monotonic()
    selected = [spec for spec in specs if spec.name in chosen]
    for i, spec in enumerate(selected, 1):
        spec_runs = 1 if spec.protocol == "replay" else runs or (spec.quick_runs if args.quick else spec.runs)
        spec_timeout = timeout or (spec.quick_timeout if args.quick else spec.timeout)
        print(f"[{i}/{len(selected)}] {spec.name}: {spec_runs} run{'s' if spec_runs != 1 else ''}"
              f"{' (quick)' if args.quick else ''}...", file=sys.stderr, flush=True)
        entry = _run_bench(spec, bench_dir=bench_dir, out=out, quick=args.quick, runs=spec_runs,
                           extra=per_bench.get(spec.name, []), timeout=spec_timeout)
        report["benches"].append(entry)
        print(f"[{i}/{len(selected)}] {spec.name}: {entry['status']}"
              + (f" in {entry['seconds']:.0f} s, {len(entry['figures'])} figures" if entry["status"] == "ok"
                 else f": {entry.get('error', '')}"), file=sys.stderr, flush=True)
    report["seconds"] = round(time.monotonic() - started, 1)
    report["loadAverageAtEnd"] = [round(x, 2) for x in os.getloadavg()]
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(render_markdown(report))
    failed = [b["name"] for b in report["benches"] if b["status"] == "failed"]
    print(f"wrote {out / 'report.md'} and {out / 'report.json'}"
          + (f"; failed: {', '.join(failed)} (see logs/)" if failed else ""), file=sys.stderr, flush=True)
    return 1 if failed else 0


# ---------------------------------------------------------------- scale: bench/scale.py's main(argv)


def _register_scale(benches: Any) -> None:
    p = benches.add_parser(
        "scale", add_help=False, prefix_chars="\0",
        help="one hub syncing 100 simulated clusters x 1,000 nodes and more (bench/scale.py; --help for its flags)",
        description="bench/scale.py of the source checkout; every argument goes to it.",
    )
    p.add_argument("scale_args", nargs=argparse.REMAINDER)
    p.set_defaults(handler=_cmd_scale)


def _cmd_scale(args: argparse.Namespace) -> int:
    bench_dir = _bench_dir(args.bench_dir)
    if not (bench_dir / "scale.py").is_file():
        raise UserError(f"{bench_dir / 'scale.py'} does not exist")
    scale = _load_module(bench_dir, "scale")
    try:
        code = scale.main(list(args.scale_args))
    except SystemExit as e:  # its argument parser: --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else 1
    return int(code or 0)
