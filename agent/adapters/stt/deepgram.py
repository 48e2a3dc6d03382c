"""`agent.engines.SpeechToText` over Deepgram's live transcription websocket (/v1/listen).

Plain aiohttp (already a dependency) rather than deepgram-sdk: the adapter needs its own
reconnect-and-replay logic around the socket, which the SDK does not provide.

Audio bookkeeping. Every pushed byte has a global offset (bytes since the stream's first
sample). A connection starts at `_conn_base`: the server's time 0 is that offset, so a result's
`start + duration` maps back to a global offset. Audio stays in `_buf` until a final result
covers it ("acknowledged"); a new connection resends the buffer from its start, so a drop
mid-utterance loses no audio and already final text is never transcribed twice.

Finalize marks. `finalize()` and `discard()` put a mark at the current end of the audio; the
sender sends {"type": "Finalize"} right after the audio up to the mark, on every connection
until a final result reaches the mark (Deepgram does not always answer a Finalize when little
audio is pending, so a covering final of any kind resolves it too).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
import numpy as np

from agent.config import STTSettings
from agent.drop_oldest import DropOldestQueue
from agent.engines import INPUT_RATE, Transcript
from agent.timeouts import finish_within

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "wss://api.deepgram.com"
_BYTES_PER_S = INPUT_RATE * 2
# A result that ends this close to a mark covers it: less than any word lasts.
_TOLERANCE_BYTES = _BYTES_PER_S // 10
# Rounding of the server's times: results ending this close to an offset end there.
_SLACK_BYTES = _BYTES_PER_S // 100
_SEND_CHUNK_BYTES = _BYTES_PER_S // 10
_FATAL_HANDSHAKE = {400: "bad request", 402: "no credit left", 404: "unknown endpoint"}


class DeepgramError(RuntimeError):
    """Deepgram could not transcribe (rejected the request, or the stream is closed)."""


class DeepgramAuthError(DeepgramError):
    """Deepgram rejected the API key."""


class DeepgramConnectionError(DeepgramError):
    """Deepgram could not be reached, or the connection was lost and could not be restored."""


@dataclass(frozen=True)
class DeepgramOptions:
    endpointing_ms: int = 300  # Deepgram's own endpoint: silence before `speech_final`
    utterance_end_ms: int = 1000  # silence after the last word before `UtteranceEnd` (>= 1000)
    smart_format: bool = True
    connect_timeout_s: float = 2.0
    finalize_timeout_s: float = 1.5
    keepalive_interval_s: float = 5.0  # Deepgram closes a socket after ~10 s without data
    heartbeat_s: float = 10.0  # websocket ping: notices a connection that died silently
    reconnect_backoff_s: float = 0.1  # first retry delay; doubles per failed attempt
    reconnect_backoff_max_s: float = 2.0
    max_reconnect_attempts: int = 6  # consecutive failures before the stream gives up
    stable_connection_s: float = 10.0  # a connection this old resets the failure count
    replay_buffer_s: float = 30.0  # unacknowledged audio kept for resending
    close_timeout_s: float = 1.0


# ---- speech events (Deepgram's VAD and endpointing, for a turn engine that wants them) --------


@dataclass(frozen=True)
class SpeechStarted:
    at_s: float  # audio position: seconds since the stream's first pushed sample


@dataclass(frozen=True)
class SpeechFinal:
    """Deepgram's endpoint (`speech_final`): `endpointing_ms` of silence after speech."""

    text: str  # the utterance so far
    at_s: float


@dataclass(frozen=True)
class UtteranceEnd:
    last_word_end_s: float


DeepgramEvent = SpeechStarted | SpeechFinal | UtteranceEnd

_FEED_ITEMS = 64  # partials and events kept for a reader that lags


@dataclass
class _Mark:
    offset: int
    waiter: asyncio.Future[None] | None  # None: a discard's cut, nobody waits for it
    sent_on: int = 0  # the connection it was last sent on


class DeepgramSTT:
    """Deepgram live transcription. One instance per process; one stream per speaker."""

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        model: str = "nova-3",
        options: DeepgramOptions | None = None,
    ) -> None:
        if not api_key:
            raise ValueError("Deepgram needs an API key (set DEEPGRAM_API_KEY)")
        self.options = options or DeepgramOptions()
        self.url = _listen_url(base_url or DEFAULT_BASE_URL, model, self.options)
        self._api_key = api_key

    @classmethod
    def from_settings(
        cls, settings: STTSettings, options: DeepgramOptions | None = None
    ) -> DeepgramSTT:
        base_url = settings.base_url or DEFAULT_BASE_URL
        return cls(settings.api_key, base_url=base_url, options=options)

    def stream(self) -> DeepgramSTTStream:
        """A connected stream (call inside the event loop). Close it with `aclose()`."""
        return DeepgramSTTStream(self.url, self._api_key, self.options)

    async def transcribe(self, pcm: np.ndarray) -> str:
        async with self.stream() as stream:
            stream.push(pcm)
            return await stream.finalize()


def _listen_url(base_url: str, model: str, o: DeepgramOptions) -> str:
    parts = urlsplit(base_url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss") or not parts.netloc:
        raise ValueError(f"Deepgram base_url must look like wss://host, got {base_url!r}")
    params = {
        "model": model,
        "encoding": "linear16",
        "sample_rate": INPUT_RATE,
        "channels": 1,
        "interim_results": "true",
        "endpointing": o.endpointing_ms,
        "utterance_end_ms": o.utterance_end_ms,
        "vad_events": "true",
        "smart_format": str(o.smart_format).lower(),
    }
    return f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}/v1/listen?{urlencode(params)}"


class DeepgramSTTStream:
    """`agent.engines.STTStream` on one Deepgram websocket, reconnected as needed.

    `partials()` yields the utterance so far: `final=True` when Deepgram has fixed a segment
    (it will not revise that text; the utterance may go on), `final=False` for interim text.
    `events()` yields SpeechStarted / SpeechFinal / UtteranceEnd. Each has one consumer.
    After a fatal error (bad key, retries exhausted) `push`, `finalize` and both iterators
    raise it.
    """

    def __init__(self, url: str, api_key: str, options: DeepgramOptions) -> None:
        self._url, self._api_key, self._opts = url, api_key, options
        self._host = urlsplit(url).netloc
        self._buf = bytearray()  # audio not yet covered by a final result
        self._buf_start = 0  # global offset of _buf[0]
        self._pushed_end = 0
        self._acked = 0  # global offset up to which final results cover the audio
        self._sent = 0  # global offset sent on the current connection
        self._conn_base = 0  # global offset of the current connection's time 0
        self._conn_id = 0
        self._connected = False
        self._marks: list[_Mark] = []
        self._segments: list[tuple[int, str]] = []  # (end offset, text) of final segments
        self._interim = ""
        self._consumed_until = 0  # results ending before this belong to a finished utterance
        self._endpointed = False  # Deepgram said speech_final and heard no speech since
        self._last_event_at: dict[type, float] = {}
        self._overflowing = False
        self._error: BaseException | None = None
        self._last_failure = ""
        self._closing = False
        self._closed = False
        self.reconnects = 0
        self._wake = asyncio.Event()
        # Unread, the oldest go: a stale partial or event is worthless.
        self._partials: DropOldestQueue[Transcript] = DropOldestQueue(_FEED_ITEMS)
        self._events: DropOldestQueue[DeepgramEvent] = DropOldestQueue(_FEED_ITEMS)
        self._session = aiohttp.ClientSession()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="deepgram-stream")

    async def __aenter__(self) -> DeepgramSTTStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---- STTStream ------------------------------------------------------------------------

    def push(self, pcm: np.ndarray) -> None:
        self._check_usable()
        if pcm.dtype != np.int16:
            raise TypeError(f"push() takes int16 samples at {INPUT_RATE} Hz, got {pcm.dtype}")
        data = np.ascontiguousarray(pcm, dtype="<i2").tobytes()
        self._buf += data
        self._pushed_end += len(data)
        excess = len(self._buf) - int(self._opts.replay_buffer_s * _BYTES_PER_S) // 2 * 2
        if excess > 0:
            if not self._overflowing:
                log.warning(
                    "Deepgram has not confirmed %.0f s of audio; dropping the oldest",
                    self._opts.replay_buffer_s,
                )
                self._overflowing = True
            del self._buf[:excess]
            self._buf_start += excess
            if self._sent < self._buf_start:  # unsent audio dropped: the server never hears it
                self._conn_base += self._buf_start - self._sent
                self._sent = self._buf_start
        self._wake.set()

    async def flush(self) -> str:
        """The utterance's text once Deepgram has finalized all audio pushed so far; the
        utterance goes on (see `finalize()` for the waiting)."""
        return await self._settle(close=False)

    async def finalize(self) -> str:
        """The utterance's text once Deepgram has finalized all audio pushed so far.

        Returns at once when final results already cover the audio, or when Deepgram's
        endpoint (speech_final) came and no speech since: the tail is silence. Otherwise sends
        Finalize and waits for the covering result, across reconnects, up to
        `finalize_timeout_s`; past that, returns the best text there is if connected, else
        raises DeepgramConnectionError.
        """
        return await self._settle(close=True)

    async def _settle(self, *, close: bool) -> str:
        self._check_usable()
        mark = self._pushed_end
        if mark - self._acked <= _TOLERANCE_BYTES or self._endpointed:
            return self._text_until(self._acked, close=close)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = _Mark(mark, waiter)
        self._marks.append(entry)
        self._wake.set()
        try:
            async with asyncio.timeout(self._opts.finalize_timeout_s):
                await waiter
        except TimeoutError:
            interim = self._interim
            if close:
                self._interim = ""
            text = " ".join(t for t in (self._text_until(mark, close=close), interim) if t)
            if not self._connected:
                raise DeepgramConnectionError(
                    f"no transcript within {self._opts.finalize_timeout_s} s: not connected to "
                    f"Deepgram at {self._host} ({self._last_failure or 'connecting'})"
                ) from None
            log.warning(
                "Deepgram did not finalize within %.1f s; using the interim text",
                self._opts.finalize_timeout_s,
            )
            return text
        finally:
            with contextlib.suppress(ValueError):
                self._marks.remove(entry)
        return self._text_until(mark, close=close)

    def discard(self) -> None:
        """Forget the current utterance; a Finalize cuts Deepgram's segment at this point so
        none of its words reach the next utterance."""
        self._segments.clear()
        self._interim = ""
        self._consumed_until = self._pushed_end
        self._endpointed = False
        if self._pushed_end - self._acked > _TOLERANCE_BYTES:
            self._marks.append(_Mark(self._pushed_end, None))
            self._wake.set()

    def partials(self) -> AsyncIterator[Transcript]:
        return self._partials.__aiter__()

    def events(self) -> AsyncIterator[DeepgramEvent]:
        return self._events.__aiter__()

    def set_paused(self, paused: bool) -> None:
        """No-op: Deepgram decodes remotely, so pausing would save no local CPU, and audio
        must keep flowing for the transcript to be complete."""

    async def aclose(self) -> None:
        """Send CloseStream, give the server `close_timeout_s` to close, then drop the socket.
        Pending `finalize()` calls raise DeepgramError."""
        if self._closed:
            return
        self._closed = self._closing = True
        self._wake.set()
        try:
            await finish_within(self._task, self._opts.close_timeout_s)
        finally:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            await self._session.close()
            self._end(self._error or DeepgramError("the Deepgram stream is closed"))

    # ---- connection -----------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        try:
            while not self._closing:
                try:
                    ws = await self._connect()
                except (aiohttp.ClientError, OSError, TimeoutError) as e:
                    timed_out = f"no answer within {self._opts.connect_timeout_s:g} s"
                    self._last_failure = _describe(e, timed_out)
                    failures = await self._back_off(failures, "cannot reach Deepgram")
                    continue
                opened = time.monotonic()
                self._on_connected()
                try:
                    reason = await self._pump(ws)
                finally:
                    self._connected = False
                    await ws.close()
                if self._closing:
                    return
                self._last_failure = reason
                if time.monotonic() - opened >= self._opts.stable_connection_s:
                    failures = 0
                self.reconnects += 1
                failures = await self._back_off(failures, "lost the connection to Deepgram")
        except DeepgramError as e:
            self._fail(e)
        except Exception as e:  # a bug must not leave finalize() waiting forever
            log.exception("Deepgram stream failed")
            self._fail(e)

    async def _back_off(self, failures: int, what: str) -> int:
        failures += 1
        if failures > self._opts.max_reconnect_attempts:
            raise DeepgramConnectionError(f"{what} at {self._host}: {self._last_failure}")
        delay = min(
            self._opts.reconnect_backoff_s * 2 ** (failures - 1), self._opts.reconnect_backoff_max_s
        )
        log.warning(
            "%s at %s (%s); retrying in %.2f s with %.1f s of unconfirmed audio",
            what,
            self._host,
            self._last_failure,
            delay,
            len(self._buf) / _BYTES_PER_S,
        )
        await asyncio.sleep(delay)
        return failures

    async def _connect(self) -> aiohttp.ClientWebSocketResponse:
        try:
            async with asyncio.timeout(self._opts.connect_timeout_s):
                return await self._session.ws_connect(
                    self._url,
                    headers={"Authorization": f"Token {self._api_key}"},
                    heartbeat=self._opts.heartbeat_s,
                    timeout=aiohttp.ClientWSTimeout(ws_close=self._opts.close_timeout_s),
                )
        except aiohttp.WSServerHandshakeError as e:
            detail = (e.headers.get("dg-error") if e.headers else None) or e.message
            if e.status in (401, 403):
                raise DeepgramAuthError(
                    f"Deepgram rejected the API key (HTTP {e.status}: {detail}); "
                    "check DEEPGRAM_API_KEY"
                ) from e
            if e.status in _FATAL_HANDSHAKE:
                raise DeepgramError(
                    f"Deepgram refused the stream (HTTP {e.status}, {_FATAL_HANDSHAKE[e.status]}:"
                    f" {detail})"
                ) from e
            raise  # 429, 5xx: worth retrying

    def _on_connected(self) -> None:
        self._conn_id += 1
        self._conn_base = self._sent = self._buf_start
        self._connected = True
        self._endpointed = False  # the new server has not heard the tail yet

    async def _pump(self, ws: aiohttp.ClientWebSocketResponse) -> str:
        """Send and receive until the connection ends; returns why it ended."""
        receiver = asyncio.create_task(self._receive(ws))
        sender = asyncio.create_task(self._send(ws))
        try:
            await asyncio.wait({receiver, sender}, return_when=asyncio.FIRST_COMPLETED)
            if sender.done() and sender.exception() is None:
                return await receiver  # CloseStream sent: the server closes after its results
            if sender.done():
                return _describe(sender.exception())
            return receiver.result()
        finally:
            for task in (receiver, sender):
                task.cancel()
            await asyncio.gather(receiver, sender, return_exceptions=True)

    async def _send(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        last_sent = time.monotonic()
        while True:
            self._wake.clear()
            if await self._send_pending(ws):
                last_sent = time.monotonic()
            if self._closing:
                await ws.send_str(json.dumps({"type": "CloseStream"}))
                return
            if self._wake.is_set():
                continue
            idle_left = last_sent + self._opts.keepalive_interval_s - time.monotonic()
            if idle_left <= 0:
                await ws.send_str(json.dumps({"type": "KeepAlive"}))
                last_sent = time.monotonic()
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(idle_left):
                    await self._wake.wait()

    async def _send_pending(self, ws: aiohttp.ClientWebSocketResponse) -> bool:
        """Audio not yet sent on this connection, with each Finalize after its mark's audio."""
        sent_any = False
        while True:
            mark = next((m for m in self._marks if m.sent_on != self._conn_id), None)
            target = mark.offset if mark else self._buf_start + len(self._buf)
            while self._sent < target:
                lo = self._sent - self._buf_start
                chunk = bytes(self._buf[lo : lo + min(target - self._sent, _SEND_CHUNK_BYTES)])
                self._sent += len(chunk)
                await ws.send_bytes(chunk)
                sent_any = True
            if mark is None:
                return sent_any
            mark.sent_on = self._conn_id
            await ws.send_str(json.dumps({"type": "Finalize"}))
            sent_any = True

    async def _receive(self, ws: aiohttp.ClientWebSocketResponse) -> str:
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                self._on_message(json.loads(msg.data))
            elif msg.type == aiohttp.WSMsgType.ERROR:
                return _describe(ws.exception())
        return f"closed by the server (code {ws.close_code})"

    # ---- server messages ------------------------------------------------------------------

    def _on_message(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "Results":
            self._on_results(msg)
        elif kind == "SpeechStarted":
            self._endpointed = False
            self._emit(SpeechStarted(self._seconds(msg.get("timestamp", 0.0))))
        elif kind == "UtteranceEnd":
            self._emit(UtteranceEnd(self._seconds(msg.get("last_word_end", 0.0))))
        elif kind == "Error":
            log.warning("Deepgram error: %s", msg.get("description") or msg)

    def _on_results(self, msg: dict[str, Any]) -> None:
        best = (msg.get("channel", {}).get("alternatives") or [{}])[0]
        start_s = float(msg.get("start", 0.0))
        # The server cannot confirm audio it was not sent.
        end = min(self._offset(start_s + float(msg.get("duration", 0.0))), self._sent)
        is_final = bool(msg.get("is_final"))
        consumed = self._consumed_until
        fresh = end > consumed + _SLACK_BYTES
        if not fresh:
            text = ""  # audio of an utterance already finalized or discarded
        elif self._offset(start_s) < consumed - _SLACK_BYTES:
            # The segment spans the end of a finished utterance (its Finalize went unanswered):
            # keep the words spoken after it.
            text = " ".join(
                str(w.get("punctuated_word") or w.get("word", ""))
                for w in best.get("words", [])
                if self._offset(float(w.get("start", 0.0))) >= consumed - _SLACK_BYTES
            )
        else:
            text = str(best.get("transcript", "")).strip()
        if is_final:
            if text:
                self._segments.append((end, text))
            self._interim = ""
            self._acknowledge(end, answers_finalize=bool(msg.get("from_finalize")))
            if msg.get("speech_final") and fresh:
                self._endpointed = True
                self._emit(SpeechFinal(self._utterance_text(), end / _BYTES_PER_S))
            elif text:
                self._endpointed = False
        else:
            self._interim = text
            if text:
                self._endpointed = False
        if text:
            self._partials.put([Transcript(self._utterance_text(), final=is_final)])

    def _acknowledge(self, end: int, *, answers_finalize: bool) -> None:
        if end > self._acked:
            self._acked = end
            drop = min(max(end - self._buf_start, 0), len(self._buf))
            del self._buf[:drop]
            self._buf_start += drop
            self._overflowing = False
        if answers_finalize:  # Deepgram answers Finalize messages in order
            oldest = next((m for m in self._marks if m.sent_on == self._conn_id), None)
            if oldest is not None:
                self._resolve(oldest)
        for mark in [m for m in self._marks if m.offset <= self._acked + _TOLERANCE_BYTES]:
            self._resolve(mark)

    def _resolve(self, mark: _Mark) -> None:
        self._marks.remove(mark)
        if mark.waiter is not None and not mark.waiter.done():
            mark.waiter.set_result(None)

    def _emit(self, event: DeepgramEvent) -> None:
        at = event.last_word_end_s if isinstance(event, UtteranceEnd) else event.at_s
        # A replay after a reconnect repeats the events of the resent audio.
        if at > self._last_event_at.get(type(event), -1.0):
            self._last_event_at[type(event)] = at
            self._events.put([event])

    # ---- helpers --------------------------------------------------------------------------

    def _offset(self, server_s: float) -> int:
        return self._conn_base + round(server_s * INPUT_RATE) * 2

    def _seconds(self, server_s: float) -> float:
        return self._conn_base / _BYTES_PER_S + float(server_s)

    def _utterance_text(self) -> str:
        return " ".join([t for _, t in self._segments] + ([self._interim] if self._interim else []))

    def _text_until(self, until: int, *, close: bool) -> str:
        """The text of the final segments up to `until`. Closing ends the utterance there:
        results for audio before it that arrive later belong to no utterance."""
        taken = [t for end, t in self._segments if end <= until + _SLACK_BYTES]
        if close:
            self._consumed_until = max(self._consumed_until, until)
            self._endpointed = False
            self._segments = [(e, t) for e, t in self._segments if e > until + _SLACK_BYTES]
        return " ".join(taken)

    def _check_usable(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise DeepgramError("the Deepgram stream is closed")

    def _fail(self, error: BaseException) -> None:
        log.error("Deepgram stream stopped: %s", error)
        self._error = error
        self._end(error)

    def _end(self, error: BaseException) -> None:
        for mark in self._marks:
            if mark.waiter is not None and not mark.waiter.done():
                mark.waiter.set_exception(error)
        self._marks.clear()
        self._partials.close(self._error)
        self._events.close(self._error)


def _describe(error: BaseException | None, timed_out: str = "timed out") -> str:
    if isinstance(error, TimeoutError):
        return timed_out
    return f"{type(error).__name__}: {error}" if error else "unknown error"
