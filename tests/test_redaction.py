"""Secrets stay out of the logs (agent/log_redaction.py).

The end-to-end check runs, in a subprocess that installs the redaction as `voxroom` does, the
code paths that handle secrets: settings loaded from the environment, a join token and its
URL, the LLM client and the provider checks against a hostile test-double server that
echoes the credentials it receives in its error bodies (so they end up inside exception
messages), with every library's DEBUG logging on. Then it greps everything the process
wrote for the secrets.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from livekit import api, rtc

from agent.log_redaction import MASK, redact
from agent.ops.livekit_server import LiveKitServer
from agent.testing.ports import free_port
from agent.testing.scripted_llm import ScriptedLLM
from agent.transports.tokens import create_join_token
from bench.measure import require
from tests.agent_process import scripted_llm_env, worker_beside_loop
from tests.fake_openai_server import fake_openai_server

LIVEKIT_SECRET = "lk-secret-9f8e7d6c5b4a39281706f5e4"
OPENAI_KEY = "sk-proj-AbCdEf0123456789GhIjKlMnOpQr"
DEEPGRAM_KEY = "dg0123456789abcdef0123456789abcdef"
SECRETS = (LIVEKIT_SECRET, OPENAI_KEY, DEEPGRAM_KEY)
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyIiwidmlkZW8iOnt9fQ.c2lnbmF0dXJlLXNpZ25hdHVyZQ"


@pytest.mark.parametrize(
    ("text", "gone"),
    [
        (f"joining with {JWT}", JWT),
        (f"wss://lk.example.com/rtc?access_token={JWT}&auto_subscribe=1", JWT),
        ("Authorization: Bearer abcdef0123456789abcdef", "abcdef0123456789abcdef"),
        ("headers={'Authorization': 'Token dg0123456789abcdef0123'}", "dg0123456789abcdef0123"),
        (f"Incorrect API key provided: {OPENAI_KEY}", OPENAI_KEY),
        ("api_key='hunter2hunter2'", "hunter2hunter2"),
        ("LIVEKIT_API_SECRET=s3cr3tvalue", "s3cr3tvalue"),
        ('{"password": "correct horse battery"}', "correct"),
        ("refresh_token=0a1b2c3d4e5f", "0a1b2c3d4e5f"),
        # Digits alone are a credential too: a numeric password, PIN or token.
        ("password=12345678", "12345678"),
        ("token: 987654321", "987654321"),
        ('{"password": "20242025"}', "20242025"),
        ("login failed for pin secret=000123", "000123"),
        # A phone caller's number, all but its last two digits.
        ("talking with sip_+15105550123 in call-_+15105550123_xY", "+1510555012"),
        ("transfer to tel:+4921155501", "4921155501"),
        ("caller sip_15105550123 joined", "15105550123"),
    ],
)
def test_credential_shapes_are_masked(text: str, gone: str) -> None:
    clean = redact(text)
    assert gone not in clean and MASK in clean


@pytest.mark.parametrize(
    "text",
    [
        "the token expired after 600 s",
        "Bearer of good news",
        "session with alice ended after 3 turns",
        "secret santa",
        "llm_first_token=212.5 ms",
        "llm_first_token=1234.56 ms",
        "answer_done {'latency_ms': {'first_token': 1089.9, 'endpoint': 596.6}}",
        "answer_done {'latency_ms': {'first_token': 123456.0, 'endpoint': -12.5}}",
        "llm_first_token=1.5e-05",
        "livekit-server listening on 127.0.0.1:7880 (port=7880, rtc.port_range_start=50000)",
        "drained after 1234567 ms; 250000 frames sent, 12 lost",
        "answer prompt: 123456 tokens cached, 654321 read in 1200 ms",
        "a score of 1e+123456 and a gain of +12 dB",
    ],
)
def test_ordinary_log_lines_are_left_alone(text: str) -> None:
    assert redact(text) == text


SCRIPT = textwrap.dedent(
    """
    import asyncio, logging, sys

    from agent.log_redaction import install_log_redaction
    install_log_redaction()  # as agent.cli.main does, before anything logs
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("voxroom.test")

    from aiohttp import web
    from agent.config import load_settings
    from agent.adapters.llm.openai_chat import OpenAIChatLLM
    from agent.worker.provider_checks import check_deepgram, check_openai_llm
    from agent.transports.tokens import create_join_token

    async def echo(request):
        # A hostile server: every credential it gets comes back in the error body.
        return web.json_response({"error": {"message": "bad credentials: " + str(
            dict(request.headers)) + " " + str(request.query)}}, status=401)

    async def main():
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", echo)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", int(sys.argv[1]))
        await site.start()
        settings = load_settings()
        log.info("settings: %r", settings)
        token = create_join_token(settings.livekit, "room-1", "alice")
        log.info("join token %s", token)
        log.info("join url %s?access_token=%s", settings.livekit.url, token)
        llm = OpenAIChatLLM(model="m", base_url=settings.llm.base_url,
                            api_key=settings.llm.api_key)
        try:
            async for _ in llm.stream([{"role": "user", "content": "hi"}]):
                pass
        except Exception as e:
            log.warning("reply failed: %s", e)
            log.exception("reply failed")
        for check, section in ((check_openai_llm, settings.llm), (check_deepgram, settings.stt)):
            try:
                await check(section, timeout_s=3.0)
            except Exception as e:
                print("voxroom: configuration error:", e)  # what agent.cli prints
                log.error("provider check failed", exc_info=e)
        await llm.aclose()
        await runner.cleanup()

    asyncio.run(main())
    """
)


def test_no_secret_reaches_the_logs_or_the_printed_errors(tmp_path: Path) -> None:
    port = free_port()  # the script serves its hostile server there
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LIVEKIT_URL": "ws://127.0.0.1:7880",
        "LIVEKIT_API_KEY": "devkey",
        "LIVEKIT_API_SECRET": LIVEKIT_SECRET,
        "OPENAI_API_KEY": OPENAI_KEY,
        "VOXROOM_LLM_PROVIDER": "openai",
        "VOXROOM_LLM_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "VOXROOM_LLM_MODEL": "m",
        "DEEPGRAM_API_KEY": DEEPGRAM_KEY,
        "VOXROOM_STT_PROVIDER": "deepgram",
        "VOXROOM_STT_BASE_URL": f"ws://127.0.0.1:{port}/v1/listen",
    }
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(port)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    written = out.stdout + out.stderr
    assert out.returncode == 0, written[-3000:]
    # The paths ran and had secrets to hide: the server's echo was logged, masked.
    assert "reply failed" in written and "bad credentials" in written and MASK in written
    assert "provider check failed" in written and "Traceback" in written
    assert "join token [REDACTED]" in written and "eyJ" not in written  # no JWT at all
    for secret in SECRETS:
        assert secret not in written, f"{secret[:6]}… leaked: " + next(
            line for line in written.splitlines() if secret in line
        )


JOB_SECRET = "jobsecret-7e6d5c4b3a29"  # a registered secret (DEEPGRAM_API_KEY) of the worker
# Dispatch metadata that is not JSON: the job's entrypoint logs it (at most 80 characters) in a
# warning, so a job process logs these secrets through the worker's own code path.
LEAKY_METADATA = f"password=12345678 token: 987654321 key {JOB_SECRET}"


@pytest.mark.integration
@pytest.mark.slow
async def test_a_job_process_logs_secrets_masked(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    """`voxroom agent --executor process`: each job runs in a child process of livekit-agents,
    whose records reach the worker's log already formatted (agent.worker.process_engines.prewarm
    installs the redaction there); the worker's own factory never sees them."""
    log_path = tmp_path / "worker.log"
    room_name = "redaction-job"
    settings = livekit_server.livekit_settings()
    warned = "dispatch metadata: not a JSON object"
    async with (
        fake_openai_server(ScriptedLLM(["Hello."])) as base_url,
        worker_beside_loop(
            livekit_server,
            log_path,
            "--executor",
            "process",
            "--log-level",
            "DEBUG",
            DEEPGRAM_API_KEY=JOB_SECRET,
            **scripted_llm_env(base_url),
        ),
    ):
        user = rtc.Room()
        try:
            await user.connect(
                livekit_server.url,
                create_join_token(settings, room_name, "user-1", dispatch_agent=False),
            )
            async with api.LiveKitAPI(
                livekit_server.http_url, livekit_server.api_key, livekit_server.api_secret
            ) as lk:
                await lk.agent_dispatch.create_dispatch(
                    api.CreateAgentDispatchRequest(
                        agent_name=settings.agent_name, room=room_name, metadata=LEAKY_METADATA
                    )
                )
            # The job process loads its own models first (prewarm), then joins and warns.
            await require(
                lambda: warned in log_path.read_text(),
                240,
                "the job never logged its metadata warning",
            )
        finally:
            await user.disconnect()
    written = log_path.read_text()
    [line] = [line for line in written.splitlines() if warned in line]
    assert line.count(MASK) == 3, line
    for secret in ("12345678", "987654321", JOB_SECRET):
        assert secret not in written, line
