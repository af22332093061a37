"""The real operators on a real member (issue 28's operator mode, federator/dev/kube.py `operators=`): the JobSet
controller (sigs.k8s.io/jobset v0.10.1) and the Kubeflow training operator (v1.8.1), built from their pinned Go
modules (e2e/kube/operators/build.sh) and run as processes beside the member's control plane, with their upstream
CRDs, RBAC and webhook configurations installed. The upstream examples, unchanged, are applied with kubectl as a
user would: the operators create their child objects under the upstream names, kube-scheduler binds the pods to
kwok's nodes, kwok's stages end them Succeeded (the profile's kubelet.defaultRunSeconds: nothing is pulled or
run), and the objects' status ends Completed / Succeeded."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from federator.dev.kube import OPERATORS, KubeBinaries, KubeMember, OperatorBinaries
from federator.sim.profile import initial_nodes, load_profile_file

from ..e2e_support import ROOT, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.xdist_group("kube-operators"),
              pytest.mark.timeout(240, func_only=True)]

PROFILE = ROOT / "clusterconfigs" / "sim" / "cloud-native-gang.yaml"
#: sigs.k8s.io/jobset's site/static/examples/simple/paralleljobs.yaml, byte for byte (see its README)
JOBSET_EXAMPLE = ROOT / "tests" / "apis" / "jobkinds" / "upstream" / "jobset-paralleljobs.yaml"


@pytest.fixture(scope="module")
def member(kube_binaries: KubeBinaries, operator_binaries: OperatorBinaries,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeMember]:
    profile = load_profile_file(PROFILE)
    # every pod that does not say otherwise ends Succeeded 2 s after it runs
    profile = profile.model_copy(update={"kubelet": profile.kubelet.model_copy(update={"default_run_seconds": 2.0})})
    with KubeMember(profile, directory=tmp_path_factory.mktemp("kube-operators"), binaries=kube_binaries,
                    operators=("jobset", "kubeflow"), operator_binaries=operator_binaries) as running:
        assert {"jobset-controller", "training-operator"} <= set(running.processes)
        pids = list(running.processes.values())
        yield running
    # stop() stopped the operators with the rest
    assert [pid for pid in pids if _alive(pid)] == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _get(member: KubeMember, *args: str) -> dict[str, Any]:
    loaded = json.loads(member.kubectl("get", *args, "-o", "json").stdout)
    assert isinstance(loaded, dict)
    return loaded


def _items(member: KubeMember, *args: str) -> list[dict[str, Any]]:
    return list(_get(member, *args)["items"])


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def _with_condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """obj when its condition `kind` is True."""
    return obj if _condition(obj, kind) == "True" else None


def _owned_by(obj: dict[str, Any], kind: str, name: str) -> bool:
    return any(ref.get("kind") == kind and ref.get("name") == name and ref.get("controller")
               for ref in obj["metadata"].get("ownerReferences") or ())


def test_the_upstream_jobset_example_completes(member: KubeMember) -> None:
    member.kubectl("apply", "-f", str(JOBSET_EXAMPLE))
    completed = wait_for("JobSet paralleljobs Completed",
                         lambda: _with_condition(_get(member, "jobset", "paralleljobs"), "Completed"), timeout=180)
    # the defaulting webhook ran (only it sets these) and the controller ran the JobSet to its end
    pod_spec = completed["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod_spec["restartPolicy"] == "OnFailure"
    assert completed["spec"]["successPolicy"]["operator"] == "All"
    assert _condition(completed, "Failed") != "True"

    jobs = {j["metadata"]["name"]: j for j in _items(member, "jobs", "-l", "jobset.sigs.k8s.io/jobset-name=paralleljobs")}
    assert set(jobs) == {"paralleljobs-workers-0", "paralleljobs-driver-0"}
    assert all(_owned_by(j, "JobSet", "paralleljobs") for j in jobs.values())
    assert jobs["paralleljobs-workers-0"]["status"]["succeeded"] == 4
    assert jobs["paralleljobs-driver-0"]["status"]["succeeded"] == 1
    service = _get(member, "service", "paralleljobs")  # the headless Service of the pods' DNS names
    assert service["spec"]["clusterIP"] == "None" and _owned_by(service, "JobSet", "paralleljobs")

    nodes = {n["metadata"]["name"] for n in initial_nodes(member.profile)}
    pods = _items(member, "pods", "-l", "jobset.sigs.k8s.io/jobset-name=paralleljobs")
    assert sorted(p["spec"]["hostname"] for p in pods) == [
        "paralleljobs-driver-0-0", *(f"paralleljobs-workers-0-{i}" for i in range(4))]
    for pod in pods:
        assert pod["spec"]["subdomain"] == "paralleljobs"
        assert pod["spec"]["nodeName"] in nodes
        assert pod["status"]["phase"] == "Succeeded"
        assert _owned_by(pod, "Job", pod["metadata"]["labels"]["job-name"])


def test_the_upstream_pytorchjob_example_succeeds(member: KubeMember, operator_binaries: OperatorBinaries) -> None:
    # examples/pytorch/simple.yaml of github.com/kubeflow/training-operator v1.8.1, unchanged (namespace kubeflow)
    member.kubectl("apply", "-f", str(operator_binaries.directory / "examples" / "pytorch-simple.yaml"))
    succeeded = wait_for("PyTorchJob pytorch-simple Succeeded", lambda: _with_condition(
        _get(member, "pytorchjob", "pytorch-simple", "-n", "kubeflow"), "Succeeded"), timeout=180)
    assert _condition(succeeded, "Failed") != "True"
    assert succeeded["status"]["replicaStatuses"]["Master"]["succeeded"] == 1

    nodes = {n["metadata"]["name"] for n in initial_nodes(member.profile)}
    pods = {p["metadata"]["name"]: p for p in _items(
        member, "pods", "-n", "kubeflow", "-l", "training.kubeflow.org/job-name=pytorch-simple")}
    assert set(pods) == {"pytorch-simple-master-0", "pytorch-simple-worker-0"}
    for pod in pods.values():
        assert _owned_by(pod, "PyTorchJob", "pytorch-simple")
        assert pod["spec"]["nodeName"] in nodes
    master = pods["pytorch-simple-master-0"]
    assert master["status"]["phase"] == "Succeeded"
    env = {e["name"]: e.get("value") for e in pods["pytorch-simple-worker-0"]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "pytorch-simple-master-0" and env["WORLD_SIZE"] == "2" and env["RANK"] == "1"
    services = {s["metadata"]["name"]: s for s in _items(
        member, "services", "-n", "kubeflow", "-l", "training.kubeflow.org/job-name=pytorch-simple")}
    assert set(services) == {"pytorch-simple-master-0", "pytorch-simple-worker-0"}
    assert all(s["spec"]["clusterIP"] == "None" and _owned_by(s, "PyTorchJob", "pytorch-simple")
               for s in services.values())


def test_the_operators_validating_webhooks_refuse_bad_objects(member: KubeMember) -> None:
    """The upstream validating webhooks run, called by URL on loopback: what the CRD schemas allow and the
    operators' code refuses is refused at create, with the webhook's name and reason."""
    bad_pytorch = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                   "metadata": {"name": "no-pytorch-container", "namespace": "kubeflow"},
                   "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                       "containers": [{"name": "trainer", "image": "trainer:1"}]}}}}}}
    refused = member.kubectl("create", "-f", "-", input=json.dumps(bad_pytorch), check=False)
    assert refused.returncode != 0
    assert 'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied' in refused.stderr
    assert "must have at least one container with name pytorch" in refused.stderr
    bad_jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                  "metadata": {"name": "depends-first", "namespace": "default"},
                  "spec": {"replicatedJobs": [{"name": "a", "dependsOn": [{"name": "b", "status": "Ready"}],
                                               "template": {"spec": {"template": {"spec": {
                                                   "containers": [{"name": "c", "image": "trainer:1"}]}}}}}]}}
    refused = member.kubectl("create", "-f", "-", input=json.dumps(bad_jobset), check=False)
    assert refused.returncode != 0
    assert 'admission webhook "vjobset.kb.io" denied' in refused.stderr
    assert "DependsOn can't be set for the first ReplicatedJob" in refused.stderr
    assert not member.kubectl("get", "pytorchjob", "no-pytorch-container", "-n", "kubeflow",
                              check=False).returncode == 0


def test_the_operators_ran_as_their_upstream_service_accounts_unrefused(member: KubeMember) -> None:
    """Each operator ran as the ServiceAccount its upstream install binds its RBAC to (a token of that user, as
    kube-controller-manager's), created objects with it, and was never answered 403 (the audit log)."""
    creators: set[str] = set()
    for line in member.audit_log.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event.get("verb") == "create" and (event.get("responseStatus") or {}).get("code") == 201:
            creators.add(event["user"]["username"])
    assert {OPERATORS["jobset"].user, OPERATORS["kubeflow"].user} <= creators
    assert member.forbidden() == []


@pytest.mark.parametrize("kind, document, field", [
    ("JobSet", {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": "native-gang", "namespace": "default"},
                "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": "POD"}}}]}},
     "spec.replicatedJobs[0].template.spec.template.spec.schedulingGroup"),
    ("PyTorchJob", {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                    "metadata": {"name": "native-gang", "namespace": "kubeflow"},
                    "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": "POD"}}}},
     "spec.pytorchReplicaSpecs.Master.template.spec.schedulingGroup"),
], ids=["JobSet", "PyTorchJob"])
def test_the_native_gangs_pod_field_is_unknown_to_the_pinned_operators(
        member: KubeMember, kind: str, document: dict[str, Any], field: str) -> None:
    """A limit of operator mode on a native-gang member, pinned here so that a version bump shows it: the
    Kubernetes 1.36 pod field that joins a pod to a scheduling.k8s.io/v1alpha2 PodGroup
    (`spec.schedulingGroup.podGroupName`, federator/delegation/native.py) is not in these CRDs' pod template
    schemas (generated from k8s.io/api 0.34 and 0.29): the member refuses it under strict field validation and
    prunes it otherwise, and the operators' Go types (the same versions) would drop it from the pods they
    create. So the operators' pods cannot join the hub's native PodGroup through their templates."""
    pod = {"spec": {"schedulingGroup": {"podGroupName": "gang"},
                    "containers": [{"name": "pytorch", "image": "trainer:1"}]}}
    text = json.dumps(document).replace('"POD"', json.dumps(pod))
    refused = member.kubectl("create", "--dry-run=server", "--validate=strict", "-f", "-", input=text, check=False)
    assert refused.returncode != 0 and f'unknown field "{field}"' in refused.stderr, (kind, refused.stderr)
    pruned = member.kubectl("create", "--dry-run=server", "--validate=false", "-o", "json", "-f", "-", input=text)
    assert "schedulingGroup" not in pruned.stdout, kind
