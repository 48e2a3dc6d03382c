"""`voxroom bench tool-use`: does the bundled model call the right tool, with the right
arguments, and no tool when none is needed, when it hears spoken requests?

Each request of the corpus (half need a tool: the time, the weather, a timer; half need none)
is said by a voice (the bundled Piper voice and espeak-ng's, in turn; cached under
.cache/bench/), transcribed by the bundled Whisper as a user would be heard, and sent to the
bundled model (llama.cpp's server, through the OpenAI client the worker uses) as the worker
sends a first turn: the default profile's instructions, the transcript, and the tools as a
profile offers them (the registry with the built-in current_time and the weather and timer
doubles of bench/tool_doubles.py). Per request:

- the verdict: the right tool with the right arguments (normalised: a city's case and
  country, a number in words, a time zone by its UTC offsets), the right tool with wrong
  arguments, a wrong tool, no call when one was needed; and for the other half, a spoken
  answer or an unneeded call;
- the time from the request to the call (a tool request) or to the first spoken word;
- after a call, the rest of the reply as the reply loop makes it (the results back to the
  model, its next rounds, a repeated call stopped and the result said as it is): where the
  answer came from, whether it can be read to a listener, whether it says the result's
  figures (the degrees, the minutes, the hour), and the time to its first word.

`--llm openai:MODEL --llm-base-url URL` asks another OpenAI-compatible server instead.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import re
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.corpus import CACHE_DIR, add_cache_dir_argument, spoken_in_turn

TOOLS = ("current_time", "get_weather", "set_timer")

# (what the user says, the tool it needs or None, the arguments it needs, as the scoring
# normalises them: {} for a call with no argument needed)
REQUESTS: tuple[tuple[str, str | None, dict[str, Any]], ...] = (
    ("What time is it right now?", "current_time", {}),
    ("What is the time in Tokyo?", "current_time", {"timezone": "Asia/Tokyo"}),
    ("What day of the week is it today?", "current_time", {}),
    ("What time is it in New York?", "current_time", {"timezone": "America/New_York"}),
    ("What is the weather like in Oslo?", "get_weather", {"city": "oslo"}),
    ("Is it raining in London right now?", "get_weather", {"city": "london"}),
    ("How warm is it in Madrid today?", "get_weather", {"city": "madrid"}),
    ("Do I need an umbrella in Paris today?", "get_weather", {"city": "paris"}),
    ("Set a timer for ten minutes.", "set_timer", {"minutes": 10}),
    ("Can you start a five minute timer?", "set_timer", {"minutes": 5}),
    ("Please set a timer for twenty minutes.", "set_timer", {"minutes": 20}),
    ("Start a timer for three minutes, please.", "set_timer", {"minutes": 3}),
    ("Who wrote Pride and Prejudice?", None, {}),
    ("Why is the sky blue?", None, {}),
    ("What is the capital of Australia?", None, {}),
    ("Tell me a joke about computers.", None, {}),
    ("What does the word serendipity mean?", None, {}),
    ("How many days are there in a leap year?", None, {}),
    ("Can you recommend a good book?", None, {}),
    ("What is the boiling point of water?", None, {}),
    # Near the tools' topics, with no tool to call:
    ("What is a time zone?", None, {}),
    ("Why is the weather in the mountains so changeable?", None, {}),
    ("How long should I boil an egg?", None, {}),
    ("Thank you, that was very helpful.", None, {}),
)

# Verdicts: the first two are right.
RIGHT = "right"  # the right tool with the right arguments
ANSWERED = "answered"  # no tool needed, none called, a spoken answer
WRONG_ARGUMENTS = "wrong_arguments"
WRONG_TOOL = "wrong_tool"
NO_CALL = "no_call"  # a tool was needed and the model only talked (or said nothing)
UNNEEDED_CALL = "unneeded_call"  # no tool was needed and the model called one
SILENT = "silent"  # no tool needed, and the model said nothing
VERDICTS = (RIGHT, WRONG_ARGUMENTS, WRONG_TOOL, NO_CALL, ANSWERED, UNNEEDED_CALL, SILENT)


@dataclass(frozen=True)
class ToolRequest:
    id: str
    voice: str
    text: str
    tool: str | None
    arguments: Mapping[str, Any]
    pcm: np.ndarray = field(repr=False, compare=False)


async def load_requests(cache_dir: Path = CACHE_DIR) -> list[ToolRequest]:
    """Every request, said by voice i % 3 (bench.corpus.VOICES) for request i; speech cached."""
    said = await spoken_in_turn([text for text, _, _ in REQUESTS], cache_dir)
    return [
        ToolRequest(f"t{i:02d}-{voice}", voice, text, tool_name, arguments, pcm)
        for i, ((text, tool_name, arguments), (voice, pcm)) in enumerate(
            zip(REQUESTS, said, strict=True)
        )
    ]


# ---- scoring ------------------------------------------------------------------------------


def normalize_arguments(tool_name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments as the scoring compares them: an empty time zone left out (current_time's
    default, the server's own; any other key stays, even empty: the tool fails on a key it
    does not take), a city lower case without its country ("Paris, France" -> "paris"),
    minutes as a number (10, "10", "ten"), a time zone as its UTC offsets in winter and
    summer (so "US/Eastern" is "America/New_York"); other values as given."""
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if key == "timezone" and value in (None, ""):
            continue
        if key == "city" and isinstance(value, str):
            out[key] = " ".join(re.sub(r"[^a-z ]", " ", value.split(",")[0].lower()).split())
        elif key == "minutes":
            out[key] = _number(value)
        elif key == "timezone" and isinstance(value, str):
            out[key] = _zone_offsets(value)
        else:
            out[key] = value
    return out


def _number(value: Any) -> float | Any:
    from bench.wer import number_words

    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            return float(text)
        except ValueError:
            words = {number_words(n): n for n in range(0, 121)}
            return float(words[text]) if text in words else text
    return value


def _zone_offsets(name: str) -> tuple[float, float] | str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        zone = ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        return name.strip().lower()
    offsets = []
    for month in (1, 7):
        at = datetime.datetime(2025, month, 15, 12, tzinfo=datetime.UTC).astimezone(zone)
        delta = at.utcoffset()
        offsets.append(delta.total_seconds() / 60 if delta is not None else 0.0)
    return (offsets[0], offsets[1])


def verdict(
    request_tool: str | None,
    request_arguments: Mapping[str, Any],
    calls: Sequence[tuple[str, str]],
    text: str,
    takes: Collection[str] | None = None,
) -> str:
    """The verdict on one response: `calls` are (name, arguments JSON) in order, `text` what
    it said. A tool request is judged by its first call, with the arguments the tool gets:
    those it `takes` (its schema's; None: all), as the Toolbox leaves the others out."""
    if request_tool is None:
        if calls:
            return UNNEEDED_CALL
        return ANSWERED if text.strip() else SILENT
    if not calls:
        return NO_CALL
    name, arguments = calls[0]
    if name != request_tool:
        return WRONG_TOOL
    try:
        given = json.loads(arguments or "{}")
    except ValueError:
        return WRONG_ARGUMENTS
    if not isinstance(given, dict):
        return WRONG_ARGUMENTS
    if takes is not None:
        given = {k: v for k, v in given.items() if k in takes}
    expected = normalize_arguments(request_tool, request_arguments)
    return RIGHT if normalize_arguments(name, given) == expected else WRONG_ARGUMENTS


def extra_arguments(arguments: str, takes: Collection[str]) -> list[str]:
    """The names in a call's `arguments` (JSON) that its tool does not take."""
    try:
        given = json.loads(arguments or "{}")
    except ValueError:
        return []
    return sorted(set(given) - set(takes)) if isinstance(given, dict) else []


def parameter_names(toolbox: Any, name: str) -> set[str] | None:
    """The argument names tool `name` of `toolbox` takes (None: no such tool)."""
    tool = toolbox.get(name)
    return None if tool is None else set(tool.spec.parameters.get("properties") or {})


def result_facts(tool_name: str, result: str) -> list[list[str]]:
    """What an answer must say to have used the tool's `result`: lists of alternatives, each
    alternative words as bench.wer.normalize writes them (numbers in words). The degrees of
    the weather, the minutes of a timer, the hour of the time (24 h or 12 h)."""
    from bench.wer import normalize

    if tool_name == "get_weather":
        m = re.search(r"(-?\d+) degrees", result)
        return [[normalize(m.group(1))]] if m else []
    if tool_name == "set_timer":
        m = re.search(r"(\d+) minutes", result)
        return [[normalize(m.group(1))]] if m else []
    if tool_name == "current_time":
        m = re.search(r"(\d\d):(\d\d)", result)
        if not m:
            return []
        hour = int(m.group(1))
        return [sorted({normalize(str(hour)), normalize(str(hour % 12 or 12))})]
    return []


def uses_result(answer: str, facts: list[list[str]]) -> bool | None:
    """Whether `answer` says every fact (one of its alternatives, as whole words); None when
    the result has no fact to check."""
    from bench.wer import normalize

    if not facts:
        return None
    said = f" {normalize(answer)} "
    return all(any(f" {alt} " in said for alt in fact) for fact in facts)


# ---- one run ------------------------------------------------------------------------------


@dataclass
class RequestResult:
    id: str
    voice: str
    said: str
    heard: str
    needs: str | None
    verdict: str
    calls: list[tuple[str, str]]
    text: str  # what the first response said
    to_call_ms: float | None = None  # request -> the (first) call
    to_first_word_ms: float | None = None  # request -> the first spoken text
    stt_ms: float | None = None
    # Arguments of the first call its tool does not take (the Toolbox leaves them out).
    extra_arguments: list[str] = field(default_factory=list)
    # After the call, the reply loop's rounds (follow_calls):
    answer: str = ""  # what the rounds after the call said
    rounds: int = 0  # rounds of calls (the first included)
    answer_first_word_ms: float | None = None  # the first results -> the answer's first word
    answer_speakable: bool | None = None  # no JSON or tags in it
    answer_uses_result: bool | None = None  # it says the first result's figures
    failed_call: str = ""  # a round whose calls all failed: the first failure
    # "llm" (its own words), "tool result" (said as it is: the model called again instead of
    # answering), "apology" (the calls failed, or a long or JSON result)
    answer_source: str = ""
    error: str = ""


async def ask(
    llm: Any, messages: list[dict[str, Any]], specs: Sequence[Any]
) -> tuple[str, list[Any], float | None, float | None]:
    """One streamed response: its text, its calls, and the ms to the first call and to the
    first text from the request."""
    from agent.engines import ToolCall

    started = time.monotonic()
    text = ""
    calls: list[Any] = []
    first_call = first_word = None
    stream = llm.stream(messages, specs)
    try:
        async for delta in stream:
            now = round((time.monotonic() - started) * 1000, 1)
            if isinstance(delta, ToolCall):
                calls.append(delta)
                first_call = first_call if first_call is not None else now
            elif delta:
                if first_word is None and delta.strip():
                    first_word = now
                text += delta
    finally:
        await stream.aclose()
    return text, calls, first_call, first_word


async def run_request(
    request: ToolRequest, *, stt: Any, llm: Any, toolbox: Any, system_prompt: str
) -> RequestResult:
    """One request: heard, asked, scored; after a call, the result back and the answer."""
    from agent.adapters.llm.history import ChatHistory

    t0 = time.monotonic()
    heard = (await stt.transcribe(request.pcm)).strip()
    stt_ms = round((time.monotonic() - t0) * 1000, 1)
    messages = ChatHistory(system_prompt).messages(pending_user=heard)
    text, calls, to_call, to_word = await ask(llm, messages, toolbox.specs)
    pairs = [(c.name, c.arguments) for c in calls]
    takes = parameter_names(toolbox, calls[0].name) if calls else None
    result = RequestResult(
        request.id,
        request.voice,
        request.text,
        heard,
        request.tool,
        verdict(request.tool, request.arguments, pairs, text, takes),
        pairs,
        text.strip(),
        to_call_ms=to_call,
        to_first_word_ms=to_word,
        stt_ms=stt_ms,
        extra_arguments=extra_arguments(calls[0].arguments, takes) if takes is not None else [],
    )
    if calls:
        await follow_calls(result, llm, toolbox, messages, text, calls)
    return result


async def follow_calls(
    result: RequestResult,
    llm: Any,
    toolbox: Any,
    messages: list[dict[str, Any]],
    text: str,
    calls: list[Any],
) -> None:
    """The rest of the reply as the reply loop (agent.pipeline.reply.ReplyPipeline) makes it:
    each round's calls (one of each) run, their results follow the assistant's message, and
    the model is asked again, offered the tools; a round whose calls all failed ends in the
    loop's apology, and a model that calls again what it already called (or is still calling
    after MAX_TOOL_ROUNDS) gets no more runs: the answer is the last results said as they are
    (short, not JSON), else the apology. Sets the answer, where it came from, the rounds, and
    the time from the first results to the answer's first word."""
    from agent.adapters.tools.base import ToolContext
    from agent.pipeline.reply import MAX_SAID_RESULT_CHARS
    from agent.pipeline.tool_round import MAX_TOOL_ROUNDS, TOOL_APOLOGY

    ctx = ToolContext(room="bench", user_identity="bench-user")
    called: set[tuple[str, str]] = set()
    first_results = 0.0
    facts: list[list[str]] = []
    answer = ""
    source = "llm"
    for round_no in range(1, MAX_TOOL_ROUNDS + 1):
        fresh = list({c.key(): c for c in calls}.values())
        called |= {c.key() for c in fresh}
        outcomes = [await toolbox.run(c, ctx) for c in fresh]
        ok = [o for o in outcomes if o.ok]
        result.rounds = round_no
        if round_no == 1:
            first_results = time.monotonic()
            facts = result_facts(ok[0].call.name, ok[0].content) if ok else []
        if not ok:
            answer, source = TOOL_APOLOGY, "apology"
            result.failed_call = outcomes[0].content
            break
        messages = [
            *messages,
            {
                "role": "assistant",
                "content": text or None,
                "tool_calls": [c.message() for c in fresh],
            },
            *(o.message() for o in outcomes),
        ]
        asked = time.monotonic()
        text, calls, _, first = await ask(llm, messages, toolbox.specs)
        answer += text
        if first is not None and result.answer_first_word_ms is None:
            result.answer_first_word_ms = round((asked - first_results) * 1000 + first, 1)
        if not calls:
            break
        if any(c.key() in called for c in calls) or round_no == MAX_TOOL_ROUNDS:
            said = " ".join(
                o.content.strip() for o in ok if not o.content.lstrip().startswith(("{", "["))
            )
            fits = said and len(said) <= MAX_SAID_RESULT_CHARS
            answer += said if fits else TOOL_APOLOGY
            source = "tool result" if fits else "apology"
            if result.answer_first_word_ms is None:
                result.answer_first_word_ms = round((time.monotonic() - first_results) * 1000, 1)
            break
    result.answer = answer.strip()
    result.answer_source = source
    if source != "apology":
        result.answer_speakable = speakable(result.answer)
        result.answer_uses_result = uses_result(result.answer, facts)


def speakable(answer: str) -> bool:
    """An answer a listener can be read: words, not the JSON or tags of a call the model
    wrote as text again."""
    return bool(answer.strip()) and not re.search(r"[{}]|</?tool_call>", answer)


def summary(results: Sequence[RequestResult]) -> dict[str, Any]:
    """Counts of each verdict, right of needed/unneeded, and the latencies' percentiles."""
    from agent.voice.turn_metrics import percentiles

    need = [r for r in results if r.needs]
    no_need = [r for r in results if not r.needs]
    counts = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
    answered = [r for r in results if r.answer_speakable is not None]
    return {
        "requests": len(results),
        "verdicts": counts,
        "tool_requests": {
            "n": len(need),
            "right": counts[RIGHT],
            "right_tool": counts[RIGHT] + counts[WRONG_ARGUMENTS],
        },
        "no_tool_requests": {"n": len(no_need), "right": counts[ANSWERED]},
        "per_tool": {
            t: {
                "n": sum(r.needs == t for r in need),
                "right": sum(r.needs == t and r.verdict == RIGHT for r in need),
            }
            for t in TOOLS
        },
        "heard_as_said": sum(_same_words(r.said, r.heard) for r in results),
        # After a call that worked: answers a listener can be read, and those that say the
        # result's figures too.
        "answers_after_call": {
            "n": len(answered),
            "speakable": sum(bool(r.answer_speakable) for r in answered),
            "speakable_with_result": sum(
                bool(r.answer_speakable and r.answer_uses_result) for r in answered
            ),
            "called_again": sum(r.rounds > 1 or r.answer_source == "tool result" for r in answered),
            "llm_answers": sum(r.answer_source == "llm" for r in answered),
            "results_said_as_they_are": sum(r.answer_source == "tool result" for r in answered),
            "failed_calls": sum(bool(r.failed_call) for r in results),
        },
        "calls_with_extra_arguments": sum(bool(r.extra_arguments) for r in results),
        "to_call_ms": percentiles(r.to_call_ms for r in results if r.calls),
        "to_first_word_ms": percentiles(r.to_first_word_ms for r in no_need),
        "answer_first_word_ms": percentiles(r.answer_first_word_ms for r in results),
        "stt_ms": percentiles(r.stt_ms for r in results),
    }


def _same_words(a: str, b: str) -> bool:
    from bench.wer import normalize

    return normalize(a) == normalize(b)


def format_report(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = [f"{'request':<24}{'verdict':<17}{'call ms':>8}{'word ms':>8}  heard -> call / text"]
    for r in report["results"]:
        call = "; ".join(f"{n}({a})" for n, a in r["calls"]) or r["text"][:60]
        ms_call = "-" if r["to_call_ms"] is None else f"{r['to_call_ms']:.0f}"
        ms_word = "-" if r["to_first_word_ms"] is None else f"{r['to_first_word_ms']:.0f}"
        lines.append(
            f"{r['id']:<24}{r['verdict']:<17}{ms_call:>8}{ms_word:>8}  {r['heard']!r} -> {call}"
        )
        if r["calls"]:
            lines.append(
                f"{'':<24}then ({r['rounds']} round(s), {r['answer_source']}): {r['answer'][:80]!r}"
            )
    t, n, a = s["tool_requests"], s["no_tool_requests"], s["answers_after_call"]
    lines += [
        "",
        f"tool requests: {t['right']} of {t['n']} right (tool and arguments), "
        f"{t['right_tool']} the right tool; "
        + ", ".join(f"{k} {v['right']}/{v['n']}" for k, v in s["per_tool"].items()),
        f"no-tool requests: {n['right']} of {n['n']} answered without a call",
        "verdicts: " + ", ".join(f"{k} {v}" for k, v in s["verdicts"].items() if v),
        f"heard word for word: {s['heard_as_said']} of {s['requests']}",
        f"after a call that worked ({a['n']}): {a['llm_answers']} answered by the model "
        f"({a['speakable']} of all answers speakable, {a['speakable_with_result']} with the "
        f"result's figures), {a['results_said_as_they_are']} the result said as it is (the "
        f"model called again); calls that failed: {a['failed_calls']}; "
        f"first calls with arguments the tool does not take: "
        f"{s['calls_with_extra_arguments']}",
    ]
    for key, label in (
        ("to_call_ms", "request -> call"),
        ("to_first_word_ms", "request -> first word (no-tool requests)"),
        ("answer_first_word_ms", "result -> first word of the answer"),
        ("stt_ms", "Whisper, whole utterance"),
    ):
        p = s[key]
        if p["n"]:
            lines.append(f"{label}: p50 {p['p50']:.0f} ms, p95 {p['p95']:.0f} ms (n {p['n']})")
    load = report["load_average"]
    lines.append(
        f"LLM {report['llm']}; load average {load['start']} -> {load['end']}, "
        f"{report['machine']['cpus']} CPUs, {report['date']}"
    )
    return "\n".join(lines)


# ---- the command --------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--llm",
        default="local",
        help="local (the bundled model, default) or openai:MODEL with --llm-base-url",
    )
    p.add_argument("--llm-base-url", default=None)
    p.add_argument("--requests", type=int, default=None, help="only the first N of each half")
    p.add_argument("--json", type=Path, default=None, help="write every result here")
    add_cache_dir_argument(p)


def select(requests: Sequence[ToolRequest], per_half: int | None) -> list[ToolRequest]:
    """The first `per_half` requests that need a tool and the first that need none."""
    if per_half is None:
        return list(requests)
    need = [r for r in requests if r.tool][:per_half]
    no_need = [r for r in requests if not r.tool][:per_half]
    return need + no_need


def run(args: argparse.Namespace) -> int:
    from bench.measure import load_average

    requests = select(asyncio.run(load_requests(args.cache_dir or CACHE_DIR)), args.requests)
    load_before = load_average()
    results, llm_name = asyncio.run(_run(requests, args))
    report = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": "voxroom bench tool-use " + " ".join(sys.argv[sys.argv.index("tool-use") + 1 :])
        if "tool-use" in sys.argv
        else "voxroom bench tool-use",
        "llm": llm_name,
        "machine": _machine(),
        "load_average": {"start": load_before, "end": load_average()},
        "summary": summary(results),
        "results": [asdict(r) for r in results],
    }
    print(format_report(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def _machine() -> dict[str, Any]:
    import os
    import platform

    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "system": platform.platform(),
    }


async def _run(
    requests: Sequence[ToolRequest], args: argparse.Namespace
) -> tuple[list[RequestResult], str]:
    from agent.adapters.llm.history import ChatHistory
    from agent.adapters.providers import load_stt, open_llm
    from agent.adapters.tools.registry import ToolRegistry
    from agent.config import STTSettings, ToolsSettings, load_settings

    settings = load_settings(getattr(args, "config", None))
    profile = settings.profile("default")
    registry = ToolRegistry(ToolsSettings(python=("bench.tool_doubles",)))
    await asyncio.to_thread(registry.start)
    try:
        toolbox = registry.toolbox(TOOLS)
        stt = await asyncio.to_thread(load_stt, STTSettings())
        async with open_llm(profile.llm, args.llm, base_url=args.llm_base_url) as llm:
            name = getattr(llm, "model", args.llm)
            # Not counted: the server's first request with the tools in its prompt reads the
            # whole prompt; the worker's sessions meet a server whose cache already holds it.
            await ask(
                llm,
                ChatHistory(profile.instructions).messages(pending_user="Hello."),
                toolbox.specs,
            )
            results = []
            for request in requests:
                try:
                    r = await run_request(
                        request,
                        stt=stt,
                        llm=llm,
                        toolbox=toolbox,
                        system_prompt=profile.instructions,
                    )
                except Exception as e:  # one request's failure is its result, not the run's
                    r = RequestResult(
                        request.id,
                        request.voice,
                        request.text,
                        "",
                        request.tool,
                        NO_CALL if request.tool else SILENT,
                        [],
                        "",
                        error=f"{type(e).__name__}: {e}",
                    )
                print(
                    f"{r.id}: {r.verdict} {r.calls or r.text[:50]!r}", file=sys.stderr, flush=True
                )
                results.append(r)
        return results, str(name)
    finally:
        await asyncio.to_thread(registry.close)
