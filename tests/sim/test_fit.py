"""The pure fit core: quantities, pod requirements, filters, FitError
messages, the ledger and all-or-nothing gang packing."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from federator.apis.quantity import QuantityError, parse_quantity
from federator.sim.fit import (
    ClusterLedger,
    CyclePlanner,
    InvalidPodSpec,
    NodeInfo,
    Taint,
    explain,
    format_units,
    node_info,
    pod_requirements,
    resource_units,
    static_misfit,
)

# ---------------------------------------------------------------- quantities (the shared parser, as the simulator reads member objects)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("32Gi", Decimal(32 * 2**30)),
        ("1k", Decimal(1000)),
        ("1Ki", Decimal(1024)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("1E", Decimal(10**18)),
        ("1.5", Decimal("1.5")),
        (".5", Decimal("0.5")),
        ("2.", Decimal(2)),
        ("100n", Decimal("1E-7")),
        ("3u", Decimal("0.000003")),
        ("1M", Decimal(10**6)),
        ("1Ti", Decimal(2**40)),
        (8, Decimal(8)),
        (0.25, Decimal("0.25")),
        ("+4", Decimal(4)),
    ],
)
def test_parse_quantity(text: Any, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["", "abc", "1.2.3", "1KB", "1ki", "Gi", "1Gi5", "--1", "1e", "1e999", "9" * 80, "1 Gi", " 8 ", True, None,
             float("nan"), float("inf"), "99999999999999999999Ei", [1]],
)
def test_parse_quantity_rejects(text: Any) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_resource_units_rounding_and_sign() -> None:
    assert resource_units("cpu", "500m") == 500
    assert resource_units("cpu", "0.0001") == 1  # rounds up, like Quantity.MilliValue
    assert resource_units("cpu", 2) == 2000
    assert resource_units("memory", "1.5Ki") == 1536
    assert resource_units("memory", "100m") == 1  # sub-byte rounds up
    assert resource_units("nvidia.com/gpu", "8") == 8
    assert resource_units("rdma/hca", "1k") == 1000
    with pytest.raises(QuantityError, match="negative"):
        resource_units("cpu", "-1")


@pytest.mark.parametrize(
    ("resource", "units", "text"),
    [("cpu", 95000, "95"), ("cpu", 500, "500m"), ("memory", 2**40, "1Ti"), ("memory", 1048000 * 2**20, "1048000Mi"),
     ("memory", 1000, "1000"), ("nvidia.com/gpu", 8, "8"), ("memory", 0, "0")],
)
def test_format_units_round_trips(resource: str, units: int, text: str) -> None:
    assert format_units(resource, units) == text
    assert resource_units(resource, text) == units


# ---------------------------------------------------------------- pods


def pod(*, containers: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": containers or [{"name": "c"}], **spec}}


def res(**requests: Any) -> dict[str, Any]:
    names = {"nvidia_gpu": "nvidia.com/gpu", "rdma_hca": "rdma/hca"}
    return {"name": "c", "resources": {"requests": {names.get(k, k): v for k, v in requests.items()}}}


def test_effective_requests_sum_containers_max_init_and_overhead() -> None:
    p = pod(
        containers=[res(cpu="1", memory="1Gi"), res(cpu="500m", nvidia_gpu=2)],
        initContainers=[res(cpu="4"), res(memory="512Mi")],
        overhead={"cpu": "100m"},
    )
    req = pod_requirements(p)
    assert req.request("cpu") == 4100  # max(1.5 summed, 4 init) + 0.1 overhead
    assert req.request("memory") == 2**30
    assert req.request("nvidia.com/gpu") == 2
    assert req.request("pods") == 1


def test_limits_default_requests() -> None:
    p = pod(containers=[{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 4, "cpu": "2"},
                                                    "requests": {"cpu": "1"}}}])
    req = pod_requirements(p)
    assert req.request("nvidia.com/gpu") == 4
    assert req.request("cpu") == 1000


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}, r"containers\[0\].*cpu"),
        ({"containers": "nope"}, "spec.containers"),
        ({"containers": [], "tolerations": [{"operator": "Equal", "value": "x"}]}, "empty key"),
        ({"containers": [], "tolerations": [{"key": "k", "operator": "Maybe"}]}, "operator"),
        ({"containers": [], "tolerations": [{"key": "k", "effect": "Sometimes"}]}, "effect"),
        ({"containers": [], "nodeSelector": ["a"]}, "nodeSelector"),
        ({"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Near"}]}]}}}}, "operator"),
    ],
)
def test_invalid_pod_specs_are_named(spec: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidPodSpec, match=match):
        pod_requirements({"metadata": {}, "spec": spec})


# ---------------------------------------------------------------- nodes and filters


def node(name: str = "n1", *, cpu: str = "8", gpu: int = 0, labels: dict[str, str] | None = None,
         taints: list[dict[str, str]] | None = None, unschedulable: bool = False, ready: str = "True",
         pods: str = "110") -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": "64Gi", "pods": pods}
    if gpu:
        alloc["nvidia.com/gpu"] = str(gpu)
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {"allocatable": alloc, "capacity": alloc, "conditions": [{"type": "Ready", "status": ready}]},
    }


def test_node_info_reads_allocatable_taints_and_readiness() -> None:
    info = node_info(node(cpu="95", gpu=8, taints=[{"key": "nvidia.com/gpu", "value": "present",
                                                     "effect": "NoSchedule"}], ready="Unknown"))
    assert info.allocatable["cpu"] == 95000 and info.allocatable["nvidia.com/gpu"] == 8
    assert info.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert not info.ready


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("tolerations", "taint", "ok"),
    [
        ([], GPU_TAINT, False),
        ([{"key": "nvidia.com/gpu", "operator": "Exists"}], GPU_TAINT, True),
        ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}], GPU_TAINT, True),
        ([{"key": "nvidia.com/gpu", "value": "present"}], GPU_TAINT, True),  # operator defaults to Equal
        ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}], GPU_TAINT, False),
        ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], GPU_TAINT, False),
        ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], GPU_TAINT, True),
        ([{"operator": "Exists"}], GPU_TAINT, True),  # tolerates everything
        ([], {"key": "x", "value": "y", "effect": "PreferNoSchedule"}, True),  # soft taint
        ([], {"key": "x", "value": "", "effect": "NoExecute"}, False),
        ([{"key": "x", "operator": "Exists", "effect": "NoExecute"}], {"key": "x", "effect": "NoExecute"}, True),
    ],
)
def test_taints_and_tolerations(tolerations: list[dict[str, str]], taint: dict[str, str], ok: bool) -> None:
    req = pod_requirements(pod(tolerations=tolerations))
    reason = static_misfit(req.placement, node_info(node(taints=[taint])))
    assert (reason is None) is ok
    if not ok:
        assert reason is not None and reason.startswith("node(s) had untolerated taint {")


def test_selector_affinity_unschedulable_not_ready() -> None:
    a100 = node_info(node(labels={"nvidia.com/gpu.product": "A100-SXM4-40GB", "rank": "5"}))
    sel = pod_requirements(pod(nodeSelector={"nvidia.com/gpu.product": "H100-80GB-HBM3"}))
    assert static_misfit(sel.placement, a100) == "node(s) didn't match Pod's node affinity/selector"
    sel_ok = pod_requirements(pod(nodeSelector={"nvidia.com/gpu.product": "A100-SXM4-40GB"}))
    assert static_misfit(sel_ok.placement, a100) is None

    def affinity(*exprs: dict[str, Any]) -> dict[str, Any]:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}}}

    cases = [
        ({"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100-SXM4-40GB", "H100-80GB-HBM3"]}, True),
        ({"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["A100-SXM4-40GB"]}, False),
        ({"key": "rank", "operator": "Gt", "values": ["4"]}, True),
        ({"key": "rank", "operator": "Lt", "values": ["4"]}, False),
        ({"key": "absent", "operator": "DoesNotExist"}, True),
        ({"key": "absent", "operator": "Exists"}, False),
    ]
    for expr, ok in cases:
        req = pod_requirements(pod(affinity=affinity(expr)))
        assert (static_misfit(req.placement, a100) is None) is ok, expr

    plain = pod_requirements(pod())
    assert static_misfit(plain.placement, node_info(node(unschedulable=True))) == "node(s) were unschedulable"
    tolerant = pod_requirements(pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]))
    assert static_misfit(tolerant.placement, node_info(node(unschedulable=True))) is None
    assert static_misfit(plain.placement, node_info(node(ready="False"))) == "node(s) were not ready"


def test_explain_matches_kube_scheduler_fit_error() -> None:
    nodes = [node_info(node(f"n{i}", gpu=8)) for i in range(500)]
    req = pod_requirements(pod(containers=[res(nvidia_gpu=16)]))
    assert explain(req, nodes) == "0/500 nodes are available: 500 Insufficient nvidia.com/gpu."
    mixed = [node_info(node("a", cpu="1", gpu=1)), node_info(node("b", unschedulable=True)),
             node_info(node("c", taints=[GPU_TAINT])), node_info(node("d", pods="0", gpu=8))]
    req = pod_requirements(pod(containers=[res(cpu="2", nvidia_gpu=2)]))
    assert explain(req, mixed) == (
        "0/4 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu, 1 Too many pods, "
        "1 node(s) had untolerated taint {nvidia.com/gpu: present}, 1 node(s) were unschedulable."
    )


# ---------------------------------------------------------------- ledger and packing


def ledger_of(*nodes: dict[str, Any]) -> ClusterLedger:
    ledger = ClusterLedger()
    for n in nodes:
        ledger.upsert_node(node_info(n))
    return ledger


def gpu_pod(gpus: int) -> Any:
    return pod_requirements(pod(containers=[res(cpu="1", nvidia_gpu=gpus)]))


def test_place_gang_all_or_nothing_and_rollback() -> None:
    ledger = ledger_of(node("a", gpu=8), node("b", gpu=8))
    planner = CyclePlanner(ledger)
    members = [(f"g/p{i}", gpu_pod(4)) for i in range(5)]  # 20 GPUs wanted, 16 exist
    out = planner.place_gang(members, need=5)
    assert not out.committed and out.fitted == 4 and out.placed == {}
    assert out.message == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert all(n.used.get("nvidia.com/gpu", 0) == 0 for n in ledger.nodes.values())
    assert ledger.accounted() == {}
    # After the rollback the same planner still places a gang that fits.
    ok = planner.place_gang(members[:4], need=4)
    assert ok.committed and sorted(ok.placed.values()) == ["a", "a", "b", "b"]
    assert ledger.overcommitted() == []
    # minMember below the member count: the extras that fit are kept, the rest reported.
    ledger2 = ledger_of(node("a", gpu=8))
    out2 = CyclePlanner(ledger2).place_gang(members[:3], need=2)
    assert out2.committed and len(out2.placed) == 2
    assert out2.message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_ledger_releases_and_generation() -> None:
    ledger = ledger_of(node("a", gpu=8))
    gen = ledger.generation
    ledger.account("ns/p", "a", (("nvidia.com/gpu", 8), ("pods", 1)))
    assert ledger.nodes["a"].free("nvidia.com/gpu") == 0
    assert ledger.generation == gen  # accounting frees nothing
    assert ledger.release("ns/p")
    assert ledger.generation == gen + 1
    assert not ledger.release("ns/p")
    # a node re-added by a re-list keeps the usage of pods on it
    ledger.account("ns/q", "a", (("nvidia.com/gpu", 2),))
    ledger.upsert_node(node_info(node("a", gpu=8)))
    assert ledger.nodes["a"].free("nvidia.com/gpu") == 6
    # an update (taint, readiness) is seen through ordered_nodes()
    assert ledger.ordered_nodes()[0].ready
    ledger.upsert_node(node_info(node("a", gpu=8, ready="False")))
    assert not ledger.ordered_nodes()[0].ready
    assert ledger.nodes["a"].free("nvidia.com/gpu") == 6
    ledger.remove_node("a")
    ledger.upsert_node(node_info(node("a", gpu=8)))
    ledger.reattach()
    assert ledger.nodes["a"].free("nvidia.com/gpu") == 6


shapes = st.tuples(st.integers(0, 4000), st.integers(0, 8), st.booleans())  # cpu milli, gpus, tolerates


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.lists(st.tuples(st.integers(1, 16), st.integers(0, 8), st.booleans()), min_size=1, max_size=6),
    gangs=st.lists(st.tuples(st.lists(shapes, min_size=1, max_size=6), st.integers(0, 6)), min_size=1, max_size=8),
)
def test_packing_never_overcommits_or_splits(
    nodes: list[tuple[int, int, bool]], gangs: list[tuple[list[tuple[int, int, bool]], int]]
) -> None:
    ledger = ledger_of(*(
        node(f"n{i}", cpu=str(cpu), gpu=gpu, taints=[GPU_TAINT] if tainted else None)
        for i, (cpu, gpu, tainted) in enumerate(nodes)
    ))
    planner = CyclePlanner(ledger)
    for g, (members, min_member) in enumerate(gangs):
        reqs = []
        for j, (cpu, gpus, tolerates) in enumerate(members):
            tol = [{"key": "nvidia.com/gpu", "operator": "Exists"}] if tolerates else []
            reqs.append((f"g{g}/p{j}", pod_requirements(pod(
                containers=[{"name": "c", "resources": {"requests": {"cpu": f"{cpu}m", "nvidia.com/gpu": gpus}}}],
                tolerations=tol))))
        need = min(min_member, len(reqs))
        before = dict(ledger.accounted())
        out = planner.place_gang(reqs, need=need)
        if out.committed:
            assert len(out.placed) >= need
            for key, node_name in out.placed.items():
                assert ledger.node_of(key) == node_name
        else:
            assert dict(ledger.accounted()) == before
        # independent check of every node against its allocatable
        for info in ledger.nodes.values():
            used: dict[str, int] = {}
            for _key, (nname, requests) in ledger.accounted().items():
                if nname == info.name:
                    for r, u in requests:
                        used[r] = used.get(r, 0) + u
            assert used == {k: v for k, v in info.used.items() if v}
            for r, u in used.items():
                assert u <= info.allocatable.get(r, 0), (info.name, r)
    assert ledger.overcommitted() == []


def test_nodeinfo_fits_checks_every_resource() -> None:
    n = NodeInfo(name="x", allocatable={"cpu": 1000, "pods": 1})
    assert n.fits((("cpu", 1000), ("pods", 1)))
    assert not n.fits((("cpu", 1000), ("pods", 1), ("rdma/hca", 1)))
