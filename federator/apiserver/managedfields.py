"""`metadata.managedFields` as kube-apiserver keeps them, and server-side apply on top of `ssa`.

kube wraps structured-merge-diff in a stack of field managers
(AM/pkg/util/managedfields/internal, fieldmanager.go `NewDefaultFieldManager`);
`FieldManager` here is that stack for one kind and subresource:

- manager identity: (manager, operation, apiVersion for Update, subresource),
  so `kubectl` applying and `kubectl` updating are two entries, and a status
  write is apart from a main-resource one; `default_manager` derives an
  unnamed writer's manager from its User-Agent (`kubectl/v1.32...` ->
  `kubectl`), as kube's `managerOrUserAgent` does;
- Update (POST, PUT, PATCH): the writer takes the fields it added or changed
  (timestamped only when it changed something); managedFields sent by the
  client are the starting point when they decode (that is how kubectl's
  client-side-apply upgrade rewrites them), `[]` or `[{}]` clears them, and
  anything unreadable is ignored in favour of the stored ones; an object
  stored without managedFields stays untracked by updates (kube's
  skip-non-applied); at most 10 Update entries, the oldest merged into
  `ancient-changes`;
- Apply: an object with no managedFields first gets a `before-first-apply`
  Update entry owning what it has; conflicts become kube's 409
  (`Apply failed with 1 conflict: conflict with "mgr" using v: .spec.x`);
  for the manager `kubectl` a live `last-applied-configuration` annotation
  lets the apply take over the fields it lists that still hold their applied
  values (kube's client-side to server-side apply upgrade), and the
  annotation is kept up to date with what was applied;
- the stripped fields (apiVersion, kind, metadata name, namespace, uid,
  resourceVersion, generation, creationTimestamp, managedFields...) are
  never owned; the fields a write path resets (status on the main resource,
  spec on /status) are ignored, as kube's reset fields are.

Pure (no I/O); the caller supplies the time.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from federator.apis.views import Body
from federator.apiserver import errors, ssa
from federator.apiserver.errors import ApiError, FieldError
from federator.apis.timestamps import parse_epoch, parse_time

__all__ = [
    "APPLY",
    "FIELD_MANAGER_MAX_LENGTH",
    "LAST_APPLIED_ANNOTATION",
    "NOT_SENT",
    "UPDATE",
    "FieldManager",
    "Managed",
    "ManagedFieldsError",
    "conflict_error",
    "decode",
    "default_manager",
    "encode",
    "field_manager_errors",
    "field_manager_for",
    "without_managed_fields",
    "manager_id",
    "options_invalid",
    "print_manager",
]

APPLY: Final = "Apply"
UPDATE: Final = "Update"
LAST_APPLIED_ANNOTATION: Final = "kubectl.kubernetes.io/last-applied-configuration"
FIELD_MANAGER_MAX_LENGTH: Final = 128
MAX_UPDATE_MANAGERS: Final = 10
MAX_SUBRESOURCE_LENGTH: Final = 256
#: kube's limit on all annotations of an object (apimachinery ValidateAnnotationsSize)
_ANNOTATIONS_LIMIT: Final = 256 * 1024
#: the manager kubectl apply --server-side uses, the only one that upgrades client-side apply
KUBECTL_MANAGER: Final = "kubectl"
BEFORE_FIRST_APPLY: Final = "before-first-apply"
ANCIENT_CHANGES: Final = "ancient-changes"
_CURRENT_OPERATION: Final = "current-operation"

#: Fields nobody owns (kube's stripMetaManager).
STRIPPED: Final[ssa.FieldSet] = frozenset({
    ("f:apiVersion",), ("f:kind",), ("f:metadata",),
    *(("f:metadata", f"f:{name}") for name in (
        "name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName", "generation",
        "managedFields", "resourceVersion")),
})


class ManagedFieldsError(ValueError):
    """managedFields that cannot be read (kube: "failed to decode managed fields")."""


# ---------------------------------------------------------------- identities


def manager_id(manager: str, operation: str, api_version: str, subresource: str = "") -> str:
    """kube's BuildManagerIdentifier: the entry without time and fields (and, for Apply, without
    apiVersion), as JSON in the ManagedFieldsEntry field order."""
    parts = [f'"manager":{ssa.go_json(manager)}'] if manager else []
    parts.append(f'"operation":{ssa.go_json(operation)}')
    if operation == UPDATE and api_version:
        parts.append(f'"apiVersion":{ssa.go_json(api_version)}')
    if subresource:
        parts.append(f'"subresource":{ssa.go_json(subresource)}')
    return "{" + ",".join(parts) + "}"


def _identity(identifier: str) -> dict[str, str]:
    try:
        parsed = json.loads(identifier)
    except ValueError:
        return {}
    return {k: v for k, v in parsed.items() if isinstance(v, str)} if isinstance(parsed, dict) else {}


def print_manager(identifier: str) -> str:
    """How kube names a manager in a conflict: `"kubectl"`, `"mgr" with subresource "status"`,
    `"kubectl-client-side-apply" using federator.dev/v1alpha1`."""
    entry = _identity(identifier)
    if not entry:
        return json.dumps(identifier, ensure_ascii=False)
    text = json.dumps(entry.get("manager", ""), ensure_ascii=False)
    if entry.get("subresource"):
        text += f' with subresource {json.dumps(entry["subresource"], ensure_ascii=False)}'
    if entry.get("operation") == UPDATE:
        text += f' using {entry.get("apiVersion", "")}'
    return text


def default_manager(user_agent: str) -> str:
    """kube's prefixFromUserAgent: the User-Agent up to its first `/`, printable characters only,
    at most 128 bytes (`kubectl/v1.32.4 (linux/amd64)` -> `kubectl`)."""
    out: list[str] = []
    size = 0
    for char in user_agent.split("/", 1)[0]:
        if not char.isprintable():
            continue
        width = len(char.encode("utf-8", "surrogatepass"))
        if size + width > FIELD_MANAGER_MAX_LENGTH:
            break
        out.append(char)
        size += width
    return "".join(out)


def field_manager_errors(manager: str, *, path: str = "fieldManager") -> list[FieldError]:
    """kube's ValidateFieldManager: at most 128 bytes, printable characters only."""
    problems: list[FieldError] = []
    if len(manager.encode("utf-8", "surrogatepass")) > FIELD_MANAGER_MAX_LENGTH:
        problems.append(FieldError(path, "FieldValueTooLong", f"may not be more than {FIELD_MANAGER_MAX_LENGTH} bytes"))
    position = 0
    for char in manager:
        if not char.isprintable():
            name = f"U+{ord(char):04X}"
            problems.append(FieldError.invalid(path, manager, f"invalid character {name} (at position {position})"))
        position += len(char.encode("utf-8", "surrogatepass"))
    return problems


@dataclass(frozen=True, slots=True)
class _Options:
    """The ResourceNames of meta.k8s.io/v1 CreateOptions/UpdateOptions/PatchOptions (Invalid messages)."""

    kind: str
    group: str = "meta.k8s.io"
    plural: str = ""

    @property
    def qualified_resource(self) -> str:
        return f"{self.kind}.{self.group}"

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}"


def options_invalid(kind: str, causes: Sequence[FieldError]) -> ApiError:
    """kube's 422 for bad request options: `PatchOptions.meta.k8s.io "" is invalid: fieldManager: ...`."""
    return errors.invalid(_Options(kind), "", causes)


# ---------------------------------------------------------------- encode / decode


@dataclass
class Managed:
    """Decoded managedFields: what each manager owns, and when it last changed something."""

    fields: dict[str, ssa.VersionedSet] = field(default_factory=dict)
    times: dict[str, str | None] = field(default_factory=dict)


def _seconds(when: str | None) -> int:
    seconds = parse_epoch(when)
    return 0 if seconds is None else int(seconds)


def decode(entries: Any) -> Managed:
    """kube's DecodeManagedFields; ManagedFieldsError for anything it would refuse."""
    managed = Managed()
    if entries is None:
        return managed
    if not isinstance(entries, list):
        raise ManagedFieldsError("managedFields must be a list")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ManagedFieldsError(f"managed fields entry {index} must be an object")
        operation = entry.get("operation")
        if operation not in (APPLY, UPDATE):
            raise ManagedFieldsError("operation must be `Apply` or `Update`")
        api_version = entry.get("apiVersion")
        if not isinstance(api_version, str) or not api_version:
            raise ManagedFieldsError("apiVersion must not be empty")
        fields_type = entry.get("fieldsType")
        if fields_type in (None, ""):
            raise ManagedFieldsError(f"missing fieldsType in managed fields entry {index}")
        if fields_type != "FieldsV1":
            raise ManagedFieldsError(f"invalid fieldsType {fields_type!r} in managed fields entry {index}")
        manager = entry.get("manager", "")
        subresource = entry.get("subresource", "")
        when = entry.get("time")
        if not isinstance(manager, str) or not isinstance(subresource, str) or (
                when is not None and not isinstance(when, str)):
            raise ManagedFieldsError(f"managed fields entry {index} has a field of the wrong type")
        if when is not None and parse_time(when) is None:
            raise ManagedFieldsError(f"managed fields entry {index} has an invalid time {when[:64]!r}")
        try:
            owned = ssa.parse_fields_v1(entry.get("fieldsV1", {}) if entry.get("fieldsV1") is not None else {})
        except ssa.FieldsV1Error as e:
            raise ManagedFieldsError(f"error decoding versioned set from entry {index}: {e}") from None
        identifier = manager_id(manager, operation, api_version, subresource)
        managed.fields[identifier] = ssa.VersionedSet(owned, api_version, operation == APPLY)
        managed.times[identifier] = when
    return managed


def encode(managed: Managed) -> list[dict[str, Any]] | None:
    """kube's encodeManagedFields: one entry per manager, sorted (Apply before Update, then by
    time, manager, apiVersion, subresource); None when nobody owns anything."""
    if not managed.fields:
        return None
    entries: list[dict[str, Any]] = []
    for identifier, owned in managed.fields.items():
        identity = _identity(identifier)
        entry: dict[str, Any] = {}
        if identity.get("manager"):
            entry["manager"] = identity["manager"]
        entry["operation"] = APPLY if owned.applied else identity.get("operation", UPDATE)
        entry["apiVersion"] = owned.api_version
        when = managed.times.get(identifier)
        if when:
            entry["time"] = when
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = ssa.fields_v1(owned.fields)
        if identity.get("subresource"):
            entry["subresource"] = identity["subresource"]
        entries.append(entry)
    entries.sort(key=lambda e: (e["operation"], _seconds(e.get("time")), e.get("manager", ""), e["apiVersion"],
                                e.get("subresource", "")))
    return entries


def is_reset(entries: Any) -> bool:
    """kube's isResetManagedFields: `[]` or `[{}]` asks for managedFields to be cleared."""
    return isinstance(entries, list) and (not entries or (len(entries) == 1 and entries[0] == {}))


# ---------------------------------------------------------------- conflicts


def conflict_error(conflicts: Sequence[tuple[str, ssa.Path]]) -> ApiError:
    """kube's NewConflictError: 409 Conflict naming each field and its manager."""
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {print_manager(manager)}",
               "field": ssa.path_string(path)} for manager, path in conflicts]
    if len(conflicts) == 1:
        manager, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {print_manager(manager)}: {ssa.path_string(path)}"
    else:
        by_manager: dict[str, list[ssa.Path]] = {}
        for manager, path in conflicts:
            by_manager.setdefault(manager, []).append(path)
        lines: list[str] = []
        for manager in sorted(by_manager):
            lines.append(f"conflicts with {print_manager(manager)}:")
            lines += [f"- {ssa.path_string(path)}" for path in by_manager[manager]]
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, details={"causes": causes})


# ---------------------------------------------------------------- the field manager


#: `request_fields` of a request whose body had no metadata.managedFields at all
NOT_SENT: Final = object()


class FieldManager:
    """kube's default field manager for one kind (its SMD type) and one subresource ("" for the
    main resource). `ignored`: the fields this write path resets, which nobody gains here."""

    def __init__(self, atom: ssa.Atom, *, api_version: str, kind: str, subresource: str = "",
                 ignored: ssa.FieldSet = frozenset()) -> None:
        self.atom = atom
        self.api_version = api_version
        self.kind = kind
        self.subresource = subresource
        self.ignored = ignored

    # ------------------------------------------------------------ Update

    def update(self, live: Mapping[str, Any] | None, new: Mapping[str, Any], *, request_fields: Any = NOT_SENT,
               manager: str, now: str) -> list[dict[str, Any]] | None:
        """The managedFields of `new` after `manager` wrote it over `live` (None: a create) with a
        non-apply request whose body carried `request_fields` (leave it out when it had none)."""
        if self.subresource or request_fields is NOT_SENT:
            managed = self._decode_or_empty(live)
        elif is_reset(request_fields):
            managed = Managed()
        else:
            try:
                managed = decode(request_fields)
            except ManagedFieldsError:
                managed = Managed()
            if not managed.fields:
                managed = self._decode_or_empty(live)
        if not managed.fields and live is not None and Body(live).uid:
            return None  # an object kube never tracked stays untracked by updates (skipNonApplied)
        managed = self._update(_without_managed_fields(live) if live is not None else self._empty(),
                               _without_managed_fields(new), managed,
                               manager_id(manager or "unknown", UPDATE, self.api_version, self.subresource), now)
        return encode(_cap(managed, self.api_version))

    def _decode_or_empty(self, live: Mapping[str, Any] | None) -> Managed:
        if live is None:
            return Managed()
        try:
            return decode(Body(live).managed_fields)
        except ManagedFieldsError:
            return Managed()

    def _empty(self) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": self.kind}

    def _update(self, live: Any, new: Any, managed: Managed, identifier: str, now: str) -> Managed:
        """managedFieldsUpdater + stripMetaManager + SMD Update, for one Update manager."""
        fields = ssa.update(live, new, managers=dict(managed.fields), manager=_CURRENT_OPERATION,
                            api_version=self.api_version, atom=self.atom, ignored=self.ignored)
        times = dict(managed.times)
        current = fields.pop(_CURRENT_OPERATION, None)
        if current is not None:
            owned = current.fields - STRIPPED
            if owned:
                previous = fields.get(identifier)
                merged = owned | previous.fields if previous is not None else owned
                fields[identifier] = ssa.VersionedSet(merged, self.api_version, False)
                times[identifier] = now
        return Managed(fields, {k: v for k, v in times.items() if k in fields})

    # ------------------------------------------------------------ Apply

    def apply(self, live: Mapping[str, Any] | None, config: Mapping[str, Any], *, manager: str, force: bool,
              now: str) -> tuple[dict[str, Any], list[dict[str, Any]] | None, bool]:
        """Server-side apply of `config` by `manager` over `live` (None: create).

        Returns (the object to store, without managedFields; its managedFields; whether the object
        itself changed). Raises ApiError (409 for conflicts, 500 for stored managedFields that
        cannot be read) or ssa.MergeError (a keyed list the merge refuses)."""
        live_object = _without_managed_fields(live) if live is not None else self._empty()
        try:
            managed = decode(Body(live).managed_fields) if live is not None else Managed()
        except ManagedFieldsError as e:
            raise errors.internal(f"failed to decode managed fields: {e}") from None
        try:
            result, managed, changed = self._apply(live_object, config, managed, manager, force, now)
        except ssa.Conflicts as conflicts:
            if manager != KUBECTL_MANAGER:
                raise conflict_error(conflicts.conflicts) from None
            allowed = self._allowed_from_last_applied(live_object)
            if allowed is None:
                raise conflict_error(conflicts.conflicts) from None
            remaining = [(m, p) for m, p in conflicts.conflicts if p not in allowed]
            if remaining:
                raise conflict_error(remaining) from None
            result, managed, changed = self._apply(live_object, config, managed, manager, True, now)
        if manager == KUBECTL_MANAGER and _last_applied(result) is not None:
            changed = _set_last_applied(result, _build_last_applied(config)) or changed
        return result, encode(managed), changed

    def _apply(self, live: dict[str, Any], config: Mapping[str, Any], managed: Managed, manager: str,
               force: bool, now: str) -> tuple[dict[str, Any], Managed, bool]:
        """skipNonApplied + managedFieldsUpdater + stripMetaManager + SMD Apply."""
        if not managed.fields:
            managed = _cap(self._update(self._empty(), live, managed,
                                        manager_id(BEFORE_FIRST_APPLY, UPDATE, self.api_version, self.subresource),
                                        now), self.api_version)
        identifier = manager_id(manager, APPLY, self.api_version, self.subresource)
        new, fields = ssa.apply(live, dict(config), managers=dict(managed.fields), manager=identifier,
                                api_version=self.api_version, force=force, atom=self.atom, ignored=self.ignored)
        times = dict(managed.times)
        changed = new is not None
        if changed:
            times[identifier] = now
            # (the merged object may share parts with `config` and `live`: never change those)
            result: dict[str, Any] = ssa.drop_applied_nulls(copy.deepcopy(new), config, self.atom)
        else:
            result = copy.deepcopy(live)
        owned = fields.get(identifier)
        if owned is not None:
            kept = owned.fields - STRIPPED
            if kept:
                fields[identifier] = ssa.VersionedSet(kept, owned.api_version, True)
            else:
                del fields[identifier]
        return result, Managed(fields, {k: v for k, v in times.items() if k in fields}), changed

    def _allowed_from_last_applied(self, live: Mapping[str, Any]) -> ssa.FieldSet | None:
        """kube's allowedConflictsFromLastApplied: the fields the client-side apply annotation lists
        whose live values are still the applied ones (kubectl may take those over)."""
        raw = _last_applied(live)
        if not raw:
            return None
        try:
            applied = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(applied, dict) or applied.get("apiVersion") != self.api_version:
            return None
        applied_fields = ssa.to_field_set(applied, self.atom)
        comparison = ssa.compare(applied, live, self.atom)
        return applied_fields - comparison.modified - comparison.added - comparison.removed


def _without_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


def _cap(managed: Managed, api_version: str) -> Managed:
    """kube's capManagersManager: at most 10 Update managers; the oldest are merged, per
    apiVersion, into an `ancient-changes` entry."""
    updaters = [m for m, owned in managed.fields.items() if not owned.applied]
    if len(updaters) <= MAX_UPDATE_MANAGERS:
        return managed
    updaters.sort(key=lambda m: (_seconds(managed.times.get(m)), m))
    fields = dict(managed.fields)
    times = dict(managed.times)
    first_of_version: dict[str, str] = {}
    length = len(updaters)
    for manager in updaters:
        if length <= MAX_UPDATE_MANAGERS:
            break
        owned = fields[manager]
        bucket = manager_id(ANCIENT_CHANGES, UPDATE, owned.api_version)
        first = first_of_version.get(owned.api_version)
        if first is None:
            first_of_version[owned.api_version] = manager
            continue
        if manager == bucket:
            continue  # kube would merge the bucket into itself and then delete it
        if bucket not in fields:
            fields[bucket] = fields.pop(first)
            times.pop(first, None)
        fields[bucket] = ssa.VersionedSet(owned.fields | fields[bucket].fields, owned.api_version, owned.applied)
        del fields[manager]
        times[bucket] = times.pop(manager, None)
        length -= 1
    return Managed(fields, {k: v for k, v in times.items() if k in fields})


def _last_applied(obj: Mapping[str, Any]) -> str | None:
    value = Body(obj).annotations.get(LAST_APPLIED_ANNOTATION)
    return value if isinstance(value, str) and value else None


def _build_last_applied(config: Mapping[str, Any]) -> str:
    """kube's buildLastApplied: the applied configuration without the annotation itself, as
    kubectl writes it (JSON, sorted keys, a final newline)."""
    document = copy.deepcopy(dict(config))
    meta = document.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
        annotations = {k: v for k, v in meta["annotations"].items() if k != LAST_APPLIED_ANNOTATION}
        if annotations:
            meta["annotations"] = annotations
        else:
            del meta["annotations"]
    return ssa.go_json(document) + "\n"


def _set_last_applied(obj: dict[str, Any], value: str) -> bool:
    """kube's SetLastApplied (the annotation is dropped when it would push the annotations past
    256 KiB); whether the object changed."""
    meta = obj.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    before = annotations.get(LAST_APPLIED_ANNOTATION)
    annotations[LAST_APPLIED_ANNOTATION] = value
    size = sum(len(k) + len(v) for k, v in annotations.items() if isinstance(v, str))
    if size > _ANNOTATIONS_LIMIT:
        del annotations[LAST_APPLIED_ANNOTATION]
    meta["annotations"] = annotations
    return annotations.get(LAST_APPLIED_ANNOTATION) != before


# ---------------------------------------------------------------- per kind


_CACHE: dict[tuple[int, str], tuple[Mapping[str, Any] | None, FieldManager]] = {}


def field_manager_for(*, openapi_schema: Mapping[str, Any] | None, api_version: str, kind: str,
                      subresource: str, status_subresource: bool) -> FieldManager:
    """The FieldManager of a kind (built once per schema object and subresource)."""
    key = (id(openapi_schema), f"{api_version}/{kind}/{subresource}")
    cached = _CACHE.get(key)
    if cached is not None and cached[0] is openapi_schema:
        return cached[1]
    if subresource == "status":
        ignored: ssa.FieldSet = frozenset({("f:spec",)})
    elif status_subresource:
        ignored = frozenset({("f:status",)})
    else:
        ignored = frozenset()
    manager = FieldManager(ssa.object_atom(openapi_schema), api_version=api_version, kind=kind,
                           subresource=subresource, ignored=ignored)
    _CACHE[key] = (openapi_schema, manager)
    return manager


def without_managed_fields(obj: Any) -> Any:
    """A copy of an object (or of a list's items) without metadata.managedFields: what kubectl prints unless
    --show-managed-fields, and what an audit policy's omitManagedFields logs."""
    if not isinstance(obj, dict):
        return obj
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    if isinstance(out.get("items"), list):
        out["items"] = [without_managed_fields(item) for item in out["items"]]
    return out
