"""The conversation state machine: LISTENING -> THINKING -> SPEAKING -> LISTENING.

Pure code. It is fed the VAD decision for every 20 ms frame, the transcripts the engine
produced for it, and the reply's playback milestones, each with the time `now` (seconds on a
monotonic clock the caller owns). It answers with a list of actions (`state_machine.actions`)
for the engine to execute, cancellations always before the state change they cause.

Turn-taking, in short:
- Speech starts when the share of voiced frames in a sliding window passes a vote threshold.
- A short trailing silence asks for a candidate transcript; a stable candidate (more silence or
  end punctuation) starts the reply speculatively; the endpoint (longer silence, shorter when
  the text looks complete) commits the user turn, keeping the speculative reply when its input
  is nearly the final text. A speculative reply is never heard before the endpoint.
- While the agent speaks, a few consecutive voiced frames make it yield at once: it ducks
  (plays on, quieter) while the sound is judged, so a backchannel never silences it; it pauses
  as soon as what is heard of the sound reads as an interruption, or the sound outlasts any
  backchannel. Words that interrupt commit the barge-in (reply cancelled, history cut to what
  was heard); a backchannel or no words within `false_interruption_s` play on at full volume
  (a paused reply from where it paused). Words that come within `continuation_s` of the end
  of the user's turn, and do not react to the answer, are the user going on after a pause:
  the answer is withdrawn and the two are one turn (state_machine.barge_in).
- A typed message (`on_text`) is a user turn like a spoken one: it cuts the agent's answer as a
  committed barge-in does, and is answered at once, or with the words the user is saying.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from state_machine import events as E
from state_machine.actions import (
    Action,
    CancelReply,
    CommitUserTurn,
    ConfirmReply,
    DiscardUtterance,
    OpenUtterance,
    PausePlayback,
    PlayCanned,
    PlayFiller,
    RequestCandidate,
    ResumePlayback,
    RetractUserTurn,
    ScoreTurn,
    SetState,
    StartReply,
)
from state_machine.backchannel import is_backchannel
from state_machine.barge_in import BargeInHandling
from state_machine.bookkeeping import Reply, TurnCounters
from state_machine.endpointing import (
    EPS,
    Candidate,
    SpeechVote,
    Utterance,
    candidate_due,
    endpoint_due,
    score_due,
    speculation_due,
)
from state_machine.options import TurnOptions
from state_machine.similarity import (
    answers_the_same,
    looks_complete,
    spoken_words,
    text_similarity,
)
from state_machine.states import AgentState

CANNED_APOLOGY = "Sorry, I can't answer that right now."


@dataclass
class ConversationStateMachine(BargeInHandling):
    options: TurnOptions = field(default_factory=TurnOptions)

    def __post_init__(self) -> None:
        o = self.options
        self.state = AgentState.LISTENING
        self.state_since = 0.0
        self.counters = TurnCounters()
        self._vote = SpeechVote(o.frames(o.vad_window_s), o.vad_start_ratio, o.frame_s)
        # The state shared with the barge-in handling (declared in BargeInHandling).
        self._utt = None
        self._next_id = 0
        self._reply = None
        self._pending_prefix = ""
        self._turn_end = None
        self._paused_at = self._ducked_at = None
        self._overlap_id = None
        self._asked_at = -1e9
        self._read_before = ""
        self._overlap_from = 0.0
        self._let_pass = None
        self._filler_played = False
        self._gave_up = False  # THINKING ran out of time and fell back to the canned phrase
        self._held = False  # the answer's first audio is held: the user made a sound
        self._held_voiced = 0  # voiced frames of that sound
        self._unheard: tuple[float, float] | None = None  # speech heard as no words: its span

    # ---- inputs -------------------------------------------------------------------------

    def on_frame(self, voiced: bool, now: float) -> list[Action]:
        """One 20 ms frame ending at `now`, and whether the VAD found voice in it."""
        out: list[Action] = []
        vote = self._vote.push(voiced, now)
        onset = voiced and self._vote.run == self.options.barge_in_frames
        if self._utt is not None:
            self._utt.hear(now, self.options.frame_s)

        if self.state is AgentState.SPEAKING:
            self._speaking_frame(onset, vote, now, out)
        else:
            self._listening_frame(voiced, onset, vote, now, out)
        out += self.tick(now)
        return out

    def on_text(self, text: str, now: float) -> list[Action]:
        """A message the user typed: a user turn like a spoken one.

        The agent speaking (or paused for a sound of the user's) is interrupted as by a
        committed barge-in: its reply is cancelled and the history keeps what was heard. While
        it is THINKING, the turn being answered is retracted and merged into this one, as when
        the user speaks on before the answer (never answer twice); a speculative reply is
        cancelled. The text is then committed and answered at once (a confirmed reply).

        Unless the user is speaking at that moment (an utterance is open): then the typed words
        wait as the beginning of that utterance's turn and are committed with its words at its
        endpoint. Neither is lost, the agent does not talk over the user, and the two are
        answered once, together; an utterance without words (a cough) leaves the typed text to
        be answered alone (`_end_user_turn`).
        """
        typed = " ".join(text.split())
        if not typed:
            return []
        self.counters.typed += 1
        out: list[Action] = []
        r = self._reply
        if self.state is AgentState.SPEAKING:
            self._stop_reply("typed message", out)
            utt = self._utt  # the sound that paused the reply, if any, goes on as a turn
            if utt is not None and not utt.fresh():
                utt.candidate = None
        elif self.state is AgentState.THINKING:
            self._retract_turn(now, out)
        elif r is not None and not r.confirmed:
            self.counters.speculative_wasted += 1
            self._cancel_reply("typed message", out)
        self._pending_prefix = f"{self._pending_prefix} {typed}".strip()
        if self._utt is not None:
            self._set_state(AgentState.LISTENING, now, out)
            return out
        user_text, self._pending_prefix = self._pending_prefix, ""
        self._turn_end = None
        self._start_reply(user_text, speculative=False, out=out)
        self._commit_turn(user_text, None, now, out)
        return out

    def on_candidate(
        self,
        utterance_id: int,
        text: str,
        covered_until: float,
        now: float,
        *,
        failed: bool = False,
    ) -> list[Action]:
        """A transcript of utterance `utterance_id` covering its audio up to `covered_until`
        (`failed`: the STT could not transcribe it)."""
        utt = self._utt
        if utt is None or utt.id != utterance_id:
            return []
        utt.candidate_in_flight = False
        utt.take_candidate(
            Candidate(text, covered_until, failed), self.options.endpoint, self.options.frame_s
        )
        out: list[Action] = [E.Transcript(now, text, final=False)]
        if self._yielding():
            self._barge_in_candidate(utt, now, out)
            return out
        return out + self.tick(now)

    def on_partial(self, utterance_id: int, text: str, now: float) -> list[Action]:
        """A partial transcript of utterance `utterance_id`, decoded while the user speaks.

        One that reads complete (end punctuation) starts the reply early, unheard like any
        speculative start, so that its first audio is ready when the endpoint confirms the
        turn; the endpoint keeps it only when the final text is nearly the same and ends as it
        does (`answers_the_same`). With an end-of-turn model, the model's reading of the words
        (`on_partial_read`) may cancel it, or is waited for (`speculate_before_score`).
        A partial that differs from the words a reply was started on by a partial cancels it:
        they are no longer what the user is saying. A reply started on a candidate is judged by
        the candidates alone, and a partial that comes once a candidate covers all the speech
        is older than it and ignored."""
        if not self._hears_partials(utterance_id):
            return []
        out: list[Action] = []
        o = self.options
        r = self._reply
        on_words = not o.endpoint.scored or o.speculate_before_score
        if on_words and looks_complete(text) and spoken_words(text):
            self._speculate(text, out, from_partial=True)
        elif r is not None and r.from_partial:
            self._drop_stale_speculation(self._merged(text), out)
        return out

    def on_partial_read(
        self, utterance_id: int, text: str, score: float, now: float
    ) -> list[Action]:
        """The end-of-turn model's P(complete) for a partial's words `text`. Below
        `complete_score` the words are unfinished, and a reply started on them is cancelled; at
        or above it, they start one if the words alone did not."""
        if not self._hears_partials(utterance_id):
            return []
        out: list[Action] = []
        o = self.options
        r = self._reply
        sure = score >= o.endpoint.complete_score
        if sure and looks_complete(text) and spoken_words(text):
            if not o.speculate_before_score:
                self._speculate(text, out, from_partial=True)
        elif (
            r is not None
            and r.from_partial
            and not r.confirmed
            and answers_the_same(r.user_text, self._merged(text), o.similarity_keep)
        ):
            self.counters.speculative_wasted += 1
            self._cancel_reply("partial read as unfinished", out)
        return out

    def _hears_partials(self, utterance_id: int) -> bool:
        """Partials of `utterance_id` may start or cancel a speculative reply now."""
        utt = self._utt
        o = self.options
        return not (
            utt is None
            or utt.id != utterance_id
            or self.state is not AgentState.LISTENING
            or self._yielding()
            or utt.endpoint_reached
            or utt.fresh()  # a candidate covers all the speech: it is newer than any partial
            or not (o.speculative_start and o.speculate_on_partials)
        )

    def on_turn_score(
        self, utterance_id: int, text: str, score: float | None, now: float
    ) -> list[Action]:
        """The end-of-turn model's P(complete) for utterance `utterance_id` when its candidate
        was `text` (None: the detector failed; the text cue decides)."""
        utt = self._utt
        if utt is None or utt.id != utterance_id:
            return []
        utt.take_score(score)
        return self.tick(now)

    def on_reply_audio_started(self, reply_id: int, now: float) -> list[Action]:
        """The first sample of a confirmed reply reached the output."""
        r = self._reply
        if r is None or r.id != reply_id or not r.confirmed:
            return []
        r.audio_started_at = now
        r.last_progress = now
        out: list[Action] = []
        if self.state is AgentState.THINKING:
            self._set_state(AgentState.SPEAKING, now, out)
        return out

    def on_reply_progress(self, reply_id: int, now: float) -> None:
        if self._reply is not None and self._reply.id == reply_id:
            self._reply.last_progress = now

    def on_reply_done(self, reply_id: int, now: float) -> list[Action]:
        """All of the reply's audio has been played (or it ended with nothing to say)."""
        r = self._reply
        if r is None or r.id != reply_id or not r.confirmed:
            return []
        self._reply = None
        out: list[Action] = [E.ReplyDone(now, reply_id)]
        # The answer ended while ducked or paused under a sound of the user's: nothing is left
        # to yield, so the sound goes on as an utterance of theirs (`_end_user_turn` answers
        # it, and a message typed meanwhile with it; it drops a lone backchannel).
        self._ducked_at = self._paused_at = None
        self._release_hold(out)
        if self.state is not AgentState.LISTENING:
            self._set_state(AgentState.LISTENING, now, out)
        return out

    def on_reply_failed(self, reply_id: int, now: float, reason: str) -> list[Action]:
        """The reply's LLM or TTS failed before any audio: say a short canned phrase instead."""
        r = self._reply
        if r is None or r.id != reply_id:
            return []
        out: list[Action] = [E.ReplyFailed(now, reply_id, reason)]
        if not r.confirmed:
            self._reply = None
            return out
        if r.audio_started_at is not None:
            return out  # it said something; on_reply_done closes the turn
        self._play_canned(now, out)
        return out

    def say_first(self, text: str, now: float) -> list[Action]:
        """The agent speaks first (a profile's greeting): fixed words, heard and interrupted
        like any reply. Nothing when the user is already speaking or being answered."""
        if (
            self.state is not AgentState.LISTENING
            or self._utt is not None
            or self._reply is not None
        ):
            return []
        self._next_id += 1
        self._reply = Reply(self._next_id, "", speculative=False, confirmed=True)
        out: list[Action] = [PlayCanned(self._next_id, text)]
        self._set_state(AgentState.THINKING, now, out)
        return out

    def tick(self, now: float) -> list[Action]:
        """Timeouts; called with every frame and by the engine's timer."""
        o = self.options
        out: list[Action] = []
        utt = self._utt
        if self._yielding():
            self._paused_tick(now, out)
        elif utt is not None and self.state is AgentState.LISTENING:
            self._listening_tick(utt, now, out)
        elif self.state is AgentState.THINKING:
            waited = now - self.state_since + EPS
            # A reply that reports progress (a tool call started or ended) is not stuck: the
            # hard timeout counts from its last progress.
            progress = self._reply.last_progress if self._reply is not None else 0.0
            stuck = now - max(self.state_since, progress) + EPS
            if stuck >= o.thinking_timeout_s and not self._gave_up:
                self._gave_up = True
                self.counters.timeouts += 1
                self._play_canned(now, out)
            elif waited >= o.thinking_filler_s and not self._filler_played:
                self._filler_played = True
                self.counters.fillers += 1
                out.append(PlayFiller())
        elif self.state is AgentState.SPEAKING and self._reply is not None:
            if (
                self._paused_at is None
                and now - self._reply.last_progress + EPS >= o.speaking_stall_s
            ):
                self.counters.timeouts += 1
                self._cancel_reply("stalled", out)
                self._set_state(AgentState.LISTENING, now, out)
        return out

    # ---- listening ----------------------------------------------------------------------

    def _listening_frame(
        self, voiced: bool, onset: bool, vote: bool, now: float, out: list[Action]
    ) -> None:
        utt = self._utt
        if utt is None:
            self._hold_answer(voiced, out)
            if vote or (self._held and self._held_voiced >= self.options.hold_voice_frames):
                opened = self._open_utterance(now, out)
                if self.state is AgentState.THINKING:
                    # The user went on before the agent said a word: merge, never answer twice.
                    self._retract_turn(now, out)
                    opened.goes_on = True
            return
        if not voiced or self._vote.run < 2:
            return  # a lone voiced frame in silence is noise, not speech
        utt.voice(now, self.options.frame_s)
        if onset:
            utt.endpoint_reached = False  # speech again after the endpoint, before the final
            r = self._reply
            if r is not None and r.speculative and not r.confirmed and not r.from_partial:
                self.counters.speculative_wasted += 1
                self._cancel_reply("user resumed speaking", out)

    def _hold_answer(self, voiced: bool, out: list[Action]) -> None:
        """While the agent thinks, a sound of the user's (two voiced frames, as a barge-in)
        holds the answer's first audio until the speech vote, or a voiced syllable's length
        (`hold_voice_frames`), takes it for the user going on (the turn is then retracted) or
        the vote window goes quiet (a click: let go). Without it, an answer ready within the
        vote's 160 ms started over the user's next words."""
        r = self._reply
        if self._held:
            self._held_voiced += voiced
            if not voiced and self._vote.quiet():
                self._release_hold(out)
        elif (
            voiced
            and self._vote.run >= self.options.barge_in_frames
            and self.state is AgentState.THINKING
            and r is not None
            and r.confirmed
            and r.audio_started_at is None
        ):  # a run that began before the turn ended holds too
            self._held, self._held_voiced = True, self._vote.run
            out.append(PausePlayback())

    def _release_hold(self, out: list[Action]) -> None:
        if self._held:
            self._held = False
            out.append(ResumePlayback())

    def _open_utterance(self, now: float, out: list[Action]) -> Utterance:
        self._next_id += 1
        onset = self._vote.run_start
        self._utt = utt = Utterance(self._next_id, onset=onset, last_voiced=now)
        heard_from = onset
        unheard, self._unheard = self._unheard, None
        if unheard is not None and onset - unheard[1] <= self.options.rejoin_s + EPS:
            heard_from = unheard[0]  # decoded again, with these words (`rejoin_s`)
            self.counters.rejoined += 1
        out.append(OpenUtterance(self._next_id, self.options.pre_roll_s + now - heard_from))
        out.append(E.SpeechStart(onset, self._next_id))
        return utt

    def _listening_tick(self, utt: Utterance, now: float, out: list[Action]) -> None:
        o = self.options.endpoint
        if candidate_due(o, utt, now):
            utt.candidate_in_flight = True
            out.append(RequestCandidate(utt.id, turn=True))
        if score_due(o, utt):
            out.append(ScoreTurn(utt.id, utt.start_scoring()))
        cue = utt.candidate is not None and looks_complete(utt.candidate.text)
        if speculation_due(o, utt, now, cue):
            self._maybe_speculate(utt, out)
        if not utt.endpoint_reached and endpoint_due(o, utt, now, cue):
            utt.endpoint_reached = True
            out.append(E.SpeechEnd(utt.last_voiced, utt.id))
            if not utt.fresh() and not utt.candidate_in_flight:
                utt.candidate_in_flight = True
                out.append(RequestCandidate(utt.id, turn=True))
        if utt.endpoint_reached and utt.fresh():
            self._end_user_turn(utt, now, out)

    def _keep_unheard(self, utt: Utterance) -> None:
        """Speech discarded for no words is kept to be decoded again with the next speech, if
        it was long enough to hold words and the STT wrote none (not a backchannel's words
        dropped, nor an STT that failed)."""
        o = self.options
        assert utt.candidate is not None
        spoken = utt.last_voiced - utt.onset
        lost = not spoken_words(utt.candidate.text) and not utt.candidate.failed
        if lost and o.rejoin_voiced_s - EPS <= spoken <= o.rejoin_max_s:
            self._unheard = (utt.onset, utt.last_voiced)

    def _maybe_speculate(self, utt: Utterance, out: list[Action]) -> None:
        cand = utt.candidate
        if not self.options.speculative_start or cand is None:
            return
        if not spoken_words(cand.text) and not utt.goes_on:
            return  # nothing to answer (going on from a turn with no words yet, that turn is)
        self._speculate(cand.text, out, from_partial=False)

    def _speculate(self, transcript: str, out: list[Action], *, from_partial: bool) -> None:
        """Start answering `transcript` unheard, unless the speculative reply running already
        answers nearly the same words."""
        utt = self._utt
        if utt is not None and utt.id == self._overlap_id and is_backchannel(transcript):
            return  # "mm hmm" over the end of the answer: not a turn (`_end_user_turn`)
        text = self._merged(transcript)
        r = self._drop_stale_speculation(text, out)
        if r is not None:
            r.from_partial = r.from_partial and from_partial
        elif self._reply is None:
            self.counters.speculative_started += 1
            self._start_reply(text, speculative=True, out=out, from_partial=from_partial)

    def _drop_stale_speculation(self, text: str, out: list[Action]) -> Reply | None:
        """Cancel the speculative reply unless it was started on words nearly `text`; returns
        it when it is kept."""
        r = self._reply
        if r is None or not r.speculative or r.confirmed:
            return None
        if answers_the_same(r.user_text, text, self.options.similarity_keep):
            return r
        self.counters.speculative_wasted += 1
        self._cancel_reply("transcript changed", out)
        return None

    def _end_user_turn(self, utt: Utterance, now: float, out: list[Action]) -> None:
        assert utt.candidate is not None
        text = spoken_words(utt.candidate.text)
        if utt.id == self._overlap_id and is_backchannel(text):
            text = ""  # "mm hmm" as the answer ended: it acknowledged it, it asks nothing
        self._utt = None
        # No words: a false start, unless it retracted a question (a cough while the agent
        # was thinking), which is then answered as it was.
        if not text and not self._pending_prefix:
            out.append(DiscardUtterance(utt.id))
            self._keep_unheard(utt)
            if self._reply is not None and not self._reply.confirmed:
                self.counters.speculative_wasted += 1
                self._cancel_reply("no words", out)
            out.append(E.UtteranceDiscarded(now, utt.id))
            if utt.candidate.failed:  # the user spoke and was not understood: say so
                self._set_state(AgentState.THINKING, now, out)
                self._play_canned(now, out)
            return
        user_text = self._merged(utt.candidate.text)
        self._pending_prefix = ""
        self._turn_end = utt.last_voiced
        r = self._reply
        kept = False
        if r is not None and r.speculative and not r.confirmed:
            sim = text_similarity(r.user_text, user_text)
            kept = answers_the_same(r.user_text, user_text, self.options.similarity_keep)
            out.append(E.Speculative(now, kept, round(sim, 3)))
            if kept:
                self.counters.speculative_kept += 1
            else:
                self.counters.speculative_wasted += 1
                self._cancel_reply("final differs", out)
        if not kept:
            self._start_reply(user_text, speculative=False, out=out)
        self._commit_turn(user_text, utt.id, now, out)

    def _commit_turn(
        self, user_text: str, utterance_id: int | None, now: float, out: list[Action]
    ) -> None:
        """The user's turn is `user_text` (spoken in `utterance_id`, or typed: None); the
        reply started for it may be heard."""
        assert self._reply is not None
        self._reply.confirmed = True
        # The words it answers from now on are the turn's: a retraction removes this text
        # from the history and merges it into the next turn, not the partial it began on.
        self._reply.user_text = user_text
        self.counters.turns += 1
        out.append(E.Transcript(now, user_text, final=True))
        out.append(CommitUserTurn(user_text, utterance_id))
        out.append(ConfirmReply(self._reply.id))
        self._filler_played = self._gave_up = False
        self._set_state(AgentState.THINKING, now, out)

    def _merged(self, text: str) -> str:
        return f"{self._pending_prefix} {spoken_words(text)}".strip()

    def _retract_turn(self, now: float, out: list[Action]) -> None:
        r = self._reply
        if r is None:
            return
        self._pending_prefix = r.user_text
        # Retracted first: the turn is withdrawn, so cancelling its reply records no turn.
        out.append(RetractUserTurn(r.user_text))
        self._cancel_reply("user continued before the answer", out)
        self._set_state(AgentState.LISTENING, now, out)

    # ---- replies --------------------------------------------------------------------------

    def _start_reply(
        self, user_text: str, *, speculative: bool, out: list[Action], from_partial: bool = False
    ) -> None:
        self._next_id += 1
        self._reply = Reply(self._next_id, user_text, speculative, from_partial=from_partial)
        out.append(StartReply(self._next_id, user_text, speculative))

    def _cancel_reply(self, reason: str, out: list[Action]) -> None:
        if self._reply is not None:
            out.append(CancelReply(self._reply.id, reason))
            self._reply = None
            self._held = False  # a cancel lets go of the output (`Playout.cancel`)

    def _play_canned(self, now: float, out: list[Action]) -> None:
        self._cancel_reply("fallback to canned phrase", out)
        self._next_id += 1
        self._reply = Reply(self._next_id, "", speculative=False, confirmed=True)
        out.append(PlayCanned(self._next_id, CANNED_APOLOGY))

    def _set_state(self, state: AgentState, now: float, out: list[Action]) -> None:
        if state is self.state:
            return
        self.state = state
        self.state_since = now
        out.append(SetState(state))
