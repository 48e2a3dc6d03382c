"""Building the engines from settings: the speech models once per process, the LLM client once
per process (one keep-alive connection pool), and the bundled llama.cpp server when the LLM is
local."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from agent.config import LLMSettings
from agent.engines import LanguageModel, SpeechToText, TextToSpeech

log = logging.getLogger(__name__)


def load_speech_engines(output_rate: int) -> tuple[SpeechToText, TextToSpeech]:
    """Load and warm Whisper and Piper (blocking: call from prewarm or a thread)."""
    from agent.models import offline_env
    from agent.stt_whisper import WhisperSTT
    from tts.piper_tts import PiperTTS

    offline_env()
    stt = WhisperSTT()
    stt.load()
    stt.warmup()
    tts = PiperTTS(output_rate=output_rate)
    tts.load()
    tts.warmup()
    return stt, tts


def make_openai_llm(
    settings: LLMSettings,
    *,
    base_url: str | None,
    model: str | None = None,
    api_key: str | None = None,
) -> LanguageModel:
    from agent.llm_openai import OpenAIChatLLM

    return OpenAIChatLLM(
        base_url=base_url or settings.base_url or None,
        model=model or settings.model or "local",
        api_key=api_key or settings.api_key or "not-needed",
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
    )


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
    import asyncio

    spec = spec or ("local" if settings.provider == "local" else f"openai:{settings.model}")
    kind, _, arg = spec.partition(":")
    if kind == "script":
        from agent.llm_scripted import ScriptedLLM

        yield ScriptedLLM.from_file(
            Path(arg), ttft_ms=script_ttft_ms, words_per_s=script_words_per_s
        )
    elif kind == "openai":
        llm = make_openai_llm(settings, base_url=base_url, model=arg)
        try:
            yield llm
        finally:
            await llm.aclose()
    elif kind == "local":
        from agent.llm_local import LocalLLMServer

        server = LocalLLMServer()
        url = await asyncio.to_thread(server.start)
        await asyncio.to_thread(server.warm, settings.system_prompt)
        llm = make_openai_llm(settings, base_url=url)
        try:
            yield llm
        finally:
            await llm.aclose()
            await asyncio.to_thread(server.stop)
    else:
        raise ValueError(f"unknown LLM spec {spec!r}: use local, openai:MODEL or script:PATH")
