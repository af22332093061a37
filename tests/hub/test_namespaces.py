"""core/v1 Namespace on the hub (issue 28 item 6), through real kubectl and the HTTP API.

The hub serves Namespaces as kube does (NAME STATUS AGE, spec.finalizers ["kubernetes"], phase Active or
Terminating, kubernetes.io/metadata.name on each), has default, kube-system and kube-public from its start,
enforces kube's NamespaceLifecycle (404 in a missing namespace, 403 in a Terminating one) or, with
`namespaces: autoprovision`, creates the missing namespace; its namespace controller empties a Terminating
namespace and removes it. Queues select namespaces by their real labels. Admins manage namespaces,
researchers may get their own, viewers read; bad input is a 4xx that changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.controllers.context import HubSettings
from federator.controllers.namespaces import namespace_lifecycle
from federator.controllers.settings import NamespaceSettings

from ..controllers.jobtest_support import wait_until
from .hubtest_support import RunningHub, start_hub

pytestmark = pytest.mark.kubectl

API = "federator.dev/v1alpha1"
NS = "/api/v1/namespaces"


def job(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"roles": [{"name": "worker", "replicas": 1,
                                "template": {"image": "trainer:1.4", "resources": {"cpu": "1"}}}], **spec}}


def jobs_url(namespace: str, name: str = "") -> str:
    return f"/apis/{API}/namespaces/{namespace}/trainingjobs" + (f"/{name}" if name else "")


async def wait_for(hub: RunningHub, path: str, check: Any, *, timeout: float = 30.0) -> Any:
    """The object at `path` once `check(object or None when gone)` holds (polled with a deadline)."""

    async def probe() -> Any:
        status, obj = await hub.request("GET", path)
        value = obj if status == 200 else None
        return (value,) if check(value) else None

    (found,) = await wait_until(probe, timeout=timeout, what=f"{path} to reach the state waited for")
    return found


async def names(hub: RunningHub) -> set[str]:
    status, listing = await hub.request("GET", NS)
    assert status == 200, listing
    return {item["metadata"]["name"] for item in listing["items"]}


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[RunningHub]:
    """A hub as `federator up` runs it by default (lifecycle), with its namespace controller."""
    settings = HubSettings(state_dir=tmp_path / "hub" / "state",
                           namespaces=NamespaceSettings(mode="lifecycle", retry_seconds=0.05))
    async with start_hub(tmp_path / "hub", controllers=[namespace_lifecycle], settings=settings) as running:
        yield running


async def test_kubectl_get_create_label_and_delete_namespaces(hub: RunningHub) -> None:
    code, out, err = await hub.kubectl("admin", "get", "ns")
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "STATUS", "AGE"], out
    assert {row.split()[0]: row.split()[1] for row in rows} == {
        "default": "Active", "kube-public": "Active", "kube-system": "Active"}

    code, out, err = await hub.kubectl("admin", "create", "namespace", "vision")
    assert code == 0 and "namespace/vision created" in out, err
    code, out, err = await hub.kubectl("admin", "get", "ns", "vision", "-o", "json")
    assert code == 0, err
    ns = json.loads(out)
    assert ns["spec"]["finalizers"] == ["kubernetes"] and ns["status"]["phase"] == "Active"
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "vision"}

    code, out, err = await hub.kubectl("admin", "label", "ns", "vision", "team=vision")
    assert code == 0 and "labeled" in out, err
    code, out, err = await hub.kubectl("admin", "get", "ns", "-l", "team=vision", "-o", "name")
    assert code == 0 and out.split() == ["namespace/vision"], (out, err)
    # kube keeps its name label, whatever a patch says
    code, out, err = await hub.kubectl("admin", "label", "ns", "vision", "--overwrite",
                                       "kubernetes.io/metadata.name=other")
    assert code == 0, err
    _, ns = await hub.request("GET", f"{NS}/vision")
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "vision", "team": "vision"}

    assert (await hub.request("POST", jobs_url("vision"), body=job("vision", "j1")))[0] == 201
    code, out, err = await hub.kubectl("admin", "delete", "ns", "vision", "--timeout=60s")
    assert code == 0 and 'namespace "vision" deleted' in out, err
    assert (await hub.request("GET", f"{NS}/vision"))[0] == 404  # kubectl waited until it was gone
    assert (await hub.request("GET", jobs_url("vision", "j1")))[0] == 404
    assert await names(hub) == {"default", "kube-public", "kube-system"}


async def test_a_file_with_a_namespace_and_a_job_in_it_applies(hub: RunningHub) -> None:
    manifest = yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nlp"}},
                                   job("nlp", "bert")])
    code, out, err = await hub.kubectl("admin", "apply", "-f", "-", stdin=manifest)
    assert code == 0, err
    assert "namespace/nlp created" in out and "trainingjob.federator.dev/bert created" in out, out
    assert (await hub.request("GET", jobs_url("nlp", "bert")))[0] == 200


async def test_server_side_apply_of_a_namespace(hub: RunningHub) -> None:
    manifest = yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": "argo", "labels": {"team": "argo"}}})
    code, out, err = await hub.kubectl("admin", "apply", "--server-side", "--field-manager=argocd", "-f", "-",
                                       stdin=manifest)
    assert code == 0 and "namespace/argo serverside-applied" in out, (out, err)
    _, ns = await hub.request("GET", f"{NS}/argo")
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "argo", "team": "argo"}
    assert "argocd" in {entry["manager"] for entry in ns["metadata"]["managedFields"]}


async def test_a_job_in_a_missing_namespace_is_404_and_nothing_is_stored(hub: RunningHub) -> None:
    status, body = await hub.request("POST", jobs_url("nope"), body=job("nope", "j"))
    assert status == 404, body
    assert body["reason"] == "NotFound" and body["message"] == 'namespaces "nope" not found'
    code, _, err = await hub.kubectl("admin", "apply", "-f", "-", stdin=yaml.safe_dump(job("nope", "j")))
    assert code != 0 and 'namespaces "nope" not found' in err, err
    assert "nope" not in await names(hub)
    status, listing = await hub.request("GET", f"/apis/{API}/trainingjobs")
    assert status == 200 and listing["items"] == []


async def test_a_terminating_namespace_refuses_new_objects_and_says_what_remains(hub: RunningHub) -> None:
    """A job holding a finalizer nobody removes keeps its namespace Terminating: new content is 403, the
    namespace's conditions name what remains; once the finalizer goes, so does the namespace."""
    assert (await hub.request("POST", NS, body={"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": "doomed"}}))[0] == 201
    held = job("doomed", "held")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    assert (await hub.request("POST", jobs_url("doomed"), body=held))[0] == 201
    status, body = await hub.request("DELETE", f"{NS}/doomed")
    assert status == 200, body

    def remaining(ns: Any) -> bool:
        conditions = {c["type"]: c for c in ((ns or {}).get("status") or {}).get("conditions") or ()}
        return conditions.get("NamespaceFinalizersRemaining", {}).get("status") == "True"

    ns = await wait_for(hub, f"{NS}/doomed", remaining)
    assert ns["status"]["phase"] == "Terminating" and ns["metadata"]["deletionTimestamp"]
    conditions = {c["type"]: c for c in ns["status"]["conditions"]}
    assert "example.com/hold in 1 resource instances" in conditions["NamespaceFinalizersRemaining"]["message"]
    assert conditions["NamespaceContentRemaining"]["reason"] == "SomeResourcesRemain"
    assert "trainingjobs.federator.dev has 1 resource instances" in conditions["NamespaceContentRemaining"]["message"]
    assert conditions["NamespaceDeletionContentFailure"]["status"] == "False"
    code, out, err = await hub.kubectl("admin", "get", "ns", "doomed")
    assert code == 0 and out.splitlines()[1].split()[1] == "Terminating", out

    status, body = await hub.request("POST", jobs_url("doomed"), body=job("doomed", "late"))
    assert status == 403, body
    assert body["message"].endswith("unable to create new content in namespace doomed because it is being "
                                    "terminated"), body
    assert (await hub.request("GET", jobs_url("doomed", "late")))[0] == 404

    status, body = await hub.request("PATCH", jobs_url("doomed", "held"), body={"metadata": {"finalizers": None}},
                                     headers={"Content-Type": "application/merge-patch+json"})
    assert status == 200, body
    await wait_for(hub, f"{NS}/doomed", lambda ns: ns is None)
    assert (await hub.request("GET", jobs_url("doomed", "held")))[0] == 404


async def test_autoprovision_creates_the_missing_namespace(tmp_path: Path) -> None:
    settings = HubSettings(state_dir=tmp_path / "hub" / "state", namespaces=NamespaceSettings(mode="autoprovision"))
    async with start_hub(tmp_path / "hub", settings=settings) as hub:
        code, out, err = await hub.kubectl("admin", "apply", "--dry-run=server", "-f", "-",
                                           stdin=yaml.safe_dump(job("fresh", "j")))
        assert code == 0, err
        assert "fresh" not in await names(hub)  # a dry run creates nothing
        assert (await hub.request("POST", jobs_url("fresh"), body=job("fresh", "j")))[0] == 201
        status, ns = await hub.request("GET", f"{NS}/fresh")
        assert status == 200 and ns["status"]["phase"] == "Active", ns
        # a bad namespace name is still refused, and provisions nothing
        status, body = await hub.request("POST", jobs_url("Bad_NS"), body=job("Bad_NS", "j"))
        assert 400 <= status < 500, body
        assert await names(hub) == {"default", "fresh", "kube-public", "kube-system"}


async def test_a_queue_selects_namespaces_by_their_labels(hub: RunningHub) -> None:
    queue = {"apiVersion": API, "kind": "Queue", "metadata": {"name": "vision-q"},
             "spec": {"namespaces": {"selector": {"matchLabels": {"team": "vision"}}}, "default": True,
                      "quota": {"gpus": {"A100": 8}}}}
    assert (await hub.request("POST", f"/apis/{API}/queues", body=queue))[0] == 201
    for name in ("labelled", "plain"):
        assert (await hub.request("POST", NS, body={"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": name}}))[0] == 201
    code, _, err = await hub.kubectl("admin", "label", "ns", "labelled", "team=vision")
    assert code == 0, err
    status, created = await hub.request("POST", jobs_url("labelled"), body=job("labelled", "j"))
    assert status == 201 and created["spec"]["queue"] == "vision-q", created
    status, created = await hub.request("POST", jobs_url("plain"), body=job("plain", "j"))
    assert status == 201 and "queue" not in created["spec"], created
    status, body = await hub.request("POST", jobs_url("plain"), body=job("plain", "k", queue="vision-q"))
    assert status == 403 and "does not take jobs from namespace plain" in body["message"], body


@pytest.mark.parametrize(("body", "why"), [
    ({"metadata": {"name": "Bad_Name"}}, "metadata.name"),
    ({"metadata": {"name": "x" * 64}}, "metadata.name"),
    ({"metadata": {"name": "a.b"}}, "metadata.name"),  # a DNS label, not a subdomain
    ({"metadata": {"name": "big", "labels": {"team": "v" * 64}}}, "metadata.labels"),
    ({"metadata": {"name": "big", "labels": {"bad key!": "v"}}}, "metadata.labels"),
    ({"metadata": {"name": "fin"}, "spec": {"finalizers": "kubernetes"}}, "spec.finalizers"),
    ({"metadata": {"name": "fin"}, "spec": {"finalizers": [7]}}, "spec.finalizers[0]"),
    ({"metadata": {"name": "spec"}, "spec": []}, "spec"),
])
async def test_bad_namespaces_are_refused_and_nothing_changes(hub: RunningHub, body: dict[str, Any],
                                                              why: str) -> None:
    before = await names(hub)
    status, answer = await hub.request("POST", NS, body={"apiVersion": "v1", "kind": "Namespace", **body})
    assert status == 422, answer
    assert why in json.dumps(answer), answer
    assert await names(hub) == before


async def test_hostile_fields_of_a_namespace_body_are_not_taken(hub: RunningHub) -> None:
    before = await names(hub)
    status, answer = await hub.request(
        "POST", f"{NS}?fieldValidation=Strict",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "strict"}, "spec": {"evil": True}})
    assert status == 400 and "evil" in answer["message"], answer
    assert await names(hub) == before
    status, ns = await hub.request("POST", NS, body={
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "calm", "deletionTimestamp": "2020-01-01T00:00:00Z", "namespace": "default",
                     "labels": {"kubernetes.io/metadata.name": "other"}},
        "status": {"phase": "Terminating", "conditions": [{"type": "X", "status": "True"}]}})
    assert status == 201, ns
    assert ns["status"] == {"phase": "Active"} and "deletionTimestamp" not in ns["metadata"]
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "calm"}
    assert ns["metadata"].get("namespace") in (None, "")
    # spec.finalizers change only through the finalize subresource
    status, answer = await hub.request("PATCH", f"{NS}/calm", body={"spec": {"finalizers": []}},
                                       headers={"Content-Type": "application/merge-patch+json"})
    assert status == 422 and "spec.finalizers" in json.dumps(answer), answer
    assert (await hub.request("GET", f"{NS}/calm"))[1]["spec"]["finalizers"] == ["kubernetes"]


async def test_who_may_do_what_with_namespaces(hub: RunningHub) -> None:
    assert (await hub.request("POST", NS, body={"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": "team-b"}}))[0] == 201
    # a researcher (ns:default) reads its own namespace, no other, and lists none
    assert (await hub.request("GET", f"{NS}/default", who="researcher"))[0] == 200
    assert (await hub.request("GET", f"{NS}/team-b", who="researcher"))[0] == 403
    assert (await hub.request("GET", f"{NS}/team-b", who="other"))[0] == 200
    assert (await hub.request("GET", NS, who="researcher"))[0] == 403
    code, _, err = await hub.kubectl("researcher", "get", "ns", "default")
    assert code == 0, err
    # viewers read everything
    assert (await hub.request("GET", NS, who="viewer"))[0] == 200
    assert (await hub.request("GET", f"{NS}/team-b", who="viewer"))[0] == 200
    # only admins write
    for who in ("researcher", "other", "viewer"):
        code, _, err = await hub.kubectl(who, "create", "namespace", f"by-{who}")
        assert code != 0 and "Forbidden" in err, (who, err)
        code, _, err = await hub.kubectl(who, "label", "ns", "team-b", "owner=me")
        assert code != 0 and "Forbidden" in err, (who, err)
        status, _ = await hub.request("DELETE", f"{NS}/team-b", who=who)
        assert status == 403, who
    assert await names(hub) == {"default", "kube-public", "kube-system", "team-b"}
    _, ns = await hub.request("GET", f"{NS}/team-b")
    assert "owner" not in ns["metadata"]["labels"] and "deletionTimestamp" not in ns["metadata"]
