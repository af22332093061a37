"""trainer.kubeflow.org/v1alpha1 TrainJob as a gang (issue 28; upstream github.com/kubeflow/trainer/v2@v2.0.0).

A TrainJob names a (Cluster)TrainingRuntime (spec.runtimeRef) that holds most of the job: the pod template, the
ML policy (numNodes, torch's numProcPerNode). The hub serves both runtime kinds (runtimes.py); the translation is
pure and takes the runtime as an input: `translate_trainjob` (`JobKind.translate`) checks only what the TrainJob
holds and gives no spec, `translate_trainjob_on(obj, settings, runtime)` (`JobKind.translate_referenced`) makes
the twin; admission and the twin controller look the runtime up (hub/kinds.py `translate_source`: the stored one,
else the built-in torch-distributed for ClusterTrainingRuntime torch-distributed, else a 422 at
spec.runtimeRef.name that it does not exist).

The runtime shapes the gang runs (`runtime_shape`; anything else is an error at spec.runtimeRef naming the
runtime's field): one replicatedJob (replicas 1: the trainer's Job, named `node` in Trainer's runtimes) whose pod
has the container `node` (constants.Node); mlPolicy numNodes (default 1) and torch numProcPerNode (default auto),
or no torch policy (plainml: framework none). Refused: mlPolicy.mpi (Trainer's MPI runtimes need a launcher
Job beside the nodes), torch.elasticPolicy, initializer jobs, several replicatedJobs. Not read: podGroupPolicy
(the hub gangs every job) and the JobSet's network, success and failure policies.

The twin: framework pytorch with port 29500 (Trainer's ContainerTrainerPort, which its torch plugin puts in
PET_MASTER_PORT) and nprocPerNode from spec.trainer.numProcPerNode (else the runtime's), or framework none; one
role `worker` (the hub's pytorch role; worker 0 is the rendezvous host, as the torch plugin makes node 0) of
spec.trainer.numNodes pods (else the runtime's), restartPolicy the runtime pod's (else OnFailure, JobSet's
default for the runtime's Job) and backoffLimit the runtime Job's (else 6, the Job's default); its pod template
is the runtime Job's with, on the `node` container, spec.trainer's image, command, args (each replacing the
runtime's when set), env (merged by name over the runtime's; the torch plugin's reserved PET_NNODES,
PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT are refused, as Trainer's webhook refuses
them) and resourcesPerNode (the container's resources). spec.podSpecOverrides aimed at the runtime's job apply
their serviceAccountName, nodeSelector, tolerations, volumes, schedulingGates and a runtime container's env and
volumeMounts; one aimed at another job, or at another container, is refused. spec.initializer is refused (the hub
runs no initializer jobs). spec.managedBy: absent or Trainer's own controller
(trainer.kubeflow.org/trainjob-controller). spec.suspend -> the twin's. spec.labels and spec.annotations go on
Trainer's JobSet, not on pods: operator mode only. Queue, priority class, placement and failover: the labels and
annotations (hints.py).

The pod contract: Trainer runs a TrainJob as a JobSet of its own name with the runtime's replicatedJob (`node`) of
one Job whose parallelism is numNodes, so the pods carry that JobSet's and Job's labels, annotations and
JOB_COMPLETION_INDEX (jobset.py), and its DNS names: hostname `<name>-<replicatedJob>-0-<i>`, subdomain `<name>`
(a headless Service of that name). The PET_* variables are the pytorch framework's (delegation/frameworks.py), not
the contract's; they name those hosts, so PET_MASTER_ADDR is `<name>-node-0-0.<name>` under Trainer's runtimes, as
Trainer's torch plugin writes it.

Pure: no I/O; imports only `federator.apis` modules.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
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
from federator.apis.jobkinds.runtimes import ANCESTOR_LABEL, RUNTIME_GROUP, RUNTIME_KINDS, runtime_reference
from federator.apis.jobkinds.status import condition, existing_conditions, failure, hub_fields, suspension, twin_state
from federator.apis.trainingjob import DEFAULT_BACKOFF_LIMIT

__all__ = ["TRAINER_CONTROLLER", "TRAINJOB", "RuntimeShape", "runtime_shape", "trainjob_pod_contract",
           "trainjob_status", "translate_trainjob", "translate_trainjob_on"]

TRAINER_CONTROLLER: Final = "trainer.kubeflow.org/trainjob-controller"
#: Trainer's constants.ContainerTrainerPort (the torch plugin's PET_MASTER_PORT)
TRAINER_PORT: Final = 29500
#: the replicatedJob and container of the trainer step in the torch runtime (constants.Node)
NODE: Final = "node"
ROLE: Final = "worker"
#: torchrun's variables the torch plugin sets and a TrainJob may not (constants.TorchRunReservedEnvNames)
RESERVED_ENV: Final = frozenset({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                                 "PET_MASTER_PORT"})

def _typed(value: object, kind: type, path: str, errors: list[FieldError]) -> Any:
    """value when it is of `kind` (None stays None), else an error and None."""
    if value is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    name = {str: "string", int: "integer", list: "array", dict: "object", bool: "boolean"}.get(kind, kind.__name__)
    errors.append((path, f"Invalid value: {shown(value)}: must be of type {name}"))
    return None


def _nproc(value: object, path: str, errors: list[FieldError]) -> str | None:
    if value is None:
        return None
    if type(value) is int and 1 <= value <= 9999:
        return str(value)
    if isinstance(value, str) and value in ("auto", "cpu", "gpu"):
        return value
    errors.append((path, f'Invalid value: {shown(value)}: must be a number from 1 to 9999, "auto", "cpu" or "gpu"'))
    return None


def _env(value: object, path: str, errors: list[FieldError]) -> list[Any]:
    items = _typed(value, list, path, errors) or []
    for index, item in enumerate(items):
        name = item.get("name") if isinstance(item, Mapping) else None
        if isinstance(name, str) and name in RESERVED_ENV:
            errors.append((f"{path}[{index}].name", f"Invalid value: {shown(name)}: must not be one of the "
                                                    f"torch plugin's reserved variables {sorted(RESERVED_ENV)}"))
    return list(items)


def _merged_env(base: object, added: list[Any]) -> list[Any]:
    """The runtime container's env with the TrainJob's: an entry of the same name replaced, the others added."""
    names = {item.get("name") for item in added if isinstance(item, Mapping) and isinstance(item.get("name"), str)}
    kept = [item for item in base if not (isinstance(item, Mapping) and isinstance(item.get("name"), str)
                                          and item["name"] in names)] \
        if isinstance(base, list) else []
    return [*kept, *added]


@dataclass(frozen=True, slots=True)
class RuntimeShape:
    """What the translation takes of a (Cluster)TrainingRuntime whose JobSet the hub's gang can express: one
    replicatedJob (the trainer's, one Job of numNodes pods) and an ML policy of torch or none (plain)."""

    job: str  # the replicatedJob's name
    nodes: int  # mlPolicy.numNodes (default 1)
    framework: str  # "pytorch" (mlPolicy.torch) | "none"
    nproc: str | None  # mlPolicy.torch.numProcPerNode (default auto)
    template: Mapping[str, Any]  # the Job's pod template (metadata and spec)
    backoff_limit: int


def _runtime_error(runtime: Mapping[str, Any], field: str, message: str) -> FieldError:
    meta = runtime.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return ("spec.runtimeRef", f"Invalid value: {shown(name)}: {runtime.get('kind')} {shown(name)}: {field}: "
                               f"{message}")


def runtime_shape(runtime: object, errors: list[FieldError]) -> RuntimeShape | None:
    """The shape of a runtime as stored (any input: errors at spec.runtimeRef, naming the runtime's field, for what
    the hub's gang cannot express)."""
    if not isinstance(runtime, Mapping) or runtime.get("kind") not in [k.kind for k in RUNTIME_KINDS] \
            or runtime.get("apiVersion") != f"{RUNTIME_GROUP}/v1alpha1" or not isinstance(runtime.get("spec"),
                                                                                           Mapping):
        errors.append(("spec.runtimeRef", "Invalid value: the named object is not a trainer.kubeflow.org/v1alpha1 "
                                          "ClusterTrainingRuntime or TrainingRuntime with a spec"))
        return None
    before = len(errors)
    spec = runtime["spec"]
    policy = spec.get("mlPolicy") if spec.get("mlPolicy") is not None else {}
    framework, nproc, nodes = "none", None, 1
    if not isinstance(policy, Mapping):
        errors.append(_runtime_error(runtime, "spec.mlPolicy", "must be of type object"))
        policy = {}
    if policy.get("numNodes") is not None:
        nodes = policy["numNodes"]
        if type(nodes) is not int or nodes < 1:
            errors.append(_runtime_error(runtime, "spec.mlPolicy.numNodes", f"Invalid value {shown(nodes)}: must "
                                                                            "be an integer of at least 1"))
    if policy.get("mpi") is not None:
        errors.append(_runtime_error(runtime, "spec.mlPolicy.mpi", "Unsupported: the hub runs no MPI runtime (its "
                                                                  "launcher and node Jobs); run an MPIJob instead"))
    torch = policy.get("torch")
    if torch is not None:
        framework = "pytorch"
        if not isinstance(torch, Mapping):
            errors.append(_runtime_error(runtime, "spec.mlPolicy.torch", "must be of type object"))
        else:
            if torch.get("elasticPolicy") is not None:
                errors.append(_runtime_error(runtime, "spec.mlPolicy.torch.elasticPolicy",
                                             "Unsupported: the hub runs no elastic TrainJob (its gang has fixed "
                                             "numNodes); use a PyTorchJob's elasticPolicy"))
            raw = torch.get("numProcPerNode", "auto")
            nproc = _nproc(raw, "spec.runtimeRef", [])
            if nproc is None:
                errors.append(_runtime_error(runtime, "spec.mlPolicy.torch.numProcPerNode",
                                             f'Invalid value {shown(raw)}: must be a number from 1 to 9999, '
                                             '"auto", "cpu" or "gpu"'))
    template = spec.get("template")
    jobset = template.get("spec") if isinstance(template, Mapping) else None
    jobs = jobset.get("replicatedJobs") if isinstance(jobset, Mapping) else None
    jobs_path = "spec.template.spec.replicatedJobs"
    if not isinstance(jobs, list) or not jobs:
        errors.append(_runtime_error(runtime, jobs_path, "Required value: the trainer's replicatedJob"))
        return None
    for index, job in enumerate(jobs):
        job_template = job.get("template") if isinstance(job, Mapping) else None
        meta = job_template.get("metadata") if isinstance(job_template, Mapping) else None
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        ancestor = labels.get(ANCESTOR_LABEL) if isinstance(labels, Mapping) else None
        if ancestor in ("dataset-initializer", "model-initializer"):
            errors.append(_runtime_error(runtime, f"{jobs_path}[{index}]",
                                         f"Unsupported: an initializer job ({ancestor}): the hub's gang runs one "
                                         "replicatedJob, the trainer's"))
    if len(errors) > before:
        return None
    if len(jobs) != 1:
        errors.append(_runtime_error(runtime, jobs_path, f"Unsupported: {len(jobs)} replicatedJobs: the hub's gang "
                                                         "runs one, the trainer's (one Job of numNodes pods)"))
        return None
    job = jobs[0]
    path = f"{jobs_path}[0]"
    if not isinstance(job, Mapping) or not isinstance(job.get("name"), str):
        errors.append(_runtime_error(runtime, f"{path}.name", "Required value"))
        return None
    if job.get("replicas", 1) != 1:
        errors.append(_runtime_error(runtime, f"{path}.replicas", f"Unsupported value {shown(job.get('replicas'))}"
                                                                  ": the trainer's Jobs are one Job (replicas 1)"))
    job_spec = job.get("template", {}).get("spec") if isinstance(job.get("template"), Mapping) else None
    pod_template = job_spec.get("template") if isinstance(job_spec, Mapping) else None
    pod = pod_template.get("spec") if isinstance(pod_template, Mapping) else None
    containers = pod.get("containers") if isinstance(pod, Mapping) else None
    if not isinstance(containers, list) or not any(isinstance(c, Mapping) and c.get("name") == NODE
                                                   for c in containers):
        errors.append(_runtime_error(runtime, f"{path}.template.spec.template.spec.containers",
                                     f'Required value: the trainer\'s container "{NODE}"'))
        return None
    assert isinstance(job_spec, Mapping) and isinstance(pod_template, Mapping)
    backoff = job_spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    if type(backoff) is not int or backoff < 0:
        errors.append(_runtime_error(runtime, f"{path}.template.spec.backoffLimit",
                                     f"Invalid value {shown(backoff)}: must be a non-negative integer"))
    if len(errors) > before:
        return None
    assert type(nodes) is int and type(backoff) is int
    return RuntimeShape(job=job["name"], nodes=nodes, framework=framework, nproc=nproc, template=pod_template,
                        backoff_limit=backoff)


def _apply_overrides(overrides: object, job: str | None, pod: dict[str, Any], errors: list[FieldError]) -> None:
    """spec.podSpecOverrides on the runtime's pod (`job`: its replicatedJob; None: no runtime, only the
    TrainJob's own fields are checked)."""
    containers = {c["name"]: c for c in pod.get("containers") or () if isinstance(c, dict)
                  and isinstance(c.get("name"), str)}
    for index, override in enumerate(_typed(overrides, list, "spec.podSpecOverrides", errors) or ()):
        path = f"spec.podSpecOverrides[{index}]"
        if not isinstance(override, Mapping):
            errors.append((path, f"Invalid value: {json_type(override)}: must be of type object"))
            continue
        for t_index, target in enumerate(_typed(override.get("targetJobs"), list, f"{path}.targetJobs", errors)
                                         or ()):
            name = target.get("name") if isinstance(target, Mapping) else target
            if job is not None and name != job:
                errors.append((f"{path}.targetJobs[{t_index}].name", f'Unsupported value: {shown(name)}: '
                                                                     f'supported values: "{job}" (the runtime\'s '
                                                                     "only job)"))
        for key, kind in (("serviceAccountName", str), ("nodeSelector", dict)):
            value = _typed(override.get(key), kind, f"{path}.{key}", errors)
            if value is not None:
                pod[key] = value
        for key in ("tolerations", "volumes", "schedulingGates"):
            value = _typed(override.get(key), list, f"{path}.{key}", errors)
            if value:
                pod[key] = [*pod.get(key, []), *value]
        if override.get("initContainers"):
            errors.append((f"{path}.initContainers", "Forbidden: the hub does not override the runtime's init "
                                                     "containers"))
        for c_index, change in enumerate(_typed(override.get("containers"), list, f"{path}.containers", errors)
                                         or ()):
            c_path = f"{path}.containers[{c_index}]"
            name = change.get("name") if isinstance(change, Mapping) else None
            if not isinstance(change, Mapping) or not isinstance(name, str) \
                    or (job is not None and name not in containers):
                supported = ", ".join(f'"{n}"' for n in containers) or f'"{NODE}"'
                errors.append((f"{c_path}.name", f"Unsupported value: {shown(name)}: supported values: {supported} "
                                                 "(the runtime's containers)"))
                continue
            container = containers.get(name, {})
            env = _env(change.get("env"), f"{c_path}.env", errors)
            if env:
                container["env"] = _merged_env(container.get("env"), env)
            mounts = _typed(change.get("volumeMounts"), list, f"{c_path}.volumeMounts", errors)
            if mounts:
                container["volumeMounts"] = [*container.get("volumeMounts", []), *mounts]


def translate_trainjob(obj: Mapping[str, Any], settings: ValidationSettings) -> Translation:
    """What a TrainJob holds by itself, checked (no runtime: spec None; `translate_trainjob_on` makes the twin)."""
    return _translate(obj, settings, None, alone=True)


def translate_trainjob_on(obj: Mapping[str, Any], settings: ValidationSettings,
                          runtime: Mapping[str, Any]) -> Translation:
    """A TrainJob's twin TrainingJob spec on `runtime` (the object its spec.runtimeRef names, as stored; the module
    docstring's rules), or its errors at the TrainJob's paths."""
    return _translate(obj, settings, runtime, alone=False)


def _translate(obj: Mapping[str, Any], settings: ValidationSettings, runtime: object, *, alone: bool) -> Translation:
    source, errors = spec_of(obj)
    if source is None:
        return Translation(spec=None, errors=errors)
    runtime_reference(obj, errors)
    shape = None if alone else runtime_shape(runtime, errors)
    managed_by = source.get("managedBy")
    if managed_by is not None and managed_by != TRAINER_CONTROLLER:
        errors.append(("spec.managedBy", f"Unsupported value: {shown(managed_by)}: supported values: "
                                         f'"{TRAINER_CONTROLLER}" (or leave it out: the hub manages the TrainJob)'))
    if source.get("initializer") is not None:
        errors.append(("spec.initializer", "Forbidden: the hub runs no initializer jobs (dataset or model)"))
    suspend = _typed(source.get("suspend"), bool, "spec.suspend", errors)
    trainer = _typed(source.get("trainer"), dict, "spec.trainer", errors) or {}
    if not isinstance(trainer, Mapping):
        trainer = {}
    template: dict[str, Any] = copy.deepcopy(dict(shape.template)) if shape is not None else {}
    pod: dict[str, Any] = template.setdefault("spec", {})
    containers = pod.setdefault("containers", [{"name": NODE}])
    container = next(c for c in containers if isinstance(c, dict) and c.get("name") == NODE)
    image = _typed(trainer.get("image"), str, "spec.trainer.image", errors)
    if image is not None:
        container["image"] = image
    for key in ("command", "args"):
        value = _typed(trainer.get(key), list, f"spec.trainer.{key}", errors)
        if value is not None:
            container[key] = value
    env = _env(trainer.get("env"), "spec.trainer.env", errors)
    if env:
        container["env"] = _merged_env(container.get("env"), env)
    resources = _typed(trainer.get("resourcesPerNode"), dict, "spec.trainer.resourcesPerNode", errors)
    if resources is not None:
        container["resources"] = resources
    nodes = trainer.get("numNodes", shape.nodes if shape is not None else 1)
    if type(nodes) is not int or nodes < 1:
        errors.append(("spec.trainer.numNodes", f"Invalid value: {shown(nodes)}: must be an integer of at least 1"))
    elif nodes > settings.max_replicas_per_role:
        errors.append(("spec.trainer.numNodes", f"Invalid value: {nodes}: must be less than or equal to "
                                                f"{settings.max_replicas_per_role} (the hub's pods per role)"))
    nproc = _nproc(trainer.get("numProcPerNode"), "spec.trainer.numProcPerNode", errors)
    if nproc is not None and shape is not None and shape.framework != "pytorch":
        errors.append(("spec.trainer.numProcPerNode", "Forbidden: the runtime has no mlPolicy.torch (its pods run "
                                                      "no torchrun)"))
    _apply_overrides(source.get("podSpecOverrides"), shape.job if shape is not None else None, pod, errors)
    spec: dict[str, Any] = {}
    errors += merge_hints(spec, obj.get("metadata"), priority_class=None, priority_path="", settings=settings)
    if errors or shape is None:
        return Translation(spec=None, errors=errors)
    assert type(nodes) is int
    pod.setdefault("restartPolicy", "OnFailure")  # JobSet's default for the runtime's Job
    restart = pod.pop("restartPolicy")
    spec.update({
        "framework": shape.framework,
        "roles": [{"name": ROLE, "replicas": nodes, "restartPolicy": restart, "template": template}],
        "backoffLimit": shape.backoff_limit,
        "suspend": bool(suspend),
    })
    if shape.framework == "pytorch":
        spec["frameworkSettings"] = {"port": TRAINER_PORT, "nprocPerNode": nproc or shape.nproc or "auto"}
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    contract: dict[str, Any] = {
        "replicatedJobs": [{"name": shape.job, "replicas": 1, "parallelism": nodes, "indexed": True,
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
    jobs = contract.get("replicatedJobs")
    first = jobs[0] if isinstance(jobs, list) and jobs and isinstance(jobs[0], Mapping) else {}
    named = first.get("name")
    rjob = named if isinstance(named, str) else NODE  # the runtime's replicatedJob
    return jobset_pods(job_name, namespace, rjob, index, contract)


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
    reference=runtime_reference, translate_referenced=translate_trainjob_on,
    pod_contract=trainjob_pod_contract, mirror_status=trainjob_status,
    description="Trainer's TrainJob on the (Cluster)TrainingRuntime its spec.runtimeRef names: numNodes workers of "
                "the runtime's trainer Job.",
    terminal_conditions={"Complete": "Succeeded", "Failed": "Failed"}, operator_copyable=False,
)
