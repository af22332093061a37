"""A Queue's spend this calendar month (UTC): GPU-hours and money, accrued from what its jobs actually ran.

The queue accounting (`queue_accounting.QueueAccounting.update_spend`) calls `accrue_spend` every placement
cycle for each Queue with a spec.budget. Its status.spend holds `spent` and `gpuHours` up to `lastAccruedAt`;
the next accrual adds the GPU time each of the queue's jobs ran in (lastAccruedAt, now] and moves
lastAccruedAt to now (whole seconds, as the job history's times). Every value is computed from that stored pair
and the jobs' histories, never from what this process remembers, so a restarted hub or a new leader continues
from what was written: nothing is counted twice and nothing is lost (a job deleted before the next accrual is
kept by the accounting until it is accrued: `departed`).

What counts: a job's running intervals from its status.history, each from a "Running" entry to the next entry
that leaves Running (another phase, ClusterLost, Preempted, Drained, PulledBack), or to now while it runs (a
running job whose Running entry was trimmed away, history keeping the newest entries, counts from the oldest
entry of its current copy). Time the hub never saw running (a gang that went from Admitted to Succeeded between
two looks) is not counted.
Each interval costs GPUs (the gang as placed) x hours x the GPU-hour price of its cluster for the job's GPU
model (`ClusterInfo.price`, in the hub's currency). A price-0 (already-paid) cluster costs nothing, but its
GPU-hours count toward a gpuHours budget. A new calendar month starts again from 0 (the part of the window
before the month began belongs to the month that ended).

`projected` is spent + the current burn rate (the GPUs running now x their price per hour) x the hours left
in the month; `projectedGpuHours` likewise.

Pure: no I/O and no clock (`now` is passed in). Must never write anything.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from federator.apis.queue import budget_amount
from federator.apis.timestamps import format_time, parse_epoch
from federator.apis.views import Body
from federator.controllers.jobs import JOB_PHASES, PHASE_RUNNING, current_placement, phase_of
from federator.placement.gang import BudgetExceeded

__all__ = ["BUDGET_GPU_HOURS", "Budget", "RunInterval", "SpendUpdate", "accrue_spend", "month_bounds",
           "period_of", "queue_budget", "running_intervals", "windowed_cost"]

#: the unit of a gpuHours budget in messages (BudgetExceeded.unit)
BUDGET_GPU_HOURS: Final = "GPU-hours"
#: history events after which a running copy no longer runs (besides every phase but Running)
_LEAVES_RUNNING: Final = frozenset({*JOB_PHASES, "ClusterLost", "Preempted", "Drained", "PulledBack"}) - {PHASE_RUNNING}
_MONEY_DIGITS: Final = 6


@dataclass(frozen=True, slots=True)
class Budget:
    """A Queue's spec.budget: money (amount in currency) or GPU-hours per calendar month."""

    amount: Decimal | None = None
    currency: str = ""
    gpu_hours: float | None = None

    @property
    def limit(self) -> float:
        return float(self.amount) if self.amount is not None else float(self.gpu_hours or 0.0)

    @property
    def unit(self) -> str:
        return self.currency if self.amount is not None else BUDGET_GPU_HOURS


def queue_budget(spec: Mapping[str, Any]) -> Budget | None:
    """The Queue's spec.budget (validated by the API) as a Budget; None without one; ValueError naming the field
    for a stored one that cannot be read."""
    raw = spec.get("budget")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError("spec.budget must be an object")
    if raw.get("amount") is not None:
        currency = raw.get("currency")
        if not isinstance(currency, str) or not currency:
            raise ValueError("spec.budget.currency is required with amount")
        return Budget(amount=budget_amount(raw["amount"]), currency=currency)
    hours = raw.get("gpuHours")
    if isinstance(hours, bool) or not isinstance(hours, int | float) or not math.isfinite(hours) or hours < 0:
        raise ValueError("spec.budget needs amount or gpuHours (a number >= 0)")
    return Budget(gpu_hours=float(hours))


def month_bounds(now: float) -> tuple[float, float]:
    """(start, end) of the calendar month (UTC) that `now` is in, as seconds since the epoch."""
    moment = dt.datetime.fromtimestamp(now, dt.UTC)
    start = dt.datetime(moment.year, moment.month, 1, tzinfo=dt.UTC)
    end = dt.datetime(moment.year + moment.month // 12, moment.month % 12 + 1, 1, tzinfo=dt.UTC)
    return start.timestamp(), end.timestamp()


def period_of(now: float) -> str:
    """The calendar month (UTC) of `now`, as status.spend.period shows it: "2026-11"."""
    moment = dt.datetime.fromtimestamp(now, dt.UTC)
    return f"{moment.year:04d}-{moment.month:02d}"


@dataclass(frozen=True, slots=True)
class RunInterval:
    """One stretch of a job's copy running at (cluster, epoch); `end` None: it runs still."""

    cluster: str
    epoch: int
    start: float
    end: float | None


def running_intervals(job: Mapping[str, Any], *, gone_at: float | None = None) -> list[RunInterval]:
    """The stretches the job ran, from its status.history (see the module docstring). A job that runs now has
    its last stretch open (end None), unless it is gone (deleted: `gone_at` ends it)."""
    history = [e for e in Body(job).status.get("history") or () if isinstance(e, Mapping)]
    out: list[RunInterval] = []
    open_: RunInterval | None = None
    cluster, epoch = current_placement(job)
    running_now = phase_of(job) == PHASE_RUNNING and cluster is not None
    #: the earliest moment the current copy may have run from, should its Running entry be trimmed away
    trimmed_from: float | None = None
    seen_running = False
    for entry in history:
        when = parse_epoch(entry.get("time"))
        event = entry.get("event")
        if when is None or not isinstance(event, str):
            continue
        if trimmed_from is None or event in _LEAVES_RUNNING or entry.get("epoch") != epoch:
            trimmed_from = when
        if open_ is not None and (event in _LEAVES_RUNNING or (event == PHASE_RUNNING and
                                                               entry.get("epoch") != open_.epoch)):
            out.append(RunInterval(open_.cluster, open_.epoch, open_.start, max(open_.start, when)))
            open_ = None
        if event == PHASE_RUNNING and open_ is None:
            where, number = entry.get("cluster"), entry.get("epoch")
            if isinstance(where, str) and where:
                open_ = RunInterval(where, number if type(number) is int else 0, when, None)
                seen_running = seen_running or open_.epoch == epoch
    if open_ is None and running_now and not seen_running and cluster is not None:
        # it runs, but its Running entry is gone (history keeps the newest entries): it ran at least since the
        # oldest entry of its current copy
        open_ = RunInterval(cluster, epoch, trimmed_from if trimmed_from is not None else 0.0, None)
    if open_ is not None:
        still = running_now and (cluster, epoch) == (open_.cluster, open_.epoch)
        if gone_at is not None:
            out.append(RunInterval(open_.cluster, open_.epoch, open_.start, max(open_.start, gone_at)))
        elif still:
            out.append(open_)
        # else: it left Running without an entry saying when (history trimmed): not counted past its start
    return out


def windowed_cost(intervals: Iterable[RunInterval], *, gpus: int, price: Mapping[str, float], start: float,
                  end: float) -> tuple[float, float]:
    """(GPU-hours, money) of `intervals` clipped to (start, end]: `gpus` x hours, x `price[cluster]` per
    GPU-hour (a cluster not in `price` costs 0)."""
    hours = money = 0.0
    for interval in intervals:
        lo = max(start, interval.start)
        hi = min(end, interval.end if interval.end is not None else end)
        if hi <= lo:
            continue
        gpu_hours = gpus * (hi - lo) / 3600.0
        hours += gpu_hours
        money += gpu_hours * price.get(interval.cluster, 0.0)
    return hours, money


@dataclass(frozen=True, slots=True)
class JobRuns:
    """What one job of the queue ran, for an accrual: its stretches, its GPUs and the price of each cluster for
    its GPU model."""

    intervals: tuple[RunInterval, ...]
    gpus: int
    price: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class SpendUpdate:
    """`accrue_spend`'s answer: status.spend now, and whether the queue is over its budget."""

    spend: dict[str, Any]
    over: BudgetExceeded | None
    #: a new calendar month began since status.spend was written
    new_period: bool


def _money(value: float) -> str:
    return f"{round(value, _MONEY_DIGITS):.{_MONEY_DIGITS}f}"


def _stored_base(old: Mapping[str, Any] | None, *, period: str, month_start: float) -> tuple[float, float, float]:
    """(spent, gpuHours, accrued up to) of the stored status.spend, or (0, 0, month start) for another month or
    one that cannot be read."""
    if not isinstance(old, Mapping) or old.get("period") != period:
        return 0.0, 0.0, month_start
    accrued = parse_epoch(old.get("lastAccruedAt"))
    hours = old.get("gpuHours")
    try:
        spent = float(str(old.get("spent")))
    except ValueError:
        return 0.0, 0.0, month_start
    if accrued is None or isinstance(hours, bool) or not isinstance(hours, int | float) or not math.isfinite(spent):
        return 0.0, 0.0, month_start
    return spent, float(hours), max(month_start, accrued)


def accrue_spend(old: Mapping[str, Any] | None, *, runs: Iterable[JobRuns], burn_gpus: int, burn_per_hour: float,
                 budget: Budget, currency: str, now: float) -> SpendUpdate:
    """status.spend after accruing the GPU time of `runs` since the stored `old` spend (module docstring), and
    whether the queue is over `budget`. `burn_gpus` GPUs run now, costing `burn_per_hour`: the projection.
    A money budget in another currency than the hub's is never "over" (the caller says it is not enforced)."""
    period = period_of(now)
    month_start, month_end = month_bounds(now)
    spent, hours, since = _stored_base(old, period=period, month_start=month_start)
    until = max(since, float(math.floor(now)))
    for run in runs:
        more_hours, more_money = windowed_cost(run.intervals, gpus=run.gpus, price=run.price, start=since,
                                               end=until)
        hours += more_hours
        spent += more_money
    left = max(0.0, month_end - now) / 3600.0
    spend: dict[str, Any] = {
        "period": period, "currency": currency, "spent": _money(spent), "gpuHours": round(hours, _MONEY_DIGITS),
        "projected": _money(spent + burn_per_hour * left),
        "projectedGpuHours": round(hours + burn_gpus * left, _MONEY_DIGITS),
        "lastAccruedAt": format_time(until),
    }
    over: BudgetExceeded | None = None
    if budget.amount is not None:
        spend["remaining"] = _money(float(budget.amount) - spent)
        if budget.currency == currency and spent >= float(budget.amount):
            over = BudgetExceeded(spent=spent, limit=budget.limit, unit=budget.unit)
    else:
        spend["remainingGpuHours"] = round(budget.limit - hours, _MONEY_DIGITS)
        if hours >= budget.limit:
            over = BudgetExceeded(spent=hours, limit=budget.limit, unit=budget.unit)
    new_period = not isinstance(old, Mapping) or old.get("period") != period
    return SpendUpdate(spend=spend, over=over, new_period=new_period)
