"""Placement hints, queue and failover policy of an upstream job kind, from its labels and annotations (the
kinds have no fields for them), in the style Kueue and MultiKueue use:

    label      kueue.x-k8s.io/queue-name          the Queue (spec.queue of the twin), as Kueue reads it
    annotation federator.dev/gpu-models           comma-separated GPU models, e.g. "A100,H100"
    annotation federator.dev/network              rdma | ethernet | any
    annotation federator.dev/datasets             comma-separated dataset names
    annotation federator.dev/cluster-selector     comma-separated key=value labels the member must have
    annotation federator.dev/on-cluster-loss      requeue | fail | wait
    annotation federator.dev/max-requeues         a whole number

Values are checked by the TrainingJob validator on the twin; `FIELD_PATHS` says where its errors point back to.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from federator.apis.common import FieldError

__all__ = ["FIELD_PATHS", "QUEUE_LABEL", "Hints", "hints_from_metadata"]

QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
GPU_MODELS: Final = "federator.dev/gpu-models"
NETWORK: Final = "federator.dev/network"
DATASETS: Final = "federator.dev/datasets"
CLUSTER_SELECTOR: Final = "federator.dev/cluster-selector"
ON_CLUSTER_LOSS: Final = "federator.dev/on-cluster-loss"
MAX_REQUEUES: Final = "federator.dev/max-requeues"


def _annotation(key: str) -> str:
    return f"metadata.annotations[{key}]"


#: twin spec path -> the source path its value came from (for `Translation.field_paths`)
FIELD_PATHS: Final[Mapping[str, str]] = {
    "spec.placement.gpuModels": _annotation(GPU_MODELS),
    "spec.placement.network": _annotation(NETWORK),
    "spec.placement.datasets": _annotation(DATASETS),
    "spec.placement.clusterSelector": _annotation(CLUSTER_SELECTOR),
    "spec.failover.onClusterLoss": _annotation(ON_CLUSTER_LOSS),
    "spec.failover.maxRequeues": _annotation(MAX_REQUEUES),
}


@dataclass(frozen=True, slots=True)
class Hints:
    """What an object's labels and annotations ask of the twin."""

    queue: str | None = None
    placement: Mapping[str, Any] = field(default_factory=dict)
    failover: Mapping[str, Any] = field(default_factory=dict)
    errors: list[FieldError] = field(default_factory=list)


def _list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def hints_from_metadata(obj: Mapping[str, Any]) -> Hints:
    """The hints of a raw object (any shape; label and annotation value types are the API's to check)."""
    raw_meta = obj.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    raw_labels, raw_notes = meta.get("labels"), meta.get("annotations")
    labels: Mapping[str, Any] = raw_labels if isinstance(raw_labels, Mapping) else {}
    notes: Mapping[str, Any] = raw_notes if isinstance(raw_notes, Mapping) else {}
    errors: list[FieldError] = []
    placement: dict[str, Any] = {}
    failover: dict[str, Any] = {}
    queue = labels.get(QUEUE_LABEL)
    queue = queue if isinstance(queue, str) and queue else None

    def text(key: str) -> str | None:
        value = notes.get(key)
        return value if isinstance(value, str) else None

    if (models := text(GPU_MODELS)) is not None:
        placement["gpuModels"] = _list(models)
    if (network := text(NETWORK)) is not None:
        placement["network"] = network.strip()
    if (datasets := text(DATASETS)) is not None:
        placement["datasets"] = _list(datasets)
    if (selector := text(CLUSTER_SELECTOR)) is not None:
        match: dict[str, str] = {}
        for part in _list(selector):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                errors.append((_annotation(CLUSTER_SELECTOR),
                               f'Invalid value: "{part[:63]}": must be comma-separated key=value pairs'))
                continue
            match[key.strip()] = value.strip()
        placement["clusterSelector"] = {"matchLabels": match}
    if (loss := text(ON_CLUSTER_LOSS)) is not None:
        failover["onClusterLoss"] = loss.strip()
    if (requeues := text(MAX_REQUEUES)) is not None:
        stripped = requeues.strip()
        if stripped.isdigit() and len(stripped) <= 10:
            failover["maxRequeues"] = int(stripped)
        else:
            errors.append((_annotation(MAX_REQUEUES), f'Invalid value: "{requeues[:16]}": must be a whole number'))
    return Hints(queue=queue, placement=placement, failover=failover, errors=errors)
