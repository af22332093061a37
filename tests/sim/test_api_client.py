"""The official `kubernetes` client (sync) against a real SimCluster over
HTTPS with its kubeconfig: list, watch (resume, 410), create, patch, delete,
bind, custom objects, errors."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from simapi_support import ThreadedSim
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from federator.sim import kinds

VOLCANO = ("scheduling.volcano.sh", "v1beta1", "podgroups")


@pytest.fixture(scope="module")
def api_client(sim_cluster: ThreadedSim) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim_cluster.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        yield api


def pod(name: str, *, scheduler: str = "default-scheduler", labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"schedulerName": scheduler, "containers": [
            {"name": "main", "image": "trainer:1.4", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
    }


def status_body(e: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(e.body)
    return body


def test_list_nodes_deserialises(api_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api_client)
    nodes = v1.list_node()
    assert len(nodes.items) == 4
    gpu = [n for n in nodes.items if n.metadata.labels.get("nvidia.com/gpu.product")]
    assert len(gpu) == 2
    assert gpu[0].status.allocatable["nvidia.com/gpu"] == "8"
    assert any(c.type == "Ready" and c.status == "True" for c in gpu[0].status.conditions)
    assert nodes.metadata.resource_version.isdigit()
    assert v1.read_node(gpu[0].metadata.name).metadata.uid == gpu[0].metadata.uid
    # field selector on spec.unschedulable
    assert len(v1.list_node(field_selector="spec.unschedulable=false").items) == 4


def test_create_patch_delete_pod(sim_cluster: ThreadedSim, api_client: client.ApiClient) -> None:
    ns = sim_cluster.new_namespace()
    v1 = client.CoreV1Api(api_client)
    created = v1.create_namespaced_pod(ns, pod("p1", scheduler="nobody", labels={"app": "a"}))
    assert created.metadata.resource_version and created.status.phase == "Pending"
    assert created.spec.containers[0].name == "main"
    # a dict body is sent as a strategic merge patch
    patched = v1.patch_namespaced_pod("p1", ns, {"metadata": {"labels": {"team": "vision"}}})
    assert patched.metadata.labels == {"app": "a", "team": "vision"}
    assert [p.metadata.name for p in v1.list_namespaced_pod(ns, label_selector="team=vision").items] == ["p1"]
    assert v1.list_namespaced_pod(ns, label_selector="team!=vision").items == []
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod(ns, pod("p1"))
    assert e.value.status == 409 and status_body(e.value)["reason"] == "AlreadyExists"
    # an unbound pod is deleted at once; the answer is the pod
    gone = v1.delete_namespaced_pod("p1", ns)
    assert gone.metadata.name == "p1"
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_pod("p1", ns)
    assert e.value.status == 404


def test_invalid_pod_names_the_field(sim_cluster: ThreadedSim, api_client: client.ApiClient) -> None:
    ns = sim_cluster.new_namespace()
    v1 = client.CoreV1Api(api_client)
    # (the client itself refuses a container without a name, so the server check is shown on the image)
    bad = pod("p1")
    bad["spec"]["containers"] = [{"name": "main"}]
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod(ns, bad)
    body = status_body(e.value)
    assert e.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "spec.containers[0].image"
    assert body["message"] == 'Pod "p1" is invalid: spec.containers[0].image: Required value'
    bad["spec"]["containers"] = [{"name": "Not_A_Label", "image": "x"}]
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod(ns, bad)
    assert status_body(e.value)["details"]["causes"][0]["field"] == "spec.containers[0].name"
    bad["spec"]["containers"] = [{"name": "main\n", "image": "x"}]
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod(ns, bad)
    cause = status_body(e.value)["details"]["causes"][0]
    assert cause["field"] == "spec.containers[0].name" and "a lowercase RFC 1123 label" in cause["message"]
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod("no-such-namespace", pod("p1"))
    assert e.value.status == 404 and status_body(e.value)["message"] == 'namespaces "no-such-namespace" not found'
    assert v1.list_namespaced_pod(ns).items == []


def test_watch_resume_and_410(sim_cluster: ThreadedSim, api_client: client.ApiClient) -> None:
    ns = sim_cluster.new_namespace()
    v1 = client.CoreV1Api(api_client)
    start_rv = v1.list_namespaced_pod(ns).metadata.resource_version
    v1.create_namespaced_pod(ns, pod("w1", scheduler="nobody"))
    v1.patch_namespaced_pod("w1", ns, {"metadata": {"labels": {"x": "1"}}})
    w = watch.Watch()
    seen = []
    for ev in w.stream(v1.list_namespaced_pod, ns, resource_version=start_rv, timeout_seconds=5):
        seen.append((ev["type"], ev["object"].metadata.name, ev["object"].metadata.resource_version))
        if len(seen) == 2:
            w.stop()
    assert [s[:2] for s in seen] == [("ADDED", "w1"), ("MODIFIED", "w1")]
    # resume from the last resourceVersion seen: only what came after
    resume_rv = seen[-1][2]
    v1.delete_namespaced_pod("w1", ns)
    w = watch.Watch()
    for ev in w.stream(v1.list_namespaced_pod, ns, resource_version=resume_rv, timeout_seconds=5):
        assert (ev["type"], ev["object"].metadata.name) == ("DELETED", "w1")
        assert int(ev["object"].metadata.resource_version) > int(resume_rv)
        w.stop()
    # forced compaction: resuming from an old resourceVersion is 410 Expired
    v1.create_namespaced_pod(ns, pod("w2", scheduler="nobody"))

    async def compact() -> None:
        store = sim_cluster.c.store
        await store.compact(await store.current_revision())

    sim_cluster.run(compact)
    for kw in ({"timeout_seconds": 5}, {}):  # without a timeout the client retries once, then raises
        with pytest.raises(ApiException) as e:
            for _ in watch.Watch().stream(v1.list_namespaced_pod, ns, resource_version=resume_rv, **kw):
                pytest.fail("no event may arrive from a compacted resourceVersion")
        assert e.value.status == 410 and "Expired" in e.value.reason
    # the cure is a re-list, whose resourceVersion watches fine
    rv = v1.list_namespaced_pod(ns).metadata.resource_version
    v1.delete_namespaced_pod("w2", ns)
    events = [ev["type"] for ev in watch.Watch().stream(v1.list_namespaced_pod, ns, resource_version=rv,
                                                        timeout_seconds=2)]
    assert events == ["DELETED"]


def test_bind_pod(sim_cluster: ThreadedSim, api_client: client.ApiClient) -> None:
    ns = sim_cluster.new_namespace()
    v1 = client.CoreV1Api(api_client)
    v1.create_namespaced_pod(ns, pod("b1", scheduler="nobody"))
    node = v1.list_node(label_selector="federator.dev/node-pool=cpu").items[0].metadata.name
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "b1", "annotations": {"why": "test"}},
               "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    resp = v1.create_namespaced_pod_binding("b1", ns, binding, _preload_content=False)
    assert resp.status == 201
    assert json.loads(resp.data) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                     "code": 201}
    bound = v1.read_namespaced_pod("b1", ns)
    assert bound.spec.node_name == node and bound.metadata.annotations["why"] == "test"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in bound.status.conditions)
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod_binding("b1", ns, binding, _preload_content=False)
    body = status_body(e.value)
    assert e.value.status == 409 and body["reason"] == "Conflict"
    assert body["message"] == (f'Operation cannot be fulfilled on pods/binding "b1": pod b1 is already assigned '
                               f'to node "{node}"')
    missing_target = dict(binding, target={"kind": "Node"})
    v1.create_namespaced_pod(ns, pod("b2", scheduler="nobody"))
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod_binding("b2", ns, missing_target, _preload_content=False)
    assert e.value.status == 422 and status_body(e.value)["details"]["causes"][0]["field"] == "target.name"
    assert v1.read_namespaced_pod("b2", ns).spec.node_name is None
    # a pod being deleted (held by a finalizer) cannot be bound
    held = pod("b3", scheduler="nobody")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    v1.create_namespaced_pod(ns, held)
    v1.delete_namespaced_pod("b3", ns)
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod_binding("b3", ns, dict(binding, metadata={"name": "b3"}), _preload_content=False)
    assert e.value.status == 409
    assert status_body(e.value)["message"].endswith("pod b3 is being deleted, cannot be assigned to a host")
    v1.patch_namespaced_pod("b3", ns, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/hold"]}})
    # a bound pod is deleted gracefully: the kubelet finishes it
    v1.delete_namespaced_pod("b1", ns)
    deadline = time.monotonic() + 10
    while True:
        try:
            v1.read_namespaced_pod("b1", ns)
        except ApiException as gone:
            assert gone.status == 404
            break
        assert time.monotonic() < deadline, "the kubelet never finished the graceful delete"
        time.sleep(0.05)


def test_custom_objects_podgroups(sim_cluster: ThreadedSim, api_client: client.ApiClient) -> None:
    ns = sim_cluster.new_namespace()
    co = client.CustomObjectsApi(api_client)
    group, version, plural = VOLCANO
    body = {"apiVersion": f"{group}/{version}", "kind": "PodGroup", "metadata": {"name": "pg1"},
            "spec": {"minMember": 2}}
    created = co.create_namespaced_custom_object(group, version, ns, plural, body)
    assert created["spec"] == {"minMember": 2, "queue": "default"} and created["metadata"]["generation"] == 1
    before = co.get_namespaced_custom_object(group, version, ns, plural, "pg1")
    patched = co.patch_namespaced_custom_object(group, version, ns, plural, "pg1", {"spec": {"minMember": 3}})
    assert patched["spec"]["minMember"] == 3
    # no /status in Volcano's CRD: any change outside metadata bumps generation (the scheduler's
    # status writes too, so only a lower bound is certain here; exact rules: tests/apiserver)
    assert patched["metadata"]["generation"] >= before["metadata"]["generation"] + 1
    listed = co.list_namespaced_custom_object(group, version, ns, plural)
    assert listed["kind"] == "PodGroupList" and [i["metadata"]["name"] for i in listed["items"]] == ["pg1"]
    with pytest.raises(ApiException) as e:
        co.create_namespaced_custom_object(group, version, ns, plural, dict(body, spec={"minMember": -1}))
    assert e.value.status == 422
    assert status_body(e.value)["message"] == ('PodGroup.scheduling.volcano.sh "pg1" is invalid: spec.minMember: '
                                                "Invalid value: -1: must be greater than or equal to 0")
    # coscheduling's group has a /status subresource
    cos = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
    co.create_namespaced_custom_object(*cos[:2], ns, cos[2], {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "pg2"},
        "spec": {"minMember": 4, "scheduleTimeoutSeconds": 30}, "status": {"phase": "Running"}})
    got = co.get_namespaced_custom_object(*cos[:2], ns, cos[2], "pg2")
    assert got.get("status", {}).get("phase") != "Running"  # status dropped on create
    done = co.patch_namespaced_custom_object_status(*cos[:2], ns, cos[2], "pg2", {"status": {"phase": "Finished"}})
    assert done["status"]["phase"] == "Finished" and done["metadata"]["generation"] == 1
    gone = co.delete_namespaced_custom_object(group, version, ns, plural, "pg1")
    assert gone["kind"] == "Status" and gone["status"] == "Success"
    assert co.list_namespaced_custom_object(group, version, ns, plural)["items"] == []


def test_watch_custom_objects(sim_cluster: ThreadedSim, api_client: client.ApiClient) -> None:
    ns = sim_cluster.new_namespace()
    co = client.CustomObjectsApi(api_client)
    group, version, plural = "scheduling.incubator.k8s.io", "v1alpha1", "podgroups"
    rv = co.list_namespaced_custom_object(group, version, ns, plural)["metadata"]["resourceVersion"]
    co.create_namespaced_custom_object(group, version, ns, plural, {
        "apiVersion": f"{group}/{version}", "kind": "PodGroup", "metadata": {"name": "kb"}, "spec": {"minMember": 1}})
    w = watch.Watch()
    for ev in w.stream(co.list_namespaced_custom_object, group, version, ns, plural, resource_version=rv,
                       timeout_seconds=5):
        assert ev["type"] == "ADDED" and ev["object"]["metadata"]["name"] == "kb"
        w.stop()


def test_wrong_token_is_401(sim_cluster: ThreadedSim) -> None:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim_cluster.kubeconfig), client_configuration=cfg)
    cfg.refresh_api_key_hook = None  # the kubeconfig loader would put the real token back
    cfg.api_key = {"BearerToken": "Bearer not-the-token"}
    with client.ApiClient(cfg) as api:
        with pytest.raises(ApiException) as e:
            client.CoreV1Api(api).list_node()
    assert e.value.status == 401 and status_body(e.value)["reason"] == "Unauthorized"
    cfg.api_key = {}
    with client.ApiClient(cfg) as api:
        with pytest.raises(ApiException) as e:
            client.CoreV1Api(api).list_node()
    assert e.value.status == 401


def test_list_counts_per_resource(sim_cluster: ThreadedSim, api_client: client.ApiClient) -> None:
    before = sim_cluster.c.list_count("pods")
    client.CoreV1Api(api_client).list_pod_for_all_namespaces()
    assert sim_cluster.c.list_count("pods") == before + 1
    stats = sim_cluster.c.stats()
    assert stats["requests"]["list"]["pods"] == before + 1


def test_kinds_module_registers_real_group_wiring() -> None:
    assert kinds.COSCHEDULING_POD_GROUP_LABEL == "scheduling.x-k8s.io/pod-group"
    assert kinds.GROUP_NAME_ANNOTATION == "scheduling.k8s.io/group-name"
    reg = kinds.sim_registry(["volcano"])
    assert reg.get("scheduling.volcano.sh", "v1beta1", "podgroups") is not None
    assert reg.get("scheduling.x-k8s.io", "v1alpha1", "podgroups") is None


def test_namespace_deletion_empties_it_first(sim_cluster: ThreadedSim, api_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api_client)
    ns = sim_cluster.new_namespace("del")
    v1.create_namespaced_pod(ns, pod("plain", scheduler="nobody"))
    held = pod("held", scheduler="nobody")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    v1.create_namespaced_pod(ns, held)
    assert v1.read_namespace(ns).status.phase == "Active"
    v1.delete_namespace(ns)
    deadline = time.monotonic() + 10
    # the controller deletes what it can; the finalizer holds "held" (and so the namespace)
    while [p.metadata.name for p in v1.list_namespaced_pod(ns).items] != ["held"]:
        assert time.monotonic() < deadline, "the namespace controller did not delete the plain pod"
        time.sleep(0.05)
    terminating = v1.read_namespace(ns)
    assert terminating.status.phase == "Terminating" and terminating.metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod(ns, pod("late"))
    assert e.value.status == 403 and status_body(e.value)["reason"] == "Forbidden"
    assert "because it is being terminated" in status_body(e.value)["message"]
    v1.patch_namespaced_pod("held", ns, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/hold"]}})
    while True:
        try:
            v1.read_namespace(ns)
        except ApiException as gone:
            assert gone.status == 404
            break
        assert time.monotonic() < deadline, "the namespace was never removed"
        time.sleep(0.05)


def test_admin_stats_endpoint(sim_cluster: ThreadedSim, api_client: client.ApiClient) -> None:
    import ssl
    import urllib.error
    import urllib.request

    client.CoreV1Api(api_client).list_node()
    ctx = ssl.create_default_context(cadata=sim_cluster.c.ca_pem.decode())
    req = urllib.request.Request(sim_cluster.c.url + "/_sim/stats",
                                 headers={"Authorization": f"Bearer {sim_cluster.c.token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        stats = json.loads(resp.read())
    assert stats["cluster"] == "apitest" and stats["requests"]["list"]["nodes"] >= 1
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(sim_cluster.c.url + "/_sim/stats", context=ctx, timeout=10)
    assert e.value.code == 401
    e.value.close()


def test_types_follow_the_official_client_models(sim_cluster: ThreadedSim) -> None:
    from simapi_support import raw_request

    ns = sim_cluster.new_namespace("types")
    base = pod("typed", scheduler="nobody")
    cases = [
        ({"ports": [{"containerPort": "80"}]}, "spec.containers[0].ports[0].containerPort"),
        ({"env": [{"name": "A", "value": 1}]}, "spec.containers[0].env[0].value"),
        ({"resources": {"requests": {"cpu": True}}}, "spec.containers[0].resources.requests.cpu"),
    ]
    for extra, field in cases:
        bad = json.loads(json.dumps(base))
        bad["spec"]["containers"][0].update(extra)
        status, body = raw_request(sim_cluster, "POST", f"/api/v1/namespaces/{ns}/pods", json.dumps(bad).encode())
        assert status == 422 and body["reason"] == "Invalid", body
        assert field in [c["field"] for c in body["details"]["causes"]], body
    bad = json.loads(json.dumps(base))
    bad["spec"]["affinity"] = {"nodeAffinity": 3}
    status, body = raw_request(sim_cluster, "POST", f"/api/v1/namespaces/{ns}/pods", json.dumps(bad).encode())
    assert status == 422
    assert body["details"]["causes"] == [{"reason": "FieldValueTypeInvalid", "field": "spec.affinity.nodeAffinity",
                                          "message": "Invalid value: 3: must be an object"}]
    # numbers are fine for quantities, and served as strings
    good = json.loads(json.dumps(base))
    good["spec"]["containers"][0]["resources"] = {"requests": {"cpu": 2, "memory": 1.5}}
    status, body = raw_request(sim_cluster, "POST", f"/api/v1/namespaces/{ns}/pods", json.dumps(good).encode())
    assert status == 201, body
    assert body["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "1.5"}
    status, body = raw_request(sim_cluster, "GET", f"/api/v1/namespaces/{ns}/pods")
    assert [p["metadata"]["name"] for p in body["items"]] == ["typed"]


def test_field_validation_of_unknown_fields(sim_cluster: ThreadedSim) -> None:
    from simapi_support import raw_request

    ns = sim_cluster.new_namespace("fv")
    body = pod("fv", scheduler="nobody")
    body["spec"]["bogusField"] = 1
    body["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    data = json.dumps(body).encode()
    status, resp = raw_request(sim_cluster, "POST", f"/api/v1/namespaces/{ns}/pods?fieldValidation=Strict", data)
    assert status == 400 and resp["reason"] == "BadRequest"
    assert resp["message"] == ('Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
                               'unknown field "spec.bogusField", unknown field "spec.containers[0].imagePullPolicyy"')
    status, resp = raw_request(sim_cluster, "POST", f"/api/v1/namespaces/{ns}/pods?fieldValidation=Maybe", data)
    assert status == 422 and resp["message"].startswith('CreateOptions.meta.k8s.io "" is invalid: fieldValidation')
    status, resp = raw_request(sim_cluster, "GET", f"/api/v1/namespaces/{ns}/pods")
    assert resp["items"] == []
    # Warn (the default) and Ignore store the object without the unknown fields
    status, resp = raw_request(sim_cluster, "POST", f"/api/v1/namespaces/{ns}/pods", data)
    assert status == 201 and "bogusField" not in resp["spec"]
    assert "imagePullPolicyy" not in resp["spec"]["containers"][0]
