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
