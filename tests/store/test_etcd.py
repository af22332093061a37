"""etcd-only faults: unreachable etcd, etcd going away and coming back, mid-watch."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest

from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdProcess, free_port
from federator.store.protocol import Event, StoreError, StoreUnavailable

PREFIX = "/federator/"


async def test_unreachable_etcd_gives_store_unavailable_in_bounded_time() -> None:
    endpoint = f"127.0.0.1:{free_port()}"  # nothing listens here
    async with asyncio.timeout(30):  # a hang fails the test
        with pytest.raises(StoreUnavailable, match=endpoint):
            await EtcdStore.connect([endpoint], connect_timeout_seconds=1.0)


async def test_operations_fail_cleanly_while_etcd_is_down_and_work_when_it_returns(
    etcd_factory: Callable[[], EtcdProcess],
) -> None:
    etcd = etcd_factory()
    store = await EtcdStore.connect([etcd.endpoint], retry_budget_seconds=1.0)
    try:
        kv = await store.put(PREFIX + "k", b"1")
        etcd.kill()
        async with asyncio.timeout(30):
            # Either "unavailable" (the client saw the socket close first) or "cut off ... outcome
            # unknown" (the put raced the close): both are clean failures naming the etcd.
            with pytest.raises(StoreUnavailable, match=f"etcd at {re.escape(etcd.endpoint)}"):
                await store.put(PREFIX + "k", b"2")
            with pytest.raises(StoreUnavailable):
                await store.get(PREFIX + "k")
        etcd.start()  # same ports, same data
        store_after = await EtcdStore.connect([etcd.endpoint], retry_budget_seconds=10.0)
        try:
            assert (await store_after.get(PREFIX + "k")) == kv
        finally:
            await store_after.close()
        async with asyncio.timeout(30):
            while True:  # the old client reconnects by itself
                try:
                    assert (await store.get(PREFIX + "k")) == kv
                    break
                except StoreUnavailable:
                    await asyncio.sleep(0.1)
    finally:
        await store.close()


async def test_watch_survives_etcd_restart_without_gaps_or_duplicates(
    etcd_factory: Callable[[], EtcdProcess],
) -> None:
    etcd = etcd_factory()
    store = await EtcdStore.connect([etcd.endpoint], retry_budget_seconds=30.0)
    try:
        start = await store.current_revision() + 1
        got: list[Event] = []
        three = asyncio.Event()

        async def follow() -> None:
            async for ev in store.watch(PREFIX, from_revision=start):
                got.append(ev)
                if len(got) == 3:
                    three.set()
                if len(got) == 6:
                    return

        task = asyncio.create_task(follow())
        before = [await store.put(PREFIX + f"k{i}", b"before") for i in range(3)]
        async with asyncio.timeout(30):
            await three.wait()
        etcd.kill()
        etcd.start()
        after = [await store.put(PREFIX + f"k{i}", b"after") for i in range(3)]
        async with asyncio.timeout(30):
            await task
        assert [ev.kv for ev in got] == before + after
    finally:
        await store.close()


async def test_watch_raises_store_unavailable_when_etcd_stays_away(
    etcd_factory: Callable[[], EtcdProcess],
) -> None:
    etcd = etcd_factory()
    store = await EtcdStore.connect([etcd.endpoint], retry_budget_seconds=1.0)
    try:
        created = asyncio.Event()

        async def follow() -> None:
            it = store.watch(PREFIX, from_revision=0)
            created.set()
            async for _ in it:
                pass

        task = asyncio.create_task(follow())
        await created.wait()
        await store.put(PREFIX + "k", b"1")
        etcd.kill()
        async with asyncio.timeout(30):  # never a silent hang
            with pytest.raises(StoreUnavailable, match="watch"):
                await task
    finally:
        await store.close()


async def test_an_etcd_side_timeout_is_unavailable_with_an_unknown_outcome_and_a_read_is_retried(
    etcd_factory: Callable[[], EtcdProcess],
) -> None:
    """A member that cannot commit a proposal in time (quorum lost) answers UNKNOWN "context
    deadline exceeded" just before our own deadline fires: the same fault as DEADLINE_EXCEEDED,
    so the API answers 503, not 500 (seen once in CI on the 3-member quorum-loss test)."""
    import grpc

    etcd = etcd_factory()
    store = await EtcdStore.connect([etcd.endpoint], retry_budget_seconds=5.0)
    server_timeout = grpc.aio.AioRpcError(
        grpc.StatusCode.UNKNOWN, grpc.aio.Metadata(), grpc.aio.Metadata(), details="context deadline exceeded",
    )
    try:
        async def write(_timeout: float) -> None:
            raise server_timeout

        with pytest.raises(StoreUnavailable, match="outcome is unknown"):
            await store._call("txn", write, idempotent=False)

        calls = 0
        await store.put(PREFIX + "k", b"1")

        async def read_after_one_timeout(timeout: float) -> object:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise server_timeout
            return await store.get(PREFIX + "k")

        got = await store._call("get", read_after_one_timeout, idempotent=True)
        assert calls == 2 and got is not None and got.value == b"1"

        async def other_unknown(_timeout: float) -> None:
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNKNOWN, grpc.aio.Metadata(), grpc.aio.Metadata(), details="something else",
            )

        with pytest.raises(Exception) as other:
            await store._call("txn", other_unknown, idempotent=False)
        assert not isinstance(other.value, StoreUnavailable)
    finally:
        await store.close()


@pytest.mark.parametrize(("details", "sent"), [
    ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:2379: Connection refused", False),
    ("DNS resolution failed for etcd.invalid:2379", False),
    ("connections to all backends failing; last error: UNAVAILABLE: ipv4:127.0.0.1:21272: recvmsg:Connection "
     "reset by peer (104)", False),
    ("Stream removed (recvmsg:Connection reset by peer (104))", True),
    ("Socket closed", True),
    ("Connection reset by peer", True),
])
def test_a_write_is_sent_again_only_when_it_never_left(details: str, sent: bool) -> None:
    """A create whose connection broke after it was sent may have been applied (the chaos suite saw the retry
    of such a create answer 409 for the hub's own object): only a request that never left is sent again."""
    import grpc

    from federator.store.etcd import _never_sent

    error = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                 details=details)
    assert _never_sent(error) is (not sent)
    timed_out = grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                     details=details)
    assert not _never_sent(timed_out)


async def test_a_stream_grpc_core_ended_is_retried_when_idempotent_and_unknown_otherwise(
    etcd_factory: Callable[[], EtcdProcess],
) -> None:
    """A lease keepalive stream open when the leader crashed ended with INTERNAL "Internal error from Core"
    (a CI run): that is the connection, not etcd; a keepalive is sent again, a write's outcome is unknown."""
    import grpc

    from federator.store.etcd import EtcdStore

    store = await EtcdStore.connect([etcd_factory().endpoint], retry_budget_seconds=5.0)
    calls = 0

    async def core_ended_once(timeout: float) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       details="Internal error from Core")
        return "kept alive"

    async def etcd_internal(timeout: float) -> str:
        raise grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                   details="etcdserver: some internal failure")

    try:
        assert await store._call("lease_keepalive", core_ended_once, idempotent=True) == "kept alive"
        assert calls == 2
        calls = 0
        with pytest.raises(StoreUnavailable, match="outcome is unknown"):
            await store._call("txn", core_ended_once, idempotent=False)
        assert calls == 1
        with pytest.raises(StoreError) as other:
            await store._call("lease_keepalive", etcd_internal, idempotent=True)
        assert not isinstance(other.value, StoreUnavailable)
    finally:
        await store.close()


def test_children_started_beside_grpc_threads_run_no_grpc_fork_handlers() -> None:
    """A kube-apiserver forked while grpc's threads ran was aborted by grpc's fork handlers before it could exec
    (SIGABRT, 'epoll_wait error: Bad file descriptor'); importing the store turns them off."""
    import subprocess
    import sys

    script = (
        "import asyncio, os, subprocess\n"
        "import federator.store.etcd\n"
        "import grpc.aio\n"
        "async def main():\n"
        "    channel = grpc.aio.insecure_channel('127.0.0.1:1')\n"
        "    async def spin():\n"
        "        while True:\n"
        "            try:\n"
        "                await asyncio.wait_for(channel.channel_ready(), 0.05)\n"
        "            except Exception:\n"
        "                pass\n"
        "    task = asyncio.create_task(spin())\n"
        "    for _ in range(20):\n"
        "        await asyncio.to_thread(subprocess.run, ['true'], preexec_fn=lambda: None, check=True)\n"
        "    task.cancel()\n"
        "asyncio.run(main())\n"
        "print(os.environ['GRPC_ENABLE_FORK_SUPPORT'])\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "false"
    assert "fork_posix" not in done.stderr, done.stderr
