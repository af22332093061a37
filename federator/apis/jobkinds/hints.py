"""The hub's hints on an upstream job kind's metadata (issue 28): the one place that reads them.

A JobSet, a batch Job, a TrainJob or a Kubeflow job has no field for the hub's queue, placement or failover
policy, so they ride on its labels and annotations, in the style Kueue and MultiKueue use:

==========================================  ==================================================================
label ``kueue.x-k8s.io/queue-name``         spec.queue (Kueue's LocalQueue label, read as the hub's Queue)
annotation ``federator.dev/queue``          spec.queue (must agree with the label when both are set)
label ``kueue.x-k8s.io/priority-class``     spec.priorityClassName (Kueue's label; the hub resolves the name
                                            as its scheduling.k8s.io/v1 PriorityClass)
annotation ``federator.dev/priority-class`` spec.priorityClassName (must agree with the label when both are set)
annotation ``federator.dev/gpu-models``     spec.placement.gpuModels, a comma list: ``A100,H100``
annotation ``federator.dev/network``        spec.placement.network: ``rdma``, ``ethernet`` or ``any``
annotation ``federator.dev/datasets``       spec.placement.datasets, a comma list
annotation ``federator.dev/cluster-selector`` spec.placement.clusterSelector.matchLabels, a comma list of
                                            ``key=value``: ``tier=research,region=eu``
annotation ``federator.dev/on-cluster-loss`` spec.failover.onClusterLoss: ``requeue``, ``fail`` or ``wait``
annotation ``federator.dev/max-requeues``   spec.failover.maxRequeues, a decimal integer
annotation ``federator.dev/checkpoint-uri`` spec.checkpoint.uri (e.g. ``s3://bucket/run-7``)
annotation ``federator.dev/checkpoint-claim`` spec.checkpoint.volume.claimName (with checkpoint-mount-path)
annotation ``federator.dev/checkpoint-mount-path`` spec.checkpoint.mountPath
annotation ``federator.dev/save-grace-seconds`` spec.checkpoint.saveGraceSeconds, a decimal integer
==========================================  ==================================================================

Spaces around list items and values are ignored. Other federator.dev/ keys are left alone here (the hub's
own annotations live there too). A kind whose own spec names a priority class (a pod template's
priorityClassName) reconciles it with these hints in its translator.

`hints_from_metadata` returns the TrainingJob spec fields these give (only those present) and the errors, at
the *source* paths (``metadata.annotations[federator.dev/network]``), so a 422 names what the user wrote.
Pure and total: any input gives a result, never an exception. Imports only `federator.apis` modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from federator.apis.common import (
    FieldError,
    ValidationSettings,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    errors_from_validation,
    json_type,
)
from federator.apis.trainingjob import CheckpointSpec, Failover, PlacementSpec

__all__ = [
    "ANNOTATION_CHECKPOINT_CLAIM",
    "ANNOTATION_CHECKPOINT_MOUNT_PATH",
    "ANNOTATION_CHECKPOINT_URI",
    "ANNOTATION_SAVE_GRACE_SECONDS",
    "ANNOTATION_CLUSTER_SELECTOR",
    "ANNOTATION_DATASETS",
    "ANNOTATION_GPU_MODELS",
    "ANNOTATION_MAX_REQUEUES",
    "ANNOTATION_NETWORK",
    "ANNOTATION_ON_CLUSTER_LOSS",
    "ANNOTATION_PRIORITY_CLASS",
    "ANNOTATION_QUEUE",
    "LABEL_KUEUE_PRIORITY_CLASS",
    "LABEL_KUEUE_QUEUE",
    "hints_from_metadata",
]

LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
LABEL_KUEUE_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
ANNOTATION_QUEUE = "federator.dev/queue"
ANNOTATION_PRIORITY_CLASS = "federator.dev/priority-class"
ANNOTATION_GPU_MODELS = "federator.dev/gpu-models"
ANNOTATION_NETWORK = "federator.dev/network"
ANNOTATION_DATASETS = "federator.dev/datasets"
ANNOTATION_CLUSTER_SELECTOR = "federator.dev/cluster-selector"
ANNOTATION_ON_CLUSTER_LOSS = "federator.dev/on-cluster-loss"
ANNOTATION_MAX_REQUEUES = "federator.dev/max-requeues"
ANNOTATION_CHECKPOINT_URI = "federator.dev/checkpoint-uri"
ANNOTATION_CHECKPOINT_CLAIM = "federator.dev/checkpoint-claim"
ANNOTATION_CHECKPOINT_MOUNT_PATH = "federator.dev/checkpoint-mount-path"
ANNOTATION_SAVE_GRACE_SECONDS = "federator.dev/save-grace-seconds"

# How much of a hostile value a message repeats.
_SHOWN = 64
# A comma list longer than this is refused before it is split (PlacementSpec allows 64 items of <= 253).
_MAX_LIST_TEXT = 64 * 254


def _shown(value: str) -> str:
    text = value if len(value) <= _SHOWN else value[:_SHOWN] + "..."
    return '"' + text.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'


def _strings(metadata: Mapping[str, Any], key: str, errors: list[FieldError]) -> Mapping[str, str]:
    """metadata[key] as a map of strings; a wrong shape is an error (the schema reports it too) and reads as {}."""
    value = metadata.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.append((f"metadata.{key}", f"Invalid value: {json_type(value)}: must be of type object"))
        return {}
    good: dict[str, str] = {}
    for name, item in value.items():
        if isinstance(name, str) and isinstance(item, str):
            good[name] = item
        elif isinstance(name, str):
            errors.append((f"metadata.{key}[{name[:_SHOWN]}]",
                           f"Invalid value: {json_type(item)}: must be of type string"))
    return good


def _one_name(sources: list[tuple[str, str]], *, check: Callable[[str], list[str]], errors: list[FieldError]) -> str | None:
    """The value named by one or more (path, value) sources: each must be valid and all must agree."""
    chosen: str | None = None
    first_path = ""
    for path, raw in sources:
        value = raw.strip()
        problems = check(value) if value else ["must not be empty"]
        if problems:
            errors += [(path, f"Invalid value: {_shown(raw)}: {p}") for p in problems]
            continue
        if chosen is None:
            chosen, first_path = value, path
        elif value != chosen:
            errors.append((path, f"Invalid value: {_shown(raw)}: must agree with {first_path} ({_shown(chosen)})"))
    return chosen


def _sub_errors(model: type[BaseModel], data: Mapping[str, Any], paths: Mapping[str, str],
                settings: ValidationSettings) -> list[FieldError]:
    """`model`'s verdict on `data` (the hub's own rules for the fields), each error moved to the source path of the
    field it is about (`paths`: wire field name -> source path)."""
    try:
        model.model_validate(data, context={"settings": settings})
    except ValidationError as exc:
        moved: list[FieldError] = []
        for path, message in errors_from_validation(exc, model=model):
            field = next((f for f in paths if path == f or path.startswith((f + "[", f + "."))), None)
            moved.append((paths[field] if field else "metadata.annotations", message))
        return moved
    return []


def _comma_list(raw: str, path: str, errors: list[FieldError]) -> list[str] | None:
    if len(raw) > _MAX_LIST_TEXT:
        errors.append((path, f"Too long: may not be more than {_MAX_LIST_TEXT} characters"))
        return None
    items = [item.strip() for item in raw.split(",")]
    if any(not item for item in items):
        errors.append((path, f"Invalid value: {_shown(raw)}: must be a comma-separated list without empty items"))
        return None
    duplicates = sorted({item for item in items if items.count(item) > 1})
    if duplicates:
        errors.append((path, f"Duplicate value: {_shown(duplicates[0])}"))
        return None
    return items


def _decimal(raw: str, path: str, errors: list[FieldError]) -> int | None:
    """A non-negative decimal integer of at most 10 digits (surrounding spaces ignored), else an error at `path`."""
    text = raw.strip()
    if text.isascii() and text.isdigit() and len(text) <= 10:
        return int(text)
    errors.append((path, f"Invalid value: {_shown(raw)}: must be a non-negative decimal integer"))
    return None


def hints_from_metadata(
    metadata: object, *, settings: ValidationSettings | None = None
) -> tuple[dict[str, Any], list[FieldError]]:
    """The TrainingJob spec fields (queue, priorityClassName, placement, failover: only those the metadata sets)
    that the labels and annotations of an upstream job object give, and every problem with them as
    (source path, message). Any input is accepted; a metadata that is not an object gives nothing (the kind's
    schema reports it)."""
    chosen = settings or ValidationSettings()
    if not isinstance(metadata, Mapping):
        return {}, []
    errors: list[FieldError] = []
    labels = _strings(metadata, "labels", errors)
    annotations = _strings(metadata, "annotations", errors)
    spec: dict[str, Any] = {}

    def at_label(key: str) -> str:
        return f"metadata.labels[{key}]"

    def at_annotation(key: str) -> str:
        return f"metadata.annotations[{key}]"

    queue_sources = [(at_label(LABEL_KUEUE_QUEUE), labels[LABEL_KUEUE_QUEUE])] if LABEL_KUEUE_QUEUE in labels else []
    if ANNOTATION_QUEUE in annotations:
        queue_sources.append((at_annotation(ANNOTATION_QUEUE), annotations[ANNOTATION_QUEUE]))
    queue = _one_name(queue_sources, check=dns1123_label_errors, errors=errors)
    if queue is not None:
        spec["queue"] = queue

    class_sources = ([(at_label(LABEL_KUEUE_PRIORITY_CLASS), labels[LABEL_KUEUE_PRIORITY_CLASS])]
                     if LABEL_KUEUE_PRIORITY_CLASS in labels else [])
    if ANNOTATION_PRIORITY_CLASS in annotations:
        class_sources.append((at_annotation(ANNOTATION_PRIORITY_CLASS), annotations[ANNOTATION_PRIORITY_CLASS]))
    priority_class = _one_name(class_sources, check=dns1123_subdomain_errors, errors=errors)
    if priority_class is not None:
        spec["priorityClassName"] = priority_class

    placement: dict[str, Any] = {}
    for key, field in ((ANNOTATION_GPU_MODELS, "gpuModels"), (ANNOTATION_DATASETS, "datasets")):
        if key in annotations:
            items = _comma_list(annotations[key], at_annotation(key), errors)
            if items is not None:
                placement[field] = items
    if ANNOTATION_NETWORK in annotations:
        placement["network"] = annotations[ANNOTATION_NETWORK].strip()
    if ANNOTATION_CLUSTER_SELECTOR in annotations:
        where = at_annotation(ANNOTATION_CLUSTER_SELECTOR)
        pairs = _comma_list(annotations[ANNOTATION_CLUSTER_SELECTOR], where, errors)
        match: dict[str, str] = {}
        for pair in pairs or ():
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                errors.append((where, f"Invalid value: {_shown(pair)}: must be comma-separated key=value pairs"))
                continue
            match[key.strip()] = value.strip()
        if pairs is not None and match:
            placement["clusterSelector"] = {"matchLabels": match}
    if placement:
        found = _sub_errors(PlacementSpec, placement, {"gpuModels": at_annotation(ANNOTATION_GPU_MODELS),
                                                       "datasets": at_annotation(ANNOTATION_DATASETS),
                                                       "clusterSelector": at_annotation(ANNOTATION_CLUSTER_SELECTOR),
                                                       "network": at_annotation(ANNOTATION_NETWORK)}, chosen)
        errors += found
        if not found:
            spec["placement"] = placement

    failover: dict[str, Any] = {}
    if ANNOTATION_ON_CLUSTER_LOSS in annotations:
        failover["onClusterLoss"] = annotations[ANNOTATION_ON_CLUSTER_LOSS].strip()
    if ANNOTATION_MAX_REQUEUES in annotations:
        count = _decimal(annotations[ANNOTATION_MAX_REQUEUES], at_annotation(ANNOTATION_MAX_REQUEUES), errors)
        if count is not None:
            failover["maxRequeues"] = count
    if failover:
        found = _sub_errors(Failover, failover, {"onClusterLoss": at_annotation(ANNOTATION_ON_CLUSTER_LOSS),
                                                 "maxRequeues": at_annotation(ANNOTATION_MAX_REQUEUES)}, chosen)
        errors += found
        if not found and not any(path == at_annotation(ANNOTATION_MAX_REQUEUES) for path, _ in errors):
            spec["failover"] = failover

    checkpoint: dict[str, Any] = {}
    if ANNOTATION_CHECKPOINT_URI in annotations:
        checkpoint["uri"] = annotations[ANNOTATION_CHECKPOINT_URI].strip()
    if ANNOTATION_CHECKPOINT_CLAIM in annotations:
        checkpoint["volume"] = {"claimName": annotations[ANNOTATION_CHECKPOINT_CLAIM].strip()}
    if ANNOTATION_CHECKPOINT_MOUNT_PATH in annotations:
        checkpoint["mountPath"] = annotations[ANNOTATION_CHECKPOINT_MOUNT_PATH].strip()
    if ANNOTATION_SAVE_GRACE_SECONDS in annotations:
        grace = _decimal(annotations[ANNOTATION_SAVE_GRACE_SECONDS], at_annotation(ANNOTATION_SAVE_GRACE_SECONDS),
                         errors)
        if grace is not None:
            checkpoint["saveGraceSeconds"] = grace
    if checkpoint:
        # a rule across the fields (uri with a claim, a claim without a mount path) is at metadata.annotations
        found = _sub_errors(CheckpointSpec, checkpoint, {
            "uri": at_annotation(ANNOTATION_CHECKPOINT_URI), "volume": at_annotation(ANNOTATION_CHECKPOINT_CLAIM),
            "mountPath": at_annotation(ANNOTATION_CHECKPOINT_MOUNT_PATH),
            "saveGraceSeconds": at_annotation(ANNOTATION_SAVE_GRACE_SECONDS)}, chosen)
        errors += found
        if not found and not any(path == at_annotation(ANNOTATION_SAVE_GRACE_SECONDS) for path, _ in errors):
            spec["checkpoint"] = checkpoint
    return (spec if not errors else {}), errors
