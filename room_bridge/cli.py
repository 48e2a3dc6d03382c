"""`voxroom bridge`: publish this computer's output audio (the meeting) into a LiveKit room.

    voxroom bridge --room interview --candidate me        # the default sink's monitor
    voxroom bridge --room interview --candidate me --agent-mode copilot --play-agent --mic
    voxroom bridge --url wss://... --token JWT --device "BlackHole 2ch"
    voxroom bridge --list-devices

See docs/bridge.md for each operating system's setup.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from agent.protocol import BRIDGE_IDENTITY_PREFIX

SUMMARY_PREFIX = "voxroom bridge summary: "


def add_arguments(parser: argparse.ArgumentParser) -> None:
    room = parser.add_argument_group("room")
    room.add_argument("--url", help="LiveKit server URL (default: livekit.url / LIVEKIT_URL)")
    room.add_argument("--token", help="join token; without it one is made from the API key")
    room.add_argument("--room", help="room to join (with the API key and secret of the settings)")
    room.add_argument(
        "--identity",
        default=f"{BRIDGE_IDENTITY_PREFIX}{socket.gethostname()}",
        help="participant identity (default: meeting-bridge-<hostname>)",
    )
    room.add_argument("--name", default="Meeting audio", help="display name")
    room.add_argument(
        "--candidate",
        metavar="IDENTITY",
        help="with --room: the candidate's identity in the room (the copilot listens only to "
        "the bridge its token names; the web page shows it)",
    )
    room.add_argument(
        "--agent-mode",
        choices=["copilot"],
        help="ask the agent to act as an interview copilot (participant metadata voxroom.mode)",
    )
    audio = parser.add_argument_group("audio")
    audio.add_argument(
        "--device",
        metavar="NAME",
        help="what to capture: a device name or index, or (Linux) a PulseAudio source such as "
        "alsa_output.pci-0000_00_1f.3.analog-stereo.monitor (default: the output's loopback)",
    )
    audio.add_argument(
        "--backend",
        choices=["auto", "sounddevice", "parec", "pyaudiowpatch"],
        default="auto",
        help="capture back-end (default: sounddevice, with parec / PyAudioWPatch as fallbacks)",
    )
    audio.add_argument("--list-devices", action="store_true", help="list audio devices and exit")
    audio.add_argument("--mic", action="store_true", help="also publish your microphone (user-mic)")
    audio.add_argument(
        "--mic-device", metavar="NAME", help="microphone (default: the default input)"
    )
    audio.add_argument(
        "--play-agent",
        action="store_true",
        help="play the agent's voice here, and keep it out of the published audio",
    )
    audio.add_argument("--play-device", metavar="NAME", help="output for --play-agent")
    audio.add_argument(
        "--echo-tail-ms",
        type=float,
        default=150.0,
        metavar="MS",
        help="keep the capture muted this long after the agent's voice ends (default: 150)",
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.list_devices:
        return _list_devices()
    if not args.token and not args.room:
        print(
            "voxroom bridge: give --room (a token is made from the API key) or --token",
            file=sys.stderr,
        )
        return 2
    if args.token and (args.agent_mode or args.candidate):
        print(
            "voxroom bridge: --agent-mode and --candidate need --room: with --token, the "
            "token's maker sets them (voxroom token --bridge-for)",
            file=sys.stderr,
        )
        return 2
    if not args.token and not args.candidate:
        print(
            "voxroom bridge: give --candidate, the identity of the candidate in the room: "
            "their copilot listens only to a bridge that names them",
            file=sys.stderr,
        )
        return 2
    from agent.config import load_settings

    settings = load_settings(args.config)
    url = args.url or settings.livekit.url
    if args.token:
        token = args.token

        def token_source() -> str:
            return token
    else:
        from agent.transports.tokens import create_bridge_token

        def token_source() -> str:
            # A fresh token for every join: a rejoin may come long after the first one.
            return create_bridge_token(
                settings.livekit,
                args.room,
                args.identity,
                args.candidate,
                name=args.name,
                copilot_mode=args.agent_mode == "copilot",
            )

    return asyncio.run(_bridge(args, url, token_source))


async def _bridge(args: argparse.Namespace, url: str, token_source: Callable[[], str]) -> int:
    from room_bridge.bridge import BridgeError, RoomBridge
    from room_bridge.capture import CaptureError, open_loopback, open_microphone
    from room_bridge.devices import DeviceNotFound, choose_output, query_devices
    from room_bridge.echo_gate import EchoGate

    system = platform.system()
    opened: list[Any] = []
    try:
        meeting = await open_loopback(system, args.device, args.backend)
        opened.append(meeting)
        mic = None
        if args.mic:
            mic = await open_microphone(system, args.mic_device, args.backend)
            opened.append(mic)
        gate = player = None
        if args.play_agent:
            from room_bridge.agent_player import AgentPlayer

            gate = EchoGate(tail_ms=args.echo_tail_ms)
            output = choose_output(system, await asyncio.to_thread(query_devices), args.play_device)
            player = AgentPlayer(gate, output)
            await player.start()
            opened.append(player)
    except (CaptureError, DeviceNotFound) as e:
        print(f"voxroom bridge: {e}", file=sys.stderr)
        await _close(opened)
        return 1

    bridge = RoomBridge(url, token_source, meeting, mic=mic, gate=gate, player=player)
    task = asyncio.create_task(bridge.run())
    _stop_on_signals(task)
    status = asyncio.create_task(_status_line(bridge, args.room or url))
    code = 0
    try:
        await task
    except asyncio.CancelledError:
        pass  # Ctrl-C or SIGTERM
    except ExceptionGroup as group:  # from the bridge's task group
        errors, others = group.split((BridgeError, CaptureError))
        if others is not None or errors is None:
            raise
        for error in errors.exceptions:
            print(f"voxroom bridge: {error}", file=sys.stderr)
        code = 1
    finally:
        status.cancel()
        await asyncio.gather(status, return_exceptions=True)
        await _close(opened)
        print(SUMMARY_PREFIX + json.dumps(bridge.summary()), file=sys.stderr, flush=True)
    return code


def _stop_on_signals(task: asyncio.Task[Any]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, task.cancel)
        except (NotImplementedError, RuntimeError):  # Windows: Ctrl-C raises KeyboardInterrupt
            pass


async def _status_line(bridge: Any, room: str) -> None:
    if not sys.stdout.isatty():
        return
    import shutil

    from room_bridge.status_line import ClearStatusBeforeLogging, format_status, redraw

    handlers = logging.getLogger().handlers
    clear = ClearStatusBeforeLogging()
    for handler in handlers:
        handler.addFilter(clear)
    try:
        while True:
            width = shutil.get_terminal_size().columns - 1
            sys.stdout.write(redraw(format_status(bridge.status(), room, width)))
            sys.stdout.flush()
            await asyncio.sleep(0.2)
    finally:
        for handler in handlers:
            handler.removeFilter(clear)
        sys.stdout.write("\n")


async def _close(opened: list[Any]) -> None:
    for item in reversed(opened):
        await item.aclose()


def _list_devices() -> int:
    from room_bridge.devices import describe, query_devices

    system = platform.system()
    try:
        devices = query_devices()
        print(describe(devices, system) if devices.devices else "PortAudio lists no devices")
    except OSError as e:
        print(f"sounddevice cannot load PortAudio: {e}", file=sys.stderr)
    if system == "Linux":
        import shutil
        import subprocess

        if shutil.which("pactl"):
            print("\nPulseAudio/PipeWire sources (--device NAME; monitors carry the output):")
            result = subprocess.run(
                ["pactl", "list", "short", "sources"], capture_output=True, text=True
            )
            for line in result.stdout.splitlines():
                print("  " + line.split("\t")[1] if "\t" in line else line)
            if result.returncode != 0:
                print(f"  (pactl: {result.stderr.strip()})")
    return 0
