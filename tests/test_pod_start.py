"""The Kubernetes pod of infra/k8s starts: `voxroom agent` with a read-only home (only
~/.cache writable, as the pod's emptyDir; tests/pod_home.py), configured with exactly the
variables the Deployment passes from its ConfigMap and Secret, registers with a real
livekit-server and answers the pod's health probe. Without the store URLs the same home
stops it at once with a one-line reason instead of a traceback."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from agent.ops.livekit_server import LiveKitServer
from agent.testing.ports import free_port
from agent.testing.scripted_llm import ScriptedLLM
from agent.testing.scripted_llm_server import scripted_llm_server
from tests.agent_process import scripted_llm_env
from tests.pod_home import host_env, pod_worker, sandbox_available
from tests.test_infra import agent_container, k8s_docs

pytestmark = pytest.mark.skipif(
    not sandbox_available(), reason="needs unshare with user and mount namespaces"
)


def pod_environment(values: dict[str, str]) -> dict[str, str]:
    """The variables the Deployment gives its container (ConfigMap data and Secret keys),
    with this test's value for each one it has; the optional secrets stay unset."""
    docs = k8s_docs()
    container = agent_container(docs["Deployment"])
    names = set(docs["ConfigMap"]["data"])
    names |= {
        v["name"] for v in container["env"] if not v["valueFrom"]["secretKeyRef"].get("optional")
    }
    assert {"LIVEKIT_URL", "VOXROOM_STORE_URL", "VOXROOM_REDIS_URL"} <= names
    missing = names - values.keys()
    assert not missing, f"the test has no value for {missing}"
    return {name: values[name] for name in names}


def _probe(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status


@pytest.mark.integration
@pytest.mark.slow
async def test_the_pod_registers_with_a_read_only_home(
    livekit_server: LiveKitServer, fresh_redis_url: str, postgres_url: str, tmp_path: Path
) -> None:
    async with scripted_llm_server(ScriptedLLM(["Hello."])) as base_url:
        env = pod_environment(
            {
                "LIVEKIT_URL": livekit_server.url,
                "LIVEKIT_API_KEY": livekit_server.api_key,
                "LIVEKIT_API_SECRET": livekit_server.api_secret,
                "VOXROOM_LIVEKIT_AGENT_NAME": "voxroom-pod",
                "VOXROOM_LLM_PROVIDER": "openai",  # the scripted test double, not the bundled LLM
                "VOXROOM_STT_PROVIDER": "whisper",
                "VOXROOM_TTS_PROVIDER": "piper",
                "VOXROOM_STORE_URL": postgres_url,
                "VOXROOM_REDIS_URL": fresh_redis_url,
            }
        )
        env.update(scripted_llm_env(base_url))
        port = free_port()
        worker = pod_worker(tmp_path / "pod", ["--health-port", str(port)], env)
        proc = await asyncio.to_thread(worker.__enter__)
        try:
            # The startup and readiness probes: GET / on the health port answers 200.
            status = await asyncio.to_thread(_probe, f"http://127.0.0.1:{port}/")
            assert status == 200
            assert proc.poll() is None
        finally:
            await asyncio.to_thread(worker.__exit__, None, None, None)
    home = tmp_path / "pod" / "home"
    assert sorted(p.name for p in home.iterdir()) == [".cache"]  # nothing written in the home
    log = (tmp_path / "pod" / "worker.log").read_text()
    assert "Read-only file system" not in log and "Traceback" not in log


def _in_pod_without_store_urls(tmp_path: Path, *voxroom: str) -> subprocess.CompletedProcess:
    base = host_env(tmp_path / "pod")
    del base["VOXROOM_STORE_PATH"]  # the default: under the read-only home
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.pod_home",
            base["HOME"],
            str(tmp_path / "pod" / "cache"),
            "--",
            sys.executable,
            "-m",
            "agent.cli",
            *voxroom,
        ],
        env={
            **base,
            "PATH": "/usr/bin:/bin",
            "LIVEKIT_URL": "ws://127.0.0.1:9",
            **scripted_llm_env("http://127.0.0.1:9/v1"),
        },
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )


def test_without_the_store_urls_a_read_only_home_is_a_clear_error(tmp_path: Path) -> None:
    done = _in_pod_without_store_urls(tmp_path, "agent")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "cannot open the turn store" in done.stderr
    assert "VOXROOM_STORE_URL" in done.stderr and "Traceback" not in done.stderr


def test_doctor_says_the_read_only_home_cannot_hold_the_store(tmp_path: Path) -> None:
    done = _in_pod_without_store_urls(tmp_path, "doctor", "--only", "store", "--json")
    assert done.returncode == 1, done.stderr[-2000:]
    rows = {r["name"]: r for r in json.loads(done.stdout)["checks"]}
    assert rows["turn store (sqlite)"]["status"] == "FAIL"
    assert "is not writable" in rows["turn store (sqlite)"]["detail"]
