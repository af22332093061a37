"""The hub serves SIG Multicluster's ClusterProfile (multicluster.x-k8s.io/v1alpha1) to real kubectl:
examples/clusterprofile.yaml applies, a cluster manager writes status through /status (kubectl patch
--subresource=status), `kubectl get` shows Manager and Kubernetes, a bad profile is a 422 naming the field
and stores nothing, spec.clusterManager is immutable; only admins write profiles and see how one reaches its
cluster (viewers see the access providers' names only, researchers nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from .hubtest_support import RunningHub

pytestmark = pytest.mark.kubectl

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
URL = "/apis/multicluster.x-k8s.io/v1alpha1/namespaces/fleet/clusterprofiles"
STATUS = {"status": {
    "accessProviders": [{"name": "token-provider", "cluster": {
        "server": "https://10.0.0.7:6443",
        "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"audience": "gpu-east-1"}}]}}],
    "properties": [{"name": "region", "value": "us-east"}],
    "version": {"kubernetes": "1.34.1"},
    "conditions": [{"type": "ControlPlaneHealthy", "status": "True", "reason": "Healthy", "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}


async def test_kubectl_applies_the_example_and_a_cluster_manager_writes_status(hub: RunningHub) -> None:
    code, _, err = await hub.kubectl("admin", "apply", "-f", str(EXAMPLES / "00-namespaces.yaml"))
    assert code == 0, err
    code, out, err = await hub.kubectl("admin", "apply", "-f", str(EXAMPLES / "clusterprofile.yaml"))
    assert code == 0 and "clusterprofile.multicluster.x-k8s.io/gpu-east-1 created" in out, (out, err)
    code, out, err = await hub.kubectl("admin", "patch", "clusterprofile", "gpu-east-1", "-n", "fleet",
                                       "--subresource=status", "--type=merge", "-p", json.dumps(STATUS))
    assert code == 0, err
    status, stored = await hub.request("GET", f"{URL}/gpu-east-1")
    assert status == 200 and stored["status"] == STATUS["status"]
    assert stored["spec"] == yaml.safe_load((EXAMPLES / "clusterprofile.yaml").read_text())["spec"]
    code, out, err = await hub.kubectl("admin", "get", "clusterprofiles", "-n", "fleet")
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == ["NAME", "MANAGER", "KUBERNETES", "AGE"] and row.split()[:3] == [
        "gpu-east-1", "ocm", "1.34.1"]
    code, out, err = await hub.kubectl("admin", "explain", "clusterprofile.status.accessProviders.cluster")
    assert code == 0 and "certificate-authority-data" in out, err


@pytest.mark.parametrize(("change", "field"), [
    ({"spec": {"clusterManager": {"name": ""}}}, "spec.clusterManager.name"),
    ({"spec": {"displayName": "x" * 2000, "clusterManager": {"name": "ocm"}}}, "spec.displayName"),
    ({"spec": {}}, "spec.clusterManager"),
])
async def test_a_bad_profile_is_refused_naming_the_field(hub: RunningHub, change: dict[str, object],
                                                         field: str) -> None:
    body = {"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
            "metadata": {"name": "bad", "namespace": "default"}, **change}
    status, answer = await hub.request("POST", URL.replace("fleet", "default"), body=body)
    assert status == 422, answer
    assert field in [cause["field"] for cause in answer["details"]["causes"]], answer
    status, _ = await hub.request("GET", URL.replace("fleet", "default") + "/bad")
    assert status == 404


async def test_hostile_status_is_refused_and_the_manager_is_immutable(hub: RunningHub) -> None:
    body = {"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
            "metadata": {"name": "c", "namespace": "default"}, "spec": {"clusterManager": {"name": "ocm"}}}
    url = URL.replace("fleet", "default")
    status, created = await hub.request("POST", url, body=body)
    assert status == 201, created
    hostile = {"status": {"accessProviders": [{"name": "p", "cluster": {
        "server": "https://admin:hunter2@10.0.0.7:6443"}}], "properties": [{"name": "p", "value": "v"}] * 300}}
    status, answer = await hub.request("PATCH", f"{url}/c/status", body=hostile,
                                       headers={"Content-Type": "application/merge-patch+json"})
    assert status == 422 and "hunter2" not in json.dumps(answer), answer
    fields = {cause["field"] for cause in answer["details"]["causes"]}
    assert {"status.accessProviders[0].cluster.server", "status.properties"} <= fields, fields
    status, answer = await hub.request("PATCH", f"{url}/c", body={"spec": {"clusterManager": {"name": "karmada"}}},
                                       headers={"Content-Type": "application/merge-patch+json"})
    assert status == 422 and "immutable" in answer["message"], answer


async def test_only_admins_write_profiles_and_see_how_to_reach_the_cluster(hub: RunningHub) -> None:
    url = URL.replace("fleet", "default")
    body = {"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
            "metadata": {"name": "c", "namespace": "default"}, "spec": {"clusterManager": {"name": "ocm"}}}
    for who in ("researcher", "viewer"):
        status, _ = await hub.request("POST", url, body=body, who=who)
        assert status == 403, who
    status, _ = await hub.request("GET", url, who="researcher")
    assert status == 403
    status, created = await hub.request("POST", url, body=body)
    assert status == 201, created
    status, _ = await hub.request("PATCH", f"{url}/c/status", body=STATUS,
                                  headers={"Content-Type": "application/merge-patch+json"})
    assert status == 200
    status, seen = await hub.request("GET", f"{url}/c", who="viewer")
    assert status == 200 and seen["status"]["accessProviders"] == [{"name": "token-provider"}]
    assert "10.0.0.7" not in json.dumps(seen)
    status, listed = await hub.request("GET", url, who="viewer")
    assert status == 200 and "10.0.0.7" not in json.dumps(listed)
    status, seen = await hub.request("GET", f"{url}/c")
    assert seen["status"]["accessProviders"][0]["cluster"]["server"] == "https://10.0.0.7:6443"


def test_the_inventory_flags_fail_with_one_line_naming_the_flag(tmp_path: Path) -> None:
    import argparse

    from federator.hub.app import cluster_profile_knobs, settings_knobs

    good = tmp_path / "providers.json"
    good.write_text(json.dumps({"providers": [{"name": "p", "execConfig": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "/usr/local/bin/cp-creds"}}]}))
    knobs = cluster_profile_knobs(argparse.Namespace(cluster_profile_providers=str(good),
                                                     cluster_profile_kubeconfigs=str(tmp_path)))
    assert [p.name for p in knobs["cluster_profile_providers"]] == ["p"]
    assert knobs["cluster_profile_kubeconfig_dir"] == tmp_path
    assert "cluster_profile_providers" in settings_knobs(argparse.Namespace(cluster_profile_providers=str(good)))
    bad = tmp_path / "bad.json"
    for content, words in (("{", "is not valid JSON"),
                           ('{"providers": [{"name": "p", "execConfig": {"command": "x"}}]}',
                            "providers[0].execConfig.apiVersion: Required value")):
        bad.write_text(content)
        with pytest.raises(ValueError) as raised:
            cluster_profile_knobs(argparse.Namespace(cluster_profile_providers=str(bad)))
        assert str(raised.value).startswith(f"--cluster-profile-providers {bad}: ") and words in str(raised.value)
    with pytest.raises(ValueError, match="--cluster-profile-providers .*no-such.json: No such file"):
        cluster_profile_knobs(argparse.Namespace(cluster_profile_providers=str(tmp_path / "no-such.json")))
    with pytest.raises(ValueError, match="--cluster-profile-kubeconfigs .*: not a directory"):
        cluster_profile_knobs(argparse.Namespace(cluster_profile_kubeconfigs=str(good)))
