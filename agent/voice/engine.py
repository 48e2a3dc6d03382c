"""The turn engine: one conversation's audio in, the agent's voice out.

It runs the pure state machine (`state_machine`) against real engines: webrtcvad on every
20 ms frame, a streaming STT (Whisper or Deepgram) that hears every frame of an utterance and
gives partials while the user speaks and a candidate transcript at each pause (`flush()`), the
streamed LLM, the TTS chunker and Piper, and the playout. Partial decoding is paused while the
agent thinks or speaks, so it never competes with the LLM and TTS for the CPU. The machine
decides; this module executes the actions, in order, and reports what happened as events
(agent.events).

Nothing here blocks the event loop: transcription and synthesis run in the engines' worker
threads, and `push_frame` only does the VAD (microseconds) and bookkeeping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import numpy as np

from agent.adapters.llm.history import ChatHistory
from agent.adapters.stt.phone_band import for_phone_line, phone_line_vad
from agent.adapters.tools.base import ToolContext
from agent.adapters.tools.toolbox import Toolbox
from agent.adapters.turn_detector import TurnDetector
from agent.audio.sinks import AudioSink
from agent.audio.vad import VoiceActivityDetector
from agent.engines import (
    LanguageModel,
    SpeechToText,
    STTStream,
    TextToSpeech,
)
from agent.events import (
    AudioStart,
    PlaybackStopped,
    ReplyCancelled,
    ReplyStarted,
    StateChanged,
    TtsChunk,
    Turn,
    TurnRetracted,
    VoiceEvent,
)
from agent.ops.memory_trim import PROCESS_TRIMMER
from agent.pipeline.listener import engine_listener, tick_forever
from agent.pipeline.playout import Playout
from agent.pipeline.reply import ReplyPipeline
from agent.pipeline.tool_round import FILLER_TEXTS, ToolSession
from agent.voice.turn_metrics import TurnRecord
from state_machine import actions as A
from state_machine import events as E
from state_machine.machine import CANNED_APOLOGY, ConversationStateMachine
from state_machine.options import TurnOptions
from state_machine.states import AgentState
from tts.chunker import make_chunker

log = logging.getLogger(__name__)

FILLER_TEXT = "Let me think."

EventSink = Callable[[VoiceEvent], None]


class TurnEngine:
    def __init__(
        self,
        *,
        stt: SpeechToText,
        llm: LanguageModel,
        tts: TextToSpeech,
        sink: AudioSink,
        history: ChatHistory,
        options: TurnOptions | None = None,
        on_event: EventSink | None = None,
        clock: Callable[[], float] = time.monotonic,
        phone_line: bool = False,
        chunker_kind: str = "lookahead",
        partials: str = "listening",
        turn_detector: TurnDetector | None = None,
        toolbox: Toolbox | None = None,
        tool_context: ToolContext | None = None,
    ) -> None:
        if phone_line:  # a phone caller (agent/adapters/stt/phone_band.py)
            stt, vad = for_phone_line(stt), phone_line_vad()
        else:
            vad = VoiceActivityDetector()
        options = options or TurnOptions()
        if turn_detector is not None:
            options = options.scored()
        self.options = options
        self.machine = ConversationStateMachine(self.options)
        self._emit: EventSink = on_event or (lambda _e: None)
        self.history = history
        self.turns: list[TurnRecord] = []
        self._stt, self._llm, self._tts = stt, llm, tts
        self._clock = clock
        self._listener = engine_listener(
            self.options,
            vad,
            turn_detector,
            self._on_turn_score,
            self._emit,
            clock=clock,
            on_read_ahead=self._on_partial_read,
        )
        self._chunker_kind = chunker_kind
        self._playout = Playout(
            sink,
            clock=clock,
            on_reply_started=self._on_reply_started,
            on_reply_done=self._on_reply_done,
            on_progress=self._on_progress,
        )
        self._stream: STTStream | None = None
        self._partials_task: asyncio.Task[None] | None = None
        self._partials = partials  # agent.config.STTSettings.partials
        self._replies: dict[int, ReplyPipeline] = {}
        self._cancelled: set[asyncio.Task[None]] = set()
        self._turn: TurnRecord | None = None  # the turn being answered
        self._speech_end: float | None = None
        self._filler: np.ndarray | None = None
        self._canned: dict[str, np.ndarray] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._toolbox = toolbox
        self._tool_context = tool_context or ToolContext(room="", user_identity="")
        self._tools: ToolSession | None = None  # once its fillers are ready

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Synthesize the filler ahead of time and start the playout and the timer."""
        self._filler = await self._tts.synthesize(FILLER_TEXT)
        try:  # ready before it is needed: the TTS may be what failed when it is
            self._canned[CANNED_APOLOGY] = await self._tts.synthesize(CANNED_APOLOGY)
        except Exception as e:
            log.warning("cannot prepare the apology: %s: %s", type(e).__name__, e)
        if self._toolbox:
            fillers = [(text, await self._tts.synthesize(text)) for text in FILLER_TEXTS]
            self._tools = ToolSession(
                self._toolbox, self._tool_context, fillers, self._tts.sample_rate
            )
        self._stream = self._stt.stream()
        self._listener.start(self._stream)
        self._stream.set_paused(self._partials == "off")
        self._partials_task = asyncio.create_task(
            self._listener.read_partials(self._on_partial), name="stt-partials"
        )
        self._playout.start()
        self._ticker = asyncio.create_task(
            tick_forever(
                self.options.frame_s, self._clock, lambda now: self._apply(self.machine.tick(now))
            ),
            name="turn-timer",
        )
        self._emit(StateChanged(self._clock(), self.machine.state))

    async def aclose(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        await self._listener.aclose()
        if self._partials_task is not None:
            self._partials_task.cancel()
            await asyncio.gather(self._partials_task, return_exceptions=True)
        for rid in list(self._replies):
            # A reply cut off by the end of the session is recorded as heard so far, as a
            # barge-in would be: its turn stays in the history and the metrics.
            self._cancel_reply(rid, "session closed")
        await asyncio.gather(*self._cancelled, return_exceptions=True)
        await self._playout.aclose()

    def greet(self, text: str) -> None:
        """Say `text` before the user speaks (a profile's greeting); the LLM sees it as the
        agent's first message."""
        actions = self.machine.say_first(text, self._clock())
        if actions:
            self.history.add_assistant(text)
            self._apply(actions)

    # ---- input ----------------------------------------------------------------------------

    def push_frame(self, pcm: np.ndarray) -> None:
        """One 20 ms frame of user audio (int16, 16 kHz mono, FRAME_SAMPLES long)."""
        voiced, now = self._listener.frame(pcm)
        self._apply(self.machine.on_frame(voiced, now))

    def push_text(self, text: str) -> None:
        """A message the user typed, a user turn like a spoken one (bounded by the caller:
        agent.transports.typed_input)."""
        self._apply(self.machine.on_text(text, self._clock()))

    # ---- actions --------------------------------------------------------------------------

    def _apply(self, actions: list[A.Action]) -> None:
        for action in actions:
            self._execute(action)

    def _execute(self, a: A.Action) -> None:
        now = self._clock()
        match a:
            case A.SetState(state=state):
                self._emit(StateChanged(now, state))
                if self._stream is not None and self._partials == "listening":
                    self._stream.set_paused(state is not AgentState.LISTENING)
                if state is AgentState.LISTENING and self._turn is not None:
                    self._close_turn(interrupted=False)
            case A.OpenUtterance(utterance_id=uid, pre_roll_s=pre_roll_s):
                self._listener.open(uid, self.options.frames(pre_roll_s))
            case A.DiscardUtterance(utterance_id=uid):
                self._listener.close(uid)
            case A.RequestCandidate(utterance_id=uid, turn=turn):
                self._listener.request_candidate(uid, self._on_candidate, hear_end=turn)
            case A.ScoreTurn(utterance_id=uid, text=text):
                self._listener.score(uid, text)
            case A.StartReply(reply_id=rid, user_text=text, speculative=spec):
                self._start_reply(rid, text, spec)
            case A.ConfirmReply(reply_id=rid):
                self._playout.confirm(rid)
                if (reply := self._replies.get(rid)) is not None:
                    reply.confirm()
            case A.CancelReply(reply_id=rid, reason=reason):
                self._cancel_reply(rid, reason)
            case A.CommitUserTurn(text=text, utterance_id=uid):
                self.history.add_user(text)
                speech_end = now  # typed (uid None): the turn ended when it came
                if uid is not None:
                    self._listener.close()  # the candidate that ended it was its transcript
                    speech_end = self._speech_end or now
                self._turn = TurnRecord(user_text=text, speech_end=speech_end, final_at=now)
                reply = self._current_reply()
                if reply is not None:
                    self._turn.reply = reply
            case A.RetractUserTurn(text=text):
                self.history.remove_last_user(text)
                self._turn = None
                self._emit(TurnRetracted(now))
            case A.PausePlayback():
                self._playout.pause()
            case A.DuckPlayback():
                self._playout.duck()
            case A.ResumePlayback():
                self._playout.resume()
            case A.CommitBargeIn():
                # CancelReply, just before, closed the turn with the heard text.
                pass
            case A.PlayFiller():
                if self._filler is not None:
                    self._playout.play_filler(self._filler)
            case A.PlayCanned(reply_id=rid, text=text):
                asyncio.get_running_loop().create_task(self._play_canned(rid, text))
            case A.DropCandidate() | A.ShowReply():  # the copilot's: the turn machine never asks
                pass
            case E.SpeechEnd(t=last_voiced):
                self._speech_end = last_voiced  # the turn's latencies count from it
                self._emit(a)
            case _:  # a notice: an event, dated by the machine, reported as it is
                self._emit(a)

    # ---- transcription --------------------------------------------------------------------

    def _on_candidate(self, uid: int, text: str, covered_until: float, failed: bool) -> None:
        self._apply(
            self.machine.on_candidate(uid, text, covered_until, self._clock(), failed=failed)
        )

    def _on_turn_score(self, uid: int, text: str, score: float | None) -> None:
        self._apply(self.machine.on_turn_score(uid, text, score, self._clock()))

    def _on_partial(self, text: str) -> None:
        """A partial: one that reads complete starts the answer, unheard."""
        self._emit(E.Transcript(self._clock(), text, final=False))
        uid = self._listener.utterance_id
        if uid is not None:
            self._apply(self.machine.on_partial(uid, text, self._clock()))

    def _on_partial_read(self, text: str, score: float) -> None:
        """The end-of-turn model's reading of a partial: P(complete) of its words."""
        uid = self._listener.utterance_id
        if uid is not None:
            self._apply(self.machine.on_partial_read(uid, text, score, self._clock()))

    # ---- replies --------------------------------------------------------------------------

    def _start_reply(self, rid: int, user_text: str, speculative: bool) -> None:
        reply = ReplyPipeline(
            rid,
            self.history.messages(pending_user=user_text),
            llm=self._llm,
            tts=self._tts,
            playout=self._playout,
            chunker=make_chunker(self._chunker_kind),
            on_event=self._emit,
            on_failed=self._on_reply_failed,
            clock=self._clock,
            tools=self._tools,
            on_progress=self._on_progress,
        )
        self._replies[rid] = reply
        reply.start()
        self._emit(ReplyStarted(self._clock(), rid, speculative))

    def _current_reply(self) -> ReplyPipeline | None:
        return max(self._replies.values(), key=lambda r: r.reply_id, default=None)

    def _cancel_reply(self, rid: int, reason: str) -> None:
        reply = self._replies.pop(rid, None)
        audio = self._playout.cancel(rid)
        if reply is not None:
            task = asyncio.get_running_loop().create_task(reply.cancel())
            self._cancelled.add(task)
            task.add_done_callback(self._cancelled.discard)
        self._emit(ReplyCancelled(self._clock(), rid, reason))
        turn = self._turn
        if turn is not None and turn.reply is reply and reply is not None:
            heard = audio.heard_text() if audio is not None and audio.started else ""
            self._emit(PlaybackStopped(self._clock(), heard))
            self._close_turn(interrupted=True, heard_text=heard, agent_text=reply.text)

    def _on_reply_started(self, rid: int, at: float) -> None:
        if (
            self._turn is not None
            and self._turn.reply is not None
            and self._turn.reply.reply_id == rid
        ):
            self._turn.audio_start = at
        self._emit(AudioStart(at, rid))
        self._apply(self.machine.on_reply_audio_started(rid, self._clock()))

    def _on_progress(self, rid: int) -> None:
        self.machine.on_reply_progress(rid, self._clock())

    def _on_reply_done(self, rid: int) -> None:
        self._replies.pop(rid, None)
        self._apply(self.machine.on_reply_done(rid, self._clock()))

    def _on_reply_failed(self, rid: int, reason: str) -> None:
        self._apply(self.machine.on_reply_failed(rid, self._clock(), reason))

    async def _play_canned(self, rid: int, text: str) -> None:
        pcm = self._canned.get(text)
        if pcm is None:
            try:
                pcm = self._canned[text] = await self._tts.synthesize(text)
            except Exception as e:  # nothing can be said: back to listening, not stuck
                log.warning("cannot say %r: %s: %s", text, type(e).__name__, e)
                self._apply(self.machine.on_reply_done(rid, self._clock()))
                return
        self._emit(TtsChunk(self._clock(), text, rid))
        self._playout.begin_reply(rid)
        self._playout.append(rid, text, pcm)
        self._playout.confirm(rid)
        self._playout.finish(rid)

    # ---- turn records ---------------------------------------------------------------------

    def _close_turn(
        self, *, interrupted: bool, heard_text: str | None = None, agent_text: str | None = None
    ) -> None:
        turn, self._turn = self._turn, None
        if turn is None:
            return
        reply = turn.reply
        if agent_text is None:
            agent_text = reply.text if reply is not None else ""
        if heard_text is None:  # it played to the end: all of what it said
            heard_text = " ".join(reply.spoken) if reply is not None else ""
        turn.finish(agent_text=agent_text.strip(), heard_text=heard_text, interrupted=interrupted)
        self.history.add_tool_messages(turn.tool_messages)
        self.history.add_assistant(turn.heard_text)
        self.turns.append(turn)
        self._emit(Turn(self._clock(), **turn.as_event()))
        PROCESS_TRIMMER.trim_soon()  # what the turn freed goes back to the OS

    @property
    def state(self) -> AgentState:
        return self.machine.state

    @property
    def idle(self) -> bool:
        """Nobody is talking and nothing is on its way: no utterance, reply or audio."""
        return (
            self.machine.state is AgentState.LISTENING
            and not self._listener.hearing
            and not self._replies
            and self._playout.idle
        )
