"""A job's member pods through the hub: `GET .../trainingjobs/NAME/pods` (controllers/jobpods.py), against a
real hub with its controllers and a real simulated member (lifecycle_env): the answer matches the member's
own pods (role, index, node, phase, readiness, restarts, start time), in the job's role order, and follows
them (a deleted pod goes); authorisation as the job's log (the namespace's researcher and viewers read,
another namespace's researcher gets 403, no token 401); a job not placed yet has no pods (200, empty);
hostile names and other verbs get a Status and change nothing; a member that does not answer is 503
naming the cluster but never its address; a hub that does not lead makes its own member client; and
neither the answer nor an error holds a credential or the member's URL; `federator describe job` shows the pods
(and the placement's score breakdown), and says what it cannot read when the member is down."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from federator.clusters.client import PODS
from federator.controllers.context import HubContext
from federator.controllers.jobpods import job_pods

from ..controllers.jobtest_support import phase, wait_until
from ..controllers.lifecycle_support import Env, aimed_job, lifecycle_env
from .hubtest_support import TOKENS

CLUSTER = "onprem-rdma-a100"
NS = "default"   # the test researcher's namespace (hubtest_support.TOKEN_FILE)
GROUP = "/apis/federator.dev/v1alpha1"


def pods_url(name: str, namespace: str = NS) -> str:
    return f"{GROUP}/namespaces/{namespace}/trainingjobs/{name}/pods"


def expected(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The member's pods as the subresource should show them, worked out from the member's own objects."""
    rows = []
    for pod in pods:
        labels, status = pod["metadata"]["labels"], pod.get("status") or {}
        row = {"name": pod["metadata"]["name"], "role": labels["federator.dev/role"],
               "index": int(labels["federator.dev/index"]), "phase": status.get("phase") or "Unknown",
               "ready": any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or ()),
               "restarts": sum(c["restartCount"] for c in status.get("containerStatuses") or ())}
        for key, value in (("node", pod["spec"].get("nodeName")), ("startTime", status.get("startTime")),
                           ("deletionTimestamp", pod["metadata"].get("deletionTimestamp"))):
            if value:
                row[key] = value
        rows.append(row)
    return sorted(rows, key=lambda r: (["ps", "worker"].index(r["role"]), r["index"]))


def no_secrets(env: Env, text: str) -> None:
    sim = env.fed.sims[CLUSTER]
    for secret in (sim.url, f":{sim.port}", str(env.fed.kubeconfigs[CLUSTER]), *TOKENS.values()):
        assert secret not in text, secret


async def test_a_jobs_member_pods_through_the_hub(tmp_path: Any) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        created = await env.api.submit(aimed_job("j1", CLUSTER, namespace=NS, workers=2, gpus=1))
        job = await env.api.wait_job(NS, "j1", lambda j: phase(j) == "Running", timeout=30, what="Running")
        uid, epoch = created["metadata"]["uid"], job["status"]["placement"]["epoch"]

        async def matches() -> dict[str, Any] | None:
            code, body = await env.hub.request("GET", pods_url("j1"), who="researcher")
            assert code == 200, body
            member = expected(await env.live_pods(CLUSTER, uid))
            return body if body["items"] == member and len(member) == 3 else None

        body = await wait_until(matches, timeout=20, what="the hub's answer to match the member's pods")
        assert (body["kind"], body["apiVersion"]) == ("TrainingJobPods", "federator.dev/v1alpha1")
        assert body["metadata"] == {"name": "j1", "namespace": NS, "uid": uid}
        assert (body["cluster"], body["epoch"], body["phase"]) == (CLUSTER, epoch, "Running")
        assert [(p["role"], p["index"]) for p in body["items"]] == [("ps", 0), ("worker", 0), ("worker", 1)]
        assert all(p["phase"] == "Running" and p["ready"] and p["node"] for p in body["items"])
        assert set(body["items"][0]) == {"name", "role", "index", "node", "phase", "ready", "restarts", "startTime"}
        no_secrets(env, str(body))

        # as the job's log: its namespace's researcher and viewers read it, no one else
        assert (await env.hub.request("GET", pods_url("j1"), who="viewer"))[0] == 200
        code, denied = await env.hub.request("GET", pods_url("j1"), who="other")
        assert code == 403 and denied["reason"] == "Forbidden"
        assert 'cannot get resource "trainingjobs/pods"' in denied["message"]
        assert (await env.hub.request("GET", pods_url("j1"), who=None))[0] == 401
        can_i = ("auth", "can-i", "get", "trainingjobs", "--subresource=pods", "-n", NS)
        rc, out, err = await env.hub.kubectl("researcher", *can_i)
        assert (rc, out.strip()) == (0, "yes"), err
        rc, out, err = await env.hub.kubectl("other", *can_i)
        assert out.startswith("no") and '"trainingjobs/pods"' in out, (out, err)
        rc, out, err = await env.hub.kubectl("researcher", "get", "--raw", pods_url("j1"))
        assert rc == 0 and '"kind":"TrainingJobPods"' in out.replace(" ", ""), err

        # read-only: other verbs are refused and change nothing
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            code, refused = await env.hub.request(method, pods_url("j1"), body={})
            assert code == 405 and refused["kind"] == "Status", (method, refused)
        assert len((await env.hub.request("GET", pods_url("j1")))[1]["items"]) == 3

        # the answer follows the member: a deleted pod goes
        member = await env.member(CLUSTER)
        gone = next(p for p in await env.live_pods(CLUSTER, uid) if p["metadata"]["labels"]["federator.dev/index"] == "1")
        await member.delete(PODS, namespace=NS, name=gone["metadata"]["name"], grace_period_seconds=0)

        async def without_it() -> list[dict[str, Any]] | None:
            items = (await env.hub.request("GET", pods_url("j1")))[1]["items"]
            return items if gone["metadata"]["name"] not in {p["name"] for p in items} else None

        items = await wait_until(without_it, timeout=20, what="the deleted pod gone from the answer")
        assert items == expected(await env.live_pods(CLUSTER, uid))

        # `federator describe job` shows them (and the decision's scores)
        code, out, err = await env.hub.cli("researcher", "describe", "job", "j1")
        assert code == 0, err
        assert f"  Score:      {job['status']['placement']['scores'][0]['total']:.1f}" in out
        lines = out[out.index(f"  Member pods in {CLUSTER} (epoch {epoch}):"):].splitlines()
        assert lines[1].split() == ["NAME", "ROLE", "INDEX", "NODE", "PHASE", "READY", "RESTARTS", "STARTED"]
        shown = [line.split()[:7] for line in lines[2:2 + len(items)]]
        assert shown == [[p["name"], p["role"], str(p["index"]), p["node"], p["phase"], "yes" if p["ready"] else "no",
                          str(p["restarts"])] for p in items]

        # not placed yet: no pods, not an error
        await env.api.submit(aimed_job("pending", "no-such-cluster", namespace=NS))
        code, body = await env.hub.request("GET", pods_url("pending"), who="researcher")
        assert code == 200 and body["items"] == [] and "cluster" not in body and body["epoch"] == 0, body

        # unknown jobs and hostile names: a Status, never a 5xx, nothing from elsewhere
        hostile = [("nope", NS, 404), ("j1", "team-b", 404), ("..", NS, 404), ("j1%2F..%2F..", NS, 404),
                   ("J1", NS, 404), ("x" * 300, NS, 404), (quote("j1\n"), NS, 404), (quote("j1\u00b2"), NS, 404),
                   ("j1", "..", 404), ("j1", quote("default\u0000"), 404)]
        for name, namespace, status in hostile:
            code, answer = await env.hub.request("GET", f"{GROUP}/namespaces/{namespace}/trainingjobs/{name}/pods")
            assert code < 500 and isinstance(answer, dict) and answer.get("kind") == "Status", (name, code, answer)
            assert code == status or code == 400, (name, namespace, code, answer)
        code, answer = await env.hub.request("GET", f"{GROUP}/namespaces/team-b/trainingjobs/j1/pods",
                                             who="researcher")
        assert code == 403, answer   # another namespace: refused before anything is read

        # a hub that does not lead has no member sync: it makes a member client for the request
        follower = HubContext(store=env.hub.context.store, storage=env.hub.context.storage,
                              registry=env.hub.context.registry, settings=env.hub.context.settings,
                              metrics=env.hub.context.metrics)
        assert (await job_pods(follower, await env.api.get(NS, "j1")))["items"] == items

        # the member does not answer: 503 naming the cluster, not its address
        sim = env.fed.sims[CLUSTER]
        await sim.faults.start_outage(30, mode="refuse")
        try:
            code, body = await env.hub.request("GET", pods_url("j1"), who="researcher")
            assert (code, body["reason"]) == (503, "ServiceUnavailable"), body
            assert f"cluster {CLUSTER}, which holds trainingjob {NS}/j1, did not answer" in body["message"]
            no_secrets(env, body["message"])
            # describe still describes the job, and says what it could not read
            code, out, err = await env.hub.cli("researcher", "describe", "job", "j1")
            assert code == 0 and "  Member pods: cannot be read now: " in out and "did not answer" in out, err
            no_secrets(env, out)
        finally:
            await sim.faults.end_outage()
