"""The hub reads its Secrets the way the kubelet mounts them: each key a symlink into `..data/`, a
timestamped directory beside them, files mode 0440 (group fsGroup). README, "Deploying on
Kubernetes": federator-members holds `<cluster>.yaml` registrations and `<cluster>.kubeconfig` files,
federator-tokens holds `tokens.csv`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from federator.apiserver.auth import TokenAuthenticator
from federator.hub.app import RegistrationError, read_registrations

from .deploy_support import schema_problems

MEMBERS_MOUNT = "/etc/federator/members"  # deploy/base/hub-deployment.yaml

REGISTRATION = {
    "apiVersion": "federator.dev/v1alpha1",
    "kind": "MemberCluster",
    "metadata": {"name": "onprem-a"},
    "spec": {
        "connection": {"kubeconfigPath": f"{MEMBERS_MOUNT}/onprem-a.kubeconfig"},
        "location": {"type": "onPrem", "region": "eu-west"},
        "network": {"type": "rdma", "bandwidthGbps": 200.0, "rdmaKind": "infiniband"},
        "scheduler": {"name": "volcano", "schedulerName": "volcano"},
    },
}


def kubelet_secret_volume(directory: Path, files: dict[str, str]) -> Path:
    """`directory` laid out as the kubelet's atomic writer lays out a Secret volume."""
    directory.mkdir()
    payload = directory / "..2026_01_01_00_00_00.000000001"
    payload.mkdir()
    for name, text in files.items():
        (payload / name).write_text(text, encoding="utf-8")
        (payload / name).chmod(0o440)
    (directory / "..data").symlink_to(payload.name)
    for name in files:
        (directory / name).symlink_to(f"..data/{name}")
    return directory


def test_the_documented_registration_is_a_valid_member_cluster() -> None:
    assert schema_problems(REGISTRATION) == []


def test_the_hub_reads_registrations_from_a_secret_volume_and_skips_the_rest(tmp_path: Path) -> None:
    members = kubelet_secret_volume(tmp_path / "members", {
        "onprem-a.yaml": yaml.safe_dump(REGISTRATION),
        "onprem-a.kubeconfig": "apiVersion: v1\nkind: Config\nclusters: []\n",
    })
    found = read_registrations(members)
    assert [(path.name, doc["metadata"]["name"]) for path, doc in found] == [("onprem-a.yaml", "onprem-a")]


def test_a_kubeconfig_saved_as_yaml_in_the_secret_is_refused_at_start(tmp_path: Path) -> None:
    # `--from-file=onprem-a.yaml=...kubeconfig` by mistake: the hub stops with one line naming the file.
    members = kubelet_secret_volume(tmp_path / "members", {
        "onprem-a.yaml": "apiVersion: v1\nkind: Config\nclusters: []\n",
    })
    with pytest.raises(RegistrationError, match=r"onprem-a\.yaml: document 1 is a Config, not a MemberCluster"):
        read_registrations(members)


def test_the_hub_reads_a_token_file_from_a_secret_volume(tmp_path: Path) -> None:
    token = "t" * 40
    tokens = kubelet_secret_volume(tmp_path / "tokens", {"tokens.csv": f'{token},admin,uid-admin,"federator:admin"\n'})
    assert os.path.islink(tokens / "tokens.csv")
    authenticator = TokenAuthenticator.from_file(tokens / "tokens.csv")
    principal = authenticator.principal_for_token(token)
    assert principal is not None and principal.name == "admin"
