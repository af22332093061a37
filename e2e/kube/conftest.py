"""Real Kubernetes members for e2e/kube (issue 25): the binaries, built once, and members started from
simulator profiles by federator/dev/kube.py, and the operators some of them run (`operator_binaries`).

Building is slow the first time on a machine (about 6 minutes on two cores) and instant afterwards
(cached under ~/.cache/federator/kube/<go.sum hash>/). It happens in the session fixture `kube_binaries`,
which the tests reach only through module fixtures, and the modules here mark their tests
`pytest.mark.timeout(..., func_only=True)` so that pytest's per-test timeout does not count the build
(build.sh has its own 30-minute limit). A machine without Go and without built binaries skips the suite
with the reason (under CI=true it fails instead). The modules are `xdist_group`s, so one worker holds a module's
members (the repo-root conftest.py makes xdist's grouping hold under pytest 9.2).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from federator.dev.kube import (
    KubeBinaries,
    KubeBuildError,
    OperatorBinaries,
    kube_binaries as find_kube_binaries,
    operator_binaries as find_operator_binaries,
)

T = TypeVar("T")

#: a cold build of the five binaries took 360 s on a two-core machine; leave room for a loaded one
BUILD_TIMEOUT_SECONDS = 1800.0


@pytest.fixture(scope="session")
def kube_binaries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeBinaries]:
    yield _built(tmp_path_factory, lambda: find_kube_binaries(timeout=BUILD_TIMEOUT_SECONDS))


@pytest.fixture(scope="session")
def operator_binaries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorBinaries]:
    """The JobSet controller, the Kubeflow training operator and the mpi-operator (e2e/kube/operators/build.sh; a
    cold build took about 6 + 3.5 + 4.5 minutes on a loaded two-core machine), for members started with
    `operators=`."""
    yield _built(tmp_path_factory, lambda: find_operator_binaries(timeout=BUILD_TIMEOUT_SECONDS))


def _built(tmp_path_factory: pytest.TempPathFactory, build: Callable[[], T]) -> T:
    # one build at a time on this machine (xdist workers, or two test runs): the build scripts write one cache
    # folder each, and two Go builds at once would only compete for the cores
    lock_path = Path(tmp_path_factory.getbasetemp()).parent / "federator-kube-build.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return build()
        except KubeBuildError as e:
            # CI must prove the real-member suite: there a missing Go is a failure, not a skip
            if "no 'go' on PATH" in str(e) and not os.environ.get("CI"):
                pytest.skip(str(e))
            raise
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

