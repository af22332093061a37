"""The official Kubernetes Python client's models as the schema of built-in kinds.

Whatever an API server of ours serves as a built-in kind (the simulator's Pods and Nodes, the
Namespaces both the simulator and the hub serve) must deserialize in the official Python client,
whose models (pydantic, strict types) are the most faithful schema at hand: `client_schema_errors`
gives their type errors and missing required fields, `client_unknown_fields` the fields they do not
know (for fieldValidation), and `with_client_schema` puts a kind's own checks first. The client is
imported on first use (the package is large).

This module only checks objects; it must never do I/O or import the simulator or the hub.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from federator.apiserver.errors import FieldError
from federator.apiserver.registry import JSONObject

__all__ = ["client_schema_errors", "client_unknown_fields", "with_client_schema"]

_CLIENT_MODELS: dict[str, Any] = {}
_PYDANTIC_TEXT = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "bool_type": "must be a boolean",
    "bool_parsing": "must be a boolean",
    "float_type": "must be a number",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "list_type": "must be a list",
    "datetime_type": "must be an RFC 3339 timestamp",
    "datetime_parsing": "must be an RFC 3339 timestamp",
    "datetime_from_date_parsing": "must be an RFC 3339 timestamp",
}


def _client_model(name: str) -> Any:
    model = _CLIENT_MODELS.get(name)
    if model is None:
        import kubernetes.client.models as models

        model = _CLIENT_MODELS[name] = getattr(models, name)
    return model


def _model_problems(obj: JSONObject, model_name: str) -> list[dict[str, Any]]:
    from pydantic import ValidationError

    try:
        _client_model(model_name).model_validate(obj, by_alias=True, by_name=False)
    except ValidationError as e:
        return [dict(err) for err in e.errors(include_url=False)]
    return []


def _loc_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def client_schema_errors(obj: JSONObject, model_name: str) -> list[FieldError]:
    """Type errors and missing required fields, as the official client sees
    them (unknown fields are fieldValidation's business, see unknown_fields)."""
    out: list[FieldError] = []
    for err in _model_problems(obj, model_name):
        kind = err.get("type", "")
        if kind == "extra_forbidden":
            continue
        path = _loc_path(tuple(err.get("loc") or ()))
        if kind == "missing":
            out.append(FieldError.required(path))
        else:
            detail = _PYDANTIC_TEXT.get(kind, str(err.get("msg", "is not valid")))
            out.append(FieldError("" + path, "FieldValueTypeInvalid", detail, err.get("input"), True))
    return out


def client_unknown_fields(model_name: str) -> Callable[[JSONObject], list[tuple[str | int, ...]]]:
    def unknown(obj: JSONObject) -> list[tuple[str | int, ...]]:
        return [tuple(err.get("loc") or ()) for err in _model_problems(obj, model_name)
                if err.get("type") == "extra_forbidden"]

    return unknown


def with_client_schema(
    model_name: str, validate: Callable[[JSONObject], list[FieldError]]
) -> Callable[[JSONObject], list[FieldError]]:
    """Our semantic checks first; the client model's type checks for fields
    those did not already report."""

    def check(obj: JSONObject) -> list[FieldError]:
        errs = validate(obj)
        seen = {e.field for e in errs}
        for e in client_schema_errors(obj, model_name):
            if e.field not in seen and not any(e.field.startswith(s + ".") or e.field.startswith(s + "[")
                                               for s in seen):
                errs.append(e)
        return errs

    return check

