"""Capture back-ends: the computer's output audio (or a microphone) as 20 ms frames.

All of them deliver through `LoopbackCapture`: async iteration over `CapturedFrame`s
(16 kHz mono int16, 20 ms), `aclose()`. Device blocks are 10-20 ms (`block_ms`) and the
device latency is PortAudio's "low"; the queue to the event loop holds at most 100 ms.

- `SoundDeviceCapture`: PortAudio through sounddevice, every OS (the default).
- `ParecCapture`: Linux fallback when sounddevice cannot open the monitor (no PortAudio
  library, no ALSA `pulse` plugin, or the open fails): `parec` reads the PulseAudio
  source directly.
- `PyAudioWPatchCapture`: Windows fallback when sounddevice's PortAudio (19.7.0) lists no
  WASAPI loopback devices: PyAudioWPatch's PortAudio does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

import numpy as np

from agent.engines import INPUT_RATE
from room_bridge.devices import (
    CaptureDevice,
    DeviceInfo,
    DeviceList,
    DeviceNotFound,
    choose_loopback,
    choose_microphone,
    query_devices,
)
from room_bridge.frames import CapturedFrame, FrameAssembler, FrameQueue, now_ms

log = logging.getLogger(__name__)

QUEUE_FRAMES = 5  # 100 ms: beyond that, the oldest frames are dropped
BACKENDS = ("auto", "sounddevice", "parec", "pyaudiowpatch")


def block_ms(device: CaptureDevice) -> int:
    """Device block length: one frame when no resampling is needed (each block is a frame,
    sent at once); 10 ms otherwise, since the resampler's lookahead makes a frame wait for
    the next block."""
    return 20 if device.samplerate == INPUT_RATE and device.channels == 1 else 10


class CaptureError(RuntimeError):
    """The device could not be opened, or it went away while capturing."""


class LoopbackCapture(Protocol):
    label: str  # what is captured, for the status line
    queue: FrameQueue

    def __aiter__(self) -> AsyncIterator[CapturedFrame]: ...

    async def aclose(self) -> None: ...


async def open_loopback(
    system: str, requested: str | None, backend: str = "auto"
) -> LoopbackCapture:
    """The computer's output audio: `requested` names a device or a PulseAudio source."""
    return await _open(system, requested, backend, loopback=True)


async def open_microphone(
    system: str, requested: str | None, backend: str = "auto"
) -> LoopbackCapture:
    return await _open(system, requested, backend, loopback=False)


async def _open(
    system: str, requested: str | None, backend: str, *, loopback: bool
) -> LoopbackCapture:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    choose = choose_loopback if loopback else choose_microphone
    if backend == "parec":
        return await ParecCapture.open(_pulse_only(choose, system, requested))
    if backend == "pyaudiowpatch":
        return await PyAudioWPatchCapture.open(requested, loopback=loopback)
    try:
        devices = await asyncio.to_thread(query_devices)
    except OSError as e:  # sounddevice without a PortAudio library
        if backend == "auto" and system == "Linux":
            log.warning("sounddevice is unusable (%s); capturing with parec", e)
            return await ParecCapture.open(_pulse_only(choose, system, requested))
        raise CaptureError(f"sounddevice cannot load PortAudio: {e}") from e
    try:
        device = choose(system, devices, requested)
    except DeviceNotFound:
        if backend == "auto" and system == "Windows" and loopback and _has_pyaudiowpatch():
            return await PyAudioWPatchCapture.open(requested, loopback=True)
        raise
    if device.index is None:  # Linux without the ALSA `pulse` plugin
        if backend == "auto":
            log.warning(
                "PortAudio lists no ALSA `pulse` device (is PulseAudio or PipeWire "
                "running? libasound2-plugins installed?); capturing with parec"
            )
            return await ParecCapture.open(device)
        raise DeviceNotFound(
            "no ALSA `pulse` device: install libasound2-plugins, or use --backend parec"
        )
    try:
        return await SoundDeviceCapture.open(device)
    except CaptureError as e:
        if backend == "auto" and device.via_pulse and shutil.which("parec"):
            log.warning("%s; capturing with parec instead", e)
            return await ParecCapture.open(device)
        raise


def _pulse_only(choose: Any, system: str, requested: str | None) -> CaptureDevice:
    if system != "Linux":
        raise CaptureError("the parec back-end needs PulseAudio or PipeWire (Linux)")
    return choose(system, DeviceList(devices=[]), requested)


# ---- sounddevice (PortAudio) ------------------------------------------------------------

_ENV_LOCK = threading.Lock()


@contextlib.contextmanager
def pulse_source_env(source: str | None) -> Iterator[None]:
    """PULSE_SOURCE for the ALSA `pulse` device opened inside (libpulse reads it when the
    device is opened); unset means the default source. Restored after."""
    with _ENV_LOCK:
        old = os.environ.get("PULSE_SOURCE")
        if source is None:
            os.environ.pop("PULSE_SOURCE", None)
        else:
            os.environ["PULSE_SOURCE"] = source
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("PULSE_SOURCE", None)
            else:
                os.environ["PULSE_SOURCE"] = old


class _PortAudioCapture:
    """A PortAudio input stream on `device`: its callback (PortAudio's thread) hands each
    block to `_assemble`, which queues the frames for the event loop."""

    def __init__(self, device: CaptureDevice, loop: asyncio.AbstractEventLoop) -> None:
        self.device = device
        self.label = device.label
        self.queue = FrameQueue(loop, QUEUE_FRAMES)
        self._assembler = FrameAssembler(device.samplerate, device.channels)
        self._stream: Any = None

    def _assemble(self, block: np.ndarray) -> None:
        self.queue.put_threadsafe(self._assembler.push(block, now_ms()))

    def __aiter__(self) -> AsyncIterator[CapturedFrame]:
        return self.queue.__aiter__()


class SoundDeviceCapture(_PortAudioCapture):
    """Through the sounddevice package."""

    def __init__(self, device: CaptureDevice, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(device, loop)
        self._closing = False

    @classmethod
    async def open(cls, device: CaptureDevice) -> SoundDeviceCapture:
        capture = cls(device, asyncio.get_running_loop())
        await asyncio.to_thread(capture._start)
        return capture

    def _start(self) -> None:
        import sounddevice as sd

        d = self.device
        try:
            env = pulse_source_env(d.pulse_source) if d.via_pulse else contextlib.nullcontext()
            with env:
                self._stream = sd.InputStream(
                    device=d.index,
                    channels=d.channels,
                    samplerate=d.samplerate,
                    blocksize=d.samplerate * block_ms(d) // 1000,
                    dtype="int16",
                    latency="low",
                    callback=self._callback,
                    finished_callback=self._finished,
                )
            self._stream.start()
        except sd.PortAudioError as e:
            raise CaptureError(f"cannot open {d.label!r}: {e}") from e
        log.info(
            "capturing %s: %d Hz, %d ch, input latency %.0f ms",
            d.label,
            d.samplerate,
            d.channels,
            self._stream.latency * 1000,
        )

    def _callback(self, indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        self._assemble(indata)

    def _finished(self) -> None:
        if not self._closing:
            self.queue.fail_threadsafe(CaptureError(f"{self.label}: the audio device stopped"))

    async def aclose(self) -> None:
        self._closing = True
        self.queue.close()
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await asyncio.to_thread(stream.close)


# ---- parec (PulseAudio / PipeWire, Linux) --------------------------------------------------


class ParecCapture:
    """`parec` reading a PulseAudio source as raw s16le with a 20 ms latency target."""

    def __init__(self, device: CaptureDevice, proc: asyncio.subprocess.Process) -> None:
        self.device = device
        self.label = device.label
        self.queue = FrameQueue(asyncio.get_running_loop(), QUEUE_FRAMES)
        self._assembler = FrameAssembler(device.samplerate, device.channels)
        self._proc = proc
        self._reader = asyncio.create_task(self._read(), name="parec-reader")

    @classmethod
    async def open(cls, device: CaptureDevice) -> ParecCapture:
        parec = shutil.which("parec")
        if parec is None:
            raise CaptureError("parec is not installed (Debian: pulseaudio-utils)")
        args = [
            parec,
            "--raw",
            "--format=s16le",
            f"--rate={device.samplerate}",
            f"--channels={device.channels}",
            f"--latency-msec={block_ms(device)}",
            "--client-name=voxroom-bridge",
        ]
        if device.pulse_source:
            args.append(f"--device={device.pulse_source}")
        proc = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        log.info(
            "capturing %s with parec: %d Hz, %d ch",
            device.label,
            device.samplerate,
            device.channels,
        )
        return cls(device, proc)

    async def _read(self) -> None:
        assert self._proc.stdout is not None and self._proc.stderr is not None
        d = self.device
        block_bytes = d.samplerate * block_ms(d) // 1000 * d.channels * 2
        try:
            while True:
                data = await self._proc.stdout.readexactly(block_bytes)
                block = np.frombuffer(data, np.int16).reshape(-1, self.device.channels)
                self.queue.put(self._assembler.push(block, now_ms()))
        except asyncio.IncompleteReadError:
            err = (await self._proc.stderr.read()).decode(errors="replace").strip()
            self.queue.close(CaptureError(f"parec stopped capturing {self.label}: {err}"))

    def __aiter__(self) -> AsyncIterator[CapturedFrame]:
        return self.queue.__aiter__()

    async def aclose(self) -> None:
        self.queue.close()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
        if self._proc.returncode is None:
            self._proc.terminate()
            await self._proc.wait()


# ---- PyAudioWPatch (WASAPI loopback, Windows) ----------------------------------------------


def _has_pyaudiowpatch() -> bool:
    try:
        import pyaudiowpatch  # noqa: F401
    except ImportError:
        return False
    return True


def device_list_from_pyaudio(
    infos: list[dict[str, Any]], hostapis: list[dict[str, Any]]
) -> DeviceList:
    """PyAudio's device and host API dicts -> a DeviceList (PortAudio's fields, renamed)."""
    devices = [
        DeviceInfo(
            index=int(d["index"]),
            name=str(d["name"]),
            hostapi=str(hostapis[int(d["hostApi"])]["name"]),
            max_input_channels=int(d["maxInputChannels"]),
            max_output_channels=int(d["maxOutputChannels"]),
            default_samplerate=float(d["defaultSampleRate"]),
        )
        for d in infos
    ]
    wasapi = next((h for h in hostapis if "WASAPI" in str(h["name"])), None)
    out = int(wasapi["defaultOutputDevice"]) if wasapi else -1
    return DeviceList(devices=devices, wasapi_default_output=out if out >= 0 else None)


class PyAudioWPatchCapture(_PortAudioCapture):
    """PyAudioWPatch's PortAudio stream on a WASAPI "[Loopback]" device. Not tested in CI
    (it needs Windows); the device choice it uses is."""

    def __init__(self, device: CaptureDevice, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(device, loop)
        self._pa: Any = None
        self._continue = 0

    @classmethod
    async def open(cls, requested: str | None, *, loopback: bool) -> PyAudioWPatchCapture:
        loop = asyncio.get_running_loop()
        return await asyncio.to_thread(cls._open_blocking, requested, loopback, loop)

    @classmethod
    def _open_blocking(
        cls, requested: str | None, loopback: bool, loop: asyncio.AbstractEventLoop
    ) -> PyAudioWPatchCapture:
        try:
            import pyaudiowpatch as pyaudio
        except ImportError as e:
            raise CaptureError("PyAudioWPatch is not installed: pip install PyAudioWPatch") from e
        pa = pyaudio.PyAudio()
        try:
            infos = [pa.get_device_info_by_index(i) for i in range(pa.get_device_count())]
            hostapis = [pa.get_host_api_info_by_index(i) for i in range(pa.get_host_api_count())]
            devices = device_list_from_pyaudio(infos, hostapis)
            choose = choose_loopback if loopback else choose_microphone
            device = choose("Windows", devices, requested)
            capture = cls(device, loop)
            capture._pa, capture._continue = pa, pyaudio.paContinue
            capture._stream = pa.open(
                format=pyaudio.paInt16,
                channels=device.channels,
                rate=device.samplerate,
                input=True,
                input_device_index=device.index,
                frames_per_buffer=device.samplerate * block_ms(device) // 1000,
                stream_callback=capture._callback,
            )
        except BaseException:
            pa.terminate()
            raise
        return capture

    def _callback(
        self, in_data: bytes, frame_count: int, time_info: Any, status: int
    ) -> tuple[None, int]:
        self._assemble(np.frombuffer(in_data, np.int16).reshape(-1, self.device.channels))
        return None, self._continue

    async def aclose(self) -> None:
        self.queue.close()
        stream, pa = self._stream, self._pa
        self._stream = self._pa = None

        def close() -> None:
            if stream is not None:
                stream.stop_stream()
                stream.close()
            if pa is not None:
                pa.terminate()

        await asyncio.to_thread(close)
