"""Builders for replay tests: tiny clusters files, synthetic ITP-style traces, hand-made jobs."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path

from federator.replay.attributes import ReplayJob
from federator.replay.clusters import Federation, parse_clusters
from federator.replay.engine import Engine, Policy, PolicyResult

GIB = 1 << 30

TINY_CLUSTERS = textwrap.dedent(
    """\
    description: three small clusters for tests
    clusters:
      - name: alpha
        traceClusters: [cluster01]
        location: on-prem
        fabric: rdma
        bandwidthGbps: 10
        nodePools:
          - {gpuModel: A100, nodes: 3, gpusPerNode: 8}
        datasets: {imagenet: 100Gi}
      - name: beta
        traceClusters: [cluster02]
        location: on-prem
        fabric: ethernet
        bandwidthGbps: 10
        nodePools:
          - {gpuModel: V100, nodes: 2, gpusPerNode: 8}
          - {gpuModel: A100, nodes: 1, gpusPerNode: 8}
        datasets: {coco: 20Gi}
      - name: gamma
        traceClusters: [cluster03]
        location: cloud
        fabric: ethernet
        bandwidthGbps: 20
        costPerGpuHour: 3
        nodePools:
          - {gpuModel: H100, nodes: 2, gpusPerNode: 8}
        datasets: {imagenet: 100Gi, c4: 200Gi}
    """
)


def federation(text: str = TINY_CLUSTERS) -> Federation:
    return parse_clusters(text, path="test.yaml")


def cluster(name: str, *, fabric: str, pools: Sequence[tuple[str, int]], home: str,
            datasets: str = "{}", location: str = "on-prem") -> str:
    """One cluster entry of a clusters file (pools: (model, nodes) of 8 GPUs)."""
    pool_lines = "".join(f"      - {{gpuModel: {m}, nodes: {n}, gpusPerNode: 8}}\n" for m, n in pools)
    return (
        f"  - name: {name}\n    traceClusters: [{home}]\n    location: {location}\n    fabric: {fabric}\n"
        f"    bandwidthGbps: 10\n    nodePools:\n{pool_lines}    datasets: {datasets}\n"
    )


def clusters_file(*entries: str) -> str:
    return "clusters:\n" + "".join(entries)


def write_trace(directory: Path, rows: dict[str, Iterable[tuple[str, float, float, int]]]) -> Path:
    """An ITP-style trace: one CSV per cluster, rows (job_id, submission_time, duration, num_gpu)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, jobs in rows.items():
        lines = ["job_id,submission_time,duration,num_gpu"]
        lines += [f"{j},{s:g},{d:g},{g}" for j, s, d, g in jobs]
        (directory / f"{name}.csv").write_text("\n".join(lines) + "\n")
    return directory


def synthetic_trace(directory: Path, *, jobs_per_cluster: int = 60, clusters: Sequence[str] = ("cluster01",
                    "cluster02", "cluster03")) -> Path:
    """A busy little trace: mostly 1-GPU jobs, some 8- and 16-GPU ones, arriving every 40 s per cluster."""
    rows: dict[str, list[tuple[str, float, float, int]]] = {}
    sizes = (1, 1, 1, 2, 1, 8, 1, 4, 16, 1, 1, 8)
    for c, name in enumerate(clusters):
        rows[name] = [
            (f"job-{c}-{i}", 100 + i * 40 + c * 7, 600 + (i * 97) % 3000, sizes[(i + c) % len(sizes)])
            for i in range(jobs_per_cluster)
        ]
    return write_trace(directory, rows)


def job(
    uid: str,
    *,
    index: int,
    home: str,
    submitted: float = 0.0,
    duration: float = 1000.0,
    pods: int = 1,
    gpus_per_pod: int = 8,
    network: str = "any",
    gpu_model: str | None = None,
    dataset: str | None = None,
    dataset_bytes: int = 0,
    team: str = "t",
    trace_cluster: str = "cluster01",
    priority: int = 0,
    min_pods: int = 0,
) -> ReplayJob:
    return ReplayJob(
        uid=uid, index=index, trace_cluster=trace_cluster, home=home, team=team, submitted=submitted,
        duration=duration, gpus=pods * gpus_per_pod, pods=pods, gpus_per_pod=gpus_per_pod,
        cpu_milli_per_pod=gpus_per_pod * 8000, memory_per_pod=gpus_per_pod * 64 * GIB, network=network,
        gpu_model=gpu_model, dataset=dataset, dataset_bytes=dataset_bytes, priority=priority, min_pods=min_pods,
    )


def replay(jobs: Sequence[ReplayJob], fed: Federation, policy: Policy, *, seed: int = 1) -> tuple[Engine, PolicyResult]:
    engine = Engine(jobs=jobs, federation=fed, policy=policy, seed=seed)
    return engine, engine.run()
