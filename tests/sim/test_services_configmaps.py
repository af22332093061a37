"""core/v1 Service and ConfigMap in a simulated member, as kube-apiserver shapes them (the hub's gangs get a
headless Service, MPI jobs a hostfile ConfigMap).

- Service defaults through the official client: type ClusterIP, sessionAffinity None, ports with protocol TCP
  and targetPort = port, clusterIP "None" kept for a headless Service, an address for any other; an update
  without clusterIP keeps it, a change is refused (immutable).
- Validation in kube's words: a 422 naming the field (a name that is no DNS-1035 label, a port out of range,
  two unnamed ports, a bad selector, a pod hostname that is no DNS label), nothing stored.
- ConfigMap data and binaryData, key rules, the 1 MiB cap and `immutable`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from simapi_support import ThreadedSim

JSON = dict[str, Any]


@pytest.fixture(scope="module")
def core(sim_cluster: ThreadedSim) -> Iterator[client.CoreV1Api]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim_cluster.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api_client:
        yield client.CoreV1Api(api_client)


def causes(e: ApiException) -> list[str]:
    body: JSON = json.loads(e.body)
    return [c.get("field", "") for c in body["details"]["causes"]]


def headless(name: str, **spec: Any) -> JSON:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {"federator.dev/job-uid": "u1", "federator.dev/epoch": "0"}, **spec}}


def test_a_headless_service_keeps_clusterip_none_and_gets_kube_defaults(core: client.CoreV1Api) -> None:
    svc = core.create_namespaced_service("default", headless("gang-a", ports=[{"name": "x", "port": 23456}]))
    spec = svc.spec
    assert (spec.cluster_ip, spec.cluster_ips, spec.type, spec.session_affinity) == \
        ("None", ["None"], "ClusterIP", "None")
    assert spec.publish_not_ready_addresses is True
    assert (spec.ports[0].protocol, spec.ports[0].target_port) == ("TCP", 23456)
    # a headless Service needs no ports
    assert core.create_namespaced_service("default", headless("gang-b")).spec.ports is None
    assert {"gang-a", "gang-b"} <= {s.metadata.name for s in core.list_namespaced_service("default").items}
    core.delete_namespaced_service("gang-b", "default")
    assert "gang-b" not in {s.metadata.name for s in core.list_namespaced_service("default").items}


def test_a_cluster_ip_service_gets_an_address_that_an_update_keeps(core: client.CoreV1Api) -> None:
    body: JSON = {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}
    svc = core.create_namespaced_service("default", body)
    ip = svc.spec.cluster_ip
    assert ip.startswith("10.") and svc.spec.cluster_ips == [ip]
    assert core.patch_namespaced_service("web", "default", {"spec": {"selector": {"app": "web2"}}}).spec.cluster_ip == ip
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_service("web", "default", {"spec": {"clusterIP": "10.96.0.9", "clusterIPs": None}})
    assert e.value.status == 422 and causes(e.value) == ["spec.clusterIP"]


@pytest.mark.parametrize(("body", "field"), [
    (headless("9-starts-with-digit"), "metadata.name"),
    (headless("p", ports=[{"port": 70000}]), "spec.ports[0].port"),
    (headless("p", ports=[{"port": 0}]), "spec.ports[0].port"),
    (headless("p", ports=[{"port": 1}, {"port": 2}]), "spec.ports[0].name"),
    (headless("p", ports=[{"port": 1, "protocol": "ICMP"}]), "spec.ports[0].protocol"),
    (headless("p", selector={"bad key!": "x"}), "spec.selector"),
    (headless("p", type="NodePort", ports=[{"port": 1}]), "spec.clusterIP"),
    ({"metadata": {"name": "p"}, "spec": {"selector": {"a": "b"}}}, "spec.ports"),
])
def test_a_bad_service_is_refused_naming_the_field(core: client.CoreV1Api, body: JSON, field: str) -> None:
    with pytest.raises(ApiException) as e:
        core.create_namespaced_service("default", body)
    assert e.value.status == 422, e.value.body
    assert field in causes(e.value)
    assert "p" not in {s.metadata.name for s in core.list_namespaced_service("default").items}


def test_a_pod_hostname_and_subdomain_must_be_dns_labels(core: client.CoreV1Api) -> None:
    pod: JSON = {"metadata": {"name": "host-pod"},
                 "spec": {"hostname": "Not_A_Label", "subdomain": "gang-a",
                          "containers": [{"name": "main", "image": "trainer:1.4"}]}}
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod("default", pod)
    assert e.value.status == 422 and causes(e.value) == ["spec.hostname"]
    pod["spec"]["hostname"] = "host-pod"
    created = core.create_namespaced_pod("default", pod)
    assert (created.spec.hostname, created.spec.subdomain) == ("host-pod", "gang-a")


def test_config_maps_hold_data_and_binary_data(core: client.CoreV1Api) -> None:
    body: JSON = {"metadata": {"name": "hostfile"}, "data": {"hostfile": "a slots=1\nb slots=1\n"},
                  "binaryData": {"blob": base64.b64encode(b"\x00\x01").decode()}}
    cm = core.create_namespaced_config_map("default", body)
    assert cm.data == {"hostfile": "a slots=1\nb slots=1\n"} and cm.binary_data == {"blob": "AAE="}
    assert core.read_namespaced_config_map("hostfile", "default").data["hostfile"].endswith("b slots=1\n")
    frozen = core.create_namespaced_config_map("default", {"metadata": {"name": "frozen"}, "immutable": True,
                                                           "data": {"k": "v"}})
    assert frozen.immutable is True
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_config_map("frozen", "default", {"data": {"k": "w"}})
    assert e.value.status == 422 and causes(e.value) == ["data"]


@pytest.mark.parametrize(("body", "field"), [
    ({"metadata": {"name": "c"}, "data": {"bad/key": "v"}}, "data[bad/key]"),
    ({"metadata": {"name": "c"}, "data": {"..x": "v"}}, "data[..x]"),
    ({"metadata": {"name": "c"}, "data": {"k": "v"}, "binaryData": {"k": "AA=="}}, "binaryData"),
    ({"metadata": {"name": "c"}, "binaryData": {"k": "not base64!"}}, "binaryData[k]"),
    ({"metadata": {"name": "c"}, "data": {"k": "x" * (1024 * 1024 + 1)}}, ""),
])
def test_a_bad_config_map_is_refused_naming_the_field(core: client.CoreV1Api, body: JSON, field: str) -> None:
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map("default", body)
    assert e.value.status == 422, e.value.body
    assert field in causes(e.value)
    assert "c" not in {c.metadata.name for c in core.list_namespaced_config_map("default").items}
