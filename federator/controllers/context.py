"""What every hub controller is handed: the hub's store, its object storage and
registry, settings, metrics, the leader's fencing token and the Event recorder.

`hub/app.py` builds one `HubContext` per hub process and passes it to each
controller's cleanup_ctx factory (`async def ctx(hub: HubContext) ->
AsyncIterator[None]`). Controllers read and write hub objects only through
`storage` (never raw store keys of another component), attach `fencing` to
writes that must not come from a deposed leader, and get their settings from
here, never from globals. This module holds types only; it must never start
anything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from federator.apiserver.events import EventRecorder
from federator.apiserver.registry import Registry, ResourceType
from federator.apiserver.storage import ObjectStorage
from federator.controllers.settings import HubSettings as HubSettings
from federator.obs import Metrics
from federator.store.leader import FencingToken
from federator.store.protocol import Store

HUB_GROUP = "federator.dev"
HUB_VERSION = "v1alpha1"
HUB_API_VERSION = f"{HUB_GROUP}/{HUB_VERSION}"


@dataclass(slots=True)
class HubContext:
    store: Store
    storage: ObjectStorage
    registry: Registry
    settings: HubSettings
    metrics: Metrics
    #: the leader's fencing token; None until leadership is held
    fencing: FencingToken | None = None
    #: shared in-process state controllers publish for each other (e.g. the
    #: latest ClusterSnapshot per cluster), by well-known name
    shared: dict[str, Any] = field(default_factory=dict)
    #: where controllers record Events (`hub.events.record(job, controller=..., reason=..., message=...)`);
    #: controllers/events.py's event_recording replaces it with the term's recorder and runs its writer.
    #: Until then (and in tests without that controller) records stay in memory, bounded, unwritten.
    events: EventRecorder = field(default_factory=EventRecorder)

    def kind(self, kind: str) -> ResourceType:
        rt = self.registry.by_kind(HUB_API_VERSION, kind)
        if rt is None:
            raise LookupError(f"hub registry has no kind {kind!r}")
        return rt


ControllerFactory = Callable[[HubContext], AsyncIterator[None]]
