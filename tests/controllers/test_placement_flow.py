"""The placement loop and dispatch end to end: several real SimClusters and a real hub running
member_sync, job_dispatch and job_placement; submissions through the hub's public API with the
official kubernetes.aio client; member state read through each member's kubeconfig.

- the design.md example lands whole in the RDMA cluster that holds its dataset (Volcano PodGroup with
  minMember 10, every pod labelled with job uid, role, index, epoch and hub);
- a job that may use either fabric goes to the Ethernet H100 cluster (coscheduling) while the RDMA
  cluster is busy;
- a job on the default scheduler gets pods only;
- a gang bigger than every cluster stays Pending with one why-not row per cluster and
  Schedulable=False/TooLargeForAnyCluster; a gang that fits nowhere *now* says NoClusterFits;
- re-dispatching a dispatched job (and the restart recovery pass) creates nothing twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from federator.controllers.dispatch import Dispatcher
from federator.controllers.jobs import reservations
from federator.delegation.adapter import (
    LABEL_EPOCH,
    LABEL_HUB,
    LABEL_INDEX,
    LABEL_JOB_NAME,
    LABEL_JOB_NAMESPACE,
    LABEL_JOB_UID,
    LABEL_ROLE,
)
from federator.hub.app import hub_controllers

from ..hub.hubtest_support import RunningHub, start_hub
from .jobtest_support import (
    Federation,
    HubApi,
    condition,
    example_job,
    fast_settings,
    gpu_job,
    phase,
    placement_of,
    wait_until,
)


class Env:
    def __init__(self, hub: RunningHub, api: HubApi, fed: Federation) -> None:
        self.hub, self.api, self.fed = hub, api, fed

    @property
    def dispatcher(self) -> Dispatcher:
        return self.hub.context.parts.dispatcher

    async def placed(self, namespace: str, name: str, *, timeout: float = 20.0) -> dict[str, Any]:
        """Wait until the job is placed and its dispatch is recorded."""
        return await self.api.wait_job(
            namespace, name,
            lambda j: placement_of(j).get("cluster") is not None
            and (condition(j, "Dispatched") or {}).get("status") == "True",
            timeout=timeout, what="placed and dispatched")


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    fed = Federation(tmp_path / "members")
    await fed.start()
    try:
        async with start_hub(tmp_path / "hub", controllers=hub_controllers(),
                             settings=fast_settings(tmp_path / "hub" / "state")) as hub:
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


def _labels_ok(obj: dict[str, Any], job: dict[str, Any], epoch: int) -> None:
    labels = obj["metadata"]["labels"]
    assert labels[LABEL_JOB_UID] == job["metadata"]["uid"]
    assert labels[LABEL_JOB_NAME] == job["metadata"]["name"]
    assert labels[LABEL_JOB_NAMESPACE] == job["metadata"]["namespace"]
    assert labels[LABEL_EPOCH] == str(epoch)
    assert labels[LABEL_HUB] == "federator"


async def test_example_lands_whole_in_the_rdma_cluster_with_its_dataset(env: Env) -> None:
    created = await env.api.submit(example_job())
    uid = created["metadata"]["uid"]
    job = await env.placed("vision", "resnet-ps")
    placement = placement_of(job)
    assert placement["cluster"] == "onprem-rdma-a100"
    # epoch 1, unless a loaded machine timed a member write out: the dispatch is then undone and the gang
    # placed again (epoch + 1), and every earlier epoch must have ended that way, in the same cluster
    epoch = placement["epoch"]
    history = job["status"]["history"]
    for earlier in range(1, epoch):
        ended = [h for h in history if h.get("epoch") == earlier]
        assert ended[0]["event"] == "Placed" and any(
            h["event"] == "Requeued" and str(h.get("message")).startswith("dispatch to onprem-rdma-a100 failed")
            for h in ended), history
    assert all(h.get("cluster") in (None, "onprem-rdma-a100") for h in history), history
    assert placement["decisionResourceVersion"]
    assert phase(job) in ("Placed", "Admitted", "Running", "Succeeded")
    # every other cluster has a why-not row (or lost on score: the RDMA one without the dataset)
    rejected = {row["cluster"]: row["reason"] for row in placement["whyNot"]}
    assert set(rejected) >= {"cloud-eth-h100", "cloud-small"}
    # the score breakdown: the chosen cluster first, its parts add up to its total; every other
    # cluster that passed the filters is a runner-up, none is both rejected and scored
    scores = placement["scores"]
    chosen = scores[0]
    assert chosen["cluster"] == "onprem-rdma-a100" and chosen["gpuModel"] == "A100" and chosen["nodes"] >= 1
    plugins = [part["plugin"] for part in chosen["parts"]]
    assert "data-locality" in plugins and len(plugins) == len(set(plugins))
    assert abs(sum(part["weighted"] for part in chosen["parts"]) - chosen["total"]) < 0.01
    assert all(part["weighted"] <= 100 * part["weight"] + 1e-6 for part in chosen["parts"])
    assert all(row["total"] <= chosen["total"] and "parts" not in row for row in scores[1:])
    assert {row["cluster"] for row in scores}.isdisjoint(rejected)
    assert {row["cluster"] for row in scores} | set(rejected) == set(env.fed.registrations)
    events = [h["event"] for h in history if h.get("epoch") == epoch]
    assert events[:2] == ["Placed", "Dispatched"], history

    where = await env.fed.where(uid)
    assert list(where) == ["onprem-rdma-a100"], where
    groups, pods = where["onprem-rdma-a100"]
    assert len(groups) == 1 and groups[0]["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert groups[0]["spec"]["minMember"] == 10
    _labels_ok(groups[0], job, epoch)
    assert len(pods) == 10
    roles: dict[str, list[int]] = {}
    for pod in pods:
        _labels_ok(pod, job, epoch)
        labels = pod["metadata"]["labels"]
        roles.setdefault(labels[LABEL_ROLE], []).append(int(labels[LABEL_INDEX]))
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == groups[0]["metadata"]["name"]
        assert pod["metadata"]["ownerReferences"][0]["uid"] == groups[0]["metadata"]["uid"]
    assert {role: sorted(indexes) for role, indexes in roles.items()} == {"ps": [0, 1], "worker": list(range(8))}
    # the member scheduler admits the gang: every pod gets bound (whole, in one cluster)
    async def bound() -> bool:
        _, live = await env.fed.member_objects("onprem-rdma-a100", uid)
        return len(live) == 10 and all(p["spec"].get("nodeName") for p in live)

    await wait_until(bound, what="all ten pods bound by volcano")


async def test_ethernet_job_goes_to_ethernet_when_the_rdma_cluster_is_busy(env: Env) -> None:
    # 8 workers x 8 GPUs fill both RDMA clusters' 32 A100 GPUs each (one of them with RDMA devices)
    await env.api.submit(gpu_job("fill-a", workers=4, gpus=8, network="rdma", rdma=True, models=["A100"]))
    await env.api.submit(gpu_job("fill-b", workers=4, gpus=8, network="rdma", rdma=True, models=["A100"]))
    first = await env.placed("team-a", "fill-a")
    second = await env.placed("team-a", "fill-b")
    assert {placement_of(first)["cluster"], placement_of(second)["cluster"]} == {
        "onprem-rdma-a100", "onprem-rdma-nodata"}
    # a job that runs on either fabric and either model now goes to the Ethernet H100 cluster
    created = await env.api.submit(gpu_job("either", workers=2, gpus=4, network="any", models=["A100", "H100"]))
    job = await env.placed("team-a", "either")
    assert placement_of(job)["cluster"] == "cloud-eth-h100"
    rows = {row["cluster"]: row for row in placement_of(job)["whyNot"]}
    assert rows["onprem-rdma-a100"]["filter"] == "gang-fit"
    where = await env.fed.where(created["metadata"]["uid"])
    assert list(where) == ["cloud-eth-h100"]
    groups, pods = where["cloud-eth-h100"]
    assert groups[0]["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" and groups[0]["spec"]["minMember"] == 2
    group_name = groups[0]["metadata"]["name"]
    assert len(pods) == 2
    for pod in pods:
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == group_name
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    # nothing was double-booked: the reservations of the three jobs are on distinct clusters' nodes
    book = reservations(env.hub.context).book
    clusters = [r.cluster for r in book]
    assert len(clusters) == len(set(clusters))


async def test_default_scheduler_cluster_gets_pods_only(env: Env) -> None:
    created = await env.api.submit(gpu_job("small", workers=2, gpus=2, models=["L4"]))
    job = await env.placed("team-a", "small")
    assert placement_of(job)["cluster"] == "cloud-small"
    where = await env.fed.where(created["metadata"]["uid"])
    groups, pods = where["cloud-small"]
    assert groups == [] and len(pods) == 2
    for pod in pods:
        _labels_ok(pod, job, 1)
        assert pod["spec"]["schedulerName"] == "default-scheduler"
        assert "ownerReferences" not in pod["metadata"]


async def test_a_gang_bigger_than_every_cluster_stays_pending_with_a_why_not_per_cluster(env: Env) -> None:
    await env.api.submit(gpu_job("giant", workers=100, gpus=8))
    job = await env.api.wait_job(
        "team-a", "giant", lambda j: (condition(j, "Schedulable") or {}).get("status") == "False",
        what="Schedulable=False")
    assert phase(job) == "Pending"
    cond = condition(job, "Schedulable")
    assert cond is not None and cond["reason"] == "TooLargeForAnyCluster", cond
    rows = placement_of(job)["whyNot"]
    assert sorted(row["cluster"] for row in rows) == sorted(env.fed.sims)
    assert all(row["reason"] and row["filter"] and row["message"] for row in rows)
    assert placement_of(job).get("cluster") is None
    assert await env.fed.where(job["metadata"]["uid"]) == {}

    # a gang that fits an empty cluster but not now says NoClusterFits, and is placed once room frees up
    await env.api.submit(gpu_job("hog", workers=4, gpus=8, models=["H100"]))
    await env.placed("team-a", "hog")
    await env.api.submit(gpu_job("waits", workers=2, gpus=8, models=["H100"]))
    waiting = await env.api.wait_job(
        "team-a", "waits", lambda j: (condition(j, "Schedulable") or {}).get("reason") == "NoClusterFits",
        what="NoClusterFits")
    assert phase(waiting) == "Pending"
    rows = {row["cluster"]: row for row in placement_of(waiting)["whyNot"]}
    assert rows["cloud-eth-h100"]["filter"] == "gang-fit"  # the only H100 cluster is full right now
    assert placement_of(waiting).get("cluster") is None
    assert await env.fed.where(waiting["metadata"]["uid"]) == {}


async def test_redispatch_is_idempotent(env: Env) -> None:
    created = await env.api.submit(gpu_job("again", workers=3, gpus=4, models=["H100"]))
    job = await env.placed("team-a", "again")
    cluster, epoch = placement_of(job)["cluster"], placement_of(job)["epoch"]
    before = await env.fed.where(created["metadata"]["uid"])
    names_before = sorted(p["metadata"]["uid"] for p in before[cluster][1])
    # the same decision dispatched again (as after a crash between the creates and the status write)
    result = await env.dispatcher.dispatch(job, cluster=cluster, epoch=epoch, decision_stored=True)
    assert result.ok and result.created == 0 and result.existing == 5  # PodGroup + Service + 3 pods
    # a dispatch that checks the store: the job is Placed (re-dispatched, nothing new) or already further on
    # (Admitted/Running: nothing to do, and nothing is undone)
    checked = await env.dispatcher.dispatch(job, cluster=cluster, epoch=epoch)
    assert (checked.ok and checked.created == 0) or (checked.outdated and not checked.ok)
    await env.dispatcher.recover()  # the start-up pass over Placed jobs
    after = await env.fed.where(created["metadata"]["uid"])
    assert list(after) == [cluster]
    assert sorted(p["metadata"]["uid"] for p in after[cluster][1]) == names_before
    assert len(after[cluster][0]) == 1
