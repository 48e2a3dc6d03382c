"""Fixtures shared by all tests. No model loading here: model fixtures live with the tests
that need them (or in tests/fixtures_models.py)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.livekit_server import LiveKitServer, LiveKitServerMissing, find_livekit_server


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def livekit_server() -> Iterator[LiveKitServer]:
    """One livekit-server node on free loopback ports for the whole session.

    A missing binary fails the test instead of skipping it: `make test` (and CI) install it.
    """
    try:
        find_livekit_server(build=True)
    except LiveKitServerMissing as e:
        pytest.fail(str(e), pytrace=False)
    with LiveKitServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway redis-server on a free loopback port (for multi-node LiveKit)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (`make sysdeps` installs it)", pytrace=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_redis(port, proc, timeout_s=10.0)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def _wait_for_redis(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"redis-server exited with code {proc.returncode}", pytrace=False)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    pytest.fail(f"redis-server did not answer on port {port} within {timeout_s:.0f} s")
