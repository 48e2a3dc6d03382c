"""Streaming STT benchmark: Whisper tiny.en partials and finals on spoken utterances of 2-6 s.

Each sentence is spoken by espeak-ng or the bundled Piper voice (alternately; cached as WAVs
under .cache/bench/), trimmed to 30 ms of silence at each end, and fed in real time in 20 ms
frames: 0.2 s of silence, the speech, then `--trailing-silence-s` of silence (what the VAD
waits before it declares the endpoint), then `finalize()`. Per utterance:

- first partial: speech start (first sample above -36 dBFS) -> first partial transcript
- final: finalize() called -> final transcript returned (the endpoint -> final part of the
  latency budget, <= 250 ms)
- WER of the final against the sentence (lower case, no punctuation, numbers as words)

`voxroom bench stt [--mode default|full|beam] [--sentences assistant|copilot]
[--voice both|espeak|piper]`
`--mode full` is the simple approach (every final decodes the whole utterance, no committed
prefix), for comparison; `--mode beam` searches every final with the beam, over the whole
utterance; `--sentences copilot` asks the copilot document sets' questions. The machine is
shared: the load average is printed with the results.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.engines import FRAME_SAMPLES, INPUT_RATE
from bench.wer import normalize

SENTENCES = (
    "What time is it in Tokyo right now?",
    "Can you set a timer for ten minutes and tell me when it is done?",
    "Tell me a joke about computers.",
    "How far is the moon from the earth, and how long would it take to fly there?",
    "Please turn off the lights in the kitchen.",
    "What is the capital of Australia?",
    "I would like to book a table for two tonight at the Italian place near the river.",
    "Remind me to call my mother tomorrow morning.",
    "How do I make a good cup of green tea without it getting bitter?",
    "The weather looks great for a walk in the park this afternoon.",
    "Explain how a rainbow is formed.",
    "Who wrote the novel Pride and Prejudice, and when was it first published?",
    "Thank you, that was very helpful.",
    "Could you summarize the last meeting for me in a few short points?",
    "What are the main differences between Python and Java?",
    "My flight leaves at seven in the evening, so I need to be at the airport by five.",
    "Send a message to Sarah saying I am running late.",
    "How many people live in New York City?",
    "Play some relaxing music, please.",
    "Why is the sky blue during the day but red at sunset?",
    "I think we should start the project next week, once the design is finished.",
    "What is the best way to learn a new language as an adult?",
    "Tell me about your experience with databases and how you would design a schema.",
    "Describe a time when you solved a difficult problem at work.",
    "Good morning, how are you doing today?",
    "Add milk, eggs and bread to my shopping list.",
    "What does the word serendipity mean?",
    "Let me know when the package arrives, and leave it at the front door.",
    "Where is the nearest train station?",
    "Can you walk me through the steps to reset my password?",
)

CACHE_DIR = Path(".cache/bench")
LEAD_S = 0.2
SPEECH_THRESHOLD = 500  # int16 amplitude, about -36 dBFS


async def piper_speech(text: str) -> np.ndarray:
    """`text` spoken by the bundled Piper voice at 16 kHz int16."""
    from tts.piper_tts import PiperTTS

    tts = PiperTTS(output_rate=INPUT_RATE)
    tts.load()
    return await tts.synthesize(text)


async def speech(voice: str, text: str) -> np.ndarray:
    """Cached 16 kHz int16 speech of `text` by `voice` ("espeak" or "piper")."""
    import soundfile as sf

    from bench.speech import espeak

    key = hashlib.sha256(f"{voice}\n{text}".encode()).hexdigest()[:16]
    path = CACHE_DIR / f"stt-{voice}-{key}.wav"  # bench/corpus.py caches here too
    if not path.exists():
        pcm = espeak(text) if voice == "espeak" else await piper_speech(text)
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(path, pcm, INPUT_RATE, subtype="PCM_16")
    return sf.read(path, dtype="int16")[0]


def trim_silence(pcm: np.ndarray, keep_s: float = 0.03) -> np.ndarray:
    """Cut the synthesizer's own silence (above -40 dBFS is sound) down to `keep_s` at each
    end, so every utterance ends with exactly the trailing silence the benchmark adds."""
    sound = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 330)
    if not sound.size:
        return pcm
    keep = round(keep_s * INPUT_RATE)
    return pcm[max(0, sound[0] - keep) : sound[-1] + 1 + keep]


@dataclass
class Result:
    voice: str
    text: str
    final: str
    duration_s: float
    first_partial_ms: float | None
    partials: int
    final_ms: float
    wer: float


async def run_one(stt, voice: str, text: str, trailing_s: float) -> Result:
    import jiwer

    pcm = trim_silence(await speech(voice, text))
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > SPEECH_THRESHOLD)
    lead = np.zeros(round(LEAD_S * INPUT_RATE), np.int16)
    audio = np.concatenate([lead, pcm, np.zeros(round(trailing_s * INPUT_RATE), np.int16)])
    speech_start_s = LEAD_S + (loud[0] if loud.size else 0) / INPUT_RATE

    stream = stt.stream()
    partial_times: list[float] = []

    async def collect() -> None:
        async for _ in stream.partials():
            partial_times.append(time.monotonic())

    collector = asyncio.create_task(collect())
    t0 = time.monotonic()
    for i in range(0, len(audio), FRAME_SAMPLES):
        stream.push(audio[i : i + FRAME_SAMPLES])
        await asyncio.sleep(max(0.0, t0 + (i + FRAME_SAMPLES) / INPUT_RATE - time.monotonic()))
    t_final = time.monotonic()
    final = await stream.finalize()
    final_ms = (time.monotonic() - t_final) * 1000
    await stream.aclose()
    await collector
    first = (partial_times[0] - t0 - speech_start_s) * 1000 if partial_times else None
    return Result(
        voice,
        text,
        final,
        len(pcm) / INPUT_RATE,
        first,
        len(partial_times),
        final_ms,
        jiwer.wer(normalize(text), normalize(final)),
    )


def percentiles(values: list[float]) -> str:
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return f"p50 {p50:7.1f}  p95 {p95:7.1f}  p99 {p99:7.1f}  (n={len(values)})"


def copilot_questions() -> list[str]:
    """The questions of every copilot document set (bench/copilot_data/)."""
    from bench.copilot_bench import document_sets, load_questions

    return [q.question for d in document_sets() for q in load_questions(d / "questions.json")]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, choices, what in (  # the first choice is the default
        (
            "--mode",
            ("default", "full", "beam"),
            "full: no committed prefix, no reused endpoint decode; beam: every final a beam "
            "search over the whole utterance",
        ),
        (
            "--sentences",
            ("assistant", "copilot"),
            "copilot: every copilot document set's questions",
        ),
        ("--voice", ("both", "espeak", "piper"), "both: espeak-ng and Piper by turns"),
    ):
        parser.add_argument(flag, choices=choices, default=choices[0], help=what)
    parser.add_argument("--trailing-silence-s", type=float, default=0.3)
    parser.add_argument("--limit", type=int, help="only the first N sentences")
    parser.add_argument("--end-pad-s", type=float, help="WhisperOptions.end_pad_s, to tune it")


def run(args: argparse.Namespace) -> int:
    asyncio.run(_run(args))
    return 0


async def _run(args: argparse.Namespace) -> None:
    from agent.adapters.stt.whisper import WhisperSTT
    from agent.adapters.stt.whisper_options import WhisperOptions

    options = WhisperOptions()
    if args.end_pad_s is not None:
        options = dataclasses.replace(options, end_pad_s=args.end_pad_s)
    if args.mode == "full":
        options = dataclasses.replace(
            options, reuse_endpoint_decode=False, commit_agreed_prefix=False
        )
    elif args.mode == "beam":  # every real score is below 0: every final is unsure
        options = dataclasses.replace(options, unsure_logprob=0.0)
    sentences = copilot_questions() if args.sentences == "copilot" else list(SENTENCES)
    voices = ("espeak", "piper") if args.voice == "both" else (args.voice,)
    utterances = [(voices[i % len(voices)], s) for i, s in enumerate(sentences[: args.limit])]
    for voice, text in utterances:  # synthesize before the clock matters
        await speech(voice, text)
    stt = WhisperSTT(options=options)
    stt.load()
    stt.warmup()

    load_before = os.getloadavg()
    results = [await run_one(stt, v, s, args.trailing_silence_s) for v, s in utterances]
    load_after = os.getloadavg()

    import jiwer

    for r in results:
        first = f"{r.first_partial_ms:6.0f}" if r.first_partial_ms is not None else "     -"
        print(
            f"{r.voice:6s} {r.duration_s:4.1f}s  first {first} ms  final {r.final_ms:5.0f} ms  "
            f"partials {r.partials:2d}  WER {r.wer:.2f}  {r.final!r}"
        )
    firsts = [r.first_partial_ms for r in results if r.first_partial_ms is not None]
    durations = [r.duration_s for r in results]
    print(
        f"\nmode={args.mode}  sentences={args.sentences}  voice={args.voice}  "
        f"trailing silence {args.trailing_silence_s * 1000:.0f} ms  "
        f"speech {min(durations):.1f}-{max(durations):.1f} s  "
        f"load avg before {load_before[0]:.2f} after {load_after[0]:.2f} (2 shared cores)"
    )
    print(f"first partial after speech start (ms): {percentiles(firsts)}")
    print(f"final after finalize() (ms):           {percentiles([r.final_ms for r in results])}")
    print(f"WER per utterance:                     {percentiles([r.wer for r in results])}")
    corpus = jiwer.wer([normalize(r.text) for r in results], [normalize(r.final) for r in results])
    print(
        f"WER over all utterances: {corpus:.3f}   "
        f"utterances without a partial: {sum(r.first_partial_ms is None for r in results)}"
    )
