"""Building blocks shared by the hub's API kinds (TrainingJob, MemberCluster).

What lives here: the API group and version, `ValidationSettings` (the
configurable caps), name and label validation in Kubernetes' own words
(DNS-1123 labels and subdomains, qualified names: the only copy, which the
API server, the simulator and the CLI use too), Kubernetes resource
quantities, RFC 3339 timestamps, `ObjectMeta`, `Condition`, `LabelSelector`,
and the translation of pydantic errors into kube-style `(field path, message)`
pairs.

This is the bottom layer: it imports only pydantic and the standard library,
does no I/O and keeps no global mutable state. It must never echo a value it
was told is secret (see `SECRET_PATH_PREFIXES` in the kinds) and never render
more than a short prefix of any hostile input in an error message.
"""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from federator.apis.quantity import MAX_QUANTITY, QuantityError, parse_quantity
from federator.apis.timestamps import require_time

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "GROUP_VERSION",
    "MAX_QUANTITY",
    "SEMANTIC_ERROR",
    "AnnotationMap",
    "ApiModel",
    "Condition",
    "ConditionStatus",
    "DNSLabel",
    "DNSSubdomain",
    "FieldError",
    "GENERIC_METADATA_FIELDS",
    "HIDDEN_VALUE_ERROR",
    "REDACTED",
    "LabelMap",
    "LabelSelector",
    "LabelSelectorRequirement",
    "ObjectMeta",
    "OwnerReference",
    "Quantity",
    "QuantityError",
    "Timestamp",
    "ValidationSettings",
    "dns1035_label_errors",
    "dns1123_label_errors",
    "dns1123_subdomain_errors",
    "errors_from_validation",
    "field_path",
    "label_key_errors",
    "label_value_errors",
    "parse_quantity",
    "raise_semantic",
    "selector_selects_nothing",
    "settings_of",
    "split_cause",
]

API_GROUP = "federator.dev"
API_VERSION = "v1alpha1"
GROUP_VERSION = f"{API_GROUP}/{API_VERSION}"

FieldError = tuple[str, str]
"""A kube-style validation cause: (dotted field path such as "spec.roles[1].replicas", message)."""

# The pydantic error type used for rules that the kinds' semantic passes report
# themselves, with exact paths; `errors_from_validation` callers drop it to
# avoid reporting the same problem twice.
SEMANTIC_ERROR = "federator_semantic"
# A validator raises this error type when its input must not be repeated back
# (a URL with a password in it, say): the message shows "<redacted>" instead.
HIDDEN_VALUE_ERROR = "federator_hidden_value"
REDACTED = "<redacted>"
"""What the hub shows in place of a stored credential."""

# How much of a hostile value an error message may repeat.
_MAX_RENDERED = 64


# --------------------------------------------------------------------------- quantities


# The pattern controller-gen puts on resource.Quantity fields; RE2-compatible for CRDs.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def _validate_quantity(value: object) -> str | int:
    """Keep the submitted form (so stored objects round-trip); reject bad or negative ones.
    The API takes quantities as strings or integers only (a float such as 1.5
    does not round-trip exactly), so floats are refused here."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"must be a quantity string or an integer, not {json_type(value)}")
    try:
        amount = parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    if amount < 0:
        raise ValueError("must be greater than or equal to 0")
    return value


Quantity = Annotated[
    str | int,
    PlainValidator(_validate_quantity),
    WithJsonSchema({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }),
]
"""A non-negative Kubernetes quantity, kept as submitted ("8", "500m", "32Gi" or 4)."""


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True, slots=True)
class ValidationSettings:
    """Caps that make a spec "absurd". Passed to validation as pydantic context.

    Quantities are Kubernetes strings so that an operator configures them the
    way they write a pod spec ("64Ti", not 70368744177664).
    """

    max_replicas_per_role: int = 1024
    max_total_replicas: int = 8192
    max_roles: int = 32
    max_cpu_per_pod: str = "1024"
    max_memory_per_pod: str = "64Ti"
    max_gpus_per_pod: int = 64
    max_rdma_per_pod: int = 64
    max_bandwidth_gbps: float = 100_000.0
    max_cost_per_gpu_hour: float = 1_000_000.0
    max_requeues: int = 1000
    #: a full pod template's containers (and, separately, init containers): a sane cap far above real use
    max_containers_per_pod: int = 64
    #: a role template's size as compact JSON (the whole job must stay under the API's request limit)
    max_template_bytes: int = 128 * 1024
    #: spec.checkpoint.saveGraceSeconds, at most (an evicted pod keeps its GPUs that long)
    max_save_grace_seconds: int = 3600
    # A request that produces thousands of errors gets the first N and a count.
    max_errors: int = 100
    cpu_cap: Fraction = field(init=False, repr=False)
    memory_cap: Fraction = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("max_replicas_per_role", "max_total_replicas", "max_roles", "max_gpus_per_pod",
                     "max_rdma_per_pod", "max_requeues", "max_errors", "max_containers_per_pod",
                     "max_template_bytes", "max_save_grace_seconds"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"ValidationSettings.{name} must be a positive integer, got {value!r}")
        for name in ("max_bandwidth_gbps", "max_cost_per_gpu_hour"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"ValidationSettings.{name} must be a positive number, got {value!r}")
        try:
            cpu_cap = parse_quantity(self.max_cpu_per_pod)
            memory_cap = parse_quantity(self.max_memory_per_pod)
        except QuantityError as exc:
            raise ValueError(f"ValidationSettings: {exc}") from None
        if cpu_cap <= 0 or memory_cap <= 0:
            raise ValueError("ValidationSettings: resource caps must be positive")
        object.__setattr__(self, "cpu_cap", cpu_cap)
        object.__setattr__(self, "memory_cap", memory_cap)


_DEFAULT_SETTINGS = ValidationSettings()


def settings_of(info: ValidationInfo | None) -> ValidationSettings:
    """The settings a validation runs under: `context={"settings": ...}`, else the defaults."""
    context = info.context if info is not None else None
    if isinstance(context, Mapping):
        settings = context.get("settings")
        if isinstance(settings, ValidationSettings):
            return settings
    return _DEFAULT_SETTINGS


# --------------------------------------------------------------------------- base model


class ApiModel(BaseModel):
    """Base of every API object part: camelCase on the wire, unknown fields rejected.

    Only the wire (alias) names validate, so `max_requeues` is an unknown field
    just as it is for kube-apiserver. Python code that builds objects passes
    `by_name=True` to `model_validate`.
    """

    model_config = ConfigDict(
        extra="forbid",
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
        allow_inf_nan=False,
        frozen=True,
        hide_input_in_errors=True,
    )


def raise_semantic(errors: list[FieldError]) -> None:
    """Used by model validators: fail with every cross-field error in one message."""
    if errors:
        text = "; ".join(f"{path}: {message}" if path else message for path, message in errors)
        raise PydanticCustomError(SEMANTIC_ERROR, "{text}", {"text": text})


# --------------------------------------------------------------------------- names and labels

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*"
_QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = rf"({_QUALIFIED_NAME})?"
# Matched with fullmatch only: `^...$` with re.match would also accept a trailing newline ("name\n").
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN)
_QUALIFIED_NAME_RE = re.compile(_QUALIFIED_NAME)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE)
# JSON-schema patterns (ECMA and pydantic-core's regex: `$` is the end of the text there).
_LABEL_KEY_PATTERN = rf"^({_DNS1123_SUBDOMAIN}/)?{_QUALIFIED_NAME}$"
_LABEL_VALUE_PATTERN = rf"^{_LABEL_VALUE}$"
_QUALIFIED_NAME_MESSAGE = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                           "an alphanumeric character")


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    """kube's validation.RegexError, to the character (its examples are joined by ",  or ")."""
    shown = "".join(f"{' or ' if i else ''}'{e}', " for i, e in enumerate(examples))
    return f"{message} ({'e.g. ' + shown if shown else ''}regex used for validation is '{pattern}')"


def _label_errors(value: str, pattern: str, message: str, *examples: str) -> list[str]:
    """kube's label checks: at most 63 characters, and the pattern (its RegexError when not)."""
    errors: list[str] = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if not re.fullmatch(pattern, value):
        errors.append(_regex_error(message, pattern, *examples))
    return errors


def dns1123_label_errors(value: str) -> list[str]:
    """Why `value` is not an RFC 1123 label (kube's IsDNS1123Label, in its words); empty when it is one."""
    return _label_errors(value, _DNS1123_LABEL, "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                         "characters or '-', and must start and end with an alphanumeric character",
                         "my-name", "123-abc")


_DNS1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"


def dns1035_label_errors(value: str) -> list[str]:
    """Why `value` is not an RFC 1035 label (kube's IsDNS1035Label: Service names); empty when it is one."""
    return _label_errors(value, _DNS1035_LABEL, "a DNS-1035 label must consist of lower case alphanumeric characters "
                         "or '-', start with an alphabetic character, and end with an alphanumeric character",
                         "my-name", "abc-123")


def dns1123_subdomain_errors(value: str) -> list[str]:
    """Why `value` is not an RFC 1123 subdomain (kube's IsDNS1123Subdomain); empty when it is one."""
    errors: list[str] = []
    if len(value) > 253:
        errors.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errors.append(_regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
            "must start and end with an alphanumeric character", _DNS1123_SUBDOMAIN, "example.com"))
    return errors


def label_key_errors(key: str) -> list[str]:
    """Why `key` is not a qualified name, i.e. a valid label or annotation key or finalizer: [prefix/]name
    (kube's IsQualifiedName, in its words); empty when it is one."""
    parts = key.split("/")
    if len(parts) > 2:
        return ["a qualified name " + _regex_error(_QUALIFIED_NAME_MESSAGE, _QUALIFIED_NAME, "MyName", "my.name",
                                                   "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    errors: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        if not parts[0]:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {e}" for e in dns1123_subdomain_errors(parts[0])]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        errors.append("name part " + _regex_error(_QUALIFIED_NAME_MESSAGE, _QUALIFIED_NAME, "MyName", "my.name",
                                                  "123-abc"))
    return errors


def label_value_errors(value: str) -> list[str]:
    """Why `value` is not a valid label value (kube's IsValidLabelValue; empty is valid)."""
    errors: list[str] = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if not _LABEL_VALUE_RE.fullmatch(value):
        errors.append(_regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character", _LABEL_VALUE, "MyValue", "my_value", "12345"))
    return errors


def _checker(explain: Callable[[str], list[str]]) -> Callable[[str], str]:
    def check(value: str) -> str:
        problems = explain(value)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    return check


DNSLabel = Annotated[
    StrictStr,
    AfterValidator(_checker(dns1123_label_errors)),
    WithJsonSchema({"type": "string", "maxLength": 63, "pattern": f"^{_DNS1123_LABEL}$"}),
]
"""A lowercase RFC 1123 label: at most 63 characters of [a-z0-9-], alphanumeric at both ends."""

DNSSubdomain = Annotated[
    StrictStr,
    AfterValidator(_checker(dns1123_subdomain_errors)),
    WithJsonSchema({"type": "string", "maxLength": 253, "pattern": f"^{_DNS1123_SUBDOMAIN}$"}),
]
"""A lowercase RFC 1123 subdomain (dot-separated labels, at most 253 characters)."""

LabelKey = Annotated[
    StrictStr,
    AfterValidator(_checker(label_key_errors)),
    WithJsonSchema({"type": "string", "maxLength": 317, "pattern": _LABEL_KEY_PATTERN}),
]
LabelValue = Annotated[
    StrictStr,
    AfterValidator(_checker(label_value_errors)),
    WithJsonSchema({"type": "string", "maxLength": 63, "pattern": _LABEL_VALUE_PATTERN}),
]
LabelMap = dict[LabelKey, LabelValue]
"""A Kubernetes label map (keys [prefix/]name, values at most 63 characters)."""

_MAX_ANNOTATIONS_BYTES = 256 * 1024


def _check_annotation_size(value: dict[str, str]) -> dict[str, str]:
    total = sum(len(k.encode()) + len(v.encode()) for k, v in value.items())
    if total > _MAX_ANNOTATIONS_BYTES:
        raise ValueError(f"Too long: must have at most {_MAX_ANNOTATIONS_BYTES} bytes")
    return value


AnnotationMap = Annotated[dict[LabelKey, StrictStr], AfterValidator(_check_annotation_size)]
"""Annotations: label-style keys, free-text values, 256 KiB in total (kube-apiserver's limit)."""


# --------------------------------------------------------------------------- time


def _check_time(value: str) -> str:
    require_time(value)
    return value


Timestamp = Annotated[
    StrictStr, AfterValidator(_check_time), WithJsonSchema({"type": "string", "format": "date-time"})
]
"""An RFC 3339 timestamp string, kept as submitted."""


# --------------------------------------------------------------------------- metadata


class OwnerReference(ApiModel):
    """Identifies an owning object; the garbage collector deletes dependents of a deleted owner."""

    api_version: StrictStr = Field(alias="apiVersion", min_length=1, max_length=316)
    kind: StrictStr = Field(min_length=1, max_length=63)
    name: StrictStr = Field(min_length=1, max_length=253)
    uid: StrictStr = Field(min_length=1, max_length=128)
    controller: bool | None = Field(default=None, strict=True)
    block_owner_deletion: bool | None = Field(default=None, alias="blockOwnerDeletion", strict=True)


class ObjectMeta(ApiModel):
    """Standard Kubernetes object metadata. The server sets uid, resourceVersion and the timestamps."""

    name: StrictStr | None = Field(default=None, description="Name, unique within the namespace (or cluster).")
    generate_name: StrictStr | None = Field(
        default=None, alias="generateName", max_length=253,
        description="Prefix from which the server generates a unique name when name is empty.",
    )
    namespace: StrictStr | None = Field(default=None, description="Namespace of a namespaced object.")
    uid: StrictStr | None = Field(default=None, max_length=128)
    resource_version: StrictStr | None = Field(default=None, alias="resourceVersion", max_length=64)
    generation: StrictInt | None = Field(default=None, ge=0)
    creation_timestamp: Timestamp | None = Field(default=None, alias="creationTimestamp")
    deletion_timestamp: Timestamp | None = Field(default=None, alias="deletionTimestamp")
    deletion_grace_period_seconds: StrictInt | None = Field(default=None, alias="deletionGracePeriodSeconds", ge=0)
    labels: LabelMap | None = None
    annotations: AnnotationMap | None = None
    owner_references: list[OwnerReference] | None = Field(default=None, alias="ownerReferences", max_length=64)
    finalizers: list[Annotated[StrictStr, AfterValidator(_checker(label_key_errors))]] | None = Field(
        default=None, max_length=64
    )
    managed_fields: list[dict[str, Any]] | None = Field(default=None, alias="managedFields")
    self_link: StrictStr | None = Field(default=None, alias="selfLink")


def metadata_errors(metadata: object, *, namespaced: bool, path: str = "metadata") -> list[FieldError]:
    """Name and namespace rules that depend on the kind: names are RFC 1123 labels.

    Names must be labels (not just subdomains) because the hub puts them into
    label values and pod names on member clusters, where 63 characters is the limit.
    """
    if not isinstance(metadata, Mapping):
        return []  # the model reports the type error
    errors: list[FieldError] = []
    name = metadata.get("name")
    generate_name = metadata.get("generateName")
    if isinstance(name, str) and name:
        errors += [(f"{path}.name", f"Invalid value: {_render(name)}: {e}") for e in dns1123_label_errors(name)]
    elif name is None or name == "":
        if not generate_name:
            errors.append((f"{path}.name", "Required value: name or generateName is required"))
        elif isinstance(generate_name, str) and dns1123_label_errors(generate_name + "a"):
            errors.append((f"{path}.generateName", f"Invalid value: {_render(generate_name)}: "
                           "must be the prefix of an RFC 1123 label"))
    namespace = metadata.get("namespace")
    if namespaced:
        if isinstance(namespace, str) and namespace:
            errors += [(f"{path}.namespace", f"Invalid value: {_render(namespace)}: {e}")
                       for e in dns1123_label_errors(namespace)]
    elif namespace not in (None, ""):
        errors.append((f"{path}.namespace", "Forbidden: not allowed on this type"))
    return errors


# --------------------------------------------------------------------------- conditions and selectors

ConditionStatus = Literal["True", "False", "Unknown"]
_CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
_CONDITION_TYPE = rf"^({_DNS1123_SUBDOMAIN}/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"


class Condition(ApiModel):
    """One aspect of an object's state, in the shape of metav1.Condition."""

    type: StrictStr = Field(max_length=316, pattern=_CONDITION_TYPE, description="Type in CamelCase, e.g. Ready.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: StrictStr = Field(
        default="", max_length=1024, pattern=rf"({_CONDITION_REASON})|^$",
        description="Machine-readable CamelCase reason for the last transition.",
    )
    message: StrictStr = Field(default="", max_length=32768, description="Human-readable details.")
    last_transition_time: Timestamp = Field(
        alias="lastTransitionTime", description="When status last changed (RFC 3339)."
    )
    observed_generation: StrictInt | None = Field(default=None, alias="observedGeneration", ge=0)


def duplicate_errors(items: object, *, path: str, key: str) -> list[FieldError]:
    """`path[i].key: Duplicate value` for each list entry whose `key` was seen before."""
    if not isinstance(items, list):
        return []
    seen: set[str] = set()
    errors: list[FieldError] = []
    for index, item in enumerate(items):
        value = item.get(key) if isinstance(item, Mapping) else None
        if isinstance(value, str):
            if value in seen:
                errors.append((f"{path}[{index}].{key}", f"Duplicate value: {_render(value)}"))
            seen.add(value)
    return errors


def duplicate_scalar_errors(items: object, *, path: str) -> list[FieldError]:
    """`path[i]: Duplicate value` for repeated strings in a list that is a set."""
    if not isinstance(items, list):
        return []
    seen: set[str] = set()
    errors: list[FieldError] = []
    for index, value in enumerate(items):
        if isinstance(value, str):
            if value in seen:
                errors.append((f"{path}[{index}]", f"Duplicate value: {_render(value)}"))
            seen.add(value)
    return errors


class LabelSelectorRequirement(ApiModel):
    """key, operator (In, NotIn, Exists, DoesNotExist) and values, as in metav1.LabelSelectorRequirement."""

    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[StrictStr] | None = Field(default=None, max_length=256)

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        raise_semantic(selector_requirement_errors(self.model_dump(exclude_none=True), path=""))
        return self


def selector_requirement_errors(requirement: object, *, path: str) -> list[FieldError]:
    if not isinstance(requirement, Mapping):
        return []
    operator = requirement.get("operator")
    values = requirement.get("values")
    where = f"{path}.values" if path else "values"
    if operator in ("In", "NotIn") and not values:
        return [(where, f"Required value: must be specified when `operator` is '{operator}'")]
    if operator in ("Exists", "DoesNotExist") and values:
        return [(where, f"Forbidden: may not be specified when `operator` is '{operator}'")]
    return []


class LabelSelector(ApiModel):
    """Selects objects by label: every matchLabels pair and every matchExpressions requirement must hold."""

    match_labels: LabelMap | None = Field(default=None, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, alias="matchExpressions", max_length=64
    )


def selector_errors(selector: object, *, path: str) -> list[FieldError]:
    if not isinstance(selector, Mapping):
        return []
    expressions = selector.get("matchExpressions")
    errors: list[FieldError] = []
    if isinstance(expressions, list):
        for index, requirement in enumerate(expressions):
            errors += selector_requirement_errors(requirement, path=f"{path}.matchExpressions[{index}]")
    return errors


def selector_selects_nothing(selector: object) -> str | None:
    """Why a (structurally valid) label selector can match no object at all, or None: its terms contradict
    each other (a key both required and forbidden, a value outside an In it must also satisfy...)."""
    if not isinstance(selector, Mapping):
        return None
    # key -> the values it may take (keys without an In or matchLabels term: any), those it may not, and
    # the keys that must be present / absent
    allowed: dict[str, set[str]] = {}
    forbidden: dict[str, set[str]] = {}
    present: set[str] = set()
    absent: set[str] = set()
    labels = selector.get("matchLabels")
    if isinstance(labels, Mapping):
        for key, value in labels.items():
            allowed[str(key)] = {str(value)}
            present.add(str(key))
    expressions = selector.get("matchExpressions")
    for requirement in expressions if isinstance(expressions, list) else ():
        if not isinstance(requirement, Mapping):
            continue
        key, operator = str(requirement.get("key")), requirement.get("operator")
        values = {str(v) for v in requirement.get("values") or ()}
        if operator == "In":
            present.add(key)
            allowed[key] = allowed[key] & values if key in allowed else values
        elif operator == "NotIn":
            forbidden.setdefault(key, set()).update(values)
        elif operator == "Exists":
            present.add(key)
        elif operator == "DoesNotExist":
            absent.add(key)
    for key in sorted(present & absent):
        return f"label {key!r} must both exist and not exist"
    for key, possible in sorted(allowed.items()):
        if not possible - forbidden.get(key, set()):
            return f"no value of label {key!r} satisfies every term"
    return None


# --------------------------------------------------------------------------- errors


def json_type(value: object) -> str:
    """What a decoded JSON/YAML value is, in JSON's words (object, array, string, null...), for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _render(value: object) -> str:
    """A short JSON rendering of a submitted value, safe to put in a message."""
    if isinstance(value, Mapping) or isinstance(value, list | tuple):
        return json_type(value)
    try:
        text = json.dumps(value, ensure_ascii=True, allow_nan=True)
    except (TypeError, ValueError):
        text = json_type(value)
    if len(text) > _MAX_RENDERED:
        text = text[:_MAX_RENDERED] + "..."
    return text


_TYPE_NAMES = {
    "int_type": "integer", "int_parsing": "integer", "int_from_float": "integer",
    "float_type": "number", "float_parsing": "number", "finite_number": "finite number",
    "string_type": "string", "bool_type": "boolean", "bool_parsing": "boolean",
    "list_type": "array", "tuple_type": "array", "dict_type": "object", "model_type": "object",
    "model_attributes_type": "object", "mapping_type": "object",
}
_BOUND_WORDS = {
    "greater_than": "greater than", "greater_than_equal": "greater than or equal to",
    "less_than": "less than", "less_than_equal": "less than or equal to",
}


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated and Optional layers off a field annotation."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation


_IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def field_path(model: type[BaseModel], loc: Iterable[int | str]) -> str:
    """Kube-style path for a pydantic error location: fields dotted, list indexes and map keys in []."""
    parts: list[str] = []
    current: Any = model
    for element in loc:
        current = _unwrap(current)
        if element == "[key]":
            continue  # the error is about the map key itself; the key is already in the path
        if isinstance(element, int):
            parts.append(f"[{element}]")
            args = typing.get_args(current)
            current = args[0] if args else Any
            continue
        if isinstance(current, type) and issubclass(current, BaseModel):
            found = next((f for n, f in current.model_fields.items() if (f.alias or n) == element), None)
            if not _IDENTIFIER_RE.match(element):
                parts.append(f"[{element}]")  # e.g. resources[nvidia.com/gpu], as kube writes map keys
            else:
                parts.append(f".{element}" if parts else element)
            current = found.annotation if found is not None else Any
            continue
        if typing.get_origin(current) in (dict, Mapping) or current is dict:
            parts.append(f"[{element}]")
            args = typing.get_args(current)
            current = args[1] if len(args) == 2 else Any
            continue
        parts.append(f".{element}" if parts else str(element))
        current = Any
    return "".join(parts)


def _message(error: ErrorDetails, *, secret: bool) -> str:
    kind = error["type"]
    value = error.get("input")
    shown = REDACTED if secret or kind == HIDDEN_VALUE_ERROR else _render(value)
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return "Required value"
    if kind == "extra_forbidden":
        return "Forbidden: field not declared in schema"
    if kind in _TYPE_NAMES:
        return f"Invalid value: {shown}: must be of type {_TYPE_NAMES[kind]}"
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        allowed = ", ".join(f'"{part.strip(chr(39))}"' for part in re.split(r", | or ", str(expected)) if part)
        return f"Unsupported value: {shown}: supported values: {allowed}"
    if kind in _BOUND_WORDS:
        bound = next(iter(ctx.values()), "")
        return f"Invalid value: {shown}: must be {_BOUND_WORDS[kind]} {bound}"
    if kind in ("too_long", "too_short"):
        if isinstance(value, str):
            if kind == "too_long":
                return f"Too long: may not be more than {ctx.get('max_length')} characters"
            return f"Invalid value: {shown}: must be at least {ctx.get('min_length')} characters"
        if kind == "too_long":
            return f"Invalid value: {ctx.get('actual_length')} items: must have at most {ctx.get('max_length')} items"
        return f"Required value: must have at least {ctx.get('min_length')} items"
    if kind == "string_pattern_mismatch":
        return f"Invalid value: {shown}: must match the regular expression {ctx.get('pattern')!r}"
    if kind == "value_error":
        return f"Invalid value: {shown}: {ctx.get('error', error['msg'])}"
    if kind == SEMANTIC_ERROR:
        return str(ctx.get("text", error["msg"]))
    if kind == HIDDEN_VALUE_ERROR:
        return f"Invalid value: {shown}: {error['msg']}"
    return f"Invalid value: {shown}: {error['msg']}"


def errors_from_validation(
    exc: ValidationError,
    *,
    model: type[BaseModel],
    secret_prefixes: Iterable[str] = (),
    drop_semantic: bool = True,
) -> list[FieldError]:
    """Every pydantic error as (kube-style path, kube-style message).

    A value under one of `secret_prefixes` (e.g. "spec.connection.credentials")
    is never repeated in a message, whatever is wrong with it.
    """
    prefixes = tuple(secret_prefixes)
    result: list[FieldError] = []
    for error in exc.errors(include_url=False, include_context=True, include_input=True):
        if drop_semantic and error["type"] == SEMANTIC_ERROR:
            continue
        path = field_path(model, error["loc"])
        secret = _under(path, prefixes)
        result.append((path, _message(error, secret=secret)))
    return result


# ObjectMeta fields that a kube-style API server checks for every kind by itself.
GENERIC_METADATA_FIELDS = (
    "metadata.name", "metadata.generateName", "metadata.namespace", "metadata.labels",
    "metadata.annotations", "metadata.finalizers", "metadata.ownerReferences",
)


def _under(path: str, prefixes: Iterable[str]) -> bool:
    return any(path == p or path.startswith((p + ".", p + "[")) for p in prefixes)


def finish_errors(
    errors: list[FieldError], settings: ValidationSettings, *, include_generic_metadata: bool = True
) -> list[FieldError]:
    """Deduplicate, keep submission order, and cap the count so hostile input stays cheap to answer.

    `include_generic_metadata=False` leaves out what the API server reports itself
    (`GENERIC_METADATA_FIELDS`), so a bad name is not reported twice.
    """
    if not include_generic_metadata:
        errors = [e for e in errors if not _under(e[0], GENERIC_METADATA_FIELDS)]
    unique = list(dict.fromkeys(errors))
    if len(unique) > settings.max_errors:
        extra = len(unique) - settings.max_errors
        unique = unique[: settings.max_errors] + [("", f"Invalid value: too many errors, {extra} more not shown")]
    return unique


def validate_object(
    obj: object,
    *,
    model: type[BaseModel],
    semantic: Callable[[Mapping[str, Any]], list[FieldError]],
    settings: ValidationSettings | None,
    include_generic_metadata: bool,
    secret_prefixes: Iterable[str] = (),
) -> list[FieldError]:
    """Every problem with one object of a kind, as (field path, message): the kind's pydantic `model`,
    then its own `semantic` checks (run on any JSON object, also when the model refused it), then
    `finish_errors`. `secret_prefixes`: paths whose values an error must never echo."""
    settings = settings or ValidationSettings()
    if not isinstance(obj, Mapping):
        return [("", "Invalid value: must be a JSON object")]
    errors: list[FieldError] = []
    try:
        model.model_validate(obj, context={"settings": settings})
    except ValidationError as exc:
        errors += errors_from_validation(exc, model=model, secret_prefixes=secret_prefixes)
    errors += semantic(obj)
    return finish_errors(errors, settings, include_generic_metadata=include_generic_metadata)


class KindValidation(typing.Protocol):
    """A kind's `validate_<kind>(obj, settings=..., include_generic_metadata=...)`."""

    def __call__(
        self, obj: object, *, settings: ValidationSettings | None = None, include_generic_metadata: bool = True,
    ) -> list[FieldError]: ...


def api_validator(
    validate: KindValidation, settings: ValidationSettings | None, *, include_generic_metadata: bool,
) -> Callable[[dict[str, Any]], list[FieldError]]:
    """The apiserver's `ResourceType.validate` hook of a kind under `settings`. By default the kinds
    leave out the metadata checks a kube-style API server makes for every kind (name format, labels,
    ...), so no field is reported twice."""
    chosen = settings or ValidationSettings()

    def hook(obj: dict[str, Any]) -> list[FieldError]:
        return validate(obj, settings=chosen, include_generic_metadata=include_generic_metadata)

    return hook


# The kube field.Error prefixes of our messages, and the Status cause reason of each.
_CAUSE_REASONS = (
    ("Required value", "FieldValueRequired"),
    ("Invalid value", "FieldValueInvalid"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Forbidden", "FieldValueForbidden"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Not found", "FieldValueNotFound"),
)


def split_cause(message: str) -> tuple[str, str]:
    """(Status cause reason, detail) for one of our messages, e.g.
    "Duplicate value: \"ps\"" -> ("FieldValueDuplicate", "\"ps\"").

    An API server that renders causes as `<prefix>: <detail>` from the reason
    reproduces the message exactly.
    """
    for prefix, reason in _CAUSE_REASONS:
        if message == prefix:
            return reason, ""
        if message.startswith(prefix + ": "):
            return reason, message[len(prefix) + 2:]
    return "FieldValueInvalid", message


#: Upper bound of a duration given on a command line or flag (a week): larger is a typo.
MAX_DURATION_SECONDS = 7 * 86_400.0
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_seconds(text: str, *, allow_zero: bool = False) -> float:
    """Seconds from a duration like kubectl's: "90", "90s", "1.5m", "2h", "500ms" (a bare number is
    seconds). ValueError saying what is wrong for anything else, a negative or an absurd value."""
    value = str(text).strip().lower()
    number, unit = value, "s"
    for suffix in ("ms", "s", "m", "h"):
        if value.endswith(suffix):
            number, unit = value[: -len(suffix)], suffix
            break
    try:
        seconds = float(number) * _DURATION_UNITS[unit]
    except ValueError:
        raise ValueError("not a duration (examples: 30s, 2m, 1h, 90)") from None
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError("not a duration (examples: 30s, 2m, 1h, 90)")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"must be {'zero or ' if allow_zero else ''}more than zero")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError("longer than a week")
    return seconds
