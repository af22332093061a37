"""One watch per kind per process (docs/architecture.md): a hub running every lifecycle controller holds one
TrainingJob watch on its storage (the job cache every controller subscribes to), one Namespace watch (the
namespace cache that placement's Queue checks and the namespace controller both hold) and one watch per member
kind on each member's API server (member sync's reflectors, which also feed the index of this
hub's member objects), counted while a gang runs:

- the hub's watches at the seam where controllers reach the hub's objects (`ObjectStorage.watch`,
  wrapped to count the watches open per storage and kind; the real storage serves them; the simulated
  members' own storages are left out);
- member watches by the simulator's own API server (its federator_api_watchers gauge: the HTTP watch
  streams it serves, per resource).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from federator.apiserver.storage import ObjectStorage
from federator.obs import METRICS

from .jobtest_support import phase, wait_until
from federator.controllers.namespaces import namespace_lifecycle

from .lifecycle_support import LIFECYCLE, aimed_job, lifecycle_env

pytestmark = pytest.mark.slow

CLUSTER = "onprem-rdma-a100"  # Volcano: pods and PodGroups are both watched


def _member_watches(server: str) -> dict[str, float]:
    """resource -> watch streams the member's API server `server` has open now."""
    found: dict[str, float] = {}
    for metric in METRICS.api_watchers.collect():
        for sample in metric.samples:
            if sample.labels.get("server") == server and sample.value:
                found[sample.labels["resource"]] = sample.value
    return found


async def test_one_job_watch_and_one_member_watch_per_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_watches: Counter[tuple[int, str]] = Counter()
    watch = ObjectStorage.watch

    def counted(self: ObjectStorage, rt: Any, **kw: Any) -> AsyncIterator[Any]:
        async def stream() -> AsyncIterator[Any]:
            open_watches[id(self), rt.kind] += 1
            try:
                async for event in watch(self, rt, **kw):
                    yield event
            finally:
                open_watches[id(self), rt.kind] -= 1
        return stream()

    monkeypatch.setattr(ObjectStorage, "watch", counted)
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=60.0,
                             controllers=(*LIFECYCLE, namespace_lifecycle)) as env:
        await env.api.submit(aimed_job("gang", CLUSTER))
        # Running is status sync's reading of the member's pods: every controller has started by then.
        await env.api.wait_job("team-a", "gang", lambda j: phase(j) == "Running", what="the gang running")
        hub = id(env.hub.context.storage)
        on_hub = {kind: count for (storage, kind), count in open_watches.items() if storage == hub and count}
        assert on_hub.get("TrainingJob") == 1 and on_hub.get("Namespace") == 1, on_hub
        server = f"sim:{env.fed.sims[CLUSTER].profile.name}"
        await wait_until(lambda: _member_watches(server).get("pods") == 1.0, what="the member's pod watch")
        watches = _member_watches(server)
        assert watches.get("pods") == 1.0 and watches.get("nodes") == 1.0, watches
        podgroups = [resource for resource in watches if resource.startswith("podgroups")]
        assert podgroups and all(watches[resource] == 1.0 for resource in podgroups), watches
