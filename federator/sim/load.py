"""Background load of a simulated cluster: other tenants' pods.

When a profile has `backgroundLoad`, this loop creates local pods (or gangs:
a PodGroup of the cluster's first gang scheduler plus its pods) at Poisson
arrival times, with shapes drawn from the profile and a lifetime carried by
the kubelet's duration annotation. Finished load pods are deleted, pending
ones that waited longer than the longest lifetime are given up, and
PodGroups left without pods are removed. So capacity comes and goes behind
the hub's back, as in a shared cluster.

Load objects live in their own namespace and carry the label
`sim.federator.dev/background=true`; this module never touches any other
object and never imports anything of the hub.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.apis.timestamps import parse_epoch
from federator.sim.fit import GPU, RDMA_HCA
from federator.sim.kubelet import ANNOTATION_DURATION
from federator.sim.profile import PLAIN_POD_SCHEDULERS
from federator.sim.scheduler import GROUP_KINDS, GroupKind
from federator.runtime.waits import wait_event

if TYPE_CHECKING:
    from federator.apiserver.registry import Registry, ResourceType
    from federator.apiserver.storage import ObjectStorage
    from federator.sim.profile import BackgroundLoad, ClusterProfile, PodShape

JSON = dict[str, Any]

LOAD_LABEL = "sim.federator.dev/background"
#: How often finished pods and abandoned groups are cleaned up.
RECONCILE_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """Pure: what one arrival creates (pods and, for a gang, its PodGroup)."""

    group: JSON | None
    pods: list[JSON]


def _pick_shape(shapes: list[PodShape], rng: random.Random) -> PodShape:
    return rng.choices(shapes, weights=[s.weight for s in shapes], k=1)[0]


def plan_arrival(
    *, cluster: ClusterProfile, load: BackgroundLoad, rng: random.Random, serial: int
) -> LoadPlan:
    """The objects of one arrival: a plain pod, or a gang of `gangSize` pods
    with its PodGroup when the load uses the gang scheduler."""
    shape = _pick_shape(load.shapes, rng)
    lifetime = rng.uniform(load.lifetime_seconds_min, load.lifetime_seconds_max)
    suffix = f"{serial:06d}-{rng.getrandbits(24):06x}"
    gang_kind: GroupKind | None = None
    if load.scheduler == "gang":
        spec = cluster.gang_schedulers[0]
        scheduler_name = spec.name
        gang_kind = GROUP_KINDS[spec.type]
    else:
        scheduler_name = next(s.name for s in cluster.schedulers if s.type in PLAIN_POD_SCHEDULERS)
    size = shape.gang_size if gang_kind is not None else 1
    group_name = f"bg-{suffix}"
    labels = {LOAD_LABEL: "true"}
    requests: JSON = {"cpu": str(shape.cpu), "memory": str(shape.memory)}
    tolerations: list[JSON] = []
    if shape.gpus:
        requests[GPU] = str(shape.gpus)
        # what the ExtendedResourceToleration admission plugin adds
        tolerations.append({"key": GPU, "operator": "Exists", "effect": "NoSchedule"})
    if shape.rdma_hca:
        requests[RDMA_HCA] = str(shape.rdma_hca)
    pods = []
    for i in range(size):
        meta: JSON = {"name": f"{group_name}-{i}" if size > 1 or gang_kind else group_name,
                      "namespace": load.namespace, "labels": dict(labels),
                      "annotations": {ANNOTATION_DURATION: f"{lifetime:.1f}"}}
        spec_: JSON = {
            "schedulerName": scheduler_name, "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "work", "image": "tenant/batch:latest",
                            "resources": {"requests": dict(requests), "limits": dict(requests)}}],
        }
        if tolerations:
            spec_["tolerations"] = [dict(t) for t in tolerations]
        pod: JSON = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec_}
        if gang_kind is not None:
            gang_kind.join(pod, group_name)
        pods.append(pod)
    group = None
    if gang_kind is not None:
        gspec = gang_kind.group_spec(size)
        group = {"apiVersion": f"{gang_kind.group}/{gang_kind.version}", "kind": "PodGroup",
                 "metadata": {"name": group_name, "namespace": load.namespace, "labels": dict(labels)},
                 "spec": gspec}
    return LoadPlan(group=group, pods=pods)


class BackgroundLoadLoop:
    def __init__(self, *, storage: ObjectStorage, registry: Registry, cluster: ClusterProfile, logger: Any,
                 rng: random.Random) -> None:
        if cluster.background_load is None:
            raise ValueError(f"cluster {cluster.name} has no backgroundLoad")
        self.load: BackgroundLoad = cluster.background_load
        self.storage = storage
        self.cluster = cluster
        self.log = logger
        self.rng = rng
        pods = registry.get("", "v1", "pods")
        namespaces = registry.get("", "v1", "namespaces")
        if pods is None or namespaces is None:
            raise RuntimeError("the simulator's registry must serve pods and namespaces")
        self.pods_rt: ResourceType = pods
        self.namespaces_rt: ResourceType = namespaces
        self.group_rt: ResourceType | None = None
        self.gang_kind: GroupKind | None = None
        if self.load.scheduler == "gang":
            kind = self.gang_kind = GROUP_KINDS[cluster.gang_schedulers[0].type]
            self.group_rt = registry.get(kind.group, kind.version, kind.plural)
            if self.group_rt is None:
                raise RuntimeError(f"the registry does not serve {kind.plural}.{kind.group}")
        self.serial = 0
        #: pods of ours that exist, as last seen by a reconcile or created since
        self.live = 0
        self.created = 0

    async def _ensure_namespace(self) -> None:
        ns = {"apiVersion": "v1", "kind": "Namespace",
              "metadata": {"name": self.load.namespace, "labels": {LOAD_LABEL: "true"}}}
        try:
            await self.storage.create(self.namespaces_rt, ns, namespace=None)
        except ApiError as e:
            if e.code != 409:
                raise

    async def arrive(self) -> int:
        """Create one arrival if under the pod cap; returns pods created."""
        plan = plan_arrival(cluster=self.cluster, load=self.load, rng=self.rng, serial=self.serial)
        self.serial += 1
        if self.live + len(plan.pods) > self.load.max_pods:
            return 0
        if plan.group is not None and self.group_rt is not None:
            await self.storage.create(self.group_rt, plan.group, namespace=self.load.namespace)
        for pod in plan.pods:
            await self.storage.create(self.pods_rt, pod, namespace=self.load.namespace)
        self.live += len(plan.pods)
        self.created += len(plan.pods)
        return len(plan.pods)

    async def reconcile(self) -> None:
        """Delete finished pods, give up pods pending too long, delete
        groups without pods; recount live pods."""
        selector = f"{LOAD_LABEL}=true"
        listing = await self.storage.list(self.pods_rt, namespace=self.load.namespace, label_selector=selector)
        now = time.time()
        give_up_after = self.load.lifetime_seconds_max
        live = 0
        groups_in_use: set[str] = set()
        for pod in listing.items:
            meta = Body(pod)
            # arrivals after a restart of a persistent cluster take serials after those it kept
            found = _SERIAL.match(meta.name)
            if found is not None:
                self.serial = max(self.serial, int(found.group(1)) + 1)
            status = pod.get("status") or {}
            phase = status.get("phase") or "Pending"
            created = parse_epoch(meta.creation_timestamp)
            stale = not (pod.get("spec") or {}).get("nodeName") and created is not None and \
                now - created > give_up_after
            if meta.deleting:
                live += 1
                continue
            if phase in ("Succeeded", "Failed") or stale:
                try:
                    await self.storage.delete(self.pods_rt, namespace=self.load.namespace, name=meta.name)
                except ApiError as e:
                    if e.code != 404:
                        raise
                continue
            live += 1
            group = self.gang_kind.group_of(pod) if self.gang_kind is not None else None
            if group:
                groups_in_use.add(group)
        self.live = live
        if self.group_rt is not None:
            groups = await self.storage.list(self.group_rt, namespace=self.load.namespace, label_selector=selector)
            # arrive() creates a group and its pods before this loop runs
            # again, so a group without pods here is finished, not starting
            for g in groups.items:
                name = g["metadata"]["name"]
                if name not in groups_in_use:
                    try:
                        await self.storage.delete(self.group_rt, namespace=self.load.namespace, name=name)
                    except ApiError as e:
                        if e.code != 404:
                            raise

    async def run(self, stop: asyncio.Event) -> None:
        rate = self.load.arrivals_per_minute / 60.0
        attempt = 0
        next_reconcile = time.monotonic() + RECONCILE_SECONDS
        next_arrival = time.monotonic() + self.rng.expovariate(rate)
        ready = False
        while not stop.is_set():
            try:
                if not ready:
                    await self._ensure_namespace()
                    await self.reconcile()
                    ready = True
                now = time.monotonic()
                if now >= next_arrival:
                    await self.arrive()
                    next_arrival = now + self.rng.expovariate(rate)
                if now >= next_reconcile:
                    await self.reconcile()
                    next_reconcile = now + RECONCILE_SECONDS
                attempt = 0
                wait = max(0.0, min(next_arrival, next_reconcile) - time.monotonic())
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - background load must not die; back off
                attempt += 1
                wait = min(30.0, 0.5 * 2 ** min(attempt, 6)) * self.rng.uniform(0.5, 1.0)
                self.log.warning("background load step failed; retrying", error=f"{type(e).__name__}: {e}",
                                 wait_seconds=round(wait, 2), attempt=attempt)
            await wait_event(stop, wait)


_SERIAL = re.compile(r"^bg-(\d{6,})-")


async def run_background_load(
    *,
    storage: ObjectStorage,
    registry: Registry,
    cluster: ClusterProfile,
    stop: asyncio.Event,
    logger: Any,
    rng: random.Random | None = None,
) -> None:
    """Run the profile's background load until `stop` is set; returns at once
    when the profile has none."""
    if cluster.background_load is None:
        return
    loop = BackgroundLoadLoop(storage=storage, registry=registry, cluster=cluster, logger=logger,
                              rng=rng or random.Random())
    await loop.run(stop)
