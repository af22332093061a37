"""The hub's TrainingJob/MemberCluster API through real clients: kubectl, the kubernetes
client's CustomObjectsApi and the federator CLI, against a real hub on a real socket."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as kube_client
from kubernetes import config as kube_config

from federator.controllers.context import HubContext, HubSettings
from federator.hub.kinds import MEMBER_CLEANUP_FINALIZER

from ..apis.test_trainingjob import EXAMPLE_YAML
from .hubtest_support import EXAMPLE_FILE, RunningHub, job, jobs_url, start_hub

pytestmark = pytest.mark.kubectl


def test_the_example_file_is_the_design_example_verbatim() -> None:
    assert EXAMPLE_FILE.read_text() == EXAMPLE_YAML


async def _stored(hub: RunningHub, namespace: str, name: str) -> dict[str, Any]:
    rt = hub.context.kind("TrainingJob")
    return await hub.context.storage.get(rt, namespace=namespace, name=name)


async def test_example_through_kubectl_apply(hub: RunningHub) -> None:
    code, out, err = await hub.kubectl("admin", "apply", "-f", str(EXAMPLE_FILE))
    assert code == 0, err
    assert out.strip() == "trainingjob.federator.dev/resnet-ps created"
    stored = await _stored(hub, "vision", "resnet-ps")
    assert stored["spec"] == yaml.safe_load(EXAMPLE_YAML)["spec"]
    # Applying the same file again changes nothing (merge patch computed against our OpenAPI).
    code, out, err = await hub.kubectl("admin", "apply", "-f", str(EXAMPLE_FILE))
    assert code == 0, err
    assert out.strip() == "trainingjob.federator.dev/resnet-ps unchanged"
    code, out, err = await hub.kubectl("admin", "get", "tj", "-n", "vision")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "CLUSTER", "AGE"]
    assert lines[1].split()[0] == "resnet-ps"
    code, out, err = await hub.kubectl("admin", "get", "trainingjobs", "-A", "-o", "wide")
    assert code == 0, err
    assert out.splitlines()[0].split() == ["NAMESPACE", "NAME", "PHASE", "CLUSTER", "AGE", "EPOCH", "PRIORITY",
                                               "QUEUE", "MODE"]
    assert out.splitlines()[1].split()[:2] == ["vision", "resnet-ps"]
    assert out.splitlines()[1].split()[-1] == "100"


async def test_example_through_the_python_client(hub: RunningHub) -> None:
    api_clients: list[kube_client.ApiClient] = []

    def run() -> dict[str, Any]:
        configuration = kube_client.Configuration()
        kube_config.load_kube_config(config_file=str(hub.kubeconfigs["admin"]), client_configuration=configuration)
        api_client = kube_client.ApiClient(configuration)
        # Keep-alive sockets of the client outlive close(); ask the server to close each connection.
        api_client.set_default_header("Connection", "close")
        api_clients.append(api_client)
        api = kube_client.CustomObjectsApi(api_client)
        body = yaml.safe_load(EXAMPLE_FILE.read_text())
        created = api.create_namespaced_custom_object("federator.dev", "v1alpha1", "vision", "trainingjobs", body)
        got = api.get_namespaced_custom_object("federator.dev", "v1alpha1", "vision", "trainingjobs", "resnet-ps")
        assert got["metadata"]["uid"] == created["metadata"]["uid"]
        listed = api.list_cluster_custom_object("federator.dev", "v1alpha1", "trainingjobs")
        assert [i["metadata"]["name"] for i in listed["items"]] == ["resnet-ps"]
        patched = api.patch_namespaced_custom_object("federator.dev", "v1alpha1", "vision", "trainingjobs",
                                                     "resnet-ps", {"spec": {"priority": 7}})
        assert patched["spec"]["priority"] == 7 and patched["metadata"]["generation"] == 2
        return got

    try:
        got = await asyncio.to_thread(run)
    finally:
        for api_client in api_clients:
            api_client.close()
    assert got["spec"] == yaml.safe_load(EXAMPLE_YAML)["spec"]
    assert (await _stored(hub, "vision", "resnet-ps"))["spec"]["priority"] == 7


async def test_example_through_the_cli(hub: RunningHub) -> None:
    code, out, err = await hub.cli("admin", "submit", "-f", str(EXAMPLE_FILE))
    assert code == 0, err
    assert out.strip() == "trainingjob.federator.dev/resnet-ps created"
    assert (await _stored(hub, "vision", "resnet-ps"))["spec"] == yaml.safe_load(EXAMPLE_YAML)["spec"]


async def test_kubectl_explain_shows_the_spec(hub: RunningHub) -> None:
    code, out, err = await hub.kubectl("viewer", "explain", "tj.spec")
    assert code == 0, err
    assert "KIND:       TrainingJob" in out and "GROUP:      federator.dev" in out
    for field in ("roles", "placement", "failover", "priority", "suspend"):
        assert f"  {field}\t" in out, field
    code, out, err = await hub.kubectl("viewer", "explain", "mc.spec.network")
    assert code == 0, err
    assert "bandwidthGbps" in out and "rdmaKind" in out


async def test_kubectl_get_watch_sees_a_status_change(hub: RunningHub) -> None:
    status, _ = await hub.request("POST", jobs_url("vision"), body=job("vision", "watched"))
    assert status == 201
    process = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(hub.kubeconfigs["viewer"]), "--cache-dir", str(hub.directory / "kc-watch"),
        "get", "tj", "-n", "vision", "-w",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        async def next_line() -> str:
            assert process.stdout is not None
            return (await asyncio.wait_for(process.stdout.readline(), 30)).decode()

        assert (await next_line()).split() == ["NAME", "PHASE", "CLUSTER", "AGE"]
        first = (await next_line()).split()
        assert first[:3] == ["watched", "<none>", "<none>"] or first[0] == "watched"
        current = await _stored(hub, "vision", "watched")
        current["status"] = {"phase": "Running", "placement": {"cluster": "onprem-a100", "epoch": 1}}
        status, body = await hub.request("PUT", jobs_url("vision", "watched", "status"), body=current)
        assert status == 200, body
        changed = (await next_line()).split()
        assert changed[:3] == ["watched", "Running", "onprem-a100"]
    finally:
        process.kill()
        await process.wait()


async def test_researcher_cannot_write_status(hub: RunningHub) -> None:
    status, created = await hub.request("POST", jobs_url("default"), who="researcher", body=job("default", "mine"))
    assert status == 201, created
    created["status"] = {"phase": "Succeeded"}
    status, answer = await hub.request("PUT", jobs_url("default", "mine", "status"), who="researcher", body=created)
    assert status == 403 and answer["reason"] == "Forbidden"
    # A status in a main-resource write is ignored, as kube does with a /status subresource.
    status, answer = await hub.request("PUT", jobs_url("default", "mine"), who="researcher", body=created)
    assert status == 200 and "status" not in answer


def _bad_specs() -> list[tuple[str, Any, list[str]]]:
    def with_spec(change: Any) -> dict[str, Any]:
        obj = yaml.safe_load(EXAMPLE_YAML)
        obj["metadata"]["namespace"] = "default"
        change(obj)
        return obj

    def set_in(*path: Any, value: Any) -> Any:
        def change(obj: dict[str, Any]) -> None:
            cur = obj
            for p in path[:-1]:
                cur = cur[p]
            cur[path[-1]] = value
        return change

    def drop(*path: Any) -> Any:
        def change(obj: dict[str, Any]) -> None:
            cur = obj
            for p in path[:-1]:
                cur = cur[p]
            del cur[path[-1]]
        return change

    def several(*changes: Any) -> Any:
        def change(obj: dict[str, Any]) -> None:
            for c in changes:
                c(obj)
        return change

    duplicate = several(set_in("spec", "roles", 1, "name", value="ps"))

    def policy(*rules: Any) -> Any:
        return set_in("spec", "failurePolicy", value={"rules": list(rules)})

    codes = {"operator": "In", "values": [42]}
    return [
        # spec.failurePolicy: kube's podFailurePolicy rules and limits (federator/apis/failurepolicy.py)
        ("failurePolicy unknown action", with_spec(policy({"action": "Retry", "onExitCodes": codes})),
         ["spec.failurePolicy.rules[0].action"]),
        ("failurePolicy exit code out of range", with_spec(policy(
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1, 300]}})),
         ["spec.failurePolicy.rules[0].onExitCodes.values[1]"]),
        ("failurePolicy unknown operator", with_spec(policy(
            {"action": "FailJob", "onExitCodes": {"operator": "Exists", "values": [1]}})),
         ["spec.failurePolicy.rules[0].onExitCodes.operator"]),
        ("failurePolicy 1000 rules", with_spec(policy(*[{"action": "Ignore", "onExitCodes": codes}] * 1000)),
         ["spec.failurePolicy.rules"]),
        ("failurePolicy empty values", with_spec(policy(
            {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": []}})),
         ["spec.failurePolicy.rules[0].onExitCodes.values"]),
        ("failurePolicy both requirements", with_spec(policy(
            {"action": "Ignore", "onExitCodes": codes, "onPodConditions": [{"type": "DisruptionTarget"}]})),
         ["spec.failurePolicy.rules[0]"]),
        ("failurePolicy neither requirement", with_spec(policy({"action": "Ignore"})), ["spec.failurePolicy.rules[0]"]),
        ("failurePolicy 0 with In", with_spec(policy({"action": "Ignore", "onExitCodes": {"operator": "In",
                                                                                          "values": [0, 1]}})),
         ["spec.failurePolicy.rules[0].onExitCodes.values[0]"]),
        ("failurePolicy unordered values", with_spec(policy(
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3, 1]}})),
         ["spec.failurePolicy.rules[0].onExitCodes.values"]),
        ("failurePolicy bad condition status", with_spec(policy(
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "Maybe"}]})),
         ["spec.failurePolicy.rules[0].onPodConditions[0].status"]),
        ("failurePolicy 300 values", with_spec(policy(
            {"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": list(range(300))}})),
         ["spec.failurePolicy.rules[0].onExitCodes.values"]),
        ("failurePolicy requeue exclude unknown", with_spec(policy(
            {"action": "Requeue", "requeue": {"exclude": "Rack"}, "onExitCodes": codes})),
         ["spec.failurePolicy.rules[0].requeue.exclude"]),
        ("failurePolicy requeue options on FailJob", with_spec(policy(
            {"action": "FailJob", "requeue": {"exclude": "Node"}, "onExitCodes": codes})),
         ["spec.failurePolicy.rules[0].requeue"]),

        # Unknown fields are field validation's business (tests/apiserver/test_field_validation.py):
        # dropped with a warning by default, refused by kubectl's fieldValidation=Strict.
        ("wrong type", with_spec(set_in("spec", "priority", value="high")), ["spec.priority"]),
        ("replicas a string", with_spec(set_in("spec", "roles", 0, "replicas", value="2")),
         ["spec.roles[0].replicas"]),
        ("zero replicas", with_spec(set_in("spec", "roles", 0, "replicas", value=0)), ["spec.roles[0].replicas"]),
        ("huge replicas", with_spec(set_in("spec", "roles", 1, "replicas", value=100_000)),
         ["spec.roles[1].replicas"]),
        ("negative cpu", with_spec(set_in("spec", "roles", 0, "template", "resources", "cpu", value="-8")),
         ["spec.roles[0].template.resources.cpu"]),
        ("absurd memory", with_spec(set_in("spec", "roles", 0, "template", "resources", "memory", value="9Ei")),
         ["spec.roles[0].template.resources.memory"]),
        ("absurd gpus", with_spec(set_in("spec", "roles", 1, "template", "resources", "nvidia.com/gpu",
                                         value=4096)), ["spec.roles[1].template.resources[nvidia.com/gpu]"]),
        ("duplicate role names", with_spec(duplicate), ["spec.roles[1].name"]),
        ("name not DNS-1123", with_spec(set_in("metadata", "name", value="ResNet_PS")), ["metadata.name"]),
        ("no roles", with_spec(set_in("spec", "roles", value=[])), ["spec.roles"]),
        ("missing image", with_spec(drop("spec", "roles", 0, "template", "image")), ["spec.roles[0].template.image"]),
        ("bad network", with_spec(set_in("spec", "placement", "network", value="carrier-pigeon")),
         ["spec.placement.network"]),
        ("negative save grace", with_spec(set_in("spec", "checkpoint", value={"saveGraceSeconds": -5})),
         ["spec.checkpoint.saveGraceSeconds"]),
        ("huge save grace", with_spec(set_in("spec", "checkpoint", value={"saveGraceSeconds": 10**6})),
         ["spec.checkpoint.saveGraceSeconds"]),
        ("checkpoint volume and uri", with_spec(set_in("spec", "checkpoint", value={
            "volume": {"claimName": "ckpt"}, "mountPath": "/ckpt", "uri": "s3://b/r"})), ["spec.checkpoint"]),
        ("bad checkpoint mountPath", with_spec(set_in("spec", "checkpoint", value={
            "volume": {"claimName": "ckpt"}, "mountPath": "ckpt:rw"})), ["spec.checkpoint.mountPath"]),
        ("several at once", with_spec(several(set_in("spec", "priority", value="x"),
                                              set_in("spec", "roles", 0, "replicas", value=-1),
                                              set_in("spec", "failover", "onClusterLoss", value="panic"))),
         ["spec.priority", "spec.roles[0].replicas", "spec.failover.onClusterLoss"]),
    ]


@pytest.mark.parametrize(("case", "body", "fields"), _bad_specs(), ids=[c[0] for c in _bad_specs()])
async def test_bad_specs_get_422_naming_every_field_and_store_nothing(
    hub: RunningHub, case: str, body: dict[str, Any], fields: list[str]
) -> None:
    status, answer = await hub.request("POST", jobs_url("default"), who="researcher", body=copy.deepcopy(body))
    assert status == 422, (case, answer)
    assert answer["kind"] == "Status" and answer["reason"] == "Invalid" and answer["code"] == 422
    named = [c["field"] for c in answer["details"]["causes"]]
    for field in fields:
        assert field in named, (case, named)
        assert field in answer["message"]
    status, listing = await hub.request("GET", jobs_url("default"), who="researcher")
    assert status == 200 and listing["items"] == []
    # The same spec through kubectl: refused (by the server's Status, or by kubectl against the hub's
    # OpenAPI schema), naming the field, and nothing is stored.
    code, _, err = await hub.kubectl("researcher", "create", "-f", "-", stdin=json.dumps(body))
    assert code != 0
    assert "is invalid" in err, err
    assert fields[0].split("[")[0].rsplit(".", 1)[-1] in err or "nvidia.com/gpu" in err, err
    assert (await hub.request("GET", jobs_url("default"), who="researcher"))[1]["items"] == []


async def test_an_update_is_validated_too(hub: RunningHub) -> None:
    status, created = await hub.request("POST", jobs_url("default"), body=job("default", "j"))
    assert status == 201
    created["spec"]["roles"][0]["replicas"] = -3
    status, answer = await hub.request("PUT", jobs_url("default", "j"), body=created)
    assert status == 422 and answer["details"]["causes"][0]["field"] == "spec.roles[0].replicas"
    assert (await _stored(hub, "default", "j"))["spec"]["roles"][0]["replicas"] == 2


async def test_a_gang_larger_than_any_cluster_is_accepted(hub: RunningHub) -> None:
    # 1,000 workers with 8 GPUs each: no cluster has that, but it is a valid job; placement says why later.
    body = job("default", "enormous")
    body["spec"]["roles"][1]["replicas"] = 1000
    body["spec"]["roles"][1]["template"]["resources"]["nvidia.com/gpu"] = 8
    status, answer = await hub.request("POST", jobs_url("default"), who="researcher", body=body)
    assert status == 201, answer


async def test_deletion_is_immediate_without_a_cleanup_controller(hub: RunningHub) -> None:
    status, created = await hub.request("POST", jobs_url("default"), body=job("default", "gone"))
    assert status == 201 and not created["metadata"].get("finalizers")
    code, out, err = await hub.kubectl("researcher", "delete", "tj", "gone")
    assert code == 0, err
    assert 'trainingjob.federator.dev "gone" deleted' in out
    status, _ = await hub.request("GET", jobs_url("default", "gone"))
    assert status == 404


async def test_cleanup_finalizer_holds_deletion_until_its_controller_removes_it(tmp_path: Path) -> None:
    async with start_hub(tmp_path / "hub", job_finalizers=(MEMBER_CLEANUP_FINALIZER,)) as hub:
        status, created = await hub.request("POST", jobs_url("default"), body=job("default", "held"))
        assert status == 201 and created["metadata"]["finalizers"] == [MEMBER_CLEANUP_FINALIZER]
        status, answer = await hub.request("DELETE", jobs_url("default", "held"))
        assert status == 200 and answer["metadata"]["deletionTimestamp"]
        # A user update cannot put back a finalizer the controller removed, and the job is still there.
        rt = hub.context.kind("TrainingJob")

        def release(obj: dict[str, Any]) -> dict[str, Any]:
            obj["metadata"]["finalizers"] = []
            return obj

        await hub.context.storage.guaranteed_update(rt, namespace="default", name="held", mutate=release)
        status, _ = await hub.request("GET", jobs_url("default", "held"))
        assert status == 404


async def test_controllers_start_after_leadership_and_stop_with_the_app(tmp_path: Path) -> None:
    seen: list[str] = []

    async def recorder(ctx: HubContext) -> Any:
        assert ctx.fencing is not None, "controllers start only under the leadership"
        rt = ctx.kind("TrainingJob")
        seen.append("started")
        task = asyncio.create_task(_label_every_job(ctx, rt), name="test-recorder")
        yield
        task.cancel()
        seen.append("stopped")

    settings = HubSettings(state_dir=tmp_path / "state")
    async with start_hub(tmp_path / "hub", controllers=[recorder], settings=settings) as hub:
        status, _ = await hub.request("POST", jobs_url("default"), body=job("default", "seen"))
        assert status == 201
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while ((await _stored(hub, "default", "seen"))["metadata"].get("labels") or {}).get("seen") != "yes":
            assert loop.time() < deadline, "the controller never saw the job"
            await asyncio.sleep(0.02)
        assert seen == ["started"]
    assert seen == ["started", "stopped"]


async def _label_every_job(ctx: HubContext, rt: Any) -> None:
    async for event in ctx.storage.watch(rt, resource_version="0"):
        meta = event.object["metadata"]
        if (meta.get("labels") or {}).get("seen") == "yes" or event.type == "DELETED":
            continue

        def label(obj: dict[str, Any]) -> dict[str, Any]:
            obj["metadata"].setdefault("labels", {})["seen"] = "yes"
            return obj

        await ctx.storage.guaranteed_update(rt, namespace=meta["namespace"], name=meta["name"], mutate=label)
