"""The agent yields to the user: a sound of the user's while it speaks ducks the reply (plays on,
quieter) or pauses it while the sound is judged. Words that interrupt commit the barge-in: the
reply is cut to what was heard, or withdrawn when the words go on with the user's own turn;
a backchannel, or no words within `false_interruption_s`, play on at full volume. A sound begun
just after the user's turn, before they can have heard the answer, is the user going on: it
pauses the answer at once, and no words (or only fillers) keep it paused for the rest
(`_holds_floor`).

Part of the conversation state machine (`ConversationStateMachine` in state_machine.machine
derives from `BargeInHandling`), pure and clock-injected like it: every call carries `now`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum

from state_machine import events as E
from state_machine.actions import (
    Action,
    CommitBargeIn,
    DiscardUtterance,
    DuckPlayback,
    OpenUtterance,
    PausePlayback,
    RequestCandidate,
    ResumePlayback,
    RetractUserTurn,
)
from state_machine.backchannel import (
    asks_to_stop,
    interrupts,
    is_backchannel,
    other_words,
    reacts,
)
from state_machine.bookkeeping import Reply, TurnCounters
from state_machine.endpointing import EPS, SpeechVote, Utterance
from state_machine.options import TurnOptions
from state_machine.similarity import agreed_words, hesitates_only, normalize_words, spoken_words
from state_machine.states import AgentState


class SoFar(Enum):
    """What the words of a sound that goes on say of it (`read_so_far`)."""

    WAIT = "wait"  # nothing said to the agent yet: the sound is heard out
    PAUSE = "pause"  # they read as an interruption: the ducked answer pauses
    END = "end"  # clearly said to the agent: the barge-in is committed at once


def words_heard(text: str, heard_s: float, o: TurnOptions) -> str:
    """`text`, the transcript of the first `heard_s` of a sound, or "" when it holds more
    words than the sound could (`max_words_per_s`: the STT's invention on a short hum)."""
    too_many = len(normalize_words(spoken_words(text))) > 1 + o.max_words_per_s * heard_s
    return "" if too_many else text


def read_so_far(text: str, heard_s: float, o: TurnOptions) -> SoFar:
    """What a decode of the first `heard_s` of a sound still going on (`text`, through
    `words_heard`) says: words that interrupt pause the answer; `barge_in_words` of them
    end it, but only when read from `words_read_after_s` of the sound or with a stop cue."""
    if not interrupts(text):
        return SoFar.WAIT
    sure = heard_s + EPS >= o.words_read_after_s or asks_to_stop(text)
    return SoFar.END if sure and other_words(text) >= o.barge_in_words else SoFar.PAUSE


def read_going_on(text: str, heard_s: float, read_before: str, o: TurnOptions) -> SoFar:
    """`read_so_far` of a read of a sound still going on, given the read of it before
    (`read_before`): without a stop cue, words end the answer only where the two reads agree
    on them. One read of a sound half said is a guess, and ending the answer cannot be taken
    back: through Opus, Whisper tiny.en read espeak-ng's "that makes sense" as "I'll leave
    you soon." and "Let's make sense." while it went on. A read that would end the answer
    alone pauses it (the whole sound decides if no read agrees); a real interruption ends at
    the next read, which holds the same words and more."""
    so_far = read_so_far(text, heard_s, o)
    if so_far is not SoFar.END or asks_to_stop(text):
        return so_far
    agreed = read_so_far(agreed_words(read_before, text), heard_s, o)
    return SoFar.END if agreed is SoFar.END else SoFar.PAUSE


class BargeInHandling(ABC):
    """The machine's handling of a sound of the user's over its reply. The state it shares with
    the rest of the machine is declared here and set by `ConversationStateMachine`."""

    options: TurnOptions
    state: AgentState
    counters: TurnCounters
    _vote: SpeechVote
    _utt: Utterance | None
    _next_id: int
    _reply: Reply | None
    _pending_prefix: str  # a retracted turn waiting to be merged into the next
    _turn_end: float | None  # the last voiced frame of the last spoken turn
    _paused_at: float | None  # barge-in pending since, playback paused
    _ducked_at: float | None  # barge-in pending since, playback ducked
    _overlap_id: int | None  # the utterance that began over the agent's reply
    _asked_at: float  # when the pausing sound was last transcribed while it went on
    _read_before: str  # the last read of that sound while it went on (`read_going_on`)
    _overlap_from: float  # where the sound over the reply is heard from (`_onset_heard_from`)
    _let_pass: tuple[float, float] | None  # the span of the last sound over it that played on

    @abstractmethod
    def _cancel_reply(self, reason: str, out: list[Action]) -> None: ...

    @abstractmethod
    def _set_state(self, state: AgentState, now: float, out: list[Action]) -> None: ...

    def _yielding(self) -> bool:
        """A sound of the user's has made the agent duck or pause; it is being judged."""
        return self._paused_at is not None or self._ducked_at is not None

    def _speaking_frame(self, onset: bool, vote: bool, now: float, out: list[Action]) -> None:
        o = self.options
        utt = self._utt
        if not self._yielding():
            if onset:
                self._asked_at, self._read_before = -1e9, ""
                onset_at = self._vote.run_start
                self._overlap_from = self._onset_heard_from(onset_at)
                if o.duck and not self._holds_floor():
                    self._ducked_at = now
                    self.counters.ducks += 1
                    out += [DuckPlayback(), E.PlaybackDucked(now, onset_at)]
                else:
                    self._pause(now, out)
                self._next_id += 1
                self._overlap_id = self._next_id
                self._utt = Utterance(self._next_id, onset=onset_at, last_voiced=now)
                out.append(OpenUtterance(self._next_id, o.pre_roll_s + now - self._overlap_from))
            return
        if utt is None:
            return
        if self._vote.run >= 2:
            utt.voice(now, o.frame_s)
        if self._ducked_at is not None and utt.last_voiced - utt.onset + EPS >= o.duck_max_s:
            self._pause(now, out)  # longer than any backchannel
        recheck = o.duck_recheck_s if self._ducked_at is not None else o.barge_in_recheck_s
        if vote and not utt.candidate_in_flight and now - self._asked_at + EPS >= recheck:
            # Words while the user still talks: a real interruption is committed before it
            # ends; anything else is heard out and transcribed whole once the sound stops.
            self._asked_at = now
            utt.candidate_in_flight = True
            out.append(RequestCandidate(utt.id))

    def _onset_heard_from(self, onset: float) -> float:
        """Where a sound over the reply from `onset` is heard from: the start of the sound
        before it that played on, when it began within `overlap_rejoin_s` of that one's end
        ("Right, | and what about ...": decoded alone, "and what" is no interruption yet), else
        `onset`. Only the one sound before: "mm hmm ... mm hmm" does not pile up."""
        let_pass, self._let_pass = self._let_pass, None
        if let_pass is not None and onset - let_pass[1] <= self.options.overlap_rejoin_s + EPS:
            return let_pass[0]
        return onset

    def _pause(self, now: float, out: list[Action]) -> None:
        """Stop the reply's audio for the user's sound, keeping it to resume."""
        self._paused_at, self._ducked_at = now, None
        out += [PausePlayback(), E.PlaybackPaused(now, self._overlap_from)]

    def _paused_tick(self, now: float, out: list[Action]) -> None:
        """Playback is paused or ducked for a sound of the user's: once it stops, it is
        transcribed whole (`_barge_in_candidate` decides). Quiet with no words for
        `false_interruption_s` plays on, and so does a transcript that has not come within
        `speaking_stall_s`."""
        utt = self._utt
        since = self._paused_at if self._paused_at is not None else self._ducked_at
        assert since is not None
        if utt is None:
            return
        e = self.options.endpoint
        silence = utt.silence(now, e.late_input_s)
        quiet = silence >= e.candidate_silence_s
        if quiet and not utt.candidate_in_flight and not utt.fresh():
            utt.candidate_in_flight = True
            out.append(RequestCandidate(utt.id))
        over = silence >= self._judged_after()
        if over and self._ducked_at is not None and utt.fresh():
            self._barge_in_candidate(utt, now, out)  # transcribed while it might go on
            return
        waited = now - since + EPS
        # The user holding the floor may go on after a thinking pause, as at a turn's end.
        heard_out = not self._holds_floor() or silence + EPS >= e.silence_unfinished_s
        if over and (
            (
                waited >= self.options.false_interruption_s
                and not utt.candidate_in_flight
                and heard_out
            )
            or waited >= self.options.speaking_stall_s  # its transcript never came
        ):
            self._resume_after_false_interruption(now, out, backchannel=False)

    def _judged_after(self) -> float:
        """The quiet after which the user's sound is over and judged whole."""
        if self._ducked_at is not None:
            return self.options.duck_quiet_s
        return self.options.endpoint.candidate_silence_s

    def _barge_in_candidate(self, utt: Utterance, now: float, out: list[Action]) -> None:
        assert utt.candidate is not None
        o = self.options
        heard_s = max(0.0, utt.candidate.covered_until - self._overlap_from)
        text = utt.candidate.text = words_heard(utt.candidate.text, heard_s, o)
        words = bool(spoken_words(text))
        if not utt.fresh():
            so_far = read_going_on(text, heard_s, self._read_before, o)
            self._read_before = text
            if so_far is SoFar.END:
                self._commit_barge_in(utt, now, out)  # clearly talking to the agent
                return
            if so_far is SoFar.PAUSE and self._ducked_at is not None:
                self._pause(now, out)  # it reads as an interruption: stop
            utt.candidate = None  # the sound goes on: transcribed whole when it stops
        elif (
            interrupts(text)
            or (words and not o.backchannel_resume)
            or (words and not is_backchannel(text) and self._goes_on(text))
        ):
            # Short words that are no backchannel, said just after the user's own turn, go on
            # with it ("..., uh ... something funny"): the answer began inside their pause.
            self._commit_barge_in(utt, now, out)
        elif (
            self._ducked_at is not None
            and utt.silence(now, o.endpoint.late_input_s) < self._judged_after()
        ):
            pass  # the sound may go on after a comma's pause: judged once it has not
        elif self._holds_floor() and hesitates_only(text):
            pass  # "..., um": the rest may follow a thinking pause (`_paused_tick` lets go)
        elif o.backchannel_resume:
            # All of the sound was heard, and it was "mm-hmm" or no words (a cough): go on.
            self._resume_after_false_interruption(now, out, backchannel=words)

    def _commit_barge_in(self, utt: Utterance, now: float, out: list[Action]) -> None:
        if self._paused_at is None:  # straight from a duck: every stop goes through a pause
            self._pause(now, out)
        paused_at = self._paused_at
        assert paused_at is not None
        self._overlap_id = None  # an interruption: its turn is answered, whatever it says
        self.counters.barge_ins += 1
        text = utt.candidate.text if utt.candidate is not None else ""
        if self._goes_on(text):
            self._withdraw_answer(out)
        else:
            self._stop_reply("barge-in", out)
        out.append(E.BargeIn(paused_at, text, self._overlap_from))
        if not utt.fresh():
            utt.candidate = None  # the interruption goes on; its turn is transcribed at its end
        self._set_state(AgentState.LISTENING, now, out)

    def _goes_on(self, text: str) -> bool:
        """The words that stop the answer go on with the turn it answers: they began just
        after it (`_after_own_turn`) and do not react to the answer ("Wait, ...", "Okay, and
        ..."), which they cannot do before the user has heard some of it (`_could_react`)."""
        return self._after_own_turn() and not (self._could_react() and reacts(text))

    def _holds_floor(self) -> bool:
        """The user's sound began just after their turn and before they can have heard the
        answer: they are going on with the turn, not answering the agent ("..., um | maybe
        with fish?" with the answer begun in the comma's pause). The answer pauses at once
        instead of ducking; words are judged as always (those that go on withdraw it, a
        backchannel plays it on), and no words or only fillers keep it paused for the rest, a
        turn's `silence_unfinished_s` of quiet, before it plays on (at the latest after
        `speaking_stall_s`, whatever noise goes on)."""
        return self._after_own_turn() and not self._could_react()

    def _after_own_turn(self) -> bool:
        """The sound over the answer began within `continuation_s` of the end of the turn it
        answers: inside a thinking pause the agent took for the end."""
        r = self._reply
        return (
            r is not None
            and bool(r.user_text)
            and self._turn_end is not None
            and self._overlap_from - self._turn_end <= self.options.continuation_s + EPS
        )

    def _could_react(self) -> bool:
        """The sound began at least `reaction_s` after the answer's first audio: time for the
        user to have heard it and answer it."""
        r = self._reply
        return (
            r is not None
            and r.audio_started_at is not None
            and self._overlap_from - r.audio_started_at + EPS >= self.options.reaction_s
        )

    def _withdraw_answer(self, out: list[Action]) -> None:
        """The answer began inside the user's pause: it is withdrawn, not cut to what was
        heard, and its turn waits to be merged with the words that go on, as when the user goes
        on before the answer (`_retract_turn`); the LLM is asked the whole question."""
        r = self._reply
        assert r is not None
        self._paused_at = self._ducked_at = None
        self.counters.continued += 1
        self._pending_prefix = r.user_text
        out.append(RetractUserTurn(r.user_text))  # first: the cancel then records no turn
        self._cancel_reply("user went on after a pause", out)

    def _stop_reply(self, reason: str, out: list[Action]) -> None:
        """The user interrupted the reply being spoken: it is cancelled through every layer and
        the history keeps what was heard of it."""
        self._paused_at = self._ducked_at = None
        r = self._reply
        if r is not None:
            self._cancel_reply(reason, out)
            out.append(CommitBargeIn(r.id))

    def _resume_after_false_interruption(
        self, now: float, out: list[Action], *, backchannel: bool
    ) -> None:
        """Play on at full volume: the sound was "mm-hmm" (`backchannel`) or no words."""
        self._paused_at = self._ducked_at = None
        if backchannel:
            self.counters.backchannels += 1
        else:
            self.counters.false_interruptions += 1
        text = ""
        if self._utt is not None:
            text = self._utt.candidate.text if self._utt.candidate is not None else ""
            self._let_pass = (self._utt.onset, self._utt.last_voiced)
            out.append(DiscardUtterance(self._utt.id))
            self._utt = None
        if self._reply is not None:
            self._reply.last_progress = now
        out.append(ResumePlayback())
        out.append(E.Backchannel(now, text) if backchannel else E.FalseInterruption(now, text))
