"""What the engines report as they go: one typed event per happening, each with its `kind` (the
"type" of its JSON) and `t`, when it happened on the engine's clock (seconds).

The state machine's notices are events of this vocabulary (`state_machine.events`, re-exported
here): the turn engine reports them as the machine gives them. Here are the engines' own
events beside them. The turn engine's sink (`TurnEngine(on_event=...)`) gets these; its
consumers turn them into JSON at their edge with `event_json`: `voxroom simulate --events`
writes it, the turn logs and the turn store keep it. The copilot's own events are in
agent.copilot.events; `Transcript`, `Speculative` and `TurnScore` are both engines'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from state_machine.events import (
    Backchannel,
    BargeIn,
    Event,
    FalseInterruption,
    Notice,
    PlaybackDucked,
    PlaybackPaused,
    ReplyDone,
    ReplyFailed,
    Speculative,
    SpeechEnd,
    SpeechStart,
    Transcript,
    UtteranceDiscarded,
    event_json,
)
from state_machine.states import AgentState

__all__ = [  # the machine's notices and the JSON of an event, with the engines' own events
    "AudioStart",
    "Backchannel",
    "BargeIn",
    "Event",
    "FalseInterruption",
    "Notice",
    "PlaybackDucked",
    "PlaybackPaused",
    "PlaybackStopped",
    "ReplyCancelled",
    "ReplyDone",
    "ReplyFailed",
    "ReplyStarted",
    "Speculative",
    "SpeechEnd",
    "SpeechStart",
    "StateChanged",
    "ToolCalled",
    "Transcript",
    "TtsChunk",
    "Turn",
    "TurnRetracted",
    "TurnScore",
    "UtteranceDiscarded",
    "VoiceEvent",
    "event_json",
]

# ---- both engines ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnScore(Event):
    """The end-of-turn model's P(complete) of a candidate (None: it failed), and its time."""

    kind: ClassVar[str] = "turn_score"
    utterance_id: int
    text: str
    score: float | None
    ms: float


# ---- the turn engine ------------------------------------------------------------------------


@dataclass(frozen=True)
class StateChanged(Event):
    kind: ClassVar[str] = "state"
    state: AgentState


@dataclass(frozen=True)
class TurnRetracted(Event):
    """The user went on before the agent spoke: the last final transcript is merged into the
    next one."""

    kind: ClassVar[str] = "turn_retracted"


@dataclass(frozen=True)
class ReplyStarted(Event):
    kind: ClassVar[str] = "reply_started"
    reply_id: int
    speculative: bool


@dataclass(frozen=True)
class ReplyCancelled(Event):
    kind: ClassVar[str] = "reply_cancelled"
    reply_id: int
    reason: str


@dataclass(frozen=True)
class TtsChunk(Event):
    """A chunk of the reply's text, synthesized and handed to the playout."""

    kind: ClassVar[str] = "tts_chunk"
    text: str
    reply_id: int


@dataclass(frozen=True)
class AudioStart(Event):
    """The reply's first sample reached the listener."""

    kind: ClassVar[str] = "audio_start"
    reply_id: int


@dataclass(frozen=True)
class PlaybackStopped(Event):
    """The answered turn's reply was cut, `heard_text` of it heard."""

    kind: ClassVar[str] = "playback_stopped"
    heard_text: str


@dataclass(frozen=True)
class ToolCalled(Event):
    """A tool call of reply `reply_id` ended: `ok`, or failed (the LLM was told why)."""

    kind: ClassVar[str] = "tool_called"
    reply_id: int
    name: str
    ok: bool
    duration_ms: float


@dataclass(frozen=True)
class Turn(Event):
    """A finished turn (`TurnRecord.as_event()`): what was said and heard, its latencies, and
    the tool exchange before the answer (OpenAI messages: the assistant's calls, their
    results)."""

    kind: ClassVar[str] = "turn"
    user_text: str
    agent_text: str
    heard_text: str
    interrupted: bool
    latency_ms: dict[str, float | None]
    tool_messages: list[dict[str, Any]] = field(default_factory=list)


VoiceEvent = (
    Notice  # the state machine's, reported as it gives them
    | TurnScore
    | StateChanged
    | TurnRetracted
    | ReplyStarted
    | ReplyCancelled
    | TtsChunk
    | AudioStart
    | PlaybackStopped
    | ToolCalled
    | Turn
)
