"""The chaos lab: a whole federation in one test, built from real parts, and the design's invariants checked
against it (tests/chaos/test_chaos.py drives it with random faults; bench/ha.py measures leader takeovers).

- `Lab`: an `EtcdCluster` (3 members, processes; over mutual TLS, as deploy/etcd runs it, unless
  LabSettings(etcd_tls=False) or CHAOS_ETCD_TLS=0), simulated member clusters (`Federation`: SimClusters on
  the caller's loop), one fence agent process per cluster (`federator agent` with the cluster's agent
  identity), and `federator up` replicas (`HubProcess`, one per `Replica`) on that etcd with
  `--clusters DIR`; every process is stopped by `Lab.stop()`, whatever state it is in (paused ones are
  continued first, then killed).
- `Ledger`: the jobs the test submitted and deleted through the hub API, through either replica, with
  retries through the other one. A job is *acknowledged* when a create answered 201 (or 409 after an
  attempt whose answer was lost: the earlier attempt created it); a deletion is *requested* from its
  first attempt on, since an attempt whose answer was lost may have deleted it.
- `Sampler`: in the background, every `interval` seconds, one atomic sample of every member's pods and
  PodGroups, read from the simulators' own stores in this process (so partitions, outages and latency,
  which cut the hub off, do not blind it), checked for two copies of a job running at once (in two
  clusters, or under two epochs) and for epochs going down; and, about every second, the hub's job list
  through a replica, checked for acknowledged jobs missing and for a job's status epoch going down.
- `settle()` and `final_checks()`: wait (bounded) for the federation to be quiet after the faults: every
  job resting, the members showing what the statuses say, nothing changing for a few seconds; then check
  what must hold at rest (nothing lost, status matches members, no member object without its job, no
  member credential in any log).

What counts as a running copy: a pod with phase Running and no deletionTimestamp. Pods being deleted
(after a fence, by the agent or the hub's GC) are not running copies; Pending pods (created, not yet
started by the member's scheduler and kubelet) are not either. A `Sampler(..., terminating_runs=True)` counts
pods being deleted whose phase is still Running too: an evicted copy saving a checkpoint in its grace period
runs until its process exits (tests/chaos/test_checkpoint_chaos.py). Two copies at once means: one job's
running pods seen, in one sample, in two clusters or under two epochs.

Read-only toward the hub: the lab never writes the hub's store, and reaches members only through the
simulators' admin side (faults) and their stores (samples); it never edits federator code paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import ssl
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from kubernetes.aio.client.exceptions import ApiException

from federator.controllers.jobs import DEFAULT_HUB_ID
from federator.delegation.adapter import LABEL_EPOCH, LABEL_JOB_NAME, LABEL_JOB_NAMESPACE, LABEL_JOB_UID
from federator.sim.server import ADMIN_USER
from federator.dev.certs import ensure_etcd_tls
from federator.store.etcd_process import EtcdCluster

from ..controllers.jobtest_support import (
    GROUP,
    PLURAL,
    ROOT,
    VERSION,
    Federation,
    HubApi,
    HubProcess,
    gpu_job,
    json_log_records,
)

T = TypeVar("T")

#: the three simulated clusters: two RDMA A100 clusters (Volcano, kube-batch) and a cloud H100 one (coscheduling)
CLUSTERS = ("onprem-rdma-a100", "onprem-rdma-nodata", "cloud-eth-h100")
NAMESPACE = "chaos"
#: a label on every MemberCluster naming it, for jobs' clusterSelector
CLUSTER_LABEL = "chaos.federator.dev/cluster"
#: the user the hub's member kubeconfigs authenticate as (a partition `from` it cuts the hub off only)
HUB_MEMBER_USER = ADMIN_USER
#: phases a job may rest in once the faults are over
SETTLED_PHASES = frozenset({"Running", "Succeeded", "Failed"})
#: reasons a job may fail for by its own failover policy (onClusterLoss: fail; maxRequeues reached)
POLICY_FAILURES = frozenset({"ClusterLost", "RequeueLimit"})
API_TIMEOUT = 8.0


# ---------------------------------------------------------------- time line


@dataclass(frozen=True, slots=True)
class Entry:
    at: float
    kind: str
    text: str


class Timeline:
    """What happened when (seconds since the lab's start), for the failure report."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.entries: list[Entry] = []

    def now(self) -> float:
        return time.monotonic() - self.t0

    def add(self, kind: str, text: str) -> None:
        self.entries.append(Entry(self.now(), kind, text))

    def format(self, kinds: Iterable[str] | None = None) -> str:
        wanted = set(kinds) if kinds is not None else None
        return "\n".join(f"  t={e.at:7.2f}s  {e.kind:<8} {e.text}" for e in self.entries
                         if wanted is None or e.kind in wanted)


# ---------------------------------------------------------------- violations


@dataclass(frozen=True, slots=True)
class Violation:
    #: which invariant (design.md number and words)
    invariant: str
    #: the job (namespace/name uid=...) or what else it is about
    subject: str
    at: float
    evidence: str

    def format(self) -> str:
        return f"  [{self.invariant}] {self.subject} at t={self.at:.2f}s:\n      {self.evidence}"


class Violations:
    """Violations seen so far; the first evidence of each (invariant, subject) is kept, repeats counted."""

    def __init__(self) -> None:
        self.first: dict[tuple[str, str], Violation] = {}
        self.repeats: dict[tuple[str, str], int] = defaultdict(int)

    def add(self, violation: Violation) -> None:
        key = (violation.invariant, violation.subject)
        self.repeats[key] += 1
        self.first.setdefault(key, violation)

    def __bool__(self) -> bool:
        return bool(self.first)

    def __len__(self) -> int:
        return len(self.first)

    def format(self) -> str:
        lines = []
        for key, violation in self.first.items():
            seen = self.repeats[key]
            lines.append(violation.format() + (f"\n      (seen {seen} times)" if seen > 1 else ""))
        return "\n".join(lines)


# ---------------------------------------------------------------- hub replicas


class Replica:
    """One `federator up` process on the lab's etcd; `api` is its public API (None while it is down)."""

    def __init__(self, name: str, hub: HubProcess, timeline: Timeline) -> None:
        self.name = name
        self.hub = hub
        self.timeline = timeline
        self.api: HubApi | None = None
        self.url: str | None = None
        self.paused = False
        self.starts = 0
        self._session: aiohttp.ClientSession | None = None

    @property
    def running(self) -> bool:
        return self.hub.process is not None and self.hub.process.returncode is None

    @property
    def serving(self) -> bool:
        """Running, not paused, and its API client connected."""
        return self.running and not self.paused and self.api is not None

    async def start(self) -> None:
        self.starts += 1
        self.api = await self.hub.start()
        self.url = str(self.hub.records("hub ready")[-1]["url"])
        role = self.hub.records("hub ready")[-1].get("role")
        self.timeline.add("hub", f"{self.name} ready as {role} (start {self.starts}, pid {self.pid})")

    @property
    def pid(self) -> int | None:
        return self.hub.process.pid if self.hub.process is not None else None

    async def kill(self) -> None:
        """kill -9 (a paused process dies too)."""
        process = self.hub.process
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        self.paused = False
        await self.close_api()

    def pause(self) -> None:
        assert self.hub.process is not None
        self.hub.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.hub.process is not None and self.hub.process.returncode is None:
            self.hub.process.send_signal(signal.SIGCONT)
        self.paused = False

    async def close_api(self) -> None:
        api, self.api = self.api, None
        if api is not None:
            with contextlib.suppress(Exception):
                await api.close()

    async def readyz(self, *, timeout: float = 3.0) -> tuple[int, str] | None:
        """(/readyz status, text), or None if it does not answer in time."""
        if not self.serving or self.url is None:
            return None
        if self._session is None:
            context = ssl.create_default_context(cafile=str(self.hub.state_dir / "tls" / "ca.crt"))
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))
        try:
            async with self._session.get(self.url + "/readyz", timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                return r.status, await r.text()
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None

    async def role(self, *, timeout: float = 3.0) -> str | None:
        """"leader", "follower", or None (down, paused, not ready)."""
        answer = await self.readyz(timeout=timeout)
        if answer is None or answer[0] != 200:
            return None
        return "leader" if "leader" in answer[1] else "follower"

    def log_files(self) -> list[Path]:
        return sorted(self.hub.workdir.glob("hub-*.log"))

    async def stop(self) -> None:
        """Teardown: continue it if paused, then kill -9 (fast; the store is thrown away)."""
        if self.paused:
            self.resume()
        await self.kill()
        if self._session is not None:
            await self._session.close()
            self._session = None


# ---------------------------------------------------------------- the lab


@dataclass(frozen=True, slots=True)
class LabSettings:
    clusters: tuple[str, ...] = CLUSTERS
    replicas: int = 2
    etcd_members: int = 3
    leader_ttl: str = "2s"
    #: failover fast enough that a cluster is lost and recovered within one sequence
    cluster_loss_grace: str = "6s"
    member_lease: str = "6s"
    lease_margin: str = "2s"
    agent_poll: str = "0.5"
    #: room for every job of a sequence in any one cluster (a cluster lost or excluded leaves room elsewhere)
    gpu_nodes: int = 10
    cpu_nodes: int = 2
    #: the fence agents (issue 12); off only for a lab that measures something else
    agents: bool = True
    #: etcd serves clients and peers over mutual TLS and the hubs use etcds:// with --etcd-* flags
    #: (CHAOS_ETCD_TLS=0 for plain etcd://)
    etcd_tls: bool = field(default_factory=lambda: os.environ.get("CHAOS_ETCD_TLS", "1") != "0")

    def hub_args(self) -> list[str]:
        return ["--leader-ttl", self.leader_ttl, "--cluster-loss-grace", self.cluster_loss_grace,
                "--member-lease-duration", self.member_lease, "--lease-margin", self.lease_margin]


@dataclass(frozen=True, slots=True)
class PodView:
    cluster: str
    kind: str  # "pods" | "podgroups"
    namespace: str
    name: str
    uid: str
    job_uid: str
    job: str  # namespace/name from the labels
    epoch: int
    phase: str
    node: str
    deleting: bool

    @property
    def running(self) -> bool:
        return self.kind == "pods" and self.phase == "Running" and not self.deleting

    @property
    def running_or_terminating(self) -> bool:
        """Running, also while being deleted (a graceful delete: its process still runs until it exits)."""
        return self.kind == "pods" and self.phase == "Running"

    def describe(self) -> str:
        return (f"{self.cluster}:{self.namespace}/{self.name} epoch={self.epoch} phase={self.phase}"
                f"{' deleting' if self.deleting else ''}{' node=' + self.node if self.node else ''}")


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    at: float
    #: read without the event loop running anything else in between (one instant for every cluster)
    atomic: bool
    objects: tuple[PodView, ...]

    def pods(self) -> list[PodView]:
        return [o for o in self.objects if o.kind == "pods"]


class Lab:
    """The federation under test; see the module docstring. `start()` then `stop()` (always)."""

    def __init__(self, workdir: Path, settings: LabSettings | None = None, timeline: Timeline | None = None) -> None:
        self.workdir = workdir
        self.settings = settings or LabSettings()
        self.timeline = timeline or Timeline()
        self.etcd: EtcdCluster | None = None
        self.fed = Federation(workdir / "members")
        self.replicas: list[Replica] = []
        self.agents: dict[str, asyncio.subprocess.Process] = {}
        self.clusters_dir = workdir / "clusters"
        self.rng = random.Random(0)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        s = self.settings
        self.workdir.mkdir(parents=True, exist_ok=True)
        tls = ensure_etcd_tls(self.workdir / "etcd-tls") if s.etcd_tls else None
        self.etcd = EtcdCluster(self.workdir / "etcd", members=s.etcd_members, fsync=False, start_timeout_seconds=90,
                                tls=tls)
        await asyncio.to_thread(self.etcd.start)
        self.timeline.add("lab", f"etcd: {s.etcd_members} members at {self.etcd.url}")
        store_args = [] if tls is None else ["--etcd-cafile", str(tls.ca), "--etcd-certfile", str(tls.client_cert),
                                             "--etcd-keyfile", str(tls.client_key)]
        await self.fed.start(list(s.clusters), **{c: {"gpu_nodes": s.gpu_nodes, "cpu_nodes": s.cpu_nodes}
                                                   for c in s.clusters})
        for name, body in self.fed.registrations.items():
            # one location and price everywhere, and a label per cluster that jobs select on: the gangs spread
            # over every cluster (placement would pack them into the first on-prem one), so every fault hits some
            body["spec"]["costPerGpuHour"] = 1.5
            body["spec"]["location"] = {"type": "onPrem", "region": "lab-1"}
            body["spec"]["labels"] = {**body["spec"].get("labels", {}), CLUSTER_LABEL: name}
        self.fed.write_registrations(self.clusters_dir)
        self.timeline.add("lab", f"member clusters: {', '.join(s.clusters)}")
        if s.agents:
            await asyncio.gather(*(self._start_agent(name) for name in s.clusters))
        for i in range(s.replicas):
            name = f"hub-{'abcdefgh'[i]}"
            hub = HubProcess(self.workdir / name, self.clusters_dir, store_url=self.etcd.url,
                             extra_args=[*s.hub_args(), *store_args, "--log-level", "info"])
            self.replicas.append(Replica(name, hub, self.timeline))
        # the first one leads (its registrations land first), the others follow
        await self.replicas[0].start()
        await wait_for(lambda: self.replicas[0].hub.logged("hub leads"), timeout=90, what="the first replica to lead")
        await asyncio.gather(*(r.start() for r in self.replicas[1:]))
        api = self.replicas[0].api
        assert api is not None
        for name in s.clusters:
            await api.wait_cluster_ready(name, timeout=90)
        self.timeline.add("lab", "every member cluster Ready")

    async def _start_agent(self, cluster: str) -> None:
        sim = self.fed.sims[cluster]
        kubeconfig = sim.write_agent_kubeconfig(self.fed.workdir / f"{cluster}-agent.kubeconfig")
        log = self.workdir / f"agent-{cluster}.log"
        with log.open("wb") as sink:
            # stdin is a pipe only this process holds: should the test process die, the agent stops too
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "federator.cli", "agent", "--kubeconfig", str(kubeconfig),
                "--hub-identity", DEFAULT_HUB_ID, "--poll-seconds", self.settings.agent_poll,
                "--log-level", "info", "--stop-with-parent",
                cwd=str(ROOT), env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdin=asyncio.subprocess.PIPE, stdout=sink, stderr=sink)
        self.agents[cluster] = process

        def watching() -> bool:
            if process.returncode is not None:
                raise AssertionError(f"the fence agent of {cluster} exited ({process.returncode}): "
                                     f"{log.read_text()[-2000:]}")
            return "fence agent watching" in log.read_text()

        await wait_for(watching, timeout=60, what=f"the fence agent of {cluster} to watch the lease")

    async def stop(self) -> None:
        """Stop everything that runs, whatever state it is in; never raises for one part failing."""
        for replica in self.replicas:
            with contextlib.suppress(Exception):
                await replica.stop()
        for process in self.agents.values():
            with contextlib.suppress(Exception):
                await _stop_agent(process)
        self.agents.clear()
        with contextlib.suppress(Exception):
            await self.fed.stop()
        if self.etcd is not None:
            etcd = self.etcd
            for i in range(len(etcd.members)):
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(etcd.kill, i)

    # ------------------------------------------------------------ replicas

    def serving(self) -> list[Replica]:
        return [r for r in self.replicas if r.serving]

    async def leaders(self) -> list[Replica]:
        roles = await asyncio.gather(*(r.role() for r in self.replicas))
        return [r for r, role in zip(self.replicas, roles, strict=True) if role == "leader"]

    async def find_leader(self, *, timeout: float = 30.0) -> Replica | None:
        """The replica whose /readyz says it leads (None if none does within `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            found = await self.leaders()
            if len(found) == 1:
                return found[0]
            if time.monotonic() > deadline:
                return found[0] if found else None
            await asyncio.sleep(0.2)

    def api_of(self, prefer: int | None = None) -> tuple[Replica, HubApi] | None:
        """A serving replica's API: `prefer` (an index) if it serves, else a random serving one."""
        serving = self.serving()
        if not serving:
            return None
        if prefer is not None and self.replicas[prefer % len(self.replicas)].serving:
            replica = self.replicas[prefer % len(self.replicas)]
        else:
            replica = self.rng.choice(serving)
        assert replica.api is not None
        return replica, replica.api

    async def call(self, what: Callable[[HubApi], Awaitable[T]], *, timeout: float = 180.0,
                   attempt_timeout: float = API_TIMEOUT) -> T:
        """`what(api)` through any serving replica, retried (another replica, backoff) on anything but an
        ApiException below 500; for reads at rest."""
        deadline = time.monotonic() + timeout
        delay = 0.2
        last: BaseException | None = None
        while time.monotonic() < deadline:
            chosen = self.api_of()
            if chosen is not None:
                try:
                    async with asyncio.timeout(attempt_timeout):
                        return await what(chosen[1])
                except ApiException as e:
                    if e.status is not None and e.status < 500:
                        raise
                    last = e
                except Exception as e:  # noqa: BLE001 - a replica down or paused: try another
                    last = e
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)
        raise AssertionError(f"no replica answered within {timeout}s (last error: {last!r})")

    async def list_jobs(self, api: HubApi) -> tuple[int, list[dict[str, Any]]]:
        """(list resourceVersion, every TrainingJob) through one replica."""
        result: dict[str, Any] = await api.objects.list_cluster_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, PLURAL)
        return int(result["metadata"]["resourceVersion"]), list(result["items"])

    async def list_clusters(self, api: HubApi) -> list[dict[str, Any]]:
        result: dict[str, Any] = await api.objects.list_cluster_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, "memberclusters")
        return list(result["items"])

    # ------------------------------------------------------------ members

    async def member_snapshot(self) -> MemberSnapshot:
        """Every pod and PodGroup that carries a job uid, in every member, read from the simulators' stores
        in one go: a callback scheduled before the reads tells whether the loop ran anything in between
        (then the reads are retried, up to 5 times; the result says whether they were atomic)."""
        loop = asyncio.get_running_loop()
        for _ in range(5):
            interleaved = False

            def mark() -> None:
                nonlocal interleaved
                interleaved = True

            handle = loop.call_soon(mark)
            at = self.timeline.now()
            objects: list[PodView] = []
            for name, sim in self.fed.sims.items():
                for rt in sim.registry:
                    if rt.plural not in ("pods", "podgroups"):
                        continue
                    for obj in (await sim.storage.list(rt)).items:
                        view = _view(name, rt.plural, obj)
                        if view is not None:
                            objects.append(view)
            handle.cancel()
            if not interleaved:
                return MemberSnapshot(at=at, atomic=True, objects=tuple(objects))
        return MemberSnapshot(at=at, atomic=False, objects=tuple(objects))

    async def clear_member_faults(self) -> None:
        for sim in self.fed.sims.values():
            await sim.faults.clear()

    def member_tokens(self) -> dict[str, str]:
        """Every member credential (name -> token): none may appear in a log."""
        tokens = {}
        for name, sim in self.fed.sims.items():
            tokens[f"{name} admin token"] = sim.token
            tokens[f"{name} agent token"] = sim.agent_token
        return tokens

    def log_files(self) -> list[Path]:
        files = [f for r in self.replicas for f in r.log_files()]
        return files + sorted(self.workdir.glob("agent-*.log"))

    def process_events(self) -> list[Entry]:
        """What the hubs and agents logged that explains a sequence (leadership, terms, failovers, fences),
        on the timeline's clock, for the report."""
        found: list[Entry] = []
        sources = [(f"{r.name}#{f.stem.split('-')[-1]}", f) for r in self.replicas for f in r.log_files()]
        sources += [(f.stem.removeprefix("agent-") + " agent", f) for f in sorted(self.workdir.glob("agent-*.log"))]
        for who, path in sources:
            for record in json_log_records(path):
                event = str(record.get("event", ""))
                if not any(event.startswith(p) for p in LOGGED_EVENTS):
                    continue
                try:
                    wall = _parse_iso(str(record["timestamp"]))
                except (KeyError, ValueError):
                    continue
                fields = {k: v for k, v in record.items() if k in LOGGED_FIELDS}
                found.append(Entry(wall - self.timeline.wall0, "log", f"{who}: {event} {dumps(fields)}"))
        return sorted(found, key=lambda e: e.at)

    def report_timeline(self) -> str:
        """The timeline with the processes' own events merged in."""
        entries = sorted([*self.timeline.entries, *self.process_events()], key=lambda e: e.at)
        return "\n".join(f"  t={e.at:7.2f}s  {e.kind:<8} {e.text}" for e in entries)


#: log events worth a line in a report (prefixes)
LOGGED_EVENTS = ("hub leads", "hub leadership lost", "hub term ended", "gang failed over", "so many clusters lost",
                 "the hub is no longer judged", "epoch fence holds", "controller did not stop",
                 "controller failed", "hub stopped", "hub lease expired", "hub lease renewed", "hub lease still",
                 "orphaned member objects deleted", "cluster out of contact")
LOGGED_FIELDS = ("term", "leader_token", "writes", "writes_refused", "last_write_revision", "job", "cluster",
                 "epoch", "pods_deleted", "podgroups_deleted", "since_last_renewal_s", "controller", "reason",
                 "deleted", "error")


def _parse_iso(text: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def _stop_agent(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
    try:
        await asyncio.wait_for(process.wait(), 10)
    except TimeoutError:
        process.kill()
        await process.wait()
    if process.stdin is not None:
        process.stdin.close()
        with contextlib.suppress(Exception):
            await process.stdin.wait_closed()


def _view(cluster: str, kind: str, obj: Mapping[str, Any]) -> PodView | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    job_uid = labels.get(LABEL_JOB_UID)
    if not job_uid:
        return None
    try:
        epoch = int(labels.get(LABEL_EPOCH) or 0)
    except ValueError:
        epoch = -1
    status = obj.get("status") or {}
    return PodView(
        cluster=cluster, kind=kind, namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""), job_uid=str(job_uid),
        job=f"{labels.get(LABEL_JOB_NAMESPACE, '?')}/{labels.get(LABEL_JOB_NAME, '?')}", epoch=epoch,
        phase=str(status.get("phase") or ("Pending" if kind == "pods" else "")),
        node=str((obj.get("spec") or {}).get("nodeName") or ""), deleting=bool(meta.get("deletionTimestamp")))


async def wait_for(check: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll `check` (sync or async) until truthy; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


# ---------------------------------------------------------------- jobs submitted and deleted


@dataclass
class JobRecord:
    name: str
    body: dict[str, Any]
    uid: str | None = None
    #: a create answered 201, or 409 after an attempt whose answer was lost
    acked: bool = False
    ack_rv: int | None = None
    ack_how: str = ""
    acked_at: float | None = None
    #: a delete was sent (it may have landed even if its answer was lost)
    delete_requested: bool = False
    delete_acked: bool = False
    attempts: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{NAMESPACE}/{self.name}"

    @property
    def expected(self) -> bool:
        """Must exist at the end."""
        return self.acked and not self.delete_requested

    @property
    def pods(self) -> int:
        return sum(int(r["replicas"]) for r in self.body["spec"]["roles"])


def job_body(name: str, *, workers: int, gpus: int, on_loss: str = "requeue", max_requeues: int = 3,
             clusters: Sequence[str] | None = None) -> dict[str, Any]:
    """A gang of `workers` pods (2 CPUs, `gpus` GPUs each), allowed in `clusters` (None: anywhere)."""
    body = gpu_job(name, namespace=NAMESPACE, workers=workers, gpus=gpus)
    if clusters is not None:
        body["spec"]["placement"]["clusterSelector"] = {
            "matchExpressions": [{"key": CLUSTER_LABEL, "operator": "In", "values": sorted(clusters)}]}
    body["spec"]["roles"][0]["template"]["resources"]["cpu"] = "2"
    body["spec"]["roles"][0]["template"]["resources"]["memory"] = "8Gi"
    if gpus == 0:
        del body["spec"]["roles"][0]["template"]["resources"]["nvidia.com/gpu"]
    body["spec"]["failover"] = {"onClusterLoss": on_loss, "maxRequeues": max_requeues}
    return body


class Ledger:
    """What the test asked of the hub and what it answered (see the module docstring)."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.jobs: dict[str, JobRecord] = {}

    def by_uid(self) -> dict[str, JobRecord]:
        return {r.uid: r for r in self.jobs.values() if r.uid}

    def note(self, record: JobRecord, text: str) -> None:
        record.attempts.append(f"t={self.lab.timeline.now():.2f}s {text}")

    async def submit(self, name: str, body: dict[str, Any], *, via: int | None = None,
                     timeout: float = 120.0) -> JobRecord:
        """Create the job through replica `via` (or any), retrying through the others until it is
        acknowledged or `timeout` passes (then it stays unacknowledged: it may or may not exist)."""
        record = self.jobs.setdefault(name, JobRecord(name=name, body=body))
        deadline = time.monotonic() + timeout
        delay, prefer, uncertain = 0.2, via, False
        while time.monotonic() < deadline:
            chosen = self.lab.api_of(prefer)
            prefer = None
            if chosen is None:
                await asyncio.sleep(delay)
                continue
            replica, api = chosen
            try:
                async with asyncio.timeout(API_TIMEOUT):
                    created = await api.submit(body)
            except ApiException as e:
                if e.status == 409 and uncertain:
                    self.note(record, f"409 through {replica.name}: an earlier attempt created it")
                    got = await self._get(record)
                    if got is not None:
                        self._ack(record, got, how="409 after an unanswered attempt")
                        return record
                elif e.status is not None and e.status < 500 and e.status != 429:
                    raise AssertionError(f"{record.key}: create refused {e.status}: {e.body}") from None
                else:
                    # a 5xx (503 included: a store timeout may still commit) leaves the outcome unknown
                    self.note(record, f"{e.status} through {replica.name}")
                    uncertain = uncertain or e.status != 429
            except Exception as e:  # noqa: BLE001 - down, paused, cut: the create may have landed
                self.note(record, f"no answer through {replica.name}: {type(e).__name__}")
                uncertain = True
            else:
                self._ack(record, created, how="201")
                return record
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)
        self.note(record, "gave up: never acknowledged")
        return record

    def _ack(self, record: JobRecord, obj: Mapping[str, Any], *, how: str) -> None:
        meta = obj["metadata"]
        record.uid, record.acked, record.ack_how = str(meta["uid"]), True, how
        record.ack_rv = int(meta["resourceVersion"])
        record.acked_at = self.lab.timeline.now()

    async def _get(self, record: JobRecord) -> dict[str, Any] | None:
        try:
            return await self.lab.call(lambda api: api.get(NAMESPACE, record.name), timeout=60)
        except (AssertionError, ApiException):
            return None

    async def delete(self, name: str, *, via: int | None = None, timeout: float = 120.0) -> JobRecord:
        record = self.jobs[name]
        record.delete_requested = True
        deadline = time.monotonic() + timeout
        delay, prefer = 0.2, via
        while time.monotonic() < deadline:
            chosen = self.lab.api_of(prefer)
            prefer = None
            if chosen is None:
                await asyncio.sleep(delay)
                continue
            replica, api = chosen
            try:
                async with asyncio.timeout(API_TIMEOUT):
                    await api.delete(NAMESPACE, name)
            except ApiException as e:
                if e.status == 404:
                    self.note(record, f"delete: 404 through {replica.name} (gone already)")
                    record.delete_acked = True
                    return record
                self.note(record, f"delete: {e.status} through {replica.name}")
            except Exception as e:  # noqa: BLE001
                self.note(record, f"delete: no answer through {replica.name}: {type(e).__name__}")
            else:
                self.note(record, f"delete: accepted through {replica.name}")
                record.delete_acked = True
                return record
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)
        self.note(record, "delete: gave up")
        return record


# ---------------------------------------------------------------- the background sampler


def _epoch_of(job: Mapping[str, Any]) -> int:
    epoch = ((job.get("status") or {}).get("placement") or {}).get("epoch")
    return epoch if isinstance(epoch, int) else 0


def _phase(job: Mapping[str, Any]) -> str:
    return str((job.get("status") or {}).get("phase") or "")


def _cluster_of(job: Mapping[str, Any]) -> str | None:
    cluster = ((job.get("status") or {}).get("placement") or {}).get("cluster")
    return cluster if isinstance(cluster, str) else None


def job_line(job: Mapping[str, Any]) -> str:
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    history = [f"{h.get('event')}@{h.get('cluster')}#{h.get('epoch')}" for h in status.get("history") or ()]
    failed = [c for c in status.get("conditions") or () if c.get("type") == "Failed" and c.get("status") == "True"]
    return (f"{meta.get('namespace')}/{meta.get('name')} uid={meta.get('uid')} rv={meta.get('resourceVersion')} "
            f"phase={_phase(job)} cluster={_cluster_of(job)} epoch={_epoch_of(job)} "
            f"requeues={status.get('requeues', 0)}"
            + (f" failed={failed[0].get('reason')}: {str(failed[0].get('message'))[:200]}" if failed else "")
            + f" history={' '.join(history[-12:])}")


class Sampler:
    """Samples members (every `interval` s) and the hub's job list (every `jobs_interval` s) in the
    background and records violations (see the module docstring)."""

    def __init__(self, lab: Lab, ledger: Ledger, violations: Violations, *, interval: float = 0.5,
                 jobs_interval: float = 1.0, terminating_runs: bool = False) -> None:
        self.lab = lab
        #: pods being deleted whose phase is still Running count as running copies (see the module docstring)
        self.terminating_runs = terminating_runs
        self.ledger = ledger
        self.violations = violations
        self.interval = interval
        self.jobs_interval = jobs_interval
        self.samples = 0
        self.non_atomic = 0
        self.listings = 0
        self.failed_listings = 0
        self.max_copies = 0
        self.max_running_epoch: dict[str, int] = {}
        self.max_epoch_seen: dict[str, tuple[int, str]] = {}
        self.seen_objects: set[str] = set()
        self.status_epoch: dict[str, tuple[int, int, str]] = {}
        self.stale_reads = 0
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._members(), name="chaos-sampler-members"),
                       asyncio.create_task(self._jobs(), name="chaos-sampler-jobs")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        self._tasks = []

    def summary(self) -> str:
        return (f"{self.samples} member samples ({self.non_atomic} not atomic), {self.listings} job lists "
                f"({self.failed_listings} unanswered), max concurrent copies {self.max_copies}, "
                f"stale list reads {self.stale_reads}")

    async def _members(self) -> None:
        while True:
            snapshot = await self.lab.member_snapshot()
            self.check_members(snapshot)
            await asyncio.sleep(self.interval)

    def check_members(self, snapshot: MemberSnapshot) -> None:
        self.samples += 1
        self.non_atomic += not snapshot.atomic
        running: dict[str, list[PodView]] = defaultdict(list)
        for pod in snapshot.pods():
            if pod.running or (self.terminating_runs and pod.running_or_terminating):
                running[pod.job_uid].append(pod)
        for uid, pods in running.items():
            groups = [pods] if snapshot.atomic else [[p for p in pods if p.cluster == c]
                                                     for c in sorted({p.cluster for p in pods})]
            clusters = {p.cluster for p in pods}
            if snapshot.atomic:
                self.max_copies = max(self.max_copies, len(clusters))
            for group in groups:
                where = {p.cluster for p in group}
                epochs = {p.epoch for p in group}
                evidence = "running pods: " + "; ".join(p.describe() for p in sorted(group, key=_pod_order))
                if len(where) > 1:
                    self.violations.add(Violation("2: never runs in two clusters at once", _subject(group[0]),
                                                  snapshot.at, evidence))
                if len(epochs) > 1:
                    self.violations.add(Violation("2: one copy (never two epochs running at once)",
                                                  _subject(group[0]), snapshot.at, evidence))
            top = max(p.epoch for p in pods)
            before = self.max_running_epoch.get(uid, 0)
            if top < before:
                self.violations.add(Violation(
                    "epochs only rise: an older copy runs after a newer one ran", _subject(pods[0]), snapshot.at,
                    f"epoch {before} ran before; now running: " + "; ".join(p.describe() for p in pods)))
            self.max_running_epoch[uid] = max(before, top)
        # a member object created at an epoch older than one already seen for its job: a stale dispatch
        # (judged on atomic samples only: reads spread over time can see a later object before an earlier one)
        newest: dict[str, tuple[int, str]] = {}
        for obj in snapshot.objects:
            if obj.uid in self.seen_objects:
                continue
            self.seen_objects.add(obj.uid)
            if not snapshot.atomic:
                continue
            seen = self.max_epoch_seen.get(obj.job_uid)
            if seen is not None and obj.epoch < seen[0] and not obj.deleting:
                self.violations.add(Violation(
                    "epochs only rise: a member object created at an older epoch", _subject(obj), snapshot.at,
                    f"new {obj.describe()}; epoch {seen[0]} seen earlier: {seen[1]}"))
            if not obj.deleting and obj.epoch > newest.get(obj.job_uid, (-1, ""))[0]:
                newest[obj.job_uid] = (obj.epoch, f"t={snapshot.at:.2f}s {obj.describe()}")
        for uid, (epoch, text) in newest.items():
            if epoch > self.max_epoch_seen.get(uid, (-1, ""))[0]:
                self.max_epoch_seen[uid] = (epoch, text)

    async def _jobs(self) -> None:
        while True:
            chosen = self.lab.api_of()
            if chosen is not None:
                replica, api = chosen
                at = self.lab.timeline.now()
                try:
                    async with asyncio.timeout(4.0):
                        rv, items = await self.lab.list_jobs(api)
                except Exception:  # noqa: BLE001 - a replica down or paused: the next try picks again
                    self.failed_listings += 1
                else:
                    self.check_jobs(at, rv, items, via=replica.name)
            await asyncio.sleep(self.jobs_interval)

    def check_jobs(self, at: float, list_rv: int, items: Sequence[Mapping[str, Any]], *, via: str) -> None:
        self.listings += 1
        present: set[str] = set()
        for job in items:
            meta = job["metadata"]
            uid, rv, epoch = str(meta["uid"]), int(meta["resourceVersion"]), _epoch_of(job)
            present.add(uid)
            before = self.status_epoch.get(uid)
            if before is not None and rv > before[0] and epoch < before[1]:
                self.violations.add(Violation(
                    "epochs only rise: a job's status epoch went down", f"{meta['namespace']}/{meta['name']}", at,
                    f"rv {before[0]} had epoch {before[1]} ({before[2]}); rv {rv} has epoch {epoch} (via {via}): "
                    f"{job_line(job)}"))
            if before is not None and rv < before[0]:
                self.stale_reads += 1
            if before is None or rv > before[0]:
                self.status_epoch[uid] = (rv, epoch, f"t={at:.2f}s via {via}")
        for record in list(self.ledger.jobs.values()):
            if record.expected and record.ack_rv is not None and record.ack_rv <= list_rv \
                    and record.uid not in present:
                self.violations.add(Violation(
                    "3: no accepted job is lost (missing from a list)", record.key, at,
                    f"acknowledged at rv {record.ack_rv} ({record.ack_how}), uid {record.uid}; absent from a list "
                    f"at rv {list_rv} through {via}"))


def _pod_order(p: PodView) -> tuple[str, str]:
    return (p.cluster, p.name)


def _subject(obj: PodView) -> str:
    return f"{obj.job} uid={obj.job_uid}"


# ---------------------------------------------------------------- at rest


#: how long nothing may change (each job's phase, cluster and epoch) before the federation counts as quiet
QUIET_SECONDS = 5.0


async def settle(lab: Lab, ledger: Ledger, *, timeout: float = 240.0) -> str | None:
    """Wait until the federation is quiet: every replica serves and one leads, every member cluster is
    Ready and not Lost, every job that must exist rests (Running, Succeeded, Failed), every deleted job is
    gone, the members show what the jobs' statuses say (`_at_rest` finds nothing: a status can say Running
    for a while after a fence agent deleted the gang, until the hub judges the loss), and no job's phase,
    cluster or epoch changed for QUIET_SECONDS. Returns None, or what was still not quiet at the deadline."""
    deadline = time.monotonic() + timeout
    last_state: dict[str, tuple[str, str | None, int]] | None = None
    since = time.monotonic()
    while True:
        problem, jobs = await _unsettled(lab, ledger)
        if jobs is not None:
            state = {str(j["metadata"]["uid"]): (_phase(j), _cluster_of(j), _epoch_of(j)) for j in jobs}
            if state != last_state:
                last_state, since = state, time.monotonic()
            if problem is None:
                # what waiting can change: members catching up with statuses (a lost job does not come back)
                found = [v for v in _at_rest(lab, ledger, jobs, await lab.member_snapshot())
                         if not v.invariant.startswith("3:")]
                if found:
                    problem = "members do not match yet: " + "; ".join(
                        f"[{v.invariant}] {v.subject}: {v.evidence[:300]}" for v in found[:5])
        if problem is None and time.monotonic() - since >= QUIET_SECONDS:
            lab.timeline.add("check", "settled")
            return None
        if time.monotonic() > deadline:
            return problem or f"jobs still changing {time.monotonic() - since:.1f}s ago"
        await asyncio.sleep(1.0)


async def _unsettled(lab: Lab, ledger: Ledger) -> tuple[str | None, list[dict[str, Any]] | None]:
    """(what is not quiet yet, or None; the hub's jobs, or None if no replica answered)."""
    if len(lab.serving()) != len(lab.replicas):
        return f"replicas serving: {[r.name for r in lab.serving()]}", None
    if not await lab.leaders():
        return "no replica says it leads", None
    try:
        clusters = await lab.call(lab.list_clusters, timeout=30)
        _, jobs = await lab.call(lab.list_jobs, timeout=30)
    except AssertionError as e:
        return str(e), None
    problems = []
    for mc in clusters:
        conditions = {c["type"]: c["status"] for c in (mc.get("status") or {}).get("conditions") or ()}
        if conditions.get("Ready") != "True" or conditions.get("Lost") == "True":
            problems.append(f"cluster {mc['metadata']['name']} {conditions}")
    by_uid = {j["metadata"]["uid"]: j for j in jobs}
    for record in ledger.jobs.values():
        job = by_uid.get(record.uid or "")
        if record.delete_requested:
            if job is not None or any(j["metadata"]["name"] == record.name for j in jobs):
                problems.append(f"{record.key} deleted but still there")
        elif job is not None and _phase(job) not in SETTLED_PHASES:
            problems.append(job_line(job))
    for job in jobs:  # jobs whose create was never acknowledged but landed
        landed = ledger.jobs.get(job["metadata"]["name"])
        if (landed is None or not landed.acked) and _phase(job) not in SETTLED_PHASES and not (
                landed is not None and landed.delete_requested):
            problems.append(job_line(job))
    return ("; ".join(problems) if problems else None), jobs


async def final_checks(lab: Lab, ledger: Ledger, violations: Violations) -> None:
    """The invariants at rest, once `settle` returned (quiet, or its deadline passed): every finding is a
    violation now (settle already gave the GC and status sync their time); plus no credential in a log."""
    _, jobs = await lab.call(lab.list_jobs, timeout=60)
    for violation in _at_rest(lab, ledger, jobs, await lab.member_snapshot()):
        violations.add(violation)
    for violation in credential_leaks(lab):
        violations.add(violation)


def _at_rest(lab: Lab, ledger: Ledger, jobs: Sequence[Mapping[str, Any]],
             snapshot: MemberSnapshot) -> list[Violation]:
    at = snapshot.at
    found: list[Violation] = []
    by_uid = {str(j["metadata"]["uid"]): j for j in jobs}
    by_job: dict[str, list[PodView]] = defaultdict(list)
    for obj in snapshot.objects:
        by_job[obj.job_uid].append(obj)
    # 3: every acknowledged job exists unless the test deleted it; and it was not failed by the system
    for record in ledger.jobs.values():
        if record.expected and record.uid not in by_uid:
            found.append(Violation("3: no accepted job is lost", record.key, at,
                                   f"acknowledged ({record.ack_how}) uid {record.uid}, not in the hub's list; "
                                   f"attempts: {record.attempts}"))
        if record.delete_requested and any(j["metadata"]["name"] == record.name for j in jobs):
            found.append(Violation("deleted jobs go away", record.key, at,
                                   f"deletion requested, still listed; attempts: {record.attempts}"))
    for uid, job in by_uid.items():
        key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
        phase = _phase(job)
        objects = by_job.get(uid, [])
        live = [o for o in objects if not o.deleting]
        if phase == "Failed":
            reason = next((c.get("reason") for c in (job.get("status") or {}).get("conditions") or ()
                           if c.get("type") == "Failed" and c.get("status") == "True"), None)
            if reason not in POLICY_FAILURES:
                found.append(Violation("3: no accepted job is lost (failed by the system, not by its policy)",
                                       key, at, job_line(job)))
            running = [o for o in live if o.running]
            if running:
                found.append(Violation("status matches members (a Failed job runs no pods)", key, at,
                                       f"{job_line(job)}; running: " + "; ".join(o.describe() for o in running)))
            continue
        if phase != "Running":
            continue
        cluster, epoch = _cluster_of(job), _epoch_of(job)
        submitted = ledger.jobs.get(str(job["metadata"]["name"]))
        expected_pods = submitted.pods if submitted is not None else None
        mine = [o for o in live if o.cluster == cluster and o.epoch == epoch]
        elsewhere = [o for o in live if (o.cluster, o.epoch) != (cluster, epoch)]
        running = [o for o in mine if o.running]
        if elsewhere:
            found.append(Violation("2/status matches members: objects outside the job's placement", key, at,
                                   f"{job_line(job)}; elsewhere: " + "; ".join(o.describe() for o in elsewhere)))
        if expected_pods is not None and len(running) != expected_pods:
            found.append(Violation("status matches members: a Running job runs its whole gang where its status "
                                   "says", key, at,
                                   f"{job_line(job)}; {len(running)} of {expected_pods} pods running there; "
                                   "objects: " + ("; ".join(o.describe() for o in objects) or "none")))
    # no member object without its job (after the GC)
    for uid, objects in by_job.items():
        if uid not in by_uid:
            found.append(Violation("no member object without its job", f"{objects[0].job} uid={uid}", at,
                                   "; ".join(o.describe() for o in objects)))
    return found


def credential_leaks(lab: Lab) -> list[Violation]:
    """6: member credentials never appear in logs (every hub and agent log of the lab)."""
    found = []
    tokens = lab.member_tokens()
    for path in lab.log_files():
        text = path.read_text(errors="replace")
        for what, token in tokens.items():
            if token and token in text:
                found.append(Violation("6: member credentials never appear in logs", str(path),
                                       lab.timeline.now(), f"the {what} appears in it"))
    return found


def phase_counts(jobs: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for job in jobs:
        counts[_phase(job) or "-"] += 1
    return dict(sorted(counts.items()))


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
