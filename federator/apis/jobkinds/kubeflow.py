"""The Kubeflow job kinds: kubeflow.org/v1 PyTorchJob, TFJob, PaddleJob (training-operator v1.8.1) and
kubeflow.org/v2beta1 MPIJob (mpi-operator v0.6.0), translated into the twin TrainingJob (see base.py).

Translation (what each source field becomes; what it cannot express is a 422 naming the source field):

- `spec.<x>ReplicaSpecs[<Type>]` -> one role per replica type, named as apis/frameworks.py ROLE_MAP expects:
  PyTorchJob Master/Worker -> master/worker (framework pytorch); TFJob Chief/Master/PS/Worker/Evaluator ->
  chief/master/ps/worker/evaluator (tensorflow); PaddleJob Master/Worker -> master/worker (paddle: the
  parameter server and the trainers); MPIJob Launcher/Worker -> launcher/worker (mpi). Another replica type is a
  422. `replicas` (default 1, at least 1, at most the hub's per-role cap) and the full pod `template` are kept
  (the template's own spec.restartPolicy is dropped: the replica spec's wins, as in the operators).
- `restartPolicy`: OnFailure and Never are kept; Always becomes OnFailure (the hub recreates a pod that fails;
  one that succeeded stays done); ExitCode is a 422 (the hub does not tell retryable exit codes apart). Left
  out: the operator's default (PyTorchJob and PaddleJob OnFailure, TFJob and MPIJob Never).
- `runPolicy.backoffLimit` -> backoffLimit, `runPolicy.suspend` -> suspend, `runPolicy.schedulingPolicy.queue`
  -> queue (or the label kueue.x-k8s.io/queue-name; both and different: 422),
  `runPolicy.schedulingPolicy.priorityClass` -> priorityClassName. Documented defaults: cleanPodPolicy (None,
  Running, All) and ttlSecondsAfterFinished are accepted and the hub's own cleanup applies (the member objects
  are removed when the job is deleted); schedulingPolicy.minAvailable, minResources and scheduleTimeoutSeconds
  are accepted and the hub's gang rule applies (every role at its minimum, all or nothing).
  `runPolicy.activeDeadlineSeconds` -> activeDeadlineSeconds (the hub enforces it). `runPolicy.managedBy` (MPIJob)
  may be left out or name the hub (`federator.dev/hub`) or the kind's own operator (kubeflow.org/mpi-operator:
  the hub stands in for it); anything else (e.g. kueue.x-k8s.io/multikueue) is a 422.
- PyTorchJob: `elasticPolicy.minReplicas`/`maxReplicas` -> the worker role's minReplicas/maxReplicas;
  `nprocPerNode` (or the deprecated `elasticPolicy.nProcPerNode`) -> frameworkSettings.nprocPerNode;
  `elasticPolicy.metrics` (an HPA) and a rdzvBackend other than c10d are 422s; rdzvHost/Port/Id/Conf,
  standalone and maxRestarts are accepted and the hub's own rendezvous applies.
- PaddleJob: `elasticPolicy` with minReplicas < maxReplicas is a 422 (only PyTorch workers are elastic here).
- TFJob: `enableDynamicWorker: true` is a 422; `successPolicy` is accepted and the hub's rule applies (the job
  succeeds when every pod has).
- MPIJob: `slotsPerWorker` and `mpiImplementation` -> frameworkSettings; `runLauncherAsWorker: true` is a 422;
  sshAuthMountPath and launcherCreationPolicy are accepted (the hub starts the gang whole and renders the MPI
  environment of delegation/frameworks.py).
- Placement hints and failover policy: the labels and annotations of hints.py.

Pod contract (what the operators put on each pod, training-operator v1.8.1 pkg/controller.v1/common/pod.go
createNewPod and job_controller.go GenLabels; mpi-operator v0.6.0 pkg/controller/mpi_job_controller.go
defaultLabels): training.kubeflow.org/operator-name (pytorchjob-controller, tfjob-controller,
paddlejob-controller, mpi-operator), training.kubeflow.org/job-name, training.kubeflow.org/replica-type (the
replica type in lower case; not on MPIJob pods) and training.kubeflow.org/replica-index (MPIJob: workers only),
and training.kubeflow.org/job-role: "master" on the master pod (PyTorchJob: Master, else Worker 0; TFJob: Chief
or Master, else Worker 0; PaddleJob: Master), MPIJob: launcher or worker on every pod.

DNS names, as the operators give them (the hub's rendering keeps its own pod names, delegation/adapter.py):
training-operator names pod i of a replica type `<job>-<type lower>-<i>` (common.GenGeneralName), sets no
hostname or subdomain (so the hostname is that name) and makes a headless Service of the same name selecting that
pod alone (common/service.go CreateNewService), which is what MASTER_ADDR, PADDLE_MASTER and TF_CONFIG
(`<name>.<ns>.svc`) name: the contract's `dns` is hostname = Service = `<job>-<type lower>-<i>`. mpi-operator
v0.6.0 gives worker i hostname `<job>-worker-<i>` and the launcher `<job>-launcher`, both subdomain `<job>`, a
headless Service `<job>` of the job's pods (newWorker, newLauncherPodTemplate, newJobService), and its hostfile
names `<job>-worker-<i>.<job>.<ns>.svc`.

Pure: no I/O beyond reading the schema files at import.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from federator.apis.common import FieldError, ValidationSettings
from federator.apis.jobkinds.base import (
    InPlaceResize,
    JobKind,
    PodContract,
    PodDns,
    Translation,
    load_upstream_schema,
)
from federator.apis.jobkinds.hints import LABEL_KUEUE_QUEUE, hints_from_metadata

__all__ = ["HUB_MANAGED_BY", "KUBEFLOW_KINDS", "MPIJOB", "PADDLEJOB", "PYTORCHJOB", "REPLICA_TYPES_ANNOTATION",
           "TFJOB"]

#: runPolicy.managedBy naming the hub
HUB_MANAGED_BY: Final = "federator.dev/hub"
#: on the twin: the source's replica types in role order, JSON list (the pod contract reads it)
REPLICA_TYPES_ANNOTATION: Final = "federator.dev/kubeflow-replica-types"

LABEL_OPERATOR_NAME: Final = "training.kubeflow.org/operator-name"
LABEL_JOB_NAME: Final = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE: Final = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX: Final = "training.kubeflow.org/replica-index"
LABEL_JOB_ROLE: Final = "training.kubeflow.org/job-role"

_RESTART: Final[Mapping[str, str]] = {"OnFailure": "OnFailure", "Never": "Never", "Always": "OnFailure"}
_CLEAN_POD_POLICIES: Final = ("None", "Running", "All")


@dataclass(frozen=True, slots=True)
class _Family:
    kind: str
    framework: str
    replica_field: str
    #: source replica type -> role name, in role order
    replica_types: Mapping[str, str]
    default_restart: str
    operator_name: str
    #: managedBy values that mean "the operator" (the hub stands in for it)
    own_managers: tuple[str, ...] = ()


def _errors_type(value: object, expected: str) -> str:
    return f"Invalid value: {type(value).__name__}: must be {expected}"


def _int(value: object) -> bool:
    return type(value) is int


def _translate_family(family: _Family, extras: Callable[[Mapping[str, Any], list[dict[str, Any]],
                                                          list[FieldError], dict[str, Any]], None]
                      ) -> Callable[[Mapping[str, Any], ValidationSettings], Translation]:
    def translate(obj: Mapping[str, Any], settings: ValidationSettings) -> Translation:
        errors: list[FieldError] = []
        if not isinstance(obj, Mapping):
            return Translation(spec=None, errors=[("", "Invalid value: must be an object")])
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            return Translation(spec=None, errors=[("spec", "Required value")])
        where = f"spec.{family.replica_field}"
        replica_specs = spec.get(family.replica_field)
        roles: list[dict[str, Any]] = []
        role_paths: dict[str, str] = {}
        types_used: list[str] = []
        if not isinstance(replica_specs, Mapping) or not replica_specs:
            errors.append((where, "Required value: at least one replica type"))
            replica_specs = {}
        for rtype, rspec in replica_specs.items():
            path = f"{where}[{str(rtype)[:63]}]"
            if rtype not in family.replica_types:
                allowed = ", ".join(f'"{t}"' for t in family.replica_types)
                errors.append((path, f'Unsupported value: "{str(rtype)[:63]}": supported values: {allowed}'))
        for rtype, role_name in family.replica_types.items():
            if rtype not in replica_specs:
                continue
            rspec = replica_specs[rtype]
            path = f"{where}[{rtype}]"
            if not isinstance(rspec, Mapping):
                errors.append((path, _errors_type(rspec, "an object")))
                continue
            replicas = rspec.get("replicas", 1)
            if replicas is None:
                replicas = 1
            if not _int(replicas):
                errors.append((f"{path}.replicas", _errors_type(replicas, "an integer")))
            elif replicas < 1:
                errors.append((f"{path}.replicas", f"Invalid value: {replicas}: must be at least 1 (the hub runs "
                                                   "no empty role: leave the replica type out)"))
            elif replicas > settings.max_replicas_per_role:
                errors.append((f"{path}.replicas", f"Invalid value: {replicas}: must be less than or equal to "
                                                   f"{settings.max_replicas_per_role}"))
            policy = rspec.get("restartPolicy") or family.default_restart
            restart = _RESTART.get(policy) if isinstance(policy, str) else None
            if restart is None:
                shown = json.dumps(policy)[:32] if isinstance(policy, str) else type(policy).__name__
                why = ("the hub does not tell retryable exit codes apart: use OnFailure or Never"
                       if policy == "ExitCode" else 'supported values: "OnFailure", "Never", "Always"')
                errors.append((f"{path}.restartPolicy", f"Unsupported value: {shown}: {why}"))
            template = rspec.get("template")
            if not isinstance(template, Mapping):
                errors.append((f"{path}.template", "Required value: a pod template" if template is None
                               else _errors_type(template, "an object")))
                continue
            copied = dict(template)
            if isinstance(copied.get("spec"), Mapping):
                copied["spec"] = {k: v for k, v in copied["spec"].items() if k != "restartPolicy"}
            roles.append({"name": role_name, "replicas": replicas, "restartPolicy": restart or "Never",
                          "template": copied})
            role_paths[role_name] = f"{path}.template"
            types_used.append(rtype)
        twin: dict[str, Any] = {"roles": roles, "framework": family.framework}
        field_paths: dict[str, str] = {}
        errors += _run_policy(family, obj, spec, twin, field_paths, settings)
        settings_out: dict[str, Any] = {}
        extras(spec, roles, errors, settings_out)
        if settings_out:
            twin["frameworkSettings"] = settings_out
        if errors:
            return Translation(spec=None, errors=errors, role_paths=role_paths)
        return Translation(spec=twin, role_paths=role_paths, field_paths=field_paths,
                           annotations={REPLICA_TYPES_ANNOTATION: json.dumps(types_used, separators=(",", ":"))})

    return translate


def _run_policy(family: _Family, obj: Mapping[str, Any], spec: Mapping[str, Any], twin: dict[str, Any],
                field_paths: dict[str, str], settings: ValidationSettings) -> list[FieldError]:
    hinted, errors = hints_from_metadata(obj.get("metadata"), settings=settings)
    twin.update(hinted)
    hinted_queue: str | None = hinted.get("queue")
    if hinted_queue is not None:
        field_paths["spec.queue"] = f"metadata.labels[{LABEL_KUEUE_QUEUE}]"
    policy = spec.get("runPolicy")
    if policy is None:
        return errors
    if not isinstance(policy, Mapping):
        return [*errors, ("spec.runPolicy", _errors_type(policy, "an object"))]
    if (limit := policy.get("backoffLimit")) is not None:
        if _int(limit):
            twin["backoffLimit"] = limit
            field_paths["spec.backoffLimit"] = "spec.runPolicy.backoffLimit"
        else:
            errors.append(("spec.runPolicy.backoffLimit", _errors_type(limit, "an integer")))
    if (suspend := policy.get("suspend")) is not None:
        if isinstance(suspend, bool):
            twin["suspend"] = suspend
        else:
            errors.append(("spec.runPolicy.suspend", _errors_type(suspend, "a boolean")))
    if (deadline := policy.get("activeDeadlineSeconds")) is not None:
        if _int(deadline):
            twin["activeDeadlineSeconds"] = deadline
            field_paths["spec.activeDeadlineSeconds"] = "spec.runPolicy.activeDeadlineSeconds"
        else:
            errors.append(("spec.runPolicy.activeDeadlineSeconds", _errors_type(deadline, "an integer")))
    clean = policy.get("cleanPodPolicy")
    if clean is not None and clean not in _CLEAN_POD_POLICIES:
        shown = json.dumps(clean)[:32] if isinstance(clean, str) else type(clean).__name__
        errors.append(("spec.runPolicy.cleanPodPolicy",
                       f'Unsupported value: {shown}: supported values: "None", "Running", "All"'))
    manager = policy.get("managedBy")
    if manager is not None and manager not in (HUB_MANAGED_BY, *family.own_managers):
        shown = json.dumps(manager)[:80] if isinstance(manager, str) else type(manager).__name__
        errors.append(("spec.runPolicy.managedBy", f"Invalid value: {shown}: the hub runs this job itself; "
                                                   f'leave it out or name "{HUB_MANAGED_BY}"'))
    scheduling = policy.get("schedulingPolicy")
    if scheduling is None:
        return errors
    if not isinstance(scheduling, Mapping):
        return [*errors, ("spec.runPolicy.schedulingPolicy", _errors_type(scheduling, "an object"))]
    queue = scheduling.get("queue")
    if queue is not None and queue != "":
        if not isinstance(queue, str):
            errors.append(("spec.runPolicy.schedulingPolicy.queue", _errors_type(queue, "a string")))
        elif hinted_queue is not None and hinted_queue != queue:
            errors.append((f"metadata.labels[{LABEL_KUEUE_QUEUE}]",
                           f'Invalid value: "{hinted_queue[:63]}": spec.runPolicy.schedulingPolicy.queue names '
                           f'another queue ("{queue[:63]}")'))
        else:
            twin["queue"] = queue
            field_paths["spec.queue"] = "spec.runPolicy.schedulingPolicy.queue"
    priority_class = scheduling.get("priorityClass")
    if priority_class is not None and priority_class != "":
        hinted_class = hinted.get("priorityClassName")
        if isinstance(priority_class, str) and hinted_class is not None and hinted_class != priority_class:
            errors.append(("spec.runPolicy.schedulingPolicy.priorityClass",
                           f'Invalid value: "{priority_class[:63]}": the labels or annotations name another '
                           f'priority class ("{hinted_class[:63]}")'))
        elif isinstance(priority_class, str):
            twin["priorityClassName"] = priority_class
            field_paths["spec.priorityClassName"] = "spec.runPolicy.schedulingPolicy.priorityClass"
        else:
            errors.append(("spec.runPolicy.schedulingPolicy.priorityClass", _errors_type(priority_class,
                                                                                         "a string")))
    return errors


def _copy_setting(spec: Mapping[str, Any], key: str, out: dict[str, Any], errors: list[FieldError], *,
                  integer: bool) -> None:
    """spec.<key> -> frameworkSettings.<key> when it is an integer (`integer`) or a string."""
    value = spec.get(key)
    if value is None:
        return
    if _int(value) if integer else isinstance(value, str):
        out[key] = value
    else:
        errors.append((f"spec.{key}", _errors_type(value, "an integer" if integer else "a string")))


def _role(roles: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((r for r in roles if r["name"] == name), None)


def _pytorch_extras(spec: Mapping[str, Any], roles: list[dict[str, Any]], errors: list[FieldError],
                    out: dict[str, Any]) -> None:
    nproc = spec.get("nprocPerNode")
    elastic = spec.get("elasticPolicy")
    _copy_setting(spec, "nprocPerNode", out, errors, integer=False)
    if elastic is None:
        return
    if not isinstance(elastic, Mapping):
        errors.append(("spec.elasticPolicy", _errors_type(elastic, "an object")))
        return
    legacy = elastic.get("nProcPerNode")
    if legacy is not None and nproc is None:
        if _int(legacy) and 1 <= legacy <= 9999:
            out["nprocPerNode"] = str(legacy)
        else:
            errors.append(("spec.elasticPolicy.nProcPerNode", "Invalid value: must be an integer from 1 to 9999"))
    if elastic.get("metrics"):
        errors.append(("spec.elasticPolicy.metrics", "Forbidden: the hub resizes elastic workers itself; a "
                                                     "HorizontalPodAutoscaler is not supported"))
    backend = elastic.get("rdzvBackend")
    if backend is not None and backend != "c10d":
        shown = json.dumps(backend)[:32] if isinstance(backend, str) else type(backend).__name__
        errors.append(("spec.elasticPolicy.rdzvBackend", f'Unsupported value: {shown}: supported values: "c10d"'))
    _elastic_bounds(roles, elastic, errors, elastic_ok=True)


def _elastic_bounds(roles: list[dict[str, Any]], elastic: Mapping[str, Any], errors: list[FieldError], *,
                    elastic_ok: bool) -> None:
    low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
    for key, value in (("minReplicas", low), ("maxReplicas", high)):
        if value is not None and (not _int(value) or value < 1):
            errors.append((f"spec.elasticPolicy.{key}", "Invalid value: must be an integer of at least 1"))
            return
    if low is None and high is None:
        return
    worker = _role(roles, "worker")
    if worker is None:
        errors.append(("spec.elasticPolicy", "Forbidden: needs a Worker replica spec"))
        return
    replicas = worker["replicas"]
    if not _int(replicas):
        return
    fewest = low if low is not None else replicas
    most = high if high is not None else replicas
    if fewest < most and not elastic_ok:
        errors.append(("spec.elasticPolicy", "Forbidden: only PyTorchJob workers may be elastic on this hub "
                                             "(minReplicas must equal maxReplicas)"))
        return
    if fewest > replicas:
        errors.append(("spec.elasticPolicy.minReplicas",
                       f"Invalid value: {fewest}: must be less than or equal to the Worker replicas ({replicas})"))
    elif most < replicas:
        errors.append(("spec.elasticPolicy.maxReplicas",
                       f"Invalid value: {most}: must be greater than or equal to the Worker replicas ({replicas})"))
    elif elastic_ok:
        if low is not None:
            worker["minReplicas"] = low
        if high is not None:
            worker["maxReplicas"] = high


def _tf_extras(spec: Mapping[str, Any], roles: list[dict[str, Any]], errors: list[FieldError],
               out: dict[str, Any]) -> None:
    if spec.get("enableDynamicWorker") is True:
        errors.append(("spec.enableDynamicWorker", "Forbidden: the hub hands TF_CONFIG to every pod once; dynamic "
                                                   "workers are not supported"))


def _paddle_extras(spec: Mapping[str, Any], roles: list[dict[str, Any]], errors: list[FieldError],
                   out: dict[str, Any]) -> None:
    elastic = spec.get("elasticPolicy")
    if elastic is None:
        return
    if not isinstance(elastic, Mapping):
        errors.append(("spec.elasticPolicy", _errors_type(elastic, "an object")))
        return
    if elastic.get("metrics"):
        errors.append(("spec.elasticPolicy.metrics", "Forbidden: a HorizontalPodAutoscaler is not supported"))
    _elastic_bounds(roles, elastic, errors, elastic_ok=False)


def _mpi_extras(spec: Mapping[str, Any], roles: list[dict[str, Any]], errors: list[FieldError],
                out: dict[str, Any]) -> None:
    _copy_setting(spec, "slotsPerWorker", out, errors, integer=True)
    _copy_setting(spec, "mpiImplementation", out, errors, integer=False)
    if spec.get("runLauncherAsWorker") is True:
        errors.append(("spec.runLauncherAsWorker", "Forbidden: the hub's hostfile lists the workers only"))


def _contract(family: _Family) -> Callable[[str, str, str, int, Mapping[str, str]], PodContract]:
    role_types = {role: rtype for rtype, role in family.replica_types.items()}

    def contract(job_name: str, namespace: str, role: str, index: int, annotations: Mapping[str, str]) -> PodContract:
        try:
            used = json.loads(annotations.get(REPLICA_TYPES_ANNOTATION, "[]"))
        except ValueError:
            used = []
        present = {t for t in used if isinstance(t, str)} if isinstance(used, list) else set()
        labels = {LABEL_OPERATOR_NAME: family.operator_name, LABEL_JOB_NAME: job_name.replace("/", "-")}
        rtype = role_types.get(role, role)
        if family.framework == "mpi":
            labels[LABEL_JOB_ROLE] = role
            if role == "worker":
                labels[LABEL_REPLICA_INDEX] = str(index)
            host = f"{job_name}-worker-{index}" if role == "worker" else f"{job_name}-{role}"
            return PodContract(labels=labels, dns=PodDns(hostname=host, subdomain=job_name))
        labels[LABEL_REPLICA_TYPE] = rtype.lower()
        labels[LABEL_REPLICA_INDEX] = str(index)
        if family.framework == "pytorch":
            master = rtype == "Master" if "Master" in present else (rtype == "Worker" and index == 0)
        elif family.framework == "tensorflow":
            master = rtype in ("Chief", "Master") if present & {"Chief", "Master"} else (
                rtype == "Worker" and index == 0)
        else:
            master = rtype == "Master"
        if master:
            labels[LABEL_JOB_ROLE] = "master"
        name = f"{job_name}-{rtype.lower()}-{index}"  # common.GenGeneralName: the pod's and its Service's name
        return PodContract(labels=labels, dns=PodDns(hostname=name, service=name))

    return contract


def _kind(family: _Family, file_name: str, extras: Callable[[Mapping[str, Any], list[dict[str, Any]],
                                                             list[FieldError], dict[str, Any]], None], *,
          in_place_resize: InPlaceResize | None = None) -> JobKind:
    data = load_upstream_schema(file_name)
    return JobKind(
        group=data["group"], version=data["version"], kind=data["kind"], plural=data["plural"],
        singular=data["singular"], short_names=tuple(data["shortNames"]), schema=data["schema"],
        upstream=data["source"].split(":")[0], openapi_name=f"org.kubeflow.{data['version']}.{data['kind']}",
        translate=_translate_family(family, extras), pod_contract=_contract(family),
        description=f"Kubeflow {data['kind']} ({data['group']}/{data['version']}), run by the hub as a gang.",
        suspend_path=("spec", "runPolicy", "suspend"), managed_by_path=("spec", "runPolicy", "managedBy"),
        terminal_conditions={"Succeeded": "Succeeded", "Failed": "Failed"}, in_place_resize=in_place_resize,
        mirrored_status_fields=("replicaStatuses", "startTime", "completionTime"),
    )


_PYTORCH = _Family("PyTorchJob", "pytorch", "pytorchReplicaSpecs", {"Master": "master", "Worker": "worker"},
                   "OnFailure", "pytorchjob-controller")
_TF = _Family("TFJob", "tensorflow", "tfReplicaSpecs",
              {"Chief": "chief", "Master": "master", "PS": "ps", "Worker": "worker", "Evaluator": "evaluator"},
              "Never", "tfjob-controller")
_PADDLE = _Family("PaddleJob", "paddle", "paddleReplicaSpecs", {"Master": "master", "Worker": "worker"},
                  "OnFailure", "paddlejob-controller")
_MPI = _Family("MPIJob", "mpi", "mpiReplicaSpecs", {"Launcher": "launcher", "Worker": "worker"}, "Never",
               "mpi-operator", own_managers=("kubeflow.org/mpi-operator",))

#: the PyTorchJob CRD's scale subresource (training-operator v1.8.1 manifests/base/crds/kubeflow.org_pytorchjobs.yaml:
#: specReplicasPath .spec.pytorchReplicaSpecs.Worker.replicas), which the operator's HPA for elasticPolicy scales
#: within elasticPolicy.minReplicas/maxReplicas (pkg/controller.v1/pytorch/hpa.go); the operator creates the pods of
#: new indices and deletes those above the count (common/pod.go ReconcilePods)
_PYTORCH_RESIZE: Final = InPlaceResize(role="worker",
                                      replicas_path=("spec", "pytorchReplicaSpecs", "Worker", "replicas"),
                                      min_path=("spec", "elasticPolicy", "minReplicas"),
                                      max_path=("spec", "elasticPolicy", "maxReplicas"),
                                      index_label="training.kubeflow.org/replica-index")
PYTORCHJOB: Final = _kind(_PYTORCH, "pytorchjobs.json", _pytorch_extras, in_place_resize=_PYTORCH_RESIZE)
TFJOB: Final = _kind(_TF, "tfjobs.json", _tf_extras)
PADDLEJOB: Final = _kind(_PADDLE, "paddlejobs.json", _paddle_extras)
MPIJOB: Final = _kind(_MPI, "mpijobs.json", _mpi_extras)
KUBEFLOW_KINDS: Final[tuple[JobKind, ...]] = (PYTORCHJOB, TFJOB, PADDLEJOB, MPIJOB)
