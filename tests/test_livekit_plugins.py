"""voxroom's engines as livekit-agents plugins: what AgentSession calls reaches the engine in
the engine's format, the results come back in livekit's, cancellation reaches the engine, and
(slow) the real Whisper and Piper understand each other through the plugins."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from livekit import rtc
from livekit.agents import stt as lk_stt

from agent.livekit_plugins import PiperTTSPlugin, WhisperSTTPlugin, to_pcm16k
from state_machine.similarity import text_similarity


class RecordingSTT:
    """TEST DOUBLE of agent.engines.SpeechToText: remembers what it was given."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.heard: list[np.ndarray] = []

    async def transcribe(self, pcm: np.ndarray) -> str:
        self.heard.append(pcm)
        return self.text


class SlowTTS:
    """TEST DOUBLE of agent.engines.TextToSpeech: a ramp per call, optionally never ending."""

    sample_rate = 24_000

    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.started = asyncio.Event()
        self.cancelled = False

    async def synthesize(
        self, text: str, *, left_context: str = "", right_context: str = ""
    ) -> np.ndarray:
        self.started.set()
        try:
            if self.hang:
                await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return np.arange(len(text) * 100, dtype=np.int16)


def frames(pcm: np.ndarray, rate: int, channels: int, size: int) -> list[rtc.AudioFrame]:
    inter = np.repeat(pcm[:, None], channels, axis=1).reshape(-1)
    per = size * channels
    return [
        rtc.AudioFrame(
            inter[i : i + per].tobytes(), rate, channels, len(inter[i : i + per]) // channels
        )
        for i in range(0, len(inter), per)
    ]


def test_audio_buffers_reach_the_stt_as_16k_mono() -> None:
    t = np.arange(48_000) / 48_000
    tone = (np.sin(2 * np.pi * 440 * t) * 10_000).astype(np.int16)
    pcm = to_pcm16k(frames(tone, 48_000, 2, 480))
    assert pcm.dtype == np.int16 and len(pcm) == 16_000
    spectrum = np.abs(np.fft.rfft(pcm.astype(float)))
    assert abs(int(np.argmax(spectrum)) - 440) <= 2  # same pitch after resampling and downmix
    assert np.abs(pcm).max() == pytest.approx(10_000, rel=0.05)


async def test_recognize_returns_the_engine_transcript_as_a_final() -> None:
    engine = RecordingSTT("hello there")
    plugin = WhisperSTTPlugin(engine)
    assert not plugin.capabilities.streaming
    ev = await plugin.recognize(frames(np.ones(3200, np.int16), 16_000, 1, 160))
    assert ev.type is lk_stt.SpeechEventType.FINAL_TRANSCRIPT
    assert ev.alternatives[0].text == "hello there"
    assert ev.alternatives[0].language == "en"
    [heard] = engine.heard
    assert len(heard) == 3200


async def test_with_vad_is_livekit_s_stream_adapter() -> None:
    from livekit.agents import inference

    adapter = WhisperSTTPlugin(RecordingSTT("x")).with_vad(inference.VAD(model="silero"))
    assert isinstance(adapter, lk_stt.StreamAdapter)
    assert adapter.capabilities.streaming


async def test_synthesize_gives_the_engine_audio_at_its_rate() -> None:
    plugin = PiperTTSPlugin(SlowTTS())
    assert plugin.sample_rate == 24_000 and plugin.num_channels == 1
    frame = await plugin.synthesize("Hello.").collect()
    assert frame.sample_rate == 24_000
    got = np.frombuffer(frame.data, np.int16)
    assert np.array_equal(got[:600], np.arange(600, dtype=np.int16))


async def test_closing_the_stream_cancels_the_synthesis() -> None:
    engine = SlowTTS(hang=True)
    stream = PiperTTSPlugin(engine).synthesize("This never finishes.")
    await asyncio.wait_for(engine.started.wait(), 5)
    await asyncio.wait_for(stream.aclose(), 5)
    assert engine.cancelled


@pytest.mark.slow
async def test_real_piper_speech_is_understood_by_real_whisper() -> None:
    from agent.livekit_plugins import load_plugins

    stt, tts = await asyncio.to_thread(load_plugins, 48_000)
    frame = await tts.synthesize("What is the capital of France?").collect()
    assert frame.sample_rate == 48_000
    ev = await stt.recognize(frame)
    # Piper samples noise on every synthesis: about one take in 40 comes out as
    # "capital of friend" to Whisper tiny.en, so one misheard word is allowed.
    heard = ev.alternatives[0].text
    assert text_similarity(heard, "What is the capital of France?") >= 0.8, heard
