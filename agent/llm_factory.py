"""Builds the `LanguageModel` a session talks to, from settings or from a simulate spec."""

from __future__ import annotations

import dataclasses

from agent.config import ConfigError, LLMSettings, Settings, validate
from agent.engines import LanguageModel
from agent.llm_local import DEFAULT_MODEL_NAME
from agent.llm_openai import OpenAIChatLLM
from agent.llm_scripted import ScriptedLLM

SPEC_HELP = "local | openai:MODEL | script:PATH"


def make_llm(settings: LLMSettings, *, local_base_url: str | None = None) -> LanguageModel:
    """An OpenAI-compatible client for `settings`; the "local" provider needs the base URL of
    the running local server (agent.llm_local)."""
    if settings.provider == "local":
        if not local_base_url:
            raise ConfigError("llm.provider = 'local' needs the local LLM server to be running")
        base_url, model = local_base_url, settings.model or DEFAULT_MODEL_NAME
    else:
        base_url, model = settings.base_url or None, settings.model
    return OpenAIChatLLM(
        model=model,
        base_url=base_url,
        api_key=settings.api_key,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
    )


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
    A "local" spec needs `local_base_url` (start agent.llm_local.LocalLLMServer first)."""
    kind, arg = parse_llm_spec(spec)
    if kind == "script":
        try:
            return ScriptedLLM.from_file(
                arg, ttft_ms=script_ttft_ms, words_per_s=script_words_per_s
            )
        except (OSError, ValueError) as e:
            raise ConfigError(f"--llm script:{arg}: {e}") from e
    chosen = dataclasses.replace(settings, provider=kind, model=arg or settings.model)
    validate(Settings(llm=chosen))
    return make_llm(chosen, local_base_url=local_base_url)
