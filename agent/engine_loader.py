"""Building the engines from settings: the speech models once per process, the LLM client once
per process (one keep-alive connection pool), and the bundled llama.cpp server when the LLM is
local."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator

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
