"""kube's garbage collector, reduced to what the emulated operators need: background cascading deletion.

When an owner (a Job, JobSet or Kubeflow job the cluster serves) is deleted, every dependent (Pod, Service,
Job) whose metadata.ownerReferences name it by uid is deleted too (a pod gracefully, through the kubelet); a
dependent that still names another owner only loses the reference, as kube's GC does. A dependent that appears
(and every one when the collector starts, or its watch starts again after a 410) naming an owner that is gone
goes too: the owner is looked up by name and uid, so one created since is never mistaken for a gone one.

Differences from kube's GC (no Foreground or Orphan propagation, only the owner kinds the operators serve) are in
docs/simulator-fidelity.md. It never imports the hub.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.apiserver.registry import JSONObject, ResourceType
from federator.apiserver.storage import ObjectStorage
from federator.sim.operators.loop import run_until_stopped, watch_forever


class GarbageCollector:
    def __init__(self, *, storage: ObjectStorage, owners: Sequence[ResourceType], dependents: Sequence[ResourceType],
                 logger: Any) -> None:
        self.storage = storage
        self.owners = {(rt.api_version, rt.kind): rt for rt in owners}
        self.dependents = list(dependents)
        self.log = logger

    def _owner_refs(self, obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        refs = Body(obj).metadata.get("ownerReferences") or ()
        return [r for r in refs if isinstance(r, dict) and (r.get("apiVersion"), r.get("kind")) in self.owners]

    async def owner_gone(self, *, namespace: str, uid: str) -> None:
        """Delete (or release) every dependent in `namespace` that names owner `uid`."""
        for rt in self.dependents:
            for obj in (await self.storage.list(rt, namespace=namespace)).items:
                refs = (obj["metadata"].get("ownerReferences") or ())
                if any(isinstance(r, dict) and r.get("uid") == uid for r in refs):
                    await self._release(rt, obj, {uid})

    async def _release(self, rt: ResourceType, obj: JSONObject, gone: set[str]) -> None:
        meta = obj["metadata"]
        refs = [r for r in meta.get("ownerReferences") or () if isinstance(r, dict)]
        remaining = [r for r in refs if r.get("uid") not in gone]
        try:
            if remaining:
                def mutate(current: JSONObject) -> JSONObject | None:
                    if current["metadata"].get("uid") != meta["uid"]:
                        return None
                    current["metadata"]["ownerReferences"] = [
                        r for r in current["metadata"].get("ownerReferences") or () if r.get("uid") not in gone]
                    return current

                await self.storage.guaranteed_update(rt, namespace=meta.get("namespace"), name=meta["name"],
                                                     mutate=mutate)
            elif not meta.get("deletionTimestamp"):
                await self.storage.delete(rt, namespace=meta.get("namespace"), name=meta["name"],
                                          precondition_uid=meta["uid"])
        except ApiError as e:
            if e.code not in (404, 409):
                raise

    async def check_dependent(self, rt: ResourceType, obj: JSONObject) -> None:
        """Release `obj` from the owners it names that are gone (or were replaced under the same name)."""
        gone: set[str] = set()
        namespace = obj["metadata"].get("namespace")
        for ref in self._owner_refs(obj):
            owner_rt = self.owners[(ref["apiVersion"], ref["kind"])]
            try:
                owner = await self.storage.get(owner_rt, namespace=namespace, name=str(ref.get("name")))
            except ApiError as e:
                if e.code != 404:
                    raise
                gone.add(str(ref.get("uid")))
                continue
            if owner["metadata"].get("uid") != ref.get("uid"):
                gone.add(str(ref.get("uid")))
        if gone:
            await self._release(rt, obj, gone)

    async def sweep(self) -> None:
        """Every dependent whose owner is gone."""
        for rt in self.dependents:
            for obj in (await self.storage.list(rt)).items:
                await self.check_dependent(rt, obj)

    async def run(self, stop: asyncio.Event) -> None:
        """Watch the owners (a DELETED one takes its dependents) and the dependents (a new one, and each at the
        start, whose owner is gone goes), until `stop` is set."""

        async def owner_event(_rt: ResourceType, kind: str, obj: JSONObject) -> None:
            if kind == "DELETED":
                await self.owner_gone(namespace=obj["metadata"].get("namespace", ""), uid=obj["metadata"]["uid"])

        async def dependent_event(rt: ResourceType, kind: str, obj: JSONObject) -> None:
            if kind == "ADDED" and self._owner_refs(obj) and not obj["metadata"].get("deletionTimestamp"):
                await self.check_dependent(rt, obj)

        loops = {f"gc:owners:{rt.plural}": watch_forever(self.storage, rt, stop=stop, logger=self.log,
                                                         handle=owner_event, on_restart=self.sweep)
                 for rt in self.owners.values()}
        loops.update({f"gc:dependents:{rt.plural}": watch_forever(self.storage, rt, stop=stop, logger=self.log,
                                                                  handle=dependent_event)
                      for rt in self.dependents})
        await run_until_stopped(loops, stop=stop, logger=self.log)
