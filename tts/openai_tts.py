"""`agent.engines.TextToSpeech` over OpenAI's speech endpoint (POST {base_url}/audio/speech),
or any server that speaks it, asking for raw PCM: 24 kHz 16-bit mono little-endian.

Latency rules from the design, as for the LLM client: a keep-alive connection pool that lives
as long as the process (no TCP/TLS handshake per chunk), a short connect timeout, no retries
(a retry doubles the wait), and a cap on the whole request. Each chunk of a reply is a request
of its own; the chunks are trimmed and faded like Piper's (tts.piper_tts) so they join without
gaps or clicks. The endpoint takes no context, so `left_context`/`right_context` are unused.

aiohttp binds a connection pool to the event loop that opened it, and a worker's thread
executor runs each job in a loop of its own: there is one pool per event loop.
"""

from __future__ import annotations

import asyncio
import weakref

import aiohttp
import numpy as np

from tts.piper_tts import finish_speech

DEFAULT_BASE_URL = "https://api.openai.com/v1"
PCM_RATE = 24_000  # what the endpoint returns for response_format "pcm"
_ERROR_DETAIL_CHARS = 300


class TTSError(RuntimeError):
    """The speech request failed (unreachable, refused, timed out); the chunk has no audio."""


class OpenAITTS:
    """Synthesizes chunks of text to int16 mono at `output_rate`. One instance per process,
    shared by its sessions; `aclose()` in each event loop that used it closes its pool."""

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str = "",
        model: str = "tts-1",
        voice: str = "alloy",
        output_rate: int = 48_000,
        connect_timeout_s: float = 2.0,
        stall_timeout_s: float = 5.0,
        max_duration_s: float = 15.0,
        fade_ms: float = 4.0,
        edge_silence_ms: float = 30.0,
    ) -> None:
        self.url = f"{(base_url or DEFAULT_BASE_URL).rstrip('/')}/audio/speech"
        self.model = model
        self.voice = voice
        # Servers that need no key still get the header OpenAI's clients always send.
        self._headers = {"Authorization": f"Bearer {api_key or 'no-key'}"}
        # read = the longest wait for the next bytes; the whole request is capped separately.
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_s, sock_read=stall_timeout_s
        )
        self.max_duration_s = max_duration_s
        self._sessions: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, aiohttp.ClientSession
        ] = weakref.WeakKeyDictionary()
        # The audio that comes back is shaped as Piper's is (tts.piper_tts.finish_speech).
        self.sample_rate = output_rate
        self.fade_ms = fade_ms
        self.edge_silence_ms = edge_silence_ms

    async def synthesize(
        self, text: str, *, left_context: str = "", right_context: str = ""
    ) -> np.ndarray:
        """Cancelling the awaiting task closes the request's connection, which tells the
        server to stop."""
        text = text.strip()
        if not text:
            return np.zeros(0, dtype=np.int16)
        body = {"model": self.model, "input": text, "voice": self.voice, "response_format": "pcm"}
        try:
            async with asyncio.timeout(self.max_duration_s):
                pcm = await self._fetch(body)
        except TimeoutError as e:  # connecting, a stalled stream, or the whole request
            raise TTSError(f"{self.url}: timed out ({type(e).__name__})") from e
        except aiohttp.ClientConnectorError as e:
            raise TTSError(f"cannot reach {self.url}: {e.os_error or e}") from e
        except aiohttp.ClientError as e:
            raise TTSError(f"{self.url}: {type(e).__name__}: {e}") from e
        return self._finish(pcm)

    async def _fetch(self, body: dict[str, str]) -> bytes:
        async with self._session().post(self.url, json=body, headers=self._headers) as resp:
            if resp.status >= 400:
                detail = (await resp.text(errors="replace"))[:_ERROR_DETAIL_CHARS]
                raise TTSError(f"{self.url}: HTTP {resp.status}: {detail.strip()}")
            data = bytearray()
            async for block in resp.content.iter_any():
                data += block
        return bytes(data[: len(data) // 2 * 2])

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            session = aiohttp.ClientSession(timeout=self._timeout)
            self._sessions[loop] = session
        return session

    def _finish(self, pcm: bytes) -> np.ndarray:
        audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
        return finish_speech(
            audio,
            PCM_RATE,
            self.sample_rate,
            fade_ms=self.fade_ms,
            edge_silence_ms=self.edge_silence_ms,
        )

    async def aclose(self) -> None:
        """Close the running loop's connection pool."""
        session = self._sessions.pop(asyncio.get_running_loop(), None)
        if session is not None:
            await session.close()
