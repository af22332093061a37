"""SimCluster: one simulated member cluster, in-process.

A store with a bounded history window (older revisions are compacted, so a
watch that falls too far behind gets 410 exactly as from a real apiserver):
in memory by default, or a SqliteStore file that outlives the process
(`start_sim_cluster(..., directory=DIR)`, what `federator up` and `federator
sim` use unless `--sim-ephemeral`); an ObjectStorage over it, and the
kube-style API app on a 127.0.0.1 port with bearer-token authentication (401
without a token).
A cluster has named identities, each with its own token: `sim-admin` (the
operator: the whole API and the admin side) and `federator-agent` (the
member-side fence agent: the API only), so that a fault can cut one
identity off while the others are answered (a partition `from` the hub).
It serves HTTPS (kubectl sends a bearer token only over TLS) with a
development CA: the caller's (`tls=`, shared by every cluster of one `federator
sim` process) or a fresh one in a temporary directory. The app's cleanup_ctx seeds the namespaces and the profile's nodes and runs
the cluster's controllers (gang scheduler, kubelet, optional background
load, the profile's job operators: federator/sim/operators) as named tasks; the fault middleware runs first in the chain and the
admin side lives under /_sim/ (faults; request statistics at /_sim/stats).

`write_kubeconfig()` writes a kubeconfig (server URL, token, cluster and
context named after the cluster) that kubectl and the official client use;
`write_agent_kubeconfig()` the same for the agent identity. The seeded
namespaces include `federator-system` (what a member's deploy manifests
create for the fence agent and the hub's Lease).

With `rbac=` (an `RbacPolicy` from federator/sim/rbac.py, e.g. the rendered deploy/member) the
cluster enforces that policy on every API request as kube's RBAC authorizer would (403 Forbidden in
kube's words), except for `sim-admin` (group system:masters); it mints a token for every
ServiceAccount the policy names (`service_account_token`, `write_service_account_kubeconfig`) and
also creates the policy's Namespace documents. Without it, every authenticated identity may do
everything, as before.

A persistent cluster (`start_sim_cluster` with a directory) keeps its objects in
`DIR/<cluster>.db` and comes back as it was: the same nodes (the profile's are
created only where missing), pods with their uids and phases (the kubelet
takes a Running pod's run time from its startTime, so a pod whose duration
ended while the cluster was down finishes at once; a bound Pending pod starts
after the start delay; a Terminating one is removed), resourceVersions that go
on from the last one (a watch from an RV the history still holds resumes, an
older one gets 410 and re-lists), and, read back from the kubeconfigs it wrote
there, the same port (when it is free) and tokens, so that clients and a hub
that kept running reconnect as if to a restarted kube-apiserver.

A profile with `processRuntime` gives the cluster a ProcessRuntime (`cluster.runtime`; federator/sim/
processes.py): its kubelet runs pods as local processes whose logs pods/log serves; the runtime's root
is the profile's `root`/<cluster>, else a temporary directory removed when the cluster stops.

This module must never import anything of the hub, and never log a token.
"""

from __future__ import annotations

import asyncio
import hmac
from collections import Counter
import os
import random
import secrets
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from federator.apiserver.app import ApiServerState, Principal, api_state, build_api_app, json_response
from federator.apiserver.auth import RequestAttributes, auth_middleware
from federator.apiserver.errors import ApiError
from federator.apiserver.namespaces import ensure_namespaces
from federator.apiserver.registry import Registry
from federator.apiserver.serving import api_runner
from federator.apiserver.storage import ObjectStorage
from federator.dev.certs import DevTLS, ensure_dev_tls, server_ssl_context, write_kubeconfig
from federator.obs import METRICS, Metrics, get_logger
from federator.sim import kinds
from federator.sim.containerlogs import LOG_STREAMS, POD_LOG, PROCESS_RUNTIME, LogStreams
from federator.sim.faults import FaultState, SiteListener, admin_routes, fault_middleware
from federator.sim.nodelease import NODE_LEASE_RENEW_SECONDS
from federator.sim.processes import ProcessRuntime, default_root, remove_root
from federator.sim.profile import ClusterProfile, initial_nodes
from federator.sim.operators import with_operator_kinds
from federator.sim.rbac import RbacPolicy, service_account_groups, service_account_user
from federator.store.memory import MemoryStore
from federator.store.protocol import Store
from federator.runtime.tasks import spawn, stop_tasks
from federator.runtime.waits import wait_event

#: History a simulated cluster keeps for watches (revisions); kube-apiserver's
#: watch cache plus etcd's compaction keep roughly the last few minutes.
DEFAULT_RETAINED_REVISIONS = 20_000
#: Node Lease renewals the history window holds on top (per node): two minutes' worth, so that the
#: kubelets' heartbeats do not push a resuming watch of pods out of the window much sooner than on a
#: cluster without them (kube keeps a watch cache per resource; this store has one window for all).
NODE_LEASE_RETAINED_SECONDS = 120.0
#: namespaces every simulated cluster starts with; federator-system stands in for what a member's
#: deploy manifests create (the fence agent's home and the hub's fencing Lease)
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "federator-system")
STATS_PATH = "/_sim/stats"
ADMIN_USER = "sim-admin"
AGENT_USER = "federator-agent"

ControllerEntry = Callable[..., Awaitable[None]]
#: distinct (user, verb, resource) refusals counted one by one; the rest are counted together
_MAX_FORBIDDEN_KEYS = 1000


@dataclass(frozen=True, slots=True)
class SimIdentity:
    """One user of a simulated cluster and its bearer token (never shown: repr leaves it out)."""

    user: str
    token: str = field(repr=False)
    groups: tuple[str, ...] = ()
    #: may use the admin side (/_sim/: faults, stats)
    admin: bool = False


def _bearer_value(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value:
        return None
    return value


def _identity_of_token(identities: Sequence[SimIdentity], value: str) -> SimIdentity | None:
    """The identity whose token is `value` (each compared in constant time)."""
    given = value.encode()
    found: SimIdentity | None = None
    for identity in identities:
        if hmac.compare_digest(given, identity.token.encode()):
            found = identity
    return found


def _bearer_authenticator(identities: Sequence[SimIdentity], *, admin_only: bool = False
                          ) -> Callable[[web.Request], Awaitable[Principal | None]]:
    async def authenticate(request: web.Request) -> Principal | None:
        value = _bearer_value(request)
        identity = _identity_of_token(identities, value) if value is not None else None
        if identity is None or (admin_only and not identity.admin):
            return None
        return Principal(name=identity.user, groups=identity.groups)

    return authenticate


def _controllers(profile: ClusterProfile) -> list[tuple[str, ControllerEntry, dict[str, Any]]]:
    """(task name, entry point, extra kwargs) of the controllers this cluster runs."""
    from federator.sim.kubelet import run_kubelet
    from federator.sim.scheduler import run_gang_scheduler

    found: list[tuple[str, ControllerEntry, dict[str, Any]]] = [
        ("scheduler", run_gang_scheduler, {}),
        ("kubelet", run_kubelet, {}),
    ]
    if profile.background_load is not None:
        try:
            from federator.sim.load import run_background_load
        except ImportError:  # pragma: no cover - load.py lands with the controllers
            get_logger("sim.server").warning("background load requested but federator.sim.load is missing",
                                             cluster=profile.name)
        else:
            import random

            found.append(("load", run_background_load, {"rng": random.Random(profile.name)}))
    if profile.operators:
        from federator.sim.operators import run_operators

        found.append(("operators", run_operators, {"names": tuple(profile.operators)}))
    return found


class _TLSSiteListener(SiteListener):
    """The faults' listener control, reopening the site with TLS."""

    def __init__(self, runner: web.BaseRunner, *, host: str, port: int, ssl_context: ssl.SSLContext) -> None:
        super().__init__(runner, host=host, port=port)
        self.ssl_context = ssl_context

    async def reopen(self) -> None:
        if self.runner.sites:
            return
        site = web.TCPSite(self.runner, self.host, self.port, reuse_address=True, ssl_context=self.ssl_context)
        await site.start()


class SimCluster:
    """One simulated member cluster served on 127.0.0.1 (see module docstring).

    Use as `async with SimCluster(profile) as cluster:` or start()/stop()."""

    def __init__(
        self,
        profile: ClusterProfile,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        agent_token: str | None = None,
        retained_revisions: int | None = None,
        run_controllers: bool = True,
        metrics: Metrics | None = None,
        bookmark_interval: float = 10.0,
        max_body_bytes: int | None = None,
        tls: DevTLS | None = None,
        rbac: RbacPolicy | None = None,
        store: Store | None = None,
    ) -> None:
        """`store` (opened by the caller, e.g. `open_cluster_store`; the cluster closes it when it stops)
        replaces the in-memory store; its prefix must be `cluster_prefix(profile)`."""
        self.profile = profile
        self.name = profile.name
        self.host = host
        self._requested_port = port
        self.token = token or secrets.token_hex(32)
        self.agent_token = agent_token or secrets.token_hex(32)
        if self.agent_token == self.token:
            raise ValueError("the agent token must differ from the admin token")
        self.identities: tuple[SimIdentity, ...] = (
            SimIdentity(ADMIN_USER, self.token, ("system:masters", "system:authenticated"), admin=True),
            SimIdentity(AGENT_USER, self.agent_token, ("federator:agents", "system:authenticated")),
        )
        self.rbac = rbac
        #: (namespace, name) -> the identity of a ServiceAccount the RBAC policy names
        self.service_accounts: dict[tuple[str, str], SimIdentity] = {}
        for namespace, name in rbac.service_accounts if rbac is not None else ():
            identity = SimIdentity(service_account_user(namespace, name), secrets.token_hex(32),
                                   service_account_groups(namespace))
            self.service_accounts[(namespace, name)] = identity
        self.identities += tuple(self.service_accounts.values())
        #: (user, verb, resource or path) -> requests the RBAC policy refused (in /_sim/stats)
        self.forbidden: Counter[tuple[str, str, str]] = Counter()
        self.run_controllers = run_controllers
        self.metrics = metrics or METRICS
        self.log = get_logger("sim").bind(cluster=profile.name)
        if store is not None and store.prefix != cluster_prefix(profile):
            raise ValueError(f"cluster {profile.name}: the store's prefix {store.prefix!r} must be "
                             f"{cluster_prefix(profile)!r}")
        self.store: Store = store if store is not None else MemoryStore(
            prefix=cluster_prefix(profile), retain_revisions=retained_revisions or history_window(
                profile, run_controllers=run_controllers), metrics=self.metrics)
        gang_types = [s.type for s in profile.gang_schedulers]
        self.registry: Registry = with_operator_kinds(kinds.sim_registry(gang_types), profile.operators)
        self.storage = ObjectStorage(self.store, self.registry)
        self.faults = FaultState(cluster=profile.name, storage=self.storage, registry=self.registry,
                                 identify=self._user_of_request, resolve_identity=self._resolve_identity,
                                 users=tuple(i.user for i in self.identities))
        self._authenticate = _bearer_authenticator(self.identities)
        self._authenticate_admin = _bearer_authenticator(self.identities, admin_only=True)
        subresources, verb_only = kinds.sim_subresources()
        extra: dict[str, Any] = {}
        if max_body_bytes is not None:
            extra["max_body_bytes"] = max_body_bytes
        self.app = build_api_app(
            storage=self.storage,
            registry=self.registry,
            server_name=f"sim:{profile.name}",
            authenticate=self._authenticate,
            middlewares=[fault_middleware(self.faults), *self._rbac_middlewares()],
            version_info=_version_info(profile.kubernetes_version),
            subresources=[*subresources, POD_LOG],
            verb_only_resources=verb_only,
            bookmark_interval=bookmark_interval,
            metrics=self.metrics,
            **extra,
        )
        self.log_streams = LogStreams()
        self.app[LOG_STREAMS] = self.log_streams
        #: the kubelet's process runtime (profile processRuntime; its root a temporary directory unless the
        #: profile names one, removed when the cluster stops)
        self.runtime: ProcessRuntime | None = None
        self._temporary_root: Path | None = None
        spec = profile.process_runtime
        if spec is not None and run_controllers:
            root = Path(spec.root) / self.name if spec.root else default_root(self.name)
            self._temporary_root = None if spec.root else root
            self.runtime = ProcessRuntime(root=root, cluster=self.name, storage=self.storage, registry=self.registry,
                                          logger=self.log.bind(controller="processes"),
                                          stop_grace_seconds=spec.stop_grace_seconds)
            self.app[PROCESS_RUNTIME] = self.runtime
        self.app.router.add_routes(admin_routes(self.faults, authenticate=self._authenticate_admin))
        self.app.router.add_get(STATS_PATH, self._stats)
        self.app.cleanup_ctx.append(self._cluster_ctx)
        self._runner: web.AppRunner | None = None
        self._tls = tls
        self._tls_tmp: tempfile.TemporaryDirectory[str] | None = None
        self.port = 0
        self.stopped = asyncio.Event()
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def _rbac_middlewares(self) -> list[Any]:
        if self.rbac is None:
            return []
        # after the faults (a partition answers before any authorization), before the app's own handlers
        return [auth_middleware(self._authenticate, authorizer=self._authorize, logger=self.log)]

    def _authorize(self, principal: Principal, attributes: RequestAttributes) -> tuple[bool, str]:
        assert self.rbac is not None
        allowed, why = self.rbac.authorize(principal, attributes)
        if not allowed:
            what = attributes.path[:256]
            if attributes.is_resource_request:
                what = "/".join(p for p in (attributes.resource, attributes.subresource) if p)
                what = f"{what}.{attributes.group}" if attributes.group else what
            key = (principal.name, attributes.verb[:32], what)
            if key not in self.forbidden and len(self.forbidden) >= _MAX_FORBIDDEN_KEYS:
                key = ("(more)", "(more)", "(more)")
            self.forbidden[key] += 1
        return allowed, why

    # ------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        """The PEM CA certificate clients must trust (after start())."""
        if self._tls is None:
            raise RuntimeError("the cluster has not started")
        return self._tls.ca_pem()

    def _ssl_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls_tmp = tempfile.TemporaryDirectory(prefix=f"federator-sim-{self.name}-")
            self._tls = ensure_dev_tls(self._tls_tmp.name)
        return server_ssl_context(self._tls.server_cert, self._tls.server_key)

    @property
    def api(self) -> ApiServerState:
        return api_state(self.app)

    async def start(self) -> None:
        runner = api_runner(self.app, access_log=None, shutdown_timeout=2.0, handler_cancellation=True)
        await runner.setup()
        ssl_context = self._ssl_context()
        site = web.TCPSite(runner, self.host, self._requested_port, reuse_address=True, ssl_context=ssl_context)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()  # stops the controllers and closes the store (a file's lock with it)
            raise
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self._requested_port
        self._runner = runner
        self.faults.listener = _TLSSiteListener(runner, host=self.host, port=self.port, ssl_context=ssl_context)
        self.log.info("simulated cluster serving", url=self.url, nodes=self.profile.node_count)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            for site in list(runner.sites):
                await site.stop()
            # Cut open connections at once: a TLS close waits for the peer's
            # close_notify, which an idle pooled client never sends.
            server = runner.server
            for conn in list(server.connections if server is not None else ()):
                if conn.transport is not None:
                    conn.transport.abort()
            await runner.cleanup()
        self._remove_temporary_root()
        if self._tls_tmp is not None:
            self._tls_tmp.cleanup()
            self._tls_tmp = None
            self._tls = None
        self.stopped.set()

    def _remove_temporary_root(self) -> None:
        if self._temporary_root is not None and (self.runtime is None or not self.runtime.runs):
            remove_root(self._temporary_root)

    async def __aenter__(self) -> SimCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _cluster_ctx(self, app: web.Application) -> AsyncIterator[None]:
        await self._seed()
        stop = asyncio.Event()
        if self.runtime is not None:
            self.runtime.root.mkdir(parents=True, exist_ok=True)
        if self.run_controllers:
            for name, entry, kwargs in _controllers(self.profile):
                if name == "kubelet" and self.runtime is not None:
                    kwargs = {**kwargs, "runtime": self.runtime}
                self.tasks[name] = spawn(
                    entry(storage=self.storage, registry=self.registry, cluster=self.profile, stop=stop,
                          logger=self.log.bind(controller=name), **kwargs),
                    name=f"sim:{self.name}:{name}", log=self.log, event="controller failed", controller=name)
        self.tasks["namespaces"] = spawn(self._namespace_controller(stop), name=f"sim:{self.name}:namespaces",
                                         log=self.log, event="controller failed", controller="namespaces")
        try:
            yield
        finally:
            stop.set()
            failures = await stop_tasks(self.tasks.values())
            self.tasks.clear()
            if self.runtime is not None:
                await self.runtime.shutdown()  # the kubelet did; again in case it never ran
            self._remove_temporary_root()
            await self.faults.clear()
            await self.storage.close()
            await self.store.close()
            if failures:  # logged when it happened; a stop that hides a dead controller would hide the bug
                raise failures[0]

    async def _seed(self) -> None:
        policy_namespaces = self.rbac.namespaces if self.rbac is not None else ()
        await ensure_namespaces(self.storage, (*SYSTEM_NAMESPACES, *policy_namespaces))
        for node in initial_nodes(self.profile):
            try:
                await self.storage.create(kinds.NODES, node, namespace=None)
            except ApiError as e:
                if e.code != 409:
                    raise

    # ------------------------------------------------------------ namespace lifecycle

    async def _namespace_controller(self, stop: asyncio.Event) -> None:
        """kube's namespace controller, reduced: a Terminating namespace has
        its contents deleted (pods gracefully, through the kubelet), is then
        finalized and removed."""
        running: dict[str, asyncio.Task[None]] = {}
        attempt = 0
        while not stop.is_set():
            try:
                async for ev in self.storage.watch(kinds.NAMESPACES, stop=stop):
                    attempt = 0
                    meta = ev.object["metadata"]
                    name = meta["name"]
                    if ev.type == "DELETED" or not meta.get("deletionTimestamp"):
                        continue
                    task = running.get(name)
                    if task is None or task.done():
                        running[name] = asyncio.get_running_loop().create_task(
                            self._finalize_namespace(name, stop), name=f"sim:{self.name}:namespace:{name}")
            except ApiError as e:
                # 410 after a compaction: watch again from a fresh list
                attempt += 1
                delay = min(5.0, 0.05 * 2 ** attempt) * (0.5 + random.random() / 2)
                self.log.info("namespace watch ended; watching again", code=e.code, wait_s=round(delay, 3))
                await wait_event(stop, delay)
        for task in running.values():
            task.cancel()
        for task in running.values():
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _finalize_namespace(self, namespace: str, stop: asyncio.Event) -> None:
        namespaced = [rt for rt in self.registry if rt.namespaced and "delete" in rt.verbs]
        attempt = 0
        while not stop.is_set():
            remaining = 0
            for rt in namespaced:
                for obj in (await self.storage.list(rt, namespace=namespace)).items:
                    remaining += 1
                    if obj["metadata"].get("deletionTimestamp"):
                        continue  # already going (a pod's kubelet finishes it)
                    try:
                        await self.storage.delete(rt, namespace=namespace, name=obj["metadata"]["name"])
                    except ApiError as e:
                        if e.code != 404:
                            raise
            if remaining == 0:
                break
            attempt += 1
            delay = min(1.0, 0.02 * 2 ** attempt) * (0.5 + random.random() / 2)
            self.log.debug("namespace not empty yet", namespace=namespace, objects=remaining, wait_s=round(delay, 3))
            if await wait_event(stop, delay):
                return

        def finalize(ns: dict[str, Any]) -> dict[str, Any]:
            ns.setdefault("spec", {})["finalizers"] = []
            return ns

        try:
            await self.storage.guaranteed_update(kinds.NAMESPACES, namespace=None, name=namespace, mutate=finalize,
                                                 subresource="finalize")
            await self.storage.delete(kinds.NAMESPACES, namespace=None, name=namespace, grace_period_seconds=0)
        except ApiError as e:
            if e.code != 404:
                raise

    # ------------------------------------------------------------ admin

    async def _stats(self, request: web.Request) -> web.StreamResponse:
        if await self._authenticate_admin(request) is None:
            return json_response(ApiError(401, "Unauthorized", "Unauthorized").to_status(), status=401)
        return json_response(self.stats())

    def stats(self) -> dict[str, Any]:
        """Requests served per verb and resource (e.g. LIST calls on resume)."""
        counts = self.api.counts
        by_verb: dict[str, dict[str, int]] = {}
        for (verb, resource), n in sorted(counts.items()):
            by_verb.setdefault(verb, {})[resource] = n
        stats: dict[str, Any] = {"cluster": self.name, "requests": by_verb, "openWatches": self.api.open_watches,
                                 "openLogStreams": self.log_streams.open}
        if self.rbac is not None:
            stats["forbidden"] = [{"user": user, "verb": verb, "resource": what, "count": n}
                                  for (user, verb, what), n in sorted(self.forbidden.items())]
        return stats

    def list_count(self, resource: str) -> int:
        """LIST requests served for `resource` ("pods", "podgroups.scheduling.volcano.sh")."""
        return self.api.count("list", resource)

    # ------------------------------------------------------------ identities

    def _user_of_request(self, request: web.Request) -> str | None:
        """The user a request authenticates as (None: no valid token)."""
        value = _bearer_value(request)
        identity = _identity_of_token(self.identities, value) if value is not None else None
        return identity.user if identity is not None else None

    def _resolve_identity(self, value: str) -> str | None:
        """The user named by `value`: a user name, or one of the cluster's bearer tokens."""
        for named in self.identities:
            if value == named.user:
                return named.user
        identity = _identity_of_token(self.identities, value)
        return identity.user if identity is not None else None

    # ------------------------------------------------------------ kubeconfig

    def write_kubeconfig(self, path: str | os.PathLike[str], *, namespace: str = "default") -> Path:
        """Write this cluster's kubeconfig (mode 0600: it holds the token);
        cluster and context are named after the cluster."""
        return write_kubeconfig(
            path, server=self.url, ca_pem=self.ca_pem, token=self.token, user=f"{self.name}-admin",
            namespace=namespace, cluster_name=self.name, context_name=self.name,
        )

    def service_account_token(self, namespace: str, name: str) -> str:
        """The bearer token of a ServiceAccount the RBAC policy names (KeyError for any other)."""
        identity = self.service_accounts.get((namespace, name))
        if identity is None:
            raise KeyError(f"cluster {self.name}: the RBAC policy names no ServiceAccount {namespace}/{name}")
        return identity.token

    def write_service_account_kubeconfig(self, path: str | os.PathLike[str], *, namespace: str, name: str) -> Path:
        """Write a kubeconfig for a ServiceAccount the RBAC policy names (mode 0600; user `<cluster>-<name>`,
        default namespace its own); cluster and context are named after the cluster."""
        return write_kubeconfig(
            path, server=self.url, ca_pem=self.ca_pem, token=self.service_account_token(namespace, name),
            user=f"{self.name}-{name}", namespace=namespace, cluster_name=self.name, context_name=self.name,
        )

    def write_agent_kubeconfig(self, path: str | os.PathLike[str], *, namespace: str = "federator-system") -> Path:
        """Write the fence agent's kubeconfig (user `federator-agent`, its own token; mode 0600);
        cluster and context are named after the cluster, like `write_kubeconfig`'s."""
        return write_kubeconfig(
            path, server=self.url, ca_pem=self.ca_pem, token=self.agent_token, user=f"{self.name}-agent",
            namespace=namespace, cluster_name=self.name, context_name=self.name,
        )


def _version_info(kubernetes_version: str) -> dict[str, str]:
    parts = kubernetes_version.lstrip("v").split(".")
    return {"major": parts[0], "minor": parts[1] if len(parts) > 1 else "0", "gitVersion": kubernetes_version}


def cluster_prefix(profile: ClusterProfile) -> str:
    """The store prefix of a cluster's keys."""
    return f"/sim/{profile.name}/"


def history_window(profile: ClusterProfile, *, run_controllers: bool = True) -> int:
    """Revisions of history a cluster keeps for watches (DEFAULT_RETAINED_REVISIONS plus its node Leases' churn)."""
    lease_churn = profile.node_count * NODE_LEASE_RETAINED_SECONDS / NODE_LEASE_RENEW_SECONDS
    return DEFAULT_RETAINED_REVISIONS + (int(lease_churn) if run_controllers else 0)


def store_path(directory: Path, profile: ClusterProfile) -> Path:
    """Where a persistent cluster keeps its objects."""
    return directory / f"{profile.name}.db"


async def open_cluster_store(directory: Path, profile: ClusterProfile, *, metrics: Metrics | None = None) -> Store:
    """The SqliteStore file of a persistent cluster (created if missing). Raises StoreError /
    StoreUnavailable (e.g. another process holds the file) with a message naming the file."""
    from federator.store.sqlite import SqliteStore

    directory.mkdir(parents=True, exist_ok=True)
    return await SqliteStore.open(store_path(directory, profile), prefix=cluster_prefix(profile),
                                  retain_revisions=history_window(profile), metrics=metrics)


def _previous_identity(kubeconfig: Path) -> tuple[int | None, str | None]:
    """(port, token) a kubeconfig this module wrote names; (None, None) if it cannot be read."""
    import yaml

    try:
        document = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
        server = str(document["clusters"][0]["cluster"]["server"])
        token = document["users"][0]["user"]["token"]
    except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError):
        return None, None
    try:
        port = urlsplit(server).port
    except ValueError:
        port = None
    return port, token if isinstance(token, str) and len(token) >= 32 else None


def _port_free(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


async def start_sim_cluster(
    profile: ClusterProfile,
    *,
    directory: Path | None,
    port: int | None = None,
    **cluster_kw: Any,
) -> SimCluster:
    """A started SimCluster. With `directory` it is persistent (module docstring): its store is
    `DIR/<cluster>.db`, and unless `port` is given it takes the port and tokens of the kubeconfigs
    `DIR/<cluster>.kubeconfig` and `DIR/<cluster>-agent.kubeconfig` of its last run (a port now taken
    by something else: a free one). Without, it is what `SimCluster(profile)` is. Raises OSError when
    `port` cannot be listened on, StoreError/StoreUnavailable when the store file cannot be opened."""
    metrics = cluster_kw.get("metrics")
    if directory is None:
        cluster = SimCluster(profile, port=port or 0, **cluster_kw)
        try:
            await cluster.start()
        except BaseException:
            await cluster.stop()
            raise
        return cluster
    previous_port, token = _previous_identity(directory / f"{profile.name}.kubeconfig")
    _, agent_token = _previous_identity(directory / f"{profile.name}-agent.kubeconfig")
    if token is not None and agent_token is not None and token != agent_token:
        cluster_kw.setdefault("token", token)
        cluster_kw.setdefault("agent_token", agent_token)
    chosen = port
    if chosen is None and previous_port and _port_free(str(cluster_kw.get("host", "127.0.0.1")), previous_port):
        chosen = previous_port
    for attempt in (chosen, 0) if port is None and chosen else (chosen,):
        store = await open_cluster_store(directory, profile, metrics=metrics)
        try:
            cluster = SimCluster(profile, port=attempt or 0, store=store, **cluster_kw)
        except BaseException:
            await store.close()
            raise
        try:
            await cluster.start()
        except OSError:
            await cluster.stop()
            if attempt == 0 or port is not None:
                raise
            get_logger("sim.server").info("the port of the last run is taken; serving on another",
                                          cluster=profile.name, port=attempt)
            continue
        except BaseException:
            await cluster.stop()
            raise
        return cluster
    raise AssertionError("unreachable")  # pragma: no cover
