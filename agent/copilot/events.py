"""The copilot engine's events (`CopilotEngine(on_event=...)`), typed as the turn engine's are
(agent.events, whose `Transcript`, `Speculative` and `TurnScore` it emits too, and whose
`event_json` gives their JSON). `NotAQuestion` and `QuestionTranscript` are its endpointer's
notices (state_machine.question_endpointing), reported as they are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from agent.events import Event, Speculative, Transcript, TurnScore
from state_machine.question_endpointing import NotAQuestion, QuestionTranscript


@dataclass(frozen=True)
class UtteranceStart(Event):
    """The interviewer started speaking at `onset`."""

    kind: ClassVar[str] = "speech_start"
    utterance_id: int
    onset: float


@dataclass(frozen=True)
class UtteranceEnd(Event):
    """The endpoint of an utterance: its last voiced frame was at `last_voiced`."""

    kind: ClassVar[str] = "speech_end"
    utterance_id: int
    last_voiced: float


@dataclass(frozen=True)
class CandidateRequested(Event):
    kind: ClassVar[str] = "candidate_requested"
    utterance_id: int


@dataclass(frozen=True)
class Prefill(Event):
    """The question so far was read into the LLM's prompt cache (agent.adapters.llm.prefill)."""

    kind: ClassVar[str] = "prefill"
    question: str
    cached: int
    read: int
    ms: float


@dataclass(frozen=True)
class AnswerStarted(Event):
    kind: ClassVar[str] = "answer_started"
    answer_id: int
    speculative: bool


@dataclass(frozen=True)
class AnswerShown(Event):
    """The speculative answer went on the screen before its question's endpoint."""

    kind: ClassVar[str] = "answer_shown"
    answer_id: int


@dataclass(frozen=True)
class AnswerCancelled(Event):
    kind: ClassVar[str] = "answer_cancelled"
    answer_id: int
    reason: str


@dataclass(frozen=True)
class AnswerDone(Event):
    """A confirmed answer ended (`status`: complete | failed), with its latencies
    (`AnswerRecord.latency_ms`)."""

    kind: ClassVar[str] = "answer_done"
    answer_id: int
    status: str
    speech_end: float
    latency_ms: dict[str, float | None]


@dataclass(frozen=True)
class Warm(Event):
    """The LLM's prompt cache holds the system prompt and `pieces` document pieces
    (`documents_fit`: the documents are short enough to be that prefix)."""

    kind: ClassVar[str] = "warm"
    pieces: int
    documents_fit: bool


CopilotEvent = (
    Transcript
    | Speculative
    | TurnScore
    | UtteranceStart
    | UtteranceEnd
    | CandidateRequested
    | QuestionTranscript
    | NotAQuestion
    | Prefill
    | AnswerStarted
    | AnswerShown
    | AnswerCancelled
    | AnswerDone
    | Warm
)
