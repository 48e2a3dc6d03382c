"""End-of-turn detectors side by side: accuracy on complete vs. unfinished utterances and the
cost of one decision on this machine.

`voxroom bench turn-detectors [--detectors smart-turn,livekit] [--json PATH]`

Each sentence is synthesized once, whole, with a pause at a natural break, so that the words
before the pause keep the intonation of an unfinished sentence, as a thinking pause has
(espeak-ng: an SSML `<break>`; Piper: each part said in the context of the other). A detector
is then asked what the turn engine asks at a candidate end: the Whisper tiny.en transcript
and the audio up to `TRAILING_S` into the quiet, once at the pause ("unfinished": the right
answer is a low score) and once after the last word ("complete": a high score). A third set,
"hesitant", ends in a filler ("My question is about, uh"), which Whisper often leaves out of
the transcript: the right answer is a low score there too. None of these sentences is in the
`voxroom bench` turn-taking corpus, so the endpointing thresholds
(`state_machine.endpointing.EndpointOptions`) are not tuned on the items that judge them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent.engines import INPUT_RATE

VOICES = ("piper-joe", "en-us", "en-gb", "en-us+f3", "en-gb-scotland", "en-029")
BREAK_MS = 700
TRAILING_S = 0.08  # the candidate is requested after 60 ms of quiet; the score comes then

# The text before "|" is said, then a pause, then the rest.
SENTENCES = (
    "Could you tell me | which bus goes to the airport?",
    "I was wondering | if you could book me a table for two.",
    "What is the name of | the longest river in Africa?",
    "Can you remind me | to water the plants on Sunday?",
    "How long does it take to | drive from Paris to Lyon?",
    "I would like to know | whether the museum is open tomorrow.",
    "Tell me about | the history of the Roman empire.",
    "Where can I find | a good place to eat near the station?",
    "My question is | how many calories are in an apple?",
    "Do you know | when the next train to Boston leaves?",
    "I need a recipe for dinner, so, um, | something with chicken.",
    "Set an alarm for | seven thirty tomorrow morning.",
    "What would happen if | the moon disappeared?",
    "Please play some music | that is good for studying.",
    "Is it true that | bananas are berries?",
    "Why do we have | leap years?",
)
# Said whole, each ends in a thinking filler: the speaker is not done.
HESITANT = (
    "Can you help me with, er",
    "What I want to know is, um",
    "Tell me about the weather, and, uh",
    "I think the best option is, um",
    "My question is about, uh",
    "How do I, um",
    "Find me a hotel near, uh",
    "I'd like to order a pizza with, um",
)


@dataclass(frozen=True)
class Case:
    sentence: str
    voice: str
    complete: bool
    pcm: np.ndarray
    text: str = ""  # what Whisper heard
    hesitant: bool = False  # ends in a filler (HESITANT)


def _espeak_ssml(ssml: str, voice: str) -> np.ndarray:
    import soundfile as sf
    import soxr

    with tempfile.TemporaryDirectory() as d:
        wav = Path(d) / "s.wav"
        subprocess.run(
            ["espeak-ng", "-m", "-v", voice, "-s", "160", "-w", str(wav), ssml],
            check=True,
            capture_output=True,
        )
        audio, rate = sf.read(str(wav), dtype="float32")
    audio = soxr.resample(audio, rate, INPUT_RATE) if rate != INPUT_RATE else audio
    return (np.clip(audio, -1, 1) * 32767).astype(np.int16)


def _voiced(pcm: np.ndarray, threshold: int = 500) -> np.ndarray:
    return np.flatnonzero(np.abs(pcm.astype(np.int32)) > threshold)


def _pause_end(pcm: np.ndarray, min_gap_s: float) -> int:
    """The sample where the longest quiet gap inside the speech begins."""
    loud = _voiced(pcm)
    gaps = np.diff(loud)
    i = int(np.argmax(gaps))
    if gaps[i] < min_gap_s * INPUT_RATE:
        raise ValueError("the synthesized sentence has no pause")
    return int(loud[i]) + 1


def _piper_parts(before: str, after: str) -> tuple[np.ndarray, np.ndarray]:
    import soxr

    from tts.piper_tts import PIPER_RATE, load_voice, synthesize_in_context

    voice = load_voice()
    parts = []
    for text, left, right in ((before, "", after), (after, before, "")):
        audio = synthesize_in_context(voice, text, left, right)
        if audio is None:
            raise ValueError(f"Piper could not align {before!r} | {after!r}")
        audio = soxr.resample(audio, PIPER_RATE, INPUT_RATE)
        parts.append((np.clip(audio, -1, 1) * 32767).astype(np.int16))
    return parts[0], parts[1]


def _said(sentence: str, voice: str) -> tuple[np.ndarray, np.ndarray]:
    """The speech before the pause, and the whole sentence with the pause."""
    before, after = (p.strip() for p in sentence.split("|"))
    if voice == "piper-joe":
        first, rest = _piper_parts(before, after)
        pause = np.zeros(round(BREAK_MS / 1000 * INPUT_RATE), np.int16)
        pcm = np.concatenate([first, pause, rest])
    else:
        pcm = _espeak_ssml(f'<speak>{before} <break time="{BREAK_MS}ms"/> {after}</speak>', voice)
    loud = _voiced(pcm)
    start, end = int(loud[0]), int(loud[-1]) + 1
    return pcm[start : _pause_end(pcm, BREAK_MS / 2000)], pcm[start:end]


def cases(voices: tuple[str, ...] = VOICES) -> list[Case]:
    out = []
    tail = np.zeros(round(TRAILING_S * INPUT_RATE), np.int16)
    for voice in voices:
        for s in SENTENCES:
            try:
                unfinished, whole = _said(s, voice)
            except ValueError as e:
                print(f"left out: {e}")
                continue
            out.append(Case(s, voice, False, np.concatenate([unfinished, tail])))
            out.append(Case(s, voice, True, np.concatenate([whole, tail])))
        for s in HESITANT:
            out.append(
                Case(s, voice, False, np.concatenate([_said_whole(s, voice), tail]), hesitant=True)
            )
    return out


def _said_whole(sentence: str, voice: str) -> np.ndarray:
    if voice == "piper-joe":
        import soxr

        from tts.piper_tts import PIPER_RATE, load_voice, synthesize_in_context

        audio = synthesize_in_context(load_voice(), sentence, "", "")
        if audio is None:
            raise ValueError(f"Piper could not say {sentence!r}")
        pcm = (np.clip(soxr.resample(audio, PIPER_RATE, INPUT_RATE), -1, 1) * 32767).astype(
            np.int16
        )
    else:
        pcm = _espeak_ssml(f"<speak>{sentence}</speak>", voice)
    loud = _voiced(pcm)
    return pcm[int(loud[0]) : int(loud[-1]) + 1]


def transcribed(all_cases: list[Case]) -> list[Case]:
    """The cases with the transcript the turn engine would have at the pause."""
    import asyncio
    from dataclasses import replace

    from agent.adapters.stt.whisper import WhisperSTT

    stt = WhisperSTT()
    stt.load()

    async def heard() -> list[str]:
        return [await stt.transcribe(c.pcm) for c in all_cases]

    return [replace(c, text=t) for c, t in zip(all_cases, asyncio.run(heard()), strict=True)]


# Each model's own decision threshold: Smart Turn's 0.5; LiveKit's "unlikely" threshold for
# English in livekit-agents (0.36); for the text model, the middle of voxroom's
# EndpointOptions band (unfinished <= 0.003, complete >= 0.03).
THRESHOLDS = {"text": 0.015, "text+smart-turn": 0.015, "smart-turn": 0.5, "livekit": 0.36}


def ordered_pairs(done: list[float], unfinished: list[float]) -> float:
    """The share of (complete, unfinished) pairs the score puts in the right order (the area
    under the ROC curve; 0.5 is chance), whatever the threshold."""
    right = sum((d > u) + 0.5 * (d == u) for d in done for u in unfinished)
    return right / (len(done) * len(unfinished))


def evaluate(name: str, all_cases: list[Case], threshold: float | None = None) -> dict[str, Any]:
    from agent.adapters.turn_detector import make_detector
    from state_machine.endpointing import EndpointOptions, silence_for_score

    det = make_detector(name)
    assert det is not None
    threshold = THRESHOLDS[name] if threshold is None else threshold
    t0 = time.perf_counter()
    det.load()
    load_s = time.perf_counter() - t0
    scores, wall, cpu = [], [], []
    for c in all_cases:
        w0, c0 = time.perf_counter(), time.process_time()
        # Every detector make_detector returns scores blocking too; the Protocol names score().
        scores.append(det.score_now(c.text, c.pcm))  # type: ignore[attr-defined]
        wall.append((time.perf_counter() - w0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    done = [s for s, c in zip(scores, all_cases, strict=True) if c.complete]
    unfinished = [
        s for s, c in zip(scores, all_cases, strict=True) if not c.complete and not c.hesitant
    ]
    hesitant = [s for s, c in zip(scores, all_cases, strict=True) if c.hesitant]
    band = EndpointOptions(scored=True)
    waits = band.unfinished_score  # at or below it, the longest wait
    wall.sort()
    # The endpoint silence each score gets with voxroom's band (meant for the text scores):
    # complete questions that wait long, unfinished starts that end inside a pause.
    done_s = [silence_for_score(band, s) for s in done]
    unfinished_s = [silence_for_score(band, s) for s in unfinished + hesitant]
    return {
        "detector": name,
        "threshold": threshold,
        "auc": round(ordered_pairs(done, unfinished), 3),
        "load_s": round(load_s, 2),
        "complete_recall": round(sum(s >= threshold for s in done) / len(done), 3),
        "unfinished_recall": round(sum(s < threshold for s in unfinished) / len(unfinished), 3),
        "unfinished_above_0.8": sum(s >= 0.8 for s in unfinished),
        # the shares that get the longest wait: all hesitant ones should, no complete one
        "hesitant_longest_wait": round(sum(s <= waits for s in hesitant) / len(hesitant), 3),
        "complete_longest_wait": round(sum(s <= waits for s in done) / len(done), 3),
        "complete_below_0.2": sum(s < 0.2 for s in done),
        "complete_waits_over_0.7s": sum(w > 0.7 for w in done_s),
        "unfinished_ends_within": {
            f"{p}s": sum(w < p for w in unfinished_s) for p in (0.5, 0.7, 0.9)
        },
        "score_complete_p50": round(statistics.median(done), 3),
        "score_unfinished_p50": round(statistics.median(unfinished), 3),
        "ms_p50": round(wall[len(wall) // 2], 1),
        "ms_p95": round(wall[int(0.95 * (len(wall) - 1))], 1),
        "cpu_ms_p50": round(sorted(cpu)[len(cpu) // 2], 1),
        "scores": [
            {
                "sentence": c.sentence,
                "voice": c.voice,
                "complete": c.complete,
                "hesitant": c.hesitant,
                "heard": c.text,
                "score": round(s, 4),
            }
            for s, c in zip(scores, all_cases, strict=True)
        ],
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--detectors", default="text+smart-turn,text,smart-turn,livekit")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="a score at or above it counts as 'complete' (default: each model's)",
    )
    p.add_argument(
        "--opus",
        action="store_true",
        help="each case through an Opus encode and decode at 48 kHz first, as LiveKit carries it",
    )


def run(args: argparse.Namespace) -> int:
    all_cases = cases()
    if args.opus:
        from dataclasses import replace

        from bench.stt_ceiling import opus_round_trip

        all_cases = [replace(c, pcm=opus_round_trip(c.pcm)) for c in all_cases]
    all_cases = transcribed(all_cases)
    results = [evaluate(name, all_cases, args.threshold) for name in args.detectors.split(",")]
    print(
        f"{len(all_cases)} cases ({len(SENTENCES)} sentences x {len(VOICES)} voices, each "
        f"unfinished at its pause and complete, and {len(HESITANT)} hesitant ones a voice), "
        f"load {os.getloadavg()[0]:.2f}"
    )
    for r in results:
        print(
            f"{r['detector']:>15}: ordered pairs (AUC) {r['auc']:.2f}; at {r['threshold']}: "
            f"complete recall {r['complete_recall']:.2f}, unfinished "
            f"recall {r['unfinished_recall']:.2f} (unfinished >= 0.8: "
            f"{r['unfinished_above_0.8']}, complete < 0.2: {r['complete_below_0.2']}); "
            f"longest wait: hesitant {r['hesitant_longest_wait']:.2f}, complete "
            f"{r['complete_longest_wait']:.2f}; complete waiting over 0.7 s "
            f"{r['complete_waits_over_0.7s']}, unfinished ending within 0.5/0.7/0.9 s "
            f"{'/'.join(str(n) for n in r['unfinished_ends_within'].values())}; "
            f"median score {r['score_complete_p50']:.2f} / {r['score_unfinished_p50']:.2f}; "
            f"{r['ms_p50']:.0f} / {r['ms_p95']:.0f} ms a decision (p50/p95), CPU "
            f"{r['cpu_ms_p50']:.0f} ms; load {r['load_s']:.1f} s"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"load_average": os.getloadavg(), "results": results}, indent=2)
        )
    return 0
