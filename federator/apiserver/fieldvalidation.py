"""kube's server-side field validation (`fieldValidation=Ignore|Warn|Strict`) for create, update and patch.

kube-apiserver (1.27+) decodes every write strictly and then, as the request's `fieldValidation`
query parameter says (AM/pkg/apis/meta/v1/types.go FieldValidation*; AS/pkg/endpoints/handlers
create.go, update.go, patch.go):

    Strict   refuses the write: 400 `<Kind> in version "<v>" cannot be handled as a <Kind>: strict
             decoding error: duplicate field "x", unknown field "spec.foo"` for create and update,
             422 Invalid on the field `patch` for a patch (kubectl sends Strict on every write);
    Warn     drops what the kind does not know and says so, one `Warning: 299 - "unknown field
             \\"spec.foo\\""` response header per problem -- the default when the parameter is
             absent (the Python client sends none);
    Ignore   drops it silently.

The problems are fields the kind's schema does not declare (`unknown field "spec.foo"`) and keys a
JSON body repeats (`duplicate field "spec.x"`, the last one wins; in YAML `line 5: key "x" already
set in map`). Any other value of the parameter is a 422 on the request's options, as kube answers.

`FieldValidation` is one request's directive, the duplicates found when its body was decoded and
the warnings the write collects (the app turns them into headers). `schema_unknown_fields` finds
unknown fields by walking a structural OpenAPI schema (kube's pruning), with ObjectMeta's fields
under `metadata`. This module must never do I/O, and never echo a field's value (a body may
carry a credential): problems name paths only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from federator.apiserver import errors
from federator.apiserver.managedfields import options_invalid
from federator.apiserver.registry import ResourceType

__all__ = [
    "DEFAULT_DIRECTIVE",
    "FIELD_VALIDATION_VALUES",
    "FieldValidation",
    "directive_from_query",
    "json_duplicate_fields",
    "json_patch_unknown_fields",
    "loc_text",
    "schema_unknown_fields",
]

FIELD_VALIDATION_VALUES: Final = ("Ignore", "Warn", "Strict")
#: What an absent (or empty) parameter means since kube 1.27.
DEFAULT_DIRECTIVE: Final = "Warn"

Loc = tuple[str | int, ...]


def directive_from_query(query: Mapping[str, str], *, options_kind: str) -> str:
    """The request's directive; 422 Invalid on `<options_kind>.meta.k8s.io` (CreateOptions,
    UpdateOptions, PatchOptions) for a value kube does not know, with kube's wording."""
    value = query.get("fieldValidation") or ""
    if value == "":
        return DEFAULT_DIRECTIVE
    if value not in FIELD_VALIDATION_VALUES:
        raise options_invalid(options_kind, [errors.FieldError.not_supported(
            "fieldValidation", value, ["", "Ignore", "Strict", "Warn"])])
    return value


@dataclass(slots=True)
class FieldValidation:
    """One write's field validation: the directive, what decoding its body found, the warnings."""

    directive: str = DEFAULT_DIRECTIVE
    #: `duplicate field "x"` for each key a JSON body repeats (in order)
    duplicates: tuple[str, ...] = ()
    #: `line N: key "x" already set in map` for each key a YAML body repeats
    yaml_duplicates: tuple[str, ...] = ()
    #: the write is a patch: Strict answers 422 on `patch` (kube's patch handler), not 400
    patch: bool = False
    #: texts for `Warning` response headers, filled by `check`
    warnings: list[str] = field(default_factory=list)

    def check(self, rt: ResourceType, obj: dict[str, Any], *, name: str = "") -> None:
        """Apply the directive to `obj` (the object about to be validated and stored as `rt`): Strict
        raises if anything is wrong, Warn and Ignore drop unknown fields in place (Warn records
        warnings)."""
        if self.directive not in FIELD_VALIDATION_VALUES:
            raise errors.bad_request(f'fieldValidation must be one of "Ignore", "Warn" or "Strict", '
                                     f'not "{self.directive}"')
        unknown = sorted(rt.unknown_fields(obj), key=loc_text) if rt.unknown_fields is not None else []
        problems = [f'unknown field "{loc_text(loc)}"' for loc in unknown]
        if self.directive == "Strict" and (problems or self.duplicates or self.yaml_duplicates):
            raise self._strict_error(rt, name=name, unknown=problems)
        if self.directive == "Warn":
            self.warnings.extend([*self.yaml_duplicates, *self.duplicates, *problems])
        drop_fields(obj, unknown)

    def _strict_error(self, rt: ResourceType, *, name: str, unknown: list[str]) -> errors.ApiError:
        items = list(self.duplicates)
        if self.yaml_duplicates:
            items.insert(0, "yaml: unmarshal errors:\n  " + "\n  ".join(self.yaml_duplicates))
        text = "strict decoding error: " + ", ".join(items + unknown)
        if self.patch:
            # kube's patch handler: field.Invalid(field.NewPath("patch"), <patched object>, <error>); the
            # object is not repeated here (it may carry a credential).
            return errors.invalid(rt, name, [errors.FieldError("patch", "FieldValueInvalid", text)])
        return errors.bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {text}')


def loc_text(loc: Loc) -> str:
    """kube's path of a field: keys dotted, list indexes in brackets (`spec.roles[0].name`)."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def drop_fields(obj: Any, locs: Sequence[Loc]) -> None:
    """Remove the fields at `locs` (deepest first, so a parent's removal never hides a child's)."""
    for loc in sorted(locs, key=len, reverse=True):
        parent: Any = obj
        for part in loc[:-1]:
            try:
                parent = parent[part]
            except (KeyError, IndexError, TypeError):
                parent = None
                break
        if isinstance(parent, dict):
            parent.pop(loc[-1], None)


# ---------------------------------------------------------------- duplicates


class _Repeated(dict[str, Any]):
    """A JSON object that repeated some of its keys (the last value of each is kept)."""

    repeated: list[str]


def json_duplicate_fields(body: bytes | str) -> list[str]:
    """`duplicate field "<path>"` for every key a JSON document repeats, in document order.
    The body must already be known to be valid JSON."""
    seen_any = False

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal seen_any
        obj: dict[str, Any] = {}
        repeated: list[str] = []
        for key, value in pairs:
            if key in obj and key not in repeated:
                repeated.append(key)
            obj[key] = value
        if not repeated:
            return obj
        seen_any = True
        marked = _Repeated(obj)
        marked.repeated = repeated
        return marked

    document = json.loads(body, object_pairs_hook=hook)
    if not seen_any:
        return []
    found: list[str] = []

    def walk(value: Any, loc: Loc) -> None:
        if isinstance(value, dict):
            for key in getattr(value, "repeated", ()):
                found.append(f'duplicate field "{loc_text((*loc, key))}"')
            for key, child in value.items():
                walk(child, (*loc, key))
        elif isinstance(value, list):
            for index, child in enumerate(value):
                walk(child, (*loc, index))

    walk(document, ())
    return found


_JSON_PATCH_OP_FIELDS: Final = frozenset({"op", "path", "from", "value"})


def json_patch_unknown_fields(operations: Any) -> list[str]:
    """`json patch unknown field "[i].x"` for fields a JSON patch operation does not have (kube's
    patch handler reports them with the patch's own duplicates)."""
    if not isinstance(operations, list):
        return []
    return [f'json patch unknown field "[{i}].{key}"' for i, op in enumerate(operations) if isinstance(op, dict)
            for key in op if key not in _JSON_PATCH_OP_FIELDS]


# ---------------------------------------------------------------- unknown fields

_STRING: Final[dict[str, Any]] = {"type": "string"}
_OWNER_REFERENCE: Final[dict[str, Any]] = {"type": "object", "properties": {
    f: {} for f in ("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")}}
_MANAGED_FIELDS_ENTRY: Final[dict[str, Any]] = {"type": "object", "properties": {
    **{f: {} for f in ("manager", "operation", "apiVersion", "time", "fieldsType", "subresource")},
    "fieldsV1": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
#: ObjectMeta as kube knows it (AM/pkg/apis/meta/v1/types.go), for `metadata` of any kind.
OBJECT_META_SCHEMA: Final[dict[str, Any]] = {"type": "object", "properties": {
    **{f: {} for f in ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
                       "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")},
    "labels": {"type": "object", "additionalProperties": _STRING},
    "annotations": {"type": "object", "additionalProperties": _STRING},
    "finalizers": {"type": "array", "items": _STRING},
    "ownerReferences": {"type": "array", "items": _OWNER_REFERENCE},
    "managedFields": {"type": "array", "items": _MANAGED_FIELDS_ENTRY},
}}


def schema_unknown_fields(schema: Mapping[str, Any]) -> Callable[[dict[str, Any]], list[Loc]]:
    """An `unknown_fields` for a kind with a structural OpenAPI v3 schema: the paths of fields no
    `properties` declare, as kube's pruning finds them. `additionalProperties` (maps) accepts any
    key and checks the values; `x-kubernetes-preserve-unknown-fields`, and an object schema that
    declares neither properties nor additionalProperties, accept anything below; a value of the
    wrong type is left to validation. `metadata` is checked against ObjectMeta."""

    def walk(value: Any, node: Mapping[str, Any], loc: Loc, out: list[Loc]) -> None:
        if not isinstance(node, Mapping) or node.get("x-kubernetes-preserve-unknown-fields"):
            return
        if isinstance(value, dict):
            properties = node.get("properties")
            extra = node.get("additionalProperties")
            if properties is None and not isinstance(extra, Mapping):
                return  # opaque object: nothing to prune against
            for key, child in value.items():
                if properties is not None and key in properties:
                    walk(child, properties[key], (*loc, key), out)
                elif isinstance(extra, Mapping):
                    walk(child, extra, (*loc, key), out)
                elif extra is not True:
                    out.append((*loc, key))
        elif isinstance(value, list):
            items = node.get("items")
            if isinstance(items, Mapping):
                for index, child in enumerate(value):
                    walk(child, items, (*loc, index), out)

    root: dict[str, Any] = dict(schema)
    root["properties"] = {**(schema.get("properties") or {}), "metadata": OBJECT_META_SCHEMA}

    def unknown(obj: dict[str, Any]) -> list[Loc]:
        out: list[Loc] = []
        walk(obj, root, (), out)
        return out

    return unknown
