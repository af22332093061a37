"""DrillReport on a real hub: admin stores, everyone reads, researchers cannot write, bad figures get a 422
naming the field, and `kubectl get dr` shows the report's columns."""

from __future__ import annotations

import pytest

from ..apis.test_drillreport import report
from .hubtest_support import GROUP_PATH, RunningHub

REPORTS = f"{GROUP_PATH}/drillreports"


async def test_admin_stores_a_report_everyone_reads_it_and_researchers_cannot_write(hub: RunningHub) -> None:
    status, created = await hub.request("POST", REPORTS, body=report())
    assert status == 201, created
    name = created["metadata"]["name"]
    assert created["spec"]["maxConcurrentCopies"] == 1 and "status" not in created
    for who in ("viewer", "researcher", "other"):
        status, got = await hub.request("GET", f"{REPORTS}/{name}", who=who)
        assert status == 200 and got["spec"] == created["spec"], (who, got)
        status, listed = await hub.request("GET", REPORTS, who=who)
        assert status == 200 and [i["metadata"]["name"] for i in listed["items"]] == [name]
    other = report()
    other["metadata"]["name"] = "drill-by-researcher"
    for who, verb, path, body in (("researcher", "POST", REPORTS, other), ("viewer", "POST", REPORTS, other),
                                  ("researcher", "DELETE", f"{REPORTS}/{name}", None),
                                  ("researcher", "PUT", f"{REPORTS}/{name}", created)):
        status, answer = await hub.request(verb, path, who=who, body=body)
        assert status == 403 and answer["reason"] == "Forbidden", (who, verb, answer)
        assert 'cannot' in answer["message"] and '"drillreports"' in answer["message"]
    status, _ = await hub.request("GET", f"{REPORTS}/drill-by-researcher")
    assert status == 404
    status, _ = await hub.request("DELETE", f"{REPORTS}/{name}")
    assert status == 200


@pytest.mark.parametrize(("field", "value"), [
    ("jobsLost", -1), ("fault", "meteor"), ("planMatched", 2.0), ("detectSeconds", "soon"),
])
async def test_bad_figures_get_422_naming_the_field_and_store_nothing(hub: RunningHub, field: str,
                                                                      value: object) -> None:
    bad = report()
    bad["spec"][field] = value
    status, answer = await hub.request("POST", REPORTS, body=bad)
    assert status == 422 and answer["reason"] == "Invalid", answer
    assert [c["field"] for c in answer["details"]["causes"]] == [f"spec.{field}"], answer
    status, listed = await hub.request("GET", REPORTS)
    assert status == 200 and listed["items"] == []


@pytest.mark.kubectl
async def test_kubectl_get_dr_shows_the_report_columns(hub: RunningHub) -> None:
    assert (await hub.request("POST", REPORTS, body=report()))[0] == 201
    code, out, err = await hub.kubectl("viewer", "get", "dr")
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == ["NAME", "CLUSTER", "FAULT", "MOVED", "MAXCONCURRENTCOPIES", "JOBSLOST", "AGE"]
    assert row.split()[:6] == ["drill-onprem-a-20240501-120000", "onprem-a", "partition", "2", "1", "0"]
    code, out, err = await hub.kubectl("researcher", "get", "drillreports", "-o", "wide")
    assert code == 0, err
    assert out.splitlines()[0].split()[-8:] == ["AFFECTED", "UNPLACEABLE", "RODEOUT", "RESTARTEDINPLACE", "GANGSLOST",
                                                "DUPLICATES", "RUNNINGAGAIN", "PLANMATCHED"]
    code, out, err = await hub.kubectl("admin", "explain", "dr.spec.maxConcurrentCopies")
    assert code == 0 and "most clusters one job" in out, err
