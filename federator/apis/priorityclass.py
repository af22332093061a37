"""PriorityClass (scheduling.k8s.io/v1, cluster-scoped, short name pc): a named priority value, as in Kubernetes.

The hub serves Kubernetes' own kind, so `kubectl create priorityclass high
--value=1000` works against it, and a TrainingJob's `spec.priorityClassName`
resolves to `spec.priority` the way kube's Priority admission plugin resolves
a pod's (`resolve_priority`):

- a named class gives its value; no class of that name is an error
  ("no PriorityClass with name X was found");
- a job that sets both `priority` and a class of a different value is refused;
- a job that sets neither gets the global default class (`globalDefault:
  true`; the lowest value wins if a race made several) and its name, else 0.
  Unlike a pod, a job that sets `priority` without a class keeps it:
  TrainingJob's integer priority predates classes.

Validation follows kube's ValidatePriorityClass: `value` is an int32 at most
1,000,000,000 (HighestUserDefinablePriority); names starting with "system-"
are reserved except kube's two system classes with their own values;
`preemptionPolicy` is PreemptLowerPriority (the default) or Never; `value` and
`preemptionPolicy` may not change in an update. Only one class may be the
global default: that needs the other classes, so the hub's admission checks
it (`default_conflict`).

Bottom layer: pydantic and stdlib only, no I/O; validation never changes the
submitted object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr, ValidationError, model_validator

from federator.apis.common import (
    ApiModel,
    FieldError,
    ObjectMeta,
    ValidationSettings,
    errors_from_validation,
    finish_errors,
    raise_semantic,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_PREEMPTION_POLICY",
    "GROUP",
    "HIGHEST_USER_DEFINABLE_PRIORITY",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "SYSTEM_PRIORITY_CLASSES",
    "VERSION",
    "PriorityClass",
    "PriorityResolution",
    "default_conflict",
    "default_priority_class",
    "priorityclass_update_validator",
    "priorityclass_validator",
    "resolve_priority",
    "validate_priorityclass",
]

GROUP: Final = "scheduling.k8s.io"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "PriorityClass"
PLURAL: Final = "priorityclasses"
SINGULAR: Final = "priorityclass"
SHORT_NAMES: Final = ("pc",)

#: kube's scheduling.HighestUserDefinablePriority.
HIGHEST_USER_DEFINABLE_PRIORITY: Final = 1_000_000_000
#: kube's reserved prefix and the only classes allowed to carry it, with their values.
SYSTEM_PREFIX: Final = "system-"
SYSTEM_PRIORITY_CLASSES: Final[Mapping[str, int]] = {
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
}
DEFAULT_PREEMPTION_POLICY: Final = "PreemptLowerPriority"
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_MAX_DESCRIPTION = 32 * 1024

PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]


class PriorityClass(ApiModel):
    """A mapping from a priority class name to the integer priority of the jobs (and pods) that name it."""

    api_version: Literal["scheduling.k8s.io/v1"] = Field(default="scheduling.k8s.io/v1", alias="apiVersion")
    kind: Literal["PriorityClass"] = "PriorityClass"
    metadata: ObjectMeta
    value: StrictInt = Field(
        ge=_INT32_MIN, le=_INT32_MAX,
        description="The integer priority of jobs that name this class; higher places (and preempts) first. "
                    f"At most {HIGHEST_USER_DEFINABLE_PRIORITY} for user classes.")
    global_default: StrictBool = Field(
        default=False, alias="globalDefault",
        description="The priority of jobs that name no class and set no priority. At most one class may be it.")
    description: StrictStr = Field(default="", max_length=_MAX_DESCRIPTION,
                                   description="When this class should be used.")
    preemption_policy: PreemptionPolicy | None = Field(
        default=DEFAULT_PREEMPTION_POLICY, alias="preemptionPolicy",
        description="PreemptLowerPriority (default): jobs of this class may preempt lower-priority ones; "
                    "Never: they wait instead.")

    @model_validator(mode="after")
    def _cross_field(self) -> PriorityClass:
        raise_semantic(_semantic_errors(self.model_dump(by_alias=True, exclude_none=True)))
        return self


def _reserved_name_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    """kube's rule for the "system-" prefix; kept apart because the API server's hook leaves every other
    metadata.name check to the server (finish_errors would drop it)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if isinstance(name, str) and name.startswith(SYSTEM_PREFIX) and name not in SYSTEM_PRIORITY_CLASSES:
        shown = name if len(name) <= 64 else name[:64] + "..."
        return [("metadata.name", f"Forbidden: {shown}: priority class names with '{SYSTEM_PREFIX}' prefix are "
                                  f"reserved for system use only (known: {', '.join(SYSTEM_PRIORITY_CLASSES)})")]
    return []


def _semantic_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    """kube's ValidatePriorityClass rules across fields; tolerates any shape (it runs on raw input too)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    value = obj.get("value")
    if isinstance(name, str) and name.startswith(SYSTEM_PREFIX):
        wanted = SYSTEM_PRIORITY_CLASSES.get(name)
        if wanted is None:
            return _reserved_name_errors(obj)
        if type(value) is int and value != wanted:
            return [("value", f"Forbidden: the system priority class {name} has value {wanted}")]
        return []
    if type(value) is int and value > HIGHEST_USER_DEFINABLE_PRIORITY:
        return [("value", f"Forbidden: maximum allowed value of a user defined priority is "
                          f"{HIGHEST_USER_DEFINABLE_PRIORITY}")]
    return []


def validate_priorityclass(
    obj: object, *, settings: ValidationSettings | None = None, include_generic_metadata: bool = True
) -> list[FieldError]:
    """Every problem with a PriorityClass, as (field path, message); empty when it is valid. The name
    is a DNS subdomain, which the API server checks itself (as for every kind)."""
    settings = settings or ValidationSettings()
    if not isinstance(obj, Mapping):
        return [("", "Invalid value: must be a JSON object")]
    errors: list[FieldError] = []
    try:
        PriorityClass.model_validate(obj, context={"settings": settings})
    except ValidationError as exc:
        errors += errors_from_validation(exc, model=PriorityClass)
    errors += _semantic_errors(obj)
    errors = finish_errors(errors, settings, include_generic_metadata=include_generic_metadata)
    if not include_generic_metadata:
        errors = _reserved_name_errors(obj) + errors
    return errors


def priorityclass_validator(
    settings: ValidationSettings | None = None, *, include_generic_metadata: bool = False
) -> Callable[[dict[str, Any]], list[FieldError]]:
    """The apiserver's `ResourceType.validate` hook for PriorityClass."""
    chosen = settings or ValidationSettings()

    def validate(obj: dict[str, Any]) -> list[FieldError]:
        return validate_priorityclass(obj, settings=chosen, include_generic_metadata=include_generic_metadata)

    return validate


def priorityclass_update_validator() -> Callable[[dict[str, Any], dict[str, Any]], list[FieldError]]:
    """The `ResourceType.validate_update` hook: kube's ValidatePriorityClassUpdate (value and
    preemptionPolicy may not change)."""

    def validate(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errors: list[FieldError] = []
        if new.get("value") != old.get("value"):
            errors.append(("value", "Forbidden: may not be changed in an update."))
        policy = new.get("preemptionPolicy", DEFAULT_PREEMPTION_POLICY)
        if policy != old.get("preemptionPolicy", DEFAULT_PREEMPTION_POLICY):
            errors.append(("preemptionPolicy", "Forbidden: may not be changed in an update."))
        return errors

    return validate


# --------------------------------------------------------------------------- resolution (admission)


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def _value(obj: Mapping[str, Any]) -> int | None:
    value = obj.get("value")
    return value if type(value) is int else None


def default_priority_class(classes: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The global default class among stored PriorityClasses, or None. Should a race have made
    several, the one with the lowest value wins (kube's getDefaultPriorityClass), then the name."""
    defaults = [c for c in classes if c.get("globalDefault") is True and _value(c) is not None]
    if not defaults:
        return None
    return min(defaults, key=lambda c: (_value(c), _name(c)))


def default_conflict(candidate: Mapping[str, Any], classes: Iterable[Mapping[str, Any]]) -> str | None:
    """Why `candidate` may not be written, or None: it is marked globalDefault while another
    class already is (kube's Priority admission for PriorityClasses)."""
    if candidate.get("globalDefault") is not True:
        return None
    name = _name(candidate)
    for other in classes:
        if other.get("globalDefault") is True and _name(other) != name:
            return f"PriorityClass {_name(other)} is already marked as default. Only one default can exist"
    return None


@dataclass(frozen=True, slots=True)
class PriorityResolution:
    """What admission writes into a job's spec: its priority and the class it came from ("" for none);
    or, when `error` is set, why the job is refused (the field is spec.priorityClassName or spec.priority)."""

    priority: int = 0
    class_name: str = ""
    error: str = ""
    field: str = ""


def resolve_priority(spec: Mapping[str, Any], classes: Iterable[Mapping[str, Any]]) -> PriorityResolution:
    """A job's priority from its spec (`priority`, `priorityClassName`) and the stored PriorityClasses,
    as kube's Priority admission plugin resolves a pod's (see the module docstring)."""
    class_name = spec.get("priorityClassName")
    explicit = spec.get("priority")
    stated = explicit if type(explicit) is int else None
    if isinstance(class_name, str) and class_name:
        found = next((c for c in classes if _name(c) == class_name), None)
        value = _value(found) if found is not None else None
        if value is None:
            return PriorityResolution(error=f"no PriorityClass with name {class_name} was found",
                                      field="spec.priorityClassName")
        if stated is not None and stated != value:
            return PriorityResolution(
                error=f"the integer value of priority ({stated}) must not be provided in the job spec; priority "
                      f"admission computed {value} from the given PriorityClass name", field="spec.priority")
        return PriorityResolution(priority=value, class_name=class_name)
    if stated is not None:
        return PriorityResolution(priority=stated)
    default = default_priority_class(classes)
    if default is None:
        return PriorityResolution(priority=0)
    value = _value(default)
    assert value is not None
    return PriorityResolution(priority=value, class_name=_name(default))
