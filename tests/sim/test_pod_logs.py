"""Container logs of the simulated kubelet (federator/sim/containerlogs.py) and
`GET /api/v1/namespaces/NS/pods/NAME/log` as kube serves it: the lines
themselves (deterministic, a loss that decreases, checkpoints, an exit line,
rotation), the options (follow, tailLines, sinceSeconds, sinceTime,
container, previous, timestamps, limitBytes, stream), kube's errors for bad,
hostile and unauthorised requests, and real kubectl (`logs`, `--tail`, `-c`,
`-f`) and the official Python client against a real SimCluster."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from simapi_support import ThreadedSim, wait_for

from federator.apiserver.errors import ApiError
from federator.sim import kinds
from federator.sim.containerlogs import ContainerLog, ContainerRun, container_run, log_container

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
NS = 1_000_000_000
FAST = "0.02"   # seconds between two lines of a test pod
STEP = re.compile(r"epoch (\d+) step (\d+) loss ([0-9.]+) ")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z) ")


def run_of(**changes: Any) -> ContainerRun:
    base: dict[str, Any] = dict(
        pod_uid="uid-1", pod="job-a-worker-0", container="worker", image="trainer:1.4", node="gpu-0001",
        job="vision/job-a", job_key="job-uid-1", role="worker", index=0, replicas=4, gang_size=5,
        gang="ps=1,worker=4", attempt=1, interval_ns=NS, started_ns=1_700_000_000 * NS)
    base.update(changes)
    return ContainerRun(**base)


def losses(lines: list[str]) -> list[float]:
    return [float(m.group(3)) for line in lines if (m := STEP.search(line))]


# ---------------------------------------------------------------- the lines (pure)


def test_a_log_is_a_function_of_the_run_and_the_clock() -> None:
    run = run_of()
    first, second = ContainerLog(run), ContainerLog(run_of())
    at = run.started_ns + 300 * NS
    assert first.count_at(at) == second.count_at(at) == 300
    assert [first.line(i) for i in range(300)] == [second.line(i) for i in range(300)]
    assert first.line(0).startswith("INFO trainer: starting trainer:1.4 as worker 0 of 4 (job vision/job-a, ")
    assert "gang of 5 pods: ps=1,worker=4" in first.line(0) and "on node gpu-0001" in first.line(0)
    assert "rendezvous complete: 5/5" in first.line(1)
    # another pod of the same job follows the same curve; another job another one
    assert losses([ContainerLog(run_of(pod_uid="uid-2", index=1)).line(i) for i in range(2, 40)]) == \
        losses([first.line(i) for i in range(2, 40)])
    assert losses([ContainerLog(run_of(job_key="other")).line(i) for i in range(2, 40)]) != \
        losses([first.line(i) for i in range(2, 40)])
    # nothing before the start; one line per interval after it; times strictly increase
    assert first.count_at(run.started_ns - 1) == 0
    times = [first.time_of(i) for i in range(300)]
    assert times == sorted(set(times)) and all(t < at for t in times)


def test_the_loss_decreases_and_every_epoch_ends_with_a_checkpoint() -> None:
    log = ContainerLog(run_of())
    lines = [log.line(i) for i in range(2, 2 + 3 * 51)]
    values = losses(lines)
    assert len(values) == 150 and values[0] > values[-1]
    assert all(b <= a for a, b in zip(values, values[1:]))
    checkpoints = [line for line in lines if "checkpoint saved to" in line]
    assert [line.split()[3] for line in checkpoints] == ["1", "2", "3"]
    assert "/checkpoints/vision/job-a/epoch-0002/rank-0.pt" in checkpoints[1]
    ps = ContainerLog(run_of(role="ps", replicas=1, container="ps"))
    assert "applied" in ps.line(5) and "from 4 workers" in ps.line(5) and "loss" not in ps.line(5)


def test_a_finished_container_ends_with_its_exit_line() -> None:
    start = 1_700_000_000 * NS
    done = ContainerLog(run_of(finished_ns=start + 60 * NS, exit_code=0, reason="Completed"))
    final = done.final_count
    assert final is not None and done.count_at(start + 3600 * NS) == final
    assert done.line(final - 1).startswith("INFO trainer: training finished: 1 epoch, ")
    assert done.line(final - 1).endswith("; exiting 0") and not done.is_stderr(final - 1)
    assert done.time_of(final - 1) > done.time_of(final - 2)
    failed = ContainerLog(run_of(finished_ns=start + 60 * NS, exit_code=3, reason="Error"))
    assert failed.line(final - 1).startswith("ERROR trainer: ") and failed.line(final - 1).endswith("code 3")
    assert failed.is_stderr(final - 1)
    killed = ContainerLog(run_of(finished_ns=start + 60 * NS, exit_code=137, reason="NodeLost"))
    assert killed.final_count == final - 1 and "exiting" not in killed.line(final - 2)
    running = ContainerLog(run_of())
    assert running.final_count is None and running.count_at(start + 10**6 * NS) > 10**5


def test_the_log_is_rotated_like_a_kubelets() -> None:
    log = ContainerLog(run_of(), rotate_lines=100)
    for total in (1, 99, 100, 101, 250, 1000):
        first = log.first_kept(total)
        assert 0 < total - first <= 100 and first % 100 == 0
    assert log.first_kept(0) == 0
    with pytest.raises(ValueError):
        ContainerLog(run_of(), rotate_lines=0)


def _pod(status: dict[str, Any] | None = None, containers: tuple[str, ...] = ("main",)) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"nodeName": "n1", "containers": [{"name": c, "image": "img"} for c in containers]},
            "status": status or {"phase": "Pending"}}


def test_which_container_and_which_run_follow_kube() -> None:
    two = _pod(containers=("a", "b"))
    assert log_container(_pod(), "") == "main"
    assert log_container(two, "b") == "b"
    for pod, asked, message in (
        (two, "", "a container name must be specified for pod p, choose one of: [a b]"),
        (_pod(containers=()), "", "a container name must be specified for pod p"),
        (two, "c", "container c is not valid for pod p"),
    ):
        with pytest.raises(ApiError) as e:
            log_container(pod, asked)
        assert (e.value.code, e.value.reason, e.value.message) == (400, "BadRequest", message)
    running = _pod({"phase": "Running", "containerStatuses": [
        {"name": "main", "state": {"running": {"startedAt": "2024-05-01T12:00:00Z"}}}]})
    assert container_run(running, "main").started_ns == 1714564800 * NS
    waiting = _pod({"phase": "Failed", "containerStatuses": [{"name": "main", "state": {"waiting": {
        "reason": "NodeLost"}}}]})
    for pod, previous, message in (
        (_pod(), False, 'container "main" in pod "p" is waiting to start: ContainerCreating'),
        (waiting, False, 'container "main" in pod "p" is waiting to start: NodeLost'),
        (_pod({"phase": "Failed"}), False, 'container "main" in pod "p" is not available'),
        (running, True, 'previous terminated container "main" in pod "p" not found'),
    ):
        with pytest.raises(ApiError) as e:
            container_run(pod, "main", previous=previous)
        assert (e.value.code, e.value.message) == (400, message)


# ---------------------------------------------------------------- over HTTP


@pytest.fixture
async def http(sim_cluster: ThreadedSim) -> AsyncIterator[aiohttp.ClientSession]:
    ctx = ssl.create_default_context(cadata=sim_cluster.c.ca_pem.decode())
    async with aiohttp.ClientSession(base_url=sim_cluster.c.url, connector=aiohttp.TCPConnector(ssl=ctx),
                                     headers={"Authorization": f"Bearer {sim_cluster.c.token}"}) as session:
        yield session


def training_pod(name: str, *, containers: tuple[str, ...] = ("main",), duration: float | None = None,
                 interval: str = FAST, scheduler: str | None = None, start_delay: float | None = None,
                 fail_after: float | None = None) -> dict[str, Any]:
    annotations = {"sim.federator.dev/log-interval-seconds": interval}
    if duration is not None:
        annotations["sim.federator.dev/duration-seconds"] = str(duration)
    if fail_after is not None:
        annotations["sim.federator.dev/fail-after-seconds"] = str(fail_after)
        annotations["sim.federator.dev/exit-code"] = "3"
    if start_delay is not None:
        annotations["sim.federator.dev/start-delay-seconds"] = str(start_delay)
    spec: dict[str, Any] = {"restartPolicy": "Never",
                            "containers": [{"name": c, "image": "trainer:1.4"} for c in containers]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations}, "spec": spec}


async def create_pod(sim: ThreadedSim, namespace: str, body: dict[str, Any], *, phase: str | None = "Running"
                     ) -> dict[str, Any]:
    async def create() -> None:
        await sim.c.storage.create(kinds.PODS, body, namespace=namespace)

    await sim.arun(create)

    async def reached() -> dict[str, Any] | None:
        async def get() -> dict[str, Any]:
            return await sim.c.storage.get(kinds.PODS, namespace=namespace, name=body["metadata"]["name"])

        pod = await sim.arun(get)
        return pod if phase is None or (pod.get("status") or {}).get("phase") == phase else None

    found: dict[str, Any] = await wait_for(f"pod {body['metadata']['name']} {phase}", reached)
    return found


def log_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}/log"


async def read_log(http: aiohttp.ClientSession, namespace: str, name: str, **query: str) -> tuple[int, str, str]:
    async with http.get(log_path(namespace, name), params=query) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), (await resp.read()).decode()


async def test_a_running_pods_log_and_its_options(sim_cluster: ThreadedSim, http: aiohttp.ClientSession) -> None:
    ns = sim_cluster.new_namespace("logs")
    await create_pod(sim_cluster, ns, training_pod("train"))

    async def lines_at_least(n: int) -> list[str] | None:
        code, _, text = await read_log(http, ns, "train")
        return text.splitlines() if code == 200 and len(text.splitlines()) >= n else None

    lines = await wait_for("60 lines", lambda: lines_at_least(60))
    code, content_type, _ = await read_log(http, ns, "train")
    assert code == 200 and content_type.startswith("text/plain")
    assert lines[0].startswith("INFO trainer: starting trainer:1.4 as main 0 of 1 ")
    assert losses(lines)[0] > losses(lines)[-1]

    code, _, tail = await read_log(http, ns, "train", tailLines="5", container="main")
    assert code == 200 and len(tail.splitlines()) == 5 and STEP.search(tail.splitlines()[-1])
    code, _, none = await read_log(http, ns, "train", tailLines="0")
    assert (code, none) == (200, "")
    code, _, stamped = await read_log(http, ns, "train", tailLines="3", timestamps="true")
    stamps = [STAMP.match(line) for line in stamped.splitlines()]
    assert code == 200 and len(stamps) == 3 and all(stamps)
    assert [m.group(1) for m in stamps if m] == sorted(m.group(1) for m in stamps if m)
    code, _, cut = await read_log(http, ns, "train", limitBytes="10")
    assert (code, cut) == (200, lines[0][:10])
    # once it has run for more than 2 s, sinceSeconds=1 holds about the last 50 lines, never the start
    lines = await wait_for("120 lines", lambda: lines_at_least(120))
    code, _, recent = await read_log(http, ns, "train", sinceSeconds="1")
    assert code == 200 and 0 < len(recent.splitlines()) < len(lines) and "starting" not in recent
    code, _, future = await read_log(http, ns, "train", sinceTime="2999-01-01T00:00:00Z")
    assert (code, future) == (200, "")
    code, _, past = await read_log(http, ns, "train", sinceTime="2000-01-01T00:00:00Z", tailLines="2")
    assert code == 200 and len(past.splitlines()) == 2
    code, _, err = await read_log(http, ns, "train", stream="Stderr")
    assert (code, err) == (200, "")   # a running trainer writes to stdout only


async def test_follow_streams_until_the_container_exits(sim_cluster: ThreadedSim,
                                                        http: aiohttp.ClientSession) -> None:
    ns = sim_cluster.new_namespace("follow")
    await create_pod(sim_cluster, ns, training_pod("short", duration=1.5))
    async with http.get(log_path(ns, "short"), params={"follow": "true", "tailLines": "1"}) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")
        body = (await asyncio.wait_for(resp.read(), 30)).decode()
    lines = body.splitlines()
    assert len(lines) > 10   # lines kept coming while it ran
    assert lines[-1].startswith("INFO trainer: training finished: ") and lines[-1].endswith("exiting 0")
    # the finished log reads the same every time, exit line last
    code, _, again = await read_log(http, ns, "short")
    assert code == 200 and again.endswith(lines[-1] + "\n") and again.count("training finished") == 1

    await create_pod(sim_cluster, ns, training_pod("crash", fail_after=0.5))

    async def failed() -> str | None:
        code, _, text = await read_log(http, ns, "crash", stream="Stderr")
        return text if code == 200 and text else None

    stderr = await wait_for("the crash's error line", failed)
    assert stderr.startswith("ERROR trainer: ") and stderr.strip().endswith("exiting with code 3")
    code, _, stdout = await read_log(http, ns, "crash", stream="Stdout")
    assert code == 200 and "ERROR" not in stdout and stdout.startswith("INFO trainer: starting")


async def test_follow_ends_when_the_pod_is_deleted(sim_cluster: ThreadedSim, http: aiohttp.ClientSession) -> None:
    ns = sim_cluster.new_namespace("gone")
    await create_pod(sim_cluster, ns, training_pod("doomed"))
    async with http.get(log_path(ns, "doomed"), params={"follow": "1"}) as resp:
        assert resp.status == 200
        first = await asyncio.wait_for(resp.content.readline(), 20)
        assert first.startswith(b"INFO trainer: starting")

        async def delete() -> None:
            await sim_cluster.c.storage.delete(kinds.PODS, namespace=ns, name="doomed", grace_period_seconds=0)

        await sim_cluster.arun(delete)
        rest = await asyncio.wait_for(resp.read(), 20)   # the stream ends by itself
    assert b"exiting" not in rest


async def test_kubes_errors_for_log_requests(sim_cluster: ThreadedSim, http: aiohttp.ClientSession) -> None:
    ns = sim_cluster.new_namespace("bad")
    await create_pod(sim_cluster, ns, training_pod("two", containers=("trainer", "sidecar")))
    await create_pod(sim_cluster, ns, training_pod("waiting", start_delay=3600), phase=None)
    await create_pod(sim_cluster, ns, training_pod("unbound", scheduler="nobody"), phase="Pending")

    async def status(name: str, **query: str) -> tuple[int, dict[str, Any]]:
        async with http.get(log_path(ns, name), params=query) as resp:
            assert resp.headers["Content-Type"].startswith("application/json"), await resp.text()
            return resp.status, json.loads(await resp.read())

    async def bound() -> bool:
        async def get() -> dict[str, Any]:
            return await sim_cluster.c.storage.get(kinds.PODS, namespace=ns, name="waiting")

        return bool(((await sim_cluster.arun(get)).get("spec") or {}).get("nodeName"))

    await wait_for("the waiting pod bound", bound)
    cases: list[tuple[str, dict[str, str], int, str, str]] = [
        ("nope", {}, 404, "NotFound", 'pods "nope" not found'),
        ("two", {}, 400, "BadRequest", "a container name must be specified for pod two, choose one of: "
                                       "[trainer sidecar]"),
        ("two", {"container": "other"}, 400, "BadRequest", "container other is not valid for pod two"),
        ("two", {"container": "sidecar", "previous": "true"}, 400, "BadRequest",
         'previous terminated container "sidecar" in pod "two" not found'),
        ("waiting", {}, 400, "BadRequest", 'container "main" in pod "waiting" is waiting to start: ContainerCreating'),
        ("two", {"tailLines": "-1", "container": "trainer"}, 422, "Invalid",
         'PodLogOptions "two" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0'),
        ("two", {"limitBytes": "0"}, 422, "Invalid", "limitBytes: Invalid value: 0: must be greater than 0"),
        ("two", {"sinceSeconds": "0"}, 422, "Invalid", "sinceSeconds: Invalid value: 0: must be greater than 0"),
        ("two", {"sinceSeconds": "5", "sinceTime": "2024-01-01T00:00:00Z"}, 422, "Invalid",
         "at most one of `sinceTime` or `sinceSeconds` may be specified"),
        ("two", {"stream": "Bogus"}, 422, "Invalid", 'stream: Unsupported value: "Bogus"'),
        ("two", {"tailLines": "ten"}, 400, "BadRequest", "tailLines: 'ten' is not an integer"),
        ("two", {"limitBytes": "99999999999999999999"}, 400, "BadRequest", "out of range"),
        ("two", {"sinceTime": "yesterday"}, 400, "BadRequest", "is not an RFC 3339 time"),
        ("two", {"sinceTime": "2024-01-01T00:00:00"}, 400, "BadRequest", "has no time zone"),
        ("two", {"container": "c" * 1_000}, 400, "BadRequest", "longer than 253 characters"),
    ]
    for name, query, code, reason, message in cases:
        got, body = await status(name, **query)
        assert (got, body["kind"], body["reason"]) == (code, "Status", reason), (name, query, body)
        assert message in body["message"], (name, query, body["message"])
        assert "c" * 300 not in body["message"]
    # a pod no node has taken: kube answers with an empty log
    code, content_type, text = await read_log(http, ns, "unbound")
    assert (code, text) == (200, "") and content_type.startswith("text/plain")
    # writes to the log subresource, and requests without a token, are refused
    async with http.post(log_path(ns, "two"), data=b"{}") as resp:
        assert resp.status == 405
    ctx = ssl.create_default_context(cadata=sim_cluster.c.ca_pem.decode())
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as anonymous:
        async with anonymous.get(sim_cluster.c.url + log_path(ns, "two")) as resp:
            assert resp.status == 401 and (await resp.json())["reason"] == "Unauthorized"
    # discovery lists pods/log as kube does
    async with http.get("/api/v1") as resp:
        entries = {r["name"]: r for r in (await resp.json())["resources"]}
    assert entries["pods/log"]["verbs"] == ["get"] and entries["pods/log"]["kind"] == "Pod"


async def test_a_follower_that_leaves_is_let_go(sim_cluster: ThreadedSim, http: aiohttp.ClientSession) -> None:
    ns = sim_cluster.new_namespace("leave")
    await create_pod(sim_cluster, ns, training_pod("forever"))
    server = sim_cluster.c._runner.server if sim_cluster.c._runner is not None else None
    assert server is not None

    def open_connections() -> int:
        return len(server.connections)

    before = await sim_cluster.arun(_value(open_connections))
    ctx = ssl.create_default_context(cadata=sim_cluster.c.ca_pem.decode())
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, force_close=True),
                                     headers={"Authorization": f"Bearer {sim_cluster.c.token}"}) as own:
        resp = await own.get(sim_cluster.c.url + log_path(ns, "forever"), params={"follow": "true"})
        assert (await asyncio.wait_for(resp.content.readline(), 20)).startswith(b"INFO")
        assert await sim_cluster.arun(_value(open_connections)) > before
        resp.close()   # the client goes away mid-stream

    async def released() -> bool:
        return await sim_cluster.arun(_value(open_connections)) <= before

    await wait_for("the follower's connection closed on the server", released)


def _value(fn: Any) -> Any:
    async def call() -> Any:
        return fn()

    return lambda: call()


# ---------------------------------------------------------------- clients


def test_the_python_client_reads_logs(sim_cluster: ThreadedSim) -> None:
    from kubernetes import client, config

    ns = sim_cluster.new_namespace("py")
    sim_cluster.run(lambda: create_pod(sim_cluster, ns, training_pod("py")))
    api = client.CoreV1Api(config.new_client_from_config(str(sim_cluster.kubeconfig)))
    try:
        deadline = time.monotonic() + 20
        text = ""
        while text.count("\n") < 5:
            assert time.monotonic() < deadline, text
            text = api.read_namespaced_pod_log("py", ns, tail_lines=5, timestamps=True)
        assert len(text.splitlines()) == 5 and all(STAMP.match(line) for line in text.splitlines())
    finally:
        api.api_client.close()


class _Kubectl:
    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.kubeconfig = kubeconfig
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
                    "KUBECONFIG": str(kubeconfig)}
        self.cache = home / "cache"

    def argv(self, *args: str) -> list[str]:
        return [KUBECTL, "--cache-dir", str(self.cache), "--request-timeout=20s", *args]

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def kubectl(sim_cluster: ThreadedSim, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Kubectl]:
    if not os.path.exists(KUBECTL):
        pytest.skip(f"kubectl not found at {KUBECTL}")
    yield _Kubectl(sim_cluster.kubeconfig, tmp_path_factory.mktemp("kubectl-logs-home"))


@pytest.mark.kubectl
def test_kubectl_logs_against_a_simulated_member(sim_cluster: ThreadedSim, kubectl: _Kubectl) -> None:
    ns = sim_cluster.new_namespace("kubectl")
    sim_cluster.run(lambda: create_pod(sim_cluster, ns, training_pod("one")))
    sim_cluster.run(lambda: create_pod(sim_cluster, ns, training_pod("pair", containers=("trainer", "sidecar"))))
    deadline = time.monotonic() + 20
    while True:
        out = kubectl("logs", "-n", ns, "one")
        assert out.returncode == 0, out.stderr
        if len(out.stdout.splitlines()) >= 10:
            break
        assert time.monotonic() < deadline
    assert out.stdout.startswith("INFO trainer: starting trainer:1.4 as main 0 of 1 ")
    tail = kubectl("logs", "-n", ns, "one", "--tail=4", "--timestamps")
    assert tail.returncode == 0 and len(tail.stdout.splitlines()) == 4
    assert all(STAMP.match(line) for line in tail.stdout.splitlines())
    sidecar = kubectl("logs", "-n", ns, "pair", "-c", "sidecar", "--tail=1")
    assert sidecar.returncode == 0 and len(sidecar.stdout.splitlines()) == 1, sidecar.stderr
    defaulted = kubectl("logs", "-n", ns, "pair", "--tail=1")   # kubectl picks the first container and says so
    assert defaulted.returncode == 0 and 'Defaulted container "trainer"' in defaulted.stderr
    previous = kubectl("logs", "-n", ns, "one", "-p")
    assert previous.returncode == 1
    assert previous.stderr.strip() == ('Error from server (BadRequest): previous terminated container "main" in pod '
                                       '"one" not found')
    missing = kubectl("logs", "-n", ns, "nope")
    assert missing.returncode == 1 and 'pods "nope" not found' in missing.stderr
    # -f streams: read a bounded number of lines from a pod that runs on, then stop kubectl
    proc = subprocess.Popen(kubectl.argv("logs", "-n", ns, "one", "-f", "--tail=1"), env=kubectl.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        got = [proc.stdout.readline() for _ in range(20)]   # more lines than existed when it started
        assert all(line.startswith("INFO trainer: ") for line in got), got
        steps = [int(m.group(2)) for line in got if (m := STEP.search(line))]
        assert steps == sorted(steps) and len(set(steps)) == len(steps) and len(steps) >= 18
    finally:
        proc.kill()
        proc.communicate(timeout=10)
