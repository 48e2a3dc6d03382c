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

from agent.log_redaction import MASK, redact

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
    from agent.llm_openai import OpenAIChatLLM
    from agent.provider_checks import check_deepgram, check_openai_llm
    from agent.tokens import create_join_token

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
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
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
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(port)], cwd=root, env=env,
                         capture_output=True, text=True, timeout=120)
    written = out.stdout + out.stderr
    assert out.returncode == 0, written[-3000:]
    # The paths ran and had secrets to hide: the server's echo was logged, masked.
    assert "reply failed" in written and "bad credentials" in written and MASK in written
    assert "provider check failed" in written and "Traceback" in written
    assert "join token [REDACTED]" in written and "eyJ" not in written  # no JWT at all
    for secret in SECRETS:
        assert secret not in written, f"{secret[:6]}… leaked: " + next(
            line for line in written.splitlines() if secret in line)
