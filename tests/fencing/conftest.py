"""Fixtures of the fence agent tests (helpers: agenttest_support.py).

`member`: one real SimCluster (HTTPS on a loopback port, scheduler and kubelet running, Volcano and
coscheduling PodGroups served, kube-batch not) on the test's loop, with the admin ("the hub") and
agent kubeconfigs written; `renewer`: the test's stand-in for the hub's Lease renewer.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from agenttest_support import Member, Renewer  # noqa: E402


@pytest.fixture
async def member(tmp_path: Path) -> AsyncIterator[Member]:
    m = await Member.start(tmp_path)
    try:
        yield m
    finally:
        await m.stop()


@pytest.fixture
async def renewer(member: Member) -> AsyncIterator[Renewer]:
    r = await Renewer.open(member)
    try:
        yield r
    finally:
        await r.close()
