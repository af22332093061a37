"""HA on REAL members (issue 25 item 3): two hub replicas (`federator up --clusters`, processes) on one etcd,
two real v1.36 members (e2e/kube/realfed.py). The leader is killed (SIGKILL) in the middle of a burst of
submissions (made through the follower, which serves the API throughout); the follower takes over and every
accepted job runs exactly once: 0 lost, 0 duplicated, as the members' admins see it (one PodGroup and
exactly its pods, of one epoch, in one member)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from federator.dev.kube import KubeBinaries
from federator.store.etcd_process import EtcdProcess

from ..e2e_support import wait_for
from .realfed import A, B, RealFederation, gang, ready, real_federation

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.etcd, pytest.mark.xdist_group("kube-ha"),
              pytest.mark.timeout(420, func_only=True)]

JOBS = 12  # of 2 one-GPU pods: 24 of the members' 32 GPUs
KILL_AFTER = 4


@pytest.fixture(scope="module")
def fed(kube_binaries: KubeBinaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealFederation]:
    work = tmp_path_factory.mktemp("kube-ha")
    with EtcdProcess(work / "hub-etcd", fsync=False) as etcd:
        with real_federation(work, kube_binaries, replicas=2,
                             hub_flags=("--store", etcd.url, "--leader-ttl", "3s")) as running:
            wait_for("both members Ready", lambda: all(ready(running, c) for c in (A, B)), timeout=120)
            yield running


def _leads(up: Any) -> bool:
    return any(r.get("event") == "hub leads" for r in list(up.logs))


def test_the_leader_killed_during_a_burst_into_real_members_loses_and_duplicates_nothing(
        fed: RealFederation) -> None:
    leader, follower = fed.ups
    wait_for("the first replica leads", lambda: _leads(leader), timeout=60)
    assert not _leads(follower)
    names = [f"burst-{i}" for i in range(JOBS)]
    accepted: list[str] = []
    killed = threading.Event()

    def submit() -> None:
        for i, name in enumerate(names):
            if i == KILL_AFTER:
                killed.wait(60)
            path = fed.work / f"{name}.yaml"
            path.write_text(yaml.safe_dump(gang(name, replicas=2, gpus=1)))
            follower.kubectl("apply", "-f", str(path))
            accepted.append(name)

    submitter = threading.Thread(target=submit, daemon=True)
    submitter.start()
    wait_for(f"{KILL_AFTER} jobs accepted", lambda: len(accepted) >= KILL_AFTER, timeout=120)
    leader.kill()  # SIGKILL, mid-burst: some of the first jobs are being placed and dispatched
    killed.set()
    at_kill = {j["metadata"]["name"]: (j.get("status") or {}).get("phase")
               for j in follower.json("get", "tj", "-n", "default")["items"]}
    print("phases when the leader was killed:", at_kill)
    submitter.join(300)
    assert accepted == names
    wait_for("the follower leads", lambda: _leads(follower), timeout=120)

    def all_running() -> list[dict[str, Any]] | None:
        jobs = {j["metadata"]["name"]: j for j in follower.json("get", "tj", "-n", "default")["items"]}
        ok = set(names) <= set(jobs) and all((jobs[n].get("status") or {}).get("phase") == "Running" for n in names)
        return [jobs[n] for n in names] if ok else None

    jobs = wait_for("every accepted job Running", all_running, timeout=300)
    for job in jobs:
        name = job["metadata"]["name"]
        cluster = job["status"]["placement"]["cluster"]
        epoch = str(job["status"]["placement"]["epoch"])
        where = {c: fed.hub_pods(c, name) for c in (A, B)}
        groups = {c: fed.member_json(c, "get", "podgroups.scheduling.k8s.io", "-n", "default", "-l",
                                     f"federator.dev/job-name={name}")["items"] for c in (A, B)}
        other = B if cluster == A else A
        assert where[other] == [] and groups[other] == [], (name, cluster)
        live = [p for p in where[cluster] if not p["metadata"].get("deletionTimestamp")]
        assert len(live) == 2 and len(groups[cluster]) == 1, (name, [p["metadata"]["name"] for p in live])
        assert {p["metadata"]["labels"].get("federator.dev/epoch") for p in live} == {epoch}, name
    print("placed:", {j["metadata"]["name"]: j["status"]["placement"]["cluster"] for j in jobs})
