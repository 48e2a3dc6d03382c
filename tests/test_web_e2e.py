"""The web page end to end through LiveKit: headless Chromium joins a room on a real
livekit-server, a real `voxroom agent` worker (answering through the scripted LLM test double)
is dispatched to it, the fake microphone asks a spoken question, and the page shows the user's
words, the agent's state cycle and its answer while the agent's voice arrives. A question typed
in the page's box is answered the same way, and a flood of them is refused in a sentence. And
the page's access-code flow and error sentences, off this machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.config import LiveKitSettings, Settings
from agent.ops.livekit_server import LiveKitServer
from agent.testing.scripted_llm import ScriptedLLM
from agent.transports.typed_input import TYPED_BURST
from agent.transports.web_server import WebSettings
from tests.agent_process import scripted_agent
from tests.browser_user import (
    assert_answered_aloud,
    browser_page,
    converse,
    question_wav,
    save_screenshots,
    serve_page,
    silent_wav,
)

QUESTION = "What is the capital of France?"
REPLY = "The capital of France is Paris."


@pytest.mark.integration
@pytest.mark.slow
async def test_browser_talks_to_the_agent_through_livekit(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    wav = question_wav(tmp_path / "question.wav", QUESTION)
    settings = Settings(livekit=livekit_server.livekit_settings())
    async with scripted_agent(livekit_server, tmp_path / "worker.log", ScriptedLLM([REPLY])):
        async with serve_page(settings) as origin, browser_page(wav) as page:
            talk = await converse(page, f"{origin}/?room=web-e2e")
            mode = await page.locator("#mode").text_content()
            copilot_offered = await page.locator("#copilot-field").is_visible()
            latency = page.locator("#latency")  # the turn's `voxroom.metrics` readout
            await latency.wait_for(timeout=5_000)
            readout = await latency.text_content() or ""
            shots = await save_screenshots(page, "livekit")
    print(f"\n{talk}\nlatency readout: {readout}\nscreenshots: {[str(p) for p in shots]}")
    assert mode == "Through LiveKit"
    assert copilot_offered
    assert_answered_aloud(talk, heard="capital", reply=REPLY)
    assert re.match(r"Last turn: \d+ ms to the agent's first word", readout), readout


@pytest.mark.integration
@pytest.mark.slow
async def test_a_question_typed_in_the_page_is_answered(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    settings = Settings(livekit=livekit_server.livekit_settings())
    async with (
        scripted_agent(livekit_server, tmp_path / "worker.log", ScriptedLLM([REPLY])),
        serve_page(settings) as origin,
        browser_page(silent_wav(tmp_path / "silence.wav")) as page,
    ):
        await page.goto(f"{origin}/?room=web-typed")
        await page.wait_for_function("window.__voxroom && window.__voxroom.mode() !== undefined")
        await page.click("#join")
        await page.locator("#chat-send:enabled").wait_for(timeout=150_000)  # the agent is in
        await page.fill("#chat-input", QUESTION)
        await page.press("#chat-input", "Enter")
        answer = page.locator(".line-agent:not(.line-partial):not(.line-notice) .text").first
        await answer.wait_for(timeout=30_000)
        assert await answer.text_content() == REPLY
        # Shown once: the typed line gave way to the agent's copy of the turn.
        assert await page.locator(".line-user .text").all_text_contents() == [QUESTION]
        assert await page.input_value("#chat-input") == ""
        flood = 3 * TYPED_BURST  # at most TYPED_BURST pass at once
        for i in range(flood):
            await page.fill("#chat-input", f"Message number {i}.")
            await page.click("#chat-send")
        notice = page.locator(".line-notice .text").first
        await notice.wait_for(timeout=15_000)
        assert "too many messages" in (await notice.text_content() or "")
        shots = await save_screenshots(page, "typed")
    print(f"\nscreenshots: {[str(p) for p in shots]}")


async def test_access_code_flow_and_plain_errors_off_this_machine(
    tmp_path: Path, dead_port: int
) -> None:
    code = "the-access-code-0123"
    nowhere = LiveKitSettings(url=f"ws://127.0.0.1:{dead_port}")  # no LiveKit server there
    wav = question_wav(tmp_path / "question.wav", QUESTION)
    # Forwarded by a proxy nobody trusts: the server treats the browser as another device.
    remote = {"X-Forwarded-For": "203.0.113.5"}
    async with serve_page(Settings(livekit=nowhere), WebSettings(shared_secret=code)) as origin:
        async with browser_page(wav, headers=remote) as page:
            await page.goto(origin)
            await page.locator("#code-field").wait_for()
            error = page.locator("#error-text")
            assert "needs an access code" in (await error.text_content() or "")
            await page.fill("#code", "a-wrong-code-000000")
            await page.click("#join")
            await page.wait_for_function(
                "document.getElementById('error-text').textContent.includes('refused')"
            )
            assert (await error.text_content() or "").startswith(
                "The voxroom server refused to let you join: This voxroom server needs an "
                "access code"
            )
            assert await page.locator("#status").get_attribute("data-state") == "idle"

            # A link with the code: the field is filled, the fragment leaves the address bar,
            # the token is issued, and the next problem is worded too.
            await page.goto(f"{origin}/#code={code}")
            await page.locator("#code-field").wait_for()
            assert await page.input_value("#code") == code
            assert "#" not in page.url
            await page.click("#join")
            await page.wait_for_function(
                "document.getElementById('error-text').textContent.includes('could not be "
                "reached')",
                timeout=30_000,
            )
            assert nowhere.url in (await error.text_content() or "")
            shots = await save_screenshots(page, "access-error")
    print(f"\nscreenshots: {[str(p) for p in shots]}")
