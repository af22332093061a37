"""The hub's fencing Lease in one member cluster (`coordination.k8s.io/v1`), renewed while in contact.

The hub holds one Lease per hub identity in every member (namespace
`federator-system`, name = the hub identity, the value of the
`federator.dev/hub` label on its member objects) and renews it every
leaseDuration/3 (at most 5 s apart). The lease lasts as long as the cluster's
loss grace unless configured otherwise: the agent then fences only when the
hub is about to judge the cluster lost. The member-side fence agent (`federator/fencing/agent.py`, a
process inside the member) deletes every pod and PodGroup of this hub once
the Lease has not changed for leaseDurationSeconds, measured on the agent's
own clock from when it saw the last change. So the hub can tell from its own
clock alone a moment after which any copy of its gangs in an unreachable
member is dead: `fenced_after()` = the latest moment a renewal may have
landed + leaseDuration + margin (docs/failover.md explains the margin).

What keeps that moment fixed while a partition lasts:
- a renewal is sent only while the cluster is in contact: after an attempt
  whose outcome is unknown (timeout, cut connection, a 5xx), nothing more is
  sent until the cluster's health saw contact again after that attempt;
- an acknowledged renewal landed before its acknowledgement; one whose
  outcome is unknown may land up to one request timeout after it was sent
  (renewals use a short one: a third of the lease, at most the client's);
- a hub that starts cannot know when its predecessor last renewed, so it
  assumes a renewal may land up to 5 s after its start (the longest renewal
  timeout any hub uses).

Whether the agent may be fencing right now (`fence_may_be_up`): dispatch sends
nothing into a member while it may, because the agent would delete the new
copy too (a gang placed back into a cluster that just returned, while the
agent had not yet seen the hub's first renewal). It may be fencing
- before the first acknowledged renewal (a hub that just started cannot know
  whether its predecessor's lease lapsed);
- once no renewal was acknowledged for `lapse_seconds()` (the agent may have
  seen no change for its leaseDuration), until one is again;
- while the last renewal's answer shows FENCE_COUNT above FENCE_LIFTED: the
  agent fenced and has not yet said that it saw the hub renew since. An agent
  that never says so (gone since) is taken to have lifted once renewals have
  been acknowledged without a lapse for a whole leaseDuration (any agent that
  polls has seen one by then).
A hub whose renewals were only ever refused (RBAC, no Lease kind) holds no
lease there (docs/failover.md: no agent fencing), so there is nothing to wait for.

Failures are logged once in full, then summarised (obs.RepeatedFailureLog).
Never logs a credential or an object body.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from federator.apis.timestamps import format_micro_time
from federator.apis.views import Body
from federator.clusters.client import LEASES, MemberApiError, MemberClient, MemberClientError, member_write_reason
from federator.clusters.health import ClusterHealth
from federator.obs import METRICS, Metrics, RepeatedFailureLog, get_logger

__all__ = ["FENCED_AT", "FENCE_COUNT", "FENCE_LIFTED", "FENCE_NAMESPACE", "FENCE_SEEN", "LeaseSettings", "MemberLease",
           "annotation_count"]

FENCE_NAMESPACE = "federator-system"
#: Annotations the fence agent puts on the Lease when it fences: how many times, and when (its clock). The hub
#: reads them from its next renewal's answer, so it knows its gangs there were killed, not lost by the member.
FENCE_COUNT = "federator.dev/fence-count"
FENCED_AT = "federator.dev/fenced-at"
#: Written by the fence agent once it has seen the hub renew after a fence (and is not fencing itself): the
#: FENCE_COUNT whose fence is over. While FENCE_COUNT is above it, the agent may still delete what the hub
#: sends, so the hub dispatches nothing into that member (`MemberLease.fence_may_be_up`).
FENCE_LIFTED = "federator.dev/fence-lifted"
#: Written by the hub: the FENCE_COUNT whose killed gangs it has requeued. A hub that starts (or takes over)
#: and finds FENCE_COUNT above it knows a fence happened that no hub followed up yet.
FENCE_SEEN = "federator.dev/fence-seen"
#: How long after noticing a fence the hub waits before it records it as handled (status sync requeues the
#: killed gangs within its own patience, 30 s).
FENCE_HANDLING_SECONDS = 60.0
#: Answers after which a write may still have landed (the server timed out or is in trouble).
_OUTCOME_UNKNOWN_CODES = frozenset({500, 502, 503, 504})


def annotation_count(value: Any) -> int:
    """A count kept in a Lease annotation (FENCE_COUNT, FENCE_SEEN, FENCE_LIFTED: a string of digits); 0 when
    absent, malformed or absurdly long."""
    if isinstance(value, str) and len(value) > 18:
        return 0
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


#: Renewals come at least this often, whatever the lease: a short gap after a blip keeps the agent from
#: fencing a cluster that the hub never judged lost.
MAX_RENEW_INTERVAL_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    #: the Lease's leaseDurationSeconds: the agent fences this long after the last renewal it saw. None: the
    #: cluster's loss grace, so the agent fences only when the hub is about to judge the cluster lost and
    #: move its gangs (a blip shorter than the grace then kills nothing either)
    duration_seconds: float | None = None
    #: added to the fence time: the agent's poll interval, its deletes, clock-rate drift (docs/failover.md)
    margin_seconds: float = 5.0
    namespace: str = FENCE_NAMESPACE
    #: renew at all (False: no fencing lease; failover then waits for the grace period only)
    enabled: bool = True



class MemberLease:
    """Renews the hub's Lease in one member (see the module docstring)."""

    def __init__(
        self,
        *,
        client: MemberClient,
        cluster: str,
        identity: str,
        settings: LeaseSettings,
        health: ClusterHealth,
        request_timeout_seconds: float,
        metrics: Metrics | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.identity = identity
        self.settings = settings
        self.health = health
        self.client_timeout = request_timeout_seconds
        self.metrics = metrics or METRICS
        self.wall_clock = wall_clock
        #: the latest wall-clock moment a renewal of this hub (or of a predecessor) may have landed
        self.latest_landing = wall_clock()  # a predecessor's renewal: raised by its timeout below
        #: wall-clock time of the last acknowledged renewal
        self.renewed_at: float | None = None
        #: set after an attempt whose outcome is unknown: no renewal until contact is seen after it
        self.unknown_since: float | None = None
        #: the longest leaseDurationSeconds written by a renewal that may have landed (the agent uses that one)
        self.written_duration = 0
        #: send time (wall clock) of the last acknowledged renewal: the member read the Lease after that
        self.acked_sent_at: float | None = None
        #: the Lease's FENCE_COUNT as the last acknowledged renewal returned it (None before the first)
        self.fence_count: int | None = None
        # A predecessor (a crashed hub, a deposed leader) gave up on a renewal after at most the longest renewal
        # timeout any hub uses (one renewal interval, at most MAX_RENEW_INTERVAL_SECONDS).
        self.latest_landing += MAX_RENEW_INTERVAL_SECONDS
        #: when (wall clock) this hub first learnt that the agent fenced since the renewal before
        self.fence_noticed_at: float | None = None
        #: the Lease's FENCE_SEEN as last returned: the fences some hub already followed up
        self.fence_seen = 0
        #: the Lease's FENCE_LIFTED as last returned: the fences the agent says are over
        self.fence_lifted = 0
        #: when (wall clock) an answer first showed no fence up (FENCE_COUNT <= FENCE_LIFTED) since one was
        self.fence_down_seen_at: float | None = None
        #: acknowledgement time of the first renewal after a lapse (or the first of all): renewals have been
        #: acknowledged without a gap the agent could have expired in since then
        self.in_force_since: float | None = None
        #: an attempt was refused (it did not land): before any is acknowledged, this hub holds no lease there
        self.refused = False
        self.renewals = 0
        self.log = get_logger("clusters.memberlease").bind(cluster=cluster)
        self._failures = RepeatedFailureLog(self.log, "could not renew the hub's fencing lease in the member; "
                                            "retrying while in contact", lease=f"{settings.namespace}/{identity}")

    def duration(self) -> int:
        """leaseDurationSeconds to write: the settings', else the cluster's loss grace (whole seconds)."""
        seconds = self.settings.duration_seconds
        return max(1, math.ceil(self.health.loss_grace_seconds if seconds is None else seconds))

    @property
    def request_timeout(self) -> float:
        """Renewals give up early: the bound on a lost renewal's landing is this long after it was sent."""
        return max(0.2, min(self.client_timeout, self.renew_interval()))

    def renew_interval(self) -> float:
        return max(0.05, min(self.duration() / 3, MAX_RENEW_INTERVAL_SECONDS))

    def fenced_after(self) -> float:
        """Wall-clock time after which the agent has deleted this hub's pods in the member, if the hub has
        been cut off since: the latest possible landing of a renewal + leaseDuration + margin."""
        duration = max(self.written_duration, self.duration())
        return self.latest_landing + duration + self.settings.margin_seconds

    def lapse_seconds(self) -> float:
        """A gap between acknowledged renewals this long may have let the agent expire: its leaseDuration
        less the margin (an agent dates a change up to one of its requests early), at least half of it."""
        duration = self.duration()
        return max(duration - self.settings.margin_seconds, duration / 2)

    def fence_lifted_at(self) -> float | None:
        """When (wall clock) this hub learnt that the member's fence agent is not fencing it: the answer that
        showed no fence up, else, for an agent that never says so, a whole leaseDuration of renewals without
        a lapse (may be in the future). None: not known (yet)."""
        if self.fence_count is None:
            return None
        if self.fence_count <= self.fence_lifted:
            return self.fence_down_seen_at
        if self.in_force_since is not None:
            return self.in_force_since + self.duration()
        return None

    def fence_may_be_up(self, now: float | None = None) -> bool:
        """May the member's fence agent be deleting this hub's objects now (see the module docstring)?
        Dispatch waits while it may: what it created would be killed."""
        if self.acked_sent_at is None:
            return not self.refused
        now = self.wall_clock() if now is None else now
        if now - self.acked_sent_at >= self.lapse_seconds():
            return True
        lifted = self.fence_lifted_at()
        return lifted is None or lifted > now

    def may_send(self) -> bool:
        """In contact, and no attempt of unknown outcome is waiting for contact to be seen again."""
        if self.unknown_since is not None:
            contact = self.health.last_contact
            if contact is None or contact <= self.unknown_since:
                return False
            self.unknown_since = None
        return self.health.first_loss_of_contact is None

    async def run(self) -> None:
        while True:
            if self.may_send():
                await self.renew_once()
                await asyncio.sleep(self.renew_interval())
            else:
                await asyncio.sleep(min(self.renew_interval(), 0.5))

    async def renew_once(self) -> bool:
        """One renewal (create the Lease when missing). True when acknowledged."""
        sent = self.wall_clock()
        duration = self.duration()
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": duration, "renewTime": format_micro_time(sent)}
        try:
            with member_write_reason("fence"):
                answer = await self._write(spec, sent)
        except MemberApiError as e:
            if e.code in _OUTCOME_UNKNOWN_CODES:
                self._unknown(sent, e)
            else:
                # Refused: it did not land (a missing namespace, RBAC, a conflicting create).
                self.refused = True
                self.metrics.member_lease_renewals.labels(cluster=self.cluster, result="failed").inc()
                self._failures.failed(e, now=self.wall_clock(), outcome="refused")
            return False
        except MemberClientError as e:
            self._unknown(sent, e)
            return False
        acknowledged = self.wall_clock()
        if self.acked_sent_at is None or acknowledged - self.acked_sent_at >= self.lapse_seconds():
            self.in_force_since = acknowledged  # the agent may have expired since the last renewal it saw
        self._read_fence(answer, acknowledged=acknowledged)
        self.acked_sent_at = sent
        self.written_duration = max(self.written_duration, duration) if self.unknown_since else duration
        self.latest_landing = max(self.latest_landing, acknowledged)
        self.renewed_at = acknowledged
        self.renewals += 1
        self.metrics.member_lease_renewals.labels(cluster=self.cluster, result="ok").inc()
        self._failures.succeeded("the hub's fencing lease in the member is renewed again")
        return True

    async def _write(self, spec: dict[str, Any], sent: float) -> dict[str, Any]:
        """Patch the Lease; create it when it is missing (404)."""
        try:
            patch: dict[str, Any] = {"spec": spec}
            handled = self._handled_count(sent)
            if handled is not None:
                patch["metadata"] = {"annotations": {FENCE_SEEN: str(handled)}}
            return await self.client.patch(LEASES, namespace=self.settings.namespace, name=self.identity,
                                           patch=patch, timeout_seconds=self.request_timeout)
        except MemberApiError as e:
            if e.code != 404:
                raise
        body: dict[str, Any] = {
            "apiVersion": LEASES.api_version, "kind": LEASES.kind,
            "metadata": {"name": self.identity, "namespace": self.settings.namespace,
                         "labels": {"app.kubernetes.io/managed-by": "federator"}},
            "spec": {**spec, "acquireTime": format_micro_time(sent), "leaseTransitions": 0},
        }
        return await self.client.create(LEASES, body, namespace=self.settings.namespace,
                                        timeout_seconds=self.request_timeout)

    def _handled_count(self, now: float) -> int | None:
        """The FENCE_COUNT to record as handled in this renewal (None: nothing new to record)."""
        if self.fence_count is None or self.fence_count == self.fence_seen:
            return None
        if self.fence_noticed_at is not None and now - self.fence_noticed_at < FENCE_HANDLING_SECONDS:
            return None
        return self.fence_count

    def _read_fence(self, lease: dict[str, Any], *, acknowledged: float) -> None:
        annotations = Body(lease).annotations
        count, seen = annotation_count(annotations.get(FENCE_COUNT)), annotation_count(annotations.get(FENCE_SEEN))
        self.fence_seen = seen
        self.fence_lifted = annotation_count(annotations.get(FENCE_LIFTED))
        if count > self.fence_lifted:
            self.fence_down_seen_at = None
        elif self.fence_down_seen_at is None:
            self.fence_down_seen_at = acknowledged
        # The first answer after this hub started compares with what an earlier hub recorded as handled.
        baseline = self.fence_count if self.fence_count is not None else seen
        if count > baseline:
            self.fence_noticed_at = acknowledged
            self.log.warning("the member's fence agent killed this hub's gangs there while the hub was out of "
                             "contact; they are requeued", fenced_at=str(annotations.get(FENCED_AT) or "")[:64],
                             fence_count=count)
        self.fence_count = count

    def fence_verdict(self, *, placed: float, missing_since: float) -> bool | None:
        """Were a gang's objects, placed at `placed` and seen gone at `missing_since` (wall clock), killed by
        the member's fence agent? None until a renewal sent after `missing_since` has been acknowledged (the
        agent marks the Lease before it deletes anything, so that renewal's answer shows the mark). Yes when
        a fence was noticed after the placement, or one noticed before it was not known to be over when the
        gang was placed (the agent went on deleting what arrived meanwhile)."""
        if self.acked_sent_at is None or self.acked_sent_at < missing_since:
            return None
        if self.fence_noticed_at is None:
            return False
        if self.fence_noticed_at >= placed:
            return True
        lifted = self.fence_lifted_at()
        return lifted is None or lifted > placed

    def _unknown(self, sent: float, error: MemberClientError) -> None:
        self.written_duration = max(self.written_duration, self.duration())
        self.latest_landing = max(self.latest_landing, sent + self.request_timeout)
        self.unknown_since = self.wall_clock()
        self.metrics.member_lease_renewals.labels(cluster=self.cluster, result="unknown").inc()
        self._failures.failed(error, now=self.unknown_since, outcome="unknown")
