"""Preemption (controllers/preemption.py), built without a hub: in-memory stored jobs behind a fake
`JobStore`, a recording fake of dispatch's member writes and of the Event sink, a fake clock.

A decision's victims are marked (not running, never chosen again) until its task ends; `make_room` reads
the preemptor again and does nothing if it no longer waits; shrinks go first (status.replicas lowered
within the minimum, history Resized, Event Shrunk, then dispatch deletes the planned pods); each victim is
requeued (fenced on the placement the decision saw: previous copy recorded, QuotaReserved False, Event
Preempted, the requeue counted) before dispatch deletes its gang; a refused shrink or a failed eviction
write drops the preemption; a member that cannot delete does not."""

from __future__ import annotations

from typing import Any

from federator.controllers.jobs import PHASE_PENDING, current_placement, phase_of
from federator.controllers.preemption import Evictor
from federator.controllers.queue_accounting import Preempting, QueueAccounting
from federator.controllers.reservations import ReservationLedger
from federator.obs import Metrics
from federator.placement import Decision, PodAssignment, Preemption, Profile, Shrink, Victim, VictimReason

from .placement_parts_support import (T0, Clock, Events, GangIndex, Jobs, Members, Queues, QueueSink, Views,
                                      member_pods, training_job)


class Parts:
    def __init__(self, *jobs: dict[str, Any]) -> None:
        self.store = Jobs()
        self.store.add(*jobs)
        self.jobs = self.store.by_uid
        self.active = {uid for uid, job in self.jobs.items() if job["status"]["placement"].get("cluster")}
        self.members = Members()
        self.events = Events()
        self.metrics = Metrics()
        self.views = Views()
        self.preempting = Preempting()
        self.remembered: list[str] = []
        self.accounting = QueueAccounting(queues=Queues(), queue_status=QueueSink(), profile=Profile(),
                                          ledger=ReservationLedger(), members=self.views, preempting=self.preempting,
                                          jobs=self.jobs, active=self.active, queued=set(), clock=Clock())
        self.evictor = Evictor(store=self.store, members=self.members, events=self.events, metrics=self.metrics,
                               accounting=self.accounting, preempting=self.preempting, jobs=self.jobs,
                               remember=lambda job: self.remembered.append(job["metadata"]["name"]), clock=Clock())


def victim(uid: str, key: str) -> Victim:
    return Victim(uid=uid, key=key, queue="vision", priority=1, borrowed=False, reason=VictimReason.LOWER_PRIORITY)


def decision(*, victims: tuple[Victim, ...] = (), shrinks: tuple[Shrink, ...] = ()) -> Decision:
    return Decision(gang_key="team/p", gang_uid="uid-p", cluster="c1", gpu_model="A100",
                    assignment=(PodAssignment("worker", 0, "n-0"),), resource_version="5", decided_at=T0, why_not={},
                    scores=(), queue="vision",
                    preemption=Preemption(cluster="c1", gpu_model="A100", victims=victims, nodes=("n-0",),
                                          shrinks=shrinks))


def preemptor() -> dict[str, Any]:
    return training_job("p", phase=PHASE_PENDING, queue="vision", priority=10)


def elastic_parts() -> tuple[Parts, dict[str, Any], list[dict[str, Any]]]:
    """A preemptor and an elastic gang e (worker 4, minimum 2) running at (c1, 1) with pods 0..3 listed."""
    gang = training_job("e", phase="Running", cluster="c1", epoch=1, workers=4, low=2, high=4, queue="vision")
    parts = Parts(preemptor(), gang)
    pods = member_pods(gang, epoch=1, indices=[0, 1, 2, 3])
    parts.views.indexes["c1"] = GangIndex(pods)
    parts.accounting.running({})  # the cycle's view of the running gangs, which the shrink plan names pods of
    return parts, gang, pods


def shrink_of(pods: list[dict[str, Any]], *indices: int) -> Shrink:
    return Shrink(uid="uid-e", key="team/e", queue="vision", priority=1, borrowed=False,
                  reason=VictimReason.LOWER_PRIORITY, pods=tuple(pods[i]["metadata"]["name"] for i in indices))


async def test_a_victim_is_requeued_before_dispatch_deletes_its_gang() -> None:
    parts = Parts(preemptor(), training_job("v", phase="Running", cluster="c1", epoch=3, queue="vision"))
    d = decision(victims=(victim("uid-v", "team/v"),))
    victims = parts.evictor.mark(d)
    assert parts.preempting.evicting == {"uid-v": ("c1", 3)}
    assert parts.accounting.running({}) == []  # a victim no longer counts as running

    assert await parts.evictor.make_room(parts.jobs["uid-p"], d, victims) is True
    evicted = parts.store.stored("uid-v")
    status = evicted["status"]
    assert phase_of(evicted) == PHASE_PENDING and current_placement(evicted) == (None, 3)
    assert status["placement"]["previous"] == {"cluster": "c1", "epoch": 3}
    assert status["history"][-2]["event"] == "Preempted"
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions["Schedulable"] == ("False", "Preempted") and conditions["QuotaReserved"] == ("False", "Preempted")
    assert ("v", "Preempted") in parts.events.reasons()
    assert parts.members.calls == [("delete_previous", "uid-v", {"cluster": ""})]
    assert parts.remembered == ["v"]
    assert parts.metrics.registry.get_sample_value("federator_job_requeues_total", {"reason": "Preempted"}) == 1

    parts.evictor.done(d, victims)
    assert parts.preempting.evicting == {}


async def test_nothing_is_evicted_when_the_preemptor_no_longer_waits() -> None:
    placed = training_job("p", phase="Placed", cluster="c2", epoch=1)
    parts = Parts(placed, training_job("v", phase="Running", cluster="c1", epoch=3))
    d = decision(victims=(victim("uid-v", "team/v"),))
    assert await parts.evictor.make_room(placed, d, parts.evictor.mark(d)) is False
    assert phase_of(parts.store.stored("uid-v")) == "Running" and parts.members.calls == []
    del parts.store.by_uid["uid-p"]  # deleted meanwhile: it cannot be read
    assert await parts.evictor.make_room(placed, d, parts.evictor.mark(d)) is False
    assert parts.members.calls == []


async def test_a_victim_that_moved_on_is_left_alone_and_a_failed_write_drops_the_preemption() -> None:
    parts = Parts(preemptor(), training_job("v", phase="Running", cluster="c1", epoch=3))
    d = decision(victims=(victim("uid-v", "team/v"),))
    victims = parts.evictor.mark(d)
    parts.store.stored("uid-v")["status"]["placement"]["epoch"] = 4  # placed again since the decision
    assert await parts.evictor.make_room(parts.jobs["uid-p"], d, victims) is True
    assert parts.members.calls == [] and current_placement(parts.store.stored("uid-v")) == ("c1", 4)

    parts = Parts(preemptor(), training_job("v", phase="Running", cluster="c1", epoch=3))
    parts.store.failing.add("uid-v")
    victims = parts.evictor.mark(d)
    assert await parts.evictor.make_room(parts.jobs["uid-p"], d, victims) is False
    assert parts.members.calls == []


async def test_a_member_that_cannot_delete_leaves_the_eviction_done() -> None:
    parts = Parts(preemptor(), training_job("v", phase="Running", cluster="c1", epoch=3))
    parts.members.fail = True
    d = decision(victims=(victim("uid-v", "team/v"),))
    assert await parts.evictor.make_room(parts.jobs["uid-p"], d, parts.evictor.mark(d)) is True
    assert phase_of(parts.store.stored("uid-v")) == PHASE_PENDING  # the GC deletes what is left


async def test_a_shrink_lowers_the_size_then_asks_dispatch_to_delete_its_pods() -> None:
    parts, _, pods = elastic_parts()
    d = decision(shrinks=(shrink_of(pods, 3, 2),))
    victims = parts.evictor.mark(d)
    assert victims == [] and set(parts.preempting.shrinking["uid-e"].pods) == {pods[2]["metadata"]["name"],
                                                                                pods[3]["metadata"]["name"]}
    assert await parts.evictor.make_room(parts.jobs["uid-p"], d, victims) is True
    status = parts.store.stored("uid-e")["status"]
    assert status["replicas"] == {"worker": 2}
    resized = status["history"][-1]
    assert (resized["event"], resized["from"], resized["to"], resized["reason"]) == (
        "Resized", {"worker": 4}, {"worker": 2}, "Preempted")
    assert "shrunk worker 4 -> 2: room for team/p" in resized["message"]
    assert ("e", "Shrunk") in parts.events.reasons()
    assert parts.members.calls == [("delete_pods", "uid-e", {"cluster": "c1", "epoch": 1, "names": sorted(
        [pods[2]["metadata"]["name"], pods[3]["metadata"]["name"]])})]
    parts.evictor.done(d, victims)
    assert parts.preempting.shrinking == {}


async def test_a_shrink_of_a_gang_the_members_operator_runs_resizes_its_member_copy() -> None:
    """Operator mode: the size is written as for any gang, then dispatch patches the member copy (its operator
    deletes the pods above the count); no pod is deleted by the hub."""
    parts, _, pods = elastic_parts()
    parts.members.operated.add("uid-e")
    d = decision(shrinks=(shrink_of(pods, 3, 2),))
    victims = parts.evictor.mark(d)
    assert await parts.evictor.make_room(parts.jobs["uid-p"], d, victims) is True
    assert parts.store.stored("uid-e")["status"]["replicas"] == {"worker": 2}
    assert parts.members.calls == [("resize_member_copy", "uid-e", {"cluster": "c1", "epoch": 1,
                                                                    "replicas": {"worker": 2}})]


async def test_a_shrink_below_the_minimum_or_not_of_the_highest_pods_is_refused() -> None:
    parts, _, pods = elastic_parts()
    d = decision(shrinks=(shrink_of(pods, 3, 2, 1),), victims=(victim("uid-v", "team/v"),))
    assert await parts.evictor.make_room(parts.jobs["uid-p"], d, parts.evictor.mark(d)) is False
    assert parts.store.stored("uid-e")["status"]["replicas"] == {"worker": 4} and parts.members.calls == []

    parts, _, pods = elastic_parts()
    d = decision(shrinks=(shrink_of(pods, 1),))  # pod 1 is not the highest index
    assert await parts.evictor.make_room(parts.jobs["uid-p"], d, parts.evictor.mark(d)) is False
    assert parts.store.stored("uid-e")["status"]["replicas"] == {"worker": 4} and parts.members.calls == []


async def test_a_shrink_naming_pods_the_loop_does_not_know_is_decided_again() -> None:
    parts, _, pods = elastic_parts()
    unknown = Shrink(uid="uid-e", key="team/e", queue="vision", priority=1, borrowed=False,
                     reason=VictimReason.LOWER_PRIORITY, pods=("e-worker-9",))
    d = decision(shrinks=(unknown,))
    victims = parts.evictor.mark(d)
    assert dict(parts.preempting.shrinking["uid-e"].pods) == {}
    assert await parts.evictor.make_room(parts.jobs["uid-p"], d, victims) is False
    assert parts.store.writes == [] and parts.members.calls == []
