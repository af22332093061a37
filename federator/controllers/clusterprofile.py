"""The cluster-inventory controller: every ClusterProfile (multicluster.x-k8s.io) joins as a MemberCluster.

`cluster_profiles(hub)` is a cleanup_ctx-style factory (hub/app.py lists it). While the hub leads it watches
ClusterProfiles and MemberClusters and keeps, for each profile, one MemberCluster:

- named `<namespace>-<name>` (dots become dashes; a name longer than a DNS label is cut and given a hash of
  the profile's key), annotated `federator.dev/cluster-profile: <namespace>/<name>` (its back-reference and
  the mark that this controller owns it: a cluster-scoped MemberCluster cannot carry an ownerReference to a
  namespaced profile);
- labelled with the profile's labels and its status.properties (a property whose name and value are a valid
  label key and value; properties win on the same key), so clusterSelector and queue tiers select it; the keys
  it brought are kept in the annotation `federator.dev/cluster-profile-labels`, so that a label the profile
  drops is removed and one an admin added stays;
- scheduler, network and location from the labels `federator.dev/scheduler` (default `default`),
  `federator.dev/network` (`ethernet`; `rdma` needs `federator.dev/rdma-kind`), `federator.dev/bandwidth-gbps`
  (10), `federator.dev/location` (`cloud`), `federator.dev/region`, `federator.dev/provider`: the profile says
  what a cluster manager knows, the registration needs the rest;
- connected through (a) the first provider of the hub's access-provider file (`--cluster-profile-providers`)
  that the profile's status.accessProviders (or the deprecated credentialProviders) also lists: the
  MemberCluster gets that entry's server, CA and `accessProvider` (name, and the profile's
  client.authentication.k8s.io/exec extension as its config), and member sync runs the plugin
  (clusters/client.py `ExecCredentials`); or else (b) a kubeconfig Secret mounted on the hub: with
  `--cluster-profile-kubeconfigs DIR`, the file DIR/<namespace>/<name>/Config (KEP-4322's Secret data key
  `Config`) becomes the MemberCluster's kubeconfigPath.

The fields it derives (connection, scheduler, network, location, the profile's labels) follow the profile;
everything else an admin sets on the MemberCluster (cordon, cost, datasets, drains, other labels) stays. A
profile deleted deletes its MemberCluster through the API storage (the same path as `federator cluster remove`). A MemberCluster of that name that this controller did not create
is never taken over or deleted: the profile gets a Warning Event (NameConflict) instead, as it does when no
access provider matches (NoAccess) or its labels say something invalid (InvalidProfile). It never writes a
profile (its status conditions are the cluster manager's) and never logs a credential or a connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from federator.apis import clusterprofile
from federator.apis.common import dns1123_label_errors, label_key_errors, label_value_errors
from federator.apis.membercluster import validate_membercluster
from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.controllers.context import HubContext
from federator.controllers.loops import watch_hub_kind
from federator.obs import get_logger
from federator.runtime.tasks import spawn, stop_tasks
from federator.store.protocol import StoreError

__all__ = ["PROFILE_ANNOTATION", "ClusterProfileController", "cluster_profiles", "member_name"]

#: on each MemberCluster this controller made: "<namespace>/<name>" of its ClusterProfile
PROFILE_ANNOTATION: Final = "federator.dev/cluster-profile"
#: and the label keys the profile brought (a JSON list): a key the profile drops is removed, others stay
LABELS_ANNOTATION: Final = "federator.dev/cluster-profile-labels"
#: the Secret data key of a kubeconfig for a profile (KEP-4322's Secret format)
KUBECONFIG_KEY: Final = "Config"
CONTROLLER: Final = "cluster-profile"
_MAX_LABEL = 63

_log = get_logger("controllers.clusterprofile")


def _keys(labels: Mapping[str, str]) -> str:
    return json.dumps(sorted(labels), separators=(",", ":"))


def _brought(value: object) -> list[str]:
    """The label keys a profile brought last time (the annotation's JSON list; anything else: none)."""
    try:
        keys = json.loads(value) if isinstance(value, str) else []
    except ValueError:
        return []
    return [k for k in keys if isinstance(k, str)] if isinstance(keys, list) else []


def member_name(namespace: str, name: str) -> str:
    """The MemberCluster name of profile `namespace/name`: a DNS-1123 label."""
    base = re.sub(r"[^a-z0-9-]", "-", f"{namespace}-{name}".lower()).strip("-")
    if len(base) <= _MAX_LABEL and base == f"{namespace}-{name}" and not dns1123_label_errors(base):
        return base
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:8]
    return f"{base[:_MAX_LABEL - 9].rstrip('-')}-{digest}"


class ProfileProblem(Exception):
    """Why a profile cannot join now: the reason of its Warning Event and the message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class Desired:
    """What the profile decides of its MemberCluster."""

    labels: dict[str, str]
    spec: dict[str, Any]


def _profile_labels(profile: Mapping[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = {}
    body = Body(profile)
    for key, value in body.labels.items():
        if isinstance(key, str) and isinstance(value, str):
            labels[key] = value
    properties = body.status.get("properties")
    for entry in properties if isinstance(properties, list) else ():
        if not isinstance(entry, Mapping):
            continue
        prop, shown = entry.get("name"), entry.get("value")
        if isinstance(prop, str) and isinstance(shown, str) and not label_key_errors(prop) \
                and not label_value_errors(shown):
            labels[prop] = shown
    return labels


def _registration(labels: Mapping[str, str]) -> dict[str, Any]:
    network: dict[str, Any] = {"type": labels.get("federator.dev/network", "ethernet")}
    bandwidth = labels.get("federator.dev/bandwidth-gbps", "10")
    try:
        network["bandwidthGbps"] = float(bandwidth)
    except ValueError:
        raise ProfileProblem("InvalidProfile", f"federator.dev/bandwidth-gbps {bandwidth[:64]!r} is not a number") \
            from None
    if "federator.dev/rdma-kind" in labels:
        network["rdmaKind"] = labels["federator.dev/rdma-kind"]
    location: dict[str, Any] = {"type": labels.get("federator.dev/location", "cloud")}
    for key in ("region", "provider"):
        if f"federator.dev/{key}" in labels:
            location[key] = labels[f"federator.dev/{key}"]
    return {"scheduler": {"name": labels.get("federator.dev/scheduler", "default")}, "network": network,
            "location": location}


class ClusterProfileController:
    """See the module docstring. Use `cluster_profiles(hub)` to run it."""

    def __init__(self, hub: HubContext) -> None:
        self.hub = hub
        rt = hub.registry.by_kind(clusterprofile.API_VERSION, clusterprofile.KIND)
        if rt is None:
            raise LookupError("hub registry has no ClusterProfile kind")
        self.profiles_rt = rt
        self.members_rt = hub.kind("MemberCluster")
        self.settings = hub.settings.cluster_profiles
        self.validation = hub.settings.validation
        #: profile key -> its latest stored object (None: deleted)
        self.profiles: dict[str, dict[str, Any]] = {}
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        #: profile key -> (reason, message) of the last Warning recorded (recorded again only when it changes)
        self._warned: dict[str, tuple[str, str]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._tasks = [
            spawn(self._watch_profiles(), name="clusterprofile:watch", log=_log,
                  event="cluster profile loop failed", loop="watch"),
            spawn(self._watch_members(), name="clusterprofile:members", log=_log,
                  event="cluster profile loop failed", loop="members"),
            spawn(self._worker(), name="clusterprofile:worker", log=_log,
                  event="cluster profile loop failed", loop="worker"),
        ]

    async def stop(self) -> None:
        await stop_tasks(self._tasks)
        self._tasks.clear()

    def _enqueue(self, key: str) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    # ------------------------------------------------------------ watches

    async def _watch_profiles(self) -> None:
        await watch_hub_kind(self.hub, self.profiles_rt, relist=self._relist_profiles, apply=self._apply_profile,
                             log=_log)

    async def _relist_profiles(self) -> str:
        listing = await self.hub.storage.list(self.profiles_rt)
        seen: dict[str, dict[str, Any]] = {}
        for obj in listing.items:
            body = Body(obj)
            seen[f"{body.namespace}/{body.name}"] = obj
        for key in set(self.profiles) - set(seen):
            self.profiles.pop(key, None)
        self.profiles.update(seen)
        for key in seen:
            self._enqueue(key)
        await self._orphans()
        return listing.resource_version

    def _apply_profile(self, kind: str, obj: dict[str, Any]) -> None:
        body = Body(obj)
        key = f"{body.namespace}/{body.name}"
        if kind == "DELETED":
            self.profiles.pop(key, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.profiles[key] = obj
        else:
            return
        self._enqueue(key)

    async def _watch_members(self) -> None:
        await watch_hub_kind(self.hub, self.members_rt, relist=self._relist_members, apply=self._apply_member,
                             log=_log)

    async def _relist_members(self) -> str:
        listing = await self.hub.storage.list(self.members_rt)
        for key in list(self.profiles):
            self._enqueue(key)
        return listing.resource_version

    def _apply_member(self, kind: str, obj: dict[str, Any]) -> None:
        """A MemberCluster changed: the profile it belongs to (by annotation), or whose name it has, looks again
        (a hand-made one of a profile's name was deleted: the profile joins now; one of ours was deleted or
        edited by hand: it is put back)."""
        body = Body(obj)
        owner = body.annotations.get(PROFILE_ANNOTATION)
        if isinstance(owner, str) and owner in self.profiles:
            self._enqueue(owner)
        if kind == "DELETED":
            for key in self.profiles:
                namespace, _, name = key.partition("/")
                if member_name(namespace, name) == body.name:
                    self._enqueue(key)

    # ------------------------------------------------------------ reconcile

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            try:
                await self._reconcile(key)
            except (ApiError, StoreError) as e:
                _log.warning("could not reconcile a cluster profile; will retry", profile=key, error=str(e))
                await asyncio.sleep(self.hub.settings.watch.backoff_initial_seconds)
                self._enqueue(key)
            except Exception as e:  # noqa: BLE001 - one profile's bug must not stop every other profile joining
                _log.error("reconciling a cluster profile failed; it is looked at again on its next change",
                           profile=key, error=f"{type(e).__name__}: {e}", exc_info=True)

    async def _reconcile(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        target = member_name(namespace, name)
        profile = self.profiles.get(key)
        existing = await self._member(target)
        owner = Body(existing).annotations.get(PROFILE_ANNOTATION) if existing is not None else None
        if profile is None:
            self._warned.pop(key, None)
            if existing is not None and owner == key:
                await self._delete(target, key, Body(existing).uid)
            return
        if existing is not None and owner != key:
            self._warn(profile, "NameConflict", f"MemberCluster {target} exists and was not created from this "
                                                f"profile (it is left alone); rename or delete it to join")
            return
        try:
            desired = self._desired(profile, namespace=namespace, name=name)
        except ProfileProblem as problem:
            self._warn(profile, problem.reason, problem.message)
            return
        if existing is None:
            if not await self._create(profile, target, key, desired):
                return
        else:
            await self._update(target, key, desired)
        self._warned.pop(key, None)

    async def _member(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.hub.storage.get(self.members_rt, namespace=None, name=name)
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    def _connection(self, profile: Mapping[str, Any], *, namespace: str, name: str) -> dict[str, Any]:
        offered = clusterprofile.access_providers_of(profile)
        for provider in self.settings.providers:
            entry = offered.get(provider.name)
            if entry is None:
                continue
            cluster = entry.cluster
            if cluster is None or not cluster.server:
                raise ProfileProblem("NoAccess", f"access provider {provider.name!r} of this profile names no "
                                                 "cluster server")
            connection: dict[str, Any] = {"server": cluster.server, "accessProvider": {"name": provider.name}}
            config = clusterprofile.exec_extension(cluster)
            if config is not None:
                connection["accessProvider"]["config"] = config
            if cluster.certificate_authority_data:
                connection["certificateAuthorityData"] = cluster.certificate_authority_data
            elif cluster.insecure_skip_tls_verify:
                connection["insecureSkipTLSVerify"] = True
            return connection
        directory = self.settings.kubeconfig_dir
        if directory is not None:
            path = Path(directory) / namespace / name / KUBECONFIG_KEY
            if path.is_file():
                return {"kubeconfigPath": str(path.absolute())}
        wanted = ", ".join(p.name for p in self.settings.providers) or "none configured"
        listed = ", ".join(sorted(offered)) or "none"
        where = " or a kubeconfig Secret mounted at DIR/<namespace>/<name>/Config" \
            if directory is not None else ""
        raise ProfileProblem("NoAccess", f"no way to reach the cluster: the profile lists access providers "
                                         f"[{listed}], the hub's --cluster-profile-providers has [{wanted}]{where}")

    def _desired(self, profile: Mapping[str, Any], *, namespace: str, name: str) -> Desired:
        labels = _profile_labels(profile)
        spec = {"connection": self._connection(profile, namespace=namespace, name=name), **_registration(labels)}
        candidate = {"apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster",
                     "metadata": {"name": member_name(namespace, name), "labels": labels}, "spec": spec}
        errors = validate_membercluster(candidate, settings=self.validation)
        if errors:
            where, why = errors[0]
            shown = where.replace("spec.connection", "the profile's access provider") \
                .replace("metadata.labels", "labels").replace("spec.", "")
            raise ProfileProblem("InvalidProfile", f"cannot join as a MemberCluster: {shown}: {why}"[:1024])
        return Desired(labels=labels, spec=spec)

    async def _create(self, profile: Mapping[str, Any], target: str, key: str, desired: Desired) -> bool:
        """Create the profile's MemberCluster; False when it was not (made by hand meanwhile, or refused)."""
        obj = {"apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster",
               "metadata": {"name": target, "labels": desired.labels,
                            "annotations": {PROFILE_ANNOTATION: key, LABELS_ANNOTATION: _keys(desired.labels)}},
               "spec": desired.spec}
        try:
            await self.hub.storage.create(self.members_rt, obj, namespace=None)
        except ApiError as e:
            if e.code == 409:  # made by hand meanwhile: the MemberCluster watch brings it back here
                return False
            if e.code == 422:
                self._warn(profile, "InvalidProfile", f"cannot join as a MemberCluster: {e}"[:1024])
                return False
            raise
        _log.info("cluster profile joined", profile=key, cluster=target)
        self.hub.events.record(profile, controller=CONTROLLER, reason="Joined", action="Join",
                               message=f"joined as MemberCluster {target}")
        return True

    async def _update(self, target: str, key: str, desired: Desired) -> None:
        def mutate(obj: dict[str, Any]) -> dict[str, Any] | None:
            meta = obj.setdefault("metadata", {})
            if (meta.get("annotations") or {}).get(PROFILE_ANNOTATION) != key:
                return None
            spec = obj.setdefault("spec", {})
            annotations = dict(meta.get("annotations") or {})
            labels = dict(meta.get("labels") or {})
            for gone in set(_brought(annotations.get(LABELS_ANNOTATION))) - set(desired.labels):
                labels.pop(gone, None)  # the profile no longer says it
            labels.update(desired.labels)
            annotations[LABELS_ANNOTATION] = _keys(desired.labels)
            changed = labels != (meta.get("labels") or {}) or annotations != (meta.get("annotations") or {})
            meta["annotations"] = annotations
            for field, value in desired.spec.items():
                if spec.get(field) != value:
                    spec[field] = value
                    changed = True
            if not changed:
                return None
            meta["labels"] = labels
            return obj

        try:
            await self.hub.storage.guaranteed_update(self.members_rt, namespace=None, name=target, mutate=mutate)
        except ApiError as e:
            if e.code != 404:
                raise

    async def _delete(self, target: str, key: str, uid: str) -> None:
        try:
            await self.hub.storage.delete(self.members_rt, namespace=None, name=target, precondition_uid=uid or None)
        except ApiError as e:
            if e.code not in (404, 409):
                raise
            return
        _log.info("cluster profile deleted: its MemberCluster is removed", profile=key, cluster=target)

    async def _orphans(self) -> None:
        """MemberClusters this controller made whose profile is gone (deleted while no hub led)."""
        listing = await self.hub.storage.list(self.members_rt)
        for obj in listing.items:
            body = Body(obj)
            owner = body.annotations.get(PROFILE_ANNOTATION)
            if isinstance(owner, str) and owner not in self.profiles:
                namespace, _, name = owner.partition("/")
                if member_name(namespace, name) == body.name:
                    await self._delete(body.name, owner, body.uid)

    def _warn(self, profile: Mapping[str, Any], reason: str, message: str) -> None:
        body = Body(profile)
        key = f"{body.namespace}/{body.name}"
        if self._warned.get(key) == (reason, message):
            return
        self._warned[key] = (reason, message)
        _log.warning("cluster profile cannot join", profile=key, reason=reason, why=message)
        self.hub.events.record(profile, controller=CONTROLLER, reason=reason, action="Join", warning=True,
                               message=message)


async def cluster_profiles(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: joins ClusterProfiles as MemberClusters while the hub leads."""
    controller = ClusterProfileController(hub)
    await controller.start()
    try:
        yield
    finally:
        await controller.stop()
