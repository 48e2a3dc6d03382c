"""`voxroom bench`: the corpus of spoken questions and barge-ins through the agent, with
p50/p95/p99 per stage, voice-to-voice and barge-in stop at the listener, and CPU and memory
per session.

Paths: `simulate` runs the turn engine in this process with no network; `livekit` starts a
livekit-server and a `voxroom agent` worker, and a client that talks and listens over WebRTC.
`--compare-agentsession` runs the same corpus through LiveKit Agents' AgentSession with the
same engines (its defaults, then tuned to voxroom's endpointing) and prints the ratios.

Corpora: `questions` (bench/corpus.py, the default: latency), `turns` (bench/turn_corpus.py:
turn-taking, with questions said with a thinking pause or a filler, backchannels and
interruptions; `--split held-out`: bench/turn_corpus_held_out.py, items no rule was tuned
on), `listen` (bench/listen_corpus.py: eight voices, each question clean, in
noise, over a phone line and with no silence before it, and a real recording; `--split tune`
or `held-out`), `tools` (bench/tool_corpus.py: requests answered with a quick tool, a slow
one that gets voxroom's filler, or none; the answer's own first word beside voice-to-voice,
AgentSession given the same tools as `@function_tool`s). All get the per-kind section:
cut-offs, false barge-ins, missed interruptions, voice-to-voice and barge-in stop per kind
of item, and for the turn corpus an interruption's yield at the listener and stop and yield
at the agent, the longest silence a backchannel caused, and the words lost on the way to the
LLM (bench/measure.py); and, where items say what was said, the word error rate of the
agent's final user transcripts per kind (the listen corpus's kinds are its conditions) and
overall (bench/wer.py).

The default LLM is the scripted one (a test double with a fixed time to first token), so the
figures isolate voxroom's own pipeline; `--llm local` uses the bundled model.

The single-engine benchmarks are its subcommands (SUITES): `voxroom bench stt`, `tts-roundtrip`,
`turn-detectors`, `overlap-reads`, `tool-use`, `copilot`, `copilot-livekit`, `copilot-replay`,
each with its own options (`-h`).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib
import json
import platform
import signal
import sys
from pathlib import Path
from typing import Any

from agent.apps.simulate import add_llm_arguments
from bench.corpus import add_cache_dir_argument
from bench.measure import (
    INTERRUPTION_KINDS,
    STAGE_LABELS,
    STAGES,
    ItemResult,
    RunResult,
    comparison,
    load_average,
)
from bench.tool_corpus import KINDS as TOOL_KINDS

CORPORA = {
    "questions": "bench.corpus",
    "turns": "bench.turn_corpus",
    "listen": "bench.listen_corpus",
    "tools": "bench.tool_corpus",
}
# name -> (module, one-line help); each module defines `add_arguments(parser)` and `run(args)`.
SUITES: dict[str, tuple[str, str]] = {
    "stt": ("bench.stt_bench", "streaming STT: Whisper tiny.en's partials, finals and WER"),
    "stt-ceiling": (
        "bench.stt_ceiling",
        "what a Whisper model hears of the listening corpus, decoded whole after "
        "Opus: best and n-best oracle WER per condition",
    ),
    "phone-band": (
        "bench.phone_band",
        "where a phone line costs words, offline: the listening corpus over lines "
        "of increasing damage, through the VAD's front end and Whisper",
    ),
    "tts-roundtrip": (
        "bench.tts_roundtrip",
        "Piper whole and in chunks, transcribed back by Whisper: WER, first audio",
    ),
    "turn-detectors": (
        "bench.turn_detectors",
        "the end-of-turn models side by side: accuracy and cost of a decision",
    ),
    "overlap-reads": (
        "bench.overlap_reads",
        "backchannels and interruptions said over the answer, decoded as they go on: "
        "what the barge-in rules make of them, offline",
    ),
    "copilot": (
        "bench.copilot_bench",
        "interview copilot, no LiveKit: end of the question -> first answer words",
    ),
    "tool-use": (
        "bench.tool_use",
        "the bundled model on spoken requests with tools offered: right tool, right "
        "arguments, no tool when none is needed, time to the call",
    ),
    "copilot-livekit": (
        "bench.copilot_livekit",
        "interview copilot through livekit-server and a worker, as a candidate sees it",
    ),
    "copilot-replay": (
        "bench.copilot_replay",
        "a copilot-livekit run's answers judged again by today's retrieval and guard, "
        "offline, in seconds",
    ),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--path",
        choices=("simulate", "livekit"),
        default="simulate",
        help="simulate: in process, no network; livekit: a real server and client",
    )
    add_llm_arguments(
        p,
        default=None,
        llm_help="local | openai:MODEL | script:PATH (default: the corpus's scripted answers)",
    )
    p.add_argument(
        "--corpus",
        choices=tuple(CORPORA),
        default="questions",
        help="questions: latency (bench/corpus.py); turns: turn-taking, with pauses, "
        "fillers, backchannels and interruptions (bench/turn_corpus.py); "
        "listen: word error rate in hard conditions (bench/listen_corpus.py); "
        "tools: tool turns (a quick and a slow tool, fillers) against plain "
        "ones (bench/tool_corpus.py)",
    )
    p.add_argument(
        "--split",
        choices=("tune", "held-out"),
        default=None,
        help="--corpus listen: only this half (default: both); --corpus turns: the tuning "
        "half (the default) or the held-out one (bench/turn_corpus_held_out.py)",
    )
    p.add_argument("--questions", type=int, default=None, help="only the first N questions")
    p.add_argument("--barge-ins", type=int, default=None, help="only the first N barge-ins")
    p.add_argument(
        "--no-recordings",
        action="store_true",
        help="leave out the real recordings (synthetic voices only)",
    )
    p.add_argument(
        "--kinds",
        type=lambda s: [k.strip() for k in s.split(",") if k.strip()],
        default=None,
        help="--corpus turns: only these kinds, comma-separated "
        "(question, paused, filler, backchannel, interruption); "
        "--corpus listen: conditions (clean, noise, phone, "
        "quiet_start, recording); --corpus tools: tool, "
        "slow_tool, no_tool",
    )
    p.add_argument(
        "--per-kind",
        type=int,
        default=None,
        help="--corpus turns or listen: only the first N items of each kind",
    )
    p.add_argument(
        "--caller",
        choices=("browser", "sip", "both"),
        default="browser",
        help="who says the corpus: a browser-like user, a phone caller (through "
        "LiveKit: joined as livekit-sip joins one; its speech over a phone "
        "line), or both, one run each",
    )
    p.add_argument(
        "--compare-agentsession",
        action="store_true",
        help="also run LiveKit Agents' AgentSession (defaults and tuned); implies --path livekit",
    )
    p.add_argument("--json", type=Path, default=None, help="write every figure here")
    p.add_argument("--plot", type=Path, default=None, help="PNG of the distributions")
    add_cache_dir_argument(p)
    p.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="--path livekit: keep livekit-server's and the workers' logs here "
        "(default: a temporary folder, removed at the end)",
    )
    p.add_argument(
        "--soak-minutes",
        type=float,
        default=None,
        help="instead: one conversation, items back to back for this long; reports "
        "memory, tasks, threads and files over time (simulate path)",
    )
    p.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="run nothing: print (and --plot) the results saved by an earlier --json",
    )
    suites = p.add_subparsers(
        dest="suite", metavar="SUITE", title="single-engine benchmarks, instead of a corpus"
    )
    for name, (module, help_text) in SUITES.items():
        suite = suites.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(suite)


def run(args: argparse.Namespace) -> int:
    # Stopped by SIGTERM (a CI step's timeout, `kill`), a benchmark unwinds as on Ctrl-C, so the
    # livekit-server and agent workers it started stop with it instead of running on.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.suite:
        return int(importlib.import_module(SUITES[args.suite][0]).run(args) or 0)
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        runs = [RunResult.from_json(r) for r in saved["runs"]]
        report = saved | {
            "runs": [r.as_json() for r in runs],
            "comparison": comparison(runs, runs[0]) if len(runs) > 1 else {},
        }
        _print(runs, report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        if args.plot:
            plot(runs, args.plot)
        return 0
    module = importlib.import_module(CORPORA[args.corpus])
    try:
        items = _load_items(module, args)
    except ValueError as e:
        print(f"voxroom bench: {e}", file=sys.stderr)
        return 2
    if args.compare_agentsession or args.corpus == "tools":
        args.path = "livekit"  # the worker's tools: LiveKit path only
    load_before = load_average()
    if not items:
        print("voxroom bench: the corpus is empty", file=sys.stderr)
        return 2
    if args.soak_minutes:
        return _soak(items, args)
    runs = asyncio.run(_run_all(items, args))
    report = _report(runs, args, load_before)
    _print(runs, report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    if args.plot:
        plot(runs, args.plot)
    return 0


def _soak(items: list[Any], args: argparse.Namespace) -> int:
    from agent.config import load_settings
    from agent.testing.scripted_llm import ScriptedLLM
    from bench.corpus import scripted_answers, scripted_replies
    from bench.soak import format_soak, run_soak

    settings = load_settings(getattr(args, "config", None))
    llm = ScriptedLLM(
        scripted_replies(items),
        ttft_ms=args.script_ttft_ms,
        words_per_s=args.script_words_per_s,
        by_text=scripted_answers(items),
    )

    def on_sample(s: Any) -> None:
        print(
            f"soak {s.t_s:7.0f} s: {s.turns} turns, RSS {s.rss_mb:.0f} MB, {s.tasks} tasks, "
            f"{s.threads} threads, {s.open_files} files",
            file=sys.stderr,
            flush=True,
        )

    result = asyncio.run(
        run_soak(
            items,
            minutes=args.soak_minutes,
            llm=llm,
            system_prompt=settings.llm.system_prompt,
            on_sample=on_sample,
        )
    )
    print(format_soak(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result.as_json(), indent=2))
    verdict = result.verdict()
    return 0 if verdict["memory_flat"] and verdict["no_leak"] else 1


def _load_items(module: Any, args: argparse.Namespace) -> list[Any]:
    """The items of the corpus `module`, limited as the options say (speech synthesized and
    cached)."""
    if args.corpus == "listen":
        module.check_conditions(args.kinds)  # before the speech is synthesized
        items = asyncio.run(
            module.load_listen_corpus(
                args.cache_dir or module.CACHE_DIR,
                split=args.split,
                recordings=not args.no_recordings,
            )
        )
        return module.select(items, args.kinds, args.per_kind)
    if args.corpus == "turns":
        module.check_kinds(args.kinds)  # before the speech is synthesized
        turn_set = module.TUNING
        if args.split == "held-out":
            turn_set = importlib.import_module("bench.turn_corpus_held_out").HELD_OUT
        items = asyncio.run(
            module.load_turn_corpus(
                args.cache_dir or module.CACHE_DIR,
                recordings=not args.no_recordings,
                turn_set=turn_set,
            )
        )
        return module.select(items, args.kinds, args.per_kind)
    if args.corpus == "tools":
        module.check_kinds(args.kinds)
        items = asyncio.run(module.load_tool_corpus(args.cache_dir or module.CACHE_DIR))
        return module.select(items, args.kinds, args.per_kind)
    corpus = asyncio.run(
        module.load_corpus(args.cache_dir or module.CACHE_DIR, recordings=not args.no_recordings)
    ).limited(args.questions, args.barge_ins)
    return [*corpus.questions, *corpus.barge_ins]


def _print(runs: list[RunResult], report: dict[str, Any]) -> None:
    print(format_table(runs))
    print(format_kinds(runs))
    if lost := format_words_lost(runs):
        print(lost)
    for run in runs:
        for note in run.notes:
            print(f"{run.name}: {note}")
    if any(r.summary()["wer"] for r in runs):
        print(format_wer(runs))
    if len(runs) > 1:
        print(format_comparison(report["comparison"]))
    print(
        f"load average {report['load_average']['start']} -> {report['load_average']['end']} "
        f"(1/5/15 min) on {report['machine']['cpus']} CPUs, {report['date']}"
    )


async def _run_all(items: list[Any], args: argparse.Namespace) -> list[RunResult]:
    from agent.config import load_settings

    settings = load_settings(getattr(args, "config", None))
    llm_name = args.llm or f"script (corpus answers, TTFT {args.script_ttft_ms:.0f} ms)"
    callers = ("browser", "sip") if args.caller == "both" else (args.caller,)
    names = {"browser": "voxroom", "sip": "voxroom, SIP caller"}
    if args.path == "simulate":
        runs = []
        for caller in callers:
            run = RunResult(names[caller], "simulate", llm_name)
            with _Progress(len(items), run.name) as on_item:
                run.items = await _simulate(items, args, settings, on_item, caller)
            runs.append(run)
        return runs
    from bench.livekit_path import AGENTSESSION_CONFIGS, LiveKitBench

    plan: list[tuple[RunResult, str | None, str]] = [
        (RunResult(names[c], "livekit", llm_name), None, c) for c in callers
    ]
    if args.compare_agentsession:
        plan += [
            (RunResult(f"AgentSession {c}", "livekit", llm_name), c, "browser")
            for c in AGENTSESSION_CONFIGS
        ]
    async with LiveKitBench(items, args, settings) as bench:
        for run, config, caller in plan:
            with _Progress(len(items), run.name) as on_item:
                await bench.run(run, on_item, agentsession=config, caller=caller)
    return [run for run, _, _ in plan]


async def _simulate(
    items: list[Any], args: argparse.Namespace, settings: Any, on_item: Any, caller: str
) -> list[ItemResult]:
    from agent.apps.simulate import open_llm_of
    from agent.testing.scripted_llm import ScriptedLLM
    from bench.corpus import scripted_answers, scripted_replies
    from bench.simulate_path import run_simulate

    script = dict(ttft_ms=args.script_ttft_ms, words_per_s=args.script_words_per_s)
    if args.llm is None:
        return await run_simulate(
            items,
            llm_for=lambda item: ScriptedLLM(
                scripted_replies([item]), by_text=scripted_answers([item]), **script
            ),
            system_prompt=settings.llm.system_prompt,
            on_item=on_item,
            caller=caller,
        )
    async with open_llm_of(settings.llm, args) as llm:
        return await run_simulate(
            items,
            llm_for=lambda _item: llm,
            system_prompt=settings.llm.system_prompt,
            on_item=on_item,
            caller=caller,
        )


class _Progress:
    """A tqdm bar over the items of one run, showing the last voice-to-voice."""

    def __init__(self, total: int, name: str) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=name, unit="item", file=sys.stderr)

    def __enter__(self) -> Any:
        def on_item(result: ItemResult) -> None:
            v2v = result.voice_to_voice_ms
            self._bar.set_postfix_str(f"{result.item} v2v {v2v:.0f} ms" if v2v else result.item)
            self._bar.update()

        return on_item

    def __exit__(self, *exc: object) -> None:
        self._bar.close()


def _report(runs: list[RunResult], args: argparse.Namespace, load_before: list[float]) -> dict:
    import os

    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": "voxroom bench " + " ".join(sys.argv[sys.argv.index("bench") + 1 :])
        if "bench" in sys.argv
        else "voxroom bench",
        "machine": {
            "cpus": os.cpu_count(),
            "processor": _cpu_model(),
            "python": platform.python_version(),
            "system": platform.platform(),
        },
        "load_average": {"start": load_before, "end": load_average()},
        "runs": [r.as_json() for r in runs],
        "comparison": comparison(runs, runs[0]) if len(runs) > 1 else {},
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def format_table(runs: list[RunResult]) -> str:
    """Stages down, p50/p95/p99 (n) of each run across, in milliseconds."""
    width = max(len(label) for label in STAGE_LABELS.values()) + 2
    head = "stage (ms)".ljust(width) + "".join(f"{r.name:>26}" for r in runs)
    sub = " " * width + "".join(f"{'p50 / p95 / p99   (n)':>26}" for _ in runs)
    lines = [head, sub]
    summaries = [r.summary() for r in runs]
    for stage in STAGES:
        row = STAGE_LABELS[stage].ljust(width)
        for s in summaries:
            p = s["stages"][stage]
            cell = f"{_fmt(p['p50'])} / {_fmt(p['p95'])} / {_fmt(p['p99'])} ({p['n']})"
            row += f"{cell:>26}"
        lines.append(row)
    cpu = "CPU cores per session".ljust(width)
    rss = "RSS per session (MB)".ljust(width)
    flags = "items: premature/unanswered".ljust(width)
    for s in summaries:
        c = s["cpu_cores"]["p50"]
        cpu += f"{'-' if c is None else f'{c:.2f} p50':>26}"
        rss += f"{_fmt(s['rss_mb_peak']) + ' peak':>26}"
        flags += f"{str(s['premature']) + ' / ' + str(s['unanswered']):>26}"
    lines += [cpu, rss, flags]
    return "\n".join(lines)


# (row label, the kind_summary figure, the kinds it is shown for: None = every kind)
_KIND_ROWS: tuple[tuple[str, str, tuple[str, ...] | None], ...] = (
    ("cut-offs (items)", "cut_offs", None),
    ("false barge-ins (items)", "false_barge_ins", ("backchannel",)),
    ("missed interruptions (items)", "missed_interruptions", INTERRUPTION_KINDS),
    (
        "voice-to-voice p50 / p95 (n)",
        "voice_to_voice",
        ("question", "paused", "filler", *TOOL_KINDS),
    ),
    ("cut-offs: agent heard for, p50 / p95 (n)", "cut_in", ("question", "paused", "filler")),
    ("answer itself p50 / p95 (n)", "answer", TOOL_KINDS),
    ("fillers heard (items)", "fillers_heard", TOOL_KINDS),
    ("barge-in stop (listener) p50 / p95 (n)", "barge_in_stop", INTERRUPTION_KINDS),
    ("yield (listener) p50 / p95 (n)", "yield", INTERRUPTION_KINDS),
    ("stop at agent p50 / p95 (n)", "agent_stop", INTERRUPTION_KINDS),
    ("yield at agent p50 / p95 (n)", "agent_yield", INTERRUPTION_KINDS),
    ("longest silence caused p50 / p95 (n)", "backchannel_silence", ("backchannel",)),
    ("words lost + misheard of said (items)", "words_lost", None),
)


def format_kinds(runs: list[RunResult]) -> str:
    """Turn-taking per kind of item: rows of kind and figure, one column per run. Counts are
    "k of n items"; voice-to-voice of paused and filler items is from the user's real end."""
    summaries = [r.summary()["kinds"] for r in runs]
    kinds = list(dict.fromkeys(k for s in summaries for k in s))
    width = max(len(label) for label, _, _ in _KIND_ROWS) + 16
    lines = ["", "turn-taking by kind".ljust(width) + "".join(f"{r.name:>26}" for r in runs)]
    for kind in kinds:
        first = True
        for label, key, shown in _KIND_ROWS:
            if shown is not None and kind not in shown:
                continue
            row = (kind if first else "").ljust(16) + label.ljust(width - 16)
            first = False
            for s in summaries:
                row += f"{_kind_cell(s.get(kind), key):>26}"
            lines.append(row)
    return "\n".join(lines)


def _kind_cell(summary: dict[str, Any] | None, key: str) -> str:
    if summary is None:
        return "-"
    value = summary[key]
    if key == "words_lost":
        return (
            "-"
            if value is None
            else (
                f"{value} + {summary['words_misheard']} of {summary['words_said']} "
                f"({summary['items_losing_words']})"
            )
        )
    if isinstance(value, dict):
        return f"{_fmt(value['p50'])} / {_fmt(value['p95'])} ({value['n']})"
    return (
        "-" if value is None else f"{value} of {summary.get(f'{key}_measured', summary['items'])}"
    )


def format_words_lost(runs: list[RunResult]) -> str:
    """Every item whose answer was asked for with said words missing: what was lost, and
    what the LLM was asked."""
    lines = ["", "words lost per item (said words missing from what the LLM was asked)"]
    for run in runs:
        for i in run.items:
            if i.words_lost:
                lines.append(
                    f"  {run.name}: {i.item}: {i.words_lost} of {i.words_said} lost, "
                    f"{i.words_misheard} misheard; asked {i.asked!r}"
                )
    return "\n".join(lines) if len(lines) > 2 else ""


def format_wer(runs: list[RunResult]) -> str:
    """Word error rate per kind of item and overall, one column per run, beside the kind's
    voice-to-voice p50: "WER (edits/words, first words lost) p50 ms"."""
    summaries = [r.summary() for r in runs]
    kinds = list(dict.fromkeys(k for s in summaries for k in s["wer"] or {} if k != "overall"))
    lines = [
        "",
        "word error rate by kind".ljust(16) + "".join(f"{r.name:>36}" for r in runs),
        " " * 16 + "".join(f"{'WER (edits/words, 1st lost) v2v p50':>36}" for _ in runs),
    ]
    for kind in [*kinds, "overall"]:
        row = kind.ljust(16)
        for s in summaries:
            w = (s["wer"] or {}).get(kind)
            if w is None or w["wer"] is None:
                row += f"{'-':>36}"
                continue
            edits = w["substitutions"] + w["deletions"] + w["insertions"]
            v2v = (
                s["kinds"][kind]["voice_to_voice"]
                if kind in s["kinds"]
                else s["stages"]["voice_to_voice"]
            )["p50"]
            cell = f"{w['wer']:.3f} ({edits}/{w['words']}, {w['first_word_lost']}) {_fmt(v2v)} ms"
            row += cell.rjust(36)
        lines.append(row)
    return "\n".join(lines)


def format_comparison(comp: dict[str, dict[str, Any]]) -> str:
    """voxroom's p50 and p95 as a share of each other run's (0.65 = 35 % lower)."""
    lines = ["", "voxroom / other (p50, p95); below 1 means voxroom is faster"]
    for name, stages in comp.items():
        lines.append(f"  vs {name}")
        for stage in STAGES:
            r = stages[stage]
            if r["p50"] is None and r["p95"] is None:
                continue
            p50 = "-" if r["p50"] is None else f"{r['p50']:.2f}"
            p95 = "-" if r["p95"] is None else f"{r['p95']:.2f}"
            lines.append(f"    {STAGE_LABELS[stage]:<30} {p50:>6} {p95:>6}")
    return "\n".join(lines)


def plot(runs: list[RunResult], path: Path) -> None:
    """One box plot per stage, one box per run, every turn as a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    stages = [s for s in STAGES if any(any(v is not None for v in r.values(s)) for r in runs)]
    cols = 4
    rows = -(-len(stages) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.4 * rows), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, stage in zip(axes.flat, stages, strict=False):
        data = [[v for v in r.values(stage) if v is not None] for r in runs]
        ax.boxplot(data, whis=(5, 95), showfliers=False)
        for i, d in enumerate(data, start=1):
            ax.scatter(i + rng.uniform(-0.15, 0.15, len(d)), d, s=8, alpha=0.6)
        ax.set_title(STAGE_LABELS[stage], fontsize=10)
        ax.set_ylabel("ms")
        ax.set_xticks(range(1, len(runs) + 1), [r.name for r in runs], fontsize=7, rotation=15)
    for ax in axes.flat[len(stages) :]:
        ax.axis("off")
    fig.suptitle("voxroom bench: per-turn latencies (box: p25-p75, whiskers: p5-p95)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
