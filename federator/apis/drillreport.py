"""DrillReport (federator.dev/v1alpha1, cluster-scoped, short name dr): what one failover drill measured.

`federator drill` injects a fault into one member cluster (or several: a
partition of every cluster at once), watches the federation while it lasts
and settles, and stores what it saw as a DrillReport, so that `federator
drill list|show` and `kubectl get dr` read it back. The spec *is* the report:

- the issue's figures, under exactly their names: cluster, fault,
  gangsAffected, gangsMoved, gangsUnplaceable, gangsRodeOut,
  gangsRestartedInPlace, gangsLost, detectSeconds,
  redispatchSeconds, runningAgainSeconds, jobsLost, maxConcurrentCopies,
  duplicates, stalePodsKilled, planMatched (the `-o json` of a drill is
  these keys only); every affected gang is counted in exactly one of
  gangsMoved, gangsUnplaceable, gangsRodeOut, gangsRestartedInPlace and
  gangsLost (ACCOUNTED), so they sum to gangsAffected: a drill that cannot
  place a gang in one says so in its notes (an accounting violation), and a
  sum above gangsAffected is refused;
- when and how the drill ran: mode (simulated: the drill injected the fault
  through the simulator's fault API; real: an operator did), durationSeconds,
  startedAt, finishedAt, samples and unansweredReads (how well it could see);
- the dry-run plan it started from (`plan`: for, generatedAt, movable,
  unplaceable) and one outcome per affected gang (`gangs`, at most
  MAX_GANGS, the rest counted in gangsOmitted; a gang placed again says
  the checkpoint step its new copy restores from, restoredFromStep), and
  free-text notes.

A DrillReport has no status (nothing reconciles it). Bottom layer: pydantic
and stdlib only, no I/O; validation never changes the submitted object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, StrictFloat, StrictInt, StrictStr, model_validator

from federator.apis.common import (
    ApiModel,
    DNSLabel,
    FieldError,
    ObjectMeta,
    Timestamp,
    ValidationSettings,
    api_validator,
    dns1123_label_errors,
    metadata_errors,
    raise_semantic,
    validate_object,
)
from federator.apis.timestamps import parse_time

__all__ = [
    "ACCOUNTED",
    "FAULTS",
    "FIGURES",
    "KIND",
    "MAX_CLUSTERS",
    "MAX_GANGS",
    "OUTCOME_BUCKETS",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "DrillFault",
    "DrillPlanSummary",
    "DrillReport",
    "DrillReportSpec",
    "GangOutcome",
    "accounted",
    "drillreport_validator",
    "validate_drillreport",
]

KIND = "DrillReport"
PLURAL = "drillreports"
SINGULAR = "drillreport"
SHORT_NAMES = ("dr",)

DrillFault = Literal["partition", "outage", "node-failure", "drain"]
FAULTS: tuple[str, ...] = ("partition", "outage", "node-failure", "drain")

#: The report's figures as the issue names them: `federator drill -o json` prints exactly these keys.
FIGURES: tuple[str, ...] = (
    "cluster", "fault", "gangsAffected", "gangsMoved", "gangsUnplaceable", "gangsRodeOut", "gangsRestartedInPlace",
    "gangsLost", "detectSeconds", "redispatchSeconds", "runningAgainSeconds", "jobsLost", "maxConcurrentCopies",
    "duplicates", "stalePodsKilled", "planMatched",
)
#: The figures every affected gang is counted in exactly once: they sum to gangsAffected.
ACCOUNTED: tuple[str, ...] = ("gangsMoved", "gangsUnplaceable", "gangsRodeOut", "gangsRestartedInPlace", "gangsLost")
#: A gang's outcome -> the figure it is counted in (an outcome absent here, "unaccounted", is in none: a violation).
OUTCOME_BUCKETS: Mapping[str, str] = {
    "moved": "gangsMoved",
    "unplaceable": "gangsUnplaceable",
    "rodeOut": "gangsRodeOut",
    "finished": "gangsRodeOut",
    "restartedInPlace": "gangsRestartedInPlace",
    "lost": "gangsLost",
    "failedByPolicy": "gangsLost",
}

#: Per-gang outcomes kept in one report; the rest are counted in gangsOmitted.
MAX_GANGS = 1000
#: Clusters one drill may fault at once (spec.cluster lists them, comma-separated).
MAX_CLUSTERS = 64
#: Upper bound of every duration in a report (a week): larger is a typo or a clock jump.
MAX_SECONDS = 7 * 24 * 3600.0
_MAX_COUNT = 10_000_000
_MAX_TEXT = 4096

Count = Annotated[StrictInt, Field(ge=0, le=_MAX_COUNT)]
Seconds = Annotated[StrictFloat, Field(ge=0, le=MAX_SECONDS)]
Name = Annotated[StrictStr, Field(min_length=1, max_length=253)]

GangOutcomeKind = Literal["moved", "unplaceable", "rodeOut", "restartedInPlace", "finished", "failedByPolicy", "lost",
                          "unaccounted"]


def accounted(spec: Mapping[str, Any]) -> int | None:
    """The affected gangs a report's spec counts in ACCOUNTED (None: a report from before those figures);
    a report adds up when this equals gangsAffected."""
    counts = [spec.get(key) for key in ACCOUNTED]
    if not all(type(c) is int for c in counts):
        return None
    return sum(c for c in counts if type(c) is int)


class GangOutcome(ApiModel):
    """What became of one gang that was in a faulted cluster when the fault began."""

    namespace: Name
    name: Name
    uid: StrictStr | None = Field(default=None, max_length=128)
    from_cluster: DNSLabel = Field(alias="fromCluster")
    from_epoch: StrictInt = Field(alias="fromEpoch", ge=0)
    planned_target: DNSLabel | None = Field(
        default=None, alias="plannedTarget", description="Where the dry-run plan said the gang would go.")
    cluster: DNSLabel | None = Field(default=None, description="Where the gang was at the end of the drill.")
    epoch: StrictInt | None = Field(default=None, ge=0)
    outcome: GangOutcomeKind = Field(
        description="moved (placed elsewhere at a higher epoch; gangsMoved), unplaceable (left, placed nowhere; "
                    "gangsUnplaceable), rodeOut (still in its cluster at its epoch, its pods untouched: a blip under "
                    "the loss grace, or onClusterLoss wait; gangsRodeOut), finished (succeeded there meanwhile; "
                    "gangsRodeOut), restartedInPlace (its pods recreated in the same cluster, or placed there again "
                    "at a higher epoch; gangsRestartedInPlace), failedByPolicy (onClusterLoss fail, maxRequeues; "
                    "gangsLost), lost (vanished or failed; gangsLost), unaccounted (none of these: an accounting "
                    "violation).")
    placed_seconds: Seconds | None = Field(
        default=None, alias="placedSeconds", description="From the fault's start to placed elsewhere.")
    running_seconds: Seconds | None = Field(
        default=None, alias="runningSeconds", description="From the fault's start to running elsewhere.")
    restored_from_step: StrictInt | None = Field(
        default=None, alias="restoredFromStep", ge=0, le=2**63 - 1,
        description="The step of the checkpoint the gang's new copy (moved, or placed again in its cluster) "
                    "restores from: the last one an earlier copy reported (its FEDERATOR_RESTORE_FROM); none "
                    "without a reported checkpoint.")
    message: StrictStr = Field(default="", max_length=_MAX_TEXT)


class DrillPlanSummary(ApiModel):
    """The dry-run failover plan the drill fetched before it injected the fault."""

    for_: Literal["loss", "drain"] = Field(alias="for")
    generated_at: Timestamp | None = Field(default=None, alias="generatedAt")
    movable: Count = 0
    unplaceable: Count = 0


class DrillReportSpec(ApiModel):
    """The report of one drill (see the module docstring for what each group of fields means)."""

    cluster: StrictStr = Field(
        max_length=MAX_CLUSTERS * 64,
        description="The faulted cluster, or several joined by commas (a partition of many at once).")
    fault: DrillFault
    mode: Literal["simulated", "real"] = Field(
        default="simulated",
        description="simulated: injected through the simulator's fault API; real: done by an operator.")
    gangs_affected: Count = Field(alias="gangsAffected", description="Gangs in the faulted cluster at the start.")
    gangs_moved: Count = Field(alias="gangsMoved", description="Affected gangs placed elsewhere at a higher epoch.")
    gangs_unplaceable: Count = Field(alias="gangsUnplaceable",
                                     description="Affected gangs that left and fit nowhere else.")
    gangs_rode_out: Count = Field(
        default=0, alias="gangsRodeOut",
        description="Affected gangs still in their cluster at their epoch with their pods untouched (a fault under "
                    "the loss grace, or onClusterLoss wait), or that succeeded there meanwhile.")
    gangs_restarted_in_place: Count = Field(
        default=0, alias="gangsRestartedInPlace",
        description="Affected gangs whose pods were recreated in the same cluster, without a move.")
    gangs_lost: Count = Field(
        default=0, alias="gangsLost",
        description="Affected gangs that vanished or ended Failed, their own failover policy's failures included "
                    "(jobsLost leaves those out, and counts every job). gangsMoved + gangsUnplaceable + "
                    "gangsRodeOut + gangsRestartedInPlace + gangsLost = gangsAffected; less is an accounting "
                    "violation the report's notes name.")
    detect_seconds: Seconds | None = Field(
        alias="detectSeconds", description="Fault start to the cluster's Lost condition (drain: first gang moving).")
    redispatch_seconds: Seconds | None = Field(
        alias="redispatchSeconds", description="Fault start to every moved gang placed elsewhere.")
    running_again_seconds: Seconds | None = Field(
        alias="runningAgainSeconds", description="Fault start to every moved gang running again.")
    jobs_lost: Count = Field(alias="jobsLost",
                             description="Jobs that vanished or failed because of the drill (policy fail aside).")
    max_concurrent_copies: Count = Field(
        alias="maxConcurrentCopies", description="The most clusters one job had running pods in at one sample.")
    duplicates: Count = Field(description="Jobs seen running in two clusters at once.")
    stale_pods_killed: Count = Field(alias="stalePodsKilled",
                                     description="Old copies' pods deleted by the fence agent or the hub's GC.")
    plan_matched: Annotated[StrictFloat, Field(ge=0, le=1)] | None = Field(
        alias="planMatched", description="Share of moved gangs that went where the plan said (1 when none moved).")
    duration_seconds: Seconds = Field(alias="durationSeconds", description="How long the fault was held.")
    started_at: Timestamp = Field(alias="startedAt")
    finished_at: Timestamp = Field(alias="finishedAt")
    samples: Count = Field(default=0, description="Observations of hub and members (every 0.5 s).")
    unanswered_reads: Count = Field(
        default=0, alias="unansweredReads",
        description="Member reads that got no answer (recorded as unknown, never as zero pods).")
    plan: DrillPlanSummary | None = None
    gangs: list[GangOutcome] | None = Field(default=None, max_length=MAX_GANGS)
    gangs_omitted: Count = Field(default=0, alias="gangsOmitted",
                                 description="Affected gangs beyond the gangs list's bound.")
    notes: list[Annotated[StrictStr, Field(max_length=1024)]] | None = Field(default=None, max_length=32)


class DrillReport(ApiModel):
    """The report of one failover drill: what was faulted, what moved, how fast, and whether any job ran twice."""

    api_version: Literal["federator.dev/v1alpha1"] = Field(default="federator.dev/v1alpha1", alias="apiVersion")
    kind: Literal["DrillReport"] = "DrillReport"
    metadata: ObjectMeta
    spec: DrillReportSpec

    @model_validator(mode="after")
    def _cross_field(self) -> DrillReport:
        raise_semantic(_semantic_errors(self.model_dump(by_alias=True, exclude_none=True)))
        return self


def _semantic_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    """Rules across fields, with exact paths. Tolerates any shape (it runs on raw input too)."""
    errors = metadata_errors(obj.get("metadata"), namespaced=False)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return errors
    cluster = spec.get("cluster")
    if isinstance(cluster, str):
        names = cluster.split(",")
        if len(names) > MAX_CLUSTERS:
            errors.append(("spec.cluster", f"Invalid value: {len(names)} clusters: at most {MAX_CLUSTERS}"))
        for name in names:
            problems = dns1123_label_errors(name)
            if problems:
                shown = name if len(name) <= 64 else name[:64] + "..."
                errors.append(("spec.cluster", f"Invalid value: {shown!r}: each comma-separated cluster name: "
                                               f"{problems[0]}"))
                break
    affected = spec.get("gangsAffected")
    counts = [spec.get(key, 0) for key in ACCOUNTED]
    if type(affected) is int and all(type(v) is int for v in counts):
        total = sum(counts)
        if total > affected:
            errors.append(("spec.gangsMoved", f"Invalid value: {spec.get('gangsMoved')}: "
                                              f"{' + '.join(ACCOUNTED)} ({total}) may not exceed gangsAffected "
                                              f"({affected})"))
    started, finished = spec.get("startedAt"), spec.get("finishedAt")
    if isinstance(started, str) and isinstance(finished, str):
        start, finish = parse_time(started), parse_time(finished)
        # a malformed one is reported by the field's own validation
        if start is not None and finish is not None and finish < start:
            errors.append(("spec.finishedAt", f"Invalid value: {finished!r}: must not be before startedAt"))
    gangs = spec.get("gangs")
    if isinstance(gangs, list) and type(spec.get("gangsAffected")) is int:
        omitted = spec.get("gangsOmitted", 0)
        listed = len(gangs) + (omitted if type(omitted) is int else 0)
        if listed > spec["gangsAffected"]:
            errors.append(("spec.gangs", f"Invalid value: {listed} gangs listed or omitted: more than "
                                         f"gangsAffected ({spec['gangsAffected']})"))
    return errors


def validate_drillreport(
    obj: object, *, settings: ValidationSettings | None = None, include_generic_metadata: bool = True
) -> list[FieldError]:
    """Every problem with a DrillReport, as (field path, message); empty when it is valid."""
    return validate_object(obj, model=DrillReport, semantic=_semantic_errors, settings=settings,
                           include_generic_metadata=include_generic_metadata)


def drillreport_validator(
    settings: ValidationSettings | None = None, *, include_generic_metadata: bool = False
) -> Callable[[dict[str, Any]], list[FieldError]]:
    """The apiserver's `ResourceType.validate` hook for DrillReport (`common.api_validator`)."""
    return api_validator(validate_drillreport, settings, include_generic_metadata=include_generic_metadata)


