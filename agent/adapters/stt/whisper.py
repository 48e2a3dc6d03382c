"""Local streaming speech-to-text on Whisper tiny.en (faster-whisper's CTranslate2 model).

The model is called directly instead of `WhisperModel.transcribe()`: that pads every clip to
Whisper's 30 s window, so a short utterance pays for the whole encoder; here only the utterance
plus a short zero pad is encoded. What keeps that unpadded path accurate and its cost bounded
(the figures behind each choice: docs/benchmarks.md, "Whisper's decoding, tuned"):

- Not seeing a long silence after the speech, the decoder often starts the utterance over
  ("Ever tried, ever failed. Ever tried, ever failed") until max_length. A repetition penalty
  plus timestamp-mode decoding, where such a restart shows up as a new segment that repeats
  the opening words or ends past the audio and is dropped, removes nearly all of them, better
  than `no_repeat_ngram_size`, the penalty alone or a longer pad. Any 3-word sequence said
  twice is cut as well.
- Dropping a loop afterwards still pays for generating it. The decoder stops at the end of the
  text when the encoder output continues with seconds of silence frames, taken from a 30 s
  silence encoded once at load, for a few ms more cross-attention per token.
- Partials decode audio cut mid-word, which is where the remaining errors are; local agreement
  (below) keeps such guesses out of the committed text.
- No prompt of the conversation's text: given as the decoder's earlier text, a sentence
  ("Hello, can you hear me? Yes, I can hear you.") or a label ("A question for the
  assistant:") came back as the start of nearly every transcript, so only a long utterance's
  earlier windows are context.

Streaming: while the user speaks, the growing utterance is re-decoded every
`partial_interval_s` of new audio, one decode per stream at a time, its audio taken when it
starts (never a stale snapshot from the queue). Tokens that two consecutive decodes agree on are
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
import copy
import dataclasses
import math
import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent.engines import FRAME_SAMPLES, INPUT_RATE, Transcript
from agent.inference_pool import PRIORITY_FINAL, PRIORITY_PARTIAL, WHISPER_POOL

# Whisper's encoder has 1500 positions = 30 s of audio; a window plus its pad must fit.
_MAX_ENCODER_S = 30.0
_MEL_FRAMES_PER_S = 100
_ENCODER_FRAMES_PER_S = 50  # the encoder halves the mel frame rate
_PREVIOUS_TOKENS = 64  # text of earlier windows given to the decoder as context
_TIMESTAMP_STEP_S = 0.02
_SEGMENT_END_TOLERANCE_S = 0.5


@dataclass(frozen=True)
class WhisperOptions:
    """Tuning of `WhisperSTT`; the defaults are the measured best on 2 cores."""

    # Re-decode the utterance for a partial after this much new audio.
    partial_interval_s: float = 0.4
    # The first partial waits for this much audio after the first voiced frame.
    first_partial_s: float = 0.5
    # Zero samples appended to every decoded clip, and encoder frames of pure silence appended
    # after those (see the module docstring).
    end_pad_s: float = 1.0
    end_silence_frames_s: float = 5.0
    # Decoder settings: penalty on repeated tokens; generated tokens allowed per second of audio.
    repetition_penalty: float = 1.1
    max_tokens_per_s: float = 6.0
    # The final decode (the one that covers all the speech once the audio has gone quiet, or
    # finalize()'s own) is greedy first; when the decoder is unsure of that text (its mean
    # log probability per token below `unsure_logprob`), the same encoder output is decoded
    # again with a beam of `final_beam_size`, the committed prefix kept. Right transcripts
    # score above the threshold and wrong ones mostly below it, so the beam is paid for only
    # where it helps: nearly all of a beam-on-every-final's gain at a fraction of its time.
    final_beam_size: int = 5
    final_keeps_prefix: bool = True
    unsure_logprob: float = -0.6
    # A decode with nothing forced is no speech when the decoder's no-speech probability is
    # above `no_speech_prob` and its text scores below `no_speech_logprob` (faster-whisper's
    # rule and thresholds). A long utterance cut into windows can leave a last one of breath
    # or room noise, otherwise written as "you" or, with the beam, "Go to the end of"; one-word
    # answers ("Yes.", "Okay.", "Why?") stay well under the thresholds.
    no_speech_prob: float = 0.6
    no_speech_logprob: float = -1.0
    # A 20 ms frame is voiced when it is louder than the floor and within `speech_range_db`
    # of the loudest frame of the utterance.
    speech_floor_dbfs: float = -50.0
    speech_range_db: float = 26.0
    # Quiet audio after the last voiced frame that marks a likely end of speech: a decode then
    # starts at once, and a decode covering up to there is reused by finalize(). It also keeps
    # soft word endings (an "s", an "f") that fall below the voicing threshold. Shorter
    # starts the reply sooner at hardly any cost in words.
    endpoint_margin_s: float = 0.04
    # Reuse that decode as the final (False: finalize() always decodes the whole utterance).
    reuse_endpoint_decode: bool = True
    # Force the tokens two consecutive decodes agree on as the prefix of later decodes.
    commit_agreed_prefix: bool = True
    # Longer speech is cut at the quietest frame of the window's last `window_cut_search_s`
    # and decoded window by window, each with the previous text as context.
    max_window_s: float = 20.0
    window_cut_search_s: float = 3.0

    def __post_init__(self) -> None:
        if self.max_window_s + self.end_pad_s > _MAX_ENCODER_S:
            raise ValueError(f"max_window_s + end_pad_s must be <= {_MAX_ENCODER_S} s")
        if not 0 < self.window_cut_search_s < self.max_window_s:
            raise ValueError("window_cut_search_s must be in (0, max_window_s)")
        if self.partial_interval_s <= 0 or self.first_partial_s <= 0:
            raise ValueError("partial_interval_s and first_partial_s must be positive")


# A phone line's speech (8 kHz, 300-3400 Hz: nothing above 4 kHz) looks less like speech to
# Whisper: whole questions over the line score a no-speech probability above the wideband
# threshold, and some came out as no words at all. Breath or room noise still scores above
# this one.
PHONE_NO_SPEECH_PROB = 0.85


def phone_band_options(options: WhisperOptions) -> WhisperOptions:
    """`options` for a phone caller's narrowband speech (see PHONE_NO_SPEECH_PROB)."""
    return dataclasses.replace(options, no_speech_prob=max(options.no_speech_prob,
                                                           PHONE_NO_SPEECH_PROB))


def _samples(seconds: float) -> int:
    return round(seconds * INPUT_RATE)


class _Decoder:
    """The CTranslate2 Whisper model and its tokenizer. `encode`, `generate` and `decode` run in
    WHISPER_POOL's thread."""

    def __init__(self, model: Any, options: WhisperOptions) -> None:
        self._whisper = model.model
        self._features = model.feature_extractor
        self._tokenizer = model.hf_tokenizer
        self._options = options
        tok = self._tokenizer.token_to_id
        self.eot = tok("<|endoftext|>")
        self._sot = tok("<|startoftranscript|>")
        self._prev = tok("<|startofprev|>")
        self.timestamp_begin = tok("<|notimestamps|>") + 1
        # A multilingual model is told the language and the task, or it may guess another
        # language (or translate) from a few seconds of accented English.
        self._task = (
            (tok("<|en|>"), tok("<|transcribe|>")) if self._whisper.is_multilingual else ()
        )
        self._pieces: dict[int, str] = {}
        # The encoder output of 30 s of silence: frames from here continue the silence after
        # a clip (the encoder is bidirectional, but its frames deep in silence hardly depend
        # on the audio before). Computed once, ~1 s.
        self._silence = np.asarray(self._encode_features(self._mel(np.zeros(0, np.int16), 30.0)))

    def with_options(self, options: WhisperOptions) -> _Decoder:
        """This decoder (the same model, tokenizer and silence frames) tuned by `options`."""
        twin = copy.copy(self)
        twin._options = options
        return twin

    def encode(self, audio: np.ndarray) -> Any:
        """The encoder output (a CTranslate2 StorageView) of int16 `audio` plus the end pad,
        followed by `end_silence_frames_s` of silence frames."""
        import ctranslate2

        o = self._options
        frames = np.asarray(self._encode_features(self._mel(audio, o.end_pad_s)))
        n = frames.shape[1]
        silence = self._silence[:, n : n + round(o.end_silence_frames_s * _ENCODER_FRAMES_PER_S)]
        return ctranslate2.StorageView.from_array(np.concatenate([frames, silence], axis=1))

    def _mel(self, audio: np.ndarray, pad_s: float) -> np.ndarray:
        pad = np.zeros(_samples(pad_s), np.float32)
        pcm = np.concatenate([audio.astype(np.float32) / 32768.0, pad])
        return self._features(pcm)[None, :, : _MEL_FRAMES_PER_S * round(_MAX_ENCODER_S)]

    def _encode_features(self, mel: np.ndarray) -> Any:
        import ctranslate2

        return self._whisper.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel)))

    def generate(
        self, encoded: Any, seconds: float, prefix: Sequence[int] = (), previous: Sequence[int] = ()
    ) -> tuple[int, ...]:
        """Text tokens of `seconds` of encoded audio, starting with `prefix` (forced);
        `previous` is earlier text given as context. Greedy."""
        return self.generate_scored(encoded, seconds, prefix, previous)[0]

    def generate_final(
        self, encoded: Any, seconds: float, prefix: Sequence[int] = (), previous: Sequence[int] = ()
    ) -> tuple[int, ...]:
        """`generate`, and when the decoder is unsure of that text (its mean log probability
        per token is below `unsure_logprob`), a beam search of `final_beam_size` instead,
        from the same encoder output (see WhisperOptions)."""
        o = self._options
        ids, score = self.generate_scored(encoded, seconds, prefix, previous)
        if not ids or o.final_beam_size <= 1 or score >= o.unsure_logprob:
            return ids  # no text is not unsure text: a beam over noise writes some
        keep = prefix if o.final_keeps_prefix else ()
        return self.generate_scored(encoded, seconds, keep, previous, o.final_beam_size)[0]

    def generate_scored(
        self, encoded: Any, seconds: float, prefix: Sequence[int] = (),
        previous: Sequence[int] = (), beam_size: int = 1,
    ) -> tuple[tuple[int, ...], float]:
        """`generate` with `beam_size`, and the decoder's mean log probability per token of
        its result (before the clean-up below). No text when nothing is forced and the audio
        is no speech (WhisperOptions.no_speech_prob)."""
        o = self._options
        context = [self._prev, *previous[-_PREVIOUS_TOKENS:]] if previous else []
        # Timestamp mode (no <|notimestamps|>); the first timestamp is given so a prefix can follow.
        prompt = [*context, self._sot, *self._task, self.timestamp_begin, *prefix]
        budget = len(prefix) + 8 + math.ceil(seconds * o.max_tokens_per_s)
        # CTranslate2 caps the result (prefix included) at
        # min(max_length / 2, max_length - len(context)).
        max_length = min(448, max(2 * budget, budget + len(context)))
        result = self._whisper.generate(
            encoded, [prompt], beam_size=beam_size, max_length=max_length,
            repetition_penalty=o.repetition_penalty, return_scores=True,
            return_no_speech_prob=True,
        )[0]
        score = float(result.scores[0])
        if not prefix and result.no_speech_prob > o.no_speech_prob and score < o.no_speech_logprob:
            return (), score
        ids = drop_late_segments(
            result.sequences_ids[0], self.timestamp_begin, self.eot, seconds + o.end_pad_s,
            self.normalized,
        )
        starts = self.word_starts(ids)
        repeat = first_repeated_ngram([self.normalized(ids[a:b]) for a, b in starts])
        if repeat is not None:
            ids = ids[: max(starts[repeat][0], len(prefix))]
        return ids, score

    def decode(
        self, audio: np.ndarray, prefix: Sequence[int] = (), previous: Sequence[int] = ()
    ) -> tuple[int, ...]:
        return self.generate(self.encode(audio), len(audio) / INPUT_RATE, prefix, previous)

    def hypotheses(self, audio: np.ndarray, n: int) -> list[tuple[str, float]]:
        """The `n` best texts of a beam of `n` over the whole of `audio`, best first, each with
        its mean log probability per token (for measuring what a model can hear: the finals
        take only the best)."""
        seconds = len(audio) / INPUT_RATE
        budget = 8 + math.ceil(seconds * self._options.max_tokens_per_s)
        result = self._whisper.generate(
            self.encode(audio), [[self._sot, *self._task, self.timestamp_begin]], beam_size=n,
            num_hypotheses=n, max_length=2 * budget,
            repetition_penalty=self._options.repetition_penalty, return_scores=True,
        )[0]
        return [
            (self.text(drop_late_segments(ids, self.timestamp_begin, self.eot,
                                          seconds + self._options.end_pad_s, self.normalized)),
             float(score))
            for ids, score in zip(result.sequences_ids, result.scores, strict=True)
        ]

    def text(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(ids)).strip()

    def normalized(self, ids: Sequence[int]) -> str:
        text = self.text(ids).lower()
        return " ".join("".join(c for c in text if c.isalnum() or c == " ").split())

    def _piece(self, token: int) -> str:
        if token not in self._pieces:
            self._pieces[token] = self._tokenizer.id_to_token(token) or ""
        return self._pieces[token]

    def starts_word(self, ids: Sequence[int], i: int) -> bool:
        """Token `i` begins a word (byte-level BPE marks a leading space with "Ġ")."""
        return i == 0 or self._piece(ids[i]).startswith("Ġ")

    def word_starts(self, ids: Sequence[int]) -> list[tuple[int, int]]:
        """(start, end) token indices of each word; punctuation belongs to the word before."""
        starts = [i for i in range(len(ids)) if self.starts_word(ids, i)]
        return list(zip(starts, [*starts[1:], len(ids)], strict=True))

    def is_word_boundary(self, ids: Sequence[int], i: int) -> bool:
        """Whether a committed prefix may end before token `i` (a new word or punctuation)."""
        if i >= len(ids):
            return True
        piece = self._piece(ids[i])
        return piece.startswith("Ġ") or not any(c.isalnum() for c in piece)


def drop_late_segments(
    ids: Sequence[int], timestamp_begin: int, eot: int, total_s: float,
    normalized: Callable[[Sequence[int]], str],
) -> tuple[int, ...]:
    """The text tokens of a timestamp-mode decode, without its hallucinated tail segments.

    A decode that does not see the audio end tends to restart the utterance as a new segment,
    or to write a segment that ends after the audio: keep the segments before the first such
    one (the first segment is always kept).
    """
    segments: list[tuple[list[int], float | None]] = []  # (text tokens, end time)
    current: list[int] = []
    for token in ids:
        if token >= timestamp_begin:
            if current:
                segments.append((current, (token - timestamp_begin) * _TIMESTAMP_STEP_S))
                current = []
        elif token < eot:
            current.append(token)
    if current:
        segments.append((current, None))
    openings: list[list[str]] = []  # first two words of each kept segment
    out: list[int] = []
    for tokens, end in segments:
        opening = normalized(tokens).split()[:2]
        if openings:
            past_end = end is not None and end > total_s + _SEGMENT_END_TOLERANCE_S
            if past_end or opening in openings:
                break
        openings.append(opening)
        out.extend(tokens)
    return tuple(out)


def first_repeated_ngram(words: Sequence[str], n: int = 3) -> int | None:
    """Index of the first word that starts an n-gram already said earlier in `words` (a
    decoder loop, within a segment or across), or None. Real questions rarely repeat three
    words in a row; a looping decoder always does."""
    seen: set[tuple[str, ...]] = set()
    for i in range(len(words) - n + 1):
        gram = tuple(words[i : i + n])
        if gram in seen:
            return i
        seen.add(gram)
    return None


def agreed_prefix(older: Sequence[int], newer: Sequence[int], decoder: _Decoder) -> int:
    """How many leading tokens of `newer` are confirmed by `older`: their common prefix, cut
    back to a word boundary in both, and never reaching into `newer`'s last word (which may
    be cut off mid-word)."""
    n = 0
    while n < min(len(older), len(newer)) and older[n] == newer[n]:
        n += 1
    last_word = max((i for i in range(len(newer)) if decoder.starts_word(newer, i)), default=0)
    n = min(n, last_word)
    while n > 0 and not (decoder.is_word_boundary(older, n) and decoder.is_word_boundary(newer, n)):
        n -= 1
    return n


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

    def __init__(self, decoder: _Decoder, options: WhisperOptions) -> None:
        self._decoder = decoder
        self._options = options
        self._utt = _Utterance()
        self._paused = False
        self._closed = False
        self._partials: asyncio.Queue[Transcript | None] = asyncio.Queue(maxsize=32)
        self._margin = _samples(options.endpoint_margin_s)

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
                    utt.next_due = utt.speech_start + _samples(o.first_partial_s)
                utt.voiced_end = end

    def _plan_windows(self, utt: _Utterance) -> None:
        """Cut speech longer than a window at its quietest frame near the window's end."""
        o = self._options
        window, search = _samples(o.max_window_s), _samples(o.window_cut_search_s)
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
            utt.next_due = end + _samples(self._options.partial_interval_s)
            text = self._decoder.text(utt.closed + ids)
            if utt is self._utt and text:  # no speech yet (a breath, the first syllable)
                self._publish(Transcript(text, final=False))
        self._schedule(utt)

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
        prefix = utt.committed if o.commit_agreed_prefix else ()
        start, stop, context = utt.window_start, utt.length, utt.closed
        # Two jobs, so that a caller that gives up between them (a flush overtaken by more
        # speech) skips the generation.
        encoded = await WHISPER_POOL.run(
            lambda: self._decoder.encode(utt.audio(start, stop)), priority=PRIORITY_FINAL)
        ids = await WHISPER_POOL.run(
            lambda: self._generate(encoded, (stop - start) / INPUT_RATE, prefix, context,
                                   final=True),
            priority=PRIORITY_FINAL,
        )
        # Quiet since the decode began: it holds all the speech, so no endpoint decode is due.
        covered = max(stop, utt.voiced_end + self._margin) if utt.voiced_end <= stop else stop
        if utt.last is None or utt.last.end < covered:
            utt.last = _Hypothesis(ids, covered)
        return utt.closed + ids

    def _generate(self, encoded: Any, seconds: float, prefix: tuple[int, ...],
                  context: tuple[int, ...], *, final: bool) -> tuple[int, ...]:
        """A partial's generation, or a final's (`_Decoder.generate_final`)."""
        generate = self._decoder.generate_final if final else self._decoder.generate
        return generate(encoded, seconds, prefix, context)

    def _publish(self, item: Transcript | None) -> None:
        if self._closed and item is not None:
            return
        if self._partials.full():  # nobody is reading: keep the newest
            self._partials.get_nowait()
        self._partials.put_nowait(item)


class WhisperSTT:
    """Whisper on CPU (agent.engines.SpeechToText): the bundled tiny.en, or the CTranslate2
    conversion of another Whisper in `model_dir` (English-only or multilingual, decoded as
    English). Call `load()` once per process (in the worker's prewarm), then `warmup()`."""

    def __init__(
        self, model_dir: Path | None = None, *, cpu_threads: int = 2,
        options: WhisperOptions | None = None,
    ) -> None:
        self._model_dir = model_dir
        self._cpu_threads = cpu_threads
        self.options = options or WhisperOptions()
        self._decoder: _Decoder | None = None

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
            str(path), device="cpu", compute_type="int8", cpu_threads=self._cpu_threads,
            num_workers=WHISPER_POOL.threads,  # one model replica per pool thread
        )
        self._decoder = _Decoder(model, self.options)

    def warmup(self) -> None:
        """One blocking decode of a second of quiet noise, so the first real one is not cold."""
        noise = np.random.default_rng(0).normal(0, 30, INPUT_RATE).astype(np.int16)
        self._loaded().decode(noise)

    def stream(self) -> WhisperSTTStream:
        return WhisperSTTStream(self._loaded(), self.options)

    def phone_band(self) -> WhisperSTT:
        """This loaded model, tuned for a phone caller's narrowband speech
        (`phone_band_options`); the model is shared, not loaded again."""
        twin = WhisperSTT(self._model_dir, cpu_threads=self._cpu_threads,
                          options=phone_band_options(self.options))
        twin._decoder = self._loaded().with_options(twin.options)
        return twin

    async def hypotheses(self, pcm: np.ndarray, n: int = 8) -> list[tuple[str, float]]:
        """The n-best transcripts of a whole 16 kHz int16 utterance (`_Decoder.hypotheses`)."""
        decoder = self._loaded()
        return await WHISPER_POOL.run(lambda: decoder.hypotheses(pcm, n),
                                      priority=PRIORITY_FINAL)

    async def transcribe(self, pcm: np.ndarray) -> str:
        """One-shot transcription of a whole 16 kHz int16 utterance (no partials)."""
        stream = self.stream()
        stream.set_paused(True)
        try:
            stream.push(pcm)
            return await stream.finalize()
        finally:
            await stream.aclose()

    def _loaded(self) -> _Decoder:
        if self._decoder is None:
            raise RuntimeError("WhisperSTT.load() has not been called")
        return self._decoder
