"""The replay with queues: queues from the trace's clusters, quota at every instant, whole-gang preemption
carried out (victims evicted whole, requeued, their work lost), determinism, and the fairness figure."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path

import pytest
from replay_builders import TINY_CLUSTERS, federation, job, replay, synthetic_trace

from federator.placement import QuotaAmounts, VictimReason, WithinQueue
from federator.placement.decision import Decision
from federator.placement.gang import GangRequest
from federator.placement import Profile
from federator.replay.attributes import (
    RULE,
    AttributeRule,
    ReplayJob,
    assign_attributes,
    checkpoint_draw,
    describe_rule,
)
from federator.replay.engine import Engine, jain_index
from federator.replay.federated import FederatorPolicy
from federator.replay.queues import QUEUE_COHORT, QUEUE_POLICY, QUEUE_POLICY_BY_START, apportion, trace_queues
from federator.replay.report import queue_section
from federator.replay.trace import load_trace
from federator.sim.fit import GPU

# TINY_CLUSTERS with fewer nodes: 16 A100 + 16 V100 + 8 A100 + 8 H100 for three busy trace clusters.
CONTENDED = TINY_CLUSTERS.replace("nodes: 3", "nodes: 2").replace(
    "nodes: 2, gpusPerNode: 8}\n        datasets: {imagenet", "nodes: 1, gpusPerNode: 8}\n        datasets: {imagenet"
)


def one_cluster(*trace_clusters: str, nodes: int = 2) -> str:
    return (
        "clusters:\n  - name: solo\n"
        f"    traceClusters: [{', '.join(trace_clusters)}]\n"
        "    location: on-prem\n    fabric: rdma\n    bandwidthGbps: 10\n"
        f"    nodePools:\n      - {{gpuModel: A100, nodes: {nodes}, gpusPerNode: 8}}\n"
    )


def contended_jobs(tmp_path: Path, *, seed: int, per_cluster: int = 30) -> tuple[list[ReplayJob], object]:
    fed = federation(CONTENDED)
    trace = load_trace(synthetic_trace(tmp_path / f"trace-{per_cluster}", jobs_per_cluster=per_cluster))
    return assign_attributes(trace, fed, seed=seed, priorities=True), fed


# ---------------------------------------------------------------- queues from the trace's clusters


def test_each_trace_cluster_is_a_queue_with_its_gpu_hour_share_of_every_model() -> None:
    fed = federation()  # A100: 24 + 8, V100: 16, H100: 16
    jobs = [
        job("a", index=0, home="alpha", pods=1, gpus_per_pod=8, duration=2700, trace_cluster="cluster01"),  # 6 GPU-h
        job("b", index=1, home="beta", pods=1, gpus_per_pod=1, duration=7200, trace_cluster="cluster02"),  # 2 GPU-h
    ]
    queues = trace_queues(jobs, fed)
    assert list(queues) == ["cluster01", "cluster02", "cluster03"]
    assert {n: dict(q.nominal.gpus) for n, q in queues.items()} == {
        "cluster01": {"A100": 24, "H100": 12, "V100": 12},
        "cluster02": {"A100": 8, "H100": 4, "V100": 4},
        "cluster03": {"A100": 0, "H100": 0, "V100": 0},
    }
    for queue in queues.values():
        assert queue.cohort == QUEUE_COHORT and queue.borrowing_limit is None and queue.weight == 1.0
        assert queue.within_queue is WithinQueue.LOWER_PRIORITY and queue.reclaim_borrowed is True
        assert queue.nominal.cpu_milli is None and queue.nominal.memory is None
    with pytest.raises(ValueError, match="cluster09"):
        trace_queues([job("x", index=0, home="alpha", trace_cluster="cluster09")], fed)


@pytest.mark.parametrize(
    ("total", "weights", "expected"),
    [
        (10, {"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 4, "b": 3, "c": 3}),  # remainders tie: by name
        (5, {"a": 2.0, "b": 1.0}, {"a": 3, "b": 2}),  # 3.33 / 1.67: the larger remainder gets the seat
        (7, {"y": 0.0, "x": 0.0}, {"x": 4, "y": 3}),  # no GPU-hours at all: equal shares
        (0, {"a": 5.0}, {"a": 0}),
    ],
)
def test_apportion_by_largest_remainder(total: int, weights: dict[str, float], expected: dict[str, int]) -> None:
    assert apportion(total, weights) == expected
    assert sum(expected.values()) == total


@pytest.mark.parametrize("weights", [{"a": -1.0}, {"a": math.inf}, {"a": math.nan}])
def test_apportion_refuses_bad_weights(weights: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="finite and non-negative"):
        apportion(4, weights)


def test_priorities_are_drawn_only_with_queues_and_change_nothing_else(tmp_path: Path) -> None:
    fed = federation()
    trace = load_trace(synthetic_trace(tmp_path / "trace", jobs_per_cluster=100))
    plain = assign_attributes(trace, fed, seed=4)
    drawn = assign_attributes(trace, fed, seed=4, priorities=True)
    assert {j.priority for j in plain} == {0}
    assert {j.checkpoint_seconds for j in plain} == {0.0}
    counts = Counter(j.priority for j in drawn)
    assert set(counts) == {0, 100, 1000} and counts[100] > counts[0] > counts[1000]
    assert [dataclasses.replace(j, priority=0, checkpoint_seconds=0.0) for j in drawn] == plain
    assert "100 with probability 0.65" in describe_rule(RULE, priorities=True)
    assert "All jobs have priority 0" in describe_rule(RULE)
    with pytest.raises(ValueError, match="sum to 1"):
        assign_attributes(trace, fed, seed=4, priorities=True, rule=AttributeRule(priority_mix=((0, 0.5),)))


# ---------------------------------------------------------------- quota at every instant


class Observed(FederatorPolicy):
    """Records, after every step, the GPUs each queue holds per model, read from the members' own ledgers."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.samples: list[Counter[tuple[str, str]]] = []

    def step(self) -> None:
        super().step()
        queue_of = {j.uid: j.trace_cluster for j in self.e.jobs}
        usage: Counter[tuple[str, str]] = Counter()
        for member in self.e.members.values():
            for pod, (node, requests) in member.ledger.accounted().items():
                usage[(queue_of[pod.split("/")[0]], member.model_of_node[node])] += dict(requests).get(GPU, 0)
        self.samples.append(usage)


@pytest.mark.parametrize("borrowing", ["none", "limited"])
def test_quota_is_respected_at_every_instant(tmp_path: Path, borrowing: str) -> None:
    jobs, fed = contended_jobs(tmp_path, seed=2, per_cluster=25)
    queues = trace_queues(jobs, fed)  # type: ignore[arg-type]
    limit = 4
    if borrowing == "none":
        queues = {n: dataclasses.replace(q, cohort="") for n, q in queues.items()}
    else:
        queues = {n: dataclasses.replace(q, borrowing_limit=QuotaAmounts(dict.fromkeys(q.nominal.gpus, limit)))
                  for n, q in queues.items()}
    policy = Observed(queues=queues)
    replay(jobs, fed, policy, seed=2)  # type: ignore[arg-type]
    allowed = {(n, m): c + (0 if borrowing == "none" else limit) for n, q in queues.items()
               for m, c in q.nominal.gpus.items()}
    peak: Counter[tuple[str, str]] = Counter()
    for usage in policy.samples:
        for key, gpus in usage.items():
            assert gpus <= allowed[key], (key, gpus, allowed[key])
            peak[key] = max(peak[key], gpus)
    # The bound is reached (so the check could fail): a queue at its nominal, or borrowing up to its limit.
    assert any(peak[key] == allowed[key] for key in allowed)
    if borrowing == "limited":
        assert any(peak[(n, m)] > queues[n].nominal.gpus[m] for n, m in allowed), "some queue borrowed"


# ---------------------------------------------------------------- preemption carried out


def test_a_high_priority_job_evicts_the_latest_low_priority_gang_whole(tmp_path: Path) -> None:
    fed = federation(one_cluster("cluster01"))
    jobs = [
        job("a", index=0, home="solo", submitted=0, duration=1000, priority=0),
        job("b", index=1, home="solo", submitted=1, duration=1000, priority=0),
        job("hi", index=2, home="solo", submitted=100, duration=500, priority=1000),
    ]
    policy = FederatorPolicy(queues=trace_queues(jobs, fed))
    engine, result = replay(jobs, fed, policy)
    [record] = policy.preemptions
    assert (record.at, record.preemptor, record.cluster, record.priority) == (100, "hi", "solo", 1000)
    assert [(v.uid, v.priority, v.reason) for v in record.victims] == [("b", 0, VictimReason.LOWER_PRIORITY)]
    assert policy.preemptors_not_bound == 0
    # hi runs at once where b was; b restarts from the beginning when hi finishes, epoch 1.
    assert engine.started_at[2] == 100 and engine.cluster_of[2] == "solo"
    assert engine.started_at[1] == 600 and engine.finished_at[1] == 1600 and engine.epoch[1] == 1
    assert result.extra["preemptions"] == 1 and result.extra["preemptedJobs"] == 1
    assert result.extra["preemptionsPer1000Jobs"] == pytest.approx(333.333)
    assert result.extra["gpuHoursLostToPreemption"] == pytest.approx(round(8 * 99 / 3600, 3))
    # Writes: 3 gangs in and out (1 PodGroup + 1 pod each way), plus b evicted and written again.
    assert result.metrics["memberWritesPerJob"] == pytest.approx(16 / 3, abs=1e-6)
    # b waited 500 s: from submission (1) to its final start (600), less the 99 s its evicted run held GPUs.
    assert result.metrics["meanQueueDelaySeconds"] == pytest.approx(500 / 3, abs=1e-3)
    queue = result.extra["queues"]["cluster01"]
    assert queue["medianQueueDelaySeconds"] == 0 and queue["p95QueueDelaySeconds"] == pytest.approx(450)
    assert queue["evictions"] == 1 and result.extra["mostEvictionsOfOneJob"] == 1
    by_priority = result.extra["priorities"]
    assert by_priority["0"]["meanQueueDelaySeconds"] == 250 and by_priority["1000"]["meanQueueDelaySeconds"] == 0
    assert (by_priority["0"]["evictions"], by_priority["1000"]["evictions"]) == (1, 0)
    # Without queues hi waits for a gang to finish, and nobody is evicted.
    engine0, plain = replay(jobs, fed, FederatorPolicy())
    assert engine0.started_at[2] == 1000 and plain.extra["preemptions"] == 0


def test_a_queue_within_its_nominal_quota_reclaims_what_another_borrowed(tmp_path: Path) -> None:
    fed = federation(one_cluster("cluster01", "cluster02"))
    jobs = [
        job("a1", index=0, home="solo", submitted=0, duration=1000, trace_cluster="cluster01", priority=1000),
        job("a2", index=1, home="solo", submitted=1, duration=1000, trace_cluster="cluster01", priority=500),
        job("c", index=2, home="solo", submitted=100, duration=1000, gpus_per_pod=4, trace_cluster="cluster02"),
        job("d", index=3, home="solo", submitted=5000, duration=5000, gpus_per_pod=4, trace_cluster="cluster02"),
    ]
    queues = trace_queues(jobs, fed)
    # GPU-hours 4.4 and 6.7 of 16 A100s: 6.4 and 9.6, the larger remainder to cluster02.
    assert (queues["cluster01"].nominal.gpus["A100"], queues["cluster02"].nominal.gpus["A100"]) == (6, 10)
    policy = FederatorPolicy(queues=queues)
    engine, result = replay(jobs, fed, policy)
    [record] = policy.preemptions
    [victim] = record.victims
    # a1 and a2 borrowed (8 each over a nominal of 6); c is within cluster02's nominal: it takes back a2,
    # the lower-priority borrowed gang, although a2's priority is above c's (reclaim does not ask priority).
    assert (record.preemptor, record.queue, victim.uid, victim.queue) == ("c", "cluster02", "a2", "cluster01")
    assert victim.borrowed and victim.reason is VictimReason.RECLAIM_BORROWED and victim.priority > record.priority
    assert engine.started_at[2] == 100 and engine.started_at[1] == 1000 and engine.epoch[1] == 1
    assert result.never_started == 0


class Audited(FederatorPolicy):
    """Checks every preemption as it is carried out: victims whole, of the right kind; the preemptor bound there."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.audited = 0

    def _preempt(self, job_: ReplayJob, gang: GangRequest, decision: Decision) -> None:
        assert decision.preemption is not None
        copies = [self._copies[v.uid] for v in decision.preemption.victims]
        assert all(c.state == "bound" and len(c.nodes) == c.job.pods for c in copies), "victims run whole"
        super()._preempt(job_, gang, decision)
        assert self.queues is not None
        for victim, copy in zip(decision.preemption.victims, copies, strict=True):
            assert copy.cluster == decision.cluster
            assert copy.state == "evicted"
            accounted = self.e.members[copy.cluster].ledger.accounted()
            assert not any(key in accounted for key in copy.pod_keys), "every pod of a victim is gone"
            if victim.reason is VictimReason.LOWER_PRIORITY:
                assert victim.queue == gang.queue and victim.priority < gang.priority
            else:
                assert victim.queue != gang.queue and victim.borrowed
                assert self.queues[victim.queue].cohort == self.queues[gang.queue].cohort
        self.audited += 1

    def _dispatch(self, job_: ReplayJob, gang: GangRequest, decision: Decision) -> None:
        super()._dispatch(job_, gang, decision)
        if decision.preemption is not None:
            copy = self._copies[job_.uid]
            assert copy.state == "bound" and copy.cluster == decision.preemption.cluster, "lands where room was made"


def test_preemptions_on_a_contended_trace_are_whole_and_as_the_whole_queue_decides(tmp_path: Path) -> None:
    jobs, fed = contended_jobs(tmp_path, seed=1)
    queues = trace_queues(jobs, fed)  # type: ignore[arg-type]
    audited = Audited(queues=queues)
    engine, _ = replay(jobs, fed, audited, seed=1)  # type: ignore[arg-type]
    assert audited.audited == len(audited.preemptions) > 5
    assert {v.reason for r in audited.preemptions for v in r.victims} == set(VictimReason)
    assert audited.preemptors_not_bound == 0
    # Every job started ran to its end (an evicted one after restarting), on members never overcommitted.
    started = [j for j in jobs if not math.isnan(engine.started_at[j.index])]
    assert all(not math.isnan(engine.finished_at[j.index]) for j in started)
    assert all(m.ledger.overcommitted() == [] for m in engine.members.values())
    whole = FederatorPolicy(queues=queues, exhaustive_queue=True)
    replay(jobs, fed, whole, seed=1)  # type: ignore[arg-type]
    assert whole.decisions == audited.decisions and whole.preemptions == audited.preemptions
    assert audited.gangs_evaluated < whole.gangs_evaluated, "the selection must have left some gangs out"


def test_the_replay_with_queues_is_deterministic_per_seed(tmp_path: Path) -> None:
    runs = {}
    for seed in (1, 1, 2):
        jobs, fed = contended_jobs(tmp_path, seed=seed, per_cluster=20)
        policy = FederatorPolicy(queues=trace_queues(jobs, fed))  # type: ignore[arg-type]
        engine, result = replay(jobs, fed, policy, seed=seed)  # type: ignore[arg-type]
        figures = ({k: v for k, v in result.metrics.items() if k != "wallSeconds"}, result.extra,
                   policy.preemptions, policy.decisions, [None if math.isnan(t) else t for t in engine.started_at],
                   [j.priority for j in jobs])
        if seed in runs:
            assert figures == runs[seed]
        runs[seed] = figures
    assert runs[1][2], "preemptions happened"
    assert runs[1][5] != runs[2][5] and runs[1][2] != runs[2][2], "another seed, other priorities and preemptions"


# ---------------------------------------------------------------- checkpoints (issue 29 item 3)


def test_the_checkpoint_interval_is_a_seeded_draw_per_job_as_the_rule_states() -> None:
    uids = [f"cluster0{i % 9 + 1}-{i:06d}" for i in range(8000)]
    drawn = [checkpoint_draw(1, uid) for uid in uids]
    assert drawn == [checkpoint_draw(1, uid) for uid in uids]  # deterministic per (seed, job)
    assert checkpoint_draw(1, uids[0], RULE) == drawn[0]
    counts = Counter(drawn)
    assert set(counts) == {0.0, *RULE.checkpoint_intervals}
    assert abs(counts[0.0] / len(uids) - RULE.no_checkpoint_share) < 0.02
    for interval in RULE.checkpoint_intervals:
        assert abs(counts[interval] / len(uids) - (1 - RULE.no_checkpoint_share) / 4) < 0.02
    other = [checkpoint_draw(2, uid) for uid in uids]
    assert other != drawn and Counter(other).keys() == counts.keys()
    # A rule with every job checkpointing, or none listed, and bad rules.
    assert {checkpoint_draw(1, uid, AttributeRule(no_checkpoint_share=0.0)) for uid in uids[:500]} <= set(
        RULE.checkpoint_intervals)
    assert {checkpoint_draw(1, uid, AttributeRule(checkpoint_intervals=())) for uid in uids[:50]} == {0.0}
    text = describe_rule(RULE, priorities=True)
    assert "BLAKE2b('<seed>/checkpoint/<job uid>')" in text and "never checkpoints if u < 0.25" in text
    assert "10 min, 30 min, 60 min, 120 min" in text


@pytest.mark.parametrize("rule", [AttributeRule(no_checkpoint_share=1.0), AttributeRule(no_checkpoint_share=-0.1),
                                  AttributeRule(checkpoint_intervals=(600.0, 0.0))])
def test_a_bad_checkpoint_rule_is_refused(tmp_path: Path, rule: AttributeRule) -> None:
    trace = load_trace(synthetic_trace(tmp_path / "trace", jobs_per_cluster=3))
    with pytest.raises(ValueError, match="checkpoint"):
        assign_attributes(trace, federation(), seed=1, priorities=True, rule=rule)


def _checkpointed_pair() -> tuple[list[ReplayJob], object]:
    """a checkpoints every 45 s (at 45 and 90), b never; hi (priority 1000) needs one of their nodes at 100."""
    fed = federation(one_cluster("cluster01"))
    jobs = [
        dataclasses.replace(job("a", index=0, home="solo", submitted=0, duration=1000), checkpoint_seconds=45.0),
        job("b", index=1, home="solo", submitted=1, duration=1000),
        job("hi", index=2, home="solo", submitted=100, duration=500, priority=1000),
    ]
    return jobs, fed


def test_the_victim_that_loses_least_is_evicted_and_resumes_from_its_last_checkpoint() -> None:
    jobs, fed = _checkpointed_pair()
    policy = FederatorPolicy(queues=trace_queues(jobs, fed))  # type: ignore[arg-type]
    assert policy.name == QUEUE_POLICY
    engine, result = replay(jobs, fed, policy)  # type: ignore[arg-type]
    [record] = policy.preemptions
    [victim] = record.victims
    # a loses 8 GPUs x 10 s (since its checkpoint at 90); b would lose 8 x 99 (no checkpoint).
    assert (victim.uid, victim.lost_gpu_seconds, victim.checkpointed) == ("a", 80.0, True)
    assert result.extra["gpuHoursLostToPreemption"] == pytest.approx(round(80 / 3600, 3))
    assert result.extra["evictionsResumedFromCheckpoint"] == 1
    # a resumes when hi finishes (600) with 910 of its 1000 s left; b never stopped.
    assert engine.started_at[0] == 600 and engine.finished_at[0] == 1510 and engine.epoch[0] == 1
    assert engine.finished_at[1] == 1001 and engine.epoch[1] == 0


def test_without_the_checkpoint_aware_order_the_newest_is_evicted_and_loses_more() -> None:
    jobs, fed = _checkpointed_pair()
    by_start = Profile(victims_by_lost_work=False)
    policy = FederatorPolicy(queues=trace_queues(jobs, fed), profile=by_start)  # type: ignore[arg-type]
    assert policy.name == QUEUE_POLICY_BY_START
    engine, result = replay(jobs, fed, policy)  # type: ignore[arg-type]
    [record] = policy.preemptions
    assert [(v.uid, v.lost_gpu_seconds, v.checkpointed) for v in record.victims] == [("b", 792.0, False)]
    assert result.extra["gpuHoursLostToPreemption"] == pytest.approx(round(792 / 3600, 3))
    assert result.extra["evictionsResumedFromCheckpoint"] == 0
    # b never checkpointed: it restarts from the beginning.
    assert engine.started_at[1] == 600 and engine.finished_at[1] == 1600


def test_checkpoints_on_a_contended_trace_are_deterministic_and_only_save_work(tmp_path: Path) -> None:
    jobs, fed = contended_jobs(tmp_path, seed=1)
    assert {j.checkpoint_seconds for j in jobs} > {0.0}, "some jobs checkpoint"
    runs = []
    for _ in range(2):
        policy = FederatorPolicy(queues=trace_queues(jobs, fed))  # type: ignore[arg-type]
        engine, result = replay(jobs, fed, policy, seed=1)  # type: ignore[arg-type]
        runs.append(({k: v for k, v in result.metrics.items() if k != "wallSeconds"}, result.extra,
                     policy.preemptions))
        # Saved work never exceeds a job's duration; a job that never checkpoints saves nothing.
        for j in jobs:
            assert 0 <= engine.saved_work[j.index] <= j.duration
            if not j.checkpoint_seconds:
                assert engine.saved_work[j.index] == 0
        assert all(m.ledger.overcommitted() == [] for m in engine.members.values())
    assert runs[0] == runs[1]
    assert runs[0][2], "preemptions happened"


def test_an_eviction_of_a_gang_that_is_not_running_is_refused(tmp_path: Path) -> None:
    fed = federation(one_cluster("cluster01"))
    jobs = [job("a", index=0, home="solo")]
    engine = Engine(jobs=jobs, federation=fed, policy=FederatorPolicy(), seed=1)
    copy = engine.dispatch(jobs[0], "solo")
    engine.members["solo"].release(copy)
    with pytest.raises(ValueError, match="only a running gang can be evicted"):
        engine.evict(copy)


# ---------------------------------------------------------------- the fairness figure


def test_jain_index_by_hand() -> None:
    assert jain_index([1.0, 0.5]) == pytest.approx(0.9)  # 1.5^2 / (2 x 1.25)
    assert jain_index([1.0, 0.0]) == pytest.approx(0.5)
    assert jain_index([0.3, 0.3, 0.3]) == pytest.approx(1.0)
    assert jain_index([]) == 1.0


def test_jain_over_queues_of_mean_speed_on_a_hand_checked_case(tmp_path: Path) -> None:
    # One node: cluster01's job runs at once (speed 1); cluster02's waits 99 s for it (JCT 199, speed 100/199).
    fed = federation(one_cluster("cluster01", "cluster02", nodes=1))
    jobs = [
        job("a", index=0, home="solo", submitted=0, duration=100, trace_cluster="cluster01"),
        job("b", index=1, home="solo", submitted=1, duration=100, trace_cluster="cluster02"),
    ]
    speeds = [1.0, 100 / 199]
    expected = sum(speeds) ** 2 / (2 * sum(s * s for s in speeds))
    queues = trace_queues(jobs, fed)
    results = []
    for policy in (FederatorPolicy(queues=queues), FederatorPolicy()):
        _, result = replay(jobs, fed, policy)
        assert result.extra["queues"]["cluster02"]["meanSpeed"] == pytest.approx(100 / 199, abs=1e-6)
        assert result.extra["queueJainFairness"] == pytest.approx(expected, abs=1e-6)
        results.append(result)
    section = queue_section(results, queues=queues, jobs=jobs)
    assert section["policies"]["federator-queues"]["queueJainFairness"] == pytest.approx(expected, abs=1e-6)
    assert section["comparison"]["ratios"]["queueJainFairness"] == 1.0
    assert section["quota"]["cluster01"] == {"jobs": 1, "gpuHours": pytest.approx(8 * 100 / 3600, abs=1e-3),
                                             "nominal": {"A100": 4}}


def test_a_ratio_of_two_zeros_is_one_and_of_something_to_zero_is_undefined(tmp_path: Path) -> None:
    # Two jobs that never wait: both policies' delays are 0, so federator-queues / federator is 1, not n/a.
    fed = federation(one_cluster("cluster01", "cluster02", nodes=2))
    jobs = [
        job("a", index=0, home="solo", submitted=0, duration=100, trace_cluster="cluster01"),
        job("b", index=1, home="solo", submitted=1, duration=100, trace_cluster="cluster02"),
    ]
    queues = trace_queues(jobs, fed)
    results = [replay(jobs, fed, policy)[1] for policy in (FederatorPolicy(queues=queues), FederatorPolicy())]
    assert all(r.metrics["meanQueueDelaySeconds"] == 0 for r in results)
    ratios = queue_section(results, queues=queues, jobs=jobs)["comparison"]["ratios"]
    assert ratios["meanQueueDelaySeconds"] == 1.0 and ratios["p95QueueDelaySeconds"] == 1.0
    assert ratios["meanJctSeconds"] == 1.0
    without = dataclasses.replace(results[1], metrics={**results[1].metrics, "meanQueueDelaySeconds": 0.0})
    with_delay = dataclasses.replace(results[0], metrics={**results[0].metrics, "meanQueueDelaySeconds": 5.0})
    ratios = queue_section([with_delay, without], queues=queues, jobs=jobs)["comparison"]["ratios"]
    assert ratios["meanQueueDelaySeconds"] is None


def test_the_victim_order_comparison_of_one_run_by_hand() -> None:
    jobs, fed = _checkpointed_pair()
    queues = trace_queues(jobs, fed)  # type: ignore[arg-type]
    aware = replay(jobs, fed, FederatorPolicy(queues=queues))[1]  # type: ignore[arg-type]
    off = Profile(victims_by_lost_work=False)
    by_start = replay(jobs, fed, FederatorPolicy(queues=queues, profile=off))[1]  # type: ignore[arg-type]
    section = queue_section([aware, by_start], queues=queues, jobs=jobs)
    compared = section["checkpointAwareVictims"]
    assert (compared["gpuHoursLostWith"], compared["gpuHoursLostWithout"]) == (0.022, 0.22)
    assert compared["gpuHoursSaved"] == pytest.approx(0.198) and compared["ratio"] == 0.1
    assert (compared["preemptionsWith"], compared["preemptionsWithout"]) == (1, 1)
    assert compared["gpuHoursLostPerPreemptionWith"] == 0.022
    # No preemption at all: nothing per preemption, a ratio of two zeros is 1.
    calm = [dataclasses.replace(r, extra={**r.extra, "preemptions": 0, "gpuHoursLostToPreemption": 0.0})
            for r in (aware, by_start)]
    quiet = queue_section(calm, queues=queues, jobs=jobs)["checkpointAwareVictims"]
    assert quiet["gpuHoursLostPerPreemptionWith"] == 0.0 and quiet["ratio"] == 1.0 and quiet["gpuHoursSaved"] == 0
    # Without the by-start run there is nothing to compare.
    assert "checkpointAwareVictims" not in queue_section([aware], queues=queues, jobs=jobs)
