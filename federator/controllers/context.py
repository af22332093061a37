"""What every hub controller is handed: the hub's store, its object storage and
registry, settings, metrics, the leader's fencing token, the Event recorder and
the term's pipeline parts.

`hub/app.py` builds one `HubContext` per term (and one for the API) and passes
it to each controller's cleanup_ctx factory (`async def ctx(hub: HubContext) ->
AsyncIterator[None]`). Controllers read and write hub objects only through
`storage` (never raw store keys of another component), attach `fencing` to
writes that must not come from a deposed leader, and get their settings from
here, never from globals. The parts the controllers share (job cache, member
object index, reservations, dispatch, ...) are the typed fields of `parts`
(controllers/pipeline.py), built in order by hub/app.py's `build_pipeline`
before any controller starts: there is no dict of well-known names. This module
holds types only; it must never start anything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from federator.apiserver.events import EventRecorder
from federator.apiserver.registry import Registry, ResourceType
from federator.apiserver.storage import ObjectStorage
from federator.clusters.client import MemberWriteLog
from federator.controllers.settings import HubSettings as HubSettings
from federator.obs import Metrics
from federator.store.leader import FencingToken
from federator.store.protocol import Store

if TYPE_CHECKING:
    from federator.controllers.pipeline import Pipeline

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
    #: the term's pipeline parts (controllers/pipeline.py), built by hub/app.py's build_pipeline; None for a
    #: context no controller runs on (the API's while this hub follows)
    pipeline: Pipeline | None = None
    #: where controllers record Events (`hub.events.record(job, controller=..., reason=..., message=...)`);
    #: controllers/events.py's event_recording replaces it with the term's recorder and runs its writer.
    #: Until then (and in tests without that controller) records stay in memory, bounded, unwritten.
    events: EventRecorder = field(default_factory=EventRecorder)
    #: where member clients report the hub's writes to members (hub/app.py wires the audit log); None: nowhere
    member_writes: MemberWriteLog | None = None

    @property
    def parts(self) -> Pipeline:
        """The term's pipeline parts; LookupError when none were built (hub/app.py `build_pipeline`)."""
        if self.pipeline is None:
            raise LookupError("this hub context has no pipeline: hub/app.py's build_pipeline builds it before "
                              "any controller starts")
        return self.pipeline

    def kind(self, kind: str) -> ResourceType:
        rt = self.registry.by_kind(HUB_API_VERSION, kind)
        if rt is None:
            raise LookupError(f"hub registry has no kind {kind!r}")
        return rt


ControllerFactory = Callable[[HubContext], AsyncIterator[None]]
