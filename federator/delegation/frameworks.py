"""The environment each training framework reads, injected into a gang's rendered pods (`spec.framework`).

Existing training code runs unchanged because the hub sets what the Kubeflow operators set. Peers are named by
their DNS names (`GangLayout.names`): for an upstream kind rendered by the hub, the operator's own
(`<job>-<type>-<i>` and `<job>-<type>-<i>.<ns>.svc`, `<job>-worker-<i>.<job>.<ns>.svc`, `<name>-node-0-0.<name>`),
which the rendering makes resolve (delegation/network.py); for a TrainingJob, the pod's own DNS name through the
gang's headless Service (`<pod>.<service>.<namespace>.svc`), which resolves from the moment the pod exists. Where
an operator writes the short name (MASTER_ADDR, PET_RDZV_ENDPOINT, PADDLE_MASTER: `GangLayout.peer`) the hub does
too for upstream kinds; elsewhere the `<name>.<ns>.svc` form (`GangLayout.address`).
Sources, by framework (training-operator v1.9.0 is the last release with the v1 operators; paths at tag v1.9.0):

- **pytorch** (kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go `setPodEnv`, master.go
  `MasterEnvVarGenerator.Generate`, elastic.go `ElasticEnvVarGenerator.Generate`; the torchrun names are
  torch.distributed.run's `PET_`-prefixed arguments): on every container, in the operator's order,
  PYTHONUNBUFFERED=1, MASTER_PORT, PET_MASTER_PORT, MASTER_ADDR, PET_MASTER_ADDR (the master's pod, else worker
  0's: Trainer's TrainJob torch plugin, pkg/runtime/framework/plugins/torch/torch.go, uses node 0 the same way
  when there is no master), WORLD_SIZE (pods x nprocPerNode when a number, else pods), RANK and PET_NODE_RANK
  (master 0, then worker i = i + 1; without a master worker i = i), PET_NPROC_PER_NODE (default "auto", the
  operator's DefaultNprocPerNode), then PET_NNODES = the gang's pods; or, when the worker role is elastic
  (minReplicas < maxReplicas, the PyTorchJob elasticPolicy), PET_RDZV_ENDPOINT = worker 0's address and the
  port, PET_RDZV_BACKEND=c10d and PET_NNODES=`min:max` (the gang's fewest and most pods), so a resize needs no
  new environment: torchrun's c10d rendezvous admits whoever comes within the range.
- **tensorflow** (pkg/controller.v1/tensorflow/tensorflow.go `genTFConfigJSONStr`, `genClusterSpec`;
  tfjob_controller.go `SetClusterSpec`, util.go `isDistributed`): TF_CONFIG =
  `{"cluster":{<role>:[<address>:<port>,...],...},"task":{"type":<role>,"index":<i>},"environment":"cloud"}`
  (roles in name order, compact JSON, as Go's json.Marshal writes it), only when the gang has more than one pod,
  on the container named `tensorflow` (the operator's TFJobDefaultContainerName), else the pod's first container.
- **paddle** (pkg/controller.v1/paddlepaddle/envvar.go `setPodEnv`, on every container): PYTHONUNBUFFERED=1,
  PADDLE_JOB_ID (the job's name), PADDLE_NNODES (the gang's pods), PADDLE_MASTER (the first pserver's address and
  port, or the first trainer's in collective mode; that pod itself gets POD_IP_DUMMY from status.podIP and
  PADDLE_MASTER=$(POD_IP_DUMMY):<port>, as the operator does), PADDLE_SERVER_NUM=1 on pservers and
  PADDLE_TRAINER_NUM=1 on trainers in parameter-server mode. Then what PaddlePaddle's own role maker reads
  (PaddlePaddle/Paddle python/paddle/distributed/fleet/base/role_maker.py `PaddleCloudRoleMaker._ps_env` and
  `_collective_env`), with the values the PaddlePaddle operator gives them in its Service intranet mode
  (PaddleFlow/paddle-operator controllers/paddlejob_helper.go `constructPod`, `constructConfigMap`):
  TRAINING_ROLE and PADDLE_TRAINING_ROLE (PSERVER or TRAINER), PADDLE_TRAINER_ID (the pod's index in its role),
  PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ENDPOINTS and PADDLE_TRAINERS (the trainers' addresses with and without
  the port), PADDLE_PSERVERS_IP_PORT_LIST (parameter-server mode), PADDLE_CURRENT_ENDPOINT (collective mode),
  PADDLE_PORT, and POD_IP = the pod's own DNS name, not status.podIP: a pserver finds its id by looking up
  `POD_IP:PADDLE_PORT` in PADDLE_PSERVERS_IP_PORT_LIST, and that list, written before any pod has an IP, holds
  DNS names (the operator's Service mode sets POD_IP to the pod's name for the same reason).
- **mpi** (kubeflow/mpi-operator v0.8.2 pkg/controller/mpi_job_controller.go `newConfigMap`,
  `newLauncherPodTemplate`, `newWorker`, and the ompiEnvVars / intelEnvVars / mpichEnvVars tables): a ConfigMap
  `<service>-config` whose `hostfile` lists every worker's address with `slots=<slotsPerWorker>` (OpenMPI) or
  `:<slots>` (Intel MPI, MPICH), mounted read-only at /etc/mpi on the launcher's first container; there,
  K_MPI_JOB_ROLE=launcher and OMPI_MCA_orte_keep_fqdn_hostnames=true, OMPI_MCA_orte_default_hostfile=
  /etc/mpi/hostfile, OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10, OMPI_MCA_orte_set_default_slots (OpenMPI),
  I_MPI_HYDRA_HOST_FILE, I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS, I_MPI_PERHOST (Intel) or HYDRA_HOST_FILE,
  HYDRA_LAUNCH_EXTRA_ARGS (MPICH), and empty NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES (the launcher
  uses no GPU); on the workers' first container K_MPI_JOB_ROLE=worker, `/usr/sbin/sshd -De` as the command
  when the template gives none, and the DNS search domain `<subdomain>.<namespace>.svc.cluster.local` (the MPIJob's
  own name under its operator's names, else the gang's Service). The
  operator's SSH key Secret is not made: the image (or the template's volumes) brings the launcher's access.
- **jax** (pkg/controller.v1/jax/envvar.go `setPodEnv`, on every container): PYTHONUNBUFFERED=1,
  COORDINATOR_PORT, COORDINATOR_ADDRESS (worker 0's address), NUM_PROCESSES (the gang's pods), PROCESS_ID (the
  pod's index).

A variable the pod already has (the job's FEDERATOR_* variables, or the user's env of the same name) is kept:
the user's value wins. Init containers get nothing (the operators set none there either).

Pure: no I/O, no global state. It changes only the pod bodies it is handed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from federator.apis.frameworks import DEFAULT_PORTS, FrameworkSettings, framework_role
from federator.delegation.network import ServicePort, pod_address

__all__ = [
    "GangLayout",
    "GangRole",
    "MPI_CONFIG_MOUNT",
    "apply_framework",
    "config_map_name",
    "framework_config_maps",
    "framework_env",
    "service_ports",
]

JSON = dict[str, Any]

#: mpi-operator's configMountPath and hostfileName
MPI_CONFIG_MOUNT: Final = "/etc/mpi"
_MPI_HOSTFILE: Final = "hostfile"
_MPI_VOLUME: Final = "mpi-job-config"
_MPI_SSH_RETRY: Final = "-o ConnectionAttempts=10"
#: the container each operator sets TF_CONFIG on when the pod has several
_TF_CONTAINER: Final = "tensorflow"


@dataclass(frozen=True, slots=True)
class GangRole:
    """One role of the gang as placed: its name, its pods now, and its elastic range."""

    name: str
    replicas: int
    fewest: int
    most: int


@dataclass(frozen=True, slots=True)
class GangLayout:
    """What the framework environment is made of: the gang's roles, pod names and network identity."""

    framework: str
    settings: FrameworkSettings
    job_name: str
    namespace: str
    service: str
    roles: tuple[GangRole, ...]
    #: (role, index) -> pod name
    pod_names: Mapping[tuple[str, int], str]
    #: (role, index) -> the operator's DNS name of the pod relative to the namespace (`PodDns.name`), for every
    #: pod of an upstream kind rendered under its operator's names; empty: the hub's own names
    names: Mapping[tuple[str, int], str] = field(default_factory=dict)
    #: the subdomain the operator's pods share (MPI: `<job>`, the workers' search domain); "": the gang's Service
    subdomain: str = ""

    def address(self, role: str, index: int) -> str:
        """The pod's DNS name as `<name>.<namespace>.svc`."""
        if self.names:
            return f"{self.names[(role, index)]}.{self.namespace}.svc"
        return pod_address(pod=self.pod_names[(role, index)], service=self.service, namespace=self.namespace)

    def peer(self, role: str, index: int) -> str:
        """The name an operator writes where it writes a short one (the operator's name; the hub's own address
        otherwise)."""
        return self.names[(role, index)] if self.names else self.address(role, index)

    def role_playing(self, played: str) -> GangRole | None:
        return next((r for r in self.roles if framework_role(self.framework, r.name) == played), None)

    @property
    def pods(self) -> int:
        return sum(r.replicas for r in self.roles)

    @property
    def port(self) -> int:
        return self.settings.port or DEFAULT_PORTS.get(self.framework, 0)


def config_map_name(service: str) -> str:
    """The MPI hostfile ConfigMap of the gang whose Service is `service` (mpi-operator: `<job>-config`)."""
    return f"{service}-config"


def service_ports(layout: GangLayout) -> list[ServicePort]:
    """The port the framework's processes meet on, for the gang's Service (none for mpi and none)."""
    if layout.framework in DEFAULT_PORTS:
        return [ServicePort(name=layout.framework, port=layout.port)]
    return []


def _var(name: str, value: str) -> JSON:
    return {"name": name, "value": value}


# ---------------------------------------------------------------- per framework


def _pytorch_env(layout: GangLayout, role: str, index: int) -> list[JSON]:
    master = layout.role_playing("master")
    worker = layout.role_playing("worker")
    port = str(layout.port)
    head = (master.name, 0) if master is not None else (worker.name if worker else role, 0)
    played = framework_role(layout.framework, role)
    if master is None:
        rank = index
    else:
        rank = 0 if played == "master" else master.replicas + index
    nproc = layout.settings.nproc_per_node or "auto"
    world = layout.pods * (int(nproc) if nproc.isdigit() else 1)
    env = [
        _var("PYTHONUNBUFFERED", "1"),
        _var("MASTER_PORT", port), _var("PET_MASTER_PORT", port),
        _var("MASTER_ADDR", layout.peer(*head)), _var("PET_MASTER_ADDR", layout.peer(*head)),
        _var("WORLD_SIZE", str(world)), _var("RANK", str(rank)), _var("PET_NODE_RANK", str(rank)),
        _var("PET_NPROC_PER_NODE", nproc),
    ]
    if worker is not None and worker.fewest < worker.most:
        fewest = sum(r.fewest for r in layout.roles)
        most = sum(r.most for r in layout.roles)
        env += [_var("PET_RDZV_ENDPOINT", f"{layout.peer(worker.name, 0)}:{port}"),
                _var("PET_RDZV_BACKEND", "c10d"), _var("PET_NNODES", f"{fewest}:{most}")]
    else:
        env.append(_var("PET_NNODES", str(layout.pods)))
    return env


def tf_config(layout: GangLayout, role: str, index: int) -> str:
    """TF_CONFIG of pod `index` of `role` (see the module docstring)."""
    cluster = {r.name: [f"{layout.address(r.name, i)}:{layout.port}" for i in range(r.replicas)]
               for r in sorted(layout.roles, key=lambda r: r.name)}
    config = {"cluster": cluster, "task": {"type": role, "index": index}, "environment": "cloud"}
    return json.dumps(config, separators=(",", ":"))


def _tensorflow_env(layout: GangLayout, role: str, index: int) -> list[JSON]:
    if layout.pods == 1:  # isDistributed: a single pod trains locally
        return []
    return [_var("TF_CONFIG", tf_config(layout, role, index))]


def _paddle_env(layout: GangLayout, role: str, index: int) -> list[JSON]:
    server = layout.role_playing("pserver")
    trainer = layout.role_playing("trainer")
    played = framework_role(layout.framework, role)
    port = str(layout.port)
    head = server if server is not None else trainer
    env = [_var("PYTHONUNBUFFERED", "1"), _var("PADDLE_JOB_ID", layout.job_name),
           _var("PADDLE_NNODES", str(layout.pods))]
    if head is not None and role == head.name and index == 0:
        env += [{"name": "POD_IP_DUMMY", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                _var("PADDLE_MASTER", f"$(POD_IP_DUMMY):{port}")]
    elif head is not None:
        env.append(_var("PADDLE_MASTER", f"{layout.peer(head.name, 0)}:{port}"))
    if server is not None:
        env.append(_var("PADDLE_SERVER_NUM", "1") if played == "pserver" else _var("PADDLE_TRAINER_NUM", "1"))
    # PaddlePaddle's role maker (PaddleCloudRoleMaker), with DNS names for addresses
    trainers = [layout.address(trainer.name, i) for i in range(trainer.replicas)] if trainer is not None else []
    training_role = "PSERVER" if played == "pserver" else "TRAINER"
    own = layout.address(role, index)
    env += [_var("TRAINING_ROLE", training_role), _var("PADDLE_TRAINING_ROLE", training_role),
            _var("PADDLE_TRAINER_ID", str(index)), _var("PADDLE_TRAINERS_NUM", str(len(trainers))),
            _var("PADDLE_TRAINER_ENDPOINTS", ",".join(f"{t}:{port}" for t in trainers)),
            _var("PADDLE_TRAINERS", ",".join(trainers))]
    if server is not None:
        env.append(_var("PADDLE_PSERVERS_IP_PORT_LIST",
                        ",".join(f"{layout.address(server.name, i)}:{port}" for i in range(server.replicas))))
    else:
        env.append(_var("PADDLE_CURRENT_ENDPOINT", f"{own}:{port}"))
    env += [_var("PADDLE_PORT", port), _var("POD_IP", own)]
    return env


def _mpi_launcher_env(layout: GangLayout) -> list[JSON]:
    implementation = layout.settings.mpi_implementation or "OpenMPI"
    slots = str(layout.settings.slots_per_worker or 1)
    hostfile = f"{MPI_CONFIG_MOUNT}/{_MPI_HOSTFILE}"
    env = [_var("K_MPI_JOB_ROLE", "launcher")]
    if implementation == "OpenMPI":
        env += [_var("OMPI_MCA_orte_keep_fqdn_hostnames", "true"), _var("OMPI_MCA_orte_default_hostfile", hostfile),
                _var("OMPI_MCA_plm_rsh_args", _MPI_SSH_RETRY), _var("OMPI_MCA_orte_set_default_slots", slots)]
    elif implementation == "Intel":
        env += [_var("I_MPI_HYDRA_HOST_FILE", hostfile), _var("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", _MPI_SSH_RETRY),
                _var("I_MPI_PERHOST", slots)]
    else:
        env += [_var("HYDRA_HOST_FILE", hostfile), _var("HYDRA_LAUNCH_EXTRA_ARGS", _MPI_SSH_RETRY)]
    # the launcher uses no GPU (mpi-operator's nvidiaDisableEnvVars)
    env += [_var("NVIDIA_VISIBLE_DEVICES", ""), _var("NVIDIA_DRIVER_CAPABILITIES", "")]
    return env


def _mpi_env(layout: GangLayout, role: str, index: int) -> list[JSON]:
    if framework_role(layout.framework, role) == "launcher":
        return _mpi_launcher_env(layout)
    return [_var("K_MPI_JOB_ROLE", "worker")]


def _jax_env(layout: GangLayout, role: str, index: int) -> list[JSON]:
    worker = layout.role_playing("worker")
    head = layout.address(worker.name if worker else role, 0)
    return [_var("PYTHONUNBUFFERED", "1"), _var("COORDINATOR_PORT", str(layout.port)),
            _var("COORDINATOR_ADDRESS", head), _var("NUM_PROCESSES", str(layout.pods)),
            _var("PROCESS_ID", str(index))]


_ENV = {"pytorch": _pytorch_env, "tensorflow": _tensorflow_env, "paddle": _paddle_env, "mpi": _mpi_env,
        "jax": _jax_env}


def framework_env(layout: GangLayout, role: str, index: int) -> list[JSON]:
    """The variables the framework gives pod `index` of `role`, in the operator's order ([] for none)."""
    make = _ENV.get(layout.framework)
    return make(layout, role, index) if make is not None else []


def mpi_hostfile(layout: GangLayout) -> str:
    """The hostfile: one line per worker (`<address> slots=<n>`, or `<address>:<n>` for Intel MPI and MPICH)."""
    worker = layout.role_playing("worker")
    if worker is None:
        return ""
    slots = layout.settings.slots_per_worker or 1
    form = "{} slots={}" if (layout.settings.mpi_implementation or "OpenMPI") == "OpenMPI" else "{}:{}"
    return "".join(form.format(layout.address(worker.name, i), slots) + "\n" for i in range(worker.replicas))


def framework_config_maps(layout: GangLayout, *, labels: Mapping[str, str],
                          annotations: Mapping[str, str]) -> list[JSON]:
    """The ConfigMaps the framework needs in the member (mpi: the hostfile), as bodies."""
    if layout.framework != "mpi":
        return []
    return [{
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config_map_name(layout.service), "namespace": layout.namespace,
                     "labels": dict(labels), "annotations": dict(annotations)},
        "data": {_MPI_HOSTFILE: mpi_hostfile(layout)},
    }]


# ---------------------------------------------------------------- into the pods


def _merge_env(container: JSON, ours: Sequence[JSON]) -> None:
    env = container.get("env") or []
    present = {e.get("name") for e in env if isinstance(e, Mapping)}
    container["env"] = [*env, *(dict(e) for e in ours if e["name"] not in present)]


def _targets(layout: GangLayout, role: str, containers: list[JSON]) -> list[JSON]:
    """The containers the operator sets its variables on (see the module docstring)."""
    if not containers:
        return []
    if layout.framework == "tensorflow":
        named = [c for c in containers if c.get("name") == _TF_CONTAINER]
        return named[:1] or containers[:1]
    if layout.framework == "mpi":
        return containers[:1]
    return containers


def apply_framework(layout: GangLayout, pod: JSON, *, role: str, index: int) -> None:
    """Put the framework's environment (and, for the MPI launcher, the hostfile volume; for MPI workers the
    search domain and the sshd default) into one rendered pod body, in place."""
    if layout.framework in ("none", ""):
        return
    spec = pod.setdefault("spec", {})
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    env = framework_env(layout, role, index)
    targets = _targets(layout, role, containers)
    for container in targets:
        _merge_env(container, env)
    if layout.framework != "mpi" or not targets:
        return
    main = targets[0]
    if framework_role(layout.framework, role) == "launcher":
        spec["volumes"] = [*(spec.get("volumes") or []), {
            "name": _MPI_VOLUME,
            "configMap": {"name": config_map_name(layout.service),
                          "items": [{"key": _MPI_HOSTFILE, "path": _MPI_HOSTFILE, "mode": 0o444}]},
        }]
        main["volumeMounts"] = [*(main.get("volumeMounts") or []),
                                {"name": _MPI_VOLUME, "mountPath": MPI_CONFIG_MOUNT, "readOnly": True}]
        return
    if not main.get("command") and not main.get("args"):
        main["command"] = ["/usr/sbin/sshd", "-De"]
    dns = spec.setdefault("dnsConfig", {})
    domain = layout.subdomain or layout.service
    dns["searches"] = [*(dns.get("searches") or []), f"{domain}.{layout.namespace}.svc.cluster.local"]
