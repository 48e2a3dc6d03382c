"""What happened: the events the engines report, one typed event per happening, each with its
`kind` (the "type" of its JSON) and `t`, when it happened (seconds on the caller's clock).

The state machine's notices are such events: it is given `now` with every input, so it dates
them itself, and an engine reports a notice as it is (agent.events adds the engines' own
events to this vocabulary). Pure: `event_json` only builds the dict that the engines' edges
write as JSON (`voxroom simulate --events`, the turn logs, the turn store).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from types import MappingProxyType
from typing import Any, ClassVar

UNREPORTED = MappingProxyType({"reported": False})
"""The metadata of a field for the engine's own use, left out of the event's JSON: its readers
(the logs, the turn store, the bench) know the event by its `t` and reported fields alone."""

CLOCK_TIME = MappingProxyType({"clock_time": True})
"""The metadata of a field that is a time on the caller's clock, as `t` is: `event_json` moves
it to another origin with `t`."""


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str]
    t: float


def event_json(event: Event, origin: float | None = None) -> dict[str, Any]:
    """`{"t": t, "type": kind, ...}` with the event's reported fields in order (a state by its
    name). With `origin`, `t` and the other clock times are seconds since it, to the ms."""
    out: dict[str, Any] = {"t": _since(event.t, origin), "type": event.kind}
    for f in fields(event):
        if f.name == "t" or not f.metadata.get("reported", True):
            continue
        value = getattr(event, f.name)
        if f.metadata.get("clock_time"):
            value = _since(value, origin)
        out[f.name] = value.name if isinstance(value, Enum) else value
    return out


def _since(t: float, origin: float | None) -> float:
    return t if origin is None else round(t - origin, 3)


# ---- the state machine's notices: they ask the engine to do nothing ---------------------------


@dataclass(frozen=True)
class SpeechStart(Event):
    """The user started speaking (`t`: the first frame of the voiced run)."""

    kind: ClassVar[str] = "speech_start"
    utterance_id: int = field(metadata=UNREPORTED)


@dataclass(frozen=True)
class SpeechEnd(Event):
    """The endpoint: the utterance's speech ended (`t`: its last voiced frame)."""

    kind: ClassVar[str] = "speech_end"
    utterance_id: int = field(metadata=UNREPORTED)


@dataclass(frozen=True)
class Transcript(Event):
    """The user's words: a partial or candidate transcript, or (`final`) the committed turn."""

    kind: ClassVar[str] = "transcript"
    text: str
    final: bool


@dataclass(frozen=True)
class UtteranceDiscarded(Event):
    """The utterance ended with no words: a false start."""

    kind: ClassVar[str] = "utterance_discarded"
    utterance_id: int


@dataclass(frozen=True)
class Speculative(Event):
    """The final transcript kept the reply started on a candidate, or wasted it."""

    kind: ClassVar[str] = "speculative"
    kept: bool
    similarity: float


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
class PlaybackPaused(Event):
    """A sound of the user's (from `onset`) paused the reply."""

    kind: ClassVar[str] = "playback_paused"
    onset: float = field(metadata=CLOCK_TIME)


@dataclass(frozen=True)
class PlaybackDucked(Event):
    """A sound of the user's (from `onset`) ducked the reply: it plays on, quieter, while the
    sound is judged."""

    kind: ClassVar[str] = "playback_ducked"
    onset: float = field(metadata=CLOCK_TIME)


@dataclass(frozen=True)
class BargeIn(Event):
    """The pause became an interruption (`t`: when the reply paused): its words (`text`), said
    from `onset`, cut the reply."""

    kind: ClassVar[str] = "barge_in"
    text: str
    onset: float = field(metadata=UNREPORTED)


@dataclass(frozen=True)
class Backchannel(Event):
    """The pausing sound was "mm-hmm" (`text`): the reply resumed."""

    kind: ClassVar[str] = "backchannel"
    text: str


@dataclass(frozen=True)
class FalseInterruption(Event):
    """The pausing sound had no words (or none came in time): the reply resumed."""

    kind: ClassVar[str] = "false_interruption"
    text: str


Notice = (
    SpeechStart
    | SpeechEnd
    | Transcript
    | UtteranceDiscarded
    | Speculative
    | ReplyDone
    | ReplyFailed
    | PlaybackPaused
    | PlaybackDucked
    | BargeIn
    | Backchannel
    | FalseInterruption
)
