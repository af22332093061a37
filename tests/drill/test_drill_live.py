"""Live drills on simulated clusters, `federator drill` as a real process against a real hub:

- the dry-run plan of a quiet federation is where the live drill moved the gangs (a drain, and a
  partition), planMatched 1.0;
- a partition with the fence agent running in the member (as `federator up` runs it) loses no job and
  never shows a job running twice (maxConcurrentCopies 1, duplicates 0), and the agent's kills are
  counted as stale pods killed;
- without the agent (and without the hub's fencing lease) the same drill does see the duplicate: the
  samples can catch what they are there to catch;
- a partition of every cluster at once moves nothing (the hub judges itself cut off);
- a partition longer than the lease but shorter than the hub's move time: the agent kills the gang, and
  the hub, back in contact, reads the agent's mark on the lease and requeues it (no job lost);
- every drill's figures add up (drilltest_support.figures): each affected gang is in exactly one of moved,
  unplaceable, rode out, restarted in place and lost. A partition under the loss grace is ridden out; a
  gang with onClusterLoss wait rides a long one out while its neighbour moves; a node failure counts each
  gang by where the hub has it afterwards (today the hub fails a gang whose pod failed: lost).

Timings are short (grace 2 s, lease 2 s + 1 s margin) but every wait is for an event, with a deadline;
no test asserts a wall-clock time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .drilltest_support import NS, DrillEnv, drill_env, figures, gang, stored_name

pytestmark = pytest.mark.slow
HOME, NODATA, FALLBACK = "onprem-rdma-a100", "onprem-rdma-nodata", "cloud-eth-h100"
FENCED = {"cluster_loss_grace_seconds": 2.0, "member_lease": True, "member_lease_duration_seconds": 2.0,
          "member_lease_margin_seconds": 1.0}
UNFENCED = {"cluster_loss_grace_seconds": 2.0, "member_lease": False}


async def _gangs_running_in_home(env: DrillEnv, names: list[str]) -> dict[str, str]:
    uids = {}
    for name in names:
        created = await env.env.api.submit(gang(name))
        uids[name] = created["metadata"]["uid"]
    for name in names:
        await env.running_in(name, HOME)
    return uids


async def _dry_run_targets(env: DrillEnv, fault: str) -> dict[str, str | None]:
    code, out, err = await env.drill("--cluster", HOME, "--fault", fault, "--dry-run", "-o", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["kind"] == "FailoverPlan" and plan["cluster"] == HOME
    return {f"{g['namespace']}/{g['name']}": g["target"] for g in plan["gangs"]}


def _outcomes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{g['namespace']}/{g['name']}": g for g in report["spec"]["gangs"]}


async def test_a_drain_drill_moves_every_gang_where_the_dry_run_plan_said(tmp_path: Path) -> None:
    async with drill_env(tmp_path, [HOME, NODATA, FALLBACK], **UNFENCED) as env:
        names = ["d1", "d2", "d3"]
        await _gangs_running_in_home(env, names)
        planned = await _dry_run_targets(env, "drain")
        assert set(planned) == {f"{NS}/{n}" for n in names} and None not in planned.values(), planned
        assert set(planned.values()) <= {NODATA, FALLBACK}

        code, out, err = await env.drill("--cluster", HOME, "--fault", "drain", "--duration", "90s",
                                         "--max-concurrent", "2", "-o", "json")
        assert code == 0, err
        found = figures(out)
        assert found["cluster"] == HOME and found["fault"] == "drain"
        assert found["gangsAffected"] == 3 and found["gangsMoved"] == 3 and found["gangsUnplaceable"] == 0
        assert found["planMatched"] == 1.0
        assert found["jobsLost"] == 0 and found["duplicates"] == 0 and found["maxConcurrentCopies"] == 1
        assert found["detectSeconds"] is not None
        assert found["detectSeconds"] <= found["redispatchSeconds"] <= found["runningAgainSeconds"]
        report = await env.report(stored_name(out, err))
        moved = _outcomes(report)
        assert {k: g["cluster"] for k, g in moved.items()} == planned
        assert all(g["outcome"] == "moved" and g["plannedTarget"] == g["cluster"] for g in moved.values())
        # the drill lifted its drain: the cluster takes gangs again
        status, cluster = await env.env.hub.request("GET", f"/apis/federator.dev/v1alpha1/memberclusters/{HOME}")
        assert status == 200 and not cluster["spec"].get("cordoned") and "drain" not in cluster["spec"]


async def test_a_partition_drill_with_the_fence_agent_loses_nothing_and_never_runs_a_job_twice(
        tmp_path: Path) -> None:
    async with drill_env(tmp_path, [HOME, FALLBACK], **FENCED) as env:
        await env.start_agent(HOME)
        await _gangs_running_in_home(env, ["p1", "p2"])
        planned = await _dry_run_targets(env, "partition")
        assert planned == {f"{NS}/p1": FALLBACK, f"{NS}/p2": FALLBACK}

        code, out, err = await env.drill("--cluster", HOME, "--fault", "partition", "--duration", "15s",
                                         "--settle-timeout", "90s", "-o", "json")
        assert code == 0, err
        found = figures(out)
        assert found["gangsAffected"] == 2 and found["gangsMoved"] == 2, (found, err)
        assert found["jobsLost"] == 0 and found["duplicates"] == 0 and found["maxConcurrentCopies"] == 1
        assert found["planMatched"] == 1.0
        # the agent deleted the old copies (2 pods each) while the partition lasted; the drill saw them go
        assert found["stalePodsKilled"] == 4
        assert found["detectSeconds"] is not None
        assert found["detectSeconds"] <= found["redispatchSeconds"] <= found["runningAgainSeconds"]
        report = await env.report(stored_name(out, err))
        assert report["spec"]["mode"] == "simulated" and report["spec"]["unansweredReads"] == 0, report["spec"]
        assert {k: g["cluster"] for k, g in _outcomes(report).items()} == planned


async def test_without_the_fence_agent_the_drill_sees_the_old_copy_running_beside_the_new_one(
        tmp_path: Path) -> None:
    async with drill_env(tmp_path, [HOME, FALLBACK], **UNFENCED) as env:
        await _gangs_running_in_home(env, ["u1"])
        code, out, err = await env.drill("--cluster", HOME, "--fault", "partition", "--duration", "15s",
                                         "--settle-timeout", "90s", "-o", "json")
        assert code == 0, err
        found = figures(out)
        assert found["gangsMoved"] == 1, (found, err)
        # nothing killed the old copy during the partition: the samples show both copies running
        assert found["maxConcurrentCopies"] == 2 and found["duplicates"] == 1
        # the hub's GC killed the old copy when the cluster returned (the job's StaleCopyKilled entry)
        assert found["stalePodsKilled"] == 2
        assert found["jobsLost"] == 0


async def test_a_partition_of_every_cluster_at_once_moves_nothing(tmp_path: Path) -> None:
    # A grace of 6 s, not 2: the hub tells "every cluster at once" from "one, then another" by their first
    # failed contacts falling within one grace of each other. On a machine loaded far past its cores (a CI
    # run beside other work) the hub's own /readyz probes time out now and then before the partition, and a
    # 2 s window split one cluster's loss from the other's (the hub then moved the gangs of the first).
    async with drill_env(tmp_path, [HOME, FALLBACK], cluster_loss_grace_seconds=6.0, member_lease=False) as env:
        await _gangs_running_in_home(env, ["a1", "a2"])
        code, out, err = await env.drill("--cluster", "all", "--fault", "partition", "--duration", "20s",
                                         "--settle-timeout", "90s", "-o", "json")
        assert code == 0, err
        found = figures(out)
        assert found["cluster"] == "all" and found["gangsAffected"] == 2
        # both clusters turned Lost (the drill saw it), yet the hub blamed itself and moved nothing
        assert found["detectSeconds"] is not None, (found, err)
        assert found["gangsMoved"] == 0 and found["gangsUnplaceable"] == 0 and found["gangsRodeOut"] == 2
        assert found["jobsLost"] == 0 and found["maxConcurrentCopies"] == 1 and found["duplicates"] == 0
        report = await env.report(stored_name(out, err))
        assert any("HubPartitioned" in note for note in report["spec"]["notes"]), report["spec"]["notes"]
        assert {g["outcome"] for g in report["spec"]["gangs"]} == {"rodeOut"}
        for name in ("a1", "a2"):
            await env.running_in(name, HOME)


async def test_a_partition_between_the_agents_fence_and_the_hubs_move_loses_no_job(tmp_path: Path) -> None:
    async with drill_env(tmp_path, [HOME, FALLBACK], **FENCED) as env:
        await env.start_agent(HOME)
        await _gangs_running_in_home(env, ["f1"])
        # held past the lease (2 s, the agent kills) but not past the hub's move time (a renewal of unknown
        # outcome may land up to the 5 s member request timeout later, + 2 s lease + 1 s margin)
        code, out, err = await env.drill("--cluster", HOME, "--fault", "partition", "--duration", "5s",
                                         "--settle-timeout", "60s", "-o", "json")
        assert code == 0, err
        found = figures(out)
        assert found["stalePodsKilled"] == 2, found  # the agent did fence the old copy
        assert found["jobsLost"] == 0, found


async def test_a_partition_shorter_than_the_loss_grace_is_ridden_out_and_counted_so(tmp_path: Path) -> None:
    # the grace is far longer than the partition: the hub never judges the cluster lost, the gang stays put
    async with drill_env(tmp_path, [HOME, FALLBACK], cluster_loss_grace_seconds=60.0, member_lease=False) as env:
        await _gangs_running_in_home(env, ["r1"])
        code, out, err = await env.drill("--cluster", HOME, "--fault", "partition", "--duration", "3s",
                                         "--settle-timeout", "60s", "-o", "json")
        assert code == 0, err
        found = figures(out)  # checks moved + unplaceable + rode out + restarted + lost = affected
        assert found["gangsAffected"] == 1 and found["gangsRodeOut"] == 1, found
        assert found["gangsMoved"] == found["gangsUnplaceable"] == found["gangsRestartedInPlace"] == 0
        assert found["gangsLost"] == 0 and found["jobsLost"] == 0 and found["detectSeconds"] is None
        report = await env.report(stored_name(out, err))
        (outcome,) = report["spec"]["gangs"]
        assert outcome["outcome"] == "rodeOut" and outcome["cluster"] == HOME, outcome
        assert outcome["epoch"] == outcome["fromEpoch"], outcome
        assert any("never turned Lost" in note for note in report["spec"]["notes"]), report["spec"]["notes"]
        await env.running_in("r1", HOME)
        code, text, err = await env.drill("show", stored_name(out, err))
        assert code == 0, err
        assert "gangs rode out           1" in text and "rodeOut" in text and "must be all" not in text, text


async def test_a_gang_whose_policy_is_wait_rides_a_long_partition_out(tmp_path: Path) -> None:
    async with drill_env(tmp_path, [HOME, FALLBACK], **UNFENCED) as env:
        await env.env.api.submit(gang("w1", onClusterLoss="wait"))
        await env.env.api.submit(gang("m1"))
        for name in ("w1", "m1"):
            await env.running_in(name, HOME)
        code, out, err = await env.drill("--cluster", HOME, "--fault", "partition", "--duration", "12s",
                                         "--settle-timeout", "90s", "-o", "json")
        assert code == 0, err
        found = figures(out)
        assert found["detectSeconds"] is not None, (found, err)  # the cluster did turn Lost
        assert found["gangsAffected"] == 2 and found["gangsMoved"] == 1 and found["gangsRodeOut"] == 1, found
        assert found["jobsLost"] == 0 and found["gangsLost"] == 0
        outcomes = _outcomes(await env.report(stored_name(out, err)))
        assert outcomes[f"{NS}/m1"]["outcome"] == "moved" and outcomes[f"{NS}/m1"]["cluster"] == FALLBACK
        waited = outcomes[f"{NS}/w1"]
        assert waited["outcome"] == "rodeOut" and waited["cluster"] == HOME, waited
        assert "onClusterLoss: wait" in waited["message"], waited


async def test_a_node_failure_drill_counts_each_affected_gang_by_what_became_of_it(tmp_path: Path) -> None:
    async with drill_env(tmp_path, [HOME, FALLBACK], **UNFENCED) as env:
        uids = await _gangs_running_in_home(env, ["n1", "n2"])
        code, out, err = await env.drill("--cluster", HOME, "--fault", "node-failure", "--duration", "5s",
                                         "--settle-timeout", "90s", "-o", "json")
        assert code == 0, err
        found = figures(out)  # the five figures sum to gangsAffected
        assert found["gangsAffected"] >= 1, (found, err)
        report = await env.report(stored_name(out, err))
        outcomes = _outcomes(report)
        assert len(outcomes) == found["gangsAffected"]
        # each gang's outcome agrees with where the hub has it now (read independently of the drill)
        for key, outcome in outcomes.items():
            job = await env.env.api.get(NS, key.split("/", 1)[1])
            assert job["metadata"]["uid"] == uids[key.split("/", 1)[1]]
            status = job.get("status") or {}
            placement = status.get("placement") or {}
            if status.get("phase") == "Failed":
                expected = {"lost", "failedByPolicy"}
            elif placement.get("cluster") not in (None, HOME):
                expected = {"moved"}
            elif placement.get("cluster") is None:
                expected = {"unplaceable"}
            elif placement.get("epoch") != outcome["fromEpoch"]:
                expected = {"restartedInPlace"}
            else:
                expected = {"restartedInPlace", "rodeOut", "finished"}
            assert outcome["outcome"] in expected, (outcome, status)
