"""TEST DOUBLE of Deepgram's live transcription websocket, on loopback
(`DeepgramServerDouble`).

`voxroom loadtest --engines remote` and the tests point the workers' real adapter
(agent/adapters/stt/deepgram.py) at it, so that a worker's CPU goes to what a worker with cloud
engines does, not to a local model; its results leave after a remote-like, seeded-random delay.
It speaks the part of Deepgram's protocol voxroom uses (`DeepgramListener`), and hears what
its recogniser hears (agent/testing/deepgram_double_recognisers.py).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import WSMsgType, web

from agent.engines import FRAME_SAMPLES, INPUT_RATE
from agent.testing.loopback_server import LoopbackDouble

FRAME_S = FRAME_SAMPLES / INPUT_RATE
FRAME_BYTES = FRAME_SAMPLES * 2


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
    words = [
        {"word": w, "punctuated_word": w, "confidence": 0.99, "start": a, "end": b}
        for w, a, b in transcript_words
    ]
    return {
        "type": "Results",
        "channel_index": [0, 1],
        "start": start_s,
        "duration": duration_s,
        "is_final": is_final,
        "speech_final": speech_final,
        "from_finalize": from_finalize,
        "channel": {
            "alternatives": [
                {
                    "transcript": " ".join(w for w, _, _ in transcript_words),
                    "confidence": 0.99 if words else 0.0,
                    "words": words,
                }
            ]
        },
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

    def _words(
        self, *, is_final: bool, speech_final: bool, from_finalize: bool
    ) -> tuple[list[tuple[str, float, float]], bool]:
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
                    out.append(
                        {"type": "SpeechStarted", "channel": [0, 1], "timestamp": i * FRAME_S}
                    )
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
        if (
            self.last_word_end is not None
            and self.utterance_end_frames is not None
            and self.silent >= self.utterance_end_frames
        ):
            out.append(
                {"type": "UtteranceEnd", "channel": [0, 1], "last_word_end": self.last_word_end}
            )
            self.last_word_end = None
        return out

    def finalize(self) -> list[dict[str, Any]]:
        """Like Deepgram: a from_finalize result when there is unfinalized audio, else none."""
        if self.frame == self.seg_start:
            return []
        return [self._results(is_final=True, from_finalize=True)]

    def _results(
        self, *, is_final: bool, speech_final: bool = False, from_finalize: bool = False
    ) -> dict[str, Any]:
        words, ended = self._words(
            is_final=is_final, speech_final=speech_final, from_finalize=from_finalize
        )
        msg = deepgram_results(
            words,
            start_s=self.seg_start * FRAME_S,
            duration_s=(self.frame - self.seg_start) * FRAME_S,
            is_final=is_final,
            speech_final=speech_final,
            from_finalize=from_finalize,
        )
        if is_final:
            self.seg_start = self.frame
        if ended:
            self.in_speech = False
        return msg


Recogniser = Callable[[dict[str, str]], DeepgramListener]
"""What a `DeepgramServerDouble` hears: a listener for each connection, given its query."""


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


class DeepgramServerDouble(LoopbackDouble):
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
        super().__init__("GET", "/v1/listen", self._listen, url_format="ws://{}")
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
                {"err_code": "INVALID_AUTH", "err_msg": "Invalid credentials."},
                status=401,
                headers={"dg-error": "Invalid credentials."},
            )
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
                last_due = max(
                    last_due, time.monotonic() + self._jitter.uniform(*self.delay_ms) / 1000
                )
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
                        post(
                            [
                                {
                                    "type": "Metadata",
                                    "request_id": "double",
                                    "duration": listener.frame * FRAME_S,
                                    "channels": 1,
                                }
                            ]
                        )
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
    async def _send(
        ws: web.WebSocketResponse, outbox: asyncio.Queue[tuple[float, dict[str, Any] | None]]
    ) -> None:
        while True:
            due, msg = await outbox.get()
            if msg is None or ws.closed:
                return
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            await ws.send_json(msg)
