"""What the Deepgram TEST DOUBLE (agent/testing/deepgram_server_double.py) hears.

`utterance_recogniser` "recognises" only the utterances it is given: it cuts the audio into
utterances by energy, and names each one after the given utterance whose loudness contour (dB
per 20 ms frame) is nearest, revealing its words as the audio goes on; it knows nothing of any
other speech. `word_code_recogniser` hears the test audio of `speech()` (frames that carry a
word's code) deterministically, for the adapter's own tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from agent.engines import FRAME_SAMPLES
from agent.testing.deepgram_server_double import FRAME_S, DeepgramListener, Recogniser

# ---- hearing the utterances given, by their loudness contour ----------------------------------


VOICED_DB = -45.0  # a 20 ms frame louder than this (RMS, dBFS) is speech
_FLOOR_DB = -60.0
_MAX_SHIFT = 2  # frames of onset misalignment tolerated between heard audio and a template
_COMPLETE = 0.85  # this much of a template heard: all of its words are out


def frame_levels(pcm: np.ndarray) -> np.ndarray:
    """RMS level in dBFS of each whole 20 ms frame of 16 kHz int16 audio, floored."""
    n = pcm.size // FRAME_SAMPLES
    frames = pcm[: n * FRAME_SAMPLES].reshape(n, FRAME_SAMPLES).astype(np.float64) / 32768
    rms = np.sqrt(np.mean(frames * frames, axis=1))
    return np.maximum(20 * np.log10(np.maximum(rms, 1e-9)), _FLOOR_DB)


@dataclass(frozen=True)
class Utterance:
    """Something a simulated user says: its text, and its audio (16 kHz int16)."""

    text: str
    pcm: np.ndarray


@dataclass(frozen=True)
class _Template:
    words: list[str]
    levels: np.ndarray  # from the first voiced frame to the last


def _template(u: Utterance) -> _Template:
    levels = frame_levels(u.pcm)
    voiced = np.flatnonzero(levels > VOICED_DB)
    if not voiced.size:
        raise ValueError(f"no speech in the audio of {u.text!r}")
    return _Template(u.text.split(), levels[voiced[0] : voiced[-1] + 1])


def contour_distance(heard: np.ndarray, template: np.ndarray, *, complete: bool) -> float:
    """How unlike `template` the `heard` levels (from the utterance's first voiced frame) are,
    in dB: the mean level difference at the best onset shift, plus a length penalty (heard
    longer than the template; or, once the utterance is over, any difference)."""
    best = np.inf
    for shift in range(-_MAX_SHIFT, _MAX_SHIFT + 1):
        h = heard[max(shift, 0) :]
        t = template[max(-shift, 0) :]
        k = min(h.size, t.size)
        if k:
            best = min(best, float(np.mean(np.abs(h[:k] - t[:k]))))
    excess = (heard.size - template.size) / template.size
    length = abs(excess) if complete else max(excess, 0.0)
    return best + 20.0 * length


@dataclass
class _Utterance:
    """The utterance being heard on one connection."""

    first_frame: int
    levels: list[float] = field(default_factory=list)
    voiced_len: int = 0  # frames up to and including the last voiced one
    words_out: int = 0  # words already in final results
    template: _Template | None = None  # fixed once words are final


class _ContourListener(DeepgramListener):
    """Names each utterance after the given one whose loudness contour is nearest."""

    def __init__(
        self, templates: Sequence[_Template], params: dict[str, str], interim_every: int
    ) -> None:
        super().__init__(params, interim_every)
        self.templates = templates
        self.utt: _Utterance | None = None

    def _frames(self, pcm: np.ndarray) -> Iterable[tuple[float, bool]]:
        return ((float(level), level > VOICED_DB) for level in frame_levels(pcm))

    def _start(self, frame: int) -> None:
        self.utt = _Utterance(first_frame=frame)

    def _voiced(self, frame: int, value: float) -> None:
        assert self.utt is not None
        self.utt.levels.append(value)
        self.utt.voiced_len = len(self.utt.levels)

    def _quiet(self, value: float) -> None:
        assert self.utt is not None
        self.utt.levels.append(value)

    def _interim_due(self) -> bool:
        return self.utt is not None and self.utt.voiced_len % self.interim_every == 0

    def _match(self, utt: _Utterance, *, complete: bool) -> _Template:
        if utt.template is not None:
            return utt.template
        heard = np.array(utt.levels[: utt.voiced_len])
        return min(
            self.templates, key=lambda t: contour_distance(heard, t.levels, complete=complete)
        )

    def _words(
        self, *, is_final: bool, speech_final: bool, from_finalize: bool
    ) -> tuple[list[tuple[str, float, float]], bool]:
        utt = self.utt
        words: list[tuple[str, float, float]] = []
        ended = False
        if utt is not None and utt.voiced_len:
            # Over once Deepgram's endpoint silence has passed, or at a Finalize in a pause.
            over = speech_final or (from_finalize and self.silent > 0)
            template = self._match(utt, complete=over)
            n = len(template.words)
            heard = utt.voiced_len / template.levels.size
            upto = n if heard >= _COMPLETE and (over or is_final) else min(n, int(n * heard))
            upto = max(upto, utt.words_out)
            span = template.levels.size * FRAME_S / n
            t0 = utt.first_frame * FRAME_S
            words = [
                (w, t0 + k * span, t0 + (k + 1) * span)
                for k, w in enumerate(template.words[utt.words_out : upto], utt.words_out)
            ]
            if is_final:
                utt.words_out = upto
                if words:
                    utt.template = template
                ended = speech_final or (over and upto == n)
                if ended:
                    self.recognised.append(" ".join(template.words))
        if ended:
            self.utt = None
        return words, ended


def utterance_recogniser(
    utterances: Sequence[Utterance], interim_every_frames: int = 10
) -> Recogniser:
    """Hears real speech as the nearest of `utterances` (and nothing else), revealing its
    words as the audio goes on."""
    if not utterances:
        raise ValueError("the double needs the utterances it is to recognise")
    templates = [_template(u) for u in utterances]
    return lambda params: _ContourListener(templates, params, interim_every_frames)


# ---- hearing test audio of word codes ---------------------------------------------------------

_SILENCE_BELOW = 500


def word_code(utterance: int, word: int) -> int:
    return 1000 + 100 * utterance + word


def speech(utterance: int, words: int, frames_per_word: int = 5) -> np.ndarray:
    """Test audio that `word_code_recogniser(script)` hears as the first `words` words of
    script[utterance]: 20 ms frames whose samples all carry the word's code."""
    codes = [word_code(utterance, w) for w in range(words) for _ in range(frames_per_word)]
    return np.repeat(np.array(codes, dtype=np.int16), FRAME_SAMPLES)


def silence(ms: int) -> np.ndarray:
    return np.zeros(ms * 16, dtype=np.int16)


class _WordCodeListener(DeepgramListener):
    """Reads each frame's code as a word of the script (see `speech`); zeros are silence."""

    def __init__(self, script: Sequence[str], params: dict[str, str], interim_every: int) -> None:
        super().__init__(params, interim_every)
        self.script = script
        self.words: list[list[int]] = []  # [code, first frame, last frame] per word
        self.voiced = 0  # voiced frames since the last final result

    def _frames(self, pcm: np.ndarray) -> Iterable[tuple[float, bool]]:
        return (
            (code, abs(code) >= _SILENCE_BELOW) for code in (int(c) for c in pcm[::FRAME_SAMPLES])
        )

    def _voiced(self, frame: int, value: float) -> None:
        code = int(value)
        if self.words and self.words[-1][0] == code:
            self.words[-1][2] = frame
        else:
            self.words.append([code, frame, frame])
        self.voiced += 1

    def _interim_due(self) -> bool:
        return self.voiced % self.interim_every == 0

    def _word(self, code: int) -> str:
        u, w = divmod(code - 1000, 100)
        return self.script[u].split()[w]

    def _words(
        self, *, is_final: bool, speech_final: bool, from_finalize: bool
    ) -> tuple[list[tuple[str, float, float]], bool]:
        words = [
            (self._word(c), first * FRAME_S, (last + 1) * FRAME_S) for c, first, last in self.words
        ]
        if is_final:
            self.words, self.voiced = [], 0
        return words, speech_final


def word_code_recogniser(script: Sequence[str], interim_every_frames: int = 5) -> Recogniser:
    """Hears the test audio of `speech()` deterministically: word `w` of utterance `u` reads
    as `script[u].split()[w]`. All timing is audio time (frames received), never the wall
    clock."""
    return lambda params: _WordCodeListener(script, params, interim_every_frames)
