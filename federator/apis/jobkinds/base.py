"""The contract every upstream job kind the hub accepts fulfils (issue 28): JobSet, the Kubeflow jobs, Trainer's
TrainJob and batch/v1 Job are each served at their own group and version with their upstream schema, and each is
translated, purely, into the hub's gang: a TrainingJob spec (roles with full pod templates, framework, queue,
priority class, placement hints, failover policy). The hub keeps that TrainingJob as the kind's *twin* (same
namespace and name, owned by the source object), so placement, quotas, preemption, failover, drain and drills
treat every kind alike; the twin's status is mirrored back onto the source object.

One module per kind family under this package defines `JobKind` values; `federator.apis.jobkinds.JOB_KINDS`
lists them all. Pure: no I/O; imports only `federator.apis` modules below it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Final, Protocol

from federator.apis.common import FieldError, ValidationSettings

__all__ = ["SOURCE_KIND_ANNOTATION", "InPlaceResize", "JobKind", "PodContract", "PodDns", "Reference", "StatusMirror",
           "Translation",
           "load_upstream_schema", "source_errors", "twin_trainingjob"]

JSON = dict[str, Any]

#: on every twin TrainingJob: which kind it was made from, as "<Kind>.<group>" (e.g. "PyTorchJob.kubeflow.org",
#: "Job.batch"); `JobKind.source_key` gives it, and the delegation looks the kind's pod contract up by it
SOURCE_KIND_ANNOTATION: Final = "federator.dev/source-kind"


@dataclass(frozen=True, slots=True)
class Translation:
    """What `JobKind.translate` makes of one source object.

    `spec` is the TrainingJob spec of the twin (None when `errors` is not empty, and always from `JobKind.translate`
    of a kind that reads another object: `JobKind.reference`). `errors` are kube-style
    (path, message) causes whose paths name the *source* object's fields (e.g.
    "spec.pytorchReplicaSpecs[Worker].replicas"), so a 422 points at what the user wrote. `role_paths` maps each
    TrainingJob role name to the source path of its pod template ("spec.pytorchReplicaSpecs[Worker].template"),
    so errors the TrainingJob validator finds in the translated spec can be reported at the source's path.
    `annotations` go on the twin's metadata (e.g. what the kind's pod contract needs per role, as JSON).
    """

    spec: JSON | None
    errors: list[FieldError] = field(default_factory=list)
    role_paths: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: twin spec path prefix -> the source path it was taken from, for errors outside the roles (e.g.
    #: "spec.queue" -> "spec.runPolicy.schedulingPolicy.queue", "spec.placement.gpuModels" ->
    #: "metadata.annotations[federator.dev/gpu-models]"); the longest matching prefix wins
    field_paths: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodDns:
    """The network identity the kind's operator gives a pod, which the hub's rendering gives the pod it renders
    in its place (its name stays the hub's): `hostname`; `subdomain`, a headless Service of that name that selects
    the job's pods, so that `<hostname>.<subdomain>` resolves ("" for none); and `service`, a headless Service of
    that name that selects this pod alone (the Kubeflow training operator's per-replica Service, "" for none)."""

    hostname: str
    subdomain: str = ""
    service: str = ""

    @property
    def name(self) -> str:
        """The name peers dial, relative to the pod's namespace: the per-pod Service's, else
        `<hostname>.<subdomain>`, else the bare hostname (which nothing resolves but the pod itself)."""
        if self.service:
            return self.service
        return f"{self.hostname}.{self.subdomain}" if self.subdomain else self.hostname


@dataclass(frozen=True, slots=True)
class PodContract:
    """What the kind's own operator puts on each pod it creates, beyond the framework's environment
    (delegation/frameworks.py): labels, annotations and env, so that code and tooling written for the operator
    cannot tell the hub rendered the pod (e.g. training.kubeflow.org/replica-index, JobSet's
    jobset.sigs.k8s.io/job-index, batch.kubernetes.io/job-completion-index and JOB_COMPLETION_INDEX), and the
    DNS identity the operator gives it (`dns`: None keeps the hub's own, delegation/network.py)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    env: tuple[JSON, ...] = ()
    dns: PodDns | None = None


#: (source object, settings) -> Translation. Pure and total: a malformed object gives errors, never an exception.
Translator = Callable[[Mapping[str, Any], ValidationSettings], Translation]
#: (source object, settings, the object its `JobKind.reference` names, as stored) -> Translation; pure and total
ReferencedTranslator = Callable[[Mapping[str, Any], ValidationSettings, Mapping[str, Any]], Translation]


@dataclass(frozen=True, slots=True)
class Reference:
    """Another hub object a source object's translation reads (a TrainJob's runtime, spec.runtimeRef): the caller
    looks it up (I/O) and passes it to `JobKind.translate_referenced`."""

    group: str
    version: str
    kind: str
    plural: str
    #: None for a cluster-scoped kind
    namespace: str | None
    name: str
    #: the source field that names it (where "does not exist" is reported)
    path: str
    #: the object to use when none of that name is stored (a built-in default), or None: not stored is an error
    fallback: Mapping[str, Any] | None = None
    #: the kind of the source object, for the message
    needed_by: str = "object"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def missing(self) -> FieldError:
        """The error when it is not stored and has no fallback (as Trainer's TrainJob webhook says it)."""
        where = f" in namespace {self.namespace}" if self.namespace is not None else ""
        lower = self.kind[0].lower() + self.kind[1:]
        return (self.path, f'Not found: {self.plural}.{self.group} "{self.name}"{where} not found: specified '
                           f"{lower} must be created before the {self.needed_by} is created")
#: (job name, namespace, TrainingJob role name, pod index in the role, the twin's annotations) -> PodContract
PodContractFn = Callable[[str, str, str, int, Mapping[str, str]], PodContract]


class StatusMirror(Protocol):
    """(source object, its twin TrainingJob or None when there is none yet, now as RFC 3339, why the twin cannot
    be made as "Reason: message" or None) -> the source's whole status. Pure; it keeps transition times from the
    source's current status where nothing changed, and sets the hub's `phase`, `cluster` and `epoch`."""

    def __call__(self, source: Mapping[str, Any], twin: Mapping[str, Any] | None, *, now: str,
                 blocked: str | None = None) -> JSON: ...


@dataclass(frozen=True, slots=True)
class InPlaceResize:
    """How the kind's own operator resizes one role of a running job in place (operator mode): the field the
    kind's scale subresource names (its specReplicasPath, what an HPA or `kubectl scale` patches), and the
    fields that bound it. Kinds without one (JobSet: replicatedJobs are immutable while the JobSet runs; TFJob,
    PaddleJob, MPIJob, batch Job: no elastic roles here) keep the size they were placed at in operator mode."""

    #: the twin role it resizes ("worker")
    role: str
    #: dotted path segments of the replica count in the object ("spec", "pytorchReplicaSpecs", "Worker", "replicas")
    replicas_path: tuple[str, ...]
    #: the bounds the operator holds the count to (an absent one defaults as the operator defaults it: to the
    #: other, or both to the replica count)
    min_path: tuple[str, ...]
    max_path: tuple[str, ...]
    #: the label the operator puts a pod's index within its role under (its pods do not carry the hub's)
    index_label: str


@dataclass(frozen=True, slots=True)
class JobKind:
    """One upstream kind the hub serves and translates."""

    group: str  # e.g. "kubeflow.org", "batch"
    version: str
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    #: the upstream OpenAPI v3 schema of the whole object (structural, as the CRD's or kube's OpenAPI publishes
    #: it), loaded from the JSON file `scripts/gen_job_kind_schemas.py` writes beside the kind's module
    schema: Mapping[str, Any]
    #: where the schema comes from: module@version and the file in it (cited in docs and the generated file)
    upstream: str
    #: the name the schema is published under in /openapi/v3 (e.g. "org.kubeflow.v1.PyTorchJob")
    openapi_name: str
    translate: Translator
    pod_contract: PodContractFn | None = None
    description: str = ""
    #: the source's status from its twin; None: the Kubeflow operators' (apis/jobkinds/kubeflowstatus.py)
    mirror_status: StatusMirror | None = None
    #: operator mode (issue 28): where the object keeps its suspend flag and its managedBy field (dotted path
    #: segments from the object's root); the member copy is created suspended and without managedBy
    suspend_path: tuple[str, ...] = ("spec", "suspend")
    managed_by_path: tuple[str, ...] = ("spec", "managedBy")
    #: the condition types (status True) of the kind's own operator that end a job, -> "Succeeded" | "Failed"
    terminal_conditions: Mapping[str, str] = field(default_factory=dict)
    #: False when the object has no pod templates the hub's gang labels and fields can go on (TrainJob: Trainer
    #: makes the pod templates from its runtime), so operator mode cannot run it as the hub's gang: rendered
    operator_copyable: bool = True
    #: operator mode: the status fields of the kind's own operator (besides its conditions) that the hub's object
    #: takes from the member copy, in place of those the kind's mirror computes from the hub's pod counts (e.g.
    #: JobSet's replicatedJobsStatus); each checked against `schema` and bounded (jobkinds.status.mirrored_status)
    mirrored_status_fields: tuple[str, ...] = ()
    #: a kind whose translation reads another object (TrainJob: its runtime): which one a source names (errors
    #: appended when it names none it may), and the translation given that object. `translate` alone then checks
    #: only what the source itself holds and gives spec None; the API server's admission and the twin controller
    #: look the object up and call `translate_referenced` (hub/kinds.py `translate_source`)
    reference: Callable[[Mapping[str, Any], list[FieldError]], Reference | None] | None = None
    translate_referenced: ReferencedTranslator | None = None
    #: how the kind's operator resizes a running job's elastic role in place (operator mode); None: it cannot,
    #: and an elastic gang of the kind that the member's operator runs keeps its placed size
    in_place_resize: InPlaceResize | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def source_key(self) -> str:
        """The value of SOURCE_KIND_ANNOTATION on this kind's twins."""
        return f"{self.kind}.{self.group}"


def load_upstream_schema(file_name: str) -> Mapping[str, Any]:
    """A schema file `scripts/gen_job_kind_schemas.py` wrote beside the kind modules (package data): its
    `schema`, `source`, names and group/version."""
    data = json.loads(resources.files("federator.apis.jobkinds").joinpath(file_name).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("schema"), dict):
        raise ValueError(f"{file_name}: not a job kind schema file")
    return data


def source_errors(errors: list[FieldError], translation: Translation) -> list[FieldError]:
    """Errors the TrainingJob validator found in `translation.spec` (paths of the twin), at the source object's
    paths: a role's template path through `role_paths`, its other fields beside it (replicas, restartPolicy),
    the rest through `field_paths`; a path neither names is reported at `spec`, naming the twin's field."""
    spec = translation.spec or {}
    raw = spec.get("roles")
    roles: list[Any] = raw if isinstance(raw, list) else []
    out: list[FieldError] = []
    for path, message in errors:
        out.append(_source_error(path, message, roles, translation))
    return out


def _source_error(path: str, message: str, roles: list[Any], translation: Translation) -> FieldError:
    if path == "metadata" or path.startswith("metadata."):
        return path, message
    if path.startswith("spec.roles["):
        close = path.find("]")
        index_text = path[len("spec.roles["):close]
        rest = path[close + 1:]
        if index_text.isdigit() and int(index_text) < len(roles) and isinstance(roles[int(index_text)], Mapping):
            template_path = translation.role_paths.get(str(roles[int(index_text)].get("name")))
            if template_path is not None:
                if rest == ".template" or rest.startswith(".template.") or rest.startswith(".template["):
                    return template_path + rest[len(".template"):], message
                return template_path.removesuffix(".template") + rest, message
    best = max((p for p in translation.field_paths if path == p or path.startswith(p + ".")
                or path.startswith(p + "[")), key=len, default=None)
    if best is not None:
        return translation.field_paths[best] + path[len(best):], message
    return "spec", f"{message} (field {path} of the TrainingJob the hub makes of this object)"


def twin_trainingjob(kind: JobKind, source: Mapping[str, Any], translation: Translation) -> JSON:
    """The twin TrainingJob of a source object (its metadata as stored: name, namespace, uid) and its
    translation: same namespace and name and labels, owned by the source (controller), annotated with the source
    kind and the translation's annotations."""
    raw = source.get("metadata")
    meta: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    labels = meta.get("labels")
    owner: JSON = {"apiVersion": kind.api_version, "kind": kind.kind, "name": meta.get("name", ""),
                   "controller": True, "blockOwnerDeletion": True}
    if isinstance(meta.get("uid"), str):
        owner["uid"] = meta["uid"]
    twin_meta: JSON = {
        "name": meta.get("name", ""), "namespace": meta.get("namespace", ""),
        "annotations": {**translation.annotations, SOURCE_KIND_ANNOTATION: kind.source_key},
        "ownerReferences": [owner],
    }
    if isinstance(labels, Mapping) and labels:
        twin_meta["labels"] = dict(labels)
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob", "metadata": twin_meta,
            "spec": dict(translation.spec or {})}
