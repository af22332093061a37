"""Member credentials encrypted at rest (issue 31 item 2): a hub with --encryption-provider-config keeps no
credential, in any form, in the raw sqlite files or the raw etcd data and keys, while every read, list and
watch of the API (redacted) and of the controllers (plain) works; `federator store rewrite` re-encrypts after
a key rotation; a configuration the hub cannot use stops `federator up` with one line."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from federator.dev.certs import ensure_etcd_tls
from federator.hub.app import HUB_STORE_PREFIX
from federator.store.encryption import DecryptionError, EncryptionConfig, parse_encryption_config, read_encryption_config
from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdProcess
from federator.store.protocol import KeyValue

from .hubtest_support import ROOT, start_hub
from .test_credentials import SECRETS, _exercise_every_read_and_write, assert_no_secret, cert_cluster, token_cluster

EXAMPLE = ROOT / "examples" / "hub-config" / "encryption-config.yaml"
KEY1 = base64.b64encode(b"k" * 32).decode()
KEY2 = base64.b64encode(b"K" * 32).decode()
MC_PREFIX = f"{HUB_STORE_PREFIX}registry/federator.dev/memberclusters/"


def config_text(*providers: str) -> str:
    body = "\n".join(f"      - {p}" for p in providers)
    return ("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n"
            f"  - resources: [memberclusters.federator.dev]\n    providers:\n{body}\n")


AESGCM_1 = f"aesgcm: {{keys: [{{name: key1, secret: {KEY1}}}]}}"
SECRETBOX_2 = f"secretbox: {{keys: [{{name: key2, secret: {KEY2}}}]}}"


def config(*providers: str) -> EncryptionConfig:
    return parse_encryption_config(config_text(*providers).encode())


def forms(secret: str) -> set[bytes]:
    """`secret` as it could sit in a file: plain, JSON-escaped, base64 (standard and urlsafe, at each of the
    three alignments, without the characters its neighbours decide)."""
    raw = secret.encode()
    found = {raw, json.dumps(secret)[1:-1].encode()}
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * shift + raw)
            start = (0, 2, 3)[shift]  # the characters that hold a bit of the prefix
            found.add(text[start: len(text) - 4].rstrip(b"="))
    return {f for f in found if len(f) >= 12}


def assert_no_credential_bytes(blob: bytes, where: str) -> None:
    for secret in SECRETS:
        for form in forms(secret):
            assert form not in blob, f"a credential ({form[:6]!r}...) is in {where}"


def test_forms_find_what_they_look_for() -> None:
    secret = SECRETS[0]
    for blob in (json.dumps({"t": secret}).encode(), base64.b64encode(b"xy" + secret.encode()),
                 base64.urlsafe_b64encode(b"x" + secret.encode() + b"zz")):
        with pytest.raises(AssertionError):
            assert_no_credential_bytes(blob, "a test blob")


def test_the_example_config_parses_and_names_memberclusters() -> None:
    example = read_encryption_config(EXAMPLE)
    assert example.rules[0].resources == ("memberclusters.federator.dev",)
    assert example.rules[0].transformer.writes == "aesgcm:key1"


async def test_sqlite_file_holds_no_credential(tmp_path: Path) -> None:
    with structlog.testing.capture_logs() as logs:
        async with start_hub(tmp_path / "hub", encryption=config(AESGCM_1)) as hub:
            await _exercise_every_read_and_write(hub)  # responses and watches redact (asserted inside)
            status, metrics = await hub.request("GET", "/metrics")
            assert 'federator_store_encryption_provider{resource="memberclusters.federator.dev",' \
                   'writes="aesgcm:key1"} 1.0' in metrics
            assert_no_secret(metrics, "/metrics")
            assert KEY1 not in metrics
    text = json.dumps(logs, default=str)
    assert_no_secret(text, "the hub's logs")
    assert KEY1 not in text and "store encryption at rest" in text
    files = [p for p in (tmp_path / "hub").iterdir() if p.name.startswith("hub.db")]
    assert files
    for path in files:
        assert_no_credential_bytes(path.read_bytes(), path.name)


@pytest.mark.etcd
async def test_etcd_data_and_keys_hold_no_credential_and_rewrite_runs_beside_a_hub(tmp_path: Path) -> None:
    """On an etcd over mutual TLS (issue 31 item 1), as production runs it: the hub and `store rewrite` with
    the three --etcd-* files; without the client certificate the rewrite is one line and writes nothing."""
    etcd = EtcdProcess(tmp_path / "etcd", fsync=False, tls=ensure_etcd_tls(tmp_path / "tls"))
    etcd.start()
    tls = etcd.client_tls
    assert tls is not None
    tls_flags = ["--etcd-cafile", str(tls.ca), "--etcd-certfile", str(tls.cert), "--etcd-keyfile", str(tls.key)]
    try:
        await _etcd_holds_no_credential(tmp_path, etcd, tls_flags)
    finally:
        etcd.kill()


async def _etcd_holds_no_credential(tmp_path: Path, etcd: EtcdProcess, tls_flags: list[str]) -> None:
    tls = etcd.client_tls

    async def raw_kvs() -> list[KeyValue]:
        raw = await EtcdStore.connect([etcd.endpoint], prefix=HUB_STORE_PREFIX, tls=tls.load() if tls else None)
        try:
            return list((await raw.range(HUB_STORE_PREFIX)).kvs)
        finally:
            await raw.close()

    async with start_hub(tmp_path / "a", store_url=etcd.url, etcd_tls=tls, encryption=config(AESGCM_1)) as hub:
        await _exercise_every_read_and_write(hub)
    kvs = await raw_kvs()
    assert [kv for kv in kvs if kv.key.startswith(MC_PREFIX)]
    for kv in kvs:
        assert kv.value.startswith(b"k8s:enc:aesgcm:v1:key1:") or not kv.key.startswith(MC_PREFIX), kv.key
        assert_no_credential_bytes(kv.key.encode() + kv.value, f"etcd key {kv.key}")

    # key2 first on the running hub; `federator store rewrite` beside it while it writes the same object
    rotated = tmp_path / "rotated.yaml"
    rotated.write_text(config_text(SECRETBOX_2, AESGCM_1))
    refused = await asyncio.to_thread(_cli, "store", "rewrite", "--store", etcd.url, *tls_flags[:2],
                                      "--encryption-provider-config", str(rotated))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "--etcd-certfile and --etcd-keyfile missing" in refused.stderr, refused.stderr
    assert all(kv.value.startswith(b"k8s:enc:aesgcm:v1:key1:") for kv in await raw_kvs() if kv.key.startswith(MC_PREFIX))
    async with start_hub(tmp_path / "b", store_url=etcd.url, etcd_tls=tls,
                         encryption=config(SECRETBOX_2, AESGCM_1)) as hub:
        await hub.request("POST", "/apis/federator.dev/v1alpha1/memberclusters", body=cert_cluster())
        rewriting = asyncio.create_task(asyncio.to_thread(
            _cli, "store", "rewrite", "--store", etcd.url, *tls_flags, "--encryption-provider-config", str(rotated)))
        bandwidth = 1.0
        while not rewriting.done():
            bandwidth += 1
            status, answer = await hub.request(
                "PATCH", "/apis/federator.dev/v1alpha1/memberclusters/with-token",
                body={"spec": {"network": {"bandwidthGbps": bandwidth}}},
                headers={"Content-Type": "application/merge-patch+json"})
            assert status == 200, answer
        done = await rewriting
        assert done.returncode == 0 and " objects rewritten with secretbox:key2" in done.stdout, done
        stored = await hub.context.storage.get(hub.context.kind("MemberCluster"), namespace=None, name="with-token")
        assert stored["spec"]["network"]["bandwidthGbps"] == bandwidth
        assert stored["spec"]["connection"]["credentials"]["token"] == SECRETS[0]
    kvs = await raw_kvs()
    clusters = [kv for kv in kvs if kv.key.startswith(MC_PREFIX)]
    assert len(clusters) == 2 and all(kv.value.startswith(b"k8s:enc:secretbox:v1:key2:") for kv in clusters)
    for kv in kvs:
        assert_no_credential_bytes(kv.key.encode() + kv.value, f"etcd key {kv.key}")
    etcd.stop()
    for path in etcd.data_dir.rglob("*"):
        if path.is_file():
            assert_no_credential_bytes(path.read_bytes(), f"etcd's {path.relative_to(etcd.data_dir)}")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "FEDERATOR_DEBUG"}
    return subprocess.run([sys.executable, "-m", "federator.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)


async def test_store_rewrite_after_a_key_rotation(tmp_path: Path) -> None:
    db = tmp_path / "hub" / "hub.db"
    async with start_hub(tmp_path / "hub", encryption=config(AESGCM_1)) as hub:
        for cluster in (token_cluster(), cert_cluster()):
            status, answer = await hub.request("POST", "/apis/federator.dev/v1alpha1/memberclusters", body=cluster)
            assert status == 201, answer
    rotated = tmp_path / "rotated.yaml"
    rotated.write_text(config_text(SECRETBOX_2, AESGCM_1))
    only_new = tmp_path / "only-new.yaml"
    only_new.write_text(config_text(SECRETBOX_2))
    # a hub without the key the store needs does not start (its watch cache cannot list), naming the key
    with pytest.raises(DecryptionError, match="provider 'aesgcm' with key 'key1'"):
        async with start_hub(tmp_path / "hub", encryption=config(SECRETBOX_2)):
            pass
    before = db.read_bytes()
    # a key the store needs is missing: one line, nothing written
    done = await asyncio.to_thread(_cli, "store", "rewrite", "--store", f"sqlite://{db}",
                                   "--encryption-provider-config", str(only_new))
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "key 'key1'" in done.stderr, done.stderr
    assert db.read_bytes() == before
    bad = tmp_path / "bad.yaml"
    bad.write_text(config_text("kms: {name: x}"))
    done = await asyncio.to_thread(_cli, "store", "rewrite", "--store", f"sqlite://{db}",
                                   "--encryption-provider-config", str(bad))
    assert done.returncode == 2 and "providers[0].kms: Unsupported value" in done.stderr, done.stderr
    assert db.read_bytes() == before

    done = await asyncio.to_thread(_cli, "store", "rewrite", "--store", f"sqlite://{db}",
                                   "--encryption-provider-config", str(rotated))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "2 objects rewritten with secretbox:key2, 0 already current\n", done.stdout
    assert done.stderr == "", done.stderr
    done = await asyncio.to_thread(_cli, "store", "rewrite", "--store", f"sqlite://{db}",
                                   "--encryption-provider-config", str(rotated))
    assert "0 objects rewritten with secretbox:key2, 2 already current" in done.stdout, done.stdout
    # the old key retired: the hub reads every credential with the new one alone
    async with start_hub(tmp_path / "hub", encryption=config(SECRETBOX_2)) as hub:
        rt = hub.context.kind("MemberCluster")
        stored = await hub.context.storage.get(rt, namespace=None, name="with-token")
        assert stored["spec"]["connection"]["credentials"]["token"] == SECRETS[0]
        # a value no listed key reads (written by a hub with another file, say): 500 naming the key, not garbage
        raw = hub.state.base.store.target.inner  # type: ignore[union-attr, attr-defined]
        kv = await raw.get(MC_PREFIX + "_/with-cert")
        await raw.update(kv.key, b"k8s:enc:aesgcm:v1:elsewhere:" + kv.value[40:], expected_mod_revision=kv.mod_revision)
        status, answer = await hub.request("GET", "/apis/federator.dev/v1alpha1/memberclusters/with-cert")
        assert status == 500 and "with key 'elsewhere'" in answer["message"], answer
        assert_no_secret(json.dumps(answer), "the 500 answer")


@pytest.mark.parametrize("text,why", [
    (config_text(f"aesgcm: {{keys: [{{name: key1, secret: {KEY1[:-4]}}}]}}"),
     r"resources\[0\].providers\[0\].aesgcm.keys\[0\].secret: Invalid value"),
    (config_text(AESGCM_1).replace("memberclusters.federator.dev", "secrets"),
     r"resources\[0\].resources\[0\]: Unsupported value: 'secrets'"),
])
def test_federator_up_refuses_a_bad_config_with_one_line(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    done = _cli("up", "--no-sim", "--state-dir", str(tmp_path / "state"), "--listen", "127.0.0.1:0",
                "--encryption-provider-config", str(path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: --encryption-provider-config {path}: ")
    assert re.search(why, done.stderr), done.stderr
    assert KEY1 not in done.stderr and not (tmp_path / "state" / "hub.db").exists()
