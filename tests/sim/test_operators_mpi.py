"""The emulated mpi-operator v0.6.0 of a simulated member (federator/sim/operators/mpi.py), driven by real kubectl
and the official `kubernetes` client with the operator's own pi example from the Go module cache
(github.com/kubeflow/mpi-operator@v0.6.0 examples/v2beta1/pi/pi.yaml), unchanged: the Service, ConfigMap
(hostfile, discover_hosts.sh), ssh-auth Secret, worker pods and launcher Job with their names, labels, env and
volumes; conditions and replicaStatuses; suspend and resume; a failing launcher fails the job; bad input."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes import client
from operators_support import (
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
from federator.sim.kubelet import ANNOTATION_FAIL_AFTER
from federator.sim.operators import resolve
from federator.sim.operators.mpi import MPI_SERVED
from federator.sim.operators.served import JOB, SECRETS

go_module = jobkinds_conftest.go_module
MPI_OPERATOR = "github.com/kubeflow/mpi-operator@v0.6.0"
GROUP, VERSION = "kubeflow.org", "v2beta1"
MPIJOB = MPI_SERVED[0]
LABELS = "training.kubeflow.org/"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedSim]:
    cluster = ThreadedSim(operator_profile("mpitest"), tmp_path_factory.mktemp("mpisim"), bookmark_interval=1.0).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def api(sim: ThreadedSim) -> Iterator[client.ApiClient]:
    with official_client(sim) as api_client:
        yield api_client


@pytest.fixture
def pi(go_module: Any) -> dict[str, Any]:
    body: dict[str, Any] = read_yaml(go_module(MPI_OPERATOR) / "examples" / "v2beta1" / "pi" / "pi.yaml")
    return body


def env_pairs(container: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(e["name"], e.get("value")) for e in container.get("env") or ()]


def with_condition(name: str, ctype: str) -> Any:
    def check(items: list[dict[str, Any]]) -> Any:
        for item in items:
            if item["metadata"]["name"] == name and condition_status(item, ctype) == "True":
                return item
        return None

    return check


def long_running_workers(body: dict[str, Any]) -> dict[str, Any]:
    """sshd runs until it is stopped: the workers keep running (the kubelet's duration)."""
    body["spec"]["mpiReplicaSpecs"]["Worker"]["template"].setdefault("metadata", {})["annotations"] = dict(LONG_RUN)
    return body


def test_mpi_needs_batch_and_serves_mpijob_and_secret() -> None:
    assert [op.name for op in resolve(["mpi"])] == ["batch", "mpi"]
    assert [(rt.group, rt.version, rt.plural) for rt in MPI_SERVED] == [(GROUP, VERSION, "mpijobs"),
                                                                         ("", "v1", "secrets")]


@needs_kubectl
def test_upstream_pi_example_while_it_runs(sim: ThreadedSim, tmp_path: Path, pi: dict[str, Any]) -> None:
    """The pi example with a launcher that runs on (the kubelet's duration), so that its running state is seen
    whatever the machine's load: the objects the operator made, then deleted with the job."""
    ns = sim.new_namespace("pi")
    body = long_running_workers(pi)
    body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"].setdefault("metadata", {})["annotations"] = \
        dict(LONG_RUN)
    out = kubectl(sim, tmp_path, "apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(body))
    assert out.stdout.strip() == "mpijob.kubeflow.org/pi created"
    # while it runs: every worker and the launcher pod running make it Running
    running = wait_objects(sim, MPIJOB, ns, with_condition("pi", "Running"), what="the MPIJob Running")
    assert running["status"]["replicaStatuses"]["Worker"] == {"active": 2}
    svc = [s for s in listed(sim, kinds.SERVICES, ns) if s["metadata"]["name"] == "pi"][0]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {LABELS + "operator-name": "mpi-operator", LABELS + "job-name": "pi"}
    assert svc["metadata"]["labels"] == {"app": "pi"} and svc["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"

    def both_discovered(items: list[dict[str, Any]]) -> Any:
        return next((cm for cm in items if cm["metadata"]["name"] == "pi-config"
                     and cm["data"]["discover_hosts.sh"].count("echo") == 2), None)

    cm = wait_objects(sim, kinds.CONFIG_MAPS, ns, both_discovered, what="discover_hosts.sh with both workers")
    assert cm["data"] == {
        "hostfile": f"pi-worker-0.pi.{ns}.svc slots=1\npi-worker-1.pi.{ns}.svc slots=1\n",
        "discover_hosts.sh": f"#!/bin/sh\necho pi-worker-0.pi.{ns}.svc\necho pi-worker-1.pi.{ns}.svc\n"}
    [secret] = [s for s in listed(sim, SECRETS, ns) if s["metadata"]["name"] == "pi-ssh"]
    assert secret["type"] == "kubernetes.io/ssh-auth" and sorted(secret["data"]) == ["ssh-privatekey", "ssh-publickey"]
    key = serialization.load_pem_private_key(base64.b64decode(secret["data"]["ssh-privatekey"]), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp521r1"
    assert base64.b64decode(secret["data"]["ssh-privatekey"]).startswith(b"-----BEGIN EC PRIVATE KEY-----")
    public = base64.b64decode(secret["data"]["ssh-publickey"])
    assert public.endswith(b"\n") and public.startswith(b"ecdsa-sha2-nistp521 ")
    assert public.strip() == key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                           serialization.PublicFormat.OpenSSH)

    workers = {p["metadata"]["name"]: p for p in listed(sim, kinds.PODS, ns, LABELS + "job-role=worker")}
    assert sorted(workers) == ["pi-worker-0", "pi-worker-1"]
    for index in (0, 1):
        pod = workers[f"pi-worker-{index}"]
        assert pod["metadata"]["labels"] == {LABELS + "operator-name": "mpi-operator", LABELS + "job-name": "pi",
                                             LABELS + "job-role": "worker", LABELS + "replica-index": str(index)}
        spec = pod["spec"]
        assert (spec["hostname"], spec["subdomain"]) == (f"pi-worker-{index}", "pi")
        assert spec["dnsConfig"] == {"searches": [f"pi.{ns}.svc.cluster.local"]}
        assert spec["restartPolicy"] == "Never"
        container = spec["containers"][0]
        assert container["command"] == ["/usr/sbin/sshd"]  # the example's own
        assert env_pairs(container) == [("K_MPI_JOB_ROLE", "worker")]
        assert container["volumeMounts"] == [{"name": "ssh-auth", "mountPath": "/home/mpiuser/.ssh"}]
        assert spec["volumes"] == [{"name": "ssh-auth", "secret": {"secretName": "pi-ssh", "items": [
            {"key": "ssh-privatekey", "path": "id_rsa"}, {"key": "ssh-publickey", "path": "id_rsa.pub"},
            {"key": "ssh-publickey", "path": "authorized_keys"}]}}]  # no defaultMode off /root/.ssh
    [launcher] = [j for j in listed(sim, JOB, ns) if j["metadata"]["name"] == "pi-launcher"]
    assert launcher["metadata"]["labels"] == {"app": "pi"}
    assert launcher["spec"]["ttlSecondsAfterFinished"] == 60 and "suspend" not in launcher["spec"] or \
        launcher["spec"]["suspend"] is False
    [lpod] = [p for p in listed(sim, kinds.PODS, ns, LABELS + "job-role=launcher")]
    assert lpod["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert (lpod["spec"]["hostname"], lpod["spec"]["subdomain"]) == ("pi-launcher", "pi")
    assert lpod["spec"]["restartPolicy"] == "OnFailure"
    lcontainer = lpod["spec"]["containers"][0]
    assert env_pairs(lcontainer) == [
        ("K_MPI_JOB_ROLE", "launcher"), ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"), ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
        ("OMPI_MCA_orte_set_default_slots", "1"), ("NVIDIA_VISIBLE_DEVICES", None),
        ("NVIDIA_DRIVER_CAPABILITIES", None)]
    assert lcontainer["volumeMounts"] == [{"name": "ssh-auth", "mountPath": "/home/mpiuser/.ssh"},
                                          {"name": "mpi-job-config", "mountPath": "/etc/mpi"}]
    assert lpod["spec"]["volumes"][1] == {"name": "mpi-job-config", "configMap": {"name": "pi-config", "items": [
        {"key": "hostfile", "path": "hostfile", "mode": 0o444},
        {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555}]}}

    assert running["status"]["replicaStatuses"]["Launcher"] == {"active": 1}
    assert [(c["type"], c["status"], c["reason"]) for c in running["status"]["conditions"]] == [
        ("Created", "True", "MPIJobCreated"), ("Running", "True", "MPIJobRunning")]
    # deleting it takes every child (garbage collector)
    kubectl(sim, tmp_path, "delete", "-n", ns, "mpijob/pi")
    for rt in (kinds.PODS, kinds.SERVICES, kinds.CONFIG_MAPS, SECRETS, JOB):
        wait_objects(sim, rt, ns, lambda items: not items, what=f"the MPIJob's {rt.plural} to go")


@needs_kubectl
def test_upstream_pi_example_runs_to_succeeded(sim: ThreadedSim, tmp_path: Path, pi: dict[str, Any]) -> None:
    """The pi example, its launcher ending after the kubelet's default run: Succeeded, the running workers
    deleted (cleanPodPolicy Running)."""
    ns = sim.new_namespace("pis")
    out = kubectl(sim, tmp_path, "apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(long_running_workers(pi)))
    assert out.stdout.strip() == "mpijob.kubeflow.org/pi created"
    job = wait_objects(sim, MPIJOB, ns, with_condition("pi", "Succeeded"), what="the MPIJob Succeeded", timeout=60)
    conditions = [(c["type"], c["status"], c["reason"], c["message"]) for c in job["status"]["conditions"]]
    # Running (then False) is there when a pass of the operator saw the launcher and both workers running
    assert [c for c in conditions if c[0] != "Running"] == [
        ("Created", "True", "MPIJobCreated", f"MPIJob {ns}/pi is created."),
        ("Succeeded", "True", "MPIJobSucceeded", f"MPIJob {ns}/pi successfully completed.")]
    assert [c for c in conditions if c[0] == "Running"] in (
        [], [("Running", "False", "MPIJobRunning", f"MPIJob {ns}/pi is running.")])
    assert job["status"]["replicaStatuses"]["Launcher"] == {"succeeded": 1}
    assert job["status"]["startTime"] and job["status"]["completionTime"]
    wait_objects(sim, kinds.PODS, ns, lambda ps: not [p for p in ps if "-worker-" in p["metadata"]["name"]],
                 what="the workers deleted (cleanPodPolicy Running)")
    [cm] = listed(sim, kinds.CONFIG_MAPS, ns)
    assert cm["data"]["hostfile"] == f"pi-worker-0.pi.{ns}.svc slots=1\npi-worker-1.pi.{ns}.svc slots=1\n"
    # the operator defaults in memory (the CRD's schema defaults mpiImplementation); the rest stays as sent
    assert job["spec"]["mpiImplementation"] == "OpenMPI"
    assert "restartPolicy" not in job["spec"]["mpiReplicaSpecs"]["Launcher"]
    rows = [line.split() for line in kubectl(sim, tmp_path, "get", "mpijobs", "-n", ns).stdout.splitlines()]
    assert rows[1][:2] == ["pi", "Succeeded"]


def test_intel_slots_default_mount_path_and_sshd(sim: ThreadedSim, api: client.ApiClient, pi: dict[str, Any]) -> None:
    ns = sim.new_namespace("intel")
    body = long_running_workers(copy.deepcopy(pi))
    body["metadata"]["name"] = "ipi"
    body["spec"].update(mpiImplementation="Intel", slotsPerWorker=4)
    del body["spec"]["sshAuthMountPath"]
    body["spec"]["runPolicy"] = {"suspend": False}
    worker = body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    del worker["command"], worker["args"]
    launcher = body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    launcher.setdefault("metadata", {})["annotations"] = dict(LONG_RUN)
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", body)
    wait_objects(sim, MPIJOB, ns, with_condition("ipi", "Running"), what="the MPIJob Running")
    [cm] = listed(sim, kinds.CONFIG_MAPS, ns)
    assert cm["data"]["hostfile"] == f"ipi-worker-0.ipi.{ns}.svc:4\nipi-worker-1.ipi.{ns}.svc:4\n"
    pod = [p for p in listed(sim, kinds.PODS, ns) if p["metadata"]["name"] == "ipi-worker-0"][0]
    assert pod["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]
    assert pod["spec"]["volumes"][0]["secret"]["defaultMode"] == 0o600
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "ssh-auth", "mountPath": "/root/.ssh"}]
    [lpod] = listed(sim, kinds.PODS, ns, LABELS + "job-role=launcher")
    assert env_pairs(lpod["spec"]["containers"][0])[1:4] == [
        ("I_MPI_HYDRA_HOST_FILE", "/etc/mpi/hostfile"), ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
                                                         "-o ConnectionAttempts=10"), ("I_MPI_PERHOST", "4")]
    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", "ipi")
    wait_objects(sim, kinds.PODS, ns, lambda ps: not ps, what="the pods to go")


def test_suspend_and_resume(sim: ThreadedSim, api: client.ApiClient, pi: dict[str, Any]) -> None:
    ns = sim.new_namespace("held")
    custom = client.CustomObjectsApi(api)
    body = long_running_workers(copy.deepcopy(pi))
    body["spec"]["runPolicy"]["suspend"] = True
    body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"].setdefault("metadata", {})["annotations"] = \
        dict(LONG_RUN)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", body)
    job = wait_objects(sim, MPIJOB, ns, with_condition("pi", "Suspended"), what="Suspended")
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in job["status"]["conditions"]] == [
        ("Created", "True", "MPIJobCreated", f"MPIJob {ns}/pi is created."),
        ("Suspended", "True", "MPIJobSuspended", "MPIJob suspended"),
        ("Running", "False", "MPIJobSuspended", f"MPIJob {ns}/pi is suspended.")]
    assert "startTime" not in job["status"]
    [launcher] = listed(sim, JOB, ns)
    assert launcher["spec"]["suspend"] is True
    assert listed(sim, kinds.PODS, ns) == []
    assert [cm["metadata"]["name"] for cm in listed(sim, kinds.CONFIG_MAPS, ns)] == ["pi-config"]

    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", "pi",
                                          {"spec": {"runPolicy": {"suspend": False}}})
    job = wait_objects(sim, MPIJOB, ns, with_condition("pi", "Running"), what="Running after resume")
    suspended = [c for c in job["status"]["conditions"] if c["type"] == "Suspended"][0]
    assert (suspended["status"], suspended["reason"], suspended["message"]) == ("False", "MPIJobResumed",
                                                                                 "MPIJob resumed")
    assert job["status"]["startTime"]
    assert [j["spec"].get("suspend") for j in listed(sim, JOB, ns)] == [False]

    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", "pi",
                                          {"spec": {"runPolicy": {"suspend": True}}})
    wait_objects(sim, kinds.PODS, ns, lambda ps: not ps, what="the workers and the launcher pod deleted")
    job = wait_objects(sim, MPIJOB, ns, with_condition("pi", "Suspended"), what="Suspended again")
    assert condition_status(job, "Running") == "False"
    assert [j["spec"].get("suspend") for j in listed(sim, JOB, ns)] == [True]
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", "pi")
    wait_objects(sim, JOB, ns, lambda items: not items, what="the launcher Job to go")


def test_a_failing_launcher_fails_the_job(sim: ThreadedSim, api: client.ApiClient, pi: dict[str, Any]) -> None:
    ns = sim.new_namespace("fail")
    body = long_running_workers(copy.deepcopy(pi))
    body["spec"]["runPolicy"]["backoffLimit"] = 0
    launcher = body["spec"]["mpiReplicaSpecs"]["Launcher"]
    launcher["restartPolicy"] = "Never"
    launcher["template"].setdefault("metadata", {})["annotations"] = {ANNOTATION_FAIL_AFTER: "0.2"}
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", body)
    job = wait_objects(sim, MPIJOB, ns, with_condition("pi", "Failed"), what="the MPIJob Failed", timeout=60)
    [launcher_job] = listed(sim, JOB, ns)
    job_failed = [c for c in launcher_job["status"]["conditions"] if c["type"] == "Failed"][0]
    failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"][0]
    assert job_failed["reason"] == "BackoffLimitExceeded"
    assert failed["reason"].startswith("BackoffLimitExceeded/")
    assert failed["message"].startswith(job_failed["message"] + ": ")
    assert job["status"]["replicaStatuses"]["Launcher"] == {"failed": 1}
    assert job["status"]["completionTime"]
    assert condition_status(job, "Succeeded") is None
    # cleanPodPolicy Running: the workers go once it finished
    wait_objects(sim, kinds.PODS, ns, lambda ps: not [p for p in ps if "worker" in p["metadata"]["name"]],
                 what="the workers deleted")


def test_bad_mpijobs(sim: ThreadedSim, api: client.ApiClient, pi: dict[str, Any]) -> None:
    ns = sim.new_namespace("bad")
    # the CRD's schema refuses with 422 and stores nothing
    for path, value, words in [
        ("spec.slotsPerWorker", "four", "must be of type integer"),
        ("spec.mpiReplicaSpecs.Worker.replicas", "two", "must be of type integer"),
        ("spec.runPolicy", {"suspend": "yes"}, "must be of type boolean"),
        ("spec.mpiImplementation", "LAM", "supported values"),
        ("spec.mpiReplicaSpecs.Worker.replicas", 2 ** 31, "out of range for int32"),
        ("spec.mpiReplicaSpecs.Launcher.template", "pod", "must be of type object"),
    ]:
        body = copy.deepcopy(pi)
        jobkinds_conftest.set_at(body, path, value)
        code, answer = raw_request(sim, "POST", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/mpijobs",
                                   json.dumps(body).encode())
        assert code == 422 and words in answer["message"], (path, answer)
    assert listed(sim, MPIJOB, ns) == []
    # what only the operator checks (it has no webhook): stored, a ValidationError Event, nothing made
    custom = client.CustomObjectsApi(api)
    bad = copy.deepcopy(pi)
    bad["metadata"]["name"] = "two-launchers"
    bad["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    bad["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "Always"
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", bad)

    def warned(events: list[dict[str, Any]]) -> Any:
        return next((e for e in events if e["involvedObject"]["name"] == "two-launchers"), None)

    event = wait_objects(sim, kinds.EVENTS, ns, warned, what="the ValidationError Event")
    assert (event["type"], event["reason"]) == ("Warning", "ValidationError")
    assert event["message"].startswith("Found validation errors: ")
    assert "spec.mpiReplicaSpecs[Launcher].replicas" in event["message"] and "must be 1" in event["message"]
    assert "spec.mpiReplicaSpecs[Worker].restartPolicy" in event["message"]
    for name, edit, words in [
        ("x" * 55, {}, "will not able to create pod and service with invalid DNS label"),
        ("no-containers", {"Worker": {"replicas": 1, "template": {"spec": {"containers": []}}}},
         "spec.mpiReplicaSpecs[Worker].template.spec.containers: Required value: must define at least one container"),
        ("no-workers", {"Worker": {"replicas": 0, "template": pi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]}},
         "spec.mpiReplicaSpecs[Worker].replicas: Invalid value: 0: must be greater than or equal to 1"),
    ]:
        other = copy.deepcopy(pi)
        other["metadata"]["name"] = name
        other["spec"]["mpiReplicaSpecs"].update(edit)
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", other)

        def named(events: list[dict[str, Any]], name: str = name) -> Any:
            return next((e for e in events if e["involvedObject"]["name"] == name), None)

        event = wait_objects(sim, kinds.EVENTS, ns, named, what=f"the ValidationError Event of {name}")
        assert event["reason"] == "ValidationError" and words in event["message"], event["message"]
    for stored in listed(sim, MPIJOB, ns):
        assert not stored.get("status"), stored["metadata"]["name"]
    for rt in (kinds.PODS, kinds.SERVICES, kinds.CONFIG_MAPS, SECRETS, JOB):
        assert listed(sim, rt, ns) == [], rt.plural


def test_a_name_taken_or_another_manager_makes_nothing(sim: ThreadedSim, api: client.ApiClient,
                                                       pi: dict[str, Any]) -> None:
    ns = sim.new_namespace("taken")
    custom = client.CustomObjectsApi(api)

    async def theirs() -> None:
        await sim.c.storage.create(kinds.CONFIG_MAPS, {"metadata": {"name": "pi-config"}, "data": {"a": "b"}},
                                   namespace=ns)

    sim.run(theirs)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", copy.deepcopy(pi))
    # the Service comes first; the ConfigMap not its own fails the sync there (retried), before any status is
    # written: no pods, no launcher, no status
    wait_objects(sim, kinds.SERVICES, ns, lambda items: items, what="the Service")
    assert not listed(sim, MPIJOB, ns)[0].get("status")
    [cm] = listed(sim, kinds.CONFIG_MAPS, ns)
    assert cm["data"] == {"a": "b"} and not cm["metadata"].get("ownerReferences")
    assert listed(sim, kinds.PODS, ns) == [] and listed(sim, JOB, ns) == []

    other = copy.deepcopy(pi)
    other["metadata"]["name"] = "queued"
    other["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", other)
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", "pi")
    wait_objects(sim, kinds.SERVICES, ns, lambda items: not items, what="pi's Service to go")
    [queued] = [j for j in listed(sim, MPIJOB, ns) if j["metadata"]["name"] == "queued"]
    assert not queued.get("status")
    assert listed(sim, kinds.PODS, ns) == [] and listed(sim, SECRETS, ns) == []


def test_bad_secrets_are_refused(sim: ThreadedSim) -> None:
    ns = sim.new_namespace("sec")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"metadata": {"name": "s"}, "type": "kubernetes.io/ssh-auth", "data": {"x": "eA=="}}, "ssh-privatekey"),
        ({"metadata": {"name": "s"}, "data": {"k": "not base64!"}}, "must be base64-encoded"),
        ({"metadata": {"name": "s"}, "data": {"../k": "eA=="}}, "valid config key"),
        ({"metadata": {"name": "s"}, "data": {"k": base64.b64encode(b"x" * (1024 * 1024 + 1)).decode()}},
         "Too long"),
    ]
    for body, words in cases:
        code, answer = raw_request(sim, "POST", f"/api/v1/namespaces/{ns}/secrets",
                                   json.dumps({"apiVersion": "v1", "kind": "Secret", **body}).encode())
        assert code == 422 and words in answer["message"], answer
    assert listed(sim, SECRETS, ns) == []


def test_wait_for_workers_ready_creates_the_launcher_after_them(sim: ThreadedSim, api: client.ApiClient,
                                                                pi: dict[str, Any]) -> None:
    """launcherCreationPolicy WaitForWorkersReady: no launcher Job while a worker is not Ready (the workers start
    late here); it comes once both are."""
    from federator.sim.kubelet import ANNOTATION_START_DELAY

    ns = sim.new_namespace("wait")
    body = copy.deepcopy(pi)
    body["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {**LONG_RUN, ANNOTATION_START_DELAY: "1.5"}}
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", body)
    wait_objects(sim, kinds.PODS, ns, lambda ps: len(ps) == 2, what="the two workers")
    jobs = listed(sim, JOB, ns)
    if all(condition_status(p, "Ready") != "True" for p in listed(sim, kinds.PODS, ns)):
        assert jobs == []  # none while they start (both lists read in that order: no worker was Ready before)
    [launcher] = wait_objects(sim, JOB, ns, lambda items: items, what="the launcher Job", timeout=60)
    ready = [c for p in listed(sim, kinds.PODS, ns, LABELS + "job-role=worker")
             for c in p["status"]["conditions"] if c["type"] == "Ready" and c["status"] == "True"]
    assert len(ready) == 2
    assert all(c["lastTransitionTime"] <= launcher["metadata"]["creationTimestamp"] for c in ready)
    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, ns, "mpijobs", "pi")
    wait_objects(sim, kinds.PODS, ns, lambda ps: not ps, what="the pods to go")
