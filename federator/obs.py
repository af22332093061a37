"""Logging and every Prometheus metric of federator, in one place.

`configure_logging` is the only place structlog is configured: JSON lines
when stderr is not a TTY, a readable console otherwise. It also routes the
standard library's logging (aiohttp's server logger, asyncio, client
libraries) through structlog, so that a malformed HTTP request is one JSON
line (`malformed HTTP request`, without the request's bytes), never a
plain-text traceback. Every metric lives in `METRICS` (one registry per
process; tests may build their own `Metrics`).

Metric rules (tests/test_metrics.py holds the list of families and checks
them): Prometheus names with the unit in the name (`_seconds`, `_bytes`),
counters end in `_total`, and every label takes values from a bounded set:
fixed words chosen in code (phase, verb, result, reason...), the names of
registered member clusters, GPU models seen on their nodes (at most
`MAX_GPU_MODELS_PER_CLUSTER` per cluster), the hub's kinds. Never a job
name, namespace or uid, never a URL, token or kubeconfig body.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

_configured = False

# No `<counter>_created` / `<histogram>_created` gauge per series: they double what /metrics carries, and the
# Prometheus text format has no use for them (process-wide setting of prometheus_client).
disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client 0.26


class FailureLineThrottle:
    """A structlog processor that keeps a failing retry loop from logging at line rate.

    Warnings and errors that carry an `error` field are counted per (component, event): at most
    `burst` of them are printed per `window_seconds`; the rest are dropped, and the next line of
    that kind printed in a later window says how many were dropped (`suppressed_similar`). The
    last printed line of a burst says that the rest are being summarised. Lines without an `error`
    (a gang failed over, a job placed) are never dropped: they are the audit trail."""

    def __init__(self, *, burst: int = 5, window_seconds: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = 4096) -> None:
        self.burst = burst
        self.window = window_seconds
        self.clock = clock
        self.max_keys = max_keys
        #: (component, event) -> [window start, lines this window, dropped since the last printed line]
        self._seen: dict[tuple[str, str], list[float]] = {}

    def __call__(self, _logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        level = str(event_dict.get("level") or method_name)
        if level not in ("warning", "error", "critical", "exception") or "error" not in event_dict:
            return event_dict
        key = (str(event_dict.get("component", "")), str(event_dict.get("event", "")))
        now = self.clock()
        entry = self._seen.get(key)
        if entry is None or now - entry[0] >= self.window:
            dropped = int(entry[2]) if entry is not None else 0
            if entry is None and len(self._seen) >= self.max_keys:
                self._seen.clear()
            entry = self._seen[key] = [now, 0, 0]
            if dropped:
                event_dict["suppressed_similar"] = dropped
        entry[1] += 1
        if entry[1] > self.burst:
            entry[2] += 1
            raise structlog.DropEvent
        if entry[1] == self.burst:
            event_dict["throttled"] = (f"more lines like this within {self.window:g}s are counted, "
                                       "not printed; the next one printed says how many")
        return event_dict


def configure_logging(*, level: str = "info", json: bool | None = None, throttle: bool = True) -> None:
    """Configure structlog once per process. `json=None` picks JSON unless stderr is a TTY;
    `throttle` rate-limits repeated failure lines (FailureLineThrottle)."""
    global _configured
    use_json = (not sys.stderr.isatty()) if json is None else json
    lvl = logging.getLevelName(level.upper())
    if not isinstance(lvl, int):
        raise ValueError(f"unknown log level {level!r}")
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if throttle:
        processors.append(FailureLineThrottle())
    if use_json:
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        processors += [structlog.dev.ConsoleRenderer(colors=False)]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Libraries' own debug and info lines stay out (the kubernetes client logs response bodies at debug).
    _route_stdlib_logging(logging.WARNING)
    _configured = True


#: aiohttp's server logger: "Error handling request" with the parser's exception (whose message quotes the
#: request's raw bytes, e.g. a header line carrying a token), and at debug level for a garbage request line.
_AIOHTTP_SERVER_LOGGER = "aiohttp.server"
#: where a parser message starts quoting what it read: `: b'...`, ` '...'`
_QUOTED = re.compile(r"""\s*:?\s*b?['"]""")


def _http_parse_error(error: BaseException | None) -> bool:
    return error is not None and type(error).__module__ == "aiohttp.http_exceptions"


def _parse_error_reason(error: BaseException) -> str:
    """The parser's words without the request bytes it quotes ("Invalid header token", "Got more than 8190 bytes
    when reading"): a malformed header line may carry a credential."""
    message = str(getattr(error, "message", "") or type(error).__name__)
    first = message.strip().splitlines()[0] if message.strip() else type(error).__name__
    return _QUOTED.split(first, maxsplit=1)[0].rstrip(" :.")[:200] or type(error).__name__


class StdlibToStructlog(logging.Handler):
    """Hands the standard library's log records to structlog, so every line a process writes has one format.

    A record of aiohttp's server logger caused by an HTTP parse error becomes one warning
    `malformed HTTP request` (status, parser's reason without the request bytes, remote address), whatever
    level aiohttp gave it; other records keep their level, message and traceback (rendered into the line)
    and are dropped below `level`."""

    def __init__(self, level: int) -> None:
        super().__init__(logging.NOTSET)
        self.threshold = level

    def emit(self, record: logging.LogRecord) -> None:
        try:
            error = record.exc_info[1] if record.exc_info else None
            log = structlog.get_logger(component=record.name)
            if record.name.startswith(_AIOHTTP_SERVER_LOGGER) and _http_parse_error(error):
                assert error is not None
                remote = record.args[0] if isinstance(record.args, tuple) and record.args else None
                log.warning("malformed HTTP request", status=int(getattr(error, "code", 400) or 400),
                            error=_parse_error_reason(error), error_type=type(error).__name__,
                            remote=str(remote) if remote is not None else None)
                return
            if record.levelno < self.threshold:
                return
            fields: dict[str, Any] = {}
            if record.exc_info and record.exc_info[0] is not None:
                fields["exc_info"] = record.exc_info
            log.log(record.levelno, record.getMessage(), **fields)
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


def _route_stdlib_logging(level: int) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, StdlibToStructlog):
            root.removeHandler(handler)
    root.addHandler(StdlibToStructlog(level))
    root.setLevel(level)
    # aiohttp logs a garbage request line at debug level: let the record exist, the handler decides.
    logging.getLogger(_AIOHTTP_SERVER_LOGGER).setLevel(logging.DEBUG)


def get_logger(name: str) -> Any:
    """A bound structlog logger named after its component."""
    return structlog.get_logger(component=name)


class RepeatedFailureLog:
    """How a retry loop reports a failure that repeats: the first one in full (a warning), then at most
    one line every `every_seconds` with how many failed meanwhile, and one line when it succeeds again
    (client-go's backoff manager and kube's event recorder do the same). Never a line per attempt."""

    def __init__(self, log: Any, event: str, *, every_seconds: float = 30.0, **context: Any) -> None:
        self.log = log
        self.event = event
        self.every_seconds = every_seconds
        self.context = context
        self.failures = 0
        self._unreported = 0
        self._last_line = 0.0

    def failed(self, error: object, *, now: float, **detail: Any) -> None:
        self.failures += 1
        self._unreported += 1
        if self.failures == 1:
            self.log.warning(self.event, error=str(error), **self.context, **detail)
        elif now - self._last_line >= self.every_seconds:
            self.log.warning(f"{self.event} (still failing)", failures=self.failures,
                             since_last_line=self._unreported, error=str(error), **self.context, **detail)
        else:
            return
        self._unreported = 0
        self._last_line = now

    def succeeded(self, message: str, **detail: Any) -> None:
        if self.failures:
            self.log.info(message, failures=self.failures, **self.context, **detail)
        self.failures = 0
        self._unreported = 0


_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
#: How long jobs wait for a placement: from a fraction of a second on an idle hub to an hour in a full federation.
_WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
#: GPU models exported per cluster in federator_member_*_gpus; the rest are summed under model "other" (a member
#: labels its own nodes, so the number of distinct products it can show is its business, not our label set's).
MAX_GPU_MODELS_PER_CLUSTER = 16
OTHER_GPU_MODEL = "other"


@dataclass
class Metrics:
    """Every metric federator exports. Add new ones here, nowhere else."""

    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        r = self.registry
        # store
        self.store_ops = Counter(
            "federator_store_operations_total", "Store operations", ["backend", "op", "result"], registry=r
        )
        self.store_op_seconds = Histogram(
            "federator_store_operation_seconds", "Store operation latency", ["backend", "op"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.store_retries = Counter(
            "federator_store_retries_total", "Store operations retried after a transient error",
            ["backend", "op"], registry=r,
        )
        self.store_watch_events = Counter(
            "federator_store_watch_events_total", "Watch events delivered by the store", ["backend"], registry=r
        )
        self.store_size_bytes = Gauge(
            "federator_store_size_bytes", "Size of the hub store as its backend reports it cheaply: the sqlite "
            "database file plus its write-ahead log, or etcd's dbSize (of the member that answered); the memory "
            "backend reports none", ["backend"], registry=r,
        )
        self.store_keys = Gauge(
            "federator_store_keys", "Keys in the hub store (memory backend only: the others cannot count them "
            "cheaply)", ["backend"], registry=r,
        )
        self.store_compactions = Counter(
            "federator_store_compactions_total", "Compactions of the store's history this process made or saw "
            "(the retain window of memory and sqlite, compact calls); etcd's own auto-compaction is counted by "
            "etcd", ["backend"], registry=r,
        )
        self.store_encryption = Gauge(
            "federator_store_encryption_provider", "1 for each resource the hub store encrypts at rest "
            "(--encryption-provider-config), labelled with the provider and key name that write it (e.g. "
            "aesgcm:key1, or identity); never a key", ["resource", "writes"], registry=r,
        )
        self.leader = Gauge(
            "federator_leader", "1 while this process holds the hub leadership", ["backend"], registry=r
        )
        self.leader_transitions = Counter(
            "federator_leader_transitions_total", "Leadership gained or lost", ["backend", "event"], registry=r
        )
        # loops
        self.loop_phase_seconds = Histogram(
            "federator_loop_phase_seconds", "Time spent per phase of each background loop",
            ["loop", "phase"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        # API servers (hub and simulator)
        self.api_requests = Counter(
            "federator_api_requests_total", "API requests", ["server", "verb", "resource", "code"], registry=r
        )
        self.api_request_seconds = Histogram(
            "federator_api_request_seconds", "API request latency", ["server", "verb"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.api_watchers = Gauge(
            "federator_api_watchers", "Open watch streams", ["server", "resource"], registry=r
        )
        # Events (apiserver/events.py EventRecorder): recorded (a new Event), aggregated (a repeat raised a
        # count), ratelimited / dropped (over the per-object bucket / queue full), written, failed, expired, invalid
        self.events_recorded = Counter(
            "federator_events_total", "Events the hub's controllers recorded, by outcome", ["result"], registry=r
        )
        # member clusters (clusters/): label values are cluster names, never URLs or credentials
        self.audit_events = Counter(
            "federator_audit_events_total", "Audit events: written, dropped (queue full) or lost to a write error",
            ["result"], registry=r,
        )
        self.member_requests = Counter(
            "federator_member_requests_total", "Requests the hub sent to member clusters",
            ["cluster", "verb", "code"], registry=r,
        )
        self.member_request_seconds = Histogram(
            "federator_member_request_seconds", "Member request latency (to response headers)",
            ["cluster", "verb"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.member_watch_events = Counter(
            "federator_member_watch_events_total", "Watch events received from member clusters",
            ["cluster", "resource", "type"], registry=r,
        )
        self.member_relists = Counter(
            "federator_member_relists_total", "Full LISTs of a member resource by reason (initial, expired)",
            ["cluster", "resource", "reason"], registry=r,
        )
        self.member_watch_restarts = Counter(
            "federator_member_watch_restarts_total", "Member watches re-established, by why they ended",
            ["cluster", "resource", "reason"], registry=r,
        )
        self.member_sync_lag_seconds = Histogram(
            "federator_member_sync_lag_seconds", "From a member watch batch arriving to the new snapshot",
            ["cluster"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.member_condition = Gauge(
            "federator_member_condition", "1 when the member cluster's condition is True",
            ["cluster", "condition"], registry=r,
        )
        self.member_condition_transitions = Counter(
            "federator_member_condition_transitions_total", "Member cluster condition changes",
            ["cluster", "condition", "status"], registry=r,
        )
        self.member_snapshot_nodes = Gauge(
            "federator_member_snapshot_nodes", "Nodes in the member cluster's latest snapshot", ["cluster"],
            registry=r,
        )
        self.member_free_gpus = Gauge(
            "federator_member_free_gpus", "Free GPUs on the ready, schedulable nodes of the member cluster's "
            "latest snapshot (what placement sees; status.capacity.gpusByModel.free), by GPU model",
            ["cluster", "gpu_model"], registry=r,
        )
        self.member_allocatable_gpus = Gauge(
            "federator_member_allocatable_gpus", "Allocatable GPUs of every node of the member cluster's latest "
            "snapshot, ready or not, by GPU model (status.capacity.gpusByModel.total)", ["cluster", "gpu_model"],
            registry=r,
        )
        self.checkpoint_flushes = Counter(
            "federator_checkpoint_flushes_total", "Checkpoint flushes (one store txn each)", ["result"], registry=r,
        )
        self.checkpoint_keys_written = Counter(
            "federator_checkpoint_keys_written_total", "Checkpoint shard keys written or deleted", registry=r,
        )
        self.checkpoint_bytes_written = Counter(
            "federator_checkpoint_written_bytes_total", "Checkpoint bytes written", registry=r,
        )
        # job placement and dispatch (controllers/placement.py, controllers/dispatch.py)
        self.jobs = Gauge(
            "federator_jobs", "TrainingJobs by phase, as the leader's placement loop sees them (jobs without a "
            "phase yet count as Pending); exported by the leading replica only", ["phase"], registry=r,
        )
        self.placement_queue_depth = Gauge(
            "federator_placement_queue_depth", "Jobs waiting for a placement (Pending or Requeued, not suspended, "
            "not being deleted); exported by the leading replica only", registry=r,
        )
        self.placement_decision_latency_seconds = Histogram(
            "federator_placement_decision_latency_seconds", "From a job entering the placement queue (created, or "
            "sent back to it) to its placement decision being stored", buckets=_WAIT_BUCKETS, registry=r,
        )
        self.placement_decisions = Counter(
            "federator_placement_decisions_total", "Placement outcomes per gang and cycle (placed, unplaced)",
            ["result"], registry=r,
        )
        self.dispatches = Counter(
            "federator_dispatches_total", "Gang dispatches to member clusters by result (ok, failed)",
            ["cluster", "result"], registry=r,
        )
        self.dispatch_seconds = Histogram(
            "federator_dispatch_seconds", "From dispatch start to every member object created", ["cluster"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.job_requeues = Counter(
            "federator_job_requeues_total", "Jobs sent back to the placement queue, by reason", ["reason"],
            registry=r,
        )
        # job lifecycle (controllers/status_sync.py, stuck.py, cleanup.py)
        self.member_orphans_collected = Counter(
            "federator_member_orphans_collected_total",
            "Member objects the GC deleted because their job or epoch no longer exists there",
            ["cluster", "reason"], registry=r,
        )
        self.gangs_pulled_back = Counter(
            "federator_gangs_pulled_back_total",
            "Gangs pulled back from a member whose scheduler did not admit them in time", ["cluster"], registry=r,
        )
        # failover (controllers/failover.py, fencing/hublease.py)
        self.failovers = Counter(
            "federator_failovers_total", "Gangs of a lost cluster handled by failover, by outcome "
            "(requeued, failed, waiting, requeue_limit)", ["cluster", "outcome"], registry=r,
        )
        self.hub_partitioned = Gauge(
            "federator_hub_partitioned", "1 while so many clusters are lost at once that the hub assumes it is "
            "itself cut off and moves nothing", registry=r,
        )
        self.drill_reports = Gauge(
            "federator_drill_reports", "Stored DrillReports by fault and verdict (passed: no job lost, none seen "
            "running twice, every affected gang accounted for; failed otherwise), read when /metrics is scraped", ["fault", "verdict"], registry=r,
        )
        self.member_lease_renewals = Counter(
            "federator_member_lease_renewals_total", "Renewals of the hub's fencing Lease in member clusters, "
            "by result (ok, failed, unknown)", ["cluster", "result"], registry=r,
        )
        # simulator
        self.sim_pods_bound = Counter(
            "federator_sim_pods_bound_total", "Pods bound by the simulated gang scheduler", ["cluster"], registry=r
        )
        self.sim_faults = Counter(
            "federator_sim_faults_total", "Faults injected into simulated clusters", ["cluster", "fault"], registry=r
        )


METRICS = Metrics()
