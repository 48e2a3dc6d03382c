"""A child process's output kept in a log file, and stopping it: SIGTERM for a clean exit,
SIGKILL for one that lingers."""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class OutputLog:
    """A child's output as it is copied into a file; `ready` is set, and `ready_at` is the
    monotonic time, at the first line that holds the marker."""

    path: Path
    ready: threading.Event = field(default_factory=threading.Event)
    ready_at: float | None = None


def log_output(proc: subprocess.Popen[str], path: Path, marker: str) -> OutputLog:
    """Copy `proc`'s stdout into `path` line by line, flushed, on a daemon thread (a child
    blocks once a pipe nobody reads fills up)."""
    out = OutputLog(path)

    def copy() -> None:
        assert proc.stdout is not None
        with open(path, "w") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if marker in line and not out.ready.is_set():
                    out.ready_at = time.monotonic()
                    out.ready.set()

    threading.Thread(target=copy, daemon=True).start()
    return out


def stop_process(proc: subprocess.Popen[Any], grace_s: float) -> int:
    """SIGTERM `proc`, SIGKILL it when it has not exited within `grace_s`; returns its exit
    code (at once for a process that has exited already)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
