"""deploy/member: the hub's and the fence agent's RBAC in a member cluster, exercised.

- Every scheduler overlay renders (real kubectl, offline) into an RBAC policy that grants each identity
  what it calls and nothing around it (a table per identity, kube's RBAC semantics: federator/sim/rbac.py),
  with the PodGroup kind of that scheduler's delegation adapter.
- A real hub whose member kubeconfig carries exactly the deploy/member identity (its token, minted with
  the kubectl commands of the README), against a simulated member that enforces the rendered RBAC, places,
  syncs and cleans up a job, and the member refused none of its requests.
- With one rule taken out (no delete of pods), the hub's cleanup is refused with 403 and the hub says so
  (a warning naming the refusal), instead of retrying silently.
- The fence agent, with the kubeconfig of its ConfigMap and the command line of its Deployment, fences
  against an enforcing member: the hub's pods and PodGroups go, its Event and Lease mark are written.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from federator.fencing.agent import FenceAgent, podgroup_kinds
from federator.apiserver.app import Principal
from federator.apiserver.auth import request_attributes
from federator.clusters.client import JOB_KIND_RESOURCES, podgroup_resource
from federator.fencing.hublease import FENCE_COUNT
from federator.delegation import ADAPTERS
from federator.delegation.adapter import LABEL_HUB
from federator.sim import kinds
from federator.sim.rbac import RbacPolicy, parse_policy, service_account_groups, service_account_user
from federator.sim.server import SimCluster

from ..controllers.jobtest_support import phase, wait_until
from ..controllers.lifecycle_support import RunningFederation, aimed_job, lifecycle_env
from .deploy_support import DEPLOY, KUBECTL, find, render

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(not Path(KUBECTL).is_file(), reason=f"kubectl is not installed ({KUBECTL})"),
]

MEMBER = DEPLOY / "member"
SYSTEM = "federator-system"
HUB_ACCOUNT = (SYSTEM, "federator-hub-access")
AGENT_ACCOUNT = (SYSTEM, "federator-agent")
HUB = Principal(service_account_user(*HUB_ACCOUNT), service_account_groups(SYSTEM))
AGENT = Principal(service_account_user(*AGENT_ACCOUNT), service_account_groups(SYSTEM))
#: managed namespaces of deploy/member/namespaces, and one that is not
MANAGED = ("default", "vision")
UNMANAGED = "team-a"
CLUSTER = "onprem-rdma-a100"   # jobtest_support.STANDARD: a Volcano member


def policy_of(scheduler: str) -> RbacPolicy:
    objects = render(MEMBER / "schedulers" / scheduler)
    return parse_policy(yaml.safe_dump_all(objects), source=f"deploy/member/schedulers/{scheduler}")


def allowed(policy: RbacPolicy, who: Principal, method: str, path: str, **query: str) -> bool:
    return policy.authorize(who, request_attributes(method, path, query))[0]


def _pg_path(group: str, version: str, namespace: str | None = None, name: str = "") -> str:
    base = f"/apis/{group}/{version}"
    path = f"{base}/namespaces/{namespace}/podgroups" if namespace else f"{base}/podgroups"
    return f"{path}/{name}" if name else path


def test_the_top_level_kustomization_is_the_volcano_overlay() -> None:
    assert render(MEMBER) == render(MEMBER / "schedulers" / "volcano")


@pytest.mark.parametrize("scheduler", sorted(ADAPTERS))
def test_each_overlay_grants_the_hub_what_it_calls_and_nothing_around_it(scheduler: str) -> None:
    policy = policy_of(scheduler)
    assert set(policy.service_accounts) == {HUB_ACCOUNT, AGENT_ACCOUNT}
    assert {"federator-system", "vision"} <= set(policy.namespaces)
    yes: list[tuple[str, str, dict[str, str]]] = [
        ("GET", "/api/v1/nodes", {}), ("GET", "/api/v1/nodes", {"watch": "true"}),        # snapshot reflector
        ("GET", "/api/v1/pods", {}), ("GET", "/api/v1/pods", {"watch": "true"}),          # every pod, all namespaces
        ("POST", f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases", {}),        # the fencing Lease
        ("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases/federator", {}),
        ("GET", "/readyz", {}),                                                            # the health probe
        ("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {}),                       # a job's PriorityClass
        ("GET", "/api/v1/services", {}), ("GET", "/api/v1/configmaps", {}),               # a gang's companions
        ("GET", "/api/v1/namespaces/vision/services", {}),
    ]
    no: list[tuple[str, str, dict[str, str]]] = [
        ("GET", "/api/v1/nodes/n1", {}), ("PATCH", "/api/v1/nodes/n1/status", {}),
        ("POST", "/api/v1/namespaces", {}), ("GET", f"/api/v1/namespaces/{UNMANAGED}", {}),
        ("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases/another-hub", {}),
        ("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases/federator", {}),
        ("GET", f"/api/v1/namespaces/{SYSTEM}/secrets", {}), ("GET", "/api/v1/secrets", {}),
        ("POST", "/api/v1/namespaces/vision/events", {}), ("POST", f"/api/v1/namespaces/{SYSTEM}/events", {}),
        ("GET", "/metrics", {}),
        ("GET", "/apis/scheduling.k8s.io/v1/priorityclasses/x", {}),
        ("PATCH", "/apis/scheduling.k8s.io/v1/priorityclasses/x", {}),
        ("DELETE", "/apis/scheduling.k8s.io/v1/priorityclasses/x", {}),
        ("GET", "/api/v1/services", {"watch": "true"}), ("GET", "/api/v1/secrets", {}),
        ("POST", f"/api/v1/namespaces/{UNMANAGED}/services", {}),
    ]
    # dispatch writes exactly the kinds of the scheduler's adapter (pods, and its PodGroup if it has one)
    for gvk in ADAPTERS[scheduler].gvk_list():
        base = f"/api/{gvk.version}" if not gvk.group else f"/apis/{gvk.group}/{gvk.version}"
        for namespace in MANAGED:
            collection = f"{base}/namespaces/{namespace}/{gvk.plural}"
            yes += [("POST", collection, {}), ("GET", f"{collection}/x", {}), ("DELETE", f"{collection}/x", {}),
                    ("GET", f"/api/v1/namespaces/{namespace}", {}),
                    ("GET", f"/api/v1/namespaces/{namespace}/pods/x/log", {})]   # a job's logs (joblogs.py)
            no += [("PATCH", f"{collection}/x", {}), ("PUT", f"{collection}/x", {}),
                   ("PUT", f"{collection}/x/status", {}), ("DELETE", collection, {})]
        unmanaged = f"{base}/namespaces/{UNMANAGED}/{gvk.plural}"
        no += [("POST", unmanaged, {}), ("DELETE", f"{unmanaged}/x", {}), ("GET", f"{unmanaged}/x", {}),
               ("GET", f"/api/v1/namespaces/{UNMANAGED}/pods/x/log", {}), ("GET", "/api/v1/nodes/n1/proxy", {})]
    # status sync, GC and job deletion list and watch the scheduler's PodGroups across namespaces
    own = podgroup_resource(scheduler)
    if own is not None:
        yes += [("GET", _pg_path(own.group, own.version), {}), ("GET", _pg_path(own.group, own.version), {"watch": "1"})]
    for kind in podgroup_kinds():
        if own is None or kind.group != own.group:
            no += [("GET", _pg_path(kind.group, kind.version), {}),
                   ("POST", _pg_path(kind.group, kind.version, "vision"), {})]
    # operator mode: member sync watches every upstream job kind the member serves; dispatch creates, resumes
    # (patch) and deletes the member copy of the copyable ones, in managed namespaces only
    for kind in JOB_KIND_RESOURCES.values():
        base = f"/apis/{kind.group}/{kind.version}"
        yes += [("GET", f"{base}/{kind.plural}", {}), ("GET", f"{base}/{kind.plural}", {"watch": "true"})]
        writes = [("POST", f"{base}/namespaces/{ns}/{kind.plural}") for ns in MANAGED]
        writes += [(verb, f"{base}/namespaces/{ns}/{kind.plural}/x") for ns in MANAGED
                   for verb in ("GET", "PATCH", "DELETE")]
        yes += [(m, p, {}) for m, p in writes] if kind.kind != "TrainJob" else []
        no += [(m, p, {}) for m, p in writes] if kind.kind == "TrainJob" else []
        no += [("POST", f"{base}/namespaces/{UNMANAGED}/{kind.plural}", {}),
               ("DELETE", f"{base}/namespaces/{UNMANAGED}/{kind.plural}/x", {}),
               ("PUT", f"{base}/namespaces/vision/{kind.plural}/x", {}),
               ("PATCH", f"{base}/namespaces/vision/{kind.plural}/x/status", {}),
               ("DELETE", f"{base}/namespaces/vision/{kind.plural}", {})]
    refused = [f"{m} {p} {q}" for m, p, q in yes if not allowed(policy, HUB, m, p, **q)]
    granted = [f"{m} {p} {q}" for m, p, q in no if allowed(policy, HUB, m, p, **q)]
    assert (refused, granted) == ([], [])


@pytest.mark.parametrize("scheduler", sorted(ADAPTERS))
def test_each_overlay_grants_the_agent_less_than_the_hub(scheduler: str) -> None:
    policy = policy_of(scheduler)
    own = podgroup_resource(scheduler)
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases"
    yes = [("GET", "/api/v1/pods"), ("GET", f"{lease}/federator"), ("PATCH", f"{lease}/federator"),
           ("POST", f"/api/v1/namespaces/{SYSTEM}/events"), ("PATCH", f"/api/v1/namespaces/{SYSTEM}/events/e")]
    yes += [("DELETE", f"/api/v1/namespaces/{ns}/pods/p") for ns in MANAGED]
    # the gangs' Services and ConfigMaps, swept with the pods
    yes += [("GET", "/api/v1/services"), ("GET", "/api/v1/configmaps")]
    yes += [("DELETE", f"/api/v1/namespaces/{ns}/{kind}/x") for ns in MANAGED for kind in ("services", "configmaps")]
    no = [("POST", "/api/v1/namespaces/vision/pods"), ("GET", "/api/v1/namespaces/vision/pods/p"),
          ("DELETE", f"/api/v1/namespaces/{UNMANAGED}/pods/p"), ("DELETE", f"/api/v1/namespaces/{SYSTEM}/pods/p"),
          ("GET", "/api/v1/nodes"), ("POST", lease), ("GET", f"{lease}/another-hub"),
          ("POST", "/api/v1/namespaces/vision/events"), ("GET", f"/api/v1/namespaces/{SYSTEM}/secrets"),
          ("POST", "/apis/scheduling.k8s.io/v1/priorityclasses"),
          ("POST", "/api/v1/namespaces/vision/services"), ("DELETE", f"/api/v1/namespaces/{UNMANAGED}/services/x")]
    if own is not None:
        yes += [("GET", _pg_path(own.group, own.version))]
        yes += [("DELETE", _pg_path(own.group, own.version, ns, "g")) for ns in MANAGED]
        no += [("POST", _pg_path(own.group, own.version, "vision")),
               ("DELETE", _pg_path(own.group, own.version, UNMANAGED, "g"))]
    # operator mode: the hub's member copies are swept first (list, delete in managed namespaces)
    for kind in JOB_KIND_RESOURCES.values():
        if kind.kind == "TrainJob":  # never copied
            continue
        base = f"/apis/{kind.group}/{kind.version}"
        yes += [("GET", f"{base}/{kind.plural}")] + [("DELETE", f"{base}/namespaces/{ns}/{kind.plural}/x")
                                                     for ns in MANAGED]
        no += [("POST", f"{base}/namespaces/vision/{kind.plural}"),
               ("PATCH", f"{base}/namespaces/vision/{kind.plural}/x"),
               ("DELETE", f"{base}/namespaces/{UNMANAGED}/{kind.plural}/x")]
    refused = [f"{m} {p}" for m, p in yes if not allowed(policy, AGENT, m, p)]
    granted = [f"{m} {p}" for m, p in no if allowed(policy, AGENT, m, p)]
    assert (refused, granted) == ([], [])
    assert not allowed(policy, AGENT, "GET", "/api/v1/pods", watch="true")


# ---------------------------------------------------------------- a hub with exactly this identity


async def mint_hub_kubeconfig(sim: SimCluster, directory: Path) -> Path:
    """The hub's kubeconfig of `sim`, made the way the README's "Member clusters" says (the token and CA
    come from the member's token Secret there; here from the simulator, which serves no Secrets). kubectl
    runs beside the loop: this kubectl may ask the server of the current context for its version."""
    ca = directory / f"{sim.name}-ca.crt"
    ca.write_bytes(sim.ca_pem)
    out = directory / f"{sim.name}-hub.kubeconfig"
    name = sim.name
    for args in (["set-cluster", name, "--server", sim.url, "--certificate-authority", str(ca), "--embed-certs"],
                 ["set-credentials", "federator-hub-access", "--token", sim.service_account_token(*HUB_ACCOUNT)],
                 ["set-context", name, "--cluster", name, "--user", "federator-hub-access"],
                 ["use-context", name]):
        kubectl = await asyncio.create_subprocess_exec(KUBECTL, "config", "--kubeconfig", str(out), *args,
                                                       stdout=asyncio.subprocess.DEVNULL,
                                                       stderr=asyncio.subprocess.PIPE)
        _, stderr = await asyncio.wait_for(kubectl.communicate(), 60)
        assert kubectl.returncode == 0, stderr.decode()
    out.chmod(0o600)
    return out


class MemberRbacFederation(RunningFederation):
    """Members that enforce `rbac`; the hub is registered with the deploy/member identity's kubeconfig."""

    async def hub_kubeconfig(self, name: str, sim: SimCluster) -> Path:
        return await mint_hub_kubeconfig(sim, self.workdir)


def forbidden_for(sim: SimCluster, who: Principal) -> dict[tuple[str, str], int]:
    return {(verb, what): n for (user, verb, what), n in sim.forbidden.items() if user == who.name}


async def _job_gone(env: Any, namespace: str, name: str) -> bool:
    try:
        await env.api.get(namespace, name)
    except Exception as e:  # the official client's ApiException
        assert getattr(e, "status", None) == 404, e
        return True
    return False


@pytest.mark.slow
async def test_a_hub_with_exactly_the_member_rbac_places_syncs_and_cleans_up(tmp_path: Path) -> None:
    fed = MemberRbacFederation(tmp_path / "members", run_seconds=None, rbac=policy_of("volcano"))
    async with lifecycle_env(tmp_path, [CLUSTER], federation=fed) as env:
        sim = env.fed.sims[CLUSTER]
        registered = yaml.safe_load((env.fed.workdir / f"{CLUSTER}-hub.kubeconfig").read_text())
        assert registered["users"][0]["name"] == "federator-hub-access"   # not the admin
        job = aimed_job("rbac-job", CLUSTER, namespace="vision")
        job["spec"]["priority"] = 100
        created = await env.api.submit(job)
        uid = created["metadata"]["uid"]
        await env.api.wait_job("vision", "rbac-job", lambda j: phase(j) == "Running", what="running")
        groups, pods = await env.fed.member_objects(CLUSTER, uid)
        assert len(groups) == 1 and len(pods) == 3
        # the job's priority went down: the hub created the member PriorityClass its pods and PodGroup name
        pc = await sim.storage.get(kinds.PRIORITY_CLASSES, namespace=None, name="federator-priority-100")
        assert (pc["value"], pc["preemptionPolicy"]) == (100, "Never")
        assert groups[0]["spec"]["priorityClassName"] == "federator-priority-100"
        assert {(p["spec"]["priorityClassName"], p["spec"]["priority"]) for p in pods} == {
            ("federator-priority-100", 100)}
        # and the GPU workers are pinned to the cluster's GPU model (the parameter server is not)
        pins = {p["metadata"]["labels"]["federator.dev/role"]: p["spec"].get("affinity", {}).get(
            "nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution") for p in pods}
        assert pins == {"ps": None, "worker": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}]}]}}
        lease = await sim.storage.get(kinds.LEASES, namespace=SYSTEM, name="federator")
        assert lease["spec"]["holderIdentity"] == "federator"   # created and renewed by the hub identity

        await env.api.delete("vision", "rbac-job")
        await wait_until(lambda: _job_gone(env, "vision", "rbac-job"), timeout=30, what="the job to be deleted")
        assert await env.fed.member_objects(CLUSTER, uid) == ([], [])
        # the member refused the hub nothing along the way
        assert forbidden_for(sim, HUB) == {}


@pytest.mark.slow
async def test_without_delete_on_pods_the_hubs_cleanup_is_refused_and_it_says_so(tmp_path: Path) -> None:
    objects = render(MEMBER / "schedulers" / "volcano")
    for role in (o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == "federator-hub-dispatch"):
        pods = next(r for r in role["rules"] if r["resources"] == ["pods"])
        pods["verbs"].remove("delete")
    fed = MemberRbacFederation(tmp_path / "members", run_seconds=None,
                               rbac=parse_policy(yaml.safe_dump_all(objects)))
    async with lifecycle_env(tmp_path, [CLUSTER], federation=fed) as env:
        sim = env.fed.sims[CLUSTER]
        created = await env.api.submit(aimed_job("stuck-job", CLUSTER, namespace="vision"))
        uid = created["metadata"]["uid"]
        await env.api.wait_job("vision", "stuck-job", lambda j: phase(j) == "Running", what="running")
        with structlog.testing.capture_logs() as logs:
            await env.api.delete("vision", "stuck-job")

            def refusal() -> dict[str, Any] | None:
                return next((r for r in logs if r["event"].startswith("the member's RBAC does not let the hub "
                                                                      "delete its objects there")), None)

            line = await wait_until(refusal, timeout=30, what="the hub to say the member refused its deletes")
        assert line["log_level"] == "warning" and line["cluster"] == CLUSTER
        assert 'cannot delete resource "pods" in API group "" in the namespace "vision"' in line["error"]
        assert "403 Forbidden" in line["error"]
        # the job waits (finalizer) and its pods are still there: nothing was lost silently
        job = await env.api.get("vision", "stuck-job")
        assert job["metadata"].get("deletionTimestamp")
        _, pods = await env.fed.member_objects(CLUSTER, uid)
        assert len(pods) == 3
        assert forbidden_for(sim, HUB).get(("delete", "pods"), 0) >= 3


@pytest.mark.slow
async def test_a_member_that_refuses_priority_classes_gets_the_gang_without_one(tmp_path: Path) -> None:
    objects = render(MEMBER / "schedulers" / "volcano")
    for role in (o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "federator-hub-access"):
        role["rules"] = [r for r in role["rules"] if r["resources"] != ["priorityclasses"]]
    fed = MemberRbacFederation(tmp_path / "members", run_seconds=None,
                               rbac=parse_policy(yaml.safe_dump_all(objects)))
    async with lifecycle_env(tmp_path, [CLUSTER], federation=fed) as env:
        sim = env.fed.sims[CLUSTER]
        job = aimed_job("old-rbac", CLUSTER, namespace="vision")
        job["spec"]["priority"] = 100
        with structlog.testing.capture_logs() as logs:
            created = await env.api.submit(job)
            await env.api.wait_job("vision", "old-rbac", lambda j: phase(j) == "Running", what="running")
        refusals = [r for r in logs if r["event"].startswith("the member refuses to create the job's PriorityClass")]
        assert len(refusals) == 1 and refusals[0]["log_level"] == "warning" and refusals[0]["code"] == 403
        groups, pods = await env.fed.member_objects(CLUSTER, created["metadata"]["uid"])
        assert "priorityClassName" not in groups[0]["spec"]
        assert {(p["spec"].get("priorityClassName"), p["spec"]["priority"]) for p in pods} == {(None, 0)}
        # refused once per dispatch attempt: a loaded machine can time out a member create and dispatch again
        refused = forbidden_for(sim, HUB)
        assert set(refused) == {("create", "priorityclasses.scheduling.k8s.io")} and refused[
            ("create", "priorityclasses.scheduling.k8s.io")] >= 1, refused


# ---------------------------------------------------------------- the fence agent, as deployed


def _agent_settings(objects: list[dict[str, Any]]) -> argparse.Namespace:
    from federator.cli import build_parser

    deployment = find(objects, "Deployment", "federator-agent")
    assert deployment is not None
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    parsed: argparse.Namespace = build_parser().parse_args(container["args"])
    return parsed


async def test_the_fence_agent_with_its_rbac_and_kubeconfig_fences(tmp_path: Path) -> None:
    from federator.sim.profile import parse_profile

    objects = render(MEMBER / "schedulers" / "volcano")
    policy = parse_policy(yaml.safe_dump_all(objects))
    profile = parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": "fenced",
        "location": {"type": "on-prem", "region": "lab"}, "network": {"fabric": "infiniband", "bandwidthGbps": 200},
        "schedulers": [{"type": "default"}, {"type": "volcano"}],
        "kubelet": {"startDelaySeconds": 0.05, "terminationSeconds": 0.05},
        "nodePools": [{"name": "cpu", "count": 1, "cpu": "32", "memory": "128Gi"}],
    }, source="tests/deploy")
    sim = SimCluster(profile, rbac=policy)
    await sim.start()
    agent: FenceAgent | None = None
    try:
        # the kubeconfig of the agent's ConfigMap, with the pod's mounted CA and token files standing in
        config_map = find(objects, "ConfigMap", "federator-agent-kubeconfig")
        assert config_map is not None
        kubeconfig = yaml.safe_load(config_map["data"]["kubeconfig"])
        mounted = {"/var/run/secrets/kubernetes.io/serviceaccount/ca.crt": sim.ca_pem,
                   "/var/run/secrets/kubernetes.io/serviceaccount/token": sim.service_account_token(
                       *AGENT_ACCOUNT).encode()}
        cluster, user = kubeconfig["clusters"][0]["cluster"], kubeconfig["users"][0]["user"]
        assert {cluster["certificate-authority"], user["tokenFile"]} == set(mounted)
        for path, content in mounted.items():
            (tmp_path / Path(path).name).write_bytes(content)
        cluster["certificate-authority"] = str(tmp_path / "ca.crt")
        user["tokenFile"] = str(tmp_path / "token")
        assert cluster["server"] == "https://kubernetes.default.svc"
        cluster["server"] = sim.url
        path = tmp_path / "agent.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig))

        # what a hub left: its Lease (1 s), and a gang in a managed namespace
        await sim.storage.create(kinds.LEASES, {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "federator"},
            "spec": {"holderIdentity": "federator", "leaseDurationSeconds": 1,
                     "renewTime": "2026-01-01T00:00:00.000000Z"}}, namespace=SYSTEM)
        labels = {LABEL_HUB: "federator"}
        await sim.storage.create(kinds.VOLCANO_PODGROUPS, {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "labels": labels}, "spec": {"minMember": 1}}, namespace="vision")
        for name in ("p0", "p1"):
            await sim.storage.create(kinds.PODS, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]}},
                namespace="vision")

        settings = _agent_settings(objects)
        now = [0.0]
        agent = await FenceAgent.from_kubeconfig(path, hub_identity=settings.hub_identity,
                                                 namespace=settings.namespace, poll_seconds=1.0)
        agent.clock = lambda: now[0]
        assert (await agent.step()).state == "held"
        now[0] += 1.5   # the Lease unchanged for longer than its duration, on the agent's clock
        result = await agent.step()
        assert (result.state, result.pods_deleted, result.podgroups_deleted) == ("expired", 2, 1)
        assert (await sim.storage.list(kinds.PODS, namespace="vision")).items == [] or all(
            p["metadata"].get("deletionTimestamp")
            for p in (await sim.storage.list(kinds.PODS, namespace="vision")).items)
        events = (await sim.storage.list(kinds.EVENTS, namespace=SYSTEM)).items
        assert [e["reason"] for e in events] == ["HubLeaseExpired"]
        lease = await sim.storage.get(kinds.LEASES, namespace=SYSTEM, name="federator")
        assert lease["metadata"]["annotations"][FENCE_COUNT] == "1"
        # refused: only the lists of the other schedulers' PodGroup kinds (skipped, as not served)
        others = {f"podgroups.{k.group}" for k in podgroup_kinds() if k.group != "scheduling.volcano.sh"}
        assert set(forbidden_for(sim, AGENT)) == {("list", key) for key in others}
    finally:
        if agent is not None:
            await agent.close()
        await sim.stop()
