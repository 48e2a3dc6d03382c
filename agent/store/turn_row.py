"""A finished turn as the stored columns both turn stores share (agent/store/transcripts.py's
SQLite file and agent/store/transcripts_postgres.py's table)."""

from __future__ import annotations

import json
import time
from typing import Any


def turn_row(turn: dict[str, Any]) -> tuple[Any, ...]:
    """A finished turn's stored columns after room and session, in SCHEMA's order."""
    return (
        time.time(),
        turn["user_text"],
        turn["agent_text"],
        turn["heard_text"],
        bool(turn["interrupted"]),
        json.dumps(turn["latency_ms"]),
        json.dumps(turn.get("fallbacks", [])),
        json.dumps(turn.get("tool_messages", [])),
        turn.get("caller", ""),
    )
