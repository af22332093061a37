"""schemathesis (pinned in pyproject's dev extras) against a running hub and its unpatched OpenAPI v3
documents, as a schema-driven client would use them.

Every operation of every group-version document the hub serves (/openapi/v3 index: core v1 Events,
events.k8s.io/v1, federator.dev/v1alpha1, scheduling.k8s.io/v1 PriorityClasses) gets a bounded number of generated requests, valid ones and
invalid ones (hypothesis, derandomized, so a run is repeatable), sent over HTTPS with the admin's bearer
token to a hub seeded with one object of each kind (named "0", where generation starts). Each response
must not be a 5xx and must conform to the document: a declared status code, a declared content type and
a body that matches the declared schema. A second test checks the documents' shape directly: every path
parameter declared, only the verbs a kind serves, the status codes the server uses declared.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, Phase, given, settings

import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from federator.apis.jobkinds import JOB_KINDS
from federator.controllers.events import event_recording

from ..apis.test_drillreport import report
from ..controllers.jobtest_support import registration
from ..hub.hubtest_support import TOKENS, RunningHub, job, start_hub

#: generated requests per operation and mode, fewer for operations with a request body (generating a
#: TrainingJob is most of the cost): about 40 operations, ~15 s on a quiet 2-core machine
EXAMPLES = {GenerationMode.POSITIVE: 3, GenerationMode.NEGATIVE: 2}
BODY_EXAMPLES = {GenerationMode.POSITIVE: 2, GenerationMode.NEGATIVE: 1}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


async def seed(hub: RunningHub, tmp_path: Path) -> None:
    """One object of each kind, named "0" (hypothesis starts generating strings there)."""
    cluster = registration("0", tmp_path / "member.kubeconfig", scheduler="volcano", network="rdma")
    drill = report()
    drill["metadata"] = {"name": "0"}
    queue = {"apiVersion": "federator.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "0"},
             "spec": {"namespaces": {"names": ["0"]}, "quota": {"gpus": {"A100": 8}}}}
    priority_class = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "0"},
                      "value": 100}
    cluster_profile = {"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
                       "metadata": {"name": "0", "namespace": "0"}, "spec": {"clusterManager": {"name": "0"}}}
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "0", "namespace": "0"},
             "involvedObject": {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob", "name": "0",
                                "namespace": "0"}, "reason": "Placed", "message": "seeded"}
    for path, body in (("/apis/federator.dev/v1alpha1/namespaces/0/trainingjobs", job("0", "0")),
                       ("/apis/federator.dev/v1alpha1/memberclusters", cluster),
                       ("/apis/federator.dev/v1alpha1/drillreports", drill),
                       ("/apis/federator.dev/v1alpha1/queues", queue),
                       ("/apis/scheduling.k8s.io/v1/priorityclasses", priority_class),
                       ("/apis/multicluster.x-k8s.io/v1alpha1/namespaces/0/clusterprofiles", cluster_profile),
                       ("/api/v1/namespaces/0/events", event)):
        status, answer = await hub.request("POST", path, body=body)
        assert status == 201, (path, answer)


def fuzz(document: dict[str, Any], *, base_url: str, ca_file: Path) -> tuple[list[str], int]:
    """Run every operation of `document`; (failures as text, requests sent)."""
    schema = schemathesis.openapi.from_dict(document)
    session = requests.Session()
    failures: list[str] = []
    sent = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode, examples in (BODY_EXAMPLES if len(operation.body) else EXAMPLES).items():
            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
            def run(case: Any) -> None:
                nonlocal sent
                headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
                case.headers = {**headers, "Authorization": f"Bearer {TOKENS['admin']}"}
                try:
                    response = case.call(base_url=base_url, session=session, timeout=20, verify=str(ca_file))
                except requests.RequestException as e:
                    failures.append(f"{operation.label} ({mode.value}): no answer: {e!r}"[:2000])
                    return
                sent += 1
                try:
                    case.validate_response(response, checks=CHECKS)
                except Exception as e:  # noqa: BLE001 - every failure is collected and reported together
                    failures.append(f"{operation.label} ({mode.value}) -> {response.status_code}: {e}"[:2000])

            run()
    return failures, sent


async def documents(hub: RunningHub) -> dict[str, dict[str, Any]]:
    status, index = await hub.request("GET", "/openapi/v3")
    assert status == 200
    out = {}
    for gv, ref in index["paths"].items():
        status, document = await hub.request("GET", ref["serverRelativeURL"])
        assert status == 200
        out[gv] = document
    assert set(out) == {"api/v1", "apis/events.k8s.io/v1", "apis/federator.dev/v1alpha1",
                        "apis/scheduling.k8s.io/v1", "apis/multicluster.x-k8s.io/v1alpha1",
                        *(f"apis/{k.api_version}" for k in JOB_KINDS)}
    return out


@pytest.mark.slow
async def test_generated_requests_get_no_server_error_and_answers_that_match_the_document(tmp_path: Path) -> None:
    async with start_hub(tmp_path / "hub", controllers=[event_recording]) as hub:
        await seed(hub, tmp_path)
        started = time.monotonic()
        failures: list[str] = []
        sent = 0
        for document in (await documents(hub)).values():
            found, count = await asyncio.to_thread(fuzz, document, base_url=hub.url, ca_file=hub.ca_file)
            failures += found
            sent += count
        took = time.monotonic() - started
    assert sent >= 120, f"only {sent} requests were sent in {took:.0f}s"
    assert not failures, f"{len(failures)} of {sent} generated requests failed:\n" + "\n\n".join(failures[:20])


async def test_the_documents_declare_parameters_verbs_and_status_codes(tmp_path: Path) -> None:
    async with start_hub(tmp_path / "hub") as hub:
        docs = await documents(hub)
    for gv, document in docs.items():
        assert document["openapi"].startswith("3.0") and "BearerToken" in document["components"]["securitySchemes"]
        for path, item in document["paths"].items():
            declared_at_path = {p["name"] for p in item.get("parameters", ()) if p["in"] == "path"}
            for method, op in item.items():
                if method == "parameters":
                    continue
                declared = declared_at_path | {p["name"] for p in op.get("parameters", ()) if p["in"] == "path"}
                assert set(re.findall(r"{(\w+)}", path)) == declared, (gv, path, method)
                codes = set(op["responses"])
                assert {"400", "401", "403", "404", "503"} <= codes, (path, method, codes)
                if method == "post":
                    assert {"201", "409", "413", "415", "422"} <= codes, (path, codes)
                if method in ("put", "patch"):
                    assert {"200", "409", "415", "422"} <= codes, (path, method, codes)
                if method == "get":
                    assert "200" in codes
    events_v1 = docs["apis/events.k8s.io/v1"]["paths"]
    # the events.k8s.io view is read-only: no write operations are documented
    assert {m for item in events_v1.values() for m in item if m != "parameters"} == {"get"}
    # a Queue's status is the hub's own: read-only over HTTP
    hub_paths = docs["apis/federator.dev/v1alpha1"]["paths"]
    assert set(hub_paths["/apis/federator.dev/v1alpha1/queues/{name}/status"]) == {"parameters", "get"}
    assert {"put", "patch"} <= set(hub_paths["/apis/federator.dev/v1alpha1/memberclusters/{name}/status"])
    core = docs["api/v1"]["paths"]
    assert set(core["/api/v1/namespaces/{namespace}/events/{name}"]) == {"parameters", "get", "put", "patch",
                                                                          "delete"}
