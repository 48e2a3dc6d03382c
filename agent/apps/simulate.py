"""`voxroom simulate`: the agent's whole voice pipeline on a WAV file, no LiveKit.

The input is fed in real time as 20 ms frames, then silence until the agent has finished
(at most --tail-s after the input ends). Events go to a JSON-lines file with `t` in seconds
on the input's timeline; the agent's audio goes to a WAV on the same timeline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.engines import FRAME_SAMPLES, INPUT_RATE, LanguageModel, SpeechToText, TextToSpeech

if TYPE_CHECKING:
    from agent.adapters.turn_detector import TurnDetector
    from agent.audio.sinks import TimelineSink
    from agent.config import LLMSettings
    from agent.events import VoiceEvent
    from agent.voice.engine import TurnEngine
    from state_machine.options import TurnOptions

OUTPUT_RATE = 16_000  # AGENT.wav shares the input's timeline and rate


class InputError(ValueError):
    pass


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", type=Path, help="the user's audio (any rate and channel count)")
    p.add_argument("--events", type=Path, required=True, help="JSON-lines event log to write")
    p.add_argument("--audio-out", type=Path, required=True, help="WAV of the agent's voice")
    add_llm_arguments(p, default="local", llm_help="local | openai:MODEL | script:PATH")
    p.add_argument("--tail-s", type=float, default=5.0, help="longest wait after the input ends")


def add_llm_arguments(p: argparse.ArgumentParser, *, default: str | None, llm_help: str) -> None:
    """The options that name the LLM (`open_llm_of` opens it); `voxroom bench` has them too."""
    p.add_argument("--llm", default=default, help=llm_help)
    p.add_argument("--llm-base-url", default=None, help="base URL for openai:MODEL")
    p.add_argument(
        "--script-ttft-ms", type=float, default=150.0, help="scripted LLM: time to first token"
    )
    p.add_argument("--script-words-per-s", type=float, default=15.0)


def open_llm_of(
    settings: LLMSettings, args: argparse.Namespace
) -> AbstractAsyncContextManager[LanguageModel]:
    """The LLM that the options of `add_llm_arguments` name, open for the duration."""
    from agent.adapters.providers import open_llm

    return open_llm(
        settings,
        args.llm,
        base_url=args.llm_base_url,
        script_ttft_ms=args.script_ttft_ms,
        script_words_per_s=args.script_words_per_s,
    )


def timeline_engine(
    stt: SpeechToText,
    llm: LanguageModel,
    tts: TextToSpeech,
    *,
    system_prompt: str,
    t0: float,
    clock: Callable[[], float],
    on_event: Callable[[VoiceEvent], None],
    partials: str = "listening",
    options: TurnOptions | None = None,
    turn_detector: TurnDetector | None = None,
    phone_line: bool = False,
) -> tuple[TurnEngine, TimelineSink]:
    """A new conversation's turn engine whose voice plays onto a timeline (OUTPUT_RATE) that
    starts at `t0` on `clock`: the input's timeline, as this command and the bench's simulate
    path and soak run it. The caller starts and closes the engine."""
    from agent.adapters.llm.history import ChatHistory
    from agent.audio.sinks import TimelineSink
    from agent.voice.engine import TurnEngine

    sink = TimelineSink(OUTPUT_RATE, t0, clock=clock)
    engine = TurnEngine(
        stt=stt,
        llm=llm,
        tts=tts,
        sink=sink,
        clock=clock,
        on_event=on_event,
        history=ChatHistory(system_prompt),
        partials=partials,
        options=options,
        turn_detector=turn_detector,
        phone_line=phone_line,
    )
    return engine, sink


def read_input(path: Path) -> np.ndarray:
    """Any WAV/FLAC/OGG -> int16 mono at 16 kHz."""
    import soundfile as sf
    import soxr

    try:
        audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception as e:  # soundfile raises several types for unreadable input
        raise InputError(f"cannot read {path}: {e}") from e
    if audio.size == 0:
        raise InputError(f"{path} has no audio")
    mono = np.nan_to_num(audio.mean(axis=1))
    if rate != INPUT_RATE:
        mono = soxr.resample(mono, rate, INPUT_RATE, quality="HQ")
    return (np.clip(mono, -1.0, 1.0) * 32767).astype(np.int16)


def run(args: argparse.Namespace) -> int:
    try:
        pcm = read_input(args.input)
    except InputError as e:
        print(f"voxroom simulate: {e}", file=sys.stderr)
        return 2
    import soundfile as sf

    events, audio, turns = asyncio.run(simulate(pcm, args))
    sf.write(str(args.audio_out), audio, OUTPUT_RATE, subtype="PCM_16")
    with open(args.events, "w", encoding="utf-8") as f:
        for ev in sorted(events, key=lambda e: e["t"]):
            f.write(json.dumps(ev) + "\n")
    for turn in turns:
        print(json.dumps(turn))
    return 0


async def simulate(
    pcm: np.ndarray, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], np.ndarray, list[dict[str, Any]]]:
    from agent.adapters.providers import load_speech_engines
    from agent.adapters.turn_detector import load_detector
    from agent.config import load_settings
    from agent.events import StateChanged, event_json
    from state_machine.options import TurnOptions

    settings = load_settings(getattr(args, "config", None))
    stt, tts = await asyncio.to_thread(load_speech_engines, OUTPUT_RATE, settings.stt, settings.tts)
    detector = await asyncio.to_thread(load_detector, settings.turn.detector)
    events: list[dict[str, Any]] = []
    async with open_llm_of(settings.llm, args) as llm:
        clock = time.monotonic
        t0 = clock() + 0.05  # the input's first sample plays at t0

        def on_event(event: VoiceEvent) -> None:
            events.append(event_json(event, origin=t0))  # on the input's timeline

        engine, sink = timeline_engine(
            stt,
            llm,
            tts,
            system_prompt=settings.llm.system_prompt,
            t0=t0,
            clock=clock,
            on_event=on_event,
            partials=settings.stt.partials,
            options=TurnOptions(duck=settings.turn.barge_in == "duck"),
            turn_detector=detector,
        )
        await engine.start()
        events.clear()  # the filler synthesis happened before the timeline began
        on_event(StateChanged(t0, engine.state))
        try:
            end_s = await _feed(engine, pcm, t0, clock, args.tail_s)
        finally:
            await engine.aclose()
    return events, sink.render(int(end_s * OUTPUT_RATE)), [t.as_event() for t in engine.turns]


async def _feed(engine: Any, pcm: np.ndarray, t0: float, clock: Any, tail_s: float) -> float:
    """Push the input in real time, then silence until the agent is idle; returns the
    timeline length in seconds."""
    n_frames = -(-len(pcm) // FRAME_SAMPLES)
    padded = np.zeros(n_frames * FRAME_SAMPLES, np.int16)
    padded[: len(pcm)] = pcm
    silence = np.zeros(FRAME_SAMPLES, np.int16)
    frame_s = FRAME_SAMPLES / INPUT_RATE
    input_s = n_frames * frame_s
    idle_since: float | None = None
    i = 0
    while True:
        target = t0 + (i + 1) * frame_s
        await asyncio.sleep(max(0.0, target - clock()))
        in_input = i < n_frames
        engine.push_frame(
            padded[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES] if in_input else silence
        )
        i += 1
        t = i * frame_s
        if in_input:
            continue
        idle_since = (idle_since or t) if engine.idle else None
        if (idle_since is not None and t - idle_since >= 0.3) or t - input_s >= tail_s:
            return t
