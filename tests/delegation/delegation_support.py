"""Helpers of the delegation tests (fixtures: conftest.py): the member cluster's profile, TrainingJobs as
the hub stores them, and polling with a deadline."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Two tainted GPU nodes (8 GPUs, 1 HCA each) and two CPU nodes; every scheduler kind.
MEMBER_PROFILE: dict[str, Any] = {
    "apiVersion": "sim.federator.dev/v1alpha1",
    "kind": "ClusterProfile",
    "name": "delegation",
    "location": {"type": "on-prem", "region": "lab-1"},
    "network": {"fabric": "infiniband", "bandwidthGbps": 200},
    # native runs as a second kube-scheduler profile (a MemberCluster schedulerName override), beside the default
    "schedulers": [{"type": "default"}, {"type": "volcano"}, {"type": "coscheduling"}, {"type": "kube-batch"},
                   {"type": "native", "schedulerName": "native-scheduler"}, {"type": "kai"}],
    "kubelet": {"startDelaySeconds": 0.1, "terminationSeconds": 0.05},
    "nodePools": [
        {"name": "gpu", "count": 2, "cpu": "32", "memory": "256Gi", "gpus": 8, "gpuProduct": "NVIDIA-A100-SXM4-80GB",
         "rdmaHca": 1, "labels": {"federator.test/pool": "gpu"},
         "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        {"name": "cpu", "count": 2, "cpu": "16", "memory": "64Gi", "labels": {"federator.test/pool": "cpu"}},
    ],
}


def wait_until(what: str, check: Callable[[], T | None], *, timeout: float = 15.0, interval: float = 0.05) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` (and the last value) at the deadline."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def make_job(
    *,
    name: str = "resnet-ps",
    namespace: str = "vision",
    uid: str | None = None,
    roles: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "federator.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4()),
                     "resourceVersion": "17", "generation": 1},
        "spec": {"roles": roles if roles is not None else [
            {"name": "ps", "replicas": 2,
             "template": {"image": "trainer:1.4", "resources": {"cpu": "8", "memory": "32Gi"}}},
            {"name": "worker", "replicas": 8,
             "template": {"image": "trainer:1.4", "resources": {"cpu": "16", "memory": "64Gi",
                                                                "nvidia.com/gpu": 4, "rdma/hca": 1}}},
        ], **spec},
        "status": {"phase": "Placed", "placement": {"cluster": "onprem", "epoch": 3}},
    }
