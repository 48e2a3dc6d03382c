"""A worker pool behind a multi-node LiveKit: two livekit-server nodes sharing a Redis server,
one `voxroom agent` worker registered with node A, users joining through either node. Every
room gets an agent, whichever node its users came through and whichever node hosts it, and a
room hosted on node B is answered like any other (scripted LLM test double)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from agent.ops.livekit_server import LiveKitServer
from agent.testing.scripted_llm import ScriptedLLM
from agent.testing.scripted_llm_server import scripted_llm_server
from agent.transports.tokens import create_join_token
from bench.livekit_path import worker_process
from bench.room_client import RoomUser
from bench.speech import espeak, with_silence
from tests.agent_process import agent_env, scripted_llm_env
from tests.marks import LIVEKIT_INTEGRATION
from tests.test_livekit_server import _media_remote_candidates

pytestmark = LIVEKIT_INTEGRATION

AGENT = "voxroom-multinode"
REPLY = "It is noon."
# Rooms land on a node the servers choose (livekit-server's default node selector). Six rooms
# once all landed on one node (a clean-clone run); by chance alone that is one run in 32. So
# more are made, one at a time, until a room lands on the other node.
ROOMS = 6
MORE_ROOMS = 10


async def _hosting_port(user: RoomUser) -> int:
    """The UDP port of the node whose SFU carries this user's media: the room's node."""
    for _ in range(100):
        ports = {c.port for c in await _media_remote_candidates(user.room)}
        if ports:
            [port] = ports
            return port
        await asyncio.sleep(0.1)
    raise AssertionError("no media transport connected")


async def test_one_worker_pool_serves_rooms_on_both_nodes(redis_url: str, tmp_path: Path) -> None:
    with (
        LiveKitServer(redis_url=redis_url, log_path=tmp_path / "a.log") as node_a,
        LiveKitServer(redis_url=redis_url, log_path=tmp_path / "b.log") as node_b,
    ):
        async with scripted_llm_server(ScriptedLLM([REPLY], ttft_ms=100)) as base_url:
            env = agent_env(node_a, tmp_path / "store.sqlite3", **scripted_llm_env(base_url))
            argv = [
                "-m",
                "agent.cli",
                "agent",
                "--agent-name",
                AGENT,
                "--max-sessions",
                str(2 * (ROOMS + MORE_ROOMS)),
                "--max-cpu",
                "0",
            ]
            with worker_process(argv, env, tmp_path / "worker.log"):
                nodes = [node_a, node_b]

                def user_for(i: int) -> RoomUser:
                    return RoomUser(
                        nodes[i % 2].url,
                        create_join_token(
                            nodes[i % 2].livekit_settings(AGENT), f"mn-{i}", f"user-{i}"
                        ),
                    )

                users = [user_for(i) for i in range(ROOMS)]
                try:
                    for user in users:
                        await user.connect()
                    for user in users:  # every room got an agent, through either node
                        await user.wait_for_state("listening", after=0, timeout_s=120)
                    hosts = {i: await _hosting_port(u) for i, u in enumerate(users)}
                    while len(set(hosts.values())) < 2 and len(users) < ROOMS + MORE_ROOMS:
                        users.append(user := user_for(len(users)))
                        await user.connect()
                        await user.wait_for_state("listening", after=0, timeout_s=120)
                        hosts[len(users) - 1] = await _hosting_port(user)
                    assert set(hosts.values()) == {node_a.udp_port, node_b.udp_port}, hosts

                    # A conversation in a room that node B hosts, its agent registered with A.
                    on_b = next(u for i, u in enumerate(users) if hosts[i] == node_b.udp_port)
                    said = time.monotonic()
                    await on_b.speak(with_silence(espeak("What time is it?"), 0.3, 0.0))
                    mic = asyncio.create_task(on_b.silence(30))
                    await on_b.wait_for_state("speaking", after=said, timeout_s=30)
                    await on_b.wait_for_state("listening", after=said, timeout_s=30)
                    mic.cancel()
                    await asyncio.gather(mic, return_exceptions=True)
                    assert on_b.agent_identity is not None
                    finals = await on_b.wait_for_finals(on_b.agent_identity, 1, timeout_s=10)
                    assert finals == [REPLY]
                finally:
                    for user in users:
                        await user.close()
