"""Run a command the way a Kubernetes pod of infra/k8s runs the worker: its home read-only
(readOnlyRootFilesystem) with only `~/.cache` writable on top (the pod's emptyDir), in a
private mount namespace of an unprivileged user namespace, so nothing outside this process
sees the mounts.

    python -m tests.pod_home HOME CACHE -- PROGRAM ARGS...

HOME must hold an empty `.cache` directory to mount CACHE on. The process execs into the
program, so its pid is the program's (a test's `kill -9` reaches the worker itself).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.livekit_path import worker_process

# $1 home, $2 cache, then the program. Exits 77 when the mounts cannot be made here.
_SCRIPT = (
    'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" '
    '&& mount --bind "$2" "$1/.cache" || exit 77; shift 2; exec "$@"'
)


def sandbox_available() -> bool:
    """Whether this machine lets an unprivileged process make a private mount namespace."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "--map-root-user", "true"], capture_output=True)
    return probe.returncode == 0


def host_env(host: Path) -> dict[str, str]:
    """The home, cache and store folders of one "host" under `host` (created), as the
    environment of a process there."""
    home = host / "home"
    (home / ".cache").mkdir(parents=True, exist_ok=True)
    (host / "cache").mkdir(exist_ok=True)
    (host / "store").mkdir(exist_ok=True)
    return {
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "VOXROOM_CACHE_DIR": str(home / ".cache" / "voxroom"),
        "VOXROOM_STORE_PATH": str(host / "store" / "transcripts.sqlite3"),
        "PYTHONUNBUFFERED": "1",
    }


@contextmanager
def pod_worker(
    host: Path, agent_args: list[str], env: dict[str, str], ready: str = "worker registered"
) -> Iterator[subprocess.Popen[str]]:
    """`voxroom agent AGENT_ARGS` as on a pod of its own under `host`: its home read-only
    but for ~/.cache (the host's cache folder mounted there); its output in host/worker.log.
    Yields once it printed `ready`."""
    base = host_env(host)
    argv = [
        "-m",
        "tests.pod_home",
        base["HOME"],
        str(host / "cache"),
        "--",
        sys.executable,
        "-m",
        "agent.cli",
        "agent",
        *agent_args,
    ]
    with worker_process(argv, {**base, **env}, host / "worker.log", ready=ready) as proc:
        yield proc


def main(argv: list[str]) -> None:
    home, cache, sep, *program = argv
    if sep != "--" or not program:
        raise SystemExit(__doc__)
    os.execvp(
        "unshare",
        ["unshare", "--mount", "--map-root-user", "sh", "-c", _SCRIPT, "sh", home, cache, *program],
    )


if __name__ == "__main__":
    main(sys.argv[1:])
