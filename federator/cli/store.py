"""`federator store rewrite`: re-encrypt the hub store after an encryption key rotation.

    federator store rewrite --store URL --encryption-provider-config FILE

Kube's `kubectl get secrets -A -o json | kubectl replace -f -` for the hub: every stored object of the
resources the configuration names whose value is not what its first provider writes (an older key, another
provider, plain text) is written again with the first provider (federator/hub/encryption.py's `rewrite`).
Each write is a compare-and-swap on the object's revision, so hubs on etcd may run meanwhile (a sqlite
file takes one process: stop its hub first); give the same
configuration to the hubs first (with the new key first), then rewrite, then drop the old key.

Every object is read and decrypted before anything is written: a bad flag, a configuration that cannot be
used, a store that does not open or a value no listed key reads is one line on stderr (exit code 2 or 1)
and changes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import textwrap
from pathlib import Path
from typing import Any

from federator.cli.common import UserError, etcd_tls_flags


def register(sub: Any) -> None:
    """Add `store` (with `store rewrite`) to the `federator` parser."""
    p = sub.add_parser("store", help="maintenance of the hub store (rewrite: re-encrypt after a key rotation)",
                       description="Maintenance of the hub store.")
    verbs = p.add_subparsers(dest="store_verb", metavar="{rewrite}")
    verbs.required = True
    r = verbs.add_parser(
        "rewrite",
        help="re-write every object of the encrypted resources with the current first provider",
        description=textwrap.fill(
            "Re-write every stored object of the resources --encryption-provider-config names whose value is "
            "not what the configuration's first provider writes (written with an older key, another provider, "
            "or in plain text), as kube's `kubectl get secrets -A -o json | kubectl replace -f -` does after a "
            "key rotation. Each write is a compare-and-swap on the object's revision: hubs on etcd may run meanwhile "
            "(a sqlite file takes one process: stop its hub first). "
            "Everything is read and decrypted first: a value no listed key reads stops the command before it "
            "writes anything. It prints progress and a summary (N rewritten, M already current).", width=79),
        epilog=(
            "Key rotation (README: Encryption at rest):\n"
            "  1. add the new key to every hub's file, second; restart the hubs (all can read it)\n"
            "  2. move it first; restart the hubs (new writes use it)\n"
            "  3. federator store rewrite --store URL --encryption-provider-config FILE\n"
            "  4. remove the old key; restart the hubs"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("--store", required=True, metavar="URL",
                   help="the hub store: sqlite://PATH, etcd://HOST:PORT[,HOST:PORT...] or etcds://... (mutual "
                        "TLS, with the three --etcd-* flags)")
    etcd_tls_flags(r, who="this command's")
    r.add_argument("--encryption-provider-config", required=True, metavar="FILE",
                   help="the EncryptionConfiguration the hubs run with (its first provider writes)")
    r.set_defaults(handler=_cmd_rewrite)


def _cmd_rewrite(args: argparse.Namespace) -> int:
    from federator.hub.app import HUB_STORE_PREFIX
    from federator.hub.encryption import RewriteSummary, resolve, rewrite
    from federator.hub.kinds import hub_registry
    from federator.store.encryption import EncryptionConfigError, read_encryption_config
    from federator.store.open import check_store_url, etcd_tls_from_flags, open_store
    from federator.store.protocol import StoreError, StoreMisconfigured

    from federator.obs import configure_logging

    configure_logging(level="warning")  # the store's own info lines (opened, closed) are not this command's output
    path = args.encryption_provider_config
    registry = hub_registry()
    try:
        config = read_encryption_config(path)
        resolve(config, registry, HUB_STORE_PREFIX)
    except EncryptionConfigError as e:
        raise UserError(f"--encryption-provider-config {path}: {e}") from None
    try:
        etcd_tls = etcd_tls_from_flags(args.etcd_cafile, args.etcd_certfile, args.etcd_keyfile)
        check_store_url(args.store, etcd_tls)
    except StoreMisconfigured as e:
        raise UserError(str(e)) from None
    if str(args.store).startswith("memory:"):
        raise UserError("--store memory:// is this process's own empty store: name the hub's sqlite:// or etcd://")
    if str(args.store).startswith("sqlite://"):
        db = Path(str(args.store).removeprefix("sqlite://").split("?", 1)[0])
        if not db.is_file():
            raise UserError(f"--store {args.store}: no such sqlite file (nothing to rewrite)")

    def progress(resource: str, summary: RewriteSummary) -> None:
        if summary.rewritten and summary.rewritten % 100 == 0:
            print(f"rewrote {summary.rewritten} objects so far (now {resource})", flush=True)

    async def run() -> RewriteSummary:
        store = await open_store(args.store, prefix=HUB_STORE_PREFIX, connect_timeout_seconds=10.0,
                                 etcd_tls=etcd_tls)
        try:
            return await rewrite(store, config, registry, progress=progress)
        finally:
            await store.close()

    try:
        summary = asyncio.run(run())
    except StoreMisconfigured as e:  # a refused TLS handshake: the flags are wrong
        raise UserError(f"store rewrite: {e}") from None
    except StoreError as e:
        raise UserError(f"store rewrite: {e}", exit_code=1) from None
    writes = sorted({rule.transformer.writes for rule in config.rules})
    gone = f", {summary.gone} deleted meanwhile" if summary.gone else ""
    print(f"{summary.rewritten} objects rewritten with {', '.join(writes)}, {summary.current} already "
          f"current{gone}")
    return 0

