"""Typed object access over a revisioned `Store`: the one implementation of
Kubernetes object semantics that both the HTTP handlers and in-process
controllers (the simulator's scheduler and kubelet, later the hub) use.

- resourceVersion is the store's mod_revision of the object's key (a string);
  it is not stored in the value but stamped on every read;
- create sets uid, creationTimestamp (RFC 3339, whole seconds), generation 1,
  drops server-owned fields and, for kinds with /status, the status;
- update is a compare-and-swap on resourceVersion (409 Conflict), keeps
  immutable metadata, bumps generation when anything outside metadata
  changed, and writes nothing when nothing changed;
- delete honours finalizers and graceful deletion (deletionTimestamp, then
  whoever owns the grace period finishes it); removing the last finalizer of
  a terminating object deletes it;
- list pages with limit/continue on one consistent revision; a compacted
  revision gives 410 Expired; once the watch cache runs (`start()`, or the
  first watch), lists are served from it by kube's rules (`_plan_list`): a
  consistent list waits until the cache has reached the store's current
  revision (when waiting adds no suspension point, see _list_cached) and
  reads the store itself when the cache cannot show that in time;
- watch fans one store watch out to all watchers (watchcache).

Key layout: <store prefix>registry/<group or "core">/<plural>/<namespace or "_">/<name>.

INTERFACE NOTES for other helpers (changes against notes-apiserver-iface.md):
- `ResourceType.graceful_delete` is a GracePolicy callable (obj, requested
  grace seconds | None) -> effective seconds, not a bool;
- validators return FieldError objects or (field, message) pairs;
- `delete()` returns the deleted or terminating object; `delete_ex()` also
  says whether it is gone;
- write methods take `dry_run: bool = False` (keyword);
- objects returned by get/list/watch are fresh dicts: callers may mutate them;
- call `await storage.start()` once (SimCluster does, from its cleanup_ctx)
  to start the watch cache early, and `await storage.close()` at the end.

This module must never import aiohttp, the simulator or the hub.
"""

from __future__ import annotations

import asyncio
import copy
import base64
import datetime as dt
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from federator.apis.views import Body
from federator.apiserver import errors, managedfields, ssa
from federator.apiserver.errors import ApiError, FieldError, FieldErrorLike
from federator.apiserver.fieldvalidation import FieldValidation
from federator.apiserver.patch import (
    APPLY_PATCH,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    PatchApplyError,
    PatchError,
    accepted_patch_types,
    apply_patch,
)
from federator.apiserver.registry import JSONObject, Registry, ResourceType
from federator.apiserver.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from federator.apis.common import dns1123_label_errors, dns1123_subdomain_errors, label_key_errors, label_value_errors
from federator.apis.timestamps import format_time
from federator.apiserver.watchcache import CachedEvent, FeedReset, ResourceFeed, WatchCache, follow
from federator.obs import RepeatedFailureLog, get_logger
from federator.store.protocol import (
    Compacted,
    Compare,
    Delete,
    FutureRevision,
    Get,
    KeyExists,
    Put,
    Store,
    ValueTooLarge,
)

_log = get_logger("apiserver.storage")

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SERVER_OWNED_META = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "generation", "selfLink", "managedFields")
_MAX_ANNOTATIONS_BYTES = 256 * 1024
#: attempts of a read-modify-write before a lost race is the caller's 409 (`retry_on_conflict`)
_UPDATE_RETRIES = 16
#: kube-apiserver's --request-timeout: how long a patch or an apply without a deadline of its own
#: retries a lost race before it is a 504 Timeout (the API passes the request's, `?timeout=`)
REQUEST_TIMEOUT_SECONDS = 60.0
_T = TypeVar("_T")

PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)


def resource_key_prefix(store_prefix: str, rt: ResourceType) -> str:
    """The store keys of every object of `rt` start with this (see the key layout above)."""
    return f"{store_prefix}registry/{rt.storage_path}/"


@dataclass(frozen=True, slots=True)
class ObjectList:
    items: list[JSONObject]
    resource_version: str
    continue_token: str | None = None
    remaining: int | None = None


@dataclass(frozen=True, slots=True)
class _ListPlan:
    """Where one list is served from (see ObjectStorage._plan_list)."""

    #: from the watch cache, once it has reached `min_revision`
    cached: bool
    #: the cache must first reach the store's current revision (resourceVersion unset)
    consistent: bool = False
    min_revision: int = 0
    #: reading the store's revision for `min_revision` let the event loop run (see _list_cached)
    may_wait: bool = False
    #: whether the cache applies `limit` (kube's cacher ignores it for resourceVersion="0")
    cache_limit: bool = True
    #: from the store: at this revision (None: the current one), after this key,
    #: with this many items on earlier pages
    revision: int | None = None
    start_after: str | None = None
    skipped: int = 0


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK"
    object: JSONObject


@dataclass(frozen=True, slots=True)
class DeleteResult:
    object: JSONObject
    #: True when the object is gone; False while it is terminating (grace
    #: period or finalizers pending).
    deleted: bool


Mutator = Callable[[JSONObject], "JSONObject | None"]
# Aliases so that annotations inside ObjectStorage (which has a `list`
# method) do not resolve `list` to that method.
_Batch = list[tuple[str, "CachedEvent | JSONObject"]]
_PatchBody = bytes | JSONObject | list[Any]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _copy(obj: Any) -> Any:
    return orjson.loads(orjson.dumps(obj))


def _encode(obj: JSONObject) -> bytes:
    """Serialize for the store, without metadata.resourceVersion (the store's
    mod_revision is the resourceVersion)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "resourceVersion" in meta:
        stored = dict(obj)
        stored["metadata"] = {k: v for k, v in meta.items() if k != "resourceVersion"}
        return orjson.dumps(stored)
    return orjson.dumps(obj)


def _decode(value: bytes, revision: int) -> JSONObject:
    obj: JSONObject = orjson.loads(value)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    meta["resourceVersion"] = str(revision)
    return obj


def _same_ignoring_rv(a: JSONObject, b: JSONObject) -> bool:
    if a.keys() != b.keys():
        return False
    for k, v in a.items():
        if k == "metadata":
            ma, mb = v or {}, b.get(k) or {}
            if {x: y for x, y in ma.items() if x != "resourceVersion"} != \
                    {x: y for x, y in mb.items() if x != "resourceVersion"}:
                return False
        elif v != b[k]:
            return False
    return True


def _outside_metadata(obj: JSONObject) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}


#: Deepest nesting accepted in a request body (orjson encodes at most 254 levels).
MAX_NESTING_DEPTH = 100


def check_nesting(value: Any, *, limit: int = MAX_NESTING_DEPTH) -> None:
    """400 for a document nested deeper than `limit` (iterative: hostile
    input must not exhaust the stack)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            raise errors.bad_request(f"the request body is nested more than {limit} levels deep")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def parse_resource_version(value: str | None, *, what: str = "resourceVersion") -> int | None:
    """None for unset/"", the int otherwise; 400 for a non-numeric value."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not value.isdigit() or len(value) > 19:
        raise errors.bad_request(f"invalid {what}: {value!r}: must be a non-negative integer string")
    return int(value)


# ---------------------------------------------------------------- continue tokens


def encode_continue(revision: int, start_after: str, *, consumed: int = 0) -> str:
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": start_after, "n": consumed})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str, int]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = orjson.loads(base64.urlsafe_b64decode(padded.encode()))
        rv, start, consumed = data["rv"], data["start"], data.get("n", 0)
        if data.get("v") != "meta.k8s.io/v1" or not isinstance(rv, int) or not isinstance(start, str):
            raise ValueError("unexpected content")
        if isinstance(rv, bool) or rv < 1 or not start or start.startswith("/") or ".." in start.split("/"):
            raise ValueError("unexpected content")
        if not isinstance(consumed, int) or isinstance(consumed, bool) or consumed < 0:
            raise ValueError("unexpected content")
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as e:
        raise errors.bad_request(f"continue key is not valid: {e}") from None
    return rv, start, consumed


_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)


# ---------------------------------------------------------------- metadata checks


def _name_errors(name: str, fmt: str, field: str = "metadata.name") -> list[FieldError]:
    """kube's ObjectMeta name check: one Invalid cause per problem ("label": a DNS-1123 label, else a
    DNS-1123 subdomain)."""
    problems = dns1123_label_errors(name) if fmt == "label" else dns1123_subdomain_errors(name)
    return [FieldError.invalid(field, name, why) for why in problems]


def validate_metadata(meta: Any) -> list[FieldError]:
    """Type and syntax checks of the user-settable ObjectMeta fields."""
    if not isinstance(meta, dict):
        return [FieldError.wrong_type("metadata", meta, "an object")]
    errs: list[FieldError] = []
    for field in ("name", "generateName", "namespace"):
        v = meta.get(field)
        if v is not None and not isinstance(v, str):
            errs.append(FieldError.wrong_type(f"metadata.{field}", v, "a string"))
    for field in ("labels", "annotations"):
        m = meta.get(field)
        if m is None:
            continue
        if not isinstance(m, dict):
            errs.append(FieldError.wrong_type(f"metadata.{field}", m, "a map of string to string"))
            continue
        for k, v in m.items():
            if not isinstance(v, str):
                errs.append(FieldError.wrong_type(f"metadata.{field}.{k}", v, "a string"))
                continue
            errs += [FieldError.invalid(f"metadata.{field}", k, why) for why in label_key_errors(k)]
            if field == "labels":
                errs += [FieldError.invalid(f"metadata.labels.{k}", v, why) for why in label_value_errors(v)]
        if field == "annotations" and sum(len(k) + len(v) for k, v in m.items() if isinstance(v, str)) \
                > _MAX_ANNOTATIONS_BYTES:
            errs.append(FieldError("metadata.annotations", "FieldValueTooLong",
                                   f"must have at most {_MAX_ANNOTATIONS_BYTES} bytes"))
    fin = meta.get("finalizers")
    if fin is not None:
        if not isinstance(fin, list):
            errs.append(FieldError.wrong_type("metadata.finalizers", fin, "a list of strings"))
        else:
            for i, f in enumerate(fin):
                if not isinstance(f, str):
                    errs.append(FieldError.wrong_type(f"metadata.finalizers[{i}]", f, "a string"))
                else:
                    errs += [FieldError.invalid(f"metadata.finalizers[{i}]", f, why) for why in label_key_errors(f)]
    owners = meta.get("ownerReferences")
    if owners is not None:
        if not isinstance(owners, list):
            errs.append(FieldError.wrong_type("metadata.ownerReferences", owners, "a list"))
        else:
            controllers = 0
            for i, ref in enumerate(owners):
                path = f"metadata.ownerReferences[{i}]"
                if not isinstance(ref, dict):
                    errs.append(FieldError.wrong_type(path, ref, "an object"))
                    continue
                for req in ("apiVersion", "kind", "name", "uid"):
                    v = ref.get(req)
                    if v is None or v == "":
                        errs.append(FieldError.required(f"{path}.{req}"))
                    elif not isinstance(v, str):
                        errs.append(FieldError.wrong_type(f"{path}.{req}", v, "a string"))
                for flag in ("controller", "blockOwnerDeletion"):
                    v = ref.get(flag)
                    if v is not None and not isinstance(v, bool):
                        errs.append(FieldError.wrong_type(f"{path}.{flag}", v, "a boolean"))
                if ref.get("controller") is True:
                    controllers += 1
            if controllers > 1:
                errs.append(FieldError.invalid("metadata.ownerReferences", "", "Only one reference can have Controller set to true"))
    return errs


#: A write's field validation: kube's directive ("Strict", "Warn", "Ignore") or the request's
#: FieldValidation (with what decoding its body found); None for in-process writes.
FieldValidationArg = FieldValidation | str | None


def _collect_warnings(rt: ResourceType, obj: JSONObject, field_validation: FieldValidationArg) -> None:
    """The kind's warnings about a written body (`ResourceType.warn`, e.g. a deprecated field), kept on the
    request's FieldValidation for the `Warning` headers; in-process writes (no FieldValidation) have none."""
    if rt.warn is not None and isinstance(field_validation, FieldValidation):
        field_validation.warnings.extend(rt.warn(obj))


def _drop_unknown_fields(rt: ResourceType, obj: JSONObject, field_validation: FieldValidationArg,
                         name: str = "") -> None:
    """kube's server-side field validation (fieldvalidation.py): Strict refuses
    unknown and repeated fields, Warn and Ignore drop unknown ones (Warn says
    so); None (in-process writes) skips it."""
    if field_validation is None:
        return
    if isinstance(field_validation, str):
        field_validation = FieldValidation(field_validation)
    field_validation.check(rt, obj, name=name)


def _check_type_meta(rt: ResourceType, obj: JSONObject) -> None:
    """Fill a missing apiVersion/kind (in-process callers) and refuse a wrong one."""
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    if api_version in (None, ""):
        obj["apiVersion"] = rt.api_version
    elif api_version != rt.api_version:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})"
        )
    if kind in (None, ""):
        obj["kind"] = rt.kind
    elif kind != rt.kind:
        raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")


def _gvk_text(api_version: Any, kind: Any) -> str:
    """A GroupVersionKind as Go prints it: `federator.dev/v1alpha1, Kind=TrainingJob`, `/v1, Kind=Pod`."""
    gv = api_version if isinstance(api_version, str) else ""
    group, _, version = gv.rpartition("/") if "/" in gv else ("", "", gv)
    return f"{group}/{version}, Kind={kind if isinstance(kind, str) else ''}"


def _merge_invalid(rt: ResourceType, name: str, error: ssa.MergeError) -> ApiError:
    """A keyed list the apply merge refuses (duplicates, items without their keys): 422."""
    return errors.invalid(rt, name, [FieldError(ssa.path_string(error.path).lstrip(".") or "<root>",
                                                "FieldValueInvalid", error.detail)])


# ---------------------------------------------------------------- storage


@dataclass(slots=True)
class _CacheShare:
    """An ObjectStorage's watch cache and its bookkeeping, shared with its `writing_through` views."""

    store: Store
    failures: RepeatedFailureLog
    cache: WatchCache | None = None
    #: lists use the cache once it was started (start() or a watch)
    in_use: bool = False
    fallbacks: dict[str, int] = field(default_factory=dict)


class ObjectStorage:
    """Kubernetes object semantics over one Store (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        watch_cache_events: int = 1024,
        clock: Callable[[], dt.datetime] = utc_now,
        enforce_namespaces: bool | None = None,
        autoprovision_namespaces: bool = False,
        consistent_read_timeout: float = 1.0,
    ) -> None:
        """`consistent_read_timeout`: how long a list waits for the watch
        cache to reach the revision it needs before it reads the store
        instead (kube's cacher waits up to 3 s, then falls back to etcd for
        consistent reads); it waits only where reading the store's revision
        already let the event loop run (see _list_cached)."""
        self.store = store
        self.registry = registry
        self._clock = clock
        self._watch_cache_events = watch_cache_events
        self._consistent_read_timeout = consistent_read_timeout
        #: the watch cache and its bookkeeping; shared with views from `writing_through`
        self._share = _CacheShare(store=store, failures=RepeatedFailureLog(
            _log, "watch cache stopped (store unavailable?); lists and watches read the store until it is back",
            store_prefix=store.prefix))
        #: False for a view: closing it leaves the shared cache running
        self._owns_cache = True
        self._closed = False
        self._namespace_rt = registry.get("", "v1", "namespaces")
        if enforce_namespaces is None:
            enforce_namespaces = self._namespace_rt is not None
        self._enforce_namespaces = enforce_namespaces and self._namespace_rt is not None
        #: kube's NamespaceAutoProvision instead of refusing a create in a missing namespace
        self._autoprovision_namespaces = autoprovision_namespaces
        self._root = f"{store.prefix}registry/"

    # ------------------------------------------------------------ keys

    def collection_prefix(self, rt: ResourceType, namespace: str | None = None) -> str:
        base = resource_key_prefix(self.store.prefix, rt)
        if not rt.namespaced:
            return base + "_/"
        if namespace:
            return f"{base}{namespace}/"
        return base

    def object_key(self, rt: ResourceType, namespace: str | None, name: str) -> str:
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            raise errors.not_found(rt, str(name))
        if rt.namespaced:
            if not namespace or "/" in namespace:
                raise errors.bad_request(f"a namespace is required for {rt.qualified_resource}")
            return f"{self._root}{rt.storage_path}/{namespace}/{name}"
        return f"{self._root}{rt.storage_path}/_/{name}"

    def _now(self) -> str:
        return format_time(self._clock())

    # ------------------------------------------------------------ reads

    async def get(self, rt: ResourceType, *, namespace: str | None, name: str) -> JSONObject:
        key = self.object_key(rt, namespace, name)
        kv = await self.store.get(key)
        if kv is None:
            raise errors.not_found(rt, name)
        return _decode(kv.value, kv.mod_revision)

    async def current_resource_version(self) -> str:
        return str(await self.store.current_revision())

    async def list(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
        limit: int = 0,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> ObjectList:
        lsel, fsel = self.parse_selectors(rt, label_selector, field_selector)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise errors.bad_request(f"limit must be a non-negative integer, not {limit!r}")
        plan = await self._plan_list(
            rt, limit=limit, continue_token=continue_token,
            resource_version=resource_version, resource_version_match=resource_version_match,
        )
        if rt.namespaced and not namespace:
            namespace = fsel.single_value("metadata.namespace") or None
        prefix = self.collection_prefix(rt, namespace)
        single = fsel.single_value("metadata.name")
        if single is not None and not (namespace or not rt.namespaced):
            single = None  # across namespaces: a name is not one key
        revision, start_after, skipped = plan.revision, plan.start_after, plan.skipped
        if plan.cached:
            listing = await self._list_cached(rt, plan, prefix=prefix, single=single, lsel=lsel, fsel=fsel,
                                              limit=limit)
            if listing is not None:
                return listing
            revision, start_after, skipped = None, None, 0  # the store's current state satisfies every cached plan
        if single is not None and start_after is None:
            return await self._list_single(rt, prefix, single, revision, lsel, fsel)
        items: list[JSONObject] = []
        last_key: str | None = None
        more = False
        filtering = not (lsel.empty and fsel.empty)
        rel_start = prefix + start_after if start_after is not None else None
        count: int | None = None
        while True:
            want = 0 if limit == 0 else (limit - len(items)) * (4 if filtering else 1)
            try:
                rr = await self.store.range(prefix, limit=want, start_after=rel_start, revision=revision)
            except Compacted:
                if continue_token:
                    raise errors.expired(_CONTINUE_EXPIRED) from None
                raise errors.expired("The resourceVersion for the provided list is too old.") from None
            except FutureRevision as e:
                raise errors.timeout(f"Too large resource version: {e.requested}, current: {e.current}",
                                     retry_after_seconds=1) from None
            revision = rr.revision
            if count is None:
                count = rr.count
            stopped_at: int | None = None
            for i, kv in enumerate(rr.kvs):
                obj = _decode(kv.value, kv.mod_revision)
                if filtering and not (lsel.matches(Body(obj).labels) and fsel.matches(obj)):
                    continue
                items.append(obj)
                if limit and len(items) >= limit:
                    stopped_at = i
                    break
            if stopped_at is not None:
                last_key = rr.kvs[stopped_at].key
                more = stopped_at < len(rr.kvs) - 1 or rr.more
                break
            if not rr.more or not rr.kvs:
                break
            rel_start = rr.kvs[-1].key
        token = None
        remaining = None
        if more and last_key is not None:
            consumed = skipped + len(items)
            token = encode_continue(revision, last_key[len(prefix):], consumed=consumed)
            if not filtering and count is not None:
                remaining = max(0, count - consumed)
        return ObjectList(items=items, resource_version=str(revision), continue_token=token, remaining=remaining)

    async def _list_single(
        self, rt: ResourceType, prefix: str, name: str, revision: int | None,
        lsel: LabelSelector, fsel: FieldSelector,
    ) -> ObjectList:
        key = prefix + name
        if "/" in name:
            return ObjectList(items=[], resource_version=await self.current_resource_version())
        try:
            rr = await self.store.range(key, limit=1, revision=revision)
        except Compacted:
            raise errors.expired("The resourceVersion for the provided list is too old.") from None
        except FutureRevision as e:
            raise errors.timeout(f"Too large resource version: {e.requested}, current: {e.current}",
                                 retry_after_seconds=1) from None
        items = []
        if rr.kvs and rr.kvs[0].key == key:
            obj = _decode(rr.kvs[0].value, rr.kvs[0].mod_revision)
            if lsel.matches(Body(obj).labels) and fsel.matches(obj):
                items.append(obj)
        return ObjectList(items=items, resource_version=str(rr.revision))

    async def _list_cached(
        self, rt: ResourceType, plan: _ListPlan, *, prefix: str, single: str | None,
        lsel: LabelSelector, fsel: FieldSelector, limit: int,
    ) -> ObjectList | None:
        """The list from the watch cache, or None when the cache is not in use
        or cannot show within the timeout that it reached the revision the
        plan needs (the caller then reads the store)."""
        if self._closed or not self._share.in_use:
            return None
        feed = self.feed(rt)
        # kube (delegator.go GetList): a consistent read asks the store for
        # its current revision (one cheap read, no objects), then waits for
        # the cache to reach it.
        if plan.consistent:
            target, may_wait = await self._current_revision()
        else:
            target, may_wait = plan.min_revision, plan.may_wait
        # Wait only if that read already let the loop run (etcd's does, a
        # network round trip during which the cache takes in what it has been
        # sent). Against an in-process store (memory, sqlite) the read
        # returns at once, a cache that is behind is only waiting for its turn
        # on the loop, and waiting for it would add a suspension point that
        # in-process callers never had (a controller's write-then-list would
        # let every other task run in between): there the store is read
        # instead, no slower than the wait.
        timeout = self._consistent_read_timeout if may_wait else 0.0
        if not await feed.wait_fresh(target, timeout):
            if timeout:
                self._note_fallback(feed, target)
            return None
        self._cache_works()
        # Nothing below awaits: the state read is the state at `revision`.
        revision = feed.last_revision
        if single is not None:
            items: list[JSONObject] = []
            entry = feed.entry(prefix + single)
            if entry is not None:
                obj = _decode(entry[0], entry[1])
                if lsel.matches(Body(obj).labels) and fsel.matches(obj):
                    items.append(obj)
            return ObjectList(items=items, resource_version=str(revision))
        entries = feed.entries(prefix)
        filtering = not (lsel.empty and fsel.empty)
        cap = limit if plan.cache_limit else 0
        items = []
        last_key: str | None = None
        for i, (key, (value, mod_revision)) in enumerate(entries):
            obj = _decode(value, mod_revision)
            if filtering and not (lsel.matches(Body(obj).labels) and fsel.matches(obj)):
                continue
            items.append(obj)
            if cap and len(items) >= cap:
                if i < len(entries) - 1:
                    last_key = key
                break
        token = None
        remaining = None
        if last_key is not None:
            # The next pages are read from the store at exactly this revision
            # (kube: continue is served by etcd at the token's revision).
            token = encode_continue(revision, last_key[len(prefix):], consumed=len(items))
            if not filtering:
                remaining = len(entries) - len(items)
        return ObjectList(items=items, resource_version=str(revision), continue_token=token, remaining=remaining)

    async def _current_revision(self) -> tuple[int, bool]:
        """The store's current revision, and whether reading it let the event
        loop run (a callback queued before the read has run only if it did)."""
        ran: list[bool] = []
        handle = asyncio.get_running_loop().call_soon(ran.append, True)
        try:
            revision = await self.store.current_revision()
        finally:
            handle.cancel()
        return revision, bool(ran)

    def _note_fallback(self, feed: ResourceFeed, target: int) -> None:
        """Log the first fallback of a resource in full, then one line per 1000."""
        count = self._share.fallbacks.get(feed.prefix, 0) + 1
        self._share.fallbacks[feed.prefix] = count
        if count == 1 or count % 1000 == 0:
            _log.info("list read the store: the watch cache did not show it had reached the revision in time "
                      "(cache restarting or down, or something else writes to this store's etcd outside its "
                      "prefix)", resource=feed.name, needed_revision=target, cache_revision=feed.last_revision,
                      cache_ready=feed.ready, timeout_s=self._consistent_read_timeout, fallbacks=count)

    async def _plan_list(
        self, rt: ResourceType, *, limit: int, continue_token: str | None,
        resource_version: str | None, resource_version_match: str | None,
    ) -> _ListPlan:
        """Where a list is served from: kube v1.33's rules, i.e.
        AS/pkg/storage/cacher/delegator.go `shouldDelegateList` (what goes to
        etcd) and AS/pkg/storage/cacher/cacher.go `computeListLimit` (the
        cacher ignores limit for resourceVersion="0"), with the semantics of
        CONCEPTS §Semantics for get and list:

        | request (no continue unless said)          | semantics      | served from                          |
        |--------------------------------------------|----------------|--------------------------------------|
        | continue=<token>                           | exact (token)  | store, at the token's revision       |
        | resourceVersionMatch=Exact, RV=N           | exact          | store, at N                          |
        | RV=N with limit, no resourceVersionMatch   | exact (legacy) | store, at N                          |
        | RV unset, with or without limit            | most recent    | cache, once it reached the store's   |
        |                                            |                | current revision; limit applied      |
        | RV="0", match unset or NotOlderThan        | any            | cache as it is; limit ignored        |
        | RV=N, NotOlderThan (limit or not), or      | not older than | cache, once it reached N; limit      |
        |   RV=N without limit or match              |                | applied                              |

        "Most recent" from the cache is kube's ConsistentListFromCache (on by
        default since v1.31 wherever etcd answers progress requests; before
        that, and without them, kube reads etcd). Where our cache cannot show
        in time that it reached the revision (see watchcache), the list reads
        the store, as kube's delegator falls back to etcd for consistent reads.
        Before the cache runs, and after close(), every list reads the store.
        A resourceVersion newer than the store's is 504 at once (kube waits
        ~3 s for its cache first). When a list may wait for the cache: see
        _list_cached."""
        rv = parse_resource_version(resource_version)
        if resource_version_match not in (None, "", "Exact", "NotOlderThan"):
            raise errors.invalid(rt, "", [FieldError.not_supported(
                "resourceVersionMatch", resource_version_match, ["Exact", "NotOlderThan"])])
        if continue_token:
            if rv not in (None, 0):
                raise errors.bad_request("specifying resource version is not allowed when using continue")
            if resource_version_match:
                raise errors.invalid(rt, "", [FieldError.forbidden(
                    "resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided")])
            revision, start_after, skipped = decode_continue(continue_token)
            return _ListPlan(cached=False, revision=revision, start_after=start_after, skipped=skipped)
        if resource_version_match:
            if rv is None:
                raise errors.invalid(rt, "", [FieldError.forbidden(
                    "resourceVersionMatch", "resourceVersionMatch is forbidden unless resourceVersion is provided")])
            if resource_version_match == "Exact":
                if rv == 0:
                    raise errors.invalid(rt, "", [FieldError.forbidden(
                        "resourceVersionMatch", 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"')])
                return _ListPlan(cached=False, revision=rv)
        if rv is None:
            return _ListPlan(cached=True, consistent=True)
        if rv == 0:
            return _ListPlan(cached=True, cache_limit=False)
        current, yielded = await self._current_revision()
        if rv > current:
            raise errors.timeout(f"Too large resource version: {rv}, current: {current}", retry_after_seconds=1)
        if limit and not resource_version_match:
            return _ListPlan(cached=False, revision=rv)  # kube: resourceVersion=N with limit and no continue reads exactly at N
        return _ListPlan(cached=True, min_revision=rv, may_wait=yielded)

    def parse_selectors(
        self, rt: ResourceType, label_selector: str | LabelSelector | None,
        field_selector: str | FieldSelector | None,
    ) -> tuple[LabelSelector, FieldSelector]:
        try:
            lsel = label_selector if isinstance(label_selector, LabelSelector) else parse_label_selector(label_selector)
            fsel = field_selector if isinstance(field_selector, FieldSelector) else parse_field_selector(
                field_selector, rt.field_selectors, resource=rt.qualified_resource,
                label_selector=label_selector if isinstance(label_selector, str) else "",
            )
        except SelectorError as e:
            raise errors.bad_request(str(e)) from None
        return lsel, fsel

    # ------------------------------------------------------------ create

    async def _check_namespace(self, rt: ResourceType, namespace: str, *, dry_run: bool = False) -> None:
        """kube's NamespaceLifecycle admission (a create in a missing namespace: 404; in a Terminating one:
        403), or NamespaceAutoProvision (the missing namespace is created first) when the storage was built
        with autoprovision_namespaces."""
        if not self._enforce_namespaces or not rt.namespaced:
            return
        ns_rt = self._namespace_rt
        assert ns_rt is not None
        kv = await self.store.get(self.object_key(ns_rt, None, namespace))
        if kv is None and self._autoprovision_namespaces and _name_errors(namespace, "label", "metadata.namespace"):
            return  # no such namespace can be made: the create's validation names metadata.namespace (422)
        if kv is None and self._autoprovision_namespaces and not dry_run:
            try:
                await self.create(ns_rt, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                                  namespace=None)
            except ApiError as e:
                if e.code != 409:
                    raise
            kv = await self.store.get(self.object_key(ns_rt, None, namespace))
        if kv is None:
            if self._autoprovision_namespaces and dry_run:
                return  # a dry run creates nothing; the real create would provision the namespace
            raise errors.not_found(ns_rt, namespace)
        ns = orjson.loads(kv.value)
        if Body(ns).deleting:
            raise errors.forbidden(
                rt, Body(ns).name,
                f"unable to create new content in namespace {namespace} because it is being terminated",
            )

    def prepare_create(
        self, rt: ResourceType, obj: Any, *, namespace: str | None, field_validation: FieldValidationArg = None,
        field_manager: str | None = None,
    ) -> JSONObject:
        """The object as it will be stored (without name generation), or ApiError. With
        `field_manager`, kinds that keep managedFields get an Update entry for it."""
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the body of a {rt.kind} must be a JSON object")
        check_nesting(obj)
        new: JSONObject = _copy(obj)
        _check_type_meta(rt, new)
        _drop_unknown_fields(rt, new, field_validation)
        _collect_warnings(rt, new, field_validation)
        meta = new.get("metadata")
        if meta is None:
            meta = new["metadata"] = {}
        meta_errs = validate_metadata(meta)
        if meta_errs:
            name = meta.get("name") if isinstance(meta, dict) and isinstance(meta.get("name"), str) else ""
            raise errors.invalid(rt, name or "", meta_errs)
        if meta.get("resourceVersion") not in (None, ""):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if namespace is None:
                namespace = body_ns or None
            if not namespace:
                raise errors.bad_request(f"a namespace is required to create {rt.qualified_resource}")
            if body_ns not in (None, "", namespace):
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        request_fields = meta.get("managedFields", managedfields.NOT_SENT)
        for field in _SERVER_OWNED_META:
            meta.pop(field, None)
        if not meta.get("name") and not meta.get("generateName"):
            raise errors.invalid(rt, "", [FieldError.required("metadata.name", "name or generateName is required")])
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self._now()
        meta["generation"] = 1
        if rt.drops_status_on_create:
            new.pop("status", None)
        if rt.defaults is not None:
            rt.defaults(new)
        # before create_defaults: what the server adds on create is nobody's (kube's admission runs later)
        self._track_update(rt, None, new, request_fields=request_fields, manager=field_manager, subresource=None)
        if rt.create_defaults is not None:
            rt.create_defaults(new)
        return new

    def _validate(self, rt: ResourceType, obj: JSONObject, old: JSONObject | None = None, *,
                  trusted: bool = False) -> None:
        meta = obj["metadata"]
        name = meta.get("name", "")
        errs: list[FieldErrorLike] = []
        if name:
            errs += _name_errors(name, rt.name_format)
        if rt.validate is not None and not trusted:
            errs.extend(rt.validate(obj))
        if old is not None and rt.validate_update is not None:
            errs.extend(rt.validate_update(obj, old))
        if errs:
            raise errors.invalid(rt, name, errs)

    async def create(
        self, rt: ResourceType, obj: JSONObject, *, namespace: str | None, dry_run: bool = False,
        field_validation: FieldValidationArg = None, field_manager: str | None = None,
    ) -> JSONObject:
        """Create `obj`. `field_validation` (as the HTTP query parameter:
        "Strict", "Warn", "Ignore") handles unknown fields; None (in-process
        callers) leaves them alone. `field_manager` (API requests) is the
        writer recorded in managedFields; in-process writes are not recorded."""
        new = self.prepare_create(rt, obj, namespace=namespace, field_validation=field_validation,
                                  field_manager=field_manager)
        return await self._create_prepared(rt, new, dry_run=dry_run)

    async def _create_prepared(self, rt: ResourceType, new: JSONObject, *, dry_run: bool) -> JSONObject:
        meta = new["metadata"]
        ns = meta.get("namespace")
        if ns:
            # A namespace that cannot exist: 404 where namespaces are objects (kube's NamespaceLifecycle
            # admission answers first), else 422 on metadata.namespace (kube's ObjectMeta validation).
            await self._check_namespace(rt, ns, dry_run=dry_run)
            ns_errors = _name_errors(ns, "label", "metadata.namespace")
            if ns_errors:
                raise errors.invalid(rt, meta.get("name") or "", ns_errors)
        if rt.admit_create is not None:
            await rt.admit_create(self, new)
        generate = not meta.get("name")
        for attempt in range(8):
            if generate:
                prefix = meta["generateName"]
                meta["name"] = prefix + "".join(random.choices(_GENERATE_ALPHABET, k=5))
                if attempt == 0:
                    gen_errors = _name_errors(prefix + "a", rt.name_format, "metadata.generateName")
                    if gen_errors:
                        raise errors.invalid(rt, "", gen_errors)
            self._validate(rt, new)
            key = self.object_key(rt, ns, meta["name"])
            value = _encode(new)
            if dry_run:
                if await self.store.get(key) is not None:
                    if generate:
                        continue
                    raise errors.already_exists(rt, meta["name"])
                return new
            try:
                kv = await self.store.create(key, value)
            except KeyExists:
                if generate:
                    continue
                raise errors.already_exists(rt, meta["name"]) from None
            except ValueTooLarge as e:
                raise errors.too_large(e.limit) from None
            meta["resourceVersion"] = str(kv.mod_revision)
            return new
        raise errors.already_exists(rt, meta["name"])

    # ------------------------------------------------------------ update

    async def _admit_update(self, rt: ResourceType, new: JSONObject, old: JSONObject, *,
                            subresource: str | None) -> None:
        if rt.admit_update is not None and subresource is None:
            await rt.admit_update(self, new, old)

    def _prepare_update(
        self, rt: ResourceType, obj: JSONObject, old: JSONObject, *, subresource: str | None,
        field_validation: FieldValidationArg = None, trusted_status: bool = False,
    ) -> JSONObject:
        old_meta = old["metadata"]
        if subresource == "status":
            if not rt.status_subresource:
                raise errors.not_found(None, "status", resource=f"{rt.qualified_resource}/status")
            new: JSONObject = _copy(old)
            if "status" in obj:
                new["status"] = _copy(obj["status"])
            else:
                new.pop("status", None)
            _drop_unknown_fields(rt, new, field_validation, old_meta.get("name", ""))
            if rt.defaults is not None:
                rt.defaults(new)
            self._validate(rt, new, old, trusted=trusted_status)
            return new
        if subresource is not None:
            strategy = rt.subresource_strategies.get(subresource)
            if strategy is None:
                raise errors.not_found(None, subresource, resource=f"{rt.qualified_resource}/{subresource}")
            new = strategy(_copy(obj), _copy(old))
            for field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                          "generation", "name", "namespace", "finalizers"):
                if field in old_meta:
                    new["metadata"][field] = old_meta[field]
            if rt.defaults is not None:
                rt.defaults(new)
            self._validate(rt, new, None)
            return new
        new = _copy(obj)
        _check_type_meta(rt, new)
        _drop_unknown_fields(rt, new, field_validation, old_meta.get("name", ""))
        _collect_warnings(rt, new, field_validation)
        meta = new.get("metadata")
        meta_errs = validate_metadata(meta)
        if meta_errs:
            raise errors.invalid(rt, old_meta.get("name", ""), meta_errs)
        assert isinstance(meta, dict)
        for field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "generation", "name", "namespace"):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        for field in ("selfLink", "managedFields"):
            meta.pop(field, None)
        if rt.status_subresource:
            if "status" in old:
                new["status"] = _copy(old["status"])
            else:
                new.pop("status", None)
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise errors.invalid(rt, old_meta.get("name", ""), [FieldError.forbidden(
                    "metadata.finalizers", f"no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers {sorted(added)!r}")])
        if rt.prepare_update is not None:
            new = rt.prepare_update(new, _copy(old))
            meta = new["metadata"]
        if rt.defaults is not None:
            rt.defaults(new)
        self._validate(rt, new, old)
        if _outside_metadata(new) != _outside_metadata(old):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        return new

    async def _write_update(
        self, rt: ResourceType, key: str, mod_revision: int, old: JSONObject, new: JSONObject, *, dry_run: bool
    ) -> JSONObject:
        """CAS-write `new` over the stored revision; raises Conflict on a lost race."""
        meta = new["metadata"]
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if _same_ignoring_rv(new, old):
            return old
        old_meta = old["metadata"]
        delete_now = (
            not meta.get("finalizers")
            and bool(old_meta.get("deletionTimestamp"))
            and not old_meta.get("deletionGracePeriodSeconds")
        )
        if dry_run:
            return new
        if delete_now:
            r = await self.store.txn([Compare(key, "mod", "=", mod_revision)], [Delete(key)], [Get(key)])
            if not r.succeeded:
                raise errors.conflict(rt, meta.get("name", ""))
            meta["resourceVersion"] = str(r.revision)
            return new
        try:
            r = await self.store.txn(
                [Compare(key, "mod", "=", mod_revision)], [Put(key, _encode(new))], [Get(key)]
            )
        except ValueTooLarge as e:
            raise errors.too_large(e.limit) from None
        if not r.succeeded:
            raise errors.conflict(rt, meta.get("name", ""))
        meta["resourceVersion"] = str(r.revision)
        return new

    async def update(
        self,
        rt: ResourceType,
        obj: JSONObject,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidationArg = None,
        field_manager: str | None = None,
    ) -> JSONObject:
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the body of a {rt.kind} must be a JSON object")
        check_nesting(obj)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise errors.invalid(rt, name or "", [FieldError.required("metadata")])
        body_name = meta.get("name")
        if name is None:
            name = body_name
        elif body_name not in (None, "") and body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        if not isinstance(name, str) or not name:
            raise errors.invalid(rt, "", [FieldError.required("metadata.name")])
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if namespace is None:
                namespace = body_ns
            elif body_ns not in (None, "") and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request")
        key = self.object_key(rt, namespace, name)
        kv = await self.store.get(key)
        if kv is None:
            raise errors.not_found(rt, name)
        rv = meta.get("resourceVersion")
        if rv in (None, ""):
            if not rt.allow_unconditional_update:
                raise errors.invalid(rt, name, [FieldError.invalid(
                    "metadata.resourceVersion", 0, "must be specified for an update")])
        else:
            if not isinstance(rv, str):
                raise errors.invalid(rt, name, [FieldError.wrong_type("metadata.resourceVersion", rv, "a string")])
            parse_resource_version(rv)
            if rv != str(kv.mod_revision):
                raise errors.conflict(rt, name)
        old = _decode(kv.value, kv.mod_revision)
        new = self._prepare_update(rt, obj, old, subresource=subresource, field_validation=field_validation)
        await self._admit_update(rt, new, old, subresource=subresource)
        self._track_update(rt, old, new, request_fields=meta.get("managedFields", managedfields.NOT_SENT),
                           manager=field_manager, subresource=subresource)
        return await self._write_update(rt, key, kv.mod_revision, old, new, dry_run=dry_run)

    async def guaranteed_update(
        self,
        rt: ResourceType,
        *,
        namespace: str | None,
        name: str,
        mutate: Mutator,
        subresource: str | None = None,
        trusted_status: bool = False,
    ) -> JSONObject | None:
        """Read, mutate, CAS-write; retry on conflict. `mutate` gets a fresh
        copy and returns the new object, or None to skip the write (the
        result is then None).

        `trusted_status` (with subresource="status", for in-process
        controllers only, never for a request body): skip the kind's full
        `validate` hook. A status write keeps the stored spec and metadata,
        which the API validated when they were written, and the status comes
        from the hub's own code; re-validating the whole object (pydantic)
        on every status write was the largest single cost of the hub's job
        lifecycle. `validate_update` and the name check still run."""
        key = self.object_key(rt, namespace, name)

        async def attempt() -> JSONObject | None:
            kv = await self.store.get(key)
            if kv is None:
                raise errors.not_found(rt, name)
            old = _decode(kv.value, kv.mod_revision)
            proposed = mutate(_decode(kv.value, kv.mod_revision))
            if proposed is None:
                return None
            new = self._prepare_update(rt, proposed, old, subresource=subresource,
                                       trusted_status=trusted_status and subresource == "status")
            await self._admit_update(rt, new, old, subresource=subresource)
            self._track_update(rt, old, new, manager=None, subresource=subresource)
            return await lost_race_on_conflict(self._write_update(rt, key, kv.mod_revision, old, new, dry_run=False))

        return await retry_on_conflict(attempt, what=f"conflict updating {rt.plural}/{name}")

    # ------------------------------------------------------------ patch

    def decode_patch(self, rt: ResourceType, patch: _PatchBody, content_type: str) -> Any:
        ct = content_type.split(";", 1)[0].strip().lower()
        if ct not in PATCH_TYPES or (ct == STRATEGIC_MERGE_PATCH and not rt.supports_strategic_merge):
            raise errors.unsupported_media(ct, accepted_patch_types(rt))
        if isinstance(patch, (bytes, bytearray, memoryview)):
            try:
                doc = orjson.loads(patch)
            except orjson.JSONDecodeError as e:
                raise errors.bad_request(f"error decoding patch: {e}") from None
        else:
            doc = patch
        check_nesting(doc)
        return doc

    async def patch(
        self,
        rt: ResourceType,
        *,
        namespace: str | None,
        name: str,
        patch: _PatchBody,
        content_type: str,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidationArg = None,
        field_manager: str | None = None,
        deadline: float | None = None,
    ) -> JSONObject:
        """Apply a JSON, merge or strategic merge patch kube's way (GuaranteedUpdate): each attempt
        applies the patch to the object as just read; a lost race is read and patched again until it
        lands or `deadline` (the loop's clock; default: `REQUEST_TIMEOUT_SECONDS` from now) passes, a
        504 Timeout. The only 409 is a failed precondition: a `metadata.resourceVersion` in the patch
        that is not the stored one."""
        doc = self.decode_patch(rt, patch, content_type)
        deadline = _deadline_or_default(deadline)
        ct = content_type.split(";", 1)[0].strip().lower()
        key = self.object_key(rt, namespace, name)

        async def attempt() -> JSONObject:
            kv = await self.store.get(key)
            if kv is None:
                raise errors.not_found(rt, name)
            old = _decode(kv.value, kv.mod_revision)
            current_rv = old["metadata"]["resourceVersion"]
            try:
                patched = apply_patch(_decode(kv.value, kv.mod_revision), doc, content_type=ct,
                                      schema=rt.strategic_merge)
            except PatchError as e:
                raise errors.bad_request(str(e)) from None
            except PatchApplyError as e:
                raise errors.ApiError(
                    422, "Invalid", f"the server rejected our request due to an error in our request: {e}"
                ) from None
            if not isinstance(patched, dict):
                raise errors.bad_request("the patched object is not a JSON object")
            pmeta = patched.get("metadata")
            if not isinstance(pmeta, dict):
                raise errors.invalid(rt, name, [FieldError.wrong_type("metadata", pmeta, "an object")])
            patched_rv = pmeta.get("resourceVersion")
            precondition = patched_rv not in (None, "") and patched_rv != current_rv
            if precondition:
                raise errors.conflict(rt, name)
            if pmeta.get("name") not in (None, name):
                raise errors.bad_request(
                    f"the name of the object ({pmeta.get('name')}) does not match the name on the URL ({name})")
            if rt.namespaced and pmeta.get("namespace") not in (None, namespace):
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request")
            pmeta["name"] = name
            pmeta["resourceVersion"] = current_rv
            request_fields = pmeta.get("managedFields", managedfields.NOT_SENT)
            new = self._prepare_update(rt, patched, old, subresource=subresource,
                                       field_validation=field_validation)
            await self._admit_update(rt, new, old, subresource=subresource)
            self._track_update(rt, old, new, request_fields=request_fields, manager=field_manager,
                               subresource=subresource)
            return await lost_race_on_conflict(self._write_update(rt, key, kv.mod_revision, old, new, dry_run=dry_run))

        return await retry_on_conflict(attempt, what=f"conflict patching {rt.plural}/{name}", attempts=None,
                                       deadline=deadline)

    # ------------------------------------------------------------ managedFields and server-side apply

    def _field_manager(self, rt: ResourceType, subresource: str | None) -> managedfields.FieldManager:
        return managedfields.field_manager_for(
            openapi_schema=rt.openapi_schema, api_version=rt.api_version, kind=rt.kind,
            subresource=subresource or "", status_subresource=rt.status_subresource)

    def _track_update(
        self, rt: ResourceType, old: JSONObject | None, new: JSONObject, *, manager: str | None,
        subresource: str | None, request_fields: Any = managedfields.NOT_SENT,
    ) -> None:
        """Set `new`'s managedFields for a non-apply write by `manager` (kube's Update). Kinds
        that keep none never store any; an in-process write (manager None) keeps the stored ones."""
        meta = new["metadata"]
        if not rt.managed_fields:
            meta.pop("managedFields", None)
            return
        if manager is None:
            kept = Body(old).managed_fields
            if kept:
                meta["managedFields"] = _copy(kept)
            else:
                meta.pop("managedFields", None)
            return
        entries = self._field_manager(rt, subresource).update(
            old, new, request_fields=request_fields, manager=manager, now=self._now())
        if entries:
            meta["managedFields"] = entries
        else:
            meta.pop("managedFields", None)

    async def apply(
        self,
        rt: ResourceType,
        *,
        namespace: str | None,
        name: str,
        config: Any,
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: Any = None,
        deadline: float | None = None,
    ) -> tuple[JSONObject, bool]:
        """Server-side apply (PATCH application/apply-patch+yaml) of `config` by `field_manager`,
        kube's way (managedfields.py): (the object as stored, whether it was created). Creates the
        object when it does not exist (not through a subresource); a conflict with another
        manager is a 409 unless `force`. A lost race is applied again until `deadline`, as `patch`."""
        deadline = _deadline_or_default(deadline)
        if not rt.managed_fields:
            raise errors.unsupported_media(APPLY_PATCH, accepted_patch_types(rt))
        if not isinstance(config, dict):
            raise errors.bad_request(
                f"error decoding patch: the apply configuration must be a {rt.kind} object, "
                f"not a JSON {type(config).__name__}")
        check_nesting(config)
        config = _copy(config)
        api_version, kind = config.get("apiVersion"), config.get("kind")
        if api_version != rt.api_version or kind != rt.kind:
            raise errors.bad_request(f"invalid object type: {_gvk_text(api_version, kind)}")
        meta = config.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise errors.invalid(rt, name, [FieldError.wrong_type("metadata", meta, "an object")])
        if isinstance(meta, dict) and meta.get("managedFields") is not None:
            raise errors.bad_request("metadata.managedFields must be nil")
        _drop_unknown_fields(rt, config, field_validation)
        fm = self._field_manager(rt, subresource)
        try:
            ssa.check_keys(config, fm.atom)
        except ssa.MergeError as e:
            raise _merge_invalid(rt, name, e) from None
        key = self.object_key(rt, namespace, name)

        async def attempt() -> tuple[JSONObject, bool]:
            kv = await self.store.get(key)
            old = _decode(kv.value, kv.mod_revision) if kv is not None else None
            if old is None and subresource is not None:
                raise errors.not_found(rt, name)
            proposed = config
            if old is not None and rt.prepare_update is not None:
                # e.g. a MemberCluster credential sent back redacted keeps its stored value
                proposed = rt.prepare_update(_copy(config), _copy(old))
            try:
                merged, entries, _ = fm.apply(old, proposed, manager=field_manager, force=force, now=self._now())
            except ssa.MergeError as e:
                raise _merge_invalid(rt, name, e) from None
            mmeta = merged.setdefault("metadata", {})
            if mmeta.get("name") != name:
                raise errors.bad_request(
                    f"the name of the object ({mmeta.get('name') or ''}) does not match the name on the URL ({name})")
            if rt.namespaced:
                if mmeta.get("namespace") in (None, ""):
                    mmeta["namespace"] = namespace
                elif mmeta["namespace"] != namespace:
                    raise errors.bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request")
            else:
                mmeta.pop("namespace", None)
            if old is None:
                if mmeta.get("uid"):
                    raise errors.conflict(rt, name, f"uid mismatch: the provided object specified uid "
                                                    f"{mmeta['uid']}, and no existing object was found")
                new = self.prepare_create(rt, merged, namespace=namespace)
                if entries:
                    new["metadata"]["managedFields"] = entries
                try:
                    return await self._create_prepared(rt, new, dry_run=dry_run), True
                except ApiError as e:
                    if e.reason != "AlreadyExists":
                        raise
                    raise LostRace(e, back_off=False) from None  # created meanwhile: apply over it
            current_rv = old["metadata"]["resourceVersion"]
            wanted_rv = mmeta.get("resourceVersion")
            if wanted_rv not in (None, "") and wanted_rv != current_rv:
                raise errors.conflict(rt, name)
            mmeta["resourceVersion"] = current_rv
            new = self._prepare_update(rt, merged, old, subresource=subresource)
            await self._admit_update(rt, new, old, subresource=subresource)
            if entries:
                new["metadata"]["managedFields"] = entries
            else:
                new["metadata"].pop("managedFields", None)
            assert kv is not None
            return await lost_race_on_conflict(
                self._write_update(rt, key, kv.mod_revision, old, new, dry_run=dry_run)), False

        return await retry_on_conflict(attempt, what=f"conflict applying {rt.plural}/{name}", attempts=None,
                                       deadline=deadline)


    # ------------------------------------------------------------ delete

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
        result = await self.delete_ex(
            rt, namespace=namespace, name=name, grace_period_seconds=grace_period_seconds,
            precondition_resource_version=precondition_resource_version,
            precondition_uid=precondition_uid, dry_run=dry_run,
        )
        return result.object

    async def delete_ex(
        self,
        rt: ResourceType,
        *,
        namespace: str | None,
        name: str,
        grace_period_seconds: int | None = None,
        precondition_resource_version: str | None = None,
        precondition_uid: str | None = None,
        dry_run: bool = False,
    ) -> DeleteResult:
        if grace_period_seconds is not None and (
            not isinstance(grace_period_seconds, int) or isinstance(grace_period_seconds, bool)
            or grace_period_seconds < 0
        ):
            raise errors.bad_request(f"gracePeriodSeconds must be a non-negative integer, not {grace_period_seconds!r}")
        key = self.object_key(rt, namespace, name)

        async def attempt() -> DeleteResult:
            kv = await self.store.get(key)
            if kv is None:
                raise errors.not_found(rt, name)
            old = _decode(kv.value, kv.mod_revision)
            meta = old["metadata"]
            if precondition_uid and precondition_uid != meta.get("uid"):
                raise errors.conflict(rt, name, f"Precondition failed: UID in precondition: {precondition_uid}, "
                                                f"UID in object meta: {meta.get('uid')}")
            if precondition_resource_version and precondition_resource_version != meta["resourceVersion"]:
                raise errors.conflict(rt, name, "Precondition failed: ResourceVersion in precondition: "
                                                f"{precondition_resource_version}, ResourceVersion in object meta: "
                                                f"{meta['resourceVersion']}")
            grace = 0
            if rt.graceful_delete is not None:
                grace = max(0, int(rt.graceful_delete(old, grace_period_seconds)))
            return await lost_race_on_conflict(
                self._delete_or_terminate(rt, key, kv.mod_revision, old, grace, dry_run=dry_run))

        return await retry_on_conflict(attempt, what=f"conflict deleting {rt.plural}/{name}")

    async def _delete_or_terminate(
        self, rt: ResourceType, key: str, mod_revision: int, old: JSONObject, grace: int, *, dry_run: bool
    ) -> DeleteResult:
        """What a delete does to the stored revision `mod_revision`: remove it now, start (or shorten)
        its graceful termination, or nothing when it is already terminating sooner."""
        meta = old["metadata"]
        finalizers = meta.get("finalizers") or []
        if meta.get("deletionTimestamp"):
            current_grace = int(meta.get("deletionGracePeriodSeconds") or 0)
            if not finalizers and (grace == 0 or current_grace == 0):
                return await self._delete_now(rt, key, mod_revision, old, dry_run=dry_run)
            if grace < current_grace:
                return DeleteResult(await self._mark_terminating(
                    rt, key, mod_revision, old, grace, dry_run=dry_run), False)
            return DeleteResult(old, False)
        if finalizers or grace > 0:
            return DeleteResult(await self._mark_terminating(
                rt, key, mod_revision, old, grace, dry_run=dry_run, bump_generation=True), False)
        return await self._delete_now(rt, key, mod_revision, old, dry_run=dry_run)

    async def _delete_now(
        self, rt: ResourceType, key: str, mod_revision: int, old: JSONObject, *, dry_run: bool
    ) -> DeleteResult:
        if dry_run:
            return DeleteResult(old, True)
        r = await self.store.txn([Compare(key, "mod", "=", mod_revision)], [Delete(key)], [Get(key)])
        if not r.succeeded:
            if r.results and r.results[0] is None:
                raise errors.not_found(rt, old["metadata"].get("name", ""))
            raise errors.conflict(rt, old["metadata"].get("name", ""))
        old["metadata"]["resourceVersion"] = str(r.revision)
        return DeleteResult(old, True)

    async def _mark_terminating(
        self, rt: ResourceType, key: str, mod_revision: int, old: JSONObject, grace: int,
        *, dry_run: bool, bump_generation: bool = False,
    ) -> JSONObject:
        new: JSONObject = _copy(old)
        meta = new["metadata"]
        meta["deletionTimestamp"] = format_time(self._clock() + dt.timedelta(seconds=grace))
        meta["deletionGracePeriodSeconds"] = grace
        if bump_generation and meta.get("generation"):
            meta["generation"] = int(meta["generation"]) + 1
        if rt.defaults is not None:
            rt.defaults(new)  # lets a kind reflect termination (a namespace's phase)
        return await self._write_update(rt, key, mod_revision, old, new, dry_run=dry_run)

    # ------------------------------------------------------------ watch

    def _route(self, key: str) -> str | None:
        """The resource prefix of a stored object's key (the key of its feed in
        the watch cache), or None for a key that is not an API object (the
        hub's leader key, member checkpoints)."""
        root = self._root
        if not key.startswith(root):
            return None
        group_end = key.find("/", len(root))
        plural_end = key.find("/", group_end + 1) if group_end >= 0 else -1
        return key[:plural_end + 1] if plural_end >= 0 else None

    def _watch_cache(self) -> WatchCache:
        share = self._share
        cache = share.cache
        if cache is None or cache.closed and not self._closed:
            # First use, or the last cache closed (store unavailable): the
            # store may be back, so a new cache tries again.
            if cache is not None:
                share.failures.failed(cache.error, now=asyncio.get_running_loop().time())
            cache = share.cache = WatchCache(share.store, route=self._route,
                                             name=f"watch-cache:{share.store.prefix}")
        return cache

    def cache_revision(self) -> int | None:
        """The newest revision the watch cache has applied, or None while no cache runs."""
        cache = self._share.cache
        if cache is None or cache.closed or not self._share.in_use:
            return None
        return cache.revision

    def writing_through(self, store: Store) -> ObjectStorage:
        """A view of this storage whose reads and writes go to `store` (e.g. a store that fences
        every write with a leader's token, over the same data), sharing this storage's watch
        cache: lists and watches cost nothing extra. Closing the view ends its watchers only."""
        if store.prefix != self.store.prefix:
            raise ValueError(f"a view must use the same store prefix ({store.prefix!r} != {self.store.prefix!r})")
        view = copy.copy(self)
        view.store = store
        view._owns_cache = False
        view._closed = False
        return view

    def _cache_works(self) -> None:
        if self._share.failures.failures:
            self._share.failures.succeeded("watch cache running again")

    def feed(self, rt: ResourceType) -> ResourceFeed:
        # The resource's prefix (for a cluster-scoped kind: above its "_/"), as `_route` computes it.
        return self._watch_cache().feed(f"{self._root}{rt.storage_path}/",
                                        capacity=self._watch_cache_events, name=f"{rt.qualified_resource}")

    async def start(self) -> None:
        """Start the watch cache and fill it for every registered kind that
        can be watched (optional: feeds also start on first watch, and lists
        use the cache only once it runs)."""
        self._share.in_use = True
        feeds = [self.feed(rt) for rt in self.registry if "watch" in rt.verbs]
        for feed in feeds:
            feed.want()
        for feed in feeds:
            await feed.ensure_started()

    def wake_watchers(self) -> None:
        """Wake every watcher so it re-checks its stop condition."""
        if self._share.cache is not None:
            for feed in self._share.cache.feeds.values():
                feed._wake()

    async def close(self) -> None:
        self._closed = True
        if not self._owns_cache:
            self.wake_watchers()  # this view's watchers see _closed and end; the cache stays
            return
        if self._share.cache is not None:
            await self._share.cache.close()

    async def watch_start(
        self, rt: ResourceType, *, resource_version: str | None
    ) -> tuple[int, bool]:
        """Validate a watch's resourceVersion: (first revision to follow,
        whether synthetic ADDED events of the current state come first)."""
        rv = parse_resource_version(resource_version)
        if rv is None or rv == 0:
            return 0, True
        current = await self.store.current_revision()
        if rv > current:
            raise errors.timeout(f"Too large resource version: {rv}, current: {current}", retry_after_seconds=1)
        compact = await self.store.compact_revision()
        if rv + 1 < compact:
            raise errors.expired(f"too old resource version: {rv} ({compact})")
        return rv + 1, False

    async def watch_batches(
        self,
        rt: ResourceType,
        *,
        namespace: str | None,
        from_revision: int,
        initial: bool,
        lsel: LabelSelector,
        fsel: FieldSelector,
        stop: Callable[[], bool],
        idle_timeout: float | None,
    ) -> AsyncIterator[tuple[_Batch, int]]:
        """(batch, progress revision) pairs for one watcher. A batch holds
        (event type, event) pairs already filtered by namespace and selectors
        (with kube's ADDED/DELETED transitions when an object starts or stops
        matching); synthetic initial events come as ("ADDED", object dict).
        The progress revision is the newest revision this watcher has fully
        seen (a valid bookmark). Empty batches mark idle timeouts or events
        that were all filtered out. Raises ApiError 410 when the start
        revision is compacted."""
        feed = self.feed(rt)
        if not self._closed:
            self._share.in_use = True
            try:
                await feed.ensure_started()
                self._cache_works()
            except Exception:  # noqa: BLE001 - fall back to reading the store directly
                pass
        if initial:
            listing = await self.list(rt, namespace=namespace, label_selector=lsel, field_selector=fsel)
            from_revision = int(listing.resource_version) + 1
            yield [("ADDED", obj) for obj in listing.items], from_revision - 1
        ns_prefix = self.collection_prefix(rt, namespace) if rt.namespaced and namespace else None
        filtering = not (lsel.empty and fsel.empty)

        def matches(obj: JSONObject | None) -> bool:
            if obj is None:
                return False
            return lsel.matches(Body(obj).labels) and fsel.matches(obj)

        progress = from_revision - 1
        try:
            async for batch in follow(feed, self.store, from_revision=from_revision, stop=stop,
                                      idle_timeout=idle_timeout):
                if batch:
                    progress = batch[-1].revision
                out: _Batch = []
                for ev in batch:
                    if ns_prefix is not None and not ev.key.startswith(ns_prefix):
                        continue
                    if not filtering:
                        out.append((ev.type, ev))
                        continue
                    now_matches = matches(ev.obj())
                    if ev.type != "MODIFIED":
                        if now_matches:
                            out.append((ev.type, ev))
                        continue
                    prev = ev.prev()
                    was_matching = matches(prev) if prev is not None else now_matches
                    if now_matches and was_matching:
                        out.append(("MODIFIED", ev))
                    elif now_matches:
                        out.append(("ADDED", ev))
                    elif was_matching:
                        out.append(("DELETED", ev))
                yield out, progress
        except Compacted as e:
            raise errors.expired(f"too old resource version: {from_revision - 1} ({e.compact_revision})") from None
        except FeedReset:
            return

    async def watch(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
        stop: asyncio.Event | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """In-process watch: WatchEvent(type, fresh object dict). With no
        resource_version (or "0") the current objects come first as ADDED.
        Raises ApiError(410) when resource_version is older than the store
        retains, also later if this watcher falls behind compaction. Ends
        when `stop` is set (checked between events) or the storage closes."""
        lsel, fsel = self.parse_selectors(rt, label_selector, field_selector)
        from_revision, initial = await self.watch_start(rt, resource_version=resource_version)

        def should_stop() -> bool:
            return self._closed or (stop is not None and stop.is_set())

        async for batch in self.watch_batches(
            rt, namespace=namespace, from_revision=from_revision, initial=initial, lsel=lsel, fsel=fsel,
            stop=should_stop, idle_timeout=1.0 if stop is not None else None,
        ):
            for typ, ev in batch[0]:
                if should_stop():
                    return
                obj = ev.fresh_copy() if isinstance(ev, CachedEvent) else ev
                yield WatchEvent(typ, obj)


class LostRace(Exception):
    """An attempt of a read-modify-write lost the race for the stored revision (its 409 in `error`):
    `retry_on_conflict` reads again. Only the write step raises it (`lost_race_on_conflict`), so a
    409 that is a decision (a precondition, a uid mismatch) reaches the caller at once."""

    def __init__(self, error: ApiError, *, back_off: bool = True) -> None:
        super().__init__(error.message)
        self.error = error
        self.back_off = back_off


async def lost_race_on_conflict(write: Awaitable[_T]) -> _T:
    """Await a compare-and-swap write; its 409 Conflict becomes `LostRace`."""
    try:
        return await write
    except ApiError as e:
        if e.code != 409:
            raise
        raise LostRace(e) from None


async def retry_on_conflict(attempt: Callable[[], Awaitable[_T]], *, what: str,
                            attempts: int | None = _UPDATE_RETRIES, deadline: float | None = None) -> _T:
    """Run `attempt` (read, modify, compare-and-swap write) until it does not lose the race: after a
    `LostRace`, run it again, at most `attempts` times in all (None: no limit, kube's
    GuaranteedUpdate); the last loss is raised as its 409. The first `_QUIET_RETRIES` retries follow
    at once, later ones after a capped, jittered backoff, so a hot object does not spin.

    `deadline` (the event loop's clock) is the request's: an attempt never starts after it, and a
    race still being lost then is a 504 Timeout (kube's "request did not complete within requested
    timeout"), never a 409. Anything else `attempt` raises is raised at once."""
    if attempts is not None and attempts < 1:
        raise ValueError("retry_on_conflict needs at least one attempt")
    loop = asyncio.get_running_loop()
    n = 0
    while True:
        if deadline is not None and loop.time() >= deadline:
            raise request_timed_out()
        try:
            return await attempt()
        except LostRace as lost:
            n += 1
            if attempts is not None and n >= attempts:
                raise lost.error from None
            if lost.back_off:
                await _backoff(n, what=what, deadline=deadline)
            else:
                _log.debug("retrying after a write conflict", waiting_for=what, attempt=n + 1, delay_s=0)


def _deadline_or_default(deadline: float | None) -> float:
    if deadline is not None:
        return deadline
    return asyncio.get_running_loop().time() + REQUEST_TIMEOUT_SECONDS


def request_timed_out() -> ApiError:
    """kube's 504 for a request whose deadline (`?timeout=`, else 60 s) passed before it completed."""
    return errors.timeout("Timeout: request did not complete within requested timeout - context deadline exceeded")


#: retries of a lost race that follow at once (kube's GuaranteedUpdate never waits); later ones back off
_QUIET_RETRIES = 3


async def _backoff(retry: int, *, what: str, deadline: float | None) -> None:
    """Nothing for the first `_QUIET_RETRIES` retries (a yield to the loop), then capped exponential
    backoff with full jitter, never past `deadline`."""
    delay = 0.0
    if retry > _QUIET_RETRIES:
        delay = min(0.1, 0.002 * 2 ** min(retry - _QUIET_RETRIES, 10)) * random.random()
        if deadline is not None:
            delay = max(0.0, min(delay, deadline - asyncio.get_running_loop().time()))
    _log.debug("retrying after a write conflict", waiting_for=what, attempt=retry + 1, delay_s=round(delay, 4))
    await asyncio.sleep(delay)
