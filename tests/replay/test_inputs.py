"""The trace reader, the clusters file and the attribute rule: what they accept, what they refuse."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_builders import TINY_CLUSTERS, federation, write_trace

from federator.replay.attributes import RULE, assign_attributes, describe_rule
from federator.replay.clusters import ClustersFileError, load_clusters, parse_clusters
from federator.replay.trace import TraceError, load_trace

REPO = Path(__file__).resolve().parents[2]


def test_trace_is_sorted_by_submission_with_unique_uids(tmp_path: Path) -> None:
    write_trace(tmp_path, {"cluster02": [("a", 50, 10, 1), ("a", 5, 10, 2)], "cluster01": [("a", 50, 10, 8)]})
    jobs = load_trace(tmp_path)
    assert [(j.cluster, j.submitted) for j in jobs] == [("cluster02", 5), ("cluster01", 50), ("cluster02", 50)]
    assert len({j.uid for j in jobs}) == 3
    assert jobs[0].gpus == 2 and jobs[0].uid == "cluster02-000002"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("job,submission_time,duration,num_gpu\n", "the first line must be the header"),
        ("job_id,submission_time,duration,num_gpu\na,1,2\n", "expected 4 columns"),
        ("job_id,submission_time,duration,num_gpu\na,x,2,1\n", "submission_time 'x' is not a number"),
        ("job_id,submission_time,duration,num_gpu\na,1,-2,1\n", "finite, non-negative"),
        ("job_id,submission_time,duration,num_gpu\na,1,nan,1\n", "finite, non-negative"),
        ("job_id,submission_time,duration,num_gpu\na,1,2,0\n", "num_gpu '0'"),
        ("job_id,submission_time,duration,num_gpu\na,1,2,1.5\n", "num_gpu '1.5'"),
        ("job_id,submission_time,duration,num_gpu\n,1,2,1\n", "job_id is empty"),
    ],
)
def test_malformed_trace_rows_name_file_and_line(tmp_path: Path, body: str, message: str) -> None:
    (tmp_path / "cluster01.csv").write_text(body)
    with pytest.raises(TraceError, match=message) as info:
        load_trace(tmp_path)
    assert "cluster01.csv" in str(info.value)


def test_missing_or_empty_trace_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="does not exist"):
        load_trace(tmp_path / "nope")
    with pytest.raises(TraceError, match="no .csv files"):
        load_trace(tmp_path)
    (tmp_path / "cluster01.csv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TraceError, match="not UTF-8|header"):
        load_trace(tmp_path)


def test_tiny_clusters_file_parses() -> None:
    fed = federation()
    assert fed.names == ("alpha", "beta", "gamma")
    assert fed.home_of == {"cluster01": "alpha", "cluster02": "beta", "cluster03": "gamma"}
    assert fed.cluster("beta").gpus == 24 and fed.cluster("beta").gpu_models == ("A100", "V100")
    assert fed.dataset_sizes == {"c4": 200 << 30, "coco": 20 << 30, "imagenet": 100 << 30}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clusters: [", "not valid YAML at line"),
        ("- a\n- b\n", "must be a mapping"),
        ("clusters: []\n", "clusters: List should have at least 1 item"),
        (TINY_CLUSTERS.replace("nodes: 3", "nodes: -3"), r"clusters\[0\].nodePools\[0\].nodes"),
        (TINY_CLUSTERS.replace("nodes: 3", "nodes: '3'"), r"clusters\[0\].nodePools\[0\].nodes"),
        (TINY_CLUSTERS.replace("fabric: rdma", "fabric: infiniband"), r"clusters\[0\].fabric"),
        (TINY_CLUSTERS.replace("bandwidthGbps: 10\n", "bandwidthGbps: 10\n    colour: red\n", 1), "colour"),
        (TINY_CLUSTERS.replace("name: beta", "name: alpha"), "'alpha' appears twice"),
        (TINY_CLUSTERS.replace("[cluster02]", "[cluster01]"), "already the home of 'alpha'"),
        (TINY_CLUSTERS.replace("imagenet: 100Gi}", "imagenet: 100Qi}", 1), r"datasets.imagenet"),
        (TINY_CLUSTERS.replace("name: gamma", "name: Gamma_1"), r"clusters\[2\].name"),
        (TINY_CLUSTERS.replace("bandwidthGbps: 20", "bandwidthGbps: .nan"), r"clusters\[2\].bandwidthGbps"),
        ("clusters:\n" + "  - " * 2, "not valid YAML|clusters"),
    ],
)
def test_malformed_clusters_files_are_refused_with_the_field(text: str, message: str) -> None:
    with pytest.raises(ClustersFileError, match=message):
        parse_clusters(text, path="bad.yaml")


def test_oversized_and_missing_clusters_files(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 << 20))
    with pytest.raises(ClustersFileError, match="larger than"):
        load_clusters(big)
    with pytest.raises(ClustersFileError, match="does not exist"):
        load_clusters(tmp_path / "missing.yaml")


def test_every_trace_cluster_needs_a_home() -> None:
    fed = federation()
    with pytest.raises(ClustersFileError, match="cluster04 are the home of no cluster"):
        fed.check_trace({"cluster01", "cluster02", "cluster03", "cluster04"})
    with pytest.raises(ClustersFileError, match="cluster03 are not in the trace"):
        fed.check_trace({"cluster01", "cluster02"})


@pytest.mark.parametrize("name", ["default.yaml", "small.yaml", "ethernet.yaml", "ethernet-heavy.yaml"])
def test_shipped_clusters_files_cover_the_itp_trace_and_every_home_runs_its_largest_job(name: str) -> None:
    fed = load_clusters(REPO / "bench" / "replay" / "clusters" / name)
    itp = {f"cluster{i:02d}" for i in range(1, 11)}
    fed.check_trace(itp)
    largest = {"cluster01": 64, "cluster02": 64, "cluster03": 64, "cluster04": 64, "cluster05": 8,
               "cluster06": 64, "cluster07": 16, "cluster08": 32, "cluster09": 1, "cluster10": 16}
    for trace_cluster, home in fed.home_of.items():
        assert fed.cluster(home).largest_pool() >= largest[trace_cluster], (trace_cluster, home)
    models = {m for c in fed.clusters for m in c.gpu_models}
    assert models == {"A100", "H100", "V100"}


def test_attribute_rule_is_seeded_per_job_and_stated(tmp_path: Path) -> None:
    rows = {"cluster01": [(f"j{i}", i * 10, 100, (1, 8, 16, 64)[i % 4]) for i in range(200)],
            "cluster02": [("x", 3, 100, 32)], "cluster03": [("y", 4, 100, 2)]}
    fed = federation(TINY_CLUSTERS.replace("nodes: 3", "nodes: 8"))
    jobs = load_trace(write_trace(tmp_path, rows))
    first = assign_attributes(jobs, fed, seed=7)
    again = assign_attributes(jobs, fed, seed=7)
    other = assign_attributes(jobs, fed, seed=8)
    assert first == again
    assert first != other
    # A job's attributes do not depend on which other jobs are replayed.
    alone = assign_attributes([jobs[5]], fed, seed=7)[0]
    assert (alone.network, alone.gpu_model, alone.dataset, alone.team, alone.pods) == (
        first[5].network, first[5].gpu_model, first[5].dataset, first[5].team, first[5].pods)
    for j in first:
        assert j.pods * j.gpus_per_pod == j.gpus
        assert j.pods == 1 or j.gpus_per_pod in (4, 8)
        assert j.network == "any" or j.pods > 1
        if j.gpu_model is not None:
            assert j.gpu_model in fed.cluster(j.home).gpu_models
        assert (j.dataset is None) == (j.dataset_bytes == 0)
    assert {j.network for j in first if j.pods > 1} == {"rdma", "ethernet", "any"}
    assert any(j.gpu_model for j in first) and any(j.gpu_model is None for j in first)
    text = describe_rule(RULE)
    assert "BLAKE2b" in text and f"{RULE.rdma_share:g}" in text and "bandwidthGbps" in text
