"""Trainer's runtimes (issue 28; upstream github.com/kubeflow/trainer/v2@v2.0.0): the cluster-scoped
ClusterTrainingRuntime and the namespaced TrainingRuntime of trainer.kubeflow.org/v1alpha1, which a TrainJob names
in spec.runtimeRef.

The hub serves both with their upstream schemas (clustertrainingruntimes.json and trainingruntimes.json beside this
module, written by scripts/gen_job_kind_schemas.py from manifests/base/crds/ at v2.0.0), so Trainer's own runtime
manifests (manifests/base/runtimes/*.yaml) apply as they are. A runtime is stored as given: its validation is
Trainer's webhook's (pkg/webhooks/trainingruntime_webhook.go validateReplicatedJobs: a replicatedJob named
`launcher`, or one whose template carries trainer.kubeflow.org/trainjob-ancestor-step trainer,
dataset-initializer or model-initializer, has replicas 1). Whether the hub's gang can express a runtime is asked
when a TrainJob names it (trainjob.py), not when it is stored: Trainer keeps runtimes it cannot run too.

`RUNTIME_KINDS` are what the hub serves (hub/kinds.py `runtime_type`); `runtime_reference` reads a TrainJob's
spec.runtimeRef into the `Reference` the caller looks up (Trainer's registry key: kind, default
ClusterTrainingRuntime; apiGroup, default trainer.kubeflow.org; a TrainingRuntime is looked up in the TrainJob's
namespace).

The built-in default: `BUILTIN_TORCH_DISTRIBUTED` is Trainer's manifests/base/runtimes/torch_distributed.yaml as it
is at v2.0.0. A TrainJob naming ClusterTrainingRuntime torch-distributed while no ClusterTrainingRuntime of that
name is stored runs on it (so a hub without Trainer's runtimes applied runs the PyTorch default, as it did before
the hub served runtimes); a stored one of that name always wins.

Pure: no I/O; imports only `federator.apis` modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from federator.apis.common import FieldError, dns1123_subdomain_errors, json_type
from federator.apis.jobkinds.base import Reference, load_upstream_schema
from federator.apis.jobkinds.batchjob import shown

__all__ = ["ANCESTOR_LABEL", "BUILTIN_TORCH_DISTRIBUTED", "CLUSTER_RUNTIME", "RUNTIME_GROUP", "RUNTIME_KINDS",
           "TRAINING_RUNTIME", "RuntimeKind", "runtime_reference", "validate_runtime"]

RUNTIME_GROUP: Final = "trainer.kubeflow.org"
RUNTIME_VERSION: Final = "v1alpha1"
#: constants.LabelTrainJobAncestor: on a replicatedJob's template, which step of a TrainJob it is
ANCESTOR_LABEL: Final = "trainer.kubeflow.org/trainjob-ancestor-step"
#: constants.AncestorTrainer, DatasetInitializer, ModelInitializer
ANCESTORS: Final = frozenset({"trainer", "dataset-initializer", "model-initializer"})
#: constants.Launcher
LAUNCHER: Final = "launcher"


@dataclass(frozen=True, slots=True)
class RuntimeKind:
    """One of Trainer's runtime kinds as the hub serves it."""

    kind: str
    plural: str
    singular: str
    namespaced: bool
    schema: Mapping[str, Any]
    upstream: str
    openapi_name: str
    description: str

    group: str = RUNTIME_GROUP
    version: str = RUNTIME_VERSION

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


def _kind(file_name: str, namespaced: bool, description: str) -> RuntimeKind:
    data = load_upstream_schema(file_name)
    return RuntimeKind(kind=str(data["kind"]), plural=str(data["plural"]), singular=str(data["singular"]),
                       namespaced=namespaced, schema=data["schema"], upstream=str(data["source"]),
                       openapi_name=f"org.kubeflow.trainer.v1alpha1.{data['kind']}", description=description)


CLUSTER_RUNTIME: Final = _kind(
    "clustertrainingruntimes.json", False,
    "Trainer's cluster-wide blueprint of a TrainJob (JobSet template, ML policy); TrainJobs of every namespace "
    "name it in spec.runtimeRef.")
TRAINING_RUNTIME: Final = _kind(
    "trainingruntimes.json", True,
    "Trainer's namespaced blueprint of a TrainJob (JobSet template, ML policy); TrainJobs of its namespace name "
    "it in spec.runtimeRef (kind TrainingRuntime).")
RUNTIME_KINDS: Final = (CLUSTER_RUNTIME, TRAINING_RUNTIME)

_TORCH_COMMAND: Final = ('echo "Torch Distributed Runtime"\n\necho "--------------------------------------"\n'
                         'echo "Torch Default Runtime Env"\nenv | grep PET_\n\npip list\n')
#: github.com/kubeflow/trainer/v2@v2.0.0 manifests/base/runtimes/torch_distributed.yaml, as it is there
BUILTIN_TORCH_DISTRIBUTED: Final[Mapping[str, Any]] = {
    "apiVersion": CLUSTER_RUNTIME.api_version, "kind": CLUSTER_RUNTIME.kind,
    "metadata": {"name": "torch-distributed"},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
        "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {
                "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                "spec": {"template": {"spec": {"containers": [{
                    "name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                    "command": ["/bin/bash", "-c", _TORCH_COMMAND]}]}}},
            },
        }]}},
    },
}


def validate_runtime(obj: Mapping[str, Any]) -> list[FieldError]:
    """Trainer's webhook on a (Cluster)TrainingRuntime create or update (validateReplicatedJobs): the launcher and
    every job of a TrainJob step (the ancestor label) have replicas 1 (JobSet's default)."""
    spec = obj.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    jobset = template.get("spec") if isinstance(template, Mapping) else None
    jobs = jobset.get("replicatedJobs") if isinstance(jobset, Mapping) else None
    errors: list[FieldError] = []
    for index, job in enumerate(jobs if isinstance(jobs, list) else ()):
        if not isinstance(job, Mapping):
            continue
        replicas = job.get("replicas", 1)
        job_template = job.get("template")
        meta = job_template.get("metadata") if isinstance(job_template, Mapping) else None
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        ancestor = labels.get(ANCESTOR_LABEL) if isinstance(labels, Mapping) else None
        if replicas != 1 and (job.get("name") == LAUNCHER or ancestor in ANCESTORS):
            errors.append((f"spec.template.spec.replicatedJobs[{index}].replicas",
                           f"Invalid value: {shown(replicas)}: always must be 1"))
    return errors


def runtime_reference(trainjob: Mapping[str, Any], errors: list[FieldError]) -> Reference | None:
    """The runtime a TrainJob's spec.runtimeRef names (errors at spec.runtimeRef.* when it names none the hub
    serves); the built-in torch-distributed is its fallback when it names ClusterTrainingRuntime
    torch-distributed."""
    spec = trainjob.get("spec")
    ref = spec.get("runtimeRef") if isinstance(spec, Mapping) else None
    if not isinstance(ref, Mapping):
        errors.append(("spec.runtimeRef", "Required value" if ref is None
                       else f"Invalid value: {json_type(ref)}: must be of type object"))
        return None
    group, kind, name = ref.get("apiGroup", RUNTIME_GROUP), ref.get("kind", CLUSTER_RUNTIME.kind), ref.get("name")
    found: RuntimeKind | None = None
    if group != RUNTIME_GROUP:
        errors.append(("spec.runtimeRef.apiGroup", f'Unsupported value: {shown(group)}: supported values: '
                                                   f'"{RUNTIME_GROUP}"'))
    else:
        found = next((k for k in RUNTIME_KINDS if k.kind == kind), None)
        if found is None:
            errors.append(("spec.runtimeRef.kind", f"Unsupported value: {shown(kind)}: supported values: "
                                                   + ", ".join(f'"{k.kind}"' for k in RUNTIME_KINDS)))
    if not isinstance(name, str) or not name:
        errors.append(("spec.runtimeRef.name", "Required value" if name is None or name == ""
                       else f"Invalid value: {json_type(name)}: must be of type string"))
        return None
    bad_name = dns1123_subdomain_errors(name)
    if bad_name:
        errors.append(("spec.runtimeRef.name", f"Invalid value: {shown(name)}: {bad_name[0]}"))
        return None
    if found is None:
        return None
    meta = trainjob.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    if found.namespaced and not isinstance(namespace, str):
        return None  # a TrainJob without a namespace (the API server gives it one before admission)
    fallback = BUILTIN_TORCH_DISTRIBUTED if found is CLUSTER_RUNTIME and name == "torch-distributed" else None
    return Reference(group=found.group, version=found.version, kind=found.kind, plural=found.plural,
                     namespace=namespace if found.namespaced else None, name=name, path="spec.runtimeRef.name",
                     fallback=fallback, needed_by="TrainJob")
