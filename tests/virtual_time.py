"""An asyncio event loop on virtual time, for tests of timing logic without waiting.

The loop's clock starts at 0 and jumps straight to the next timer whenever nothing is ready,
so `asyncio.sleep(0.3)` returns at once with `loop.time()` 0.3 later. Results are exact and
repeatable. Only for code that waits on timers and other tasks: nothing may wait on threads
or sockets (an empty wait with no timer is a deadlock, and raises).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise RuntimeError("virtual time: every task waits and no timer is set (deadlock)")
        self.now += timeout
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(self._virtual)

    def time(self) -> float:
        return self._virtual.now


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion on a fresh VirtualTimeLoop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
