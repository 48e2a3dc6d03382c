"""The audio front end the voice agent and the copilot share: each 20 ms frame is checked,
voiced or not by the VAD, and kept for the pre-roll; while an utterance is open its frames go
to the STT stream and to the end-of-turn scorer, and a candidate transcript is the stream's
`flush()` at a pause. The engine's endpointing core decides when an utterance opens, is
transcribed, scored and closed; this module does it.

Nothing here blocks: the VAD is microseconds a frame, the decode runs in the STT's threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

import numpy as np

from agent.adapters.stt.guard import GuardedSTTStream
from agent.adapters.turn_detector import ScoreCallback, TurnDetector, TurnScorer
from agent.engines import FRAME_SAMPLES, INPUT_RATE, STTStream
from agent.events import TurnScore
from state_machine.options import ListenOptions

log = logging.getLogger(__name__)

# What a candidate transcript is handed on as: the utterance's id, the text, the time of the
# last frame it covers, and whether the STT failed (no words, though some were said).
CandidateCallback = Callable[[int, str, float, bool], None]


async def tick_forever(
    period_s: float, clock: Callable[[], float], tick: Callable[[float], None]
) -> None:
    """`tick(now)` every `period_s`, for an input that goes silent or is muted (its frames
    drive the endpointing otherwise). A tick that the event loop runs more than a period late
    is skipped, once: the frames held up by the same stall are queued behind it, and judged
    before them, the stall would read as the speaker's silence."""
    skipped = False
    while True:
        due = clock() + period_s
        await asyncio.sleep(period_s)
        now = clock()
        if now - due > period_s and not skipped:
            skipped = True
            continue
        skipped = False
        tick(now)


class VoiceDetector(Protocol):
    def is_speech(self, pcm: np.ndarray) -> bool: ...


class Listener:
    def __init__(
        self,
        *,
        vad: VoiceDetector,
        keep_frames: int,
        clock: Callable[[], float],
        scorer: TurnScorer | None = None,
        end_quiet_s: float = 0.0,
    ) -> None:
        self._vad = vad
        self._end_quiet_s = end_quiet_s  # quiet added to the end the scorer reads early
        self._recent: deque[np.ndarray] = deque(maxlen=keep_frames)  # for the pre-roll
        self._clock = clock
        self.scorer = scorer
        self.stream: STTStream | None = None
        self._guard: GuardedSTTStream | None = None  # the stream's push()/discard()
        self.utterance_id: int | None = None  # the open utterance, whose frames are heard
        self.heard_until = 0.0  # when its last frame was pushed
        self._candidate: asyncio.Task[None] | None = None

    def start(self, stream: STTStream) -> None:
        self.stream = stream
        self._guard = GuardedSTTStream(stream)

    async def aclose(self) -> None:
        if self._candidate is not None:
            self._candidate.cancel()
            await asyncio.gather(self._candidate, return_exceptions=True)
        if self.scorer is not None:
            await self.scorer.aclose()
        if self.stream is not None:
            await self.stream.aclose()

    @property
    def hearing(self) -> bool:
        return self.utterance_id is not None

    def frame(self, pcm: np.ndarray) -> tuple[bool, float]:
        """One frame of the speaker (int16, 16 kHz mono, FRAME_SAMPLES long): whether it is
        voiced, and its time."""
        if pcm.dtype != np.int16 or pcm.shape != (FRAME_SAMPLES,):
            raise ValueError(
                f"expected {FRAME_SAMPLES} int16 samples at {INPUT_RATE} Hz, got "
                f"{pcm.dtype} {pcm.shape}"
            )
        now = self._clock()
        self._recent.append(pcm)
        if self.hearing:
            self._push(pcm)
            self.heard_until = now
        return self._vad.is_speech(pcm), now

    def open(self, utterance_id: int, pre_roll_frames: int) -> None:
        """An utterance starts: its last `pre_roll_frames` frames (this one included) go first,
        so its first syllable, said before the speech vote, is transcribed."""
        self.utterance_id = utterance_id
        self.heard_until = self._clock()
        if self.scorer is not None:
            self.scorer.new_utterance()
        if self._guard is not None:
            self._guard.new_utterance()
        for pcm in list(self._recent)[-pre_roll_frames:]:
            self._push(pcm)

    def close(self, utterance_id: int | None = None) -> None:
        """The open utterance (or only `utterance_id`, if it is the open one) is over: taken,
        its last candidate being its transcript, or a false start."""
        if utterance_id is not None and utterance_id != self.utterance_id:
            return
        self.utterance_id = None
        if self._guard is not None:
            self._guard.discard()

    async def read_partials(self, on_partial: Callable[[str], None]) -> None:
        """The stream's partial transcripts of the open utterance, each to `on_partial` and to
        the scorer (to read ahead), until the stream ends. A stream that dies is logged here;
        each candidate then reports it for its own utterance."""
        assert self.stream is not None
        try:
            async for partial in self.stream.partials():
                if self.hearing and partial.text.strip():
                    if self.scorer is not None:  # its reading starts first: it runs in a thread
                        self.scorer.partial(partial.text)
                    on_partial(partial.text)
        except Exception as e:
            log.warning("STT partials ended: %s: %s", type(e).__name__, e)

    def score(self, utterance_id: int, text: str) -> None:
        if self.scorer is not None and utterance_id == self.utterance_id:
            self.scorer.request(utterance_id, text)

    def request_candidate(
        self, utterance_id: int, on_candidate: CandidateCallback, *, hear_end: bool = False
    ) -> None:
        """The transcript so far, to `on_candidate` (with partials on, the stream reuses a
        decode that already covers the speech); `hear_end`: the turn's score will be asked
        for, and an audio model reads the end meanwhile (`TurnScorer.hear_end`)."""
        if utterance_id != self.utterance_id or self.stream is None:
            return
        if hear_end and self.scorer is not None:
            self.scorer.hear_end(utterance_id, self._end_quiet_s)
        self._candidate = asyncio.get_running_loop().create_task(
            self._transcribe(utterance_id, self.stream, self.heard_until, on_candidate),
            name=f"candidate-{utterance_id}",
        )

    def drop_candidate(self) -> None:
        """The speaker went on: the candidate asked at the pause would end before the words."""
        if self._candidate is not None:
            self._candidate.cancel()
        if self.scorer is not None:
            self.scorer.drop_heard()

    async def _transcribe(
        self,
        utterance_id: int,
        stream: STTStream,
        covered_until: float,
        on_candidate: CandidateCallback,
    ) -> None:
        try:
            text, failed = await stream.flush(), False
        except Exception as e:  # no words, rather than an utterance that never ends
            log.warning("transcription failed: %s: %s", type(e).__name__, e)
            text, failed = "", True
        on_candidate(utterance_id, text, covered_until, failed)

    def _push(self, pcm: np.ndarray) -> None:
        if self.scorer is not None:
            self.scorer.push(pcm)
        if self._guard is not None:  # frames before start() have nowhere to go
            self._guard.push(pcm)


def engine_listener(
    options: ListenOptions,
    vad: VoiceDetector,
    turn_detector: TurnDetector | None,
    on_score: ScoreCallback,
    on_event: Callable[[TurnScore], None],
    *,
    clock: Callable[[], float],
    on_read_ahead: Callable[[str, float], None] | None = None,
) -> Listener:
    """An engine's listener: it keeps the frames that `options`' pre-roll and vote need, and
    scores its utterances with `turn_detector` when there is one (a `TurnScorer`, whose
    arguments follow). An audio model reads the end of the speech while its candidate is
    decoded, with the quiet still to come before a complete turn's endpoint added."""
    scorer = (
        None
        if turn_detector is None
        else TurnScorer(turn_detector, on_score, on_event, clock=clock, on_read_ahead=on_read_ahead)
    )
    e = options.endpoint
    return Listener(
        vad=vad,
        keep_frames=options.kept_frames(),
        clock=clock,
        scorer=scorer,
        end_quiet_s=max(0.0, e.silence_complete_s - e.candidate_silence_s),
    )
