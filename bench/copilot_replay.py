"""The copilot's answers of an earlier run, judged again by today's retrieval and guard.

A `voxroom bench copilot-livekit --json RUN.json` run records, per question, what the worker
heard and what the model wrote. This feeds each of those answers, in order, through the
product's own answer limits (`agent.copilot.answers.answer_end`), retrieval and guard
(`relevant_to`, `check_answer`), with the exchange before it as the engine keeps it, and scores
what the candidate would now see. It runs in seconds without LiveKit or the LLM, so a change to
the guard or to retrieval is measured on many recorded answers before a live run confirms it;
what it cannot show is how a changed prompt changes the model's words.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

from bench.copilot_bench import (
    add_document_arguments,
    asked,
    documents,
    documents_index,
    score,
    summarize_quality,
)

RECORDED = (
    Path(__file__).resolve().parent.parent / "docs" / "bench" / "copilot-livekit-backend-guard.json"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_document_arguments(parser)
    parser.add_argument(
        "--answers",
        type=Path,
        default=RECORDED,
        help="a `copilot-livekit --json` run on the same documents and questions (default: "
        "the backend set's, recorded in docs/bench/)",
    )
    parser.add_argument("--json", type=Path, help="write every answer judged again here")


def written(model_text: str, options: Any) -> str:
    """What the answer stream keeps of `model_text`, written word by word under `options`."""
    from agent.copilot.answers import answer_end

    text = ""
    for word in re.findall(r"\S+\s*", model_text):
        text += word
        kept = answer_end(text, options)
        if kept is not None:
            return kept
    return text


async def judge_again(args: argparse.Namespace, recorded: list[dict]) -> list[dict]:
    from agent.copilot.answers import LiveAnswer, check_answer, relevant_to
    from state_machine.options import CopilotOptions
    from state_machine.question_detector import check_question

    docs = documents(args)
    index = documents_index(docs)
    options = CopilotOptions()
    previous, exchange = "", None
    results = []
    questions = asked(args)
    if [r["question"] for r in recorded] != [q.question for q in questions[: len(recorded)]]:
        raise ValueError(f"{args.answers} was not a run of {args.questions_file}'s questions")
    for i, (record, question) in enumerate(zip(recorded, questions, strict=False)):
        result = {"question": record["question"], "answered": record.get("answered", False)}
        if result["answered"]:
            heard = record.get("heard") or record["question"]
            answer = LiveAnswer(i, heard, speculative=False, started_at=0.0)
            answer.previous, answer.exchange = previous, exchange
            answer.text = written(record.get("llm_answer") or record["answer"], options)
            answer.relevant = await relevant_to(
                index, answer, options.context_pieces, after_first_token=False
            )
            await check_answer(index, answer)
            shown = answer.replacement or answer.text
            result |= {
                "heard": heard,
                "answer": shown,
                "replaced": bool(answer.replacement),
                "llm_answer": answer.text,
                "problems": answer.problems,
                "relevant": [p.text for p in answer.relevant],
            }
            previous = check_question(heard).question or heard
            exchange = (previous, shown)
        score(result, question, docs)
        results.append(result)
    index.close()
    return results


def run(args: argparse.Namespace) -> int:
    from agent.models import offline_env

    offline_env()
    recorded = json.loads(args.answers.read_text(encoding="utf-8"))
    try:
        results = asyncio.run(judge_again(args, recorded))
    except ValueError as e:
        print(f"voxroom bench copilot-replay: {e}", file=sys.stderr)
        return 2
    summarize_quality(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0
