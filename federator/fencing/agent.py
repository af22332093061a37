"""The fence agent: runs inside one member cluster and kills what a hub left there once the hub's
Lease stops being renewed, so a gang the hub moved elsewhere never runs twice while a partition lasts.

The hub renews a `coordination.k8s.io/v1` Lease in every member (namespace `federator-system`,
name = the hub identity, the value of the `federator.dev/hub` label on everything it dispatches).
`FenceAgent` polls that Lease every `poll_seconds` and measures expiry on its own monotonic clock
from the moment it last saw the Lease change (its resourceVersion or renewTime), as client-go's
leader election tracks `observedTime`: the hub's and the member's wall clocks never meet, so skew
between them does not matter. A change is dated when the poll that showed it was *sent* (a slow
answer never delays the fence; at worst it fences a request's latency early), and a first sighting
counts as a change (a freshly started agent waits a whole leaseDuration before it fences). After
polls that got no answer, a change is dated when the first of them was sent: the renewal may have
landed at any time since the last answered poll, and the hub counts from its own latest landing
(a renewal that landed just before an outage of the member's API, seen only after it, once fenced
1.2 s late and the hub's failover started the gang's new copy before the old one was gone). So an
agent cut off from its API for a while fences early rather than late: after a gap of more than about
two thirds of leaseDuration it may fence a hub that was renewing, which then requeues its gangs. When the Lease has not changed for its
`leaseDurationSeconds`, the agent:

1. deletes every pod labelled `federator.dev/hub=<identity>` in every namespace (uid precondition,
   grace period 0), then every PodGroup so labelled, of every gang-scheduler kind the member serves
   (discovered by listing each kind the delegation adapters know: a 404 means not served, a 403 that
   its RBAC leaves that kind out, as deploy/member's does for other schedulers' kinds), and
   repeats until none is left. It spares the objects of gangs whose job says
   `onClusterLoss: wait` (label `federator.dev/on-cluster-loss=wait`): the hub never moves those, so
   they cannot run twice, and their job wants them kept through a partition;
2. records why: one structured log line (cluster, hub identity, seconds since the last renewal it
   saw, counts) and a core/v1 Event in its namespace about the Lease, reason `HubLeaseExpired`
   (later deletions in the same expiry update that Event's count and message);
3. keeps sweeping at every poll while the Lease stays expired (a dispatch that landed late);
4. stops when the Lease changes again ("hub lease renewed; fencing lifted"), and says so on the Lease
   (annotation FENCE_LIFTED = its FENCE_COUNT): until the hub reads that from a renewal's answer, it
   dispatches nothing here (a sweep begun before the renewal landed may still be deleting). An agent
   that finds a fence not marked lifted (its predecessor's, say) marks it once it has seen the hub
   renew since, unless it is fencing itself.

A Lease that does not exist is nothing to fence (the hub never came, or removed it on purpose): that
is logged once, and the agent keeps waiting. When the member's API does not answer the agent, the
failure is logged once in full, then summarised with a count (obs.RepeatedFailureLog); it is never
taken for a renewal, and polls back off (capped exponential, with jitter) until it answers.

Limits (docs/failover.md): the agent must itself be running (a Deployment in the member); a member
whose API server is down while its kubelets run pods cannot be fenced by it (nothing can be deleted
through a dead API server); expiry is measured from when the agent *saw* a change, so it fences at
most one poll interval plus its own deletes later than leaseDuration after the last renewal landed.

Layer: beside the hub's controllers. It talks to its member only through `clusters.client` and
takes the PodGroup kinds and label keys from `delegation`. It must never import the simulator or
the hub's controllers, and never log a credential or an object body.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import random
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from federator.apis.common import dns1123_label_errors
from federator.apis.timestamps import format_time
from federator.apis.views import Body
from federator.fencing.hublease import FENCE_COUNT, FENCE_LIFTED, FENCED_AT, annotation_count
from federator.clusters.client import (
    EVENTS,
    JOB_KIND_KEYS,
    JOB_KIND_RESOURCES,
    LEASES,
    PODS,
    ClientTimeouts,
    MemberApiError,
    MemberClient,
    MemberClientError,
    ResourceKind,
)
from federator.clusters.reflector import Backoff
from federator.delegation import ADAPTERS, hub_selector
from federator.delegation.adapter import CONFIG_MAP_GVK, LABEL_HUB, LABEL_ON_CLUSTER_LOSS, SERVICE_GVK
from federator.obs import METRICS, Metrics, RepeatedFailureLog, get_logger
from federator.runtime.waits import wait_event

__all__ = [
    "DEFAULT_NAMESPACE",
    "EVENT_REASON",
    "FenceAgent",
    "FenceCounters",
    "StepResult",
    "check_hub_identity",
    "podgroup_kinds",
]

DEFAULT_NAMESPACE = "federator-system"
DEFAULT_POLL_SECONDS = 1.0
EVENT_REASON = "HubLeaseExpired"
COMPONENT = "federator-agent"
#: list-and-delete rounds per step; what is left (say, an object held by a finalizer) waits for the next poll
MAX_SWEEP_ROUNDS = 5
#: the onClusterLoss policy whose gangs the hub never moves: the agent leaves them running
SPARED_POLICY = "wait"


def check_hub_identity(identity: str) -> str:
    """The identity, or ValueError saying what is wrong with it: it is both a label value and the Lease's
    name, so a DNS-1123 label."""
    if not isinstance(identity, str) or not identity.strip():
        raise ValueError("the hub identity must not be empty")
    if dns1123_label_errors(identity):
        raise ValueError(f"hub identity {identity[:80]!r} must be a valid label value and Lease name: at most 63 "
                         "lowercase letters, digits and '-', starting and ending with a letter or digit")
    return identity


#: a gang's other member objects (its headless Service, a framework's ConfigMap): swept after its pods
COMPANION_KINDS: tuple[ResourceKind, ...] = tuple(
    ResourceKind(group=g.group, version=g.version, plural=g.plural, kind=g.kind, namespaced=g.namespaced)
    for g in (SERVICE_GVK, CONFIG_MAP_GVK))


def podgroup_kinds() -> tuple[ResourceKind, ...]:
    """Every PodGroup kind a delegation adapter may create, once each."""
    found: dict[tuple[str, str, str], ResourceKind] = {}
    for adapter in ADAPTERS.values():
        if adapter.pod_group is None:
            continue
        gvk = adapter.pod_group.gvk
        found.setdefault((gvk.group, gvk.version, gvk.plural), ResourceKind(
            group=gvk.group, version=gvk.version, plural=gvk.plural, kind=gvk.kind, namespaced=gvk.namespaced))
    return tuple(found.values())


@dataclass
class FenceCounters:
    """What the agent did since it started."""

    polls: int = 0
    #: changes of the Lease seen after the first sighting
    renewals_seen: int = 0
    #: polls that got no answer (or an error) from the member's API
    unreachable: int = 0
    #: times the Lease was found expired (each starts fencing)
    expiries: int = 0
    #: times fencing stopped because the Lease changed again
    lifts: int = 0
    #: times the agent marked a fence over on the Lease (FENCE_LIFTED), for the hub to read
    lifts_marked: int = 0
    #: list-and-delete passes while expired
    sweeps: int = 0
    pods_deleted: int = 0
    podgroups_deleted: int = 0
    #: the gangs' Services and ConfigMaps
    companions_deleted: int = 0
    #: the hub's member copies of upstream job objects (operator mode: JobSets, PyTorchJobs, ...)
    copies_deleted: int = 0
    events_recorded: int = 0


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one step saw and did."""

    #: "no-lease" (nothing to fence), "held" (renewed in time), "expired" (fencing), "unreachable"
    state: str
    #: seconds since the agent last saw the Lease change (None: no Lease seen)
    since_change: float | None = None
    lease_duration: int | None = None
    pods_deleted: int = 0
    podgroups_deleted: int = 0
    #: objects still there after this step's sweep (deleted next time)
    remaining: int = 0


@dataclass(frozen=True, slots=True)
class _Seen:
    resource_version: str
    renew_time: str
    duration: int | None
    holder: str
    uid: str
    #: the Lease's FENCE_COUNT annotation: how many times an agent fenced under it
    fence_count: int = 0
    #: the Lease's FENCE_LIFTED annotation: the FENCE_COUNT whose fence an agent said is over
    fence_lifted: int = 0


@dataclass
class _Expiry:
    """One stretch of time during which the Lease stayed expired."""

    started: float
    since_change: float
    duration: int
    pods: int = 0
    podgroups: int = 0
    #: objects of `wait` gangs left running (counted when the expiry is announced)
    spared: int = 0
    #: the upstream job kinds the member serves (operator mode: the hub's member copies of them are swept first)
    copy_kinds: list[ResourceKind] = field(default_factory=list)
    event_name: str | None = None
    event_count: int = 0
    #: deletions not yet in the Event (its write failed or is pending)
    event_stale: bool = True
    #: the log line that starts it was written (after the first sweep that got through)
    announced: bool = False
    #: the PodGroup kinds the member serves (found at the first sweep that got through)
    kinds: list[ResourceKind] = field(default_factory=list)
    kinds_known: bool = False
    #: the fence is marked on the Lease (FENCE_COUNT raised), so the hub learns of it when it returns
    marked: bool = False


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class FenceAgent:
    """The fence agent of one member cluster (see the module docstring).

    Drive it with `await run(stop_event)`, or step by step with `await step()` (tests);
    `counters` says what it did, `fencing` whether the Lease is expired right now."""

    def __init__(
        self,
        *,
        client: MemberClient,
        hub_identity: str,
        namespace: str = DEFAULT_NAMESPACE,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        logger: Any = None,
        metrics: Metrics | None = None,
    ) -> None:
        if not (isinstance(poll_seconds, (int, float)) and 0 < poll_seconds <= 3600):
            raise ValueError(f"poll seconds must be more than 0 and at most 3600, not {poll_seconds!r}")
        if not isinstance(namespace, str) or dns1123_label_errors(namespace):
            raise ValueError(f"namespace {str(namespace)[:80]!r} is not a valid namespace name")
        self.client = client
        self.cluster = client.cluster
        self.hub_identity = check_hub_identity(hub_identity)
        self.namespace = namespace
        self.poll_seconds = float(poll_seconds)
        self.selector = hub_selector(self.hub_identity)
        #: what the agent deletes: the hub's objects, except those of gangs that wait for this cluster
        self.fence_selector = f"{self.selector},{LABEL_ON_CLUSTER_LOSS}!={SPARED_POLICY}"
        self._spared_selector = f"{self.selector},{LABEL_ON_CLUSTER_LOSS}={SPARED_POLICY}"
        self.clock = clock
        self.backoff = backoff or Backoff(initial=min(0.2, self.poll_seconds), maximum=max(5.0, self.poll_seconds))
        self._rng = rng or random.Random()
        self.metrics = metrics or METRICS
        self.log = (logger or get_logger("agent")).bind(cluster=self.cluster, hub=self.hub_identity)
        self.counters = FenceCounters()
        self._failures = RepeatedFailureLog(self.log, "cannot read the hub's lease from the member API; retrying",
                                            lease=f"{namespace}/{hub_identity}")
        self._seen: _Seen | None = None
        self._observed_at: float | None = None
        #: when the first poll that got no answer since the last answered one was sent (None: the last was answered)
        self._unanswered_since: float | None = None
        self._expiry: _Expiry | None = None
        self._said_missing = False
        self._said_no_duration = False
        self._said_holder = False
        #: the Lease's renewTime when the agent first saw a fence not marked lifted (None: none is): a
        #: different renewTime means the hub renewed since, so that fence may be marked lifted
        self._unlifted_renew: str | None = None
        self._said_lift_failed = False
        self._instance = socket.gethostname()

    # ------------------------------------------------------------ construction

    @classmethod
    async def from_kubeconfig(
        cls,
        path: str | os.PathLike[str],
        *,
        hub_identity: str,
        namespace: str = DEFAULT_NAMESPACE,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        cluster: str | None = None,
        timeouts: ClientTimeouts | None = None,
        logger: Any = None,
    ) -> FenceAgent:
        """An agent reaching its member through the kubeconfig at `path` (KubeconfigError if unusable).
        The cluster's name (for logs) is the current context's cluster unless given."""
        check_hub_identity(hub_identity)
        name = cluster or _cluster_name(Path(path))
        # requests must end well inside a poll or two: a hung one must not stall the expiry check for long
        limits = timeouts or ClientTimeouts(connect=min(5.0, max(1.0, poll_seconds * 2)),
                                            request=min(30.0, max(2.0, poll_seconds * 5)))
        client = await MemberClient.from_kubeconfig(path, cluster=name, timeouts=limits)
        try:
            return cls(client=client, hub_identity=hub_identity, namespace=namespace, poll_seconds=poll_seconds,
                       logger=logger)
        except BaseException:
            await client.close()
            raise

    async def close(self) -> None:
        await self.client.close()

    # ------------------------------------------------------------ state

    @property
    def fencing(self) -> bool:
        """True while the Lease is expired (the agent deletes the hub's objects at every poll)."""
        return self._expiry is not None

    def since_change(self, now: float | None = None) -> float | None:
        """Seconds since the agent last saw the Lease change (None: it has seen no Lease)."""
        if self._observed_at is None:
            return None
        return (self.clock() if now is None else now) - self._observed_at

    # ------------------------------------------------------------ loop

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until `stop` is set: every poll_seconds, or after a backoff while the member's API fails."""
        self.log.info("fence agent watching the hub's lease", lease=f"{self.namespace}/{self.hub_identity}",
                      poll_seconds=self.poll_seconds, server=self.client.server)
        failures = 0
        while not stop.is_set():
            try:
                result = await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the agent must outlive a bug in one step; say what failed
                self.log.error("fence agent step failed", error=f"{type(e).__name__}: {e}", exc_info=True)
                result = StepResult(state="unreachable")
            if result.state == "unreachable":
                delay = self.backoff.delay(failures, self._rng)
                failures += 1
            else:
                failures = 0
                delay = self.poll_seconds
            if await wait_event(stop, delay):
                break
        self.log.info("fence agent stopped", fencing=self.fencing)

    async def step(self) -> StepResult:
        """One poll of the Lease and, while it is expired, one sweep of the hub's objects."""
        t0 = time.perf_counter()
        self.counters.polls += 1
        # a change this poll shows is dated when the poll was sent: a slow answer must never delay the fence
        sent = self.clock()
        try:
            lease: dict[str, Any] | None = await self.client.get(LEASES, namespace=self.namespace,
                                                                 name=self.hub_identity)
        except MemberApiError as e:
            if e.code != 404:
                return self._unreachable(e, sent)
            lease = None
        except MemberClientError as e:
            return self._unreachable(e, sent)
        now = self.clock()
        # a change seen after unanswered polls may have landed as early as the first of them was sent
        dated, self._unanswered_since = (sent if self._unanswered_since is None else self._unanswered_since), None
        self._failures.succeeded("the member API answers the agent again")
        self.metrics.loop_phase_seconds.labels(loop="fence-agent", phase="poll").observe(time.perf_counter() - t0)
        if lease is None:
            return self._no_lease()
        self._observe(lease, dated)
        seen = self._seen
        assert seen is not None and self._observed_at is not None
        since = now - self._observed_at
        if seen.duration is None:
            if not self._said_no_duration:
                self._said_no_duration = True
                self.log.warning("the hub's lease has no valid leaseDurationSeconds; cannot tell when it expires",
                                 lease=f"{self.namespace}/{self.hub_identity}")
            return StepResult(state="held", since_change=since)
        self._said_no_duration = False
        if since < seen.duration:
            await self._mark_lifted(seen)
            return StepResult(state="held", since_change=since, lease_duration=seen.duration)
        return await self._fence(now, since, seen)

    # ------------------------------------------------------------ observing the Lease

    def _unreachable(self, error: MemberClientError, sent: float | None = None) -> StepResult:
        """A request got no answer; `sent`: when the poll that got none was sent (None: a sweep's request)."""
        if sent is not None and self._unanswered_since is None:
            self._unanswered_since = sent
        self.counters.unreachable += 1
        self._failures.failed(error, now=self.clock(), fencing=self.fencing)
        return StepResult(state="unreachable", since_change=self.since_change(),
                          lease_duration=self._seen.duration if self._seen else None)

    def _no_lease(self) -> StepResult:
        if self._seen is not None:
            self.log.warning("the hub's lease was deleted; nothing to fence until it is back",
                             lease=f"{self.namespace}/{self.hub_identity}", fencing_lifted=self.fencing)
            if self._expiry is not None:
                self.counters.lifts += 1
            self._said_missing = True
        elif not self._said_missing:
            self._said_missing = True
            self.log.info("the hub's lease does not exist (yet); nothing to fence, waiting for the hub",
                          lease=f"{self.namespace}/{self.hub_identity}")
        self._seen = None
        self._observed_at = None
        self._expiry = None
        self._unlifted_renew = None
        return StepResult(state="no-lease")

    def _observe(self, lease: dict[str, Any], sent: float) -> None:
        body = Body(lease)
        spec, annotations = body.spec, body.annotations
        duration = _int_or_none(spec.get("leaseDurationSeconds"))
        seen = _Seen(resource_version=body.resource_version,
                     renew_time=str(spec.get("renewTime") or ""),
                     duration=duration if duration is not None and duration > 0 else None,
                     holder=str(spec.get("holderIdentity") or ""), uid=body.uid,
                     fence_count=annotation_count(annotations.get(FENCE_COUNT)),
                     fence_lifted=annotation_count(annotations.get(FENCE_LIFTED)))
        before = self._seen
        self._seen = seen
        if seen.fence_count <= seen.fence_lifted:
            self._unlifted_renew = None
        elif self._unlifted_renew is None:
            self._unlifted_renew = seen.renew_time
        if before is None:
            self._said_missing = False
            self.log.info("the hub's lease exists; watching it", lease=f"{self.namespace}/{self.hub_identity}",
                          lease_duration_s=seen.duration, holder=seen.holder[:253])
        if seen.holder != self.hub_identity and not self._said_holder:
            self._said_holder = True
            self.log.warning("the hub's lease names another holder; its changes still count as renewals",
                             holder=seen.holder[:253])
        if before is not None and (before.resource_version, before.renew_time) == (seen.resource_version,
                                                                                   seen.renew_time):
            return
        if before is not None:
            self.counters.renewals_seen += 1
        self._observed_at = sent
        if self._expiry is not None:
            expiry, self._expiry = self._expiry, None
            self.counters.lifts += 1
            self.log.warning("hub lease renewed; fencing lifted", fenced_for_s=round(sent - expiry.started, 3),
                             pods_deleted=expiry.pods, podgroups_deleted=expiry.podgroups)

    # ------------------------------------------------------------ fencing

    async def _fence(self, now: float, since: float, seen: _Seen) -> StepResult:
        assert seen.duration is not None
        expiry = self._expiry
        if expiry is None:
            self.counters.expiries += 1
            expiry = self._expiry = _Expiry(started=now, since_change=since, duration=seen.duration)
        t0 = time.perf_counter()
        try:
            if not expiry.marked:
                # marked before anything is deleted: a hub that sees its pods gone and then reads the Lease
                # (a renewal sent after it saw them gone) always finds the mark
                await self._mark_fenced(expiry, seen)
            if not expiry.kinds_known:
                expiry.kinds = await self._served_podgroup_kinds()
                expiry.copy_kinds = await self._served_copy_kinds()
                expiry.kinds_known = True
            pods, groups, remaining = await self._sweep(expiry)
            if not expiry.announced:
                expiry.spared = await self._count_spared(expiry.kinds)
        except MemberClientError as e:
            return self._unreachable(e)
        finally:
            self.metrics.loop_phase_seconds.labels(loop="fence-agent", phase="sweep").observe(
                time.perf_counter() - t0)
        self.counters.sweeps += 1
        expiry.pods += pods
        expiry.podgroups += groups
        if not expiry.announced:
            expiry.announced = True
            self.log.warning(
                "hub lease expired: deleted the hub's pods and PodGroups in this cluster",
                since_last_renewal_s=round(since, 3), lease_duration_s=seen.duration, pods_deleted=pods,
                podgroups_deleted=groups, remaining=remaining, spared_waiting=expiry.spared,
                selector=self.fence_selector, podgroup_kinds=[k.key for k in expiry.kinds])
        elif pods or groups:
            self.log.warning("hub lease still expired: deleted the hub's objects that arrived since",
                             since_last_renewal_s=round(since, 3), pods_deleted=pods, podgroups_deleted=groups,
                             remaining=remaining, total_pods_deleted=expiry.pods,
                             total_podgroups_deleted=expiry.podgroups)
        if pods or groups:
            expiry.event_stale = True
        if expiry.event_stale:
            await self._record_event(expiry, since, seen)
        return StepResult(state="expired", since_change=since, lease_duration=seen.duration, pods_deleted=pods,
                          podgroups_deleted=groups, remaining=remaining)

    async def _mark_fenced(self, expiry: _Expiry, seen: _Seen) -> None:
        """Raise the Lease's FENCE_COUNT annotation once per expiry (before the first sweep), so that the hub,
        back in contact, requeues the gangs this agent killed instead of failing them. The Lease's own
        change that this makes is not a renewal (the agent records its new resourceVersion as seen)."""
        try:
            patched = await self.client.patch(
                LEASES, namespace=self.namespace, name=self.hub_identity,
                patch={"metadata": {"annotations": {FENCE_COUNT: str(seen.fence_count + 1),
                                                    FENCED_AT: format_time(dt.datetime.now(dt.UTC))}}})
        except MemberApiError as e:
            # refused (RBAC without patch on leases, a conflict): fence anyway, never run twice; the hub then
            # sees the gangs' objects deleted and fails them instead of requeueing them
            self.log.warning("could not mark the fence on the hub's lease; fencing anyway (the hub will fail the "
                             "killed gangs instead of requeueing them); retrying at the next sweep", error=str(e))
            return
        expiry.marked = True
        if self._unlifted_renew is None:
            self._unlifted_renew = seen.renew_time  # lifted once a renewal comes after this
        rv = Body(patched).resource_version
        if self._seen is not None and rv:
            self._seen = replace(self._seen, resource_version=rv, fence_count=seen.fence_count + 1)

    async def _mark_lifted(self, seen: _Seen) -> None:
        """While not fencing: when the Lease shows a fence not marked over (FENCE_COUNT above FENCE_LIFTED) and
        the hub has renewed since this agent first saw it so, set FENCE_LIFTED to FENCE_COUNT. The hub
        dispatches nothing here until it reads that: a sweep that began before its renewal landed may have
        been deleting until this step began. Like the mark, this change of the Lease is no renewal."""
        if seen.fence_count <= seen.fence_lifted or self._unlifted_renew in (None, seen.renew_time):
            return
        try:
            patched = await self.client.patch(LEASES, namespace=self.namespace, name=self.hub_identity,
                                              patch={"metadata": {"annotations": {
                                                  FENCE_LIFTED: str(seen.fence_count)}}})
        except MemberClientError as e:
            if not self._said_lift_failed:
                self._said_lift_failed = True
                self.log.warning("could not mark the fence lifted on the hub's lease; the hub dispatches nothing "
                                 "here until it is; retrying at every poll", error=str(e))
            return
        self._said_lift_failed = False
        self._unlifted_renew = None
        self.counters.lifts_marked += 1
        self.log.info("marked the fence lifted on the hub's lease", fence_count=seen.fence_count)
        rv = Body(patched).resource_version
        if self._seen is not None and rv:
            self._seen = replace(self._seen, resource_version=rv, fence_lifted=seen.fence_count)

    async def _served_copy_kinds(self) -> list[ResourceKind]:
        """The upstream job kinds (JobSet, PyTorchJob, batch Job, ...) the member's discovery lists: where the hub
        may have created member copies in operator mode. Discovery needs no grant; a kind the agent then may not
        list (403: its RBAC predates them) is skipped by the sweep."""
        served: list[ResourceKind] = []
        seen: dict[tuple[str, str], frozenset[str]] = {}
        for kind in JOB_KIND_RESOURCES.values():
            gv = (kind.group, kind.version)
            if gv not in seen:
                seen[gv] = await self.client.served_resources(group=kind.group, version=kind.version)
            if kind.plural in seen[gv]:
                served.append(kind)
        return served

    async def _served_podgroup_kinds(self) -> list[ResourceKind]:
        """The PodGroup kinds this member serves and the agent may list (a LIST that answers 404 means: not
        served; 403: not the agent's to fence, since kube authorizes before it looks a resource up, an agent whose
        RBAC names only its cluster's scheduler gets 403, not 404, for the other schedulers' kinds)."""
        served = []
        refused = []
        for kind in podgroup_kinds():
            try:
                await self.client.list(kind, label_selector=self.selector, limit=1)
            except MemberApiError as e:
                if e.code == 404:
                    continue
                if e.code == 403:
                    refused.append(kind.key)
                    continue
                raise
            served.append(kind)
        if refused:
            self.log.info("PodGroup kinds the agent may not list are not fenced (its RBAC names the kinds of this "
                          "cluster's scheduler)", not_allowed=refused, fenced=[k.key for k in served])
        return served

    async def _count_spared(self, kinds: Sequence[ResourceKind]) -> int:
        """How many of the hub's objects belong to gangs that wait for this cluster (left running)."""
        spared = 0
        for kind in (PODS, *kinds):
            try:
                spared += len((await self.client.list_all(kind, label_selector=self._spared_selector)).items)
            except MemberApiError as e:
                if e.code != 404:
                    raise
        return spared

    async def _sweep(self, expiry: _Expiry) -> tuple[int, int, int]:
        """Delete the hub's pods, then its Services, ConfigMaps and PodGroups, until a list finds none (at
        most MAX_SWEEP_ROUNDS rounds). Returns (pods deleted, PodGroups deleted, objects left)."""
        pods_deleted = groups_deleted = 0
        remaining = 0
        copy_kinds = expiry.copy_kinds
        for _ in range(MAX_SWEEP_ROUNDS):
            # the member copies first (operator mode): their operators would make the pods again; a kind the
            # member does not serve (404) or the agent may not list (403: its RBAC predates them) is skipped
            copies_left = 0
            for kind in list(copy_kinds):
                try:
                    copies = (await self.client.list_all(kind, label_selector=self.fence_selector)).items
                except MemberApiError as e:
                    if e.code not in (403, 404):
                        raise
                    copy_kinds.remove(kind)
                    continue
                if copies:
                    await self._delete_all(kind, copies)
                    copies_left += len(copies)
            pods = (await self.client.list_all(PODS, label_selector=self.fence_selector)).items
            if pods:
                pods_deleted += await self._delete_all(PODS, pods)
                remaining = len(pods)
                continue  # pods first: list them again until none is left
            remaining = 0
            for kind in COMPANION_KINDS:
                try:
                    companions = (await self.client.list_all(kind, label_selector=self.fence_selector)).items
                except MemberApiError as e:
                    if e.code not in (403, 404):  # an agent whose RBAC predates them: the hub's GC takes them
                        raise
                    continue
                if companions:
                    await self._delete_all(kind, companions)
                    remaining += len(companions)
            for kind in list(expiry.kinds):
                try:
                    groups = (await self.client.list_all(kind, label_selector=self.fence_selector)).items
                except MemberApiError as e:
                    if e.code != 404:
                        raise
                    expiry.kinds.remove(kind)  # the kind went away meanwhile
                    continue
                if groups:
                    groups_deleted += await self._delete_all(kind, groups)
                    remaining += len(groups)
            remaining += copies_left
            if remaining == 0:
                break
        return pods_deleted, groups_deleted, remaining

    async def _delete_all(self, kind: ResourceKind, items: Sequence[dict[str, Any]]) -> int:
        deleted = 0
        for item in items:
            meta = Body(item)
            name, namespace, uid, labels = meta.name, meta.namespace, meta.uid, meta.labels
            if not name or not namespace:
                continue
            if labels.get(LABEL_HUB) != self.hub_identity or labels.get(LABEL_ON_CLUSTER_LOSS) == SPARED_POLICY:
                continue  # never trust a selector alone with a delete
            try:
                await self.client.delete(kind, namespace=namespace, name=name, grace_period_seconds=0,
                                         precondition_uid=uid or None,
                                         propagation_policy="Background" if kind.key in JOB_KIND_KEYS else None)
            except MemberApiError as e:
                if e.code in (404, 409):  # gone already, or replaced by a new object (the next list has it)
                    continue
                raise
            deleted += 1
            if kind is PODS:
                self.counters.pods_deleted += 1
            elif kind in COMPANION_KINDS:
                self.counters.companions_deleted += 1
            elif kind.key in JOB_KIND_KEYS:
                self.counters.copies_deleted += 1
            else:
                self.counters.podgroups_deleted += 1
        return deleted

    async def _record_event(self, expiry: _Expiry, since: float, seen: _Seen) -> None:
        """Create the Event of this expiry, or bring its count and message up to date."""
        wall = dt.datetime.now(dt.UTC)
        spared = (f"; left {expiry.spared} objects of gangs that wait for this cluster (onClusterLoss: wait)"
                  if expiry.spared else "")
        message = (f"hub {self.hub_identity} has not renewed its lease for {since:.1f}s (leaseDurationSeconds "
                   f"{seen.duration}); deleted {expiry.pods} pods and {expiry.podgroups} PodGroups labelled "
                   f"{self.selector}{spared}")[:1024]
        try:
            if expiry.event_name is not None:
                try:
                    await self.client.patch(EVENTS, namespace=self.namespace, name=expiry.event_name, patch={
                        "count": expiry.event_count + 1, "lastTimestamp": format_time(wall), "message": message})
                    expiry.event_count += 1
                    expiry.event_stale = False
                    return
                except MemberApiError as e:
                    if e.code != 404:
                        raise
            name = f"{self.hub_identity}.{time.time_ns():x}"
            await self.client.create(EVENTS, {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": self.namespace},
                "involvedObject": {"apiVersion": LEASES.api_version, "kind": LEASES.kind, "name": self.hub_identity,
                                   "namespace": self.namespace, "uid": seen.uid,
                                   "resourceVersion": seen.resource_version},
                "reason": EVENT_REASON, "type": "Warning", "message": message,
                "source": {"component": COMPONENT, "host": self._instance[:253]},
                "reportingComponent": COMPONENT, "reportingInstance": self._instance[:128],
                "firstTimestamp": format_time(wall), "lastTimestamp": format_time(wall), "count": 1,
            }, namespace=self.namespace)
            expiry.event_name, expiry.event_count, expiry.event_stale = name, 1, False
            self.counters.events_recorded += 1
        except MemberClientError as e:
            # the deletions are done and logged; the Event follows at the next poll
            self.log.warning("could not record the HubLeaseExpired event; retrying at the next poll", error=str(e))


def _cluster_name(path: Path) -> str:
    """The current context's cluster in a kubeconfig (for logs), else the file's stem."""
    import yaml

    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        current = document.get("current-context")
        for entry in document.get("contexts") or []:
            if entry.get("name") == current:
                name = (entry.get("context") or {}).get("cluster")
                if isinstance(name, str) and name:
                    return name[:253]
    except (OSError, ValueError, AttributeError, TypeError, yaml.YAMLError):
        pass
    return path.stem[:253]
