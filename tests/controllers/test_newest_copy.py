"""jobs.newest_copy / resource_version_of: which copy of a job a status write starts its CAS from."""

from __future__ import annotations

from typing import Any

from federator.controllers.jobs import newest_copy, resource_version_of


def _job(rv: Any, marker: str) -> dict[str, Any]:
    return {"metadata": {"name": "j", "resourceVersion": rv}, "status": {"phase": marker}}


def test_the_highest_resource_version_wins_and_is_a_copy() -> None:
    older, newer = _job("9", "old"), _job("10", "new")  # numeric, not string, order
    for order in ((older, newer), (newer, older), (None, older, newer, None)):
        chosen = newest_copy(*order)
        assert chosen == newer and chosen is not newer


def test_nothing_to_choose_from() -> None:
    assert newest_copy() is None and newest_copy(None, None) is None


def test_malformed_resource_versions_count_as_zero() -> None:
    for bad in (None, "", "abc", "-1", 7, "1" * 20):
        assert resource_version_of(_job(bad, "x")) == 0
    assert resource_version_of({}) == 0 and resource_version_of({"metadata": None}) == 0
    assert newest_copy(_job("abc", "bad"), _job("1", "good")) == _job("1", "good")
    assert newest_copy(_job("abc", "bad")) == _job("abc", "bad")  # still a copy to try (its CAS fails)
