"""ClusterHealth: Reachable after N failed probes or an unrecovered watch loss, the first loss kept
until contact is back, Synced and Ready, transitions counted. Clocks are passed in (no sleeping)."""

from __future__ import annotations

from federator.clusters.client import MemberApiError, MemberUnreachable
from federator.clusters.health import ClusterHealth, HealthSettings
from federator.obs import Metrics

RES = ("nodes", "pods")


class Wall:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def make(**kw: object) -> tuple[ClusterHealth, Wall, Metrics]:
    wall, metrics = Wall(), Metrics()
    settings = HealthSettings(unreachable_after_failures=3, watch_loss_grace_seconds=10.0)
    return ClusterHealth(cluster="c", resources=RES, settings=settings, metrics=metrics, wall_clock=wall,
                         **kw), wall, metrics  # type: ignore[arg-type]


def statuses(h: ClusterHealth) -> dict[str, str]:
    return {c["type"]: c["status"] for c in h.status_conditions()}


def synced(h: ClusterHealth, now: float) -> None:
    for r in RES:
        h.watch_established(r, now=now)
    h.probe_succeeded()
    h.evaluate(now=now)


def test_unknown_then_ready() -> None:
    h, _, metrics = make()
    assert statuses(h) == {"Reachable": "Unknown", "Synced": "Unknown", "Ready": "Unknown", "Lost": "Unknown"}
    h.evaluate(now=0)
    assert statuses(h)["Synced"] == "False"
    synced(h, 1)
    assert statuses(h) == {"Reachable": "True", "Synced": "True", "Ready": "True", "Lost": "False"}
    assert h.ready and h.first_loss_of_contact is None
    value = metrics.member_condition_transitions.labels(cluster="c", condition="Ready", status="True")._value.get()
    assert value == 1


def test_unreachable_after_n_failed_probes_and_first_loss_is_kept() -> None:
    h, wall, metrics = make()
    synced(h, 0)
    err = MemberUnreachable("cluster c: probe /readyz at https://x: timed out")
    first = wall.now
    h.probe_failed(err, now_wall=wall.now)
    h.evaluate(now=1)
    assert h.reachable and h.first_loss_of_contact == first  # one failure: still reachable, loss noted
    for i in range(2):
        wall.now += 5
        h.probe_failed(err, now_wall=wall.now)
        h.evaluate(now=2 + i)
    assert not h.reachable and not h.ready
    assert h.conditions["Reachable"].reason == "ProbeFailed"
    # further failures do not move the first loss
    wall.now += 60
    h.probe_failed(err, now_wall=wall.now)
    h.evaluate(now=70)
    assert h.first_loss_of_contact == first
    # contact back: reachable, loss cleared
    h.probe_succeeded()
    h.evaluate(now=80)
    assert h.reachable and h.ready and h.first_loss_of_contact is None
    lost = metrics.member_condition_transitions.labels(cluster="c", condition="Reachable", status="False")
    assert lost._value.get() == 1


def test_single_probe_blip_clears_the_loss() -> None:
    h, wall, _ = make()
    synced(h, 0)
    h.probe_failed(MemberUnreachable("x"), now_wall=wall.now)
    h.evaluate(now=1)
    h.probe_succeeded()
    h.evaluate(now=2)
    assert h.reachable and h.first_loss_of_contact is None


def test_watch_loss_within_grace_keeps_ready_then_turns_unreachable() -> None:
    h, wall, _ = make()
    synced(h, 0)
    h.watch_lost("pods", MemberUnreachable("cluster c: watch pods interrupted: reset"), now=100, now_wall=wall.now)
    h.evaluate(now=101)
    assert h.ready  # a blip inside the grace period
    assert h.first_loss_of_contact == wall.now
    assert h.next_deadline(101) == 110
    h.evaluate(now=110)
    assert not h.reachable and h.conditions["Reachable"].reason == "WatchLost"
    assert not h.synced and h.conditions["Synced"].reason == "WatchLost"
    h.watch_established("pods", now=111)
    h.evaluate(now=111)
    assert h.ready and h.first_loss_of_contact is None


def test_api_errors_make_it_unsynced_but_not_unreachable() -> None:
    h, wall, _ = make()
    synced(h, 0)
    h.watch_lost("nodes", MemberApiError(401, "Unauthorized", "Unauthorized", cluster="c"), now=5, now_wall=wall.now)
    h.evaluate(now=20)
    assert h.reachable and not h.synced and not h.ready
    assert h.conditions["Synced"].reason == "WatchFailing" and "401" in h.conditions["Synced"].message
    assert h.conditions["Ready"].reason == "NotSynced"
    assert h.first_loss_of_contact is None


def test_relisting_is_not_synced_and_resuming_is_named() -> None:
    h, _, _ = make(resuming=True)
    h.probe_succeeded()
    h.evaluate(now=0)
    assert h.conditions["Synced"].reason == "Resuming"
    synced(h, 1)
    assert h.ready and not h.resuming
    h.relisting("nodes", now=2)
    h.evaluate(now=2)
    assert h.conditions["Synced"].reason == "Relisting" and not h.ready


def test_evaluate_reports_changes_only_once() -> None:
    h, wall, _ = make()
    synced(h, 0)
    assert not h.evaluate(now=1)
    h.probe_failed(MemberUnreachable("x"), now_wall=wall.now)
    assert not h.evaluate(now=2)  # nothing visible changed yet


def _unreachable(h: ClusterHealth, wall: Wall, now: float) -> None:
    for _ in range(3):
        h.probe_failed(MemberUnreachable("cluster c: probe timed out"), now_wall=wall.now)
    h.evaluate(now=now)


def test_lost_only_after_the_grace_counted_from_the_first_loss_of_contact() -> None:
    h, wall, metrics = make()
    h.loss_grace_seconds = 30.0
    synced(h, 0)
    assert statuses(h)["Lost"] == "False" and h.conditions["Lost"].reason == "Contact"
    first = wall.now
    _unreachable(h, wall, 1)
    assert not h.lost and h.conditions["Lost"].reason == "WithinGrace"
    assert h.lost_at() == first + 30.0
    # The health loop is woken when the grace runs out (monotonic deadline), not only at its next probe.
    deadline = h.next_deadline(1)
    assert deadline is not None and abs(deadline - 31) < 1e-6
    wall.now += 20  # later failures do not move the first loss
    _unreachable(h, wall, 21)
    assert not h.lost and h.lost_at() == first + 30.0
    wall.now += 10
    assert h.evaluate(now=31)
    assert h.lost and h.conditions["Lost"].reason == "NoContact" and "grace 30s" in h.conditions["Lost"].message
    assert metrics.member_condition.labels(cluster="c", condition="Lost")._value.get() == 1
    h.hub_partitioned = True
    assert h.evaluate(now=32)
    assert h.lost and h.conditions["Lost"].reason == "HubPartitioned"
    h.hub_partitioned = False
    # Contact again: Lost clears, the first loss is forgotten.
    synced(h, 33)
    assert not h.lost and h.first_loss_of_contact is None and h.lost_at() is None
    assert h.last_contact == wall.now


def test_a_blip_shorter_than_the_grace_never_makes_a_cluster_lost() -> None:
    h, wall, _ = make()
    h.loss_grace_seconds = 30.0
    synced(h, 0)
    _unreachable(h, wall, 1)
    wall.now += 29
    h.evaluate(now=29)
    assert not h.lost
    synced(h, 29.5)
    wall.now += 5
    h.evaluate(now=35)
    assert not h.lost and statuses(h)["Lost"] == "False"


def test_a_lost_cluster_is_never_reachable_or_ready_even_before_enough_probes_failed() -> None:
    # A short grace and slow probes: the grace runs out after one failed probe. Lost must still mean
    # not Ready, or placement would send the failed-over gangs straight back.
    h, wall, _ = make()
    h.loss_grace_seconds = 5.0
    synced(h, 0)
    h.probe_failed(MemberUnreachable("cluster c: probe timed out"), now_wall=wall.now)
    h.evaluate(now=1)
    assert h.reachable and h.ready and not h.lost  # one failure of three: still reachable
    wall.now += 5
    h.evaluate(now=6)
    assert h.lost and not h.reachable and not h.ready
    assert h.conditions["Reachable"].reason == "Lost"
    synced(h, 7)  # contact back
    assert not h.lost and h.ready and h.first_loss_of_contact is None
