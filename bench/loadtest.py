"""`voxroom loadtest`: how many conversations a worker carries before voice-to-voice degrades.

For each step of `--rooms` (e.g. 1,2,4,8) N simulated users join N rooms at once, each a real
WebRTC client (bench.room_client.RoomUser) that speaks scripted questions (espeak-ng speech,
made once and cached) in real time, every fourth one cut short by a barge-in, for
`--duration` seconds. The agents are `--workers` real `voxroom agent` processes; their LLM is
the scripted test double served over HTTP (agent/testing/scripted_llm_server.py) with a remote-like
first token: a random 300-600 ms. With `--engines local` STT and TTS are the bundled local
models (Whisper tiny.en, Piper), running in the workers, so the figures are those of a
self-contained worker. With `--engines remote` the workers use their cloud adapters
(agent/adapters/stt/deepgram.py, tts/openai_tts.py) against test doubles of those services in this
process (agent/testing/deepgram_server_double.py, tts_server_double.py): a Deepgram double that
recognises the users' questions and answers after a remote-like delay, and an OpenAI-compatible
speech double that streams Piper speech after a remote-like time to first byte. The figures are
then those of a worker whose engines all run elsewhere.

Measured per step: dispatch time (the user's join, which creates the room, until the agent
joins it), voice-to-voice at the listener (end of the question until the agent's first audible
frame) p50/p95/p99, silent gaps of more than 250 ms inside the agent's replies, barge-in stop,
the workers' CPU and memory (PSS, summed over their processes) per session, and the CPU of
this process (the simulated users, and the doubles), which shares the machine. The answer:
the largest N whose p95 voice-to-voice stays within 1.2 s. Everything runs on loopback, and
every wait is bounded.

With `--compare-agentsession [CONFIG]` the same load then runs, in the same invocation, against
the anchor of `voxroom bench --compare-agentsession`: a LiveKit Agents worker whose rooms are
run by AgentSession (bench/agentsession.py, `tuned` by default: voxroom's endpointing)
with the same local engines and the same LLM double. The workers run one after the other, never
side by side, and the report puts both ladders side by side: voice-to-voice p50/p95 per N, the
sessions per worker within the goal, CPU and memory per added session.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.agentsession import CONFIGS as AGENTSESSION_CONFIGS

AGENT_NAME = "voxroom-loadtest"
P95_GOAL_MS = 1200.0
MAX_ROOMS = 64
MAX_WORKERS = 8
MAX_DURATION_S = 900.0
JOIN_TIMEOUT_S = 60.0  # room created -> agent listening
ANSWER_TIMEOUT_S = 15.0  # end of a question -> the agent's voice
THINK_S = 0.8  # the user's pause before the next question
GAP_S = 0.25  # silence inside a reply longer than this is a gap
BARGE_IN_EVERY = 4  # every 4th item the user cuts in
SAMPLE_S = 1.0  # CPU/memory sampling period
VOICE = "espeak-en-us"
DOUBLE_KEY = "loadtest"  # the API key the remote-engine doubles accept


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rooms",
        type=_room_steps,
        default=[1, 2, 4],
        help="simulated users (one room each), or a list of steps: 1,2,4,8",
    )
    p.add_argument("--workers", type=int, default=1, help="`voxroom agent` processes")
    p.add_argument(
        "--duration",
        type=float,
        default=60.0,
        help="seconds each step's users keep talking (after their agents joined)",
    )
    p.add_argument("--url", help="use this LiveKit server (default: start one on loopback)")
    p.add_argument(
        "--executor",
        choices=("thread", "process"),
        default="thread",
        help="the workers' job executor",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=0,
        help="the workers' session slots (default: the largest step)",
    )
    _add_range_ms(p, "--ttft-ms", (300.0, 600.0), "the scripted LLM's time to first token")
    p.add_argument(
        "--words-per-s", type=float, default=15.0, help="the scripted LLM's streaming pace"
    )
    p.add_argument(
        "--engines",
        choices=("local", "remote"),
        default="local",
        help="STT and TTS: the bundled models in the workers, or remote-like test "
        "doubles of Deepgram and OpenAI speech",
    )
    _add_range_ms(
        p,
        "--stt-delay-ms",
        (100.0, 200.0),
        "remote engines: the Deepgram double's delay per result",
    )
    _add_range_ms(
        p, "--tts-ttfb-ms", (150.0, 300.0), "remote engines: the speech double's time to first byte"
    )
    p.add_argument(
        "--compare-agentsession",
        nargs="?",
        const="tuned",
        metavar="CONFIG",
        choices=AGENTSESSION_CONFIGS,
        help="then run the same load against LiveKit Agents' AgentSession worker "
        "(bench/agentsession.py; CONFIG tuned (default) or defaults); "
        "local engines only",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--out", type=Path, help="also write the JSON report here")


def _room_steps(text: str) -> list[int]:
    steps = sorted({int(x) for x in text.split(",") if x.strip()})
    if not steps or steps[0] < 1 or steps[-1] > MAX_ROOMS:
        raise argparse.ArgumentTypeError(f"rooms must be 1..{MAX_ROOMS}")
    return steps


def _add_range_ms(
    p: argparse.ArgumentParser, flag: str, default: tuple[float, float], what: str
) -> None:
    """An option whose value is a range of milliseconds, LOW-HIGH (or one value for both)."""
    p.add_argument(flag, type=_range, default=default, help=f"{what}, LOW-HIGH ms")


def _range(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    try:
        lo, hi = float(low), float(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError("expected LOW-HIGH milliseconds") from None
    if not 0 <= lo <= hi:
        raise argparse.ArgumentTypeError("expected 0 <= LOW <= HIGH")
    return lo, hi


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.workers <= MAX_WORKERS:
        print(f"voxroom loadtest: --workers must be 1..{MAX_WORKERS}", file=sys.stderr)
        return 2
    if not 1 <= args.duration <= MAX_DURATION_S:
        print(f"voxroom loadtest: --duration must be 1..{MAX_DURATION_S:.0f} s", file=sys.stderr)
        return 2
    if args.compare_agentsession and args.engines != "local":
        # bench/agentsession.py gives AgentSession voxroom's bundled engines only.
        print("voxroom loadtest: --compare-agentsession needs --engines local", file=sys.stderr)
        return 2
    from agent.config import load_settings

    report = asyncio.run(LoadTest(args, load_settings(args.config)).run())
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text if args.json else format_report(report))
    return 0


def progress(message: str) -> None:
    print(f"[loadtest {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- the simulated user's script ----------------------------------------------------------


@dataclass(frozen=True)
class Item:
    text: str
    pcm: np.ndarray  # the question, 16 kHz int16
    speech_start: int
    speech_end: int
    interruption_text: str = ""
    interruption: np.ndarray | None = None  # said over the answer, `after_s` into it
    after_s: float = 0.0

    def utterances(self) -> list[tuple[str, np.ndarray]]:
        """What the user says for this item: (text, 16 kHz audio)."""
        said = [(self.text, self.pcm)]
        if self.interruption is not None:
            said.append((self.interruption_text, self.interruption))
        return said


async def make_script(n_items: int = 8) -> tuple[list[Item], list[str]]:
    """The items every user says in turn, and the LLM replies in user-turn order (the scripted
    LLM answers the i-th user turn of a room with reply i)."""
    from bench import corpus

    questions = iter(corpus.QUESTIONS)
    barge_ins = iter(corpus.BARGE_INS)
    items: list[Item] = []
    replies: list[str] = []
    for i in range(n_items):
        if i % BARGE_IN_EVERY == BARGE_IN_EVERY - 1:
            text, interruption, after_s = next(barge_ins)
            pcm = await corpus.spoken(text, VOICE)
            cut = await corpus.spoken(interruption, VOICE)
            items.append(Item(text, pcm, *corpus.voiced_span(pcm), interruption, cut, after_s))
            replies += [corpus.LONG_ANSWER, corpus.INTERRUPTION_ANSWER]
        else:
            text, answer = next(questions)
            pcm = await corpus.spoken(text, VOICE)
            items.append(Item(text, pcm, *corpus.voiced_span(pcm)))
            replies.append(answer)
    return items, replies


# ---- the workers under load ------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    """One kind of worker the load runs against: `--workers` processes of `python ARGV`."""

    name: str  # "voxroom", or "agentsession-CONFIG"
    agent_name: str  # the name the join tokens dispatch
    argv: list[str]
    env: dict[str, str]
    executor: str
    store_path: Path | None = None  # voxroom's turns, for the stage latencies


# ---- measurements ---------------------------------------------------------------------------


@dataclass
class RoomStats:
    dispatch_ms: float | None = None
    voice_to_voice_ms: list[float] = field(default_factory=list)
    barge_in_stop_ms: list[float] = field(default_factory=list)
    gaps_ms: list[float] = field(default_factory=list)
    replies: int = 0
    unanswered: int = 0
    premature: int = 0
    error: str = ""


def reply_gaps(heard: Any, start: float, end: float, gap_s: float = GAP_S) -> list[float]:
    """Silences longer than `gap_s` between audible audio of one reply in [start, end)
    (bench.measure.HeardAudio), in ms."""
    gaps: list[float] = []
    t = start
    while True:
        quiet = heard.silenced_after(t, gap_s)
        resumed = heard.first_audible_after(quiet)
        if resumed is None or resumed >= end:
            return gaps
        gaps.append(round((resumed - quiet) * 1000, 1))
        t = resumed


def _memory_bytes(p: Any) -> int:
    """PSS of psutil process `p`, or its RSS where PSS cannot be read."""
    import psutil

    try:
        return int(p.memory_full_info().pss)
    except (psutil.AccessDenied, AttributeError):
        return int(p.memory_info().rss)


class Usage:
    """CPU seconds and memory (PSS, falling back to RSS; 0 without `memory`, which is cheaper
    to sample often) of the processes `pids` (and their children when `children`)."""

    def __init__(self, pids: list[int], *, children: bool = True, memory: bool = True) -> None:
        import psutil

        self._roots = [psutil.Process(pid) for pid in pids]
        self._children = children
        self._memory = memory
        self.samples: list[tuple[float, float, float]] = []  # (monotonic, cpu s, MB)

    def sample(self) -> tuple[float, float, float]:
        import psutil

        cpu = mem = 0.0
        for root in self._roots:
            family = root.children(recursive=True) if self._children else []
            for p in (root, *family):
                try:
                    t = p.cpu_times()
                    m = _memory_bytes(p) if self._memory else 0
                except psutil.Error:
                    continue
                # children_*: the job processes that ended and were reaped, whose CPU would
                # otherwise drop out of the sum mid-step.
                cpu += t.user + t.system + t.children_user + t.children_system
                mem += m / 2**20
        s = (time.monotonic(), cpu, mem)
        self.samples.append(s)
        return s

    async def run(self, period_s: float = SAMPLE_S) -> None:
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(period_s)

    def spent(self, a: float, b: float) -> tuple[float, float] | None:
        """CPU seconds and wall seconds from the last sample at or before `a` to the first at
        or after `b`: a window shorter than the sampling period, widened to samples."""
        times = [s[0] for s in self.samples]
        i, j = bisect.bisect_right(times, a) - 1, bisect.bisect_left(times, b)
        if i < 0 or j >= len(times):
            return None
        first, last = self.samples[i], self.samples[j]
        return last[1] - first[1], last[0] - first[0]

    def between(self, a: float, b: float) -> tuple[float | None, float | None]:
        """CPU cores used and peak memory (MB) over [a, b]."""
        inside = [s for s in self.samples if a <= s[0] <= b]
        if len(inside) < 2:
            return None, None
        cores = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
        return round(cores, 3), round(max(s[2] for s in inside), 1)


def percentiles(values: Iterable[float | None]) -> dict[str, Any]:
    from agent.voice.turn_metrics import percentiles as pct

    return pct(values)


# ---- the run --------------------------------------------------------------------------------


class LoadTest:
    def __init__(self, args: argparse.Namespace, settings: Any) -> None:
        self.args = args
        self.settings = settings
        self.run_id = time.strftime("%H%M%S")
        self.doubles: dict[str, Any] = {}  # the remote engines' test doubles

    async def run(self) -> dict[str, Any]:
        from agent.testing.scripted_llm import ScriptedLLM
        from agent.testing.scripted_llm_server import scripted_llm_server

        a = self.args
        progress("making the users' speech (cached after the first run)")
        items, replies = await make_script()
        load_before = [round(x, 2) for x in os.getloadavg()]
        async with contextlib.AsyncExitStack() as stack:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vxload-")))
            url, key, secret = await self._server(stack, tmp)
            # One LLM double for every contender: it answers by the room's user-turn count,
            # so it keeps no state between rooms or workers.
            llm = ScriptedLLM(replies, ttft_ms=0, words_per_s=a.words_per_s)
            llm_url = await stack.enter_async_context(
                scripted_llm_server(llm, extra_ttft_ms=a.ttft_ms)
            )
            env = {
                "LIVEKIT_URL": url,
                "LIVEKIT_API_KEY": key,
                "LIVEKIT_API_SECRET": secret,
                "PYTHONUNBUFFERED": "1",
            }
            speech = await self._remote_speech(stack, items, llm) if a.engines == "remote" else {}
            contenders = [self._voxroom(env | speech, llm_url, tmp)]
            if a.compare_agentsession:
                contenders.append(self._agentsession(env, llm_url))
            series = {}
            for contender in contenders:
                series[contender.name] = await self._series(contender, items, url, key, secret, tmp)
        report = self._report(series.pop("voxroom"), load_before)
        if series:
            report["agentsession"] = next(iter(series.values()))
            report["side_by_side"] = side_by_side(report)
        report["load_after"] = [round(x, 2) for x in os.getloadavg()]
        return report

    def _voxroom(self, env: dict[str, str], llm_url: str, tmp: Path) -> Contender:
        a = self.args
        store = tmp / "turns.sqlite3"
        # CPU is left out of the workers' load here: the test looks for where latency
        # breaks, so the workers must take every room rather than refuse the busy ones.
        argv = [
            "-m",
            "agent.cli",
            "agent",
            "--agent-name",
            AGENT_NAME,
            "--executor",
            a.executor,
            "--max-sessions",
            str(a.max_sessions or max(a.rooms)),
            "--max-cpu",
            "0",
            "--no-redispatch",
        ]
        return Contender(
            "voxroom",
            AGENT_NAME,
            argv,
            env
            | {
                "VOXROOM_LLM_PROVIDER": "openai",
                "VOXROOM_LLM_BASE_URL": llm_url,
                "VOXROOM_LLM_MODEL": "scripted-remote-like",
                "VOXROOM_STORE_PATH": str(store),
            },
            a.executor,
            store,
        )

    def _agentsession(self, env: dict[str, str], llm_url: str) -> Contender:
        from bench.agentsession import AGENT_NAME as AGENTSESSION_NAME

        a = self.args
        # Slots for every room of the ladder: its jobs outlive their rooms by seconds (their
        # processes shut down), and leftovers of one step must not refuse the next's rooms.
        argv = [
            "-m",
            "bench.agentsession",
            a.compare_agentsession,
            "--max-jobs",
            str(a.max_sessions or sum(a.rooms)),
        ]
        return Contender(
            f"agentsession-{a.compare_agentsession}",
            AGENTSESSION_NAME,
            argv,
            env
            | {
                "VOXROOM_BENCH_LLM_BASE_URL": llm_url,
                "VOXROOM_BENCH_LLM_MODEL": "scripted-remote-like",
            },
            "process",
        )

    async def _series(
        self, c: Contender, items: list[Item], url: str, key: str, secret: str, tmp: Path
    ) -> dict[str, Any]:
        """The whole ladder against `--workers` fresh workers of `c`, stopped at the end."""
        from bench.livekit_path import worker_process

        a = self.args
        async with contextlib.AsyncExitStack() as stack:
            pids = []
            for w in range(a.workers):
                progress(f"starting {c.name} worker {w + 1}/{a.workers} ({c.executor} executor)")
                # Waited for in a thread: the doubles in this loop answer the worker's
                # provider checks while it starts.
                proc = await asyncio.to_thread(
                    stack.enter_context,
                    worker_process(c.argv, c.env, tmp / f"worker-{c.name}-{w}.log", timeout_s=240),
                )
                pids.append(proc.pid)
            usage = Usage(pids)
            clients = Usage([os.getpid()], children=False)
            for sampled in (usage, clients):
                stack.push_async_callback(_cancel, asyncio.create_task(sampled.run()))
            await asyncio.sleep(2 * SAMPLE_S)
            idle_mb = usage.sample()[2]
            steps = []
            for n in a.rooms:
                steps.append(
                    await self._step(c, n, items, url, key, secret, usage, clients, idle_mb)
                )
        if c.store_path is not None:
            await asyncio.to_thread(self._attach_stages, c.name, steps, c.store_path)
        return series_summary(c.name, c.executor, steps, idle_mb)

    async def _remote_speech(
        self, stack: contextlib.AsyncExitStack, items: list[Item], llm: Any
    ) -> dict[str, str]:
        """The test doubles of Deepgram and of OpenAI speech, and the workers' settings for
        them (agent/config.py)."""
        from agent.testing.deepgram_double_recognisers import Utterance, utterance_recogniser
        from agent.testing.deepgram_server_double import DeepgramServerDouble
        from agent.testing.tts_server_double import TTSServerDouble

        a = self.args
        said = [Utterance(text, pcm) for item in items for text, pcm in item.utterances()]
        stt = await stack.enter_async_context(
            DeepgramServerDouble(
                utterance_recogniser(said), api_key=DOUBLE_KEY, delay_ms=a.stt_delay_ms
            )
        )
        progress("speaking the replies' chunks for the speech double")
        tts = await stack.enter_async_context(TTSServerDouble(ttfb_ms=a.tts_ttfb_ms))
        await tts.prepare(await reply_chunks(llm.replies))
        self.doubles = {"stt": stt, "tts": tts}
        return {
            "VOXROOM_STT_PROVIDER": "deepgram",
            "VOXROOM_STT_BASE_URL": stt.url,
            "DEEPGRAM_API_KEY": DOUBLE_KEY,
            "VOXROOM_TTS_PROVIDER": "openai",
            "VOXROOM_TTS_BASE_URL": tts.url,
            "OPENAI_API_KEY": DOUBLE_KEY,
        }

    def _attach_stages(self, name: str, steps: list[dict[str, Any]], store_path: Path) -> None:
        """Each step's stage latencies (p50/p95), from the turns the workers stored."""
        from agent.store.transcripts import read_turns
        from bench.measure import ENGINE_STAGES

        if not store_path.exists():
            return
        turns = read_turns(store_path)
        for step in steps:
            prefix = f"{self._room_prefix(name, step['rooms'])}-"
            mine = [t["latency_ms"] for t in turns if t["room"].startswith(prefix)]
            step["stages_ms"] = {
                stage: {
                    k: v
                    for k, v in percentiles([t.get(stage) for t in mine]).items()
                    if k in ("p50", "p95")
                }
                for stage in ENGINE_STAGES
            }

    def _room_prefix(self, name: str, n: int) -> str:
        return f"lt-{self.run_id}-{name}-n{n}"

    async def _server(self, stack: contextlib.AsyncExitStack, tmp: Path) -> tuple[str, str, str]:
        lk = self.settings.livekit
        if self.args.url:
            return self.args.url, lk.api_key, lk.api_secret
        from agent.ops.livekit_server import LiveKitServer

        progress("starting livekit-server on loopback")
        server = LiveKitServer(log_path=tmp / "livekit-server.log")
        await asyncio.to_thread(server.start)
        stack.callback(server.stop)
        return server.url, server.api_key, server.api_secret

    async def _step(
        self,
        c: Contender,
        n: int,
        items: list[Item],
        url: str,
        key: str,
        secret: str,
        usage: Usage,
        clients: Usage,
        idle_mb: float,
    ) -> dict[str, Any]:
        from agent.config import LiveKitSettings
        from agent.transports.tokens import create_join_token
        from bench.room_client import RoomUser

        settings = LiveKitSettings(url=url, api_key=key, api_secret=secret, agent_name=c.agent_name)
        progress(f"{c.name} step N={n}: {n} user(s) joining {n} room(s) at once")
        stats = [RoomStats() for _ in range(n)]
        prefix = self._room_prefix(c.name, n)
        users = [
            RoomUser(url, create_join_token(settings, f"{prefix}-{i}", f"user-{i}"))
            for i in range(n)
        ]
        ready = asyncio.Event()
        talk_until: list[float] = []
        joined = 0

        def open_floor() -> None:
            """All agents are listening (or the join timeout passed): the talking starts."""
            if not ready.is_set():
                ready.set()
                talk_until.append(time.monotonic() + self.args.duration)
                progress(
                    f"N={n}: {joined}/{n} agents listening; talking for {self.args.duration:.0f} s"
                )

        async def one(i: int) -> None:
            nonlocal joined
            try:
                await self._join(users[i], stats[i])
            except Exception as e:
                stats[i].error = f"join: {e}"
                progress(f"N={n} room {i}: {stats[i].error}")
                return
            joined += 1
            if joined == n:
                open_floor()
            await ready.wait()
            try:
                await self._converse(users[i], items, talk_until[0], stats[i], n, i)
            except Exception as e:  # one broken room must not end the step
                stats[i].error = f"{type(e).__name__}: {e}"
                progress(f"N={n} room {i}: {stats[i].error}")

        async def start_talking() -> None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ready.wait(), JOIN_TIMEOUT_S + 5)
            open_floor()  # rooms that never got an agent are left out

        began = time.monotonic()
        gate = asyncio.create_task(start_talking())
        try:
            await asyncio.gather(*(one(i) for i in range(n)))
        finally:
            await _cancel(gate)
            ended = time.monotonic()
            await asyncio.gather(*(u.close() for u in users), return_exceptions=True)
        talk_from = talk_until[0] - self.args.duration if talk_until else began
        cores, peak_mb = usage.between(talk_from, ended)
        await asyncio.sleep(3.0)  # the sessions end and the workers settle before the next step
        summary = step_summary(n, stats, cores, peak_mb, idle_mb)
        summary["clients_cpu_cores"] = clients.between(talk_from, ended)[0]
        return summary

    async def _join(self, user: Any, stats: RoomStats) -> None:
        from livekit import rtc

        agent_at: list[float] = []

        def on_participant(p: rtc.RemoteParticipant) -> None:
            if p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT and not agent_at:
                agent_at.append(time.monotonic())

        user.room.on("participant_connected", on_participant)
        t0 = time.monotonic()
        await user.connect()
        if (
            any(
                p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT
                for p in user.room.remote_participants.values()
            )
            and not agent_at
        ):
            agent_at.append(time.monotonic())
        await user.wait_for_state("listening", after=0, timeout_s=JOIN_TIMEOUT_S)
        if agent_at:
            stats.dispatch_ms = round((agent_at[0] - t0) * 1000, 1)

    async def _converse(
        self, user: Any, items: list[Item], until: float, stats: RoomStats, n: int, room: int
    ) -> None:
        from bench.livekit_path import OpenMic

        mic = OpenMic(user)
        try:
            k = room  # rooms start at different items, so barge-ins do not all coincide
            while time.monotonic() < until:
                outcome = await self._say(user, mic, items[k % len(items)], stats)
                k += 1
                progress(f"N={n} room {room}: item {k - room}: {outcome}")
                await asyncio.sleep(THINK_S)
        finally:
            await mic.close()

    async def _say(self, user: Any, mic: Any, item: Item, stats: RoomStats) -> str:
        """One item said and answered (or not); what happened, for the progress line."""
        from bench.livekit_path import ask

        ears, spoke, said, answered = await ask(
            user, mic, item.pcm, item.speech_start, item.speech_end, timeout_s=ANSWER_TIMEOUT_S
        )
        onset = None
        if item.interruption is not None and answered is not None:
            await asyncio.sleep(max(0.0, answered + item.after_s - time.monotonic()))
            onset = time.monotonic()
            await mic.say(item.interruption)
        await _wait_done(user, ears)
        heard = ears.heard()
        if answered is None:
            stats.unanswered += 1
            return f"no answer within {ANSWER_TIMEOUT_S:.0f} s"
        stats.replies += 1
        if heard.audible_between(spoke, said):
            stats.premature += 1  # the agent cut in before the question was over
            outcome = "the agent answered before the question was over"
        else:
            stats.voice_to_voice_ms.append(round((answered - said) * 1000, 1))
            outcome = f"voice-to-voice {stats.voice_to_voice_ms[-1]:.0f} ms"
        end = onset if onset is not None else time.monotonic()
        stats.gaps_ms += reply_gaps(heard, answered, end)
        if onset is not None and heard.audible_between(onset - 0.2, onset):
            stats.barge_in_stop_ms.append(round((heard.silenced_after(onset) - onset) * 1000, 1))
            outcome += f", barge-in stop {stats.barge_in_stop_ms[-1]:.0f} ms"
        return outcome

    def _report(self, voxroom: dict[str, Any], load_before: list[float]) -> dict[str, Any]:
        a = self.args
        return {
            "command": "voxroom loadtest " + " ".join(sys.argv[2:]),
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "machine": {"cores": os.cpu_count(), "load_before": load_before},
            "workers": a.workers,
            "duration_s": a.duration,
            "engines": {
                "llm": f"scripted test double over HTTP, first token "
                f"{a.ttft_ms[0]:.0f}-{a.ttft_ms[1]:.0f} ms, "
                f"{a.words_per_s:g} words/s",
                **self._speech_engines(),
            },
            "p95_goal_ms": P95_GOAL_MS,
            **{k: v for k, v in voxroom.items() if k != "worker"},
        }

    def _speech_engines(self) -> dict[str, str]:
        a = self.args
        if a.engines == "local":
            return {
                "stt": "Whisper tiny.en (local, in the worker)",
                "tts": "Piper en_US-joe-medium (local, in the worker)",
            }
        stt, tts = self.doubles["stt"], self.doubles["tts"]
        return {
            "stt": f"Deepgram adapter -> Deepgram test double, results after "
            f"{a.stt_delay_ms[0]:.0f}-{a.stt_delay_ms[1]:.0f} ms "
            f"({len(stt.connections)} connections, {len(stt.recognised)} utterances)",
            "tts": f"OpenAI speech adapter -> speech test double (Piper), first byte after "
            f"{a.tts_ttfb_ms[0]:.0f}-{a.tts_ttfb_ms[1]:.0f} ms "
            f"({len(tts.requests)} requests, {tts.aborted} cancelled)",
        }


async def reply_chunks(replies: list[str]) -> list[str]:
    """The chunks the workers send to TTS for the scripted LLM's replies: the chunking depends
    only on the words, so the same script streamed without pauses gives them."""
    from agent.testing.scripted_llm import ScriptedLLM
    from tts.chunker import make_chunker

    async def no_pause(_: float) -> None:
        return None

    llm = ScriptedLLM(replies, ttft_ms=0, sleep=no_pause)
    chunks: list[str] = []
    for i in range(len(llm.replies)):
        chunker = make_chunker()
        async for word in llm.stream([{"role": "user", "content": ""}] * (i + 1)):
            if isinstance(word, str):  # no tools offered: text only
                chunks += chunker.push(word)
        chunks += chunker.flush()
    return chunks


def step_summary(
    n: int, stats: list[RoomStats], cores: float | None, peak_mb: float | None, idle_mb: float
) -> dict[str, Any]:
    v2v = [v for s in stats for v in s.voice_to_voice_ms]
    gaps = [g for s in stats for g in s.gaps_ms]
    replies = sum(s.replies for s in stats)
    return {
        "rooms": n,
        "rooms_failed": sum(bool(s.error) for s in stats),
        "errors": [s.error for s in stats if s.error],
        "dispatch_ms": percentiles([s.dispatch_ms for s in stats if s.dispatch_ms is not None]),
        "voice_to_voice_ms": percentiles(v2v),
        "replies": replies,
        "unanswered": sum(s.unanswered for s in stats),
        "premature": sum(s.premature for s in stats),
        "barge_in_stop_ms": percentiles([b for s in stats for b in s.barge_in_stop_ms]),
        "audio_gaps": {
            "count": len(gaps),
            "per_reply": round(len(gaps) / replies, 3) if replies else None,
            "max_ms": max(gaps, default=None),
        },
        "cpu_cores": cores,
        "cpu_cores_per_session": round(cores / n, 3) if cores is not None else None,
        "mem_mb_peak": peak_mb,
        "mem_mb_per_session": round((peak_mb - idle_mb) / n, 1) if peak_mb is not None else None,
    }


def added_session_mb(steps: list[dict[str, Any]], idle_mb: float) -> float | None:
    """The slope of peak memory over sessions (idle worker = 0 sessions), least squares."""
    points = [(0, idle_mb)] + [
        (s["rooms"], s["mem_mb_peak"]) for s in steps if s["mem_mb_peak"] is not None
    ]
    if len(points) < 2:
        return None
    x, y = np.array(points, dtype=float).T
    return round(float(np.polyfit(x, y, 1)[0]), 1)


def series_summary(
    name: str, executor: str, steps: list[dict[str, Any]], idle_mb: float
) -> dict[str, Any]:
    """One contender's ladder and what it comes to: the largest N whose p95 voice-to-voice is
    within the goal with every room served, and the memory each added session costs."""
    within = [
        s["rooms"]
        for s in steps
        if s["voice_to_voice_ms"]["p95"] is not None
        and s["voice_to_voice_ms"]["p95"] <= P95_GOAL_MS
        and not s["rooms_failed"]
    ]
    return {
        "worker": name,
        "executor": executor,
        "idle_mem_mb": round(idle_mb, 1),
        "mem_mb_per_added_session": added_session_mb(steps, idle_mb),
        "steps": steps,
        "max_rooms_within_goal": max(within, default=None),
    }


def side_by_side(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per contender of `report` (voxroom's series at its top level, AgentSession's
    under "agentsession"): sessions per worker within the goal, and per N the voice-to-voice
    p50/p95 and the workers' CPU cores."""
    rows = []
    for name, series in (
        ("voxroom", report),
        (report["agentsession"]["worker"], report["agentsession"]),
    ):
        best = series["max_rooms_within_goal"]
        rows.append(
            {
                "worker": name,
                "executor": series["executor"],
                "sessions_per_worker": None if best is None else round(best / report["workers"], 1),
                "voice_to_voice_ms": {
                    str(s["rooms"]): [s["voice_to_voice_ms"]["p50"], s["voice_to_voice_ms"]["p95"]]
                    for s in series["steps"]
                },
                "cpu_cores": {str(s["rooms"]): s["cpu_cores"] for s in series["steps"]},
                "rooms_failed": {str(s["rooms"]): s["rooms_failed"] for s in series["steps"]},
                "idle_mem_mb": series["idle_mem_mb"],
                "mem_mb_per_added_session": series["mem_mb_per_added_session"],
            }
        )
    return rows


async def _wait_done(user: Any, ears: Any) -> None:
    """Until the agent is listening and has been quiet for a while (bounded)."""
    from bench.livekit_path import wait_quiet

    await wait_quiet(user, ears, time.monotonic(), timeout_s=ANSWER_TIMEOUT_S + 30)


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def format_report(r: dict[str, Any]) -> str:
    lines = [
        f"voxroom loadtest: {r['workers']} worker(s) per contender, "
        f"{r['duration_s']:.0f} s per step",
        *(f"  {k.upper()}: {v}" for k, v in r["engines"].items()),
        *format_series("voxroom", r, r["workers"], r["p95_goal_ms"]),
    ]
    if "agentsession" in r:
        s = r["agentsession"]
        lines += format_series(s["worker"], s, r["workers"], r["p95_goal_ms"])
        lines.append(
            "side by side (v2v p50/p95 ms per N; sessions per worker within "
            f"{r['p95_goal_ms']:.0f} ms p95; MB per added session):"
        )
        for row in r["side_by_side"]:
            v2v = ", ".join(
                f"N={n} {_ms(p50)}/{_ms(p95)}" for n, (p50, p95) in row["voice_to_voice_ms"].items()
            )
            best = row["sessions_per_worker"]
            lines.append(
                f"  {row['worker']:<20} sessions per worker "
                f"{_ms(best) if best else 'none'}, "
                f"{row['mem_mb_per_added_session']} MB/session; {v2v}"
            )
    return "\n".join(lines)


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.0f}" if isinstance(v, float) else str(v)


def format_series(name: str, r: dict[str, Any], workers: int, goal_ms: float) -> list[str]:
    f = _ms
    lines = [
        f"{name} ({r['executor']} executor)",
        f"{'N':>3} {'dispatch p50/p95':>17} {'v2v p50/p95/p99 ms':>20} {'replies':>7} "
        f"{'gaps':>5} {'cores/sess':>10} {'MB/sess':>8} {'clients':>7} failed",
    ]
    for s in r["steps"]:
        d, v = s["dispatch_ms"], s["voice_to_voice_ms"]
        lines.append(
            f"{s['rooms']:>3} {f(d['p50']):>8}/{f(d['p95']):<8} "
            f"{f(v['p50']):>6}/{f(v['p95'])}/{f(v['p99']):<6} {s['replies']:>7} "
            f"{s['audio_gaps']['count']:>5} {s['cpu_cores_per_session']!s:>10} "
            f"{s['mem_mb_per_session']!s:>8} {s.get('clients_cpu_cores')!s:>7} "
            f"{s['rooms_failed']}"
        )
        if stages := s.get("stages_ms"):
            lines.append(
                "      stage p50/p95 ms: "
                + ", ".join(f"{k} {f(v['p50'])}/{f(v['p95'])}" for k, v in stages.items())
            )
    lines.append(
        f"idle workers {r['idle_mem_mb']} MB; memory per added session "
        f"{r['mem_mb_per_added_session']} MB"
    )
    best = r["max_rooms_within_goal"]
    lines.append(
        f"largest N with p95 voice-to-voice <= {goal_ms:.0f} ms: "
        f"{'none' if best is None else best} (of {workers} worker(s))"
    )
    return lines
