"""The engines by provider name: one table per modality (name -> factory), the settings'
`provider` picks the row. The speech engines are built once per process, the LLM client once
per process (one keep-alive connection pool), and the bundled llama.cpp server runs while a
local LLM is open. Adding a provider: its module, one line in its table here, and its names
and checks in agent.config (`*_PROVIDERS`, `validate`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from agent.config import ConfigError, LLMSettings, Settings, STTSettings, TTSSettings, validate
from agent.engines import LanguageModel, SpeechToText, TextToSpeech

log = logging.getLogger(__name__)

SPEC_HELP = "local | openai:MODEL | script:PATH"


# --- speech to text ----------------------------------------------------------------------------


def _whisper(settings: STTSettings) -> SpeechToText:
    from agent.adapters.stt.whisper import WhisperSTT

    stt = WhisperSTT(Path(settings.model_dir) if settings.model_dir else None)
    stt.load()
    stt.warmup()
    return stt


def _deepgram(settings: STTSettings) -> SpeechToText:
    # Nothing to load: its reachability is checked at worker start (agent.worker.provider_checks).
    from agent.adapters.stt.deepgram import DeepgramSTT

    return DeepgramSTT.from_settings(settings)


def _openai_transcription(settings: STTSettings) -> SpeechToText:
    # Nothing to load: its reachability is checked at worker start (agent.worker.provider_checks).
    from agent.adapters.stt.openai_stt import OpenAISTT

    return OpenAISTT(base_url=settings.base_url, api_key=settings.api_key, model=settings.model)


# stt.provider -> the engine, loaded and warmed (blocking: call from prewarm or a thread).
STT_PROVIDERS: dict[str, Callable[[STTSettings], SpeechToText]] = {
    "whisper": _whisper,
    "deepgram": _deepgram,
    "openai": _openai_transcription,
}


# --- text to speech ----------------------------------------------------------------------------


def _piper(_settings: TTSSettings, output_rate: int) -> TextToSpeech:
    from tts.piper_tts import PiperTTS

    tts = PiperTTS(output_rate=output_rate)
    tts.load()
    tts.warmup()
    return tts


def _openai_speech(settings: TTSSettings, output_rate: int) -> TextToSpeech:
    from tts.openai_tts import OpenAITTS

    return OpenAITTS(
        base_url=settings.base_url,
        api_key=settings.api_key,
        model=settings.model,
        voice=settings.voice,
        output_rate=output_rate,
    )


# tts.provider -> the engine at `output_rate`, loaded and warmed (blocking).
TTS_PROVIDERS: dict[str, Callable[[TTSSettings, int], TextToSpeech]] = {
    "piper": _piper,
    "openai": _openai_speech,
}


# --- language model ----------------------------------------------------------------------------


def _chat_client(settings: LLMSettings, base_url: str | None, model: str) -> LanguageModel:
    from agent.adapters.llm.openai_chat import OpenAIChatLLM, ReplySettings

    return OpenAIChatLLM(
        model=model,
        base_url=base_url,
        api_key=settings.api_key,
        reply=ReplySettings(max_tokens=settings.max_tokens, temperature=settings.temperature),
    )


def _local_chat(settings: LLMSettings, local_base_url: str | None) -> LanguageModel:
    from agent.adapters.llm.llama_server import DEFAULT_MODEL_NAME

    if not local_base_url:
        raise ConfigError("llm.provider = 'local' needs the local LLM server to be running")
    return _chat_client(settings, local_base_url, settings.model or DEFAULT_MODEL_NAME)


def _openai_chat(settings: LLMSettings, _local_base_url: str | None) -> LanguageModel:
    return _chat_client(settings, settings.base_url or None, settings.model)


# llm.provider -> an OpenAI-compatible client; "local" needs the base URL of the running local
# server (agent.adapters.llm.llama_server).
LLM_PROVIDERS: dict[str, Callable[[LLMSettings, str | None], LanguageModel]] = {
    "local": _local_chat,
    "openai": _openai_chat,
}


def load_speech_engines(
    output_rate: int,
    stt_settings: STTSettings | None = None,
    tts_settings: TTSSettings | None = None,
) -> tuple[SpeechToText, TextToSpeech]:
    """Load and warm the STT named by `stt_settings` (default: the bundled Whisper) and the TTS
    named by `tts_settings` (default: Piper) (blocking: call from prewarm or a thread)."""
    return load_stt(stt_settings or STTSettings()), load_tts(output_rate, tts_settings)


def load_stt(settings: STTSettings) -> SpeechToText:
    return STT_PROVIDERS[settings.provider](settings)


def load_tts(output_rate: int, settings: TTSSettings | None = None) -> TextToSpeech:
    settings = settings or TTSSettings()
    return TTS_PROVIDERS[settings.provider](settings, output_rate)


def make_llm(settings: LLMSettings, *, local_base_url: str | None = None) -> LanguageModel:
    return LLM_PROVIDERS[settings.provider](settings, local_base_url)


def parse_llm_spec(spec: str) -> tuple[str, str]:
    """`local` -> ("local", ""), `openai:MODEL` -> ("openai", MODEL), `script:PATH` ->
    ("script", PATH)."""
    kind, _, arg = spec.partition(":")
    if (kind == "local" and not arg) or (kind in ("openai", "script") and arg):
        return kind, arg
    raise ConfigError(f"--llm must be {SPEC_HELP}, got {spec!r}")


def make_llm_from_spec(
    spec: str,
    settings: LLMSettings,
    *,
    local_base_url: str | None = None,
    script_ttft_ms: float = 150.0,
    script_words_per_s: float = 15.0,
) -> LanguageModel:
    """The model named by a simulate spec; `settings` supply the rest (key, base URL, limits).
    A "local" spec needs `local_base_url` (start
    agent.adapters.llm.llama_server.LocalLLMServer first); a "script" one is the scripted
    test double (agent.testing.scripted_llm), for repeatable benchmarks."""
    kind, arg = parse_llm_spec(spec)
    if kind == "script":
        from agent.testing.scripted_llm import ScriptedLLM

        try:
            return ScriptedLLM.from_file(
                arg, ttft_ms=script_ttft_ms, words_per_s=script_words_per_s
            )
        except (OSError, ValueError) as e:
            raise ConfigError(f"--llm script:{arg}: {e}") from e
    chosen = dataclasses.replace(settings, provider=kind, model=arg or settings.model)
    validate(Settings(llm=chosen))
    return make_llm(chosen, local_base_url=local_base_url)


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
    spec = spec or ("local" if settings.provider == "local" else f"openai:{settings.model}")
    if base_url:
        settings = dataclasses.replace(settings, base_url=base_url)
    server = None
    local_url = None
    if parse_llm_spec(spec)[0] == "local":
        from agent.adapters.llm.llama_server import LocalLLMServer

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
