"""The pipeline's shared parts built without a running hub (controllers/pipeline.py, hub/app.py build_pipeline):
the member object index following member sync's watch (MemberClusters -> MemberObjects), and the epoch fence
dispatch waits for. Member syncs are stand-ins with the attributes the index reads (a real ClusterSync needs a
member to talk to; the integration tests run real ones)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from federator.apiserver.storage import ObjectStorage
from federator.clusters.client import NODES, PODS, podgroup_resource
from federator.controllers.context import HubContext, HubSettings
from federator.controllers.pipeline import EpochFence
from federator.delegation.adapter import LABEL_EPOCH, LABEL_HUB, LABEL_JOB_UID
from federator.hub.app import build_pipeline
from federator.hub.kinds import hub_registry
from federator.obs import Metrics
from federator.store.memory import MemoryStore

GROUPS = podgroup_resource("volcano")
assert GROUPS is not None


@dataclass
class Health:
    ready: bool = True


@dataclass
class StandInSync:
    name: str
    resumed: bool = False
    resources: tuple[Any, ...] = (NODES, PODS, GROUPS)
    health: Health = field(default_factory=Health)
    watches_lost: dict[str, str] = field(default_factory=dict)
    client: Any = None


def _hub(tmp_path: Path) -> HubContext:
    store = MemoryStore()
    registry = hub_registry()
    hub = HubContext(store=store, storage=ObjectStorage(store, registry), registry=registry,
                     settings=HubSettings(state_dir=tmp_path), metrics=Metrics())
    build_pipeline(hub)
    return hub


def _pod(name: str, *, hub: str = "federator") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1",
                         "labels": {LABEL_HUB: hub, LABEL_JOB_UID: "job-1", LABEL_EPOCH: "1"}},
            "status": {"phase": "Running"}}


def _start(hub: HubContext, sync: StandInSync) -> None:
    members = hub.parts.members
    members.syncs[sync.name] = sync  # type: ignore[assignment]
    members.started(sync)  # type: ignore[arg-type]


def test_the_index_takes_in_member_syncs_batches_from_the_first_one(tmp_path: Path) -> None:
    hub = _hub(tmp_path)
    parts = hub.parts
    touched: list[set[str]] = []
    parts.objects.subscribe(lambda _cluster, uids: touched.append(uids))
    sync = StandInSync("c1")
    _start(hub, sync)
    members = parts.members
    members.applied("c1", NODES.key, [("ADDED", {"metadata": {"name": "n1"}})], 0.0)  # not the index's kind
    members.applied("c1", PODS.key, [("ADDED", _pod("p0")), ("ADDED", _pod("web", hub="other"))], 0.0)
    index = parts.objects.get("c1")
    assert index is not None and not index.ready  # PodGroups not listed yet
    members.applied("c1", GROUPS.key, [], 0.0)
    assert index.ready and [o.name for o in index.objects_of()] == ["p0"] and touched == [{"job-1"}]
    assert parts.objects.reachable("c1")
    sync.watches_lost[PODS.key] = "connection refused"  # a lost watch that feeds the index counts at once
    assert not parts.objects.reachable("c1")
    sync.watches_lost.clear()
    # a restarted sync gets a fresh index (its jobs hear of it); a stopped one takes its index away
    _start(hub, StandInSync("c1"))
    fresh = parts.objects.get("c1")
    assert fresh is not None and fresh is not index and not fresh.ready and touched[-1] == {"job-1"}
    members.stopped("c1")
    assert parts.objects.get("c1") is None and not parts.objects.reachable("c1")


def test_a_resumed_syncs_index_waits_for_its_seeding_list(tmp_path: Path) -> None:
    hub = _hub(tmp_path)
    parts = hub.parts
    _start(hub, StandInSync("c1", resumed=True))
    parts.members.applied("c1", PODS.key, [("MODIFIED", _pod("p0"))], 0.0)
    parts.members.applied("c1", GROUPS.key, [], 0.0)
    index = parts.objects.get("c1")
    assert index is not None and not index.ready and index.awaiting_seed == {PODS.key, GROUPS.key}
    index.seeded(PODS.key, [_pod("p1")])
    index.seeded(GROUPS.key, [])
    assert index.ready and sorted(o.name for o in index.objects_of()) == ["p0", "p1"]


def test_the_epoch_fence_holds_without_a_gc_and_is_pending_only_for_a_cluster_in_contact(tmp_path: Path) -> None:
    hub = _hub(tmp_path)
    parts = hub.parts
    fence: EpochFence = parts.fence
    assert fence.holds("c1") and not fence.pending("c1")  # no GC running: nothing to wait for
    fence.held = {}
    assert not fence.holds("c1") and not fence.pending("c1")  # not in contact: nothing to wait for
    sync = StandInSync("c1", health=Health(ready=False))
    _start(hub, sync)
    assert not fence.pending("c1")  # member sync does not say Ready: not in contact
    sync.health.ready = True
    assert fence.pending("c1")
    fence.unreadable.add("c1")  # the GC could not list it: no dispatch waits for a pass that cannot complete
    assert not fence.pending("c1")
    fence.unreadable.clear()
    fence.held["c1"] = True
    assert fence.holds("c1") and not fence.pending("c1")
