"""A person in front of the voxroom page, for end-to-end tests: headless Debian Chromium driven
by Playwright (its own browser builds are never downloaded), with a fake microphone that plays
a WAV file. Chromium loops that file, so the question is padded with silence long enough for
the agent to answer before it is asked again.

The page is watched from inside: an init script records every change of the status panel's
`data-state` and, every 50 ms, the agent's audio level from the page's debug hook
(`window.__voxroom.remoteLevel()`, a WebAudio analyser on the remote track).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from agent.config import Settings
from agent.transports.web_server import WebSettings
from bench.speech import espeak
from tests.local_http import serve_app

CHROMIUM = "/usr/bin/chromium"
REPO_ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO_ROOT / "test-artifacts"
WAV_RATE = 48_000
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# The agent is audible when the remote track's RMS (full scale 1.0) is above this; the
# silence between replies is digital zero, Opus noise stays far below.
AUDIBLE_RMS = 0.01

_WATCH_PAGE = """
window.__states = [];
window.__levels = [];
const record = () => {
  const status = document.getElementById('status');
  if (!status) return false;
  const push = () => window.__states.push([performance.now(), status.dataset.state]);
  push();
  new MutationObserver(push).observe(status, {attributeFilter: ['data-state']});
  return true;
};
if (!record()) document.addEventListener('DOMContentLoaded', record);
setInterval(() => {
  const level = window.__voxroom ? window.__voxroom.remoteLevel() : 0;
  if (level > 0.001) window.__levels.push([performance.now(), level]);
}, 50);
"""


def question_wav(path: Path, text: str, *, lead_s: float = 3.0, silence_s: float = 8.0) -> Path:
    """`text` spoken by espeak-ng as a 48 kHz mono WAV, with silence before and after. The
    microphone starts playing it as soon as the page has it, so the lead silence gives the
    agent time to join and listen before the question starts."""
    import soundfile as sf
    import soxr

    speech = soxr.resample(espeak(text).astype(np.float32) / 32768, 16_000, WAV_RATE)
    pcm = np.concatenate(
        [
            np.zeros(int(lead_s * WAV_RATE), np.float32),
            speech,
            np.zeros(int(silence_s * WAV_RATE), np.float32),
        ]
    )
    sf.write(str(path), pcm, WAV_RATE, subtype="PCM_16")
    return path


def silent_wav(path: Path, seconds: float = 2.0) -> Path:
    """A microphone that says nothing (Chromium loops it)."""
    import soundfile as sf

    sf.write(str(path), np.zeros(int(seconds * WAV_RATE), np.float32), WAV_RATE, subtype="PCM_16")
    return path


@asynccontextmanager
async def serve_page(
    settings: Settings, web_settings: WebSettings | None = None
) -> AsyncIterator[str]:
    """The voxroom web app (the built page and /api/token) on a free loopback port."""
    from agent.apps.demo import WEB_DIR, ensure_web_build
    from agent.transports.web_server import create_web_app

    static_dir = ensure_web_build(WEB_DIR)
    if static_dir is None:
        pytest.fail("the web page could not be built (`make web`)", pytrace=False)
    app = create_web_app(settings, static_dir=static_dir, web_settings=web_settings)
    async with serve_app(app) as origin:
        yield origin


@asynccontextmanager
async def browser_page(
    microphone_wav: Path, *, headers: dict[str, str] | None = None
) -> AsyncIterator:
    """A Playwright page in headless Chromium whose microphone plays `microphone_wav`;
    `headers` go with every request it makes."""
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is needed (`make sysdeps` installs it)", pytrace=False)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={microphone_wav}",
            ],
        )
        try:
            context = await browser.new_context(viewport=DESKTOP, extra_http_headers=headers)
            await context.add_init_script(_WATCH_PAGE)
            page = await context.new_page()
            yield page
        finally:
            await browser.close()


@dataclass
class Conversation:
    """What the page showed of one question and its answer."""

    user_text: str
    agent_text: str
    states: list[str]
    peak_level_speaking: float
    # For a failure's message: the status and the agent's level over time, ms after Join, and
    # where the agent's voice got to in the page (window.__voxroom.audioCheck()).
    timeline: list[tuple[int, str]]
    audio: dict


async def converse(page, url: str, *, timeout_s: float = 150) -> Conversation:
    """Open `url`, press Join, and wait until the page shows a final answer from the agent and
    the agent is listening again; the fake microphone asks the question by itself."""
    await page.goto(url)
    await page.wait_for_function("window.__voxroom && window.__voxroom.mode() !== undefined")
    await page.click("#join")
    agent_line = page.locator(".line-agent:not(.line-partial) .text").first
    await agent_line.wait_for(timeout=timeout_s * 1000)
    # The answer was spoken; it is over when the state is back at listening.
    await page.wait_for_function(
        "window.__states.length && window.__states.at(-1)[1] === 'listening'", timeout=30_000
    )
    user_line = page.locator(".line-user:not(.line-partial) .text").first
    states: list[list] = await page.evaluate("window.__states")
    levels: list[list] = await page.evaluate("window.__levels")
    return Conversation(
        user_text=await user_line.text_content(timeout=5_000) or "",
        agent_text=await agent_line.text_content() or "",
        states=[s for _, s in states],
        peak_level_speaking=_peak_while(states, levels, "speaking"),
        timeline=_timeline(states, levels),
        audio=await page.evaluate("window.__voxroom.audioCheck()"),
    )


def _timeline(states: list[list], levels: list[list]) -> list[tuple[int, str]]:
    """The status changes, and when the agent was first and last audible."""
    audible = [t for t, lv in levels if lv > AUDIBLE_RMS]
    marks = [(t, f"state {s}") for t, s in states]
    if audible:
        marks += [(audible[0], "first audible"), (audible[-1], "last audible")]
    start = states[0][0] if states else 0.0
    return [(round(t - start), what) for t, what in sorted(marks)]


def _peak_while(states: list[list], levels: list[list], state: str) -> float:
    """The highest level sampled while the status showed `state`."""
    spans = [
        (t, states[i + 1][0] if i + 1 < len(states) else float("inf"))
        for i, (t, s) in enumerate(states)
        if s == state
    ]
    return max((lv for t, lv in levels if any(a <= t < b for a, b in spans)), default=0.0)


def is_subsequence(needle: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(any(h == n for h in it) for n in needle)


def assert_answered_aloud(talk: Conversation, heard: str, reply: str) -> None:
    """The page showed the question (a transcript with `heard` in it) and `reply`, the agent's
    states went listening, thinking, speaking, listening, and its voice was audible."""
    assert heard in talk.user_text.lower(), talk.user_text
    assert talk.agent_text == reply
    assert is_subsequence(["listening", "thinking", "speaking", "listening"], talk.states), (
        talk.states
    )
    assert talk.peak_level_speaking > AUDIBLE_RMS, talk


async def save_screenshots(page, name: str) -> list[Path]:
    """The page as it is now, at a desktop and a phone size, into test-artifacts/."""
    ARTIFACTS.mkdir(exist_ok=True)
    paths = []
    for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        await page.set_viewport_size(viewport)
        await asyncio.sleep(0.2)  # let the layout settle
        path = ARTIFACTS / f"{name}-{label}.png"
        await page.screenshot(path=str(path), full_page=True)
        paths.append(path)
    await page.set_viewport_size(DESKTOP)
    return paths
