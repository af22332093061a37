"""`federator bench`: bad arguments are one line and exit 2 and write nothing; a missing benchmark
directory says where it looked; a real quick run of bench/placement.py writes report.md and report.json
with the median and spread of every figure and the machine; a benchmark that fails is reported with the
end of its log and exit 1; a bench's result file that is not what it should be is read as no figures.
No timing is asserted: the figures are whatever this machine gives."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from federator.cli import bench, main

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT / "bench"


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(("args", "words"), [
    ((), "--out DIR is required"),
    (("--runs", "0"), "--runs '0': expected a whole number from 1 to 20"),
    (("--runs", "21"), "expected a whole number from 1 to 20"),
    (("--runs", "three"), "--runs 'three'"),
    (("--timeout", "-5"), "--timeout '-5': expected seconds"),
    (("--timeout", "nan"), "--timeout 'nan'"),
    (("--timeout", "inf"), "--timeout 'inf'"),
    (("--only", "placement,nosuch"), "--only 'placement,nosuch': unknown benchmark 'nosuch'; known: store, sim"),
    (("--only", ","), "--only: no benchmark named"),
    (("--skip", "../../etc/passwd"), "unknown benchmark '../../etc/passwd'"),
    (("--only", "placement", "--skip", "placement"), "--only and --skip leave no benchmark to run"),
    (("--bench-args", "placement"), "expected NAME=ARGS"),
    (("--bench-args", "nosuch=--gangs 3"), "expected NAME=ARGS with NAME one of store"),
    (("--bench-args", "placement=--json /etc/passwd"), "--json, --out and --runs are federator bench's to set"),
    (("--bench-args", "placement=--runs=9"), "--json, --out and --runs are federator bench's to set"),
    (("--bench-args", "placement='--gangs 3"), "No closing quotation"),
    (("--bench-args", "placement=" + "x" * 5000), "--bench-args: longer than 4096 characters"),
    (("--bench-dir", "/nonexistent/bench"), "no benchmark directory /nonexistent/bench"),
])
def test_bad_arguments_are_one_line_exit_2_and_write_nothing(
    args: tuple[str, ...], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["bench", *args] + (["--out", str(out)] if args else [])
    assert main(argv) == 2
    captured = capsys.readouterr()
    line = one_error_line(captured.err)
    assert line.startswith("error: ") and words in line, line
    assert captured.out == ""
    assert not out.exists()


def test_out_that_is_a_file_is_refused_and_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "report"
    target.write_text("mine")
    assert main(["bench", "--only", "placement", "--out", str(target)]) == 2
    assert "exists and is not a directory" in one_error_line(capsys.readouterr().err)
    assert target.read_text() == "mine"


def test_a_directory_without_benchmarks_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "placement.py").write_text("raise SystemExit('must not run')\n")  # no benchresult.py: not a bench dir
    only_helper = tmp_path / "only-helper"
    only_helper.mkdir()
    shutil.copy(BENCH_DIR / "benchresult.py", only_helper)
    assert main(["bench", "--bench-dir", str(only_helper), "--out", str(tmp_path / "out")]) == 2
    assert "holds no federator benchmarks" in one_error_line(capsys.readouterr().err)
    for argv in (["bench", "--bench-dir", str(empty), "--out", str(tmp_path / "out")],
                 ["bench", "--bench-dir", str(empty), "scale", "--quick"]):
        assert main(argv) == 2
        assert f"{empty} holds no federator benchmarks" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_without_a_checkout_it_says_the_benchmarks_ship_with_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # as in an installed image: site-packages/federator has no bench/ beside it
    monkeypatch.setattr(bench, "default_bench_dir", lambda: tmp_path / "site-packages" / "bench")
    assert main(["bench", "--quick", "--out", str(tmp_path / "out")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "no benchmark directory" in line and "not with the installed package" in line and "--bench-dir" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not (BENCH_DIR / "scale.py").is_file(), reason="bench/scale.py is not in this checkout")
def test_scale_gets_every_argument_and_its_usage_errors_come_back(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "scale", "--runs", "0"]) == 2
    assert "--runs" in capsys.readouterr().err
    assert main(["bench", "scale", "--help"]) == 0
    assert "100 simulated clusters" in capsys.readouterr().out


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "federator.cli", "bench", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)


def test_a_quick_run_writes_medians_spread_and_the_machine(tmp_path: Path) -> None:
    # gang sizes from a small trace of our own (the ITP trace need not be beside the checkout)
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,num_gpu\n" + "".join(f"j{i},{g}\n" for i, g in enumerate((1, 2, 4, 8, 16, 32))))
    out = tmp_path / "report"
    bench_args = f"placement=--gangs 40 --trace {trace}"
    # --out relative to where federator runs, not to the checkout where the benches run
    done = run_cli("--quick", "--only", "placement", "--runs", "2", "--bench-args", bench_args, "--out", "report",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["quick"] is True
    assert report["command"] == (f"federator bench --quick --runs 2 --only placement "
                                 f"--bench-args '{bench_args}' --out report")
    machine = report["machine"]
    assert machine["cores"] >= 1 and machine["ramBytes"] > 0 and machine["cpuModel"]
    assert machine["python"] == ".".join(map(str, sys.version_info[:3]))
    assert len(machine["loadAverageAtStart"]) == 3 and len(report["loadAverageAtEnd"]) == 3
    [entry] = report["benches"]
    assert entry["name"] == "placement" and entry["status"] == "ok" and entry["runs"] == 2
    assert entry["command"][:1] == ["bench/placement.py"] and "--quick" in entry["command"]
    names = {f["name"] for f in entry["figures"]}
    assert {"20x500.decisionsPerSecond", "20x500-unplaceable.decisionsPerSecond"} <= names
    for figure in entry["figures"]:
        assert figure["runs"] == 2 and len(figure["values"]) == 2
        assert figure["min"] <= figure["median"] <= figure["max"]
        assert figure["median"] == pytest.approx(sum(figure["values"]) / 2)
    rate = next(f for f in entry["figures"] if f["name"] == "20x500-unplaceable.decisionsPerSecond")
    assert rate["unit"] == "decisions/s" and rate["bar"] == {"op": ">=", "value": 2000.0}
    assert rate["met"] is (rate["median"] >= 2000)
    assert (out / "raw" / "placement.json").is_file()
    assert "20x500-unplaceable run 2" in (out / "logs" / "placement.log").read_text()
    markdown = (out / "report.md").read_text()
    assert f"`{report['command']}`" in markdown
    assert f"{machine['cores']} cores" in markdown and f"Python {machine['python']}" in markdown
    assert "load average" in markdown and "## placement" in markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| 20x500-unplaceable.decisionsPerSecond |"))
    assert " - " in row and "decisions/s" in row and (">= 2,000: met" in row or ">= 2,000: MISSED" in row)
    assert "| placement | ok | 2 |" in markdown


def test_a_failing_benchmark_is_reported_with_its_log_and_exit_1(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = run_cli("--only", "placement", "--runs", "1", "--bench-args", "placement=--scenario nosuch",
                   "--out", str(out))  # the bench's own usage error, before it reads any trace
    assert done.returncode == 1
    assert "placement: failed" in done.stderr and "failed: placement" in done.stderr
    [entry] = json.loads((out / "report.json").read_text())["benches"]
    assert entry["status"] == "failed" and entry["figures"] == []
    assert entry["error"] == "exit code 2 and no figures written"
    assert any("invalid choice: 'nosuch'" in line for line in entry["logTail"])
    markdown = (out / "report.md").read_text()
    assert "**failed**: exit code 2 and no figures written" in markdown and "invalid choice: 'nosuch'" in markdown


TINY_BENCH = textwrap.dedent("""\
    import argparse
    from benchresult import BenchResult
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--json", required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    result = BenchResult("tiny")
    for run in range(args.runs):
        result.add("triangle", sum(range(10 * (run + 1))), unit="things", bar=(">=", 100))
    result.notes.append(f"quick={args.quick}")
    result.write(args.json)
""")


def test_a_bench_the_table_does_not_name_is_found_and_run_the_same_way(tmp_path: Path) -> None:
    bench_dir = tmp_path / "bench"
    bench_dir.mkdir()
    shutil.copy(BENCH_DIR / "benchresult.py", bench_dir)
    (bench_dir / "tiny.py").write_text(TINY_BENCH)
    out = tmp_path / "report"
    # the table's benchmarks are absent from this directory (replay is part of the package: skipped here)
    done = run_cli("--bench-dir", str(bench_dir), "--skip", "replay", "--quick", "--runs", "3", "--out", str(out))
    report = json.loads((out / "report.json").read_text()) if done.returncode in (0, 1) else None
    assert report is not None, done.stderr
    by_name = {b["name"]: b for b in report["benches"]}
    assert by_name["store"]["status"] == "absent" and by_name["ha"]["status"] == "absent"
    tiny = by_name["tiny"]
    assert tiny["status"] == "ok" and tiny["notes"] == ["quick=True"]
    assert tiny["command"] == [str(bench_dir / "tiny.py"), "--runs", "3", "--json", str(out / "raw" / "tiny.json"),
                               "--quick"]
    [figure] = tiny["figures"]
    assert figure["values"] == [45, 190, 435]
    assert (figure["median"], figure["min"], figure["max"], figure["unit"], figure["met"]) == (190, 45, 435, "things",
                                                                                               True)
    assert "| triangle | 190 | 45.00 - 435 | things | >= 100: met |" in (out / "report.md").read_text()


@pytest.mark.parametrize("content", [
    "not json", "[1, 2]", '"text"', '{"figures": 3}', '{"figures": [1, "x", {"name": "n"}]}',
    '{"figures": [{"name": "n", "values": "abc"}], "notes": "one", "plots": {"a": 1}}',
])
def test_a_result_file_that_is_not_a_bench_result_gives_no_figures(content: str, tmp_path: Path) -> None:
    path = tmp_path / "raw.json"
    path.write_text(content)
    figures, notes, plots = bench.read_result(path)
    assert (figures, notes, plots) == ([], [], [])


def test_summarise_skips_runs_without_a_value_and_judges_the_median() -> None:
    figure = bench.summarise({"name": "x", "unit": "ms", "values": [3.0, None, 1.0, 2.0],
                              "bar": {"op": "<=", "value": 2.0}})
    assert (figure["median"], figure["min"], figure["max"], figure["runs"], figure["met"]) == (2.0, 1.0, 3.0, 4, True)
    nothing = bench.summarise({"name": "y", "values": [None], "bar": {"op": ">=", "value": 1}})
    assert nothing["median"] is None and nothing["met"] is None


def test_replay_figures_read_as_one_row_per_policy() -> None:
    report = {"trace": "itp", "seed": 1, "policies": {
        "federator": {"meanQueueDelaySeconds": 6.0, "memberWritesPerJob": 4.0},
        "karmada": {"meanQueueDelaySeconds": 139.0, "memberWritesPerJob": 4.0, "note": "text is not a figure"}}}
    figures, notes = bench._replay_figures(report)
    assert [f["name"] for f in figures] == ["federator.meanQueueDelaySeconds", "federator.memberWritesPerJob",
                                           "karmada.meanQueueDelaySeconds", "karmada.memberWritesPerJob"]
    assert notes == ["trace: itp", "seed: 1"]
    table = bench._policy_table([bench.summarise(f) for f in figures])
    assert table[:4] == ["| policy | meanQueueDelaySeconds | memberWritesPerJob |", "|---|---|---|",
                         "| federator | 6.00 | 4.00 |", "| karmada | 139 | 4.00 |"]
    assert bench._replay_figures({"policies": "nonsense"}) == ([], [])


def test_every_listed_benchmark_writes_its_figures_and_no_helper_is_listed() -> None:
    # `federator bench` runs each listed NAME as `python bench/NAME.py --runs N --json FILE`: a helper module
    # (imported by the benchmarks, no command line of its own) listed there would fail the whole run
    listed = {spec.name for spec in bench.benches_in(BENCH_DIR) if spec.protocol == "json"}
    scripts = {path.stem for path in BENCH_DIR.glob("*.py")}
    assert {"e2e", "scale", "store"} <= listed <= scripts
    for name in sorted(listed):
        assert '"--json"' in (BENCH_DIR / f"{name}.py").read_text(encoding="utf-8"), name
    helpers = {name for name in scripts - listed
               if '"--json"' not in (BENCH_DIR / f"{name}.py").read_text(encoding="utf-8")}
    assert {"gangarrivals", "kubemembers", "kubescale"} <= helpers
