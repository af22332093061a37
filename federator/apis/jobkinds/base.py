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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from federator.apis.common import FieldError, ValidationSettings

__all__ = ["JobKind", "PodContract", "Translation"]

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Translation:
    """What `JobKind.translate` makes of one source object.

    `spec` is the TrainingJob spec of the twin (None when `errors` is not empty). `errors` are kube-style
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


@dataclass(frozen=True, slots=True)
class PodContract:
    """What the kind's own operator puts on each pod it creates, beyond the framework's environment
    (delegation/frameworks.py): labels, annotations and env, so that code and tooling written for the operator
    cannot tell the hub rendered the pod (e.g. training.kubeflow.org/replica-index, JobSet's
    jobset.sigs.k8s.io/job-index, batch.kubernetes.io/job-completion-index and JOB_COMPLETION_INDEX)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    env: tuple[JSON, ...] = ()


#: (source object, settings) -> Translation. Pure and total: a malformed object gives errors, never an exception.
Translator = Callable[[Mapping[str, Any], ValidationSettings], Translation]
#: (job name, namespace, TrainingJob role name, pod index in the role, the twin's annotations) -> PodContract
PodContractFn = Callable[[str, str, str, int, Mapping[str, str]], PodContract]


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

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"
