"""The simulator's RBAC (federator/sim/rbac.py): kube's RBAC decisions over Role/ClusterRole/bindings YAML,
kube's 403 wording over HTTPS (official client and kubectl), malformed and hostile policy files refused with
one clear error, and `federator sim --rbac` (bad input: one line, exit 2, nothing started or written)."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from simapi_support import TEST_PROFILE, make_test_profile

from federator.apiserver.app import Principal
from federator.apiserver.auth import request_attributes
from federator.clusters.client import PODS, MemberApiError, MemberClient
from federator.sim.rbac import MAX_POLICY_BYTES, PolicyError, load_policy, parse_policy, service_account_groups, \
    service_account_user
from federator.sim.server import SimCluster

FEDERATOR = [str(Path(sys.executable).parent / "federator")]
KUBECTL = "/usr/bin/kubectl"

POLICY = """
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: robot, namespace: ops}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules:
  - {apiGroups: [""], resources: [nodes, pods], verbs: [list]}
  - {apiGroups: [""], resources: [pods/status], verbs: [get]}
  - {nonResourceURLs: ["/metrics", "/debug/*"], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects:
  - {kind: ServiceAccount, name: robot, namespace: ops}
  - {kind: Group, name: auditors, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: writer, namespace: team-a}
rules:
  - {apiGroups: [""], resources: [pods], verbs: [create, delete, watch]}
  - {apiGroups: [scheduling.volcano.sh], resources: [podgroups], verbs: ["*"]}
  - {apiGroups: [coordination.k8s.io], resources: [leases], resourceNames: [federator], verbs: [get, patch]}
  - {apiGroups: ["*"], resources: ["*/scale"], verbs: [update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: writer, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: writer}
subjects:
  - {kind: ServiceAccount, name: robot, namespace: ops}
  - {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
---
# a ClusterRole granted in one namespace only
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: events, namespace: team-b}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: event-maker}
subjects:
  - {kind: ServiceAccount, name: local}   # no namespace: the binding's (team-b)
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: event-maker}
rules:
  - {apiGroups: [""], resources: [events], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dangling, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: does-not-exist}
subjects:
  - {kind: User, name: carol, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ignored, namespace: team-a}
spec: {}
"""

ROBOT = Principal(service_account_user("ops", "robot"), service_account_groups("ops"))
LOCAL = Principal(service_account_user("team-b", "local"), service_account_groups("team-b"))
ALICE = Principal("alice", ("system:authenticated",))
AUDITOR = Principal("dan", ("auditors", "system:authenticated"))
CAROL = Principal("carol", ("system:authenticated",))
ADMIN = Principal("root", ("system:masters",))
NOBODY = Principal("nobody", ("system:authenticated",))


def decide(who: Principal, method: str, path: str, **query: str) -> tuple[bool, str]:
    return parse_policy(POLICY).authorize(who, request_attributes(method, path, query))


@pytest.mark.parametrize(("who", "method", "path", "query", "allowed"), [
    # cluster-wide reads from the ClusterRoleBinding; list and watch are separate verbs
    (ROBOT, "GET", "/api/v1/pods", {}, True),
    (ROBOT, "GET", "/api/v1/namespaces/elsewhere/pods", {}, True),
    (ROBOT, "GET", "/api/v1/pods", {"watch": "true"}, False),
    (ROBOT, "GET", "/api/v1/namespaces/team-a/pods", {"watch": "1"}, True),   # the Role has watch in team-a
    (ROBOT, "GET", "/api/v1/namespaces/team-b/pods", {"watch": "1"}, False),
    (ROBOT, "GET", "/api/v1/nodes", {}, True),
    (ROBOT, "GET", "/api/v1/nodes/n1", {}, False),                          # get is not list
    (ROBOT, "GET", "/api/v1/namespaces/team-a/pods/p", {}, False),
    # subresources: pods/status is its own resource; "*/scale" matches any resource's scale
    (ROBOT, "GET", "/api/v1/namespaces/x/pods/p/status", {}, True),
    (ROBOT, "PUT", "/api/v1/namespaces/x/pods/p/status", {}, False),
    (ROBOT, "PUT", "/apis/apps/v1/namespaces/team-a/deployments/d/scale", {}, True),
    (ROBOT, "PUT", "/apis/apps/v1/namespaces/team-a/deployments/d", {}, False),
    # the Role: only in its namespace
    (ROBOT, "POST", "/api/v1/namespaces/team-a/pods", {}, True),
    (ROBOT, "POST", "/api/v1/namespaces/team-b/pods", {}, False),
    (ROBOT, "DELETE", "/api/v1/namespaces/team-a/pods/p", {}, True),
    (ROBOT, "DELETE", "/api/v1/namespaces/team-a/pods", {}, False),          # deletecollection is its own verb
    (ROBOT, "PATCH", "/api/v1/namespaces/team-a/pods/p", {}, False),
    # apiGroups: the verb "*" on the group's podgroups only
    (ROBOT, "PATCH", "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups/g", {}, True),
    (ROBOT, "PATCH", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups/g", {}, False),
    # resourceNames: the named object only, and never a request without a name
    (ROBOT, "GET", "/apis/coordination.k8s.io/v1/namespaces/team-a/leases/federator", {}, True),
    (ROBOT, "PATCH", "/apis/coordination.k8s.io/v1/namespaces/team-a/leases/federator", {}, True),
    (ROBOT, "GET", "/apis/coordination.k8s.io/v1/namespaces/team-a/leases/other", {}, False),
    (ROBOT, "GET", "/apis/coordination.k8s.io/v1/namespaces/team-a/leases", {}, False),
    # nonResourceURLs: exact and prefix*, ClusterRoleBindings only
    (ROBOT, "GET", "/metrics", {}, True),
    (ROBOT, "GET", "/debug/pprof/heap", {}, True),
    (ROBOT, "POST", "/metrics", {}, False),
    (ROBOT, "GET", "/metricsx", {}, False),
    # users and groups
    (ALICE, "POST", "/api/v1/namespaces/team-a/pods", {}, True),
    (ALICE, "GET", "/api/v1/pods", {}, False),
    (AUDITOR, "GET", "/api/v1/pods", {}, True),
    (AUDITOR, "POST", "/api/v1/namespaces/team-a/pods", {}, False),
    # a ClusterRole through a RoleBinding: that namespace only; an SA subject without namespace is the binding's
    (LOCAL, "POST", "/api/v1/namespaces/team-b/events", {}, True),
    (LOCAL, "POST", "/api/v1/namespaces/team-a/events", {}, False),
    # system:masters may do everything; kube's bootstrap policy: discovery and probes for everyone
    (ADMIN, "DELETE", "/api/v1/nodes/n1", {}, True),
    (NOBODY, "GET", "/readyz", {}, True),
    (NOBODY, "GET", "/apis/scheduling.volcano.sh/v1beta1", {}, True),
    (NOBODY, "GET", "/version", {}, True),
    (NOBODY, "GET", "/api/v1/pods", {}, False),
    (NOBODY, "POST", "/api", {}, False),
])
def test_kube_rbac_decisions(who: Principal, method: str, path: str, query: dict[str, str], allowed: bool) -> None:
    assert decide(who, method, path, **query)[0] is allowed


def test_a_role_in_namespace_x_covers_the_namespace_object_x() -> None:
    # kube's RequestInfo puts GET /api/v1/namespaces/X in namespace X: deploy/member relies on it
    policy = parse_policy(POLICY.replace("resources: [pods], verbs: [create, delete, watch]",
                                         "resources: [pods, namespaces], verbs: [get]"))
    assert policy.authorize(ROBOT, request_attributes("GET", "/api/v1/namespaces/team-a", {}))[0]
    assert not policy.authorize(ROBOT, request_attributes("GET", "/api/v1/namespaces/team-b", {}))[0]
    assert not policy.authorize(ROBOT, request_attributes("GET", "/api/v1/namespaces", {}))[0]


def test_denials_use_kube_apiservers_words() -> None:
    user = 'User "system:serviceaccount:ops:robot"'
    assert decide(ROBOT, "GET", "/api/v1/namespaces/x/pods/p")[1] == \
        f'{user} cannot get resource "pods" in API group "" in the namespace "x"'
    assert decide(ROBOT, "GET", "/api/v1/nodes/n1")[1] == \
        f'{user} cannot get resource "nodes" in API group "" at the cluster scope'
    assert decide(ROBOT, "GET", "/api/v1/pods", watch="true")[1] == \
        f'{user} cannot watch resource "pods" in API group "" at the cluster scope'
    assert decide(ROBOT, "PUT", "/api/v1/namespaces/x/pods/p/status")[1] == \
        f'{user} cannot update resource "pods/status" in API group "" in the namespace "x"'
    assert decide(ROBOT, "DELETE", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups/g")[1] == \
        f'{user} cannot delete resource "podgroups" in API group "scheduling.x-k8s.io" in the namespace "team-a"'
    assert decide(NOBODY, "GET", "/metrics")[1] == 'User "nobody" cannot get path "/metrics"'
    # a binding whose role is missing grants nothing, and the denial says why, as kube's does
    assert decide(CAROL, "GET", "/api/v1/namespaces/team-a/pods")[1] == (
        'User "carol" cannot list resource "pods" in API group "" in the namespace "team-a": '
        'RBAC: role.rbac.authorization.k8s.io "does-not-exist" not found')


def test_the_file_gives_namespaces_and_service_accounts() -> None:
    policy = parse_policy(POLICY)
    assert policy.namespaces == ("team-a",)
    assert policy.service_accounts == (("ops", "robot"), ("team-b", "local"))


def _rbac(kind: str, body: dict[str, Any], *, name: str = "x", namespace: str | None = "team-a") -> str:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None and kind in ("Role", "RoleBinding"):
        meta["namespace"] = namespace
    return yaml.safe_dump({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, **body})


_REF = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"}
_SA = {"kind": "ServiceAccount", "name": "robot", "namespace": "ops"}


@pytest.mark.parametrize(("text", "message"), [
    ("", "no Role, ClusterRole, RoleBinding or ClusterRoleBinding"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "no Role, ClusterRole"),
    ("kind: Role\n  bad: [indent\n", "not valid YAML (line"),
    ("- just\n- a list\n", "document 1: not a mapping"),
    ("apiVersion: v1\nkind: List\nitems: []\n", "kind List is not supported"),
    ("apiVersion: v1\nmetadata: {name: x}\n", "kind is missing"),
    (_rbac("Role", {"rules": []}).replace("rbac.authorization.k8s.io/v1", "rbac.authorization.k8s.io/v1beta1"),
     "apiVersion must be rbac.authorization.k8s.io/v1"),
    (_rbac("Role", {"rules": []}, namespace=None), "metadata.namespace is required"),
    (_rbac("Role", {"rules": []}, name="Not_A_Name"), "metadata.name 'Not_A_Name' is not a valid name"),
    (_rbac("ClusterRole", {"rules": []}, name="reader\n"), "metadata.name 'reader\\n' is not a valid name"),
    (_rbac("Role", {"rules": []}, namespace="team-a\n"), "metadata.namespace 'team-a\\n' is not a valid"),
    (_rbac("ClusterRoleBinding", {"roleRef": _REF, "subjects": [{**_SA, "name": "robot\n"}]}),
     "subjects[0].name: Invalid value: 'robot\\n'"),
    (_rbac("ClusterRole", {"rules": "everything"}), "rules must be a list, not a string"),
    (_rbac("ClusterRole", {"rules": [{"apiGroups": [""], "resources": ["pods"]}]}),
     "rules[0].verbs: Required value"),
    (_rbac("ClusterRole", {"rules": [{"verbs": ["get"], "resources": ["pods"]}]}), "rules[0].apiGroups: Required"),
    (_rbac("ClusterRole", {"rules": [{"verbs": ["get"], "apiGroups": [""]}]}), "rules[0].resources: Required"),
    (_rbac("ClusterRole", {"rules": [{"verbs": [1], "apiGroups": [""], "resources": ["pods"]}]}),
     "rules[0].verbs: must be a list of strings"),
    (_rbac("ClusterRole", {"rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "x": 1}]}),
     "rules[0]: unknown field 'x'"),
    (_rbac("ClusterRole", {"rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"],
                                      "nonResourceURLs": ["/x"]}]}), "both regular resources and non-resource"),
    (_rbac("Role", {"rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"]}]}),
     "namespaced rules cannot apply to non-resource URLs"),
    (_rbac("ClusterRole", {"aggregationRule": {"clusterRoleSelectors": []}}), "aggregationRule is not supported"),
    (_rbac("ClusterRoleBinding", {"subjects": [_SA]}), "roleRef is required"),
    (_rbac("ClusterRoleBinding", {"roleRef": {**_REF, "kind": "Role"}, "subjects": [_SA]}),
     "roleRef.kind must be ClusterRole, not 'Role'"),
    (_rbac("RoleBinding", {"roleRef": {**_REF, "apiGroup": "rbac"}}), "roleRef.apiGroup must be"),
    (_rbac("ClusterRoleBinding", {"roleRef": _REF, "subjects": [{"kind": "ServiceAccount", "name": "robot"}]}),
     "subjects[0].namespace: Required value"),
    (_rbac("ClusterRoleBinding", {"roleRef": _REF, "subjects": [{"kind": "Robot", "name": "r"}]}),
     "subjects[0].kind: Unsupported value: 'Robot'"),
    (_rbac("ClusterRoleBinding", {"roleRef": _REF, "subjects": [{"kind": "User", "name": "alice"}]}),
     "subjects[0].apiGroup: Unsupported value"),
    (_rbac("ClusterRoleBinding", {"roleRef": _REF, "subjects": "alice"}), "subjects must be a list"),
    (_rbac("ClusterRole", {"rules": []}) + "---\n" + _rbac("ClusterRole", {"rules": []}),
     "ClusterRole x): defined twice (also document 1)"),
    # hostile: a deep nest, an alias bomb in a field the loader never walks, and nothing else to grant
    ("a: " + "[" * 2000 + "]" * 2000 + "\n", "not valid YAML"),
    ("a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\nkind: Thing\n", "no Role, ClusterRole"),
])
def test_malformed_policies_are_refused_with_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, source="rbac.yaml")
    assert str(raised.value).startswith("rbac.yaml: ")
    assert message in str(raised.value)


def test_files_that_cannot_be_a_policy(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read it"):
        load_policy(tmp_path / "missing.yaml")
    with pytest.raises(PolicyError, match="not a regular file"):
        load_policy(tmp_path)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"kind: Role\n\xff\xfe")
    with pytest.raises(PolicyError, match=r"not UTF-8 \(byte 11\)"):
        load_policy(binary)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_POLICY_BYTES + 1))
    with pytest.raises(PolicyError, match="larger than"):
        load_policy(big)


# ---------------------------------------------------------------- over HTTPS


async def test_a_cluster_enforces_its_policy_with_kubes_status(tmp_path: Path) -> None:
    policy = parse_policy(POLICY)
    cluster = SimCluster(make_test_profile(name="rbac-lab"), rbac=policy, run_controllers=False)
    await cluster.start()
    try:
        robot_config = cluster.write_service_account_kubeconfig(tmp_path / "robot.kubeconfig", namespace="ops",
                                                                name="robot")
        admin_config = cluster.write_kubeconfig(tmp_path / "admin.kubeconfig")
        robot = await MemberClient.from_kubeconfig(robot_config, cluster="rbac-lab")
        admin = await MemberClient.from_kubeconfig(admin_config, cluster="rbac-lab")
        try:
            # the policy's Namespace exists; the robot may create there and list everywhere
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
            await robot.create(PODS, pod, namespace="team-a")
            assert [p["metadata"]["name"] for p in (await robot.list(PODS)).items] == ["p"]
            await robot.probe()  # /readyz: every authenticated user
            with pytest.raises(MemberApiError) as refused:
                await robot.create(PODS, pod, namespace="default")
            assert refused.value.code == 403 and refused.value.reason == "Forbidden"
            assert refused.value.message == ('pods is forbidden: User "system:serviceaccount:ops:robot" cannot '
                                             'create resource "pods" in API group "" in the namespace "default"')
            # nothing was created, and the admin (system:masters) is not bound by the policy
            assert (await admin.list(PODS, namespace="default")).items == []
            await admin.create(PODS, pod, namespace="default")
        finally:
            await robot.close()
            await admin.close()
        # the body is kube-apiserver's Status, and kubectl prints it as it prints kube's
        ssl_context = ssl.create_default_context(cadata=cluster.ca_pem.decode())
        token = cluster.service_account_token("ops", "robot")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{cluster.url}/apis/scheduling.volcano.sh/v1beta1/namespaces/team-b/podgroups/g",
                                   ssl=ssl_context, headers={"Authorization": f"Bearer {token}"}) as response:
                assert response.status == 403 and response.content_type == "application/json"
                assert await response.json() == {
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 403,
                    "reason": "Forbidden",
                    "message": 'podgroups.scheduling.volcano.sh "g" is forbidden: User '
                               '"system:serviceaccount:ops:robot" cannot get resource "podgroups" in API group '
                               '"scheduling.volcano.sh" in the namespace "team-b"',
                    "details": {"name": "g", "group": "scheduling.volcano.sh", "kind": "podgroups"}}
        kubectl = await asyncio.create_subprocess_exec(
            KUBECTL, "--kubeconfig", str(robot_config), "-n", "team-a", "get", "pod", "p",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, stderr = await asyncio.wait_for(kubectl.communicate(), 60)
        assert kubectl.returncode == 1
        assert stderr.decode().strip().endswith(
            'Error from server (Forbidden): pods "p" is forbidden: User "system:serviceaccount:ops:robot" cannot '
            'get resource "pods" in API group "" in the namespace "team-a"')
        # the admin side counts what RBAC refused (bounded: user, verb, resource)
        stats = cluster.stats()["forbidden"]
        robot_user = "system:serviceaccount:ops:robot"
        assert {"user": robot_user, "verb": "create", "resource": "pods", "count": 1} in stats
        assert {"user": robot_user, "verb": "get", "resource": "pods", "count": 1} in stats
        assert {"user": robot_user, "verb": "get", "resource": "podgroups.scheduling.volcano.sh", "count": 1} in stats
    finally:
        await cluster.stop()


# ---------------------------------------------------------------- federator sim --rbac


def _profile(tmp_path: Path) -> Path:
    path = tmp_path / "alpha.yaml"
    path.write_text(yaml.safe_dump(dict(TEST_PROFILE, name="alpha")))
    return path


@pytest.mark.parametrize(("policy", "extra", "message"), [
    ("kind: Role\n  bad: [indent\n", [], "--rbac: RBAC file {file}: not valid YAML"),
    (POLICY, ["--hub-service-account", "ops/nobody"],
     "--hub-service-account ops/nobody: {file} names no such ServiceAccount (it names: ops/robot, team-b/local)"),
    (POLICY, ["--hub-service-account", "ops/robot", "--agent-service-account", "robot"],
     "--agent-service-account 'robot': expected NAMESPACE/NAME"),
    (None, ["--hub-service-account", "ops/robot"], "--hub-service-account needs --rbac FILE"),
])
def test_sim_rbac_bad_input_is_one_line_and_starts_nothing(tmp_path: Path, policy: str | None, extra: list[str],
                                                           message: str) -> None:
    file = tmp_path / "rbac.yaml"
    args = [*FEDERATOR, "sim", "--profile", str(_profile(tmp_path)), "--state-dir", str(tmp_path / "state"), *extra]
    if policy is not None:
        file.write_text(policy)
        args += ["--rbac", str(file)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message.format(file=file) in lines[0], done.stderr
    assert not (tmp_path / "state").exists()  # no cluster started, nothing written


async def test_sim_serve_with_rbac_registers_the_hub_service_account(tmp_path: Path) -> None:
    from federator.cli.sim import RbacAccess, serve

    policy = parse_policy(POLICY)
    access = RbacAccess(policy=policy, hub=("ops", "robot"), agent=("team-b", "local"))
    ready, stop = asyncio.Event(), asyncio.Event()
    state = tmp_path / "state"
    task = asyncio.create_task(serve([make_test_profile(name="alpha")], state_dir=state, port_base=None,
                                     ready=ready, stop=stop, rbac=access))
    try:
        await asyncio.wait_for(ready.wait(), 30)
        entry = json.loads((state / "clusters.json").read_text())["clusters"][0]
        registration = yaml.safe_load(Path(entry["registration"]).read_text())
        hub_config = Path(registration["spec"]["connection"]["kubeconfigPath"])
        assert hub_config == Path(entry["rbac"]["hubKubeconfig"]) == state / "alpha-sa-ops-robot.kubeconfig"
        assert hub_config.stat().st_mode & 0o077 == 0
        hub = await MemberClient.from_kubeconfig(hub_config, cluster="alpha")
        agent = await MemberClient.from_kubeconfig(entry["agentKubeconfig"], cluster="alpha")
        try:
            assert (await hub.list(PODS)).items is not None            # the robot may list pods
            with pytest.raises(MemberApiError) as refused:
                await agent.list(PODS)                                  # team-b/local may not
            assert 'User "system:serviceaccount:team-b:local" cannot list' in refused.value.message
        finally:
            await hub.close()
            await agent.close()
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0
