"""The logs of a job's pods through the hub: `GET .../trainingjobs/NAME/log` (role, index and kube's
PodLogOptions) and `federator logs`, against a real hub with its controllers and a real simulated
member (lifecycle_env): one pod or all of them (prefixed), tail and follow, authorisation as the job's
(403 for another namespace's researcher), clear errors (not placed yet, unknown role or index, the pod
gone, the member unreachable), a hub that does not lead (its own member client for the request), and
every member log stream closed when the client leaves."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest

from federator.apiserver.podlog import LogOptions
from federator.cli import main as cli_main
from federator.clusters.client import PODS
from federator.controllers.context import HubContext
from federator.controllers.joblogs import open_job_log
from federator.sim import containerlogs

from ..controllers.jobtest_support import phase, wait_until
from ..controllers.lifecycle_support import Env, aimed_job, lifecycle_env
from .hubtest_support import TOKENS

CLUSTER = "onprem-rdma-a100"
NS = "default"   # the test researcher's namespace (hubtest_support.TOKEN_FILE)
LINE = re.compile(rb"^\[(ps|worker)-(\d)\] INFO (trainer|ps\[\d\]): ")
HOUSE_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[")


@pytest.fixture(autouse=True)
def fast_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # the simulated members run in this process: their containers print a line every 0.05 s
    monkeypatch.setattr(containerlogs, "DEFAULT_LOG_INTERVAL_SECONDS", 0.05)
    yield


def log_url(name: str, namespace: str = NS) -> str:
    return f"/apis/federator.dev/v1alpha1/namespaces/{namespace}/trainingjobs/{name}/log"


async def running_job(env: Env, name: str) -> dict[str, Any]:
    await env.api.submit(aimed_job(name, CLUSTER, namespace=NS, workers=2, gpus=1))
    return await env.api.wait_job(NS, name, lambda j: phase(j) == "Running", timeout=30, what="Running")


def open_streams(env: Env) -> int:
    return int(env.fed.sims[CLUSTER].stats()["openLogStreams"])


async def get_log(env: Env, name: str, who: str = "admin", **query: str) -> tuple[int, Any]:
    path = log_url(name) + ("?" + urlencode(query) if query else "")
    return await env.hub.request("GET", path, who=who)


async def test_the_logs_of_a_jobs_pods_through_the_hub(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        job = await running_job(env, "j1")
        epoch = job["status"]["placement"]["epoch"]

        async def worker_lines(n: int) -> str | None:
            code, text = await get_log(env, "j1", role="worker", index="0")
            return text if code == 200 and text.count("\n") >= n else None

        one = await wait_until(lambda: worker_lines(20), timeout=20, what="20 lines of worker 0")
        assert one.startswith(f"INFO trainer: starting trainer:1.4 as worker 0 of 2 (job {NS}/j1, attempt {epoch}, ")
        assert "gang of 3 pods: ps=1,worker=2" in one.splitlines()[0]
        assert not one.startswith("[")   # one pod: its lines as it printed them

        # every pod, each line prefixed, in the job's role order
        code, every = await get_log(env, "j1")
        assert code == 200
        lines = every.encode().splitlines(keepends=True)
        assert all(LINE.match(line) for line in lines), lines[:3]
        assert {line.split(b"]")[0] for line in lines} == {b"[ps-0", b"[worker-0", b"[worker-1"}
        assert lines[0].startswith(b"[ps-0] INFO ps[0]: starting") or b"starting" in lines[0]
        # one role, the last two lines of each pod
        code, tail = await get_log(env, "j1", role="worker", tailLines="2", timestamps="true")
        assert code == 200 and len(tail.splitlines()) == 4
        assert [line.split("]")[0] for line in tail.splitlines()] == ["[worker-0"] * 2 + ["[worker-1"] * 2
        code, cut = await get_log(env, "j1", role="worker", index="1", limitBytes="7")
        assert (code, cut) == (200, "INFO tr")

        # researchers read the jobs of their namespaces only; viewers read everything
        assert (await get_log(env, "j1", who="researcher", role="ps", index="0", tailLines="1"))[0] == 200
        assert (await get_log(env, "j1", who="viewer", role="ps", index="0", tailLines="1"))[0] == 200
        code, denied = await get_log(env, "j1", who="other", role="ps", index="0")
        assert code == 403 and denied["reason"] == "Forbidden"
        assert 'cannot get resource "trainingjobs/log"' in denied["message"]
        assert (await get_log(env, "j1", who=None))[0] == 401

        # clear errors, each a Status
        await env.api.submit(aimed_job("pending", "no-such-cluster", namespace=NS))
        cases: list[tuple[str, dict[str, str], int, str]] = [
            ("pending", {}, 400, f"trainingjob {NS}/pending is not placed yet (phase "),
            ("nope", {}, 404, 'trainingjobs.federator.dev "nope" not found'),
            ("j1", {"role": "chief"}, 400, 'has no role "chief" (roles: ps, worker)'),
            ("j1", {"role": "worker", "index": "2"}, 400, "index 2 is out of range for role worker"),
            ("j1", {"index": "0"}, 400, "query parameter index needs role"),
            ("j1", {"role": "Bad_Role"}, 400, "is not a role name"),
            ("j1", {"role": "worker", "index": "-1"}, 400, "is not a non-negative integer"),
            ("j1", {"role": "worker", "index": "9" * 30}, 400, "is not a non-negative integer"),
            ("j1", {"role": "worker", "index": "\u00b2"}, 400, "is not a non-negative integer"),  # isdigit() takes it
            ("j1", {"role": "worker\n"}, 400, "is not a role name"),
            ("j1", {"tailLines": "-3"}, 422, "tailLines: Invalid value: -3: must be greater than or equal to 0"),
            ("j1", {"sinceSeconds": "x"}, 400, "sinceSeconds: 'x' is not an integer"),
            ("j1", {"role": "worker", "index": "0", "previous": "true"}, 400,
             f'cluster {CLUSTER}: previous terminated container "worker" in pod '),
        ]
        for name, query, status, message in cases:
            code, body = await get_log(env, name, **query)
            assert (code, body["kind"]) == (status, "Status"), (name, query, body)
            assert message in body["message"], (name, query, body["message"])
        code, _ = await env.hub.request("POST", log_url("j1"), body={})
        assert code == 405

        # kubectl reads the subresource; the federator CLI prints it
        rc, out, err = await env.hub.kubectl("researcher", "get", "--raw",
                                             log_url("j1") + "?role=worker&index=1&tailLines=3")
        assert rc == 0 and len(out.splitlines()) == 3 and "INFO trainer: epoch " in out, err
        async def cli(who: str, *args: str) -> tuple[int, str, str]:
            # in this process (a thread: the command runs its own event loop); the real process is below
            capsys.readouterr()
            rc = await asyncio.to_thread(cli_main, ["logs", *args, "--kubeconfig", str(env.hub.kubeconfigs[who])])
            out, err = capsys.readouterr()
            # the hub and the member log to this process's stdout too: keep what the command printed
            printed = [line for line in out.splitlines(keepends=True) if not HOUSE_LOG.match(line)]
            return rc, "".join(printed), err

        rc, out, err = await cli("researcher", "j1", "--role", "worker", "--index", "0", "--tail", "5",
                                 "--timestamps")
        assert rc == 0 and len(out.splitlines()) == 5, err
        assert all(re.match(r"^\d{4}-\d\d-\d\dT[0-9:.]+Z INFO trainer: ", line) for line in out.splitlines())
        rc, out, err = await cli("researcher", "j1", "--tail", "1", "--since", "1h")
        assert rc == 0 and sorted(line.split("]")[0] for line in out.splitlines()) == \
            ["[ps-0", "[worker-0", "[worker-1"], err
        rc, out, err = await cli("other", "j1", "-n", NS)
        assert rc == 1 and out == "" and err.startswith("Error from server (Forbidden): ")
        rc, out, err = await cli("researcher", "pending")
        assert rc == 1 and "is not placed yet" in err and "Traceback" not in err
        for bad, why in ((["--index", "0"], "--index needs --role"), (["--tail", "-2"], "--tail -2"),
                         (["--since", "soon"], "--since 'soon'"), (["--limit-bytes", "0"], "--limit-bytes 0")):
            rc, out, err = await cli("researcher", "j1", *bad)
            assert rc == 2 and err.startswith("error: ") and why in err and err.count("\n") == 1, err
        # -f with a bounded read: lines keep coming, then the reader stops it
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "federator.cli", "logs", "j1", "--role", "worker", "--index", "1", "-f",
            "--tail", "1", "--kubeconfig", str(env.hub.kubeconfigs["researcher"]),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
        try:
            assert process.stdout is not None
            followed = [await asyncio.wait_for(process.stdout.readline(), 20) for _ in range(15)]
            steps = [int(m.group(1)) for line in followed if (m := re.search(rb" step (\d+) ", line))]
            assert len(steps) >= 13 and steps == sorted(set(steps)), followed
        finally:
            process.kill()
            await process.communicate()
        await wait_until(lambda: open_streams(env) == 0 or None, timeout=10, what="the CLI's member stream closed")


async def test_job_log_streams_end_with_the_client_and_fail_clearly(tmp_path: Any) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        await running_job(env, "j2")
        assert open_streams(env) == 0
        hub = env.hub
        headers = {"Authorization": f"Bearer {TOKENS['researcher']}"}
        for query in ({"role": "worker", "index": "0", "follow": "true"}, {"follow": "true"}):
            async with aiohttp.ClientSession(headers=headers) as session:
                response = await session.get(hub.url + log_url("j2"), params=query, ssl=hub.ssl_context())
                assert response.status == 200 and response.headers["Content-Type"].startswith("text/plain")
                seen = [await asyncio.wait_for(response.content.readline(), 20) for _ in range(10)]
                assert all(line.endswith(b"\n") for line in seen)
                wanted = 1 if "role" in query else 3
                # one member stream per followed pod; the hub opens them side by side, so the first ten lines
                # may all come from two pods before the third stream is open (seen under load)
                await wait_until(lambda: open_streams(env) == wanted or None, timeout=20,
                                 what=f"{wanted} member log streams open ({query})")
                response.close()   # the client leaves mid-stream
            await wait_until(lambda: open_streams(env) == 0 or None, timeout=30,
                             what=f"every member log stream closed after the client left ({query})")

        # a hub that does not lead has no member sync: it makes a member client for the request
        follower = HubContext(store=hub.context.store, storage=hub.context.storage, registry=hub.context.registry,
                              settings=hub.context.settings, metrics=hub.context.metrics)
        job = await env.api.get(NS, "j2")
        async with open_job_log(follower, job, role="ps", index=0, options=LogOptions(tail_lines=2)) as chunks:
            text = b"".join([chunk async for chunk in chunks])
        assert len(text.splitlines()) == 2 and text.startswith(b"INFO ps[0]: ")
        assert open_streams(env) == 0

        # the member does not answer: 503 naming the cluster
        sim = env.fed.sims[CLUSTER]
        await sim.faults.start_outage(30, mode="refuse")
        try:
            code, body = await get_log(env, "j2", role="worker", index="0")
            assert (code, body["reason"]) == (503, "ServiceUnavailable"), body
            assert f"cluster {CLUSTER}, which holds trainingjob {NS}/j2, did not answer" in body["message"]
            assert f":{sim.port}" not in body["message"]  # the member's address is for the hub's log only
        finally:
            await sim.faults.end_outage()

        # the pod is gone from the member: 404 saying so (the other pods still answer)
        member = await env.member(CLUSTER)
        pods = (await member.list_all(PODS, namespace=NS, label_selector="federator.dev/role=worker")).items
        gone = next(p for p in pods if p["metadata"]["labels"]["federator.dev/index"] == "1")
        await member.delete(PODS, namespace=NS, name=gone["metadata"]["name"], grace_period_seconds=0)

        async def deleted() -> bool:
            names = {p["metadata"]["name"] for p in (await member.list_all(PODS, namespace=NS)).items}
            return gone["metadata"]["name"] not in names

        await wait_until(deleted, timeout=10, what="the worker pod deleted")
        code, body = await get_log(env, "j2", role="worker", index="1")
        assert code == 404 and "has no pod worker-1 in cluster" in body["message"], body
        code, text = await get_log(env, "j2", role="worker", tailLines="1")
        assert code == 200 and [line.split("]")[0] for line in text.splitlines()] == ["[worker-0"]
