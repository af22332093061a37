"""Helpers for the emulated operators' tests (tests/sim/test_operators_*.py).

`operator_profile()` is the test profile with every operator on and a kubelet that ends a pod 0.5 s after it
starts (pods that must keep running carry `LONG_RUN`); `wait_objects` waits, on the cluster's own watch, until
a predicate over the listed objects holds; `upstream_example` reads an upstream example unchanged (JobSet's are
copied in tests/apis/jobkinds/upstream/, the rest come from the Go module cache through the `go_module` fixture
of tests/apis/jobkinds/conftest.py, which `jobkinds_conftest` loads).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from kubernetes import client, config
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


KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
needs_kubectl = pytest.mark.skipif(not os.path.exists(KUBECTL), reason=f"kubectl not found at {KUBECTL}")


def kubectl(sim: ThreadedSim, home: Path, *args: str, check: bool = True, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    """Real kubectl against `sim` with its kubeconfig (a fresh HOME and cache in `home`)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "KUBECONFIG": str(sim.kubeconfig)}
    proc = subprocess.run([KUBECTL, "--cache-dir", str(home / "cache"), "--request-timeout=30s", *args], env=env,
                          capture_output=True, text=True, input=stdin, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@contextlib.contextmanager
def official_client(sim: ThreadedSim) -> Iterator[client.ApiClient]:
    """The official client configured from `sim`'s kubeconfig."""
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api_client:
        yield api_client


def listed(sim: ThreadedSim, rt: ResourceType, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
    """The stored objects of `rt` in `namespace` (in-process, no client)."""

    async def run() -> list[dict[str, Any]]:
        return (await sim.c.storage.list(rt, namespace=namespace, label_selector=selector)).items

    return sim.run(run)


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
