"""Regression test for the first fault the chaos suite found (seed 1973980925): a gang ran in two
clusters at once after a dispatch failed against a member the hub could not reach.

A hub dispatched the whole gang into cluster X (every object created) and died before recording it (the
crash hook's `after-dispatch` point: the same as a leader killed mid-cycle). X's API then goes down
(connection refused; its kubelets keep running the gang, as a real cluster's would). The next hub's start
re-dispatches the Placed job: the member does not answer, the dispatch fails, and the cleanup of the
failed epoch cannot list X. The job was requeued at once and placed in cluster Y at epoch 2 while X still
ran epoch 1, until X's API returned and the GC deleted the stale epoch: design.md invariant 2 broken.

Fixed in controllers/dispatch.py: a failed dispatch whose cleanup could not read the member records
`status.placement.previous = {X, epoch}`, so the next dispatch (wherever placement sends the gang) waits
until X's copy is gone (X answers again and the copy is deleted) or fenced (the hub's lease in X expired
plus the margin: X's agent deleted it), exactly as after a drain. The gang then runs once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from federator.delegation.adapter import LABEL_EPOCH, LABEL_JOB_UID
from federator.sim import kinds

from ..controllers.jobtest_support import Federation, HubProcess, wait_until
from .lab import job_body

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CLUSTERS = ["onprem-rdma-a100", "cloud-eth-h100"]


@pytest.fixture
async def fed(tmp_path: Path) -> AsyncIterator[Federation]:
    federation = Federation(tmp_path / "members")
    await federation.start(CLUSTERS)
    try:
        yield federation
    finally:
        await federation.stop()


async def running_copies(fed: Federation, uid: str) -> dict[str, set[str]]:
    """cluster -> epochs of the job's Running pods (no deletionTimestamp), read from the simulators' stores."""
    found: dict[str, set[str]] = {}
    for name, sim in fed.sims.items():
        for pod in (await sim.storage.list(kinds.PODS)).items:
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            if labels.get(LABEL_JOB_UID) == uid and (pod.get("status") or {}).get("phase") == "Running" \
                    and not meta.get("deletionTimestamp"):
                found.setdefault(name, set()).add(str(labels.get(LABEL_EPOCH)))
    return found


async def test_a_failed_dispatch_to_an_unreachable_member_never_leaves_the_gang_running_twice(
    tmp_path: Path, fed: Federation,
) -> None:
    hub = HubProcess(tmp_path / "hub", fed.write_registrations(tmp_path / "clusters"))
    try:
        api = await hub.start(crash_at="after-dispatch", crash_job="chaos/victim")
        created = await api.submit(job_body("victim", workers=2, gpus=0))
        uid = created["metadata"]["uid"]
        await hub.killed()
        await api.close()

        # the gang runs whole in the cluster it was dispatched to; then that cluster's API goes down
        first: str = await wait_until(lambda: _one_cluster(fed, uid), timeout=60,
                                      what="the gang running in one cluster")
        await fed.fault(first, "outage", {"seconds": 40, "mode": "refuse"})

        api = await hub.start()
        try:
            # Sample until the job runs again under a newer epoch (the outage ends after 40 s: then the
            # old copy is deleted and the waiting dispatch goes on); never two copies at any sample.
            deadline = time.monotonic() + 150
            while True:
                copies = await running_copies(fed, uid)
                assert len(copies) <= 1, f"the job runs in {copies} at once"
                job = await api.get("chaos", "victim")
                status = job.get("status") or {}
                if (status.get("placement") or {}).get("epoch", 1) > 1 and status.get("phase") == "Running" \
                        and copies:
                    break
                assert time.monotonic() < deadline, f"the job never ran again: {status.get('phase')}"
                await asyncio.sleep(0.1)
        finally:
            await api.close()
    finally:
        await hub.stop()


async def _one_cluster(fed: Federation, uid: str) -> str | None:
    copies = await running_copies(fed, uid)
    return next(iter(copies)) if len(copies) == 1 else None
