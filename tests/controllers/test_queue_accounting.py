"""Queue accounting (controllers/queue_accounting.py), built without a hub: in-memory jobs, snapshots,
a fake Queue cache and a recording Queue status writer, a fake of status sync's pod index.

What a cycle is handed: no queues (None) when the hub has none and no job names one; a queue that no
longer selects a job's namespace refuses it; the running gangs with the reservation (or the member pods)
they hold, the GPU model they are charged to, borrowed quota, an elastic gang's live pods lowest index
first up to its placed size, none while it is being evicted, without the pods a shrink takes; the queues'
status after a cycle; the reservations rebuilt for jobs an earlier hub placed."""

from __future__ import annotations

from typing import Any

from federator.controllers.queue_accounting import Preempting, QueueAccounting, ShrinkPlan, member_pod
from federator.controllers.reservations import ReservationLedger
from federator.placement import Profile, QueueQuota, QuotaAmounts, Reservation, ReservationKind, Resources
from federator.placement.gang import GangRequest

from .placement_parts_support import (GI, T0, Amounts, Clock, GangIndex, Queues, QueueSink, Views, member_pods,
                                      snapshot, training_job)


class Parts:
    """A QueueAccounting over in-memory jobs (the loop's index: jobs, active, queued)."""

    def __init__(self, *jobs: dict[str, Any], queues: Queues | None = None) -> None:
        self.jobs = {job["metadata"]["uid"]: job for job in jobs}
        self.active = {uid for uid, job in self.jobs.items() if job["status"]["placement"].get("cluster")}
        self.queued = set(self.jobs) - self.active
        self.ledger = ReservationLedger()
        self.views = Views()
        self.preempting = Preempting()
        self.queues = queues or Queues()
        self.sink = QueueSink()
        self.clock = Clock()
        self.accounting = QueueAccounting(queues=self.queues, queue_status=self.sink, profile=Profile(),
                                          ledger=self.ledger, members=self.views, preempting=self.preempting,
                                          jobs=self.jobs, active=self.active, queued=self.queued, clock=self.clock)


def quota(name: str, gpus: int) -> QueueQuota:
    return QueueQuota(name=name, nominal=QuotaAmounts(gpus={"A100": gpus}))


def queue_object(name: str, namespaces: list[str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": 3}, "spec": {"namespaces": {"names": namespaces}}}


def gang_of(parts: Parts, uid: str) -> GangRequest:
    gang = parts.accounting.gang_of(uid, parts.jobs[uid])
    assert gang is not None
    return gang


def test_no_queue_anywhere_is_placement_without_queues() -> None:
    parts = Parts(training_job("a"))
    assert parts.accounting.cycle_queues([gang_of(parts, "uid-a")]) is None


def test_a_gang_naming_a_queue_gets_every_readable_queue_even_none() -> None:
    parts = Parts(training_job("a", queue="vision"))
    assert parts.accounting.cycle_queues([gang_of(parts, "uid-a")]) == {}
    parts.queues.quota = {"vision": quota("vision", 16)}
    assert parts.accounting.cycle_queues([]) == {"vision": quota("vision", 16)}


def test_a_profile_without_the_quota_filter_enforces_no_queue() -> None:
    parts = Parts(training_job("a", queue="vision"), queues=Queues(quota={"vision": quota("vision", 16)}))
    parts.accounting.profile = Profile(filters=tuple(f for f in Profile().filters if f != "quota"))
    assert parts.accounting.cycle_queues([gang_of(parts, "uid-a")]) is None


def test_a_queue_that_no_longer_selects_the_namespace_refuses_the_job() -> None:
    job = training_job("a", namespace="team", queue="vision")
    parts = Parts(job, queues=Queues(objects={"vision": queue_object("vision", ["other"])}))
    refused = parts.accounting.queue_refuses(gang_of(parts, "uid-a"), job)
    assert refused is not None and "does not select namespace team" in refused
    parts.queues.objects["vision"] = queue_object("vision", ["team"])
    assert parts.accounting.queue_refuses(gang_of(parts, "uid-a"), job) is None
    del parts.queues.objects["vision"]  # a missing queue is placement's QueueNotFound, not this
    assert parts.accounting.queue_refuses(gang_of(parts, "uid-a"), job) is None


def test_a_queue_selects_the_namespace_by_the_namespace_objects_labels() -> None:
    job = training_job("a", namespace="team", queue="vision")
    selecting = queue_object("vision", [])
    selecting["spec"]["namespaces"] = {"selector": {"matchLabels": {"org": "vision"}}}
    parts = Parts(job, queues=Queues(objects={"vision": selecting}))
    refused = parts.accounting.queue_refuses(gang_of(parts, "uid-a"), job)
    assert refused is not None and "does not select namespace team" in refused
    parts.queues.namespace_labels["team"] = {"org": "vision"}  # kubectl label ns team org=vision
    assert parts.accounting.queue_refuses(gang_of(parts, "uid-a"), job) is None


def test_a_running_gang_holds_its_reservation_until_its_pods_show() -> None:
    job = training_job("a", phase="Placed", cluster="c1", epoch=2, workers=2, queue="vision", priority=5,
                       placed_at=T0 - 30)
    parts = Parts(job)
    parts.ledger.assume(Reservation(gang_uid="uid-a", gang_key="team/a", cluster="c1", kind=ReservationKind.PLACED,
                                    amounts={"n-1": Resources(gpu=16)}, pods=2, resource_version="1",
                                    created_at=T0, expires_at=T0 + 60))
    parts.accounting.charge("uid-a", cluster="c1", epoch=2, gpu_model="H100")
    [gang] = parts.accounting.running({"c1": snapshot("c1")})
    assert (gang.uid, gang.cluster, gang.queue, gang.priority) == ("uid-a", "c1", "vision", 5)
    assert gang.started_at == T0 - 30 and gang.demand.gpu == 16
    assert dict(gang.amounts) == {"n-1": Resources(gpu=16)}
    assert gang.gpu_model == "H100"  # charged where this loop placed it
    assert parts.accounting.running_gang("uid-a") is gang
    # once the reservation goes, what its pods hold per node comes from the cluster's snapshot builder
    parts.ledger.forget("uid-a")
    parts.views.builders["c1"] = Amounts({"uid-a": {"n-2": Resources(gpu=8), "n-3": Resources(gpu=8)}})
    [gang] = parts.accounting.running({"c1": snapshot("c1", rv="2", bound_pods={"uid-a": 2})})
    assert dict(gang.amounts) == {"n-2": Resources(gpu=8), "n-3": Resources(gpu=8)}


def test_a_gang_being_evicted_or_not_placed_does_not_run() -> None:
    placed = training_job("a", phase="Running", cluster="c1", epoch=1)
    queued = training_job("b", phase="Pending")
    parts = Parts(placed, queued)
    assert [g.uid for g in parts.accounting.running({"c1": snapshot("c1")})] == ["uid-a"]
    parts.preempting.evicting["uid-a"] = ("c1", 1)
    assert parts.accounting.running({"c1": snapshot("c1")}) == []


def test_borrowed_quota_is_read_from_the_quota_reserved_condition() -> None:
    job = training_job("a", phase="Running", cluster="c1", epoch=1, queue="vision")
    job["status"]["conditions"] = [{"type": "QuotaReserved", "status": "True", "reason": "Borrowed"}]
    [gang] = Parts(job).accounting.running({"c1": snapshot("c1")})
    assert gang.borrowed is True


def test_an_elastic_gang_lists_its_live_pods_up_to_its_placed_size() -> None:
    job = training_job("e", phase="Running", cluster="c1", epoch=3, workers=4, low=2, high=6, replicas=3)
    parts = Parts(job)
    pods = member_pods(job, epoch=3, indices=[0, 1, 2, 3], node="n-0")  # index 3: a shrink not done yet
    pods += member_pods(job, epoch=3, indices=[4], node="n-1", phase="Failed")
    pods += member_pods(job, epoch=2, indices=[0], node="n-2")  # an older epoch's copy
    parts.views.indexes["c1"] = GangIndex(pods)
    [gang] = parts.accounting.running({"c1": snapshot("c1")})
    assert [(p.role, p.index, p.node) for p in gang.pods] == [("worker", 0, "n-0"), ("worker", 1, "n-0"),
                                                               ("worker", 2, "n-0")]
    assert gang.request is not None and dict(gang.amounts) == {"n-0": Resources(3 * 64_000, 3 * 512 * GI, 24, 0)}
    # a decision's shrink takes pod 2: it no longer counts as the gang's (pod 3 does, until the size is written)
    parts.preempting.shrinking["uid-e"] = ShrinkPlan(cluster="c1", epoch=3, pods={pods[2]["metadata"]["name"]:
                                                                                  ("worker", 2)})
    [gang] = parts.accounting.running({"c1": snapshot("c1")})
    assert [p.index for p in gang.pods] == [0, 1, 3]


def test_an_elastic_gang_with_an_unreadable_pod_lists_none() -> None:
    job = training_job("e", phase="Running", cluster="c1", epoch=1, workers=2, low=1, high=4)
    pods = member_pods(job, epoch=1, indices=[0, 1])
    del pods[1]["metadata"]["labels"]["federator.dev/index"]
    parts = Parts(job)
    parts.views.indexes["c1"] = GangIndex(pods)
    [gang] = parts.accounting.running({"c1": snapshot("c1")})
    assert gang.pods == ()  # nothing is planned on pods it cannot read
    view = member_pod(pods[1])
    assert view is not None and view.index == -1 and view.live


def test_leftovers_of_queued_jobs_are_set_aside() -> None:
    requeued = training_job("old", phase="Pending", epoch=1)
    parts = Parts(requeued)
    snap = snapshot("c1", used={"n-0": 8}, bound_pods={"uid-old": 1})
    parts.views.builders["c1"] = Amounts({"uid-old": {"n-0": Resources(64_000, 512 * GI, 8, 0)}})
    views = parts.accounting.without_leftovers({"c1": snap})
    assert views["c1"].nodes["n-0"].free.gpu == 8 and snap.nodes["n-0"].free.gpu == 0


def test_queue_status_counts_pending_and_admitted_jobs() -> None:
    running = training_job("a", phase="Running", cluster="c1", epoch=1, workers=1, queue="vision")
    waiting = training_job("b", phase="Pending", queue="vision")
    queues = Queues(objects={"vision": queue_object("vision", ["team"])}, quota={"vision": quota("vision", 64)})
    parts = Parts(running, waiting, queues=queues)
    cycle_queues = parts.accounting.cycle_queues([gang_of(parts, "uid-b")])
    assert cycle_queues is not None
    gangs = parts.accounting.running({"c1": snapshot("c1")})
    parts.accounting.want_queue_status(cycle_queues, gangs, result=None, now=T0)
    status = parts.sink.wanted["vision"]
    assert (status["pendingJobs"], status["admittedJobs"], status["observedGeneration"]) == (1, 1, 3)
    assert status["used"]["gpus"] == {"A100": 8}


def test_reservations_are_rebuilt_once_the_cluster_has_synced() -> None:
    placed = training_job("a", phase="Placed", cluster="c1", epoch=1, workers=2)
    gone_on = training_job("b", phase="Running", cluster="c1", epoch=1)
    parts = Parts(placed, gone_on)
    unreserved = {"uid-a", "uid-b", "uid-unknown"}
    parts.accounting.rebuild_reservations(unreserved, {"c1": snapshot("c1", nodes=0)}, now=T0)
    assert unreserved == {"uid-a"} and len(parts.ledger) == 0  # not synced yet: tried again
    parts.accounting.rebuild_reservations(unreserved, {"c1": snapshot("c1")}, now=T0)
    rebuilt = parts.ledger.get("uid-a")
    assert unreserved == set() and rebuilt is not None and rebuilt.pods == 2 and rebuilt.cluster == "c1"
