"""Filter "cluster-selector": the cluster's labels must satisfy the gang's clusterSelector.

Kubernetes label-selector semantics (matchLabels and matchExpressions with
In, NotIn, Exists, DoesNotExist). The message names the first term that
fails. Pure.
"""

from __future__ import annotations

from federator.placement.framework import PASSED, EvalContext, FilterResult
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot

SELECTOR_MISMATCH = "ClusterSelectorMismatch"


class ClusterSelectorFilter:
    name = "cluster-selector"

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        selector = gang.cluster_selector
        if selector is None or selector.matches(snapshot.info.labels):
            return PASSED
        term = selector.first_mismatch(snapshot.info.labels)
        return FilterResult.reject(SELECTOR_MISMATCH, f"cluster labels do not satisfy the cluster selector: {term}")
