"""The built-in placement plugins, one per module, and the default registry that names them.

Filters: health, exclusion, cluster-selector, affinity, tier, spot,
network, gpu-model, budget, quota, gang-fit. Scores: tier, affinity, spot,
data-locality, packing, network-headroom, preference, cost, topology,
elastic-size. Pure, like everything under placement.
"""

from __future__ import annotations

from federator.placement.framework import PluginRegistry
from federator.placement.plugins.affinity import AffinityFilter, AffinityScore
from federator.placement.plugins.budget import BudgetFilter
from federator.placement.plugins.cluster_selector import ClusterSelectorFilter
from federator.placement.plugins.cost import CostScore
from federator.placement.plugins.data_locality import DataLocalityScore
from federator.placement.plugins.elastic_size import ElasticSizeScore
from federator.placement.plugins.exclusion import ExclusionFilter
from federator.placement.plugins.gang_fit import GangFitFilter
from federator.placement.plugins.gpu_model import GpuModelFilter
from federator.placement.plugins.health import HealthFilter
from federator.placement.plugins.network import NetworkFilter
from federator.placement.plugins.network_headroom import NetworkHeadroomScore
from federator.placement.plugins.packing import PackingScore
from federator.placement.plugins.preference import PreferenceScore
from federator.placement.plugins.quota import QuotaFilter
from federator.placement.plugins.spot import SpotFilter, SpotScore
from federator.placement.plugins.tier import TierFilter, TierScore
from federator.placement.plugins.topology import TopologyScore

__all__ = ["default_registry"]

_DEFAULT = PluginRegistry(
    filters=(
        HealthFilter(),
        ExclusionFilter(),
        ClusterSelectorFilter(),
        AffinityFilter(),
        TierFilter(),
        SpotFilter(),
        NetworkFilter(),
        GpuModelFilter(),
        BudgetFilter(),
        QuotaFilter(),
        GangFitFilter(),
    ),
    scores=(
        TierScore(),
        AffinityScore(),
        SpotScore(),
        DataLocalityScore(),
        PackingScore(),
        NetworkHeadroomScore(),
        PreferenceScore(),
        CostScore(),
        TopologyScore(),
        ElasticSizeScore(),
    ),
)


def default_registry() -> PluginRegistry:
    """The registry of built-in plugins (plugins are stateless, so one instance serves everyone)."""
    return _DEFAULT
