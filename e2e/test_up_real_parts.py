"""End to end: `federator up --store etcd://... --clusters DIR` switches both parts.

A real etcd process holds the hub's data; the member cluster is served by a separate `federator sim`
process (to the hub, a cluster it reaches through a kubeconfig, like any other) and registered through a
registration file in DIR. No simulated cluster is started by `federator up` itself. A job aimed at the
member runs there under its default scheduler; deleting it cleans the member first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from federator.store.etcd_process import EtcdProcess

from .e2e_support import ROOT, FederatorUp, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.etcd]
MEMBER = "cloud-small"


@pytest.fixture
def member(tmp_path: Path) -> Iterator[Path]:
    """`federator sim` serving the cloud-small profile in its own process; yields its kubeconfig."""
    state = tmp_path / "member"
    process = subprocess.Popen(
        [sys.executable, "-m", "federator.cli", "sim", "--profile", str(ROOT / "clusterconfigs" / "sim" /
                                                                        f"{MEMBER}.yaml"), "--state-dir", str(state)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        index = wait_for("federator sim to write its index", lambda: (state / "clusters.json").exists() or None,
                         timeout=60)
        assert index
        clusters = json.loads((state / "clusters.json").read_text())["clusters"]
        yield Path(clusters[0]["kubeconfig"]).resolve()
    finally:
        process.send_signal(signal.SIGINT)
        try:
            assert process.wait(30) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)


def test_up_on_etcd_with_registered_clusters_runs_and_cleans_a_job(tmp_path: Path, member: Path) -> None:
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / f"{MEMBER}.yaml").write_text(yaml.safe_dump({
        "apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": MEMBER},
        "spec": {"connection": {"kubeconfigPath": str(member)},
                 "location": {"type": "cloud", "provider": "aws", "region": "eu-west-1"},
                 "network": {"type": "ethernet", "bandwidthGbps": 50.0},
                 "scheduler": {"name": "default"}, "labels": {"tier": "dev"}},
    }))
    with EtcdProcess(tmp_path / "etcd", fsync=False) as etcd:
        up = FederatorUp(tmp_path / "hub", "--store", etcd.url, "--clusters", str(clusters))
        try:
            ready = up.start()
            assert ready["store"] == etcd.url and ready["registrations"] == {MEMBER: "created"}
            assert not (up.state / "sim").exists()  # --clusters: no simulated clusters of its own
            wait_for("the member Ready", lambda: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (up.json("get", "mc", MEMBER).get("status") or {}).get("conditions") or ()))
            job = {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
                   "metadata": {"name": "l4-job", "namespace": "default"},
                   "spec": {"roles": [{"name": "worker", "replicas": 2, "template": {
                       "image": "trainer:1.4", "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1}}}],
                       "placement": {"gpuModels": ["L4"]}}}
            manifest = tmp_path / "job.yaml"
            manifest.write_text(yaml.safe_dump(job))
            up.kubectl("apply", "-f", str(manifest))
            running = wait_for("the job running in the member", lambda: (
                lambda j: j if (j.get("status") or {}).get("phase") == "Running" else None)(
                up.json("get", "tj", "l4-job")))
            assert running["status"]["placement"]["cluster"] == MEMBER
            pods = up.json("get", "pods", "-n", "default", "-l", "federator.dev/job-name=l4-job",
                           kubeconfig=member)["items"]
            assert len(pods) == 2 and {p["status"]["phase"] for p in pods} == {"Running"}
            up.kubectl("delete", "tj", "l4-job", "--timeout=60s", timeout=90)
            assert up.json("get", "pods", "-n", "default", "-l", "federator.dev/job-name=l4-job",
                           kubeconfig=member)["items"] == []
        finally:
            code = up.stop()
        assert code == 0
