"""`voxroom bridge` without hardware: device choice on fake device lists for each OS, frame
assembly (mixdown, resampling, 20 ms frames, timestamps), levels, the echo gate."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from agent.engines import FRAME_SAMPLES, INPUT_RATE
from room_bridge import capture
from room_bridge.agent_player import AgentPlayer
from room_bridge.bridge import BridgeStatus, TrackStats, backoff_s
from room_bridge.capture import CaptureError, device_list_from_pyaudio, open_loopback
from room_bridge.devices import (
    DEFAULT_MONITOR,
    DeviceInfo,
    DeviceList,
    DeviceNotFound,
    choose_loopback,
    choose_microphone,
    choose_output,
    describe,
)
from room_bridge.echo_gate import EchoGate
from room_bridge.frames import CapturedFrame, FrameAssembler, FrameQueue, now_ms
from room_bridge.levels import FLOOR_DBFS, LevelMeter, level_dbfs, meter_bar
from room_bridge.status_line import format_status

RATE_48K = 48_000


def dev(index: int, name: str, hostapi: str, ins: int, outs: int, rate: float = 48000.0):
    return DeviceInfo(index, name, hostapi, ins, outs, rate)


# ---- Linux ---------------------------------------------------------------------------------

LINUX = DeviceList(
    devices=[
        dev(0, "HDA Intel PCH: ALC3246 Analog (hw:0,0)", "ALSA", 2, 2, 44100.0),
        dev(1, "sysdefault", "ALSA", 128, 128, 44100.0),
        dev(2, "pulse", "ALSA", 32, 32, 44100.0),
        dev(3, "default", "ALSA", 32, 32, 44100.0),
    ],
    default_input=3,
    default_output=3,
)


def test_linux_default_is_the_default_sinks_monitor_through_alsa_pulse():
    d = choose_loopback("Linux", LINUX, None)
    assert (d.index, d.pulse_source, d.via_pulse) == (2, DEFAULT_MONITOR, True)
    assert (d.samplerate, d.channels) == (16000, 1)  # PulseAudio converts


def test_linux_a_pulse_source_name_goes_through_pulse_source():
    d = choose_loopback("Linux", LINUX, "voxroom_test.monitor")
    assert (d.index, d.pulse_source) == (2, "voxroom_test.monitor")
    assert "voxroom_test.monitor" in d.label


def test_linux_a_portaudio_device_name_is_opened_directly():
    d = choose_loopback("Linux", LINUX, "ALC3246")
    assert (d.index, d.via_pulse, d.pulse_source) == (0, False, None)
    assert (d.samplerate, d.channels) == (44100, 2)


def test_linux_without_the_alsa_pulse_plugin_falls_to_parec():
    bare = DeviceList(devices=[LINUX.devices[0]])
    d = choose_loopback("Linux", bare, None)
    assert d.index is None and d.pulse_source == DEFAULT_MONITOR


def test_linux_microphone_is_the_default_source():
    d = choose_microphone("Linux", LINUX, None)
    assert (d.index, d.pulse_source, d.via_pulse) == (2, None, True)
    usb = choose_microphone("Linux", LINUX, "alsa_input.usb-mic")
    assert usb.pulse_source == "alsa_input.usb-mic"


def test_linux_agent_voice_goes_to_the_pulse_device():
    assert choose_output("Linux", LINUX, None) == 2
    assert choose_output("Linux", LINUX, "hw:0,0") == 0


# ---- Windows -------------------------------------------------------------------------------

WINDOWS = DeviceList(
    devices=[
        dev(0, "Microsoft Sound Mapper - Input", "MME", 2, 0, 44100.0),
        dev(1, "Speakers (Realtek(R) Audio)", "MME", 0, 2, 44100.0),
        dev(2, "Microphone Array (Realtek(R) Audio)", "Windows WASAPI", 2, 0),
        dev(3, "Speakers (Realtek(R) Audio)", "Windows WASAPI", 0, 2),
        dev(4, "DELL U2720Q (NVIDIA High Definition Audio)", "Windows WASAPI", 0, 8),
        dev(5, "DELL U2720Q (NVIDIA High Definition Audio) [Loopback]", "Windows WASAPI", 8, 0),
        dev(6, "Speakers (Realtek(R) Audio) [Loopback]", "Windows WASAPI", 2, 0),
    ],
    default_input=0,
    default_output=1,
    wasapi_default_output=3,
)


def test_windows_default_is_the_loopback_of_the_default_wasapi_output():
    d = choose_loopback("Windows", WINDOWS, None)
    assert d.index == 6 and d.label == "Speakers (Realtek(R) Audio) [Loopback]"
    assert (d.samplerate, d.channels, d.via_pulse) == (48000, 2, False)


def test_windows_loopback_by_name_keeps_the_mix_format_channels():
    d = choose_loopback("Windows", WINDOWS, "DELL")
    assert (d.index, d.channels) == (5, 8)  # the 7.1 mix format, mixed down later


def test_windows_without_loopback_devices_says_how_to_get_them():
    plain = DeviceList(devices=WINDOWS.devices[:5], wasapi_default_output=3)
    with pytest.raises(DeviceNotFound, match="PyAudioWPatch"):
        choose_loopback("Windows", plain, None)
    # A virtual cable's input can still be named.
    assert choose_loopback("Windows", plain, "Microphone Array").index == 2


def test_windows_microphone_default_and_unknown():
    assert choose_microphone("Windows", WINDOWS, None).index == 0
    with pytest.raises(DeviceNotFound):
        choose_microphone("Windows", WINDOWS, "no such mic")
    assert choose_output("Windows", WINDOWS, None) is None


def test_pyaudio_device_dicts_become_a_device_list():
    infos = [
        {
            "index": 0,
            "name": "Speakers (Realtek(R) Audio)",
            "hostApi": 1,
            "maxInputChannels": 0,
            "maxOutputChannels": 2,
            "defaultSampleRate": 48000.0,
        },
        {
            "index": 1,
            "name": "Speakers (Realtek(R) Audio) [Loopback]",
            "hostApi": 1,
            "maxInputChannels": 2,
            "maxOutputChannels": 0,
            "defaultSampleRate": 48000.0,
        },
    ]
    hostapis = [
        {"name": "MME", "defaultOutputDevice": -1},
        {"name": "Windows WASAPI", "defaultOutputDevice": 0},
    ]
    devices = device_list_from_pyaudio(infos, hostapis)
    assert devices.wasapi_default_output == 0
    assert choose_loopback("Windows", devices, None).index == 1


# ---- macOS ---------------------------------------------------------------------------------

MAC = DeviceList(
    devices=[
        dev(0, "MacBook Pro Microphone", "Core Audio", 1, 0),
        dev(1, "MacBook Pro Speakers", "Core Audio", 0, 2),
        dev(2, "BlackHole 16ch", "Core Audio", 16, 16),
        dev(3, "Meeting Tap", "Core Audio", 2, 0),
    ],
    default_input=0,
    default_output=1,
)


def test_mac_default_is_a_loopback_driver_first_two_channels():
    d = choose_loopback("Darwin", MAC, None)
    assert (d.index, d.channels) == (2, 2)


def test_mac_process_tap_aggregate_by_name():
    assert choose_loopback("Darwin", MAC, "meeting tap").index == 3


def test_mac_without_a_loopback_device_points_to_the_docs():
    plain = DeviceList(devices=MAC.devices[:2], default_input=0, default_output=1)
    with pytest.raises(DeviceNotFound, match="BlackHole"):
        choose_loopback("Darwin", plain, None)
    assert choose_microphone("Darwin", plain, None).index == 0


def test_device_by_index_and_listing():
    assert choose_loopback("Darwin", MAC, "3").index == 3
    listing = describe(WINDOWS, "Windows")
    line = next(x for x in listing.splitlines() if x.strip().startswith("6 "))
    assert "<- loopback" in line
    assert listing.count("<- loopback") == 1


# ---- back-end choice and fallbacks ---------------------------------------------------------


def open_double(name: str, opened: list[tuple[str, object]], *, fail: bool = False):
    """Test double for a back-end's open(): records what it was asked to open."""

    async def open_(*args: object, **kwargs: object) -> str:
        if fail:
            raise CaptureError(f"{name} cannot open")
        opened.append((name, args[0]))
        return name

    return open_


@pytest.fixture
def backends(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """The three back-ends' open() replaced by doubles; the device list is set per test
    with `devices_double`."""
    opened: list[tuple[str, object]] = []
    monkeypatch.setattr(capture.SoundDeviceCapture, "open", open_double("sounddevice", opened))
    monkeypatch.setattr(capture.ParecCapture, "open", open_double("parec", opened))
    monkeypatch.setattr(capture.PyAudioWPatchCapture, "open", open_double("pyaudiowpatch", opened))
    monkeypatch.setattr(capture.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(capture, "_has_pyaudiowpatch", lambda: False)
    return opened


def devices_double(monkeypatch: pytest.MonkeyPatch, devices: DeviceList | Exception) -> None:
    def query() -> DeviceList:
        if isinstance(devices, Exception):
            raise devices
        return devices

    monkeypatch.setattr(capture, "query_devices", query)


async def test_linux_opens_the_monitor_with_sounddevice(monkeypatch, backends):
    devices_double(monkeypatch, LINUX)
    assert await open_loopback("Linux", None) == "sounddevice"
    assert backends[0][1].pulse_source == DEFAULT_MONITOR


async def test_linux_falls_back_to_parec(monkeypatch, backends):
    devices_double(monkeypatch, DeviceList(devices=[LINUX.devices[0]]))  # no ALSA `pulse`
    assert await open_loopback("Linux", None) == "parec"
    devices_double(monkeypatch, OSError("PortAudio library not found"))
    assert await open_loopback("Linux", "x.monitor") == "parec"
    assert backends[-1][1].pulse_source == "x.monitor"
    devices_double(monkeypatch, LINUX)
    failing = open_double("sounddevice", backends, fail=True)
    monkeypatch.setattr(capture.SoundDeviceCapture, "open", failing)
    assert await open_loopback("Linux", None) == "parec"  # sounddevice could not open it


async def test_forced_backends_do_not_fall_back(monkeypatch, backends):
    devices_double(monkeypatch, DeviceList(devices=[LINUX.devices[0]]))
    with pytest.raises(DeviceNotFound, match="libasound2-plugins"):
        await open_loopback("Linux", None, backend="sounddevice")
    with pytest.raises(CaptureError, match="Linux"):
        await open_loopback("Darwin", None, backend="parec")
    with pytest.raises(ValueError):
        await open_loopback("Linux", None, backend="pulse")


async def test_windows_falls_back_to_pyaudiowpatch_for_loopback(monkeypatch, backends):
    devices_double(monkeypatch, DeviceList(devices=WINDOWS.devices[:5], wasapi_default_output=3))
    with pytest.raises(DeviceNotFound, match="PyAudioWPatch"):
        await open_loopback("Windows", None)
    monkeypatch.setattr(capture, "_has_pyaudiowpatch", lambda: True)
    assert await open_loopback("Windows", None) == "pyaudiowpatch"
    devices_double(monkeypatch, WINDOWS)
    assert await open_loopback("Windows", None) == "sounddevice"  # it lists loopbacks itself


# ---- frames --------------------------------------------------------------------------------


def sine(freq: float, rate: int, seconds: float, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def push_all(asm: FrameAssembler, blocks: list[np.ndarray], block_ms: float = 20.0):
    frames: list[CapturedFrame] = []
    for i, block in enumerate(blocks):
        frames += asm.push(block, t_ms=i * block_ms)
    return frames


def test_48k_stereo_becomes_20ms_16k_mono_frames_with_the_same_tone():
    rate = 48000
    tone = sine(440, rate, 1.0)
    stereo = np.stack([tone, tone], axis=1)
    blocks = [stereo[i : i + 960] for i in range(0, len(stereo), 960)]
    frames = push_all(FrameAssembler(rate, 2), blocks)
    assert all(f.pcm.dtype == np.int16 and f.pcm.shape == (FRAME_SAMPLES,) for f in frames)
    assert 48 <= len(frames) <= 50  # the resampler holds back a few ms
    pcm = np.concatenate([f.pcm for f in frames]).astype(np.float64)
    spectrum = np.abs(np.fft.rfft(pcm))
    assert abs(np.argmax(spectrum) * INPUT_RATE / len(pcm) - 440) < 3
    assert abs(level_dbfs(pcm[1600:-1600].astype(np.int16)) - (20 * np.log10(0.5) - 3.01)) < 0.3


def test_frames_are_stamped_with_the_block_of_their_newest_sample():
    rate = 48000
    blocks = [np.full((960, 2), 1000, np.int16) for _ in range(20)]
    frames = push_all(FrameAssembler(rate, 2), blocks)
    # Frame k ends with output sample 320 k + 319, from input sample 960 k + 957: the k-th
    # block, pushed at 20 k ms (the frame itself leaves with block k + 1: soxr's lookahead).
    assert [f.t_ms for f in frames] == [20.0 * k for k in range(len(frames))]
    # Unresampled 20 ms blocks: each block is a frame, stamped with its own block.
    direct = push_all(FrameAssembler(INPUT_RATE, 1), [np.ones(320, np.int16)] * 5)
    assert [f.t_ms for f in direct] == [0.0, 20.0, 40.0, 60.0, 80.0]


def test_odd_rates_and_block_sizes_stamp_each_frame_with_its_newest_samples_block():
    rate = 44100
    audio = (sine(300, rate, 1.0) * 32767).astype(np.int16)
    asm = FrameAssembler(rate, 1)
    blocks: list[tuple[int, float]] = []  # (index of the block's first sample, push time)
    frames: list[CapturedFrame] = []
    pos, t = 0, 0.0
    for n in [441, 1000, 73, 2205, 882] * 8:
        blocks.append((pos, t))
        frames += asm.push(audio[pos : pos + n], t)
        pos += n
        t += 1000 * n / rate
    assert len(frames) >= 39  # 0.82 s of audio
    for k, f in enumerate(frames):
        last_input = (k * FRAME_SAMPLES + FRAME_SAMPLES - 1) * rate // INPUT_RATE
        assert f.t_ms == max(bt for start, bt in blocks if start <= last_input)


def test_mixdown_averages_channels_and_16k_mono_passes_through_untouched():
    left = np.full(960, 8000, np.int16)
    block = np.stack([left, -left], axis=1)
    frames = FrameAssembler(48000, 2).push(block, 0.0)
    assert all(not f.pcm.any() for f in frames)
    pcm = (np.arange(640) - 320).astype(np.int16) * 50
    out = FrameAssembler(INPUT_RATE, 1).push(pcm, 5.0)
    assert len(out) == 2 and np.array_equal(np.concatenate([f.pcm for f in out]), pcm)


def test_float_blocks_and_wrong_channel_count():
    asm = FrameAssembler(INPUT_RATE, 2)
    out = asm.push(np.full((320, 2), 0.25, np.float32), 0.0)
    assert out[0].pcm[0] == 8192
    with pytest.raises(ValueError, match="channels"):
        asm.push(np.zeros((320, 3), np.float32), 0.0)


async def test_frame_queue_drops_the_oldest_when_the_consumer_lags():
    q = FrameQueue(asyncio.get_running_loop(), max_frames=3)
    frames = [CapturedFrame(np.zeros(FRAME_SAMPLES, np.int16), float(i)) for i in range(5)]
    q.put(frames)
    q.close()
    got = [f.t_ms async for f in q]
    assert got == [2.0, 3.0, 4.0] and q.dropped == 2


async def test_frame_queue_from_a_thread_and_failure_ends_iteration():
    q = FrameQueue(asyncio.get_running_loop(), max_frames=10)
    frame = CapturedFrame(np.zeros(FRAME_SAMPLES, np.int16), 1.0)

    def audio_thread() -> None:
        q.put_threadsafe([frame])
        q.fail_threadsafe(RuntimeError("device unplugged"))

    threading.Thread(target=audio_thread).start()
    got = []
    with pytest.raises(RuntimeError, match="unplugged"):
        async for f in q:
            got.append(f)
    assert got == [frame]


# ---- levels --------------------------------------------------------------------------------


def test_level_dbfs():
    full = (sine(1000, INPUT_RATE, 0.1, amp=1.0) * 32767).astype(np.int16)
    assert level_dbfs(full) == pytest.approx(-3.01, abs=0.02)
    assert level_dbfs((full // 2).astype(np.int16)) == pytest.approx(-9.03, abs=0.05)
    assert level_dbfs(np.zeros(320, np.int16)) == FLOOR_DBFS
    assert level_dbfs(np.zeros(0, np.int16)) == FLOOR_DBFS


def test_level_meter_rises_at_once_and_falls_slowly():
    meter = LevelMeter(decay_db_per_s=30.0)
    loud = np.full(320, 16384, np.int16)  # -6.02 dBFS
    assert meter.update(loud, 0.0) == pytest.approx(-6.02, abs=0.01)
    assert meter.update(np.zeros(320, np.int16), 100.0) == pytest.approx(-9.02, abs=0.01)
    assert meter.value(1100.0) == pytest.approx(-39.02, abs=0.01)
    assert meter.value(10_000.0) == FLOOR_DBFS


def test_meter_bar():
    assert meter_bar(0.0, width=10) == "[##########]"
    assert meter_bar(-30.0, width=10) == "[#####.....]"
    assert meter_bar(-80.0, width=10) == "[..........]"


# ---- echo gate -----------------------------------------------------------------------------


def frame_at(t_ms: float, value: int = 3000) -> CapturedFrame:
    return CapturedFrame(np.full(FRAME_SAMPLES, value, np.int16), t_ms)


def play(gate: EchoGate, start_ms: float, seconds: float, amp: int = 8000) -> None:
    """The player hands 20 ms blocks to a device that plays each 30 ms later."""
    for i in range(int(seconds * 50)):
        handed = start_ms + 20 * i
        gate.note_played(np.full(960, amp, np.int16), handed, handed + 30 + 20)


def test_gate_mutes_frames_that_can_hold_the_agents_voice():
    gate = EchoGate(lead_ms=40, tail_ms=150)
    play(gate, 1000.0, 0.5)  # handed 1000..1480, played until 1530
    assert not gate.is_muted(950.0)
    assert gate.is_muted(960.0)  # spans the block in which the first played sample arrives
    assert gate.is_muted(1300.0)
    assert gate.is_muted(1680.0)  # the tail
    assert not gate.is_muted(1690.0)


def test_gate_replaces_muted_frames_with_silence_and_counts_them():
    gate = EchoGate(lead_ms=40, tail_ms=100)
    play(gate, 1000.0, 0.2)
    frames = [frame_at(t) for t in np.arange(900.0, 1500.0, 20.0)]
    out = [gate.apply(f) for f in frames]
    muted = [f.t_ms for f, o in zip(frames, out, strict=True) if not o.pcm.any()]
    # Handed over from 1000, played until 1230.
    assert muted == [t for t in np.arange(900.0, 1500.0, 20.0) if 960 <= t <= 1330]
    assert gate.muted_frames == len(muted)
    kept = [o for o in out if o.pcm.any()]
    assert all(np.array_equal(o.pcm, frame_at(0).pcm) for o in kept)
    assert frames[-1].pcm.any()  # the input frames are not modified


def test_gate_ignores_silent_playback_and_separates_phrases():
    gate = EchoGate(lead_ms=40, tail_ms=100)
    play(gate, 0.0, 1.0, amp=3)  # comfort noise: -80 dBFS
    assert not gate.is_muted(500.0)
    play(gate, 2000.0, 0.2)
    play(gate, 4000.0, 0.2)
    assert gate.is_muted(2100.0) and gate.is_muted(4100.0)
    assert not gate.is_muted(3000.0)


def test_gate_rejects_a_span_that_ends_before_it_starts():
    with pytest.raises(ValueError):
        EchoGate().note_played(np.full(960, 8000, np.int16), 100.0, 50.0)


async def test_agent_player_tells_the_gate_what_it_handed_to_the_device():
    gate = EchoGate(lead_ms=0, tail_ms=0)
    player = AgentPlayer(gate, device=None)
    player._loop = asyncio.get_running_loop()  # what start() sets, without opening a device
    player.feed(np.full(RATE_48K // 2, 8000, np.int16))  # 500 ms: only the newest 200 ms stay
    device_clock = SimpleNamespace(outputBufferDacTime=100.030, currentTime=100.000)
    blocks = []
    for _ in range(12):
        out = np.ones((960, 1), np.int16)
        t0 = now_ms()
        player._callback(out, 960, device_clock, None)
        blocks.append((t0, out[:, 0].copy()))
    await asyncio.sleep(0)  # the notes reach the gate through the event loop
    assert all((b == 8000).all() for _, b in blocks[:10]) and not blocks[10][1].any()
    assert player.played_ms == pytest.approx(200.0)
    first_handed = blocks[0][0]
    assert gate.is_muted(first_handed + 1)
    # The last block was handed at about t, reaches the DAC 30 ms later and lasts 20 ms.
    assert gate.is_muted(blocks[9][0] + 45)
    assert not gate.is_muted(blocks[9][0] + 80)


# ---- status --------------------------------------------------------------------------------


def test_backoff_doubles_to_ten_seconds():
    assert [backoff_s(a) for a in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_latency_summary_and_status_line():
    stats = TrackStats()
    assert stats.latency_summary()["n"] == 0
    stats.latency_ms.extend([1.0] * 90 + [10.0] * 10)
    summary = stats.latency_summary()
    assert summary["p50"] == 1.0 and summary["max"] == 10.0 and summary["n"] == 100
    assert stats.latency_summary(last=10)["p50"] == 10.0
    status = BridgeStatus("connected", {"meeting-audio": -20.0}, True, 1.5, 100, 3)
    line = format_status(status, "interview", width=200)
    assert line.startswith("interview: connected | meeting [")
    assert "-20 dB" in line and "muted" in line and "+1.5 ms" in line and "lost 3" in line
    assert len(format_status(status, "x" * 300)) == 120
