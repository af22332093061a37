"""`federator up --clusters DIR`: every MemberCluster registration in the directory is
applied at start (created, then updated in place on a later start), and a bad file
stops the hub before anything starts, naming the file and the field."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from collections.abc import Callable

import pytest
import structlog
import yaml

from federator.apis.views import Body
from federator.apiserver.storage import ObjectStorage
from federator.hub.app import RegistrationError, apply_registrations, read_registrations
from federator.hub.kinds import hub_registry
from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdProcess
from federator.store.protocol import StoreUnavailable

from .hubtest_support import ROOT, clusters_url, start_hub
from .test_credentials import MEMBER_TOKEN, token_cluster


def _write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "onprem.yaml").write_text(yaml.safe_dump(token_cluster("onprem-a100")))
    (directory / "cloud.yml").write_text(yaml.safe_dump_all([token_cluster("cloud-h100"), token_cluster("cloud-small")]))
    (directory / "README.md").write_text("not a registration")


async def test_registrations_are_applied_at_start_and_updated_on_restart(tmp_path: Path) -> None:
    clusters = tmp_path / "clusters"
    _write(clusters)
    async with start_hub(tmp_path / "hub", clusters_dir=clusters) as hub:
        assert hub.state.registrations == {"cloud-h100": "created", "cloud-small": "created",
                                           "onprem-a100": "created"}
        status, listing = await hub.request("GET", clusters_url(), who="viewer")
        assert status == 200
        assert [i["metadata"]["name"] for i in listing["items"]] == ["cloud-h100", "cloud-small", "onprem-a100"]
        assert all("connection" not in i["spec"] for i in listing["items"])  # a viewer sees no connection
        status, listing = await hub.request("GET", clusters_url())
        assert all(i["spec"]["connection"]["credentials"] == {"token": "<redacted>"} for i in listing["items"])
        rt = hub.context.kind("MemberCluster")
        stored = await hub.context.storage.get(rt, namespace=None, name="onprem-a100")
        assert stored["spec"]["connection"]["credentials"]["token"] == MEMBER_TOKEN
        # Status belongs to the controllers: a restart must not wipe it.
        stored["status"] = {"capacity": {"nodes": 4}}
        await hub.context.storage.update(rt, stored, subresource="status")

    changed = token_cluster("onprem-a100")
    changed["spec"]["cordoned"] = True
    (clusters / "onprem.yaml").write_text(yaml.safe_dump(changed))
    async with start_hub(tmp_path / "hub", clusters_dir=clusters) as hub:
        assert hub.state.registrations == {"cloud-h100": "unchanged", "cloud-small": "unchanged",
                                           "onprem-a100": "updated"}
        rt = hub.context.kind("MemberCluster")
        stored = await hub.context.storage.get(rt, namespace=None, name="onprem-a100")
        assert stored["spec"]["cordoned"] is True and stored["status"] == {"capacity": {"nodes": 4}}


def test_read_registrations_refuses_bad_files(tmp_path: Path) -> None:
    with pytest.raises(RegistrationError, match="not a directory"):
        read_registrations(tmp_path / "missing")
    (tmp_path / "a.yaml").write_text("kind: [unclosed\n")
    with pytest.raises(RegistrationError, match=r"a.yaml: not valid YAML at line \d"):
        read_registrations(tmp_path)
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: Pod\n")
    with pytest.raises(RegistrationError, match=r"a.yaml: document 1 is a Pod, not a MemberCluster"):
        read_registrations(tmp_path)


async def test_an_invalid_registration_stops_federator_up_with_one_line(tmp_path: Path) -> None:
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / "bad.yaml").write_text(yaml.safe_dump(token_cluster("bad", bandwidth=-1)))
    state = tmp_path / "state"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "federator.cli", "up", "--state-dir", str(state), "--store",
        f"sqlite://{state / 'hub.db'}", "--listen", "127.0.0.1:0", "--clusters", str(clusters), cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    lines = [line for line in err.decode().splitlines() if not line.startswith("{")]
    assert len(lines) == 1, err.decode()
    assert lines[0].startswith(f"error: {clusters / 'bad.yaml'}: MemberCluster.federator.dev \"bad\" is invalid: "
                               "spec.network.bandwidthGbps")
    assert MEMBER_TOKEN not in err.decode()


async def test_a_registration_is_retried_while_etcd_is_away_and_applied_once_it_returns(
    tmp_path: Path, etcd_factory: Callable[[], EtcdProcess],
) -> None:
    """A chaos sequence (seed 603348157) killed the etcd leader while a hub restarted: the registration
    write timed out with its outcome unknown and `federator up` exited 1. It now waits for the store."""
    clusters = tmp_path / "clusters"
    _write(clusters)
    etcd = etcd_factory()
    store = await EtcdStore.connect([etcd.endpoint], retry_budget_seconds=0.5)
    storage = ObjectStorage(store, hub_registry())
    try:
        etcd.kill()
        with structlog.testing.capture_logs() as logs:
            task = asyncio.create_task(apply_registrations(storage, clusters, retry_seconds=120))

            def retried() -> bool:
                return any(e["event"].startswith("cluster registration not applied") for e in logs)

            async with asyncio.timeout(60):
                while not retried():
                    assert not task.done(), task.result()
                    await asyncio.sleep(0.05)
            etcd.start()  # same ports, same data
            async with asyncio.timeout(120):
                outcome = await task
        assert outcome == {"cloud-h100": "created", "cloud-small": "created", "onprem-a100": "created"}
        warning = next(e for e in logs if e["event"].startswith("cluster registration not applied"))
        assert warning["log_level"] == "warning" and warning["cluster"] == "cloud-h100"
        assert "unavailable" in warning["error"]
        rt = hub_registry().by_kind("federator.dev/v1alpha1", "MemberCluster")
        assert rt is not None
        listing = await storage.list(rt)
        assert sorted(Body(i).name for i in listing.items) == ["cloud-h100", "cloud-small", "onprem-a100"]
    finally:
        await store.close()


async def test_a_registration_gives_up_when_the_store_stays_away(
    tmp_path: Path, etcd_factory: Callable[[], EtcdProcess],
) -> None:
    clusters = tmp_path / "clusters"
    _write(clusters)
    etcd = etcd_factory()
    store = await EtcdStore.connect([etcd.endpoint], retry_budget_seconds=0.5)
    try:
        etcd.kill()
        async with asyncio.timeout(120):  # never a hang
            with pytest.raises(StoreUnavailable, match="unavailable"):
                await apply_registrations(ObjectStorage(store, hub_registry()), clusters, retry_seconds=2)
    finally:
        await store.close()
