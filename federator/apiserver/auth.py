"""Bearer-token authentication and role-based authorization for a kube-style API server.

Tokens come from a file in kube-apiserver's `--token-auth-file` format, one
user per line:

    token,user,uid,"group1,group2"

The fourth column is optional. Blank lines and lines starting with `#` are
skipped. Roles and namespaces are groups:

    federator:admin        everything, including MemberCluster writes
                           (`system:masters` is accepted as a synonym)
    federator:researcher   TrainingJobs in its own namespaces only (get, list,
                           watch, create, update, patch, delete), reading
                           their status, their pods' logs (trainingjobs/log)
                           and member pods (trainingjobs/pods), and Events
                           (core v1 and events.k8s.io)
                           there; reading MemberClusters, DrillReports,
                           Queues (and their status) and PriorityClasses;
                           get of its own namespaces' Namespace objects
                           (not a list of all namespaces, as with kube
                           RBAC; only admins create, label or delete them)
    federator:viewer       get, list and watch of everything
    ns:<namespace>         a researcher's namespace (at least one is required)

A principal with several roles gets the union of what they allow. Every
authenticated principal may read discovery, /version and /openapi; the
health probes (/healthz, /livez, /readyz) need no token.

What each role may do is data: `ROLE_RULES` (plus `EVERYONE_RULES` for every
authenticated principal) lists kube-RBAC-like `PolicyRule`s. `authorize` and
`authorize_request` (the request guard) and the SelfSubject*Review endpoints
(reviews.py) all read those rules, so `kubectl auth can-i` answers exactly what
a request gets.

`authenticate` reads `Authorization: Bearer <token>` as kube's bearertoken
authenticator does (header trimmed, scheme case-insensitive, the token is the
second space-separated word, an empty one -- `Bearer  TOKEN` -- is refused
with kube's warning) and compares tokens in constant time. `auth_middleware`
combines both into 401/403 Status responses.

This module must never log, return or put into an error message a token or
any part of one (including token-file parse errors, which name lines only),
and never import the simulator or the hub.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import os
import secrets
import stat
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from federator.apis.jobkinds import JOB_KINDS
from federator.apis.jobkinds.runtimes import CLUSTER_RUNTIME, TRAINING_RUNTIME
from federator.apiserver.app import Principal
from federator.apiserver.errors import ApiError, forbidden, unauthorized, warning_headers

__all__ = [
    "ADMIN_GROUPS",
    "ANY_NAMESPACE",
    "EVERYONE_RULES",
    "EXTRA_SPACE_WARNING",
    "OWN_NAMESPACES",
    "ROLE_RULES",
    "Authorizer",
    "PolicyRule",
    "NAMESPACE_GROUP_PREFIX",
    "PRINCIPAL_KEY",
    "RESEARCHER_GROUP",
    "VIEWER_GROUP",
    "RequestAttributes",
    "TokenAuthenticator",
    "TokenFileError",
    "auth_middleware",
    "authorize",
    "authorize_path",
    "authorize_request",
    "bearer_token",
    "parse_token_file",
    "principal_namespaces",
    "principal_roles",
    "principal_rules",
    "request_attributes",
]

ADMIN_GROUPS: Final = frozenset({"federator:admin", "system:masters"})
RESEARCHER_GROUP: Final = "federator:researcher"
VIEWER_GROUP: Final = "federator:viewer"
NAMESPACE_GROUP_PREFIX: Final = "ns:"
FEDERATOR_GROUP: Final = "federator.dev"
# Where the middleware leaves the authenticated principal for handlers and logs.
PRINCIPAL_KEY: Final = web.RequestKey("federator.principal", Principal)

READ_VERBS: Final = frozenset({"get", "list", "watch"})
RESEARCHER_JOB_VERBS: Final = frozenset({"get", "list", "watch", "create", "update", "patch", "delete"})
# Probes a kubelet or load balancer calls without credentials.
PUBLIC_PATHS: Final = frozenset({"/healthz", "/livez", "/readyz"})

_MAX_TOKEN_FILE_BYTES = 10 * 1024 * 1024
_MAX_TOKEN_BYTES = 64 * 1024
_SHORT_TOKEN = 16

Logger = Any  # a structlog BoundLogger (federator.obs.get_logger); typed loosely like obs does


class TokenFileError(ValueError):
    """A token file that cannot be used; the message names the file and line, never a token."""


@dataclass(frozen=True, slots=True)
class _TokenEntry:
    digest: bytes
    principal: Principal
    uid: str
    line: int


def _groups_of(principal: Principal) -> frozenset[str]:
    return frozenset(principal.groups)


def principal_roles(principal: Principal) -> frozenset[str]:
    """The roles ("admin", "researcher", "viewer") a principal's groups grant."""
    groups = _groups_of(principal)
    roles = set()
    if groups & ADMIN_GROUPS:
        roles.add("admin")
    if RESEARCHER_GROUP in groups:
        roles.add("researcher")
    if VIEWER_GROUP in groups:
        roles.add("viewer")
    return frozenset(roles)


def principal_namespaces(principal: Principal) -> frozenset[str]:
    """The namespaces named by a principal's `ns:<namespace>` groups."""
    return frozenset(
        g[len(NAMESPACE_GROUP_PREFIX):] for g in principal.groups
        if g.startswith(NAMESPACE_GROUP_PREFIX) and len(g) > len(NAMESPACE_GROUP_PREFIX)
    )


# --------------------------------------------------------------------------- token file


def parse_token_file(text: str, *, source: str = "token file") -> list[tuple[str, Principal, str, int]]:
    """Parse token-file text into (token, principal, uid, line) rows, or raise `TokenFileError`.

    Errors name `source` and the line, never the token.
    """
    rows: list[tuple[str, Principal, str, int]] = []
    seen_tokens: dict[str, int] = {}
    seen_users: dict[str, int] = {}
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{source}: line {number}"
        try:
            records = list(csv.reader(io.StringIO(raw), skipinitialspace=False, strict=True))
        except csv.Error as exc:
            raise TokenFileError(f"{where}: not valid CSV ({exc})") from None
        if len(records) != 1:
            raise TokenFileError(f"{where}: not valid CSV (unterminated quote?)")
        record = [field.strip() for field in records[0]]
        if len(record) < 3:
            raise TokenFileError(
                f"{where}: expected at least 3 columns (token,user,uid[,\"group1,group2\"]), found {len(record)}"
            )
        if len(record) > 4:
            raise TokenFileError(
                f"{where}: expected at most 4 columns (token,user,uid,\"group1,group2\"), found {len(record)}; "
                "quote the groups column"
            )
        token, user, uid = record[0], record[1], record[2]
        if not token:
            raise TokenFileError(f"{where}: column 1 (token) is empty")
        if any(c.isspace() for c in token) or len(token.encode()) > _MAX_TOKEN_BYTES:
            raise TokenFileError(f"{where}: column 1 (token) must be at most 64 KiB without whitespace")
        if not user:
            raise TokenFileError(f"{where}: column 2 (user name) is empty")
        if not uid:
            raise TokenFileError(f"{where}: column 3 (uid) is empty")
        if token in seen_tokens:
            raise TokenFileError(f"{where}: the token repeats the one on line {seen_tokens[token]}")
        if user in seen_users:
            raise TokenFileError(f"{where}: user {user!r} already has a token on line {seen_users[user]}")
        groups = tuple(dict.fromkeys(g.strip() for g in (record[3] if len(record) == 4 else "").split(",")
                                     if g.strip()))
        principal = Principal(name=user, groups=groups, uid=uid)
        roles = principal_roles(principal)
        if "researcher" in roles and not principal_namespaces(principal):
            raise TokenFileError(
                f"{where}: user {user!r} is a researcher but has no namespace; add a group like ns:default"
            )
        bad_namespaces = [n for n in principal_namespaces(principal) if not _is_dns_label(n)]
        if bad_namespaces:
            raise TokenFileError(f"{where}: group ns:{bad_namespaces[0]} does not name a valid namespace")
        seen_tokens[token] = number
        seen_users[user] = number
        rows.append((token, principal, uid, number))
    return rows


def _is_dns_label(value: str) -> bool:
    return (
        0 < len(value) <= 63
        and value[0].isalnum() and value[-1].isalnum()
        and all(c.islower() or c.isdigit() or c == "-" for c in value)
    )


#: kube's warning for `Bearer  TOKEN` (AS/pkg/authentication/request/bearertoken/bearertoken.go).
EXTRA_SPACE_WARNING: Final = ("the provided Authorization header contains extra space before the bearer token, "
                              "and is ignored")


def bearer_token(value: str | None) -> tuple[str | None, str]:
    """(token or None, why not) from an Authorization header value, parsed as kube's bearertoken
    authenticator does: trim the value, split it on single spaces into at most three parts, the
    scheme (case-insensitive) must be Bearer and the token is the second part. So `Bearer  TOKEN`
    (two spaces) has an empty token and is refused, and anything after the token is ignored."""
    if value is None:
        return None, "no Authorization header"
    auth = value.strip()
    if not auth:
        return None, "empty Authorization header"
    parts = auth.split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer":
        return None, "Authorization scheme is not Bearer"
    if not parts[1]:
        return None, "extra space before the bearer token" if len(parts) == 3 else "empty bearer token"
    return parts[1], ""


class TokenAuthenticator:
    """Maps bearer tokens to principals. Tokens are kept only as keyed digests.

    The lookup is by HMAC digest under a per-process random key, so neither
    the dict probe nor the final `hmac.compare_digest` reveals anything about
    a stored token through timing.
    """

    def __init__(self, rows: Iterable[tuple[str, Principal, str, int]], *, logger: Logger | None = None) -> None:
        self._key = secrets.token_bytes(32)
        self._entries: dict[bytes, _TokenEntry] = {}
        self._logger = logger
        for token, principal, uid, line in rows:
            digest = self._digest(token)
            self._entries[digest] = _TokenEntry(digest, principal, uid, line)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, logger: Logger | None = None) -> TokenAuthenticator:
        """Load a token file; raise `TokenFileError` with a clear message if it cannot be used."""
        file = Path(path)
        try:
            info = file.stat()
        except OSError as exc:
            raise TokenFileError(f"token file {file}: cannot read it ({exc.strerror})") from None
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(f"token file {file}: not a regular file")
        if info.st_size > _MAX_TOKEN_FILE_BYTES:
            raise TokenFileError(f"token file {file}: larger than {_MAX_TOKEN_FILE_BYTES} bytes")
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise TokenFileError(f"token file {file}: cannot read it ({exc.strerror})") from None
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise TokenFileError(f"token file {file}: not UTF-8 (byte {exc.start})") from None
        rows = parse_token_file(text, source=f"token file {file}")
        if not rows:
            raise TokenFileError(f"token file {file}: has no tokens")
        if logger is not None:
            if info.st_mode & 0o077:
                logger.warning("token file is readable by other users", path=str(file),
                               mode=oct(stat.S_IMODE(info.st_mode)))
            for token, principal, _uid, line in rows:
                if len(token) < _SHORT_TOKEN:
                    logger.warning("short token in token file", path=str(file), line=line, user=principal.name)
        return cls(rows, logger=logger)

    @classmethod
    def from_text(cls, text: str, *, logger: Logger | None = None) -> TokenAuthenticator:
        return cls(parse_token_file(text), logger=logger)

    def _digest(self, token: str) -> bytes:
        return hmac.new(self._key, token.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()

    def __len__(self) -> int:
        return len(self._entries)

    def principal_for_token(self, token: str) -> Principal | None:
        """The principal whose token this is, or None."""
        digest = self._digest(token)
        entry = self._entries.get(digest)
        if entry is None or not hmac.compare_digest(entry.digest, digest):
            return None
        return entry.principal

    def principal_for_header(self, value: str | None) -> tuple[Principal | None, str]:
        """(principal or None, why not) for the value of an Authorization header."""
        token, why = bearer_token(value)
        if token is None:
            return None, why
        if any(c.isspace() for c in token):
            return None, "malformed bearer token"
        principal = self.principal_for_token(token)
        if principal is None:
            return None, "unknown bearer token"
        return principal, ""

    async def authenticate(self, request: web.Request) -> Principal | None:
        """The request's principal, or None (the caller answers 401). Logs why, never the token."""
        cached: Principal | None = request.get(PRINCIPAL_KEY)
        if cached is not None:
            return cached
        values = request.headers.getall("Authorization", [])
        if len(values) > 1:
            principal, why = None, "several Authorization headers"
        else:
            principal, why = self.principal_for_header(values[0] if values else None)
        if principal is None:
            if self._logger is not None:
                self._logger.info("authentication failed", reason=why, method=request.method,
                                  path=request.path, remote=request.remote)
            return None
        request[PRINCIPAL_KEY] = principal
        return principal

    async def __call__(self, request: web.Request) -> Principal | None:
        return await self.authenticate(request)


# --------------------------------------------------------------------------- authorization


#: A rule applies in every namespace and at the cluster scope (kube: a ClusterRoleBinding).
ANY_NAMESPACE: Final = "any"
#: A rule applies only in the principal's own `ns:<namespace>` namespaces (kube: a RoleBinding in each).
OWN_NAMESPACES: Final = "own"


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One grant, shaped like a kube RBAC PolicyRule: `verbs` on `resources` ("plural" or
    "plural/subresource"; "*" is every resource and subresource) of `api_groups` ("" is the core
    group, "*" every group), or `verbs` on `non_resource_urls` (an exact path, or a prefix ending
    in "*"). `scope` says where a resource rule applies; `why` is the reason an allowed request gets."""

    verbs: frozenset[str]
    api_groups: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    non_resource_urls: frozenset[str] = frozenset()
    scope: str = ANY_NAMESPACE
    why: str = ""

    def allows(self, *, verb: str, group: str, resource: str, subresource: str, namespace: str,
               own_namespaces: frozenset[str]) -> bool:
        """Whether this rule allows a resource request (kube's RBAC RuleAllows)."""
        if not self.resources or not ("*" in self.verbs or verb in self.verbs):
            return False
        if not ("*" in self.api_groups or group in self.api_groups):
            return False
        wanted = f"{resource}/{subresource}" if subresource else resource
        if not ("*" in self.resources or wanted in self.resources
                or (subresource and f"*/{subresource}" in self.resources)):
            return False
        return self.scope == ANY_NAMESPACE or namespace in own_namespaces

    def allows_path(self, *, verb: str, path: str) -> bool:
        """Whether this rule allows a non-resource request (kube's NonResourceURLMatches)."""
        if not self.non_resource_urls or not ("*" in self.verbs or verb in self.verbs):
            return False
        return any(url == path or (url.endswith("*") and path.startswith(url[:-1]))
                   for url in self.non_resource_urls)

    def applies_in(self, namespace: str, own_namespaces: frozenset[str]) -> bool:
        """Whether the rule holds in `namespace` ("" is the cluster scope), for rules reviews."""
        return self.scope == ANY_NAMESPACE or namespace in own_namespaces


def _rule(verbs: Iterable[str], groups: Iterable[str], resources: Iterable[str], *, why: str,
          scope: str = ANY_NAMESPACE) -> PolicyRule:
    return PolicyRule(frozenset(verbs), frozenset(groups), frozenset(resources), scope=scope, why=why)


def _path_rule(verbs: Iterable[str], urls: Iterable[str], *, why: str) -> PolicyRule:
    return PolicyRule(frozenset(verbs), non_resource_urls=frozenset(urls), why=why)


#: What each role may do. The request guard, `kubectl auth can-i` (SelfSubjectAccessReview) and
#: `kubectl auth can-i --list` (SelfSubjectRulesReview) all read this table and nothing else.
ROLE_RULES: Final[Mapping[str, tuple[PolicyRule, ...]]] = {
    "admin": (
        _rule(["*"], ["*"], ["*"], why="admin may do everything"),
        _path_rule(["*"], ["*"], why="admin may do everything"),
    ),
    "viewer": (
        _rule(READ_VERBS, ["*"], ["*"], why="viewer may read everything"),
        _path_rule(["get"], ["/metrics"], why="viewer may read metrics"),
    ),
    "researcher": (
        _rule(RESEARCHER_JOB_VERBS, [FEDERATOR_GROUP], ["trainingjobs"], scope=OWN_NAMESPACES,
              why="researchers own the TrainingJobs of their namespaces"),
        _rule(READ_VERBS, [FEDERATOR_GROUP], ["trainingjobs/status"], scope=OWN_NAMESPACES,
              why="researchers may read job status in their namespaces"),
        *(rule for kind in JOB_KINDS for rule in (
            _rule(RESEARCHER_JOB_VERBS, [kind.group], [kind.plural], scope=OWN_NAMESPACES,
                  why=f"researchers own the {kind.kind}s of their namespaces"),
            _rule(READ_VERBS, [kind.group], [f"{kind.plural}/status"], scope=OWN_NAMESPACES,
                  why=f"researchers may read {kind.kind} status in their namespaces"))),
        _rule(["get"], [FEDERATOR_GROUP], ["trainingjobs/log"], scope=OWN_NAMESPACES,
              why="researchers may read the logs of their jobs' pods"),
        _rule(["get"], [FEDERATOR_GROUP], ["trainingjobs/pods"], scope=OWN_NAMESPACES,
              why="researchers may list their jobs' member pods"),
        _rule(READ_VERBS, [FEDERATOR_GROUP], ["memberclusters"], why="researchers may read member clusters"),
        _rule(READ_VERBS, [FEDERATOR_GROUP], ["drillreports"], why="researchers may read drill reports"),
        _rule(READ_VERBS, [FEDERATOR_GROUP], ["queues", "queues/status"],
              why="researchers may read queues and their status"),
        _rule(READ_VERBS, ["scheduling.k8s.io"], ["priorityclasses"], why="researchers may read priority classes"),
        _rule(READ_VERBS, [CLUSTER_RUNTIME.group], [CLUSTER_RUNTIME.plural],
              why="researchers may read the ClusterTrainingRuntimes their TrainJobs name (admins write them)"),
        _rule(READ_VERBS, [TRAINING_RUNTIME.group], [TRAINING_RUNTIME.plural], scope=OWN_NAMESPACES,
              why="researchers may read the TrainingRuntimes of their namespaces (admins write them)"),
        _rule(READ_VERBS, ["", "events.k8s.io"], ["events"], scope=OWN_NAMESPACES,
              why="researchers may read events in their namespaces"),
        # /api/v1/namespaces/<ns> is checked in the namespace <ns> itself (request_attributes), so this grants
        # exactly the researcher's own Namespace objects; a list of every namespace stays cluster-scoped.
        _rule(["get"], [""], ["namespaces"], scope=OWN_NAMESPACES,
              why="researchers may read the namespaces they belong to"),
    ),
}

#: What every authenticated principal may do, whatever its roles: read discovery, /version,
#: /openapi and the probes (kube's system:discovery and system:public-info-viewer), and ask
#: who it is and what it may do (kube's system:basic-user).
EVERYONE_RULES: Final[tuple[PolicyRule, ...]] = (
    _path_rule(["get"], ["/", "/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version",
                         "/version/", *sorted(PUBLIC_PATHS)],
               why="discovery is open to authenticated users"),
    _rule(["create"], ["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
          why="every user may ask what it may do"),
    _rule(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"], why="every user may ask who it is"),
)


def principal_rules(principal: Principal) -> tuple[PolicyRule, ...]:
    """Every rule that holds for `principal`: its roles' rules, then everyone's."""
    roles = principal_roles(principal)
    return tuple(rule for role in ("admin", "viewer", "researcher") if role in roles
                 for rule in ROLE_RULES[role]) + EVERYONE_RULES


def _forbidden_reason(principal: Principal, *, verb: str, group: str, resource: str, subresource: str,
                      namespace: str, name: str) -> str:
    # kube-apiserver's RBAC denial wording (plugin/pkg/auth/authorizer/rbac, "cannot ... resource ...").
    what = f"{resource}/{subresource}" if subresource else resource
    text = f'User "{principal.name}" cannot {verb} resource "{what}" in API group "{group}"'
    if namespace:
        text += f' in the namespace "{namespace}"'
    elif resource != "namespaces":
        text += " at the cluster scope"
    return text


def authorize(
    principal: Principal,
    *,
    verb: str,
    group: str,
    resource: str,
    namespace: str | None,
    name: str | None = None,
    subresource: str | None = None,
) -> tuple[bool, str]:
    """Whether `principal` may `verb` the resource; (allowed, reason). Denials use kube's wording."""
    namespace = namespace or ""
    sub = subresource or ""
    own = principal_namespaces(principal)
    for rule in principal_rules(principal):
        if rule.allows(verb=verb, group=group, resource=resource, subresource=sub, namespace=namespace,
                       own_namespaces=own):
            return True, rule.why
    why = _forbidden_reason(principal, verb=verb, group=group, resource=resource, subresource=sub,
                            namespace=namespace, name=name or "")
    if not principal_roles(principal):
        return False, why + " (the user has no federator role group)"
    return False, why


def authorize_path(principal: Principal, *, verb: str, path: str) -> tuple[bool, str]:
    """Whether `principal` may `verb` a non-resource path such as /metrics; (allowed, reason)."""
    # HEAD reads what GET reads.
    verb = "get" if verb == "head" else verb
    path = path.rstrip("/") or "/"
    for rule in principal_rules(principal):
        if rule.allows_path(verb=verb, path=path):
            return True, rule.why
    return False, f'User "{principal.name}" cannot {verb} path "{path}"'


@dataclass(frozen=True, slots=True)
class RequestAttributes:
    """What a request does, as kube's RequestInfo sees it."""

    is_resource_request: bool
    path: str
    verb: str
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


def _truthy(value: str | None) -> bool:
    # kube's boolean query parameters: only "0" and "false" (any case) are false.
    return value is not None and value.lower() not in ("0", "false")


_METHOD_VERBS: Final = {"POST": "create", "PUT": "update", "PATCH": "patch", "GET": "get", "HEAD": "get",
                        "DELETE": "delete"}


#: kube's namespaceSubresources: /api/v1/namespaces/<ns>/<one of these> is the Namespace's subresource
_NAMESPACE_SUBRESOURCES: Final = frozenset({"status", "finalize"})


def request_attributes(method: str, path: str, query: Mapping[str, str]) -> RequestAttributes:
    """Parse a request the way kube-apiserver's RequestInfoFactory does."""
    method = method.upper()
    non_resource_verb = method.lower()
    parts = [p for p in path.strip("/").split("/") if p]
    if len(parts) < 2 or parts[0] not in ("api", "apis"):
        return RequestAttributes(False, path, non_resource_verb)
    if parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) < 3:
            return RequestAttributes(False, path, non_resource_verb)
        group, version, rest = parts[1], parts[2], parts[3:]
    if not rest:
        return RequestAttributes(False, path, non_resource_verb)  # group-version discovery
    verb = _METHOD_VERBS.get(method, method.lower())
    if rest[0] == "watch":  # deprecated /watch/ prefix
        verb, rest = "watch", rest[1:]
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces":
        if len(rest) == 2 or (len(rest) == 3 and rest[2] in _NAMESPACE_SUBRESOURCES):
            # /namespaces/<ns> is the namespace object itself, /namespaces/<ns>/status its subresource
            resource, name, sub = "namespaces", rest[1], rest[2] if len(rest) == 3 else ""
            namespace = rest[1]
        else:
            namespace = rest[1]
            rest = rest[2:]
            resource = rest[0]
            name = rest[1] if len(rest) > 1 else ""
            sub = rest[2] if len(rest) > 2 else ""
    else:
        resource = rest[0]
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if resource == "namespaces" and name:
            namespace = name
    if verb != "watch":
        if method in ("GET", "HEAD"):
            if _truthy(query.get("watch")):
                verb = "watch"
            elif not name:
                verb = "list"
        elif method == "DELETE" and not name:
            verb = "deletecollection"
    return RequestAttributes(True, path, verb, group, version, resource, sub, namespace, name)


def authorize_request(principal: Principal, attributes: RequestAttributes) -> tuple[bool, str]:
    """`authorize` for parsed request attributes, non-resource paths included."""
    if not attributes.is_resource_request:
        return authorize_path(principal, verb=attributes.verb, path=attributes.path)
    return authorize(
        principal,
        verb=attributes.verb,
        group=attributes.group,
        resource=attributes.resource,
        namespace=attributes.namespace,
        name=attributes.name,
        subresource=attributes.subresource,
    )


def _status_response(error: ApiError) -> web.Response:
    response = web.json_response(error.to_status(), status=error.code)
    for value in warning_headers(error.warnings):
        response.headers.add("Warning", value)
    return response


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


Authorizer = Callable[[Principal, RequestAttributes], tuple[bool, str]]


def auth_middleware(
    authenticate: Callable[[web.Request], Awaitable[Principal | None]],
    *,
    logger: Logger | None = None,
    authorizer: Authorizer = authorize_request,
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """An aiohttp middleware: 401 without a valid token, 403 when `authorizer` (the hub's roles by
    default; a simulated member passes its RBAC policy) does not allow the request.

    The principal is left in `request[PRINCIPAL_KEY]` for handlers and logs.
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.rstrip("/") in PUBLIC_PATHS and request.method in ("GET", "HEAD"):
            return await handler(request)
        principal = await authenticate(request)
        if principal is None:
            error = unauthorized()
            headers = request.headers.getall("Authorization", [])
            if len(headers) == 1 and bearer_token(headers[0])[1] == "extra space before the bearer token":
                error.warnings.append(EXTRA_SPACE_WARNING)
            return _status_response(error)
        request[PRINCIPAL_KEY] = principal
        attributes = request_attributes(request.method, request.path, request.query)
        allowed, reason = authorizer(principal, attributes)
        if not allowed:
            if logger is not None:
                logger.info("request forbidden", user=principal.name, verb=attributes.verb,
                            resource=attributes.resource, namespace=attributes.namespace, path=request.path)
            if attributes.is_resource_request:
                error = forbidden(None, attributes.name, reason, resource=_qualified(attributes))
                error.details = {k: v for k, v in (("name", attributes.name), ("group", attributes.group),
                                                   ("kind", attributes.resource)) if v}
            else:
                error = ApiError(403, "Forbidden", f"forbidden: {reason}")
            return _status_response(error)
        return await handler(request)

    return middleware


def _qualified(attributes: RequestAttributes) -> str:
    resource = attributes.resource
    return f"{resource}.{attributes.group}" if attributes.group else resource
