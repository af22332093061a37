"""The storage's read-modify-write retry (`retry_on_conflict`): a lost race is read again and
resolves, a race lost every time is the caller's 409 after the limit (in-process writes), a patch
or an apply retries without a limit until its deadline (kube's GuaranteedUpdate: a 504 Timeout,
never a 409), and a 409 that is a decision (a precondition) is never retried.

The races are real: the kind's update admission (which runs between the read and the
compare-and-swap write) writes the same object through the same storage first."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from apitest_support import THINGS, WIDGETS, Api, widget

from federator.apiserver.errors import ApiError, conflict
from federator.apiserver.registry import JSONObject, Registry, SMPListStrategy
from federator.apiserver.storage import LostRace, ObjectStorage, _backoff, retry_on_conflict
from federator.obs import Metrics
from federator.store.memory import MemoryStore

LIMIT = 16  # storage's _UPDATE_RETRIES: the attempts a caller's write gets


@dataclasses.dataclass
class Racer:
    """Update admission that, `races` times, writes the object's status before the caller's write lands."""

    races: int = 0
    calls: int = 0

    async def __call__(self, storage: Any, new: JSONObject, old: JSONObject) -> None:
        self.calls += 1
        if self.races > 0:
            self.races -= 1
            meta = old["metadata"]

            def bump(obj: JSONObject) -> JSONObject:
                status = obj.setdefault("status", {})
                status["bumps"] = status.get("bumps", 0) + 1
                return obj

            await storage.guaranteed_update(RACY, namespace=meta["namespace"], name=meta["name"], mutate=bump,
                                            subresource="status")


RACER = Racer()
RACY = dataclasses.replace(WIDGETS, admit_update=RACER, managed_fields=True,
                           strategic_merge={"spec.items": SMPListStrategy("name")})


@pytest.fixture
async def racy() -> AsyncIterator[tuple[ObjectStorage, Metrics]]:
    metrics = Metrics()
    store = MemoryStore(prefix="/t/", retain_revisions=200, metrics=metrics)
    storage = ObjectStorage(store, Registry([RACY]))
    RACER.races = RACER.calls = 0
    await storage.create(RACY, widget("w1"), namespace="ns1")
    try:
        yield storage, metrics
    finally:
        await storage.close()
        await store.close()


def reads(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value("federator_store_operations_total",
                                              {"backend": "memory", "op": "get", "result": "ok"})
    return value or 0.0


def grow(obj: JSONObject) -> JSONObject:
    obj["spec"]["size"] += 1
    return obj


async def test_a_lost_race_is_read_again_and_resolves(racy: tuple[ObjectStorage, Metrics]) -> None:
    storage, _ = racy
    RACER.races = 3
    out = await storage.guaranteed_update(RACY, namespace="ns1", name="w1", mutate=grow)
    assert out is not None and RACER.calls == 4
    stored = await storage.get(RACY, namespace="ns1", name="w1")
    assert stored["spec"]["size"] == 2 and stored["status"]["bumps"] == 3  # neither writer's change lost


async def test_a_patch_and_an_apply_resolve_a_lost_race(racy: tuple[ObjectStorage, Metrics]) -> None:
    storage, _ = racy
    RACER.races = 2
    await storage.patch(RACY, namespace="ns1", name="w1", patch=b'{"spec": {"size": 5}}',
                        content_type="application/merge-patch+json")
    assert RACER.calls == 3
    RACER.races, RACER.calls = 2, 0
    applied, created = await storage.apply(RACY, namespace="ns1", name="w1", field_manager="t", force=True,
                                           config=widget("w1", size=7))
    assert not created and applied["spec"]["size"] == 7 and RACER.calls == 3
    assert (await storage.get(RACY, namespace="ns1", name="w1"))["status"]["bumps"] == 4


async def test_a_race_lost_every_time_is_a_409_after_the_limit(racy: tuple[ObjectStorage, Metrics]) -> None:
    storage, _ = racy
    RACER.races = 10**6
    with pytest.raises(ApiError) as e:
        await storage.guaranteed_update(RACY, namespace="ns1", name="w1", mutate=grow)
    assert (e.value.code, e.value.reason) == (409, "Conflict")
    assert RACER.calls == LIMIT
    assert (await storage.get(RACY, namespace="ns1", name="w1"))["spec"]["size"] == 1


@pytest.mark.parametrize(("content_type", "body"), [
    ("application/merge-patch+json", b'{"spec": {"size": 5, "items": [{"name": "a"}]}}'),
    ("application/json-patch+json", b'[{"op": "replace", "path": "/spec/size", "value": 5},'
                                    b' {"op": "add", "path": "/spec/items", "value": [{"name": "a"}]}]'),
    ("application/strategic-merge-patch+json", b'{"spec": {"size": 5, "items": [{"name": "a"}]}}'),
])
async def test_a_patch_outlasts_any_number_of_lost_races(racy: tuple[ObjectStorage, Metrics], content_type: str,
                                                          body: bytes) -> None:
    """Past the in-process limit: each attempt applies the patch to the object as just read (the
    status the racer wrote meanwhile survives), and the patch lands."""
    storage, _ = racy
    RACER.races = 3 * LIMIT
    out = await storage.patch(RACY, namespace="ns1", name="w1", patch=body, content_type=content_type)
    assert RACER.calls == 3 * LIMIT + 1
    stored = await storage.get(RACY, namespace="ns1", name="w1")
    assert stored["spec"]["size"] == 5 and stored["spec"]["items"] == [{"name": "a"}]
    assert stored["status"]["bumps"] == 3 * LIMIT and out["metadata"]["resourceVersion"] == \
        stored["metadata"]["resourceVersion"]


async def test_an_apply_outlasts_any_number_of_lost_races(racy: tuple[ObjectStorage, Metrics]) -> None:
    storage, _ = racy
    RACER.races = 2 * LIMIT
    applied, created = await storage.apply(RACY, namespace="ns1", name="w1", field_manager="t", force=True,
                                           config=widget("w1", size=9))
    assert not created and applied["spec"]["size"] == 9 and RACER.calls == 2 * LIMIT + 1


@pytest.mark.parametrize("verb", ["patch", "apply"])
async def test_a_race_lost_until_the_deadline_is_a_504_timeout(racy: tuple[ObjectStorage, Metrics],
                                                               verb: str) -> None:
    storage, _ = racy
    RACER.races = 10**9
    deadline = asyncio.get_running_loop().time() + 0.3
    with pytest.raises(ApiError) as e:
        if verb == "patch":
            await storage.patch(RACY, namespace="ns1", name="w1", patch=b'{"spec": {"size": 5}}',
                                content_type="application/merge-patch+json", deadline=deadline)
        else:
            await storage.apply(RACY, namespace="ns1", name="w1", field_manager="t", force=True,
                                config=widget("w1", size=9), deadline=deadline)
    assert (e.value.code, e.value.reason) == (504, "Timeout")
    assert e.value.message.startswith("Timeout: request did not complete within requested timeout")
    assert RACER.calls >= 1  # it raced, and stopped at the deadline (the limit is not one: see above)
    stored = await storage.get(RACY, namespace="ns1", name="w1")
    assert stored["spec"]["size"] == 1 and stored["status"]["bumps"] == RACER.calls


async def test_a_deadline_already_past_writes_nothing(racy: tuple[ObjectStorage, Metrics]) -> None:
    storage, metrics = racy
    before = reads(metrics)
    with pytest.raises(ApiError) as e:
        await storage.patch(RACY, namespace="ns1", name="w1", patch=b'{"spec": {"size": 5}}',
                            content_type="application/merge-patch+json",
                            deadline=asyncio.get_running_loop().time() - 1)
    assert e.value.code == 504 and reads(metrics) == before and RACER.calls == 0


async def test_a_failed_json_patch_test_is_a_422_decided_on_the_fresh_object(racy: tuple[ObjectStorage, Metrics]) -> None:
    """A JSON patch `test` op is checked against each fresh read: one that fails is kube's 422, at once."""
    storage, metrics = racy
    RACER.races = 2
    out = await storage.patch(RACY, namespace="ns1", name="w1", content_type="application/json-patch+json",
                              patch=b'[{"op": "test", "path": "/spec/size", "value": 1},'
                                    b' {"op": "replace", "path": "/spec/size", "value": 2}]')
    assert out["spec"]["size"] == 2 and RACER.calls == 3
    before = reads(metrics)
    with pytest.raises(ApiError) as e:
        await storage.patch(RACY, namespace="ns1", name="w1", content_type="application/json-patch+json",
                            patch=b'[{"op": "test", "path": "/spec/size", "value": 1},'
                                  b' {"op": "replace", "path": "/spec/size", "value": 3}]')
    assert (e.value.code, e.value.reason) == (422, "Invalid") and reads(metrics) - before == 1
    assert (await storage.get(RACY, namespace="ns1", name="w1"))["spec"]["size"] == 2


@pytest.mark.parametrize("verb", ["patch", "delete-rv", "delete-uid"])
async def test_a_precondition_failure_is_never_retried(racy: tuple[ObjectStorage, Metrics], verb: str) -> None:
    storage, metrics = racy
    before = reads(metrics)
    with pytest.raises(ApiError) as e:
        if verb == "patch":  # a resourceVersion in the patch is a precondition
            await storage.patch(RACY, namespace="ns1", name="w1", content_type="application/merge-patch+json",
                                patch=b'{"metadata": {"resourceVersion": "1"}, "spec": {"size": 5}}')
        elif verb == "delete-rv":
            await storage.delete(RACY, namespace="ns1", name="w1", precondition_resource_version="1")
        else:
            await storage.delete(RACY, namespace="ns1", name="w1", precondition_uid="not-the-uid")
    assert (e.value.code, e.value.reason) == (409, "Conflict")
    assert reads(metrics) - before == 1  # one read: no second attempt
    assert RACER.calls == 0
    assert (await storage.get(RACY, namespace="ns1", name="w1"))["spec"]["size"] == 1


# ---------------------------------------------------------------- the helper itself


def lost() -> LostRace:
    return LostRace(conflict(WIDGETS, "w1"))


@pytest.mark.parametrize(("losses", "attempts", "outcome"), [
    (0, 16, "won"),
    (1, 16, "won"),
    (15, 16, "won"),  # the last attempt still counts
    (16, 16, "409"),
    (3, 3, "409"),
    (1, 1, "409"),
])
async def test_retry_on_conflict(losses: int, attempts: int, outcome: str) -> None:
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        if calls <= losses:
            raise lost()
        return "won"

    if outcome == "won":
        assert await retry_on_conflict(attempt, what="t", attempts=attempts) == "won"
        assert calls == losses + 1
    else:
        with pytest.raises(ApiError) as e:
            await retry_on_conflict(attempt, what="t", attempts=attempts)
        assert e.value.code == 409 and calls == attempts


async def test_anything_but_a_lost_race_is_raised_at_once() -> None:
    calls = 0

    async def attempt() -> None:
        nonlocal calls
        calls += 1
        raise conflict(WIDGETS, "w1", "Precondition failed: UID in precondition: a, UID in object meta: b")

    with pytest.raises(ApiError, match="Precondition failed"):
        await retry_on_conflict(attempt, what="t")
    assert calls == 1
    with pytest.raises(ValueError):
        await retry_on_conflict(attempt, what="t", attempts=0)


async def test_no_attempt_limit_retries_until_won() -> None:
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        if calls <= 5 * LIMIT:
            raise lost()
        return "won"

    assert await retry_on_conflict(attempt, what="t", attempts=None) == "won"
    assert calls == 5 * LIMIT + 1


# ---------------------------------------------------------------- over HTTP, strategic patches included


async def test_strategic_merge_and_json_patches_racing_status_writes_over_http(api: Api) -> None:
    """Strategic (spec.items merged by name), merge and JSON patches from concurrent clients of a
    real socket race status writes of the same Thing: every one is a 200 and every change is kept."""
    await api.storage.create(THINGS, {"apiVersion": "v1", "kind": "Thing", "metadata": {"name": "t1",
                                      "annotations": {"seed": "x"}}, "spec": {"items": [{"name": "seed"}]}},
                             namespace="ns1")
    done = asyncio.Event()
    writes = 0

    def bump(obj: JSONObject) -> JSONObject:
        status = obj.setdefault("status", {})
        status["bumps"] = status.get("bumps", 0) + 1
        return obj

    async def status_writer() -> None:
        nonlocal writes
        while not done.is_set():
            await api.storage.guaranteed_update(THINGS, namespace="ns1", name="t1", mutate=bump, subresource="status")
            writes += 1
            await asyncio.sleep(0)

    def patch_for(i: int) -> tuple[str, bytes]:
        if i % 3 == 0:
            return "application/strategic-merge-patch+json", orjson.dumps({"spec": {"items": [{"name": f"i{i}"}]}})
        if i % 3 == 1:
            return "application/json-patch+json", orjson.dumps(
                [{"op": "add", "path": f"/metadata/annotations/p{i}", "value": "v"}])
        return "application/merge-patch+json", orjson.dumps({"metadata": {"annotations": {f"p{i}": "v"}}})

    pending = list(range(60))
    codes: list[tuple[int, Any]] = []

    async def client() -> None:
        while pending:
            content_type, body = patch_for(pending.pop())
            code, answer, _ = await api.request("PATCH", "/api/v1/namespaces/ns1/things/t1", data=body,
                                                headers={"Content-Type": content_type})
            codes.append((code, answer if code != 200 else None))

    writers = [asyncio.create_task(status_writer()) for _ in range(3)]
    try:
        await asyncio.gather(*(client() for _ in range(6)))
    finally:
        done.set()
        await asyncio.gather(*writers)
    assert [c for c in codes if c[0] != 200] == [] and len(codes) == 60
    stored = await api.storage.get(THINGS, namespace="ns1", name="t1")
    names = {item["name"] for item in stored["spec"]["items"]}
    assert names == {"seed"} | {f"i{i}" for i in range(0, 60, 3)}
    annotations = stored["metadata"]["annotations"]
    assert {k for k in annotations if k != "seed"} == {f"p{i}" for i in range(60) if i % 3}
    assert writes > 0 and stored["status"]["bumps"] == writes


async def test_the_backoff_of_a_very_long_race_stays_capped_and_within_the_deadline() -> None:
    """A patch may retry for 60 s: the millionth retry's backoff must neither overflow nor outlast the deadline."""
    loop = asyncio.get_running_loop()
    await _backoff(10**6, what="t", deadline=loop.time())  # capped, then clipped to the deadline: returns
    await _backoff(10**6, what="t", deadline=None)  # capped at 0.1 s
