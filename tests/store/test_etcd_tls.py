"""etcd over mutual TLS: what is refused, and how.

Each refusal is one line (a StoreMisconfigured, nothing opened) that names the flag or the
endpoint and the likely cause: TLS flags that are missing, contradict the URL or name files that
are not PEM; against the session's 3-member TLS etcd (`etcd_tls_cluster`) a CA that did not sign
etcd's certificate, a client certificate etcd does not trust, no client certificate, plain etcd://
against TLS; and etcds:// against the plain session etcd. `federator up` refuses with exit code 2
and one `error:` line; `federator etcd --tls` writes the certificates once and reuses them.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from federator.dev.certs import ensure_etcd_tls
from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdCluster, EtcdProcess, port_is_free
from federator.store.open import EtcdTLS, check_store_url, etcd_tls_from_flags, open_store
from federator.store.protocol import StoreMisconfigured

pytestmark = [pytest.mark.etcd, pytest.mark.timeout(180), pytest.mark.xdist_group("etcd-tls")]

ROOT = Path(__file__).resolve().parents[2]
FEDERATOR = [sys.executable, "-m", "federator.cli"]
DEADLINE = 60.0


def _one_line(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text and "Traceback" not in text and "StatusCode" not in text and "ipv4:" not in text, text
    return text


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> EtcdTLS:
    """A client certificate and CA of another, unrelated CA."""
    return ensure_etcd_tls(tmp_path_factory.mktemp("other-ca")).client


# ---------------------------------------------------------------- flags and files (nothing opened)


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        ((None, "c.crt", "c.key"), r"^--etcd-cafile missing \(given: --etcd-certfile, --etcd-keyfile\)"),
        (("ca.crt", "c.crt", None), r"^--etcd-keyfile missing"),
        (("ca.crt", None, None), r"^--etcd-certfile and --etcd-keyfile missing"),
        ((None, None, "c.key"), r"^--etcd-cafile and --etcd-certfile missing"),
    ],
)
def test_a_partial_set_of_tls_flags_names_what_is_missing(flags: tuple[str | None, str | None, str | None],
                                                          why: str) -> None:
    with pytest.raises(StoreMisconfigured, match=why) as err:
        etcd_tls_from_flags(*flags)
    assert "mutual TLS" in _one_line(err.value)
    assert etcd_tls_from_flags(None, None, None) is None


def test_tls_flags_and_urls_must_agree(etcd_tls_cluster: EtcdCluster, tmp_path: Path) -> None:
    tls = etcd_tls_cluster.client_tls
    assert tls is not None
    with pytest.raises(StoreMisconfigured, match=r"--etcd-cafile, --etcd-certfile and --etcd-keyfile missing") as err:
        check_store_url(etcd_tls_cluster.url)
    _one_line(err.value)
    for url in ("etcd://127.0.0.1:2379", "etcd+http://127.0.0.1:2379", "sqlite://hub.db", "memory://"):
        with pytest.raises(StoreMisconfigured, match=r"are for etcds:// only") as err:
            check_store_url(url, tls)
        _one_line(err.value)
    check_store_url(etcd_tls_cluster.url, tls)
    check_store_url(etcd_tls_cluster.url.replace("etcds://", "etcd+https://"), tls)
    assert list(tmp_path.iterdir()) == []


def test_unreadable_and_non_pem_files_are_named_with_their_flag(etcd_tls_cluster: EtcdCluster,
                                                                tmp_path: Path) -> None:
    tls = etcd_tls_cluster.client_tls
    assert tls is not None
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"\x00\xffnot a certificate")
    hostile = tmp_path / "hostile.pem"  # the marker, then junk: passes the sniff, fails the parse
    hostile.write_bytes(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    cases = [
        (replace(tls, ca=tmp_path / "absent.crt"), r"^--etcd-cafile .*absent.crt: cannot read it"),
        (replace(tls, ca=tmp_path), r"^--etcd-cafile .*: cannot read it"),
        (replace(tls, ca=garbage), r"^--etcd-cafile .*garbage.pem: not a PEM CA certificate"),
        (replace(tls, ca=tls.key), r"^--etcd-cafile .*: not a PEM CA certificate"),
        (replace(tls, ca=hostile), r"^--etcd-cafile .*hostile.pem: not a usable PEM CA certificate"),
        (replace(tls, cert=garbage), r"^--etcd-certfile .*garbage.pem: not a PEM certificate"),
        (replace(tls, key=tls.cert), r"^--etcd-keyfile .*: not a PEM private key"),
        (replace(tls, key=tls.key.with_name("server.key")), r"^--etcd-certfile .* with --etcd-keyfile .*: not a usable"),
    ]
    for bad, why in cases:
        with pytest.raises(StoreMisconfigured, match=why) as err:
            check_store_url(etcd_tls_cluster.url, bad)
        _one_line(err.value)


# ---------------------------------------------------------------- handshakes that etcd (or we) refuse


async def test_a_ca_that_did_not_sign_etcds_certificate_is_refused_in_one_line(
        etcd_tls_cluster: EtcdCluster, other_ca: EtcdTLS) -> None:
    tls = etcd_tls_cluster.client_tls
    assert tls is not None
    with pytest.raises(StoreMisconfigured) as err:
        await open_store(etcd_tls_cluster.url, etcd_tls=replace(tls, ca=other_ca.ca))
    text = _one_line(err.value)
    assert re.match(r"etcd 127\.0\.0\.1:\d+ refused the TLS handshake: certificate verify failed", text), text
    assert "is --etcd-cafile the CA that signed etcd's server certificate" in text


async def test_a_client_certificate_etcd_does_not_trust_or_none_is_refused_in_one_line(
        etcd_tls_cluster: EtcdCluster, other_ca: EtcdTLS) -> None:
    tls = etcd_tls_cluster.client_tls
    assert tls is not None
    with pytest.raises(StoreMisconfigured) as err:
        await open_store(etcd_tls_cluster.url, etcd_tls=replace(tls, cert=other_ca.cert, key=other_ca.key))
    text = _one_line(err.value)
    assert re.match(r"etcd 127\.0\.0\.1:\d+ refused the TLS handshake: .*bad certificate", text), text
    assert "is --etcd-certfile signed by a CA in etcd's --trusted-ca-file" in text
    # No client certificate at all (the flags never allow it; the store itself is what is tested here).
    credentials = tls.load()
    with pytest.raises(StoreMisconfigured, match="refused the TLS handshake") as err:
        await EtcdStore.connect(etcd_tls_cluster.endpoints, tls=replace(credentials, cert_pem=None, key_pem=None),  # type: ignore[arg-type]
                                connect_timeout_seconds=10)
    _one_line(err.value)


async def test_a_server_certificate_that_does_not_name_the_host_is_refused_in_one_line(tmp_path: Path) -> None:
    tls = ensure_etcd_tls(tmp_path / "tls", hosts=("etcd.example.invalid",))
    member = EtcdProcess(tmp_path / "m", fsync=False, tls=tls)
    member.start(wait_healthy=False)  # its /health cannot be checked: the certificate names another host
    try:
        deadline = time.monotonic() + DEADLINE
        while port_is_free(member.client_port):  # wait for it to listen
            member.check_alive()
            assert time.monotonic() < deadline, "etcd never listened"
            await asyncio.sleep(0.05)
        with pytest.raises(StoreMisconfigured) as err:
            await open_store(member.url, etcd_tls=tls.client)
        text = _one_line(err.value)
        assert f"etcd {member.endpoint} refused the TLS handshake: its server certificate does not name 127.0.0.1" \
            in text, text
    finally:
        member.kill()


async def test_plain_etcd_url_against_a_tls_etcd_says_to_use_etcds(etcd_tls_cluster: EtcdCluster) -> None:
    plain = etcd_tls_cluster.url.replace("etcds://", "etcd://")
    with pytest.raises(StoreMisconfigured) as err:
        await open_store(plain, connect_timeout_seconds=2)
    text = _one_line(err.value)
    assert "closed every plain gRPC connection: does it serve TLS" in text and "use etcds://" in text, text


async def test_etcds_against_a_plain_etcd_says_to_use_etcd(etcd_server: EtcdProcess,
                                                          etcd_tls_cluster: EtcdCluster) -> None:
    with pytest.raises(StoreMisconfigured) as err:
        await open_store(f"etcds://{etcd_server.endpoint}", etcd_tls=etcd_tls_cluster.client_tls,
                         connect_timeout_seconds=2)
    text = _one_line(err.value)
    assert f"etcd {etcd_server.endpoint} did not answer the TLS handshake: does it serve plain gRPC" in text, text


# ---------------------------------------------------------------- the CLIs


def _up(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FEDERATOR, "up", "--no-sim", "--state-dir", str(tmp_path / "state"), "--listen", "127.0.0.1:0", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_federator_up_without_a_client_certificate_does_not_start(etcd_tls_cluster: EtcdCluster,
                                                                   tmp_path: Path) -> None:
    tls = etcd_tls_cluster.client_tls
    assert tls is not None
    done = _up(tmp_path, "--store", etcd_tls_cluster.url, "--etcd-cafile", str(tls.ca))
    assert done.returncode == 2, done.stderr
    assert _error_lines(done.stderr) == [done.stderr.strip()]
    assert done.stderr.startswith("error: --etcd-certfile and --etcd-keyfile missing (given: --etcd-cafile)")
    assert not (tmp_path / "state").exists()  # flags first: nothing written


def test_federator_up_with_the_wrong_ca_stops_with_one_line(etcd_tls_cluster: EtcdCluster, other_ca: EtcdTLS,
                                                           tmp_path: Path) -> None:
    tls = etcd_tls_cluster.client_tls
    assert tls is not None
    done = _up(tmp_path, "--store", etcd_tls_cluster.url, "--etcd-cafile", str(other_ca.ca),
               "--etcd-certfile", str(tls.cert), "--etcd-keyfile", str(tls.key))
    assert done.returncode == 2, done.stderr
    [line] = _error_lines(done.stderr)
    assert re.match(r"error: etcd 127\.0\.0\.1:\d+ refused the TLS handshake: certificate verify failed.*"
                    r"is --etcd-cafile the CA", line), line
    assert '"hub ready"' not in done.stderr


async def test_federator_etcd_tls_writes_certificates_once_and_serves_mutual_tls(tmp_path: Path) -> None:
    data_dir = tmp_path / "etcd"
    line = re.compile(r"federator up --store (etcds://\S+) --etcd-cafile (\S+) --etcd-certfile (\S+) "
                      r"--etcd-keyfile (\S+)\s+# 1 etcd member in ")

    async def run() -> tuple[subprocess.Popen[str], re.Match[str]]:
        proc = subprocess.Popen([*FEDERATOR, "etcd", "--data-dir", str(data_dir), "--no-fsync", "--members", "1",
                                 "--tls"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None
        async with asyncio.timeout(DEADLINE):
            printed = await asyncio.to_thread(proc.stdout.readline)
        found = line.match(printed)
        if not found:
            proc.kill()
            raise AssertionError(f"{printed!r} {proc.communicate(timeout=DEADLINE)[1]}")
        return proc, found

    first, found = await run()
    try:
        tls_dir = data_dir / "tls"
        assert stat.S_IMODE(tls_dir.stat().st_mode) == 0o700
        for key in ("ca.key", "server.key", "peer.key", "client.key"):
            assert stat.S_IMODE((tls_dir / key).stat().st_mode) == 0o600, key
        url, ca, cert, key = found.groups()
        tls = etcd_tls_from_flags(ca, cert, key)
        store = await open_store(url, etcd_tls=tls)
        written = await store.put("/federator/k", b"v")
        await store.close()
        with pytest.raises(StoreMisconfigured, match="closed every plain gRPC connection"):
            await open_store(url.replace("etcds://", "etcd://"), connect_timeout_seconds=2)
        before = {p.name: p.read_bytes() for p in tls_dir.iterdir()}
        first.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(first.communicate, timeout=DEADLINE)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate(timeout=DEADLINE)

    again, found_again = await run()  # the same DIR: the same URL and certificates, the data kept
    try:
        assert found_again.groups() == found.groups()
        assert {p.name: p.read_bytes() for p in tls_dir.iterdir()} == before
        store = await open_store(url, etcd_tls=tls)
        assert await store.get("/federator/k") == written
        await store.close()
    finally:
        again.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(again.communicate, timeout=DEADLINE)
        finally:
            if again.poll() is None:
                again.kill()
                again.communicate(timeout=DEADLINE)


def test_federator_etcd_tls_on_a_plain_clusters_dir_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "etcd"
    data_dir.mkdir()
    layout = ('{"format": 1, "members": 1, "clientPortBase": null, "clientPorts": [30001], "peerPorts": [30002], '
              '"clusterToken": "t"}')
    (data_dir / "cluster.json").write_text(layout)
    done = subprocess.run([*FEDERATOR, "etcd", "--data-dir", str(data_dir), "--tls"], capture_output=True, text=True,
                          timeout=DEADLINE)
    assert done.returncode == 2
    assert done.stderr.startswith("error: --tls: the cluster in ") and done.stderr.count("\n") == 1, done.stderr
    assert sorted(p.name for p in data_dir.iterdir()) == ["cluster.json"]
