"""What the engines report as they go: one typed event per happening, each with its `kind` (the
"type" of its JSON) and `t`, when it happened on the engine's clock (seconds).

The turn engine's sink (`TurnEngine(on_event=...)`) gets these; its consumers turn them into
JSON at their edge with `event_json`: `voxroom simulate --events` writes it, the turn logs and
the turn store keep it. The copilot's own events are in agent.copilot.events; `Transcript`,
`Speculative` and `TurnScore` are both engines'.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, ClassVar

from state_machine.states import AgentState


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str]
    t: float


def event_json(event: Event) -> dict[str, Any]:
    """`{"t": t, "type": kind, ...}` with the event's fields in order (a state by its name)."""
    out: dict[str, Any] = {"t": event.t, "type": event.kind}
    for f in fields(event):
        value = getattr(event, f.name)
        out[f.name] = value.name if isinstance(value, Enum) else value
    return out


# ---- both engines ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Transcript(Event):
    """The user's words: a partial or candidate transcript, or (`final`) the committed turn."""

    kind: ClassVar[str] = "transcript"
    text: str
    final: bool


@dataclass(frozen=True)
class Speculative(Event):
    """The final transcript kept the reply started on a candidate, or wasted it."""

    kind: ClassVar[str] = "speculative"
    kept: bool
    similarity: float


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
class SpeechStart(Event):
    """The user started speaking (`t`: the first voiced frame)."""

    kind: ClassVar[str] = "speech_start"


@dataclass(frozen=True)
class SpeechEnd(Event):
    """The endpoint of the user's turn (`t`: its last voiced frame)."""

    kind: ClassVar[str] = "speech_end"


@dataclass(frozen=True)
class UtteranceDiscarded(Event):
    kind: ClassVar[str] = "utterance_discarded"
    utterance_id: int


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
class ReplyDone(Event):
    kind: ClassVar[str] = "reply_done"
    reply_id: int


@dataclass(frozen=True)
class ReplyFailed(Event):
    kind: ClassVar[str] = "reply_failed"
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
class PlaybackPaused(Event):
    """A sound of the user's (from `onset`) paused the reply."""

    kind: ClassVar[str] = "playback_paused"
    onset: float


@dataclass(frozen=True)
class PlaybackDucked(Event):
    """A sound of the user's (from `onset`) ducked the reply: it plays on, quieter, while the
    sound is judged."""

    kind: ClassVar[str] = "playback_ducked"
    onset: float


@dataclass(frozen=True)
class BargeIn(Event):
    """The user interrupted (`t`: when the reply paused), saying `text`."""

    kind: ClassVar[str] = "barge_in"
    text: str


@dataclass(frozen=True)
class Backchannel(Event):
    """The pausing sound was "mm-hmm": the reply resumed."""

    kind: ClassVar[str] = "backchannel"
    text: str


@dataclass(frozen=True)
class FalseInterruption(Event):
    """The pausing sound had no words: the reply resumed."""

    kind: ClassVar[str] = "false_interruption"
    text: str


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
    Transcript
    | Speculative
    | TurnScore
    | StateChanged
    | SpeechStart
    | SpeechEnd
    | UtteranceDiscarded
    | TurnRetracted
    | ReplyStarted
    | ReplyCancelled
    | ReplyDone
    | ReplyFailed
    | TtsChunk
    | AudioStart
    | PlaybackPaused
    | BargeIn
    | Backchannel
    | FalseInterruption
    | PlaybackStopped
    | ToolCalled
    | Turn
)
