"""Helpers for the emulated operators' tests (tests/sim/test_operators_*.py).

`operator_profile()` is the test profile with every operator on and a kubelet that ends a pod 0.5 s after it
starts (pods that must keep running carry `LONG_RUN`); `wait_objects` waits, on the cluster's own watch, until
a predicate over the listed objects holds; `upstream_example` reads an upstream example unchanged (JobSet's are
copied in tests/apis/jobkinds/upstream/, the rest come from the Go module cache through the `go_module` fixture
of tests/apis/jobkinds/conftest.py, which `jobkinds_conftest` loads).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from simapi_support import ThreadedSim, make_test_profile

from federator.apiserver.registry import ResourceType
from federator.sim.kubelet import ANNOTATION_DURATION
from federator.sim.profile import ClusterProfile

TESTS = Path(__file__).resolve().parent.parent
JOBSET_EXAMPLES = TESTS / "apis" / "jobkinds" / "upstream"
KUBERNETES = "k8s.io/kubernetes@v1.36.3"
TRAINING_OPERATOR = "github.com/kubeflow/training-operator@v1.8.1"
#: pod template annotations that keep a pod running (the kubelet's duration)
LONG_RUN = {ANNOTATION_DURATION: "3600"}


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: tests/apis/jobkinds/conftest.py (its `go_module` fixture), loaded under another name
jobkinds_conftest = _load(TESTS / "apis" / "jobkinds" / "conftest.py", "jobkinds_conftest")


def operator_profile(name: str = "optest") -> ClusterProfile:
    from federator.sim.operators import OPERATOR_NAMES

    return make_test_profile(name=name, operators=list(OPERATOR_NAMES),
                             kubelet={"startDelaySeconds": 0.1, "terminationSeconds": 0.1, "defaultRunSeconds": 0.5,
                                      "crashLoopBackoffSeconds": 0.1})


def read_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def wait_objects(sim: ThreadedSim, rt: ResourceType, namespace: str, check: Callable[[list[dict[str, Any]]], Any], *,
                 what: str, label_selector: str | None = None, timeout: float = 30.0) -> Any:
    """`check(objects)` once it is truthy, re-evaluated on every watch event of `rt` in `namespace`."""

    async def run() -> Any:
        storage = sim.c.storage

        async def listed() -> list[dict[str, Any]]:
            return (await storage.list(rt, namespace=namespace, label_selector=label_selector)).items

        found = check(await listed())
        if found:
            return found
        async for _ in storage.watch(rt, namespace=namespace, label_selector=label_selector):
            found = check(await listed())
            if found:
                return found
        raise AssertionError(f"the watch ended before {what}")

    async def bounded() -> Any:
        try:
            return await asyncio.wait_for(run(), timeout)
        except TimeoutError:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None

    return sim.run(bounded, timeout=timeout + 5)


def condition_status(obj: dict[str, Any], kind: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == kind:
            return str(c.get("status"))
    return None
