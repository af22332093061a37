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

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

__all__ = ["Body", "Meta"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _time(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class Meta:
    """An object's metadata (ObjectMeta), read without fail."""

    __slots__ = ("metadata",)

    def __init__(self, metadata: object) -> None:
        #: the metadata mapping itself (an empty one when it is missing or not a mapping)
        self.metadata: Mapping[str, Any] = _mapping(metadata)

    @property
    def name(self) -> str:
        return _text(self.metadata.get("name"))

    @property
    def generate_name(self) -> str:
        return _text(self.metadata.get("generateName"))

    @property
    def namespace(self) -> str:
        return _text(self.metadata.get("namespace"))

    @property
    def uid(self) -> str:
        return _text(self.metadata.get("uid"))

    @property
    def resource_version(self) -> str:
        return _text(self.metadata.get("resourceVersion"))

    @property
    def generation(self) -> int:
        value = self.metadata.get("generation")
        return value if type(value) is int else 0

    @property
    def labels(self) -> Mapping[str, Any]:
        return _mapping(self.metadata.get("labels"))

    @property
    def annotations(self) -> Mapping[str, Any]:
        return _mapping(self.metadata.get("annotations"))

    @property
    def creation_timestamp(self) -> str | None:
        return _time(self.metadata.get("creationTimestamp"))

    @property
    def deletion_timestamp(self) -> str | None:
        return _time(self.metadata.get("deletionTimestamp"))

    @property
    def deleting(self) -> bool:
        """Whether the object is being deleted (a deletionTimestamp is set)."""
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def finalizers(self) -> Sequence[Any]:
        value = self.metadata.get("finalizers")
        return value if isinstance(value, list | tuple) else ()

    @property
    def managed_fields(self) -> Any:
        """managedFields as stored (None when absent): its decoder checks its shape."""
        return self.metadata.get("managedFields")


class Body(Meta):
    """A whole object: its metadata (this view is its `Meta`), spec and status."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        #: the object itself (an empty mapping when it is not a mapping)
        self.obj: Mapping[str, Any] = _mapping(obj)
        super().__init__(self.obj.get("metadata"))

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
