"""A chaos sequence: the faults and jobs a seed stands for (`plan_sequence`) and their execution against a
`Lab` (`run_sequence`).

The plan is a pure function of the seed: when each fault starts (seconds after the sequence starts), what
it is, its target (a cluster, an etcd member, "the leader hub") and how long it lasts; and when each job is
submitted, its shape, the replica it is sent to, and whether (and how soon after its create) it is deleted.
What a target resolves to at run time (which replica leads, which etcd member leads) and everything timing
decides are not in the seed; they are written to the lab's timeline.

Faults come in groups that may overlap with each other but never within a group:
- `hubs`: kill -9 of the leading replica (restarted after the down time: it comes back as a follower), or
  SIGSTOP of a replica (the leader or the other) for up to 5 s, past the 2 s leader lease sometimes;
  one replica at a time, so one always serves;
- `etcd`: kill -9 of one member (the etcd leader, or a given member), restarted after the down time; one at a
  time, so quorum holds;
- `loss`: cutting one member cluster off: a partition `from` the hub's identity (long enough, sometimes, for
  the cluster to be Lost and its gangs to move; the fence agent still reaches its API and fences), or a
  short full partition or API outage (shorter than the loss grace: a cluster whose API is down for everyone
  cannot be fenced by its agent either, and docs/failover.md names that limit: copies overlap until it
  returns, so the design promises nothing there);
- any time, any cluster: API latency, dropped watches, forced compactions (410 on the next re-watch).
A group's next fault waits until the previous one is over (a killed process restarted and ready).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .lab import HUB_MEMBER_USER, Lab, Ledger, job_body

#: (kind, weight, group)
FAULTS: tuple[tuple[str, float, str | None], ...] = (
    ("kill-leader-hub", 2.0, "hubs"),
    ("pause-hub", 2.0, "hubs"),
    ("kill-etcd", 2.0, "etcd"),
    ("partition-hub", 2.5, "loss"),
    ("partition-all", 1.0, "loss"),
    ("outage", 1.0, "loss"),
    ("latency", 1.5, None),
    ("drop-watches", 1.5, None),
    ("compact", 1.5, None),
)
GROUP = {kind: group for kind, _, group in FAULTS}
#: how long a restarted hub or etcd member is assumed to take when planning the next fault of its group
RECOVERY_ESTIMATE = {"kill-leader-hub": 4.0, "pause-hub": 0.5, "kill-etcd": 2.0}


@dataclass(frozen=True, slots=True)
class FaultStep:
    at: float
    kind: str
    #: a cluster name, "leader"/"follower" (hubs), "leader" or a member index (etcd), or ""
    target: str
    seconds: float = 0.0
    params: tuple[tuple[str, Any], ...] = ()

    def describe(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.params)
        lasting = f" for {self.seconds:.1f}s" if self.seconds else ""
        return f"t={self.at:6.2f}s  {self.kind:<16} {self.target}{lasting}{extra}"


@dataclass(frozen=True, slots=True)
class JobStep:
    at: float
    name: str
    workers: int
    gpus: int
    on_loss: str
    via: int
    #: delete it this long after its create was acknowledged (None: keep it)
    delete_after: float | None
    #: the clusters it may run in (None: any)
    clusters: tuple[str, ...] | None = None

    def describe(self) -> str:
        deleted = f", deleted {self.delete_after:.2f}s after its create" if self.delete_after is not None else ""
        where = f" in {'|'.join(self.clusters)}" if self.clusters else ""
        return (f"t={self.at:6.2f}s  {self.name}: {self.workers} x {self.gpus} GPU{where}, onClusterLoss "
                f"{self.on_loss}, via replica {self.via}{deleted}")


@dataclass(frozen=True, slots=True)
class SequencePlan:
    seed: int
    faults: tuple[FaultStep, ...]
    jobs: tuple[JobStep, ...]

    def describe(self) -> str:
        return (f"seed {self.seed}: {len(self.faults)} faults, {len(self.jobs)} jobs "
                f"({sum(j.delete_after is not None for j in self.jobs)} deleted mid-dispatch)\n"
                + "\n".join("  " + f.describe() for f in self.faults))


def plan_sequence(seed: int, *, clusters: Sequence[str], replicas: int = 2, etcd_members: int = 3,
                  faults: tuple[int, int] = (10, 16), jobs: int = 50, loss_grace: float = 6.0) -> SequencePlan:
    rng = random.Random(seed)
    kinds = [k for k, _, _ in FAULTS]
    weights = [w for _, w, _ in FAULTS]
    free_at: dict[str, float] = {"hubs": 0.0, "etcd": 0.0, "loss": 0.0}
    steps: list[FaultStep] = []
    t = rng.uniform(1.0, 3.0)
    for _ in range(rng.randint(*faults)):
        kind = rng.choices(kinds, weights)[0]
        group = GROUP[kind]
        at = max(t, free_at[group] + rng.uniform(0.3, 1.5)) if group else t
        step = _fault(rng, kind, at, clusters=clusters, etcd_members=etcd_members, loss_grace=loss_grace)
        if group:
            free_at[group] = at + step.seconds + RECOVERY_ESTIMATE.get(kind, 0.0)
        steps.append(step)
        t += rng.uniform(1.0, 3.0)
    span = max(t, 10.0)
    job_steps = []
    for i in range(jobs):
        deleted = rng.random() < 0.12
        job_steps.append(JobStep(
            at=rng.uniform(0.0, span), name=f"j{i:03d}", workers=rng.randint(1, 3),
            gpus=rng.choice((0, 0, 0, 0, 1, 1, 2)),
            on_loss=rng.choices(("requeue", "wait", "fail"), (8, 1, 1))[0], via=rng.randrange(replicas),
            delete_after=round(rng.uniform(0.0, 1.5), 2) if deleted else None,
            # most may run in two of the clusters (so a lost one's gangs have somewhere to go), some anywhere
            clusters=tuple(sorted(rng.sample(list(clusters), 2))) if rng.random() < 0.7 else None))
    job_steps.sort(key=lambda j: j.at)
    return SequencePlan(seed=seed, faults=tuple(sorted(steps, key=lambda s: s.at)), jobs=tuple(job_steps))


def _fault(rng: random.Random, kind: str, at: float, *, clusters: Sequence[str], etcd_members: int,
           loss_grace: float) -> FaultStep:
    at = round(at, 2)
    cluster = rng.choice(list(clusters))
    if kind == "kill-leader-hub":
        return FaultStep(at, kind, "leader", round(rng.uniform(0.5, 3.0), 2))
    if kind == "pause-hub":
        return FaultStep(at, kind, rng.choices(("leader", "follower"), (3, 1))[0], round(rng.uniform(0.5, 5.0), 2))
    if kind == "kill-etcd":
        target = "leader" if rng.random() < 0.5 else str(rng.randrange(etcd_members))
        return FaultStep(at, kind, target, round(rng.uniform(1.0, 5.0), 2))
    if kind == "partition-hub":
        # half of them long enough for the cluster to be Lost and its gangs to move (grace + lease margin)
        long = rng.random() < 0.5
        seconds = rng.uniform(loss_grace + 4.0, loss_grace + 8.0) if long else rng.uniform(1.0, loss_grace / 2)
        return FaultStep(at, kind, cluster, round(seconds, 2))
    if kind == "partition-all":
        return FaultStep(at, kind, cluster, round(rng.uniform(0.5, loss_grace / 2), 2))
    if kind == "outage":
        return FaultStep(at, kind, cluster, round(rng.uniform(0.5, loss_grace / 2), 2),
                         (("mode", rng.choice(("refuse", "503"))),))
    if kind == "latency":
        return FaultStep(at, kind, cluster, round(rng.uniform(1.0, 6.0), 2),
                         (("delay", round(rng.uniform(0.05, 0.5), 2)), ("jitter", round(rng.uniform(0.0, 0.2), 2))))
    return FaultStep(at, kind, cluster)


# ---------------------------------------------------------------- execution


@dataclass
class SequenceRun:
    """What running a plan did: the ledger of jobs and the background tasks still lifting faults."""

    plan: SequencePlan
    lab: Lab
    ledger: Ledger
    locks: dict[str, asyncio.Lock] = field(default_factory=lambda: {g: asyncio.Lock() for g in ("hubs", "etcd",
                                                                                                 "loss")})
    recoveries: list[asyncio.Task[None]] = field(default_factory=list)
    job_tasks: list[asyncio.Task[None]] = field(default_factory=list)


async def run_sequence(plan: SequencePlan, lab: Lab, ledger: Ledger, *, lock_timeout: float = 120.0) -> SequenceRun:
    """Submit the jobs and inject the faults at their planned times; return once every fault is lifted (killed
    processes restarted and ready, member faults cleared) and every submission and deletion is done."""
    run = SequenceRun(plan=plan, lab=lab, ledger=ledger)
    start = time.monotonic()
    lab.timeline.add("seq", f"sequence starts: {plan.describe().splitlines()[0]}")
    run.job_tasks = [asyncio.create_task(_job(run, step, start), name=f"chaos-job-{step.name}") for step in plan.jobs]
    try:
        for step in plan.faults:
            await _sleep_until(start + step.at)
            group = GROUP[step.kind]
            if group is not None:
                waited = time.monotonic()
                try:
                    await asyncio.wait_for(run.locks[group].acquire(), lock_timeout)
                except TimeoutError:
                    raise AssertionError(f"{step.describe()}: the previous {group} fault was not over within "
                                         f"{lock_timeout}s") from None
                if time.monotonic() - waited > 0.5:
                    lab.timeline.add("fault", f"({step.kind} waited {time.monotonic() - waited:.1f}s for the "
                                              f"previous {group} fault to end)")
            try:
                recovery = await _inject(run, step)
            except BaseException:
                if group is not None:
                    run.locks[group].release()
                raise
            task = asyncio.create_task(_recover(run, step, recovery), name=f"chaos-recover-{step.kind}")
            run.recoveries.append(task)
        await asyncio.gather(*run.recoveries)
        await asyncio.gather(*run.job_tasks)
    finally:
        for task in (*run.recoveries, *run.job_tasks):
            task.cancel()
        await asyncio.gather(*run.recoveries, *run.job_tasks, return_exceptions=True)
    await lab.clear_member_faults()
    lab.timeline.add("seq", "every fault lifted, every submission answered or given up")
    return run


async def _sleep_until(moment: float) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


async def _job(run: SequenceRun, step: JobStep, start: float) -> None:
    await _sleep_until(start + step.at)
    body = job_body(step.name, workers=step.workers, gpus=step.gpus, on_loss=step.on_loss, clusters=step.clusters)
    record = await run.ledger.submit(step.name, body, via=step.via)
    if step.delete_after is None:
        return
    # an unacknowledged create may still have landed: it is deleted too (a 404 is fine)
    await asyncio.sleep(step.delete_after)
    run.lab.timeline.add("job", f"deleting {step.name} ({'acknowledged' if record.acked else 'unacknowledged'})")
    await run.ledger.delete(step.name, via=step.via)


Recovery = tuple[str, Any]


async def _inject(run: SequenceRun, step: FaultStep) -> Recovery:
    """Inject one fault now; returns what `_recover` needs to lift it."""
    lab, tl = run.lab, run.lab.timeline
    if step.kind == "kill-leader-hub":
        leader = await lab.find_leader(timeout=20)
        if leader is None:
            serving = lab.serving()
            leader = lab.rng.choice(serving) if serving else lab.replicas[0]
            tl.add("fault", f"kill -9 hub: no replica says it leads; killing {leader.name} instead")
        pid = leader.pid
        await leader.kill()
        tl.add("fault", f"kill -9 hub {leader.name} (leader, pid {pid}); restart in {step.seconds:.1f}s")
        return ("restart-hub", leader)
    if step.kind == "pause-hub":
        leader = await lab.find_leader(timeout=10)
        if step.target == "leader" and leader is not None:
            target = leader
        else:
            others = [r for r in lab.serving() if r is not leader] or lab.serving()
            target = others[0]
        role = "leader" if target is leader else "follower"
        target.pause()
        tl.add("fault", f"SIGSTOP hub {target.name} ({role}) for {step.seconds:.1f}s")
        return ("continue-hub", target)
    if step.kind == "kill-etcd":
        etcd = lab.etcd
        assert etcd is not None
        if step.target == "leader":
            index = await asyncio.to_thread(etcd.leader_index)
            if index is None:
                index = 0
            what = f"etcd member {index} (the etcd leader)"
        else:
            index = int(step.target)
            what = f"etcd member {index}"
        await asyncio.to_thread(etcd.kill, index)
        tl.add("fault", f"kill -9 {what}; restart in {step.seconds:.1f}s")
        return ("restart-etcd", index)
    params = dict(step.params)
    cluster = step.target
    # The simulators run in this process: their fault state is called directly, as their admin API would
    # (whose socket is closed too while a "refuse" outage lasts).
    faults = lab.fed.sims[cluster].faults
    if step.kind == "partition-hub":
        faults.start_partition(step.seconds, source=HUB_MEMBER_USER)
        tl.add("fault", f"partition {cluster} from the hub for {step.seconds:.1f}s (its agent still reaches it)")
    elif step.kind == "partition-all":
        faults.start_partition(step.seconds)
        tl.add("fault", f"full partition of {cluster} for {step.seconds:.1f}s")
    elif step.kind == "outage":
        await faults.start_outage(step.seconds, mode=params["mode"])
        tl.add("fault", f"API outage ({params['mode']}) of {cluster} for {step.seconds:.1f}s")
    elif step.kind == "latency":
        faults.set_latency(params["delay"], jitter=params["jitter"], duration=step.seconds)
        tl.add("fault", f"latency {params['delay']}s (jitter {params['jitter']}s) on {cluster} for "
                        f"{step.seconds:.1f}s")
    elif step.kind == "drop-watches":
        tl.add("fault", f"dropped {faults.drop_watches()} watches of {cluster}")
    elif step.kind == "compact":
        revision = await faults.force_compaction()
        tl.add("fault", f"forced compaction of {cluster} to {revision} (410 on re-watch)")
    else:
        raise AssertionError(f"unknown fault {step.kind}")
    return ("member", cluster)


async def _recover(run: SequenceRun, step: FaultStep, recovery: Recovery) -> None:
    lab, tl = run.lab, run.lab.timeline
    group = GROUP[step.kind]
    try:
        await asyncio.sleep(step.seconds)
        what, target = recovery
        if what == "restart-hub":
            await target.start()
        elif what == "continue-hub":
            target.resume()
            tl.add("fault", f"SIGCONT hub {target.name}")
        elif what == "restart-etcd":
            etcd = lab.etcd
            assert etcd is not None
            await asyncio.to_thread(etcd.restart, target)
            tl.add("fault", f"etcd member {target} restarted and healthy")
        elif group == "loss":
            # the simulator lifts it by itself after its seconds; wait until it says so
            sim = lab.fed.sims[target]
            deadline = time.monotonic() + 10
            while (sim.faults.outage_active() or sim.faults.partition_blocks(HUB_MEMBER_USER)) \
                    and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            tl.add("fault", f"{step.kind} of {target} over")
    finally:
        if group is not None:
            run.locks[group].release()
