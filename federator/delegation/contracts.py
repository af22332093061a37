"""The pod contracts of the upstream job kinds (issue 28, render mode): what a kind's own operator puts on each
pod it creates (labels, annotations, env), so that code and tooling written for the operator cannot tell the hub
rendered the pod.

A twin TrainingJob names its source kind in annotation SOURCE_KIND_ANNOTATION ("PyTorchJob.kubeflow.org");
`CONTRACTS` maps that value to the kind's `JobKind.pod_contract` for every kind of `JOB_KINDS` that has one (a
kind family adds its contract there, nothing here changes). `apply_contract` puts the contract on one rendered
pod body, after the framework's environment (delegation/frameworks.py): labels and annotations the template
already sets are kept (the user's word wins, as with the operators' own merge), env variables are added to
every container that does not set them. The contract's DNS identity (hostname, subdomain, the Services that make
them resolve) is the adapter's to render (delegation/adapter.py `_gang_objects`, network.py). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from federator.apis.jobkinds import JOB_KINDS, SOURCE_KIND_ANNOTATION
from federator.apis.jobkinds.base import PodContract, PodContractFn

__all__ = ["CONTRACTS", "apply_contract", "contract_for", "put_contract"]

CONTRACTS: Final[Mapping[str, PodContractFn]] = {
    kind.source_key: kind.pod_contract for kind in JOB_KINDS if kind.pod_contract is not None}


def contract_for(*, job_name: str, namespace: str, role: str, index: int,
                 job_annotations: Mapping[str, str]) -> PodContract | None:
    """The pod contract of the twin's source kind for pod `index` of `role` (None: not a twin, or a kind without
    one). Its `dns` is the adapter's to apply (with the Services it needs), not `put_contract`'s."""
    source = job_annotations.get(SOURCE_KIND_ANNOTATION)
    contract_fn = CONTRACTS.get(source) if isinstance(source, str) else None
    if contract_fn is None:
        return None
    return contract_fn(job_name, namespace, role, index, job_annotations)


def apply_contract(pod: dict[str, Any], *, job_name: str, namespace: str, role: str, index: int,
                   job_annotations: Mapping[str, str]) -> None:
    """Put the pod contract of the twin's source kind (if any) on one rendered pod body, in place."""
    contract = contract_for(job_name=job_name, namespace=namespace, role=role, index=index,
                            job_annotations=job_annotations)
    if contract is not None:
        put_contract(pod, contract)


def put_contract(pod: dict[str, Any], contract: PodContract) -> None:
    """Put a contract's labels, annotations and env on one rendered pod body, in place."""
    meta = pod.setdefault("metadata", {})
    for field, values in (("labels", contract.labels), ("annotations", contract.annotations)):
        if values:
            current = meta.setdefault(field, {})
            for key, value in values.items():
                current.setdefault(key, value)
    if contract.env:
        for container in pod.get("spec", {}).get("containers") or []:
            if not isinstance(container, dict):
                continue
            env = container.setdefault("env", [])
            names = {e.get("name") for e in env if isinstance(e, Mapping)}
            env.extend(dict(e) for e in contract.env if e.get("name") not in names)
