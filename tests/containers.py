"""The agent image (infra/Dockerfile, built by `make image`) run with podman, for the tests
marked `image`: podman with the settings of infra/podman/containers.conf (runc, cgroupfs, no
default ulimits), containers on the host network (they reach the livekit-server, Redis,
PostgreSQL and scripted LLM the tests start on loopback)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.ops.processes import OutputLog, log_output, stop_process

REPO = Path(__file__).resolve().parent.parent
PODMAN_DIR = REPO / "infra" / "podman"
IMAGE = os.environ.get("IMAGE", "localhost/voxroom-agent:latest")
REGISTERED = "worker registered"
# The writable places of the Deployment's pod (its emptyDir volumes).
POD_TMPFS = ("/tmp", "/home/voxroom/.cache")


def podman_env() -> dict[str, str]:
    return {
        **os.environ,
        "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(PODMAN_DIR / "containers.conf")),
    }


def podman(
    *args: str, timeout_s: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["podman", *args], env=podman_env(), capture_output=True, text=True, timeout=timeout_s
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
        )
    return done


def require_image(image: str = IMAGE) -> None:
    """Fails (never skips) the test when podman or the image is missing: `make image-test`
    builds it first."""
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed (`make image` installs it)", pytrace=False)
    if podman("image", "exists", image, check=False).returncode != 0:
        pytest.fail(f"no image {image}: run `make image` first", pytrace=False)


@dataclass
class Container:
    """A container run attached (`podman run`, its exit status is the container's), its
    output in `log`."""

    name: str
    proc: subprocess.Popen[str]
    log: Path
    started: float  # monotonic time `podman run` was called
    output: OutputLog  # registered: the line that says the worker registered with LiveKit

    def text(self) -> str:
        return self.log.read_text()

    def exec(self, *argv: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *argv, timeout_s=timeout_s, check=False)

    def signal(self, name: str) -> None:
        podman("kill", "--signal", name, self.name)


def run_args(
    name: str, env: dict[str, str], image: str = IMAGE, read_only: bool = True
) -> list[str]:
    """`podman run` as the Deployment runs the pod: read-only root filesystem, tmpfs for its
    emptyDir volumes, no capabilities, no privilege escalation."""
    args = [
        "run",
        "--rm",
        "--name",
        name,
        "--network",
        "host",
        "--cap-drop",
        "all",
        "--security-opt",
        "no-new-privileges",
        "--stop-timeout",
        "660",
    ]
    if read_only:
        args.append("--read-only")
    for path in POD_TMPFS:
        args += ["--tmpfs", f"{path}:rw,size=256m,mode=1777"]
    for key, value in sorted(env.items()):
        args += ["--env", f"{key}={value}"]
    return [*args, image]


@contextmanager
def container(
    log: Path,
    env: dict[str, str],
    agent_args: list[str],
    image: str = IMAGE,
    name: str | None = None,
    timeout_s: float = 240,
) -> Iterator[Container]:
    """The image's worker (its ENTRYPOINT, then `agent_args`) in a container; yields once it
    printed that it registered with LiveKit, and stops it afterwards (SIGTERM, then kill)."""
    name = name or f"voxroom-test-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    proc = subprocess.Popen(
        ["podman", *run_args(name, env, image), *agent_args],
        env=podman_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    box = Container(name, proc, log, started, log_output(proc, log, REGISTERED))
    try:
        deadline = time.monotonic() + timeout_s
        while not box.output.ready.wait(0.2):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"{name} did not register (exit {proc.poll()}); its log:\n"
                    f"{log.read_text()[-3000:]}"
                )
        yield box
    finally:
        if proc.poll() is None:
            podman("kill", "--signal", "TERM", name, check=False)
        stop_process(proc, 30)
        podman("rm", "--force", "--ignore", name, check=False)
