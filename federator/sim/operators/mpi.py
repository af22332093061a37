"""The Kubeflow mpi-operator v0.6.0 (github.com/kubeflow/mpi-operator, pkg/controller), emulated for
kubeflow.org/v2beta1 MPIJob. Line numbers below are of tag v0.6.0 (mpi_job_controller.go unless named).

For each MPIJob it does what syncHandler (551) does:
- defaults it in memory (pkg/apis/kubeflow/v2beta1/default.go:27-80, SetDefaults_MPIJob): runPolicy.cleanPodPolicy
  None, slotsPerWorker 1, sshAuthMountPath /root/.ssh, mpiImplementation OpenMPI, launcherCreationPolicy
  AtStartup, Launcher replicas 1 restartPolicy OnFailure, Worker replicas 0 restartPolicy Never; the stored object
  keeps what was sent;
- skips a job whose runPolicy.managedBy names another controller (managedByExternalController, 1728) or that is
  being deleted; a job that fails pkg/apis/kubeflow/validation/validation.go (ValidateMPIJob, 49-160) gets a
  Warning Event `ValidationError` "Found validation errors: ..." and nothing else (the operator has no webhook:
  the object stays stored, without status);
- sets Created (MPIJobCreated, "MPIJob <ns>/<name> is created.") first, startTime when not suspended;
- until the launcher Job finished: the headless Service `<job>` (newJobService, 1339: selector operator-name
  mpi-operator and job-name, label app), the ConfigMap `<job>-config` (newConfigMap, 1272: `hostfile` with
  `<job>-worker-<i>.<job>.<ns>.svc slots=<n>` per worker for OpenMPI, `...svc:<n>` for Intel and MPICH, the
  launcher first with runLauncherAsWorker; updateDiscoverHostsInConfigMap, 1316: `discover_hosts.sh` echoing the
  running workers, sorted), kept up to date; the Secret `<job>-ssh` (newSSHAuthSecret, 1368: type
  kubernetes.io/ssh-auth, an ECDSA P-521 key as `ssh-privatekey` (PEM "EC PRIVATE KEY") and `ssh-publickey` in
  authorized_keys form, made with the `cryptography` package as Go's crypto and x/crypto/ssh make them);
- unless suspended, worker pods `<job>-worker-<i>` (getOrCreateWorker, 939; newWorker, 1412): the Worker
  template with labels training.kubeflow.org/operator-name mpi-operator, job-name, job-role worker and
  replica-index, hostname `<job>-worker-<i>`, subdomain `<job>`, DNS search `<job>.<ns>.svc.cluster.local`,
  the replica's restartPolicy (ExitCode: Never), command `/usr/sbin/sshd -De` when the first container has
  neither command nor args, env K_MPI_JOB_ROLE=worker, and the ssh-auth Secret volume (mode 0600 under
  /root/.ssh) mounted at sshAuthMountPath (setupSSHOnPod, 1682); workers past Worker.replicas are deleted;
- the launcher as a batch/v1 Job `<job>-launcher` (newLauncherJob, 1467; newLauncherPodTemplate, 1495), created
  at startup (or, with launcherCreationPolicy WaitForWorkersReady, once every worker is Ready): runPolicy's
  ttlSecondsAfterFinished, activeDeadlineSeconds and backoffLimit, suspend while the MPIJob is; its pod
  template the Launcher's with job-role launcher, hostname `<job>-launcher`, subdomain `<job>`, env
  K_MPI_JOB_ROLE=launcher and per implementation OMPI_MCA_orte_keep_fqdn_hostnames, OMPI_MCA_orte_default_hostfile,
  OMPI_MCA_plm_rsh_args, OMPI_MCA_orte_set_default_slots (OpenMPI), I_MPI_HYDRA_HOST_FILE,
  I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS, I_MPI_PERHOST (Intel), HYDRA_HOST_FILE, HYDRA_LAUNCH_EXTRA_ARGS (MPICH),
  NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES empty (unless runLauncherAsWorker), the ssh-auth volume,
  and the ConfigMap mounted at /etc/mpi (hostfile 0444, discover_hosts.sh 0555);
- a suspended job's launcher Job gets spec.suspend true (false again on resume) and its workers are deleted
  (cleanUpWorkerPods, 701);
- status as updateMPIJobStatus (1051) keeps it: Suspended True/False (MPIJobSuspended "MPIJob suspended",
  MPIJobResumed "MPIJob resumed", a new startTime), replicaStatuses Launcher (active running launcher pods,
  failed = the Job's, succeeded 1) and Worker (active/succeeded/failed), Running (MPIJobRunning "MPIJob <ns>/<name>
  is running." once a launcher pod and every worker run; False MPIJobSuspended "... is suspended." while
  suspended), Succeeded (MPIJobSucceeded "MPIJob <ns>/<name> successfully completed.", completionTime the
  Job's) when the launcher Job is Complete, Failed (the Job's Failed reason and message, BackoffLimitExceeded
  with "/<reason>" and ": <message>" of the last failed launcher pod; updateMPIJobFailedStatus, 1139), Failed
  MPIJobEvicted "<n>/<m> workers are evicted" for evicted workers; conditions as mpi_job_controller_status.go's
  setCondition (102) and filterOutCondition (122): Succeeded or Failed turn Running and Failed False;
- once finished (a completionTime), cleanPodPolicy Running or All deletes the workers (Running: the running and
  pending ones), None keeps them.

The launcher runs only under the batch/v1 Job controller (batchjob.py): the "mpi" operator needs "batch" in
OPERATORS, as a real cluster always runs kube's Job controller. This operator runs no PodGroup control (the
operator's gang-scheduler option is off: the hub's PodGroup, named on the templates, gangs the pods). Secrets are
served by a simulated member only when it runs this operator (served.SECRETS). Differences from the real operator
are in docs/simulator-fidelity.md. It never imports the hub.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
from collections.abc import Mapping
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from federator.apis.common import dns1035_label_errors
from federator.apiserver import errors
from federator.apiserver.errors import ApiError, FieldError
from federator.apiserver.registry import JSONObject, Registry, ResourceType
from federator.apiserver.storage import ObjectStorage
from federator.sim import kinds
from federator.sim.operators.loop import (
    condition_true,
    controller_ref,
    delete_quietly,
    now,
    owned_by,
    run_reconciler,
    write_status,
)
from federator.sim.operators.served import JOB, JOB_CONTROLLER_UID_LABEL, KUBEFLOW, SECRETS

OPERATOR_NAME: Final = "mpi-operator"
#: the runPolicy.managedBy value naming this operator (types.go KubeflowJobController)
KUBEFLOW_JOB_CONTROLLER: Final = "kubeflow.org/mpi-operator"
MULTIKUEUE_CONTROLLER: Final = "kueue.x-k8s.io/multikueue"
OPERATOR_NAME_LABEL: Final = "training.kubeflow.org/operator-name"
JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL: Final = "training.kubeflow.org/job-role"
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
CONFIG_SUFFIX: Final = "-config"
CONFIG_VOLUME: Final = "mpi-job-config"
CONFIG_MOUNT_PATH: Final = "/etc/mpi"
HOSTFILE: Final = "hostfile"
DISCOVER_HOSTS: Final = "discover_hosts.sh"
SSH_SUFFIX: Final = "-ssh"
SSH_VOLUME: Final = "ssh-auth"
ROOT_SSH_PATH: Final = "/root/.ssh"
LAUNCHER_SUFFIX: Final = "-launcher"
WORKER_SUFFIX: Final = "-worker"
SSH_PRIVATE_KEY: Final = "ssh-privatekey"
SSH_PUBLIC_KEY: Final = "ssh-publickey"
EVENT_MESSAGE_LIMIT: Final = 1024

_SSH_ITEMS: Final = [{"key": SSH_PRIVATE_KEY, "path": "id_rsa"}, {"key": SSH_PUBLIC_KEY, "path": "id_rsa.pub"},
                     {"key": SSH_PUBLIC_KEY, "path": "authorized_keys"}]
_CONFIG_ITEMS: Final = [{"key": HOSTFILE, "path": HOSTFILE, "mode": 0o444},
                        {"key": DISCOVER_HOSTS, "path": DISCOVER_HOSTS, "mode": 0o555}]
_HOSTFILE_PATH: Final = f"{CONFIG_MOUNT_PATH}/{HOSTFILE}"
#: launcher env per mpiImplementation (ompiEnvVars 176, intelEnvVars 191, mpichEnvVars 201)
IMPLEMENTATION_ENV: Final[Mapping[str, tuple[tuple[str, str], ...]]] = {
    "OpenMPI": (("OMPI_MCA_orte_keep_fqdn_hostnames", "true"), ("OMPI_MCA_orte_default_hostfile", _HOSTFILE_PATH),
                ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10")),
    "Intel": (("I_MPI_HYDRA_HOST_FILE", _HOSTFILE_PATH),
              ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-o ConnectionAttempts=10")),
    "MPICH": (("HYDRA_HOST_FILE", _HOSTFILE_PATH), ("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10")),
}
#: the slots env per implementation (openMPISlotsEnv, intelMPISlotsEnv; MPICH has none)
SLOTS_ENV: Final[Mapping[str, str]] = {"OpenMPI": "OMPI_MCA_orte_set_default_slots", "Intel": "I_MPI_PERHOST"}
_CLEAN_POLICIES: Final = ("All", "None", "Running")
_RESTART_POLICIES: Final = ("Never", "OnFailure")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _replica(job: Mapping[str, Any], rtype: str) -> dict[str, Any] | None:
    spec = ((job.get("spec") or {}).get("mpiReplicaSpecs") or {}).get(rtype)
    return spec if isinstance(spec, dict) else None


def worker_name(job: str, index: int) -> str:
    return f"{job}{WORKER_SUFFIX}-{index}"


def worker_replicas(job: Mapping[str, Any]) -> int:
    return _int((_replica(job, "Worker") or {}).get("replicas")) or 0


def default_labels(job: str, role: str) -> dict[str, str]:
    return {OPERATOR_NAME_LABEL: OPERATOR_NAME, JOB_NAME_LABEL: job, JOB_ROLE_LABEL: role}


# ---------------------------------------------------------------- defaults and validation


def defaulted(job: Mapping[str, Any]) -> dict[str, Any]:
    """SetDefaults_MPIJob on a copy (default.go:27-80)."""
    out = copy.deepcopy(dict(job))
    spec = out.setdefault("spec", {})
    policy = spec.setdefault("runPolicy", {})
    if not isinstance(policy, dict):
        policy = spec["runPolicy"] = {}
    if policy.get("cleanPodPolicy") is None:
        policy["cleanPodPolicy"] = "None"
    if spec.get("slotsPerWorker") is None:
        spec["slotsPerWorker"] = 1
    if not spec.get("sshAuthMountPath"):
        spec["sshAuthMountPath"] = ROOT_SSH_PATH
    if not spec.get("mpiImplementation"):
        spec["mpiImplementation"] = "OpenMPI"
    if not spec.get("launcherCreationPolicy"):
        spec["launcherCreationPolicy"] = "AtStartup"
    for rtype, restart, replicas in (("Launcher", "OnFailure", 1), ("Worker", "Never", 0)):
        rspec = _replica(out, rtype)
        if rspec is None:
            continue
        if not rspec.get("restartPolicy"):
            rspec["restartPolicy"] = restart
        if rspec.get("replicas") is None:
            rspec["replicas"] = replicas
    return out


def validation_errors(job: Mapping[str, Any]) -> list[FieldError]:
    """ValidateMPIJob (validation.go:49) on the defaulted job."""
    errs: list[FieldError] = []
    name = str(job["metadata"].get("name") or "")
    replicas = worker_replicas(job)
    host = worker_name(name, (replicas if replicas > 0 else 1) - 1)
    why = dns1035_label_errors(host)
    if why:
        errs.append(FieldError.invalid("metadata.name", name, f"will not able to create pod and service with invalid "
                                                              f"DNS label {host!r}: {', '.join(why)}"))
    spec = job["spec"]
    specs = spec.get("mpiReplicaSpecs")
    path = "spec.mpiReplicaSpecs"
    if not isinstance(specs, dict):
        errs.append(FieldError.required(path, "must have replica specs"))
    else:
        launcher, worker = _replica(job, "Launcher"), _replica(job, "Worker")
        if launcher is None:
            errs.append(FieldError.required(f"{path}[Launcher]", "must have Launcher replica spec"))
        else:
            errs += _replica_errors(launcher, f"{path}[Launcher]")
            if _int(launcher.get("replicas")) not in (None, 1):
                errs.append(FieldError.invalid(f"{path}[Launcher].replicas", launcher.get("replicas"), "must be 1"))
        if worker is not None:
            errs += _replica_errors(worker, f"{path}[Worker]")
            count = _int(worker.get("replicas"))
            if count is not None and count <= 0:
                errs.append(FieldError.invalid(f"{path}[Worker].replicas", count,
                                               "must be greater than or equal to 1"))
    slots = _int(spec.get("slotsPerWorker"))
    if slots is not None and slots < 0:
        errs.append(FieldError.invalid("spec.slotsPerWorker", slots, "must be greater than or equal to 0"))
    policy = spec["runPolicy"]
    if policy.get("cleanPodPolicy") not in _CLEAN_POLICIES:
        errs.append(FieldError.not_supported("spec.runPolicy.cleanPodPolicy", policy.get("cleanPodPolicy"),
                                             _CLEAN_POLICIES))
    for field in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        value = _int(policy.get(field))
        if value is not None and value < 0:
            errs.append(FieldError.invalid(f"spec.runPolicy.{field}", value, "must be greater than or equal to 0"))
    manager = policy.get("managedBy")
    if manager is not None and manager not in (KUBEFLOW_JOB_CONTROLLER, MULTIKUEUE_CONTROLLER):
        errs.append(FieldError.not_supported("spec.runPolicy.managedBy", manager,
                                             (KUBEFLOW_JOB_CONTROLLER, MULTIKUEUE_CONTROLLER)))
    if spec.get("mpiImplementation") not in IMPLEMENTATION_ENV:
        errs.append(FieldError.not_supported("spec.mpiImplementation", spec.get("mpiImplementation"),
                                             sorted(IMPLEMENTATION_ENV)))
    return errs


def _replica_errors(rspec: Mapping[str, Any], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if rspec.get("replicas") is None:
        errs.append(FieldError.required(f"{path}.replicas", "must define number of replicas"))
    if rspec.get("restartPolicy") not in _RESTART_POLICIES:
        errs.append(FieldError.not_supported(f"{path}.restartPolicy", rspec.get("restartPolicy"), _RESTART_POLICIES))
    if not (((rspec.get("template") or {}).get("spec")) or {}).get("containers"):
        errs.append(FieldError.required(f"{path}.template.spec.containers", "must define at least one container"))
    return errs


# ---------------------------------------------------------------- the objects it makes


def _hosts_suffix(job: Mapping[str, Any]) -> str:
    return f".{job['metadata']['name']}.{job['metadata']['namespace']}.svc"


def hostfile(job: Mapping[str, Any]) -> str:
    """newConfigMap's hostfile (1272)."""
    name, spec = job["metadata"]["name"], job["spec"]
    slots = spec["slotsPerWorker"]
    hosts = [worker_name(name, i) for i in range(worker_replicas(job))]
    if spec.get("runLauncherAsWorker") is True:
        hosts.insert(0, name + LAUNCHER_SUFFIX)
    form = "{host}{suffix} slots={slots}\n" if spec["mpiImplementation"] == "OpenMPI" else "{host}{suffix}:{slots}\n"
    return "".join(form.format(host=h, suffix=_hosts_suffix(job), slots=slots) for h in hosts)


def discover_hosts(job: Mapping[str, Any], running_workers: list[Mapping[str, Any]]) -> str:
    """updateDiscoverHostsInConfigMap (1316)."""
    lines = ["#!/bin/sh\n"]
    if job["spec"].get("runLauncherAsWorker") is True:
        lines.append(f"echo {job['metadata']['name']}{LAUNCHER_SUFFIX}{_hosts_suffix(job)}\n")
    for pod in sorted(running_workers, key=lambda p: str(p["metadata"]["name"])):
        lines.append(f"echo {pod['metadata']['name']}{_hosts_suffix(job)}\n")
    return "".join(lines)


def _owned_meta(job: Mapping[str, Any], name: str) -> dict[str, Any]:
    return {"name": name, "namespace": job["metadata"]["namespace"], "labels": {"app": job["metadata"]["name"]},
            "ownerReferences": [controller_ref(job)]}


def config_map(job: Mapping[str, Any], running_workers: list[Mapping[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _owned_meta(job, job["metadata"]["name"] +
                                                                              CONFIG_SUFFIX),
            "data": {HOSTFILE: hostfile(job), DISCOVER_HOSTS: discover_hosts(job, running_workers)}}


def job_service(job: Mapping[str, Any]) -> dict[str, Any]:
    """newJobService (1339): headless, selecting every pod of the job by operator and job name."""
    name = job["metadata"]["name"]
    return {"apiVersion": "v1", "kind": "Service", "metadata": _owned_meta(job, name),
            "spec": {"clusterIP": "None", "selector": {OPERATOR_NAME_LABEL: OPERATOR_NAME, JOB_NAME_LABEL: name}}}


def ssh_key_pair() -> tuple[bytes, bytes]:
    """newSSHAuthSecret's keys (1368): an ECDSA P-521 private key, PEM "EC PRIVATE KEY" (x509.MarshalECPrivateKey,
    SEC 1), and its public key as ssh.MarshalAuthorizedKey writes it ("ecdsa-sha2-nistp521 AAAA...\\n")."""
    key = ec.generate_private_key(ec.SECP521R1())
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private, public + b"\n"


def ssh_secret(job: Mapping[str, Any]) -> dict[str, Any]:
    private, public = ssh_key_pair()
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _owned_meta(job, job["metadata"]["name"] + SSH_SUFFIX),
            "type": "kubernetes.io/ssh-auth",
            "data": {SSH_PRIVATE_KEY: base64.b64encode(private).decode(),
                     SSH_PUBLIC_KEY: base64.b64encode(public).decode()}}


def _setup_ssh(pod_spec: dict[str, Any], job: Mapping[str, Any]) -> None:
    """setupSSHOnPod (1682)."""
    mount_path = job["spec"]["sshAuthMountPath"]
    source: dict[str, Any] = {"secretName": job["metadata"]["name"] + SSH_SUFFIX, "items": copy.deepcopy(_SSH_ITEMS)}
    if mount_path == ROOT_SSH_PATH:
        source["defaultMode"] = 0o600
    pod_spec.setdefault("volumes", []).append({"name": SSH_VOLUME, "secret": source})
    pod_spec["containers"][0].setdefault("volumeMounts", []).append({"name": SSH_VOLUME, "mountPath": mount_path})


def _restart_policy(pod_spec: dict[str, Any], rspec: Mapping[str, Any]) -> None:
    """setRestartPolicy (1611)."""
    policy = rspec.get("restartPolicy")
    pod_spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy


def _role_template(job: Mapping[str, Any], rtype: str, role: str, hostname: str) -> tuple[dict[str, Any],
                                                                                         dict[str, Any]]:
    """The replica's template with the default labels, hostname, subdomain and DNS settings (newWorker,
    newLauncherPodTemplate): (its metadata, its spec)."""
    template = copy.deepcopy((_replica(job, rtype) or {}).get("template") or {})
    meta: dict[str, Any] = template["metadata"] if isinstance(template.get("metadata"), dict) else {}
    labels = {**(meta.get("labels") or {}), **default_labels(job["metadata"]["name"], role)}
    pod_spec = template.get("spec") or {}
    pod_spec["hostname"] = hostname
    pod_spec["subdomain"] = job["metadata"]["name"]
    if pod_spec.get("hostNetwork") is True:
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    out_meta: dict[str, Any] = {"labels": labels}
    if meta.get("annotations"):
        out_meta["annotations"] = dict(meta["annotations"])
    return out_meta, pod_spec


def worker_pod(job: Mapping[str, Any], index: int) -> dict[str, Any]:
    """newWorker (1412)."""
    name, namespace = worker_name(job["metadata"]["name"], index), job["metadata"]["namespace"]
    meta, pod_spec = _role_template(job, "Worker", "worker", name)
    meta["labels"][REPLICA_INDEX_LABEL] = str(index)
    search = f"{job['metadata']['name']}.{namespace}.svc.cluster.local"
    dns = pod_spec.get("dnsConfig")
    if isinstance(dns, dict):
        dns["searches"] = [*(dns.get("searches") or []), search]
    else:
        pod_spec["dnsConfig"] = {"searches": [search]}
    _restart_policy(pod_spec, _replica(job, "Worker") or {})
    container = pod_spec["containers"][0]
    if not container.get("command") and not container.get("args"):
        container["command"] = ["/usr/sbin/sshd", "-De"]
    container.setdefault("env", []).append({"name": "K_MPI_JOB_ROLE", "value": "worker"})
    _setup_ssh(pod_spec, job)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, **meta, "ownerReferences": [controller_ref(job)]},
            "spec": pod_spec}


def launcher_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """newLauncherJob (1467) with newLauncherPodTemplate (1495)."""
    name, spec = job["metadata"]["name"], job["spec"]
    meta, pod_spec = _role_template(job, "Launcher", "launcher", name + LAUNCHER_SUFFIX)
    container = pod_spec["containers"][0]
    env = container.setdefault("env", [])
    env.append({"name": "K_MPI_JOB_ROLE", "value": "launcher"})
    implementation = spec["mpiImplementation"]
    env += [{"name": k, "value": v} for k, v in IMPLEMENTATION_ENV[implementation]]
    if implementation in SLOTS_ENV:
        env.append({"name": SLOTS_ENV[implementation], "value": str(spec["slotsPerWorker"])})
    if spec.get("runLauncherAsWorker") is not True:
        env += [{"name": "NVIDIA_VISIBLE_DEVICES"}, {"name": "NVIDIA_DRIVER_CAPABILITIES"}]
    _setup_ssh(pod_spec, job)
    _restart_policy(pod_spec, _replica(job, "Launcher") or {})
    pod_spec.setdefault("volumes", []).append({"name": CONFIG_VOLUME, "configMap": {
        "name": name + CONFIG_SUFFIX, "items": copy.deepcopy(_CONFIG_ITEMS)}})
    container.setdefault("volumeMounts", []).append({"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_PATH})
    policy = spec["runPolicy"]
    job_spec: dict[str, Any] = {"template": {"metadata": meta, "spec": pod_spec}}
    for field in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        if policy.get(field) is not None:
            job_spec[field] = policy[field]
    if policy.get("suspend") is True:
        job_spec["suspend"] = True
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _owned_meta(job, name + LAUNCHER_SUFFIX),
            "spec": job_spec}


# ---------------------------------------------------------------- status (mpi_job_controller_status.go)


def _has(status: Mapping[str, Any], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True" for c in status.get("conditions") or ())


def _get(status: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or () if c.get("type") == ctype), None)


def update_condition(status: dict[str, Any], ctype: str, value: str, reason: str, message: str) -> bool:
    """setCondition (102) with filterOutCondition (122): unchanged when status and reason are; the transition time
    kept while the status is; Running and Restarting replace each other; Succeeded or Failed turn Running and
    Failed False. True when it changed."""
    current = _get(status, ctype)
    if current is not None and current.get("status") == value and current.get("reason") == reason:
        return False
    stamp = now()
    new = {"type": ctype, "status": value, "lastUpdateTime": stamp,
           "lastTransitionTime": current["lastTransitionTime"] if current is not None
           and current.get("status") == value and current.get("lastTransitionTime") else stamp,
           "reason": reason, "message": message}
    kept = []
    for c in status.get("conditions") or ():
        if c.get("type") == ctype or {ctype, c.get("type")} == {"Running", "Restarting"}:
            continue
        if ctype in ("Failed", "Succeeded") and c.get("type") in ("Running", "Failed"):
            c = {**c, "status": "False"}
        kept.append(c)
    status["conditions"] = [*kept, new]
    return True


def _truncate(message: str) -> str:
    return message if len(message) <= EVENT_MESSAGE_LIMIT else message[:EVENT_MESSAGE_LIMIT - 3] + "..."


def _phase(pod: Mapping[str, Any]) -> str | None:
    phase = (pod.get("status") or {}).get("phase")
    return phase if isinstance(phase, str) else None


class MPIOperator:
    def __init__(self, *, rt: ResourceType, storage: ObjectStorage, logger: Any) -> None:
        self.rt = rt
        self.storage = storage
        self.log = logger

    async def reconcile(self, namespace: str, name: str) -> float | None:
        """syncHandler (551)."""
        try:
            stored = await self.storage.get(self.rt, namespace=namespace, name=name)
        except ApiError as e:
            if e.code == 404:
                return None
            raise
        job = defaulted(stored)
        policy = job["spec"]["runPolicy"]
        manager = policy.get("managedBy")
        if (manager is not None and manager != KUBEFLOW_JOB_CONTROLLER) or stored["metadata"].get("deletionTimestamp"):
            return None
        errs = validation_errors(job)
        if errs:
            await self._validation_event(stored, errs)
            return None
        status: dict[str, Any] = copy.deepcopy(stored.get("status") or {})
        if not status.get("conditions"):
            update_condition(status, "Created", "True", "MPIJobCreated", f"MPIJob {namespace}/{name} is created.")
        suspended = policy.get("suspend") is True
        if (_has(status, "Succeeded") or _has(status, "Failed")) and status.get("completionTime"):
            if policy["cleanPodPolicy"] in ("All", "Running"):
                await self._delete_workers(job)
                status.setdefault("replicaStatuses", {})["Worker"] = {}
                await write_status(self.storage, self.rt, stored, status)
            return None
        if status.get("startTime") is None and not suspended:
            status["startTime"] = now()

        launcher = await self._launcher(job)
        workers: list[dict[str, Any]] = []
        done = launcher is not None and (condition_true(launcher, "Complete") or condition_true(launcher, "Failed"))
        if not done:
            await self._ensure_service(job)
            await self._ensure_config_map(job)
            await self._ensure_secret(job)
            if not suspended:
                workers = await self._ensure_workers(job)
            if launcher is None and (job["spec"]["launcherCreationPolicy"] == "AtStartup"
                                     or sum(1 for w in workers if _ready(w)) == len(workers)):
                launcher = await self.storage.create(JOB, launcher_job(job), namespace=namespace)
        if launcher is not None and (launcher["spec"].get("suspend") is True) != suspended:
            launcher = await self._set_launcher_suspend(launcher, suspended)
        if suspended:
            await self._delete_workers(job)
            status.setdefault("replicaStatuses", {})["Worker"] = {}
        await self._update_status(job, status, launcher, workers)
        await write_status(self.storage, self.rt, stored, status)
        return None

    async def _validation_event(self, job: Mapping[str, Any], errs: list[FieldError]) -> None:
        """c.recorder.Event(mpiJob, Warning, ValidationError, "Found validation errors: ...") (594)."""
        meta = job["metadata"]
        listed = [str(e) for e in errs]  # field.ErrorList.ToAggregate: one error bare, more in brackets
        message = _truncate("Found validation errors: " + (listed[0] if len(listed) == 1 else
                                                           "[" + ", ".join(listed) + "]"))
        self.log.info("MPIJob not valid", namespace=meta["namespace"], name=meta["name"], error=message)
        suffix = hashlib.sha256(f"{meta['uid']}/{message}".encode()).hexdigest()[:16]
        stamp = now()
        event = {"apiVersion": "v1", "kind": "Event",
                 "metadata": {"name": f"{meta['name'][:200]}.{suffix}", "namespace": meta["namespace"]},
                 "involvedObject": {"apiVersion": job["apiVersion"], "kind": job["kind"],
                                    "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
                 "reason": "ValidationError", "message": message, "type": "Warning",
                 "source": {"component": "mpi-job-controller"}, "reportingComponent": "mpi-job-controller",
                 "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}
        try:
            await self.storage.create(kinds.EVENTS, event, namespace=meta["namespace"])
        except ApiError as e:
            if e.code != 409:
                raise

    def _not_ours(self, rt: ResourceType, obj: Mapping[str, Any]) -> ApiError:
        """MessageResourceExists: a child of that name exists and the job does not control it (the sync fails and
        is retried, as the operator's ErrResourceExists)."""
        name = obj["metadata"]["name"]
        return errors.conflict(rt, name, f"Resource {name!r} of Kind {rt.kind!r} already exists and is not managed "
                                         "by MPIJob")

    async def _get(self, rt: ResourceType, namespace: str, name: str) -> JSONObject | None:
        try:
            return await self.storage.get(rt, namespace=namespace, name=name)
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    async def _launcher(self, job: Mapping[str, Any]) -> JSONObject | None:
        """getLauncherJob (716)."""
        found = await self._get(JOB, job["metadata"]["namespace"], job["metadata"]["name"] + LAUNCHER_SUFFIX)
        if found is not None and not owned_by(found, job):
            raise self._not_ours(JOB, found)
        return found

    async def _ensure_service(self, job: Mapping[str, Any]) -> None:
        """getOrCreateService (871): created, or its selector put back."""
        want = job_service(job)
        namespace = job["metadata"]["namespace"]
        found = await self._get(kinds.SERVICES, namespace, want["metadata"]["name"])
        if found is None:
            await self.storage.create(kinds.SERVICES, want, namespace=namespace)
            return
        if not owned_by(found, job):
            raise self._not_ours(kinds.SERVICES, found)
        if (found.get("spec") or {}).get("selector") != want["spec"]["selector"]:
            def mutate(current: JSONObject) -> JSONObject | None:
                current.setdefault("spec", {})["selector"] = want["spec"]["selector"]
                return current

            await self.storage.guaranteed_update(kinds.SERVICES, namespace=namespace, name=want["metadata"]["name"],
                                                 mutate=mutate)

    async def _ensure_config_map(self, job: Mapping[str, Any]) -> None:
        """getOrCreateConfigMap (833): created, or its data brought up to date (the running workers)."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        pods = (await self.storage.list(kinds.PODS, namespace=namespace,
                                        label_selector=_selector(default_labels(name, "worker")))).items
        want = config_map(job, [p for p in pods if _phase(p) == "Running"])
        found = await self._get(kinds.CONFIG_MAPS, namespace, want["metadata"]["name"])
        if found is None:
            await self.storage.create(kinds.CONFIG_MAPS, want, namespace=namespace)
            return
        if not owned_by(found, job):
            raise self._not_ours(kinds.CONFIG_MAPS, found)
        if found.get("data") != want["data"]:
            def mutate(current: JSONObject) -> JSONObject | None:
                current["data"] = want["data"]
                return current

            await self.storage.guaranteed_update(kinds.CONFIG_MAPS, namespace=namespace, name=want["metadata"]["name"],
                                                 mutate=mutate)

    async def _ensure_secret(self, job: Mapping[str, Any]) -> None:
        """getOrCreateSSHAuthSecret (897): created; new keys when its data keys are not the two expected."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"] + SSH_SUFFIX
        found = await self._get(SECRETS, namespace, name)
        if found is None:
            await self.storage.create(SECRETS, ssh_secret(job), namespace=namespace)
            return
        if not owned_by(found, job):
            raise self._not_ours(SECRETS, found)
        if sorted(found.get("data") or {}) != sorted((SSH_PRIVATE_KEY, SSH_PUBLIC_KEY)):
            fresh = ssh_secret(job)["data"]

            def mutate(current: JSONObject) -> JSONObject | None:
                current["data"] = fresh
                return current

            await self.storage.guaranteed_update(SECRETS, namespace=namespace, name=name, mutate=mutate)

    async def _ensure_workers(self, job: Mapping[str, Any]) -> list[dict[str, Any]]:
        """getOrCreateWorker (939): the workers past Worker.replicas deleted, the missing ones created."""
        if _replica(job, "Worker") is None:
            return []
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        count = worker_replicas(job)
        pods = (await self.storage.list(kinds.PODS, namespace=namespace,
                                        label_selector=_selector(default_labels(name, "worker")))).items
        if len(pods) > count:
            for pod in pods:
                index = (pod["metadata"].get("labels") or {}).get(REPLICA_INDEX_LABEL, "")
                if index.isdigit() and int(index) >= count:
                    await delete_quietly(self.storage, kinds.PODS, pod)
        by_name = {p["metadata"]["name"]: p for p in pods}
        out: list[dict[str, Any]] = []
        for index in range(count):
            found: JSONObject | None = by_name.get(worker_name(name, index)) or await self._get(
                kinds.PODS, namespace, worker_name(name, index))
            if found is None:
                found = await self.storage.create(kinds.PODS, worker_pod(job, index), namespace=namespace)
            if not owned_by(found, job):
                raise self._not_ours(kinds.PODS, found)
            out.append(found)
        return out

    async def _delete_workers(self, job: Mapping[str, Any]) -> None:
        """deleteWorkerPods (1009): cleanPodPolicy Running spares the workers that are neither running nor
        pending."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        for index in range(worker_replicas(job) if _replica(job, "Worker") is not None else 0):
            pod = await self._get(kinds.PODS, namespace, worker_name(name, index))
            if pod is None:
                continue
            if not owned_by(pod, job):
                raise self._not_ours(kinds.PODS, pod)
            if job["spec"]["runPolicy"]["cleanPodPolicy"] == "Running" and _phase(pod) not in ("Running", "Pending"):
                continue
            if not pod["metadata"].get("deletionTimestamp"):
                await delete_quietly(self.storage, kinds.PODS, pod)

    async def _set_launcher_suspend(self, launcher: JSONObject, suspended: bool) -> JSONObject:
        meta = launcher["metadata"]

        def mutate(current: JSONObject) -> JSONObject | None:
            if current["metadata"].get("uid") != meta["uid"]:
                return None
            current["spec"]["suspend"] = suspended
            return current

        updated = await self.storage.guaranteed_update(JOB, namespace=meta["namespace"], name=meta["name"],
                                                       mutate=mutate)
        return updated if updated is not None else launcher

    async def _launcher_pods(self, launcher: Mapping[str, Any]) -> list[dict[str, Any]]:
        """jobPods (1583): the pods the launcher Job controls."""
        meta = launcher["metadata"]
        pods = (await self.storage.list(kinds.PODS, namespace=meta["namespace"],
                                        label_selector=f"{JOB_CONTROLLER_UID_LABEL}={meta['uid']}")).items
        return [p for p in pods if owned_by(p, launcher)]

    async def _update_status(self, job: Mapping[str, Any], status: dict[str, Any], launcher: JSONObject | None,
                             workers: list[dict[str, Any]]) -> None:
        """updateMPIJobStatus (1051)."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        suspended = job["spec"]["runPolicy"].get("suspend") is True
        replica_statuses = status.setdefault("replicaStatuses", {})
        if suspended:
            update_condition(status, "Suspended", "True", "MPIJobSuspended", "MPIJob suspended")
        elif _get(status, "Suspended") is not None:
            if update_condition(status, "Suspended", "False", "MPIJobResumed", "MPIJob resumed"):
                status["startTime"] = now()
        launcher_running = 0
        if launcher is not None:
            pods = await self._launcher_pods(launcher)
            launcher_running = sum(1 for p in pods if _phase(p) == "Running")
            rs: dict[str, Any] = {}
            failed = _int((launcher.get("status") or {}).get("failed"))
            if failed:
                rs["failed"] = failed
            replica_statuses["Launcher"] = rs
            if condition_true(launcher, "Complete"):
                rs["succeeded"] = 1
                if status.get("completionTime") is None:
                    status["completionTime"] = (launcher.get("status") or {}).get("completionTime") or now()
                update_condition(status, "Succeeded", "True", "MPIJobSucceeded",
                                 f"MPIJob {namespace}/{name} successfully completed.")
            elif condition_true(launcher, "Failed"):
                self._failed(job, status, launcher, pods)
            elif launcher_running:
                rs["active"] = launcher_running
        running = evicted = 0
        worker_status: dict[str, Any] = {}
        for pod in workers:
            phase = _phase(pod)
            if phase == "Failed":
                worker_status["failed"] = worker_status.get("failed", 0) + 1
                if (pod.get("status") or {}).get("reason") == "Evicted":
                    evicted += 1
            elif phase == "Succeeded":
                worker_status["succeeded"] = worker_status.get("succeeded", 0) + 1
            elif phase == "Running":
                running += 1
                worker_status["active"] = worker_status.get("active", 0) + 1
        replica_statuses["Worker"] = worker_status
        if evicted:
            update_condition(status, "Failed", "True", "MPIJobEvicted", f"{evicted}/{len(workers)} workers are evicted")
        if suspended:
            update_condition(status, "Running", "False", "MPIJobSuspended", f"MPIJob {namespace}/{name} is suspended.")
        elif launcher is not None and launcher_running >= 1 and running == len(workers):
            update_condition(status, "Running", "True", "MPIJobRunning", f"MPIJob {namespace}/{name} is running.")

    def _failed(self, job: Mapping[str, Any], status: dict[str, Any], launcher: Mapping[str, Any],
                pods: list[dict[str, Any]]) -> None:
        """updateMPIJobFailedStatus (1139)."""
        cond = _get(launcher.get("status") or {}, "Failed") or {}
        reason = str(cond.get("reason") or "MPIJobFailed")
        message = str(cond.get("message") or f"MPIJob {job['metadata']['namespace']}/{job['metadata']['name']} "
                                              "has failed")
        if reason == "BackoffLimitExceeded":
            failed = [p for p in pods if _phase(p) == "Failed"]
            if failed:
                last = max(failed, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
                pod_status = last.get("status") or {}
                reason += "/" + str(pod_status.get("reason") or "")
                message = _truncate(message + ": " + str(pod_status.get("message") or ""))
        if status.get("completionTime") is None:
            status["completionTime"] = now()
        update_condition(status, "Failed", "True", reason, message)


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


#: the kinds the mpi-operator serves here: MPIJob v2beta1 (its CRD; validation happens in the controller, above),
#: and core v1 Secret, which the simulator serves only beside this operator (the ssh-auth Secret)
MPI_SERVED: Final[tuple[ResourceType, ...]] = (KUBEFLOW["MPIJob"], SECRETS)


async def run_mpi_operator(*, storage: ObjectStorage, registry: Registry, stop: asyncio.Event, logger: Any,
                           **_: Any) -> None:
    """The mpi-operator's MPIJob controller, until `stop` is set."""
    rt = KUBEFLOW["MPIJob"]
    operator = MPIOperator(rt=rt, storage=storage, logger=logger)
    await run_reconciler(storage=storage, stop=stop, logger=logger, owner=rt,
                         children=[kinds.PODS, kinds.SERVICES, kinds.CONFIG_MAPS, SECRETS, JOB],
                         reconcile=operator.reconcile)
