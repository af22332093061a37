"""The checks of deploy_support on bad objects: each rule that test_manifests.py relies on fails on
an object that breaks it (and the good prod render passes them all), so a green test_manifests.py
means something."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .deploy_support import (
    DEPLOY,
    KUBECTL,
    REPO,
    container_env,
    etcd_problems,
    expand,
    federator_command_problems,
    find,
    hub_problems,
    image_repository,
    pod_security_problems,
    reference_problems,
    render,
    schema_problems,
)

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(not Path(KUBECTL).is_file(), reason=f"kubectl is not installed ({KUBECTL})"),
]

ENTRYPOINT = ["federator"]
#: a few flags of etcd --help, enough for these objects (test_manifests.py uses the real list)
ETCD_FLAGS = frozenset({
    "name", "data-dir", "listen-client-urls", "advertise-client-urls", "listen-peer-urls",
    "initial-advertise-peer-urls", "initial-cluster", "initial-cluster-state", "initial-cluster-token",
    "listen-metrics-urls", "auto-compaction-mode", "auto-compaction-retention", "quota-backend-bytes",
    "client-cert-auth", "trusted-ca-file", "cert-file", "key-file", "peer-client-cert-auth", "peer-trusted-ca-file",
    "peer-cert-file", "peer-key-file",
})

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def prod() -> list[Obj]:
    return render(DEPLOY / "overlays" / "prod")


def _objects(prod: list[Obj]) -> list[Obj]:
    return copy.deepcopy(prod)


def _hub(objects: list[Obj]) -> Obj:
    found = find(objects, "Deployment", "federator-hub")
    assert found is not None
    return found


def _etcd(objects: list[Obj]) -> Obj:
    found = find(objects, "StatefulSet", "etcd")
    assert found is not None
    return found


def _container(obj: Obj) -> Obj:
    first: Obj = obj["spec"]["template"]["spec"]["containers"][0]
    return first


def _drop_mount(container: Obj, name: str) -> None:
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != name]


def _set_arg(container: Obj, prefix: str, new: str) -> None:
    args: list[str] = container["args"]
    index = next(i for i, a in enumerate(args) if a.startswith(prefix))
    args[index] = new


def _settings(objects: list[Obj]) -> Obj:
    return next(o for o in objects if o["metadata"]["name"].startswith("federator-hub-settings"))


def test_the_prod_render_passes_every_check(prod: list[Obj]) -> None:
    objects = _objects(prod)
    assert [p for o in objects for p in schema_problems(o)] == []
    assert [p for o in objects for p in pod_security_problems(o)] == []
    assert reference_problems(objects) == []
    assert federator_command_problems(_hub(objects), objects, entrypoint=ENTRYPOINT) == []
    assert hub_problems(_hub(objects)) == []
    assert etcd_problems(_etcd(objects), objects, help_flags=ETCD_FLAGS) == []


# ---------------------------------------------------------------- schemas


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d["spec"].update(replicas="two"), "spec.replicas: 'two' is not of type"),
    (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(securityContex={}), "securityContex"),
    (lambda d: d["spec"].pop("selector"), "'selector' is a required property"),
    (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(ports=[{"containerPort": "https"}]),
     "containerPort"),
    (lambda d: d.update(apiVersion="apps/v1beta9"), "Couldn't find schema"),
    (lambda d: d.update(kind="Deploymnet"), "Couldn't find schema"),
    (lambda d: d.pop("kind"), "no apiVersion or kind"),
])
def test_an_object_that_breaks_its_schema_fails(prod: list[Obj], mutate: Callable[[Obj], Any],
                                                expected: str) -> None:
    hub = _hub(_objects(prod))
    mutate(hub)
    problems = schema_problems(hub)
    assert any(expected in p for p in problems), problems


def test_our_kinds_are_validated_against_crds() -> None:
    job = yaml.safe_load((REPO / "examples" / "resnet-ps.yaml").read_text(encoding="utf-8"))
    assert schema_problems(job) == []
    bad = copy.deepcopy(job)
    bad["spec"]["roles"][0]["replicas"] = "many"
    problems = schema_problems(bad)
    assert any("replicas" in p and "crds/ schema" in p for p in problems), problems
    assert schema_problems({**job, "apiVersion": "federator.dev/v9"}) != []


# ---------------------------------------------------------------- pod security


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda p, c: c["securityContext"].update(readOnlyRootFilesystem=False), "readOnlyRootFilesystem"),
    (lambda p, c: c["securityContext"].pop("readOnlyRootFilesystem"), "readOnlyRootFilesystem"),
    (lambda p, c: c["securityContext"].update(runAsUser=0), "runAsUser"),
    (lambda p, c: (c["securityContext"].pop("runAsUser"), p["securityContext"].pop("runAsUser")), "runAsUser"),
    (lambda p, c: c["securityContext"].update(runAsNonRoot=False), "runAsNonRoot"),
    (lambda p, c: c["securityContext"].update(allowPrivilegeEscalation=True), "allowPrivilegeEscalation"),
    (lambda p, c: c["securityContext"].update(privileged=True), "privileged"),
    (lambda p, c: c["securityContext"]["capabilities"].update(drop=["NET_RAW"]), "drop ALL"),
    (lambda p, c: c["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]), "capabilities add"),
    (lambda p, c: (c["securityContext"].pop("seccompProfile"), p["securityContext"].pop("seccompProfile")),
     "seccompProfile"),
    (lambda p, c: c["securityContext"].update(seccompProfile={"type": "Unconfined"}), "seccompProfile"),
    (lambda p, c: c["resources"].pop("limits"), "no limits"),
    (lambda p, c: c["resources"]["requests"].pop("memory"), "no requests for memory"),
    (lambda p, c: p.update(hostNetwork=True), "hostNetwork"),
    (lambda p, c: p["volumes"].append({"name": "root", "hostPath": {"path": "/"}}), "hostPath"),
])
def test_a_workload_that_breaks_the_security_rules_fails(prod: list[Obj], mutate: Callable[[Obj, Obj], Any],
                                                         expected: str) -> None:
    hub = _hub(_objects(prod))
    mutate(hub["spec"]["template"]["spec"], _container(hub))
    problems = pod_security_problems(hub)
    assert any(expected in p for p in problems), problems


def test_an_init_container_is_held_to_the_same_rules(prod: list[Obj]) -> None:
    hub = _hub(_objects(prod))
    hub["spec"]["template"]["spec"]["initContainers"] = [{"name": "setup", "image": "busybox"}]
    problems = pod_security_problems(hub)
    assert any("container setup: readOnlyRootFilesystem" in p for p in problems), problems


# ---------------------------------------------------------------- the federator command line


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda c, s: c["args"].append("--no-such-flag"), "unrecognized arguments: --no-such-flag"),
    (lambda c, s: c["args"].__setitem__(0, "upp"), "invalid choice: 'upp'"),
    (lambda c, s: s["data"].update(FEDERATOR_LEADER_TTL="forever"), "--leader-ttl 'forever'"),
    (lambda c, s: s["data"].update(FEDERATOR_LEADER_TTL="10m"), "between 1s and 5m"),
    (lambda c, s: s["data"].update(FEDERATOR_CLUSTER_LOSS_GRACE="-1s"), "--cluster-loss-grace"),
    (lambda c, s: s["data"].update(FEDERATOR_STORE="sqlite:///var/lib/federator/hub.db"), "is not etcd://"),
    (lambda c, s: s["data"].update(FEDERATOR_STORE="etcds://etcd-0.etcd"), "must be HOST:PORT"),
    (lambda c, s: s["data"].update(FEDERATOR_STORE="etcds://etcd-3.etcd:2379"), "has only 3 replicas"),
    (lambda c, s: s["data"].update(FEDERATOR_STORE="etcds://etcd-0.etcd:2379,etcd-1.etcd:2379"),
     "several etcd endpoints with a DNS name"),
    (lambda c, s: s["data"].update(FEDERATOR_STORE="etcds://etcd-0.etcd:2390"), "has no port 2390"),
    (lambda c, s: s["data"].update(FEDERATOR_STORE="etcds://etcd:2390"), "Service etcd has no port 2390"),
    (lambda c, s: s["data"].update(FEDERATOR_STORE="etcds://etcdd:2379"), "no Service etcdd is rendered here"),
    (lambda c, s: s["data"].update(FEDERATOR_STORE="etcds://etcd-0.etcdd:2379"), "not etcdd"),
    (lambda c, s: s["data"].update(FEDERATOR_STORE="etcds://etc-0.etcd:2379"), "no StatefulSet etc"),
    (lambda c, s: s["data"].update(FEDERATOR_STORE="etcd://etcd:2379"), "are for etcds:// only"),
    (lambda c, s: (s["data"].update(FEDERATOR_STORE="etcd://etcd:2379"),
                   [c["args"].remove(a) for a in list(c["args"]) if a.startswith("--etcd-")]), "is plain gRPC"),
    (lambda c, s: c["args"].remove("--etcd-keyfile=/etc/federator/etcd/tls.key"), "--etcd-keyfile missing"),
    (lambda c, s: _set_arg(c, "--etcd-cafile=", "--etcd-cafile=/etc/federator/etcd/root.crt"),
     "--etcd-cafile /etc/federator/etcd/root.crt: volume etcd-client-tls does not provide that file"),
    (lambda c, s: _drop_mount(c, "etcd-client-tls"), "--etcd-certfile /etc/federator/etcd/tls.crt is on no volume"),
    (lambda c, s: _drop_mount(c, "encryption"),
     "--encryption-provider-config /etc/federator/encryption/encryption-config.yaml is on no volume"),
    (lambda c, s: _set_arg(c, "--encryption-provider-config=", "--encryption-provider-config=/etc/federator/encryption/x"),
     "volume encryption does not provide that file"),
    (lambda c, s: _drop_mount(c, "audit"), "--audit-log-path /var/log/federator/audit.log is on no volume"),
    (lambda c, s: _set_arg(c, "--audit-log-path=", "--audit-log-path=/etc/federator/tls/audit.log"),
     "--audit-log-path /etc/federator/tls/audit.log is not on a writable"),
    (lambda c, s: s["data"].pop("FEDERATOR_STORE"), "is not rendered here"),
    (lambda c, s: c["env"].pop(1), "undefined $(VAR)"),
    (lambda c, s: _set_arg(c, "--listen=", "--listen=0.0.0.0:http"), "expected HOST:PORT"),
    (lambda c, s: c["args"].remove("--token-file=/etc/federator/tokens/tokens.csv"), "no --token-file"),
    (lambda c, s: c["args"].remove("--tls-key=/etc/federator/tls/tls.key"), "no --tls-cert/--tls-key"),
    (lambda c, s: (c["args"].remove("--no-sim"), c["args"].remove("--clusters=/etc/federator/members")),
     "simulated clusters"),
    (lambda c, s: c.update(command=["sh", "-c", "federator up"]), "not the federator command"),
    (lambda c, s: c["volumeMounts"].pop(3), "--state-dir /var/lib/federator is on no volume"),
    (lambda c, s: c["volumeMounts"][3].update(readOnly=True), "is not on a writable"),
    (lambda c, s: _set_arg(c, "--tls-cert=", "--tls-cert=/etc/federator/tls/server.crt"), "does not provide that file"),
    (lambda c, s: _set_arg(c, "--tls-cert=", "--tls-cert=/etc/tls/tls.crt"), "is on no volume"),
])
def test_a_hub_command_line_that_the_cli_refuses_fails(prod: list[Obj], mutate: Callable[[Obj, Obj], Any],
                                                       expected: str) -> None:
    objects = _objects(prod)
    hub = _hub(objects)
    container = _container(hub)
    assert container["volumeMounts"][3]["mountPath"] == "/var/lib/federator"
    assert container["env"][1]["name"] == "FEDERATOR_STORE"
    mutate(container, _settings(objects))
    problems = federator_command_problems(hub, objects, entrypoint=ENTRYPOINT)
    assert any(expected in p for p in problems), problems


def test_a_federator_container_with_another_command_is_parsed_too(prod: list[Obj]) -> None:
    objects = _objects(prod)
    hub = _hub(objects)
    _container(hub)["args"] = ["agent", "--kubeconfig=/etc/federator/tls/kubeconfig"]
    problems = federator_command_problems(hub, objects, entrypoint=ENTRYPOINT)
    assert any("the following arguments are required: --hub-identity" in p for p in problems), problems
    _container(hub)["args"] = ["agent", "--kubeconfig=/etc/nowhere/kubeconfig", "--hub-identity=h"]
    problems = federator_command_problems(hub, objects, entrypoint=ENTRYPOINT)
    assert any("/etc/nowhere/kubeconfig is on no volume" in p for p in problems), problems


def test_only_containers_of_our_image_are_parsed(prod: list[Obj]) -> None:
    objects = _objects(prod)
    hub = _hub(objects)
    _container(hub)["image"] = "registry.example/other:1"
    _container(hub)["args"] = ["--no-such-flag"]
    assert federator_command_problems(hub, objects, entrypoint=ENTRYPOINT) == []
    assert image_repository("registry.example:5000/team/federator:0.1.0@sha256:ab") == "federator"


def test_env_expansion_follows_the_kubelet() -> None:
    env = {"A": "1", "B": "x"}
    assert expand("$(A)-$(B)-$(C)-$$(A)-$$", env) == "1-x-$(C)-$(A)-$"
    pod = {"metadata": {"name": "etcd", "namespace": "ns"}}
    container = {"name": "c", "env": [
        {"name": "LATE", "value": "$(NS)"},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "EARLY", "value": "in $(NS)"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]}
    values, problems = container_env(pod, container, [])
    assert values["EARLY"] == "in ns" and values["POD"] == "etcd-0" and values["SECRET"] == "<secret s/k>"
    assert values["LATE"] == "$(NS)"
    assert problems == ["Pod/etcd container c: env LATE uses $(NS), which is not defined before it"] or \
        any("env LATE uses $(NS)" in p for p in problems)


# ---------------------------------------------------------------- the hub's probes


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda c: c["readinessProbe"]["httpGet"].update(scheme="HTTP"), "readinessProbe scheme is 'HTTP'"),
    (lambda c: c["livenessProbe"]["httpGet"].pop("scheme"), "livenessProbe scheme is None"),
    (lambda c: c["readinessProbe"]["httpGet"].update(path="/healthz"), "not an HTTP GET of /readyz"),
    (lambda c: c["livenessProbe"].pop("httpGet"), "not an HTTP GET of /healthz"),
    (lambda c: c["livenessProbe"]["httpGet"].update(port=8080), "is not the --listen port 6443"),
    (lambda c: c["ports"][0].update(containerPort=6444), "is not the --listen port 6443"),
])
def test_hub_probes_that_miss_the_endpoints_fail(prod: list[Obj], mutate: Callable[[Obj], Any],
                                                 expected: str) -> None:
    hub = _hub(_objects(prod))
    mutate(_container(hub))
    problems = hub_problems(hub)
    assert any(expected in p for p in problems), problems


# ---------------------------------------------------------------- etcd


def _env(container: Obj, name: str) -> Obj:
    found: Obj = next(e for e in container["env"] if e["name"] == name)
    return found


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda s, c: s["spec"].update(replicas=5), "5 replica(s)"),
    (lambda s, c: c["args"].append("--no-such-flag=1"), "etcd has no flag --no-such-flag"),
    (lambda s, c: c["args"].append("--initial-cluster=etcd-0=http://etcd-0.etcd:2380"), "given twice"),
    (lambda s, c: c["args"].append("--name=etcd-0"), "given twice"),
    (lambda s, c: s["spec"].update(podManagementPolicy="OrderedReady"), "podManagementPolicy"),
    (lambda s, c: s["spec"].update(serviceName="etcd-peers"), "Service etcd-peers is missing"),
    (lambda s, c: _set_arg(c, "--name=", "--name=etcd"), "not the pod's name"),
    (lambda s, c: _set_arg(c, "--data-dir=", "--data-dir=/data"), "is not on a volumeClaimTemplate"),
    (lambda s, c: _env(c, "ETCD_INITIAL_CLUSTER").update(
        value="etcd-0=http://etcd-0.etcd:2380,etcd-1=http://etcd-1.etcd:2380"), "--initial-cluster is"),
    (lambda s, c: _env(c, "ETCD_INITIAL_CLUSTER").update(
        value="etcd-0=http://etcd-0.etcd.federator-system.svc:2380,etcd-1=http://etcd-1.etcd:2380,"
              "etcd-2=http://etcd-2.etcd:2380"), "--initial-cluster is"),
    (lambda s, c: s["spec"]["template"]["spec"].pop("affinity"), "may share a node"),
    (lambda s, c: c.update(command=["/bin/sh"]), "no container runs etcd"),
    (lambda s, c: c["args"].remove("--client-cert-auth"), "no --client-cert-auth"),
    (lambda s, c: c["args"].remove("--peer-client-cert-auth"), "no --peer-client-cert-auth"),
    (lambda s, c: _set_arg(c, "--listen-client-urls=", "--listen-client-urls=http://0.0.0.0:2379"),
     "--listen-client-urls 'http://0.0.0.0:2379' is not https://"),
    (lambda s, c: _set_arg(c, "--initial-advertise-peer-urls=",
                           "--initial-advertise-peer-urls=http://$(POD_NAME).etcd:2380"), "not its stable name"),
    (lambda s, c: c["args"].remove("--peer-key-file=/etc/etcd/tls/peer/tls.key"), "no --peer-key-file"),
    (lambda s, c: _set_arg(c, "--cert-file=", "--cert-file=/etc/etcd/tls/server/server.crt"),
     "--cert-file /etc/etcd/tls/server/server.crt is on no volume that provides it"),
    (lambda s, c: c["volumeMounts"].pop(), "--peer-trusted-ca-file /etc/etcd/tls/peer/ca.crt is on no volume"),
])
def test_an_etcd_statefulset_that_cannot_form_its_cluster_fails(prod: list[Obj], mutate: Callable[[Obj, Obj], Any],
                                                                 expected: str) -> None:
    objects = _objects(prod)
    etcd = _etcd(objects)
    container = _container(etcd)
    mutate(etcd, container)
    problems = etcd_problems(etcd, objects, help_flags=ETCD_FLAGS)
    assert any(expected in p for p in problems), problems


def test_the_namespaced_peer_name_form_is_accepted_when_used_throughout(prod: list[Obj]) -> None:
    objects = _objects(prod)
    etcd = _etcd(objects)
    container = _container(etcd)
    container["env"].append({"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}})
    container["args"] = [a.replace("$(POD_NAME).etcd:2380", "$(POD_NAME).etcd.$(NS).svc:2380")
                         for a in container["args"]]
    _env(container, "ETCD_INITIAL_CLUSTER")["value"] = ",".join(
        f"etcd-{i}=https://etcd-{i}.etcd.federator-system.svc:2380" for i in range(3))
    assert etcd_problems(etcd, objects, help_flags=ETCD_FLAGS) == []


def test_an_env_reference_to_a_later_variable_is_caught(prod: list[Obj]) -> None:
    # What kustomize's patch did to the dev overlay once: the patched variable moved first.
    objects = _objects(prod)
    etcd = _etcd(objects)
    container = _container(etcd)
    container["env"].insert(0, {"name": "ETCD_ADVERTISE_CLIENT_URLS", "value": "http://$(POD_NAME).etcd:2379"})
    container["args"] = [a for a in container["args"] if not a.startswith("--advertise-client-urls")]
    problems = etcd_problems(etcd, objects, help_flags=ETCD_FLAGS)
    assert any("env ETCD_ADVERTISE_CLIENT_URLS uses $(POD_NAME)" in p for p in problems), problems


# ---------------------------------------------------------------- references between objects


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda o: find(o, "Service", "federator-hub")["spec"]["selector"].update(
        {"app.kubernetes.io/component": "hubb"}), "selects no pod"),
    (lambda o: find(o, "Service", "federator-hub")["spec"]["ports"][0].update(
        targetPort="http"), "targetPort 'http'"),
    (lambda o: find(o, "PodDisruptionBudget", "etcd")["spec"]["selector"]["matchLabels"].update(
        {"app.kubernetes.io/name": "etc"}), "selects no pod"),
    (lambda o: find(o, "NetworkPolicy", "federator-hub")["spec"]["podSelector"]["matchLabels"].update(
        {"app.kubernetes.io/name": "fed"}), "selects no pod"),
    (lambda o: _hub(o)["spec"]["selector"]["matchLabels"].update({"extra": "x"}), "its own pod template"),
    (lambda o: _hub(o)["spec"]["template"]["spec"].update(serviceAccountName="hub"), "ServiceAccount hub"),
    (lambda o: _hub(o)["spec"]["template"]["spec"]["volumes"].append(
        {"name": "cfg", "configMap": {"name": "federator-hub-config"}}), "ConfigMap federator-hub-config"),
    (lambda o: o.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "federator-tokens"},
                         "stringData": {"tokens.csv": "t,admin,1,\"federator:admin\""}}), "a Secret with values"),
])
def test_broken_references_fail(prod: list[Obj], mutate: Callable[[list[Obj]], Any], expected: str) -> None:
    objects = _objects(prod)
    mutate(objects)
    problems = reference_problems(objects)
    assert any(expected in p for p in problems), problems
