"""Log requests as kube-apiserver reads them (`GET .../pods/NAME/log`): options and a text stream.

- `parse_log_options(query, name=...)` reads kube's PodLogOptions from the query
  string: `container`, `follow`, `previous`, `timestamps`, `tailLines`,
  `sinceSeconds`, `sinceTime`, `limitBytes`, `stream`. A value of the wrong
  type is a 400 BadRequest naming the parameter; a value out of range is
  kube's 422 `PodLogOptions "NAME" is invalid: tailLines: Invalid value: -1:
  must be greater than or equal to 0` (ValidatePodLogOptions). Unknown
  parameters are ignored, as everywhere in the API.
- `log_query(options)` is the same options as query parameters again, for a
  server that passes a log request on (the hub to a member).
- `serve_log(request, chunks, limit_bytes=...)` answers with `text/plain`,
  chunked, writing each chunk as it comes (a follow shows lines at once). It
  ends when `chunks` ends, the client leaves (aiohttp cancels the handler, or
  a write fails) or the server stops, and it always closes `chunks`, so that
  whatever feeds them (a member connection) is released with the request.

Used by the simulator's kubelet and by the hub; it must never import either.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from federator.apiserver import errors
from federator.apiserver.app import api_state
from federator.apiserver.errors import FieldError
from federator.apiserver.watch import parse_bool
from federator.apis.timestamps import TIME_EXAMPLE, format_time, parse_time

__all__ = ["LOG_STREAMS", "LogOptions", "log_query", "parse_log_options", "serve_log"]

#: `stream` values kube accepts (PodLogsQuerySplitStreams); All is the default.
LOG_STREAMS = ("All", "Stdout", "Stderr")
_INT64_MAX = 2**63 - 1
_CONTENT_TYPE = "text/plain"


@dataclass(frozen=True, slots=True)
class LogOptions:
    """kube's PodLogOptions (core/v1), as parsed from a query string."""

    container: str = ""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since_seconds: int | None = None
    since_time: dt.datetime | None = None
    limit_bytes: int | None = None
    stream: str = "All"

    def since(self, now: dt.datetime) -> dt.datetime | None:
        """The earliest time a line may carry (None: no lower bound)."""
        if self.since_time is not None:
            return self.since_time
        if self.since_seconds is not None:
            return now - dt.timedelta(seconds=min(self.since_seconds, 10**10))
        return None


@dataclass(frozen=True, slots=True)
class _PodLogOptionsKind:
    """What errors.invalid needs to say `PodLogOptions "name" is invalid: ...`."""

    group: str = ""
    kind: str = "PodLogOptions"
    plural: str = "podlogoptions"
    qualified_resource: str = "podlogoptions"
    qualified_kind: str = "PodLogOptions"


def _int(query: Mapping[str, str], key: str) -> int | None:
    raw = query.get(key)
    if raw is None:
        return None
    text = raw.strip()
    try:
        value = int(text, 10)
    except ValueError:
        raise errors.bad_request(f"invalid value for query parameter {key}: {raw[:64]!r} is not an integer") from None
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise errors.bad_request(f"invalid value for query parameter {key}: {raw[:64]!r} is out of range "
                                 "(a 64-bit integer)")
    return value


def _time(query: Mapping[str, str], key: str) -> dt.datetime | None:
    raw = query.get(key)
    if raw is None:
        return None
    text = raw.strip()
    value = parse_time(text)
    if value is not None:
        return value
    if parse_time(text + "Z") is not None:
        raise errors.bad_request(f"invalid value for query parameter {key}: {raw[:64]!r} has no time zone "
                                 "(RFC 3339 needs one, e.g. Z)")
    raise errors.bad_request(f"invalid value for query parameter {key}: {raw[:64]!r} is not an RFC 3339 "
                             f"time (e.g. {TIME_EXAMPLE})")


def parse_log_options(query: Mapping[str, str], *, name: str) -> LogOptions:
    """PodLogOptions from a query string (see the module docstring for the errors)."""
    tail, limit, since = _int(query, "tailLines"), _int(query, "limitBytes"), _int(query, "sinceSeconds")
    since_time = _time(query, "sinceTime")
    stream = query.get("stream") or "All"
    causes: list[FieldError] = []
    if tail is not None and tail < 0:
        causes.append(FieldError.invalid("tailLines", tail, "must be greater than or equal to 0"))
    if limit is not None and limit < 1:
        causes.append(FieldError.invalid("limitBytes", limit, "must be greater than 0"))
    if since is not None and since_time is not None:
        causes.append(FieldError.forbidden("", "at most one of `sinceTime` or `sinceSeconds` may be specified"))
    elif since is not None and since < 1:
        causes.append(FieldError.invalid("sinceSeconds", since, "must be greater than 0"))
    if stream not in LOG_STREAMS:
        causes.append(FieldError.not_supported("stream", stream[:64], LOG_STREAMS))
    if causes:
        raise errors.invalid(_PodLogOptionsKind(), name, causes)
    container = query.get("container") or ""
    if len(container) > 253:
        raise errors.bad_request("invalid value for query parameter container: longer than 253 characters")
    return LogOptions(
        container=container,
        follow=parse_bool(query.get("follow")),
        previous=parse_bool(query.get("previous")),
        timestamps=parse_bool(query.get("timestamps")),
        tail_lines=tail, since_seconds=since, since_time=since_time, limit_bytes=limit, stream=stream,
    )


def log_query(options: LogOptions, *, container: bool = True) -> list[tuple[str, Any]]:
    """`options` as query parameters (what kube-apiserver sends on to a kubelet)."""
    query: list[tuple[str, Any]] = []
    if container and options.container:
        query.append(("container", options.container))
    for key, flag in (("follow", options.follow), ("previous", options.previous),
                      ("timestamps", options.timestamps)):
        if flag:
            query.append((key, "true"))
    if options.since_seconds is not None:
        query.append(("sinceSeconds", str(options.since_seconds)))
    if options.since_time is not None:
        query.append(("sinceTime", format_time(options.since_time)))
    if options.tail_lines is not None:
        query.append(("tailLines", str(options.tail_lines)))
    if options.limit_bytes is not None:
        query.append(("limitBytes", str(options.limit_bytes)))
    if options.stream != "All":
        query.append(("stream", options.stream))
    return query


async def serve_log(request: web.Request, chunks: AsyncIterator[bytes], *,
                    limit_bytes: int | None = None) -> web.StreamResponse:
    """Stream `chunks` as a text/plain response (see the module docstring); at most `limit_bytes`."""
    state = api_state(request.app)
    response = web.StreamResponse(status=200, headers={"Content-Type": _CONTENT_TYPE,
                                                       "Cache-Control": "no-cache, private"})
    response.enable_chunked_encoding()
    left = limit_bytes
    try:
        await response.prepare(request)
        async for chunk in chunks:
            if state.stopping:
                break
            if left is not None:
                chunk = chunk[:left]
                left -= len(chunk)
            if chunk:
                await response.write(chunk)
            if left is not None and left <= 0:
                break
        await response.write_eof()
    except (ConnectionResetError, ConnectionError):
        pass  # the client left: nothing more to say to it
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            # Shielded: a cancelled handler (the client left) must still release what feeds the chunks.
            await asyncio.shield(aclose())
    return response
