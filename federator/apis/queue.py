"""Queue (federator.dev/v1alpha1, cluster-scoped, short name q): a team's share of the federation's GPUs.

A Queue is what Kueue splits into a ClusterQueue and its LocalQueues, in one
cluster-scoped object, counted over every member cluster together:

    spec.namespaces      which namespaces' TrainingJobs may use it: `names`, a
                         metav1 `selector`, or both (either matching is enough).
                         The selector is evaluated against the labels of the
                         hub's Namespace object, plus the one every Kubernetes
                         namespace carries, `kubernetes.io/metadata.name: <ns>`
                         (NAMESPACE_NAME_LABEL); `selector: {}` selects every
                         namespace. At least one of the two is required.
    spec.quota           nominal quota: whole GPUs per GPU model (the model
                         names TrainingJob.spec.placement.gpuModels and
                         MemberCluster.spec.gpuModels use), optional cpu and
                         memory. A GPU model not listed has a nominal quota of
                         0; cpu or memory left out are not limited by the queue.
    spec.cohort          queues of one cohort lend each other idle quota.
    spec.borrowingLimit  at most this much borrowed from the cohort (same
                         shape; requires a cohort). Left out, or a resource left
                         out of it: any idle quota of the cohort may be borrowed.
    spec.weight          fair share between queues (> 0, default 1).
    spec.preemption      withinQueue: LowerPriority (default; a job may preempt
                         lower-priority jobs of its own queue) or Never;
                         reclaimBorrowed (default true): a queue under its
                         nominal quota takes back what others borrowed.
    spec.default         the default queue of the namespaces it selects: a new
                         TrainingJob there that names no queue gets this one
                         (the hub's admission, hubapi.queue_for_namespace).
    spec.budget          what the queue may spend per calendar month (UTC):
                         money, {amount: "1500.00", currency: USD} (the hub
                         prices GPU-hours in one currency, its --currency), or
                         {gpuHours: 2000}; exactly one of the two. Over it, the
                         queue's new jobs go only to already-paid clusters
                         (price 0 for their GPU model) or wait.
    status               written only by the hub's controllers (the /status
                         subresource is read-only over HTTP): used and borrowed
                         (same shape as the quota), pendingJobs, admittedJobs,
                         spend (this month's GPU-hours and money), conditions.

Enforcing the quota (admission, borrowing, fair share, preemption) is the
placement controller's job; this module only says what a valid Queue is.
Bottom layer: pydantic and stdlib only, no I/O; validation never changes the
submitted object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Final, Literal

from pydantic import (Field, PlainValidator, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationInfo,
                      WithJsonSchema, field_validator, model_validator)

from federator.apis.common import (
    ApiModel,
    Condition,
    DNSLabel,
    FieldError,
    LabelSelector,
    ObjectMeta,
    Quantity,
    Timestamp,
    ValidationSettings,
    api_validator,
    duplicate_errors,
    duplicate_scalar_errors,
    label_value_errors,
    metadata_errors,
    raise_semantic,
    selector_errors,
    selector_selects_nothing,
    settings_of,
    validate_object,
)
from federator.apis.trainingjob import NameToken

__all__ = [
    "CATEGORIES",
    "CURRENCY_PATTERN",
    "KIND",
    "MAX_BUDGET_AMOUNT",
    "MAX_BUDGET_GPU_HOURS",
    "MAX_GPUS_PER_MODEL",
    "MAX_GPU_MODELS",
    "MAX_NAMESPACE_NAMES",
    "MAX_TIERS",
    "MAX_WEIGHT",
    "NAMESPACE_NAME_LABEL",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "budget_amount",
    "budget_text",
    "spend_text",
    "Queue",
    "QueueBudget",
    "QueueNamespaces",
    "QueuePreemption",
    "QueueResources",
    "QueueSpec",
    "QueueSpend",
    "QueueStatus",
    "QueueTier",
    "tier_errors",
    "queue_validator",
    "resources_text",
    "validate_queue",
]

KIND: Final = "Queue"
PLURAL: Final = "queues"
SINGULAR: Final = "queue"
SHORT_NAMES: Final = ("q",)
CATEGORIES: Final = ("federator",)

#: The label kube puts on every namespace (NamespaceDefaultLabelName), the one a Queue's selector sees.
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
MAX_GPU_MODELS: Final = 64
MAX_NAMESPACE_NAMES: Final = 1024
MAX_GPUS_PER_MODEL: Final = 1_000_000
MAX_WEIGHT: Final = 1_000_000
#: at most this many tiers: the "tier" score then puts a lower tier ahead of every other score (placement)
MAX_TIERS: Final = 5
DEFAULT_SPILL_AFTER_SECONDS: Final = 300
MAX_SPILL_AFTER_SECONDS: Final = 30 * 86400

GpuCount = Annotated[StrictInt, Field(ge=0, le=MAX_GPUS_PER_MODEL)]
#: a monthly budget of at most this much money (any currency) or this many GPU-hours
MAX_BUDGET_AMOUNT: Final = Decimal(10) ** 12
MAX_BUDGET_GPU_HOURS: Final = 1e9
#: ISO 4217 style: exactly three uppercase letters (USD, EUR, JPY)
CURRENCY_PATTERN: Final = "^[A-Z]{3}$"
_AMOUNT = re.compile(r"[0-9]{1,16}(\.[0-9]{1,2})?")


def budget_amount(value: object) -> Decimal:
    """A budget amount (an integer or a decimal string with at most 2 decimals, >= 0, at most
    MAX_BUDGET_AMOUNT) as a Decimal; ValueError saying what is expected (never echoing a long value)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        kind = "a number with a fraction" if isinstance(value, float) else f"a {type(value).__name__}"
        raise ValueError(f"must be a decimal string with at most 2 decimals (\"1500.00\") or an integer, not {kind}"
                         + (" (write it as a string, e.g. \"1500.50\", so that it stays exact)"
                            if isinstance(value, float) else ""))
    if isinstance(value, int):
        amount = Decimal(value)
    else:
        text = value.strip()
        if text.startswith("-") and _AMOUNT.fullmatch(text[1:]):
            raise ValueError("must be greater than or equal to 0")
        if not _AMOUNT.fullmatch(text) or text != value:
            raise ValueError("not an amount: a decimal string with at most 2 decimals, e.g. \"1500.00\"")
        try:
            amount = Decimal(text)
        except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
            raise ValueError("is not a decimal amount") from None
    if amount < 0:
        raise ValueError("must be greater than or equal to 0")
    if amount > MAX_BUDGET_AMOUNT:
        raise ValueError(f"must be at most {MAX_BUDGET_AMOUNT:f} per month")
    return amount


def _validate_amount(value: object) -> str | int:
    budget_amount(value)
    return value  # type: ignore[return-value]  # budget_amount accepted only an int or a str


BudgetAmount = Annotated[
    str | int,
    PlainValidator(_validate_amount),
    WithJsonSchema({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": r"^[0-9]{1,16}(\.[0-9]{1,2})?$",
        "x-kubernetes-int-or-string": True,
    }),
]


class QueueResources(ApiModel):
    """An amount of resources: whole GPUs per GPU model, and optionally CPU and memory."""

    gpus: dict[NameToken, GpuCount] | None = Field(
        default=None, max_length=MAX_GPU_MODELS,
        description="Whole GPUs per GPU model, e.g. {A100: 64, H100: 16} (the model names of "
                    "spec.placement.gpuModels).")
    cpu: Quantity | None = Field(default=None, description="CPU cores, e.g. \"512\".")
    memory: Quantity | None = Field(default=None, description="Memory in bytes, e.g. \"4Ti\".")


class QueueNamespaces(ApiModel):
    """The namespaces whose TrainingJobs may use the queue: listed by name, chosen by a label selector
    over each Namespace's labels (kubernetes.io/metadata.name among them), or both (either is enough)."""

    names: list[DNSLabel] | None = Field(
        default=None, max_length=MAX_NAMESPACE_NAMES, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Namespaces by name.")
    selector: LabelSelector | None = Field(
        default=None,
        description="Namespaces whose labels match (the Namespace object's labels, and "
                    "kubernetes.io/metadata.name: its name). {} selects every namespace.")


class QueuePreemption(ApiModel):
    """When the hub may evict whole gangs to make room for this queue's jobs."""

    within_queue: Literal["LowerPriority", "Never"] = Field(
        default="LowerPriority", alias="withinQueue",
        description="LowerPriority: a job may preempt lower-priority jobs of this queue; Never: it waits.")
    reclaim_borrowed: StrictBool = Field(
        default=True, alias="reclaimBorrowed",
        description="While under its nominal quota, the queue takes back quota other queues of the cohort "
                    "borrowed, preempting their borrowing jobs.")


class QueueTier(ApiModel):
    """One tier of a queue's spill-over order: the clusters its selector picks, and how long a job waits with
    no room in this tier (and the ones before it) before the next tier is considered too."""

    name: DNSLabel = Field(description="Shown in why-not tables (\"tier 1 (on-prem) full for 3m of 5m\").")
    cluster_selector: LabelSelector = Field(
        alias="clusterSelector",
        description="The MemberClusters of this tier, by their metadata.labels ({} selects every cluster). A "
                    "cluster in several tiers belongs to the first.")
    spill_after_seconds: Annotated[StrictInt, Field(ge=0, le=MAX_SPILL_AFTER_SECONDS)] = Field(
        default=DEFAULT_SPILL_AFTER_SECONDS, alias="spillAfterSeconds",
        description="How long a job waits for room in this tier before the next one is considered too "
                    "(counted from when it last entered the placement queue). Ignored on the last tier.")


class QueueBudget(ApiModel):
    """What a queue may spend per calendar month (UTC): money (amount and currency) or GPU-hours, not both."""

    amount: BudgetAmount | None = Field(
        default=None,
        description="Money per calendar month (UTC), an integer or a decimal string with at most 2 decimals "
                    "(\"1500.00\"); needs currency. The GPU-hours of the queue's jobs are charged at the "
                    "MemberCluster.spec.cost price of the cluster they run on.")
    currency: StrictStr | None = Field(
        default=None, json_schema_extra={"pattern": CURRENCY_PATTERN},
        description="ISO 4217 code of amount (three uppercase letters, e.g. USD). MemberCluster prices are in "
                    "the hub's one currency (its --currency, default USD): a budget in another one is not "
                    "enforced, and the queue's OverBudget condition is Unknown (reason CurrencyMismatch).")
    gpu_hours: Annotated[StrictFloat, Field(ge=0, le=MAX_BUDGET_GPU_HOURS)] | None = Field(
        default=None, alias="gpuHours",
        description="GPU-hours per calendar month (UTC), whatever they cost: on-prem (price 0) hours count too.")

    @field_validator("currency")
    @classmethod
    def _currency(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(CURRENCY_PATTERN, value):
            raise ValueError("unknown currency format: an ISO 4217 code is three uppercase letters (USD, EUR, JPY)")
        return value


class QueueSpec(ApiModel):
    """A share of the federation's GPUs for the TrainingJobs of some namespaces."""

    namespaces: QueueNamespaces = Field(description="The namespaces whose jobs may use this queue.")
    quota: QueueResources | None = Field(
        default=None, description="Nominal quota over all member clusters; a GPU model not listed has none.")
    cohort: DNSLabel | None = Field(
        default=None, description="Queues of one cohort lend each other their idle quota.")
    borrowing_limit: QueueResources | None = Field(
        default=None, alias="borrowingLimit",
        description="At most this much borrowed from the cohort; a resource left out is not limited. "
                    "Requires cohort.")
    weight: Annotated[StrictFloat, Field(gt=0, le=MAX_WEIGHT)] = Field(
        default=1.0, description="Fair-share weight against the other queues (> 0).")
    preemption: QueuePreemption | None = None
    tiers: list[QueueTier] | None = Field(
        default=None, max_length=MAX_TIERS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="Spill-over order of the member clusters for this queue's jobs (for example on-prem, then "
                    "cloud, then spot): a job goes only to the first tier until it has waited that tier's "
                    "spillAfterSeconds, then the next is considered too, a lower tier always preferred. Clusters "
                    "in no tier never take this queue's jobs. Unset: every cluster, scored as usual.")
    is_default: StrictBool = Field(
        default=False, alias="default",
        description="The default queue of the namespaces it selects: their new jobs that name no queue get it.")
    budget: QueueBudget | None = Field(
        default=None,
        description="Spending limit per calendar month (UTC): {amount, currency} or {gpuHours}, exactly one. Once "
                    "this month's spend reaches it, the queue's new jobs go only to clusters whose GPU-hour "
                    "price for their model is 0 (already paid for, e.g. on-prem) or wait; running jobs are not "
                    "stopped. Only GPU time while a job runs is counted (status.spend).")


_MoneyText = Annotated[StrictStr, Field(max_length=32, pattern=r"^-?[0-9]{1,20}(\.[0-9]{1,6})?$")]
_Hours = Annotated[StrictFloat, Field(ge=0)]


class QueueSpend(ApiModel):
    """This calendar month's spend of the queue (UTC), accrued by the hub from the GPU time its jobs ran."""

    period: StrictStr = Field(pattern=r"^[0-9]{4}-[0-9]{2}$", description="The calendar month (UTC), e.g. 2026-11.")
    currency: StrictStr = Field(pattern=CURRENCY_PATTERN, description="The hub's currency (its --currency).")
    spent: _MoneyText = Field(description="Money spent this month: GPU-hours x their cluster's price (6 decimals).")
    gpu_hours: _Hours = Field(alias="gpuHours", description="GPU-hours run this month, whatever they cost.")
    projected: _MoneyText = Field(
        description="spent + the current burn rate (GPUs running now x their price per hour) x the rest of the "
                    "month.")
    projected_gpu_hours: _Hours = Field(
        alias="projectedGpuHours", description="gpuHours + GPUs running now x the hours left in the month.")
    remaining: _MoneyText | None = Field(
        default=None, description="Money budget left this month (negative when over it); money budgets only.")
    remaining_gpu_hours: StrictFloat | None = Field(
        default=None, alias="remainingGpuHours", description="GPU-hours left this month; gpuHours budgets only.")
    last_accrued_at: Timestamp = Field(
        alias="lastAccruedAt", description="spent and gpuHours count the GPU time run up to this moment.")


class QueueStatus(ApiModel):
    """What the hub's controllers observed. Written only by the hub."""

    used: QueueResources | None = Field(default=None, description="Resources of the queue's admitted jobs.")
    borrowed: QueueResources | None = Field(default=None, description="The part of used beyond the nominal quota.")
    pending_jobs: StrictInt = Field(default=0, alias="pendingJobs", ge=0, description="Jobs waiting for quota.")
    admitted_jobs: StrictInt = Field(default=0, alias="admittedJobs", ge=0, description="Jobs holding quota.")
    spend: QueueSpend | None = Field(default=None, description="This calendar month's GPU-hours and money.")
    conditions: list[Condition] | None = Field(
        default=None, max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    observed_generation: StrictInt | None = Field(default=None, alias="observedGeneration", ge=0)


class Queue(ApiModel):
    """A team's share of the federation's GPUs: quota per GPU model, borrowing in a cohort, fair-share
    weight and preemption policy, for the TrainingJobs of the namespaces it selects."""

    api_version: Literal["federator.dev/v1alpha1"] = Field(default="federator.dev/v1alpha1", alias="apiVersion")
    kind: Literal["Queue"] = "Queue"
    metadata: ObjectMeta
    spec: QueueSpec
    status: QueueStatus | None = None

    @model_validator(mode="after")
    def _cross_field(self, info: ValidationInfo) -> Queue:
        raise_semantic(_semantic_errors(self.model_dump(by_alias=True, exclude_none=True), settings_of(info)))
        return self


def _selector_value_errors(selector: object, *, path: str) -> list[FieldError]:
    """kube validates matchExpressions values as label values (the model keeps them plain strings)."""
    if not isinstance(selector, Mapping) or not isinstance(selector.get("matchExpressions"), list):
        return []
    errors: list[FieldError] = []
    for index, requirement in enumerate(selector["matchExpressions"]):
        values = requirement.get("values") if isinstance(requirement, Mapping) else None
        if isinstance(values, list):
            for v_index, value in enumerate(values):
                if isinstance(value, str):
                    problems = label_value_errors(value)
                    if problems:
                        shown = value if len(value) <= 64 else value[:64] + "..."
                        errors.append((f"{path}.matchExpressions[{index}].values[{v_index}]",
                                       f"Invalid value: {shown!r}: {problems[0]}"))
    return errors


def tier_errors(tiers: object, *, path: str = "spec.tiers") -> list[FieldError]:
    """What QueueTier's model cannot check of a tiers list (duplicate names, selector operators and values, a
    selector that selects nothing), as (field path under `path`, message); the replay's clusters file uses it too."""
    if not isinstance(tiers, list):
        return []
    errors = duplicate_errors(tiers, path=path, key="name")
    for index, tier in enumerate(tiers):
        if not isinstance(tier, Mapping):
            continue
        where = f"{path}[{index}].clusterSelector"
        errors += selector_errors(tier.get("clusterSelector"), path=where)
        errors += _selector_value_errors(tier.get("clusterSelector"), path=where)
        why = selector_selects_nothing(tier.get("clusterSelector"))
        if why is not None:
            errors.append((where, f"Invalid value: the selector selects no cluster: {why}"))
    return errors


def _budget_errors(budget: object) -> list[FieldError]:
    if not isinstance(budget, Mapping):
        return []
    money, hours = budget.get("amount") is not None, budget.get("gpuHours") is not None
    if money and hours:
        return [("spec.budget", "Invalid value: amount and gpuHours are exclusive: a budget is money or "
                                "GPU-hours per month, not both")]
    if not money and not hours:
        return [("spec.budget", "Required value: amount (with currency) or gpuHours")]
    if money and budget.get("currency") is None:
        return [("spec.budget.currency", "Required value: the ISO 4217 code of amount, e.g. USD")]
    if hours and budget.get("currency") is not None:
        return [("spec.budget.currency", "Forbidden: only with amount (a gpuHours budget has no currency)")]
    return []


def _semantic_errors(obj: Mapping[str, Any], settings: ValidationSettings) -> list[FieldError]:
    """Rules across fields, with exact paths. Tolerates any shape (it runs on raw input too)."""
    del settings  # no configurable caps yet; the signature matches the other kinds'
    errors = metadata_errors(obj.get("metadata"), namespaced=False)
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        namespaces = spec.get("namespaces")
        if isinstance(namespaces, Mapping):
            if namespaces.get("names") is None and namespaces.get("selector") is None:
                errors.append(("spec.namespaces", "Required value: names, selector, or both (selector: {} "
                                                  "selects every namespace)"))
            errors += duplicate_scalar_errors(namespaces.get("names"), path="spec.namespaces.names")
            errors += selector_errors(namespaces.get("selector"), path="spec.namespaces.selector")
            errors += _selector_value_errors(namespaces.get("selector"), path="spec.namespaces.selector")
        errors += tier_errors(spec.get("tiers"))
        errors += _budget_errors(spec.get("budget"))
        if spec.get("borrowingLimit") is not None and not spec.get("cohort"):
            errors.append(("spec.borrowingLimit", "Forbidden: may only be set together with spec.cohort "
                                                  "(a queue borrows from the other queues of its cohort)"))
    status = obj.get("status")
    if isinstance(status, Mapping):
        errors += duplicate_errors(status.get("conditions"), path="status.conditions", key="type")
    return errors


def validate_queue(
    obj: object, *, settings: ValidationSettings | None = None, include_generic_metadata: bool = True
) -> list[FieldError]:
    """Every problem with a Queue, as (field path, message); empty when it is valid."""
    return validate_object(obj, model=Queue, semantic=lambda o: _semantic_errors(o, settings or ValidationSettings()), settings=settings,
                           include_generic_metadata=include_generic_metadata)


def queue_validator(
    settings: ValidationSettings | None = None, *, include_generic_metadata: bool = False
) -> Callable[[dict[str, Any]], list[FieldError]]:
    """The apiserver's `ResourceType.validate` hook for Queue (`common.api_validator`)."""
    return api_validator(validate_queue, settings, include_generic_metadata=include_generic_metadata)


def _amount_text(value: object) -> str:
    """A stored amount as submitted (4, "512", "4Ti"); "" for anything else."""
    if isinstance(value, bool):
        return ""
    if isinstance(value, int):
        return str(value)
    return value if isinstance(value, str) and len(value) <= 64 else ""


def resources_text(amounts: object) -> str:
    """A QueueResources object as one Table cell: `A100=64,H100=16,cpu=512,memory=4Ti` (GPU models
    sorted); "" for nothing or something that is not one."""
    if not isinstance(amounts, Mapping):
        return ""
    parts: list[str] = []
    gpus = amounts.get("gpus")
    if isinstance(gpus, Mapping):
        parts += [f"{model}={text}" for model, count in sorted(gpus.items(), key=lambda kv: str(kv[0]))
                  if isinstance(model, str) and (text := _amount_text(count))]
    for resource in ("cpu", "memory"):
        text = _amount_text(amounts.get(resource))
        if text:
            parts.append(f"{resource}={text}")
    return ",".join(parts)


def budget_text(budget: object) -> str:
    """A Queue's spec.budget as one Table cell: "1500.00 USD" or "2000 GPU-hours"; "" for none."""
    if not isinstance(budget, Mapping):
        return ""
    amount, currency, hours = budget.get("amount"), budget.get("currency"), budget.get("gpuHours")
    text = _amount_text(amount)
    if text and isinstance(currency, str) and len(currency) <= 8:
        return f"{text} {currency}"
    if isinstance(hours, int | float) and not isinstance(hours, bool):
        return f"{hours:g} GPU-hours"
    return ""


def spend_text(spend: object) -> str:
    """A Queue's status.spend as one Table cell: "1512.40 USD, 380.5 GPU-hours"; "" for none."""
    if not isinstance(spend, Mapping):
        return ""
    spent, currency, hours = spend.get("spent"), spend.get("currency"), spend.get("gpuHours")
    parts: list[str] = []
    try:
        if isinstance(spent, str) and len(spent) <= 32 and isinstance(currency, str) and len(currency) <= 8:
            parts.append(f"{Decimal(spent):.2f} {currency}")
    except InvalidOperation:
        pass
    if isinstance(hours, int | float) and not isinstance(hours, bool):
        parts.append(f"{hours:.1f} GPU-hours")
    return ", ".join(parts)
