"""The OpenAI-compatible transcription client (agent/adapters/stt/openai_stt.py) against a loopback
double of the endpoint: with the bundled Whisper behind it (real speech), or a stand-in that
names the audio by its length (the client's own bookkeeping)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agent.adapters.providers import load_stt
from agent.adapters.stt.openai_stt import OpenAISTT, STTRequestError
from agent.config import STTSettings
from agent.engines import FRAME_SAMPLES, INPUT_RATE
from agent.testing.transcription_server_double import TranscriptionServerDouble
from agent.worker.provider_checks import ProviderError, check_openai_stt
from bench.measure import wait_until
from bench.speech import with_silence
from bench.wer import word_errors


async def by_length(pcm: np.ndarray) -> str:
    return f"{len(pcm)} samples"


def tone(seconds: float) -> np.ndarray:
    t = np.arange(round(seconds * INPUT_RATE)) / INPUT_RATE
    return (8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def quiet(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * INPUT_RATE), np.int16)


def push_frames(stream, pcm: np.ndarray) -> None:
    for start in range(0, len(pcm), FRAME_SAMPLES):
        stream.push(pcm[start : start + FRAME_SAMPLES])


@pytest.mark.slow
async def test_real_speech_is_transcribed_by_the_server_and_the_pause_decode_is_the_final() -> None:
    from agent.adapters.stt.whisper import WhisperSTT
    from tts.piper_tts import PiperTTS

    whisper = WhisperSTT()
    await asyncio.to_thread(whisper.load)
    piper = PiperTTS(output_rate=INPUT_RATE)
    await asyncio.to_thread(piper.load)
    sentence = "Remind me to call my mother tomorrow morning."
    speech = with_silence(await piper.synthesize(sentence), 0.2, 0.3)
    async with TranscriptionServerDouble(whisper.transcribe) as server:
        stt = load_stt(
            STTSettings(provider="openai", base_url=server.url, api_key="k", model="large-v3")
        )
        assert isinstance(stt, OpenAISTT)
        stream = stt.stream()
        try:
            push_frames(stream, speech)
            candidate = await stream.flush()
            push_frames(stream, quiet(0.3))  # the endpoint silence: no new words
            final = await stream.finalize()
        finally:
            await stream.aclose()
    assert candidate == final
    errors = word_errors(sentence, final)  # tiny.en behind the double may mishear a word
    assert errors["substitutions"] + errors["deletions"] + errors["insertions"] <= 1, final
    assert len(server.requests) == 1
    request = server.requests[0]
    assert (request["model"], request["language"], request["rate"]) == ("large-v3", "en", 16_000)
    assert request["authorization"] == "Bearer k"


async def test_speech_after_a_candidate_is_sent_again_whole() -> None:
    async with TranscriptionServerDouble(by_length) as server:
        stream = OpenAISTT(base_url=server.url).stream()
        try:
            push_frames(stream, tone(0.5))
            assert await stream.flush() == "8000 samples"
            push_frames(stream, tone(0.3))
            assert await stream.finalize() == "12800 samples"
            push_frames(stream, tone(0.2))  # the next utterance starts from nothing
            assert await stream.finalize() == "3200 samples"
        finally:
            await stream.aclose()
    assert [r["samples"] for r in server.requests] == [8000, 12800, 3200]


async def test_a_failed_request_is_a_clear_error_and_the_next_one_is_sent_anew() -> None:
    async with TranscriptionServerDouble(by_length) as server:
        stream = OpenAISTT(base_url=server.url).stream()
        try:
            push_frames(stream, tone(0.5))
            server.fail_status = 503
            with pytest.raises(STTRequestError, match="HTTP 503"):
                await stream.flush()
            server.fail_status = None
            assert await stream.finalize() == "8000 samples"
        finally:
            await stream.aclose()
    assert len(server.requests) == 2


async def test_discarding_the_utterance_answers_a_waiting_candidate_with_nothing() -> None:
    async with TranscriptionServerDouble(by_length) as server:
        server.hold = asyncio.Event()
        stream = OpenAISTT(base_url=server.url).stream()
        try:
            push_frames(stream, tone(0.5))
            candidate = asyncio.create_task(stream.flush())
            assert await wait_until(lambda: server.requests, 10.0)
            stream.discard()
            assert await candidate == ""
            server.hold.set()
            push_frames(stream, tone(0.2))
            assert await stream.finalize() == "3200 samples"
        finally:
            await stream.aclose()


async def test_bad_input_and_a_closed_stream_are_refused() -> None:
    async with TranscriptionServerDouble(by_length) as server:
        stream = OpenAISTT(base_url=server.url).stream()
        with pytest.raises(TypeError, match="int16"):
            stream.push(np.zeros(320, np.float32))
        assert await stream.finalize() == ""  # nothing pushed: no request
        partials = stream.partials()
        await stream.aclose()
        assert [p async for p in partials] == []
        with pytest.raises(RuntimeError, match="closed"):
            stream.push(np.zeros(320, np.int16))
    assert server.requests == []


async def test_the_start_check_names_a_server_that_does_not_answer() -> None:
    async with TranscriptionServerDouble(by_length) as server:
        ok = await check_openai_stt(STTSettings(provider="openai", base_url=server.url))
        assert "transcribed a test clip with whisper-1" in ok
        url = server.url
    with pytest.raises(ProviderError, match=r"stt: cannot reach .*check stt\.base_url"):
        await check_openai_stt(STTSettings(provider="openai", base_url=url), timeout_s=2.0)


class _ToneTTS:
    """TEST DOUBLE of agent.engines.TextToSpeech: 100 ms of tone per word."""

    sample_rate = INPUT_RATE

    async def synthesize(
        self, text: str, *, left_context: str = "", right_context: str = ""
    ) -> np.ndarray:
        return tone(0.1 * max(1, len(text.split())))


async def test_the_turn_engine_answers_what_the_server_heard() -> None:
    from agent.adapters.llm.history import ChatHistory
    from agent.audio.sinks import TimelineSink
    from agent.events import event_json
    from agent.testing.scripted_llm import ScriptedLLM
    from agent.voice.engine import TurnEngine
    from bench.speech import espeak

    question, reply = "What is the capital of France?", "Paris, on the Seine."

    async def heard(pcm: np.ndarray) -> str:
        return question if len(pcm) > INPUT_RATE else "What"

    pcm = np.concatenate([quiet(0.5), espeak(question), quiet(2.0)])
    async with TranscriptionServerDouble(heard) as server:
        loop = asyncio.get_running_loop()
        events: list[dict] = []
        engine = TurnEngine(
            stt=OpenAISTT(base_url=server.url),
            llm=ScriptedLLM([reply], sleep=asyncio.sleep),
            tts=_ToneTTS(),
            sink=TimelineSink(INPUT_RATE, 0.0, clock=loop.time),
            history=ChatHistory("system"),
            clock=loop.time,
            partials="listening",
            on_event=lambda event: events.append(event_json(event)),
        )
        await engine.start()
        t0 = loop.time()
        for i in range(len(pcm) // FRAME_SAMPLES):
            await asyncio.sleep(max(0.0, t0 + (i + 1) * FRAME_SAMPLES / INPUT_RATE - loop.time()))
            engine.push_frame(pcm[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES])
        await engine.aclose()
    [turn] = [e for e in events if e["type"] == "turn"]
    assert (turn["user_text"], turn["agent_text"]) == (question, reply)
    assert [e["text"] for e in events if e["type"] == "transcript" and e["final"]] == [question]
    assert all(r["model"] == "whisper-1" for r in server.requests)
