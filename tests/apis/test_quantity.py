"""Kubernetes quantity parsing: valid forms, rounding, and hostile input."""

from __future__ import annotations

from fractions import Fraction

import pytest

from federator.apis.quantity import (
    QuantityError,
    format_bytes,
    format_cpu,
    parse_bytes,
    parse_count,
    parse_millicores,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", Fraction(8)),
        ("500m", Fraction(1, 2)),
        ("32Gi", Fraction(32 * 2**30)),
        ("1k", Fraction(1000)),
        ("1Ki", Fraction(1024)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("1e3", Fraction(1000)),
        ("1E-3", Fraction(1, 1000)),
        ("2M", Fraction(2_000_000)),
        ("100n", Fraction(1, 10**7)),
        ("+4", Fraction(4)),
        ("-4", Fraction(-4)),
        (7, Fraction(7)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parses_kubernetes_forms(text: str | int, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    ["", "   ", "abc", "8 Gi", "1.2.3", "Gi", "1Gb", "1ki", "--1", "1e", "0x10", "1e999999999", "9" * 65, "∞"],
)
def test_rejects_malformed(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_rejects_non_string_types() -> None:
    for value in (True, None, [1], float("nan"), float("inf")):
        with pytest.raises(QuantityError):
            parse_quantity(value)  # type: ignore[arg-type]


def test_rejects_out_of_range() -> None:
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity("9Ei")  # 9 * 2**60 > int64
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity(2**63)


def test_cpu_rounds_up_to_millicores() -> None:
    assert parse_millicores("500m") == 500
    assert parse_millicores("2") == 2000
    assert parse_millicores("0.1") == 100
    assert parse_millicores("1u") == 1  # rounds up, never to zero
    with pytest.raises(QuantityError, match="negative"):
        parse_millicores("-1")


def test_bytes() -> None:
    assert parse_bytes("32Gi") == 32 * 2**30
    assert parse_bytes("1k") == 1000
    assert parse_bytes("1.5Ki") == 1536
    with pytest.raises(QuantityError, match="negative"):
        parse_bytes("-1Gi")


def test_counts_must_be_whole() -> None:
    assert parse_count("8") == 8
    assert parse_count(4) == 4
    assert parse_count("2k") == 2000
    with pytest.raises(QuantityError, match="whole"):
        parse_count("500m", what="nvidia.com/gpu")
    with pytest.raises(QuantityError, match="nvidia.com/gpu"):
        parse_count("-1", what="nvidia.com/gpu")


def test_format_round_trips() -> None:
    assert format_cpu(8000) == "8"
    assert format_cpu(500) == "500m"
    assert format_bytes(32 * 2**30) == "32Gi"
    assert format_bytes(1536) == "1.5Ki"
    assert format_bytes(0) == "0"
    assert format_bytes(1000) == "1000"
    for size in (2**30, 3 * 2**20, 5 * 2**40):
        assert parse_bytes(format_bytes(size)) == size
    for millicores in (1, 250, 1000, 96000):
        assert parse_millicores(format_cpu(millicores)) == millicores
