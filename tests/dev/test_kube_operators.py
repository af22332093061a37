"""What federator/dev/kube.py installs of an operator's upstream manifests in a real member (issue 28's operator
mode), without a cluster: the objects kept and dropped, webhooks called by URL on loopback, hostile and
malformed renderings refused with one line. The real install against a real member: e2e/kube/test_member_operators.py;
build.sh's failure lines: below, with a Go toolchain."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from federator.dev.kube import COMPONENTS, OPERATORS, KubeBinaries, KubeMember, KubeMemberError, KubeMembers, \
    operator_install, operators_build_script, profile_operators
from federator.sim.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[2]
URL = "https://127.0.0.1:4443"


def _service(path: str) -> dict[str, Any]:
    return {"service": {"name": "webhook-service", "namespace": "jobset-system", "path": path}}


def _hook(name: str, group: str, resource: str, path: str) -> dict[str, Any]:
    return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": _service(path),
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": [resource]}]}


def _crd(name: str, *, conversion: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"group": name.split(".", 1)[1]}
    if conversion:
        spec["conversion"] = {"strategy": "Webhook", "webhook": {"clientConfig": _service("/convert"),
                                                                 "conversionReviewVersions": ["v1"]}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name}, "spec": spec}


def _rendered(*documents: dict[str, Any]) -> str:
    return yaml.safe_dump_all(documents, sort_keys=False)


JOBSET_RENDERED = _rendered(
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "jobset-system"}},
    _crd("jobsets.jobset.x-k8s.io", conversion=True),
    {"apiVersion": "v1", "kind": "ServiceAccount",
     "metadata": {"name": "jobset-controller-manager", "namespace": "jobset-system"}},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "jobset-manager-role"},
     "rules": []},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "jobset-manager-config"}},
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "jobset-webhook-server-cert"}},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "jobset-webhook-service"}},
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "jobset-controller-manager"}},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
     "metadata": {"name": "jobset-mutating-webhook-configuration"},
     "webhooks": [_hook("mjobset.kb.io", "jobset.x-k8s.io", "jobsets", "/mutate-jobset-x-k8s-io-v1alpha2-jobset"),
                  _hook("mpod.kb.io", "", "pods", "/mutate--v1-pod")]},
)


def test_the_jobset_install_keeps_crds_rbac_webhooks_and_calls_them_on_loopback() -> None:
    kept = operator_install(OPERATORS["jobset"], JOBSET_RENDERED, webhook_url=URL, ca_bundle="Q0E=")
    assert [d["kind"] for d in kept] == ["Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole",
                                         "MutatingWebhookConfiguration"]
    conversion = kept[1]["spec"]["conversion"]["webhook"]["clientConfig"]
    assert conversion == {"url": f"{URL}/convert", "caBundle": "Q0E="}
    hooks = {h["name"]: h["clientConfig"] for h in kept[4]["webhooks"]}
    assert hooks == {"mjobset.kb.io": {"url": f"{URL}/mutate-jobset-x-k8s-io-v1alpha2-jobset", "caBundle": "Q0E="},
                     "mpod.kb.io": {"url": f"{URL}/mutate--v1-pod", "caBundle": "Q0E="}}
    assert "service" not in yaml.safe_dump_all(kept)


def test_the_kubeflow_install_keeps_only_the_served_kinds() -> None:
    """kubeflow.org/v1 MPIJob, MXJob, XGBoostJob are not installed (the hub serves MPIJob v2beta1, whose CRD has
    the same name), nor the webhooks of their resources."""
    rendered = _rendered(
        *(_crd(f"{plural}.kubeflow.org") for plural in ("mpijobs", "mxjobs", "paddlejobs", "pytorchjobs", "tfjobs",
                                                        "xgboostjobs")),
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": "validator.training-operator.kubeflow.org"},
         "webhooks": [_hook(f"validator.{p}.training-operator.kubeflow.org", "kubeflow.org", f"{p}s",
                            f"/validate-kubeflow-org-v1-{p}") for p in ("mxjob", "paddlejob", "pytorchjob", "tfjob",
                                                                        "xgboostjob")]})
    kept = operator_install(OPERATORS["kubeflow"], rendered, webhook_url=URL, ca_bundle="Q0E=")
    assert sorted(d["metadata"]["name"] for d in kept if d["kind"] == "CustomResourceDefinition") == [
        "paddlejobs.kubeflow.org", "pytorchjobs.kubeflow.org", "tfjobs.kubeflow.org"]
    hooks = [h["name"] for d in kept if d["kind"] == "ValidatingWebhookConfiguration" for h in d["webhooks"]]
    assert hooks == ["validator.paddlejob.training-operator.kubeflow.org",
                     "validator.pytorchjob.training-operator.kubeflow.org",
                     "validator.tfjob.training-operator.kubeflow.org"]


def test_the_mpi_install_keeps_the_v2beta1_crd_and_rbac() -> None:
    """mpi-operator's manifests/overlays/standalone, as kustomize renders it: its Deployment is not applied (the
    process runs instead); its Namespace, ServiceAccount, RBAC and MPIJob v2beta1 CRD are; it has no webhooks."""
    rendered = _rendered(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mpi-operator"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "mpi-operator",
                                                                    "namespace": "mpi-operator"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "mpi-operator"},
         "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "list", "watch", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "mpi-operator"},
         "subjects": [{"kind": "ServiceAccount", "name": "mpi-operator", "namespace": "mpi-operator"}]},
        _crd("mpijobs.kubeflow.org"),
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "mpi-operator",
                                                                     "namespace": "mpi-operator"}})
    kept = operator_install(OPERATORS["mpi"], rendered, webhook_url=URL, ca_bundle="Q0E=")
    assert [d["kind"] for d in kept] == ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                         "CustomResourceDefinition"]
    assert OPERATORS["mpi"].user == "system:serviceaccount:mpi-operator:mpi-operator"
    # the training operator's kubeflow.org/v1 MPIJob CRD has the same name: it is never among its own
    assert "mpijobs.kubeflow.org" not in OPERATORS["kubeflow"].crds


@pytest.mark.parametrize("rendered, words", [
    ("kind: [unclosed", "rendered install manifests"),
    ("- just\n- a list\n", "not a kube object"),
    ("apiVersion: v1\nmetadata: {}\n", "not a kube object"),
    ("kind: MutatingWebhookConfiguration\nwebhooks: not-a-list\n", "webhooks is not a list"),
    ("kind: MutatingWebhookConfiguration\nwebhooks: [1, 2]\n", "webhooks is not a list"),
])
def test_a_malformed_rendering_is_refused_in_one_line(rendered: str, words: str) -> None:
    with pytest.raises(KubeMemberError) as raised:
        operator_install(OPERATORS["jobset"], rendered, webhook_url=URL, ca_bundle="")
    assert words in str(raised.value) and "\n" not in str(raised.value) and len(str(raised.value)) < 500
    assert str(raised.value).startswith("operator jobset: ")


@pytest.mark.parametrize("path", ["@evil.example/x", "evil", "//evil.example/x", "/x?y=1", "/x#frag", "/a\\b",
                                  "/" + "x" * 5000, 7])
def test_a_webhook_path_that_would_leave_loopback_is_refused(path: object) -> None:
    rendered = _rendered({"kind": "MutatingWebhookConfiguration", "metadata": {"name": "m"},
                          "webhooks": [{"name": "h", "clientConfig": {"service": {"name": "s", "path": path}},
                                        "rules": [{"apiGroups": [""], "resources": ["pods"]}]}]})
    with pytest.raises(KubeMemberError, match="not a plain absolute path"):
        operator_install(OPERATORS["jobset"], rendered, webhook_url=URL, ca_bundle="")


def test_an_unknown_operator_is_refused_before_anything_starts(tmp_path: Path) -> None:
    profile = load_profile_file(ROOT / "clusterconfigs" / "sim" / "cloud-native-gang.yaml")
    with pytest.raises(KubeMemberError, match=r"unknown operator 'volcano' \(known: jobset, kubeflow, mpi\)"):
        KubeMember(profile, directory=tmp_path, binaries=KubeBinaries(tmp_path), operators=("jobset", "volcano"))
    assert list(tmp_path.iterdir()) == []
    member = KubeMember(profile, directory=tmp_path, binaries=KubeBinaries(tmp_path),
                        operators=("kubeflow", "jobset", "kubeflow"))
    assert member.components[-2:] == ("training-operator", "jobset-controller")


def test_federator_up_members_kube_runs_the_operators_a_profile_names(tmp_path: Path) -> None:
    """`federator up --members kube` (KubeMembers) gives each real member its profile's `operators`, as the
    simulator reads them: batch is kube-controller-manager's own Job controller, so no process of its own; mpi is
    the real mpi-operator, which turns that Job controller on (its launcher is a batch Job)."""
    plain = load_profile_file(ROOT / "clusterconfigs" / "sim" / "cloud-native-gang.yaml")
    operated = plain.model_copy(update={"name": "operated", "operators": ["batch", "jobset", "kubeflow",
                                                                                "mpi"]})
    batch_only = plain.model_copy(update={"name": "batch-only", "operators": ["batch"]})
    assert profile_operators(plain) == () and profile_operators(batch_only) == ()
    mpi_only = plain.model_copy(update={"name": "mpi-only", "operators": ["mpi", "batch"]})
    assert profile_operators(operated) == ("jobset", "kubeflow", "mpi")
    members = KubeMembers([plain, operated, batch_only, mpi_only], directory=tmp_path,
                          binaries=KubeBinaries(tmp_path))
    assert [m.operators for m in members] == [(), ("jobset", "kubeflow", "mpi"), (), ("mpi",)]
    assert [m.components[len(COMPONENTS):] for m in members] == [
        (), ("jobset-controller", "training-operator", "mpi-operator"), (), ("mpi-operator",)]
    assert list(tmp_path.iterdir()) == []  # nothing started


def test_build_sh_without_go_says_so_in_one_line(tmp_path: Path) -> None:
    bash, dirname = shutil.which("bash"), shutil.which("dirname")
    assert bash is not None and dirname is not None
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "dirname").symlink_to(dirname)  # a PATH of coreutils' dirname only: no go
    done = subprocess.run([bash, str(operators_build_script())], capture_output=True, text=True, timeout=60,
                          env={"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path),
                               "FEDERATOR_KUBE_CACHE": str(tmp_path)})
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == ("error: build of the member operators: no 'go' on PATH (Go >= 1.26 is needed)")


@pytest.mark.skipif(shutil.which("go") is None, reason="no Go toolchain")
def test_build_sh_names_the_module_and_step_that_failed(tmp_path: Path) -> None:
    env = {**os.environ, "FEDERATOR_KUBE_CACHE": str(tmp_path / "cache"), "GOFLAGS": "-mod=nonsense"}
    done = subprocess.run(["bash", str(operators_build_script())], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 1 and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: build of the member operators failed: sigs.k8s.io/jobset@v0.10.1: ")
    log = Path(last.rsplit("go's output: ", 1)[1].rstrip(")"))
    assert log.is_file() and "-mod" in log.read_text()
