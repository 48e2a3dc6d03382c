"""Which audio device carries this computer's output audio, per operating system.

The choice is a pure function of PortAudio's device list (tested on fake lists):

- Linux: the monitor source of a PulseAudio/PipeWire sink, opened through ALSA's `pulse`
  device with `PULSE_SOURCE` naming the source (default: the default sink's monitor), as
  16 kHz mono (the server converts).
  Debian's PortAudio 19.6 has no PulseAudio host API; the ALSA `pulse` plugin is how
  PortAudio reaches PulseAudio and pipewire-pulse alike.
- Windows: a WASAPI loopback device, listed by PortAudio builds newer than 19.7.0 (and by
  PyAudioWPatch) as "<output device name> [Loopback]"; the one of the default output.
- macOS: a loopback driver's input (BlackHole and the like) or the aggregate device of a
  Core Audio process tap, selected by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_MONITOR = "@DEFAULT_MONITOR@"  # PulseAudio's (and pipewire-pulse's) name for it
PULSE_ALSA_DEVICE = "pulse"
WASAPI_LOOPBACK_MARK = "[Loopback]"
MAC_LOOPBACK_DRIVERS = ("BlackHole", "Loopback Audio", "Soundflower")
# PulseAudio mixes down and resamples in the server, without the lookahead a client-side
# resampler needs: frames then line up with device blocks and leave at once.
PULSE_RATE = 16_000
PULSE_CHANNELS = 1


class DeviceNotFound(RuntimeError):
    """No device fits; the message says what to install or which --device to pass."""


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    hostapi: str
    max_input_channels: int
    max_output_channels: int
    default_samplerate: float


@dataclass(frozen=True)
class DeviceList:
    devices: Sequence[DeviceInfo]
    default_input: int | None = None  # PortAudio's default devices (indices)
    default_output: int | None = None
    # Windows: the default output of the WASAPI host API, whose loopback we want.
    wasapi_default_output: int | None = None

    def inputs(self) -> list[DeviceInfo]:
        return [d for d in self.devices if d.max_input_channels > 0]

    def outputs(self) -> list[DeviceInfo]:
        return [d for d in self.devices if d.max_output_channels > 0]

    def by_index(self, index: int | None) -> DeviceInfo | None:
        return next((d for d in self.devices if d.index == index), None)


@dataclass(frozen=True)
class CaptureDevice:
    """What to open: a PortAudio device (index), or, with index None, a PulseAudio source
    read by `parec`."""

    index: int | None
    label: str  # what is captured, for the status line and logs
    channels: int
    samplerate: int
    # Set PULSE_SOURCE to this while opening the ALSA `pulse` device (None: the default source).
    pulse_source: str | None = None
    via_pulse: bool = False


def choose_loopback(system: str, devices: DeviceList, requested: str | None) -> CaptureDevice:
    """The device that carries the output audio; `system` is platform.system()."""
    if system == "Linux":
        return _linux(devices, requested, default_source=DEFAULT_MONITOR)
    if system == "Windows":
        return _windows_loopback(devices, requested)
    if system == "Darwin":
        return _mac_loopback(devices, requested)
    if requested and (dev := match_device(devices.inputs(), requested)):
        return _native(dev)
    raise DeviceNotFound(f"no loopback capture for {system}; pass --device NAME")


def choose_microphone(system: str, devices: DeviceList, requested: str | None) -> CaptureDevice:
    """The user's own microphone: `requested` or the default input."""
    if system == "Linux":
        return _linux(devices, requested, default_source=None)
    if requested:
        dev = match_device(devices.inputs(), requested)
        if dev is None:
            raise DeviceNotFound(f"no input device matches {requested!r}; see --list-devices")
        return _native(dev)
    dev = devices.by_index(devices.default_input)
    if dev is None or dev.max_input_channels == 0:
        raise DeviceNotFound("there is no default microphone; pass --mic-device NAME")
    return _native(dev)


def choose_output(system: str, devices: DeviceList, requested: str | None) -> int | None:
    """Where to play the agent's voice: `requested`, else (Linux) the ALSA `pulse` device so
    that PULSE_SINK applies, else PortAudio's default (None)."""
    if requested:
        dev = match_device(devices.outputs(), requested)
        if dev is None:
            raise DeviceNotFound(f"no output device matches {requested!r}; see --list-devices")
        return dev.index
    if system == "Linux":
        pulse = _exact(devices.outputs(), PULSE_ALSA_DEVICE)
        if pulse is not None:
            return pulse.index
    return None


def match_device(candidates: Sequence[DeviceInfo], requested: str) -> DeviceInfo | None:
    """By index ("7"), exact name, then name substring; case-insensitive."""
    if requested.isdigit():
        return next((d for d in candidates if d.index == int(requested)), None)
    return _exact(candidates, requested) or next(
        (d for d in candidates if requested.lower() in d.name.lower()), None
    )


def _exact(candidates: Sequence[DeviceInfo], name: str) -> DeviceInfo | None:
    return next((d for d in candidates if d.name.lower() == name.lower()), None)


def _native(dev: DeviceInfo, channels: int | None = None) -> CaptureDevice:
    return CaptureDevice(
        index=dev.index,
        label=dev.name,
        channels=channels or min(dev.max_input_channels, 2),
        samplerate=int(dev.default_samplerate),
    )


def _linux(devices: DeviceList, requested: str | None, default_source: str | None) -> CaptureDevice:
    if requested and (dev := match_device(devices.inputs(), requested)):
        return _native(dev)  # a PortAudio device by name (an ALSA card, a PulseAudio host API)
    source = requested or default_source
    label = "default sink's monitor" if source == DEFAULT_MONITOR else source or "default source"
    pulse = _exact(devices.inputs(), PULSE_ALSA_DEVICE)
    # Without the ALSA plugin, index None: the caller reads the source with parec instead.
    return CaptureDevice(
        index=pulse.index if pulse else None,
        label=f"{label} (PulseAudio)",
        channels=PULSE_CHANNELS,
        samplerate=PULSE_RATE,
        pulse_source=source,
        via_pulse=True,
    )


_NO_WASAPI_LOOPBACK = (
    "this PortAudio lists no WASAPI loopback devices (sounddevice bundles PortAudio 19.7.0, "
    "which predates them). Install PyAudioWPatch (`pip install PyAudioWPatch`), which ships a "
    "PortAudio with loopback devices, or pass --device with a virtual cable's input."
)


def _windows_loopback(devices: DeviceList, requested: str | None) -> CaptureDevice:
    loopbacks = [
        d
        for d in devices.inputs()
        if "wasapi" in d.hostapi.lower() and WASAPI_LOOPBACK_MARK in d.name
    ]
    if requested:
        dev = match_device(loopbacks, requested) or match_device(devices.inputs(), requested)
        if dev is None:
            raise DeviceNotFound(f"no input device matches {requested!r}; see --list-devices")
        return _native(dev, channels=dev.max_input_channels)
    if not loopbacks:
        raise DeviceNotFound(_NO_WASAPI_LOOPBACK)
    speakers = devices.by_index(devices.wasapi_default_output)
    wanted = f"{speakers.name} {WASAPI_LOOPBACK_MARK}" if speakers else None
    dev = next((d for d in loopbacks if d.name == wanted), loopbacks[0])
    # Shared-mode WASAPI loopback delivers the mix format: all its channels, its rate.
    return _native(dev, channels=dev.max_input_channels)


def _mac_loopback(devices: DeviceList, requested: str | None) -> CaptureDevice:
    if requested:
        dev = match_device(devices.inputs(), requested)
        if dev is None:
            raise DeviceNotFound(f"no input device matches {requested!r}; see --list-devices")
        return _native(dev)
    for driver in MAC_LOOPBACK_DRIVERS:
        dev = match_device(devices.inputs(), driver)
        if dev is not None:
            return _native(dev)
    raise DeviceNotFound(
        "no loopback device found. Install BlackHole and send the meeting's output to it "
        "(a Multi-Output Device with your speakers and BlackHole), or create a Core Audio "
        "process tap's aggregate device (macOS 14.2+), then pass --device NAME. "
        "See docs/bridge.md."
    )


def query_devices() -> DeviceList:
    """PortAudio's devices through sounddevice (imported here: it loads PortAudio)."""
    import sounddevice as sd

    hostapis = sd.query_hostapis()
    devices = [
        DeviceInfo(
            index=int(d["index"]),
            name=str(d["name"]),
            hostapi=str(hostapis[d["hostapi"]]["name"]),
            max_input_channels=int(d["max_input_channels"]),
            max_output_channels=int(d["max_output_channels"]),
            default_samplerate=float(d["default_samplerate"]),
        )
        for d in sd.query_devices()
    ]
    wasapi = next((h for h in hostapis if "WASAPI" in h["name"]), None)

    def default(kind: str) -> int | None:
        try:
            return int(sd.query_devices(kind=kind)["index"])
        except sd.PortAudioError:  # no such device
            return None

    wasapi_out = wasapi["default_output_device"] if wasapi else -1
    return DeviceList(
        devices=devices,
        default_input=default("input"),
        default_output=default("output"),
        wasapi_default_output=wasapi_out if wasapi_out >= 0 else None,
    )


def describe(devices: DeviceList, system: str) -> str:
    """The device table of --list-devices, the automatic choice marked."""
    try:
        chosen = choose_loopback(system, devices, None).index
    except DeviceNotFound:
        chosen = None
    lines = [" idx  in/out  rate   host API      name"]
    for d in devices.devices:
        mark = "  <- loopback (default)" if d.index == chosen else ""
        lines.append(
            f"{d.index:4d}  {d.max_input_channels:2d}/{d.max_output_channels:<2d}  "
            f"{d.default_samplerate / 1000:4.1f}k  {d.hostapi[:12]:12s}  {d.name}{mark}"
        )
    return "\n".join(lines)
