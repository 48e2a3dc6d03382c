"""Per-stream delivery of LiveKit's audio frame events, so that sessions in one process cost
each other nothing.

livekit-rtc (1.1 and 1.2) hands every event of its native runtime to every subscriber queue in
the process, each through `loop.call_soon_threadsafe` (a pipe write and an event-loop wake-up),
under one lock. Every `AudioStream` subscribes to all audio frame events and drops the other
streams' ones, and every `AudioSource.capture_frame()` in flight subscribes to everything. With
N sessions in one worker each 20 ms frame is handed to ~N queues: N² wake-ups per frame time.
In a py-spy profile of a 6-session worker that hand-out was most of the worker's busy time.

Once a stream is bound here, its frame events go to its own queue alone, and it no longer
receives the others'. `capture_frame` here hands the runtime's answer to the one waiting call
alone (the library's broadcasts it to every room and every capture in flight). Every other
event, the frames of streams that are not bound and the library's own captures go the library's
way. The router relies on private attributes of livekit-rtc (pinned in pyproject.toml to the
version it was written for). At its first use it checks their shape (`shape_problem`: the
methods it replaces and calls with their parameters, the attributes it reads, the protobuf
fields); where one differs (another version), it logs one warning naming it and the library's
behaviour stays for the whole process.
`VOXROOM_FFI_ROUTING=off` keeps the library's way (for comparisons, or a misbehaving version).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from agent.timeouts import finish_within

log = logging.getLogger(__name__)

_AUDIO_EVENT = "audio_stream_event"
_CAPTURE_EVENT = "capture_audio_frame"
_MAX_EARLY = 64
CAPTURE_TIMEOUT_S = 2.0  # a queued frame is answered within the source's queue length


def _never(_event: Any) -> bool:
    return False


def _resolve(future: asyncio.Future[Any], event: Any) -> None:
    if not future.done():  # not cancelled meanwhile
        future.set_result(event)


class FfiEventRouter:
    """Wraps one `FfiQueue`: `put` (called on the native runtime's thread) routes the frame
    events of bound streams; `unsubscribe` forgets a closed stream's route."""

    def __init__(self, ffi_queue: Any) -> None:
        self._ffi_queue = ffi_queue
        self._library_put = ffi_queue.put
        self._library_unsubscribe = ffi_queue.unsubscribe
        self._lock = threading.Lock()
        # Replaced whole on every change, so `put` reads it without a lock.
        self._routes: dict[int, tuple[asyncio.Queue[Any], asyncio.AbstractEventLoop]] = {}
        # Captures waiting for their answer, by async id. The runtime can answer before the
        # request returns the id: while requests are under way, answers nobody waits for yet
        # are kept (and also given to the library, whose they may be).
        self._capture_lock = threading.Lock()
        self._captures: dict[int, tuple[asyncio.Future[Any], asyncio.AbstractEventLoop]] = {}
        self._requesting = 0
        self._early: dict[int, Any] = {}
        ffi_queue.put = self.put
        ffi_queue.unsubscribe = self.unsubscribe

    @property
    def routes(self) -> int:
        return len(self._routes)

    def put(self, event: Any) -> None:
        kind = event.WhichOneof("message")
        if kind == _AUDIO_EVENT:
            route = self._routes.get(event.audio_stream_event.stream_handle)
            if route is not None:
                queue, loop = route
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, event)
                except RuntimeError:  # the stream's loop is closed: it will not read again
                    self._forget(queue)
                return
        elif kind == _CAPTURE_EVENT:
            async_id = event.capture_audio_frame.async_id
            with self._capture_lock:
                waiter = self._captures.pop(async_id, None)
                if waiter is None and self._requesting:
                    self._early[async_id] = event
                    while len(self._early) > _MAX_EARLY:  # the library's, never claimed
                        del self._early[next(iter(self._early))]
            if waiter is not None:
                future, loop = waiter
                with contextlib.suppress(RuntimeError):  # its loop is gone, and so is the caller
                    loop.call_soon_threadsafe(_resolve, future, event)
                return
        self._library_put(event)

    async def capture_frame(
        self, source: Any, frame: Any, *, timeout_s: float = CAPTURE_TIMEOUT_S
    ) -> None:
        """`source.capture_frame(frame)` (an `rtc.AudioSource`, an `rtc.AudioFrame`), with the
        answer routed to this call alone. Returns once the runtime has queued the frame, or
        after `timeout_s` without its answer (logged): a lost answer must not stop the voice."""
        from livekit.rtc._ffi_client import FfiClient
        from livekit.rtc._proto import ffi_pb2

        req = ffi_pb2.FfiRequest()
        req.capture_audio_frame.source_handle = source._ffi_handle.handle
        req.capture_audio_frame.buffer.CopyFrom(frame._proto_info())  # points into `frame`
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._capture_lock:
            self._requesting += 1
        try:
            async_id = FfiClient.instance.request(req).capture_audio_frame.async_id
        except BaseException:
            self._requested(None, future, loop)
            raise
        if (early := self._requested(async_id, future, loop)) is not None:
            future.set_result(early)
        try:
            answered = await finish_within(future, timeout_s)  # `frame` stays alive meanwhile
        finally:
            with self._capture_lock:
                self._captures.pop(async_id, None)
        if not answered:
            log.warning("no answer to an audio capture within %.1f s; going on", timeout_s)
            return
        answer = future.result()
        if answer.capture_audio_frame.error:
            raise RuntimeError(f"capture_frame: {answer.capture_audio_frame.error}")

    def _requested(
        self, async_id: int | None, future: asyncio.Future[Any], loop: asyncio.AbstractEventLoop
    ) -> Any:
        """A capture request returned (None: it failed): its answer if it came already, else
        None and the capture waits for it."""
        early = None
        with self._capture_lock:
            self._requesting -= 1
            if async_id is not None:
                early = self._early.pop(async_id, None)
                if early is None:
                    self._captures[async_id] = (future, loop)
            if not self._requesting:
                self._early.clear()  # nobody left to claim them
        return early

    def unsubscribe(self, queue: Any) -> None:
        self._library_unsubscribe(queue)
        self._forget(queue)

    def bind(self, queue: Any, handle: int, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver the frame events of stream `handle` to `queue` alone, and nothing else."""
        with self._ffi_queue._lock:
            subscribers = self._ffi_queue._subscribers
            for i, (q, q_loop, _filter) in enumerate(subscribers):
                if q is queue:
                    subscribers[i] = (q, q_loop, _never)
                    break
            else:
                return  # already unsubscribed: the stream is closed
        with self._lock:
            self._routes = {**self._routes, handle: (queue, loop)}

    def _forget(self, queue: Any) -> None:
        with self._lock:
            self._routes = {h: r for h, r in self._routes.items() if r[0] is not queue}


_router: FfiEventRouter | None = None
_decided = False  # whether this process routes is settled once, on first use
_install_lock = threading.Lock()


def install() -> FfiEventRouter | None:
    """The process's router, installed on first use (None where livekit-rtc lacks what it
    needs, or with VOXROOM_FFI_ROUTING=off). Called per frame: after the first call it only
    reads a global."""
    global _router, _decided
    if not _decided:
        with _install_lock:
            if not _decided:
                _router, _decided = _new_router(), True
    return _router


@dataclass(frozen=True)
class RtcInternals:
    """What of livekit-rtc the router replaces, calls or reads."""

    client: Any  # FfiClient.instance: its `queue` (an FfiQueue) and `request`
    audio_stream: type  # rtc.AudioStream
    audio_source: type  # rtc.AudioSource
    audio_frame: type  # rtc.AudioFrame
    ffi_proto: ModuleType  # livekit.rtc._proto.ffi_pb2


def library_internals() -> RtcInternals:
    from livekit import rtc
    from livekit.rtc._ffi_client import FfiClient
    from livekit.rtc._proto import ffi_pb2

    return RtcInternals(
        FfiClient.instance, rtc.AudioStream, rtc.AudioSource, rtc.AudioFrame, ffi_pb2
    )


# Protobuf messages, by (top-level message, field), and the fields of theirs the router uses.
_PROTO_FIELDS = {
    ("FfiEvent", _AUDIO_EVENT): {"stream_handle"},
    ("FfiEvent", _CAPTURE_EVENT): {"async_id", "error"},
    ("FfiRequest", "capture_audio_frame"): {"source_handle", "buffer"},
    ("FfiResponse", "capture_audio_frame"): {"async_id"},
}


def _positional(fn: Any) -> list[str] | None:
    """The positional parameters of `fn` (bound: without self), None if it is no function."""
    if not callable(fn):
        return None
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _arity(fn: Any) -> int | None:
    positional = _positional(fn)
    return None if positional is None else len(positional)


def _sets(cls: type, names: set[str]) -> bool:
    """Whether `cls.__init__` assigns attributes of these names (read from its bytecode: the
    names an instance gets are not on the class)."""
    code = getattr(getattr(cls, "__init__", None), "__code__", None)
    return code is not None and names <= set(code.co_names)


def shape_problem(lib: RtcInternals) -> str | None:
    """What differs from the livekit-rtc this router was written for, in words; None: nothing."""
    queue = getattr(lib.client, "queue", None)
    subscribers = getattr(queue, "_subscribers", None)
    checks = [
        # Called with one argument, by position (once installed, these are the router's own).
        ("FfiQueue.put(item)", _arity(getattr(queue, "put", None)) == 1),
        ("FfiQueue.unsubscribe(queue)", _arity(getattr(queue, "unsubscribe", None)) == 1),
        # bind() rewrites a subscriber's (queue, loop, filter_fn) entry in place.
        (
            "FfiQueue.subscribe(loop, filter_fn)",
            _positional(getattr(queue, "subscribe", None)) == ["loop", "filter_fn"],
        ),
        ("FfiQueue._lock", hasattr(getattr(queue, "_lock", None), "__enter__")),
        (
            "FfiQueue._subscribers, a list of (queue, loop, filter_fn)",
            isinstance(subscribers, list)
            and all(isinstance(e, tuple) and len(e) == 3 for e in subscribers),
        ),
        ("FfiClient.request(req)", _arity(getattr(lib.client, "request", None)) == 1),
        (
            "AudioStream's _ffi_queue, _ffi_handle and _loop",
            _sets(lib.audio_stream, {"_ffi_queue", "_ffi_handle", "_loop"}),
        ),
        ("AudioSource's _ffi_handle", _sets(lib.audio_source, {"_ffi_handle"})),
        ("AudioFrame._proto_info()", _arity(getattr(lib.audio_frame, "_proto_info", None)) == 1),
    ]
    event = getattr(getattr(lib.ffi_proto, "FfiEvent", None), "DESCRIPTOR", None)
    oneof = event.oneofs_by_name.get("message") if event is not None else None
    checks.append(
        (
            "FfiEvent's oneof message with audio_stream_event and capture_audio_frame",
            oneof is not None and {_AUDIO_EVENT, _CAPTURE_EVENT} <= {f.name for f in oneof.fields},
        )
    )
    for (message, field), names in _PROTO_FIELDS.items():
        desc = getattr(getattr(lib.ffi_proto, message, None), "DESCRIPTOR", None)
        sub = desc.fields_by_name.get(field) if desc is not None else None
        have = set(sub.message_type.fields_by_name) if sub and sub.message_type else set()
        checks.append((f"{message}.{field} with {', '.join(sorted(names))}", names <= have))
    missing = [what for what, ok in checks if not ok]
    return "; ".join(missing) if missing else None


def _new_router() -> FfiEventRouter | None:
    if os.environ.get("VOXROOM_FFI_ROUTING", "on") == "off":  # the library's way, for A/B
        return None
    lib = library_internals()
    problem = shape_problem(lib)
    if problem is None:
        return FfiEventRouter(lib.client.queue)
    from importlib.metadata import version

    log.warning(
        "livekit-rtc %s is not the version agent/transports/ffi_router.py was written for "
        "(see pyproject.toml); audio frames take the library's way. Not as expected: %s",
        version("livekit"),
        problem,
    )
    return None


def bind_audio_stream(stream: Any) -> bool:
    """Route `stream`'s (an `rtc.AudioStream`) frame events to it alone. Returns whether it
    was bound (not where the router is not installed)."""
    router = install()
    if router is None:
        return False
    # The shape check saw AudioStream set these.
    router.bind(stream._ffi_queue, stream._ffi_handle.handle, stream._loop)
    return True


async def capture_frame(source: Any, frame: Any) -> None:
    """Queue `frame` on `source` (an `rtc.AudioSource`), routed where the router is installed."""
    router = install()
    if router is None:
        await source.capture_frame(frame)
    else:
        await router.capture_frame(source, frame)
