"""The clusters file of a replay: the member clusters the trace is replayed on.

YAML, documented in the README ("federator bench replay"):

    description: ten clusters sized from the trace's peak demand
    clusters:
      - name: itp-04                 # DNS label, unique
        traceClusters: [cluster04]   # trace files whose jobs are submitted here (their home)
        location: on-prem            # on-prem | cloud
        fabric: rdma                 # rdma | ethernet
        bandwidthGbps: 100           # how fast a dataset missing here is copied in
        costPerGpuHour: 2.1          # optional, default 0
        cost:                        # optional, MemberCluster spec.cost's shape (no spot): overrides costPerGpuHour
          perGpuHour: 2.1            #   when set
          perModel: {H100: 4.5}      #   price by GPU model, over perGpuHour
        labels: {location: on-prem}  # optional, what tiers' clusterSelectors match (MemberCluster metadata.labels)
        nodePools:                   # at least one
          - gpuModel: A100
            nodes: 64
            gpusPerNode: 8
            cpu: "96"                # optional, default 96 cores
            memory: 1000Gi           # optional, default 1000Gi
        datasets:                    # cached here: name -> size (a quantity: 150Gi, 1.2Ti)
          imagenet-22k: 1400Gi
    tiers:                           # optional, a Queue's spec.tiers: spill-over order (the federator-tiers policy)
      - name: on-prem
        clusterSelector: {matchLabels: {location: on-prem}}
        spillAfterSeconds: 1800      # default 300
      - name: cloud
        clusterSelector: {matchLabels: {location: cloud}}

Every trace cluster must be the home of exactly one member cluster, so that
each job has a home (the `none` policy keeps it there; the attribute rule
draws its dataset mostly from there). Tiers are checked as a Queue's
(apis.queue: QueueTier, `tier_errors`) and each must select at least one
cluster of the file. `load_clusters` checks all of it
and raises `ClustersFileError` with the offending field; it never fixes
a file up. Pure apart from reading the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from federator.apis.common import LabelMap
from federator.apis.membercluster import ClusterCost
from federator.apis.quantity import QuantityError, parse_bytes, parse_millicores
from federator.apis.queue import MAX_TIERS, QueueTier, tier_errors
from federator.placement.gang import ClusterTier, LabelSelector

__all__ = ["ClusterSpec", "ClustersFileError", "Federation", "PoolSpec", "load_clusters", "parse_clusters"]

# A clusters file is a few kilobytes; anything this large is a mistake.
MAX_FILE_BYTES = 1 << 20
MAX_CLUSTERS = 256
MAX_NODES = 200_000
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_DATASET = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
_MODEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


class ClustersFileError(ValueError):
    """A clusters file that cannot be used: the message names the file and the field."""


class _Pool(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    gpu_model: Annotated[str, Field(alias="gpuModel", pattern=_MODEL.pattern)]
    nodes: Annotated[int, Field(ge=1, le=MAX_NODES, strict=True)]
    gpus_per_node: Annotated[int, Field(alias="gpusPerNode", ge=1, le=64, strict=True)]
    cpu: str | int = 96
    memory: str | int = "1000Gi"


class _Cluster(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: Annotated[str, Field(pattern=_NAME.pattern)]
    trace_clusters: Annotated[list[Annotated[str, Field(min_length=1, max_length=253)]],
                              Field(alias="traceClusters", min_length=1)]
    location: Literal["on-prem", "cloud"]
    fabric: Literal["rdma", "ethernet"]
    bandwidth_gbps: Annotated[float, Field(alias="bandwidthGbps", gt=0, le=100_000, allow_inf_nan=False)]
    cost_per_gpu_hour: Annotated[float, Field(alias="costPerGpuHour", ge=0, le=10_000, allow_inf_nan=False)] = 0.0
    cost: ClusterCost | None = None
    labels: LabelMap | None = None
    node_pools: Annotated[list[_Pool], Field(alias="nodePools", min_length=1, max_length=16)]
    datasets: dict[str, str | int] = Field(default_factory=dict)

    @field_validator("datasets")
    @classmethod
    def _dataset_names(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        for name in value:
            if not _DATASET.match(name):
                raise ValueError(f"dataset name {name!r} must be 1-253 letters, digits, '.', '_' or '-'")
        return value


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    clusters: Annotated[list[_Cluster], Field(min_length=1, max_length=MAX_CLUSTERS)]
    tiers: Annotated[list[QueueTier], Field(min_length=1, max_length=MAX_TIERS)] | None = None


@dataclass(frozen=True, slots=True)
class PoolSpec:
    gpu_model: str
    nodes: int
    gpus_per_node: int
    cpu_milli: int
    memory: int


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    trace_clusters: tuple[str, ...]
    location: str
    fabric: str
    bandwidth_gbps: float
    cost_per_gpu_hour: float
    pools: tuple[PoolSpec, ...]
    # dataset name -> size in bytes
    datasets: Mapping[str, int]
    # what tiers' selectors match; GPU-hour price by model (over cost_per_gpu_hour)
    labels: Mapping[str, str] = field(default_factory=dict)
    cost_per_model: Mapping[str, float] = field(default_factory=dict)

    def price(self, gpu_model: str) -> float:
        """What one GPU-hour of `gpu_model` costs here (as placement's ClusterInfo.price)."""
        return float(self.cost_per_model.get(gpu_model, self.cost_per_gpu_hour))

    @property
    def gpus(self) -> int:
        return sum(p.nodes * p.gpus_per_node for p in self.pools)

    @property
    def gpu_models(self) -> tuple[str, ...]:
        return tuple(sorted({p.gpu_model for p in self.pools}))

    def largest_pool(self, model: str | None = None) -> int:
        """GPUs of the largest pool of `model` (any model if None)."""
        return max((p.nodes * p.gpus_per_node for p in self.pools if model in (None, p.gpu_model)), default=0)


@dataclass(frozen=True, slots=True)
class Federation:
    """The clusters of one file, in file order, and where each trace cluster's jobs live."""

    path: str
    description: str
    clusters: tuple[ClusterSpec, ...]
    home_of: Mapping[str, str]
    # the file's tiers (a Queue's spec.tiers), in order; () when it has none
    tiers: tuple[ClusterTier, ...] = ()

    def tier_of(self, name: str) -> str | None:
        """The name of the first tier whose selector matches cluster `name`'s labels; None: in no tier."""
        labels = self.cluster(name).labels
        return next((tier.name for tier in self.tiers if tier.selector.matches(labels)), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.clusters)

    def cluster(self, name: str) -> ClusterSpec:
        for spec in self.clusters:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def dataset_sizes(self) -> dict[str, int]:
        """Every dataset any cluster caches, with the largest size declared for it."""
        sizes: dict[str, int] = {}
        for spec in self.clusters:
            for name, size in spec.datasets.items():
                sizes[name] = max(size, sizes.get(name, 0))
        return dict(sorted(sizes.items()))

    def check_trace(self, trace_clusters: Iterable[str]) -> None:
        """Every cluster of the trace must have a home here (and every home a trace cluster)."""
        present = set(trace_clusters)
        missing = sorted(present - set(self.home_of))
        if missing:
            raise ClustersFileError(
                f"clusters file {self.path}: trace cluster(s) {', '.join(missing)} are the home of no cluster "
                "(list each in one cluster's traceClusters)"
            )
        unused = sorted(set(self.home_of) - present)
        if unused:
            raise ClustersFileError(
                f"clusters file {self.path}: traceClusters {', '.join(unused)} are not in the trace"
            )


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def parse_clusters(text: str, *, path: str) -> Federation:
    """Parse and check a clusters file's text; `path` names it in errors."""
    if len(text.encode("utf-8", "replace")) > MAX_FILE_BYTES:
        raise ClustersFileError(f"clusters file {path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ClustersFileError(f"clusters file {path}: not valid YAML{at}: {problem}") from None
    if not isinstance(raw, dict):
        raise ClustersFileError(f"clusters file {path}: must be a mapping with a 'clusters' list")
    try:
        parsed = _File.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        raise ClustersFileError(f"clusters file {path}: {_where(tuple(first['loc']))}: {first['msg']}") from None
    clusters: list[ClusterSpec] = []
    home_of: dict[str, str] = {}
    total_nodes = 0
    for i, c in enumerate(parsed.clusters):
        where = f"clusters file {path}: clusters[{i}]"
        if any(existing.name == c.name for existing in clusters):
            raise ClustersFileError(f"{where}.name: {c.name!r} appears twice")
        for trace_cluster in c.trace_clusters:
            if trace_cluster in home_of:
                raise ClustersFileError(
                    f"{where}.traceClusters: {trace_cluster!r} is already the home of {home_of[trace_cluster]!r}"
                )
            home_of[trace_cluster] = c.name
        pools: list[PoolSpec] = []
        for j, p in enumerate(c.node_pools):
            try:
                cpu = parse_millicores(p.cpu)
                memory = parse_bytes(p.memory)
            except QuantityError as e:
                raise ClustersFileError(f"{where}.nodePools[{j}]: {e}") from None
            if cpu <= 0 or memory <= 0:
                raise ClustersFileError(f"{where}.nodePools[{j}]: cpu and memory must be positive")
            pools.append(PoolSpec(p.gpu_model, p.nodes, p.gpus_per_node, cpu, memory))
            total_nodes += p.nodes
        if total_nodes > MAX_NODES:
            raise ClustersFileError(f"clusters file {path}: more than {MAX_NODES} nodes in all")
        cost = c.cost
        if cost is not None and (cost.spot or cost.interruption_rate_per_hour):
            field_name = "spot" if cost.spot else "interruptionRatePerHour"
            raise ClustersFileError(f"{where}.cost.{field_name}: spot capacity is not replayed (leave it out)")
        per_gpu_hour = c.cost_per_gpu_hour
        if cost is not None and "per_gpu_hour" in cost.model_fields_set:
            per_gpu_hour = cost.per_gpu_hour  # as the hub: cost.perGpuHour, when set, over costPerGpuHour
        datasets: dict[str, int] = {}
        for name, size in c.datasets.items():
            try:
                datasets[name] = parse_bytes(size)
            except QuantityError as e:
                raise ClustersFileError(f"{where}.datasets.{name}: {e}") from None
        clusters.append(
            ClusterSpec(
                name=c.name,
                trace_clusters=tuple(c.trace_clusters),
                location=c.location,
                fabric=c.fabric,
                bandwidth_gbps=float(c.bandwidth_gbps),
                cost_per_gpu_hour=float(per_gpu_hour),
                pools=tuple(pools),
                datasets=datasets,
                labels=dict(c.labels or {}),
                cost_per_model=dict((cost.per_model or {}) if cost is not None else {}),
            )
        )
    tiers = _tiers(raw.get("tiers"), parsed.tiers or [], clusters, path=path)
    return Federation(path=path, description=parsed.description, clusters=tuple(clusters), home_of=home_of,
                      tiers=tiers)


def _tiers(
    raw: object, parsed: Sequence[QueueTier], clusters: Sequence[ClusterSpec], *, path: str
) -> tuple[ClusterTier, ...]:
    """The file's tiers as placement's, checked as a Queue's spec.tiers are, each selecting some cluster here."""
    errors = tier_errors(raw, path="tiers")
    if errors:
        where, message = errors[0]
        raise ClustersFileError(f"clusters file {path}: {where}: {message}")
    tiers: list[ClusterTier] = []
    for index, tier in enumerate(parsed):
        selector = LabelSelector.from_wire(tier.cluster_selector.model_dump(by_alias=True, exclude_none=True))
        if not any(selector.matches(c.labels) for c in clusters):
            raise ClustersFileError(
                f"clusters file {path}: tiers[{index}].clusterSelector: selects none of the clusters (a tier "
                "matches clusters by their labels)"
            )
        tiers.append(ClusterTier(name=tier.name, selector=selector, spill_after_seconds=float(tier.spill_after_seconds)))
    return tuple(tiers)


def load_clusters(path: Path) -> Federation:
    """Read and check a clusters file."""
    if not path.is_file():
        raise ClustersFileError(f"clusters file {path} does not exist (or is not a file)")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ClustersFileError(f"clusters file {path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ClustersFileError(f"clusters file {path}: not UTF-8 text ({e.reason})") from None
    return parse_clusters(text, path=str(path))
