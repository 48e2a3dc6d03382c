"""Waiting with a time limit, without `asyncio.wait_for`'s trap on Python 3.11: when the
waiting task is cancelled just as the awaited thing finishes, `wait_for` returns the result
and the cancellation is lost. A task asked to stop then goes on, and whoever awaits its end
waits forever: a microphone task in a 3600 s silence loop (one `capture_frame` per 60 ms)
hung a benchmark that way, now and then, under load."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def finish_within(step: Awaitable[Any], timeout_s: float | None) -> bool:
    """Await `step` for at most `timeout_s` seconds (None: no limit). True if it finished
    (its result or exception stays on it); False if not, and then it is cancelled but not
    waited for, so that a step which ignores its cancellation cannot hold the caller. A
    cancellation of the caller always propagates, and cancels `step` too."""
    future = asyncio.ensure_future(step)
    try:
        done, _ = await asyncio.wait({future}, timeout=timeout_s)
    except asyncio.CancelledError:
        future.cancel()
        raise
    if not done:
        future.cancel()
    return bool(done)
