"""`adapter_for(name)`: the delegation adapter of a member scheduler, by the name a MemberCluster uses.

Names are MemberCluster's `spec.scheduler.name` values: volcano,
coscheduling, kube-batch, native, kai, default. An unknown name is an error naming the
known ones, never a silent fallback to the default scheduler (which would
drop the gang guarantee). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from federator.delegation.adapter import Adapter, SchedulerAdapter
from federator.delegation.coscheduling import COSCHEDULING
from federator.delegation.default import DEFAULT
from federator.delegation.kai import KAI
from federator.delegation.kubebatch import KUBE_BATCH
from federator.delegation.native import NATIVE
from federator.delegation.volcano import VOLCANO

__all__ = ["ADAPTERS", "adapter_for"]

ADAPTERS: Mapping[str, SchedulerAdapter] = {a.name: a for a in (VOLCANO, COSCHEDULING, KUBE_BATCH, NATIVE, KAI,
                                                                 DEFAULT)}
# mypy checks here that every adapter satisfies the protocol the controllers program against.
_PROTOCOL_CHECK: tuple[Adapter, ...] = tuple(ADAPTERS.values())


def adapter_for(scheduler_name: str) -> SchedulerAdapter:
    """The adapter for a member scheduler ("volcano", "coscheduling", "kube-batch", "native", "kai" or
    "default")."""
    adapter = ADAPTERS.get(scheduler_name) if isinstance(scheduler_name, str) else None
    if adapter is None:
        raise KeyError(f"no delegation adapter for scheduler {str(scheduler_name)[:64]!r}; "
                      f"known: {', '.join(sorted(ADAPTERS))}")
    return adapter
