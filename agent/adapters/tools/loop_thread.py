"""An event loop on a thread of its own, for what must outlive any one job's loop.

livekit-agents' thread executor runs each job on its own event loop in its own thread, while
an MCP session (its transport's tasks, its pending requests) belongs to the loop that opened
it. The registry keeps its sessions on this loop; a call from a job's loop hops here and back.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run `coro` here and wait for it (blocking: call it from another thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` run here from any loop. Cancelling the caller cancels it here."""
        if asyncio.get_running_loop() is self.loop:
            return await coro
        # wrap_future's cancel cancels the concurrent future, which cancels the task here.
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()
