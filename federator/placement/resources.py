"""The four resources placement reasons about: CPU, memory, GPUs and RDMA host channel adapters.

A `Resources` value is an immutable vector of integers (CPU millicores,
memory bytes, `nvidia.com/gpu`, `rdma/hca`). Pods request it, nodes offer
it, reservations hold it. Conversion from the Kubernetes map form
(`{"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4}`) lives here too.

Pure: no I/O. A `Resources` is never negative; arithmetic that would go
below zero raises instead of wrapping, because a negative free count would
silently let placement double-book a node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from math import ceil
from typing import Any

from federator.apis.podtemplate import is_full_form, pod_request_amounts

from federator.apis.quantity import (
    MAX_QUANTITY,
    QuantityError,
    format_bytes,
    format_cpu,
    parse_bytes,
    parse_count,
    parse_millicores,
)

__all__ = ["CPU", "GPU", "MEMORY", "RDMA", "ZERO", "Resources", "template_requests"]

CPU = "cpu"
MEMORY = "memory"
GPU = "nvidia.com/gpu"
RDMA = "rdma/hca"
_KNOWN = (CPU, MEMORY, GPU, RDMA)


@dataclass(frozen=True, slots=True)
class Resources:
    """CPU millicores, memory bytes, GPUs and RDMA HCAs; all non-negative integers."""

    cpu_milli: int = 0
    memory: int = 0
    gpu: int = 0
    rdma: int = 0

    def __post_init__(self) -> None:
        for name in ("cpu_milli", "memory", "gpu", "rdma"):
            value = getattr(self, name)
            if type(value) is not int:
                raise TypeError(f"Resources.{name} must be an int, got {type(value).__name__}")
            if value < 0:
                raise ValueError(f"Resources.{name} must not be negative, got {value}")

    @classmethod
    def from_kube(cls, resources: Mapping[str, str | int], *, strict: bool = True) -> Resources:
        """Parse a Kubernetes resource map.

        `strict=True` (pod requests) rejects resource names placement cannot
        honour, so a job asking for something no cluster offers fails loudly at
        submission rather than being placed and never started. `strict=False`
        (node allocatable) ignores names such as `pods` or `ephemeral-storage`.
        """
        if not isinstance(resources, Mapping):
            raise QuantityError(f"resources must be a mapping, got {type(resources).__name__}")
        unknown = sorted(str(name) for name in resources if name not in _KNOWN)
        if strict and unknown:
            raise QuantityError(
                f"unsupported resource {unknown[0]!r}: placement understands {', '.join(_KNOWN)}"
            )
        return cls(
            cpu_milli=parse_millicores(resources[CPU]) if CPU in resources else 0,
            memory=parse_bytes(resources[MEMORY]) if MEMORY in resources else 0,
            gpu=parse_count(resources[GPU], what=GPU) if GPU in resources else 0,
            rdma=parse_count(resources[RDMA], what=RDMA) if RDMA in resources else 0,
        )

    @classmethod
    def from_amounts(cls, amounts: Mapping[str, Fraction]) -> Resources:
        """The four resources of exact amounts (`apis.podtemplate.pod_request_amounts`), rounded up as kube
        does; other resources are left to the member's scheduler."""
        for name in _KNOWN:
            if amounts.get(name, 0) < 0 or amounts.get(name, 0) > MAX_QUANTITY:
                raise QuantityError(f"{name} {float(amounts[name]):g} is out of range")
        for name in (GPU, RDMA):
            if Fraction(amounts.get(name, 0)).denominator != 1:
                raise QuantityError(f"{name} {float(amounts[name]):g} must be a whole number")
        return cls(cpu_milli=ceil(amounts.get(CPU, 0) * 1000), memory=ceil(amounts.get(MEMORY, 0)),
                   gpu=int(amounts.get(GPU, 0)), rdma=int(amounts.get(RDMA, 0)))

    def to_kube(self) -> dict[str, str]:
        """The Kubernetes map form; zero entries are left out."""
        out: dict[str, str] = {}
        if self.cpu_milli:
            out[CPU] = format_cpu(self.cpu_milli)
        if self.memory:
            out[MEMORY] = format_bytes(self.memory)
        if self.gpu:
            out[GPU] = str(self.gpu)
        if self.rdma:
            out[RDMA] = str(self.rdma)
        return out

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_milli + other.cpu_milli,
            self.memory + other.memory,
            self.gpu + other.gpu,
            self.rdma + other.rdma,
        )

    def __sub__(self, other: Resources) -> Resources:
        """Exact difference; raises ValueError if any component would go negative."""
        return Resources(
            self.cpu_milli - other.cpu_milli,
            self.memory - other.memory,
            self.gpu - other.gpu,
            self.rdma - other.rdma,
        )

    def minus_clamped(self, other: Resources) -> Resources:
        """Difference with each component floored at zero (free = allocatable - allocated)."""
        return Resources(
            max(0, self.cpu_milli - other.cpu_milli),
            max(0, self.memory - other.memory),
            max(0, self.gpu - other.gpu),
            max(0, self.rdma - other.rdma),
        )

    def times(self, count: int) -> Resources:
        return Resources(self.cpu_milli * count, self.memory * count, self.gpu * count, self.rdma * count)

    def fits_in(self, other: Resources) -> bool:
        """True if every component of self is at most the same component of other."""
        return (
            self.cpu_milli <= other.cpu_milli
            and self.memory <= other.memory
            and self.gpu <= other.gpu
            and self.rdma <= other.rdma
        )

    def is_zero(self) -> bool:
        return not (self.cpu_milli or self.memory or self.gpu or self.rdma)

    def describe(self, *, gpu_model: str | None = None) -> str:
        """Human form for messages: "16 cpu, 64Gi memory, 4 A100 GPU, 1 rdma/hca"."""
        parts: list[str] = []
        if self.cpu_milli:
            parts.append(f"{format_cpu(self.cpu_milli)} cpu")
        if self.memory:
            parts.append(f"{format_bytes(self.memory)} memory")
        if self.gpu:
            model = f"{gpu_model} " if gpu_model else ""
            parts.append(f"{self.gpu} {model}GPU{'s' if self.gpu != 1 else ''}")
        if self.rdma:
            parts.append(f"{self.rdma} rdma/hca")
        return ", ".join(parts) if parts else "no resources"


ZERO = Resources()


def template_requests(template: Mapping[str, Any]) -> Resources:
    """What one pod of a role (its `template`, either form, as submitted) requests, as placement counts it.
    The short form: its `resources` (cpu, memory, nvidia.com/gpu, rdma/hca only). The full form: the pod's
    effective request as kube-scheduler computes it (`apis.podtemplate.pod_request_amounts`: containers
    plus sidecars, or the largest init container step, plus overhead); other extended resources (MIG
    slices, AMD GPUs, ...) are not counted here, the member's scheduler counts them. Raises QuantityError
    (a ValueError) for what cannot be parsed."""
    if is_full_form(template):
        spec = template.get("spec")
        return Resources.from_amounts(pod_request_amounts(spec)) if isinstance(spec, Mapping) else ZERO
    resources = template.get("resources")
    return Resources.from_kube(resources if isinstance(resources, Mapping) else {})
