"""MemberClient: the one module that talks HTTP to member clusters.

Everything the hub asks of a member cluster (list, watch, get, create,
patch, delete, a pod's log, a health probe) goes through a `MemberClient`. It is built
from a kubeconfig file (`from_kubeconfig`) or from a MemberCluster's
`spec.connection` (`from_connection`: a kubeconfigPath, or a server URL plus
the credentials the hub stores or an accessProvider).

It uses the official client's asyncio API, `kubernetes.aio` (shipped inside
the `kubernetes` package since v35): `kubernetes.aio.config` loads the
kubeconfig (contexts, tokens, client certificates, CA data, exec plugins)
into a `Configuration`, and every request goes through that configuration's
`ApiClient` (`param_serialize` + `call_api`: authentication headers, TLS,
the aiohttp connection pool). Where the client falls short we read the raw
aiohttp response it hands back (`_preload_content=False`) ourselves:

- watches: `kubernetes.aio.watch.Watch` silently re-issues a watch once
  after a 410 from the same resourceVersion, ends quietly on timeouts and
  turns every event into a model object; a reflector needs a typed
  `Expired`, bookmarks, and batches of raw events, so we split the chunked
  stream into lines ourselves;
- objects stay plain dicts (decoded with orjson): the generated models are
  an order of magnitude slower to build than the events arrive, and
  PodGroups have no models at all;
- errors: the generated methods raise `ApiException`, whose text carries the
  response headers and body; we decode the Status object into
  `MemberApiError(code, reason, message)` instead;
- timeouts: the generated methods take a number or a (connect, read) pair
  that the aio REST layer passes to aiohttp as a *total* timeout (the pair
  even breaks it), so we pass `aiohttp.ClientTimeout` objects with separate
  connect and read limits: every call has one.
- the kubeconfig loader materialises `*-data` fields as mode-0600 temporary
  files (its own cache, removed at interpreter exit), because Python's ssl
  module loads client keys only from files. Tokens from exec plugins of a
  kubeconfig file are loaded once per client (the loader's own plugin code).
- a connection with an `accessProvider` (a ClusterProfile's, KEP-5339) gets
  its credentials from `ExecCredentials`: the plugin the hub's
  access-provider file names, run without a shell, with a timeout, with
  KUBERNETES_EXEC_INFO (and the cluster's server, CA and extension config
  when provideClusterInfo) in its environment, its ExecCredential parsed and
  kept until its expirationTimestamp; a 401 runs it again and retries once.
  A plugin that hangs, fails or prints garbage is a `KubeconfigError` that
  says which (with the tail of its stderr), never a token.

Every write (create, patch, delete) is reported, once answered or failed, to the client's `write_log`
(a `MemberWriteLog`, the hub's audit log; never a body): the cluster, the verb, the object, the response
code and why (`member_write_reason`, set by the controller that asks: place, requeue, failover, suspend,
drain, cleanup, fence...).

Must never: put a token, key, certificate or kubeconfig body into a log
line, metric label, exception message or repr. Errors name the cluster and
the server URL only (a URL with user information is refused up front).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import json
import os
import time
import random
import signal
import ssl
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import orjson
import yaml
from kubernetes.aio import client as kube_client
from kubernetes.aio import config as kube_config
from kubernetes.aio.config.config_exception import ConfigException

from federator.apis.clusterprofile import ExecConfig
from federator.apis.jobkinds import JOB_KINDS
from federator.apis.timestamps import parse_epoch
from federator.apis.views import Body
from federator.obs import METRICS, Metrics, get_logger

__all__ = [
    "MEMBER_WRITE_WHY",
    "MemberWrite",
    "MemberWriteLog",
    "member_write_reason",
    "JOB_KIND_KEYS",
    "JOB_KIND_RESOURCES",
    "NODES",
    "PODGROUP_RESOURCES",
    "PODS",
    "ClientTimeouts",
    "ExecCredential",
    "ExecCredentials",
    "Expired",
    "KubeconfigError",
    "ListResult",
    "MemberApiError",
    "MemberClient",
    "MemberClientError",
    "MemberUnreachable",
    "ResourceKind",
    "WatchEvent",
    "podgroup_resource",
]

_log = get_logger("clusters.client")

#: Largest error body we read (a Status is small; a proxy's HTML page may not be).
_MAX_ERROR_BODY = 64 * 1024
#: A single watch event larger than this is refused (kube objects are <= 1.5 MiB).
_MAX_EVENT_BYTES = 16 * 1024 * 1024
_JSON = "application/json"


# ---------------------------------------------------------------- the write log port


@dataclass(frozen=True, slots=True)
class MemberWrite:
    """One write the hub made to a member, as its audit log records it (never a body or a credential)."""

    cluster: str
    #: create | patch | delete (kube's verbs)
    verb: str
    group: str
    version: str
    resource: str
    namespace: str
    name: str
    subresource: str
    #: the request path (no query)
    path: str
    #: the member's HTTP answer; 0 when none came (unreachable, timed out)
    code: int
    #: the Status reason of a failure ("" on success)
    reason: str
    #: time.time() when the request was sent
    started: float
    #: why the hub wrote (MEMBER_WRITE_WHY)
    why: str


#: Where a client reports its writes (the hub wires its audit log in; None: nowhere).
MemberWriteLog = Callable[[MemberWrite], None]
#: Why the current task writes to members: set by the controller that asks (`member_write_reason`).
MEMBER_WRITE_WHY: contextvars.ContextVar[str] = contextvars.ContextVar("federator_member_write_why",
                                                                     default="unspecified")


@contextlib.contextmanager
def member_write_reason(why: str, *, keep: bool = False) -> Iterator[None]:
    """Writes to members inside the block are logged with reason `why`; with `keep`, a reason already set by a
    caller (failover asking dispatch, say) stays."""
    if keep and MEMBER_WRITE_WHY.get() != "unspecified":
        yield
        return
    token = MEMBER_WRITE_WHY.set(why)
    try:
        yield
    finally:
        MEMBER_WRITE_WHY.reset(token)


# ---------------------------------------------------------------- errors


class MemberClientError(Exception):
    """Base of every error a MemberClient raises. Messages never hold credentials."""


class KubeconfigError(MemberClientError):
    """The kubeconfig (or the connection spec) cannot be turned into a client."""


class MemberUnreachable(MemberClientError):
    """No answer: connection refused or reset, TLS failure, timeout, cut stream."""


class MemberApiError(MemberClientError):
    """The member answered with an error Status."""

    def __init__(self, code: int, reason: str, message: str, *, cluster: str = "") -> None:
        where = f"cluster {cluster}: " if cluster else ""
        super().__init__(f"{where}{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class Expired(MemberApiError):
    """410 Gone / Expired: the resourceVersion (or continue token) is older than the member keeps."""


# ---------------------------------------------------------------- resources


@dataclass(frozen=True, slots=True)
class ResourceKind:
    """A collection on the member's API: group/version/plural and scope."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def key(self) -> str:
        """"nodes", "pods", "podgroups.scheduling.volcano.sh": the name used in status, stats and checkpoints."""
        return self.plural if not self.group else f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        return self.version if not self.group else f"{self.group}/{self.version}"

    def collection_path(self, namespace: str | None = None) -> str:
        base = "/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{_segment(namespace)}/{self.plural}"
        return f"{base}/{self.plural}"

    def object_path(self, *, namespace: str | None, name: str, subresource: str | None = None) -> str:
        if self.namespaced and not namespace:
            raise ValueError(f"{self.key} is namespaced: a namespace is required")
        path = f"{self.collection_path(namespace if self.namespaced else None)}/{_segment(name)}"
        return f"{path}/{_segment(subresource)}" if subresource else path


def _segment(value: str) -> str:
    if not value or value in (".", "..") or "/" in value:
        raise ValueError(f"not a valid path segment: {value!r}")
    return quote(value, safe="")


NODES = ResourceKind(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
PODS = ResourceKind(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
#: coordination.k8s.io/v1 Leases: the hub's fencing lease in each member (fencing/hublease.py, fencing/agent.py)
LEASES = ResourceKind(group="coordination.k8s.io", version="v1", plural="leases", kind="Lease", namespaced=True)
EVENTS = ResourceKind(group="", version="v1", plural="events", kind="Event", namespaced=True)
#: The PodGroup kind of each gang scheduler (kube-api-notes §11); the default scheduler has none.
PODGROUP_RESOURCES: Mapping[str, ResourceKind | None] = {
    "volcano": ResourceKind(group="scheduling.volcano.sh", version="v1beta1", plural="podgroups",
                            kind="PodGroup", namespaced=True),
    "coscheduling": ResourceKind(group="scheduling.x-k8s.io", version="v1alpha1", plural="podgroups",
                                 kind="PodGroup", namespaced=True),
    "kube-batch": ResourceKind(group="scheduling.incubator.k8s.io", version="v1alpha1", plural="podgroups",
                               kind="PodGroup", namespaced=True),
    "native": ResourceKind(group="scheduling.k8s.io", version="v1alpha2", plural="podgroups",
                           kind="PodGroup", namespaced=True),
    "kai": ResourceKind(group="scheduling.run.ai", version="v2alpha2", plural="podgroups",
                        kind="PodGroup", namespaced=True),
    "default": None,
}


#: The member collection of each upstream job kind (issue 28's operator mode), by `JobKind.source_key`.
JOB_KIND_RESOURCES: Mapping[str, ResourceKind] = {
    kind.source_key: ResourceKind(group=kind.group, version=kind.version, plural=kind.plural, kind=kind.kind,
                                  namespaced=True)
    for kind in JOB_KINDS}
#: their resource keys ("pytorchjobs.kubeflow.org", "jobs.batch"): a member copy is deleted with propagation
#: Background, so that its operator's pods, Services and child Jobs go with it by their ownerReferences
JOB_KIND_KEYS: frozenset[str] = frozenset(r.key for r in JOB_KIND_RESOURCES.values())


def podgroup_resource(scheduler: str) -> ResourceKind | None:
    """The PodGroup collection of a member's gang scheduler (None for the default scheduler)."""
    if scheduler not in PODGROUP_RESOURCES:
        raise ValueError(f"unknown gang scheduler {scheduler!r}; known: {sorted(PODGROUP_RESOURCES)}")
    return PODGROUP_RESOURCES[scheduler]


# ---------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class ListResult:
    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str | None = None


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event: ADDED, MODIFIED, DELETED or BOOKMARK, with the raw object."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return Body(self.object).resource_version


@dataclass(frozen=True, slots=True)
class ClientTimeouts:
    """Seconds. Every member call has a connect limit and a read limit."""

    connect: float = 5.0
    #: whole request for list/get/create/patch/delete
    request: float = 30.0
    #: health probe
    probe: float = 3.0
    #: a watch with no bytes for this long (beyond its timeoutSeconds) is dead
    watch_idle: float = 60.0
    #: an exec credential plugin (accessProvider) that has not answered in this long is killed
    exec_plugin: float = 10.0


EventBatch = list[WatchEvent]
Items = list[dict[str, Any]]


# ---------------------------------------------------------------- the client


def _server_of(host: str) -> str:
    parts = urlsplit(host)
    # Never keep user information from a URL (it may be a password).
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return f"{parts.scheme}://{netloc}{parts.path}".rstrip("/")


def _scrub(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "<redacted>")
    return text


def _secrets_in_kubeconfig(document: Any) -> list[str]:
    """Every credential-like string of a parsed kubeconfig (to scrub loader messages)."""
    found: list[str] = []
    users = document.get("users") if isinstance(document, dict) else None
    for entry in users if isinstance(users, list) else []:
        user = entry.get("user") if isinstance(entry, dict) else None
        if not isinstance(user, dict):
            continue
        for key in ("token", "password", "client-key-data", "client-certificate-data"):
            value = user.get(key)
            if isinstance(value, str):
                found.append(value)
                if key.endswith("-data"):
                    try:
                        found.append(base64.b64decode(value).decode("utf-8", "replace"))
                    except ValueError:
                        pass
    return found


#: what an exec plugin may print (an ExecCredential is a few KiB)
_MAX_EXEC_OUTPUT = 1024 * 1024
#: a credential is run again this long before its expirationTimestamp
_EXEC_REFRESH_MARGIN_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class ExecCredential:
    """What an exec plugin returned: a bearer token, or a client certificate and key (PEM), and when it expires
    (seconds since the epoch; None: until the member refuses it). Its repr shows no secret."""

    token: str | None = field(default=None, repr=False)
    client_certificate: str | None = field(default=None, repr=False)
    client_key: str | None = field(default=None, repr=False)
    expires_at: float | None = None


class ExecCredentials:
    """One member's exec credential plugin (an accessProvider of the hub's provider file): runs it, keeps its
    ExecCredential until shortly before it expires, and runs it again when asked to (`get(force=True)`, after
    a 401). One run at a time; never logs or raises what the plugin printed on stdout."""

    def __init__(self, *, cluster: str, provider: str, plugin: ExecConfig, server: str, ca_data: str | None,
                 insecure: bool, config: Any, timeout: float) -> None:
        self.cluster = cluster
        self.provider = provider
        self.plugin = plugin
        self.timeout = timeout
        self._cluster_info: dict[str, Any] = {"server": server}
        if ca_data:
            self._cluster_info["certificate-authority-data"] = ca_data
        if insecure:
            self._cluster_info["insecure-skip-tls-verify"] = True
        if config is not None:
            self._cluster_info["config"] = config
        self._current: ExecCredential | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"ExecCredentials(cluster={self.cluster!r}, provider={self.provider!r})"

    def _fail(self, why: str) -> KubeconfigError:
        return KubeconfigError(f"cluster {self.cluster}: access provider {self.provider!r}: exec plugin "
                               f"{self.plugin.command!r} {why}")

    def fresh(self) -> bool:
        current = self._current
        return current is not None and (current.expires_at is None
                                        or time.time() < current.expires_at - _EXEC_REFRESH_MARGIN_SECONDS)

    async def get(self, *, force: bool = False) -> ExecCredential:
        """The current credential, from the plugin when there is none, it is about to expire, or `force`."""
        stale = self._current
        async with self._lock:
            if self._current is not None and self.fresh() and not (force and self._current is stale):
                return self._current
            self._current = await self._run()
            return self._current

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update((var.name, var.value) for var in self.plugin.env or ())
        info: dict[str, Any] = {"apiVersion": self.plugin.api_version, "kind": "ExecCredential",
                                "spec": {"interactive": False}}
        if self.plugin.provide_cluster_info:
            info["spec"]["cluster"] = self._cluster_info
        env["KUBERNETES_EXEC_INFO"] = json.dumps(info, separators=(",", ":"))
        return env

    async def _run(self) -> ExecCredential:
        try:
            process = await asyncio.create_subprocess_exec(
                self.plugin.command, *(self.plugin.args or ()), env=self._environment(),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True)
        except OSError as e:
            hint = f" ({self.plugin.install_hint[:300]})" if self.plugin.install_hint else ""
            raise self._fail(f"cannot be started: {e.strerror or type(e).__name__}{hint}") from None
        assert process.stdout is not None and process.stderr is not None
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await asyncio.gather(_drain(process.stdout, keep=_MAX_EXEC_OUTPUT + 1, tail=False),
                                                _drain(process.stderr, keep=4096, tail=True))
                code = await process.wait()
        except TimeoutError:
            _kill_group(process)
            await process.wait()
            raise self._fail(f"did not answer within {self.timeout:g}s (killed)") from None
        finally:
            if process.returncode is None:
                _kill_group(process)
                await process.wait()
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] if err.strip() else []
        said = f": {tail[0][:300]}" if tail else ""
        if code != 0:
            raise self._fail(f"exited with status {code}{said}")
        if len(out) > _MAX_EXEC_OUTPUT:
            raise self._fail("printed more than 1 MiB")
        return self._parse(out)

    def _parse(self, out: bytes) -> ExecCredential:
        try:
            document = json.loads(out)
        except (ValueError, UnicodeDecodeError):
            raise self._fail("printed no JSON ExecCredential") from None  # its output may hold a secret: not shown
        if not isinstance(document, dict) or document.get("kind") != "ExecCredential":
            raise self._fail("printed JSON that is not an ExecCredential")
        if document.get("apiVersion") != self.plugin.api_version:
            shown = json.dumps(str(document.get("apiVersion"))[:80])
            raise self._fail(f"answered apiVersion {shown}, not the {self.plugin.api_version} it was run with")
        status = document.get("status")
        if not isinstance(status, dict):
            raise self._fail("printed an ExecCredential without status")
        token, cert, key = status.get("token"), status.get("clientCertificateData"), status.get("clientKeyData")
        expires: float | None = None
        if status.get("expirationTimestamp") is not None:
            expires = parse_epoch(status.get("expirationTimestamp"))
            if expires is None:
                raise self._fail("printed an expirationTimestamp that is not an RFC 3339 time")
        if isinstance(token, str) and token and not any(c.isspace() for c in token):
            return ExecCredential(token=token, expires_at=expires)
        if isinstance(cert, str) and isinstance(key, str) and "-----BEGIN" in cert and "-----BEGIN" in key:
            return ExecCredential(client_certificate=cert, client_key=key, expires_at=expires)
        raise self._fail("printed an ExecCredential with neither a token nor a PEM client certificate and key")


async def _drain(stream: asyncio.StreamReader, *, keep: int, tail: bool) -> bytes:
    """Everything `stream` gives until EOF (so the process never blocks on a full pipe), keeping `keep` bytes:
    the first ones, or with `tail` the last ones."""
    kept = bytearray()
    while chunk := await stream.read(64 * 1024):
        if tail:
            kept += chunk
            del kept[:-keep]
        elif len(kept) < keep:
            kept += chunk[:keep - len(kept)]
    return bytes(kept)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    """Kill the plugin and whatever it started (it runs in a session of its own: its pid is the group's)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()


class MemberClient:
    """HTTP access to one member cluster's API (see the module docstring)."""

    def __init__(
        self,
        *,
        cluster: str,
        configuration: Any,
        timeouts: ClientTimeouts | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.cluster = cluster
        self._configuration = configuration
        self._api = kube_client.ApiClient(configuration)
        self._api.user_agent = "federator-hub"
        self.timeouts = timeouts or ClientTimeouts()
        self.metrics = metrics or METRICS
        #: the API server URL (no credentials): safe to log
        self.server = _server_of(str(configuration.host))
        self._closed = False
        #: the accessProvider's plugin, when the credentials come from one
        self._exec: ExecCredentials | None = None
        #: where writes are reported (the hub's audit log); None: nowhere
        self.write_log: MemberWriteLog | None = None

    def _use_exec_credentials(self, source: ExecCredentials) -> None:
        """Take the bearer token from `source` on every request (run again when it is about to expire). A client
        certificate from a plugin is the client's for its lifetime (TLS is set up once); a 401 then means the
        member sync rebuilds the client."""
        self._exec = source

        async def refresh(configuration: Any) -> None:
            if not source.fresh():
                await self._take(await source.get())

        self._configuration.refresh_api_key_hook = refresh

    async def _take(self, credential: ExecCredential) -> None:
        if credential.token is not None:
            self._configuration.api_key["BearerToken"] = f"Bearer {credential.token}"

    def __repr__(self) -> str:
        return f"MemberClient(cluster={self.cluster!r}, server={self.server!r})"

    def _describe(self, error: BaseException) -> str:
        """What went wrong, naming the cluster, never its API server: these messages reach job status
        and history, which researchers read, and a member's connection is only for admins (aiohttp's
        own texts carry host:port, e.g. "Cannot connect to host 10.0.0.7:6443")."""
        text = _describe(error)
        parts = urlsplit(self.server)
        for where in (self.server, parts.netloc, parts.hostname):
            if where:
                text = text.replace(where, "<member API server>")
        return text

    # ------------------------------------------------------------ construction

    @classmethod
    async def from_kubeconfig(
        cls,
        path: str | os.PathLike[str],
        *,
        cluster: str,
        context: str | None = None,
        timeouts: ClientTimeouts | None = None,
        metrics: Metrics | None = None,
    ) -> MemberClient:
        """A client for the kubeconfig file at `path` (its current context unless `context`)."""
        shown = os.fspath(path)
        try:
            with open(path, "rb") as fh:
                raw = fh.read(4 * 1024 * 1024 + 1)
        except OSError as e:
            raise KubeconfigError(f"cluster {cluster}: cannot read kubeconfig {shown}: {e.strerror or e}") from None
        if len(raw) > 4 * 1024 * 1024:
            raise KubeconfigError(f"cluster {cluster}: kubeconfig {shown} is larger than 4 MiB")
        try:
            document = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            # The YAML error text quotes the offending line, which may be a token: never show it.
            raise KubeconfigError(f"cluster {cluster}: kubeconfig {shown} is not valid YAML{where}") from None
        if not isinstance(document, dict):
            raise KubeconfigError(f"cluster {cluster}: kubeconfig {shown} is not a kubeconfig document")
        configuration = kube_client.Configuration()
        try:
            await kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=shown, context=context, client_configuration=configuration, persist_config=False,
            )
        except (ConfigException, KeyError, TypeError, ValueError, OSError) as e:
            message = _scrub(str(e), _secrets_in_kubeconfig(document))
            raise KubeconfigError(f"cluster {cluster}: kubeconfig {shown}: {message}") from None
        return cls._checked(cluster=cluster, configuration=configuration, timeouts=timeouts, metrics=metrics)

    @classmethod
    async def from_connection(
        cls,
        connection: Mapping[str, Any],
        *,
        cluster: str,
        timeouts: ClientTimeouts | None = None,
        metrics: Metrics | None = None,
        exec_plugins: Mapping[str, ExecConfig] | None = None,
    ) -> MemberClient:
        """A client for a MemberCluster `spec.connection` (kubeconfigPath, or server + credentials, or server +
        an accessProvider: one of `exec_plugins`, the hub's access-provider file, run now for a credential)."""
        path = connection.get("kubeconfigPath")
        if isinstance(path, str) and path:
            context = connection.get("context")
            return await cls.from_kubeconfig(
                path, cluster=cluster, context=context if isinstance(context, str) else None,
                timeouts=timeouts, metrics=metrics,
            )
        server = connection.get("server")
        credentials = connection.get("credentials")
        if not isinstance(server, str) or not server:
            raise KubeconfigError(f"cluster {cluster}: spec.connection has neither kubeconfigPath nor server")
        source: ExecCredentials | None = None
        provider = connection.get("accessProvider")
        if isinstance(provider, Mapping) and isinstance(provider.get("name"), str):
            name = provider["name"]
            plugin = (exec_plugins or {}).get(name)
            if plugin is None:
                raise KubeconfigError(f"cluster {cluster}: access provider {name!r} is not in the hub's "
                                      "--cluster-profile-providers file")
            ca = connection.get("certificateAuthorityData")
            source = ExecCredentials(cluster=cluster, provider=name, plugin=plugin, server=server,
                                     ca_data=ca if isinstance(ca, str) else None,
                                     insecure=connection.get("insecureSkipTLSVerify") is True,
                                     config=provider.get("config"), timeout=(timeouts or ClientTimeouts()).exec_plugin)
            credential = await source.get()
            credentials = {"token": credential.token} if credential.token is not None else {
                "clientCertificateData": base64.b64encode((credential.client_certificate or "").encode()).decode(),
                "clientKeyData": base64.b64encode((credential.client_key or "").encode()).decode()}
        if not isinstance(credentials, Mapping):
            raise KubeconfigError(f"cluster {cluster}: spec.connection.server needs credentials")
        user: dict[str, Any] = {}
        token = credentials.get("token")
        if isinstance(token, str) and token:
            user["token"] = token
        cert, key = credentials.get("clientCertificateData"), credentials.get("clientKeyData")
        if isinstance(cert, str) and isinstance(key, str):
            user["client-certificate-data"] = cert
            user["client-key-data"] = key
        if not user:
            raise KubeconfigError(f"cluster {cluster}: spec.connection.credentials hold no token or client certificate")
        entry: dict[str, Any] = {"server": server}
        ca = connection.get("certificateAuthorityData")
        if isinstance(ca, str) and ca:
            entry["certificate-authority-data"] = ca
        if connection.get("insecureSkipTLSVerify") is True:
            entry["insecure-skip-tls-verify"] = True
        document = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": cluster, "cluster": entry}],
            "users": [{"name": cluster, "user": user}],
            "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": cluster}}],
            "current-context": cluster,
        }
        configuration = kube_client.Configuration()
        try:
            await kube_config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
                document, client_configuration=configuration)
        except (ConfigException, KeyError, TypeError, ValueError, OSError) as e:
            message = _scrub(str(e), _secrets_in_kubeconfig(document))
            raise KubeconfigError(f"cluster {cluster}: spec.connection: {message}") from None
        client = cls._checked(cluster=cluster, configuration=configuration, timeouts=timeouts, metrics=metrics)
        if source is not None:
            client._use_exec_credentials(source)
        return client

    @classmethod
    def _checked(
        cls, *, cluster: str, configuration: Any, timeouts: ClientTimeouts | None, metrics: Metrics | None
    ) -> MemberClient:
        host = str(configuration.host or "")
        parts = urlsplit(host)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise KubeconfigError(f"cluster {cluster}: the server must be an http(s) URL with a host")
        if parts.username is not None or parts.password is not None:
            raise KubeconfigError(f"cluster {cluster}: the server URL must not contain user information")
        try:
            return cls(cluster=cluster, configuration=configuration, timeouts=timeouts, metrics=metrics)
        except (ssl.SSLError, OSError, ValueError) as e:
            # e.g. a CA or client certificate that does not parse; the message names no secret.
            raise KubeconfigError(f"cluster {cluster}: TLS material is not usable: {type(e).__name__}") from None

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._api.close()  # type: ignore[no-untyped-call]

    async def __aenter__(self) -> MemberClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ transport

    async def _send(
        self,
        method: str,
        path: str,
        *,
        verb: str,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str | None = None,
        timeout: aiohttp.ClientTimeout,
        retried: bool = False,
    ) -> aiohttp.ClientResponse:
        """Issue one request through the official client; returns the raw response (caller releases it)."""
        if self._closed:
            raise MemberClientError(f"cluster {self.cluster}: client is closed")
        headers: dict[str, Any] = {"Accept": _JSON}
        if content_type:
            headers["Content-Type"] = content_type
        loop = asyncio.get_running_loop()
        started = loop.time()
        code = "error"
        try:
            # The body is plain JSON already (dicts, lists, strings, numbers): it goes to call_api as it is,
            # not through param_serialize, whose walk over every value (meant for the client's model
            # objects) was over a quarter of the hub's CPU per member create.
            serialized = await self._api.param_serialize(
                method, path, query_params=list(query) or None, header_params=headers,
                auth_settings=["BearerToken"],
            )
            _, url, header_params, _, _ = serialized
            result = await self._api.call_api(
                method, url, header_params=header_params, body=body,
                _request_timeout=timeout, _preload_content=False,
            )
            response: aiohttp.ClientResponse = result.response
            if response.status == 401 and self._exec is not None and not retried:
                # the plugin's credential may have been revoked or rotated early: ask it again, retry once
                response.release()
                code = "401"
                await self._take(await self._exec.get(force=True))
                return await self._send(method, path, verb=verb, query=query, body=body, content_type=content_type,
                                        timeout=timeout, retried=True)
            code = str(response.status)
            return response
        except (aiohttp.ClientError, asyncio.TimeoutError, ssl.SSLError, OSError) as e:
            code = type(e).__name__
            raise MemberUnreachable(f"cluster {self.cluster}: {verb} {path}: {self._describe(e)}") from None
        finally:
            self.metrics.member_requests.labels(cluster=self.cluster, verb=verb, code=code).inc()
            self.metrics.member_request_seconds.labels(cluster=self.cluster, verb=verb).observe(
                loop.time() - started
            )

    async def _error(self, response: aiohttp.ClientResponse) -> MemberApiError:
        """Decode a non-2xx response into a MemberApiError (Expired for 410)."""
        try:
            raw = await response.content.read(_MAX_ERROR_BODY)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            raw = b""
        finally:
            response.release()
        return self._status_error(_decode_status(raw, response.status, response.reason or ""))

    def _status_error(self, status: Mapping[str, Any]) -> MemberApiError:
        code = status.get("code")
        code = code if isinstance(code, int) and not isinstance(code, bool) else 500
        reason = str(status.get("reason") or "")
        message = str(status.get("message") or "")[:1024]
        kind = Expired if code == 410 or reason in ("Expired", "Gone") else MemberApiError
        return kind(code, reason or "Unknown", message, cluster=self.cluster)

    async def _json(
        self,
        method: str,
        path: str,
        *,
        verb: str,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str | None = None,
        timeout_seconds: float | None = None,
    ) -> dict[str, Any]:
        total = self.timeouts.request if timeout_seconds is None else min(self.timeouts.request, timeout_seconds)
        timeout = aiohttp.ClientTimeout(total=total, sock_connect=min(self.timeouts.connect, total))
        response = await self._send(method, path, verb=verb, query=query, body=body, content_type=content_type,
                                    timeout=timeout)
        if response.status >= 300:
            raise await self._error(response)
        try:
            raw = await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            raise MemberUnreachable(f"cluster {self.cluster}: {verb} {path}: {self._describe(e)}") from None
        finally:
            response.release()
        try:
            decoded = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise MemberApiError(response.status, "BadResponse", f"{verb} {path}: the response is not JSON",
                                 cluster=self.cluster) from None
        if not isinstance(decoded, dict):
            raise MemberApiError(response.status, "BadResponse", f"{verb} {path}: the response is not an object",
                                 cluster=self.cluster)
        return decoded

    # ------------------------------------------------------------ reads

    async def list(
        self,
        resource: ResourceKind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> ListResult:
        """One LIST page: items, the list's resourceVersion and the continue token (None on the last page)."""
        query: list[tuple[str, Any]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if limit:
            query.append(("limit", int(limit)))
        if continue_token:
            query.append(("continue", continue_token))
        if resource_version is not None and not continue_token:
            query.append(("resourceVersion", resource_version))
        body = await self._json("GET", resource.collection_path(namespace), verb="list", query=query)
        items = body.get("items")
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        if items is None:
            items = []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise MemberApiError(200, "BadResponse", f"list {resource.key}: items is not a list of objects",
                                 cluster=self.cluster)
        rv = meta.get("resourceVersion")
        token = meta.get("continue")
        return ListResult(items=items, resource_version=rv if isinstance(rv, str) else "",
                          continue_token=token if isinstance(token, str) and token else None)

    async def list_all(
        self,
        resource: ResourceKind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        attempts: int = 3,
    ) -> ListResult:
        """Every item, following continue tokens, at the first page's resourceVersion.

        A continue token that expires mid-way (410) restarts the whole list,
        at most `attempts` times, so the result is one consistent snapshot."""
        for attempt in range(attempts):
            items: Items = []
            token: str | None = None
            first_rv = ""
            try:
                while True:
                    page = await self.list(resource, namespace=namespace, label_selector=label_selector,
                                           field_selector=field_selector, limit=page_size, continue_token=token)
                    if not first_rv:
                        first_rv = page.resource_version
                    items.extend(page.items)
                    token = page.continue_token
                    if token is None:
                        return ListResult(items=items, resource_version=first_rv)
            except Expired:
                if attempt + 1 >= attempts:
                    raise
                _log.info("list continue token expired; restarting the list", cluster=self.cluster,
                          resource=resource.key, attempt=attempt + 1)
        raise AssertionError("unreachable")  # pragma: no cover

    async def get(self, resource: ResourceKind, *, namespace: str | None, name: str) -> dict[str, Any]:
        return await self._json("GET", resource.object_path(namespace=namespace, name=name), verb="get")

    @contextlib.asynccontextmanager
    async def _logged_write(self, resource: ResourceKind, *, verb: str, path: str, namespace: str | None,
                            name: str, subresource: str | None = None) -> AsyncIterator[None]:
        """Report the write made inside the block to `write_log` (its code, or the failure's)."""
        started = time.time()
        code, reason = 0, "MemberUnreachable"
        try:
            yield
            code, reason = 200 if verb != "create" else 201, ""
        except MemberApiError as e:
            code, reason = e.code, e.reason
            raise
        finally:
            if self.write_log is not None:
                with contextlib.suppress(Exception):  # the audit log never fails a write
                    self.write_log(MemberWrite(
                        cluster=self.cluster, verb=verb, group=resource.group, version=resource.version,
                        resource=resource.plural, namespace=namespace or "", name=name,
                        subresource=subresource or "", path=path, code=code, reason=reason, started=started,
                        why=MEMBER_WRITE_WHY.get()))

    async def create(self, resource: ResourceKind, obj: Mapping[str, Any], *, namespace: str | None,
                     timeout_seconds: float | None = None) -> dict[str, Any]:
        path = resource.collection_path(namespace)
        meta = obj.get("metadata")
        name = str(meta.get("name") or meta.get("generateName") or "") if isinstance(meta, Mapping) else ""
        async with self._logged_write(resource, verb="create", path=path, namespace=namespace, name=name):
            return await self._json("POST", path, verb="create", body=dict(obj), content_type=_JSON,
                                    timeout_seconds=timeout_seconds)

    async def patch(
        self,
        resource: ResourceKind,
        *,
        namespace: str | None,
        name: str,
        patch: Any,
        content_type: str = "application/merge-patch+json",
        subresource: str | None = None,
        timeout_seconds: float | None = None,
    ) -> dict[str, Any]:
        """A patch; `timeout_seconds` shortens the client's request timeout for this call."""
        path = resource.object_path(namespace=namespace, name=name, subresource=subresource)
        async with self._logged_write(resource, verb="patch", path=path, namespace=namespace, name=name,
                                      subresource=subresource):
            return await self._json("PATCH", path, verb="patch", body=patch, content_type=content_type,
                                    timeout_seconds=timeout_seconds)

    async def delete(
        self,
        resource: ResourceKind,
        *,
        namespace: str | None,
        name: str,
        grace_period_seconds: int | None = None,
        precondition_uid: str | None = None,
        propagation_policy: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = int(grace_period_seconds)
        if propagation_policy is not None:
            body["propagationPolicy"] = propagation_policy
        if precondition_uid:
            body["preconditions"] = {"uid": precondition_uid}
        path = resource.object_path(namespace=namespace, name=name)
        async with self._logged_write(resource, verb="delete", path=path, namespace=namespace, name=name):
            return await self._json("DELETE", path, verb="delete", body=body, content_type=_JSON)

    async def served_resources(self, *, group: str, version: str) -> frozenset[str]:
        """The resource names (plurals and subresources, e.g. "pytorchjobs", "pytorchjobs/status") the member's
        discovery lists for group/version; empty when it does not serve that group/version (404)."""
        path = "/api/v1" if not group else f"/apis/{_segment(group)}/{_segment(version)}"
        try:
            found = await self._json("GET", path, verb="discovery")
        except MemberApiError as e:
            if e.code == 404:
                return frozenset()
            raise
        resources = found.get("resources")
        return frozenset(str(r["name"]) for r in resources if isinstance(r, Mapping) and isinstance(r.get("name"), str)) \
            if isinstance(resources, list) else frozenset()

    async def probe(self) -> None:
        """A cheap health check (GET /readyz). Raises MemberUnreachable or MemberApiError."""
        timeout = aiohttp.ClientTimeout(total=self.timeouts.probe, sock_connect=min(self.timeouts.connect,
                                                                                    self.timeouts.probe))
        response = await self._send("GET", "/readyz", verb="probe", timeout=timeout)
        if response.status != 200:
            raise await self._error(response)
        try:
            await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            raise MemberUnreachable(f"cluster {self.cluster}: probe: {self._describe(e)}") from None
        finally:
            response.release()

    # ------------------------------------------------------------ pod logs

    @contextlib.asynccontextmanager
    async def pod_log(
        self,
        *,
        namespace: str,
        name: str,
        query: Sequence[tuple[str, Any]] = (),
        follow: bool = False,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """`GET pods/NAME/log` (kube's PodLogOptions in `query`): inside the block, the body's chunks as the
        member sends them. The request is answered before the block is entered (`MemberApiError` with the
        member's Status, e.g. 400 "waiting to start"; `MemberUnreachable`); the connection is closed when the
        block ends, however it ends, so an abandoned follow never stays open. A follow has no read timeout
        (a quiet container may print nothing for long); other reads have the request timeout per read."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeouts.connect,
                                        sock_read=None if follow else self.timeouts.request)
        path = PODS.object_path(namespace=namespace, name=name, subresource="log")
        response = await self._send("GET", path, verb="get", query=query, timeout=timeout)  # kube: get pods/log
        try:
            if response.status != 200:
                raise await self._error(response)
            yield self._log_chunks(response, pod=f"{namespace}/{name}")
        finally:
            response.release()
            response.close()

    async def _log_chunks(self, response: aiohttp.ClientResponse, *, pod: str) -> AsyncIterator[bytes]:
        while True:
            try:
                chunk = await response.content.readany()
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                raise MemberUnreachable(
                    f"cluster {self.cluster}: log of pod {pod} interrupted: {self._describe(e)}") from None
            if not chunk:
                return
            yield chunk

    # ------------------------------------------------------------ watch

    async def watch_batches(
        self,
        resource: ResourceKind,
        *,
        resource_version: str,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncIterator[EventBatch]:
        """Watch from `resource_version`; yields the events of each chunk the member sends, as a batch.

        Ends when the member closes the stream (timeoutSeconds). Raises
        `Expired` for a 410 (HTTP or ERROR event), `MemberApiError` for other
        errors, `MemberUnreachable` when the connection fails, is cut or goes
        silent for `timeouts.watch_idle` seconds. `on_open` runs once the member accepted the watch."""
        if timeout_seconds is None:
            # client-go's reflector: a random 5-10 minutes, so watches do not all reconnect at once
            timeout_seconds = int(300 * (1 + random.random()))
        query: list[tuple[str, Any]] = [("watch", True), ("resourceVersion", resource_version),
                                        ("timeoutSeconds", int(timeout_seconds))]
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", True))
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeouts.connect,
                                        sock_read=self.timeouts.watch_idle)
        path = resource.collection_path(namespace)
        response = await self._send("GET", path, verb="watch", query=query, timeout=timeout)
        if response.status != 200:
            raise await self._error(response)
        if on_open is not None:
            on_open()
        pending = b""
        try:
            while True:
                try:
                    chunk = await response.content.readany()
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                    raise MemberUnreachable(
                        f"cluster {self.cluster}: watch {resource.key} interrupted: {self._describe(e)}"
                    ) from None
                if not chunk:
                    if pending.strip():
                        raise MemberUnreachable(
                            f"cluster {self.cluster}: watch {resource.key} ended inside an event")
                    return
                if pending:
                    chunk = pending + chunk
                lines = chunk.split(b"\n")
                pending = lines.pop()
                if len(pending) > _MAX_EVENT_BYTES:
                    raise MemberApiError(200, "BadResponse", f"watch {resource.key}: an event exceeds "
                                         f"{_MAX_EVENT_BYTES} bytes", cluster=self.cluster)
                batch = [self._event(line, resource) for line in lines if line.strip()]
                if batch:
                    yield batch
        finally:
            response.release()
            response.close()

    async def watch(
        self,
        resource: ResourceKind,
        *,
        resource_version: str,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """`watch_batches`, one event at a time."""
        async for batch in self.watch_batches(
            resource, resource_version=resource_version, timeout_seconds=timeout_seconds,
            allow_bookmarks=allow_bookmarks, namespace=namespace, label_selector=label_selector,
            field_selector=field_selector,
        ):
            for event in batch:
                yield event

    def _event(self, line: bytes, resource: ResourceKind) -> WatchEvent:
        try:
            decoded = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise MemberApiError(200, "BadResponse", f"watch {resource.key}: an event is not JSON",
                                 cluster=self.cluster) from None
        if not isinstance(decoded, dict):
            raise MemberApiError(200, "BadResponse", f"watch {resource.key}: an event is not an object",
                                 cluster=self.cluster)
        kind = decoded.get("type")
        obj = decoded.get("object")
        if kind == "ERROR":
            raise self._status_error(obj if isinstance(obj, dict) else {})
        if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK") or not isinstance(obj, dict):
            raise MemberApiError(200, "BadResponse", f"watch {resource.key}: malformed event (type {kind!r})",
                                 cluster=self.cluster)
        return WatchEvent(kind, obj)


def _decode_status(raw: bytes, http_code: int, http_reason: str) -> dict[str, Any]:
    try:
        decoded = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        decoded = None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        status = dict(decoded)
        status.setdefault("code", http_code)
        return status
    return {"code": http_code, "reason": http_reason.replace(" ", "") or "Unknown",
            "message": f"HTTP {http_code} {http_reason}".strip()}


def _describe(error: BaseException) -> str:
    if isinstance(error, asyncio.TimeoutError):
        return "timed out"
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:512]
