"""The pure scheduling cycle: property tests (never a partial gang, never an
overcommitted node, whatever the order of arrivals, deletions, completions
and failed binds) and table tests of PodGroup phases per scheduler kind."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from federator.sim.fit import node_info, pod_requirements, resource_units, static_misfit
from federator.sim.scheduler import (
    COSCHEDULING,
    KUBE_BATCH,
    VOLCANO,
    GroupCounts,
    GroupEntry,
    GroupKind,
    GroupVerdict,
    SchedulerState,
    desired_group_status,
    group_phase,
    schedule_cycle,
)

SCHEDULERS = {"volcano": "volcano", "scheduler-plugins-scheduler": "coscheduling", "kube-batch": "kube-batch",
              "default-scheduler": "default"}
KIND_SCHED = {VOLCANO: "volcano", COSCHEDULING: "scheduler-plugins-scheduler", KUBE_BATCH: "kube-batch"}


def make_node(name: str, *, cpu: int, gpus: int) -> dict[str, Any]:
    alloc = {"cpu": str(cpu), "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "resourceVersion": "1"},
            "spec": {}, "status": {"allocatable": alloc, "capacity": alloc,
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


@dataclass
class Model:
    """The test's own record of the cluster (what the store would hold),
    driving SchedulerState exactly as the watch would."""

    state: SchedulerState = field(default_factory=lambda: SchedulerState(scheduler_types=SCHEDULERS))
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, tuple[GroupKind, dict[str, Any]]] = field(default_factory=dict)
    rv: int = 10
    uid: int = 0
    #: groups that lost a bound member (deleted or finished): the strong
    #: "0 or >= minMember bound" invariant no longer applies to them
    disturbed: set[str] = field(default_factory=set)

    def _next(self) -> str:
        self.rv += 1
        return str(self.rv)

    def add_node(self, name: str, *, cpu: int, gpus: int) -> None:
        self.nodes[name] = make_node(name, cpu=cpu, gpus=gpus)
        self.state.apply_node(self.nodes[name])

    def toggle_cordon(self, name: str) -> None:
        node = copy.deepcopy(self.nodes[name])
        node["spec"]["unschedulable"] = not node["spec"].get("unschedulable", False)
        self.nodes[name] = node
        self.state.apply_node(node)

    def add_group(self, kind: GroupKind, name: str, min_member: int) -> None:
        self.uid += 1
        obj = {"apiVersion": f"{kind.group}/{kind.version}", "kind": "PodGroup",
               "metadata": {"name": name, "namespace": "ns", "uid": f"g{self.uid}", "resourceVersion": self._next()},
               "spec": {"minMember": min_member}}
        self.groups[f"{kind.group}/ns/{name}"] = (kind, obj)
        self.state.apply_group(kind, obj)

    def delete_group(self, key: str) -> None:
        kind, obj = self.groups.pop(key)
        self.state.delete_group(kind, "ns", obj["metadata"]["name"])

    def add_pod(self, name: str, *, cpu_m: int, gpus: int, scheduler: str, group: tuple[GroupKind, str] | None,
                priority: int = 0) -> None:
        self.uid += 1
        meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"p{self.uid}",
                                "resourceVersion": self._next(), "labels": {}, "annotations": {}}
        if group is not None:
            kind, gname = group
            if kind.pod_label:
                meta["labels"][kind.pod_label] = gname
            else:
                meta["annotations"][kind.pod_annotations[0]] = gname
        obj = {"metadata": meta, "spec": {
            "schedulerName": scheduler, "priority": priority,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": f"{cpu_m}m", "nvidia.com/gpu": gpus}}}]},
            "status": {"phase": "Pending"}}
        self.pods[f"ns/{name}"] = obj
        self.state.apply_pod(obj)

    def _group_of(self, key: str) -> str | None:
        entry = self.state.pods.get(key)
        return entry.group if entry else None

    def delete_pod(self, key: str) -> None:
        obj = self.pods.pop(key)
        if obj["spec"].get("nodeName") and (g := self._group_of(key)):
            self.disturbed.add(g)
        self.state.delete_pod("ns", obj["metadata"]["name"])

    def finish_pod(self, key: str, phase: str) -> None:
        obj = self.pods[key]
        if not obj["spec"].get("nodeName") or obj["status"]["phase"] in ("Succeeded", "Failed"):
            return
        if g := self._group_of(key):
            self.disturbed.add(g)
        obj = copy.deepcopy(obj)
        obj["status"]["phase"] = phase
        obj["metadata"]["resourceVersion"] = self._next()
        self.pods[key] = obj
        self.state.apply_pod(obj)

    def cycle(self, *, fail: frozenset[int] = frozenset(), stale_echo: bool = False) -> None:
        ready_before = {g: self.bound_ready(g) for g in self.groups}
        result = schedule_cycle(self.state, max_pods=10_000)
        per_group: dict[str, int] = {}
        for i, (key, node) in enumerate(sorted(result.binds.items())):
            entry = self.state.pods[key]
            assert entry.scheduler_name in SCHEDULERS
            assert not entry.deleting
            assert not self.nodes[node]["spec"].get("unschedulable"), (key, node)
            if stale_echo:
                # a watch event from before the bind arrives while it is in flight
                self.state.apply_pod(self.pods[key])
            if i in fail:
                self.state.forget(key)
                if entry.group:
                    self.disturbed.add(entry.group)
                continue
            obj = copy.deepcopy(self.pods[key])
            obj["spec"]["nodeName"] = node
            obj["metadata"]["resourceVersion"] = self._next()
            self.pods[key] = obj
            self.state.bound(key, obj)
            if entry.group:
                per_group[entry.group] = per_group.get(entry.group, 0) + 1
        # Invariant 1: a bind batch of a gang brings it to >= minMember
        # (unless some of its binds failed to be written: a real race).
        for g, k in per_group.items():
            if g in self.disturbed:
                continue
            kind, gobj = self.groups[g]
            assert ready_before[g] + k >= gobj["spec"]["minMember"], (g, ready_before[g], k)
        self.check()
        if not fail:
            self.check_no_pending_single_fits()

    def bound_ready(self, gkey: str) -> int:
        kind, gobj = self.groups[gkey]
        n = 0
        for obj in self.pods.values():
            if obj["spec"].get("nodeName") and obj["status"]["phase"] != "Failed" and \
                    kind.group_of(obj) == gobj["metadata"]["name"] and \
                    SCHEDULERS.get(obj["spec"]["schedulerName"]) == kind.scheduler_type:
                n += 1
        return n

    def usage(self) -> dict[str, dict[str, int]]:
        used: dict[str, dict[str, int]] = {n: {} for n in self.nodes}
        for obj in self.pods.values():
            node = obj["spec"].get("nodeName")
            if node and obj["status"]["phase"] not in ("Succeeded", "Failed"):
                for r, u in pod_requirements(obj).requests:
                    used[node][r] = used[node].get(r, 0) + u
        return used

    def check(self) -> None:
        # Invariant 2: no node is overcommitted (recomputed from the pods).
        for node, used in self.usage().items():
            alloc = self.nodes[node]["status"]["allocatable"]
            for r, u in used.items():
                assert u <= resource_units(r, alloc.get(r, "0")), (node, r, u)
        assert self.state.ledger.overcommitted() == []
        # Invariant 3: an undisturbed gang has 0 or >= minMember pods bound.
        for g, (kind, gobj) in self.groups.items():
            if g in self.disturbed:
                continue
            n = self.bound_ready(g)
            assert n == 0 or n >= gobj["spec"]["minMember"], (g, n)

    def check_no_pending_single_fits(self) -> None:
        used = self.usage()
        for key in self.state.pending:
            entry = self.state.pods[key]
            if entry.group is not None or entry.requirements is None:
                continue
            for node, obj in self.nodes.items():
                info = node_info(obj)
                info.used = dict(used[node])
                if static_misfit(entry.requirements.placement, info) is None:
                    assert not info.fits(entry.requirements.requests), (key, node)


kinds = st.sampled_from([VOLCANO, COSCHEDULING, KUBE_BATCH])
op = st.one_of(
    st.tuples(st.just("gang"), kinds, st.integers(1, 5), st.integers(0, 6), st.integers(0, 4), st.integers(0, 3000)),
    st.tuples(st.just("single"), st.sampled_from(list(SCHEDULERS) + ["someone-else"]), st.integers(0, 4),
              st.integers(0, 3000), st.integers(-5, 5)),
    st.tuples(st.just("delete"), st.integers(0, 1000)),
    st.tuples(st.just("finish"), st.integers(0, 1000), st.sampled_from(["Succeeded", "Failed"])),
    st.tuples(st.just("delete-group"), st.integers(0, 1000)),
    st.tuples(st.just("node"), st.integers(1, 16), st.integers(0, 8)),
    st.tuples(st.just("cordon"), st.integers(0, 100)),
    st.tuples(st.just("cycle"), st.frozensets(st.integers(0, 8), max_size=3), st.booleans()),
)


@settings(max_examples=200, deadline=None)
@example(nodes=[(4, 0)], ops=[("single", "default-scheduler", 0, 100, 0), ("cycle", frozenset(), False),
                              ("cordon", 0), ("single", "default-scheduler", 0, 100, 0)])  # node update after a bind
@given(nodes=st.lists(st.tuples(st.integers(1, 32), st.integers(0, 8)), min_size=1, max_size=5),
       ops=st.lists(op, min_size=1, max_size=40))
def test_cycle_never_splits_a_gang_nor_overcommits(
    nodes: list[tuple[int, int]], ops: list[tuple[Any, ...]]
) -> None:
    m = Model()
    for i, (cpu, gpus) in enumerate(nodes):
        m.add_node(f"n{i}", cpu=cpu, gpus=gpus)
    counter = 0
    for o in ops:
        counter += 1
        if o[0] == "gang":
            _, kind, min_member, extra, gpus, cpu_m = o
            gname = f"g{counter}"
            members = max(0, min_member + extra - 2)  # sometimes fewer than minMember
            # arrival order varies: the group may come before, between or after its pods
            if counter % 3 == 0:
                m.add_group(kind, gname, min_member)
            for j in range(members):
                m.add_pod(f"{gname}-{j}", cpu_m=cpu_m, gpus=gpus, scheduler=KIND_SCHED[kind], group=(kind, gname))
                if counter % 3 == 1 and j == 0:
                    m.add_group(kind, gname, min_member)
            if f"{kind.group}/ns/{gname}" not in m.groups:
                m.add_group(kind, gname, min_member)
        elif o[0] == "single":
            _, sched, gpus, cpu_m, prio = o
            m.add_pod(f"s{counter}", cpu_m=cpu_m, gpus=gpus, scheduler=sched, group=None, priority=prio)
        elif o[0] == "delete" and m.pods:
            m.delete_pod(sorted(m.pods)[o[1] % len(m.pods)])
        elif o[0] == "finish" and m.pods:
            m.finish_pod(sorted(m.pods)[o[1] % len(m.pods)], o[2])
        elif o[0] == "delete-group" and m.groups:
            m.delete_group(sorted(m.groups)[o[1] % len(m.groups)])
        elif o[0] == "node":
            m.add_node(f"n{len(m.nodes)}", cpu=o[1], gpus=o[2])
        elif o[0] == "cordon":
            m.toggle_cordon(sorted(m.nodes)[o[1] % len(m.nodes)])
        elif o[0] == "cycle":
            m.cycle(fail=o[1], stale_echo=o[2])
        m.check()
    m.cycle()
    m.cycle()  # quiescent: nothing left that fits


def test_gang_waits_for_min_member_then_binds_whole() -> None:
    m = Model()
    m.add_node("n0", cpu=64, gpus=8)
    m.add_node("n1", cpu=64, gpus=8)
    m.add_group(VOLCANO, "g", 4)
    for j in range(3):
        m.add_pod(f"g-{j}", cpu_m=1000, gpus=4, scheduler="volcano", group=(VOLCANO, "g"))
    m.cycle()
    assert m.bound_ready("VOLCANO" and "scheduling.volcano.sh/ns/g") == 0
    verdict = m.state.groups["scheduling.volcano.sh/ns/g"].verdict
    assert verdict is not None and verdict.reason == "NotEnoughTasks"
    m.add_pod("g-3", cpu_m=1000, gpus=4, scheduler="volcano", group=(VOLCANO, "g"))
    m.cycle()
    assert m.bound_ready("scheduling.volcano.sh/ns/g") == 4
    # a fifth member beyond minMember does not fit; it stays pending, the gang stays bound
    m.add_pod("g-4", cpu_m=1000, gpus=4, scheduler="volcano", group=(VOLCANO, "g"))
    m.cycle()
    assert "ns/g-4" in m.state.pending
    assert m.bound_ready("scheduling.volcano.sh/ns/g") == 4


def test_unschedulable_gang_reports_why_and_is_not_retried_until_capacity_frees() -> None:
    m = Model()
    for i in range(3):
        m.add_node(f"n{i}", cpu=64, gpus=8)
    m.add_group(COSCHEDULING, "big", 4)
    for j in range(4):
        m.add_pod(f"big-{j}", cpu_m=1000, gpus=8, scheduler="scheduler-plugins-scheduler",
                  group=(COSCHEDULING, "big"))
    result = schedule_cycle(m.state)
    assert result.binds == {}
    msg = result.unschedulable["ns/big-0"]
    assert "4/4 tasks in gang unschedulable" in msg
    assert "only 3 of the 4 pods still needed fit" in msg
    assert msg.endswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    # nothing changed: the gang is not even looked at again
    again = schedule_cycle(m.state)
    assert again.unschedulable == {} and again.binds == {}
    m.add_node("n3", cpu=64, gpus=8)
    m.cycle()
    assert m.bound_ready("scheduling.x-k8s.io/ns/big") == 4


def test_missing_group_and_foreign_scheduler_and_priority() -> None:
    m = Model()
    m.add_node("n0", cpu=4, gpus=0)
    m.add_pod("orphan", cpu_m=100, gpus=0, scheduler="kube-batch", group=(KUBE_BATCH, "nope"))
    m.add_pod("foreign", cpu_m=100, gpus=0, scheduler="someone-else", group=None)
    m.add_pod("low", cpu_m=3000, gpus=0, scheduler="default-scheduler", group=None, priority=1)
    m.add_pod("high", cpu_m=3000, gpus=0, scheduler="default-scheduler", group=None, priority=100)
    result = schedule_cycle(m.state)
    assert result.unschedulable["ns/orphan"] == 'podgroup "ns/nope" not found'
    assert "ns/foreign" not in result.binds and "ns/foreign" not in result.unschedulable
    assert result.binds == {"ns/high": "n0"}
    assert result.unschedulable["ns/low"] == "0/1 nodes are available: 1 Insufficient cpu."
    # the group appears: its pod is bound (minMember 1)
    m.state.bound("ns/high", None)
    m.add_group(KUBE_BATCH, "nope", 1)
    assert schedule_cycle(m.state).binds == {"ns/orphan": "n0"}


def test_failed_bind_is_forgotten_and_retried() -> None:
    m = Model()
    m.add_node("n0", cpu=4, gpus=0)
    m.add_pod("p", cpu_m=4000, gpus=0, scheduler="default-scheduler", group=None)
    m.cycle(fail=frozenset({0}))
    assert "ns/p" in m.state.pending
    assert m.state.ledger.nodes["n0"].used.get("cpu", 0) == 0
    m.cycle()
    assert m.pods["ns/p"]["spec"]["nodeName"] == "n0"


# ---------------------------------------------------------------- group phases


@pytest.mark.parametrize(
    ("kind", "min_member", "counts", "phase"),
    [
        (VOLCANO, 2, GroupCounts(2, 0, 0, 0, 0), "Pending"),
        (VOLCANO, 2, GroupCounts(0, 2, 0, 0, 0), "Inqueue"),
        (VOLCANO, 2, GroupCounts(0, 1, 1, 0, 0), "Inqueue"),
        (VOLCANO, 2, GroupCounts(0, 0, 2, 0, 0), "Running"),
        (VOLCANO, 2, GroupCounts(0, 0, 1, 1, 0), "Running"),
        (VOLCANO, 2, GroupCounts(0, 0, 0, 2, 0), "Completed"),
        (VOLCANO, 2, GroupCounts(0, 0, 1, 0, 1), "Unknown"),
        (COSCHEDULING, 2, GroupCounts(2, 0, 0, 0, 0), "Pending"),
        (COSCHEDULING, 2, GroupCounts(0, 2, 0, 0, 0), "Scheduling"),
        (COSCHEDULING, 2, GroupCounts(0, 0, 2, 0, 0), "Running"),
        (COSCHEDULING, 2, GroupCounts(0, 0, 0, 2, 0), "Finished"),
        (COSCHEDULING, 2, GroupCounts(0, 0, 1, 0, 1), "Failed"),
        (KUBE_BATCH, 2, GroupCounts(2, 0, 0, 0, 0), "Pending"),
        (KUBE_BATCH, 2, GroupCounts(0, 0, 2, 0, 0), "Running"),
        (KUBE_BATCH, 2, GroupCounts(0, 0, 1, 0, 1), "Unknown"),
    ],
)
def test_group_phase(kind: GroupKind, min_member: int, counts: GroupCounts, phase: str) -> None:
    assert group_phase(kind, min_member, counts) == phase


def test_desired_status_conditions_and_counts() -> None:
    g = GroupEntry(key="k", kind=VOLCANO, namespace="ns", name="g", uid="u", rv=1, min_member=2,
                   obj={"status": {}}, verdict=GroupVerdict(scheduled=False, reason="NotEnoughResources",
                                                           message="why"))
    status = desired_group_status(g, [], now="2024-01-01T00:00:00Z")
    assert status["phase"] == "Pending"
    (cond,) = status["conditions"]
    assert cond["type"] == "Unschedulable" and cond["reason"] == "NotEnoughResources" and cond["message"] == "why"
    assert cond["transitionID"] and cond["lastTransitionTime"] == "2024-01-01T00:00:00Z"
    # unchanged verdict: the condition (and its timestamp) is kept, so no rewrite happens
    g.obj = {"status": status}
    assert desired_group_status(g, [], now="2030-01-01T00:00:00Z") == status
    cos = GroupEntry(key="c", kind=COSCHEDULING, namespace="ns", name="c", uid="u", rv=1, min_member=1,
                     obj={}, first_attempt="2024-01-01T00:00:00Z")
    assert desired_group_status(cos, [], now="x") == {"phase": "Pending", "scheduleStartTime": "2024-01-01T00:00:00Z"}
