"""server_gc: the collector settings of the long-running servers, and their undoing."""

from __future__ import annotations

import gc

import pytest

from federator.runtime.gcpolicy import SERVER_THRESHOLDS, server_gc


def test_server_gc_freezes_raises_thresholds_and_restores() -> None:
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    with server_gc():
        assert gc.get_threshold() == SERVER_THRESHOLDS
        assert gc.get_freeze_count() > frozen_before  # the loaded heap is out of every pass
        assert gc.isenabled()  # tuned, never turned off
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_server_gc_restores_after_an_error() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), server_gc((1234, 5, 6)):
        assert gc.get_threshold() == (1234, 5, 6)
        raise RuntimeError("boom")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_cyclic_garbage_is_still_collected_under_server_gc() -> None:
    class Node:
        other: object = None

    with server_gc():
        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b
        assert gc.collect() >= 2
