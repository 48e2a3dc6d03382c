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
from pathlib import Path
from typing import Any

import numpy as np

from agent.engines import FRAME_SAMPLES, INPUT_RATE

OUTPUT_RATE = 16_000  # AGENT.wav shares the input's timeline and rate


class InputError(ValueError):
    pass


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", type=Path, help="the user's audio (any rate and channel count)")
    p.add_argument("--events", type=Path, required=True, help="JSON-lines event log to write")
    p.add_argument("--audio-out", type=Path, required=True, help="WAV of the agent's voice")
    p.add_argument("--llm", default="local", help="local | openai:MODEL | script:PATH")
    p.add_argument("--llm-base-url", default=None, help="base URL for openai:MODEL")
    p.add_argument("--script-ttft-ms", type=float, default=150.0)
    p.add_argument("--script-words-per-s", type=float, default=15.0)
    p.add_argument("--tail-s", type=float, default=5.0, help="longest wait after the input ends")


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
    from agent.adapters.llm.history import ChatHistory
    from agent.adapters.providers import load_speech_engines, open_llm
    from agent.config import load_settings
    from agent.events import StateChanged, VoiceEvent, event_json
    from agent.voice.engine import TurnEngine

    settings = load_settings(getattr(args, "config", None))
    from agent.adapters.turn_detector import load_detector

    stt, tts = await asyncio.to_thread(load_speech_engines, OUTPUT_RATE, settings.stt, settings.tts)
    detector = await asyncio.to_thread(load_detector, settings.turn.detector)
    events: list[dict[str, Any]] = []
    async with open_llm(
        settings.llm,
        args.llm,
        base_url=args.llm_base_url,
        script_ttft_ms=args.script_ttft_ms,
        script_words_per_s=args.script_words_per_s,
    ) as llm:
        clock = time.monotonic
        t0 = clock() + 0.05  # the input's first sample plays at t0

        def on_event(event: VoiceEvent) -> None:
            line = event_json(event)
            line["t"] = round(event.t - t0, 3)  # on the input's timeline
            events.append(line)

        from agent.audio.sinks import TimelineSink
        from state_machine.options import TurnOptions

        sink = TimelineSink(OUTPUT_RATE, t0, clock=clock)
        engine = TurnEngine(
            stt=stt,
            llm=llm,
            tts=tts,
            sink=sink,
            clock=clock,
            on_event=on_event,
            history=ChatHistory(settings.llm.system_prompt),
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
