"""Elastic gangs in the simulated schedulers: a PodGroup whose minMember is
below its pod count is admitted as soon as its minimum fits, its other pods
are bound one by one when room appears (never by preempting), a pod created
later into a running group joins it, and deleting pods above the minimum
leaves the group running. Every gang scheduler kind, through a real
SimCluster (scheduler and kubelet loops over the store the API serves), plus
table tests of the pure cycle for where the real schedulers differ: Volcano,
kube-batch and KAI place pods beyond a minimum only after the gangs of the
same priority still short of theirs, coscheduling and native in the gang's
own turn; coscheduling's PodGroup goes Failed for good when one member fails."""

from __future__ import annotations

from typing import Any

import pytest
from test_scheduler import (
    GANG,
    GROUP_RT,
    bound,
    check_no_overcommit,
    condition,
    pod,
    podgroup,
    pods_of,
    profile,
    start,
    wait_for,
)

from federator.sim import kinds
from federator.sim.scheduler import (
    COSCHEDULING,
    KAI,
    KAI_LAST_START_ANNOTATION,
    KUBE_BATCH,
    NATIVE,
    VOLCANO,
    GroupCounts,
    GroupEntry,
    GroupKind,
    SchedulerState,
    desired_group_status,
    group_phase,
    schedule_cycle,
)
from federator.sim.server import SimCluster

JSON = dict[str, Any]
ALL_KINDS = [VOLCANO, COSCHEDULING, KUBE_BATCH, NATIVE, KAI]
WAIT = 30.0  # an upper bound for a loaded machine; every wait ends on its event


# ---------------------------------------------------------------- a live cluster, every kind


async def group_admitted(cluster: SimCluster, kind: GroupKind, name: str, running: int) -> JSON | None:
    """The group as its scheduler shows an admitted gang with `running` pods running, else None."""
    g = await cluster.storage.get(GROUP_RT[kind], namespace="team", name=name)
    status = g.get("status") or {}
    if kind is NATIVE:
        scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodGroupScheduled"), None)
        ok = scheduled is not None and scheduled["status"] == "True"
    elif kind is KAI:
        ok = bool((g["metadata"].get("annotations") or {}).get(KAI_LAST_START_ANNOTATION))
    else:
        ok = status.get("phase") == "Running" and status.get("running") == running
    if not ok:
        return None
    pods = [p for p in await pods_of(cluster) if p["metadata"]["name"].startswith(f"{name}-")]
    live = [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    return g if len(live) == running else None


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.scheduler_type)
async def test_elastic_gang_runs_at_its_minimum_grows_when_room_frees_and_shrinks(kind: GroupKind) -> None:
    cluster = await start(profile(nodes=4, name=f"elastic-{kind.scheduler_type}"))
    try:
        # a plain pod holds one of the four nodes: room for three 8-GPU pods
        await cluster.storage.create(kinds.PODS, pod("filler", gpus=8), namespace="team")
        await wait_for("filler running", lambda: _phase(cluster, "filler", "Running"), timeout=WAIT)
        await cluster.storage.create(GROUP_RT[kind], podgroup(kind, "job", 2), namespace="team")
        for i in range(4):
            await cluster.storage.create(kinds.PODS, pod(f"job-{i}", gpus=8, kind=kind, group="job"),
                                         namespace="team")
        await wait_for("three of four running, group admitted", lambda: group_admitted(cluster, kind, "job", 3),
                       timeout=WAIT)
        pods = await pods_of(cluster)
        (waiting,) = [p for p in pods if p["metadata"]["name"].startswith("job-") and not p["spec"].get("nodeName")]

        async def explained() -> JSON | None:
            p = await cluster.storage.get(kinds.PODS, namespace="team", name=waiting["metadata"]["name"])
            c = condition(p, "PodScheduled")
            return c if c is not None and c["status"] == "False" else None

        why = await wait_for("the fourth pod says why it waits", explained, timeout=WAIT)
        assert why["reason"] == "Unschedulable"
        assert why["message"].endswith("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")
        # the gang's extra pod never preempts: the filler still runs
        assert await _phase(cluster, "filler", "Running")
        await check_no_overcommit(cluster)

        await cluster.storage.delete(kinds.PODS, namespace="team", name="filler")
        await wait_for("the fourth pod bound once room freed", lambda: group_admitted(cluster, kind, "job", 4),
                       timeout=WAIT)
        await check_no_overcommit(cluster)

        # shrink above the minimum: the group stays admitted
        for name in ("job-0", "job-1"):
            await cluster.storage.delete(kinds.PODS, namespace="team", name=name)

        async def shrunk() -> JSON | None:
            names = {p["metadata"]["name"] for p in await pods_of(cluster)}
            return await group_admitted(cluster, kind, "job", 2) if names == {"job-2", "job-3"} else None

        shrunk_group = await wait_for("shrunk to two, still admitted", shrunk, timeout=WAIT)
        if kind.has_conditions and kind is not NATIVE:
            assert not any(c["type"] == "Unschedulable" for c in shrunk_group["status"].get("conditions") or [])

        # grow: a pod created later into the running group is bound
        await cluster.storage.create(kinds.PODS, pod("job-9", gpus=8, kind=kind, group="job"), namespace="team")
        await wait_for("the late pod joined the running group", lambda: group_admitted(cluster, kind, "job", 3),
                       timeout=WAIT)
        assert len(bound(await pods_of(cluster), "job-")) == 3
        await check_no_overcommit(cluster)
    finally:
        await cluster.stop()


async def _phase(cluster: SimCluster, name: str, phase: str) -> bool:
    p = await cluster.storage.get(kinds.PODS, namespace="team", name=name)
    return bool(p["status"].get("phase") == phase)


# ---------------------------------------------------------------- the pure cycle: whose pods go first

SCHEDULERS = {GANG[k]: k.scheduler_type for k in ALL_KINDS} | {"default-scheduler": "default"}


class Cycle:
    """A SchedulerState fed as the watch would, for one gang kind."""

    def __init__(self, kind: GroupKind, *, nodes: int) -> None:
        self.kind = kind
        self.state = SchedulerState(scheduler_types=SCHEDULERS, kai_queues=["default-queue"])
        self.rv = 0
        for i in range(nodes):
            alloc = {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
            self.state.apply_node({"metadata": {"name": f"n{i}", "labels": {}, "resourceVersion": "1"}, "spec": {},
                                   "status": {"allocatable": alloc, "capacity": alloc,
                                              "conditions": [{"type": "Ready", "status": "True"}]}})
        self.state.apply_priority_class({"metadata": {"name": "high"}, "value": 100})

    def _rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def group(self, name: str, min_member: int, *, pods: int, high: bool = False) -> None:
        kind = self.kind
        spec = kind.group_spec(min_member)
        if high:
            spec["priorityClassName"] = "high"
        created = f"2024-01-01T00:00:{self.rv:02d}Z"
        self.state.apply_group(kind, {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                                                   "resourceVersion": self._rv(), "creationTimestamp": created},
                                      "spec": spec})
        for i in range(pods):
            body: JSON = {"metadata": {"name": f"{name}-{i}", "namespace": "ns", "uid": f"uid-{name}-{i}",
                                       "resourceVersion": self._rv(), "creationTimestamp": created},
                          "spec": {"schedulerName": GANG[kind], "priority": 100 if high else 0,
                                   "containers": [{"name": "c", "resources": {"requests": {
                                       "cpu": "1", "nvidia.com/gpu": "8"}}}]},
                          "status": {"phase": "Pending"}}
            kind.join(body, name)
            self.state.apply_pod(body)

    def run(self) -> dict[str, int]:
        """One cycle, its binds taken as written; bound pods per group."""
        result = schedule_cycle(self.state)
        for key in result.binds:
            self.state.bound(key, None)
        counts: dict[str, int] = {}
        for entry in self.state.pods.values():
            if entry.bound:
                counts[entry.name.rsplit("-", 1)[0]] = counts.get(entry.name.rsplit("-", 1)[0], 0) + 1
        assert not self.state.ledger.overcommitted()
        return counts


EXTRAS_LAST = {VOLCANO, KUBE_BATCH, KAI}


#: (nodes of 8 GPUs, gangs in creation order as (name, minMember, pods of 8 GPUs, high priority),
#:  pods bound per gang by Volcano/kube-batch/KAI, the same by coscheduling/native)
ORDER_CASES = {
    # Volcano/kube-batch: the gang plugin orders ready jobs last; KAI: the elastic plugin. coscheduling and
    # native: pods in queue order (priority, then group age), pods beyond the minimum in the gang's own turn.
    "beyond-a-minimum-yields-to-a-gang-short-of-its-own": (
        3, [("older", 1, 3, False), ("newer", 2, 2, False)], {"older": 1, "newer": 2}, {"older": 3}),
    "admitted-gangs-take-one-pod-each-in-turn": (
        4, [("a", 1, 3, False), ("b", 1, 3, False)], {"a": 2, "b": 2}, {"a": 3, "b": 1}),
    # priority first: a higher-priority gang's extra pods go before a lower-priority gang's minimum
    "priority-before-readiness": (
        3, [("low", 2, 2, False), ("high", 1, 3, True)], {"high": 3}, {"high": 3}),
}


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.scheduler_type)
@pytest.mark.parametrize("case", ORDER_CASES)
def test_whose_pods_go_first(case: str, kind: GroupKind) -> None:
    nodes, gangs, extras_last, in_turn = ORDER_CASES[case]
    c = Cycle(kind, nodes=nodes)
    for name, min_member, pods, high in gangs:
        c.group(name, min_member, pods=pods, high=high)
    assert c.run() == (extras_last if kind in EXTRAS_LAST else in_turn)
    assert kind.extras_last == (kind in EXTRAS_LAST)


def test_room_that_appears_goes_to_the_pods_still_waiting() -> None:
    c = Cycle(VOLCANO, nodes=4)
    c.group("a", 1, pods=3)
    c.group("b", 1, pods=3)
    assert c.run() == {"a": 2, "b": 2}
    c.state.apply_node({"metadata": {"name": "n9", "labels": {}, "resourceVersion": "1"}, "spec": {},
                        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110",
                                                   "nvidia.com/gpu": "8"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}})
    assert c.run() == {"a": 3, "b": 2}


def test_extra_pods_that_fit_nowhere_wait_with_the_fit_error_and_keep_the_gang_admitted() -> None:
    c = Cycle(VOLCANO, nodes=2)
    c.group("g", 2, pods=4)
    result = schedule_cycle(c.state)
    assert len(result.binds) == 2
    waiting = sorted(set(result.unschedulable))
    assert waiting == ["ns/g-2", "ns/g-3"]
    assert result.unschedulable["ns/g-2"] == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    verdict = c.state.groups["scheduling.volcano.sh/ns/g"].verdict
    assert verdict is not None and verdict.scheduled
    for key in result.binds:
        c.state.bound(key, None)
    # nothing changed: not tried again
    again = schedule_cycle(c.state)
    assert again.binds == {} and again.unschedulable == {}


# ---------------------------------------------------------------- PodGroup phases of an elastic group


@pytest.mark.parametrize(
    ("kind", "counts", "previous", "phase"),
    [
        # one member failed, two others still run (minMember 2)
        (VOLCANO, GroupCounts(0, 0, 2, 0, 1), "Running", "Running"),
        (KUBE_BATCH, GroupCounts(0, 0, 2, 0, 1), "Running", "Running"),
        # scheduler-plugins' controller: Failed once any member failed, and Failed stays
        (COSCHEDULING, GroupCounts(0, 0, 2, 0, 1), "Running", "Failed"),
        (COSCHEDULING, GroupCounts(0, 0, 3, 0, 0), "Failed", "Failed"),
        # minMember pods succeeded: Finished even with others running, and it stays
        (COSCHEDULING, GroupCounts(0, 0, 1, 2, 0), "Running", "Finished"),
        (COSCHEDULING, GroupCounts(0, 0, 0, 2, 1), "Finished", "Finished"),
        # shrunk above the minimum
        (COSCHEDULING, GroupCounts(0, 0, 2, 0, 0), "Running", "Running"),
        (VOLCANO, GroupCounts(0, 0, 2, 0, 0), "Running", "Running"),
    ],
)
def test_elastic_group_phases(kind: GroupKind, counts: GroupCounts, previous: str, phase: str) -> None:
    assert group_phase(kind, 2, counts, previous=previous) == phase


def test_a_written_failed_coscheduling_phase_is_kept() -> None:
    g = GroupEntry(key="k", kind=COSCHEDULING, namespace="ns", name="g", uid="u", rv=1, min_member=2,
                   obj={"status": {"phase": "Failed", "failed": 1}})
    assert desired_group_status(g, [], now="x")["phase"] == "Failed"
