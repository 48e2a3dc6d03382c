"""Text-stream topics the web page reads besides LiveKit's `lk.transcription`, and their
payloads. The page's side is web/src/metrics.ts and web/src/copilot.ts; web/README.md
documents both.

- `voxroom.metrics`: one text stream (or data packet) per finished turn, a JSON object
  `{"type": "turn", "interrupted": bool, "latency_ms": {stage: ms | null}}` with the stages of
  `TurnRecord.latency_ms()` (endpoint, stt, llm_first_token, first_chunk, tts_first_audio,
  voice_to_voice).
- `voxroom.copilot`: one text stream per answer; its chunks are deltas of the answer's text.
- `voxroom.context.status` (agent.copilot writes it): one JSON receipt per document the
  candidate sent, `{"name", "status": "indexed" | "refused", "pieces", "error"?}`.
"""

from __future__ import annotations

import json
from typing import Any

TOPIC_METRICS = "voxroom.metrics"
TOPIC_COPILOT = "voxroom.copilot"


def turn_metrics_message(turn: dict[str, Any]) -> str:
    """The `voxroom.metrics` payload for the turn engine's "turn" event."""
    return json.dumps(
        {
            "type": "turn",
            "interrupted": bool(turn.get("interrupted")),
            "latency_ms": turn.get("latency_ms") or {},
        }
    )
