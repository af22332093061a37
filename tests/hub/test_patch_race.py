"""Patches as kube-apiserver does them (GuaranteedUpdate), over real HTTPS against a real hub:
a merge or JSON patch without a resourceVersion that loses the race for the stored revision is
read and applied again until it lands (or its request deadline passes, a 504 Timeout), never a
409; a patch that carries a stale metadata.resourceVersion is a precondition and stays a 409.

The race is real: the controllers' status write path (`guaranteed_update(..., subresource="status",
trusted_status=True)`) writes the same TrainingJob in a loop while the patches are in flight, and
the test checks (in the storage's debug log) that patches did lose races and were applied again.
(TrainingJob is a custom kind: strategic merge patch is a 415 for it, as in kube; strategic
patches race in tests/apiserver/test_conflict_retry.py.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import structlog

from .hubtest_support import TOKENS, RunningHub, job, jobs_url

PATCHES = 200
CLIENTS = 8
WRITERS = 4
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def _patch_for(i: int) -> tuple[str, Any]:
    """Patch number i: a merge patch mostly, a JSON patch every fifth; each sets its own annotation."""
    key = f"race.federator.dev/p{i}"
    if i % 5 == 4:
        return JSON_PATCH, [{"op": "add", "path": "/metadata/annotations/" + key.replace("/", "~1"), "value": "v"}]
    return MERGE, {"metadata": {"annotations": {key: "v"}}}


async def test_200_patches_racing_status_writes_give_no_conflict(hub: RunningHub) -> None:
    created = job("default", "race")
    created["metadata"]["annotations"] = {"seed": "x"}
    status, answer = await hub.request("POST", jobs_url("default"), body=created)
    assert status == 201, answer
    rt = hub.context.kind("TrainingJob")
    patches_done = asyncio.Event()
    status_writes = 0
    patched_while_racing = 0

    def requeue(obj: dict[str, Any]) -> dict[str, Any]:
        status = obj.setdefault("status", {})
        status["requeues"] = int(status.get("requeues") or 0) + 1
        return obj

    async def status_writer() -> None:
        nonlocal status_writes
        while not patches_done.is_set():
            await hub.context.storage.guaranteed_update(rt, namespace="default", name="race", mutate=requeue,
                                                        subresource="status", trusted_status=True)
            status_writes += 1
            await asyncio.sleep(0)

    answers: list[tuple[int, str, Any]] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(PATCHES):
        queue.put_nowait(i)
    headers = {"Authorization": f"Bearer {TOKENS['admin']}"}

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal patched_while_racing
        while not queue.empty():
            i = queue.get_nowait()
            content_type, body = _patch_for(i)
            before = status_writes
            async with session.patch(hub.url + jobs_url("default", "race"), data=json.dumps(body).encode(),
                                     headers={**headers, "Content-Type": content_type},
                                     ssl=hub.ssl_context()) as response:
                answers.append((response.status, content_type, await response.json()))
            if status_writes > before:
                patched_while_racing += 1

    writers = [asyncio.create_task(status_writer()) for _ in range(WRITERS)]
    try:
        with structlog.testing.capture_logs() as logs:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
                await asyncio.gather(*(client(session) for _ in range(CLIENTS)))
    finally:
        patches_done.set()
        await asyncio.gather(*writers)
    lost = [e for e in logs if e["event"] == "retrying after a write conflict"
            and e.get("waiting_for") == "conflict patching trainingjobs/race"]
    assert lost, "no patch lost a race: the test raced nothing"  # ~60 of 200 do, on an idle machine

    failed = [(code, ct, body.get("reason"), body.get("message")) for code, ct, body in answers if code != 200]
    assert failed == [] and len(answers) == PATCHES
    assert patched_while_racing > 0 and status_writes > 0  # the status writes did land among the patches
    stored = await hub.context.storage.get(rt, namespace="default", name="race")
    annotations = stored["metadata"]["annotations"]
    missing = [i for i in range(PATCHES) if annotations.get(f"race.federator.dev/p{i}") != "v"]
    assert missing == [] and annotations["seed"] == "x"  # every patch's change, none lost
    assert stored["status"]["requeues"] == status_writes  # and every status write's


async def test_a_patch_with_a_stale_resource_version_is_still_a_409(hub: RunningHub) -> None:
    status, created = await hub.request("POST", jobs_url("default"), body=job("default", "stale"))
    assert status == 201, created
    old_rv = created["metadata"]["resourceVersion"]
    status, answer = await hub.request("PATCH", jobs_url("default", "stale"), body={"metadata": {"labels": {"a": "1"}}},
                                       headers={"Content-Type": MERGE})
    assert status == 200, answer
    for content_type, body in (
        (MERGE, {"metadata": {"resourceVersion": old_rv, "labels": {"a": "2"}}}),
        (JSON_PATCH, [{"op": "replace", "path": "/metadata/resourceVersion", "value": old_rv},
                      {"op": "replace", "path": "/metadata/labels/a", "value": "2"}]),
    ):
        status, answer = await hub.request("PATCH", jobs_url("default", "stale"), body=body,
                                           headers={"Content-Type": content_type})
        assert (status, answer["reason"]) == (409, "Conflict"), answer
    stored = await hub.context.storage.get(hub.context.kind("TrainingJob"), namespace="default", name="stale")
    assert stored["metadata"]["labels"]["a"] == "1"


async def test_a_patch_past_its_deadline_is_a_504_timeout_and_changes_nothing(hub: RunningHub) -> None:
    status, created = await hub.request("POST", jobs_url("default"), body=job("default", "late"))
    assert status == 201, created
    # A deadline that has passed before the patch could be applied: kube's 504 Timeout Status.
    status, answer = await hub.request("PATCH", jobs_url("default", "late") + "?timeout=1ns",
                                       body={"metadata": {"labels": {"late": "yes"}}}, headers={"Content-Type": MERGE})
    assert status == 504, answer
    assert (answer["kind"], answer["status"], answer["reason"], answer["code"]) == ("Status", "Failure", "Timeout", 504)
    assert answer["message"].startswith("Timeout: request did not complete within requested timeout")
    stored = await hub.context.storage.get(hub.context.kind("TrainingJob"), namespace="default", name="late")
    assert "late" not in (stored["metadata"].get("labels") or {})
    # a timeout that is not a Go duration is a 400 that changes nothing; one that parses applies
    for bad in ("soon", "1", "5x", "-", "1.5.5s", "9" * 400 + "h"):
        status, answer = await hub.request("PATCH", jobs_url("default", "late") + "?timeout=" + bad,
                                           body={"metadata": {"labels": {"late": "yes"}}},
                                           headers={"Content-Type": MERGE})
        assert (status, answer["reason"]) == (400, "BadRequest"), (bad, answer)
        assert answer["message"].startswith("invalid timeout specified in the request URL - time: ")
        assert len(answer["message"]) < 200
    for good in ("30s", "1m30s", "0", "-1s", "2h"):  # 0, negative and longer than 60 s: the server's 60 s
        status, answer = await hub.request("PATCH", jobs_url("default", "late") + "?timeout=" + good,
                                           body={"metadata": {"labels": {"late": "yes"}}},
                                           headers={"Content-Type": MERGE})
        assert status == 200, (good, answer)
