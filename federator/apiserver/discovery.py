"""Legacy (unaggregated) discovery documents: /version, /api, /api/v1, /apis,
/apis/<group> and /apis/<group>/<version> (kube-api-notes §7).

Only the legacy format is served; clients that ask for aggregated discovery
fall back automatically because the response Content-Type is plain
application/json. Pure functions of the registry: this module must never do
I/O, and never serve aggregated discovery (clients would misparse it, §7).
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Mapping
from typing import Any

from federator.apiserver.registry import JSONObject, Registry, ResourceType

DEFAULT_VERSION_INFO: dict[str, str] = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.2",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-06-01T00:00:00Z",
    "goVersion": "go1.22.4",
    "compiler": "gc",
    "platform": f"linux/{'arm64' if platform.machine() in ('aarch64', 'arm64') else 'amd64'}",
}


def version_document(overrides: Mapping[str, str] | None = None) -> JSONObject:
    doc: JSONObject = dict(DEFAULT_VERSION_INFO)
    if overrides:
        doc.update(overrides)
    return doc


def api_versions(server_address: str = "127.0.0.1") -> JSONObject:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _resource_entry(rt: ResourceType) -> JSONObject:
    entry: JSONObject = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": sorted(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def api_resource_list(
    registry: Registry,
    *,
    group: str,
    version: str,
    extra_subresources: Iterable[tuple[str, str, str, tuple[str, ...]]] = (),
) -> JSONObject:
    """The APIResourceList of one group/version. `extra_subresources` are
    (plural, subresource, kind, verbs) tuples such as pods/binding."""
    resources: list[JSONObject] = []
    extras = list(extra_subresources)
    for rt in registry.in_group_version(group, version):
        resources.append(_resource_entry(rt))
        if rt.status_subresource:
            resources.append({
                "name": f"{rt.plural}/status", "singularName": "", "namespaced": rt.namespaced,
                "kind": rt.kind, "verbs": sorted(rt.status_verbs),
            })
        for plural, sub, kind, verbs in extras:
            if plural == rt.plural:
                resources.append({
                    "name": f"{plural}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                    "kind": kind, "verbs": sorted(verbs),
                })
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def _group_entry(group: str, versions: list[str]) -> JSONObject:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": dict(entries[0])}


def _groups(registry: Registry, extra_group_versions: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Named groups -> versions: the registry's, then groups that only have verb-only resources
    (e.g. authorization.k8s.io for SelfSubjectAccessReview)."""
    groups = {g: list(vs) for g, vs in registry.groups().items()}
    for group, version in extra_group_versions:
        if group and version not in groups.setdefault(group, []):
            groups[group].append(version)
    return groups


def api_group_list(registry: Registry, *, extra_group_versions: Iterable[tuple[str, str]] = ()) -> JSONObject:
    groups = [_group_entry(g, vs) for g, vs in _groups(registry, extra_group_versions).items()]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str, *,
              extra_group_versions: Iterable[tuple[str, str]] = ()) -> JSONObject | None:
    versions = _groups(registry, extra_group_versions).get(group)
    if not versions:
        return None
    doc: dict[str, Any] = {"kind": "APIGroup", "apiVersion": "v1"}
    doc.update(_group_entry(group, versions))
    return doc
