"""`federator bench replay` end to end: the report's exact keys and files, and bad input that writes nothing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from replay_builders import TINY_CLUSTERS, synthetic_trace, write_trace

from federator.cli import main
from federator.replay.report import ELASTIC_KEYS, METRIC_KEYS, PLOTS, QUEUE_KEYS
from federator.replay.run import POLICIES, load_inputs, replay_options, run_policy

TOP_LEVEL = {"trace", "clustersFile", "seed", "rule", "machine", "policies", "spend"}


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    trace = synthetic_trace(tmp_path / "trace", jobs_per_cluster=40)
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(TINY_CLUSTERS)
    return trace, clusters


def test_replay_writes_report_json_md_and_plots_with_exactly_the_keys(
    inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, clusters = inputs
    out = tmp_path / "out"
    code = main(["bench", "replay", "--trace", str(trace), "--clusters", str(clusters), "--seed", "4",
                 "--jobs", "100", "--workers", "2", "--no-progress", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert all(name in printed for name in POLICIES) and "report.md" in printed
    report = json.loads((out / "report.json").read_text())
    assert set(report) == TOP_LEVEL
    assert report["seed"] == 4 and report["clustersFile"] == str(clusters) and report["trace"] == str(trace)
    assert "BLAKE2b" in report["rule"]
    assert report["machine"]["cpus"] >= 1 and report["machine"]["workers"] == 2
    assert list(report["policies"]) == list(POLICIES)
    for name, metrics in report["policies"].items():
        assert list(metrics) == list(METRIC_KEYS), name
        assert metrics["jobs"] == 100
    allatonce = report["policies"]["multikueue-allatonce"]["memberWritesPerJob"]
    assert report["policies"]["federator"]["memberWritesPerJob"] < allatonce
    for plot in PLOTS:
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    assert "## federator / baseline" in md and "meanQueueDelaySeconds" in md and report["rule"] in md
    for plot in PLOTS:
        assert f"({plot})" in md


def test_policies_subset_keeps_the_order_given(tmp_path: Path) -> None:
    options = replay_options(trace=None, clusters=None, seed=None, jobs="7", policies="none, federator",
                             workers=None, out=str(tmp_path / "o"))
    assert options.policies == ("none", "federator") and options.jobs == 7 and options.seed == 1
    assert 1 <= options.workers <= 2
    assert options.trace.name == "itp" and options.clusters.name == "default.yaml"
    assert not (tmp_path / "o").exists()


def test_queues_replays_federator_with_and_without_queues_and_reports_fairness_and_preemptions(
    inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, clusters = inputs
    out = tmp_path / "out"
    code = main(["bench", "replay", "--trace", str(trace), "--clusters", str(clusters), "--seed", "3", "--jobs", "90",
                 "--policies", "none", "--queues", "--workers", "1", "--no-progress", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "federator-queues" in printed and "Jain over queues" in printed
    report = json.loads((out / "report.json").read_text())
    assert set(report) == TOP_LEVEL | {"queues"}
    assert list(report["policies"]) == ["federator", "federator-queues", "none"]
    assert all(list(m) == list(METRIC_KEYS) for m in report["policies"].values())
    assert "Priority (the trace has none" in report["rule"]
    queues = report["queues"]
    assert set(queues) == {"rule", "fairness", "priorities", "quota", "policies", "comparison"}
    assert list(queues["quota"]) == ["cluster01", "cluster02", "cluster03"]
    # The nominal quotas add up to the federation's GPUs of each model (TINY_CLUSTERS: A100 32, V100 16, H100 16).
    totals: dict[str, int] = {}
    for q in queues["quota"].values():
        for model, count in q["nominal"].items():
            totals[model] = totals.get(model, 0) + count
    assert totals == {"A100": 32, "H100": 16, "V100": 16}
    assert sum(queues["priorities"].values()) == 90 and set(queues["priorities"]) <= {"0", "100", "1000"}
    assert list(queues["policies"]) == ["federator", "federator-queues", "none"]
    for figures in queues["policies"].values():
        assert set(figures) == set(QUEUE_KEYS) | {"perQueue", "perPriority"}
        assert 0 < figures["queueJainFairness"] <= 1
        for queue in figures["perQueue"].values():
            assert queue["p95QueueDelaySeconds"] >= queue["medianQueueDelaySeconds"] >= 0
    assert queues["policies"]["federator"]["preemptions"] == 0 == queues["policies"]["none"]["preemptions"]
    assert queues["comparison"]["of"] == "federator-queues" and queues["comparison"]["to"] == "federator"
    md = (out / "report.md").read_text()
    assert "## Queues" in md and "Jain over queues" in md and queues["rule"] in md
    # federator-queues is no baseline of federator's.
    baseline_header = next(line for line in md.splitlines() if line.startswith("| metric | none"))
    assert "federator-queues" not in baseline_header


def test_compare_victims_reports_gpu_hours_lost_with_and_without_the_checkpoint_aware_order_in_one_run(
    inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, clusters = inputs
    out = tmp_path / "out"
    code = main(["bench", "replay", "--trace", str(trace), "--clusters", str(clusters), "--seed", "3", "--jobs", "90",
                 "--policies", "none", "--queues", "--compare-victims", "--workers", "1", "--no-progress",
                 "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "with checkpoint-aware victims" in printed
    report = json.loads((out / "report.json").read_text())
    assert list(report["policies"]) == ["federator", "federator-queues", "federator-queues-by-start", "none"]
    assert "Checkpoints (the trace has none" in report["rule"]
    queues = report["queues"]
    victims = queues["checkpointAwareVictims"]
    assert (victims["with"], victims["without"]) == ("federator-queues", "federator-queues-by-start")
    lost = {name: queues["policies"][name]["gpuHoursLostToPreemption"]
            for name in ("federator-queues", "federator-queues-by-start")}
    assert (victims["gpuHoursLostWith"], victims["gpuHoursLostWithout"]) == (
        lost["federator-queues"], lost["federator-queues-by-start"])
    assert victims["gpuHoursSaved"] == pytest.approx(victims["gpuHoursLostWithout"] - victims["gpuHoursLostWith"])
    assert victims["preemptionsWith"] == queues["policies"]["federator-queues"]["preemptions"]
    if victims["preemptionsWith"]:
        assert victims["gpuHoursLostPerPreemptionWith"] == pytest.approx(
            victims["gpuHoursLostWith"] / victims["preemptionsWith"], abs=1e-3)
    md = (out / "report.md").read_text()
    assert "### Checkpoint-aware victims" in md and victims["rule"] in md
    assert f"| with (federator-queues) | {victims['gpuHoursLostWith']:,.1f} |" in md
    assert "restarts from the beginning:" not in md and "resumes from there" in md


def test_queues_adds_federator_beside_the_chosen_policies(tmp_path: Path) -> None:
    def chosen(policies: str | None) -> tuple[str, ...]:
        return replay_options(trace=None, clusters=None, seed=None, jobs=None, policies=policies, workers=None,
                              out=str(tmp_path / "o"), queues=True).policies

    assert chosen("none") == ("federator", "federator-queues", "none")
    assert chosen("karmada,federator") == ("karmada", "federator", "federator-queues")
    assert chosen(None) == ("federator", "federator-queues", *POLICIES[1:])
    compared = replay_options(trace=None, clusters=None, seed=None, jobs=None, policies="none", workers=None,
                              out=str(tmp_path / "o"), queues=True, compare_victims=True).policies
    assert compared == ("federator", "federator-queues", "federator-queues-by-start", "none")


def _bad(tmp_path: Path, inputs: tuple[Path, Path], capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    trace, clusters = inputs
    out = tmp_path / "never"
    argv = ["bench", "replay", "--trace", str(trace), "--clusters", str(clusters), "--no-progress",
            "--out", str(out), *flags]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert not out.exists(), "bad input must write nothing"
    return lines[0]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--policies", "federator,slurm"], "unknown policy 'slurm'"),
        (["--policies", "none,none"], "names a policy twice"),
        (["--policies", ","], "comma-separated"),
        (["--jobs", "-5"], "--jobs must be a positive integer"),
        (["--jobs", "0"], "--jobs must be an integer from 1"),
        (["--jobs", "ten"], "--jobs must be an integer"),
        (["--seed", "-1"], "--seed must be an integer"),
        (["--seed", "9" * 40], "--seed must be an integer"),
        (["--workers", "0"], "--workers must be an integer from 1"),
        (["--policies", "federator-queues"], "federator-queues is replayed by --queues"),
        (["--queues", "--policies", "none,federator-queues"], "federator-queues is replayed by --queues"),
        (["--elastic-share", "-0.3"], "--elastic-share must be a number from 0 to 1"),
        (["--elastic-share", "1.5"], "--elastic-share must be a number from 0 to 1"),
        (["--elastic-share", "nan"], "--elastic-share must be a number from 0 to 1"),
        (["--elastic-share", "inf"], "--elastic-share must be a number from 0 to 1"),
        (["--elastic-share", "3e-1"], "--elastic-share must be a number from 0 to 1"),
        (["--elastic-share", "0.3.1"], "--elastic-share must be a number from 0 to 1"),
        (["--elastic-share", ""], "--elastic-share must be a number from 0 to 1"),
        (["--elastic-share", "\u0663"], "--elastic-share must be a number from 0 to 1"),
        (["--elastic-share", "0." + "1" * 5000], "--elastic-share must be a number from 0 to 1"),
        (["--elastic-share", "0.3", "--queues"], "--elastic-share and --queues cannot be combined"),
        (["--compare-victims"], "--compare-victims needs --queues"),
        (["--queues", "--compare-victims", "--policies", "none,federator-queues-by-start"],
         "federator-queues-by-start by --compare-victims"),
    ],
)
def test_bad_flags(inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                   flags: list[str], message: str) -> None:
    assert message in _bad(tmp_path, inputs, capsys, *flags)


def test_missing_trace_directory(inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "does not exist" in _bad(tmp_path, inputs, capsys, "--trace", str(tmp_path / "no-such-trace"))


def test_malformed_and_mismatched_clusters_files(
    inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("clusters:\n  - name: [unclosed\n")
    assert "not valid YAML" in _bad(tmp_path, inputs, capsys, "--clusters", str(broken))
    negative = tmp_path / "negative.yaml"
    negative.write_text(TINY_CLUSTERS.replace("nodes: 3", "nodes: -1"))
    assert "nodePools[0].nodes" in _bad(tmp_path, inputs, capsys, "--clusters", str(negative))
    unmapped = tmp_path / "unmapped.yaml"
    unmapped.write_text(TINY_CLUSTERS.replace("[cluster03]", "[cluster09]"))
    message = _bad(tmp_path, inputs, capsys, "--clusters", str(unmapped))
    assert "cluster03 are the home of no cluster" in message
    assert "does not exist" in _bad(tmp_path, inputs, capsys, "--clusters", str(tmp_path / "nope.yaml"))


def test_malformed_trace_and_out_that_is_a_file(
    inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad_trace = write_trace(tmp_path / "bad-trace", {"cluster01": [("a", 1, 2, 1)]})
    (bad_trace / "cluster02.csv").write_text("job_id,submission_time,duration,num_gpu\nb,1,2,-3\n")
    assert "cluster02.csv:2" in _bad(tmp_path, inputs, capsys, "--trace", str(bad_trace))
    trace, clusters = inputs
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    code = main(["bench", "replay", "--trace", str(trace), "--clusters", str(clusters), "--out", str(a_file)])
    assert code == 2 and "exists and is not a directory" in capsys.readouterr().err
    assert a_file.read_text() == "not a directory"


def test_elastic_share_replays_every_policy_with_and_without_and_adds_only_the_elasticity_section(
    inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, clusters = inputs
    reports = {}
    for share in ("0.5", "0"):
        out = tmp_path / f"out-{share}"
        code = main(["bench", "replay", "--trace", str(trace), "--clusters", str(clusters), "--seed", "2",
                     "--jobs", "120", "--policies", "federator,armada", "--workers", "1", "--no-progress",
                     "--elastic-share", share, "--out", str(out)])
        assert code == 0
        printed = capsys.readouterr().out
        assert ("elastic 0.5: mean delay" in printed) == (share == "0.5")
        reports[share] = (json.loads((out / "report.json").read_text()), (out / "report.md").read_text())
    report, md = reports["0.5"]
    assert set(report) == TOP_LEVEL | {"elasticity"}
    assert all(list(m) == list(METRIC_KEYS) for m in report["policies"].values())
    assert "Elastic: a multi-GPU job" in report["rule"] and "## Elasticity" in md
    section = report["elasticity"]
    assert section["share"] == 0.5 and list(section["policies"]) == ["federator", "armada"]
    assert 0 < section["elasticJobs"] < section["multiGpuJobs"] < 120
    assert f"with {section['elasticJobs']:,} of the {section['multiGpuJobs']:,} multi-GPU jobs elastic" in md
    for name, figures in section["policies"].items():
        assert set(figures) == {"elasticJobs", "startedBelowMax", "resizes", "with", "without"}
        assert list(figures["with"]) == list(ELASTIC_KEYS) == list(figures["without"])
        assert figures["with"] == {k: report["policies"][name][k] for k in ELASTIC_KEYS}
        assert figures["elasticJobs"] > 0
    plain, plain_md = reports["0"]
    assert set(plain) == TOP_LEVEL and "Elastic" not in plain["rule"] and "Elasticity" not in plain_md
    # The run without elasticity is the replay of the same jobs in the same one-GPU-worker shape, fixed.
    options = replay_options(trace=str(trace), clusters=str(clusters), seed="2", jobs="120", policies=None,
                             workers="1", out=str(tmp_path / "unused"), elastic_share="0.5")
    elastic_jobs, _ = load_inputs(options)
    fixed_jobs, fed = load_inputs(options, fixed=True)
    assert [dataclasses.replace(j, min_pods=0) for j in elastic_jobs] == fixed_jobs
    assert not any(j.elastic for j in fixed_jobs)
    for name, figures in section["policies"].items():
        without = run_policy(name, fixed_jobs, fed, seed=2).metrics
        assert figures["without"] == {k: without[k] for k in ELASTIC_KEYS}
