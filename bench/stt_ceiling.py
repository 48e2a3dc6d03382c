"""What a Whisper model can hear of the listening corpus, apart from the streaming path.

Each item of `bench/listen_corpus.py` is Opus-coded at 48 kHz and back (libsndfile, as a
LiveKit user's audio is coded), then decoded whole by voxroom's decoder with a beam of `--beam`.
Per condition it prints the word error rate of the best hypothesis and of the n-best oracle
(the hypothesis nearest to what was said: the floor for anything that rescores that beam, a
language model or a second opinion) and the decode's cost. No LiveKit, no timing of partials:
the figures say what the model hears, so a bigger model (`--model-dir`, the `stt.model_dir`
setting) can be judged before it is deployed.

`voxroom bench stt-ceiling [--split tune|held-out] [--model-dir DIR] [--beam 8] [--json F]`
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent.engines import INPUT_RATE

_OPUS_RATE = 48_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--split", choices=("tune", "held-out"), default="tune")
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help="a CTranslate2 Whisper folder (default: the bundled tiny.en)",
    )
    parser.add_argument("--beam", type=int, default=8, help="beam size and hypotheses kept")
    parser.add_argument(
        "--no-recordings", action="store_true", help="leave out the bundled recordings' cuts"
    )
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")


def run(args: argparse.Namespace) -> int:
    if args.beam < 1:
        raise SystemExit("--beam must be at least 1")
    asyncio.run(_run(args))
    return 0


def opus_round_trip(pcm: np.ndarray) -> np.ndarray:
    """16 kHz int16 speech after an Opus encode and decode at 48 kHz."""
    import soundfile as sf
    import soxr

    wide = soxr.resample(pcm.astype(np.float32) / 32768.0, INPUT_RATE, _OPUS_RATE)
    buf = io.BytesIO()
    sf.write(buf, wide, _OPUS_RATE, format="OGG", subtype="OPUS")
    buf.seek(0)
    coded, rate = sf.read(buf, dtype="float32")
    back = soxr.resample(coded, rate, INPUT_RATE) * 32768.0
    return np.clip(np.round(back), -32768, 32767).astype(np.int16)


def oracle(said: str, hypotheses: Sequence[str]) -> str:
    """The hypothesis with the fewest word errors against `said` (the first of equals)."""
    from bench.wer import word_errors

    def edits(heard: str) -> int:
        e = word_errors(said, heard)
        return e["substitutions"] + e["deletions"] + e["insertions"]

    return min(hypotheses, key=edits)


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per kind and overall: the best hypothesis's and the oracle's WER (bench.wer)."""
    from bench.wer import wer_summary

    kinds = [*dict.fromkeys(r["kind"] for r in rows), "overall"]
    out: dict[str, Any] = {}
    for kind in kinds:
        mine = [r for r in rows if kind in ("overall", r["kind"])]
        out[kind] = {
            "best": wer_summary((r["said"], r["best"]) for r in mine),
            "oracle": wer_summary((r["said"], r["oracle"]) for r in mine),
        }
    return out


async def _run(args: argparse.Namespace) -> None:
    from agent.adapters.stt.whisper import WhisperSTT
    from agent.voice.turn_metrics import percentiles
    from bench.listen_corpus import load_listen_corpus
    from bench.measure import load_average

    items = await load_listen_corpus(split=args.split, recordings=not args.no_recordings)
    stt = WhisperSTT(args.model_dir)
    stt.load()
    stt.warmup()
    load_start = load_average()
    rows: list[dict[str, Any]] = []
    for item in items:
        audio = opus_round_trip(item.pcm)
        t0 = time.perf_counter()
        hyps = await stt.hypotheses(audio, args.beam)
        decode_ms = (time.perf_counter() - t0) * 1000
        texts = [text for text, _ in hyps] or [""]
        rows.append(
            {
                "item": item.id,
                "kind": item.kind,
                "said": item.text,
                "best": texts[0],
                "oracle": oracle(item.text, texts),
                "hypotheses": hyps,
                "decode_ms": round(decode_ms, 1),
            }
        )
        print(f"{item.id:42s} {decode_ms:5.0f} ms  {texts[0]!r}")
    figures = summary(rows)
    cost = percentiles(r["decode_ms"] for r in rows)
    model = str(args.model_dir) if args.model_dir else "bundled tiny.en"
    print(
        f"\n{model}, beam {args.beam}, {args.split} half, {len(rows)} items; "
        f"load {load_start} -> {load_average()}"
    )
    print(f"{'condition':12s} {'best':>7s} {'oracle':>7s}")
    for kind, f in figures.items():
        print(
            f"{kind:12s} {f['best']['wer']:7.3f} {f['oracle']['wer']:7.3f}   "
            f"({f['best']['words']} words)"
        )
    print(f"decode (encoder + beam) p50 / p95: {cost['p50']} / {cost['p95']} ms")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "model": model,
                    "beam": args.beam,
                    "split": args.split,
                    "load_average": {"start": load_start, "end": load_average()},
                    "decode_ms": cost,
                    "wer": figures,
                    "items": rows,
                },
                indent=1,
            )
            + "\n"
        )
