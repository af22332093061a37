"""Tiers and costs in the replay (issue 30 item 5): the clusters file's labels, cost and tiers (what it accepts,
what it refuses, naming the field), the spend figures on hand-made jobs whose numbers are computed by hand, and
federator-tiers against federator on a contended case."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from replay_builders import job, replay, synthetic_trace

from federator.cli import main
from federator.replay.attributes import assign_attributes
from federator.replay.clusters import ClustersFileError, load_clusters, parse_clusters
from federator.replay.engine import UNTIERED
from federator.replay.federated import TIER_POLICY, FederatorPolicy
from federator.replay.policies import NonePolicy
from federator.replay.trace import load_trace

REPO = Path(__file__).resolve().parents[2]

# One on-prem cluster (price 0: sunk) and one cloud cluster (H100 at 2.5 by model, 1.0 otherwise), one node each.
TWO = """\
description: one on-prem and one cloud node
clusters:
  - name: onprem
    traceClusters: [cluster01]
    location: on-prem
    fabric: ethernet
    bandwidthGbps: 10
    cost: {perGpuHour: 0}
    labels: {location: on-prem}
    nodePools:
      - {gpuModel: A100, nodes: 1, gpusPerNode: 8}
  - name: cloud
    traceClusters: [cluster02]
    location: cloud
    fabric: ethernet
    bandwidthGbps: 10
    costPerGpuHour: 9
    cost: {perGpuHour: 1.0, perModel: {H100: 2.5}}
    labels: {location: cloud}
    nodePools:
      - {gpuModel: H100, nodes: 1, gpusPerNode: 8}
"""
TIERS = """\
tiers:
  - name: on-prem
    clusterSelector: {matchLabels: {location: on-prem}}
    spillAfterSeconds: 7200
  - name: cloud
    clusterSelector: {matchExpressions: [{key: location, operator: In, values: [cloud]}]}
"""


def test_labels_cost_and_tiers_parse_as_the_api_shapes() -> None:
    fed = parse_clusters(TWO + TIERS, path="t.yaml")
    onprem, cloud = fed.clusters
    assert onprem.labels == {"location": "on-prem"} and onprem.cost_per_gpu_hour == 0.0
    # cost.perGpuHour, when set, over costPerGpuHour (as the hub reads a MemberCluster); perModel over both.
    assert cloud.cost_per_gpu_hour == 1.0 and cloud.price("H100") == 2.5 and cloud.price("A100") == 1.0
    assert [t.name for t in fed.tiers] == ["on-prem", "cloud"]
    assert [t.spill_after_seconds for t in fed.tiers] == [7200.0, 300.0]  # the Queue API's default on the last
    assert fed.tier_of("onprem") == "on-prem" and fed.tier_of("cloud") == "cloud"
    # Without cost.perGpuHour, costPerGpuHour stands; without tiers, no cluster is in one.
    plain = parse_clusters(TWO.replace("cost: {perGpuHour: 1.0, perModel: {H100: 2.5}}", "cost: {perModel: {A100: 2}}"),
                           path="t.yaml")
    assert plain.cluster("cloud").cost_per_gpu_hour == 9.0 and plain.tiers == () and plain.tier_of("cloud") is None


def test_the_shipped_tiers_file_is_default_yaml_split_five_and_five() -> None:
    default = load_clusters(REPO / "bench/replay/clusters/default.yaml")
    tiers = load_clusters(REPO / "bench/replay/clusters/tiers.yaml")
    assert default.tiers == () and tiers.names == default.names
    on_prem = [c for c in tiers.clusters if c.location == "on-prem"]
    cloud = [c for c in tiers.clusters if c.location == "cloud"]
    assert len(on_prem) == len(cloud) == 5
    assert all(c.cost_per_gpu_hour == 0 and tiers.tier_of(c.name) == "on-prem" for c in on_prem)
    for c in cloud:
        assert tiers.tier_of(c.name) == "cloud" and c.cost_per_gpu_hour == default.cluster(c.name).cost_per_gpu_hour > 0
    # The five largest are on-prem; everything but location, cost, labels and tiers is default.yaml's.
    assert min(c.gpus for c in on_prem) >= max(c.gpus for c in cloud)
    for c in tiers.clusters:
        d = default.cluster(c.name)
        assert (c.pools, c.datasets, c.fabric, c.bandwidth_gbps, c.trace_clusters) == \
            (d.pools, d.datasets, d.fabric, d.bandwidth_gbps, d.trace_clusters)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("cost: {perGpuHour: 0}", "cost: {perGpuHour: -1}", "clusters[0].cost.perGpuHour"),
        ("perModel: {H100: 2.5}", "perModel: {H100: -2.5}", "clusters[1].cost.perModel.H100"),
        ("perModel: {H100: 2.5}", "perModel: {H100: .nan}", "clusters[1].cost.perModel.H100"),
        ("perModel: {H100: 2.5}", "perModel: {H100: 1e300}", "clusters[1].cost.perModel.H100"),
        ("cost: {perGpuHour: 0}", "cost: {perGpuHour: '3'}", "clusters[0].cost.perGpuHour"),
        ("cost: {perGpuHour: 0}", "cost: {perGpuHour: 0, currency: EUR}", "clusters[0].cost.currency"),
        ("cost: {perGpuHour: 0}", "cost: {perGpuHour: 0, spot: true}", "clusters[0].cost.spot"),
        ("cost: {perGpuHour: 0}", "cost: {interruptionRatePerHour: 0.1}", "clusters[0].cost.interruptionRatePerHour"),
        ("cost: {perGpuHour: 0}", "cost: [0]", "clusters[0].cost"),
        ("labels: {location: on-prem}", "lables: {location: on-prem}", "clusters[0].lables"),
        ("labels: {location: on-prem}", "labels: [location]", "clusters[0].labels"),
        ("labels: {location: on-prem}", "labels: {'bad key!': x}", "clusters[0].labels"),
        ("labels: {location: on-prem}", "labels: {location: " + "x" * 64 + "}", "clusters[0].labels.location"),
        ("matchLabels: {location: on-prem}", "matchLabels: {location: moon}", "tiers[0].clusterSelector"),
        ("operator: In, values: [cloud]", "operator: NotIn, values: [cloud, on-prem]", "tiers[1].clusterSelector"),
        ("operator: In, values: [cloud]", "operator: In, values: []", "tiers[1].clusterSelector.matchExpressions[0]"),
        ("operator: In, values: [cloud]", "operator: Like, values: [cloud]",
         "tiers[1].clusterSelector.matchExpressions[0].operator"),
        ("{matchLabels: {location: on-prem}}", "{matchLabels: {location: on-prem}, matchExpressions: "
         "[{key: location, operator: DoesNotExist}]}", "tiers[0].clusterSelector"),
        ("spillAfterSeconds: 7200", "spillAfterSeconds: -1", "tiers[0].spillAfterSeconds"),
        ("spillAfterSeconds: 7200", "spillAfterSeconds: 1.5", "tiers[0].spillAfterSeconds"),
        ("spillAfterSeconds: 7200", "spillAfterSeconds: '60'", "tiers[0].spillAfterSeconds"),
        ("spillAfterSeconds: 7200", "spillAfterSeconds: 99999999999", "tiers[0].spillAfterSeconds"),
        ("spillAfterSeconds: 7200", "spillAfterSeconds: 60\n    spill: 5", "tiers[0].spill"),
        ("  - name: cloud\n    clusterSelector", "  - name: on-prem\n    clusterSelector", "tiers[1].name"),
        ("  - name: cloud\n    clusterSelector", "  - name: Cloud_Tier\n    clusterSelector", "tiers[1].name"),
        ("  - name: cloud\n    clusterSelector", "  - clusterSelector", "tiers[1].name"),
    ],
)
def test_bad_cost_labels_and_tiers_are_refused_naming_the_field(old: str, new: str, field: str) -> None:
    text = TWO + TIERS
    assert old in text
    with pytest.raises(ClustersFileError) as info:
        parse_clusters(text.replace(old, new, 1), path="t.yaml")
    assert f"t.yaml: {field}" in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("tiers", "field"),
    [
        ("tiers: []\n", "tiers"),
        ("tiers: {name: x}\n", "tiers"),
        ("tiers: [on-prem]\n", "tiers[0]"),
        ("tiers:\n" + "".join(f"  - {{name: t{i}, clusterSelector: {{}}}}\n" for i in range(6)), "tiers"),
        ("tiers: [{name: a}]\n", "tiers[0].clusterSelector"),
    ],
)
def test_malformed_tiers_lists_are_refused(tiers: str, field: str) -> None:
    with pytest.raises(ClustersFileError) as info:
        parse_clusters(TWO + tiers, path="t.yaml")
    assert f"t.yaml: {field}" in str(info.value), str(info.value)


def test_an_empty_selector_tier_takes_every_cluster_and_a_cluster_in_no_tier_is_untiered() -> None:
    fed = parse_clusters(TWO + "tiers:\n  - {name: cloud, clusterSelector: {matchLabels: {location: cloud}}}\n",
                         path="t.yaml")
    assert fed.tier_of("cloud") == "cloud" and fed.tier_of("onprem") is None
    everything = parse_clusters(TWO + "tiers:\n  - {name: all, clusterSelector: {}}\n", path="t.yaml")
    assert everything.tier_of("onprem") == everything.tier_of("cloud") == "all"


# ---------------------------------------------------------------- the spend figures, by hand


def _two_jobs() -> list:  # type: ignore[type-arg]
    # Two 8-GPU jobs at t=0, an hour each, any GPU model: one node on-prem, one in the cloud.
    return [job("a", index=0, home="onprem", duration=3600.0), job("b", index=1, home="onprem", duration=3600.0)]


def test_spend_without_tiers_one_job_runs_in_the_cloud_at_its_model_price() -> None:
    fed = parse_clusters(TWO + TIERS, path="t.yaml")
    _, result = replay(_two_jobs(), fed, FederatorPolicy())
    spend = result.extra["spend"]
    # Both start at once: one on each node. The cloud one holds 8 H100 for 1 h at 2.5 (perModel): 20.
    assert spend["moneySpent"] == 20.0
    assert spend["onPremGpuHours"] == 8.0 and spend["cloudGpuHours"] == 8.0 and spend["gpuHours"] == 16.0
    assert spend["onPremShare"] == spend["cloudShare"] == 0.5
    assert spend["tierShares"] == {"on-prem": 0.5, "cloud": 0.5}
    assert spend["perClusterGpuHours"] == {"cloud": 8.0, "onprem": 8.0}
    assert spend["meanQueueDelaySeconds"] == spend["medianQueueDelaySeconds"] == spend["p95QueueDelaySeconds"] == 0.0


def test_spend_with_tiers_the_second_job_waits_for_on_prem_and_costs_nothing() -> None:
    fed = parse_clusters(TWO + TIERS, path="t.yaml")
    engine, result = replay(_two_jobs(), fed, FederatorPolicy(tiers=fed.tiers))
    assert result.policy == TIER_POLICY
    spend = result.extra["spend"]
    # The cloud tier opens after 7200 s; the on-prem node frees at 3600 s and the second job starts there.
    assert [engine.started_at[0], engine.started_at[1]] == [0.0, 3600.0]
    assert spend["moneySpent"] == 0.0 and spend["cloudGpuHours"] == 0.0 and spend["onPremGpuHours"] == 16.0
    assert spend["onPremShare"] == 1.0 and spend["tierShares"] == {"on-prem": 1.0, "cloud": 0.0}
    # Delays 0 and 3600: mean and median 1800, p90 0 + 0.9 x 3600, p95 and p99 likewise (linear interpolation).
    assert spend["meanQueueDelaySeconds"] == 1800.0 and spend["medianQueueDelaySeconds"] == 1800.0
    assert spend["p90QueueDelaySeconds"] == 3240.0 and spend["p95QueueDelaySeconds"] == 3420.0
    assert spend["p99QueueDelaySeconds"] == 3564.0


def test_a_tier_opens_at_its_spill_time_even_when_nothing_else_happens() -> None:
    # Spill after 600 s, the on-prem node busy for an hour: the second job goes to the cloud at exactly 600 s.
    fed = parse_clusters(TWO + TIERS.replace("spillAfterSeconds: 7200", "spillAfterSeconds: 600"), path="t.yaml")
    engine, result = replay(_two_jobs(), fed, FederatorPolicy(tiers=fed.tiers))
    assert sorted([engine.started_at[0], engine.started_at[1]]) == [0.0, 600.0]
    assert result.extra["spend"]["moneySpent"] == 20.0  # 8 H100 for its hour at 2.5
    assert result.extra["spend"]["p95QueueDelaySeconds"] == 570.0


def test_on_prem_prices_are_sunk_and_baselines_get_spend_and_untiered_shares() -> None:
    # An on-prem price is not money spent; a file without tiers puts every GPU-hour in 'untiered'.
    text = TWO.replace("cost: {perGpuHour: 0}", "cost: {perGpuHour: 7}")
    fed = parse_clusters(text, path="t.yaml")
    jobs = [job("a", index=0, home="onprem", duration=1800.0, gpus_per_pod=4),
            job("b", index=1, home="cloud", trace_cluster="cluster02", duration=7200.0, gpus_per_pod=2)]
    _, result = replay(jobs, fed, NonePolicy())
    spend = result.extra["spend"]
    # none keeps each at home: 4 GPUs x 0.5 h on-prem (sunk), 2 H100 x 2 h in the cloud at 2.5 = 10.
    assert spend["onPremGpuHours"] == 2.0 and spend["cloudGpuHours"] == 4.0 and spend["moneySpent"] == 10.0
    assert spend["tierShares"] == {UNTIERED: 1.0}
    assert spend["onPremShare"] == round(2 / 6, 6) and spend["cloudShare"] == round(4 / 6, 6)


# ---------------------------------------------------------------- tiers on against off, contended


CONTENDED = """\
clusters:
  - name: big
    traceClusters: [cluster01, cluster02]
    location: on-prem
    fabric: rdma
    bandwidthGbps: 10
    cost: {perGpuHour: 0}
    labels: {location: on-prem}
    nodePools:
      - {gpuModel: A100, nodes: 3, gpusPerNode: 8}
  - name: rented
    traceClusters: [cluster03]
    location: cloud
    fabric: ethernet
    bandwidthGbps: 20
    cost: {perGpuHour: 3}
    labels: {location: cloud}
    nodePools:
      - {gpuModel: A100, nodes: 3, gpusPerNode: 8}
tiers:
  - {name: on-prem, clusterSelector: {matchLabels: {location: on-prem}}, spillAfterSeconds: 1800}
  - {name: cloud, clusterSelector: {matchLabels: {location: cloud}}}
"""


def test_tiers_on_send_less_to_the_cloud_than_off_and_wait_longer(tmp_path: Path) -> None:
    fed = parse_clusters(CONTENDED, path="contended.yaml")
    jobs = assign_attributes(load_trace(synthetic_trace(tmp_path / "trace", jobs_per_cluster=30)), fed, seed=3)
    _, off = replay(jobs, fed, FederatorPolicy(), seed=3)
    tiered = FederatorPolicy(tiers=fed.tiers)
    engine, on = replay(jobs, fed, tiered, seed=3)
    s_off, s_on = off.extra["spend"], on.extra["spend"]
    assert s_off["cloudGpuHours"] > 0, "the scenario must overflow on-prem"
    assert s_on["cloudGpuHours"] < s_off["cloudGpuHours"] and s_on["moneySpent"] < s_off["moneySpent"]
    assert s_on["meanQueueDelaySeconds"] > s_off["meanQueueDelaySeconds"], "the trade-off: waiting for sunk capacity"
    assert on.never_started == off.never_started == 0
    # Every job went to the cloud only once it had waited the on-prem tier's 1800 s.
    for when, uid, cluster in tiered.decisions:
        if cluster == "rented":
            submitted = next(j.submitted for j in jobs if j.uid == uid)
            assert when - submitted >= 1800.0, uid
    # The selection of gangs per cycle decides what the whole queue would, tiers and all.
    whole = FederatorPolicy(tiers=fed.tiers, exhaustive_queue=True)
    replay(jobs, fed, whole, seed=3)
    assert whole.decisions == tiered.decisions
    assert all(m.ledger.overcommitted() == [] for m in engine.members.values())
    assert math.isclose(s_on["gpuHours"], s_off["gpuHours"], rel_tol=0.05)


def test_cli_tiers_replays_federator_tiers_beside_federator_and_compares(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    trace = synthetic_trace(tmp_path / "trace", jobs_per_cluster=20)
    clusters = tmp_path / "c.yaml"
    clusters.write_text(CONTENDED)
    out = tmp_path / "out"
    code = main(["bench", "replay", "--trace", str(trace), "--clusters", str(clusters), "--tiers", "--policies",
                 "none", "--workers", "1", "--no-progress", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "money spent" in printed and TIER_POLICY in printed
    report = json.loads((out / "report.json").read_text())
    assert list(report["policies"]) == ["federator", TIER_POLICY, "none"]
    spend = report["spend"]
    assert list(spend["policies"]) == ["federator", TIER_POLICY, "none"]
    assert spend["tiers"] == [{"name": "on-prem", "spillAfterSeconds": 1800.0, "clusters": ["big"]},
                              {"name": "cloud", "spillAfterSeconds": 300.0, "clusters": ["rented"]}]
    assert spend["clusters"]["rented"] == {"location": "cloud", "gpus": 24, "pricePerGpuHour": {"A100": 3.0},
                                           "tier": "cloud"}
    for figures in spend["policies"].values():
        assert figures["moneySpent"] == pytest.approx(3 * figures["cloudGpuHours"], abs=0.01)
        assert figures["jobs"] == 60
    comparison = spend["comparison"]
    assert comparison["of"] == TIER_POLICY and comparison["to"] == "federator"
    on, off = spend["policies"][TIER_POLICY], spend["policies"]["federator"]
    assert comparison["difference"]["moneySpent"] == pytest.approx(on["moneySpent"] - off["moneySpent"], abs=1e-6)
    md = (out / "report.md").read_text()
    assert "## Money, tiers and queueing delay" in md and f"| {TIER_POLICY} | 60 |" in md


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tiers"], "has no tiers"),
        (["--policies", f"federator,{TIER_POLICY}"], "by --tiers"),
    ],
)
def test_cli_tiers_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    trace = synthetic_trace(tmp_path / "trace", jobs_per_cluster=3)
    clusters = tmp_path / "c.yaml"
    clusters.write_text(CONTENDED.split("tiers:")[0])
    out = tmp_path / "out"
    code = main(["bench", "replay", "--trace", str(trace), "--clusters", str(clusters), *args, "--workers", "1",
                 "--no-progress", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()
