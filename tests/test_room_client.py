"""RoomUser's teardown is bounded: a step that never ends, even when cancelled, is left behind
after LEAVE_TIMEOUT_S with a warning, and the caller goes on (a load test's step ends with many
users leaving at once). Its microphone keeps its lead over play-out and has one speaker."""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
import pytest

from bench import room_client
from bench.room_client import RoomUser


class StuckRoom:
    """A TEST DOUBLE of `rtc.Room` whose disconnect shrugs off cancellation and ends only when
    the test releases it."""

    name = "stuck"

    def __init__(self) -> None:
        self.cancels = 0
        self.released = asyncio.Event()

    async def disconnect(self) -> None:
        while not self.released.is_set():
            try:
                await self.released.wait()
            except asyncio.CancelledError:
                self.cancels += 1


class FailingRoom:
    name = "failing"

    async def disconnect(self) -> None:
        raise RuntimeError("engine is closed")


async def test_close_goes_on_when_the_disconnect_never_ends(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(room_client, "LEAVE_TIMEOUT_S", 0.1)
    room = StuckRoom()
    user = RoomUser("ws://unused", "token", room=room)  # type: ignore[arg-type]
    user._tasks = {asyncio.create_task(asyncio.sleep(3600))}  # a reader, as connect() starts
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="bench.room_client"):
        await user.close()
    assert time.monotonic() - start < 1.0
    assert room.cancels == 1  # asked to stop, not waited for
    assert all(t.cancelled() for t in user._tasks)
    assert "leaving room stuck: not done after" in caplog.text
    room.released.set()  # so that the loop can end
    await asyncio.sleep(0)


async def test_a_failing_disconnect_is_logged_and_the_readers_still_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    user = RoomUser("ws://unused", "token", room=FailingRoom())  # type: ignore[arg-type]
    user._tasks = {asyncio.create_task(asyncio.sleep(3600))}
    with caplog.at_level(logging.WARNING, logger="bench.room_client"):
        await user.close()
    assert all(t.cancelled() for t in user._tasks)
    assert "leaving room failing: RuntimeError: engine is closed" in caplog.text


async def test_final_texts_keep_the_latest_stream_of_each_segment() -> None:
    user = RoomUser("ws://127.0.0.1:1", "token")

    def said(text: str, segment: str, final: bool = True) -> room_client.Transcription:
        attributes = {"lk.segment_id": segment, "lk.transcription_final": str(final).lower()}
        return room_client.Transcription(time.monotonic(), "user-1", text, attributes)

    user.transcripts += [
        said("Please remember my number.", "user-0"),
        said("four two", "user-0", final=False),
        said("Please remember my number, four two seven.", "user-0"),
        said("And my name?", "user-1"),
    ]
    assert user.final_texts("user-1") == [
        "Please remember my number, four two seven.",
        "And my name?",
    ]
    assert user.final_texts("agent") == []


class RecordingMic:
    """A TEST DOUBLE of the microphone's sink: when each frame was written."""

    def __init__(self) -> None:
        self.written: list[float] = []

    async def write(self, pcm: np.ndarray) -> None:
        self.written.append(time.monotonic())


async def test_the_microphone_has_one_speaker_at_a_time() -> None:
    # Two at once would interleave their frames on the one track (a test once did, and the
    # agent heard the question chopped into 20 ms pieces).
    user = RoomUser("ws://unused", "token")
    mic = RecordingMic()
    user._mic = mic  # what connect() sets
    speech = np.zeros(room_client.RATE // 5, np.int16)  # 10 frames
    first = asyncio.create_task(user.speak(speech))
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="already speaking"):
        await user.speak(speech)
    await first
    assert len(mic.written) == 10
    await user.speak(speech)  # free again
    assert len(mic.written) == 20
