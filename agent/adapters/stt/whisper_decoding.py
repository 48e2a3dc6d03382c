"""Whisper's model called directly, utterance by utterance (the stream that drives it:
agent.adapters.stt.whisper). `WhisperModel.transcribe()` pads every clip to Whisper's 30 s
window, so a short utterance would pay for the whole encoder; here only the utterance plus a
short zero pad is encoded. What keeps that unpadded path accurate and its cost bounded (the
figures behind each choice: docs/benchmarks.md, "Whisper's decoding, tuned"):

- Not seeing a long silence after the speech, the decoder often starts the utterance over
  ("Ever tried, ever failed. Ever tried, ever failed") until max_length. A repetition penalty
  plus timestamp-mode decoding, where such a restart shows up as a new segment that repeats
  the opening words or ends past the audio and is dropped (`drop_late_segments`), removes
  nearly all of them, better than `no_repeat_ngram_size`, the penalty alone or a longer pad.
  Any 3-word sequence said twice is cut as well (`first_repeated_ngram`).
- Dropping a loop afterwards still pays for generating it. The decoder stops at the end of the
  text when the encoder output continues with seconds of silence frames, taken from a 30 s
  silence encoded once at load, for a few ms more cross-attention per token.
- Partials decode audio cut mid-word, which is where the remaining errors are; local agreement
  (`agreed_prefix`) keeps such guesses out of the committed text, which later partials are
  forced to start with. A final is never forced: two partials that agree may both have heard
  only the words before a pause, read as a whole sentence ("Do you know?" for "Do you know
  if | the museum is open"), and forced on the final, that reading outlives the rest.
- No prompt of the conversation's text: given as the decoder's earlier text, a sentence
  ("Hello, can you hear me? Yes, I can hear you.") or a label ("A question for the
  assistant:") came back as the start of nearly every transcript, so only a long utterance's
  earlier windows are context.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agent.adapters.stt.whisper_options import MAX_ENCODER_S, WhisperOptions
from agent.engines import INPUT_RATE

_MEL_FRAMES_PER_S = 100
_ENCODER_FRAMES_PER_S = 50  # the encoder halves the mel frame rate
_PREVIOUS_TOKENS = 64  # text of earlier windows given to the decoder as context
_TIMESTAMP_STEP_S = 0.02
_SEGMENT_END_TOLERANCE_S = 0.5


def samples(seconds: float) -> int:
    """Samples of 16 kHz input audio in `seconds`."""
    return round(seconds * INPUT_RATE)


class WhisperDecoder:
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
        self._task = (tok("<|en|>"), tok("<|transcribe|>")) if self._whisper.is_multilingual else ()
        self._pieces: dict[int, str] = {}
        # The encoder output of 30 s of silence: frames from here continue the silence after
        # a clip (the encoder is bidirectional, but its frames deep in silence hardly depend
        # on the audio before). Computed once, ~1 s.
        self._silence = np.asarray(self._encode_features(self._mel(np.zeros(0, np.int16), 30.0)))

    def with_options(self, options: WhisperOptions) -> WhisperDecoder:
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
        pad = np.zeros(samples(pad_s), np.float32)
        pcm = np.concatenate([audio.astype(np.float32) / 32768.0, pad])
        return self._features(pcm)[None, :, : _MEL_FRAMES_PER_S * round(MAX_ENCODER_S)]

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
        self, encoded: Any, seconds: float, previous: Sequence[int] = ()
    ) -> tuple[int, ...]:
        """A final's text, nothing forced (the module docstring): greedy, and when the decoder
        is unsure of that text (its mean log probability per token is below
        `unsure_logprob`), a beam search of `final_beam_size` instead, from the same encoder
        output; with `beam_every_final`, the beam search alone (see WhisperOptions)."""
        o = self._options
        if o.beam_every_final and o.final_beam_size > 1:
            return self.generate_scored(encoded, seconds, (), previous, o.final_beam_size)[0]
        ids, score = self.generate_scored(encoded, seconds, (), previous)
        if not ids or o.final_beam_size <= 1 or score >= o.unsure_logprob:
            return ids  # no text is not unsure text: a beam over noise writes some
        return self.generate_scored(encoded, seconds, (), previous, o.final_beam_size)[0]

    def generate_scored(
        self,
        encoded: Any,
        seconds: float,
        prefix: Sequence[int] = (),
        previous: Sequence[int] = (),
        beam_size: int = 1,
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
            encoded,
            [prompt],
            beam_size=beam_size,
            max_length=max_length,
            repetition_penalty=o.repetition_penalty,
            return_scores=True,
            return_no_speech_prob=True,
        )[0]
        score = float(result.scores[0])
        if not prefix and result.no_speech_prob > o.no_speech_prob and score < o.no_speech_logprob:
            return (), score
        ids = drop_late_segments(
            result.sequences_ids[0],
            self.timestamp_begin,
            self.eot,
            seconds + o.end_pad_s,
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
            self.encode(audio),
            [[self._sot, *self._task, self.timestamp_begin]],
            beam_size=n,
            num_hypotheses=n,
            max_length=2 * budget,
            repetition_penalty=self._options.repetition_penalty,
            return_scores=True,
        )[0]
        return [
            (
                self.text(
                    drop_late_segments(
                        ids,
                        self.timestamp_begin,
                        self.eot,
                        seconds + self._options.end_pad_s,
                        self.normalized,
                    )
                ),
                float(score),
            )
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

    def is_punctuation(self, token: int) -> bool:
        """The token holds no letter or digit ("?", "...", "Ġ,")."""
        return not any(c.isalnum() for c in self._piece(token))

    def is_word_boundary(self, ids: Sequence[int], i: int) -> bool:
        """Whether a committed prefix may end before token `i` (a new word or punctuation)."""
        if i >= len(ids):
            return True
        return self._piece(ids[i]).startswith("Ġ") or self.is_punctuation(ids[i])


def drop_late_segments(
    ids: Sequence[int],
    timestamp_begin: int,
    eot: int,
    total_s: float,
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


def agreed_prefix(older: Sequence[int], newer: Sequence[int], decoder: WhisperDecoder) -> int:
    """How many leading tokens of `newer` are confirmed by `older`: their common prefix, cut
    back to a word boundary in both, and never reaching into `newer`'s last word (which may
    be cut off mid-word), nor ending on punctuation. Whisper ends every clip like a sentence
    ("Why does?" at a thinking pause), and that mark, forced on the decode of the whole
    utterance, ends it there: through LiveKit "Why does | bread go stale so quickly?" was
    heard as "Why does?". A mark is committed only with the word after it."""
    n = 0
    while n < min(len(older), len(newer)) and older[n] == newer[n]:
        n += 1
    last_word = max((i for i in range(len(newer)) if decoder.starts_word(newer, i)), default=0)
    n = min(n, last_word)
    while n > 0 and not (
        decoder.is_word_boundary(older, n)
        and decoder.is_word_boundary(newer, n)
        and not decoder.is_punctuation(newer[n - 1])
    ):
        n -= 1
    return n
