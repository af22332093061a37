"""Registration through the hub's HTTP API (kubectl and raw requests), bad registrations, and the
rule that member credentials never leave the hub: not in logs, API responses, status, metrics,
error messages or checkpoints."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import shutil
import subprocess
import zlib
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
import yaml
from clustertest_support import Hub, Sims, profile, registration, running, wait_until
from prometheus_client import generate_latest

from federator.clusters.client import MemberClient

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def hub_kubeconfig(path: Path, url: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "hub", "cluster": {"server": url}}],
        "users": [{"name": "dev", "user": {}}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": "dev"}}],
        "current-context": "hub",
    }))
    return path


async def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, [KUBECTL, "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True,
        text=True, timeout=60,
    )


@pytest.mark.kubectl
async def test_kubectl_apply_registers_a_cluster_that_turns_ready(sims: Sims, tmp_path: Path) -> None:
    await sims.start(profile("applied", gpu_nodes=2, cpu_nodes=0))
    hub = await Hub.open("memory://")
    try:
        url = await hub.serve()
        config = hub_kubeconfig(tmp_path / "hub.kubeconfig", url)
        manifest = tmp_path / "applied.yaml"
        manifest.write_text(yaml.safe_dump(registration("applied", sims.kubeconfigs["applied"])))
        async with running(hub):
            done = await kubectl(config, "apply", "-f", str(manifest))
            assert done.returncode == 0, done.stderr
            assert "membercluster.federator.dev/applied created" in done.stdout
            await hub.wait_condition("applied", "Ready", "True")
            shown = await kubectl(config, "get", "membercluster", "applied", "-o", "json")
            assert shown.returncode == 0, shown.stderr
            status = json.loads(shown.stdout)["status"]
            assert status["capacity"]["totalGPUs"] == 16
            assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
    finally:
        await hub.close()


BAD = [
    ("unknown scheduler", {"scheduler": {"name": "slurm"}}, "spec.scheduler.name"),
    ("bad URL", {"connection": {"server": "ftp://member.example", "credentials": {"token": "abc"}}},
     "spec.connection.server"),
    ("missing kubeconfig", {"connection": {}}, "spec.connection"),
    ("negative bandwidth", {"network": {"type": "ethernet", "bandwidthGbps": -10.0}}, "spec.network.bandwidthGbps"),
]


@pytest.mark.parametrize(("what", "change", "field"), BAD, ids=[b[0] for b in BAD])
async def test_bad_registration_is_422_naming_the_field_and_stores_nothing(
    tmp_path: Path, what: str, change: dict[str, Any], field: str
) -> None:
    hub = await Hub.open("memory://")
    try:
        url = await hub.serve()
        body = registration("bad", Path("/etc/federator/bad.kubeconfig"))
        body["spec"].update(change)
        revision = await hub.store.current_revision()
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/apis/federator.dev/v1alpha1/memberclusters", json=body) as resp:
                assert resp.status == 422, await resp.text()
                status = await resp.json()
        assert status["kind"] == "Status" and status["reason"] == "Invalid"
        fields = [c.get("field") for c in status["details"]["causes"]]
        assert field in fields, (what, fields)
        assert field in status["message"]
        assert await hub.store.current_revision() == revision
        assert (await hub.storage.list(hub.rt)).items == []
    finally:
        await hub.close()


async def test_missing_kubeconfig_file_is_reported_then_picked_up(sims: Sims, tmp_path: Path) -> None:
    await sims.start(profile("later", gpu_nodes=1, cpu_nodes=0))
    hub = await Hub.open("memory://")
    path = tmp_path / "elsewhere" / "later.kubeconfig"
    try:
        async with running(hub):
            await hub.register(registration("later", path))
            cond = await hub.wait_condition("later", "Reachable", "False")
            assert cond["reason"] == "KubeconfigInvalid"
            assert str(path) in cond["message"]
            assert (await hub.get("later"))["status"]["firstLossOfContact"]
            assert hub.snapshot("later") is None
            path.parent.mkdir()
            shutil.copy(sims.kubeconfigs["later"], path)
            await hub.wait_condition("later", "Ready", "True")
            assert hub.snapshot("later") is not None
    finally:
        await hub.close()


def _ca_data(sim: Any) -> str:
    return base64.b64encode(sim.ca_pem).decode()


async def test_credentials_never_leave_the_hub(sims: Sims, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    good = await sims.start(profile("secret-a", gpu_nodes=1, cpu_nodes=0))
    await sims.start(profile("secret-b", gpu_nodes=1, cpu_nodes=0))
    secrets = [good.token, sims.clusters["secret-b"].token]
    wrong_token = "wrong-" + good.token[::-1]
    secrets.append(wrong_token)
    # a kubeconfig that is broken YAML right where the token is
    broken = tmp_path / "broken.kubeconfig"
    broken.write_text(f"apiVersion: v1\nusers:\n- name: x\n  user: {{token: {good.token}\n")
    bodies = [
        registration("secret-a", None, connection={"server": good.url, "certificateAuthorityData": _ca_data(good),
                                                   "credentials": {"token": good.token}}),
        registration("secret-b", sims.kubeconfigs["secret-b"]),
        registration("secret-wrong", None, connection={"server": good.url, "certificateAuthorityData": _ca_data(good),
                                                       "credentials": {"token": wrong_token}}),
        registration("secret-broken", broken),
    ]
    hub = await Hub.open("memory://")
    try:
        url = await hub.serve()
        with structlog.testing.capture_logs() as logs:
            async with running(hub):
                async with aiohttp.ClientSession() as http:
                    for body in bodies:
                        async with http.post(f"{url}/apis/federator.dev/v1alpha1/memberclusters", json=body) as r:
                            created = await r.text()
                            assert r.status == 201, created
                            assert not any(s in created for s in secrets)
                    await hub.wait_condition("secret-a", "Ready", "True")
                    await hub.wait_condition("secret-b", "Ready", "True")
                    wrong = await hub.wait_condition("secret-wrong", "Synced", "False")
                    assert "401" in wrong["message"]
                    await hub.wait_condition("secret-broken", "Reachable", "False")
                    # an outage makes the clients fail and log their errors too
                    await good.faults.start_outage(60, mode="refuse")
                    await hub.wait_condition("secret-a", "Reachable", "False")
                    await good.faults.end_outage()
                    await hub.wait_condition("secret-a", "Ready", "True", timeout=20)
                    async with http.get(f"{url}/apis/federator.dev/v1alpha1/memberclusters") as r:
                        listed = await r.text()
                    async with http.get(f"{url}/apis/federator.dev/v1alpha1/memberclusters/secret-a") as r:
                        one = await r.text()
                # sanity: the hub does hold the credential in-process (so the checks below mean something)
                stored = await hub.get("secret-a")
                assert stored["spec"]["connection"]["credentials"]["token"] == good.token
                # served with no principal (no auth here): not an admin, so no connection at all
                assert '"connection"' not in one and '"location"' in one
                await wait_until(lambda: _checkpointed(hub, "secret-a"), what="a checkpoint of secret-a")
                checkpoints = await hub.store.range(hub.store.prefix + "membersync/")
        texts = {
            "structlog": json.dumps(logs, default=str),
            "stdlib logging": "\n".join(r.getMessage() for r in caplog.records),
            "list response": listed,
            "get response": one,
            "status": json.dumps([(await hub.get(b["metadata"]["name"])).get("status") for b in bodies]),
            "metrics": generate_latest(hub.metrics.registry).decode(),
            "checkpoints": "\n".join(zlib.decompress(kv.value[2:]).decode() for kv in checkpoints.kvs),
        }
        assert "member condition changed" in texts["structlog"]  # the capture did see the sync's logs
        for where, text in texts.items():
            for secret in secrets:
                assert secret not in text, f"a credential leaked into {where}"
        # errors name the cluster and the server, never the token
        with pytest.raises(Exception) as raised:
            client = await MemberClient.from_kubeconfig(broken, cluster="x")
            await client.close()
        assert good.token not in str(raised.value)
    finally:
        await hub.close()


async def _checkpointed(hub: Hub, name: str) -> bool:
    result = await hub.store.range(hub.store.prefix + f"membersync/{name}/meta")
    return bool(result.kvs)
