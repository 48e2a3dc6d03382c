"""agent.ffi_router on livekit-rtc's own FfiQueue and event messages: a bound stream gets its
own frame events and nobody else's; nobody else gets its events; everything else is unchanged."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from livekit.rtc._ffi_client import FfiQueue
from livekit.rtc._proto import ffi_pb2 as proto_ffi

from agent.ffi_router import FfiEventRouter


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
        f"frame:{e.audio_stream_event.stream_handle}" if e.HasField("audio_stream_event")
        else f"capture:{e.capture_audio_frame.async_id}" for e in events
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
