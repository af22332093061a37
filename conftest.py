"""Repo-root pytest hooks, for every test folder (tests/ and e2e/, run together or alone).

Keeps each `xdist_group` on one xdist worker (tests/ui/test_browser.py: one `federator up` for the whole
module; e2e/kube's modules: one set of real members each). `make test` runs pytest with `-n 2 --dist
loadgroup`. xdist groups tests by a suffix it appends to each test's node id (`...::test_x@ui-browser`), but
it writes the suffix to `item._nodeid`, which pytest 9.2 no longer reads (pytest-dev/pytest-xdist#1386: the
grouping silently stops and a module's tests are spread over both workers, each starting its own hub or
members). Until xdist sets it where pytest reads it, this hook appends the suffix itself, on each worker,
only under loadgroup and only where it is missing.
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # an older pytest: xdist's own suffix works there
        return
    for item in items:
        groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                         for mark in item.iter_markers("xdist_group")})
        if not groups:
            continue
        suffix = "@" + "_".join(groups)
        if not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            item._id = NodeId.parse(item.nodeid + suffix)
