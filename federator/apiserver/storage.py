"""Typed object access over a revisioned `Store`: the one implementation of
Kubernetes object semantics (resourceVersion, generation, finalizers,
graceful deletion, status subresource, list paging, watch) that both the HTTP
handlers and in-process controllers use.

INTERFACE NOTES for other helpers (changes against notes-apiserver-iface.md):
- `ResourceType.graceful_delete` is a GracePolicy callable (obj, requested
  grace seconds | None) -> effective seconds, not a bool.
- validators return FieldError objects or (field, message) pairs.
- `delete()` returns the deleted or terminating object; `delete_ex()` also
  says whether it is gone.
- every write method takes `dry_run: bool = False` (keyword).
- objects returned by get/list/watch are fresh dicts: callers may mutate them.

This module must never import aiohttp, the simulator or the hub.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from federator.apiserver.registry import JSONObject, Registry, ResourceType
from federator.store.protocol import Store


@dataclass(frozen=True, slots=True)
class ObjectList:
    items: list[JSONObject]
    resource_version: str
    continue_token: str | None = None
    remaining: int | None = None


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK"
    object: JSONObject


@dataclass(frozen=True, slots=True)
class DeleteResult:
    object: JSONObject
    #: True when the object is gone; False when it is terminating (grace
    #: period or finalizers pending).
    deleted: bool


Mutator = Callable[[JSONObject], "JSONObject | None"]


class ObjectStorage:
    def __init__(self, store: Store, registry: Registry, *, watch_cache_events: int = 4096) -> None:
        self.store = store
        self.registry = registry

    async def get(self, rt: ResourceType, *, namespace: str | None, name: str) -> JSONObject:
        raise NotImplementedError

    async def list(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> ObjectList:
        raise NotImplementedError

    async def create(
        self, rt: ResourceType, obj: JSONObject, *, namespace: str | None, dry_run: bool = False
    ) -> JSONObject:
        raise NotImplementedError

    async def update(
        self,
        rt: ResourceType,
        obj: JSONObject,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> JSONObject:
        raise NotImplementedError

    async def patch(
        self,
        rt: ResourceType,
        *,
        namespace: str | None,
        name: str,
        patch: bytes | JSONObject | list[Any],
        content_type: str,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> JSONObject:
        raise NotImplementedError

    async def delete(
        self,
        rt: ResourceType,
        *,
        namespace: str | None,
        name: str,
        grace_period_seconds: int | None = None,
        precondition_resource_version: str | None = None,
        precondition_uid: str | None = None,
        dry_run: bool = False,
    ) -> JSONObject:
        raise NotImplementedError

    async def guaranteed_update(
        self,
        rt: ResourceType,
        *,
        namespace: str | None,
        name: str,
        mutate: Mutator,
        subresource: str | None = None,
    ) -> JSONObject | None:
        raise NotImplementedError

    def watch(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        raise NotImplementedError

    async def current_resource_version(self) -> str:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError
