"""Freed heap memory handed back to the OS after turns (glibc's `malloc_trim`).

The speech models, the HTTP clients and WebRTC allocate and free buffers of every size from
several threads. glibc keeps what they free in its arenas, so a long-lived worker's resident
memory creeps up in steps although nothing stays alive (the soak bench: Python's own heap flat,
RSS still growing; docs/benchmarks.md, "Soak"). Trimming after a turn, at most every
`MIN_INTERVAL_S` per process, returns those pages. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 20.0


def _libc_trim() -> Callable[[], object] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return lambda: trim(0)


class MemoryTrimmer:
    """Runs `trim` on a thread of its own when asked, at most every `min_interval_s`."""

    def __init__(
        self,
        trim: Callable[[], object] | None,
        *,
        min_interval_s: float = MIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._trim = trim
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: float | None = None
        self.trims = 0

    def trim_soon(self) -> threading.Thread | None:
        """Start a trim unless one ran recently (returns its thread, or None)."""
        if self._trim is None:
            return None
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last < self._min_interval_s:
                return None
            self._last = now
            self.trims += 1
        thread = threading.Thread(target=self._run, name="malloc-trim", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        assert self._trim is not None
        try:
            self._trim()
        except Exception as e:  # never worth more than a line
            log.debug("malloc_trim failed: %s", e)


PROCESS_TRIMMER = MemoryTrimmer(_libc_trim())
