"""What the state machine asks the engine to do, and the notices of what happened. The engine
executes actions in order; the machine always emits cancellations before the state change they
lead to."""

from __future__ import annotations

from dataclasses import dataclass

from state_machine.states import AgentState


@dataclass(frozen=True)
class SetState:
    state: AgentState


@dataclass(frozen=True)
class OpenUtterance:
    """Start collecting user audio, including `pre_roll_s` before now: the options' pre-roll
    before the speech's onset, and the frames from the onset to the decision."""

    utterance_id: int
    pre_roll_s: float


@dataclass(frozen=True)
class DiscardUtterance:
    utterance_id: int


@dataclass(frozen=True)
class RequestCandidate:
    """Transcribe the utterance collected so far, without ending it. The engine answers with
    `ConversationStateMachine.on_candidate(utterance_id, text, covered_until, now)`."""

    utterance_id: int


@dataclass(frozen=True)
class ScoreTurn:
    """Score how likely the utterance's turn is complete, from `text` (its fresh candidate)
    and its audio so far. The engine answers with `on_turn_score(utterance_id, text, score,
    now)` (score None: the detector failed)."""

    utterance_id: int
    text: str


@dataclass(frozen=True)
class DropCandidate:
    """The speaker went on while a candidate was being transcribed: it can no longer cover the
    utterance, so stop waiting for it (a decode not begun yet is skipped)."""

    utterance_id: int


@dataclass(frozen=True)
class StartReply:
    reply_id: int
    user_text: str
    speculative: bool


@dataclass(frozen=True)
class ConfirmReply:
    """The reply answers the committed user turn: its audio may now be heard."""

    reply_id: int


@dataclass(frozen=True)
class CancelReply:
    reply_id: int
    reason: str


@dataclass(frozen=True)
class CommitUserTurn:
    """The user's turn is `text`: spoken in utterance `utterance_id`, or typed (None)."""

    text: str
    utterance_id: int | None


@dataclass(frozen=True)
class RetractUserTurn:
    """The user went on talking before the agent said anything: the committed turn is merged
    into the next one instead of being answered separately."""

    text: str


@dataclass(frozen=True)
class PausePlayback:
    pass


@dataclass(frozen=True)
class DuckPlayback:
    """Lower the reply's volume at once, going on playing: the user made a sound that may be a
    backchannel. `ResumePlayback` restores it; `PausePlayback` stops it."""


@dataclass(frozen=True)
class ResumePlayback:
    """Play on at full volume (after a pause or a duck)."""


@dataclass(frozen=True)
class CommitBargeIn:
    """The user interrupted for real: cut the assistant message to what was heard."""

    reply_id: int


@dataclass(frozen=True)
class PlayFiller:
    pass


@dataclass(frozen=True)
class PlayCanned:
    reply_id: int
    text: str


# ---- notices: what happened, for the engine to report (its events, logs and metrics); they
# ask the engine to do nothing.


@dataclass(frozen=True)
class SpeechStart:
    """The user started speaking at `onset` (the first frame of the voiced run)."""

    utterance_id: int
    onset: float


@dataclass(frozen=True)
class SpeechEnd:
    """The endpoint: the utterance's speech ended with its last voiced frame."""

    utterance_id: int
    last_voiced: float


@dataclass(frozen=True)
class Transcript:
    """What the user said: a candidate (`final` False) or the committed turn's text."""

    text: str
    final: bool


@dataclass(frozen=True)
class UtteranceDiscarded:
    """The utterance ended with no words: a false start."""

    utterance_id: int


@dataclass(frozen=True)
class Speculative:
    """The final transcript decided the speculative reply's fate."""

    kept: bool
    similarity: float


@dataclass(frozen=True)
class ReplyDone:
    reply_id: int


@dataclass(frozen=True)
class ReplyFailed:
    reply_id: int
    reason: str


@dataclass(frozen=True)
class PlaybackPaused:
    """A sound of the user's, starting at `onset`, paused the reply."""

    onset: float


@dataclass(frozen=True)
class PlaybackDucked:
    """A sound of the user's, starting at `onset`, ducked the reply."""

    onset: float


@dataclass(frozen=True)
class BargeIn:
    """The pause became an interruption: its words (`text`) cut the reply."""

    paused_at: float
    onset: float
    text: str


@dataclass(frozen=True)
class Backchannel:
    """The pausing sound was "mm-hmm" (`text`): the reply resumed."""

    text: str


@dataclass(frozen=True)
class FalseInterruption:
    """The pausing sound had no words (or none came in time): the reply resumed."""

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


Action = (
    SetState
    | OpenUtterance
    | DiscardUtterance
    | RequestCandidate
    | ScoreTurn
    | DropCandidate
    | StartReply
    | ConfirmReply
    | CancelReply
    | CommitUserTurn
    | RetractUserTurn
    | PausePlayback
    | DuckPlayback
    | ResumePlayback
    | CommitBargeIn
    | PlayFiller
    | PlayCanned
    | Notice
)
