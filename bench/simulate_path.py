"""The simulate path of `voxroom bench`: each corpus item through the turn engine in this
process, in real time, no network (what `voxroom simulate` does for one WAV).

The speech engines (and a real LLM) are loaded once for the run; every item gets a fresh
conversation. The agent's voice goes to a timeline that plays in real time, and the listener's
figures are read off that timeline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.apps.simulate import OUTPUT_RATE, timeline_engine
from agent.engines import FRAME_SAMPLES, INPUT_RATE, LanguageModel
from bench.measure import (
    HeardAudio,
    ItemClock,
    ItemResult,
    ProcessUsage,
    cut_in_ms,
    cut_off,
    measure_overlay,
    ms,
)
from bench.wer import final_transcript

if TYPE_CHECKING:
    from agent.audio.sinks import TimelineSink
    from agent.events import VoiceEvent
    from agent.voice.engine import TurnEngine

    # How an item's conversation is made: (its LLM, its timeline's t0 on time.monotonic, its
    # events' sink) -> a fresh turn engine and the timeline it plays onto.
    NewConversation = Callable[
        [LanguageModel, float, Callable[[VoiceEvent], None]], tuple[TurnEngine, TimelineSink]
    ]

LEAD_S = 0.5  # silence before the user speaks
IDLE_S = 0.3  # the agent is done once it has been idle this long
TAIL_S = 20.0  # longest wait for the agent after the user's last word


async def run_item(
    item: Any,
    *,
    llm: LanguageModel,
    new_conversation: NewConversation,
    usage: ProcessUsage,
) -> ItemResult:
    """Say one corpus item (bench.corpus.Utterance or BargeIn, of any kind) to a fresh turn
    engine, one that `new_conversation` makes with `llm`."""
    from agent.events import AudioStart, Transcript

    barge_in = hasattr(item, "interruption")
    question = item.question if barge_in else item
    clock = time.monotonic
    t0 = clock() + 0.2  # covers the filler's synthesis in start(); the input starts in silence
    audio_starts: list[float] = []
    finals: list[str] = []  # the user transcripts the agent publishes as final

    def on_event(event: VoiceEvent) -> None:
        match event:
            case AudioStart(t=t):
                audio_starts.append(t - t0)
            case Transcript(final=True, text=text):
                finals.append(text)

    engine, sink = new_conversation(llm, t0, on_event)
    spent = ItemClock(usage)
    await engine.start()
    speech = np.concatenate([np.zeros(round(LEAD_S * INPUT_RATE), np.int16), question.pcm])
    cut_in = (item.after_s, item.interruption.pcm) if barge_in else None
    try:
        end_s, cut_in_at = await feed(
            engine,
            speech,
            t0,
            clock,
            first_audio=lambda: audio_starts[0] if audio_starts else None,
            cut_in=cut_in,
        )
    finally:
        await engine.aclose()
    heard = HeardAudio(OUTPUT_RATE, [(0.0, sink.render(int(end_s * OUTPUT_RATE)))])
    spoke = LEAD_S + question.speech_start / INPUT_RATE
    said = LEAD_S + question.speech_end / INPUT_RATE
    turns = [t.as_event() for t in engine.turns]
    answer = turns[0] if barge_in else (turns[-1] if turns else None)
    result = ItemResult(
        item=item.id,
        voice=question.voice,
        kind=item.kind,
        stages=dict(answer["latency_ms"]) if answer else {},
        voice_to_voice_ms=ms(said, heard.first_audible_after(said)),
        turns=len(turns),
        premature=cut_off(heard, spoke, said),
        cut_in_ms=cut_in_ms(heard, spoke, said),
        heard_user=answer["user_text"] if answer else "",
        said="" if barge_in else question.text,
        transcript=final_transcript(finals),
    )
    if barge_in and cut_in_at is not None:
        over = item.interruption
        measure_overlay(
            result,
            heard,
            cut_in_at + over.speech_start / INPUT_RATE,
            cut_in_at + over.speech_end / INPUT_RATE,
        )
    spent.finish(result)
    return result


async def feed(
    engine: Any,
    speech: np.ndarray,
    t0: float,
    clock: Callable[[], float],
    *,
    first_audio: Callable[[], float | None],
    cut_in: tuple[float, np.ndarray] | None = None,
    tail_s: float = TAIL_S,
) -> tuple[float, float | None]:
    """Push `speech` in real time 20 ms frames, then silence; with `cut_in` = (after_s, pcm),
    start saying pcm `after_s` after the agent's first audio. Returns the timeline's length
    and when the cut-in began (timeline seconds), once the agent is idle or `tail_s` after
    the last of the user's audio."""
    frame_s = FRAME_SAMPLES / INPUT_RATE
    silence = np.zeros(FRAME_SAMPLES, np.int16)
    source, pos = speech, 0
    cut_in_at: float | None = None
    last_input = len(speech) / INPUT_RATE
    idle_since: float | None = None
    i = 0
    while True:
        t = i * frame_s
        if cut_in is not None and cut_in_at is None and source is speech and pos >= len(speech):
            started = first_audio()
            if started is not None and t >= started + cut_in[0]:
                source, pos, cut_in_at = cut_in[1], 0, t
                last_input = t + len(source) / INPUT_RATE
        frame = source[pos : pos + FRAME_SAMPLES]
        pos += FRAME_SAMPLES
        if len(frame) < FRAME_SAMPLES:
            frame = np.concatenate([frame, silence[len(frame) :]])
        await asyncio.sleep(max(0.0, t0 + t + frame_s - clock()))
        engine.push_frame(frame)
        i += 1
        t = i * frame_s
        waiting = cut_in is not None and cut_in_at is None
        if t < last_input or (waiting and t - last_input < tail_s):
            continue
        idle_since = (idle_since or t) if engine.idle else None
        if (idle_since is not None and t - idle_since >= IDLE_S) or t - last_input >= tail_s:
            return t, cut_in_at


async def run_simulate(
    items: Sequence[Any],
    *,
    llm_for: Callable[[Any], LanguageModel],
    system_prompt: str,
    on_item: Callable[[ItemResult], None],
    caller: str = "browser",
) -> list[ItemResult]:
    """Every item in turn; `llm_for(item)` gives the LLM for the item's conversation. A "sip"
    `caller` says each item over a phone line (bench/sip_caller.py), and the engine hears it
    as the agent hears a phone caller (TurnEngine's `phone_line`)."""
    from agent.adapters.providers import load_speech_engines
    from agent.adapters.turn_detector import load_detector
    from agent.config import load_settings
    from bench.sip_caller import over_phone_line

    settings = load_settings()
    stt, tts = await asyncio.to_thread(load_speech_engines, OUTPUT_RATE, settings.stt)
    if caller == "sip":
        items = [over_phone_line(item) for item in items]
    detector = await asyncio.to_thread(load_detector, settings.turn.detector)

    def new_conversation(
        llm: LanguageModel, t0: float, on_event: Callable[[VoiceEvent], None]
    ) -> tuple[TurnEngine, TimelineSink]:
        return timeline_engine(
            stt,
            llm,
            tts,
            system_prompt=system_prompt,
            t0=t0,
            clock=time.monotonic,
            on_event=on_event,
            partials=settings.stt.partials,
            turn_detector=detector,
            phone_line=caller == "sip",
        )

    usage = ProcessUsage()
    results = []
    for item in items:
        result = await run_item(
            item, llm=llm_for(item), new_conversation=new_conversation, usage=usage
        )
        on_item(result)
        results.append(result)
    return results
