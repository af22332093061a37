"""Events: the core v1 Event kind, its events.k8s.io/v1 view, and the
recorder that writes them the way kube's EventRecorder does.

Kinds (as kube-apiserver serves them, kube-api-notes §1, §7):

    core v1 Event           /api/v1/namespaces/{ns}/events, every verb, the
                            stored form; `kubectl describe` lists these with a
                            fieldSelector on involvedObject.*
    events.k8s.io/v1 Event  /apis/events.k8s.io/v1/namespaces/{ns}/events: the
                            same stored objects (one storage, two API views, as
                            kube co-locates them), converted on the way out
                            (involvedObject -> regarding, message -> note,
                            count -> deprecatedCount, ...); read-only here
                            (get, list, watch): write Events through core v1

`EventRecorder` is client-go's EventRecorder + EventCorrelator
(tools/record/events_cache.go) for in-process writers:

- the same event (object, type, reason, message, component) again raises the
  stored Event's `count`, `lastTimestamp` and `series` instead of creating a
  new object;
- more than `aggregate_max` different messages for one (object, reason)
  within `aggregate_window` seconds are combined into one Event ("(combined
  from similar events): ...");
- a token bucket per (component, object) (`burst` events, then one per
  `refill_seconds`) drops what is over it: a hot loop cannot flood the store;
- `record()` never blocks and never raises: it only updates memory and marks
  the Event for the writer task (`run`), which coalesces repeated updates of
  one Event, writes through the storage it is given (the hub passes the
  leader's fenced storage) at most `writes_per_second` (100), and logs
  failures rate-limited. At most `max_pending` Events wait; more are dropped
  and counted;
- `also_on(obj)` (optional) names a second object each Event is also
  recorded on (the hub: a twin TrainingJob's upstream object);
- `expire` deletes Events not seen for `ttl_seconds` (kube's --event-ttl,
  1 h): one cheap pass over the watch cache, run periodically by the owner.

Pure data and in-memory bookkeeping except `run` and `expire`, which use the
ObjectStorage they are given. This module must never import the simulator or
the hub, and never let a recording failure reach its caller.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from federator.apis.views import Body
from federator.apiserver.errors import ApiError, FieldError
from federator.apis.timestamps import format_micro_time, format_time, parse_epoch, parse_micro_time
from federator.apiserver.registry import JSONObject, ResourceType, TableColumn
from federator.apiserver.selectors import path_getter
from federator.apiserver.storage import ObjectStorage
from federator.obs import METRICS, Metrics, RepeatedFailureLog, get_logger

__all__ = [
    "EVENTS_GROUP",
    "EVENT_TTL_SECONDS",
    "EventRecorder",
    "core_event_type",
    "event_types",
    "events_v1_type",
    "to_events_v1",
]

_log = get_logger("apiserver.events")

EVENTS_GROUP: Final = "events.k8s.io"
#: kube-apiserver's --event-ttl default.
EVENT_TTL_SECONDS: Final = 3600.0
NORMAL: Final = "Normal"
WARNING: Final = "Warning"

_REFERENCE_FIELDS: Final = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
#: kube's limits for the fields it bounds (pkg/apis/core/validation/events.go).
_REASON_MAX = 128
_ACTION_MAX = 128
_REPORTING_INSTANCE_MAX = 128
_NOTE_MAX = 1024
_OBJECT_META_FIELDS: Final = frozenset({
    "name", "generateName", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences",
    "finalizers", "managedFields", "selfLink"})
_CORE_FIELDS: Final = frozenset({
    "apiVersion", "kind", "metadata", "involvedObject", "reason", "message", "source", "firstTimestamp",
    "lastTimestamp", "count", "type", "eventTime", "series", "action", "related", "reportingComponent",
    "reportingInstance"})


# ---------------------------------------------------------------- conversion


def to_events_v1(stored: JSONObject) -> JSONObject:
    """A stored (core v1) Event as events.k8s.io/v1 shows it (kube's
    Convert_core_Event_To_v1_Event). Returns a new dict; never mutates `stored`."""
    out: JSONObject = {"apiVersion": f"{EVENTS_GROUP}/v1", "kind": "Event",
                       "metadata": dict(Body(stored).metadata),
                       "eventTime": stored.get("eventTime")}
    for source, target in (("series", "series"), ("reportingComponent", "reportingController"),
                           ("reportingInstance", "reportingInstance"), ("action", "action"),
                           ("reason", "reason"), ("involvedObject", "regarding"), ("related", "related"),
                           ("message", "note"), ("type", "type"), ("source", "deprecatedSource"),
                           ("firstTimestamp", "deprecatedFirstTimestamp"),
                           ("lastTimestamp", "deprecatedLastTimestamp"), ("count", "deprecatedCount")):
        value = stored.get(source)
        if value is not None and value != "":
            out[target] = value
    return out


# ---------------------------------------------------------------- validation


def _check_reference(ref: Any, path: str, errs: list[FieldError], *, required: bool) -> None:
    if ref is None:
        if required:
            errs.append(FieldError.required(path))
        return
    if not isinstance(ref, dict):
        errs.append(FieldError.wrong_type(path, ref, "an object"))
        return
    for f in _REFERENCE_FIELDS:
        value = ref.get(f)
        if value is not None and not isinstance(value, str):
            errs.append(FieldError.wrong_type(f"{path}.{f}", value, "a string"))


def _check_string(obj: JSONObject, f: str, errs: list[FieldError], *, limit: int = 0) -> None:
    value = obj.get(f)
    if value is None:
        return
    if not isinstance(value, str):
        errs.append(FieldError.wrong_type(f, value, "a string"))
    elif limit and len(value) > limit:
        errs.append(FieldError("" + f, "FieldValueTooLong", f"must have at most {limit} bytes", value[:64]))


def validate_event(ev: JSONObject) -> list[FieldError]:
    """A core v1 Event as kube's legacy validation sees it, plus the types its decoder enforces."""
    errs: list[FieldError] = []
    _check_reference(ev.get("involvedObject"), "involvedObject", errs, required=True)
    _check_reference(ev.get("related"), "related", errs, required=False)
    involved = ev.get("involvedObject")
    if isinstance(involved, dict):
        ns = involved.get("namespace")
        ev_ns = Body(ev).namespace
        if isinstance(ns, str) and ns and ev_ns and ns != ev_ns:
            errs.append(FieldError.invalid("involvedObject.namespace", ns, "does not match event.namespace"))
    _check_string(ev, "reason", errs, limit=_REASON_MAX)
    _check_string(ev, "action", errs, limit=_ACTION_MAX)
    _check_string(ev, "reportingInstance", errs, limit=_REPORTING_INSTANCE_MAX)
    for f in ("message", "reportingComponent"):
        _check_string(ev, f, errs)
    kind = ev.get("type")
    if kind is not None and kind not in (NORMAL, WARNING):
        errs.append(FieldError.not_supported("type", kind, [NORMAL, WARNING]))
    count = ev.get("count")
    if count is not None and (type(count) is not int or not 0 <= count <= 2**31 - 1):
        errs.append(FieldError.invalid("count", count, "must be an integer between 0 and 2147483647"))
    for f in ("firstTimestamp", "lastTimestamp"):
        value = ev.get(f)
        if value is not None and parse_epoch(value) is None:
            errs.append(FieldError.invalid(f, value, 'must be an RFC 3339 time such as "2024-05-01T12:00:00Z"'))
    event_time = ev.get("eventTime")
    if event_time is not None and parse_micro_time(event_time) is None:
        errs.append(FieldError.invalid("eventTime", event_time,
                                       'must be a MicroTime such as "2024-05-01T12:00:00.000000Z"'))
    source = ev.get("source")
    if source is not None:
        if not isinstance(source, dict):
            errs.append(FieldError.wrong_type("source", source, "an object"))
        else:
            for f in ("component", "host"):
                value = source.get(f)
                if value is not None and not isinstance(value, str):
                    errs.append(FieldError.wrong_type(f"source.{f}", value, "a string"))
    series = ev.get("series")
    if series is not None:
        if not isinstance(series, dict):
            errs.append(FieldError.wrong_type("series", series, "an object"))
        else:
            sc = series.get("count")
            if sc is not None and (type(sc) is not int or not 0 <= sc <= 2**31 - 1):
                errs.append(FieldError.invalid("series.count", sc, "must be an integer between 0 and 2147483647"))
            observed = series.get("lastObservedTime")
            if observed is not None and parse_micro_time(observed) is None:
                errs.append(FieldError.invalid("series.lastObservedTime", observed,
                                               'must be a MicroTime such as "2024-05-01T12:00:00.000000Z"'))
    return errs


def _unknown_fields(ev: JSONObject) -> list[tuple[str | int, ...]]:
    out: list[tuple[str | int, ...]] = [(k,) for k in ev if k not in _CORE_FIELDS]
    meta = ev.get("metadata")
    if isinstance(meta, dict):
        out += [("metadata", k) for k in meta if k not in _OBJECT_META_FIELDS]
    for f in ("involvedObject", "related"):
        ref = ev.get(f)
        if isinstance(ref, dict):
            out += [(f, k) for k in ref if k not in _REFERENCE_FIELDS]
    for f, known in (("source", ("component", "host")), ("series", ("count", "lastObservedTime"))):
        value = ev.get(f)
        if isinstance(value, dict):
            out += [(f, k) for k in value if k not in known]
    return out


def _event_defaults(ev: JSONObject) -> None:
    """What kube's legacy Event defaults and decoding amount to: a type, a count,
    timestamps and a source when the writer gave none."""
    ev.setdefault("type", NORMAL)
    if "count" not in ev and ev.get("series") is None:
        ev["count"] = 1
    now = format_time(dt.datetime.now(dt.UTC))
    if not ev.get("firstTimestamp") and not ev.get("eventTime"):
        ev["firstTimestamp"] = now
    if not ev.get("lastTimestamp") and not ev.get("eventTime"):
        ev["lastTimestamp"] = ev.get("firstTimestamp") or now
    if not isinstance(ev.get("source"), dict) and not ev.get("reportingComponent"):
        ev["source"] = {}


# ---------------------------------------------------------------- kinds


def _first(*paths: tuple[str, ...]) -> Callable[[JSONObject], Any]:
    def get(ev: JSONObject) -> Any:
        for path in paths:
            cur: Any = ev
            for p in path:
                cur = cur.get(p) if isinstance(cur, dict) else None
            if cur not in (None, ""):
                return cur
        return None

    return get


def _columns(*, view: bool) -> tuple[TableColumn, ...]:
    """kube's Event printer columns (K/pkg/printers/internalversion/printers.go), for either form."""
    ref = "regarding" if view else "involvedObject"
    last = ("deprecatedLastTimestamp",) if view else ("lastTimestamp",)
    first = ("deprecatedFirstTimestamp",) if view else ("firstTimestamp",)
    count = ("deprecatedCount",) if view else ("count",)
    source = ("deprecatedSource", "component") if view else ("source", "component")
    reporter = ("reportingController",) if view else ("reportingComponent",)
    message = ("note",) if view else ("message",)

    def object_cell(ev: JSONObject) -> str:
        inv = ev.get(ref) or {}
        return f"{str(inv.get('kind', '')).lower()}/{inv.get('name', '')}"

    return (
        TableColumn("Last Seen", _first(("series", "lastObservedTime"), last, ("eventTime",)), type="date",
                    description="Time when this Event was last observed."),
        TableColumn("Type", _first(("type",)), description="Type of this event (Normal, Warning)."),
        TableColumn("Reason", _first(("reason",)), description="Short, machine understandable string."),
        TableColumn("Object", object_cell, description="The object that this event is about."),
        TableColumn("Subobject", _first((ref, "fieldPath")), priority=1,
                    description="The field of the object that this event is about."),
        TableColumn("Source", _first(source, reporter), priority=1,
                    description="The component reporting this event."),
        TableColumn("Message", _first(message), description="A human-readable description of the status."),
        TableColumn("First Seen", _first(first, ("eventTime",)), type="date", priority=1,
                    description="The time at which the event was first recorded."),
        TableColumn("Count", lambda ev: _first(("series", "count"), count)(ev) or 1, type="integer", priority=1,
                    description="The number of times this event has occurred."),
        TableColumn("Name", _first(("metadata", "name")), format="name", priority=1,
                    description="Name must be unique within a namespace."),
    )


_REFERENCE_SCHEMA: Final = {"type": "object", "description": "A reference to an object.", "properties": {
    f: {"type": "string"} for f in _REFERENCE_FIELDS}}
_SERIES_SCHEMA: Final = {"type": "object", "nullable": True, "properties": {
    "count": {"type": "integer", "format": "int32"},
    "lastObservedTime": {"type": "string", "format": "date-time"}}}
_SOURCE_SCHEMA: Final = {"type": "object", "properties": {
    "component": {"type": "string"}, "host": {"type": "string"}}}


def _string(description: str, *, nullable: bool = False, date: bool = False) -> JSONObject:
    schema: JSONObject = {"type": "string", "description": description}
    if date:
        schema["format"] = "date-time"
    if nullable:
        schema["nullable"] = True
    return schema


_CORE_SCHEMA: Final = {"properties": {
    "involvedObject": {**_REFERENCE_SCHEMA, "description": "The object that this event is about."},
    "related": {**_REFERENCE_SCHEMA, "nullable": True, "description": "Optional secondary object."},
    "reason": _string("Why the action was taken (short, machine understandable)."),
    "message": _string("A human-readable description of the status of this operation."),
    "type": _string("Type of this event (Normal, Warning)."),
    "action": _string("What action was taken or failed regarding the involved object."),
    "count": {"type": "integer", "format": "int32", "description": "The number of times this event has occurred."},
    "firstTimestamp": _string("When the event was first recorded.", nullable=True, date=True),
    "lastTimestamp": _string("When the event was most recently recorded.", nullable=True, date=True),
    "eventTime": _string("When this event was first observed (MicroTime).", nullable=True, date=True),
    "series": _SERIES_SCHEMA,
    "source": _SOURCE_SCHEMA,
    "reportingComponent": _string("Name of the controller that emitted this event."),
    "reportingInstance": _string("ID of the controller instance."),
}, "required": ["metadata", "involvedObject"]}

_V1_SCHEMA: Final = {"properties": {
    "regarding": {**_REFERENCE_SCHEMA, "description": "The object this event is about."},
    "related": {**_REFERENCE_SCHEMA, "nullable": True, "description": "Optional secondary object."},
    "reason": _string("Why the action was taken."),
    "note": _string("A human-readable description of the status of this operation."),
    "type": _string("Type of this event (Normal, Warning)."),
    "action": _string("What action was taken or failed regarding the regarding object."),
    "eventTime": _string("When this event was first observed (MicroTime).", nullable=True, date=True),
    "series": _SERIES_SCHEMA,
    "reportingController": _string("Name of the controller that emitted this event."),
    "reportingInstance": _string("ID of the controller instance."),
    "deprecatedSource": _SOURCE_SCHEMA,
    "deprecatedFirstTimestamp": _string("core v1 firstTimestamp.", nullable=True, date=True),
    "deprecatedLastTimestamp": _string("core v1 lastTimestamp.", nullable=True, date=True),
    "deprecatedCount": {"type": "integer", "format": "int32", "description": "core v1 count."},
}, "required": ["metadata"]}

_CORE_SELECTORS: Final = {
    **{f"involvedObject.{f}": path_getter(f"involvedObject.{f}") for f in _REFERENCE_FIELDS},
    "reason": path_getter("reason"),
    "reportingComponent": path_getter("reportingComponent"),
    "source": _first(("source", "component"), ("reportingComponent",)),
    "type": path_getter("type"),
}
#: events.k8s.io/v1's selectable fields, read from the stored (core) form (kube's field label
#: conversions: regarding.* -> involvedObject.*, reportingController -> reportingComponent).
_V1_SELECTORS: Final = {
    **{f"regarding.{f}": path_getter(f"involvedObject.{f}") for f in _REFERENCE_FIELDS},
    "reason": path_getter("reason"),
    "reportingController": path_getter("reportingComponent"),
    "type": path_getter("type"),
}


def _selector(getter: Callable[[JSONObject], Any]) -> Callable[[JSONObject], str]:
    def get(ev: JSONObject) -> str:
        value = getter(ev)
        return value if isinstance(value, str) else ""

    return get


def core_event_type() -> ResourceType:
    """The core v1 Event kind (the stored form)."""
    return ResourceType(
        group="", version="v1", kind="Event", plural="events", singular="event", namespaced=True,
        short_names=("ev",), status_subresource=False,
        field_selectors={k: _selector(g) for k, g in _CORE_SELECTORS.items()},
        defaults=_event_defaults, validate=validate_event, unknown_fields=_unknown_fields,
        columns=_columns(view=False),
        openapi_schema=_CORE_SCHEMA, openapi_name="io.k8s.api.core.v1.Event",
        description="Event is a report of an event somewhere in the cluster.",
    )


def events_v1_type() -> ResourceType:
    """events.k8s.io/v1 Event: a read-only view of the stored core v1 Events."""
    return ResourceType(
        group=EVENTS_GROUP, version="v1", kind="Event", plural="events", singular="event", namespaced=True,
        short_names=("ev",), status_subresource=False, verbs=("get", "list", "watch"),
        stored_as=("core", "events"), present=to_events_v1,
        field_selectors={k: _selector(g) for k, g in _V1_SELECTORS.items()},
        columns=_columns(view=True),
        openapi_schema=_V1_SCHEMA, openapi_name="io.k8s.api.events.v1.Event",
        description="Event is a report of an event somewhere in the cluster (events.k8s.io/v1 view of the "
                    "core v1 Events; read-only here).",
    )


def event_types() -> tuple[ResourceType, ResourceType]:
    """Both views, core first."""
    return core_event_type(), events_v1_type()


# ---------------------------------------------------------------- the recorder


@dataclass(frozen=True, slots=True)
class _Ref:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    def as_json(self) -> JSONObject:
        ref: JSONObject = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


def _reference(obj: Mapping[str, Any]) -> _Ref | None:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    name, api_version, kind = meta.get("name"), obj.get("apiVersion"), obj.get("kind")
    if not (isinstance(name, str) and name and isinstance(api_version, str) and isinstance(kind, str) and kind):
        return None
    ns, uid = meta.get("namespace"), meta.get("uid")
    return _Ref(api_version, kind, ns if isinstance(ns, str) else "", name, uid if isinstance(uid, str) else "")


@dataclass(slots=True)
class _Bucket:
    """A token bucket (client-go's spam filter: burst, then one token per refill period)."""

    tokens: float
    stamp: float


@dataclass(slots=True)
class _Observed:
    """What the recorder knows of one stored Event (client-go's eventLog)."""

    name: str
    namespace: str
    body: JSONObject
    count: int
    first: float
    last: float
    #: True once the writer created it (later writes update it)
    stored: bool = False


@dataclass(slots=True)
class _Similar:
    """Messages seen for one (object, reason) in the aggregation window."""

    messages: set[str] = field(default_factory=set)
    since: float = 0.0


class EventRecorder:
    """kube's event recorder for in-process writers (see the module docstring)."""

    def __init__(
        self,
        *,
        instance: str = "",
        clock: Callable[[], float] = time.time,
        burst: int = 25,
        refill_seconds: float = 300.0,
        aggregate_max: int = 10,
        aggregate_window: float = 600.0,
        max_pending: int = 1000,
        writes_per_second: float = 100.0,
        cache_size: int = 4096,
        ttl_seconds: float = EVENT_TTL_SECONDS,
        metrics: Metrics | None = None,
        also_on: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None = None,
    ) -> None:
        self.instance = instance[:_REPORTING_INSTANCE_MAX]
        self.clock = clock
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.aggregate_max = aggregate_max
        self.aggregate_window = aggregate_window
        self.max_pending = max_pending
        self.writes_per_second = writes_per_second
        self.cache_size = cache_size
        self.ttl_seconds = ttl_seconds
        self.metrics = metrics or METRICS
        #: the other object an Event recorded on an object is also recorded on, if any (the hub: a twin
        #: TrainingJob's upstream object, so `kubectl describe pytorchjob` lists what happened to its gang)
        self.also_on = also_on
        self._buckets: OrderedDict[tuple[str, _Ref], _Bucket] = OrderedDict()
        self._similar: OrderedDict[tuple[str, _Ref, str, str], _Similar] = OrderedDict()
        self._observed: OrderedDict[tuple[Any, ...], _Observed] = OrderedDict()
        self._pending: OrderedDict[tuple[Any, ...], None] = OrderedDict()
        self._wake = asyncio.Event()
        self._sequence = 0
        self._drops = RepeatedFailureLog(_log, "events dropped: the writer is behind", every_seconds=60.0)
        self._failures = RepeatedFailureLog(_log, "could not write an Event; it is retried, then dropped",
                                            every_seconds=60.0)
        #: counts by outcome, for tests and logs (the metric has the same labels)
        self.counts: dict[str, int] = {}

    # ------------------------------------------------------------ recording (never blocks, never raises)

    def record(
        self, obj: Mapping[str, Any], *, controller: str, reason: str, message: str,
        warning: bool = False, action: str = "",
    ) -> None:
        """Record that `reason` happened to `obj` (a stored object: apiVersion, kind, metadata).
        `controller` names the reporter ("placement": source.component federator-placement,
        reportingController federator.dev/placement)."""
        try:
            kind = WARNING if warning else NORMAL
            self._record(obj, controller=controller, reason=reason, message=message, type=kind,
                         action=action or reason)
            other = self.also_on(obj) if self.also_on is not None else None
            if other is not None:
                self._record(other, controller=controller, reason=reason, message=message, type=kind,
                             action=action or reason)
        except Exception as e:  # noqa: BLE001 - recording must never fail a controller
            self._count("failed")
            self._failures.failed(e, now=time.monotonic(), reason=reason)

    def _count(self, outcome: str, n: int = 1) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + n
        self.metrics.events_recorded.labels(result=outcome).inc(n)

    def _record(self, obj: Mapping[str, Any], *, controller: str, reason: str, message: str, type: str,
                action: str) -> None:
        ref = _reference(obj)
        if ref is None:
            self._count("invalid")
            return
        now = self.clock()
        component = f"federator-{controller}"
        message = message.strip()
        # 1. aggregation: many different messages for one (object, reason) become one Event
        similar_key = (component, ref, type, reason)
        similar = self._similar.get(similar_key)
        if similar is None or now - similar.since > self.aggregate_window:
            similar = _Similar(since=now)
        self._similar[similar_key] = similar
        self._similar.move_to_end(similar_key)
        similar.messages.add(message)
        self._trim(self._similar)
        if len(similar.messages) > self.aggregate_max:
            key: tuple[Any, ...] = (component, ref, type, reason, None)
            message = f"(combined from similar events): {message}"
        else:
            key = (component, ref, type, reason, message)
        # 2. dedupe: the same event again raises the count of the Event that holds it
        observed = self._observed.get(key)
        if observed is None:
            observed = self._new_event(ref, component=component, controller=controller, type=type, reason=reason,
                                       action=action, now=now)
            self._observed[key] = observed
            self._trim(self._observed)
        else:
            observed.count += 1
            observed.last = now
            self._observed.move_to_end(key)
        observed.body["message"] = message[:_NOTE_MAX]
        # 3. spam filter: a token bucket per (component, object)
        if not self._take_token((component, ref), now):
            self._count("ratelimited")
            return
        self._stamp(observed)
        if key not in self._pending and len(self._pending) >= self.max_pending:
            self._count("dropped")
            self._drops.failed("pending queue full", now=time.monotonic(), pending=len(self._pending))
            return
        self._pending[key] = None
        self._count("recorded" if observed.count == 1 else "aggregated")
        self._wake.set()

    def _trim(self, cache: OrderedDict[Any, Any]) -> None:
        while len(cache) > self.cache_size:
            cache.popitem(last=False)

    def _take_token(self, key: tuple[str, _Ref], now: float) -> bool:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
            self._trim(self._buckets)
        else:
            self._buckets.move_to_end(key)
            if self.refill_seconds > 0:
                bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) / self.refill_seconds)
            bucket.stamp = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def _new_event(self, ref: _Ref, *, component: str, controller: str, type: str, reason: str, action: str,
                   now: float) -> _Observed:
        self._sequence += 1
        # kube names an Event <object>.<unix nanos in hex>; the sequence keeps two in one tick apart
        suffix = f"{int(now * 1e9) + self._sequence:x}"
        name = f"{ref.name[:253 - len(suffix) - 1]}.{suffix}"
        namespace = ref.namespace or "default"  # kube files events of cluster-scoped objects in default
        body: JSONObject = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref.as_json(),
            "reason": reason[:_REASON_MAX], "type": type, "action": action[:_ACTION_MAX],
            "source": {"component": component},
            "reportingComponent": f"federator.dev/{controller}",
            "reportingInstance": self.instance,
        }
        return _Observed(name=name, namespace=namespace, body=body, count=1, first=now, last=now)

    def _stamp(self, observed: _Observed) -> None:
        first = dt.datetime.fromtimestamp(observed.first, dt.UTC)
        last = dt.datetime.fromtimestamp(observed.last, dt.UTC)
        body = observed.body
        body["count"] = observed.count
        body["firstTimestamp"] = format_time(first)
        body["lastTimestamp"] = format_time(last)
        body["eventTime"] = format_micro_time(first)
        if observed.count > 1:
            body["series"] = {"count": observed.count, "lastObservedTime": format_micro_time(last)}

    # ------------------------------------------------------------ the writer

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def run(self, storage: ObjectStorage, rt: ResourceType, *, retries: int = 3, backoff: float = 0.5) -> None:
        """Write pending Events through `storage` (an ObjectStorage) until cancelled, at most
        `writes_per_second` (burst of one second's worth): Events must not crowd the store the controllers
        write to; a backlog coalesces repeats, and past `max_pending` new Events are dropped. A failed write
        is retried `retries` times with capped backoff, then dropped; failures are logged rate-limited."""
        loop = asyncio.get_running_loop()
        rate = self.writes_per_second
        tokens, stamp = max(1.0, rate), loop.time()
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            if rate > 0:
                now = loop.time()
                tokens, stamp = min(max(1.0, rate), tokens + (now - stamp) * rate), now
                if tokens < 1.0:
                    await asyncio.sleep((1.0 - tokens) / rate)
                    continue
                tokens -= 1.0
            key, _ = self._pending.popitem(last=False)
            observed = self._observed.get(key)
            if observed is None:
                continue  # evicted from the cache meanwhile: a newer occurrence re-records it
            for attempt in range(retries + 1):
                try:
                    await self._write(storage, rt, observed)
                    self._failures.succeeded("Events are written again")
                    self._count("written")
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - logged, retried, then dropped; never raised
                    self._failures.failed(e, now=time.monotonic(), name=observed.name, namespace=observed.namespace,
                                          attempt=attempt + 1)
                    if attempt == retries:
                        self._count("failed")
                        break
                    await asyncio.sleep(min(10.0, backoff * 2 ** attempt))

    async def _write(self, storage: ObjectStorage, rt: ResourceType, observed: _Observed) -> None:
        body = observed.body
        if observed.stored:
            changes: dict[str, Any] = {k: body[k] for k in ("count", "lastTimestamp", "message", "series") if k in body}

            def mutate(stored: JSONObject) -> JSONObject:
                stored.update(changes)
                return stored

            try:
                await storage.guaranteed_update(rt, namespace=observed.namespace, name=observed.name, mutate=mutate)
                return
            except ApiError as e:
                if e.code != 404:
                    raise
                # expired or deleted meanwhile: create it again with what we know (as client-go does)
        try:
            await storage.create(rt, dict(body, metadata=dict(body["metadata"])), namespace=observed.namespace)
        except ApiError as e:
            if e.code != 409:
                raise
            observed.stored = True
            await self._write(storage, rt, observed)
            return
        observed.stored = True

    async def flush(self, timeout: float) -> bool:
        """Wait until nothing is pending (while `run` runs); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._pending and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return not self._pending

    # ------------------------------------------------------------ expiry

    async def expire(self, storage: ObjectStorage, rt: ResourceType) -> int:
        """Delete Events last seen more than ttl_seconds ago (one pass over the watch cache); returns how
        many were deleted. An Event written meanwhile is kept (the delete is conditional)."""
        listing = await storage.list(rt, resource_version="0")
        now = self.clock()
        deleted = 0
        for ev in listing.items:
            if now - _last_seen(ev) <= self.ttl_seconds:
                continue
            meta = Body(ev)
            try:
                await storage.delete(rt, namespace=meta.namespace or None, name=meta.name,
                                     precondition_resource_version=meta.resource_version or None)
                deleted += 1
            except ApiError as e:
                if e.code not in (404, 409):
                    raise
        if deleted:
            self._count("expired", deleted)
        return deleted


def _last_seen(ev: JSONObject) -> float:
    series = ev.get("series")
    candidates: Sequence[Any] = (
        series.get("lastObservedTime") if isinstance(series, dict) else None,
        ev.get("lastTimestamp"), ev.get("eventTime"), ev.get("firstTimestamp"),
        Body(ev).creation_timestamp,
    )
    seen = [t for t in (parse_epoch(c) for c in candidates) if t is not None]
    return max(seen) if seen else 0.0
