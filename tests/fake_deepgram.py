"""A TEST DOUBLE of Deepgram's live transcription websocket (/v1/listen), on loopback.

It speaks the part of the protocol voxroom uses (Results, SpeechStarted, UtteranceEnd,
Metadata; KeepAlive, Finalize, CloseStream; `Authorization: Token <key>`) and "recognises"
audio deterministically: test speech is 20 ms frames whose samples all carry one code,
`word_code(utterance, word)` (see `speech()`), and silence is zeros. Word `w` of utterance `u`
reads as `script[u].split()[w]`. All timing is audio time (frames received), never the
wall clock, so the results do not depend on how fast the test pushes.

Per connection it records the audio bytes and control messages received, and it can be told
to drop a connection (abort the TCP connection, as a network failure would) once it has
received a number of audio bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np
from aiohttp import WSMsgType, web

from agent.engines import FRAME_SAMPLES
from agent.testing.remote_doubles import deepgram_results
from tests.local_http import serve_app

FRAME_BYTES = FRAME_SAMPLES * 2
FRAME_S = 0.02
_SILENCE_BELOW = 500


def word_code(utterance: int, word: int) -> int:
    return 1000 + 100 * utterance + word


def speech(utterance: int, words: int, frames_per_word: int = 5) -> np.ndarray:
    """Test audio the fake hears as the first `words` words of script[utterance]."""
    codes = [word_code(utterance, w) for w in range(words) for _ in range(frames_per_word)]
    return np.repeat(np.array(codes, dtype=np.int16), FRAME_SAMPLES)


def silence(ms: int) -> np.ndarray:
    return np.zeros(ms * 16, dtype=np.int16)


@dataclass
class FakeConnection:
    params: dict[str, str]
    audio: bytearray = field(default_factory=bytearray)
    # (message type, audio bytes received before it), in order of arrival
    controls: list[tuple[str, int]] = field(default_factory=list)
    dropped: bool = False

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.controls if k == kind)


class _Recogniser:
    """Deepgram's behaviour on one connection, driven by the audio frames it receives."""

    def __init__(self, script: Sequence[str], params: dict[str, str], interim_every: int) -> None:
        self.script = script
        self.interim = params.get("interim_results") == "true"
        self.vad_events = params.get("vad_events") == "true"
        endpointing = params.get("endpointing", "10")
        self.endpoint_frames = None if endpointing == "false" else int(endpointing) // 20
        utterance_end = params.get("utterance_end_ms")
        self.utterance_end_frames = int(utterance_end) // 20 if utterance_end else None
        self.interim_every = interim_every
        self.pending = b""
        self.frame = 0  # frames heard on this connection
        self.seg_start = 0
        self.words: list[list[Any]] = []  # [code, first frame, last frame] per word
        self.voiced = 0  # voiced frames in the segment
        self.in_speech = False
        self.silent_frames = 0
        self.last_word_end: float | None = None  # awaiting UtteranceEnd

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        self.pending += data
        while len(self.pending) >= FRAME_BYTES:
            frame = np.frombuffer(self.pending[:FRAME_BYTES], dtype=np.int16)
            self.pending = self.pending[FRAME_BYTES:]
            out += self._hear(int(frame[0]) if abs(int(frame[0])) >= _SILENCE_BELOW else None)
        return out

    def _hear(self, code: int | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        i = self.frame
        self.frame += 1
        if code is not None:
            if not self.in_speech and self.vad_events:
                out.append({"type": "SpeechStarted", "channel": [0, 1], "timestamp": i * FRAME_S})
            self.in_speech, self.silent_frames = True, 0
            if self.words and self.words[-1][0] == code:
                self.words[-1][2] = i
            else:
                self.words.append([code, i, i])
            self.last_word_end = (i + 1) * FRAME_S
            self.voiced += 1
            if self.interim and self.voiced % self.interim_every == 0:
                out.append(self._results(is_final=False))
            return out
        self.silent_frames += 1
        if (self.in_speech and self.endpoint_frames is not None
                and self.silent_frames >= self.endpoint_frames):
            out.append(self._results(is_final=True, speech_final=True))
            self.in_speech = False
        if (self.last_word_end is not None and self.utterance_end_frames is not None
                and self.silent_frames >= self.utterance_end_frames):
            out.append({"type": "UtteranceEnd", "channel": [0, 1],
                        "last_word_end": self.last_word_end})
            self.last_word_end = None
        return out

    def finalize(self) -> list[dict[str, Any]]:
        """Like Deepgram: a from_finalize result when there is unfinalized audio, else none."""
        if self.frame == self.seg_start:
            return []
        return [self._results(is_final=True, from_finalize=True)]

    def _word(self, code: int) -> str:
        u, w = divmod(code - 1000, 100)
        return self.script[u].split()[w]

    def _results(self, *, is_final: bool, speech_final: bool = False,
                 from_finalize: bool = False) -> dict[str, Any]:
        words = [(self._word(c), first * FRAME_S, (last + 1) * FRAME_S)
                 for c, first, last in self.words]
        msg = deepgram_results(
            words,
            start_s=self.seg_start * FRAME_S, duration_s=(self.frame - self.seg_start) * FRAME_S,
            is_final=is_final, speech_final=speech_final, from_finalize=from_finalize)
        if is_final:
            self.seg_start, self.words, self.voiced = self.frame, [], 0
        return msg


class FakeDeepgram:
    """The fake server. `async with FakeDeepgram(script) as fake:` then connect to `fake.url`."""

    def __init__(
        self,
        script: Sequence[str],
        *,
        api_key: str = "test-key",
        interim_every_frames: int = 5,
        answer_finalize: bool = True,
        honour_close_stream: bool = True,
    ) -> None:
        self.script = list(script)
        self.api_key = api_key
        self.interim_every_frames = interim_every_frames
        self.answer_finalize = answer_finalize
        self.honour_close_stream = honour_close_stream
        self.connections: list[FakeConnection] = []
        self.rejected = 0  # handshakes refused for a bad key
        self.drop_after_bytes: int | None = None  # applies to the next connection that gets there
        self.url = ""
        self._server = contextlib.AsyncExitStack()
        self._activity = asyncio.Event()  # set on every handshake and message received

    async def __aenter__(self) -> FakeDeepgram:
        app = web.Application()
        app.router.add_get("/v1/listen", self._listen)
        origin = await self._server.enter_async_context(serve_app(app))
        self.url = "ws" + origin.removeprefix("http")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._server.aclose()

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float = 2.0) -> None:
        """Wait until `condition()` (about what the fake has received) holds."""
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
        expected = {"encoding": "linear16", "sample_rate": "16000", "channels": "1"}
        if any(params.get(k) != v for k, v in expected.items()):
            return web.json_response({"err_code": "Bad Request"}, status=400)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        conn = FakeConnection(params)
        self.connections.append(conn)
        rec = _Recogniser(self.script, params, self.interim_every_frames)
        async for msg in ws:
            self._activity.set()
            if msg.type == WSMsgType.BINARY:
                conn.audio += msg.data
                if self.drop_after_bytes is not None and len(conn.audio) >= self.drop_after_bytes:
                    self.drop_after_bytes = None
                    conn.dropped = True
                    assert request.transport is not None
                    request.transport.abort()
                    break
                replies = rec.feed(msg.data)
            elif msg.type == WSMsgType.TEXT:
                kind = json.loads(msg.data)["type"]
                conn.controls.append((kind, len(conn.audio)))
                replies = rec.finalize() if kind == "Finalize" and self.answer_finalize else []
                if kind == "CloseStream" and self.honour_close_stream:
                    for reply in rec.finalize():
                        await ws.send_json(reply)
                    await ws.send_json({"type": "Metadata", "request_id": "fake",
                                        "duration": rec.frame * FRAME_S, "channels": 1})
                    await ws.close()
                    break
            else:
                break
            for reply in replies:
                await ws.send_json(reply)
        return ws

    def connection(self, index: int = -1) -> FakeConnection:
        return self.connections[index]

    def last_count(self, kind: str) -> int:
        """How many `kind` control messages the latest connection got (0 before any)."""
        return self.connections[-1].count(kind) if self.connections else 0
