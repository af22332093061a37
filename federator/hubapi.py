"""The hub's API kinds as the generic API server serves them.

`hub_registry()` turns the pydantic kinds of `federator.apis` into the
`ResourceType`s that `federator.apiserver` serves under federator.dev/v1alpha1:

    TrainingJob    namespaced, short name tj, /status, columns Phase (Terminating
                   while being deleted, as kubectl shows a pod), Cluster, Age
                   (-o wide: Epoch, Priority)
    MemberCluster  cluster-scoped, short name mc, /status, columns Ready, Fabric,
                   GPUs, Age (-o wide: Free, Scheduler, Cordoned)
    DrillReport    cluster-scoped, short name dr, no /status (the spec is the
                   report `federator drill` stores), columns Cluster, Fault,
                   Moved, MaxConcurrentCopies, JobsLost, Age

and, from `federator.apiserver.events`, core v1 Events (what the controllers
record; `kubectl describe tj` lists them) with their read-only
events.k8s.io/v1 view of the same stored objects.

All validate through `federator.apis` (a 422 Invalid Status naming every bad
field), take kube's field validation against their structural schema
(fieldValidation Strict refuses unknown fields, Warn -- the default -- drops
them with a Warning header, Ignore drops them), need kind and apiVersion in
every written body as custom resources do, and publish the structural
schema of `federator.apis.crd` under /openapi/v3, so `kubectl apply`
validates against the hub and `kubectl explain tj.spec` works. All keep
metadata.managedFields and take server-side apply (`managed_fields=True`),
lists merging as that schema's x-kubernetes-list-type says.

MemberCluster credentials are stored but never shown: every object the HTTP
API returns (GET, LIST, WATCH, Table rows, write responses) passes through
`membercluster.redact`, and an update that sends the placeholder back keeps
the stored value. Researchers and viewers see no spec.connection at all
(`membercluster.hide_connection`: no kubeconfig path, server or CA either),
decided per request through `CONNECTION_VISIBLE`. In-process `ObjectStorage`
reads (controllers) see the real
credentials; that is how the hub reaches its members.

The cleanup finalizer (`MEMBER_CLEANUP_FINALIZER`) is put on new TrainingJobs
only when the hub runs the controller that removes it (hub.py passes
`job_finalizers`); without it, a DELETE removes the job at once, which is
right while nothing is delegated to member clusters. A gang larger than every
cluster is accepted here: marking it unschedulable is the placement
controller's job, never the API path's.

Layer: below controllers (they may import the constants), above apiserver and
apis. It must never do I/O, import the simulator, or log an object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Final

from federator.apis import drillreport, membercluster, trainingjob
from federator.apis.common import API_GROUP, API_VERSION, ValidationSettings, split_cause
from federator.apis.crd import KINDS, column_getter, openapi_schema
from federator.apiserver.errors import FieldError
from federator.apiserver.events import event_types
from federator.apiserver.fieldvalidation import schema_unknown_fields
from federator.apiserver.registry import JSONObject, Registry, ResourceType, TableColumn

__all__ = [
    "CONNECTION_VISIBLE",
    "HUB_GROUP",
    "HUB_VERSION",
    "MEMBER_CLEANUP_FINALIZER",
    "drillreport_type",
    "hub_registry",
    "membercluster_type",
    "trainingjob_type",
]

HUB_GROUP: Final = API_GROUP
HUB_VERSION: Final = API_VERSION
#: Put on TrainingJobs when the lifecycle controller runs; it removes the
#: job's member objects, then this finalizer.
MEMBER_CLEANUP_FINALIZER: Final = "federator.dev/member-cleanup"

_FieldValidator = Callable[[dict[str, Any]], list[tuple[str, str]]]


def _as_field_errors(validator: _FieldValidator) -> Callable[[JSONObject], list[FieldError]]:
    """apis validators speak (path, "Reason prefix: detail"); the apiserver wants kube causes."""

    def validate(obj: JSONObject) -> list[FieldError]:
        return [FieldError(path, *split_cause(message)) for path, message in validator(obj)]

    return validate


def _columns(kind: str) -> tuple[TableColumn, ...]:
    return tuple(
        TableColumn(c.name, c.cell(), type=c.type, description=c.description, priority=c.priority)
        for c in KINDS[kind].columns
    )


def _string_field(path: str) -> Callable[[JSONObject], str]:
    getter = column_getter(path)

    def get(obj: JSONObject) -> str:
        value = getter(obj)
        return value if isinstance(value, str) else ""

    return get


def _add_finalizers(finalizers: Sequence[str]) -> Callable[[JSONObject], None]:
    def add(obj: JSONObject) -> None:
        meta = obj.setdefault("metadata", {})
        present = meta.get("finalizers")
        current = list(present) if isinstance(present, list) else []
        for finalizer in finalizers:
            if finalizer not in current:
                current.append(finalizer)
        meta["finalizers"] = current

    return add


def trainingjob_type(
    validation: ValidationSettings | None = None, *, job_finalizers: Sequence[str] = ()
) -> ResourceType:
    """The TrainingJob kind as the hub serves it."""
    info = KINDS[trainingjob.KIND]
    return ResourceType(
        group=HUB_GROUP, version=HUB_VERSION, kind=info.kind, plural=info.plural, singular=info.singular,
        namespaced=True, short_names=info.short_names, categories=info.categories,
        validate=_as_field_errors(trainingjob.trainingjob_validator(validation)),
        # Pod names are built from the job name, so it must be a DNS-1123 label.
        name_format="label",
        columns=_columns(trainingjob.KIND),
        field_selectors={
            "status.phase": _string_field(".status.phase"),
            "status.placement.cluster": _string_field(".status.placement.cluster"),
        },
        create_defaults=_add_finalizers(tuple(job_finalizers)) if job_finalizers else None,
        managed_fields=True,
        openapi_schema=openapi_schema(trainingjob.KIND),
        unknown_fields=schema_unknown_fields(openapi_schema(trainingjob.KIND)),
        requires_type_meta=True,
        openapi_name=f"dev.federator.{HUB_VERSION}.{info.kind}",
        description=(trainingjob.TrainingJob.__doc__ or "").strip(),
    )


#: True while serving an HTTP request of a caller who may see MemberClusters' spec.connection (an admin);
#: hub.py's middleware sets it per request from the authenticated principal. Unset (no request, anyone
#: else): MemberClusters are shown without their connection.
CONNECTION_VISIBLE: ContextVar[bool] = ContextVar("federator_connection_visible", default=False)


def _present_membercluster(obj: JSONObject) -> JSONObject:
    shown = membercluster.redact(obj)
    return shown if CONNECTION_VISIBLE.get() else membercluster.hide_connection(shown)


def _keep_stored_credentials(proposed: JSONObject, stored: JSONObject) -> JSONObject:
    return membercluster.restore_redacted(proposed, stored)


def membercluster_type(validation: ValidationSettings | None = None) -> ResourceType:
    """The MemberCluster kind as the hub serves it (credentials redacted on the way out)."""
    info = KINDS[membercluster.KIND]
    return ResourceType(
        group=HUB_GROUP, version=HUB_VERSION, kind=info.kind, plural=info.plural, singular=info.singular,
        namespaced=False, short_names=info.short_names, categories=info.categories,
        validate=_as_field_errors(membercluster.membercluster_validator(validation)),
        # Cluster names travel in member object labels and in Table cells.
        name_format="label",
        columns=_columns(membercluster.KIND),
        field_selectors={"spec.scheduler.name": _string_field(".spec.scheduler.name")},
        present=_present_membercluster,
        prepare_update=_keep_stored_credentials,
        managed_fields=True,
        openapi_schema=openapi_schema(membercluster.KIND),
        unknown_fields=schema_unknown_fields(openapi_schema(membercluster.KIND)),
        requires_type_meta=True,
        openapi_name=f"dev.federator.{HUB_VERSION}.{info.kind}",
        description=(membercluster.MemberCluster.__doc__ or "").strip(),
    )


def drillreport_type(validation: ValidationSettings | None = None) -> ResourceType:
    """The DrillReport kind as the hub serves it: a stored report, no status subresource."""
    info = KINDS[drillreport.KIND]
    return ResourceType(
        group=HUB_GROUP, version=HUB_VERSION, kind=info.kind, plural=info.plural, singular=info.singular,
        namespaced=False, short_names=info.short_names, categories=info.categories,
        status_subresource=False,
        validate=_as_field_errors(drillreport.drillreport_validator(validation)),
        name_format="label",
        columns=_columns(drillreport.KIND),
        field_selectors={"spec.cluster": _string_field(".spec.cluster"),
                         "spec.fault": _string_field(".spec.fault")},
        managed_fields=True,
        openapi_schema=openapi_schema(drillreport.KIND),
        unknown_fields=schema_unknown_fields(openapi_schema(drillreport.KIND)),
        requires_type_meta=True,
        openapi_name=f"dev.federator.{HUB_VERSION}.{info.kind}",
        description=(drillreport.DrillReport.__doc__ or "").strip(),
    )


def hub_registry(
    validation: ValidationSettings | None = None, *, job_finalizers: Sequence[str] = ()
) -> Registry:
    """The kinds the hub serves. `job_finalizers` go on every new TrainingJob:
    pass only finalizers that a running controller removes."""
    return Registry([membercluster_type(validation), trainingjob_type(validation, job_finalizers=job_finalizers),
                     drillreport_type(validation), *event_types()])


def validation_settings(*, max_replicas_per_role: int, extra: Mapping[str, Any] | None = None) -> ValidationSettings:
    """ValidationSettings from the hub's settings: the replica cap, plus any
    other ValidationSettings field named in `extra` (e.g. max_gpus_per_pod)."""
    fields = set(ValidationSettings.__dataclass_fields__) - {"cpu_cap", "memory_cap"}
    chosen = {k: v for k, v in (extra or {}).items() if k in fields}
    chosen["max_replicas_per_role"] = max_replicas_per_role
    return ValidationSettings(**chosen)
