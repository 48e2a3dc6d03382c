"""Copilot mode in a LiveKit room: the bridge's "meeting-audio" track (the interviewer) into the
copilot engine, the answers out as text streams to the candidate only.

Who is who in the room:
- the candidate: named by "voxroom.candidate" in the dispatch or room metadata, else the
  first other standard participant that is not a bridge. Only the candidate gets answers
  (text-stream topic `voxroom.copilot`, `destination_identities`) and only the candidate may
  send documents;
- the candidate's bridge: publishes "meeting-audio", and its token (agent.transports.tokens
  .create_bridge_token, made with the API secret by `voxroom bridge --room R --candidate C` or
  `voxroom token --bridge-for C`) gives it the attribute "voxroom.bridge.candidate" naming the
  candidate, which its grants do not let it change. The copilot listens to that track alone;
- anyone else (a third participant) can neither read nor steer the answers: a `meeting-audio`
  track of theirs is unsubscribed from unheard, whatever their identity or metadata (a bridge's
  default identity starts with "meeting-bridge-"; `--agent-mode copilot` sets its metadata
  {"voxroom.mode": "copilot"}: both only keep it from being taken for the candidate).

Documents (resume, job description) come as text or byte streams on `voxroom.context`
(attribute `voxroom.context.name`, e.g. "resume"; at most 200 kB), or as file names in the
dispatch or room metadata ("voxroom.resume", "voxroom.job_description"), read only from the
directory in $VOXROOM_CONTEXT_DIR. Each is acknowledged on `voxroom.context.status`.

Each answer is one text stream, written delta by delta, with the attributes
`voxroom.copilot.answer_id`, `voxroom.copilot.question` and `voxroom.copilot.final` "false";
its close sets `voxroom.copilot.final` "true" and `voxroom.copilot.status` (complete | failed |
cancelled).

What the copilot heard of each utterance of the interviewer (a question, or a statement it
answers nothing to) goes to the candidate as one `lk.transcription` text stream, final, with
`voxroom.speaker` "interviewer" and the meeting track as `lk.transcribed_track_id`.

Spoken answers (agent.copilot.voice) are off until the candidate sends {"speak": true} on
`voxroom.copilot.control`; the agent then publishes the track "copilot-voice", which only the
candidate may subscribe to, and says each answer as it is written. The attribute
`voxroom.copilot.speak` tells the state: "true", "false" or "unavailable" (no TTS here).
The mode and the rest come from the dispatch or room metadata (agent.transports.room_io reads
it); malformed JSON, an unknown mode or a key of the wrong type is logged and ignored (the
voice assistant runs).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.copilot.events import CopilotEvent, NotAQuestion, QuestionTranscript, Warm
from agent.copilot.voice import MAX_CONTROL_CHARS, SpokenAnswerSink, parse_control
from agent.events import event_json
from agent.protocol import (
    ATTR_AGENT_STATE,
    ATTR_ANSWER_FINAL,
    ATTR_ANSWER_ID,
    ATTR_ANSWER_STATUS,
    ATTR_BRIDGE_CANDIDATE,
    ATTR_CONTEXT_NAME,
    ATTR_DOCUMENTS_FIT,
    ATTR_QUESTION,
    ATTR_SPEAK,
    ATTR_SPEAKER,
    ATTR_WARM_PIECES,
    BRIDGE_IDENTITY_PREFIX,
    COPILOT_VOICE_TRACK,
    DOCUMENT_KEYS,
    KEY_CANDIDATE,
    KEY_MODE,
    MEETING_TRACK,
    SPEAKER_INTERVIEWER,
    TOPIC_CONTEXT,
    TOPIC_CONTEXT_STATUS,
    TOPIC_COPILOT,
    TOPIC_COPILOT_CONTROL,
    TOPIC_TRANSCRIPTION,
    transcription_attributes,
)
from agent.transports.room_io import (
    parse_metadata,
    push_frames,
    read_metadata,
    set_attributes,
    track_audio,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from livekit import rtc
    from livekit.rtc.room import EventTypes

    from agent.copilot.context.index import ContextIndex
    from agent.pipeline.playout import Playout
    from state_machine.options import CopilotOptions

log = logging.getLogger(__name__)

CONTEXT_DIR_ENV = "VOXROOM_CONTEXT_DIR"
_DOCUMENT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def is_bridge(participant: rtc.RemoteParticipant) -> bool:
    """Whether `participant` looks like a bridge, and so is never taken for the candidate. Not
    a reason to listen to it: see `bridges_for`."""
    return (
        ATTR_BRIDGE_CANDIDATE in participant.attributes
        or parse_metadata(participant.metadata).get(KEY_MODE) == "copilot"
        or participant.identity.startswith(BRIDGE_IDENTITY_PREFIX)
        or any(pub.name == MEETING_TRACK for pub in participant.track_publications.values())
    )


def bridges_for(participant: rtc.RemoteParticipant, candidate: str | None) -> bool:
    """Whether `participant` is the bridge of `candidate`: its token, made with the API secret,
    names the candidate in an attribute its grants do not let it change. A track's name, an
    identity or metadata prove nothing: a participant with any join token chooses the first,
    and the others depend on who makes the tokens."""
    return candidate is not None and participant.attributes.get(ATTR_BRIDGE_CANDIDATE) == candidate


def context_file(directory: str | None, name: object) -> Path | None:
    """The file `name` inside `directory`, or None (with a warning) when there is no
    directory or the name leaves it: metadata must not read arbitrary files of the worker."""
    if not directory or not isinstance(name, str) or not name:
        log.warning("context file %r ignored: $%s is not set", name, CONTEXT_DIR_ENV)
        return None
    root = Path(directory).resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        log.warning("context file %r ignored: not a file inside %s", name, root)
        return None
    return path


@functools.cache
def shared_embedder() -> Any:
    """The MiniLM embedder of this process, loaded once, on first use, and then shared."""
    from agent.adapters.embedder import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.load()
    return embedder


class LiveKitAnswerSink:
    """Answers as text streams to the candidate only."""

    def __init__(self, room: rtc.Room, candidate: str) -> None:
        self._room = room
        self._candidate = candidate
        self._writers: dict[int, rtc.TextStreamWriter] = {}

    async def open(self, answer_id: int, question: str) -> None:
        self._writers[answer_id] = await self._room.local_participant.stream_text(
            destination_identities=[self._candidate],
            topic=TOPIC_COPILOT,
            attributes={
                ATTR_ANSWER_ID: str(answer_id),
                ATTR_QUESTION: question,
                ATTR_ANSWER_FINAL: "false",
            },
        )

    async def write(self, answer_id: int, text: str) -> None:
        await self._writers[answer_id].write(text)

    async def close(self, answer_id: int, status: str) -> None:
        writer = self._writers.pop(answer_id, None)
        if writer is not None:
            await writer.aclose(attributes={ATTR_ANSWER_FINAL: "true", ATTR_ANSWER_STATUS: status})


class CopilotSession:
    """One interview: runs until the candidate leaves (or `aclose`)."""

    def __init__(
        self,
        room: rtc.Room,
        *,
        stt: Any,
        llm: Any,
        embedder: Any,
        tts: Any = None,
        job_metadata: str = "",
        options: CopilotOptions | None = None,
        context_dir: str | None = None,
        turn_detector: Any = None,
    ) -> None:
        self.room = room
        self._turn_detector = turn_detector
        self._stt, self._llm, self._embedder, self._tts = stt, llm, embedder, tts
        # requested_mode() has warned about bad metadata already.
        self._metadata = {
            **read_metadata(room.metadata, "room", warn=False),
            **read_metadata(job_metadata, "dispatch", warn=False),
        }
        self._options = options
        self._context_dir = context_dir
        self.candidate: str | None = None
        self.index: ContextIndex | None = None
        self.engine: Any = None
        # agent.adapters.llm.prefill.CopilotLlamaClient, for the bundled LLM.
        self._prefill: Any = None
        self.sink: Any = None  # LiveKitAnswerSink, or with a TTS the SpokenAnswerSink around it
        self._voice: tuple[rtc.AudioSource, Playout] | None = None  # once speech was turned on
        self._candidate_known = asyncio.Event()
        self._left = asyncio.Event()
        self._listeners: dict[str, asyncio.Task[None]] = {}  # by track sid
        self._meeting_sid = ""  # the meeting-audio track listened to last
        self._tasks: set[asyncio.Task[Any]] = set()
        self._handlers: list[tuple[EventTypes, Callable[..., Any]]] = [
            ("participant_connected", self._on_participant),
            ("participant_disconnected", self._on_participant_left),
            ("track_subscribed", self._on_track_subscribed),
            ("track_unsubscribed", self._on_track_unsubscribed),
            ("disconnected", self._on_disconnected),
        ]

    async def run(self) -> None:
        from agent.adapters.llm.prefill import llama_client_for
        from agent.copilot.context.index import ContextIndex
        from agent.copilot.engine import CopilotEngine

        room = self.room
        for event, handler in self._handlers:
            room.on(event, handler)
        room.register_text_stream_handler(TOPIC_CONTEXT, self._on_text_document)
        room.register_byte_stream_handler(TOPIC_CONTEXT, self._on_byte_document)
        room.register_text_stream_handler(TOPIC_COPILOT_CONTROL, self._on_control)
        try:
            self.index = ContextIndex(self._embedder)
            for p in room.remote_participants.values():
                self._on_participant(p)
            await self._wait(self._candidate_known)
            if self._left.is_set():
                return
            assert self.candidate is not None
            log.info("copilot for %s in %s", self.candidate, room.name)
            self.sink = LiveKitAnswerSink(room, self.candidate)
            if self._tts is not None:
                self.sink = SpokenAnswerSink(self.sink, self._tts)
            # The bundled llama.cpp server reads the question while it is asked, and answers
            # in a layout of its own (agent.adapters.llm.prefill).
            self._prefill = llama_client_for(self._llm)
            if self._prefill is not None:
                self._prefill.on_answer_read = lambda r: log.info(
                    "answer prompt: %d tokens cached, %d read in %.0f ms", r.cached, r.read, r.ms
                )
            self.engine = CopilotEngine(
                stt=self._stt,
                llm=self._prefill or self._llm,
                sink=self.sink,
                context=self.index,
                options=self._options,
                on_event=self._log_event,
                prefill=self._prefill,
                turn_detector=self._turn_detector,
            )
            await self.engine.start()
            self._spawn(self._load_metadata_documents())
            self._spawn(self.engine.warm())
            await set_attributes(
                room.local_participant,
                {
                    ATTR_AGENT_STATE: "listening",
                    ATTR_SPEAK: "false",
                    ATTR_WARM_PIECES: "0",
                    ATTR_DOCUMENTS_FIT: "true",
                },
            )
            for p in room.remote_participants.values():
                for pub in p.track_publications.values():
                    if pub.track is not None:
                        self._on_track_subscribed(pub.track, pub, p)
            await self._left.wait()
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        room = self.room
        for event, handler in self._handlers:
            room.off(event, handler)
        room.unregister_text_stream_handler(TOPIC_CONTEXT)
        room.unregister_byte_stream_handler(TOPIC_CONTEXT)
        room.unregister_text_stream_handler(TOPIC_COPILOT_CONTROL)
        tasks = [*self._listeners.values(), *self._tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._listeners.clear()
        if self.engine is not None:
            await self.engine.aclose()
            log.info("copilot session ended after %d answers", len(self.engine.answers))
        if self._prefill is not None:
            await self._prefill.aclose()
            self._prefill = None
        if isinstance(self.sink, SpokenAnswerSink):
            await self.sink.aclose()
        if self._voice is not None:
            source, playout = self._voice
            self._voice = None
            await playout.aclose()
            await source.aclose()
        if self.index is not None:
            self.index.close()
            self.index = None

    async def _wait(self, event: asyncio.Event) -> None:
        left = asyncio.ensure_future(self._left.wait())
        wanted = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait({left, wanted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
            wanted.cancel()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro, name=coro.__qualname__)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (e := task.exception()) is not None:
            log.warning("%s failed: %s: %s", task.get_name(), type(e).__name__, e)

    # ---- participants ---------------------------------------------------------------------

    def _on_participant(self, p: rtc.RemoteParticipant) -> None:
        from livekit import rtc

        if self.candidate is not None or p.kind != rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD:
            return
        named = self._metadata.get(KEY_CANDIDATE)
        if (named and p.identity == named) or (not named and not is_bridge(p)):
            self.candidate = p.identity
            self._candidate_known.set()

    def _on_disconnected(self, *_: object) -> None:
        self._left.set()

    def _on_participant_left(self, p: rtc.RemoteParticipant) -> None:
        if p.identity == self.candidate:
            self._left.set()

    # ---- the meeting audio ----------------------------------------------------------------

    def _on_track_subscribed(
        self, track: rtc.Track, pub: rtc.RemoteTrackPublication, p: rtc.RemoteParticipant
    ) -> None:
        if self.engine is None or pub.name != MEETING_TRACK:
            return
        if not bridges_for(p, self.candidate):
            # Anyone may publish a track of that name: not a word of it reaches the engine.
            log.warning(
                "%s's %s ignored: not the bridge of %s (its token must name the "
                "candidate: voxroom bridge --candidate)",
                p.identity,
                MEETING_TRACK,
                self.candidate,
            )
            pub.set_subscribed(False)
            return
        if pub.sid not in self._listeners:
            log.info("listening to %s's %s", p.identity, MEETING_TRACK)
            self._meeting_sid = pub.sid
            self._listeners[pub.sid] = asyncio.create_task(self._listen(track))

    def _on_track_unsubscribed(
        self, _track: rtc.Track, pub: rtc.RemoteTrackPublication, _p: rtc.RemoteParticipant
    ) -> None:
        task = self._listeners.pop(pub.sid, None)
        if task is not None:
            task.cancel()

    async def _listen(self, track: rtc.Track) -> None:
        from agent.audio.frames import FrameGuard

        await push_frames(track_audio(track), FrameGuard(), self.engine.push_frame)

    # ---- documents ------------------------------------------------------------------------

    async def _load_metadata_documents(self) -> None:
        from agent.copilot.context.index import ContextError, document_text

        directory = self._context_dir or os.environ.get(CONTEXT_DIR_ENV)
        for key, name in DOCUMENT_KEYS.items():
            if key not in self._metadata:
                continue
            path = context_file(directory, self._metadata[key])
            if path is None:
                continue
            try:
                data = await asyncio.to_thread(path.read_bytes)
                await self._index_document(name, document_text(data))
            except (OSError, ContextError) as e:
                log.warning("context file %s refused: %s", path, e)

    def _on_text_document(self, reader: rtc.TextStreamReader, sender: str) -> None:
        self._spawn(self._receive_document(reader, sender, binary=False))

    def _on_byte_document(self, reader: rtc.ByteStreamReader, sender: str) -> None:
        self._spawn(self._receive_document(reader, sender, binary=True))

    async def _receive_document(self, reader: Any, sender: str, *, binary: bool) -> None:
        from agent.copilot.context.index import MAX_DOCUMENT_BYTES, ContextError, document_text

        attrs = reader.info.attributes or {}
        name = attrs.get(ATTR_CONTEXT_NAME, "context")
        if sender != self.candidate:
            reader.close()
            log.warning("document from %s ignored: only the candidate may send documents", sender)
            await self._acknowledge(name, error="only the candidate may send documents", to=sender)
            return
        if not _DOCUMENT_NAME.match(name):
            reader.close()
            await self._acknowledge(name, error="the name must be 1-32 of a-z, 0-9, _")
            return
        received = bytearray()
        try:
            async for chunk in reader:
                received += chunk if binary else chunk.encode()
                if len(received) > MAX_DOCUMENT_BYTES:
                    raise ContextError(f"document is over the limit of {MAX_DOCUMENT_BYTES} bytes")
            await self._index_document(name, document_text(bytes(received)))
        except ContextError as e:
            reader.close()
            await self._acknowledge(name, error=str(e))
        except Exception as e:  # a broken stream: the session goes on
            log.warning("receiving document %s failed: %s", name, e)
            await self._acknowledge(name, error="the upload failed")

    async def _index_document(self, name: str, text: str) -> None:
        assert self.index is not None
        pieces = await self.index.add_document_async(name, text)
        log.info("indexed %s: %d pieces", name, pieces)
        await self._acknowledge(name, pieces=pieces)
        if self.engine is not None:
            self._spawn(self.engine.warm())  # the documents are the prompt's prefix

    async def _acknowledge(
        self, name: str, *, pieces: int = 0, error: str = "", to: str | None = None
    ) -> None:
        """The receipt for a document, to its sender: `to`, or else the candidate."""
        to = to or self.candidate
        if to is None:
            return
        status = {"name": name, "status": "refused" if error else "indexed", "pieces": pieces}
        if error:
            status["error"] = error
        try:
            await self.room.local_participant.send_text(
                json.dumps(status), destination_identities=[to], topic=TOPIC_CONTEXT_STATUS
            )
        except Exception as e:  # the candidate may have left meanwhile
            log.debug("context status not sent: %s", e)

    # ---- spoken answers -------------------------------------------------------------------

    def _on_control(self, reader: rtc.TextStreamReader, sender: str) -> None:
        self._spawn(self._receive_control(reader, sender))

    async def _receive_control(self, reader: rtc.TextStreamReader, sender: str) -> None:
        if sender != self.candidate:
            log.warning("copilot control from %s ignored: only the candidate steers it", sender)
            return
        text = ""
        async for chunk in reader:
            text += chunk
            if len(text) > MAX_CONTROL_CHARS:
                break
        speak = parse_control(text)
        if speak is None:
            log.warning('copilot control ignored: expected {"speak": true|false}, got %.80r', text)
            return
        await self.set_speech(speak)

    async def set_speech(self, on: bool) -> None:
        """Speak the answers from the next one on (Piper, on the track "copilot-voice" that only
        the candidate may subscribe to), or stop speaking now."""
        lp = self.room.local_participant
        if not isinstance(self.sink, SpokenAnswerSink):
            log.warning("spoken answers asked for, but this worker has no TTS")
            await set_attributes(lp, {ATTR_SPEAK: "unavailable"})
            return
        if on and self._voice is None:
            self._voice = await self._publish_voice()
        await self.sink.speak_through(self._voice[1] if on and self._voice else None)
        await set_attributes(lp, {ATTR_SPEAK: "true" if on else "false"})
        log.info("spoken answers %s", "on" if on else "off")

    async def _publish_voice(self) -> tuple[rtc.AudioSource, Playout]:
        from livekit import rtc

        from agent.pipeline.playout import Playout
        from agent.transports.room_io import OUTPUT_RATE, SOURCE_QUEUE_MS, LiveKitAudioSink

        assert self.candidate is not None
        lp = self.room.local_participant
        # Before publishing: no one else may subscribe to the agent's tracks, even briefly.
        lp.set_track_subscription_permissions(
            allow_all_participants=False,
            participant_permissions=[
                rtc.ParticipantTrackPermission(participant_identity=self.candidate, allow_all=True)
            ],
        )
        source = rtc.AudioSource(OUTPUT_RATE, 1, queue_size_ms=SOURCE_QUEUE_MS)
        track = rtc.LocalAudioTrack.create_audio_track(COPILOT_VOICE_TRACK, source)
        await lp.publish_track(
            track, rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
        )
        playout = Playout(LiveKitAudioSink(source))
        playout.start()
        return source, playout

    # ---- the rest -------------------------------------------------------------------------

    def _log_event(self, event: CopilotEvent) -> None:
        # The end-of-turn scores say why a question waited longer than its 0.4 s.
        if event.kind in (
            "answer_done",
            "not_a_question",
            "answer_cancelled",
            "warm",
            "turn_score",
        ):
            # never the interviewer's words: logs are not a transcript store
            fields = {k: v for k, v in event_json(event).items() if k not in ("type", "text")}
            log.info("%s %s", event.kind, fields)
        match event:
            case Warm(pieces=pieces, documents_fit=fit):
                self._spawn(
                    set_attributes(
                        self.room.local_participant,
                        {
                            ATTR_WARM_PIECES: str(pieces),
                            ATTR_DOCUMENTS_FIT: "true" if fit else "false",
                        },
                    )
                )
            case QuestionTranscript(text=text, utterance_id=uid, heard=heard):
                log.info("question heard: %d words", len(text.split()))
                self._spawn(self._send_heard(uid, heard))
            case NotAQuestion(utterance_id=uid, text=text) if text:
                self._spawn(self._send_heard(uid, text))

    async def _send_heard(self, utterance_id: int, text: str) -> None:
        """What the copilot heard the interviewer say, one final transcript per utterance (a
        question, or a statement it answered nothing to), to the candidate alone: the page's
        transcript panel shows it."""
        if self.candidate is None:
            return
        try:
            await self.room.local_participant.send_text(
                text,
                topic=TOPIC_TRANSCRIPTION,
                destination_identities=[self.candidate],
                attributes={
                    **transcription_attributes(
                        f"interviewer-{utterance_id}", final=True, track_id=self._meeting_sid
                    ),
                    ATTR_SPEAKER: SPEAKER_INTERVIEWER,
                },
            )
        except Exception as e:  # the candidate may have left meanwhile
            log.debug("transcript not sent: %s", e)


async def run_copilot_session(
    room: rtc.Room,
    *,
    job_metadata: str,
    stt: Any,
    llm: Any,
    embedder: Any = None,
    tts: Any = None,
    options: CopilotOptions | None = None,
    turn_detector: Any = None,
) -> CopilotSession:
    """The worker's entry point for copilot mode: runs until the candidate leaves."""
    if embedder is None:
        embedder = await asyncio.to_thread(shared_embedder)
    session = CopilotSession(
        room,
        stt=stt,
        llm=llm,
        embedder=embedder,
        tts=tts,
        job_metadata=job_metadata,
        options=options,
        turn_detector=turn_detector,
    )
    await session.run()
    return session
