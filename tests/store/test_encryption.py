"""Encryption at rest (federator/store/encryption.py, federator/hub/encryption.py): kube's
EncryptionConfiguration providers, key rotation and `rewrite`, and bad configurations."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path

import pytest

from federator.hub.app import HUB_STORE_PREFIX
from federator.hub.encryption import resolve, rewrite
from federator.hub.kinds import hub_registry
from federator.store.encryption import (
    DecryptionError,
    EncryptedStore,
    EncryptionConfig,
    EncryptionConfigError,
    MAX_CONFIG_BYTES,
    parse_encryption_config,
    read_encryption_config,
)
from federator.store.memory import MemoryStore
from federator.store.protocol import Compare, EventType, Get, KeyExists, Put, StoreError

KEY1 = base64.b64encode(b"1" * 32).decode()
KEY2 = base64.b64encode(b"2" * 32).decode()
MC = f"{HUB_STORE_PREFIX}registry/federator.dev/memberclusters/_/"
PLAIN = b'{"spec":{"connection":{"credentials":{"token":"s3cr3t-token-value"}}}}'
REGISTRY = hub_registry()


def config_text(*providers: str, resources: str = "memberclusters.federator.dev") -> str:
    body = "\n".join(f"      - {p}" for p in providers)
    return (f"apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n"
            f"  - resources: [{resources}]\n    providers:\n{body}\n")


def config(*providers: str, resources: str = "memberclusters.federator.dev") -> EncryptionConfig:
    return parse_encryption_config(config_text(*providers, resources=resources).encode())


def aesgcm(*names: str) -> str:
    keys = ", ".join(f"{{name: {n}, secret: {KEY1 if n.endswith('1') else KEY2}}}" for n in names)
    return f"aesgcm: {{keys: [{keys}]}}"


def secretbox(*names: str) -> str:
    keys = ", ".join(f"{{name: {n}, secret: {KEY1 if n.endswith('1') else KEY2}}}" for n in names)
    return f"secretbox: {{keys: [{keys}]}}"


def wrap(inner: MemoryStore, cfg: EncryptionConfig) -> EncryptedStore:
    return EncryptedStore(inner, [(prefix, t) for _, prefix, t in resolve(cfg, REGISTRY, inner.prefix)])


@pytest.mark.parametrize("provider,prefix", [(aesgcm("key1"), b"k8s:enc:aesgcm:v1:key1:"),
                                             (secretbox("key1"), b"k8s:enc:secretbox:v1:key1:")])
async def test_round_trip_stores_ciphertext_with_kube_prefix(provider: str, prefix: bytes) -> None:
    inner = MemoryStore(prefix=HUB_STORE_PREFIX)
    store = wrap(inner, config(provider))
    kv = await store.create(MC + "a", PLAIN)
    assert kv.value == PLAIN
    raw = await inner.get(MC + "a")
    assert raw is not None and raw.value.startswith(prefix) and b"s3cr3t" not in raw.value
    assert (await store.get(MC + "a")).value == PLAIN  # type: ignore[union-attr]
    assert [k.value for k in (await store.range(MC)).kvs] == [PLAIN]
    # two writes of one value differ (random nonce)
    await store.put(MC + "b", PLAIN)
    assert (await inner.get(MC + "b")).value != raw.value  # type: ignore[union-attr]
    # other keys pass through untouched
    await store.put(f"{HUB_STORE_PREFIX}registry/federator.dev/trainingjobs/ns/x", b"{}")
    assert (await inner.get(f"{HUB_STORE_PREFIX}registry/federator.dev/trainingjobs/ns/x")).value == b"{}"  # type: ignore[union-attr]


async def test_watch_txn_and_errors_see_plain_values() -> None:
    inner = MemoryStore(prefix=HUB_STORE_PREFIX)
    store = wrap(inner, config(aesgcm("key1")))
    start = await store.current_revision()
    events = store.watch(MC, from_revision=start + 1)
    first = await store.create(MC + "a", PLAIN)
    r = await store.txn([Compare(MC + "a", "mod", "=", first.mod_revision)],
                        [Put(MC + "a", PLAIN + b" "), Get(MC + "a")])
    assert r.succeeded and [kv.value for kv in r.results if kv] == [PLAIN + b" ", PLAIN + b" "]
    with pytest.raises(KeyExists) as exists:
        await store.create(MC + "a", b"x")
    assert exists.value.current.value == PLAIN + b" "
    seen = [await anext(events), await anext(events)]
    assert [(e.type, e.kv.value) for e in seen] == [(EventType.PUT, PLAIN), (EventType.PUT, PLAIN + b" ")]
    assert seen[1].prev_kv is not None and seen[1].prev_kv.value == PLAIN
    await events.aclose()  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match="encrypted"):
        await store.txn([Compare(MC + "a", "value", "=", PLAIN)], [])


async def test_rotation_rewrite_and_retired_key() -> None:
    inner = MemoryStore(prefix=HUB_STORE_PREFIX)
    old = wrap(inner, config(aesgcm("key1")))
    for name in ("a", "b", "c"):
        await old.create(MC + name, PLAIN + name.encode())
    # key2 first, key1 still listed: the old values read, new writes use key2
    rotated = config(aesgcm("key2", "key1"))
    store = wrap(inner, rotated)
    assert (await store.get(MC + "a")).value == PLAIN + b"a"  # type: ignore[union-attr]
    await store.put(MC + "c", PLAIN + b"c2")
    summary = await rewrite(inner, rotated, REGISTRY)
    assert (summary.rewritten, summary.current) == (2, 1)
    assert all(kv.value.startswith(b"k8s:enc:aesgcm:v1:key2:") for kv in (await inner.range(MC)).kvs)
    again = await rewrite(inner, rotated, REGISTRY)
    assert (again.rewritten, again.current) == (0, 3)
    # key1 removed after the rewrite: everything still reads
    only_new = wrap(inner, config(aesgcm("key2")))
    assert [kv.value for kv in (await only_new.range(MC)).kvs] == [PLAIN + b"a", PLAIN + b"b", PLAIN + b"c2"]
    # key1 removed before a rewrite: the error names the key name, and rewrite writes nothing
    await old.put(MC + "d", PLAIN)
    revision = await inner.current_revision()
    with pytest.raises(DecryptionError, match="provider 'aesgcm' with key 'key1'.*does not list"):
        await only_new.get(MC + "d")
    with pytest.raises(DecryptionError, match="provider 'aesgcm' with key 'key2'"):
        await rewrite(inner, config(secretbox("key2")), REGISTRY)
    assert await inner.current_revision() == revision


async def test_two_entries_of_one_provider_type_each_read_their_keys() -> None:
    inner = MemoryStore(prefix=HUB_STORE_PREFIX)
    await wrap(inner, config(aesgcm("key1"))).put(MC + "a", PLAIN)
    both = config(aesgcm("key2"), aesgcm("key1"))
    assert (await wrap(inner, both).get(MC + "a")).value == PLAIN  # type: ignore[union-attr]
    assert (await rewrite(inner, both, REGISTRY)).rewritten == 1
    # one key name in two entries (two secrets): each is tried, as kube tries every matching prefix
    await wrap(inner, config(aesgcm("key1"))).put(MC + "b", PLAIN)
    same_name = parse_encryption_config(config_text(
        f"aesgcm: {{keys: [{{name: key1, secret: {KEY2}}}]}}", aesgcm("key1")).encode())
    assert (await wrap(inner, same_name).get(MC + "b")).value == PLAIN  # type: ignore[union-attr]


async def test_identity_first_writes_plain_and_still_reads_encrypted() -> None:
    inner = MemoryStore(prefix=HUB_STORE_PREFIX)
    await wrap(inner, config(secretbox("key1"))).put(MC + "a", PLAIN)
    decrypting = config("identity: {}", secretbox("key1"))
    store = wrap(inner, decrypting)
    assert (await store.get(MC + "a")).value == PLAIN  # type: ignore[union-attr]
    await rewrite(inner, decrypting, REGISTRY)
    assert (await inner.get(MC + "a")).value == PLAIN  # type: ignore[union-attr]
    # plain text without identity listed: a clear error, not garbage
    with pytest.raises(DecryptionError, match="plain text.*identity"):
        await wrap(inner, config(aesgcm("key1"))).get(MC + "a")


@pytest.mark.parametrize("provider", [aesgcm("key1"), secretbox("key1")])
async def test_tampered_or_moved_ciphertext_is_an_error(provider: str) -> None:
    inner = MemoryStore(prefix=HUB_STORE_PREFIX)
    store = wrap(inner, config(provider))
    await store.put(MC + "a", PLAIN)
    raw = (await inner.get(MC + "a")).value  # type: ignore[union-attr]
    for bad in (raw[:-1] + bytes([raw[-1] ^ 1]), raw[:40], raw[: len(raw) // 2]):
        await inner.put(MC + "a", bad)
        with pytest.raises(DecryptionError, match="cannot decrypt"):
            await store.get(MC + "a")
    if provider.startswith("aesgcm"):  # the store key is authenticated data: another object's value fails
        await inner.put(MC + "b", raw)
        with pytest.raises(DecryptionError, match="authentication failed"):
            await store.get(MC + "b")


def test_resources_resolve_wildcards_and_refuse_unknown() -> None:
    names = [r for r, _, _ in resolve(config(aesgcm("key1"), resources="'*.federator.dev'"), REGISTRY,
                                      HUB_STORE_PREFIX)]
    assert "memberclusters.federator.dev" in names and "trainingjobs.federator.dev" in names
    assert "namespaces" not in names
    with pytest.raises(EncryptionConfigError, match=r"resources\[0\].resources\[0\].*'secrets'"):
        resolve(config(aesgcm("key1"), resources="secrets"), REGISTRY, HUB_STORE_PREFIX)


GOOD = f"""apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [memberclusters.federator.dev]
    providers:
      - aesgcm: {{keys: [{{name: key1, secret: {KEY1}}}]}}
"""


@pytest.mark.parametrize("text,field", [
    (GOOD.replace(KEY1, "not*base64"), r"providers\[0\].aesgcm.keys\[0\].secret: Invalid value: not valid base64"),
    (GOOD.replace(KEY1, base64.b64encode(b"x" * 20).decode()), r"keys\[0\].secret:.*20 bytes, must be 16, 24 or 32"),
    (GOOD.replace("aesgcm", "secretbox").replace(KEY1, base64.b64encode(b"x" * 16).decode()),
     r"secretbox.keys\[0\].secret:.*must be 32"),
    (GOOD.replace(f"{{name: key1, secret: {KEY1}}}", f"{{name: k, secret: {KEY1}}}, {{name: k, secret: {KEY2}}}"),
     r"keys\[1\].name: Duplicate value: 'k'"),
    (GOOD.replace("- aesgcm:", "- kms:"), r"providers\[0\].kms: Unsupported value: kms is not supported"),
    (GOOD.replace("- aesgcm:", "- rot13:"), r"providers\[0\]: Unsupported value: 'rot13'"),
    (GOOD.split("    providers:")[0] + "    providers: []\n", r"resources\[0\].providers: Required value"),
    (GOOD.replace("[memberclusters.federator.dev]", "[]"), r"resources\[0\].resources: Required value"),
    (GOOD.replace("[memberclusters.federator.dev]", "[memberclusters.federator.dev, memberclusters.federator.dev]"),
     r"resources\[0\].resources\[1\]: Duplicate value"),
    (GOOD.replace("apiserver.config.k8s.io/v1", "v1"), "apiVersion/kind"),
    (GOOD.replace("name: key1", "name: 'a:b'"), r"keys\[0\].name: Invalid value"),
    ("{{{{ not yaml", "not YAML"),
    ("- a list", "expected a YAML mapping"),
    ("", "expected a YAML mapping"),
])
def test_bad_configs_are_one_line_naming_the_field(text: str, field: str) -> None:
    with pytest.raises(EncryptionConfigError, match=field) as e:
        parse_encryption_config(text.encode())
    message = str(e.value)
    assert "\n" not in message and KEY1 not in message and KEY2 not in message


def test_hostile_config_files_are_refused(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"#" * (MAX_CONFIG_BYTES + 10))
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    nested = tmp_path / "nested.yaml"
    nested.write_text("[" * 100_000)
    aliases = tmp_path / "aliases.yaml"  # a billion laughs: aliases are shared, not copied
    aliases.write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)))
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    cases = [(huge, "larger than"), (zero, "not a regular file"), (fifo, "not a regular file"),
             (tmp_path, "not a regular file"), (tmp_path / "missing", "No such file"), (binary, "not UTF-8"),
             (nested, "not YAML|nested too deeply"), (aliases, "apiVersion/kind")]
    for path, why in cases:
        with pytest.raises(EncryptionConfigError, match=why):
            read_encryption_config(path)
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    assert read_encryption_config(good).rules[0].transformer.writes == "aesgcm:key1"


async def test_rewrite_races_a_writer() -> None:
    """rewrite's compare-and-swap writes lose to a concurrent writer and retry: no write is lost."""
    inner = MemoryStore(prefix=HUB_STORE_PREFIX)
    await wrap(inner, config(aesgcm("key1"))).put(MC + "a", PLAIN)
    rotated = config(aesgcm("key2", "key1"))
    store = wrap(inner, rotated)

    async def writer() -> None:
        for i in range(50):
            await store.put(MC + "a", PLAIN + str(i).encode())
            await asyncio.sleep(0)

    await asyncio.gather(writer(), rewrite(inner, rotated, REGISTRY))
    assert (await store.get(MC + "a")).value == PLAIN + b"49"  # type: ignore[union-attr]
    assert (await inner.get(MC + "a")).value.startswith(b"k8s:enc:aesgcm:v1:key2:")  # type: ignore[union-attr]
