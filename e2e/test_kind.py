"""End to end against real Kubernetes clusters made by kind, when asked: FEDERATOR_E2E_KIND=1.

`e2e/kind.sh up` makes the clusters (fed-a: RDMA InfiniBand, A100, imagenet-22k cached; fed-b: RDMA RoCE,
V100; fed-c: cloud Ethernet, H100; fake nvidia.com/gpu and rdma/hca patched into their workers' node
status; Volcano as the gang scheduler; deploy/member's RBAC and fence agent) and writes, under
FEDERATOR_KIND_STATE (default .federator/kind), the MemberCluster registrations (clusters/), the kubeconfigs
minted for the hub's identity (hub-identity/) and kind's admin kubeconfigs (admin/, which these tests use
to look into the members). `e2e/kind.sh test` runs this file with FEDERATOR_E2E_KIND=1. Each test runs its
own `federator up --clusters STATE/clusters` and drives it only through its public endpoint (kubectl):

- the three clusters register Ready, with the GPUs, models and fabric their nodes advertise;
- three gangs land whole where their fabric, GPU model and dataset are, as one Volcano PodGroup plus its
  pods, bound by Volcano (GangGuarantee=True); deleting them deletes their member objects first;
- a gang no cluster can hold whole stays Pending with a why-not row per cluster, and nothing of it is
  created in any member;
- the hub killed (-9), the fence agent in the member deletes its gang once the hub's Lease there is not
  renewed, and records a HubLeaseExpired Event.

Without FEDERATOR_E2E_KIND=1, or without docker and kind, or in a pytest-xdist worker (two hubs at once
would share the members' fencing Lease), the module is skipped with one line (the same flows run against
simulated clusters in e2e/test_up.py and tests/). With FEDERATOR_E2E_KIND=1 but no
registrations from kind.sh, the tests fail saying to run `e2e/kind.sh up`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .e2e_support import ROOT, FederatorUp, wait_for


def _why_not_kind() -> str | None:
    if os.environ.get("FEDERATOR_E2E_KIND") != "1":
        return ("kind clusters are used only with FEDERATOR_E2E_KIND=1 (e2e/kind.sh test; "
                "e2e/test_up.py runs the same flows against simulated clusters)")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # two hubs at once would renew one fencing Lease in every member and delete each other's gangs
        return ("FEDERATOR_E2E_KIND=1 under pytest-xdist: the kind tests run in one process, one hub at a time "
                "(e2e/kind.sh test)")
    missing = [tool for tool in ("docker", "kind") if shutil.which(tool) is None]
    if missing:
        return (f"FEDERATOR_E2E_KIND=1 but {' and '.join(missing)} not on PATH (README, End to end on kind, "
                "says what to install)")
    info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                          timeout=60)
    if info.returncode != 0:
        last = (info.stderr.strip().splitlines() or ["docker info failed"])[-1]
        return f"FEDERATOR_E2E_KIND=1 but the docker daemon is not reachable: {last}"
    return None


_REASON = _why_not_kind()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.timeout(900)]

STATE = Path(os.environ.get("FEDERATOR_KIND_STATE") or ROOT / ".federator" / "kind").resolve()
CLUSTERS = ("fed-a", "fed-b", "fed-c")
#: a namespace deploy/member manages (deploy/member/namespaces), so the hub may create gangs there
NAMESPACE = "vision"
#: kind.sh advertises this many nvidia.com/gpu on every worker node
GPUS_PER_NODE = 8
PODGROUPS = "podgroups.scheduling.volcano.sh"
JOB_LABEL = "federator.dev/job-name"


@pytest.fixture(scope="module")
def members() -> dict[str, Path]:
    """cluster name -> kind's admin kubeconfig of it (to look into the member, not for the hub)."""
    registrations = STATE / "clusters"
    found = {name: STATE / "admin" / f"{name}.kubeconfig" for name in CLUSTERS}
    if not all((registrations / f"{name}.yaml").is_file() and path.is_file() for name, path in found.items()):
        pytest.fail(f"no kind clusters registered in {registrations}: run e2e/kind.sh up first "
                    "(or e2e/kind.sh all)", pytrace=False)
    return found


def _hub(workdir: Path, *flags: str) -> FederatorUp:
    return FederatorUp(workdir, "--clusters", str(STATE / "clusters"), *flags)


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or ()}


def _wait_ready(up: FederatorUp, members: dict[str, Path]) -> dict[str, dict[str, Any]]:
    workers = {name: sum(1 for n in up.json("get", "nodes", kubeconfig=path)["items"]
                         if "node-role.kubernetes.io/control-plane" not in n["metadata"]["labels"])
               for name, path in members.items()}

    def synced() -> dict[str, dict[str, Any]] | None:
        found = {mc["metadata"]["name"]: mc for mc in up.json("get", "mc")["items"]}
        for name in CLUSTERS:
            mc = found.get(name)
            if mc is None or _conditions(mc).get("Ready") != "True":
                return None
            if ((mc.get("status") or {}).get("capacity") or {}).get("totalGPUs") != GPUS_PER_NODE * workers[name]:
                return None
        return found

    return wait_for("fed-a, fed-b and fed-c Ready with their workers' GPUs", synced, timeout=180)


def _job(name: str, *, workers: int, gpus: int, rdma: bool, placement: dict[str, Any],
         ps: int = 0) -> dict[str, Any]:
    def template(resources: dict[str, Any]) -> dict[str, Any]:
        return {"image": "busybox:1.36", "command": ["sh", "-c", "sleep 900"],
                "resources": {"cpu": "50m", "memory": "32Mi", **resources}}

    roles = [{"name": "worker", "replicas": workers,
              "template": template({"nvidia.com/gpu": gpus, **({"rdma/hca": 1} if rdma else {})})}]
    if ps:
        roles.insert(0, {"name": "ps", "replicas": ps, "template": template({})})
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"roles": roles, "placement": placement}}


def _apply(up: FederatorUp, *jobs: dict[str, Any]) -> None:
    manifest = up.workdir / "jobs.yaml"
    manifest.write_text(yaml.safe_dump_all(jobs))
    up.kubectl("apply", "-f", str(manifest))


def _member_objects(up: FederatorUp, kubeconfig: Path, resource: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = up.json("get", resource, "-n", NAMESPACE, "-l", f"{JOB_LABEL}={job}",
                                          kubeconfig=kubeconfig)["items"]
    return items


def _admitted(up: FederatorUp, name: str) -> dict[str, Any] | None:
    job: dict[str, Any] = up.json("get", "tj", name, "-n", NAMESPACE)
    return job if (job.get("status") or {}).get("phase") in ("Admitted", "Running") else None


@pytest.fixture(scope="class")
def up(tmp_path_factory: pytest.TempPathFactory, members: dict[str, Path]) -> Iterator[FederatorUp]:
    """One hub for the tests of a class; it stops when the class is done (before the fence test's hub,
    which renews the same Lease, starts)."""
    running = _hub(tmp_path_factory.mktemp("kind-hub"))
    try:
        running.start()
        yield running
    finally:
        code = running.stop()
        assert code == 0, running.other_stderr[-20:]


class TestPlacementOnKind:
    def test_the_kind_clusters_register_ready_with_the_gpus_their_nodes_advertise(
            self, up: FederatorUp, members: dict[str, Path]) -> None:
        assert not (up.state / "sim").exists()  # --clusters: real clusters only
        found = _wait_ready(up, members)
        expected = {"fed-a": ("A100", "rdma"), "fed-b": ("V100", "rdma"), "fed-c": ("H100", "ethernet")}
        for name, (model, fabric) in expected.items():
            capacity = found[name]["status"]["capacity"]
            assert set(capacity["gpusByModel"]) == {model}, capacity
            assert capacity["gpusByModel"][model]["total"] == capacity["totalGPUs"]
            # workers carry the fabric; the control plane (no rdma/hca) counts as ethernet
            assert capacity["nodesByFabric"].get(fabric, 0) >= 2, capacity
            assert found[name]["spec"]["scheduler"]["name"] == "volcano"
        assert "imagenet-22k" in (found["fed-a"]["status"].get("datasetsSeen") or [])
        # the registrations never show the member credentials they point at
        listing = up.kubectl("get", "mc", "-o", "yaml").stdout
        for name in CLUSTERS:
            token = yaml.safe_load((STATE / "hub-identity" / f"{name}.kubeconfig").read_text())["users"][0]["user"]
            assert token["token"] not in listing

    def test_gangs_land_whole_in_the_cluster_of_their_fabric_model_and_data_through_volcano(
            self, up: FederatorUp, members: dict[str, Path]) -> None:
        _wait_ready(up, members)
        expected = {"ib-a100": "fed-a", "roce-v100": "fed-b", "eth-h100": "fed-c"}
        jobs = [
            _job("ib-a100", ps=1, workers=2, gpus=4, rdma=True,
                 placement={"network": "rdma", "gpuModels": ["A100", "H100"], "datasets": ["imagenet-22k"]}),
            _job("roce-v100", workers=2, gpus=8, rdma=True, placement={"network": "rdma", "gpuModels": ["V100"]}),
            _job("eth-h100", workers=2, gpus=4, rdma=False,
                 placement={"network": "ethernet", "gpuModels": ["H100"]}),
        ]
        _apply(up, *jobs)
        try:
            for job in jobs:
                name = job["metadata"]["name"]
                cluster = expected[name]
                total = sum(r["replicas"] for r in job["spec"]["roles"])
                admitted = wait_for(f"{name} admitted", lambda n=name: _admitted(up, n), timeout=300)
                assert admitted["status"]["placement"]["cluster"] == cluster
                assert _conditions(admitted)["GangGuarantee"] == "True"
                # one Volcano PodGroup for the whole gang, which Volcano ran: all pods bound by it
                groups = wait_for(f"{name}'s PodGroup Running in {cluster}", lambda n=name, c=cluster: (
                    lambda g: g if len(g) == 1 and (g[0].get("status") or {}).get("phase") == "Running" else None
                )(_member_objects(up, members[c], PODGROUPS, n)), timeout=300)
                assert groups[0]["spec"]["minMember"] == total and groups[0]["spec"]["queue"] == "default"
                pods = _member_objects(up, members[cluster], "pods", name)
                assert len(pods) == total
                for pod in pods:
                    assert pod["spec"]["schedulerName"] == "volcano"
                    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == \
                        groups[0]["metadata"]["name"]
                    assert pod["spec"].get("nodeName"), pod["metadata"]["name"]
                for other in set(CLUSTERS) - {cluster}:
                    assert _member_objects(up, members[other], "pods", name) == []
        finally:
            up.kubectl("delete", "tj", "--all", "-n", NAMESPACE, "--timeout=180s", timeout=240)
        for name, cluster in expected.items():
            assert _member_objects(up, members[cluster], "pods", name) == []
            assert _member_objects(up, members[cluster], PODGROUPS, name) == []

    def test_a_gang_no_cluster_can_hold_whole_stays_pending_and_nothing_of_it_is_created(
            self, up: FederatorUp, members: dict[str, Path]) -> None:
        _wait_ready(up, members)
        # 3 x 8 GPUs of one model: every cluster has 2 workers of 8
        _apply(up, _job("too-big", workers=3, gpus=GPUS_PER_NODE, rdma=False,
                        placement={"network": "any", "gpuModels": ["A100", "V100", "H100"]}))
        try:
            def why_not() -> list[dict[str, Any]] | None:
                status = up.json("get", "tj", "too-big", "-n", NAMESPACE).get("status") or {}
                rows = (status.get("placement") or {}).get("whyNot") or []
                return rows if status.get("phase") == "Pending" and {r["cluster"] for r in rows} >= set(CLUSTERS) \
                    else None

            rows = wait_for("too-big Pending with a why-not row for every cluster", why_not, timeout=120)
            assert all(r["reason"] for r in rows), rows
            for name, kubeconfig in members.items():
                assert _member_objects(up, kubeconfig, "pods", "too-big") == [], name
                assert _member_objects(up, kubeconfig, PODGROUPS, "too-big") == [], name
        finally:
            up.kubectl("delete", "tj", "too-big", "-n", NAMESPACE, "--timeout=120s", timeout=180)


def _lease_events(up: FederatorUp, kubeconfig: Path) -> dict[str, int]:
    """HubLeaseExpired Events of the fence agent in federator-system: name -> count."""
    events = up.json("get", "events", "-n", "federator-system", "--field-selector", "reason=HubLeaseExpired",
                     kubeconfig=kubeconfig)["items"]
    return {e["metadata"]["name"]: int(e.get("count") or 1) for e in events}


def test_the_fence_agent_deletes_the_gang_once_the_killed_hub_stops_renewing_its_lease(
        tmp_path: Path, members: dict[str, Path]) -> None:
    lease = 15
    up = _hub(tmp_path / "hub", "--member-lease-duration", f"{lease}s")
    cluster = "fed-b"
    try:
        up.start()
        _wait_ready(up, members)
        _apply(up, _job("fenced", workers=2, gpus=2, rdma=True, placement={"network": "rdma", "gpuModels": ["V100"]}))
        admitted = wait_for("fenced admitted", lambda: _admitted(up, "fenced"), timeout=300)
        assert admitted["status"]["placement"]["cluster"] == cluster
        wait_for("fenced's pods bound in fed-b", lambda: (lambda p: len(p) == 2 and all(
            x["spec"].get("nodeName") for x in p))(_member_objects(up, members[cluster], "pods", "fenced")),
            timeout=300)
        before = _lease_events(up, members[cluster])
    finally:
        up.kill()  # kill -9: no more renewals, nothing cleaned up
    # the agent fences leaseDurationSeconds after the last renewal it saw (plus its poll and deletes)
    wait_for("the fence agent to delete fenced's pods in fed-b",
             lambda: _member_objects(up, members[cluster], "pods", "fenced") == [], timeout=lease + 120)
    assert _member_objects(up, members[cluster], PODGROUPS, "fenced") == []
    after = wait_for("a HubLeaseExpired Event", lambda: (lambda e: e if any(
        e[k] > before.get(k, 0) for k in e) else None)(_lease_events(up, members[cluster])), timeout=60)
    assert after
    hub_lease = up.json("get", "leases.coordination.k8s.io", "federator", "-n", "federator-system",
                        kubeconfig=members[cluster])
    assert int(hub_lease["metadata"]["annotations"]["federator.dev/fence-count"]) >= 1

    # the hub comes back on its store, and deleting the job leaves nothing in the member
    again = _hub(tmp_path / "hub", "--member-lease-duration", f"{lease}s")
    try:
        again.start()
        again.kubectl("delete", "tj", "fenced", "-n", NAMESPACE, "--timeout=180s", timeout=240)
        assert _member_objects(again, members[cluster], "pods", "fenced") == []
        assert _member_objects(again, members[cluster], PODGROUPS, "fenced") == []
    finally:
        code = again.stop()
    assert code == 0
