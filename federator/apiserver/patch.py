"""The three PATCH formats kube-apiserver accepts (kube-api-notes §5):

- JSON merge patch (RFC 7386): objects merge, `null` deletes, lists replace;
- JSON patch (RFC 6902): add/remove/replace/move/copy/test on JSON pointers;
- strategic merge patch (SMP), as `kubectl apply` and the Python client send
  it for built-in kinds: lists named in the kind's SMP schema merge element
  by element on their merge key (containers by name, conditions by type...)
  or as sets of primitives (finalizers); directives `$patch`,
  `$setElementOrder/`, `$retainKeys` and `$deleteFromPrimitiveList/` are
  honoured and never stored.

Server-side apply (`APPLY_PATCH`) is not a patch format here: see ssa.py and
managedfields.py. `accepted_patch_types(rt)` is the list of what a kind takes.

Every function returns a new document and never mutates its inputs. Errors
raise `PatchError` (bad patch document -> 400) or `PatchApplyError` (a
well-formed patch that cannot apply -> 422). Pure: no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from federator.apiserver.registry import ResourceType, SMPListStrategy

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def accepted_patch_types(rt: ResourceType) -> list[str]:
    """The PATCH media types `rt` takes, in kube's order: the one list every 415 names."""
    return [JSON_PATCH, MERGE_PATCH] + ([STRATEGIC_MERGE_PATCH] if rt.supports_strategic_merge else []) + (
        [APPLY_PATCH] if rt.managed_fields else [])


class PatchError(ValueError):
    """The patch document itself is malformed (HTTP 400)."""


class PatchApplyError(ValueError):
    """A well-formed patch that does not apply to this object (HTTP 422)."""


# ---------------------------------------------------------------- RFC 7386


def json_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = json_merge_patch(result.get(key), value)
        else:
            result[key] = copy.deepcopy(value)
    return result


# ---------------------------------------------------------------- RFC 6902


def _parse_pointer(pointer: Any) -> list[str]:
    if not isinstance(pointer, str):
        raise PatchError(f"JSON pointer must be a string, not {type(pointer).__name__}")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"JSON pointer {pointer!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


def _list_index(container: list[Any], token: str, *, for_add: bool, pointer: str) -> int:
    if token == "-" and for_add:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchApplyError(f"invalid array index {token!r} in path {pointer!r}")
    idx = int(token)
    limit = len(container) if for_add else len(container) - 1
    if idx > limit:
        raise PatchApplyError(f"array index {idx} out of range in path {pointer!r}")
    return idx


def _resolve_parent(doc: Any, tokens: list[str], pointer: str) -> Any:
    cur = doc
    for tok in tokens[:-1]:
        if isinstance(cur, dict):
            if tok not in cur:
                raise PatchApplyError(f"path {pointer!r} does not exist (missing {tok!r})")
            cur = cur[tok]
        elif isinstance(cur, list):
            cur = cur[_list_index(cur, tok, for_add=False, pointer=pointer)]
        else:
            raise PatchApplyError(f"path {pointer!r} traverses a non-container value")
    return cur


def _get(doc: Any, pointer: str) -> Any:
    tokens = _parse_pointer(pointer)
    if not tokens:
        return doc
    parent = _resolve_parent(doc, tokens, pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchApplyError(f"path {pointer!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_list_index(parent, last, for_add=False, pointer=pointer)]
    raise PatchApplyError(f"path {pointer!r} traverses a non-container value")


def _add(doc: Any, pointer: str, value: Any) -> Any:
    tokens = _parse_pointer(pointer)
    if not tokens:
        return value
    parent = _resolve_parent(doc, tokens, pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_list_index(parent, last, for_add=True, pointer=pointer), value)
    else:
        raise PatchApplyError(f"cannot add at {pointer!r}: parent is not an object or array")
    return doc


def _remove(doc: Any, pointer: str) -> tuple[Any, Any]:
    tokens = _parse_pointer(pointer)
    if not tokens:
        raise PatchApplyError("cannot remove the whole document")
    parent = _resolve_parent(doc, tokens, pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchApplyError(f"cannot remove {pointer!r}: it does not exist")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_list_index(parent, last, for_add=False, pointer=pointer))
    raise PatchApplyError(f"cannot remove {pointer!r}: parent is not an object or array")


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for i, op in enumerate(operations):
        if not isinstance(op, dict):
            raise PatchError(f"JSON patch operation {i} must be an object")
        kind = op.get("op")
        if "path" not in op:
            raise PatchError(f"JSON patch operation {i} ({kind}) has no 'path'")
        path = op["path"]
        _parse_pointer(path)
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"JSON patch operation {i} ({kind}) has no 'value'")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # must exist
            doc, _ = (doc, None) if not _parse_pointer(path) else _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "move":
            src = op.get("from")
            if src is None:
                raise PatchError(f"JSON patch operation {i} (move) has no 'from'")
            if isinstance(src, str) and path.startswith(src + "/"):
                raise PatchApplyError(f"cannot move {src!r} into its own child {path!r}")
            doc, value = _remove(doc, src)
            doc = _add(doc, path, value)
        elif kind == "copy":
            src = op.get("from")
            if src is None:
                raise PatchError(f"JSON patch operation {i} (copy) has no 'from'")
            doc = _add(doc, path, copy.deepcopy(_get(doc, src)))
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchApplyError(f"test operation failed: value at {path!r} is not {op['value']!r}")
        else:
            raise PatchError(f"JSON patch operation {i}: unknown op {kind!r}")
    return doc


# ---------------------------------------------------------------- strategic merge patch

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"

SMPSchema = Mapping[str, SMPListStrategy]


def strategic_merge_patch(target: Any, patch: Any, *, schema: SMPSchema) -> Any:
    """Apply an SMP to `target`; lists listed in `schema` (dotted paths, `[]`
    for list elements) merge, every other list is replaced."""
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    base = copy.deepcopy(target) if isinstance(target, dict) else {}
    merged = _smp_map(base, patch, schema=schema, path="")
    return merged if merged is not None else {}


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _smp_map(original: dict[str, Any], patch: dict[str, Any], *, schema: SMPSchema, path: str) -> dict[str, Any] | None:
    directive = patch.get(_DIRECTIVE)
    if directive is not None:
        if directive == "delete":
            return None
        if directive == "replace":
            replaced: dict[str, Any] = _strip(patch)
            return replaced
        if directive != "merge":
            raise PatchError(f"unknown $patch directive {directive!r} at {path or '<root>'}")
    retain = patch.get(_RETAIN_KEYS)
    if retain is not None and not (isinstance(retain, list) and all(isinstance(k, str) for k in retain)):
        raise PatchError(f"$retainKeys at {path or '<root>'} must be a list of strings")
    result = original
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN_KEYS):
            continue
        if key.startswith(_SET_ORDER):
            if not isinstance(value, list):
                raise PatchError(f"{key} at {path or '<root>'} must be a list")
            orders[key[len(_SET_ORDER):]] = value
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            field = key[len(_DELETE_PRIMITIVE):]
            if not isinstance(value, list):
                raise PatchError(f"{key} at {path or '<root>'} must be a list")
            current = result.get(field)
            if isinstance(current, list):
                result[field] = [v for v in current if v not in value]
            continue
        field_path = _join(path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            merged = _smp_map(current if isinstance(current, dict) else {}, value, schema=schema, path=field_path)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            strategy = schema.get(field_path)
            current = result.get(key)
            if strategy is None:
                result[key] = [_strip(v) if isinstance(v, dict) else copy.deepcopy(v) for v in value
                               if not (isinstance(v, dict) and set(v) == {_DIRECTIVE})]
            elif strategy.merge_key is None:
                result[key] = _merge_primitives(current if isinstance(current, list) else [], value)
            else:
                result[key] = _merge_keyed(
                    current if isinstance(current, list) else [], value, strategy=strategy, schema=schema,
                    elem_path=field_path + "[]",
                )
        else:
            result[key] = copy.deepcopy(value)
    for field, order in orders.items():
        current = result.get(field)
        if isinstance(current, list):
            strategy = schema.get(_join(path, field))
            result[field] = _apply_order(current, order, merge_key=strategy.merge_key if strategy else None)
    if retain is not None:
        keep = set(retain)
        for key in list(result):
            if key not in keep and key not in patch:
                del result[key]
    return result


def _merge_primitives(current: list[Any], patch: list[Any]) -> list[Any]:
    if any(isinstance(v, dict) and v.get(_DIRECTIVE) == "replace" for v in patch):
        return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and _DIRECTIVE in v)]
    out = list(current)
    for v in patch:
        if isinstance(v, dict) and _DIRECTIVE in v:
            continue
        if v not in out:
            out.append(copy.deepcopy(v))
    return out


def _merge_keyed(
    current: list[Any], patch: list[Any], *, strategy: SMPListStrategy, schema: SMPSchema, elem_path: str
) -> list[Any]:
    key = strategy.merge_key
    assert key is not None
    if any(isinstance(v, dict) and set(v) == {_DIRECTIVE} and v[_DIRECTIVE] == "replace" for v in patch):
        return [_strip(v) for v in patch if isinstance(v, dict) and set(v) != {_DIRECTIVE}]
    out = [copy.deepcopy(v) for v in current]
    for elem in patch:
        if not isinstance(elem, dict):
            raise PatchError(f"elements of {elem_path[:-2]} must be objects with merge key {key!r}")
        if key not in elem:
            if elem.get(_DIRECTIVE) is not None:
                continue
            raise PatchError(f"an element of {elem_path[:-2]} has no merge key {key!r}")
        idx = next((i for i, e in enumerate(out) if isinstance(e, dict) and e.get(key) == elem[key]), None)
        directive = elem.get(_DIRECTIVE)
        if directive == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(_strip(elem))
        else:
            merged = _smp_map(out[idx], elem, schema=schema, path=elem_path)
            if merged is None:
                out.pop(idx)
            else:
                out[idx] = merged
    return out


def _apply_order(items: list[Any], order: list[Any], *, merge_key: str | None) -> list[Any]:
    def ident(v: Any) -> Any:
        if merge_key is not None and isinstance(v, dict):
            return v.get(merge_key)
        return v

    wanted = [ident(o) for o in order]
    rank: dict[Any, int] = {}
    for i, w in enumerate(wanted):
        try:
            rank.setdefault(w, i)
        except TypeError:  # unhashable element: keep the server's order
            return items
    ordered = sorted(
        enumerate(items),
        key=lambda p: (rank.get(ident(p[1]), len(wanted)), p[0]) if _hashable(ident(p[1])) else (len(wanted), p[0]),
    )
    return [v for _, v in ordered]


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def _strip(value: Any) -> Any:
    """A deep copy without SMP directives."""
    if isinstance(value, dict):
        return {
            k: _strip(v)
            for k, v in value.items()
            if k not in (_DIRECTIVE, _RETAIN_KEYS)
            and not k.startswith(_SET_ORDER)
            and not k.startswith(_DELETE_PRIMITIVE)
        }
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, dict) and set(v) == {_DIRECTIVE})]
    return value


def apply_patch(target: Any, patch: Any, *, content_type: str, schema: SMPSchema | None) -> Any:
    """Dispatch on the PATCH Content-Type (already normalised, no parameters)."""
    if content_type == MERGE_PATCH:
        if not isinstance(patch, dict):
            raise PatchError("a JSON merge patch must be a JSON object")
        return json_merge_patch(target, patch)
    if content_type == JSON_PATCH:
        return json_patch(target, patch)
    if content_type == STRATEGIC_MERGE_PATCH:
        if schema is None:
            raise PatchError("strategic merge patch is not supported for this kind")
        return strategic_merge_patch(target, patch, schema=schema)
    raise PatchError(f"unsupported patch type {content_type!r}")
