"""The fence agent against a real SimCluster over real sockets (HTTPS, the `federator-agent`
identity), with the test renewing the hub's Lease over HTTPS as the admin identity:

- renewed in time, nothing is deleted;
- once renewal stops, after leaseDuration the agent deletes the hub's pods and PodGroups (of every
  served gang-scheduler kind), not another hub's nor unlabelled ones, logs why, writes a
  HubLeaseExpired Event, and keeps deleting what arrives late; a renewal lifts fencing;
- with the hub's identity partitioned (`from`) and the agent's not, the agent still fences;
- step by step on a clock the test moves: expiry is measured from the last change the agent saw,
  unreachability is never taken for a renewal (and is logged once, then summarised), a missing
  Lease is nothing to fence, a Lease without a duration cannot expire.

Every wait is for an event (a count, a phase, a log line) with a deadline; no wall-clock timing is
asserted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agenttest_support import HUB, NAMESPACE, OTHER_HUB, Member, RecordingLog, Renewer, micro_now, wait_until

from federator.fencing.agent import EVENT_REASON, FenceAgent, check_hub_identity, podgroup_kinds
from federator.clusters.client import MemberClient
from federator.fencing.hublease import FENCE_COUNT, FENCE_LIFTED
from federator.delegation.adapter import LABEL_HUB
from federator.sim import kinds

LEASE_SECONDS = 2


class Running:
    """A FenceAgent running (`run`) on the test's loop."""

    def __init__(self, agent: FenceAgent) -> None:
        self.agent = agent
        self.stop = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(agent.run(self.stop), name="test-fence-agent")

    async def close(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 30)
        await self.agent.close()


@pytest.fixture
async def log() -> RecordingLog:
    return RecordingLog()


@pytest.fixture
async def running(member: Member, log: RecordingLog) -> AsyncIterator[Running]:
    agent = await FenceAgent.from_kubeconfig(member.agent_kubeconfig, hub_identity=HUB, poll_seconds=0.1,
                                             logger=log)
    r = Running(agent)
    try:
        yield r
    finally:
        await r.close()


async def dispatch(member: Member) -> dict[str, set[tuple[str, str, str]]]:
    """What a hub-a dispatch, a hub-b dispatch and someone else's work look like in the member."""
    a, b = await member.namespace("team-a"), await member.namespace("team-b")
    await member.pod(a, "ps-0", hub=HUB, on_loss="requeue")
    await member.pod(b, "worker-0", hub=HUB, scheduler="default-scheduler")  # bound and Running below
    await member.pod(b, "worker-1", hub=HUB, on_loss="fail")
    await member.podgroup(kinds.VOLCANO_PODGROUPS, a, "gang", hub=HUB)
    await member.podgroup(kinds.COSCHEDULING_PODGROUPS, b, "gang", hub=HUB, on_loss="requeue")
    # a gang whose job waits for this cluster: the hub never moves it, so the agent leaves it running
    await member.pod(a, "waiting-0", hub=HUB, on_loss="wait")
    await member.podgroup(kinds.VOLCANO_PODGROUPS, a, "waiting", hub=HUB, on_loss="wait")
    await member.pod(a, "other-hub", hub=OTHER_HUB)
    await member.podgroup(kinds.VOLCANO_PODGROUPS, a, "other-gang", hub=OTHER_HUB)
    await member.pod(b, "unlabelled", hub=None)

    async def worker_running() -> bool:
        p = await member.storage.get(kinds.PODS, namespace=b, name="worker-0")
        return bool(p["status"].get("phase") == "Running")

    await wait_until("the hub's worker to run", worker_running)
    mine = {("pod", a, "ps-0"), ("pod", b, "worker-0"), ("pod", b, "worker-1"), ("volcano", a, "gang"),
            ("coscheduling", b, "gang")}
    others = {("pod", a, "other-hub"), ("volcano", a, "other-gang"), ("pod", b, "unlabelled"),
              ("pod", a, "waiting-0"), ("volcano", a, "waiting")}
    return {"mine": mine, "others": others, "namespaces": {("ns", a, ""), ("ns", b, "")}}


async def test_renewed_lease_keeps_everything_then_expiry_fences_and_renewal_lifts(
        member: Member, renewer: Renewer, running: Running, log: RecordingLog) -> None:
    agent = running.agent
    renewer.start()
    await wait_until("the lease", lambda: renewer.renewals >= 1)
    made = await dispatch(member)
    # renewed every 0.3 s: the agent sees renewal after renewal, for longer than the lease lasts
    await wait_until("renewals seen across more than a lease duration",
                     lambda: agent.counters.renewals_seen >= 3 * LEASE_SECONDS / renewer.every + 2)
    assert agent.counters.expiries == 0 and not agent.fencing
    assert made["mine"] | made["others"] <= await member.objects()

    # a gang's headless Service goes with its pods; another hub's stays
    svc_ns = next(iter(made["namespaces"]))[1]
    for name, hub in (("gang-svc", HUB), ("their-svc", "another-hub")):
        await member.storage.create(kinds.SERVICES, {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": {LABEL_HUB: hub}},
            "spec": {"clusterIP": "None", "selector": {LABEL_HUB: hub}}}, namespace=svc_ns)

    async def services() -> set[str]:
        return {s["metadata"]["name"] for s in (await member.storage.list(kinds.SERVICES, namespace=svc_ns)).items}

    # the hub stops renewing: after leaseDuration the hub's objects go, nothing else does
    await renewer.stop()

    async def mine_gone() -> bool:
        return not made["mine"] & await member.objects()

    await wait_until("the hub's pods and PodGroups to be deleted", mine_gone)
    async def only_theirs() -> bool:
        return await services() == {"their-svc"}

    await wait_until("the hub's Service to be deleted", only_theirs)
    assert agent.counters.companions_deleted == 1
    expired = await wait_until("the agent to say why", lambda: log.find("hub lease expired"))
    assert agent.fencing and agent.counters.expiries == 1
    assert made["others"] <= await member.objects()
    assert agent.counters.pods_deleted == 3 and agent.counters.podgroups_deleted == 2
    assert len(expired) == 1
    line = expired[0]
    assert line["pods_deleted"] == 3 and line["podgroups_deleted"] == 2 and line["remaining"] == 0
    assert line["spared_waiting"] == 2
    assert line["since_last_renewal_s"] >= LEASE_SECONDS and line["lease_duration_s"] == LEASE_SECONDS
    assert sorted(line["podgroup_kinds"]) == ["podgroups.scheduling.volcano.sh", "podgroups.scheduling.x-k8s.io"]
    events = await wait_until("the HubLeaseExpired event", lambda: member.events(EVENT_REASON))
    assert len(events) == 1
    event = events[0]
    assert event["type"] == "Warning" and event["count"] == 1
    assert event["involvedObject"]["kind"] == "Lease" and event["involvedObject"]["name"] == HUB
    assert event["involvedObject"]["namespace"] == NAMESPACE and event["involvedObject"]["uid"]
    assert event["source"]["component"] == "federator-agent"
    assert "deleted 3 pods and 2 PodGroups" in event["message"] and f"federator.dev/hub={HUB}" in event["message"]
    assert "left 2 objects of gangs that wait for this cluster" in event["message"]

    # a dispatch that lands while the lease stays expired is deleted too, and the event says so
    ns = next(iter(made["namespaces"]))[1]
    await member.pod(ns, "late", hub=HUB)
    await member.podgroup(kinds.VOLCANO_PODGROUPS, ns, "late-gang", hub=HUB)

    async def late_gone() -> bool:
        objects = await member.objects()
        return ("pod", ns, "late") not in objects and ("volcano", ns, "late-gang") not in objects

    await wait_until("the late dispatch to be deleted", late_gone)

    async def event_counts_two() -> bool:
        evs = await member.events(EVENT_REASON)
        return len(evs) == 1 and evs[0]["count"] == 2 and "deleted 4 pods and 3 PodGroups" in evs[0]["message"]

    await wait_until("the event to count the late deletions", event_counts_two)
    assert made["others"] <= await member.objects()

    # the hub renews again: fencing is lifted, and what it dispatches now stays
    renewer.start()
    await wait_until("fencing to be lifted", lambda: not agent.fencing)
    assert log.find("hub lease renewed; fencing lifted") and agent.counters.lifts == 1
    await member.pod(ns, "after", hub=HUB)
    polls = agent.counters.polls
    await wait_until("five more polls", lambda: agent.counters.polls >= polls + 5)
    assert ("pod", ns, "after") in await member.objects() and not agent.fencing


async def test_agent_fences_while_only_the_hub_is_partitioned(member: Member, renewer: Renewer,
                                                              running: Running) -> None:
    agent = running.agent
    renewer.start()
    await wait_until("the lease", lambda: renewer.renewals >= 1)
    made = await dispatch(member)
    await wait_until("renewals seen", lambda: agent.counters.renewals_seen >= 3)
    # cut off the hub's identity (the admin token the renewer uses); the agent's identity still gets answers
    member.cluster.faults.start_partition(None, source=member.cluster.token)
    assert member.cluster.faults.partition_from == "sim-admin"

    async def mine_gone() -> bool:
        return not made["mine"] & await member.objects()

    await wait_until("the hub's objects to be deleted during the partition", mine_gone)
    assert agent.counters.unreachable == 0  # the agent itself was never cut off
    await wait_until("a renewal of the hub's to fail", lambda: renewer.failures >= 1)  # the hub was
    assert made["others"] <= await member.objects()

    async def recorded() -> bool:  # the Event is written after the sweep's deletes: wait for it
        return bool(await member.events(EVENT_REASON))

    await wait_until("the HubLeaseExpired Event", recorded)
    member.cluster.faults.end_partition()
    await wait_until("fencing to be lifted after the partition", lambda: not agent.fencing)


# ---------------------------------------------------------------- step by step, on the test's clock


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _lease(member: Member, *, duration: int | None = LEASE_SECONDS) -> None:
    spec: dict[str, Any] = {"holderIdentity": HUB, "renewTime": micro_now()}
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    try:
        current = await member.storage.get(kinds.LEASES, namespace=NAMESPACE, name=HUB)
    except Exception:  # noqa: BLE001 - not there yet
        await member.storage.create(kinds.LEASES, {"metadata": {"name": HUB}, "spec": spec}, namespace=NAMESPACE)
        return
    current["spec"] = spec
    await member.storage.update(kinds.LEASES, current, namespace=NAMESPACE, name=HUB)


@pytest.fixture
async def stepped(member: Member, log: RecordingLog) -> AsyncIterator[tuple[FenceAgent, Clock]]:
    clock = Clock()
    client = await MemberClient.from_kubeconfig(member.agent_kubeconfig, cluster=member.cluster.name)
    agent = FenceAgent(client=client, hub_identity=HUB, clock=clock, logger=log)
    try:
        yield agent, clock
    finally:
        await agent.close()


async def test_expiry_counts_from_the_last_change_seen_and_unreachability_is_no_renewal(
        member: Member, stepped: tuple[FenceAgent, Clock], log: RecordingLog) -> None:
    agent, clock = stepped
    ns = await member.namespace()
    await member.pod(ns, "p", hub=HUB)
    await _lease(member)
    assert (await agent.step()).state == "held"  # first sighting: the clock starts now
    clock.now += LEASE_SECONDS - 0.1
    result = await agent.step()
    assert result.state == "held" and result.since_change == pytest.approx(LEASE_SECONDS - 0.1)
    await _lease(member)  # renewed: measured again from now
    clock.now += 1.0
    result = await agent.step()
    assert result.state == "held" and result.since_change == 0 and agent.counters.renewals_seen == 1
    # the member's API stops answering the agent (503s) while the hub stays silent
    await member.cluster.faults.start_outage(600, mode="503")
    for _ in range(3):
        clock.now += 0.6
        result = await agent.step()
        assert result.state == "unreachable"
    assert agent.counters.unreachable == 3 and len(log.find("cannot read the hub's lease")) == 1
    await member.cluster.faults.end_outage()
    # answered again, the lease unchanged: 1.8 s since the renewal seen plus the step now
    clock.now += 0.3
    result = await agent.step()
    assert result.state == "expired" and result.since_change == pytest.approx(2.1)
    assert result.pods_deleted == 1 and agent.counters.renewals_seen == 1
    assert log.find("answers the agent again")[0]["failures"] == 3
    assert ("pod", ns, "p") not in await member.objects()
    result = await agent.step()
    assert result.state == "expired" and result.pods_deleted == 0 and agent.counters.expiries == 1
    await _lease(member)
    clock.now += 0.1
    assert (await agent.step()).state == "held" and not agent.fencing and agent.counters.lifts == 1


async def test_a_renewal_seen_only_after_unanswered_polls_is_dated_from_the_first_of_them(
        member: Member, stepped: tuple[FenceAgent, Clock], log: RecordingLog) -> None:
    """Chaos seed 568237445: a renewal that landed just before an outage of the member's API was seen only
    after it, dated then, and fenced 1.2 s later than the hub counted on (its failover's new copy ran beside
    the old one). The renewal may have landed as soon as the first unanswered poll was sent."""
    agent, clock = stepped
    ns = await member.namespace()
    await member.pod(ns, "p", hub=HUB)
    await _lease(member)
    assert (await agent.step()).state == "held"
    clock.now += 0.5
    assert (await agent.step()).state == "held"
    await member.cluster.faults.start_outage(600, mode="503")
    clock.now += 0.5
    first_unanswered = clock.now
    assert (await agent.step()).state == "unreachable"
    await _lease(member)  # the hub's renewal lands while the agent cannot read (written past the outage)
    for _ in range(2):
        clock.now += 0.4
        assert (await agent.step()).state == "unreachable"
    await member.cluster.faults.end_outage()
    clock.now += 0.4
    result = await agent.step()  # the change is seen now, 1.2 s after the first unanswered poll
    assert result.state == "held" and agent.counters.renewals_seen == 1
    assert result.since_change == pytest.approx(clock.now - first_unanswered) == pytest.approx(1.2)
    # expiry counts from the first unanswered poll, not from this sighting
    clock.now = first_unanswered + LEASE_SECONDS - 0.05
    assert (await agent.step()).state == "held"
    clock.now = first_unanswered + LEASE_SECONDS + 0.05
    result = await agent.step()
    assert result.state == "expired" and result.pods_deleted == 1
    assert ("pod", ns, "p") not in await member.objects()
    # answered polls date changes when they are sent again
    await _lease(member)
    clock.now += 0.3
    assert (await agent.step()).state == "held" and agent.since_change() == 0


async def _annotations(member: Member) -> dict[str, str]:
    lease = await member.storage.get(kinds.LEASES, namespace=NAMESPACE, name=HUB)
    return dict(lease["metadata"].get("annotations") or {})


async def test_each_fence_is_counted_and_marked_lifted_once_the_agent_has_seen_the_hub_renew(
        member: Member, stepped: tuple[FenceAgent, Clock], log: RecordingLog) -> None:
    """The hub dispatches nothing into a member while FENCE_COUNT is above FENCE_LIFTED on its Lease: the agent
    raises the count before its first delete and marks it lifted only from a step that began after it saw
    a renewal (no sweep of that fence can still be running then)."""
    agent, clock = stepped
    ns = await member.namespace()
    await _lease(member)
    assert (await agent.step()).state == "held"
    for fence in (1, 2):  # the second fence raises the count again (it once stayed at "1" for ever)
        await member.pod(ns, f"p{fence}", hub=HUB)
        clock.now += LEASE_SECONDS + 0.1
        result = await agent.step()
        assert result.state == "expired" and result.pods_deleted == 1
        marks = await _annotations(member)
        assert marks[FENCE_COUNT] == str(fence) and marks.get(FENCE_LIFTED, "0") == str(fence - 1)
        # still expired: no renewal seen, so the fence is not marked lifted, however many polls go by
        clock.now += 0.5
        assert (await agent.step()).state == "expired"
        assert (await _annotations(member)).get(FENCE_LIFTED, "0") == str(fence - 1)
        await _lease(member)  # the hub renews: the next step lifts the fence and says so on the Lease
        clock.now += 0.1
        assert (await agent.step()).state == "held" and not agent.fencing
        assert (await _annotations(member))[FENCE_LIFTED] == str(fence)
        assert agent.counters.lifts_marked == fence and log.find("marked the fence lifted")
        # the agent's own mark is not a renewal: the lease still expires a leaseDuration after the hub's
        clock.now += LEASE_SECONDS - 0.2
        assert (await agent.step()).state == "held" and agent.counters.lifts_marked == fence
    assert agent.counters.expiries == 2 and agent.counters.lifts == 2


async def test_an_agent_that_finds_a_fence_not_marked_lifted_marks_it_only_after_a_renewal(
        member: Member, stepped: tuple[FenceAgent, Clock]) -> None:
    """A predecessor fenced and died before it said the fence was over: its successor says so once it has
    seen the hub renew (not at its first sighting, when a renewal may not have come since the fence)."""
    agent, clock = stepped
    await _lease(member)
    lease = await member.storage.get(kinds.LEASES, namespace=NAMESPACE, name=HUB)
    lease["metadata"]["annotations"] = {FENCE_COUNT: "3", FENCE_LIFTED: "2"}
    await member.storage.update(kinds.LEASES, lease, namespace=NAMESPACE, name=HUB)
    for _ in range(2):
        assert (await agent.step()).state == "held"
        clock.now += 0.2
    assert (await _annotations(member))[FENCE_LIFTED] == "2" and agent.counters.lifts_marked == 0
    await _lease(member)  # replaces the spec only: the annotations stay
    assert (await agent.step()).state == "held"
    assert (await _annotations(member))[FENCE_LIFTED] == "3" and agent.counters.lifts_marked == 1
    # malformed or hostile counts are no fence to mark
    for bad in ("x", "-4", "9" * 40, ""):
        lease = await member.storage.get(kinds.LEASES, namespace=NAMESPACE, name=HUB)
        lease["metadata"]["annotations"] = {FENCE_COUNT: bad, FENCE_LIFTED: "0"}
        await member.storage.update(kinds.LEASES, lease, namespace=NAMESPACE, name=HUB)
        await _lease(member)
        assert (await agent.step()).state == "held"
        await _lease(member)
        assert (await agent.step()).state == "held"
        assert (await _annotations(member))[FENCE_LIFTED] == "0" and agent.counters.lifts_marked == 1


async def test_a_missing_lease_is_nothing_to_fence(member: Member, stepped: tuple[FenceAgent, Clock],
                                                   log: RecordingLog) -> None:
    agent, clock = stepped
    ns = await member.namespace()
    await member.pod(ns, "p", hub=HUB)
    for _ in range(3):
        clock.now += 100
        assert (await agent.step()).state == "no-lease"
    assert len(log.find("does not exist")) == 1
    await _lease(member)
    assert (await agent.step()).state == "held" and log.find("the hub's lease exists")
    clock.now += 100
    assert (await agent.step()).state == "expired"
    await member.storage.delete(kinds.LEASES, namespace=NAMESPACE, name=HUB)
    await member.pod(ns, "q", hub=HUB)
    assert (await agent.step()).state == "no-lease" and not agent.fencing
    assert log.find("lease was deleted")
    assert ("pod", ns, "q") in await member.objects()


async def test_a_lease_without_a_duration_cannot_expire(member: Member, stepped: tuple[FenceAgent, Clock],
                                                        log: RecordingLog) -> None:
    agent, clock = stepped
    await _lease(member, duration=None)
    for _ in range(2):
        clock.now += 1000
        assert (await agent.step()).state == "held"
    assert len(log.find("no valid leaseDurationSeconds")) == 1 and agent.counters.expiries == 0


def test_identity_and_settings_are_checked() -> None:
    assert check_hub_identity("federator") == "federator"
    for bad in ("", "  ", "Hub", "a_b", "x" * 64, "-a", "a-", "hub-a\n"):
        with pytest.raises(ValueError):
            check_hub_identity(bad)
    keys = {k.key for k in podgroup_kinds()}
    assert keys == {"podgroups.scheduling.volcano.sh", "podgroups.scheduling.x-k8s.io",
                    "podgroups.scheduling.incubator.k8s.io", "podgroups.scheduling.k8s.io",
                    "podgroups.scheduling.run.ai"}


async def test_bad_settings_are_refused(member: Member) -> None:
    client = await MemberClient.from_kubeconfig(member.agent_kubeconfig, cluster=member.cluster.name)
    try:
        with pytest.raises(ValueError, match="poll seconds"):
            FenceAgent(client=client, hub_identity=HUB, poll_seconds=0)
        with pytest.raises(ValueError, match="poll seconds"):
            FenceAgent(client=client, hub_identity=HUB, poll_seconds=-1)
        with pytest.raises(ValueError, match="namespace"):
            FenceAgent(client=client, hub_identity=HUB, namespace="Bad_NS")
        with pytest.raises(ValueError, match="must not be empty"):
            FenceAgent(client=client, hub_identity="")
    finally:
        await client.close()


async def test_the_agent_deletes_the_hubs_member_copies_and_no_one_elses(tmp_path: Any, log: RecordingLog) -> None:
    """Operator mode (issue 28): on a member running the job operators, an expired lease makes the agent delete
    the hub's member copies (a JobSet here, with propagation Background: its operator's Jobs and pods go by their
    ownerReferences), not another hub's nor an unlabelled one."""
    from federator.clusters.client import JOB_KIND_RESOURCES
    from federator.sim.operators import OPERATOR_NAMES
    from federator.sim.profile import parse_profile
    from federator.sim.server import SimCluster

    profile = parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": "fence-ops",
        "location": {"type": "on-prem", "region": "lab"}, "network": {"fabric": "infiniband", "bandwidthGbps": 200},
        "schedulers": [{"type": "default"}, {"type": "volcano"}],
        "kubelet": {"startDelaySeconds": 0.05, "terminationSeconds": 0.05},
        "nodePools": [{"name": "cpu", "count": 1, "cpu": "32", "memory": "128Gi"}],
        "operators": list(OPERATOR_NAMES),
    }, source="tests/fencing")
    cluster = SimCluster(profile)
    await cluster.start()
    member = Member(cluster, tmp_path)
    admin = await MemberClient.from_kubeconfig(cluster.write_kubeconfig(tmp_path / "admin.kubeconfig"),
                                               cluster=cluster.name)
    clock = Clock()
    agent = FenceAgent(client=await MemberClient.from_kubeconfig(member.agent_kubeconfig, cluster=cluster.name),
                       hub_identity=HUB, clock=clock, logger=log)
    jobsets = JOB_KIND_RESOURCES["JobSet.jobset.x-k8s.io"]
    try:
        ns = await member.namespace()
        for name, hub in (("mine", HUB), ("theirs", OTHER_HUB), ("unlabelled", None)):
            await admin.create(jobsets, {
                "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": name, "labels": {LABEL_HUB: hub} if hub else {}},
                "spec": {"suspend": True, "replicatedJobs": [{"name": "w", "template": {"spec": {
                    "template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "busybox"}]}}}}}]}},
                namespace=ns)
        await _lease(member)
        assert (await agent.step()).state == "held"
        clock.now += LEASE_SECONDS + 0.5
        result = await agent.step()
        assert result.state == "expired"

        async def left() -> set[str]:
            listed = (await admin.list(jobsets, namespace=ns)).items
            return {j["metadata"]["name"] for j in listed if not j["metadata"].get("deletionTimestamp")}

        async def only_theirs() -> bool:
            return await left() == {"theirs", "unlabelled"}

        await wait_until("the hub's JobSet deleted", only_theirs)
        assert agent.counters.copies_deleted == 1
    finally:
        await agent.close()
        await admin.close()
        await cluster.stop()
