"""open_store(url): every form opens the right backend; bad URLs are clear errors that create nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdProcess
from federator.store.memory import MemoryStore
from federator.store.open import open_store
from federator.store.protocol import Store, StoreError, StoreUnavailable
from federator.store.sqlite import SqliteStore


async def test_memory_url() -> None:
    store = await open_store("memory://")
    assert isinstance(store, MemoryStore) and store.prefix == "/federator/"
    await store.close()
    windowed = await open_store("memory://?retain=10", prefix="/sim/")
    assert isinstance(windowed, MemoryStore) and windowed.prefix == "/sim/"
    await windowed.close()


async def test_sqlite_url_relative_and_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "state").mkdir()
    rel = await open_store("sqlite://state/hub.db?retain=1000&sync=full")
    assert isinstance(rel, SqliteStore) and rel.path == Path("state/hub.db")
    await rel.put("/federator/k", b"v")
    await rel.close()
    absolute = await open_store(f"sqlite://{tmp_path}/state/hub.db")
    assert isinstance(absolute, SqliteStore)
    assert (await absolute.get("/federator/k")) is not None
    await absolute.close()


async def test_etcd_url(etcd_server: EtcdProcess) -> None:
    store: Store = await open_store(f"etcd://{etcd_server.endpoint}", prefix="/t-open/")
    assert isinstance(store, EtcdStore) and store.endpoints == [etcd_server.endpoint]
    await store.close()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("", "no scheme"),
        ("hub.db", "no scheme"),
        ("postgres://db", "unknown scheme"),
        ("memory://host", "no host or path"),
        ("memory://?retain=0", "positive integer"),
        ("memory://?retain=many", "positive integer"),
        ("memory://?colour=blue", "unknown option"),
        ("sqlite://", "needs a file path"),
        ("sqlite://dir/", "is a directory"),
        ("sqlite://hub.db?sync=sometimes", "NORMAL or FULL"),
        ("sqlite://hub.db?retain=", "exactly one value"),
        ("etcd://", "at least one HOST:PORT"),
        ("etcd://localhost", "must be HOST:PORT"),
        ("etcd://etcd-0.etcd:2379,etcd-1.etcd:2379", "several etcd endpoints with a DNS name"),
        ("etcds://127.0.0.1:2379,etcd:2379", "several etcd endpoints with a DNS name"),
        ("etcd://h:1,h:99999", "must be HOST:PORT"),
        ("etcd://h:2379/path", "no path"),
        ("etcd://h:2379?x=1", "unknown option"),
        ("memory://#frag", "fragments"),
    ],
)
async def test_bad_urls_are_clear_errors_and_create_nothing(
    url: str, why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match=why) as err:
        await open_store(url)
    assert "expected memory://, sqlite://PATH, etcd://HOST:PORT[,HOST:PORT...] or etcds://" in str(err.value)
    assert not isinstance(err.value, StoreUnavailable)
    assert list(tmp_path.iterdir()) == []


async def test_bad_prefix_is_refused() -> None:
    for prefix in ("federator", "/federator", "", "/a\udcff/"):
        with pytest.raises(StoreError, match="prefix|UTF-8"):
            await open_store("memory://", prefix=prefix)
