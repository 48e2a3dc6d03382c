"""Where a speaker's turn ends: the endpointing core that the voice agent's state machine and
the copilot's question endpointer share. Pure code: the utterance's timeline, its candidate
transcript and its end-of-turn score go in; decisions come out.

At each pause a candidate transcript is asked for (after `candidate_silence_s`); with an
end-of-turn model (`EndpointOptions.scored`), the candidate's text and audio are then scored
(`state_machine.actions.ScoreTurn`) and the trailing silence that ends the turn follows the
score: short when the turn is clearly complete, long (bounded) when it is clearly unfinished,
in between otherwise. Without a score, the silence is the text cue's (`cue`: the transcript
ends like a finished sentence) or the plain one.

A turn that trails off waits for the long bound whatever its score: its candidate ends on a
filler or a conjunction ("..., so, um"), or the voice went on after a candidate without adding
a word to it (`Utterance.hesitant`): Whisper leaves fillers out ("for tonight, uh" is written
"for tonight?"), and the text model then scores the words before them complete.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from state_machine.similarity import leaves_open, normalize_words, spoken_words

EPS = 1e-6  # clock values are floats: 2.3 - 2.0 < 0.3


@dataclass(frozen=True)
class EndpointOptions:
    """Durations in seconds."""

    candidate_silence_s: float = 0.060
    """Trailing silence after which the utterance so far is transcribed as a candidate.
    Short on purpose: the decode (~200-300 ms for 2-6 s on Whisper tiny.en) then overlaps the
    rest of the endpoint wait, so the final costs nothing at the endpoint. A pause inside a
    sentence only wastes one decode; the turn does not end."""

    speculative_silence_s: float = 0.250
    """A candidate is stable (the reply starts, unheard) after this much silence, or at once
    when its text looks complete."""

    silence_s: float = 0.500
    """Silence that ends the turn without a score and without a text cue. 500 ms: shorter cut
    speakers off at commas and 'um' pauses in our recordings; longer is felt."""

    silence_cued_s: float = 0.300
    """Silence that ends the turn without a score when the text looks complete."""

    scored: bool = False
    """An end-of-turn model scores each candidate (the engine sets this when it has one)."""

    silence_complete_s: float = 0.200
    """Silence that ends a turn the model scores at `complete_score` or more. Shorter than
    `silence_cued_s`: the score comes after the candidate transcript, itself a decode into
    the silence, so a complete question ends as soon as it is scored."""

    silence_unfinished_s: float = 1.500
    """Silence that ends a turn the model scores at `unfinished_score` or less, or that trails
    off: people pause 0.3-1.2 s inside a question ("Could you tell me ... which bus goes to the
    airport?"). 1.5 s covers a 1.2 s pause as the VAD measures it (its first voiced frames
    after the pause count as silence until the run is confirmed) with margin for frames that
    come late, and bounds the wait when the model is wrong. At 1.2 s exactly, the answer
    started as the speaker went on after a 1.2 s pause."""

    complete_score: float = 0.03
    unfinished_score: float = 0.003
    """Scores between the two interpolate the silence linearly. Chosen on the cases of
    `bench/turn_detectors.py` (not the bench corpus; figures in docs/benchmarks.md): with the
    text model, unfinished starts score 0.000-0.003 and most complete questions 0.03-0.4; in
    between are misheard words of either kind ("What is the capital and France?" 0.014),
    which wait in proportion. A lower `complete_score` cuts off more starts the model
    half-believes, a higher one makes more complete questions wait."""

    hesitation_s: float = 0.120
    """Voice after a pause that adds no word to the candidate asked in that pause, at least
    this much of it, is a hesitation the STT did not write ("..., uh"): the turn trails off.
    Less is a click or a breath."""

    hesitation_pause_s: float = 0.150
    """The pause before such a hesitation, at least: a comma's ("tonight, uh": 160-340 ms in
    our voices). Shorter quiet inside a word (a stop closure: 60-140 ms) is no pause: Whisper
    completes a word cut there ("prince" for the start of "princess"), and the rest of it,
    voice that adds no word, is not a hesitation."""

    max_utterance_s: float = 30.0
    """A turn this long is ended even without silence (a stuck open mic)."""

    late_input_s: float = 0.200
    """Time after the last frame received that does not count as silence yet. Silence is
    what the frames say, counted in the audio they hold; when none come, the clock takes
    over after this long. Frames reach the worker late and in bunches when its event loop or
    the network stalls, and counted on the clock such a stall inside a sentence read as a
    pause, which ended turns early. Cost: an input that stops sending frames (a muted track)
    ends its turn this much later."""


@dataclass
class Candidate:
    text: str
    covered_until: float
    failed: bool = False  # the STT failed: no words, but the speaker did say something


@dataclass
class Utterance:
    """One stretch of speech from its voted start to the end of the turn."""

    id: int
    onset: float
    last_voiced: float
    candidate: Candidate | None = None
    candidate_in_flight: bool = False
    score: float | None = None  # of the candidate `scored`
    # The candidate the score is of, and the one being scored. A score is of a candidate, not
    # of its text: the same words again after more voice ("... for tonight, uh") are scored
    # again, since an audio model hears the hesitation the transcript lacks.
    scored: Candidate | None = None
    scoring: Candidate | None = None
    endpoint_reached: bool = False
    heard_until: float | None = None  # the end of the last frame received (None: last_voiced)
    quiet_heard: float = 0.0  # audio of the frames received since the last voiced one
    hesitant: bool = False  # the voice went on after a candidate and added no word to it
    goes_on: bool = False  # it went on from a turn the speaker had ended (retracted)
    # Each voiced frame: when it ended, and the quiet audio received just before it.
    voiced: list[tuple[float, float]] = field(default_factory=list)

    def hear(self, now: float, frame_s: float) -> None:
        """A frame received at `now`; `voice()` follows if it holds speech."""
        self.heard_until = now
        self.quiet_heard += frame_s

    def voice(self, now: float, frame_s: float = 0.0) -> None:
        """The frame received at `now` (`frame_s` long, already `hear()`d) holds speech."""
        self.voiced.append((now, max(0.0, self.quiet_heard - frame_s)))
        self.last_voiced = now
        self.quiet_heard = 0.0

    def take_candidate(self, candidate: Candidate, o: EndpointOptions, frame_s: float) -> None:
        """`candidate` is the utterance's transcript now. Compared with the one before: words
        added end a hesitation; no word added to one asked in a pause, after `o.hesitation_s`
        of voice that followed that pause, starts one (a filler the STT left out, or one it
        wrote before and drops now)."""
        before, self.candidate = self.candidate, candidate
        if before is None or before.failed or candidate.failed:
            return
        old = normalize_words(spoken_words(before.text))
        new = normalize_words(spoken_words(candidate.text))
        if not new or len(new) > len(old):  # a word changed on the way is no word added
            self.hesitant = False
            return
        cover = before.covered_until
        after = [(t, quiet) for t, quiet in self.voiced if cover < t <= candidate.covered_until]
        if not after or len(after) == len(self.voiced):
            return
        # The pause is the quiet audio received, not the time between frames: frames held up
        # by the network come in a bunch (`late_input_s`).
        pause = after[0][1]
        if pause + EPS >= o.hesitation_pause_s and len(after) * frame_s + EPS >= o.hesitation_s:
            self.hesitant = True

    def fresh(self) -> bool:
        """The candidate covers all of the speech so far."""
        return self.candidate is not None and self.candidate.covered_until >= self.last_voiced

    def silence(self, now: float, late_input_s: float) -> float:
        """The trailing silence: the audio of the quiet frames received (frames that came in a
        bunch count what they hold, not when they came), then, with no frame coming, the
        clock's beyond the allowance for late frames (`EndpointOptions.late_input_s`)."""
        heard = self.last_voiced if self.heard_until is None else self.heard_until
        unheard = max(0.0, now - heard - late_input_s)
        return self.quiet_heard + unheard + EPS

    def fresh_score(self) -> float | None:
        """The score of the fresh candidate, if it has one."""
        if not self.fresh() or self.scored is not self.candidate:
            return None
        return self.score

    def start_scoring(self) -> str:
        """The fresh candidate goes to the end-of-turn model; its text, to score."""
        assert self.candidate is not None
        self.scoring = self.candidate
        return self.candidate.text

    def take_score(self, score: float | None) -> None:
        """The model's answer for the candidate being scored (None: it failed)."""
        self.scored, self.scoring, self.score = self.scoring, None, score


class SpeechVote:
    """Per-frame voicing: the sliding-window vote that starts speech, and the run of
    consecutive voiced frames (its start is the speech's onset)."""

    def __init__(self, window_frames: int, start_ratio: float, frame_s: float) -> None:
        self._window: deque[bool] = deque(maxlen=window_frames)
        self._ratio = start_ratio
        self._frame_s = frame_s
        self.run = 0
        self.run_start = 0.0

    def push(self, voiced: bool, now: float) -> bool:
        """Adds one frame ending at `now`; True when the window votes speech."""
        self._window.append(voiced)
        if voiced:
            if self.run == 0:
                self.run_start = now - self._frame_s
            self.run += 1
        else:
            self.run = 0
        assert self._window.maxlen is not None
        return voiced and sum(self._window) > self._ratio * self._window.maxlen

    def quiet(self) -> bool:
        """No voiced frame in the window."""
        return not any(self._window)


def endpoint_silence(o: EndpointOptions, utt: Utterance, cue: bool) -> float:
    """The trailing silence after which `utt`'s turn ends (see the module docstring)."""
    plain = o.silence_cued_s if cue and not utt.hesitant else o.silence_s
    if not o.scored:
        return plain
    if not utt.fresh():
        return o.silence_unfinished_s  # the transcript and its score are on their way
    assert utt.candidate is not None
    if utt.candidate.failed:
        return plain
    if utt.goes_on and not spoken_words(utt.candidate.text):
        # No words yet after the turn it went on from: most likely a filler the STT left out
        # ("tonight, | um | maybe with fish?"), so the speaker is still thinking.
        return o.silence_unfinished_s
    if not utt.candidate.text.strip():
        return plain
    if leaves_open(utt.candidate.text) or utt.hesitant:
        return o.silence_unfinished_s  # "..., so, um": whatever the model says
    score = utt.fresh_score()
    if score is None:
        # A score ~50-80 ms away is waited for, bounded; a detector that failed answered
        # None, and the text cue decides.
        return o.silence_unfinished_s if utt.scoring is not None else plain
    return silence_for_score(o, score)


def silence_for_score(o: EndpointOptions, score: float) -> float:
    lo, hi = o.unfinished_score, o.complete_score
    if score >= hi:
        return o.silence_complete_s
    if score <= lo:
        return o.silence_unfinished_s
    share = (score - lo) / (hi - lo)
    return o.silence_unfinished_s + share * (o.silence_complete_s - o.silence_unfinished_s)


def candidate_due(o: EndpointOptions, utt: Utterance, now: float) -> bool:
    """Ask for a candidate transcript now: a pause, and none covers the speech yet."""
    return (
        not utt.candidate_in_flight
        and not utt.fresh()
        and (utt.silence(now, o.late_input_s) >= o.candidate_silence_s or utt.endpoint_reached)
    )


def score_due(o: EndpointOptions, utt: Utterance) -> bool:
    """Ask the end-of-turn model about the fresh candidate now."""
    c = utt.candidate
    return (
        o.scored
        and utt.fresh()
        and c is not None
        and not c.failed
        and utt.scoring is None
        and utt.scored is not c
        and bool(c.text.strip())
    )


def speculation_due(o: EndpointOptions, utt: Utterance, now: float, cue: bool) -> bool:
    """The fresh candidate is stable enough to start answering it (unheard)."""
    return utt.fresh() and (utt.silence(now, o.late_input_s) >= o.speculative_silence_s or cue)


def endpoint_due(o: EndpointOptions, utt: Utterance, now: float, cue: bool) -> bool:
    """The turn has ended (its transcript may still be on its way)."""
    return (
        utt.silence(now, o.late_input_s) >= endpoint_silence(o, utt, cue)
        or now - utt.onset + EPS >= o.max_utterance_s
    )
