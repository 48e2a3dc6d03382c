"""agent/ops/livekit_server.py: finding/building the binary, and real livekit-server nodes carrying
audio between two participants over UDP on loopback (one node, and two nodes sharing Redis)."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import numpy as np
import pytest

from agent.ops.livekit_server import (
    GO_PACKAGE,
    LiveKitServer,
    LiveKitServerError,
    LiveKitServerMissing,
    _redis_config,
    find_livekit_server,
)
from agent.testing.ports import free_port
from agent.transports.tokens import create_join_token
from tests.marks import DEV_SECRET

SAMPLE_RATE = 48000
FRAME = SAMPLE_RATE // 100  # 10 ms
TONE_HZ = 440.0


# --- finding and building the binary --------------------------------------------------------


def _executable(path: Path, script: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def bare_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """PATH with only an empty bin dir (no go, no livekit-server), and an empty cache dir."""
    path_dir, cache = tmp_path / "path", tmp_path / "cache"
    path_dir.mkdir()
    monkeypatch.setenv("PATH", str(path_dir))
    monkeypatch.setenv("VOXROOM_CACHE_DIR", str(cache))
    return path_dir, cache


def test_binary_on_path_wins_over_cache(bare_env: tuple[Path, Path]) -> None:
    path_dir, cache = bare_env
    _executable(cache / "bin" / "livekit-server")
    on_path = _executable(path_dir / "livekit-server")
    assert find_livekit_server(build=False) == on_path


def test_cached_binary_is_used(bare_env: tuple[Path, Path]) -> None:
    _, cache = bare_env
    cached = _executable(cache / "bin" / "livekit-server")
    assert find_livekit_server(build=False) == cached


@pytest.mark.parametrize("build", [True, False])
def test_missing_binary_says_how_to_install(bare_env: tuple[Path, Path], build: bool) -> None:
    with pytest.raises(LiveKitServerMissing) as err:
        find_livekit_server(build=build)
    message = str(err.value)
    assert f"go install {GO_PACKAGE}" in message
    assert "PATH" in message and "Go >= 1.26" in message


def test_build_installs_into_cache_and_renames(bare_env: tuple[Path, Path]) -> None:
    path_dir, cache = bare_env
    # Fake `go` (test double): records its arguments, and "builds" $GOBIN/server like go does.
    _executable(
        path_dir / "go",
        '#!/bin/sh\necho "$@" > "$GOBIN/../args"\necho built > "$GOBIN/server"\n',
    )
    built = find_livekit_server(build=True)
    assert built == cache / "bin" / "livekit-server"
    assert built.read_text() == "built\n"
    assert (cache / "bin" / "args").read_text().split() == ["install", GO_PACKAGE]
    assert sorted(p.name for p in (cache / "bin").iterdir() if not p.name.startswith(".")) == [
        "args",
        "livekit-server",
    ]


def test_failed_build_raises_missing(bare_env: tuple[Path, Path]) -> None:
    path_dir, cache = bare_env
    _executable(path_dir / "go", "#!/bin/sh\nexit 3\n")
    with pytest.raises(LiveKitServerMissing, match=r"exit 3"):
        find_livekit_server(build=True)
    assert not (cache / "bin" / "livekit-server").exists()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:6390/2", {"address": "127.0.0.1:6390", "db": 2}),
        ("localhost:6379", {"address": "localhost:6379"}),
        (
            "redis://u:pw@redis.internal",
            {"address": "redis.internal:6379", "username": "u", "password": "pw"},
        ),
        ("rediss://r:6380", {"address": "r:6380", "tls": {"enabled": True}}),
    ],
)
def test_redis_url_to_livekit_keys(url: str, expected: dict[str, object]) -> None:
    assert _redis_config(url) == expected


def test_bad_redis_url_is_rejected() -> None:
    with pytest.raises(ValueError, match="redis://host:6379"):
        _redis_config("http://127.0.0.1:6379")


# --- real nodes -------------------------------------------------------------------------------


def _sine(start: int, count: int) -> np.ndarray:
    t = (np.arange(count) + start) / SAMPLE_RATE
    return (0.3 * 32767 * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.int16)


async def _publish_sine(room, stop: asyncio.Event) -> None:
    from livekit import rtc

    source = rtc.AudioSource(SAMPLE_RATE, 1)
    track = rtc.LocalAudioTrack.create_audio_track("sine", source)
    await room.local_participant.publish_track(
        track, rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
    )
    sent = 0
    while not stop.is_set():
        # capture_frame waits while its queue is full, which paces this loop to real time.
        frame = rtc.AudioFrame(_sine(sent, FRAME).tobytes(), SAMPLE_RATE, 1, FRAME)
        await source.capture_frame(frame)
        sent += FRAME
    await source.aclose()


async def _receive(track, seconds: float) -> np.ndarray:
    from livekit import rtc

    stream = rtc.AudioStream(track, sample_rate=SAMPLE_RATE, num_channels=1)
    chunks: list[np.ndarray] = []
    wanted = int(seconds * SAMPLE_RATE)
    try:
        async for event in stream:
            chunks.append(np.frombuffer(event.frame.data, dtype=np.int16))
            if sum(len(c) for c in chunks) >= wanted:
                break
    finally:
        await stream.aclose()
    return np.concatenate(chunks)


async def _media_remote_candidates(room) -> list:
    """The server-side ICE candidate of each connected transport (one or two peer connections,
    depending on the SDK's signalling mode)."""
    stats = await room.get_rtc_stats()
    reports = [*stats.publisher_stats, *stats.subscriber_stats]
    by_id = {getattr(r, r.WhichOneof("stats")).rtc.id: r for r in reports}
    candidates = []
    for report in reports:
        if report.WhichOneof("stats") == "transport":
            pair_id = report.transport.transport.selected_candidate_pair_id
            if pair_id:
                pair = by_id[pair_id].candidate_pair.candidate_pair
                candidates.append(by_id[pair.remote_candidate_id].remote_candidate.candidate)
    return candidates


async def _assert_audio_flows(publish_to: LiveKitServer, subscribe_to: LiveKitServer) -> set[int]:
    """alice publishes a 440 Hz tone through one node; bob, on the other, receives it via UDP.
    Returns the server UDP ports the media went through."""
    from livekit import rtc

    room = "plumbing"
    alice, bob = rtc.Room(), rtc.Room()
    subscribed: asyncio.Future = asyncio.get_running_loop().create_future()

    @bob.on("track_subscribed")
    def _on_track(track, publication, participant) -> None:
        if participant.identity == "alice" and not subscribed.done():
            subscribed.set_result(track)

    stop = asyncio.Event()
    publisher = None
    try:
        alice_settings = publish_to.livekit_settings()
        bob_settings = subscribe_to.livekit_settings()
        await alice.connect(
            publish_to.url, create_join_token(alice_settings, room, "alice", dispatch_agent=False)
        )
        await bob.connect(
            subscribe_to.url, create_join_token(bob_settings, room, "bob", dispatch_agent=False)
        )
        publisher = asyncio.create_task(_publish_sine(alice, stop))
        track = await asyncio.wait_for(subscribed, timeout=10)
        received = await asyncio.wait_for(_receive(track, seconds=1.0), timeout=10)

        # Skip the first frames (decoder warm-up), then it must be our tone, clearly audible.
        tail = received[-SAMPLE_RATE // 2 :].astype(np.float64)
        rms = float(np.sqrt(np.mean(tail**2)))
        peak_hz = np.fft.rfftfreq(len(tail), 1 / SAMPLE_RATE)[np.argmax(np.abs(np.fft.rfft(tail)))]
        assert rms > 0.3 * 32767 / np.sqrt(2) / 2, f"tone too quiet after the SFU: rms={rms:.0f}"
        assert abs(peak_hz - TONE_HZ) <= 5, f"received {peak_hz} Hz instead of {TONE_HZ} Hz"

        candidates = [*await _media_remote_candidates(alice), *await _media_remote_candidates(bob)]
        assert len(candidates) >= 2
        assert {(c.protocol, c.address) for c in candidates} == {("udp", "127.0.0.1")}
        return {c.port for c in candidates}
    finally:
        stop.set()
        if publisher is not None:
            await asyncio.wait_for(publisher, timeout=5)
        await alice.disconnect()
        await bob.disconnect()


@pytest.mark.integration
@DEV_SECRET  # LiveKitAPI signs its requests with it
async def test_room_service_and_audio_over_udp(livekit_server: LiveKitServer) -> None:
    from livekit import api

    async with api.LiveKitAPI(
        livekit_server.http_url, livekit_server.api_key, livekit_server.api_secret
    ) as lkapi:
        created = await lkapi.room.create_room(api.CreateRoomRequest(name="plumbing"))
        assert created.name == "plumbing"
        rooms = await lkapi.room.list_rooms(api.ListRoomsRequest())
        assert "plumbing" in [r.name for r in rooms.rooms]

        assert await _assert_audio_flows(livekit_server, livekit_server) == {
            livekit_server.udp_port
        }

        await lkapi.room.delete_room(api.DeleteRoomRequest(room="plumbing"))


@pytest.mark.integration
@DEV_SECRET  # LiveKitAPI signs its requests with it
async def test_two_nodes_sharing_redis_carry_audio(redis_url: str, tmp_path: Path) -> None:
    from livekit import api

    with (
        LiveKitServer(redis_url=redis_url, log_path=tmp_path / "a.log") as node_a,
        LiveKitServer(redis_url=redis_url, log_path=tmp_path / "b.log") as node_b,
    ):
        assert node_a.port != node_b.port and node_a.udp_port != node_b.udp_port
        async with (
            api.LiveKitAPI(node_a.http_url, node_a.api_key, node_a.api_secret) as on_a,
            api.LiveKitAPI(node_b.http_url, node_b.api_key, node_b.api_secret) as on_b,
        ):
            # A room created through node A is known to node B: they form one deployment.
            await on_a.room.create_room(api.CreateRoomRequest(name="plumbing"))
            seen_by_b = await on_b.room.list_rooms(api.ListRoomsRequest(names=["plumbing"]))
            assert [r.name for r in seen_by_b.rooms] == ["plumbing"]

        # alice signals through node A, bob through node B; the room lives on one of them, and
        # both send their media to that node.
        ports = await _assert_audio_flows(node_a, node_b)
        assert len(ports) == 1 and ports <= {node_a.udp_port, node_b.udp_port}
    # Each node logs where it was told to; both went through Redis, neither routes alone.
    for log in (tmp_path / "a.log", tmp_path / "b.log"):
        text = log.read_text()
        assert "connecting to redis" in text and "single-node routing" not in text


@pytest.mark.integration
def test_explicit_port_and_start_failure_with_log_tail(tmp_path: Path) -> None:
    free = free_port()
    with LiveKitServer(port=free) as server:
        assert server.url == f"ws://127.0.0.1:{free}"
        # The same port again cannot be bound: the second node fails, with its log in the error.
        with pytest.raises(LiveKitServerError, match="livekit-server exited") as err:
            LiveKitServer(port=free, log_path=tmp_path / "clash.log").start()
        assert "address already in use" in str(err.value)
