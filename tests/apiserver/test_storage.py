"""ObjectStorage semantics over a real MemoryStore: metadata, resourceVersion,
generation, status subresource, finalizers, graceful delete, paging."""

from __future__ import annotations

import asyncio
import re

import pytest
from apitest_support import GADGETS, THINGS, WIDGETS, widget

from federator.apiserver.errors import ApiError
from federator.apiserver.storage import ObjectStorage, decode_continue, encode_continue
from federator.store.memory import MemoryStore

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def thing(name: str, ns: str = "ns1", **spec: object) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Thing", "metadata": {"name": name, "namespace": ns}, "spec": dict(spec)}


async def test_create_sets_server_metadata(storage: ObjectStorage, store: MemoryStore) -> None:
    obj = widget("w1")
    obj["metadata"].update(uid="client-made", generation=7, creationTimestamp="1999-01-01T00:00:00Z",
                           deletionTimestamp="1999-01-01T00:00:00Z")
    obj["status"] = {"phase": "Forged"}
    created = await storage.create(WIDGETS, obj, namespace="ns1")
    meta = created["metadata"]
    assert meta["uid"] != "client-made" and len(meta["uid"]) == 36
    assert meta["generation"] == 1
    assert RFC3339.match(meta["creationTimestamp"]) and meta["creationTimestamp"] != "1999-01-01T00:00:00Z"
    assert "deletionTimestamp" not in meta
    assert "status" not in created  # kinds with /status drop it on create
    assert meta["resourceVersion"] == str(await store.current_revision())
    got = await storage.get(WIDGETS, namespace="ns1", name="w1")
    assert got == created
    # the caller's dict was not touched
    assert obj["metadata"]["uid"] == "client-made"


async def test_create_refuses_resource_version_and_duplicates(storage: ObjectStorage) -> None:
    obj = widget("w1")
    obj["metadata"]["resourceVersion"] = "5"
    with pytest.raises(ApiError) as e:
        await storage.create(WIDGETS, obj, namespace="ns1")
    assert e.value.code == 400
    await storage.create(WIDGETS, widget("w1"), namespace="ns1")
    with pytest.raises(ApiError) as e:
        await storage.create(WIDGETS, widget("w1"), namespace="ns1")
    assert (e.value.code, e.value.reason) == (409, "AlreadyExists")
    assert e.value.message == 'widgets.test.federator.dev "w1" already exists'
    # the same name in another namespace is another object
    await storage.create(WIDGETS, widget("w1", ns="ns2"), namespace="ns2")


async def test_generate_name(storage: ObjectStorage) -> None:
    obj = widget("x")
    del obj["metadata"]["name"]
    obj["metadata"]["generateName"] = "job-"
    names = {(await storage.create(WIDGETS, obj, namespace="ns1"))["metadata"]["name"] for _ in range(5)}
    assert len(names) == 5 and all(re.match(r"^job-[a-z0-9]{5}$", n) for n in names)


async def test_validation_errors_name_the_field(storage: ObjectStorage) -> None:
    cases = [
        (widget("w1", size=-1), "spec.size", "FieldValueInvalid"),
        ({"metadata": {"name": "w1"}}, "spec", "FieldValueRequired"),
        (widget("Bad_Name"), "metadata.name", "FieldValueInvalid"),
        (widget("w1", labels={"app": 3}), "metadata.labels.app", "FieldValueTypeInvalid"),
        (widget("w1", labels={"bad key": "x"}), "metadata.labels", "FieldValueInvalid"),
        (widget("w1", finalizers="x"), "metadata.finalizers", "FieldValueTypeInvalid"),
        (widget("w1", ownerReferences=[{"kind": "Job", "name": "j"}]), "metadata.ownerReferences[0].apiVersion",
         "FieldValueRequired"),
        # a trailing newline is no name (`$` with re.match would take it)
        (widget("w1\n"), "metadata.name", "FieldValueInvalid"),
        (widget("w1", labels={"app\n": "x"}), "metadata.labels", "FieldValueInvalid"),
        (widget("w1", labels={"app": "x\n"}), "metadata.labels.app", "FieldValueInvalid"),
        (widget("w1", annotations={"example.com/note\n": "x"}), "metadata.annotations", "FieldValueInvalid"),
        (widget("w1", finalizers=["example.com/keep\n"]), "metadata.finalizers[0]", "FieldValueInvalid"),
    ]
    for obj, field, reason in cases:
        with pytest.raises(ApiError) as e:
            await storage.create(WIDGETS, obj, namespace="ns1")
        assert e.value.code == 422, obj
        causes = e.value.details["causes"]  # type: ignore[index]
        assert any(c["field"] == field and c["reason"] == reason for c in causes), (field, causes)
        assert e.value.details["kind"] == "Widget"  # type: ignore[index]
    assert (await storage.list(WIDGETS)).items == []


async def test_update_conflicts_on_stale_resource_version(storage: ObjectStorage) -> None:
    created = await storage.create(WIDGETS, widget("w1"), namespace="ns1")
    first = dict(created, spec={"size": 2})
    updated = await storage.update(WIDGETS, first)
    assert updated["spec"]["size"] == 2
    stale = dict(created, spec={"size": 3})
    with pytest.raises(ApiError) as e:
        await storage.update(WIDGETS, stale)
    assert (e.value.code, e.value.reason) == (409, "Conflict")
    assert e.value.message.startswith('Operation cannot be fulfilled on widgets.test.federator.dev "w1": '
                                      "the object has been modified")
    missing_rv = dict(updated, spec={"size": 4})
    missing_rv["metadata"] = {k: v for k, v in updated["metadata"].items() if k != "resourceVersion"}
    with pytest.raises(ApiError) as e:
        await storage.update(WIDGETS, missing_rv)
    assert e.value.code == 422 and e.value.details["causes"][0]["field"] == "metadata.resourceVersion"  # type: ignore[index]
    assert (await storage.get(WIDGETS, namespace="ns1", name="w1"))["spec"]["size"] == 2


async def test_update_of_missing_object_is_404(storage: ObjectStorage) -> None:
    with pytest.raises(ApiError) as e:
        await storage.update(WIDGETS, dict(widget("nope"), metadata={"name": "nope", "namespace": "ns1",
                                                                   "resourceVersion": "1"}))
    assert e.value.code == 404
    assert e.value.message == 'widgets.test.federator.dev "nope" not found'


async def test_generation_rules_with_status_subresource(storage: ObjectStorage) -> None:
    w = await storage.create(WIDGETS, widget("w1"), namespace="ns1")
    # metadata-only change: same generation
    w["metadata"]["labels"] = {"a": "b"}
    w = await storage.update(WIDGETS, w)
    assert w["metadata"]["generation"] == 1
    # status through the main resource is ignored
    w["status"] = {"phase": "Done"}
    w = await storage.update(WIDGETS, w)
    assert "status" not in w and w["metadata"]["generation"] == 1
    # status through /status: stored, generation unchanged, spec changes ignored
    w["status"] = {"phase": "Done"}
    w["spec"]["size"] = 99
    w = await storage.update(WIDGETS, w, subresource="status")
    assert w["status"] == {"phase": "Done"} and w["spec"]["size"] == 1 and w["metadata"]["generation"] == 1
    # spec change: generation + 1
    w["spec"]["size"] = 5
    w = await storage.update(WIDGETS, w)
    assert w["metadata"]["generation"] == 2 and w["status"] == {"phase": "Done"}


async def test_generation_rules_without_status_subresource(storage: ObjectStorage) -> None:
    g = await storage.create(GADGETS, {"metadata": {"name": "g1"}, "spec": {"a": 1}, "status": {"s": 1}},
                             namespace=None)
    assert g["status"] == {"s": 1}  # kept on create: no /status subresource
    g["status"] = {"s": 2}
    g = await storage.update(GADGETS, g)
    assert g["metadata"]["generation"] == 2  # a status change bumps generation
    with pytest.raises(ApiError) as e:
        await storage.update(GADGETS, g, subresource="status")
    assert e.value.code == 404


async def test_unchanged_update_writes_nothing(storage: ObjectStorage, store: MemoryStore) -> None:
    w = await storage.create(WIDGETS, widget("w1"), namespace="ns1")
    before = await store.current_revision()
    again = await storage.update(WIDGETS, w)
    assert again["metadata"]["resourceVersion"] == w["metadata"]["resourceVersion"]
    assert await store.current_revision() == before


async def test_immutable_metadata_is_kept(storage: ObjectStorage) -> None:
    w = await storage.create(WIDGETS, widget("w1"), namespace="ns1")
    forged = dict(w)
    forged["metadata"] = dict(w["metadata"], uid="forged", creationTimestamp="2000-01-01T00:00:00Z", generation=40)
    out = await storage.update(WIDGETS, forged)
    assert out["metadata"]["uid"] == w["metadata"]["uid"]
    assert out["metadata"]["creationTimestamp"] == w["metadata"]["creationTimestamp"]
    assert out["metadata"]["generation"] == 1


async def test_unconditional_update_when_allowed(storage: ObjectStorage) -> None:
    await storage.create(GADGETS, {"metadata": {"name": "g1"}, "spec": {"a": 1}}, namespace=None)
    out = await storage.update(GADGETS, {"metadata": {"name": "g1"}, "spec": {"a": 2}})
    assert out["spec"] == {"a": 2}


async def test_finalizers_hold_deletion_until_removed(storage: ObjectStorage, store: MemoryStore) -> None:
    await storage.create(WIDGETS, widget("w1", finalizers=["example.com/keep", "example.com/other"]),
                         namespace="ns1")
    res = await storage.delete_ex(WIDGETS, namespace="ns1", name="w1")
    assert not res.deleted
    meta = res.object["metadata"]
    assert RFC3339.match(meta["deletionTimestamp"]) and meta["deletionGracePeriodSeconds"] == 0
    assert meta["generation"] == 2
    # deleting again changes nothing
    again = await storage.delete_ex(WIDGETS, namespace="ns1", name="w1")
    assert not again.deleted and again.object["metadata"]["resourceVersion"] == meta["resourceVersion"]
    # no new finalizers on a terminating object
    cur = await storage.get(WIDGETS, namespace="ns1", name="w1")
    cur["metadata"]["finalizers"].append("example.com/late")
    with pytest.raises(ApiError) as e:
        await storage.update(WIDGETS, cur)
    assert e.value.code == 422
    # deletionTimestamp cannot be cleared by an update
    cur = await storage.get(WIDGETS, namespace="ns1", name="w1")
    cur["metadata"]["finalizers"] = ["example.com/keep"]
    cur["metadata"].pop("deletionTimestamp")
    cur = await storage.update(WIDGETS, cur)
    assert cur["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]
    # removing the last finalizer deletes it
    out = await storage.patch(WIDGETS, namespace="ns1", name="w1",
                              patch=b'{"metadata":{"finalizers":null}}', content_type="application/merge-patch+json")
    assert out["metadata"]["resourceVersion"] == str(await store.current_revision())
    with pytest.raises(ApiError) as e:
        await storage.get(WIDGETS, namespace="ns1", name="w1")
    assert e.value.code == 404


async def test_graceful_delete_waits_for_a_final_delete(storage: ObjectStorage) -> None:
    await storage.create(THINGS, thing("t1"), namespace="ns1")
    res = await storage.delete_ex(THINGS, namespace="ns1", name="t1")
    assert not res.deleted and res.object["metadata"]["deletionGracePeriodSeconds"] == 30
    # a shorter grace period shortens it; a longer one does not lengthen it
    res = await storage.delete_ex(THINGS, namespace="ns1", name="t1", grace_period_seconds=60)
    assert res.object["metadata"]["deletionGracePeriodSeconds"] == 30
    res = await storage.delete_ex(THINGS, namespace="ns1", name="t1", grace_period_seconds=0)
    assert res.deleted
    await storage.create(THINGS, thing("t2", quick=True), namespace="ns1")
    assert (await storage.delete_ex(THINGS, namespace="ns1", name="t2")).deleted


async def test_delete_preconditions(storage: ObjectStorage) -> None:
    w = await storage.create(WIDGETS, widget("w1"), namespace="ns1")
    with pytest.raises(ApiError) as e:
        await storage.delete(WIDGETS, namespace="ns1", name="w1", precondition_uid="other")
    assert e.value.code == 409
    with pytest.raises(ApiError) as e:
        await storage.delete(WIDGETS, namespace="ns1", name="w1", precondition_resource_version="1")
    assert e.value.code == 409
    await storage.delete(WIDGETS, namespace="ns1", name="w1", precondition_uid=w["metadata"]["uid"])
    with pytest.raises(ApiError) as e:
        await storage.delete(WIDGETS, namespace="ns1", name="w1")
    assert e.value.code == 404


async def test_dry_run_stores_nothing(storage: ObjectStorage, store: MemoryStore) -> None:
    rev = await store.current_revision()
    out = await storage.create(WIDGETS, widget("w1"), namespace="ns1", dry_run=True)
    assert out["metadata"]["name"] == "w1"
    assert await store.current_revision() == rev
    assert (await storage.list(WIDGETS)).items == []


async def test_guaranteed_update_retries_conflicts(storage: ObjectStorage) -> None:
    await storage.create(WIDGETS, widget("w1"), namespace="ns1")

    def grow(obj: dict) -> dict:  # type: ignore[type-arg]
        obj["spec"]["size"] += 1
        return obj

    await asyncio.gather(*(storage.guaranteed_update(WIDGETS, namespace="ns1", name="w1", mutate=grow)
                           for _ in range(10)))
    assert (await storage.get(WIDGETS, namespace="ns1", name="w1"))["spec"]["size"] == 11
    assert await storage.guaranteed_update(WIDGETS, namespace="ns1", name="w1", mutate=lambda o: None) is None


async def test_list_paging_keeps_the_first_pages_revision(storage: ObjectStorage) -> None:
    for i in range(7):
        await storage.create(WIDGETS, widget(f"w{i}", size=i), namespace="ns1")
    page = await storage.list(WIDGETS, namespace="ns1", limit=3)
    assert [o["metadata"]["name"] for o in page.items] == ["w0", "w1", "w2"]
    assert page.continue_token and page.remaining == 4
    first_rv = page.resource_version
    # writes between pages are not seen by the continued list
    await storage.create(WIDGETS, widget("w3a"), namespace="ns1")
    await storage.delete(WIDGETS, namespace="ns1", name="w5")
    names: list[str] = []
    token = page.continue_token
    while token:
        page = await storage.list(WIDGETS, namespace="ns1", limit=3, continue_token=token)
        assert page.resource_version == first_rv
        names += [o["metadata"]["name"] for o in page.items]
        token = page.continue_token
    assert names == ["w3", "w4", "w5", "w6"]
    fresh = await storage.list(WIDGETS, namespace="ns1")
    assert "w3a" in [o["metadata"]["name"] for o in fresh.items] and fresh.continue_token is None


async def test_list_paging_with_selectors(storage: ObjectStorage) -> None:
    for i in range(10):
        await storage.create(WIDGETS, widget(f"w{i}", size=i, spec={"color": "red" if i % 3 == 0 else "blue"}),
                             namespace="ns1")
    seen: list[str] = []
    token = None
    while True:
        page = await storage.list(WIDGETS, field_selector="spec.color=red", limit=2, continue_token=token)
        assert len(page.items) <= 2 and page.remaining is None
        seen += [o["metadata"]["name"] for o in page.items]
        token = page.continue_token
        if not token:
            break
    assert seen == ["w0", "w3", "w6", "w9"]


async def test_expired_continue_token_and_list_rv(storage: ObjectStorage, store: MemoryStore) -> None:
    for i in range(4):
        await storage.create(WIDGETS, widget(f"w{i}"), namespace="ns1")
    page = await storage.list(WIDGETS, limit=2)
    assert page.continue_token
    old_rv = page.resource_version
    await storage.create(WIDGETS, widget("later"), namespace="ns1")
    await store.compact(await store.current_revision())
    with pytest.raises(ApiError) as e:
        await storage.list(WIDGETS, limit=2, continue_token=page.continue_token)
    assert (e.value.code, e.value.reason) == (410, "Expired")
    assert "continue parameter is too old" in e.value.message
    with pytest.raises(ApiError) as e:
        await storage.list(WIDGETS, limit=2, resource_version=str(int(old_rv) - 2))
    assert (e.value.code, e.value.reason) == (410, "Expired")


@pytest.mark.parametrize("token", ["garbage!", encode_continue(5, "/etc/passwd"), encode_continue(0, "x"),
                                   "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"])
async def test_malformed_continue_token(storage: ObjectStorage, token: str) -> None:
    with pytest.raises(ApiError) as e:
        await storage.list(WIDGETS, continue_token=token)
    assert e.value.code == 400


def test_continue_token_roundtrip() -> None:
    assert decode_continue(encode_continue(42, "ns1/w3", consumed=7)) == (42, "ns1/w3", 7)


async def test_list_resource_version_semantics(storage: ObjectStorage, store: MemoryStore) -> None:
    await storage.create(WIDGETS, widget("w0"), namespace="ns1")
    rv = (await storage.list(WIDGETS)).resource_version
    await storage.create(WIDGETS, widget("w1"), namespace="ns1")
    # resourceVersion=N with limit reads exactly at N
    exact = await storage.list(WIDGETS, resource_version=rv, limit=10)
    assert [o["metadata"]["name"] for o in exact.items] == ["w0"]
    # resourceVersionMatch=NotOlderThan serves the current state
    newer = await storage.list(WIDGETS, resource_version=rv, resource_version_match="NotOlderThan")
    assert len(newer.items) == 2
    with pytest.raises(ApiError) as e:
        await storage.list(WIDGETS, resource_version="999999")
    assert e.value.code == 504
    with pytest.raises(ApiError) as e:
        await storage.list(WIDGETS, resource_version="abc")
    assert e.value.code == 400
    with pytest.raises(ApiError) as e:
        await storage.list(WIDGETS, resource_version_match="Exact")
    assert e.value.code == 422


async def test_in_process_watch(storage: ObjectStorage) -> None:
    await storage.create(WIDGETS, widget("w0"), namespace="ns1")
    events: list[tuple[str, str, str]] = []
    stop = asyncio.Event()
    started = asyncio.Event()

    async def consume() -> None:
        async for ev in storage.watch(WIDGETS, namespace="ns1", stop=stop):
            events.append((ev.type, ev.object["metadata"]["name"], ev.object["metadata"]["resourceVersion"]))
            ev.object["spec"]["size"] = -100  # fresh copies: mutating must not leak
            started.set()
            if len(events) == 4:
                return

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 5)  # the synthetic ADDED of the existing object
    w1 = await storage.create(WIDGETS, widget("w1"), namespace="ns1")
    await storage.create(WIDGETS, widget("other", ns="ns2"), namespace="ns2")
    w1["spec"]["size"] = 2
    await storage.update(WIDGETS, w1)
    gone = await storage.delete_ex(WIDGETS, namespace="ns1", name="w1")
    await asyncio.wait_for(task, 5)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "w0"), ("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]
    assert events[-1][2] == gone.object["metadata"]["resourceVersion"]
    assert (await storage.get(WIDGETS, namespace="ns1", name="w0"))["spec"]["size"] == 1


async def test_watch_from_compacted_revision_is_410(storage: ObjectStorage, store: MemoryStore) -> None:
    w = await storage.create(WIDGETS, widget("w0"), namespace="ns1")
    for i in range(3):
        await storage.create(WIDGETS, widget(f"x{i}"), namespace="ns1")
    await store.compact(await store.current_revision())
    with pytest.raises(ApiError) as e:
        async for _ in storage.watch(WIDGETS, resource_version=w["metadata"]["resourceVersion"]):
            break
    assert (e.value.code, e.value.reason) == (410, "Expired")
    assert e.value.message.startswith("too old resource version: ")


async def test_slow_watcher_falls_back_to_the_store(store: MemoryStore) -> None:
    from apitest_support import make_registry

    storage = ObjectStorage(store, make_registry(), watch_cache_events=16)
    try:
        await storage.start()
        rv = (await storage.list(WIDGETS)).resource_version
        seen: list[str] = []
        stream = storage.watch(WIDGETS, resource_version=rv)
        w0 = await storage.create(WIDGETS, widget("w0"), namespace="ns1")
        first = await asyncio.wait_for(stream.__anext__(), 5)
        seen.append(first.object["metadata"]["name"])
        # 100 more events while this watcher does not read: the cache keeps only ~32
        for i in range(1, 101):
            await storage.create(WIDGETS, widget(f"w{i}"), namespace="ns1")
        async for ev in stream:  # the watcher was dropped from the cache: its stream ends
            seen.append(ev.object["metadata"]["name"])
        assert len(seen) < 101
        last_rv = w0["metadata"]["resourceVersion"] if len(seen) == 1 else None
        assert last_rv is not None
        # resuming from the last resourceVersion seen reads the store (still retained): nothing is lost
        resumed = []
        async for ev in storage.watch(WIDGETS, resource_version=last_rv):
            resumed.append(ev.object["metadata"]["name"])
            if len(resumed) == 100:
                break
        assert resumed == [f"w{i}" for i in range(1, 101)]
    finally:
        await storage.close()


async def test_watch_cache_restarts_after_falling_behind_compaction(storage: ObjectStorage, store: MemoryStore) -> None:
    await storage.start()
    rv = (await storage.list(WIDGETS)).resource_version
    stream = storage.watch(WIDGETS, resource_version=rv)
    await storage.create(WIDGETS, widget("w0"), namespace="ns1")
    first = await asyncio.wait_for(stream.__anext__(), 5)
    # 300 writes without yielding to the loop: the store's 200-revision window moves past the cache
    for i in range(1, 301):
        await storage.create(WIDGETS, widget(f"w{i}"), namespace="ns1")
    leftover = [ev async for ev in stream]
    assert leftover == []  # the watcher ends instead of skipping events silently
    with pytest.raises(ApiError) as e:
        async for _ in storage.watch(WIDGETS, resource_version=first.object["metadata"]["resourceVersion"]):
            break
    assert e.value.code == 410
    # the cache recovers for new watchers
    rv = (await storage.list(WIDGETS)).resource_version
    stream = storage.watch(WIDGETS, resource_version=rv)
    await storage.create(WIDGETS, widget("fresh"), namespace="ns1")
    ev = await asyncio.wait_for(stream.__anext__(), 5)
    assert ev.object["metadata"]["name"] == "fresh"
    await stream.aclose()


async def test_object_larger_than_the_store_accepts_is_413(storage: ObjectStorage) -> None:
    with pytest.raises(ApiError) as e:
        await storage.create(THINGS, thing("huge", blob="x" * 2_000_000), namespace="ns1")
    assert (e.value.code, e.value.reason) == (413, "RequestEntityTooLarge")
    assert (await storage.list(THINGS)).items == []
