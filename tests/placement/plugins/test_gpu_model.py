"""Filter "gpu-model": accepted GPU models present on schedulable nodes."""

from __future__ import annotations

from placement_builders import cluster, gang, node, run_filter

from federator.placement.plugins.gpu_model import GPU_MODEL_UNAVAILABLE, NO_GPU_NODES, GpuModelFilter

MIXED = cluster("mixed", [node("a", model="A100", used=6), node("h", model="H100"), node("v", model="V100")])


def test_mismatch_names_what_the_cluster_has() -> None:
    result, _ = run_filter(GpuModelFilter(), gang("g", models=["B200"]), MIXED)
    assert result.code == GPU_MODEL_UNAVAILABLE  # type: ignore[attr-defined]
    assert result.message == "gang accepts B200; cluster has A100, H100, V100"  # type: ignore[attr-defined]


def test_models_to_try_follow_the_gang_preference() -> None:
    result, ctx = run_filter(GpuModelFilter(), gang("g", models=["V100", "A100", "B200"]), MIXED)
    assert result.ok and ctx.gpu_models == ("V100", "A100")  # type: ignore[attr-defined]


def test_any_model_tries_most_free_first() -> None:
    result, ctx = run_filter(GpuModelFilter(), gang("g"), MIXED)
    assert result.ok and ctx.gpu_models == ("H100", "V100", "A100")  # type: ignore[attr-defined]


def test_models_only_on_unschedulable_nodes_do_not_count() -> None:
    snap = cluster("a", [node("h", model="H100", schedulable=False), node("a", model="A100")])
    result, _ = run_filter(GpuModelFilter(), gang("g", models=["H100"]), snap)
    assert result.code == GPU_MODEL_UNAVAILABLE  # type: ignore[attr-defined]


def test_gpu_less_gang_passes_a_cpu_cluster_and_gpu_gang_does_not() -> None:
    cpu = cluster("cpu", [node("c", gpus=0, rdma=0)])
    assert run_filter(GpuModelFilter(), gang("g", gpus=0, cpu=4, mem_gi=8), cpu)[0].ok  # type: ignore[attr-defined]
    result, _ = run_filter(GpuModelFilter(), gang("g"), cpu)
    assert result.code == NO_GPU_NODES  # type: ignore[attr-defined]
