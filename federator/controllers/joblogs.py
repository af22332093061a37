"""The logs of a TrainingJob's pods, from whichever member cluster holds them now.

Behind the job's `log` subresource (`GET .../trainingjobs/NAME/log?role=R&index=I`
plus kube's PodLogOptions, hub/app.py) and `federator logs`:

- `log_selection(query)` reads `role` and `index` (400 for a malformed one, an
  index without a role);
- `open_job_log(hub, job, role=, index=, options=)` is an async context
  manager whose value is the log's chunks. The job must be placed
  (`status.placement`: its cluster and epoch; 400 otherwise). One LIST of the
  member (`jobpods.current_pods`, as the pods subresource does) finds the
  pods of the current attempt; `role` and `index` choose among them (400 for
  a role the job does not have or an index beyond its replicas, 404 when the
  chosen pod is not there: not created yet, or deleted). Each pod's log comes
  from the member's `pods/NAME/log` through `jobpods.job_member`'s client
  (member sync's, or on a hub that does not lead one made for the request).
- One pod: its log as the member sends it; a member's error before the first
  byte is a Status (its 400 and 404 pass through, naming the cluster; no
  answer is 503). Several pods: every line prefixed `[role-index] `, all
  pods at once when following (at most `MAX_FOLLOWED`), else one pod after
  the other; a pod whose log cannot be read adds one line saying why and
  the others go on. Neither names the member's address (only the hub's log
  does).
- Leaving the block (the stream ended, the client left, the request was
  cancelled) closes every member connection it opened.

It never logs a credential or a line of a log.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from federator.apis.common import dns1123_label_errors
from federator.apis.views import Body
from federator.apiserver import errors
from federator.apiserver.errors import ApiError
from federator.apiserver.podlog import LogOptions, log_query
from federator.clusters.client import MemberApiError, MemberClient, MemberClientError
from federator.controllers.context import HubContext
from federator.controllers.jobpods import current_pods, job_member, job_roles, pod_slot, unreachable
from federator.controllers.jobs import current_placement, job_ref, phase_of
from federator.obs import get_logger

__all__ = ["MAX_FOLLOWED", "LogSource", "log_selection", "open_job_log"]

#: pods whose logs one request may follow at once (each is one member connection)
MAX_FOLLOWED = 32
_INDEX = re.compile(r"[0-9]{1,9}")
#: lines queued from followed pods before their readers wait for the client
_QUEUED_LINES = 1024

_log = get_logger("controllers.joblogs")


@dataclass(frozen=True, slots=True)
class LogSource:
    """One member pod whose log a request reads."""

    role: str
    index: int
    pod: str
    namespace: str

    @property
    def prefix(self) -> bytes:
        return f"[{self.role}-{self.index}] ".encode()


def log_selection(query: Mapping[str, str]) -> tuple[str | None, int | None]:
    """(role, index) from the query string; 400 BadRequest naming the parameter for a bad one."""
    role = query.get("role") or None
    raw_index = query.get("index")
    if role is not None and dns1123_label_errors(role):
        raise errors.bad_request(f"invalid value for query parameter role: {role[:64]!r} is not a role name "
                                 "(a DNS-1123 label)")
    index: int | None = None
    if raw_index is not None and raw_index != "":
        if not _INDEX.fullmatch(raw_index):  # ASCII digits only: str.isdigit() takes '²', which int() refuses
            raise errors.bad_request(f"invalid value for query parameter index: {raw_index[:64]!r} is not a "
                                     "non-negative integer")
        index = int(raw_index)
        if role is None:
            raise errors.bad_request("query parameter index needs role: which role's pod?")
    return role, index


def _wanted(job: Mapping[str, Any], role: str | None, index: int | None) -> list[tuple[str, int]]:
    """The (role, index) pairs a request reads, in the job's role order."""
    ref = job_ref(job)
    roles = job_roles(job)
    if role is None:
        return [(name, i) for name, replicas in roles for i in range(replicas)]
    replicas = dict(roles).get(role)
    if replicas is None:
        names = ", ".join(name for name, _ in roles)
        raise errors.bad_request(f'trainingjob {ref.namespace}/{ref.name} has no role "{role}" (roles: {names})')
    if index is None:
        return [(role, i) for i in range(replicas)]
    if index >= replicas:
        raise errors.bad_request(f"index {index} is out of range for role {role} of trainingjob "
                                 f"{ref.namespace}/{ref.name}: it has {replicas} pod{'s' if replicas != 1 else ''} "
                                 f"(index 0 to {replicas - 1})")
    return [(role, index)]


def _member_error(cluster: str, source: LogSource, error: MemberApiError) -> ApiError:
    if error.code in (400, 404):
        return ApiError(error.code, "NotFound" if error.code == 404 else "BadRequest",
                        f"cluster {cluster}: {error.message}")
    # a 401/403 there is the hub's identity, not the caller's
    return errors.internal(f"cluster {cluster} refused the log of pod {source.namespace}/{source.pod}: "
                           f"{error.code} {error.reason}: {error.message}")


async def _sources(client: MemberClient, job: Mapping[str, Any], *, cluster: str, epoch: int,
                   wanted: Sequence[tuple[str, int]]) -> list[LogSource]:
    ref = job_ref(job)
    where = f"{ref.namespace}/{ref.name}"
    pods: dict[tuple[str, int], str] = {}
    for pod in await current_pods(client, job, cluster=cluster, epoch=epoch):
        at = pod_slot(pod)
        if at is not None:
            pods[at] = Body(pod).name
    found = [LogSource(role=r, index=i, pod=pods[(r, i)], namespace=ref.namespace) for r, i in wanted
             if (r, i) in pods]
    if not found:
        phase = phase_of(job) or "unknown"
        what = f"pod {wanted[0][0]}-{wanted[0][1]}" if len(wanted) == 1 else "pods"
        raise ApiError(404, "NotFound", f"trainingjob {where} (phase {phase}) has no {what} in cluster {cluster} "
                                        f"at attempt {epoch}: not created yet, or deleted",
                       details={"name": ref.name, "group": "federator.dev", "kind": "trainingjobs"})
    return found


@contextlib.asynccontextmanager
async def open_job_log(hub: HubContext, job: Mapping[str, Any], *, role: str | None, index: int | None,
                       options: LogOptions) -> AsyncIterator[AsyncIterator[bytes]]:
    """The chunks of the job's log (see the module docstring); every member connection closes with the block."""
    ref = job_ref(job)
    where = f"{ref.namespace}/{ref.name}"
    wanted = _wanted(job, role, index)
    if not wanted:
        raise errors.bad_request(f"trainingjob {where} has no pods")
    cluster, epoch = current_placement(job)
    if cluster is None:
        raise errors.bad_request(f"trainingjob {where} is not placed yet (phase {phase_of(job) or 'Pending'}): "
                                 "it has no pods, so no logs")
    if options.follow and len(wanted) > MAX_FOLLOWED:
        raise errors.bad_request(f"following {len(wanted)} pods at once is more than {MAX_FOLLOWED}: "
                                 "choose a role (role=) or one pod (role= and index=)")
    async with job_member(hub, cluster) as client:
        sources = await _sources(client, job, cluster=cluster, epoch=epoch, wanted=wanted)
        query = log_query(options)
        if len(sources) == 1 and len(wanted) == 1:
            source = sources[0]
            async with contextlib.AsyncExitStack() as stack:
                try:
                    chunks = await stack.enter_async_context(client.pod_log(
                        namespace=source.namespace, name=source.pod, query=query, follow=options.follow))
                except MemberApiError as e:
                    raise _member_error(cluster, source, e) from None
                except MemberClientError as e:
                    raise unreachable(cluster, where, e) from None
                single = _until_broken(chunks, cluster=cluster, source=source)
                try:
                    yield single
                finally:
                    await single.aclose()
            return
        merged = (_followed(client, sources, query) if options.follow
                  else _one_after_another(client, sources, query))
        try:
            yield merged
        finally:
            await merged.aclose()


async def _until_broken(chunks: AsyncIterator[bytes], *, cluster: str,
                        source: LogSource) -> AsyncGenerator[bytes, None]:
    """The chunks until the member's stream ends or breaks off (after the first byte, a break can only end
    the stream: the answer's status is sent)."""
    try:
        async for chunk in chunks:
            yield chunk
    except MemberClientError as e:
        _log.info("job log stream broke off", cluster=cluster, pod=f"{source.namespace}/{source.pod}",
                  error=str(e))


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    pending = b""
    async for chunk in chunks:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line + b"\n"
    if pending:
        yield pending + b"\n"


async def _prefixed(client: MemberClient, source: LogSource, query: Sequence[tuple[str, Any]], *,
                    follow: bool) -> AsyncGenerator[bytes, None]:
    """One pod's lines with its prefix; a failure becomes one line saying why."""
    prefix = source.prefix
    try:
        async with client.pod_log(namespace=source.namespace, name=source.pod, query=query,
                                  follow=follow) as chunks:
            async for line in _lines(chunks):
                yield prefix + line
    except MemberApiError as e:
        yield prefix + f"(no log: {e.message})\n".encode()
    except MemberClientError as e:
        # the error's text may name the member's address: the reader gets its kind, the hub's log the rest
        _log.info("job log stream broke off", pod=f"{source.namespace}/{source.pod}", error=str(e))
        yield prefix + f"(log interrupted: {type(e).__name__})\n".encode()


async def _one_after_another(client: MemberClient, sources: Sequence[LogSource],
                             query: Sequence[tuple[str, Any]]) -> AsyncGenerator[bytes, None]:
    for source in sources:
        lines = _prefixed(client, source, query, follow=False)
        try:
            async for line in lines:
                yield line
        finally:
            await lines.aclose()


_DONE = b""


async def _followed(client: MemberClient, sources: Sequence[LogSource],
                    query: Sequence[tuple[str, Any]]) -> AsyncGenerator[bytes, None]:
    """Every source's lines as they come; ends when every pod's log has ended."""
    queue: asyncio.Queue[bytes] = asyncio.Queue(_QUEUED_LINES)

    async def pump(source: LogSource) -> None:
        lines = _prefixed(client, source, query, follow=True)
        try:
            async for line in lines:
                await queue.put(line)
        except Exception as e:  # noqa: BLE001 - one pod's failure must not end the others' logs
            _log.warning("job log stream failed", pod=f"{source.namespace}/{source.pod}",
                         error=f"{type(e).__name__}: {e}")
            await queue.put(source.prefix + b"(log interrupted)\n")
        finally:
            await lines.aclose()
        await queue.put(_DONE)

    tasks = [asyncio.create_task(pump(s), name=f"job-log-{s.namespace}-{s.pod}") for s in sources]
    try:
        ended = 0
        while ended < len(tasks):
            line = await queue.get()
            if not line:  # _DONE
                ended += 1
                continue
            batch = [line]
            while not queue.empty() and len(batch) < 256:
                more = queue.get_nowait()
                if not more:
                    ended += 1
                else:
                    batch.append(more)
            yield b"".join(batch)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
