"""infra/docker-compose.yml brought up with podman-compose for the tests marked `image`: its
services from the local images of infra/podman/ (`make image`, `make image-services`), on a
compose network of its own whose gateway address is the only host address LiveKit's ports
are published on (NODE_IP: the host's test client and the workers' containers both reach
it), and one more service, the scripted LLM test double (tests/scripted_llm_service.py, run
from the agent image with tests/ mounted) that the workers use as their OpenAI-compatible
LLM."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from agent.config import LiveKitSettings
from agent.transports.tokens import create_join_token
from bench.room_client import RoomUser
from tests.containers import IMAGE, REPO, podman, podman_env, require_image

COMPOSE_FILE = REPO / "infra" / "docker-compose.yml"
AGENT_NAME = "voxroom-stack"
SERVICE_IMAGES = {
    "REDIS_IMAGE": os.environ.get("REDIS_IMAGE", "localhost/voxroom-redis:7"),
    "POSTGRES_IMAGE": os.environ.get("POSTGRES_IMAGE", "localhost/voxroom-postgres:15"),
    "LIVEKIT_IMAGE": os.environ.get("LIVEKIT_IMAGE", "localhost/livekit-server:v1.13.5"),
}


def _llm_service(script: dict) -> dict:
    return {
        "services": {
            "llm": {
                "image": IMAGE,
                "entrypoint": ["tini", "--", "python", "-m", "tests.scripted_llm_service"],
                "command": ["--port", "8000", json.dumps(script)],
                "environment": {"PYTHONPATH": "/opt/voxroom-tests"},
                "volumes": [f"{REPO / 'tests'}:/opt/voxroom-tests/tests:ro"],
            }
        }
    }


@dataclass
class Stack:
    project: str
    override: Path
    env: dict[str, str]
    gateway: str

    @property
    def url(self) -> str:
        return f"ws://{self.gateway}:7880"

    def compose(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [
                "podman-compose",
                "-p",
                self.project,
                "-f",
                str(COMPOSE_FILE),
                "-f",
                str(self.override),
                *args,
            ],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        assert done.returncode == 0, (
            f"podman-compose {args}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
        return done

    def container(self, service: str, number: int = 1) -> str:
        return f"{self.project}_{service}_{number}"

    def user(self, room: str, identity: str) -> RoomUser:
        settings = LiveKitSettings(
            url=self.url,
            api_key=self.env["LIVEKIT_API_KEY"],
            api_secret=self.env["LIVEKIT_API_SECRET"],
            agent_name=AGENT_NAME,
        )
        return RoomUser(self.url, create_join_token(settings, room, identity))

    def transcripts(self, room: str, worker: str) -> list[dict]:
        """`voxroom transcripts --room ROOM --json` in a worker (PostgreSQL is not published)."""
        out = podman("exec", worker, "voxroom", "transcripts", "--room", room, "--json").stdout
        return [json.loads(line) for line in out.splitlines()]

    def agent_environment(self, worker: str) -> dict[str, str]:
        """The variables compose gave `worker` (the agent service's `environment`)."""
        names = set(yaml.safe_load(COMPOSE_FILE.read_text())["services"]["agent"]["environment"])
        env = json.loads(podman("inspect", worker, "--format", "{{json .Config.Env}}").stdout)
        return {k: v for k, v in (item.split("=", 1) for item in env) if k in names}


def logs(container: str) -> str:
    done = podman("logs", container, check=False)
    return done.stdout + done.stderr


async def wait_healthy(container: str, timeout_s: float) -> float:
    """Waits until the image's HEALTHCHECK passes in `container` (the worker is connected to
    LiveKit); returns when."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = await asyncio.to_thread(podman, "healthcheck", "run", container, check=False)
        if done.returncode == 0:
            return time.monotonic()
        assert time.monotonic() < deadline, f"{container} never healthy:\n{logs(container)[-3000:]}"
        await asyncio.sleep(0.5)


def _postgres_ready(stack: Stack, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while (
        podman(
            "exec",
            stack.container("postgres"),
            "pg_isready",
            "-U",
            "voxroom",
            "-d",
            "voxroom",
            check=False,
        ).returncode
        != 0
    ):
        assert time.monotonic() < deadline, logs(stack.container("postgres"))[-2000:]
        time.sleep(0.2)


@contextmanager
def compose_stack(tmp_path: Path, script: dict) -> Iterator[Stack]:
    """The stack up (Redis, PostgreSQL, LiveKit, the LLM double, then the two workers once
    PostgreSQL answers: podman-compose does not wait for health checks); torn down after."""
    for image in (IMAGE, *SERVICE_IMAGES.values()):
        require_image(image)
    project = f"vxstack{uuid.uuid4().hex[:6]}"
    network = f"{project}_default"  # podman-compose uses it when it exists
    podman("network", "create", network)
    try:
        gateway = podman(
            "network", "inspect", network, "--format", "{{range .Subnets}}{{.Gateway}}{{end}}"
        ).stdout.strip()
        override = tmp_path / "compose.llm.yml"
        override.write_text(yaml.safe_dump(_llm_service(script)))
        env = {
            **podman_env(),
            **SERVICE_IMAGES,
            "AGENT_IMAGE": IMAGE,
            "LIVEKIT_API_KEY": "stack-key",
            "LIVEKIT_API_SECRET": secrets.token_hex(24),
            "POSTGRES_PASSWORD": secrets.token_hex(12),
            "NODE_IP": gateway,
            "LIVEKIT_BIND_IP": gateway,
            "VOXROOM_LIVEKIT_AGENT_NAME": AGENT_NAME,
            "VOXROOM_LLM_PROVIDER": "openai",
            "VOXROOM_LLM_BASE_URL": "http://llm:8000/v1",
            "VOXROOM_LLM_MODEL": "scripted-test-double",
        }
        stack = Stack(project, override, env, gateway)
        try:
            stack.compose("up", "-d", "--no-build", "redis", "postgres", "livekit", "llm")
            _postgres_ready(stack, 60)
            stack.compose("up", "-d", "--no-build", "agent")
            yield stack
        finally:
            for line in podman("ps", "-a", "--format", "{{.Names}}").stdout.split():
                if line.startswith(project):
                    podman("rm", "--force", "--time", "0", line, check=False)
            podman("volume", "rm", "--force", f"{project}_postgres-data", check=False)
    finally:
        podman("network", "rm", "--force", network, check=False)
