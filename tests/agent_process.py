"""`voxroom agent` as a subprocess for end-to-end tests, and the environment that points it at
the scripted LLM test double (tests/fake_openai_server.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent.livekit_server import LiveKitServer


def scripted_llm_env(base_url: str) -> dict[str, str]:
    """Settings that send the agent's LLM calls to the fake OpenAI-compatible server."""
    return {"VOXROOM_LLM_PROVIDER": "openai", "VOXROOM_LLM_BASE_URL": base_url,
            "VOXROOM_LLM_MODEL": "scripted-test-double"}


@contextmanager
def agent_worker(server: LiveKitServer, log_path: Path, **env: str) -> Iterator[None]:
    """`voxroom agent` as a subprocess registered with `server`."""
    full_env = {**os.environ, "LIVEKIT_URL": server.url, "LIVEKIT_API_KEY": server.api_key,
                "LIVEKIT_API_SECRET": server.api_secret, "PYTHONUNBUFFERED": "1", **env}
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "agent"], env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    registered = threading.Event()

    def drain() -> None:
        with open(log_path, "w") as log:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if "worker registered" in line:
                    registered.set()

    threading.Thread(target=drain, daemon=True).start()
    try:
        if not registered.wait(180):
            proc.kill()
            pytest.fail(f"the worker did not register:\n{log_path.read_text()[-3000:]}")
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
