"""Encryption at rest of the hub store (`--encryption-provider-config`): kube's EncryptionConfiguration
(federator/store/encryption.py) applied to the hub's resources.

`resolve` maps the configuration's resource names (`memberclusters.federator.dev`, `*.federator.dev`,
`*.*`, core `namespaces`) to the store key prefixes of the hub's kinds; a name the hub does not serve is one
line naming the field. `encrypting` wraps the opened store; `rewrite` re-writes every stored object of the
configured resources with the first provider (behind `federator store rewrite`), each write a
compare-and-swap on the object's mod revision, so it is safe while hubs run.

What is secret in the hub store: MemberCluster spec.connection (token, client key and certificate, CA) and
copies of it in kubectl's last-applied-configuration annotation and managedFields, all inside the one
MemberCluster value; examples/encryption-config.yaml encrypts memberclusters.federator.dev.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from federator.apiserver.registry import Registry, ResourceType
from federator.apiserver.storage import resource_key_prefix
from federator.obs import Metrics, get_logger
from federator.store.encryption import (
    EncryptedStore,
    EncryptionConfig,
    EncryptionConfigError,
    Transformer,
)
from federator.store.protocol import KeyNotFound, KeyValue, RevisionMismatch, Store

__all__ = ["RewriteSummary", "encrypting", "resolve", "rewrite"]

_log = get_logger("hub.encryption")
#: objects read per page by `rewrite`
_PAGE = 200
#: compare-and-swap attempts on one object that a running hub keeps changing
_CAS_ATTEMPTS = 20


def _matches(name: str, rt: ResourceType) -> bool:
    resource, _, group = name.partition(".")
    if resource == "*":
        return group == "*" or group == rt.group
    return name == rt.qualified_resource


def resolve(config: EncryptionConfig, registry: Iterable[ResourceType], store_prefix: str
            ) -> list[tuple[str, str, Transformer]]:
    """(resource, key prefix, transformer) for every hub resource the configuration names, in its order
    (a resource named by two entries takes the first, as in kube); EncryptionConfigError naming the field
    for a name that matches none of the hub's resources."""
    kinds = list(registry)
    resolved: list[tuple[str, str, Transformer]] = []
    taken: set[str] = set()
    for i, rule in enumerate(config.rules):
        for j, name in enumerate(rule.resources):
            found = [rt for rt in kinds if _matches(name, rt)]
            if not found:
                raise EncryptionConfigError(
                    f"resources[{i}].resources[{j}]: Unsupported value: {name!r}: the hub serves no such resource "
                    f"(RESOURCE.GROUP as `kubectl api-resources` lists it, e.g. memberclusters.federator.dev)")
            for rt in found:
                prefix = resource_key_prefix(store_prefix, rt)
                if prefix not in taken:
                    taken.add(prefix)
                    resolved.append((rt.qualified_resource, prefix, rule.transformer))
    return resolved


def encrypting(store: Store, config: EncryptionConfig, registry: Registry, *,
               metrics: Metrics | None = None) -> EncryptedStore:
    """`store` wrapped to encrypt the configured resources; logs (and exports, when `metrics` is given)
    which provider and key name write each one, never a key."""
    resolved = resolve(config, registry, store.prefix)
    for resource, _, transformer in resolved:
        if metrics is not None:
            metrics.store_encryption.labels(resource=resource, writes=transformer.writes).set(1)
    _log.info("store encryption at rest", resources={r: t.writes for r, _, t in resolved},
              reads={r: list(t.reads) for r, _, t in resolved})
    return EncryptedStore(store, [(prefix, t) for _, prefix, t in resolved])


@dataclass
class RewriteSummary:
    rewritten: int = 0
    current: int = 0
    gone: int = 0


async def rewrite(store: Store, config: EncryptionConfig, registry: Registry, *,
                  progress: Callable[[str, RewriteSummary], None] | None = None) -> RewriteSummary:
    """Re-write every object of the configured resources whose stored value is not what the first provider
    writes (kube's `kubectl get secrets -A -o json | kubectl replace -f -`). Every value is first read and
    decrypted (a DecryptionError then, before anything is written, names the key); then each stale one is
    written back with a compare-and-swap on its mod revision, re-read and retried when a hub changed it
    meanwhile (`_CAS_ATTEMPTS`). `store` is the raw backend (not wrapped)."""
    wrapped = EncryptedStore(store, [(prefix, t) for _, prefix, t in resolve(config, registry, store.prefix)])
    stale: list[tuple[str, KeyValue]] = []
    summary = RewriteSummary()
    for resource, prefix, transformer in resolve(config, registry, store.prefix):
        start: str | None = None
        while True:
            page = await store.range(prefix, limit=_PAGE, start_after=start)
            for kv in page.kvs:
                if wrapped.transformer(kv.key) is not transformer:
                    continue  # an earlier entry's resource under a longer prefix: it decides
                transformer.decrypt(kv.key, kv.value)  # check all before writing anything
                if transformer.is_current(kv.value):
                    summary.current += 1
                else:
                    stale.append((resource, kv))
            if not page.more or not page.kvs:
                break
            start = page.kvs[-1].key
    for resource, kv in stale:
        found = wrapped.transformer(kv.key)
        assert found is not None
        transformer = found
        current: KeyValue | None = kv
        for _ in range(_CAS_ATTEMPTS):
            if current is None:
                summary.gone += 1
                break
            if transformer.is_current(current.value):
                summary.current += 1
                break
            plain = transformer.decrypt(current.key, current.value)
            try:
                await store.update(current.key, transformer.encrypt(current.key, plain),
                                   expected_mod_revision=current.mod_revision, lease=current.lease)
            except KeyNotFound:
                current = None
                continue
            except RevisionMismatch:
                current = await store.get(kv.key)
                continue
            summary.rewritten += 1
            break
        else:
            raise RevisionMismatch(kv.key, current.mod_revision if current else 0, current)
        if progress is not None:
            progress(resource, summary)
    return summary
