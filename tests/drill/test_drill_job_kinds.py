"""A partition drill on a cluster running one object of each upstream job kind the hub serves (issue 28's bar):
PyTorchJob, TFJob, PaddleJob, MPIJob, JobSet, TrainJob and an indexed batch/v1 Job, each run through its twin
TrainingJob. With the fence agent in the member (as `federator up` runs it), the drill loses no job, never shows
one running twice (duplicates 0, maxConcurrentCopies 1), moves every gang, and every source object shows the
move: Running, in the other cluster, at a newer epoch.

The objects are the small ones tests/hub/test_job_kinds.py runs (the unchanged upstream examples, and Trainer's
small TrainJob); the simulated pods run until killed. The other cluster is cordoned while they are placed, so all
seven land in the one the drill cuts off; every wait is for an event, with a deadline.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from federator.clusters.client import JOB_KIND_RESOURCES

from ..apis.jobkinds.test_trainjob import small as small_trainjob
from ..apis.test_job_kinds_kubeflow import EXAMPLES, upstream_example
from ..controllers.lifecycle_support import LIFECYCLE_WITH_TWINS
from ..hub.test_job_kinds import indexed_job, jobset_example, object_url
from ..hub.test_operator_mode import KINDS, OperatorFederation
from .drilltest_support import NS, DrillEnv, drill_env, figures, stored_name, wait_until

pytestmark = pytest.mark.slow
HOME, FALLBACK = "onprem-rdma-a100", "cloud-eth-h100"
FENCED = {"cluster_loss_grace_seconds": 2.0, "member_lease": True, "member_lease_duration_seconds": 2.0,
          "member_lease_margin_seconds": 1.0}


def one_of_each_kind() -> list[dict[str, Any]]:
    """One small object of every served upstream kind, all in the drill's namespace."""
    objects = [*(upstream_example(*EXAMPLES[kind]) for kind in sorted(EXAMPLES)),
               jobset_example(), small_trainjob(), indexed_job()]
    for obj in objects:
        obj["metadata"]["namespace"] = NS
    return objects


async def _cluster(env: DrillEnv, verb: str, name: str) -> None:
    code, out, err = await env.env.hub.cli("admin", "cluster", verb, name)
    assert code == 0 and out.strip() == f"membercluster.federator.dev/{name} {verb}ed", err


async def _source_status(env: DrillEnv, obj: dict[str, Any]) -> dict[str, Any]:
    status, body = await env.env.hub.request("GET", object_url(obj, NS))
    assert status == 200, body
    return dict(body.get("status") or {})


@pytest.mark.parametrize("operators", [False, True], ids=["render", "operator"])
async def test_a_partition_drill_on_a_cluster_running_every_job_kind_moves_each_whole_and_once(
        tmp_path: Path, operators: bool) -> None:
    """`operator`: both members run the job operators (issue 28's operator mode): the hub creates each kind's
    object there, the fence agent deletes the cut-off cluster's copies (their operators' pods go with them)."""
    objects = one_of_each_kind()
    assert len({o["kind"] for o in objects}) == 7 and len({o["metadata"]["name"] for o in objects}) == 7
    extra: dict[str, Any] = {}
    if operators:
        extra["federation"] = OperatorFederation(tmp_path / "members", run_seconds=3600.0)
    async with drill_env(tmp_path, [HOME, FALLBACK], controllers=LIFECYCLE_WITH_TWINS, **FENCED, **extra) as env:
        await env.start_agent(HOME)
        await _cluster(env, "cordon", FALLBACK)
        for obj in objects:
            status, body = await env.env.hub.request("POST", object_url(obj, NS).rsplit("/", 1)[0],
                                                     body=copy.deepcopy(obj))
            assert status == 201, (obj["kind"], body)
        twins = {o["metadata"]["name"]: await env.running_in(o["metadata"]["name"], HOME, timeout=120)
                 for o in objects}
        pods = 0
        for name, twin in twins.items():
            async def live(uid: str = twin["metadata"]["uid"]) -> list[dict[str, Any]]:
                return await env.env.live_pods(HOME, uid)

            pods += len(await wait_until(live, timeout=30, what=f"the pods of {name} in {HOME}"))
        if operators:  # the operators run these, from the hub's member copies
            client = await env.env.member(HOME)
            for obj in objects:
                if KINDS[obj["kind"]].operator_copyable:  # every kind but TrainJob, MPIJob's too
                    copied = await client.get(JOB_KIND_RESOURCES[KINDS[obj["kind"]].source_key], namespace=NS,
                                              name=obj["metadata"]["name"])
                    assert copied["metadata"]["labels"]["federator.dev/job-uid"] == \
                        twins[obj["metadata"]["name"]]["metadata"]["uid"]
        await _cluster(env, "uncordon", FALLBACK)

        code, out, err = await env.drill("--cluster", HOME, "--fault", "partition", "--duration", "15s",
                                         "--settle-timeout", "180s", "-o", "json", timeout=300)
        assert code == 0, err
        found = figures(out)
        assert found["gangsAffected"] == 7 and found["gangsMoved"] == 7 and found["gangsUnplaceable"] == 0, (
            found, err)
        assert found["jobsLost"] == 0 and found["duplicates"] == 0 and found["maxConcurrentCopies"] == 1, found
        # the agent deleted every old pod while the partition lasted; the drill saw them go (more, when a
        # member create that timed out on a loaded machine had left a pod the hub then replaced)
        assert found["stalePodsKilled"] >= pods, (found, pods)
        report = await env.report(stored_name(out, err))
        gangs = {g["name"]: g for g in report["spec"]["gangs"]}
        assert set(gangs) == set(twins), gangs
        assert {(g["outcome"], g["cluster"]) for g in gangs.values()} == {("moved", FALLBACK)}, gangs

        for obj in objects:
            name = obj["metadata"]["name"]
            old_epoch = twins[name]["status"]["placement"]["epoch"]

            async def moved(source: dict[str, Any] = obj) -> dict[str, Any] | None:
                status = await _source_status(env, source)
                return status if (status.get("phase"), status.get("cluster")) == ("Running", FALLBACK) else None

            status = await wait_until(moved, timeout=60, what=f"the {obj['kind']} {name} Running in {FALLBACK}")
            assert status["epoch"] > old_epoch, (obj["kind"], status)
            twin = await env.running_in(name, FALLBACK)
            assert twin["metadata"]["uid"] == twins[name]["metadata"]["uid"]
