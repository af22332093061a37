"""The hub against REAL Kubernetes members (issue 25): `federator up --members kube` as a process, with three
real v1.36 members started by federator/dev/kube.py (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok nodes from simulator profiles), each with deploy/member's RBAC applied by kubectl and
registered with the kubeconfig of exactly that identity:

- cloud-native-gang: kube-scheduler's own gang scheduling (scheduling.k8s.io/v1alpha2 PodGroup), A100;
- cloud-small: the default scheduler only, L4;
- native-tight (written here): native gang scheduling on two H100 nodes that hold two pods each (maxPods 2),
  which the hub does not model, so a 5-pod gang fits in the hub's eyes and not in the member's.

The hub keeps its store in an etcd of its own, so that a test can read the hub's snapshots (the checkpoints
its member sync writes) beside it. What the members refused is read from their audit logs (the hub's and
the agent's identities, every response code; federator.dev.kube.forbidden_requests).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.apis.quantity import parse_bytes, parse_count, parse_millicores
from federator.clusters.checkpoint import load_checkpoints
from federator.dev.kube import HUB_USER, KubeBinaries, forbidden_requests
from federator.store.etcd_process import EtcdProcess
from federator.store.open import open_store

from ..e2e_support import ROOT, FederatorUp, kubectl, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.etcd, pytest.mark.xdist_group("kube-hub"),
              pytest.mark.timeout(240, func_only=True)]

NATIVE, SMALL, TIGHT = "cloud-native-gang", "cloud-small", "native-tight"
#: a training pod runs this long on a member (kwok's pod-complete stage), then succeeds
RUN_SECONDS = "6"
TIGHT_PROFILE = """\
apiVersion: sim.federator.dev/v1alpha1
kind: ClusterProfile
name: native-tight
description: Two H100 nodes that hold two pods each, Kubernetes' own gang scheduling
labels: {tier: tight}
location: {type: cloud, provider: gcp, region: us-central1}
network: {fabric: ethernet, bandwidthGbps: 100}
schedulers: [{type: native}]
kubelet: {startDelaySeconds: 1}
costPerGpuHour: 9.0
nodePools:
  - {name: h100, count: 2, cpu: "96", memory: 1000Gi, gpus: 8, gpuProduct: NVIDIA-H100-80GB-HBM3, maxPods: 2}
"""


class Federation:
    """`federator up --members kube` and what the tests read beside it."""

    def __init__(self, up: FederatorUp, store_url: str) -> None:
        self.up = up
        self.store_url = store_url
        self.kube = up.state / "kube"

    def admin(self, cluster: str) -> Path:
        return self.kube / f"{cluster}-admin.kubeconfig"

    def member(self, cluster: str, *args: str, check: bool = True) -> Any:
        """kubectl ... -o json as the member's admin."""
        done = kubectl(*args, "-o", "json", kubeconfig=self.admin(cluster), cache=self.up.workdir / "kc",
                       check=check)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def member_run(self, cluster: str, *args: str, stdin: str | None = None) -> None:
        import subprocess

        done = subprocess.run(["kubectl", "--kubeconfig", str(self.admin(cluster)), *args], input=stdin,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    def forbidden(self, cluster: str) -> list[Any]:
        return forbidden_requests(self.kube / cluster / "audit.log")

    def job(self, name: str) -> dict[str, Any]:
        loaded = self.up.json("get", "tj", name, "-n", "default")
        assert isinstance(loaded, dict)
        return loaded

    def submit(self, manifest: str) -> None:
        path = self.up.workdir / "job.yaml"
        path.write_text(manifest)
        self.up.kubectl("apply", "-f", str(path))

    def job_objects(self, cluster: str, job: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(pods, PodGroups) the hub made for `job` in `cluster`, as the member shows them."""
        selector = f"federator.dev/job-name={job}"
        pods = self.member(cluster, "get", "pods", "-n", "default", "-l", selector)["items"]
        groups = self.member(cluster, "get", "podgroups.scheduling.k8s.io", "-n", "default", "-l", selector)
        return pods, (groups or {"items": []})["items"]

    def snapshot(self, cluster: str) -> tuple[dict[str, list[Any]], dict[str, list[Any]]] | None:
        """(nodes by name, pods by key) of the hub's stored snapshot of `cluster` (checkpoint rows)."""
        async def read() -> Any:
            store = await open_store(self.store_url)
            try:
                return await load_checkpoints(store)
            finally:
                await store.close()

        checkpoint = asyncio.run(read()).get(cluster)
        if checkpoint is None:
            return None
        nodes = {row[0]: row for shard in checkpoint.shards.values() for row in shard.get("nodes", ())}
        pods = {row[0]: row for shard in checkpoint.shards.values() for row in shard.get("pods", ())}
        return nodes, pods


@pytest.fixture(scope="module")
def fed(kube_binaries: KubeBinaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    work = tmp_path_factory.mktemp("kube-hub")
    tight = work / "native-tight.yaml"
    tight.write_text(TIGHT_PROFILE)
    profiles = ROOT / "clusterconfigs" / "sim"
    with EtcdProcess(work / "hub-etcd", fsync=False) as etcd:
        up = FederatorUp(work, "--members", "kube", "--sim-run-seconds", RUN_SECONDS, "--store", etcd.url,
                         "--sim-profile", str(profiles / f"{NATIVE}.yaml"),
                         "--sim-profile", str(profiles / f"{SMALL}.yaml"), "--sim-profile", str(tight))
        try:
            up.start(timeout=300)
            yield Federation(up, etcd.url)
        finally:
            code = up.stop()
            assert code == 0, up.other_stderr[-20:]


def _gang(name: str, *, replicas: int, gpus: int, model: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"roles": [{"name": "worker", "replicas": replicas, "template": {
            "image": "trainer:1.4", "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": gpus}}}],
            "placement": {"network": "ethernet", "gpuModels": [model]}},
    })


def _phase(fed: Federation, name: str) -> str:
    return str((fed.job(name).get("status") or {}).get("phase"))


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


def test_every_real_member_is_registered_ready_with_the_hub_identity(fed: Federation) -> None:
    def ready() -> dict[str, Any] | None:
        found = {mc["metadata"]["name"]: mc for mc in fed.up.json("get", "mc")["items"]}
        ok = set(found) == {NATIVE, SMALL, TIGHT} and all(
            _conditions(mc).get("Ready", {}).get("status") == "True" for mc in found.values())
        return found if ok else None

    found = wait_for("three real members Ready", ready, timeout=60)
    assert found[NATIVE]["spec"]["scheduler"]["name"] == "native"
    assert found[SMALL]["spec"]["scheduler"]["name"] == "default"
    for cluster in found:
        kubeconfig = yaml.safe_load((fed.kube / f"{cluster}.kubeconfig").read_text())
        assert found[cluster]["spec"]["connection"]["kubeconfigPath"] == str(fed.kube / f"{cluster}.kubeconfig")
        # the hub's identity is the ServiceAccount deploy/member binds, not an admin
        who = kubectl("auth", "whoami", "-o", "json", kubeconfig=fed.kube / f"{cluster}.kubeconfig",
                      cache=fed.up.workdir / "kc")
        assert json.loads(who.stdout)["status"]["userInfo"]["username"] == HUB_USER
        assert "token" in kubeconfig["users"][0]["user"]


def test_the_hubs_snapshot_equals_kubectl_on_the_member(fed: Federation) -> None:
    """Nodes (names, allocatable, labels, readiness) and bound pods (everyone's, with their requests) of the
    hub's stored snapshot equal what kubectl shows; the MemberCluster's free GPUs count foreign pods."""
    for name in ("other-a", "other-b"):
        overrides = json.dumps({"spec": {"containers": [{"name": "c", "image": "app:1", "resources": {
            "requests": {"cpu": "1500m", "memory": "3Gi", "nvidia.com/gpu": "1"},
            "limits": {"nvidia.com/gpu": "1"}}}]}})
        fed.member_run(SMALL, "run", name, "-n", "default", "--image=app:1", "--restart=Always",
                       f"--overrides={overrides}")

    def expected() -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        nodes: dict[str, list[Any]] = {}
        for node in fed.member(SMALL, "get", "nodes")["items"]:
            a = node["status"]["allocatable"]
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
            nodes[node["metadata"]["name"]] = [parse_millicores(a["cpu"]), parse_bytes(a["memory"]),
                                               parse_count(a.get("nvidia.com/gpu", "0")), ready,
                                               node["metadata"]["labels"]]
        pods: dict[str, list[Any]] = {}
        for pod in fed.member(SMALL, "get", "pods", "-A")["items"]:
            if not pod["spec"].get("nodeName") or pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            requests = pod["spec"]["containers"][0].get("resources", {}).get("requests", {})
            pods[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"] = [
                pod["spec"]["nodeName"], parse_millicores(requests.get("cpu", "0")),
                parse_bytes(requests.get("memory", "0")), parse_count(requests.get("nvidia.com/gpu", "0"))]
        return nodes, pods

    def hub_view() -> tuple[dict[str, list[Any]], dict[str, list[Any]]] | None:
        snap = fed.snapshot(SMALL)
        if snap is None:
            return None
        nodes, pods = snap
        return ({n: [r[2], r[3], r[4], bool(r[7]), r[10]] for n, r in nodes.items()},
                {k: [r[2], r[3], r[4], r[5]] for k, r in pods.items()})

    def equal() -> tuple[Any, Any] | None:
        want = expected()
        seen = hub_view()
        return (want, seen) if seen == want and len(want[1]) >= 2 else None

    try:
        want, _ = wait_for("the hub's snapshot of cloud-small equals kubectl", equal, timeout=60)
        assert {"default/other-a", "default/other-b"} <= set(want[1])
        assert all(p[3] == 1 for k, p in want[1].items() if k.startswith("default/other-"))

        def free_gpus() -> int | None:
            mc = fed.up.json("get", "mc", SMALL)
            capacity = mc["status"]["capacity"]
            return capacity["freeGPUs"] if capacity["freeGPUs"] == capacity["totalGPUs"] - 2 else None

        wait_for("the MemberCluster counts the two foreign GPU pods", free_gpus, timeout=30)
    finally:
        fed.member_run(SMALL, "delete", "pod", "other-a", "other-b", "-n", "default", "--wait=true")


def test_a_native_gang_is_scheduled_whole_by_kube_scheduler_runs_and_succeeds(fed: Federation) -> None:
    fed.submit(_gang("native-ok", replicas=3, gpus=4, model="A100"))

    def scheduled() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        pods, groups = fed.job_objects(NATIVE, "native-ok")
        if len(groups) == 1 and len(pods) == 3 and \
                _conditions(groups[0]).get("PodGroupScheduled", {}).get("status") == "True":
            return pods, groups
        return None

    pods, groups = wait_for("the member's PodGroupScheduled=True", scheduled, timeout=90)
    (group,) = groups
    assert group["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3
    assert _conditions(group)["PodGroupScheduled"]["reason"] == "Scheduled"
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {group["metadata"]["name"]}
    assert fed.job("native-ok")["status"]["placement"]["cluster"] == NATIVE

    def all_bound() -> list[dict[str, Any]] | None:
        found, _ = fed.job_objects(NATIVE, "native-ok")
        return found if len(found) == 3 and all(p["spec"].get("nodeName") for p in found) else None

    bound = wait_for("every pod bound", all_bound, timeout=60)
    assert all(p["spec"]["nodeName"].startswith("a100-") for p in bound)
    phases: list[str] = []

    def succeeded() -> bool:
        phase = _phase(fed, "native-ok")
        if not phases or phases[-1] != phase:
            phases.append(phase)
        return phase == "Succeeded"

    wait_for("the hub's TrainingJob Succeeded", succeeded, timeout=90)
    history = [h["event"] for h in fed.job("native-ok")["status"].get("history") or ()]
    assert "Running" in history and history.index("Admitted") < history.index("Running"), history
    fed.up.kubectl("delete", "tj", "native-ok", "-n", "default", "--timeout=60s", timeout=90)


def test_a_gang_that_does_not_fit_the_member_waits_whole_with_the_members_reason(fed: Federation) -> None:
    """5 one-GPU pods on two 8-GPU nodes that hold 2 pods each: the hub (which counts GPUs, not pod slots)
    places it; kube-scheduler's gang scheduling binds none and says why, and the hub's status says so."""
    fed.submit(_gang("too-many", replicas=5, gpus=1, model="H100"))

    def unschedulable() -> dict[str, Any] | None:
        pods, groups = fed.job_objects(TIGHT, "too-many")
        if len(groups) != 1 or len(pods) != 5:
            return None
        condition = _conditions(groups[0]).get("PodGroupScheduled", {})
        return condition if condition.get("status") == "False" else None

    condition = wait_for("PodGroupScheduled=False on the member", unschedulable, timeout=90)
    assert condition["reason"] == "Unschedulable", condition
    # kube-scheduler v1.36 says only this on the group; the rejected pod carries the FitError
    assert condition["message"] == "pod group is unschedulable", condition

    def rejected() -> list[str] | None:
        pods, _ = fed.job_objects(TIGHT, "too-many")
        found = [c["message"] for p in pods for c in p["status"].get("conditions") or ()
                 if c["type"] == "PodScheduled" and c["status"] == "False" and "Too many pods" in c["message"]]
        return found or None

    wait_for("a pod rejected for Too many pods", rejected, timeout=60)
    pods, _ = fed.job_objects(TIGHT, "too-many")
    assert [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")] == []

    def hub_says_why() -> str | None:
        status = fed.job("too-many").get("status") or {}
        text = json.dumps(status)
        return text if "Too many pods" in text else None

    wait_for("the member's reason in the hub's status", hub_says_why, timeout=60)
    admitted = _conditions(fed.job("too-many"))["Admitted"]
    assert admitted["status"] == "False" and admitted["reason"] == "Unschedulable", admitted
    assert "pod group is unschedulable (pod too-many-" in admitted["message"], admitted
    assert _phase(fed, "too-many") == "Placed"
    pods, _ = fed.job_objects(TIGHT, "too-many")
    assert [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")] == []
    fed.up.kubectl("delete", "tj", "too-many", "-n", "default", "--timeout=60s", timeout=90)
    wait_for("the waiting gang's pods and PodGroup gone", lambda: fed.job_objects(TIGHT, "too-many") == ([], []),
             timeout=60)


def test_deleting_a_job_removes_its_member_pods_and_podgroup(fed: Federation) -> None:
    fed.submit(_gang("to-delete", replicas=2, gpus=8, model="A100"))
    wait_for("member pods Running", lambda: (lambda pods: len(pods) == 2 and all(
        p["status"].get("phase") in ("Running", "Succeeded") for p in pods))(fed.job_objects(NATIVE, "to-delete")[0]),
        timeout=90)
    pods, groups = fed.job_objects(NATIVE, "to-delete")
    (group,) = groups
    # the pods are the PodGroup's dependents: kube's garbage collector deletes them with it
    assert all(ref["uid"] == group["metadata"]["uid"] for p in pods for ref in p["metadata"]["ownerReferences"])
    fed.up.kubectl("delete", "tj", "to-delete", "-n", "default", "--timeout=60s", timeout=90)
    wait_for("pods and PodGroup gone from the member", lambda: fed.job_objects(NATIVE, "to-delete") == ([], []),
             timeout=60)


def test_no_request_of_the_hub_or_agent_was_forbidden(fed: Federation) -> None:
    """After the jobs above (submit, Running, Succeeded, a waiting gang, deletes): 0 forbidden requests."""
    for cluster in (NATIVE, SMALL, TIGHT):
        assert (fed.kube / cluster / "audit.log").stat().st_size > 0
        assert fed.forbidden(cluster) == [], cluster


def test_with_one_rule_of_deploy_member_removed_the_member_forbids_and_the_job_does_not_run(
        fed: Federation) -> None:
    """deploy/member's native overlay without `create podgroups` in the default namespace's Role: the hub's
    dispatch is refused (the audit log shows the 403), no pod is made, and the job says why. Put back, it runs."""
    role = fed.member(NATIVE, "get", "role", "federator-hub-dispatch", "-n", "default")
    kept = [r for r in role["rules"] if not ("podgroups" in r.get("resources", ()) and "create" in r.get("verbs", ()))]
    assert len(kept) == len(role["rules"]) - 1, role["rules"]
    broken = {**role, "rules": kept}
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        broken["metadata"].pop(key, None)
    fed.member_run(NATIVE, "replace", "-f", "-", stdin=json.dumps(broken))
    try:
        before = len(fed.forbidden(NATIVE))
        fed.submit(_gang("no-rbac", replicas=1, gpus=1, model="A100"))

        def refused() -> list[Any] | None:
            new = fed.forbidden(NATIVE)[before:]
            return new if any(f.verb == "create" and f.resource == "scheduling.k8s.io/podgroups"
                              and f.user == HUB_USER for f in new) else None

        wait_for("the member refuses the hub's PodGroup create", refused, timeout=60)
        wait_for("the job's status names the refusal",
                 lambda: "forbidden" in json.dumps(fed.job("no-rbac").get("status") or {}).lower(), timeout=60)
        assert fed.job_objects(NATIVE, "no-rbac")[0] == []
        assert _phase(fed, "no-rbac") not in ("Running", "Succeeded")
    finally:
        rendered = kubectl("kustomize", str(ROOT / "deploy" / "member" / "schedulers" / "native"),
                           kubeconfig=fed.admin(NATIVE), cache=fed.up.workdir / "kc").stdout
        fed.member_run(NATIVE, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=rendered)
    fed.up.kubectl("delete", "tj", "no-rbac", "-n", "default", "--timeout=60s", timeout=90)
