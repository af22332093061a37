"""DrillReport validation: a drill's report validates; bad values name their field; the CRD agrees."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from federator.apis.crd import crd
from federator.apis.drillreport import FIGURES, MAX_GANGS, DrillReport, validate_drillreport


def report() -> dict[str, Any]:
    return {
        "apiVersion": "federator.dev/v1alpha1",
        "kind": "DrillReport",
        "metadata": {"name": "drill-onprem-a-20240501-120000"},
        "spec": {
            "cluster": "onprem-a", "fault": "partition", "mode": "simulated",
            "gangsAffected": 3, "gangsMoved": 2, "gangsUnplaceable": 1,
            "detectSeconds": 2.5, "redispatchSeconds": 9.0, "runningAgainSeconds": 11.5,
            "jobsLost": 0, "maxConcurrentCopies": 1, "duplicates": 0, "stalePodsKilled": 4,
            "planMatched": 1.0, "durationSeconds": 20, "startedAt": "2024-05-01T12:00:00Z",
            "finishedAt": "2024-05-01T12:01:10Z", "samples": 140, "unansweredReads": 0,
            "plan": {"for": "loss", "generatedAt": "2024-05-01T11:59:59Z", "movable": 2, "unplaceable": 1},
            "gangs": [
                {"namespace": "team-a", "name": "a", "uid": "u-1", "fromCluster": "onprem-a", "fromEpoch": 1,
                 "plannedTarget": "cloud-b", "cluster": "cloud-b", "epoch": 2, "outcome": "moved",
                 "placedSeconds": 8.5, "runningSeconds": 11.0},
                {"namespace": "team-a", "name": "b", "fromCluster": "onprem-a", "fromEpoch": 3,
                 "outcome": "unplaceable", "message": "fits nowhere else"},
            ],
            "notes": ["the fault was lifted after 20s"],
        },
    }


def test_a_drill_report_validates_and_carries_every_figure_of_the_issue() -> None:
    assert validate_drillreport(report()) == []
    spec = DrillReport.model_validate(report()).spec.model_dump(by_alias=True)
    assert set(FIGURES) <= set(spec)
    # the optional parts may be left out; timings are null when nothing was measured
    minimal = report()
    for key in ("plan", "gangs", "notes", "samples", "unansweredReads", "mode"):
        del minimal["spec"][key]
    minimal["spec"].update(detectSeconds=None, redispatchSeconds=None, runningAgainSeconds=None, planMatched=None,
                           gangsMoved=0, gangsUnplaceable=0)
    assert validate_drillreport(minimal) == []
    several = report()
    several["spec"]["cluster"] = "onprem-a,cloud-b,cloud-c"
    assert validate_drillreport(several) == []


Edit = Callable[[dict[str, Any]], None]


@pytest.mark.parametrize(("edit", "path", "words"), [
    (lambda r: r["spec"].update(fault="meteor"), "spec.fault", "Unsupported value"),
    (lambda r: r["spec"].update(jobsLost=-1), "spec.jobsLost", "greater than or equal to 0"),
    (lambda r: r["spec"].update(maxConcurrentCopies="one"), "spec.maxConcurrentCopies", "integer"),
    (lambda r: r["spec"].update(planMatched=1.5), "spec.planMatched", "less than or equal to 1"),
    (lambda r: r["spec"].update(detectSeconds=-0.5), "spec.detectSeconds", "greater than or equal to 0"),
    (lambda r: r["spec"].update(redispatchSeconds="9s"), "spec.redispatchSeconds", "number"),
    (lambda r: r["spec"].pop("jobsLost"), "spec.jobsLost", "Required value"),
    (lambda r: r["spec"].update(cluster="Onprem_A"), "spec.cluster", "RFC 1123"),
    (lambda r: r["spec"].update(cluster="a,,b"), "spec.cluster", "RFC 1123"),
    (lambda r: r["spec"].update(gangsMoved=3), "spec.gangsMoved", "may not exceed gangsAffected"),
    (lambda r: r["spec"].update(gangsRodeOut=1), "spec.gangsMoved", "gangsRodeOut"),
    (lambda r: r["spec"].update(gangsLost=10_000_000, gangsAffected=10_000_000), "spec.gangsMoved",
     "may not exceed gangsAffected"),
    (lambda r: r["spec"].update(gangsRodeOut=-1), "spec.gangsRodeOut", "greater than or equal to 0"),
    (lambda r: r["spec"].update(gangsRestartedInPlace="one"), "spec.gangsRestartedInPlace", "integer"),
    (lambda r: r["spec"].update(gangsLost=10**12), "spec.gangsLost", "less than or equal to"),
    (lambda r: r["spec"].update(gangsLost=True), "spec.gangsLost", "integer"),
    (lambda r: r["spec"]["gangs"][0].update(outcome="stayed"), "spec.gangs[0].outcome", "Unsupported value"),
    (lambda r: r["spec"].update(finishedAt="2024-05-01T11:00:00Z"), "spec.finishedAt", "before startedAt"),
    (lambda r: r["spec"].update(startedAt="yesterday"), "spec.startedAt", "RFC 3339"),
    (lambda r: r["spec"]["gangs"][0].update(outcome="teleported"), "spec.gangs[0].outcome", "Unsupported value"),
    (lambda r: r["spec"]["gangs"][1].update(fromCluster="NOT A NAME"), "spec.gangs[1].fromCluster", "RFC 1123"),
    (lambda r: r["spec"]["plan"].update({"for": "vacation"}), "spec.plan.for", "Unsupported value"),
    (lambda r: r["spec"].update(extra=1), "spec.extra", "Forbidden"),
    (lambda r: r.update(status={"phase": "Done"}), "status", "Forbidden"),
    (lambda r: r["metadata"].update(namespace="team-a"), "metadata.namespace", "Forbidden"),
])
def test_bad_values_name_their_field(edit: Edit, path: str, words: str) -> None:
    bad = copy.deepcopy(report())
    edit(bad)
    errors = validate_drillreport(bad)
    assert any(p == path and words in message for p, message in errors), errors


def test_lists_are_bounded() -> None:
    big = report()
    gang = big["spec"]["gangs"][0]
    big["spec"]["gangs"] = [dict(gang, name=f"g{i}") for i in range(MAX_GANGS + 1)]
    big["spec"].update(gangsAffected=MAX_GANGS + 1, gangsMoved=MAX_GANGS + 1, gangsUnplaceable=0)
    errors = validate_drillreport(big)
    assert any(p == "spec.gangs" and f"at most {MAX_GANGS} items" in m for p, m in errors), errors
    listed = report()
    listed["spec"]["gangsOmitted"] = 2
    errors = validate_drillreport(listed)
    assert any(p == "spec.gangs" and "more than gangsAffected" in m for p, m in errors), errors


def test_the_crd_schema_accepts_a_report_and_rejects_bad_figures() -> None:
    schema = crd("DrillReport")["spec"]["versions"][0]
    assert "subresources" not in schema  # a report has no status
    columns = [c["name"] for c in schema["additionalPrinterColumns"] if "priority" not in c]
    assert columns == ["Cluster", "Fault", "Moved", "MaxConcurrentCopies", "JobsLost", "Age"]
    validator = jsonschema.Draft4Validator(schema["schema"]["openAPIV3Schema"])
    assert list(validator.iter_errors(report())) == []
    bad = report()
    bad["spec"]["fault"] = "meteor"
    bad["spec"]["jobsLost"] = -1
    assert len(list(validator.iter_errors(bad))) == 2


def test_a_report_that_counts_too_few_gangs_is_stored_and_one_that_counts_too_many_is_not() -> None:
    # a drill that could not place a gang in any outcome still stores its report (its notes say so) ...
    short = report()
    short["spec"].update(gangsAffected=5, gangsRodeOut=1)
    assert validate_drillreport(short) == []
    # ... but more gangs counted than affected is not a report of anything
    over = report()
    over["spec"].update(gangsRestartedInPlace=1)
    errors = validate_drillreport(over)
    assert any(p == "spec.gangsMoved" and "(4) may not exceed gangsAffected (3)" in m for p, m in errors), errors
    schema = crd("DrillReport")["spec"]["versions"][0]
    wide = [c["name"] for c in schema["additionalPrinterColumns"] if c.get("priority") == 1]
    assert {"Unplaceable", "RodeOut", "RestartedInPlace", "GangsLost"} <= set(wide), wide
    properties = schema["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {"gangsRodeOut", "gangsRestartedInPlace", "gangsLost"} <= set(properties)
