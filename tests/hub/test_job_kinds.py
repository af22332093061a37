"""The upstream job kinds served by the hub (issue 28): `kubectl apply -f` of the unchanged upstream examples,
`kubectl get <plural>` with Phase, Cluster and Age, strict field validation against the upstream schema, and bad
input refused with nothing stored."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.apis.jobkinds import JOB_KINDS
from federator.clusters.client import ResourceKind
from federator.hub.kinds import SOURCE_FINALIZER
from federator.sim.kubelet import ANNOTATION_EXIT_CODE, ANNOTATION_FAIL_AFTER

from ..apis.jobkinds.test_batchjob import POD_FAILURE_POLICY, POD_TO_POD
from ..apis.jobkinds.test_trainjob import small as small_trainjob
from ..apis.test_job_kinds_kubeflow import EXAMPLES, upstream_example
from ..controllers.jobtest_support import phase, placement_of, wait_until
from ..controllers.lifecycle_support import LIFECYCLE_WITH_TWINS, Env, aimed_job, lifecycle_env
from .hubtest_support import RunningHub
from .test_describe_events import event_rows

CLUSTER = "onprem-rdma-a100"

pytestmark = pytest.mark.kubectl

KINDS = {k.kind: k for k in JOB_KINDS}
SERVICES = ResourceKind(group="", version="v1", plural="services", kind="Service", namespaced=True)


def object_url(obj: dict[str, Any], namespace: str) -> str:
    kind = KINDS[obj["kind"]]
    return f"/apis/{kind.api_version}/namespaces/{namespace}/{kind.plural}/{obj['metadata']['name']}"


def write(tmp_path: Path, obj: dict[str, Any]) -> str:
    path = tmp_path / f"{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj))
    return str(path)


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
async def test_the_unchanged_upstream_example_is_applied_with_kubectl(hub: RunningHub, kind: str,
                                                                      tmp_path: Path) -> None:
    example = upstream_example(*EXAMPLES[kind])
    namespace = example["metadata"].get("namespace", "default")
    code, out, err = await hub.kubectl("admin", "apply", "--validate=strict", "-f", write(tmp_path, example))
    assert code == 0, err
    assert "created" in out
    status, stored = await hub.request("GET", object_url(example, namespace))
    assert status == 200 and stored["spec"] == example["spec"]
    plural = KINDS[kind].plural
    code, out, err = await hub.kubectl("admin", "get", plural, "-n", namespace)
    assert code == 0, err
    assert out.split("\n")[0].split() == ["NAME", "PHASE", "CLUSTER", "AGE"]
    assert example["metadata"]["name"] in out
    code, out, err = await hub.kubectl("admin", "explain", f"{plural}.spec")
    assert code == 0, err
    assert "runPolicy" in out


async def test_server_side_apply_creates_and_updates(hub: RunningHub, tmp_path: Path) -> None:
    example = upstream_example(*EXAMPLES["MPIJob"])
    example["metadata"]["namespace"] = "default"
    code, out, err = await hub.kubectl("admin", "apply", "--server-side", "-f", write(tmp_path, example))
    assert code == 0, err
    example["spec"]["runPolicy"]["suspend"] = True
    code, out, err = await hub.kubectl("admin", "apply", "--server-side", "-f", write(tmp_path, example))
    assert code == 0, err
    status, stored = await hub.request("GET", object_url(example, "default"))
    assert status == 200 and stored["spec"]["runPolicy"]["suspend"] is True
    assert any(f["manager"] == "kubectl" for f in stored["metadata"]["managedFields"])


async def test_an_unknown_field_is_refused_under_strict_validation(hub: RunningHub, tmp_path: Path) -> None:
    example = upstream_example(*EXAMPLES["PyTorchJob"])
    example["spec"]["pytorchReplicaSpecs"]["Worker"]["replicaz"] = 3
    code, _, err = await hub.kubectl("admin", "apply", "--validate=strict", "-f", write(tmp_path, example))
    assert code != 0 and "replicaz" in err
    status, _ = await hub.request("GET", object_url(example, "kubeflow"))
    assert status == 404


@pytest.mark.parametrize(("change", "field"), [
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update({"replicas": 5000}),
     "spec.pytorchReplicaSpecs[Worker].replicas"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update({"replicas": "two"}),
     "spec.pytorchReplicaSpecs[Worker].replicas"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update({"containers": []}),
     "spec.pytorchReplicaSpecs[Worker].template.spec.containers"),
    (lambda j: j["spec"].update({"runPolicy": {"activeDeadlineSeconds": 0}}), "spec.runPolicy.activeDeadlineSeconds"),
    (lambda j: j["spec"].update({"runPolicy": {"activeDeadlineSeconds": 2**63}}),
     "spec.runPolicy.activeDeadlineSeconds"),
    (lambda j: j["metadata"].update({"annotations": {"federator.dev/network": "smoke-signals"}}),
     "metadata.annotations[federator.dev/network]"),
])
async def test_bad_input_is_a_422_naming_the_source_field(hub: RunningHub, change: Any, field: str) -> None:
    example = upstream_example(*EXAMPLES["PyTorchJob"])
    change(example)
    url = object_url(example, "kubeflow").rsplit("/", 1)[0]
    status, body = await hub.request("POST", url, body=example)
    assert status == 422, body
    assert field in [c["field"] for c in body["details"]["causes"]], body
    status, _ = await hub.request("GET", object_url(example, "kubeflow"))
    assert status == 404


async def test_an_mpijob_managed_by_someone_else_is_refused(hub: RunningHub, tmp_path: Path) -> None:
    example = upstream_example(*EXAMPLES["MPIJob"])
    example["metadata"]["namespace"] = "default"
    example["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    code, _, err = await hub.kubectl("admin", "apply", "-f", write(tmp_path, example))
    assert code != 0 and "spec.runPolicy.managedBy" in err, err
    status, _ = await hub.request("GET", object_url(example, "default"))
    assert status == 404
    status, _ = await hub.request("GET", f"/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs/"
                                         f"{example['metadata']['name']}")
    assert status == 404


async def test_only_suspend_and_elastic_bounds_may_change(hub: RunningHub) -> None:
    example = upstream_example(*EXAMPLES["PyTorchJob"])
    url = object_url(example, "kubeflow")
    status, stored = await hub.request("POST", url.rsplit("/", 1)[0], body=example)
    assert status == 201, stored
    stored["spec"]["runPolicy"] = {"suspend": True}
    status, stored = await hub.request("PUT", url, body=stored)
    assert status == 200, stored
    stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    status, body = await hub.request("PUT", url, body=stored)
    assert status == 422 and "only runPolicy.suspend" in json.dumps(body)


async def test_a_researcher_may_submit_in_their_namespace_only(hub: RunningHub) -> None:
    example = upstream_example(*EXAMPLES["TFJob"])
    example["metadata"]["namespace"] = "default"
    status, body = await hub.request("POST", object_url(example, "default").rsplit("/", 1)[0], body=example,
                                     who="researcher")
    assert status == 201, body
    status, body = await hub.request("POST", object_url(example, "team-b").rsplit("/", 1)[0],
                                     body={**example, "metadata": {"name": "x", "namespace": "team-b"}},
                                     who="researcher")
    assert status == 403, body


# ------------------------------------------------------------------ end to end: twin, pods, status, deletion


@contextlib.asynccontextmanager
async def federation(tmp_path: Path, *, run_seconds: float | None) -> AsyncIterator[Env]:
    """A hub running the lifecycle controllers and the twin controller, with one simulated member."""
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=run_seconds, controllers=LIFECYCLE_WITH_TWINS,
                             source_finalizers=(SOURCE_FINALIZER,)) as env:
        yield env


async def source_status(env: Env, example: dict[str, Any]) -> dict[str, Any]:
    status, body = await env.hub.request("GET", object_url(example, example["metadata"]["namespace"]))
    assert status == 200, body
    return dict(body.get("status") or {})


async def member_services(env: Env, namespace: str) -> dict[str, dict[str, Any]]:
    """The member's live Services in `namespace`, by name."""
    client = await env.member(CLUSTER)
    items = (await client.list(SERVICES, namespace=namespace)).items
    return {i["metadata"]["name"]: i for i in items if not i["metadata"].get("deletionTimestamp")}


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or () if c["type"] == ctype), None)


async def test_an_upstream_pytorchjob_runs_to_succeeded_through_its_twin(tmp_path: Path) -> None:
    example = upstream_example(*EXAMPLES["PyTorchJob"])
    namespace, name = example["metadata"]["namespace"], example["metadata"]["name"]
    async with federation(tmp_path, run_seconds=4.0) as env:
        code, out, err = await env.hub.kubectl("admin", "apply", "-f", write(tmp_path, example))
        assert code == 0, err
        twin = await env.api.wait_job(namespace, name, lambda j: phase(j) in ("Running", "Succeeded"), timeout=60)
        assert twin["metadata"]["annotations"]["federator.dev/source-kind"] == "PyTorchJob.kubeflow.org"
        (owner,) = twin["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("PyTorchJob", name, True)
        assert twin["spec"]["framework"] == "pytorch"
        uid = twin["metadata"]["uid"]
        async def gang() -> list[dict[str, Any]] | None:
            found = await env.live_pods(CLUSTER, uid)
            return found if len(found) == 2 else None

        pods = await wait_until(gang, timeout=30, what="the gang's two pods")
        by_role = {(p["metadata"]["labels"]["training.kubeflow.org/replica-type"],
                    p["metadata"]["labels"]["training.kubeflow.org/replica-index"]): p for p in pods}
        assert set(by_role) == {("master", "0"), ("worker", "0")}
        master = by_role[("master", "0")]
        labels = master["metadata"]["labels"]
        assert labels["training.kubeflow.org/job-name"] == name
        assert labels["training.kubeflow.org/operator-name"] == "pytorchjob-controller"
        assert labels["training.kubeflow.org/job-role"] == "master"
        assert "training.kubeflow.org/job-role" not in by_role[("worker", "0")]["metadata"]["labels"]
        env_vars = {e["name"]: e.get("value") for e in master["spec"]["containers"][0]["env"]}
        assert env_vars["RANK"] == "0" and env_vars["WORLD_SIZE"] == "2" and "MASTER_ADDR" in env_vars
        # the operator's DNS names: hostname <job>-<type>-<i> and a headless Service of that name selecting the
        # pod alone (the pod names stay the hub's), and the env names them as the operator does
        worker = by_role[("worker", "0")]
        assert (master["spec"]["hostname"], worker["spec"]["hostname"]) == (f"{name}-master-0", f"{name}-worker-0")
        assert "subdomain" not in master["spec"] and master["metadata"]["name"] != f"{name}-master-0"
        worker_env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
        assert worker_env["MASTER_ADDR"] == worker_env["PET_MASTER_ADDR"] == f"{name}-master-0"
        services = await member_services(env, namespace)
        for pod in (master, worker):
            service = services[pod["spec"]["hostname"]]
            assert service["spec"]["clusterIP"] == "None"
            assert all(pod["metadata"]["labels"].get(k) == v for k, v in service["spec"]["selector"].items())

        async def succeeded() -> dict[str, Any] | None:
            status = await source_status(env, example)
            return status if status.get("phase") == "Succeeded" else None

        status = await wait_until(succeeded, timeout=60, what="the PyTorchJob Succeeded")
        assert status["cluster"] == CLUSTER
        done = condition(status, "Succeeded")
        assert done is not None and done["status"] == "True" and done["reason"] == "PyTorchJobSucceeded"
        created = condition(status, "Created")
        assert created is not None and created["status"] == "True"
        assert status["replicaStatuses"]["Master"]["succeeded"] == 1
        assert status["replicaStatuses"]["Worker"]["succeeded"] == 1
        assert "startTime" in status and "completionTime" in status
        code, out, err = await env.hub.kubectl("admin", "get", "pytorchjobs", "-n", namespace)
        assert code == 0, err
        row = out.splitlines()[1].split()
        assert row[:3] == [name, "Succeeded", CLUSTER], out

        # what happened to the gang is on the PyTorchJob too (the twin's Events are recorded on both)
        async def described() -> list[list[str]] | None:
            code, out, err = await env.hub.kubectl("admin", "describe", "pytorchjob", name, "-n", namespace)
            assert code == 0, err
            rows = event_rows(out) if "Events:" in out else []
            return rows if {"Placed", "Dispatched", "Running"} <= {row[1] for row in rows} else None

        rows = await wait_until(described, timeout=60, what="kubectl describe pytorchjob lists the gang's Events")
        assert any(row[1] == "Placed" and f"placed in {CLUSTER}" in " ".join(row) for row in rows), rows
        # federator describe: the PyTorchJob's conditions, then its gang (the twin) with placement and pods
        code, out, err = await env.hub.cli("admin", "describe", "pytorchjob", name, "-n", namespace)
        assert code == 0, err
        assert "Kind:         PyTorchJob (kubeflow.org/v1)" in out and f"Cluster:      {CLUSTER}" in out, out
        assert "PyTorchJobSucceeded" in out and f"Gang:         TrainingJob {namespace}/{name}" in out, out
        assert f"Placed in {CLUSTER}" in out, out
        code, out2, err = await env.hub.cli("admin", "describe", "pytorchjobs.kubeflow.org", name, "-n", namespace)
        assert code == 0 and out2.splitlines()[:2] == out.splitlines()[:2], err

        code, out, err = await env.hub.kubectl("admin", "delete", "pytorchjob", name, "-n", namespace,
                                               "--timeout=60s")
        assert code == 0, err
        status_code, _ = await env.hub.request("GET", object_url(example, namespace))
        assert status_code == 404
        status_code, _ = await env.hub.request(
            "GET", f"/apis/federator.dev/v1alpha1/namespaces/{namespace}/trainingjobs/{name}")
        assert status_code == 404
        groups, pods = await env.fed.member_objects(CLUSTER, uid)
        assert groups == [] and [p for p in pods if not p["metadata"].get("deletionTimestamp")] == []

        async def services_gone() -> bool | None:
            left = await member_services(env, namespace)
            return True if not {f"{name}-master-0", f"{name}-worker-0"} & set(left) else None

        await wait_until(services_gone, timeout=30, what="the per-replica Services to go with the gang")


async def test_a_replicas_own_service_comes_back_with_its_pod(tmp_path: Path) -> None:
    """Status sync's restart of a pod and the elastic grow create pods through `recreate_pods`: a Kubeflow
    replica's own Service (its DNS name) is made with the pod when it is missing."""
    example = upstream_example(*EXAMPLES["PyTorchJob"])
    namespace, name = example["metadata"]["namespace"], example["metadata"]["name"]
    async with federation(tmp_path, run_seconds=None) as env:
        code, out, err = await env.hub.kubectl("admin", "apply", "-f", write(tmp_path, example))
        assert code == 0, err
        twin = await env.api.wait_job(namespace, name, lambda j: phase(j) == "Running", timeout=60)
        epoch = placement_of(twin)["epoch"]
        worker = next(p for p in await env.live_pods(CLUSTER, twin["metadata"]["uid"])
                      if p["spec"]["hostname"] == f"{name}-worker-0")
        client = await env.member(CLUSTER)
        await client.delete(SERVICES, namespace=namespace, name=f"{name}-worker-0")

        async def gone() -> bool | None:
            return True if f"{name}-worker-0" not in await member_services(env, namespace) else None

        await wait_until(gone, timeout=30, what="the worker's Service deleted")
        dispatcher = env.hub.context.parts.dispatcher
        created = await dispatcher.recreate_pods(twin, cluster=CLUSTER, epoch=epoch,
                                                 pods={worker["metadata"]["name"]: {}})
        assert created == 0  # the pod is there: only its Service was missing
        service = (await member_services(env, namespace))[f"{name}-worker-0"]
        assert service["spec"]["selector"]["federator.dev/epoch"] == str(epoch)
        assert all(worker["metadata"]["labels"].get(k) == v for k, v in service["spec"]["selector"].items())


async def test_a_trainingjob_of_the_same_name_is_never_adopted(tmp_path: Path) -> None:
    example = upstream_example(*EXAMPLES["TFJob"])
    namespace, name = example["metadata"]["namespace"], example["metadata"]["name"]
    async with federation(tmp_path, run_seconds=30.0) as env:
        theirs = aimed_job(name, CLUSTER, namespace=namespace, ps=0, workers=1, gpus=0)
        theirs["spec"]["suspend"] = True
        await env.api.submit(theirs)
        code, _, err = await env.hub.kubectl("admin", "apply", "-f", write(tmp_path, example))
        assert code == 0, err

        async def refused() -> dict[str, Any] | None:
            found = condition(await source_status(env, example), "Created")
            return found if found is not None and found["reason"] == "NameTaken" else None

        created = await wait_until(refused, timeout=30, what="Created=False NameTaken")
        assert created["status"] == "False" and "never adopts" in created["message"]
        job = await env.api.get(namespace, name)
        assert job["spec"] == {**theirs["spec"], **{k: job["spec"][k] for k in job["spec"]
                                                    if k not in theirs["spec"]}}
        assert "ownerReferences" not in job["metadata"]
        await env.api.delete(namespace, name)  # the other job goes: the TFJob gets its twin

        async def twin_made() -> dict[str, Any] | None:
            code, job = await env.hub.request(
                "GET", f"/apis/federator.dev/v1alpha1/namespaces/{namespace}/trainingjobs/{name}")
            return job if code == 200 and job["metadata"].get("ownerReferences") else None

        twin = await wait_until(twin_made, timeout=30, what="the TFJob's twin")
        assert twin["spec"]["framework"] == "tensorflow"

        async def event() -> dict[str, Any] | None:
            _, listing = await env.hub.request("GET", f"/api/v1/namespaces/{namespace}/events")
            return next((e for e in listing["items"] if e["reason"] == "NameTaken"), None)

        recorded = await wait_until(event, timeout=30, what="the NameTaken Event")
        assert recorded["involvedObject"]["kind"] == "TFJob" and recorded["type"] == "Warning"

        # a PaddleJob of the same name: the twin is the TFJob's, so it waits, and it can be deleted meanwhile
        paddle = upstream_example(*EXAMPLES["PaddleJob"])
        paddle["metadata"]["name"] = name
        code, _, err = await env.hub.kubectl("admin", "apply", "-f", write(tmp_path, paddle))
        assert code == 0, err

        async def paddle_refused() -> dict[str, Any] | None:
            found = condition(await source_status(env, paddle), "Created")
            return found if found is not None and found["reason"] == "NameTaken" else None

        await wait_until(paddle_refused, timeout=30, what="the PaddleJob's NameTaken")
        code, _, err = await env.hub.kubectl("admin", "delete", "paddlejob", name, "-n", namespace, "--timeout=30s")
        assert code == 0, err
        still = await twin_made()
        assert still is not None and still["metadata"]["uid"] == twin["metadata"]["uid"]
        assert still["spec"]["framework"] == "tensorflow"


async def test_the_twin_follows_suspend_and_the_source_shows_it(tmp_path: Path) -> None:
    example = upstream_example(*EXAMPLES["PaddleJob"])
    example["spec"]["runPolicy"] = {"suspend": True}
    namespace, name = example["metadata"]["namespace"], example["metadata"]["name"]
    async with federation(tmp_path, run_seconds=2.0) as env:
        code, _, err = await env.hub.kubectl("admin", "apply", "-f", write(tmp_path, example))
        assert code == 0, err

        async def shown(wanted: str) -> dict[str, Any] | None:
            status = await source_status(env, example)
            return status if status.get("phase") == wanted else None

        status = await wait_until(lambda: shown("Suspended"), timeout=30, what="the PaddleJob Suspended")
        suspended = condition(status, "Suspended")
        assert suspended is not None and suspended["reason"] == "PaddleJobSuspended"
        code, _, err = await env.hub.kubectl("admin", "patch", "paddlejob", name, "-n", namespace, "--type=merge",
                                             "-p", '{"spec":{"runPolicy":{"suspend":false}}}')
        assert code == 0, err
        status = await wait_until(lambda: shown("Succeeded"), timeout=60, what="the PaddleJob Succeeded")
        twin = await env.api.get(namespace, name)
        assert twin["spec"]["suspend"] is False and twin["spec"]["framework"] == "paddle"
        assert status["replicaStatuses"]["Worker"]["succeeded"] == 2


async def test_the_twin_follows_the_elastic_bounds_while_not_placed(tmp_path: Path) -> None:
    example = upstream_example(*EXAMPLES["PyTorchJob"])
    example["spec"]["runPolicy"] = {"suspend": True}
    example["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2}
    namespace, name = example["metadata"]["namespace"], example["metadata"]["name"]
    async with federation(tmp_path, run_seconds=2.0) as env:
        code, _, err = await env.hub.kubectl("admin", "apply", "-f", write(tmp_path, example))
        assert code == 0, err

        async def worker_bounds(wanted: tuple[int, int]) -> dict[str, Any] | None:
            code, job = await env.hub.request(
                "GET", f"/apis/federator.dev/v1alpha1/namespaces/{namespace}/trainingjobs/{name}")
            if code != 200:
                return None
            worker = next(r for r in job["spec"]["roles"] if r["name"] == "worker")
            return job if (worker.get("minReplicas"), worker.get("maxReplicas")) == wanted else None

        await wait_until(lambda: worker_bounds((1, 2)), timeout=30, what="the twin's elastic workers")
        code, _, err = await env.hub.kubectl("admin", "patch", "pytorchjob", name, "-n", namespace, "--type=merge",
                                             "-p", '{"spec":{"elasticPolicy":{"maxReplicas":4}}}')
        assert code == 0, err
        twin = await wait_until(lambda: worker_bounds((1, 4)), timeout=30, what="the twin's new maximum")
        assert twin["spec"]["suspend"] is True


# ------------------------------------------------------------------ JobSet and batch/v1 Job (issue 28)

JOBSET_EXAMPLE = Path(__file__).resolve().parents[1] / "apis" / "jobkinds" / "upstream" / "jobset-paralleljobs.yaml"


def jobset_example() -> dict[str, Any]:
    loaded = yaml.safe_load(JOBSET_EXAMPLE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def indexed_job() -> dict[str, Any]:
    loaded = yaml.safe_load(POD_TO_POD)
    assert isinstance(loaded, dict)
    return loaded


def in_default(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as stored when applied without a namespace (kubectl's default namespace)."""
    return {**obj, "metadata": {**obj["metadata"], "namespace": "default"}}


async def test_the_upstream_jobset_runs_whole_on_one_cluster_to_completed(tmp_path: Path) -> None:
    example = jobset_example()
    name = example["metadata"]["name"]
    stored = in_default(example)
    async with federation(tmp_path, run_seconds=4.0) as env:
        code, out, err = await env.hub.kubectl("admin", "apply", "--validate=strict", "-f",
                                               str(JOBSET_EXAMPLE))  # the file as published
        assert code == 0 and "created" in out, err
        twin = await env.api.wait_job("default", name, lambda j: phase(j) in ("Running", "Succeeded"), timeout=60)
        assert twin["metadata"]["annotations"]["federator.dev/source-kind"] == "JobSet.jobset.x-k8s.io"
        assert twin["status"]["placement"]["cluster"] == CLUSTER
        uid = twin["metadata"]["uid"]

        async def gang() -> list[dict[str, Any]] | None:
            found = await env.live_pods(CLUSTER, uid)
            return found if len(found) == 5 else None

        pods = await wait_until(gang, timeout=30, what="the JobSet's five pods, all on one cluster")
        labels = [p["metadata"]["labels"] for p in pods]
        assert sorted((lb["jobset.sigs.k8s.io/replicatedjob-name"], lb["batch.kubernetes.io/job-completion-index"])
                      for lb in labels) == [("driver", "0"), *[("workers", str(i)) for i in range(4)]]
        assert {lb["jobset.sigs.k8s.io/jobset-name"] for lb in labels} == {name}
        assert {lb["jobset.sigs.k8s.io/global-replicas"] for lb in labels} == {"2"}
        assert {lb["batch.kubernetes.io/job-name"] for lb in labels} == {f"{name}-workers-0", f"{name}-driver-0"}
        for pod in pods:
            env_vars = {e["name"]: e for e in pod["spec"]["containers"][0].get("env") or ()}
            assert env_vars["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == (
                "metadata.labels['batch.kubernetes.io/job-completion-index']")
        # JobSet's DNS names: <jobset>-<rjob>-<job index>-<pod index>.<jobset>, a headless Service of the name
        assert sorted(p["spec"]["hostname"] for p in pods) == sorted(
            [f"{name}-driver-0-0", *[f"{name}-workers-0-{i}" for i in range(4)]])
        assert {p["spec"]["subdomain"] for p in pods} == {name}
        assert all(p["metadata"]["name"] != p["spec"]["hostname"] for p in pods)  # the hub's pod names
        service = (await member_services(env, "default"))[name]
        assert service["spec"]["clusterIP"] == "None"
        assert all(all(p["metadata"]["labels"].get(k) == v for k, v in service["spec"]["selector"].items())
                   for p in pods)

        async def completed() -> dict[str, Any] | None:
            status = await source_status(env, stored)
            return status if status.get("phase") == "Succeeded" else None

        status = await wait_until(completed, timeout=60, what="the JobSet Completed")
        done = condition(status, "Completed")
        assert done is not None and (done["status"], done["reason"]) == ("True", "AllJobsCompleted")
        assert status["terminalState"] == "Completed" and status["cluster"] == CLUSTER
        assert {s["name"]: s["succeeded"] for s in status["replicatedJobsStatus"]} == {"workers": 1, "driver": 1}
        code, out, err = await env.hub.kubectl("admin", "get", "jobsets")
        assert code == 0, err
        assert out.split("\n")[0].split() == ["NAME", "PHASE", "CLUSTER", "AGE"]
        assert out.splitlines()[1].split()[:3] == [name, "Succeeded", CLUSTER], out


async def test_an_indexed_batch_job_runs_to_complete_and_kubectl_get_jobs_shows_it(tmp_path: Path) -> None:
    example = indexed_job()
    name = example["metadata"]["name"]
    stored = in_default(example)
    async with federation(tmp_path, run_seconds=4.0) as env:
        code, out, err = await env.hub.kubectl("admin", "apply", "--validate=strict", "-f", write(tmp_path, example))
        assert code == 0 and "created" in out, err
        twin = await env.api.wait_job("default", name, lambda j: phase(j) in ("Running", "Succeeded"), timeout=60)
        assert twin["metadata"]["annotations"]["federator.dev/source-kind"] == "Job.batch"
        (owner,) = twin["metadata"]["ownerReferences"]
        assert (owner["apiVersion"], owner["kind"], owner["name"]) == ("batch/v1", "Job", name)
        uid = twin["metadata"]["uid"]

        async def gang() -> list[dict[str, Any]] | None:
            found = await env.live_pods(CLUSTER, uid)
            return found if len(found) == 3 else None

        pods = await wait_until(gang, timeout=30, what="the Job's three pods")
        labels = [p["metadata"]["labels"] for p in pods]
        assert sorted(lb["batch.kubernetes.io/job-completion-index"] for lb in labels) == ["0", "1", "2"]
        assert {(lb["batch.kubernetes.io/job-name"], lb["job-name"]) for lb in labels} == {(name, name)}
        assert {lb["batch.kubernetes.io/controller-uid"] for lb in labels} == {owner["uid"]}
        for pod in pods:
            index = pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
            assert pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == index
            assert any(e["name"] == "JOB_COMPLETION_INDEX" for e in pod["spec"]["containers"][0]["env"])

        async def complete() -> dict[str, Any] | None:
            status = await source_status(env, stored)
            return status if status.get("phase") == "Succeeded" else None

        status = await wait_until(complete, timeout=60, what="the Job Complete")
        done = condition(status, "Complete")
        assert done is not None and (done["status"], done["reason"]) == ("True", "CompletionsReached")
        assert (status["succeeded"], status["active"], status["cluster"]) == (3, 0, CLUSTER)
        assert "startTime" in status and "completionTime" in status
        code, out, err = await env.hub.kubectl("admin", "get", "jobs")
        assert code == 0, err
        assert out.split("\n")[0].split() == ["NAME", "PHASE", "CLUSTER", "AGE"]
        assert out.splitlines()[1].split()[:3] == [name, "Succeeded", CLUSTER], out


async def test_a_batch_jobs_pod_failure_policy_fails_it_on_a_bug_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    """spec.podFailurePolicy becomes the twin's spec.failurePolicy: a pod exiting 42 (the simulator's exit-code
    annotation) fails the Job at once with kube's reason PodFailurePolicy; a FailIndex rule is a 422 naming the
    rule's action, and nothing is stored."""
    example = yaml.safe_load(POD_FAILURE_POLICY)
    example["metadata"]["namespace"] = "default"
    example["spec"]["template"]["metadata"] = {"annotations": {ANNOTATION_FAIL_AFTER: "0.5",
                                                               ANNOTATION_EXIT_CODE: "42"}}
    name = example["metadata"]["name"]
    async with federation(tmp_path, run_seconds=None) as env:
        url = object_url(example, "default")
        bad = json.loads(json.dumps(example))
        bad["spec"]["podFailurePolicy"]["rules"][0]["action"] = "FailIndex"
        status, body = await env.hub.request("POST", url.rsplit("/", 1)[0], body=bad)
        assert status == 422, body
        assert [c["field"] for c in body["details"]["causes"]] == ["spec.podFailurePolicy.rules[0].action"], body
        for where in (url, f"/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs/{name}"):
            assert (await env.hub.request("GET", where))[0] == 404, where

        status, body = await env.hub.request("POST", url.rsplit("/", 1)[0], body=example)
        assert status == 201, body
        twin = await env.api.wait_job("default", name, lambda j: phase(j) == "Failed", timeout=60, what="failed")
        assert twin["spec"]["failurePolicy"] == example["spec"]["podFailurePolicy"]
        failed = next(c for c in twin["status"]["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "PodFailurePolicy", failed
        assert "matched spec.failurePolicy.rules[0] (exit code 42 In [42]): FailJob" in failed["message"], failed

        async def job_failed() -> dict[str, Any] | None:
            found = await source_status(env, example)
            return found if condition(found, "Failed") is not None else None

        shown = await wait_until(job_failed, timeout=30, what="the Job Failed")
        mirrored = condition(shown, "Failed")
        assert mirrored is not None and (mirrored["status"], mirrored["reason"]) == ("True", "PodFailurePolicy")
        assert "exit code 42" in mirrored["message"], mirrored


def _over_cap_jobset(obj: dict[str, Any]) -> None:
    obj["spec"]["replicatedJobs"][0]["replicas"] = 5000


def _over_cap_job(obj: dict[str, Any]) -> None:
    obj["spec"].update({"completions": 5000, "parallelism": 5000})


@pytest.mark.parametrize(("make", "change", "strict_field", "cap_field", "managed_by"), [
    (jobset_example, lambda o: o["spec"]["replicatedJobs"][0].update({"replicaz": 2}), "replicaz",
     "spec.replicatedJobs[0].replicas", ("spec", "managedBy")),
    (indexed_job, lambda o: o["spec"].update({"parallelizm": 2}), "parallelizm", "spec.parallelism",
     ("spec", "managedBy")),
])
async def test_bad_jobsets_and_jobs_are_refused_and_nothing_is_stored(
        hub: RunningHub, tmp_path: Path, make: Any, change: Any, strict_field: str, cap_field: str,
        managed_by: tuple[str, str]) -> None:
    example = make()
    stored = in_default(example)
    url = object_url(stored, "default")
    twin_url = f"/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs/{example['metadata']['name']}"

    async def nothing_stored() -> None:
        for where in (url, twin_url):
            status, _ = await hub.request("GET", where)
            assert status == 404, where

    unknown = make()
    change(unknown)
    code, _, err = await hub.kubectl("admin", "apply", "--validate=strict", "-f", write(tmp_path, unknown))
    assert code != 0 and strict_field in err, err
    await nothing_stored()

    over = in_default(make())
    (_over_cap_jobset if over["kind"] == "JobSet" else _over_cap_job)(over)
    status, body = await hub.request("POST", url.rsplit("/", 1)[0], body=over)
    assert status == 422, body
    assert cap_field in [c["field"] for c in body["details"]["causes"]], body
    await nothing_stored()

    theirs = make()
    theirs[managed_by[0]][managed_by[1]] = "kueue.x-k8s.io/multikueue"
    code, _, err = await hub.kubectl("admin", "apply", "-f", write(tmp_path, theirs))
    assert code != 0 and "spec.managedBy" in err, err
    await nothing_stored()


async def test_a_batch_job_may_only_be_suspended_or_resumed_after_creation(hub: RunningHub) -> None:
    example = in_default(indexed_job())
    example["spec"]["suspend"] = True
    url = object_url(example, "default")
    status, stored = await hub.request("POST", url.rsplit("/", 1)[0], body=example)
    assert status == 201, stored
    changed = json.loads(json.dumps(stored))
    changed["spec"]["parallelism"] = changed["spec"]["completions"] = 2
    status, body = await hub.request("PUT", url, body=changed)
    assert status == 422 and "only spec.suspend may change" in json.dumps(body), body
    stored["spec"]["suspend"] = False
    status, body = await hub.request("PUT", url, body=stored)
    assert status == 200 and body["spec"]["suspend"] is False and body["spec"]["parallelism"] == 3, body
    for resource, words in (("jobs.spec.completionMode", "Indexed"), ("jobsets.spec.replicatedJobs", "replicas"),
                            ("trainjobs.spec.trainer", "numNodes"), ("jobs.status.cluster", "member cluster")):
        code, out, err = await hub.kubectl("admin", "explain", resource)
        assert code == 0 and words in out, (resource, err)


async def test_a_trainjob_runs_to_complete_as_trainers_jobset(tmp_path: Path) -> None:
    example = small_trainjob()
    example["metadata"]["namespace"] = "default"
    name = example["metadata"]["name"]
    async with federation(tmp_path, run_seconds=3.0) as env:
        code, out, err = await env.hub.kubectl("admin", "apply", "--validate=strict", "-f", write(tmp_path, example))
        assert code == 0 and "created" in out, err
        twin = await env.api.wait_job("default", name, lambda j: phase(j) in ("Running", "Succeeded"), timeout=60)
        assert twin["spec"]["framework"] == "pytorch"
        uid = twin["metadata"]["uid"]
        nodes = example["spec"]["trainer"]["numNodes"]

        async def gang() -> list[dict[str, Any]] | None:
            found = await env.live_pods(CLUSTER, uid)
            return found if len(found) == nodes else None

        pods = await wait_until(gang, timeout=30, what="the TrainJob's nodes")
        labels = [p["metadata"]["labels"] for p in pods]
        assert {(lb["jobset.sigs.k8s.io/jobset-name"], lb["jobset.sigs.k8s.io/replicatedjob-name"])
                for lb in labels} == {(name, "node")}
        assert sorted(lb["batch.kubernetes.io/job-completion-index"] for lb in labels) == [
            str(i) for i in range(nodes)]

        async def complete() -> dict[str, Any] | None:
            status = await source_status(env, example)
            return status if status.get("phase") == "Succeeded" else None

        status = await wait_until(complete, timeout=60, what="the TrainJob Complete")
        done = condition(status, "Complete")
        assert done is not None and (done["status"], done["reason"]) == ("True", "AllJobsCompleted")
        code, out, err = await env.hub.kubectl("admin", "get", "trainjobs")
        assert code == 0, err
        assert out.splitlines()[1].split()[:3] == [name, "Succeeded", CLUSTER], out


@pytest.mark.parametrize("args, message", [
    (("describe", "nosuchjobs", "x"), "describe: unknown kind 'nosuchjobs'; one of: job, pytorchjob"),
    (("describe", "jobs.batch", "missing", "-n", "default"), 'jobs.batch "missing" not found'),
    (("describe", "pytorchjob", "missing", "-n", "default"), 'pytorchjobs.kubeflow.org "missing" not found'),
    (("describe", "pytorchjob", "../../etc", "-n", "default"), "NotFound"),
])
async def test_describe_of_an_unknown_kind_or_object_is_one_error_line(hub: RunningHub, args: tuple[str, ...],
                                                                       message: str) -> None:
    code, out, err = await hub.cli("admin", *args)
    assert code != 0 and out == "", out
    (line,) = err.strip().splitlines()
    assert line.startswith(("error: ", "Error from server")) and message in line, err


async def test_suspending_a_running_upstream_job_deletes_its_gang_and_resuming_runs_it_again(tmp_path: Path) -> None:
    """runPolicy.suspend of a running PyTorchJob flows into its twin, whose gang leaves the member as a
    suspended TrainingJob's does (issue 31 item 6); false places it again at a higher epoch."""
    example = upstream_example(*EXAMPLES["PyTorchJob"])
    namespace, name = example["metadata"]["namespace"], example["metadata"]["name"]
    async with federation(tmp_path, run_seconds=None) as env:
        code, _, err = await env.hub.kubectl("admin", "apply", "-f", write(tmp_path, example))
        assert code == 0, err
        twin = await env.api.wait_job(namespace, name, lambda j: phase(j) == "Running", timeout=60)
        uid, epoch = twin["metadata"]["uid"], placement_of(twin)["epoch"]
        assert await env.live_pods(CLUSTER, uid)
        code, _, err = await env.hub.kubectl("admin", "patch", "pytorchjob", name, "-n", namespace, "--type=merge",
                                             "-p", '{"spec":{"runPolicy":{"suspend":true}}}')
        assert code == 0, err
        await env.api.wait_job(namespace, name, lambda j: phase(j) == "Suspended", timeout=30, what="Suspended")

        async def gone() -> bool:
            groups, pods = await env.fed.member_objects(CLUSTER, uid)
            return not groups and not pods

        await wait_until(gone, timeout=30, what="the twin's gang gone from the member")

        async def shown(wanted: str) -> dict[str, Any] | None:
            status = await source_status(env, example)
            return status if status.get("phase") == wanted else None

        status = await wait_until(lambda: shown("Suspended"), timeout=30, what="the PyTorchJob Suspended")
        assert (condition(status, "Suspended") or {}).get("status") == "True"
        code, _, err = await env.hub.kubectl("admin", "patch", "pytorchjob", name, "-n", namespace, "--type=merge",
                                             "-p", '{"spec":{"runPolicy":{"suspend":false}}}')
        assert code == 0, err
        back = await env.api.wait_job(namespace, name, lambda j: phase(j) == "Running", timeout=60,
                                      what="Running again")
        assert placement_of(back)["epoch"] > epoch
        await wait_until(lambda: shown("Running"), timeout=30, what="the PyTorchJob Running again")
