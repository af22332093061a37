"""Deleting a namespace on the hub (issue 28 item 6): real SimClusters, a real hub with every lifecycle
controller and the namespace controller, kube's NamespaceLifecycle on.

`kubectl apply -f` of one file holding a Namespace and a TrainingJob in it creates both; the job runs in
its member; `kubectl delete ns` turns the namespace Terminating, deletes the job (its member-cleanup
finalizer removes the member's PodGroup and pods first), the namespace's Events, and then the namespace.
The same with a Kubeflow PyTorchJob (issue 28's bar), which the hub runs through its twin TrainingJob: the
namespace controller deletes both, the twin's finalizer waits for the member's objects, the PyTorchJob's for
its twin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.clusters.client import PODS
from federator.controllers.namespaces import namespace_lifecycle
from federator.delegation.adapter import LABEL_JOB_UID
from federator.hub.kinds import MEMBER_CLEANUP_FINALIZER, SOURCE_FINALIZER

from .jobtest_support import phase, wait_until
from .lifecycle_support import CLUSTER_LABEL, LIFECYCLE, LIFECYCLE_WITH_TWINS, Env, aimed_job, lifecycle_env
from .test_gang_service import CONFIG_MAPS, SERVICES

pytestmark = pytest.mark.slow
CLUSTER = "onprem-rdma-a100"


async def test_kubectl_delete_namespace_removes_its_jobs_and_their_member_objects(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, controllers=(*LIFECYCLE, namespace_lifecycle),
                             namespaces="lifecycle", namespace_retry_seconds=0.05) as env:
        hub = env.hub
        manifest = yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research"}},
                                       aimed_job("short-lived", CLUSTER, namespace="research")])
        code, out, err = await hub.kubectl("admin", "apply", "-f", "-", stdin=manifest)
        assert code == 0, err
        assert "namespace/research created" in out and "trainingjob.federator.dev/short-lived created" in out
        job = await env.api.wait_job("research", "short-lived", lambda j: phase(j) == "Running", what="running")
        uid = job["metadata"]["uid"]
        assert MEMBER_CLEANUP_FINALIZER in job["metadata"]["finalizers"]
        groups, pods = await env.fed.member_objects(CLUSTER, uid)
        assert len(groups) == 1 and len(pods) == 3
        status, events = await hub.request("GET", "/api/v1/namespaces/research/events")
        assert status == 200 and events["items"], events  # the controllers recorded Placed, Dispatched, ...

        code, out, err = await hub.kubectl("admin", "delete", "ns", "research", "--timeout=90s", timeout=120)
        assert code == 0 and 'namespace "research" deleted' in out, err

        # kubectl waited until the namespace was gone, which comes only after its content went
        assert (await hub.request("GET", "/api/v1/namespaces/research"))[0] == 404
        assert (await hub.request("GET", f"/apis/federator.dev/v1alpha1/namespaces/research/trainingjobs/"
                                         "short-lived"))[0] == 404
        # the job's finalizer went only after the member showed nothing of it left
        groups, pods = await env.fed.member_objects(CLUSTER, uid)
        assert groups == [] and pods == []

        async def events_gone() -> bool:  # an Event recorded while the job went may be written after the pass
            status, listing = await hub.request("GET", "/api/v1/namespaces/research/events")
            return status == 200 and listing["items"] == []

        await wait_until(events_gone, what="the namespace's events to be gone")
        # the namespace may be created again, empty
        code, _, err = await hub.kubectl("admin", "create", "namespace", "research")
        assert code == 0, err
        status, listing = await hub.request("GET", "/apis/federator.dev/v1alpha1/namespaces/research/trainingjobs")
        assert status == 200 and listing["items"] == []


PYTORCHJOBS = "/apis/kubeflow.org/v1/namespaces/vision/pytorchjobs"
TRAININGJOBS = "/apis/federator.dev/v1alpha1/namespaces/vision/trainingjobs"


def pytorchjob(name: str) -> dict[str, Any]:
    """A PyTorchJob of Master 1 + Worker 2 with plain containers, aimed at CLUSTER."""
    template = {"spec": {"containers": [{"name": "pytorch", "image": "trainer:1.4",
                                         "command": ["python", "/opt/train.py"]}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "vision",
                         "annotations": {"federator.dev/cluster-selector": f"{CLUSTER_LABEL}={CLUSTER}"}},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
                "Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": template}}}}


async def member_leftovers(env: Env, uid: str) -> dict[str, list[str]]:
    """Every member object of the job `uid` still there, deleting or not (PodGroup, pods, Service, ConfigMaps)."""
    client = await env.member(CLUSTER)
    selector = f"{LABEL_JOB_UID}={uid}"
    groups, _ = await env.fed.member_objects(CLUSTER, uid)
    found = {"podgroups": [g["metadata"]["name"] for g in groups]}
    for kind in (PODS, SERVICES, CONFIG_MAPS):
        found[kind.plural] = [o["metadata"]["name"] for o in (await client.list_all(kind, label_selector=selector)).items]
    return {k: v for k, v in found.items() if v}


async def test_kubectl_delete_namespace_removes_its_pytorchjob_its_twin_and_their_member_objects(
        tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None, controllers=(*LIFECYCLE_WITH_TWINS, namespace_lifecycle),
                             source_finalizers=(SOURCE_FINALIZER,), namespaces="lifecycle",
                             namespace_retry_seconds=0.05) as env:
        hub = env.hub
        manifest = yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vision"}},
                                       pytorchjob("mnist")])
        code, out, err = await hub.kubectl("admin", "apply", "-f", "-", stdin=manifest)
        assert code == 0, err
        assert "namespace/vision created" in out and "pytorchjob.kubeflow.org/mnist created" in out, out
        twin = await env.api.wait_job("vision", "mnist", lambda j: phase(j) == "Running", timeout=60,
                                      what="the twin running")
        status, source = await hub.request("GET", f"{PYTORCHJOBS}/mnist")
        assert status == 200 and SOURCE_FINALIZER in source["metadata"]["finalizers"], source
        (owner,) = twin["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"]) == ("PyTorchJob", source["metadata"]["uid"])
        assert MEMBER_CLEANUP_FINALIZER in twin["metadata"]["finalizers"]
        uid = twin["metadata"]["uid"]
        groups, pods = await env.fed.member_objects(CLUSTER, uid)
        assert len(groups) == 1 and len(pods) == 3
        held = await member_leftovers(env, uid)
        # the gang's headless Service and, in render mode, the training operator's per-replica Services
        assert sorted(held.get("services", ())) == sorted([pods[0]["metadata"]["name"].rsplit("-", 2)[0],
                                                           "mnist-master-0", "mnist-worker-0", "mnist-worker-1"]), held

        code, out, err = await hub.kubectl("admin", "delete", "ns", "vision", "--timeout=90s", timeout=120)
        assert code == 0 and 'namespace "vision" deleted' in out, err

        # kubectl waited until the namespace was gone, which comes only after its content went
        assert (await hub.request("GET", "/api/v1/namespaces/vision"))[0] == 404
        assert (await hub.request("GET", f"{PYTORCHJOBS}/mnist"))[0] == 404
        assert (await hub.request("GET", f"{TRAININGJOBS}/mnist"))[0] == 404
        # the twin's finalizer went only after the member showed nothing of it left: no PodGroup, pod, Service
        # or ConfigMap, not even one being deleted
        assert await member_leftovers(env, uid) == {}
        # and the twin was not made again meanwhile (its source being deleted, the namespace Terminating)
        status, listing = await hub.request("GET", "/apis/federator.dev/v1alpha1/trainingjobs")
        assert status == 200 and [j for j in listing["items"] if j["metadata"]["namespace"] == "vision"] == []
