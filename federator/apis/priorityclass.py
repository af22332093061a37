"""PriorityClass (scheduling.k8s.io/v1, cluster-scoped, short name pc): a named priority value, as in Kubernetes.

Both halves serve Kubernetes' own kind through this module: the hub (so
`kubectl create priorityclass high --value=1000` works against it) and the
simulated members. `resolve_priority` is kube's Priority admission plugin over
any spec with `priorityClassName`, `priority` and `preemptionPolicy`: a pod's
in a member, a TrainingJob's in the hub:

- a named class gives its value and preemptionPolicy; no class of that name is
  an error ("no PriorityClass with name X was found");
- a spec that names no class gets the global default class (`globalDefault:
  true`; the lowest value wins if a race made several) and its name, else 0
  and PreemptLowerPriority;
- a `priority` or `preemptionPolicy` the spec sets that differs from the
  computed one is refused, in kube's words. Unlike a pod, a job that sets
  `priority` without a class keeps it: TrainingJob's integer priority
  predates classes.

Validation follows kube's ValidatePriorityClass: `value` is an int32 at most
1,000,000,000 (HighestUserDefinablePriority); names starting with "system-"
are reserved for kube's two system classes with their own values (kube's
IsKnownSystemPriorityClass); `preemptionPolicy` is PreemptLowerPriority (the
default) or Never; `value` and `preemptionPolicy` may not change in an update
(ValidatePriorityClassUpdate). `priorityclass_defaults` is what the server
does before validating (SetDefaults_PriorityClass, and decoding into the Go
type: an absent value is 0). Only one class may be the global default: that
needs the other classes, so admission checks it (`default_conflict`).

Bottom layer: pydantic and stdlib only, no I/O; validation never changes the
submitted object.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from pydantic import Field, StrictBool, StrictInt, StrictStr, model_validator

from federator.apis.common import (
    ApiModel,
    FieldError,
    ObjectMeta,
    ValidationSettings,
    api_validator,
    raise_semantic,
    validate_object,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_PREEMPTION_POLICY",
    "GROUP",
    "HIGHEST_USER_DEFINABLE_PRIORITY",
    "KIND",
    "PLURAL",
    "PREEMPTION_POLICIES",
    "SHORT_NAMES",
    "SINGULAR",
    "SYSTEM_PRIORITY_CLASSES",
    "VERSION",
    "PriorityClass",
    "PriorityResolution",
    "default_conflict",
    "default_priority_class",
    "priorityclass_defaults",
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
#: Longest class name repeated in an admission message (hostile input stays cheap to answer).
_MAX_NAME_SHOWN = 253

PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]
PREEMPTION_POLICIES: Final[tuple[str, ...]] = get_args(PreemptionPolicy)


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


def _system_name_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    """kube's rule for the "system-" prefix (IsKnownSystemPriorityClass, reported on metadata.name); kept
    apart because the API server's hook leaves every other metadata.name check to the server
    (finish_errors would drop it). A value of the wrong type is left to the type check."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name.startswith(SYSTEM_PREFIX):
        return []
    value = obj.get("value", 0)
    wanted = SYSTEM_PRIORITY_CLASSES.get(name)
    if wanted is None:
        why = f"{_shown(name)} is not a known system priority class"
    elif type(value) is int and value != wanted:
        why = f"value of {name} PriorityClass must be {wanted}"
    elif obj.get("globalDefault") is True:
        why = f"globalDefault of {name} PriorityClass must be false"
    else:
        return []
    return [("metadata.name", f"Forbidden: priority class names with '{SYSTEM_PREFIX}' prefix are reserved for "
                              f"system use only. error: {why}")]


def _semantic_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    """kube's ValidatePriorityClass rules across fields; tolerates any shape (it runs on raw input too)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if isinstance(name, str) and name.startswith(SYSTEM_PREFIX):
        return _system_name_errors(obj)
    value = obj.get("value")
    if type(value) is int and value > HIGHEST_USER_DEFINABLE_PRIORITY:
        return [("value", f"Forbidden: maximum allowed value of a user defined priority is "
                          f"{HIGHEST_USER_DEFINABLE_PRIORITY}")]
    return []


def priorityclass_defaults(obj: dict[str, Any]) -> None:
    """The server's defaulting of a PriorityClass, in place: SetDefaults_PriorityClass (preemptionPolicy),
    and what decoding into kube's Go type does (`value` is a plain int32, so absent or null is 0;
    `globalDefault` is omitempty, so false is dropped)."""
    if obj.get("value", None) is None:
        obj["value"] = 0
    if obj.get("preemptionPolicy") is None:
        obj["preemptionPolicy"] = DEFAULT_PREEMPTION_POLICY
    if obj.get("globalDefault") is False:
        del obj["globalDefault"]


def validate_priorityclass(
    obj: object, *, settings: ValidationSettings | None = None, include_generic_metadata: bool = True
) -> list[FieldError]:
    """Every problem with a PriorityClass, as (field path, message); empty when it is valid. The name
    is a DNS subdomain, which the API server checks itself (as for every kind)."""
    errors = validate_object(obj, model=PriorityClass, semantic=_semantic_errors, settings=settings,
                             include_generic_metadata=include_generic_metadata)
    if not include_generic_metadata and isinstance(obj, Mapping):
        errors = _system_name_errors(obj) + errors
    return errors


def priorityclass_validator(
    settings: ValidationSettings | None = None, *, include_generic_metadata: bool = False
) -> Callable[[dict[str, Any]], list[FieldError]]:
    """The apiserver's `ResourceType.validate` hook for PriorityClass (`common.api_validator`)."""
    return api_validator(validate_priorityclass, settings, include_generic_metadata=include_generic_metadata)


def priorityclass_update_validator() -> Callable[[dict[str, Any], dict[str, Any]], list[FieldError]]:
    """The `ResourceType.validate_update` hook: kube's ValidatePriorityClassUpdate (value may not change:
    Forbidden; preemptionPolicy is an immutable field: Invalid)."""

    def validate(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errors: list[FieldError] = []
        if new.get("value") != old.get("value"):
            errors.append(("value", "Forbidden: may not be changed in an update."))
        policy = new.get("preemptionPolicy", DEFAULT_PREEMPTION_POLICY)
        if policy != old.get("preemptionPolicy", DEFAULT_PREEMPTION_POLICY):
            shown = json.dumps(policy)[:80] if isinstance(policy, str) else "null" if policy is None else "the new value"
            errors.append(("preemptionPolicy", f"Invalid value: {shown}: field is immutable"))
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


def _policy(obj: Mapping[str, Any]) -> str:
    policy = obj.get("preemptionPolicy")
    return policy if isinstance(policy, str) and policy else DEFAULT_PREEMPTION_POLICY


def _shown(name: str) -> str:
    return name if len(name) <= _MAX_NAME_SHOWN else name[:_MAX_NAME_SHOWN] + "..."


def default_priority_class(classes: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The global default class among stored PriorityClasses, or None. Should a race have made
    several, the one with the lowest value wins (kube's getDefaultPriorityClass), then the name."""
    defaults = [c for c in classes if c.get("globalDefault") is True and _value(c) is not None]
    if not defaults:
        return None
    return min(defaults, key=lambda c: (_value(c), _name(c)))


def default_conflict(candidate: Mapping[str, Any], classes: Iterable[Mapping[str, Any]]) -> str | None:
    """Why `candidate` may not be written, or None: it is marked globalDefault while another class is
    the default (kube's Priority admission for PriorityClasses, on create and update; the message names
    the class getDefaultPriorityClass picks)."""
    if candidate.get("globalDefault") is not True:
        return None
    current = default_priority_class(classes)
    if current is None or _name(current) == _name(candidate):
        return None
    return f"PriorityClass {_name(current)} is already marked as default. Only one default can exist"


@dataclass(frozen=True, slots=True)
class PriorityResolution:
    """What admission writes into a spec: its priority, preemptionPolicy and the class they came from
    ("" for none); or, when `error` is set, why the object is refused (`field` is spec.priorityClassName,
    spec.priority or spec.preemptionPolicy)."""

    priority: int = 0
    class_name: str = ""
    preemption_policy: str = DEFAULT_PREEMPTION_POLICY
    error: str = ""
    field: str = ""


def resolve_priority(
    spec: Mapping[str, Any], classes: Iterable[Mapping[str, Any]], *, subject: Literal["job", "pod"] = "job"
) -> PriorityResolution:
    """The priority of a spec (`priorityClassName`, `priority`, `preemptionPolicy`) from the stored
    PriorityClasses, as kube's Priority admission plugin resolves a pod's (see the module docstring).
    `subject` names the spec in the messages, and "job" keeps a priority stated without a class.
    Values of the wrong type count as unset: validation names them."""
    known = list(classes)
    class_name = spec.get("priorityClassName")
    explicit = spec.get("priority")
    stated = explicit if type(explicit) is int else None
    if isinstance(class_name, str) and class_name:
        found = next((c for c in known if _name(c) == class_name), None)
        value = _value(found) if found is not None else None
        if found is None or value is None:
            return PriorityResolution(error=f"no PriorityClass with name {_shown(class_name)} was found",
                                      field="spec.priorityClassName")
        chosen = PriorityResolution(priority=value, class_name=class_name, preemption_policy=_policy(found))
    elif stated is not None and subject == "job":
        return PriorityResolution(priority=stated)
    else:
        default = default_priority_class(known)
        value = _value(default) if default is not None else None
        chosen = PriorityResolution() if default is None or value is None else \
            PriorityResolution(priority=value, class_name=_name(default), preemption_policy=_policy(default))
    if stated is not None and stated != chosen.priority:
        return PriorityResolution(
            error=f"the integer value of priority ({stated}) must not be provided in {subject} spec; priority "
                  f"admission controller computed {chosen.priority} from the given PriorityClass name",
            field="spec.priority")
    policy = spec.get("preemptionPolicy")
    if isinstance(policy, str) and policy != chosen.preemption_policy:
        return PriorityResolution(
            error=f"the string value of PreemptionPolicy ({_shown(policy)}) must not be provided in {subject} "
                  f"spec; priority admission controller computed {chosen.preemption_policy} from the given "
                  "PriorityClass name",
            field="spec.preemptionPolicy")
    return chosen
