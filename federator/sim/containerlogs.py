"""The logs of simulated containers, and `GET /api/v1/namespaces/NS/pods/NAME/log` as kube serves it.

What a container prints is a function of its pod and the clock, not a file: a
start line (role, rank, job, attempt, node), a rendezvous line, then one line
per `sim.federator.dev/log-interval-seconds` (default 1 s) with the epoch, the
step and a loss that decreases (a curve of the job, with the learning rate and
the throughput), a checkpoint line at the end of every epoch, and, once the
kubelet finished the container, an exit line (`exiting 0`, or an error and the
exit code; a container killed with its node prints none). Each line carries a
timestamp between its slot and half a slot later (deterministic jitter), so
reading a log twice, from another process, or after the simulator restarted,
gives the same lines, and a simulator keeps nothing per container. The log is
bounded like a kubelet's rotated log: after `LOG_ROTATE_LINES` lines the
current file starts again, and only the current file is served (a kubelet
serves only its current file too).

`POD_LOG` is the pods/log subresource for build_api_app, with kube's options
(federator/apiserver/podlog.py: container, follow, previous, timestamps,
tailLines, sinceSeconds, sinceTime, limitBytes, stream) and kube's answers: 404
`pods "NAME" not found`; 400 `a container name must be specified for pod NAME,
choose one of: [a b]`, `container X is not valid for pod NAME`, `container "c"
in pod "p" is waiting to start: ContainerCreating` and `previous terminated
container "c" in pod "p" not found` (simulated containers never restart); an
empty 200 for a pod no node has taken yet. `follow` streams new lines as their
time comes and ends when the container has exited (after its exit line), the
pod is deleted or replaced, the client leaves, or the cluster stops.

On a cluster whose kubelet runs pods as processes (the app's PROCESS_RUNTIME), the log is the
container run's real CRI log file instead (federator/sim/processes.py writes it; restartCount picks the
run, `previous` the one before): the same options, lines as the process printed them with the time it
printed them, and a follow that ends when that run has stopped.

It must never import anything of the hub, and never write to the store.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from federator.apis.views import Body
from federator.apiserver import errors
from federator.apiserver.app import Subresource, SubresourceRequest, api_state
from federator.apiserver.podlog import LogOptions, parse_log_options, serve_log
from federator.apis.timestamps import format_nano_time, parse_time
from federator.sim.processes import ProcessRuntime, parse_cri_line

__all__ = [
    "ANNOTATION_LOG_INTERVAL",
    "ContainerLog",
    "ContainerRun",
    "LOG_ROTATE_LINES",
    "LOG_STREAMS",
    "LogStreams",
    "POD_LOG",
    "PROCESS_RUNTIME",
    "container_run",
    "log_container",
]

#: on a pod: seconds between two lines its containers print (0.01 to 3600; default 1)
ANNOTATION_LOG_INTERVAL = "sim.federator.dev/log-interval-seconds"
DEFAULT_LOG_INTERVAL_SECONDS = 1.0
_MIN_INTERVAL, _MAX_INTERVAL = 0.01, 3600.0
#: lines in a container's current log file before it is rotated (a kubelet rotates at
#: containerLogMaxSize, 10 MiB; at about 100 bytes a line this is about 2 MiB)
LOG_ROTATE_LINES = 20_000
#: optimizer steps per printed line, and printed step lines per epoch
STEPS_PER_LINE = 10
LINES_PER_EPOCH = 50
#: a follower re-reads the pod at least this often (to see it finish or go)
_RECHECK_SECONDS = 1.0
#: bytes per write of a long log
_CHUNK_BYTES = 64 * 1024
_NS = 1_000_000_000
_PS_ROLES = frozenset({"ps", "pserver", "server", "parameter-server", "parameterserver"})
_FAILURES = (
    "NCCL error in ProcessGroupNCCL.cpp:1275, unhandled system error",
    "CUDA error: an illegal memory access was encountered",
    "RuntimeError: DataLoader worker (pid 4711) is killed by signal: Bus error",
    "RendezvousTimeoutError: a peer did not report within 300 s",
)

JSON = dict[str, Any]


def _hash(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\x00".join(parts).encode()).digest()[:8], "big")


def _unit(*parts: str) -> float:
    """A deterministic number in [0, 1) from `parts`."""
    return _hash(*parts) / 2**64


def _parse_time(value: Any) -> int | None:
    """A kube timestamp (RFC 3339, whole seconds) as nanoseconds since the epoch."""
    parsed = parse_time(value)
    return None if parsed is None else int(parsed.timestamp()) * _NS


def _interval(annotations: Mapping[str, Any]) -> float:
    raw = annotations.get(ANNOTATION_LOG_INTERVAL)
    try:
        value = float(raw) if raw is not None else DEFAULT_LOG_INTERVAL_SECONDS
    except (TypeError, ValueError):
        return DEFAULT_LOG_INTERVAL_SECONDS
    if not _MIN_INTERVAL <= value <= _MAX_INTERVAL:  # also refuses nan
        return DEFAULT_LOG_INTERVAL_SECONDS
    return value


def _env(container: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in container.get("env") or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str) and isinstance(entry.get("value"), str):
            found[entry["name"]] = entry["value"]
    return found


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


# ---------------------------------------------------------------- what a container prints


@dataclass(frozen=True, slots=True)
class ContainerRun:
    """One run of a container: everything its log is a function of."""

    pod_uid: str
    pod: str
    container: str
    image: str
    node: str
    job: str
    #: the curve all ranks of one job share
    job_key: str
    role: str
    index: int
    replicas: int
    gang_size: int
    gang: str
    attempt: int
    interval_ns: int
    started_ns: int
    #: set once the container exited (whole seconds, as kube stamps finishedAt)
    finished_ns: int | None = None
    exit_code: int | None = None
    #: Completed, Error, NodeLost, ...
    reason: str = ""


class ContainerLog:
    """The lines of one ContainerRun: line i, its time, and how many exist at a moment (see module docstring)."""

    def __init__(self, run: ContainerRun, *, rotate_lines: int = LOG_ROTATE_LINES) -> None:
        if rotate_lines < 1:
            raise ValueError("rotate_lines must be at least 1")
        self.run = run
        self.rotate_lines = rotate_lines
        key = run.job_key
        self._loss_start = 2.3 + 4.6 * _unit(key, "loss-start")       # ln(10) .. ln(1000)
        self._loss_floor = 0.05 + 0.5 * _unit(key, "loss-floor")
        self._loss_tau = 800.0 + 3200.0 * _unit(key, "loss-tau")       # steps
        self._lr = (0.1, 0.05, 0.01, 0.003)[_hash(key, "lr") % 4]
        self._throughput = 300.0 + 1200.0 * _unit(key, run.role, "throughput")
        self._is_ps = run.role.lower() in _PS_ROLES
        self._body_end: int | None = None
        if run.finished_ns is not None:
            # finishedAt has whole seconds: the container really ended within the second after it,
            # so every line stamped before that second ended was printed.
            self._body_end = self._count_until(run.finished_ns + _NS - 1)

    # ------------------------------------------------------------ timing

    def time_of(self, i: int) -> int:
        """Nanoseconds since the epoch at which line i was printed."""
        if self._body_end is not None and i >= self._body_end:
            last = self._slot(self._body_end - 1) if self._body_end else self.run.started_ns
            assert self.run.finished_ns is not None
            return max(self.run.finished_ns, last + 1_000_000)
        return self._slot(i)

    def _slot(self, i: int) -> int:
        interval = self.run.interval_ns
        jitter = _hash(self.run.pod_uid, self.run.container, str(i)) % max(1, interval // 2)
        return self.run.started_ns + i * interval + jitter

    def _count_until(self, ns: int) -> int:
        """Body lines stamped at or before `ns`."""
        elapsed = ns - self.run.started_ns
        if elapsed < 0:
            return 0
        last = elapsed // self.run.interval_ns
        while last >= 0 and self._slot(last) > ns:
            last -= 1
        return last + 1

    @property
    def has_exit_line(self) -> bool:
        return self._body_end is not None and self.run.reason in ("Completed", "Error")

    @property
    def final_count(self) -> int | None:
        """How many lines the log has once complete (None while the container runs)."""
        if self._body_end is None:
            return None
        return self._body_end + (1 if self.has_exit_line else 0)

    def count_at(self, ns: int) -> int:
        """How many lines had been printed at `ns` (nanoseconds since the epoch)."""
        if self._body_end is None:
            return self._count_until(ns)
        body = min(self._body_end, self._count_until(ns))
        if body == self._body_end and self.has_exit_line and ns >= self.time_of(self._body_end):
            return body + 1
        return body

    def first_kept(self, total: int) -> int:
        """The first line of the current (rotated) log file when `total` lines were printed."""
        return ((total - 1) // self.rotate_lines) * self.rotate_lines if total > 0 else 0

    def is_stderr(self, i: int) -> bool:
        return self.has_exit_line and i == self._body_end and self.run.reason != "Completed"

    # ------------------------------------------------------------ text

    def loss(self, step: int) -> float:
        return self._loss_floor + (self._loss_start - self._loss_floor) * math.exp(-step / self._loss_tau)

    def line(self, i: int) -> str:
        """The text of line i (no newline, no timestamp)."""
        run = self.run
        if self._body_end is not None and i >= self._body_end:
            return self._exit_line()
        if i == 0:
            return (f"INFO trainer: starting {run.image} as {run.role} {run.index} of {run.replicas} "
                    f"(job {run.job}, attempt {run.attempt}, gang of {run.gang_size} pods: {run.gang}) "
                    f"on node {run.node}")
        if i == 1:
            return f"INFO trainer: rendezvous complete: {run.gang_size}/{run.gang_size} peers connected"
        cycle, position = divmod(i - 2, LINES_PER_EPOCH + 1)
        epoch = cycle + 1
        if position == LINES_PER_EPOCH:
            step = epoch * LINES_PER_EPOCH * STEPS_PER_LINE
            path = f"/checkpoints/{run.job}/epoch-{epoch:04d}"
            if self._is_ps:
                return (f"INFO ps[{run.index}]: epoch {epoch} done: shard {run.index}/{run.replicas} saved to "
                        f"{path}/ps-{run.index}.pt")
            return (f"INFO trainer: epoch {epoch} done: loss {self.loss(step):.4f}; checkpoint saved to "
                    f"{path}/rank-{run.index}.pt")
        step = (cycle * LINES_PER_EPOCH + position + 1) * STEPS_PER_LINE
        speed = self._throughput * (0.95 + 0.1 * _unit(run.pod_uid, str(i)))
        if self._is_ps:
            workers = max(1, run.gang_size - run.replicas)
            return (f"INFO ps[{run.index}]: step {step}: applied {step * workers} updates from {workers} workers "
                    f"(shard {run.index}/{run.replicas}, {speed * 8:.0f} params/s)")
        return (f"INFO trainer: epoch {epoch} step {step} loss {self.loss(step):.4f} lr {self._lr:.4f} "
                f"throughput {speed:.1f} samples/s")

    def _exit_line(self) -> str:
        run = self.run
        epochs, rest = divmod(max(0, (self._body_end or 0) - 2), LINES_PER_EPOCH + 1)
        steps = (epochs * LINES_PER_EPOCH + min(rest, LINES_PER_EPOCH)) * STEPS_PER_LINE
        if run.reason == "Completed":
            plural = "" if epochs == 1 else "s"
            return (f"INFO trainer: training finished: {epochs} epoch{plural}, {steps} steps, final loss "
                    f"{self.loss(steps):.4f}; exiting 0")
        failure = _FAILURES[_hash(run.pod_uid, "failure") % len(_FAILURES)]
        return f"ERROR trainer: {failure} at step {steps}; exiting with code {run.exit_code}"

    def render(self, i: int, *, timestamps: bool) -> bytes:
        text = self.line(i)
        if timestamps:
            return f"{format_nano_time(self.time_of(i))} {text}\n".encode()
        return f"{text}\n".encode()


# ---------------------------------------------------------------- pods and containers


def log_container(pod: Mapping[str, Any], requested: str) -> str:
    """The container a log request reads (kube's validateContainer; 400 BadRequest otherwise)."""
    name = Body(pod).name
    spec = pod.get("spec") or {}
    names = [str(c.get("name")) for key in ("initContainers", "containers", "ephemeralContainers")
             for c in spec.get(key) or () if isinstance(c, Mapping) and c.get("name")]
    containers = [c for c in spec.get("containers") or () if isinstance(c, Mapping)]
    if not requested:
        if len(containers) == 1:
            return str(containers[0].get("name") or "")
        if not containers:
            raise errors.bad_request(f"a container name must be specified for pod {name}")
        raise errors.bad_request(f"a container name must be specified for pod {name}, "
                                 f"choose one of: [{' '.join(names)}]")
    if requested not in names:
        raise errors.bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def container_run(pod: Mapping[str, Any], container: str, *, previous: bool = False) -> ContainerRun:
    """The run of `container` whose log a request reads: 400 BadRequest in the kubelet's words when there is
    none (waiting to start, never restarted, not available)."""
    meta = Body(pod)
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    name = meta.name
    statuses = [s for key in ("containerStatuses", "initContainerStatuses")
                for s in status.get(key) or () if isinstance(s, Mapping)]
    found = next((s for s in statuses if s.get("name") == container), None)
    if previous:
        last = ((found or {}).get("lastState") or {}).get("terminated") or {}
        if not last.get("containerID"):
            raise errors.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
    if found is None:
        if status.get("phase") in (None, "", "Pending"):
            raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: '
                                     "ContainerCreating")
        raise errors.bad_request(f'container "{container}" in pod "{name}" is not available')
    state = found.get("state") or {}
    running, terminated, waiting = state.get("running"), state.get("terminated"), state.get("waiting")
    started: int | None = None
    finished: int | None = None
    exit_code: int | None = None
    reason = ""
    if isinstance(running, Mapping):
        started = _parse_time(running.get("startedAt")) or _parse_time(status.get("startTime"))
    elif isinstance(terminated, Mapping):
        started = _parse_time(terminated.get("startedAt"))
        finished = _parse_time(terminated.get("finishedAt"))
        code = terminated.get("exitCode")
        exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        reason = str(terminated.get("reason") or "")
        if started is None or finished is None:
            raise errors.bad_request(f'container "{container}" in pod "{name}" is terminated')
    elif isinstance(waiting, Mapping):
        raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: '
                                 f"{waiting.get('reason') or 'ContainerCreating'}")
    if started is None:
        raise errors.bad_request(f'container "{container}" in pod "{name}" is not available')
    spec_container = next((c for c in spec.get("containers") or () if isinstance(c, Mapping)
                           and c.get("name") == container), {})
    env = _env(spec_container)
    annotations = meta.annotations
    namespace = meta.namespace
    job_namespace, job_name = env.get("FEDERATOR_JOB_NAMESPACE"), env.get("FEDERATOR_JOB_NAME")
    job = f"{job_namespace}/{job_name}" if job_namespace and job_name else f"{namespace}/{name}"
    labels = meta.labels
    replicas = max(1, _int(env.get("FEDERATOR_ROLE_REPLICAS"), 1))
    gang_size = max(replicas, _int(env.get("FEDERATOR_GANG_SIZE"), 1))
    role = env.get("FEDERATOR_ROLE") or container
    return ContainerRun(
        pod_uid=meta.uid or name, pod=name, container=container,
        image=str(spec_container.get("image") or found.get("image") or "unknown"),
        node=str(spec.get("nodeName") or ""), job=job,
        job_key=str(labels.get("federator.dev/job-uid") or job),
        role=role, index=max(0, _int(env.get("FEDERATOR_ROLE_INDEX"), 0)), replicas=replicas,
        gang_size=gang_size, gang=str(annotations.get("federator.dev/gang") or f"{role}={replicas}"),
        attempt=max(0, _int(env.get("FEDERATOR_EPOCH"), 1)),
        interval_ns=int(_interval(annotations) * _NS), started_ns=started,
        finished_ns=finished, exit_code=exit_code, reason=reason,
    )


# ---------------------------------------------------------------- serving


def _wanted(log: ContainerLog, i: int, options: LogOptions, since_ns: int | None) -> bool:
    if since_ns is not None and log.time_of(i) < since_ns:
        return False
    if options.stream == "All":
        return True
    return log.is_stderr(i) == (options.stream == "Stderr")


def _render(log: ContainerLog, start: int, stop: int, options: LogOptions, since_ns: int | None) -> list[bytes]:
    """Lines start..stop-1 that pass the filters, joined into chunks of about _CHUNK_BYTES."""
    chunks: list[bytes] = []
    pending: list[bytes] = []
    size = 0
    for i in range(start, stop):
        if not _wanted(log, i, options, since_ns):
            continue
        line = log.render(i, timestamps=options.timestamps)
        pending.append(line)
        size += len(line)
        if size >= _CHUNK_BYTES:
            chunks.append(b"".join(pending))
            pending, size = [], 0
    if pending:
        chunks.append(b"".join(pending))
    return chunks


async def _log_chunks(
    req: SubresourceRequest, pod: Mapping[str, Any], container: str, options: LogOptions, *,
    read_at: int, stopping: Callable[[], bool], clock: Callable[[], int] = time.time_ns,
) -> AsyncIterator[bytes]:
    """The log's chunks. `read_at` is a time taken *before* `pod` was read: a container the pod shows running
    had printed every line up to then, and lines up to then stay in its log once it has finished."""
    assert req.rt is not None
    log = ContainerLog(container_run(pod, container, previous=options.previous))
    uid = Body(pod).uid
    now = read_at
    total = log.count_at(now)
    start = log.first_kept(total)
    if options.tail_lines is not None:
        start = max(start, total - options.tail_lines)
    since = options.since(dt.datetime.fromtimestamp(now / _NS, dt.UTC))
    since_ns = round(since.timestamp() * _NS) if since is not None else None
    for chunk in _render(log, start, total, options, since_ns):
        yield chunk
    while options.follow and not stopping():
        final = log.final_count
        if final is not None and total >= final:
            return  # the container exited and its last line is out
        due = log.time_of(total)
        await asyncio.sleep(min(_RECHECK_SECONDS, max(0.0, (due - clock()) / _NS)))
        now = clock()
        try:
            current = await req.storage.get(req.rt, namespace=req.namespace, name=req.name)
        except errors.ApiError as e:
            if e.code == 404:
                return  # the pod is gone: so is its log
            raise
        if Body(current).uid != uid:
            return  # another pod of that name: not this log
        try:
            log = ContainerLog(container_run(current, container))
        except errors.ApiError:
            return
        count = max(total, log.count_at(now))
        for chunk in _render(log, total, count, options, since_ns):
            yield chunk
        total = count


async def _empty() -> AsyncIterator[bytes]:
    nothing: tuple[bytes, ...] = ()
    for chunk in nothing:
        yield chunk


@dataclass(slots=True)
class LogStreams:
    """How many log requests a cluster is answering now, and has answered (its /_sim/stats show them)."""

    open: int = 0
    served: int = 0


#: where a SimCluster keeps its LogStreams (optional: an app without one counts nothing)
LOG_STREAMS: web.AppKey[LogStreams] = web.AppKey("federator_sim_log_streams", LogStreams)
#: the cluster's process runtime, when its profile turns it on: its containers' logs are real files
PROCESS_RUNTIME: web.AppKey[ProcessRuntime] = web.AppKey("federator_sim_process_runtime", ProcessRuntime)
#: a follower of a process's log looks for new lines this often
_FILE_POLL_SECONDS = 0.2


def _restart_count(pod: Mapping[str, Any], container: str) -> tuple[int, bool]:
    """(restartCount, running?) of `container` in the pod's status."""
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or ():
            if isinstance(cs, Mapping) and cs.get("name") == container:
                count = cs.get("restartCount")
                running = isinstance((cs.get("state") or {}).get("running"), Mapping)
                return (count if isinstance(count, int) and not isinstance(count, bool) else 0), running
    return 0, False


class _FileLog:
    """A process's CRI log file read as kube's kubelet reads one: entries joined into lines."""

    def __init__(self, path: Any) -> None:
        self.path = path
        self.offset = 0
        self.pending = b""
        #: a partial (P) line waiting for its end: (time, stream, text)
        self.partial: tuple[int, str, bytes] | None = None

    def read(self) -> list[tuple[int, str, bytes]]:
        """The whole lines (time, stream, text) written since the last read."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.pending + data
        complete, _, self.pending = data.rpartition(b"\n")
        out: list[tuple[int, str, bytes]] = []
        for raw in complete.split(b"\n") if complete else ():
            entry = parse_cri_line(raw)
            if entry is None:
                continue
            when, stream, full, text = entry
            if self.partial is not None:
                when, text = self.partial[0], self.partial[2] + text
                self.partial = None
            if full:
                out.append((when, stream, text))
            else:
                self.partial = (when, stream, text)
        return out


def _file_lines(lines: list[tuple[int, str, bytes]], options: LogOptions, since_ns: int | None) -> bytes:
    out = []
    for when, stream, text in lines:
        if since_ns is not None and when < since_ns:
            continue
        if options.stream != "All" and stream != options.stream.lower():
            continue
        out.append(f"{format_nano_time(when)} ".encode() + text + b"\n" if options.timestamps else text + b"\n")
    return b"".join(out)


async def _process_log_chunks(req: SubresourceRequest, pod: Mapping[str, Any], container: str, options: LogOptions,
                              *, path: Any, restart: int, stopping: Callable[[], bool]) -> AsyncIterator[bytes]:
    """A process-runtime container's log file; with follow, new lines until the container has stopped."""
    assert req.rt is not None
    log = _FileLog(path)
    lines = [entry for entry in log.read() if options.stream == "All" or entry[1] == options.stream.lower()]
    if options.tail_lines is not None:
        lines = lines[max(0, len(lines) - options.tail_lines):] if options.tail_lines else []
    since = options.since(dt.datetime.now(dt.UTC))
    since_ns = round(since.timestamp() * _NS) if since is not None else None
    first = _file_lines(lines, options, since_ns)
    if first:
        yield first
    uid = Body(pod).uid
    while options.follow and not stopping():
        await asyncio.sleep(_FILE_POLL_SECONDS)
        try:
            current = await req.storage.get(req.rt, namespace=req.namespace, name=req.name)
        except errors.ApiError as e:
            if e.code == 404:
                current = None
            else:
                raise
        count, running = _restart_count(current, container) if current is not None else (restart, False)
        ended = current is None or Body(current).uid != uid or count != restart or not running
        more = _file_lines(log.read(), options, since_ns)
        if more:
            yield more
        if ended:
            return


async def _pod_log(req: SubresourceRequest) -> web.StreamResponse:
    streams = req.request.app.get(LOG_STREAMS) or LogStreams()
    streams.open += 1
    try:
        return await _serve_pod_log(req)
    finally:
        streams.open -= 1
        streams.served += 1


async def _serve_pod_log(req: SubresourceRequest) -> web.StreamResponse:
    assert req.rt is not None
    options = parse_log_options(req.request.query, name=req.name)
    read_at = time.time_ns()
    pod = await req.storage.get(req.rt, namespace=req.namespace, name=req.name)
    container = log_container(pod, options.container)
    if not (pod.get("spec") or {}).get("nodeName"):
        # kube: a pod no node has taken has no log location yet; the answer is empty
        return await serve_log(req.request, _empty())
    container_run(pod, container, previous=options.previous)  # 400 before any byte is sent
    state = api_state(req.request.app)
    runtime = req.request.app.get(PROCESS_RUNTIME)
    if runtime is not None:
        meta = Body(pod)
        restart, _ = _restart_count(pod, container)
        restart = restart - 1 if options.previous else restart
        path = runtime.log_path(namespace=meta.namespace, name=meta.name, uid=meta.uid, container=container,
                                restart=restart)
        chunks = _process_log_chunks(req, pod, container, options, path=path, restart=restart,
                                     stopping=lambda: state.stopping)
        return await serve_log(req.request, chunks, limit_bytes=options.limit_bytes)
    chunks = _log_chunks(req, pod, container, options, read_at=read_at, stopping=lambda: state.stopping)
    return await serve_log(req.request, chunks, limit_bytes=options.limit_bytes)


#: pods/log for build_api_app (discovery lists it as kube does: kind Pod, verb get)
POD_LOG = Subresource(group="", version="v1", plural="pods", name="log", kind="Pod", verbs=("get",),
                      handler=_pod_log)
