"""The emulated batch/v1 Job controller and JobSet controller of a simulated member (federator/sim/operators),
driven by real kubectl and the official `kubernetes` client with upstream examples, unchanged: pod, Job and
Service names, labels, annotations, hostnames, env, status conditions, suspend and resume, backoffLimit,
cascading deletion, and bad input refused with nothing stored."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from operators_support import (
    KUBECTL,
    JOBSET_EXAMPLES,
    KUBERNETES,
    LONG_RUN,
    condition_status,
    jobkinds_conftest,
    kubectl,
    listed,
    needs_kubectl,
    official_client,
    operator_profile,
    read_yaml,
    wait_objects,
)
from simapi_support import ThreadedSim, raw_request

from federator.sim import kinds
from federator.sim.kubelet import ANNOTATION_EXIT_CODE, ANNOTATION_FAIL_AFTER
from federator.sim.operators.served import JOB, JOBSET
from federator.sim.operators import with_operator_kinds

go_module = jobkinds_conftest.go_module
JS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedSim]:
    cluster = ThreadedSim(operator_profile(), tmp_path_factory.mktemp("opsim"), bookmark_interval=1.0).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def api(sim: ThreadedSim) -> Iterator[client.ApiClient]:
    with official_client(sim) as api_client:
        yield api_client


def pods_of(sim: ThreadedSim, ns: str, selector: str) -> list[dict[str, Any]]:
    return listed(sim, kinds.PODS, ns, selector)


def stored(sim: ThreadedSim, rt: Any, ns: str) -> list[dict[str, Any]]:
    return listed(sim, rt, ns)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or ()}


# ---------------------------------------------------------------- discovery


def test_operator_kinds_are_served_only_when_enabled() -> None:
    plain = kinds.sim_registry(None)
    assert plain.get("jobset.x-k8s.io", "v1alpha2", "jobsets") is None
    assert plain.get("batch", "v1", "jobs") is None
    with_jobset = with_operator_kinds(kinds.sim_registry(None), ["jobset"])
    # JobSet needs batch/v1 Jobs: asking for it serves both
    assert with_jobset.get("jobset.x-k8s.io", "v1alpha2", "jobsets") is not None
    assert with_jobset.get("batch", "v1", "jobs") is not None
    with pytest.raises(ValueError, match="unknown operator 'argo'"):
        with_operator_kinds(kinds.sim_registry(None), ["argo"])
    with pytest.raises(ValueError, match="unknown operators"):
        operator_profile().model_validate({**operator_profile().model_dump(by_alias=True), "operators": ["argo"]})


@needs_kubectl
def test_kubectl_discovers_the_kinds(sim: ThreadedSim, tmp_path: Path) -> None:
    rows = [line.split() for line in kubectl(sim, tmp_path, "api-resources").stdout.splitlines()]
    names = {r[0] for r in rows[1:]}
    assert {"jobs", "jobsets"} <= names, names
    explained = kubectl(sim, tmp_path, "explain", "jobset.spec.replicatedJobs").stdout
    assert "replicas" in explained and "template" in explained


# ---------------------------------------------------------------- batch/v1 Job


@needs_kubectl
def test_upstream_pi_job_runs_to_complete_with_kubectl(sim: ThreadedSim, tmp_path: Path,
                                                       go_module: Any) -> None:
    ns = sim.new_namespace("pi")
    manifest = go_module(KUBERNETES) / "test/fixtures/doc-yaml/user-guide/job.yaml"
    assert kubectl(sim, tmp_path, "apply", "-n", ns, "-f", str(manifest)).stdout.strip() == "job.batch/pi created"
    kubectl(sim, tmp_path, "wait", "-n", ns, "--for=condition=Complete", "job/pi", "--timeout=60s")
    job = read_yaml_text(kubectl(sim, tmp_path, "get", "-n", ns, "job/pi", "-o", "yaml").stdout)
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["completions"] == 1 and job["spec"]["parallelism"] == 1 and job["spec"]["backoffLimit"] == 6
    assert job["status"]["succeeded"] == 1 and job["status"].get("completionTime")
    assert [c["type"] for c in job["status"]["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    [pod] = pods_of(sim, ns, "batch.kubernetes.io/job-name=pi")
    assert re.fullmatch(r"pi-[a-z0-9]{5}", pod["metadata"]["name"])
    labels = pod["metadata"]["labels"]
    assert labels == {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
                      "batch.kubernetes.io/job-name": "pi", "job-name": "pi"}
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": uid,
                                                   "controller": True, "blockOwnerDeletion": True}]
    assert "hostname" not in pod["spec"] and pod["status"]["phase"] == "Succeeded"
    assert "JOB_COMPLETION_INDEX" not in env_of(pod["spec"]["containers"][0])
    rows = [line.split() for line in kubectl(sim, tmp_path, "get", "jobs", "-n", ns).stdout.splitlines()]
    assert rows[0] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert rows[1][:3] == ["pi", "Complete", "1/1"]
    # delete cascades to the pods (background propagation)
    kubectl(sim, tmp_path, "delete", "-n", ns, "job/pi")
    wait_objects(sim, kinds.PODS, ns, lambda pods: not pods, what="the job's pods to be deleted")


def read_yaml_text(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def indexed_example() -> dict[str, Any]:
    """The Indexed Job of kubernetes.io's "Job with Pod-to-Pod Communication" (tests/apis/jobkinds)."""
    module = jobkinds_conftest.UPSTREAM.parent / "test_batchjob.py"
    text = module.read_text(encoding="utf-8")
    start = text.index('POD_TO_POD = """') + len('POD_TO_POD = """')
    return read_yaml_text(text[start:text.index('"""', start)])


def test_indexed_job_with_the_official_client(sim: ThreadedSim, api: client.ApiClient) -> None:
    ns = sim.new_namespace("idx")
    batch = client.BatchV1Api(api)
    body = indexed_example()
    created = batch.create_namespaced_job(ns, body)
    uid = created.metadata.uid
    assert created.spec.completion_mode == "Indexed" and created.spec.suspend is False

    def done(jobs: list[dict[str, Any]]) -> Any:
        return jobs and condition_status(jobs[0], "Complete") == "True" and jobs[0]

    job = wait_objects(sim, JOB, ns, done, what="the Indexed job to complete")
    assert job["status"]["completedIndexes"] == "0-2" and job["status"]["succeeded"] == 3
    pods = sorted(pods_of(sim, ns, f"batch.kubernetes.io/controller-uid={uid}"),
                  key=lambda p: p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
    assert len(pods) == 3
    for index, pod in enumerate(pods):
        meta, spec = pod["metadata"], pod["spec"]
        assert re.fullmatch(rf"example-job-{index}-[a-z0-9]{{5}}", meta["name"])
        assert meta["annotations"]["batch.kubernetes.io/job-completion-index"] == str(index)
        assert meta["labels"]["batch.kubernetes.io/job-completion-index"] == str(index)
        assert spec["hostname"] == f"example-job-{index}" and spec["subdomain"] == "headless-svc"
        assert env_of(spec["containers"][0])["JOB_COMPLETION_INDEX"] == {
            "fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}
    read = batch.read_namespaced_job_status("example-job", ns)
    assert read.status.completed_indexes == "0-2"


def test_job_suspend_resume_and_cascade(sim: ThreadedSim, api: client.ApiClient) -> None:
    ns = sim.new_namespace("susp")
    batch = client.BatchV1Api(api)
    body = indexed_example()
    body["spec"]["suspend"] = True
    body["spec"]["template"]["metadata"] = {"annotations": dict(LONG_RUN), "labels": {"team": "a"}}
    body["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    batch.create_namespaced_job(ns, body)
    wait_objects(sim, JOB, ns, lambda jobs: jobs and condition_status(jobs[0], "Suspended") == "True",
                 what="the Suspended condition")
    assert pods_of(sim, ns, "batch.kubernetes.io/job-name=example-job") == []
    batch.patch_namespaced_job("example-job", ns, {"spec": {"suspend": False}})
    pods = wait_objects(sim, kinds.PODS, ns, lambda ps: len([p for p in ps if p["status"].get("phase") == "Running"])
                        == 3 and ps, what="three running pods")
    for pod in pods:  # the template's labels, annotations and schedulerName are the pod's
        assert pod["metadata"]["labels"]["team"] == "a"
        assert pod["metadata"]["annotations"][next(iter(LONG_RUN))] == "3600"
        assert pod["spec"]["schedulerName"] == "volcano"
    job = batch.read_namespaced_job("example-job", ns)
    assert job.status.active == 3 and job.status.start_time is not None
    assert [(c.type, c.status, c.reason) for c in job.status.conditions] == [("Suspended", "False", "JobResumed")]
    batch.patch_namespaced_job("example-job", ns, {"spec": {"suspend": True}})
    wait_objects(sim, kinds.PODS, ns, lambda ps: not ps, what="the suspended job's pods to be deleted")
    job = batch.read_namespaced_job("example-job", ns)
    assert not job.status.active and condition_status(api.sanitize_for_serialization(job), "Suspended") == "True"
    batch.patch_namespaced_job("example-job", ns, {"spec": {"suspend": False}})
    wait_objects(sim, kinds.PODS, ns, lambda ps: len(ps) == 3, what="the resumed job's pods")
    batch.delete_namespaced_job("example-job", ns, propagation_policy="Background")
    wait_objects(sim, kinds.PODS, ns, lambda ps: not ps, what="the deleted job's pods")
    assert stored(sim, JOB, ns) == []


def test_job_fails_past_its_backoff_limit(sim: ThreadedSim, api: client.ApiClient) -> None:
    ns = sim.new_namespace("fail")
    body = indexed_example()
    body["spec"].update(completions=1, parallelism=1, backoffLimit=1)
    body["spec"]["template"]["metadata"] = {"annotations": {ANNOTATION_FAIL_AFTER: "0.1", ANNOTATION_EXIT_CODE: "3"}}
    client.BatchV1Api(api).create_namespaced_job(ns, body)
    job = wait_objects(sim, JOB, ns, lambda js: js and condition_status(js[0], "Failed") == "True" and js[0],
                       what="the job to fail")
    assert job["status"]["failed"] == 2
    failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"][0]
    assert failed["reason"] == "BackoffLimitExceeded"
    pods = pods_of(sim, ns, "batch.kubernetes.io/job-name=example-job")
    assert len(pods) == 2 and all(p["status"]["phase"] == "Failed" for p in pods)


def test_bad_jobs_are_refused_and_nothing_is_stored(sim: ThreadedSim, api: client.ApiClient, tmp_path: Path) -> None:
    ns = sim.new_namespace("bad")
    batch = client.BatchV1Api(api)
    for path, value in (("spec.template.spec.restartPolicy", "Always"), ("spec.parallelism", -1)):
        body = indexed_example()
        jobkinds_conftest.set_at(body, path, value)
        with pytest.raises(ApiException) as info:
            batch.create_namespaced_job(ns, body)
        assert info.value.status == 422, (path, info.value.body)
        assert path in info.value.body
    # wrong types, which the client refuses itself, and an int32 overflow, sent as they are
    for path, value in (("spec.completions", "three"), ("spec.suspend", "yes"), ("spec.template.spec.containers", {}),
                        ("spec.parallelism", 2 ** 31)):
        body = jobkinds_conftest.set_at(indexed_example(), path, value)
        code, answer = raw_request(sim, "POST", f"/apis/batch/v1/namespaces/{ns}/jobs", json.dumps(body).encode())
        assert code == 422 and answer["reason"] == "Invalid", (path, answer)
        assert path in answer["message"]
    if os.path.exists(KUBECTL):
        body = indexed_example()
        body["spec"]["nonsense"] = 1
        proc = kubectl(sim, tmp_path, "apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(body), check=False)
        assert proc.returncode != 0 and 'unknown field "spec.nonsense"' in proc.stderr
    assert stored(sim, JOB, ns) == [] and stored(sim, kinds.PODS, ns) == []


def test_the_garbage_collector_takes_dependents_of_gone_owners(sim: ThreadedSim, api: client.ApiClient) -> None:
    ns = sim.new_namespace("gc")
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    body = indexed_example()
    body["spec"]["suspend"] = True
    live = batch.create_namespaced_job(ns, body)

    def ref(kind: str, name: str, uid: str, api_version: str = "batch/v1") -> dict[str, Any]:
        return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}

    def pod(name: str, refs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "ownerReferences": refs},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}

    ghost = "00000000-0000-0000-0000-000000000001"
    core.create_namespaced_pod(ns, pod("orphan", [ref("Job", "ghost", ghost)]))
    core.create_namespaced_pod(ns, pod("replaced", [ref("Job", "example-job", ghost)]))
    core.create_namespaced_pod(ns, pod("owned", [ref("Job", "example-job", live.metadata.uid)]))
    other = ref("Node", "somewhere", "00000000-0000-0000-0000-000000000002", "v1")
    core.create_namespaced_pod(ns, pod("shared", [ref("Job", "ghost", ghost), other]))
    wait_objects(sim, kinds.PODS, ns, lambda ps: sorted(p["metadata"]["name"] for p in ps) == ["owned", "shared"],
                 what="the pods of gone owners to be deleted")
    shared = core.read_namespaced_pod("shared", ns)
    assert [r.kind for r in shared.metadata.owner_references] == ["Node"]  # released, not deleted
    batch.delete_namespaced_job("example-job", ns)
    wait_objects(sim, kinds.PODS, ns, lambda ps: [p["metadata"]["name"] for p in ps] == ["shared"],
                 what="the deleted job's pod to go")


# ---------------------------------------------------------------- JobSet


@needs_kubectl
def test_upstream_network_jobset_with_kubectl(sim: ThreadedSim, tmp_path: Path) -> None:
    ns = sim.new_namespace("net")
    manifest = JOBSET_EXAMPLES / "jobset-with-network.yaml"
    out = kubectl(sim, tmp_path, "apply", "-n", ns, "-f", str(manifest)).stdout.strip()
    assert out == "jobset.jobset.x-k8s.io/network-jobset created"
    kubectl(sim, tmp_path, "wait", "-n", ns, "--for=condition=Completed", "jobset/network-jobset", "--timeout=60s")
    js = read_yaml_text(kubectl(sim, tmp_path, "get", "-n", ns, "jobset/network-jobset", "-o", "yaml").stdout)
    uid = js["metadata"]["uid"]
    assert js["status"]["terminalState"] == "Completed"
    assert {s["name"]: s["succeeded"] for s in js["status"]["replicatedJobsStatus"]} == {"leader": 1, "workers": 1}
    # the webhook's defaults
    assert js["spec"]["successPolicy"] == {"operator": "All"}
    assert js["spec"]["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] == "Indexed"
    assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    jobs = {j["metadata"]["name"]: j for j in stored(sim, JOB, ns)}
    assert sorted(jobs) == ["network-jobset-leader-0", "network-jobset-workers-0"]
    workers = jobs["network-jobset-workers-0"]
    expected = {"jobset.sigs.k8s.io/jobset-name": "network-jobset", "jobset.sigs.k8s.io/jobset-uid": uid,
                "jobset.sigs.k8s.io/replicatedjob-name": "workers", "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
                "jobset.sigs.k8s.io/restart-attempt": "0", "jobset.sigs.k8s.io/global-replicas": "2",
                "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/job-global-index": "1",
                "jobset.sigs.k8s.io/group-name": "default", "jobset.sigs.k8s.io/group-replicas": "2",
                "jobset.sigs.k8s.io/job-group-index": "1",
                "jobset.sigs.k8s.io/job-key": hashlib.sha1(f"{ns}/network-jobset-workers-0".encode()).hexdigest()}
    assert expected.items() <= workers["metadata"]["labels"].items()
    assert expected.items() <= workers["metadata"]["annotations"].items()
    assert workers["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    [svc] = stored(sim, kinds.SERVICES, ns)
    assert svc["metadata"]["name"] == "example"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "network-jobset"}
    pods = pods_of(sim, ns, "jobset.sigs.k8s.io/replicatedjob-name=workers")
    assert sorted(p["spec"]["hostname"] for p in pods) == ["network-jobset-workers-0-0", "network-jobset-workers-0-1"]
    for pod in pods:
        assert pod["spec"]["subdomain"] == "example"
        assert re.fullmatch(r"network-jobset-workers-0-[01]-[a-z0-9]{5}", pod["metadata"]["name"])
        assert expected.items() <= pod["metadata"]["labels"].items()
    rows = [line.split() for line in kubectl(sim, tmp_path, "get", "jobsets", "-n", ns).stdout.splitlines()]
    assert rows[0] == ["NAME", "TERMINALSTATE", "RESTARTS", "COMPLETED", "SUSPENDED", "AGE"]
    assert rows[1][:2] == ["network-jobset", "Completed"]
    kubectl(sim, tmp_path, "delete", "-n", ns, "jobset/network-jobset")
    wait_objects(sim, kinds.PODS, ns, lambda ps: not ps, what="the jobset's pods to go")
    wait_objects(sim, JOB, ns, lambda js: not js, what="the jobset's jobs to go")
    assert stored(sim, kinds.SERVICES, ns) == []


def test_jobset_suspend_resume_and_cascade_with_the_official_client(sim: ThreadedSim, api: client.ApiClient) -> None:
    ns = sim.new_namespace("jss")
    custom = client.CustomObjectsApi(api)
    body = read_yaml(JOBSET_EXAMPLES / "jobset-paralleljobs.yaml")
    body["spec"]["suspend"] = True
    for rjob in body["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["template"]["metadata"] = {"annotations": dict(LONG_RUN)}
    custom.create_namespaced_custom_object(*JS[:2], ns, JS[2], body)
    js = wait_objects(sim, JOBSET, ns, lambda items: items and condition_status(items[0], "Suspended") == "True"
                      and items[0], what="a suspended jobset")
    assert [c["reason"] for c in js["status"]["conditions"]] == ["SuspendedJobs"]
    wait_objects(sim, JOB, ns, lambda jobs: len(jobs) == 2 and all(j["spec"]["suspend"] is True for j in jobs),
                 what="its two jobs, suspended")
    assert stored(sim, kinds.PODS, ns) == []
    custom.patch_namespaced_custom_object(*JS[:2], ns, JS[2], "paralleljobs", {"spec": {"suspend": False}})
    wait_objects(sim, kinds.PODS, ns, lambda ps: len([p for p in ps if p["status"].get("phase") == "Running"]) == 5,
                 what="five running pods")
    def resumed(items: list[dict[str, Any]]) -> Any:
        counts = {s["name"]: s for s in (items[0].get("status") or {}).get("replicatedJobsStatus") or ()} \
            if items else {}
        return items and condition_status(items[0], "Suspended") == "False" and counts and all(
            c["suspended"] == 0 and c["active"] == 1 for c in counts.values())

    wait_objects(sim, JOBSET, ns, resumed, what="the jobset resumed, no job suspended, each active")
    custom.patch_namespaced_custom_object(*JS[:2], ns, JS[2], "paralleljobs", {"spec": {"suspend": True}})
    wait_objects(sim, kinds.PODS, ns, lambda ps: not ps, what="the suspended jobset's pods to go")
    custom.delete_namespaced_custom_object(*JS[:2], ns, JS[2], "paralleljobs", propagation_policy="Background")
    wait_objects(sim, JOB, ns, lambda js: not js, what="the jobset's jobs to go")
    assert stored(sim, kinds.SERVICES, ns) == [] and stored(sim, JOBSET, ns) == []


def test_jobset_failure_and_restarts(sim: ThreadedSim, api: client.ApiClient) -> None:
    ns = sim.new_namespace("jsf")
    custom = client.CustomObjectsApi(api)
    body = read_yaml(JOBSET_EXAMPLES / "jobset-paralleljobs.yaml")
    body["spec"]["failurePolicy"] = {"maxRestarts": 1}
    driver = body["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    driver["metadata"] = {"annotations": {ANNOTATION_FAIL_AFTER: "0.1"}}
    driver["spec"]["restartPolicy"] = "Never"
    custom.create_namespaced_custom_object(*JS[:2], ns, JS[2], body)
    js = wait_objects(sim, JOBSET, ns, lambda items: items and condition_status(items[0], "Failed") == "True"
                      and items[0], what="the jobset to fail")
    assert js["status"]["restarts"] == 1 and js["status"]["terminalState"] == "Failed"
    failed = [c for c in js["status"]["conditions"] if c["type"] == "Failed"][0]
    assert failed["reason"] == "ReachedMaxRestarts"
    jobs = stored(sim, JOB, ns)
    assert {j["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for j in jobs} == {"1"}


def test_jobset_success_policy_any_deletes_what_still_runs(sim: ThreadedSim, api: client.ApiClient) -> None:
    ns = sim.new_namespace("jsany")
    body = read_yaml(JOBSET_EXAMPLES / "jobset-paralleljobs.yaml")
    body["spec"]["successPolicy"] = {"operator": "Any", "targetReplicatedJobs": ["driver"]}
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {"annotations": dict(LONG_RUN)}
    client.CustomObjectsApi(api).create_namespaced_custom_object(*JS[:2], ns, JS[2], body)
    js = wait_objects(sim, JOBSET, ns, lambda items: items and condition_status(items[0], "Completed") == "True"
                      and items[0], what="the driver to complete the jobset")
    assert js["status"]["terminalState"] == "Completed"
    wait_objects(sim, JOB, ns, lambda jobs: [j["metadata"]["name"] for j in jobs] == ["paralleljobs-driver-0"],
                 what="the still running workers job to be deleted")
    wait_objects(sim, kinds.PODS, ns, lambda ps: all(p["status"].get("phase") == "Succeeded" for p in ps),
                 what="only the driver's pod left")


def test_bad_jobsets_are_refused_and_nothing_is_stored(sim: ThreadedSim, api: client.ApiClient,
                                                       tmp_path: Path) -> None:
    ns = sim.new_namespace("jsbad")
    custom = client.CustomObjectsApi(api)
    for path, value in (("spec.replicatedJobs.0.replicas", "two"), ("spec.suspend", "no"),
                        ("spec.successPolicy", {"operator": "Most"}), ("spec.replicatedJobs.0.name", 7),
                        ("spec.replicatedJobs.1.name", "workers"), ("spec.replicatedJobs.0.replicas", 2 ** 40)):
        body = copy.deepcopy(read_yaml(JOBSET_EXAMPLES / "jobset-paralleljobs.yaml"))
        jobkinds_conftest.set_at(body, path, value)
        with pytest.raises(ApiException) as info:
            custom.create_namespaced_custom_object(*JS[:2], ns, JS[2], body)
        assert info.value.status == 422, (path, info.value.body)
        assert json.loads(info.value.body)["reason"] == "Invalid"
    body = read_yaml(JOBSET_EXAMPLES / "jobset-paralleljobs.yaml")
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["bogus"] = True
    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(*JS[:2], ns, JS[2], body, field_validation="Strict")
    assert info.value.status == 400 and "bogus" in info.value.body
    if os.path.exists(KUBECTL):
        proc = kubectl(sim, tmp_path, "apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(body), check=False)
        assert proc.returncode != 0 and "bogus" in proc.stderr
    assert stored(sim, JOBSET, ns) == [] and stored(sim, JOB, ns) == []
