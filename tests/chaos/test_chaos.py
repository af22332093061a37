"""Chaos: randomised fault sequences against a whole federation (issue 13, item 4), then design.md's
invariants.

Each sequence runs on a fresh lab (tests/chaos/lab.py): 3 etcd members (over mutual TLS, the hubs on
etcds:// with --etcd-cafile/--etcd-certfile/--etcd-keyfile, as deploy/ runs them; CHAOS_ETCD_TLS=0 for plain
etcd://), 2 `federator up` replicas, 3
simulated member clusters with their fence agents. About 50 jobs are submitted through either replica
(some deleted right after their create, mid-dispatch) while 10-16 faults from tests/chaos/sequence.py hit
it: kill -9 of the leading hub (restarted: it comes back as a follower), SIGSTOP/SIGCONT of a hub (past its
2 s leader lease sometimes), kill -9 of an etcd member (restarted; one at a time, quorum holds), a member
cluster partitioned from the hub (long enough, sometimes, to be Lost and have its gangs move; its agent
fences them), short full partitions and API outages, latency, dropped watches, forced compactions.

While it runs, a sampler checks every 0.5 s that no job runs twice (two clusters, or two epochs, at once)
and that epochs only rise, and every second that no acknowledged job is missing from the hub's list.
When every fault is lifted and the federation is quiet again (a generous deadline, never a timing
assertion), it checks that every acknowledged job exists unless the test deleted it, that none was failed
by anything but its own failover policy, that every Running job runs its whole gang in the cluster and at
the epoch its status names and nowhere else, that no member object outlives its job, and that no member
credential appears in any log.

Seeds: `CHAOS_SEQUENCES=N` (default 3) runs N sequences with fresh random seeds, each its own test id
(`test_chaos_sequence[seed=S]`); `CHAOS_SEED=S` replays sequence S alone. `CHAOS_LENGTH=short` (the
default, what CI runs: 5-7 faults in about 12 s) or `full` (10-16 faults in about 30 s, the benchmark-style
run) sets how many faults a sequence has; a seed's plan depends on it:

    CHAOS_LENGTH=full CHAOS_SEED=S .venv/bin/pytest -s tests/chaos/test_chaos.py -k test_chaos_sequence

A seed fixes the faults, their targets as planned ("the leader", "etcd member 2", a cluster), their timing
and the jobs; what depends on timing (which replica leads when a kill lands, how far a dispatch got,
whether a partition outlasted the grace by the hub's clock) may differ between replays. A seed means the
same plan only as long as tests/chaos/sequence.py draws it the same way. A failure prints the seed, the
plan, the time line of what was done and seen (with what the hubs and agents logged), and each violated
invariant with its evidence.

What it found so far: a gang running in two clusters at once after a dispatch failed against an
unreachable member (seed 1973980925; fixed, regression test in test_dispatch_leftovers.py); a gang
running at two epochs at once after a restarted hub's re-dispatch, which had checked its decision before
waiting for a returning cluster's fences, created the epoch the fence agent had killed and status sync had
requeued (seed 1657557937; fixed, regression test in tests/controllers/test_dispatch_failures.py).

A separate scenario takes etcd's quorum away (2 of 3 members killed): the hub answers writes with 503
ServiceUnavailable and Retry-After, /readyz fails, and service (and leadership) come back by themselves
when the members return, with nothing lost.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from kubernetes.aio.client.exceptions import ApiException

from .lab import (
    NAMESPACE,
    Lab,
    LabSettings,
    Ledger,
    Replica,
    Sampler,
    Timeline,
    Violations,
    final_checks,
    job_body,
    job_line,
    phase_counts,
    settle,
    wait_for,
)
from .sequence import plan_sequence, run_sequence

pytestmark = [pytest.mark.etcd, pytest.mark.slow, pytest.mark.timeout(900)]

#: how many sequences (each its own test) unless CHAOS_SEED names one
CHAOS_SEQUENCES = int(os.environ.get("CHAOS_SEQUENCES", "3"))
#: how many faults a sequence has: "short" (CI) or "full"
LENGTHS = {"short": (5, 7), "full": (10, 16)}
CHAOS_LENGTH = os.environ.get("CHAOS_LENGTH", "short")
if CHAOS_LENGTH not in LENGTHS:
    raise pytest.UsageError(f"CHAOS_LENGTH={CHAOS_LENGTH!r}: use one of {sorted(LENGTHS)}")


def _seeds() -> list[int]:
    if os.environ.get("CHAOS_SEED"):
        return [int(os.environ["CHAOS_SEED"])]
    # Under pytest-xdist every worker collects the tests and must draw the same seeds: the run's id, the
    # same in every worker, seeds the draw.
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    rng = random.Random(run_id) if run_id else random.SystemRandom()
    return [rng.randrange(1, 2**31) for _ in range(CHAOS_SEQUENCES)]


SEEDS = _seeds()


@pytest.fixture
async def lab(tmp_path: Path) -> AsyncIterator[Lab]:
    the_lab = Lab(tmp_path / "lab", LabSettings(), Timeline())
    try:
        await the_lab.start()
        yield the_lab
    finally:
        await the_lab.stop()


def _report(seed: int, lab: Lab, plan_text: str, violations: Violations, extra: str = "") -> str:
    return (f"\nCHAOS FAILED: seed {seed} (replay: CHAOS_LENGTH={CHAOS_LENGTH} CHAOS_SEED={seed} .venv/bin/pytest -s tests/chaos/test_chaos.py "
            f"-k test_chaos_sequence)\n"
            f"plan: {plan_text}\n"
            f"time line (faults, checks, and what the hubs and agents logged):\n{lab.report_timeline()}\n"
            f"violations ({len(violations)}):\n{violations.format()}\n{extra}"
            f"lab files (logs): {lab.workdir}\n")


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed={s}" for s in SEEDS])
async def test_chaos_sequence(seed: int, lab: Lab) -> None:
    plan = plan_sequence(seed, clusters=lab.settings.clusters, replicas=lab.settings.replicas,
                         etcd_members=lab.settings.etcd_members, faults=LENGTHS[CHAOS_LENGTH])
    print(plan.describe())
    ledger = Ledger(lab)
    violations = Violations()
    sampler = Sampler(lab, ledger, violations)
    sampler.start()
    extra = ""
    try:
        try:
            run = await run_sequence(plan, lab, ledger)
        except Exception as e:
            raise AssertionError(_report(seed, lab, plan.describe(), violations,
                                         f"the sequence could not run: {e!r}\n")) from e
        unsettled = await settle(lab, ledger, timeout=240)
        if unsettled is not None:
            lab.timeline.add("check", f"not quiet at the deadline: {unsettled}")
        await final_checks(lab, ledger, violations)
        _, jobs = await lab.call(lab.list_jobs)
        acked = sum(r.acked for r in ledger.jobs.values())
        deleted = sum(r.delete_requested for r in ledger.jobs.values())
        extra = (f"jobs: {len(ledger.jobs)} submitted, {acked} acknowledged, {deleted} deleted; phases at the "
                 f"end {phase_counts(jobs)}\nsampler: {sampler.summary()}\n"
                 + "".join(f"  {job_line(j)}\n" for j in jobs))
        print(f"seed {seed}: {extra}time line:\n{lab.report_timeline()}")
        unacked = [r for r in run.ledger.jobs.values() if not r.acked]
        if unacked:
            print("never acknowledged:", [(r.name, r.attempts) for r in unacked])
        assert unsettled is None, _report(seed, lab, plan.describe(), violations,
                                          f"the federation did not settle within 240s: {unsettled}\n{extra}")
    finally:
        await sampler.stop()
    assert not violations, _report(seed, lab, plan.describe(), violations, extra)


async def test_quorum_loss_answers_503_and_service_returns_by_itself(lab: Lab) -> None:
    """2 of 3 etcd members killed: writes answer 503 ServiceUnavailable with Retry-After, both replicas'
    /readyz fail; the members restarted, both serve again and one leads without anyone's help, and every
    job acknowledged before is there and runs."""
    ledger = Ledger(lab)
    violations = Violations()
    sampler = Sampler(lab, ledger, violations)
    sampler.start()
    etcd = lab.etcd
    assert etcd is not None
    try:
        for i in range(6):
            record = await ledger.submit(f"q{i}", job_body(f"q{i}", workers=2, gpus=1), via=i)
            assert record.acked, record.attempts
        await wait_for(lambda: _all_running(lab, 6), timeout=120,
                       what="the first jobs to run")

        leader = await asyncio.to_thread(etcd.leader_index)
        lost = [i for i in range(3) if i != leader][:1] + ([leader] if leader is not None else [2])
        for i in lost:
            await asyncio.to_thread(etcd.kill, i)
        lab.timeline.add("fault", f"kill -9 etcd members {lost}: quorum lost")

        async def refused() -> ApiException | None:
            chosen = lab.api_of()
            assert chosen is not None
            try:
                async with asyncio.timeout(60):
                    await chosen[1].submit(job_body("during-quorum-loss", workers=1, gpus=0))
            except ApiException as e:
                return e if e.status == 503 else None
            except TimeoutError:
                return None
            raise AssertionError("a create succeeded without quorum")

        error = await wait_for(refused, timeout=120, what="a create answered 503 without quorum", interval=0.5)
        assert "ServiceUnavailable" in (error.body or ""), error.body
        assert error.headers is not None and error.headers.get("Retry-After"), error.headers
        for replica in lab.replicas:
            await wait_for(_readyz_is(replica, 500), timeout=60, what=f"{replica.name} /readyz 500")

        for i in lost:
            await asyncio.to_thread(etcd.restart, i, wait=False)
        await asyncio.to_thread(etcd.wait_healthy, 90)
        lab.timeline.add("fault", f"etcd members {lost} restarted: quorum back")
        for replica in lab.replicas:
            await wait_for(_readyz_is(replica, 200), timeout=90, what=f"{replica.name} /readyz 200")
        assert await lab.find_leader(timeout=90) is not None, "no replica leads after quorum returned"
        after = await ledger.submit("after-quorum", job_body("after-quorum", workers=1, gpus=1))
        assert after.acked, after.attempts
        unsettled = await settle(lab, ledger, timeout=180)
        assert unsettled is None, _report(0, lab, "quorum loss", violations, unsettled)
        await final_checks(lab, ledger, violations)
    finally:
        await sampler.stop()
    print(f"quorum loss: sampler: {sampler.summary()}\ntime line:\n{lab.report_timeline()}")
    assert not violations, _report(0, lab, "quorum loss", violations)
    _, jobs = await lab.call(lab.list_jobs)
    names = {j["metadata"]["name"] for j in jobs}
    assert {f"q{i}" for i in range(6)} | {"after-quorum"} <= names <= {f"q{i}" for i in range(6)} | {
        "after-quorum", "during-quorum-loss"}, names
    assert not [j for j in jobs if j["metadata"]["namespace"] != NAMESPACE]


def _readyz_is(replica: Replica, code: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        answer = await replica.readyz(timeout=10)
        return answer is not None and answer[0] == code

    return check


async def _all_running(lab: Lab, count: int) -> bool:
    _, jobs = await lab.call(lab.list_jobs, timeout=30)
    return sum(bool((j.get("status") or {}).get("phase") == "Running") for j in jobs) >= count
