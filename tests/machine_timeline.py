"""A discrete-event harness that plays the engines' part around the pure state machine in
virtual time: a scripted VAD timeline, an STT that answers after a fixed delay, replies whose
first audio comes a fixed time after they start (once confirmed), and playback of a fixed
length. Everything is deterministic; times are exact multiples of the frame."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from state_machine import actions as A
from state_machine.machine import ConversationStateMachine
from state_machine.options import TurnOptions

ANSWERED = ["THINKING", "SPEAKING", "LISTENING"]
"""`Timeline.states()` of one turn answered in full: thought about, spoken, listening again."""


@dataclass
class FakeEngines:
    stt_delay_s: float = 0.2
    stt_hangs_after_s: float | None = None  # requests from then on are never answered
    reply_audio_after_s: float = 0.4  # from StartReply to first audio, if confirmed by then
    reply_length_s: float = 2.0
    transcript: Callable[[float, float], str] = lambda start, end: "what time is it?"
    score: Callable[[str], float | None] | None = None  # an end-of-turn model, if any
    score_delay_s: float = 0.06
    hears_pre_roll: bool = False  # a transcript's start is where its pre-roll begins


@dataclass
class Timeline:
    options: TurnOptions = field(default_factory=TurnOptions)
    engines: FakeEngines = field(default_factory=FakeEngines)

    def __post_init__(self) -> None:
        self.machine = ConversationStateMachine(self.options)
        self.log: list[tuple[float, A.Action]] = []
        self._queue: list[tuple[float, int, Callable[[float], list[A.Action]]]] = []
        self._seq = 0
        self._utt_start: dict[int, float] = {}
        self._reply_started: dict[int, float] = {}
        self._confirmed: set[int] = set()
        self._playing: int | None = None
        self._paused_at: float | None = None
        self._held: int | None = None  # a reply ready while the output was paused
        self._play_left: dict[int, float] = {}
        self.audible: list[tuple[float, float]] = []  # intervals of agent audio at the listener
        self._audible_since: float | None = None
        self.ducked: list[tuple[float, float]] = []  # intervals of it played quieter
        self._ducked_since: float | None = None

    # ---- scheduling -------------------------------------------------------------------

    def type_at(self, t: float, text: str) -> None:
        """The user sends the typed message `text` at `t` (before that time's frame)."""
        self._at(t, lambda now, text=text: self.machine.on_text(text, now))

    def partial_at(
        self, t: float, text: str, score: float | None = None, read_s: float = 0.04
    ) -> None:
        """The partial transcript `text` of the open utterance, decoded at `t`; with `score`,
        the end-of-turn model's P(complete) for it comes `read_s` later (None: not read)."""

        def words(now: float) -> list[A.Action]:
            utt = self.machine._utt
            return [] if utt is None else self.machine.on_partial(utt.id, text, now)

        self._at(t, words)
        if score is not None:
            p = score

            def read(now: float) -> list[A.Action]:
                utt = self.machine._utt
                return [] if utt is None else self.machine.on_partial_read(utt.id, text, p, now)

            self._at(t + read_s, read)

    def _at(self, t: float, fn: Callable[[float], list[A.Action]]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (round(t, 6), self._seq, fn))

    def run(
        self,
        voiced: Callable[[float], bool],
        until_s: float,
        stalls: tuple[tuple[float, float], ...] = (),
        loop_stalls: tuple[tuple[float, float], ...] = (),
    ) -> None:
        """Feed frames ending at 20 ms, 40 ms, ... with `voiced(t)`, running scheduled engine
        callbacks in time order between frames. Inside a stall (start, end) no frame comes and
        the engine's timer ticks instead; the frames held back arrive together at its end
        (never, if it ends after `until_s`), stamped with that time as the engine stamps a
        frame on arrival. Inside a loop stall (the engine's event loop busy) nothing runs at
        all, and at its end the held frames come before the timer's next tick (the engine
        skips a tick that runs late)."""
        f = self.options.frame_s
        n = round(until_s / f)
        held: list[bool] = []
        for i in range(1, n + 1):
            t = round(i * f, 6)
            while (
                self._queue
                and self._queue[0][0] <= t
                and not any(a < t < b for a, b in loop_stalls)
            ):
                when, _, fn = heapq.heappop(self._queue)
                self._apply(fn(when), when)
            if any(a < t < b for a, b in loop_stalls):
                held.append(voiced(t - f / 2))
                continue
            if any(a < t < b for a, b in stalls):
                held.append(voiced(t - f / 2))
                self._apply(self.machine.tick(t), t)
                continue
            for v in held:  # a stall has just ended
                self._apply(self.machine.on_frame(v, t), t)
            held.clear()
            self._apply(self.machine.on_frame(voiced(t - f / 2), t), t)
        if self._audible_since is not None:
            self.audible.append((self._audible_since, until_s))
        self._unduck(until_s)

    # ---- the engines' side ------------------------------------------------------------

    def _apply(self, actions: list[A.Action], t: float) -> None:
        for a in actions:
            self.log.append((t, a))
            self._execute(a, t)

    def _execute(self, a: A.Action, t: float) -> None:
        e = self.engines
        match a:
            case A.OpenUtterance(utterance_id=uid, pre_roll_s=pre_roll_s):
                self._utt_start[uid] = t - pre_roll_s if e.hears_pre_roll else t
            case A.RequestCandidate(utterance_id=uid):
                start = self._utt_start.get(uid, t)
                text = e.transcript(start, t)
                if e.stt_hangs_after_s is not None and t >= e.stt_hangs_after_s:
                    return
                self._at(
                    t + e.stt_delay_s,
                    lambda now, uid=uid, text=text, cov=t: self.machine.on_candidate(
                        uid, text, cov, now
                    ),
                )
            case A.ScoreTurn(utterance_id=uid, text=text):
                assert e.score is not None, "ScoreTurn without a detector"
                p = e.score(text)
                self._at(
                    t + e.score_delay_s,
                    lambda now, uid=uid, text=text, p=p: self.machine.on_turn_score(
                        uid, text, p, now
                    ),
                )
            case A.StartReply(reply_id=rid):
                self._reply_started[rid] = t
                self._play_left[rid] = e.reply_length_s
                self._at(
                    t + e.reply_audio_after_s, lambda now, rid=rid: self._audio_ready(rid, now)
                )
            case A.ConfirmReply(reply_id=rid):
                self._confirmed.add(rid)
                if (
                    rid in self._reply_started
                    and t - self._reply_started[rid] >= e.reply_audio_after_s
                ):
                    self._at(t, lambda now, rid=rid: self._audio_ready(rid, now))
            case A.CancelReply(reply_id=rid):
                self._reply_started.pop(rid, None)
                self._paused_at = None  # like Playout.cancel: a new reply starts unpaused
                self._unduck(t)
                if self._playing == rid:
                    self._stop_audio(t)
                    self._playing = None
            case A.PausePlayback():
                self._paused_at = t
                self._stop_audio(t)
                self._unduck(t)
            case A.DuckPlayback():
                self._ducked_since = t
            case A.ResumePlayback():
                self._unduck(t)
                self._paused_at = None
                if self._playing is not None and self._audible_since is None:
                    self._start_audio(self._playing, t)
                elif self._held is not None:
                    self._at(t, lambda now, rid=self._held: self._audio_ready(rid, now))
                    self._held = None
            case A.PlayCanned(reply_id=rid):
                self._confirmed.add(rid)
                self._reply_started[rid] = t
                self._play_left[rid] = 1.0
                self._at(t + 0.05, lambda now, rid=rid: self._audio_ready(rid, now))

    def _audio_ready(self, rid: int, now: float) -> list[A.Action]:
        if rid not in self._reply_started or rid not in self._confirmed or self._playing == rid:
            return []
        if self._paused_at is not None:  # like Playout: a paused output plays nothing
            self._held = rid
            return []
        self._playing = rid
        out = self.machine.on_reply_audio_started(rid, now)
        self._start_audio(rid, now)
        return out

    def _start_audio(self, rid: int, now: float) -> None:
        self._audible_since = now
        end = now + self._play_left[rid]
        self._at(end, lambda t, rid=rid, started=now: self._maybe_done(rid, started, t))

    def _unduck(self, now: float) -> None:
        if self._ducked_since is not None:
            self.ducked.append((self._ducked_since, now))
            self._ducked_since = None

    def _stop_audio(self, now: float) -> None:
        if self._audible_since is not None:
            self.audible.append((self._audible_since, now))
            if self._playing is not None:
                self._play_left[self._playing] -= now - self._audible_since
            self._audible_since = None

    def _maybe_done(self, rid: int, started: float, now: float) -> list[A.Action]:
        if self._playing != rid or self._audible_since != started or self._paused_at is not None:
            return []  # paused or cancelled since
        self._stop_audio(now)
        self._unduck(now)
        self._playing = None
        return self.machine.on_reply_done(rid, now)

    # ---- reading the log --------------------------------------------------------------

    def of(self, kind: type) -> list[tuple[float, A.Action]]:
        return [(t, a) for t, a in self.log if isinstance(a, kind)]

    def states(self) -> list[tuple[float, str]]:
        return [(t, a.state.name) for t, a in self.of(A.SetState)]


def speech(*intervals: tuple[float, float]) -> Callable[[float], bool]:
    """A VAD timeline: voiced inside any of the (start, end) intervals, in seconds."""
    return lambda t: any(a <= t < b for a, b in intervals)


def said_by(text: str, since: float, words_per_s: float = 5.0) -> Callable[[float], str]:
    """What of `text`, said from `since` on at `words_per_s`, a transcript up to `end` holds."""
    words = text.split()

    def heard(end: float) -> str:
        return " ".join(words[: max(0, int((end - since) * words_per_s + 1e-9))])

    return heard
