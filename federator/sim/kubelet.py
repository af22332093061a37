"""The simulated cluster's kubelets (all nodes in one loop) and the node
operations that faults use.

The loop lists and watches pods and nodes through `ObjectStorage` and keeps
one timer heap for every pod of the cluster (no task per pod):
- a bound pod turns Running after the profile's start delay (or the pod's
  `sim.federator.dev/start-delay-seconds` annotation);
- a Running pod turns Succeeded after `sim.federator.dev/duration-seconds`
  (else the profile's default run time, for pods whose restartPolicy is not
  Always), or its container exits non-zero after
  `sim.federator.dev/fail-after-seconds` with exit code
  `sim.federator.dev/exit-code` (default 1): state.terminated {exitCode,
  reason Error}; under restartPolicy Never the pod turns Failed, under
  OnFailure/Always the container restarts in place as a kubelet does
  (restartCount + 1, lastState.terminated, CrashLoopBackOff with the
  profile's doubling back-off, then running again); with
  `sim.federator.dev/exit-reason: OOMKilled` the kernel's OOM killer ends it
  instead (reason OOMKilled, exit code 137, as the kubelet reports it);
- a pod annotated `sim.federator.dev/image-pull-error` (a message) never
  starts: its containers wait with ErrImagePull ("Failed to pull image ...:
  <message>"), then ImagePullBackOff, tried again after the crash-loop
  back-off, and the pod stays Pending, as kube's image puller leaves it;
- GPUs are devices: a starting pod gets the node's lowest-numbered healthy free
  GPUs, named in `containerStatuses[].allocatedResourcesStatus` (kube's
  ResourceHealthStatus shape: {name nvidia.com/gpu, resources [{resourceID,
  health}]}); a pod that finds too few is rejected as kube's device manager
  rejects it (phase Failed, reason UnexpectedAdmissionError). When a node's
  first K GPUs go unhealthy (`set_unhealthy_gpus`), a running pod holding one
  crashes as a CUDA process on a lost GPU does: health Unhealthy, exit code
  134, reason Error, a message naming the GPU;
- a pod on a node that is not Ready is failed at once (phase Failed, reason
  NodeLost, DisruptionTarget=True reason DeletionByTaintManager): kube's
  taint-eviction controller would mark it so and delete it after the pod's
  unreachable toleration, and it would stay Terminating (phase Running)
  until the node returns or is deleted; the simulator compresses that into a
  terminal pod the hub can delete at once (a finished pod has no grace);
- the pods of a deleted Node are garbage-collected as kube's PodGC does with
  orphans (phase Failed, DisruptionTarget=True reason DeletionByPodGC, then
  deleted with no grace), at once instead of after its 40 s quarantine;
- a bound pod with a deletionTimestamp is removed after the profile's
  termination time (capped by its grace period), unless its node is down:
  a dead kubelet cannot finish a delete, so such pods stay Terminating, as
  in a real cluster; `sim.federator.dev/termination-seconds` on the pod is
  how long its containers take to exit after SIGTERM instead (a job saving
  a checkpoint): the pod stays Terminating, phase Running, that long, at
  most its grace period, as kube's kubelet keeps it until its containers
  exit or the grace ends (SIGKILL). Annotated on a terminating pod, it moves
  the exit earlier, never later: "0" is its process saving and exiting now;
- every Ready node's Lease in kube-node-lease is renewed every 10 s
  (`nodelease.NodeLeases`, one batched timer for all nodes);
- what each container prints (start, epochs and steps with a loss, checkpoints,
  exit), and `GET .../pods/NAME/log`, are in `containerlogs.py`: a function of
  the pod these timers write (startedAt, finishedAt, exit code) and the clock.

With a process runtime (the profile's `processRuntime`, federator/sim/processes.py), the pods are not
simulated but run: a starting pod's containers run as local processes (its podIP their own loopback
address; a pod whose env cannot be resolved waits with CreateContainerConfigError and is tried again),
their exit codes end the containers (the duration and fail-after annotations do not apply), a deleted
pod is removed once its processes are gone (SIGTERM, its grace period, SIGKILL), a pod failed by the
loop above (node lost, GPU) has its processes stopped, and the kubelet stopping stops them all. The
kubelet then also lists and watches Services, for the pods' cluster DNS names. Starts, restarts and
exits are checked against the stored pod, not against what a lagging watch last showed.

`fail_node`, `recover_node` and `set_unhealthy_gpus` change Node objects the
way the node lifecycle controller and the device plugin would; the loop
above does what follows for the pods. This module
never schedules pods and never imports anything of the hub.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.obs import METRICS
from federator.apis.quantity import QuantityError
from federator.apis.timestamps import format_time, parse_time
from federator.sim.fit import GPU, resource_units
from federator.sim.nodelease import NodeLeases, NodeState
from federator.sim.processes import ContainerConfigError, ContainerExit, PodExit
from federator.sim.profile import node_conditions
from federator.runtime.waits import wait_event

if TYPE_CHECKING:
    from federator.apiserver.registry import Registry, ResourceType
    from federator.apiserver.storage import ObjectStorage
    from federator.sim.processes import ProcessRuntime
    from federator.sim.profile import ClusterProfile

JSON = dict[str, Any]

ANNOTATION_DURATION = "sim.federator.dev/duration-seconds"
ANNOTATION_FAIL_AFTER = "sim.federator.dev/fail-after-seconds"
ANNOTATION_EXIT_CODE = "sim.federator.dev/exit-code"
ANNOTATION_START_DELAY = "sim.federator.dev/start-delay-seconds"
#: seconds its containers take to exit after SIGTERM (at most the grace period); the profile's terminationSeconds
#: when absent. Set on a terminating pod, it brings the exit forward ("0": now), never later.
ANNOTATION_TERMINATION = "sim.federator.dev/termination-seconds"
#: "OOMKilled": the failing container is killed by the kernel's OOM killer (reason OOMKilled, exit code 137)
ANNOTATION_EXIT_REASON = "sim.federator.dev/exit-reason"
#: a message: the pod's images cannot be pulled (ErrImagePull, then ImagePullBackOff; the pod stays Pending)
ANNOTATION_IMAGE_PULL_ERROR = "sim.federator.dev/image-pull-error"
#: what the kubelet reports for a container the OOM killer ended (128 + SIGKILL)
OOM_KILLED_REASON = "OOMKilled"
OOM_EXIT_CODE = 137
#: on a Node: how many of its GPUs the device plugin reports unhealthy
ANNOTATION_UNHEALTHY_GPUS = "sim.federator.dev/unhealthy-gpus"

UNREACHABLE_TAINT_KEY = "node.kubernetes.io/unreachable"
TERMINAL = frozenset({"Succeeded", "Failed"})

#: the pod condition kube's disruption-aware controllers write before they delete a pod (v1.DisruptionTarget)
DISRUPTION_TARGET = "DisruptionTarget"
#: pkg/controller/tainteviction addConditionAndDeletePod
TAINT_EVICTION_REASON = "DeletionByTaintManager"
TAINT_EVICTION_MESSAGE = "Taint manager: deleting due to NoExecute taint"
#: pkg/controller/podgc gcOrphaned
PODGC_REASON = "DeletionByPodGC"
PODGC_MESSAGE = "PodGC: node no longer exists"
#: what kubectl and the node controller call a pod of an unreachable node (pkg/util/node NodeUnreachablePodReason)
NODE_LOST_REASON = "NodeLost"
#: pkg/kubelet/lifecycle ErrorReasonUnexpected: the device manager could not allocate at admission
ADMISSION_ERROR_REASON = "UnexpectedAdmissionError"
#: the exit code of a training process on a GPU that went away (NCCL/CUDA abort: 128 + SIGABRT)
GPU_LOST_EXIT_CODE = 134

_START, _FINISH, _TERMINATE, _RESTART = 0, 1, 2, 3


def _stamp(when: datetime | None = None) -> str:
    return format_time(when or datetime.now(UTC))


def _seconds(annotations: Mapping[str, Any], key: str) -> float | None:
    """A non-negative number of seconds from an annotation; None if absent or
    malformed (a bad annotation must not crash the kubelet)."""
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    if not value >= 0 or value == float("inf"):
        return None
    return value


@dataclass(slots=True)
class _Pod:
    key: str
    namespace: str
    name: str
    uid: str
    node: str
    phase: str
    deleting: bool
    grace: float
    annotations: dict[str, Any]
    restart_policy: str
    #: when the running container started (its state.running.startedAt, else the pod's startTime)
    started_at: datetime | None
    scheduled: set[int]
    #: container name -> GPUs it requests
    gpu_requests: tuple[tuple[str, int], ...] = ()
    #: container name -> the GPU devices it holds (from allocatedResourcesStatus)
    devices: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: the highest restartCount among its containers
    restarts: int = 0
    #: its containers wait to restart (CrashLoopBackOff)
    backing_off: bool = False

    def device_ids(self) -> set[str]:
        return {d for _, ids in self.devices for d in ids}


def _hex(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def _pod_ip(uid: str) -> str:
    h = int(_hex(uid)[:8], 16)
    return f"10.{128 + (h >> 16) % 64}.{(h >> 8) & 255}.{h & 255 or 1}"


def _qos_class(pod: Mapping[str, Any]) -> str:
    requests_seen = limits_seen = False
    guaranteed = True
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = (c or {}).get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        requests_seen |= bool(req)
        limits_seen |= bool(lim)
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and str(req[r]) != str(lim[r])):
                guaranteed = False
    if not requests_seen and not limits_seen:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _container_statuses(pod: Mapping[str, Any], *, state: JSON, ready: bool, started: bool,
                        devices: Mapping[str, tuple[str, ...]] | None = None,
                        unhealthy: frozenset[str] = frozenset(), restarts: int = 0,
                        last_state: JSON | None = None) -> list[JSON]:
    uid = Body(pod).uid
    out = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        name = str((c or {}).get("name") or "main")
        image = str((c or {}).get("image") or "busybox")
        ref = image if "/" in image else f"docker.io/library/{image}"
        entry: JSON = {
            "name": name, "image": image, "imageID": f"{ref.split(':')[0]}@sha256:{_hex(image)[:64]}",
            "containerID": f"containerd://{_hex(uid, name, str(restarts))[:64]}", "ready": ready,
            "started": started, "restartCount": restarts, "state": state, "lastState": dict(last_state or {}),
        }
        held = (devices or {}).get(name)
        if held:
            entry["allocatedResourcesStatus"] = [{"name": GPU, "resources": [
                {"resourceID": d, "health": "Unhealthy" if d in unhealthy else "Healthy"} for d in held]}]
        out.append(entry)
    return out


def gpu_device_ids(node: str, count: int) -> list[str]:
    """The IDs the device plugin gives a node's GPUs, index 0 first (UUID-shaped, stable per node name)."""
    out = []
    for i in range(count):
        h = _hex(node, "gpu", str(i))
        out.append(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}")
    return out


def _gpu_requests(pod: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """(container, GPUs) for each container that asks for GPUs (limits, else requests; bad values count 0)."""
    out = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        if not isinstance(c, Mapping):
            continue
        resources = c.get("resources")
        raw = None
        for part in ("limits", "requests"):
            values = resources.get(part) if isinstance(resources, Mapping) else None
            if isinstance(values, Mapping) and GPU in values:
                raw = values[GPU]
                break
        if raw is None:
            continue
        try:
            count = resource_units(GPU, raw)
        except (QuantityError, TypeError, ValueError):
            continue
        if count > 0:
            out.append((str(c.get("name") or "main"), count))
    return tuple(out)


def _allocated_devices(status: Mapping[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(container, GPU device IDs) from containerStatuses[].allocatedResourcesStatus."""
    out = []
    for cs in status.get("containerStatuses") or []:
        if not isinstance(cs, Mapping):
            continue
        for rs in cs.get("allocatedResourcesStatus") or []:
            if not isinstance(rs, Mapping) or rs.get("name") != GPU:
                continue
            ids = tuple(str(r["resourceID"]) for r in rs.get("resources") or []
                        if isinstance(r, Mapping) and isinstance(r.get("resourceID"), str))
            if ids:
                out.append((str(cs.get("name") or ""), ids))
    return tuple(out)


def _container_started(status: Mapping[str, Any]) -> datetime | None:
    for cs in status.get("containerStatuses") or []:
        running = ((cs or {}).get("state") or {}).get("running") if isinstance(cs, Mapping) else None
        if isinstance(running, Mapping):
            started = parse_time(running.get("startedAt"))
            if started is not None:
                return started
    return parse_time(status.get("startTime"))


def _go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it ("10s", "2m40s", "5m0s", "500ms")."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, secs = divmod(seconds, 60)
    text = f"{secs:g}s"
    if minutes >= 60:
        hours, minutes = divmod(minutes, 60)
        return f"{int(hours)}h{int(minutes)}m{text}"
    return f"{int(minutes)}m{text}" if minutes else text


def _set_condition(status: JSON, type_: str, value: str, now: str, reason: str | None = None) -> None:
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != type_]
    cond: JSON = {"type": type_, "status": value, "lastProbeTime": None, "lastTransitionTime": now}
    if reason:
        cond["reason"] = reason
    conditions.append(cond)
    status["conditions"] = conditions


class _RestartNeeded(Exception):
    """A watch ended or expired (410): re-list everything."""


class Kubelet:
    """The kubelets of every node of one simulated cluster."""

    def __init__(self, *, storage: ObjectStorage, registry: Registry, cluster: ClusterProfile, logger: Any,
                 runtime: ProcessRuntime | None = None) -> None:
        pods = registry.get("", "v1", "pods")
        nodes = registry.get("", "v1", "nodes")
        if pods is None or nodes is None:
            raise RuntimeError("the simulator's registry must serve pods and nodes")
        self.pods_rt: ResourceType = pods
        self.nodes_rt: ResourceType = nodes
        self.storage = storage
        self.cluster = cluster
        self.timings = cluster.kubelet
        self.log = logger
        self.pods: dict[str, _Pod] = {}
        self.by_node: dict[str, set[str]] = {}
        self.node_ready: dict[str, bool] = {}
        self.node_ip: dict[str, str] = {}
        self.node_uid: dict[str, str] = {}
        self.leases = NodeLeases(storage=storage, registry=registry, cluster=cluster.name,
                                 logger=logger)
        self._heap: list[tuple[float, int, int, str, str]] = []
        self._seq = 0
        self._wake = asyncio.Event()
        self._restart = asyncio.Event()
        #: nodes that went down and whose pods must be failed
        self._lost_nodes: set[str] = set()
        #: nodes that were deleted and whose pods PodGC must fail and remove
        self._orphaned_nodes: set[str] = set()
        #: node -> (GPU capacity, how many of its first GPUs are unhealthy)
        self.node_gpus: dict[str, tuple[int, int]] = {}
        #: nodes whose running pods may hold an unhealthy GPU
        self._gpu_checks: set[str] = set()
        #: pod uid -> monotonic time this kubelet started it (precise run times)
        self._started: dict[str, float] = {}
        #: pod uid -> when its pending _FINISH timer is due (to bring it forward when the end moves earlier)
        self._finish_due: dict[str, float] = {}
        #: pod uid -> when its pending _TERMINATE timer is due (brought forward when its containers exit sooner)
        self._terminate_due: dict[str, float] = {}
        #: the process runtime (profile processRuntime): pods run as local processes; None simulates them
        self.runtime = runtime
        self.services_rt: ResourceType | None = registry.get("", "v1", "services") if runtime is not None else None
        #: pod uid -> how its processes ended, for the loop to write
        self._exits: dict[str, PodExit] = {}
        #: pod uids whose processes are being stopped before the pod is removed
        self._stopping: set[str] = set()

    # ------------------------------------------------------------ cache

    def _push(self, due: float, action: int, pod: _Pod) -> None:
        if action in pod.scheduled:
            return
        pod.scheduled.add(action)
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, action, pod.key, pod.uid))
        self._wake.set()

    def _push_sooner(self, due: float, action: int, pod: _Pod, dues: dict[str, float]) -> None:
        """`_push` of a timer that a later event may bring forward (`dues`: pod uid -> when it is due); the
        later timer, when it fires, finds the step done."""
        prior = dues.get(pod.uid)
        if prior is not None and due < prior:
            pod.scheduled.discard(action)
        if action not in pod.scheduled:
            dues[pod.uid] = due
        self._push(due, action, pod)

    def _push_finish(self, due: float, pod: _Pod) -> None:
        """The pod's end timer; brought forward when its end moved earlier, e.g. a
        `sim.federator.dev/fail-after-seconds` annotated on a running pod (a kwok stage fails it then; seen by
        e2e/kube/test_same_scenario.py)."""
        self._push_sooner(due, _FINISH, pod, self._finish_due)

    def _push_terminate(self, due: float, pod: _Pod) -> None:
        """A deleted pod's removal: when its containers exit (`sim.federator.dev/termination-seconds`, else
        the profile's termination time), at most its grace period after the delete; brought forward by a later
        annotation that ends it sooner, or a delete with a shorter grace."""
        self._push_sooner(due, _TERMINATE, pod, self._terminate_due)

    def apply_node(self, obj: Mapping[str, Any]) -> None:
        node = Body(obj)
        name = node.name
        status = obj.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        was = self.node_ready.get(name)
        self.node_ready[name] = ready
        self.node_uid[name] = node.uid
        for a in status.get("addresses") or []:
            if a.get("type") == "InternalIP":
                self.node_ip[name] = str(a.get("address"))
        try:
            capacity = resource_units(GPU, (status.get("capacity") or {}).get(GPU, "0"))
        except (QuantityError, TypeError, ValueError):
            capacity = 0
        try:
            bad = int(node.annotations.get(ANNOTATION_UNHEALTHY_GPUS) or 0)
        except (TypeError, ValueError):
            bad = 0
        gpus = (capacity, max(0, min(bad, capacity)))
        if self.node_gpus.get(name) != gpus:
            self.node_gpus[name] = gpus
            if gpus[1]:
                self._gpu_checks.add(name)
                self._wake.set()
        if not ready and was is not False:
            self._lost_nodes.add(name)
            self._wake.set()
        elif ready and was is False:
            self._lost_nodes.discard(name)
            for key in list(self.by_node.get(name, ())):
                pod = self.pods.get(key)
                if pod is not None:
                    self._plan(pod)

    def delete_node(self, name: str) -> None:
        self.node_ready.pop(name, None)
        self.node_uid.pop(name, None)
        self.node_gpus.pop(name, None)
        self.leases.node_deleted(name)
        self._lost_nodes.discard(name)
        if self.by_node.get(name):
            self._orphaned_nodes.add(name)
            self._wake.set()

    def lease_nodes(self) -> dict[str, NodeState]:
        """The nodes whose Leases the kubelets keep, and whether each kubelet is up (Ready)."""
        uids = self.node_uid
        return {name: NodeState(uid=uids.get(name, ""), ready=ready) for name, ready in self.node_ready.items()}

    def apply_pod(self, obj: Mapping[str, Any]) -> None:
        body = Body(obj)
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        namespace, name = body.namespace, body.name
        key = f"{namespace}/{name}"
        node = str(spec.get("nodeName") or "")
        old = self.pods.get(key)
        uid = body.uid
        if not node:
            if old is not None:
                self._forget(key)
            return
        if old is not None and (old.uid != uid or old.node != node):
            self._forget(key)
            old = None
        grace = body.metadata.get("deletionGracePeriodSeconds")
        pod = _Pod(
            key=key, namespace=namespace, name=name, uid=uid, node=node,
            phase=str(status.get("phase") or "Pending"), deleting=body.deleting,
            grace=float(grace) if isinstance(grace, (int, float)) and not isinstance(grace, bool) else 30.0,
            annotations=dict(body.annotations),
            restart_policy=str(spec.get("restartPolicy") or "Always"),
            started_at=_container_started(status),
            scheduled=old.scheduled if old is not None else set(),
            gpu_requests=_gpu_requests(obj),
            # the kubelet's own record wins (a real one checkpoints it); the status is read back only on a
            # (re)list, so a status write by someone else cannot move a pod's GPUs
            devices=old.devices if old is not None and old.devices else _allocated_devices(status),
            restarts=max((int(cs.get("restartCount") or 0) for cs in status.get("containerStatuses") or []
                          if isinstance(cs, Mapping) and isinstance(cs.get("restartCount"), int)), default=0),
            backing_off=any(
                (((cs.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff")
                for cs in status.get("containerStatuses") or [] if isinstance(cs, Mapping)),
        )
        self.pods[key] = pod
        self.by_node.setdefault(node, set()).add(key)
        if self.runtime is not None:
            self.runtime.observe_pod(obj)
            if pod.phase in TERMINAL and uid not in self._exits:
                self.runtime.stop(uid, grace=pod.grace)  # failed by someone else (a lost node, a GPU): killed
        self._plan(pod)

    def delete_pod(self, namespace: str, name: str) -> None:
        self._forget(f"{namespace}/{name}")

    def _forget(self, key: str) -> None:
        pod = self.pods.pop(key, None)
        if pod is not None:
            if self.runtime is not None:
                self.runtime.forget_pod(pod.uid)
                self.runtime.stop(pod.uid, grace=pod.grace)
                self._exits.pop(pod.uid, None)
                self._stopping.discard(pod.uid)
            self._started.pop(pod.uid, None)
            self._finish_due.pop(pod.uid, None)
            self._terminate_due.pop(pod.uid, None)
            keys = self.by_node.get(pod.node)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.by_node[pod.node]

    def _run_seconds(self, pod: _Pod) -> tuple[float, bool] | None:
        """(seconds after start, fails) for a pod's end, or None to run on (a process decides its own end)."""
        if self.runtime is not None:
            return None
        fail_after = _seconds(pod.annotations, ANNOTATION_FAIL_AFTER)
        duration = _seconds(pod.annotations, ANNOTATION_DURATION)
        if fail_after is not None and (duration is None or fail_after <= duration):
            return fail_after, True
        if duration is not None:
            return duration, False
        if self.timings.default_run_seconds is not None and pod.restart_policy != "Always":
            return self.timings.default_run_seconds, False
        return None

    def _plan(self, pod: _Pod) -> None:
        """Put the pod's next step on the timer heap (each step at most once)."""
        now = time.monotonic()
        ready = self.node_ready.get(pod.node, False)
        if pod.deleting:
            if ready and self.runtime is not None and pod.uid in self.runtime.runs:
                if pod.uid not in self._stopping:
                    # kill the processes (SIGTERM, SIGKILL after the grace period), then remove the pod
                    self._stopping.add(pod.uid)
                    key, uid = pod.key, pod.uid
                    self.runtime.stop(uid, grace=pod.grace, then=lambda: self._stopped(key, uid))
            elif ready:
                exits = _seconds(pod.annotations, ANNOTATION_TERMINATION)
                exits = self.timings.termination_seconds if exits is None else exits
                # a later event never postpones the exit planned (a delete with a shorter grace brings it forward)
                prior = self._terminate_due.get(pod.uid)
                due = now + min(exits, pod.grace)
                self._push_terminate(due if prior is None else min(due, prior), pod)
            return
        if not ready:
            if pod.phase not in TERMINAL:
                self._lost_nodes.add(pod.node)
                self._wake.set()
            return
        if pod.phase == "Pending":
            delay = _seconds(pod.annotations, ANNOTATION_START_DELAY)
            self._push(now + (self.timings.start_delay_seconds if delay is None else delay), _START, pod)
        elif pod.phase == "Running" and pod.backing_off:
            self._push(now + self._backoff(pod.restarts), _RESTART, pod)
        elif pod.phase == "Running":
            if pod.devices and self._holds_unhealthy_gpu(pod):
                self._gpu_checks.add(pod.node)
                self._wake.set()
            end = self._run_seconds(pod)
            if end is not None:
                started = self._started.get(pod.uid)
                if started is not None:
                    due = started + end[0]
                else:
                    # started before this kubelet (re)listed: the status's
                    # whole-second startTime is the best we know
                    elapsed = 0.0
                    if pod.started_at is not None:
                        elapsed = max(0.0, (datetime.now(UTC) - pod.started_at).total_seconds())
                    due = now + max(0.0, end[0] - elapsed)
                self._push_finish(due, pod)

    def _stopped(self, key: str, uid: str) -> None:
        """A deleted pod's processes are gone: it may be removed now."""
        self._stopping.discard(uid)
        pod = self.pods.get(key)
        if pod is not None and pod.uid == uid and pod.deleting:
            self._push(time.monotonic(), _TERMINATE, pod)

    def _on_exit(self, result: PodExit) -> None:
        """A pod's processes ended (the runtime's callback): the loop writes it."""
        self._exits[result.uid] = result
        self._wake.set()

    async def _collect_exits(self) -> None:
        if not self._exits:
            return
        exits, self._exits = self._exits, {}
        by_uid = {p.uid: p for p in self.pods.values()}
        for uid, result in exits.items():
            assert self.runtime is not None
            self.runtime.forget_run(uid)
            pod = by_uid.get(uid)
            # the stored pod decides (_finish checks it): what this kubelet saw may be a watch event behind
            if pod is None or pod.deleting or pod.phase in TERMINAL:
                continue
            failure = result.first_failure
            try:
                await self._finish(pod, failed=failure is not None,
                                   exit_code=failure.exit_code if failure is not None else None,
                                   message=failure.message if failure is not None and failure.message else None,
                                   exits=result.containers)
            except ApiError as e:
                if e.code != 404:
                    self.log.info("kubelet write failed", pod=pod.key, code=e.code, message=e.message)

    # ------------------------------------------------------------ informers

    async def _sync(self) -> list[tuple[ResourceType, str]]:
        known = set(self.node_ready) | self._orphaned_nodes
        self.pods.clear()
        self.by_node.clear()
        self.node_ready.clear()
        self.node_uid.clear()
        self.node_gpus.clear()
        self._heap.clear()
        self._finish_due.clear()
        self._lost_nodes.clear()
        self._gpu_checks.clear()
        nodes = await self.storage.list(self.nodes_rt)
        for obj in nodes.items:
            self.apply_node(obj)
        self.leases.nodes_listed(self.node_ready)
        self._lost_nodes = {n for n, ok in self.node_ready.items() if not ok}
        # nodes deleted while the watch was down: their pods are orphans (a node never seen is not: PodGC
        # would wait out its quarantine, and the simulator leaves such pods alone)
        self._orphaned_nodes = known - set(self.node_ready)
        watches = [(self.nodes_rt, nodes.resource_version)]
        if self.runtime is not None:
            self.runtime.reset_dns()
            if self.services_rt is not None:
                services = await self.storage.list(self.services_rt)
                for obj in services.items:
                    self.runtime.observe_service(obj)
                watches.append((self.services_rt, services.resource_version))
        pods = await self.storage.list(self.pods_rt)
        for obj in pods.items:
            self.apply_pod(obj)
        if self.runtime is not None:
            for pod in self.pods.values():
                if pod.phase == "Running" and not pod.backing_off and not pod.deleting \
                        and pod.uid not in self.runtime.runs and pod.uid not in self._exits:
                    # its processes are gone with the kubelet that ran them (the simulator restarted)
                    self._exits[pod.uid] = PodExit(uid=pod.uid, containers=(ContainerExit(
                        name="", exit_code=137, reason="Error",
                        message="the container's process is gone: the kubelet that ran it stopped"),))
        return [*watches, (self.pods_rt, pods.resource_version)]

    async def _watch(self, rt: ResourceType, resource_version: str) -> None:
        try:
            async for ev in self.storage.watch(rt, resource_version=resource_version):
                if ev.type == "BOOKMARK":
                    continue
                meta = Body(ev.object)
                if rt is self.services_rt and self.runtime is not None:
                    if ev.type == "DELETED":
                        self.runtime.forget_service(meta.namespace, meta.name)
                    else:
                        self.runtime.observe_service(ev.object)
                    self.runtime.refresh_hosts()
                    continue
                if rt is self.nodes_rt:
                    if ev.type == "DELETED":
                        self.delete_node(meta.name)
                    else:
                        self.apply_node(ev.object)
                elif ev.type == "DELETED":
                    self.delete_pod(meta.namespace, meta.name)
                else:
                    self.apply_pod(ev.object)
                if self.runtime is not None:
                    self.runtime.refresh_hosts()
        except ApiError as e:
            self.log.info("kubelet watch ended; re-listing", resource=rt.plural, code=e.code, reason=e.reason)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - re-list, and say why
            self.log.warning("kubelet watch failed; re-listing", resource=rt.plural, error=str(e))
        self._restart.set()
        self._wake.set()

    # ------------------------------------------------------------ loop

    async def run(self, stop: asyncio.Event) -> None:
        leases = asyncio.create_task(self._keep_leases(stop), name=f"sim-kubelet-leases-{self.cluster.name}")
        try:
            await self._run(stop)
        finally:
            if self.runtime is not None:
                await self.runtime.shutdown()  # no process outlives its kubelet
            leases.cancel()
            try:
                await leases
            except asyncio.CancelledError:
                pass

    async def _keep_leases(self, stop: asyncio.Event) -> None:
        try:
            await self.leases.run(stop, self.lease_nodes)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - node leases must not take the kubelets down; say why they stopped
            self.log.error("node lease renewal failed", error=f"{type(e).__name__}: {e}", exc_info=True)

    async def _run(self, stop: asyncio.Event) -> None:
        attempt = 0
        while not stop.is_set():
            tasks: list[asyncio.Task[None]] = []
            try:
                watches = await self._sync()
                self._restart.clear()
                for rt, rv in watches:
                    tasks.append(asyncio.create_task(self._watch(rt, rv),
                                                     name=f"sim-kubelet-watch-{self.cluster.name}-{rt.plural}"))
                attempt = 0
                await self._serve(stop)
            except _RestartNeeded:
                continue
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - keep the kubelet alive; back off and re-list
                attempt += 1
                delay = min(10.0, 0.1 * 2 ** min(attempt, 8)) * random.uniform(0.5, 1.0)
                self.log.warning("kubelet loop failed; re-listing after backoff", error=f"{type(e).__name__}: {e}",
                                 wait_seconds=round(delay, 2), attempt=attempt)
                await wait_event(stop, delay)
            finally:
                for t in tasks:
                    t.cancel()
                for t in tasks:
                    try:
                        await t
                    except asyncio.CancelledError:
                        pass

    async def _serve(self, stop: asyncio.Event) -> None:
        stop_wait = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                if self._restart.is_set():
                    raise _RestartNeeded()
                await self._fail_lost_nodes()
                await self._collect_orphans()
                await self._fail_unhealthy_gpus()
                await self._collect_exits()
                await self._fire_due()
                if self.runtime is not None:
                    self.runtime.refresh_hosts()
                if self._restart.is_set():
                    raise _RestartNeeded()
                timeout = None
                if self._heap:
                    timeout = max(0.0, self._heap[0][0] - time.monotonic())
                if timeout == 0.0 or self._lost_nodes or self._orphaned_nodes or self._gpu_checks or self._exits:
                    await asyncio.sleep(0)
                    continue
                self._wake.clear()
                wake_wait = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait({stop_wait, wake_wait}, timeout=timeout,
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    wake_wait.cancel()
        finally:
            stop_wait.cancel()

    async def _fire_due(self) -> None:
        now = time.monotonic()
        fired = 0
        t0 = time.perf_counter()
        while self._heap and self._heap[0][0] <= now and fired < 1000:
            _, _, action, key, uid = heapq.heappop(self._heap)
            pod = self.pods.get(key)
            if pod is None or pod.uid != uid:
                continue
            pod.scheduled.discard(action)
            fired += 1
            try:
                if action == _TERMINATE:
                    await self._terminate(pod)
                elif pod.deleting:
                    continue
                elif action == _START and pod.phase == "Pending" and self.node_ready.get(pod.node):
                    await self._start(pod)
                elif action == _RESTART and pod.phase == "Running" and pod.backing_off \
                        and self.node_ready.get(pod.node):
                    await self._restart_containers(pod)
                elif action == _FINISH and pod.phase == "Running" and not pod.backing_off \
                        and self.node_ready.get(pod.node):
                    end = self._run_seconds(pod)
                    started = self._started.get(pod.uid)
                    if end is not None and started is not None and time.monotonic() < started + end[0]:
                        self._push_finish(started + end[0], pod)  # set for a run its containers restarted from
                    elif end is not None:
                        await self._finish(pod, failed=end[1])
            except ApiError as e:
                if e.code != 404:
                    self.log.info("kubelet write failed", pod=key, code=e.code, message=e.message)
        if fired:
            METRICS.loop_phase_seconds.labels(loop="sim-kubelet", phase="timers").observe(time.perf_counter() - t0)

    # ------------------------------------------------------------ devices

    def _unhealthy_ids(self, node: str) -> frozenset[str]:
        capacity, bad = self.node_gpus.get(node, (0, 0))
        return frozenset(gpu_device_ids(node, capacity)[:bad])

    def _holds_unhealthy_gpu(self, pod: _Pod) -> bool:
        return bool(pod.device_ids() & self._unhealthy_ids(pod.node))

    def _free_healthy_gpus(self, node: str, *, exclude: str) -> list[str]:
        """The node's healthy GPUs no live pod holds, lowest index first."""
        capacity, bad = self.node_gpus.get(node, (0, 0))
        held: set[str] = set()
        for key in self.by_node.get(node, ()):
            other = self.pods.get(key)
            if other is not None and other.key != exclude and other.phase not in TERMINAL:
                held |= other.device_ids()
        return [d for d in gpu_device_ids(node, capacity)[bad:] if d not in held]

    def _backoff(self, restarts: int) -> float:
        base = self.timings.crash_loop_backoff_seconds
        return float(min(base * 2 ** max(0, restarts - 1), base * 30))

    # ------------------------------------------------------------ pod transitions

    async def _write_status(self, pod: _Pod, change: Callable[[JSON], JSON | None]) -> JSON | None:
        def mutate(obj: JSON) -> JSON | None:
            if Body(obj).uid != pod.uid or (obj.get("spec") or {}).get("nodeName") != pod.node:
                return None
            return change(obj)

        written = await self.storage.guaranteed_update(self.pods_rt, namespace=pod.namespace, name=pod.name,
                                                       mutate=mutate, subresource="status")
        if written is not None:
            self.apply_pod(written)
        return written

    async def _start(self, pod: _Pod) -> None:
        now_dt = datetime.now(UTC)
        now = _stamp(now_dt)
        pull_error = pod.annotations.get(ANNOTATION_IMAGE_PULL_ERROR)
        if isinstance(pull_error, str) and pull_error:
            await self._image_pull_failed(pod, pull_error[:1024])
            return
        host_ip = self.node_ip.get(pod.node, "10.0.0.1")
        wanted = sum(n for _, n in pod.gpu_requests)
        free = self._free_healthy_gpus(pod.node, exclude=pod.key) if wanted else []
        if wanted > len(free):
            await self._reject(pod, ADMISSION_ERROR_REASON,
                               f"Allocate failed due to requested number of devices unavailable for {GPU}. "
                               f"Requested: {wanted}, Available: {len(free)}, which is unexpected")
            return
        devices: dict[str, tuple[str, ...]] = {}
        for container, count in pod.gpu_requests:
            devices[container], free = tuple(free[:count]), free[count:]
        ip = _pod_ip(pod.uid)
        if self.runtime is not None:
            ip = self.runtime.pod_ip(pod.namespace, pod.name)
            if not await self._start_processes(pod, ip=ip):
                return

        def change(obj: JSON) -> JSON | None:
            status = obj.setdefault("status", {})
            if status.get("phase") not in (None, "", "Pending"):
                return None
            status["phase"] = "Running"
            status["hostIP"] = host_ip
            status["hostIPs"] = [{"ip": host_ip}]
            status["podIP"] = ip
            status["podIPs"] = [{"ip": ip}]
            status["startTime"] = now
            status.setdefault("qosClass", _qos_class(obj))
            for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"):
                _set_condition(status, t, "True", now)
            status["containerStatuses"] = _container_statuses(
                obj, state={"running": {"startedAt": now}}, ready=True, started=True, devices=devices)
            return obj

        self._started[pod.uid] = time.monotonic()
        try:
            written = await self._write_status(pod, change)
        except BaseException:
            if self.runtime is not None:
                self.runtime.stop(pod.uid, grace=0)
            raise
        if written is None and self.runtime is not None:
            self.runtime.stop(pod.uid, grace=0)  # the pod changed meanwhile: its processes must not run on

    async def _image_pull_failed(self, pod: _Pod, error: str) -> None:
        """kube's image puller: the containers wait with ErrImagePull, then ImagePullBackOff (the pull tried
        again after the back-off); the pod stays Pending."""
        def change(obj: JSON) -> JSON | None:
            status = obj.setdefault("status", {})
            if status.get("phase") not in (None, "", "Pending"):
                return None
            before = status.get("containerStatuses") or [{}]
            pulled_once = any(isinstance(cs, dict) and ((cs.get("state") or {}).get("waiting") or {}).get("reason")
                              == "ErrImagePull" for cs in before)
            status.setdefault("qosClass", _qos_class(obj))
            statuses = _container_statuses(obj, state={}, ready=False, started=False)
            images = {c.get("name"): c.get("image") for c in (obj.get("spec") or {}).get("containers") or []
                      if isinstance(c, dict)}
            for cs in statuses:
                image = images.get(cs["name"]) or ""
                cs["state"] = {"waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
                               } if pulled_once else {"waiting": {
                                   "reason": "ErrImagePull", "message": f'Failed to pull image "{image}": {error}'}}
            status["containerStatuses"] = statuses
            return obj

        await self._write_status(pod, change)
        current = self.pods.get(pod.key)
        if current is not None and current.uid == pod.uid:
            self._push(time.monotonic() + max(1.0, self.timings.crash_loop_backoff_seconds), _START, current)

    async def _start_processes(self, pod: _Pod, *, ip: str) -> bool:
        """Start the pod's processes (process runtime); False when they cannot be set up from the pod: kube's
        CreateContainerConfigError, written as its containers' waiting state, and the start is tried again."""
        assert self.runtime is not None
        try:
            obj = await self.storage.get(self.pods_rt, namespace=pod.namespace, name=pod.name)
            if Body(obj).uid != pod.uid or (obj.get("status") or {}).get("phase") not in (None, "", "Pending"):
                return False  # what this kubelet saw was older than the pod: it started already
            obj = {**obj, "status": {**(obj.get("status") or {}), "hostIP": self.node_ip.get(pod.node, "")}}
            await self.runtime.start(obj, ip=ip, restart=pod.restarts, on_exit=self._on_exit)
            return True
        except ContainerConfigError as e:
            message = str(e)
        self.runtime.release_address(pod.namespace, pod.name)

        def change(obj: JSON) -> JSON | None:
            status = obj.setdefault("status", {})
            if status.get("phase") not in (None, "", "Pending"):
                return None
            waiting = {"waiting": {"reason": "CreateContainerConfigError", "message": message}}
            if all(isinstance(cs, dict) and cs.get("state") == waiting for cs in status.get("containerStatuses") or [{}]):
                return None
            status.setdefault("qosClass", _qos_class(obj))
            status["containerStatuses"] = _container_statuses(obj, state=waiting, ready=False, started=False)
            return obj

        self.log.info("container config error", pod=pod.key, message=message)
        await self._write_status(pod, change)
        current = self.pods.get(pod.key)
        if current is not None and current.uid == pod.uid:
            self._push(time.monotonic() + max(1.0, self.timings.crash_loop_backoff_seconds), _START, current)
        return False

    async def _reject(self, pod: _Pod, reason: str, message: str) -> None:
        """kubelet rejectPod: the pod fails admission and never starts."""
        def change(obj: JSON) -> JSON | None:
            status = obj.setdefault("status", {})
            if status.get("phase") not in (None, "", "Pending"):
                return None
            status["phase"] = "Failed"
            status["reason"] = reason
            status["message"] = f"Pod was rejected: {message}"
            status.setdefault("qosClass", _qos_class(obj))
            return obj

        await self._write_status(pod, change)

    def _exit_code(self, pod: _Pod) -> int:
        raw = pod.annotations.get(ANNOTATION_EXIT_CODE, 1)
        try:
            exit_code = int(raw)
        except (TypeError, ValueError):
            exit_code = 1
        if exit_code == 0 or not -(2**31) <= exit_code < 2**31:
            exit_code = 1
        return exit_code

    async def _finish(self, pod: _Pod, *, failed: bool, exit_code: int | None = None,
                      message: str | None = None, exits: tuple[ContainerExit, ...] = ()) -> None:
        """The containers exit: 0 (Succeeded), or non-zero (`exit_code`, else the pod's annotation): the pod
        fails under restartPolicy Never, its containers back off and restart under OnFailure/Always."""
        now = _stamp()
        oom = failed and exit_code is None and pod.annotations.get(ANNOTATION_EXIT_REASON) == OOM_KILLED_REASON
        if failed and exit_code is None:
            exit_code = OOM_EXIT_CODE if oom else self._exit_code(pod)
        code = exit_code if failed and exit_code is not None else 0
        restart = failed and pod.restart_policy in ("OnFailure", "Always")
        devices = dict(pod.devices)
        unhealthy = self._unhealthy_ids(pod.node)
        backoff = self._backoff(pod.restarts + 1)

        def change(obj: JSON) -> JSON | None:
            status = obj.setdefault("status", {})
            if status.get("phase") != "Running":
                return None
            if exits and _backing_off(status):
                return None  # a process run's end, and the containers already wait to restart
            previous = {cs.get("name"): cs.get("lastState") for cs in status.get("containerStatuses") or []
                        if isinstance(cs, dict) and isinstance(cs.get("lastState"), dict)}
            # the stored count (what this kubelet saw may be a watch event behind it)
            restarted = max((cs["restartCount"] for cs in status.get("containerStatuses") or []
                             if isinstance(cs, dict) and isinstance(cs.get("restartCount"), int)), default=pod.restarts)
            started = status.get("startTime") or now
            for cs in status.get("containerStatuses") or []:
                running = ((cs or {}).get("state") or {}).get("running") if isinstance(cs, dict) else None
                if isinstance(running, dict) and running.get("startedAt"):
                    started = running["startedAt"]
                    break
            term: JSON = {"exitCode": code, "reason": (OOM_KILLED_REASON if oom else "Error") if failed else "Completed",
                          "startedAt": started,
                          "finishedAt": now, "containerID": ""}
            if message:
                term["message"] = message

            def own(name: str) -> JSON:
                """A container's own end (process runtime), else the pod's."""
                found = next((e for e in exits if e.name == name), None)
                if found is None:
                    return term
                mine: JSON = {"exitCode": found.exit_code, "reason": found.reason,
                              "startedAt": found.started_at or started, "finishedAt": found.finished_at or now,
                              "containerID": ""}
                if found.message:
                    mine["message"] = found.message
                return mine
            if restart:
                restarts = restarted + 1
                statuses = _container_statuses(obj, state={}, ready=False, started=False, devices=devices,
                                               unhealthy=unhealthy, restarts=restarts)
                for cs in statuses:
                    cs["lastState"] = {"terminated": {**own(cs["name"]), "containerID": cs["containerID"]}}
                    cs["state"] = {"waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {_go_duration(backoff)} restarting failed container={cs['name']} "
                                   f"pod={pod.name}_{pod.namespace}({pod.uid})"}}
                status["containerStatuses"] = statuses
                _set_condition(status, "Ready", "False", now, "ContainersNotReady")
                _set_condition(status, "ContainersReady", "False", now, "ContainersNotReady")
                return obj
            status["phase"] = "Failed" if failed else "Succeeded"
            statuses = _container_statuses(obj, state={}, ready=False, started=False, devices=devices,
                                           unhealthy=unhealthy, restarts=restarted)
            for cs in statuses:
                cs["state"] = {"terminated": {**own(cs["name"]), "containerID": cs["containerID"]}}
                if exits and previous.get(cs["name"]):
                    cs["lastState"] = previous[cs["name"]]  # a restarted process's last run, as kube keeps it
            status["containerStatuses"] = statuses
            _set_condition(status, "Ready", "False", now, "PodCompleted" if not failed else "PodFailed")
            _set_condition(status, "ContainersReady", "False", now, "PodCompleted" if not failed else "PodFailed")
            return obj

        await self._write_status(pod, change)

    async def _restart_containers(self, pod: _Pod) -> None:
        """The back-off is over: the containers run again (same devices; the pod's startTime stays)."""
        if self.runtime is not None and pod.uid not in self.runtime.runs:
            try:
                obj = await self.storage.get(self.pods_rt, namespace=pod.namespace, name=pod.name)
                if Body(obj).uid != pod.uid or (obj.get("status") or {}).get("phase") != "Running" \
                        or not _backing_off(obj.get("status") or {}):
                    return  # what this kubelet saw was older than the pod: nothing to restart
                ip = str((obj.get("status") or {}).get("podIP") or self.runtime.pod_ip(pod.namespace, pod.name))
                await self.runtime.start(obj, ip=ip, restart=pod.restarts, on_exit=self._on_exit)
            except ContainerConfigError as e:
                self._on_exit(PodExit(uid=pod.uid, containers=(ContainerExit(
                    name="", exit_code=128, reason="StartError", message=str(e)),)))  # ends this run at once
        now = _stamp()
        devices = dict(pod.devices)
        unhealthy = self._unhealthy_ids(pod.node)

        def change(obj: JSON) -> JSON | None:
            status = obj.setdefault("status", {})
            if status.get("phase") != "Running":
                return None
            last = next((cs.get("lastState") for cs in status.get("containerStatuses") or []
                         if isinstance(cs, dict) and cs.get("lastState")), None)
            status["containerStatuses"] = _container_statuses(
                obj, state={"running": {"startedAt": now}}, ready=True, started=True, devices=devices,
                unhealthy=unhealthy, restarts=pod.restarts, last_state=last if isinstance(last, dict) else None)
            _set_condition(status, "Ready", "True", now)
            _set_condition(status, "ContainersReady", "True", now)
            return obj

        self._started[pod.uid] = time.monotonic()
        await self._write_status(pod, change)

    async def _terminate(self, pod: _Pod) -> None:
        if not self.node_ready.get(pod.node):
            return  # a dead kubelet cannot finish the delete
        try:
            await self.storage.delete(self.pods_rt, namespace=pod.namespace, name=pod.name, grace_period_seconds=0,
                                      precondition_uid=pod.uid)
        except ApiError as e:
            if e.code not in (404, 409):
                raise

    async def _fail_lost_nodes(self) -> None:
        if not self._lost_nodes:
            return
        lost, self._lost_nodes = self._lost_nodes, set()
        now = _stamp()
        for node in sorted(lost):
            if self.node_ready.get(node, False):
                continue
            for key in sorted(self.by_node.get(node, ())):
                pod = self.pods.get(key)
                if pod is None or pod.phase in TERMINAL:
                    continue
                message = f"Node {node} which was running pod {pod.name} is unresponsive"
                devices = dict(pod.devices)

                def change(obj: JSON, message: str = message, devices: dict[str, tuple[str, ...]] = devices,
                           restarts: int = pod.restarts) -> JSON | None:
                    status = obj.setdefault("status", {})
                    if status.get("phase") in TERMINAL:
                        return None
                    was_running = status.get("phase") == "Running"
                    status["phase"] = "Failed"
                    status["reason"] = NODE_LOST_REASON
                    status["message"] = message
                    _set_condition(status, "Ready", "False", now, "PodFailed")
                    _set_condition(status, "ContainersReady", "False", now, "PodFailed")
                    _set_disruption(status, TAINT_EVICTION_REASON, TAINT_EVICTION_MESSAGE, now)
                    term = {"terminated": {"exitCode": 137, "reason": NODE_LOST_REASON, "finishedAt": now,
                                           "startedAt": status.get("startTime") or now}}
                    statuses = _container_statuses(obj, state=term, ready=False, started=False, devices=devices,
                                                   restarts=restarts) if was_running \
                        else _container_statuses(obj, state={"waiting": {"reason": NODE_LOST_REASON}}, ready=False,
                                                 started=False)
                    status["containerStatuses"] = statuses
                    return obj

                try:
                    await self._write_status(pod, change)
                except ApiError as e:
                    if e.code != 404:
                        self.log.info("could not fail pod of lost node", pod=key, node=node, message=e.message)

    async def _collect_orphans(self) -> None:
        """PodGC's gcOrphaned for the pods of deleted nodes: Failed with DisruptionTarget (DeletionByPodGC),
        then deleted with no grace."""
        if not self._orphaned_nodes:
            return
        orphaned, self._orphaned_nodes = self._orphaned_nodes, set()
        now = _stamp()
        for node in sorted(orphaned):
            if node in self.node_ready:
                continue  # it came back under the same name
            for key in sorted(self.by_node.get(node, ())):
                pod = self.pods.get(key)
                if pod is None:
                    continue

                def change(obj: JSON) -> JSON | None:
                    status = obj.setdefault("status", {})
                    if status.get("phase") in TERMINAL:
                        return None
                    status["phase"] = "Failed"
                    _set_disruption(status, PODGC_REASON, PODGC_MESSAGE, now)
                    return obj

                try:
                    await self._write_status(pod, change)
                    await self.storage.delete(self.pods_rt, namespace=pod.namespace, name=pod.name,
                                              grace_period_seconds=0, precondition_uid=pod.uid)
                except ApiError as e:
                    if e.code not in (404, 409):
                        self.log.info("could not collect pod of deleted node", pod=key, node=node,
                                      message=e.message)

    async def _fail_unhealthy_gpus(self) -> None:
        """A running container on a GPU that went unhealthy crashes, as a CUDA process on a lost GPU does."""
        if not self._gpu_checks:
            return
        checks, self._gpu_checks = self._gpu_checks, set()
        for node in sorted(checks):
            unhealthy = self._unhealthy_ids(node)
            if not unhealthy or not self.node_ready.get(node, False):
                continue
            for key in sorted(self.by_node.get(node, ())):
                pod = self.pods.get(key)
                if pod is None or pod.phase != "Running" or pod.backing_off:
                    continue
                bad = sorted(pod.device_ids() & unhealthy)
                if not bad:
                    continue
                message = (f"CUDA error: unspecified launch failure: GPU {', '.join(bad)} became unhealthy "
                           f"(Xid 79: GPU has fallen off the bus)")
                try:
                    await self._finish(pod, failed=True, exit_code=GPU_LOST_EXIT_CODE, message=message)
                except ApiError as e:
                    if e.code != 404:
                        self.log.info("could not fail pod on an unhealthy GPU", pod=key, node=node,
                                      message=e.message)


def _backing_off(status: Mapping[str, Any]) -> bool:
    return any(isinstance(cs, Mapping) and ((cs.get("state") or {}).get("waiting") or {}).get("reason")
               == "CrashLoopBackOff" for cs in status.get("containerStatuses") or [])


def _set_disruption(status: JSON, reason: str, message: str, now: str) -> None:
    """kube's apipod.UpdatePodCondition with a DisruptionTarget=True condition."""
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != DISRUPTION_TARGET]
    conditions.append({"type": DISRUPTION_TARGET, "status": "True", "reason": reason, "message": message,
                       "lastProbeTime": None, "lastTransitionTime": now})
    status["conditions"] = conditions


async def run_kubelet(
    *,
    storage: ObjectStorage,
    registry: Registry,
    cluster: ClusterProfile,
    stop: asyncio.Event,
    logger: Any,
    runtime: ProcessRuntime | None = None,
) -> None:
    """Run the kubelets of every node of the cluster until `stop` is set (with `runtime`, pods run as local
    processes: federator/sim/processes.py)."""
    await Kubelet(storage=storage, registry=registry, cluster=cluster, logger=logger, runtime=runtime).run(stop)


# ---------------------------------------------------------------- node operations (faults)


def _nodes_rt(registry: Registry) -> ResourceType:
    rt = registry.get("", "v1", "nodes")
    if rt is None:
        raise RuntimeError("the registry does not serve nodes")
    return rt


async def fail_node(storage: ObjectStorage, registry: Registry, *, node: str) -> JSON | None:
    """The node's kubelet stops reporting: Ready=Unknown (NodeStatusUnknown)
    and the unreachable taints, as the node lifecycle controller writes them.
    The kubelet loop then fails the node's pods. Raises ApiError 404."""
    rt = _nodes_rt(registry)
    now = _stamp()

    def taint(obj: JSON) -> JSON | None:
        spec = obj.setdefault("spec", {})
        taints = [t for t in spec.get("taints") or [] if t.get("key") != UNREACHABLE_TAINT_KEY]
        taints += [{"key": UNREACHABLE_TAINT_KEY, "effect": "NoSchedule", "timeAdded": now},
                   {"key": UNREACHABLE_TAINT_KEY, "effect": "NoExecute", "timeAdded": now}]
        spec["taints"] = taints
        return obj

    def unknown(obj: JSON) -> JSON | None:
        status = obj.setdefault("status", {})
        status["conditions"] = node_conditions(ready=None, now=now)
        return obj

    await storage.guaranteed_update(rt, namespace=None, name=node, mutate=taint)
    return await storage.guaranteed_update(rt, namespace=None, name=node, mutate=unknown,
                                           subresource="status" if rt.status_subresource else None)


async def recover_node(storage: ObjectStorage, registry: Registry, *, node: str) -> JSON | None:
    """The node's kubelet reports again: Ready=True, unreachable taints gone."""
    rt = _nodes_rt(registry)
    now = _stamp()

    def untaint(obj: JSON) -> JSON | None:
        spec = obj.setdefault("spec", {})
        taints = spec.get("taints") or []
        kept = [t for t in taints if t.get("key") != UNREACHABLE_TAINT_KEY]
        if len(kept) == len(taints):
            return None
        if kept:
            spec["taints"] = kept
        else:
            spec.pop("taints", None)
        return obj

    def ready(obj: JSON) -> JSON | None:
        status = obj.setdefault("status", {})
        status["conditions"] = node_conditions(ready=True, now=now)
        return obj

    await storage.guaranteed_update(rt, namespace=None, name=node, mutate=untaint)
    return await storage.guaranteed_update(rt, namespace=None, name=node, mutate=ready,
                                           subresource="status" if rt.status_subresource else None)


async def set_unhealthy_gpus(storage: ObjectStorage, registry: Registry, *, node: str, count: int) -> JSON | None:
    """The device plugin reports the node's first `count` GPUs (device index
    0..count-1) unhealthy: allocatable nvidia.com/gpu = capacity - count; the
    kubelet loop then crashes the running pods that hold one of them (the
    others keep running). count 0 heals them. Raises ValueError for a count
    outside 0..capacity, ApiError 404 for an unknown node."""
    rt = _nodes_rt(registry)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"unhealthy GPU count must be an integer >= 0, not {count!r}")
    current = await storage.get(rt, namespace=None, name=node)
    try:
        capacity = resource_units(GPU, ((current.get("status") or {}).get("capacity") or {}).get(GPU, "0"))
    except QuantityError:
        capacity = 0
    if count > capacity:
        raise ValueError(f"node {node} has {capacity} GPUs; cannot mark {count} unhealthy")

    def annotate(obj: JSON) -> JSON | None:
        meta = obj.setdefault("metadata", {})
        annotations = dict(meta.get("annotations") or {})
        if count:
            annotations[ANNOTATION_UNHEALTHY_GPUS] = str(count)
        else:
            annotations.pop(ANNOTATION_UNHEALTHY_GPUS, None)
        meta["annotations"] = annotations
        return obj

    def allocatable(obj: JSON) -> JSON | None:
        status = obj.setdefault("status", {})
        alloc = dict(status.get("allocatable") or {})
        alloc[GPU] = str(capacity - count)
        status["allocatable"] = alloc
        return obj

    await storage.guaranteed_update(rt, namespace=None, name=node, mutate=annotate)
    return await storage.guaranteed_update(rt, namespace=None, name=node, mutate=allocatable,
                                           subresource="status" if rt.status_subresource else None)
