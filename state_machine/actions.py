"""What the state machine asks the engine to do. Its notices of what happened come among its
actions, in order (`Action` includes them): they are events (`state_machine.events`). The engine
executes actions in order; the machine always emits cancellations before the state change they
lead to."""

from __future__ import annotations

from dataclasses import dataclass

from state_machine.events import Notice
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
    turn: bool = False
    """The candidate of a turn that the end-of-turn model will score (`ScoreTurn`): an audio
    model may read the end of the speech now, while the words are decoded."""


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
class ShowReply:
    """Show the speculative reply before its turn is confirmed: the copilot's answer goes on
    the screen while the endpoint is still being waited for. A `CancelReply` before the
    `ConfirmReply` withdraws it."""

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


Action = (
    SetState
    | OpenUtterance
    | DiscardUtterance
    | RequestCandidate
    | ScoreTurn
    | DropCandidate
    | StartReply
    | ConfirmReply
    | ShowReply
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
