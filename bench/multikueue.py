"""federator against Kueue's MultiKueue on the same REAL worker clusters, the same JobSets, in one run (issue 32).

Everything is set up from nothing, on loopback, by this script:

- three worker clusters (federator/dev/kube.py: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
  kwok nodes made from a simulator profile, the real JobSet controller v0.10.1): `mkb-ib-a100` (A100 nodes,
  InfiniBand, the cheapest), `mkb-roce-a100` (A100, RoCE) and `mkb-eth-h100` (H100, Ethernet), `--nodes` nodes
  of 8 GPUs each, the default scheduler;
- a manager control plane (`mkb-manager`: one CPU node, the JobSet CRD and controller);
- Kueue v0.17.0 (built from its Go module by `e2e/kube/operators/build.sh kueue`) as a local process on every
  one of them: upstream's CRDs, RBAC and webhook configurations (config/default, rendered with kubectl
  kustomize; the webhooks and the CRDs' conversion webhooks called by URL on loopback, with a serving
  certificate signed by that cluster's CA, as kube.py does for the JobSet controller's webhooks; internal
  certificate management off), the jobset integration only, the visibility server off, the admin identity;
  the manager's with MultiKueue (`multiKueue.dispatcherName`: AllAtOnce or Incremental, `workerLostTimeout`);
  Kueue's manager reads its metrics certificate from the fixed path /etc/kueue/metrics/certs when internal
  certificate management is off, so the bench writes a loopback certificate there when none is present;
- Kueue's objects: on each worker a ResourceFlavor whose nodeLabels are what the worker offers (its GPU
  product, and `feature.node.kubernetes.io/rdma.capable` where it has RDMA: so a worker's Kueue does not admit
  a job whose nodeSelector asks for another model or fabric), a ClusterQueue with the worker's whole capacity
  and a LocalQueue `default/lq`; on the manager a ResourceFlavor, a ClusterQueue with the sum of the workers'
  capacity and the AdmissionCheck `multikueue` (controllerName kueue.x-k8s.io/multikueue, parameters a
  MultiKueueConfig of the three MultiKueueClusters, each a kubeconfig Secret in kueue-system), a LocalQueue;
- the hub (`federator up` as bench/failover.py runs it, a child process), the three workers registered with
  `registration_for` (their fabric, GPU models and cost), the same cluster-loss grace as MultiKueue's
  workerLostTimeout (`--grace`, default the hub's own default, 60 s; `--worker-lost-timeout 900` sets
  MultiKueue's alone, to its documented default).

MultiKueue and the hub reach the workers with the SAME identity (the workers' `hub_kubeconfig`, a token of
`federator-hub-access`, bound to cluster-admin for the bench), so each worker's audit log counts what each
federation layer wrote there (create, update, patch, delete in namespace default). Both read nothing else.

The jobs: `--jobs` JobSets of one replicated Job of 2 pods, 4 GPUs each, pods that run for an hour, cycling
through three asks: A100 on an RDMA fabric (ib or roce worker), H100 (the eth worker), any GPU (any worker).
To MultiKueue they go with the label kueue.x-k8s.io/queue-name=lq and the asks as pod nodeSelectors
(`nvidia.com/gpu.product`, `feature.node.kubernetes.io/rdma.capable`); to the hub with the asks as its
annotations (federator.dev/gpu-models, federator.dev/network) and no nodeSelector. Names are unique per
phase. Measured by a watch of every worker's JobSets and pods (admin, this process; times on one monotonic
clock from the moment before each create):

- admitted: the job's JobSet is in a worker with spec.suspend false (MultiKueue: after a worker's Kueue
  admitted it; federator: the hub's resume of its suspended copy);
- bound: every pod of it in that worker has a node; running: every pod is Running. p50 and p99 per phase;
- writesPerJob: the federation identity's writes in the workers' audit logs over the phase, per job;
- mismatched: jobs whose JobSet was released in a worker whose fabric or GPU model they did not ask for;
  unfinished: jobs not Running within --timeout;
- cutoff (after a burst of at most 6 jobs, two of each ask, which fit in the two workers left with the default
  --nodes 4): the worker running the most movable jobs (ones another worker could run) loses
  its kube-apiserver (SIGKILL); movedSeconds: from then until each movable job that was there is Running
  elsewhere (p50, max); maxCopies: the most clusters any job was Running in at once (the cut worker's last
  known state counts: its nodes keep running what they ran); then the API server comes back and
  staleGoneSeconds is how long until no job is Running in two clusters.

Phases per run and system (federator, mk-allatonce, mk-incremental): burst (every job at once), steady (one
every --interval seconds), cutoff; the workers are reset (every JobSet and Workload deleted, every pod gone)
between phases, and the hub and the manager's Kueue are restarted per system; `--phases` runs some of them
(`--phases cutoff`: only the cut-off, after its own burst). Medians over --runs; --quick is a smoke run (fewer
jobs, no steady phase). Output: a table and `--json FILE` (bench/benchresult.py).

Never part of the test run. Needs Go (Kueue, Kubernetes and the operators are built on first use: minutes to
tens of minutes cold) and kubectl.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

NAMESPACE = "default"
QUEUE = "lq"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
PRODUCT_LABEL = "nvidia.com/gpu.product"
RDMA_LABEL = "feature.node.kubernetes.io/rdma.capable"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
DISPATCHERS = {"mk-allatonce": "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
               "mk-incremental": "kueue.x-k8s.io/multikueue-dispatcher-incremental"}
SYSTEMS = ("federator", *DISPATCHERS)
#: what a run does per system, in this order (--phases picks some)
PHASES = ("burst", "steady", "cutoff")
PODS_PER_JOB = 2
GPUS_PER_POD = 4
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
#: the Kueue webhooks kept: those of Kueue's own kinds and of JobSet (the one integration enabled)
KUEUE_WEBHOOK_GROUPS = frozenset({"kueue.x-k8s.io", "jobset.x-k8s.io"})
METRICS_CERTS = Path("/etc/kueue/metrics/certs")
#: Kueue v0.17.0's Incremental dispatcher nominates workers in rounds of this long (incrementalDispatcherRoundTimeout);
#: a workload evicted from a lost worker is nominated again only when its round is over
INCREMENTAL_ROUND_SECONDS = 300.0


# ---------------------------------------------------------------- pure parts: clusters, jobs, manifests


@dataclass(frozen=True, slots=True)
class Worker:
    name: str
    fabric: str  # infiniband | roce | ethernet
    product: str  # the nodes' nvidia.com/gpu.product
    model: str  # what a job asks for (federator.dev/gpu-models)
    cost: float

    @property
    def rdma(self) -> bool:
        return self.fabric != "ethernet"


WORKERS = (
    Worker("mkb-ib-a100", "infiniband", "A100-SXM4-80GB", "A100", 1.0),
    Worker("mkb-roce-a100", "roce", "A100-SXM4-80GB", "A100", 2.0),
    Worker("mkb-eth-h100", "ethernet", "H100-80GB-HBM3", "H100", 3.0),
)
MANAGER = "mkb-manager"


@dataclass(frozen=True, slots=True)
class Ask:
    """What a job asks of a cluster."""

    name: str
    model: str | None  # None: any GPU
    rdma: bool

    def fits(self, worker: Worker) -> bool:
        return (self.model is None or self.model == worker.model) and (not self.rdma or worker.rdma)

    def node_selector(self) -> dict[str, str]:
        """The ask as pod nodeSelectors (MultiKueue is not topology-aware: a worker's Kueue and kube-scheduler
        see only these)."""
        selector: dict[str, str] = {}
        if self.model is not None:
            products = {w.product for w in WORKERS if w.model == self.model}
            if len(products) != 1:
                raise ValueError(f"GPU model {self.model} is not one product among the workers")
            selector[PRODUCT_LABEL] = products.pop()
        if self.rdma:
            selector[RDMA_LABEL] = "true"
        return selector

    def annotations(self) -> dict[str, str]:
        """The ask as the hub's placement hints (federator/apis/jobkinds/hints.py)."""
        found = {"federator.dev/network": "rdma" if self.rdma else "any",
                 "federator.dev/on-cluster-loss": "requeue"}
        if self.model is not None:
            found["federator.dev/gpu-models"] = self.model
        return found


ASKS = (Ask("a100-rdma", "A100", True), Ask("h100", "H100", False), Ask("any-gpu", None, False))


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    ask: Ask

    def movable(self, workers: Sequence[Worker] = WORKERS) -> bool:
        return sum(self.ask.fits(w) for w in workers) > 1


def jobs_for(prefix: str, count: int) -> list[Job]:
    return [Job(f"{prefix}-{i:03d}", ASKS[i % len(ASKS)]) for i in range(count)]


def jobset(job: Job, *, system: str) -> dict[str, Any]:
    """The JobSet submitted for `job`: to MultiKueue's manager (queue label, nodeSelectors) or to the hub
    (placement annotations)."""
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "trainer", "image": "trainer:1.4", "resources": {
            "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": str(GPUS_PER_POD)},
            "limits": {"nvidia.com/gpu": str(GPUS_PER_POD)}}}],
    }
    metadata: dict[str, Any] = {"name": job.name, "namespace": NAMESPACE}
    if system == "federator":
        metadata["annotations"] = job.ask.annotations()
    elif system in DISPATCHERS:
        metadata["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}
        selector = job.ask.node_selector()
        if selector:
            pod["nodeSelector"] = selector
    else:
        raise ValueError(f"unknown system {system!r} (known: {', '.join(SYSTEMS)})")
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": metadata,
        "spec": {"replicatedJobs": [{"name": "worker", "replicas": 1, "template": {"spec": {
            "parallelism": PODS_PER_JOB, "completions": PODS_PER_JOB, "backoffLimit": 0,
            "template": {"metadata": {"annotations": {"sim.federator.dev/duration-seconds": "3600"}},
                         "spec": pod}}}}]},
    }


def worker_capacity(nodes: int) -> dict[str, str]:
    return {"cpu": str(64 * nodes), "memory": f"{512 * nodes}Gi", "nvidia.com/gpu": str(8 * nodes)}


def _cluster_queue(flavor: str, quota: dict[str, str], *, admission_check: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": list(quota), "flavors": [{"name": flavor, "resources": [
            {"name": resource, "nominalQuota": value} for resource, value in quota.items()]}]}],
    }
    if admission_check is not None:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": admission_check}]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": spec}


def _local_queue() -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": QUEUE, "namespace": NAMESPACE}, "spec": {"clusterQueue": "cq"}}


def worker_queue_objects(worker: Worker, *, nodes: int) -> list[dict[str, Any]]:
    """A worker's Kueue objects: a flavor labelled with what the worker offers, its whole capacity as quota."""
    labels = {PRODUCT_LABEL: worker.product}
    if worker.rdma:
        labels[RDMA_LABEL] = "true"
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
              "metadata": {"name": f"gpu-{worker.name}"}, "spec": {"nodeLabels": labels}}
    return [flavor, _cluster_queue(f"gpu-{worker.name}", worker_capacity(nodes), admission_check=None),
            _local_queue()]


def manager_queue_objects(kubeconfigs: dict[str, str], *, nodes: int) -> list[dict[str, Any]]:
    """The manager's MultiKueue objects: a kubeconfig Secret and a MultiKueueCluster per worker, the
    MultiKueueConfig, the AdmissionCheck, a flavor, a ClusterQueue with every worker's capacity, a LocalQueue."""
    objects: list[dict[str, Any]] = []
    for name, kubeconfig in kubeconfigs.items():
        objects.append({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": f"{name}-kubeconfig", "namespace": "kueue-system"},
                        "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()}})
        objects.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
                        "metadata": {"name": name}, "spec": {"clusterSource": {"kubeConfig": {
                            "locationType": "Secret", "location": f"{name}-kubeconfig"}}}})
    objects.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig",
                    "metadata": {"name": "workers"}, "spec": {"clusters": list(kubeconfigs)}})
    objects.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
                    "metadata": {"name": "multikueue"},
                    "spec": {"controllerName": MULTIKUEUE_CONTROLLER, "parameters": {
                        "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "workers"}}})
    objects.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                    "metadata": {"name": "manager"}, "spec": {}})
    total = worker_capacity(nodes * len(kubeconfigs))
    objects += [_cluster_queue("manager", total, admission_check="multikueue"), _local_queue()]
    return objects


def kueue_configuration(*, health_port: int, metrics_port: int, webhook_port: int, cert_dir: Path,
                        dispatcher: str | None, worker_lost_seconds: float) -> dict[str, Any]:
    """Kueue's config.kueue.x-k8s.io/v1beta2 Configuration for a local process (MultiKueue when `dispatcher`)."""
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["jobset.x-k8s.io/jobset"]},
        "featureGates": {"VisibilityOnDemand": False},
    }
    if dispatcher is not None:
        config["multiKueue"] = {"dispatcherName": dispatcher, "workerLostTimeout": f"{worker_lost_seconds:g}s",
                                "gcInterval": "30s"}
    return config


def kueue_install(rendered: str, *, webhook_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """What a cluster running Kueue as a local process applies of upstream's config/default: kube.py's
    operator_install (no Deployment, Service, Secret, ConfigMap; webhooks by URL on loopback), less the
    visibility APIService and every webhook of a kind other than Kueue's own and JobSet."""
    from federator.dev.kube import MemberOperator, operator_install

    crds = tuple(d["metadata"]["name"] for d in yaml.safe_load_all(rendered)
                 if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition")
    operator = MemberOperator("kueue", "kueue", "kueue/default", "kueue-system", "kueue-controller-manager",
                              (*crds, "jobsets.jobset.x-k8s.io"))
    kept = []
    for document in operator_install(operator, rendered, webhook_url=webhook_url, ca_bundle=ca_bundle):
        if document["kind"] == "APIService":
            continue
        if document["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            hooks = [h for h in document.get("webhooks") or () if all(
                set(rule.get("apiGroups") or ("",)) <= KUEUE_WEBHOOK_GROUPS for rule in h.get("rules") or ())]
            if not hooks:
                continue
            document = {**document, "webhooks": hooks}
        kept.append(document)
    return kept


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), -(-len(ordered) * q // 100)))
    return ordered[int(rank) - 1]


def audit_writes(lines: Iterable[str], *, user: str, namespace: str = NAMESPACE) -> int:
    """Write requests (create, update, patch, delete) of `user` in `namespace`, from audit log lines (JSON)."""
    count = 0
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (event.get("stage") == "ResponseComplete" and event.get("verb") in WRITE_VERBS
                and (event.get("user") or {}).get("username") == user
                and (event.get("objectRef") or {}).get("namespace") == namespace
                and (event.get("objectRef") or {}).get("resource") not in ("events", "leases")):
            count += 1
    return count


# ---------------------------------------------------------------- Kueue as a local process


class Kueue:
    """Kueue's manager for one cluster (a KubeMember): installs upstream's manifests, runs the process."""

    def __init__(self, member: Any, build: Path, *, dispatcher: str | None = None,
                 worker_lost_seconds: float = 900.0) -> None:
        from federator.store.etcd_process import free_port

        self.member = member
        self.build = build
        self.dispatcher = dispatcher
        self.worker_lost_seconds = worker_lost_seconds
        self.ports = {what: free_port() for what in ("health", "metrics", "webhook")}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = member.home / "kueue.log"

    def install(self) -> None:
        rendered = self.member.kubectl("kustomize", str(self.build / "manifests" / "kueue" / "default")).stdout
        ca = base64.b64encode((self.member.home / "tls" / "ca.crt").read_bytes()).decode()
        docs = kueue_install(rendered, webhook_url=f"https://127.0.0.1:{self.ports['webhook']}", ca_bundle=ca)
        self.member.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                            input=yaml.safe_dump_all(docs, sort_keys=False), timeout=180)
        crds = [d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"]
        _wait_sync("Kueue's CRDs Established", lambda: all(
            self.member._crd_established(name) for name in crds), timeout=120)  # noqa: SLF001

    def start(self) -> None:
        from federator.store.etcd_process import exit_with_parent

        from federator.dev.certs import generate_server_certificate, write_private_file

        certs = self.member.home / "kueue-certs"  # its webhook server's: loopback, signed by the cluster's CA
        if not (certs / "tls.crt").is_file():
            certs.mkdir(exist_ok=True)
            tls = self.member.home / "tls"
            cert, key = generate_server_certificate((tls / "ca.crt").read_bytes(), (tls / "ca.key").read_bytes(),
                                                    hosts=("127.0.0.1", "localhost"))
            write_private_file(certs / "tls.key", key)
            write_private_file(certs / "tls.crt", cert, mode=0o644)
        if not (METRICS_CERTS / "tls.crt").is_file():
            METRICS_CERTS.mkdir(parents=True, exist_ok=True)
            shutil.copy(certs / "tls.crt", METRICS_CERTS / "tls.crt")
            shutil.copy(certs / "tls.key", METRICS_CERTS / "tls.key")
        config = self.member.home / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(kueue_configuration(
            health_port=self.ports["health"], metrics_port=self.ports["metrics"],
            webhook_port=self.ports["webhook"], cert_dir=certs, dispatcher=self.dispatcher,
            worker_lost_seconds=self.worker_lost_seconds), sort_keys=False))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.build / "bin" / "kueue"), f"--config={config}", "--zap-log-level=info"],
                env={**os.environ, "KUBECONFIG": str(self.member.admin_kubeconfig)}, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=exit_with_parent)  # noqa: PLW1509
        probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                 "metadata": {"name": "federator-webhook-probe"}, "spec": {}}

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"Kueue exited with {self.proc.returncode} on {self.member.name}; see {self.log}")
            done = self.member.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False)
            return done.returncode == 0 and _http_ok(f"http://127.0.0.1:{self.ports['health']}/readyz")

        _wait_sync(f"Kueue ready on {self.member.name} (its webhooks called)", ready, timeout=180)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False


def _wait_sync(what: str, check: Callable[[], bool], *, timeout: float, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def kueue_build(*, timeout: float = 3600) -> Path:
    """`e2e/kube/operators/build.sh kueue` (instant when built): the folder with bin/kueue and manifests/kueue."""
    from federator.dev.kube import operators_build_script

    done = subprocess.run(["bash", str(operators_build_script()), "kueue"], capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"build.sh kueue failed: {done.stderr.strip()[-500:]}")
    return Path(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the watch of the workers


@dataclass
class JobTimes:
    submitted: float
    admitted: dict[str, float] = field(default_factory=dict)  # cluster -> first released there
    bound: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    running_now: set[str] = field(default_factory=set)
    max_copies: int = 0


class Observer:
    """One list+watch of JobSets and pods per worker (admin), kept as the last known state of each worker (a
    worker whose API server is gone keeps its last state); `jobs` records each phase's jobs' times."""

    def __init__(self, members: Sequence[Any]) -> None:
        self.members = list(members)
        self.state: dict[str, dict[str, dict[str, dict[str, Any]]]] = {
            m.name: {"jobsets": {}, "pods": {}} for m in self.members}
        self.jobs: dict[str, JobTimes] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._clients: list[Any] = []
        self.changed = asyncio.Event()

    async def start(self) -> None:
        opened = []
        for member in self.members:
            for plural in ("jobsets", "pods"):
                event = asyncio.Event()
                opened.append(event)
                self._tasks.append(asyncio.get_running_loop().create_task(
                    self._watch(member, plural, event), name=f"watch:{member.name}:{plural}"))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in opened)), 120)

    async def _watch(self, member: Any, plural: str, opened: asyncio.Event) -> None:
        from federator.clusters.client import PODS, Expired, MemberClient, MemberClientError, ResourceKind

        kind = PODS if plural == "pods" else ResourceKind(group="jobset.x-k8s.io", version="v1alpha2",
                                                          plural="jobsets", kind="JobSet", namespaced=True)
        client = await MemberClient.from_kubeconfig(member.admin_kubeconfig, cluster=member.name)
        self._clients.append(client)
        objects = self.state[member.name][plural]
        resource_version: str | None = None
        while True:
            try:
                if resource_version is None:
                    listed = await client.list_all(kind, namespace=NAMESPACE)
                    objects.clear()
                    objects.update({o["metadata"]["name"]: o for o in listed.items})
                    resource_version = listed.resource_version
                    self._update(member.name)
                async for batch in client.watch_batches(kind, resource_version=resource_version,
                                                        namespace=NAMESPACE, on_open=opened.set):
                    for event in batch:
                        if event.resource_version:
                            resource_version = event.resource_version
                        name = (event.object.get("metadata") or {}).get("name")
                        if event.type == "DELETED":
                            objects.pop(name, None)
                        elif event.type in ("ADDED", "MODIFIED") and name:
                            objects[name] = event.object
                    self._update(member.name)
            except Expired:
                resource_version = None
            except (MemberClientError, OSError, TimeoutError):
                await asyncio.sleep(0.5)
                resource_version = None  # a worker that was away: list it again

    def _update(self, cluster: str) -> None:
        now = time.monotonic()
        state = self.state[cluster]
        pods: dict[str, list[dict[str, Any]]] = {}
        for pod in state["pods"].values():
            meta = pod.get("metadata") or {}
            job = (meta.get("labels") or {}).get(JOBSET_NAME_LABEL)
            if job is None or meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in (
                    "Succeeded", "Failed"):
                continue
            pods.setdefault(job, []).append(pod)
        for name, times in self.jobs.items():
            js = state["jobsets"].get(name)
            if js is not None and not (js.get("spec") or {}).get("suspend") and cluster not in times.admitted:
                times.admitted[cluster] = now
            mine = pods.get(name, [])
            if len(mine) >= PODS_PER_JOB and all((p.get("spec") or {}).get("nodeName") for p in mine):
                times.bound.setdefault(cluster, now)
            if len(mine) >= PODS_PER_JOB and all((p.get("status") or {}).get("phase") == "Running" for p in mine):
                times.running.setdefault(cluster, now)
                times.running_now.add(cluster)
            else:
                times.running_now.discard(cluster)
            times.max_copies = max(times.max_copies, len(times.running_now))
        self.changed.set()

    async def wait(self, what: str, check: Callable[[], bool], *, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not check():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                print(f"    (timed out after {timeout:g}s: {what})", file=sys.stderr)
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(remaining, 1.0))
            except TimeoutError:
                pass
        return True

    def empty(self) -> bool:
        return all(not s["jobsets"] and not s["pods"] for s in self.state.values())

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for client in self._clients:
            await client.close()


# ---------------------------------------------------------------- the bench


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.workers: list[Any] = []
        self.manager: Any = None
        self.kueues: dict[str, Kueue] = {}
        self.manager_kueue: Kueue | None = None
        self.kueue_dir: Path | None = None
        self.observer: Observer | None = None
        self.spec = {w.name: w for w in WORKERS}
        self.versions: dict[str, str] = {}

    # ------------------------------------------------------------ setup

    def _profile(self, name: str, pool: dict[str, Any], *, fabric: str, cost: float) -> Any:
        from federator.sim.profile import parse_profile

        return parse_profile({
            "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
            "labels": {"tier": "research"},
            "location": {"type": "on-prem", "region": "bench"},
            "network": {"fabric": fabric, "bandwidthGbps": 200 if fabric != "ethernet" else 100},
            "schedulers": [{"type": "default"}],
            "kubelet": {"startDelaySeconds": 0.5, "defaultRunSeconds": 3600, "terminationSeconds": 0.1},
            "costPerGpuHour": cost,
            "nodePools": [pool],
        }, source="bench/multikueue.py")

    def start(self) -> None:
        from federator.dev.kube import HUB_USER, KubeMember, kube_binaries, operator_binaries

        t0 = time.monotonic()
        binaries = kube_binaries(timeout=3600)
        operators = operator_binaries(timeout=3600)
        self.kueue_dir = kueue_build()
        self.versions = {"kubernetes": "v1.36", "kueue": (self.kueue_dir / "complete").read_text().split()[-1]}
        marker = operators.directory / "complete"
        if marker.is_file():
            self.versions.update(line.split()[:2] for line in marker.read_text().splitlines() if line.strip())
        kube = self.workdir / "kube"
        kube.mkdir(parents=True, exist_ok=True)
        for w in WORKERS:
            pool = {"name": "gpu", "count": self.args.nodes, "cpu": "64", "memory": "512Gi", "gpus": 8,
                    "gpuProduct": w.product, "maxPods": 110}
            if w.rdma:
                pool["rdmaHca"] = 1000
            member = KubeMember(self._profile(w.name, pool, fabric=w.fabric, cost=w.cost), directory=kube,
                                binaries=binaries, operators=("jobset",), operator_binaries=operators)
            self.workers.append(member)
            member.start()  # from the main thread: its processes die with it
            member.apply_member_rbac()
            member.kubectl("create", "clusterrolebinding", "bench-federation-admin", "--clusterrole=cluster-admin",
                           f"--user={HUB_USER}")
        self.manager = KubeMember(
            self._profile(MANAGER, {"name": "cpu", "count": 1, "cpu": "32", "memory": "128Gi"}, fabric="ethernet",
                          cost=1.0), directory=kube, binaries=binaries, operators=("jobset",),
            operator_binaries=operators)
        self.manager.start()
        assert self.kueue_dir is not None
        for member in self.workers:
            kueue = Kueue(member, self.kueue_dir)
            kueue.install()
            kueue.start()
            self.kueues[member.name] = kueue
            member.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(
                worker_queue_objects(self.spec[member.name], nodes=self.args.nodes)))
        # installed once: its webhook configurations name its ports, which every restart keeps
        self.manager_kueue = Kueue(self.manager, self.kueue_dir,
                                   worker_lost_seconds=self.args.worker_lost_timeout)
        self.manager_kueue.install()
        kubeconfigs = {m.name: m.hub_kubeconfig.read_text() for m in self.workers}
        self._manager_objects = yaml.safe_dump_all(manager_queue_objects(kubeconfigs, nodes=self.args.nodes))
        print(f"  setup: {len(self.workers)} workers and the manager, Kueue on each, in "
              f"{time.monotonic() - t0:.0f}s", file=sys.stderr)

    async def start_observer(self) -> None:
        self.observer = Observer(self.workers)
        await self.observer.start()

    def stop(self) -> None:
        if self.manager_kueue is not None:
            self.manager_kueue.stop()
        for kueue in self.kueues.values():
            kueue.stop()
        if self.manager is not None:
            self.manager.stop()
        for member in reversed(self.workers):
            member.stop()

    # ------------------------------------------------------------ the systems

    def start_multikueue(self, dispatcher: str) -> None:
        assert self.manager_kueue is not None
        self.manager_kueue.dispatcher = dispatcher
        self.manager_kueue.start()
        self.manager.kubectl("apply", "--server-side", "-f", "-", input=self._manager_objects)

        def active() -> bool:
            got = self.manager.kubectl("get", "admissionchecks.kueue.x-k8s.io", "multikueue", "-o", "json",
                                       check=False)
            if got.returncode != 0:
                return False
            conditions = (json.loads(got.stdout).get("status") or {}).get("conditions") or ()
            clusters = self.manager.kubectl("get", "multikueueclusters.kueue.x-k8s.io", "-o", "json").stdout
            return any(c["type"] == "Active" and c["status"] == "True" for c in conditions) and all(
                any(c["type"] == "Active" and c["status"] == "True" for c in (i.get("status") or {}).get(
                    "conditions") or ()) for i in json.loads(clusters)["items"])

        _wait_sync("MultiKueue's AdmissionCheck and every MultiKueueCluster Active", active, timeout=120)

    def stop_multikueue(self) -> None:
        if self.manager_kueue is not None:
            self.manager_kueue.stop()

    # ------------------------------------------------------------ reset

    async def reset(self, delete: Callable[[str], Any] | None = None) -> None:
        """Every job of the phase deleted through the system that ran it (`delete(name)`: the hub or
        MultiKueue's manager, which take their worker copies away), then whatever is left deleted straight
        from the workers and the manager, until no JobSet, Workload or pod is left in a worker."""
        assert self.observer is not None
        if delete is not None:
            await asyncio.gather(*(delete(name) for name in list(self.observer.jobs)), return_exceptions=True)
            await self.observer.wait("the system took its worker copies away", self.observer.empty, timeout=60)
        for member in (self.manager, *self.workers):
            for resource in ("jobsets.jobset.x-k8s.io", "workloads.kueue.x-k8s.io"):
                member.kubectl("delete", resource, "--all", "-n", NAMESPACE, "--wait=false", check=False)
        ok = await self.observer.wait("the workers empty", self.observer.empty, timeout=120)
        if not ok:
            for member in self.workers:
                member.kubectl("delete", "jobs.batch,pods", "--all", "-n", NAMESPACE, "--force", "--grace-period=0",
                               check=False)
            await self.observer.wait("the workers empty (forced)", self.observer.empty, timeout=60)
        self.observer.jobs.clear()

    # ------------------------------------------------------------ phases

    def audit_offsets(self) -> dict[str, int]:
        return {m.name: m.audit_log.stat().st_size if m.audit_log.exists() else 0 for m in self.workers}

    def writes_since(self, offsets: dict[str, int]) -> int:
        from federator.dev.kube import HUB_USER

        total = 0
        for member in self.workers:
            with member.audit_log.open("rb") as fh:
                fh.seek(offsets[member.name])
                total += audit_writes(fh.read().decode(errors="replace").splitlines(), user=HUB_USER)
        return total

    async def submit(self, system: str, jobs: Sequence[Job], *, interval: float, post: Callable[..., Any]) -> None:
        assert self.observer is not None
        for i, job in enumerate(jobs):
            if interval and i:
                await asyncio.sleep(interval)
            self.observer.jobs[job.name] = JobTimes(submitted=time.monotonic())
            if interval:
                await post(jobset(job, system=system))
        if not interval:
            await asyncio.gather(*(post(jobset(job, system=system)) for job in jobs))

    async def phase(self, system: str, name: str, jobs: Sequence[Job], *, interval: float,
                    post: Callable[..., Any]) -> dict[str, float]:
        assert self.observer is not None
        offsets = self.audit_offsets()
        await self.submit(system, jobs, interval=interval, post=post)
        times = self.observer.jobs
        await self.observer.wait(f"{system} {name}: every job Running",
                                 lambda: all(times[j.name].running for j in jobs), timeout=self.args.timeout)
        await asyncio.sleep(2.0)  # the last writes reach the audit logs
        figures = summarize(jobs, times)
        figures["writesPerJob"] = self.writes_since(offsets) / len(jobs)
        return figures

    async def cutoff(self, system: str, jobs: Sequence[Job]) -> dict[str, float]:
        """After a burst: cut the worker running the most movable jobs off (SIGKILL its kube-apiserver)."""
        assert self.observer is not None
        times = self.observer.jobs
        where = {j.name: next(iter(times[j.name].running_now), None) for j in jobs}
        counts = {m.name: sum(1 for j in jobs if where[j.name] == m.name and j.movable()) for m in self.workers}
        victim_name = max(counts, key=lambda n: counts[n])
        victim = next(m for m in self.workers if m.name == victim_name)
        movable = [j for j in jobs if where[j.name] == victim_name and j.movable()]
        if not movable:
            return {"cutoffMovableJobs": 0.0}
        for j in jobs:
            times[j.name].max_copies = len(times[j.name].running_now)
        cut = time.monotonic()
        victim.kill_component("kube-apiserver")
        print(f"    cut {victim_name} off ({len(movable)} movable jobs there)", file=sys.stderr)

        def moved(j: Job) -> float | None:
            elsewhere = [t for c, t in times[j.name].running.items() if c != victim_name and t > cut]
            return min(elsewhere) - cut if elsewhere else None

        await self.observer.wait(f"{system}: every movable job Running elsewhere",
                                 lambda: all(moved(j) is not None for j in movable),
                                 timeout=max(self.args.grace, self.args.worker_lost_timeout)
                                 + max(self.args.timeout, INCREMENTAL_ROUND_SECONDS + 60))
        seconds = [s for s in (moved(j) for j in movable) if s is not None]
        figures: dict[str, float] = {
            "cutoffMovableJobs": float(len(movable)), "cutoffMovedJobs": float(len(seconds)),
            "movedP50Seconds": percentile(seconds, 50), "movedMaxSeconds": max(seconds) if seconds else float("nan"),
        }
        victim.start_component("kube-apiserver")
        back = time.monotonic()
        await self.observer.wait(f"{system}: no job Running in two clusters",
                                 lambda: all(len(times[j.name].running_now) <= 1 for j in jobs), timeout=180)
        figures["maxCopies"] = float(max(times[j.name].max_copies for j in jobs))
        still = sum(1 for j in jobs if len(times[j.name].running_now) > 1)
        figures["staleGoneSeconds"] = time.monotonic() - back if not still else float("nan")
        figures["staleCopiesLeft"] = float(still)
        return figures

    async def run_system(self, system: str, run: int) -> dict[str, float]:
        """Every phase of one system: burst, steady (unless --quick), cutoff after a second burst."""
        figures: dict[str, float] = {}
        prefix = f"r{run}-{system.replace('mk-', 'mk')}"
        # the cut-off phase's jobs fit in the two workers left, whichever is cut off: two of each ask
        burst, steady, cut = (jobs_for(f"{prefix}-b", self.args.jobs), jobs_for(f"{prefix}-s", self.args.jobs),
                              jobs_for(f"{prefix}-c", min(self.args.jobs, 2 * len(ASKS))))
        if system == "federator":
            from failover import Hub  # bench/failover.py: the hub as `federator up` builds it, a child process

            clusters = self.workdir / f"hub-clusters-{run}"
            clusters.mkdir(exist_ok=True)
            from federator.dev.clusters import registration_for

            for member in self.workers:
                (clusters / f"{member.name}.yaml").write_text(yaml.safe_dump(
                    registration_for(member.profile, kubeconfig=member.hub_kubeconfig)))
            knobs = {"cluster_loss_grace_seconds": self.args.grace}
            async with Hub(self.workdir / f"hub-{run}" / ".federator", clusters, knobs) as hub, \
                    hub.session() as session:
                await _hub_ready(session, hub.url, [m.name for m in self.workers])

                jobsets = f"{hub.url}/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets"

                async def post(body: dict[str, Any]) -> None:
                    async with session.post(jobsets, data=json.dumps(body)) as response:
                        if response.status != 201:
                            raise RuntimeError(f"hub: create {body['metadata']['name']}: {response.status} "
                                               f"{(await response.text())[:300]}")

                async def delete(name: str) -> None:
                    async with session.delete(f"{jobsets}/{name}") as response:
                        await response.read()

                await self._phases(system, figures, burst, steady, cut, post, delete)
        else:
            from federator.clusters.client import MemberClient, ResourceKind

            self.start_multikueue(DISPATCHERS[system])
            client = await MemberClient.from_kubeconfig(self.manager.admin_kubeconfig, cluster=MANAGER)
            kind = ResourceKind(group="jobset.x-k8s.io", version="v1alpha2", plural="jobsets", kind="JobSet",
                                namespaced=True)

            async def post(body: dict[str, Any]) -> None:
                await client.create(kind, body, namespace=NAMESPACE)

            async def delete(name: str) -> None:
                await client.delete(kind, namespace=NAMESPACE, name=name, propagation_policy="Background")

            try:
                await self._phases(system, figures, burst, steady, cut, post, delete)
            finally:
                await client.close()
                self.stop_multikueue()
        return figures

    async def _phases(self, system: str, figures: dict[str, float], burst: list[Job], steady: list[Job],
                      cut: list[Job], post: Callable[..., Any], delete: Callable[[str], Any]) -> None:
        if "burst" in self.args.phases:
            print(f"  {system}: burst of {len(burst)}", file=sys.stderr)
            figures.update({f"burst.{k}": v for k, v in (await self.phase(system, "burst", burst, interval=0,
                                                                          post=post)).items()})
            await self.reset(delete)
        if "steady" in self.args.phases:
            print(f"  {system}: steady, one every {self.args.interval:g}s", file=sys.stderr)
            figures.update({f"steady.{k}": v for k, v in (await self.phase(
                system, "steady", steady, interval=self.args.interval, post=post)).items()})
            await self.reset(delete)
        if "cutoff" in self.args.phases:
            print(f"  {system}: cutoff", file=sys.stderr)
            await self.phase(system, "cutoff-burst", cut, interval=0, post=post)
            figures.update({f"cutoff.{k}": v for k, v in (await self.cutoff(system, cut)).items()})
            await self.reset(delete)


def summarize(jobs: Sequence[Job], times: dict[str, JobTimes]) -> dict[str, float]:
    """p50/p99 of submission -> admitted, bound, running; mismatched and unfinished jobs."""
    spec = {w.name: w for w in WORKERS}
    figures: dict[str, float] = {}
    for what in ("admitted", "bound", "running"):
        values = [min(getattr(times[j.name], what).values()) - times[j.name].submitted
                  for j in jobs if getattr(times[j.name], what)]
        figures[f"{what}P50Seconds"] = percentile(values, 50)
        figures[f"{what}P99Seconds"] = percentile(values, 99)
    figures["mismatched"] = float(sum(1 for j in jobs if any(
        c in spec and not j.ask.fits(spec[c]) for c in times[j.name].admitted)))
    figures["unfinished"] = float(sum(1 for j in jobs if not times[j.name].running))
    return figures


async def _hub_ready(session: Any, url: str, names: list[str]) -> None:
    from failover import CLUSTERS, wait_for

    async def ready() -> bool:
        async with session.get(url + CLUSTERS) as response:
            items = (await response.json())["items"]
        return {i["metadata"]["name"] for i in items if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (i.get("status") or {}).get("conditions") or ())} >= set(names)

    await wait_for("every worker Ready in the hub", ready, timeout=120)


# ---------------------------------------------------------------- report

ROWS = (
    ("burst.admittedP50Seconds", "burst: to admitted p50 (s)"), ("burst.admittedP99Seconds", "burst: to admitted p99 (s)"),
    ("burst.boundP50Seconds", "burst: to all pods bound p50 (s)"), ("burst.boundP99Seconds", "burst: to all pods bound p99 (s)"),
    ("burst.runningP50Seconds", "burst: to Running p50 (s)"), ("burst.runningP99Seconds", "burst: to Running p99 (s)"),
    ("burst.writesPerJob", "burst: worker writes per job"),
    ("burst.mismatched", "burst: released where fabric/model not asked"), ("burst.unfinished", "burst: not Running"),
    ("steady.admittedP50Seconds", "steady: to admitted p50 (s)"), ("steady.admittedP99Seconds", "steady: to admitted p99 (s)"),
    ("steady.runningP50Seconds", "steady: to Running p50 (s)"), ("steady.runningP99Seconds", "steady: to Running p99 (s)"),
    ("steady.writesPerJob", "steady: worker writes per job"), ("steady.mismatched", "steady: mismatched"),
    ("steady.unfinished", "steady: not Running"),
    ("cutoff.cutoffMovableJobs", "cutoff: movable jobs on the cut worker"),
    ("cutoff.cutoffMovedJobs", "cutoff: of them Running elsewhere"),
    ("cutoff.movedP50Seconds", "cutoff: Running elsewhere p50 (s)"),
    ("cutoff.movedMaxSeconds", "cutoff: Running elsewhere, last (s)"),
    ("cutoff.maxCopies", "cutoff: max copies Running at once"),
    ("cutoff.staleGoneSeconds", "cutoff: worker back -> stale copies gone (s)"),
    ("cutoff.staleCopiesLeft", "cutoff: jobs still Running twice 180 s after"),
)


def median(values: Sequence[float]) -> float:
    finite = [v for v in values if v == v]
    return statistics.median(finite) if finite else float("nan")


def table(results: dict[str, list[dict[str, float]]]) -> str:
    """Medians over runs, one column per system (markdown)."""
    systems = [s for s in SYSTEMS if s in results]
    lines = ["| figure | " + " | ".join(systems) + " |", "|---|" + "---:|" * len(systems)]
    for key, label in ROWS:
        cells = []
        for system in systems:
            values = [r[key] for r in results[system] if key in r]
            if not values:
                cells.append("-")
                continue
            value = median(values)
            cells.append("n/a" if value != value else (f"{value:.0f}" if value == int(value) else f"{value:.2f}"))
        if any(c != "-" for c in cells):
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> int:
    from benchresult import BenchResult

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        print(f"error: --systems: unknown {unknown[0]!r} (known: {', '.join(SYSTEMS)})", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="federator-multikueue-"))
    bench = Bench(args, workdir)
    results: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    try:
        bench.start()
        await bench.start_observer()
        for run in range(args.runs):
            for system in systems:
                print(f"run {run + 1}/{args.runs}: {system}", file=sys.stderr)
                results[system].append(await bench.run_system(system, run))
                print(json.dumps({system: results[system][-1]}), file=sys.stderr)
            print(f"after run {run + 1}:\n{table(results)}", file=sys.stderr, flush=True)
    finally:
        if bench.observer is not None:
            await bench.observer.stop()
        bench.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    result = BenchResult("multikueue")
    for system, runs in results.items():
        result.add_runs(runs, prefix=f"{system}.")
    result.notes.append(f"versions: {json.dumps(bench.versions)}; workers: "
                        + ", ".join(f"{w.name} ({w.fabric}, {w.product}, {args.nodes}x8 GPUs)" for w in WORKERS))
    result.notes.append(f"phases {', '.join(args.phases)}; jobs per phase {args.jobs}, steady interval "
                        f"{args.interval:g}s, hub cluster-loss grace {args.grace:g}s, MultiKueue workerLostTimeout "
                        f"{args.worker_lost_timeout:g}s, runs {args.runs}")
    print(table(results))
    for note in result.notes:
        print(note)
    result.write(args.json)
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per system; the table shows medians (3)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 6 jobs, no steady phase, 1 run")
    parser.add_argument("--jobs", type=int, default=9, help="jobs per phase (9: three of each ask)")
    parser.add_argument("--nodes", type=int, default=4, help="kwok nodes (8 GPUs each) per worker (4)")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between jobs in the steady phase")
    parser.add_argument("--grace", type=float, default=60.0,
                        help="the hub's cluster-loss grace and MultiKueue's workerLostTimeout, seconds (60: the "
                             "hub's default; MultiKueue's is 900)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds a phase waits for Running")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma list of " + ", ".join(SYSTEMS))
    parser.add_argument("--phases", default=",".join(PHASES),
                        help="comma list of the phases to run, in this order: " + ", ".join(PHASES)
                             + " (all; --quick leaves steady out)")
    parser.add_argument("--worker-lost-timeout", type=float, default=None,
                        help="MultiKueue's workerLostTimeout alone, seconds (default: --grace; 900 is its "
                             "documented default, for the cut-off phase at both systems' defaults)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, audit logs)")
    parser.add_argument("--json", default=None, help="write bench/benchresult.py's JSON here")
    args = parser.parse_args(argv)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        parser.error(f"--phases: unknown {unknown[0]!r} (known: {', '.join(PHASES)})" if unknown
                     else f"--phases: name at least one of {', '.join(PHASES)}")
    args.phases = tuple(p for p in PHASES if p in phases)
    if args.quick:
        args.runs, args.jobs = 1, 6
        args.phases = tuple(p for p in args.phases if p != "steady")
        if not args.phases:
            parser.error("--quick leaves the steady phase out: with it, --phases must name burst or cutoff")
    if args.worker_lost_timeout is None:
        args.worker_lost_timeout = args.grace
    if (args.runs < 1 or args.jobs < 1 or args.nodes < 1 or args.interval < 0 or args.grace <= 0
            or args.worker_lost_timeout <= 0):
        parser.error("--runs, --jobs and --nodes must be >= 1, --interval >= 0, --grace and "
                     "--worker-lost-timeout > 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
