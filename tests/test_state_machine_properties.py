"""Properties of the conversation state machine under random event sequences (hypothesis).

A driver plays the engine's part loosely: it feeds voiced/unvoiced frames on a monotonic
virtual clock, answers the machine's candidate requests with random text and coverage, and
reports reply audio started / progress / done / failed for random replies, including ones
that were cancelled long ago (a late callback racing a cancel). After every call it checks
the actions against what the machine promised:

- only the allowed state changes (SPEAKING -> THINKING only for a typed message), and
  SPEAKING only on audio of a confirmed, live reply;
- every CancelReply names a started reply, once; after it nothing refers to that reply
  (except the CommitBargeIn that follows it in the same batch, by design);
- each utterance is committed at most once, and its text is exactly what was heard (plus a
  retracted turn or typed words merged in front of it); a typed message is committed at once
  or merged into the utterance being spoken, never lost;
- THINKING never lasts past thinking_timeout_s (from the reply's last progress) without a
  PlayCanned.

At the end the user goes quiet and the engines finish what they were asked (a drain); then
every committed turn must have an outcome: answered (audio or canned phrase), retracted and
merged into a later turn, or still waiting only because its reply never produced audio.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from state_machine import actions as A
from state_machine import events as E
from state_machine.machine import ConversationStateMachine
from state_machine.options import TurnOptions
from state_machine.similarity import spoken_words
from state_machine.states import AgentState

L, T, S = AgentState.LISTENING, AgentState.THINKING, AgentState.SPEAKING
ALLOWED = {(L, T), (T, S), (T, L), (S, L)}
OPTIONS = TurnOptions()
FRAME = OPTIONS.frame_s

TEXTS = [
    "",
    "[coughs]",
    "um",
    "what time is it?",
    "what time is it",
    "tell me about the",
    "tell me about the weather.",
    "in Tokyo?",
    "stop, what is the date?",
]
text_strategy = st.one_of(st.sampled_from(TEXTS), st.text(max_size=30))

Event = tuple
events = st.lists(
    st.one_of(
        st.tuples(st.just("frames"), st.booleans(), st.integers(1, 40)),
        st.tuples(
            st.just("candidate"),
            st.integers(0, 5),
            text_strategy,
            st.sampled_from(["request", "now", "stale"]),
        ),
        st.tuples(
            st.sampled_from(["audio_started", "progress", "done", "failed"]), st.integers(0, 9)
        ),
        st.tuples(st.just("tick"), st.floats(0.0, 12.0)),
        st.tuples(st.just("score"), st.integers(0, 3), st.one_of(st.none(), st.floats(0, 1))),
        st.tuples(st.just("typed"), text_strategy),
    ),
    max_size=60,
)
# The same machine with an end-of-turn model: every candidate is scored (or the detector
# fails), and the endpoint silence follows the score.
SCORED = TurnOptions(endpoint=replace(OPTIONS.endpoint, scored=True))
PAUSING = TurnOptions(duck=False)  # a sound over the agent pauses it at once


class Violation(AssertionError):
    pass


@dataclass
class Driver:
    """Feeds the machine and checks every batch of actions it returns."""

    options: TurnOptions = OPTIONS
    now: float = 0.0
    log: list[tuple[float, str, A.Action]] = field(default_factory=list)
    pending: list[tuple[int, float]] = field(default_factory=list)  # candidate requests
    scores: list[tuple[int, str]] = field(default_factory=list)  # score requests
    started: list[int] = field(default_factory=list)  # StartReply and PlayCanned ids
    confirmed: set[int] = field(default_factory=set)
    cancelled: set[int] = field(default_factory=set)
    done: set[int] = field(default_factory=set)
    audible: set[int] = field(default_factory=set)  # audio started while live
    heard: dict[int, str] = field(default_factory=dict)  # last candidate text per utterance
    committed: dict[int, str] = field(default_factory=dict)  # utterance id -> text
    turn_reply: dict[int, int] = field(default_factory=dict)  # utterance id -> confirmed reply
    prefix: str = ""  # retracted or typed text waiting to be merged
    typing: str = ""  # the typed message being handled
    typed_turns: int = 0
    retracted: list[str] = field(default_factory=list)
    canned_at: list[float] = field(default_factory=list)
    progress: dict[int, float] = field(default_factory=dict)  # reply id -> its last progress
    state: AgentState = L
    state_since: float = 0.0

    def __post_init__(self) -> None:
        self.machine = ConversationStateMachine(self.options)

    # ---- feeding --------------------------------------------------------------------------

    def play(self, event: Event) -> None:
        kind = event[0]
        if kind == "frames":
            _, voiced, n = event
            for _ in range(n):
                self.frame(voiced)
        elif kind == "candidate":
            _, i, text, coverage = event
            if self.pending:
                uid, requested = self.pending.pop(i % len(self.pending))
                covered = {"request": requested, "now": self.now, "stale": requested - 0.5}
                self.candidate(uid, text, covered[coverage])
        elif kind == "tick":
            self.now += event[1]
            self.check("tick", self.machine.tick(self.now))
        elif kind == "typed":
            self.typed(event[1])
        elif kind == "score":
            if self.scores:
                uid, text = self.scores.pop(event[1] % len(self.scores))
                self.check("score", self.machine.on_turn_score(uid, text, event[2], self.now))
        elif self.started:
            rid = self.started[event[1] % len(self.started)]
            self.reply_event(kind, rid)

    def frame(self, voiced: bool) -> None:
        self.now = round(self.now + FRAME, 6)
        self.check("frame", self.machine.on_frame(voiced, self.now))

    def candidate(self, uid: int, text: str, covered_until: float) -> None:
        batch = self.machine.on_candidate(uid, text, covered_until, self.now)
        if batch:  # accepted: this is the latest transcript of the utterance
            self.heard[uid] = text
            utt = self.machine._utt
            if utt is not None and utt.id == uid and utt.candidate is not None:
                # As the machine took it: a sound over the agent's voice with more words than
                # it could hold is heard as none (the agent's own words, echoed).
                self.heard[uid] = utt.candidate.text
        self.check("candidate", batch)

    def typed(self, text: str) -> None:
        self.typing = " ".join(text.split())
        batch = self.machine.on_text(text, self.now)
        self.check("typed", batch)
        if self.typing:  # not committed at once: it waits for the utterance being spoken
            self.prefix = f"{self.prefix} {self.typing}".strip()
            self.typing = ""

    def reply_event(self, kind: str, rid: int) -> None:
        m = self.machine
        if kind == "audio_started":
            batch = m.on_reply_audio_started(rid, self.now)
            if rid in self.confirmed and rid not in self.cancelled | self.done:
                self.audible.add(rid)
            self.check(f"audio_started:{rid}", batch)
        elif kind == "progress":
            m.on_reply_progress(rid, self.now)
            self.progress[rid] = self.now
        elif kind == "done":
            batch = m.on_reply_done(rid, self.now)
            if any(isinstance(a, E.ReplyDone) for a in batch):
                self.done.add(rid)
            self.check(f"done:{rid}", batch)
        else:
            self.check(f"failed:{rid}", m.on_reply_failed(rid, self.now, "provider down"))

    def drain(self) -> None:
        """The user goes quiet; the engines answer every request and play every confirmed
        reply to its end. Bounded: a healthy machine settles in a few rounds."""
        for _ in range(50):
            for _ in range(40):
                self.frame(False)
            while self.pending or self.scores:
                if self.pending:
                    uid, requested = self.pending.pop(0)
                    self.candidate(uid, self.heard.get(uid, ""), requested)
                if self.scores:
                    uid, text = self.scores.pop(0)
                    self.check("score", self.machine.on_turn_score(uid, text, 0.5, self.now))
            live = [
                r
                for r in self.started
                if r in self.confirmed and r not in self.cancelled | self.done
            ]
            for rid in live:
                self.reply_event("audio_started", rid)
                self.reply_event("done", rid)
            if not live and not self.pending and self.machine.state is L:
                # Settled only if more quiet changes nothing: an open utterance may still end
                # (up to silence_unfinished_s after its speech) and confirm its reply.
                before = len(self.log)
                for _ in range(40):
                    self.frame(False)
                if len(self.log) == before:
                    return

    # ---- checking -------------------------------------------------------------------------

    def check(self, cause: str, batch: list[A.Action]) -> None:
        cancelled_here: set[int] = set()
        for a in batch:
            self.log.append((self.now, cause, a))
            self._check_refs(a, cancelled_here, cause)
            match a:
                case A.SetState(state=new):
                    self._transition(new, cause)
                case A.RequestCandidate(utterance_id=uid):
                    self.pending.append((uid, self.now))
                case A.ScoreTurn(utterance_id=uid, text=text):
                    if not self.options.endpoint.scored:
                        raise Violation("ScoreTurn without an end-of-turn model")
                    self.scores.append((uid, text))
                case A.StartReply(reply_id=rid):
                    self.started.append(rid)
                case A.PlayCanned(reply_id=rid):
                    self.started.append(rid)
                    self.confirmed.add(rid)
                    self.canned_at.append(self.now)
                case A.ConfirmReply(reply_id=rid):
                    self.confirmed.add(rid)
                case A.CancelReply(reply_id=rid):
                    if rid not in self.started:
                        raise Violation(f"CancelReply({rid}) of a reply never started")
                    if rid in self.cancelled:
                        raise Violation(f"CancelReply({rid}) twice")
                    if rid in self.done:
                        raise Violation(f"CancelReply({rid}) after it was done")
                    self.cancelled.add(rid)
                    cancelled_here.add(rid)
                case A.CommitUserTurn(text=text, utterance_id=uid):
                    self._commit(uid, text, batch)
                case A.RetractUserTurn(text=text):
                    self.prefix = text
                    self.retracted.append(text)
        self._check_thinking_timeout()
        if self.machine.state is not self.state:
            raise Violation(f"state {self.machine.state} without a SetState (have {self.state})")

    def _check_refs(self, a: A.Action, cancelled_here: set[int], cause: str) -> None:
        rid = getattr(a, "reply_id", None)
        if isinstance(a, A.CommitBargeIn):
            if rid not in cancelled_here:
                raise Violation(f"CommitBargeIn({rid}) not right after its CancelReply")
            return
        if isinstance(a, A.CancelReply) or rid is None:
            return
        if rid in self.cancelled:
            raise Violation(f"{a} refers to reply {rid}, cancelled before ({cause})")
        if isinstance(a, (A.StartReply, A.PlayCanned)) and rid in self.started:
            raise Violation(f"{a} reuses reply id {rid}")

    def _transition(self, new: AgentState, cause: str) -> None:
        typed_over_speech = cause == "typed" and (self.state, new) == (S, T)
        if (self.state, new) not in ALLOWED and not typed_over_speech:
            raise Violation(f"illegal transition {self.state} -> {new} ({cause})")
        if new is S:
            if not cause.startswith("audio_started:"):
                raise Violation(f"SPEAKING without reply audio ({cause})")
            rid = int(cause.split(":")[1])
            if rid not in self.confirmed or rid in self.cancelled | self.done:
                raise Violation(f"SPEAKING on audio of reply {rid}, not confirmed and live")
        self.state, self.state_since = new, self.now

    def _commit(self, uid: int | None, text: str, batch: list[A.Action]) -> None:
        if uid is None:  # typed: committed at once
            if not self.typing:
                raise Violation(f"typed turn {text!r} committed with no message typed")
            self.typed_turns += 1
            uid, said, self.typing = -self.typed_turns, self.typing, ""
        else:
            said = spoken_words(self.heard.get(uid, ""))
        if uid in self.committed:
            raise Violation(f"utterance {uid} committed twice")
        expected = f"{self.prefix} {said}".strip()
        if text != expected:
            raise Violation(f"committed {text!r}, the user said {expected!r}")
        self.committed[uid] = text
        self.prefix = ""
        confirms = [a.reply_id for a in batch if isinstance(a, A.ConfirmReply)]
        if len(confirms) != 1:
            raise Violation(f"commit of {uid} confirmed {confirms}")
        self.turn_reply[uid] = confirms[0]

    def _check_thinking_timeout(self) -> None:
        if self.state is not T:
            return
        # The hard timeout counts from the reply's last progress (a tool call started or ended).
        live = [r for r in self.started if r not in self.cancelled | self.done]
        since = max(self.state_since, self.progress.get(live[-1], 0.0) if live else 0.0)
        if self.now - since > self.options.thinking_timeout_s + 1e-6 and not any(
            t >= self.state_since for t in self.canned_at
        ):
            raise Violation(
                f"THINKING since {self.state_since:.2f} s, now {self.now:.2f} s, no PlayCanned"
            )

    def check_every_turn_ends(self) -> None:
        """After the drain: every committed turn was answered (its reply was heard or ended,
        or the canned phrase replaced it) or retracted to be merged into the next one."""
        for uid, rid in self.turn_reply.items():
            confirmed_at = next(
                t for t, _, a in self.log if isinstance(a, A.ConfirmReply) and a.reply_id == rid
            )
            answered = (
                rid in self.audible
                or rid in self.done
                or any(t >= confirmed_at for t in self.canned_at)
            )
            if not (answered or self.committed[uid] in self.retracted):
                raise Violation(f"turn {self.committed[uid]!r} (reply {rid}) was never answered")

    def check_no_retracted_turn_waits(self) -> None:
        if self.prefix:
            raise Violation(f"retracted turn {self.prefix!r} was never answered nor merged")


FAST = settings(max_examples=400, deadline=None)


@FAST
@given(events, st.sampled_from([OPTIONS, SCORED, PAUSING]))
def test_random_sequences_keep_every_promise(seq: list[Event], options: TurnOptions) -> None:
    d = Driver(options)
    for event in seq:
        d.play(event)


@FAST
@given(events, st.sampled_from([OPTIONS, SCORED, PAUSING]))
def test_after_the_user_goes_quiet_every_turn_is_answered_or_merged(
    seq: list[Event], options: TurnOptions
) -> None:
    d = Driver(options)
    for event in seq:
        d.play(event)
    d.drain()
    d.check_every_turn_ends()


@FAST
@given(events)
def test_typed_messages_among_random_sequences_are_never_lost(seq: list[Event]) -> None:
    d = Driver()
    for event in [*seq, ("typed", "what time is it?")]:
        d.play(event)
    d.drain()
    d.check_every_turn_ends()
    d.check_no_retracted_turn_waits()


def test_a_retracted_turn_is_answered_even_if_the_interruption_had_no_words() -> None:
    d = Driver()
    d.play(("frames", True, 20))  # "what time is it?" (0.00-0.40 s)
    d.play(("frames", False, 4))  # candidate requested at 0.46 s
    d.candidate(1, "what time is it?", d.pending.pop()[1])  # cued: THINKING 300 ms after speech
    d.play(("frames", False, 20))
    assert d.machine.state is T
    d.play(("frames", True, 10))  # a cough while the agent thinks: RetractUserTurn
    assert d.retracted == ["what time is it?"]
    d.drain()  # the cough transcribes to "": discarded; the user waits in silence
    d.check_every_turn_ends()
    d.check_no_retracted_turn_waits()


def test_a_message_typed_while_a_sound_holds_an_answer_that_then_ends_is_answered() -> None:
    # Found by the random sequences: the user's sound paused the answer, the answer ended
    # (its audio was all played), and a message typed then waited for the sound's end, which
    # was judged as a false interruption of an answer no longer there: the message was lost.
    d = Driver()
    d.play(("typed", "[coughs]"))
    d.play(("audio_started", 0))
    d.play(("frames", True, 60))  # a long sound over the answer: ducked, then paused
    assert any(isinstance(a, A.PausePlayback) for _, _, a in d.log)
    d.play(("done", 0))  # the answer ends while paused
    d.play(("typed", "what time is it?"))
    d.drain()  # the sound transcribes to "": the typed message is answered alone
    d.check_every_turn_ends()
    d.check_no_retracted_turn_waits()
    assert [a.text for _, _, a in d.log if isinstance(a, A.CommitUserTurn)][-1] == (
        "what time is it?"
    )
