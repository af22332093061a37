"""status.placement.scores (controllers/placement.py `score_rows`): what the placement controller records of
a decision's scores. Table-driven over hand-built Decisions: the chosen cluster first with its breakdown per
score plugin, the runners-up best first, the outranked clusters after them with their bound, at most
MAX_SCORE_ROWS rows, nothing that is not a finite number, and nothing at all for a preemption. Every
result is checked against the TrainingJob schema the hub validates status writes with."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from federator.apis.trainingjob import MAX_SCORE_ROWS, validate_trainingjob
from federator.controllers.placement import score_rows
from federator.placement import Decision, PodAssignment, Preemption, ScoreBreakdown
from federator.placement.decision import ScoreTable

from ..apis.test_trainingjob import example

PLUGINS = ("data-locality", "cost", "packing")
WEIGHTS = (3.0, 1.0, 0.5)


def breakdowns(rows: dict[str, tuple[tuple[float, float], ...]], *, model: str | None = "A100"
               ) -> tuple[ScoreBreakdown, ...]:
    """cluster -> ((raw, normalised) per plugin); totals computed as the cycle does, best first."""
    table = ScoreTable(plugins=PLUGINS, weights=WEIGHTS,
                       raw=tuple({c: parts[i][0] for c, parts in rows.items()} for i in range(len(PLUGINS))),
                       normalized=tuple({c: parts[i][1] for c, parts in rows.items()} for i in range(len(PLUGINS))))
    out = [ScoreBreakdown(cluster=c, total=sum(w * n for w, (_, n) in zip(WEIGHTS, parts, strict=True)),
                          gpu_model=model, nodes_used=3, table=table) for c, parts in rows.items()]
    return tuple(sorted(out, key=lambda b: (-b.total, b.cluster)))


def decision(cluster: str, scores: tuple[ScoreBreakdown, ...], *, outranked: dict[str, float] | None = None,
             preemption: Preemption | None = None) -> Decision:
    return Decision(gang_key="vision/j", gang_uid="u-1", cluster=cluster, gpu_model="A100",
                    assignment=(PodAssignment("worker", 0, "n1"),), resource_version="7", decided_at=0.0,
                    why_not={}, scores=scores, outranked=outranked or {}, preemption=preemption)


def schema_errors(rows: list[dict[str, Any]]) -> list[Any]:
    job = example()
    job["status"] = {"phase": "Placed", "placement": {"cluster": rows[0]["cluster"] if rows else "a", "epoch": 1,
                                                      "scores": copy.deepcopy(rows)}}
    return validate_trainingjob(job)


THREE = breakdowns({"dc-a": ((2.0, 100.0), (3.5, 40.0), (0.6, 60.0)),
                    "dc-b": ((0.0, 0.0), (2.0, 80.0), (0.9, 90.0)),
                    "dc-c": ((1.0, 50.0), (9.0, 10.0), (0.1, 10.0))})


def test_the_chosen_cluster_first_with_its_breakdown_then_runners_up_then_outranked() -> None:
    rows = score_rows(decision("dc-a", THREE, outranked={"dc-z": 20.0, "dc-y": 70.5}))
    assert [(r["cluster"], r["total"]) for r in rows] == [
        ("dc-a", 370.0), ("dc-c", 165.0), ("dc-b", 125.0), ("dc-y", 70.5), ("dc-z", 20.0)]
    chosen = rows[0]
    assert chosen["parts"] == [
        {"plugin": "data-locality", "raw": 2.0, "weight": 3.0, "weighted": 300.0},
        {"plugin": "cost", "raw": 3.5, "weight": 1.0, "weighted": 40.0},
        {"plugin": "packing", "raw": 0.6, "weight": 0.5, "weighted": 30.0},
    ]
    assert math.isclose(sum(p["weighted"] for p in chosen["parts"]), chosen["total"])
    assert (chosen["gpuModel"], chosen["nodes"]) == ("A100", 3) and "outranked" not in chosen
    assert all("parts" not in r for r in rows[1:])  # totals only: compact
    assert rows[1] == {"cluster": "dc-c", "total": 165.0, "nodes": 3, "gpuModel": "A100"}
    assert rows[3] == {"cluster": "dc-y", "total": 70.5, "outranked": True}
    assert schema_errors(rows) == []


def test_the_chosen_cluster_comes_first_even_when_it_is_not_the_best_scored() -> None:
    # e.g. a pinned re-reservation: the decision's cluster is what the row explains
    rows = score_rows(decision("dc-b", THREE))
    assert [r["cluster"] for r in rows] == ["dc-b", "dc-a", "dc-c"] and "parts" in rows[0]


@pytest.mark.parametrize("case", ["preemption", "cluster not scored", "no scores"])
def test_nothing_is_recorded_when_no_score_chose_the_cluster(case: str) -> None:
    if case == "preemption":
        made = decision("dc-a", (), preemption=Preemption(cluster="dc-a", gpu_model="A100", victims=(), nodes=()))
    elif case == "cluster not scored":
        made = decision("elsewhere", THREE)
    else:
        made = decision("dc-a", ())
    assert score_rows(made) == []
    assert schema_errors([]) == []


def test_at_most_max_score_rows_and_only_finite_numbers() -> None:
    many = breakdowns({f"dc-{i:02d}": ((float(i), float(i)), (1.0, 1.0), (1.0, 1.0)) for i in range(30)})
    rows = score_rows(decision("dc-29", many, outranked={f"late-{i}": 1.0 for i in range(10)}))
    assert len(rows) == MAX_SCORE_ROWS and rows[0]["cluster"] == "dc-29"
    assert [r["cluster"] for r in rows[1:3]] == ["dc-28", "dc-27"] and not any(r.get("outranked") for r in rows)
    assert schema_errors(rows) == []

    odd = breakdowns({"dc-a": ((math.inf, 100.0), (math.nan, 10.0), (1.0 / 3.0, 20.0)),
                      "dc-b": ((1.0, 1.0), (1.0, 1.0), (1.0, 1.0))})
    rows = score_rows(decision("dc-a", odd, outranked={"dc-x": math.inf, "dc-y": 2.0}))
    parts = rows[0]["parts"]
    assert [("raw" in p) for p in parts] == [False, False, True]  # not a number: left out, never NaN
    assert parts[2]["raw"] == 0.3333
    assert [r["cluster"] for r in rows] == ["dc-a", "dc-b", "dc-y"]  # an infinite bound is no total
    assert schema_errors(rows) == []


@pytest.mark.parametrize(("change", "field"), [
    (lambda rows: rows.append(dict(rows[-1])) or rows * 9, "status.placement.scores"),
    (lambda rows: rows[0]["parts"][0].update(weighted="300") or rows, "status.placement.scores[0].parts[0].weighted"),
    (lambda rows: rows[0].update(total=True) or rows, "status.placement.scores[0].total"),
    (lambda rows: rows[0].update(cluster="x" * 254) or rows, "status.placement.scores[0].cluster"),
    (lambda rows: rows[0].update(extra=1) or rows, "status.placement.scores[0].extra"),
])
def test_the_schema_refuses_what_the_controller_never_writes(change: Any, field: str) -> None:
    rows = change(score_rows(decision("dc-a", THREE)))
    assert any(path == field for path, _ in schema_errors(rows)), schema_errors(rows)
