"""Per-turn timings (monotonic clock, reported in milliseconds) and percentile summaries."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from agent.pipeline.reply import ReplyPipeline, ReplyTimings


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round((b - a) * 1000, 1)


@dataclass
class TurnRecord:
    user_text: str
    speech_end: float  # last voiced frame of the user's turn
    final_at: float  # endpoint decided, user turn committed
    reply: ReplyPipeline | None = None
    audio_start: float | None = None  # first reply sample reaches the listener
    agent_text: str = ""
    heard_text: str = ""
    interrupted: bool = False
    timings: ReplyTimings | None = None  # the reply's, once the turn is finished
    tool_messages: list[dict[str, Any]] = field(default_factory=list)

    def finish(self, *, agent_text: str, heard_text: str, interrupted: bool) -> None:
        self.agent_text, self.heard_text, self.interrupted = agent_text, heard_text, interrupted
        if self.reply is not None:
            self.tool_messages = self.reply.tool_messages()
            # Keep the figures, not the pipeline: a session keeps its turn records, and each
            # pipeline holds its whole prompt (the soak run's memory grew turn by turn).
            self.timings, self.reply = self.reply.timings, None

    def latency_ms(self) -> dict[str, float | None]:
        t = self.reply.timings if self.reply is not None else self.timings
        return {
            "endpoint": _ms(self.speech_end, self.final_at),
            "stt": _ms(self.speech_end, t.started) if t else None,
            "llm_first_token": _ms(t.started, t.llm_first_token) if t else None,
            "first_chunk": _ms(t.started, t.first_chunk) if t else None,
            "tts_first_audio": _ms(t.first_chunk, t.tts_first_audio) if t else None,
            "voice_to_voice": _ms(self.speech_end, self.audio_start),
        }

    def as_event(self) -> dict[str, Any]:
        return {
            "user_text": self.user_text,
            "agent_text": self.agent_text,
            "heard_text": self.heard_text,
            "interrupted": self.interrupted,
            "latency_ms": self.latency_ms(),
            "tool_messages": self.tool_messages,
        }


def percentiles(values: Iterable[float | None]) -> dict[str, float | None]:
    """p50/p95/p99 of the values that were measured (None skipped)."""
    xs = np.array([v for v in values if v is not None], dtype=float)
    if xs.size == 0:
        return {"n": 0, "p50": None, "p95": None, "p99": None}
    p50, p95, p99 = np.percentile(xs, [50, 95, 99])
    return {"n": int(xs.size), "p50": round(p50, 1), "p95": round(p95, 1), "p99": round(p99, 1)}
