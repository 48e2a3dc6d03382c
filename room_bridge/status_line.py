"""The one-line terminal status of `voxroom bridge`, redrawn in place (only on a TTY)."""

from __future__ import annotations

from room_bridge.bridge import BridgeStatus
from room_bridge.levels import meter_bar


def format_status(status: BridgeStatus, room: str, width: int = 120) -> str:
    parts = [f"{room}: {status.state}"]
    for name, db in status.levels_dbfs.items():
        parts.append(f"{name} {meter_bar(db, width=12)} {db:4.0f} dBFS")
    if status.gate_muting:
        parts.append("muted: agent speaking")
    if status.latency_p50_ms is not None:
        parts.append(f"capture->publish {status.latency_p50_ms:.1f} ms")
    parts.append(f"sent {status.published} dropped {status.dropped}")
    line = " | ".join(parts)
    return line if len(line) <= width else line[: width - 1] + "…"


def redraw(line: str) -> str:
    """Carriage return, clear the line, write it: the cursor stays on the status line."""
    return "\r\x1b[2K" + line
