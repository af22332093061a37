"""The hub process: store + API + controllers in one aiohttp application.

`build_hub_app` wires, in its cleanup_ctx (so everything starts and stops
with the app, in this order and back):

1. the hub store (`open_store(url)`), closed last;
2. the hub leadership (a lease-backed leader key; its create revision is the
   fencing token); every replica campaigns in a named task and serves the API
   meanwhile, so any number of hubs can share one etcd;
3. the kube-style API (`federator.apiserver.build_api_app` over an
   `ObjectStorage` on the hub store, kinds from `federator.hub.kinds`) with
   bearer-token authentication and role authorization (401/403 Status);
   MemberCluster registrations from `--clusters DIR` are applied at start;
   `/readyz` says whether the store answers and whether this replica leads;
   the web dashboard's static files are served at /ui/ (federator/ui, no token: the page then calls
   this API with the user's own credentials);
4. the controllers (`hub_controllers()` below: the one list of what the hub
   runs), entered each time leadership is won, each as a cleanup_ctx-style
   async generator over that term's `HubContext`, whose store and storage
   fence every write with the term's token (a deposed leader writes nothing).
   Before any of them starts, `build_pipeline` builds the parts they share, in
   order, as the context's typed `parts` (controllers/pipeline.py; the picture
   is in docs/architecture.md): the member syncs, the one job cache, the
   member object index, the reservation book, the dispatches in flight, the
   epoch fence and the Dispatcher (the only writer of member objects). Each
   controller's factory hands its controller the parts it uses.

Losing leadership (its lease lapsed: a pause, a partition, an etcd outage)
stops the controllers and makes the hub a follower again: it keeps serving
the API and campaigns anew. Only a controller that fails makes the hub exit
(code 1). `run_hub` (behind `federator up`) adds
TLS (given, or a development CA under the state dir), a token file (given, or
generated) and, in development mode, admin and researcher kubeconfigs.

It must never import federator.sim: the hub cannot tell a simulator from a
real cluster; only the CLI starts both. It never logs a token, a kubeconfig
body or a MemberCluster's credentials.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import secrets
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
import yaml
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from federator import __version__
from federator.apis.views import Body
from federator.apiserver.audit import AuditLog, AuditLogSettings, open_audit_log, settings_from_flags
from federator.apiserver.app import Subresource, SubresourceRequest, build_api_app, json_response
from federator.apiserver.auth import (
    PRINCIPAL_KEY,
    TokenAuthenticator,
    TokenFileError,
    auth_middleware,
    principal_roles,
)
from federator.apiserver.errors import DEFAULT_MAX_BODY_BYTES, ApiError, bad_request, not_found, service_unavailable
from federator.apiserver.namespaces import SYSTEM_NAMESPACES, ensure_namespaces
from federator.apiserver.podlog import parse_log_options, serve_log
from federator.apiserver.registry import JSONObject
from federator.apiserver.reviews import review_resources
from federator.apiserver.serving import DEFAULT_LIMITS, ServerLimits, api_runner
from federator.apiserver.storage import ObjectStorage
from federator.clusters.reflector import Backoff
from federator.controllers.context import HUB_GROUP, HUB_VERSION, ControllerFactory, HubContext, HubSettings
from federator.runtime.gcpolicy import server_gc
from federator.dev.certs import ensure_dev_tls, server_ssl_context, write_kubeconfig, write_private_file
from federator.hub.kinds import CONNECTION_VISIBLE, MEMBER_CLEANUP_FINALIZER, SOURCE_FINALIZER, hub_registry
from federator.obs import METRICS, Metrics, RepeatedFailureLog, configure_logging, get_logger
from federator.hub.encryption import encrypting, resolve as resolve_encryption
from federator.store.encryption import EncryptionConfig, EncryptionConfigError, read_encryption_config
from federator.store.forwarding import ForwardsUpkeep
from federator.store.leader import FencedStore, FencingToken, LeaderElection, holder_of
from federator.store.open import EtcdTLS, check_store_url, etcd_tls_from_flags, open_store
from federator.store.protocol import (
    Compare,
    KeyValue,
    Op,
    RangeResult,
    Store,
    StoreError,
    StoreMisconfigured,
    StoreUnavailable,
    TxnResult,
)
from federator.ui import ui_middleware

if TYPE_CHECKING:
    from federator.controllers.pipeline import Pipeline

_log = get_logger("hub")

#: How long a crashed leader's key outlives it (etcd; sqlite revokes at open).
LEADER_TTL_SECONDS = 10.0
#: Seconds between checks that the hub store answers (behind /readyz).
STORE_PROBE_SECONDS = 1.0
#: A store that has not answered a probe for this long makes /readyz fail.
STORE_STALE_SECONDS = 3.0
#: Seconds between reads of the store's size (federator_store_size_bytes / _keys).
STORE_USAGE_SECONDS = 15.0
#: How long a /metrics scrape waits for the stored DrillReports before it answers with the last counts.
SCRAPE_READ_SECONDS = 2.0
#: Backoff between campaigns that failed on the store (capped exponential, jittered by the store's retries).
CAMPAIGN_BACKOFF_SECONDS = (0.5, 5.0)
#: How long one controller may take to stop before the hub gives up on it.
CONTROLLER_STOP_SECONDS = 10.0
HUB_SERVER_NAME = "hub"
#: The store prefix of the hub's keys (same as open_store's default).
HUB_STORE_PREFIX = "/federator/"
DEFAULT_LISTEN = "127.0.0.1:6443"


def hub_controllers() -> list[ControllerFactory]:
    """THE list of controllers `federator up` runs, in start order (stopped in
    reverse). Each is `async def factory(hub: HubContext) -> AsyncIterator[None]`
    (set up, yield, tear down), started once this hub holds the leadership.
    Add a controller by appending it here (imports stay local so that
    `federator --help` stays fast)."""
    controllers: list[ControllerFactory] = []
    # first: the others record Events into the recorder it installs (hub.events)
    from federator.controllers.events import event_recording
    controllers.append(event_recording)
    from federator.controllers.membercluster import member_sync
    controllers.append(member_sync)
    # the cluster inventory (issue 30): each ClusterProfile joins as a MemberCluster
    from federator.controllers.clusterprofile import cluster_profiles
    controllers.append(cluster_profiles)
    # the one TrainingJob list+watch that every job controller below subscribes to
    from federator.controllers.jobcache import job_cache
    controllers.append(job_cache)
    # the upstream job kinds (issue 28): each object's twin TrainingJob, its status mirrored back
    from federator.controllers.jobkinds import job_kind_twins
    controllers.append(job_kind_twins)
    # job lifecycle (issue 7): dispatch before placement (placement hands decisions to the dispatcher)
    from federator.controllers.dispatch import job_dispatch
    controllers.append(job_dispatch)
    from federator.controllers.placement import job_placement
    controllers.append(job_placement)
    # job lifecycle (issue 7): status sync keeps the member object index's watches (the next two read it)
    from federator.controllers.status_sync import status_sync
    controllers.append(status_sync)
    from federator.controllers.stuck import stuck_gangs
    controllers.append(stuck_gangs)
    from federator.controllers.failover import cluster_failover
    controllers.append(cluster_failover)
    from federator.controllers.drain import cluster_drain
    controllers.append(cluster_drain)
    from federator.controllers.cleanup import member_cleanup
    controllers.append(member_cleanup)
    # after cleanup: a Terminating namespace's jobs go through their member-cleanup finalizer
    from federator.controllers.namespaces import namespace_lifecycle
    controllers.append(namespace_lifecycle)
    controllers.append(store_compaction)
    return controllers


async def store_compaction(hub: HubContext) -> AsyncIterator[None]:
    """The leader keeps `--compaction-interval` of history in the hub store (HubSettings.compaction
    .interval_seconds; 0 turns compaction off), compacting older revisions every fifth of it
    (store/compaction.py). Only the leader runs it; a second replica compacting at the same time does no
    harm (compaction is idempotent)."""
    from federator.controllers.loops import background_loop
    from federator.store.compaction import run_compactor

    interval = hub.settings.compaction.interval_seconds
    if interval <= 0:
        _log.info("store compaction off (--compaction-interval 0): the store keeps all history")
        yield
        return
    async with background_loop(run_compactor(hub.store, interval_seconds=interval), name="hub-store-compaction",
                               what="store compaction", log=_log):
        yield


#: Finalizers put on every new TrainingJob. Only list one whose controller is
#: in hub_controllers(): a finalizer nobody removes makes deletion hang.
#: member_cleanup (controllers/cleanup.py) removes MEMBER_CLEANUP_FINALIZER
#: once the job's member objects are gone.
JOB_FINALIZERS: tuple[str, ...] = (MEMBER_CLEANUP_FINALIZER,)
#: Finalizers put on every new object of an upstream job kind (PyTorchJob, ...): job_kind_twins
#: (controllers/jobkinds.py) removes SOURCE_FINALIZER once the object's twin TrainingJob is gone.
SOURCE_FINALIZERS: tuple[str, ...] = (SOURCE_FINALIZER,)


def build_pipeline(hub: HubContext) -> Pipeline:
    """The parts the controllers of one term share (controllers/pipeline.py), built in order, each handed what
    it depends on; set as `hub.pipeline` (read as `hub.parts`) and returned. Nothing starts here: the
    controllers' factories run the parts' loops (member sync, whose watches also feed the member object
    index; the job cache's watch; dispatch's recovery)."""
    from federator.controllers.dispatch import Dispatcher
    from federator.controllers.jobcache import JobCache
    from federator.controllers.jobs import InFlight, ReservationLedger
    from federator.controllers.membercluster import MemberClusters
    from federator.controllers.memberobjects import MemberObjects
    from federator.controllers.namespaces import NamespaceCache
    from federator.controllers.pipeline import EpochFence, Pipeline

    members = MemberClusters()
    jobs = JobCache(hub)
    objects = MemberObjects(hub, members=members)
    reservations = ReservationLedger()
    in_flight = InFlight()
    fence = EpochFence(objects)
    dispatcher = Dispatcher(hub, members=members, objects=objects, fence=fence, reservations=reservations,
                            in_flight=in_flight)
    hub.pipeline = Pipeline(members=members, jobs=jobs, objects=objects, reservations=reservations,
                            in_flight=in_flight, fence=fence, dispatcher=dispatcher, namespaces=NamespaceCache(hub))
    return hub.pipeline


# ---------------------------------------------------------------- the store slot


class _StoreSlot(ForwardsUpkeep):
    """The hub store as seen before it is open: the API app and its
    ObjectStorage are built synchronously, the store is opened in the app's
    cleanup_ctx and plugged in here. Every call goes to the opened store."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._target: Store | None = None

    def plug(self, store: Store) -> None:
        if store.prefix != self.prefix:
            raise StoreError(f"hub store prefix {store.prefix!r} differs from the expected {self.prefix!r}")
        self._target = store

    def unplug(self) -> None:
        self._target = None

    @property
    def target(self) -> Store:
        if self._target is None:
            raise StoreUnavailable("the hub store is not open (the hub is starting or has stopped)")
        return self._target

    async def get(self, key: str) -> KeyValue | None:
        return await self.target.get(key)

    async def range(self, prefix: str, *, limit: int = 0, start_after: str | None = None,
                    revision: int | None = None) -> RangeResult:
        return await self.target.range(prefix, limit=limit, start_after=start_after, revision=revision)

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> KeyValue:
        return await self.target.put(key, value, lease=lease)

    async def create(self, key: str, value: bytes, *, lease: int = 0) -> KeyValue:
        return await self.target.create(key, value, lease=lease)

    async def update(self, key: str, value: bytes, *, expected_mod_revision: int, lease: int = 0) -> KeyValue:
        return await self.target.update(key, value, expected_mod_revision=expected_mod_revision, lease=lease)

    async def delete(self, key: str, *, expected_mod_revision: int | None = None) -> KeyValue:
        return await self.target.delete(key, expected_mod_revision=expected_mod_revision)

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        return await self.target.txn(compares, success, failure)

    def forward_to(self) -> Store:
        return self.target

    async def close(self) -> None:
        await self.target.close()


# ---------------------------------------------------------------- the app


@dataclass
class HubState:
    """What a running hub app exposes to run_hub, tests and benchmarks."""

    #: the current term's context while leading (store and storage fenced with its token), else `base`
    context: HubContext
    store_url: str
    #: the unfenced context the API serves from (and controllers' context while not leading)
    base: HubContext | None = None
    #: set while this hub holds the leadership (controllers run)
    leading: asyncio.Event = field(default_factory=asyncio.Event)
    #: set when a term ends (leadership lost); cleared when the next term begins
    term_over: asyncio.Event = field(default_factory=asyncio.Event)
    #: terms led (1 after the first win) and terms lost (each a step-down to follower)
    terms: int = 0
    step_downs: int = 0
    #: set once the first campaign attempt has an answer (this hub leads, or another does)
    campaigned: asyncio.Event = field(default_factory=asyncio.Event)
    #: set when a controller failed to start or died (the hub must stop)
    failed: asyncio.Event = field(default_factory=asyncio.Event)
    leader_key: str = ""
    holder: str = ""
    #: the store's revision at the last probe that answered, when (monotonic), and the last failure
    store_revision: int = 0
    store_answered_at: float | None = None
    store_error: str = ""
    #: registrations applied from --clusters at start: name -> "created" | "updated" | "unchanged"
    registrations: dict[str, str] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)


HUB_STATE: web.AppKey[HubState] = web.AppKey("federator_hub_state", HubState)


async def _failover_plan(state: HubState, req: SubresourceRequest) -> web.StreamResponse:
    """GET memberclusters/{name}/failoverplan[?for=loss|drain]: where the cluster's gangs would go now."""
    from federator.controllers.drain import failover_plan

    purpose = req.request.query.get("for", "loss")
    if purpose not in ("loss", "drain"):
        raise bad_request(f'for: Unsupported value: "{purpose[:64]}": supported values: "loss", "drain"')
    rt = state.context.kind("MemberCluster")
    await req.storage.get(rt, namespace=None, name=req.name)  # 404 for an unknown cluster
    parts = state.context.pipeline
    if not state.leading.is_set() or parts is None or parts.running.member_sync is None:
        raise service_unavailable("this hub does not lead: its controllers (and the member snapshots a plan "
                                  "needs) run on the leader; ask it", retry_after_seconds=5)
    if req.name not in parts.members.syncs:
        raise not_found(rt, req.name)
    return json_response(failover_plan(state.context, req.name, purpose=purpose))


async def _job_log(state: HubState, req: SubresourceRequest) -> web.StreamResponse:
    """GET trainingjobs/{name}/log[?role=R&index=I&follow=...]: the job's pods' logs from the cluster holding
    them now (controllers/joblogs.py); authorised like the job itself (apiserver/auth.py)."""
    from federator.controllers.joblogs import log_selection, open_job_log

    options = parse_log_options(req.request.query, name=req.name)
    role, index = log_selection(req.request.query)
    job = await req.storage.get(state.context.kind("TrainingJob"), namespace=req.namespace, name=req.name)
    async with open_job_log(state.context, job, role=role, index=index, options=options) as chunks:
        return await serve_log(req.request, chunks, limit_bytes=options.limit_bytes)


async def _job_pods(state: HubState, req: SubresourceRequest) -> web.StreamResponse:
    """GET trainingjobs/{name}/pods: the job's member pods (role, index, node, phase, ...) in the cluster holding
    them now (controllers/jobpods.py); authorised like the job's log (apiserver/auth.py)."""
    from federator.controllers.jobpods import job_pods

    job = await req.storage.get(state.context.kind("TrainingJob"), namespace=req.namespace, name=req.name)
    return json_response(await job_pods(state.context, job))


@contextlib.contextmanager
def _as_caller_sees(request: web.Request) -> Iterator[None]:
    """Admins see MemberClusters' spec.connection (credentials redacted); researchers and viewers do not
    (hubapi.CONNECTION_VISIBLE, read by the kind's `present`)."""
    principal = request.get(PRINCIPAL_KEY)
    token = CONNECTION_VISIBLE.set(principal is not None and "admin" in principal_roles(principal))
    try:
        yield
    finally:
        CONNECTION_VISIBLE.reset(token)


@web.middleware
async def _connection_visibility(request: web.Request, handler: Any) -> web.StreamResponse:
    """`_as_caller_sees` for every object this request returns, watch events included: they are written inside
    the handler."""
    with _as_caller_sees(request):
        response: web.StreamResponse = await handler(request)
        return response


def _audit_halves(audit: AuditLog | None, half: int) -> list[Any]:
    return [audit.middlewares()[half]] if audit is not None else []


def hub_state(app: web.Application) -> HubState:
    return app[HUB_STATE]


class RegistrationError(Exception):
    """A --clusters registration file that cannot be applied (one line: file and reason)."""


def build_hub_app(
    settings: HubSettings,
    *,
    store_url: str,
    etcd_tls: EtcdTLS | None = None,
    controllers: Sequence[ControllerFactory],
    authenticator: TokenAuthenticator,
    job_finalizers: Sequence[str] = JOB_FINALIZERS,
    source_finalizers: Sequence[str] = SOURCE_FINALIZERS,
    metrics: Metrics | None = None,
    clusters_dir: Path | None = None,
    leader_ttl_seconds: float = LEADER_TTL_SECONDS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    bookmark_interval: float = 10.0,
    limits: ServerLimits = DEFAULT_LIMITS,
    encryption: EncryptionConfig | None = None,
    audit: AuditLog | None = None,
) -> web.Application:
    """The hub as one aiohttp Application (see the module docstring). Serve it
    with an AppRunner; nothing is opened before the runner sets it up. `encryption`
    (--encryption-provider-config) encrypts the resources it names in the store (hub/encryption.py). With
    `audit`, every API request and every write of the controllers to a member is an audit event
    (apiserver/audit.py); the app closes it."""
    metrics = metrics or METRICS
    slot = _StoreSlot(HUB_STORE_PREFIX)
    registry = hub_registry(settings.validation, job_finalizers=job_finalizers,
                            source_finalizers=source_finalizers)
    storage = ObjectStorage(slot, registry, autoprovision_namespaces=settings.namespaces.autoprovision)
    context = HubContext(store=slot, storage=storage, registry=registry, settings=settings, metrics=metrics,
                         # member clients report the hub's writes to members (clusters/client.py) into the log
                         member_writes=audit.record_member_write if audit is not None else None)
    state = HubState(context=context, store_url=store_url, base=context)
    app = build_api_app(
        storage=storage, registry=registry, server_name=HUB_SERVER_NAME,
        # auth_middleware authenticates (401) and authorizes (403); the app's own
        # authenticate hook would only repeat the first half.
        # ui_middleware first: the dashboard's static files (/ui/) need no token; the page then calls this API
        # with the user's own credentials.
        # The audit log's outer half sees every answer (401 and 403 too), its inner half runs once the user
        # is known (RequestReceived).
        middlewares=[ui_middleware, *_audit_halves(audit, 0), auth_middleware(authenticator, logger=get_logger("hub.auth")),
                     *_audit_halves(audit, 1), _connection_visibility],
        # gitVersion stays kube-like (kubectl warns on a skewed minor); ours rides along.
        version_info={"federatorVersion": __version__},
        max_body_bytes=max_body_bytes, bookmark_interval=bookmark_interval, metrics=metrics, limits=limits,
        start_storage=False,
        readiness=lambda: _readiness(state),
        subresources=[Subresource(group=HUB_GROUP, version=HUB_VERSION, plural="memberclusters",
                                  name="failoverplan", kind="FailoverPlan", verbs=("get",),
                                  handler=lambda req: _failover_plan(state, req)),
                      Subresource(group=HUB_GROUP, version=HUB_VERSION, plural="trainingjobs", name="log",
                                  kind="TrainingJob", verbs=("get",), handler=lambda req: _job_log(state, req)),
                      Subresource(group=HUB_GROUP, version=HUB_VERSION, plural="trainingjobs", name="pods",
                                  kind="TrainingJobPods", verbs=("get",),
                                  handler=lambda req: _job_pods(state, req))],
        # kubectl auth whoami / can-i, decided by the same role rules as auth_middleware.
        verb_only_resources=review_resources(),
    )
    app[HUB_STATE] = state
    if audit is not None:
        audit.install(app, view=_as_caller_sees)  # request bodies in the log as the caller would see them

    async def metrics_handler(_: web.Request) -> web.Response:
        await _count_drill_reports(state, metrics)
        return web.Response(body=generate_latest(metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/metrics", metrics_handler)

    async def store_ctx(_: web.Application) -> AsyncIterator[None]:
        _log.info("hub starting", version=__version__, store=store_url)
        store = await open_store(store_url, prefix=HUB_STORE_PREFIX, metrics=metrics, etcd_tls=etcd_tls)
        if encryption is not None:
            try:
                store = encrypting(store, encryption, registry, metrics=metrics)
            except EncryptionConfigError:
                await store.close()
                raise
        slot.plug(store)
        try:
            yield
        finally:
            slot.unplug()
            await store.close()

    async def leadership_ctx(_: web.Application) -> AsyncIterator[None]:
        election = LeaderElection(slot.target, name="hub", ttl_seconds=leader_ttl_seconds, metrics=metrics)
        state.leader_key = election.key
        state.holder = election.holder
        state.tasks["store-probe"] = asyncio.create_task(_probe_store(state), name="hub-store-probe")
        state.tasks["leadership"] = asyncio.create_task(
            _lead_when_elected(state, election, metrics), name="hub-leadership")
        try:
            yield
        finally:
            for name in ("leadership", "store-probe"):
                task = state.tasks.pop(name, None)
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await election.resign()

    async def api_ctx(app_: web.Application) -> AsyncIterator[None]:
        await storage.start()
        try:
            try:  # as kube-apiserver does at start; the namespace controller makes sure again each term
                await ensure_namespaces(storage, SYSTEM_NAMESPACES)
            except StoreError as e:
                _log.warning("could not create the system namespaces yet (store unavailable)", error=str(e))
            if clusters_dir is not None:
                state.registrations = await apply_registrations(storage, clusters_dir)
            yield
        finally:
            await storage.close()

    async def controllers_ctx(_: web.Application) -> AsyncIterator[None]:
        stop = asyncio.Event()
        task = asyncio.create_task(_run_controllers(state, controllers, stop), name="hub-controllers")
        state.tasks["controllers"] = task
        try:
            yield
        finally:
            stop.set()
            try:
                await task
            except Exception as e:  # noqa: BLE001 - logged; shutdown goes on
                _log.error("controllers failed while stopping", error=repr(e))
            state.tasks.pop("controllers", None)

    for ctx in (store_ctx, leadership_ctx, api_ctx, controllers_ctx):
        app.cleanup_ctx.append(ctx)
    return app


def _took_lead(state: HubState, election: LeaderElection, token: FencingToken, metrics: Metrics) -> None:
    """Begin a term: controllers get a fresh context whose every write carries `token`."""
    base = state.base or state.context
    fenced = FencedStore(base.store, token, metrics=metrics)
    state.context = HubContext(store=fenced, storage=base.storage.writing_through(fenced), registry=base.registry,
                               settings=base.settings, metrics=base.metrics, fencing=token,
                               member_writes=base.member_writes)
    build_pipeline(state.context)
    state.terms += 1
    state.term_over.clear()
    state.leading.set()
    _log.info("hub leads", leader_key=election.key, leader_token=token.revision, holder=election.holder,
              term=state.terms)


def _step_down(state: HubState, election: LeaderElection) -> None:
    """End a term: controllers stop (the runner sees term_over), the API keeps serving."""
    state.leading.clear()
    state.context = state.base or state.context
    state.step_downs += 1
    state.term_over.set()
    _log.warning("hub leadership lost; stepping down to follower (serving the API, campaigning again)",
                 leader_key=election.key, term=state.terms)


async def _lead_when_elected(state: HubState, election: LeaderElection, metrics: Metrics) -> None:
    """Campaign, lead until the lease is lost, step down, campaign again; for as long as the hub runs.
    A store that does not answer is retried with backoff and logged once, then in a summary."""
    failures = RepeatedFailureLog(_log, "cannot campaign for the hub leadership (store unreachable); retrying",
                                  leader_key=election.key)
    delay = CAMPAIGN_BACKOFF_SECONDS[0]
    announced = False
    loop = asyncio.get_running_loop()
    while True:
        try:
            token = await election.try_acquire()
            state.campaigned.set()
            if token is None:
                if not announced:
                    holder = await election.current_leader()
                    _log.info("waiting for leadership", leader_key=election.key,
                              held_by=holder_of(holder))
                    announced = True
                token = await election.campaign()
        except StoreError as e:
            failures.failed(e, now=loop.time(), retry_in_seconds=round(delay, 2))
            await asyncio.sleep(delay)
            delay = min(CAMPAIGN_BACKOFF_SECONDS[1], delay * 2)
            continue
        failures.succeeded("the store answers again; campaign resumed")
        delay = CAMPAIGN_BACKOFF_SECONDS[0]
        announced = False
        _took_lead(state, election, token, metrics)
        await election.lost.wait()
        _step_down(state, election)
        # Give up what is left of the lost term (our key, if it still exists, and our lease), so that
        # this replica or another can lead at once instead of after the old lease runs out.
        await election.resign()


async def _probe_store(state: HubState) -> None:
    """Keep `state.store_*` current: does the hub store answer (for /readyz)? Every
    STORE_USAGE_SECONDS it also has the store export its size (`Store.usage`)."""
    store = (state.base or state.context).store
    loop = asyncio.get_running_loop()
    usage_due = loop.time()
    while True:
        try:
            async with asyncio.timeout(STORE_STALE_SECONDS):
                state.store_revision = await store.current_revision()
            state.store_answered_at = loop.time()
            state.store_error = ""
            if loop.time() >= usage_due:
                usage_due = loop.time() + STORE_USAGE_SECONDS
                async with asyncio.timeout(STORE_STALE_SECONDS):
                    await store.usage()
        except (StoreError, TimeoutError) as e:
            state.store_error = str(e) or "no answer within the probe timeout"
        await asyncio.sleep(STORE_PROBE_SECONDS)


async def _count_drill_reports(state: HubState, metrics: Metrics) -> None:
    """federator_drill_reports{fault, verdict} from the stored DrillReports, at scrape time (every replica
    reads them from its watch cache). A store that does not answer within SCRAPE_READ_SECONDS leaves the
    last counts: the scrape itself must answer."""
    from federator.apis.drillreport import FAULTS, accounted

    base = state.base or state.context
    try:
        async with asyncio.timeout(SCRAPE_READ_SECONDS):
            listing = await base.storage.list(base.kind("DrillReport"))
    except (ApiError, StoreError, TimeoutError) as e:
        _log.info("DrillReports not counted for this scrape", error=str(e) or "no answer in time")
        return
    counts = {(fault, verdict): 0 for fault in FAULTS for verdict in ("passed", "failed")}
    for report in listing.items:
        spec = report.get("spec") or {}
        fault = spec.get("fault")
        if fault not in FAULTS:
            continue
        # The drill's own bar (README, docs/failover.md): nothing lost, nothing ran twice, every affected gang
        # accounted for (a report from before those figures is judged without them).
        counted = accounted(spec)
        passed = (spec.get("jobsLost") == 0 and spec.get("duplicates") == 0
                  and int(spec.get("maxConcurrentCopies") or 0) <= 1
                  and counted in (None, spec.get("gangsAffected")))
        counts[(fault, "passed" if passed else "failed")] += 1
    for (fault, verdict), count in counts.items():
        metrics.drill_reports.labels(fault=fault, verdict=verdict).set(count)


async def _readiness(state: HubState) -> tuple[bool, str]:
    """/readyz: ready while the store answers; says whether this replica leads or follows."""
    answered = state.store_answered_at
    if answered is None or asyncio.get_running_loop().time() - answered > STORE_STALE_SECONDS:
        why = state.store_error or "no answer yet"
        return False, f"the hub store does not answer ({why[:200]})"
    base = state.base or state.context
    cached = base.storage.cache_revision()
    if cached is None:
        cache = "watch cache not running (lists read the store)"
    elif cached >= state.store_revision:
        cache = f"watch cache in sync at revision {cached}"
    else:
        cache = f"watch cache at revision {cached}, {state.store_revision - cached} behind the store's last probe"
    if state.leading.is_set() and state.context.fencing is not None:
        return True, f"leader (token {state.context.fencing.revision}, term {state.terms}); {cache}"
    return True, f"follower (serving the API, campaigning); {cache}"


async def _enter_unless_stopped(generator: AsyncIterator[None], *stops: asyncio.Event) -> bool:
    """Start one controller (run its set-up up to its `yield`), unless one of
    `stops` is set first (the hub stops, the term ends): then the set-up is
    cancelled and False is returned, so a controller waiting on unreachable
    members never delays Ctrl-C or a step-down."""
    start: asyncio.Future[Any] = asyncio.ensure_future(generator.__anext__())
    stoppers: list[asyncio.Future[Any]] = [asyncio.create_task(s.wait(), name="hub-controller-start-stop")
                                           for s in stops]
    try:
        await asyncio.wait({start, *stoppers}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for stopper in stoppers:
            stopper.cancel()
    if start.done():
        start.result()
        return True
    start.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
        await start
    return False


async def _run_controllers(state: HubState, controllers: Sequence[ControllerFactory], stop: asyncio.Event) -> None:
    """For each term this hub leads: enter every controller with the term's context; leave them (in
    reverse) when the term ends or on stop; then wait for the next term."""
    while True:
        await _wait_first(stop, state.leading)
        if stop.is_set() or not controllers:
            return
        await _run_term(state, controllers, stop, state.context)
        if state.failed.is_set() or stop.is_set():
            return


async def _run_term(state: HubState, controllers: Sequence[ControllerFactory], stop: asyncio.Event,
                    context: HubContext) -> None:
    term = state.terms
    entered: list[tuple[str, AsyncIterator[None]]] = []
    try:
        for factory in controllers:
            name = getattr(factory, "__name__", repr(factory))
            generator = factory(context)
            try:
                started = await _enter_unless_stopped(generator, stop, state.term_over)
            except Exception as e:  # noqa: BLE001 - a controller that cannot start stops the hub
                if state.term_over.is_set():
                    _log.warning("controller could not start: the term ended meanwhile", controller=name,
                                 error=repr(e))
                    return
                _log.error("controller failed to start", controller=name, error=repr(e), exc_info=True)
                state.failed.set()
                return
            if not started:
                _log.info("controller start abandoned", controller=name,
                          reason="hub stopping" if stop.is_set() else "leadership lost")
                return
            entered.append((name, generator))
            _log.info("controller started", controller=name, term=term)
        await _wait_first(stop, state.term_over)
    finally:
        for name, generator in reversed(entered):
            try:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel.
                async with asyncio.timeout(CONTROLLER_STOP_SECONDS):
                    await generator.__anext__()
            except StopAsyncIteration:
                _log.info("controller stopped", controller=name, term=term)
            except TimeoutError:
                # A teardown stuck on a member that no longer answers must not
                # keep Ctrl-C from stopping the hub; the store stays consistent
                # because every controller write is a fenced transaction.
                _log.error("controller did not stop in time; abandoned", controller=name,
                           seconds=CONTROLLER_STOP_SECONDS)
            except Exception as e:  # noqa: BLE001 - one failing teardown must not skip the others
                _log.error("controller failed while stopping", controller=name, error=repr(e), exc_info=True)
            else:
                _log.error("controller yielded twice; closing it", controller=name)
                aclose = getattr(generator, "aclose", None)
                if aclose is not None:
                    await aclose()
        if context is not state.base:
            await context.storage.close()  # the term's view: its watchers end, the API's cache stays
            fenced = context.store
            if isinstance(fenced, FencedStore):
                # What this term wrote, and what the store refused once its token was stale: every
                # write landed before the leader key vanished (tests compare it with the store's history).
                _log.info("hub term ended", term=term, leader_token=fenced.token.revision, writes=fenced.writes,
                          last_write_revision=fenced.last_write_revision, writes_refused=fenced.refused)


# ---------------------------------------------------------------- registrations (--clusters DIR)


_REGISTRATION_SUFFIXES = (".yaml", ".yml", ".json")


def read_registrations(directory: Path) -> list[tuple[Path, JSONObject]]:
    """Every MemberCluster document in `directory` (*.yaml, *.yml, *.json, sorted
    by name), or RegistrationError naming the file and what is wrong."""
    if not directory.is_dir():
        raise RegistrationError(f"--clusters {directory}: not a directory")
    found: list[tuple[Path, JSONObject]] = []
    for path in sorted(directory.iterdir()):
        if path.suffix not in _REGISTRATION_SUFFIXES or not path.is_file():
            continue
        try:
            documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
        except UnicodeDecodeError:
            raise RegistrationError(f"{path}: not UTF-8 text") from None
        except OSError as e:
            raise RegistrationError(f"{path}: cannot read it ({e.strerror or 'read failed'})") from None
        except RecursionError:
            raise RegistrationError(f"{path}: nested too deeply to be a registration") from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise RegistrationError(f"{path}: not valid YAML{where}") from None
        for index, document in enumerate(documents):
            if not isinstance(document, dict) or document.get("kind") != "MemberCluster":
                kind = document.get("kind") if isinstance(document, dict) else type(document).__name__
                raise RegistrationError(f"{path}: document {index + 1} is a {kind!s}, not a MemberCluster")
            found.append((path, document))
    return found


#: how long `apply_registrations` goes on retrying one registration while the store is unavailable
REGISTRATION_RETRY_SECONDS = 60.0


async def apply_registrations(storage: ObjectStorage, directory: Path, *,
                              retry_seconds: float = REGISTRATION_RETRY_SECONDS) -> dict[str, str]:
    """Apply every registration of `directory` to the hub (create, or replace
    the spec and labels of an existing one; status is the controllers').
    Returns name -> "created" | "updated" | "unchanged".

    A write whose outcome is unknown (the store unavailable: an etcd member
    killed, a leader election) is tried again, with a log line, for up to
    `retry_seconds`: applying a registration twice is harmless (the second
    finds it and says "unchanged"), and a hub that a store blip stops at
    start would need a supervisor to come back."""
    files = read_registrations(directory)  # a bad file stops the start before anything is written
    outcome: dict[str, str] = {}
    backoff, rng = Backoff(initial=0.2, maximum=5.0), random.Random()
    for path, document in files:
        name = Body(document).name
        deadline = asyncio.get_running_loop().time() + retry_seconds
        for attempt in itertools.count():
            try:
                outcome[name] = await _apply_registration(storage, path, document)
                break
            except StoreUnavailable as e:
                delay = backoff.delay(attempt, rng)
                if asyncio.get_running_loop().time() + delay > deadline:
                    raise
                _log.warning("cluster registration not applied: the store is unavailable; retrying",
                             cluster=name, file=str(path), attempt=attempt + 1, wait_seconds=round(delay, 3),
                             error=str(e))
                await asyncio.sleep(delay)
        _log.info("cluster registration applied", cluster=name, file=str(path), result=outcome[name])
    return outcome


async def _apply_registration(storage: ObjectStorage, path: Path, document: JSONObject) -> str:
    rt = storage.registry.by_kind("federator.dev/v1alpha1", "MemberCluster")
    assert rt is not None
    name = Body(document).name
    try:
        try:
            await storage.create(rt, document, namespace=None)
            return "created"
        except ApiError as e:
            if e.code != 409:
                raise

            def replace(stored: JSONObject, wanted: JSONObject = document) -> JSONObject | None:
                meta = stored["metadata"]
                wanted_meta = Body(wanted).metadata
                if stored.get("spec") == wanted.get("spec") and meta.get("labels") == wanted_meta.get("labels"):
                    return None
                stored["spec"] = wanted.get("spec")
                if "labels" in wanted_meta:
                    meta["labels"] = wanted_meta["labels"]
                return stored

            changed = await storage.guaranteed_update(rt, namespace=None, name=name, mutate=replace)
            return "updated" if changed is not None else "unchanged"
    except ApiError as e:
        raise RegistrationError(f"{path}: {e.message}") from None


# ---------------------------------------------------------------- federator up


@dataclass(frozen=True, slots=True)
class DevAccess:
    """What development mode generated (paths only; the tokens stay in the files)."""

    token_file: Path
    kubeconfigs: dict[str, Path]


DEV_USERS: tuple[tuple[str, str, str], ...] = (
    # (kubeconfig name, user, groups)
    ("admin", "admin", "federator:admin"),
    ("researcher", "researcher", "federator:researcher,ns:default"),
)


def ensure_dev_token_file(state_dir: Path) -> tuple[Path, dict[str, str]]:
    """`<state_dir>/tokens.csv` with an admin and a researcher (namespace
    default) token; reused while it parses, so old kubeconfigs keep working.
    Returns the path and kubeconfig name -> token (for writing kubeconfigs)."""
    path = state_dir / "tokens.csv"
    if path.exists():
        try:
            from federator.apiserver.auth import parse_token_file

            rows = parse_token_file(path.read_text(encoding="utf-8"), source=f"token file {path}")
            by_user = {principal.name: token for token, principal, _uid, _line in rows}
            if all(user in by_user for _, user, _ in DEV_USERS):
                return path, {name: by_user[user] for name, user, _ in DEV_USERS}
        except (OSError, UnicodeDecodeError, TokenFileError):
            pass  # regenerate below: it is ours, in our state dir
    tokens = {name: secrets.token_hex(32) for name, _, _ in DEV_USERS}
    lines = ["# Development tokens written by `federator up` (kube --token-auth-file format)."]
    lines += [f'{tokens[name]},{user},uid-{user},"{groups}"' for name, user, groups in DEV_USERS]
    write_private_file(path, ("\n".join(lines) + "\n").encode("utf-8"))
    return path, tokens


def parse_listen(value: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 as [::1]:PORT) -> (host, port); ValueError otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen {value!r}: expected HOST:PORT, e.g. 127.0.0.1:6443")
    return host.strip("[]"), int(port)


def run_hub(args: argparse.Namespace) -> int:
    """Run the hub until interrupted; returns the process exit code."""
    configure_logging(level=getattr(args, "log_level", "info"))
    try:
        plan = _plan(args)
    except (ValueError, OSError, TokenFileError, RegistrationError, StoreMisconfigured) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        audit = open_audit_log(plan.audit, metrics=METRICS) if plan.audit is not None else None
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(plan, audit))
    except (RegistrationError, StoreMisconfigured) as e:
        # a refused TLS handshake with etcd: the flags are wrong, as with a bad --store
        print(f"error: {e}", file=sys.stderr)
        return 2
    except StoreError as e:
        _log.error("hub stopped: store error", error=str(e))
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        _log.error("hub stopped", error=str(e))
        print(f"error: cannot serve on {plan.host}:{plan.port}: {e.strerror or e}", file=sys.stderr)
        return 1
    finally:
        if audit is not None:
            audit.close()  # what is queued is written


@dataclass(frozen=True, slots=True)
class _Plan:
    store_url: str
    etcd_tls: EtcdTLS | None
    state_dir: Path
    host: str
    port: int
    cert: Path
    key: Path
    ca_pem: bytes | None
    token_file: Path
    dev_tokens: dict[str, str] | None
    clusters_dir: Path | None
    kubeconfig_dir: Path
    #: from the flags (settings_knobs), validated
    settings: HubSettings
    leader_ttl: float = LEADER_TTL_SECONDS
    #: --encryption-provider-config, read and checked against the hub's kinds
    encryption: EncryptionConfig | None = None
    #: --audit-log-* (audit_flags); None: no audit log
    audit: AuditLogSettings | None = None


def settings_knobs(args: argparse.Namespace) -> dict[str, Any]:
    """HubSettings keys (HubSettings.from_mapping) from `federator up`'s settings flags: failover
    (--cluster-loss-grace, --lease-margin, --member-lease-duration, --mass-loss-threshold, --failover-rate),
    --compaction-interval, --namespaces, --currency and the cluster inventory's (cluster_profile_knobs);
    ValueError naming the flag when one is wrong (devclusters.run_up calls it before any simulated cluster
    starts)."""
    from federator.apis.common import parse_duration_seconds

    def duration(flag: str, attribute: str, default: str) -> float:
        value = getattr(args, attribute, None) or default
        try:
            return parse_duration_seconds(value)
        except ValueError as e:
            raise ValueError(f"{flag} {value!r}: {e}") from None

    def number(flag: str, attribute: str, default: str, *, low: float, high: float) -> float:
        value = getattr(args, attribute, None) or default
        try:
            parsed = float(value)
        except ValueError:
            raise ValueError(f"{flag} {value!r}: not a number") from None
        if not low <= parsed <= high:
            raise ValueError(f"{flag} {value!r}: must be between {low:g} and {high:g}")
        return parsed

    knobs: dict[str, Any] = cluster_profile_knobs(args)
    if getattr(args, "member_lease_duration", None) is not None:
        knobs["member_lease_duration_seconds"] = duration("--member-lease-duration", "member_lease_duration", "")
    return knobs | {
        "cluster_loss_grace_seconds": duration("--cluster-loss-grace", "cluster_loss_grace", "60s"),
        "member_lease_margin_seconds": duration("--lease-margin", "lease_margin", "5s"),
        "mass_loss_threshold": number("--mass-loss-threshold", "mass_loss_threshold", "0.5", low=0.0, high=1.0),
        "failover_rate": number("--failover-rate", "failover_rate", "20", low=0.01, high=100_000.0),
        "compaction_interval_seconds": compaction_interval_flag(args),
        "namespaces": getattr(args, "namespaces", None) or "lifecycle",
        "currency": currency_flag(args),
    }


def currency_flag(args: argparse.Namespace) -> str:
    """`--currency` (default USD); ValueError naming the flag unless it is three uppercase letters."""
    import re

    value = getattr(args, "currency", None) or "USD"
    if not re.fullmatch("[A-Z]{3}", value):
        raise ValueError(f"--currency {value[:16]!r}: unknown currency format: an ISO 4217 code is three uppercase "
                         f"letters (USD, EUR, JPY)")
    return str(value)


def cluster_profile_knobs(args: argparse.Namespace) -> dict[str, Any]:
    """HubSettings keys from --cluster-profile-providers (the file read and parsed now) and
    --cluster-profile-kubeconfigs; ValueError naming the flag when one is wrong."""
    from federator.apis.clusterprofile import ProviderConfigError, parse_provider_config

    knobs: dict[str, Any] = {}
    providers = getattr(args, "cluster_profile_providers", None)
    if providers:
        try:
            with open(providers, "rb") as fh:
                raw = fh.read(1024 * 1024 + 1)
            knobs["cluster_profile_providers"] = parse_provider_config(raw)
        except OSError as e:
            raise ValueError(f"--cluster-profile-providers {providers}: {e.strerror or e}") from None
        except ProviderConfigError as e:
            raise ValueError(f"--cluster-profile-providers {providers}: {e}") from None
    directory = getattr(args, "cluster_profile_kubeconfigs", None)
    if directory:
        if not Path(directory).is_dir():
            raise ValueError(f"--cluster-profile-kubeconfigs {directory}: not a directory")
        knobs["cluster_profile_kubeconfig_dir"] = Path(directory).absolute()
    return knobs


def compaction_interval_flag(args: argparse.Namespace) -> float:
    """`--compaction-interval` in seconds (0 turns compaction off, else 1s to 24h); ValueError naming the
    flag when it is wrong."""
    from federator.apis.common import parse_duration_seconds
    from federator.store.compaction import DEFAULT_COMPACTION_INTERVAL_SECONDS

    value = getattr(args, "compaction_interval", None) or f"{DEFAULT_COMPACTION_INTERVAL_SECONDS:g}s"
    try:
        seconds = parse_duration_seconds(value, allow_zero=True)
    except ValueError as e:
        raise ValueError(f"--compaction-interval {value!r}: {e}") from None
    if seconds != 0 and not 1.0 <= seconds <= 86_400.0:
        raise ValueError(f"--compaction-interval {value!r}: must be 0 (off) or between 1s and 24h")
    return seconds


def leader_ttl_flag(args: argparse.Namespace) -> float:
    """`--leader-ttl` in seconds (1s to 5m); ValueError naming the flag when it is wrong."""
    from federator.apis.common import parse_duration_seconds

    value = getattr(args, "leader_ttl", None) or f"{LEADER_TTL_SECONDS:g}s"
    try:
        seconds = parse_duration_seconds(value)
    except ValueError as e:
        raise ValueError(f"--leader-ttl {value!r}: {e}") from None
    if not 1.0 <= seconds <= 300.0:
        raise ValueError(f"--leader-ttl {value!r}: must be between 1s and 5m")
    return seconds


def _plan(args: argparse.Namespace) -> _Plan:
    state_dir = Path(args.state_dir)
    store_url, etcd_tls = store_flags(args)
    host, port = parse_listen(getattr(args, "listen", None) or DEFAULT_LISTEN)
    # Flags first: a wrong one is one line, with nothing written yet.
    settings = HubSettings.from_mapping({"state_dir": state_dir, **settings_knobs(args)})
    leader_ttl = leader_ttl_flag(args)
    encryption = encryption_flag(args)
    audit = audit_flags(args)
    _prepare_state(store_url, state_dir)
    cert_arg, key_arg = getattr(args, "tls_cert", None), getattr(args, "tls_key", None)
    if (cert_arg is None) != (key_arg is None):
        raise ValueError("--tls-cert and --tls-key go together")
    ca_pem: bytes | None
    if cert_arg is None or key_arg is None:
        tls = ensure_dev_tls(state_dir)
        cert, key, ca_pem = tls.server_cert, tls.server_key, tls.ca_pem()
    else:
        cert, key = Path(cert_arg), Path(key_arg)
        for what, path in (("--tls-cert", cert), ("--tls-key", key)):
            if not path.is_file():
                raise ValueError(f"{what} {path}: no such file")
        ca_arg = getattr(args, "tls_ca", None)
        ca_pem = Path(ca_arg).read_bytes() if ca_arg else None
    # Fail here, with one line, on a certificate/key that does not load.
    try:
        server_ssl_context(cert, key)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        raise ValueError(f"TLS certificate {cert} / key {key} cannot be used: {e}") from None
    token_arg = getattr(args, "token_file", None)
    dev_tokens: dict[str, str] | None = None
    if token_arg is None:
        token_file, dev_tokens = ensure_dev_token_file(state_dir)
    else:
        token_file = Path(token_arg)
        TokenAuthenticator.from_file(token_file)  # one clear line now, not a traceback later
    clusters = getattr(args, "clusters", None)
    clusters_dir = Path(clusters) if clusters else None
    if clusters_dir is not None:
        read_registrations(clusters_dir)  # malformed files fail before anything starts
    return _Plan(store_url=store_url, etcd_tls=etcd_tls, state_dir=state_dir, host=host, port=port, cert=cert, key=key,
                 ca_pem=ca_pem, token_file=token_file, dev_tokens=dev_tokens, clusters_dir=clusters_dir,
                 kubeconfig_dir=state_dir, settings=settings, leader_ttl=leader_ttl, encryption=encryption,
                 audit=audit)


def encryption_flag(args: argparse.Namespace) -> EncryptionConfig | None:
    """`--encryption-provider-config FILE` read, parsed and checked against the hub's resources; ValueError
    naming the flag, the file and the field when it cannot be used (the hub does not start)."""
    path = getattr(args, "encryption_provider_config", None)
    if not path:
        return None
    try:
        config = read_encryption_config(path)
        resolve_encryption(config, hub_registry(), HUB_STORE_PREFIX)
    except EncryptionConfigError as e:
        raise ValueError(f"--encryption-provider-config {path}: {e}") from None
    return config


def audit_flags(args: argparse.Namespace) -> AuditLogSettings | None:
    """The audit log's settings from `federator up`'s --audit-* flags (the policy file read and checked now);
    ValueError naming the flag (and the policy's field) when one is wrong; None without --audit-log-path."""

    def count(name: str) -> int:
        value = getattr(args, name, None)
        return int(value) if value is not None else 0

    return settings_from_flags(path=getattr(args, "audit_log_path", None),
                               policy_file=getattr(args, "audit_policy_file", None),
                               max_size_mb=count("audit_log_maxsize"), max_backups=count("audit_log_maxbackup"),
                               max_age_days=count("audit_log_maxage"))


def store_flags(args: argparse.Namespace) -> tuple[str, EtcdTLS | None]:
    """--store (default: the sqlite file in --state-dir) and --etcd-cafile/--etcd-certfile/--etcd-keyfile, checked
    against each other and the files read: StoreMisconfigured of one line naming the flag, nothing opened."""
    store_url: str = getattr(args, "store", None) or default_store_url(Path(args.state_dir))
    etcd_tls = etcd_tls_from_flags(getattr(args, "etcd_cafile", None), getattr(args, "etcd_certfile", None),
                                   getattr(args, "etcd_keyfile", None))
    check_store_url(store_url, etcd_tls)
    return store_url, etcd_tls


def default_store_url(state_dir: Path) -> str:
    """The embedded default: a sqlite file in the state dir."""
    return f"sqlite://{state_dir / 'hub.db'}"


def _prepare_state(store_url: str, state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    if store_url.startswith("sqlite://"):
        db_path = Path(store_url.removeprefix("sqlite://").split("?", 1)[0])
        if db_path.parent != Path(""):
            db_path.parent.mkdir(parents=True, exist_ok=True)


def write_dev_kubeconfigs(directory: Path, *, server: str, ca_pem: bytes | None,
                          tokens: dict[str, str]) -> dict[str, Path]:
    """admin.kubeconfig and researcher.kubeconfig (namespace default) under `directory`."""
    written: dict[str, Path] = {}
    for name, user, _groups in DEV_USERS:
        written[name] = write_kubeconfig(
            directory / f"{name}.kubeconfig", server=server, ca_pem=ca_pem, token=tokens[name], user=user,
            namespace="default", cluster_name="federator", context_name=f"{name}@federator",
        )
    return written


def _client_host(host: str) -> str:
    if host in ("0.0.0.0", "", "*"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


async def _serve(plan: _Plan, audit: AuditLog | None = None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    authenticator = TokenAuthenticator.from_file(plan.token_file, logger=get_logger("hub.auth"))
    app = build_hub_app(plan.settings, store_url=plan.store_url, etcd_tls=plan.etcd_tls, controllers=hub_controllers(),
                        authenticator=authenticator, clusters_dir=plan.clusters_dir,
                        leader_ttl_seconds=plan.leader_ttl, encryption=plan.encryption, audit=audit)
    state = hub_state(app)
    # api_runner: what the HTTP parser refuses (oversized URL or header...) is a kube Status too.
    runner = api_runner(app, access_log=None, shutdown_timeout=2.0, handler_cancellation=True)
    exit_code = 0
    gc_settings = contextlib.ExitStack()
    try:
        await runner.setup()
        gc_settings.enter_context(server_gc())  # after start: the loaded heap is frozen (see gcpolicy)
        site = web.TCPSite(runner, plan.host, plan.port, ssl_context=server_ssl_context(plan.cert, plan.key))
        await site.start()
        port = runner.addresses[0][1] if runner.addresses else plan.port
        url = f"https://{_client_host(plan.host)}:{port}"
        kubeconfigs: dict[str, Path] = {}
        if plan.dev_tokens is not None:
            kubeconfigs = write_dev_kubeconfigs(plan.kubeconfig_dir, server=url, ca_pem=plan.ca_pem,
                                                tokens=plan.dev_tokens)
        _log.info("hub serving", url=url, token_file=str(plan.token_file),
                  kubeconfigs={k: str(v) for k, v in kubeconfigs.items()})
        await _wait_first(stop, state.campaigned, state.failed)
        if not stop.is_set() and not state.failed.is_set():
            fencing = state.context.fencing
            _log.info(
                "hub ready", url=url, store=plan.store_url, role="leader" if state.leading.is_set() else "follower",
                revision=state.store_revision or None, leader_key=state.leader_key,
                leader_token=fencing.revision if fencing else None, holder=state.holder,
                kubeconfigs={k: str(v) for k, v in kubeconfigs.items()},
                registrations=state.registrations or None,
            )
            _print_next_steps(url, kubeconfigs)
            await _wait_first(stop, state.failed)
        if state.failed.is_set() and not stop.is_set():
            _log.error("hub stopping: a controller failed")
            exit_code = 1
        else:
            _log.info("hub stopping", reason="signal", terms_led=state.terms, step_downs=state.step_downs)
    finally:
        await runner.cleanup()
        gc_settings.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    _log.info("hub stopped", exit_code=exit_code)
    return exit_code


async def _wait_first(*events: asyncio.Event) -> bool:
    """Wait until one of `events` is set; True if it was not the first (stop)."""
    waiters = [asyncio.create_task(e.wait(), name=f"hub-wait-{i}") for i, e in enumerate(events)]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return not events[0].is_set()


def _print_next_steps(url: str, kubeconfigs: dict[str, Path]) -> None:
    """Tell a person at a terminal how to use the hub (stdout; logs go to stderr). Every command is printed so
    that it runs as printed from this working directory: `federator` by the path it has here unless it is
    on PATH, the example job by a path that exists."""
    lines = [f"federator hub {__version__} is serving {url}"]
    if kubeconfigs:
        admin, researcher = kubeconfigs.get("admin"), kubeconfigs.get("researcher")
        federator = federator_command()
        example = example_job_path()
        lines += [
            f"  admin kubeconfig:      {admin}",
            f"  researcher kubeconfig: {researcher} (namespace default)",
            "Try:",
            f"  export KUBECONFIG={admin}",
            "  kubectl get tj -A                              # TrainingJobs in every namespace",
            "  kubectl get mc                                 # registered member clusters",
        ]
        if example is not None:
            lines.append("  kubectl create namespace vision                # a job's namespace must exist, as in kube")
            lines.append(f"  {federator} submit -f {example}    # the example job (namespace vision)")
        lines.append(f"  {federator} get jobs -A -w                       # watch jobs")
    lines.append("Ctrl-C stops the hub.")
    try:
        print("\n".join(lines), flush=True)
    except BrokenPipeError:
        # stdout was closed (`federator up | head`): the hub serves on, printing nowhere.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def federator_command() -> str:
    """How to run this installation's `federator` from the working directory: the bare name when PATH finds
    this one, else its script next to this Python (`.venv/bin/federator` when the venv is below the working
    directory), else `python -m federator.cli` with this Python."""
    script = Path(sys.executable).parent / "federator"
    found = shutil.which("federator")
    if found is not None and script.exists() and Path(found).resolve() == script.resolve():
        return "federator"
    if script.exists():
        try:
            return str(script.absolute().relative_to(Path.cwd()))
        except ValueError:
            return str(script.absolute())
    return f"{sys.executable} -m federator.cli"


def example_job_path() -> str | None:
    """The design.md example job: relative to the working directory when it is there (a checkout), else in
    the source tree this hub runs from; None when neither has it (an installed package)."""
    relative = Path("examples") / "resnet-ps.yaml"
    if relative.is_file():
        return str(relative)
    source = Path(__file__).resolve().parents[2] / relative  # federator/hub/app.py -> the source tree
    return str(source) if source.is_file() else None

