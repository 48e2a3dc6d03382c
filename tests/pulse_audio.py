"""PulseAudio and `voxroom bridge` for end-to-end tests on Linux: a private PulseAudio daemon
with a null sink standing in for the computer's speakers, `paplay` into it, and the bridge as
a process capturing its monitor."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.ops.livekit_server import LiveKitServer
from agent.ops.processes import stop_process
from room_bridge.cli import SUMMARY_PREFIX

SINK = "voxroom_test"


@contextmanager
def pulse_daemon(home: Path) -> Iterator[dict[str, str]]:
    """A private PulseAudio daemon (its files under `home`) whose only sink is the null sink
    `SINK`; yields the environment that points clients (parec, paplay, the ALSA `pulse`
    device) at it."""
    for tool in ("pulseaudio", "pactl", "paplay", "parec"):
        if shutil.which(tool) is None:
            pytest.fail(
                f"{tool} is not installed (Debian: pulseaudio, pulseaudio-utils)", pytrace=False
            )
    socket_path = home / "native"
    # Its own HOME and runtime dir: nothing touches the user's PulseAudio or its cookie.
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(home),
        "PULSE_RUNTIME_PATH": str(home / "runtime"),
        "PULSE_STATE_PATH": str(home / "state"),
        "PULSE_SERVER": f"unix:{socket_path}",
    }
    env.pop("PULSE_SINK", None)
    env.pop("PULSE_SOURCE", None)
    daemon = subprocess.Popen(
        # -n: no default modules (no hardware, no D-Bus); root needs no --system here.
        [
            "pulseaudio",
            "-n",
            "--daemonize=no",
            "--exit-idle-time=-1",
            "--use-pid-file=no",
            "--log-target=stderr",
            "-L",
            f"module-native-protocol-unix auth-anonymous=1 socket={socket_path}",
            "-L",
            f"module-null-sink sink_name={SINK} rate=48000 channels=2",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["pactl", "info"], env=env, capture_output=True).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                daemon.kill()
                pytest.fail(f"pulseaudio did not start:\n{daemon.communicate()[1][-2000:]}")
            time.sleep(0.1)
        yield env
    finally:
        stop_process(daemon, 10)


async def paplay(env: dict[str, str], wav: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        "paplay", f"--device={SINK}", "--latency-msec=20", str(wav), env=env
    )
    assert await proc.wait() == 0


@dataclass
class BridgeProcess:
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        pytest.fail(f"the bridge never logged {text!r}:\n" + "".join(self.lines[-40:]))

    def stop(self) -> dict:
        """SIGINT (Ctrl-C), then its summary line."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail("the bridge did not stop on SIGINT:\n" + "".join(self.lines[-40:]))
        time.sleep(0.1)  # the reader thread takes the last lines
        assert self.proc.returncode == 0, "".join(self.lines[-40:])
        summary = [line for line in self.lines if line.startswith(SUMMARY_PREFIX)]
        assert summary, "".join(self.lines[-40:])
        return json.loads(summary[-1][len(SUMMARY_PREFIX) :])


@contextmanager
def bridge_process(
    server: LiveKitServer, env: dict[str, str], *args: str
) -> Iterator[BridgeProcess]:
    full_env = {
        **env,
        "LIVEKIT_API_KEY": server.api_key,
        "LIVEKIT_API_SECRET": server.api_secret,
        "PYTHONUNBUFFERED": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "bridge", "--url", server.url, *args],
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    bridge = BridgeProcess(proc)

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            bridge.lines.append(line)

    threading.Thread(target=drain, daemon=True).start()
    try:
        yield bridge
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@asynccontextmanager
async def sink_bridge(
    server: LiveKitServer, env: dict[str, str], room: str, identity: str, *args: str
) -> AsyncIterator[BridgeProcess]:
    """`voxroom bridge ARGS` capturing the null sink's monitor into `room` as `identity`,
    once it has published its first frame of meeting audio."""
    with bridge_process(
        server, env, "--room", room, "--identity", identity, "--device", f"{SINK}.monitor", *args
    ) as bridge:
        await asyncio.to_thread(bridge.wait_for, "meeting-audio: first frame published", 30)
        yield bridge
