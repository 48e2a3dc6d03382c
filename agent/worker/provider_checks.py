"""Reachability of the configured providers, checked before a worker takes jobs and by
`voxroom doctor`: an unreachable base URL, a rejected key or an unknown model shows up at start
as one clear error, not as a failed first turn.

Each check makes one short request and returns what it verified, or raises ProviderError
(a ConfigError, so the CLI prints it as a configuration error) saying what failed and which
setting to look at. Missing keys and malformed URLs are caught earlier, by agent.config.
"""

from __future__ import annotations

import asyncio

import numpy as np

from agent.config import ConfigError, LiveKitSettings, LLMSettings, Settings, STTSettings
from agent.engines import INPUT_RATE

DEFAULT_TIMEOUT_S = 5.0
_CONNECT_TIMEOUT_S = 2.0
_MODELS_SHOWN = 8


class ProviderError(ConfigError):
    """A configured provider is unreachable or refuses the settings."""


async def check_providers(settings: Settings, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[str]:
    """Check every remote provider the settings name (an OpenAI-compatible LLM or STT, Deepgram),
    concurrently. Returns what was verified; raises ProviderError naming every failure."""
    checks = []
    if settings.llm.provider == "openai":
        checks.append(check_openai_llm(settings.llm, timeout_s=timeout_s))
    if settings.stt.provider == "deepgram":
        checks.append(check_deepgram(settings.stt, timeout_s=timeout_s))
    if settings.stt.provider == "openai":
        checks.append(check_openai_stt(settings.stt, timeout_s=timeout_s))
    results = await asyncio.gather(*checks, return_exceptions=True)
    if errors := [str(r) for r in results if isinstance(r, ProviderError)]:
        raise ProviderError("; ".join(errors))
    for r in results:
        if isinstance(r, BaseException):  # a bug, not a provider's answer
            raise r
    return [str(r) for r in results]


def llm_where(settings: LLMSettings) -> str:
    return settings.base_url or "api.openai.com"


async def check_openai_llm(settings: LLMSettings, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """The server answers `GET /models` with the key and lists `llm.model`. A server without
    a model listing (404) is reachable but cannot confirm the model: that passes, and says so."""
    import openai

    where = llm_where(settings)
    client = openai.AsyncOpenAI(
        base_url=settings.base_url or None,
        api_key=settings.api_key or "no-key",
        max_retries=0,
        timeout=openai.Timeout(timeout_s, connect=min(timeout_s, _CONNECT_TIMEOUT_S)),
    )
    try:
        async with client:
            models = [m.id async for m in client.models.list()]
    except openai.NotFoundError:
        return f"{where} is reachable; it has no model listing, so llm.model is unverified"
    except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
        raise ProviderError(
            f"llm: {where} rejected the API key (HTTP {e.status_code}); check OPENAI_API_KEY"
        ) from e
    except openai.APITimeoutError as e:
        raise ProviderError(
            f"llm: no answer from {where} within {timeout_s:g} s; check llm.base_url "
            "(VOXROOM_LLM_BASE_URL)"
        ) from e
    except openai.APIConnectionError as e:
        raise ProviderError(
            f"llm: cannot reach {where} ({e.__cause__ or e}); check llm.base_url "
            "(VOXROOM_LLM_BASE_URL)"
        ) from e
    except openai.APIStatusError as e:
        raise ProviderError(
            f"llm: {where} answered HTTP {e.status_code} to GET /models: {e.message}"
        ) from e
    if settings.model not in models:
        listed = ", ".join(sorted(models)[:_MODELS_SHOWN]) or "none"
        more = f" and {len(models) - _MODELS_SHOWN} more" if len(models) > _MODELS_SHOWN else ""
        raise ProviderError(
            f"llm: {where} does not serve llm.model {settings.model!r} (VOXROOM_LLM_MODEL); "
            f"it lists {listed}{more}"
        )
    return f"{where} serves {settings.model}"


async def check_deepgram(settings: STTSettings, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """A live stream opens (the handshake checks the key and the model) and finalizes half a
    second of silence. No retries: one failed connection is the answer."""
    from agent.adapters.stt.deepgram import (
        DEFAULT_BASE_URL,
        DeepgramConnectionError,
        DeepgramError,
        DeepgramOptions,
        DeepgramSTT,
    )

    options = DeepgramOptions(
        connect_timeout_s=min(timeout_s, _CONNECT_TIMEOUT_S),
        finalize_timeout_s=timeout_s,
        max_reconnect_attempts=0,
    )
    try:
        stt = DeepgramSTT.from_settings(settings, options)
        await stt.transcribe(np.zeros(INPUT_RATE // 2, np.int16))
    except ValueError as e:
        raise ProviderError(f"stt: {e}") from e
    except DeepgramConnectionError as e:
        raise ProviderError(f"stt: {e}; check stt.base_url (VOXROOM_STT_BASE_URL)") from e
    except DeepgramError as e:  # the key or the request refused: the message says which
        raise ProviderError(f"stt: {e}") from e
    return f"Deepgram at {settings.base_url or DEFAULT_BASE_URL} accepted the key and a stream"


async def check_openai_stt(settings: STTSettings, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """Half a second of silence is transcribed (the request checks the key and the model)."""
    from agent.adapters.stt.openai_stt import OpenAISTT, STTRequestError

    stt = OpenAISTT(
        base_url=settings.base_url,
        api_key=settings.api_key,
        model=settings.model,
        connect_timeout_s=min(timeout_s, _CONNECT_TIMEOUT_S),
        max_duration_s=timeout_s,
    )
    try:
        await stt.transcribe(np.zeros(INPUT_RATE // 2, np.int16))
    except STTRequestError as e:
        raise ProviderError(
            f"stt: {e}; check stt.base_url (VOXROOM_STT_BASE_URL), "
            f"stt.model (VOXROOM_STT_MODEL) and the key"
        ) from e
    return f"{stt.url} transcribed a test clip with {stt.model}"


async def check_livekit(settings: LiveKitSettings, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """The server answers RoomService.ListRooms with the key and secret."""
    import aiohttp
    from livekit import api

    lk = api.LiveKitAPI(
        settings.url,
        settings.api_key,
        settings.api_secret,
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        failover=False,
    )
    try:
        rooms = await lk.room.list_rooms(api.ListRoomsRequest())
    except api.ServerError as e:
        if e.status in (401, 403):
            raise ProviderError(
                f"livekit: {settings.url} rejected the key (HTTP {e.status}: {e.message}); "
                "check LIVEKIT_API_KEY and LIVEKIT_API_SECRET"
            ) from e
        raise ProviderError(f"livekit: {settings.url} answered HTTP {e.status}: {e.message}") from e
    except TimeoutError as e:
        raise ProviderError(
            f"livekit: no answer from {settings.url} within {timeout_s:g} s; check LIVEKIT_URL"
        ) from e
    except aiohttp.ClientError as e:
        raise ProviderError(f"livekit: cannot reach {settings.url} ({e}); check LIVEKIT_URL") from e
    finally:
        await lk.aclose()
    return f"{settings.url} accepted the key ({len(rooms.rooms)} rooms)"
