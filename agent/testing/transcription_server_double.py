"""TEST DOUBLE of an OpenAI-compatible transcription endpoint, on loopback
(`TranscriptionServerDouble`), for the tests of agent/adapters/stt/openai_stt.py: what it hears
is what the transcriber it is given hears."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from aiohttp import web

from agent.testing.loopback_server import LoopbackDouble

Transcriber = Callable[[np.ndarray], Awaitable[str]]


class TranscriptionServerDouble(LoopbackDouble):
    """POST /v1/audio/transcriptions (multipart: a 16 kHz mono WAV `file`, `model`,
    `language`, `response_format` "json"), answered {"text": ...} by `transcriber` (16 kHz
    int16 in; the tests give it the bundled Whisper, or a stand-in of their own).
    `fail_status` makes every request fail with it; `hold` (an Event), when set, is waited
    for before each answer. `requests` holds each request's fields and its audio's length."""

    def __init__(self, transcriber: Transcriber) -> None:
        super().__init__("POST", "/v1/audio/transcriptions", self._transcribe)
        self._transcriber = transcriber
        self.fail_status: int | None = None
        self.hold: asyncio.Event | None = None
        self.requests: list[dict[str, Any]] = []

    async def _transcribe(self, request: web.Request) -> web.Response:
        import io

        import soundfile as sf

        form = await request.post()
        upload = form.get("file")
        fields = {k: str(v) for k, v in form.items() if k != "file"}
        if not isinstance(upload, web.FileField) or fields.get("response_format") != "json":
            return web.json_response(
                {"error": {"message": "this double needs a file and response_format json"}},
                status=400,
            )
        pcm, rate = sf.read(io.BytesIO(upload.file.read()), dtype="int16")
        self.requests.append(
            {
                **fields,
                "samples": len(pcm),
                "rate": rate,
                "authorization": request.headers.get("Authorization", ""),
            }
        )
        if self.fail_status is not None:
            return web.json_response(
                {"error": {"message": "the test double was told to fail", "type": "server_error"}},
                status=self.fail_status,
            )
        if self.hold is not None:
            await self.hold.wait()
        return web.json_response({"text": await self._transcriber(pcm)})
