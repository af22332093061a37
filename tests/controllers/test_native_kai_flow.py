"""A real hub places gangs into a cluster running Kubernetes' own gang scheduling and into one running NVIDIA
KAI Scheduler (real SimClusters), through its public API: each job reaches Admitted and Running with the
member scheduler's own objects (a scheduling.k8s.io/v1alpha2 PodGroup with schedulingPolicy.gang.minCount and
pods naming it in spec.schedulingGroup.podGroupName; a scheduling.run.ai/v2alpha2 PodGroup in default-queue
with pods annotated pod-group-name and not owned by it), and real kubectl against each member shows them.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from federator.hub.app import hub_controllers

from ..hub.hubtest_support import start_hub
from .jobtest_support import (
    Federation,
    HubApi,
    condition,
    fast_settings,
    gpu_job,
    phase,
    placement_of,
)

NATIVE, KAI = "cloud-native-gang", "onprem-kai-h100"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


class Env:
    def __init__(self, api: HubApi, fed: Federation, home: Path) -> None:
        self.api, self.fed, self.home = api, fed, home

    async def kubectl(self, cluster: str, *args: str) -> str:
        """Real kubectl against a member (asynchronously: the members serve from this event loop)."""
        proc = await asyncio.create_subprocess_exec(
            KUBECTL, "--kubeconfig", str(self.fed.kubeconfigs[cluster]), "--cache-dir", str(self.home / "cache"),
            "--request-timeout=20s", *args, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                                 "HOME": str(self.home)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, f"kubectl {' '.join(args)} failed: {err.decode()}"
        return out.decode()


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    fed = Federation(tmp_path / "members")
    await fed.start([NATIVE, KAI])
    try:
        async with start_hub(tmp_path / "hub", controllers=hub_controllers(),
                             settings=fast_settings(tmp_path / "hub" / "state")) as hub:
            api = await HubApi.connect(hub.kubeconfigs["admin"])
            try:
                for body in fed.registrations.values():
                    await api.register(body)
                for name in fed.registrations:
                    await api.wait_cluster_ready(name)
                (tmp_path / "home").mkdir()
                yield Env(api, fed, tmp_path / "home")
            finally:
                await api.close()
    finally:
        await fed.stop()


def running(job: dict[str, Any]) -> bool:
    return phase(job) == "Running"


@pytest.mark.kubectl
@pytest.mark.skipif(not Path(KUBECTL).exists(), reason=f"kubectl not found at {KUBECTL}")
async def test_gangs_run_under_kubernetes_gang_scheduling_and_kai(env: Env) -> None:
    # Ethernet only fits the native cluster; RDMA (with an HCA per worker) only the KAI cluster
    native_job = await env.api.submit(gpu_job("on-native", workers=3, gpus=4, network="ethernet"))
    kai_job = await env.api.submit(gpu_job("on-kai", workers=3, gpus=4, network="rdma", rdma=True))
    done = {name: await env.api.wait_job("team-a", name, running, timeout=30, what="Running")
            for name in ("on-native", "on-kai")}
    for name, cluster in (("on-native", NATIVE), ("on-kai", KAI)):
        job = done[name]
        assert placement_of(job)["cluster"] == cluster
        events = [h["event"] for h in job["status"]["history"]]
        assert [e for e in events if e in ("Placed", "Admitted", "Running")] == ["Placed", "Admitted", "Running"]
        guarantee = condition(job, "GangGuarantee")
        assert guarantee is not None and guarantee["status"] == "True"
        assert job["status"]["podCounts"]["worker"]["running"] == 3

    # the native member: Kubernetes' own PodGroup, pods linked by their spec, owned by the group
    where = await env.fed.where(native_job["metadata"]["uid"])
    assert list(where) == [NATIVE]
    (group,), pods = where[NATIVE]
    assert group["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {group["metadata"]["name"]}
    assert {p["spec"]["schedulerName"] for p in pods} == {"default-scheduler"}
    assert all(p["metadata"]["ownerReferences"][0]["uid"] == group["metadata"]["uid"] for p in pods)
    scheduled = next(c for c in group["status"]["conditions"] if c["type"] == "PodGroupScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("True", "Scheduled")

    # the KAI member: KAI's PodGroup in default-queue, pods annotated and not owned (KAI's pod-grouper)
    where = await env.fed.where(kai_job["metadata"]["uid"])
    assert list(where) == [KAI]
    (group,), pods = where[KAI]
    assert group["apiVersion"] == "scheduling.run.ai/v2alpha2"
    assert (group["spec"]["minMember"], group["spec"]["queue"]) == (3, "default-queue")
    assert group["metadata"]["labels"]["kai.scheduler/queue"] == "default-queue"
    assert group["metadata"]["annotations"]["kai.scheduler/last-start-timestamp"]
    assert {p["metadata"]["annotations"]["pod-group-name"] for p in pods} == {group["metadata"]["name"]}
    assert {p["spec"]["schedulerName"] for p in pods} == {"kai-scheduler"}
    assert all("ownerReferences" not in p["metadata"] for p in pods)

    # kubectl against each member shows its scheduler's own kind
    table = (await env.kubectl(NATIVE, "get", "podgroups.scheduling.k8s.io", "-n", "team-a")).splitlines()
    assert table[0].split() == ["NAME", "POLICY", "STATUS", "AGE"]
    assert [row.split()[1:3] for row in table[1:]] == [["Gang", "Scheduled"]]
    listed = json.loads(await env.kubectl(KAI, "get", "podgroups.scheduling.run.ai", "-n", "team-a", "-o", "json"))
    assert [g["metadata"]["name"] for g in listed["items"]] == [group["metadata"]["name"]]
    bound = await env.kubectl(KAI, "get", "pods", "-n", "team-a", "-l", "federator.dev/job-name=on-kai", "-o",
                              "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}")
    assert bound.split() == ["Running"] * 3
