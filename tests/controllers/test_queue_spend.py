"""Queue budgets' spend (controllers/queue_spend.py, and its use in queue_accounting.py), with injected times
(never the wall clock): the running stretches read from a job's history, accrual from the stored spend without
counting twice (a restart, a second accrual, a deleted job), a new month from 0, over/under budget, the
projection, and the over-budget mark on the queue's gangs."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from federator.controllers.queue_accounting import Preempting, QueueAccounting
from federator.controllers.queue_spend import (Budget, JobRuns, RunInterval, accrue_spend, month_bounds, period_of,
                                               queue_budget, running_intervals, windowed_cost)
from federator.controllers.reservations import ReservationLedger
from federator.placement import ClusterInfo, ClusterSnapshot, Profile
from federator.placement.gang import BudgetExceeded

from .placement_parts_support import Clock, Queues, Views, stamp, training_job

# 2027-01-15T00:00:00Z: mid-month, a whole number of seconds
NOW = dt.datetime(2027, 1, 15, tzinfo=dt.UTC).timestamp()
MONEY = Budget(amount=Decimal("100.00"), currency="USD")


def entry(event: str, at: float, *, cluster: str | None = "cloud", epoch: int = 0) -> dict[str, Any]:
    return {"event": event, "time": stamp(at), "cluster": cluster, "epoch": epoch}


def job_with(history: list[dict[str, Any]], *, phase: str, cluster: str = "cloud", epoch: int = 0,
             name: str = "a", queue: str = "team-a", gpus: int = 8, workers: int = 1, rv: int = 1) -> dict[str, Any]:
    job = training_job(name, cluster=cluster, epoch=epoch, phase=phase, queue=queue, gpus=gpus, workers=workers,
                       rv=rv)
    job["status"]["history"] = history
    return job


def test_running_stretches_come_from_the_history_and_end_where_the_copy_stops() -> None:
    history = [entry("Placed", NOW - 900), entry("Running", NOW - 800), entry("Checkpointed", NOW - 700),
               entry("ClusterLost", NOW - 600), entry("Requeued", NOW - 590, cluster=None),
               entry("Placed", NOW - 500, cluster="onprem", epoch=1), entry("Running", NOW - 400, cluster="onprem",
                                                                                epoch=1),
               entry("Resized", NOW - 300, cluster="onprem", epoch=1), entry("Succeeded", NOW - 100, cluster="onprem",
                                                                              epoch=1)]
    job = job_with(history, phase="Succeeded", cluster="onprem", epoch=1)
    assert running_intervals(job) == [RunInterval("cloud", 0, NOW - 800, NOW - 600),
                                      RunInterval("onprem", 1, NOW - 400, NOW - 100)]
    running = job_with(history[:2], phase="Running")
    assert running_intervals(running) == [RunInterval("cloud", 0, NOW - 800, None)]
    # deleted while running: its stretch ends when it went
    assert running_intervals(running, gone_at=NOW - 10) == [RunInterval("cloud", 0, NOW - 800, NOW - 10)]
    # left Running with no entry saying when (history trimmed): not counted on
    assert running_intervals(job_with(history[:2], phase="Failed")) == []
    # a long-running job whose Running entry was trimmed away still runs: from its oldest entry of this copy
    trimmed = job_with([entry("Checkpointed", NOW - 500), entry("Checkpointed", NOW - 400)], phase="Running")
    assert running_intervals(trimmed) == [RunInterval("cloud", 0, NOW - 500, None)]
        # hostile history entries are skipped
    junk = job_with([{"event": "Running", "time": "yesterday"}, "x", {"event": 7}, entry("Running", NOW, cluster="")],
                    phase="Running")
    assert running_intervals(junk) == [RunInterval("cloud", 0, NOW, None)]  # it runs: from its oldest readable entry
    junk["status"]["phase"] = "Failed"
    assert running_intervals(junk) == []


def test_the_cost_of_a_window_is_gpus_x_hours_x_the_price_of_each_cluster() -> None:
    stretches = [RunInterval("cloud", 0, NOW - 7200, NOW - 3600), RunInterval("onprem", 1, NOW - 1800, None)]
    hours, money = windowed_cost(stretches, gpus=8, price={"cloud": 4.5, "onprem": 0.0}, start=NOW - 5400, end=NOW)
    assert hours == pytest.approx(8 * 0.5 + 8 * 0.5) and money == pytest.approx(8 * 0.5 * 4.5)
    assert windowed_cost(stretches, gpus=8, price={}, start=NOW, end=NOW + 10) == pytest.approx((8 * 10 / 3600, 0.0))


def test_months_are_calendar_months_in_utc() -> None:
    start, end = month_bounds(NOW)
    assert (stamp(start), stamp(end), period_of(NOW)) == ("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z", "2027-01")
    december = dt.datetime(2026, 12, 31, 23, 59, 59, tzinfo=dt.UTC).timestamp()
    assert [stamp(t) for t in month_bounds(december)] == ["2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"]
    assert period_of(december) == "2026-12"


def _runs(start: float, *, end: float | None = None, gpus: int = 8, price: float = 4.5) -> list[JobRuns]:
    return [JobRuns(intervals=(RunInterval("cloud", 0, start, end),), gpus=gpus, price={"cloud": price})]


def test_accrual_continues_from_the_stored_spend_and_never_counts_twice() -> None:
    runs = _runs(NOW - 3600)
    first = accrue_spend(None, runs=runs, burn_gpus=8, burn_per_hour=36.0, budget=MONEY, currency="USD",
                         now=NOW - 1800 + 0.7)
    # from the month's start: half an hour of 8 GPUs at 4.5 (the fraction of a second is left for the next)
    assert first.spend["spent"] == "18.000000" and first.spend["gpuHours"] == 4.0
    assert first.spend["lastAccruedAt"] == stamp(NOW - 1800) and first.new_period
    second = accrue_spend(first.spend, runs=runs, burn_gpus=8, burn_per_hour=36.0, budget=MONEY, currency="USD",
                          now=NOW)
    # a restarted hub (or a new leader) reads the same stored spend: the same answer, nothing counted twice
    again = accrue_spend(first.spend, runs=runs, burn_gpus=8, burn_per_hour=36.0, budget=MONEY, currency="USD",
                         now=NOW)
    once = accrue_spend(None, runs=runs, burn_gpus=8, burn_per_hour=36.0, budget=MONEY, currency="USD", now=NOW)
    assert second.spend == again.spend == once.spend
    assert second.spend["spent"] == "36.000000" and second.spend["remaining"] == "64.000000"
    assert second.over is None and not second.new_period
    # an accrual at the moment already accrued adds nothing
    same = accrue_spend(second.spend, runs=runs, burn_gpus=8, burn_per_hour=36.0, budget=MONEY, currency="USD",
                        now=NOW)
    assert same.spend["spent"] == "36.000000"


def test_the_projection_is_spent_plus_the_burn_rate_for_the_rest_of_the_month() -> None:
    update = accrue_spend(None, runs=_runs(NOW - 3600), burn_gpus=8, burn_per_hour=36.0, budget=MONEY,
                          currency="USD", now=NOW)
    left = (month_bounds(NOW)[1] - NOW) / 3600
    assert float(update.spend["projected"]) == pytest.approx(36.0 + 36.0 * left)
    assert update.spend["projectedGpuHours"] == pytest.approx(8.0 + 8 * left)


def test_a_new_month_starts_from_zero() -> None:
    december = dt.datetime(2026, 12, 31, 23, 0, tzinfo=dt.UTC).timestamp()
    old = accrue_spend(None, runs=_runs(december), budget=MONEY, burn_gpus=8, burn_per_hour=36.0, currency="USD",
                       now=december + 1800).spend
    assert old["period"] == "2026-12" and old["spent"] == "18.000000"
    january = accrue_spend(old, runs=_runs(december), budget=MONEY, burn_gpus=8, burn_per_hour=36.0,
                           currency="USD", now=december + 3600 + 900)
    # only the quarter hour since midnight counts in January
    assert january.new_period and january.spend["period"] == "2027-01" and january.spend["spent"] == "9.000000"


def test_over_budget_in_money_and_in_gpu_hours_and_a_foreign_currency_never_is() -> None:
    over = accrue_spend(None, runs=_runs(NOW - 3 * 3600), budget=MONEY, burn_gpus=0, burn_per_hour=0,
                        currency="USD", now=NOW)
    assert over.over == BudgetExceeded(spent=108.0, limit=100.0, unit="USD")
    assert over.spend["remaining"] == "-8.000000"
    hours = accrue_spend(None, runs=_runs(NOW - 3600, price=0.0), budget=Budget(gpu_hours=8.0), burn_gpus=0,
                         burn_per_hour=0, currency="USD", now=NOW)
    # on-prem (price 0) hours cost nothing but count toward a gpuHours budget
    assert hours.spend["spent"] == "0.000000" and hours.over == BudgetExceeded(spent=8.0, limit=8.0, unit="GPU-hours")
    assert hours.spend["remainingGpuHours"] == 0.0 and "remaining" not in hours.spend
    euros = accrue_spend(None, runs=_runs(NOW - 3 * 3600), budget=Budget(amount=Decimal(1), currency="EUR"),
                         burn_gpus=0, burn_per_hour=0, currency="USD", now=NOW)
    assert euros.over is None and euros.spend["currency"] == "USD"
    nothing = accrue_spend(None, runs=[], budget=Budget(amount=Decimal(0), currency="USD"), burn_gpus=0,
                           burn_per_hour=0, currency="USD", now=NOW)
    assert nothing.over is not None  # a budget of 0: already-paid clusters only


@pytest.mark.parametrize("stored", [{"period": "2027-01", "spent": "lots", "gpuHours": 1, "lastAccruedAt": "x"},
                                    {"period": "2027-01", "spent": "1", "gpuHours": True},
                                    {"period": "2027-01", "spent": "nan", "gpuHours": 1,
                                     "lastAccruedAt": "2027-01-02T00:00:00Z"}, "spend", 7])
def test_an_unreadable_stored_spend_starts_the_month_again(stored: Any) -> None:
    update = accrue_spend(stored, runs=_runs(NOW - 3600), budget=MONEY, burn_gpus=0, burn_per_hour=0,
                          currency="USD", now=NOW)
    assert update.spend["spent"] == "36.000000"


def test_queue_budgets_are_read_from_the_spec() -> None:
    assert queue_budget({}) is None
    assert queue_budget({"budget": {"amount": "1500.50", "currency": "EUR"}}) == \
        Budget(amount=Decimal("1500.50"), currency="EUR")
    assert queue_budget({"budget": {"gpuHours": 2000}}) == Budget(gpu_hours=2000.0)
    for bad in ("x", {"amount": "-1", "currency": "USD"}, {"amount": "1"}, {"gpuHours": -1}, {}):
        with pytest.raises(ValueError):
            queue_budget({"budget": bad})


class Sink:
    """A Queue status writer whose writes land at once."""

    def __init__(self) -> None:
        self.written: dict[str, dict[str, Any]] = {}
        self.wants = 0

    def stored_status(self, name: str) -> dict[str, Any] | None:
        return self.written.get(name)

    def want(self, name: str, status: dict[str, Any]) -> None:
        if self.written.get(name) != status:
            self.wants += 1
        self.written[name] = status


def _cluster(name: str, price: float) -> ClusterSnapshot:
    info = ClusterInfo(location="cloud", fabric="ethernet", bandwidth_gbps=100.0, cost_per_gpu_hour=price)
    return ClusterSnapshot.build(name=name, info=info, nodes=(), resource_version="1")


def _accounting(*jobs: dict[str, Any], budget: dict[str, Any]) -> tuple[QueueAccounting, Sink, dict[str, Any]]:
    index = {job["metadata"]["uid"]: job for job in jobs}
    queues = Queues(objects={"team-a": {"metadata": {"name": "team-a", "generation": 1},
                                        "spec": {"namespaces": {"names": ["team"]}, "budget": budget}}})
    sink = Sink()
    accounting = QueueAccounting(queues=queues, queue_status=sink, profile=Profile(), ledger=ReservationLedger(),
                                 members=Views(), preempting=Preempting(), jobs=index, active=set(), queued=set(),
                                 clock=Clock(NOW), currency="USD", spend_interval_seconds=60.0)
    return accounting, sink, index


def test_the_accounting_accrues_marks_the_gangs_and_keeps_a_deleted_jobs_time() -> None:
    running = job_with([entry("Running", NOW - 3600)], phase="Running", name="a", gpus=4, workers=2)
    done = job_with([entry("Running", NOW - 7200, cluster="onprem"), entry("Succeeded", NOW - 3600, cluster="onprem")],
                    phase="Succeeded", cluster="onprem", name="b")
    accounting, sink, index = _accounting(running, done, budget={"amount": "100", "currency": "USD"})
    snapshots = {"cloud": _cluster("cloud", 4.5), "onprem": _cluster("onprem", 0.0)}
    accounting.update_spend(snapshots, now=NOW)
    update = accounting.spend["team-a"]
    # a: 8 GPUs x 1 h x 4.5 on the cloud; b: 8 GPUs x 1 h on-prem, free
    assert update.spend["spent"] == "36.000000" and update.spend["gpuHours"] == 16.0
    assert accounting.over_budget == {}
    accounting.want_queue_status({}, [], result=None, now=NOW)  # no quotas: nothing written
    assert sink.written == {}
    from federator.placement import QueueQuota
    quotas = {"team-a": QueueQuota(name="team-a")}
    accounting.want_queue_status(quotas, [], result=None, now=NOW)
    status = sink.written["team-a"]
    assert status["spend"]["spent"] == "36.000000"
    [condition] = [c for c in status["conditions"] if c["type"] == "OverBudget"]
    assert (condition["status"], condition["reason"]) == ("False", "WithinBudget")
    assert condition["message"] == "within its budget (36.00 of 100.00 USD this month)"
    # two hours later (a fake clock, not the wall): over budget; the flip is written at once
    later = NOW + 2 * 3600
    accounting.update_spend(snapshots, now=later)
    assert accounting.over_budget["team-a"] == BudgetExceeded(spent=108.0, limit=100.0, unit="USD")
    gang = accounting.tiered(accounting.gang_of("uid-a", running) or pytest.fail("no gang"), running)
    assert gang.over_budget == BudgetExceeded(spent=108.0, limit=100.0, unit="USD")
    accounting.want_queue_status(quotas, [], result=None, now=later)
    [condition] = [c for c in sink.written["team-a"]["conditions"] if c["type"] == "OverBudget"]
    assert condition["status"] == "True" and "over its budget (108.00 of 100.00 USD this month)" in condition["message"]
    # within the spend interval the stored spend stays (one write per interval, not per cycle)
    writes = sink.wants
    accounting.update_spend(snapshots, now=later + 10)
    accounting.want_queue_status(quotas, [], result=None, now=later + 10)
    assert sink.wants == writes and sink.written["team-a"]["spend"]["spent"] == "108.000000"
    # the running job is deleted 20 s later: its last 20 s are still accrued, once
    del index["uid-a"]
    accounting.job_gone(running, now=later + 30)
    accounting.update_spend(snapshots, now=later + 40)
    accounting.want_queue_status(quotas, [], result=None, now=later + 40)
    spent = float(sink.written["team-a"]["spend"]["spent"])
    assert spent == pytest.approx(108.0 + 8 * 30 / 3600 * 4.5)
    assert accounting.departed
    accounting.update_spend(snapshots, now=later + 400)
    accounting.want_queue_status(quotas, [], result=None, now=later + 400)
    assert not accounting.departed and float(sink.written["team-a"]["spend"]["spent"]) == pytest.approx(spent)


def test_a_budget_in_another_currency_is_shown_but_not_enforced() -> None:
    running = job_with([entry("Running", NOW - 3600)], phase="Running")
    accounting, sink, _ = _accounting(running, budget={"amount": "1", "currency": "EUR"})
    accounting.update_spend({"cloud": _cluster("cloud", 4.5)}, now=NOW)
    assert accounting.over_budget == {}
    from federator.placement import QueueQuota
    accounting.want_queue_status({"team-a": QueueQuota(name="team-a")}, [], result=None, now=NOW)
    [condition] = [c for c in sink.written["team-a"]["conditions"] if c["type"] == "OverBudget"]
    assert (condition["status"], condition["reason"]) == ("Unknown", "CurrencyMismatch")
    assert "in EUR but the hub prices GPU-hours in USD" in condition["message"]


def test_a_hand_edited_stored_spend_is_replaced_not_a_crash() -> None:
    running = job_with([entry("Running", NOW - 3600)], phase="Running")
    accounting, sink, _ = _accounting(running, budget={"amount": "100", "currency": "USD"})
    sink.written["team-a"] = {"spend": {"period": period_of(NOW), "spent": "lots", "gpuHours": 1.0,
                                        "lastAccruedAt": stamp(NOW - 1)}}
    accounting.update_spend({"cloud": _cluster("cloud", 4.5)}, now=NOW)
    from federator.placement import QueueQuota
    accounting.want_queue_status({"team-a": QueueQuota(name="team-a")}, [], result=None, now=NOW)
    assert sink.written["team-a"]["spend"]["spent"] == "36.000000"
    # a budget that cannot be read (only a hand-edited store makes one) is skipped, the others go on
    accounting.queues.objects["team-a"]["spec"]["budget"] = {"amount": "lots", "currency": "USD"}
    accounting.update_spend({"cloud": _cluster("cloud", 4.5)}, now=NOW + 60)
    assert accounting.spend == {} and accounting.over_budget == {}
