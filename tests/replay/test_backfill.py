"""BackfillQueue: oldest first, a failing shape is skipped for the rest of the pass, lazy removal."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from federator.replay.backfill import BackfillQueue


@dataclass(eq=False)
class Item:
    seq: int
    shape: str


def test_pass_offers_oldest_first_and_skips_a_shape_after_it_fails() -> None:
    q: BackfillQueue[Item] = BackfillQueue()
    items = [Item(1, "big"), Item(2, "small"), Item(3, "big"), Item(4, "small"), Item(5, "small")]
    for item in items:
        q.add(item)
    offered: list[int] = []
    room = 2

    def attempt(item: Item) -> bool:
        nonlocal room
        offered.append(item.seq)
        if item.shape == "big":
            return False  # never fits: the second big one must not be offered
        if room == 0:
            return False
        room -= 1
        return True

    placed = q.run_pass(attempt)
    assert [i.seq for i in placed] == [2, 4]
    assert offered == [1, 2, 4, 5]
    assert [i.seq for i in q.items()] == [1, 3, 5]
    assert len(q) == 3


def test_skip_and_removal() -> None:
    q: BackfillQueue[Item] = BackfillQueue()
    a, b, c = Item(1, "x"), Item(2, "y"), Item(3, "x")
    for item in (a, b, c):
        q.add(item)
    assert q.remove(a) and not q.remove(a)
    assert a not in q and c in q
    placed = q.run_pass(lambda item: True, skip={"y"})
    assert placed == [c]
    assert list(q.items()) == [b]
    skip: set[object] = set()
    assert q.offer_one(lambda item: False, skip=skip) is None and skip == {"y"}


def test_items_of_one_shape_must_come_in_order() -> None:
    q: BackfillQueue[Item] = BackfillQueue()
    first = Item(5, "x")
    q.add(first)
    with pytest.raises(ValueError, match="increasing seq"):
        q.add(Item(4, "x"))
    with pytest.raises(ValueError, match="already queued"):
        q.add(first)
