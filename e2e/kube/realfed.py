"""A hub (`federator up --clusters DIR`, a process) on two REAL members (federator/dev/kube.py) that the
tests can fault (issue 25 items 3 and 5): member A is registered through a `TcpProxy` (federator/dev/
tcpproxy.py) that a test cuts and restores, member B directly; the fence agent of each (`federator agent`)
talks to its API server directly, so cutting the proxy cuts the hub off A and nothing else.

- both members run kube-scheduler's own gang scheduling (native) on A100 kwok nodes; A is cheaper, so the
  hub places a gang that fits both in A first;
- A's kube-apiserver keeps no watch cache for pods (`--watch-cache-sizes=pods#0`) and never compacts its
  etcd by itself (`--etcd-compaction-interval=0`): a watch of pods is served by etcd, so `compact_etcd()`
  while the hub is cut off makes the hub's next watch of pods a real 410 Gone (etcd's "required revision
  has been compacted"), and nothing else does;
- the hub's JSON log lines are collected (FederatorUp.logs): the reflector's "listed" line (cluster,
  resource, reason) counts its full LISTs.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from federator.dev.clusters import DevAgents, DevCluster, registration_for
from federator.dev.kube import KubeBinaries, KubeMember
from federator.dev.tcpproxy import TcpProxy
from federator.sim.profile import ClusterProfile, load_profile_file

from ..e2e_support import FederatorUp, kubectl

A, B = "kube-a", "kube-b"
#: a node with this label is no longer played by kwok (see FaultableMember)
UNMANAGED = "federator.dev/kwok-unmanaged"

_PROFILE = """\
apiVersion: sim.federator.dev/v1alpha1
kind: ClusterProfile
name: {name}
description: Two A100 nodes and a CPU node, Kubernetes' own gang scheduling (real member {name})
labels: {{tier: research, member: {name}}}
location: {{type: cloud, provider: gcp, region: europe-west4}}
network: {{fabric: ethernet, bandwidthGbps: 100}}
schedulers: [{{type: native}}]
kubelet: {{startDelaySeconds: 1, terminationSeconds: 1}}
kubernetesVersion: v1.36.0
costPerGpuHour: {cost}
nodePools:
  - {{name: a100, count: 2, cpu: "96", memory: 1000Gi, gpus: 8, gpuProduct: NVIDIA-A100-SXM4-80GB}}
  - {{name: cpu, count: 1, cpu: "32", memory: 128Gi}}
"""


@dataclass
class FaultableMember(KubeMember):
    """A KubeMember whose kube-apiserver gets extra flags, and whose etcd a test can compact."""

    extra_apiserver_args: tuple[str, ...] = field(default=())

    def _command(self, component: str) -> list[str]:
        args = super()._command(component)
        if component == "kube-apiserver":
            args += list(self.extra_apiserver_args)
        if component == "kwok":
            # kwok plays the kubelet of every node but those labelled UNMANAGED: a node so labelled stops
            # renewing its Lease, as a dead kubelet does, and the real node lifecycle controller takes over
            args = [a for a in args if a != "--manage-all-nodes=true"]
            args.append(f"--manage-nodes-with-label-selector=!{UNMANAGED}")
        return args

    def etcd_revision(self) -> int:
        return int(_etcd_post(self, "/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])

    def compact_etcd(self) -> int:
        """Compact the member's etcd at its current revision (physical: the history is gone); the revision."""
        revision = self.etcd_revision()
        _etcd_post(self, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision


def _etcd_post(member: KubeMember, path: str, body: dict[str, Any]) -> dict[str, Any]:
    etcd = member._etcd  # noqa: SLF001 - the member's own etcd, on loopback
    assert etcd is not None
    request = urllib.request.Request(f"http://{etcd.endpoint}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        loaded = json.loads(resp.read())
    assert isinstance(loaded, dict)
    return loaded


def profile(work: Path, name: str, *, cost: float) -> ClusterProfile:
    path = work / f"{name}.yaml"
    path.write_text(_PROFILE.format(name=name, cost=cost))
    return load_profile_file(path)


@dataclass
class RealFederation:
    """What the tests drive: the hub, the two members, A's proxy, the agents."""

    work: Path
    up: FederatorUp
    members: dict[str, FaultableMember]
    proxy: TcpProxy
    agents: DevAgents
    #: every hub replica (`up` is the first)
    ups: list[FederatorUp] = field(default_factory=list)

    def admin(self, cluster: str) -> Path:
        return self.members[cluster].admin_kubeconfig

    def member_json(self, cluster: str, *args: str) -> Any:
        done = kubectl(*args, "-o", "json", kubeconfig=self.admin(cluster), cache=self.work / "kc")
        return json.loads(done.stdout)

    def member_kubectl(self, cluster: str, *args: str, stdin: str | None = None, check: bool = True) -> str:
        done = subprocess.run(["kubectl", "--kubeconfig", str(self.admin(cluster)), "--request-timeout", "30s",
                               *args], input=stdin, capture_output=True, text=True, timeout=90)
        assert done.returncode == 0 or not check, done.stderr
        return done.stdout

    def hub_pods(self, cluster: str, job: str) -> list[dict[str, Any]]:
        """The pods the hub made for `job` in `cluster`, as the member's admin sees them."""
        items = self.member_json(cluster, "get", "pods", "-n", "default", "-l", f"federator.dev/job-name={job}")
        return list(items["items"])

    def job(self, name: str, namespace: str = "default") -> dict[str, Any]:
        loaded = self.up.json("get", "tj", name, "-n", namespace)
        assert isinstance(loaded, dict)
        return loaded

    def submit(self, document: dict[str, Any]) -> None:
        path = self.work / f"{document['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(document))
        self.up.kubectl("apply", "-f", str(path))

    def listed(self, cluster: str, resource: str | None = None) -> list[dict[str, Any]]:
        """The hub reflectors' full LISTs of `cluster` (each "listed" log line), oldest first."""
        return [r for r in list(self.up.logs) if r.get("event") == "listed" and r.get("cluster") == cluster
                and (resource is None or r.get("resource") == resource)]

    def log_lines(self, event: str, **fields: Any) -> list[dict[str, Any]]:
        return [r for r in list(self.up.logs) if r.get("event") == event
                and all(r.get(k) == v for k, v in fields.items())]


def gang(name: str, *, replicas: int, gpus: int, restart: str | None = None,
         tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    role: dict[str, Any] = {"name": "worker", "replicas": replicas, "template": {
        "image": "trainer:1.4", "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": gpus}}}
    if tolerations:
        role["template"]["tolerations"] = tolerations
    if restart is not None:
        role["restartPolicy"] = restart
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"roles": [role], "placement": {"network": "ethernet", "gpuModels": ["A100"]},
                     "failover": {"onClusterLoss": "requeue", "maxRequeues": 3}}}


@contextmanager
def real_federation(work: Path, binaries: KubeBinaries, *, hub_flags: tuple[str, ...] = (),
                    replicas: int = 1) -> Iterator[RealFederation]:
    """Start A (behind the proxy) and B, deploy/member's RBAC on both, the fence agents, then the hub
    (`replicas` of it, one after another, each with its own state directory: give them one --store)."""
    from federator.controllers.jobs import DEFAULT_HUB_ID

    kube = work / "kube"
    kube.mkdir(parents=True, exist_ok=True)
    registrations = work / "registrations"
    registrations.mkdir(exist_ok=True)
    with ExitStack() as stack:
        members = {
            A: FaultableMember(profile(work, A, cost=1.0), directory=kube, binaries=binaries,
                               extra_apiserver_args=("--watch-cache-sizes=pods#0", "--etcd-compaction-interval=0")),
            B: FaultableMember(profile(work, B, cost=5.0), directory=kube, binaries=binaries),
        }
        for member in members.values():
            stack.callback(member.stop)
            member.start()
            member.apply_member_rbac()
        proxy = TcpProxy(target_port=int(members[A].server.rsplit(":", 1)[1])).start()
        stack.callback(proxy.stop)
        # the hub reaches A through the proxy: its identity's kubeconfig with the proxy's address
        hub_a = kube / f"{A}-via-proxy.kubeconfig"
        document = yaml.safe_load(members[A].hub_kubeconfig.read_text())
        document["clusters"][0]["cluster"]["server"] = f"https://{proxy.address}"
        hub_a.write_text(yaml.safe_dump(document))
        hub_a.chmod(0o600)
        kubeconfigs = {A: hub_a, B: members[B].hub_kubeconfig}
        dev: list[DevCluster] = []
        for name, member in members.items():
            registration = registrations / f"{name}.yaml"
            registration.write_text(yaml.safe_dump(registration_for(member.profile, kubeconfig=kubeconfigs[name])))
            dev.append(DevCluster(name=name, server=member.server, kubeconfig=kubeconfigs[name],
                                  registration=registration, agent_kubeconfig=member.agent_kubeconfig,
                                  scheduler="native", network="ethernet", nodes=3, gpus=16, description=""))
        agents = DevAgents(dev, hub_identity=DEFAULT_HUB_ID, directory=kube)
        agents.start()
        stack.callback(agents.stop)
        ups = [FederatorUp(work / ("hub" if i == 0 else f"hub-{i}"), "--clusters", str(registrations), *hub_flags)
               for i in range(replicas)]
        try:
            for up in ups:
                up.start(timeout=180)
            yield RealFederation(work=work, up=ups[0], members=members, proxy=proxy, agents=agents, ups=ups)
        finally:
            failed = []
            for i, up in enumerate(ups):
                if up.process is None:
                    continue
                killed = up.process.returncode is not None  # a test killed it
                code = up.stop()
                # the hub's log beside the members' (a failure's evidence)
                (work / f"hub-{i}-log.jsonl").write_text("\n".join(json.dumps(r) for r in up.logs) + "\n")
                if code != 0 and not killed:
                    failed.append((i, code, up.other_stderr[-20:]))
            assert not failed, failed


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


def ready(fed: RealFederation, cluster: str) -> bool:
    """The hub's MemberCluster `cluster` is Ready."""
    mc = fed.up.json("get", "mc", cluster)
    return bool(conditions(mc).get("Ready", {}).get("status") == "True")


class CopyWatch:
    """Polls both members' pods of one job (admin, straight to each API server) until stopped; records every
    sample in which both members had a pod of it Running."""

    def __init__(self, fed: RealFederation, job: str) -> None:
        self.fed = fed
        self.job = job
        self.samples = 0
        self.both: list[dict[str, list[str]]] = []
        self.seen_running: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.errors: list[str] = []

    def __enter__(self) -> CopyWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        while not self._stop.is_set():
            running: dict[str, list[str]] = {}
            try:
                for cluster in (A, B):
                    running[cluster] = [p["metadata"]["name"] for p in self.fed.hub_pods(cluster, self.job)
                                        if (p.get("status") or {}).get("phase") == "Running"]
            except AssertionError as e:  # kubectl failed: this sample is unknown, not empty
                self.errors.append(str(e)[:200])
                continue
            self.samples += 1
            self.seen_running |= {c for c, names in running.items() if names}
            if all(running.values()):
                self.both.append(running)
            time.sleep(0.2)
