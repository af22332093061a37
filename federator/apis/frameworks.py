"""A TrainingJob's `spec.framework`: which roles each framework takes, and its settings (`spec.frameworkSettings`).

The hub injects the environment a framework reads into the gang's pods (delegation/frameworks.py says what and
where it comes from); this module is the API half: the framework names, how a job's role names map to the
framework's roles (the Kubeflow operators' replica types), and the checks that refuse, with a 422 naming the
field, a job whose roles do not fit its framework or whose settings do not apply to it.

Role names (left: a TrainingJob role name; right: the framework's role):

- pytorch: master -> Master, worker -> Worker (PyTorchJob). A master has one replica and is RANK 0; without
  one, worker 0 is the rendezvous host (as Trainer's TrainJob torch plugin does). Only workers may be elastic
  (minReplicas < maxReplicas): torchrun's c10d rendezvous takes `min:max` nodes.
- tensorflow: chief, master, ps, worker, evaluator (TFJob's replica types). chief, master and evaluator have
  one replica each; chief and master exclude each other.
- paddle: pserver | ps | master -> the parameter server (PaddleJob's Master in PS mode), trainer | worker ->
  the trainer. Without a server role the job is collective.
- mpi: launcher (one replica) and worker, both required (MPIJob v2).
- jax: worker (JAXJob).
- none (or left out): any roles; nothing is injected.

Only pytorch workers may be elastic: every other framework hands each process the gang's addresses once
(TF_CONFIG, the pserver list, the hostfile, the process count), so a resize would leave the running
processes with a wrong picture.

Pure: no I/O. It must never import anything above `apis`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import Field, StrictInt, StrictStr

from federator.apis.common import ApiModel, FieldError

__all__ = [
    "DEFAULT_PORTS",
    "FRAMEWORKS",
    "ROLE_MAP",
    "SINGLE_REPLICA_ROLES",
    "Framework",
    "FrameworkSettings",
    "framework_errors",
    "framework_role",
]

Framework = Literal["none", "pytorch", "tensorflow", "paddle", "mpi", "jax"]
FRAMEWORKS: Final[tuple[str, ...]] = ("none", "pytorch", "tensorflow", "paddle", "mpi", "jax")

#: framework -> TrainingJob role name -> the framework's role
ROLE_MAP: Final[Mapping[str, Mapping[str, str]]] = {
    "pytorch": {"master": "master", "worker": "worker"},
    "tensorflow": {"chief": "chief", "master": "master", "ps": "ps", "worker": "worker", "evaluator": "evaluator"},
    "paddle": {"pserver": "pserver", "ps": "pserver", "master": "pserver", "trainer": "trainer",
               "worker": "trainer"},
    "mpi": {"launcher": "launcher", "worker": "worker"},
    "jax": {"worker": "worker"},
}
#: framework roles that must be there
REQUIRED_ROLES: Final[Mapping[str, tuple[str, ...]]] = {
    "paddle": ("trainer",), "mpi": ("launcher", "worker"), "jax": ("worker",),
}
#: framework roles that have exactly one replica (PyTorchJob's Master, TFJob's Chief/Master/Evaluator, MPIJob's
#: Launcher: their operators' validation)
SINGLE_REPLICA_ROLES: Final[Mapping[str, frozenset[str]]] = {
    "pytorch": frozenset({"master"}), "tensorflow": frozenset({"chief", "master", "evaluator"}),
    "mpi": frozenset({"launcher"}),
}
#: framework roles that may be elastic
ELASTIC_ROLES: Final[Mapping[str, frozenset[str]]] = {"pytorch": frozenset({"worker"})}
#: the port each framework's processes meet on when spec.frameworkSettings.port is left out: the Kubeflow
#: operators' defaults (kubeflow.org/v1 PyTorchJobDefaultPort, TFJobDefaultPort, PaddleJobDefaultPort,
#: JAXJobDefaultPort in training-operator v1.9.0 pkg/apis/kubeflow.org/v1/*_types.go)
DEFAULT_PORTS: Final[Mapping[str, int]] = {"pytorch": 23456, "tensorflow": 2222, "paddle": 36543, "jax": 6666}

_NPROC = re.compile(r"[1-9][0-9]{0,3}|auto|cpu|gpu")
#: which framework each setting belongs to
_SETTING_OWNERS: Final[Mapping[str, tuple[str, ...]]] = {
    "port": ("pytorch", "tensorflow", "paddle", "jax"),
    "nprocPerNode": ("pytorch",),
    "slotsPerWorker": ("mpi",),
    "mpiImplementation": ("mpi",),
}


class FrameworkSettings(ApiModel):
    """Per-framework settings (each applies to the frameworks its description names)."""

    port: StrictInt | None = Field(default=None, ge=1, le=65535, description=(
        "pytorch, tensorflow, paddle, jax: the port the processes meet on (MASTER_PORT, the TF_CONFIG "
        "addresses, PADDLE_PORT, the JAX coordinator). Left out: the Kubeflow operator's default (23456, "
        "2222, 36543, 6666)."))
    nproc_per_node: StrictStr | None = Field(default=None, alias="nprocPerNode", max_length=4, description=(
        "pytorch: processes per pod (PET_NPROC_PER_NODE): a number from 1 to 9999, auto, cpu or gpu. Left "
        "out: auto. WORLD_SIZE is pods x this number (x 1 when not a number)."))
    slots_per_worker: StrictInt | None = Field(default=None, alias="slotsPerWorker", ge=1, le=65535, description=(
        "mpi: the slots of each worker in the hostfile (`slots=`). Left out: 1."))
    mpi_implementation: Literal["OpenMPI", "Intel", "MPICH"] | None = Field(
        default=None, alias="mpiImplementation", description=(
            "mpi: which MPI the launcher runs, for the hostfile format and its variables. Left out: OpenMPI."))


def framework_role(framework: str, role_name: str) -> str | None:
    """The framework's role that a TrainingJob role named `role_name` plays (None: it has no place)."""
    return ROLE_MAP.get(framework, {}).get(role_name)


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def framework_errors(spec: Mapping[str, Any]) -> list[FieldError]:
    """What is wrong with a raw spec's framework, its roles for that framework and its settings (any shape:
    it runs on raw input; type errors are the model's)."""
    framework = spec.get("framework")
    if framework is None:
        framework = "none"
    if not isinstance(framework, str) or framework not in FRAMEWORKS:
        return []  # the model reports it (Unsupported value)
    errors: list[FieldError] = []
    settings = spec.get("frameworkSettings")
    if isinstance(settings, Mapping):
        for key, owners in _SETTING_OWNERS.items():
            if settings.get(key) is not None and framework not in owners:
                errors.append((f"spec.frameworkSettings.{key}",
                               f"Forbidden: only for framework {' or '.join(owners)} (this job's is {framework})"))
        nproc = settings.get("nprocPerNode")
        if isinstance(nproc, str) and not _NPROC.fullmatch(nproc):
            errors.append(("spec.frameworkSettings.nprocPerNode",
                           f'Invalid value: "{nproc[:16]}": must be a number from 1 to 9999, auto, cpu or gpu'))
    roles = spec.get("roles")
    if framework == "none" or not isinstance(roles, list):
        return errors
    names = ROLE_MAP[framework]
    allowed = ", ".join(f'"{n}"' for n in names)
    seen: dict[str, int] = {}
    for index, role in enumerate(roles):
        if not isinstance(role, Mapping) or not isinstance(role.get("name"), str):
            continue
        name = role["name"]
        path = f"spec.roles[{index}]"
        played = names.get(name)
        if played is None:
            errors.append((f"{path}.name", f'Unsupported value: "{name}": framework {framework} takes roles '
                                           f"{allowed}"))
            continue
        if played in seen:
            errors.append((f"{path}.name", f'Duplicate value: "{name}": spec.roles[{seen[played]}] already plays '
                                           f"the {framework} role {played}"))
            continue
        seen[played] = index
        replicas = _int(role.get("replicas"))
        low, high = _int(role.get("minReplicas")), _int(role.get("maxReplicas"))
        if played in SINGLE_REPLICA_ROLES.get(framework, frozenset()) and replicas is not None and replicas != 1:
            errors.append((f"{path}.replicas", f"Invalid value: {replicas}: the {framework} role {played} has "
                                               "exactly 1 replica"))
        elastic = replicas is not None and (low if low is not None else replicas) < \
            max(high if high is not None else replicas, replicas)
        if elastic and played not in ELASTIC_ROLES.get(framework, frozenset()):
            field = "minReplicas" if low is not None and replicas is not None and low < replicas else "maxReplicas"
            errors.append((f"{path}.{field}", f"Forbidden: the {framework} role {played} cannot be elastic: its "
                                              "processes learn the gang's addresses once (only pytorch workers "
                                              "resize, through torchrun's c10d rendezvous)"))
    missing = [r for r in REQUIRED_ROLES.get(framework, ()) if r not in seen]
    if missing:
        takes = " and ".join(sorted({n for n, r in names.items() if r in missing}))
        errors.append(("spec.roles", f"Required value: framework {framework} needs a role named {takes}"))
    if framework == "tensorflow" and "chief" in seen and "master" in seen:
        errors.append((f"spec.roles[{seen['master']}].name",
                       'Forbidden: a tensorflow job has a chief or a master, not both'))
    return errors
