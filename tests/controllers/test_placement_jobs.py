"""The job helpers the placement loop and the lifecycle controllers share (federator/controllers/jobs.py):
TrainingJob -> GangRequest, excluded clusters, requeue, conditions, the retry backoff and the crash hook's
inertness. Pure functions over plain dicts; no hub needed."""

from __future__ import annotations

import copy
import os
import random
import subprocess
import sys
from typing import Any

import pytest

from federator.apis.timestamps import format_time, parse_epoch
from federator.controllers.dispatch import CRASH_ENV, RetryBook, crash_point
from federator.controllers.jobs import (
    PHASE_PENDING,
    current_placement,
    excluded_clusters,
    excluded_nodes,
    gang_request,
    requeue,
    set_condition,
)
from federator.placement import Network

NOW = 1_750_000_000.0

JOB: dict[str, Any] = {
    "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "resnet-ps", "namespace": "vision", "uid": "u-1",
                 "creationTimestamp": "2025-06-15T12:00:00Z"},
    "spec": {
        "priority": 100,
        "roles": [
            {"name": "ps", "replicas": 2, "template": {"image": "t", "resources": {"cpu": "8", "memory": "32Gi"},
                                                       "nodeSelector": {"zone": "a", "pool": "cpu"}}},
            {"name": "worker", "replicas": 8, "template": {
                "image": "t", "resources": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 4, "rdma/hca": 1},
                "nodeSelector": {"zone": "a", "pool": "gpu"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}},
        ],
        "placement": {"network": "rdma", "gpuModels": ["A100", "H100"], "datasets": ["imagenet-22k"],
                      "clusterSelector": {"matchLabels": {"tier": "research"},
                                          "matchExpressions": [{"key": "region", "operator": "In",
                                                                "values": ["eu", "us"]}]}},
    },
}


def test_gang_request_carries_every_placement_need() -> None:
    gang = gang_request(JOB, now=NOW)
    assert (gang.key, gang.uid, gang.priority) == ("vision/resnet-ps", "u-1", 100)
    assert [(r.name, r.replicas) for r in gang.roles] == [("ps", 2), ("worker", 8)]
    assert gang.total.gpu == 32 and gang.total.rdma == 8 and gang.pod_count == 10
    assert gang.network is Network.RDMA and gang.gpu_models == ("A100", "H100")
    assert gang.datasets == ("imagenet-22k",)
    assert gang.cluster_selector is not None
    assert gang.cluster_selector.matches({"tier": "research", "region": "eu"})
    assert not gang.cluster_selector.matches({"tier": "research", "region": "ap"})
    # roles agree on zone, disagree on pool: only the common key is a gang-wide node selector
    assert dict(gang.node_selector) == {"zone": "a"}
    assert len(gang.tolerations) == 1
    assert gang.submitted_at == parse_epoch("2025-06-15T12:00:00Z")
    assert dict(gang.excluded_clusters) == {}


@pytest.mark.parametrize(("change", "message"), [
    (lambda j: j["spec"].pop("roles"), "roles must not be empty"),
    (lambda j: j.pop("spec"), "spec is missing"),
    (lambda j: j["spec"]["roles"][0]["template"]["resources"].update({"cpu": "lots"}),
     "spec.roles[0].template.resources"),
    (lambda j: j["spec"]["roles"][1].update({"replicas": 20_000}), "exceeds the limit"),
    (lambda j: j["spec"]["placement"].update({"network": "carrier-pigeon"}), "carrier-pigeon"),
])
def test_a_job_placement_cannot_express_is_a_clear_error(change: Any, message: str) -> None:
    job = copy.deepcopy(JOB)
    change(job)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        gang_request(job, now=NOW)


def test_excluded_clusters_in_force_only_until_their_time() -> None:
    job = copy.deepcopy(JOB)
    job["status"] = {"placement": {"epoch": 2, "excludedClusters": [
        {"cluster": "a", "until": format_time(NOW + 60)},
        {"cluster": "b", "until": format_time(NOW - 1)},
        {"cluster": "c", "until": "not a time"},
        "garbage",
    ]}}
    assert excluded_clusters(job, now=NOW) == {"a": parse_epoch(format_time(NOW + 60))}
    assert set(gang_request(job, now=NOW).excluded_clusters) == {"a"}


def test_requeue_clears_the_cluster_keeps_the_epoch_and_records_it() -> None:
    status: dict[str, Any] = {"phase": "Placed", "placement": {"cluster": "x", "epoch": 3,
                                                               "decisionResourceVersion": "9",
                                                               "scores": [{"cluster": "x", "total": 50.0}]}}
    requeue(status, reason="PulledBack", message="not admitted in time", now=NOW, job="vision/j",
            exclude_until=NOW + 300)
    assert status["phase"] == PHASE_PENDING
    assert current_placement({"status": status}) == (None, 3)  # the next decision takes epoch 4
    assert status["placement"]["excludedClusters"] == [{"cluster": "x", "until": format_time(NOW + 300)}]
    assert status["requeues"] == 1
    assert "scores" not in status["placement"]  # the decision they explained no longer holds
    assert status["history"][-1] | {"time": None} == {"time": None, "event": "Requeued", "cluster": "x",
                                                        "epoch": 3, "message": "not admitted in time"}


def test_a_requeue_excluding_a_node_keeps_the_cluster_open_and_placement_reads_it() -> None:
    status: dict[str, Any] = {"phase": "Running", "placement": {"cluster": "x", "epoch": 3, "excludedNodes": [
        {"cluster": "x", "node": "n1", "until": format_time(NOW - 1)},  # expired: dropped
        {"cluster": "y", "node": "n2", "until": format_time(NOW + 60)}]}}
    requeue(status, reason="FailurePolicy", message="GPU fault", now=NOW, job="vision/j", exclude_until=NOW + 300,
            exclude_node="n7")
    assert "excludedClusters" not in status["placement"]
    assert status["placement"]["excludedNodes"] == [{"cluster": "y", "node": "n2", "until": format_time(NOW + 60)},
                                                    {"cluster": "x", "node": "n7", "until": format_time(NOW + 300)}]
    job = copy.deepcopy(JOB)
    job["status"] = status
    assert excluded_nodes(job, now=NOW) == {"x": frozenset({"n7"}), "y": frozenset({"n2"})}
    assert dict(gang_request(job, now=NOW).excluded_nodes) == {"x": frozenset({"n7"}), "y": frozenset({"n2"})}
    assert excluded_nodes(job, now=NOW + 100) == {"x": frozenset({"n7"})}
    assert excluded_clusters(job, now=NOW) == {}
    # the same node again (placed there again, failed again) replaces its entry; hostile entries are skipped
    status["placement"]["cluster"] = "x"
    requeue(status, reason="FailurePolicy", message="again", now=NOW + 10, job="vision/j", exclude_until=NOW + 400,
            exclude_node="n7")
    assert [(e["node"], e["until"]) for e in status["placement"]["excludedNodes"]] == [
        ("n2", format_time(NOW + 60)), ("n7", format_time(NOW + 400))]
    job["status"]["placement"]["excludedNodes"] += ["garbage", {"cluster": "x", "node": 7, "until": "x"},
                                                    {"cluster": "", "node": "n9", "until": format_time(NOW + 60)}]
    assert excluded_nodes(job, now=NOW) == {"x": frozenset({"n7"}), "y": frozenset({"n2"})}


def test_set_condition_moves_the_transition_time_only_on_a_status_change() -> None:
    status: dict[str, Any] = {}
    assert set_condition(status, type="Schedulable", state="False", reason="NoClusterFits", message="m", now=NOW)
    first = status["conditions"][0]["lastTransitionTime"]
    assert not set_condition(status, type="Schedulable", state="False", reason="NoClusterFits", message="m",
                             now=NOW + 100)
    assert set_condition(status, type="Schedulable", state="False", reason="NoClusterFits", message="m2",
                         now=NOW + 100)
    assert status["conditions"][0]["lastTransitionTime"] == first
    assert set_condition(status, type="Schedulable", state="True", reason="Placed", message="ok", now=NOW + 200)
    assert status["conditions"][0]["lastTransitionTime"] == format_time(NOW + 200)
    assert len(status["conditions"]) == 1


def test_retry_backoff_is_capped_exponential_with_jitter() -> None:
    book = RetryBook(initial=0.5, maximum=4.0, rng=random.Random(7))
    delays = [book.failed("u", now=0.0) for _ in range(8)]
    caps = [min(4.0, 0.5 * 2**i) for i in range(8)]
    assert all(cap / 2 <= d <= cap for d, cap in zip(delays, caps, strict=True)), delays
    assert book.not_before("u") == pytest.approx(delays[-1])
    book.succeeded("u")
    assert book.attempts("u") == 0 and book.not_before("u") == 0.0


def test_the_crash_hook_is_inert_unless_set() -> None:
    assert CRASH_ENV not in os.environ
    crash_point("mid-dispatch", job="a/b")  # returns: nothing is set
    code = ("import os; os.environ['FEDERATOR_TEST_CRASH_AT'] = 'after-dispatch'; "
            "os.environ['FEDERATOR_TEST_CRASH_JOB'] = 'a/b'; "
            "from federator.controllers.dispatch import crash_point; "
            "crash_point('mid-dispatch', job='a/b'); crash_point('after-dispatch', job='x/y'); "
            "print('alive', flush=True); crash_point('after-dispatch', job='a/b'); print('not reached')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == -9, (result.returncode, result.stdout, result.stderr)
    assert result.stdout.splitlines()[0] == "alive" and "not reached" not in result.stdout
