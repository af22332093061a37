"""The hub's API kinds as the generic API server serves them.

`hub_registry()` turns the pydantic kinds of `federator.apis` into the
`ResourceType`s that `federator.apiserver` serves under federator.dev/v1alpha1:

    TrainingJob    namespaced, short name tj, /status, columns Phase (Terminating
                   while being deleted, as kubectl shows a pod), Cluster, Age
                   (-o wide: Epoch, Priority, Queue, Mode)
    MemberCluster  cluster-scoped, short name mc, /status, columns Ready, Fabric,
                   GPUs, Age (-o wide: Free, Scheduler, Cordoned)
    DrillReport    cluster-scoped, short name dr, no /status (the spec is the
                   report `federator drill` stores), columns Cluster, Fault,
                   Moved, MaxConcurrentCopies, JobsLost, Age
    Queue          cluster-scoped, short name q, /status read-only over HTTP
                   (the hub's controllers write it in-process), columns Quota,
                   Used, Borrowed, Pending, Admitted, Budget, Spent, Age (-o
                   wide: Cohort, Weight, Default)

the upstream job kinds of `federator.apis.jobkinds.JOB_KINDS` (PyTorchJob, TFJob, PaddleJob, MPIJob, ...) at
their own groups and versions, namespaced with /status, their upstream schema (plus the hub's status.phase,
status.cluster, status.epoch, status.mode), columns Phase, Cluster, Age (-o wide: Mode); validated by translating them into their twin
TrainingJob and running the TrainingJob validator on it, every error at the source's path (`jobkind_type`),
Trainer's ClusterTrainingRuntime (cluster-scoped) and TrainingRuntime (namespaced) of trainer.kubeflow.org/v1alpha1
with their upstream schemas, no /status, column Age (`runtime_type`; a TrainJob's spec.runtimeRef is resolved
against them when it is created: `translate_source`, the one lookup, which the twin controller uses too; not
stored: 422 at spec.runtimeRef.name; after creation only spec.suspend may change, `_admit_jobkind_update`),
SIG Multicluster's multicluster.x-k8s.io/v1alpha1 ClusterProfile (namespaced, /status, its upstream schema,
spec.clusterManager immutable, columns Manager, Kubernetes, Age; `clusterprofile_type`: a cluster manager writes
profiles here and controllers/clusterprofile.py joins each as a MemberCluster; non-admins see the access
providers' names but not their `cluster`, as they see no MemberCluster connection),
plus Kubernetes' own scheduling.k8s.io/v1 PriorityClass (short name pc,
columns Value, Global-Default, Age, PreemptionPolicy, as kube prints them),
and, from `federator.apiserver.events`, core v1 Events (what the controllers
record; `kubectl describe tj` lists them) with their read-only
events.k8s.io/v1 view of the same stored objects.

Admission (kube's admission plugins, reading other objects; `admit_create`):
a new TrainingJob's spec.priorityClassName resolves into spec.priority
(`priorityclass.resolve_priority`; no such class: 403 naming the field), and
a job that names no queue gets its namespace's default Queue
(`queue_for_namespace`); a job naming an existing Queue that does not select
its namespace is refused (403); one naming a Queue that does not exist is
accepted and waits (the placement controller finds it inadmissible, as Kueue
does). A second globalDefault PriorityClass is refused (403). A Queue's
namespace selector is evaluated against `namespace_labels(ns)`, the one label
the hub knows of a namespace (kubernetes.io/metadata.name). On update, a job
keeps what admission wrote (`trainingjob.keep_admitted_fields`) and its class
is immutable (`trainingjob.trainingjob_update_validator`).

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
only when the hub runs the controller that removes it (hub/app.py passes
`job_finalizers`); without it, a DELETE removes the job at once, which is
right while nothing is delegated to member clusters. A gang larger than every
cluster is accepted here: marking it unschedulable is the placement
controller's job, never the API path's.

Layer: below controllers (they may import the constants), above apiserver and
apis. It must never do I/O, import the simulator, or log an object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Final

import copy

from federator.apis import clusterprofile, drillreport, membercluster, priorityclass, queue, trainingjob
from federator.apis.jobkinds import JOB_KINDS, JobKind
from federator.apis.jobkinds.base import Translation, source_errors, twin_trainingjob
from federator.apis.jobkinds.runtimes import RUNTIME_KINDS, RuntimeKind, validate_runtime
from federator.apis.common import (
    API_GROUP,
    API_VERSION,
    ValidationSettings,
    dns1123_label_errors,
    dns1123_subdomain_errors,
)
from federator.apis.crd import KINDS, column_getter, model_openapi_schema, openapi_schema
from federator.apis.views import Body
from federator.apiserver import errors
from federator.apiserver.errors import ApiError
from federator.apiserver.events import event_types
from federator.apiserver.fieldvalidation import schema_unknown_fields
from federator.apiserver.namespaces import NAMESPACES
from federator.apiserver.registry import JSONObject, Registry, ResourceType, TableColumn
from federator.apiserver.selectors import SelectorError, selector_from_dict
from federator.apiserver.storage import ObjectStorage

__all__ = [
    "CONNECTION_VISIBLE",
    "clusterprofile_type",
    "HUB_GROUP",
    "HUB_VERSION",
    "MEMBER_CLEANUP_FINALIZER",
    "SOURCE_FINALIZER",
    "drillreport_type",
    "hub_registry",
    "jobkind_type",
    "membercluster_type",
    "namespace_labels",
    "priorityclass_type",
    "queue_for_namespace",
    "queue_type",
    "runtime_type",
    "selects_namespace",
    "trainingjob_type",
    "translate_source",
]

HUB_GROUP: Final = API_GROUP
HUB_VERSION: Final = API_VERSION
#: Put on TrainingJobs when the lifecycle controller runs; it removes the
#: job's member objects, then this finalizer.
MEMBER_CLEANUP_FINALIZER: Final = "federator.dev/member-cleanup"
#: Put on new objects of the upstream job kinds when the twin controller (controllers/jobkinds.py) runs; it
#: deletes the twin TrainingJob, then removes this finalizer once the twin (and so its member objects) is gone.
SOURCE_FINALIZER: Final = "federator.dev/twin-cleanup"


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


# --------------------------------------------------------------------------- queues and priority (admission)


def namespace_labels(namespace: str, namespace_obj: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The labels a namespaceSelector sees of `namespace`: those of its stored Namespace object (when
    given), plus kubernetes.io/metadata.name = its name, which kube puts on every namespace."""
    labels: dict[str, str] = {}
    meta = namespace_obj.get("metadata") if namespace_obj is not None else None
    stored = meta.get("labels") if isinstance(meta, Mapping) else None
    if isinstance(stored, Mapping):
        labels.update((k, v) for k, v in stored.items() if isinstance(k, str) and isinstance(v, str))
    labels[queue.NAMESPACE_NAME_LABEL] = namespace
    return labels


def selects_namespace(queue_obj: Mapping[str, Any], namespace: str,
                      labels: Mapping[str, str] | None = None) -> bool:
    """Whether a stored Queue takes the TrainingJobs of `namespace`: it lists the namespace in
    spec.namespaces.names, or its spec.namespaces.selector matches the namespace's `labels`
    (`namespace_labels`; by default only its name label) (`selector: {}` matches every namespace).
    A malformed Queue selects nothing."""
    spec = queue_obj.get("spec")
    chosen = spec.get("namespaces") if isinstance(spec, Mapping) else None
    if not isinstance(chosen, Mapping):
        return False
    names = chosen.get("names")
    if isinstance(names, list) and namespace in names:
        return True
    selector = chosen.get("selector")
    if not isinstance(selector, Mapping):
        return False
    try:
        return selector_from_dict(selector).matches(labels if labels is not None else namespace_labels(namespace))
    except SelectorError:
        return False


def _created(obj: Mapping[str, Any]) -> str:
    return Body(obj).creation_timestamp or ""


def _object_name(obj: Mapping[str, Any]) -> str:
    return Body(obj).name


def queue_for_namespace(queues: Iterable[Mapping[str, Any]], namespace: str,
                        labels: Mapping[str, str] | None = None) -> str | None:
    """The name of `namespace`'s default Queue among stored Queues: one with spec.default that selects
    the namespace. Should several, the newest wins (creationTimestamp, then the name that sorts first),
    as kube picks the newest default StorageClass since v1.26; None when there is none."""
    candidates = [q for q in queues if isinstance(q.get("spec"), Mapping) and q["spec"].get("default") is True
                  and _object_name(q) and selects_namespace(q, namespace, labels)]
    if not candidates:
        return None
    newest = max(_created(q) for q in candidates)
    return min(_object_name(q) for q in candidates if _created(q) == newest)


def _refuse(rt: ResourceType | None, obj: Mapping[str, Any], field: str, why: str) -> ApiError:
    """kube's admission refusal (403 Forbidden), with the field named in the message and a cause."""
    error = errors.forbidden(rt, _object_name(obj), f"{field}: {why}",
                             resource="" if rt is not None else "trainingjobs.federator.dev")
    error.details = {**(error.details or {}),
                     "causes": [{"reason": "FieldValueForbidden", "message": why, "field": field}]}
    return error


async def _list_kind(storage: ObjectStorage, group: str, version: str, plural: str) -> list[JSONObject]:
    """Every stored object of a kind the storage serves (a consistent list), [] if it serves none."""
    rt = storage.registry.get(group, version, plural)
    return (await storage.list(rt)).items if rt is not None else []


async def _stored_namespace(storage: ObjectStorage, namespace: str) -> JSONObject | None:
    """The stored Namespace `namespace`, or None (none stored; the storage serves no Namespaces)."""
    rt = storage.registry.get("", "v1", NAMESPACES.plural)
    if rt is None:
        return None
    try:
        return await storage.get(rt, namespace=None, name=namespace)
    except ApiError as e:
        if e.code == 404:
            return None
        raise


def _shown(text: str) -> str:
    return text if len(text) <= 253 else text[:253] + "..."


async def _admit_trainingjob(storage: ObjectStorage, job: JSONObject) -> None:
    """Priority and queue admission of a new TrainingJob (see the module docstring). Values of the
    wrong type or form are left alone: validation, which runs next, names them."""
    spec = job.get("spec")
    meta = job.get("metadata")
    if not isinstance(spec, dict) or not isinstance(meta, Mapping):
        return
    rt = storage.registry.by_kind(f"{HUB_GROUP}/{HUB_VERSION}", trainingjob.KIND)
    class_name = spec.get("priorityClassName")
    stated = spec.get("priority")
    names_class = isinstance(class_name, str) and class_name != "" and not dns1123_subdomain_errors(class_name)
    states_priority = "priority" in spec
    if (names_class or (class_name is None and not states_priority)) and             (not states_priority or type(stated) is int):
        classes = await _list_kind(storage, priorityclass.GROUP, priorityclass.VERSION, priorityclass.PLURAL)
        resolved = priorityclass.resolve_priority(spec, classes)
        if resolved.error:
            raise _refuse(rt, job, resolved.field, _shown(resolved.error))
        if resolved.class_name:
            spec["priority"] = resolved.priority
            spec["priorityClassName"] = resolved.class_name
    namespace = meta.get("namespace")
    wanted = spec.get("queue")
    if not isinstance(namespace, str) or not namespace or (wanted is not None and not isinstance(wanted, str)):
        return
    if wanted and dns1123_label_errors(wanted):
        return
    queues = await _list_kind(storage, HUB_GROUP, HUB_VERSION, queue.PLURAL)
    labels = namespace_labels(namespace, await _stored_namespace(storage, namespace))
    if wanted:
        named = next((q for q in queues if _object_name(q) == wanted), None)
        if named is not None and not selects_namespace(named, namespace, labels):
            raise _refuse(rt, job, "spec.queue", f"Queue {wanted} does not take jobs from namespace {namespace} "
                                                 "(see its spec.namespaces)")
        return
    default = queue_for_namespace(queues, namespace, labels)
    if default is not None:
        spec["queue"] = default


def _hub_kind_type(kind: str, model: type, **fields: Any) -> ResourceType:
    """A federator.dev kind as the hub serves it: the names from KINDS, the table columns, the OpenAPI schema
    (and the unknown fields it implies) generated from the kind, managed fields, type meta required, and the
    model's docstring as its description; `fields` holds the rest (namespaced, validation, selectors, ...)."""
    info = KINDS[kind]
    schema = openapi_schema(kind)
    return ResourceType(
        group=HUB_GROUP, version=HUB_VERSION, kind=info.kind, plural=info.plural, singular=info.singular,
        short_names=info.short_names, categories=info.categories, columns=_columns(kind), managed_fields=True,
        openapi_schema=schema, unknown_fields=schema_unknown_fields(schema), requires_type_meta=True,
        openapi_name=f"dev.federator.{HUB_VERSION}.{info.kind}", description=(model.__doc__ or "").strip(),
        **fields,
    )


def trainingjob_type(
    validation: ValidationSettings | None = None, *, job_finalizers: Sequence[str] = ()
) -> ResourceType:
    """The TrainingJob kind as the hub serves it."""
    return _hub_kind_type(
        trainingjob.KIND, trainingjob.TrainingJob,
        namespaced=True,
        validate=trainingjob.trainingjob_validator(validation),
        validate_update=trainingjob.trainingjob_update_validator(),
        prepare_update=trainingjob.keep_admitted_fields,
        admit_create=_admit_trainingjob,
        # Pod names are built from the job name, so it must be a DNS-1123 label.
        name_format="label",
        field_selectors={
            "status.phase": _string_field(".status.phase"),
            "status.placement.cluster": _string_field(".status.placement.cluster"),
        },
        create_defaults=_add_finalizers(tuple(job_finalizers)) if job_finalizers else None,
    )


#: True while serving an HTTP request of a caller who may see MemberClusters' spec.connection (an admin);
#: hub/app.py's middleware sets it per request from the authenticated principal. Unset (no request, anyone
#: else): MemberClusters are shown without their connection.
CONNECTION_VISIBLE: ContextVar[bool] = ContextVar("federator_connection_visible", default=False)


def _present_membercluster(obj: JSONObject) -> JSONObject:
    shown = membercluster.redact(obj)
    return shown if CONNECTION_VISIBLE.get() else membercluster.hide_connection(shown)


def _keep_stored_credentials(proposed: JSONObject, stored: JSONObject) -> JSONObject:
    return membercluster.restore_redacted(proposed, stored)


def membercluster_type(validation: ValidationSettings | None = None) -> ResourceType:
    """The MemberCluster kind as the hub serves it (credentials redacted on the way out)."""
    return _hub_kind_type(
        membercluster.KIND, membercluster.MemberCluster,
        namespaced=False,
        validate=membercluster.membercluster_validator(validation),
        # Cluster names travel in member object labels and in Table cells.
        name_format="label",
        field_selectors={"spec.scheduler.name": _string_field(".spec.scheduler.name")},
        present=_present_membercluster,
        prepare_update=_keep_stored_credentials,
        warn=membercluster.membercluster_warnings,
    )


def drillreport_type(validation: ValidationSettings | None = None) -> ResourceType:
    """The DrillReport kind as the hub serves it: a stored report, no status subresource."""
    return _hub_kind_type(
        drillreport.KIND, drillreport.DrillReport,
        namespaced=False,
        status_subresource=False,
        validate=drillreport.drillreport_validator(validation),
        name_format="label",
        field_selectors={"spec.cluster": _string_field(".spec.cluster"),
                         "spec.fault": _string_field(".spec.fault")},
    )


def queue_type(validation: ValidationSettings | None = None) -> ResourceType:
    """The Queue kind as the hub serves it: status is the hub's own (GET only on /status over HTTP)."""
    return _hub_kind_type(
        queue.KIND, queue.Queue,
        namespaced=False,
        status_verbs=("get",),
        validate=queue.queue_validator(validation),
        # TrainingJobs name their queue in spec.queue, a DNS-1123 label.
        name_format="label",
        field_selectors={"spec.cohort": _string_field(".spec.cohort")},
    )


async def _admit_priorityclass(storage: ObjectStorage, obj: JSONObject, old: JSONObject | None = None) -> None:
    """kube's Priority admission of a PriorityClass create or update: only one may be the global default
    (the default itself may be updated)."""
    classes = await _list_kind(storage, priorityclass.GROUP, priorityclass.VERSION, priorityclass.PLURAL) \
        if obj.get("globalDefault") is True else []
    why = priorityclass.default_conflict(obj, classes)
    if why is not None:
        rt = storage.registry.by_kind(priorityclass.API_VERSION, priorityclass.KIND)
        raise errors.forbidden(rt, _object_name(obj), why, resource=f"{priorityclass.PLURAL}.{priorityclass.GROUP}")


def _global_default_cell(obj: JSONObject) -> bool:
    return obj.get("globalDefault") is True


def priorityclass_type(validation: ValidationSettings | None = None) -> ResourceType:
    """Kubernetes' scheduling.k8s.io/v1 PriorityClass as the hub serves it (kubectl create priorityclass)."""
    schema = model_openapi_schema(priorityclass.PriorityClass, group=priorityclass.GROUP,
                                  version=priorityclass.VERSION, kind=priorityclass.KIND)
    return ResourceType(
        group=priorityclass.GROUP, version=priorityclass.VERSION, kind=priorityclass.KIND,
        plural=priorityclass.PLURAL, singular=priorityclass.SINGULAR, namespaced=False,
        short_names=priorityclass.SHORT_NAMES, status_subresource=False,
        defaults=priorityclass.priorityclass_defaults,
        validate=priorityclass.priorityclass_validator(validation),
        validate_update=priorityclass.priorityclass_update_validator(),
        admit_create=_admit_priorityclass,
        admit_update=_admit_priorityclass,
        columns=(
            TableColumn("Value", column_getter(".value"), type="integer",
                        description="The value of this priority class."),
            TableColumn("Global-Default", _global_default_cell, type="boolean",
                        description="The priority of jobs and pods that name no class."),
            TableColumn("Age", column_getter(".metadata.creationTimestamp"), type="date",
                        description="When the class was created."),
            TableColumn("PreemptionPolicy", _string_field(".preemptionPolicy"),
                        description="PreemptLowerPriority or Never."),
        ),
        managed_fields=True,
        openapi_schema=schema,
        unknown_fields=schema_unknown_fields(schema),
        openapi_name="io.k8s.api.scheduling.v1.PriorityClass",
        description=(priorityclass.PriorityClass.__doc__ or "").strip(),
    )


def _present_clusterprofile(obj: JSONObject) -> JSONObject:
    """A ClusterProfile as a non-admin sees it: the access providers' names without their `cluster` (server, CA,
    extensions), as a MemberCluster's connection is hidden from them (`CONNECTION_VISIBLE`)."""
    if CONNECTION_VISIBLE.get():
        return obj
    status = obj.get("status")
    if not isinstance(status, dict) or not any(isinstance(status.get(f), list)
                                               for f in ("accessProviders", "credentialProviders")):
        return obj
    shown = copy.deepcopy(obj)
    for field in ("accessProviders", "credentialProviders"):
        entries = shown["status"].get(field)
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict):
                entry.pop("cluster", None)
    return shown


def clusterprofile_type(validation: ValidationSettings | None = None) -> ResourceType:
    """SIG Multicluster's ClusterProfile as the hub serves it: namespaced, /status (the cluster manager's), its
    upstream schema, spec.clusterManager immutable."""
    schema = model_openapi_schema(clusterprofile.ClusterProfile, group=clusterprofile.GROUP,
                                  version=clusterprofile.VERSION, kind=clusterprofile.KIND)
    return ResourceType(
        group=clusterprofile.GROUP, version=clusterprofile.VERSION, kind=clusterprofile.KIND,
        plural=clusterprofile.PLURAL, singular=clusterprofile.SINGULAR, namespaced=True,
        validate=clusterprofile.clusterprofile_validator(validation),
        validate_update=clusterprofile.clusterprofile_update_validator(),
        present=_present_clusterprofile,
        columns=(
            TableColumn("Manager", _string_field(".spec.clusterManager.name"),
                        description="The cluster manager that owns the profile."),
            TableColumn("Kubernetes", _string_field(".status.version.kubernetes"),
                        description="The cluster's Kubernetes version."),
            TableColumn("Age", column_getter(".metadata.creationTimestamp"), type="date",
                        description="When the profile was created."),
        ),
        managed_fields=True, openapi_schema=schema, unknown_fields=schema_unknown_fields(schema),
        requires_type_meta=True, openapi_name="io.k8s.x-k8s.multicluster.v1alpha1.ClusterProfile",
        description=(clusterprofile.ClusterProfile.__doc__ or "").strip(),
    )


# --------------------------------------------------------------------------- upstream job kinds (issue 28)

#: what the hub adds to an upstream kind's status (its own reading of the twin), for the Phase and Cluster columns
_HUB_STATUS_FIELDS: Final[Mapping[str, Any]] = {
    "phase": {"type": "string", "description": "The hub's phase of the job (its twin TrainingJob's)."},
    "cluster": {"type": "string", "description": "The member cluster the job is placed in."},
    "epoch": {"type": "integer", "description": "The placement's fencing epoch."},
    "mode": {"type": "string", "enum": ["operator", "render"], "description": (
        "How the member runs it (once dispatched): operator (the member's own operator runs a copy of this "
        "object) or render (the hub rendered the pods under the operator's contract)."),
    },
}


def _jobkind_schema(kind: JobKind) -> dict[str, Any]:
    schema = copy.deepcopy(dict(kind.schema))
    status = schema.setdefault("properties", {}).setdefault("status", {"type": "object"})
    status.setdefault("properties", {}).update(copy.deepcopy(dict(_HUB_STATUS_FIELDS)))
    schema["x-kubernetes-group-version-kind"] = [{"group": kind.group, "kind": kind.kind, "version": kind.version}]
    return schema


def jobkind_validator(kind: JobKind, validation: ValidationSettings | None) -> Callable[[JSONObject], list[Any]]:
    """Validation of an upstream kind: its translation, then the TrainingJob validator on the twin it makes,
    every error at the source's path (nothing is stored when either finds a problem). A kind that reads another
    object (TrainJob) is checked here for what it holds itself; the rest at admission (`_admit_jobkind`), so a
    status or finalizer write never depends on that object."""
    settings = validation or ValidationSettings()

    def validate(obj: JSONObject) -> list[Any]:
        translation = kind.translate(obj, settings)
        if kind.reference is not None and not translation.errors:
            return []  # the rest needs the object it names: admission (`translate_source`, `_admit_jobkind`)
        return _translation_errors(kind, obj, translation, settings)

    return validate


def _translation_errors(kind: JobKind, obj: JSONObject, translation: Translation,
                        settings: ValidationSettings) -> list[Any]:
    """A translation's errors, or those the TrainingJob validator finds in the twin it makes (at the source's
    paths)."""
    if translation.errors or translation.spec is None:
        return list(translation.errors) or [("spec", "Invalid value: cannot be translated")]
    twin = twin_trainingjob(kind, obj, translation)
    found = trainingjob.validate_trainingjob(twin, settings=settings, include_generic_metadata=False)
    return source_errors(found, translation)


async def translate_source(storage: ObjectStorage, kind: JobKind, obj: Mapping[str, Any],
                           settings: ValidationSettings) -> Translation:
    """`kind.translate`, or for a kind that reads another object (`JobKind.reference`: a TrainJob's runtime) the
    translation on that object as stored now (its `Reference.fallback` when none is stored; neither: the error
    that it does not exist). The one place the object is looked up: admission and the twin controller call it."""
    translation = kind.translate(obj, settings)
    if kind.reference is None or kind.translate_referenced is None or translation.errors:
        return translation
    found: list[Any] = []
    ref = kind.reference(obj, found)
    if ref is None:
        return Translation(spec=None, errors=found or [("spec", "Invalid value: names no object to translate on")])
    rt = storage.registry.by_kind(ref.api_version, ref.kind)
    referenced: Mapping[str, Any] | None = None
    if rt is not None:
        try:
            referenced = await storage.get(rt, namespace=ref.namespace, name=ref.name)
        except ApiError as e:
            if e.code != 404:
                raise
    if referenced is None:
        referenced = ref.fallback
    if referenced is None:
        return Translation(spec=None, errors=[ref.missing()])
    return kind.translate_referenced(obj, settings, referenced)


def _without_mutable(spec: Mapping[str, Any] | None) -> Any:
    if spec is None:
        return None
    out = {k: v for k, v in spec.items() if k != "suspend"}
    out["roles"] = [{k: v for k, v in r.items() if k not in ("minReplicas", "maxReplicas")}
                    for r in spec.get("roles") or () if isinstance(r, Mapping)]
    return out


def jobkind_update_validator(kind: JobKind, validation: ValidationSettings | None
                             ) -> Callable[[JSONObject, JSONObject], list[Any]]:
    """After creation only what the twin can follow may change: suspend (runPolicy.suspend of the Kubeflow kinds,
    spec.suspend of the others) and the elastic bounds (the gang, its templates, queue, class and hints are
    fixed, as the operators fix replica specs)."""
    settings = validation or ValidationSettings()
    spec_fields = kind.schema.get("properties", {}).get("spec", {}).get("properties", {})
    mutable = ("runPolicy.suspend and elasticPolicy.minReplicas/maxReplicas" if "runPolicy" in spec_fields
               else "spec.suspend")

    def validate(new: JSONObject, old: JSONObject) -> list[Any]:
        if kind.reference is not None or (new.get("spec") == old.get("spec") and _hints_of(new) == _hints_of(old)):
            return []  # a kind that reads another object: `_admit_jobkind_update`
        before, after = kind.translate(old, settings), kind.translate(new, settings)
        if before.spec is None or after.spec is None:
            return []  # the create-time validator names what is wrong with `new`
        if _without_mutable(before.spec) != _without_mutable(after.spec):
            return [("spec", f"Forbidden: only {mutable} may change after the job is created (delete and "
                             "create it again to change the rest)")]
        return []

    return validate


def _hints_of(obj: Mapping[str, Any]) -> Any:
    meta = obj.get("metadata")
    return (meta.get("labels"), meta.get("annotations")) if isinstance(meta, Mapping) else None


def _admit_jobkind(kind: JobKind, validation: ValidationSettings | None
                   ) -> Callable[[ObjectStorage, JSONObject], Any]:
    """Admission of a new source object: its twin's priority class and queue (a class or a Queue that refuses
    the job is a 403 now, not a twin that cannot be created later)."""
    settings = validation or ValidationSettings()

    async def admit(storage: ObjectStorage, obj: JSONObject) -> None:
        if kind.reference is not None:
            if kind.translate(obj, settings).errors:
                return  # validation, which runs next, names them
            translation = await translate_source(storage, kind, obj, settings)
            found = _translation_errors(kind, obj, translation, settings)
            if found:
                raise errors.invalid(_served(storage, kind), _object_name(obj), found)
        else:
            translation = kind.translate(obj, settings)
        if translation.spec is not None:
            await _admit_trainingjob(storage, twin_trainingjob(kind, obj, translation))

    return admit


def _served(storage: ObjectStorage, kind: JobKind) -> ResourceType:
    rt = storage.registry.by_kind(kind.api_version, kind.kind)
    assert rt is not None, kind.kind
    return rt


def _admit_jobkind_update(kind: JobKind, validation: ValidationSettings | None
                          ) -> Callable[[ObjectStorage, JSONObject, JSONObject], Any]:
    """`jobkind_update_validator`'s rule for a kind that reads another object (TrainJob): the two translations
    on the object as stored now; when it is gone (a runtime deleted under a running TrainJob, whose twin keeps
    its gang), only spec.suspend may change."""
    settings = validation or ValidationSettings()

    def fixed(obj: Mapping[str, Any]) -> Any:
        spec = obj.get("spec")
        return ({k: v for k, v in spec.items() if k != "suspend"} if isinstance(spec, Mapping) else spec,
                _hints_of(obj))

    async def admit(storage: ObjectStorage, new: JSONObject, old: JSONObject) -> None:
        if fixed(new) == fixed(old) or kind.translate(new, settings).errors:
            return
        before = await translate_source(storage, kind, old, settings)
        after = await translate_source(storage, kind, new, settings)
        if before.spec is not None and after.spec is None:
            raise errors.invalid(_served(storage, kind), _object_name(new), _translation_errors(
                kind, new, after, settings))
        if before.spec is None or after.spec is None \
                or _without_mutable(before.spec) != _without_mutable(after.spec):
            raise errors.invalid(_served(storage, kind), _object_name(new), [(
                "spec", "Forbidden: only spec.suspend may change after the job is created (delete and create it "
                        "again to change the rest)")])

    return admit


def jobkind_type(kind: JobKind, validation: ValidationSettings | None = None, *,
                 source_finalizers: Sequence[str] = ()) -> ResourceType:
    """An upstream job kind as the hub serves it: namespaced, /status, its upstream schema (plus the hub's
    status.phase, status.cluster, status.epoch and status.mode) for OpenAPI and field validation, columns Phase,
    Cluster, Age and (-o wide) Mode.
    `source_finalizers` go on every new object (the twin controller's, when it runs)."""
    schema = _jobkind_schema(kind)
    return ResourceType(
        group=kind.group, version=kind.version, kind=kind.kind, plural=kind.plural, singular=kind.singular,
        short_names=kind.short_names, namespaced=True, managed_fields=True, openapi_schema=schema,
        unknown_fields=schema_unknown_fields(schema), requires_type_meta=True, openapi_name=kind.openapi_name,
        description=kind.description, name_format="label",
        validate=jobkind_validator(kind, validation),
        validate_update=jobkind_update_validator(kind, validation),
        admit_create=_admit_jobkind(kind, validation),
        admit_update=_admit_jobkind_update(kind, validation) if kind.reference is not None else None,
        columns=(
            TableColumn("Phase", _string_field(".status.phase"), description="The hub's phase of the job."),
            TableColumn("Cluster", _string_field(".status.cluster"), description="The member cluster it runs in."),
            TableColumn("Age", column_getter(".metadata.creationTimestamp"), type="date",
                        description="When the job was created."),
            TableColumn("Mode", _string_field(".status.mode"), priority=1,
                        description="operator (the member's own operator runs it) or render (the hub renders "
                                    "its pods)."),
        ),
        field_selectors={"status.phase": _string_field(".status.phase"),
                         "status.cluster": _string_field(".status.cluster")},
        create_defaults=_add_finalizers(tuple(source_finalizers)) if source_finalizers else None,
    )


def hub_registry(
    validation: ValidationSettings | None = None, *, job_finalizers: Sequence[str] = (),
    source_finalizers: Sequence[str] = (),
) -> Registry:
    """The kinds the hub serves. `job_finalizers` go on every new TrainingJob, `source_finalizers` on every new
    object of an upstream job kind (`federator.apis.jobkinds.JOB_KINDS`): pass only finalizers that a running
    controller removes."""
    return Registry([membercluster_type(validation), trainingjob_type(validation, job_finalizers=job_finalizers),
                     drillreport_type(validation), queue_type(validation), priorityclass_type(validation),
                     clusterprofile_type(validation),
                     *(jobkind_type(kind, validation, source_finalizers=source_finalizers) for kind in JOB_KINDS),
                     *(runtime_type(kind) for kind in RUNTIME_KINDS),
                     NAMESPACES, *event_types()])


def runtime_type(kind: RuntimeKind) -> ResourceType:
    """Trainer's ClusterTrainingRuntime (cluster-scoped) or TrainingRuntime (namespaced) as the hub serves it:
    its upstream schema for OpenAPI and field validation, no /status (the CRD has none), Trainer's webhook's
    validation (`runtimes.validate_runtime`), column Age. TrainJobs read it at admission (`translate_source`)."""
    schema = copy.deepcopy(dict(kind.schema))
    schema["x-kubernetes-group-version-kind"] = [{"group": kind.group, "kind": kind.kind, "version": kind.version}]
    return ResourceType(
        group=kind.group, version=kind.version, kind=kind.kind, plural=kind.plural, singular=kind.singular,
        namespaced=kind.namespaced, status_subresource=False, managed_fields=True, openapi_schema=schema,
        unknown_fields=schema_unknown_fields(schema), requires_type_meta=True, openapi_name=kind.openapi_name,
        description=kind.description, validate=validate_runtime,
        columns=(TableColumn("Age", column_getter(".metadata.creationTimestamp"), type="date",
                             description="When the runtime was created."),),
    )
