"""Filter "quota": the hook where per-team or per-cluster quotas will be enforced; today it admits everything.

It exists so that a profile can already list it, and so that quota checks,
when they come, return a coded reason like every other filter (e.g.
"QuotaExceeded: team vision uses 96 of 96 A100 GPUs in on-prem-a"). It
must stay pure: quota usage will arrive as data in the snapshot or context,
never by a lookup from here.
"""

from __future__ import annotations

from federator.placement.framework import PASSED, EvalContext, FilterResult
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot


class QuotaFilter:
    name = "quota"

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        return PASSED
