"""A client whose connection to LiveKit's signalling websocket is cut mid-turn (a TCP proxy,
tests/fault_proxy.py, between the client and a real livekit-server on loopback): the agent
worker (a real `voxroom agent` subprocess with the scripted LLM test double) ends that session
cleanly and keeps serving: a second room gets its answer, and the first room's turn is not
lost from the transcript store.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from agent.ops.livekit_server import LiveKitServer
from agent.testing.scripted_llm import ScriptedLLM
from agent.transports.tokens import create_join_token
from bench.room_client import RoomUser
from tests.agent_process import scripted_agent
from tests.fault_proxy import FaultProxy
from tests.test_third_participant import say

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPLY = (
    "The capital of France is Paris, a city on the river Seine, famous for its museums, "
    "its cafes and its long boulevards."
)
QUESTION = "What is the capital of France?"


async def ask(user: RoomUser) -> float:
    """Say QUESTION; returns when its end left the microphone."""
    await user.wait_for_state("listening", after=0, timeout_s=180)
    return await say(user, QUESTION)


async def test_cutting_a_clients_signalling_mid_turn_leaves_the_worker_serving(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    settings = livekit_server.livekit_settings()
    store = tmp_path / "transcripts.sqlite3"
    llm = ScriptedLLM([REPLY], words_per_s=8)
    async with scripted_agent(livekit_server, tmp_path / "worker.log", llm):
        signalling = urlparse(livekit_server.url)
        async with FaultProxy("127.0.0.1", signalling.port or 0) as proxy:
            cut_user = RoomUser(proxy.url("ws"), create_join_token(settings, "cut-1", "u1"))
            await cut_user.connect()
            said = await ask(cut_user)
            mic = asyncio.create_task(cut_user.silence(30))
            speaking = await cut_user.wait_for_state("speaking", after=said, timeout_s=30)
            # Mid-answer: the signalling connection resets, and stays unreachable.
            proxy.refuse = True
            assert proxy.cut_all() >= 1
            cut_at = time.monotonic()
            await asyncio.sleep(2.0)
            mic.cancel()
            await asyncio.gather(mic, return_exceptions=True)
            await cut_user.close()

        second = RoomUser(livekit_server.url, create_join_token(settings, "after-cut", "u2"))
        await second.connect()
        try:
            said2 = await ask(second)
            mic2 = asyncio.create_task(second.silence(30))
            answered = await second.wait_for_state("speaking", after=said2, timeout_s=60)
            done = await second.wait_for_state("listening", after=answered, timeout_s=60)
            mic2.cancel()
            await asyncio.gather(mic2, return_exceptions=True)
            await asyncio.sleep(0.5)
            assert second.agent_identity is not None
            assert second.final_texts(second.agent_identity) == [REPLY]
        finally:
            await second.close()
        # The first session ended and its turn was stored before it went.
        ended = await _wait_for_text(tmp_path / "worker.log", "session with u1 ended", 60)
        assert ended, (tmp_path / "worker.log").read_text()[-3000:]
        print(
            f"\nspeaking {speaking - said:.2f} s after the question's end; cut "
            f"{cut_at - speaking:.2f} s into the answer; second room speaking "
            f"{answered - said2:.2f} s after its end, answer {done - answered:.1f} s; "
            f"the cut session ended {time.monotonic() - cut_at:.1f} s after the cut"
        )
    rooms = _stored_rooms(store)
    assert "cut-1" in rooms and "after-cut" in rooms, rooms


async def _wait_for_text(path: Path, text: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in await asyncio.to_thread(path.read_text, errors="replace"):
            return True
        await asyncio.sleep(0.5)
    return False


def _stored_rooms(store: Path) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "agent.cli", "transcripts", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"VOXROOM_STORE_PATH": str(store), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    return {json.loads(line)["room"] for line in out.stdout.splitlines() if line.strip()}
