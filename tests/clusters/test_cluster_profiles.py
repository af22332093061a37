"""The cluster-inventory controller (controllers/clusterprofile.py) with member sync, against real
SimClusters and a real exec plugin: a ClusterProfile joins as a MemberCluster (labels and properties copied,
the annotation pointing back), reached through the access provider's plugin or a mounted kubeconfig Secret;
a changed profile changes it, a deleted one removes it; a hand-made MemberCluster of the same name is never
taken over (NameConflict Event) and the profile joins once it is gone; a broken plugin or no way in is a
clear condition or Event, and the hub goes on."""

from __future__ import annotations

import base64
import contextlib
import copy
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from clustertest_support import Hub, Sims, profile, registration, wait_until
from exec_plugin_support import provider_file, runs, write_plugin

from federator.apis.clusterprofile import API_VERSION, EXEC_EXTENSION, parse_provider_config
from federator.apiserver.errors import ApiError
from federator.controllers.clusterprofile import PROFILE_ANNOTATION, cluster_profiles, member_name
from federator.controllers.events import event_recording
from federator.sim.server import SimCluster


def cluster_profile(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ClusterProfile",
            "metadata": {"name": name, "namespace": "fleet", "labels": labels or {}},
            "spec": {"displayName": name, "clusterManager": {"name": "test-manager"}}}


def access_status(sim: SimCluster, provider: str = "token-provider") -> dict[str, Any]:
    return {"accessProviders": [{"name": provider, "cluster": {
        "server": sim.url, "certificate-authority-data": base64.b64encode(sim.ca_pem).decode(),
        "extensions": [{"name": EXEC_EXTENSION, "extension": {"audience": "fleet"}}]}}],
        "properties": [{"name": "location", "value": "eu-west"}, {"name": "not a label key", "value": "x"}],
        "version": {"kubernetes": "1.34.0"}}


class Inventory:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        rt = hub.registry.by_kind(API_VERSION, "ClusterProfile")
        events = hub.registry.by_kind("v1", "Event")
        assert rt is not None and events is not None
        self.rt, self.events_rt = rt, events

    async def apply(self, obj: dict[str, Any], status: dict[str, Any] | None = None) -> None:
        meta = obj["metadata"]
        try:
            await self.hub.storage.create(self.rt, copy.deepcopy(obj), namespace=meta["namespace"])
        except ApiError as e:
            assert e.code == 409

            def replace(stored: dict[str, Any]) -> dict[str, Any]:
                stored["metadata"]["labels"] = meta.get("labels") or {}
                stored["spec"] = obj["spec"]
                return stored

            await self.hub.storage.guaranteed_update(self.rt, namespace=meta["namespace"], name=meta["name"],
                                                     mutate=replace)
        if status is not None:
            def write(stored: dict[str, Any]) -> dict[str, Any]:
                stored["status"] = status
                return stored

            await self.hub.storage.guaranteed_update(self.rt, namespace=meta["namespace"], name=meta["name"],
                                                     mutate=write, subresource="status")

    async def delete(self, name: str) -> None:
        await self.hub.storage.delete(self.rt, namespace="fleet", name=name)

    async def member(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.hub.get(member_name("fleet", name))
        except ApiError as e:
            assert e.code == 404
            return None

    async def wait_member(self, name: str, check: Any = lambda mc: True, what: str = "") -> dict[str, Any]:
        async def found() -> dict[str, Any] | None:
            mc = await self.member(name)
            return mc if mc is not None and check(mc) else None

        return await wait_until(found, what=what or f"the MemberCluster of profile {name}")  # type: ignore[no-any-return]

    async def wait_event(self, name: str, reason: str) -> dict[str, Any]:
        async def found() -> dict[str, Any] | None:
            listing = await self.hub.storage.list(self.events_rt, namespace="fleet")
            for event in listing.items:
                involved = event.get("involvedObject") or event.get("regarding") or {}
                if involved.get("name") == name and event.get("reason") == reason:
                    return event
            return None

        return await wait_until(found, what=f"a {reason} Event on profile {name}")  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def running(tmp_path: Path, **settings: Any) -> AsyncIterator[Inventory]:
    hub = await Hub.open(f"sqlite://{tmp_path / 'hub.db'}", **settings)
    recording = contextlib.asynccontextmanager(event_recording)(hub.ctx)
    joining = contextlib.asynccontextmanager(cluster_profiles)(hub.ctx)
    await recording.__aenter__()
    try:
        await hub.start_sync()
        await joining.__aenter__()
        try:
            yield Inventory(hub)
        finally:
            await joining.__aexit__(None, None, None)
    finally:
        await hub.stop_sync()
        await recording.__aexit__(None, None, None)
        await hub.close()


def ready(mc: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (mc.get("status") or {}).get("conditions") or [])


def test_member_names_are_dns_labels_and_distinct() -> None:
    assert member_name("fleet", "member-1") == "fleet-member-1"
    long = member_name("a" * 60, "b.c")
    assert len(long) <= 63 and long != member_name("a" * 60, "b-c")
    assert member_name("ns", "a.b") != member_name("ns-a", "b")


async def test_a_profile_joins_through_its_access_provider_follows_changes_and_leaves(sims: Sims,
                                                                                       tmp_path: Path) -> None:
    sim = await sims.start(profile("m1", gpu_nodes=2, cpu_nodes=0))
    plugin = tmp_path / "plugin"
    write_plugin(plugin, f"token {sim.token} 3600")
    providers = parse_provider_config(provider_file(plugin))
    with structlog.testing.capture_logs() as logs:
        await _join_follow_and_leave(tmp_path, sim, plugin, providers)
    assert logs and sim.token not in str(logs), "the plugin's token reached a log line"


async def _join_follow_and_leave(tmp_path: Path, sim: SimCluster, plugin: Path, providers: Any) -> None:
    async with running(tmp_path, cluster_profile_providers=providers) as inv:
        await inv.apply(cluster_profile("member-1", labels={"tier": "research", "federator.dev/scheduler": "volcano"}),
                        access_status(sim))
        mc = await inv.wait_member("member-1", ready, "member-1 Ready through the plugin's token")
        assert mc["metadata"]["annotations"][PROFILE_ANNOTATION] == "fleet/member-1"
        labels = mc["metadata"]["labels"]
        assert labels["tier"] == "research" and labels["location"] == "eu-west"
        assert "not a label key" not in labels
        connection = mc["spec"]["connection"]
        assert connection["server"] == sim.url and "credentials" not in connection
        assert connection["accessProvider"] == {"name": "token-provider", "config": {"audience": "fleet"}}
        assert mc["spec"]["scheduler"] == {"name": "volcano"}
        assert runs(plugin) >= 1
        await inv.wait_event("member-1", "Joined")
        # an admin's cordon stays; the profile's labels follow it
        await inv.hub.storage.guaranteed_update(inv.hub.rt, namespace=None, name="fleet-member-1",
                                                mutate=lambda o: {**o, "spec": {**o["spec"], "cordoned": True}})
        await inv.hub.storage.guaranteed_update(
            inv.hub.rt, namespace=None, name="fleet-member-1",
            mutate=lambda o: {**o, "metadata": {**o["metadata"], "labels": {**o["metadata"]["labels"], "team": "a"}}})
        await inv.apply(cluster_profile("member-1", labels={"tier": "batch", "federator.dev/scheduler": "volcano",
                                                            "new": "yes"}),
                        {**access_status(sim), "properties": []})
        mc = await inv.wait_member("member-1", lambda m: m["metadata"]["labels"].get("tier") == "batch"
                                   and "location" not in m["metadata"]["labels"])
        assert mc["spec"]["cordoned"] is True
        assert mc["metadata"]["labels"]["team"] == "a" and mc["metadata"]["labels"]["new"] == "yes"
        await inv.delete("member-1")
        await wait_until(lambda: _gone(inv, "member-1"),
                         what="the MemberCluster removed with its profile")
        await wait_until(lambda: "fleet-member-1" not in inv.hub.ctx.parts.members.syncs or None,
                         what="member sync stopped for the removed cluster")


async def _gone(inv: Inventory, name: str) -> bool | None:
    return True if await inv.member(name) is None else None


async def test_a_mounted_kubeconfig_secret_joins_a_profile_no_provider_matches(sims: Sims, tmp_path: Path) -> None:
    sim = await sims.start(profile("m2", gpu_nodes=1, cpu_nodes=0))
    secrets = tmp_path / "secrets"
    (secrets / "fleet" / "member-2").mkdir(parents=True)
    shutil.copy(sims.kubeconfigs["m2"], secrets / "fleet" / "member-2" / "Config")
    async with running(tmp_path, cluster_profile_kubeconfig_dir=secrets) as inv:
        await inv.apply(cluster_profile("member-2"), access_status(sim, provider="someone-elses-provider"))
        mc = await inv.wait_member("member-2", ready, "member-2 Ready through the mounted kubeconfig")
        assert mc["spec"]["connection"] == {"kubeconfigPath": str(secrets / "fleet" / "member-2" / "Config")}
        # no Secret and no provider: a Warning naming both ways, nothing created
        await inv.apply(cluster_profile("member-3"), access_status(sim, provider="someone-elses-provider"))
        event = await inv.wait_event("member-3", "NoAccess")
        assert "someone-elses-provider" in event["message"] and "DIR/<namespace>/<name>/Config" in event["message"]
        assert await inv.member("member-3") is None


async def test_a_hand_made_member_cluster_of_the_same_name_is_never_taken_over(sims: Sims, tmp_path: Path) -> None:
    sim = await sims.start(profile("m4", gpu_nodes=1, cpu_nodes=0))
    plugin = tmp_path / "plugin"
    write_plugin(plugin, f"token {sim.token}")
    async with running(tmp_path, cluster_profile_providers=parse_provider_config(provider_file(plugin))) as inv:
        await inv.hub.register(registration("fleet-member-4", sims.kubeconfigs["m4"]))
        await inv.apply(cluster_profile("member-4"), access_status(sim))
        event = await inv.wait_event("member-4", "NameConflict")
        assert "fleet-member-4" in event["message"] and event["type"] == "Warning"
        mc = await inv.member("member-4")
        assert mc is not None and PROFILE_ANNOTATION not in (mc["metadata"].get("annotations") or {})
        assert "kubeconfigPath" in mc["spec"]["connection"]
        # deleting the profile leaves the hand-made cluster alone
        await inv.delete("member-4")
        await inv.apply(cluster_profile("member-4"), access_status(sim))
        await inv.hub.storage.delete(inv.hub.rt, namespace=None, name="fleet-member-4")
        mc = await inv.wait_member("member-4", lambda m: PROFILE_ANNOTATION in (m["metadata"].get("annotations") or {}),
                                   "the profile joins once the hand-made cluster is gone")
        assert "accessProvider" in mc["spec"]["connection"]


@pytest.mark.parametrize(("mode", "words"), [
    ("hang", "did not answer within 0.5s"),
    ("fail", "exited with status 3: boom"),
    ("garbage", "printed no JSON ExecCredential"),
])
async def test_a_broken_plugin_shows_in_the_member_cluster_and_the_hub_goes_on(sims: Sims, tmp_path: Path,
                                                                              mode: str, words: str) -> None:
    sim = await sims.start(profile("m5", gpu_nodes=1, cpu_nodes=0))
    plugin = tmp_path / "plugin"
    write_plugin(plugin, mode)
    (plugin / "secret.txt").write_text(sim.token)
    async with running(tmp_path, cluster_profile_providers=parse_provider_config(provider_file(plugin)),
                       cluster_profile_exec_timeout_seconds=0.5) as inv:
        await inv.apply(cluster_profile("member-5"), access_status(sim))

        def failed(mc: dict[str, Any]) -> bool:
            return any(c.get("type") == "Ready" and c.get("reason") == "KubeconfigInvalid" and words in c["message"]
                       for c in (mc.get("status") or {}).get("conditions") or [])

        mc = await inv.wait_member("member-5", failed, f"member-5 Ready=False saying {words!r}")
        assert sim.token not in str(mc)
        # the plugin is fixed: the next retry joins
        write_plugin(plugin, f"token {sim.token}")
        await inv.wait_member("member-5", ready, "member-5 Ready once the plugin answers")


async def test_a_profile_deleted_while_no_hub_led_takes_its_cluster_with_it_at_the_next_start(
        sims: Sims, tmp_path: Path) -> None:
    sim = await sims.start(profile("m6", gpu_nodes=1, cpu_nodes=0))
    plugin = tmp_path / "plugin"
    write_plugin(plugin, f"token {sim.token}")
    providers = parse_provider_config(provider_file(plugin))
    async with running(tmp_path, cluster_profile_providers=providers) as inv:
        await inv.apply(cluster_profile("member-6"), access_status(sim))
        await inv.apply(cluster_profile("member-7"), access_status(sim))
        await inv.wait_member("member-6")
        await inv.wait_member("member-7")
        await inv.hub.register(registration("hand-made", sims.kubeconfigs["m6"]))
    hub = await Hub.open(f"sqlite://{tmp_path / 'hub.db'}")
    try:  # no controller runs: the profile goes, its MemberCluster stays
        rt = hub.registry.by_kind(API_VERSION, "ClusterProfile")
        assert rt is not None
        await hub.storage.delete(rt, namespace="fleet", name="member-6")
        assert await hub.get("fleet-member-6")
    finally:
        await hub.close()
    async with running(tmp_path, cluster_profile_providers=providers) as inv:
        await wait_until(lambda: _gone(inv, "member-6"), what="the orphaned MemberCluster removed at start")
        assert await inv.member("member-7") is not None
        assert await inv.hub.get("hand-made")
        # deleting a profile's MemberCluster by hand while the profile exists brings it back
        before = (await inv.hub.get("fleet-member-7"))["metadata"]["uid"]
        await inv.hub.storage.delete(inv.hub.rt, namespace=None, name="fleet-member-7")
        await inv.wait_member("member-7", lambda mc: mc["metadata"]["uid"] != before,
                              "the profile's MemberCluster put back")


@pytest.mark.parametrize(("labels", "words"), [
    ({"federator.dev/bandwidth-gbps": "fast"}, "federator.dev/bandwidth-gbps 'fast' is not a number"),
    ({"federator.dev/scheduler": "evil"}, "scheduler.name: Unsupported value: \"evil\""),
    ({"federator.dev/network": "rdma"}, "network.rdmaKind: Required value"),
])
async def test_a_profile_whose_labels_make_no_registration_gets_a_warning_and_nothing(
        sims: Sims, tmp_path: Path, labels: dict[str, str], words: str) -> None:
    sim = await sims.start(profile("m8", gpu_nodes=1, cpu_nodes=0))
    plugin = tmp_path / "plugin"
    write_plugin(plugin, f"token {sim.token}")
    async with running(tmp_path, cluster_profile_providers=parse_provider_config(provider_file(plugin))) as inv:
        await inv.apply(cluster_profile("member-8", labels=labels), access_status(sim))
        event = await inv.wait_event("member-8", "InvalidProfile")
        assert words in event["message"], event["message"]
        assert await inv.member("member-8") is None
        await inv.apply(cluster_profile("member-8", labels={}), access_status(sim))
        await inv.wait_member("member-8", ready, "member-8 joins once its labels are fixed")
