"""Upstream job kinds the hub serves and translates into its gang (see base.py).

`JOB_KINDS` is the one list the hub serves, the twin controller watches and the delegation's pod contracts are
looked up in: a kind family adds its `JobKind` values here.
"""

from __future__ import annotations

from federator.apis.jobkinds.base import SOURCE_KIND_ANNOTATION, JobKind
from federator.apis.jobkinds.batchjob import JOB
from federator.apis.jobkinds.jobset import JOBSET
from federator.apis.jobkinds.kubeflow import KUBEFLOW_KINDS
from federator.apis.jobkinds.trainjob import TRAINJOB

__all__ = ["JOB_KINDS", "SOURCE_KIND_ANNOTATION", "JobKind", "job_kind_by_source"]

JOB_KINDS: tuple[JobKind, ...] = (*KUBEFLOW_KINDS, JOBSET, TRAINJOB, JOB)


def job_kind_by_source(value: str) -> JobKind | None:
    """The kind whose twins carry SOURCE_KIND_ANNOTATION = `value` ("<Kind>.<group>")."""
    return next((k for k in JOB_KINDS if k.source_key == value), None)
