"""Filter "quota": applies the cycle's admission of a gang to one cluster (see federator.placement.admission)."""

from __future__ import annotations

from placement_builders import cluster, context_for, gang, nodes, run_filter

from federator.placement.admission import Admission, QueueQuota, QuotaAmounts, QuotaLedger
from federator.placement.decision import QuotaBlock
from federator.placement.framework import DEFAULT_FILTERS, EvalContext, FilterResult
from federator.placement.plugins.quota import QuotaFilter

MIXED = cluster("mixed", nodes("a", 2) + nodes("h", 2, model="H100"))


def _run(admission: Admission | None, *, models: tuple[str, ...] | None = ("A100", "H100")) -> tuple[FilterResult, EvalContext]:
    g = gang("v/g", gpus=8, models=["A100", "H100"], queue="vision")
    ctx = context_for(MIXED)
    assert isinstance(ctx, EvalContext)
    ctx.admission = admission
    ctx.gpu_models = models
    return QuotaFilter().filter(g, MIXED, ctx), ctx


def test_without_an_admission_it_passes_whatever_the_gang_asks() -> None:
    result, _ = run_filter(QuotaFilter(), gang("g", pods=1000, gpus=8), cluster("a", nodes("n", 1), healthy=False))
    assert result.ok  # type: ignore[attr-defined]
    assert DEFAULT_FILTERS.index("gpu-model") < DEFAULT_FILTERS.index("quota") < DEFAULT_FILTERS.index("gang-fit")


def test_a_gang_its_queue_does_not_admit_is_rejected_with_the_queues_words() -> None:
    block = QuotaBlock("vision", "QuotaExceeded", "queue vision uses 8 of 8 A100 GPUs; waits for 8", {"used": 8})
    result, _ = _run(Admission("vision", False, block=block))
    assert (result.ok, result.code, result.message) == (False, "QuotaExceeded", block.message)
    assert dict(result.numbers) == {"used": 8}


def test_models_are_narrowed_to_those_with_room_own_quota_first() -> None:
    admission = Admission("vision", True, models=("H100", "A100"), own=frozenset({"H100"}))
    result, ctx = _run(admission)
    assert result.ok and ctx.gpu_models == ("H100", "A100")
    result, ctx = _run(Admission("vision", True, models=("A100",), own=frozenset()))
    assert result.ok and ctx.gpu_models == ("A100",)


def test_a_cluster_offering_only_models_without_room_is_rejected() -> None:
    result, _ = _run(Admission("vision", True, models=("B200",), own=frozenset({"B200"})), models=("A100",))
    assert not result.ok and result.code == "QuotaExceeded"
    assert result.message == "queue vision has room only for B200 GPUs; this cluster offers the gang A100"


def test_without_models_from_gpu_model_it_asks_the_index_itself() -> None:
    _, ctx = _run(Admission("vision", True, models=("H100",), own=frozenset({"H100"})), models=None)
    assert ctx.gpu_models == ("H100",)


def test_the_ledger_and_the_filter_agree_end_to_end() -> None:
    ledger = QuotaLedger({"vision": QueueQuota("vision", QuotaAmounts({"H100": 8}))}, (), models=("A100", "H100"))
    admission = ledger.admit(gang("v/g", gpus=8, models=["A100", "H100"], queue="vision"))
    assert admission.admitted and admission.models == ("H100",) and admission.narrowed
    result, ctx = _run(admission)
    assert result.ok and ctx.gpu_models == ("H100",)
