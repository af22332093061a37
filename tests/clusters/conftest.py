"""Fixtures of the member-cluster sync tests (helpers: clustertest_support.py).

`sims`: a `Sims` that starts real SimClusters on the test's loop and stops them afterwards.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from clustertest_support import Sims  # noqa: E402


@pytest.fixture
async def sims(tmp_path: Path) -> AsyncIterator[Sims]:
    group = Sims(tmp_path)
    try:
        yield group
    finally:
        await group.stop()
