"""The hub's settings: one documented, frozen dataclass per concern (kopf's `QueueingSettings`), grouped by the
controller that reads them, and `HubSettings`, which holds one of each.

Every field says its unit (in its name or its `unit`) and its default. Settings are built once, at start:
`HubSettings.from_mapping({...})` takes the flat keys that `federator up`'s flags, tests and benchmarks pass
(`placement_tick_seconds`, `member_lease`, ...) and rejects an unknown key (naming it and the closest known key)
and a value of the wrong type or out of range (naming the key and the field): a typo is an error, never a silent
default. The dataclasses check their own values too (`__post_init__`), so a directly built
`PlacementSettings(tick_seconds=-1)` fails the same way. Controllers read typed fields
(`hub.settings.dispatch.fence_wait_seconds`), never a dict of names.

`knobs()` lists every setting (flat key, field, unit, default, flag, what it tunes); README.md's "Hub settings"
table is `markdown_table()` (a test keeps it so), and `federator up --help` names the setting behind each flag.

This module holds types only; it must never start anything.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from federator.apiserver.events import EVENT_TTL_SECONDS
from federator.apis.clusterprofile import AccessProviderConfig
from federator.apis.common import ValidationSettings
from federator.clusters.health import DEFAULT_LOSS_GRACE_SECONDS
from federator.placement.framework import Profile
from federator.store.compaction import DEFAULT_COMPACTION_INTERVAL_SECONDS

if TYPE_CHECKING:
    from federator.clusters.sync import AppliedCallback

__all__ = [
    "DEFAULT_HUB_ID",
    "ClusterProfileSettings",
    "CompactionSettings",
    "DispatchSettings",
    "ElasticSettings",
    "EventSettings",
    "FailoverSettings",
    "GcSettings",
    "HubSettings",
    "Knob",
    "MemberLeaseSettings",
    "MemberSyncSettings",
    "NAMESPACE_MODES",
    "NamespaceSettings",
    "PlacementSettings",
    "QueueSettings",
    "SettingsError",
    "StatusSyncSettings",
    "StuckSettings",
    "ValidationSettings",
    "WatchSettings",
    "knobs",
    "markdown_table",
]

#: the identity a hub writes into member objects' `federator.dev/hub` label unless told otherwise
DEFAULT_HUB_ID: Final = "federator"

#: how a knob's value is checked: seconds and numbers are int or float (not bool, not str), counts are int
ValueKind = Literal["seconds", "optional_seconds", "number", "count", "flag", "text", "pair", "hook", "profile",
                    "providers", "path"]


class SettingsError(ValueError):
    """A hub setting that is unknown, of the wrong type or out of range; the message names the key."""


@dataclass(frozen=True, slots=True)
class _Spec:
    """What `_knob` records on a dataclass field (its `metadata["knob"]`)."""

    key: str
    kind: ValueKind
    unit: str
    doc: str
    #: the lowest value allowed; `above` makes it exclusive (> low instead of >= low)
    low: float | None = 0.0
    above: bool = False
    high: float | None = None
    #: the `federator up` flag that sets it, if any
    flag: str | None = None


def _knob(default: Any, *, key: str, doc: str, kind: ValueKind = "seconds", unit: str = "s", low: float | None = 0.0,
          above: bool = False, high: float | None = None, flag: str | None = None,
          factory: Callable[[], Any] | None = None) -> Any:
    spec = _Spec(key=key, kind=kind, unit=unit, doc=doc, low=low, above=above, high=high, flag=flag)
    if factory is not None:
        return field(default_factory=factory, metadata={"knob": spec})
    return field(default=default, metadata={"knob": spec})


def _positive(default: float, *, key: str, doc: str, flag: str | None = None) -> Any:
    """A period or timeout in seconds that must be > 0."""
    return _knob(default, key=key, doc=doc, above=True, flag=flag)


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def _checked(owner: str, name: str, spec: _Spec, value: Any) -> Any:
    """`value` checked against `spec` (ints become floats for seconds); SettingsError naming key and field."""
    where = f"{spec.key} ({owner}.{name})"
    if spec.kind == "hook":
        if value is not None and not callable(value):
            raise SettingsError(f"{where}: expected a callable or None, got {_describe(value)}")
        return value
    if spec.kind == "profile":
        if not isinstance(value, Profile):
            raise SettingsError(f"{where}: expected a placement Profile, got {_describe(value)}")
        return value
    if spec.kind == "providers":
        if not isinstance(value, tuple) or not all(isinstance(p, AccessProviderConfig) for p in value):
            raise SettingsError(f"{where}: expected a tuple of access providers (clusterprofile.parse_provider_config), "
                                f"got {_describe(value)}")
        return value
    if spec.kind == "path":
        if value is None or isinstance(value, Path):
            return value
        if isinstance(value, str) and value:
            return Path(value)
        raise SettingsError(f"{where}: expected a path or None, got {_describe(value)}")
    if spec.kind == "flag":
        if not isinstance(value, bool):
            raise SettingsError(f"{where}: expected true or false, got {_describe(value)}")
        return value
    if spec.kind == "text":
        if not isinstance(value, str) or not value:
            raise SettingsError(f"{where}: expected a non-empty string, got {_describe(value)}")
        return value
    if spec.kind == "pair":
        if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != 2:
            raise SettingsError(f"{where}: expected a (min, max) pair of whole seconds, got {_describe(value)}")
        low, high = (_checked(owner, name, dataclasses.replace(spec, kind="count"), v) for v in value)
        if low > high:
            raise SettingsError(f"{where}: min {low} is above max {high}")
        return (low, high)
    if spec.kind == "optional_seconds" and value is None:
        return None
    if spec.kind == "count":
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingsError(f"{where}: expected a whole number, got {_describe(value)}")
    elif isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        what = "a number of seconds" if spec.kind in ("seconds", "optional_seconds") else "a number"
        raise SettingsError(f"{where}: expected {what}, got {_describe(value)}")
    if spec.low is not None and (value <= spec.low if spec.above else value < spec.low):
        bound = f"above {spec.low:g}" if spec.above else ("not negative" if spec.low == 0 else f">= {spec.low:g}")
        raise SettingsError(f"{where}: must be {bound}, got {value!r}")
    if spec.high is not None and value > spec.high:
        raise SettingsError(f"{where}: must be at most {spec.high:g}, got {value!r}")
    return value if spec.kind == "count" else float(value)


def _check(instance: Any) -> None:
    """Check (and normalize: int seconds -> float, list pair -> tuple) every knob field of a frozen dataclass."""
    owner = type(instance).__name__
    for f in dataclasses.fields(instance):
        spec = f.metadata.get("knob")
        if spec is not None:
            object.__setattr__(instance, f.name, _checked(owner, f.name, spec, getattr(instance, f.name)))


# ---------------------------------------------------------------------------------------------------- concerns


@dataclass(frozen=True, slots=True)
class MemberSyncSettings:
    """Member-cluster sync (controllers/membercluster.py, clusters/sync.py): probes, health, timeouts, the
    member watches and the checkpoints of their snapshots."""

    probe_interval_seconds: float = _positive(
        2.0, key="probe_interval_seconds", doc="between health probes (GET /readyz) of each member")
    unreachable_after_failures: int = _knob(
        3, key="unreachable_after_failures", kind="count", unit="probes", low=1,
        doc="failed probes in a row before a member turns Reachable=False")
    watch_loss_grace_seconds: float = _knob(
        15.0, key="watch_loss_grace_seconds", doc="a lost member watch not back within this turns Reachable=False")
    cluster_loss_grace_seconds: float = _positive(
        DEFAULT_LOSS_GRACE_SECONDS, key="cluster_loss_grace_seconds", flag="--cluster-loss-grace",
        doc="out of contact this long (from the first failed contact) a member is Lost and its gangs fail over; "
            "a MemberCluster's spec.failover.gracePeriodSeconds overrides it")
    status_interval_seconds: float = _positive(
        5.0, key="member_status_interval_seconds",
        doc="MemberCluster.status is written at most this often (condition changes sooner)")
    checkpoint_interval_seconds: float = _positive(
        0.5, key="checkpoint_interval_seconds", doc="between checkpoint flushes of member snapshots (all clusters)")
    checkpoint_meta_refresh_seconds: float = _positive(
        30.0, key="checkpoint_meta_refresh_seconds", doc="a checkpoint's metadata is rewritten at least this often")
    watch_timeout_seconds: tuple[int, int] = _knob(
        (300, 600), key="member_watch_timeout_seconds", kind="pair", unit="s (min, max)",
        doc="timeoutSeconds of each member watch request, drawn between min and max")
    watch_idle_seconds: float = _positive(
        90.0, key="member_watch_idle_seconds", doc="a member watch silent this long is dropped and resumed")
    connect_timeout_seconds: float = _positive(
        5.0, key="member_connect_timeout_seconds", doc="TCP/TLS connect timeout of member requests")
    request_timeout_seconds: float = _positive(
        30.0, key="member_request_timeout_seconds", doc="timeout of one member request (not watches)")
    probe_timeout_seconds: float = _positive(3.0, key="member_probe_timeout_seconds", doc="timeout of one probe")
    concurrent_lists: int = _knob(
        4, key="member_concurrent_lists", kind="count", unit="requests", low=1,
        doc="member LISTs in flight at once across all clusters (initial syncs, re-lists after 410)")
    #: test and benchmark hook: called with (cluster, resource, events, received_at) after each applied batch
    on_applied: AppliedCallback | None = _knob(
        None, key="member_on_applied", kind="hook", unit="callable",
        doc="hook for benchmarks and tests, called after every applied batch of member events")

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True, slots=True)
class ClusterProfileSettings:
    """Clusters joined from the cluster inventory (controllers/clusterprofile.py): how the hub gets credentials
    for a ClusterProfile."""

    providers: tuple[AccessProviderConfig, ...] = _knob(
        (), key="cluster_profile_providers", kind="providers", unit="providers", low=None,
        flag="--cluster-profile-providers",
        doc="the exec credential plugins a ClusterProfile's status.accessProviders may name (upstream's "
            "access-provider file, `{\"providers\": [{\"name\", \"execConfig\"}]}`); the first the profile also "
            "lists is used")
    kubeconfig_dir: Path | None = _knob(
        None, key="cluster_profile_kubeconfig_dir", kind="path", unit="directory", low=None,
        flag="--cluster-profile-kubeconfigs",
        doc="kubeconfig Secrets mounted on the hub: a profile NS/NAME that no provider matches joins with "
            "DIR/NS/NAME/Config (the Secret's key `Config`) as its kubeconfigPath")
    exec_timeout_seconds: float = _positive(
        10.0, key="cluster_profile_exec_timeout_seconds",
        doc="an exec credential plugin that has not answered in this long is killed (the cluster shows why)")

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True, slots=True)
class MemberLeaseSettings:
    """The fencing Lease the hub renews in every member (fencing/hublease.py, docs/failover.md)."""

    enabled: bool = _knob(True, key="member_lease", kind="flag", unit="bool",
                          doc="renew a fencing Lease at all (off: failover waits for the loss grace only)")
    duration_seconds: float | None = _knob(
        None, key="member_lease_duration_seconds", kind="optional_seconds", above=True,
        flag="--member-lease-duration",
        doc="the Lease's leaseDurationSeconds: the member's agent fences this long after the last renewal "
            "(unset: each cluster's loss grace)")
    margin_seconds: float = _knob(
        5.0, key="member_lease_margin_seconds", flag="--lease-margin",
        doc="added to the lease before a lost cluster's gangs start elsewhere (agent poll, deletes, drift)")

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """Reconnect backoff (capped exponential with jitter) of every watch the hub runs: member reflectors,
    status sync's member watch and the hub's own kind caches (controllers/loops.py)."""

    backoff_initial_seconds: float = _positive(0.2, key="backoff_initial_seconds",
                                               doc="first reconnect delay of a broken watch")
    backoff_max_seconds: float = _positive(10.0, key="backoff_max_seconds", doc="cap of the reconnect delay")

    def __post_init__(self) -> None:
        _check(self)
        if self.backoff_max_seconds < self.backoff_initial_seconds:
            raise SettingsError(f"backoff_max_seconds ({self.backoff_max_seconds:g}) is below "
                                f"backoff_initial_seconds ({self.backoff_initial_seconds:g})")


@dataclass(frozen=True, slots=True)
class PlacementSettings:
    """The placement loop (controllers/placement.py)."""

    profile: Profile = _knob(None, key="placement_profile", kind="profile", unit="Profile", factory=Profile,
                             doc="filters, score weights and reservation timing of the cycle (placement/framework)")
    tick_seconds: float = _positive(1.0, key="placement_tick_seconds",
                                    doc="the cycle runs at least this often (events wake it sooner)")
    snapshot_poll_seconds: float = _positive(0.1, key="placement_snapshot_poll_seconds",
                                             doc="how often the loop looks for newer member snapshots")
    debounce_seconds: float = _knob(0.005, key="placement_debounce_seconds",
                                    doc="a wake-up waits this long to batch the jobs arriving with it")
    unplaced_refresh_seconds: float = _positive(5.0, key="placement_unplaced_refresh_seconds",
                                                doc="an unchanged 'why not placed' status is rewritten this often")
    max_inflight: int = _knob(64, key="placement_max_inflight", kind="count", unit="jobs", low=1,
                              doc="decisions being written or dispatched at once")
    preemption: bool = _knob(True, key="placement_preemption", kind="flag", unit="bool",
                             doc="preempt lower-priority gangs (off: preemption is only explained)")

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True, slots=True)
class ElasticSettings:
    """Elastic gangs' grow pass (issue 19, run by the placement loop)."""

    tick_seconds: float = _positive(5.0, key="elastic_tick_seconds", doc="period of the grow pass")
    grow_cooldown_seconds: float = _knob(60.0, key="elastic_grow_cooldown_seconds",
                                         doc="no growth this long after a placement or resize of the gang")

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    """Dispatch, the writer of member objects (controllers/dispatch.py)."""

    backoff_initial_seconds: float = _positive(0.5, key="dispatch_backoff_initial_seconds",
                                               doc="first retry delay of a failed dispatch")
    backoff_max_seconds: float = _positive(30.0, key="dispatch_backoff_max_seconds",
                                           doc="cap of a failed dispatch's retry delay")
    object_concurrency: int = _knob(16, key="dispatch_object_concurrency", kind="count", unit="requests", low=1,
                                    doc="member object writes in flight at once per dispatch")
    client_wait_seconds: float = _positive(30.0, key="dispatch_client_wait_seconds",
                                           doc="a dispatch waits this long for the member's client")
    fence_wait_seconds: float = _positive(30.0, key="dispatch_fence_wait_seconds",
                                          doc="a dispatch waits this long for a returning cluster's epoch fence")

    def __post_init__(self) -> None:
        _check(self)
        if self.backoff_max_seconds < self.backoff_initial_seconds:
            raise SettingsError(f"dispatch_backoff_max_seconds ({self.backoff_max_seconds:g}) is below "
                                f"dispatch_backoff_initial_seconds ({self.backoff_initial_seconds:g})")


@dataclass(frozen=True, slots=True)
class StatusSyncSettings:
    """Status sync and the lifecycle loops (controllers/status_sync.py; drain, stuck, failover, cleanup tick)."""

    lifecycle_tick_seconds: float = _knob(1.0, key="lifecycle_tick_seconds", low=0.01,
                                          doc="how often the lifecycle loops re-check everything")
    resync_seconds: float = _positive(5.0, key="status_resync_seconds",
                                      doc="a full pass over every active job at most this often")
    batch_seconds: float = _knob(0.5, key="status_batch_seconds",
                                 doc="a job's member changes within this window make one status write")

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True, slots=True)
class FailoverSettings:
    """Cluster failover (controllers/failover.py, docs/failover.md)."""

    mass_loss_threshold: float = _knob(
        0.5, key="mass_loss_threshold", kind="number", unit="fraction", high=1.0, flag="--mass-loss-threshold",
        doc="this share of the clusters (and at least 2) lost within one grace: the hub assumes it is cut off")
    rate_per_second: float = _knob(20.0, key="failover_rate", kind="number", unit="gangs/s", above=True,
                                   flag="--failover-rate", doc="at most this many gangs fail over per second")

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True, slots=True)
class GcSettings:
    """Deletion with the finalizer and GC of member objects (controllers/cleanup.py)."""

    cleanup_grace_seconds: float = _knob(
        60.0, key="cleanup_grace_seconds",
        doc="a deleted job's finalizer waits at most this long for an unreachable cluster")
    interval_seconds: float = _positive(30.0, key="member_gc_interval_seconds",
                                        doc="between GC passes over the objects this hub labelled")

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True, slots=True)
class StuckSettings:
    """Stuck gangs (controllers/stuck.py)."""

    timeout_seconds: float = _positive(120.0, key="stuck_timeout_seconds",
                                       doc="a gang not admitted this long after dispatch is pulled back")
    exclusion_seconds: float = _knob(600.0, key="stuck_exclusion_seconds",
                                     doc="the cluster it was stuck in is avoided this long for that job")

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Queue accounting (controllers/queues.py)."""

    status_interval_seconds: float = _knob(0.5, key="queue_status_interval_seconds",
                                           doc="Queue statuses are written at most this often")
    currency: str = _knob(
        "USD", key="currency", kind="text", unit="ISO 4217 code", low=None, flag="--currency",
        doc="the one currency of every MemberCluster GPU-hour price and Queue status.spend; a Queue budget in "
            "another currency is not enforced (its OverBudget condition is Unknown, reason CurrencyMismatch)")
    spend_interval_seconds: float = _knob(
        30.0, key="queue_spend_interval_seconds",
        doc="a Queue's status.spend (GPU time accrued from its jobs) is written at most this often while its jobs "
            "run; sooner at a new month, when a job is deleted or when it goes over or under its budget")

    def __post_init__(self) -> None:
        _check(self)
        if len(self.currency) != 3 or not self.currency.isascii() or not self.currency.isupper() \
                or not self.currency.isalpha():
            raise SettingsError(f"currency (QueueSettings.currency): unknown currency format {self.currency[:16]!r}: "
                                f"an ISO 4217 code is three uppercase letters (USD, EUR, JPY)")


@dataclass(frozen=True, slots=True)
class EventSettings:
    """Events the hub records (controllers/events.py, apiserver/events.py)."""

    ttl_seconds: float = _positive(EVENT_TTL_SECONDS, key="event_ttl_seconds", doc="an Event is deleted this long after it")
    gc_interval_seconds: float | None = _knob(
        None, key="event_gc_interval_seconds", kind="optional_seconds", above=True,
        doc="between passes deleting expired Events (unset: a tenth of the TTL, at most 60 s)")
    writes_per_second: float = _knob(100.0, key="event_writes_per_second", kind="number", unit="writes/s",
                                     above=True, doc="Event writes per second, at most")

    def __post_init__(self) -> None:
        _check(self)

    @property
    def gc_interval(self) -> float:
        """`gc_interval_seconds`, or its default: a tenth of the TTL, at most 60 s."""
        return self.gc_interval_seconds if self.gc_interval_seconds is not None else min(60.0, self.ttl_seconds / 10)


#: `NamespaceSettings.mode` values: kube's NamespaceLifecycle, or NamespaceAutoProvision (today's behaviour before
#: the hub served Namespaces: a job in any namespace is accepted)
NAMESPACE_MODES: Final = ("lifecycle", "autoprovision")


@dataclass(frozen=True, slots=True)
class NamespaceSettings:
    """Namespaces (apiserver/namespaces.py, controllers/namespaces.py): what a create in a namespace that does
    not exist gets, and how the namespace controller retries a Terminating namespace that is not empty yet."""

    mode: str = _knob(
        "lifecycle", key="namespaces", kind="text", unit="lifecycle | autoprovision", low=None, flag="--namespaces",
        doc="lifecycle: a create in a namespace that does not exist is 404 NotFound, in a Terminating one 403 "
            "(kube's NamespaceLifecycle); autoprovision: the missing namespace is created first "
            "(kube's NamespaceAutoProvision)")
    retry_seconds: float = _positive(
        0.5, key="namespace_retry_seconds",
        doc="first wait (doubling, at most 10 s) before the namespace controller looks again at a Terminating "
            "namespace whose objects are not all gone")

    def __post_init__(self) -> None:
        _check(self)
        if self.mode not in NAMESPACE_MODES:
            raise SettingsError(f"namespaces (NamespaceSettings.mode): expected one of {', '.join(NAMESPACE_MODES)}, "
                                f"got {self.mode!r}")

    @property
    def autoprovision(self) -> bool:
        return self.mode == "autoprovision"


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """Hub store compaction (store/compaction.py, run by the leader)."""

    interval_seconds: float = _knob(
        DEFAULT_COMPACTION_INTERVAL_SECONDS, key="compaction_interval_seconds", flag="--compaction-interval",
        doc="history kept in the store, compacted every fifth of it (0: keep all)")

    def __post_init__(self) -> None:
        _check(self)


#: ValidationSettings (apis/common.py: caps that make a spec absurd) is a concern of its own; its fields are
#: documented here, for `knobs()` and the README table.
_VALIDATION: Final[Mapping[str, _Spec]] = {
    "max_replicas_per_role": _Spec("max_replicas_per_role", "count", "pods", "replicas of one role, at most", 1),
    "max_total_replicas": _Spec("max_total_replicas", "count", "pods", "replicas of one job, at most", 1),
    "max_roles": _Spec("max_roles", "count", "roles", "roles of one job, at most", 1),
    "max_cpu_per_pod": _Spec("max_cpu_per_pod", "text", "quantity", "CPU request of one pod, at most", None),
    "max_memory_per_pod": _Spec("max_memory_per_pod", "text", "quantity", "memory request of one pod, at most",
                                None),
    "max_gpus_per_pod": _Spec("max_gpus_per_pod", "count", "GPUs", "GPUs of one pod, at most", 1),
    "max_rdma_per_pod": _Spec("max_rdma_per_pod", "count", "HCAs", "RDMA devices of one pod, at most", 1),
    "max_bandwidth_gbps": _Spec("max_bandwidth_gbps", "number", "Gbit/s", "a declared bandwidth, at most", 0.0,
                                above=True),
    "max_cost_per_gpu_hour": _Spec("max_cost_per_gpu_hour", "number", "cost/GPU-h",
                                   "a MemberCluster's cost per GPU hour, at most", 0.0, above=True),
    "max_requeues": _Spec("max_requeues", "count", "requeues", "spec.failover.maxRequeues, at most", 1),
    "max_errors": _Spec("max_errors", "count", "errors", "field errors listed in one response, at most", 1),
    "max_containers_per_pod": _Spec("max_containers_per_pod", "count", "containers",
                                    "containers (and, apart, init containers) of a full pod template, at most", 1),
    "max_template_bytes": _Spec("max_template_bytes", "count", "bytes",
                                "a role's full pod template as compact JSON, at most", 1),
    "max_save_grace_seconds": _Spec("max_save_grace_seconds", "count", "s",
                                    "spec.checkpoint.saveGraceSeconds, at most", 1),
}


# ---------------------------------------------------------------------------------------------------- the hub's


@dataclass(frozen=True, slots=True)
class HubSettings:
    """Every tunable of the hub: one dataclass per concern. Defaults suit a dev hub; tests shorten them.
    Build it directly (typed) or with `from_mapping` (flat keys, validated)."""

    #: where the hub keeps kubeconfigs it writes, certs and the sqlite file
    state_dir: Path = Path(".federator")
    #: the identity this hub writes into member objects' `federator.dev/hub` label (crash recovery and GC
    #: find their objects by it, so it must stay the same across restarts)
    hub_id: str = DEFAULT_HUB_ID
    member_sync: MemberSyncSettings = field(default_factory=MemberSyncSettings)
    cluster_profiles: ClusterProfileSettings = field(default_factory=ClusterProfileSettings)
    lease: MemberLeaseSettings = field(default_factory=MemberLeaseSettings)
    watch: WatchSettings = field(default_factory=WatchSettings)
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    elastic: ElasticSettings = field(default_factory=ElasticSettings)
    dispatch: DispatchSettings = field(default_factory=DispatchSettings)
    status_sync: StatusSyncSettings = field(default_factory=StatusSyncSettings)
    failover: FailoverSettings = field(default_factory=FailoverSettings)
    gc: GcSettings = field(default_factory=GcSettings)
    stuck: StuckSettings = field(default_factory=StuckSettings)
    queues: QueueSettings = field(default_factory=QueueSettings)
    events: EventSettings = field(default_factory=EventSettings)
    compaction: CompactionSettings = field(default_factory=CompactionSettings)
    namespaces: NamespaceSettings = field(default_factory=NamespaceSettings)
    validation: ValidationSettings = field(default_factory=ValidationSettings)

    def __post_init__(self) -> None:
        if isinstance(self.state_dir, str):
            object.__setattr__(self, "state_dir", Path(self.state_dir))
        if not isinstance(self.state_dir, Path):
            raise SettingsError(f"state_dir (HubSettings.state_dir): expected a path, got {_describe(self.state_dir)}")
        if not isinstance(self.hub_id, str) or not self.hub_id:
            raise SettingsError(f"hub_id (HubSettings.hub_id): expected a non-empty string, got "
                                f"{_describe(self.hub_id)}")
        for name, cls in _CONCERNS.items():
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise SettingsError(f"HubSettings.{name}: expected {cls.__name__}, got {_describe(value)}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> HubSettings:
        """HubSettings from flat keys (`knobs()` lists them; `state_dir` and `hub_id` too). An unknown key, a
        value of the wrong type or out of range raises SettingsError naming the key; nothing is defaulted
        silently."""
        by_key = {k.key: k for k in knobs()}
        top: dict[str, Any] = {}
        grouped: dict[str, dict[str, Any]] = {name: {} for name in _CONCERNS}
        for key, value in values.items():
            if key in ("state_dir", "hub_id"):
                top[key] = value
                continue
            knob = by_key.get(key)
            if knob is None:
                raise SettingsError(unknown_key_message(key, [*by_key, "state_dir", "hub_id"]))
            grouped[knob.concern][knob.field] = value
        concerns: dict[str, Any] = {}
        for name, chosen in grouped.items():
            if name == "validation":
                for key, value in chosen.items():
                    chosen[key] = _checked("ValidationSettings", key, _VALIDATION[key], value)
                try:
                    concerns[name] = ValidationSettings(**chosen)
                except ValueError as e:
                    raise SettingsError(str(e)) from None
            else:
                concerns[name] = _CONCERNS[name](**chosen)
        return cls(**top, **concerns)


_CONCERNS: Final[Mapping[str, type]] = {
    "member_sync": MemberSyncSettings,
    "cluster_profiles": ClusterProfileSettings,
    "lease": MemberLeaseSettings,
    "watch": WatchSettings,
    "placement": PlacementSettings,
    "elastic": ElasticSettings,
    "dispatch": DispatchSettings,
    "status_sync": StatusSyncSettings,
    "failover": FailoverSettings,
    "gc": GcSettings,
    "stuck": StuckSettings,
    "queues": QueueSettings,
    "events": EventSettings,
    "compaction": CompactionSettings,
    "namespaces": NamespaceSettings,
    "validation": ValidationSettings,
}


def unknown_key_message(key: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else " (README.md, 'Hub settings', lists them)"
    return f"unknown hub setting {key!r}{hint}"


@dataclass(frozen=True, slots=True)
class Knob:
    """One hub setting, as `knobs()` lists it."""

    #: the flat key of `HubSettings.from_mapping`
    key: str
    #: the HubSettings attribute of its concern, and the field there
    concern: str
    field: str
    unit: str
    default: Any
    doc: str
    #: the `federator up` flag that sets it, if any
    flag: str | None

    @property
    def path(self) -> str:
        return f"{self.concern}.{self.field}"


def knobs() -> Iterator[Knob]:
    """Every hub setting in a concern, in HubSettings' order."""
    defaults = HubSettings()
    for name, cls in _CONCERNS.items():
        instance = getattr(defaults, name)
        for f in dataclasses.fields(cls):
            spec = _VALIDATION.get(f.name) if cls is ValidationSettings else f.metadata.get("knob")
            if spec is None or not f.init:
                continue
            yield Knob(key=spec.key, concern=name, field=f.name, unit=spec.unit, default=getattr(instance, f.name),
                       doc=spec.doc, flag=spec.flag)


def _shown_default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Profile):
        return "Profile()"
    if value == ():
        return "none"
    if isinstance(value, tuple):
        return ", ".join(_shown_default(v) for v in value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


def markdown_table() -> str:
    """README.md's "Hub settings" table: key, field, unit, default, flag, what it tunes."""
    rows = ["| Setting | Field | Unit | Default | What it tunes |", "|---|---|---|---|---|"]
    for k in knobs():
        flag = f" (`{k.flag}`)" if k.flag else ""
        rows.append(f"| `{k.key}`{flag} | `{k.path}` | {k.unit} | {_shown_default(k.default)} | {k.doc} |")
    return "\n".join(rows)
