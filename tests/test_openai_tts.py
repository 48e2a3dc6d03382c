"""tts/openai_tts.py against the OpenAI-compatible speech TEST DOUBLE
(agent/testing/tts_server_double.py): audio at the requested rate, clear errors, cancellation that
closes the request, and its selection by the settings."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest

from agent.adapters.providers import load_tts
from agent.config import ConfigError, TTSSettings, load_settings
from agent.testing.tts_server_double import PCM_RATE, TTSServerDouble
from tts.openai_tts import OpenAITTS, TTSError


async def tone_speaker(text: str) -> np.ndarray:
    """A speaker for the double: 0.1 s of silence, 0.5 s of 440 Hz, 0.1 s of silence."""
    t = np.arange(PCM_RATE // 2) / PCM_RATE
    tone = (10_000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    quiet = np.zeros(PCM_RATE // 10, np.int16)
    return np.concatenate([quiet, tone, quiet])


async def _wait_for(condition: Callable[[], bool], timeout_s: float = 2.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110 (the double offers no event to wait on)
            await asyncio.sleep(0.01)


async def test_speech_comes_back_trimmed_at_the_output_rate() -> None:
    async with TTSServerDouble(tone_speaker, ttfb_ms=(0, 0), chunk_ms=20) as double:
        tts = OpenAITTS(base_url=double.url, model="tts-1", voice="nova", output_rate=48_000)
        try:
            audio = await tts.synthesize("Hello there.")
            again = await tts.synthesize("  ")
        finally:
            await tts.aclose()
    assert tts.sample_rate == 48_000 and audio.dtype == np.int16
    # 0.5 s of tone plus at most 30 ms of kept silence at each end, at 48 kHz
    assert 0.49 * 48_000 <= audio.size <= 0.57 * 48_000
    assert np.abs(audio).max() > 8_000 and audio[0] == 0 and audio[-1] == 0  # faded edges
    assert again.size == 0 and len(double.requests) == 1  # no request for empty text
    assert double.requests[0] == {
        "model": "tts-1",
        "input": "Hello there.",
        "voice": "nova",
        "response_format": "pcm",
    }


@pytest.mark.slow
async def test_the_double_speaks_real_speech_with_piper() -> None:
    async with TTSServerDouble(ttfb_ms=(0, 0)) as double:
        tts = OpenAITTS(base_url=double.url, output_rate=16_000)
        try:
            audio = await tts.synthesize("The capital of Australia is Canberra.")
        finally:
            await tts.aclose()
    assert 1.0 * 16_000 < audio.size < 4.0 * 16_000
    assert np.sqrt(np.mean(audio.astype(np.float64) ** 2)) > 500


async def test_a_server_error_is_a_tts_error_with_the_status() -> None:
    async with TTSServerDouble(tone_speaker) as double:
        double.fail_status = 500
        tts = OpenAITTS(base_url=double.url)
        try:
            with pytest.raises(TTSError, match=r"HTTP 500: .*told to fail"):
                await tts.synthesize("Hello.")
        finally:
            await tts.aclose()


async def test_an_unreachable_server_is_a_tts_error_at_once(dead_port: int) -> None:
    tts = OpenAITTS(base_url=f"http://127.0.0.1:{dead_port}/v1")
    try:
        async with asyncio.timeout(3):
            with pytest.raises(TTSError, match="cannot reach"):
                await tts.synthesize("Hello.")
    finally:
        await tts.aclose()


async def test_a_request_over_the_cap_is_a_tts_error() -> None:
    async with TTSServerDouble(tone_speaker, ttfb_ms=(1000, 1000)) as double:
        tts = OpenAITTS(base_url=double.url, max_duration_s=0.2)
        try:
            with pytest.raises(TTSError, match="timed out"):
                await tts.synthesize("Hello.")
        finally:
            await tts.aclose()
        await _wait_for(lambda: double.aborted == 1)


async def test_cancelling_closes_the_request() -> None:
    async with TTSServerDouble(tone_speaker, ttfb_ms=(5000, 5000)) as double:
        tts = OpenAITTS(base_url=double.url)
        try:
            task = asyncio.create_task(tts.synthesize("Hello."))
            await _wait_for(lambda: len(double.requests) == 1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await _wait_for(lambda: double.aborted == 1)  # the server saw the client go
            # the pool still works after a cancelled request
            double.ttfb_ms = (0.0, 0.0)
            assert (await tts.synthesize("Again.")).size > 0
        finally:
            await tts.aclose()


def test_settings_select_the_openai_speech_client() -> None:
    env = {
        "VOXROOM_TTS_PROVIDER": "openai",
        "VOXROOM_TTS_BASE_URL": "http://127.0.0.1:9/v1",
        "VOXROOM_TTS_VOICE": "nova",
        "VOXROOM_CONFIG": "/nonexistent.toml",
    }
    settings = load_settings(env=env)
    assert settings.tts == TTSSettings(
        provider="openai", base_url="http://127.0.0.1:9/v1", voice="nova"
    )
    tts = load_tts(24_000, settings.tts)
    assert isinstance(tts, OpenAITTS) and tts.sample_rate == 24_000
    assert tts.url == "http://127.0.0.1:9/v1/audio/speech" and tts.voice == "nova"
    assert load_settings(env=env | {"OPENAI_API_KEY": "sk-x"}).tts.api_key == "sk-x"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"VOXROOM_TTS_PROVIDER": "openai"}, "OPENAI_API_KEY is required"),
        ({"VOXROOM_TTS_PROVIDER": "openai", "VOXROOM_TTS_BASE_URL": "ftp://x"}, "http"),
        (
            {"VOXROOM_TTS_PROVIDER": "openai", "OPENAI_API_KEY": "k", "VOXROOM_TTS_VOICE": ""},
            "tts.voice",
        ),
        ({"VOXROOM_TTS_PROVIDER": "elevenlabs"}, "'piper' or 'openai'"),
    ],
)
def test_openai_speech_settings_are_checked(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env=env | {"VOXROOM_CONFIG": "/nonexistent.toml"})
