"""What `voxroom bench` measures: the agent's voice as the listener got it, what each item
cost, and the percentile summaries.

Voice-to-voice and barge-in stop are read off the audio the listener received (the rendered
timeline in the simulate path, the frames that arrived over WebRTC in the LiveKit path), not
off the agent's own clocks, so they include capture, queues and the network.

The turn corpus's figures beside them (docs/benchmarks.md, "The turn-taking corpus"):
- words lost: what was said (the corpus text) against what the LLM was asked for the answer
  (`asked_text`: the user messages of the request since the agent's last answer), aligned as
  bench/wer.py aligns a transcript: a said word with nothing in its place is lost, one with
  another word in its place is misheard (Whisper's error, counted apart);
- the silence a backchannel causes (`backchannel_silence`): each silent stretch of the answer
  from the backchannel's onset on, less the silence at the same place of the same answer
  heard with nobody speaking over it (a reference rendering), the longest of them;
- an interruption's yield at the listener (`yielded_after`): the first moment the agent's
  level drops 6 dB below its level just before the onset and stays down, or it stops;
- stop and yield at the agent: read off the agent's own record (bench/livekit_path.py), the
  onset as its VAD saw it to its pause (and to its duck, when it ducks first).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agent.voice.turn_metrics import percentiles
from bench.wer import wer_by_kind, word_errors

AUDIBLE = 300  # int16 peak of a 10 ms block that the listener hears as the agent talking
SILENT = 100
"""int16 peak of a 10 ms block under which the agent makes no sound (-50 dBFS): a silence
caused is measured against it, not AUDIBLE, since the soft sounds of a voice played quieter
(ducked) fall under AUDIBLE without being silence. The codec's idle noise through LiveKit
peaks under 50."""
BLOCK_S = 0.010
SILENT_GAP_S = 0.5  # the agent has stopped once it stays quiet this long (longer than a pause)
TALKING_S = 0.2  # audible this shortly before the user cut in: the agent was talking
RESUME_WITHIN_S = 2.5  # after a backchannel, the answer must be audible again within this
MISSED_STOP_MS = 1000.0  # an interruption the agent talks on through for longer is missed
YIELD_DROP_DB = 6.0  # the agent yields when its level drops this much below the reference's
YIELD_HOLD_S = 0.2  # ... and stays down this long (a duck held, not a syllable's dip)
LEVEL_S = 0.04  # the item's level at t: its loudest block in [t, t + LEVEL_S)
REFERENCE_LEVEL_S = 0.05  # the reference's: its loudest within this either side (jitter)
GAP_MATCH_S = 0.08  # a silence this close to the reference's is the answer's own pause
GAP_MIN_S = 0.05
"""Shorter silences are neither an answer's pause nor one a backchannel caused: the gaps
between words, and the holes that frames' arrival times leave between them at the listener
(a few ms to ~30 ms, several a second). Counted, each hole was charged as caused and moved
the place where the answer's own pauses are looked for, until its real pause no longer
matched and was charged whole."""

# Items whose user speaks over the agent's answer (bench.corpus.BargeIn), by kind: the
# questions corpus's barge-ins, the turn corpus's interruptions and backchannels.
INTERRUPTION_KINDS = ("barge_in", "interruption")
OVERLAY_KINDS = (*INTERRUPTION_KINDS, "backchannel")

# Stages in the order of a turn, as the turn engine names them (TurnRecord.latency_ms), then the
# two figures measured at the listener.
ENGINE_STAGES = ("endpoint", "stt", "llm_first_token", "first_chunk", "tts_first_audio")
STAGES = (*ENGINE_STAGES, "voice_to_voice", "barge_in_stop")
STAGE_LABELS = {
    "endpoint": "endpoint (speech end→commit)",
    "stt": "STT (speech end→reply start)",
    "llm_first_token": "LLM first token",
    "first_chunk": "first chunk ready",
    "tts_first_audio": "TTS first audio",
    "voice_to_voice": "voice-to-voice (listener)",
    "barge_in_stop": "barge-in stop (listener)",
}


class HeardAudio:
    """The agent's audio at the listener: pieces of int16 samples at `rate`, each with the
    time (seconds, any clock) its first sample was heard; kept as the peak of each 10 ms
    block."""

    def __init__(self, rate: int, pieces: Iterable[tuple[float, np.ndarray]]) -> None:
        block = max(1, round(rate * BLOCK_S))
        times: list[np.ndarray] = []
        peaks: list[np.ndarray] = []
        for t, pcm in pieces:
            n = len(pcm) // block
            if n == 0:
                continue
            times.append(t + np.arange(n) * block / rate)
            peaks.append(np.abs(pcm[: n * block].astype(np.int32)).reshape(n, block).max(axis=1))
        self._t = np.concatenate(times) if times else np.zeros(0)
        self._peak = np.concatenate(peaks) if peaks else np.zeros(0, np.int32)
        order = np.argsort(self._t, kind="stable")
        self._t, self._peak = self._t[order], self._peak[order]
        self._loud = self._t[self._peak > AUDIBLE]
        self._block_s = block / rate

    def first_audible_after(self, t: float) -> float | None:
        i = int(np.searchsorted(self._loud, t))
        return float(self._loud[i]) if i < len(self._loud) else None

    def last_audible(self) -> float | None:
        return float(self._loud[-1]) + self._block_s if len(self._loud) else None

    def audible_between(self, a: float, b: float) -> bool:
        i = int(np.searchsorted(self._loud, a - self._block_s))
        return i < len(self._loud) and bool(self._loud[i] < b)

    def audible_s(self, a: float, b: float) -> float:
        """Seconds of audible 10 ms blocks from `a` to `b`."""
        lo, hi = np.searchsorted(self._loud, [a - self._block_s, b])
        t = self._loud[lo:hi]
        return float((np.clip(t + self._block_s, a, b) - np.clip(t, a, b)).sum())

    def silenced_after(self, t: float, gap_s: float = SILENT_GAP_S) -> float:
        """When, from `t` on, the agent went quiet for at least `gap_s`: the end of its last
        audible block before that silence (`t` itself if it was already quiet)."""
        s = t
        for x in self._loud[int(np.searchsorted(self._loud, t - self._block_s)) :]:
            if x >= s + gap_s:
                break
            s = max(s, float(x) + self._block_s)
        return s

    def silences(self, a: float, b: float, floor: int = AUDIBLE) -> list[tuple[float, float]]:
        """The silent stretches (no 10 ms block louder than `floor`) that end after `a` and
        begin before `b`, each from the end of a louder block to the next one; one still
        silent at `b` ends there. A stretch that began before `a` keeps its start."""
        loud = self._loud if floor == AUDIBLE else self._t[self._peak > floor]
        bs = self._block_s
        j = int(np.searchsorted(loud, a))
        start = float(loud[j - 1]) + bs if j > 0 else a
        out: list[tuple[float, float]] = []
        for x in loud[j:]:
            if start >= b:
                break
            if x > start + 1e-6:
                out.append((start, min(float(x), b)))
            start = max(start, float(x) + bs)
        else:
            if start < b:
                out.append((start, b))
        return [(s, e) for s, e in out if e > a]

    def peak(self, a: float, b: float) -> int:
        """The loudest 10 ms block heard from `a` to `b` (0: none)."""
        i, j = np.searchsorted(self._t, [a, b])
        return int(self._peak[i:j].max()) if j > i else 0

    def blocks(self, a: float, b: float) -> np.ndarray:
        """The times of the 10 ms blocks heard from `a` to `b`."""
        i, j = np.searchsorted(self._t, [a, b])
        return self._t[i:j]


@dataclass(frozen=True)
class ReferenceAnswer:
    """An answer heard through with nobody speaking over it (`heard`, first audible at
    `first`): where its own pauses are and how loud it is at each place, for the same answer
    with a backchannel or an interruption over it."""

    heard: HeardAudio
    first: float

    def pauses(self) -> list[tuple[float, float]]:
        """Its silences: (start after its first sound, length) each."""
        return answer_pauses(self.heard, self.first)

    def level(self, at: float) -> int:
        """Its loudest block within REFERENCE_LEVEL_S of `at` seconds after its first
        sound."""
        t = self.first + at
        return self.heard.peak(t - REFERENCE_LEVEL_S, t + REFERENCE_LEVEL_S + BLOCK_S)


@dataclass
class ItemResult:
    """One corpus item said to the agent, as measured."""

    item: str
    voice: str
    kind: str  # "question" | "barge_in"; the turn corpus's kinds (bench.turn_corpus.KINDS)
    stages: dict[str, float | None]  # the engine's latencies of the turn that answered
    voice_to_voice_ms: float | None = None
    barge_in_stop_ms: float | None = None
    turns: int = 0  # user turns the agent took from this item (1 unless it cut in early)
    premature: bool = False  # the agent's voice started before the user had finished
    cut_in_ms: float | None = None  # how long it was heard before the user had finished
    heard_user: str = ""  # what the agent transcribed
    cpu_cores: float | None = None  # CPU seconds per second of the item, all session processes
    rss_mb: float | None = None  # resident memory of the session's process at the end
    # What the listener heard after the user spoke over the answer (see measure_overlay):
    heard_after_backchannel: bool | None = None  # the agent within RESUME_WITHIN_S of its end
    answered_interruption: bool | None = None  # the agent again once it stopped and it ended
    # The listening corpus (bench/listen_corpus.py; bench/wer.py scores them):
    said: str = ""  # what the user said ("" when unknown or not scored)
    transcript: str | None = None  # the agent's final user transcripts of the item, joined
    # The tools corpus (bench/tool_corpus.py; measure_answer): the user's end -> the first word
    # of the answer itself, a filler before it not counted; and whether a filler was heard.
    answer_ms: float | None = None
    filler_heard: bool | None = None
    # The turn corpus (docs/benchmarks.md, "The turn-taking corpus"):
    asked: str | None = None  # what the LLM was asked for the answer (`asked_text`)
    words_said: int | None = None  # words of what was said (bench.wer.normalize)
    words_lost: int | None = None  # said words with nothing in their place in `asked`
    words_misheard: int | None = None  # said words with another word in their place
    backchannel_silence_ms: float | None = None  # the longest silence it caused
    yield_ms: float | None = None  # interruption onset -> the agent ducked or stopped
    agent_stop_ms: float | None = None  # the agent's own onset -> its pause
    agent_yield_ms: float | None = None  # the agent's own onset -> its duck (or pause)


@dataclass
class RunResult:
    """One configuration run over the corpus."""

    name: str
    path: str
    llm: str
    items: list[ItemResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def values(self, stage: str) -> list[float | None]:
        if stage == "voice_to_voice":
            # An agent that cut in before the user had finished has no voice-to-voice of
            # this utterance to show; such items are counted apart (`premature`).
            return [i.voice_to_voice_ms for i in self.items if not i.premature]
        if stage == "barge_in_stop":
            return [i.barge_in_stop_ms for i in self.items if i.kind in INTERRUPTION_KINDS]
        return [i.stages.get(stage) for i in self.items]

    def summary(self) -> dict[str, Any]:
        cores = [i.cpu_cores for i in self.items]
        rss = [i.rss_mb for i in self.items if i.rss_mb is not None]
        return {
            "stages": {s: percentiles(self.values(s)) for s in STAGES},
            "cpu_cores": percentiles(cores),
            "rss_mb_peak": max(rss) if rss else None,
            "items": len(self.items),
            "premature": sum(i.premature for i in self.items),
            "unanswered": sum(i.voice_to_voice_ms is None for i in self.items),
            "kinds": {
                k: kind_summary([i for i in self.items if i.kind == k])
                for k in dict.fromkeys(i.kind for i in self.items)
            },
            "wer": wer_by_kind(self.items),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        return cls(
            data["name"],
            data["path"],
            data["llm"],
            [ItemResult(**i) for i in data["items"]],
            list(data["notes"]),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "llm": self.llm,
            "notes": self.notes,
            "summary": self.summary(),
            "items": [asdict(i) for i in self.items],
        }


def ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round((b - a) * 1000, 1)


def cut_off(heard: HeardAudio, spoke: float, said: float) -> bool:
    """The agent was heard while the user was still speaking, from the first voiced sample
    `spoke` to the last `said` (a thinking pause in between included): it did not let the
    user finish."""
    return heard.audible_between(spoke, said)


def cut_in_ms(heard: HeardAudio, spoke: float, said: float) -> float:
    """How long the agent was heard while the user was still speaking (see `cut_off`): what
    a cut-off cost the user, from a syllable to an answer talked over a whole thinking pause."""
    return round(heard.audible_s(spoke, said) * 1000, 1)


def measure_overlay(
    result: ItemResult,
    heard: HeardAudio,
    onset: float,
    end: float,
    *,
    answered: float | None = None,
    reference: ReferenceAnswer | None = None,
) -> None:
    """The listener's figures of an item whose user speaks over the answer from `onset` to
    `end` (first and last voiced sample, on `heard`'s clock): a backchannel's resume and,
    given the answer's first audio `answered` and the same answer heard with nobody over it
    (`reference`), the longest silence it caused; an interruption's barge-in stop, whether
    it got an answer, and (with `answered` and `reference`) its yield. A backchannel said
    after the answer had ended (its question misheard and answered in a few words) had
    nothing to barge into: it is not measured."""
    talking = heard.audible_between(onset - TALKING_S, onset)  # when the user's sound began
    if result.kind == "backchannel":
        if not talking:
            return
        result.heard_after_backchannel = heard.audible_between(end, end + RESUME_WITHIN_S)
        if answered is not None and reference is not None:
            result.backchannel_silence_ms = backchannel_silence(
                heard, answered, onset, end, reference.pauses()
            )
        return
    stopped = heard.silenced_after(onset)
    if talking:
        result.barge_in_stop_ms = ms(onset, stopped)
        if answered is not None and reference is not None:
            ducked = yielded_after(heard, onset, stopped, answered, reference)
            result.yield_ms = ms(onset, stopped if ducked is None else min(ducked, stopped))
    result.answered_interruption = heard.first_audible_after(max(stopped, end)) is not None


def yielded_after(
    heard: HeardAudio, onset: float, until: float, answered: float, reference: ReferenceAnswer
) -> float | None:
    """When an answer first heard at `answered` gave way to a sound from `onset` by lowering
    its voice: the first block from `onset` to `until` from which, for YIELD_HOLD_S, it is
    YIELD_DROP_DB or more below the same answer heard with nobody over it (`reference`) at
    the same place, wherever the reference is audible (at least half the blocks). Speech's
    own level changes from word to word, so only the reference tells a duck from a quiet
    word. None: it did not duck (a stop is `silenced_after`'s)."""
    limit = 10 ** (-YIELD_DROP_DB / 20)
    for t in heard.blocks(onset, until):
        window = heard.blocks(float(t), float(t) + YIELD_HOLD_S)
        levels = [(heard.peak(b, b + LEVEL_S), reference.level(b - answered)) for b in window]
        counted = [(x, r) for x, r in levels if r > AUDIBLE]
        if counted and 2 * len(counted) >= len(window) and all(x <= r * limit for x, r in counted):
            return float(t)
    return None


def answer_pauses(heard: HeardAudio, first: float) -> list[tuple[float, float]]:
    """The silences (GAP_MIN_S or longer) inside an answer heard from `first` (its first
    audible block) to its last audible one, with nobody speaking over it: (start after
    `first`, length) each."""
    last = heard.last_audible()
    if last is None:
        return []
    return [
        (a - first, b - a)
        for a, b in heard.silences(first, last, SILENT)
        if a >= first and b - a >= GAP_MIN_S
    ]


def backchannel_silence(
    heard: HeardAudio,
    answered: float,
    onset: float,
    end: float,
    pauses: Sequence[tuple[float, float]],
) -> float:
    """The longest silence (ms) a backchannel from `onset` to `end` caused in an answer first
    heard at `answered`, whose own silences with nobody speaking over it are `pauses`
    (`answer_pauses`). Each silent stretch of the answer (GAP_MIN_S or longer) that overlaps
    one of the answer's own pauses at the same place of the answer (give or take
    GAP_MATCH_S; the most overlapped) is that pause: only what it lasts beyond it was caused.
    A stretch that overlaps none was caused whole. Every difference moves the rest of the
    answer, so the place is counted on with it from the first sound: an answer whose early
    pause ran long (its second chunk came late) or short finds its later pauses where they
    are, and one that paused for the backchannel and resumed where it stopped finds its own
    pauses again. The figure is the longest caused by a stretch that ends after the onset,
    up to RESUME_WITHIN_S after the backchannel's end (or the answer's last sound, if
    sooner)."""
    last = heard.last_audible()
    until = end + RESUME_WITHIN_S
    if last is not None and last > end:
        until = min(until, last)
    shift, longest = 0.0, 0.0
    for a, b in heard.silences(answered, until, SILENT):
        if b - a < GAP_MIN_S:
            continue
        at, to = a - answered - shift, b - answered - shift
        overlaps = [(min(to, p + n + GAP_MATCH_S) - max(at, p - GAP_MATCH_S), n) for p, n in pauses]
        own = max(((o, n) for o, n in overlaps if o > 0), default=(0.0, 0.0))[1]
        shift += b - a - own
        if b > onset:
            longest = max(longest, b - a - own)
    return round(longest * 1000, 1)


def asked_text(messages: Sequence[Any]) -> str:
    """What an LLM request asked the model to answer: its user messages since its last
    assistant answer (the agent's previous answer, as far as it was heard), joined."""
    from agent.testing.scripted_llm import message_text

    said: list[str] = []
    for m in reversed(messages):
        if m.get("role") == "assistant" and message_text(m).strip():
            break
        if m.get("role") == "user":
            said.insert(0, message_text(m))
    return " ".join(said)


def score_words(result: ItemResult, said: str, asked: str) -> None:
    """Words lost and misheard between what was `said` and what the LLM was `asked`, aligned
    as bench/wer.py aligns a transcript: a deleted said word is lost, a substituted one
    misheard; words the LLM got that were not said are not counted."""
    e = word_errors(said, asked)
    result.asked = asked
    result.words_said, result.words_lost = e["words"], e["deletions"]
    result.words_misheard = e["substitutions"]


# Stretches of the agent's speech parted by this much silence are told apart (a filler, then
# the answer).
STRETCH_GAP_S = 0.12
MAX_FILLERS = 4  # a reply's fillers before its answer, at most (a tool over ~5 s)


def measure_answer(
    result: ItemResult,
    heard: HeardAudio,
    said: float,
    first: float | None,
    is_filler: Callable[[float, float], bool],
) -> None:
    """Where the answer itself began after the user's end `said`: the first stretch of the
    agent's speech, from the first audible `first` on, that `is_filler(start, end)` does not
    call a filler (it is judged by what it says: a stretch may also be a first chunk of
    the answer cut off from the rest by a slow synthesis). A filler that runs into the answer
    with less than STRETCH_GAP_S of silence between is one stretch with it, and not told
    apart."""
    if first is None:
        return
    start: float | None = first
    fillers = 0
    while start is not None and fillers < MAX_FILLERS:
        end = heard.silenced_after(start, STRETCH_GAP_S)
        if not is_filler(start, end):
            break
        fillers += 1
        start = heard.first_audible_after(end)
    result.filler_heard = fillers > 0
    result.answer_ms = ms(said, start)


def false_barge_in(item: ItemResult) -> bool | None:
    """A backchannel ("mm hmm", a cough) ended the answer: the agent was not heard again
    within RESUME_WITHIN_S of its end, or the agent committed a user turn for it (more than
    the question's one). None for other kinds and when not measured."""
    if item.kind != "backchannel" or item.heard_after_backchannel is None:
        return None
    return not item.heard_after_backchannel or item.turns > 1


def missed_interruption(item: ItemResult) -> bool | None:
    """A real interruption did not take the floor: the agent talked on for more than
    MISSED_STOP_MS after its onset, or it got no answer (nothing heard after it, or no user
    turn of its own beside the question's; 0 turns is "not known"). None for other kinds."""
    if item.kind not in INTERRUPTION_KINDS or item.answered_interruption is None:
        return None
    late = item.barge_in_stop_ms is not None and item.barge_in_stop_ms > MISSED_STOP_MS
    return late or not item.answered_interruption or item.turns == 1


def _count(flags: Iterable[bool | None]) -> int | None:
    known = [f for f in flags if f is not None]
    return sum(known) if known else None


def _known(flags: Iterable[bool | None]) -> int:
    return sum(f is not None for f in flags)


def _total(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def kind_summary(items: Sequence[ItemResult]) -> dict[str, Any]:
    """The turn-taking figures of the items of one kind (None: not a figure of the kind)."""
    interruptions = [i for i in items if i.kind in INTERRUPTION_KINDS]
    backchannels = [i for i in items if i.kind == "backchannel"]
    scored = [i for i in items if i.words_lost is not None]
    return {
        "items": len(items),
        "cut_offs": sum(i.premature for i in items),
        "false_barge_ins": _count(false_barge_in(i) for i in items),
        "false_barge_ins_measured": _known(false_barge_in(i) for i in items),
        "missed_interruptions": _count(missed_interruption(i) for i in items),
        "missed_interruptions_measured": _known(missed_interruption(i) for i in items),
        "voice_to_voice": percentiles(i.voice_to_voice_ms for i in items if not i.premature),
        "cut_in": percentiles(i.cut_in_ms for i in items if i.premature),
        "barge_in_stop": (
            percentiles(i.barge_in_stop_ms for i in interruptions) if interruptions else None
        ),
        "yield": percentiles(i.yield_ms for i in interruptions) if interruptions else None,
        "agent_stop": (
            percentiles(i.agent_stop_ms for i in interruptions) if interruptions else None
        ),
        "agent_yield": (
            percentiles(i.agent_yield_ms for i in interruptions) if interruptions else None
        ),
        "backchannel_silence": (
            percentiles(i.backchannel_silence_ms for i in backchannels) if backchannels else None
        ),
        "words_said": _total(i.words_said for i in scored),
        "words_lost": _total(i.words_lost for i in scored),
        "words_misheard": _total(i.words_misheard for i in scored),
        "items_losing_words": sum(bool(i.words_lost) for i in scored) if scored else None,
        "answer": percentiles(i.answer_ms for i in items if not i.premature),
        "fillers_heard": _count(i.filler_heard for i in items),
    }


class ProcessUsage:
    """CPU time and resident memory of a process and its children (psutil), read on demand:
    `take()` returns CPU seconds since the previous take, and the largest RSS among them."""

    def __init__(self, pid: int | None = None) -> None:
        import psutil

        self._root = psutil.Process(pid or os.getpid())
        self._seen: dict[int, float] = {}
        self.take()

    def _procs(self) -> list[Any]:
        return [self._root, *self._root.children(recursive=True)]

    def take(self) -> tuple[float, float]:
        import psutil

        spent, rss = 0.0, 0.0
        for p in self._procs():
            try:
                c = p.cpu_times()
                total = c.user + c.system
                rss = max(rss, p.memory_info().rss / 2**20)
            except psutil.Error:
                continue
            spent += total - self._seen.get(p.pid, 0.0)
            self._seen[p.pid] = total
        return spent, rss


@dataclass
class ItemClock:
    """Wall and CPU time of one item; `finish` fills the item's resource figures."""

    usage: ProcessUsage
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.usage.take()

    def finish(self, result: ItemResult) -> None:
        cpu_s, rss = self.usage.take()
        wall = time.monotonic() - self.started
        result.cpu_cores = round(cpu_s / wall, 3) if wall > 0 else None
        result.rss_mb = round(rss, 1)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def wait_until(predicate: Any, timeout_s: float, poll_s: float = 0.02) -> bool:
    """Poll `predicate()` until it is true or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(poll_s)
    return True


async def require(predicate: Any, timeout_s: float, what: str) -> None:
    """`wait_until`, and TimeoutError(`what`) if `predicate()` never became true."""
    if not await wait_until(predicate, timeout_s):
        raise TimeoutError(what)


def ratio(ours: float | None, theirs: float | None) -> float | None:
    return None if ours is None or not theirs else round(ours / theirs, 3)


def comparison(runs: Sequence[RunResult], base: RunResult) -> dict[str, dict[str, Any]]:
    """Per run and stage: p50 and p95 of `base` divided by the run's (below 1: base faster)."""
    out: dict[str, dict[str, Any]] = {}
    b = base.summary()["stages"]
    for run in runs:
        if run is base:
            continue
        s = run.summary()["stages"]
        out[run.name] = {
            stage: {q: ratio(b[stage][q], s[stage][q]) for q in ("p50", "p95")} for stage in STAGES
        }
    return out
