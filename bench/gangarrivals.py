"""When each bench job's gang is complete in a member: the pods seen per job name, the moment the last one
arrived, the cluster it arrived in, and a future per job to wait for that moment. Both bench/e2e.py's simulated
`Members` and bench/kubemembers.py's real ones feed it from their watches of member pods (a helper of
bench/, not a benchmark: `federator bench` does not run it)."""

from __future__ import annotations

import asyncio
import time


class GangArrivals:
    """`pod_added(job name, cluster)` per new pod; `wait(job name)` resolves to the time.perf_counter() at
    which the job's `pods_per_job`-th pod arrived."""

    def __init__(self, pods_per_job: int) -> None:
        self.pods_per_job = pods_per_job
        #: job name -> when its gang was complete (time.perf_counter())
        self.done: dict[str, float] = {}
        #: job name -> the cluster its gang landed in
        self.cluster_of: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._waiters: dict[str, asyncio.Future[float]] = {}

    def pod_added(self, name: str, cluster: str) -> None:
        count = self._counts.get(name, 0) + 1
        self._counts[name] = count
        if count == self.pods_per_job:
            now = time.perf_counter()
            self.done[name] = now
            self.cluster_of[name] = cluster
            waiter = self._waiters.pop(name, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(now)

    def wait(self, name: str) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        if name in self.done:
            future.set_result(self.done[name])
        else:
            self._waiters[name] = future
        return future
