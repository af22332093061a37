"""Upstream job kinds the hub serves and translates into its gang (see base.py).

`JOB_KINDS` is the one list the hub serves, the twin controller watches and the delegation's pod contracts are
looked up in: a kind family adds its `JobKind` values here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from federator.apis.views import Body
from federator.apis.jobkinds.base import SOURCE_KIND_ANNOTATION, JobKind
from federator.apis.jobkinds.batchjob import JOB
from federator.apis.jobkinds.jobset import JOBSET
from federator.apis.jobkinds.kubeflow import KUBEFLOW_KINDS
from federator.apis.jobkinds.trainjob import TRAINJOB

__all__ = ["JOB_KINDS", "SOURCE_KIND_ANNOTATION", "JobKind", "controller_of_kind", "job_kind_by_source",
           "source_of_twin"]

JOB_KINDS: tuple[JobKind, ...] = (*KUBEFLOW_KINDS, JOBSET, TRAINJOB, JOB)


def job_kind_by_source(value: str) -> JobKind | None:
    """The kind whose twins carry SOURCE_KIND_ANNOTATION = `value` ("<Kind>.<group>")."""
    return next((k for k in JOB_KINDS if k.source_key == value), None)


def controller_of_kind(job: Mapping[str, Any], kind: JobKind) -> Mapping[str, Any] | None:
    """`job`'s controller ownerReference when its controller is a `kind` object (with a string name and uid)."""
    refs = Body(job).metadata.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("kind") == kind.kind \
                and ref.get("apiVersion") == kind.api_version and isinstance(ref.get("name"), str) \
                and isinstance(ref.get("uid"), str):
            return ref
    return None


def source_of_twin(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """The upstream object a twin TrainingJob stands for, as a reference an Event can name (apiVersion, kind,
    metadata name, namespace and uid, from the twin's controller ownerReference of its SOURCE_KIND_ANNOTATION
    kind); None for a TrainingJob that was submitted as one (or whose owner is not that kind)."""
    body = Body(job)
    annotation = body.annotations.get(SOURCE_KIND_ANNOTATION)
    kind = job_kind_by_source(annotation) if isinstance(annotation, str) else None
    ref = controller_of_kind(job, kind) if kind is not None else None
    if kind is None or ref is None:
        return None
    return {"apiVersion": kind.api_version, "kind": kind.kind,
            "metadata": {"name": ref["name"], "namespace": body.namespace, "uid": ref["uid"]}}
