"""The hub against faults of REAL members (issue 25 item 3): two real v1.36 members (e2e/kube/realfed.py: A
behind a TCP proxy the test cuts, B direct, fence agents direct to their API servers), the hub a process.

- a cut connection (the proxy closes every connection and refuses new ones for a while): the hub's
  reflectors resume from their resourceVersions, with no LIST, and see what changed meanwhile;
- the member's kube-apiserver restarted: the hub sees what changed after it, and re-lists only after a
  410 Gone (a real apiserver's watch cache starts again at the current revision, so a watch from before
  can be too old: that is the only case in which the hub LISTs);
- a real compaction of the member's etcd while the hub is cut off: the hub's next watch of pods gets 410
  Gone and it re-lists pods exactly once;
- failover: the proxy cut for good, the agent deletes the hub's gang in A through the real Lease, the
  gang runs again in B, and a poller of both members (admin, direct) never sees it running in both;
- `federator drill --fault partition` on the real member (the test cuts and restores the proxy when the
  drill says so): jobsLost 0, duplicates 0, maxConcurrentCopies 1;
- a lost node (kwok stops playing its kubelet): real NotReady, real taint eviction, the worker started again
  and not counted, as on the simulator.

What the hub saw is read through its public API (a MemberCluster's free GPUs count every bound pod of the
member, the hub's own or not) and its JSON log lines (the reflector's "listed" line per full LIST).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from federator.dev.kube import KubeBinaries

from ..e2e_support import ROOT, wait_for
from .realfed import A, B, UNMANAGED, CopyWatch, RealFederation, conditions, gang, ready, real_federation

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.xdist_group("kube-faults"),
              pytest.mark.timeout(420, func_only=True)]

#: a member out of contact this long is Lost (and the hub's Lease in it lasts as long)
GRACE = 30
#: member sync's reflectors: the hub's one watch per member kind (status sync follows them, issue 26)
FIRST_LISTS = {("clusters.reflector", "nodes"), ("clusters.reflector", "pods")}


@pytest.fixture(scope="module")
def fed(kube_binaries: KubeBinaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealFederation]:
    with real_federation(tmp_path_factory.mktemp("kube-faults"), kube_binaries,
                         hub_flags=("--cluster-loss-grace", f"{GRACE}s", "--lease-margin", "3s")) as running:
        wait_for("both members Ready", lambda: all(ready(running, c) for c in (A, B)), timeout=120)
        for cluster in (A, B):
            # member sync's reflectors listed once (status sync lists nothing: it follows their watches)
            wait_for(f"the first LISTs of {cluster}", lambda c=cluster: {  # type: ignore[misc]
                (r.get("component"), r.get("resource")) for r in running.listed(c)} >= FIRST_LISTS, timeout=60)
        yield running


def _free_gpus(fed: RealFederation, cluster: str) -> int:
    return int(fed.up.json("get", "mc", cluster)["status"]["capacity"]["freeGPUs"])


def _foreign_gpu_pod(fed: RealFederation, cluster: str, name: str) -> None:
    """A pod that is not the hub's, holding one GPU: the hub's snapshot counts it once it saw it."""
    overrides = json.dumps({"spec": {"containers": [{"name": "c", "image": "app:1", "resources": {
        "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}})
    fed.member_kubectl(cluster, "run", name, "-n", "default", "--image=app:1", "--restart=Always",
                       f"--overrides={overrides}")
    wait_for(f"{name} bound in {cluster}", lambda: bool(
        fed.member_json(cluster, "get", "pod", name, "-n", "default")["spec"].get("nodeName")), timeout=90)


def _interrupted(fed: RealFederation, cluster: str, since: int) -> bool:
    return any(r.get("event") == "member watch interrupted; retrying" and r.get("cluster") == cluster
               for r in list(fed.up.logs)[since:])


def test_a_cut_connection_resumes_every_watch_from_its_resource_version_without_a_list(
        fed: RealFederation) -> None:
    lists_before = len(fed.listed(A))
    free_before = _free_gpus(fed, A)
    mark = len(fed.up.logs)
    killed = fed.proxy.cut()
    try:
        assert killed >= 1  # the hub's open watches went with the cut
        wait_for("the hub's watch of A interrupted", lambda: _interrupted(fed, A, mark), timeout=60)
        _foreign_gpu_pod(fed, A, "while-cut")
    finally:
        fed.proxy.restore()
    wait_for("the hub saw the pod made while it was cut off", lambda: _free_gpus(fed, A) == free_before - 1,
             timeout=90)
    assert fed.listed(A)[lists_before:] == []
    fed.member_kubectl(A, "delete", "pod", "while-cut", "-n", "default", "--wait=true")
    wait_for("the hub saw it go", lambda: _free_gpus(fed, A) == free_before, timeout=90)
    assert fed.listed(A)[lists_before:] == []


def test_after_the_members_apiserver_restarts_the_hub_follows_and_lists_only_after_410(
        fed: RealFederation) -> None:
    member = fed.members[B]
    lists_before = len(fed.listed(B))
    free_before = _free_gpus(fed, B)
    mark = len(fed.up.logs)
    member.stop_component("kube-apiserver")
    try:
        wait_for("the hub's watch of B interrupted", lambda: _interrupted(fed, B, mark), timeout=60)
    finally:
        member.start_component("kube-apiserver")
    _foreign_gpu_pod(fed, B, "after-restart")
    wait_for("the hub saw the pod made after the restart", lambda: _free_gpus(fed, B) == free_before - 1,
             timeout=120)
    relists = fed.listed(B)[lists_before:]
    expired = [r for r in list(fed.up.logs)[mark:] if r.get("event") == "resourceVersion expired; re-listing"
               and r.get("cluster") == B]
    # A LIST only after a 410, never "initial" again, at most once per watch. (A real kube-apiserver's watch
    # cache starts at the current revision, and kwok's node Leases moved it while the hub's watches were
    # idle, so each of them gets "too old resource version" here: one LIST each.)
    assert all(r["reason"] == "expired" for r in relists), relists
    watches = [(r["component"], r["resource"]) for r in relists]
    assert len(set(watches)) == len(watches), watches
    assert set(watches) <= {(r["component"], r["resource"]) for r in expired}, (watches, expired)
    print(f"apiserver restart: {len(relists)} LIST(s), each after a 410: {watches}")
    fed.member_kubectl(B, "delete", "pod", "after-restart", "-n", "default", "--wait=true")
    wait_for("the hub saw it go", lambda: _free_gpus(fed, B) == free_before, timeout=90)


def test_a_real_etcd_compaction_while_the_hub_is_away_leads_to_exactly_one_relist_of_pods(
        fed: RealFederation) -> None:
    member = fed.members[A]
    lists_before = {res: len(fed.listed(A, res)) for res in ("nodes", "pods")}
    free_before = _free_gpus(fed, A)
    mark = len(fed.up.logs)
    fed.proxy.cut()
    try:
        wait_for("the hub's watch of A interrupted", lambda: _interrupted(fed, A, mark), timeout=60)
        _foreign_gpu_pod(fed, A, "before-compaction")
        revision = member.compact_etcd()
        assert revision > 0
    finally:
        fed.proxy.restore()
    wait_for("the hub saw the pod made before the compaction", lambda: _free_gpus(fed, A) == free_before - 1,
             timeout=120)
    # the one watch of pods (member sync's; status sync follows it) got the 410 once and listed once;
    # nodes' did not
    pods_lists = fed.listed(A, "pods")[lists_before["pods"]:]
    assert sorted((r["component"], r["reason"]) for r in pods_lists) == [
        ("clusters.reflector", "expired")], pods_lists
    assert fed.listed(A, "nodes")[lists_before["nodes"]:] == []  # nodes' watch cache still held its version
    expired = [r for r in list(fed.up.logs)[mark:] if r.get("event") == "resourceVersion expired; re-listing"
               and r.get("cluster") == A]
    assert sorted((r["component"], r["resource"]) for r in expired) == [("clusters.reflector", "pods")], expired
    assert all("too old" in r["error"] for r in expired), expired
    fed.member_kubectl(A, "delete", "pod", "before-compaction", "-n", "default", "--wait=true")
    wait_for("the hub saw it go", lambda: _free_gpus(fed, A) == free_before, timeout=90)
    assert len(fed.listed(A, "pods")) == lists_before["pods"] + 1


def test_a_cut_member_is_fenced_by_its_agent_and_the_gang_runs_again_elsewhere_never_twice(
        fed: RealFederation) -> None:
    fed.submit(gang("moving", replicas=2, gpus=4))

    def running_in(cluster: str) -> bool:
        job = fed.job("moving")
        status = job.get("status") or {}
        return status.get("phase") == "Running" and (status.get("placement") or {}).get("cluster") == cluster

    wait_for("the gang Running in A", lambda: running_in(A), timeout=120)
    assert len(fed.hub_pods(A, "moving")) == 2
    with CopyWatch(fed, "moving") as copies:
        wait_for("the poller saw A's copy", lambda: A in copies.seen_running, timeout=60)
        fed.proxy.cut()
        try:
            # the agent (direct to A's API server) deletes the hub's pods once the hub's Lease there expires
            wait_for("A's copy deleted by the fence agent", lambda: fed.hub_pods(A, "moving") == [],
                     timeout=GRACE + 120)
            wait_for("the gang Running in B", lambda: running_in(B), timeout=GRACE + 180)
            wait_for("the poller saw B's copy", lambda: B in copies.seen_running, timeout=60)
        finally:
            fed.proxy.restore()
        wait_for("A Ready again", lambda: ready(fed, A), timeout=120)
    assert copies.both == [], copies.both[:3]
    assert copies.samples >= 10, (copies.samples, copies.errors[:3])
    agent_log = fed.agents.log_path(A).read_text()
    assert "fenc" in agent_log.lower(), agent_log[-2000:]
    job = fed.job("moving")
    assert job["status"]["placement"]["cluster"] == B
    assert fed.hub_pods(A, "moving") == []
    history = [h["event"] for h in job["status"].get("history") or ()]
    print("history of moving:", history)
    fed.up.kubectl("delete", "tj", "moving", "-n", "default", "--timeout=90s", timeout=120)
    wait_for("the gang's pods gone from B", lambda: fed.hub_pods(B, "moving") == [], timeout=90)


def test_a_partition_drill_on_a_real_member_loses_nothing_and_runs_nothing_twice(fed: RealFederation) -> None:
    """`federator drill --fault partition` on a real member: the drill cannot inject the fault itself (it is
    not a simulator), so it says when to cut the hub off A and when to restore it; the test does both with the
    proxy on those lines. The drill reads A as its fence agent (straight to the API server) and B as the hub."""
    fed.submit(gang("drilled", replicas=2, gpus=4))
    wait_for("the gang Running in A", lambda: (fed.job("drilled").get("status") or {}).get("phase") == "Running"
             and fed.job("drilled")["status"]["placement"]["cluster"] == A, timeout=120)
    state = fed.work / "drill-state"
    (state / "sim").mkdir(parents=True, exist_ok=True)
    shutil.copy(fed.members[B].hub_kubeconfig, state / "sim" / f"{B}.kubeconfig")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    env.pop("KUBECONFIG", None)
    duration = GRACE + 40  # long enough for A to be Lost, fenced and its gang to run in B
    drill = subprocess.Popen(
        [sys.executable, "-m", "federator.cli", "drill", "--cluster", A, "--fault", "partition",
         "--duration", f"{duration}s", "--settle-timeout", "3m", "-o", "json", "--kubeconfig", str(fed.up.admin),
         "--state-dir", str(state), "--member-kubeconfig", str(fed.members[A].agent_kubeconfig)],
        env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    said: list[str] = []
    try:
        assert drill.stderr is not None
        for line in drill.stderr:
            said.append(line.rstrip("\n"))
            if "cut the hub off" in line and "NOW" in line:
                fed.proxy.cut()
            elif "are up: restore" in line:
                fed.proxy.restore()
        out, _ = drill.communicate(timeout=400)
    finally:
        fed.proxy.restore()
        if drill.poll() is None:
            drill.kill()
            drill.wait(30)
    assert drill.returncode == 0, said[-20:]
    assert any("cut the hub off" in s for s in said) and any("restore" in s for s in said), said
    report = json.loads(out)
    print("drill report:", json.dumps(report, indent=1))
    assert report["cluster"] == A and report["fault"] == "partition" and report["gangsAffected"] == 1, report
    assert report["jobsLost"] == 0 and report["duplicates"] == 0 and report["maxConcurrentCopies"] == 1, report
    assert report["runningAgainSeconds"] is not None, report  # the gang ran again (in B) during the drill
    (stored,) = [s.split()[0].split("/", 1)[1] for s in said if s.startswith("drillreport.") and "stored" in s]
    spec = fed.up.json("get", "dr", stored)["spec"]
    assert spec["mode"] == "real" and spec["gangsMoved"] == 1 and spec["unansweredReads"] == 0, spec
    job = fed.job("drilled")
    assert job["status"]["phase"] == "Running" and job["status"]["placement"]["cluster"] == B, job["status"]
    assert fed.hub_pods(A, "drilled") == []
    fed.up.kubectl("delete", "tj", "drilled", "-n", "default", "--timeout=90s", timeout=120)
    wait_for("the gang's pods gone from B", lambda: fed.hub_pods(B, "drilled") == [], timeout=90)


def test_a_lost_node_evicted_by_the_real_taint_manager_restarts_the_worker_without_counting(
        fed: RealFederation) -> None:
    """As tests/controllers/test_worker_restart.py on the simulator: a worker (restartPolicy OnFailure,
    backoffLimit 0) on a node that dies is started again, not counted. Here the node dies for real: kwok stops
    playing its kubelet (its Lease is no longer renewed), the node lifecycle controller marks it NotReady and
    taints it, the taint eviction controller evicts the worker (its toleration of the taint lasts 2 s), and
    the operator marks the dead node out-of-service, so that the pod garbage collector removes the pod that no
    kubelet will ever confirm gone."""
    body = gang("lost-node", replicas=2, gpus=4, restart="OnFailure", tolerations=[
        {"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}
        for t in ("unreachable", "not-ready")])
    body["spec"]["backoffLimit"] = 0
    fed.submit(body)

    def running_in_a() -> list[dict[str, Any]] | None:
        status = fed.job("lost-node").get("status") or {}
        pods = fed.hub_pods(A, "lost-node")
        ok = status.get("phase") == "Running" and (status.get("placement") or {}).get("cluster") == A and \
            len(pods) == 2 and all((p.get("status") or {}).get("phase") == "Running" for p in pods)
        return pods if ok else None

    pods = wait_for("the gang Running in A", running_in_a, timeout=120)
    victim = next(p for p in pods if p["metadata"]["labels"].get("federator.dev/index") == "1")
    node = victim["spec"]["nodeName"]
    fed.member_kubectl(A, "label", "node", node, f"{UNMANAGED}=true")
    try:
        def not_ready() -> bool:
            found = conditions(fed.member_json(A, "get", "node", node))
            return found.get("Ready", {}).get("status") != "True"

        wait_for(f"node {node} NotReady (real node lifecycle controller)", not_ready, timeout=120)

        def evicted() -> dict[str, Any] | None:
            found = fed.member_json(A, "get", "pod", victim["metadata"]["name"], "-n", "default")
            disrupted = conditions(found).get("DisruptionTarget", {})
            return found if disrupted.get("status") == "True" and found["metadata"]["uid"] == \
                victim["metadata"]["uid"] else None

        pod = wait_for("the worker evicted by the taint eviction controller", evicted, timeout=120)
        assert conditions(pod)["DisruptionTarget"]["reason"] == "DeletionByTaintManager", pod["status"]
        # nothing plays this node's kubelet: the operator says it is gone for good
        fed.member_kubectl(A, "taint", "node", node, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")

        def restarted() -> list[dict[str, Any]] | None:
            status = fed.job("lost-node").get("status") or {}
            pods = fed.hub_pods(A, "lost-node")
            back = [p for p in pods if p["metadata"]["name"] == victim["metadata"]["name"]
                    and p["metadata"]["uid"] != victim["metadata"]["uid"]
                    and (p.get("status") or {}).get("phase") == "Running"]
            restarts = [h for h in status.get("history") or () if h.get("event") == "PodRestarted"]
            return restarts if back and restarts else None

        (entry,) = wait_for("the worker running again in A, the restart in the history", restarted, timeout=180)
        print("PodRestarted:", entry)
        # the simulator fails the pod (NodeLost) and the hub says "not counted"; a real member evicts and
        # removes it, and the hub creates the missing pod again, counting nothing either way
        assert victim["metadata"]["name"] in entry["message"], entry
        assert "0 of spec.backoffLimit 0 failures counted" in entry["message"], entry
        job = fed.job("lost-node")
        assert job["status"]["phase"] == "Running" and job["status"]["placement"]["cluster"] == A
        assert all(p["spec"]["nodeName"] != node for p in fed.hub_pods(A, "lost-node"))
    finally:
        fed.member_kubectl(A, "label", "node", node, f"{UNMANAGED}-", check=False)
        fed.member_kubectl(A, "taint", "node", node, "node.kubernetes.io/out-of-service-", check=False)
    fed.up.kubectl("delete", "tj", "lost-node", "-n", "default", "--timeout=90s", timeout=120)
