"""Stopping a child process: SIGTERM for a clean exit, SIGKILL for one that lingers."""

from __future__ import annotations

import subprocess
from typing import Any


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
