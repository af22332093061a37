"""Simulated-cluster profiles: what one member cluster looks like.

A profile (YAML under clusterconfigs/sim/, see clusterconfigs/README.md)
declares the cluster's name, node pools, network fabric, gang scheduler(s),
kubelet timings, optional background load, location, cost and cached
datasets. `load_profiles` validates files (errors name the file and the
field), and `initial_nodes` turns a profile into the Node objects the
simulator starts with (capacity/allocatable as quantity strings, a Ready
condition, GPU feature discovery labels, hostname label, taints).

This module only reads files and builds dicts. It must never talk to a
store, a socket or the hub.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from federator.apis.common import dns1123_label_errors, dns1123_subdomain_errors, label_key_errors, label_value_errors
from federator.apis.quantity import QuantityError
from federator.apis.timestamps import format_time
from federator.sim.fit import CPU, GPU, MEMORY, PODS, RDMA_HCA, format_units, resource_units

API_VERSION = "sim.federator.dev/v1alpha1"
KIND = "ClusterProfile"

#: Node label carrying the bytes of a dataset cached on the node's local disks.
DATASET_LABEL_PREFIX = "federator.dev/dataset."
#: Label every simulated node carries with its pool name.
POOL_LABEL = "federator.dev/node-pool"

#: Real schedulerName defaults of each gang scheduler's standard install.
DEFAULT_SCHEDULER_NAMES = {
    "volcano": "volcano",
    "coscheduling": "scheduler-plugins-scheduler",
    "kube-batch": "kube-batch",
    # Kubernetes' own gang scheduling is kube-scheduler itself (GenericWorkload + GangScheduling gates)
    "native": "default-scheduler",
    "kai": "kai-scheduler",
    "default": "default-scheduler",
}
#: Scheduler types that schedule pods without a group the default way.
PLAIN_POD_SCHEDULERS = ("default", "native")
#: The queues a fresh KAI install creates (KAI Scheduler docs/quickstart/default-queues.yaml).
KAI_DEFAULT_QUEUES = ("default-parent-queue", "default-queue")

#: Largest profile file we read (a profile is a few KiB; refuse surprises).
MAX_PROFILE_BYTES = 1_000_000
MAX_NODES_PER_CLUSTER = 20_000



class ProfileError(ValueError):
    """A profile file that cannot be read or does not validate. The message
    names the file and the field."""


def _check_dns_label(value: str, what: str) -> str:
    if dns1123_label_errors(value):
        raise ValueError(
            f"{what} {value!r} must be a DNS-1123 label: lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters"
        )
    return value


def check_label_key(key: str) -> str:
    """`key` if it is a valid label key, else ValueError in kube's words."""
    problems = label_key_errors(key)
    if problems:
        raise ValueError(f"label key {key!r}: {'; '.join(problems)}")
    return key


def check_label_value(key: str, value: str) -> str:
    """`value` if it is a valid label value, else ValueError in kube's words."""
    problems = label_value_errors(value)
    if problems:
        raise ValueError(f"label {key!r}: value {value!r}: {'; '.join(problems)}")
    return value


def _check_quantity(resource: str, value: str | int | float) -> str | int | float:
    try:
        resource_units(resource, value)
    except QuantityError as e:
        raise ValueError(str(e)) from None
    return value


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True, str_strip_whitespace=True
    )


Quantity = str | int | float


class TaintSpec(_Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        return check_label_key(v)


class ReservedResources(_Model):
    """What the kubelet keeps for the system: allocatable = capacity - reserved."""

    cpu: Quantity = "0"
    memory: Quantity = "0"

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, v: Quantity) -> Quantity:
        return _check_quantity(CPU, v)

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: Quantity) -> Quantity:
        return _check_quantity(MEMORY, v)


class NodePool(_Model):
    name: str
    count: Annotated[int, Field(ge=0, le=MAX_NODES_PER_CLUSTER)]
    cpu: Quantity
    memory: Quantity
    max_pods: Annotated[int, Field(ge=1, le=10_000)] = 110
    gpus: Annotated[int, Field(ge=0, le=64)] = 0
    #: `nvidia.com/gpu.product` as GPU feature discovery writes it.
    gpu_product: str | None = None
    gpu_memory_mib: Annotated[int | None, Field(ge=1, alias="gpuMemoryMiB")] = None
    #: `rdma/hca` devices advertised by the RDMA shared device plugin.
    rdma_hca: Annotated[int, Field(ge=0, le=100_000)] = 0
    instance_type: str | None = None
    zone: str | None = None
    reserved: ReservedResources = ReservedResources()
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_dns_label(v, "pool name")

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, v: Quantity) -> Quantity:
        return _check_quantity(CPU, v)

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: Quantity) -> Quantity:
        return _check_quantity(MEMORY, v)

    @field_validator("gpu_product")
    @classmethod
    def _product(cls, v: str | None) -> str | None:
        if v is not None:
            check_label_value("nvidia.com/gpu.product", v)
            if not v:
                raise ValueError("gpuProduct must not be empty")
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            check_label_key(key)
            check_label_value(key, value)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> NodePool:
        if self.gpus and not self.gpu_product:
            raise ValueError(f"pool {self.name!r} has gpus: {self.gpus} but no gpuProduct")
        if not self.gpus and (self.gpu_product or self.gpu_memory_mib):
            raise ValueError(f"pool {self.name!r} names a gpuProduct/gpuMemoryMiB but has gpus: 0")
        if resource_units(CPU, self.reserved.cpu) > resource_units(CPU, self.cpu):
            raise ValueError(f"pool {self.name!r}: reserved.cpu exceeds cpu")
        if resource_units(MEMORY, self.reserved.memory) > resource_units(MEMORY, self.memory):
            raise ValueError(f"pool {self.name!r}: reserved.memory exceeds memory")
        if resource_units(CPU, self.cpu) == 0:
            raise ValueError(f"pool {self.name!r}: cpu must be > 0")
        return self


class Network(_Model):
    fabric: Literal["infiniband", "roce", "ethernet"]
    bandwidth_gbps: Annotated[float, Field(gt=0, le=100_000)]

    @property
    def rdma(self) -> bool:
        return self.fabric != "ethernet"


class SchedulerSpec(_Model):
    """One scheduler the cluster runs; pods pick it with spec.schedulerName. `native` is the default
    scheduler with Kubernetes' gang scheduling on: it also schedules plain pods."""

    type: Literal["volcano", "coscheduling", "kube-batch", "native", "kai", "default"]
    scheduler_name: str | None = None
    #: kai only: the queues that exist (a PodGroup naming another is never scheduled); default KAI's own
    queues: list[str] | None = None

    @property
    def name(self) -> str:
        return self.scheduler_name or DEFAULT_SCHEDULER_NAMES[self.type]

    @property
    def existing_queues(self) -> frozenset[str]:
        """kai: the queues PodGroups may name."""
        return frozenset(self.queues if self.queues is not None else KAI_DEFAULT_QUEUES)

    @field_validator("queues")
    @classmethod
    def _queue_names(cls, v: list[str] | None) -> list[str] | None:
        for name in v or ():
            _check_dns_label(name, "queue name")
        return v

    @model_validator(mode="after")
    def _queues_only_for_kai(self) -> SchedulerSpec:
        if self.queues is not None and self.type != "kai":
            raise ValueError(f"queues: only a kai scheduler has queues, not {self.type}")
        return self

    @field_validator("scheduler_name")
    @classmethod
    def _sched_name(cls, v: str | None) -> str | None:
        if v is not None and dns1123_subdomain_errors(v):
            raise ValueError(f"schedulerName {v!r} must be a DNS-1123 subdomain")
        return v


class KubeletTimings(_Model):
    #: bound -> Running
    start_delay_seconds: Annotated[float, Field(ge=0, le=3600)] = 1.0
    #: Running -> Succeeded when a pod has no duration annotation; None runs until deleted.
    default_run_seconds: Annotated[float, Field(gt=0)] | None = None
    #: deletionTimestamp set -> object removed (capped by the pod's grace period).
    termination_seconds: Annotated[float, Field(ge=0, le=600)] = 0.2
    #: a container that failed under restartPolicy OnFailure/Always waits this long (CrashLoopBackOff) before
    #: its first restart, doubling per restart up to 30 times this (kube's kubelet: 10 s up to 5 min).
    crash_loop_backoff_seconds: Annotated[float, Field(ge=0, le=300)] = 10.0


class ProcessRuntimeSpec(_Model):
    """The kubelet's opt-in process runtime (federator/sim/processes.py): the pods it starts run their
    containers' commands as local processes, with their own loopback address, cluster DNS names in a
    private hosts file, volumes and logs. Present (even empty, `processRuntime: {}`) turns it on."""

    #: where pod directories, volumes (emptyDir, hostPath, persistentVolumeClaim) and container logs go;
    #: left out, a fresh temporary directory that is removed when the cluster stops
    root: str | None = None
    #: when the kubelet stops, its processes get SIGTERM and, after this many seconds, SIGKILL
    stop_grace_seconds: Annotated[float, Field(ge=0, le=60)] = 1.0

    @field_validator("root")
    @classmethod
    def _root(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or "\x00" in v or ".." in v.split("/")):
            raise ValueError(f"processRuntime.root {v!r} must be an absolute path without '..'")
        return v


class PodShape(_Model):
    cpu: Quantity = "1"
    memory: Quantity = "1Gi"
    gpus: Annotated[int, Field(ge=0, le=64)] = 0
    rdma_hca: Annotated[int, Field(ge=0)] = 0
    #: relative frequency among the shapes
    weight: Annotated[float, Field(gt=0)] = 1.0
    #: pods per gang; 1 = a plain pod
    gang_size: Annotated[int, Field(ge=1, le=1000)] = 1

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, v: Quantity) -> Quantity:
        return _check_quantity(CPU, v)

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: Quantity) -> Quantity:
        return _check_quantity(MEMORY, v)


class BackgroundLoad(_Model):
    """Local pods that are not the hub's: they come and go and use capacity."""

    #: mean arrivals (pods or gangs) per minute, Poisson
    arrivals_per_minute: Annotated[float, Field(gt=0, le=60_000)]
    lifetime_seconds_min: Annotated[float, Field(gt=0)] = 30.0
    lifetime_seconds_max: Annotated[float, Field(gt=0)] = 300.0
    #: cap on concurrently existing load pods
    max_pods: Annotated[int, Field(ge=1, le=100_000)] = 200
    namespace: str = "sim-background"
    #: "default" uses the default scheduler; "gang" uses the cluster's first gang scheduler
    scheduler: Literal["default", "gang"] = "default"
    shapes: list[PodShape] = Field(default_factory=lambda: [PodShape()], min_length=1)

    @field_validator("namespace")
    @classmethod
    def _ns(cls, v: str) -> str:
        return _check_dns_label(v, "namespace")

    @model_validator(mode="after")
    def _lifetimes(self) -> BackgroundLoad:
        if self.lifetime_seconds_max < self.lifetime_seconds_min:
            raise ValueError("lifetimeSecondsMax must be >= lifetimeSecondsMin")
        return self


class Location(_Model):
    type: Literal["on-prem", "cloud"]
    provider: str | None = None
    region: str
    site: str | None = None

    @model_validator(mode="after")
    def _provider(self) -> Location:
        if self.type == "cloud" and not self.provider:
            raise ValueError("a cloud location needs a provider")
        return self


class Dataset(_Model):
    name: str
    size: Quantity
    #: pools whose nodes cache it; empty means every pool
    pools: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        _check_dns_label(v, "dataset name")
        check_label_key(DATASET_LABEL_PREFIX + v)
        return v

    @field_validator("size")
    @classmethod
    def _size(cls, v: Quantity) -> Quantity:
        _check_quantity(MEMORY, v)
        if resource_units(MEMORY, v) <= 0:
            raise ValueError("dataset size must be > 0")
        return v

    @property
    def size_bytes(self) -> int:
        return resource_units(MEMORY, self.size)


class ClusterProfile(_Model):
    api_version: Literal["sim.federator.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["ClusterProfile"]
    name: str
    description: str = ""
    #: cluster-level labels offered to the hub's clusterSelector (e.g. tier: research)
    labels: dict[str, str] = Field(default_factory=dict)
    location: Location
    network: Network
    schedulers: list[SchedulerSpec] = Field(min_length=1)
    kubelet: KubeletTimings = KubeletTimings()
    kubernetes_version: str = "v1.30.2"
    cost_per_gpu_hour: Annotated[float, Field(ge=0)] = 0.0
    datasets: list[Dataset] = Field(default_factory=list)
    node_pools: list[NodePool] = Field(min_length=1)
    background_load: BackgroundLoad | None = None
    #: run pods as local processes (off: the kubelet only simulates containers)
    process_runtime: ProcessRuntimeSpec | None = None
    #: job operators the cluster runs and whose kinds it serves (federator/sim/operators: batch, jobset,
    #: kubeflow); none by default
    operators: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_dns_label(v, "cluster name")

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            check_label_key(key)
            check_label_value(key, value)
        return v

    @field_validator("operators")
    @classmethod
    def _operators(cls, v: list[str]) -> list[str]:
        from federator.sim.operators import OPERATOR_NAMES

        unknown = [name for name in v if name not in OPERATOR_NAMES]
        if unknown:
            raise ValueError(f"unknown operators {unknown}; known: {list(OPERATOR_NAMES)}")
        return list(dict.fromkeys(v))

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not re.fullmatch(r"v1\.[0-9]{1,3}\.[0-9]{1,3}", v):
            raise ValueError(f"kubernetesVersion {v!r} must look like v1.30.2")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> ClusterProfile:
        pools = [p.name for p in self.node_pools]
        dup = sorted({p for p in pools if pools.count(p) > 1})
        if dup:
            raise ValueError(f"duplicate node pool names: {dup}")
        names = [s.name for s in self.schedulers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            also = " (native is the default scheduler with gang scheduling on: list it instead of default)" \
                if {s.type for s in self.schedulers} >= {"native", "default"} else ""
            raise ValueError(f"two schedulers share the schedulerName {dup}{also}")
        ds = [d.name for d in self.datasets]
        dup = sorted({d for d in ds if ds.count(d) > 1})
        if dup:
            raise ValueError(f"duplicate dataset names: {dup}")
        for d in self.datasets:
            unknown = sorted(set(d.pools) - set(pools))
            if unknown:
                raise ValueError(f"dataset {d.name!r} names unknown pools {unknown}")
        total = sum(p.count for p in self.node_pools)
        if total > MAX_NODES_PER_CLUSTER:
            raise ValueError(f"{total} nodes in all pools; at most {MAX_NODES_PER_CLUSTER}")
        if self.background_load is not None and self.background_load.scheduler == "gang" and not self.gang_schedulers:
            raise ValueError("backgroundLoad.scheduler is 'gang' but the cluster runs no gang scheduler")
        if self.background_load is not None and self.background_load.scheduler == "default" and not any(
                s.type in PLAIN_POD_SCHEDULERS for s in self.schedulers):
            raise ValueError("backgroundLoad.scheduler is 'default' but the cluster runs no default scheduler")
        return self

    # -- conveniences for the simulator's controllers

    @property
    def gang_schedulers(self) -> list[SchedulerSpec]:
        return [s for s in self.schedulers if s.type != "default"]

    @property
    def scheduler_names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.schedulers)

    @property
    def node_count(self) -> int:
        return sum(p.count for p in self.node_pools)

    @property
    def gpu_count(self) -> int:
        return sum(p.count * p.gpus for p in self.node_pools)


# ---------------------------------------------------------------- loading


def _format_error(path: Path, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(part) for part in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{path}: {loc}: {msg}")
    return "\n".join(lines)


def parse_profile(data: Any, *, source: str | Path = "<profile>") -> ClusterProfile:
    """Validate one decoded YAML document. ProfileError names source and field."""
    path = Path(source)
    if not isinstance(data, Mapping):
        raise ProfileError(f"{path}: a profile must be a YAML mapping, not {type(data).__name__}")
    try:
        return ClusterProfile.model_validate(data)
    except ValidationError as e:
        raise ProfileError(_format_error(path, e)) from None


def load_profile_file(path: str | Path) -> ClusterProfile:
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_PROFILE_BYTES:
            raise ProfileError(f"{p}: {size} bytes; a profile may be at most {MAX_PROFILE_BYTES}")
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ProfileError(f"{p}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{p}: not UTF-8 text") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ProfileError(f"{p}: invalid YAML{where}: {problem}") from None
    if len(docs) != 1:
        raise ProfileError(f"{p}: expected exactly one YAML document, found {len(docs)}")
    return parse_profile(docs[0], source=p)


def load_profiles(path: str | Path) -> list[ClusterProfile]:
    """Profiles from one file, or from every *.yaml / *.yml file of a
    directory (sorted by name). Cluster names must be unique."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file())
        if not files:
            raise ProfileError(f"{p}: no *.yaml profiles in this directory")
    elif p.exists():
        files = [p]
    else:
        raise ProfileError(f"{p}: no such file or directory")
    profiles = [load_profile_file(f) for f in files]
    seen: dict[str, Path] = {}
    for f, prof in zip(files, profiles, strict=True):
        if prof.name in seen:
            raise ProfileError(f"{f}: name: cluster {prof.name!r} is also defined in {seen[prof.name]}")
        seen[prof.name] = f
    return profiles


def load_profile_paths(paths: Sequence[str | Path]) -> list[ClusterProfile]:
    """Every profile of `paths` (each a file or a directory, as `load_profiles` reads it), in order. Cluster
    names must be unique across all of them (ProfileError names the path and the one that defined it first)."""
    found: list[ClusterProfile] = []
    seen: dict[str, Path] = {}
    for path in map(Path, paths):
        for prof in load_profiles(path):
            if prof.name in seen:
                raise ProfileError(f"{path}: cluster {prof.name!r} is also defined in {seen[prof.name]}")
            seen[prof.name] = path
            found.append(prof)
    return found


# ---------------------------------------------------------------- nodes


def _gpu_family(product: str) -> str:
    for prefix, family in (("H100", "hopper"), ("H200", "hopper"), ("GH200", "hopper"), ("A100", "ampere"),
                           ("A10", "ampere"), ("A30", "ampere"), ("A40", "ampere"), ("L4", "ada-lovelace"),
                           ("L40", "ada-lovelace"), ("V100", "volta"), ("T4", "turing"), ("B200", "blackwell")):
        if product.startswith(prefix):
            return family
    return "unknown"


_COMPUTE_CAPABILITY = {"hopper": (9, 0), "ampere": (8, 0), "ada-lovelace": (8, 9), "volta": (7, 0),
                       "turing": (7, 5), "blackwell": (10, 0), "unknown": (0, 0)}


def node_name(pool: NodePool, index: int) -> str:
    width = max(4, len(str(pool.count - 1)))
    return f"{pool.name}-{index:0{width}d}"


def _timestamp(now: datetime | None) -> str:
    return format_time(now or datetime.now(UTC))


def node_resources(pool: NodePool) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) of one node of `pool`, as quantity strings."""
    cpu = resource_units(CPU, pool.cpu)
    memory = resource_units(MEMORY, pool.memory)
    capacity = {
        CPU: format_units(CPU, cpu),
        MEMORY: format_units(MEMORY, memory),
        PODS: str(pool.max_pods),
        "ephemeral-storage": "1760Gi",
    }
    allocatable = dict(capacity)
    allocatable[CPU] = format_units(CPU, cpu - resource_units(CPU, pool.reserved.cpu))
    allocatable[MEMORY] = format_units(MEMORY, memory - resource_units(MEMORY, pool.reserved.memory))
    allocatable["ephemeral-storage"] = "1600Gi"
    if pool.gpus:
        capacity[GPU] = allocatable[GPU] = str(pool.gpus)
    if pool.rdma_hca:
        capacity[RDMA_HCA] = allocatable[RDMA_HCA] = str(pool.rdma_hca)
    return capacity, allocatable


def pool_labels(profile: ClusterProfile, pool: NodePool) -> dict[str, str]:
    """Labels every node of `pool` carries (without the per-node hostname)."""
    labels: dict[str, str] = {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        POOL_LABEL: pool.name,
        "topology.kubernetes.io/region": profile.location.region,
    }
    if pool.zone:
        labels["topology.kubernetes.io/zone"] = pool.zone
    if pool.instance_type:
        labels["node.kubernetes.io/instance-type"] = pool.instance_type
    if pool.gpus and pool.gpu_product:
        family = _gpu_family(pool.gpu_product)
        major, minor = _COMPUTE_CAPABILITY[family]
        labels.update({
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": pool.gpu_product,
            "nvidia.com/gpu.count": str(pool.gpus),
            "nvidia.com/gpu.family": family,
            "nvidia.com/gpu.compute.major": str(major),
            "nvidia.com/gpu.compute.minor": str(minor),
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/cuda.driver.minor": "54",
            "nvidia.com/cuda.driver.rev": "15",
            "nvidia.com/mig.strategy": "none",
        })
        if pool.gpu_memory_mib:
            labels["nvidia.com/gpu.memory"] = str(pool.gpu_memory_mib)
    if pool.rdma_hca:
        # Node Feature Discovery's labels for RDMA-capable NICs.
        labels["feature.node.kubernetes.io/rdma.capable"] = "true"
        labels["feature.node.kubernetes.io/rdma.available"] = "true"
    for ds in profile.datasets:
        if not ds.pools or pool.name in ds.pools:
            labels[DATASET_LABEL_PREFIX + ds.name] = str(ds.size_bytes)
    labels.update(pool.labels)
    return labels


def initial_nodes(profile: ClusterProfile, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """The Node objects a freshly started simulated cluster has, in name order."""
    stamp = _timestamp(now)
    nodes: list[dict[str, Any]] = []
    address_index = 0
    for pool in profile.node_pools:
        capacity, allocatable = node_resources(pool)
        labels = pool_labels(profile, pool)
        taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints]
        for i in range(pool.count):
            name = node_name(pool, i)
            address_index += 1
            ident = hashlib.sha256(f"{profile.name}/{name}".encode()).hexdigest()
            node_labels = dict(labels)
            node_labels["kubernetes.io/hostname"] = name
            cidr = f"10.{(address_index >> 8) & 255}.{address_index & 255}.0/24"
            nodes.append({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": node_labels, "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                }},
                # as kube-apiserver stores it: podCIDRs defaulted from podCIDR, empty fields left out
                "spec": {**({"taints": [dict(t) for t in taints]} if taints else {}),
                         "podCIDR": cidr, "podCIDRs": [cidr]},
                "status": {
                    "capacity": dict(capacity),
                    "allocatable": dict(allocatable),
                    "conditions": node_conditions(ready=True, now=stamp),
                    "addresses": [
                        {"type": "InternalIP",
                         "address": f"10.{64 + ((address_index >> 16) & 63)}.{(address_index >> 8) & 255}."
                                    f"{address_index & 255}"},
                        {"type": "Hostname", "address": name},
                    ],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                    "nodeInfo": {
                        "machineID": ident[:32],
                        "systemUUID": f"{ident[:8]}-{ident[8:12]}-{ident[12:16]}-{ident[16:20]}-{ident[20:32]}",
                        "bootID": ident[32:64],
                        "kernelVersion": "5.15.0-105-generic",
                        "osImage": "Ubuntu 22.04.4 LTS",
                        "containerRuntimeVersion": "containerd://1.7.13",
                        "kubeletVersion": profile.kubernetes_version,
                        "kubeProxyVersion": profile.kubernetes_version,
                        "operatingSystem": "linux",
                        "architecture": "amd64",
                    },
                    "phase": "Running",
                },
            })
    return nodes


def node_conditions(*, ready: bool | None, now: str, reason: str | None = None,
                    message: str | None = None) -> list[dict[str, Any]]:
    """A node's conditions. ready=None means the kubelet stopped reporting
    (status Unknown, as the node lifecycle controller writes it)."""
    def cond(type_: str, status: str, reason_: str, message_: str) -> dict[str, Any]:
        return {"type": type_, "status": status, "reason": reason_, "message": message_,
                "lastHeartbeatTime": now, "lastTransitionTime": now}

    if ready is None:
        unknown = reason or "NodeStatusUnknown"
        msg = message or "Kubelet stopped posting node status."
        return [cond(t, "Unknown", unknown, msg)
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")]
    return [
        cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        cond("Ready", "True", "KubeletReady", "kubelet is posting ready status") if ready
        else cond("Ready", "False", reason or "KubeletNotReady", message or "container runtime is down"),
    ]


def profile_summary(profile: ClusterProfile) -> dict[str, Any]:
    """A short, credential-free description (for logs and `federator sim`)."""
    return {
        "cluster": profile.name,
        "nodes": profile.node_count,
        "gpus": profile.gpu_count,
        "fabric": profile.network.fabric,
        "schedulers": sorted(profile.scheduler_names),
        "location": f"{profile.location.type}/{profile.location.provider or '-'}/{profile.location.region}",
    }
