"""spec.failurePolicy's per-pod restarts through a real hub (sqlite store) and a simulated volcano member: a
gang with a restartPolicy OnFailure role whose one pod fails with an exit code (the simulator's fail-after and
exit-code annotations on that role's template) is restarted in place: only that pod is created again (every
other pod keeps its uid, the gang keeps its cluster and epoch), its history says so, and a RestartPod rule
counts toward spec.backoffLimit while an Ignore rule does not.

Where each action meets each of the simulator's pod failures (issue 29 item 4's bar):
- RestartPod: exit code, per pod (here) and whole gang (tests/controllers/test_failure_policy.py);
- Requeue: GPU fault, the default excluding the node and a rule excluding the cluster (same file);
- FailJob: exit code (same file), OOM and image pull (the defaults, same file), a batch Job's podFailurePolicy
  (tests/hub/test_job_kinds.py);
- Ignore: exit code (here, and tests/controllers/test_failure_policy.py), node loss (the default, same file and
  tests/controllers/test_worker_restart.py);
- Count: exit code (the default for anything else, here), GPU fault (a rule, tests/controllers/
  test_worker_restart.py), node loss (a rule, tests/controllers/test_status_sync.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from federator.controllers.status_sync import ANNOTATION_FAILURES
from federator.delegation.adapter import LABEL_ROLE
from federator.sim.kubelet import ANNOTATION_EXIT_CODE, ANNOTATION_FAIL_AFTER

from ..controllers.jobtest_support import condition, phase, placement_of, wait_until
from ..controllers.lifecycle_support import CLUSTER_LABEL, Env, history, lifecycle_env

CLUSTER = "onprem-rdma-a100"
NS = "team-a"


def flaky_gang(name: str, *, exit_code: int, rules: list[dict[str, Any]], backoff_limit: int) -> dict[str, Any]:
    """A PS, 2 GPU workers and one `flaky` pod (restartPolicy OnFailure) that exits `exit_code` a second after
    each start."""
    return {
        "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name, "namespace": NS},
        "spec": {
            "backoffLimit": backoff_limit,
            "failurePolicy": {"rules": rules},
            "roles": [
                {"name": "ps", "replicas": 1,
                 "template": {"image": "trainer:1.4", "resources": {"cpu": "2", "memory": "8Gi"}}},
                {"name": "worker", "replicas": 2,
                 "template": {"image": "trainer:1.4",
                              "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 8}}},
                {"name": "flaky", "replicas": 1, "restartPolicy": "OnFailure",
                 "template": {"metadata": {"annotations": {ANNOTATION_FAIL_AFTER: "1",
                                                           ANNOTATION_EXIT_CODE: str(exit_code)}},
                              "spec": {"containers": [{"name": "main", "image": "trainer:1.4", "resources": {
                                  "requests": {"cpu": "1", "memory": "1Gi"}}}]}}},
            ],
            "placement": {"clusterSelector": {"matchLabels": {CLUSTER_LABEL: CLUSTER}}},
        },
    }


async def _gang(env: Env, uid: str) -> dict[str, dict[str, Any]]:
    """The gang's live pods, by name, once all four are there."""

    async def four() -> dict[str, dict[str, Any]] | None:
        pods = {p["metadata"]["name"]: p for p in await env.live_pods(CLUSTER, uid)}
        return pods if len(pods) == 4 else None

    return await wait_until(four, what="the gang's four pods", timeout=30)


def _role(pods: dict[str, dict[str, Any]], role: str) -> list[dict[str, Any]]:
    return [p for p in pods.values() if p["metadata"]["labels"][LABEL_ROLE] == role]


async def _restarted_in_place(env: Env, name: str, *, exit_code: int, rule: str) -> tuple[dict[str, Any], str]:
    """Submit the flaky gang; wait for its first restart; check that only the flaky pod was created again (the
    other pods' uids are read once the gang is up: they never change unless the gang is placed again). Returns
    the job as it was then and the restart's history message."""
    uid = (await env.api.submit(flaky_gang(name, exit_code=exit_code, backoff_limit=1, rules=[
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
        {"action": "RestartPod", "onExitCodes": {"operator": "In", "values": [4]}},
    ])))["metadata"]["uid"]
    job = await env.api.wait_job(NS, name, lambda j: phase(j) in ("Admitted", "Running"), timeout=30,
                                 what="admitted")
    epoch = placement_of(job)["epoch"]
    pods = await _gang(env, uid)
    (flaky,) = _role(pods, "flaky")
    steady = {n: p["metadata"]["uid"] for n, p in pods.items() if n != flaky["metadata"]["name"]}
    job = await env.api.wait_job(NS, name, lambda j: bool(history(j, "PodRestarted")), timeout=30,
                                 what="PodRestarted")
    entry = history(job, "PodRestarted")[0]
    assert entry["message"].startswith(
        f"pods created again in cluster {CLUSTER} (epoch {epoch}): {flaky['metadata']['name']};"), entry
    assert f"exit code {exit_code}" in entry["message"] and rule in entry["message"], entry
    assert entry["cluster"] == CLUSTER and entry["epoch"] == epoch
    assert placement_of(job)["cluster"] == CLUSTER and placement_of(job)["epoch"] == epoch
    assert not history(job, "FailurePolicy") and not job["status"].get("requeues")
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await env.live_pods(CLUSTER, uid)}
    # the rest of the gang never stopped: same pods, same uids
    assert {n: after.get(n) for n in steady} == steady, (steady, after)
    return job, entry["message"]


async def test_a_restart_pod_rule_restarts_only_the_failed_pod_and_counts_it(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        _, message = await _restarted_in_place(env, "restartpod", exit_code=4,
                                               rule="spec.failurePolicy.rules[1] (exit code 4 In [4]): RestartPod")
        assert "1 of spec.backoffLimit 1 failures counted" in message and "[counted]" in message, message
        # the pod fails again: 2 counted failures > backoffLimit 1, the job fails with the pods' reasons
        job = await env.api.wait_job(NS, "restartpod", lambda j: phase(j) == "Failed", timeout=30, what="failed")
        failed = condition(job, "Failed")
        assert failed is not None and failed["reason"] == "BackoffLimitExceeded", failed
        assert "2 pod failures counted, more than spec.backoffLimit 1" in failed["message"], failed
        assert len(history(job, "PodRestarted")) == 1


async def test_an_ignore_rule_restarts_the_failed_pod_in_place_without_counting(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        _, message = await _restarted_in_place(env, "ignored", exit_code=3,
                                               rule="spec.failurePolicy.rules[0] (exit code 3 In [3]): Ignore")
        assert "0 of spec.backoffLimit 1 failures counted" in message and "[not counted]" in message, message
        # it keeps failing and keeps being restarted in place, never counted: a second restart, still 0 counted
        job = await env.api.wait_job(NS, "ignored", lambda j: len(history(j, "PodRestarted")) >= 2, timeout=30,
                                     what="a second PodRestarted")
        assert phase(job) != "Failed"
        assert "0 of spec.backoffLimit 1 failures counted" in history(job, "PodRestarted")[1]["message"]
        uid = job["metadata"]["uid"]

        async def flaky_again() -> dict[str, Any] | None:
            (flaky,) = _role(await _gang(env, uid), "flaky")
            attempt = flaky["metadata"]["annotations"].get("federator.dev/attempt") or "0"
            return flaky if attempt.isdigit() and int(attempt) >= 2 else None

        flaky = await wait_until(flaky_again, what="the flaky pod at its third attempt", timeout=30)
        assert flaky["metadata"]["annotations"].get(ANNOTATION_FAILURES) == "0"


async def test_an_unmatched_exit_code_counts_by_default(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        # exit code 5: no rule matches, the default is Count (backoffLimit 0: the first failure fails the job)
        await env.api.submit(flaky_gang("counted", exit_code=5, backoff_limit=0, rules=[
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}}]))
        job = await env.api.wait_job(NS, "counted", lambda j: phase(j) == "Failed", timeout=30, what="failed")
        failed = condition(job, "Failed")
        assert failed is not None and failed["reason"] == "BackoffLimitExceeded", failed
        assert "exit code 5" in failed["message"] and "default (other failure): Count" in failed["message"], failed
        assert not history(job, "PodRestarted")
