"""Fixtures shared by all tests: the servers they talk to (livekit-server, Redis, PostgreSQL,
each started once per session on loopback, in temporary folders) and the bundled Whisper that
end-to-end tests use as the listener's ear (loaded only when a test asks for it). Other model
fixtures live with the tests that need them."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.ops.livekit_server import LiveKitServer, LiveKitServerMissing, find_livekit_server
from agent.testing.ports import free_port, refused_port

# Whisper's decodes depend on the CPU's kernels: CTranslate2 and oneDNN take AVX-512 where the
# CPU has it, CTranslate2 takes MKL on Intel's, and a clip on the edge is heard differently
# ("who painted my Belisa" with AVX2, "my mother Lisa" with MKL). The tests, and the workers
# they start, use the kernels of every x86-64 machine they run on, so each hears the same.
for _name, _value in (
    ("CT2_USE_MKL", "0"),
    ("CT2_FORCE_CPU_ISA", "AVX2"),
    ("ONEDNN_MAX_CPU_ISA", "AVX2"),
):
    os.environ.setdefault(_name, _value)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def whisper_stt() -> Any:
    """The bundled Whisper as the agent's STT engine, loaded once: the ear of the end-to-end
    tests, which transcribe what the user heard of the agent."""
    from agent.adapters.stt.whisper import WhisperSTT

    stt = WhisperSTT()
    stt.load()
    return stt


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
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until_serving("redis-server", proc, lambda: _redis_answers(port), timeout_s=10.0)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def _wait_until_serving(
    name: str, proc: subprocess.Popen[bytes], answers: Callable[[], bool], timeout_s: float
) -> None:
    """Returns once `answers()`; fails the test when the server `name` exits or stays silent
    for `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{name} exited with code {proc.returncode}", pytrace=False)
        if answers():
            return
        time.sleep(0.05)
    pytest.fail(f"{name} did not answer within {timeout_s:.0f} s")


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _postgres_binary(name: str) -> str:
    """A PostgreSQL server program: Debian keeps them out of PATH, under its version."""
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        pytest.fail("PostgreSQL is not installed (`make sysdeps` installs it)", pytrace=False)
    return found


def _unprivileged(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as an unprivileged user of its own
    user namespace (its files stay root's outside)."""
    if os.geteuid() != 0:
        return argv
    return ["unshare", "--user", "--map-user=65534", "--map-group=65534", *argv]


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway PostgreSQL server on a free loopback port; yields the URL of its
    `postgres` database (user voxroom, trust auth: nothing but loopback reaches it)."""
    workdir = tmp_path_factory.mktemp("postgres")
    data = workdir / "data"
    subprocess.run(
        _unprivileged(
            [
                _postgres_binary("initdb"),
                "-D",
                str(data),
                "-U",
                "voxroom",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        ),
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = free_port()
    log = (workdir / "postgres.log").open("wb")
    proc = subprocess.Popen(
        _unprivileged(
            [
                _postgres_binary("postgres"),
                "-D",
                str(data),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-k",
                str(workdir),
            ]
        ),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"postgresql://voxroom@127.0.0.1:{port}/postgres"
    try:
        _wait_until_serving("postgres", proc, lambda: _postgres_answers(url), timeout_s=30.0)
        yield url
    finally:
        proc.send_signal(signal.SIGINT)  # fast shutdown: SIGTERM would wait for the clients
        proc.wait(30)
        log.close()


def _postgres_answers(url: str) -> bool:
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=1).close()
    except psycopg.OperationalError:
        return False
    return True


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh, empty database of the session's PostgreSQL server, for one test."""
    import psycopg

    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return postgres_server.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A loopback port that refuses connections for the test's length (agent/testing/ports.py)."""
    with refused_port() as port:
        yield port


@pytest.fixture
def fresh_redis_url(redis_url: str) -> str:
    """The session's Redis server, its database 1 (livekit-server uses 0) emptied for one
    test."""
    import redis

    url = redis_url.rsplit("/", 1)[0] + "/1"
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url
