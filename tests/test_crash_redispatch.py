"""A worker killed with `kill -9` between turns, on one host without Redis: another worker
re-dispatches the room within 3 s, and the new agent continues the conversation from the
stored history.

livekit-server itself never re-dispatches such a room (agent/worker/redispatch.py says why); the
workers' room leases do. Two workers share one SQLite transcript store (leases and turns:
the single-host default); the one that got the room is killed (SIGKILL, no chance to leave
the room), the other must bring a new agent, and that agent's LLM request must carry the first
turn. Across hosts, and mid-reply: tests/test_cross_host.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from agent.ops.livekit_server import LiveKitServer
from agent.store.transcripts import TranscriptStore
from agent.testing.scripted_llm import ScriptedLLM
from agent.testing.scripted_llm_server import scripted_llm_server
from agent.transports.tokens import create_join_token
from bench.livekit_path import worker_process
from bench.room_client import RoomUser
from bench.speech import espeak, with_silence
from tests.agent_process import agent_env, scripted_llm_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIRST_REPLY = "Noted, your parcel number is four two seven."
SECOND_REPLY = "You told me it was four two seven."
NEW_AGENT_WITHIN_S = 3.0  # lease expiry (1.5 s) + one scan (0.25 s) + dispatch and join


async def _ask(user: RoomUser, text: str) -> float:
    """Say `text` and wait for the whole spoken answer; returns when the user stopped."""
    said = time.monotonic()
    await user.speak(with_silence(espeak(text), 0.3, 0.0))
    background = asyncio.create_task(user.silence(60))  # the mic stays open
    try:
        speaking = await user.wait_for_state("speaking", after=said, timeout_s=30)
        await user.wait_for_state("listening", after=speaking, timeout_s=60)
    finally:
        background.cancel()
        await asyncio.gather(background, return_exceptions=True)
    return said


async def _wait(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_killed_worker_room_gets_a_new_agent_with_the_history(
    livekit_server: LiveKitServer, tmp_path: Path, record_property
) -> None:
    requests: list[dict] = []
    llm = ScriptedLLM([FIRST_REPLY, SECOND_REPLY], ttft_ms=100)
    async with scripted_llm_server(llm, requests=requests) as base_url:
        env = agent_env(
            livekit_server, tmp_path / "shared-store.sqlite3", **scripted_llm_env(base_url)
        )
        argv = ["-m", "agent.cli", "agent", "--agent-name", "voxroom-crash"]
        with (
            worker_process(argv, env, tmp_path / "worker-a.log") as a,
            worker_process(argv, env, tmp_path / "worker-b.log") as b,
        ):
            settings = livekit_server.livekit_settings("voxroom-crash")
            user = RoomUser(livekit_server.url, create_join_token(settings, "crash", "user-1"))
            await user.connect()
            try:
                await user.wait_for_state("listening", after=0, timeout_s=120)
                first_agent = user.agent_identity
                assert first_agent is not None
                await _ask(user, "Please remember my parcel number, four two seven.")
                # The committed question, as the agent transcribed it for the user.
                await _wait(lambda: user.final_texts("user-1"), 10)
                [first_question] = user.final_texts("user-1")
                # The turn is committed as it ends: wait for it in the shared file.
                store = TranscriptStore(tmp_path / "shared-store.sqlite3")
                await _wait(lambda: len(store.turns("crash")) == 1, 10)
                store.close()
                job_id = first_agent.removeprefix("agent-")
                logs = {a: tmp_path / "worker-a.log", b: tmp_path / "worker-b.log"}
                [(victim, _)] = [(p, log) for p, log in logs.items() if job_id in log.read_text()]
                killed = time.monotonic()
                os.kill(victim.pid, signal.SIGKILL)
                await _wait(lambda: user.agent_identity not in (None, first_agent), 30)
                new_agent_s = time.monotonic() - killed
                record_property("new_agent_s", round(new_agent_s, 2))
                print(f"\nnew agent {user.agent_identity} {new_agent_s:.2f} s after kill -9")
                await user.wait_for_state("listening", after=killed, timeout_s=30)
                before = len(requests)
                await _ask(user, "What was my parcel number?")
                assert len(requests) > before, "the new agent never asked the LLM"
                messages = requests[-1]["messages"]
                assert {"role": "assistant", "content": FIRST_REPLY} in messages, messages
                users = [m["content"] for m in messages if m["role"] == "user"]
                assert users[0] == first_question and len(users) == 2, users
                survivor = b if victim is a else a
                assert survivor.poll() is None
                assert "re-dispatched room crash" in logs[survivor].read_text()
                assert new_agent_s <= NEW_AGENT_WITHIN_S
            finally:
                await user.close()
