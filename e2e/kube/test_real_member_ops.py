"""Operations on REAL members (issue 25 item 3, "drain, an elastic grow and shrink, a preemption, each once"):
the hub a process on two real v1.36 members (e2e/kube/realfed.py; nothing is cut here).

- `federator cluster drain kube-a`: every gang of A moves to B whole, one at a time, and a poller of both
  members never sees a job running in both; uncordon ends the drain;
- a preemption that shrinks an elastic gang: a higher-priority job that needs room in A shrinks a
  lower-priority elastic gang there toward its minimum (its highest indices deleted by the real member)
  instead of evicting it; once that job is gone the grow pass grows the gang back after its cooldown.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from federator.dev.kube import KubeBinaries

from ..e2e_support import ROOT, wait_for
from .realfed import A, B, CopyWatch, RealFederation, gang, ready, real_federation

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.xdist_group("kube-ops"),
              pytest.mark.timeout(420, func_only=True)]


@pytest.fixture(scope="module")
def fed(kube_binaries: KubeBinaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealFederation]:
    with real_federation(tmp_path_factory.mktemp("kube-ops"), kube_binaries) as running:
        wait_for("both members Ready", lambda: all(ready(running, c) for c in (A, B)), timeout=120)
        yield running


def _federator(fed: RealFederation, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT), "KUBECONFIG": str(fed.up.admin)}
    return subprocess.run([sys.executable, "-m", "federator.cli", *args],
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _running_in(fed: RealFederation, name: str, cluster: str) -> bool:
    status = fed.job(name).get("status") or {}
    return status.get("phase") == "Running" and (status.get("placement") or {}).get("cluster") == cluster


def _history(job: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [h for h in (job.get("status") or {}).get("history") or () if h.get("event") == event]


def test_a_drain_moves_every_gang_of_a_real_member_whole_and_never_runs_two_copies(fed: RealFederation) -> None:
    names = ["drain-1", "drain-2"]
    for name in names:
        fed.submit(gang(name, replicas=2, gpus=4))
    for name in names:
        wait_for(f"{name} Running in A", lambda n=name: _running_in(fed, n, A), timeout=120)  # type: ignore[misc]
    watches = [CopyWatch(fed, name) for name in names]
    for watch in watches:
        watch.__enter__()
    try:
        for watch in watches:
            wait_for("the poller saw A's copy", lambda w=watch: A in w.seen_running, timeout=60)  # type: ignore[misc]
        done = _federator(fed, "cluster", "drain", A, "--max-concurrent", "1", "--timeout", "4m", timeout=330)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert f"drained {A}: 2 gangs moved" in done.stdout, (done.stdout, done.stderr)
        for name in names:
            wait_for(f"{name} Running in B", lambda n=name: _running_in(fed, n, B), timeout=120)  # type: ignore[misc]
        for watch in watches:
            wait_for("the poller saw B's copy", lambda w=watch: B in w.seen_running, timeout=60)  # type: ignore[misc]
    finally:
        for watch in watches:
            watch.__exit__()
    for watch in watches:
        assert watch.both == [], (watch.job, watch.both[:3])
        assert watch.samples >= 5, (watch.samples, watch.errors[:3])
    for name in names:
        job = fed.job(name)
        (drained,) = _history(job, "Drained")
        assert drained["cluster"] == A
        assert job["status"]["placement"]["previous"]["cluster"] == A
        assert fed.hub_pods(A, name) == []
    mc = fed.up.json("get", "mc", A)
    assert mc["spec"]["cordoned"] is True and mc["status"]["drain"]["phase"] == "Complete"
    undone = _federator(fed, "cluster", "uncordon", A)
    assert undone.returncode == 0, undone.stderr
    for name in names:
        fed.up.kubectl("delete", "tj", name, "-n", "default", "--timeout=90s", timeout=120)
        wait_for(f"{name}'s pods gone from B", lambda n=name: fed.hub_pods(B, n) == [], timeout=90)  # type: ignore[misc]


def _in_a(body: dict[str, Any], *, priority: int) -> dict[str, Any]:
    body["spec"]["placement"]["clusterSelector"] = {"matchLabels": {"member": A}}
    body["spec"]["priority"] = priority
    body["spec"]["queue"] = "research"
    return body


def _indices(fed: RealFederation, name: str) -> list[int] | None:
    pods = fed.hub_pods(A, name)
    if any((p.get("status") or {}).get("phase") != "Running" or p["metadata"].get("deletionTimestamp")
           for p in pods):
        return None
    return sorted(int(p["metadata"]["labels"]["federator.dev/index"]) for p in pods)


def test_a_preemption_shrinks_an_elastic_gang_on_a_real_member_which_grows_back_after(fed: RealFederation) -> None:
    queue = fed.work / "queue.yaml"
    queue.write_text(
        "apiVersion: federator.dev/v1alpha1\nkind: Queue\nmetadata: {name: research}\n"
        "spec: {namespaces: {names: [default]}, quota: {gpus: {A100: 64}},\n"
        "       preemption: {withinQueue: LowerPriority, reclaimBorrowed: true}}\n")
    fed.up.kubectl("apply", "-f", str(queue))
    flex = _in_a(gang("flex", replicas=1, gpus=4), priority=1)
    flex["spec"]["roles"][0].update(minReplicas=1, maxReplicas=3)
    fed.submit(flex)
    wait_for("flex Running in A", lambda: _running_in(fed, "flex", A), timeout=120)
    assert fed.job("flex")["status"]["replicas"] == {"worker": 3}  # 12 of A's 16 GPUs
    wait_for("flex's 3 workers running in A", lambda: _indices(fed, "flex") == [0, 1, 2], timeout=120)

    fed.submit(_in_a(gang("urgent", replicas=2, gpus=4), priority=10))
    wait_for("urgent Running in A", lambda: _running_in(fed, "urgent", A), timeout=180)
    shrunk = wait_for("flex resized", lambda: (lambda j: j if _history(j, "Resized") else None)(fed.job("flex")),
                      timeout=120)
    (resized,) = _history(shrunk, "Resized")
    # urgent needs 8 GPUs and 4 are free: one worker of flex (4 GPUs) goes, the other two keep running
    assert resized["from"] == {"worker": 3} and resized["to"] == {"worker": 2}, resized
    assert resized["reason"] == "Preempted" and "room for default/urgent" in resized["message"], resized
    assert shrunk["status"]["phase"] == "Running" and not _history(shrunk, "Preempted")
    wait_for("flex down to workers 0 and 1 on the member", lambda: _indices(fed, "flex") == [0, 1], timeout=120)

    fed.up.kubectl("delete", "tj", "urgent", "-n", "default", "--timeout=90s", timeout=120)
    # the grow pass waits out the gang's cooldown (60 s by default) from its last resize
    grown = wait_for("flex grown back", lambda: (lambda j: j if len(_history(j, "Resized")) == 2 else None)(
        fed.job("flex")), timeout=240)
    last = _history(grown, "Resized")[-1]
    assert (last["from"], last["to"], last["reason"]) == ({"worker": 2}, {"worker": 3}, "Grown"), last
    wait_for("flex's 3 workers running again in A", lambda: _indices(fed, "flex") == [0, 1, 2], timeout=120)
    fed.up.kubectl("delete", "tj", "flex", "-n", "default", "--timeout=90s", timeout=120)
