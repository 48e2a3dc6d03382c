"""agent.transports.ffi_router on livekit-rtc's own FfiQueue and event messages: a bound stream gets
its own frame events and nobody else's; nobody else gets its events; everything else is unchanged.
On a livekit-rtc of another shape it keeps the library's way, with one warning; the versions
pinned for it are the installed ones."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import threading
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from livekit.rtc._ffi_client import FfiQueue
from livekit.rtc._proto import audio_frame_pb2
from livekit.rtc._proto import ffi_pb2 as proto_ffi

from agent.transports import ffi_router
from agent.transports.ffi_router import (
    FfiEventRouter,
    RtcInternals,
    library_internals,
    shape_problem,
)


def frame_event(handle: int) -> proto_ffi.FfiEvent:
    event = proto_ffi.FfiEvent()
    event.audio_stream_event.stream_handle = handle
    event.audio_stream_event.eos.SetInParent()
    return event


def capture_event(async_id: int) -> proto_ffi.FfiEvent:
    event = proto_ffi.FfiEvent()
    event.capture_audio_frame.async_id = async_id
    return event


def audio_only(event: proto_ffi.FfiEvent) -> bool:  # AudioStream's own filter
    return event.WhichOneof("message") == "audio_stream_event"


def drain(queue: asyncio.Queue) -> list[proto_ffi.FfiEvent]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


def kinds(events: list[proto_ffi.FfiEvent]) -> list[str]:
    return [
        f"frame:{e.audio_stream_event.stream_handle}"
        if e.HasField("audio_stream_event")
        else f"capture:{e.capture_audio_frame.async_id}"
        for e in events
    ]


def test_bound_streams_get_only_their_frames_and_other_events_are_unchanged() -> None:
    async def main() -> None:
        library = FfiQueue()
        router = FfiEventRouter(library)
        loop = asyncio.get_running_loop()
        a = library.subscribe(loop, filter_fn=audio_only)  # two sessions' streams
        b = library.subscribe(loop, filter_fn=audio_only)
        unbound = library.subscribe(loop, filter_fn=audio_only)  # someone else's stream
        waiter = library.subscribe(loop)  # a capture_frame() in flight: everything
        router.bind(a, 1, loop)
        router.bind(b, 2, loop)
        for event in [frame_event(1), frame_event(2), frame_event(3), capture_event(7)]:
            library.put(event)  # what the native runtime's callback calls
        await asyncio.sleep(0)
        assert kinds(drain(a)) == ["frame:1"]
        assert kinds(drain(b)) == ["frame:2"]
        assert kinds(drain(unbound)) == ["frame:3"]
        assert kinds(drain(waiter)) == ["frame:3", "capture:7"]

        library.unsubscribe(a)  # the stream closed: its route goes with it
        assert router.routes == 1
        library.put(frame_event(1))
        await asyncio.sleep(0)
        assert kinds(drain(unbound)) == ["frame:1"] and not drain(a)

    asyncio.run(main())


def test_a_stream_closed_before_binding_is_not_routed() -> None:
    async def main() -> None:
        library = FfiQueue()
        router = FfiEventRouter(library)
        loop = asyncio.get_running_loop()
        q = library.subscribe(loop, filter_fn=audio_only)
        library.unsubscribe(q)
        router.bind(q, 5, loop)
        assert router.routes == 0

    asyncio.run(main())


def test_a_route_to_a_closed_loop_is_dropped_not_raised() -> None:
    library = FfiQueue()
    router = FfiEventRouter(library)
    loop = asyncio.new_event_loop()
    q = library.subscribe(loop, filter_fn=audio_only)
    router.bind(q, 9, loop)
    loop.close()
    library.put(frame_event(9))  # on the native thread this must never raise
    assert router.routes == 0


class FakeRuntime:
    """TEST DOUBLE of livekit-rtc's FfiClient for capture requests: answers each one on another
    thread, before the request returns (`early`) or after."""

    def __init__(self, router: FfiEventRouter, *, early: bool) -> None:
        self.router, self.early, self.next_id = router, early, 100

    def request(self, req: proto_ffi.FfiRequest) -> proto_ffi.FfiResponse:
        self.next_id += 1
        answer = capture_event(self.next_id)
        if self.early:
            t = threading.Thread(target=self.router.put, args=(answer,))
            t.start()
            t.join()
        else:
            threading.Timer(0.01, self.router.put, args=(answer,)).start()
        resp = proto_ffi.FfiResponse()
        resp.capture_audio_frame.async_id = self.next_id
        return resp


class FakeSource:
    class _Handle:
        handle = 7

    _ffi_handle = _Handle()


class FakeFrame:
    def _proto_info(self) -> Any:
        from livekit.rtc._proto import audio_frame_pb2

        return audio_frame_pb2.AudioFrameBufferInfo(samples_per_channel=320)


@pytest.mark.parametrize("early", [False, True])
def test_a_capture_gets_its_own_answer_and_nobody_else_does(monkeypatch, early: bool) -> None:
    from livekit.rtc import _ffi_client

    async def main() -> None:
        library = FfiQueue()
        router = FfiEventRouter(library)
        monkeypatch.setattr(_ffi_client.FfiClient, "_instance", FakeRuntime(router, early=early))
        loop = asyncio.get_running_loop()
        room = library.subscribe(loop, filter_fn=lambda e: not audio_only(e))  # a Room's filter
        await asyncio.wait_for(router.capture_frame(FakeSource(), FakeFrame()), 2)
        await asyncio.sleep(0.05)
        # The early answer was also handed to the library (it could have been its capture).
        assert kinds(drain(room)) == (["capture:101"] if early else [])
        assert not router._captures and not router._early  # nothing left behind

        library.put(capture_event(5))  # the library's own capture: its way, unchanged
        await asyncio.sleep(0)
        assert kinds(drain(room)) == ["capture:5"]

    asyncio.run(main())


def test_a_cancelled_capture_leaves_no_waiter(monkeypatch) -> None:
    from livekit.rtc import _ffi_client

    class SilentRuntime(FakeRuntime):
        def request(self, req: proto_ffi.FfiRequest) -> proto_ffi.FfiResponse:
            resp = proto_ffi.FfiResponse()
            resp.capture_audio_frame.async_id = 42
            return resp  # never answers

    async def main() -> None:
        router = FfiEventRouter(FfiQueue())
        monkeypatch.setattr(_ffi_client.FfiClient, "_instance", SilentRuntime(router, early=False))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(router.capture_frame(FakeSource(), FakeFrame()), 0.05)
        assert not router._captures

    asyncio.run(main())


def test_a_capture_whose_answer_is_lost_goes_on_after_its_timeout(monkeypatch, caplog) -> None:
    from livekit.rtc import _ffi_client

    class LosingRuntime(FakeRuntime):
        def request(self, req: proto_ffi.FfiRequest) -> proto_ffi.FfiResponse:
            resp = proto_ffi.FfiResponse()
            resp.capture_audio_frame.async_id = 43
            return resp  # the answer never comes

    async def main() -> None:
        router = FfiEventRouter(FfiQueue())
        monkeypatch.setattr(_ffi_client.FfiClient, "_instance", LosingRuntime(router, early=False))
        await router.capture_frame(FakeSource(), FakeFrame(), timeout_s=0.05)  # returns
        assert not router._captures

    asyncio.run(main())
    assert any("no answer to an audio capture" in r.getMessage() for r in caplog.records)


# ---- the shape of livekit-rtc -------------------------------------------------------------

PINNED = (
    "livekit",
    "livekit-api",
    "livekit-protocol",
    "livekit-agents",
    "livekit-plugins-openai",
    "piper-tts",
)


def test_the_pins_are_the_installed_versions() -> None:
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    pins = {}
    for requirement in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
        if m := re.fullmatch(r"([A-Za-z0-9_.-]+)==([^;\s]+)", requirement):
            pins[m.group(1)] = m.group(2)
    assert {name: pins.get(name) for name in PINNED} == {name: version(name) for name in PINNED}


def test_the_installed_livekit_rtc_has_the_shape_the_router_was_written_for() -> None:
    assert shape_problem(library_internals()) is None


class QueueWithPriority(FfiQueue):
    """TEST DOUBLE: an FfiQueue of another version, whose put takes a priority too."""

    def put(self, item: Any, priority: int = 0) -> None:
        super().put(item)


class QueueOfPairs(FfiQueue):
    """TEST DOUBLE: an FfiQueue of another version, whose subscribers are (queue, loop)."""

    def __init__(self) -> None:
        super().__init__()
        self._subscribers = [(asyncio.Queue(), None)]  # type: ignore[list-item]


class ClientDouble:
    """TEST DOUBLE of FfiClient: a queue, and requests that must never be made."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def request(self, req: Any) -> Any:
        raise AssertionError("the library's way makes its own requests")


class StreamWithoutQueue:
    """TEST DOUBLE: an AudioStream of another version that keeps no _ffi_queue."""

    def __init__(self) -> None:
        self._ffi_handle = self._loop = None


def changed(**shape: Any) -> RtcInternals:
    return dataclasses.replace(library_internals(), **shape)


@pytest.mark.parametrize(
    ("shape", "named"),
    [
        (lambda: {"client": ClientDouble(QueueWithPriority())}, "FfiQueue.put(item)"),
        (lambda: {"client": ClientDouble(QueueOfPairs())}, "FfiQueue._subscribers"),
        (lambda: {"client": ClientDouble(object())}, "FfiQueue.unsubscribe(queue)"),
        (lambda: {"audio_stream": StreamWithoutQueue}, "AudioStream's _ffi_queue"),
        (lambda: {"ffi_proto": audio_frame_pb2}, "FfiEvent.audio_stream_event"),
    ],
    ids=["put-signature", "subscriber-entries", "no-queue", "stream-attributes", "protobuf"],
)
def test_a_changed_shape_is_named(shape: Any, named: str) -> None:
    problem = shape_problem(changed(**shape()))
    assert problem is not None and named in problem, problem


def test_a_changed_shape_keeps_the_library_way_with_one_warning(monkeypatch, caplog) -> None:
    queue = QueueWithPriority()
    monkeypatch.setattr(
        ffi_router, "library_internals", lambda: changed(client=ClientDouble(queue))
    )
    monkeypatch.setattr(ffi_router, "_router", None)
    monkeypatch.setattr(ffi_router, "_decided", False)  # as in a fresh process

    class LibrarySource:
        """TEST DOUBLE of rtc.AudioSource: records the library's own capture_frame."""

        def __init__(self) -> None:
            self.captured: list[Any] = []

        async def capture_frame(self, frame: Any) -> None:
            self.captured.append(frame)

    async def main() -> LibrarySource:
        source = LibrarySource()
        for frame in ("frame-1", "frame-2"):
            await ffi_router.capture_frame(source, frame)
            assert not ffi_router.bind_audio_stream(StreamWithoutQueue())
        return source

    with caplog.at_level(logging.WARNING, logger="agent.transports.ffi_router"):
        source = asyncio.run(main())
    assert ffi_router.install() is None
    assert source.captured == ["frame-1", "frame-2"]  # the library's capture, every time
    assert "put" not in vars(queue)  # nothing of the library was replaced
    [warning] = [r for r in caplog.records if r.name == "agent.transports.ffi_router"]
    message = warning.getMessage()
    assert "the library's way" in message and "FfiQueue.put(item)" in message, message
