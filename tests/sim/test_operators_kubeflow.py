"""The emulated Kubeflow training-operator v1.8.1 of a simulated member (federator/sim/operators/kubeflow.py), driven
by real kubectl and the official `kubernetes` client with the operator's own examples from the Go module cache,
unchanged: pod and Service names, labels, env (PyTorch and PET, TF_CONFIG, PADDLE_*), conditions and
replicaStatuses, suspend and resume, failed pods re-created, cleanPodPolicy, cascading deletion, and bad input
refused with nothing stored."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from operators_support import (
    KUBECTL,
    LONG_RUN,
    TRAINING_OPERATOR,
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
from federator.sim.operators.kubeflow import KUBEFLOW_SERVED

go_module = jobkinds_conftest.go_module
GROUP, VERSION = "kubeflow.org", "v1"
RT = {rt.kind: rt for rt in KUBEFLOW_SERVED}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedSim]:
    cluster = ThreadedSim(operator_profile("kftest"), tmp_path_factory.mktemp("kfsim"), bookmark_interval=1.0).start()
    try:
        async def namespace() -> None:  # the examples name it
            await cluster.c.storage.create(kinds.NAMESPACES, {"metadata": {"name": "kubeflow"}}, namespace=None)

        cluster.run(namespace)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def api(sim: ThreadedSim) -> Iterator[client.ApiClient]:
    with official_client(sim) as api_client:
        yield api_client


@pytest.fixture
def examples(go_module: Any) -> Path:
    path: Path = go_module(TRAINING_OPERATOR) / "examples"
    return path


def env_pairs(container: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(e["name"], e.get("value", e.get("valueFrom"))) for e in container.get("env") or ()]


def pods_by_name(sim: ThreadedSim, ns: str, job: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in listed(sim, kinds.PODS, ns, f"training.kubeflow.org/job-name={job}")}


def finished(kind: str, job: str, ctype: str = "Succeeded") -> Any:
    def check(items: list[dict[str, Any]]) -> Any:
        for item in items:
            if item["metadata"]["name"] == job and condition_status(item, ctype) == "True":
                return item
        return None

    return check


def renamed(body: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    body["metadata"]["name"] = name
    body["metadata"]["namespace"] = namespace
    return body


@needs_kubectl
def test_upstream_pytorch_job_with_kubectl(sim: ThreadedSim, tmp_path: Path, examples: Path) -> None:
    manifest = examples / "pytorch" / "simple.yaml"
    out = kubectl(sim, tmp_path, "apply", "-f", str(manifest)).stdout.strip()
    assert out == "pytorchjob.kubeflow.org/pytorch-simple created"
    kubectl(sim, tmp_path, "wait", "-n", "kubeflow", "--for=condition=Succeeded", "pytorchjob/pytorch-simple",
            "--timeout=60s")
    job = yaml.safe_load(kubectl(sim, tmp_path, "get", "-n", "kubeflow", "pytorchjob/pytorch-simple", "-o",
                                 "yaml").stdout)
    conditions = [(c["type"], c["status"], c["reason"], c["message"]) for c in job["status"]["conditions"]]
    # Running (then False) is there when a pass of the operator saw the Master running, as in the real operator
    assert [c for c in conditions if c[0] != "Running"] == [
        ("Created", "True", "PyTorchJobCreated", "PyTorchJob pytorch-simple is created."),
        ("Succeeded", "True", "PyTorchJobSucceeded", "PyTorchJob pytorch-simple is successfully completed."),
    ]
    assert [c for c in conditions if c[0] == "Running"] in (
        [], [("Running", "False", "PyTorchJobRunning", "PyTorchJob pytorch-simple is running.")])
    assert job["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
    assert job["status"]["startTime"] and job["status"]["completionTime"]
    # the operator defaults in memory: the stored spec is what was applied
    assert "ports" not in job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    pods = pods_by_name(sim, "kubeflow", "pytorch-simple")
    assert sorted(pods) == ["pytorch-simple-master-0", "pytorch-simple-worker-0"]
    master, worker = pods["pytorch-simple-master-0"], pods["pytorch-simple-worker-0"]
    common = {"training.kubeflow.org/operator-name": "pytorchjob-controller",
              "training.kubeflow.org/job-name": "pytorch-simple", "training.kubeflow.org/replica-index": "0"}
    assert master["metadata"]["labels"] == {**common, "training.kubeflow.org/replica-type": "master",
                                            "training.kubeflow.org/job-role": "master"}
    assert worker["metadata"]["labels"] == {**common, "training.kubeflow.org/replica-type": "worker"}
    assert master["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    assert master["spec"]["restartPolicy"] == "OnFailure"
    addr = [("MASTER_PORT", "23456"), ("PET_MASTER_PORT", "23456"), ("MASTER_ADDR", "pytorch-simple-master-0"),
            ("PET_MASTER_ADDR", "pytorch-simple-master-0"), ("WORLD_SIZE", "2")]
    assert env_pairs(master["spec"]["containers"][0]) == [
        ("PYTHONUNBUFFERED", "1"), *addr, ("RANK", "0"), ("PET_NODE_RANK", "0"), ("PET_NPROC_PER_NODE", "auto"),
        ("PET_NNODES", "2")]
    assert env_pairs(worker["spec"]["containers"][0]) == [
        ("PYTHONUNBUFFERED", "1"), *addr, ("RANK", "1"), ("PET_NODE_RANK", "1"), ("PET_NPROC_PER_NODE", "auto"),
        ("PET_NNODES", "2")]
    assert [(p["name"], p["containerPort"]) for p in master["spec"]["containers"][0]["ports"]] == [
        ("pytorchjob-port", 23456)]
    assert [c["name"] for c in worker["spec"]["initContainers"]] == ["init-pytorch"]
    assert "nslookup pytorch-simple-master-0" in worker["spec"]["initContainers"][0]["command"][2]
    assert "initContainers" not in master["spec"]
    services = {s["metadata"]["name"]: s for s in listed(sim, kinds.SERVICES, "kubeflow",
                                                         "training.kubeflow.org/job-name=pytorch-simple")}
    assert sorted(services) == sorted(pods)
    svc = services["pytorch-simple-master-0"]["spec"]
    assert svc["clusterIP"] == "None" and svc["ports"][0]["port"] == 23456
    assert svc["selector"] == {k: v for k, v in master["metadata"]["labels"].items()
                               if k != "training.kubeflow.org/job-role"}
    rows = [line.split() for line in kubectl(sim, tmp_path, "get", "pytorchjobs", "-n", "kubeflow").stdout.splitlines()]
    assert rows[0] == ["NAME", "STATE", "AGE"] and rows[1][:2] == ["pytorch-simple", "Succeeded"]
    # cleanPodPolicy None: the pods stay; deleting the job takes them and the Services (garbage collector)
    kubectl(sim, tmp_path, "delete", "-n", "kubeflow", "pytorchjob/pytorch-simple")
    wait_objects(sim, kinds.PODS, "kubeflow", lambda ps: not [p for p in ps if p["metadata"]["name"] in pods],
                 what="the PyTorchJob's pods to go")
    wait_objects(sim, kinds.SERVICES, "kubeflow", lambda ss: not [s for s in ss if s["metadata"]["name"] in pods],
                 what="the PyTorchJob's Services to go")


def test_upstream_tfjob_gets_tf_config(sim: ThreadedSim, api: client.ApiClient, examples: Path) -> None:
    body = read_yaml(examples / "tensorflow" / "simple.yaml")
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, "kubeflow", "tfjobs", body)
    job = wait_objects(sim, RT["TFJob"], "kubeflow", finished("TFJob", "tfjob-simple"), what="the TFJob to succeed")
    reasons = [c["reason"] for c in job["status"]["conditions"]]
    assert reasons in (["TFJobCreated", "TFJobRunning", "TFJobSucceeded"], ["TFJobCreated", "TFJobSucceeded"])
    # worker 0 done ends the job (successPolicy ""); worker 1 is counted succeeded if it was running by then
    assert job["status"]["replicaStatuses"]["Worker"]["succeeded"] in (1, 2)
    pods = pods_by_name(sim, "kubeflow", "tfjob-simple")
    assert sorted(pods) == ["tfjob-simple-worker-0", "tfjob-simple-worker-1"]
    for index in (0, 1):
        pod = pods[f"tfjob-simple-worker-{index}"]
        [(name, value)] = env_pairs(pod["spec"]["containers"][0])
        assert name == "TF_CONFIG"
        assert value == ('{"cluster":{"worker":["tfjob-simple-worker-0.kubeflow.svc:2222",'
                         '"tfjob-simple-worker-1.kubeflow.svc:2222"]},'
                         f'"task":{{"type":"worker","index":{index}}},"environment":"cloud"}}')
        assert json.loads(value)["task"] == {"type": "worker", "index": index}
        assert pod["spec"]["restartPolicy"] == "OnFailure"
    assert pods["tfjob-simple-worker-0"]["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"
    assert "training.kubeflow.org/job-role" not in pods["tfjob-simple-worker-1"]["metadata"]["labels"]


def test_upstream_paddlejob_gets_paddle_env(sim: ThreadedSim, api: client.ApiClient, examples: Path) -> None:
    body = read_yaml(examples / "paddlepaddle" / "simple-cpu.yaml")
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, "kubeflow", "paddlejobs", body)
    wait_objects(sim, RT["PaddleJob"], "kubeflow", finished("PaddleJob", "paddle-simple-cpu"),
                 what="the PaddleJob to succeed")
    pods = pods_by_name(sim, "kubeflow", "paddle-simple-cpu")
    base = [("PYTHONUNBUFFERED", "1"), ("PADDLE_JOB_ID", "paddle-simple-cpu"), ("PADDLE_NNODES", "2")]
    assert env_pairs(pods["paddle-simple-cpu-worker-0"]["spec"]["containers"][0]) == [
        *base, ("POD_IP_DUMMY", {"fieldRef": {"fieldPath": "status.podIP"}}),
        ("PADDLE_MASTER", "$(POD_IP_DUMMY):37777")]
    assert env_pairs(pods["paddle-simple-cpu-worker-1"]["spec"]["containers"][0]) == [
        *base, ("PADDLE_MASTER", "paddle-simple-cpu-worker-0:37777")]
    [svc] = [s for s in listed(sim, kinds.SERVICES, "kubeflow")
             if s["metadata"]["name"] == "paddle-simple-cpu-worker-1"]
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("master", 37777)]


def test_elastic_pytorch_example_gets_pet_env(sim: ThreadedSim, api: client.ApiClient, examples: Path) -> None:
    ns = sim.new_namespace("elastic")
    body = read_yaml(examples / "pytorch" / "elastic" / "echo" / "echo.yaml")
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", body)
    wait_objects(sim, RT["PyTorchJob"], ns, finished("PyTorchJob", "elastic-example-echo"),
                 what="the elastic job to succeed")
    pods = pods_by_name(sim, ns, "elastic-example-echo")
    assert sorted(pods) == ["elastic-example-echo-worker-0", "elastic-example-echo-worker-1"]
    assert env_pairs(pods["elastic-example-echo-worker-1"]["spec"]["containers"][0]) == [
        ("LOGLEVEL", "DEBUG"), ("PYTHONUNBUFFERED", "1"), ("PET_NPROC_PER_NODE", "auto"),
        ("PET_RDZV_ENDPOINT", "elastic-example-echo-worker-0:23456"), ("PET_RDZV_BACKEND", "c10d"),
        ("PET_NNODES", "1:2"), ("PET_MAX_RESTARTS", "100")]
    assert "initContainers" not in pods["elastic-example-echo-worker-1"]["spec"]


def test_a_scaled_pytorchjob_gets_pods_of_new_indices_and_loses_those_above(sim: ThreadedSim, api: client.ApiClient,
                                                                            examples: Path) -> None:
    """A change of Worker replicas (what the scale subresource and the operator's HPA patch): pods and Services of
    new indices are created with the env of the job as it is then, those at or above the count deleted; the env
    of the pods that stay is not changed (ReconcilePods, ReconcileServices, createNewPod)."""
    ns = sim.new_namespace("kfscale")
    custom = client.CustomObjectsApi(api)
    body = renamed(read_yaml(examples / "pytorch" / "simple.yaml"), "scaled", ns)  # Master 1, Worker 1
    body["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3}
    for rspec in body["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["metadata"] = {"annotations": dict(LONG_RUN)}
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", body)

    def running(names: list[str]) -> Any:
        def check(pods: list[dict[str, Any]]) -> Any:
            live = sorted(p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp"))
            return pods if live == names and all(p["status"].get("phase") == "Running" for p in pods) else None
        return check

    def world(pod: dict[str, Any]) -> str:
        return dict(env_pairs(pod["spec"]["containers"][0]))["WORLD_SIZE"]

    wait_objects(sim, kinds.PODS, ns, running(["scaled-master-0", "scaled-worker-0"]), what="master and 1 worker")
    first = pods_by_name(sim, ns, "scaled")["scaled-worker-0"]
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", "scaled",
                                          {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}})
    wait_objects(sim, kinds.PODS, ns, running(["scaled-master-0", "scaled-worker-0", "scaled-worker-1",
                                               "scaled-worker-2"]), what="3 workers")
    pods = pods_by_name(sim, ns, "scaled")
    assert world(pods["scaled-worker-2"]) == "4" and dict(env_pairs(pods["scaled-worker-2"]["spec"]["containers"][0]))[
        "PET_NNODES"] == "1:3"
    assert pods["scaled-worker-0"]["metadata"]["uid"] == first["metadata"]["uid"] and world(pods["scaled-worker-0"]) \
        == "2"  # the pod that stays keeps its env
    wait_objects(sim, kinds.SERVICES, ns, lambda ss: len(ss) == 4 and ss, what="a Service per pod")
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", "scaled",
                                          {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}})
    wait_objects(sim, kinds.PODS, ns, lambda ps: sorted(p["metadata"]["name"] for p in ps) == [
        "scaled-master-0", "scaled-worker-0", "scaled-worker-1"] and ps, what="worker 2 gone")
    wait_objects(sim, kinds.SERVICES, ns, lambda ss: sorted(s["metadata"]["name"] for s in ss) == [
        "scaled-master-0", "scaled-worker-0", "scaled-worker-1"] and ss, what="its Service gone")
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", "scaled", propagation_policy="Background")
    wait_objects(sim, kinds.PODS, ns, lambda ps: not ps, what="the deleted job's pods to go")


def test_suspend_resume_and_cascade(sim: ThreadedSim, api: client.ApiClient, examples: Path) -> None:
    ns = sim.new_namespace("kfs")
    custom = client.CustomObjectsApi(api)
    body = renamed(read_yaml(examples / "pytorch" / "simple.yaml"), "held", ns)
    body["spec"]["runPolicy"] = {"suspend": True}
    for rspec in body["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["metadata"] = {"annotations": dict(LONG_RUN), "labels": {"hub": "x"}}
        rspec["template"]["spec"]["schedulerName"] = "volcano"
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", body)
    job = wait_objects(sim, RT["PyTorchJob"], ns, finished("PyTorchJob", "held", "Suspended"),
                       what="the Suspended condition")
    assert [c["reason"] for c in job["status"]["conditions"]] == ["PyTorchJobCreated", "PyTorchJobSuspended"]
    assert listed(sim, kinds.PODS, ns) == [] and listed(sim, kinds.SERVICES, ns) == []
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", "held",
                                          {"spec": {"runPolicy": {"suspend": False}}})
    pods = wait_objects(sim, kinds.PODS, ns, lambda ps: len([p for p in ps if p["status"].get("phase") == "Running"])
                        == 2 and ps, what="two running pods")
    for pod in pods:  # the template's labels, annotations and schedulerName are the pod's
        assert pod["metadata"]["labels"]["hub"] == "x" and pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"] == LONG_RUN
    job = wait_objects(sim, RT["PyTorchJob"], ns, finished("PyTorchJob", "held", "Running"), what="Running")
    suspended = [c for c in job["status"]["conditions"] if c["type"] == "Suspended"][0]
    assert (suspended["status"], suspended["reason"]) == ("False", "PyTorchJobResumed")
    assert len(listed(sim, kinds.SERVICES, ns)) == 2
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", "held",
                                          {"spec": {"runPolicy": {"suspend": True}}})
    wait_objects(sim, kinds.PODS, ns, lambda ps: not ps, what="the suspended job's pods to go")
    wait_objects(sim, kinds.SERVICES, ns, lambda ss: not ss, what="the suspended job's Services to go")
    job = wait_objects(sim, RT["PyTorchJob"], ns, finished("PyTorchJob", "held", "Suspended"), what="Suspended")
    assert condition_status(job, "Running") == "False"
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", "held",
                                          {"spec": {"runPolicy": {"suspend": False}}})
    wait_objects(sim, kinds.SERVICES, ns, lambda ss: len(ss) == 2, what="the Services again")
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", "held", propagation_policy="Background")
    wait_objects(sim, kinds.PODS, ns, lambda ps: not ps, what="the deleted job's pods to go")
    wait_objects(sim, kinds.SERVICES, ns, lambda ss: not ss, what="the deleted job's Services to go")


def test_failed_pods_are_recreated_or_fail_the_job(sim: ThreadedSim, api: client.ApiClient, examples: Path) -> None:
    ns = sim.new_namespace("kfr")
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    # OnFailure: the kubelet restarts a container in place; a pod that ends Failed anyway (evicted) is re-created
    body = renamed(read_yaml(examples / "pytorch" / "simple.yaml"), "evicted", ns)
    for rspec in body["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["metadata"] = {"annotations": dict(LONG_RUN)}
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", body)
    pods = wait_objects(sim, kinds.PODS, ns, lambda ps: len([p for p in ps if p["status"].get("phase") == "Running"])
                        == 2 and ps, what="two running pods")
    old = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    core.patch_namespaced_pod_status("evicted-worker-0", ns, {"status": {"phase": "Failed", "reason": "Evicted"}})
    wait_objects(sim, kinds.PODS, ns, lambda ps: any(
        p["metadata"]["name"] == "evicted-worker-0" and p["metadata"]["uid"] != old["evicted-worker-0"] for p in ps),
        what="the evicted worker re-created under its name")
    # (the operator's Restarting condition is replaced by Running in the same pass while the Master runs, as
    # setCondition's filterOutCondition does, so the new pod is what there is to see)
    # ExitCode: a retryable code (>= 128) re-creates the pod, another fails the job
    for name, code, outcome in (("retry", "137", None), ("fatal", "1", "Failed")):
        body = renamed(read_yaml(examples / "pytorch" / "simple.yaml"), name, ns)
        for rtype, rspec in body["spec"]["pytorchReplicaSpecs"].items():
            rspec["restartPolicy"] = "ExitCode"
            rspec["template"]["metadata"] = {"annotations": dict(LONG_RUN) if rtype == "Master" else {
                ANNOTATION_FAIL_AFTER: "0.2", ANNOTATION_EXIT_CODE: code}}
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", body)
        if outcome is None:
            seen: set[str] = set()

            def recreated(ps: list[dict[str, Any]], pod_name: str = f"{name}-worker-0") -> bool:
                seen.update(p["metadata"]["uid"] for p in ps if p["metadata"]["name"] == pod_name)
                return len(seen) >= 2

            wait_objects(sim, kinds.PODS, ns, recreated, what=f"{name}-worker-0 failed with 137 and re-created")
            assert condition_status(custom.get_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", name),
                                    "Failed") is None
            master = core.read_namespaced_pod(f"{name}-master-0", ns)  # the one that stays
            assert master.spec.restart_policy == "Never"
        else:
            job = wait_objects(sim, RT["PyTorchJob"], ns, finished("PyTorchJob", name, outcome),
                               what=f"{name}: {outcome}")
            failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"][0]
            assert failed["reason"] == "PyTorchJobFailed"
            assert failed["message"] == 'job "fatal" is failing because "Worker" replica(s) failed.'
            pod = core.read_namespaced_pod(f"{name}-worker-0", ns)
            assert pod.spec.restart_policy == "Never" and pod.status.phase == "Failed"
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", name)


def test_clean_pod_policy_all(sim: ThreadedSim, api: client.ApiClient, examples: Path) -> None:
    ns = sim.new_namespace("kfc")
    body = renamed(read_yaml(examples / "tensorflow" / "simple.yaml"), "tidy", ns)
    body["spec"]["runPolicy"] = {"cleanPodPolicy": "All"}
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, "tfjobs", body)
    wait_objects(sim, RT["TFJob"], ns, finished("TFJob", "tidy"), what="the TFJob to succeed")
    wait_objects(sim, kinds.PODS, ns, lambda ps: not ps, what="cleanPodPolicy All to delete the pods")
    wait_objects(sim, kinds.SERVICES, ns, lambda ss: not ss, what="and their Services")


def test_bad_kubeflow_jobs_are_refused_and_nothing_is_stored(sim: ThreadedSim, api: client.ApiClient,
                                                             examples: Path, tmp_path: Path) -> None:
    ns = sim.new_namespace("kfbad")
    custom = client.CustomObjectsApi(api)
    edits: list[tuple[str, Any, str]] = [
        ("spec.pytorchReplicaSpecs.Worker.replicas", "two", "must be of type integer"),
        ("spec.runPolicy", {"suspend": "yes"}, "must be of type boolean"),
        ("spec.pytorchReplicaSpecs.Master.replicas", 2, "must be 1"),
        ("spec.pytorchReplicaSpecs.Launcher", {"replicas": 1}, "supported values"),
        ("spec.pytorchReplicaSpecs.Worker.template.spec.containers.0.name", "trainer",
         "must have at least one container with name pytorch"),
        ("spec.pytorchReplicaSpecs", {}, "must be required"),
        ("metadata.name", "7up", "should match: a DNS-1035 label"),
        ("spec.pytorchReplicaSpecs.Worker.replicas", 2 ** 31, "out of range for int32"),
        ("spec.pytorchReplicaSpecs.Worker.template.spec.containers.0.image", "", "must be required"),
    ]
    for path, value, words in edits:
        body = renamed(read_yaml(examples / "pytorch" / "simple.yaml"), "bad", ns)
        jobkinds_conftest.set_at(body, path, value)
        code, answer = raw_request(sim, "POST", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/pytorchjobs",
                                   json.dumps(body).encode())
        assert code == 422 and answer["reason"] == "Invalid", (path, answer)
        assert words in answer["message"], (path, answer["message"])
    body = renamed(read_yaml(examples / "pytorch" / "simple.yaml"), "bad", ns)
    body["spec"]["pytorchReplicaSpecs"]["Master"]["bogus"] = 1
    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", body, field_validation="Strict")
    assert info.value.status == 400 and "bogus" in info.value.body
    if os.path.exists(KUBECTL):
        proc = kubectl(sim, tmp_path, "apply", "-f", "-", stdin=yaml.safe_dump(body), check=False)
        assert proc.returncode != 0 and 'unknown field "spec.pytorchReplicaSpecs.Master.bogus"' in proc.stderr
    assert listed(sim, RT["PyTorchJob"], ns) == [] and listed(sim, kinds.PODS, ns) == []


def test_operator_pods_join_the_gang_the_hub_prepares(sim: ThreadedSim, api: client.ApiClient, examples: Path) -> None:
    """What the hub's operator mode does (docs of issue 28, opmode §2): a suspended copy whose templates carry a
    Volcano PodGroup's scheduler and annotation, the PodGroup, then resume: the operator's pods join the gang,
    the member's gang scheduler binds them together and the kubelet runs them to the end."""
    ns = sim.new_namespace("gang")
    custom = client.CustomObjectsApi(api)
    body = renamed(read_yaml(examples / "pytorch" / "simple.yaml"), "ganged", ns)
    body["spec"]["runPolicy"] = {"suspend": True}
    for rspec in body["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["metadata"] = {"annotations": {"scheduling.k8s.io/group-name": "ganged"}}
        rspec["template"]["spec"]["schedulerName"] = "volcano"
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", body)
    custom.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", ns, "podgroups", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "ganged"},
        "spec": {"minMember": 2}})
    wait_objects(sim, RT["PyTorchJob"], ns, finished("PyTorchJob", "ganged", "Suspended"), what="Suspended")
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", "ganged",
                                          {"spec": {"runPolicy": {"suspend": False}}})
    job = wait_objects(sim, RT["PyTorchJob"], ns, finished("PyTorchJob", "ganged"), what="the gang to succeed")
    # a PyTorchJob succeeds with its Master (the operator's rule): the Worker may still be finishing then
    assert job["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
    pods = listed(sim, kinds.PODS, ns)
    assert len(pods) == 2 and all(p["spec"]["schedulerName"] == "volcano" and p["spec"].get("nodeName")
                                  and p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "ganged"
                                  for p in pods)
