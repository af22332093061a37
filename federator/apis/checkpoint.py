"""Checkpoint reports and the restore point: what a pod says about its latest checkpoint, and what the next copy
of the job is told to restore from (issue 29, docs/failover.md "Checkpoints").

A training process reports a checkpoint by setting one annotation on its own pod through the member's API:

    federator.dev/checkpoint: {"step": 120, "location": "/ckpt/step-120"}

(the pod's service account needs `patch` on pods in its namespace; docs/failover.md shows the Role).
Status sync already watches every pod of the gang, so the report reaches the hub with no extra connection; the
annotation holds only the latest report, so reports cannot pile up, and the hub writes status at most once per
status batch.

- `parse_report(raw)`: a report annotation's value -> CheckpointReport, or ReportError saying why not (not
  JSON, longer than MAX_REPORT_BYTES, step not an integer in [0, 2^63), location not a non-empty string of at
  most MAX_LOCATION_CHARS printable characters, unknown keys).
- `latest_report(pods)`: the report with the highest step among the pods' annotations, and the malformed ones.
- `save_grace_seconds(job)`: the grace period (seconds) an evicted copy's pods get to save: spec.checkpoint's
  saveGraceSeconds (default DEFAULT_SAVE_GRACE_SECONDS), None without spec.checkpoint (the pod's own
  terminationGracePeriodSeconds applies, as before).
- `restore_point(job, epoch)`: the same as a CheckpointReport (step and location; the drill reports the step).
- `restore_from(job, epoch)`: the location the copy at `epoch` restores from: status.checkpoint's, when an
  earlier epoch reported it (a failover, drain, preemption or requeue made this copy), else None.
- `supersedes(report, recorded, cluster=, epoch=)`: whether a report of the copy at (cluster, epoch) replaces
  the recorded status.checkpoint: a higher step of the same copy, or any report of a later copy.
- `checkpointed_at(job, cluster=, epoch=)`: when the copy at (cluster, epoch) last reported a checkpoint
  (status.checkpoint.time, seconds since the epoch), else None: what preemption counts a victim's lost work
  from (placement's `RunningGang.checkpointed_at`). Absent or malformed: None (the work since the copy
  started is what its eviction loses).

Pure: no I/O, no logging (callers log the malformed reports they see).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from federator.apis.timestamps import parse_epoch

__all__ = [
    "ANNOTATION_CHECKPOINT",
    "ENV_CHECKPOINT_DIR",
    "ENV_CHECKPOINT_URI",
    "ENV_RESTORE_FROM",
    "MAX_LOCATION_CHARS",
    "MAX_REPORT_BYTES",
    "CheckpointReport",
    "ReportError",
    "checkpointed_at",
    "latest_report",
    "parse_report",
    "restore_from",
    "restore_point",
    "save_grace_seconds",
    "supersedes",
]

#: the pod annotation a training process sets to report a checkpoint
ANNOTATION_CHECKPOINT = "federator.dev/checkpoint"
#: env of every container of a later copy: the location of the last checkpoint the job reported
ENV_RESTORE_FROM = "FEDERATOR_RESTORE_FROM"
#: env of every container: spec.checkpoint.mountPath, spec.checkpoint.uri
ENV_CHECKPOINT_DIR = "FEDERATOR_CHECKPOINT_DIR"
ENV_CHECKPOINT_URI = "FEDERATOR_CHECKPOINT_URI"
#: a report's size bound (the annotation's value, in UTF-8 bytes) and its location's
MAX_REPORT_BYTES = 2048
MAX_LOCATION_CHARS = 1024
_MAX_STEP = 2**63 - 1
#: spec.checkpoint.saveGraceSeconds left out (apis/trainingjob.py's default)
DEFAULT_SAVE_GRACE_SECONDS = 30


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    """One pod's report: the training step and where the checkpoint is."""

    step: int
    location: str


@dataclass(frozen=True, slots=True)
class ReportError:
    """A malformed report: the pod's name and why it was ignored."""

    pod: str
    reason: str


def parse_report(raw: object) -> CheckpointReport | str:
    """A report annotation's value -> the report, or a sentence saying why it is ignored."""
    if not isinstance(raw, str):
        return "not a string"
    if len(raw.encode("utf-8", "surrogatepass")) > MAX_REPORT_BYTES:
        return f"longer than {MAX_REPORT_BYTES} bytes"
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return "not JSON"
    if not isinstance(value, dict):
        return "not a JSON object"
    unknown = sorted(set(value) - {"step", "location"})
    if unknown:
        return f"unknown key {unknown[0][:64]!r} (only step and location)"
    step, location = value.get("step"), value.get("location")
    if type(step) is not int or not 0 <= step <= _MAX_STEP:
        return "step must be an integer in [0, 2^63)"
    if not isinstance(location, str) or not location:
        return "location must be a non-empty string"
    if len(location) > MAX_LOCATION_CHARS:
        return f"location longer than {MAX_LOCATION_CHARS} characters"
    if not location.isprintable():
        return "location has control characters"
    return CheckpointReport(step=step, location=location)


def latest_report(pods: Iterable[Mapping[str, Any]]) -> tuple[CheckpointReport | None, list[ReportError]]:
    """The report with the highest step among `pods` (first pod wins a tie), and every malformed one."""
    best: CheckpointReport | None = None
    bad: list[ReportError] = []
    for pod in pods:
        meta = pod.get("metadata")
        if not isinstance(meta, Mapping):
            continue
        annotations = meta.get("annotations")
        if not isinstance(annotations, Mapping) or ANNOTATION_CHECKPOINT not in annotations:
            continue
        parsed = parse_report(annotations[ANNOTATION_CHECKPOINT])
        if isinstance(parsed, str):
            bad.append(ReportError(pod=str(meta.get("name") or "")[:253], reason=parsed))
        elif best is None or parsed.step > best.step:
            best = parsed
    return best, bad


def supersedes(report: CheckpointReport, recorded: object, *, cluster: str, epoch: int) -> bool:
    """Whether `report`, of the copy at (`cluster`, `epoch`), replaces `recorded` (a status.checkpoint): a higher
    step of the same copy, or any report of a later copy (never one of an earlier copy: an evicted copy's last
    report, read during its grace, loses to the new copy's)."""
    if not isinstance(recorded, Mapping) or type(recorded.get("epoch")) is not int:
        return True
    if recorded["epoch"] > epoch:
        return False
    return not (recorded["epoch"] == epoch and recorded.get("cluster") == cluster
                and type(recorded.get("step")) is int and report.step <= recorded["step"])


def restore_point(job: Mapping[str, Any], epoch: int) -> CheckpointReport | None:
    """The checkpoint (step, location) the job's copy at `epoch` restores from: status.checkpoint, when an
    earlier copy reported it."""
    status = job.get("status")
    checkpoint = status.get("checkpoint") if isinstance(status, Mapping) else None
    if not isinstance(checkpoint, Mapping):
        return None
    location, reported_at, step = checkpoint.get("location"), checkpoint.get("epoch"), checkpoint.get("step")
    if not isinstance(location, str) or not location or type(reported_at) is not int or reported_at >= epoch \
            or type(step) is not int or step < 0:
        return None
    return CheckpointReport(step=step, location=location)


def restore_from(job: Mapping[str, Any], epoch: int) -> str | None:
    """The location the job's copy at `epoch` restores from: the last checkpoint reported by an earlier copy."""
    point = restore_point(job, epoch)
    return point.location if point is not None else None


def checkpointed_at(job: Mapping[str, Any], *, cluster: str, epoch: int) -> float | None:
    """When the job's copy at (cluster, epoch) last reported a checkpoint (seconds since the epoch), else None
    (none reported by this copy, or a status.checkpoint that is not what status sync writes)."""
    status = job.get("status")
    checkpoint = status.get("checkpoint") if isinstance(status, Mapping) else None
    if not isinstance(checkpoint, Mapping):
        return None
    reported_by, reported_at = checkpoint.get("cluster"), checkpoint.get("epoch")
    if type(reported_at) is not int or reported_at != epoch or reported_by != cluster:
        return None
    return parse_epoch(checkpoint.get("time"))


def save_grace_seconds(job: Mapping[str, Any]) -> int | None:
    """The grace period an evicted copy's pods get to save a checkpoint; None: the job has no spec.checkpoint."""
    spec = job.get("spec")
    checkpoint = spec.get("checkpoint") if isinstance(spec, Mapping) else None
    if not isinstance(checkpoint, Mapping):
        return None
    grace = checkpoint.get("saveGraceSeconds", DEFAULT_SAVE_GRACE_SECONDS)
    return grace if type(grace) is int and grace >= 0 else DEFAULT_SAVE_GRACE_SECONDS
