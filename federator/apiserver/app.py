"""build_api_app: a kube-style REST API (aiohttp) over an ObjectStorage.

Serves, for every kind in the registry, the paths kube-apiserver serves:

    /api/v1/[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]
    /apis/{group}/{version}/[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]

with GET (get, list, watch), POST (create), PUT (update), PATCH, DELETE
(one, or the collection), the status subresource and pluggable extra
subresources (pods/binding) and verb-only resources (bindings); plus
discovery (/version, /api, /apis...), OpenAPI (/openapi/v2, /openapi/v3) and
health probes. Every error is a kube Status (errors.py); bodies above the
limit get 413, unparseable bodies 400, unsupported media types 415; unknown
query parameters are ignored; boolean parameters follow kube's parsing.

`authenticate` (optional) returns a Principal or None (-> 401); the health
probes need no credential. Extra middlewares (e.g. fault injection) run
outermost. Per-resource request counts are kept in `ApiServerState.counts`
(tests and the simulator's admin side read them).

This module must never import the simulator or the hub.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml
from aiohttp import web

from federator.apis.views import Body
from federator.apiserver import errors
from federator.apiserver.discovery import (
    api_group,
    api_group_list,
    api_resource_list,
    api_versions,
    version_document,
)
from federator.apiserver.errors import DEFAULT_MAX_BODY_BYTES, ApiError
from federator.apiserver.fieldvalidation import (
    FieldValidation,
    directive_from_query,
    json_duplicate_fields,
    json_patch_unknown_fields,
)
from federator.apiserver.openapi import OpenAPISpecs, openapi_v2_body
from federator.apiserver.managedfields import default_manager, field_manager_errors, options_invalid
from federator.apiserver.patch import APPLY_PATCH, JSON_PATCH, accepted_patch_types
from federator.apiserver.registry import JSONObject, Registry, ResourceType
from federator.apiserver.serving import DEFAULT_LIMITS, ServerLimits, handler_args
from federator.apiserver.storage import REQUEST_TIMEOUT_SECONDS, ObjectList, ObjectStorage
from federator.apiserver.table import build_table, wants_table
from federator.apiserver.watch import WatchOptions, parse_bool, serve_watch
from federator.obs import METRICS, Metrics, get_logger
from federator.store.protocol import StoreError, StoreUnavailable

_log = get_logger("apiserver")

JSON_CT = "application/json"
YAML_CTS = ("application/yaml", "application/x-yaml", "text/yaml")
#: Read as JSON: what clients that say nothing useful send (aiohttp's default for bytes is octet-stream).
_JSON_CTS = (JSON_CT, "application/octet-stream", "*/*")
#: Every media type a request body may have (the one list a 415 for a body names); none at all is JSON too.
BODY_MEDIA_TYPES = (JSON_CT, *YAML_CTS, *_JSON_CTS[1:])
_NOT_FOUND_MESSAGE = "the server could not find the requested resource"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a request (for logs and authorization; never the credential)."""

    name: str
    groups: tuple[str, ...] = ()
    #: the user's uid (token file column 3; shown by `kubectl auth whoami`), not part of its identity
    uid: str = field(default="", compare=False)


Authenticator = Callable[[web.Request], Awaitable[Principal | None]]
#: Where the authenticated Principal of a request is kept.
PRINCIPAL_KEY: web.RequestKey[Principal] = web.RequestKey("federator_api_principal", Principal)


@dataclass(frozen=True, slots=True)
class SubresourceRequest:
    """What an extra subresource / verb-only resource handler gets."""

    request: web.Request
    storage: ObjectStorage
    #: the parent kind (pods for pods/binding); None for a verb-only resource
    rt: ResourceType | None
    namespace: str | None
    #: the parent object's name ("" for a verb-only resource)
    name: str
    body: bytes
    dry_run: bool


SubresourceHandler = Callable[[SubresourceRequest], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Subresource:
    """An extra subresource such as pods/binding: its discovery entry and the
    handler called for each of its verbs."""

    group: str
    version: str
    plural: str
    name: str
    kind: str
    verbs: tuple[str, ...]
    handler: SubresourceHandler


@dataclass(frozen=True, slots=True)
class VerbOnlyResource:
    """A resource with no storage of its own, such as bindings
    (POST /api/v1/namespaces/{ns}/bindings)."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...]
    handler: SubresourceHandler


@dataclass
class ApiServerState:
    storage: ObjectStorage
    registry: Registry
    server_name: str
    authenticate: Authenticator | None
    version_info: JSONObject
    subresources: dict[tuple[str, str, str, str], Subresource]
    verb_only: dict[tuple[str, str, str], VerbOnlyResource]
    max_body_bytes: int
    bookmark_interval: float
    metrics: Metrics
    openapi: OpenAPISpecs
    #: (verb, resource) -> requests served; resource is "pods" or "podgroups.scheduling.volcano.sh"
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    stopping: bool = False
    open_watches: int = 0
    #: GET /readyz: (ready, one line saying why); None: always "ok"
    readiness: Readiness | None = None
    #: read timeouts and request-head limits (serving.py)
    limits: ServerLimits = DEFAULT_LIMITS
    _discovery_cache: dict[str, bytes] = field(default_factory=dict)

    def count(self, verb: str, resource: str) -> int:
        return self.counts[(verb, resource)]


#: `async def readiness() -> (ready, reason)` behind GET /readyz (e.g. "store unreachable")
Readiness = Callable[[], Awaitable[tuple[bool, str]]]

#: Seconds a client is told to wait (Retry-After) when the store does not answer.
STORE_RETRY_AFTER_SECONDS = 1

API_STATE: web.AppKey[ApiServerState] = web.AppKey("federator_api_state", ApiServerState)


# ---------------------------------------------------------------- helpers


def json_response(body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=JSON_CT, headers=headers)


def status_response(err: ApiError) -> web.Response:
    headers = {"Retry-After": str(err.retry_after_seconds)} if err.retry_after_seconds is not None else None
    response = json_response(err.to_status(), status=err.code, headers=headers)
    for value in errors.warning_headers(err.warnings):
        response.headers.add("Warning", value)
    return response


def _shown(rt: ResourceType, obj: JSONObject) -> JSONObject:
    """The object as the API shows it (ResourceType.present, e.g. credentials redacted)."""
    return rt.present(obj) if rt.present is not None else obj


def _not_found() -> ApiError:
    return ApiError(404, "NotFound", _NOT_FOUND_MESSAGE, details={})


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without anchors/aliases: an alias bomb expands to gigabytes when
    re-encoded, so hostile bodies are refused before that. Keys a mapping
    repeats are noted (`repeated`) for field validation, in go-yaml's words."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.repeated: list[str] = []

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.events.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "YAML aliases are not accepted", None)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    if key_node.value in seen:
                        self.repeated.append(f"line {key_node.start_mark.line + 1}: key "
                                             f"{orjson.dumps(key_node.value).decode()} already set in map")
                    seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True, slots=True)
class DecodedBody:
    """A decoded request body and the keys it repeated (for field validation)."""

    value: Any
    #: `duplicate field "<path>"` for each key a JSON body repeats
    duplicates: tuple[str, ...] = ()
    #: `line N: key "k" already set in map` for each key a YAML body repeats
    yaml_duplicates: tuple[str, ...] = ()


def decode_body(body: bytes, content_type: str) -> Any:
    """JSON or YAML request body -> Python value; 400 if malformed, 415 if the media type is unknown."""
    return decode_body_checked(body, content_type, find_duplicates=False).value


def decode_body_checked(body: bytes, content_type: str, *, find_duplicates: bool = True) -> DecodedBody:
    """`decode_body`, also finding the keys the body repeats (the last value of each is kept)."""
    ct = content_type.split(";", 1)[0].strip().lower()
    if not body.strip():
        raise errors.bad_request("the request body is empty; expected a JSON or YAML object")
    if ct == "" or ct in _JSON_CTS:
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise errors.bad_request(f"error decoding request body as JSON: {e}") from None
        return DecodedBody(value, tuple(json_duplicate_fields(body)) if find_duplicates else ())
    if ct in YAML_CTS:
        loader = _NoAliasLoader(body)
        try:
            docs = []
            while loader.check_data():  # type: ignore[no-untyped-call]
                docs.append(loader.get_data())
        except yaml.YAMLError as e:
            raise errors.bad_request(f"error decoding request body as YAML: {_yaml_problem(e)}") from None
        except RecursionError:
            raise errors.bad_request("the request body is nested too deeply") from None
        finally:
            loader.dispose()
        if len(docs) != 1:
            raise errors.bad_request(f"expected exactly one YAML document in the request body, got {len(docs)}")
        try:
            value = orjson.loads(orjson.dumps(docs[0]))  # reject what JSON cannot hold (dates, sets...)
        except TypeError as e:
            raise errors.bad_request(f"error decoding request body as YAML: {e}") from None
        return DecodedBody(value, yaml_duplicates=tuple(loader.repeated) if find_duplicates else ())
    raise errors.unsupported_media(ct, BODY_MEDIA_TYPES)


def _yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's message without its snippet of the offending line: a body may
    carry a credential, and an error must never echo it."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return f"{error.problem or error.context or 'malformed YAML'}{where}"
    return type(error).__name__


#: Set on a request whose connection must be closed after the answer (a body that never came).
_CLOSE_CONNECTION: web.RequestKey[bool] = web.RequestKey("federator_close_connection", bool)
#: The request body as read (`read_body`), for the audit log (audit.py), which shows it only through the
#: kind's `present` hook.
REQUEST_BODY: web.RequestKey[bytes] = web.RequestKey("federator_request_body", bytes)


async def read_body(request: web.Request, limit: int) -> bytes:
    """The request body, refusing (413) anything above `limit` bytes without buffering it all,
    and (504 Timeout, connection closed) one that does not arrive in full within the server's
    body read timeout (ServerLimits.body_timeout_seconds)."""
    length = request.content_length
    if length is not None and length > limit:
        raise errors.too_large(limit)
    state = request.config_dict.get(API_STATE)
    seconds = (state.limits if state is not None else DEFAULT_LIMITS).body_timeout_seconds
    data = bytearray()
    try:
        async with asyncio.timeout(seconds):
            async for chunk in request.content.iter_chunked(64 * 1024):
                data += chunk
                if len(data) > limit:
                    raise errors.too_large(limit)
    except TimeoutError:
        request[_CLOSE_CONNECTION] = True
        raise errors.timeout(f"Timeout: the request body did not arrive within {seconds:g}s") from None
    body = request[REQUEST_BODY] = bytes(data)
    return body


#: Integer query parameters are int64 in kube (strconv.ParseInt: optional sign, ASCII digits).
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT64_MAX = (1 << 63) - 1
#: A list limit above any list's size lists everything (paging semantics kept); larger values are
#: cut to this so that no store does arithmetic on kube's int64 maximum (sqlite binds limit + 1).
_MAX_LIST_LIMIT = (1 << 31) - 1
#: A watch asked to last longer than a day ends after a day (clients re-watch from their last RV).
_MAX_WATCH_TIMEOUT_SECONDS = 86_400


def _int_param(query: Mapping[str, str], name: str) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    shown = raw if len(raw) <= 40 else raw[:40] + "..."
    if not _INTEGER.fullmatch(raw):
        raise errors.bad_request(f"invalid value for query parameter {name}: {shown!r} is not an integer")
    value = int(raw)
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise errors.bad_request(
            f"invalid value for query parameter {name}: {shown!r} is out of range (at most {_INT64_MAX})")
    if value < 0:
        raise errors.bad_request(f"invalid value for query parameter {name}: {shown!r} must be >= 0")
    return value


_GO_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0,
                      "m": 60.0, "h": 3600.0}
_GO_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)([a-z\u00b5\u03bc]+)")


def _go_duration_seconds(text: str) -> float:
    """Seconds of a Go duration (time.ParseDuration: "30s", "1m30s", "1.5h", "500ms", "0");
    ValueError in Go's words for anything else."""
    quoted = orjson.dumps(text if len(text) <= 40 else text[:40] + "...").decode()
    rest = text
    sign = 1.0
    if rest[:1] in ("-", "+"):
        sign, rest = (-1.0 if rest[0] == "-" else 1.0), rest[1:]
    if rest == "0":
        return 0.0
    if not rest:
        raise ValueError(f"time: invalid duration {quoted}")
    total, pos = 0.0, 0
    while pos < len(rest):
        m = _GO_DURATION_PART.match(rest, pos)
        if m is None or m.group(1) in ("", "."):
            if m is None and re.fullmatch(r"[0-9.]+", rest[pos:]):
                raise ValueError(f"time: missing unit in duration {quoted}")
            raise ValueError(f"time: invalid duration {quoted}")
        unit = _GO_DURATION_UNITS.get(m.group(2))
        if unit is None:
            raise ValueError(f"time: unknown unit {orjson.dumps(m.group(2)[:10]).decode()} in duration {quoted}")
        total += float(m.group(1)) * unit
        pos = m.end()
    if total > 2**63 / 1e9:
        raise ValueError(f"time: invalid duration {quoted}")
    return sign * total


def _request_deadline(request: web.Request) -> float:
    """The loop-clock deadline of a non-long-running request, as kube's WithRequestDeadline sets
    it: `?timeout=` (a Go duration) if positive and shorter, else the server's 60 s; a timeout that
    does not parse is a 400."""
    seconds = REQUEST_TIMEOUT_SECONDS
    raw = request.query.get("timeout")
    if raw:
        try:
            asked = _go_duration_seconds(raw)
        except ValueError as e:
            raise errors.bad_request(f"invalid timeout specified in the request URL - {e}") from None
        if 0 < asked < seconds:
            seconds = asked
    return asyncio.get_running_loop().time() + seconds


def _dry_run(query: Any, body: JSONObject | None = None) -> bool:
    values = list(query.getall("dryRun", []))
    if body and isinstance(body.get("dryRun"), list):
        values += body["dryRun"]
    for v in values:
        if v not in ("All", ""):
            raise errors.bad_request(f'Invalid dryRun value: "{v}" (supported values: "All")')
    return "All" in values


#: The request's field validation (fieldvalidation.py), whose warnings go out as Warning headers.
_FIELD_VALIDATION: web.RequestKey[FieldValidation] = web.RequestKey("federator_field_validation", FieldValidation)


def _field_validation(request: web.Request, options_kind: str) -> FieldValidation:
    """kube's server-side field validation of this write; unset means Warn (kube >= 1.27)."""
    validation = FieldValidation(directive_from_query(request.query, options_kind=options_kind))
    request[_FIELD_VALIDATION] = validation
    return validation


def _patch_problems(validation: FieldValidation, body: bytes, doc: Any, *, json_patch: bool) -> None:
    """What kube's patch handler finds in the patch itself: repeated keys, and fields a JSON patch
    operation does not have (`json patch unknown field "[0].foo"`)."""
    validation.patch = True
    if validation.directive == "Ignore":
        return
    repeated = json_duplicate_fields(body)
    if json_patch:
        validation.duplicates = tuple(f"json patch {text}" for text in repeated) + tuple(
            json_patch_unknown_fields(doc))
    else:
        validation.duplicates = tuple(repeated)


_PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


def _check_propagation(query: Mapping[str, str], opts: JSONObject) -> None:
    """kube's ValidateDeleteOptions for propagationPolicy and orphanDependents (query or body):
    422 on DeleteOptions, before anything is deleted. (Nothing here owns other objects, so a
    valid policy changes nothing.)"""
    policy = query.get("propagationPolicy", opts.get("propagationPolicy"))
    orphan: Any = opts.get("orphanDependents")
    if "orphanDependents" in query:
        orphan = parse_bool(query.get("orphanDependents"))
    if policy is not None and not isinstance(policy, str):
        raise errors.bad_request("DeleteOptions.propagationPolicy must be a string")
    if orphan is not None and not isinstance(orphan, bool):
        raise errors.bad_request("DeleteOptions.orphanDependents must be a boolean")
    causes = []
    if orphan is not None and policy is not None:
        causes.append(errors.FieldError.invalid("propagationPolicy", policy,
                                                "orphanDependents and deletionPropagation cannot be both set"))
    if policy is not None and policy not in _PROPAGATION_POLICIES:
        causes.append(errors.FieldError.not_supported("propagationPolicy", policy, [*_PROPAGATION_POLICIES, "nil"]))
    if causes:
        raise options_invalid("DeleteOptions", causes)


#: How much of a body an error message repeats.
_ECHO_CHARS = 1024


def _echo(rt: ResourceType, obj: JSONObject) -> str:
    """The body as an error message may repeat it: as the API would show it (credentials
    redacted), cut short."""
    try:
        text = orjson.dumps(_shown(rt, obj)).decode()
    except Exception:  # noqa: BLE001 - a body `present` cannot handle is echoed by its keys only
        text = orjson.dumps(dict.fromkeys(obj, "...")).decode()
    return text if len(text) <= _ECHO_CHARS else text[:_ECHO_CHARS] + "..."


def _field_manager(request: web.Request, options_kind: str) -> str:
    """Who a write is by, for managedFields: `?fieldManager=` (422 on `<options_kind>` when longer
    than 128 bytes or unprintable, as kube), else derived from the User-Agent as kube does."""
    manager = request.query.get("fieldManager") or ""
    problems = field_manager_errors(manager)
    if problems:
        raise options_invalid(options_kind, problems)
    return manager or default_manager(request.headers.get("User-Agent", ""))


def _include_object(query: Mapping[str, str]) -> str:
    value = query.get("includeObject") or "Metadata"
    if value not in ("None", "Metadata", "Object"):
        raise errors.bad_request(f'invalid includeObject value {value!r}: must be "None", "Metadata" or "Object"')
    return value


# ---------------------------------------------------------------- routing


@dataclass(frozen=True, slots=True)
class _Target:
    group: str
    version: str
    rt: ResourceType | None
    namespace: str | None
    name: str | None
    subresource: str | None
    verb_only: VerbOnlyResource | None = None


def _resolve(state: ApiServerState, group: str, version: str, rest: list[str]) -> _Target:
    registry = state.registry
    ns: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        candidate = rest[2]
        rt_ns = registry.get(group, version, candidate)
        vo = state.verb_only.get((group, version, candidate))
        if (rt_ns is not None and rt_ns.namespaced) or (vo is not None and vo.namespaced):
            ns = rest[1]
            rest = rest[2:]
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if len(rest) > 3:
        raise _not_found()
    vo = state.verb_only.get((group, version, plural))
    if vo is not None:
        if name is not None or (vo.namespaced and ns is None):
            raise _not_found()
        return _Target(group, version, None, ns, None, None, vo)
    rt = registry.get(group, version, plural)
    if rt is None:
        raise _not_found()
    if rt.namespaced and ns is None and name is not None:
        raise _not_found()
    if not rt.namespaced and ns is not None:
        raise _not_found()
    if name is not None and name in ("", ".", ".."):
        raise _not_found()
    return _Target(group, version, rt, ns, name, sub)


class _Handlers:
    def __init__(self, state: ApiServerState) -> None:
        self.state = state
        self._count_children: dict[tuple[str, str, str], Any] = {}

    # ------------------------------------------------------------ discovery & misc

    def _cached(self, key: str, build: Callable[[], Any]) -> web.Response:
        body = self.state._discovery_cache.get(key)
        if body is None:
            body = self.state._discovery_cache[key] = orjson.dumps(build())
        return web.Response(body=body, content_type=JSON_CT)

    async def version(self, request: web.Request) -> web.StreamResponse:
        return json_response(self.state.version_info)

    async def health(self, request: web.Request) -> web.StreamResponse:
        readiness = self.state.readiness
        if request.path != "/readyz" or readiness is None:
            return web.Response(text="ok", content_type="text/plain")
        ready, reason = await readiness()
        # kube's /readyz answers 200 "ok" or 500 with the failing checks; ours says why in one line.
        return web.Response(text=f"{'ok' if ready else 'not ready'}: {reason}\n", status=200 if ready else 500,
                            content_type="text/plain")

    async def openapi_v2(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=openapi_v2_body(),
                            content_type="application/com.github.proto-openapi.spec.v2.v1.0+protobuf")

    async def openapi_v3(self, request: web.Request) -> web.StreamResponse:
        tail = request.match_info.get("tail", "").strip("/")
        if not tail:
            return json_response(self.state.openapi.index())
        doc = self.state.openapi.get(tail)
        if doc is None:
            raise _not_found()
        return web.Response(body=doc.body, content_type=JSON_CT,
                            headers={"Cache-Control": "public, immutable", "Etag": f'"{doc.hash}"'})

    # ------------------------------------------------------------ /api and /apis

    async def core(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.match_info.get("tail", "").split("/") if p]
        state = self.state
        if not parts:
            self._only_get(request)
            return json_response(api_versions(request.host or "127.0.0.1"))
        version, rest = parts[0], parts[1:]
        if not state.registry.has_group_version("", version):
            if version == "v1" and not rest:
                # Clients always fetch /api/v1; an empty core group is fine.
                self._only_get(request)
                return json_response({"kind": "APIResourceList", "apiVersion": "v1",
                                      "groupVersion": "v1", "resources": []})
            raise _not_found()
        return await self._group_version(request, "", version, rest)

    async def apis(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.match_info.get("tail", "").split("/") if p]
        state = self.state
        extra = [(vo.group, vo.version) for vo in state.verb_only.values()]
        if not parts:
            self._only_get(request)
            return self._cached("apis", lambda: api_group_list(state.registry, extra_group_versions=extra))
        group = parts[0]
        if len(parts) == 1:
            self._only_get(request)
            doc = api_group(state.registry, group, extra_group_versions=extra)
            if doc is None:
                raise _not_found()
            return json_response(doc)
        version, rest = parts[1], parts[2:]
        if not state.registry.has_group_version(group, version) and (group, version) not in extra:
            raise _not_found()
        return await self._group_version(request, group, version, rest)

    def _only_get(self, request: web.Request) -> None:
        if request.method not in ("GET", "HEAD"):
            raise errors.method_not_allowed()

    async def _group_version(
        self, request: web.Request, group: str, version: str, rest: list[str]
    ) -> web.StreamResponse:
        state = self.state
        if not rest:
            self._only_get(request)
            extra = [(s.plural, s.name, s.kind, s.verbs) for s in state.subresources.values()
                     if s.group == group and s.version == version]

            def build() -> JSONObject:
                doc = api_resource_list(state.registry, group=group, version=version, extra_subresources=extra)
                for vo in state.verb_only.values():
                    if vo.group == group and vo.version == version:
                        doc["resources"].append({
                            "name": vo.plural, "singularName": vo.singular, "namespaced": vo.namespaced,
                            "kind": vo.kind, "verbs": sorted(vo.verbs),
                        })
                return doc

            return self._cached(f"gv:{group}/{version}", build)
        target = _resolve(state, group, version, rest)
        if target.verb_only is not None:
            return await self._verb_only(request, target)
        assert target.rt is not None
        return await self._resource(request, target)

    # ------------------------------------------------------------ dispatch

    def _record(self, verb: str, resource: str) -> None:
        self.state.counts[(verb, resource)] += 1

    def _observe(self, verb: str, resource: str, code: int, started: float) -> None:
        key = (verb, resource, str(code))
        child = self._count_children.get(key)
        if child is None:
            child = self._count_children[key] = self.state.metrics.api_requests.labels(
                server=self.state.server_name, verb=verb, resource=resource, code=str(code))
        child.inc()
        self.state.metrics.api_request_seconds.labels(server=self.state.server_name, verb=verb).observe(
            time.perf_counter() - started)

    async def _resource(self, request: web.Request, t: _Target) -> web.StreamResponse:
        rt = t.rt
        assert rt is not None
        method = request.method
        query = request.query
        if t.subresource is not None and t.subresource != "status":
            sub = self.state.subresources.get((rt.group, rt.version, rt.plural, t.subresource))
            if sub is None or t.name is None:
                raise _not_found()
            return await self._call_subresource(request, sub.handler, sub.verbs, rt, t)
        if t.subresource == "status" and not rt.status_subresource:
            raise _not_found()
        if t.name is None:
            if method == "GET":
                verb = "watch" if parse_bool(query.get("watch")) else "list"
            elif method == "POST":
                verb = "create"
            elif method == "DELETE":
                verb = "deletecollection"
            else:
                raise errors.method_not_allowed()
        else:
            verb = {"GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, "")
            if not verb:
                raise errors.method_not_allowed()
            if t.subresource == "status" and verb == "delete":
                raise errors.method_not_allowed()
        if verb not in rt.verbs:
            raise errors.method_not_allowed(f"{verb} on {rt.qualified_resource}")
        if t.subresource == "status" and verb not in rt.status_verbs:
            raise errors.method_not_allowed(f"{verb} on {rt.qualified_resource}/status")
        resource = rt.qualified_resource + (f"/{t.subresource}" if t.subresource else "")
        self._record(verb, resource)
        started = time.perf_counter()
        code = 500
        try:
            verb_handler: Callable[[web.Request, _Target], Awaitable[web.StreamResponse]] = getattr(self, f"_{verb}")
            response = await verb_handler(request, t)
            code = response.status
            return response
        except ApiError as e:
            code = e.code
            raise
        finally:
            self._observe(verb, resource, code, started)

    async def _call_subresource(
        self, request: web.Request, handler: SubresourceHandler, verbs: tuple[str, ...],
        rt: ResourceType | None, t: _Target,
    ) -> web.StreamResponse:
        verb = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            request.method, "")
        if verb not in verbs:
            raise errors.method_not_allowed()
        body = b""
        if request.method in ("POST", "PUT", "PATCH"):
            body = await read_body(request, self.state.max_body_bytes)
        resource = (rt.qualified_resource + f"/{t.subresource}") if rt is not None and t.subresource else \
            (t.verb_only.plural if t.verb_only else "")
        self._record(verb, resource)
        started = time.perf_counter()
        code = 500
        try:
            response = await handler(SubresourceRequest(
                request=request, storage=self.state.storage, rt=rt, namespace=t.namespace,
                name=t.name or "", body=body, dry_run=_dry_run(request.query),
            ))
            code = response.status
            return response
        except ApiError as e:
            code = e.code
            raise
        finally:
            self._observe(verb, resource, code, started)

    async def _verb_only(self, request: web.Request, t: _Target) -> web.StreamResponse:
        vo = t.verb_only
        assert vo is not None
        return await self._call_subresource(request, vo.handler, vo.verbs, None, t)

    # ------------------------------------------------------------ verbs

    def _render_list(self, request: web.Request, rt: ResourceType, listing: ObjectList) -> web.Response:
        if rt.present is not None:
            listing = dataclasses.replace(listing, items=[rt.present(item) for item in listing.items])
        if wants_table(request.headers.get("Accept", "")):
            return json_response(build_table(
                rt, listing.items, resource_version=listing.resource_version,
                continue_token=listing.continue_token, remaining=listing.remaining,
                include_object=_include_object(request.query),
            ))
        meta: JSONObject = {"resourceVersion": listing.resource_version}
        if listing.continue_token:
            meta["continue"] = listing.continue_token
        if listing.remaining is not None:
            meta["remainingItemCount"] = listing.remaining
        for item in listing.items:
            item.setdefault("apiVersion", rt.api_version)
            item.setdefault("kind", rt.kind)
        return json_response({"apiVersion": rt.api_version, "kind": rt.list_kind, "metadata": meta,
                              "items": listing.items})

    def _render_object(self, request: web.Request, rt: ResourceType, obj: JSONObject, *, status: int = 200) -> web.Response:
        obj = _shown(rt, obj)
        if request.method == "GET" and wants_table(request.headers.get("Accept", "")):
            rv = Body(obj).resource_version
            return json_response(build_table(rt, [obj], resource_version=rv,
                                             include_object=_include_object(request.query)), status=status)
        return json_response(obj, status=status)

    async def _list(self, request: web.Request, t: _Target) -> web.StreamResponse:
        assert t.rt is not None
        q = request.query
        if "sendInitialEvents" in q:
            # kube's ValidateListOptions: set at all (even false) without watch.
            raise options_invalid("ListOptions", [errors.FieldError.forbidden(
                "sendInitialEvents", "sendInitialEvents is forbidden for list")])
        _int_param(q, "timeoutSeconds")  # kube parses every ListOptions field: not an int64 is a 400
        listing = await self.state.storage.list(
            t.rt, namespace=t.namespace, label_selector=q.get("labelSelector"),
            field_selector=q.get("fieldSelector"), limit=min(_int_param(q, "limit") or 0, _MAX_LIST_LIMIT),
            continue_token=q.get("continue") or None, resource_version=q.get("resourceVersion"),
            resource_version_match=q.get("resourceVersionMatch") or None,
        )
        return self._render_list(request, t.rt, listing)

    async def _watch(self, request: web.Request, t: _Target) -> web.StreamResponse:
        rt = t.rt
        assert rt is not None
        q = request.query
        state = self.state
        lsel, fsel = state.storage.parse_selectors(rt, q.get("labelSelector"), q.get("fieldSelector"))
        send_initial = parse_bool(q.get("sendInitialEvents"))
        rv_match = q.get("resourceVersionMatch") or None
        if rv_match is not None and (not send_initial or rv_match != "NotOlderThan"):
            raise errors.invalid(rt, "", [errors.FieldError.forbidden(
                "resourceVersionMatch", "resourceVersionMatch is forbidden for watch unless sendInitialEvents "
                "is provided, and then it must be NotOlderThan")])
        if send_initial and rv_match != "NotOlderThan":
            raise errors.invalid(rt, "", [errors.FieldError.forbidden(
                "sendInitialEvents", "sendInitialEvents is forbidden for watch unless resourceVersionMatch "
                "is NotOlderThan")])
        timeout = min(_int_param(q, "timeoutSeconds") or 0, _MAX_WATCH_TIMEOUT_SECONDS)
        options = WatchOptions(
            namespace=t.namespace,
            resource_version=q.get("resourceVersion") or None,
            label_selector=lsel,
            field_selector=fsel,
            timeout_seconds=float(timeout) if timeout else None,  # 0 means the default, as in kube
            allow_bookmarks=parse_bool(q.get("allowWatchBookmarks")),
            send_initial_events=send_initial,
            table=wants_table(request.headers.get("Accept", "")),
            include_object=_include_object(q),
        )
        gauge = state.metrics.api_watchers.labels(server=state.server_name, resource=rt.qualified_resource)

        def opened() -> None:
            state.open_watches += 1
            gauge.inc()

        def closed() -> None:
            state.open_watches -= 1
            gauge.dec()

        return await serve_watch(
            request, storage=state.storage, rt=rt, options=options, stopping=lambda: state.stopping,
            bookmark_interval=state.bookmark_interval, on_open=opened, on_close=closed,
        )

    async def _get(self, request: web.Request, t: _Target) -> web.StreamResponse:
        assert t.rt is not None and t.name is not None
        obj = await self.state.storage.get(t.rt, namespace=t.namespace, name=t.name)
        return self._render_object(request, t.rt, obj)

    async def _body_object(self, request: web.Request, validation: FieldValidation) -> Any:
        body = await read_body(request, self.state.max_body_bytes)
        decoded = decode_body_checked(body, request.headers.get("Content-Type", ""),
                                      find_duplicates=validation.directive != "Ignore")
        validation.duplicates, validation.yaml_duplicates = decoded.duplicates, decoded.yaml_duplicates
        return decoded.value

    async def _create(self, request: web.Request, t: _Target) -> web.StreamResponse:
        rt = t.rt
        assert rt is not None
        validation = _field_validation(request, "CreateOptions")
        obj = await self._body_object(request, validation)
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the request body must be a {rt.kind} object, not a JSON {type(obj).__name__}")
        self._check_body_kind(rt, obj)
        if rt.namespaced and t.namespace is None:
            raise errors.method_not_allowed(f"create {rt.qualified_resource} needs a namespace in the path")
        created = await self.state.storage.create(rt, obj, namespace=t.namespace, dry_run=_dry_run(request.query),
                                                  field_validation=validation,
                                                  field_manager=_field_manager(request, "CreateOptions"))
        return json_response(_shown(rt, created), status=201)

    def _check_body_kind(self, rt: ResourceType, obj: JSONObject) -> None:
        """kube decodes the body against the URL's kind: a body of another
        kind or apiVersion is a 400, never silently stored elsewhere."""
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version is not None and not isinstance(api_version, str):
            raise errors.bad_request("apiVersion must be a string")
        if kind is not None and not isinstance(kind, str):
            raise errors.bad_request("kind must be a string")
        if rt.requires_type_meta and (not kind or not api_version):
            # kube decodes a custom resource as unstructured, which needs both (AM/.../unstructured/helpers.go).
            raise errors.bad_request(f"Object '{'Kind' if not kind else 'apiVersion'}' is missing in "
                                     f"'{_echo(rt, obj)}'")
        if kind and kind != rt.kind:
            known = self.state.registry.by_kind(api_version or rt.api_version, kind)
            if known is None:
                raise errors.bad_request(
                    f'no kind "{kind}" is registered for version "{api_version or rt.api_version}"')
            raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        if api_version and api_version != rt.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({rt.api_version})")

    async def _update(self, request: web.Request, t: _Target) -> web.StreamResponse:
        rt = t.rt
        assert rt is not None and t.name is not None
        validation = _field_validation(request, "UpdateOptions")
        obj = await self._body_object(request, validation)
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the request body must be a {rt.kind} object, not a JSON {type(obj).__name__}")
        self._check_body_kind(rt, obj)
        updated = await self.state.storage.update(
            rt, obj, namespace=t.namespace, name=t.name, subresource=t.subresource,
            dry_run=_dry_run(request.query), field_validation=validation,
            field_manager=_field_manager(request, "UpdateOptions"),
        )
        return json_response(_shown(rt, updated))

    async def _patch(self, request: web.Request, t: _Target) -> web.StreamResponse:
        rt = t.rt
        assert rt is not None and t.name is not None
        deadline = _request_deadline(request)
        ct = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if ct not in accepted_patch_types(rt):
            raise errors.unsupported_media(ct, accepted_patch_types(rt))
        if ct == APPLY_PATCH:
            return await self._apply(request, t, deadline)
        if "force" in request.query:
            raise options_invalid("PatchOptions", [errors.FieldError.forbidden(
                "force", "may not be specified for non-apply patch")])
        manager = _field_manager(request, "PatchOptions")
        validation = _field_validation(request, "PatchOptions")
        body = await read_body(request, self.state.max_body_bytes)
        storage = self.state.storage
        doc = storage.decode_patch(rt, body, ct)
        _patch_problems(validation, body, doc, json_patch=ct == JSON_PATCH)
        patched = await storage.patch(
            rt, namespace=t.namespace, name=t.name, patch=doc, content_type=ct,
            subresource=t.subresource, dry_run=_dry_run(request.query),
            field_validation=validation,
            field_manager=manager,
            deadline=deadline,
        )
        return json_response(_shown(rt, patched))

    async def _apply(self, request: web.Request, t: _Target, deadline: float) -> web.StreamResponse:
        """Server-side apply (kube's applyPatcher): `fieldManager` is required, `force` takes
        fields other managers own; 201 when the apply created the object."""
        rt = t.rt
        assert rt is not None and t.name is not None
        query = request.query
        validation = _field_validation(request, "PatchOptions")
        manager = query.get("fieldManager") or ""
        problems = [] if manager else [errors.FieldError.required("fieldManager", "is required for apply patch")]
        problems += field_manager_errors(manager)
        if problems:
            raise options_invalid("PatchOptions", problems)
        body = await read_body(request, self.state.max_body_bytes)
        # kubectl and the Python client send JSON, which is YAML too; JSON is read as JSON (tabs and all)
        try:
            decoded = decode_body_checked(body, JSON_CT, find_duplicates=validation.directive != "Ignore")
        except ApiError:
            decoded = decode_body_checked(body, "application/yaml", find_duplicates=validation.directive != "Ignore")
        validation.duplicates, validation.yaml_duplicates = decoded.duplicates, decoded.yaml_duplicates
        config = decoded.value
        obj, created = await self.state.storage.apply(
            rt, namespace=t.namespace, name=t.name, config=config, field_manager=manager,
            force=parse_bool(query.get("force")), subresource=t.subresource, dry_run=_dry_run(query),
            field_validation=validation, deadline=deadline,
        )
        return json_response(_shown(rt, obj), status=201 if created else 200)

    async def _delete_options(self, request: web.Request) -> JSONObject:
        opts: JSONObject = {}
        if request.can_read_body:
            body = await read_body(request, self.state.max_body_bytes)
            if body.strip():
                decoded = decode_body(body, request.headers.get("Content-Type", "") or JSON_CT)
                if not isinstance(decoded, dict):
                    raise errors.bad_request("DeleteOptions must be a JSON object")
                opts = decoded
        grace = _int_param(request.query, "gracePeriodSeconds")
        if grace is not None:
            opts["gracePeriodSeconds"] = grace
        g = opts.get("gracePeriodSeconds")
        if g is not None and (not isinstance(g, int) or isinstance(g, bool) or g < 0):
            raise errors.bad_request("DeleteOptions.gracePeriodSeconds must be a non-negative integer")
        pre = opts.get("preconditions")
        if pre is not None and not isinstance(pre, dict):
            raise errors.bad_request("DeleteOptions.preconditions must be an object")
        _check_propagation(request.query, opts)
        return opts

    async def _delete(self, request: web.Request, t: _Target) -> web.StreamResponse:
        rt = t.rt
        assert rt is not None and t.name is not None
        opts = await self._delete_options(request)
        pre = opts.get("preconditions") or {}
        result = await self.state.storage.delete_ex(
            rt, namespace=t.namespace, name=t.name, grace_period_seconds=opts.get("gracePeriodSeconds"),
            precondition_uid=pre.get("uid"), precondition_resource_version=pre.get("resourceVersion"),
            dry_run=_dry_run(request.query, opts),
        )
        if not result.deleted or rt.return_deleted_object:
            return json_response(_shown(rt, result.object))
        details: JSONObject = {"name": t.name, "kind": rt.plural, "uid": Body(result.object).uid}
        if rt.group:
            details["group"] = rt.group
        return json_response(errors.success_status(details=details))

    async def _deletecollection(self, request: web.Request, t: _Target) -> web.StreamResponse:
        rt = t.rt
        assert rt is not None
        opts = await self._delete_options(request)
        q = request.query
        storage = self.state.storage
        listing = await storage.list(rt, namespace=t.namespace, label_selector=q.get("labelSelector"),
                                     field_selector=q.get("fieldSelector"))
        dry_run = _dry_run(q, opts)
        deleted: list[JSONObject] = []
        for item in listing.items:
            meta = item["metadata"]
            try:
                res = await storage.delete_ex(rt, namespace=meta.get("namespace"), name=meta["name"],
                                              grace_period_seconds=opts.get("gracePeriodSeconds"), dry_run=dry_run)
            except ApiError as e:
                if e.code == 404:
                    continue
                raise
            deleted.append(res.object)
        return self._render_list(request, rt, ObjectList(items=deleted, resource_version=listing.resource_version))


# ---------------------------------------------------------------- middlewares


def _error_middleware(state: ApiServerState) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as e:
            return status_response(e)
        except StoreUnavailable as e:
            # kube answers a storage timeout ("etcdserver: request timed out") with a retryable 5xx;
            # client-go retries a 5xx that carries Retry-After by itself.
            _log.info("request failed: store unavailable", server=state.server_name, method=request.method,
                      path=request.path, error=str(e))
            return status_response(errors.service_unavailable(
                "the storage backend is unavailable (it did not answer within its retry budget); "
                "try again later", retry_after_seconds=STORE_RETRY_AFTER_SECONDS))
        except StoreError as e:
            # e.g. a value no configured encryption key reads (store/encryption.py): kube's 500 "Internal
            # error occurred: ..." with the store's one line (a key and a key name, never a value)
            _log.warning("request failed: store error", server=state.server_name, method=request.method,
                         path=request.path, error=str(e))
            return status_response(errors.internal(f"storage error: {e}"))
        except web.HTTPRequestEntityTooLarge:
            return status_response(errors.too_large(state.max_body_bytes))
        except web.HTTPMethodNotAllowed:
            return status_response(errors.method_not_allowed())
        except web.HTTPNotFound:
            return status_response(_not_found())
        except web.HTTPException as e:
            if e.status >= 400:
                return status_response(ApiError(e.status, e.reason.replace(" ", ""), e.text or e.reason))
            raise
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as e:  # noqa: BLE001 - one Status, never a traceback, for anything unexpected
            _log.error("request failed", server=state.server_name, method=request.method,
                       path=request.path, error=repr(e), exc_info=True)
            return status_response(errors.internal("the server failed to handle this request"))

    return middleware


def _warnings_middleware() -> Any:
    """Field validation's warnings (Warn) as `Warning` headers, on the answer whatever it is; and
    the connection closed after an answer to a body that never arrived."""

    @web.middleware
    async def middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        response = await handler(request)
        validation = request.get(_FIELD_VALIDATION)
        if validation is not None and validation.warnings and not response.prepared:
            for value in errors.warning_headers(validation.warnings):
                response.headers.add("Warning", value)
        if request.get(_CLOSE_CONNECTION) and not response.prepared:
            response.force_close()
        return response

    return middleware


_UNAUTHENTICATED_PATHS = frozenset({"/healthz", "/livez", "/readyz"})


def _auth_middleware(state: ApiServerState) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if state.authenticate is not None and request.path not in _UNAUTHENTICATED_PATHS:
            principal = await state.authenticate(request)
            if principal is None:
                raise errors.unauthorized()
            request[PRINCIPAL_KEY] = principal
        return await handler(request)

    return middleware


# ---------------------------------------------------------------- app


def build_api_app(
    *,
    storage: ObjectStorage,
    registry: Registry,
    server_name: str,
    authenticate: Authenticator | None = None,
    middlewares: Sequence[Any] = (),
    version_info: Mapping[str, str] | None = None,
    subresources: Sequence[Subresource] = (),
    verb_only_resources: Sequence[VerbOnlyResource] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    bookmark_interval: float = 10.0,
    metrics: Metrics | None = None,
    start_storage: bool = True,
    readiness: Readiness | None = None,
    limits: ServerLimits = DEFAULT_LIMITS,
) -> web.Application:
    """An aiohttp Application serving `registry` from `storage`. With
    `start_storage`, the app's cleanup_ctx starts the storage's watch cache
    and closes it on shutdown (pass False when the storage outlives the app)."""
    state = ApiServerState(
        storage=storage,
        registry=registry,
        server_name=server_name,
        authenticate=authenticate,
        version_info=version_document(version_info),
        subresources={(s.group, s.version, s.plural, s.name): s for s in subresources},
        verb_only={(v.group, v.version, v.plural): v for v in verb_only_resources},
        max_body_bytes=max_body_bytes,
        bookmark_interval=bookmark_interval,
        metrics=metrics or METRICS,
        openapi=OpenAPISpecs(registry),
        readiness=readiness,
        limits=limits,
    )
    app = web.Application(
        middlewares=[*middlewares, _warnings_middleware(), _error_middleware(state), _auth_middleware(state)],
        client_max_size=max_body_bytes,
        # Read timeouts and request-head limits for whatever runner serves the app (serving.py).
        handler_args=handler_args(limits),
    )
    app[API_STATE] = state
    h = _Handlers(state)
    r = app.router
    r.add_get("/version", h.version)
    r.add_get("/version/", h.version)
    for probe in _UNAUTHENTICATED_PATHS:
        r.add_get(probe, h.health)
    r.add_get("/openapi/v2", h.openapi_v2)
    r.add_get("/openapi/v3", h.openapi_v3)
    r.add_get("/openapi/v3/{tail:.*}", h.openapi_v3)
    r.add_route("*", "/api", h.core)
    r.add_route("*", "/api/{tail:.*}", h.core)
    r.add_route("*", "/apis", h.apis)
    r.add_route("*", "/apis/{tail:.*}", h.apis)

    async def on_shutdown(_: web.Application) -> None:
        # Open watches end at once instead of holding shutdown for their timeout.
        state.stopping = True
        storage.wake_watchers()

    app.on_shutdown.append(on_shutdown)

    if start_storage:
        async def storage_ctx(_: web.Application) -> Any:
            await storage.start()
            yield
            state.stopping = True
            await storage.close()

        app.cleanup_ctx.append(storage_ctx)
    return app


def api_state(app: web.Application) -> ApiServerState:
    return app[API_STATE]
