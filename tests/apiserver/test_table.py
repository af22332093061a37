"""Server-rendered ages (kube's HumanDuration) and Table Accept negotiation."""

from __future__ import annotations

import pytest

from federator.apiserver.table import human_duration, wants_table


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-5, "<invalid>"), (-1, "0s"), (0, "0s"), (90, "90s"), (119, "119s"), (120, "2m"), (330, "5m30s"),
     (600, "10m"), (45 * 60, "45m"), (190 * 60, "3h10m"), (8 * 3600, "8h"), (47 * 3600, "47h"),
     (52 * 3600, "2d4h"), (9 * 86400, "9d"), (400 * 86400, "400d"), (3 * 365 * 86400, "3y"),
     (3 * 365 * 86400 + 5 * 86400, "3y5d"), (10 * 365 * 86400, "10y")],
)
def test_human_duration(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


@pytest.mark.parametrize(
    ("accept", "table"),
    [
        ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
         "application/json", True),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", True),
        ("application/json", False),
        ("", False),
        ("application/json,application/json;as=Table;v=v1;g=meta.k8s.io", False),
        ("application/json;as=Table;v=v1;g=other.io", False),
    ],
)
def test_wants_table(accept: str, table: bool) -> None:
    assert wants_table(accept) is table
