"""Deleting a namespace on the hub (issue 28 item 6): real SimClusters, a real hub with every lifecycle
controller and the namespace controller, kube's NamespaceLifecycle on.

`kubectl apply -f` of one file holding a Namespace and a TrainingJob in it creates both; the job runs in
its member; `kubectl delete ns` turns the namespace Terminating, deletes the job (its member-cleanup
finalizer removes the member's PodGroup and pods first), the namespace's Events, and then the namespace.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from federator.controllers.namespaces import namespace_lifecycle
from federator.hub.kinds import MEMBER_CLEANUP_FINALIZER

from .jobtest_support import phase, wait_until
from .lifecycle_support import LIFECYCLE, aimed_job, lifecycle_env

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
