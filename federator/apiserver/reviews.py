"""Who am I and what may I do: kube's self-subject reviews, answered from the authorizer's own rules.

    POST /apis/authentication.k8s.io/v1/selfsubjectreviews          `kubectl auth whoami`
    POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews     `kubectl auth can-i VERB RESOURCE`
    POST /apis/authorization.k8s.io/v1/selfsubjectrulesreviews      `kubectl auth can-i --list`

`review_resources` builds them as verb-only resources (create only, cluster-scoped, listed in
discovery) for `build_api_app`. A SelfSubjectAccessReview is decided by the very `Authorizer` the
request guard (auth.auth_middleware) calls with the same attributes, and a SelfSubjectRulesReview
lists the rules (`auth.principal_rules`) that authorizer evaluates, so `kubectl auth can-i` always
says what the request would get. Every authenticated principal may create these reviews
(auth.EVERYONE_RULES); they only ever describe the caller.

Bodies are decoded like any other (JSON or YAML, size limit, 400 for a body that is not a review
object, 422 naming the field for a spec kube would refuse); nothing is stored. This module must
never store anything, log a request body, or import the simulator or the hub.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from federator.apiserver import errors
from federator.apiserver.app import (
    PRINCIPAL_KEY as APP_PRINCIPAL_KEY,
)
from federator.apiserver.app import (
    JSON_CT,
    Principal,
    SubresourceRequest,
    VerbOnlyResource,
    decode_body,
    json_response,
)
from federator.apiserver.auth import (
    PRINCIPAL_KEY,
    Authorizer,
    PolicyRule,
    RequestAttributes,
    authorize_request,
    principal_namespaces,
    principal_rules,
)
from federator.apiserver.errors import FieldError
from federator.apis.views import Body

__all__ = ["AUTHENTICATION_GROUP", "AUTHORIZATION_GROUP", "review_resources"]

AUTHENTICATION_GROUP: Final = "authentication.k8s.io"
AUTHORIZATION_GROUP: Final = "authorization.k8s.io"
#: kube adds this group to every authenticated user (AS/pkg/authentication/group/authenticated_group_adder.go).
AUTHENTICATED_GROUP: Final = "system:authenticated"

#: (principal) -> every rule that holds for it (the rules the authorizer evaluates)
RulesOf = Callable[[Principal], Sequence[PolicyRule]]

_ATTRIBUTE_FIELDS: Final = ("namespace", "verb", "group", "version", "resource", "subresource", "name")


@dataclass(frozen=True, slots=True)
class _Kind:
    """One review kind: where it lives and what it is called (errors.ResourceNames)."""

    group: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/v1"

    @property
    def qualified_resource(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}"


_WHOAMI = _Kind(AUTHENTICATION_GROUP, "SelfSubjectReview", "selfsubjectreviews")
_ACCESS = _Kind(AUTHORIZATION_GROUP, "SelfSubjectAccessReview", "selfsubjectaccessreviews")
_RULES = _Kind(AUTHORIZATION_GROUP, "SelfSubjectRulesReview", "selfsubjectrulesreviews")


def _principal(request: web.Request) -> Principal:
    principal: Principal | None = request.get(PRINCIPAL_KEY) or request.get(APP_PRINCIPAL_KEY)
    if principal is None:
        raise errors.unauthorized()
    return principal


def _review_body(kind: _Kind, sub: SubresourceRequest) -> dict[str, Any]:
    """The request body as a review object: a JSON/YAML object of this kind (kind and apiVersion
    may be left out: they come from the URL, as for kube's built-in kinds)."""
    body = decode_body(sub.body, sub.request.headers.get("Content-Type", "") or JSON_CT)
    if not isinstance(body, dict):
        raise errors.bad_request(f"the request body must be a {kind.kind} object, not a JSON {type(body).__name__}")
    api_version, object_kind = body.get("apiVersion"), body.get("kind")
    if object_kind not in (None, "", kind.kind):
        raise errors.bad_request(f"the kind in the data ({object_kind}) does not match the expected kind ({kind.kind})")
    if api_version not in (None, "", kind.api_version):
        raise errors.bad_request(f"the API version in the data ({api_version}) does not match the expected API "
                                 f"version ({kind.api_version})")
    for part in ("metadata", "spec"):
        if body.get(part) is not None and not isinstance(body[part], dict):
            raise errors.bad_request(f"{kind.kind}.{part} must be an object")
    return body


def _string(kind: _Kind, value: Any, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise errors.bad_request(f"{kind.kind}.{path} must be a string")
    return value


def _answer(kind: _Kind, body: dict[str, Any], spec: dict[str, Any], status: dict[str, Any]) -> web.Response:
    metadata = {k: v for k, v in Body(body).metadata.items() if k in ("name", "generateName")}
    metadata["creationTimestamp"] = None
    return json_response({"kind": kind.kind, "apiVersion": kind.api_version, "metadata": metadata,
                          "spec": spec, "status": status}, status=201)


async def _whoami(sub: SubresourceRequest) -> web.StreamResponse:
    body = _review_body(_WHOAMI, sub)
    principal = _principal(sub.request)
    groups = list(dict.fromkeys([*principal.groups, AUTHENTICATED_GROUP]))
    user_info: dict[str, Any] = {"username": principal.name, "groups": groups}
    if principal.uid:
        user_info["uid"] = principal.uid
    metadata = {k: v for k, v in Body(body).metadata.items() if k in ("name", "generateName")}
    metadata["creationTimestamp"] = None
    return json_response({"kind": _WHOAMI.kind, "apiVersion": _WHOAMI.api_version, "metadata": metadata,
                          "status": {"userInfo": user_info}}, status=201)


def _access_attributes(spec: dict[str, Any]) -> RequestAttributes:
    """The attributes to decide, from a SelfSubjectAccessReview spec (kube's validation: exactly one
    of resourceAttributes and nonResourceAttributes)."""
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (resource is None) == (non_resource is None):
        raise errors.invalid(_ACCESS, "", [FieldError(
            "spec.resourceAttributes", "FieldValueInvalid",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified")])
    if resource is not None:
        if not isinstance(resource, dict):
            raise errors.bad_request("SelfSubjectAccessReview.spec.resourceAttributes must be an object")
        values = {f: _string(_ACCESS, resource.get(f), f"spec.resourceAttributes.{f}") for f in _ATTRIBUTE_FIELDS}
        return RequestAttributes(True, "", values["verb"], values["group"], values["version"], values["resource"],
                                 values["subresource"], values["namespace"], values["name"])
    if not isinstance(non_resource, dict):
        raise errors.bad_request("SelfSubjectAccessReview.spec.nonResourceAttributes must be an object")
    path = _string(_ACCESS, non_resource.get("path"), "spec.nonResourceAttributes.path")
    verb = _string(_ACCESS, non_resource.get("verb"), "spec.nonResourceAttributes.verb")
    return RequestAttributes(False, path, verb)


def _access_review(authorizer: Authorizer) -> Callable[[SubresourceRequest], Any]:
    async def handle(sub: SubresourceRequest) -> web.StreamResponse:
        body = _review_body(_ACCESS, sub)
        spec = body.get("spec") or {}
        attributes = _access_attributes(spec)
        allowed, reason = authorizer(_principal(sub.request), attributes)
        status: dict[str, Any] = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        return _answer(_ACCESS, body, spec, status)

    return handle


def _rule_entry(rule: PolicyRule) -> tuple[str, dict[str, Any]]:
    if rule.resources:
        return "resourceRules", {"verbs": sorted(rule.verbs), "apiGroups": sorted(rule.api_groups),
                                 "resources": sorted(rule.resources)}
    return "nonResourceRules", {"verbs": sorted(rule.verbs), "nonResourceURLs": sorted(rule.non_resource_urls)}


def _rules_review(rules_of: RulesOf) -> Callable[[SubresourceRequest], Any]:
    async def handle(sub: SubresourceRequest) -> web.StreamResponse:
        body = _review_body(_RULES, sub)
        spec = body.get("spec") or {}
        namespace = _string(_RULES, spec.get("namespace"), "spec.namespace")
        principal = _principal(sub.request)
        own = principal_namespaces(principal)
        status: dict[str, Any] = {"resourceRules": [], "nonResourceRules": [], "incomplete": False}
        for rule in rules_of(principal):
            if rule.applies_in(namespace, own):
                where, entry = _rule_entry(rule)
                if entry not in status[where]:
                    status[where].append(entry)
        return _answer(_RULES, body, spec, status)

    return handle


def review_resources(
    *, authorizer: Authorizer = authorize_request, rules_of: RulesOf = principal_rules
) -> list[VerbOnlyResource]:
    """The three review endpoints, deciding with `authorizer` and listing `rules_of` -- pass the
    same authorizer the request guard uses (the hub's role rules by default)."""
    return [
        VerbOnlyResource(group=AUTHENTICATION_GROUP, version="v1", plural=_WHOAMI.plural,
                         singular="selfsubjectreview", kind=_WHOAMI.kind, namespaced=False, verbs=("create",),
                         handler=_whoami),
        VerbOnlyResource(group=AUTHORIZATION_GROUP, version="v1", plural=_ACCESS.plural,
                         singular="selfsubjectaccessreview", kind=_ACCESS.kind, namespaced=False,
                         verbs=("create",), handler=_access_review(authorizer)),
        VerbOnlyResource(group=AUTHORIZATION_GROUP, version="v1", plural=_RULES.plural,
                         singular="selfsubjectrulesreview", kind=_RULES.kind, namespaced=False,
                         verbs=("create",), handler=_rules_review(rules_of)),
    ]
