"""Status sync: member PodGroup and pod state flows into TrainingJob.status.

Integration (real SimClusters, a real hub with every lifecycle controller, the public API):
- a job aimed at each cluster type lands there under that cluster's scheduler (the member objects each
  adapter creates are checked), goes Placed -> Admitted -> Running -> Succeeded, with pod counts per
  role, conditions, a history entry per transition (cluster and epoch), and its reservation released;
- a node lost under a running gang fails the job with the member's reason;
- a gang that finishes before the snapshot shows it bound still has its reservation released.
Unit (the pure fold `synced_status`): the phase never moves backwards; objects vanishing after
admission fail the gang; a wait is explained with the member's words; nothing changes -> no write.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from federator.controllers import status_sync
from federator.controllers.jobs import reservations
from federator.controllers.status_sync import synced_status
from federator.delegation import GangPhase, GangStatus, RoleCounts, adapter_for
from federator.delegation.adapter import LABEL_EPOCH, LABEL_HUB, LABEL_JOB_UID, LABEL_ROLE, NO_GANG_GUARANTEE
from federator.placement import cycle as placement_cycle

from .jobtest_support import condition, phase, placement_of, wait_until
from .lifecycle_support import aimed_job, events, final_epoch_events, history, lifecycle_env

pytestmark = pytest.mark.slow

# cluster -> (PodGroup apiVersion or None, pod schedulerName, how a pod names its group)
ADAPTER_SHAPES: dict[str, tuple[str | None, str, tuple[str, str] | None]] = {
    "onprem-rdma-a100": ("scheduling.volcano.sh/v1beta1", "volcano", ("annotation", "scheduling.k8s.io/group-name")),
    "onprem-rdma-nodata": ("scheduling.incubator.k8s.io/v1alpha1", "kube-batch",
                           ("annotation", "scheduling.k8s.io/group-name")),
    "cloud-eth-h100": ("scheduling.x-k8s.io/v1alpha1", "scheduler-plugins-scheduler",
                       ("label", "scheduling.x-k8s.io/pod-group")),
    "cloud-small": (None, "default-scheduler", None),
}


async def test_a_job_in_each_cluster_type_runs_to_success_with_its_status_synced(tmp_path: Path) -> None:
    names = list(ADAPTER_SHAPES)
    async with lifecycle_env(tmp_path, names, run_seconds=1.5) as env:
        uids: dict[str, str] = {}
        for cluster in names:
            created = await env.api.submit(aimed_job(f"job-{cluster}", cluster))
            uids[cluster] = created["metadata"]["uid"]

        # Each lands in its cluster, under that cluster's scheduler, with the adapter's objects.
        for cluster, (group_api, scheduler_name, membership) in ADAPTER_SHAPES.items():
            job = await env.api.wait_job("team-a", f"job-{cluster}",
                                         lambda j: phase(j) in ("Admitted", "Running", "Succeeded"),
                                         what=f"admitted in {cluster}")
            assert placement_of(job)["cluster"] == cluster
            epoch = placement_of(job)["epoch"]
            groups, pods = await env.fed.member_objects(cluster, uids[cluster])
            assert len(pods) == 3, pods
            assert {p["metadata"]["labels"][LABEL_ROLE] for p in pods} == {"ps", "worker"}
            for pod in pods:
                labels = pod["metadata"]["labels"]
                assert labels[LABEL_JOB_UID] == uids[cluster] and labels[LABEL_EPOCH] == str(epoch)
                assert labels[LABEL_HUB] == "federator"
                assert pod["spec"]["schedulerName"] == scheduler_name
                assert pod["spec"]["restartPolicy"] == "Never"
            if group_api is None:
                assert groups == []
                gang = condition(job, "GangGuarantee")
                assert gang is not None and gang["status"] == "False" and gang["message"] == NO_GANG_GUARANTEE
            else:
                assert len(groups) == 1 and groups[0]["apiVersion"] == group_api
                assert groups[0]["spec"]["minMember"] == 3
                assert (condition(job, "GangGuarantee") or {}).get("status") == "True"
                assert membership is not None
                where, key = membership
                group_name = groups[0]["metadata"]["name"]
                for pod in pods:
                    holder = pod["metadata"]["labels"] if where == "label" else pod["metadata"]["annotations"]
                    assert holder[key] == group_name

        # ... and runs to Succeeded; the history tells the whole story.
        for cluster in names:
            job = await env.api.wait_job("team-a", f"job-{cluster}", lambda j: phase(j) == "Succeeded",
                                         timeout=30, what=f"succeeded in {cluster}")
            epoch = placement_of(job)["epoch"]
            lifecycle = [e for e in final_epoch_events(job) if e in ("Placed", "Admitted", "Running", "Succeeded")]
            assert lifecycle == ["Placed", "Admitted", "Running", "Succeeded"], events(job)
            for event in ("Admitted", "Running", "Succeeded"):
                (entry,) = history(job, event)
                assert entry["cluster"] == cluster and entry["epoch"] == epoch
            assert job["status"]["podCounts"] == {
                "ps": {"pending": 0, "running": 0, "succeeded": 1, "failed": 0},
                "worker": {"pending": 0, "running": 0, "succeeded": 2, "failed": 0},
            }
            admitted = condition(job, "Admitted")
            assert admitted is not None and admitted["status"] == "True"
            complete = condition(job, "Complete")
            assert complete is not None and complete["status"] == "True"
            # once the member showed the gang bound, its reservation was released (never counted twice)
            assert reservations(env.hub.context).get(uids[cluster]) is None


async def test_a_counted_lost_node_fails_the_running_gang_with_the_members_reason(tmp_path: Path) -> None:
    # By default a lost node never counts (tests/controllers/test_failure_policy.py); a rule that counts it, as
    # kube's Job would, fails a gang whose role restarts no pod (restartPolicy Never) with the member's reason.
    async with lifecycle_env(tmp_path, ["onprem-rdma-a100"], run_seconds=None) as env:
        body = aimed_job("doomed", "onprem-rdma-a100", workers=2, gpus=8)
        body["spec"]["failurePolicy"] = {"rules": [{"action": "Count",
                                                    "onPodConditions": [{"type": "DisruptionTarget"}]}]}
        created = await env.api.submit(body)
        uid = created["metadata"]["uid"]
        job = await env.api.wait_job("team-a", "doomed", lambda j: phase(j) == "Running", what="running")
        assert job["status"]["podCounts"]["worker"]["running"] == 2
        pods = await env.live_pods("onprem-rdma-a100", uid)
        worker_node = next(p["spec"]["nodeName"] for p in pods if p["metadata"]["labels"][LABEL_ROLE] == "worker")
        await env.fed.fault("onprem-rdma-a100", "node-failure", {"node": worker_node})
        job = await env.api.wait_job("team-a", "doomed", lambda j: phase(j) == "Failed", what="failed")
        failed = condition(job, "Failed")
        assert failed is not None and failed["status"] == "True" and failed["reason"] == "PodFailed"
        assert "onprem-rdma-a100" in failed["message"] and "failed" in failed["message"]
        assert job["status"]["podCounts"]["worker"]["failed"] >= 1
        (entry,) = history(job, "Failed")
        assert entry["cluster"] == "onprem-rdma-a100"
        # A failed job stays failed: status sync never moves a terminal phase.
        await wait_until(lambda: env.objects.get("onprem-rdma-a100") is not None, what="index")
        again = await env.api.get("team-a", "doomed")
        assert phase(again) == "Failed" and history(again, "Failed") == [entry]


async def test_a_gang_that_finishes_unseen_by_the_snapshot_has_its_reservation_released(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A short gang can be bound, run and finish between two looks of the member's snapshot: status sync
    # never sees it "shown bound". Its finish releases the reservation (it would otherwise hold room
    # for finished pods until its TTL).
    # Neither of the releases on a snapshot showing the gang (status sync's, placement's) happens here.
    monkeypatch.setattr(status_sync, "release_if_shown", lambda hub, uid: False)
    monkeypatch.setattr(placement_cycle, "reconcile_reservations", lambda book, snapshot, now: (book, ()))
    async with lifecycle_env(tmp_path, ["cloud-small"], run_seconds=0.5) as env:
        created = await env.api.submit(aimed_job("brief", "cloud-small", workers=1, gpus=1))
        uid = created["metadata"]["uid"]
        job = await env.api.wait_job("team-a", "brief", lambda j: phase(j) == "Succeeded", what="succeeded")
        assert placement_of(job)["cluster"] == "cloud-small"
        await wait_until(lambda: reservations(env.hub.context).get(uid) is None,
                         what="the finished gang's reservation released")


# ---------------------------------------------------------------- the pure fold


def _job(phase_: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u-1"},
        "spec": {"roles": [{"name": "worker", "replicas": 2, "template": {"image": "x"}}]},
        "status": {"phase": phase_, "placement": {"cluster": "c1", "epoch": 2}, **status},
    }


def _gs(phase_: GangPhase, *, running: int = 0, pending: int = 2, succeeded: int = 0, failed: int = 0,
        existing: int = 2, bound: int = 0, reason: str = "WaitingForScheduler", message: str = "waiting") -> GangStatus:
    return GangStatus(phase=phase_, counts={"worker": RoleCounts(pending=pending, running=running,
                                                                succeeded=succeeded, failed=failed)},
                      expected=2, existing=existing, bound=bound, reason=reason, message=message)


VOLCANO = adapter_for("volcano")
NOW = time.time()


@pytest.mark.parametrize(("current", "seen", "expected", "history"), [
    ("Placed", GangPhase.PLACED, "Placed", []),
    ("Placed", GangPhase.ADMITTED, "Admitted", ["Admitted"]),
    # one batched write that jumps phases still records every step the gang went through
    ("Placed", GangPhase.RUNNING, "Running", ["Admitted", "Running"]),
    ("Placed", GangPhase.SUCCEEDED, "Succeeded", ["Admitted", "Running", "Succeeded"]),
    ("Admitted", GangPhase.SUCCEEDED, "Succeeded", ["Running", "Succeeded"]),
    ("Running", GangPhase.ADMITTED, "Running", []),  # never backwards
    ("Admitted", GangPhase.FAILED, "Failed", ["Failed"]),  # no invented Running before a failure
    ("Placed", GangPhase.FAILED, "Failed", ["Failed"]),
    ("Running", GangPhase.SUCCEEDED, "Succeeded", ["Succeeded"]),
])
def test_the_phase_only_moves_forward(current: str, seen: GangPhase, expected: str, history: list[str]) -> None:
    new = synced_status(_job(current), _gs(seen, reason="Scheduled"), adapter=VOLCANO, cluster="c1", epoch=2,
                        now=NOW)
    assert new is not None
    assert new["phase"] == expected
    assert [h["event"] for h in new.get("history") or ()] == history
    quiet = synced_status(_job(current), _gs(seen, reason="Scheduled"), adapter=VOLCANO, cluster="c1", epoch=2,
                          now=NOW, quiet=True)
    assert quiet == new  # the dry run computes the same status


def test_objects_vanishing_after_admission_fail_the_gang() -> None:
    gone = _gs(GangPhase.PLACED, existing=0, reason="PodsMissing", message="2 of 2 pods do not exist")
    new = synced_status(_job("Running"), gone, adapter=VOLCANO, cluster="c1", epoch=2, now=NOW)
    assert new is not None and new["phase"] == "Failed"
    failed = next(c for c in new["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "MemberObjectsDeleted" and "c1" in failed["message"]
    # ... but not before admission: then it is a dispatch in progress, still Placed
    before = synced_status(_job("Placed"), gone, adapter=VOLCANO, cluster="c1", epoch=2, now=NOW)
    assert before is not None and before["phase"] == "Placed"


def test_a_wait_is_explained_and_an_unchanged_view_writes_nothing() -> None:
    why = _gs(GangPhase.PLACED, reason="NotEnoughResources",
              message="PodGroup pg-1: 2/2 tasks in gang unschedulable: 0/4 nodes are available")
    new = synced_status(_job("Placed"), why, adapter=VOLCANO, cluster="c1", epoch=2, now=NOW)
    assert new is not None and new["phase"] == "Placed"
    admitted = next(c for c in new["conditions"] if c["type"] == "Admitted")
    assert admitted["status"] == "False" and admitted["reason"] == "NotEnoughResources"
    assert "0/4 nodes are available" in admitted["message"] and admitted["message"].startswith("cluster c1: ")
    assert new["podCounts"] == {"worker": {"pending": 2, "running": 0, "succeeded": 0, "failed": 0}}
    settled = _job("Placed", **{k: v for k, v in new.items() if k not in ("phase", "placement")})
    assert synced_status(settled, why, adapter=VOLCANO, cluster="c1", epoch=2, now=NOW + 5) is None


def test_a_terminal_job_is_left_alone() -> None:
    counts = {"worker": {"pending": 0, "running": 0, "succeeded": 2, "failed": 0}}
    job = _job("Succeeded", podCounts=counts)
    new = synced_status(job, _gs(GangPhase.FAILED, failed=1, pending=1, reason="PodFailed"), adapter=VOLCANO,
                        cluster="c1", epoch=2, now=NOW)
    assert new is not None  # the adapter's GangGuarantee condition is added, nothing else moves
    assert new["phase"] == "Succeeded" and new["podCounts"] == counts
    assert not [c for c in new["conditions"] if c["type"] == "Failed"]
    assert "history" not in new


def test_changes_within_a_jobs_batch_window_become_one_reconcile() -> None:
    from federator.controllers.status_sync import _Work

    work = _Work(batch_seconds=0.2)
    work.mark(["a"], now=10.0)
    work.mark(["a", "b"], now=10.15)  # a's window opened at 10.0; b's opens now
    assert work.next_due() == pytest.approx(10.2)
    assert work.take_due(10.1) == set()
    assert work.take_due(10.2) == {"a"}  # once, however many changes it had
    assert work.take_due(10.3) == set()
    assert work.take_due(10.35) == {"b"}
    assert work.next_due() is None
    work.mark(["a"], now=11.0)  # a new change after the reconcile opens a new window
    assert work.take_due(11.2) == {"a"}


def test_with_no_batch_window_a_change_is_due_at_once() -> None:
    from federator.controllers.status_sync import _Work

    work = _Work(batch_seconds=0.0)
    work.mark(["a"], now=5.0)
    assert work.take_due(5.0) == {"a"}
