"""Executors for CPU-heavy model calls, shared by all sessions of a worker process.

Two cores are shared by STT, LLM and TTS, so each engine gets one or two threads (its native
library brings its own intra-op threads) and its jobs run in priority order: a final transcript
never waits behind another session's partials, and with two threads not even for the partial
already running.

Cancellation: cancelling the awaiting task removes a queued job before it starts; a job already
running finishes in its thread (native calls cannot be interrupted) and its result is dropped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import itertools
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

PRIORITY_FINAL = 0  # a result someone is waiting for now
PRIORITY_PARTIAL = 1  # speculative work; fine to run late


class InferencePool:
    """`threads` worker threads, started on first use, running jobs lowest priority value first
    (first-in first-out within a priority). At most one PRIORITY_PARTIAL job runs at a time:
    speculative work never holds more than one thread, so with two threads a final that comes
    while a partial runs starts at once beside it instead of waiting for it."""

    def __init__(self, name: str, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError("an inference pool needs at least one thread")
        self.name = name
        self.threads = threads
        self._jobs: list[tuple[int, int, concurrent.futures.Future, Callable[[], object]]] = []
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._partial_running = False
        self._started = 0

    async def run(self, fn: Callable[[], T], *, priority: int = PRIORITY_FINAL) -> T:
        """Run `fn()` in one of the pool's threads and return its result."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._ready:
            heapq.heappush(self._jobs, (priority, next(self._order), future, fn))
            if self._started < self.threads:
                self._started += 1
                threading.Thread(
                    target=self._work, name=f"inference-{self.name}", daemon=True
                ).start()
            self._ready.notify()
        # wrap_future cancels `future` when the awaiting task is cancelled; a queued job then
        # sees that in set_running_or_notify_cancel() and is skipped.
        return await asyncio.wrap_future(future)

    def waiting(self) -> int:
        """Jobs queued and not started: other work is waiting for the pool's threads."""
        with self._ready:
            return len(self._jobs)

    def _next(self) -> tuple[int, concurrent.futures.Future, Callable[[], object]]:
        """The next job this thread may run (waits for one); called holding `_ready`."""
        while True:
            if self._jobs and not (self._jobs[0][0] >= PRIORITY_PARTIAL and self._partial_running):
                priority, _, future, fn = heapq.heappop(self._jobs)
                if future.set_running_or_notify_cancel():
                    self._partial_running |= priority >= PRIORITY_PARTIAL
                    return priority, future, fn
                continue
            self._ready.wait()

    def _work(self) -> None:
        while True:
            with self._ready:
                priority, future, fn = self._next()
            try:
                result = fn()
            except BaseException as e:  # delivered to the awaiting task
                future.set_exception(e)
            else:
                future.set_result(result)
            if priority >= PRIORITY_PARTIAL:
                with self._ready:
                    self._partial_running = False
                    self._ready.notify_all()


WHISPER_POOL = InferencePool("whisper", threads=2)
"""Every Whisper encode/decode of this process runs here. Two threads: the encoder keeps about
one core busy, so a final transcript beside a running partial costs little, while waiting for
that partial delayed the answer (LiveKit copilot bench traces: docs/bench/copilot.md)."""
