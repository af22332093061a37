"""Resources: parsing the Kubernetes map, arithmetic that never goes negative, descriptions."""

from __future__ import annotations

import pytest

from federator.apis.quantity import QuantityError
from federator.placement.resources import Resources

GI = 2**30


def test_from_kube_parses_the_four_resources() -> None:
    r = Resources.from_kube({"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 4, "rdma/hca": "1"})
    assert r == Resources(16_000, 64 * GI, 4, 1)
    assert Resources.from_kube(r.to_kube()) == r
    assert Resources.from_kube({}) == Resources()


def test_strict_rejects_unknown_resources_and_lenient_ignores_them() -> None:
    with pytest.raises(QuantityError, match="unsupported resource 'example.com/fpga'"):
        Resources.from_kube({"cpu": "1", "example.com/fpga": "1"})
    node = Resources.from_kube({"cpu": "96", "pods": "110", "ephemeral-storage": "1Ti"}, strict=False)
    assert node == Resources(cpu_milli=96_000)


def test_from_kube_rejects_bad_values() -> None:
    with pytest.raises(QuantityError):
        Resources.from_kube({"nvidia.com/gpu": "0.5"})
    with pytest.raises(QuantityError):
        Resources.from_kube({"memory": "-1Gi"})
    with pytest.raises(QuantityError):
        Resources.from_kube(["cpu"])  # type: ignore[arg-type]


def test_construction_validates() -> None:
    with pytest.raises(ValueError, match="negative"):
        Resources(gpu=-1)
    with pytest.raises(TypeError):
        Resources(cpu_milli=1.5)  # type: ignore[arg-type]


def test_arithmetic() -> None:
    a = Resources(1000, GI, 2, 1)
    b = Resources(500, GI, 1, 0)
    assert a + b == Resources(1500, 2 * GI, 3, 1)
    assert a - b == Resources(500, 0, 1, 1)
    with pytest.raises(ValueError):
        b - a  # noqa: B018 - would go negative: must raise, not wrap
    assert b.minus_clamped(a) == Resources(0, 0, 0, 0)
    assert b.fits_in(a) and not a.fits_in(b)
    assert a.times(3) == Resources(3000, 3 * GI, 6, 3)
    assert Resources().is_zero() and not a.is_zero()


def test_describe() -> None:
    assert Resources(16_000, 64 * GI, 4, 1).describe(gpu_model="A100") == "16 cpu, 64Gi memory, 4 A100 GPUs, 1 rdma/hca"
    assert Resources(gpu=1).describe() == "1 GPU"
    assert Resources().describe() == "no resources"
