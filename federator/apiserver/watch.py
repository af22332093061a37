"""WATCH over HTTP: a chunked JSON stream, one event per line (kube-api-notes §3).

- headers are flushed before the first event;
- a watch from a compacted resourceVersion is answered with HTTP 200 and a
  single ERROR event carrying a 410 Expired Status, then the stream ends;
- BOOKMARK events (when allowWatchBookmarks) carry an object of the watched
  kind with only metadata.resourceVersion;
- `timeoutSeconds` ends the stream cleanly;
- with a Table Accept header (kubectl get -w) each event carries a Table
  with one row; only the first carries columnDefinitions;
- a DELETED event carries the object's last state stamped with the delete's
  resourceVersion (done by the watch cache).

Every event is encoded once in the watch cache and written as-is to every
watcher; a burst becomes one write. This module must never import the
simulator or the hub.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.apiserver.registry import JSONObject, ResourceType
from federator.apiserver.selectors import FieldSelector, LabelSelector
from federator.apiserver.storage import ObjectStorage
from federator.apiserver.table import TABLE_API_VERSION, column_definitions, table_row
from federator.apiserver.watchcache import CachedEvent

#: kube-apiserver's --min-request-timeout is 1800 s; watches without
#: timeoutSeconds last between one and two times that.
DEFAULT_MIN_WATCH_SECONDS = 1800


@dataclass(frozen=True, slots=True)
class WatchOptions:
    namespace: str | None
    resource_version: str | None
    label_selector: LabelSelector
    field_selector: FieldSelector
    timeout_seconds: float | None
    allow_bookmarks: bool
    send_initial_events: bool
    table: bool
    include_object: str


def event_line(event_type: str, obj: JSONObject) -> bytes:
    return b'{"type":"' + event_type.encode() + b'","object":' + orjson.dumps(obj) + b"}\n"


def error_line(err: ApiError) -> bytes:
    return event_line("ERROR", err.to_status())


def bookmark_line(rt: ResourceType, revision: int, *, initial_events_end: bool = False) -> bytes:
    meta: JSONObject = {"resourceVersion": str(revision)}
    if initial_events_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return event_line("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta})


class _TableEncoder:
    """Encodes each event as a one-row Table; column definitions go only in
    the first event of the stream, as kube-apiserver does."""

    def __init__(self, rt: ResourceType, include_object: str) -> None:
        self.rt = rt
        self.include_object = include_object
        self.sent_columns = False

    def line(self, event_type: str, obj: JSONObject) -> bytes:
        now = dt.datetime.now(dt.UTC)
        table = {
            "kind": "Table",
            "apiVersion": TABLE_API_VERSION,
            "metadata": {"resourceVersion": Body(obj).resource_version},
            "columnDefinitions": None if self.sent_columns else column_definitions(self.rt),
            "rows": [table_row(self.rt, obj, now=now, include_object=self.include_object)],
        }
        self.sent_columns = True
        return event_line(event_type, table)


async def serve_watch(
    request: web.Request,
    *,
    storage: ObjectStorage,
    rt: ResourceType,
    options: WatchOptions,
    stopping: Callable[[], bool],
    bookmark_interval: float,
    on_open: Callable[[], None] = lambda: None,
    on_close: Callable[[], None] = lambda: None,
) -> web.StreamResponse:
    """Stream watch events until the timeout, the client leaves, or the server stops."""
    loop = asyncio.get_running_loop()
    timeout = options.timeout_seconds
    if timeout is None:
        timeout = DEFAULT_MIN_WATCH_SECONDS * (1 + random.random())
    deadline = loop.time() + timeout
    initial_error: ApiError | None = None
    from_revision, initial = 0, False
    try:
        from_revision, initial = await storage.watch_start(rt, resource_version=options.resource_version)
    except ApiError as e:
        if e.code != 410:
            raise
        initial_error = e
    if options.send_initial_events:
        initial = True

    response = web.StreamResponse(status=200, headers={
        "Content-Type": "application/json",
        "Cache-Control": "no-cache, private",
    })
    response.enable_chunked_encoding()
    await response.prepare(request)
    on_open()
    try:
        if initial_error is not None:
            await response.write(error_line(initial_error))
            return response
        await _stream(
            request, response, storage=storage, rt=rt, options=options, from_revision=from_revision,
            initial=initial, deadline=deadline, stopping=stopping, bookmark_interval=bookmark_interval,
        )
    except (ConnectionResetError, ConnectionError, asyncio.CancelledError):
        raise
    finally:
        on_close()
    return response


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _stream(
    request: web.Request,
    response: web.StreamResponse,
    *,
    storage: ObjectStorage,
    rt: ResourceType,
    options: WatchOptions,
    from_revision: int,
    initial: bool,
    deadline: float,
    stopping: Callable[[], bool],
    bookmark_interval: float,
) -> None:
    loop = asyncio.get_running_loop()
    table = _TableEncoder(rt, options.include_object) if options.table else None
    bookmarks = options.allow_bookmarks and table is None
    last_bookmark_at = loop.time()
    sent_revision = from_revision - 1 if from_revision > 0 else 0
    announced_initial_end = not (options.send_initial_events and bookmarks)

    def stop() -> bool:
        return stopping() or loop.time() >= deadline or _client_gone(request)

    try:
        async for batch, progress in storage.watch_batches(
            rt, namespace=options.namespace, from_revision=from_revision, initial=initial,
            lsel=options.label_selector, fsel=options.field_selector, stop=stop,
            idle_timeout=min(1.0, max(0.05, bookmark_interval)),
        ):
            if batch:
                chunks: list[bytes] = []
                for event_type, ev in batch:
                    if rt.present is not None:
                        # Shown differently from how it is stored (e.g. redacted): encode per watcher.
                        shown = rt.present(ev.obj() if isinstance(ev, CachedEvent) else ev)
                        chunks.append(table.line(event_type, shown) if table is not None
                                      else event_line(event_type, shown))
                    elif table is not None:
                        obj = ev.obj() if isinstance(ev, CachedEvent) else ev
                        chunks.append(table.line(event_type, obj))
                    elif isinstance(ev, CachedEvent):
                        chunks.append(ev.line(event_type))
                    else:
                        chunks.append(event_line(event_type, ev))
                await response.write(b"".join(chunks))
            sent_revision = max(sent_revision, progress)
            if not announced_initial_end:
                await response.write(bookmark_line(rt, sent_revision, initial_events_end=True))
                announced_initial_end = True
                last_bookmark_at = loop.time()
            now = loop.time()
            if bookmarks and sent_revision > 0 and (
                now - last_bookmark_at >= bookmark_interval or deadline - now < 1.0
            ):
                await response.write(bookmark_line(rt, sent_revision))
                last_bookmark_at = now
            if stop():
                break
    except ApiError as e:
        await response.write(error_line(e))
    return


def parse_bool(value: str | None, *, default: bool = False) -> bool:
    """kube's query bool: absent -> default; "0"/"false" (any case) -> False; else True."""
    if value is None:
        return default
    return value.lower() not in ("0", "false")


def watch_wanted(query: Any) -> bool:
    return parse_bool(query.get("watch"))
