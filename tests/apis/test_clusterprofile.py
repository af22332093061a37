"""ClusterProfile (sigs.k8s.io/cluster-inventory-api) validation and the access-provider file format: a
malformed, oversized or hostile profile is refused naming its field (never echoing a password in a server
URL); the provider file fails with one line naming the field."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from federator.apis.clusterprofile import (
    API_VERSION,
    EXEC_EXTENSION,
    ProviderConfigError,
    access_providers_of,
    clusterprofile_update_validator,
    exec_extension,
    parse_provider_config,
    validate_clusterprofile,
)

CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="


def profile(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION, "kind": "ClusterProfile",
        "metadata": {"name": "member-1", "namespace": "fleet", "labels": {"x-k8s.io/cluster-manager": "ocm"}},
        "spec": {"displayName": "Member 1", "clusterManager": {"name": "ocm"}},
        "status": {
            "conditions": [{"type": "ControlPlaneHealthy", "status": "True", "reason": "Healthy",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "version": {"kubernetes": "1.34.1"},
            "properties": [{"name": "location", "value": "eu-west"}],
            "accessProviders": [{"name": "token-provider", "cluster": {
                "server": "https://10.0.0.7:6443", "certificate-authority-data": CA,
                "extensions": [{"name": EXEC_EXTENSION, "extension": {"audience": "fleet"}}]}}],
            **status,
        },
    }


def with_(path: str, value: Any) -> dict[str, Any]:
    obj = profile()
    *parents, last = path.split(".")
    node: Any = obj
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return obj


def test_an_upstream_profile_validates_and_its_providers_are_read() -> None:
    assert validate_clusterprofile(profile()) == []
    providers = access_providers_of(profile())
    assert list(providers) == ["token-provider"]
    assert providers["token-provider"].cluster is not None
    assert exec_extension(providers["token-provider"].cluster) == {"audience": "fleet"}


def test_access_providers_win_over_the_deprecated_credential_providers() -> None:
    old = {"name": "token-provider", "cluster": {"server": "https://old.example:6443"}}
    other = {"name": "other", "cluster": {"server": "https://other.example:6443"}}
    providers = access_providers_of(profile(credentialProviders=[old, other]))
    assert sorted(providers) == ["other", "token-provider"]
    assert providers["token-provider"].cluster.server == "https://10.0.0.7:6443"  # type: ignore[union-attr]
    assert validate_clusterprofile(profile(credentialProviders=[old])) == []


@pytest.mark.parametrize(("path", "value", "field"), [
    ("spec.clusterManager", {}, "spec.clusterManager.name"),
    ("spec.clusterManager", {"name": ""}, "spec.clusterManager.name"),
    ("spec.displayName", "x" * 2000, "spec.displayName"),
    ("spec.extra", 1, "spec.extra"),
    ("status.properties", [{"name": "a", "value": ""}], "status.properties[0].value"),
    ("status.properties", [{"name": "a", "value": "v" * 1025}], "status.properties[0].value"),
    ("status.properties", [{"name": "a", "value": "1"}, {"name": "a", "value": "2"}], "status.properties[1].name"),
    ("status.properties", [{"name": "p", "value": "v"}] * 300, "status.properties"),
    ("status.conditions", [{"type": "Bad Type", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
     "status.conditions[0].type"),
    ("status.accessProviders", [{"name": "a", "cluster": {"server": "ftp://host"}}],
     "status.accessProviders[0].cluster.server"),
    ("status.accessProviders", [{"name": "a", "cluster": {"server": "https://h", "certificate-authority-data": "!!"}}],
     "status.accessProviders[0].cluster[certificate-authority-data]"),
    ("status.accessProviders", [{"name": "a"}, {"name": "a"}], "status.accessProviders[1].name"),
    ("status.accessProviders", [{"name": f"p{i}"} for i in range(17)], "status.accessProviders"),
    ("status.accessProviders", [{"name": "a", "cluster": {"extensions": [
        {"name": "big", "extension": {"blob": "x" * (70 * 1024)}}]}}],
     "status.accessProviders[0].cluster.extensions[0].extension"),
    ("status.version", {"kubernetes": 134}, "status.version.kubernetes"),
])
def test_bad_profiles_name_their_field(path: str, value: Any, field: str) -> None:
    errors = validate_clusterprofile(with_(path, value))
    assert field in [where for where, _ in errors], errors


def test_a_server_with_user_information_is_refused_without_echoing_it() -> None:
    obj = with_("status.accessProviders", [{"name": "a", "cluster": {"server": "https://admin:hunter2@h:6443"}}])
    errors = validate_clusterprofile(obj)
    assert [where for where, _ in errors] == ["status.accessProviders[0].cluster.server"]
    assert "hunter2" not in json.dumps(errors)


def test_the_cluster_manager_is_immutable() -> None:
    validate = clusterprofile_update_validator()
    old = profile()
    new = copy.deepcopy(old)
    new["status"]["properties"] = []
    assert validate(new, old) == []
    new["spec"]["clusterManager"] = {"name": "karmada"}
    assert [where for where, _ in validate(new, old)] == ["spec.clusterManager"]


PLUGIN = {"apiVersion": "client.authentication.k8s.io/v1", "command": "/usr/bin/token-plugin",
          "args": ["--audience", "fleet"], "env": [{"name": "MODE", "value": "hub"}], "provideClusterInfo": True}


def test_the_upstream_provider_file_parses_in_order() -> None:
    raw = json.dumps({"providers": [{"name": "b", "execConfig": PLUGIN},
                                    {"name": "a", "execConfig": {**PLUGIN, "args": None, "env": None}}]})
    providers = parse_provider_config(raw.encode())
    assert [p.name for p in providers] == ["b", "a"]
    assert providers[0].exec_config.args == ["--audience", "fleet"]
    assert providers[0].exec_config.provide_cluster_info is True


@pytest.mark.parametrize(("raw", "words"), [
    (b"not json", "is not valid JSON"),
    (b"[]", "Invalid value"),
    (b'{"providers": [{"name": "a"}]}', "providers[0].execConfig: Required value"),
    (json.dumps({"providers": [{"name": "a", "execConfig": {**PLUGIN, "apiVersion": "v2"}}]}).encode(),
     "providers[0].execConfig.apiVersion"),
    (json.dumps({"providers": [{"name": "a", "execConfig": {**PLUGIN, "command": ""}}]}).encode(),
     "providers[0].execConfig.command"),
    (json.dumps({"providers": [{"name": "a", "execConfig": PLUGIN}, {"name": "a", "execConfig": PLUGIN}]}).encode(),
     "providers[1].name: Duplicate value"),
    (json.dumps({"providers": [{"name": "a", "execConfig": {**PLUGIN, "interactiveMode": "Always"}}]}).encode(),
     "interactiveMode"),
    (json.dumps({"providers": [{"name": "a", "execConfig": {**PLUGIN, "shell": "sh"}}]}).encode(),
     "providers[0].execConfig.shell"),
    (b" " * (1024 * 1024 + 1), "larger than 1 MiB"),
])
def test_a_bad_provider_file_names_its_field(raw: bytes, words: str) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        parse_provider_config(raw)
    assert words in str(caught.value)
