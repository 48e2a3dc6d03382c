"""What `voxroom bench` measures: the agent's voice as the listener got it, what each item
cost, and the percentile summaries.

Voice-to-voice and barge-in stop are read off the audio the listener received (the rendered
timeline in the simulate path, the frames that arrived over WebRTC in the LiveKit path), not
off the agent's own clocks, so they include capture, queues and the network.
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
from bench.wer import wer_by_kind

AUDIBLE = 300  # int16 peak of a 10 ms block that the listener hears as the agent talking
BLOCK_S = 0.010
SILENT_GAP_S = 0.5  # the agent has stopped once it stays quiet this long (longer than a pause)
TALKING_S = 0.2  # audible this shortly before the user cut in: the agent was talking
RESUME_WITHIN_S = 2.5  # after a backchannel, the answer must be audible again within this
MISSED_STOP_MS = 1000.0  # an interruption the agent talks on through for longer is missed

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
    time (seconds, any clock) its first sample was heard."""

    def __init__(self, rate: int, pieces: Iterable[tuple[float, np.ndarray]]) -> None:
        block = max(1, round(rate * BLOCK_S))
        loud: list[np.ndarray] = []
        for t, pcm in pieces:
            n = len(pcm) // block
            if n == 0:
                continue
            peaks = np.abs(pcm[: n * block].astype(np.int32)).reshape(n, block).max(axis=1)
            loud.append(t + np.flatnonzero(peaks > AUDIBLE) * block / rate)
        self._loud = np.sort(np.concatenate(loud)) if loud else np.zeros(0)
        self._block_s = block / rate

    def first_audible_after(self, t: float) -> float | None:
        i = int(np.searchsorted(self._loud, t))
        return float(self._loud[i]) if i < len(self._loud) else None

    def audible_between(self, a: float, b: float) -> bool:
        i = int(np.searchsorted(self._loud, a - self._block_s))
        return i < len(self._loud) and bool(self._loud[i] < b)

    def silenced_after(self, t: float, gap_s: float = SILENT_GAP_S) -> float:
        """When, from `t` on, the agent went quiet for at least `gap_s`: the end of its last
        audible block before that silence (`t` itself if it was already quiet)."""
        s = t
        for x in self._loud[int(np.searchsorted(self._loud, t - self._block_s)) :]:
            if x >= s + gap_s:
                break
            s = max(s, float(x) + self._block_s)
        return s


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
            "kinds": {k: kind_summary([i for i in self.items if i.kind == k])
                      for k in dict.fromkeys(i.kind for i in self.items)},
            "wer": wer_by_kind(self.items),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        return cls(data["name"], data["path"], data["llm"],
                   [ItemResult(**i) for i in data["items"]], list(data["notes"]))

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "llm": self.llm, "notes": self.notes,
                "summary": self.summary(), "items": [asdict(i) for i in self.items]}


def ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round((b - a) * 1000, 1)


def cut_off(heard: HeardAudio, spoke: float, said: float) -> bool:
    """The agent was heard while the user was still speaking, from the first voiced sample
    `spoke` to the last `said` (a thinking pause in between included): it did not let the
    user finish."""
    return heard.audible_between(spoke, said)


def measure_overlay(result: ItemResult, heard: HeardAudio, onset: float, end: float) -> None:
    """The listener's figures of an item whose user speaks over the answer from `onset` to
    `end` (first and last voiced sample, on `heard`'s clock): a backchannel's resume, an
    interruption's barge-in stop and whether it got an answer."""
    if result.kind == "backchannel":
        result.heard_after_backchannel = heard.audible_between(end, end + RESUME_WITHIN_S)
        return
    stopped = heard.silenced_after(onset)
    if heard.audible_between(onset - TALKING_S, onset):  # it was talking when cut off
        result.barge_in_stop_ms = ms(onset, stopped)
    result.answered_interruption = heard.first_audible_after(max(stopped, end)) is not None


# Stretches of the agent's speech parted by this much silence are told apart (a filler, then
# the answer).
STRETCH_GAP_S = 0.12
MAX_FILLERS = 4  # a reply's fillers before its answer, at most (a tool over ~5 s)


def measure_answer(result: ItemResult, heard: HeardAudio, said: float, first: float | None,
                   is_filler: Callable[[float, float], bool]) -> None:
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


def kind_summary(items: Sequence[ItemResult]) -> dict[str, Any]:
    """The turn-taking figures of the items of one kind (None: not a figure of the kind)."""
    stops = [i.barge_in_stop_ms for i in items if i.kind in INTERRUPTION_KINDS]
    return {
        "items": len(items),
        "cut_offs": sum(i.premature for i in items),
        "false_barge_ins": _count(false_barge_in(i) for i in items),
        "missed_interruptions": _count(missed_interruption(i) for i in items),
        "voice_to_voice": percentiles(i.voice_to_voice_ms for i in items if not i.premature),
        "barge_in_stop": percentiles(stops) if stops else None,
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
            stage: {q: ratio(b[stage][q], s[stage][q]) for q in ("p50", "p95")}
            for stage in STAGES
        }
    return out
