"""Server-side apply's merge rules: kube's structured-merge-diff (SMD v6), in Python.

What kube-apiserver does with `PATCH application/apply-patch+yaml`, and how it
keeps `metadata.managedFields` on every write, rests on a handful of
operations over JSON values typed by a schema. This module ports them from
sigs.k8s.io/structured-merge-diff (typed/, fieldpath/, merge/), keeping its
rules and its wire formats:

- a **schema** (`Atom`) from an OpenAPI v3 structural schema: objects with
  `properties` are structs, `additionalProperties` maps (granular unless
  `x-kubernetes-map-type: atomic`), arrays are atomic unless
  `x-kubernetes-list-type` says `set` or `map` (keyed by
  `x-kubernetes-list-map-keys`); anything untyped is "deduced" (maps granular,
  lists atomic); `metadata` is kube's ObjectMeta (labels and annotations
  granular maps, finalizers a set, ownerReferences keyed by uid);
- a **field set**: a frozenset of paths, each a tuple of path elements in
  the managedFields spelling (`f:spec`, `k:{"name":"ps"}`, `v:"A100"`, `i:0`);
  `fields_v1` / `parse_fields_v1` turn one into kube's `fieldsV1` trie
  (`"."` marks a node that is itself a member) and back;
- `to_field_set` (what an applied configuration sets), `compare` (added /
  modified / removed between two objects), `merge` (an applied configuration
  over the live object, lists merged by their keys, in SMD's order),
  `remove_items` (prune) and `ensure_named_fields_are_members`;
- the **Updater**: `update` (a PUT/PATCH/POST by a manager: it takes what it
  changed, others lose what it changed or removed) and `apply` (merge, take
  the applied fields, prune what this applier dropped and nobody else owns,
  and raise `Conflicts` for fields another manager owns whose value would
  change, unless forced).

Values that do not match their schema are treated as leaves instead of
failing (the kind's validation reports them with a field path afterwards).
Pure: no I/O, nothing here knows HTTP, stores or kinds.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "DEDUCED",
    "Atom",
    "Comparison",
    "Conflicts",
    "FieldSet",
    "FieldsV1Error",
    "ListType",
    "MergeError",
    "MapType",
    "Path",
    "VersionedSet",
    "apply",
    "atom_from_openapi",
    "check_keys",
    "compare",
    "drop_applied_nulls",
    "ensure_named_fields_are_members",
    "fields_v1",
    "iterate_paths",
    "merge",
    "object_atom",
    "parse_fields_v1",
    "path_string",
    "recursive_difference",
    "remove_items",
    "to_field_set",
    "update",
]

#: One path element, spelled as in managedFields: `f:<field>`, `k:<json object>`, `v:<json>`, `i:<int>`.
PathElement = str
Path = tuple[PathElement, ...]
FieldSet = frozenset[Path]

EMPTY: Final[FieldSet] = frozenset()


class _Absent:
    """A value that is not there at all (Go's nil), as opposed to JSON null (None)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Final = _Absent()


# ---------------------------------------------------------------- schema


class MapType:
    """A struct (named `fields`) and/or a map (`element` for every other key)."""

    __slots__ = ("atomic", "element", "fields")

    def __init__(self, fields: Mapping[str, Atom], element: Atom | None, *, atomic: bool = False) -> None:
        self.fields = dict(fields)
        self.element = element
        self.atomic = atomic


class ListType:
    """A list: atomic, or associative (a set of scalars when `keys` is empty, a map keyed by `keys`)."""

    __slots__ = ("atomic", "element", "key_defaults", "keys")

    def __init__(self, element: Atom, *, atomic: bool = True, keys: tuple[str, ...] = (),
                 key_defaults: Mapping[str, Any] | None = None) -> None:
        self.element = element
        self.atomic = atomic
        self.keys = keys
        self.key_defaults = dict(key_defaults or {})


class Atom:
    """What a value at one place in the schema may be (SMD's schema.Atom): a scalar, a list and/or a map."""

    __slots__ = ("list", "map", "scalar")

    def __init__(self, *, scalar: bool = False, list: ListType | None = None, map: MapType | None = None) -> None:
        self.scalar = scalar
        self.list = list
        self.map = map


SCALAR: Final = Atom(scalar=True)
#: SMD's `__untyped_atomic_`: any value, lists and maps as one leaf.
UNTYPED: Final = Atom(scalar=True, list=ListType(SCALAR), map=MapType({}, None, atomic=True))
UNTYPED.list.element = UNTYPED  # type: ignore[union-attr]
UNTYPED.map.element = UNTYPED  # type: ignore[union-attr]
#: SMD's `__untyped_deduced_`: maps granular (each key owned apart), lists atomic.
DEDUCED: Final = Atom(scalar=True, list=ListType(UNTYPED), map=MapType({}, None))
DEDUCED.map.element = DEDUCED  # type: ignore[union-attr]

_SCALAR_TYPES = frozenset({"string", "integer", "number", "boolean"})


def atom_from_openapi(node: Any) -> Atom:
    """The SMD type of one OpenAPI v3 (structural) schema node."""
    if not isinstance(node, Mapping):
        return DEDUCED
    if node.get("x-kubernetes-int-or-string") is True:
        return SCALAR
    kind = node.get("type")
    if kind in _SCALAR_TYPES:
        return SCALAR
    if kind == "array":
        items = node.get("items")
        item_atom = atom_from_openapi(items) if isinstance(items, Mapping) else DEDUCED
        list_type = node.get("x-kubernetes-list-type")
        if list_type == "map":
            keys = tuple(k for k in node.get("x-kubernetes-list-map-keys") or () if isinstance(k, str))
            props = items.get("properties") if isinstance(items, Mapping) else None
            defaults = {k: props[k]["default"] for k in keys
                        if isinstance(props, Mapping) and isinstance(props.get(k), Mapping) and "default" in props[k]}
            if keys:
                return Atom(list=ListType(item_atom, atomic=False, keys=keys, key_defaults=defaults))
            return Atom(list=ListType(item_atom))
        if list_type == "set":
            return Atom(list=ListType(item_atom, atomic=False))
        return Atom(list=ListType(item_atom))
    properties = node.get("properties")
    additional = node.get("additionalProperties")
    if kind == "object" or isinstance(properties, Mapping) or isinstance(additional, Mapping):
        fields = {name: atom_from_openapi(child) for name, child in (properties or {}).items()} \
            if isinstance(properties, Mapping) else {}
        if isinstance(additional, Mapping):
            element: Atom | None = atom_from_openapi(additional)
        elif not fields or node.get("x-kubernetes-preserve-unknown-fields") is True:
            element = DEDUCED
        else:
            element = None  # a struct: keys it does not name are deduced (see _child_atom)
        return Atom(map=MapType(fields, element, atomic=node.get("x-kubernetes-map-type") == "atomic"))
    return DEDUCED


_STRING: Final = {"type": "string"}
_STRING_MAP: Final = {"type": "object", "additionalProperties": _STRING}
#: kube's ObjectMeta as SMD sees it (AM/pkg/apis/meta/v1/types.go list and struct tags).
OBJECT_META_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "name": _STRING, "generateName": _STRING, "namespace": _STRING, "selfLink": _STRING, "uid": _STRING,
        "resourceVersion": _STRING, "generation": {"type": "integer"}, "creationTimestamp": _STRING,
        "deletionTimestamp": _STRING, "deletionGracePeriodSeconds": {"type": "integer"},
        "labels": _STRING_MAP, "annotations": _STRING_MAP,
        "ownerReferences": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["uid"],
            "items": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
                "apiVersion": _STRING, "kind": _STRING, "name": _STRING, "uid": _STRING,
                "controller": {"type": "boolean"}, "blockOwnerDeletion": {"type": "boolean"}}},
        },
        "finalizers": {"type": "array", "x-kubernetes-list-type": "set", "items": _STRING},
        "managedFields": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "object"}},
    },
}


def object_atom(openapi_schema: Mapping[str, Any] | None) -> Atom:
    """The SMD type of a whole object whose OpenAPI schema is `openapi_schema`, with kube's
    ObjectMeta at `metadata` (a CRD's schema may not describe metadata)."""
    root = dict(openapi_schema or {})
    properties = dict(root.get("properties") or {})
    properties["metadata"] = OBJECT_META_SCHEMA
    properties.setdefault("apiVersion", _STRING)
    properties.setdefault("kind", _STRING)
    root["properties"] = properties
    root["type"] = "object"
    return atom_from_openapi(root)


def _child_atom(map_type: MapType, key: str) -> Atom:
    field = map_type.fields.get(key)
    if field is not None:
        return field
    return map_type.element if map_type.element is not None else DEDUCED


def _kind(atom: Atom, value: Any) -> str:
    """Which part of `atom` handles `value` ("map", "list" or "scalar"): SMD's deduceAtom +
    handleAtom order, except that a value the atom cannot hold is handled as a leaf."""
    if value is ABSENT or value is None:
        if atom.map is not None:
            return "map"
        if atom.scalar:
            return "scalar"
        return "list" if atom.list is not None else "scalar"
    if isinstance(value, dict):
        return "map" if atom.map is not None else "scalar"
    if isinstance(value, list):
        return "list" if atom.list is not None else "scalar"
    return "scalar"


# ---------------------------------------------------------------- values


def json_equal(a: Any, b: Any) -> bool:
    """JSON value equality (True is not 1, 1 is 1.0), as SMD's value.Equals."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def go_json(value: Any) -> str:
    """`value` encoded as Go's encoding/json does it (sorted keys, HTML characters escaped):
    the spelling of `k:` and `v:` path elements."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _go_string(value)
    if isinstance(value, list):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_go_string(str(k)) + ":" + go_json(value[k]) for k in sorted(value)) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _go_float(value: float) -> str:
    if not math.isfinite(value):
        return "null"
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:
        mantissa, exponent = text.split("e")
        sign = exponent[0] if exponent[0] in "+-" else "+"
        digits = exponent.lstrip("+-").lstrip("0") or "0"
        text = f"{mantissa}e{sign}{digits}"
    return text


_GO_STRING_ESCAPES: Final = {
    **{i: f"\\u{i:04x}" for i in range(0x20)},
    ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord('"'): '\\"', ord("\\"): "\\\\",
    **{ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"},
}


def _go_string(text: str) -> str:
    """A JSON string as Go's encoding/json writes it (HTML characters and U+2028/9 escaped)."""
    return '"' + text.translate(_GO_STRING_ESCAPES) + '"'


def _go_string_text(value: Any) -> str:
    """SMD's value.ToString (conflict paths): strings quoted, maps as k=v runs."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value) if isinstance(value, int) else _go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(_go_string_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "".join(f"{k}={_go_string_text(value[k])}" for k in sorted(value))
    return str(value)


# ---------------------------------------------------------------- path elements


def field_element(name: str) -> PathElement:
    return "f:" + name


def _key_element(fields: Iterable[tuple[str, Any]]) -> PathElement:
    ordered = sorted(fields, key=lambda kv: kv[0])
    return "k:{" + ",".join(_go_string(k) + ":" + go_json(v) for k, v in ordered) + "}"


def _value_element(value: Any) -> PathElement:
    return "v:" + go_json(value)


class FieldsV1Error(ValueError):
    """A managedFields `fieldsV1` document (or one of its path elements) that cannot be read."""


def canonical_element(text: str) -> PathElement | None:
    """A path element read from a managedFields key in this module's spelling; None for an
    unknown element type (kube drops those); FieldsV1Error when it is malformed."""
    if len(text) < 2 or text[1] != ":":
        raise FieldsV1Error(f"invalid path element {text!r}: want f:, k:, v: or i: followed by its value")
    tag, body = text[0], text[2:]
    if tag == "f":
        return text
    if tag in ("k", "v"):
        try:
            value = json.loads(body)
        except ValueError:
            raise FieldsV1Error(f"invalid path element {text[:80]!r}: not JSON after {tag}:") from None
        if tag == "k":
            if not isinstance(value, dict):
                raise FieldsV1Error(f"invalid path element {text[:80]!r}: a key must be a JSON object")
            return _key_element(value.items())
        return _value_element(value)
    if tag == "i":
        if not body.lstrip("-").isdigit():
            raise FieldsV1Error(f"invalid path element {text[:80]!r}: an index must be an integer")
        return f"i:{int(body)}"
    return None


def _value_rank(value: Any) -> tuple[Any, ...]:
    """SMD's value.Compare as a sort key: numbers < strings < booleans < lists < maps < null."""
    if isinstance(value, bool):
        return (2, value)
    if isinstance(value, (int, float)):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    if isinstance(value, list):
        return (3, tuple(_value_rank(v) for v in value))
    if isinstance(value, dict):
        return (4, tuple((k, _value_rank(value[k])) for k in sorted(value)))
    return (5,)


@functools.lru_cache(maxsize=65536)
def element_rank(element: PathElement) -> tuple[Any, ...]:
    """SMD's PathElement.Compare as a sort key: fields < keys < values < indexes."""
    tag, body = element[0], element[2:]
    if tag == "f":
        return (0, body)
    if tag == "k":
        parsed = json.loads(body)
        return (1, tuple((k, _value_rank(parsed[k])) for k in sorted(parsed)))
    if tag == "v":
        return (2, _value_rank(json.loads(body)))
    return (3, int(body))


def element_string(element: PathElement) -> str:
    """How SMD prints one path element: `.name`, `[name="ps"]`, `[="A100"]`, `[0]`."""
    tag, body = element[0], element[2:]
    if tag == "f":
        return "." + body
    if tag == "k":
        parsed = json.loads(body)
        return "[" + ",".join(f"{k}={_go_string_text(parsed[k])}" for k in sorted(parsed)) + "]"
    if tag == "v":
        return "[=" + _go_string_text(json.loads(body)) + "]"
    return f"[{body}]"


def path_string(path: Path) -> str:
    """How SMD prints a path (conflict messages): `.spec.roles[name="ps"].replicas`."""
    return "".join(element_string(e) for e in path)


def _list_item_element(list_type: ListType, item: Any) -> PathElement | None:
    """The path element of one item of an associative list; None when it has none (an item
    without any key field, a map in a set, a null)."""
    if list_type.keys:
        if not isinstance(item, dict):
            return None
        fields = []
        for key in list_type.keys:
            if key in item:
                fields.append((key, item[key]))
            elif key in list_type.key_defaults:
                fields.append((key, list_type.key_defaults[key]))
        return _key_element(fields) if fields else None
    if item is None or isinstance(item, (dict, list)):
        return None
    return _value_element(item)


# ---------------------------------------------------------------- field sets


class _Node:
    """One level of a field set as a trie (SMD's Set: Members and Children)."""

    __slots__ = ("children", "members")

    def __init__(self) -> None:
        self.members: set[PathElement] = set()
        self.children: dict[PathElement, _Node] = {}


def _trie(fields: Iterable[Path]) -> _Node:
    root = _Node()
    for path in fields:
        node = root
        for element in path[:-1]:
            child = node.children.get(element)
            if child is None:
                child = node.children[element] = _Node()
            node = child
        if path:
            node.members.add(path[-1])
    return root


def _emit(node: _Node, include_self: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if include_self and (node.members or node.children):
        out["."] = {}
    for element in sorted(node.members | node.children.keys(), key=element_rank):
        child = node.children.get(element)
        if child is None:
            out[element] = {}
        else:
            out[element] = _emit(child, element in node.members)
    return out


def fields_v1(fields: FieldSet) -> dict[str, Any]:
    """The `fieldsV1` trie of a field set, keys in SMD's order."""
    return _emit(_trie(fields), False)


def parse_fields_v1(document: Any) -> FieldSet:
    """The field set of a `fieldsV1` trie (SMD's readIterV1: `"."` or no known children makes a
    node a member; unknown element types are dropped); FieldsV1Error when it is not one."""
    if not isinstance(document, dict):
        raise FieldsV1Error("fieldsV1 must be a JSON object")
    out: set[Path] = set()
    _read_fields_v1(document, (), out)
    return frozenset(out)


def _read_fields_v1(node: dict[str, Any], prefix: Path, out: set[Path]) -> bool:
    """Add the paths below `prefix`; True when `node` makes `prefix` itself a member."""
    if len(prefix) > 256:
        raise FieldsV1Error("fieldsV1 is nested too deeply")
    member = False
    known_children = False
    for key, child in node.items():
        if key == ".":
            member = True
            continue
        element = canonical_element(key)
        if element is None:
            continue
        path = (*prefix, element)
        if not isinstance(child, dict):
            raise FieldsV1Error(f"fieldsV1 at {path_string(path)} must be a JSON object")
        known_children = True
        if _read_fields_v1(child, path, out):
            out.add(path)
    return member or not known_children


def iterate_paths(fields: FieldSet) -> Iterator[Path]:
    """The paths of a set in SMD's iteration order: at each level its members, then its children."""

    def walk(node: _Node, prefix: Path) -> Iterator[Path]:
        for element in sorted(node.members, key=element_rank):
            yield (*prefix, element)
        for element in sorted(node.children, key=element_rank):
            yield from walk(node.children[element], (*prefix, element))

    yield from walk(_trie(fields), ())


def recursive_difference(fields: FieldSet, remove: FieldSet) -> FieldSet:
    """`fields` without every path that is, or lies below, a path of `remove`."""
    if not remove or not fields:
        return fields
    return frozenset(p for p in fields if not any(p[:i] in remove for i in range(1, len(p) + 1)))


def ensure_named_fields_are_members(fields: FieldSet, atom: Atom) -> FieldSet:
    """`fields` plus every struct field on the way to one of its paths (not map keys or list items)."""
    out = set(fields)
    for path in fields:
        current: Atom | None = atom
        for i, element in enumerate(path[:-1]):
            if current is None:
                break
            map_type = current.map
            if element.startswith("f:") and map_type is not None:
                declared = map_type.fields.get(element[2:])
                if declared is not None:
                    out.add(path[:i + 1])
                    current = declared
                else:
                    current = map_type.element
            elif element.startswith("k:") and current.list is not None:
                current = current.list.element
            else:
                current = None
    return frozenset(out)


def to_field_set(value: Any, atom: Atom) -> FieldSet:
    """The fields `value` sets (SMD's ToFieldSet): every leaf, every list item, every map entry;
    struct fields only when they are leaves, null or empty."""
    out: set[Path] = set()
    _to_field_set(value, atom, (), out)
    return frozenset(out)


def _to_field_set(value: Any, atom: Atom, path: Path, out: set[Path]) -> None:
    kind = _kind(atom, value)
    if kind == "map":
        assert atom.map is not None
        if atom.map.atomic:
            out.add(path)
            return
        if not isinstance(value, dict):
            return
        for key, child in value.items():
            child_path = (*path, field_element(key))
            _to_field_set(child, _child_atom(atom.map, key), child_path, out)
            if child is None or (isinstance(child, dict) and not child) or key not in atom.map.fields:
                out.add(child_path)
    elif kind == "list":
        assert atom.list is not None
        if atom.list.atomic:
            out.add(path)
            return
        if not isinstance(value, list):
            return
        seen: set[PathElement] = set()
        duplicates: set[PathElement] = set()
        elements = [_list_item_element(atom.list, item) for item in value]
        for element in elements:
            if element is None:
                continue
            if element in seen:
                if element not in duplicates:
                    out.add((*path, element))
                    duplicates.add(element)
            else:
                seen.add(element)
        for element, item in zip(elements, value, strict=True):
            if element is None or element in duplicates:
                continue
            item_path = (*path, element)
            _to_field_set(item, atom.list.element, item_path, out)
            out.add(item_path)
    else:
        out.add(path)


# ---------------------------------------------------------------- compare


@dataclass(frozen=True, slots=True)
class Comparison:
    """What changed from one object to another (SMD's typed.Comparison)."""

    added: FieldSet
    modified: FieldSet
    removed: FieldSet

    def exclude(self, ignored: FieldSet) -> Comparison:
        if not ignored:
            return self
        return Comparison(recursive_difference(self.added, ignored), recursive_difference(self.modified, ignored),
                          recursive_difference(self.removed, ignored))

    @property
    def is_same(self) -> bool:
        return not (self.added or self.modified or self.removed)


class _Compare:
    __slots__ = ("added", "modified", "removed")

    def __init__(self) -> None:
        self.added: set[Path] = set()
        self.modified: set[Path] = set()
        self.removed: set[Path] = set()

    def leaf(self, lhs: Any, rhs: Any, path: Path) -> None:
        if lhs is ABSENT:
            self.added.add(path)
        elif rhs is ABSENT:
            self.removed.add(path)
        elif not json_equal(lhs, rhs):
            self.modified.add(path)

    def walk(self, lhs: Any, rhs: Any, atom: Atom, path: Path) -> None:
        left = _kind(atom, lhs)
        right = _kind(atom, rhs)
        if rhs is ABSENT:
            in_leaf = self.handle(left, lhs, rhs, atom, path)
        elif lhs is ABSENT or left == right:
            in_leaf = self.handle(right, lhs, rhs, atom, path)
        else:
            self.handle(left, lhs, rhs, atom, path)
            in_leaf = self.handle(right, lhs, rhs, atom, path)
        if not in_leaf:
            if lhs is ABSENT:
                self.added.add(path)
            elif rhs is ABSENT:
                self.removed.add(path)

    def handle(self, kind: str, lhs: Any, rhs: Any, atom: Atom, path: Path) -> bool:
        """Compare under one part of the atom; True when that was a leaf."""
        if kind == "map":
            assert atom.map is not None
            lmap = lhs if isinstance(lhs, dict) else None
            rmap = rhs if isinstance(rhs, dict) else None
            if atom.map.atomic or (not lmap and not rmap):
                self.leaf(lhs, rhs, path)
                return True
            for key in _zip_keys(lmap, rmap):
                self.walk(lmap.get(key, ABSENT) if lmap else ABSENT, rmap.get(key, ABSENT) if rmap else ABSENT,
                          _child_atom(atom.map, key), (*path, field_element(key)))
            return False
        if kind == "list":
            assert atom.list is not None
            llist = lhs if isinstance(lhs, list) else None
            rlist = rhs if isinstance(rhs, list) else None
            if atom.list.atomic or (not llist and not rlist):
                self.leaf(lhs, rhs, path)
                return True
            self.list_items(atom.list, llist or [], rlist or [], path)
            return False
        self.leaf(lhs, rhs, path)
        return True

    def list_items(self, list_type: ListType, lhs: list[Any], rhs: list[Any], path: Path) -> None:
        order: list[PathElement] = []
        lvalues = _index_items(list_type, lhs, order)
        rvalues = _index_items(list_type, rhs, order)
        for element in order:
            llist = lvalues.get(element, [])
            rlist = rvalues.get(element, [])
            item_path = (*path, element)
            if len(llist) <= 1 and len(rlist) <= 1:
                self.walk(llist[0] if llist else ABSENT, rlist[0] if rlist else ABSENT, list_type.element, item_path)
            elif len(llist) >= 2 and len(rlist) >= 2:
                if not json_equal(llist, rlist):
                    self.modified.add(item_path)
            elif len(llist) >= 2:
                if rlist:
                    self.walk(ABSENT, rlist[0], list_type.element, item_path)
                self.removed.add(item_path)
            else:
                if llist:
                    self.walk(llist[0], ABSENT, list_type.element, item_path)
                self.added.add(item_path)


def _zip_keys(lhs: dict[str, Any] | None, rhs: dict[str, Any] | None) -> list[str]:
    keys = list(lhs or ())
    if rhs:
        keys += [k for k in rhs if not lhs or k not in lhs]
    return keys


def _index_items(list_type: ListType, items: list[Any], order: list[PathElement]) -> dict[PathElement, list[Any]]:
    """Items by path element (duplicates kept together); new elements appended to `order`."""
    out: dict[PathElement, list[Any]] = {}
    for item in items:
        element = _list_item_element(list_type, item)
        if element is None:
            continue
        bucket = out.get(element)
        if bucket is None:
            out[element] = [item]
            if element not in order:
                order.append(element)
        else:
            bucket.append(item)
    return out


def compare(lhs: Any, rhs: Any, atom: Atom) -> Comparison:
    """Fields added, modified and removed going from `lhs` to `rhs` (SMD's TypedValue.Compare)."""
    walker = _Compare()
    walker.walk(lhs, rhs, atom, ())
    return Comparison(frozenset(walker.added), frozenset(walker.modified), frozenset(walker.removed))


# ---------------------------------------------------------------- merge


class MergeError(ValueError):
    """The applied configuration has a keyed list it cannot merge (an item without its key
    fields, or two items with the same key)."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path_string(path) or '<root>'}: {message}")
        self.path = path
        self.detail = message


def merge(lhs: Any, rhs: Any, atom: Atom) -> Any:
    """`rhs` (an applied configuration) merged over `lhs` (SMD's TypedValue.Merge): maps merge key
    by key, associative lists item by item in SMD's order, everything else is replaced.
    Raises MergeError for a keyed list in `rhs` that SMD refuses (duplicates, items without keys)."""
    out = _merge(lhs, rhs, atom, ())
    return {} if out is ABSENT else out


def _merge(lhs: Any, rhs: Any, atom: Atom, path: Path) -> Any:
    kind = _kind(atom, lhs if rhs is ABSENT else rhs)
    if kind == "map":
        assert atom.map is not None
        lmap = lhs if isinstance(lhs, dict) else None
        rmap = rhs if isinstance(rhs, dict) else None
        if atom.map.atomic or (not lmap and not rmap):
            return rhs if rhs is not ABSENT else lhs
        out: dict[str, Any] = {}
        for key in _zip_keys(lmap, rmap):
            child = _merge(lmap.get(key, ABSENT) if lmap else ABSENT, rmap.get(key, ABSENT) if rmap else ABSENT,
                           _child_atom(atom.map, key), (*path, field_element(key)))
            if child is not ABSENT:
                out[key] = child
        return out if out else ABSENT
    if kind == "list":
        assert atom.list is not None
        llist = lhs if isinstance(lhs, list) else None
        rlist = rhs if isinstance(rhs, list) else None
        if atom.list.atomic or (not llist and not rlist):
            return rhs if rhs is not ABSENT else lhs
        merged = _merge_list(atom.list, llist or [], rlist or [], path)
        return merged if merged else ABSENT
    return rhs if rhs is not ABSENT else lhs


def _merge_list(list_type: ListType, lhs: list[Any], rhs: list[Any], path: Path) -> list[Any]:
    """SMD's mergingWalker.visitListItems: the merged list keeps the live order and puts the
    applied items where the applied list orders them relative to the items both share."""
    rhs_elements: list[PathElement] = []
    observed_rhs: dict[PathElement, Any] = {}
    for i, item in enumerate(rhs):
        element = _list_item_element(list_type, item)
        if element is None:
            raise MergeError(path, f"element {i}: " + _keyless_reason(list_type, item))
        if element in observed_rhs:
            raise MergeError(path, f"duplicate entries for key {element_string(element)}")
        observed_rhs[element] = item
        rhs_elements.append(element)
    lhs_elements: list[PathElement] = []
    lhs_items: list[Any] = []
    keyless: list[Any] = []
    observed_lhs: dict[PathElement, Any] = {}
    for item in lhs:
        element = _list_item_element(list_type, item)
        if element is None:
            keyless.append(item)  # SMD refuses these; kept (at the end) so that nothing live is lost
            continue
        observed_lhs[element] = None if element in observed_lhs else item  # duplicates merge as null
        lhs_elements.append(element)
        lhs_items.append(item)
    shared_order = [e for e in rhs_elements if e in observed_lhs]
    shared_order.reverse()
    next_shared = shared_order.pop() if shared_order else None
    merged_rhs: set[PathElement] = set()
    out: list[Any] = []

    def add(lhs_item: Any, rhs_item: Any, element: PathElement) -> None:
        child = _merge(lhs_item, rhs_item, list_type.element, (*path, element))
        if child is not ABSENT:
            out.append(child)

    li, ri = 0, 0
    llen, rlen = len(lhs_elements), len(rhs_elements)
    while li < llen or ri < rlen:
        if li < llen and ri < rlen:
            element = lhs_elements[li]
            if element == rhs_elements[ri]:
                merged_rhs.add(element)
                add(observed_lhs.get(element, ABSENT), observed_rhs[element], element)
                li += 1
                ri += 1
                next_shared = shared_order.pop() if shared_order else None
                continue
            if element in observed_rhs and next_shared is not None and next_shared != element:
                li += 1
                continue
        if li < llen:
            element = lhs_elements[li]
            if element not in observed_rhs:
                add(lhs_items[li], ABSENT, element)
                li += 1
                continue
            if element in merged_rhs:
                li += 1
        if ri < rlen:
            element = rhs_elements[ri]
            merged_rhs.add(element)
            add(observed_lhs.get(element, ABSENT), observed_rhs[element], element)
            ri += 1
            if next_shared is not None and next_shared == element:
                next_shared = shared_order.pop() if shared_order else None
    return out + keyless


def _keyless_reason(list_type: ListType, item: Any) -> str:
    if list_type.keys:
        if not isinstance(item, dict):
            return "associative list with keys may not have non-map elements"
        return (f"associative list with keys has an element that omits all key fields "
                f"{json.dumps(list(list_type.keys))} (and doesn't have default values for any key fields)")
    if isinstance(item, dict):
        return "associative list without keys has an element that's a map type"
    if isinstance(item, list):
        return "not supported: associative list with lists as elements"
    return "associative list without keys has an element that's an explicit null"


def check_keys(value: Any, atom: Atom) -> None:
    """Raise MergeError where `value` (an applied configuration) has a keyed list SMD refuses."""
    _check_keys(value, atom, ())


def _check_keys(value: Any, atom: Atom, path: Path) -> None:
    kind = _kind(atom, value)
    if kind == "map" and isinstance(value, dict) and atom.map is not None and not atom.map.atomic:
        for key, child in value.items():
            _check_keys(child, _child_atom(atom.map, key), (*path, field_element(key)))
    elif kind == "list" and isinstance(value, list) and atom.list is not None and not atom.list.atomic:
        seen: set[PathElement] = set()
        for i, item in enumerate(value):
            element = _list_item_element(atom.list, item)
            if element is None:
                raise MergeError(path, f"element {i}: " + _keyless_reason(atom.list, item))
            if element in seen:
                raise MergeError(path, f"duplicate entries for key {element_string(element)}")
            seen.add(element)
            _check_keys(item, atom.list.element, (*path, element))


def drop_applied_nulls(merged: Any, config: Any, atom: Atom) -> Any:
    """`merged` without the map entries that `config` set to null and that stayed null: kube
    prunes such nulls from custom resources, so an applied `field: null` leaves no field."""
    if isinstance(merged, dict) and isinstance(config, dict):
        map_type = atom.map if atom.map is not None else MapType({}, DEDUCED)
        for key, value in config.items():
            if key not in merged:
                continue
            if value is None:
                if merged[key] is None:
                    del merged[key]
            else:
                drop_applied_nulls(merged[key], value, _child_atom(map_type, key))
    elif isinstance(merged, list) and isinstance(config, list) and atom.list is not None and not atom.list.atomic:
        by_element = {_list_item_element(atom.list, item): item for item in config}
        for item in merged:
            element = _list_item_element(atom.list, item)
            if element is not None and element in by_element:
                drop_applied_nulls(item, by_element[element], atom.list.element)
    return merged


# ---------------------------------------------------------------- remove


def remove_items(value: Any, fields: FieldSet, atom: Atom) -> Any:
    """`value` without the fields, map entries and list items named in `fields` (SMD's RemoveItems);
    a map or list left empty by the removal disappears instead of becoming null."""
    if not fields:
        return value
    out = _remove(value, _trie(fields), atom)
    return {} if out is ABSENT else out


def _remove(value: Any, node: _Node, atom: Atom) -> Any:
    kind = _kind(atom, value)
    if kind == "map" and isinstance(value, dict) and atom.map is not None:
        if atom.map.atomic or not value:
            return value
        out: dict[str, Any] = {}
        for key, child in value.items():
            element = field_element(key)
            if element in node.members:
                continue
            sub = node.children.get(element)
            if sub is not None:
                child = _remove(child, sub, _child_atom(atom.map, key))
                if child is ABSENT:
                    continue
            out[key] = child
        return out if out else ABSENT
    if kind == "list" and isinstance(value, list) and atom.list is not None:
        if atom.list.atomic or not value:
            return value
        items: list[Any] = []
        for item in value:
            item_element = _list_item_element(atom.list, item)
            if item_element is not None:
                element = item_element
                if element in node.members:
                    continue
                sub = node.children.get(element)
                if sub is not None:
                    item = _remove(item, sub, atom.list.element)
                    if item is ABSENT:
                        continue
            items.append(item)
        return items if items else ABSENT
    return value


# ---------------------------------------------------------------- the updater


@dataclass(frozen=True, slots=True)
class VersionedSet:
    """What one manager owns (SMD's fieldpath.VersionedSet)."""

    fields: FieldSet
    api_version: str
    applied: bool


#: manager identifier -> what it owns
Managers = dict[str, VersionedSet]


class Conflicts(Exception):
    """An apply would change fields other managers own: (manager identifier, path) pairs."""

    def __init__(self, conflicts: list[tuple[str, Path]]) -> None:
        super().__init__(f"{len(conflicts)} conflict(s)")
        self.conflicts = conflicts

    @property
    def paths(self) -> FieldSet:
        return frozenset(path for _, path in self.conflicts)


def _conflicts_of(sets: Mapping[str, FieldSet]) -> Conflicts:
    return Conflicts([(manager, path) for manager in sorted(sets) for path in iterate_paths(sets[manager])])


def _update_managers(
    old: Any, new: Any, *, managers: Managers, workflow: str, force: bool, api_version: str, atom: Atom,
    ignored: FieldSet,
) -> tuple[Managers, Comparison]:
    """SMD's Updater.update: conflicts (fields others own that change) and removals."""
    comparison = compare(old, new, atom).exclude(ignored)
    changed = comparison.modified | comparison.added
    conflicts: dict[str, FieldSet] = {}
    out = dict(managers)
    for manager, owned in managers.items():
        if manager == workflow:
            continue
        if owned.api_version != api_version:
            del out[manager]  # a version this kind does not serve (SMD drops it: IsMissingVersionError)
            continue
        clash = owned.fields & changed
        if clash:
            conflicts[manager] = clash
    if conflicts and not force:
        raise _conflicts_of(conflicts)
    for manager in list(out):
        if manager == workflow:
            continue
        owned = out[manager]
        remaining = owned.fields - conflicts.get(manager, EMPTY) - comparison.removed
        if remaining != owned.fields:
            out[manager] = VersionedSet(remaining, owned.api_version, owned.applied)
    return {m: s for m, s in out.items() if s.fields}, comparison


def update(
    live: Any, new: Any, *, managers: Managers, manager: str, api_version: str, atom: Atom,
    ignored: FieldSet = EMPTY,
) -> Managers:
    """The managers after `manager` turned `live` into `new` by a non-apply write (SMD's
    Updater.Update): it owns what it added or changed, others lose that and anything removed."""
    out, comparison = _update_managers(live, new, managers=managers, workflow=manager, force=True,
                                       api_version=api_version, atom=atom, ignored=ignored)
    previous = out[manager].fields if manager in out else EMPTY
    owned = recursive_difference((previous - comparison.removed) | comparison.modified | comparison.added, ignored)
    if owned:
        out[manager] = VersionedSet(owned, api_version, False)
    else:
        out.pop(manager, None)
    return out


def apply(
    live: Any, config: Any, *, managers: Managers, manager: str, api_version: str, force: bool, atom: Atom,
    ignored: FieldSet = EMPTY,
) -> tuple[Any, Managers]:
    """SMD's Updater.Apply: `config` merged over `live`, owned by `manager`; fields `manager`
    applied last time, dropped now and owned by nobody else are removed. Returns (the new
    object, or None when it equals `live`; the managers). Raises Conflicts (unless `force`)
    or MergeError."""
    check_keys(config, atom)
    merged = merge(live, config, atom)
    last = managers.get(manager)
    applied = recursive_difference(to_field_set(config, atom), ignored)
    with_applied = dict(managers)
    with_applied[manager] = VersionedSet(applied, api_version, True)
    pruned = _prune(merged, managers=with_applied, last=last, atom=atom)
    out, _ = _update_managers(live, pruned, managers=with_applied, workflow=manager, force=force,
                              api_version=api_version, atom=atom, ignored=ignored)
    return (None if json_equal(live, pruned) else pruned), out


def _prune(merged: Any, *, managers: Managers, last: VersionedSet | None, atom: Atom) -> Any:
    """Remove what the applier owned last time, no longer applies, and nobody else owns
    (SMD's prune, addBackOwnedItems and addBackDanglingItems)."""
    if last is None or not last.fields:
        return merged
    last_fields = ensure_named_fields_are_members(last.fields, atom)
    pruned = remove_items(merged, last_fields, atom)
    managed: set[Path] = set()
    for owned in managers.values():
        managed |= owned.fields
    merged_set = ensure_named_fields_are_members(to_field_set(merged, atom), atom)
    pruned_set = ensure_named_fields_are_members(to_field_set(pruned, atom), atom)
    managed_set = ensure_named_fields_are_members(frozenset(managed), atom)
    pruned = remove_items(merged, merged_set - (pruned_set | managed_set), atom)
    pruned_set = ensure_named_fields_are_members(to_field_set(pruned, atom), atom)
    return remove_items(merged, (merged_set - pruned_set) & last_fields, atom)
