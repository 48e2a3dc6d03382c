"""A bounded queue from producers to one consumer on the event loop, for what goes stale (audio
frames, partial transcripts): when the consumer falls behind, the oldest items are dropped, so
what it reads is never more than `max_items` behind."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class DropOldestQueue(Generic[T]):
    """Iterating yields the items in order; once the queue is closed and read to its end, the
    iteration ends, or raises the error it was closed with. `dropped` counts the items that
    went unread."""

    def __init__(self, max_items: int) -> None:
        self._items: deque[T] = deque()
        self._max = max_items
        self._ready = asyncio.Event()
        self._closed = False
        self._error: BaseException | None = None
        self.dropped = 0

    def put(self, items: Iterable[T]) -> None:
        """Queue `items`; nothing once it is closed."""
        if self._closed:
            return
        self._items.extend(items)
        while len(self._items) > self._max:
            self._items.popleft()
            self.dropped += 1
        self._ready.set()

    def close(self, error: BaseException | None = None) -> None:
        """End the iteration after the items queued, cleanly or with `error`; only the first
        close counts."""
        if not self._closed:
            self._closed, self._error = True, error
            self._ready.set()

    async def __aiter__(self) -> AsyncIterator[T]:
        while True:
            while self._items:
                yield self._items.popleft()
            if self._closed:
                if self._error is not None:
                    raise self._error
                return
            self._ready.clear()
            await self._ready.wait()
