"""What the conversation state machine keeps of its replies and turns: the reply in progress
and the counters of what happened (state_machine.machine)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Reply:
    id: int
    user_text: str
    speculative: bool
    confirmed: bool = False
    # Started on a partial transcript while the user spoke: the words that follow are judged
    # by the next transcript (partial or candidate), not cancelled at each voiced onset.
    from_partial: bool = False
    audio_started_at: float | None = None  # when its first audio reached the output
    last_progress: float = 0.0


@dataclass
class TurnCounters:
    turns: int = 0
    speculative_started: int = 0
    speculative_kept: int = 0
    speculative_wasted: int = 0
    barge_ins: int = 0
    ducks: int = 0
    backchannels: int = 0
    false_interruptions: int = 0
    fillers: int = 0
    timeouts: int = 0
    typed: int = 0
    continued: int = 0  # answers withdrawn because the user went on with their turn
    rejoined: int = 0  # speech heard as no words, heard again with the next
