"""End to end against a real Kubernetes cluster made by kind, when asked: FEDERATOR_E2E_KIND=1.

`federator up --clusters DIR` (no simulated clusters) with one kind cluster registered (the default
scheduler: kind runs no gang scheduler). A small job aimed at it is delegated there (pods with the hub's
labels, bound by kube-scheduler: Admitted, with the GangGuarantee=False condition), and deleting it
deletes the pods in the kind cluster first. Where docker or kind is missing the test is skipped with a
message saying what is missing; without FEDERATOR_E2E_KIND=1 it is skipped (the same flow runs against
simulated clusters in e2e/test_up.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .e2e_support import FederatorUp, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("FEDERATOR_E2E_KIND") != "1",
                       reason="kind clusters are used only when FEDERATOR_E2E_KIND=1 "
                              "(e2e/test_up.py runs the same flow against simulated clusters)"),
]


@pytest.fixture(scope="module")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    missing = [tool for tool in ("kind", "docker") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"FEDERATOR_E2E_KIND=1 but {' and '.join(missing)} is not on PATH: install kind "
                    "(https://kind.sigs.k8s.io) and docker to run the kind e2e tests")
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        pytest.skip(f"FEDERATOR_E2E_KIND=1 but the docker daemon is not reachable: "
                    f"{(info.stderr.strip().splitlines() or ['docker info failed'])[-1]}")
    name = f"federator-e2e-{uuid.uuid4().hex[:6]}"
    kubeconfig = tmp_path_factory.mktemp("kind") / f"{name}.kubeconfig"
    created = subprocess.run(["kind", "create", "cluster", "--name", name, "--kubeconfig", str(kubeconfig),
                              "--wait", "180s"], capture_output=True, text=True, timeout=600)
    if created.returncode != 0:
        pytest.fail(f"kind create cluster failed: {created.stderr[-2000:]}")
    try:
        yield name, kubeconfig
    finally:
        subprocess.run(["kind", "delete", "cluster", "--name", name], capture_output=True, timeout=300)


def test_a_job_is_delegated_to_a_kind_cluster_and_deletion_cleans_it(tmp_path: Path,
                                                                      kind_cluster: tuple[str, Path]) -> None:
    name, kubeconfig = kind_cluster
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / "kind.yaml").write_text(yaml.safe_dump({
        "apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": "kind"},
        "spec": {"connection": {"kubeconfigPath": str(kubeconfig.resolve())},
                 "location": {"type": "onPrem", "region": "laptop"},
                 "network": {"type": "ethernet", "bandwidthGbps": 10.0},
                 "scheduler": {"name": "default"}, "labels": {"federator.test/cluster": "kind"}},
    }))
    up = FederatorUp(tmp_path / "hub", "--clusters", str(clusters))
    try:
        up.start()
        assert not (up.state / "sim").exists()  # --clusters: real clusters only
        wait_for("the kind cluster Ready", lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (up.json("get", "mc", "kind").get("status") or {}).get("conditions") or ()), timeout=120)
        job = {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
               "metadata": {"name": "tiny", "namespace": "default"},
               "spec": {"roles": [{"name": "worker", "replicas": 2, "template": {
                   "image": "busybox:1.36", "command": ["sh", "-c", "sleep 30"],
                   "resources": {"cpu": "100m", "memory": "64Mi"}}}],
                   "placement": {"clusterSelector": {"matchLabels": {"federator.test/cluster": "kind"}}}}}
        manifest = tmp_path / "tiny.yaml"
        manifest.write_text(yaml.safe_dump(job))
        up.kubectl("apply", "-f", str(manifest))
        admitted = wait_for("the job admitted in kind", lambda: (lambda j: j if (j.get("status") or {}).get(
            "phase") in ("Admitted", "Running", "Succeeded") else None)(up.json("get", "tj", "tiny")), timeout=180)
        assert admitted["status"]["placement"]["cluster"] == "kind"
        gang = next(c for c in admitted["status"]["conditions"] if c["type"] == "GangGuarantee")
        assert gang["status"] == "False"
        pods = up.json("get", "pods", "-n", "default", "-l", "federator.dev/job-name=tiny",
                       kubeconfig=kubeconfig)["items"]
        assert len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods)
        up.kubectl("delete", "tj", "tiny", "--timeout=120s", timeout=180)
        left = up.json("get", "pods", "-n", "default", "-l", "federator.dev/job-name=tiny",
                       kubeconfig=kubeconfig)["items"]
        assert left == []
    finally:
        code = up.stop()
    assert code == 0
