"""ObjectStorage.guaranteed_update(trusted_status=True): an in-process status write that skips the kind's
full validate hook (the hub's controllers), while every other write still validates."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from apitest_support import WIDGETS, widget

from federator.apiserver.errors import ApiError, FieldError
from federator.apiserver.registry import Registry
from federator.apiserver.storage import ObjectStorage
from federator.store.memory import MemoryStore

validated: list[str] = []


def _strict_status(obj: dict[str, Any]) -> list[FieldError]:
    validated.append(obj["metadata"]["name"])
    phase = (obj.get("status") or {}).get("phase")
    return [] if phase in (None, "Ok") else [FieldError.invalid("status.phase", phase, "must be Ok")]


STRICT = dataclasses.replace(WIDGETS, validate=_strict_status)


@pytest.fixture
async def strict(store: MemoryStore) -> AsyncIterator[ObjectStorage]:
    validated.clear()
    st = ObjectStorage(store, Registry([STRICT]))
    try:
        yield st
    finally:
        await st.close()


def _phase(value: str) -> Any:
    def mutate(obj: dict[str, Any]) -> dict[str, Any]:
        obj["status"] = {"phase": value}
        return obj
    return mutate


async def test_untrusted_status_write_is_validated_and_refused(strict: ObjectStorage) -> None:
    await strict.create(STRICT, widget("w1"), namespace="ns1")
    validated.clear()
    with pytest.raises(ApiError) as e:
        await strict.guaranteed_update(STRICT, namespace="ns1", name="w1", mutate=_phase("Bad"), subresource="status")
    assert e.value.code == 422 and validated == ["w1"]
    assert "status" not in await strict.get(STRICT, namespace="ns1", name="w1")


async def test_trusted_status_write_skips_the_validate_hook(strict: ObjectStorage) -> None:
    await strict.create(STRICT, widget("w1"), namespace="ns1")
    validated.clear()
    written = await strict.guaranteed_update(STRICT, namespace="ns1", name="w1", mutate=_phase("Ok"),
                                             subresource="status", trusted_status=True)
    assert written is not None and written["status"] == {"phase": "Ok"} and validated == []
    assert (await strict.get(STRICT, namespace="ns1", name="w1"))["status"] == {"phase": "Ok"}


async def test_trusted_applies_only_to_the_status_subresource(strict: ObjectStorage) -> None:
    await strict.create(STRICT, widget("w1"), namespace="ns1")
    validated.clear()

    def bad_spec_and_status(obj: dict[str, Any]) -> dict[str, Any]:
        obj["status"] = {"phase": "Bad"}
        return obj

    # a main-resource write ignores status (the kind has /status) but still runs the validate hook
    await strict.guaranteed_update(STRICT, namespace="ns1", name="w1", mutate=bad_spec_and_status,
                                   trusted_status=True)
    assert validated == ["w1"]


# ---------------------------------------------------------------- guaranteed_update(suggestion=...)


class CountingStore(MemoryStore):
    """A real MemoryStore that counts point reads (to see that a fresh suggestion saves the read)."""

    gets = 0

    async def get(self, key: str) -> Any:
        self.gets += 1
        return await super().get(key)


@pytest.fixture
async def counting() -> AsyncIterator[tuple[CountingStore, ObjectStorage]]:
    from federator.obs import Metrics

    store = CountingStore(prefix="/t/", retain_revisions=200, metrics=Metrics())
    st = ObjectStorage(store, Registry([WIDGETS]))
    try:
        yield store, st
    finally:
        await st.close()
        await store.close()


async def test_fresh_suggestion_writes_without_reading_the_store(
        counting: tuple[CountingStore, ObjectStorage]) -> None:
    store, st = counting
    created = await st.create(WIDGETS, widget("w1"), namespace="ns1")
    store.gets = 0
    written = await st.guaranteed_update(WIDGETS, namespace="ns1", name="w1", mutate=_phase("Ok"),
                                         subresource="status", suggestion=created)
    assert written is not None and written["status"] == {"phase": "Ok"} and store.gets == 0
    assert int(written["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert created.get("status") is None  # the suggestion itself is never changed
    assert (await st.get(WIDGETS, namespace="ns1", name="w1"))["status"] == {"phase": "Ok"}


async def test_stale_suggestion_conflicts_then_mutates_the_stored_object(
        counting: tuple[CountingStore, ObjectStorage]) -> None:
    _, st = counting
    stale = await st.create(WIDGETS, widget("w1"), namespace="ns1")
    await st.guaranteed_update(WIDGETS, namespace="ns1", name="w1", mutate=_phase("First"), subresource="status")
    seen: list[Any] = []

    def append(obj: dict[str, Any]) -> dict[str, Any]:
        seen.append((obj.get("status") or {}).get("phase"))
        obj["status"] = {"phase": f"{seen[-1]}+1"}
        return obj

    written = await st.guaranteed_update(WIDGETS, namespace="ns1", name="w1", mutate=append,
                                         subresource="status", suggestion=stale)
    assert seen == [None, "First"]  # tried on the stale copy, lost the CAS, redone on the stored object
    assert written is not None and written["status"] == {"phase": "First+1"}
    assert (await st.get(WIDGETS, namespace="ns1", name="w1"))["status"] == {"phase": "First+1"}


async def test_a_skip_or_no_op_on_a_stale_suggestion_is_decided_again_on_the_store(
        counting: tuple[CountingStore, ObjectStorage]) -> None:
    _, st = counting
    stale = await st.create(WIDGETS, widget("w1"), namespace="ns1")
    await st.guaranteed_update(WIDGETS, namespace="ns1", name="w1", mutate=_phase("Done"), subresource="status")

    # skips on the stale copy (no status yet), writes on the stored one
    def only_when_done(obj: dict[str, Any]) -> dict[str, Any] | None:
        if (obj.get("status") or {}).get("phase") != "Done":
            return None
        obj["status"] = {"phase": "Archived"}
        return obj

    written = await st.guaranteed_update(WIDGETS, namespace="ns1", name="w1", mutate=only_when_done,
                                         subresource="status", suggestion=stale)
    assert written is not None and written["status"] == {"phase": "Archived"}

    # a mutation that changes nothing in the (stale) suggestion still reaches the store
    stale_again = dict(stale, status={"phase": "Back"})
    written = await st.guaranteed_update(WIDGETS, namespace="ns1", name="w1", mutate=_phase("Back"),
                                         subresource="status", suggestion=stale_again)
    assert written is not None and written["status"] == {"phase": "Back"}
    assert (await st.get(WIDGETS, namespace="ns1", name="w1"))["status"] == {"phase": "Back"}


async def test_a_suggestion_of_another_object_or_without_a_revision_is_ignored(
        counting: tuple[CountingStore, ObjectStorage]) -> None:
    _, st = counting
    await st.create(WIDGETS, widget("w1"), namespace="ns1")
    other = await st.create(WIDGETS, widget("w2"), namespace="ns1")
    written = await st.guaranteed_update(WIDGETS, namespace="ns1", name="w1", mutate=_phase("Ok"),
                                         subresource="status", suggestion=other)
    assert written is not None and written["metadata"]["name"] == "w1"
    assert "status" not in await st.get(WIDGETS, namespace="ns1", name="w2")
    for bad_rv in ("", "abc", "0"):
        hostile = {**other, "metadata": {**other["metadata"], "name": "w1", "resourceVersion": bad_rv}}
        written = await st.guaranteed_update(WIDGETS, namespace="ns1", name="w1", mutate=_phase(f"rv{bad_rv}"),
                                             subresource="status", suggestion=hostile)
        assert written is not None and written["status"] == {"phase": f"rv{bad_rv}"}


async def test_a_suggestion_of_a_deleted_object_ends_in_not_found(
        counting: tuple[CountingStore, ObjectStorage]) -> None:
    _, st = counting
    created = await st.create(WIDGETS, widget("w1"), namespace="ns1")
    await st.delete(WIDGETS, namespace="ns1", name="w1")
    with pytest.raises(ApiError) as e:
        await st.guaranteed_update(WIDGETS, namespace="ns1", name="w1", mutate=_phase("Ok"),
                                   subresource="status", suggestion=created)
    assert e.value.code == 404
