"""Provider checks at start: unreachable base URLs, rejected keys and unknown models give one
clear error each (against test doubles of the providers on loopback)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from agent.config import LiveKitSettings, LLMSettings, Settings, STTSettings
from agent.testing.deepgram_double_recognisers import word_code_recogniser
from agent.testing.deepgram_server_double import DeepgramServerDouble
from agent.testing.scripted_llm import ScriptedLLM
from agent.testing.scripted_llm_server import scripted_llm_server
from agent.worker.provider_checks import (
    ProviderError,
    check_deepgram,
    check_livekit,
    check_openai_llm,
    check_providers,
)
from tests.local_http import serve_app


@asynccontextmanager
async def models_listing_double(models: list[str], key: str = "sk-good") -> AsyncIterator[str]:
    """A TEST DOUBLE of an OpenAI-compatible server's GET /v1/models, checking the key."""

    async def list_models(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": {"message": "Incorrect API key"}}, status=401)
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in models
                ],
            }
        )

    app = web.Application()
    app.router.add_get("/v1/models", list_models)
    async with serve_app(app) as origin:
        yield f"{origin}/v1"


def openai_settings(base_url: str, model: str = "llama-3-8b", key: str = "sk-good") -> LLMSettings:
    return LLMSettings(provider="openai", base_url=base_url, model=model, api_key=key)


async def test_listed_model_passes() -> None:
    async with models_listing_double(["llama-3-8b", "qwen"]) as url:
        assert await check_openai_llm(openai_settings(url)) == f"{url} serves llama-3-8b"


@pytest.mark.parametrize(
    ("listed", "asked", "error"),
    [
        (
            ["qwen", "llama-3-8b"],
            {"model": "gpt-5"},
            r"does not serve llm.model 'gpt-5'.*it lists llama-3-8b, qwen$",
        ),
        (
            ["llama-3-8b"],
            {"key": "sk-bad"},
            r"rejected the API key \(HTTP 401\); check OPENAI_API_KEY",
        ),
    ],
    ids=["unknown-model-names-what-the-server-has", "rejected-key"],
)
async def test_a_model_the_server_lacks_or_a_rejected_key_is_one_clear_error(
    listed: list[str], asked: dict[str, str], error: str
) -> None:
    async with models_listing_double(listed) as url:
        with pytest.raises(ProviderError, match=error):
            await check_openai_llm(openai_settings(url, **asked))


async def test_unreachable_llm_base_url(dead_port: int) -> None:
    url = f"http://127.0.0.1:{dead_port}/v1"
    with pytest.raises(ProviderError, match=rf"llm: cannot reach {url} .*check llm.base_url"):
        await check_openai_llm(openai_settings(url))


async def test_server_without_a_model_listing_passes_unverified() -> None:
    async with scripted_llm_server(ScriptedLLM(["Hi."])) as url:
        assert "model is unverified" in await check_openai_llm(openai_settings(url))


async def test_deepgram_handshake() -> None:
    async with DeepgramServerDouble(word_code_recogniser(["unused"])) as fake:
        good = STTSettings(provider="deepgram", api_key="test-key", base_url=fake.url)
        assert "accepted the key" in await check_deepgram(good)
        with pytest.raises(ProviderError, match=r"rejected the API key.*DEEPGRAM_API_KEY"):
            await check_deepgram(
                STTSettings(provider="deepgram", api_key="nope", base_url=fake.url)
            )
    assert fake.rejected == 1  # no retries


async def test_unreachable_deepgram(dead_port: int) -> None:
    url = f"ws://127.0.0.1:{dead_port}"
    with pytest.raises(ProviderError, match=r"cannot reach Deepgram.*check stt.base_url"):
        await check_deepgram(STTSettings(provider="deepgram", api_key="k", base_url=url))


async def test_unreachable_livekit(dead_port: int) -> None:
    url = f"ws://127.0.0.1:{dead_port}"
    with pytest.raises(ProviderError, match=rf"livekit: cannot reach {url} .*check LIVEKIT_URL"):
        await check_livekit(LiveKitSettings(url=url))


async def test_check_providers_reports_every_failure_and_skips_local_engines(
    dead_port: int,
) -> None:
    assert await check_providers(Settings()) == []  # bundled LLM and Whisper: nothing remote
    llm_url, dg_url = f"http://127.0.0.1:{dead_port}/v1", f"ws://127.0.0.1:{dead_port}"
    settings = Settings(
        llm=openai_settings(llm_url),
        stt=STTSettings(provider="deepgram", api_key="k", base_url=dg_url),
    )
    with pytest.raises(ProviderError) as failed:
        await check_providers(settings)
    assert str(failed.value).startswith("llm: cannot reach")
    assert "; stt: cannot reach Deepgram" in str(failed.value)


@pytest.mark.integration
async def test_livekit_accepts_the_key_or_says_it_rejected_it(livekit_server) -> None:
    settings = livekit_server.livekit_settings()
    assert "accepted the key" in await check_livekit(settings)
    bad = LiveKitSettings(url=settings.url, api_key=settings.api_key, api_secret="wrong" * 8)
    with pytest.raises(ProviderError, match=r"rejected the key \(HTTP 401.*LIVEKIT_API_SECRET"):
        await check_livekit(bad)
