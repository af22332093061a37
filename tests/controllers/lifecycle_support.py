"""Helpers of the lifecycle tests (status sync, stuck gangs, deletion and GC).

`lifecycle_env(...)` starts real SimClusters (jobtest_support.STANDARD profiles; simulated pods run
for `run_seconds` then succeed), a real hub (sqlite, HTTPS, token auth) running every lifecycle
controller with short timings, registers the clusters through the hub API and waits until they are
Ready. Each cluster's registration carries the label `federator.test/cluster=<name>`, so a job can
be aimed at one cluster with `aimed_job(...)`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from federator.apis.timestamps import require_time
from federator.clusters.client import PODS, MemberClient
from federator.controllers.cleanup import GarbageCollector, member_cleanup
from federator.controllers.context import ControllerFactory
from federator.controllers.dispatch import job_dispatch
from federator.controllers.drain import cluster_drain
from federator.controllers.events import event_recording
from federator.controllers.failover import ClusterFailover, cluster_failover
from federator.controllers.jobkinds import job_kind_twins
from federator.controllers.membercluster import member_sync
from federator.controllers.placement import job_placement
from federator.controllers.jobcache import job_cache
from federator.controllers.jobkinds import job_kind_twins
from federator.controllers.memberobjects import MemberObjects
from federator.controllers.status_sync import status_sync
from federator.controllers.stuck import StuckGangs, stuck_gangs
from federator.hub.kinds import MEMBER_CLEANUP_FINALIZER
from federator.sim.profile import ProcessRuntimeSpec
from federator.sim.rbac import RbacPolicy
from federator.sim.server import SimCluster

from federator.apiserver.audit import AuditLog

from ..hub.hubtest_support import RunningHub, start_hub
from .jobtest_support import API, STANDARD, Federation, HubApi, fast_settings, registration, sim_profile

CLUSTER_LABEL = "federator.test/cluster"

#: The hub's controllers for these tests, in hub_controllers() order.
LIFECYCLE: Sequence[ControllerFactory] = (event_recording, member_sync, job_cache, job_dispatch, job_placement,
                                          status_sync, stuck_gangs, cluster_failover, cluster_drain, member_cleanup)
#: LIFECYCLE with the twin controller of the upstream job kinds (controllers/jobkinds.py), where the hub runs it.
LIFECYCLE_WITH_TWINS: Sequence[ControllerFactory] = (*LIFECYCLE[:3], job_kind_twins, *LIFECYCLE[3:])


class RunningFederation(Federation):
    """jobtest_support's Federation whose simulated pods finish after `run_seconds`; with `rbac`, each
    cluster enforces that RBAC policy (federator/sim/rbac.py), and `hub_kubeconfig` says whom the hub
    is registered as (the admin unless a subclass says otherwise)."""

    def __init__(self, workdir: Path, *, run_seconds: float | None, rbac: RbacPolicy | None = None,
                 process_runtime: ProcessRuntimeSpec | None = None) -> None:
        super().__init__(workdir)
        self.run_seconds = run_seconds
        self.rbac = rbac
        #: the clusters' kubelets run pods as local processes (federator/sim/processes.py)
        self.process_runtime = process_runtime

    async def hub_kubeconfig(self, name: str, sim: SimCluster) -> Path:
        """The kubeconfig the hub's registration of cluster `name` carries."""
        return self.kubeconfigs[name]

    async def start(self, names: list[str] | None = None, **overrides: dict[str, Any]) -> None:
        for name in names or list(STANDARD):
            conf = STANDARD[name]
            prof = sim_profile(name, **{**conf["profile"], **overrides.get(name, {})})
            if self.run_seconds is not None:
                prof = prof.model_copy(update={"kubelet": prof.kubelet.model_copy(
                    update={"default_run_seconds": self.run_seconds})})
            if self.process_runtime is not None:
                prof = prof.model_copy(update={"process_runtime": self.process_runtime})
            sim = SimCluster(prof, bookmark_interval=0.5, rbac=self.rbac)
            await sim.start()
            self.sims[name] = sim
            self.kubeconfigs[name] = sim.write_kubeconfig(self.workdir / f"{name}.kubeconfig")
            body = registration(name, await self.hub_kubeconfig(name, sim), **conf["reg"])  # type: ignore[arg-type]
            body["metadata"]["labels"] = {**body["metadata"]["labels"], CLUSTER_LABEL: name}
            self.registrations[name] = body


@dataclass
class Env:
    hub: RunningHub
    api: HubApi
    fed: RunningFederation

    @property
    def objects(self) -> MemberObjects:
        return self.hub.context.parts.objects

    @property
    def gc(self) -> GarbageCollector:
        found = self.hub.context.parts.running.gc
        assert isinstance(found, GarbageCollector)
        return found

    @property
    def stuck(self) -> StuckGangs:
        found = self.hub.context.parts.running.stuck
        assert isinstance(found, StuckGangs)
        return found

    @property
    def failover(self) -> ClusterFailover:
        found = self.hub.context.parts.running.failover
        assert isinstance(found, ClusterFailover)
        return found

    def hold_dispatches(self, cluster: str, hold: asyncio.Event, monkeypatch: pytest.MonkeyPatch) -> None:
        """Dispatches to `cluster` wait for `hold` before their first member write (at the fence check),
        so a test decides what happens meanwhile, however slow the machine."""
        dispatcher = self.hub.context.parts.dispatcher
        fence = dispatcher.wait_for_fence

        async def held(name: str, *, wait: float) -> None:
            if name == cluster:
                await hold.wait()
            await fence(name, wait=wait)

        monkeypatch.setattr(dispatcher, "wait_for_fence", held)

    async def member(self, name: str) -> MemberClient:
        return await self.fed.client(name)

    async def live_pods(self, cluster: str, uid: str) -> list[dict[str, Any]]:
        _, pods = await self.fed.member_objects(cluster, uid)
        return pods


@contextlib.asynccontextmanager
async def lifecycle_env(tmp_path: Path, names: list[str], *, run_seconds: float | None = 2.0,
                        profile_overrides: dict[str, dict[str, Any]] | None = None,
                        federation: RunningFederation | None = None,
                        controllers: Sequence[ControllerFactory] = LIFECYCLE, source_finalizers: Sequence[str] = (),
                        audit: AuditLog | None = None, **extra: Any) -> AsyncIterator[Env]:
    """`federation` (not started) replaces the default RunningFederation(tmp_path / "members", run_seconds);
    `controllers` the hub's controllers (LIFECYCLE, or LIFECYCLE_WITH_TWINS with `source_finalizers=(SOURCE_FINALIZER,)`
    to serve the upstream job kinds through their twins)."""
    fed = federation or RunningFederation(tmp_path / "members", run_seconds=run_seconds)
    await fed.start(names, **(profile_overrides or {}))
    knobs: dict[str, Any] = {"lifecycle_tick_seconds": 0.1, "member_gc_interval_seconds": 0.5,
                             "stuck_timeout_seconds": 30.0, "cleanup_grace_seconds": 30.0}
    knobs.update(extra)
    try:
        async with start_hub(tmp_path / "hub", controllers=controllers, job_finalizers=(MEMBER_CLEANUP_FINALIZER,),
                             source_finalizers=source_finalizers, settings=fast_settings(tmp_path / "hub" / "state", **knobs),
                             audit=audit) as hub:
            api = await HubApi.connect(hub.kubeconfigs["admin"])
            try:
                for body in fed.registrations.values():
                    await api.register(body)
                for name in fed.registrations:
                    await api.wait_cluster_ready(name)
                yield Env(hub, api, fed)
            finally:
                await api.close()
    finally:
        await fed.stop()


def aimed_job(name: str, cluster: str, *, namespace: str = "team-a", workers: int = 2, gpus: int = 4,
              ps: int = 1) -> dict[str, Any]:
    """A small PS + worker gang that only `cluster` may take."""
    roles: list[dict[str, Any]] = []
    if ps:
        roles.append({"name": "ps", "replicas": ps,
                      "template": {"image": "trainer:1.4", "resources": {"cpu": "2", "memory": "8Gi"}}})
    roles.append({"name": "worker", "replicas": workers,
                  "template": {"image": "trainer:1.4",
                               "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": gpus}}})
    return {
        "apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name, "namespace": namespace},
        "spec": {"roles": roles, "placement": {"clusterSelector": {"matchLabels": {CLUSTER_LABEL: cluster}}}},
    }


def events(job: dict[str, Any]) -> list[str]:
    return [h["event"] for h in (job.get("status") or {}).get("history") or ()]


def final_epoch_events(job: dict[str, Any]) -> list[str]:
    """The history events of the job's current epoch. A loaded machine may time out a member write of the
    first dispatch: it is undone and the gang requeued ("dispatch to X failed (attempt N): ...") and placed
    again at epoch + 1, so every earlier epoch must have ended that way (anything else fails here)."""
    entries = (job.get("status") or {}).get("history") or ()
    epoch = ((job.get("status") or {}).get("placement") or {}).get("epoch")
    for earlier in {h.get("epoch") for h in entries} - {epoch, None}:
        assert any(h["event"] == "Requeued" and " failed (attempt " in str(h.get("message"))
                   for h in entries if h.get("epoch") == earlier), entries
    return [h["event"] for h in entries if h.get("epoch") == epoch]


def history(job: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [h for h in (job.get("status") or {}).get("history") or () if h["event"] == event]


def seconds(stamp: str) -> float:
    return require_time(stamp).timestamp()


async def list_pods(client: MemberClient, selector: str) -> list[dict[str, Any]]:
    return (await client.list_all(PODS, label_selector=selector)).items


def local_pod(node: str, index: int) -> dict[str, Any]:
    """Another tenant's pod, bound straight to `node` (by its own scheduler), taking every GPU there."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"local-{index}", "namespace": "default", "labels": {"tenant": "local"}},
            "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [{
                "name": "c", "image": "local:1", "resources": {"requests": {"nvidia.com/gpu": "8"},
                                                               "limits": {"nvidia.com/gpu": "8"}}}]}}
