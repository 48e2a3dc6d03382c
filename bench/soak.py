"""`voxroom bench --soak-minutes N`: one long conversation, to show that nothing grows.

One turn engine (the bundled Whisper and Piper, the scripted LLM test double) hears the
corpus's questions and barge-ins back to back for N minutes of wall-clock time: the user
speaks again as soon as the agent has gone quiet, so the pace is that of a conversation with
no idle time (an accelerated one: ~8 turns a minute). Every `SAMPLE_S` it records the
process's resident memory, its asyncio tasks, threads and open files, and the turns done.
The verdict looks at the second half of the run (the first is warm-up: the model runtimes'
arenas grow to the largest inputs they have seen, over the first pass of the corpus, ~6 min):
memory is flat when its least-squares slope there is under `FLAT_MB_PER_HOUR`; nothing leaks
when tasks, threads and files there stay within the range of its first sample, give or take
one turn's worth.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agent.engines import INPUT_RATE, LanguageModel
from bench.simulate_path import LEAD_S, feed

SAMPLE_S = 10.0
FLAT_MB_PER_HOUR = 20.0
TASK_SLACK = 8  # one turn's tasks (reply, TTS, candidate, leak checks) may be in flight


@dataclass(frozen=True)
class SoakSample:
    t_s: float
    rss_mb: float
    tasks: int
    threads: int
    open_files: int
    turns: int


@dataclass
class SoakResult:
    minutes: float
    samples: list[SoakSample] = field(default_factory=list)
    items: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SoakResult:
        return cls(
            data["minutes"], [SoakSample(**s) for s in data["samples"]], data.get("items", 0)
        )

    def verdict(self) -> dict[str, Any]:
        half = self.samples[-1].t_s / 2 if self.samples else 0.0
        settled = [s for s in self.samples if s.t_s >= half] or self.samples
        t = np.array([s.t_s for s in settled]) / 3600.0
        rss = np.array([s.rss_mb for s in settled])
        slope = float(np.polyfit(t, rss, 1)[0]) if len(settled) >= 3 else 0.0
        first = settled[0]
        growth = {
            k: max(getattr(s, k) for s in settled) - getattr(first, k)
            for k in ("tasks", "threads", "open_files")
        }
        return {
            "turns": self.samples[-1].turns if self.samples else 0,
            "items": self.items,
            "rss_mb_start": round(first.rss_mb, 1),
            "rss_mb_end": round(self.samples[-1].rss_mb, 1),
            "rss_slope_mb_per_hour": round(slope, 1),
            "memory_flat": abs(slope) < FLAT_MB_PER_HOUR,
            "growth_second_half": growth,
            "no_leak": growth["tasks"] <= TASK_SLACK
            and growth["threads"] <= 2
            and growth["open_files"] <= 2,
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "minutes": self.minutes,
            "items": self.items,
            "samples": [asdict(s) for s in self.samples],
            "verdict": self.verdict(),
        }


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _sample(t_s: float, turns: int) -> SoakSample:
    return SoakSample(
        t_s=round(t_s, 1),
        rss_mb=round(_rss_mb(), 1),
        tasks=len(asyncio.all_tasks()),
        threads=threading.active_count(),
        open_files=len(os.listdir("/proc/self/fd")),
        turns=turns,
    )


async def run_soak(
    items: Sequence[Any],
    *,
    minutes: float,
    llm: LanguageModel,
    system_prompt: str,
    on_sample: Callable[[SoakSample], None],
) -> SoakResult:
    """Say `items` (bench.corpus questions and barge-ins) over and over to one conversation
    for `minutes`."""
    from agent.adapters.providers import load_speech_engines
    from agent.apps.simulate import OUTPUT_RATE, timeline_engine
    from agent.events import AudioStart, VoiceEvent

    stt, tts = await asyncio.to_thread(load_speech_engines, OUTPUT_RATE)
    clock = time.monotonic
    audio_starts: list[float] = []

    def on_event(event: VoiceEvent) -> None:
        if isinstance(event, AudioStart):
            audio_starts.append(event.t)

    result = SoakResult(minutes)
    engine, sink = timeline_engine(
        stt, llm, tts, system_prompt=system_prompt, t0=clock(), clock=clock, on_event=on_event
    )
    await engine.start()
    began = clock()

    async def sample_forever() -> None:
        while True:
            on_sample(s := _sample(clock() - began, len(engine.turns)))
            result.samples.append(s)
            sink.forget_played()  # a sound card keeps nothing it has played
            await asyncio.sleep(SAMPLE_S)

    sampler = asyncio.create_task(sample_forever())
    try:
        for item in itertools.cycle(items):
            if clock() - began >= minutes * 60:
                break
            barge_in = hasattr(item, "interruption")
            question = item.question if barge_in else item
            speech = np.concatenate([np.zeros(round(LEAD_S * INPUT_RATE), np.int16), question.pcm])
            t0, heard_before = clock(), len(audio_starts)

            def first_audio(t0: float = t0, n: int = heard_before) -> float | None:
                return audio_starts[n] - t0 if len(audio_starts) > n else None

            cut_in = (item.after_s, item.interruption.pcm) if barge_in else None
            await feed(engine, speech, t0, clock, first_audio=first_audio, cut_in=cut_in)
            result.items += 1
    finally:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        result.samples.append(_sample(clock() - began, len(engine.turns)))
        await engine.aclose()
    return result


def format_soak(result: SoakResult) -> str:
    v = result.verdict()
    g = v["growth_second_half"]
    return "\n".join(
        [
            f"soak: {result.minutes:g} min, {v['items']} items, {v['turns']} turns",
            f"  RSS {v['rss_mb_start']} -> {v['rss_mb_end']} MB over the second half, slope "
            f"{v['rss_slope_mb_per_hour']} MB/h: {'flat' if v['memory_flat'] else 'GROWING'}",
            f"  growth over the second half: {g['tasks']} tasks, {g['threads']} threads, "
            f"{g['open_files']} open files: {'no leak' if v['no_leak'] else 'LEAK'}",
        ]
    )
