"""The LLM client of a job process: the configured provider, with the bundled llama.cpp
server (which the worker starts for all its jobs) as its fallback when configured."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from agent.config import Settings

if TYPE_CHECKING:
    from agent.engines import LanguageModel

LOCAL_LLM_URL_ENV = "VOXROOM_LOCAL_LLM_URL"  # set by the worker for its job processes


def process_llm(settings: Settings) -> LanguageModel:
    """The LLM client of this job process, with the local fallback when configured."""
    from agent.adapters.providers import make_llm

    local_url = os.environ.get(LOCAL_LLM_URL_ENV)
    llm = make_llm(settings.llm, local_base_url=local_url)
    if settings.llm.provider == "openai" and settings.llm.fallback == "local":
        from agent.adapters.llm.fallback import FallbackLLM
        from agent.ops.metrics import record_fallback

        local = make_llm(
            replace(settings.llm, provider="local", model=""), local_base_url=local_url
        )
        llm = FallbackLLM(
            llm,
            local,
            first_token_budget_s=settings.llm.first_token_budget_s,
            on_fallback=lambda why: record_fallback("llm_local", why),
        )
    return llm
