"""Member credentials from an exec plugin (a ClusterProfile access provider, KEP-5339), against a real
SimCluster over HTTPS with a real plugin process: the plugin gets KUBERNETES_EXEC_INFO with the cluster's
server, CA and extension config; its token is kept until it is about to expire, and asked for again after a
401; a plugin that hangs, fails, prints garbage or the wrong apiVersion is a KubeconfigError that says which,
and no token ever appears in an error or a repr."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from clustertest_support import Sims, profile
from exec_plugin_support import exec_config, exec_info, runs, set_mode, write_plugin

from federator.clusters.client import NODES, ClientTimeouts, KubeconfigError, MemberApiError, MemberClient
from federator.sim.server import SimCluster


def connection(sim: SimCluster, **extra: Any) -> dict[str, Any]:
    return {"server": sim.url, "certificateAuthorityData": base64.b64encode(sim.ca_pem).decode(),
            "accessProvider": {"name": "token-provider", "config": {"audience": "fleet"}}, **extra}


async def client_for(sim: SimCluster, plugin_dir: Path, *, timeout: float = 10.0) -> MemberClient:
    return await MemberClient.from_connection(
        connection(sim), cluster="c", timeouts=ClientTimeouts(exec_plugin=timeout),
        exec_plugins={"token-provider": exec_config(plugin_dir)})


async def test_the_plugin_token_reaches_the_member_and_the_plugin_gets_the_cluster(sims: Sims,
                                                                                     tmp_path: Path) -> None:
    sim = await sims.start(profile("c", gpu_nodes=2, cpu_nodes=0))
    plugin = tmp_path / "plugin"
    write_plugin(plugin, f"token {sim.token} 3600")
    async with await client_for(sim, plugin) as client:
        assert len((await client.list(NODES)).items) == 2
        await client.probe()
        assert len((await client.list(NODES)).items) == 2
        assert sim.token not in repr(client) and sim.token not in repr(client._exec)
    assert runs(plugin) == 1, "a credential valid for an hour is kept"
    info = exec_info(plugin)
    assert info["apiVersion"] == "client.authentication.k8s.io/v1" and info["kind"] == "ExecCredential"
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"] == {"server": sim.url,
                                       "certificate-authority-data": base64.b64encode(sim.ca_pem).decode(),
                                       "config": {"audience": "fleet"}}


async def test_without_provide_cluster_info_the_plugin_gets_no_cluster(sims: Sims, tmp_path: Path) -> None:
    sim = await sims.start(profile("c", gpu_nodes=1, cpu_nodes=0))
    plugin = tmp_path / "plugin"
    write_plugin(plugin, f"token {sim.token}")
    async with await MemberClient.from_connection(
            connection(sim), cluster="c",
            exec_plugins={"token-provider": exec_config(plugin, provide_cluster_info=False)}) as client:
        await client.list(NODES)
    assert "cluster" not in exec_info(plugin)["spec"]


async def test_a_credential_about_to_expire_is_asked_for_again(sims: Sims, tmp_path: Path) -> None:
    sim = await sims.start(profile("c", gpu_nodes=1, cpu_nodes=0))
    plugin = tmp_path / "plugin"
    # expiring within the refresh margin (30 s): every request runs the plugin first
    write_plugin(plugin, f"token {sim.token} 5")
    async with await client_for(sim, plugin) as client:
        before = runs(plugin)
        await client.list(NODES)
        await client.list(NODES)
        assert runs(plugin) >= before + 2


async def test_a_401_runs_the_plugin_again_and_retries_once(sims: Sims, tmp_path: Path) -> None:
    sim = await sims.start(profile("c", gpu_nodes=3, cpu_nodes=0))
    plugin = tmp_path / "plugin"
    write_plugin(plugin, f"tokens revoked-token-0123456789 {sim.token}")
    async with await client_for(sim, plugin) as client:
        assert len((await client.list(NODES)).items) == 3
        assert runs(plugin) == 2
        # a plugin that keeps answering a refused token: the 401 reaches the caller after one retry
        set_mode(plugin, "token still-refused-token-42")
        client._exec._current = None  # type: ignore[union-attr]
        with pytest.raises(MemberApiError) as raised:
            await client.list(NODES)
        assert raised.value.code == 401
        assert "still-refused-token-42" not in str(raised.value)


@pytest.mark.parametrize(("mode", "words"), [
    ("hang", "did not answer within 0.5s (killed)"),
    ("fail", "exited with status 3: boom: no credential today"),
    ("garbage", "printed no JSON ExecCredential"),
    ("wrong-version secret-token-abcdef", "answered apiVersion \"client.authentication.k8s.io/v1beta1\""),
    ("empty", "neither a token nor a PEM client certificate and key"),
    ("huge", "printed more than 1 MiB"),
])
async def test_a_broken_plugin_is_a_clear_error_that_shows_no_secret(sims: Sims, tmp_path: Path, mode: str,
                                                                     words: str) -> None:
    sim = await sims.start(profile("c", gpu_nodes=1, cpu_nodes=0))
    plugin = tmp_path / "plugin"
    write_plugin(plugin, mode)
    (plugin / "secret.txt").write_text("secret-token-abcdef")
    # 0.5 s for the plugin that hangs; the others get 30 s, so that a Python plugin slow to start on a loaded
    # machine (a CI run under CPU hogs took more than 0.5 s) still answers and shows its own error
    with pytest.raises(KubeconfigError) as raised:
        await client_for(sim, plugin, timeout=0.5 if mode == "hang" else 30.0)
    message = str(raised.value)
    assert words in message and "cluster c: access provider 'token-provider'" in message
    assert "secret-token-abcdef" not in message


async def test_an_unknown_provider_or_a_missing_program_is_a_clear_error(sims: Sims, tmp_path: Path) -> None:
    sim = await sims.start(profile("c", gpu_nodes=1, cpu_nodes=0))
    with pytest.raises(KubeconfigError, match="access provider 'token-provider' is not in the hub's "
                                              "--cluster-profile-providers file"):
        await MemberClient.from_connection(connection(sim), cluster="c", exec_plugins={})
    missing = exec_config(tmp_path).model_copy(update={"command": str(tmp_path / "no-such-plugin"),
                                                       "install_hint": "install cp-creds from your cluster manager"})
    with pytest.raises(KubeconfigError, match="cannot be started: No such file or directory "
                                              r"\(install cp-creds from your cluster manager\)"):
        await MemberClient.from_connection(connection(sim), cluster="c", exec_plugins={"token-provider": missing})


async def test_output_in_many_small_writes_and_a_lot_of_stderr_is_read_whole(sims: Sims, tmp_path: Path) -> None:
    sim = await sims.start(profile("c", gpu_nodes=1, cpu_nodes=0))
    plugin = tmp_path / "plugin"
    write_plugin(plugin, f"chunked {sim.token}")
    async with await client_for(sim, plugin) as client:
        assert len((await client.list(NODES)).items) == 1
