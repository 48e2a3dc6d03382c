"""The interview copilot from the web page: headless Chromium joins with "Interview copilot"
checked (its join creates the room, so the token's dispatch makes the page's user the
candidate of a real `voxroom agent` worker, answering through the scripted LLM test double),
uploads the resume through the file input and shows the agent's receipt, then the model's
reading of it up to "Ready". Speech is turned on from the page; the page shows the bridge
command that names its user; a bridge with that command's token publishes `meeting-audio` and
asks a question; the page shows the written answer and plays it aloud."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.config import Settings
from agent.copilot.context.index import chunk_document, document_text
from agent.ops.livekit_server import LiveKitServer
from agent.protocol import COPILOT_VOICE_TRACK, MEETING_TRACK
from agent.testing.scripted_llm import ScriptedLLM
from agent.transports.tokens import create_bridge_token
from bench.room_client import RoomUser
from bench.speech import espeak, with_silence
from tests.agent_process import scripted_llm_env, worker_beside_loop
from tests.browser_user import (
    AUDIBLE_RMS,
    REPO_ROOT,
    browser_page,
    save_screenshots,
    serve_page,
    silent_wav,
)
from tests.fake_openai_server import fake_openai_server

RESUME = REPO_ROOT / "bench" / "copilot_data" / "resume.md"
QUESTION = "Where did you go to university, and what did you study?"
REPLY = (
    "- I studied at the Technical University of Munich.\n"
    "- A Master of Science in computer science, finished in 2017."
)
READY = "Ready: answers come at full speed."

# Every text the readiness line shows, in order (render() rewrites it often: kept once each).
WAITING_FOR_MEETING = "Waiting for the meeting's audio: run "
BRIDGE_COMMAND = re.compile(
    r'Waiting for the meeting\'s audio: run "voxroom bridge --room '
    r'web-copilot --candidate (user-[0-9a-f]+)" on the computer the '
    r"meeting plays on\."
)
HEARING_MEETING = "It hears the meeting; its answers appear below."
_WATCH_READINESS = """
window.__readiness = [];
document.addEventListener('DOMContentLoaded', () => {
  const line = document.getElementById('readiness');
  new MutationObserver(() => {
    const text = line.textContent;
    if (text && window.__readiness.at(-1) !== text) window.__readiness.push(text);
  }).observe(line, {childList: true, characterData: true, subtree: true});
});
"""


@pytest.mark.integration
@pytest.mark.slow
async def test_the_page_sends_the_resume_and_shows_the_answer(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    pieces = len(chunk_document(document_text(RESUME.read_bytes())))
    settings = Settings(livekit=livekit_server.livekit_settings())
    llm = ScriptedLLM([REPLY], ttft_ms=80, words_per_s=25)
    async with (
        fake_openai_server(llm) as base_url,
        worker_beside_loop(livekit_server, tmp_path / "worker.log", **scripted_llm_env(base_url)),
        serve_page(settings) as origin,
        browser_page(silent_wav(tmp_path / "mic.wav")) as page,
    ):
        await page.add_init_script(_WATCH_READINESS)
        await page.goto(f"{origin}/?room=web-copilot")
        await page.wait_for_function("window.__voxroom && window.__voxroom.mode() === 'livekit'")
        assert await page.locator("#documents").is_hidden()
        await page.check("#copilot-mode")
        await page.set_input_files("#resume-file", str(RESUME))
        status = page.locator("#resume-status")
        assert await status.text_content() == "resume.md is sent to the copilot when it joins."

        await page.click("#join")  # creates the room: the token's dispatch applies
        await _wait_for_text(page, "#resume-status", f"resume.md: read, {pieces} pieces.", 180)
        await _wait_for_text(page, "#readiness", READY, 60)
        readiness: list[str] = await page.evaluate("window.__readiness")
        reading = f"Reading your documents into the model: 0 of {pieces} pieces."
        assert any(r.startswith(reading) for r in readiness), readiness
        assert readiness[-1] == READY, readiness

        await page.check("#speak")
        await page.locator('#speak-field[data-agent="true"]').wait_for(timeout=10_000)
        assert await page.is_checked("#speak")

        # The copilot listens to the meeting's audio, not to this page: no microphone here.
        assert await page.locator("#controls").is_hidden()
        await page.wait_for_function(
            "text => document.querySelector('#status-hint').textContent.startsWith(text)",
            arg=WAITING_FOR_MEETING,
            timeout=10_000,
        )
        hint = await page.locator("#status-hint").text_content() or ""
        command = BRIDGE_COMMAND.fullmatch(hint)
        assert command, hint
        # The bridge the page's user runs: `voxroom bridge --room R --candidate <them>`.
        interviewer = RoomUser(
            livekit_server.url,
            create_bridge_token(
                settings.livekit, "web-copilot", "meeting-bridge-web", command.group(1)
            ),
            track_name=MEETING_TRACK,
        )
        await interviewer.connect()
        try:
            await _wait_for_text(page, "#status-hint", HEARING_MEETING, 10)
            candidate = interviewer.room.remote_participants[command.group(1)]
            assert not candidate.track_publications  # the page published nothing
            await interviewer.speak(with_silence(espeak(QUESTION), 0.5, 2.0))
            answer = page.locator("#copilot .answer:not(.answer-pending)").first
            await answer.wait_for(timeout=60_000)
            # The spoken answer reaches the page's speaker (the copilot-voice track).
            await page.wait_for_function(
                f"window.__levels.some(([, level]) => level > {AUDIBLE_RMS})", timeout=30_000
            )
            # It receives the agent's voice and nothing else: not the meeting-audio it does not
            # play (the room is joined with autoSubscribe off).
            subscribed = await page.evaluate("window.__voxroom.subscribedAudio()")
            assert subscribed == [COPILOT_VOICE_TRACK]
            question = await answer.locator(".question").text_content() or ""
            text = await answer.locator(".text").text_content() or ""
            # The transcript panel shows what the copilot heard, as the interviewer's words.
            heard = page.locator("#transcript .line-interviewer").first
            await heard.wait_for(timeout=10_000)
            heard_who = await heard.locator(".who").text_content()
            heard_text = await heard.locator(".text").text_content() or ""
            shots = await save_screenshots(page, "copilot")
        finally:
            await interviewer.close()
    print(
        f"\nreadiness: {readiness}\nquestion: {question!r}\nscreenshots: {[str(p) for p in shots]}"
    )
    assert "university" in question.lower() and "study" in question.lower(), question
    assert text == REPLY.strip()
    assert heard_who == "Interviewer" and "university" in heard_text.lower(), heard_text


async def _wait_for_text(page, selector: str, text: str, timeout_s: float) -> None:
    """Until the element shows `text`; on timeout, says what it shows instead."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    try:
        await page.wait_for_function(
            "([selector, text]) => document.querySelector(selector).textContent === text",
            arg=[selector, text],
            timeout=timeout_s * 1000,
        )
    except PlaywrightTimeout:
        shown = await page.locator(selector).text_content()
        raise AssertionError(f"{selector} shows {shown!r}, not {text!r}") from None
