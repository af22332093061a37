"""Elastic resizing (controllers/elastic.py), built without a hub: in-memory stored jobs behind a fake
`JobStore`, snapshots, a fake of status sync's pod index, a recording fake of dispatch's member writes,
a fake clock.

Trim and fill: a settled elastic gang is brought to its status.replicas through dispatch (the highest
indices deleted, the lowest free ones created), and left alone while a pod of it failed, finished or is
being deleted, while it is in flight (no creates) or being shrunk by a decision. Grow: room no pending job
can use grows a gang past its cooldown: the growth is assumed into the reservation ledger, written
(status.replicas, history Resized reason Grown, an Event), then dispatch creates the new pods; a refused
write forgets the reservation; a gang in its cooldown does not grow."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from federator.apis.jobkinds import JOB_KINDS
from federator.controllers.elastic import ElasticResizer
from federator.controllers.jobs import InFlight
from federator.controllers.queue_accounting import Preempting, QueueAccounting, ShrinkPlan
from federator.controllers.reservations import ReservationLedger
from federator.delegation.adapter import pod_name
from federator.obs import Metrics
from federator.placement import Profile, ReservationKind
from federator.placement.snapshot import ClusterSnapshot

from .placement_parts_support import (T0, Amounts, Clock, Events, GangIndex, Jobs, Members, Queues, QueueSink, Views,
                                      member_pods, snapshot, training_job)


class Parts:
    def __init__(self, *jobs: dict[str, Any], snapshots: dict[str, ClusterSnapshot] | None = None) -> None:
        self.store = Jobs()
        self.store.add(*jobs)
        self.jobs = self.store.by_uid
        self.active = {uid for uid, job in self.jobs.items() if job["status"]["placement"].get("cluster")}
        self.queued = set(self.jobs) - self.active
        self.members = Members()
        self.events = Events()
        self.views = Views()
        self.ledger = ReservationLedger()
        self.preempting = Preempting()
        self.inflight = InFlight()
        self.clock = Clock()
        self.snapshots = snapshots or {}
        self.spawned: list[tuple[str, Coroutine[Any, Any, None]]] = []
        self.accounting = QueueAccounting(queues=Queues(), queue_status=QueueSink(), profile=Profile(),
                                          ledger=self.ledger, members=self.views, preempting=self.preempting,
                                          jobs=self.jobs, active=self.active, queued=self.queued, clock=self.clock)
        self.elastic = ElasticResizer(
            store=self.store, members=self.members, views=self.views, events=self.events, metrics=Metrics(),
            accounting=self.accounting, preempting=self.preempting, ledger=self.ledger, profile=Profile(),
            snapshots=lambda: self.snapshots, jobs=self.jobs, active=self.active, queued=self.queued,
            inflight=self.inflight, remember=lambda job: None,
            spawn=lambda coro, name: self.spawned.append((name, coro)), tick_seconds=5.0, cooldown_seconds=60.0,
            clock=self.clock)

    async def run_spawned(self) -> list[str]:
        names = []
        while self.spawned:
            name, coro = self.spawned.pop(0)
            await coro
            names.append(name)
        return names


def elastic_gang(*, replicas: int, low: int = 1, high: int = 6, placed_at: float = T0 - 600) -> dict[str, Any]:
    return training_job("e", phase="Running", cluster="c1", epoch=2, workers=2, low=low, high=high,
                        replicas=replicas, placed_at=placed_at)


def names(pods: list[dict[str, Any]], *indices: int) -> list[str]:
    by_index = {int(p["metadata"]["labels"]["federator.dev/index"]): p["metadata"]["name"] for p in pods}
    return [by_index[i] for i in indices]


async def test_pods_above_the_written_size_are_deleted_through_dispatch_highest_first() -> None:
    job = elastic_gang(replicas=2)
    parts = Parts(job)
    pods = member_pods(job, epoch=2, indices=[0, 1, 2, 3])
    parts.views.indexes["c1"] = GangIndex(pods)
    await parts.elastic.trim_and_fill(job)
    assert parts.members.calls == [("delete_pods", "uid-e", {"cluster": "c1", "epoch": 2,
                                                             "names": names(pods, 3, 2)})]


async def test_missing_pods_are_created_at_the_lowest_free_indices() -> None:
    job = elastic_gang(replicas=4)
    parts = Parts(job)
    pods = member_pods(job, epoch=2, indices=[0, 2])
    parts.views.indexes["c1"] = GangIndex(pods)
    await parts.elastic.trim_and_fill(job)
    [(what, uid, args)] = parts.members.calls
    assert (what, uid, args["epoch"]) == ("recreate_pods", "uid-e", 2)
    assert args["names"] == sorted(pod_name(job_name="e", job_uid="uid-e", role="worker", index=i) for i in (1, 3))
    # in flight (a dispatch may be creating them right now): nothing is created
    parts.members.calls.clear()
    parts.inflight.begin("uid-e")
    await parts.elastic.trim_and_fill(job)
    assert parts.members.calls == []


async def test_a_gang_that_is_not_settled_is_left_to_its_owner() -> None:
    job = elastic_gang(replicas=2)
    for unsettled in (member_pods(job, epoch=2, indices=[0, 1, 2]) + member_pods(job, epoch=2, indices=[3],
                                                                                  phase="Failed"),
                      member_pods(job, epoch=2, indices=[0, 1, 2, 3], deleting=[3])):
        parts = Parts(job)
        parts.views.indexes["c1"] = GangIndex(unsettled)
        await parts.elastic.trim_and_fill(job)
        assert parts.members.calls == []
    parts = Parts(job)  # the member not listed yet: nothing is known, nothing is done
    await parts.elastic.trim_and_fill(job)
    assert parts.members.calls == []


async def test_a_gang_being_shrunk_by_a_decision_is_not_trimmed_by_the_pass() -> None:
    job = elastic_gang(replicas=2)
    parts = Parts(job, snapshots={"c1": snapshot("c1", nodes=4, used={"n-0": 16}, bound_pods={"uid-e": 4})})
    parts.views.indexes["c1"] = GangIndex(member_pods(job, epoch=2, indices=[0, 1, 2, 3]))
    parts.preempting.shrinking["uid-e"] = ShrinkPlan(cluster="c1", epoch=2, pods={})
    parts.elastic.cooldown_seconds = 10_000.0
    assert await parts.elastic.elastic_pass() == 0
    assert parts.members.calls == []
    parts.preempting.shrinking.clear()
    assert await parts.elastic.elastic_pass() == 0
    assert [c[0] for c in parts.members.calls] == ["delete_pods"]


def growing() -> tuple[Parts, dict[str, Any]]:
    """Gang e runs 2 one-node pods (n-0, n-1) of 6 at most in a 4-node cluster: room for 2 more."""
    job = elastic_gang(replicas=2)
    snap = snapshot("c1", nodes=4, used={"n-0": 8, "n-1": 8}, bound_pods={"uid-e": 2})
    parts = Parts(job, snapshots={"c1": snap})
    parts.views.indexes["c1"] = GangIndex(member_pods(job, epoch=2, indices=[0], node="n-0")
                                          + member_pods(job, epoch=2, indices=[1], node="n-1"))
    return parts, job


async def test_room_no_one_waits_for_grows_a_gang_assumed_written_then_created() -> None:
    parts, job = growing()
    assert await parts.elastic.elastic_pass() == 1
    growth = parts.elastic.last_growth
    assert growth is not None and dict(growth.growths[0].replicas) == {"worker": 4}
    reservation = parts.ledger.get("uid-e")
    assert reservation is not None and reservation.kind is ReservationKind.PLACED and reservation.cluster == "c1"
    assert "uid-e" in parts.inflight and parts.store.writes == []  # assumed first, written in the task

    assert await parts.run_spawned() == ["placement:grow:team/e"]
    status = parts.store.stored("uid-e")["status"]
    assert status["replicas"] == {"worker": 4}
    grown = status["history"][-1]
    assert (grown["event"], grown["from"], grown["to"], grown["reason"]) == (
        "Resized", {"worker": 2}, {"worker": 4}, "Grown")
    assert ("e", "Grown") in parts.events.reasons()
    [(what, uid, args)] = parts.members.calls
    assert (what, uid, args["cluster"], args["epoch"], len(args["names"])) == ("recreate_pods", "uid-e", "c1", 2, 2)
    assert args["names"] == sorted(pod_name(job_name="e", job_uid="uid-e", role="worker", index=i) for i in (2, 3))
    assert "uid-e" not in parts.inflight and parts.ledger.get("uid-e") is not None


async def test_a_refused_growth_write_forgets_its_reservation() -> None:
    parts, _ = growing()
    parts.store.failing.add("uid-e")
    assert await parts.elastic.elastic_pass() == 1
    await parts.run_spawned()
    assert parts.ledger.get("uid-e") is None and parts.members.calls == [] and "uid-e" not in parts.inflight


async def test_a_gang_in_its_cooldown_or_with_a_pending_job_behind_it_does_not_grow() -> None:
    parts, _ = growing()
    parts.clock.now = T0 - 600 + 30  # 30 s after its placement, cooldown 60 s
    assert await parts.elastic.elastic_pass() == 0
    assert parts.elastic.last_growth is not None and "uid-e" in parts.elastic.last_growth.held_back

    parts, _ = growing()
    waiting = training_job("w", phase="Pending", workers=2)
    parts.store.add(waiting)
    parts.queued.add("uid-w")
    assert await parts.elastic.elastic_pass() == 0  # the room is the pending job's
    assert len(parts.ledger) == 0 and parts.spawned == []


# ------------------------------------------------------------ operator mode (the member's operator runs the gang)


def operator_pods(job: dict[str, Any], *, epoch: int, indices: list[int], node: str = "n-0",
                  index_label: str = "training.kubeflow.org/replica-index") -> list[dict[str, Any]]:
    """Pods the member's operator made from the member copy's template: the gang's labels and role, no hub index
    (the operator's own index label instead)."""
    pods = member_pods(job, epoch=epoch, indices=indices, node=node)
    for pod, index in zip(pods, indices, strict=True):
        labels = pod["metadata"]["labels"]
        labels.pop("federator.dev/index")
        labels[index_label] = str(index)
        pod["metadata"]["name"] = f"e-worker-{index}"
    return pods


KINDS = {k.kind: k for k in JOB_KINDS}


def twin_of(kind_key: str, job: dict[str, Any]) -> dict[str, Any]:
    job["metadata"]["annotations"] = {"federator.dev/source-kind": kind_key}
    return job


async def test_an_operator_gang_is_resized_through_its_member_copy_never_pod_by_pod() -> None:
    job = elastic_gang(replicas=2)
    parts = Parts(job)
    parts.members.operated.add("uid-e")
    parts.views.indexes["c1"] = GangIndex(operator_pods(job, epoch=2, indices=[0, 1, 2, 3]))
    await parts.elastic.trim_and_fill(job)
    assert parts.members.calls == [("resize_member_copy", "uid-e", {"cluster": "c1", "epoch": 2,
                                                                    "replicas": {"worker": 2}})]


async def test_an_operator_gang_grows_by_resizing_its_member_copy() -> None:
    parts, job = growing()
    parts.members.operated.add("uid-e")
    assert await parts.elastic.elastic_pass() == 1
    parts.members.calls.clear()  # the pass's trim (a no-op resize) before the growth
    await parts.run_spawned()
    assert parts.store.stored("uid-e")["status"]["replicas"] == {"worker": 4}
    assert parts.members.calls == [("resize_member_copy", "uid-e", {"cluster": "c1", "epoch": 2,
                                                                    "replicas": {"worker": 4}})]


def operated_twin(kind_name: str) -> tuple[Parts, ClusterSnapshot]:
    """Gang e, the twin of a `kind_name` object whose member copy the member's operator runs: 2 one-node pods
    (n-0, n-1) of 6 at most in a 4-node cluster, as that operator labels them."""
    kind = KINDS[kind_name]
    job = twin_of(kind.source_key, elastic_gang(replicas=2))
    snap = snapshot("c1", nodes=4, used={"n-0": 8, "n-1": 8}, bound_pods={"uid-e": 2})
    parts = Parts(job, snapshots={"c1": snap})
    parts.members.operated.add("uid-e")
    make = operator_pods if kind.in_place_resize is not None else member_pods
    index = GangIndex(make(job, epoch=2, indices=[0], node="n-0") + make(job, epoch=2, indices=[1], node="n-1"))
    index.copies[("uid-e", kind.source_key)] = {"metadata": {"name": "e"}}
    parts.views.indexes["c1"] = index
    parts.views.builders["c1"] = Amounts()
    return parts, snap


async def test_an_operator_gang_of_a_kind_that_cannot_resize_in_place_keeps_its_size() -> None:
    """A JobSet's twin (elastic here only by hand: JobSet has no range of sizes) whose member copy the JobSet
    controller runs: the running gang lists no pods and is `fixed`, so the grow plan holds it back with the
    reason, and nothing of it is removable by a preemption."""
    parts, snap = operated_twin("JobSet")
    assert await parts.elastic.elastic_pass() == 0
    growth = parts.elastic.last_growth
    assert growth is not None and not growth.growths
    assert "cannot resize it in place" in growth.held_back["uid-e"]
    [running] = [g for g in parts.accounting.running({"c1": snap}) if g.uid == "uid-e"]
    assert running.fixed and running.removable == () and running.pods == ()

    # the same gang as a PyTorchJob's twin: its operator resizes in place, so it grows
    parts, snap = operated_twin("PyTorchJob")
    [running] = [g for g in parts.accounting.running({"c1": snap}) if g.uid == "uid-e"]
    assert not running.fixed and [p.index for p in running.pods] == [0, 1]
    assert await parts.elastic.elastic_pass() == 1
    await parts.run_spawned()
    assert parts.members.calls[-1][0] == "resize_member_copy"
