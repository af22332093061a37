"""GangRequest validation, selectors and tolerations."""

from __future__ import annotations

import pytest
from placement_builders import GI, gang

from federator.placement import (
    GangRequest,
    LabelRequirement,
    LabelSelector,
    Resources,
    RoleRequest,
    Taint,
    Toleration,
)
from federator.placement.gang import MAX_GANG_PODS


def test_derived_totals_and_fit_order() -> None:
    g = GangRequest(
        key="vision/resnet",
        uid="u",
        roles=(
            RoleRequest("ps", 2, Resources(8000, 32 * GI)),
            RoleRequest("worker", 8, Resources(16000, 64 * GI, 4, 1)),
        ),
    )
    assert g.pod_count == 10
    assert g.total == Resources(2 * 8000 + 8 * 16000, (64 + 8 * 64) * GI, 32, 8)
    assert [r.name for r in g.fit_order] == ["worker", "ps"]
    assert g.rdma_pod_count == 8
    assert g.describe_size("A100") == "10 pods, 32 A100 GPUs with RDMA"
    assert gang("x", pods=8, gpus=8, rdma=1).describe_size("A100") == "8 pods of 8 A100 GPUs with RDMA"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"roles": ()}, "roles must not be empty"),
        ({"key": ""}, "key"),
        ({"uid": "x" * 300}, "uid"),
        ({"network": "infiniband"}, "infiniband"),
        ({"gpu_models": ("A100", "A100")}, "gpu_models"),
        ({"datasets": ("",)}, "datasets"),
        ({"submitted_at": float("inf")}, "submitted_at"),
        ({"excluded_clusters": {"a": "soon"}}, "excluded_clusters"),
        ({"excluded_nodes": {"a": "node-1"}}, "excluded_nodes"),
        ({"excluded_nodes": {"a": frozenset({""})}}, "excluded_nodes"),
        ({"excluded_nodes": {"a": frozenset({3})}}, "excluded_nodes"),
        ({"node_selector": {"a": 1}}, "node_selector"),
    ],
)
def test_validation(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {
        "key": "ns/j",
        "uid": "u",
        "roles": (RoleRequest("w", 1, Resources(gpu=1)),),
    }
    base.update(kwargs)
    with pytest.raises(ValueError, match=message):
        GangRequest(**base)  # type: ignore[arg-type]


def test_roles_validate() -> None:
    with pytest.raises(ValueError, match="replicas"):
        RoleRequest("w", 0, Resources())
    with pytest.raises(ValueError, match="role name"):
        RoleRequest("", 1, Resources())
    with pytest.raises(ValueError, match="unique"):
        GangRequest(key="a/b", uid="u", roles=(RoleRequest("w", 1, Resources()), RoleRequest("w", 1, Resources())))


def test_oversized_gang_is_rejected() -> None:
    with pytest.raises(ValueError, match="exceeds the limit"):
        GangRequest(key="a/b", uid="u", roles=(RoleRequest("w", MAX_GANG_PODS + 1, Resources(gpu=1)),))


def test_label_selector_semantics() -> None:
    selector = LabelSelector(
        match_labels={"tier": "research"},
        match_expressions=(
            LabelRequirement("region", "In", frozenset({"eu", "us"})),  # type: ignore[arg-type]
            LabelRequirement("legacy", "DoesNotExist"),  # type: ignore[arg-type]
            LabelRequirement("team", "NotIn", frozenset({"ads"})),  # type: ignore[arg-type]
            LabelRequirement("gpu", "Exists"),  # type: ignore[arg-type]
        ),
    )
    ok = {"tier": "research", "region": "eu", "gpu": "yes"}
    assert selector.matches(ok)
    assert selector.first_mismatch(ok) is None
    assert not selector.matches({**ok, "tier": "prod"})
    assert selector.first_mismatch({**ok, "tier": "prod"}) == "tier=research"
    assert not selector.matches({**ok, "region": "ap"})
    assert not selector.matches({**ok, "legacy": "1"})
    assert not selector.matches({**ok, "team": "ads"})
    assert selector.matches({**ok, "team": "vision"})
    assert not selector.matches({"tier": "research", "region": "eu"})
    with pytest.raises(ValueError, match="needs values"):
        LabelRequirement("k", "In")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="takes no values"):
        LabelRequirement("k", "Exists", frozenset({"v"}))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        LabelRequirement("k", "Near", frozenset({"v"}))  # type: ignore[arg-type]


def test_toleration_semantics() -> None:
    gpu_taint = Taint("nvidia.com/gpu", "present", "NoSchedule")  # type: ignore[arg-type]
    assert Toleration("nvidia.com/gpu", "Exists").tolerates(gpu_taint)  # type: ignore[arg-type]
    assert Toleration("nvidia.com/gpu", "Equal", "present").tolerates(gpu_taint)  # type: ignore[arg-type]
    assert not Toleration("nvidia.com/gpu", "Equal", "absent").tolerates(gpu_taint)  # type: ignore[arg-type]
    assert not Toleration("other", "Exists").tolerates(gpu_taint)  # type: ignore[arg-type]
    assert not Toleration("nvidia.com/gpu", "Exists", effect="NoExecute").tolerates(gpu_taint)  # type: ignore[arg-type]
    assert Toleration(operator="Exists").tolerates(gpu_taint)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty key"):
        Toleration(operator="Equal")  # type: ignore[arg-type]
    soft = Taint("maintenance", "", "PreferNoSchedule")  # type: ignore[arg-type]
    g = gang("a/b")
    assert g.tolerates((soft,))
    assert not g.tolerates((gpu_taint,))


def test_label_selector_from_the_wire_shape() -> None:
    selector = LabelSelector.from_wire({"matchLabels": {"location": "cloud"},
                                        "matchExpressions": [{"key": "gpu", "operator": "In", "values": ["H100"]}]})
    assert selector.matches({"location": "cloud", "gpu": "H100"})
    assert not selector.matches({"location": "cloud", "gpu": "A100"})
    assert not selector.matches({"gpu": "H100"})
    # Absent or not an object: selects everything.
    assert LabelSelector.from_wire(None).is_empty() and LabelSelector.from_wire(["x"]).is_empty()
    assert LabelSelector.from_wire({}).matches({"any": "thing"})
