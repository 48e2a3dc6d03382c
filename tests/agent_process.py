"""`voxroom agent` as a subprocess for end-to-end tests, and the environment that points it at
the scripted LLM test double (tests/fake_openai_server.py), or both at once (scripted_agent)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path

import pytest

from agent.ops.livekit_server import LiveKitServer
from agent.testing.scripted_llm import ScriptedLLM
from bench.livekit_path import worker_process
from tests.fake_openai_server import fake_openai_server


def scripted_llm_env(base_url: str) -> dict[str, str]:
    """Settings that send the agent's LLM calls to the fake OpenAI-compatible server."""
    return {
        "VOXROOM_LLM_PROVIDER": "openai",
        "VOXROOM_LLM_BASE_URL": base_url,
        "VOXROOM_LLM_MODEL": "scripted-test-double",
    }


def agent_env(server: LiveKitServer, store_path: Path, **env: str) -> dict[str, str]:
    """The environment of a `voxroom agent` worker registering with `server`, its turns (and
    room leases) in the SQLite store at `store_path`."""
    return {
        "LIVEKIT_URL": server.url,
        "LIVEKIT_API_KEY": server.api_key,
        "LIVEKIT_API_SECRET": server.api_secret,
        "PYTHONUNBUFFERED": "1",
        "VOXROOM_STORE_PATH": str(store_path),
        **env,
    }


@contextmanager
def agent_worker(server: LiveKitServer, log_path: Path, *args: str, **env: str) -> Iterator[None]:
    """`voxroom agent ARGS` as a subprocess registered with `server`."""
    # Each test's worker keeps its turns apart, so no room reloads another run's history.
    env = agent_env(server, log_path.parent / "transcripts.sqlite3", **env)
    with ExitStack() as stack:
        try:
            stack.enter_context(
                worker_process(["-m", "agent.cli", "agent", *args], env, log_path, timeout_s=180)
            )
        except RuntimeError as e:  # it never registered
            pytest.fail(str(e))
        yield


@asynccontextmanager
async def worker_beside_loop(
    server: LiveKitServer, log_path: Path, *args: str, **env: str
) -> AsyncIterator[None]:
    """`agent_worker` entered in a thread: it blocks until the worker registers, and the worker
    checks its LLM (a fake server on this loop) before registering."""
    worker = agent_worker(server, log_path, *args, **env)
    await asyncio.to_thread(worker.__enter__)
    try:
        yield
    finally:
        await asyncio.to_thread(worker.__exit__, None, None, None)


@asynccontextmanager
async def scripted_agent(
    server: LiveKitServer, log_path: Path, llm: ScriptedLLM, *args: str, **env: str
) -> AsyncIterator[None]:
    """`agent_worker` answering through `llm`, served on this loop as an OpenAI-compatible
    server."""
    async with fake_openai_server(llm) as base_url:
        with agent_worker(server, log_path, *args, **scripted_llm_env(base_url), **env):
            yield
