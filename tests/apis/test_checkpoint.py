"""spec.checkpoint and checkpoint reports (issue 29): the report annotation's parser with malformed, oversized
and hostile values, the restore point, the grace, and bad specs as errors naming their field."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from federator.apis.checkpoint import (
    ANNOTATION_CHECKPOINT,
    MAX_REPORT_BYTES,
    CheckpointReport,
    checkpointed_at,
    latest_report,
    parse_report,
    restore_from,
    restore_point,
    save_grace_seconds,
    supersedes,
)
from federator.apis.common import ValidationSettings
from federator.apis.trainingjob import TrainingJob, validate_trainingjob

MAX_SAVE_GRACE_SECONDS = ValidationSettings().max_save_grace_seconds


def _job(checkpoint: Any = None, **spec: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"roles": [{"name": "worker", "replicas": 2, "template": {"image": "trainer:1"}}], **spec}}
    if checkpoint is not None:
        job["spec"]["checkpoint"] = checkpoint
    return job


def test_a_well_formed_report_parses() -> None:
    assert parse_report('{"step": 120, "location": "/ckpt/step-120"}') == CheckpointReport(120, "/ckpt/step-120")
    unicode = "s3://b/run 7/ü"
    assert parse_report(json.dumps({"step": 0, "location": unicode})) == CheckpointReport(0, unicode)


@pytest.mark.parametrize(("raw", "fragment"), [
    (None, "not a string"),
    (17, "not a string"),
    ("", "not JSON"),
    ("step=120 location=/ckpt", "not JSON"),
    ("[120, \"/ckpt\"]", "not a JSON object"),
    ('{"step": "120", "location": "/c"}', "step must be an integer"),
    ('{"step": 1.5, "location": "/c"}', "step must be an integer"),
    ('{"step": true, "location": "/c"}', "step must be an integer"),
    ('{"step": -1, "location": "/c"}', "step must be an integer"),
    ('{"step": 9223372036854775808, "location": "/c"}', "step must be an integer"),
    ('{"step": 1}', "location must be"),
    ('{"step": 1, "location": ""}', "location must be"),
    ('{"step": 1, "location": ["/c"]}', "location must be"),
    ('{"step": 1, "location": "/c\\u0000x"}', "control characters"),
    ('{"step": 1, "location": "/c\\nFEDERATOR_RESTORE_FROM=/etc"}', "control characters"),
    ('{"step": 1, "location": "/c", "cluster": "other"}', "unknown key 'cluster'"),
    (json.dumps({"step": 1, "location": "/" + "a" * 1100}), "location longer than"),
    (json.dumps({"step": 1, "location": "/c", "pad": "x" * MAX_REPORT_BYTES}), f"longer than {MAX_REPORT_BYTES}"),
    ("[" * 100_000, f"longer than {MAX_REPORT_BYTES}"),
    ("[" * 1000 + "]" * 1000, "JSON"),  # deep nesting within the size bound: no crash, not an object
    ('{"step": 1, "location": "/c"', "not JSON"),
])
def test_malformed_reports_say_why(raw: object, fragment: str) -> None:
    parsed = parse_report(raw)
    assert isinstance(parsed, str) and fragment in parsed, parsed


def _pod(name: str, report: object = None) -> dict[str, Any]:
    annotations = {} if report is None else {ANNOTATION_CHECKPOINT: report}
    return {"metadata": {"name": name, "annotations": annotations}}


def test_the_latest_report_is_the_highest_step_and_bad_ones_are_listed() -> None:
    pods = [_pod("w-0", '{"step": 20, "location": "/c/20"}'), _pod("w-1", '{"step": 30, "location": "/c/30"}'),
            _pod("w-2", "garbage"), _pod("w-3"), {"metadata": None}, {}]
    best, bad = latest_report(pods)
    assert best == CheckpointReport(30, "/c/30")
    assert [(b.pod, b.reason) for b in bad] == [("w-2", "not JSON")]
    assert latest_report([_pod("w-0")]) == (None, [])


def test_restore_from_is_an_earlier_copys_checkpoint() -> None:
    job = _job()
    assert restore_from(job, 1) is None
    job["status"] = {"checkpoint": {"step": 5, "location": "/c/5", "cluster": "a", "epoch": 2, "time": "t"}}
    assert restore_from(job, 2) is None  # the copy that reported it restores from nothing the hub passed
    assert restore_from(job, 3) == "/c/5"
    assert restore_point(job, 3) == CheckpointReport(step=5, location="/c/5") and restore_point(job, 2) is None
    job["status"]["checkpoint"]["epoch"] = "2"
    assert restore_from(job, 3) is None


def test_a_restore_point_needs_a_whole_record() -> None:
    for checkpoint in ({"location": "/c/5", "epoch": 1}, {"step": -1, "location": "/c/5", "epoch": 1},
                       {"step": True, "location": "/c/5", "epoch": 1}, {"step": 5, "location": "", "epoch": 1},
                       {"step": 5, "location": ["/c/5"], "epoch": 1}, "step 5", None):
        job = {**_job(), "status": {"checkpoint": checkpoint}}
        assert restore_point(job, 3) is None and restore_from(job, 3) is None, checkpoint
    assert restore_point({**_job(), "status": "hostile"}, 3) is None


def test_a_report_supersedes_a_lower_step_of_its_copy_or_an_earlier_copys() -> None:
    report = CheckpointReport(step=9, location="/c/9")
    recorded = {"step": 5, "location": "/c/5", "cluster": "a", "epoch": 2}
    assert supersedes(report, None, cluster="a", epoch=2)
    assert supersedes(report, recorded, cluster="a", epoch=2)  # a higher step of the same copy
    assert not supersedes(report, {**recorded, "step": 9}, cluster="a", epoch=2)  # not a repeat
    assert not supersedes(report, {**recorded, "step": 12}, cluster="a", epoch=2)
    assert supersedes(CheckpointReport(step=1, location="/c/1"), recorded, cluster="b", epoch=3)  # a later copy
    # an earlier copy's report (an evicted copy read during its grace) never replaces the new copy's
    assert not supersedes(report, recorded, cluster="b", epoch=1)
    # the same epoch in another cluster is another copy: its report replaces the record
    assert supersedes(CheckpointReport(step=1, location="/c/1"), recorded, cluster="b", epoch=2)
    # a malformed record is replaced
    bad: object
    for bad in ({}, {"epoch": "2", "step": 100}, {"epoch": True}, [], "x"):
        assert supersedes(report, bad, cluster="a", epoch=2), bad
    assert supersedes(report, {**recorded, "step": "100"}, cluster="a", epoch=2)


def test_checkpointed_at_is_the_current_copys_report_time() -> None:
    job = _job()
    assert checkpointed_at(job, cluster="a", epoch=2) is None  # no status at all
    job["status"] = {"checkpoint": {"step": 5, "location": "/c/5", "cluster": "a", "epoch": 2,
                                    "time": "2026-11-29T08:00:10Z"}}
    assert checkpointed_at(job, cluster="a", epoch=2) == 1795939210.0
    assert checkpointed_at(job, cluster="a", epoch=3) is None  # an earlier copy's: not this copy's work
    assert checkpointed_at(job, cluster="b", epoch=2) is None


@pytest.mark.parametrize("status", [
    "not a mapping",
    {"checkpoint": None},
    {"checkpoint": ["a", 2]},
    {"checkpoint": {"cluster": "a", "epoch": 2}},  # no time
    {"checkpoint": {"cluster": "a", "epoch": 2, "time": "yesterday"}},
    {"checkpoint": {"cluster": "a", "epoch": 2, "time": 1795939210}},
    {"checkpoint": {"cluster": "a", "epoch": 2, "time": "2026-11-29T08:00:10Z" + "0" * 10_000}},
    {"checkpoint": {"cluster": "a", "epoch": "2", "time": "2026-11-29T08:00:10Z"}},
    {"checkpoint": {"cluster": "a", "epoch": True, "time": "2026-11-29T08:00:10Z"}},
    {"checkpoint": {"cluster": ["a"], "epoch": 2, "time": "2026-11-29T08:00:10Z"}},
])
def test_a_malformed_status_checkpoint_is_no_checkpoint(status: Any) -> None:
    job = _job()
    job["status"] = status
    assert checkpointed_at(job, cluster="a", epoch=2) is None
    assert checkpointed_at({"status": {"checkpoint": status}}, cluster="a", epoch=2) is None


def test_save_grace() -> None:
    assert save_grace_seconds(_job()) is None
    assert save_grace_seconds(_job({"uri": "s3://b/r"})) == 30
    assert save_grace_seconds(_job({"uri": "s3://b/r", "saveGraceSeconds": 0})) == 0
    assert save_grace_seconds(_job({"uri": "s3://b/r", "saveGraceSeconds": 90})) == 90


def test_a_good_checkpoint_spec_validates() -> None:
    for checkpoint in ({"volume": {"claimName": "ckpt"}, "mountPath": "/ckpt", "saveGraceSeconds": 120},
                       {"uri": "s3://bucket/run-7"}, {"saveGraceSeconds": MAX_SAVE_GRACE_SECONDS}):
        job = _job(checkpoint)
        assert validate_trainingjob(job) == []
        dumped = TrainingJob.model_validate(job).model_dump(by_alias=True, exclude_none=True)
        assert {k: v for k, v in dumped["spec"]["checkpoint"].items() if k in checkpoint} == checkpoint


@pytest.mark.parametrize(("checkpoint", "field", "fragment"), [
    ({"saveGraceSeconds": -1}, "spec.checkpoint.saveGraceSeconds", "greater than or equal to 0"),
    ({"saveGraceSeconds": MAX_SAVE_GRACE_SECONDS + 1}, "spec.checkpoint.saveGraceSeconds", "less than or equal"),
    ({"saveGraceSeconds": 10**30}, "spec.checkpoint.saveGraceSeconds", "less than or equal"),
    ({"saveGraceSeconds": "30"}, "spec.checkpoint.saveGraceSeconds", "integer"),
    ({"volume": {"claimName": "c"}, "mountPath": "/c", "uri": "s3://b/r"}, "spec.checkpoint", "exclusive"),
    ({"volume": {"claimName": "c"}}, "spec.checkpoint", "mountPath is required"),
    ({"mountPath": "/c"}, "spec.checkpoint", "only meaningful with volume"),
    ({"volume": {"claimName": "c"}, "mountPath": "relative/dir"}, "spec.checkpoint.mountPath", "regular expression"),
    ({"volume": {"claimName": "c"}, "mountPath": "/a/../etc"}, "spec.checkpoint", "'..'"),
    ({"volume": {"claimName": "c"}, "mountPath": "/c:rw"}, "spec.checkpoint.mountPath", "regular expression"),
    ({"volume": {"claimName": "c"}, "mountPath": "/" + "a" * 2000}, "spec.checkpoint.mountPath", "at most"),
    ({"volume": {"claimName": "Bad_Claim"}, "mountPath": "/c"}, "spec.checkpoint.volume.claimName", ""),
    ({"volume": {}, "mountPath": "/c"}, "spec.checkpoint.volume.claimName", "Required"),
    ({"uri": "/not/a/uri"}, "spec.checkpoint.uri", "regular expression"),
    ({"uri": "s3://b/" + "x" * 3000}, "spec.checkpoint.uri", "at most"),
    ({"uri": "s3://b/r", "every": 5}, "spec.checkpoint.every", "not declared"),
])
def test_bad_checkpoint_specs_name_the_field(checkpoint: dict[str, Any], field: str, fragment: str) -> None:
    errors = validate_trainingjob(_job(checkpoint))
    assert any(path == field and fragment in message for path, message in errors), errors


def test_the_checkpoint_volume_must_not_collide_with_the_template() -> None:
    job = _job({"volume": {"claimName": "c"}, "mountPath": "/ckpt"})
    job["spec"]["roles"][0]["template"] = {"spec": {
        "containers": [{"name": "t", "image": "trainer:1",
                        "volumeMounts": [{"name": "federator-checkpoint", "mountPath": "/ckpt"}]}],
        "volumes": [{"name": "federator-checkpoint", "emptyDir": {}}]}}
    fields = {path for path, _ in validate_trainingjob(copy.deepcopy(job))}
    assert {"spec.roles[0].template.spec.volumes",
            "spec.roles[0].template.spec.containers[0].volumeMounts"} <= fields


def test_the_hubs_cap_on_the_grace_is_a_setting() -> None:
    job = _job({"uri": "s3://b/r", "saveGraceSeconds": 120})
    assert validate_trainingjob(job) == []
    errors = validate_trainingjob(job, settings=ValidationSettings(max_save_grace_seconds=60))
    assert errors == [("spec.checkpoint.saveGraceSeconds",
                       "Invalid value: 120: must be less than or equal to 60 (the hub's max_save_grace_seconds)")]
