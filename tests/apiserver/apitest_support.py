"""A small registry for testing the API machinery on its own (no simulator):

- `widgets.test.federator.dev/v1`: namespaced, with /status, a required
  integer `spec.size`, a `spec.color` field selector and Table columns;
- `gadgets.test.federator.dev/v1`: cluster-scoped, no /status (a status
  change bumps generation), allows unconditional update;
- `things/v1` in the core group: namespaced, strategic merge patch with
  `spec.items` merged by `name`, graceful deletion for 30 s unless
  `spec.quick`, DELETE returns the object (like pods).

conftest.py builds the fixtures from these: a MemoryStore with a short
retained window, an ObjectStorage over it, and the app served on a real
loopback socket (`api`) with a bearer token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from federator.apiserver.app import Principal
from federator.apiserver.errors import FieldError
from federator.apiserver.registry import JSONObject, Registry, ResourceType, SMPListStrategy, TableColumn, jsonpath_cell
from federator.apiserver.selectors import path_getter
from federator.apiserver.storage import ObjectStorage
from federator.store.memory import MemoryStore

GROUP = "test.federator.dev"
TOKEN = "test-token-0123456789"


def _validate_widget(obj: JSONObject) -> list[FieldError]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [FieldError.required("spec")]
    size = spec.get("size")
    if size is None:
        return [FieldError.required("spec.size")]
    if not isinstance(size, int) or isinstance(size, bool):
        return [FieldError.wrong_type("spec.size", size, "an integer")]
    if size < 0:
        return [FieldError.invalid("spec.size", size, "must be >= 0")]
    return []


WIDGETS = ResourceType(
    group=GROUP, version="v1", kind="Widget", plural="widgets", singular="widget", namespaced=True,
    short_names=("wd",), validate=_validate_widget,
    field_selectors={"spec.color": path_getter("spec.color"), "status.phase": path_getter("status.phase")},
    columns=(TableColumn("Size", jsonpath_cell("spec", "size", default=None), type="integer"),
             TableColumn("Color", jsonpath_cell("spec", "color", default=None), priority=1)),
    openapi_schema={"properties": {"spec": {"type": "object", "properties": {
        "size": {"type": "integer", "description": "How big."}}}}},
)

GADGETS = ResourceType(
    group=GROUP, version="v1", kind="Gadget", plural="gadgets", singular="gadget", namespaced=False,
    status_subresource=False, allow_unconditional_update=True,
)


def _thing_grace(obj: JSONObject, requested: int | None) -> int:
    if (obj.get("spec") or {}).get("quick"):
        return 0
    return 30 if requested is None else requested


THINGS = ResourceType(
    group="", version="v1", kind="Thing", plural="things", singular="thing", namespaced=True,
    graceful_delete=_thing_grace, return_deleted_object=True,
    strategic_merge={
        "spec.items": SMPListStrategy("name"),
        "spec.items[].ports": SMPListStrategy("port"),
        "metadata.finalizers": SMPListStrategy(None),
        "spec.tags": SMPListStrategy(None),
    },
)


def make_registry() -> Registry:
    return Registry([THINGS, WIDGETS, GADGETS])


@dataclass
class Api:
    """The app on a real socket plus a client session with the token."""

    server: TestServer
    session: aiohttp.ClientSession
    storage: ObjectStorage
    store: MemoryStore
    app: web.Application

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))

    async def request(self, method: str, path: str, **kw: Any) -> tuple[int, Any, aiohttp.ClientResponse]:
        async with self.session.request(method, self.url(path), **kw) as resp:
            raw = await resp.read()
            try:
                body = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                body = raw
            return resp.status, body, resp


async def authenticate(request: web.Request) -> Principal | None:
    if request.headers.get("Authorization") == f"Bearer {TOKEN}":
        return Principal("tester")
    return None


def widget(name: str, *, size: int = 1, ns: str | None = "ns1", **extra: Any) -> JSONObject:
    meta: JSONObject = {"name": name}
    if ns is not None:
        meta["namespace"] = ns
    obj: JSONObject = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": meta, "spec": {"size": size}}
    obj["spec"].update(extra.pop("spec", {}))
    meta.update(extra)
    return obj
