"""`federator agent` as a real process against a real SimCluster (bad arguments are one line and
exit 2; it fences when the test's hub stops renewing; SIGTERM and a closed stdin with
--stop-with-parent stop it), `federator up`'s `DevAgents` (one agent process per simulated
cluster, logging to <cluster>-agent.log), `federator sim` writing each cluster's agent kubeconfig,
and `federator sim fault partition --from`."""

from __future__ import annotations

import asyncio
import json
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from agenttest_support import HUB, Member, Renewer, wait_until

from federator.dev.clusters import DevAgents, DevCluster

AGENT = [sys.executable, "-m", "federator.cli", "agent"]
FEDERATOR = [sys.executable, "-m", "federator.cli"]


@pytest.mark.parametrize(("args", "message"), [
    (["--kubeconfig", "{missing}", "--hub-identity", "hub-a"], "--kubeconfig {missing}: no such file"),
    (["--kubeconfig", "{dir}", "--hub-identity", "hub-a"], "is not a file"),
    (["--kubeconfig", "{kc}", "--hub-identity", ""], "--hub-identity: the hub identity must not be empty"),
    (["--kubeconfig", "{kc}", "--hub-identity", "Not_Valid"], "must be a valid label value"),
    (["--kubeconfig", "{kc}", "--hub-identity", "hub-a", "--poll-seconds", "0"], "--poll-seconds '0'"),
    (["--kubeconfig", "{kc}", "--hub-identity", "hub-a", "--poll-seconds", "-2"], "must be more than zero"),
    (["--kubeconfig", "{kc}", "--hub-identity", "hub-a", "--poll-seconds", "soon"], "not a duration"),
    (["--kubeconfig", "{kc}", "--hub-identity", "hub-a", "--namespace", "No_Such"], "not a valid namespace"),
    (["--kubeconfig", "{kc}", "--hub-identity", "hub-a", "--namespace", "team\n"], "not a valid namespace"),
    (["--kubeconfig", "{garbage}", "--hub-identity", "hub-a"], "is not a kubeconfig document"),
    (["--kubeconfig", "{kc}", "--hub-identity", "hub-a", "--audit-log-path", "{dir}/audit.log", "--audit-policy-file",
      "{kc}"], '--audit-policy-file {kc}: apiVersion: Unsupported value: "v1"'),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    kc = tmp_path / "member.kubeconfig"
    kc.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [],
                                  "contexts": [], "current-context": ""}))
    garbage = tmp_path / "garbage.kubeconfig"
    garbage.write_text("just text\n")
    paths = {"missing": str(tmp_path / "missing.kubeconfig"), "dir": str(tmp_path), "kc": str(kc),
             "garbage": str(garbage)}
    done = subprocess.run([*AGENT, *(a.format(**paths) for a in args)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and message.format(**paths) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_help_says_what_it_does() -> None:
    done = subprocess.run([*AGENT, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for text in ("--kubeconfig", "--hub-identity", "--poll-seconds", "--namespace", "federator.dev/hub=ID",
                 "HubLeaseExpired"):
        assert text in done.stdout
    assert "--stop-with-parent" not in done.stdout


class Process:
    """A subprocess whose output lines are collected as they come."""

    def __init__(self, argv: list[str], *, stdin: int | None = subprocess.DEVNULL) -> None:
        self.proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: list[str] = []
        self._reader = asyncio.get_running_loop().run_in_executor(None, self._read)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace"))

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    async def wait(self, timeout: float = 30.0) -> int:
        code = await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout)
        await asyncio.wait_for(self._reader, timeout)
        return code

    async def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        await self.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream:
                stream.close()


async def test_the_agent_process_fences_and_stops_on_sigterm(member: Member, renewer: Renewer,
                                                             tmp_path: Path) -> None:
    renewer.start()
    await wait_until("the lease", lambda: renewer.renewals >= 1)
    ns = await member.namespace()
    await member.pod(ns, "ps-0", hub=HUB)
    await member.pod(ns, "keep", hub="someone-else")
    audit_log = tmp_path / "agent-audit.log"
    agent = Process([*AGENT, "--kubeconfig", str(member.agent_kubeconfig), "--hub-identity", HUB,
                     "--poll-seconds", "200ms", "--log-level", "info", "--audit-log-path", str(audit_log)])
    try:
        await wait_until("the agent to start watching", lambda: agent.said("fence agent watching"))
        await renewer.stop()

        async def fenced() -> bool:
            return ("pod", ns, "ps-0") not in await member.objects()

        await wait_until("the agent to delete the hub's pod", fenced)
        await wait_until("the agent to say why", lambda: agent.said("hub lease expired"))
        assert ("pod", ns, "keep") in await member.objects()
        line = json.loads(next(line for line in agent.lines if "hub lease expired" in line))
        assert line["cluster"] == member.cluster.name and line["hub"] == HUB and line["pods_deleted"] == 1
        assert member.cluster.agent_token not in "".join(agent.lines)
        agent.proc.send_signal(signal.SIGTERM)
        assert await agent.wait() == 0
        assert agent.said("fence agent stopped") and not agent.said("Traceback")
        # its writes, in kube's audit format: the fencing delete, with the cluster and why
        events = [json.loads(line) for line in audit_log.read_text().splitlines()]
        deletes = [e for e in events if e["verb"] == "delete" and e["objectRef"]["resource"] == "pods"]
        assert [(e["objectRef"]["namespace"], e["objectRef"]["name"]) for e in deletes] == [(ns, "ps-0")]
        assert deletes[0]["user"]["username"] == "system:federator:fence-agent"
        assert deletes[0]["annotations"] == {"federator.dev/cluster": member.cluster.name,
                                             "federator.dev/reason": "fence"}
        assert member.cluster.agent_token not in audit_log.read_text()
    finally:
        await agent.close()


async def test_stop_with_parent_stops_when_stdin_closes(member: Member) -> None:
    agent = Process([*AGENT, "--kubeconfig", str(member.agent_kubeconfig), "--hub-identity", HUB,
                     "--stop-with-parent"], stdin=subprocess.PIPE)
    try:
        await wait_until("the agent to see there is no lease yet", lambda: agent.said("does not exist"))
        assert agent.proc.stdin is not None
        agent.proc.stdin.close()
        assert await agent.wait() == 0
    finally:
        await agent.close()


async def test_dev_agents_run_one_process_per_cluster_with_a_log_each(member: Member, renewer: Renewer,
                                                                      tmp_path: Path) -> None:
    cluster = DevCluster(name=member.cluster.name, server=member.cluster.url, kubeconfig=member.admin_kubeconfig,
                         registration=tmp_path / "unused.yaml", agent_kubeconfig=member.agent_kubeconfig,
                         scheduler="volcano", network="rdma", nodes=2, gpus=0, description="fence lab")
    agents = DevAgents([cluster], hub_identity=HUB, directory=tmp_path, poll_seconds=0.2)
    log = agents.log_path(cluster.name)
    assert log == tmp_path / f"{cluster.name}-agent.log"
    renewer.start()
    ns = await member.namespace()
    await member.pod(ns, "ps-0", hub=HUB)
    await asyncio.to_thread(agents.start)
    try:
        (proc,) = agents.processes.values()
        await wait_until("the agent's log", lambda: log.exists() and "fence agent watching" in log.read_text())
        await renewer.stop()

        async def fenced() -> bool:
            return ("pod", ns, "ps-0") not in await member.objects()

        await wait_until("the dev agent to fence", fenced)
        await wait_until("its log to say why", lambda: "hub lease expired" in log.read_text())
    finally:
        await asyncio.to_thread(agents.stop)
    assert proc.poll() == 0 and agents.processes == {}
    assert "fence agent stopped" in log.read_text()


async def test_federator_sim_writes_the_agent_kubeconfig(tmp_path: Path) -> None:
    from federator.cli.sim import serve
    from federator.clusters.client import MemberClient
    from federator.sim.profile import parse_profile

    profile = parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": "indexed",
        "location": {"type": "on-prem", "region": "lab"}, "network": {"fabric": "ethernet", "bandwidthGbps": 25},
        "schedulers": [{"type": "default"}],
        "nodePools": [{"name": "cpu", "count": 1, "cpu": "8", "memory": "32Gi"}],
    })
    ready, stop = asyncio.Event(), asyncio.Event()
    served = asyncio.get_running_loop().create_task(serve([profile], state_dir=tmp_path, port_base=None,
                                                          ready=ready, stop=stop))
    try:
        await wait_until("federator sim to serve", ready.is_set)
        path = tmp_path / "indexed-agent.kubeconfig"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        index = json.loads((tmp_path / "clusters.json").read_text())["clusters"]
        assert index[0]["agentKubeconfig"] == str(path)
        doc = yaml.safe_load(path.read_text())
        assert doc["users"][0]["name"] == "indexed-agent"
        assert doc["users"][0]["user"]["token"] != yaml.safe_load(
            (tmp_path / "indexed.kubeconfig").read_text())["users"][0]["user"]["token"]
        client = await MemberClient.from_kubeconfig(path, cluster="indexed")
        try:
            from federator.clusters.client import NODES

            assert len((await client.list(NODES)).items) == 1
        finally:
            await client.close()
    finally:
        stop.set()
        assert await asyncio.wait_for(served, 30) == 0


async def test_sim_fault_partition_from(member: Member) -> None:
    def fault(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*FEDERATOR, "sim", "fault", "--kubeconfig", str(member.admin_kubeconfig), *args],
                              capture_output=True, text=True, timeout=60)

    done = await asyncio.to_thread(fault, "partition", "--from", member.cluster.agent_token, "--seconds", "30")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"fault": "partition", "seconds": 30.0, "from": "federator-agent"}
    assert member.cluster.faults.partition_from == "federator-agent"
    status = await asyncio.to_thread(fault, "status")
    assert json.loads(status.stdout)["partition"]["from"] == "federator-agent"
    assert member.cluster.agent_token not in status.stdout
    done = await asyncio.to_thread(fault, "partition", "--from", "nobody")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "names no user of cluster fence-lab" in done.stderr and "(400)" in done.stderr
    assert member.cluster.faults.partition_from == "federator-agent"  # the bad one changed nothing
    done = await asyncio.to_thread(fault, "partition", "--end", "--from", "sim-admin")
    assert done.returncode == 2 and "takes no --from" in done.stderr
    done = await asyncio.to_thread(fault, "partition", "--end")
    assert done.returncode == 0 and not member.cluster.faults.partitioned
