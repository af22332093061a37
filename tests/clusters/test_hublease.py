"""The hub's fencing Lease in a member: created, renewed, never sent while out of contact, and the
moment after which the member's agent has fenced is bounded from the hub's own clock.

A real SimCluster over HTTPS and a real MemberClient; the health is a real ClusterHealth whose facts
the test sets (as the sync's probe loop would)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clustertest_support import Sims, profile

from federator.clusters.client import LEASES, MemberApiError, MemberClient, MemberUnreachable
from federator.clusters.health import ClusterHealth, HealthSettings
from federator.apis.timestamps import format_micro_time
from federator.fencing.hublease import FENCE_NAMESPACE, LeaseSettings, MemberLease
from federator.obs import Metrics


class Wall:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


async def _lease(tmp_path: Path, sims: Sims, *, duration: float = 3.0, request_timeout: float = 5.0,
                 wall: Wall | None = None) -> tuple[MemberLease, MemberClient, ClusterHealth]:
    sim = await sims.start(profile("leased", gpu_nodes=1, cpu_nodes=0))
    client = await MemberClient.from_kubeconfig(sims.kubeconfigs["leased"], cluster="leased")
    clock = wall or Wall()
    health = ClusterHealth(cluster="leased", resources=("nodes",), settings=HealthSettings(), metrics=Metrics(),
                           wall_clock=clock)
    lease = MemberLease(client=client, cluster="leased", identity="hub-a",
                        settings=LeaseSettings(duration_seconds=duration, margin_seconds=2.0), health=health,
                        request_timeout_seconds=request_timeout, metrics=Metrics(), wall_clock=clock)
    assert sim.name == "leased"
    return lease, client, health


async def test_the_lease_is_created_then_renewed_with_a_fresh_renew_time(tmp_path: Path, sims: Sims) -> None:
    wall = Wall()
    lease, client, _ = await _lease(tmp_path, sims, wall=wall)
    try:
        assert await lease.renew_once()
        first = await client.get(LEASES, namespace=FENCE_NAMESPACE, name="hub-a")
        assert first["spec"]["holderIdentity"] == "hub-a" and first["spec"]["leaseDurationSeconds"] == 3
        assert first["spec"]["renewTime"] == format_micro_time(wall.now) == first["spec"]["acquireTime"]
        wall.now += 1.25
        assert await lease.renew_once()
        second = await client.get(LEASES, namespace=FENCE_NAMESPACE, name="hub-a")
        assert second["spec"]["renewTime"] == format_micro_time(wall.now)
        assert second["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
        assert lease.renewals == 2 and lease.renewed_at == wall.now
        # Acknowledged at `now`: the agent fences at most lease + margin after that.
        assert lease.fenced_after() == 1_700_000_000.0 + 5.0 + 3.0 + 2.0  # a predecessor may land until +5 s
    finally:
        await client.close()


async def test_a_renewal_of_unknown_outcome_stops_renewals_until_contact_is_seen_again(
        tmp_path: Path, sims: Sims) -> None:
    wall = Wall()
    lease, client, health = await _lease(tmp_path, sims, wall=wall, duration=3.0, request_timeout=5.0)
    try:
        assert await lease.renew_once()
        sim = sims.clusters["leased"]
        sim.faults.start_partition(None)  # the renewal hangs until its (short) timeout: outcome unknown
        wall.now += 10
        sent = wall.now
        assert not await lease.renew_once()
        # It may still land up to one renewal timeout (a third of the lease) after it was sent.
        assert lease.latest_landing == sent + 1.0 and lease.unknown_since is not None
        assert not lease.may_send()
        deadline = lease.fenced_after()
        assert deadline == sent + 1.0 + 3.0 + 2.0
        # More time passes with no contact: the bound does not move, because nothing more is sent.
        wall.now += 60
        health.probe_failed(MemberUnreachable("cluster leased: probe timed out"), now_wall=wall.now)
        assert not lease.may_send() and lease.fenced_after() == deadline
        sim.faults.end_partition()
        wall.now += 1
        health.probe_succeeded()  # contact seen after the unknown attempt
        health.evaluate(now=1.0)
        assert health.first_loss_of_contact is None and health.last_contact == wall.now
        assert lease.may_send() and lease.unknown_since is None
        assert await lease.renew_once()
    finally:
        await client.close()


async def test_a_refused_renewal_is_not_a_possible_landing(tmp_path: Path, sims: Sims) -> None:
    wall = Wall()
    lease, client, _ = await _lease(tmp_path, sims, wall=wall)
    try:
        before = lease.latest_landing
        lease.settings = LeaseSettings(duration_seconds=3.0, margin_seconds=2.0, namespace="no-such-namespace")
        wall.now += 30
        assert lease.fence_may_be_up()  # nothing known yet
        assert not await lease.renew_once()  # 404 namespace: refused, it did not land
        assert lease.latest_landing == before and lease.unknown_since is None and lease.may_send()
        # Only ever refused: this hub holds no lease there, so no agent fences it and dispatch need not wait.
        assert lease.refused and not lease.fence_may_be_up()
        with pytest.raises(MemberApiError):
            await client.get(LEASES, namespace="no-such-namespace", name="hub-a")
    finally:
        await client.close()


async def test_a_fence_is_noticed_once_across_hub_restarts_and_recorded_as_handled(
        tmp_path: Path, sims: Sims) -> None:
    from federator.fencing.hublease import FENCE_COUNT, FENCE_HANDLING_SECONDS, FENCE_LIFTED, FENCE_SEEN

    wall = Wall()
    lease, client, health = await _lease(tmp_path, sims, wall=wall)
    try:
        assert await lease.renew_once()
        assert lease.fence_count == 0 and lease.fence_noticed_at is None
        # The member's agent fences while this hub is away and marks the Lease (as fencing/agent.py does).
        await client.patch(LEASES, namespace=FENCE_NAMESPACE, name="hub-a",
                           patch={"metadata": {"annotations": {FENCE_COUNT: "1"}}})
        # A restarted hub (a fresh MemberLease) notices it on its first renewal: nobody followed it up yet.
        restarted = MemberLease(client=client, cluster="leased", identity="hub-a", settings=lease.settings,
                                health=health, request_timeout_seconds=5.0, metrics=Metrics(), wall_clock=wall)
        wall.now += 1
        assert await restarted.renew_once()
        assert restarted.fence_noticed_at == wall.now and restarted.fence_count == 1
        noticed = wall.now
        assert restarted.fence_verdict(placed=wall.now - 100, missing_since=wall.now - 0.5) is True
        # placed after the notice, but before the hub knew the fence was over: the agent may have killed it too
        assert restarted.fence_verdict(placed=wall.now + 1, missing_since=wall.now - 0.5) is True
        assert restarted.fence_verdict(placed=wall.now - 100, missing_since=wall.now + 5) is None
        # The agent says the fence is over; from the answer that shows it, a placement is no longer its business.
        await client.patch(LEASES, namespace=FENCE_NAMESPACE, name="hub-a",
                           patch={"metadata": {"annotations": {FENCE_LIFTED: "1"}}})
        wall.now += 1
        assert await restarted.renew_once()
        assert restarted.fence_lifted_at() == wall.now and not restarted.fence_may_be_up()
        assert restarted.fence_verdict(placed=noticed + 0.5, missing_since=wall.now - 0.5) is True
        assert restarted.fence_verdict(placed=wall.now + 1, missing_since=wall.now - 0.5) is False
        # Once the gangs had time to be requeued, the hub records the fence as handled ...
        wall.now += FENCE_HANDLING_SECONDS
        assert await restarted.renew_once()
        stored = await client.get(LEASES, namespace=FENCE_NAMESPACE, name="hub-a")
        assert stored["metadata"]["annotations"][FENCE_SEEN] == "1"
        # ... so the next hub to start does not take it for a new one.
        again = MemberLease(client=client, cluster="leased", identity="hub-a", settings=lease.settings,
                            health=health, request_timeout_seconds=5.0, metrics=Metrics(), wall_clock=wall)
        wall.now += 1
        assert await again.renew_once()
        assert again.fence_noticed_at is None and again.fence_count == 1
    finally:
        await client.close()


async def test_the_hub_knows_when_the_members_fence_agent_may_be_fencing(tmp_path: Path, sims: Sims) -> None:
    """Dispatch waits while `fence_may_be_up`: before the first answer, after a lapse of renewals, and while
    the last answer shows a fence the agent has not marked lifted (at most a leaseDuration of renewals
    without a lapse for an agent that never does). The test plays the agent's part on the Lease."""
    from federator.fencing.hublease import FENCE_COUNT, FENCE_LIFTED

    wall = Wall()
    lease, client, _ = await _lease(tmp_path, sims, wall=wall, duration=3.0)  # margin 2 s: lapse after 1.5 s
    try:
        assert lease.lapse_seconds() == 1.5 and lease.fence_may_be_up()  # nothing known yet
        assert await lease.renew_once()
        assert not lease.fence_may_be_up() and not lease.fence_may_be_up(wall.now + 1.4)
        assert lease.fence_may_be_up(wall.now + 1.5)  # no answer for that long: the agent may have expired
        wall.now += 10  # a partition; meanwhile the agent fenced and marked the Lease
        await client.patch(LEASES, namespace=FENCE_NAMESPACE, name="hub-a",
                           patch={"metadata": {"annotations": {FENCE_COUNT: "1"}}})
        assert lease.fence_may_be_up()
        assert await lease.renew_once()  # back: the answer shows the fence, not lifted
        assert lease.in_force_since == wall.now and lease.fence_noticed_at == wall.now
        assert lease.fence_may_be_up()
        for _ in range(2):
            wall.now += 1
            assert await lease.renew_once() and lease.fence_may_be_up()
        await client.patch(LEASES, namespace=FENCE_NAMESPACE, name="hub-a",
                           patch={"metadata": {"annotations": {FENCE_LIFTED: "1"}}})
        assert lease.fence_may_be_up()  # not read yet
        wall.now += 1
        assert await lease.renew_once() and not lease.fence_may_be_up() and lease.fence_lifted == 1

        # An agent that never marks a fence lifted (gone since) is taken to have lifted it once renewals have
        # been answered without a lapse for a whole leaseDuration since they resumed.
        wall.now += 10
        await client.patch(LEASES, namespace=FENCE_NAMESPACE, name="hub-a",
                           patch={"metadata": {"annotations": {FENCE_COUNT: "2"}}})
        assert await lease.renew_once()
        resumed = wall.now
        while wall.now < resumed + 3.0:
            assert lease.fence_may_be_up()
            wall.now += 1
            assert await lease.renew_once()
        assert not lease.fence_may_be_up() and lease.fence_lifted_at() == resumed + 3.0
        # a malformed or hostile annotation counts as no fence at all
        await client.patch(LEASES, namespace=FENCE_NAMESPACE, name="hub-a",
                           patch={"metadata": {"annotations": {FENCE_COUNT: "9" * 40, FENCE_LIFTED: "x"}}})
        wall.now += 1
        assert await lease.renew_once() and lease.fence_count == 0 and not lease.fence_may_be_up()
    finally:
        await client.close()

