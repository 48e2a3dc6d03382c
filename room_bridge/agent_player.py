"""`--play-agent`: the agent's voice from the room, played on this computer's output device.

Playing it here, rather than in another app, is what lets the bridge keep the agent's voice
out of the meeting audio it publishes: the output callback knows exactly which samples it
hands to the device and when the device plays them, and tells the `EchoGate`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from room_bridge.capture import CaptureError
from room_bridge.echo_gate import EchoGate
from room_bridge.frames import now_ms

if TYPE_CHECKING:
    from livekit import rtc

log = logging.getLogger(__name__)

RATE = 48_000
BLOCK = RATE // 50  # 20 ms
MAX_BUFFER = RATE // 5  # 200 ms; beyond that the oldest audio goes, so playback never lags


class AgentPlayer:
    def __init__(self, gate: EchoGate, device: int | None) -> None:
        self._gate = gate
        self._device = device
        self._buffer = np.zeros(0, np.int16)
        self._lock = threading.Lock()  # held for a copy only, by the loop and the callback
        self._stream: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.played_ms = 0.0  # agent audio (non-silent or not) handed to the device

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._open)

    def _open(self) -> None:
        import sounddevice as sd

        try:
            self._stream = sd.OutputStream(
                device=self._device,
                samplerate=RATE,
                channels=1,
                dtype="int16",
                blocksize=BLOCK,
                latency="low",
                callback=self._callback,
            )
            self._stream.start()
        except sd.PortAudioError as e:
            raise CaptureError(f"cannot open the output for the agent's voice: {e}") from e
        log.info("playing the agent's voice, output latency %.0f ms", self._stream.latency * 1000)

    def feed(self, pcm: np.ndarray) -> None:
        with self._lock:
            self._buffer = np.concatenate([self._buffer, pcm])[-MAX_BUFFER:]

    async def play(self, track: rtc.Track) -> None:
        """Play `track` until it ends or the task is cancelled."""
        from livekit import rtc

        from agent.transports.ffi_router import bind_audio_stream

        stream = rtc.AudioStream(track, sample_rate=RATE, num_channels=1)
        bind_audio_stream(stream)
        try:
            async for event in stream:
                self.feed(np.frombuffer(event.frame.data, np.int16))
        finally:
            await stream.aclose()

    def _callback(self, outdata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        handed = now_ms()
        with self._lock:
            chunk, self._buffer = self._buffer[:frames], self._buffer[frames:]
        outdata[: chunk.size, 0] = chunk
        outdata[chunk.size :, 0] = 0
        if chunk.size == 0:
            return
        self.played_ms += chunk.size * 1000 / RATE
        # When the first sample reaches the DAC, on PortAudio's clock, moved to ours.
        ahead_s = time_info.outputBufferDacTime - time_info.currentTime
        if time_info.outputBufferDacTime <= 0 or ahead_s < 0:
            ahead_s = self._stream.latency
        until = handed + (ahead_s + frames / RATE) * 1000
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._gate.note_played, chunk.copy(), handed, until)

    async def aclose(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await asyncio.to_thread(stream.close)
