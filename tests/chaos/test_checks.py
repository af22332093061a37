"""The chaos checker itself: each invariant check of tests/chaos/lab.py fires on the evidence it exists for
and stays quiet on what the design allows (an old copy being deleted while the new one runs, pods not
started yet, a stale read from a lagging replica); and a seed's plan is a pure function of the seed that
keeps the fault groups apart. Fast: no processes, no clusters."""

from __future__ import annotations

from typing import Any

from .lab import JobRecord, Ledger, MemberSnapshot, PodView, Sampler, Violations, _at_rest, job_body
from .sequence import GROUP, plan_sequence

CLUSTERS = ("a", "b", "c")


def pod(cluster: str, name: str, *, job: str = "u1", epoch: int = 1, phase: str = "Running", deleting: bool = False,
        kind: str = "pods") -> PodView:
    return PodView(cluster=cluster, kind=kind, namespace="chaos", name=name, uid=f"{cluster}-{name}-{epoch}",
                   job_uid=job, job=f"chaos/{job}", epoch=epoch, phase=phase, node="n1", deleting=deleting)


def snapshot(*objects: PodView, atomic: bool = True, at: float = 1.0) -> MemberSnapshot:
    return MemberSnapshot(at=at, atomic=atomic, objects=tuple(objects))


class FakeLab:
    """What Ledger and Sampler read of a lab when only their checks run."""

    class timeline:  # noqa: N801 - stands in for the attribute
        @staticmethod
        def now() -> float:
            return 0.0


def sampler() -> tuple[Sampler, Violations, Ledger]:
    violations = Violations()
    ledger = Ledger(FakeLab())  # type: ignore[arg-type]
    return Sampler(FakeLab(), ledger, violations), violations, ledger  # type: ignore[arg-type]


def invariants(violations: Violations) -> set[str]:
    return {inv for inv, _ in violations.first}


def test_a_job_running_in_two_clusters_in_one_sample_is_a_violation() -> None:
    s, violations, _ = sampler()
    s.check_members(snapshot(pod("a", "w0", epoch=1), pod("b", "w0", epoch=2)))
    assert "2: never runs in two clusters at once" in invariants(violations)
    assert s.max_copies == 2


def test_an_old_copy_being_deleted_or_not_started_is_not_a_running_copy() -> None:
    s, violations, _ = sampler()
    s.check_members(snapshot(pod("a", "w0", epoch=1, deleting=True), pod("b", "w0", epoch=2),
                             pod("c", "w0", epoch=3, phase="Pending")))
    assert not violations
    assert s.max_copies == 1


def test_with_terminating_runs_an_old_copy_saving_in_its_grace_is_a_running_copy() -> None:
    s, violations, _ = sampler()
    s.terminating_runs = True
    # the evicted copy alone, saving: one copy; a finished pod being deleted runs nothing
    s.check_members(snapshot(pod("a", "w0", epoch=1, deleting=True), pod("b", "w0", epoch=2, phase="Pending"),
                             pod("a", "w1", epoch=1, phase="Succeeded", deleting=True)))
    assert not violations and s.max_copies == 1
    # the new copy running while the old one still saves: two copies
    s.check_members(snapshot(pod("a", "w0", epoch=1, deleting=True), pod("b", "w0", epoch=2), at=2.0))
    assert "2: never runs in two clusters at once" in invariants(violations)


def test_two_epochs_running_in_one_cluster_is_a_violation() -> None:
    s, violations, _ = sampler()
    s.check_members(snapshot(pod("a", "w0", epoch=1), pod("a", "w1", epoch=2)))
    assert invariants(violations) == {"2: one copy (never two epochs running at once)"}


def test_a_sample_that_was_not_atomic_is_not_used_across_clusters() -> None:
    s, violations, _ = sampler()
    s.check_members(snapshot(pod("a", "w0", epoch=1), pod("b", "w0", epoch=2), atomic=False))
    assert "2: never runs in two clusters at once" not in invariants(violations)
    s.check_members(snapshot(pod("a", "w0", epoch=1), pod("a", "w1", epoch=2), atomic=False))
    assert "2: one copy (never two epochs running at once)" in invariants(violations)
    # nor to order creations: a later object may be read before an earlier one
    s.check_members(snapshot(pod("c", "pg", epoch=3, phase=""), pod("a", "pg", epoch=1, phase=""), atomic=False))
    assert "epochs only rise: a member object created at an older epoch" not in invariants(violations)


def test_an_older_copy_running_after_a_newer_one_ran_is_a_violation() -> None:
    s, violations, _ = sampler()
    s.check_members(snapshot(pod("b", "w0", epoch=2)))
    s.check_members(snapshot(pod("a", "w0", epoch=1), at=2.0))
    assert "epochs only rise: an older copy runs after a newer one ran" in invariants(violations)


def test_a_member_object_created_at_an_older_epoch_is_a_violation_and_an_old_one_seen_again_is_not() -> None:
    s, violations, _ = sampler()
    s.check_members(snapshot(pod("a", "w0", epoch=1, phase="Pending"), pod("b", "w0", epoch=2, phase="Pending")))
    assert not violations  # first seen together: no order between them
    s.check_members(snapshot(pod("a", "w0", epoch=1, phase="Pending"), pod("b", "w0", epoch=2)))
    assert not violations
    s.check_members(snapshot(pod("a", "pg", epoch=1, kind="podgroups", phase=""), pod("b", "w0", epoch=2)))
    assert invariants(violations) == {"epochs only rise: a member object created at an older epoch"}


def job(uid: str, rv: int, *, name: str = "j1", epoch: int = 1, phase: str = "Running", cluster: str | None = "a",
        failed: str | None = None) -> dict[str, Any]:
    placement: dict[str, Any] = {"epoch": epoch, **({"cluster": cluster} if cluster else {})}
    status: dict[str, Any] = {"phase": phase, "placement": placement}
    if failed:
        status["conditions"] = [{"type": "Failed", "status": "True", "reason": failed, "message": "m"}]
    return {"metadata": {"namespace": "chaos", "name": name, "uid": uid, "resourceVersion": str(rv)},
            "status": status}


def acked(ledger: Ledger, name: str, uid: str, rv: int, *, workers: int = 1) -> JobRecord:
    record = JobRecord(name=name, body=job_body(name, workers=workers, gpus=0), uid=uid, acked=True, ack_rv=rv)
    ledger.jobs[name] = record
    return record


def test_a_status_epoch_going_down_is_a_violation_but_a_stale_read_is_not() -> None:
    s, violations, _ = sampler()
    s.check_jobs(1.0, 20, [job("u1", 20, epoch=2)], via="hub-a")
    s.check_jobs(2.0, 15, [job("u1", 15, epoch=1)], via="hub-b")  # an older revision: a lagging read
    assert not violations and s.stale_reads == 1
    s.check_jobs(3.0, 30, [job("u1", 30, epoch=1)], via="hub-a")
    assert invariants(violations) == {"epochs only rise: a job's status epoch went down"}


def test_an_acknowledged_job_missing_from_a_list_at_a_later_revision_is_lost() -> None:
    s, violations, ledger = sampler()
    acked(ledger, "j1", "u1", 10)
    s.check_jobs(1.0, 9, [], via="hub-b")  # a list older than the create: proves nothing
    assert not violations
    ledger.jobs["j1"].delete_requested = True
    s.check_jobs(2.0, 12, [], via="hub-b")
    assert not violations
    ledger.jobs["j1"].delete_requested = False
    s.check_jobs(3.0, 12, [], via="hub-b")
    assert invariants(violations) == {"3: no accepted job is lost (missing from a list)"}


def test_at_rest_checks() -> None:
    _, _, ledger = sampler()
    acked(ledger, "j1", "u1", 5, workers=2)
    acked(ledger, "j2", "u2", 6)
    acked(ledger, "j3", "u3", 7)
    acked(ledger, "j4", "u4", 8)  # lost
    jobs = [job("u1", 20, name="j1", epoch=2, cluster="b"),
            job("u2", 21, name="j2", phase="Failed", cluster=None, failed="ClusterLost"),
            job("u3", 22, name="j3", phase="Failed", cluster=None, failed="MemberObjectsDeleted")]
    healthy = snapshot(pod("b", "w0", job="u1", epoch=2), pod("b", "w1", job="u1", epoch=2),
                       pod("a", "w0", job="u1", epoch=1, deleting=True))
    found = {v.invariant: v for v in _at_rest(None, ledger, jobs, healthy)}  # type: ignore[arg-type]
    assert set(found) == {"3: no accepted job is lost", "3: no accepted job is lost (failed by the system, not by "
                                                         "its policy)"}
    assert "chaos/j4" == found["3: no accepted job is lost"].subject

    broken = snapshot(pod("b", "w0", job="u1", epoch=2), pod("a", "w0", job="u1", epoch=1),
                      pod("c", "w0", job="gone", epoch=1, phase="Pending"))
    seen = {v.invariant for v in _at_rest(None, ledger, jobs, broken)}  # type: ignore[arg-type]
    assert {"2/status matches members: objects outside the job's placement",
            "status matches members: a Running job runs its whole gang where its status says",
            "no member object without its job"} <= seen


def test_a_seed_is_one_plan_and_its_fault_groups_never_overlap() -> None:
    for seed in range(40):
        plan = plan_sequence(seed, clusters=CLUSTERS)
        assert plan == plan_sequence(seed, clusters=CLUSTERS)
        assert len(plan.jobs) == 50 and 10 <= len(plan.faults) <= 16
        for group in ("hubs", "etcd", "loss"):
            steps = [f for f in plan.faults if GROUP[f.kind] == group]
            for before, after in zip(steps, steps[1:], strict=False):
                assert after.at >= before.at + before.seconds, (seed, before, after)
        for step in plan.faults:
            if step.kind in ("partition-all", "outage"):
                assert step.seconds <= 3.0  # shorter than the loss grace: see sequence.py
    assert plan_sequence(1, clusters=CLUSTERS) != plan_sequence(2, clusters=CLUSTERS)
