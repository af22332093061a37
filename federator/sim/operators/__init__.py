"""The job operators a simulated member cluster may run (its ClusterProfile's `operators`; none by default).

`OPERATORS` is the one place that says which kinds each operator serves and which controller runs them:

    batch     batch/v1 Job and kube-controller-manager's Job controller (batchjob.py)
    jobset    jobset.x-k8s.io/v1alpha2 JobSet and the JobSet controller (jobset.py); needs batch
    kubeflow  kubeflow.org/v1 PyTorchJob, TFJob, PaddleJob and the training-operator v1.8.1 (kubeflow.py)
    mpi       kubeflow.org/v2beta1 MPIJob and the mpi-operator v0.6.0 (mpi.py; core v1 Secret served with it, for
              its ssh-auth Secret); needs batch (its launcher is a batch/v1 Job)

A cluster running any of them also runs the garbage collector (gc.py) over what they own. The operators emulate
the real ones' code (names, labels, Services, env, status, suspend); docs/simulator-fidelity.md lists where they
knowingly differ. Nothing here imports the hub.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from federator.apiserver.registry import Registry, ResourceType
from federator.apiserver.storage import ObjectStorage

ControllerEntry = Callable[..., Coroutine[Any, Any, None]]


@dataclass(frozen=True, slots=True)
class Operator:
    name: str
    #: the kinds it serves (its CRDs; batch/v1 Job for kube's own controller)
    kinds: tuple[ResourceType, ...]
    run: ControllerEntry
    #: operators it cannot run without (JobSet creates batch/v1 Jobs)
    needs: tuple[str, ...] = ()


def _operators() -> dict[str, Operator]:
    from federator.sim.operators.batchjob import run_job_controller
    from federator.sim.operators.jobset import run_jobset_controller
    from federator.sim.operators.served import JOB, JOBSET

    found = {
        "batch": Operator("batch", (JOB,), run_job_controller),
        "jobset": Operator("jobset", (JOBSET,), run_jobset_controller, needs=("batch",)),
    }
    try:
        from federator.sim.operators.kubeflow import KUBEFLOW_SERVED, run_training_operator
    except ImportError:  # pragma: no cover - while kubeflow.py is being written
        return found
    found["kubeflow"] = Operator("kubeflow", KUBEFLOW_SERVED, run_training_operator)
    from federator.sim.operators.mpi import MPI_SERVED, run_mpi_operator

    found["mpi"] = Operator("mpi", MPI_SERVED, run_mpi_operator, needs=("batch",))
    return found


OPERATORS: Final[Mapping[str, Operator]] = _operators()
OPERATOR_NAMES: Final = tuple(OPERATORS)


def resolve(names: Iterable[str]) -> list[Operator]:
    """The operators named, with what they need, in OPERATORS order; ValueError naming an unknown one."""
    wanted: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        operator = OPERATORS.get(name)
        if operator is None:
            raise ValueError(f"unknown operator {name!r}; known: {', '.join(OPERATOR_NAMES)}")
        if name not in wanted:
            wanted.add(name)
            pending.extend(operator.needs)
    return [op for name, op in OPERATORS.items() if name in wanted]


def served_kinds(names: Iterable[str]) -> list[ResourceType]:
    """The ResourceTypes a cluster running the operators `names` serves."""
    return [rt for op in resolve(names) for rt in op.kinds]


def with_operator_kinds(registry: Registry, names: Iterable[str]) -> Registry:
    """`registry` (a simulated cluster's, `sim.kinds.sim_registry`) serving the kinds of the operators `names` too
    (ValueError naming an unknown operator)."""
    for rt in served_kinds(names):
        registry.add(rt)
    return registry


async def run_operators(*, storage: ObjectStorage, registry: Registry, stop: asyncio.Event, logger: Any,
                        names: Iterable[str], **_: Any) -> None:
    """Every operator named, and the garbage collector over what they own, until `stop` is set."""
    from federator.sim import kinds
    from federator.sim.operators.gc import GarbageCollector
    from federator.sim.operators.loop import run_until_stopped

    operators = resolve(names)
    owners = [rt for op in operators for rt in op.kinds]
    dependents = [kinds.PODS, kinds.SERVICES, kinds.CONFIG_MAPS,
                  *(rt for rt in owners if rt.group in ("batch", "") and rt.kind in ("Job", "Secret"))]
    gc = GarbageCollector(storage=storage, owners=owners, dependents=dependents, logger=logger.bind(part="gc"))
    loops = {f"operator:{op.name}": op.run(storage=storage, registry=registry, stop=stop,
                                           logger=logger.bind(operator=op.name)) for op in operators}
    loops["operator:gc"] = gc.run(stop)
    await run_until_stopped(loops, stop=stop, logger=logger)
