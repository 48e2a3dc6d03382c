"""Single-thread executors for CPU-heavy model calls, shared by all sessions of a worker process.

Two cores are shared by STT, LLM and TTS, so each engine gets one thread (its native library
brings its own intra-op threads) and its jobs run one at a time in priority order: a final
transcript waits only for the job already running, never behind another session's partials.

Cancellation: cancelling the awaiting task removes a queued job before it starts; a job already
running finishes in its thread (native calls cannot be interrupted) and its result is dropped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import queue
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

PRIORITY_FINAL = 0  # a result someone is waiting for now
PRIORITY_PARTIAL = 1  # speculative work; fine to run late


class InferencePool:
    """One worker thread, started on first use, running jobs lowest priority value first
    (first-in first-out within a priority)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.PriorityQueue[
            tuple[int, int, concurrent.futures.Future, Callable[[], object]]
        ] = queue.PriorityQueue()
        self._order = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    async def run(self, fn: Callable[[], T], *, priority: int = PRIORITY_FINAL) -> T:
        """Run `fn()` in the pool's thread and return its result."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._ensure_thread()
        self._jobs.put((priority, next(self._order), future, fn))
        # wrap_future cancels `future` when the awaiting task is cancelled; a queued job then
        # sees that in set_running_or_notify_cancel() and is skipped.
        return await asyncio.wrap_future(future)

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name=f"inference-{self.name}", daemon=True
                )
                self._thread.start()

    def _work(self) -> None:
        while True:
            _, _, future, fn = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as e:  # delivered to the awaiting task
                future.set_exception(e)
            else:
                future.set_result(result)


WHISPER_POOL = InferencePool("whisper")
"""Every Whisper encode/decode of this process runs here."""
