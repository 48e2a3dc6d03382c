"""TEST DOUBLE of an OpenAI-compatible speech endpoint, on loopback (`TTSServerDouble`).

`voxroom loadtest --engines remote` and the tests point the workers' real adapter
(tts/openai_tts.py) at it, so that a worker's CPU goes to what a worker with cloud engines does,
not to a local model. Like agent/testing/scripted_llm_server.py it answers after a remote-like,
seeded-random delay. It speaks real speech (the bundled Piper voice, each distinct text
synthesized once and cached).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
from aiohttp import web

from agent.testing.loopback_server import LoopbackDouble, client_gone

PCM_RATE = 24_000  # OpenAI's rate for response_format "pcm"


async def _piper_speaker() -> Callable[[str], Awaitable[np.ndarray]]:
    from tts.piper_tts import PiperTTS

    tts = PiperTTS(output_rate=PCM_RATE)
    await asyncio.to_thread(tts.load)
    return tts.synthesize


class TTSServerDouble(LoopbackDouble):
    """POST /v1/audio/speech with response_format "pcm": 24 kHz int16 mono, streamed in
    `chunk_ms` blocks once a uniform random `ttfb_ms` (seeded) has passed since the request
    and the audio is ready. `speak` makes the audio of a text at 24 kHz (default: Piper);
    each distinct text is spoken once. `fail_status` makes every request fail with it.

    `requests` holds the bodies received; `aborted` counts requests whose client left before
    all the audio was sent (a cancelled chunk)."""

    def __init__(
        self,
        speak: Callable[[str], Awaitable[np.ndarray]] | None = None,
        *,
        ttfb_ms: tuple[float, float] = (150.0, 300.0),
        chunk_ms: float = 100.0,
        chunk_interval_ms: float = 0.0,
        seed: int = 0,
    ) -> None:
        low, high = ttfb_ms
        if not 0 <= low <= high:
            raise ValueError("ttfb_ms must be (low, high) with 0 <= low <= high")
        super().__init__("POST", "/v1/audio/speech", self._speech)
        self.ttfb_ms = ttfb_ms
        self.chunk_bytes = max(2, int(PCM_RATE * chunk_ms / 1000) * 2)
        self.chunk_interval_s = chunk_interval_ms / 1000
        self.fail_status: int | None = None
        self.requests: list[dict[str, Any]] = []
        self.aborted = 0
        self._speak = speak
        self._jitter = random.Random(seed)
        self._cache: dict[str, asyncio.Task[bytes]] = {}

    async def _open(self) -> None:
        if self._speak is None:
            self._speak = await _piper_speaker()

    async def _close(self) -> None:
        for task in self._cache.values():
            task.cancel()
        await asyncio.gather(*self._cache.values(), return_exceptions=True)

    async def prepare(self, texts: Sequence[str]) -> None:
        """Speak `texts` now, so that their requests wait only for `ttfb_ms`."""
        await asyncio.gather(*(self._audio(t) for t in texts))

    def _audio(self, text: str) -> asyncio.Task[bytes]:
        task = self._cache.get(text)
        if task is None:
            assert self._speak is not None
            task = self._cache[text] = asyncio.create_task(self._render(text))
        return task

    async def _render(self, text: str) -> bytes:
        assert self._speak is not None
        return np.ascontiguousarray(await self._speak(text), dtype="<i2").tobytes()

    async def _speech(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if self.fail_status is not None:
            return web.json_response(
                {"error": {"message": "the test double was told to fail", "type": "server_error"}},
                status=self.fail_status,
            )
        text = str(body.get("input", "")).strip()
        if body.get("response_format") != "pcm" or not text:
            return web.json_response(
                {"error": {"message": "this double speaks only pcm, and needs an input"}},
                status=400,
            )
        due = time.monotonic() + self._jitter.uniform(*self.ttfb_ms) / 1000
        audio = self._audio(text)
        # aiohttp does not cancel a handler whose client left: look, while waiting.
        while not audio.done() or time.monotonic() < due:
            if client_gone(request):
                self.aborted += 1
                return web.Response()
            await asyncio.wait({audio}, timeout=min(0.02, max(due - time.monotonic(), 0.001)))
        pcm = audio.result()
        resp = web.StreamResponse(headers={"Content-Type": "audio/pcm"})
        try:  # the client may leave at any moment, even as the headers go out
            await resp.prepare(request)
            for offset in range(0, len(pcm), self.chunk_bytes):
                if client_gone(request):
                    raise ConnectionResetError
                await resp.write(pcm[offset : offset + self.chunk_bytes])
                if self.chunk_interval_s:
                    await asyncio.sleep(self.chunk_interval_s)
            await resp.write_eof()
        except ConnectionResetError:
            self.aborted += 1
        return resp
