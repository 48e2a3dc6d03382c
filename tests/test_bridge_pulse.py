"""`voxroom bridge` end to end on Linux: a private PulseAudio daemon with a null sink stands in
for the computer's speakers; the bridge (a real `voxroom bridge` process) captures the sink's
monitor and publishes it into a real livekit-server room, where a listener receives it.

- What is played into the sink arrives at the listener on the "meeting-audio" track
  (energy envelopes correlate).
- With --play-agent, the agent's voice that the bridge plays into the same sink is in the
  sink's monitor, yet never on the "meeting-audio" track (the echo gate).
"""

from __future__ import annotations

import asyncio
import json
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from livekit import api, rtc

from agent.ops.livekit_server import LiveKitServer
from agent.protocol import ATTR_BRIDGE_CANDIDATE
from bench.speech import RATE, espeak
from tests.marks import LIVEKIT_INTEGRATION
from tests.pulse_audio import SINK, paplay, pulse_daemon, sink_bridge
from tests.room_listener import MeetingListener

pytestmark = LIVEKIT_INTEGRATION

SENTENCE = "Ever tried. Ever failed. No matter. Try again. Fail again. Fail better."
WINDOW = RATE // 50  # 20 ms


@pytest.fixture(scope="module")
def pulse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with pulse_daemon(tmp_path_factory.mktemp("pulse")) as env:
        yield env


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    pcm = espeak(SENTENCE)
    path = tmp_path_factory.mktemp("speech") / "speech.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())
    return path, pcm


# ---- a listener in the room ----------------------------------------------------------------


class Listener(MeetingListener):
    """Records the meeting audio with each frame's arrival time."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[tuple[float, np.ndarray]] = []
        self.subscribed = asyncio.Event()

    def _subscribed(self, subscription: int) -> None:
        self.subscribed.set()

    def _heard(self, subscription: int, pcm: np.ndarray) -> None:
        self.frames.append((time.monotonic(), pcm.copy()))

    def audio_since(self, t: float) -> np.ndarray:
        chunks = [pcm for at, pcm in self.frames if at >= t]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.int16)


# ---- signal analysis -----------------------------------------------------------------------


def envelope(pcm: np.ndarray) -> np.ndarray:
    """RMS per 20 ms window."""
    n = len(pcm) // WINDOW
    x = pcm[: n * WINDOW].astype(np.float64).reshape(n, WINDOW)
    return np.sqrt(np.mean(x * x, axis=1))


def best_alignment(reference: np.ndarray, received: np.ndarray) -> tuple[float, int]:
    """(correlation, lag in 20 ms windows) of the reference's envelope within the received
    one. Envelopes are smoothed over 100 ms: the listener's jitter buffer may stretch or
    shrink the audio by a few ms here and there."""
    ref, rec = smooth(envelope(reference)), smooth(envelope(received))
    best = (-1.0, 0)
    for lag in range(0, len(rec) - len(ref) + 1):
        corr = float(np.corrcoef(ref, rec[lag : lag + len(ref)])[0, 1])
        if corr > best[0]:
            best = (corr, lag)
    return best


def smooth(x: np.ndarray, n: int = 5) -> np.ndarray:
    return np.convolve(x, np.ones(n) / n, mode="valid")


def tone_windows(pcm: np.ndarray, freq: float, *, min_dbfs: float = -50.0) -> int:
    """100 ms windows louder than `min_dbfs` whose power is mostly at `freq` (a pure tone)."""
    win = RATE // 10
    count = 0
    for i in range(0, len(pcm) - win + 1, win):
        x = pcm[i : i + win].astype(np.float64) / 32768.0
        if 10 * np.log10(np.mean(x * x) + 1e-20) < min_dbfs:
            continue
        power = np.abs(np.fft.rfft(x * np.hanning(win))) ** 2
        k = round(freq * win / RATE)
        if power[k - 2 : k + 3].sum() > 0.5 * power.sum():
            count += 1
    return count


# ---- tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sounddevice", "parec"])
async def test_what_the_sink_plays_reaches_the_room(
    livekit_server: LiveKitServer,
    pulse: dict[str, str],
    speech_wav: tuple[Path, np.ndarray],
    backend: str,
):
    wav, speech = speech_wav
    room = f"bridge-pulse-{backend}"
    listener = Listener()
    await listener.join(livekit_server, room)
    async with sink_bridge(
        livekit_server,
        pulse,
        room,
        "bridge",
        "--backend",
        backend,
        "--candidate",
        "candidate-1",
        "--agent-mode",
        "copilot",
    ) as bridge:
        await asyncio.wait_for(listener.subscribed.wait(), 10)
        metadata = listener.room.remote_participants["bridge"].metadata
        attributes = dict(listener.room.remote_participants["bridge"].attributes)
        await asyncio.sleep(0.5)
        played_at = time.monotonic()
        await paplay(pulse, wav)
        await asyncio.sleep(1.0)
        summary = await asyncio.to_thread(bridge.stop)
    await listener.leave()

    received = listener.audio_since(played_at)
    corr, lag = best_alignment(speech, received)
    latency = summary["tracks"]["meeting-audio"]["capture_to_publish_ms"]
    print(
        f"\n{backend}: envelope correlation {corr:.3f}; paplay start -> listener {lag * 20} ms; "
        f"capture -> publish {latency}; summary {summary}"
    )
    assert corr > 0.8
    assert lag * 20 < 1000
    assert summary["joins"] == 1
    assert json.loads(metadata) == {"voxroom.mode": "copilot"}
    assert attributes == {ATTR_BRIDGE_CANDIDATE: "candidate-1"}  # whose copilot listens to it
    assert latency["n"] > 100 and latency["p50"] < 20


async def test_the_agents_voice_played_here_is_kept_out_of_the_meeting_audio(
    livekit_server: LiveKitServer, pulse: dict[str, str], speech_wav: tuple[Path, np.ndarray]
):
    wav, _speech = speech_wav
    room = "bridge-echo"
    listener = Listener()
    await listener.join(livekit_server, room)
    agent = rtc.Room()
    token = (
        api.AccessToken(livekit_server.api_key, livekit_server.api_secret)
        .with_identity("agent-double")
        .with_kind("agent")
        .with_grants(api.VideoGrants(room_join=True, room=room, agent=True))
        .to_jwt()
    )
    await agent.connect(livekit_server.url, token)
    voice = rtc.AudioSource(48_000, 1)
    await agent.local_participant.publish_track(
        rtc.LocalAudioTrack.create_audio_track("agent-voice", voice),
        rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE),
    )
    # The sink's monitor, recorded independently: proof that the agent's voice was played.
    monitor = await asyncio.create_subprocess_exec(
        "parec",
        f"--device={SINK}.monitor",
        "--raw",
        "--format=s16le",
        f"--rate={RATE}",
        "--channels=1",
        env=pulse,
        stdout=asyncio.subprocess.PIPE,
    )
    async with sink_bridge(
        livekit_server, pulse, room, "bridge", "--candidate", "candidate-1", "--play-agent"
    ) as bridge:
        await asyncio.to_thread(bridge.wait_for, "playing agent-double's track", 10)
        await asyncio.sleep(1.0)
        started = time.monotonic()
        await speak_tone(voice, 1000.0, seconds=1.0)  # the agent "speaks"
        await asyncio.sleep(0.5)
        await paplay(pulse, wav)  # then the meeting
        await asyncio.sleep(1.0)
        summary = await asyncio.to_thread(bridge.stop)
    monitor.terminate()
    recorded, _ = await monitor.communicate()
    await agent.disconnect()
    await listener.leave()

    in_sink = tone_windows(np.frombuffer(recorded, np.int16), 1000.0)
    received = listener.audio_since(started)
    in_room = tone_windows(received, 1000.0)
    speech_windows = int((envelope(received) > 300).sum())
    print(
        f"\ntone: {in_sink} x 100 ms in the sink, {in_room} in the room; "
        f"{speech_windows} x 20 ms of meeting audio received; summary {summary}"
    )
    assert in_sink >= 7  # the bridge played the agent's voice into the output
    assert in_room == 0  # ... and none of it went back into the room
    assert summary["echo_gate_muted_frames"] >= 50
    assert speech_windows > 50  # the meeting itself still gets through


async def speak_tone(source: rtc.AudioSource, freq: float, *, seconds: float) -> None:
    """A pure tone at -10 dBFS, in 20 ms frames, in real time."""
    rate, n = 48_000, 960
    t = np.arange(int(seconds * rate)) / rate
    pcm = (0.3 * 32767 * np.sin(2 * np.pi * freq * t)).astype(np.int16)
    start = time.monotonic()
    for i in range(len(pcm) // n):
        await source.capture_frame(rtc.AudioFrame(pcm[i * n : (i + 1) * n].tobytes(), rate, 1, n))
        await asyncio.sleep(max(0.0, start + (i + 1) * 0.02 - time.monotonic()))
