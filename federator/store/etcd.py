"""EtcdStore: the store protocol over a real etcd v3 cluster.

This is the only module that imports an etcd client. The client is
`etcd3aio` (asyncio, grpc.aio, Python 3.11+, maintained, ships protobuf
stubs generated for protobuf >= 5). We chose it over the unmaintained
`etcd3` 0.12, whose generated stubs break with protobuf >= 4, and over
`etcd-sdk-python` (a blocking client that would need a thread per call).
We use etcd3aio for its channel set-up (ConnectionManager: round-robin over
the endpoints, gRPC keepalives) and its generated gRPC stubs, and drive the
RPCs ourselves, for two reasons:
- its watch helper yields the server's "compacted" response and then waits
  on a stream the server has cancelled, i.e. a watch from a compacted
  revision hangs (python-etcd3 has the same bug); our watch raises
  `Compacted` with the compact revision instead;
- its unary retries have no jitter and no overall budget; ours retry
  UNAVAILABLE with capped exponential backoff plus jitter, log what they
  wait for, and raise `StoreUnavailable` once the budget is spent.

A write is retried on an UNAVAILABLE that says the request never left (no
connection to send it on: `_NOT_SENT`). A write that timed out or whose
connection broke after it was sent ("Stream removed", "Connection reset") may
have been applied: an arbitrary txn is then reported as StoreUnavailable
(outcome unknown), never silently sent again. A single-key guarded write (a
create, a compare-and-swap update, a guarded delete: `_guarded_write`) is sent
again, because its guard lets at most one of its attempts commit, and a resent
one whose guard fails is resolved by reading the key back (`_resolve_resent`):
if the stored state is the one this write produced, it is this write's
success, not a 409 for the hub's own object. A watch that loses its server
reconnects from the revision after the last event it delivered, within the
same budget, and otherwise raises StoreUnavailable: it never hangs silently.

With `tls` (open.py's `EtcdTLS.load()`: etcds://) the channel is mutual TLS
(ConnectionManager's ssl credentials: our CA, client certificate and key).
grpc verifies every member against the first endpoint's host, since one
target lists them all. A handshake that fails for good at connect (etcd's
certificate not signed by our CA, or ours refused by etcd) is a
StoreMisconfigured of one line at once, never retried; plain gRPC against a
TLS etcd, or TLS against a plain one, is said the same way once the connect
budget is spent. Endpoints are IP addresses, or one DNS name (a headless
Service) that grpc resolves to every member and balances over.

Lease TTLs are whole seconds in etcd (rounded up here), and etcd enforces a
minimum TTL derived from its election timeout.

This module must never import anything of the hub or the API, and must never
let a grpc error escape: every failure is a StoreError.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

# The hub, `federator up` and the tests start processes (etcd, a real member's kube-apiserver) while grpc's
# threads run. With fork support on, grpc's fork handlers run in the forked child before it execs, and one
# aborted it: a kube-apiserver "exited with -6" before it ran, its log holding only grpc's "Epoll1Poller ...
# epoll_wait error: Bad file descriptor" (a loaded CI run, e2e/kube/test_real_member_ha.py). No child of ours
# uses grpc (each execs at once), so the handlers are turned off; grpc reads this when it is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
# grpc's core logs every failed TLS handshake to stderr on its own; StoreMisconfigured says it in one line.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc  # noqa: E402 (after the fork-support setting above)
import grpc.aio  # noqa: E402
from etcd3aio import _protobuf  # generated etcd v3 stubs shipped with etcd3aio
from etcd3aio.connections import ConnectionManager

from federator.obs import Metrics, get_logger
from federator.store._base import (
    DEFAULT_PREFIX,
    BaseStore,
    check_lease_id,
    check_prefix_arg,
    is_ip_address,
    prefix_end,
)
from federator.store.protocol import (
    Compacted,
    Compare,
    Delete,
    Event,
    EventType,
    FutureRevision,
    Get,
    KeyValue,
    LeaseNotFound,
    Op,
    Put,
    RangeResult,
    StoreError,
    StoreMisconfigured,
    StoreUnavailable,
    StoreUsage,
    TxnResult,
)

if TYPE_CHECKING:
    from federator.store.open import EtcdCredentials

_log = get_logger("store.etcd")
pb: Any = _protobuf  # generated modules: untyped
rpc: Any = pb.rpc_pb2
T = TypeVar("T")

_TARGETS = {
    "version": rpc.Compare.VERSION,
    "create": rpc.Compare.CREATE,
    "mod": rpc.Compare.MOD,
    "value": rpc.Compare.VALUE,
    "lease": rpc.Compare.LEASE,
}
_FIELDS = {"version": "version", "create": "create_revision", "mod": "mod_revision", "value": "value", "lease": "lease"}
_RESULTS = {"=": rpc.Compare.EQUAL, ">": rpc.Compare.GREATER, "<": rpc.Compare.LESS, "!=": rpc.Compare.NOT_EQUAL}
_MAX_MESSAGE = 256 * 1024 * 1024


def _timed_out(e: grpc.aio.AioRpcError) -> bool:
    """The request timed out, on our side (DEADLINE_EXCEEDED) or on etcd's: a member without
    quorum answers a proposal it could not commit in time with UNKNOWN "context deadline
    exceeded". Either way the store is unavailable and a write's outcome is unknown."""
    code = e.code()
    return code == grpc.StatusCode.DEADLINE_EXCEEDED or (
        code == grpc.StatusCode.UNKNOWN and "context deadline exceeded" in (e.details() or "")
    )


#: what grpc says of an RPC that never left this process (no connection to send it on): only then may a write
#: be sent again. "Stream removed", "Connection reset by peer", "Socket closed" come after the request may have
#: reached a member that applied it (etcd's own client retries a write only when no connection was available:
#: clientv3 retry_interceptor.go `isSafeRetryMutableRPC`).
_NOT_SENT = ("failed to connect", "connection refused", "no connection available", "dns resolution failed",
             "name resolution", "no address available", "connections to all backends failing")


def _cut_off(e: grpc.aio.AioRpcError) -> bool:
    """grpc's core, not etcd, ended the call: a stream whose connection broke while it was open (a leader
    crash seen by a lease keepalive stream answers INTERNAL "Internal error from Core"). The store is
    unavailable, as with UNAVAILABLE after the request was sent; etcd's own INTERNAL errors are not this."""
    return e.code() == grpc.StatusCode.INTERNAL and "internal error from core" in (e.details() or "").lower()


def _never_sent(e: grpc.aio.AioRpcError) -> bool:
    """UNAVAILABLE before the request was sent: a write can be retried without being applied twice."""
    details = (e.details() or "").lower()
    return e.code() == grpc.StatusCode.UNAVAILABLE and any(text in details for text in _NOT_SENT)


@dataclass(frozen=True, slots=True)
class _GuardedWrite:
    """A txn of one guarded write to one key: the shape of create (create == 0, Put), a compare-and-swap
    update (mod == N, Put) and a guarded delete (mod == N, Delete), possibly with compares on other keys
    (a leader's fencing token: leader.py's `fenced_txn`) and only reads when a compare fails. Its guard
    lets at most one of its attempts commit, so it may be sent again."""

    key: str
    guard: Compare
    write: Put | Delete


def _guarded_write(compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]) -> _GuardedWrite | None:
    if len(success) != 1 or not isinstance(success[0], (Put, Delete)) or any(not isinstance(f, Get) for f in failure):
        return None
    write = success[0]
    guards = [c for c in compares if c.key == write.key]
    if len(guards) != 1 or guards[0].op != "=" or not isinstance(guards[0].value, int):
        return None
    guard, expected = guards[0], guards[0].value
    if (guard.target == "create" and expected == 0 and isinstance(write, Put)) or (
            guard.target == "mod" and isinstance(expected, int) and expected > 0):
        return _GuardedWrite(write.key, guard, write)
    return None


def _endpoint_in(details: str) -> str | None:
    """The HOST:PORT grpc names in an error's details ("... ipv4:127.0.0.1:2379: Socket closed")."""
    found = re.search(r"ipv[46]:(\S+?:\d+)", details)
    return found.group(1) if found else None


def _enc(key: str) -> bytes:
    return key.encode("utf-8")


def _kv(m: Any) -> KeyValue:
    return KeyValue(m.key.decode("utf-8"), bytes(m.value), m.create_revision, m.mod_revision, m.version, m.lease)


class _Retry:
    """Capped exponential backoff with full jitter, bounded by a time budget."""

    def __init__(self, *, budget_seconds: float, base_seconds: float = 0.05, cap_seconds: float = 2.0) -> None:
        self.budget = budget_seconds
        self.deadline = time.monotonic() + budget_seconds
        self.base = base_seconds
        self.cap = cap_seconds
        self.attempt = 0

    def next_delay(self) -> float | None:
        """Seconds to wait before the next attempt, or None if the budget is spent."""
        self.attempt += 1
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return None
        delay = min(self.cap, self.base * 2 ** (self.attempt - 1))
        return min(remaining, random.uniform(delay / 2, delay))


class EtcdStore(BaseStore):
    """The store protocol over etcd v3. Build it with `await EtcdStore.connect([...])`."""

    backend_name = "etcd"

    def __init__(
        self,
        *,
        endpoints: Sequence[str],
        prefix: str,
        metrics: Metrics | None,
        retry_budget_seconds: float,
        request_timeout_seconds: float,
        tls: EtcdCredentials | None = None,
    ) -> None:
        super().__init__(prefix=prefix, metrics=metrics)
        self.endpoints = list(endpoints)
        self._where = ",".join(self.endpoints)
        self._budget = retry_budget_seconds
        self._timeout = request_timeout_seconds
        manager = ConnectionManager(self.endpoints, keepalive_time_ms=5_000, keepalive_timeout_ms=5_000)
        host = self.endpoints[0].rpartition(":")[0]
        if len(self.endpoints) == 1 and not is_ip_address(host):
            # One DNS name (a headless Service): grpc resolves it to every member, balances over them and
            # resolves it again when they move; the manager's ipv4: target takes addresses only.
            manager.target = f"dns:///{self.endpoints[0]}"
        # Reconnect fast after etcd comes back (gRPC's default backoff grows to 120 s),
        # and accept large ranges.
        manager.grpc_options += [
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2_000),
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
            ("grpc.max_send_message_length", _MAX_MESSAGE),
        ]
        self.tls = tls is not None
        if tls is None:
            self._channel = manager.get_channel()
        else:
            # One target lists every endpoint (round robin), so grpc cannot take the name to verify from it:
            # every member's server certificate must name the first endpoint's host (one certificate for all
            # members, as `federator etcd --tls` and deploy/ make, or each naming all of them).
            self._channel = manager.get_channel(ca_cert=tls.ca_pem, cert_key=tls.key_pem, cert_chain=tls.cert_pem,
                                                tls_server_name=self.endpoints[0].rpartition(":")[0].strip("[]"))
        self._kv_stub = pb.rpc_pb2_grpc.KVStub(self._channel)
        self._lease_stub = pb.rpc_pb2_grpc.LeaseStub(self._channel)
        self._watch_stub = pb.rpc_pb2_grpc.WatchStub(self._channel)
        self._maintenance_stub = pb.rpc_pb2_grpc.MaintenanceStub(self._channel)
        self._known_compact = 0
        #: the highest store revision any response has shown this client: a write sent after it commits at
        #: a higher revision (raft orders it after that one), the bound `_resolve_resent` relies on
        self._seen_revision = 0
        self._closed = False
        self._watch_calls: set[Any] = set()

    @classmethod
    async def connect(
        cls,
        endpoints: Sequence[str],
        *,
        prefix: str = DEFAULT_PREFIX,
        metrics: Metrics | None = None,
        connect_timeout_seconds: float = 10.0,
        retry_budget_seconds: float = 10.0,
        request_timeout_seconds: float = 5.0,
        tls: EtcdCredentials | None = None,
    ) -> EtcdStore:
        """Connect and check that etcd answers (retrying for at most
        `connect_timeout_seconds`); StoreUnavailable if it never does, StoreMisconfigured at once if a member
        refuses the TLS handshake or speaks the other protocol (TLS against plain gRPC, or the reverse).
        `tls` (open.py's EtcdTLS.load()) makes it mutual TLS: the CA that verifies etcd, our certificate and
        key."""
        if not endpoints:
            raise StoreError("etcd store needs at least one endpoint HOST:PORT")
        store = cls(
            endpoints=endpoints,
            prefix=prefix,
            metrics=metrics,
            retry_budget_seconds=retry_budget_seconds,
            request_timeout_seconds=request_timeout_seconds,
            tls=tls,
        )

        last_details = [""]

        async def first_read(timeout: float) -> Any:
            try:
                return await store._kv_stub.Range(rpc.RangeRequest(key=_enc(prefix), count_only=True), timeout=timeout)
            except grpc.aio.AioRpcError as e:
                refused = store._refusal(e)
                if refused is not None:
                    raise refused from None
                last_details[0] = e.details() or ""
                raise

        try:
            revision = await store._call("connect", first_read, idempotent=True,
                                         budget_seconds=connect_timeout_seconds)
        except StoreUnavailable:
            await store._channel.close()
            mismatch = store._protocol_mismatch(last_details[0])
            if mismatch is not None:
                raise mismatch from None
            raise
        except BaseException:
            await store._channel.close()
            raise
        _log.info("etcd store connected", endpoints=store._where, revision=revision.header.revision)
        return store

    def _refusal(self, e: grpc.aio.AioRpcError) -> StoreMisconfigured | None:
        """A TLS handshake that failed for good (a certificate that did not verify, ours or etcd's): one line
        naming the member and the flag to check; None for anything else."""
        details = e.details() or ""
        host = self.endpoints[0].rpartition(":")[0]
        where = _endpoint_in(details) or self._where
        if e.code() == grpc.StatusCode.UNAVAILABLE and "hostname verification check failed" in details.lower():
            return StoreMisconfigured(
                f"etcd {where} refused the TLS handshake: its server certificate does not name {host} (every "
                "member's certificate must name the store URL's first host: use that name in --store, or "
                "reissue the certificate with it)")
        if e.code() != grpc.StatusCode.UNAVAILABLE or "handshake failed" not in details.lower():
            return None
        found = re.search(r"OPENSSL_internal:([A-Z0-9_]+)(?::\s*([^:]+))?", details)
        code = found.group(1) if found else ""
        parts = (code.replace("_", " ").lower(), (found.group(2) or "").strip() if found else "")
        reason = ": ".join(p for p in parts if p and p.lower() != "ok")
        if "VERIFY_FAILED" in code:
            return StoreMisconfigured(
                f"etcd {where} refused the TLS handshake: {reason} (is --etcd-cafile the CA that signed etcd's "
                "server certificate?)")
        if "ALERT" in code:
            return StoreMisconfigured(
                f"etcd {where} refused the TLS handshake: {reason} (etcd did not accept this client's certificate: "
                "is --etcd-certfile signed by a CA in etcd's --trusted-ca-file?)")
        return None

    def _protocol_mismatch(self, details: str) -> StoreMisconfigured | None:
        """What connect's last error says when every attempt failed: a plain gRPC channel closed by a TLS
        server, or a TLS handshake a plain server never answered (only after the whole connect budget: a
        member that crashes mid-connection looks alike once)."""
        where = _endpoint_in(details) or self._where
        lowered = details.lower()
        if not self.tls and "socket closed" in lowered:
            return StoreMisconfigured(
                f"etcd {where} closed every plain gRPC connection: does it serve TLS (etcd's --cert-file)? Then "
                f"use etcds://{self._where} with --etcd-cafile, --etcd-certfile and --etcd-keyfile")
        if self.tls and "handshake read failed" in lowered:
            return StoreMisconfigured(
                f"etcd {where} did not answer the TLS handshake: does it serve plain gRPC (no --cert-file)? Then "
                f"use etcd://{self._where} without --etcd-cafile, --etcd-certfile and --etcd-keyfile")
        return None

    # ------------------------------------------------------------ RPC with retries

    async def _call(
        self,
        op: str,
        fn: Callable[[float], Awaitable[T]],
        *,
        idempotent: bool,
        budget_seconds: float | None = None,
        resend: bool = False,
    ) -> T:
        """Run `fn` (given the request timeout), retrying what may be retried within the budget: anything
        unavailable for a read (`idempotent`); for a write only a request that never left, or, with `resend`
        (a guarded write whose caller resolves an earlier attempt's commit by reading back), any
        unavailable, timed-out or cut-off attempt."""
        if self._closed:
            raise StoreUnavailable(f"etcd store ({self._where}) is closed")
        retry = _Retry(budget_seconds=self._budget if budget_seconds is None else budget_seconds)
        while True:
            try:
                result = await fn(self._timeout)
            except grpc.aio.AioRpcError as e:
                code = e.code()
                retriable = (
                    (code == grpc.StatusCode.UNAVAILABLE or _timed_out(e) or _cut_off(e)) if idempotent or resend
                    else _never_sent(e)
                )
                if not retriable:
                    raise self._translate(e, op) from None
                delay = retry.next_delay()
                if delay is None:
                    unknown = "; its outcome is unknown" if resend else ""
                    raise StoreUnavailable(
                        f"etcd at {self._where} unavailable: {op} failed {retry.attempt} times "
                        f"within its {retry.budget:g}s retry budget; last error {code.name}: {e.details()}{unknown}"
                    ) from None
                self._metrics.retry(op)
                _log.warning(
                    "etcd unavailable; retrying", op=op, endpoints=self._where, attempt=retry.attempt,
                    wait_seconds=round(delay, 3), error=f"{code.name}: {e.details()}",
                )
                await asyncio.sleep(delay)
            else:
                header = getattr(result, "header", None)
                if header is not None:
                    self._seen_revision = max(self._seen_revision, int(header.revision))
                return result

    def _translate(self, e: grpc.aio.AioRpcError, op: str) -> StoreError:
        code, details = e.code(), e.details() or ""
        if _timed_out(e):
            return StoreUnavailable(
                f"etcd at {self._where}: {op} timed out ({code.name}: {details}); its outcome is unknown"
            )
        if code == grpc.StatusCode.UNAVAILABLE or _cut_off(e):  # a write cut off after it was sent (see _NOT_SENT)
            return StoreUnavailable(
                f"etcd at {self._where}: {op} was cut off ({code.name}: {details}); its outcome is unknown"
            )
        if "request is too large" in details or code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return StoreError(f"etcd at {self._where} refused {op} as too large: {details}")
        return StoreError(f"etcd at {self._where}: {op} failed: {code.name}: {details}")

    # ------------------------------------------------------------ reads

    async def _get(self, key: str) -> KeyValue | None:
        resp = await self._call(
            "get", lambda t: self._kv_stub.Range(rpc.RangeRequest(key=_enc(key)), timeout=t), idempotent=True
        )
        return _kv(resp.kvs[0]) if resp.kvs else None

    async def _range(
        self, prefix: str, *, limit: int, start_after: str | None, revision: int | None
    ) -> RangeResult:
        end = _enc(prefix_end(prefix))
        start = _enc(prefix)
        if start_after is not None and start_after >= prefix:
            start = _enc(start_after) + b"\x00"
        request = rpc.RangeRequest(key=start, range_end=end, limit=limit, revision=revision or 0)
        resp = await self._range_call(request, revision)
        count = resp.count
        at = revision or resp.header.revision
        if start != _enc(prefix):
            counted = await self._range_call(
                rpc.RangeRequest(key=_enc(prefix), range_end=end, count_only=True, revision=at), at
            )
            count = counted.count
        return RangeResult(kvs=tuple(_kv(m) for m in resp.kvs), revision=at, more=resp.more, count=count)

    async def _range_call(self, request: Any, revision: int | None) -> Any:
        try:
            return await self._call("range", lambda t: self._kv_stub.Range(request, timeout=t), idempotent=True)
        except StoreError as e:
            if revision and "compacted" in str(e):
                raise Compacted(revision, await self._find_compact_revision()) from None
            if revision and "future revision" in str(e):
                raise FutureRevision(revision, await self.current_revision()) from None
            raise

    # ------------------------------------------------------------ writes

    async def _txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]
    ) -> TxnResult:
        guarded = _guarded_write(compares, success, failure)
        bound = self._seen_revision
        request = rpc.TxnRequest(
            compare=[self._compare(c) for c in compares],
            success=[self._op(o) for o in success],
            failure=[self._op(o) for o in failure],
        )
        attempts = 0

        def send(timeout: float) -> Awaitable[Any]:
            nonlocal attempts
            attempts += 1
            call: Awaitable[Any] = self._kv_stub.Txn(request, timeout=timeout)
            return call

        try:
            resp = await self._call("txn", send, idempotent=False, resend=guarded is not None)
        except StoreError as e:
            if "lease not found" in str(e):
                leases = [o.lease for o in (*success, *failure) if isinstance(o, Put) and o.lease]
                raise LeaseNotFound(leases[0] if leases else 0) from None
            raise
        result = self._txn_result(resp, success, failure)
        if result.succeeded or guarded is None or attempts == 1:
            # A resent guarded write that succeeded is the only one of its attempts that committed: the
            # guard of a committed earlier attempt would have failed it.
            return result
        return await self._resolve_resent(guarded, bound=bound, failed=result)

    async def _resolve_resent(self, w: _GuardedWrite, *, bound: int, failed: TxnResult) -> TxnResult:
        """A guarded write was sent more than once (an attempt was cut off, timed out or met UNAVAILABLE
        after it may have left) and the last attempt's guard failed: that is either an earlier attempt's
        own commit or another writer's. Read the key back; the write is ours, and succeeded, when the
        stored state is the one it produced, committed after `bound` (the highest revision this client
        had seen before the first attempt, so the state did not exist before the write was sent):

        - a create: the key holds our value and lease at version 1 (unmodified since), created after bound;
        - an update guarded by mod == N: the key holds our value and lease, in the lifetime that held N
          (created at or before N), last modified after N and after bound;
        - a delete guarded by mod == N: the key as of N had mod_revision N, and the key is gone now or was
          created again after N (its lifetime at N ended: the object the delete named is gone).

        Identical bytes from another writer would look the same (ABA), but every object the hub stores
        carries its uid, creationTimestamp and the fields of the request that produced it, so two writers
        producing the same bytes for the same key after the same revision is not a case that occurs.
        A delete that another writer won is reported as this one's success: the object it named is gone,
        which is what its caller asked for. Anything else keeps the guard's failure (a genuine 409/404)."""
        current = await self._get(w.key)
        guard = int(w.guard.value) if isinstance(w.guard.value, int) else 0
        kv: KeyValue | None = None
        revision = 0
        if isinstance(w.write, Put):
            if (current is not None and current.value == bytes(w.write.value) and current.lease == w.write.lease
                    and current.mod_revision > bound):
                ours = (current.version == 1 if w.guard.target == "create"
                        else current.create_revision <= guard < current.mod_revision)
                if ours:
                    kv, revision = current, current.mod_revision
        elif current is None or current.create_revision > guard:
            try:
                at_guard = await self._range_call(rpc.RangeRequest(key=_enc(w.key), revision=guard), guard)
            except Compacted:
                raise StoreUnavailable(
                    f"etcd at {self._where}: delete of {w.key!r} was sent again after its outcome was unknown, "
                    f"and revision {guard} is compacted: its outcome is unknown"
                ) from None
            prev = _kv(at_guard.kvs[0]) if at_guard.kvs else None
            if prev is not None and prev.mod_revision == guard:
                # The delete's own revision is not known without history: the revision at which the key was
                # read gone (or recreated) is at or after it.
                kv, revision = prev, self._seen_revision
        if kv is None:
            return failed
        _log.info("etcd write sent again after an unknown outcome found its own commit",
                  op="create" if w.guard.target == "create" else ("update" if isinstance(w.write, Put) else "delete"),
                  key=w.key, revision=revision)
        return TxnResult(succeeded=True, revision=revision, results=(kv,))

    @staticmethod
    def _txn_result(resp: Any, success: Sequence[Op], failure: Sequence[Op]) -> TxnResult:
        rev = resp.header.revision
        ops = success if resp.succeeded else failure
        results: list[KeyValue | None] = []
        for op, r in zip(ops, resp.responses, strict=True):
            if isinstance(op, Get):
                kvs = r.response_range.kvs
                results.append(_kv(kvs[0]) if kvs else None)
            elif isinstance(op, Put):
                put = r.response_put
                if put.HasField("prev_kv"):
                    prev = _kv(put.prev_kv)
                    results.append(KeyValue(op.key, bytes(op.value), prev.create_revision, rev, prev.version + 1, op.lease))
                else:
                    results.append(KeyValue(op.key, bytes(op.value), rev, rev, 1, op.lease))
            else:
                prevs = r.response_delete_range.prev_kvs
                results.append(_kv(prevs[0]) if prevs else None)
        return TxnResult(succeeded=resp.succeeded, revision=rev, results=tuple(results))

    @staticmethod
    def _compare(c: Compare) -> Any:
        value = bytes(c.value) if isinstance(c.value, (bytes, bytearray)) else c.value
        return rpc.Compare(key=_enc(c.key), target=_TARGETS[c.target], result=_RESULTS[c.op], **{_FIELDS[c.target]: value})

    @staticmethod
    def _op(op: Op) -> Any:
        if isinstance(op, Get):
            return rpc.RequestOp(request_range=rpc.RangeRequest(key=_enc(op.key)))
        if isinstance(op, Put):
            return rpc.RequestOp(
                request_put=rpc.PutRequest(key=_enc(op.key), value=bytes(op.value), lease=op.lease, prev_kv=True)
            )
        return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=_enc(op.key), prev_kv=True))

    # ------------------------------------------------------------ revisions and compaction

    async def current_revision(self) -> int:
        resp = await self._call(
            "revision",
            lambda t: self._kv_stub.Range(rpc.RangeRequest(key=_enc(self.prefix), count_only=True), timeout=t),
            idempotent=True,
        )
        return int(resp.header.revision)

    async def compact(self, revision: int) -> None:
        if not isinstance(revision, int) or isinstance(revision, bool):
            raise StoreError(f"compact revision must be an int, not {revision!r}")
        try:
            await self._timed(
                "compact",
                lambda: self._call(
                    "compact",
                    lambda t: self._kv_stub.Compact(rpc.CompactionRequest(revision=revision), timeout=t),
                    idempotent=True,
                ),
            )
        except StoreError as e:
            if "compacted" in str(e):
                raise Compacted(revision, await self._find_compact_revision()) from None
            if "future revision" in str(e):
                raise FutureRevision(revision, await self.current_revision()) from None
            raise
        if revision > self._known_compact:
            self._metrics.compacted()
        self._known_compact = max(self._known_compact, revision)

    async def compact_revision(self) -> int:
        return await self._find_compact_revision()

    async def usage(self) -> StoreUsage:
        """etcd's dbSize as the member that answers reports it (Maintenance.Status: one small RPC). etcd
        cannot count the keys under our prefix cheaply, so `keys` stays None."""
        resp = await self._call("status", lambda t: self._maintenance_stub.Status(rpc.StatusRequest(), timeout=t),
                                idempotent=True)
        usage = StoreUsage(size_bytes=int(resp.dbSize))
        self._metrics.usage(usage)
        return usage

    async def _find_compact_revision(self) -> int:
        """etcd does not report its compact revision directly; find the oldest
        readable revision by bisection (range at a compacted revision fails).
        0 means nothing was ever compacted."""

        async def readable(rev: int) -> bool:
            try:
                await self._call(
                    "compact_revision",
                    lambda t: self._kv_stub.Range(
                        rpc.RangeRequest(key=_enc(self.prefix), count_only=True, revision=rev), timeout=t
                    ),
                    idempotent=True,
                )
            except StoreError as e:
                if "compacted" in str(e):
                    return False
                raise
            return True

        lo = max(1, self._known_compact)
        if await readable(lo):  # the common case: nothing compacted since we last looked
            return lo if lo > 1 else 0
        hi = await self.current_revision()
        while lo < hi:  # invariant: lo unreadable, hi readable
            mid = (lo + hi) // 2
            if mid == lo:
                break
            if await readable(mid):
                hi = mid
            else:
                lo = mid
        self._known_compact = max(self._known_compact, hi)
        return hi

    # ------------------------------------------------------------ watch

    def watch(self, prefix: str, *, from_revision: int) -> AsyncIterator[Event]:
        """Events under `prefix` with revision >= from_revision, then live
        ones; from_revision <= 0 means "only what happens from now on"."""
        check_prefix_arg(self.prefix, prefix)
        if not isinstance(from_revision, int) or isinstance(from_revision, bool):
            raise StoreError(f"from_revision must be an int, not {from_revision!r}")
        if self._closed:
            raise StoreUnavailable(f"etcd store ({self._where}) is closed")
        return self._watch(prefix, from_revision)

    async def _watch(self, prefix: str, from_revision: int) -> AsyncIterator[Event]:
        cursor = from_revision if from_revision > 0 else 0
        retry: _Retry | None = None
        while True:
            if self._closed:
                raise StoreUnavailable(f"etcd store ({self._where}) was closed while a watch was open")
            call = self._watch_stub.Watch()
            self._watch_calls.add(call)
            try:
                await call.write(rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
                    key=_enc(prefix), range_end=_enc(prefix_end(prefix)), start_revision=cursor,
                    prev_kv=True, progress_notify=True,
                )))
                while True:
                    resp = await call.read()
                    if resp is grpc.aio.EOF:
                        raise StoreUnavailable(f"etcd at {self._where} ended a watch stream")
                    if resp.compact_revision > 0:
                        self._known_compact = max(self._known_compact, resp.compact_revision)
                        raise Compacted(cursor, resp.compact_revision)
                    if resp.canceled:
                        raise StoreError(f"etcd at {self._where} cancelled a watch on {prefix!r}: {resp.cancel_reason}")
                    if resp.created:
                        if cursor == 0:
                            cursor = resp.header.revision + 1
                        retry = None  # connected again: a later loss gets a fresh budget
                        continue
                    if not resp.events:
                        # A progress notification: everything up to here was sent.
                        cursor = max(cursor, resp.header.revision + 1)
                        continue
                    for e in resp.events:
                        ev = self._event(e)
                        cursor = ev.revision + 1
                        self._metrics.watch_events.inc()
                        yield ev
            except grpc.aio.AioRpcError as e:
                if self._closed:
                    raise StoreUnavailable(f"etcd store ({self._where}) was closed while a watch was open") from None
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                    grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
                    raise self._translate(e, "watch") from None
                if retry is None:
                    retry = _Retry(budget_seconds=self._budget)
                delay = retry.next_delay()
                if delay is None:
                    raise StoreUnavailable(
                        f"etcd at {self._where} unavailable: watch on {prefix!r} could not resume from "
                        f"revision {cursor} within {self._budget}s; last error {e.code().name}: {e.details()}"
                    ) from None
                self._metrics.retry("watch")
                _log.warning(
                    "etcd watch lost; resuming", prefix=prefix, from_revision=cursor, attempt=retry.attempt,
                    wait_seconds=round(delay, 3), error=f"{e.code().name}: {e.details()}",
                )
                await asyncio.sleep(delay)
            finally:
                call.cancel()
                self._watch_calls.discard(call)

    @staticmethod
    def _event(e: Any) -> Event:
        prev = _kv(e.prev_kv) if e.HasField("prev_kv") else None
        if e.type == pb.kv_pb2.Event.DELETE:
            key = e.kv.key.decode("utf-8")
            kv = replace(prev, mod_revision=e.kv.mod_revision) if prev else KeyValue(key, b"", 0, e.kv.mod_revision, 0, 0)
            return Event(EventType.DELETE, kv, prev)
        return Event(EventType.PUT, _kv(e.kv), prev)

    # ------------------------------------------------------------ leases

    async def lease_grant(self, ttl_seconds: float) -> int:
        if not isinstance(ttl_seconds, (int, float)) or isinstance(ttl_seconds, bool) or not ttl_seconds > 0:
            raise StoreError(f"lease TTL must be a number of seconds > 0, not {ttl_seconds!r}")
        ttl = max(1, math.ceil(ttl_seconds))
        resp = await self._call(
            "lease_grant", lambda t: self._lease_stub.LeaseGrant(rpc.LeaseGrantRequest(TTL=ttl), timeout=t),
            idempotent=False,
        )
        if resp.error:
            raise StoreError(f"etcd at {self._where} refused a lease: {resp.error}")
        return int(resp.ID)

    async def lease_keepalive(self, lease: int) -> None:
        check_lease_id(lease)

        async def once(timeout: float) -> Any:
            call = self._lease_stub.LeaseKeepAlive(timeout=timeout)
            try:
                await call.write(rpc.LeaseKeepAliveRequest(ID=lease))
                return await call.read()
            finally:
                call.cancel()

        resp = await self._call("lease_keepalive", once, idempotent=True)
        if resp is grpc.aio.EOF or resp.TTL <= 0:
            raise LeaseNotFound(lease)

    async def lease_revoke(self, lease: int) -> None:
        check_lease_id(lease)
        try:
            await self._call(
                "lease_revoke",
                lambda t: self._lease_stub.LeaseRevoke(rpc.LeaseRevokeRequest(ID=lease), timeout=t),
                idempotent=True,
            )
        except StoreError as e:
            if "not found" in str(e):
                raise LeaseNotFound(lease) from None
            raise

    # ------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for call in list(self._watch_calls):
            call.cancel()
        await self._channel.close()
        _log.info("etcd store closed", endpoints=self._where)
