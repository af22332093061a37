"""Fixtures shared by the simulator tests (helpers: simapi_support.py).

`sim_cluster`: one real SimCluster (HTTPS on a loopback port, bearer token,
gang scheduler and kubelet running) served from a background thread for one
test module, with its kubeconfig written; tests isolate themselves with
`sim_cluster.new_namespace()`.

Other helpers may add fixtures here with small additive edits.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from simapi_support import ThreadedSim, make_test_profile  # noqa: E402


@pytest.fixture(scope="module")
def sim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedSim]:
    sim = ThreadedSim(make_test_profile(), tmp_path_factory.mktemp("sim"), bookmark_interval=1.0).start()
    try:
        yield sim
    finally:
        sim.stop()
