"""Encryption at rest: kube-apiserver's EncryptionConfiguration, as a value transformer around a `Store`.

The configuration is kube's own file (`--encryption-provider-config`, apiserver.config.k8s.io/v1
EncryptionConfiguration): for each list of resources an ordered list of providers. As in kube:

- the FIRST provider encrypts every write of those resources (`identity: {}` first writes plain text);
- on a read every provider is tried, chosen by the stored value's prefix
  (`k8s:enc:aesgcm:v1:<key name>:`, `k8s:enc:secretbox:v1:<key name>:`), so values written with an older
  key or provider still read while its key is listed; a value without an `k8s:enc:` prefix reads only
  when `identity` is listed;
- a value whose key name the configuration no longer has, or that fails authentication (tampered, or
  another object's ciphertext copied under this key), is a `DecryptionError` naming the key and the key
  name, never garbage.

Providers: `aesgcm` (AES-GCM, 16/24/32-byte keys, a random 12-byte nonce before the ciphertext, the store
key as additional authenticated data, as kube's GCM transformer does), `secretbox` (XSalsa20-Poly1305 from
libsodium via PyNaCl, 32-byte keys, a random 24-byte nonce before the box) and `identity`. kms and aescbc
are refused with one line: kms needs a plugin the hub does not run, aescbc is unauthenticated (kube itself
recommends against it).

Whole values are encrypted, not only the credential fields, like kube: every backend (memory, sqlite,
etcd) indexes nothing of a value (sqlite's columns are key, revisions and lease; etcd sees bytes), and
label and field selectors, the watch cache and every controller read decrypted objects through this
wrapper, so every feature keeps working; and nothing of a MemberCluster (its credentials, copies of them
in kubectl's last-applied-configuration annotation or in managedFields) can be missed by a field list.

`EncryptedStore` is the wrapper: it knows store keys, not resources. The hub maps the configuration's
resource names to key prefixes (federator/hub/encryption.py). History written before encryption was on,
or with a retired key, stays in the store's history until it is compacted (the hub compacts every
--compaction-interval).

This module is in the store layer: it imports no API and does no I/O beyond reading the config file.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from nacl.exceptions import CryptoError as _NaclCryptoError
from nacl.secret import SecretBox

from federator.store.forwarding import ForwardsUpkeep
from federator.store.protocol import (
    Compare,
    Delete,
    Event,
    Get,
    KeyExists,
    KeyValue,
    Op,
    Put,
    RangeResult,
    RevisionMismatch,
    Store,
    StoreError,
    TxnResult,
)

__all__ = [
    "API_VERSION",
    "DecryptionError",
    "EncryptedStore",
    "EncryptionConfig",
    "EncryptionConfigError",
    "EncryptionRule",
    "KIND",
    "MAX_CONFIG_BYTES",
    "Transformer",
    "parse_encryption_config",
    "read_encryption_config",
]

API_VERSION = "apiserver.config.k8s.io/v1"
KIND = "EncryptionConfiguration"
#: A configuration file larger than this is refused (a real one is a few hundred bytes per key).
MAX_CONFIG_BYTES = 256 * 1024
_ENC_PREFIX = b"k8s:enc:"
_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_MAX_KEYS = 64


class EncryptionConfigError(ValueError):
    """A configuration that cannot be used (one line naming the field)."""


class DecryptionError(StoreError):
    """A stored value that no configured provider can read (unknown key name, tampered, or plain text
    without `identity`)."""


# ---------------------------------------------------------------- providers


class _Provider:
    name = ""

    def prefix(self, key_name: str) -> bytes:
        return f"k8s:enc:{self.name}:v1:{key_name}:".encode()

    @property
    def writes(self) -> str:
        raise NotImplementedError

    def encrypt(self, store_key: str, plain: bytes) -> bytes:
        raise NotImplementedError

    def decrypt(self, store_key: str, value: bytes) -> bytes | None:
        """The plain value, or None when the value is not this provider's (another prefix or key name)."""
        raise NotImplementedError

    def is_current(self, value: bytes) -> bool:
        """Whether `value` is already what `encrypt` writes (its provider and first key)."""
        raise NotImplementedError


class _Identity(_Provider):
    name = "identity"

    @property
    def writes(self) -> str:
        return "identity"

    def encrypt(self, store_key: str, plain: bytes) -> bytes:
        return plain

    def decrypt(self, store_key: str, value: bytes) -> bytes | None:
        return None if value.startswith(_ENC_PREFIX) else value

    def is_current(self, value: bytes) -> bool:
        return not value.startswith(_ENC_PREFIX)


class _Keyed(_Provider):
    """A provider with named keys: the first encrypts, every one decrypts (chosen by the prefix)."""

    nonce_bytes = 0
    key_lengths: tuple[int, ...] = ()

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        self.keys = tuple(keys)
        self._ciphers = {name: self._cipher(secret) for name, secret in self.keys}
        self._prefixes = tuple((self.prefix(name), name) for name, _ in self.keys)
        self._all = self.prefix("")[: -1]  # b"k8s:enc:<name>:v1:"

    def _cipher(self, secret: bytes) -> Any:
        raise NotImplementedError

    def _seal(self, cipher: Any, nonce: bytes, plain: bytes, store_key: str) -> bytes:
        raise NotImplementedError

    def _open(self, cipher: Any, nonce: bytes, sealed: bytes, store_key: str) -> bytes:
        raise NotImplementedError

    @property
    def writes(self) -> str:
        return f"{self.name}:{self.keys[0][0]}"

    def encrypt(self, store_key: str, plain: bytes) -> bytes:
        name = self.keys[0][0]
        nonce = os.urandom(self.nonce_bytes)
        return self.prefix(name) + nonce + self._seal(self._ciphers[name], nonce, plain, store_key)

    def decrypt(self, store_key: str, value: bytes) -> bytes | None:
        if not value.startswith(self._all):
            return None
        for prefix, name in self._prefixes:
            if value.startswith(prefix):
                body = value[len(prefix):]
                if len(body) < self.nonce_bytes:
                    raise DecryptionError(f"cannot decrypt {store_key!r}: the {self.name} value of key "
                                          f"{name!r} is truncated")
                try:
                    return self._open(self._ciphers[name], body[: self.nonce_bytes], body[self.nonce_bytes:],
                                      store_key)
                except (InvalidTag, ValueError, _NaclCryptoError) as e:
                    raise DecryptionError(f"cannot decrypt {store_key!r} with {self.name} key {name!r}: "
                                          f"authentication failed (tampered, or not written for this key)"
                                          ) from e
        return None  # another key name: a later provider of this type may have it (Transformer says if none)

    def is_current(self, value: bytes) -> bool:
        return value.startswith(self.prefix(self.keys[0][0]))


class _AesGcm(_Keyed):
    name = "aesgcm"
    nonce_bytes = 12
    key_lengths = (16, 24, 32)

    def _cipher(self, secret: bytes) -> Any:
        return AESGCM(secret)

    def _seal(self, cipher: Any, nonce: bytes, plain: bytes, store_key: str) -> bytes:
        sealed: bytes = cipher.encrypt(nonce, plain, store_key.encode())
        return sealed

    def _open(self, cipher: Any, nonce: bytes, sealed: bytes, store_key: str) -> bytes:
        plain: bytes = cipher.decrypt(nonce, sealed, store_key.encode())
        return plain


class _Secretbox(_Keyed):
    name = "secretbox"
    nonce_bytes = 24
    key_lengths = (32,)

    def _cipher(self, secret: bytes) -> Any:
        return SecretBox(secret)

    def _seal(self, cipher: Any, nonce: bytes, plain: bytes, store_key: str) -> bytes:
        return bytes(cipher.encrypt(plain, nonce).ciphertext)

    def _open(self, cipher: Any, nonce: bytes, sealed: bytes, store_key: str) -> bytes:
        return bytes(cipher.decrypt(sealed, nonce))


_KEYED: Mapping[str, type[_Keyed]] = {"aesgcm": _AesGcm, "secretbox": _Secretbox}
_REFUSED = {
    "kms": "kms is not supported (it needs a KMS plugin the hub does not run); use aesgcm or secretbox",
    "aescbc": "aescbc is not supported (unauthenticated, kube recommends against it); use aesgcm or secretbox",
}


class Transformer:
    """One resource list's providers: the first writes, all read (kube's prefix transformer)."""

    def __init__(self, providers: Sequence[_Provider]) -> None:
        self.providers = tuple(providers)

    @property
    def writes(self) -> str:
        """What writes, e.g. `aesgcm:key1` or `identity` (key names only, never a secret)."""
        return self.providers[0].writes

    @property
    def reads(self) -> tuple[str, ...]:
        names: list[str] = []
        for provider in self.providers:
            if isinstance(provider, _Keyed):
                names += [f"{provider.name}:{name}" for name, _ in provider.keys]
            else:
                names.append(provider.name)
        return tuple(names)

    def encrypt(self, store_key: str, plain: bytes) -> bytes:
        return self.providers[0].encrypt(store_key, plain)

    def decrypt(self, store_key: str, value: bytes) -> bytes:
        first: DecryptionError | None = None
        for provider in self.providers:
            try:
                plain = provider.decrypt(store_key, value)
            except DecryptionError as e:  # as kube: a later provider with the same prefix may read it
                first = first or e
                continue
            if plain is not None:
                return plain
        if first is not None:
            raise first
        if value.startswith(_ENC_PREFIX):
            parts = value[len(_ENC_PREFIX):].split(b":", 3)
            kind = parts[0][:32].decode("ascii", "replace")
            key_name = parts[2][:64].decode("ascii", "replace") if len(parts) > 2 else "?"
            raise DecryptionError(f"cannot decrypt {store_key!r}: it was written by provider {kind!r} with key "
                                  f"{key_name!r}, which the encryption configuration does not list (add it back "
                                  f"to read it)")
        raise DecryptionError(f"cannot read {store_key!r}: it is stored in plain text and the encryption "
                              f"configuration has no identity provider (list `- identity: {{}}` last until "
                              f"`federator store rewrite` has encrypted every object)")

    def is_current(self, value: bytes) -> bool:
        return self.providers[0].is_current(value)


@dataclass(frozen=True, slots=True)
class EncryptionRule:
    #: as written: `memberclusters.federator.dev`, `*.federator.dev` or `*.*`
    resources: tuple[str, ...]
    transformer: Transformer


@dataclass(frozen=True, slots=True)
class EncryptionConfig:
    rules: tuple[EncryptionRule, ...]


# ---------------------------------------------------------------- parsing


def _decode_secret(text: object, where: str, lengths: tuple[int, ...]) -> bytes:
    if not isinstance(text, str) or not text:
        raise EncryptionConfigError(f"{where}: Required value: a base64-encoded key")
    try:
        secret = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise EncryptionConfigError(f"{where}: Invalid value: not valid base64 (the value is not shown)") from None
    if len(secret) not in lengths:
        want = str(lengths[-1]) if len(lengths) == 1 else f"{', '.join(map(str, lengths[:-1]))} or {lengths[-1]}"
        raise EncryptionConfigError(f"{where}: Invalid value: the key is {len(secret)} bytes, must be {want} "
                                    f"(generate one with: head -c 32 /dev/urandom | base64)")
    return secret


def _provider(entry: object, where: str) -> _Provider:
    if not isinstance(entry, Mapping) or len(entry) != 1:
        raise EncryptionConfigError(f"{where}: Invalid value: each provider entry names exactly one provider "
                                    f"(aesgcm, secretbox or identity)")
    (name, body), = entry.items()
    if name in _REFUSED:
        raise EncryptionConfigError(f"{where}.{name}: Unsupported value: {_REFUSED[name]}")
    if name == "identity":
        if body not in (None, {}):
            raise EncryptionConfigError(f"{where}.identity: Invalid value: takes no fields ({{}})")
        return _Identity()
    cls = _KEYED.get(str(name))
    if cls is None:
        raise EncryptionConfigError(f"{where}: Unsupported value: {str(name)[:64]!r}: supported providers are "
                                    f"aesgcm, secretbox, identity")
    where = f"{where}.{name}"
    if not isinstance(body, Mapping) or set(body) - {"keys"}:
        raise EncryptionConfigError(f"{where}: Invalid value: expected {{keys: [{{name, secret}}]}}")
    keys = body.get("keys")
    if not isinstance(keys, list) or not keys:
        raise EncryptionConfigError(f"{where}.keys: Required value: at least one key")
    if len(keys) > _MAX_KEYS:
        raise EncryptionConfigError(f"{where}.keys: Too many: {len(keys)}: must have at most {_MAX_KEYS} keys")
    parsed: list[tuple[str, bytes]] = []
    for i, key in enumerate(keys):
        at = f"{where}.keys[{i}]"
        if not isinstance(key, Mapping) or set(key) - {"name", "secret"}:
            raise EncryptionConfigError(f"{at}: Invalid value: expected {{name, secret}}")
        key_name = key.get("name")
        if not isinstance(key_name, str) or not _KEY_NAME.fullmatch(key_name):
            raise EncryptionConfigError(f"{at}.name: Invalid value: a key name is 1-63 letters, digits, '.', '_' "
                                        f"or '-' (it is written in front of every value)")
        if any(key_name == seen for seen, _ in parsed):
            raise EncryptionConfigError(f"{at}.name: Duplicate value: {key_name!r}")
        parsed.append((key_name, _decode_secret(key.get("secret"), f"{at}.secret", cls.key_lengths)))
    return cls(parsed)


def parse_encryption_config(raw: bytes) -> EncryptionConfig:
    """Parse kube's EncryptionConfiguration; EncryptionConfigError (one line, naming the field) when it is
    not one this hub can use. Resource names are checked for form only (the hub checks they exist)."""
    if len(raw) > MAX_CONFIG_BYTES:
        raise EncryptionConfigError(f"larger than {MAX_CONFIG_BYTES} bytes")
    try:
        doc = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise EncryptionConfigError("not UTF-8 text") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise EncryptionConfigError(f"not YAML{where}") from None
    except RecursionError:
        raise EncryptionConfigError("nested too deeply to be an EncryptionConfiguration") from None
    if not isinstance(doc, Mapping):
        raise EncryptionConfigError(f"expected a YAML mapping (apiVersion: {API_VERSION}, kind: {KIND})")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise EncryptionConfigError(f"apiVersion/kind: Unsupported value: expected {API_VERSION} {KIND}")
    unknown = set(doc) - {"apiVersion", "kind", "resources"}
    if unknown:
        raise EncryptionConfigError(f"{sorted(map(str, unknown))[0][:64]}: Unsupported value: unknown field")
    entries = doc.get("resources")
    if not isinstance(entries, list) or not entries:
        raise EncryptionConfigError("resources: Required value: at least one entry")
    rules: list[EncryptionRule] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"resources[{i}]"
        if not isinstance(entry, Mapping) or set(entry) - {"resources", "providers"}:
            raise EncryptionConfigError(f"{where}: Invalid value: expected {{resources: [...], providers: [...]}}")
        names = entry.get("resources")
        if not isinstance(names, list) or not names:
            raise EncryptionConfigError(f"{where}.resources: Required value: at least one resource")
        for j, name in enumerate(names):
            if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9*][a-z0-9.*-]{0,252}", name):
                raise EncryptionConfigError(f"{where}.resources[{j}]: Invalid value: expected RESOURCE.GROUP "
                                            f"(e.g. memberclusters.federator.dev), *.GROUP or *.*")
            if name in seen:
                raise EncryptionConfigError(f"{where}.resources[{j}]: Duplicate value: {name!r}")
            seen.add(name)
        providers = entry.get("providers")
        if not isinstance(providers, list) or not providers:
            raise EncryptionConfigError(f"{where}.providers: Required value: at least one provider")
        parsed = [_provider(p, f"{where}.providers[{k}]") for k, p in enumerate(providers)]
        rules.append(EncryptionRule(tuple(names), Transformer(parsed)))
    return EncryptionConfig(tuple(rules))


def read_encryption_config(path: str | os.PathLike[str]) -> EncryptionConfig:
    """Read and parse the file; EncryptionConfigError (one line) for a missing, unreadable, non-regular
    (a device, a FIFO) or oversized file, or a bad configuration."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise EncryptionConfigError(f"cannot read: {e.strerror or e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise EncryptionConfigError("not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise EncryptionConfigError(f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    return parse_encryption_config(raw)


# ---------------------------------------------------------------- the store wrapper


class EncryptedStore(ForwardsUpkeep):
    """A Store that encrypts the values of keys under the given prefixes on the way in and decrypts them on
    the way out (reads, txn results, watch events, the `current` of KeyExists/RevisionMismatch). Keys
    outside every prefix pass through untouched. `rules`: (key prefix, transformer), the first match wins."""

    def __init__(self, inner: Store, rules: Sequence[tuple[str, Transformer]]) -> None:
        self.inner = inner
        self.prefix = inner.prefix
        self.rules = tuple(rules)

    def forward_to(self) -> Store:
        return self.inner

    def transformer(self, key: str) -> Transformer | None:
        for prefix, transformer in self.rules:
            if key.startswith(prefix):
                return transformer
        return None

    def _in(self, key: str, value: bytes) -> bytes:
        t = self.transformer(key)
        return value if t is None else t.encrypt(key, value)

    def _out(self, kv: KeyValue | None) -> KeyValue | None:
        if kv is None:
            return None
        t = self.transformer(kv.key)
        return kv if t is None else replace(kv, value=t.decrypt(kv.key, kv.value))

    def _out1(self, kv: KeyValue) -> KeyValue:
        t = self.transformer(kv.key)
        return kv if t is None else replace(kv, value=t.decrypt(kv.key, kv.value))

    def _reraise(self, e: StoreError) -> StoreError:
        if isinstance(e, KeyExists):
            return KeyExists(e.key, self._out1(e.current))
        if isinstance(e, RevisionMismatch):
            return RevisionMismatch(e.key, e.expected, self._out(e.current))
        return e

    async def get(self, key: str) -> KeyValue | None:
        return self._out(await self.inner.get(key))

    async def range(self, prefix: str, *, limit: int = 0, start_after: str | None = None,
                    revision: int | None = None) -> RangeResult:
        r = await self.inner.range(prefix, limit=limit, start_after=start_after, revision=revision)
        return replace(r, kvs=tuple(self._out1(kv) for kv in r.kvs))

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> KeyValue:
        kv = await self.inner.put(key, self._in(key, value), lease=lease)
        return replace(kv, value=value)

    async def create(self, key: str, value: bytes, *, lease: int = 0) -> KeyValue:
        try:
            kv = await self.inner.create(key, self._in(key, value), lease=lease)
        except (KeyExists, RevisionMismatch) as e:
            raise self._reraise(e) from None
        return replace(kv, value=value)

    async def update(self, key: str, value: bytes, *, expected_mod_revision: int, lease: int = 0) -> KeyValue:
        try:
            kv = await self.inner.update(key, self._in(key, value), expected_mod_revision=expected_mod_revision,
                                         lease=lease)
        except (KeyExists, RevisionMismatch) as e:
            raise self._reraise(e) from None
        return replace(kv, value=value)

    async def delete(self, key: str, *, expected_mod_revision: int | None = None) -> KeyValue:
        try:
            return self._out1(await self.inner.delete(key, expected_mod_revision=expected_mod_revision))
        except (KeyExists, RevisionMismatch) as e:
            raise self._reraise(e) from None

    def _op(self, op: Op) -> Op:
        if isinstance(op, Put):
            return Put(op.key, self._in(op.key, op.value), lease=op.lease)
        return op

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        for c in compares:
            if c.target == "value" and self.transformer(c.key) is not None:
                raise StoreError(f"a compare on the value of {c.key!r} cannot work: its values are encrypted "
                                 f"(compare its mod revision instead)")
        r = await self.inner.txn(compares, [self._op(op) for op in success], [self._op(op) for op in failure])
        ops = success if r.succeeded else failure
        results: list[KeyValue | None] = []
        for op, kv in zip(ops, r.results):
            if kv is not None and isinstance(op, Put):
                results.append(replace(kv, value=op.value))
            elif isinstance(op, (Get, Delete)):
                results.append(self._out(kv))
            else:
                results.append(kv)
        return replace(r, results=tuple(results))

    def watch(self, prefix: str, *, from_revision: int) -> AsyncIterator[Event]:
        # the inner watch starts now, as the caller's would (not at the first event asked for)
        return self._decrypted(self.inner.watch(prefix, from_revision=from_revision))

    async def _decrypted(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        try:
            async for ev in events:
                if self.transformer(ev.kv.key) is None:
                    yield ev
                else:
                    yield Event(ev.type, self._out1(ev.kv), self._out(ev.prev_kv))
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    async def close(self) -> None:
        await self.inner.close()
