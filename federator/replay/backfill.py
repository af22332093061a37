"""BackfillQueue: first-in first-out with backfill, in time proportional to what it places.

A pass tries the queued items oldest first; an item that cannot be placed
does not block the ones behind it (backfill). Items carry a shape key
(what decides whether they fit: pod requests, pod count, constraints):
within one pass, capacity only shrinks (placements take it, nothing frees
it), so once an item of a shape fails, every later item of that shape
would fail too, and the pass skips the whole shape. That is exact, not a
heuristic, and it makes a pass cost O((placed + shapes) log shapes)
instead of O(queued). The member model runs each cluster's gang
scheduler with it and the hub-side baselines their global queues.

Pure: no I/O, no clocks.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Generic, Protocol, TypeVar

__all__ = ["BackfillQueue", "Queued"]


class Queued(Protocol):
    @property
    def seq(self) -> int: ...

    @property
    def shape(self) -> Hashable: ...


T = TypeVar("T", bound=Queued)


class BackfillQueue(Generic[T]):
    """Items by shape, oldest (lowest `seq`) first within a shape; removal is lazy."""

    def __init__(self) -> None:
        self._by_shape: dict[Hashable, deque[T]] = {}
        self._present: set[int] = set()
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __contains__(self, item: T) -> bool:
        return id(item) in self._present

    def add(self, item: T) -> None:
        """Append an item; its seq must be above every seq added before with the same shape."""
        if id(item) in self._present:
            raise ValueError("item is already queued")
        queue = self._by_shape.get(item.shape)
        if queue is None:
            self._by_shape[item.shape] = queue = deque()
        elif queue and queue[-1].seq >= item.seq:
            raise ValueError("items of one shape must be added in increasing seq order")
        queue.append(item)
        self._present.add(id(item))
        self._len += 1

    def remove(self, item: T) -> bool:
        """Take an item out (lazily: it is dropped when it reaches the head). False if not queued."""
        if id(item) not in self._present:
            return False
        self._present.discard(id(item))
        self._len -= 1
        return True

    def _head(self, shape: Hashable) -> T | None:
        queue = self._by_shape.get(shape)
        if queue is None:
            return None
        while queue and id(queue[0]) not in self._present:
            queue.popleft()
        if not queue:
            del self._by_shape[shape]
            return None
        return queue[0]

    def items(self) -> Iterator[T]:
        """Every queued item, oldest first (O(n log n); for reports and tests)."""
        alive = [item for queue in self._by_shape.values() for item in queue if id(item) in self._present]
        return iter(sorted(alive, key=lambda item: item.seq))

    def shapes(self) -> tuple[Hashable, ...]:
        return tuple(shape for shape in list(self._by_shape) if self._head(shape) is not None)

    def offer_one(self, attempt: Callable[[T], bool], *, skip: set[Hashable]) -> T | None:
        """Offer the oldest item whose shape is not in `skip`; on False add its shape to `skip` and go on.

        Returns the item placed, or None when every shape is skipped. `skip` is the caller's, so a
        shape found not to fit stays skipped across calls of one pass.
        """
        while True:
            best: tuple[int, Hashable] | None = None
            for shape in list(self._by_shape):
                if shape in skip:
                    continue
                head = self._head(shape)
                if head is not None and (best is None or head.seq < best[0]):
                    best = (head.seq, shape)
            if best is None:
                return None
            head = self._head(best[1])
            assert head is not None
            if attempt(head):
                if id(head) in self._present:
                    self.remove(head)
                return head
            skip.add(best[1])

    def run_pass(self, attempt: Callable[[T], bool], *, skip: Iterable[Hashable] = ()) -> list[T]:
        """Offer items oldest first to `attempt`; True = placed (removed), False = its shape is done.

        Shapes in `skip` are not offered at all. Returns the placed items in order.
        """
        skipped = set(skip)
        heads: list[tuple[int, int, Hashable]] = []
        for order, shape in enumerate(list(self._by_shape)):
            if shape in skipped:
                continue
            head = self._head(shape)
            if head is not None:
                heads.append((head.seq, order, shape))
        heapq.heapify(heads)
        placed: list[T] = []
        while heads:
            _, order, shape = heapq.heappop(heads)
            head = self._head(shape)
            if head is None:
                continue
            if not attempt(head):
                continue
            if id(head) in self._present:
                self.remove(head)
            placed.append(head)
            following = self._head(shape)
            if following is not None:
                heapq.heappush(heads, (following.seq, order, shape))
        return placed
