"""Trainer's runtimes at the hub (issue 28): `kubectl apply -f` of Trainer v2.0.0's own runtime manifests (from the
Go module cache), `kubectl get clustertrainingruntimes`, strict field validation and Trainer's webhook rule, RBAC
(admins write, researchers read); a TrainJob resolved against the stored runtime at admission (a missing runtime
or one the gang cannot express: 422, nothing stored); TrainJobs on Trainer's torch_distributed.yaml and on a
namespaced TrainingRuntime run in a simulated member to Succeeded, and deleting the runtime under a running
TrainJob changes nothing for it."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..apis.jobkinds.conftest import go_module
from ..apis.jobkinds.test_trainjob import TRAINER, small
from ..controllers.jobtest_support import phase, wait_until
from .hubtest_support import RunningHub
from .test_job_kinds import CLUSTER, federation, source_status, write

pytestmark = pytest.mark.kubectl
__all__ = ["go_module"]  # the fixture, imported for this module

GROUP = "/apis/trainer.kubeflow.org/v1alpha1"
CLUSTER_RUNTIMES = f"{GROUP}/clustertrainingruntimes"


def runtimes_url(namespace: str) -> str:
    return f"{GROUP}/namespaces/{namespace}/trainingruntimes"


def trainjobs_url(namespace: str) -> str:
    return f"{GROUP}/namespaces/{namespace}/trainjobs"


@pytest.fixture
def runtime_file(go_module: Callable[[str], Path]) -> Callable[[str], Path]:
    """A runtime manifest of Trainer v2.0.0, the file as the module has it."""
    return lambda name: go_module(TRAINER) / "manifests/base/runtimes" / name


def namespaced_runtime(namespace: str = "default") -> dict[str, Any]:
    """A TrainingRuntime as Trainer's docs write one: torch's runtime, namespaced, 2 nodes of 1 process."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": "torch-small", "namespace": namespace},
            "spec": {"mlPolicy": {"numNodes": 2, "torch": {"numProcPerNode": 1}},
                     "template": {"spec": {"replicatedJobs": [{
                         "name": "node",
                         "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step":
                                                              "trainer"}},
                                      "spec": {"template": {"spec": {"containers": [{
                                          "name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                                          "command": ["torchrun", "train.py"]}]}}}}}]}}}}


def trainjob(name: str, runtime: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    job = small()
    job["metadata"] = {"name": name, "namespace": namespace}
    job["spec"]["runtimeRef"] = runtime
    del job["spec"]["trainer"]["numNodes"]  # the runtime's
    return job


async def test_trainers_runtime_manifests_apply_and_list(hub: RunningHub, tmp_path: Path,
                                                         runtime_file: Callable[[str], Path]) -> None:
    for name in ("torch_distributed.yaml", "mpi_distributed.yaml", "torchtune/llama3_2/llama3_2_1B.yaml"):
        code, out, err = await hub.kubectl("admin", "apply", "--validate=strict", "-f", str(runtime_file(name)))
        assert code == 0 and "created" in out, (name, err)
    code, out, err = await hub.kubectl("admin", "get", "clustertrainingruntimes")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "AGE"]
    assert sorted(line.split()[0] for line in lines[1:]) == ["mpi-distributed", "torch-distributed",
                                                             "torchtune-llama3.2-1b"]
    status, stored = await hub.request("GET", f"{CLUSTER_RUNTIMES}/torch-distributed")
    assert status == 200 and stored["spec"] == yaml.safe_load(runtime_file("torch_distributed.yaml").read_text(
        encoding="utf-8"))["spec"]
    code, out, err = await hub.kubectl("admin", "apply", "--validate=strict", "-f",
                                       write(tmp_path, namespaced_runtime()))
    assert code == 0 and "created" in out, err
    code, out, err = await hub.kubectl("admin", "get", "trainingruntimes", "-n", "default")
    assert code == 0 and "torch-small" in out, err
    code, out, err = await hub.kubectl("admin", "explain", "clustertrainingruntimes.spec.mlPolicy")
    assert code == 0 and "numNodes" in out, err
    # applied again: unchanged
    code, out, err = await hub.kubectl("admin", "apply", "-f", str(runtime_file("torch_distributed.yaml")))
    assert code == 0 and "unchanged" in out, err


async def test_bad_runtimes_are_refused_and_nothing_is_stored(hub: RunningHub, tmp_path: Path) -> None:
    unknown = namespaced_runtime()
    unknown["spec"]["mlPolicy"]["numNode"] = 2
    code, _, err = await hub.kubectl("admin", "apply", "--validate=strict", "-f", write(tmp_path, unknown))
    assert code != 0 and "numNode" in err, err
    launcher = namespaced_runtime()
    launcher["spec"]["template"]["spec"]["replicatedJobs"].append({"name": "launcher", "replicas": 2,
                                                                   "template": {}})
    status, body = await hub.request("POST", runtimes_url("default"), body=launcher)
    assert status == 422, body
    assert [(c["field"], "always must be 1" in c["message"]) for c in body["details"]["causes"]] == [
        ("spec.template.spec.replicatedJobs[1].replicas", True)], body
    wrong = {**namespaced_runtime(), "kind": "TrainJob"}
    status, body = await hub.request("POST", runtimes_url("default"), body=wrong)
    assert status == 400, body
    huge = namespaced_runtime()
    huge["metadata"]["annotations"] = {"x": "y" * 4_000_000}
    status, body = await hub.request("POST", runtimes_url("default"), body=huge)
    assert status in (413, 422), body
    status, body = await hub.request("GET", f"{runtimes_url('default')}/torch-small")
    assert status == 404, body


async def test_admins_write_runtimes_and_researchers_read_them(hub: RunningHub, tmp_path: Path,
                                                               runtime_file: Callable[[str], Path]) -> None:
    code, _, err = await hub.kubectl("researcher", "apply", "-f", str(runtime_file("torch_distributed.yaml")))
    assert code != 0 and 'cannot create resource "clustertrainingruntimes"' in err, err
    status, body = await hub.request("POST", runtimes_url("default"), body=namespaced_runtime(), who="researcher")
    assert status == 403, body
    code, _, err = await hub.kubectl("admin", "apply", "-f", str(runtime_file("torch_distributed.yaml")))
    assert code == 0, err
    status, body = await hub.request("POST", runtimes_url("default"), body=namespaced_runtime())
    assert status == 201, body
    code, out, err = await hub.kubectl("researcher", "get", "clustertrainingruntimes")
    assert code == 0 and "torch-distributed" in out, err
    code, out, err = await hub.kubectl("researcher", "get", "trainingruntimes", "-n", "default")
    assert code == 0 and "torch-small" in out, err
    code, _, err = await hub.kubectl("researcher", "get", "trainingruntimes", "-n", "team-b")
    assert code != 0 and "forbidden" in err.lower(), err
    for verb, resource, answer in (("get", "clustertrainingruntimes", "yes"), ("delete", "clustertrainingruntimes",
                                                                               "no"),
                                   ("list", "trainingruntimes", "yes"), ("update", "trainingruntimes", "no")):
        code, out, err = await hub.kubectl("researcher", "auth", "can-i", verb,
                                           f"{resource}.trainer.kubeflow.org", "-n", "default")
        assert out.split()[0] == answer, (verb, resource, out, err)
    status, body = await hub.request("DELETE", f"{CLUSTER_RUNTIMES}/torch-distributed", who="researcher")
    assert status == 403, body


async def test_a_trainjob_naming_a_missing_runtime_is_a_422_and_nothing_is_stored(
        hub: RunningHub, tmp_path: Path, runtime_file: Callable[[str], Path]) -> None:
    code, _, err = await hub.kubectl("admin", "apply", "-f", str(runtime_file("mpi_distributed.yaml")))
    assert code == 0, err
    cases = [
        ({"name": "deepspeed-distributed"}, "spec.runtimeRef.name",
         'clustertrainingruntimes.trainer.kubeflow.org "deepspeed-distributed" not found: specified '
         "clusterTrainingRuntime must be created before the TrainJob is created"),
        ({"name": "torch-small", "kind": "TrainingRuntime"}, "spec.runtimeRef.name",
         'trainingruntimes.trainer.kubeflow.org "torch-small" in namespace default not found'),
        # the built-in default is a ClusterTrainingRuntime: no TrainingRuntime of that name
        ({"name": "torch-distributed", "kind": "TrainingRuntime"}, "spec.runtimeRef.name", "not found"),
        ({"name": "mpi-distributed"}, "spec.runtimeRef", 'ClusterTrainingRuntime "mpi-distributed": '
                                                         "spec.mlPolicy.mpi: Unsupported"),
    ]
    for ref, field, words in cases:
        job = trainjob("missing", ref)
        status, body = await hub.request("POST", trainjobs_url("default"), body=job)
        assert status == 422, (ref, body)
        causes = body["details"]["causes"]
        assert [c["field"] for c in causes] == [field] and words in causes[0]["message"], (ref, causes)
        code, _, err = await hub.kubectl("admin", "apply", "-f", write(tmp_path, job))
        assert code != 0 and field in err, err
        status, body = await hub.request("GET", f"{trainjobs_url('default')}/missing")
        assert status == 404, body
    # the namespace is the TrainJob's: a TrainingRuntime of another namespace does not count
    status, body = await hub.request("POST", runtimes_url("team-b"), body=namespaced_runtime("team-b"))
    assert status == 201, body
    status, body = await hub.request("POST", trainjobs_url("default"),
                                     body=trainjob("missing", {"name": "torch-small", "kind": "TrainingRuntime"}))
    assert status == 422 and "not found" in json.dumps(body), body
    # with no runtime stored, torch-distributed is the built-in default
    status, body = await hub.request("POST", trainjobs_url("default"), body=trainjob("builtin",
                                                                                     {"name": "torch-distributed"}))
    assert status == 201, body
    # a stored one of that name wins (here one the gang cannot run: Trainer's MPI runtime under that name)
    mpi = yaml.safe_load(runtime_file("mpi_distributed.yaml").read_text(encoding="utf-8"))
    mpi["metadata"]["name"] = "torch-distributed"
    status, body = await hub.request("POST", CLUSTER_RUNTIMES, body=mpi)
    assert status == 201, body
    status, body = await hub.request("POST", trainjobs_url("default"), body=trainjob("stored",
                                                                                     {"name": "torch-distributed"}))
    assert status == 422 and "spec.mlPolicy.mpi" in json.dumps(body), body


async def test_a_trainjob_may_only_be_suspended_once_its_runtime_is_gone(hub: RunningHub) -> None:
    status, body = await hub.request("POST", runtimes_url("default"), body=namespaced_runtime())
    assert status == 201, body
    job = trainjob("kept", {"name": "torch-small", "kind": "TrainingRuntime"})
    status, stored = await hub.request("POST", trainjobs_url("default"), body=job)
    assert status == 201, stored
    url = f"{trainjobs_url('default')}/kept"
    changed = copy.deepcopy(stored)
    changed["spec"]["runtimeRef"] = {"name": "nowhere"}
    status, body = await hub.request("PUT", url, body=changed)
    assert status == 422 and [(c["field"], '"nowhere" not found' in c["message"])
                              for c in body["details"]["causes"]] == [("spec.runtimeRef.name", True)], body
    changed["spec"]["runtimeRef"] = {"name": "torch-distributed"}  # exists (built in), another gang
    status, body = await hub.request("PUT", url, body=changed)
    assert status == 422 and "only spec.suspend may change" in json.dumps(body), body
    status, body = await hub.request("DELETE", f"{runtimes_url('default')}/torch-small")
    assert status == 200, body
    stored["spec"]["suspend"] = True
    status, stored = await hub.request("PUT", url, body=stored)
    assert status == 200 and stored["spec"]["suspend"] is True, stored
    changed = copy.deepcopy(stored)
    changed["spec"]["trainer"]["image"] = "other:2"
    status, body = await hub.request("PUT", url, body=changed)
    assert status == 422 and "only spec.suspend may change" in json.dumps(body), body
    labelled = copy.deepcopy(stored)
    labelled["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "other"}  # a hint: the twin's queue
    status, body = await hub.request("PUT", url, body=labelled)
    assert status == 422 and "only spec.suspend may change" in json.dumps(body), body


async def test_trainjobs_on_trainers_runtime_and_on_a_namespaced_one_run_to_succeeded(
        tmp_path: Path, runtime_file: Callable[[str], Path]) -> None:
    on_cluster = trainjob("on-cluster", {"name": "torch-distributed", "apiGroup": "trainer.kubeflow.org",
                                         "kind": "ClusterTrainingRuntime"})
    on_namespaced = trainjob("on-namespaced", {"name": "torch-small", "kind": "TrainingRuntime"})
    async with federation(tmp_path, run_seconds=3.0) as env:
        code, out, err = await env.hub.kubectl("admin", "apply", "--validate=strict", "-f",
                                               str(runtime_file("torch_distributed.yaml")))
        assert code == 0 and "created" in out, err
        code, out, err = await env.hub.kubectl("admin", "apply", "--validate=strict", "-f",
                                               write(tmp_path, namespaced_runtime()))
        assert code == 0 and "created" in out, err
        for job in (on_cluster, on_namespaced):
            code, out, err = await env.hub.kubectl("admin", "apply", "--validate=strict", "-f", write(tmp_path, job))
            assert code == 0 and "created" in out, err
        twins = {}
        for job, nodes, nproc in ((on_cluster, 1, "2"), (on_namespaced, 2, "2")):
            name = job["metadata"]["name"]
            twin = await env.api.wait_job("default", name, lambda j: phase(j) in ("Running", "Succeeded"),
                                          timeout=60)
            assert twin["spec"]["frameworkSettings"] == {"port": 29500, "nprocPerNode": nproc}
            assert twin["spec"]["roles"][0]["replicas"] == nodes
            twins[name] = twin
        # deleting the runtimes under the running TrainJobs changes nothing for them
        code, _, err = await env.hub.kubectl("admin", "delete", "clustertrainingruntime", "torch-distributed")
        assert code == 0, err
        code, _, err = await env.hub.kubectl("admin", "delete", "trainingruntime", "torch-small", "-n", "default")
        assert code == 0, err
        command = namespaced_runtime()["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
            "template"]["spec"]["containers"][0]["command"]
        containers = twins["on-namespaced"]["spec"]["roles"][0]["template"]["spec"]["containers"]
        assert containers[0]["command"] == ["torchrun", "train.py"] == small()["spec"]["trainer"]["command"] \
            and command == ["torchrun", "train.py"]
        for job, nodes in ((on_cluster, 1), (on_namespaced, 2)):
            uid = twins[job["metadata"]["name"]]["metadata"]["uid"]

            async def gang(uid: str = uid, nodes: int = nodes) -> list[dict[str, Any]] | None:
                found = await env.live_pods(CLUSTER, uid)
                return found if len(found) == nodes else None

            await wait_until(gang, timeout=30, what=f"the nodes of {job['metadata']['name']}")

            async def complete(job: dict[str, Any] = job) -> dict[str, Any] | None:
                status = await source_status(env, job)
                return status if status.get("phase") == "Succeeded" else None

            status = await wait_until(complete, timeout=60, what=f"{job['metadata']['name']} Complete")
            assert any(c["type"] == "Complete" and c["status"] == "True" for c in status["conditions"]), status
        code, out, err = await env.hub.kubectl("admin", "get", "trainjobs")
        assert code == 0, err
        rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines()[1:]}
        assert rows == {"on-cluster": ["Succeeded", CLUSTER], "on-namespaced": ["Succeeded", CLUSTER]}, out


async def test_a_suspended_trainjob_resumes_after_its_runtime_is_deleted(tmp_path: Path) -> None:
    job = trainjob("resumed", {"name": "torch-small", "kind": "TrainingRuntime"})
    job["spec"]["suspend"] = True
    async with federation(tmp_path, run_seconds=2.0) as env:
        code, _, err = await env.hub.kubectl("admin", "apply", "-f", write(tmp_path, namespaced_runtime()))
        assert code == 0, err
        code, _, err = await env.hub.kubectl("admin", "apply", "-f", write(tmp_path, job))
        assert code == 0, err

        async def shown(wanted: str) -> dict[str, Any] | None:
            status = await source_status(env, job)
            return status if status.get("phase") == wanted else None

        await wait_until(lambda: shown("Suspended"), timeout=30, what="the TrainJob Suspended")
        code, _, err = await env.hub.kubectl("admin", "delete", "trainingruntime", "torch-small", "-n", "default")
        assert code == 0, err
        code, _, err = await env.hub.kubectl("admin", "patch", "trainjob", "resumed", "-n", "default",
                                             "--type=merge", "-p", '{"spec":{"suspend":false}}')
        assert code == 0, err
        await wait_until(lambda: shown("Succeeded"), timeout=60, what="the TrainJob Succeeded")
        twin = await env.api.get("default", "resumed")
        assert twin["spec"]["suspend"] is False and twin["spec"]["roles"][0]["replicas"] == 2
