"""Chaos: a preemption with a kill -9 of the leading hub between SIGTERM and deletion (issue 29, item 7): no copy
runs twice and no checkpoint is lost.

A lab (tests/chaos/lab.py) of 2 `federator up` replicas on etcd, two simulated A100 clusters with their fence
agents, and one Queue. A low-priority gang with spec.checkpoint (saveGraceSeconds 120) runs and reports a
checkpoint (the pod annotation federator.dev/checkpoint, patched through the member API as its process would).
A higher-priority gang that may only run in the victim's cluster, and needs all of it, preempts it: the victim
is requeued and its pods are deleted with the save grace. Its pods carry the simulator's
`sim.federator.dev/termination-seconds` (their process takes long to save after SIGTERM), so they stay
Terminating, phase Running, as kube keeps a pod until its containers exit or the grace ends.

While they are Terminating the leading replica is killed (kill -9); the victim, still in its grace, reports a
final checkpoint while no hub leads; the other replica takes over (the killed one is started again, as a
follower). Only once the hub recorded that checkpoint does the old copy exit (the annotation brought to 0:
"saved, exiting"). Then:
- never two copies of the victim at once: the lab's sampler, counting a terminating pod that still runs as a
  running copy (`Sampler(terminating_runs=True)`), sees no job in two clusters or at two epochs at once;
- the preemptor runs where it asked;
- the victim's next copy runs in the other cluster and every pod of it has FEDERATOR_RESTORE_FROM = the final
  checkpoint's location, and status.checkpoint holds that checkpoint (reported by the old copy's epoch);
- the federation settles and the lab's checks at rest hold.

Every wait is for an event (a pod terminating, a replica leading, a status field, a phase), none for time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from federator.apis.checkpoint import ANNOTATION_CHECKPOINT, ENV_RESTORE_FROM
from federator.clusters.client import PODS
from federator.delegation.adapter import LABEL_EPOCH
from federator.sim.kubelet import ANNOTATION_TERMINATION

from ..controllers.jobtest_support import GROUP, VERSION
from .lab import (
    NAMESPACE,
    Lab,
    LabSettings,
    Ledger,
    Sampler,
    Timeline,
    Violations,
    final_checks,
    job_body,
    job_line,
    settle,
    wait_for,
)

pytestmark = [pytest.mark.etcd, pytest.mark.slow, pytest.mark.timeout(600)]

CLUSTERS = ("onprem-rdma-a100", "onprem-rdma-nodata")
QUEUE = "chaos-training"
GRACE = 120
BASE = "s3://checkpoints/chaos/victim"


@pytest.fixture
async def lab(tmp_path: Path) -> AsyncIterator[Lab]:
    # Two GPU nodes of 8 A100s per cluster: the preemptor needs a whole cluster, the victim half of one. The
    # hub's lease in the members lasts 30 s: a takeover slower than the 6 s of the random sequences (a loaded
    # machine) must not let the fence agents kill the saving copy with grace 0 (fencing is immediate by
    # design, docs/failover.md; this test is about the eviction's grace), nor the clusters count as lost.
    settings = LabSettings(clusters=CLUSTERS, etcd_members=1, gpu_nodes=2, cpu_nodes=1, member_lease="30s",
                           cluster_loss_grace="30s")
    the_lab = Lab(tmp_path / "lab", settings, Timeline())
    try:
        await the_lab.start()
        yield the_lab
    finally:
        await the_lab.stop()


def _victim() -> dict[str, Any]:
    """2 pods of 4 GPUs, anywhere, priority 1, checkpoints under BASE; its pods take their whole grace to save."""
    body = job_body("victim", workers=2, gpus=4)
    body["spec"].update(queue=QUEUE, priority=1, checkpoint={"uri": BASE, "saveGraceSeconds": GRACE})
    body["spec"]["roles"][0]["template"] = {
        "metadata": {"annotations": {ANNOTATION_TERMINATION: str(10 * GRACE)}},
        "spec": {"containers": [{"name": "main", "image": "trainer:1.4", "resources": {
            "requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}}]}}
    return body


def _preemptor(cluster: str) -> dict[str, Any]:
    """2 pods of 8 GPUs (the whole cluster), only in `cluster`, priority 10."""
    body = job_body("urgent", workers=2, gpus=8, clusters=[cluster])
    body["spec"].update(queue=QUEUE, priority=10)
    return body


def _queue() -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Queue", "metadata": {"name": QUEUE}, "spec": {
        "namespaces": {"names": [NAMESPACE]}, "quota": {"gpus": {"A100": 64}},
        "preemption": {"withinQueue": "LowerPriority", "reclaimBorrowed": True}}}


def _status(job: dict[str, Any]) -> dict[str, Any]:
    return job.get("status") or {}


def _placed(job: dict[str, Any]) -> tuple[str | None, int | None, str]:
    placement = _status(job).get("placement") or {}
    return placement.get("cluster"), placement.get("epoch"), str(_status(job).get("phase") or "")


def _report(step: int) -> dict[str, Any]:
    return {"metadata": {"annotations": {ANNOTATION_CHECKPOINT: json.dumps(
        {"step": step, "location": f"{BASE}/step-{step}"})}}}


#: when the old copy's final report lands and when its process exits
RECORDED_THEN_EXITS = "reports-while-no-hub-leads-exits-once-recorded"
EXITS_WHILE_NO_HUB_LEADS = "reports-and-exits-while-no-hub-leads"
EXITS_AFTER_TAKEOVER = "reports-and-exits-after-the-takeover"


@pytest.mark.parametrize("exits", [RECORDED_THEN_EXITS, EXITS_WHILE_NO_HUB_LEADS, EXITS_AFTER_TAKEOVER])
async def test_a_preemption_with_the_hub_killed_in_the_victims_grace_loses_no_checkpoint(lab: Lab,
                                                                                        exits: str) -> None:
    ledger = Ledger(lab)
    violations = Violations()
    sampler = Sampler(lab, ledger, violations, interval=0.2, terminating_runs=True)
    tl = lab.timeline

    async def job(name: str) -> dict[str, Any]:
        found: dict[str, Any] = await lab.call(lambda api: api.get(NAMESPACE, name), timeout=60)
        return found

    async def pods(cluster: str, uid: str, epoch: int) -> list[dict[str, Any]]:
        _, found = await lab.fed.member_objects(cluster, uid)
        return [p for p in found if p["metadata"]["labels"].get(LABEL_EPOCH) == str(epoch)]

    def report(extra: str = "") -> str:
        return (f"\n{extra}\ntime line:\n{lab.report_timeline()}\nviolations ({len(violations)}):\n"
                f"{violations.format()}\nsampler: {sampler.summary()}\nlab files (logs): {lab.workdir}\n")

    sampler.start()
    try:
        await lab.call(lambda api: api.objects.create_cluster_custom_object(GROUP, VERSION, "queues", _queue()))
        victim = await ledger.submit("victim", _victim())
        assert victim.acked and victim.uid, victim.attempts
        uid = victim.uid

        async def victim_running() -> dict[str, Any] | None:
            found = await job("victim")
            return found if _placed(found)[2] == "Running" else None

        first = await wait_for(victim_running, timeout=120, what="the victim running")
        home, epoch, _ = _placed(first)
        assert home in CLUSTERS and isinstance(epoch, int), job_line(first)
        other = next(c for c in CLUSTERS if c != home)
        tl.add("job", f"victim runs in {home} at epoch {epoch}")
        old_pods = await pods(home, uid, epoch)
        assert len(old_pods) == 2, old_pods
        member = await lab.fed.client(home)

        # a checkpoint while it runs, recorded by the hub
        await member.patch(PODS, namespace=NAMESPACE, name=old_pods[0]["metadata"]["name"], patch=_report(5))

        async def checkpoint_at(step: int) -> dict[str, Any] | None:
            found = await job("victim")
            return found if (_status(found).get("checkpoint") or {}).get("step") == step else None

        await wait_for(lambda: checkpoint_at(5), timeout=60, what="status.checkpoint at step 5")

        # the preemptor can only run in the victim's cluster, and needs all of it
        urgent = await ledger.submit("urgent", _preemptor(home))
        assert urgent.acked, urgent.attempts

        async def terminating() -> list[dict[str, Any]] | None:
            found = await pods(home, uid, epoch)
            return found if len(found) == 2 and all(p["metadata"].get("deletionTimestamp") for p in found) else None

        saving = await wait_for(terminating, timeout=120, what="the victim's pods terminating (SIGTERM, the grace)")
        assert {p["metadata"]["deletionGracePeriodSeconds"] for p in saving} == {GRACE}, saving
        assert {p["status"]["phase"] for p in saving} == {"Running"}, saving
        tl.add("job", f"the victim's pods in {home} are terminating with a {GRACE}s grace")

        # kill -9 of the leading hub while the old copy saves
        leader = await lab.find_leader(timeout=30)
        assert leader is not None, "no replica leads"
        pid = leader.pid
        await leader.kill()
        tl.add("fault", f"kill -9 hub {leader.name} (leader, pid {pid}) during the victim's grace")

        final = _report(9)
        exit_now = {ANNOTATION_TERMINATION: "0"}

        async def exit_old_copy(*, with_report: bool) -> None:
            """Its processes exit (the annotation brought to 0), the second pod's with its final report."""
            for i, p in enumerate(saving):
                patch = {"metadata": {"annotations": {**exit_now, **(
                    final["metadata"]["annotations"] if with_report and i == 1 else {})}}}
                await member.patch(PODS, namespace=NAMESPACE, name=p["metadata"]["name"], patch=patch)
            tl.add("job", "the victim's old pods exit" + (", one reporting step 9 as it goes" if with_report else ""))

        # the old copy, still in its grace, reports its final checkpoint while no hub leads
        if exits == RECORDED_THEN_EXITS:
            await member.patch(PODS, namespace=NAMESPACE, name=saving[1]["metadata"]["name"], patch=final)
            tl.add("job", "the victim's terminating pod reports step 9")
        elif exits == EXITS_WHILE_NO_HUB_LEADS:
            await exit_old_copy(with_report=True)
        restart = asyncio.create_task(leader.start(), name="restart-killed-hub")
        new_leader = await lab.find_leader(timeout=90)
        assert new_leader is not None, report("no replica leads after the kill")
        if exits == EXITS_AFTER_TAKEOVER:
            await exit_old_copy(with_report=True)
        recorded = await wait_for(lambda: checkpoint_at(9), timeout=120,
                                  what="status.checkpoint at step 9, reported during the grace")
        await restart
        assert recorded["status"]["checkpoint"]["epoch"] == epoch, job_line(recorded)
        if exits == RECORDED_THEN_EXITS:
            # the scenario held: the old copy was still there, being deleted, all along
            still = await terminating()
            assert still is not None, report("the old copy went before it exited: the grace was not held")
            await exit_old_copy(with_report=False)

        async def moved() -> dict[str, Any] | None:
            found = await job("victim")
            cluster, at, phase = _placed(found)
            return found if cluster == other and isinstance(at, int) and at > epoch and phase == "Running" else None

        back = await wait_for(moved, timeout=180, what=f"the victim running again in {other}")
        new_epoch = _placed(back)[1]
        assert isinstance(new_epoch, int)

        async def urgent_running() -> dict[str, Any] | None:
            found = await job("urgent")
            return found if _placed(found)[0] == home and _placed(found)[2] == "Running" else None

        await wait_for(urgent_running, timeout=180, what=f"the preemptor running in {home}")
        tl.add("job", f"victim runs in {other} at epoch {new_epoch}; urgent runs in {home}")

        # no checkpoint lost: the next copy restores from the one reported during the grace
        new_pods = await pods(other, uid, new_epoch)
        assert len(new_pods) == 2, new_pods
        for p in new_pods:
            env = {e["name"]: e.get("value") for c in p["spec"]["containers"] for e in c.get("env") or ()}
            assert env.get(ENV_RESTORE_FROM) == f"{BASE}/step-9", report(
                f"{p['metadata']['name']} restores from {env.get(ENV_RESTORE_FROM)!r}, not from step 9")
        checkpoint = back["status"]["checkpoint"]
        assert (checkpoint["step"], checkpoint["location"], checkpoint["epoch"]) == (9, f"{BASE}/step-9", epoch), \
            report(f"status.checkpoint {checkpoint}")

        unsettled = await settle(lab, ledger, timeout=120)
        assert unsettled is None, report(f"the federation did not settle: {unsettled}")
        await final_checks(lab, ledger, violations)
    finally:
        await sampler.stop()
    print(f"sampler: {sampler.summary()}\ntime line:\n{lab.report_timeline()}")
    assert not violations, report()
    assert sampler.max_copies == 1, report()
