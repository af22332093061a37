"""Fixtures of the hub tests (helpers: hubtest_support.py).

`hub`: a real hub (build_hub_app over a sqlite file in tmp_path, HTTPS on
127.0.0.1:0 with a dev CA, token-file auth with admin/researcher/other/viewer,
a kubeconfig per user) for one test; no controllers.

Other areas (e.g. member-cluster sync) reuse the same machinery with their
controllers: `from ..hub.hubtest_support import start_hub` and
`async with start_hub(tmp_path, controllers=[member_sync]) as hub: ...`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .hubtest_support import RunningHub, start_hub


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[RunningHub]:
    async with start_hub(tmp_path / "hub") as running:
        yield running
