"""Issue 28's operator mode against a REAL member (the bar "a JobSet and a PyTorchJob run to Succeeded through the
hub"): one real member (federator/dev/kube.py) that runs the real JobSet controller (sigs.k8s.io/jobset v0.10.1),
Kubeflow training operator (v1.8.1) and mpi-operator (v0.6.0) beside its control plane, with deploy/member's RBAC applied and registered with
a hub (`federator up --clusters DIR`, every controller) under exactly that identity's kubeconfig.

The member runs kube-scheduler only (the default scheduler: no PodGroup; on a `native` member the operators' pods
cannot join the hub's PodGroup, e2e/kube/test_member_operators.py pins why). Its discovery lists JobSet and
PyTorchJob, so the hub's MemberCluster says operator mode for them; the upstream examples, unchanged, are applied
to the HUB with kubectl; the hub creates the member copy suspended and resumes it (the member's audit log orders the
hub's create and patch before the operator's first create), the real operator creates the pods under the upstream
names with the hub's labels, kwok's nodes end them Succeeded, and the hub's source object ends Succeeded with the
operator's conditions and the cluster; `kubectl delete` on the hub takes the member copy and its pods away. The
same for the PaddleJob example (the training operator), kube's Indexed Job (the member's own Job controller) and
mpi-operator's pi example (MPIJob v2beta1; its launcher Job under the member's Job controller).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.delegation.adapter import LABEL_EPOCH, LABEL_HUB, LABEL_JOB_UID, LABEL_ROLE
from federator.dev.clusters import registration_for
from federator.dev.kube import HUB_USER, OPERATORS, KubeBinaries, KubeMember, OperatorBinaries
from federator.sim.profile import initial_nodes, load_profile_file

from ..e2e_support import ROOT, FederatorUp, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.xdist_group("kube-operators"),
              pytest.mark.timeout(300, func_only=True)]

CLUSTER = "kube-operators"
JOBSET_KEY, PYTORCH_KEY = "JobSet.jobset.x-k8s.io", "PyTorchJob.kubeflow.org"
#: sigs.k8s.io/jobset's site/static/examples/simple/paralleljobs.yaml, byte for byte (namespace: kubectl's default)
JOBSET_EXAMPLE = ROOT / "tests" / "apis" / "jobkinds" / "upstream" / "jobset-paralleljobs.yaml"
_PROFILE = """\
apiVersion: sim.federator.dev/v1alpha1
kind: ClusterProfile
name: {name}
description: Two CPU nodes, the default scheduler, the real JobSet, Kubeflow training and MPI operators
labels: {{tier: operators}}
location: {{type: cloud, provider: gcp, region: europe-west4}}
network: {{fabric: ethernet, bandwidthGbps: 100}}
schedulers: [{{type: default}}]
kubelet: {{startDelaySeconds: 1, terminationSeconds: 1, defaultRunSeconds: 3}}
kubernetesVersion: v1.36.0
costPerGpuHour: 1.0
nodePools:
  - {{name: cpu, count: 2, cpu: "32", memory: 128Gi}}
"""


@dataclass
class OperatorHub:
    up: FederatorUp
    member: KubeMember
    work: Path

    def hub(self, *args: str) -> Any:
        return self.up.json(*args)

    def in_member(self, *args: str) -> Any:
        """kubectl get ... -o json as the member's admin; None on NotFound."""
        return _found(self.member.kubectl("get", *args, "-o", "json", check=False))

    def hub_get(self, *args: str) -> Any:
        """kubectl get ... -o json on the hub (admin); None on NotFound."""
        return _found(self.up.kubectl("get", *args, "-o", "json", check=False))

    def audit(self) -> list[dict[str, Any]]:
        events = []
        for line in self.member.audit_log.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line being written
        return events


def _found(done: subprocess.CompletedProcess[str]) -> Any:
    if done.returncode != 0:
        assert "NotFound" in done.stderr, done.stderr
        return None
    return json.loads(done.stdout)


def _managed_namespace(member: KubeMember, namespace: str) -> str:
    """deploy/member/managed-namespace (the hub's and the agent's Roles) for `namespace`, as namespaces/vision does
    it (there as a kustomization; the upstream namespace `kubeflow` exists already: the operator's install)."""
    rendered = member.kubectl("kustomize", str(ROOT / "deploy" / "member" / "managed-namespace")).stdout
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    for document in documents:
        document["metadata"]["namespace"] = namespace
    return yaml.safe_dump_all(documents)


@pytest.fixture(scope="module")
def fed(kube_binaries: KubeBinaries, operator_binaries: OperatorBinaries,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorHub]:
    work = tmp_path_factory.mktemp("kube-hub-operators")
    (work / f"{CLUSTER}.yaml").write_text(_PROFILE.format(name=CLUSTER))
    profile = load_profile_file(work / f"{CLUSTER}.yaml")
    with KubeMember(profile, directory=work / "kube", binaries=kube_binaries, operators=("jobset", "kubeflow", "mpi"),
                    operator_binaries=operator_binaries) as member:
        member.apply_member_rbac()
        member.apply_member_rbac(_managed_namespace(member, "kubeflow"))
        registrations = work / "registrations"
        registrations.mkdir()
        (registrations / f"{CLUSTER}.yaml").write_text(
            yaml.safe_dump(registration_for(profile, kubeconfig=member.hub_kubeconfig)))
        up = FederatorUp(work / "hub", "--clusters", str(registrations))
        try:
            up.start(timeout=180)
            yield OperatorHub(up, member, work)
        finally:
            if up.process is not None:
                code = up.stop()
                (work / "hub-log.jsonl").write_text("\n".join(json.dumps(r) for r in up.logs) + "\n")
                assert code == 0, up.other_stderr[-20:]


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


def _operators(fed: OperatorHub) -> dict[str, str] | None:
    mc = fed.hub("get", "mc", CLUSTER)
    if _conditions(mc).get("Ready", {}).get("status") != "True":
        return None
    found = (mc.get("status") or {}).get("operators")
    return found if isinstance(found, dict) and found else None


def _requests(fed: OperatorHub, user: str, verb: str, resource: str, namespace: str,
              name: str | None = None) -> list[dict[str, Any]]:
    """The member's audit events of `user` doing `verb` on `resource` in `namespace` (answered 2xx)."""
    found = []
    for event in fed.audit():
        ref = event.get("objectRef") or {}
        code = (event.get("responseStatus") or {}).get("code", 0)
        if (event["user"]["username"] == user and event.get("verb") == verb and ref.get("resource") == resource
                and ref.get("namespace") == namespace and (name is None or ref.get("name") == name)
                and 200 <= code < 300):
            found.append(event)
    return found


def _run_through_the_hub(fed: OperatorHub, example: Path, *, kind: str, resource: str, namespace: str,
                         terminal: str, operator: str | None, child: str,
                         pods: int | None) -> dict[str, dict[str, Any]]:
    """Apply `example` to the hub; wait until its source object ends; check the member copy, the operator's
    pods, the mirrored status; the member's pods by name. `operator` None: kube's own Job controller runs the
    kind (its writes are kube-controller-manager's, which the member's audit policy leaves out)."""
    document = yaml.safe_load(example.read_text())
    name = document["metadata"]["name"]
    fed.up.kubectl("apply", "-f", str(example), "-n", namespace)
    twin = wait_for(f"the twin of {kind} {name}", lambda: fed.hub_get("tj", name, "-n", namespace), timeout=60)
    uid = twin["metadata"]["uid"]

    def ended() -> dict[str, Any] | None:
        source = fed.hub("get", resource, name, "-n", namespace)
        return source if (source.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    source = wait_for(f"{kind} {name} ends on the hub", ended, timeout=180)
    status = source["status"]
    assert status["phase"] == "Succeeded", status
    assert status["cluster"] == CLUSTER and isinstance(status.get("epoch"), int), status

    # the member copy: the source's name and spec, the hub's labels, resumed, run by the real operator
    copy = fed.in_member(resource, name, "-n", namespace)
    assert copy is not None, f"no member copy of {kind} {namespace}/{name}"
    labels = copy["metadata"]["labels"]
    assert labels[LABEL_JOB_UID] == uid and labels[LABEL_HUB] and labels[LABEL_EPOCH] == str(status["epoch"])
    member_conditions = _conditions(copy)
    assert member_conditions[terminal]["status"] == "True", member_conditions
    # the operator's conditions, as it wrote them, mirrored onto the hub's source object
    mirrored = _conditions(source)
    assert mirrored[terminal] == member_conditions[terminal], (mirrored, member_conditions)
    assert set(member_conditions) <= set(mirrored), (mirrored, member_conditions)

    # created suspended, then resumed (the member's audit log; Metadata level: who did what, when)
    plural = resource.split(".")[0]
    created = _requests(fed, HUB_USER, "create", plural, namespace)
    patched = _requests(fed, HUB_USER, "patch", plural, namespace, name)
    assert created and patched, (len(created), len(patched))
    resumed = patched[0]["requestReceivedTimestamp"]
    assert created[0]["stageTimestamp"] <= resumed
    if operator is None:
        return _pods_done(fed, namespace, uid, pods)
    # (this job's children: another job in the namespace had its own)
    writes = [e for verb in ("create", "update") for e in _requests(fed, OPERATORS[operator].user, verb, child,
                                                                     namespace)
              if str(e.get("objectRef", {}).get("name", "")).startswith(f"{name}-")]
    assert writes, f"the {operator} operator wrote no {child}"
    if child == "pods":
        # the training operator creates no pod of a suspended job: every one came after the resume (after the
        # API server received it: its watch event can reach the operator before the patch's response completes)
        assert all(e["requestReceivedTimestamp"] > resumed for e in writes), (resumed, writes)
    else:
        # JobSet creates its child Jobs suspended while it is, then resumes them (an update each): its last
        # write of its Jobs came after the hub's resume
        assert max(e["requestReceivedTimestamp"] for e in writes) > resumed, writes
    return _pods_done(fed, namespace, uid, pods)


def _pods_done(fed: OperatorHub, namespace: str, uid: str, pods: int | None) -> dict[str, dict[str, Any]]:
    # the operator's pods: upstream names, the hub's labels (from the copy's templates), on kwok's nodes, done
    # (pods None: the caller checks which are left and how they ended)
    made = {p["metadata"]["name"]: p for p in fed.in_member(
        "pods", "-n", namespace, "-l", f"{LABEL_JOB_UID}={uid}")["items"]}
    assert pods is None or len(made) == pods, sorted(made)
    nodes = {n["metadata"]["name"] for n in initial_nodes(fed.member.profile)}
    for pod in made.values():
        assert pod["metadata"]["labels"][LABEL_ROLE] and pod["metadata"]["labels"][LABEL_HUB]
        assert pod["spec"]["nodeName"] in nodes
        assert pods is None or pod["status"]["phase"] == "Succeeded", (pod["metadata"]["name"], pod["status"])
    return made


def _deleted_on_the_hub(fed: OperatorHub, resource: str, name: str, namespace: str, uid_of_pods: str) -> None:
    fed.up.kubectl("delete", resource, name, "-n", namespace, "--timeout=90s")
    wait_for("the member copy deleted", lambda: fed.in_member(resource, name, "-n", namespace) is None, timeout=90)
    wait_for("the operator's pods deleted", lambda: not fed.in_member(
        "pods", "-n", namespace, "-l", f"{LABEL_JOB_UID}={uid_of_pods}")["items"], timeout=90)


def test_a_jobset_a_pytorchjob_and_a_tfjob_run_to_succeeded_through_the_hub_under_the_real_operators(
        fed: OperatorHub, operator_binaries: OperatorBinaries) -> None:
    discovered = wait_for("the member Ready with its operators discovered", lambda: _operators(fed), timeout=120)
    assert discovered[JOBSET_KEY] == "operator" and discovered[PYTORCH_KEY] == "operator", discovered

    # the JobSet example (no namespace: kubectl's default)
    made = _run_through_the_hub(fed, JOBSET_EXAMPLE, kind="JobSet", resource="jobsets.jobset.x-k8s.io",
                                namespace="default", terminal="Completed", operator="jobset", child="jobs", pods=5)
    # JobSet's names: <jobset>-<replicatedJob>-<job index>-<pod index>-<random> (an Indexed Job's pods)
    assert sum(n.startswith("paralleljobs-workers-0-") for n in made) == 4, sorted(made)
    assert sum(n.startswith("paralleljobs-driver-0-0-") for n in made) == 1, sorted(made)
    hostnames = sorted(p["spec"]["hostname"] for p in made.values())
    assert hostnames == ["paralleljobs-driver-0-0", *(f"paralleljobs-workers-0-{i}" for i in range(4))]
    uid = next(iter(made.values()))["metadata"]["labels"][LABEL_JOB_UID]
    _deleted_on_the_hub(fed, "jobsets.jobset.x-k8s.io", "paralleljobs", "default", uid)
    wait_for("JobSet's child Jobs deleted (kube's garbage collector, by ownerReference)", lambda: not fed.in_member(
        "jobs", "-n", "default", "-l", "jobset.sigs.k8s.io/jobset-name=paralleljobs")["items"], timeout=90)

    # the PyTorchJob example (namespace kubeflow, as upstream writes it)
    pytorch = operator_binaries.directory / "examples" / "pytorch-simple.yaml"
    made = _run_through_the_hub(fed, pytorch, kind="PyTorchJob", resource="pytorchjobs.kubeflow.org",
                                namespace="kubeflow", terminal="Succeeded", operator="kubeflow", child="pods",
                                pods=2)
    assert set(made) == {"pytorch-simple-master-0", "pytorch-simple-worker-0"}
    env = {e["name"]: e.get("value") for e in made["pytorch-simple-worker-0"]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "pytorch-simple-master-0" and env["WORLD_SIZE"] == "2"  # the operator's, not ours
    uid = made["pytorch-simple-master-0"]["metadata"]["labels"][LABEL_JOB_UID]
    _deleted_on_the_hub(fed, "pytorchjobs.kubeflow.org", "pytorch-simple", "kubeflow", uid)

    # the TFJob example, from the training-operator module the operator was built from (the Go module cache)
    cache = subprocess.run(["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True).stdout.strip()
    tfjob = Path(cache) / "github.com" / "kubeflow" / "training-operator@v1.8.1" / "examples" / "tensorflow" / \
        "simple.yaml"
    made = _run_through_the_hub(fed, tfjob, kind="TFJob", resource="tfjobs.kubeflow.org", namespace="kubeflow",
                                terminal="Succeeded", operator="kubeflow", child="pods", pods=2)
    assert set(made) == {"tfjob-simple-worker-0", "tfjob-simple-worker-1"}
    tf_config = json.loads({e["name"]: e.get("value") for e in
                            made["tfjob-simple-worker-1"]["spec"]["containers"][0]["env"]}["TF_CONFIG"])
    assert tf_config["task"] == {"type": "worker", "index": 1}, tf_config  # the operator's TF_CONFIG
    assert tf_config["cluster"]["worker"] == [f"tfjob-simple-worker-{i}.kubeflow.svc:2222" for i in range(2)]
    uid = made["tfjob-simple-worker-0"]["metadata"]["labels"][LABEL_JOB_UID]
    _deleted_on_the_hub(fed, "tfjobs.kubeflow.org", "tfjob-simple", "kubeflow", uid)

    refused = [f for f in fed.member.forbidden() if f.user == HUB_USER]
    assert refused == [], refused


#: kube's Indexed Job with pod-to-pod communication (kubernetes.io/docs/tasks/job/job-with-pod-to-pod-communication),
#: as tests/apis/jobkinds/test_batchjob.py holds it, with a shorter script (kwok runs no container)
INDEXED_JOB = {
    "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "example-job"},
    "spec": {"completions": 3, "parallelism": 3, "completionMode": "Indexed",
             "template": {"spec": {"subdomain": "headless-svc", "restartPolicy": "Never",
                                   "containers": [{"name": "example-workload", "image": "bash:latest",
                                                   "command": ["bash", "-c", "echo ok"]}]}}},
}


def test_a_paddlejob_and_a_batch_job_run_to_their_end_through_the_hub_under_the_real_controllers(
        fed: OperatorHub, operator_binaries: OperatorBinaries) -> None:
    """The other two kinds a real member runs with its own controller: Kubeflow's PaddleJob example under the
    training operator, and kube's Indexed Job under kube-controller-manager's Job controller."""
    discovered = wait_for("the member Ready with its operators discovered", lambda: _operators(fed), timeout=120)
    assert discovered["PaddleJob.kubeflow.org"] == "operator" and discovered["Job.batch"] == "operator", discovered

    cache = subprocess.run(["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True).stdout.strip()
    paddle = Path(cache) / "github.com" / "kubeflow" / "training-operator@v1.8.1" / "examples" / "paddlepaddle" / \
        "simple-cpu.yaml"
    made = _run_through_the_hub(fed, paddle, kind="PaddleJob", resource="paddlejobs.kubeflow.org",
                                namespace="kubeflow", terminal="Succeeded", operator="kubeflow", child="pods", pods=2)
    assert set(made) == {"paddle-simple-cpu-worker-0", "paddle-simple-cpu-worker-1"}
    env = {e["name"]: e.get("value") for e in made["paddle-simple-cpu-worker-1"]["spec"]["containers"][0]["env"]}
    # the operator's env, not the hub's
    assert env["PADDLE_NNODES"] == "2" and env["PADDLE_JOB_ID"] == "paddle-simple-cpu", env
    assert env["PADDLE_MASTER"] == "paddle-simple-cpu-worker-0:37777", env
    uid = made["paddle-simple-cpu-worker-0"]["metadata"]["labels"][LABEL_JOB_UID]
    _deleted_on_the_hub(fed, "paddlejobs.kubeflow.org", "paddle-simple-cpu", "kubeflow", uid)

    example = fed.work / "indexed-job.yaml"
    example.write_text(yaml.safe_dump(INDEXED_JOB))
    made = _run_through_the_hub(fed, example, kind="Job", resource="jobs.batch", namespace="default",
                                terminal="Complete", operator=None, child="pods", pods=3)
    # kube's Job controller's names: <job>-<completion index>-<random>, hostnames <job>-<index>
    assert sorted(p["spec"]["hostname"] for p in made.values()) == [f"example-job-{i}" for i in range(3)]
    assert sorted(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in made.values()) == [
        "0", "1", "2"]
    uid = next(iter(made.values()))["metadata"]["labels"][LABEL_JOB_UID]
    _deleted_on_the_hub(fed, "jobs.batch", "example-job", "default", uid)

    refused = [f for f in fed.member.forbidden() if f.user == HUB_USER]
    assert refused == [], refused


def test_mpi_operators_pi_example_runs_to_succeeded_through_the_hub_under_the_real_mpi_operator(
        fed: OperatorHub, operator_binaries: OperatorBinaries) -> None:
    """mpi-operator v0.6.0's examples/v2beta1/pi/pi.yaml, unchanged, from the module the operator was built from:
    the real mpi-operator makes its SSH Secret, hostfile ConfigMap, workers pi-worker-<i> and launcher Job
    pi-launcher (whose pod kube's Job controller makes); kwok ends the launcher's pod Succeeded, so the launcher
    Job completes and the MPIJob Succeeded. The training operator (no --enable-scheme=mpijob) never touches it."""
    # the wrapper (e2e/kube/operators/mpi/main.go) refuses what it does not serve, in one line, before any request
    for flag, words in (("--gang-scheduling=volcano", "--gang-scheduling must be empty"),
                        ("--monitoring-port=8443", "--monitoring-port is not served"),
                        ("--gang-scheduling=" + "x" * 10000, "--gang-scheduling must be empty")):
        done = subprocess.run([str(operator_binaries.path("mpi-operator")), flag, "--kubeConfig=/nonexistent"],
                              capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert done.returncode == 2 and words in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr

    discovered = wait_for("the member Ready with its operators discovered", lambda: _operators(fed), timeout=120)
    assert discovered["MPIJob.kubeflow.org"] == "operator", discovered

    cache = subprocess.run(["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True).stdout.strip()
    pi = Path(cache) / "github.com" / "kubeflow" / "mpi-operator@v0.6.0" / "examples" / "v2beta1" / "pi" / "pi.yaml"
    # the launcher Job: created suspended with the copy, resumed (an update) after the hub's resume
    made = _run_through_the_hub(fed, pi, kind="MPIJob", resource="mpijobs.kubeflow.org", namespace="default",
                                terminal="Succeeded", operator="mpi", child="jobs", pods=None)
    mpi_user = OPERATORS["mpi"].user
    # the upstream names: the launcher Job's one pod ended Succeeded (the MPIJob's end is the launcher's)
    launchers = [p for n, p in made.items() if n.startswith("pi-launcher-")]
    assert len(launchers) == 1 and launchers[0]["status"]["phase"] == "Succeeded", sorted(made)
    assert launchers[0]["metadata"]["labels"]["training.kubeflow.org/job-role"] == "launcher"
    # the workers, created by the operator after the hub's resume (none while suspended); cleanPodPolicy Running
    # deletes those still running when the launcher ends, so the ones left ended Succeeded under kwok
    resumed = _requests(fed, HUB_USER, "patch", "mpijobs", "default", "pi")[0]["requestReceivedTimestamp"]
    workers = {e["objectRef"]["name"]: e for e in _requests(fed, mpi_user, "create", "pods", "default")
               if e["objectRef"]["name"].startswith("pi-")}
    assert sorted(workers) == ["pi-worker-0", "pi-worker-1"], sorted(workers)
    assert all(e["requestReceivedTimestamp"] > resumed for e in workers.values()), (resumed, workers)
    assert all(p["status"]["phase"] == "Succeeded" for n, p in made.items() if n.startswith("pi-worker-")), made
    assert set(made) <= {launchers[0]["metadata"]["name"], "pi-worker-0", "pi-worker-1"}, sorted(made)
    assert [e["objectRef"]["name"] for e in _requests(fed, mpi_user, "create", "jobs", "default")] == ["pi-launcher"]
    # its SSH Secret and hostfile ConfigMap (the RBAC of its upstream ClusterRole let it)
    assert _requests(fed, mpi_user, "create", "secrets", "default", "pi-ssh")
    assert _requests(fed, mpi_user, "create", "configmaps", "default", "pi-config")
    hostfile = fed.in_member("configmap", "pi-config", "-n", "default")["data"]["hostfile"]
    assert hostfile.split() == ["pi-worker-0.pi.default.svc", "slots=1", "pi-worker-1.pi.default.svc", "slots=1"]

    uid = launchers[0]["metadata"]["labels"][LABEL_JOB_UID]
    _deleted_on_the_hub(fed, "mpijobs.kubeflow.org", "pi", "default", uid)
    wait_for("the launcher Job, Secret and ConfigMap deleted (kube's garbage collector, by ownerReference)",
             lambda: all(fed.in_member(kind, name, "-n", "default") is None for kind, name in (
                 ("jobs", "pi-launcher"), ("secrets", "pi-ssh"), ("configmaps", "pi-config"))), timeout=90)

    # the training operator never read or wrote an MPIJob (its v1 MPIJob is not enabled; same CRD name)
    kubeflow_user = OPERATORS["kubeflow"].user
    touched = [e for e in fed.audit() if e["user"]["username"] == kubeflow_user
               and (e.get("objectRef") or {}).get("resource") == "mpijobs"]
    assert touched == [], touched[:3]
    refused = [f for f in fed.member.forbidden() if f.user in (HUB_USER, mpi_user)]
    assert refused == [], refused
