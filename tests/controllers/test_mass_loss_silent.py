"""The mass-loss judgement counts a cluster whose probe still hangs (silent since its last contact, no
failed contact on record yet) as out of contact: a partition of every cluster is one event even when one
cluster's probe fails later than another's (seen on a loaded machine: the first cluster's gangs moved into
the second, itself cut off)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from federator.apiserver.storage import ObjectStorage
from federator.clusters.client import MemberUnreachable
from federator.clusters.health import ClusterHealth, HealthSettings
from federator.controllers.context import HubContext
from federator.controllers.settings import HubSettings, MemberSyncSettings
from federator.controllers.failover import ClusterFailover
from federator.controllers.jobs import InFlight
from federator.controllers.membercluster import MemberClusters
from federator.hub.kinds import hub_registry
from federator.obs import Metrics
from federator.store.memory import MemoryStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeSync:
    health: ClusterHealth
    lease: Any = None


def _failover(tmp_path: Path, clock: Clock) -> tuple[ClusterFailover, dict[str, FakeSync]]:
    store = MemoryStore()
    registry = hub_registry()
    hub = HubContext(store=store, storage=ObjectStorage(store, registry), registry=registry,
                     settings=HubSettings(state_dir=tmp_path, member_sync=MemberSyncSettings(probe_interval_seconds=1.0)), metrics=Metrics())
    syncs = {name: FakeSync(ClusterHealth(cluster=name, resources=("nodes",), wall_clock=clock,
                                          settings=HealthSettings(loss_grace_seconds=10.0)))
             for name in ("home", "fallback")}
    members = MemberClusters()
    members.syncs.update(syncs)  # type: ignore[arg-type]  # losses() reads only each sync's health
    return ClusterFailover(hub, jobs=None, members=members, in_flight=InFlight()), syncs  # type: ignore[arg-type]


def test_a_cluster_whose_probe_hangs_counts_in_the_mass_loss(tmp_path: Path) -> None:
    clock = Clock()
    failover, syncs = _failover(tmp_path, clock)
    for sync in syncs.values():
        sync.health.probe_succeeded()
    # both are cut off now; home's probe fails at once, fallback's hangs (no failure on record)
    clock.now += 0.5
    syncs["home"].health.probe_failed(MemberUnreachable("home: no answer"), now_wall=clock.now)
    clock.now += 10.5  # home is past its grace: Lost
    syncs["home"].health.evaluate(now=clock.now)
    lost, held = failover.losses(now=clock.now)
    assert syncs["home"].health.lost
    assert syncs["fallback"].health.first_loss_of_contact is None
    assert lost == {} and held == {"home"}, "home's gangs must not move into a cluster that is silent too"
    assert failover.partitioned


def test_a_lone_loss_still_moves_when_the_other_cluster_answers(tmp_path: Path) -> None:
    clock = Clock()
    failover, syncs = _failover(tmp_path, clock)
    syncs["home"].health.probe_succeeded()
    clock.now += 0.5
    syncs["home"].health.probe_failed(MemberUnreachable("home: no answer"), now_wall=clock.now)
    for _ in range(11):
        clock.now += 1.0
        syncs["fallback"].health.probe_succeeded()  # fallback answers every probe
    syncs["home"].health.evaluate(now=clock.now)
    lost, held = failover.losses(now=clock.now)
    assert set(lost) == {"home"} and held == set() and not failover.partitioned


def _evaluate(syncs: dict[str, FakeSync], clock: Clock) -> None:
    for sync in syncs.values():
        sync.health.evaluate(now=clock.now)


def _both_cut_off_past_the_grace(failover: ClusterFailover, syncs: dict[str, FakeSync],
                                 clock: Clock) -> tuple[dict[str, Any], set[str]]:
    """Both clusters answer, then both fail at once and stay silent past their grace: (lost, held)."""
    for sync in syncs.values():
        sync.health.probe_succeeded()
    clock.now += 0.5
    for sync in syncs.values():
        sync.health.probe_failed(MemberUnreachable(f"{sync.health.cluster}: no answer"), now_wall=clock.now)
    clock.now += 10.5
    _evaluate(syncs, clock)
    return failover.losses(now=clock.now)


def test_the_last_cluster_back_from_a_mass_loss_gets_a_fresh_grace(tmp_path: Path) -> None:
    """The end of a partition of every cluster reaches the clusters one by one (seen in CI: the hub saw the
    second cluster answer first and moved the first cluster's gangs at once, a moment before it answered too)."""
    clock = Clock()
    failover, syncs = _failover(tmp_path, clock)
    lost, held = _both_cut_off_past_the_grace(failover, syncs, clock)
    assert lost == {} and held == {"home", "fallback"} and failover.partitioned
    # fallback answers again; home has not yet (its probe is due in a moment)
    clock.now += 1.0
    syncs["fallback"].health.probe_succeeded()
    _evaluate(syncs, clock)
    lost, held = failover.losses(now=clock.now)
    assert not failover.partitioned
    assert lost == {} and held == set(), "home lost its grace to the mass loss: it gets a fresh one"
    # home stays out of contact for a whole fresh grace: now it is lost on its own
    clock.now += 10.5
    syncs["fallback"].health.probe_succeeded()
    _evaluate(syncs, clock)
    lost, held = failover.losses(now=clock.now)
    assert set(lost) == {"home"} and held == set()
    assert lost["home"].lost_at > lost["home"].first_loss + 10.0


def test_a_fresh_grace_ends_when_the_cluster_answers(tmp_path: Path) -> None:
    clock = Clock()
    failover, syncs = _failover(tmp_path, clock)
    _both_cut_off_past_the_grace(failover, syncs, clock)
    clock.now += 1.0
    syncs["fallback"].health.probe_succeeded()
    _evaluate(syncs, clock)
    failover.losses(now=clock.now)
    clock.now += 1.0
    syncs["home"].health.probe_succeeded()
    _evaluate(syncs, clock)
    failover.losses(now=clock.now)
    # a later loss of home alone is judged from its own first failure, with the normal grace
    clock.now += 100.0
    syncs["fallback"].health.probe_succeeded()
    syncs["home"].health.probe_failed(MemberUnreachable("home: no answer"), now_wall=clock.now)
    clock.now += 10.5
    syncs["fallback"].health.probe_succeeded()
    _evaluate(syncs, clock)
    lost, _ = failover.losses(now=clock.now)
    assert set(lost) == {"home"}
