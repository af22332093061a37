"""Kubernetes `Status` errors, shaped exactly as kube-apiserver sends them.

Every error a client can cause leaves the API as an `ApiError`, rendered by
`to_status()` into a `kind: Status` body (kube-api-notes §2): the HTTP code,
the machine-readable `reason`, a message in kube's wording and, for
validation errors, `details.causes` naming each field.

`details.kind` holds the resource plural for NotFound, AlreadyExists and
Conflict, and the Kind for Invalid -- as kube does. This module must never do
I/O and never import a store or HTTP framework, nor the registry (which
imports `FieldErrorLike` from here): the errors take any `ResourceNames`,
which the registry's `ResourceType` is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from federator.apis.common import split_cause

#: kube-apiserver's default request body limit (AS/pkg/server/config.go).
DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024

OPTIMISTIC_LOCK_MESSAGE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


# Cause reasons (AM/pkg/apis/meta/v1/types.go CauseType*) and the message
# prefixes kube's field.Error prints for them.
_CAUSE_PREFIX = {
    "FieldValueRequired": "Required value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueTooLong": "Too long",
    "FieldValueTypeInvalid": "Invalid value",
}


@dataclass(frozen=True, slots=True)
class FieldError:
    """One field-level validation failure (kube's field.Error).

    `field` is the JSON path (`spec.containers[0].name`); `reason` one of the
    CauseType names above; `detail` the human explanation; `value` the bad
    value when there is one worth echoing."""

    field: str
    reason: str = "FieldValueInvalid"
    detail: str = ""
    value: Any = None
    has_value: bool = False

    @classmethod
    def required(cls, field: str, detail: str = "") -> FieldError:
        return cls(field, "FieldValueRequired", detail)

    @classmethod
    def invalid(cls, field: str, value: Any, detail: str) -> FieldError:
        return cls(field, "FieldValueInvalid", detail, value, True)

    @classmethod
    def wrong_type(cls, field: str, value: Any, expected: str) -> FieldError:
        return cls(field, "FieldValueTypeInvalid", f"must be {expected}", value, True)

    @classmethod
    def not_supported(cls, field: str, value: Any, allowed: Iterable[str]) -> FieldError:
        choices = ", ".join(f'"{a}"' for a in allowed)
        return cls(field, "FieldValueNotSupported", f"supported values: {choices}", value, True)

    @classmethod
    def forbidden(cls, field: str, detail: str) -> FieldError:
        return cls(field, "FieldValueForbidden", detail)

    @classmethod
    def duplicate(cls, field: str, value: Any) -> FieldError:
        return cls(field, "FieldValueDuplicate", "", value, True)

    def cause_message(self) -> str:
        """The text after `<field>: ` in kube's error string."""
        prefix = _CAUSE_PREFIX.get(self.reason, "Invalid value")
        parts = [prefix]
        if self.has_value:
            parts.append(_render_value(self.value))
        if self.detail:
            parts.append(self.detail)
        return ": ".join(parts)

    def __str__(self) -> str:
        return f"{self.field}: {self.cause_message()}"


def _render_value(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return str(value)


FieldErrorLike = FieldError | tuple[str, str]


def as_field_error(e: FieldErrorLike) -> FieldError:
    """Accept (field, message) pairs, as `federator.apis` validators give them: the cause reason comes
    from the message's kube prefix ("Forbidden: ..." is FieldValueForbidden), FieldValueInvalid without one."""
    if isinstance(e, FieldError):
        return e
    field, message = e
    return FieldError(field, *split_cause(message))


class ApiError(Exception):
    """An error with a Kubernetes Status body. Raise it anywhere below a
    handler; the app's error middleware renders it."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after_seconds: int | None = None,
        status_metadata: dict[str, Any] | None = None,
        warnings: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after_seconds = retry_after_seconds
        self.status_metadata = status_metadata
        #: texts sent as `Warning` response headers with the Status (see `warning_headers`)
        self.warnings = list(warnings)

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.status_metadata or {}),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details = dict(self.details) if self.details else {}
        if self.retry_after_seconds is not None:
            details["retryAfterSeconds"] = self.retry_after_seconds
        if details:
            status["details"] = details
        return status

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


# ---------------------------------------------------------------- warnings

#: kube-apiserver's limits on Warning headers (AS/pkg/endpoints/filters/warning.go): once the
#: texts add up to more than 4096 characters, each is cut to 256 and those that still do not fit
#: are dropped.
WARNINGS_TOTAL_CHARS = 4096
WARNING_ITEM_CHARS = 256
#: at most this many Warning headers in one response: kube-apiserver has no count limit, but clients
#: do (Python's http.client, under urllib3 and the official client, refuses a response with more than
#: 100 headers), and a body with hundreds of short unknown fields would otherwise make that many
WARNINGS_MAX_HEADERS = 50


def warning_header(text: str) -> str:
    """One `Warning` header value as kube-apiserver writes it: `299 - "<text>"`, with `"` and
    `\\` escaped (AM/pkg/util/net/http.go NewWarningHeader). Control characters become spaces
    (Go's header writer does that with CR and LF), so a hostile field name cannot split the header."""
    clean = "".join(" " if ord(c) < 0x20 or ord(c) == 0x7F else c for c in text)
    return '299 - "' + clean.replace("\\", "\\\\").replace('"', '\\"') + '"'


def warning_headers(texts: Iterable[str]) -> list[str]:
    """The Warning header values for `texts`: duplicates and empty texts dropped, in order,
    within kube's size limits."""
    unique = [t for t in dict.fromkeys(texts) if t]
    if sum(len(t) for t in unique) > WARNINGS_TOTAL_CHARS:
        unique = [t if len(t) <= WARNING_ITEM_CHARS else t[:WARNING_ITEM_CHARS - 3] + "..." for t in unique]
    out: list[str] = []
    total = 0
    for text in unique:
        total += len(text)
        if total > WARNINGS_TOTAL_CHARS:
            break
        out.append(warning_header(text))
    if len(out) > WARNINGS_MAX_HEADERS:
        left_out = len(unique) - (WARNINGS_MAX_HEADERS - 1)
        out = out[:WARNINGS_MAX_HEADERS - 1] + [warning_header(f"{left_out} more warnings not shown")]
    return out


# ---------------------------------------------------------------- helpers


class ResourceNames(Protocol):
    """The names of a resource type that error messages and details use
    (`federator.apiserver.registry.ResourceType` has them)."""

    @property
    def group(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def plural(self) -> str: ...

    @property
    def qualified_resource(self) -> str: ...

    @property
    def qualified_kind(self) -> str: ...


def _resource_details(rt: ResourceNames | None, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if rt is not None:
        if rt.group:
            details["group"] = rt.group
        details["kind"] = rt.plural
    return details


def _qualified(rt: ResourceNames | None, fallback: str = "") -> str:
    return rt.qualified_resource if rt is not None else fallback


def not_found(rt: ResourceNames | None, name: str, *, resource: str = "") -> ApiError:
    what = _qualified(rt, resource)
    return ApiError(404, "NotFound", f'{what} "{name}" not found', details=_resource_details(rt, name))


def already_exists(rt: ResourceNames, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{rt.qualified_resource} "{name}" already exists',
        details=_resource_details(rt, name),
    )


def conflict(rt: ResourceNames, name: str, why: str = OPTIMISTIC_LOCK_MESSAGE, *, resource: str = "") -> ApiError:
    what = resource or rt.qualified_resource
    return ApiError(
        409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": {why}',
        details=_resource_details(rt, name),
    )


def invalid(rt: ResourceNames, name: str, causes: Sequence[FieldErrorLike]) -> ApiError:
    errors = [as_field_error(c) for c in causes]
    if len(errors) == 1:
        summary = str(errors[0])
    else:
        summary = "[" + ", ".join(str(e) for e in errors) + "]"
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.kind
    details["causes"] = [
        {"reason": e.reason, "message": e.cause_message(), "field": e.field} for e in errors
    ]
    return ApiError(422, "Invalid", f'{rt.qualified_kind} "{name}" is invalid: {summary}', details=details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str, *, continue_token: str | None = None) -> ApiError:
    meta = {"continue": continue_token} if continue_token else None
    return ApiError(410, "Expired", message, status_metadata=meta)


def too_large(limit: int) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def unsupported_media(content_type: str, accepted: Iterable[str]) -> ApiError:
    listed = ", ".join(accepted)
    return ApiError(
        415, "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {listed}",
        details={"causes": [{"reason": "UnexpectedServerResponse", "message": content_type}]} if content_type else None,
    )


def not_acceptable(accepted: Iterable[str]) -> ApiError:
    listed = ", ".join(accepted)
    return ApiError(406, "NotAcceptable", f"only the following media types are accepted: {listed}")


def method_not_allowed(what: str = "") -> ApiError:
    message = "the server does not allow this method on the requested resource"
    if what:
        message += f" ({what})"
    return ApiError(405, "MethodNotAllowed", message)


def forbidden(rt: ResourceNames | None, name: str, why: str, *, resource: str = "") -> ApiError:
    what = _qualified(rt, resource)
    subject = f'{what} "{name}"' if name else what
    return ApiError(403, "Forbidden", f"{subject} is forbidden: {why}", details=_resource_details(rt, name))


def unauthorized(message: str = "Unauthorized") -> ApiError:
    return ApiError(401, "Unauthorized", message)


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}",
                    details={"causes": [{"message": message}]})


def service_unavailable(message: str, *, retry_after_seconds: int | None = None) -> ApiError:
    return ApiError(503, "ServiceUnavailable", message, retry_after_seconds=retry_after_seconds)


def too_many_requests(message: str, *, retry_after_seconds: int = 1) -> ApiError:
    return ApiError(429, "TooManyRequests", message, retry_after_seconds=retry_after_seconds)


def timeout(message: str, *, retry_after_seconds: int | None = None) -> ApiError:
    return ApiError(504, "Timeout", message, retry_after_seconds=retry_after_seconds)


def success_status(*, code: int = 200, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `status: Success` Status (DELETE of kinds that don't return the
    object, pods/binding with code 201)."""
    status: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        status["details"] = details
    if code != 200:
        status["code"] = code
    return status
