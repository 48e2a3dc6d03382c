"""Local streaming speech-to-text on Whisper tiny.en (faster-whisper's CTranslate2 model): the
engine and its stream. The model's decoding: agent.adapters.stt.whisper_decoding; the tuning:
agent.adapters.stt.whisper_options.

Streaming: while the user speaks, the growing utterance is re-decoded every
`partial_interval_s` of new audio (`busy_partial_interval_s` while other decodes wait for the
pool), one decode per stream at a time, its audio taken when it starts (never a stale
snapshot from the queue). Tokens that two consecutive decodes agree on are
committed and forced as the decoder prefix of every later decode of that utterance, so
committed text never changes. (CTranslate2 steps through a forced prefix token by token: this
buys stable text, not speed.) As soon as the audio has been quiet for `endpoint_margin_s`,
a decode starts at once; a partial overtaken by that moment skips its generation step. When the
caller asks for the text (`flush()` at a pause, `finalize()` at its endpoint), a decode that
covers all the speech is reused, so the answer costs only what is left of it; one that does
not is dropped, and the caller's decode does not wait for its encoder to finish (the pool has
a second thread for it, agent.inference_pool). While a flush decodes, no other decode of the
utterance starts (it would only compete for the CPU).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent.adapters.stt.whisper_decoding import WhisperDecoder, agreed_prefix, samples
from agent.adapters.stt.whisper_options import (
    WhisperOptions,
    phone_band_options,
    question_options,
)
from agent.engines import FRAME_SAMPLES, INPUT_RATE, Transcript
from agent.inference_pool import PRIORITY_FINAL, PRIORITY_PARTIAL, WHISPER_POOL


@dataclass(frozen=True)
class _Hypothesis:
    ids: tuple[int, ...]  # text tokens of the current window
    end: int  # utterance samples it covered


class _Utterance:
    """Audio and decoding state of one utterance. The stream swaps in a fresh one at
    finalize()/discard(), so a decode still running for an old one cannot touch the new one."""

    def __init__(self) -> None:
        # Appended on the event loop and read from the decode thread: `length` is updated after
        # the chunk is in the list, so a reader that takes `length` first always finds it.
        self.chunks: list[np.ndarray] = []
        self.length = 0
        self.levels: list[tuple[int, float]] = []  # (end sample, dBFS) per pushed 20 ms block
        self.peak_db = -math.inf
        self.speech_start: int | None = None  # first voiced sample
        self.voiced_end = 0  # end of the last voiced block
        self.window_start = 0
        self.cuts: list[int] = []  # ends of full windows not decoded yet
        self.closed: tuple[int, ...] = ()  # text tokens of decoded windows
        self.committed: tuple[int, ...] = ()
        self.last: _Hypothesis | None = None
        self.next_due = 0  # sample at which the next partial is due
        self.task: asyncio.Task[None] | None = None
        self.task_end: int | None = None  # samples the running decode covers, once it started
        self.flushing = 0  # flush() calls waiting for a decode of this utterance

    def audio(self, start: int, end: int) -> np.ndarray:
        chunks = self.chunks[:]  # a consistent prefix even while push() appends
        return np.concatenate(chunks)[start:end] if chunks else np.zeros(0, np.int16)

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()


class WhisperSTTStream:
    """One user's speech, utterance after utterance (agent.engines.STTStream).

    A cancelled `finalize()` drops its utterance; the stream stays usable.
    """

    def __init__(self, decoder: WhisperDecoder, options: WhisperOptions) -> None:
        self._decoder = decoder
        self._options = options
        self._utt = _Utterance()
        self._paused = False
        self._closed = False
        self._partials: asyncio.Queue[Transcript | None] = asyncio.Queue(maxsize=32)
        self._margin = samples(options.endpoint_margin_s)

    # --- the STTStream interface ------------------------------------------------------------

    def push(self, pcm: np.ndarray) -> None:
        """Append int16 16 kHz mono samples (any length; normally one 20 ms frame).
        Ignored after aclose()."""
        if self._closed or len(pcm) == 0:
            return
        utt = self._utt
        pcm = np.asarray(pcm, dtype=np.int16)
        self._measure(utt, pcm)
        utt.chunks.append(pcm)
        utt.length += len(pcm)
        self._plan_windows(utt)
        self._schedule(utt)

    async def flush(self) -> str:
        """The transcript of the utterance pushed so far; later pushes continue it, and a later
        flush or finalize reuses this decode if no speech came since."""
        utt = self._utt
        utt.flushing += 1  # audio pushed meanwhile must not start a second, redundant decode
        try:
            return self._decoder.text(await self._final_tokens(utt))
        finally:
            utt.flushing -= 1
            self._schedule(utt)

    async def finalize(self) -> str:
        """The final transcript of the utterance pushed so far; later pushes start the next one."""
        utt, self._utt = self._utt, _Utterance()
        try:
            return self._decoder.text(await self._final_tokens(utt))
        finally:
            utt.cancel()

    def discard(self) -> None:
        self._utt.cancel()
        self._utt = _Utterance()

    async def partials(self) -> AsyncIterator[Transcript]:
        """Partial transcripts (committed + tentative text) until aclose()."""
        while (item := await self._partials.get()) is not None:
            yield item

    def set_paused(self, paused: bool) -> None:
        """While paused no new partial decode starts; one already running completes."""
        self._paused = paused
        self._schedule(self._utt)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        utt = self._utt
        utt.cancel()
        while not self._partials.empty():  # "until aclose()": none still queued comes out
            self._partials.get_nowait()
        self._publish(None)
        if utt.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await utt.task

    @property
    def stable_text(self) -> str:
        """The committed text of the current utterance: it stays a prefix of all later partials
        and of the final transcript."""
        return self._decoder.text(self._utt.closed + self._utt.committed)

    # --- audio bookkeeping ------------------------------------------------------------------

    def _measure(self, utt: _Utterance, pcm: np.ndarray) -> None:
        o = self._options
        for start in range(0, len(pcm), FRAME_SAMPLES):
            block = pcm[start : start + FRAME_SAMPLES].astype(np.float32)
            rms = float(np.sqrt(np.mean(block * block)))
            db = 20 * math.log10(max(rms, 1.0) / 32768.0)
            utt.peak_db = max(utt.peak_db, db)
            end = utt.length + start + len(block)
            utt.levels.append((end, db))
            if db >= max(o.speech_floor_dbfs, utt.peak_db - o.speech_range_db):
                if utt.speech_start is None:
                    utt.speech_start = end - len(block)
                    utt.next_due = utt.speech_start + samples(o.first_partial_s)
                utt.voiced_end = end

    def _plan_windows(self, utt: _Utterance) -> None:
        """Cut speech longer than a window at its quietest frame near the window's end."""
        o = self._options
        window, search = samples(o.max_window_s), samples(o.window_cut_search_s)
        while utt.length - (start := utt.cuts[-1] if utt.cuts else utt.window_start) > window:
            lo, hi = start + window - search, start + window
            candidates = [(db, end) for end, db in utt.levels if lo < end <= hi]
            utt.cuts.append(min(candidates)[1] if candidates else start + window)

    def _speech_end(self, utt: _Utterance) -> int:
        """Audio a decode must cover to hold all the speech of the utterance so far."""
        return min(utt.length, utt.voiced_end + self._margin)

    # --- decoding ---------------------------------------------------------------------------

    def _endpoint_due(self, utt: _Utterance) -> bool:
        """The audio has gone quiet and no decode covers the speech before it yet."""
        decoded_to = utt.last.end if utt.last else utt.window_start
        quiet = utt.length - utt.voiced_end >= self._margin
        return quiet and decoded_to < self._speech_end(utt)

    def _schedule(self, utt: _Utterance) -> None:
        """Start the next background decode of the current utterance if one is due."""
        if utt is not self._utt or utt.task is not None or utt.flushing:
            return
        if self._closed or self._paused:
            return
        if utt.cuts:
            utt.task = asyncio.create_task(self._close_window(utt, PRIORITY_PARTIAL))
            return
        if utt.speech_start is None:
            return
        decoded_to = utt.last.end if utt.last else utt.window_start
        # Not once the audio has gone quiet: that is when the caller asks for the text, and a
        # partial still running then (it cannot be interrupted) delays the answer.
        speaking = utt.length - utt.voiced_end < FRAME_SAMPLES
        partial_due = speaking and utt.voiced_end > decoded_to and utt.length >= utt.next_due
        if partial_due or self._endpoint_due(utt):
            utt.task = asyncio.create_task(self._partial(utt))

    async def _partial(self, utt: _Utterance) -> None:
        """Decode the window so far. Encoding and generation are separate pool jobs so that a
        decode overtaken by the end of speech skips its generation (60-150 ms) and the decode
        that can serve as the final starts sooner."""
        prefix = utt.committed if self._options.commit_agreed_prefix else ()
        start, context = utt.window_start, utt.closed

        def encode() -> tuple[Any, int, bool]:
            stop = utt.length  # all the audio there is now, even if the job waited in the queue
            utt.task_end = stop
            # Quiet already: this decode holds all the speech and is likely the final.
            final = stop - utt.voiced_end >= self._margin
            return self._decoder.encode(utt.audio(start, stop)), stop, final

        ids: tuple[int, ...] | None = None
        try:
            encoded, end, final = await WHISPER_POOL.run(encode, priority=PRIORITY_PARTIAL)
            if end >= self._speech_end(utt) or not self._endpoint_due(utt):
                seconds = (end - start) / INPUT_RATE
                ids = await WHISPER_POOL.run(
                    lambda: self._generate(encoded, seconds, prefix, context, final=final),
                    priority=PRIORITY_PARTIAL,
                )
        finally:
            utt.task = None
            utt.task_end = None
        if ids is not None:
            if self._options.commit_agreed_prefix and utt.last is not None:
                n = agreed_prefix(utt.last.ids, ids, self._decoder)
                if n > len(utt.committed):
                    utt.committed = ids[:n]
            utt.last = _Hypothesis(ids, end)
            utt.next_due = end + samples(self._partial_interval())
            text = self._decoder.text(utt.closed + ids)
            if utt is self._utt and text:  # no speech yet (a breath, the first syllable)
                self._publish(Transcript(text, final=False))
        self._schedule(utt)

    def _partial_interval(self) -> float:
        o = self._options
        return o.busy_partial_interval_s if WHISPER_POOL.waiting() else o.partial_interval_s

    async def _close_window(self, utt: _Utterance, priority: int) -> None:
        cut = utt.cuts[0]
        try:
            ids = await WHISPER_POOL.run(
                self._decode_job(utt, utt.window_start, cut), priority=priority
            )
        finally:
            utt.task = None
            utt.task_end = None
        utt.cuts.pop(0)
        utt.closed += ids
        utt.window_start = cut
        utt.committed = ()
        utt.last = None
        self._schedule(utt)

    def _decode_job(self, utt: _Utterance, start: int, stop: int) -> Callable[[], tuple[int, ...]]:
        """A whole decode of utt's audio [start, stop), without a forced prefix, for the pool
        thread."""
        context = utt.closed

        def run() -> tuple[int, ...]:
            utt.task_end = stop
            return self._decoder.decode(utt.audio(start, stop), previous=context)

        return run

    async def _final_tokens(self, utt: _Utterance) -> tuple[int, ...]:
        o = self._options
        speech_end = self._speech_end(utt)
        if utt.task is not None:
            running_end = utt.task_end
            covers = running_end is not None and running_end >= speech_end
            if running_end in utt.cuts or (o.reuse_endpoint_decode and covers):
                # Closing a window, or already holds all the speech. Shielded: a flush given up
                # on (the speaker went on) leaves it to finish as a partial.
                await asyncio.shield(utt.task)
            else:
                # Stale (or only queued): drop it; the final decode is queued ahead of partials.
                utt.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await utt.task
        while utt.cuts:
            utt.task = asyncio.create_task(self._close_window(utt, PRIORITY_FINAL))
            await utt.task
        if utt.speech_start is None:
            return utt.closed
        if o.reuse_endpoint_decode and utt.last is not None and utt.last.end >= speech_end:
            return utt.closed + utt.last.ids
        if utt.voiced_end <= utt.window_start:  # nothing but quiet since the last window
            return utt.closed
        start, stop, context = utt.window_start, utt.length, utt.closed
        # Two jobs, so that a caller that gives up between them (a flush overtaken by more
        # speech) skips the generation.
        encoded = await WHISPER_POOL.run(
            lambda: self._decoder.encode(utt.audio(start, stop)), priority=PRIORITY_FINAL
        )
        ids = await WHISPER_POOL.run(
            lambda: self._decoder.generate_final(encoded, (stop - start) / INPUT_RATE, context),
            priority=PRIORITY_FINAL,
        )
        # Quiet since the decode began: it holds all the speech, so no endpoint decode is due.
        covered = max(stop, utt.voiced_end + self._margin) if utt.voiced_end <= stop else stop
        if utt.last is None or utt.last.end < covered:
            utt.last = _Hypothesis(ids, covered)
        return utt.closed + ids

    def _generate(
        self,
        encoded: Any,
        seconds: float,
        prefix: tuple[int, ...],
        context: tuple[int, ...],
        *,
        final: bool,
    ) -> tuple[int, ...]:
        """A partial's generation, forced to start with `prefix`, or a final's
        (`WhisperDecoder.generate_final`, never forced)."""
        if final:
            return self._decoder.generate_final(encoded, seconds, context)
        return self._decoder.generate(encoded, seconds, prefix, context)

    def _publish(self, item: Transcript | None) -> None:
        if self._closed and item is not None:
            return
        if self._partials.full():  # nobody is reading: keep the newest
            self._partials.get_nowait()
        self._partials.put_nowait(item)


def threads_per_replica() -> int:
    """Each model replica's threads: the pool decodes on WHISPER_POOL.threads replicas at once,
    and on two cores two threads each slowed the decodes at the pauses, which ran beside a
    partial's (docs/benchmarks.md, "Whisper with one thread per replica")."""
    cores = len(os.sched_getaffinity(0))
    return min(2, max(1, cores // WHISPER_POOL.threads))


class WhisperSTT:
    """Whisper on CPU (agent.engines.SpeechToText): the bundled tiny.en, or the CTranslate2
    conversion of another Whisper in `model_dir` (English-only or multilingual, decoded as
    English). Call `load()` once per process (in the worker's prewarm), then `warmup()`."""

    def __init__(
        self,
        model_dir: Path | None = None,
        *,
        cpu_threads: int | None = None,
        options: WhisperOptions | None = None,
    ) -> None:
        self._model_dir = model_dir
        self._cpu_threads = cpu_threads or threads_per_replica()
        self.options = options or WhisperOptions()
        self._decoder: WhisperDecoder | None = None

    def load(self) -> None:
        """Load the model and encode 30 s of silence (blocking, ~1.5 s); a second call does
        nothing."""
        if self._decoder is not None:
            return
        from agent.models import offline_env, whisper_model_dir

        offline_env()
        # oneDNN caches its primitives per input shape, up to 1024 of them (~0.8 MB each for
        # the encoder here): every new utterance length grew the process, the soak's memory
        # steps. Uncached, the encoder and the decodes take the same time.
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0")
        from faster_whisper import WhisperModel

        path = self._model_dir or whisper_model_dir()
        model = WhisperModel(
            str(path),
            device="cpu",
            compute_type="int8",
            cpu_threads=self._cpu_threads,
            num_workers=WHISPER_POOL.threads,  # one model replica per pool thread
        )
        self._decoder = WhisperDecoder(model, self.options)

    def warmup(self) -> None:
        """One blocking decode of a second of quiet noise, so the first real one is not cold."""
        noise = np.random.default_rng(0).normal(0, 30, INPUT_RATE).astype(np.int16)
        self._loaded().decode(noise)

    def stream(self) -> WhisperSTTStream:
        return WhisperSTTStream(self._loaded(), self.options)

    def phone_band(self) -> WhisperSTT:
        """This loaded model, tuned for a phone caller's narrowband speech
        (`phone_band_options`)."""
        return self._tuned(phone_band_options(self.options))

    def for_questions(self) -> WhisperSTT:
        """This loaded model, tuned for an interviewer's questions (`question_options`)."""
        return self._tuned(question_options(self.options))

    def _tuned(self, options: WhisperOptions) -> WhisperSTT:
        """This loaded model with `options`: the model is shared, not loaded again."""
        twin = WhisperSTT(self._model_dir, cpu_threads=self._cpu_threads, options=options)
        twin._decoder = self._loaded().with_options(options)
        return twin

    async def hypotheses(self, pcm: np.ndarray, n: int = 8) -> list[tuple[str, float]]:
        """The n-best transcripts of a whole 16 kHz int16 utterance
        (`WhisperDecoder.hypotheses`)."""
        decoder = self._loaded()
        return await WHISPER_POOL.run(lambda: decoder.hypotheses(pcm, n), priority=PRIORITY_FINAL)

    async def transcribe(self, pcm: np.ndarray) -> str:
        """One-shot transcription of a whole 16 kHz int16 utterance (no partials)."""
        stream = self.stream()
        stream.set_paused(True)
        try:
            stream.push(pcm)
            return await stream.finalize()
        finally:
            await stream.aclose()

    def _loaded(self) -> WhisperDecoder:
        if self._decoder is None:
            raise RuntimeError("WhisperSTT.load() has not been called")
        return self._decoder
