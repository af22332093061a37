"""trainer.kubeflow.org/v1alpha1 TrainJob as a gang (issue 28; upstream github.com/kubeflow/trainer/v2@v2.0.0).

A TrainJob names a (Cluster)TrainingRuntime (spec.runtimeRef) that holds most of the job: the pod template, the
ML policy (numNodes, torch's numProcPerNode). The hub serves no TrainingRuntime or ClusterTrainingRuntime kind, so
it knows exactly one runtime, the one Trainer v2.0.0 installs by default for PyTorch:
``ClusterTrainingRuntime torch-distributed`` (manifests/base/runtimes/torch_distributed.yaml: one replicatedJob
`node` of one Job, container `node`, image pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime, mlPolicy numNodes 1,
torch numProcPerNode auto). Every other runtimeRef is a 422 at spec.runtimeRef (kind TrainingRuntime, another
apiGroup, another name): resolving those needs the runtime objects, which is the part of issue 28 left to do.

The twin: framework pytorch with port 29500 (Trainer's ContainerTrainerPort, which its torch plugin puts in
PET_MASTER_PORT) and nprocPerNode from spec.trainer.numProcPerNode (else the runtime's, auto); one role `worker`
(the hub's pytorch role; worker 0 is the rendezvous host, as the torch plugin makes node 0) of spec.trainer.numNodes
pods (else the runtime's 1), restartPolicy OnFailure (JobSet's default for the runtime's Job) and backoffLimit 6
(the Job's default); its pod is the runtime's `node` container with spec.trainer's image, command, args (each
replacing the runtime's when set), env (added; the torch plugin's reserved PET_NNODES, PET_NPROC_PER_NODE,
PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT are refused, as Trainer's webhook refuses them) and
resourcesPerNode (the container's resources). spec.podSpecOverrides aimed at the job `node` apply their
serviceAccountName, nodeSelector, tolerations, volumes, schedulingGates and the `node` container's env and
volumeMounts; one aimed at another job, or at another container, is refused (the runtime has none).
spec.initializer is refused (torch-distributed has no initializer jobs). spec.managedBy: absent or Trainer's own
controller (trainer.kubeflow.org/trainjob-controller). spec.suspend -> the twin's. spec.labels and
spec.annotations go on Trainer's JobSet, not on pods: operator mode only. Queue, priority class, placement and
failover: the labels and annotations (hints.py).

The pod contract: Trainer runs a TrainJob as a JobSet of its own name with the replicatedJob `node` of one Job
whose parallelism is numNodes, so the pods carry that JobSet's and Job's labels, annotations and
JOB_COMPLETION_INDEX (jobset.py), and its DNS names: hostname `<name>-node-0-<i>`, subdomain `<name>` (a headless
Service of that name). The PET_* variables are the pytorch framework's (delegation/frameworks.py), not the
contract's; they name those hosts, so PET_MASTER_ADDR is `<name>-node-0-0.<name>`, as Trainer's torch plugin
writes it.

Pure: no I/O; imports only `federator.apis` modules.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Final

from federator.apis.common import FieldError, ValidationSettings, json_type
from federator.apis.jobkinds.base import JobKind, PodContract, Translation, load_upstream_schema
from federator.apis.jobkinds.batchjob import (
    CONTRACT_ANNOTATION,
    merge_hints,
    read_contract,
    shown,
    spec_of,
)
from federator.apis.jobkinds.jobset import DEFAULT_GROUP, jobset_pods
from federator.apis.jobkinds.status import condition, existing_conditions, failure, hub_fields, suspension, twin_state
from federator.apis.trainingjob import DEFAULT_BACKOFF_LIMIT

__all__ = ["BUILTIN_RUNTIMES", "TRAINER_CONTROLLER", "TRAINJOB", "trainjob_pod_contract", "trainjob_status",
           "translate_trainjob"]

TRAINER_CONTROLLER: Final = "trainer.kubeflow.org/trainjob-controller"
RUNTIME_GROUP: Final = "trainer.kubeflow.org"
RUNTIME_KIND: Final = "ClusterTrainingRuntime"
#: Trainer's constants.ContainerTrainerPort (the torch plugin's PET_MASTER_PORT)
TRAINER_PORT: Final = 29500
#: the replicatedJob and container of the trainer step in the torch runtime (constants.Node)
NODE: Final = "node"
ROLE: Final = "worker"
#: torchrun's variables the torch plugin sets and a TrainJob may not (constants.TorchRunReservedEnvNames)
RESERVED_ENV: Final = frozenset({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                                 "PET_MASTER_PORT"})

#: the ClusterTrainingRuntimes the hub knows without serving the kind: name -> what the translation takes of it
#: (github.com/kubeflow/trainer/v2@v2.0.0 manifests/base/runtimes/torch_distributed.yaml, as it is there)
BUILTIN_RUNTIMES: Final[Mapping[str, Mapping[str, Any]]] = {
    "torch-distributed": {
        "numNodes": 1,
        "numProcPerNode": "auto",
        "container": {
            "name": NODE,
            "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
            "command": ["/bin/bash", "-c", 'echo "Torch Distributed Runtime"\n\necho "--------------------------------'
                        '------"\necho "Torch Default Runtime Env"\nenv | grep PET_\n\npip list\n'],
        },
    },
}

def _typed(value: object, kind: type, path: str, errors: list[FieldError]) -> Any:
    """value when it is of `kind` (None stays None), else an error and None."""
    if value is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    name = {str: "string", int: "integer", list: "array", dict: "object", bool: "boolean"}.get(kind, kind.__name__)
    errors.append((path, f"Invalid value: {shown(value)}: must be of type {name}"))
    return None


def _runtime(ref: object, errors: list[FieldError]) -> Mapping[str, Any] | None:
    if not isinstance(ref, Mapping):
        errors.append(("spec.runtimeRef", "Required value" if ref is None
                       else f"Invalid value: {json_type(ref)}: must be of type object"))
        return None
    known = ", ".join(f'"{n}"' for n in BUILTIN_RUNTIMES)
    group, kind, name = ref.get("apiGroup", RUNTIME_GROUP), ref.get("kind", RUNTIME_KIND), ref.get("name")
    if group != RUNTIME_GROUP:
        errors.append(("spec.runtimeRef.apiGroup", f'Unsupported value: {shown(group)}: supported values: '
                                                   f'"{RUNTIME_GROUP}"'))
    if kind != RUNTIME_KIND:
        errors.append(("spec.runtimeRef.kind", f"Unsupported value: {shown(kind)}: supported values: "
                                               f'"{RUNTIME_KIND}" (the hub serves no TrainingRuntime: it knows '
                                               f"the built-in ClusterTrainingRuntimes {known})"))
    if not isinstance(name, str):
        errors.append(("spec.runtimeRef.name", "Required value" if name is None
                       else f"Invalid value: {json_type(name)}: must be of type string"))
        return None
    if name not in BUILTIN_RUNTIMES:
        errors.append(("spec.runtimeRef.name", f"Unsupported value: {shown(name)}: supported values: {known} "
                                               "(the hub does not serve ClusterTrainingRuntimes: it knows the "
                                               "ones Trainer v2.0.0 installs for PyTorch)"))
        return None
    return BUILTIN_RUNTIMES[name]


def _nproc(value: object, errors: list[FieldError]) -> str | None:
    if value is None:
        return None
    if type(value) is int and 1 <= value <= 9999:
        return str(value)
    if isinstance(value, str) and value in ("auto", "cpu", "gpu"):
        return value
    errors.append(("spec.trainer.numProcPerNode", f"Invalid value: {shown(value)}: must be a number from 1 to "
                                                  '9999, "auto", "cpu" or "gpu"'))
    return None


def _env(value: object, path: str, errors: list[FieldError]) -> list[Any]:
    items = _typed(value, list, path, errors) or []
    for index, item in enumerate(items):
        name = item.get("name") if isinstance(item, Mapping) else None
        if isinstance(name, str) and name in RESERVED_ENV:
            errors.append((f"{path}[{index}].name", f"Invalid value: {shown(name)}: must not be one of the "
                                                    f"torch plugin's reserved variables {sorted(RESERVED_ENV)}"))
    return list(items)


def _apply_overrides(overrides: object, pod: dict[str, Any], container: dict[str, Any],
                     errors: list[FieldError]) -> None:
    for index, override in enumerate(_typed(overrides, list, "spec.podSpecOverrides", errors) or ()):
        path = f"spec.podSpecOverrides[{index}]"
        if not isinstance(override, Mapping):
            errors.append((path, f"Invalid value: {json_type(override)}: must be of type object"))
            continue
        for t_index, target in enumerate(_typed(override.get("targetJobs"), list, f"{path}.targetJobs", errors)
                                         or ()):
            name = target.get("name") if isinstance(target, Mapping) else target
            if name != NODE:
                errors.append((f"{path}.targetJobs[{t_index}].name", f'Unsupported value: {shown(name)}: supported '
                                                                     f'values: "{NODE}" (the runtime\'s only job)'))
        for key, kind in (("serviceAccountName", str), ("nodeSelector", dict)):
            value = _typed(override.get(key), kind, f"{path}.{key}", errors)
            if value is not None:
                pod[key] = value
        for key in ("tolerations", "volumes", "schedulingGates"):
            value = _typed(override.get(key), list, f"{path}.{key}", errors)
            if value:
                pod[key] = [*pod.get(key, []), *value]
        if override.get("initContainers"):
            errors.append((f"{path}.initContainers", "Forbidden: the runtime's pods have no init containers"))
        for c_index, change in enumerate(_typed(override.get("containers"), list, f"{path}.containers", errors)
                                         or ()):
            c_path = f"{path}.containers[{c_index}]"
            name = change.get("name") if isinstance(change, Mapping) else None
            if name != NODE or not isinstance(change, Mapping):
                errors.append((f"{c_path}.name", f'Unsupported value: {shown(name)}: supported values: "{NODE}" '
                                                 "(the runtime's only container)"))
                continue
            env = _env(change.get("env"), f"{c_path}.env", errors)
            if env:
                container["env"] = [*container.get("env", []), *env]
            mounts = _typed(change.get("volumeMounts"), list, f"{c_path}.volumeMounts", errors)
            if mounts:
                container["volumeMounts"] = [*container.get("volumeMounts", []), *mounts]


def translate_trainjob(obj: Mapping[str, Any], settings: ValidationSettings) -> Translation:
    """A TrainJob's twin TrainingJob spec (the module docstring's rules), or its errors at the TrainJob's paths."""
    source, errors = spec_of(obj)
    if source is None:
        return Translation(spec=None, errors=errors)
    runtime = _runtime(source.get("runtimeRef"), errors)
    managed_by = source.get("managedBy")
    if managed_by is not None and managed_by != TRAINER_CONTROLLER:
        errors.append(("spec.managedBy", f"Unsupported value: {shown(managed_by)}: supported values: "
                                         f'"{TRAINER_CONTROLLER}" (or leave it out: the hub manages the TrainJob)'))
    if source.get("initializer") is not None:
        errors.append(("spec.initializer", "Forbidden: the runtime has no initializer jobs (dataset or model)"))
    suspend = _typed(source.get("suspend"), bool, "spec.suspend", errors)
    trainer = _typed(source.get("trainer"), dict, "spec.trainer", errors) or {}
    if not isinstance(trainer, Mapping):
        trainer = {}
    runtime = runtime or BUILTIN_RUNTIMES["torch-distributed"]
    container: dict[str, Any] = copy.deepcopy(dict(runtime["container"]))
    image = _typed(trainer.get("image"), str, "spec.trainer.image", errors)
    if image is not None:
        container["image"] = image
    for key in ("command", "args"):
        value = _typed(trainer.get(key), list, f"spec.trainer.{key}", errors)
        if value is not None:
            container[key] = value
    env = _env(trainer.get("env"), "spec.trainer.env", errors)
    if env:
        container["env"] = env
    resources = _typed(trainer.get("resourcesPerNode"), dict, "spec.trainer.resourcesPerNode", errors)
    if resources is not None:
        container["resources"] = resources
    nodes = trainer.get("numNodes", runtime["numNodes"])
    if type(nodes) is not int or nodes < 1:
        errors.append(("spec.trainer.numNodes", f"Invalid value: {shown(nodes)}: must be an integer of at least 1"))
    elif nodes > settings.max_replicas_per_role:
        errors.append(("spec.trainer.numNodes", f"Invalid value: {nodes}: must be less than or equal to "
                                                f"{settings.max_replicas_per_role} (the hub's pods per role)"))
    nproc = _nproc(trainer.get("numProcPerNode"), errors) or str(runtime["numProcPerNode"])
    pod: dict[str, Any] = {}
    _apply_overrides(source.get("podSpecOverrides"), pod, container, errors)
    spec: dict[str, Any] = {}
    errors += merge_hints(spec, obj.get("metadata"), priority_class=None, priority_path="", settings=settings)
    if errors:
        return Translation(spec=None, errors=errors)
    assert type(nodes) is int
    spec.update({
        "framework": "pytorch",
        "frameworkSettings": {"port": TRAINER_PORT, "nprocPerNode": nproc},
        "roles": [{"name": ROLE, "replicas": nodes, "restartPolicy": "OnFailure",
                   "template": {"spec": {**pod, "containers": [container]}}}],
        "backoffLimit": DEFAULT_BACKOFF_LIMIT,
        "suspend": bool(suspend),
    })
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    contract: dict[str, Any] = {
        "replicatedJobs": [{"name": NODE, "replicas": 1, "parallelism": nodes, "indexed": True,
                            "group": DEFAULT_GROUP}],
        "dnsHostnames": True, "subdomain": name if isinstance(name, str) else ""}
    # no role_paths: the pod is assembled from the runtime and several TrainJob fields, no one source path holds
    # it, so an error the TrainingJob validator finds in it is reported at spec, naming the twin's field
    return Translation(spec=spec,
                       annotations={CONTRACT_ANNOTATION: json.dumps(contract, separators=(",", ":"))})


def trainjob_pod_contract(job_name: str, namespace: str, role: str, index: int,
                          annotations: Mapping[str, str]) -> PodContract:
    """`JobKind.pod_contract` of TrainJob: pod `index` of the worker role is pod `index` of Trainer's JobSet
    `job_name`, replicatedJob `node`, Job 0."""
    contract = read_contract(annotations)
    if not contract:  # a twin without the annotation: one Job of the role's pods, numbered as Trainer does
        contract = {"replicatedJobs": [{"name": NODE, "replicas": 1, "parallelism": index + 1, "indexed": True}]}
    return jobset_pods(job_name, namespace, NODE, index, contract)


def trainjob_status(source: Mapping[str, Any], twin: Mapping[str, Any] | None, *, now: str,
                    blocked: str | None = None) -> dict[str, Any]:
    """`JobKind.mirror_status` of TrainJob: the conditions Trainer v2.0.0's controller writes, from the twin:
    Suspended (Suspended "TrainJob is suspended", then False Resumed "TrainJob is resumed"), Complete and Failed
    as it copies them from its JobSet (AllJobsCompleted "jobset completed successfully"; FailedJobs "jobset failed
    due to one or more job failures", or the twin's reason and message when it failed otherwise, e.g.
    ClusterLost); plus the hub's phase, cluster and epoch. Without a twin (or `blocked`: the controller's Event
    says why) only the hub's phase Pending."""
    if twin is None:
        return hub_fields({}, None)
    state = twin_state(twin)
    existing = existing_conditions(source)
    conditions = suspension(existing, state, now, ("Suspended", "TrainJob is suspended"),
                            ("Resumed", "TrainJob is resumed"))
    if state.phase == "Succeeded":
        conditions.append(condition(existing, "Complete", "True", "AllJobsCompleted",
                                    "jobset completed successfully", now))
    if state.phase == "Failed":
        reason, message = failure(state, "FailedJobs", "jobset failed due to one or more job failures")
        conditions.append(condition(existing, "Failed", "True", reason, message, now))
    status: dict[str, Any] = {"conditions": conditions} if conditions else {}
    return hub_fields(status, state)


_SCHEMA = load_upstream_schema("trainjobs.json")

TRAINJOB = JobKind(
    group="trainer.kubeflow.org", version="v1alpha1", kind="TrainJob", plural="trainjobs", singular="trainjob",
    short_names=tuple(_SCHEMA.get("shortNames") or ()), schema=_SCHEMA["schema"], upstream=str(_SCHEMA["source"]),
    openapi_name="org.kubeflow.trainer.v1alpha1.TrainJob", translate=translate_trainjob,
    pod_contract=trainjob_pod_contract, mirror_status=trainjob_status,
    description="Trainer's TrainJob on the built-in torch-distributed runtime: framework pytorch, numNodes workers.",
    terminal_conditions={"Complete": "Succeeded", "Failed": "Failed"}, operator_copyable=False,
)
