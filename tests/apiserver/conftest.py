"""Fixtures of the API machinery tests (registry and helpers: apitest_support.py)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from apitest_support import TOKEN, Api, authenticate, make_registry  # noqa: E402

from federator.apiserver.app import build_api_app  # noqa: E402
from federator.apiserver.storage import ObjectStorage  # noqa: E402
from federator.obs import Metrics  # noqa: E402
from federator.store.memory import MemoryStore  # noqa: E402


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    s = MemoryStore(prefix="/t/", retain_revisions=200, metrics=Metrics())
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def storage(store: MemoryStore) -> AsyncIterator[ObjectStorage]:
    st = ObjectStorage(store, make_registry())
    try:
        yield st
    finally:
        await st.close()


@pytest.fixture
async def api(store: MemoryStore) -> AsyncIterator[Api]:
    storage = ObjectStorage(store, make_registry())
    app = build_api_app(storage=storage, registry=storage.registry, server_name="test", authenticate=authenticate,
                        max_body_bytes=256 * 1024, bookmark_interval=0.2, metrics=Metrics())
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    session = aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        yield Api(server, session, storage, store, app)
    finally:
        await session.close()
        await server.close()
