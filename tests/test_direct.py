"""Direct mode (agent/transports/direct.py, `voxroom demo --direct`): the sink and tracks between
the turn engine and aiortc, the data channel that stands in for a LiveKit room, the offer
endpoint, and a whole conversation from headless Chromium with no LiveKit server."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.engines import FRAME_SAMPLES
from agent.events import AudioStart, StateChanged, Transcript, TtsChunk, Turn, TurnRetracted
from agent.protocol import TOPIC_METRICS
from agent.testing.ports import free_port
from agent.testing.scripted_llm import ScriptedLLM
from agent.transports import room_io
from agent.transports.direct import (
    DataChannelParticipant,
    DataChannelRoom,
    DirectAgent,
    DirectAudioSink,
    InboundAudio,
    agent_voice_track,
    create_direct_web_app,
)
from agent.transports.room_io import RoomPublisher
from agent.transports.web_server import WebSettings
from bench.livekit_path import worker_process
from state_machine.states import AgentState
from tests.agent_process import scripted_llm_env
from tests.browser_user import (
    assert_answered_aloud,
    browser_page,
    converse,
    question_wav,
    save_screenshots,
)
from tests.fake_openai_server import fake_openai_server

REPO_ROOT = Path(__file__).resolve().parent.parent
QUESTION = "What is the capital of France?"
REPLY = "The capital of France is Paris."


# ---- the agent's voice -----------------------------------------------------------------------


async def test_sink_plays_what_was_written_then_silence() -> None:
    sink = DirectAudioSink(48_000, max_queue_ms=60)
    await sink.write(np.full(960, 7, np.int16))
    await sink.write(np.full(480, 9, np.int16))
    assert sink.queued_samples() == 1440
    out = sink.read(1200)
    assert out[:960].tolist() == [7] * 960 and out[960:].tolist() == [9] * 240
    out = sink.read(960)
    assert out[:240].tolist() == [9] * 240 and not out[240:].any()
    assert sink.queued_samples() == 0


async def test_sink_write_waits_while_full_and_clear_frees_it() -> None:
    sink = DirectAudioSink(48_000, max_queue_ms=60)  # 2880 samples
    for _ in range(3):
        await sink.write(np.ones(960, np.int16))
    blocked = asyncio.create_task(sink.write(np.full(960, 2, np.int16)))
    await asyncio.sleep(0.02)
    assert not blocked.done()
    sink.read(960)  # the track took a frame: room for one more
    await asyncio.wait_for(blocked, 1)
    assert sink.queued_samples() == 2880
    another = asyncio.create_task(sink.write(np.full(960, 3, np.int16)))
    await asyncio.sleep(0.02)
    assert sink.clear() == 2880  # barge-in: everything queued is dropped at once
    await asyncio.wait_for(another, 1)
    assert sink.read(960).tolist() == [3] * 960


async def test_sink_takes_a_frame_longer_than_its_queue_when_empty() -> None:
    sink = DirectAudioSink(48_000, max_queue_ms=20)
    await asyncio.wait_for(sink.write(np.ones(4800, np.int16)), 1)
    assert sink.queued_samples() == 4800


async def test_voice_track_sends_20ms_frames_paced_in_real_time() -> None:
    now = [100.0]
    sleeps: list[float] = []

    async def fake_sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    sink = DirectAudioSink(48_000)
    await sink.write(np.full(960, 1000, np.int16))
    track = agent_voice_track(sink, clock=lambda: now[0], sleep=fake_sleep)
    frames = [await track.recv() for _ in range(3)]
    assert [f.samples for f in frames] == [960] * 3
    assert {f.sample_rate for f in frames} == {48_000}
    assert [f.pts for f in frames] == [0, 960, 1920]
    assert sleeps == pytest.approx([0.02, 0.02])
    assert frames[0].to_ndarray().max() == 1000
    assert not frames[1].to_ndarray().any()  # nothing queued: silence
    track.stop()
    from aiortc.mediastreams import MediaStreamError

    with pytest.raises(MediaStreamError):
        await track.recv()


# ---- the user's voice ------------------------------------------------------------------------


def test_inbound_audio_becomes_16k_20ms_frames() -> None:
    import av

    inbound = InboundAudio()
    t = np.arange(48_000) / 48_000
    tone = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    stereo = np.stack([tone, tone]).T.reshape(1, -1)  # packed s16, as aiortc's decoder gives
    frames: list[np.ndarray] = []
    for i in range(50):  # 1 s in 20 ms frames
        chunk = np.ascontiguousarray(stereo[:, i * 1920 : (i + 1) * 1920])
        frame = av.AudioFrame.from_ndarray(chunk, format="s16", layout="stereo")
        frame.sample_rate = 48_000
        frame.pts = i * 960
        frames += inbound.push(frame)
    assert all(f.dtype == np.int16 and f.shape == (FRAME_SAMPLES,) for f in frames)
    assert 47 <= len(frames) <= 50  # the resampler keeps a few ms back
    pcm = np.concatenate(frames[5:])
    spectrum = np.abs(np.fft.rfft(pcm))
    assert abs(np.argmax(spectrum) * 16_000 / len(pcm) - 440) < 5
    assert 6000 < np.abs(pcm).max() < 8500


# ---- the data channel ------------------------------------------------------------------------


class FakeChannel:
    """TEST DOUBLE of an aiortc RTCDataChannel: records what is sent, opens on request."""

    def __init__(self) -> None:
        self.readyState = "connecting"
        self.sent: list[dict] = []
        self._on_open = None

    def on(self, event: str, callback) -> None:
        assert event == "open"
        self._on_open = callback

    def open(self) -> None:
        self.readyState = "open"
        assert self._on_open is not None
        self._on_open()

    def send(self, text: str) -> None:
        assert self.readyState == "open"
        self.sent.append(json.loads(text))


async def test_publisher_speaks_livekit_shapes_over_the_data_channel() -> None:
    participant = DataChannelParticipant("agent")
    publisher = RoomPublisher(DataChannelRoom(participant), "you")  # type: ignore[arg-type]
    publisher.start()
    channel = FakeChannel()
    publisher.on_event(StateChanged(0.0, AgentState.LISTENING))
    await asyncio.sleep(0.01)
    participant.attach(channel)  # before it opens: messages wait
    publisher.on_event(Transcript(0.1, "What is the capital", final=False))
    publisher.on_event(Transcript(0.2, "What is the capital of France?", final=True))
    publisher.on_event(AudioStart(0.3, reply_id=1))
    publisher.on_event(TtsChunk(0.3, "Paris.", reply_id=1))
    publisher.on_event(
        Turn(
            0.4,
            user_text="What is the capital of France?",
            agent_text="Paris.",
            heard_text="",
            interrupted=False,
            latency_ms={},
        )
    )
    await asyncio.sleep(0.05)
    assert channel.sent == []
    channel.open()
    await publisher.aclose()

    kinds = [(m["type"], m.get("topic")) for m in channel.sent]
    assert kinds[0] == ("attributes", None)
    assert channel.sent[0]["attributes"] == {"lk.agent.state": "listening"}
    texts = [m for m in channel.sent if m.get("topic") == "lk.transcription"]
    user = [m for m in texts if m["sender"] == "you"]
    assert [(m["text"], m["attributes"]["lk.transcription_final"]) for m in user] == [
        ("What is the capital", "false"),
        ("What is the capital of France?", "true"),
    ]
    assert user[0]["attributes"]["lk.segment_id"] == user[1]["attributes"]["lk.segment_id"]
    agent = [m for m in texts if m["sender"] == "agent"]
    assert agent[-1]["text"] == "Paris."
    assert agent[-1]["attributes"]["lk.transcription_final"] == "true"
    assert len({m["id"] for m in channel.sent if m["type"] == "text"}) == len(kinds) - 1
    assert channel.sent[-1]["topic"] == TOPIC_METRICS  # each finished turn's latencies
    assert json.loads(channel.sent[-1]["text"])["type"] == "turn"


async def test_a_turn_the_user_went_on_with_is_published_again_under_its_segment() -> None:
    participant = DataChannelParticipant("agent")
    publisher = RoomPublisher(DataChannelRoom(participant), "you")  # type: ignore[arg-type]
    publisher.start()
    channel = FakeChannel()
    participant.attach(channel)
    channel.open()
    publisher.on_event(Transcript(0.1, "Please remember my number.", final=True))
    publisher.on_event(TurnRetracted(0.2))
    publisher.on_event(Transcript(0.3, "four two seven", final=False))
    publisher.on_event(Transcript(0.4, "Please remember my number, four two seven.", final=True))
    publisher.on_event(Transcript(0.5, "And my name?", final=True))
    await publisher.aclose()
    segments = [
        (m["attributes"]["lk.segment_id"], m["text"])
        for m in channel.sent
        if m.get("topic") == "lk.transcription"
    ]
    assert [seg for seg, _ in segments] == ["user-0", "user-0", "user-0", "user-1"]


class AnswerLosingParticipant(DataChannelParticipant):
    """TEST DOUBLE of the agent's participant whose server applies every attribute update but
    whose answers to the states in `lost` never reach the caller: their `set_attributes` waits
    on, as livekit 1.1.21's does for an answer that came back before it started waiting."""

    def __init__(self, lost: set[str] = frozenset(), refuse: bool = False) -> None:
        super().__init__("agent")
        self._lost, self._refuse = lost, refuse
        self.waiting = 0

    async def set_attributes(self, attributes: dict[str, str]) -> None:
        if self._refuse:
            raise RuntimeError("NOT_ALLOWED: does not have permission to update own metadata")
        await super().set_attributes(attributes)
        if set(attributes.values()) & self._lost:
            self.waiting += 1
            try:
                await asyncio.Event().wait()
            finally:
                self.waiting -= 1


async def settled(condition) -> bool:
    """Whether `condition` holds once the event loop has run what it can (no clock involved)."""
    for _ in range(50):
        if condition():
            return True
        await asyncio.sleep(0)
    return condition()


async def test_a_state_whose_answer_is_lost_holds_back_neither_the_next_state_nor_the_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(room_io, "ATTRIBUTES_ANSWER_S", 3600.0)  # only a newer state ends it
    participant = AnswerLosingParticipant(lost={"thinking"})
    channel = FakeChannel()
    participant.attach(channel)
    channel.open()
    publisher = RoomPublisher(DataChannelRoom(participant), "you")  # type: ignore[arg-type]
    publisher.start()
    publisher.on_event(StateChanged(0.0, AgentState.THINKING))
    assert await settled(lambda: participant.waiting == 1)
    publisher.on_event(AudioStart(0.1, reply_id=1))
    publisher.on_event(StateChanged(0.1, AgentState.SPEAKING))
    publisher.on_event(TtsChunk(0.1, "Paris.", reply_id=1))
    assert await settled(lambda: len(channel.sent) == 4), channel.sent
    states = [m["attributes"]["lk.agent.state"] for m in channel.sent if m["type"] == "attributes"]
    assert states == ["thinking", "speaking"]
    assert [m["text"] for m in channel.sent if m["type"] == "text"] == ["", "Paris."]
    assert participant.waiting == 0  # the lost answer is no longer waited for
    await publisher.aclose()


async def test_no_answer_in_time_is_an_update_sent_and_a_refusal_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(room_io, "ATTRIBUTES_ANSWER_S", 0.01)
    participant = AnswerLosingParticipant(lost={"speaking"})
    channel = FakeChannel()
    participant.attach(channel)
    channel.open()
    await room_io.set_attributes(participant, {"lk.agent.state": "speaking"})  # type: ignore[arg-type]
    assert channel.sent == [{"type": "attributes", "attributes": {"lk.agent.state": "speaking"}}]
    assert await settled(lambda: participant.waiting == 0)
    with pytest.raises(RuntimeError, match="NOT_ALLOWED"):
        await room_io.set_attributes(AnswerLosingParticipant(refuse=True), {"k": "v"})  # type: ignore[arg-type]


def test_messages_after_the_channel_closed_are_dropped() -> None:
    participant = DataChannelParticipant("agent")
    channel = FakeChannel()
    participant.attach(channel)
    channel.open()
    channel.readyState = "closed"
    asyncio.run(participant.send_text("late", topic="lk.transcription"))
    assert channel.sent == []


# ---- the offer endpoint ----------------------------------------------------------------------


@pytest.fixture
def static_dir(tmp_path: Path) -> Path:
    (tmp_path / "index.html").write_text("<!doctype html><title>voxroom</title>")
    return tmp_path


def _agent() -> DirectAgent:
    # Engines are not reached by these requests: each is refused before an engine starts.
    return DirectAgent(
        stt=None,
        llm=ScriptedLLM(["unused"]),
        tts=None,  # type: ignore[arg-type]
        system_prompt="",
    )


VIDEO_ONLY_OFFER = (
    "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"
    "m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=rtpmap:96 VP8/90000\r\n"
)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"type": "offer"}, "must be"),
        ({"sdp": "v=0", "type": "answer"}, "must be"),
        ({"sdp": 3, "type": "offer"}, "must be"),
        ({"sdp": "x" * 70_000, "type": "offer"}, "must be"),
        (["offer"], "JSON object"),
        ({"sdp": "v=0", "type": "offer"}, "no audio"),
        ({"sdp": VIDEO_ONLY_OFFER, "type": "offer"}, "not usable"),
    ],
)
async def test_offer_endpoint_refuses_what_is_not_a_usable_offer(
    static_dir: Path, body, says: str
) -> None:
    agent = _agent()
    app = create_direct_web_app(agent, static_dir=static_dir)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        resp = await client.post("/api/direct/offer", json=body)
        assert resp.status == 400
        message = (await resp.json())["error"]
    assert says in message and message.endswith(".")
    assert agent.session is None  # nothing was started for it


async def test_direct_config_and_access(static_dir: Path) -> None:
    web_settings = WebSettings(shared_secret="a-code-of-16-chars-or-more", rate_per_min=1)
    app = create_direct_web_app(_agent(), static_dir=static_dir, web_settings=web_settings)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        config = await (await client.get("/api/config")).json()
        assert config == {"mode": "direct", "access": "open"}
        assert (await client.post("/api/token", json={"room": "r"})).status in (404, 405)
        proxied = {"X-Forwarded-For": "203.0.113.9"}  # via a proxy nobody trusts: not local
        config = await (await client.get("/api/config", headers=proxied)).json()
        assert config["access"] == "code"
        resp = await client.post("/api/direct/offer", json={}, headers=proxied)
        assert resp.status == 401
        resp = await client.post("/api/direct/offer", json={}, headers=proxied)
        assert resp.status == 429


# ---- the whole conversation, from a browser --------------------------------------------------


@contextmanager
def direct_demo(port: int, log_path: Path, cwd: Path, **env: str) -> Iterator[str]:
    """`voxroom demo --direct` as a subprocess; yields the page's URL once it serves, and
    stops it (SIGTERM: the demo stops the page and the conversation) afterwards."""
    argv = ["-m", "agent.cli", "demo", "--direct", "--port", str(port)]
    env = {"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO_ROOT), **env}
    with worker_process(argv, env, log_path, ready="Open http", timeout_s=180, cwd=cwd):
        yield f"http://127.0.0.1:{port}/"


@pytest.mark.slow
async def test_browser_talks_to_the_agent_directly(tmp_path: Path) -> None:
    wav = question_wav(tmp_path / "question.wav", QUESTION)
    async with fake_openai_server(ScriptedLLM([REPLY])) as base_url:
        with direct_demo(
            free_port(), tmp_path / "demo.log", tmp_path, **scripted_llm_env(base_url)
        ) as url:
            async with browser_page(wav) as page:
                talk = await converse(page, url)
                assert await page.locator("#mode").text_content() == "Direct connection"
                # Direct mode has no copilot: neither its checkbox nor its documents show.
                assert await page.locator("#copilot-field").is_hidden()
                assert await page.locator("#documents").is_hidden()
                latency = page.locator("#latency")
                await latency.wait_for(timeout=5_000)
                readout = await latency.text_content() or ""
                shots = await save_screenshots(page, "direct")
    print(f"\n{talk}\nlatency readout: {readout}\nscreenshots: {[str(p) for p in shots]}")
    assert_answered_aloud(talk, heard="capital", reply=REPLY)
    assert readout.startswith("Last turn: ") and " ms to the agent's first word" in readout
    log = (tmp_path / "demo.log").read_text()
    assert "Mode: direct" in log


# ---- `voxroom demo` choosing the mode --------------------------------------------------------


def test_demo_falls_back_to_direct_mode_without_livekit_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    dead_port: int,
) -> None:
    from agent.apps.demo import _livekit
    from agent.config import LiveKitSettings

    # No livekit-server on PATH or in the cache, and no Go to build one.
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("VOXROOM_CACHE_DIR", str(tmp_path / "cache"))
    nobody = LiveKitSettings(url=f"ws://127.0.0.1:{dead_port}")
    with contextlib.ExitStack() as stack:
        assert _livekit(nobody, tmp_path, stack) is None
    out = capsys.readouterr().out
    assert f"No LiveKit server answers at {nobody.url}" in out and "Go is not installed" in out


def test_demo_makes_up_an_access_code_only_beyond_loopback() -> None:
    from agent.apps.demo import _page_url, _with_access_code

    none = WebSettings()
    assert _with_access_code(none, "127.0.0.1") is none
    assert _with_access_code(none, "localhost") is none
    code = _with_access_code(none, "0.0.0.0").shared_secret
    assert len(code) >= 16 and code != _with_access_code(none, "0.0.0.0").shared_secret
    configured = WebSettings(shared_secret="the-operators-own-code")
    assert _with_access_code(configured, "0.0.0.0") is configured
    assert _page_url("0.0.0.0", 8080, "voxroom-demo") == "http://127.0.0.1:8080"
    assert _page_url("0.0.0.0", 8080, "voxroom-demo", remote=True) == (
        "http://<this machine's address>:8080"
    )
