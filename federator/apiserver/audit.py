"""The API server's audit log, in kube-apiserver's format.

Every request the API serves becomes `audit.k8s.io/v1` `Event` objects, one JSON
document per line (kube's `--audit-log-format=json`): who (user, groups, source
IP, user agent), what (verb, requestURI, objectRef: apiGroup, apiVersion,
resource, subresource, namespace, name), the answer (responseStatus: code, and
for a failure its status, reason and message) and when (requestReceivedTimestamp,
stageTimestamp, microseconds, RFC 3339 UTC). Stages: RequestReceived (once the
caller is authenticated), ResponseStarted (streamed answers only: watches, log
follows), ResponseComplete, Panic (the handler raised).

What is logged is decided by a policy in kube's format (`apiVersion:
audit.k8s.io/v1`, `kind: Policy`, `rules` with `level`, `users`, `userGroups`,
`verbs`, `resources` [{group, resources, resourceNames}], `namespaces`,
`nonResourceURLs`, `omitStages`, `omitManagedFields`; the first rule that matches
gives the level; no rule matching means None). Levels: None (not logged),
Metadata, Request (+ requestObject), RequestResponse (+ responseObject). A policy
that does not parse or names an unknown field or value is an `AuditPolicyError`
naming the field: the hub does not start. Without a policy file,
`DEFAULT_POLICY` logs every request at Metadata except the health probes.

Bodies are logged only as the API shows them: a request or response object of a
kind with a `present` hook (a MemberCluster: credentials "<redacted>") passes
through that same hook, a request body that hook cannot redact (a JSON patch of
such a kind) is left out, and the Authorization header is never read here.

The hub's own writes to member clusters are logged through `record_member_write`
(Metadata, user `system:federator:controller`, annotations naming the cluster and
why). Writing happens on one thread behind a bounded queue: a request never waits
for the disk; a full queue or a failing disk drops events and says so in a
rate-limited log line (kube's `--audit-log-mode=batch` behaves alike), and the
hub keeps serving. The file is rotated by size as kube's (lumberjack):
`NAME-<UTC timestamp>.EXT`, keeping `max_backups` (and none older than
`max_age_days`).

This module must never log or write a token, a credential or the Authorization
header, and never import the simulator or the hub.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import queue
import re
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final, Protocol

import orjson
import yaml
from aiohttp import web

from federator.apis.timestamps import format_micro_time
from federator.apiserver import auth
from federator.apiserver.app import API_STATE, PRINCIPAL_KEY, REQUEST_BODY, Principal, decode_body
from federator.apiserver.errors import ApiError
from federator.apiserver.managedfields import without_managed_fields
from federator.obs import METRICS, Metrics, RepeatedFailureLog, get_logger

__all__ = [
    "AUDIT_ID_HEADER",
    "CLUSTER_ANNOTATION",
    "REASON_ANNOTATION",
    "CONTROLLER_USER",
    "FENCE_AGENT_USER",
    "MemberWriteRecord",
    "DEFAULT_POLICY",
    "LEVELS",
    "STAGES",
    "AuditFile",
    "AuditLog",
    "AuditLogSettings",
    "AuditPolicy",
    "AuditPolicyError",
    "GroupResources",
    "PolicyRule",
    "load_policy",
    "iter_events",
    "open_audit_log",
    "parse_policy",
    "settings_from_flags",
]

_log = get_logger("apiserver.audit")

LEVELS: Final = ("None", "Metadata", "Request", "RequestResponse")
STAGES: Final = ("RequestReceived", "ResponseStarted", "ResponseComplete", "Panic")
AUDIT_ID_HEADER: Final = "Audit-Id"
#: Who the hub's own member writes are logged as.
CONTROLLER_USER: Final = "system:federator:controller"
CONTROLLER_GROUPS: Final = ("system:federator",)
#: Who the member-side fence agent's writes are logged as (`federator agent --audit-log-path`).
FENCE_AGENT_USER: Final = "system:federator:fence-agent"
CLUSTER_ANNOTATION: Final = "federator.dev/cluster"
REASON_ANNOTATION: Final = "federator.dev/reason"
#: Set when a body was not logged (too large, or not redactable).
OMITTED_ANNOTATION: Final = "federator.dev/omitted"
#: A policy file larger than this is refused (kube's are a few KiB).
MAX_POLICY_BYTES: Final = 1024 * 1024
#: A request or response object larger than this (encoded) is left out of its event.
MAX_LOGGED_OBJECT_BYTES: Final = 1024 * 1024
#: Events waiting for the writer thread; beyond this they are dropped (and counted).
QUEUE_EVENTS: Final = 10_000
_HEALTH_PATHS = ("/healthz*", "/livez*", "/readyz*", "/metrics")


class AuditPolicyError(ValueError):
    """An audit policy that cannot be used (one line naming the field)."""


# ---------------------------------------------------------------- policy


@dataclass(frozen=True, slots=True)
class GroupResources:
    """One `resources` entry of a rule: an API group ("" is core), its resources ("pods", "pods/log",
    "pods/*", "*/status", "*"; none means all of the group) and optionally object names."""

    group: str = ""
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()

    def matches(self, *, group: str, resource: str, subresource: str, name: str) -> bool:
        if self.group != group:
            return False
        if not self.resources:
            return True
        if self.resource_names and name not in self.resource_names:
            return False
        combined = f"{resource}/{subresource}" if subresource else resource
        for res in self.resources:
            if res in (combined, "*"):
                return True
            if subresource and res.startswith("*/") and res[2:] == subresource:
                return True
            if res.endswith("/*") and res[:-2] == resource:
                return True
        return False


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """A rule of kube's audit Policy; empty lists match anything."""

    level: str
    users: tuple[str, ...] = ()
    user_groups: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resources: tuple[GroupResources, ...] = ()
    namespaces: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()
    omit_stages: frozenset[str] = frozenset()
    omit_managed_fields: bool | None = None

    def matches(self, *, user: str, groups: Sequence[str], attributes: auth.RequestAttributes) -> bool:
        """kube's policy checker (ruleMatches): users, groups and verbs, then resources or URLs."""
        if self.users and user not in self.users:
            return False
        if self.user_groups and not any(g in self.user_groups for g in groups):
            return False
        if self.verbs and attributes.verb not in self.verbs:
            return False
        if self.namespaces or self.resources:
            if not attributes.is_resource_request:
                return False
            if self.namespaces and attributes.namespace not in self.namespaces:
                return False
            return not self.resources or any(
                gr.matches(group=attributes.group, resource=attributes.resource,
                           subresource=attributes.subresource, name=attributes.name) for gr in self.resources)
        if self.non_resource_urls:
            if attributes.is_resource_request:
                return False
            return any(attributes.path == url or (url.endswith("*") and attributes.path.startswith(url[:-1]))
                       for url in self.non_resource_urls)
        return True


@dataclass(frozen=True, slots=True)
class AuditPolicy:
    rules: tuple[PolicyRule, ...]
    omit_stages: frozenset[str] = frozenset()
    omit_managed_fields: bool = False

    def decide(self, *, user: str, groups: Sequence[str], attributes: auth.RequestAttributes) -> tuple[str, frozenset[str], bool]:
        """(level, stages left out, omit managedFields) of the first matching rule; ("None", ...) if none does."""
        for rule in self.rules:
            if rule.matches(user=user, groups=groups, attributes=attributes):
                omit_mf = self.omit_managed_fields if rule.omit_managed_fields is None else rule.omit_managed_fields
                return rule.level, self.omit_stages | rule.omit_stages, omit_mf
        return "None", self.omit_stages, self.omit_managed_fields


#: Without a policy file: every request and every member write at Metadata, except the health probes and
#: /metrics and the hub's renewals of its fencing Lease in each member (a line a second would drown the
#: log; examples/audit-policy.yaml shows how to keep them); RequestReceived is left out (one line a request).
DEFAULT_POLICY: Final = AuditPolicy(
    rules=(PolicyRule(level="None", non_resource_urls=_HEALTH_PATHS),
           PolicyRule(level="None", users=(CONTROLLER_USER,), verbs=("patch", "create"),
                      resources=(GroupResources(group="coordination.k8s.io", resources=("leases",)),)),
           PolicyRule(level="Metadata")),
    omit_stages=frozenset({"RequestReceived"}),
)

_POLICY_KEYS = frozenset({"apiVersion", "kind", "metadata", "rules", "omitStages", "omitManagedFields"})
_RULE_KEYS = frozenset({"level", "users", "userGroups", "verbs", "resources", "namespaces", "nonResourceURLs",
                        "omitStages", "omitManagedFields"})
_GR_KEYS = frozenset({"group", "resources", "resourceNames"})


def _strings(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AuditPolicyError(f"{where}: must be a list of strings")
    return tuple(value)


def _stages(value: object, where: str) -> frozenset[str]:
    stages = _strings(value, where)
    for i, stage in enumerate(stages):
        if stage not in STAGES:
            raise AuditPolicyError(f'{where}[{i}]: Unsupported value: "{stage[:64]}": supported values: '
                                   + ", ".join(f'"{s}"' for s in STAGES))
    return frozenset(stages)


def _unknown(obj: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    for key in obj:
        if key not in allowed:
            raise AuditPolicyError(f'{where}: unknown field "{str(key)[:64]}"')


def _rule(raw: object, where: str) -> PolicyRule:
    if not isinstance(raw, dict):
        raise AuditPolicyError(f"{where}: must be an object")
    _unknown(raw, _RULE_KEYS, where)
    level = raw.get("level")
    if level is None:
        raise AuditPolicyError(f"{where}.level: Required value")
    if level not in LEVELS:
        raise AuditPolicyError(f'{where}.level: Unsupported value: "{str(level)[:64]}": supported values: '
                               + ", ".join(f'"{lv}"' for lv in LEVELS))
    resources: list[GroupResources] = []
    raw_resources = raw.get("resources")
    if raw_resources is not None and not isinstance(raw_resources, list):
        raise AuditPolicyError(f"{where}.resources: must be a list")
    for j, gr in enumerate(raw_resources or ()):
        gr_where = f"{where}.resources[{j}]"
        if not isinstance(gr, dict):
            raise AuditPolicyError(f"{gr_where}: must be an object")
        _unknown(gr, _GR_KEYS, gr_where)
        group = gr.get("group", "")
        if not isinstance(group, str):
            raise AuditPolicyError(f"{gr_where}.group: must be a string")
        names = _strings(gr.get("resourceNames"), f"{gr_where}.resourceNames")
        res = _strings(gr.get("resources"), f"{gr_where}.resources")
        if names and not res:
            raise AuditPolicyError(f"{gr_where}.resourceNames: Invalid value: resourceNames require resources")
        resources.append(GroupResources(group=group, resources=res, resource_names=names))
    namespaces = _strings(raw.get("namespaces"), f"{where}.namespaces")
    urls = _strings(raw.get("nonResourceURLs"), f"{where}.nonResourceURLs")
    if urls and (resources or namespaces):
        raise AuditPolicyError(f"{where}.nonResourceURLs: Invalid value: rules cannot apply to both regular "
                               "resources and non-resource URLs")
    for k, url in enumerate(urls):
        if not url.startswith("/") and url != "*":
            raise AuditPolicyError(f'{where}.nonResourceURLs[{k}]: Invalid value: "{url[:64]}": non-resource URL '
                                   'rules must begin with "/"')
    omit_mf = raw.get("omitManagedFields")
    if omit_mf is not None and not isinstance(omit_mf, bool):
        raise AuditPolicyError(f"{where}.omitManagedFields: must be true or false")
    return PolicyRule(level=str(level), users=_strings(raw.get("users"), f"{where}.users"),
                      user_groups=_strings(raw.get("userGroups"), f"{where}.userGroups"),
                      verbs=_strings(raw.get("verbs"), f"{where}.verbs"), resources=tuple(resources),
                      namespaces=namespaces, non_resource_urls=urls,
                      omit_stages=_stages(raw.get("omitStages"), f"{where}.omitStages"),
                      omit_managed_fields=omit_mf)


class _PolicyLoader(yaml.SafeLoader):
    """YAML without aliases (an alias bomb is refused before it expands)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.events.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "YAML aliases are not accepted", None)
        return super().compose_node(parent, index)


def parse_policy(data: bytes) -> AuditPolicy:
    """A Policy document (YAML or JSON) -> AuditPolicy; AuditPolicyError (one line, naming the field)."""
    if len(data) > MAX_POLICY_BYTES:
        raise AuditPolicyError(f"larger than {MAX_POLICY_BYTES} bytes")
    loader = _PolicyLoader(data)
    try:
        raw = loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or getattr(e, "context", None) or type(e).__name__
        raise AuditPolicyError(f"not YAML: {problem}{where}") from None
    except (RecursionError, ValueError) as e:
        raise AuditPolicyError(f"not YAML: {type(e).__name__}") from None
    finally:
        loader.dispose()
    if not isinstance(raw, dict):
        raise AuditPolicyError("not an audit.k8s.io/v1 Policy object")
    if raw.get("apiVersion") != "audit.k8s.io/v1":
        raise AuditPolicyError(f'apiVersion: Unsupported value: "{str(raw.get("apiVersion"))[:64]}": supported '
                               'values: "audit.k8s.io/v1"')
    if raw.get("kind") != "Policy":
        raise AuditPolicyError(f'kind: Unsupported value: "{str(raw.get("kind"))[:64]}": supported values: "Policy"')
    _unknown(raw, _POLICY_KEYS, "policy")
    rules = raw.get("rules")
    if not isinstance(rules, list) or not rules:
        raise AuditPolicyError("rules: Required value: a policy needs at least one rule")
    omit_mf = raw.get("omitManagedFields", False)
    if not isinstance(omit_mf, bool):
        raise AuditPolicyError("omitManagedFields: must be true or false")
    return AuditPolicy(rules=tuple(_rule(r, f"rules[{i}]") for i, r in enumerate(rules)),
                       omit_stages=_stages(raw.get("omitStages"), "omitStages"), omit_managed_fields=omit_mf)


def load_policy(path: str | os.PathLike[str]) -> AuditPolicy:
    """`parse_policy` of a file; AuditPolicyError naming the file (and the field) when it cannot be used."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_POLICY_BYTES + 1)
        return parse_policy(data)
    except OSError as e:
        raise AuditPolicyError(f"{path}: {e.strerror or e}") from None
    except AuditPolicyError as e:
        raise AuditPolicyError(f"{path}: {e}") from None


# ---------------------------------------------------------------- the file


_BACKUP_TIME = "%Y-%m-%dT%H-%M-%S"


class AuditFile:
    """Lines appended to a file (or stdout for "-"), rotated by size like lumberjack (kube's
    --audit-log-maxsize/-maxbackup/-maxage): the full file is renamed NAME-<UTC time>.EXT and a new one begun;
    backups beyond `max_backups` (0 keeps all) or older than `max_age_days` (0 keeps all) are removed.
    Used by one thread only."""

    def __init__(self, path: str, *, max_bytes: int = 0, max_backups: int = 0, max_age_days: int = 0) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_backups = max_backups
        self.max_age_days = max_age_days
        self._fh: BinaryIO | None = None
        self._size = 0
        self.open()

    def open(self) -> None:
        if self._fh is not None:
            return
        if self.path == "-":
            self._fh = sys.stdout.buffer
            return
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        self._fh = os.fdopen(fd, "ab")
        self._size = os.fstat(fd).st_size
        if self._size and os.pread(fd, 1, self._size - 1) != b"\n":
            # a line cut short (the disk filled up mid-write): the next event starts on a line of its own
            self._fh.write(b"\n")
            self._size += 1

    def write(self, lines: Sequence[bytes]) -> None:
        """Append `lines` (each ending in a newline), rotating before a line that would pass the size limit
        (a line larger than the limit gets a file of its own), then flush."""
        if self._fh is None:
            self.open()
        for line in lines:
            if self.path != "-" and self.max_bytes > 0 and self._size > 0 \
                    and self._size + len(line) > self.max_bytes:
                self.rotate()
            assert self._fh is not None
            self._fh.write(line)
            self._size += len(line)
        if self._fh is not None:
            self._fh.flush()

    def _backup_name(self, when: dt.datetime) -> Path:
        path = Path(self.path)
        stamp = when.strftime(_BACKUP_TIME) + f".{when.microsecond // 1000:03d}"
        return path.with_name(f"{path.stem}-{stamp}{path.suffix}")

    def _backups(self) -> list[tuple[dt.datetime, Path]]:
        path = Path(self.path)
        pattern = re.compile(re.escape(path.stem) + r"-(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d)\.(\d{3})"
                             + re.escape(path.suffix) + "$")
        found = []
        for entry in path.parent.iterdir():
            m = pattern.match(entry.name)
            if m:
                when = dt.datetime.strptime(m.group(1), _BACKUP_TIME).replace(
                    microsecond=int(m.group(2)) * 1000, tzinfo=dt.UTC)
                found.append((when, entry))
        return sorted(found, reverse=True)

    def rotate(self) -> None:
        self.close()
        now = dt.datetime.now(dt.UTC)
        backup = self._backup_name(now)
        while backup.exists():  # two rotations within one millisecond
            now += dt.timedelta(milliseconds=1)
            backup = self._backup_name(now)
        os.replace(self.path, backup)
        self.open()
        backups = self._backups()
        doomed = backups[self.max_backups:] if self.max_backups > 0 else []
        if self.max_age_days > 0:
            cutoff = now - dt.timedelta(days=self.max_age_days)
            doomed += [b for b in backups if b[0] < cutoff and b not in doomed]
        for _, old in doomed:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()

    def close(self) -> None:
        if self._fh is not None and self.path != "-":
            self._fh.close()
        self._fh = None
        self._size = 0


# ---------------------------------------------------------------- the log


@dataclass(frozen=True, slots=True)
class AuditLogSettings:
    """The --audit-log-* flags."""

    #: the file; "-" is stdout
    path: str
    policy: AuditPolicy = DEFAULT_POLICY
    #: rotate when the file would exceed this many MB; 0 never rotates
    max_size_mb: int = 0
    #: rotated files kept; 0 keeps all
    max_backups: int = 0
    #: rotated files older than this many days are removed; 0 keeps all
    max_age_days: int = 0


@dataclass
class _Pending:
    """One request's audit state, from the outer middleware to its last event."""

    audit_id: str
    received: float
    attributes: auth.RequestAttributes
    level: str | None = None
    omit_stages: frozenset[str] = frozenset()
    omit_managed_fields: bool = False
    #: the streamed answer once it began (ResponseStarted logged)
    started_response: web.StreamResponse | None = None


class MemberWriteRecord(Protocol):
    """What `record_member_write` reads of a write to a member (clusters/client.py's MemberWrite, which this
    module may not import: apiserver serves both halves)."""

    @property
    def cluster(self) -> str: ...
    @property
    def verb(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def resource(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def subresource(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def code(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def started(self) -> float: ...
    @property
    def why(self) -> str: ...


_AUDIT: Final = web.RequestKey("federator_audit", _Pending)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: (request) -> the context in which that request's objects are presented
View = Callable[[web.Request], contextlib.AbstractContextManager[None]]


def _no_view(_: web.Request) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


class AuditLog:
    """The audit log of one API server: the middlewares that observe requests, and the writer thread."""

    def __init__(self, settings: AuditLogSettings, *, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.policy = settings.policy
        self.metrics = metrics or METRICS
        # opened now: a path that cannot be written stops the hub at start, with one line
        self._file = AuditFile(settings.path, max_bytes=settings.max_size_mb * 1024 * 1024,
                               max_backups=settings.max_backups, max_age_days=settings.max_age_days)
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=QUEUE_EVENTS)
        self._failures = RepeatedFailureLog(_log, "audit log write failed; events are dropped until it works",
                                            path=settings.path)
        self._drops = RepeatedFailureLog(_log, "audit log queue full; events are dropped", path=settings.path)
        self._thread = threading.Thread(target=self._run, name="audit-log-writer", daemon=True)
        self._thread.start()
        self._closed = False
        #: the context a request's objects are presented in (`install`'s view)
        self._view: View = _no_view

    # ------------------------------------------------------------ writing

    def _emit(self, event: Mapping[str, Any]) -> None:
        if self._closed:
            return
        try:
            self._queue.put_nowait(orjson.dumps(event) + b"\n")
        except queue.Full:
            self.metrics.audit_events.labels(result="dropped").inc()
            self._drops.failed("queue full", now=time.monotonic())

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            batch = [first]
            while len(batch) < 512:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            lines = [b for b in batch if b is not None]
            try:
                if lines:
                    self._file.write(lines)
                    self.metrics.audit_events.labels(result="written").inc(len(lines))
                    self._failures.succeeded("audit log writes work again")
            except (OSError, ValueError) as e:
                self.metrics.audit_events.labels(result="error").inc(len(lines))
                self._failures.failed(f"{type(e).__name__}: {getattr(e, 'strerror', None) or e}",
                                      now=time.monotonic())
                with contextlib.suppress(OSError, ValueError):
                    self._file.close()  # reopened by the next write
            finally:
                for _ in batch:
                    self._queue.task_done()
            if None in batch:
                return

    def flush(self) -> None:
        """Wait until every event emitted so far is written (or dropped)."""
        if not self._closed:
            self._queue.join()

    def close(self) -> None:
        """Write what is queued and stop the writer thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=10)
        with contextlib.suppress(OSError, ValueError):
            self._file.close()

    # ------------------------------------------------------------ events

    def _event(self, pending: _Pending, *, stage: str, user: Mapping[str, Any], request_uri: str,
               source_ips: Sequence[str], user_agent: str, level: str, now: float) -> dict[str, Any]:
        a = pending.attributes
        event: dict[str, Any] = {
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": level, "auditID": pending.audit_id,
            "stage": stage, "requestURI": request_uri, "verb": a.verb, "user": dict(user),
            "sourceIPs": list(source_ips), "userAgent": user_agent,
        }
        if a.is_resource_request:
            ref = {"resource": a.resource, "namespace": a.namespace, "name": a.name, "apiGroup": a.group,
                   "apiVersion": a.version, "subresource": a.subresource}
            event["objectRef"] = {k: v for k, v in ref.items() if v}
        event["requestReceivedTimestamp"] = format_micro_time(pending.received)
        event["stageTimestamp"] = format_micro_time(now)
        return event

    def _decide(self, request: web.Request, pending: _Pending) -> None:
        if pending.level is not None:
            return
        principal = _principal(request)
        user, groups = (principal.name, principal.groups) if principal is not None else ("", ())
        pending.level, pending.omit_stages, pending.omit_managed_fields = self.policy.decide(
            user=user, groups=groups, attributes=pending.attributes)

    def _request_event(self, request: web.Request, pending: _Pending, *, stage: str,
                       response: web.StreamResponse | None, error: BaseException | None = None) -> None:
        self._decide(request, pending)
        level = pending.level or "None"
        if level == "None" or stage in pending.omit_stages:
            return
        principal = _principal(request)
        user: dict[str, Any] = {}
        if principal is not None:
            user = {"username": principal.name}
            if principal.uid:
                user["uid"] = principal.uid
            if principal.groups:
                user["groups"] = list(principal.groups)
        event = self._event(pending, stage=stage, user=user, request_uri=request.path_qs,
                            source_ips=[request.remote] if request.remote else [],
                            user_agent=request.headers.get("User-Agent", ""), level=level, now=time.time())
        annotations: dict[str, str] = {}
        if pending.attributes.verb == "create" and not pending.attributes.name and "objectRef" in event:
            # as kube's LogRequestObject: a create names its object by the body (the answer's, else the request's)
            name = _object_name(response.body if isinstance(response, web.Response) else None) \
                or _object_name(request.get(REQUEST_BODY))
            if name:
                event["objectRef"]["name"] = name
        if response is not None:
            event["responseStatus"] = self._response_status(response, level=level)
        elif error is not None:
            cancelled = isinstance(error, (asyncio.CancelledError, ConnectionResetError))
            event["responseStatus"] = {
                "metadata": {}, "status": "Failure", "reason": "InternalError", "code": 500,
                "message": "the request was cancelled (the client went away)" if cancelled
                else f"the request failed: {type(error).__name__}"}
        if level in ("Request", "RequestResponse"):
            obj, why = self._request_object(request, pending)
            if obj is not None:
                event["requestObject"] = obj
            elif why:
                annotations[OMITTED_ANNOTATION + "-requestObject"] = why
        if level == "RequestResponse" and response is not None and stage == "ResponseComplete":
            obj, why = self._response_object(response, pending)
            if obj is not None:
                event["responseObject"] = obj
            elif why:
                annotations[OMITTED_ANNOTATION + "-responseObject"] = why
        if annotations:
            event["annotations"] = annotations
        self._emit(event)

    @staticmethod
    def _response_status(response: web.StreamResponse, *, level: str) -> dict[str, Any]:
        status: dict[str, Any] = {"metadata": {}, "code": response.status}
        if response.status >= 300 and isinstance(response, web.Response) and isinstance(response.body, bytes):
            with contextlib.suppress(orjson.JSONDecodeError):
                body = orjson.loads(response.body)
                if isinstance(body, dict) and body.get("kind") == "Status":
                    for key in ("status", "reason", "message"):
                        if isinstance(body.get(key), str) and body[key]:
                            status[key] = body[key]
        return status

    def _request_object(self, request: web.Request, pending: _Pending) -> tuple[Any, str]:
        body = request.get(REQUEST_BODY)
        if not body:
            return None, ""
        if len(body) > MAX_LOGGED_OBJECT_BYTES:
            return None, "too large"
        # patch media types (merge-patch+json, json-patch+json, apply-patch+yaml...) decode as JSON or YAML
        content_type = request.content_type
        media = "application/yaml" if "yaml" in content_type else "application/json" if "json" in content_type \
            else content_type
        try:
            value = decode_body(body, media)
        except ApiError:
            return None, "not decodable"
        present = self._present(request, pending)
        if present is not None:
            if not isinstance(value, dict):
                # e.g. a JSON patch of a kind whose credentials the API redacts: it cannot be shown redacted
                return None, "may carry credentials"
            with self._view(request):
                value = present(value)
        return (without_managed_fields(value) if pending.omit_managed_fields else value), ""

    def _response_object(self, response: web.StreamResponse, pending: _Pending) -> tuple[Any, str]:
        # The body as sent: what the API shows (a kind's `present` already applied, e.g. credentials redacted).
        if not isinstance(response, web.Response) or not isinstance(response.body, bytes) or not response.body:
            return None, ""
        if len(response.body) > MAX_LOGGED_OBJECT_BYTES:
            return None, "too large"
        if (response.content_type or "").split(";")[0] != "application/json":
            return None, ""
        try:
            value = orjson.loads(response.body)
        except orjson.JSONDecodeError:
            return None, ""
        return (without_managed_fields(value) if pending.omit_managed_fields else value), ""

    @staticmethod
    def _present(request: web.Request, pending: _Pending) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
        a = pending.attributes
        state = request.config_dict.get(API_STATE)
        if state is None or not a.is_resource_request:
            return None
        rt = state.registry.get(a.group, a.version, a.resource)
        return rt.present if rt is not None else None

    # ------------------------------------------------------------ middlewares

    def middlewares(self) -> tuple[Any, Any]:
        """(outer, inner): put `outer` before authentication (so a 401 or 403 is logged too) and `inner`
        right after it (RequestReceived, once the user is known)."""

        @web.middleware
        async def outer(request: web.Request, handler: Handler) -> web.StreamResponse:
            pending = _Pending(audit_id=str(uuid.uuid4()), received=time.time(),
                               attributes=auth.request_attributes(request.method, request.path, request.query))
            request[_AUDIT] = pending
            try:
                response = await handler(request)
            except web.HTTPException as e:  # a redirect or an error raised past the API's own middlewares
                self._request_event(request, pending, stage="ResponseComplete", response=e)
                raise
            except (asyncio.CancelledError, ConnectionResetError) as e:
                # the client went away: a stream that had begun is complete (kube logs a watch so), else Panic
                started = pending.started_response
                if started is not None:
                    self._request_event(request, pending, stage="ResponseComplete", response=started)
                else:
                    self._request_event(request, pending, stage="Panic", response=None, error=e)
                raise
            except BaseException as e:
                self._request_event(request, pending, stage="Panic", response=None, error=e)
                raise
            if not response.prepared:
                response.headers[AUDIT_ID_HEADER] = pending.audit_id
            self._request_event(request, pending, stage="ResponseComplete", response=response)
            return response

        @web.middleware
        async def inner(request: web.Request, handler: Handler) -> web.StreamResponse:
            pending = request.get(_AUDIT)
            if pending is not None:
                self._request_event(request, pending, stage="RequestReceived", response=None)
            return await handler(request)

        return outer, inner

    def install(self, app: web.Application, *, view: View | None = None) -> None:
        """ResponseStarted events for streamed answers (watches, followed logs), and the writer closed with the app.
        `view(request)` is entered around a request body's `present`, so that it is shown as the API shows
        that caller's objects (the hub's MemberCluster connection, for an admin)."""
        if view is not None:
            self._view = view

        async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
            pending = request.get(_AUDIT)
            if pending is None or isinstance(response, web.Response) or pending.started_response is not None:
                return
            pending.started_response = response
            response.headers[AUDIT_ID_HEADER] = pending.audit_id
            self._request_event(request, pending, stage="ResponseStarted", response=response)

        async def on_cleanup(_: web.Application) -> None:
            self.close()

        app.on_response_prepare.append(on_prepare)
        app.on_cleanup.append(on_cleanup)

    # ------------------------------------------------------------ the hub's own writes

    def record_member_write(self, write: MemberWriteRecord, *, user: str = CONTROLLER_USER) -> None:
        """One write federator made to a member cluster (clusters/client.py's MemberWrite), at Metadata (or not at
        all when the policy says None for this user, verb and object): objectRef is the member object,
        annotations name the cluster and why."""
        attributes = auth.RequestAttributes(True, write.path, write.verb, write.group, write.version, write.resource,
                                            write.subresource, write.namespace, write.name)
        level, omit, _ = self.policy.decide(user=user, groups=CONTROLLER_GROUPS, attributes=attributes)
        if level == "None" or "ResponseComplete" in omit:
            return
        pending = _Pending(audit_id=str(uuid.uuid4()), received=write.started, attributes=attributes)
        event = self._event(pending, stage="ResponseComplete",
                            user={"username": user, "groups": list(CONTROLLER_GROUPS)}, request_uri=write.path,
                            source_ips=(), user_agent="federator", level="Metadata", now=time.time())
        status: dict[str, Any] = {"metadata": {}, "code": write.code}
        if write.code >= 300 or write.code == 0:
            status["status"] = "Failure"
            if write.reason:
                status["reason"] = write.reason
        event["responseStatus"] = status
        event["annotations"] = {CLUSTER_ANNOTATION: write.cluster, REASON_ANNOTATION: write.why}
        self._emit(event)


def _object_name(body: object) -> str:
    """metadata.name of a JSON object body ("" when there is none)."""
    if not isinstance(body, bytes) or not body or len(body) > MAX_LOGGED_OBJECT_BYTES:
        return ""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    meta = value.get("metadata") if isinstance(value, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _principal(request: web.Request) -> Principal | None:
    principal = request.get(auth.PRINCIPAL_KEY)
    return principal if principal is not None else request.get(PRINCIPAL_KEY)


def settings_from_flags(*, path: str | None, policy_file: str | None, max_size_mb: int, max_backups: int,
                        max_age_days: int) -> AuditLogSettings | None:
    """AuditLogSettings from the --audit-* flags (None without --audit-log-path); ValueError naming the flag."""
    for flag, value in (("--audit-log-maxsize", max_size_mb), ("--audit-log-maxbackup", max_backups),
                        ("--audit-log-maxage", max_age_days)):
        if value < 0:
            raise ValueError(f"{flag} {value}: must be 0 or more")
    if not path:
        if policy_file:
            raise ValueError("--audit-policy-file needs --audit-log-path (where to write the events)")
        return None
    try:
        policy = load_policy(policy_file) if policy_file else DEFAULT_POLICY
    except AuditPolicyError as e:
        raise ValueError(f"--audit-policy-file {e}") from None
    return AuditLogSettings(path=path, policy=policy, max_size_mb=max_size_mb, max_backups=max_backups,
                            max_age_days=max_age_days)


def open_audit_log(settings: AuditLogSettings, *, metrics: Metrics | None = None) -> AuditLog:
    """The AuditLog of `settings`; ValueError naming --audit-log-path when the file cannot be opened."""
    try:
        return AuditLog(settings, metrics=metrics)
    except OSError as e:
        raise ValueError(f"--audit-log-path {settings.path}: {e.strerror or e}") from None


def iter_events(path: str | os.PathLike[str]) -> Iterable[dict[str, Any]]:
    """The events of an audit file (tests and tools)."""
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                yield orjson.loads(line)

