"""TEST DOUBLES of remote speech services, on loopback: an OpenAI-compatible speech endpoint
(`TTSServerDouble`) and Deepgram's live transcription websocket (`DeepgramServerDouble`).

`voxroom loadtest --engines remote` and the tests point the workers' real adapters
(tts/openai_tts.py, agent/stt/deepgram.py) at them, so that a worker's CPU goes to what a
worker with cloud engines does, not to local models. Like agent/testing/scripted_llm_server.py they
answer after a remote-like, seeded-random delay.

The TTS double speaks real speech (the bundled Piper voice, each distinct text synthesized once
and cached). The Deepgram double "recognises" only the utterances it is given: it cuts the
audio it receives into utterances by energy, and names each one after the given utterance
whose loudness contour (dB per 20 ms frame) is nearest, revealing its words as the audio goes
on. It knows nothing of any other speech.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np
from aiohttp import WSMsgType, web

from agent.engines import FRAME_SAMPLES, INPUT_RATE

FRAME_S = FRAME_SAMPLES / INPUT_RATE
PCM_RATE = 24_000  # OpenAI's rate for response_format "pcm"


def _loopback_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


class _Server:
    """An aiohttp app on a loopback port of its own (bound before it starts: no port race)."""

    def __init__(self) -> None:
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _start(self, app: web.Application) -> None:
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        sock = _loopback_socket()
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


# ---- OpenAI-compatible speech ----------------------------------------------------------------


async def _piper_speaker() -> Callable[[str], Awaitable[np.ndarray]]:
    from tts.piper_tts import PiperTTS

    tts = PiperTTS(output_rate=PCM_RATE)
    await asyncio.to_thread(tts.load)
    return tts.synthesize


class TTSServerDouble:
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
        self.ttfb_ms = ttfb_ms
        self.chunk_bytes = max(2, int(PCM_RATE * chunk_ms / 1000) * 2)
        self.chunk_interval_s = chunk_interval_ms / 1000
        self.fail_status: int | None = None
        self.requests: list[dict[str, Any]] = []
        self.aborted = 0
        self.url = ""
        self._speak = speak
        self._jitter = random.Random(seed)
        self._cache: dict[str, asyncio.Task[bytes]] = {}
        self._server = _Server()

    async def __aenter__(self) -> TTSServerDouble:
        if self._speak is None:
            self._speak = await _piper_speaker()
        app = web.Application()
        app.router.add_post("/v1/audio/speech", self._speech)
        await self._server._start(app)
        self.url = f"http://127.0.0.1:{self._server.port}/v1"
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._server._stop()
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
            return web.json_response({"error": {"message": "the test double was told to fail",
                                                "type": "server_error"}},
                                     status=self.fail_status)
        text = str(body.get("input", "")).strip()
        if body.get("response_format") != "pcm" or not text:
            return web.json_response({"error": {"message": "this double speaks only pcm, "
                                                "and needs an input"}}, status=400)
        due = time.monotonic() + self._jitter.uniform(*self.ttfb_ms) / 1000
        audio = self._audio(text)
        # aiohttp does not cancel a handler whose client left: look, while waiting.
        while not audio.done() or time.monotonic() < due:
            if _gone(request):
                self.aborted += 1
                return web.Response()
            await asyncio.wait({audio}, timeout=min(0.02, max(due - time.monotonic(), 0.001)))
        pcm = audio.result()
        resp = web.StreamResponse(headers={"Content-Type": "audio/pcm"})
        try:  # the client may leave at any moment, even as the headers go out
            await resp.prepare(request)
            for offset in range(0, len(pcm), self.chunk_bytes):
                if _gone(request):
                    raise ConnectionResetError
                await resp.write(pcm[offset : offset + self.chunk_bytes])
                if self.chunk_interval_s:
                    await asyncio.sleep(self.chunk_interval_s)
            await resp.write_eof()
        except ConnectionResetError:
            self.aborted += 1
        return resp


# ---- Deepgram live transcription -------------------------------------------------------------


def deepgram_results(
    transcript_words: Sequence[tuple[str, float, float]],
    *,
    start_s: float,
    duration_s: float,
    is_final: bool,
    speech_final: bool = False,
    from_finalize: bool = False,
) -> dict[str, Any]:
    """A Deepgram `Results` message: (word, start s, end s) per word, times on the connection's
    audio clock."""
    words = [{"word": w, "punctuated_word": w, "confidence": 0.99, "start": a, "end": b}
             for w, a, b in transcript_words]
    return {
        "type": "Results",
        "channel_index": [0, 1],
        "start": start_s,
        "duration": duration_s,
        "is_final": is_final,
        "speech_final": speech_final,
        "from_finalize": from_finalize,
        "channel": {"alternatives": [{
            "transcript": " ".join(w for w, _, _ in transcript_words),
            "confidence": 0.99 if words else 0.0,
            "words": words,
        }]},
        "metadata": {"request_id": "double", "model_info": {"name": "double"}},
    }


VOICED_DB = -45.0  # a 20 ms frame louder than this (RMS, dBFS) is speech
_FLOOR_DB = -60.0
_MAX_SHIFT = 2  # frames of onset misalignment tolerated between heard audio and a template
_COMPLETE = 0.85  # this much of a template heard: all of its words are out


def frame_levels(pcm: np.ndarray) -> np.ndarray:
    """RMS level in dBFS of each whole 20 ms frame of 16 kHz int16 audio, floored."""
    n = pcm.size // FRAME_SAMPLES
    frames = pcm[: n * FRAME_SAMPLES].reshape(n, FRAME_SAMPLES).astype(np.float64) / 32768
    rms = np.sqrt(np.mean(frames * frames, axis=1))
    return np.maximum(20 * np.log10(np.maximum(rms, 1e-9)), _FLOOR_DB)


@dataclass(frozen=True)
class Utterance:
    """Something a simulated user says: its text, and its audio (16 kHz int16)."""

    text: str
    pcm: np.ndarray


@dataclass(frozen=True)
class _Template:
    words: list[str]
    levels: np.ndarray  # from the first voiced frame to the last


def _template(u: Utterance) -> _Template:
    levels = frame_levels(u.pcm)
    voiced = np.flatnonzero(levels > VOICED_DB)
    if not voiced.size:
        raise ValueError(f"no speech in the audio of {u.text!r}")
    return _Template(u.text.split(), levels[voiced[0] : voiced[-1] + 1])


def contour_distance(heard: np.ndarray, template: np.ndarray, *, complete: bool) -> float:
    """How unlike `template` the `heard` levels (from the utterance's first voiced frame) are,
    in dB: the mean level difference at the best onset shift, plus a length penalty (heard
    longer than the template; or, once the utterance is over, any difference)."""
    best = np.inf
    for shift in range(-_MAX_SHIFT, _MAX_SHIFT + 1):
        h = heard[max(shift, 0):]
        t = template[max(-shift, 0):]
        k = min(h.size, t.size)
        if k:
            best = min(best, float(np.mean(np.abs(h[:k] - t[:k]))))
    excess = (heard.size - template.size) / template.size
    length = abs(excess) if complete else max(excess, 0.0)
    return best + 20.0 * length


@dataclass
class _Utterance:
    """The utterance being heard on one connection."""

    first_frame: int
    levels: list[float] = field(default_factory=list)
    voiced_len: int = 0  # frames up to and including the last voiced one
    words_out: int = 0  # words already in final results
    template: _Template | None = None  # fixed once words are final


class _Listener:
    """Deepgram's behaviour on one connection, driven by the audio it receives."""

    def __init__(self, templates: Sequence[_Template], params: dict[str, str],
                 interim_every: int) -> None:
        self.templates = templates
        self.interim = params.get("interim_results") == "true"
        self.vad_events = params.get("vad_events") == "true"
        endpointing = params.get("endpointing", "10")
        self.endpoint_frames = None if endpointing == "false" else max(1, int(endpointing) // 20)
        utterance_end = params.get("utterance_end_ms")
        self.utterance_end_frames = int(utterance_end) // 20 if utterance_end else None
        self.interim_every = interim_every
        self.pending = b""
        self.frame = 0  # frames heard on this connection
        self.seg_start = 0  # first frame not yet covered by a final result
        self.utt: _Utterance | None = None
        self.silent = 0
        self.last_word_end: float | None = None  # awaiting UtteranceEnd
        self.recognised: list[str] = []  # the text of each utterance, once complete

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self.pending += data
        n = len(self.pending) // (FRAME_SAMPLES * 2)
        if not n:
            return []
        pcm = np.frombuffer(self.pending[: n * FRAME_SAMPLES * 2], dtype="<i2")
        self.pending = self.pending[n * FRAME_SAMPLES * 2:]
        out: list[dict[str, Any]] = []
        for level in frame_levels(pcm):
            out += self._hear(float(level))
        return out

    def _hear(self, level: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        i = self.frame
        self.frame += 1
        utt = self.utt
        if level > VOICED_DB:
            if utt is None:
                utt = self.utt = _Utterance(first_frame=i)
                if self.vad_events:
                    out.append({"type": "SpeechStarted", "channel": [0, 1],
                                "timestamp": i * FRAME_S})
            utt.levels.append(level)
            utt.voiced_len = len(utt.levels)
            self.silent = 0
            self.last_word_end = (i + 1) * FRAME_S
            if self.interim and utt.voiced_len % self.interim_every == 0:
                out.append(self._results(is_final=False))
            return out
        self.silent += 1
        if utt is not None:
            utt.levels.append(level)
            if self.endpoint_frames is not None and self.silent >= self.endpoint_frames:
                out.append(self._results(is_final=True, speech_final=True))
        if (self.last_word_end is not None and self.utterance_end_frames is not None
                and self.silent >= self.utterance_end_frames):
            out.append({"type": "UtteranceEnd", "channel": [0, 1],
                        "last_word_end": self.last_word_end})
            self.last_word_end = None
        return out

    def finalize(self) -> list[dict[str, Any]]:
        """Like Deepgram: a from_finalize result when there is unfinalized audio, else none."""
        if self.frame == self.seg_start:
            return []
        return [self._results(is_final=True, from_finalize=True)]

    def _match(self, utt: _Utterance, *, complete: bool) -> _Template:
        if utt.template is not None:
            return utt.template
        heard = np.array(utt.levels[: utt.voiced_len])
        return min(self.templates,
                   key=lambda t: contour_distance(heard, t.levels, complete=complete))

    def _results(self, *, is_final: bool, speech_final: bool = False,
                 from_finalize: bool = False) -> dict[str, Any]:
        utt = self.utt
        words: list[tuple[str, float, float]] = []
        ended = False
        if utt is not None and utt.voiced_len:
            # Over once Deepgram's endpoint silence has passed, or at a Finalize in a pause.
            over = speech_final or (from_finalize and self.silent > 0)
            template = self._match(utt, complete=over)
            n = len(template.words)
            heard = utt.voiced_len / template.levels.size
            upto = n if heard >= _COMPLETE and (over or is_final) else min(n, int(n * heard))
            upto = max(upto, utt.words_out)
            span = template.levels.size * FRAME_S / n
            t0 = utt.first_frame * FRAME_S
            words = [(w, t0 + k * span, t0 + (k + 1) * span)
                     for k, w in enumerate(template.words[utt.words_out : upto], utt.words_out)]
            if is_final:
                utt.words_out = upto
                if words:
                    utt.template = template
                ended = speech_final or (over and upto == n)
                if ended:
                    self.recognised.append(" ".join(template.words))
        msg = deepgram_results(words, start_s=self.seg_start * FRAME_S,
                               duration_s=(self.frame - self.seg_start) * FRAME_S,
                               is_final=is_final, speech_final=speech_final,
                               from_finalize=from_finalize)
        if is_final:
            self.seg_start = self.frame
        if ended or (speech_final and utt is None):
            self.utt = None
        return msg


class DeepgramServerDouble:
    """/v1/listen (websocket) answering the `utterances` it is given. Results leave after a
    uniform random `delay_ms` (seeded), in order, as a remote service's do.
    `async with DeepgramServerDouble(utterances) as dg:` then connect to `dg.url`.

    `recognised` lists the text of every utterance heard, over all connections."""

    def __init__(
        self,
        utterances: Sequence[Utterance],
        *,
        api_key: str = "test-key",
        delay_ms: tuple[float, float] = (100.0, 200.0),
        interim_every_frames: int = 10,
        seed: int = 0,
    ) -> None:
        if not utterances:
            raise ValueError("the double needs the utterances it is to recognise")
        low, high = delay_ms
        if not 0 <= low <= high:
            raise ValueError("delay_ms must be (low, high) with 0 <= low <= high")
        self.templates = [_template(u) for u in utterances]
        self.api_key = api_key
        self.delay_ms = delay_ms
        self.interim_every_frames = interim_every_frames
        self.connections = 0
        self.recognised: list[str] = []
        self.url = ""
        self._jitter = random.Random(seed)
        self._server = _Server()

    async def __aenter__(self) -> DeepgramServerDouble:
        app = web.Application()
        app.router.add_get("/v1/listen", self._listen)
        await self._server._start(app)
        self.url = f"ws://127.0.0.1:{self._server.port}"
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._server._stop()

    async def _listen(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Token {self.api_key}":
            return web.json_response(
                {"err_code": "INVALID_AUTH", "err_msg": "Invalid credentials."}, status=401,
                headers={"dg-error": "Invalid credentials."})
        params = dict(request.query)
        expected = {"encoding": "linear16", "sample_rate": str(INPUT_RATE), "channels": "1"}
        if any(params.get(k) != v for k, v in expected.items()):
            return web.json_response({"err_code": "Bad Request"}, status=400)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        listener = _Listener(self.templates, params, self.interim_every_frames)
        outbox: asyncio.Queue[tuple[float, dict[str, Any] | None]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(ws, outbox))
        last_due = 0.0

        def post(messages: list[dict[str, Any]]) -> None:
            nonlocal last_due
            for msg in messages:
                last_due = max(last_due, time.monotonic()
                               + self._jitter.uniform(*self.delay_ms) / 1000)
                outbox.put_nowait((last_due, msg))

        try:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    post(listener.feed(msg.data))
                elif msg.type == WSMsgType.TEXT:
                    kind = json.loads(msg.data).get("type")
                    if kind == "Finalize":
                        post(listener.finalize())
                    elif kind == "CloseStream":
                        post(listener.finalize())
                        post([{"type": "Metadata", "request_id": "double",
                               "duration": listener.frame * FRAME_S, "channels": 1}])
                        break
                else:
                    break
            outbox.put_nowait((0.0, None))  # the results still due go out, then the socket closes
            await sender
            await ws.close()
        finally:
            sender.cancel()
            self.recognised += listener.recognised
        return ws

    @staticmethod
    async def _send(ws: web.WebSocketResponse,
                    outbox: asyncio.Queue[tuple[float, dict[str, Any] | None]]) -> None:
        while True:
            due, msg = await outbox.get()
            if msg is None or ws.closed:
                return
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            await ws.send_json(msg)
