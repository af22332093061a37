"""Development member clusters for `federator up`: simulated clusters started next to the hub.

With no `--clusters DIR` and no `--no-sim`, `federator up` runs the hub *and*
one simulated member cluster (`federator.sim.server.SimCluster`) per profile
of `clusterconfigs/sim/` (or `--sim-profile PATH`, repeatable), so the whole
mission runs on a laptop:

1. every SimCluster serves HTTPS on its own 127.0.0.1 port (a development CA
   under `<state-dir>/sim/tls/`), with its own bearer token, and its
   kubeconfig is written to `<state-dir>/sim/<cluster>.kubeconfig` (mode 0600);
2. a MemberCluster registration is generated from each profile (location,
   fabric, gang scheduler, labels, cost, datasets, GPU models) with an
   absolute `kubeconfigPath`, written to `<state-dir>/sim/registrations/`,
   and handed to the hub as its `--clusters` directory, so the hub applies
   it at start exactly as it applies a platform team's registrations;
3. the hub then runs as `federator up --clusters <that dir>` would;
4. beside each cluster runs its fence agent (`federator agent`, federator/fencing/agent.py) as its own
   process, with the cluster's agent identity (`<state-dir>/sim/<cluster>-agent.kubeconfig`) and
   the hub's identity, logging to `<state-dir>/sim/<cluster>-agent.log`: it deletes the hub's pods
   and PodGroups in that cluster once the hub stops renewing its Lease there (`DevAgents`).

The simulated clusters run on their own event loop in a background thread
of the same process: a member's scheduler and kubelets never stall the
hub's loop (as a real member's would not), and the hub reaches them only
through their HTTPS endpoints and kubeconfigs, like any member. Ctrl-C
stops the hub first (its member watches close), then the agents, then the
clusters. An agent also stops when `federator up` dies (its stdin closes).

Each cluster keeps its objects in `<state-dir>/sim/<cluster>.db` (the store
protocol's sqlite backend) and takes the port and tokens of its last run, so
stopping `federator up` and starting it again with the same state directory
leaves jobs Running, on the same member pods (federator/sim/server.py,
`start_sim_cluster`). `--sim-ephemeral` keeps them in memory instead: every
start is a fresh cluster (random ports, new tokens), as before.

Profiles without `kubelet.defaultRunSeconds` get `--sim-run-seconds`
(default 60): a simulated training pod then succeeds after that long, so a
submitted job goes all the way to Succeeded.

`--members kube` starts REAL member clusters instead (federator/dev/kube.py: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok nodes from the same profiles; `KubeDevClusters`), only for
profiles whose gang scheduler is native or default (the flag's help says why the others cannot), applies
deploy/member's RBAC to each with kubectl and registers it with the kubeconfig of the hub's identity there
(`<state-dir>/kube/<cluster>.kubeconfig`; the admin's is `<cluster>-admin.kubeconfig`, the agent's
`<cluster>-agent.kubeconfig`). Each start is a fresh set of ports; the members keep their etcd data in
`<state-dir>/kube/<cluster>/`.

This is the CLI layer: it may import `federator.sim` (the hub may not). It
never prints or logs a member token (kubeconfigs hold them, mode 0600).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from federator.sim.profile import ClusterProfile
    from federator.sim.server import SimCluster

__all__ = [
    "DEFAULT_PROFILES",
    "DEFAULT_SIM_RUN_SECONDS",
    "DevAgents",
    "DevCluster",
    "DevClusterError",
    "DevClusters",
    "KubeDevClusters",
    "add_arguments",
    "default_profiles_dir",
    "registration_for",
    "run_up",
]

#: Profiles `federator up` simulates by default (relative to the working directory, else the source tree).
DEFAULT_PROFILES = "clusterconfigs/sim"
#: How long a simulated training pod runs when its profile does not say.
DEFAULT_SIM_RUN_SECONDS = 60.0
#: Label on generated registrations, so people (and `kubectl get mc -l`) can tell dev clusters apart.
DEV_CLUSTER_LABEL = "federator.dev/simulated"
_START_TIMEOUT_SECONDS = 120.0
_STOP_TIMEOUT_SECONDS = 30.0
_AGENT_STOP_TIMEOUT_SECONDS = 10.0
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


class DevClusterError(Exception):
    """Simulated clusters that cannot be loaded or started (one line: which and why)."""


@dataclass(frozen=True, slots=True)
class DevCluster:
    """One running simulated member cluster, as `federator up` registered it."""

    name: str
    server: str
    kubeconfig: Path
    registration: Path
    #: the fence agent's identity (user federator-agent) in this cluster
    agent_kubeconfig: Path
    scheduler: str
    #: "rdma" or "ethernet", as registered
    network: str
    nodes: int
    gpus: int
    description: str


# ---------------------------------------------------------------- flags


#: the profiles `federator up --members kube` starts when no --sim-profile is given
DEFAULT_KUBE_PROFILES = ("cloud-native-gang", "cloud-small")


def _members_help() -> str:
    return (
        "what the development member clusters are: 'sim' (default) simulates every profile in-process; "
        "'kube' starts each as a REAL Kubernetes v1.36 member (etcd, kube-apiserver, kube-controller-manager, "
        "kube-scheduler and kwok nodes made from the profile; federator/dev/kube.py), built from the Go modules "
        "of e2e/kube/tools on first use (needs Go, ~6 min once), with deploy/member's RBAC applied and the hub "
        "registered with exactly that identity. Real members run profiles whose gang scheduler is 'native' "
        "(kube-scheduler's own gang scheduling) or 'default' (default: "
        f"{', '.join(DEFAULT_KUBE_PROFILES)}). Volcano, coscheduling, kube-batch and KAI cannot: none is built here (the Go "
        "module proxy refuses the version lists of volcano.sh/volcano and sigs.k8s.io/scheduler-plugins, exact "
        "versions download, but none is pinned yet). A profile's operators (jobset, kubeflow, mpi) run as the real "
        "JobSet controller, Kubeflow training operator and mpi-operator beside its member (built from "
        "e2e/kube/operators on first use, ~15 min once). "
        "Background load of a profile is not played on real members")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The dev-cluster flags of `federator up`."""
    group = parser.add_argument_group("simulated member clusters (development mode)")
    group.add_argument("--members", choices=["sim", "kube"], default="sim", help=_members_help())
    group.add_argument("--no-sim", action="store_true",
                       help="start no simulated clusters (the hub runs with whatever clusters are registered)")
    group.add_argument("--sim-profile", action="append", default=[], metavar="PATH",
                       help=f"a simulated cluster profile, or a directory of them (repeatable; default: "
                            f"{DEFAULT_PROFILES}/). Ignored with --clusters or --no-sim")
    group.add_argument("--sim-port-base", type=int, default=None, metavar="N",
                       help="serve simulated cluster i on port N+i (default: free random ports)")
    group.add_argument("--sim-ephemeral", action="store_true",
                       help="keep the simulated clusters in memory: a restart starts them empty (default: each "
                            "keeps its objects in STATE_DIR/sim/<cluster>.db, so Running jobs stay Running across "
                            "a restart)")
    group.add_argument("--sim-run-seconds", type=float, default=DEFAULT_SIM_RUN_SECONDS, metavar="SECONDS",
                       help="how long a simulated training pod runs before it succeeds, for profiles that set "
                            f"no kubelet.defaultRunSeconds (default: {DEFAULT_SIM_RUN_SECONDS:g})")


def default_profiles_dir() -> Path:
    """clusterconfigs/sim under the working directory, else under the source tree."""
    here = Path(DEFAULT_PROFILES)
    if here.is_dir():
        return here
    return _SOURCE_ROOT / DEFAULT_PROFILES


# ---------------------------------------------------------------- profiles and registrations


def load_dev_profiles(paths: Sequence[str | os.PathLike[str]], *, run_seconds: float) -> list[ClusterProfile]:
    """The profiles to simulate (every file of each path), with `run_seconds` as the default pod run time
    where a profile has none. DevClusterError names the file and the field on bad input."""
    from federator.sim.profile import ProfileError, load_profile_paths

    if not (0 < run_seconds <= 7 * 24 * 3600):
        raise DevClusterError(f"--sim-run-seconds {run_seconds:g}: must be more than 0 and at most a week")
    chosen = [Path(p) for p in paths] or [default_profiles_dir()]
    try:
        loaded = load_profile_paths(chosen)
    except ProfileError as e:
        raise DevClusterError(str(e)) from None
    profiles: list[ClusterProfile] = []
    for profile in loaded:
        if profile.kubelet.default_run_seconds is None:
            kubelet = profile.kubelet.model_copy(update={"default_run_seconds": run_seconds})
            profile = profile.model_copy(update={"kubelet": kubelet})
        profiles.append(profile)
    if not profiles:
        raise DevClusterError(f"no simulated cluster profiles in {', '.join(str(p) for p in chosen)}")
    return profiles


def _gang_scheduler(profile: ClusterProfile) -> tuple[str, str]:
    """(MemberCluster scheduler name, pod schedulerName): the profile's first gang scheduler, else default."""
    gang = profile.gang_schedulers
    chosen = gang[0] if gang else next(s for s in profile.schedulers if s.type == "default")
    return chosen.type, chosen.name


def registration_for(profile: ClusterProfile, *, kubeconfig: Path) -> dict[str, Any]:
    """The MemberCluster that registers the simulated cluster of `profile`, reached through `kubeconfig`."""
    from federator.clusters.snapshot_builder import gpu_model_name

    scheduler, scheduler_name = _gang_scheduler(profile)
    network: dict[str, Any] = {"type": "rdma" if profile.network.rdma else "ethernet",
                               "bandwidthGbps": float(profile.network.bandwidth_gbps)}
    if profile.network.rdma:
        network["rdmaKind"] = profile.network.fabric  # infiniband | roce
    location: dict[str, Any] = {"type": "cloud" if profile.location.type == "cloud" else "onPrem",
                                "region": profile.location.region}
    provider = profile.location.provider or profile.location.site
    if provider:
        location["provider"] = provider
    models = sorted({m for m in (gpu_model_name(p.gpu_product or "") for p in profile.node_pools if p.gpus) if m})
    spec: dict[str, Any] = {
        "connection": {"kubeconfigPath": str(kubeconfig.resolve()), "context": profile.name},
        "location": location,
        "network": network,
        "scheduler": {"name": scheduler, "schedulerName": scheduler_name},
        "costPerGpuHour": float(profile.cost_per_gpu_hour),
    }
    if models:
        spec["gpuModels"] = models
    if profile.datasets:
        spec["datasets"] = [{"name": d.name, "sizeBytes": d.size_bytes} for d in profile.datasets]
    return {
        "apiVersion": "federator.dev/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": profile.name, "labels": {**profile.labels, DEV_CLUSTER_LABEL: "true"},
                     "annotations": {"federator.dev/description": profile.description[:1024]}},
        "spec": spec,
    }


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------- the clusters


class DevClusters:
    """SimClusters on a background thread's event loop (see the module docstring).

    `start()` blocks until every cluster serves and its kubeconfig and
    registration are written (or raises DevClusterError, with everything it
    started stopped again); `stop()` stops them all and joins the thread."""

    def __init__(self, profiles: Sequence[ClusterProfile], *, state_dir: Path, port_base: int | None = None,
                 ephemeral: bool = False) -> None:
        if port_base is not None and not (1 <= port_base and port_base + len(profiles) - 1 <= 65535):
            raise DevClusterError(f"--sim-port-base {port_base}: ports {port_base}..{port_base + len(profiles) - 1}"
                                  " must lie within 1..65535")
        self.profiles = list(profiles)
        self.directory = state_dir / "sim"
        self.registrations_dir = self.directory / "registrations"
        self.port_base = port_base
        #: in memory (a restart starts empty) rather than in <state-dir>/sim/<cluster>.db
        self.ephemeral = ephemeral
        self.clusters: list[DevCluster] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self, *, timeout: float = _START_TIMEOUT_SECONDS) -> list[DevCluster]:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.registrations_dir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="federator-devclusters", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            self.stop()
            raise DevClusterError(f"the simulated clusters did not start within {timeout:g}s")
        if self._error is not None:
            error, self._error = self._error, None
            self.stop()
            if isinstance(error, DevClusterError):
                raise error
            raise DevClusterError(f"the simulated clusters failed to start: {type(error).__name__}: {error}")
        return self.clusters

    def stop(self) -> None:
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop already finished
                pass
        if thread is not None:
            thread.join(_STOP_TIMEOUT_SECONDS)
            self._thread = None

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # noqa: BLE001 - reported to start(); the thread must not die silently
            self._error = self._error or e
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        from federator.dev.certs import ensure_dev_tls
        from federator.obs import Metrics, get_logger
        from federator.sim.server import SimCluster, start_sim_cluster
        from federator.store.protocol import StoreError

        log = get_logger("devclusters")
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        tls = ensure_dev_tls(self.directory)
        # The simulators' own API and scheduler metrics must not mix with the hub's /metrics.
        metrics = Metrics()
        started: list[SimCluster] = []
        try:
            for index, profile in enumerate(self.profiles):
                port = self.port_base + index if self.port_base is not None else None
                try:
                    cluster = await start_sim_cluster(profile, directory=None if self.ephemeral else self.directory,
                                                      port=port, tls=tls, metrics=metrics)
                except OSError as e:
                    raise DevClusterError(f"simulated cluster {profile.name}: cannot listen on "
                                          f"127.0.0.1:{port or 0}: {e.strerror or e}") from None
                except StoreError as e:
                    raise DevClusterError(f"simulated cluster {profile.name}: {e} (another `federator up` or "
                                          "`federator sim` on this state directory? --sim-ephemeral keeps "
                                          "clusters in memory)") from None
                started.append(cluster)
                self.clusters.append(self._register(cluster))
            self._remove_stale_registrations()
            log.info("simulated clusters serving", clusters={c.name: c.server for c in self.clusters})
            self._ready.set()
            await self._stop.wait()
        except BaseException as e:
            self._error = e
            raise
        finally:
            for cluster in reversed(started):
                await cluster.stop()

    def _register(self, cluster: SimCluster) -> DevCluster:
        kubeconfig = cluster.write_kubeconfig(self.directory / f"{cluster.name}.kubeconfig")
        agent_kubeconfig = cluster.write_agent_kubeconfig(self.directory / f"{cluster.name}-agent.kubeconfig")
        document = registration_for(cluster.profile, kubeconfig=kubeconfig)
        path = self.registrations_dir / f"{cluster.name}.yaml"
        header = ("# Generated by `federator up` for its simulated cluster; rewritten at every start.\n"
                  f"# Profile: {cluster.profile.name} ({cluster.profile.description})\n")
        _write_atomically(path, header + yaml.safe_dump(document, sort_keys=False))
        return DevCluster(
            name=cluster.name, server=cluster.url, kubeconfig=kubeconfig, registration=path,
            agent_kubeconfig=agent_kubeconfig,
            scheduler=document["spec"]["scheduler"]["name"], network=document["spec"]["network"]["type"], nodes=cluster.profile.node_count,
            gpus=cluster.profile.gpu_count, description=cluster.profile.description,
        )

    def _remove_stale_registrations(self) -> None:
        """Registrations of clusters this run does not simulate would point the hub at a dead kubeconfig."""
        running = {f"{c.name}.yaml" for c in self.clusters}
        for path in self.registrations_dir.glob("*.yaml"):
            if path.name not in running:
                path.unlink(missing_ok=True)


# ---------------------------------------------------------------- real members


def load_kube_profiles(paths: Sequence[str | os.PathLike[str]], *, run_seconds: float) -> list[ClusterProfile]:
    """The profiles `federator up --members kube` starts: those of `paths` (all must be runnable for real),
    else DEFAULT_KUBE_PROFILES from the default directory. DevClusterError names a profile that cannot run."""
    from federator.dev.kube import refused_reason

    profiles = load_dev_profiles(paths, run_seconds=run_seconds)
    if not paths:
        profiles = [p for p in profiles if p.name in DEFAULT_KUBE_PROFILES]
    for profile in profiles:
        scheduler, _ = _gang_scheduler(profile)
        reason = refused_reason(scheduler)
        if reason is not None:
            raise DevClusterError(f"profile {profile.name} ({scheduler}) cannot run as a real member: {reason}")
    if not profiles:
        raise DevClusterError("no profile to run as a real member")
    return profiles


class KubeDevClusters:
    """Real member clusters (federator/dev/kube.py) for `federator up --members kube`, with the same
    start()/stop() and files as DevClusters: kubeconfigs of the hub identity in `<state-dir>/kube/`,
    the agent's beside them, registrations in `<state-dir>/kube/registrations/`, and each member's
    processes, logs and admin kubeconfig (`<cluster>-admin.kubeconfig`) there too."""

    def __init__(self, profiles: Sequence[ClusterProfile], *, state_dir: Path) -> None:
        self.profiles = list(profiles)
        self.directory = state_dir / "kube"
        self.registrations_dir = self.directory / "registrations"
        self.clusters: list[DevCluster] = []
        self._members: Any = None

    def start(self) -> list[DevCluster]:
        from federator.dev.kube import KubeBuildError, KubeMemberError, KubeMembers, kube_binaries
        from federator.obs import get_logger

        log = get_logger("devclusters")
        self.registrations_dir.mkdir(parents=True, exist_ok=True)
        try:
            binaries = kube_binaries(log=lambda line: log.info("kube build", line=line))
            self._members = KubeMembers(self.profiles, directory=self.directory, binaries=binaries)
            for member in self._members.start():
                member.apply_member_rbac()
                self.clusters.append(self._register(member))
        except (KubeBuildError, KubeMemberError) as e:
            self.stop()
            raise DevClusterError(str(e)) from None
        except BaseException:
            self.stop()
            raise
        running = {f"{c.name}.yaml" for c in self.clusters}
        for path in self.registrations_dir.glob("*.yaml"):
            if path.name not in running:
                path.unlink(missing_ok=True)
        log.info("real member clusters serving", clusters={c.name: c.server for c in self.clusters})
        return self.clusters

    def _register(self, member: Any) -> DevCluster:
        document = registration_for(member.profile, kubeconfig=member.hub_kubeconfig)
        labels = document["metadata"]["labels"]
        del labels[DEV_CLUSTER_LABEL]
        labels["federator.dev/kube-member"] = "true"
        path = self.registrations_dir / f"{member.name}.yaml"
        header = ("# Generated by `federator up --members kube` for its real member cluster; rewritten at every "
                  f"start.\n# Profile: {member.profile.name} ({member.profile.description})\n")
        _write_atomically(path, header + yaml.safe_dump(document, sort_keys=False))
        return DevCluster(
            name=member.name, server=member.server, kubeconfig=member.hub_kubeconfig, registration=path,
            agent_kubeconfig=member.agent_kubeconfig, scheduler=document["spec"]["scheduler"]["name"],
            network=document["spec"]["network"]["type"], nodes=member.profile.node_count,
            gpus=member.profile.gpu_count, description=member.profile.description,
        )

    def stop(self) -> None:
        if self._members is not None:
            self._members.stop()
            self._members = None


# ---------------------------------------------------------------- fence agents


class DevAgents:
    """One fence agent process (`python -m federator.cli agent`) per simulated cluster.

    `start()` starts them (DevClusterError if one cannot be); `stop()` sends each SIGTERM, waits,
    and kills the ones that do not stop. Their output goes to `<cluster>-agent.log` in `directory`."""

    def __init__(self, clusters: Sequence[DevCluster], *, hub_identity: str, directory: Path,
                 log_level: str = "info", poll_seconds: float = 1.0) -> None:
        self.clusters = list(clusters)
        self.hub_identity = hub_identity
        self.directory = directory
        self.log_level = log_level
        self.poll_seconds = poll_seconds
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def log_path(self, cluster: str) -> Path:
        return self.directory / f"{cluster}-agent.log"

    def command(self, cluster: DevCluster) -> list[str]:
        return [sys.executable, "-m", "federator.cli", "agent", "--kubeconfig", str(cluster.agent_kubeconfig),
                "--hub-identity", self.hub_identity, "--poll-seconds", f"{self.poll_seconds:g}",
                "--log-level", self.log_level, "--stop-with-parent"]

    def start(self) -> None:
        for cluster in self.clusters:
            path = self.log_path(cluster.name)
            try:
                with open(path, "ab") as log:
                    # stdin is a pipe only this process holds: when it dies, the agent sees EOF and stops
                    self.processes[cluster.name] = subprocess.Popen(
                        self.command(cluster), stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                        close_fds=True)
            except OSError as e:
                self.stop()
                raise DevClusterError(f"cannot start the fence agent of {cluster.name}: {e.strerror or e}") from None

    def stop(self) -> None:
        processes, self.processes = self.processes, {}
        for proc in processes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in processes.values():
            try:
                proc.wait(_AGENT_STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(_AGENT_STOP_TIMEOUT_SECONDS)
            if proc.stdin is not None:
                proc.stdin.close()


def hub_identity_of(args: argparse.Namespace) -> str:
    """The identity the hub of `federator up` labels its member objects with (and names its Leases after)."""
    from federator.controllers.jobs import DEFAULT_HUB_ID

    return str(getattr(args, "hub_id", None) or DEFAULT_HUB_ID)


# ---------------------------------------------------------------- federator up


def _print_clusters(clusters: Sequence[DevCluster], *, registrations: Path, admin_kubeconfig: Path | None,
                    agents: DevAgents | None = None) -> None:
    """What a person at the terminal needs (stdout; logs go to stderr). No token is printed; every command
    runs as printed from the working directory (hub.federator_command, hub.example_job_path)."""
    from federator.hub.app import example_job_path, federator_command

    width = max(len(c.name) for c in clusters)
    kind = "real" if registrations.parent.name == "kube" else "simulated"
    lines = [f"federator up: {len(clusters)} {kind} member cluster(s), registered from {registrations}/"]
    for c in clusters:
        lines.append(f"  {c.name:<{width}}  {c.scheduler:<12}  {c.nodes:>4} nodes {c.gpus:>4} GPUs  {c.server}"
                     f"  kubeconfig: {c.kubeconfig}")
    if agents is not None:
        lines.append(f"A fence agent runs beside each cluster for hub {agents.hub_identity!r} "
                     f"(logs: {agents.directory}/<cluster>-agent.log)")
    admin = str(admin_kubeconfig) if admin_kubeconfig is not None else "HUB_KUBECONFIG"
    # The design example needs RDMA: show the pods of the first RDMA cluster, where it should land.
    first = next((c for c in clusters if c.network == "rdma"), clusters[0])
    example = example_job_path()
    lines += [
        "Once the hub is ready (below), submit the example and watch it land, run and succeed:",
        *([f"  {federator_command()} submit --kubeconfig {admin} -f {example}"] if example else []),
        f"  kubectl --kubeconfig {admin} get tj -A -w",
        f"  kubectl --kubeconfig {first.kubeconfig} get pods -A -l federator.dev/job-name=resnet-ps -w",
    ]
    print("\n".join(lines), flush=True)


def run_up(args: argparse.Namespace) -> int:
    """`federator up`: the hub, with simulated member clusters unless --clusters or --no-sim."""
    from federator.hub.app import audit_flags, encryption_flag, settings_knobs, run_hub, store_flags
    from federator.store.protocol import StoreMisconfigured

    if getattr(args, "clusters", None) or getattr(args, "no_sim", False):
        return run_hub(args)
    try:
        settings_knobs(args)  # a wrong flag fails before any simulated cluster starts
        store_flags(args)
        encryption_flag(args)
        audit_flags(args)  # a bad audit policy too
    except (ValueError, StoreMisconfigured) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from federator.obs import configure_logging

    configure_logging(level=getattr(args, "log_level", "info"))
    state_dir = Path(args.state_dir)
    clusters: DevClusters | KubeDevClusters
    try:
        if getattr(args, "members", "sim") == "kube":
            profiles = load_kube_profiles(args.sim_profile, run_seconds=float(args.sim_run_seconds))
            clusters = KubeDevClusters(profiles, state_dir=state_dir)
        else:
            profiles = load_dev_profiles(args.sim_profile, run_seconds=float(args.sim_run_seconds))
            clusters = DevClusters(profiles, state_dir=state_dir, port_base=args.sim_port_base,
                                   ephemeral=bool(getattr(args, "sim_ephemeral", False)))
    except DevClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    agents: DevAgents | None = None
    try:
        try:
            running = clusters.start()
            agents = DevAgents(running, hub_identity=hub_identity_of(args), directory=clusters.directory,
                               log_level=getattr(args, "log_level", "info"))
            agents.start()
        except DevClusterError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        admin = state_dir / "admin.kubeconfig" if getattr(args, "token_file", None) is None else None
        _print_clusters(running, registrations=clusters.registrations_dir, admin_kubeconfig=admin, agents=agents)
        args.clusters = str(clusters.registrations_dir)
        return run_hub(args)
    finally:
        if agents is not None:
            agents.stop()
        clusters.stop()
