"""Queues for the placement loop: the hub's Queue objects in placement's terms, and their status.

- `QueueCache`: every Queue of the hub store, kept by a list + watch
  (re-list after 410 Gone, capped backoff with jitter), never a LIST per
  cycle. `quotas()` gives them as placement's `QueueQuota`s (built again only
  after a change); `objects` the stored Queues and `labels_of(namespace)` the
  labels of the stored Namespaces (both for `selects_namespace`; the labels
  come from the term's one Namespace cache, `hub.parts.namespaces`, which it
  holds while it runs and whose changes wake placement). A
  Queue that cannot be read (it passed the API's validation, so only a bug
  or a hand-edited store makes one) is left out and logged once: its jobs
  then wait with QueueNotFound rather than run without a quota.
- `queue_quota(obj)`: one stored Queue as a `QueueQuota` (API defaults:
  withinQueue LowerPriority, reclaimBorrowed true, weight 1).
- `queue_status(...)`: a Queue's status from what placement counted (used
  and borrowed GPUs per model, cpu, memory; admitted and pending jobs; the
  condition Admitting: False with reason QuotaExceeded while some of its
  jobs wait for quota; for a queue with a budget, status.spend and the
  condition OverBudget, `BudgetState`).
- `QueueStatusWriter`: writes each Queue's status through the status
  subresource in-process (HTTP serves it read-only), only when it changed,
  and at most once per `queue_status_interval_seconds` (HubSettings.queues,
  default 0.5) per Queue: a burst of cycles becomes one write.

The placement controller owns both (started and stopped with it). This
module never decides placement and never writes a TrainingJob.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from federator.apiserver.errors import ApiError
from federator.apiserver.registry import ResourceType
from federator.apis.quantity import QuantityError, format_bytes, format_cpu, parse_bytes, parse_millicores
from federator.apis.views import Body
from federator.controllers.context import HUB_API_VERSION, HubContext
from federator.controllers.jobs import label_selector, remove_condition, set_condition
from federator.controllers.loops import watch_hub_kind
from federator.controllers.namespaces import NamespaceCache
from federator.obs import get_logger
from federator.placement.admission import QueueQuota, QueueUsage, QuotaAmounts, WithinQueue
from federator.placement.gang import ClusterTier, LabelSelector
from federator.store.protocol import StoreError
from federator.runtime.waits import wait_event

__all__ = ["CONDITION_ADMITTING", "CONDITION_OVER_BUDGET", "QUEUE_KIND", "BudgetState", "QueueCache", "QueueStatusWriter", "queue_quota", "queue_status"]

_log = get_logger("controllers.queues")

QUEUE_KIND = "Queue"
#: Queue condition: True while the queue admits its jobs, False (QuotaExceeded) while some wait for quota.
CONDITION_ADMITTING = "Admitting"
#: Queue condition of a queue with a budget: True (OverBudget) once this month's spend reached it, False
#: (WithinBudget) below it, Unknown (CurrencyMismatch) for a money budget in another currency than the hub's
CONDITION_OVER_BUDGET = "OverBudget"


@dataclass(frozen=True, slots=True)
class BudgetState:
    """What a budgeted Queue's status shows of its budget: status.spend and the OverBudget condition."""

    spend: dict[str, Any]
    state: str
    reason: str
    message: str


def _amounts(raw: Any, *, what: str) -> QuotaAmounts:
    if raw is None:
        return QuotaAmounts()
    if not isinstance(raw, Mapping):
        raise ValueError(f"{what} must be an object")
    gpus = raw.get("gpus") or {}
    if not isinstance(gpus, Mapping):
        raise ValueError(f"{what}.gpus must map GPU models to counts")
    try:
        cpu = parse_millicores(raw["cpu"]) if raw.get("cpu") is not None else None
        memory = parse_bytes(raw["memory"]) if raw.get("memory") is not None else None
    except QuantityError as e:
        raise ValueError(f"{what}: {e}") from None
    return QuotaAmounts(gpus={str(model): count for model, count in gpus.items()}, cpu_milli=cpu, memory=memory)


def queue_tiers(raw: object) -> tuple[ClusterTier, ...]:
    """A Queue's spec.tiers as placement's ClusterTiers; ValueError naming the field when it cannot be."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError("spec.tiers must be a list")
    tiers = []
    for index, tier in enumerate(raw):
        if not isinstance(tier, Mapping):
            raise ValueError(f"spec.tiers[{index}] must be an object")
        spill = tier.get("spillAfterSeconds", 300)
        if isinstance(spill, bool) or not isinstance(spill, int | float):
            raise ValueError(f"spec.tiers[{index}].spillAfterSeconds must be a number")
        tiers.append(ClusterTier(name=str(tier.get("name") or ""), spill_after_seconds=float(spill),
                                 selector=label_selector(tier.get("clusterSelector")) or LabelSelector()))
    return tuple(tiers)


def queue_quota(obj: Mapping[str, Any]) -> QueueQuota:
    """A stored Queue as placement's QueueQuota; ValueError (or TypeError) naming the field when it cannot be."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError("spec is missing")
    preemption = spec.get("preemption") or {}
    if not isinstance(preemption, Mapping):
        raise ValueError("spec.preemption must be an object")
    limit = spec.get("borrowingLimit")
    weight = spec.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise ValueError(f"spec.weight must be a number, got {weight!r}")
    return QueueQuota(
        name=Body(obj).name,
        nominal=_amounts(spec.get("quota"), what="spec.quota"),
        cohort=str(spec.get("cohort") or ""),
        borrowing_limit=None if limit is None else _amounts(limit, what="spec.borrowingLimit"),
        weight=float(weight),
        within_queue=WithinQueue(preemption.get("withinQueue", WithinQueue.LOWER_PRIORITY.value)),
        reclaim_borrowed=preemption.get("reclaimBorrowed", True) is True,
        tiers=queue_tiers(spec.get("tiers")),
    )


class QueueCache:
    """The hub's Queues by name (see the module docstring). `on_change()` is called after every change."""

    def __init__(self, hub: HubContext, *, namespaces: NamespaceCache, on_change: Any = None) -> None:
        self.hub = hub
        self.rt: ResourceType | None = hub.registry.by_kind(HUB_API_VERSION, QUEUE_KIND)
        self.objects: dict[str, dict[str, Any]] = {}
        self.namespaces = namespaces
        self.on_change = on_change
        self._quotas: dict[str, QueueQuota] | None = None
        self._unreadable: set[tuple[str, str]] = set()
        self._holding = False

    def quotas(self) -> dict[str, QueueQuota] | None:
        """Every readable Queue as a QueueQuota; None when the hub holds no Queue at all."""
        if not self.objects:
            return None
        if self._quotas is None:
            built: dict[str, QueueQuota] = {}
            for name, obj in sorted(self.objects.items()):
                try:
                    built[name] = queue_quota(obj)
                except (ValueError, TypeError) as e:
                    key = (name, Body(obj).resource_version)
                    if key not in self._unreadable:
                        self._unreadable.add(key)
                        _log.error("a Queue cannot be read; its jobs wait as if it did not exist", queue=name,
                                   error=str(e))
            self._quotas = built
        return self._quotas

    def _changed(self) -> None:
        self._quotas = None
        if self.on_change is not None:
            self.on_change()

    def _set(self, obj: dict[str, Any]) -> None:
        name = Body(obj).name
        if name:
            old = self.objects.get(name)
            self.objects[name] = obj
            # a status write of ours changes nothing placement reads
            if old is None or old.get("spec") != obj.get("spec"):
                self._changed()

    def _drop(self, name: str) -> None:
        if self.objects.pop(name, None) is not None:
            self._changed()

    def labels_of(self, namespace: str) -> dict[str, str]:
        """The labels of `namespace` for a Queue's namespaceSelector (only its name label when not stored)."""
        return self.namespaces.labels_of(namespace)

    def _namespace_changed(self, name: str, obj: dict[str, Any] | None) -> None:
        self._changed()

    async def list(self) -> str:
        """Fill the cache from a LIST (and hold the Namespace cache, filled, until `stop`); the resourceVersion
        to watch from ("" when the hub serves no Queues)."""
        if not self._holding:
            self._holding = True
            self.namespaces.subscribe(self._namespace_changed)
            await self.namespaces.hold()
        if self.rt is None:
            return ""
        listing = await self.hub.storage.list(self.rt)
        present = set()
        for obj in listing.items:
            present.add(Body(obj).name)
            self._set(obj)
        for name in set(self.objects) - present:
            self._drop(name)
        return listing.resource_version

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._drop(Body(obj).name)
        elif kind in ("ADDED", "MODIFIED"):
            self._set(obj)

    async def run(self, resource_version: str) -> None:
        """Watch from `resource_version` (what `list` returned), re-listing when the watch ends."""
        if self.rt is None:
            _log.info("the hub serves no Queue kind: placement runs without quotas")
            return
        await watch_hub_kind(self.hub, self.rt, relist=self.list, apply=self._apply, log=_log,
                             resource_version=resource_version)

    async def stop(self) -> None:
        """Let go of the Namespace cache (after `run` was cancelled)."""
        if self._holding:
            self._holding = False
            self.namespaces.unsubscribe(self._namespace_changed)
            await self.namespaces.release()


def _uid(obj: Mapping[str, Any]) -> str:
    return Body(obj).uid


def _resources(amounts: QuotaAmounts) -> dict[str, Any] | None:
    """QueueStatus.used/borrowed: GPUs per model, cpu and memory, zeros left out; None for nothing."""
    out: dict[str, Any] = {}
    gpus = {model: count for model, count in sorted(amounts.gpus.items()) if count}
    if gpus:
        out["gpus"] = gpus
    if amounts.cpu_milli:
        out["cpu"] = format_cpu(amounts.cpu_milli)
    if amounts.memory:
        out["memory"] = format_bytes(amounts.memory)
    return out or None


def queue_status(
    old: Mapping[str, Any] | None, *, usage: QueueUsage | None, pending: int, waiting_for_quota: int,
    head_block: str, generation: int | None, now: float, budget: BudgetState | None = None,
) -> dict[str, Any]:
    """A Queue's status: `usage` (None: nothing runs on it), `pending` jobs (waiting for a placement),
    `waiting_for_quota` of them refused by the quota in the last cycle, with `head_block` (the first's
    message). The Admitting condition's lastTransitionTime moves only when its state changes."""
    status: dict[str, Any] = {"conditions": list((old or {}).get("conditions") or ())}
    used = _resources(usage.used) if usage is not None else None
    borrowed = _resources(usage.borrowed) if usage is not None else None
    if used is not None:
        status["used"] = used
    if borrowed is not None:
        status["borrowed"] = borrowed
    status["pendingJobs"] = max(0, pending)
    status["admittedJobs"] = max(0, usage.gangs if usage is not None else 0)
    if waiting_for_quota:
        jobs = "1 job waits" if waiting_for_quota == 1 else f"{waiting_for_quota} jobs wait"
        set_condition(status, type=CONDITION_ADMITTING, state="False", reason="QuotaExceeded",
                      message=f"{jobs} for quota: {head_block}"[:4096], now=now)
    else:
        set_condition(status, type=CONDITION_ADMITTING, state="True", reason="Admitting",
                      message=f"admits its jobs within its quota ({status['admittedJobs']} admitted, "
                              f"{status['pendingJobs']} pending)", now=now)
    if budget is not None:
        status["spend"] = budget.spend
        set_condition(status, type=CONDITION_OVER_BUDGET, state=budget.state, reason=budget.reason,
                      message=budget.message[:4096], now=now)
    else:
        remove_condition(status, CONDITION_OVER_BUDGET)
    if generation is not None:
        status["observedGeneration"] = generation
    return status


class QueueStatusWriter:
    """Writes the Queues' statuses the placement loop computes, on change and coalesced (module docstring)."""

    def __init__(self, hub: HubContext, *, cache: QueueCache) -> None:
        self.hub = hub
        self.cache = cache
        self.interval = hub.settings.queues.status_interval_seconds
        #: name -> the status wanted now
        self._wanted: dict[str, dict[str, Any]] = {}
        #: name -> (the Queue's uid, the status last written to it)
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}
        self._wake = asyncio.Event()
        #: writes done since start (tests read it)
        self.writes = 0

    def _comparable(self, status: Mapping[str, Any]) -> dict[str, Any]:
        """What decides whether a write is due: everything but the condition's transition time."""
        out = {k: v for k, v in status.items() if k != "conditions"}
        out["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                             for c in status.get("conditions") or () if isinstance(c, Mapping)]
        return out

    def stored_status(self, name: str) -> Mapping[str, Any] | None:
        """What queue `name` shows: our last write to it (its watch event may not be in yet), else its status
        as the cache holds it."""
        obj = self.cache.objects.get(name)
        if obj is None:
            return None
        written = self._written.get(name)
        if written is not None and written[0] == _uid(obj):
            return written[1]
        status = obj.get("status")
        return status if isinstance(status, Mapping) else None

    def want(self, name: str, status: dict[str, Any]) -> None:
        """The status queue `name` should show; a write follows if it differs from what it shows."""
        shown = self.stored_status(name)
        if shown is not None and self._comparable(shown) == self._comparable(status):
            self._wanted.pop(name, None)
            return
        self._wanted[name] = status
        self._wake.set()

    async def run(self) -> None:
        while True:
            await wait_event(self._wake, 1.0)
            self._wake.clear()
            for name in sorted(self._wanted):
                if name not in self.cache.objects:
                    self._wanted.pop(name, None)
                    continue
                status = self._wanted.pop(name)
                await self._write(name, status)
            await asyncio.sleep(self.interval)

    async def _write(self, name: str, status: dict[str, Any]) -> None:
        rt = self.cache.rt
        if rt is None:
            return

        uid = ""

        def mutate(obj: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal uid
            uid = _uid(obj)
            if self._comparable(Body(obj).status) == self._comparable(status):
                return None
            obj["status"] = status
            return obj

        started = time.perf_counter()
        try:
            await self.hub.storage.guaranteed_update(rt, namespace=None, name=name, mutate=mutate,
                                                     subresource="status", trusted_status=True)
        except ApiError as e:
            if e.code != 404:
                _log.warning("could not write a Queue's status; will retry", queue=name, error=str(e))
                self._wanted.setdefault(name, status)
            return
        except StoreError as e:
            _log.warning("could not write a Queue's status; will retry", queue=name, error=str(e))
            self._wanted.setdefault(name, status)
            return
        self._written[name] = (uid, status)
        self.writes += 1
        self.hub.metrics.loop_phase_seconds.labels(loop="placement", phase="queue_status").observe(
            time.perf_counter() - started)

    def forget(self, name: str) -> None:
        self._wanted.pop(name, None)
        self._written.pop(name, None)
