"""Failed dispatches: forget the reservation, clean up what was partly created, requeue with backoff,
and succeed once the member accepts the gang again. Real SimClusters and a real hub.

- a member outage (503 from every API request, via the simulator's admin fault API) during dispatch:
  the job goes back to Pending with a DispatchFailed history entry, is retried with backoff, and lands
  whole once the outage ends, at a later epoch, with no object of a failed epoch left behind;
- a multi-object dispatch that fails half way (a foreign pod already holds one of the gang's pod names):
  what this epoch created is deleted, the reservation is forgotten, the job is requeued; once the
  foreign pod is gone the next epoch lands whole;
- a dispatch with a stale job (a newer epoch already recorded) touches nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from federator.clusters.client import PODS
from federator.controllers.dispatch import Dispatcher
from federator.controllers.jobs import reservations
from federator.delegation.adapter import LABEL_EPOCH, pod_name
from federator.hub.app import hub_controllers

from ..hub.hubtest_support import RunningHub, start_hub
from .jobtest_support import Federation, HubApi, condition, fast_settings, gpu_job, phase, placement_of, wait_until


class Env:
    def __init__(self, hub: RunningHub, api: HubApi, fed: Federation) -> None:
        self.hub, self.api, self.fed = hub, api, fed

    @property
    def dispatcher(self) -> Dispatcher:
        return self.hub.context.parts.dispatcher


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    fed = Federation(tmp_path / "members")
    await fed.start(["cloud-eth-h100", "cloud-small"])
    # health must not turn the cluster away during the outage: the dispatch itself has to fail
    settings = fast_settings(tmp_path / "hub" / "state", unreachable_after_failures=1000,
                             watch_loss_grace_seconds=600.0)
    try:
        async with start_hub(tmp_path / "hub", controllers=hub_controllers(), settings=settings) as hub:
            api = await HubApi.connect(hub.kubeconfigs["admin"])
            try:
                for body in fed.registrations.values():
                    await api.register(body)
                for name in fed.registrations:
                    await api.wait_cluster_ready(name)
                yield Env(hub, api, fed)
            finally:
                await api.close()
    finally:
        await fed.stop()


def _events(job: dict[str, Any]) -> list[str]:
    return [h["event"] for h in (job.get("status") or {}).get("history") or ()]


async def test_member_outage_requeues_with_backoff_then_succeeds(env: Env) -> None:
    # long enough to be on when the first dispatch arrives however slow the machine; ended below
    await env.fed.fault("cloud-eth-h100", "outage", {"seconds": 60.0, "mode": "503"})
    created = await env.api.submit(gpu_job("during-outage", workers=3, gpus=8, models=["H100"]))
    uid = created["metadata"]["uid"]
    # the failed dispatch is recorded: back to Pending, a history entry saying what it waits for
    failed = await env.api.wait_job("team-a", "during-outage", lambda j: "Requeued" in _events(j),
                                    timeout=60, what="a requeue after the failed dispatch")
    requeued = [h for h in failed["status"]["history"] if h["event"] == "Requeued"][0]
    assert "dispatch to cloud-eth-h100 failed" in requeued["message"] and "placing again in" in requeued["message"]
    assert "503" in requeued["message"]
    await env.fed.sims["cloud-eth-h100"].faults.end_outage()
    # after the outage the job lands whole, at a later epoch than the first attempt
    job = await env.api.wait_job(
        "team-a", "during-outage", lambda j: (condition(j, "Dispatched") or {}).get("status") == "True",
        timeout=30, what="dispatched after the outage")
    assert placement_of(job)["cluster"] == "cloud-eth-h100"
    epoch = placement_of(job)["epoch"]
    assert epoch >= 2
    assert phase(job) in ("Placed", "Admitted", "Running")
    placed_epochs = [h["epoch"] for h in job["status"]["history"] if h["event"] == "Placed"]
    assert placed_epochs == list(range(1, epoch + 1))  # one decision per attempt, epochs strictly increasing
    where = await env.fed.where(uid)
    assert list(where) == ["cloud-eth-h100"]
    groups, pods = where["cloud-eth-h100"]
    assert len(groups) == 1 and len(pods) == 3
    assert {o["metadata"]["labels"][LABEL_EPOCH] for o in groups + pods} == {str(epoch)}
    assert env.hub.metrics.dispatches.labels(cluster="cloud-eth-h100", result="failed")._value.get() >= 1
    assert env.dispatcher.retries.attempts(uid) == 0  # reset by the success


async def test_half_done_dispatch_is_cleaned_up_forgotten_and_requeued(env: Env) -> None:
    # submit suspended to learn the uid, then block one of the gang's pod names with a foreign pod
    created = await env.api.submit(gpu_job("blocked", workers=4, gpus=4, models=["H100"], suspend=True))
    uid = created["metadata"]["uid"]
    member = await env.fed.client("cloud-eth-h100")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    from federator.controllers.dispatch import NAMESPACES

    await member.create(NAMESPACES, namespace, namespace=None)
    blocker = pod_name(job_name="blocked", job_uid=uid, role="worker", index=3)
    await member.create(PODS, {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": blocker, "namespace": "team-a", "labels": {"app": "other"}},
                               "spec": {"schedulerName": "default-scheduler",
                                        "containers": [{"name": "c", "image": "busybox"}]}}, namespace="team-a")
    await env.api.patch("team-a", "blocked", {"spec": {"suspend": False}})

    failed = await env.api.wait_job("team-a", "blocked", lambda j: "Requeued" in _events(j),
                                    what="a requeue after the half-done dispatch")
    message = [h for h in failed["status"]["history"] if h["event"] == "Requeued"][0]["message"]
    assert "is not this job's" in message, message
    # this epoch's objects are gone again: only the foreign pod is left, and nothing is reserved
    async def cleaned() -> bool:
        groups, pods = await env.fed.member_objects("cloud-eth-h100", uid)
        return not groups and not pods

    await wait_until(cleaned, what="the failed epoch's objects deleted")
    assert (await member.get(PODS, namespace="team-a", name=blocker))["metadata"]["labels"] == {"app": "other"}
    # the reservation is forgotten (unless a new attempt already holds one for a newer epoch)
    held = reservations(env.hub.context).get(uid)
    current = await env.api.get("team-a", "blocked")
    assert held is None or placement_of(current).get("epoch", 0) > 1

    # the foreign pod goes away: the next attempt lands whole
    await member.delete(PODS, namespace="team-a", name=blocker, grace_period_seconds=0)
    job = await env.api.wait_job(
        "team-a", "blocked", lambda j: (condition(j, "Dispatched") or {}).get("status") == "True",
        timeout=30, what="dispatched once the name is free")
    epoch = placement_of(job)["epoch"]
    assert epoch >= 2

    async def whole() -> bool:
        groups, pods = await env.fed.member_objects("cloud-eth-h100", uid)
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return len(groups) == 1 and len(live) == 4 and all(
            o["metadata"]["labels"][LABEL_EPOCH] == str(epoch) for o in groups + live)

    await wait_until(whole, what="the gang whole at the new epoch")


async def test_a_stale_dispatch_touches_nothing(env: Env) -> None:
    created = await env.api.submit(gpu_job("fresh", workers=2, gpus=4, models=["H100"]))
    job = await env.api.wait_job(
        "team-a", "fresh", lambda j: (condition(j, "Dispatched") or {}).get("status") == "True",
        what="dispatched")
    epoch = placement_of(job)["epoch"]
    before = await env.fed.where(created["metadata"]["uid"])
    # an outdated dispatcher (e.g. a deposed hub's) at an older epoch: the PodGroup name differs per epoch,
    # but the pods hold their names and belong to a newer epoch, so it must back off and delete nothing
    stale = await env.dispatcher.dispatch(job, cluster="cloud-eth-h100", epoch=epoch - 1 if epoch > 1 else 0)
    assert not stale.ok and stale.outdated
    after = await env.fed.where(created["metadata"]["uid"])
    live_before = sorted(p["metadata"]["uid"] for p in before["cloud-eth-h100"][1])
    live_after = sorted(p["metadata"]["uid"] for p in after["cloud-eth-h100"][1])
    assert live_after == live_before
    # the job itself is untouched (still at its epoch, still dispatched)
    current = await env.api.get("team-a", "fresh")
    assert placement_of(current)["epoch"] == epoch and "Requeued" not in _events(current)


async def test_dispatch_waits_for_the_epoch_fence_of_a_returning_cluster(env: Env) -> None:
    import asyncio

    from federator.controllers.cleanup import cluster_fenced, fence_pending
    from federator.controllers.dispatch import DispatchError

    await wait_until(lambda: cluster_fenced(env.hub.context, "cloud-small"), what="the GC's first pass")
    await env.dispatcher.wait_for_fence("cloud-small", wait=0.0)  # holds: no wait at all
    # a cluster whose fence is down (out of contact, or never passed by the GC): the dispatch waits,
    # then fails (retryable, so the job is requeued), never creating anything beside an older copy
    fence = env.hub.context.parts.fence.held
    assert fence is not None  # the GC runs
    # a cluster in contact whose fence is down (its GC pass after a reconnection is due): the dispatch
    # waits for it, and goes on as soon as the fence holds
    fence["cloud-small"] = False
    assert fence_pending(env.hub.context, "cloud-small")
    waiting = asyncio.create_task(env.dispatcher.wait_for_fence("cloud-small", wait=30.0))
    await wait_until(lambda: fence.get("cloud-small") is True, what="the GC to raise the fence again")
    await asyncio.wait_for(waiting, 10)
    # if the fence does not rise in time, the dispatch fails (retryable: the job is requeued), having
    # created nothing
    gc = env.hub.context.parts.running.gc
    assert gc is not None
    tick = gc.tick
    paused_ticks = asyncio.Event()

    async def paused() -> None:
        paused_ticks.set()

    gc.tick = paused  # the GC pass never comes
    try:
        await asyncio.wait_for(paused_ticks.wait(), 10)  # any pass in flight before the pause has ended
        fence["cloud-small"] = False
        with pytest.raises(DispatchError, match="epoch fence does not hold") as failed:
            await env.dispatcher.wait_for_fence("cloud-small", wait=0.3)
        assert failed.value.retryable
    finally:
        gc.tick = tick
    # a cluster out of contact is not waited for: its fence cannot rise until it returns
    assert not fence_pending(env.hub.context, "not-registered")
    await env.dispatcher.wait_for_fence("not-registered", wait=30.0)


async def test_a_dispatch_that_waited_for_the_fence_creates_nothing_once_the_job_moved_on(env: Env) -> None:
    """Chaos seed 1657557937: a restarted hub's re-dispatch of a Placed job checked the decision, then waited
    for a returning cluster's fences; meanwhile the fence agent there killed the gang and the job was
    requeued (and placed at epoch 2 elsewhere). The waiting dispatch then created the fenced epoch-1 gang
    again: two epochs running at once. It must read the stored decision again after its waits."""
    import asyncio
    import time

    from federator.controllers.jobs import job_ref, requeue, update_job_status

    created = await env.api.submit(gpu_job("moved-on", workers=2, gpus=4, models=["H100"]))
    uid = created["metadata"]["uid"]
    job = await env.api.wait_job(
        "team-a", "moved-on", lambda j: (condition(j, "Dispatched") or {}).get("status") == "True",
        what="dispatched")
    cluster, epoch = placement_of(job)["cluster"], placement_of(job)["epoch"]
    assert cluster == "cloud-eth-h100"
    fence = env.hub.context.parts.fence.held
    gc = env.hub.context.parts.running.gc
    assert fence is not None and gc is not None
    tick = gc.tick
    paused_ticks = asyncio.Event()

    async def paused() -> None:
        paused_ticks.set()

    gc.tick = paused  # no GC pass: neither raises the fence nor collects the old epoch behind the test's back
    try:
        await asyncio.wait_for(paused_ticks.wait(), 10)
        fence[cluster] = False  # the cluster is back in contact, its GC pass due: dispatches there wait
        # the re-dispatch of the stored decision (as a restarted hub's `recover` makes, having checked it)
        stale = asyncio.create_task(env.dispatcher.dispatch(job, cluster=cluster, epoch=epoch, decision_stored=True))
        await wait_until(lambda: uid in env.dispatcher.in_flight, what="the dispatch in flight")
        # meanwhile the member's fence agent deletes the gang and the job is requeued (status sync's Fenced)
        ref = job_ref(job)

        def fenced(stored: dict[str, Any]) -> dict[str, Any] | None:
            requeue(stored["status"], reason="Fenced", message="test: killed by the fence agent", now=time.time(),
                    job=ref.key, count=False)
            return stored

        assert await update_job_status(env.hub.context, namespace=ref.namespace, name=ref.name, mutate=fenced,
                                       uid=uid) is not None
        member = await env.fed.client(cluster)
        for pod in (await env.fed.member_objects(cluster, uid))[1]:
            await member.delete(PODS, namespace="team-a", name=pod["metadata"]["name"], grace_period_seconds=0)

        async def pods_gone() -> bool:
            return not (await env.fed.member_objects(cluster, uid))[1]

        await wait_until(pods_gone, what="the fenced gang's pods gone")
        assert not stale.done()  # still waiting for the fence
        fence[cluster] = True  # the fence holds again: the waiting dispatch goes on
        result = await asyncio.wait_for(stale, 30)
        assert not result.ok and result.outdated, result
        # nothing of the requeued epoch came back: no pod, and its PodGroup is taken away
        groups, pods = await env.fed.member_objects(cluster, uid)
        assert [p["metadata"]["name"] for p in pods if p["metadata"]["labels"][LABEL_EPOCH] == str(epoch)] == []
        assert [g for g in groups if g["metadata"]["labels"][LABEL_EPOCH] == str(epoch)
                and not g["metadata"].get("deletionTimestamp")] == []
    finally:
        gc.tick = tick
    # the job goes on at the next epoch, whole and alone
    moved = await env.api.wait_job(
        "team-a", "moved-on", lambda j: placement_of(j).get("epoch", 0) > epoch
        and (condition(j, "Dispatched") or {}).get("status") == "True", timeout=30, what="dispatched at the next epoch")

    async def only_new_epoch() -> bool:
        where = await env.fed.where(uid)
        live = [o for groups, pods in where.values() for o in groups + pods
                if not o["metadata"].get("deletionTimestamp")]
        return bool(live) and {o["metadata"]["labels"][LABEL_EPOCH] for o in live} == {
            str(placement_of(moved)["epoch"])}

    await wait_until(only_new_epoch, what="only the new epoch's objects in the members")
