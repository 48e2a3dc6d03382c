"""Interview copilot benchmark: end of an interviewer's question -> first answer words, and
-> the whole answer, with the bundled models and no LiveKit.

Each question is spoken by espeak-ng and fed in real time, in 20 ms frames, into the
`CopilotEngine` with its real parts: webrtcvad, Whisper tiny.en, the MiniLM context index over
a sample resume and job description (bench/copilot_data/), and the bundled Qwen2.5-0.5B served
by llama.cpp (its prompt cache warmed by `CopilotEngine.warm()`; the question read ahead from
the STT's partials while it is spoken, and answers written through `/completion` in a layout
with a short end after the question, agent.adapters.llm.prefill). A recording sink
stands in for the candidate's screen. The end of the question is the last voiced sample of
the speech fed; the next question starts after the answer is complete.

Each answer is scored (bench/copilot_quality.py: grounded in its question's expected facts,
faithful to the documents, in the candidate's voice, short) and printed with its question; the
rates close the run. The documents and questions are `--resume`, `--job-description` and
`--questions-file` (default: the backend engineer's set in bench/copilot_data/; nurse/ and
marketing/ hold two more, and teacher/ one held out: written before tuning against the others'
failures, run only to check that the copilot did not overfit them).

`voxroom bench copilot [--questions N] [--llm local|script:PATH]`
By default the documents are the prompt's stable prefix, warmed before the first question
(CopilotOptions.stable_prefix_max_chars); `--stable-prefix-chars 0` puts the `--pieces N`
nearest chunks into each prompt instead; `--no-prefill` turns the read-ahead off. `--json PATH`
writes every answer's timings (and the read-ahead requests of its question). The
machine is shared: the load average is printed with the results.

First words: the first text on the screen that holds a letter or digit (not the "- " of a
bullet); whole answer: the answer's stream closed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from agent.copilot.events import CopilotEvent
from agent.engines import FRAME_SAMPLES, INPUT_RATE
from agent.events import event_json
from bench.copilot_quality import word_count
from state_machine.options import CopilotOptions

if TYPE_CHECKING:
    from agent.copilot.context.index import ContextIndex

DATA = Path(__file__).resolve().parent / "copilot_data"
"""The default document set (a backend engineer); its subfolders hold the others (nurse,
marketing, teacher, accountant, warehouse), each a resume.md, a job_description.md and a
questions.json."""


def document_sets() -> list[Path]:
    """Every document set's folder: DATA, then its subfolders by name."""
    subfolders = sorted(p for p in DATA.iterdir() if (p / "questions.json").is_file())
    return [DATA, *subfolders]


@dataclass(frozen=True)
class Question:
    question: str
    facts: tuple[str, ...]
    """Phrases from the documents; the answer is grounded when it holds one of them."""


def load_questions(path: Path) -> list[Question]:
    """A JSON list of {"question": "...", "facts": ["...", ...]}; ValueError says what is
    wrong with it."""
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: {e}") from e
    if not isinstance(items, list) or not items:
        raise ValueError(f"{path}: expected a non-empty JSON list of questions")
    questions = []
    for i, item in enumerate(items):
        ok = (
            isinstance(item, dict)
            and isinstance(item.get("question"), str)
            and isinstance(item.get("facts", []), list)
            and all(isinstance(f, str) for f in item.get("facts", []))
        )
        if not ok or not item["question"].strip():
            raise ValueError(f'{path}: item {i} is not {{"question": str, "facts": [str]}}')
        questions.append(Question(item["question"].strip(), tuple(item.get("facts", []))))
    return questions


def documents(args: argparse.Namespace) -> dict[str, str]:
    """The candidate's documents by the names the copilot knows them by."""
    return {
        "resume": args.resume.read_text(encoding="utf-8"),
        "job_description": args.job_description.read_text(encoding="utf-8"),
    }


def documents_index(docs: dict[str, str]) -> ContextIndex:
    """The real MiniLM index of `docs` (by the names the copilot knows them by)."""
    from agent.adapters.embedder import MiniLMEmbedder
    from agent.copilot.context.index import ContextIndex

    embedder = MiniLMEmbedder()
    embedder.load()
    index = ContextIndex(embedder)
    for name, text in docs.items():
        index.add_document(name, text)
    return index


def asked(args: argparse.Namespace) -> list[Question]:
    """`--questions N` of the questions file, in order, from its start again if N is more."""
    questions = load_questions(args.questions_file)
    n = args.questions or len(questions)
    return [questions[i % len(questions)] for i in range(n)]


SHORT_ANSWER_WORDS = 12  # the goal's "short answer": one line the candidate reads at a glance
LINE_END = re.compile(r"\w[.!?]?[ \t]*\n|\w[.!?]\s")  # a line or sentence with words ended


@dataclass
class TimedSink:
    """The candidate's screen: when each answer's first text, its first line or sentence (the
    direct answer the prompt asks for first) and its end arrived."""

    opened: dict[int, str] = field(default_factory=dict)
    first: dict[int, float] = field(default_factory=dict)
    first_word: dict[int, float] = field(default_factory=dict)
    first_line: dict[int, float] = field(default_factory=dict)
    text: dict[int, str] = field(default_factory=dict)
    closed: dict[int, tuple[float, str]] = field(default_factory=dict)

    async def open(self, answer_id: int, question: str) -> None:
        self.opened[answer_id] = question
        self.text[answer_id] = ""

    async def write(self, answer_id: int, text: str) -> None:
        now = time.monotonic()
        self.first.setdefault(answer_id, now)
        self.text[answer_id] += text
        if any(c.isalnum() for c in self.text[answer_id]):
            self.first_word.setdefault(answer_id, now)
        if LINE_END.search(self.text[answer_id]):
            self.first_line.setdefault(answer_id, now)

    async def close(self, answer_id: int, status: str) -> None:
        now = time.monotonic()
        self.closed[answer_id] = (now, status)
        if answer_id in self.first_word:  # an answer of one line, without a line end
            self.first_line.setdefault(answer_id, now)


def speak(text: str) -> np.ndarray:
    from bench.speech import espeak

    return espeak(text)


async def run_questions(args: argparse.Namespace) -> list[dict]:
    from agent.adapters.llm.prefill import llama_client_for
    from agent.adapters.providers import open_llm
    from agent.adapters.stt.whisper import WhisperSTT
    from agent.copilot.engine import CopilotEngine
    from agent.copilot.prompts import COPILOT_SYSTEM_PROMPT
    from agent.models import offline_env
    from bench.speech import last_voiced_sample

    offline_env()
    stt = WhisperSTT()
    stt.load()
    stt.warmup()
    docs = documents(args)
    index = documents_index(docs)
    questions = asked(args)
    speech = [speak(q.question) for q in questions]

    from agent.config import LLMSettings

    settings = LLMSettings(system_prompt=COPILOT_SYSTEM_PROMPT, max_tokens=args.max_tokens)
    results = []
    async with open_llm(settings, args.llm) as llm:
        sink = TimedSink()
        options = CopilotOptions(
            context_pieces=args.pieces, stable_prefix_max_chars=args.stable_prefix_chars
        )
        # The bundled server answers through its own client (agent.adapters.llm.prefill).
        client = llama_client_for(llm)
        prefill = None if args.no_prefill else client
        events: list[dict] = []  # as JSON (agent.events.event_json)

        def on_event(event: CopilotEvent) -> None:
            if event.kind in TIMELINE_EVENTS:
                events.append(event_json(event))

        if client is not None:  # what each answer's prompt found cached and read
            client.on_answer_read = lambda r: events.append(
                {
                    "t": time.monotonic(),
                    "type": "answer_read",
                    "cached": r.cached,
                    "read": r.read,
                    "ms": round(r.ms, 1),
                }
            )
        engine = CopilotEngine(
            stt=stt,
            llm=client or llm,
            sink=sink,
            context=index,
            options=options,
            prefill=prefill,
            on_event=on_event,
        )
        await engine.start()
        warm_start = time.monotonic()
        await engine.warm()
        print(
            f"warm-up (system prompt and documents): {time.monotonic() - warm_start:.1f} s",
            flush=True,
        )
        silence = np.zeros(FRAME_SAMPLES, np.int16)
        start = time.monotonic()
        sent = 0  # frames fed, on the real-time schedule
        try:
            for q, pcm in zip(questions, speech, strict=True):
                question = q.question
                pcm = np.concatenate([np.zeros(INPUT_RATE // 2, np.int16), pcm])
                pcm = np.pad(pcm, (0, -len(pcm) % FRAME_SAMPLES))
                end_sample = INPUT_RATE // 2 + last_voiced_sample(pcm[INPUT_RATE // 2 :])
                speech_end = None
                done = len(engine.answers)
                events.clear()
                for i in range(len(pcm) // FRAME_SAMPLES):
                    sent += 1
                    await asyncio.sleep(max(0.0, start + sent * 0.02 - time.monotonic()))
                    engine.push_frame(pcm[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES])
                    if speech_end is None and (i + 1) * FRAME_SAMPLES >= end_sample:
                        # this frame holds the last voiced sample; it "ends" that much earlier
                        late = ((i + 1) * FRAME_SAMPLES - end_sample) / INPUT_RATE
                        speech_end = time.monotonic() - late
                deadline = time.monotonic() + args.timeout_s
                while time.monotonic() < deadline and not (
                    len(engine.answers) > done
                    and engine.answers[-1].done_at is not None
                    and engine.idle
                ):
                    sent += 1
                    await asyncio.sleep(max(0.0, start + sent * 0.02 - time.monotonic()))
                    engine.push_frame(silence)
                results.append(_result(question, speech_end, engine.answers[done:], sink))
                if speech_end is not None:
                    results[-1]["timeline"] = _timeline(events, speech_end)
                score(results[-1], q, docs)
                print(json.dumps(results[-1]), flush=True)
        finally:
            await engine.aclose()
            if client is not None:
                await client.aclose()
    index.close()
    return results


TIMELINE_EVENTS = (
    "speech_end",
    "candidate_requested",
    "transcript",
    "prefill",
    "answer_started",
    "answer_cancelled",
)


def _timeline(events: list[dict], speech_end: float) -> list[list]:
    """The events of one question (the engine's and "answer_read"): [ms after the end of the
    question, kind, what]."""
    out = []
    for event in events:
        kind = event["type"]
        what = {
            k: v for k, v in event.items() if k not in ("t", "type", "utterance_id", "answer_id")
        }
        if kind == "speech_end":  # when the endpointer saw the last voiced frame
            what = {"last_voiced_ms": round((event["last_voiced"] - speech_end) * 1000)}
        out.append([round((event["t"] - speech_end) * 1000), kind, what])
    return out


def _result(question: str, speech_end: float | None, answers: list, sink: TimedSink) -> dict:
    if not answers or speech_end is None:
        return {"question": question, "answered": False}
    a = answers[-1]
    shown = a.answer_id if a.replacement_id is None else a.replacement_id

    def ms(t: float | None) -> float | None:
        return None if t is None else round((t - speech_end) * 1000)

    return {
        "question": question,
        "answered": True,
        "heard": a.question,
        "speculative": a.speculative,
        "endpoint_ms": ms(a.committed_at),
        "llm_started_ms": ms(a.started_at),
        "llm_first_token_ms": ms(a.first_token_at),
        "first_text_ms": ms(sink.first.get(a.answer_id)),
        "first_words_ms": ms(sink.first_word.get(a.answer_id)),
        "first_line_ms": ms(sink.first_line.get(a.answer_id)),
        "whole_answer_ms": ms(sink.closed.get(a.answer_id, (None,))[0]),
        "status": a.status,
        "answer": sink.text.get(shown, ""),
        "answer_words": word_count(sink.text.get(shown, "")),
        "replaced": a.replacement_id is not None,
        "llm_answer": a.llm_text or a.text,
        "problems": a.problems,
        "relevant": [p.text for p in a.relevant],
        "pieces": [p.text[:60] for p in a.pieces],
    }


def score(result: dict, question: Question, docs: dict[str, str]) -> None:
    """Add the answer's quality (bench.copilot_quality) to `result`."""
    from bench.copilot_quality import score_answer, vocabulary

    result["facts"] = list(question.facts)
    if result.get("answered"):
        vocab = vocabulary([*docs.values(), question.question])
        result["score"] = score_answer(result["answer"], question.facts, vocab).as_json()
        if result.get("replaced"):  # what the model wrote, before the guard replaced it
            result["llm_score"] = score_answer(
                result["llm_answer"], question.facts, vocab
            ).as_json()
        if "relevant" in result:  # did retrieval find a piece that holds a fact?
            pieces = " ".join(result["relevant"]).lower()
            result["retrieval_hit"] = any(f.lower() in pieces for f in question.facts)


def summarize_quality(results: list[dict]) -> dict[str, float]:
    """Print each question with its answer and scores, then the rates; returns the rates."""
    from bench.copilot_quality import RATES, rates

    print("\nquestion | answer | grounded faithful voice short")
    for r in results:
        s = r.get("score")
        marks = " ".join(("+" if s[k] else "-") for k in RATES) if s else "(no answer)"
        notes = ""
        if s and (s["invented"] or s["voice_problems"]):
            notes = f"  invented {s['invented']} voice {s['voice_problems']}"
        replaced = f"  (replaced: {r['llm_answer']!r})" if r.get("replaced") else ""
        print(f"{marks} | {r['question']} | {r.get('answer', '')!r}{notes}{replaced}")
    out = rates([r.get("score") for r in results])
    model = rates([r.get("llm_score", r.get("score")) for r in results])
    out["replaced"] = sum(1 for r in results if r.get("replaced")) / len(results)
    hits = [r["retrieval_hit"] for r in results if "retrieval_hit" in r]
    if hits:
        out["retrieval_hit"] = sum(hits) / len(hits)
    print("rates: " + ", ".join(f"{k} {v:.0%}" for k, v in out.items()) + f" (n={len(results)})")
    print(
        "the model's own answers (before the guard): "
        + ", ".join(f"{k} {v:.0%}" for k, v in model.items())
    )
    return out


def summarize(results: list[dict]) -> None:
    answered = [r for r in results if r["answered"]]
    print(
        f"\n{len(answered)}/{len(results)} questions answered; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    for key in (
        "endpoint_ms",
        "llm_started_ms",
        "llm_first_token_ms",
        "first_text_ms",
        "first_words_ms",
        "first_line_ms",
        "whole_answer_ms",
    ):
        xs = [r[key] for r in answered if r.get(key) is not None]
        if xs:
            p50, p95 = np.percentile(xs, [50, 95])
            print(f"{key:>20}: p50 {p50:6.0f}  p95 {p95:6.0f}  max {max(xs):6.0f}  (n={len(xs)})")
    short = [
        r["whole_answer_ms"]
        for r in answered
        if r.get("whole_answer_ms") is not None and r["answer_words"] <= SHORT_ANSWER_WORDS
    ]
    if short:
        p50, p95 = np.percentile(short, [50, 95])
        print(
            f"whole answer of <= {SHORT_ANSWER_WORDS} words: p50 {p50:6.0f}  p95 {p95:6.0f}  "
            f"max {max(short):6.0f}  (n={len(short)})"
        )


def add_document_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--questions",
        type=int,
        default=0,
        help="ask this many of the questions file's (default: all)",
    )
    parser.add_argument("--resume", type=Path, default=DATA / "resume.md")
    parser.add_argument("--job-description", type=Path, default=DATA / "job_description.md")
    parser.add_argument(
        "--questions-file",
        type=Path,
        default=DATA / "questions.json",
        help='a JSON list of {"question": "...", "facts": ["...", ...]}',
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_document_arguments(parser)
    parser.add_argument("--llm", default="local", help="local | openai:MODEL | script:PATH")
    defaults = CopilotOptions()
    parser.add_argument(
        "--pieces",
        type=int,
        default=defaults.context_pieces,
        help="nearest document chunks per prompt when the documents are not the stable prefix",
    )
    parser.add_argument(
        "--stable-prefix-chars",
        type=int,
        default=defaults.stable_prefix_max_chars,
        help="documents up to this size are the cached prompt prefix (0: never)",
    )
    parser.add_argument("--max-tokens", type=int, default=120, help="as llm.max_tokens")
    parser.add_argument("--timeout-s", type=float, default=15.0, help="longest wait per answer")
    parser.add_argument(
        "--no-prefill",
        action="store_true",
        help="do not read the question into the LLM's cache while it is spoken",
    )
    parser.add_argument("--json", type=Path, help="write every answer's timings here")


def run(args: argparse.Namespace) -> int:
    results = asyncio.run(run_questions(args))
    summarize(results)
    summarize_quality(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0
