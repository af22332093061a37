"""The member object index of status sync (ClusterObjects) and the GC's orphan rule, without I/O.

The index is what status sync, the stuck-gang detector and the GC read of a member; it is fed by a
Reflector (list + watch events, and the DELETED events of a re-list that carry only a name). Hostile or
malformed objects (no name, labels that are not a map, an epoch that is not a number) must neither
crash it nor be attributed to a job's gang.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from federator.clusters.client import JOB_KIND_RESOURCES, PODS, podgroup_resource
from federator.controllers.cleanup import orphan_reason
from federator.apis.checkpoint import ANNOTATION_CHECKPOINT
from federator.controllers import memberobjects
from federator.controllers.memberobjects import ClusterObjects, MemberObject
from federator.delegation.adapter import LABEL_EPOCH, LABEL_HUB, LABEL_JOB_NAME, LABEL_JOB_NAMESPACE, LABEL_JOB_UID

VOLCANO_GROUPS = podgroup_resource("volcano")
assert VOLCANO_GROUPS is not None


def _obj(name: str, *, uid: str = "job-1", epoch: Any = "2", rv: str = "1", namespace: str = "vision",
         **extra: Any) -> dict[str, Any]:
    labels: Any = {LABEL_HUB: "federator", LABEL_JOB_UID: uid, LABEL_EPOCH: epoch, LABEL_JOB_NAMESPACE: "vision",
                   LABEL_JOB_NAME: "resnet"}
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                                         "resourceVersion": rv, "labels": labels},
                            "spec": {"nodeName": "n1", "containers": [{"env": [{"name": "SECRET", "value": "x"}]}]},
                            "status": {"phase": "Running"}}
    body.update(extra)
    return body


@pytest.fixture
def index() -> tuple[ClusterObjects, list[tuple[str, set[str]]]]:
    changes: list[tuple[str, set[str]]] = []
    return ClusterObjects("c1", (PODS, VOLCANO_GROUPS), lambda cluster, uids: changes.append((cluster, uids))), changes


def test_the_index_follows_events_and_groups_a_gang_by_job_and_epoch(
        index: tuple[ClusterObjects, list[tuple[str, set[str]]]]) -> None:
    objects, changes = index
    assert not objects.ready
    objects.apply(PODS.key, [("ADDED", _obj("p0")), ("ADDED", _obj("p1")), ("ADDED", _obj("old", epoch="1"))],
                  resource_version="5", received_at=0.0)
    assert not objects.ready  # PodGroups not listed yet: absence there means nothing
    objects.apply(VOLCANO_GROUPS.key, [("ADDED", _obj("pg", spec={"minMember": 2}))], resource_version="6",
                  received_at=0.0)
    assert objects.ready and changes == [("c1", {"job-1"}), ("c1", {"job-1"})]
    group, pods = objects.gang("job-1", 2)
    assert group is not None and group["metadata"]["name"] == "pg" and group["spec"] == {"minMember": 2}
    assert sorted(p["metadata"]["name"] for p in pods) == ["p0", "p1"]
    # slimmed: the pod spec keeps only nodeName (no env, no secrets)
    assert pods[0]["spec"] == {"nodeName": "n1"}
    listed = objects.objects_of("job-1")
    assert [o.name for o in listed] == ["old", "p0", "p1", "pg"]  # pods first: the delete order
    assert {o.epoch for o in listed} == {1, 2} and all(o.cluster == "c1" for o in listed)
    # a re-list's DELETED carries only the name; MODIFIED moves an object between epochs
    objects.apply(PODS.key, [("DELETED", {"metadata": {"name": "old", "namespace": "vision"}}),
                             ("MODIFIED", _obj("p1", epoch="3", rv="7"))], resource_version="8", received_at=0.0)
    assert [o.name for o in objects.objects_of("job-1")] == ["p0", "p1", "pg"]
    assert [p["metadata"]["name"] for p in objects.gang("job-1", 2)[1]] == ["p0"]
    assert objects.known(PODS.key) == {"vision/p0": "1", "vision/p1": "7"}
    objects.apply(PODS.key, [("DELETED", _obj("p0")), ("DELETED", _obj("p1"))], resource_version="9",
                  received_at=0.0)
    objects.apply(VOLCANO_GROUPS.key, [("DELETED", _obj("pg"))], resource_version="10", received_at=0.0)
    assert objects.objects_of() == [] and objects.job_uids() == set()


def test_malformed_objects_neither_crash_the_index_nor_join_a_gang(
        index: tuple[ClusterObjects, list[tuple[str, set[str]]]]) -> None:
    objects, _ = index
    nameless = {"metadata": {"namespace": "vision", "labels": {LABEL_JOB_UID: "job-1"}}}
    bad_labels = {"metadata": {"name": "weird", "namespace": "vision", "labels": ["not", "a", "map"]}}
    no_meta: dict[str, Any] = {"kind": "Pod"}
    objects.apply(PODS.key, [("ADDED", nameless), ("ADDED", bad_labels), ("ADDED", no_meta),
                             ("ADDED", _obj("garbage-epoch", epoch="two")),
                             ("ADDED", _obj("huge-epoch", epoch="1" * 40))], resource_version="3", received_at=0.0)
    assert objects.gang("job-1", 2) == (None, [])
    listed = {o.name: o for o in objects.objects_of()}
    assert set(listed) == {"weird", "garbage-epoch", "huge-epoch"}
    assert listed["garbage-epoch"].epoch is None and listed["huge-epoch"].epoch is None
    assert listed["weird"].job_uid == ""
    # objects of an unknown resource are ignored
    objects.apply("nodes", [("ADDED", _obj("n1"))], resource_version="4", received_at=0.0)
    assert "nodes" not in objects.objects


def _member(epoch: int | None = 2, *, cluster: str = "c1", job_uid: str = "job-1") -> MemberObject:
    return MemberObject(cluster=cluster, resource=PODS, namespace="vision", name="p0", uid="u", job_uid=job_uid,
                        job_namespace="vision", job_name="resnet", epoch=epoch, deleting=False)


def _job(cluster: str | None, epoch: int, *, uid: str = "job-1", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "name": "resnet", "namespace": "vision"}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    placement: dict[str, Any] = {"epoch": epoch}
    if cluster:
        placement["cluster"] = cluster
    return {"metadata": meta, "status": {"placement": placement}}


@pytest.mark.parametrize(("obj", "job", "reason"), [
    (_member(2), _job("c1", 2), None),  # live
    (_member(2), None, "job-gone"),
    (_member(2), _job("c1", 2, uid="a-new-job-of-the-same-name"), "job-gone"),
    (_member(1), _job("c1", 2), "stale-epoch"),
    (_member(1), _job("c2", 2), "stale-epoch"),
    (_member(2), _job(None, 2), "not-placed-here"),  # pulled back / requeued, not placed again yet
    (_member(2), _job("c2", 2), "not-placed-here"),
    (_member(3), _job("c1", 2), None),  # newer than the job: never delete what cannot be explained
    (_member(None), _job("c1", 2), "unlabelled"),
    (_member(2, job_uid=""), _job("c1", 2), "unlabelled"),
    (_member(1), _job("c1", 2, deleting=True), None),  # the finalizer path deletes it
])
def test_the_orphan_rule(obj: MemberObject, job: dict[str, Any] | None, reason: str | None) -> None:
    assert orphan_reason(obj, job) == reason


# ---------------------------------------------------------------- fed by member sync's one watch


def test_fed_from_the_member_watch_it_keeps_only_this_hubs_objects() -> None:
    """Member sync's pod watch sees every pod of the cluster: the index keeps this hub's (its label), and an
    object that loses the label leaves it."""
    changes: list[tuple[str, set[str]]] = []
    objects = ClusterObjects("c1", (PODS,), lambda cluster, uids: changes.append((cluster, uids)),
                             hub_id="federator")
    foreign = _obj("theirs", uid="job-9")
    foreign["metadata"]["labels"][LABEL_HUB] = "another-hub"
    plain = {"metadata": {"name": "web-0", "namespace": "default", "resourceVersion": "3"}}
    objects.apply(PODS.key, [("ADDED", _obj("p0")), ("ADDED", foreign), ("ADDED", plain)], resource_version="",
                  received_at=0.0)
    assert objects.ready and [o.name for o in objects.objects_of()] == ["p0"]
    unlabelled = _obj("p0", rv="4")
    del unlabelled["metadata"]["labels"][LABEL_HUB]
    objects.apply(PODS.key, [("MODIFIED", unlabelled)], resource_version="", received_at=0.0)
    assert objects.objects_of() == [] and changes[-1] == ("c1", {"job-1"})


def test_pods_that_leave_with_a_checkpoint_report_are_kept_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    """An evicted copy that saves, reports and exits at once: its report is in the pod's last state only (the
    DELETED event's object). The index keeps such pods, per job and epoch, as they left (slimmed), a bounded
    number; pods without a report, foreign pods, and a re-list's name-only DELETED keep nothing."""
    objects = ClusterObjects("c1", (PODS,), lambda cluster, uids: None, hub_id="federator")
    report = {ANNOTATION_CHECKPOINT: json.dumps({"step": 9, "location": "s3://b/9"})}

    def reporting(name: str, **kw: Any) -> dict[str, Any]:
        body = _obj(name, **kw)
        body["metadata"]["annotations"] = dict(report)
        return body

    foreign = reporting("theirs", uid="job-9")
    foreign["metadata"]["labels"][LABEL_HUB] = "another-hub"
    objects.apply(PODS.key, [("ADDED", _obj("p0")), ("ADDED", _obj("p1")), ("ADDED", _obj("p2"))],
                  resource_version="", received_at=0.0)
    objects.apply(PODS.key, [("MODIFIED", reporting("p1")), ("DELETED", reporting("p1")), ("DELETED", _obj("p0")),
                             ("DELETED", foreign), ("DELETED", {"metadata": {"name": "p2", "namespace": "vision"}})],
                  resource_version="", received_at=0.0)
    (left,) = objects.departed("job-1", 2)
    assert left["metadata"]["name"] == "p1" and left["metadata"]["annotations"] == report
    assert "containers" not in left.get("spec", {})  # slimmed: no env
    assert objects.departed("job-1", 1) == [] and objects.departed("job-9", 2) == []
    assert objects.gang("job-1", 2)[1] == []  # gone from the gang
    # a pod that loses this hub's label leaves with the report it last showed
    objects.apply(PODS.key, [("ADDED", reporting("p3", epoch="3"))], resource_version="", received_at=0.0)
    unlabelled = _obj("p3", epoch="3", rv="9")
    del unlabelled["metadata"]["labels"][LABEL_HUB]
    objects.apply(PODS.key, [("MODIFIED", unlabelled)], resource_version="", received_at=0.0)
    assert [p["metadata"]["name"] for p in objects.departed("job-1", 3)] == ["p3"]
    # bounded: the oldest go first
    monkeypatch.setattr(memberobjects, "MAX_DEPARTED_REPORTS", 3)
    objects.apply(PODS.key, [("DELETED", reporting(f"q{i}", uid=f"job-q{i}")) for i in range(5)],
                  resource_version="", received_at=0.0)
    assert objects.departed("job-1", 2) == [] and objects.departed("job-q0", 2) == []
    assert [len(objects.departed(f"job-q{i}", 2)) for i in range(2, 5)] == [1, 1, 1]


def test_after_a_resumed_watch_the_index_is_complete_only_once_seeded_and_the_watch_wins() -> None:
    """A sync resumed from a checkpoint sends only changes: its batches do not make the index complete; one
    list of this hub's objects does. What the watch touched while that list was in flight is newer than or
    as new as the list's copy (deleted ones stay deleted)."""
    objects = ClusterObjects("c1", (PODS,), lambda cluster, uids: None, hub_id="federator")
    objects.awaiting_seed.add(PODS.key)
    objects.apply(PODS.key, [("MODIFIED", _obj("changed", rv="10"))], resource_version="", received_at=0.0)
    assert not objects.ready  # a batch of changes says nothing about the pods that did not change
    objects.begin_seed(PODS.key)
    objects.apply(PODS.key, [("DELETED", _obj("gone", rv="11")), ("MODIFIED", _obj("moved", rv="12",
                                                                                 epoch="3"))],
                  resource_version="", received_at=0.0)
    objects.seeded(PODS.key, [_obj("still", rv="5"), _obj("gone", rv="6"), _obj("moved", rv="7", epoch="2")])
    assert objects.ready and not objects.seeding
    by_name = {o.name: o for o in objects.objects_of()}
    assert sorted(by_name) == ["changed", "moved", "still"]  # "gone" is not brought back by the older list
    assert by_name["moved"].epoch == 3  # the watch's newer copy, not the list's
    # a failed seeding list leaves the index incomplete (and the keys it was tracking untracked)
    other = ClusterObjects("c2", (PODS,), lambda cluster, uids: None, hub_id="federator")
    other.awaiting_seed.add(PODS.key)
    other.begin_seed(PODS.key)
    other.seed_failed(PODS.key)
    other.apply(PODS.key, [("ADDED", _obj("p0"))], resource_version="", received_at=0.0)
    assert not other.ready and not other.seeding


@pytest.mark.parametrize(("worker", "kept"), [({"replicas": 3}, 3), ({}, 1), ({"replicas": "3"}, None),
                                              ({"replicas": True}, None)])
def test_a_member_copy_keeps_only_the_size_its_operator_resizes_in_place(worker: dict[str, Any],
                                                                          kept: int | None) -> None:
    """A PyTorchJob copy (operator mode) is slimmed like the rest but keeps its Worker replicas (dispatch compares
    it with the gang's size); a JobSet copy keeps no spec at all."""
    pytorch, jobset = JOB_KIND_RESOURCES["PyTorchJob.kubeflow.org"], JOB_KIND_RESOURCES["JobSet.jobset.x-k8s.io"]
    objects = ClusterObjects("c1", (PODS, pytorch, jobset), lambda cluster, uids: None)
    copy = _obj("resnet", spec={"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {
        **worker, "template": {"spec": {"containers": [{"env": [{"name": "SECRET", "value": "x"}]}]}}}},
        "elasticPolicy": {"minReplicas": 1, "maxReplicas": 3}})
    objects.apply(pytorch.key, [("ADDED", copy)], resource_version="3", received_at=0.0)
    found = objects.member_copy("job-1", "PyTorchJob.kubeflow.org", 2)
    assert found is not None
    assert found[1].get("spec") == ({"pytorchReplicaSpecs": {"Worker": {"replicas": kept}}} if kept else None)
    objects.apply(jobset.key, [("ADDED", _obj("js", spec={"replicatedJobs": [{"name": "w", "replicas": 2}]}))],
                  resource_version="4", received_at=0.0)
    found = objects.member_copy("job-1", "JobSet.jobset.x-k8s.io", 2)
    assert found is not None and "spec" not in found[1]
