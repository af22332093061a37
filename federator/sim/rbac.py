"""RBAC for a simulated member cluster: kube's RBAC authorizer over Role, ClusterRole, RoleBinding and
ClusterRoleBinding documents (for example `kubectl kustomize deploy/member/schedulers/volcano`).

`load_policy(path)` / `parse_policy(text)` read a multi-document YAML file, keep the four RBAC kinds
(`rbac.authorization.k8s.io/v1`), the Namespace and ServiceAccount documents, and ignore every other
kind (Deployments, ConfigMaps, Secrets, ...). Anything malformed is a `PolicyError` naming the file, the
document and the field; nothing is half-loaded (a policy is built only from a file that validates whole).
Validation follows kube's (pkg/apis/rbac/validation): verbs required; a resource rule needs apiGroups and
resources; nonResourceURLs only in ClusterRoles and never mixed with resources; a RoleBinding's roleRef
is a Role or ClusterRole, a ClusterRoleBinding's a ClusterRole; subjects are User, Group (apiGroup
rbac.authorization.k8s.io) or ServiceAccount (apiGroup "", namespace required in a ClusterRoleBinding).
`aggregationRule` is refused (the simulator runs no aggregation controller).

`RbacPolicy.authorize(principal, attributes)` decides as kube's RBAC authorizer does
(plugin/pkg/auth/authorizer/rbac): the group `system:masters` may do everything (kube-apiserver's
privileged-group authorizer); otherwise a request is allowed when a rule of a role bound to the user,
one of its groups or its ServiceAccount allows it:
- ClusterRoleBindings apply everywhere, cluster-scoped requests included; RoleBindings only to requests
  in their own namespace (`GET /api/v1/namespaces/X` is in namespace X, as kube's RequestInfo says);
- verbs (get, list, watch, create, update, patch, delete, deletecollection: list and watch are separate),
  apiGroups, resources (`pods/status` for a subresource, `*`, `*/status`), resourceNames (a request
  without a name never matches a rule that lists names), nonResourceURLs (exact, or a `prefix*`);
- kube's bootstrap policy every cluster has: system:discovery and system:public-info-viewer (reading
  /api, /apis, /openapi, /version and the health probes) for every authenticated user.
A binding whose role does not exist grants nothing, and a denial says so, as kube's does (`... : RBAC:
clusterrole.rbac.authorization.k8s.io "x" not found`). Denials use kube-apiserver's wording
(endpoints/handlers/responsewriters `forbiddenMessage`).

ServiceAccount users are `system:serviceaccount:NS:NAME` with the groups `system:serviceaccounts`,
`system:serviceaccounts:NS` and `system:authenticated` (`service_account_user`, `service_account_groups`).

This module never imports the hub, and keeps no state beyond the policy it was given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from federator.apis.common import dns1123_label_errors, dns1123_subdomain_errors
from federator.apiserver.app import Principal
from federator.apiserver.auth import RequestAttributes

__all__ = [
    "MAX_POLICY_BYTES",
    "PolicyError",
    "PolicyRule",
    "RbacPolicy",
    "load_policy",
    "parse_policy",
    "service_account_groups",
    "service_account_user",
]

RBAC_GROUP: Final = "rbac.authorization.k8s.io"
RBAC_API_VERSION: Final = f"{RBAC_GROUP}/v1"
SUPERUSER_GROUP: Final = "system:masters"
AUTHENTICATED_GROUP: Final = "system:authenticated"
#: Largest policy file read (a rendered deploy/member is a few KiB).
MAX_POLICY_BYTES: Final = 4 * 1024 * 1024
MAX_DOCUMENTS: Final = 10_000
_RBAC_KINDS: Final = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")


class PolicyError(ValueError):
    """An RBAC file that cannot be used; the message names the file, the document and the field."""


def service_account_user(namespace: str, name: str) -> str:
    """The user name kube gives a ServiceAccount's tokens."""
    return f"system:serviceaccount:{namespace}:{name}"


def service_account_groups(namespace: str) -> tuple[str, ...]:
    """The groups kube gives a ServiceAccount's tokens."""
    return ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED_GROUP)


# ---------------------------------------------------------------- the policy


@dataclass(frozen=True, slots=True)
class PolicyRule:
    verbs: frozenset[str]
    api_groups: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    resource_names: frozenset[str] = frozenset()
    non_resource_urls: tuple[str, ...] = ()

    def allows(self, attributes: RequestAttributes) -> bool:
        """kube's rbac.RuleAllows (plugin/pkg/auth/authorizer/rbac/rbac.go)."""
        if not (attributes.verb in self.verbs or "*" in self.verbs):
            return False
        if not attributes.is_resource_request:
            return any(_url_matches(url, attributes.path) for url in self.non_resource_urls)
        if not (attributes.group in self.api_groups or "*" in self.api_groups):
            return False
        if not _resource_matches(self.resources, attributes.resource, attributes.subresource):
            return False
        return not self.resource_names or attributes.name in self.resource_names


def _url_matches(rule_url: str, path: str) -> bool:
    if rule_url == "*" or rule_url == path:
        return True
    return rule_url.endswith("*") and path.startswith(rule_url[:-1])


def _resource_matches(resources: frozenset[str], resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    if "*" in resources or combined in resources:
        return True
    return bool(subresource) and f"*/{subresource}" in resources


@dataclass(frozen=True, slots=True)
class Subject:
    kind: str
    name: str
    namespace: str = ""

    def applies_to(self, principal: Principal, *, binding_namespace: str) -> bool:
        """kube's appliesToUser: a ServiceAccount subject without a namespace is in the binding's."""
        if self.kind == "User":
            return principal.name == self.name
        if self.kind == "Group":
            return self.name in principal.groups
        namespace = self.namespace or binding_namespace
        return bool(namespace) and principal.name == service_account_user(namespace, self.name)


@dataclass(frozen=True, slots=True)
class Binding:
    kind: str
    name: str
    #: "" for a ClusterRoleBinding
    namespace: str
    role_kind: str
    role_name: str
    subjects: tuple[Subject, ...]

    def binds(self, principal: Principal) -> bool:
        return any(s.applies_to(principal, binding_namespace=self.namespace) for s in self.subjects)

    def describe(self) -> str:
        lower = self.kind.lower()
        return f'{lower} "{self.name}"' + (f' in namespace "{self.namespace}"' if self.namespace else "")


#: kube's bootstrap policy (plugin/pkg/auth/authorizer/rbac/bootstrappolicy): system:discovery and
#: system:public-info-viewer, bound to system:authenticated (and the probes to everyone).
_BOOTSTRAP_RULES: Final = (
    PolicyRule(verbs=frozenset({"get"}), non_resource_urls=(
        "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz",
        "/version", "/version/")),
)


@dataclass(frozen=True, slots=True)
class RbacPolicy:
    """Roles, ClusterRoles and their bindings, plus the Namespaces and ServiceAccounts of the same file."""

    roles: Mapping[tuple[str, str], tuple[PolicyRule, ...]]
    cluster_roles: Mapping[str, tuple[PolicyRule, ...]]
    bindings: tuple[Binding, ...]
    #: Namespace documents of the file (what `kubectl apply` of it would create)
    namespaces: tuple[str, ...] = ()
    #: every ServiceAccount the file defines or binds, as (namespace, name), in file order
    service_accounts: tuple[tuple[str, str], ...] = ()
    source: str = "RBAC policy"

    def authorize(self, principal: Principal, attributes: RequestAttributes) -> tuple[bool, str]:
        """(allowed, why): kube's RBAC decision for `principal` doing `attributes`; a denial's `why` is
        kube-apiserver's forbidden text (`User "..." cannot list resource "pods" in API group "" ...`)."""
        if SUPERUSER_GROUP in principal.groups:
            return True, f"group {SUPERUSER_GROUP} may do everything"
        if AUTHENTICATED_GROUP in principal.groups and any(r.allows(attributes) for r in _BOOTSTRAP_RULES):
            return True, "kube's bootstrap policy (system:discovery, system:public-info-viewer)"
        missing: list[str] = []
        for binding in self.bindings:
            if binding.namespace and binding.namespace != attributes.namespace:
                continue
            if not binding.binds(principal):
                continue
            rules = self._rules_of(binding)
            if rules is None:
                missing.append(f'{binding.role_kind.lower()}.{RBAC_GROUP} "{binding.role_name}" not found')
                continue
            for rule in rules:
                if rule.allows(attributes):
                    return True, f"allowed by {binding.describe()} ({binding.role_kind} {binding.role_name})"
        why = forbidden_message(principal, attributes)
        if missing:
            listed = missing[0] if len(missing) == 1 else "[" + ", ".join(missing) + "]"
            why += f": RBAC: {listed}"
        return False, why

    def _rules_of(self, binding: Binding) -> tuple[PolicyRule, ...] | None:
        if binding.role_kind == "ClusterRole":
            return self.cluster_roles.get(binding.role_name)
        return self.roles.get((binding.namespace, binding.role_name))


def forbidden_message(principal: Principal, attributes: RequestAttributes) -> str:
    """kube-apiserver's `forbiddenMessage` (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/
    errors.go)."""
    if not attributes.is_resource_request:
        return f'User "{principal.name}" cannot {attributes.verb} path "{attributes.path}"'
    resource = attributes.resource + (f"/{attributes.subresource}" if attributes.subresource else "")
    where = (f' in the namespace "{attributes.namespace}"' if attributes.namespace else " at the cluster scope")
    return (f'User "{principal.name}" cannot {attributes.verb} resource "{resource}" in API group '
            f'"{attributes.group}"{where}')


# ---------------------------------------------------------------- reading a policy file


def load_policy(path: str | os.PathLike[str]) -> RbacPolicy:
    """The policy in the YAML file at `path`; PolicyError saying what is wrong with it."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if not file.is_file():
            raise PolicyError(f"RBAC file {file}: not a regular file")
        if size > MAX_POLICY_BYTES:
            raise PolicyError(f"RBAC file {file}: larger than {MAX_POLICY_BYTES} bytes")
        data = file.read_bytes()
    except OSError as e:
        raise PolicyError(f"RBAC file {file}: cannot read it ({e.strerror or e})") from None
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(f"RBAC file {file}: larger than {MAX_POLICY_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise PolicyError(f"RBAC file {file}: not UTF-8 (byte {e.start})") from None
    return parse_policy(text, source=f"RBAC file {file}")


def parse_policy(text: str, *, source: str = "RBAC policy") -> RbacPolicy:
    """The policy in multi-document YAML `text`; PolicyError naming `source`, the document and the field."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_POLICY_BYTES:
        raise PolicyError(f"{source}: larger than {MAX_POLICY_BYTES} bytes")
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise PolicyError(f"{source}: not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise PolicyError(f"{source}: not valid YAML: nested too deeply") from None
    if len(documents) > MAX_DOCUMENTS:
        raise PolicyError(f"{source}: more than {MAX_DOCUMENTS} documents")
    return _Builder(source).build(documents)


class _Builder:
    def __init__(self, source: str) -> None:
        self.source = source
        self.roles: dict[tuple[str, str], tuple[PolicyRule, ...]] = {}
        self.cluster_roles: dict[str, tuple[PolicyRule, ...]] = {}
        self.bindings: list[Binding] = []
        self.namespaces: list[str] = []
        self.service_accounts: dict[tuple[str, str], None] = {}
        self.seen: dict[tuple[str, str, str], int] = {}

    def build(self, documents: Sequence[Any]) -> RbacPolicy:
        found = 0
        for index, document in enumerate(documents, start=1):
            if document is None:
                continue
            if not isinstance(document, Mapping):
                raise PolicyError(f"{self.source}: document {index}: not a mapping (an object with apiVersion "
                                  f"and kind), but {_type_name(document)}")
            kind = document.get("kind")
            if kind in ("List", "RoleList", "ClusterRoleList", "RoleBindingList", "ClusterRoleBindingList"):
                raise PolicyError(f"{self.source}: document {index}: kind {kind} is not supported; give the "
                                  "objects as separate YAML documents (kubectl kustomize does)")
            if kind in _RBAC_KINDS:
                self._rbac(index, document)
                found += 1
            elif kind == "Namespace" and document.get("apiVersion") == "v1":
                self.namespaces.append(self._name(index, document, dns_label=True))
            elif kind == "ServiceAccount" and document.get("apiVersion") == "v1":
                name = self._name(index, document, dns_label=False)
                self.service_accounts[(self._namespace(index, document), name)] = None
            elif not isinstance(kind, str) or not kind:
                raise PolicyError(f"{self.source}: document {index}: kind is missing")
        if not found:
            raise PolicyError(f"{self.source}: no Role, ClusterRole, RoleBinding or ClusterRoleBinding in it")
        for binding in self.bindings:
            for subject in binding.subjects:
                if subject.kind == "ServiceAccount":
                    self.service_accounts[(subject.namespace or binding.namespace, subject.name)] = None
        return RbacPolicy(roles=dict(self.roles), cluster_roles=dict(self.cluster_roles),
                          bindings=tuple(self.bindings), namespaces=tuple(dict.fromkeys(self.namespaces)),
                          service_accounts=tuple(self.service_accounts), source=self.source)

    # ------------------------------------------------------------ documents

    def _where(self, index: int, kind: str, name: str = "", namespace: str = "") -> str:
        shown = f" {namespace}/{name}" if namespace and name else (f" {name}" if name else "")
        return f"{self.source}: document {index} ({kind}{shown})"

    def _name(self, index: int, document: Mapping[str, Any], *, dns_label: bool) -> str:
        kind = str(document.get("kind"))
        meta = document.get("metadata")
        if not isinstance(meta, Mapping):
            raise PolicyError(f"{self._where(index, kind)}: metadata is required")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise PolicyError(f"{self._where(index, kind)}: metadata.name is required")
        if (dns1123_label_errors if dns_label else dns1123_subdomain_errors)(name):
            raise PolicyError(f"{self._where(index, kind)}: metadata.name {name[:80]!r} is not a valid name")
        return name

    def _namespace(self, index: int, document: Mapping[str, Any]) -> str:
        kind = str(document.get("kind"))
        meta = document.get("metadata")
        namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
        if not isinstance(namespace, str) or not namespace:
            raise PolicyError(f"{self._where(index, kind, str((meta or {}).get('name') or ''))}: "
                              "metadata.namespace is required (kubectl kustomize output carries it)")
        if dns1123_label_errors(namespace):
            raise PolicyError(f"{self._where(index, kind)}: metadata.namespace {namespace[:80]!r} is not a valid "
                              "namespace name")
        return namespace

    def _rbac(self, index: int, document: Mapping[str, Any]) -> None:
        kind = str(document["kind"])
        api_version = document.get("apiVersion")
        if api_version != RBAC_API_VERSION:
            raise PolicyError(f"{self._where(index, kind)}: apiVersion must be {RBAC_API_VERSION}, not "
                              f"{str(api_version)[:80]!r}")
        name = self._name(index, document, dns_label=False)
        namespaced = kind in ("Role", "RoleBinding")
        namespace = self._namespace(index, document) if namespaced else ""
        where = self._where(index, kind, name, namespace)
        key = (kind, namespace, name)
        if key in self.seen:
            raise PolicyError(f"{where}: defined twice (also document {self.seen[key]})")
        self.seen[key] = index
        if kind in ("Role", "ClusterRole"):
            if document.get("aggregationRule") is not None:
                raise PolicyError(f"{where}: aggregationRule is not supported (list the rules themselves)")
            rules = self._rules(where, document.get("rules"), namespaced=namespaced)
            if namespaced:
                self.roles[(namespace, name)] = rules
            else:
                self.cluster_roles[name] = rules
        else:
            self.bindings.append(self._binding(where, kind, name, namespace, document))

    def _rules(self, where: str, value: Any, *, namespaced: bool) -> tuple[PolicyRule, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise PolicyError(f"{where}: rules must be a list, not {_type_name(value)}")
        rules = []
        for i, rule in enumerate(value):
            at = f"{where}: rules[{i}]"
            if not isinstance(rule, Mapping):
                raise PolicyError(f"{at}: must be a mapping, not {_type_name(rule)}")
            unknown = sorted(set(rule) - {"verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs"})
            if unknown:
                raise PolicyError(f"{at}: unknown field {str(unknown[0])[:80]!r}")
            verbs = _strings(at, rule, "verbs")
            groups = _strings(at, rule, "apiGroups", allow_empty_string=True)
            resources = _strings(at, rule, "resources")
            names = _strings(at, rule, "resourceNames")
            urls = _strings(at, rule, "nonResourceURLs")
            if not verbs:
                raise PolicyError(f"{at}.verbs: Required value: verbs must contain at least one value")
            if urls:
                if namespaced:
                    raise PolicyError(f"{at}.nonResourceURLs: Invalid value: namespaced rules cannot apply to "
                                      "non-resource URLs")
                if groups or resources:
                    raise PolicyError(f"{at}.nonResourceURLs: Invalid value: rules cannot apply to both regular "
                                      "resources and non-resource URLs")
                for url in urls:
                    if not url.startswith("/") and url != "*":
                        raise PolicyError(f"{at}.nonResourceURLs: Invalid value: {url[:80]!r}: must start with /")
            else:
                if not groups:
                    raise PolicyError(f"{at}.apiGroups: Required value: resource rules must supply at least one "
                                      "api group")
                if not resources:
                    raise PolicyError(f"{at}.resources: Required value: resource rules must supply at least one "
                                      "resource")
            rules.append(PolicyRule(verbs=frozenset(verbs), api_groups=frozenset(groups),
                                    resources=frozenset(resources), resource_names=frozenset(names),
                                    non_resource_urls=tuple(urls)))
        return tuple(rules)

    def _binding(self, where: str, kind: str, name: str, namespace: str, document: Mapping[str, Any]) -> Binding:
        ref = document.get("roleRef")
        if not isinstance(ref, Mapping):
            raise PolicyError(f"{where}: roleRef is required")
        if ref.get("apiGroup") != RBAC_GROUP:
            raise PolicyError(f"{where}: roleRef.apiGroup must be {RBAC_GROUP}")
        role_kind = ref.get("kind")
        allowed = ("Role", "ClusterRole") if namespace else ("ClusterRole",)
        if role_kind not in allowed:
            raise PolicyError(f"{where}: roleRef.kind must be {' or '.join(allowed)}, not {str(role_kind)[:80]!r}")
        role_name = ref.get("name")
        if not isinstance(role_name, str) or not role_name:
            raise PolicyError(f"{where}: roleRef.name is required")
        raw = document.get("subjects")
        if raw is None:
            raw = []
        if not isinstance(raw, list):
            raise PolicyError(f"{where}: subjects must be a list, not {_type_name(raw)}")
        subjects = [self._subject(f"{where}: subjects[{i}]", s, namespaced=bool(namespace))
                    for i, s in enumerate(raw)]
        return Binding(kind=kind, name=name, namespace=namespace, role_kind=str(role_kind), role_name=role_name,
                       subjects=tuple(subjects))

    def _subject(self, at: str, value: Any, *, namespaced: bool) -> Subject:
        if not isinstance(value, Mapping):
            raise PolicyError(f"{at}: must be a mapping, not {_type_name(value)}")
        kind, name, group = value.get("kind"), value.get("name"), value.get("apiGroup", "")
        namespace = value.get("namespace", "")
        if not isinstance(name, str) or not name:
            raise PolicyError(f"{at}.name: Required value")
        if not isinstance(namespace, str):
            raise PolicyError(f"{at}.namespace: must be a string")
        if kind == "ServiceAccount":
            if group not in ("", None):
                raise PolicyError(f"{at}.apiGroup: Unsupported value: {str(group)[:80]!r}: supported values: \"\"")
            if dns1123_subdomain_errors(name):
                raise PolicyError(f"{at}.name: Invalid value: {name[:80]!r}: not a valid ServiceAccount name")
            if not namespace and not namespaced:
                raise PolicyError(f"{at}.namespace: Required value (a ServiceAccount subject of a "
                                  "ClusterRoleBinding names its namespace)")
            if namespace and dns1123_label_errors(namespace):
                raise PolicyError(f"{at}.namespace: Invalid value: {namespace[:80]!r}")
        elif kind in ("User", "Group"):
            if group != RBAC_GROUP:
                raise PolicyError(f"{at}.apiGroup: Unsupported value: {str(group)[:80]!r}: supported values: "
                                  f"\"{RBAC_GROUP}\"")
        else:
            raise PolicyError(f"{at}.kind: Unsupported value: {str(kind)[:80]!r}: supported values: "
                              "\"Group\", \"ServiceAccount\", \"User\"")
        return Subject(kind=str(kind), name=name, namespace=namespace)


def _strings(at: str, rule: Mapping[str, Any], field: str, *, allow_empty_string: bool = False) -> list[str]:
    value = rule.get(field)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicyError(f"{at}.{field}: must be a list of strings")
    for v in value:
        if not v and not allow_empty_string:
            raise PolicyError(f"{at}.{field}: Invalid value: \"\": must not be empty")
        if len(v) > 1024:
            raise PolicyError(f"{at}.{field}: Invalid value: a value is longer than 1024 characters")
    return list(value)


def _type_name(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(
        type(value), type(value).__name__)

