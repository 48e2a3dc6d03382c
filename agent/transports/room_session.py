"""One conversation in a LiveKit room: the user's microphone and typed messages (`lk.chat`)
into the turn engine, the agent's voice out as a published track, its state as the
`lk.agent.state` attribute and both sides' transcripts on the `lk.transcription` text-stream
topic (LiveKit's client conventions). A phone caller (livekit-sip's participant) is heard on
its one audio track, whatever its source, and its keypad digits are typed turns
(agent/transports/keypad.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from agent.events import Turn, VoiceEvent, event_json
from agent.protocol import AGENT_VOICE_TRACK, TOPIC_CHAT
from agent.timeouts import finish_within
from agent.transports.room_io import (
    OUTPUT_RATE,
    SOURCE_QUEUE_MS,
    LiveKitAudioSink,
    RoomPublisher,
    listen_to_participant,
)
from agent.transports.typed_input import TypedInput
from state_machine.options import TurnOptions

if TYPE_CHECKING:
    from livekit import rtc

    from agent.adapters.tools.toolbox import Toolbox
    from agent.store.conversation_log import RoomMemory
    from agent.store.transcripts import TurnStore
    from agent.transports.phone_call import PhoneCall

log = logging.getLogger(__name__)

PERSISTED_HISTORY_TURNS = 20  # earlier turns of the room reloaded after a re-dispatch


class TypedMessages:
    """The `lk.chat` text streams of the room: the served user's messages, bounded in length
    and rate (agent.transports.typed_input), go to `push` as typed turns; a refused one gets a
    reply on `lk.chat`. Anyone else's are ignored: they never steer the agent."""

    def __init__(
        self,
        room: rtc.Room,
        user_identity: str,
        push: Callable[[str], None],
        *,
        limits: TypedInput | None = None,
    ) -> None:
        self._room = room
        self._user = user_identity
        self._push = push
        self._limits = limits or TypedInput()
        self._tasks: set[asyncio.Task[None]] = set()
        self._ignored: set[str] = set()  # senders already logged: a flood logs one line

    def start(self) -> None:
        self._room.register_text_stream_handler(TOPIC_CHAT, self._on_stream)

    async def aclose(self) -> None:
        self._room.unregister_text_stream_handler(TOPIC_CHAT)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _on_stream(self, reader: rtc.TextStreamReader, sender: str) -> None:
        if sender != self._user:
            reader.close()
            if sender not in self._ignored:
                self._ignored.add(sender)
                log.warning(
                    "typed message from %s ignored: the agent serves %s only", sender, self._user
                )
            return
        refusal = self._limits.admit(sender)
        if refusal is not None:
            reader.close()
            log.warning("typed message from %s refused: too many messages", sender)
            self._spawn(self._reply(sender, refusal))
            return
        self._spawn(self._read(reader, sender))

    async def _read(self, reader: rtc.TextStreamReader, sender: str) -> None:
        message = self._limits.message()

        async def read_chunks() -> None:
            async for chunk in reader:
                if not message.add(chunk):
                    return  # over the bound: the rest is never read

        reading = asyncio.ensure_future(read_chunks())
        try:
            if not await finish_within(reading, self._limits.read_timeout_s):
                log.warning(
                    "typed message from %s dropped: not complete after %.0f s",
                    sender,
                    self._limits.read_timeout_s,
                )
                return
            reading.result()
        except Exception as e:  # the sender left mid-stream, or the stream was malformed
            log.warning("typed message from %s lost: %s: %s", sender, type(e).__name__, e)
            return
        finally:
            reader.close()  # a no-op for a stream that ended
        if message.over:
            log.warning(
                "typed message from %s refused: over %d characters", sender, message.max_chars
            )
            await self._reply(sender, message.refusal())
            return
        if text := message.text.strip():
            log.info("typed message from %s: %d characters", sender, len(text))
            self._push(text)

    async def _reply(self, to: str, text: str) -> None:
        try:
            await self._room.local_participant.send_text(
                text, topic=TOPIC_CHAT, destination_identities=[to]
            )
        except Exception as e:  # the sender may have left meanwhile
            log.info("reply to %s not sent: %s", to, e)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro, name="typed-message")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def run_room_session(
    room: rtc.Room,
    participant: rtc.RemoteParticipant,
    *,
    stt: Any,
    tts: Any,
    llm: Any,
    system_prompt: str,
    store: TurnStore | None = None,
    memory: RoomMemory | None = None,
    stt_partials: str = "listening",
    barge_in: str = "duck",
    turn_detector: Any = None,
    toolbox: Toolbox | None = None,
    greeting: str = "",
    phone: PhoneCall | None = None,
    keypad: str = "text",
) -> None:
    """Talk with `participant` until they leave, the room closes, or a tool ends the
    conversation (once its last reply was heard). With a `store`, every finished turn is
    committed durably and the room's earlier turns are the history; a `memory` keeps the
    history and the reply being spoken for the room's next agent
    (agent/store/conversation_log.py). `toolbox`: the tools the agent may call; `greeting`:
    what it says first in a new conversation (not to a room whose history it took over).
    `phone`: the participant's call when it is a phone caller: its number is kept with the
    turns, its keypad digits are typed turns (`keypad` "text") or ignored ("ignore"),
    ending the conversation hangs it up, and its narrowband speech is heard by the STT's
    phone-line tuning (agent/adapters/stt/phone_band.py)."""
    from livekit import rtc

    from agent.adapters.llm.history import ChatHistory
    from agent.adapters.tools.base import ToolContext
    from agent.ops.metrics import MetricsRecorder
    from agent.store.conversation_log import ConversationLog
    from agent.transports.keypad import KeypadInput
    from agent.voice.engine import TurnEngine

    source = rtc.AudioSource(OUTPUT_RATE, 1, queue_size_ms=SOURCE_QUEUE_MS)
    track = rtc.LocalAudioTrack.create_audio_track(AGENT_VOICE_TRACK, source)
    options = rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
    publication = await room.local_participant.publish_track(track, options)

    publisher = RoomPublisher(room, participant.identity)
    publisher.agent_track_id = publication.sid
    publisher.start()
    history = ChatHistory(system_prompt)
    session_id = f"{room.name}/{participant.identity}/{int(time.time())}"
    recorder = MetricsRecorder(session_id)
    turns = ConversationLog(
        room.name,
        session_id,
        history,
        store=store,
        memory=memory,
        caller=phone.number if phone else "",
    )
    for turn in await turns.start(PERSISTED_HISTORY_TURNS):
        history.add_turn(turn)
    left = asyncio.Event()
    ending = asyncio.Event()  # a tool ended the conversation: leave once its turn is over

    def end_conversation(reason: str) -> None:
        log.info("session with %s ends: %s", participant.identity, reason or "the agent ended it")
        ending.set()

    def on_event(event: VoiceEvent) -> None:
        if isinstance(event, Turn) and ending.is_set():
            left.set()  # the reply that ended it (the goodbye) was heard
        publisher.on_event(event)
        as_json = event_json(event)  # the logs and the store keep it as JSON
        recorder.on_event(as_json)
        turns.on_event(as_json)

    engine = TurnEngine(
        stt=stt,
        llm=llm,
        tts=tts,
        sink=LiveKitAudioSink(source),
        history=history,
        on_event=on_event,
        partials=stt_partials,
        options=TurnOptions(duck=barge_in == "duck"),
        turn_detector=turn_detector,
        toolbox=toolbox,
        tool_context=ToolContext(
            room.name, participant.identity, dict(participant.attributes), end_conversation, phone
        ),
        phone_line=phone is not None,
    )
    await engine.start()
    recorder.start()
    if greeting and not history.turns:
        engine.greet(greeting)
    typed = TypedMessages(room, participant.identity, engine.push_text)
    typed.start()
    digits = KeypadInput(room, participant.identity, engine.push_text if keypad == "text" else None)
    if phone is not None:
        digits.start()

    def on_disconnected(p: rtc.RemoteParticipant) -> None:
        if p.identity == participant.identity:
            left.set()

    room.on("participant_disconnected", on_disconnected)
    listen = asyncio.create_task(
        listen_to_participant(participant, engine.push_frame, publisher), name="listen"
    )
    try:
        await left.wait()
    finally:
        listen.cancel()
        await asyncio.gather(listen, return_exceptions=True)
        digits.close()
        await typed.aclose()
        await engine.aclose()
        await recorder.aclose()
        await turns.aclose()  # every finished turn is stored before we go
        await publisher.aclose()
        await source.aclose()
        if phone is not None:
            await _end_call(phone, hang_up=ending.is_set())
        log.info("session with %s ended after %d turns", participant.identity, len(engine.turns))


async def _end_call(phone: PhoneCall, *, hang_up: bool) -> None:
    """The agent ended the conversation: a caller left on the line would hear silence until
    the room closed, so the call is hung up. A session that ends otherwise (the caller hung up,
    the worker stops and another agent takes the room over) leaves the call as it is."""
    try:
        if hang_up:
            await phone.hang_up()
    except Exception as e:  # the caller may have hung up meanwhile
        log.info("hanging up on %s: %s: %s", phone.identity, type(e).__name__, e)
    finally:
        await phone.aclose()
