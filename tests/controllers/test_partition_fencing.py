"""A partition that cuts only the hub off: the member's fence agent kills the old copy before the new one
starts elsewhere, and at no sampled moment does a job run in two clusters.

Real SimClusters, a real hub with every lifecycle controller (fencing lease on, short timings) and a
real FenceAgent on HOME, reaching HOME with its own identity. The partition cuts off only the hub's
identity, so the agent still reaches its member while the hub does not (`federator sim fault partition
--from`). Two witnesses:
- ordering: every member pod event is recorded, in-process, on the one event loop, the moment it is
  delivered; every pod of the old copy is deleted in HOME before any pod of the new copy is created in
  FALLBACK;
- sampling: every 0.5 s, hub and members are read; no job ever has running pods in two clusters.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from federator.fencing.agent import FenceAgent
from federator.delegation.adapter import LABEL_EPOCH, LABEL_HUB, LABEL_JOB_UID
from federator.sim import kinds
from federator.sim.server import SimCluster

from .jobtest_support import API, phase, placement_of, wait_until
from .lifecycle_support import Env, aimed_job, history, lifecycle_env, local_pod

pytestmark = pytest.mark.slow
HOME, FALLBACK = "onprem-rdma-a100", "cloud-eth-h100"
NS = "team-a"
JOBS = ("p1", "p2", "p3")


def _job(name: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name, "namespace": NS}, "spec": {
        "roles": [{"name": "worker", "replicas": 2, "template": {
            "image": "trainer:1.4", "resources": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4}}}],
        "placement": {"network": "any", "gpuModels": ["A100", "H100"], "datasets": ["imagenet-22k"]}}}


class PodEvents:
    """Every pod event of this hub in one member, with the loop time it was delivered."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.events: list[tuple[float, str, str, str]] = []  # (time, type, job uid, epoch)

    async def run(self) -> None:
        listing = await self.sim.storage.list(kinds.PODS, label_selector=LABEL_HUB)
        loop = asyncio.get_running_loop()
        for pod in listing.items:
            self._add(loop.time(), "ADDED", pod)
        async for event in self.sim.storage.watch(kinds.PODS, resource_version=listing.resource_version,
                                                  label_selector=LABEL_HUB):
            self._add(loop.time(), event.type, event.object)

    def _add(self, at: float, kind: str, pod: dict[str, Any]) -> None:
        labels = pod["metadata"].get("labels") or {}
        self.events.append((at, kind, labels.get(LABEL_JOB_UID, ""), labels.get(LABEL_EPOCH, "")))


class Sampler:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.max_copies = 0
        self.samples = 0

    async def run(self) -> None:
        while True:
            await self.env.api.list()  # the hub is sampled too: it must keep answering
            where: dict[str, set[str]] = {}
            for name, sim in self.env.fed.sims.items():
                for pod in (await sim.storage.list(kinds.PODS, label_selector=LABEL_HUB)).items:
                    if pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp"):
                        where.setdefault(pod["metadata"]["labels"][LABEL_JOB_UID], set()).add(name)
            self.max_copies = max([self.max_copies, *(len(c) for c in where.values())])
            self.samples += 1
            await asyncio.sleep(0.5)


@contextlib.asynccontextmanager
async def _tasks(*coroutines: Any) -> AsyncIterator[None]:
    tasks = [asyncio.get_running_loop().create_task(c) for c in coroutines]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with lifecycle_env(tmp_path, [HOME, FALLBACK], run_seconds=None, cluster_loss_grace_seconds=2.0,
                             member_lease_duration_seconds=2.0, member_lease_margin_seconds=1.0) as e:
        yield e


async def test_the_agent_kills_the_old_copy_before_the_new_one_starts_and_no_job_ever_runs_twice(
        env: Env, tmp_path: Path) -> None:
    home = env.fed.sims[HOME]
    agent = await FenceAgent.from_kubeconfig(home.write_agent_kubeconfig(tmp_path / "home-agent.kubeconfig"),
                                             hub_identity="federator", poll_seconds=0.2)
    stop = asyncio.Event()
    home_events, fallback_events = PodEvents(home), PodEvents(env.fed.sims[FALLBACK])
    sampler = Sampler(env)
    try:
        async with _tasks(agent.run(stop), home_events.run(), fallback_events.run(), sampler.run()):
            await wait_until(lambda: agent.counters.renewals_seen >= 2, timeout=30,
                             what="the agent seeing the hub renew its lease")
            uids = {}
            for name in JOBS:
                uids[name] = (await env.api.submit(_job(name)))["metadata"]["uid"]
            epochs = {}
            for name in JOBS:
                job = await env.api.wait_job(NS, name, lambda j: placement_of(j).get("cluster") == HOME
                                             and phase(j) == "Running", timeout=40, what=f"{name} running in HOME")
                epochs[name] = placement_of(job)["epoch"]

            home.faults.start_partition(None, source=home.token)  # only the hub's identity is cut off
            for name in JOBS:
                await env.api.wait_job(NS, name, lambda j: placement_of(j).get("cluster") == FALLBACK
                                       and phase(j) == "Running", timeout=60, what=f"{name} running in FALLBACK")
            assert agent.counters.expiries >= 1 and agent.counters.pods_deleted >= 2 * len(JOBS)
            samples_at_move = sampler.samples
            await wait_until(lambda: sampler.samples >= samples_at_move + 2, what="two more samples")
            home.faults.end_partition()
            await wait_until(lambda: agent.counters.lifts >= 1, timeout=30, what="the hub renewing again")
    finally:
        stop.set()
        await agent.close()

    assert sampler.samples >= 4 and sampler.max_copies == 1
    for name in JOBS:
        uid = uids[name]
        killed = [at for at, kind, u, epoch in home_events.events
                  if u == uid and kind == "DELETED" and epoch == str(epochs[name])]
        started = [at for at, kind, u, epoch in fallback_events.events
                   if u == uid and kind == "ADDED" and epoch == str(epochs[name] + 1)]
        assert len(killed) == 2 and len(started) == 2, (name, home_events.events, fallback_events.events)
        assert max(killed) < min(started), f"{name}: the new copy started before the old one was gone"
        job = await env.api.get(NS, name)
        (lost,) = history(job, "ClusterLost")
        assert lost["cluster"] == HOME and lost["epoch"] == epochs[name]
        assert placement_of(job)["epoch"] == epochs[name] + 1
    # The agent said why, in the member.
    events = (await home.storage.list(kinds.EVENTS, namespace="federator-system")).items
    assert "HubLeaseExpired" in {e.get("reason") for e in events}, events


@pytest.fixture
async def short_lease_env(tmp_path: Path) -> AsyncIterator[Env]:
    # The lease runs out long before the hub's grace: the agent fences a cluster the hub never judges lost.
    async with lifecycle_env(tmp_path, [HOME, FALLBACK], run_seconds=None, cluster_loss_grace_seconds=120.0,
                             member_lease_duration_seconds=2.0, member_lease_margin_seconds=1.0) as e:
        yield e


@pytest.mark.parametrize("restart_policy", ["Never", "OnFailure"])
async def test_gangs_the_agent_killed_while_the_hub_never_judged_the_cluster_lost_are_requeued_not_failed(
        short_lease_env: Env, tmp_path: Path, restart_policy: str) -> None:
    """OnFailure: the agent deletes the whole gang, its PodGroup included, and the restart of its missing pods
    cannot work (their owner is gone): status sync asks the fencing lease first and requeues the gang as it
    does one of restartPolicy Never (it used to retry the restart forever, reading the deleted PodGroup)."""
    env = short_lease_env
    home = env.fed.sims[HOME]
    agent = await FenceAgent.from_kubeconfig(home.write_agent_kubeconfig(tmp_path / "home-agent.kubeconfig"),
                                             hub_identity="federator", poll_seconds=0.2)
    stop = asyncio.Event()
    job = _job("fenced")
    job["spec"]["roles"][0]["restartPolicy"] = restart_policy
    try:
        async with _tasks(agent.run(stop)):
            await wait_until(lambda: agent.counters.renewals_seen >= 2, timeout=30, what="the agent seeing renewals")
            created = await env.api.submit(job)
            uid = created["metadata"]["uid"]
            job = await env.api.wait_job(NS, "fenced", lambda j: placement_of(j).get("cluster") == HOME
                                         and phase(j) == "Running", timeout=40, what="running in HOME")
            epoch = placement_of(job)["epoch"]
            home.faults.start_partition(None, source=home.token)
            await wait_until(lambda: agent.counters.pods_deleted >= 2, timeout=30, what="the agent fencing")
            sync = env.hub.context.parts.members.syncs[HOME]
            assert not sync.health.lost  # the hub never judged HOME lost: nothing moved
            home.faults.end_partition()
            back = await env.api.wait_job(NS, "fenced", lambda j: bool(history(j, "Fenced"))
                                          and phase(j) == "Running", timeout=60, what="requeued and running again")
    finally:
        stop.set()
        await agent.close()
    (fenced,) = history(back, "Fenced")
    assert fenced["cluster"] == HOME and fenced["epoch"] == epoch and "fence agent" in fenced["message"]
    assert placement_of(back)["epoch"] == epoch + 1
    said = [h["event"] for h in back["status"]["history"]]
    assert "Failed" not in said and "PodRestarted" not in said, said
    assert back["status"].get("requeues", 0) == 0  # not the job's fault: not counted against maxRequeues
    assert uid == back["metadata"]["uid"]
    lease = env.hub.context.parts.members.syncs[HOME].lease
    assert lease.fence_noticed_at is not None and lease.fence_count >= 1


@pytest.fixture
async def long_lease_env(tmp_path: Path) -> AsyncIterator[Env]:
    # A hub takes an agent that never marks its fence lifted for gone once its renewals have been acknowledged
    # for a whole lease duration (hublease.py). The test below holds the agent's sweep until it has seen the
    # hub's dispatch wait; a 2 s lease let that fallback expire first on a loaded CI machine (2 CPU hogs), and
    # the released sweep killed the new copy. 10 s is longer than any stall of this process seen there.
    async with lifecycle_env(tmp_path, [HOME, FALLBACK], run_seconds=None, cluster_loss_grace_seconds=2.0,
                             member_lease_duration_seconds=10.0, member_lease_margin_seconds=1.0) as e:
        yield e


async def test_a_gang_placed_back_into_a_returning_cluster_waits_until_its_agent_has_lifted_the_fence(
        long_lease_env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chaos seed 2061632721: a partition of the hub from HOME outlasts the lease and the grace; the agent
    kills the gang, the hub moves it, and placement sends it straight back to HOME the moment HOME returns,
    while a step of the agent that read the Lease before the hub's first renewal landed is still sweeping.
    That sweep killed the new copy, and the job failed (MemberObjectsDeleted): lost by the system. Now the
    hub dispatches into HOME only once a renewal's answer shows the agent marked its fence lifted.

    The agent's sweep is held at its start for the moment HOME returns (the slow step of a loaded machine);
    everything else is real: SimClusters, the hub and its controllers, the agent on HOME."""
    env = long_lease_env
    home = env.fed.sims[HOME]
    agent = await FenceAgent.from_kubeconfig(home.write_agent_kubeconfig(tmp_path / "home-agent.kubeconfig"),
                                             hub_identity="federator", poll_seconds=0.2)
    sweeps_open, sweep_held = asyncio.Event(), asyncio.Event()
    sweeps_open.set()
    sweep = agent._sweep

    async def held_sweep(expiry: Any) -> tuple[int, int, int]:
        if not sweeps_open.is_set():
            sweep_held.set()
            await sweeps_open.wait()
        return await sweep(expiry)

    monkeypatch.setattr(agent, "_sweep", held_sweep)
    stop = asyncio.Event()
    lease = env.hub.context.parts.members.syncs[HOME].lease
    try:
        with structlog.testing.capture_logs() as logs:
            async with _tasks(agent.run(stop)):
                await wait_until(lambda: agent.counters.renewals_seen >= 2, timeout=30, what="the agent seeing renewals")
                uid = (await env.api.submit(aimed_job("back", HOME)))["metadata"]["uid"]
                job = await env.api.wait_job(NS, "back", lambda j: placement_of(j).get("cluster") == HOME
                                             and phase(j) == "Running", timeout=40, what="running in HOME")
                assert placement_of(job)["epoch"] == 1

                home.faults.start_partition(None, source=home.token)  # only the hub's identity is cut off
                await wait_until(lambda: agent.counters.pods_deleted >= 3, timeout=30, what="the agent fencing")
                await env.api.wait_job(NS, "back", lambda j: bool(history(j, "ClusterLost")), timeout=60,
                                       what="the hub moving the gang off HOME (it fits nowhere else)")
                sweeps_open.clear()  # the agent's next step reads the Lease (still expired), then waits
                await wait_until(sweep_held.is_set, timeout=30, what="a sweep of the agent held at its start")
                renewals = lease.renewals
                home.faults.end_partition()

                def dispatch_held() -> bool:
                    return any(line.get("event") == "dispatch waiting for the member's fence agent"
                               and line.get("cluster") == HOME for line in logs)

                async def back_in_home() -> bool:
                    job = await env.api.get(NS, "back")
                    placed = placement_of(job).get("cluster") == HOME and placement_of(job).get("epoch") == 2
                    return placed and lease.renewals > renewals and (phase(job) == "Running" or dispatch_held())

                await wait_until(back_in_home, timeout=60, what="HOME renewed, the gang placed back there at "
                                 "epoch 2 and either running there or its dispatch waiting for the agent")
                deleted = agent.counters.pods_deleted
                sweeps_open.set()  # the held sweep goes on, with its view of the Lease from before HOME returned

                async def settled() -> dict[str, Any] | None:
                    job = await env.api.get(NS, "back")
                    if phase(job) == "Failed" or history(job, "Fenced"):
                        return job
                    pods = await env.live_pods(HOME, uid)
                    running = [p for p in pods if p["status"].get("phase") == "Running"]
                    return job if phase(job) == "Running" and agent.counters.lifts >= 1 and len(running) == 3 \
                        else None

                final = await wait_until(settled, timeout=60, what="the gang running in HOME after the agent "
                                         "lifted its fence (or failed, or requeued again)")
    finally:
        stop.set()
        await agent.close()
    said = [(h["event"], h.get("epoch"), h.get("message", "")[:160]) for h in final["status"]["history"]]
    assert not history(final, "Failed") and not history(final, "Fenced"), f"the new copy was killed: {said}"
    assert phase(final) == "Running", said
    assert placement_of(final) == {**placement_of(final), "cluster": HOME, "epoch": 2}
    assert agent.counters.pods_deleted == deleted  # the held sweep found nothing of the new copy to kill
    assert dispatch_held() and agent.counters.lifts_marked >= 1 and lease.fence_lifted >= 1


async def test_a_fenced_gang_is_not_requeued_while_a_dispatch_of_it_is_in_flight(
        short_lease_env: Env, tmp_path: Path) -> None:
    """Chaos seed 1657557937: status sync requeued a gang the agent killed while a restarted hub's
    re-dispatch of that same epoch was still waiting for the cluster's fences; the dispatch then created the
    killed epoch again beside the next one. A Fenced requeue waits for the dispatch in flight to return (as
    failover does), then happens."""
    from federator.controllers.jobs import placed_at

    env = short_lease_env
    home = env.fed.sims[HOME]
    agent = await FenceAgent.from_kubeconfig(home.write_agent_kubeconfig(tmp_path / "home-agent.kubeconfig"),
                                             hub_identity="federator", poll_seconds=0.2)
    parts = env.hub.context.parts
    stop = asyncio.Event()
    held = False
    try:
        async with _tasks(agent.run(stop)):
            await wait_until(lambda: agent.counters.renewals_seen >= 2, timeout=30, what="the agent seeing renewals")
            created = await env.api.submit(_job("in-flight"))
            uid = created["metadata"]["uid"]
            job = await env.api.wait_job(NS, "in-flight", lambda j: placement_of(j).get("cluster") == HOME
                                         and phase(j) == "Running", timeout=40, what="running in HOME")
            epoch = placement_of(job)["epoch"]
            status_sync = parts.running.status_sync
            assert status_sync is not None
            # a dispatch of this epoch in flight (a restarted hub's re-dispatch waiting for HOME's fences)
            parts.in_flight.begin(uid)
            held = True
            home.faults.start_partition(None, source=home.token)
            await wait_until(lambda: agent.counters.pods_deleted >= 2, timeout=30, what="the agent fencing")
            home.faults.end_partition()
            lease = parts.members.syncs[HOME].lease

            def judged_fenced() -> bool:
                since = status_sync._missing_since.get(uid)
                placed = placed_at(job, epoch=epoch)
                return since is not None and lease.fence_verdict(placed=placed if placed is not None else 0.0,
                                                                 missing_since=since) is True

            await wait_until(judged_fenced, timeout=60, what="status sync judging the gang killed by the agent")
            reconciled = 0
            reconcile = status_sync.reconcile

            async def counted(job_uid: str) -> None:
                nonlocal reconciled
                await reconcile(job_uid)
                reconciled += job_uid == uid

            status_sync.reconcile = counted  # type: ignore[method-assign]

            async def reconciled_or_requeued() -> bool:
                return reconciled >= 3 or bool(history(await env.api.get(NS, "in-flight"), "Fenced"))

            try:
                await wait_until(reconciled_or_requeued, timeout=30, what="three more reconciles of the gang")
            finally:
                status_sync.reconcile = reconcile  # type: ignore[method-assign]
            waiting = await env.api.get(NS, "in-flight")
            assert not history(waiting, "Fenced") and placement_of(waiting)["epoch"] == epoch, waiting["status"]
            parts.in_flight.end(uid)  # the dispatch returned: now the requeue goes ahead
            held = False
            back = await env.api.wait_job(NS, "in-flight", lambda j: bool(history(j, "Fenced"))
                                          and phase(j) == "Running", timeout=60, what="requeued and running again")
    finally:
        if held:
            parts.in_flight.end(uid)
        stop.set()
        await agent.close()
    (fenced,) = history(back, "Fenced")
    assert fenced["cluster"] == HOME and fenced["epoch"] == epoch
    assert placement_of(back)["epoch"] == epoch + 1


async def test_a_gang_the_agent_killed_before_admission_is_requeued_and_its_cluster_not_blamed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gang placed and created in HOME but not admitted yet is deleted by HOME's fence agent (the hub's
    lease there expired: a partition here, a stall on a loaded machine in CI). Its objects are gone before
    admission, so status sync does not judge it; the stuck-gang loop pulls it back, and now asks the fencing
    lease first: the agent did it, so the gang is requeued as Fenced and HOME is not excluded (it used to be
    excluded for stuck_exclusion_seconds, as if the member had refused the gang)."""
    async with lifecycle_env(tmp_path, [HOME, FALLBACK], run_seconds=None, cluster_loss_grace_seconds=120.0,
                             member_lease_duration_seconds=2.0, member_lease_margin_seconds=1.0,
                             stuck_timeout_seconds=6.0, stuck_exclusion_seconds=600.0) as env:
        home = env.fed.sims[HOME]
        agent = await FenceAgent.from_kubeconfig(home.write_agent_kubeconfig(tmp_path / "home-agent.kubeconfig"),
                                                 hub_identity="federator", poll_seconds=0.2)
        stop = asyncio.Event()
        hold = asyncio.Event()
        env.hold_dispatches(HOME, hold, monkeypatch)
        try:
            async with _tasks(agent.run(stop)):
                await wait_until(lambda: agent.counters.renewals_seen >= 2, timeout=30,
                                 what="the agent seeing renewals")
                await env.api.submit(_job("unadmitted"))
                first = await env.api.wait_job(NS, "unadmitted", lambda j: placement_of(j).get("cluster") == HOME,
                                               timeout=40, what="placed in HOME")
                epoch = placement_of(first)["epoch"]
                # local load takes HOME's GPUs before the gang's objects arrive: created, never admitted
                nodes = (await home.storage.list(kinds.NODES)).items
                for index, node in enumerate(n["metadata"]["name"] for n in nodes
                                             if n["status"]["allocatable"].get("nvidia.com/gpu")):
                    await home.storage.create(kinds.PODS, local_pod(node, index), namespace="default")
                hold.set()

                async def created() -> bool:
                    pods = (await home.storage.list(kinds.PODS, label_selector=LABEL_HUB)).items
                    return len(pods) == 2
                await wait_until(created, timeout=30, what="the gang's pods created in HOME")
                home.faults.start_partition(None, source=home.token)
                await wait_until(lambda: agent.counters.pods_deleted >= 2, timeout=30, what="the agent fencing")
                home.faults.end_partition()
                back = await env.api.wait_job(NS, "unadmitted", lambda j: bool(history(j, "Fenced"))
                                              and placement_of(j).get("epoch", 0) > epoch, timeout=60,
                                              what="requeued as Fenced and placed again")
        finally:
            stop.set()
            await agent.close()
        (fenced,) = history(back, "Fenced")
        assert fenced["cluster"] == HOME and fenced["epoch"] == epoch
        assert not history(back, "ClusterExcluded") and not back["status"]["placement"].get("excludedClusters")
        assert back["status"].get("requeues", 0) == 0
