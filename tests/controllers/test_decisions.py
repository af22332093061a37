"""The placement loop's job status writes (controllers/decisions.py), built without a hub: in-memory stored
jobs behind a fake `JobStore`, a recording Event sink, a fake clock.

A decision is written ahead of dispatch (Placed, epoch + 1, why-not rows, QuotaReserved for a queued job)
only while the job still waits (never placed twice, never while deleted or suspended); a gang that fits
nowhere gets Pending and Schedulable=False once per reason set (refreshed only after a while); a
suspended job is recorded as Suspended; a job not even tried gets its reason once."""

from __future__ import annotations

from typing import Any

from federator.controllers.decisions import DecisionWriter, queued, to_suspend
from federator.controllers.jobs import PHASE_PENDING, PHASE_PLACED, PHASE_SUSPENDED, current_placement, phase_of
from federator.placement import Decision, PodAssignment, Rejection, Unplaced

from .placement_parts_support import T0, Clock, Events, Jobs, snapshot, training_job


def writer(*jobs: dict[str, Any]) -> tuple[DecisionWriter, Jobs, Events, list[str]]:
    store, events, remembered = Jobs(), Events(), []
    store.add(*jobs)
    records = DecisionWriter(store, events=events, remember=lambda job: remembered.append(job["metadata"]["name"]),
                             unplaced_refresh_seconds=5.0, clock=Clock())
    return records, store, events, remembered


def decision(uid: str = "uid-a", *, queue: str = "", borrowed: bool = False) -> Decision:
    return Decision(gang_key="team/a", gang_uid=uid, cluster="c1", gpu_model="A100",
                    assignment=(PodAssignment("worker", 0, "n-0"), PodAssignment("worker", 1, "n-1")),
                    resource_version="42", decided_at=T0,
                    why_not={"c2": Rejection(cluster="c2", filter="capacity", code="Insufficient", message="full")},
                    scores=(), queue=queue, borrowed=borrowed)


def unplaced(code: str = "Insufficient") -> Unplaced:
    return Unplaced(gang_key="team/a", gang_uid="uid-a",
                    why_not={"c1": Rejection(cluster="c1", filter="capacity", code=code, message="no room")})


def conditions(job: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in job["status"].get("conditions") or ()}


async def test_a_decision_is_written_ahead_with_the_next_epoch() -> None:
    records, store, events, _ = writer(training_job("a", phase="Pending", epoch=3))
    stored = await records.write_decision(store.stored("uid-a"), decision(queue="vision", borrowed=True))
    assert stored is not None and phase_of(stored) == PHASE_PLACED
    assert current_placement(stored) == ("c1", 4)
    placement = stored["status"]["placement"]
    assert placement["decisionResourceVersion"] == "42"
    assert placement["whyNot"] == [{"cluster": "c2", "filter": "capacity", "reason": "Insufficient",
                                    "message": "full"}]
    assert conditions(stored)["Schedulable"] == ("True", "Placed")
    assert conditions(stored)["QuotaReserved"] == ("True", "Borrowed")
    assert stored["status"]["history"][-1]["event"] == "Placed"
    assert events.reasons() == [("a", "Placed")]


async def test_a_job_that_no_longer_waits_is_never_placed_again() -> None:
    placed = training_job("a", phase="Running", cluster="c2", epoch=1)
    records, store, events, _ = writer(placed)
    assert await records.write_decision(placed, decision()) is None
    assert current_placement(store.stored("uid-a")) == ("c2", 1) and events.recorded == []
    for changed in ({"metadata": {"deletionTimestamp": "2027-01-01T00:00:00Z"}}, {"spec": {"suspend": True}}):
        job = training_job("a", phase="Pending")
        for part, values in changed.items():
            job[part].update(values)
        records, store, events, _ = writer(job)
        assert await records.write_decision(job, decision()) is None
        assert phase_of(store.stored("uid-a")) == PHASE_PENDING


async def test_a_failed_write_places_nothing() -> None:
    records, store, _, _ = writer(training_job("a", phase="Pending"))
    store.failing.add("uid-a")
    assert await records.write_decision(store.stored("uid-a"), decision()) is None


async def test_fits_nowhere_is_written_once_per_reason_and_refreshed_later() -> None:
    job = training_job("a")
    records, store, events, remembered = writer(job)
    snaps = {"c1": snapshot("c1")}
    await records.record_unplaced(job, unplaced(), snapshots=snaps, now=T0)
    stored = store.stored("uid-a")
    assert phase_of(stored) == PHASE_PENDING and conditions(stored)["Schedulable"] == ("False", "NoClusterFits")
    assert stored["status"]["history"][-1]["event"] == "Unschedulable"
    assert len(store.writes) == 1 and remembered == ["a"] and events.reasons() == [("a", "NoClusterFits")]
    # the same reasons again: not written (the stored rows match), nor soon after with the job as it was
    await records.record_unplaced(stored, unplaced(), snapshots=snaps, now=T0 + 1)
    await records.record_unplaced(job, unplaced(), snapshots=snaps, now=T0 + 1)
    assert len(store.writes) == 1
    # a new reason: written at once, with a history entry for the change
    await records.record_unplaced(stored, unplaced("NodeNotReady"), snapshots=snaps, now=T0 + 2)
    assert len(store.writes) == 2


async def test_no_cluster_at_all_says_so() -> None:
    job = training_job("a")
    records, store, _, _ = writer(job)
    await records.record_unplaced(job, Unplaced(gang_key="team/a", gang_uid="uid-a", why_not={}), snapshots={},
                                  now=T0)
    assert conditions(store.stored("uid-a"))["Schedulable"] == ("False", "NoClusters")


async def test_a_suspended_job_is_recorded_and_resumes_through_the_queue() -> None:
    job = training_job("a", phase="Pending")
    job["spec"]["suspend"] = True
    assert to_suspend(job) and not queued(job)
    records, store, events, _ = writer(job)
    assert await records.record_suspended(job, now=T0) is True
    stored = store.stored("uid-a")
    assert phase_of(stored) == PHASE_SUSPENDED and conditions(stored)["Suspended"] == ("True", "Suspended")
    assert events.reasons() == [("a", "Suspended")] and not to_suspend(stored)
    stored["spec"]["suspend"] = False
    assert queued(stored)
    # placed again once resumed: its Suspended condition turns False
    placed = await records.write_decision(stored, decision())
    assert placed is not None and conditions(placed)["Suspended"] == ("False", "Resumed")
    store.failing.add("uid-a")
    assert await records.record_suspended(job, now=T0) is False


async def test_a_job_not_even_tried_gets_its_reason_once() -> None:
    job = training_job("a")
    records, store, events, _ = writer(job)
    await records.unschedulable(job, "InvalidSpec", "spec.roles[0]: bad", now=T0)
    await records.unschedulable(job, "InvalidSpec", "spec.roles[0]: bad", now=T0 + 1)
    assert len(store.writes) == 1 and conditions(store.stored("uid-a"))["Schedulable"] == ("False", "InvalidSpec")
    assert events.reasons() == [("a", "InvalidSpec")]
