"""The `store` fixture: each contract test runs once per backend (memory,
sqlite on a temp file, etcd on the session's real etcd process; test_contract.py
adds etcd-tls, the session's 3-member etcd over mutual TLS)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdCluster, EtcdProcess
from federator.store.memory import MemoryStore
from federator.store.protocol import Store
from federator.store.sqlite import SqliteStore

BACKENDS = ["memory", "sqlite", "etcd"]

StoreFactory = Callable[[], Awaitable[Store]]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def store_factory(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, unique_prefix: str
) -> AsyncIterator[StoreFactory]:
    """Opens stores of the test's backend sharing one state (one sqlite file,
    one etcd, one memory store), all closed at the end."""
    opened: list[Store] = []

    async def make() -> Store:
        store: Store
        if backend in ("memory", "sqlite") and opened:
            # One in-process store per state: a second sqlite handle on the
            # same file is refused by design (single writer).
            return opened[0]
        if backend == "memory":
            store = MemoryStore(prefix=unique_prefix)
        elif backend == "sqlite":
            store = await SqliteStore.open(tmp_path / "store.db", prefix=unique_prefix)
        elif backend == "etcd-tls":
            cluster: EtcdCluster = request.getfixturevalue("etcd_tls_cluster")
            assert cluster.client_tls is not None
            store = await EtcdStore.connect(cluster.endpoints, prefix=unique_prefix, retry_budget_seconds=5,
                                            tls=cluster.client_tls.load())
        else:
            etcd: EtcdProcess = request.getfixturevalue("etcd_server")
            store = await EtcdStore.connect([etcd.endpoint], prefix=unique_prefix, retry_budget_seconds=5)
        opened.append(store)
        return store

    yield make
    for store in reversed(opened):
        await store.close()


@pytest.fixture
async def store(store_factory: StoreFactory) -> Store:
    return await store_factory()
