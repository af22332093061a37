"""Fault injection for one simulated member cluster.

`FaultState` holds what is currently broken; `fault_middleware(state)` (put
first in the app's middleware chain) applies it to every API request;
`admin_routes(state)` exposes it under `/_sim/faults` (same bearer token as
the API). Faults:

- outage for N seconds: the listening socket is closed and open connections
  are cut, so clients get "connection refused" (mode "refuse", needs a
  `ListenerControl`, see `SiteListener`), or every request gets a 503 Status
  (mode "503");
- added latency (seconds, optional jitter, optional duration);
- dropped watch connections (open watch streams are cut mid-stream);
- forced compaction: history is compacted past every watcher's position and
  the watches are dropped, so re-watching from the last resourceVersion gets
  410 Gone;
- node failure / recovery and unhealthy GPUs (via the kubelet's node ops);
- full partition: the cluster keeps running its pods, but open watches go
  silent (the connection stays open, nothing arrives) and new requests get no
  answer until the partition ends;
- partition `from` one identity (a user name, or a bearer token standing for
  its user): only requests authenticated as that user hang and only its
  watches go silent; everyone else is answered (the hub cut off while the
  member's own agent still reaches its API server).

Admin paths are never subject to faults, so a fault can always be lifted.
Every injected fault is counted in `obs.METRICS.sim_faults`. This module
never imports anything of the hub; it must never leak a token (a partition
given a token is shown, logged and recorded by the user it maps to).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from aiohttp import web

from federator.apiserver.errors import ApiError, bad_request, not_found, service_unavailable, unauthorized
from federator.obs import METRICS, get_logger

if TYPE_CHECKING:
    from federator.apiserver.registry import Registry
    from federator.apiserver.storage import ObjectStorage

ADMIN_PREFIX = "/_sim/"
FAULTS_PATH = "/_sim/faults"
#: Upper bound of any fault duration or latency (a day): larger is a typo.
MAX_SECONDS = 86_400.0
#: Longest `from` a partition accepts (a user name or a bearer token).
MAX_IDENTITY_CHARS = 1024
MAX_ADMIN_BODY = 64 * 1024
#: Store key written (then deleted) by a forced compaction so that it always
#: moves past every watcher; outside the API's registry/ key space.
COMPACTION_MARKER = "sim/compaction-marker"

_log = get_logger("sim.faults")


class ListenerControl(Protocol):
    """Closes and reopens the cluster's listening socket (same port)."""

    async def close(self) -> None: ...

    async def reopen(self) -> None: ...


class SiteListener:
    """`ListenerControl` for an aiohttp `AppRunner` serving on host:port:
    close stops the TCP site (connections are then refused) and cuts every
    open connection; reopen starts a new site on the same port."""

    def __init__(self, runner: web.BaseRunner, *, host: str, port: int,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.runner = runner
        self.host = host
        self.port = port
        self.ssl_context = ssl_context

    async def close(self) -> None:
        for site in list(self.runner.sites):
            await site.stop()
        server = self.runner.server
        if server is not None:
            for conn in list(server.connections):
                conn.force_close()

    async def reopen(self) -> None:
        if self.runner.sites:
            return
        site = web.TCPSite(self.runner, self.host, self.port, reuse_address=True, ssl_context=self.ssl_context)
        await site.start()


@dataclass(eq=False)
class _OpenWatch:
    request: web.Request
    outer: asyncio.Task[Any]
    inner: asyncio.Task[web.StreamResponse]
    #: who opened it (None: unknown, e.g. no identities configured)
    user: str | None = None
    stalled: bool = False


class FaultError(ValueError):
    """A fault request that does not make sense (bad duration, bad count)."""


class IdentityError(FaultError):
    """A partition `from` that names no identity of the cluster (the admin API answers 400)."""


@dataclass
class FaultState:
    """What is broken in one simulated cluster right now."""

    cluster: str
    storage: ObjectStorage | None = None
    registry: Registry | None = None
    listener: ListenerControl | None = None
    clock: Callable[[], float] = time.monotonic
    outage_until: float = 0.0
    outage_mode: str = ""
    latency_seconds: float = 0.0
    latency_jitter: float = 0.0
    latency_until: float | None = None
    partition_until: float | None = None
    partitioned: bool = False
    #: the only user a partition cuts off (None: everyone)
    partition_from: str | None = None
    #: request -> the user it authenticates as (None: no valid credential)
    identify: Callable[[web.Request], str | None] | None = None
    #: a user name or a bearer token -> the user it names (None: no such identity)
    resolve_identity: Callable[[str], str | None] | None = None
    #: the users a partition may name (for error messages)
    users: tuple[str, ...] = ()
    #: set (and replaced) whenever a partition starts, changes or ends
    _partition_changed: asyncio.Event = field(default_factory=asyncio.Event)
    _watches: set[_OpenWatch] = field(default_factory=set)
    _timers: set[asyncio.Task[None]] = field(default_factory=set)
    history: list[dict[str, Any]] = field(default_factory=list)

    # ------------------------------------------------------------ bookkeeping

    def _count(self, fault: str, **detail: Any) -> None:
        METRICS.sim_faults.labels(cluster=self.cluster, fault=fault).inc()
        entry = {"fault": fault, "at": time.time(), **detail}
        self.history.append(entry)
        del self.history[:-100]
        _log.info("fault injected", cluster=self.cluster, fault=fault, **detail)

    def _after(self, seconds: float, action: Callable[[], Awaitable[None]], name: str) -> None:
        async def run() -> None:
            await asyncio.sleep(seconds)
            await action()

        task = asyncio.get_running_loop().create_task(run(), name=f"sim-fault-{self.cluster}-{name}")
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    def _cancel_timers(self, name: str) -> None:
        current = asyncio.current_task()
        for t in list(self._timers):
            # never the running timer itself (end_outage runs inside one)
            if t is not current and t.get_name() == f"sim-fault-{self.cluster}-{name}":
                t.cancel()

    def snapshot(self) -> dict[str, Any]:
        now = self.clock()
        return {
            "cluster": self.cluster,
            "outage": {"mode": self.outage_mode, "remainingSeconds": round(self.outage_until - now, 3)}
            if self.outage_until > now else None,
            "latency": {"seconds": self.latency_seconds, "jitterSeconds": self.latency_jitter,
                        "remainingSeconds": None if self.latency_until is None
                        else round(self.latency_until - now, 3)} if self.latency_active(now) else None,
            "partition": {"remainingSeconds": None if self.partition_until is None
                          else round(self.partition_until - now, 3),
                          "from": self.partition_from} if self.partitioned else None,
            "openWatches": len(self._watches),
            "history": list(self.history[-20:]),
        }

    # ------------------------------------------------------------ outage

    def outage_active(self, now: float | None = None) -> bool:
        return self.outage_until > (self.clock() if now is None else now)

    async def start_outage(self, seconds: float, *, mode: str = "refuse") -> str:
        """Start an outage; returns the mode actually used ("refuse" falls
        back to "503" when there is no listener to close)."""
        seconds = _check_seconds(seconds, "seconds")
        if mode not in ("refuse", "503"):
            raise FaultError(f"mode must be 'refuse' or '503', not {mode!r}")
        if mode == "refuse" and self.listener is None:
            _log.warning("no listener control: outage falls back to 503", cluster=self.cluster)
            mode = "503"
        self._cancel_timers("outage-end")
        self.outage_until = self.clock() + seconds
        self.outage_mode = mode
        self._count("outage", seconds=seconds, mode=mode)
        if mode == "refuse":
            assert self.listener is not None
            listener = self.listener

            async def close_after_reply() -> None:
                await asyncio.sleep(0)  # let the admin reply leave first
                self.drop_watches(count=False)
                await listener.close()

            self._after(0, close_after_reply, "outage-start")
        self._after(seconds, self.end_outage, "outage-end")
        return mode

    async def end_outage(self) -> None:
        self._cancel_timers("outage-end")
        mode, self.outage_mode, self.outage_until = self.outage_mode, "", 0.0
        if mode == "refuse" and self.listener is not None:
            try:
                await self.listener.reopen()
            except OSError as e:
                _log.error("could not reopen the listener after an outage", cluster=self.cluster, error=str(e))
        _log.info("outage over", cluster=self.cluster)

    # ------------------------------------------------------------ latency

    def latency_active(self, now: float | None = None) -> bool:
        if self.latency_seconds <= 0 and self.latency_jitter <= 0:
            return False
        return self.latency_until is None or self.latency_until > (self.clock() if now is None else now)

    def set_latency(self, seconds: float, *, jitter: float = 0.0, duration: float | None = None) -> None:
        seconds = _check_seconds(seconds, "seconds", allow_zero=True)
        jitter = _check_seconds(jitter, "jitterSeconds", allow_zero=True)
        if duration is not None:
            duration = _check_seconds(duration, "durationSeconds")
        self.latency_seconds, self.latency_jitter = seconds, jitter
        self.latency_until = None if duration is None else self.clock() + duration
        self._count("latency", seconds=seconds, jitter=jitter, duration=duration)

    def clear_latency(self) -> None:
        self.latency_seconds = self.latency_jitter = 0.0
        self.latency_until = None

    def request_delay(self) -> float:
        if not self.latency_active():
            return 0.0
        return self.latency_seconds + (random.uniform(0, self.latency_jitter) if self.latency_jitter else 0.0)

    # ------------------------------------------------------------ partition

    def partition_user(self, source: Any) -> str:
        """The user a partition `from` names: a user name or a bearer token (IdentityError otherwise;
        the message never repeats the value, which may be some other cluster's token)."""
        if not isinstance(source, str):
            raise IdentityError(f"'from' must be a string (a user name or a bearer token), not {type(source).__name__}")
        if not source.strip():
            raise IdentityError("'from' must not be empty")
        if len(source) > MAX_IDENTITY_CHARS:
            raise IdentityError(f"'from' is longer than {MAX_IDENTITY_CHARS} characters")
        user = self.resolve_identity(source) if self.resolve_identity is not None else None
        if user is None:
            known = ", ".join(self.users) if self.users else "none"
            raise IdentityError(f"'from' names no user of cluster {self.cluster} and is none of its bearer "
                                f"tokens (users: {known})")
        return user

    def start_partition(self, seconds: float | None, *, source: Any = None) -> None:
        """Partition the cluster for `seconds` (None: until ended). `source` (a user name or a bearer
        token) cuts off only that identity; None cuts off everyone."""
        if seconds is not None:
            seconds = _check_seconds(seconds, "seconds")
        user = None if source is None else self.partition_user(source)
        self._cancel_timers("partition-end")
        self.partitioned = True
        self.partition_from = user
        self.partition_until = None if seconds is None else self.clock() + seconds
        for w in list(self._watches):
            if not w.stalled and (user is None or w.user == user):
                w.stalled = True
                w.inner.cancel()
        self._partition_change()
        if seconds is not None:
            async def end() -> None:
                self.end_partition()

            self._after(seconds, end, "partition-end")
        self._count("partition", seconds=seconds, **({"from": user} if user is not None else {}))

    def end_partition(self) -> None:
        self._cancel_timers("partition-end")
        if self.partitioned:
            _log.info("partition over", cluster=self.cluster, **({"from": self.partition_from}
                                                               if self.partition_from is not None else {}))
        self.partitioned = False
        self.partition_from = None
        self.partition_until = None
        self._partition_change()

    def _partition_change(self) -> None:
        changed, self._partition_changed = self._partition_changed, asyncio.Event()
        changed.set()

    def partition_blocks(self, user: str | None) -> bool:
        """Whether the partition in effect cuts off requests of `user`."""
        return self.partitioned and (self.partition_from is None or self.partition_from == user)

    async def wait_unblocked(self, user: str | None) -> None:
        """Until the partition no longer cuts `user` off (it ended, or now cuts off someone else)."""
        while self.partition_blocks(user):
            await self._partition_changed.wait()

    async def wait_partition_over(self) -> None:
        while self.partitioned:
            await self._partition_changed.wait()

    # ------------------------------------------------------------ watches

    def drop_watches(self, *, count: bool = True) -> int:
        """Cut every open watch stream; returns how many."""
        dropped = 0
        for w in list(self._watches):
            self._watches.discard(w)
            dropped += 1
            w.inner.cancel()
            w.outer.cancel()
        if count:
            self._count("drop-watches", dropped=dropped)
        return dropped

    async def force_compaction(self) -> int:
        """Compact the store past every watcher, then drop the watches: a
        re-watch from the last resourceVersion seen gets 410 Gone. Returns the
        compaction revision."""
        if self.storage is None:
            raise FaultError("this cluster has no storage to compact")
        store = self.storage.store
        marker = store.prefix + COMPACTION_MARKER
        await store.put(marker, b"1")
        await store.delete(marker)
        revision = await store.current_revision()
        await store.compact(revision)
        dropped = self.drop_watches(count=False)
        self._count("compact", revision=revision, dropped=dropped)
        return revision

    # ------------------------------------------------------------ nodes

    async def node_failure(self, node: str) -> None:
        from federator.sim.kubelet import fail_node

        storage, registry = self._node_access()
        await fail_node(storage, registry, node=node)
        self._count("node-failure", node=node)

    async def node_recover(self, node: str) -> None:
        from federator.sim.kubelet import recover_node

        storage, registry = self._node_access()
        await recover_node(storage, registry, node=node)
        self._count("node-recover", node=node)

    async def gpu_unhealthy(self, node: str, count: int) -> None:
        from federator.sim.kubelet import set_unhealthy_gpus

        storage, registry = self._node_access()
        try:
            await set_unhealthy_gpus(storage, registry, node=node, count=count)
        except ValueError as e:
            raise FaultError(str(e)) from None
        self._count("gpu-unhealthy", node=node, count=count)

    def _node_access(self) -> tuple[ObjectStorage, Registry]:
        if self.storage is None or self.registry is None:
            raise FaultError("this cluster has no storage for node faults")
        return self.storage, self.registry

    # ------------------------------------------------------------ lifecycle

    async def clear(self) -> None:
        """Lift every fault that lasts (outage, latency, partition)."""
        if self.outage_until:
            await self.end_outage()
        self.clear_latency()
        self.end_partition()

    async def close(self) -> None:
        timers = list(self._timers)
        for t in timers:
            t.cancel()
        for t in timers:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._partition_change()


def _check_seconds(value: Any, name: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FaultError(f"{name} must be a number of seconds, not {value!r}")
    v = float(value)
    if not (v >= 0 if allow_zero else v > 0) or v > MAX_SECONDS:
        bound = ">= 0" if allow_zero else "> 0"
        raise FaultError(f"{name} must be {bound} and at most {MAX_SECONDS:g}, not {value!r}")
    return v


def is_watch_request(request: web.Request) -> bool:
    value = request.query.get("watch")
    if value is not None and value.lower() not in ("0", "false"):
        return True
    return "/watch/" in request.path


def _drop_connection(request: web.Request) -> NoReturn:
    """Cut the connection without an answer. Raising CancelledError makes
    aiohttp close the connection quietly (any other exception would make it
    log and try to send a 500 on a dead socket)."""
    if request.transport is not None:
        request.transport.abort()
    raise asyncio.CancelledError()


def _status_response(error: ApiError) -> web.Response:
    headers = {}
    if error.retry_after_seconds is not None:
        headers["Retry-After"] = str(error.retry_after_seconds)
    return web.json_response(error.to_status(), status=error.code, headers=headers)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def fault_middleware(state: FaultState) -> Any:
    """The aiohttp middleware that applies `state` to every non-admin request."""

    @web.middleware
    async def apply_faults(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith(ADMIN_PREFIX):
            return await handler(request)
        if state.partitioned:
            user = state.identify(request) if state.partition_from is not None and state.identify else None
            if state.partition_blocks(user):
                await state.wait_unblocked(user)
                if request.transport is None or request.transport.is_closing():
                    # the client gave up during the partition: its request never arrived
                    _drop_connection(request)
        if state.outage_active():
            remaining = max(1, int(state.outage_until - state.clock() + 0.999))
            if state.outage_mode == "refuse":
                _drop_connection(request)
            return _status_response(service_unavailable(
                "the server is currently unable to handle the request", retry_after_seconds=remaining))
        delay = state.request_delay()
        if delay > 0:
            await asyncio.sleep(delay)
        if not is_watch_request(request):
            return await handler(request)
        return await _serve_watch(state, request, handler)

    return apply_faults


async def _serve_watch(state: FaultState, request: web.Request, handler: Handler) -> web.StreamResponse:
    """Run a watch in its own task so a partition can silence it (the
    connection stays open, nothing more is sent) and a drop can cut it."""
    outer = asyncio.current_task()
    assert outer is not None
    inner: asyncio.Task[web.StreamResponse] = asyncio.ensure_future(handler(request))
    user = state.identify(request) if state.identify is not None else None
    w = _OpenWatch(request=request, outer=outer, inner=inner, user=user)
    state._watches.add(w)
    try:
        try:
            await asyncio.wait({inner})
        except asyncio.CancelledError:
            inner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await inner
            raise
        if w.stalled:
            # partitioned: hold the silent connection until the partition
            # ends (for this watch's user), then it is gone (like a
            # connection-tracking entry that expired), never cleanly finished
            with contextlib.suppress(asyncio.CancelledError):
                await state.wait_unblocked(w.user)
            _drop_connection(request)
        return inner.result()
    finally:
        state._watches.discard(w)


# ---------------------------------------------------------------- admin API


async def _json_body(request: web.Request) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > MAX_ADMIN_BODY:
        raise bad_request(f"request body is larger than {MAX_ADMIN_BODY} bytes")
    raw = await request.content.read(MAX_ADMIN_BODY + 1)
    if len(raw) > MAX_ADMIN_BODY:
        raise bad_request(f"request body is larger than {MAX_ADMIN_BODY} bytes")
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise bad_request(f"request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    return body


def _node_name(body: dict[str, Any]) -> str:
    node = body.get("node")
    if not isinstance(node, str) or not node:
        raise bad_request("field 'node' (a node name) is required")
    return node


def _fields(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise bad_request(f"unknown field(s) {unknown}; allowed: {sorted(allowed)}")


Authenticate = Callable[[web.Request], Awaitable[Any]]


def admin_routes(state: FaultState, *, authenticate: Authenticate | None = None) -> list[web.RouteDef]:
    """Routes of the fault admin API under /_sim/faults. With `authenticate`
    (returns a principal or None), requests without a valid token get 401."""

    def endpoint(fn: Callable[[web.Request], Awaitable[dict[str, Any]]]) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                if authenticate is not None and await authenticate(request) is None:
                    raise unauthorized()
                result = await fn(request)
            except ApiError as e:
                return _status_response(e)
            except IdentityError as e:
                return _status_response(bad_request(str(e)))
            except FaultError as e:
                return _status_response(ApiError(422, "Invalid", str(e)))
            return web.json_response(result)

        return handle

    async def get_state(request: web.Request) -> dict[str, Any]:
        return state.snapshot()

    async def clear(request: web.Request) -> dict[str, Any]:
        await state.clear()
        return state.snapshot()

    async def outage(request: web.Request) -> dict[str, Any]:
        body = await _json_body(request)
        _fields(body, {"seconds", "mode"})
        mode = await state.start_outage(body.get("seconds", 10), mode=body.get("mode", "refuse"))
        return {"fault": "outage", "mode": mode, "seconds": body.get("seconds", 10)}

    async def end_outage(request: web.Request) -> dict[str, Any]:
        await state.end_outage()
        return state.snapshot()

    async def latency(request: web.Request) -> dict[str, Any]:
        body = await _json_body(request)
        _fields(body, {"seconds", "jitterSeconds", "durationSeconds"})
        if "seconds" not in body:
            raise bad_request("field 'seconds' is required")
        state.set_latency(body["seconds"], jitter=body.get("jitterSeconds", 0.0),
                          duration=body.get("durationSeconds"))
        return {"fault": "latency", **(state.snapshot()["latency"] or {})}

    async def clear_latency(request: web.Request) -> dict[str, Any]:
        state.clear_latency()
        return state.snapshot()

    async def drop(request: web.Request) -> dict[str, Any]:
        return {"fault": "drop-watches", "dropped": state.drop_watches()}

    async def compact(request: web.Request) -> dict[str, Any]:
        revision = await state.force_compaction()
        return {"fault": "compact", "compactedTo": str(revision)}

    async def node_failure(request: web.Request) -> dict[str, Any]:
        body = await _json_body(request)
        _fields(body, {"node"})
        node = _node_name(body)
        await _node_op(lambda: state.node_failure(node), node)
        return {"fault": "node-failure", "node": node}

    async def node_recover(request: web.Request) -> dict[str, Any]:
        body = await _json_body(request)
        _fields(body, {"node"})
        node = _node_name(body)
        await _node_op(lambda: state.node_recover(node), node)
        return {"fault": "node-recover", "node": node}

    async def gpu_unhealthy(request: web.Request) -> dict[str, Any]:
        body = await _json_body(request)
        _fields(body, {"node", "count"})
        node = _node_name(body)
        count = body.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int):
            raise bad_request("field 'count' must be an integer")
        await _node_op(lambda: state.gpu_unhealthy(node, count), node)
        return {"fault": "gpu-unhealthy", "node": node, "count": count}

    async def partition(request: web.Request) -> dict[str, Any]:
        body = await _json_body(request)
        _fields(body, {"seconds", "from"})
        state.start_partition(body.get("seconds"), source=body.get("from"))
        return {"fault": "partition", "seconds": body.get("seconds"), "from": state.partition_from}

    async def end_partition(request: web.Request) -> dict[str, Any]:
        state.end_partition()
        return state.snapshot()

    p = FAULTS_PATH
    return [
        web.get(p, endpoint(get_state)),
        web.delete(p, endpoint(clear)),
        web.post(f"{p}/outage", endpoint(outage)),
        web.delete(f"{p}/outage", endpoint(end_outage)),
        web.post(f"{p}/latency", endpoint(latency)),
        web.delete(f"{p}/latency", endpoint(clear_latency)),
        web.post(f"{p}/drop-watches", endpoint(drop)),
        web.post(f"{p}/compact", endpoint(compact)),
        web.post(f"{p}/node-failure", endpoint(node_failure)),
        web.post(f"{p}/node-recover", endpoint(node_recover)),
        web.post(f"{p}/gpu-unhealthy", endpoint(gpu_unhealthy)),
        web.post(f"{p}/partition", endpoint(partition)),
        web.delete(f"{p}/partition", endpoint(end_partition)),
    ]


async def _node_op(op: Callable[[], Awaitable[None]], node: str) -> None:
    try:
        await op()
    except ApiError as e:
        if e.code == 404:
            raise not_found(None, node, resource="nodes") from None
        raise


def fault_cleanup_ctx(state: FaultState) -> Callable[[web.Application], AsyncIterator[None]]:
    """For `app.cleanup_ctx.append(...)`: lifts faults and cancels pending
    fault timers when the app stops."""

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        yield
        await state.close()

    return ctx
