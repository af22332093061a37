"""End to end: `federator up` (the README's main job) as a real process, in development mode with its
simulated member clusters, driven only through the hub's public endpoint and the kubeconfigs it writes.

- it serves the hub, registers the simulated clusters of clusterconfigs/sim (RDMA A100 with Volcano and
  the dataset, Ethernet H100 with coscheduling, a small Ethernet cluster with the default scheduler, ...),
  writes every kubeconfig and says what to do next;
- the design.md example, applied with kubectl, lands whole in the RDMA cluster that holds its dataset,
  runs and succeeds (watched with `kubectl get tj -w`); deleting it cleans the member cluster first;
- gangs land in the shipped Kubernetes-native and KAI clusters, whose kubectl shows their own PodGroups;
- Ctrl-C stops the hub and the clusters cleanly; bad development flags give one line and change nothing.

Kind clusters instead of simulated ones: e2e/test_kind.py (FEDERATOR_E2E_KIND=1).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from .e2e_support import EXAMPLE, ROOT, FederatorUp, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

RDMA, ETH, SMALL = "onprem-rdma-a100", "cloud-eth-h100", "cloud-small"
#: a simulated training pod runs this long, then succeeds
RUN_SECONDS = "3"
#: how many simulated clusters `federator up` starts by default (one per profile in clusterconfigs/sim)
SHIPPED_PROFILES = len(list((ROOT / "clusterconfigs" / "sim").glob("*.yaml")))


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FederatorUp]:
    running = FederatorUp(tmp_path_factory.mktemp("e2e-up"), "--sim-run-seconds", RUN_SECONDS)
    try:
        running.start()
        yield running
    finally:
        code = running.stop()
        assert code == 0, running.other_stderr[-20:]


def _conditions(obj: dict[str, object]) -> dict[str, str]:
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return {c["type"]: c["status"] for c in conditions or ()}


def test_up_serves_the_hub_registers_the_simulated_clusters_and_says_what_next(up: FederatorUp) -> None:
    def all_ready() -> dict[str, dict[str, object]] | None:
        listing = up.json("get", "mc")
        found = {mc["metadata"]["name"]: mc for mc in listing["items"]}
        ready = all(_conditions(mc).get("Ready") == "True" for mc in found.values())
        return found if ready and {RDMA, ETH, SMALL} <= set(found) else None

    clusters = wait_for("every simulated cluster Ready", all_ready)
    rdma, eth, small = clusters[RDMA]["spec"], clusters[ETH]["spec"], clusters[SMALL]["spec"]
    assert isinstance(rdma, dict) and isinstance(eth, dict) and isinstance(small, dict)
    assert rdma["network"]["type"] == "rdma" and rdma["network"]["rdmaKind"] == "infiniband"
    assert rdma["scheduler"]["name"] == "volcano" and rdma["location"]["type"] == "onPrem"
    assert "imagenet-22k" in {d["name"] for d in rdma["datasets"]} and rdma["gpuModels"] == ["A100"]
    assert eth["network"]["type"] == "ethernet" and eth["scheduler"]["name"] == "coscheduling"
    assert eth["location"]["type"] == "cloud" and eth["gpuModels"] == ["H100"]
    assert small["scheduler"]["name"] == "default" and small["network"]["type"] == "ethernet"
    # the registrations are files a person can read; they point at the member kubeconfigs
    registration = yaml.safe_load((up.state / "sim" / "registrations" / f"{RDMA}.yaml").read_text())
    assert Path(registration["spec"]["connection"]["kubeconfigPath"]) == up.member(RDMA).resolve()
    # each member kubeconfig works with kubectl
    nodes = up.json("get", "nodes", kubeconfig=up.member(RDMA))
    assert len(nodes["items"]) == 80
    # what to do next, on stdout; no member token anywhere in the output
    out = "\n".join(up.stdout)
    assert f"{RDMA}" in out and "volcano" in out and str(up.member(RDMA).relative_to(up.workdir)) in out
    assert "-f" in out and "examples/resnet-ps.yaml" in out and "federator submit" in out
    assert "get tj -A -w" in out and "admin.kubeconfig" in out
    logs = "\n".join(str(record) for record in up.logs) + "\n".join(up.other_stderr)
    for name in (RDMA, ETH, SMALL):
        token = yaml.safe_load(up.member(name).read_text())["users"][0]["user"]["token"]
        assert token not in out and token not in logs


def test_the_design_example_lands_in_the_rdma_cluster_runs_succeeds_and_deletion_cleans(up: FederatorUp) -> None:
    cache = up.workdir / "kubectl-cache-watch"
    watch = subprocess.Popen(
        ["kubectl", "--kubeconfig", str(up.admin), "--cache-dir", str(cache), "get", "tj", "-A", "-w",
         "-o", 'jsonpath={.metadata.name}{","}{.status.phase}{","}{.status.placement.cluster}{"\\n"}'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    done = threading.Event()

    def follow() -> None:
        assert watch.stdout is not None
        for line in watch.stdout:
            seen.append(line.strip())
            if line.startswith("resnet-ps,Succeeded,"):
                done.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        applied = up.kubectl("apply", "-f", str(EXAMPLE))
        assert "trainingjob.federator.dev/resnet-ps created" in applied.stdout
        assert done.wait(90), f"the watch never showed resnet-ps Succeeded; it showed {seen}"
    finally:
        watch.terminate()
        watch.wait(10)
        reader.join(10)
        for stream in (watch.stdout, watch.stderr):
            if stream is not None:
                stream.close()
    # The watch shows the phases in order, never going back (which ones it shows depends on when its
    # first list lands and on status sync's batching; the history below has every step).
    order = ["Pending", "Placed", "Admitted", "Running", "Succeeded"]
    phases = [line.split(",")[1] for line in seen if line.startswith("resnet-ps,") and line.split(",")[1]]
    ranks = [order.index(p) for p in phases]
    assert ranks == sorted(ranks) and phases[-1] == "Succeeded", seen
    assert all(line.endswith(f",{RDMA}") for line in seen if line.split(",")[1:2] in (["Admitted"], ["Running"],
                                                                                     ["Succeeded"])), seen

    job = up.json("get", "tj", "resnet-ps", "-n", "vision")
    steps = [h["event"] for h in job["status"]["history"]]
    assert [e for e in steps if e in order] == order[1:], steps
    assert job["status"]["placement"]["cluster"] == RDMA
    assert job["status"]["podCounts"]["worker"]["succeeded"] == 8
    assert job["status"]["podCounts"]["ps"]["succeeded"] == 2
    # whole, in one cluster: ten pods and one Volcano PodGroup in the RDMA cluster, none anywhere else
    selector = "federator.dev/job-name=resnet-ps"
    pods = up.json("get", "pods", "-n", "vision", "-l", selector, kubeconfig=up.member(RDMA))["items"]
    assert len(pods) == 10 and {p["status"]["phase"] for p in pods} == {"Succeeded"}
    groups = up.json("get", "podgroups.scheduling.volcano.sh", "-n", "vision", "-l", selector,
                     kubeconfig=up.member(RDMA))["items"]
    assert len(groups) == 1 and groups[0]["spec"]["minMember"] == 10
    for other in (ETH, SMALL):
        assert up.json("get", "pods", "-A", "-l", selector, kubeconfig=up.member(other))["items"] == []

    # kubectl delete waits for the job to go; the hub deletes its member objects first
    up.kubectl("delete", "tj", "resnet-ps", "-n", "vision", "--timeout=60s", timeout=90)
    assert up.json("get", "pods", "-n", "vision", "-l", selector, kubeconfig=up.member(RDMA))["items"] == []
    assert up.json("get", "podgroups.scheduling.volcano.sh", "-n", "vision", "-l", selector,
                   kubeconfig=up.member(RDMA))["items"] == []
    gone = up.kubectl("get", "tj", "resnet-ps", "-n", "vision", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


FULL_EXAMPLE = ROOT / "examples" / "resnet-full-template.yaml"


def test_a_full_pod_template_job_runs_in_the_rdma_cluster_with_its_volumes_and_sidecar(up: FederatorUp) -> None:
    """Issue 27: examples/resnet-full-template.yaml (dataset PVC, /dev/shm, secret env, init container and
    sidecar) through kubectl: placed whole in an RDMA cluster, its pods on the member are the template's
    with the hub's fields on top, and it succeeds."""
    applied = up.kubectl("apply", "-f", str(FULL_EXAMPLE))
    assert "trainingjob.federator.dev/resnet-full created" in applied.stdout
    wait_for("resnet-full Succeeded",
             lambda: up.json("get", "tj", "resnet-full", "-n", "vision").get("status", {}).get("phase")
             == "Succeeded", timeout=120)
    job = up.json("get", "tj", "resnet-full", "-n", "vision")
    cluster = job["status"]["placement"]["cluster"]
    schedulers = {RDMA: "volcano", KAI: "kai-scheduler"}  # the RDMA clusters with A100 or H100
    assert cluster in schedulers
    pods = up.json("get", "pods", "-n", "vision", "-l", "federator.dev/job-name=resnet-full",
                   kubeconfig=up.member(cluster))["items"]
    assert len(pods) == 4
    for pod in pods:
        spec = pod["spec"]
        assert [c["name"] for c in spec["initContainers"]] == ["warm-cache", "log-shipper"]
        assert {v["name"] for v in spec["volumes"]} >= {"data", "shm"}
        assert spec["schedulerName"] == schedulers[cluster] and spec["restartPolicy"] == "Never"
        assert pod["metadata"]["labels"]["app"] == "resnet"
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"
    up.kubectl("delete", "tj", "resnet-full", "-n", "vision", "--timeout=60s", timeout=90)


NATIVE, KAI = "cloud-native-gang", "onprem-kai-h100"
GANGS = """\
apiVersion: federator.dev/v1alpha1
kind: TrainingJob
metadata: {name: on-native, namespace: gangs}
spec:
  roles: [{name: worker, replicas: 3, template: {image: trainer:1.4, resources: {cpu: "8", memory: 32Gi,
           nvidia.com/gpu: 4}}}]
  placement: {network: ethernet, gpuModels: [A100]}
---
apiVersion: federator.dev/v1alpha1
kind: TrainingJob
metadata: {name: on-kai, namespace: gangs}
spec:
  roles: [{name: worker, replicas: 3, template: {image: trainer:1.4, resources: {cpu: "8", memory: 32Gi,
           nvidia.com/gpu: 4, rdma/hca: 1}}}]
  placement: {network: rdma, gpuModels: [H100]}
"""


def test_gangs_land_under_kubernetes_gang_scheduling_and_kai(up: FederatorUp) -> None:
    """The shipped native and KAI clusters each take a gang; kubectl there shows the scheduler's own kind."""
    manifest = up.workdir / "gangs.yaml"
    manifest.write_text(GANGS)
    up.kubectl("apply", "-f", str(manifest))

    def admitted() -> dict[str, dict[str, object]] | None:
        jobs = {j["metadata"]["name"]: j for j in up.json("get", "tj", "-n", "gangs")["items"]}
        done = all(any(h["event"] == "Admitted" for h in (j.get("status") or {}).get("history") or ())
                   for j in jobs.values())
        return jobs if len(jobs) == 2 and done else None

    jobs = wait_for("both gangs admitted", admitted, timeout=90)
    for name, cluster in (("on-native", NATIVE), ("on-kai", KAI)):
        status = jobs[name]["status"]
        assert isinstance(status, dict) and status["placement"]["cluster"] == cluster, status
    native = up.kubectl("get", "podgroups.scheduling.k8s.io", "-n", "gangs", kubeconfig=up.member(NATIVE))
    header, row = native.stdout.splitlines()
    assert header.split() == ["NAME", "POLICY", "STATUS", "AGE"] and row.split()[1:3] == ["Gang", "Scheduled"]
    (kai,) = up.json("get", "podgroups.scheduling.run.ai", "-n", "gangs", kubeconfig=up.member(KAI))["items"]
    assert kai["spec"] == {"minMember": 3, "queue": "default-queue"}
    assert kai["metadata"]["annotations"]["kai.scheduler/last-start-timestamp"]
    up.kubectl("delete", "-f", str(manifest), "--timeout=60s", timeout=90)
    assert up.json("get", "podgroups.scheduling.run.ai", "-n", "gangs", kubeconfig=up.member(KAI))["items"] == []


def test_ctrl_c_stops_the_hub_and_every_simulated_cluster(tmp_path: Path) -> None:
    running = FederatorUp(tmp_path, "--sim-profile", str(ROOT / "clusterconfigs" / "sim" / "cloud-small.yaml"),
                          "--sim-profile", str(ROOT / "clusterconfigs" / "sim" / "cloud-eth-h100.yaml"))
    try:
        ready = running.start()
        assert ready["registrations"] == {SMALL: "created", ETH: "created"}
        servers = [urlsplit(yaml.safe_load(running.member(name).read_text())["clusters"][0]["cluster"]["server"])
                   for name in (SMALL, ETH)]
        hub = urlsplit(ready["url"])
    finally:
        code = running.stop()
    assert code == 0
    events = [record["event"] for record in running.logs]
    assert "hub stopped" in events
    # after the hub, only the simulated clusters stop (their stores close: .federator/sim/<cluster>.db)
    after = running.logs[events.index("hub stopped") + 1:]
    assert {(r.get("component"), r["event"]) for r in after} <= {("store.sqlite", "sqlite store closed")}, after
    for server in [*servers, hub]:
        with pytest.raises(OSError):
            socket.create_connection((server.hostname or "127.0.0.1", server.port or 0), timeout=2).close()


@pytest.mark.parametrize(("flags", "message"), [
    (("--sim-profile", "/nonexistent/profiles"), "error: "),
    (("--sim-run-seconds", "0"), "error: --sim-run-seconds 0: must be more than 0"),
    (("--sim-port-base", "65535", "--sim-profile", str(ROOT / "clusterconfigs" / "sim")),
     f"error: --sim-port-base 65535: ports 65535..{65535 + SHIPPED_PROFILES - 1} must lie within 1..65535"),
    (("--cluster-loss-grace", "soon"), "error: --cluster-loss-grace 'soon': not a duration"),
    (("--member-lease-duration=-5s",), "error: --member-lease-duration '-5s': must be more than zero"),
    (("--lease-margin", "9d"), "error: --lease-margin '9d': not a duration"),
    (("--mass-loss-threshold", "1.5"), "error: --mass-loss-threshold '1.5': must be between 0 and 1"),
    (("--failover-rate", "fast"), "error: --failover-rate 'fast': not a number"),
])
def test_bad_development_flags_give_one_line_and_start_nothing(tmp_path: Path, flags: tuple[str, ...],
                                                               message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "federator.cli", "up", "--listen", "127.0.0.1:0", *flags],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1 and lines[0].startswith(message), result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".federator" / "sim").exists() and not (tmp_path / ".federator" / "hub.db").exists()
