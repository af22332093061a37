"""The Event recorder (federator/apiserver/events.py) over a real sqlite store and the hub's kinds.

- the same event again raises count, lastTimestamp and series of one stored Event (no new object);
- more than 10 different messages for one (object, reason) become one combined Event;
- a token bucket per object drops what is over it, refills with time, and dropped repeats still count;
- record() never raises and never waits, whatever it is given (garbage objects, a full queue);
- a writer that cannot write (a deposed leader's fenced store) logs, retries, drops, and stays alive;
- Events not seen for the TTL are deleted by one expiry pass, fresh ones kept, and a later repeat of an
  expired Event creates it again;
- the events.k8s.io/v1 view shows the same stored objects converted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from federator.apiserver.events import EventRecorder, to_events_v1
from federator.apiserver.registry import ResourceType
from federator.apiserver.storage import ObjectStorage
from federator.hub.kinds import hub_registry
from federator.obs import Metrics
from federator.store.leader import FencedStore, FencingToken
from federator.store.open import open_store
from federator.store.protocol import Store


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await open_store(f"sqlite://{tmp_path / 'hub.db'}", prefix="/federator/", metrics=Metrics())
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def storage(store: Store) -> AsyncIterator[ObjectStorage]:
    st = ObjectStorage(store, hub_registry(), autoprovision_namespaces=True)  # events in namespaces nobody made
    await st.start()
    try:
        yield st
    finally:
        await st.close()


def core(storage: ObjectStorage) -> ResourceType:
    rt = storage.registry.get("", "v1", "events")
    assert rt is not None
    return rt


def view(storage: ObjectStorage) -> ResourceType:
    rt = storage.registry.get("events.k8s.io", "v1", "events")
    assert rt is not None
    return rt


def job(name: str = "resnet", namespace: str = "team-a", uid: str = "uid-1") -> dict[str, Any]:
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": namespace, "uid": uid}}


@pytest.fixture
async def running(storage: ObjectStorage) -> AsyncIterator[tuple[EventRecorder, Clock]]:
    clock = Clock()
    recorder = EventRecorder(instance="test", clock=clock, metrics=Metrics(), ttl_seconds=3600.0)
    task = asyncio.create_task(recorder.run(storage, core(storage)))
    try:
        yield recorder, clock
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def events(storage: ObjectStorage, **kw: Any) -> list[dict[str, Any]]:
    return (await storage.list(core(storage), **kw)).items


async def test_the_same_event_again_raises_the_count_of_one_event(
        storage: ObjectStorage, running: tuple[EventRecorder, Clock]) -> None:
    recorder, clock = running
    recorder.record(job(), controller="placement", reason="Placed", message="placed in c1, score 3.0")
    assert await recorder.flush(10)
    [first] = await events(storage)
    assert first["count"] == 1 and "series" not in first
    assert first["involvedObject"] == {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
                                       "name": "resnet", "namespace": "team-a", "uid": "uid-1"}
    assert first["source"] == {"component": "federator-placement"}
    assert first["reportingComponent"] == "federator.dev/placement" and first["type"] == "Normal"
    assert first["metadata"]["name"].startswith("resnet.")
    for _ in range(4):
        clock.now += 30
        recorder.record(job(), controller="placement", reason="Placed", message="placed in c1, score 3.0")
    assert await recorder.flush(10)
    [again] = await events(storage)
    assert again["metadata"]["uid"] == first["metadata"]["uid"]
    assert again["count"] == 5 and again["series"]["count"] == 5
    assert again["firstTimestamp"] == first["firstTimestamp"]
    assert again["lastTimestamp"] == "2027-01-15T08:02:00Z"  # 120 s after the first
    assert again["series"]["lastObservedTime"] == "2027-01-15T08:02:00.000000Z"
    # another message, reason, type or object is another Event
    recorder.record(job(), controller="placement", reason="Placed", message="placed in c2, score 1.0")
    recorder.record(job(), controller="placement", reason="Placed", message="placed in c1, score 3.0", warning=True)
    recorder.record(job(uid="uid-2", name="other"), controller="placement", reason="Placed",
                    message="placed in c1, score 3.0")
    assert await recorder.flush(10)
    assert len(await events(storage)) == 4


async def test_many_messages_for_one_reason_are_combined(
        storage: ObjectStorage, running: tuple[EventRecorder, Clock]) -> None:
    recorder, clock = running
    for i in range(24):  # within the object's burst of 25
        clock.now += 1
        recorder.record(job(), controller="placement", reason="NoClusterFits", message=f"cycle {i}: c1 full",
                        warning=True)
    assert await recorder.flush(10)
    stored = await events(storage)
    combined = [e for e in stored if e["message"].startswith("(combined from similar events): ")]
    assert len(stored) == 11  # ten on their own, then one that the rest raise
    assert len(combined) == 1 and combined[0]["count"] == 14
    assert combined[0]["message"].endswith("cycle 23: c1 full")


async def test_a_token_bucket_per_object_drops_a_flood_and_refills(
        storage: ObjectStorage, running: tuple[EventRecorder, Clock]) -> None:
    recorder, clock = running
    for i in range(40):
        recorder.record(job(), controller="placement", reason=f"Reason{i}", message="m")
    recorder.record(job(uid="uid-2", name="calm"), controller="placement", reason="Placed", message="m")
    assert await recorder.flush(10)
    assert recorder.counts["ratelimited"] == 15
    assert len([e for e in await events(storage) if e["involvedObject"]["name"] == "resnet"]) == 25
    assert len([e for e in await events(storage) if e["involvedObject"]["name"] == "calm"]) == 1
    # one token per 300 s: a repeat of Reason0 gets through 10 minutes later and says how often it happened
    recorder.record(job(), controller="placement", reason="Reason0", message="m")  # dropped, still counted
    clock.now += 600
    recorder.record(job(), controller="placement", reason="Reason0", message="m")
    assert await recorder.flush(10)
    [reason0] = await events(storage, field_selector="reason=Reason0")
    assert reason0["count"] == 3


async def test_record_never_raises_and_never_waits(storage: ObjectStorage) -> None:
    recorder = EventRecorder(metrics=Metrics(), max_pending=5)  # no writer runs: nothing drains
    hostile: list[Any] = [{}, {"metadata": []}, {"metadata": {"name": 7}}, {"kind": "Job", "metadata": {"name": "x"}},
                          job(name="")]
    for obj in hostile:
        recorder.record(obj, controller="placement", reason="Placed", message="m")
    assert recorder.counts == {"invalid": 5}
    recorder.record(job(), controller="placement", reason="Placed", message=None)  # type: ignore[arg-type]
    assert recorder.counts["failed"] == 1
    for i in range(8):
        recorder.record(job(uid=f"u{i}", name=f"j{i}"), controller="placement", reason="Placed", message="m")
    assert recorder.pending == 5 and recorder.counts["dropped"] == 3
    assert await events(storage) == []


async def test_a_deposed_writer_logs_retries_and_drops_without_dying(
        store: Store, storage: ObjectStorage, capsys: pytest.CaptureFixture[str]) -> None:
    stale = FencingToken(key="/federator/leader/hub", revision=999_999, holder="gone")
    fenced = storage.writing_through(FencedStore(store, stale, metrics=Metrics()))
    recorder = EventRecorder(metrics=Metrics())
    task = asyncio.create_task(recorder.run(fenced, core(storage), retries=1, backoff=0.01))
    try:
        for i in range(3):
            recorder.record(job(uid=f"u{i}", name=f"j{i}"), controller="placement", reason="Placed", message="m")
        assert await recorder.flush(10)
        for _ in range(200):
            if recorder.counts.get("failed") == 3:
                break
            await asyncio.sleep(0.01)
        assert recorder.counts["failed"] == 3 and not task.done()
    finally:
        task.cancel()
    assert await events(storage) == []
    out = capsys.readouterr().out
    assert out.count("could not write an Event") == 1  # the first failure in full, the rest counted


async def test_expiry_deletes_only_events_older_than_the_ttl(
        storage: ObjectStorage, running: tuple[EventRecorder, Clock]) -> None:
    recorder, clock = running
    recorder.record(job(name="old", uid="u-old"), controller="placement", reason="Placed", message="m")
    clock.now += 3000
    recorder.record(job(name="young", uid="u-young"), controller="placement", reason="Placed", message="m")
    assert await recorder.flush(10)
    clock.now += 700  # old: 3700 s, young: 700 s
    assert await recorder.expire(storage, core(storage)) == 1
    assert [e["involvedObject"]["name"] for e in await events(storage)] == ["young"]
    # the expired Event is written again (as a new object) when it happens again
    recorder.record(job(name="old", uid="u-old"), controller="placement", reason="Placed", message="m")
    assert await recorder.flush(10)
    names = sorted(e["involvedObject"]["name"] for e in await events(storage))
    assert names == ["old", "young"]
    [old] = await events(storage, field_selector="involvedObject.name=old")
    assert old["count"] == 2


async def test_the_events_v1_view_shows_the_same_objects(
        storage: ObjectStorage, running: tuple[EventRecorder, Clock]) -> None:
    recorder, _ = running
    recorder.record(job(), controller="dispatch", reason="Dispatched", message="gang created in c1")
    recorder.record(job(), controller="dispatch", reason="Dispatched", message="gang created in c1")
    assert await recorder.flush(10)
    [stored] = await events(storage)
    [seen] = (await storage.list(view(storage), field_selector="regarding.name=resnet,reportingController="
                                                                "federator.dev/dispatch")).items
    assert seen == stored  # one storage: the view reads the stored form ...
    shown = to_events_v1(seen)  # ... and the API shows it converted
    assert shown["apiVersion"] == "events.k8s.io/v1" and shown["note"] == "gang created in c1"
    assert shown["regarding"] == stored["involvedObject"] and shown["deprecatedCount"] == 2
    assert shown["series"] == stored["series"] and shown["reportingController"] == "federator.dev/dispatch"
    assert shown["deprecatedSource"] == {"component": "federator-dispatch"}
    assert "involvedObject" not in shown and "message" not in shown and seen == stored  # not mutated


async def test_the_writer_keeps_to_its_write_rate(storage: ObjectStorage) -> None:
    """At (next to) zero writes per second only the first second's burst (one Event) is written; the rest
    wait (coalescing repeats) instead of crowding the store."""
    recorder = EventRecorder(metrics=Metrics(), writes_per_second=1e-9)
    task = asyncio.create_task(recorder.run(storage, core(storage)))
    try:
        for i in range(3):
            recorder.record(job(uid=f"u{i}", name=f"j{i}"), controller="placement", reason="Placed", message="m")
        assert not await recorder.flush(0.5)
        assert recorder.counts.get("written") == 1 and recorder.pending == 2
        assert len(await events(storage)) == 1
    finally:
        task.cancel()


async def test_an_event_of_a_twin_is_also_recorded_on_its_upstream_object(storage: ObjectStorage) -> None:
    """The hub's recorder (controllers/events.py) records a twin TrainingJob's Events on the PyTorchJob (or any
    upstream kind) it stands for too; a TrainingJob submitted as one, or one whose owner is not its annotated
    kind (a hand-made annotation), gets its Events alone."""
    from federator.apis.jobkinds import SOURCE_KIND_ANNOTATION, source_of_twin

    recorder = EventRecorder(metrics=Metrics(), also_on=source_of_twin)
    task = asyncio.create_task(recorder.run(storage, core(storage)))
    try:
        owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "resnet", "uid": "src-1",
                 "controller": True}
        twin = job()
        twin["metadata"] |= {"annotations": {SOURCE_KIND_ANNOTATION: "PyTorchJob.kubeflow.org"},
                             "ownerReferences": [owner]}
        recorder.record(twin, controller="placement", reason="Placed", message="placed in c1")
        plain = job(name="plain", uid="uid-2")
        recorder.record(plain, controller="placement", reason="Placed", message="placed in c1")
        forged = job(name="forged", uid="uid-3")
        forged["metadata"] |= {"annotations": {SOURCE_KIND_ANNOTATION: "PyTorchJob.kubeflow.org"},
                               "ownerReferences": [{**owner, "kind": "TFJob", "uid": "src-3"}]}
        recorder.record(forged, controller="placement", reason="Placed", message="placed in c1")
        assert await recorder.flush(10)
        involved = sorted((e["involvedObject"]["kind"], e["involvedObject"]["name"], e["involvedObject"]["uid"])
                          for e in await events(storage))
        assert involved == [("PyTorchJob", "resnet", "src-1"), ("TrainingJob", "forged", "uid-3"),
                            ("TrainingJob", "plain", "uid-2"), ("TrainingJob", "resnet", "uid-1")]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
