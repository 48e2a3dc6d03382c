"""A worker's load as LiveKit sees it: the share of session slots in use, or of the worker's
CPU when that is higher; a job counts from the moment the worker says it is available for it
(`VoxroomServer`)."""

from __future__ import annotations

import collections
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOAD_THRESHOLD = 0.999  # full at load 1 (LiveKit wants the threshold below 1)
CPU_WINDOW_S = 10.0  # CPU load is averaged over this long: one reply's burst is not "full"
CHILDREN_REFRESH_S = 5.0  # how often the job processes counted in the CPU load are listed


@dataclass(frozen=True)
class SessionLoad:
    """A worker's load: sessions over `capacity`, or CPU over `max_cpu` when higher
    (`max_cpu` 0: sessions only). Load 1 is full."""

    capacity: int
    max_cpu: float = 0.9

    def __post_init__(self) -> None:
        if self.capacity < 1 or self.max_cpu < 0:
            raise ValueError("capacity must be >= 1 and max_cpu >= 0")

    @property
    def per_session(self) -> float:
        return 1.0 / self.capacity

    def load(self, sessions: int, cpu_share: float) -> float:
        cpu = cpu_share / self.max_cpu if self.max_cpu else 0.0
        return max(sessions * self.per_session, cpu)

    def effective(self, load: float, reserved: int) -> float:
        """`load` plus the jobs accepted but not yet running, each a session's share."""
        return load + reserved * self.per_session


class CpuMeter:
    """CPU of this process and its children as a share of the cores it may use, averaged
    over the last `window_s` (cgroup quota and CPU affinity respected)."""

    def __init__(self, window_s: float = CPU_WINDOW_S) -> None:
        import psutil

        self._proc = psutil.Process()
        self._window_s = window_s
        self._samples: collections.deque[tuple[float, float]] = collections.deque()
        self.cores = usable_cores()
        self._lock = threading.Lock()  # livekit-agents calls load_fnc from executor threads
        self._children: list[Any] = []
        self._children_at = -math.inf

    def share(self) -> float:
        import psutil

        if time.monotonic() - self._children_at >= CHILDREN_REFRESH_S:
            # Listing children scans all of /proc: ~9% of a 3-session worker's CPU when done
            # at every load report (py-spy), so the list is refreshed only now and then.
            self._children = self._proc.children(recursive=True)
            self._children_at = time.monotonic()
        spent = 0.0
        for p in (self._proc, *self._children):
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            spent += t.user + t.system
        now = time.monotonic()
        with self._lock:
            self._samples.append((now, spent))
            while len(self._samples) > 2 and now - self._samples[1][0] >= self._window_s:
                self._samples.popleft()
            (t0, c0), (t1, c1) = self._samples[0], self._samples[-1]
        if t1 - t0 < 1.0:
            return 0.0  # too short a window to tell
        # Children that exited take their CPU time with them: never below zero.
        return max(0.0, (c1 - c0) / (t1 - t0) / self.cores)


def usable_cores() -> float:
    cores = float(len(os.sched_getaffinity(0)))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return cores
    return min(cores, int(quota) / int(period)) if quota != "max" else cores


def server_class() -> type:
    from livekit.agents import AgentServer

    class VoxroomServer(AgentServer):
        """AgentServer whose jobs accepted but not yet running count a session's share each.

        livekit-agents 1.8 reserves a slot per accepted job (so two requests for one free
        slot do not both pass), but prices a reserved job at threshold / num_idle_processes
        while no job is running: with one idle process the second of two rooms created
        together is refused although slots are free, and LiveKit, with no other worker to
        try, never dispatches that room.
        """

        def __init__(self, *a: Any, session_load: SessionLoad, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.session_load = session_load

        def _get_effective_load(self) -> float:
            return self.session_load.effective(self._worker_load, self._reserved_slots)

    return VoxroomServer
