"""build_api_app: a kube-style REST API (aiohttp) over an ObjectStorage.

Signature committed early for other helpers; implementation follows.
This module must never import the simulator or the hub.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from federator.apiserver.registry import Registry, ResourceType
from federator.apiserver.storage import ObjectStorage


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a request (for logs; never holds the credential)."""

    name: str
    groups: tuple[str, ...] = ()


Authenticator = Callable[[web.Request], Awaitable[Principal | None]]


@dataclass(frozen=True, slots=True)
class SubresourceRequest:
    request: web.Request
    rt: ResourceType
    namespace: str | None
    name: str
    storage: ObjectStorage
    body: bytes


SubresourceHandler = Callable[[SubresourceRequest], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Subresource:
    """An extra subresource such as pods/binding: its discovery entry and its
    handler (called for every verb listed)."""

    group: str
    plural: str
    name: str
    kind: str
    verbs: tuple[str, ...]
    handler: SubresourceHandler


def build_api_app(
    *,
    storage: ObjectStorage,
    registry: Registry,
    server_name: str,
    authenticate: Authenticator | None = None,
    middlewares: Sequence[Any] = (),
    version_info: Mapping[str, str] | None = None,
    subresources: Sequence[Subresource] = (),
    max_body_bytes: int = 3 * 1024 * 1024,
) -> web.Application:
    raise NotImplementedError
