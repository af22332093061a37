"""The Kubeflow training-operator v1.8.1 (github.com/kubeflow/training-operator, pkg/controller.v1), emulated for
PyTorchJob, TFJob and PaddleJob: one shared reconcile (common/job.go ReconcileJobs, pod.go, service.go) and the
per-kind parts (`Framework`: replica types, default container, port, restart policy, env, status rules).

For each job it:
- defaults it in memory as the operator's scheme does (SetDefaults_<Kind>: replicas 1, the kind's restartPolicy,
  the default port on the default container, cleanPodPolicy None, PyTorch's nprocPerNode "auto" and elastic
  min/max, TF's successPolicy ""); the stored object is not changed;
- creates, per replica type and index, a pod `<job>-<type lower>-<index>` from the replica template (its labels,
  annotations and schedulerName kept) with the labels training.kubeflow.org/operator-name, job-name,
  replica-type, replica-index and job-role=master (the master role: Master/Chief, else Worker 0), the replica's
  restartPolicy (ExitCode: Never), a controlling ownerReference, and the framework's env:
    PyTorch  PYTHONUNBUFFERED, with a Master MASTER_PORT, PET_MASTER_PORT, MASTER_ADDR, PET_MASTER_ADDR, WORLD_SIZE,
             RANK, PET_NODE_RANK; PET_NPROC_PER_NODE; elastic: PET_RDZV_ENDPOINT, PET_RDZV_BACKEND, PET_NNODES=min:max
             (...), else PET_NNODES; workers of a job with a Master get the init-pytorch init container;
    TF       TF_CONFIG (cluster, task, environment "cloud") in the tensorflow container, when distributed;
    Paddle   PYTHONUNBUFFERED, PADDLE_JOB_ID, PADDLE_NNODES, PADDLE_MASTER, PADDLE_SERVER_NUM/PADDLE_TRAINER_NUM;
- creates one headless Service per pod, of the same name, selecting it, with the default container's ports;
- follows a change of a replica type's `replicas` (a scale, e.g. PyTorchJob's Worker through its scale
  subresource): pods and Services of new indices are created, those at indices at or above the count deleted
  (ReconcilePods, ReconcileServices); the env of running pods is not changed (a new pod's env, e.g. WORLD_SIZE
  with a Master, is computed from the job as it is when the pod is made, as the operator's createNewPod does);
- deletes a Failed pod to re-create it under restartPolicy OnFailure, Always or ExitCode with a retryable exit code
  (>= 128), condition Restarting; a non-retryable ExitCode failure fails the job;
- keeps status as the operator does: conditions Created, Running, Restarting, Succeeded, Failed, Suspended with
  reasons `<Kind><Reason>` and the operator's messages, replicaStatuses, startTime, completionTime;
- runPolicy.suspend deletes the pods and Services (Running=False, Suspended=True); resuming sets Suspended=False
  and a new startTime; runPolicy.backoffLimit (container restarts) and activeDeadlineSeconds fail it;
  cleanPodPolicy (None, Running, All) applies once it finished.

Differences from the real operator are in docs/simulator-fidelity.md. It never imports the hub.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from federator.apis.views import Body
from federator.apis.common import dns1035_label_errors
from federator.apis.timestamps import parse_time
from federator.apiserver.errors import ApiError, FieldError
from federator.apiserver.registry import JSONObject, Registry, ResourceType
from federator.apiserver.storage import ObjectStorage
from federator.sim import kinds
from federator.sim.operators.loop import (
    controller_ref,
    delete_quietly,
    now,
    owned_by,
    run_reconciler,
    run_until_stopped,
    write_status,
)
from federator.sim.operators.served import KUBEFLOW, with_validation

LABEL_PREFIX: Final = "training.kubeflow.org/"
OPERATOR_NAME: Final = LABEL_PREFIX + "operator-name"
JOB_NAME: Final = LABEL_PREFIX + "job-name"
REPLICA_TYPE: Final = LABEL_PREFIX + "replica-type"
REPLICA_INDEX: Final = LABEL_PREFIX + "replica-index"
JOB_ROLE: Final = LABEL_PREFIX + "job-role"
PYTORCH_INIT_IMAGE: Final = "alpine:3.10"
PYTORCH_INIT_MAX_TRIES: Final = 100


@dataclass(frozen=True)
class Framework:
    kind: str
    replica_field: str
    #: replica types in the operator's own order (TF's allTypes; Master before Worker)
    replica_types: tuple[str, ...]
    #: replica types the validating webhook accepts (None: any)
    valid_types: tuple[str, ...] | None
    container: str
    port_name: str
    port: int
    restart_policy: str
    controller_name: str
    #: the replica types whose index 0 (Master) or presence decides the master role and success
    master_types: tuple[str, ...]

    def spec_of(self, job: Mapping[str, Any]) -> dict[str, Any]:
        return ((job.get("spec") or {}).get(self.replica_field)) or {}


PYTORCH: Final = Framework("PyTorchJob", "pytorchReplicaSpecs", ("Master", "Worker"), ("Master", "Worker"),
                           "pytorch", "pytorchjob-port", 23456, "OnFailure", "pytorchjob-controller", ("Master",))
TF: Final = Framework("TFJob", "tfReplicaSpecs", ("Chief", "Evaluator", "Master", "PS", "Worker"), None,
                      "tensorflow", "tfjob-port", 2222, "Never", "tfjob-controller", ("Chief", "Master"))
PADDLE: Final = Framework("PaddleJob", "paddleReplicaSpecs", ("Master", "Worker"), ("Master", "Worker"),
                          "paddle", "master", 36543, "OnFailure", "paddlejob-controller", ("Master",))
FRAMEWORKS: Final[Mapping[str, Framework]] = {f.kind: f for f in (PYTORCH, TF, PADDLE)}


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _slice_size(pods: list[dict[str, Any]], replicas: int) -> int:
    """core.CalculatePodSliceSize: the replica count, or one more than the highest replica-index label of the
    pods if that is more (pods above the count are deleted by ReconcilePods: a scale down)."""
    size = replicas
    for pod in pods:
        raw = pod["metadata"]["labels"].get(REPLICA_INDEX)
        if isinstance(raw, str) and raw.isdigit() and len(raw) < 10:
            size = max(size, int(raw) + 1)
    return size


def general_name(job: str, rtype: str, index: int) -> str:
    """GenGeneralName: `<job>-<type lower>-<index>`, '/' replaced."""
    return f"{job}-{rtype.lower()}-{index}".replace("/", "-")


# ---------------------------------------------------------------- defaults and validation


def defaulted(fw: Framework, job: Mapping[str, Any]) -> dict[str, Any]:
    """SetDefaults_<Kind> on a copy (the operator defaults in memory; the stored object keeps what was sent)."""
    out = copy.deepcopy(dict(job))
    spec = out.setdefault("spec", {})
    run_policy = spec.setdefault("runPolicy", {})
    run_policy.setdefault("cleanPodPolicy", "None")
    replicas = spec.get(fw.replica_field) or {}
    for known in fw.replica_types:  # setTypeNameToCamelCase
        for key in list(replicas):
            if key.lower() == known.lower() and key != known:
                replicas[known] = replicas.pop(key)
    for rspec in replicas.values():
        if not isinstance(rspec, dict):
            continue
        if rspec.get("replicas") is None:
            rspec["replicas"] = 1
        if not rspec.get("restartPolicy"):
            rspec["restartPolicy"] = fw.restart_policy
        pod_spec = rspec.setdefault("template", {}).setdefault("spec", {})
        containers = pod_spec.get("containers") or []
        if containers:
            index = next((i for i, c in enumerate(containers) if c.get("name") == fw.container), 0)
            ports = containers[index].setdefault("ports", [])
            if not any(p.get("name") == fw.port_name for p in ports):
                ports.append({"name": fw.port_name, "containerPort": fw.port})
    if fw is PYTORCH:
        elastic = spec.get("elasticPolicy")
        if isinstance(elastic, dict):
            worker = _int((replicas.get("Worker") or {}).get("replicas"), 1)
            if elastic.get("maxReplicas") is None and elastic.get("minReplicas") is None:
                elastic["minReplicas"] = elastic["maxReplicas"] = worker
            elif elastic.get("maxReplicas") is None:
                elastic["maxReplicas"] = elastic["minReplicas"]
            elif elastic.get("minReplicas") is None:
                elastic["minReplicas"] = elastic["maxReplicas"]
        if (elastic is None or (isinstance(elastic, dict) and elastic.get("nProcPerNode") is None)) \
                and spec.get("nprocPerNode") is None:
            spec["nprocPerNode"] = "auto"
    if fw is TF and spec.get("successPolicy") is None:
        spec["successPolicy"] = ""
    return out


def webhook_errors(fw: Framework, job: JSONObject) -> list[FieldError]:
    """The operator's validating webhook (pkg/webhooks/<framework>): the name a DNS-1035 label, replica specs
    required, known roles,
    containers with images, one named as the framework's default container; PyTorch's Master has 1 replica, a
    TFJob at most one Chief or Master."""
    errs: list[FieldError] = []
    name = Body(job).metadata.get("name")
    if isinstance(name, str) and name:
        why = dns1035_label_errors(name)
        if why:
            errs.append(FieldError.invalid("metadata.name", name, f"should match: {','.join(why)}"))
    path = f"spec.{fw.replica_field}"
    replicas = fw.spec_of(job)
    if not replicas:
        return [*errs, FieldError.required(path, "must be required")]
    masters = 0
    for rtype, rspec in replicas.items():
        role = f"{path}[{rtype}]"
        if fw.valid_types is not None and rtype not in fw.valid_types:
            errs.append(FieldError.not_supported(role, rtype, fw.valid_types))
        if not isinstance(rspec, dict):
            continue
        containers = (((rspec.get("template") or {}).get("spec")) or {}).get("containers") or []
        cpath = f"{role}.template.spec.containers"
        if not containers:
            errs.append(FieldError.required(cpath, "must be specified"))
            continue
        for i, container in enumerate(containers):
            if isinstance(container, dict) and not container.get("image"):
                errs.append(FieldError.required(f"{cpath}[{i}].image", "must be required"))
        if not any(isinstance(c, dict) and c.get("name") == fw.container for c in containers):
            errs.append(FieldError.required(cpath, f"must have at least one container with name {fw.container}"))
        if fw is PYTORCH and rtype == "Master" and _int(rspec.get("replicas"), 1) != 1:
            errs.append(FieldError.forbidden(f"{role}.replicas", "must be 1"))
        if rtype in ("Chief", "Master"):
            masters += 1
    if fw is TF and masters > 1:
        errs.append(FieldError.forbidden(path, "must not have more than 1 Chief or Master role"))
    return errs


# ---------------------------------------------------------------- env (SetClusterSpec)


def _port_of(fw: Framework, job: Mapping[str, Any], rtype: str) -> int | None:
    for container in (((fw.spec_of(job).get(rtype) or {}).get("template") or {}).get("spec") or {}).get(
            "containers") or ():
        if container.get("name") == fw.container:
            for port in container.get("ports") or ():
                if port.get("name") == fw.port_name:
                    return _int(port.get("containerPort"))
    return None


def _total(fw: Framework, job: Mapping[str, Any]) -> int:
    return sum(_int(r.get("replicas"), 1) for r in fw.spec_of(job).values() if isinstance(r, dict))


def _pytorch_env(job: Mapping[str, Any], rtype: str, index: int) -> list[dict[str, Any]]:
    spec = job["spec"]
    replicas = PYTORCH.spec_of(job)
    env: list[dict[str, Any]] = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    total = _total(PYTORCH, job)
    nproc = spec.get("nprocPerNode")
    try:
        nproc_int = int(nproc) if nproc is not None else 1
    except ValueError:
        nproc_int = 1
    if "Master" in replicas:
        port = _port_of(PYTORCH, job, "Master")
        addr = general_name(job["metadata"]["name"], "Master", 0)
        env += [{"name": "MASTER_PORT", "value": str(port)}, {"name": "PET_MASTER_PORT", "value": str(port)},
                {"name": "MASTER_ADDR", "value": addr}, {"name": "PET_MASTER_ADDR", "value": addr}]
        rank = index + 1 if rtype == "Worker" else index
        env += [{"name": "WORLD_SIZE", "value": str(total * nproc_int)}, {"name": "RANK", "value": str(rank)},
                {"name": "PET_NODE_RANK", "value": str(rank)}]
    if nproc is not None:
        env.append({"name": "PET_NPROC_PER_NODE", "value": str(nproc)})
    elastic = spec.get("elasticPolicy")
    if isinstance(elastic, dict):
        host = elastic.get("rdzvHost") or f"{job['metadata']['name']}-worker-0"
        port = elastic.get("rdzvPort") if elastic.get("rdzvPort") is not None else _port_of(PYTORCH, job, "Worker")
        env.append({"name": "PET_RDZV_ENDPOINT", "value": f"{host}:{port}"})
        env.append({"name": "PET_RDZV_BACKEND", "value": str(elastic.get("rdzvBackend") or "c10d")})
        env.append({"name": "PET_NNODES", "value": f"{elastic.get('minReplicas')}:{elastic.get('maxReplicas')}"})
        if elastic.get("maxRestarts") is not None:
            env.append({"name": "PET_MAX_RESTARTS", "value": str(elastic["maxRestarts"])})
        if elastic.get("nProcPerNode") is not None:
            env.append({"name": "PET_NPROC_PER_NODE", "value": str(elastic["nProcPerNode"])})
        if elastic.get("rdzvId") is not None:
            env.append({"name": "PET_RDZV_ID", "value": str(elastic["rdzvId"])})
        conf = elastic.get("rdzvConf")
        if conf:
            env.append({"name": "PET_RDZV_CONF",
                        "value": ",".join(f"{c.get('key')}={c.get('value')}" for c in conf if isinstance(c, dict))})
        if elastic.get("standalone") is True:
            env.append({"name": "PET_STANDALONE", "value": ""})
    else:
        env.append({"name": "PET_NNODES", "value": str(total)})
    return env


def pytorch_init_container(master_addr: str) -> dict[str, Any]:
    """initcontainer.go's default template (image alpine:3.10, 100 tries)."""
    return {"name": "init-pytorch", "image": PYTORCH_INIT_IMAGE, "imagePullPolicy": "IfNotPresent",
            "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}},
            "command": ["sh", "-c", f"err=1;for i in $(seq {PYTORCH_INIT_MAX_TRIES}); do if nslookup {master_addr}; "
                                    "then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err"]}


def tf_config(job: Mapping[str, Any], rtype: str, index: int) -> str:
    """genTFConfigJSONStr, as Go's encoding/json writes it (compact, map keys sorted)."""
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    cluster: dict[str, list[str]] = {}
    for rt, rspec in TF.spec_of(job).items():
        port = _port_of(TF, job, rt)
        cluster[rt.lower()] = [f"{general_name(name, rt, i)}.{namespace}.svc:{port}"
                               for i in range(_int(rspec.get("replicas"), 1))]
    task = {"type": rtype.lower(), "index": index}
    if job["spec"].get("enableDynamicWorker") is True:
        sparse: dict[str, Any] = {"worker": {}, "ps": []}
        if rtype.lower() == "ps":
            sparse["ps"] = [cluster["ps"][index]]
        elif rtype.lower() == "worker":
            sparse["ps"] = cluster.get("ps") or []
            sparse["worker"] = {str(index): cluster["worker"][index]}
        return json.dumps({"cluster": sparse, "task": task}, separators=(",", ":"))
    return json.dumps({"cluster": dict(sorted(cluster.items())), "task": task, "environment": "cloud"},
                      separators=(",", ":"))


def _paddle_env(job: Mapping[str, Any], rtype: str, index: int) -> list[dict[str, Any]]:
    name = job["metadata"]["name"]
    replicas = PADDLE.spec_of(job)
    env: list[dict[str, Any]] = [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "PADDLE_JOB_ID", "value": name},
                                 {"name": "PADDLE_NNODES", "value": str(_total(PADDLE, job))}]
    master = "Master" if "Master" in replicas else "Worker"
    port = _port_of(PADDLE, job, master) or PADDLE.port
    first = index == 0 and (master == "Worker" or rtype == "Master")
    if first:
        env += [{"name": "POD_IP_DUMMY", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "PADDLE_MASTER", "value": f"$(POD_IP_DUMMY):{port}"}]
    else:
        env.append({"name": "PADDLE_MASTER", "value": f"{general_name(name, master, 0)}:{port}"})
    if master == "Master":
        env.append({"name": "PADDLE_SERVER_NUM" if rtype == "Master" else "PADDLE_TRAINER_NUM", "value": "1"})
    return env


def _is_distributed(job: Mapping[str, Any]) -> bool:
    replicas = TF.spec_of(job)
    return sum(_int((replicas.get(t) or {}).get("replicas"), 1) for t in TF.replica_types if t in replicas) != 1


def set_cluster_spec(fw: Framework, job: Mapping[str, Any], pod_spec: dict[str, Any], rtype: str, index: int) -> None:
    if fw is TF:
        if not _is_distributed(job):
            return
        for container in pod_spec.get("containers") or ():
            if container.get("name") == TF.container:
                container.setdefault("env", []).append({"name": "TF_CONFIG", "value": tf_config(job, rtype, index)})
                break
        return
    make: Callable[[Mapping[str, Any], str, int], list[dict[str, Any]]] = _pytorch_env if fw is PYTORCH else _paddle_env
    for container in pod_spec.get("containers") or ():
        container.setdefault("env", []).extend(make(job, rtype, index))
    if fw is PYTORCH and "Master" in fw.spec_of(job) and rtype == "Worker":
        pod_spec.setdefault("initContainers", []).append(
            pytorch_init_container(general_name(job["metadata"]["name"], "Master", 0)))


def is_master_role(fw: Framework, job: Mapping[str, Any], rtype: str, index: int) -> bool:
    replicas = fw.spec_of(job)
    if any(t in replicas for t in fw.master_types):
        return rtype in fw.master_types
    return rtype == "Worker" and index == 0


def operator_labels(fw: Framework, job_name: str, rtype: str) -> dict[str, str]:
    return {OPERATOR_NAME: fw.controller_name, JOB_NAME: job_name.replace("/", "-"), REPLICA_TYPE: rtype.lower()}


def replica_pod(fw: Framework, job: Mapping[str, Any], rtype: str, index: int) -> dict[str, Any]:
    """createNewPod: the pod of replica `rtype` `index` (`job` defaulted)."""
    rspec = fw.spec_of(job)[rtype]
    template = copy.deepcopy(rspec.get("template") or {})
    meta = Body(template)
    labels = {**meta.labels, **operator_labels(fw, job["metadata"]["name"], rtype),
              REPLICA_INDEX: str(index)}
    if is_master_role(fw, job, rtype, index):
        labels[JOB_ROLE] = "master"
    pod_spec = template.get("spec") or {}
    set_cluster_spec(fw, job, pod_spec, rtype, index)
    policy = rspec.get("restartPolicy")
    pod_spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
    pod_meta: dict[str, Any] = {"name": general_name(job["metadata"]["name"], rtype, index),
                                "namespace": job["metadata"]["namespace"], "labels": labels,
                                "ownerReferences": [controller_ref(job)]}
    if meta.annotations:
        pod_meta["annotations"] = dict(meta.annotations)
    if meta.finalizers:
        pod_meta["finalizers"] = list(meta.finalizers)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}


def replica_service(fw: Framework, job: Mapping[str, Any], rtype: str, index: int) -> dict[str, Any]:
    """CreateNewService: headless, selecting the replica's pod, the default container's ports."""
    labels = {**operator_labels(fw, job["metadata"]["name"], rtype), REPLICA_INDEX: str(index)}
    containers = (((fw.spec_of(job)[rtype].get("template") or {}).get("spec")) or {}).get("containers") or []
    ports = next((c.get("ports") or [] for c in containers if c.get("name") == fw.container), [])
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": general_name(job["metadata"]["name"], rtype, index),
                         "namespace": job["metadata"]["namespace"], "labels": dict(labels),
                         "ownerReferences": [controller_ref(job)]},
            "spec": {"clusterIP": "None", "selector": labels,
                     "ports": [{"name": p.get("name"), "port": p.get("containerPort")} for p in ports]}}


# ---------------------------------------------------------------- status (commonutil.UpdateJobConditions)


def _is(status: Mapping[str, Any], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True" for c in status.get("conditions") or ())


def update_condition(status: dict[str, Any], ctype: str, value: str, reason: str, message: str) -> None:
    """setCondition: nothing changes once Failed; Running and Restarting replace each other; Succeeded and
    Failed turn Running False; the transition time is kept while the status is."""
    if _is(status, "Failed"):
        return
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    current = next((c for c in conditions if c.get("type") == ctype), None)
    if current is not None and current.get("status") == value and current.get("reason") == reason:
        return
    stamp = now()
    new = {"type": ctype, "status": value, "reason": reason, "message": message, "lastUpdateTime": stamp,
           "lastTransitionTime": current["lastTransitionTime"] if current is not None
           and current.get("status") == value else stamp}
    kept = []
    for c in conditions:
        if (ctype == "Restarting" and c.get("type") == "Running") or (ctype == "Running" and c.get("type") ==
                                                                       "Restarting") or c.get("type") == ctype:
            continue
        if ctype in ("Failed", "Succeeded") and c.get("type") == "Running":
            c = {**c, "status": "False"}
        kept.append(c)
    status["conditions"] = [*kept, new]


def _exit_code(fw: Framework, pod: Mapping[str, Any]) -> int:
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        terminated = (cs.get("state") or {}).get("terminated")
        if cs.get("name") == fw.container and terminated:
            return _int(terminated.get("exitCode"), 0xbeef)
    return 0xbeef


class TrainingOperator:
    def __init__(self, *, fw: Framework, rt: ResourceType, storage: ObjectStorage, logger: Any) -> None:
        self.fw = fw
        self.rt = rt
        self.storage = storage
        self.log = logger

    async def reconcile(self, namespace: str, name: str) -> float | None:
        fw = self.fw
        try:
            stored = await self.storage.get(self.rt, namespace=namespace, name=name)
        except ApiError as e:
            if e.code == 404:
                return None
            raise
        if stored["metadata"].get("deletionTimestamp"):
            return None
        job = defaulted(fw, stored)
        kind = fw.kind
        run_policy = job["spec"]["runPolicy"]
        selector = f"{JOB_NAME}={name.replace('/', '-')},{OPERATOR_NAME}={fw.controller_name}"
        pods = [p for p in (await self.storage.list(kinds.PODS, namespace=namespace, label_selector=selector)).items
                if owned_by(p, stored)]
        services = [s for s in (await self.storage.list(kinds.SERVICES, namespace=namespace,
                                                        label_selector=selector)).items if owned_by(s, stored)]
        status: dict[str, Any] = copy.deepcopy(stored.get("status") or {})
        if not status.get("conditions"):
            update_condition(status, "Created", "True", f"{kind}Created", f"{kind} {name} is created.")
        status.setdefault("replicaStatuses", {})
        finished = _is(status, "Succeeded") or _is(status, "Failed")
        if finished:
            await self._clean_up(run_policy, pods, services, finished=True)
            if _is(status, "Succeeded"):
                for rs in status["replicaStatuses"].values():
                    if rs.get("active"):
                        rs["succeeded"] = _int(rs.get("succeeded")) + rs.pop("active")
            await write_status(self.storage, self.rt, stored, status)
            return None
        if run_policy.get("suspend") is True:
            await self._clean_up(run_policy, pods, services, finished=False)
            for rs in status["replicaStatuses"].values():
                rs.pop("active", None)
            message = f"{kind} {name} is suspended."
            if _is(status, "Running"):
                update_condition(status, "Running", "False", f"{kind}Suspended", message)
            if not _is(status, "Suspended"):
                update_condition(status, "Suspended", "True", f"{kind}Suspended", message)
            await write_status(self.storage, self.rt, stored, status)
            return None
        if _is(status, "Suspended"):
            update_condition(status, "Suspended", "False", f"{kind}Resumed", f"{kind} {name} is resumed.")
            status["startTime"] = now()

        failure = self._past_limits(job, status, pods)
        if failure is not None:
            status.setdefault("completionTime", now())
            await self._clean_up(run_policy, pods, services, finished=False)
            update_condition(status, "Failed", "True", f"{kind}Failed", failure)
            await write_status(self.storage, self.rt, stored, status)
            return None

        replicas = fw.spec_of(job)
        ordered = [t for t in fw.replica_types if t in replicas] + [t for t in replicas if t not in fw.replica_types]
        for rtype in ordered:
            await self._reconcile_pods(job, status, pods, rtype)
            await self._reconcile_services(job, services, rtype)
        self._update_job_status(job, status, pods)
        await write_status(self.storage, self.rt, stored, status)
        deadline = run_policy.get("activeDeadlineSeconds")
        if isinstance(deadline, int) and status.get("startTime"):
            return float(deadline)
        return None

    def _past_limits(self, job: Mapping[str, Any], status: Mapping[str, Any], pods: list[dict[str, Any]]) -> str | None:
        run_policy = job["spec"]["runPolicy"]
        name = job["metadata"]["name"]
        limit = run_policy.get("backoffLimit")
        if isinstance(limit, int):
            restarts = 0
            for rtype, rspec in self.fw.spec_of(job).items():
                if rspec.get("restartPolicy") not in ("OnFailure", "Always", "ExitCode"):
                    continue
                for pod in pods:
                    if pod["metadata"]["labels"].get(REPLICA_TYPE) != rtype.lower() or \
                            (pod.get("status") or {}).get("phase") != "Running":
                        continue
                    st = pod.get("status") or {}
                    restarts += sum(_int(c.get("restartCount")) for c in (*st.get("initContainerStatuses", ()),
                                                                          *st.get("containerStatuses", ())))
            if restarts >= limit:
                return f"Job {name} has failed because it has reached the specified backoff limit"
        deadline = run_policy.get("activeDeadlineSeconds")
        started = parse_time(status.get("startTime")) if isinstance(status.get("startTime"), str) else None
        if isinstance(deadline, int) and started is not None and \
                (dt.datetime.now(dt.UTC) - started).total_seconds() >= deadline:
            return f"Job {name} has failed because it was active longer than specified deadline"
        return None

    async def _clean_up(self, run_policy: Mapping[str, Any], pods: list[dict[str, Any]],
                        services: list[dict[str, Any]], *, finished: bool) -> None:
        """DeletePodsAndServices: every pod and its Service, or once finished as cleanPodPolicy says."""
        policy = run_policy.get("cleanPodPolicy") or "None"
        if finished and policy == "None":
            return
        by_name = {s["metadata"]["name"]: s for s in services}
        for pod in pods:
            if finished and policy == "Running" and (pod.get("status") or {}).get("phase") not in ("Running",
                                                                                                      "Pending"):
                continue
            await delete_quietly(self.storage, kinds.PODS, pod)
            service = by_name.get(pod["metadata"]["name"])
            if service is not None:
                await delete_quietly(self.storage, kinds.SERVICES, service)
        if not pods and not finished:
            for service in services:
                await delete_quietly(self.storage, kinds.SERVICES, service)

    async def _reconcile_pods(self, job: Mapping[str, Any], status: dict[str, Any], pods: list[dict[str, Any]],
                              rtype: str) -> None:
        fw, kind, name = self.fw, self.fw.kind, job["metadata"]["name"]
        rspec = fw.spec_of(job)[rtype]
        count = _int(rspec.get("replicas"), 1)
        rs: dict[str, Any] = {}
        status["replicaStatuses"][rtype] = rs
        mine = [p for p in pods if p["metadata"]["labels"].get(REPLICA_TYPE) == rtype.lower()]
        for index in range(_slice_size(mine, count)):
            slot = [p for p in mine if p["metadata"]["labels"].get(REPLICA_INDEX) == str(index)]
            if not slot and index >= count:
                continue
            if not slot:
                try:
                    await self.storage.create(kinds.PODS, replica_pod(fw, job, rtype, index),
                                              namespace=job["metadata"]["namespace"])
                except ApiError as e:
                    if e.code != 409:
                        self.log.info("pod create refused", job=name, code=e.code, error=e.message)
                        if e.code >= 500:
                            raise
                continue
            pod = slot[0]
            if index >= count:  # out of range (the job was scaled down): the operator deletes it
                await delete_quietly(self.storage, kinds.PODS, pod)
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Failed" and not pod["metadata"].get("deletionTimestamp"):
                code = _exit_code(fw, pod)
                policy = rspec.get("restartPolicy")
                if (policy == "ExitCode" and code >= 128) or policy in ("OnFailure", "Always"):
                    await delete_quietly(self.storage, kinds.PODS, pod)
                    update_condition(status, "Restarting", "True", f"{kind}Restarting",
                                     f"job {name} is restarting because {rtype} replica(s) failed.")
                elif policy == "ExitCode":
                    update_condition(status, "Failed", "True", f"{kind}Failed",
                                     f"job {json.dumps(name)} is failing because {json.dumps(rtype)} replica(s) "
                                     "failed.")
            if phase == "Running":
                key = "failed" if pod["metadata"].get("deletionTimestamp") else "active"
                rs[key] = rs.get(key, 0) + 1
            elif phase == "Succeeded":
                rs["succeeded"] = rs.get("succeeded", 0) + 1
            elif phase == "Failed":
                rs["failed"] = rs.get("failed", 0) + 1
        if fw is PYTORCH:
            labels = operator_labels(fw, name, rtype)
            rs["selector"] = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))

    async def _reconcile_services(self, job: Mapping[str, Any], services: list[dict[str, Any]], rtype: str) -> None:
        count = _int(self.fw.spec_of(job)[rtype].get("replicas"), 1)
        mine = [s for s in services if (s["metadata"].get("labels") or {}).get(REPLICA_TYPE) == rtype.lower()]
        have = {s["metadata"]["labels"].get(REPLICA_INDEX) for s in mine}
        for service in mine:
            raw = service["metadata"]["labels"].get(REPLICA_INDEX)
            if isinstance(raw, str) and raw.isdigit() and int(raw) >= count:  # scaled down: ReconcileServices
                await delete_quietly(self.storage, kinds.SERVICES, service)
        for index in range(count):
            if str(index) in have:
                continue
            try:
                await self.storage.create(kinds.SERVICES, replica_service(self.fw, job, rtype, index),
                                          namespace=job["metadata"]["namespace"])
            except ApiError as e:
                if e.code != 409:
                    raise

    def _update_job_status(self, job: Mapping[str, Any], status: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        fw, kind = self.fw, self.fw.kind
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        replicas = fw.spec_of(job)
        status.setdefault("startTime", now())
        has_master = any(t in replicas for t in fw.master_types)
        restarting_before = next((c for c in status.get("conditions") or () if c.get("type") == "Restarting"), None)
        worker0_done = "Worker" not in replicas or any(
            p["metadata"]["labels"].get(REPLICA_TYPE) == "worker" and p["metadata"]["labels"].get(REPLICA_INDEX)
            == "0" and (p.get("status") or {}).get("phase") == "Succeeded" and _exit_code(fw, p) in (0, 0xbeef)
            for p in pods)
        ordered = [t for t in fw.replica_types if t in replicas]
        for rtype in ordered:
            rspec = replicas[rtype]
            rs = status["replicaStatuses"].get(rtype) or {}
            succeeded, running, failed = _int(rs.get("succeeded")), _int(rs.get("active")), _int(rs.get("failed"))
            wanted = _int(rspec.get("replicas"), 1)
            expected = wanted - succeeded
            if fw is TF:
                if has_master:
                    if rtype in fw.master_types:
                        if running > 0:
                            update_condition(status, "Running", "True", f"{kind}Running",
                                             f"TFJob {namespace}/{name} is running.")
                        if expected == 0:
                            status.setdefault("completionTime", now())
                            update_condition(status, "Succeeded", "True", f"{kind}Succeeded",
                                             f"TFJob {namespace}/{name} successfully completed.")
                elif rtype == "Worker":
                    if expected == 0 or (worker0_done and job["spec"].get("successPolicy") != "AllWorkers"):
                        status.setdefault("completionTime", now())
                        update_condition(status, "Succeeded", "True", f"{kind}Succeeded",
                                         f"TFJob {namespace}/{name} successfully completed.")
                    elif running > 0:
                        update_condition(status, "Running", "True", f"{kind}Running",
                                         f"TFJob {namespace}/{name} is running.")
                if failed > 0:
                    if restarting_before is not None:
                        update_condition(status, "Restarting", "True", restarting_before["reason"],
                                         restarting_before["message"])
                    elif not (job["spec"].get("enableDynamicWorker") is True and rtype == "Worker"):
                        status.setdefault("completionTime", now())
                        update_condition(status, "Failed", "True", f"{kind}Failed",
                                         f"TFJob {namespace}/{name} has failed because {failed} {rtype} replica(s) "
                                         "failed.")
                continue
            if has_master:
                if rtype == "Master":
                    if running > 0:
                        update_condition(status, "Running", "True", f"{kind}Running", f"{kind} {name} is running.")
                    if expected == 0:
                        status.setdefault("completionTime", now())
                        update_condition(status, "Succeeded", "True", f"{kind}Succeeded",
                                         f"{kind} {name} is successfully completed.")
                        return
            elif rtype == "Worker":
                elastic = fw is PYTORCH and job["spec"].get("elasticPolicy") is not None
                if expected == 0 or (elastic and succeeded > 0):
                    status.setdefault("completionTime", now())
                    update_condition(status, "Succeeded", "True", f"{kind}Succeeded",
                                     f"{kind} {namespace}/{name} successfully completed.")
                elif running > 0:
                    update_condition(status, "Running", "True", f"{kind}Running",
                                     f"{kind} {namespace}/{name} is running.")
            if failed > 0 and wanted > succeeded + running:
                if rspec.get("restartPolicy") != "Never":
                    update_condition(status, "Restarting", "True", f"{kind}Restarting",
                                     f"{kind} {name} is restarting because {failed} {rtype} replica(s) failed.")
                else:
                    status.setdefault("completionTime", now())
                    update_condition(status, "Failed", "True", f"{kind}Failed",
                                     f"{kind} {name} is failed because {failed} {rtype} replica(s) failed.")


#: the kinds the training-operator serves here (MPIJob v2beta1 is the mpi-operator's: mpi.py)
def _webhook(fw: Framework) -> Callable[[JSONObject], list[FieldError]]:
    def validate(obj: JSONObject) -> list[FieldError]:
        return webhook_errors(fw, obj)

    return validate


KUBEFLOW_SERVED: Final[tuple[ResourceType, ...]] = tuple(
    with_validation(KUBEFLOW[kind], _webhook(fw)) for kind, fw in FRAMEWORKS.items())


async def run_training_operator(*, storage: ObjectStorage, registry: Registry, stop: asyncio.Event, logger: Any,
                                **_: Any) -> None:
    """The training-operator's PyTorchJob, TFJob and PaddleJob controllers, until `stop` is set."""
    loops = {}
    for rt in KUBEFLOW_SERVED:
        operator = TrainingOperator(fw=FRAMEWORKS[rt.kind], rt=rt, storage=storage, logger=logger.bind(kind=rt.kind))
        loops[f"kubeflow:{rt.kind}"] = run_reconciler(storage=storage, stop=stop, logger=logger.bind(kind=rt.kind),
                                                      owner=rt, children=[kinds.PODS, kinds.SERVICES],
                                                      reconcile=operator.reconcile)
    await run_until_stopped(loops, stop=stop, logger=logger)
