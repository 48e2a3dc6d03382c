"""The agent image as a user runs it (`make image-test`; marked `image`, not part of `make test`):
infra/Dockerfile built by `make image`, run by podman as the Deployment of infra/k8s runs its
pod: read-only root filesystem, tmpfs for its emptyDir volumes, the Deployment's arguments and
exactly the environment its ConfigMap and Secret give. The worker registers with a real
livekit-server on the host network, passes the image's own HEALTHCHECK, answers a spoken
question through LiveKit (the scripted LLM test double over HTTP; Whisper, Piper and the
end-of-turn model from inside the image), `voxroom doctor` inside it is green, and SIGTERM lets
a reply being spoken finish (the turn stored) before the container exits 0.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from pathlib import Path

import pytest

from agent.ops.livekit_server import LiveKitServer
from agent.store.transcripts_postgres import PostgresTurnStore
from agent.testing.scripted_llm import ScriptedLLM
from agent.testing.scripted_llm_server import scripted_llm_server
from agent.transports.tokens import create_join_token
from bench.room_client import RoomUser
from bench.speech import espeak, with_silence
from tests.agent_process import scripted_llm_env
from tests.containers import IMAGE, Container, container, podman, require_image
from tests.marks import DEV_SECRET
from tests.test_infra import agent_container, image_health_port, k8s_docs
from tests.test_pod_start import pod_environment

# Only `image`: `-m integration` or `-m slow` runs must not pick these up without the image.
pytestmark = [pytest.mark.image, DEV_SECRET]

AGENT = "voxroom-image"
REPLY = "The capital of France is Paris."
# Streamed slowly: SIGTERM arrives while it is being spoken.
LONG_REPLY = (
    "The sky is blue because the air scatters blue light more than red light, "
    "so blue reaches your eyes from every part of the sky."
)


@pytest.fixture(scope="module", autouse=True)
def _image() -> None:
    require_image()


def deployment_args() -> list[str]:
    """The Deployment's `args` after the image's ENTRYPOINT (its health port, 8081, stays:
    the image's HEALTHCHECK probes it). On the host network it must be free here."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", image_health_port()))
        except OSError as e:
            pytest.fail(
                f"port {image_health_port()} is taken on this host ({e}): the image's "
                "health check listens there on the host network",
                pytrace=False,
            )
    return list(agent_container(k8s_docs()["Deployment"])["args"])


def pod_env(server: LiveKitServer, llm_url: str, store_url: str, redis_url: str) -> dict[str, str]:
    env = pod_environment(
        {
            "LIVEKIT_URL": server.url,
            "LIVEKIT_API_KEY": server.api_key,
            "LIVEKIT_API_SECRET": server.api_secret,
            "VOXROOM_LIVEKIT_AGENT_NAME": AGENT,
            "VOXROOM_LLM_PROVIDER": "openai",  # the scripted test double, not the bundled LLM
            "VOXROOM_STT_PROVIDER": "whisper",
            "VOXROOM_TTS_PROVIDER": "piper",
            "VOXROOM_STORE_URL": store_url,
            "VOXROOM_REDIS_URL": redis_url,
        }
    )
    # What a ConfigMap adds for an OpenAI-compatible server (here the test double).
    return {**env, **scripted_llm_env(llm_url)}


def _stored_turns(store_url: str, room: str) -> list[dict]:
    store = PostgresTurnStore(store_url)
    try:
        return store.turns(room)
    finally:
        store.close()


async def _wait_for_turns(store_url: str, room: str, n: int, timeout_s: float) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while len(turns := await asyncio.to_thread(_stored_turns, store_url, room)) < n:
        assert time.monotonic() < deadline, f"{room}: {n} turns never reached PostgreSQL"
        await asyncio.sleep(0.1)
    return turns


async def ask(server: LiveKitServer, room: str, question: str) -> tuple[RoomUser, float]:
    """Join `room`, wait for the agent, say `question`; returns the user (mic kept open by
    the caller's silence) and when the question was said."""
    user = RoomUser(server.url, create_join_token(server.livekit_settings(AGENT), room, "user"))
    await user.connect()
    await user.wait_for_state("listening", after=0, timeout_s=60)
    said = time.monotonic()
    await user.speak(with_silence(espeak(question), 0.3, 0.0))
    return user, said


def report(box: Container) -> str:
    assert box.output.ready_at is not None
    size = int(podman("image", "inspect", IMAGE, "--format", "{{.Size}}").stdout)
    return (
        f"image {IMAGE}: {size / 1e9:.2f} GB; container start -> registered "
        f"{box.output.ready_at - box.started:.1f} s"
    )


async def test_the_image_registers_passes_its_health_check_answers_and_doctor_is_green(
    livekit_server: LiveKitServer,
    fresh_redis_url: str,
    postgres_url: str,
    tmp_path: Path,
    record_property,
) -> None:
    async with scripted_llm_server(ScriptedLLM([REPLY])) as llm_url:
        env = pod_env(livekit_server, llm_url, postgres_url, fresh_redis_url)
        with container(tmp_path / "worker.log", env, deployment_args()) as box:
            print(f"\n{report(box)}")
            record_property("start_to_registered_s", round(box.output.ready_at - box.started, 1))
            # The image's HEALTHCHECK command, run by podman inside the container.
            health = podman("healthcheck", "run", box.name, check=False)
            assert health.returncode == 0, health.stdout + health.stderr

            user, said = await ask(livekit_server, "image-answer", "What is the capital of France?")
            mic = asyncio.create_task(user.silence(60))
            try:
                speaking = await user.wait_for_state("speaking", after=said, timeout_s=30)
                await user.wait_for_state("listening", after=speaking, timeout_s=60)
                assert user.agent_identity is not None
                assert await user.wait_for_finals(user.agent_identity, 1, timeout_s=10) == [REPLY]
                print(f"answered {speaking - said:.2f} s after the question began")
            finally:
                mic.cancel()
                await user.close()
            [turn] = await _wait_for_turns(postgres_url, "image-answer", 1, timeout_s=10)
            assert turn["agent_text"] == REPLY and "capital" in turn["user_text"].lower()

            # Every configured engine checked inside the running container, on its settings.
            doctor = await asyncio.to_thread(box.exec, "voxroom", "doctor", "--json")
            rows = json.loads(doctor.stdout)["checks"]
            print("doctor: " + ", ".join(f"{r['name']} {r['status']}" for r in rows))
            assert doctor.returncode == 0, doctor.stdout + doctor.stderr
            assert {r["status"] for r in rows} <= {"ok", "skip"}
            assert any(r["name"].startswith("livekit") and r["status"] == "ok" for r in rows)
            # Nothing downloaded or written but in the pod's tmpfs, and there only a little.
            written = box.exec("du", "-sk", "/tmp", "/home/voxroom/.cache").stdout
            kib = {
                path: int(size)
                for size, path in (line.split("\t") for line in written.splitlines())
            }
            print(f"written at run time (KiB): {kib}")
            assert kib["/home/voxroom/.cache"] < 10_000, kib
        assert "Traceback" not in box.text() and "Read-only file system" not in box.text()


async def test_sigterm_lets_the_reply_being_spoken_finish_and_the_container_exits_0(
    livekit_server: LiveKitServer,
    fresh_redis_url: str,
    postgres_url: str,
    tmp_path: Path,
) -> None:
    llm = ScriptedLLM([LONG_REPLY], ttft_ms=100, words_per_s=6)
    async with scripted_llm_server(llm) as llm_url:
        env = pod_env(livekit_server, llm_url, postgres_url, fresh_redis_url)
        with container(tmp_path / "worker.log", env, deployment_args()) as box:
            user, said = await ask(livekit_server, "image-drain", "Why is the sky blue?")
            mic = asyncio.create_task(user.silence(120))
            try:
                speaking = await user.wait_for_state("speaking", after=said, timeout_s=30)
                box.signal("TERM")
                term = time.monotonic()
                await user.wait_for_state("listening", after=speaking, timeout_s=60)
                assert user.agent_identity is not None
                assert await user.wait_for_finals(user.agent_identity, 1, timeout_s=10) == [
                    LONG_REPLY
                ]
                [turn] = await _wait_for_turns(postgres_url, "image-drain", 1, timeout_s=10)
                assert turn["interrupted"] is False and turn["heard_text"] == LONG_REPLY
                assert box.proc.poll() is None  # the conversation is still on
                print(f"\nreply finished {time.monotonic() - term:.1f} s after SIGTERM")
            finally:
                mic.cancel()
                await user.close()
            exit_code = await asyncio.to_thread(box.proc.wait, 60)
            assert exit_code == 0, box.text()[-3000:]
        assert "draining worker" in box.text() and "voxroom: drained" in box.text()


def test_the_layers_hold_the_models_and_no_compiler_or_cache() -> None:
    """The image's files (without a network: what is there is all a container gets)."""
    script = r"""
        set -e
        for tool in gcc cc g++ c++ make clang ld; do
            if command -v "$tool" >/dev/null; then echo "compiler: $tool"; fi
        done
        for dir in /root/.cache /home/voxroom/.cache /var/cache/apt/archives /src; do
            [ -e "$dir" ] && find "$dir" -type f ! -name lock | head -3 | sed 's/^/cache: /'
        done
        find /var/lib/apt/lists -type f ! -name lock | head -3 | sed 's/^/cache: /'
        find /opt/voxroom/venv -name '*.whl' | head -3 | sed 's/^/cache: /'
        ls /opt/voxroom/cache/models | sed 's/^/model: /'
        id -u
    """
    require_image()
    out = podman(
        "run", "--rm", "--network", "none", "--read-only", "--entrypoint", "sh", IMAGE, "-c", script
    ).stdout.splitlines()
    assert not [line for line in out if line.startswith(("compiler:", "cache:"))], out
    models = [line.removeprefix("model: ") for line in out if line.startswith("model: ")]
    assert any(m.endswith(".gguf") for m in models), models
    assert out[-1] == "10001"
    # The speech, end-of-turn and embedding models load with no network at all.
    doctor = podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--read-only",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/home/voxroom/.cache",
        "--entrypoint",
        "voxroom",
        IMAGE,
        "doctor",
        "--json",
        "--only",
        "piper,whisper,turn,embedder",
        timeout_s=300,
        check=False,
    )
    rows = {r["name"]: r["status"] for r in json.loads(doctor.stdout)["checks"]}
    print(f"\noffline doctor: {rows}")
    assert doctor.returncode == 0 and set(rows.values()) == {"ok"}, doctor.stdout
    history = podman("history", "--format", "{{.Size}}\t{{.CreatedBy}}", IMAGE).stdout
    print("layers:\n" + "\n".join(re.sub(r"\s+", " ", line)[:110] for line in history.splitlines()))
