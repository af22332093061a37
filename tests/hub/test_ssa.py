"""Server-side apply against a real hub: kubectl 1.32, the Python dynamic client and raw HTTPS.

`kubectl apply --server-side` (create, no-op, conflict with kube's text, --force-conflicts, a
dropped field removed), `kubectl diff --server-side` (dry-run: nothing stored), the client-side to
server-side apply upgrade kubectl performs (csaupgrade: four PATCHes, the dropped field really
goes), the dynamic client's `server_side_apply`, apply through /status, managers derived from
the User-Agent, and hostile apply requests (each a clear Status, nothing changed).
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes import dynamic
from kubernetes.client.exceptions import ApiException

from federator.apiserver.app import BODY_MEDIA_TYPES
from federator.cli.common import dump

from .hubtest_support import RunningHub, job, jobs_url

pytestmark = pytest.mark.kubectl

APPLY = "application/apply-patch+yaml"
ACCEPTED = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"


async def _stored(hub: RunningHub, namespace: str, name: str) -> dict[str, Any]:
    rt = hub.context.kind("TrainingJob")
    return await hub.context.storage.get(rt, namespace=namespace, name=name)


async def _absent(hub: RunningHub, namespace: str, name: str) -> bool:
    status, _ = await hub.request("GET", jobs_url(namespace, name))
    return status == 404


def _managers(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["manager"], e["operation"]) for e in obj["metadata"].get("managedFields") or []]


def _write(path: Path, obj: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(obj))
    return str(path)


async def test_kubectl_apply_server_side_diff_conflicts_and_force(hub: RunningHub, tmp_path: Path) -> None:
    manifest = job("default", "ssa", priority=1)
    path = _write(tmp_path / "job.yaml", manifest)
    code, out, err = await hub.kubectl("admin", "apply", "--server-side", "-f", path)
    assert (code, out.strip()) == (0, "trainingjob.federator.dev/ssa serverside-applied"), err
    created = await _stored(hub, "default", "ssa")
    assert _managers(created) == [("kubectl", "Apply")]
    assert created["spec"] == manifest["spec"]
    code, _, err = await hub.kubectl("admin", "apply", "--server-side", "-f", path)
    assert code == 0, err
    assert (await _stored(hub, "default", "ssa"))["metadata"]["resourceVersion"] == \
        created["metadata"]["resourceVersion"]  # nothing changed, nothing written

    # kubectl diff --server-side: a dry-run apply, shown and not stored
    manifest["spec"]["priority"] = 5
    path = _write(tmp_path / "job.yaml", manifest)
    code, out, err = await hub.kubectl("admin", "diff", "--server-side", "-f", path)
    assert code == 1, err  # kubectl diff: 1 means "differences found"
    assert "-  priority: 1" in out and "+  priority: 5" in out
    after_diff = await _stored(hub, "default", "ssa")
    assert after_diff["spec"]["priority"] == 1
    assert after_diff["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    new_path = _write(tmp_path / "new.yaml", job("default", "ssa-new"))
    code, out, err = await hub.kubectl("admin", "diff", "--server-side", "-f", new_path)
    assert code == 1 and "+  name: ssa-new" in out, err
    assert await _absent(hub, "default", "ssa-new")

    # another manager takes the field; applying over it is kube's conflict, --force-conflicts takes it back
    code, _, err = await hub.kubectl("admin", "patch", "tj", "ssa", "--type=merge", "-p", '{"spec":{"priority":9}}')
    assert code == 0, err
    assert _managers(await _stored(hub, "default", "ssa")) == [("kubectl", "Apply"), ("kubectl-patch", "Update")]
    code, out, err = await hub.kubectl("admin", "apply", "--server-side", "-f", path)
    assert code == 1
    assert err.startswith('error: Apply failed with 1 conflict: conflict with "kubectl-patch" using '
                          'federator.dev/v1alpha1: .spec.priority\n'), err
    assert (await _stored(hub, "default", "ssa"))["spec"]["priority"] == 9
    code, _, err = await hub.kubectl("admin", "apply", "--server-side", "--force-conflicts", "-f", path)
    assert code == 0, err
    forced = await _stored(hub, "default", "ssa")
    assert forced["spec"]["priority"] == 5
    assert _managers(forced) == [("kubectl", "Apply")]  # kubectl-patch owned nothing else

    # a role the applier no longer applies is removed
    manifest["spec"]["roles"] = [r for r in manifest["spec"]["roles"] if r["name"] == "worker"]
    path = _write(tmp_path / "job.yaml", manifest)
    code, _, err = await hub.kubectl("admin", "apply", "--server-side", "-f", path)
    assert code == 0, err
    assert [r["name"] for r in (await _stored(hub, "default", "ssa"))["spec"]["roles"]] == ["worker"]


async def test_client_side_apply_then_server_side_apply(hub: RunningHub, tmp_path: Path) -> None:
    manifest = job("default", "upgrade")
    path = _write(tmp_path / "job.yaml", manifest)
    code, out, err = await hub.kubectl("admin", "apply", "-f", path)
    assert (code, out.strip()) == (0, "trainingjob.federator.dev/upgrade created"), err
    assert _managers(await _stored(hub, "default", "upgrade")) == [("kubectl-client-side-apply", "Update")]
    # kube's upgrade path: the applier takes over what the last-applied annotation lists (no conflict),
    # kubectl moves the client-side manager's fields to its own and re-applies, so a dropped field goes
    manifest["spec"]["priority"] = 3
    del manifest["spec"]["failover"]
    path = _write(tmp_path / "job.yaml", manifest)
    code, out, err = await hub.kubectl("admin", "apply", "--server-side", "-f", path)
    assert (code, out.strip()) == (0, "trainingjob.federator.dev/upgrade serverside-applied"), err
    upgraded = await _stored(hub, "default", "upgrade")
    assert upgraded["spec"]["priority"] == 3
    assert "failover" not in upgraded["spec"]
    assert sorted(_managers(upgraded)) == [("kubectl", "Apply"), ("kubectl-last-applied", "Apply")]
    annotation = upgraded["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    assert json.loads(annotation)["spec"] == manifest["spec"]  # kept in step with what was applied
    # and a later client-side apply still works from that annotation
    manifest["spec"]["priority"] = 4
    path = _write(tmp_path / "job.yaml", manifest)
    code, out, err = await hub.kubectl("admin", "apply", "--force-conflicts", "--server-side", "-f", path)
    assert code == 0, err
    assert (await _stored(hub, "default", "upgrade"))["spec"]["priority"] == 4


async def test_dynamic_client_server_side_apply_and_user_agent_managers(hub: RunningHub) -> None:
    api_clients: list[kube_client.ApiClient] = []

    def run() -> tuple[dict[str, Any], dict[str, Any], str]:
        configuration = kube_client.Configuration()
        kube_config.load_kube_config(config_file=str(hub.kubeconfigs["researcher"]),
                                     client_configuration=configuration)
        api_client = kube_client.ApiClient(configuration)
        api_client.set_default_header("Connection", "close")
        api_clients.append(api_client)
        client = dynamic.DynamicClient(api_client)
        jobs = client.resources.get(api_version="federator.dev/v1alpha1", kind="TrainingJob")
        body = job("default", "dyn", priority=2)
        created = client.server_side_apply(jobs, body=body, field_manager="notebook").to_dict()
        conflicting = job("default", "dyn", priority=8)
        try:
            client.server_side_apply(jobs, body=conflicting, field_manager="pipeline")
        except ApiException as e:
            message = json.loads(e.body)["message"]
        else:
            raise AssertionError("a conflicting apply succeeded")
        forced = client.server_side_apply(jobs, body=conflicting, field_manager="pipeline",
                                          force_conflicts=True).to_dict()
        # no fieldManager on a merge patch: kube names the writer after its User-Agent
        kube_client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            "federator.dev", "v1alpha1", "default", "trainingjobs", "dyn", {"spec": {"suspend": True}})
        return created, forced, message

    try:
        created, forced, message = await asyncio.to_thread(run)
    finally:
        for api_client in api_clients:
            api_client.close()
    assert created["spec"]["priority"] == 2 and _managers(created) == [("notebook", "Apply")]
    assert message == 'Apply failed with 1 conflict: conflict with "notebook": .spec.priority'
    assert forced["spec"]["priority"] == 8
    stored = await _stored(hub, "default", "dyn")
    assert ("OpenAPI-Generator", "Update") in _managers(stored)
    assert stored["spec"]["suspend"] is True


async def test_apply_through_status_and_status_sent_to_the_main_resource(hub: RunningHub) -> None:
    body = job("default", "st")
    body["status"] = {"phase": "Running"}  # ignored on the main resource (kube's reset fields)
    status, created = await hub.request("PATCH", jobs_url("default", "st") + "?fieldManager=tool", data=json.dumps(
        body).encode(), headers={"Content-Type": APPLY})
    assert status == 201, created
    assert "status" not in created
    assert all("f:status" not in e["fieldsV1"] for e in created["metadata"]["managedFields"])
    status_config = {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
                     "metadata": {"name": "st", "namespace": "default"}, "status": {"phase": "Pending"},
                     "spec": {"priority": 99}}
    status, applied = await hub.request("PATCH", jobs_url("default", "st", "status") + "?fieldManager=ctl",
                                        data=json.dumps(status_config).encode(), headers={"Content-Type": APPLY})
    assert status == 200, applied
    assert applied["status"] == {"phase": "Pending"}
    assert applied["spec"]["priority"] == body["spec"]["priority"]  # spec is not /status's
    entry = next(e for e in applied["metadata"]["managedFields"] if e["manager"] == "ctl")
    assert (entry["operation"], entry["subresource"]) == ("Apply", "status")
    assert entry["fieldsV1"] == {"f:status": {"f:phase": {}}}
    status, missing = await hub.request("PATCH", jobs_url("default", "nope", "status") + "?fieldManager=ctl",
                                        data=json.dumps(status_config).encode(), headers={"Content-Type": APPLY})
    assert status == 404, missing
    assert await _absent(hub, "default", "nope")


def _config(**changes: Any) -> dict[str, Any]:
    body = job("default", "target")
    body.update(changes)
    return body


async def test_hostile_apply_requests_get_a_status_and_change_nothing(hub: RunningHub) -> None:
    status, created = await hub.request("PATCH", jobs_url("default", "target") + "?fieldManager=kubectl",
                                        data=json.dumps(_config()).encode(), headers={"Content-Type": APPLY})
    assert status == 201, created
    before = await _stored(hub, "default", "target")
    dupes = _config()
    dupes["spec"]["roles"] = dupes["spec"]["roles"] + [dupes["spec"]["roles"][0]]
    managed = _config()
    managed["metadata"]["managedFields"] = before["metadata"]["managedFields"]
    wrong_ns = _config()
    wrong_ns["metadata"]["namespace"] = "team-b"
    invalid = _config()
    invalid["spec"]["roles"][0]["replicas"] = 0
    cases: list[tuple[str, str, bytes, str, dict[str, str], int, str]] = [
        # (who, path, body, content type, extra query, want status, in message)
        ("admin", "target", b"apiVersion: [unclosed", APPLY, {"fieldManager": "k"}, 400, "error decoding"),
        ("admin", "target", b"a: &x [1]\nb: *x\n", APPLY, {"fieldManager": "k"}, 400, "aliases"),
        ("admin", "target", b"[1, 2]", APPLY, {"fieldManager": "k"}, 400, "must be a TrainingJob object"),
        ("admin", "target", json.dumps(_config(apiVersion="federator.dev/v2")).encode(), APPLY,
         {"fieldManager": "k"}, 400, "invalid object type: federator.dev/v2, Kind=TrainingJob"),
        ("admin", "target", json.dumps(_config(kind="MemberCluster")).encode(), APPLY, {"fieldManager": "k"}, 400,
         "invalid object type: federator.dev/v1alpha1, Kind=MemberCluster"),
        ("admin", "other-name", json.dumps(_config()).encode(), APPLY, {"fieldManager": "k"}, 400,
         "the name of the object (target) does not match the name on the URL (other-name)"),
        ("admin", "target", json.dumps(wrong_ns).encode(), APPLY, {"fieldManager": "k"}, 400,
         "the namespace of the provided object does not match"),
        ("admin", "target", json.dumps(managed).encode(), APPLY, {"fieldManager": "k"}, 400,
         "metadata.managedFields must be nil"),
        ("admin", "target", json.dumps(dupes).encode(), APPLY, {"fieldManager": "k"}, 422,
         'spec.roles: Invalid value: duplicate entries for key [name="ps"]'),
        ("admin", "target", json.dumps(invalid).encode(), APPLY, {"fieldManager": "kubectl"}, 422,
         "spec.roles[0].replicas"),
        ("admin", "target", json.dumps(_config()).encode(), APPLY, {}, 422,
         'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'),
        ("admin", "target", json.dumps(_config()).encode(), APPLY, {"fieldManager": "m" * 129}, 422,
         "fieldManager: Too long: may not be more than 128 bytes"),
        ("admin", "target", b'{"spec":{"priority":3}}', "application/merge-patch+json", {"force": "true"}, 422,
         "force: Forbidden: may not be specified for non-apply patch"),
        ("admin", "target", b"{}", "text/plain", {"fieldManager": "k"}, 415,
         f"accepted media types include: {ACCEPTED}"),
        ("admin", "target", b"{}", "application/strategic-merge-patch+json", {}, 415,
         f"accepted media types include: {ACCEPTED}"),
        ("admin", "target", b"{}", "application/apply-patch+cbor", {"fieldManager": "k"}, 415,
         f"accepted media types include: {ACCEPTED}"),
        ("admin", "target", b" " * (3 * 1024 * 1024 + 1), APPLY, {"fieldManager": "k"}, 413, "Request entity too large"),
        ("viewer", "target", json.dumps(_config()).encode(), APPLY, {"fieldManager": "k"}, 403, "forbidden"),
        ("other", "target", json.dumps(_config()).encode(), APPLY, {"fieldManager": "k"}, 403, "forbidden"),
    ]
    for who, name, body, content_type, query, want, text in cases:
        path = jobs_url("default", name) + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
        status, answer = await hub.request("PATCH", path, who=who, data=body, headers={"Content-Type": content_type})
        assert status == want, (name, content_type, query, answer)
        assert isinstance(answer, dict) and answer["kind"] == "Status" and text in answer["message"], answer
    # an apply that would create with a uid is refused (kube: uid mismatch)
    with_uid = job("default", "fresh")
    with_uid["metadata"]["uid"] = "0b6c3f1e-5d7a-4a53-9b8e-1f0c2d3e4a5b"
    status, answer = await hub.request("PATCH", jobs_url("default", "fresh") + "?fieldManager=k",
                                       data=json.dumps(with_uid).encode(), headers={"Content-Type": APPLY})
    assert status == 409 and "uid mismatch" in answer["message"], answer
    after = await _stored(hub, "default", "target")
    assert after == before
    assert await _absent(hub, "default", "other-name") and await _absent(hub, "default", "fresh")
    # a dry-run apply answers with the result and stores nothing
    status, dry = await hub.request("PATCH", jobs_url("default", "target") + "?fieldManager=k&dryRun=All",
                                    data=json.dumps(_config(spec={**_config()["spec"], "priority": 42})).encode(),
                                    headers={"Content-Type": APPLY})
    assert status == 409 and "conflict" in dry["message"], dry  # k would take kubectl's priority
    status, dry = await hub.request("PATCH", jobs_url("default", "target") + "?fieldManager=kubectl&dryRun=All",
                                    data=json.dumps(_config(spec={**_config()["spec"], "priority": 42})).encode(),
                                    headers={"Content-Type": APPLY})
    assert status == 200 and dry["spec"]["priority"] == 42, dry
    assert await _stored(hub, "default", "target") == before


async def test_a_415_names_exactly_the_media_types_a_body_may_have(hub: RunningHub) -> None:
    status, answer = await hub.request("POST", jobs_url("default"), data=b"{}", headers={"Content-Type": "text/plain"})
    assert status == 415, answer
    listed = answer["message"].split("accepted media types include: ", 1)[1].split(", ")
    assert listed == list(BODY_MEDIA_TYPES)
    for i, media_type in enumerate(listed):  # and every one of them is read
        body = json.dumps(job("default", f"typed-{i}")).encode()
        status, created = await hub.request("POST", jobs_url("default"), data=body,
                                            headers={"Content-Type": media_type})
        assert status == 201, (media_type, created)


def test_the_cli_prints_objects_without_managed_fields_as_kubectl_does() -> None:
    entry = {"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {}}
    obj = {"apiVersion": "v1", "kind": "List",
           "items": [{"kind": "TrainingJob", "metadata": {"name": "a", "managedFields": [entry]}}]}
    for output in ("json", "yaml"):
        out = io.StringIO()
        dump(obj, output, out)
        assert "managedFields" not in out.getvalue() and "name: a" in out.getvalue().replace('"name": "a"', "name: a")
    assert obj["items"][0]["metadata"]["managedFields"] == [entry]  # the object itself is left alone


async def test_member_cluster_apply_keeps_credentials_and_field_validation_applies(hub: RunningHub) -> None:
    from .test_credentials import MEMBER_TOKEN, assert_no_secret, token_cluster

    url = "/apis/federator.dev/v1alpha1/memberclusters/applied"
    status, created = await hub.request("PATCH", url + "?fieldManager=ops", data=json.dumps(
        token_cluster("applied")).encode(), headers={"Content-Type": APPLY})
    assert status == 201, created
    assert_no_secret(json.dumps(created), "an apply answer")
    rt = hub.context.kind("MemberCluster")
    stored = await hub.context.storage.get(rt, namespace=None, name="applied")
    assert stored["spec"]["connection"]["credentials"]["token"] == MEMBER_TOKEN
    # what a client read back (credentials redacted) applied again: no conflict, the token stays
    echoed = token_cluster("applied", bandwidth=200.0)
    echoed["spec"]["connection"]["credentials"]["token"] = created["spec"]["connection"]["credentials"]["token"]
    status, answer = await hub.request("PATCH", url + "?fieldManager=ops", data=json.dumps(echoed).encode(),
                                       headers={"Content-Type": APPLY})
    assert status == 200, answer
    stored = await hub.context.storage.get(rt, namespace=None, name="applied")
    assert stored["spec"]["connection"]["credentials"]["token"] == MEMBER_TOKEN
    assert stored["spec"]["network"]["bandwidthGbps"] == 200.0
    # kubectl's fieldValidation=Strict refuses an unknown field; Warn (the default) drops it and says so
    unknown = token_cluster("applied", bandwidth=200.0)
    unknown["spec"]["bogus"] = 1
    status, answer = await hub.request("PATCH", url + "?fieldManager=ops&fieldValidation=Strict",
                                       data=json.dumps(unknown).encode(), headers={"Content-Type": APPLY})
    assert status == 400 and 'unknown field "spec.bogus"' in answer["message"], answer
    status, answer = await hub.request("PATCH", url + "?fieldManager=ops", data=json.dumps(unknown).encode(),
                                       headers={"Content-Type": APPLY})
    assert status == 200 and "bogus" not in answer["spec"], answer
    # a stale resourceVersion in an applied configuration is kube's optimistic-lock conflict
    stale = token_cluster("applied", bandwidth=300.0)
    stale["metadata"]["resourceVersion"] = "1"
    status, answer = await hub.request("PATCH", url + "?fieldManager=ops", data=json.dumps(stale).encode(),
                                       headers={"Content-Type": APPLY})
    assert status == 409 and "the object has been modified" in answer["message"], answer
    assert (await hub.context.storage.get(rt, namespace=None, name="applied"))["spec"]["network"][
        "bandwidthGbps"] == 200.0
