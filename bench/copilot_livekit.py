"""Interview copilot through LiveKit: end of an interviewer's question -> first answer words
on the candidate's screen, and -> the whole answer.

A real livekit-server on loopback and a `voxroom agent` worker with the bundled models, both
on this machine; in the room, the interviewer publishes "meeting-audio" as `voxroom bridge`
does (the bridge's own capture -> publish is ~1 ms, tests/test_bridge_pulse.py), and the
candidate's client uploads the sample resume and job description (bench/copilot_data/) and
reads the answers on `voxroom.copilot`. The dispatch asks for copilot mode. Each question is
spoken by espeak-ng into the track in real time, once the agent says the documents are in
its LLM's prompt cache (`voxroom.copilot.warm_pieces`). The end of the question is when its
last voiced sample left the interviewer's microphone; first words: the first chunk on the
candidate's side that holds a letter or digit. The worker's own view of each answer (its
`answer_done` log line: endpoint, first words, whole answer) is reported beside it; it counts
from the last frame its VAD took for voiced, which can be a little before or after the end of
the speech, so the two differ by more than the transport. As the worker runs on this machine,
its clock is the bench's, and its stages (its VAD hears the end, the answer starts, the LLM's
first token) are also given on the bench's clock: where the time goes. And how many cores the
worker, livekit-server and the clients used from the end of each question to its first words.

`--worker-first`: livekit-server and this process (both clients) run at niceness 10. In a
deployment they are other machines: the SFU a server of its own, the interviewer's audio and
the candidate's screen on the candidate's computer. On one small machine they otherwise take
CPU from the worker while it decodes the question and reads it into the LLM.

`voxroom bench copilot-livekit [--questions N] [--resume R --job-description J
--questions-file Q] [--json PATH] [--worker-first]`: each answer is scored too
(bench.copilot_quality).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from agent.ops.livekit_server import LiveKitServer
from agent.protocol import (
    ATTR_ANSWER_STATUS,
    ATTR_QUESTION,
    ATTR_WARM_PIECES,
    KEY_CANDIDATE,
    KEY_MODE,
    MEETING_TRACK,
)
from agent.transports.tokens import create_bridge_token, create_join_token
from bench.copilot_bench import (
    SHORT_ANSWER_WORDS,
    Question,
    add_document_arguments,
    asked,
    documents,
    score,
    speak,
    summarize,
    summarize_quality,
)
from bench.copilot_quality import word_count
from bench.livekit_path import READY_TIMEOUT_S, OpenMic, lower_priority, worker_process
from bench.loadtest import Usage
from bench.measure import require
from bench.room_client import CopilotAnswer, CopilotClient, RoomUser, kept_answers

AGENT_NAME = "voxroom-copilot-bench"
CANDIDATE = "candidate"
ANSWER_DONE = re.compile(r"answer_done (\{.*\})")
CPU_SAMPLE_S = 0.05  # the windows are ~0.6 s
UNANSWERED_ABORT = 3  # none of the first this many answered: the run is broken, not slow


def engine_views(log_path: Path) -> list[dict]:
    """The worker's `answer_done` records, in order."""
    views = []
    for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
        if match := ANSWER_DONE.search(line):
            views.append(ast.literal_eval(match.group(1)))
    return views


async def run_interview(args: argparse.Namespace) -> list[dict]:
    questions = asked(args)
    speech = [speak(q.question) for q in questions]
    with tempfile.TemporaryDirectory(prefix="vxcopilot-") as tmp:
        server = LiveKitServer(log_path=Path(tmp) / "livekit-server.log")
        await asyncio.to_thread(server.start)
        log_path = args.worker_log or Path(tmp) / "worker.log"
        env = {
            "LIVEKIT_URL": server.url,
            "LIVEKIT_API_KEY": server.api_key,
            "LIVEKIT_API_SECRET": server.api_secret,
            "PYTHONUNBUFFERED": "1",
            "VOXROOM_LLM_PROVIDER": "local",
        }
        argv = ["-m", "agent.cli", "agent", "--agent-name", AGENT_NAME, "--idle-processes", "0"]
        try:
            with worker_process(argv, env, log_path) as worker:
                if args.worker_first:  # after the worker started: it must not inherit it
                    lower_priority(server.pid)
                    lower_priority(os.getpid())
                usage = {
                    name: Usage([pid], children=False, memory=False)
                    for name, pid in (
                        ("the worker", worker.pid),
                        ("livekit-server", server.pid),
                        ("both clients (this process)", os.getpid()),
                    )
                }
                samplers = [asyncio.create_task(u.run(CPU_SAMPLE_S)) for u in usage.values()]
                try:
                    results = await _interview(server, questions, speech, log_path, args)
                finally:
                    for task in samplers:
                        task.cancel()
        finally:
            server.stop()
    print("cores used from the end of each question to its first words:")
    for name, u in usage.items():
        print(f"{cpu_share(u, results):6.2f}  {name}")
    for r in results:
        r.pop("_end", None)
        r.pop("_first", None)
    return results


def cpu_share(usage: Usage, results: list[dict]) -> float:
    """Cores `usage`'s process used over the answers' windows from the end of the question
    to the first words (each widened to the samples around it)."""
    cpu = wall = 0.0
    for r in results:
        if r.get("_end") is None or r.get("_first") is None:
            continue
        if (spent := usage.spent(r["_end"], r["_first"])) is not None:
            cpu, wall = cpu + spent[0], wall + spent[1]
    return cpu / wall if wall else 0.0


async def _interview(
    server: LiveKitServer,
    questions: list[Question],
    speech: list[np.ndarray],
    log_path: Path,
    args: argparse.Namespace,
) -> list[dict]:
    from bench.speech import last_voiced_sample

    settings = server.livekit_settings(AGENT_NAME)
    room = f"copilot-bench-{int(time.time())}"
    candidate = CopilotClient(CANDIDATE)
    dispatch = json.dumps({KEY_MODE: "copilot", KEY_CANDIDATE: CANDIDATE})
    await candidate.join(
        server.url, create_join_token(settings, room, CANDIDATE, dispatch_metadata=dispatch)
    )
    # The copilot hears only its candidate's bridge: the interviewer joins as one.
    interviewer = RoomUser(
        server.url,
        create_bridge_token(settings, room, "meeting-bridge-bench", CANDIDATE),
        track_name=MEETING_TRACK,
    )
    await interviewer.connect()
    mic = OpenMic(interviewer)
    results: list[dict] = []
    try:
        await require(candidate.agent, READY_TIMEOUT_S, "no agent joined")
        agent = candidate.agent()
        assert agent is not None
        docs = documents(args)
        for name, text in docs.items():
            await candidate.send_document(agent.identity, name, text)
        await require(lambda: len(candidate.receipts) == 2, 60, "documents not acknowledged")
        pieces = str(sum(r.get("pieces", 0) for r in candidate.receipts))
        warm_start = time.monotonic()
        await require(
            lambda: agent.attributes.get(ATTR_WARM_PIECES) == pieces,
            300,
            "the documents never reached the LLM's prompt cache",
        )
        print(
            f"warm-up (documents into the prompt cache): {time.monotonic() - warm_start:.1f} s",
            flush=True,
        )
        for q, pcm in zip(questions, speech, strict=True):
            question = q.question
            done = len(candidate.answers)
            [speech_end] = await mic.say(pcm, marks=[last_voiced_sample(pcm)])
            try:  # an answer the guard replaced is followed by its replacement
                await require(
                    lambda d=done: (
                        bool(kept := kept_answers(candidate.answers[d:]))
                        and kept[-1].done_at is not None
                        and kept[-1].attributes.get(ATTR_ANSWER_STATUS) != "replaced"
                    ),
                    args.timeout_s,
                    "",
                )
            except TimeoutError:
                results.append({"question": question, "answered": False})
                if len(results) == UNANSWERED_ABORT and not any(r["answered"] for r in results):
                    raise RuntimeError(
                        f"the copilot answered none of the first {len(results)} "
                        "questions: see the worker's log (--worker-log)"
                    ) from None
                continue
            results.append(answer_result(question, speech_end, candidate.answers[done:]))
            score(results[-1], q, docs)
            print(json.dumps(results[-1]), flush=True)
            results[-1]["_end"] = speech_end
            results[-1]["_first"] = kept_answers(candidate.answers[done:])[0].first_words_at
            await asyncio.sleep(1.0)  # the interviewer pauses before the next question
    finally:
        await mic.close()
        await interviewer.close()
        await candidate.leave()
    views = [v for v in engine_views(log_path) if v.get("status") == "complete"]
    answered = [r for r in results if r["answered"]]
    if len(views) != len(answered):
        print(
            f"the worker logged {len(views)} complete answers for {len(answered)} answered "
            "questions: its view is left out",
            flush=True,
        )
        return results
    for r, view in zip(answered, views, strict=True):  # the worker's own view
        for key, value in view.get("latency_ms", {}).items():
            if value is not None:
                r[f"worker_{key}_ms"] = round(value)
        end = r.get("_end")
        if end is not None and "speech_end" in view:  # one machine: one monotonic clock
            r["worker_heard_ms"] = round((view["speech_end"] - end) * 1000)
    return results


# (label, key, whether the figure counts from the worker's VAD end rather than the bench's)
STAGES = (
    ("the worker's VAD hears the last voiced frame", "worker_heard_ms", False),
    ("the answer starts (the question's transcript is in)", "worker_answer_started_ms", True),
    ("the LLM's first token", "worker_first_token_ms", True),
    ("the first words on the candidate's screen", "first_words_ms", False),
)


def stage_table(results: list[dict]) -> list[str]:
    """Where the time goes, p50 over the answers, ms after the end of the question: the
    worker's stages (its clock starts at its VAD's end) moved onto the bench's clock."""
    lines = []
    for label, key, from_worker_end in STAGES:
        xs = [
            r[key] + (r["worker_heard_ms"] if from_worker_end else 0)
            for r in results
            if r.get(key) is not None and "worker_heard_ms" in r
        ]
        if xs:
            lines.append(f"{np.percentile(xs, 50):6.0f}  {label}")
    return lines


def answer_result(question: str, speech_end: float | None, streams: list[CopilotAnswer]) -> dict:
    """The question's answer: first words when the first text came (of an answer the guard
    replaced, if it did), the text of the last; and the answers withdrawn on the way, with
    how many of them had words on the screen."""

    def ms(t: float | None) -> float | None:
        return None if t is None or speech_end is None else round((t - speech_end) * 1000)

    answers = kept_answers(streams)
    withdrawn = [a for a in streams if a not in answers]
    first, answer = answers[0], answers[-1]
    text = answer.text
    replaced = first.attributes.get(ATTR_ANSWER_STATUS) == "replaced"
    return {
        "question": question,
        "answered": True,
        "heard": answer.attributes.get(ATTR_QUESTION, ""),
        "first_words_ms": ms(first.first_words_at),
        "whole_answer_ms": ms(answer.done_at),
        "status": answer.attributes.get(ATTR_ANSWER_STATUS, ""),
        "answer": text,
        "answer_words": word_count(text),
        "replaced": replaced,
        "llm_answer": first.text,
        "withdrawn": len(withdrawn),
        "withdrawn_with_words": sum(1 for a in withdrawn if a.first_words_at is not None),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_document_arguments(parser)
    parser.add_argument("--timeout-s", type=float, default=20.0, help="longest wait per answer")
    parser.add_argument("--json", type=Path, help="write every answer's timings here")
    parser.add_argument("--worker-log", type=Path, help="keep the worker's log here")
    parser.add_argument(
        "--worker-first",
        action="store_true",
        help="run livekit-server and the clients at niceness 10, as if they were other machines",
    )


def run(args: argparse.Namespace) -> int:
    results = asyncio.run(run_interview(args))
    summarize(results)
    for key in ("worker_endpoint_ms", "worker_first_words_ms", "worker_whole_answer_ms"):
        xs = [r[key] for r in results if r.get(key) is not None]
        if xs:
            p50, p95 = np.percentile(xs, [50, 95])
            print(f"{key:>24}: p50 {p50:6.0f}  p95 {p95:6.0f}  (n={len(xs)})")
    print(f"(short answers: at most {SHORT_ANSWER_WORDS} words)")
    withdrawn = [r for r in results if r.get("withdrawn")]
    print(
        f"answers shown before the question ended and withdrawn: {len(withdrawn)} questions, "
        f"{sum(1 for r in withdrawn if r['withdrawn_with_words'])} with words on the screen"
    )
    print("where the time goes, p50 ms after the end of the question:")
    print("\n".join(stage_table(results)))
    summarize_quality(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0
