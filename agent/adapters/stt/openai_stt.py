"""`agent.engines.SpeechToText` over OpenAI's transcription endpoint (POST
{base_url}/audio/transcriptions), or any server that speaks it: a larger Whisper served on
another host, which hears accents and phone audio that the bundled tiny.en mishears.

The endpoint transcribes a whole file, so there are no partials: each `flush()` (the turn
engine's candidate at a pause) sends the utterance so far as a 16 kHz WAV, and `finalize()`
reuses that answer when the speaker said nothing since (only quiet frames came after it), so a
turn that ends at its first pause costs one request, made while the endpoint silence runs.
As for the other HTTP clients: a keep-alive pool per stream, a short connect timeout, no
retries (a retry doubles the wait), a cap on the whole request.
"""

from __future__ import annotations

import asyncio
import io
import math
from collections.abc import AsyncIterator

import aiohttp
import numpy as np

from agent.engines import FRAME_SAMPLES, INPUT_RATE, Transcript

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "whisper-1"
_ERROR_DETAIL_CHARS = 300
# A 20 ms frame is speech when louder than the floor and within the range of the utterance's
# loudest frame (the bundled Whisper's voicing rule,
# agent.adapters.stt.whisper_options.WhisperOptions).
_SPEECH_FLOOR_DBFS = -50.0
_SPEECH_RANGE_DB = 26.0


class STTRequestError(RuntimeError):
    """The transcription request failed (unreachable, refused, timed out)."""


class OpenAISTT:
    """Transcribes 16 kHz int16 utterances at `base_url` with `model`."""

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str = "",
        model: str = DEFAULT_MODEL,
        language: str = "en",
        connect_timeout_s: float = 2.0,
        max_duration_s: float = 10.0,
    ) -> None:
        self.url = f"{(base_url or DEFAULT_BASE_URL).rstrip('/')}/audio/transcriptions"
        self.model = model or DEFAULT_MODEL
        self.language = language
        # Servers that need no key still get the header OpenAI's clients always send.
        self.headers = {"Authorization": f"Bearer {api_key or 'no-key'}"}
        self.timeout = aiohttp.ClientTimeout(total=max_duration_s, sock_connect=connect_timeout_s)

    def stream(self) -> OpenAISTTStream:
        return OpenAISTTStream(self)

    async def transcribe(self, pcm: np.ndarray) -> str:
        async with aiohttp.ClientSession(timeout=self.timeout) as session:
            return await self.request(session, pcm)

    async def request(self, session: aiohttp.ClientSession, pcm: np.ndarray) -> str:
        """The text of `pcm`; STTRequestError if the server cannot give it."""
        if not len(pcm):
            return ""
        form = aiohttp.FormData()
        form.add_field("file", _wav(pcm), filename="speech.wav", content_type="audio/wav")
        form.add_field("model", self.model)
        form.add_field("language", self.language)
        form.add_field("response_format", "json")
        try:
            async with session.post(self.url, data=form, headers=self.headers) as resp:
                if resp.status >= 400:
                    detail = (await resp.text(errors="replace"))[:_ERROR_DETAIL_CHARS]
                    raise STTRequestError(f"{self.url}: HTTP {resp.status}: {detail.strip()}")
                body = await resp.json(content_type=None)
        except TimeoutError as e:
            raise STTRequestError(f"{self.url}: timed out") from e
        except aiohttp.ClientConnectorError as e:
            raise STTRequestError(f"cannot reach {self.url}: {e.os_error or e}") from e
        except (aiohttp.ClientError, ValueError) as e:
            raise STTRequestError(f"{self.url}: {type(e).__name__}: {e}") from e
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str):
            raise STTRequestError(f"{self.url}: the answer has no text: {str(body)[:80]!r}")
        return text.strip()


def _wav(pcm: np.ndarray) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.asarray(pcm, dtype=np.int16), INPUT_RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _failed(task: asyncio.Task[str]) -> bool:
    return task.done() and (task.cancelled() or task.exception() is not None)


def _retrieve(task: asyncio.Task[str]) -> None:
    """An answer nobody waits for any more may have failed: that is no error of its own."""
    if not task.cancelled():
        task.exception()


class OpenAISTTStream:
    """One user's utterances (agent.engines.STTStream); see the module docstring."""

    def __init__(self, stt: OpenAISTT) -> None:
        self._stt = stt
        self._session = aiohttp.ClientSession(timeout=stt.timeout)
        self._chunks: list[np.ndarray] = []
        self._length = 0  # samples pushed in this utterance
        self._peak_db = -math.inf
        self._speech_end = 0  # samples up to the last frame of speech
        # The newest request of this utterance: the samples it sent, and its answer.
        self._request: tuple[int, asyncio.Task[str]] | None = None
        self._closed = asyncio.Event()

    def push(self, pcm: np.ndarray) -> None:
        if self._closed.is_set():
            raise RuntimeError("the transcription stream is closed")
        if pcm.dtype != np.int16:
            raise TypeError(f"push() takes int16 samples at {INPUT_RATE} Hz, got {pcm.dtype}")
        for start in range(0, len(pcm), FRAME_SAMPLES):
            block = pcm[start : start + FRAME_SAMPLES].astype(np.float32)
            db = 20 * math.log10(max(float(np.sqrt(np.mean(block * block))), 1.0) / 32768.0)
            self._peak_db = max(self._peak_db, db)
            if db >= max(_SPEECH_FLOOR_DBFS, self._peak_db - _SPEECH_RANGE_DB):
                self._speech_end = self._length + start + len(block)
        self._chunks.append(pcm.copy())
        self._length += len(pcm)

    async def flush(self) -> str:
        return await self._text()

    async def finalize(self) -> str:
        try:
            return await self._text()
        finally:
            self.discard()

    async def _text(self) -> str:
        """The answer of a request holding all the speech so far, sent now if none does (or
        the one that does failed). "" when the utterance is discarded meanwhile."""
        if (
            self._request is None
            or self._request[0] < self._speech_end
            or _failed(self._request[1])
        ):
            pcm = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)
            task = asyncio.get_running_loop().create_task(
                self._stt.request(self._session, pcm), name="openai-transcription"
            )
            task.add_done_callback(_retrieve)
            self._request = (self._length, task)
        task = self._request[1]
        try:  # shielded: a candidate given up on leaves its answer for finalize()
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and not (current and current.cancelling()):
                return ""  # discard() dropped the utterance, not our caller
            raise

    def discard(self) -> None:
        if self._request is not None and not self._request[1].done():
            self._request[1].cancel()
        self._request = None
        self._chunks.clear()
        self._length = self._speech_end = 0
        self._peak_db = -math.inf

    async def partials(self) -> AsyncIterator[Transcript]:
        """None: the endpoint transcribes whole files. Ends when the stream closes."""
        await self._closed.wait()
        return
        yield  # makes this an async generator

    def set_paused(self, paused: bool) -> None:
        """No-op: the decoding is remote."""

    async def aclose(self) -> None:
        self.discard()
        self._closed.set()
        await self._session.close()
