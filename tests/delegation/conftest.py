"""Fixtures of the delegation tests.

`member`: one real SimCluster (HTTPS on a loopback port, bearer token, the
gang schedulers of all five kinds plus the default scheduler, and the
kubelet) served from a background thread for the whole package, with its
kubeconfig; the official `kubernetes` client talks to it over the socket.
Tests isolate themselves with `member.new_namespace()`.

Helpers (MEMBER_PROFILE, make_job, waiting): delegation_support.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

_HERE = Path(__file__).resolve().parent
for _path in (str(_HERE), str(_HERE.parent / "sim")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from delegation_support import MEMBER_PROFILE  # noqa: E402
from simapi_support import ThreadedSim  # noqa: E402

from federator.sim.profile import parse_profile  # noqa: E402


@pytest.fixture(scope="package")
def member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedSim]:
    profile = parse_profile(MEMBER_PROFILE, source="tests/delegation/conftest.py")
    sim = ThreadedSim(profile, tmp_path_factory.mktemp("member")).start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="package")
def member_api(member: ThreadedSim) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(member.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        yield api
