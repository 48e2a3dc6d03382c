"""TEST DOUBLES of remote speech services, on loopback: OpenAI-compatible speech and
transcription endpoints (`TTSServerDouble`, `TranscriptionServerDouble`) and Deepgram's live
transcription websocket (`DeepgramServerDouble`).

`voxroom loadtest --engines remote` and the tests point the workers' real adapters
(tts/openai_tts.py, agent/adapters/stt/deepgram.py) at them, so that a worker's CPU goes to what a
worker with cloud engines does, not to local models. Like agent/testing/scripted_llm_server.py they
answer after a remote-like, seeded-random delay.

The TTS double speaks real speech (the bundled Piper voice, each distinct text synthesized once
and cached). The Deepgram double speaks the part of Deepgram's protocol voxroom uses, and hears
what its recogniser hears. `utterance_recogniser` "recognises" only the utterances it is given:
it cuts the audio into utterances by energy, and names each one after the given utterance whose
loudness contour (dB per 20 ms frame) is nearest, revealing its words as the audio goes on; it
knows nothing of any other speech. `word_code_recogniser` hears the test audio of `speech()`
(frames that carry a word's code) deterministically, for the adapter's own tests.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np
from aiohttp import WSMsgType, web

from agent.engines import FRAME_SAMPLES, INPUT_RATE

FRAME_S = FRAME_SAMPLES / INPUT_RATE
FRAME_BYTES = FRAME_SAMPLES * 2
PCM_RATE = 24_000  # OpenAI's rate for response_format "pcm"


def _loopback_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


class _Server:
    """One aiohttp route on a loopback port of its own (bound before it starts: no port race)."""

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None

    async def start(self, method: str, path: str,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> str:
        """Serves `handler` at `method path`; returns the address, 127.0.0.1:PORT."""
        app = web.Application()
        app.router.add_route(method, path, handler)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        sock = _loopback_socket()
        await web.SockSite(self._runner, sock).start()
        return f"127.0.0.1:{sock.getsockname()[1]}"

    async def stop(self) -> None:
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
        self.url = f"http://{await self._server.start('POST', '/v1/audio/speech', self._speech)}/v1"
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._server.stop()
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


# ---- OpenAI-compatible transcription ----------------------------------------------------------


Transcriber = Callable[[np.ndarray], Awaitable[str]]


class TranscriptionServerDouble:
    """POST /v1/audio/transcriptions (multipart: a 16 kHz mono WAV `file`, `model`,
    `language`, `response_format` "json"), answered {"text": ...} by `transcriber` (16 kHz
    int16 in; the tests give it the bundled Whisper, or a stand-in of their own).
    `fail_status` makes every request fail with it; `hold` (an Event), when set, is waited
    for before each answer. `requests` holds each request's fields and its audio's length."""

    def __init__(self, transcriber: Transcriber) -> None:
        self._transcriber = transcriber
        self.fail_status: int | None = None
        self.hold: asyncio.Event | None = None
        self.requests: list[dict[str, Any]] = []
        self.url = ""
        self._server = _Server()

    async def __aenter__(self) -> TranscriptionServerDouble:
        path = "/v1/audio/transcriptions"
        self.url = f"http://{await self._server.start('POST', path, self._transcribe)}/v1"
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._server.stop()

    async def _transcribe(self, request: web.Request) -> web.Response:
        import io

        import soundfile as sf

        form = await request.post()
        upload = form.get("file")
        fields = {k: str(v) for k, v in form.items() if k != "file"}
        if not isinstance(upload, web.FileField) or fields.get("response_format") != "json":
            return web.json_response({"error": {"message": "this double needs a file and "
                                                "response_format json"}}, status=400)
        pcm, rate = sf.read(io.BytesIO(upload.file.read()), dtype="int16")
        self.requests.append({**fields, "samples": len(pcm), "rate": rate,
                              "authorization": request.headers.get("Authorization", "")})
        if self.fail_status is not None:
            return web.json_response({"error": {"message": "the test double was told to fail",
                                                "type": "server_error"}},
                                     status=self.fail_status)
        if self.hold is not None:
            await self.hold.wait()
        return web.json_response({"text": await self._transcriber(pcm)})


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


class DeepgramListener:
    """Deepgram's messages on one connection, driven by the 20 ms frames of audio it receives:
    SpeechStarted as speech begins (vad_events), interim Results every `interim_every` frames
    of speech (interim_results), a speech_final Results after `endpointing` ms of silence,
    UtteranceEnd after `utterance_end_ms`, a from_finalize Results at a Finalize. What the
    audio says is the subclass's: `_frames` tells which frames are speech, `_words` what was
    said."""

    def __init__(self, params: dict[str, str], interim_every: int) -> None:
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
        self.in_speech = False  # an utterance has begun and is not over
        self.silent = 0  # frames since the last voiced one
        self.last_word_end: float | None = None  # awaiting UtteranceEnd
        self.recognised: list[str] = []  # the text of each utterance heard in full, if known

    def _frames(self, pcm: np.ndarray) -> Iterable[tuple[float, bool]]:
        """(what the subclass reads in it, whether it is speech) per whole frame of `pcm`."""
        raise NotImplementedError

    def _start(self, frame: int) -> None:
        """An utterance begins at `frame`."""

    def _voiced(self, frame: int, value: float) -> None:
        """`frame` of the utterance is speech that reads `value`."""

    def _quiet(self, value: float) -> None:
        """A frame of silence within the utterance."""

    def _interim_due(self) -> bool:
        raise NotImplementedError

    def _words(self, *, is_final: bool, speech_final: bool,
               from_finalize: bool) -> tuple[list[tuple[str, float, float]], bool]:
        """The words of a Results message (word, start s, end s), and whether it ends the
        utterance."""
        raise NotImplementedError

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self.pending += data
        whole = len(self.pending) // FRAME_BYTES * FRAME_BYTES
        pcm = np.frombuffer(self.pending[:whole], dtype="<i2")
        self.pending = self.pending[whole:]
        out: list[dict[str, Any]] = []
        for value, voiced in self._frames(pcm):
            out += self._hear(value, voiced)
        return out

    def _hear(self, value: float, voiced: bool) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        i = self.frame
        self.frame += 1
        if voiced:
            if not self.in_speech:
                self._start(i)
                self.in_speech = True
                if self.vad_events:
                    out.append({"type": "SpeechStarted", "channel": [0, 1],
                                "timestamp": i * FRAME_S})
            self._voiced(i, value)
            self.silent = 0
            self.last_word_end = (i + 1) * FRAME_S
            if self.interim and self._interim_due():
                out.append(self._results(is_final=False))
            return out
        self.silent += 1
        if self.in_speech:
            self._quiet(value)
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

    def _results(self, *, is_final: bool, speech_final: bool = False,
                 from_finalize: bool = False) -> dict[str, Any]:
        words, ended = self._words(is_final=is_final, speech_final=speech_final,
                                   from_finalize=from_finalize)
        msg = deepgram_results(words, start_s=self.seg_start * FRAME_S,
                               duration_s=(self.frame - self.seg_start) * FRAME_S,
                               is_final=is_final, speech_final=speech_final,
                               from_finalize=from_finalize)
        if is_final:
            self.seg_start = self.frame
        if ended:
            self.in_speech = False
        return msg


Recogniser = Callable[[dict[str, str]], DeepgramListener]
"""What a `DeepgramServerDouble` hears: a listener for each connection, given its query."""


# ---- hearing the utterances given, by their loudness contour ----------------------------------


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


class _ContourListener(DeepgramListener):
    """Names each utterance after the given one whose loudness contour is nearest."""

    def __init__(self, templates: Sequence[_Template], params: dict[str, str],
                 interim_every: int) -> None:
        super().__init__(params, interim_every)
        self.templates = templates
        self.utt: _Utterance | None = None

    def _frames(self, pcm: np.ndarray) -> Iterable[tuple[float, bool]]:
        return ((float(level), level > VOICED_DB) for level in frame_levels(pcm))

    def _start(self, frame: int) -> None:
        self.utt = _Utterance(first_frame=frame)

    def _voiced(self, frame: int, value: float) -> None:
        assert self.utt is not None
        self.utt.levels.append(value)
        self.utt.voiced_len = len(self.utt.levels)

    def _quiet(self, value: float) -> None:
        assert self.utt is not None
        self.utt.levels.append(value)

    def _interim_due(self) -> bool:
        return self.utt is not None and self.utt.voiced_len % self.interim_every == 0

    def _match(self, utt: _Utterance, *, complete: bool) -> _Template:
        if utt.template is not None:
            return utt.template
        heard = np.array(utt.levels[: utt.voiced_len])
        return min(self.templates,
                   key=lambda t: contour_distance(heard, t.levels, complete=complete))

    def _words(self, *, is_final: bool, speech_final: bool,
               from_finalize: bool) -> tuple[list[tuple[str, float, float]], bool]:
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
        if ended:
            self.utt = None
        return words, ended


def utterance_recogniser(utterances: Sequence[Utterance],
                         interim_every_frames: int = 10) -> Recogniser:
    """Hears real speech as the nearest of `utterances` (and nothing else), revealing its
    words as the audio goes on."""
    if not utterances:
        raise ValueError("the double needs the utterances it is to recognise")
    templates = [_template(u) for u in utterances]
    return lambda params: _ContourListener(templates, params, interim_every_frames)


# ---- hearing test audio of word codes ---------------------------------------------------------

_SILENCE_BELOW = 500


def word_code(utterance: int, word: int) -> int:
    return 1000 + 100 * utterance + word


def speech(utterance: int, words: int, frames_per_word: int = 5) -> np.ndarray:
    """Test audio that `word_code_recogniser(script)` hears as the first `words` words of
    script[utterance]: 20 ms frames whose samples all carry the word's code."""
    codes = [word_code(utterance, w) for w in range(words) for _ in range(frames_per_word)]
    return np.repeat(np.array(codes, dtype=np.int16), FRAME_SAMPLES)


def silence(ms: int) -> np.ndarray:
    return np.zeros(ms * 16, dtype=np.int16)


class _WordCodeListener(DeepgramListener):
    """Reads each frame's code as a word of the script (see `speech`); zeros are silence."""

    def __init__(self, script: Sequence[str], params: dict[str, str], interim_every: int) -> None:
        super().__init__(params, interim_every)
        self.script = script
        self.words: list[list[int]] = []  # [code, first frame, last frame] per word
        self.voiced = 0  # voiced frames since the last final result

    def _frames(self, pcm: np.ndarray) -> Iterable[tuple[float, bool]]:
        return ((code, abs(code) >= _SILENCE_BELOW)
                for code in (int(c) for c in pcm[::FRAME_SAMPLES]))

    def _voiced(self, frame: int, value: float) -> None:
        code = int(value)
        if self.words and self.words[-1][0] == code:
            self.words[-1][2] = frame
        else:
            self.words.append([code, frame, frame])
        self.voiced += 1

    def _interim_due(self) -> bool:
        return self.voiced % self.interim_every == 0

    def _word(self, code: int) -> str:
        u, w = divmod(code - 1000, 100)
        return self.script[u].split()[w]

    def _words(self, *, is_final: bool, speech_final: bool,
               from_finalize: bool) -> tuple[list[tuple[str, float, float]], bool]:
        words = [(self._word(c), first * FRAME_S, (last + 1) * FRAME_S)
                 for c, first, last in self.words]
        if is_final:
            self.words, self.voiced = [], 0
        return words, speech_final


def word_code_recogniser(script: Sequence[str], interim_every_frames: int = 5) -> Recogniser:
    """Hears the test audio of `speech()` deterministically: word `w` of utterance `u` reads
    as `script[u].split()[w]`. All timing is audio time (frames received), never the wall
    clock."""
    return lambda params: _WordCodeListener(script, params, interim_every_frames)


# ---- the server -------------------------------------------------------------------------------


@dataclass
class DeepgramConnection:
    params: dict[str, str]
    received: int = 0  # audio bytes
    audio: bytearray = field(default_factory=bytearray)  # the bytes, when the double keeps them
    # (message type, audio bytes received before it), in order of arrival
    controls: list[tuple[str, int]] = field(default_factory=list)
    dropped: bool = False

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.controls if k == kind)


class DeepgramServerDouble:
    """/v1/listen (websocket) with `Authorization: Token <api_key>`, hearing what `recognise`
    hears; Results leave after a uniform random `delay_ms` (seeded), in order, as a remote
    service's do. `async with DeepgramServerDouble(recognise) as dg:` then connect to `dg.url`.

    It records each connection (`connections`: its query, the control messages received, and
    with `keep_audio` the audio), counts refused handshakes (`rejected`) and lists the text of
    every utterance heard in full (`recognised`). `drop_after_bytes` aborts the next connection
    that has received that much audio, as a network failure would; `answer_finalize` False
    leaves Finalize unanswered, `honour_close_stream` False ignores CloseStream."""

    def __init__(
        self,
        recognise: Recogniser,
        *,
        api_key: str = "test-key",
        delay_ms: tuple[float, float] = (0.0, 0.0),
        seed: int = 0,
        keep_audio: bool = False,
        answer_finalize: bool = True,
        honour_close_stream: bool = True,
    ) -> None:
        low, high = delay_ms
        if not 0 <= low <= high:
            raise ValueError("delay_ms must be (low, high) with 0 <= low <= high")
        self.recognise = recognise
        self.api_key = api_key
        self.delay_ms = delay_ms
        self._jitter = random.Random(seed)
        self.answer_finalize = answer_finalize
        self.honour_close_stream = honour_close_stream
        self.drop_after_bytes: int | None = None
        # what it received
        self.keep_audio = keep_audio
        self.connections: list[DeepgramConnection] = []
        self.rejected = 0
        self.recognised: list[str] = []
        self._activity = asyncio.Event()  # set on every handshake and message received
        self.url = ""
        self._server = _Server()

    async def __aenter__(self) -> DeepgramServerDouble:
        self.url = f"ws://{await self._server.start('GET', '/v1/listen', self._listen)}"
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._server.stop()

    def connection(self, index: int = -1) -> DeepgramConnection:
        return self.connections[index]

    def last_count(self, kind: str) -> int:
        """How many `kind` control messages the latest connection got (0 before any)."""
        return self.connections[-1].count(kind) if self.connections else 0

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float = 2.0) -> None:
        """Wait until `condition()` (about what the double has received) holds."""
        async with asyncio.timeout(timeout_s):
            while not condition():
                self._activity.clear()
                await self._activity.wait()

    async def _listen(self, request: web.Request) -> web.StreamResponse:
        self._activity.set()
        if request.headers.get("Authorization") != f"Token {self.api_key}":
            self.rejected += 1
            return web.json_response(
                {"err_code": "INVALID_AUTH", "err_msg": "Invalid credentials."}, status=401,
                headers={"dg-error": "Invalid credentials."})
        params = dict(request.query)
        expected = {"encoding": "linear16", "sample_rate": str(INPUT_RATE), "channels": "1"}
        if any(params.get(k) != v for k, v in expected.items()):
            return web.json_response({"err_code": "Bad Request"}, status=400)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        conn = DeepgramConnection(params)
        self.connections.append(conn)
        listener = self.recognise(params)
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
                self._activity.set()
                if msg.type == WSMsgType.BINARY:
                    conn.received += len(msg.data)
                    if self.keep_audio:
                        conn.audio += msg.data
                    if self.drop_after_bytes is not None and conn.received >= self.drop_after_bytes:
                        self.drop_after_bytes = None
                        conn.dropped = True
                        assert request.transport is not None
                        request.transport.abort()
                        return ws
                    post(listener.feed(msg.data))
                elif msg.type == WSMsgType.TEXT:
                    kind = str(json.loads(msg.data).get("type"))
                    conn.controls.append((kind, conn.received))
                    if kind == "Finalize" and self.answer_finalize:
                        post(listener.finalize())
                    elif kind == "CloseStream" and self.honour_close_stream:
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
