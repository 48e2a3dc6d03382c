"""Building the engines from settings: the speech engines once per process (the STT chosen by
`stt.provider`), the LLM client once per process (one keep-alive connection pool), and the
bundled llama.cpp server when the LLM is local."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator

from agent.config import LLMSettings, STTSettings, TTSSettings
from agent.engines import LanguageModel, SpeechToText, TextToSpeech

log = logging.getLogger(__name__)


def load_speech_engines(
    output_rate: int,
    stt_settings: STTSettings | None = None,
    tts_settings: TTSSettings | None = None,
) -> tuple[SpeechToText, TextToSpeech]:
    """Load and warm the STT named by `stt_settings` (default: the bundled Whisper) and the TTS
    named by `tts_settings` (default: Piper) (blocking: call from prewarm or a thread)."""
    return load_stt(stt_settings or STTSettings()), load_tts(output_rate, tts_settings)


def load_stt(settings: STTSettings) -> SpeechToText:
    """Whisper tiny.en loaded and warmed, or the Deepgram client (nothing to load: its
    reachability is checked at worker start, agent.provider_checks)."""
    if settings.provider == "deepgram":
        from agent.stt_deepgram import DeepgramSTT

        return DeepgramSTT.from_settings(settings)
    from agent.stt_whisper import WhisperSTT

    stt = WhisperSTT()
    stt.load()
    stt.warmup()
    return stt


def load_tts(output_rate: int, settings: TTSSettings | None = None) -> TextToSpeech:
    """Piper loaded and warmed, or the OpenAI-compatible speech client (nothing to load)."""
    if settings is not None and settings.provider == "openai":
        from tts.openai_tts import OpenAITTS

        return OpenAITTS(base_url=settings.base_url, api_key=settings.api_key,
                         model=settings.model, voice=settings.voice, output_rate=output_rate)
    from tts.piper_tts import PiperTTS

    tts = PiperTTS(output_rate=output_rate)
    tts.load()
    tts.warmup()
    return tts


@contextlib.asynccontextmanager
async def open_llm(
    settings: LLMSettings,
    spec: str = "",
    *,
    base_url: str | None = None,
    script_ttft_ms: float = 150.0,
    script_words_per_s: float = 15.0,
) -> AsyncIterator[LanguageModel]:
    """The LLM named by `spec` (`local`, `openai:MODEL`, `script:PATH`; empty: the settings'
    provider). A local spec starts the bundled llama.cpp server for the duration."""
    from agent.llm_factory import make_llm_from_spec, parse_llm_spec

    spec = spec or ("local" if settings.provider == "local" else f"openai:{settings.model}")
    if base_url:
        settings = dataclasses.replace(settings, base_url=base_url)
    server = None
    local_url = None
    if parse_llm_spec(spec)[0] == "local":
        from agent.llm_local import LocalLLMServer

        server = LocalLLMServer()
        local_url = await asyncio.to_thread(server.start)
        await asyncio.to_thread(server.warm, settings.system_prompt)
    llm = make_llm_from_spec(
        spec,
        settings,
        local_base_url=local_url,
        script_ttft_ms=script_ttft_ms,
        script_words_per_s=script_words_per_s,
    )
    try:
        yield llm
    finally:
        aclose = getattr(llm, "aclose", None)
        if aclose is not None:
            await aclose()
        if server is not None:
            await asyncio.to_thread(server.stop)
