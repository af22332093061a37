"""Child process for the sqlite crash-safety test (run as a script, never imported).

Writes to a SqliteStore from several concurrent tasks, forever, and prints one
line per acknowledged write: `ack KEY REVISION`. The test SIGKILLs it at a
random moment and checks that every acknowledged write survived intact.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys


def payload(key: str, n: int) -> bytes:
    # Self-checking value: a torn or mixed-up write cannot pass `check`.
    body = (hashlib.sha256(f"{key}:{n}".encode()).hexdigest() * 40).encode()
    return f"{key}:{n}:".encode() + body + b":" + hashlib.sha256(body).hexdigest().encode()


def check(key: str, value: bytes) -> int:
    k, n, body, digest = value.split(b":")
    assert k.decode() == key, (k, key)
    assert hashlib.sha256(body).hexdigest().encode() == digest, "torn value"
    assert value == payload(key, int(n))
    return int(n)


async def main(path: str, prefix: str) -> None:
    sys.path.insert(0, ".")
    from federator.store.sqlite import SqliteStore

    store = await SqliteStore.open(path, prefix=prefix)
    print("ready", flush=True)

    async def writer(w: int) -> None:
        n = 0
        while True:
            key = f"{prefix}w{w}/k{n % 50}"
            kv = await store.put(key, payload(key, n))
            print(f"ack {key} {n} {kv.mod_revision}", flush=True)
            n += 1

    await asyncio.gather(*(writer(w) for w in range(4)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
