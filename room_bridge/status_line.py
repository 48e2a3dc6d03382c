"""The one-line terminal status of `voxroom bridge`, redrawn in place (only on a TTY)."""

from __future__ import annotations

import logging
import sys

from agent.protocol import BRIDGE_MIC_TRACK, MEETING_TRACK
from room_bridge.bridge import BridgeStatus
from room_bridge.levels import meter_bar

_SHORT = {MEETING_TRACK: "meeting", BRIDGE_MIC_TRACK: "mic"}
CLEAR_LINE = "\r\x1b[2K"


def format_status(status: BridgeStatus, room: str, width: int = 120) -> str:
    parts = [f"{room}: {status.state}"]
    for name, db in status.levels_dbfs.items():
        parts.append(f"{_SHORT.get(name, name)} {meter_bar(db, width=10)} {db:3.0f} dB")
    if status.gate_muting:
        parts.append("muted (agent speaking)")
    if status.latency_p50_ms is not None:
        parts.append(f"+{status.latency_p50_ms:.1f} ms")
    parts.append(f"sent {status.published} lost {status.dropped}")
    line = " | ".join(parts)
    return line if len(line) <= width else line[: width - 1] + "…"


def redraw(line: str) -> str:
    """Carriage return, clear the line, write it: the cursor stays on the status line."""
    return CLEAR_LINE + line


class ClearStatusBeforeLogging(logging.Filter):
    """Installed on the log handlers while the status line is shown: a log record clears the
    line first, so the record starts at the left margin; the status is redrawn after it."""

    def filter(self, record: logging.LogRecord) -> bool:
        sys.stdout.write(CLEAR_LINE)
        sys.stdout.flush()
        return True
