"""Read-only typed views over raw Kubernetes-style objects (kopf's Body and Meta):
`Body(obj).uid`, `.name`, `.labels`, `.deleting`, `.phase` instead of chains of
`(obj.get("metadata") or {}).get(...)`.

A view never fails on malformed input, because it reads what clients, stores and
members send: an object or a field of the wrong type reads as empty (a string
field as "", a mapping as {}, a list as (), a number as 0, a time as None).
It never copies or changes the object: a mapping it returns is the object's own
(read it, do not change it), and a write goes to the object itself.

Bottom layer: standard library only, no I/O, no state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Generic, TypeVar, overload

__all__ = ["Body", "Meta", "as_mapping"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_T = TypeVar("_T")


def as_mapping(value: object) -> Mapping[str, Any]:
    """`value` if it is a mapping, else an empty one: a nested field read without fail, as the views read
    theirs (e.g. a container status's `state.terminated`)."""
    # `type(...) is dict` first: nearly every value is a dict, and isinstance against the Mapping ABC is
    # several times slower (a view is built for every job on every event and every tick)
    return value if type(value) is dict or isinstance(value, Mapping) else _EMPTY


_mapping = as_mapping


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _time(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: object) -> int:
    return value if type(value) is int else 0  # not a bool


def _items(value: object) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _raw(value: object) -> Any:
    return value


class _Field(Generic[_T]):
    """A metadata field, read through `read` (which turns a value of the wrong type into the empty one)."""

    __slots__ = ("key", "read")

    def __init__(self, key: str, read: Callable[[object], _T]) -> None:
        self.key = key
        self.read = read

    @overload
    def __get__(self, view: None, owner: type[Meta]) -> _Field[_T]: ...

    @overload
    def __get__(self, view: Meta, owner: type[Meta]) -> _T: ...

    def __get__(self, view: Meta | None, owner: type[Meta]) -> _Field[_T] | _T:
        return self if view is None else self.read(view.metadata.get(self.key))


class Meta:
    """An object's metadata (ObjectMeta), read without fail."""

    __slots__ = ("metadata",)

    name = _Field("name", _text)
    generate_name = _Field("generateName", _text)
    namespace = _Field("namespace", _text)
    uid = _Field("uid", _text)
    resource_version = _Field("resourceVersion", _text)
    generation = _Field("generation", _count)
    labels = _Field("labels", _mapping)
    annotations = _Field("annotations", _mapping)
    creation_timestamp = _Field("creationTimestamp", _time)
    deletion_timestamp = _Field("deletionTimestamp", _time)
    finalizers = _Field("finalizers", _items)
    #: as stored (None when absent): its decoder checks its shape
    managed_fields = _Field("managedFields", _raw)

    def __init__(self, metadata: object) -> None:
        #: the metadata mapping itself (an empty one when it is missing or not a mapping)
        self.metadata: Mapping[str, Any] = _mapping(metadata)

    @property
    def deleting(self) -> bool:
        """Whether the object is being deleted (a deletionTimestamp is set)."""
        return bool(self.metadata.get("deletionTimestamp"))


class Body(Meta):
    """A whole object: its metadata (this view is its `Meta`), spec and status."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        #: the object itself (an empty mapping when it is not a mapping)
        self.obj: Mapping[str, Any] = _mapping(obj)
        self.metadata = _mapping(self.obj.get("metadata"))  # Meta.__init__, without the call

    @property
    def spec(self) -> Mapping[str, Any]:
        return _mapping(self.obj.get("spec"))

    @property
    def status(self) -> Mapping[str, Any]:
        return _mapping(self.obj.get("status"))

    @property
    def phase(self) -> str:
        """status.phase ("" when there is none)."""
        return _text(self.status.get("phase"))
