"""Roles: admin does everything, researchers own TrainingJobs in their namespaces, viewers only read."""

from __future__ import annotations

import pytest

from federator.apiserver.app import Principal
from federator.apiserver.auth import (
    RequestAttributes,
    authorize,
    authorize_request,
    principal_namespaces,
    principal_roles,
    request_attributes,
)

ADMIN = Principal("alice", ("federator:admin",))
MASTERS = Principal("root", ("system:masters",))
RESEARCHER = Principal("bob", ("federator:researcher", "ns:default", "ns:vision"))
VIEWER = Principal("carol", ("federator:viewer",))
NOBODY = Principal("dave", ())
RESEARCHER_VIEWER = Principal("erin", ("federator:researcher", "federator:viewer", "ns:default"))

G = "federator.dev"
ALL_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
READ_VERBS = ("get", "list", "watch")


def allowed(principal: Principal, verb: str, resource: str, namespace: str | None, *, group: str = G,
            subresource: str | None = None) -> bool:
    ok, reason = authorize(principal, verb=verb, group=group, resource=resource, namespace=namespace,
                           name=None, subresource=subresource)
    assert reason
    return ok


@pytest.mark.parametrize("verb", ALL_VERBS)
@pytest.mark.parametrize("resource,namespace", [("trainingjobs", "default"), ("trainingjobs", "other"),
                                                ("trainingjobs", None), ("memberclusters", None)])
def test_admin_may_do_everything(verb: str, resource: str, namespace: str | None) -> None:
    assert allowed(ADMIN, verb, resource, namespace)
    assert allowed(MASTERS, verb, resource, namespace)
    assert allowed(ADMIN, verb, "trainingjobs", "default", subresource="status")


@pytest.mark.parametrize("verb", ("get", "list", "watch", "create", "update", "patch", "delete"))
@pytest.mark.parametrize("namespace", ["default", "vision"])
def test_researcher_owns_jobs_in_own_namespaces(verb: str, namespace: str) -> None:
    assert allowed(RESEARCHER, verb, "trainingjobs", namespace)


@pytest.mark.parametrize("verb", ALL_VERBS)
@pytest.mark.parametrize("namespace", ["other", "kube-system", None, ""])
def test_researcher_is_refused_elsewhere(verb: str, namespace: str | None) -> None:
    assert not allowed(RESEARCHER, verb, "trainingjobs", namespace)


@pytest.mark.parametrize("verb", WRITE_VERBS)
def test_researcher_cannot_write_clusters_or_status(verb: str) -> None:
    assert not allowed(RESEARCHER, verb, "memberclusters", None)
    assert not allowed(RESEARCHER, verb, "trainingjobs", "default", subresource="status")


def test_researcher_may_read_clusters_status_and_events() -> None:
    for verb in READ_VERBS:
        assert allowed(RESEARCHER, verb, "memberclusters", None)
        assert allowed(RESEARCHER, verb, "trainingjobs", "default", subresource="status")
        assert allowed(RESEARCHER, verb, "events", "default", group="")
        assert not allowed(RESEARCHER, verb, "events", "other", group="")
    assert not allowed(RESEARCHER, "deletecollection", "trainingjobs", "default")
    assert not allowed(RESEARCHER, "get", "secrets", "default", group="")
    assert not allowed(RESEARCHER, "get", "trainingjobs", "default", group="other.io")


@pytest.mark.parametrize("verb", ALL_VERBS)
@pytest.mark.parametrize("resource,namespace", [("trainingjobs", "default"), ("trainingjobs", None),
                                                ("memberclusters", None)])
def test_viewer_only_reads(verb: str, resource: str, namespace: str | None) -> None:
    assert allowed(VIEWER, verb, resource, namespace) == (verb in READ_VERBS)


def test_roles_combine_as_a_union() -> None:
    assert allowed(RESEARCHER_VIEWER, "list", "trainingjobs", "other")
    assert allowed(RESEARCHER_VIEWER, "create", "trainingjobs", "default")
    assert not allowed(RESEARCHER_VIEWER, "create", "trainingjobs", "other")


def test_no_role_means_no_access_with_a_reason() -> None:
    ok, reason = authorize(NOBODY, verb="get", group=G, resource="trainingjobs", namespace="default", name="x")
    assert not ok and "no federator role group" in reason


def test_denial_uses_kube_wording() -> None:
    ok, reason = authorize(RESEARCHER, verb="list", group=G, resource="trainingjobs", namespace="other")
    assert not ok
    assert reason == 'User "bob" cannot list resource "trainingjobs" in API group "federator.dev" in the namespace "other"'
    ok, reason = authorize(VIEWER, verb="create", group=G, resource="memberclusters", namespace=None)
    assert reason == 'User "carol" cannot create resource "memberclusters" in API group "federator.dev" at the cluster scope'


def test_roles_and_namespaces_come_from_groups() -> None:
    assert principal_roles(RESEARCHER_VIEWER) == {"researcher", "viewer"}
    assert principal_namespaces(RESEARCHER) == {"default", "vision"}
    assert principal_namespaces(Principal("x", ("ns:",))) == frozenset()


@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", "/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs", {},
     ("list", G, "trainingjobs", "", "default", "")),
    ("GET", "/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs", {"watch": "true"},
     ("watch", G, "trainingjobs", "", "default", "")),
    ("GET", "/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs", {"watch": "True"},
     ("watch", G, "trainingjobs", "", "default", "")),
    ("GET", "/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs", {"watch": "0"},
     ("list", G, "trainingjobs", "", "default", "")),
    ("GET", "/apis/federator.dev/v1alpha1/trainingjobs", {}, ("list", G, "trainingjobs", "", "", "")),
    ("GET", "/apis/federator.dev/v1alpha1/watch/namespaces/default/trainingjobs", {},
     ("watch", G, "trainingjobs", "", "default", "")),
    ("GET", "/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs/j1", {},
     ("get", G, "trainingjobs", "", "default", "j1")),
    ("GET", "/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs/j1/status", {},
     ("get", G, "trainingjobs", "status", "default", "j1")),
    ("PUT", "/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs/j1/status", {},
     ("update", G, "trainingjobs", "status", "default", "j1")),
    ("POST", "/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs", {},
     ("create", G, "trainingjobs", "", "default", "")),
    ("PATCH", "/apis/federator.dev/v1alpha1/memberclusters/onprem-a", {},
     ("patch", G, "memberclusters", "", "", "onprem-a")),
    ("DELETE", "/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs", {},
     ("deletecollection", G, "trainingjobs", "", "default", "")),
    ("DELETE", "/apis/federator.dev/v1alpha1/namespaces/default/trainingjobs/j1", {},
     ("delete", G, "trainingjobs", "", "default", "j1")),
    ("GET", "/api/v1/namespaces/default/events", {}, ("list", "", "events", "", "default", "")),
    ("GET", "/api/v1/namespaces/default", {}, ("get", "", "namespaces", "", "default", "default")),
    ("GET", "/api/v1/namespaces", {}, ("list", "", "namespaces", "", "", "")),
])
def test_request_attributes(method: str, path: str, query: dict[str, str],
                            expected: tuple[str, str, str, str, str, str]) -> None:
    attributes = request_attributes(method, path, query)
    assert attributes.is_resource_request
    assert (attributes.verb, attributes.group, attributes.resource, attributes.subresource,
            attributes.namespace, attributes.name) == expected


@pytest.mark.parametrize("path", ["/api", "/apis", "/apis/federator.dev", "/apis/federator.dev/v1alpha1",
                                  "/api/v1", "/openapi/v3", "/openapi/v3/apis/federator.dev/v1alpha1", "/version",
                                  "/healthz"])
def test_discovery_is_open_to_every_authenticated_user(path: str) -> None:
    attributes = request_attributes("GET", path, {})
    assert not attributes.is_resource_request
    for principal in (ADMIN, RESEARCHER, VIEWER, NOBODY):
        assert authorize_request(principal, attributes)[0]


def test_other_non_resource_paths() -> None:
    metrics = RequestAttributes(False, "/metrics", "get")
    assert authorize_request(VIEWER, metrics)[0] and authorize_request(ADMIN, metrics)[0]
    assert not authorize_request(RESEARCHER, metrics)[0]
    post = request_attributes("POST", "/apis", {})
    assert not authorize_request(VIEWER, post)[0]
    assert not authorize_request(RESEARCHER, request_attributes("GET", "/debug/pprof", {}))[0]
