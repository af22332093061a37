"""The resource registry: which kinds an API server serves, and how.

A `ResourceType` is everything the generic machinery needs to know about one
kind: its group/version/kind/plural, scope, the strategy hooks (defaults,
validation, graceful deletion, generation rules), its field selectors, its
Table columns and its OpenAPI schema. A `Registry` is the set of them that
one server (a simulated member cluster, or the hub) serves.

This module is data and lookups only; it must never do I/O and never import
a store, the simulator or the hub.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from federator.apiserver.errors import FieldErrorLike

JSONObject = dict[str, Any]

#: (object) -> field errors; an empty list means valid.
Validator = Callable[[JSONObject], Sequence[FieldErrorLike]]
#: (new, old) -> field errors, for rules that compare with the stored object.
UpdateValidator = Callable[[JSONObject, JSONObject], Sequence[FieldErrorLike]]
#: Mutates the object in place to fill server-side defaults.
Defaulter = Callable[[JSONObject], None]
#: (object, requested grace seconds or None) -> effective grace seconds;
#: 0 deletes at once, >0 only sets deletionTimestamp (something else finishes).
GracePolicy = Callable[[JSONObject, "int | None"], int]
#: (proposed, stored) -> the object to store, for a write through a named
#: subresource such as pods/binding (the strategy decides what may change).
SubresourceStrategy = Callable[[JSONObject, JSONObject], JSONObject]
#: Paths (JSON keys / list indexes) of fields the kind does not know.
UnknownFields = Callable[[JSONObject], Sequence[tuple[str | int, ...]]]
#: Extracts a field-selector value (always a string, "" when absent).
FieldGetter = Callable[[JSONObject], str]
#: (storage, object) -> None: admission on create that reads other objects (kube's admission plugins,
#: e.g. Priority resolving spec.priorityClassName). It runs after defaulting and before validation, may
#: change the object, and refuses with an ApiError (kube's plugins answer 403 Forbidden). The storage is
#: the ObjectStorage creating the object, typed Any so that this module imports no storage.
CreateAdmission = Callable[[Any, JSONObject], Awaitable[None]]
#: (storage, new object, stored object) -> None: admission on an update of the main resource (not
#: /status) that reads other objects (e.g. only one globalDefault PriorityClass). It runs after
#: validation and may only refuse, with an ApiError.
UpdateAdmission = Callable[[Any, JSONObject, JSONObject], Awaitable[None]]

ALL_VERBS: tuple[str, ...] = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True, slots=True)
class TableColumn:
    """One column of `kubectl get` output. `cell(obj)` returns the cell value
    (str, int, float or bool); `type` is the OpenAPI type ("string",
    "integer", "number", "boolean", "date"); date columns are rendered as an
    age string on the server (kube-api-notes §9)."""

    name: str
    cell: Callable[[JSONObject], Any]
    type: str = "string"
    format: str = ""
    description: str = ""
    priority: int = 0


def jsonpath_cell(*path: str | int, default: Any = "") -> Callable[[JSONObject], Any]:
    """A cell getter following dict keys / list indexes; `default` when absent."""

    def get(obj: JSONObject) -> Any:
        cur: Any = obj
        for p in path:
            if isinstance(p, int):
                if not isinstance(cur, list) or len(cur) <= p:
                    return default
                cur = cur[p]
            else:
                if not isinstance(cur, dict) or p not in cur:
                    return default
                cur = cur[p]
        if cur is None:
            return default
        return cur

    return get


@dataclass(frozen=True, slots=True)
class SMPListStrategy:
    """How strategic merge patch treats one list field: merged element by
    element by `merge_key` (e.g. containers by name), or, with merge_key None,
    merged as a set of primitives (e.g. finalizers)."""

    merge_key: str | None
    retain_keys: bool = False


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    #: writes to the main resource ignore `status`; PUT/PATCH on /status
    #: change only `status` (kube-api-notes §4).
    status_subresource: bool = True
    #: what the HTTP API serves on /status (discovery and OpenAPI list these); ("get",) keeps status
    #: to in-process writers (the hub's controllers): PUT/PATCH over HTTP get 405
    status_verbs: tuple[str, ...] = ("get", "patch", "update")
    #: POST drops `status` (kube does for kinds with /status; Node keeps it).
    reset_status_on_create: bool | None = None
    #: PUT without metadata.resourceVersion is allowed (pods: true).
    allow_unconditional_update: bool = False
    #: how long a DELETE waits (pods); None deletes at once (finalizers still wait).
    graceful_delete: GracePolicy | None = None
    #: DELETE answers with the object (pods) instead of a Success Status.
    return_deleted_object: bool = False
    #: extra field selectors besides metadata.name and metadata.namespace
    field_selectors: Mapping[str, FieldGetter] = field(default_factory=dict)
    #: extra writable subresources besides status ("binding" for pods); used
    #: by ObjectStorage.update/guaranteed_update(subresource=...)
    subresource_strategies: Mapping[str, SubresourceStrategy] = field(default_factory=dict)
    defaults: Defaulter | None = None
    #: Like `defaults`, but only on create (e.g. a cleanup finalizer, which an
    #: update must not put back once a controller removed it).
    create_defaults: Defaulter | None = None
    validate: Validator | None = None
    validate_update: UpdateValidator | None = None
    #: texts for `Warning` headers about a written body (kube's WarningsOnCreate/WarningsOnUpdate), e.g.
    #: a deprecated field still honoured; the write goes ahead
    warn: Callable[[JSONObject], list[str]] | None = None
    #: admission on create that reads other objects (see CreateAdmission)
    admit_create: CreateAdmission | None = None
    #: admission on an update that reads other objects (see UpdateAdmission)
    admit_update: UpdateAdmission | None = None
    #: finds unknown fields for fieldValidation (Strict -> 400, Warn/Ignore ->
    #: dropped); None keeps whatever a client sends
    unknown_fields: UnknownFields | None = None
    #: a written body must carry kind and apiVersion (400 "Object 'Kind' is
    #: missing in ..."), as kube's custom resources must; built-in kinds take
    #: them from the URL
    requires_type_meta: bool = False
    #: "subdomain" (RFC 1123 DNS subdomain, most kinds) or "label" (namespaces)
    name_format: str = "subdomain"
    #: Table columns between NAME and AGE
    columns: tuple[TableColumn, ...] = ()
    #: What the HTTP API shows of a stored object (every response, list item,
    #: watch event and Table row passes through it), e.g. credentials
    #: redacted. Never applied to in-process ObjectStorage reads.
    present: Callable[[JSONObject], JSONObject] | None = None
    #: (proposed, stored) -> the object to validate and store, for updates and
    #: patches of the main resource (e.g. a redacted credential sent back
    #: keeps its stored value).
    prepare_update: SubresourceStrategy | None = None
    #: strategic merge patch list strategies by dotted path ("spec.containers",
    #: "spec.containers[].env"); None means SMP is refused with 415 (custom kinds).
    strategic_merge: Mapping[str, SMPListStrategy] | None = None
    #: metadata.managedFields kept on every API write and server-side apply
    #: (PATCH application/apply-patch+yaml) served, merging by `openapi_schema`'s
    #: list types (apiserver/managedfields.py); False refuses apply with 415.
    managed_fields: bool = False
    #: OpenAPI v3 schema of the whole object (properties of spec/status...)
    openapi_schema: Mapping[str, Any] | None = None
    #: the name under which the schema is published (e.g. io.k8s.api.core.v1.Pod)
    openapi_name: str = ""
    description: str = ""
    #: Keep the objects under another resource's keys, as (storage group, plural): one
    #: storage, several API views (events.k8s.io/v1 Events are core v1 Events, as in kube).
    #: Such a view converts with `present` and its field selectors read the stored form.
    stored_as: tuple[str, str] | None = None

    # ------------------------------------------------------------ names

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def qualified_resource(self) -> str:
        """`pods` or `podgroups.scheduling.volcano.sh` (NotFound/Conflict messages)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """`Pod` or `PodGroup.scheduling.volcano.sh` (Invalid messages)."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def storage_group(self) -> str:
        return self.group or "core"

    @property
    def storage_path(self) -> str:
        """`<storage group>/<plural>` of the keys the objects live under."""
        group, plural = self.stored_as or (self.storage_group, self.plural)
        return f"{group}/{plural}"

    @property
    def drops_status_on_create(self) -> bool:
        if self.reset_status_on_create is not None:
            return self.reset_status_on_create
        return self.status_subresource

    @property
    def supports_strategic_merge(self) -> bool:
        return self.strategic_merge is not None

    def url_path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The REST path of the collection or of one object."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        return base


class Registry:
    """The resource types one API server serves, with the lookups routing,
    discovery and manifests need."""

    def __init__(self, types: Sequence[ResourceType] = ()) -> None:
        self._by_gvr: dict[tuple[str, str, str], ResourceType] = {}
        self._by_gvk: dict[tuple[str, str], ResourceType] = {}
        self._order: list[ResourceType] = []
        for rt in types:
            self.add(rt)

    def add(self, rt: ResourceType) -> ResourceType:
        gvr = (rt.group, rt.version, rt.plural)
        gvk = (rt.api_version, rt.kind)
        if gvr in self._by_gvr:
            raise ValueError(f"resource {rt.plural} in {rt.api_version} is registered twice")
        if gvk in self._by_gvk:
            raise ValueError(f"kind {rt.kind} in {rt.api_version} is registered twice")
        self._by_gvr[gvr] = rt
        self._by_gvk[gvk] = rt
        self._order.append(rt)
        return rt

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_gvr.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        return self._by_gvk.get((api_version, kind))

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def group_versions(self) -> list[tuple[str, str]]:
        """(group, version) pairs in registration order, core first."""
        seen: dict[tuple[str, str], None] = {}
        for rt in sorted(self._order, key=lambda r: r.group != ""):
            seen.setdefault((rt.group, rt.version), None)
        return list(seen)

    def groups(self) -> dict[str, list[str]]:
        """Named groups (not core) -> versions, preferred (first registered) first."""
        out: dict[str, list[str]] = {}
        for rt in self._order:
            if rt.group:
                versions = out.setdefault(rt.group, [])
                if rt.version not in versions:
                    versions.append(rt.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._order if rt.group == group and rt.version == version]

    def has_group_version(self, group: str, version: str) -> bool:
        return any(rt.group == group and rt.version == version for rt in self._order)
