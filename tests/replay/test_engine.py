"""The engine: deterministic for a seed, the member model decides as the simulator's scheduler does,
the federator policy's queue selection changes no decision, and no node is ever overcommitted."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from replay_builders import TINY_CLUSTERS, federation, job, replay, synthetic_trace

from federator.replay.attributes import assign_attributes
from federator.replay.federated import FederatorPolicy
from federator.replay.member import GPU_PRODUCT_LABEL, GangCopy, Member, pod_requirements_of
from federator.replay.run import POLICIES, make_policy
from federator.replay.trace import load_trace
from federator.sim.fit import format_units
from federator.sim.scheduler import VOLCANO, SchedulerState, schedule_cycle


def _jobs(tmp_path: Path, *, seed: int = 3, per_cluster: int = 30):  # type: ignore[no-untyped-def]
    fed = federation()
    trace = load_trace(synthetic_trace(tmp_path / "trace", jobs_per_cluster=per_cluster))
    return assign_attributes(trace, fed, seed=seed), fed


@pytest.mark.parametrize("name", POLICIES)
def test_a_replay_is_deterministic_for_a_seed(tmp_path: Path, name: str) -> None:
    jobs, fed = _jobs(tmp_path)
    first_engine, first = replay(jobs, fed, make_policy(name, seed=3), seed=3)
    second_engine, second = replay(jobs, fed, make_policy(name, seed=3), seed=3)
    drop = {"wallSeconds"}
    assert {k: v for k, v in first.metrics.items() if k not in drop} == {
        k: v for k, v in second.metrics.items() if k not in drop
    }
    assert list(first_engine.started_at) == list(second_engine.started_at) or all(
        (math.isnan(a) and math.isnan(b)) or a == b
        for a, b in zip(first_engine.started_at, second_engine.started_at, strict=True)
    )
    assert first_engine.cluster_of == second_engine.cluster_of
    # Every job started ran to the end (a few ask for a fabric and GPU model no cluster has together:
    # those only fabric-blind policies run), and no member ever holds more than its nodes have.
    started = [j for j in jobs if not math.isnan(first_engine.started_at[j.index])]
    assert len(started) == len(jobs) - first.never_started
    assert all(not math.isnan(first_engine.finished_at[j.index]) for j in started)
    assert first.never_started <= 3
    if name in ("armada", "first-fit", "random"):
        assert first.never_started == 0
    for member in first_engine.members.values():
        assert member.ledger.overcommitted() == []
        assert member.used == dict.fromkeys(member.used, 0), "every gang released what it used"
    assert first.metrics["meanQueueDelaySeconds"] >= 0
    assert 0 < first.metrics["gpuUtilization"] <= 1


def test_the_seed_changes_the_figures(tmp_path: Path) -> None:
    jobs_a, fed = _jobs(tmp_path, seed=1)
    jobs_b, _ = _jobs(tmp_path, seed=2)
    _, a = replay(jobs_a, fed, make_policy("karmada", seed=1), seed=1)
    _, b = replay(jobs_b, fed, make_policy("karmada", seed=2), seed=2)
    assert a.metrics["datasetBytesCopied"] != b.metrics["datasetBytesCopied"]


def test_queue_selection_changes_no_federator_decision(tmp_path: Path) -> None:
    # A federation too small for the trace: gangs queue, big ones age and take head-of-line holds.
    fed = federation(TINY_CLUSTERS.replace("nodes: 3", "nodes: 2").replace("nodes: 2, gpusPerNode: 8}\n"
                                                                             "        datasets: {imagenet",
                                                                             "nodes: 1, gpusPerNode: 8}\n"
                                                                             "        datasets: {imagenet"))
    trace = load_trace(synthetic_trace(tmp_path / "trace", jobs_per_cluster=30))
    jobs = assign_attributes(trace, fed, seed=5)
    selected = FederatorPolicy()
    everything = FederatorPolicy(exhaustive_queue=True)
    engine_a, a = replay(jobs, fed, selected, seed=5)
    engine_b, b = replay(jobs, fed, everything, seed=5)
    assert selected.decisions == everything.decisions
    assert a.metrics["p95QueueDelaySeconds"] > 0, "the scenario must queue"
    assert selected.cycles_with_holds > 0, "and exercise head-of-line holds"
    assert selected.gangs_evaluated < everything.gangs_evaluated


def _node_json(member: Member) -> list[dict[str, object]]:
    out = []
    for node in member.ledger.ordered_nodes():
        out.append({
            "metadata": {"name": node.name, "labels": dict(node.labels)},
            "status": {"allocatable": {k: format_units(k, v) for k, v in node.allocatable.items()},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })
    return out


def test_member_binds_exactly_what_the_simulators_scheduler_binds() -> None:
    fed = federation()
    spec = fed.cluster("beta")  # 2 V100 nodes and 1 A100 node, 8 GPUs each
    shapes = [  # (pods, GPUs per pod, model)
        (2, 8, None), (2, 8, None), (1, 4, "V100"), (1, 8, "V100"), (1, 2, None), (1, 4, "A100"),
        (1, 2, "V100"), (3, 1, None), (1, 8, None),
    ]
    jobs = [job(f"g{i}", index=i, home="beta", pods=p, gpus_per_pod=g, gpu_model=m) for i, (p, g, m) in enumerate(shapes)]

    member = Member(spec)
    copies = []
    for seq, j in enumerate(jobs):
        copy = GangCopy(j, "beta", seq, pod_requirements_of(j), tuple(f"ns/{j.uid}-{i}" for i in range(j.pods)))
        member.add(copy)
        copies.append(copy)
    member.cycle(lambda copy: None)
    ours = {key: node for c in copies for key, node in c.nodes.items()}

    state = SchedulerState(scheduler_types={"volcano": "volcano"})
    for node in _node_json(member):
        state.apply_node(node)
    for j in jobs:
        state.apply_group(VOLCANO, {"metadata": {"name": j.uid, "namespace": "ns", "uid": j.uid, "resourceVersion": "1"},
                                    "spec": {"minMember": j.pods}})
        for i in range(j.pods):
            requests = {"cpu": format_units("cpu", j.cpu_milli_per_pod), "memory": format_units("memory", j.memory_per_pod),
                        "nvidia.com/gpu": str(j.gpus_per_pod)}
            pod = {"metadata": {"name": f"{j.uid}-{i}", "namespace": "ns", "uid": f"{j.uid}-{i}", "resourceVersion": "1",
                                "annotations": {"scheduling.k8s.io/group-name": j.uid}},
                   "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "resources": {"requests": requests}}]}}
            if j.gpu_model:
                pod["spec"]["nodeSelector"] = {GPU_PRODUCT_LABEL: j.gpu_model}  # type: ignore[index]
            state.apply_pod(pod)
    theirs = schedule_cycle(state).binds
    assert ours == theirs
    bound = {c.job.uid for c in copies if c.state == "bound"}
    # g0 takes two nodes, g1 (two more) does not fit and none of it is bound; smaller gangs behind it are
    # backfilled onto the last V100 node as long as it has room.
    assert bound == {"g0", "g2", "g4", "g6"}, bound


def test_finishing_a_job_frees_its_nodes_for_the_next(tmp_path: Path) -> None:
    fed = federation()
    jobs = [job("a", index=0, home="gamma", pods=2, duration=100),
            job("b", index=1, home="gamma", pods=2, submitted=1, duration=100)]
    engine, result = replay(jobs, fed, make_policy("none", seed=1))
    assert engine.started_at[1] == 100
    assert result.metrics["makespanSeconds"] == 200
    assert result.metrics["gpuUtilization"] == pytest.approx(16 * 200 / (engine.total_gpus * 200))


def test_node_level_replicas_match_a_count_over_the_nodes() -> None:
    fed = federation()
    member = Member(fed.cluster("beta"))
    shapes = [(1, 5, None), (1, 3, "V100"), (2, 4, None), (1, 1, "A100")]
    for i, (p, g, m) in enumerate(shapes):
        j = job(f"g{i}", index=i, home="beta", pods=p, gpus_per_pod=g, gpu_model=m)
        member.add(GangCopy(j, "beta", i, pod_requirements_of(j), tuple(f"ns/g{i}-{k}" for k in range(p))))
    member.cycle(lambda copy: None)
    assert member.used["nvidia.com/gpu"] == 5 + 3 + 8 + 1
    for gpus, model in [(1, None), (2, None), (4, "V100"), (8, None), (3, "A100"), (1, "H100")]:
        probe = job("probe", index=99, home="beta", gpus_per_pod=gpus, gpu_model=model)
        req = pod_requirements_of(probe)
        brute = sum(
            min(node.free(name) // units for name, units in req.requests if units)
            for node in member.feasible_nodes(req.placement)
        )
        assert member.node_level_replicas(req) == brute, (gpus, model)
