"""The hub's own writes to member clusters in its audit log: every create/patch/delete a MemberClient sends
is reported through its write-log port (clusters/client.py) and logged at Metadata as
system:federator:controller, naming the cluster and why (apiserver/audit.py); in a real hub, member sync's
clients are wired to the hub's audit log (its fencing-Lease renewals, reason "fence")."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

from clustertest_support import Sims, profile, registration, wait_until

from federator.apiserver.audit import AuditLog, AuditLogSettings, iter_events, parse_policy
from federator.clusters.client import PODS, MemberApiError, MemberClient, MemberWrite, member_write_reason
from federator.controllers.membercluster import member_sync

from ..hub.hubtest_support import start_hub

EVERYTHING = parse_policy(b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: RequestResponse}]\n")


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


async def test_member_writes_are_logged_at_metadata_with_cluster_and_reason(sims: Sims, tmp_path: Path) -> None:
    await sims.start(profile("m", gpu_nodes=1, cpu_nodes=0))
    path = tmp_path / "audit.log"
    audit = AuditLog(AuditLogSettings(path=str(path), policy=EVERYTHING))
    seen: list[MemberWrite] = []

    def record(write: MemberWrite) -> None:
        seen.append(write)
        audit.record_member_write(write)

    try:
        async with await MemberClient.from_kubeconfig(sims.kubeconfigs["m"], cluster="m") as client:
            client.write_log = record
            with member_write_reason("place"):
                await client.create(PODS, _pod("p"), namespace="default")
                with member_write_reason("suspend", keep=True):  # the caller's reason stays
                    await client.patch(PODS, namespace="default", name="p", patch={"metadata": {"labels": {"a": "b"}}})
            with member_write_reason("cleanup"):
                await client.delete(PODS, namespace="default", name="p", grace_period_seconds=0)
                try:
                    await client.delete(PODS, namespace="default", name="gone", grace_period_seconds=0)
                except MemberApiError as e:
                    assert e.code == 404
        await asyncio.to_thread(audit.flush)
    finally:
        audit.close()
    assert [w.verb for w in seen] == ["create", "patch", "delete", "delete"]
    events = list(iter_events(path))
    rows = [(e["verb"], e["objectRef"].get("name"), e["responseStatus"]["code"], e["annotations"]) for e in events]
    assert rows == [
        ("create", "p", 201, {"federator.dev/cluster": "m", "federator.dev/reason": "place"}),
        ("patch", "p", 200, {"federator.dev/cluster": "m", "federator.dev/reason": "place"}),
        ("delete", "p", 200, {"federator.dev/cluster": "m", "federator.dev/reason": "cleanup"}),
        ("delete", "gone", 404, {"federator.dev/cluster": "m", "federator.dev/reason": "cleanup"}),
    ]
    for event in events:
        # Metadata whatever the policy says: the hub never logs a member object's body
        assert event["level"] == "Metadata" and "requestObject" not in event and "responseObject" not in event
        assert event["user"] == {"username": "system:federator:controller", "groups": ["system:federator"]}
        assert event["objectRef"]["resource"] == "pods" and event["objectRef"]["namespace"] == "default"
        assert event["objectRef"]["apiVersion"] == "v1" and event["stage"] == "ResponseComplete"
    assert events[3]["responseStatus"]["reason"] == "NotFound"


async def test_a_hub_logs_its_member_writes_with_the_cluster_name(sims: Sims, tmp_path: Path) -> None:
    sim = await sims.start(profile("audited", gpu_nodes=1, cpu_nodes=0))
    path = tmp_path / "audit.log"
    audit = AuditLog(AuditLogSettings(path=str(path), policy=EVERYTHING))
    ca = base64.b64encode(sim.ca_pem).decode()
    body = registration("audited", None, connection={"server": sim.url, "certificateAuthorityData": ca,
                                                      "credentials": {"token": sim.token}})
    async with start_hub(tmp_path / "hub", controllers=[member_sync], audit=audit) as hub:
        status, answer = await hub.request("POST", "/apis/federator.dev/v1alpha1/memberclusters", body=body)
        assert status == 201, answer

        async def fenced() -> bool:
            await asyncio.to_thread(audit.flush)
            return any(e.get("annotations", {}).get("federator.dev/reason") == "fence" for e in iter_events(path))

        await wait_until(fenced, timeout=30, what="the hub's lease renewal in the audit log")
    events = list(iter_events(path))
    lease = next(e for e in events if e.get("annotations", {}).get("federator.dev/reason") == "fence")
    assert lease["annotations"]["federator.dev/cluster"] == "audited" and lease["level"] == "Metadata"
    assert lease["objectRef"]["apiGroup"] == "coordination.k8s.io" and lease["objectRef"]["resource"] == "leases"
    assert lease["user"]["username"] == "system:federator:controller"
    text = path.read_text()
    assert sim.token not in text and base64.b64encode(sim.token.encode()).decode() not in text
    registered = next(e for e in events if e["verb"] == "create" and e.get("objectRef", {}).get("resource")
                      == "memberclusters" and e["stage"] == "ResponseComplete")
    assert registered["requestObject"]["spec"]["connection"]["credentials"] == {"token": "<redacted>"}
