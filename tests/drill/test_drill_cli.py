"""`federator drill` as a real process: bad arguments are one line and exit 2, an unreachable hub one line
and exit 1; `drill list` and `drill show` read stored DrillReports back; a dry run of a cluster with no
gangs prints an empty plan and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from federator.apis.drillreport import FIGURES
from federator.dev.certs import generate_ca, write_kubeconfig

from ..apis.test_drillreport import report
from ..hub.hubtest_support import start_hub
from .drilltest_support import REPORTS, drill_env, one_error_line, run_cli


@pytest.mark.parametrize(("args", "words"), [
    ((), "--cluster NAME is required"),
    (("--cluster", "a"), "--fault is required"),
    (("--cluster", "a", "--fault", "meteor"), "--fault 'meteor': unknown fault"),
    (("--cluster", "a", "--fault", "partition", "--duration", "-5s"), "--duration '-5s': must be more than zero"),
    (("--cluster", "a", "--fault", "partition", "--duration", "-30"), "--duration '-30': must be more than zero"),
    (("--cluster", "a", "--fault", "partition", "--duration", "soon"), "--duration 'soon': not a duration"),
    (("--cluster", "a", "--fault", "partition", "--duration", "0"), "must be more than zero"),
    (("--cluster", "a", "--fault", "partition", "-o", "yaml"), "-o 'yaml': one of text, json"),
    (("--cluster", "a", "--fault", "partition", "--max-concurrent", "3"), "--max-concurrent goes with --fault drain"),
    (("--cluster", "a", "--fault", "drain", "--max-concurrent", "0"), "--max-concurrent 0: must be between"),
    (("--cluster", "a", "--fault", "outage", "--member-kubeconfig", "/nonexistent/k"), "no such file"),
])
async def test_bad_arguments_are_one_line_and_exit_2_before_anything_is_contacted(args: tuple[str, ...],
                                                                                 words: str) -> None:
    # the hub kubeconfig does not exist either: the arguments are checked first
    code, out, err = await run_cli("drill", *args, "--kubeconfig", "/nonexistent/hub.kubeconfig")
    assert code == 2, (code, out, err)
    line = one_error_line(err)
    assert line.startswith("error: ") and words in line, line
    assert out == ""


async def test_an_unreachable_hub_is_one_line_and_exit_1(tmp_path: Path) -> None:
    ca_pem, _ = generate_ca()
    kubeconfig = write_kubeconfig(tmp_path / "hub.kubeconfig", server="https://127.0.0.1:9", ca_pem=ca_pem,
                                  token="t0ken-for-nothing", user="alice")
    for args in (("--cluster", "a", "--fault", "partition", "--dry-run"), ("list",), ("show", "x")):
        code, out, err = await run_cli("drill", *args, "--kubeconfig", str(kubeconfig), "--request-timeout", "5")
        assert code == 1, (args, code, err)
        assert "cannot reach the hub at https://127.0.0.1:9" in one_error_line(err)


async def test_an_unknown_cluster_is_one_line_and_exit_2(tmp_path: Path) -> None:
    async with start_hub(tmp_path / "hub") as hub:
        for args in (("--cluster", "nowhere", "--fault", "partition", "--dry-run"),
                     ("--cluster", "nowhere", "--fault", "drain"),
                     ("--cluster", "all", "--fault", "partition")):
            code, out, err = await run_cli("drill", *args, "--kubeconfig", str(hub.kubeconfigs["admin"]))
            assert code == 2, (args, code, err)
            line = one_error_line(err)
            assert line.startswith("error: --cluster") and ("no such member cluster" in line
                                                            or "no member clusters" in line), line


async def test_drill_list_and_show_read_stored_reports_back(tmp_path: Path) -> None:
    async with start_hub(tmp_path / "hub") as hub:
        code, out, err = await run_cli("drill", "list", "--kubeconfig", str(hub.kubeconfigs["viewer"]))
        assert code == 0 and out == "" and err.strip() == "No drill reports found.", err
        first = report()
        second = report()
        second["metadata"]["name"] = "drill-cloud-b-20240502-090000"
        second["spec"].update(cluster="cloud-b", fault="drain", gangsMoved=3, gangsUnplaceable=0, duplicates=0,
                              maxConcurrentCopies=1, jobsLost=0)
        for body in (first, second):
            assert (await hub.request("POST", REPORTS, body=body))[0] == 201

        code, out, err = await run_cli("drill", "list", "--kubeconfig", str(hub.kubeconfigs["researcher"]))
        assert code == 0, err
        header, *rows = out.splitlines()
        assert header.split() == ["NAME", "CLUSTER", "FAULT", "MOVED", "MAXCONCURRENTCOPIES", "JOBSLOST", "AGE"]
        assert sorted(r.split()[:6] for r in rows) == [
            ["drill-cloud-b-20240502-090000", "cloud-b", "drain", "3", "1", "0"],
            ["drill-onprem-a-20240501-120000", "onprem-a", "partition", "2", "1", "0"],
        ]
        code, out, err = await run_cli("drill", "list", "-o", "wide", "--kubeconfig", str(hub.kubeconfigs["viewer"]))
        assert code == 0 and "PLANMATCHED" in out.splitlines()[0], err
        code, out, err = await run_cli("drill", "list", "-o", "json", "--kubeconfig", str(hub.kubeconfigs["viewer"]))
        assert code == 0 and len(json.loads(out)["items"]) == 2, err

        code, out, err = await run_cli("drill", "show", "drill-onprem-a-20240501-120000", "-o", "json",
                                       "--kubeconfig", str(hub.kubeconfigs["viewer"]))
        assert code == 0, err
        shown = json.loads(out)
        assert list(shown) == list(FIGURES)  # exactly the keys
        assert {k: shown[k] for k in ("cluster", "fault", "gangsMoved", "jobsLost", "maxConcurrentCopies")} == {
            "cluster": "onprem-a", "fault": "partition", "gangsMoved": 2, "jobsLost": 0, "maxConcurrentCopies": 1}
        code, out, err = await run_cli("drill", "show", "drill-onprem-a-20240501-120000",
                                       "--kubeconfig", str(hub.kubeconfigs["viewer"]))
        assert code == 0, err
        assert "drill partition of onprem-a" in out and "max concurrent copies    1" in out
        # a report from before the five counted figures: shown as unknown, not judged
        assert "gangs rode out           -" in out and "must be all" not in out
        assert "team-a/a" in out and "moved" in out and "onprem-a -> cloud-b (planned cloud-b)" in out
        assert "team-a/b" in out and "unplaceable" in out and "fits nowhere else" in out

        code, out, err = await run_cli("drill", "show", "missing", "--kubeconfig", str(hub.kubeconfigs["viewer"]))
        assert code == 1 and "NotFound" in one_error_line(err)
        code, out, err = await run_cli("drill", "show", "x", "-o", "yaml", "--kubeconfig",
                                       str(hub.kubeconfigs["viewer"]))
        assert code == 2 and "-o 'yaml'" in one_error_line(err)


@pytest.mark.slow
async def test_a_dry_run_of_a_cluster_without_gangs_prints_an_empty_plan(tmp_path: Path) -> None:
    async with drill_env(tmp_path, ["onprem-rdma-a100"]) as env:
        code, out, err = await env.drill("--cluster", "onprem-rdma-a100", "--fault", "partition", "--dry-run")
        assert code == 0, err
        assert "0 gangs" in out and "nothing would move" in out.lower()
        code, out, err = await env.drill("--cluster", "onprem-rdma-a100", "--fault", "drain", "--dry-run",
                                         "-o", "json")
        assert code == 0, err
        plan = json.loads(out)
        assert plan["kind"] == "FailoverPlan" and plan["for"] == "drain" and plan["gangs"] == []
        status, listed = await env.env.hub.request("GET", REPORTS)
        assert status == 200 and listed["items"] == []  # a dry run stores nothing
