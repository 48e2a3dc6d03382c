"""The LiveKit path of `voxroom bench`: a real livekit-server, a real worker subprocess
(`voxroom agent`, or the AgentSession anchor of bench/agentsession.py), and a client
that talks and listens over WebRTC (bench.room_client.RoomUser).

Each configuration gets a fresh worker and one conversation: a warm-up question first (not
counted), then every corpus item in turn, each once the agent has gone quiet. The listener's
figures come from the audio that arrived at the client; the stage latencies from the worker
(voxroom: the turns it stores; AgentSession: its metrics events), matched to the item during
which they were recorded. CPU and memory are those of the worker and its job processes.

What the LLM was asked for each answer comes from the scripted LLM's requests (`RequestLog`,
both systems talk to the same double); the agent's own stop and yield for an interruption
from the worker's record: voxroom's event log lines (playback_ducked, playback_paused, in
the worker's log) and AgentSession's user and agent state changes (its metrics file).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from agent.ops.processes import log_output, stop_process
from bench.agentsession import CONFIGS as AGENTSESSION_CONFIGS
from bench.measure import (
    GAP_MIN_S,
    INTERRUPTION_KINDS,
    MISSED_STOP_MS,
    OVERLAY_KINDS,
    HeardAudio,
    ItemClock,
    ItemResult,
    ProcessUsage,
    ReferenceAnswer,
    RunResult,
    asked_text,
    cut_in_ms,
    cut_off,
    measure_answer,
    measure_overlay,
    ms,
    score_words,
    wait_until,
)
from bench.wer import final_transcript

if TYPE_CHECKING:
    from agent.testing.scripted_llm import Scripted, ScriptedLLM

__all__ = ["AGENTSESSION_CONFIGS", "LiveKitBench"]

log = logging.getLogger(__name__)

ANSWER_TIMEOUT_S = 20.0  # longest wait for the agent's voice after the user's last word
INTERRUPTION_ANSWER_S = 6.0  # an interruption unanswered this long is a missed one anyway
DONE_QUIET_S = 1.0  # the agent is done when listening and quiet this long
READY_TIMEOUT_S = 240.0  # worker registration, job process start and model loading
WARMUP_TEXT = "Hello, can you hear me?"
WARMUP_ANSWER = "Yes, I can hear you."
# Said after the warm-up when backchannels or interruptions are in the run: the long answer
# heard with nobody speaking over it, whose own pauses and level a backchannel's silence and
# an interruption's duck are measured against (bench.measure.ReferenceAnswer).
REFERENCE_TEXT = "Please tell me everything you know."
AGENT_ONSET_SLACK_S = 0.2  # the agent's VAD onset may read this much before the user's own


class Overlay(NamedTuple):
    """The user's sound over an answer: its first and last voiced sample as sent (monotonic
    seconds), and the wall clock's lead on the monotonic one just after (`wall`: the two
    drift apart on some machines, so it is taken where it is used)."""

    onset: float
    end: float
    wall: float


class RequestLog(list[tuple[float, dict[str, Any]]]):
    """The scripted LLM server's `requests` list, each request body with the time (monotonic)
    it came in: what the LLM was asked, and when."""

    def append(self, body: Any) -> None:
        super().append((time.monotonic(), body))

    def asked_before(self, t: float | None, since_index: int, after: float = 0.0) -> str:
        """`asked_text` of the last request in from `after` to `t` (None: no limit) among
        those from `since_index` on; "" when there is none (nothing reached the LLM)."""
        found = [body for at, body in self[since_index:] if at >= after and (t is None or at <= t)]
        return asked_text(found[-1].get("messages") or []) if found else ""


class LiveKitBench:
    """The shared part of every LiveKit run: the server, the LLM, a scratch directory."""

    def __init__(self, items: list[Any], args: Any, settings: Any) -> None:
        self.items = items
        self.args = args
        self.settings = settings
        self._stack = contextlib.AsyncExitStack()
        self.llm_url = ""
        self.llm_model = ""
        # The tools corpus: voxroom's config offering the tool doubles, and what tells a
        # filler from the answer (bench.measure.measure_answer).
        self.tools_config: Path | None = None
        self.fillers: FillerEar | None = None
        self.requests = RequestLog()  # every request the scripted LLM got
        self.sees_requests = False  # the LLM is the scripted double, which fills `requests`
        self._script: ScriptedLLM | None = None  # that double, when it replies by text
        self._reference: ReferenceAnswer | None = None  # the long answer, nobody over it
        self._overlays: list[Overlay | None] = []  # per item
        self._session_wall = 0.0  # the wall clock's lead on the monotonic one as it started

    async def __aenter__(self) -> LiveKitBench:
        from agent.ops.livekit_server import LiveKitServer

        if self.args.log_dir is not None:
            self.dir = self.args.log_dir
            self.dir.mkdir(parents=True, exist_ok=True)
        else:
            self.dir = Path(
                self._stack.enter_context(tempfile.TemporaryDirectory(prefix="vxbench-"))
            )
        self.server = LiveKitServer(log_path=self.dir / "livekit-server.log")
        await asyncio.to_thread(self.server.start)
        self._stack.callback(self.server.stop)
        await self._start_llm()
        if getattr(self.args, "corpus", None) == "tools":
            await self._prepare_tools()
        return self

    async def _prepare_tools(self) -> None:
        from agent.adapters.providers import load_stt
        from agent.config import STTSettings
        from bench.tool_corpus import worker_config

        self.tools_config = self.dir / "voxroom-tools.toml"
        self.tools_config.write_text(worker_config())
        self.fillers = FillerEar(await asyncio.to_thread(load_stt, STTSettings()))

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def _reference_wanted(self) -> bool:
        """Items that speak over the long answer are in the run, and the LLM is the scripted
        one (which answers the reference question with the long answer)."""
        from agent.adapters.providers import parse_llm_spec

        kind, arg = parse_llm_spec(self.args.llm) if self.args.llm else ("script", "")
        return (
            kind == "script"
            and not arg
            and any(getattr(i, "kind", "") in OVERLAY_KINDS for i in self.items)
        )

    async def _start_llm(self) -> None:
        from agent.adapters.providers import parse_llm_spec
        from agent.testing.scripted_llm import ScriptedLLM
        from agent.testing.scripted_llm_server import scripted_llm_server
        from bench.corpus import LONG_ANSWER, scripted_answers, scripted_replies

        a = self.args
        script = dict(ttft_ms=a.script_ttft_ms, words_per_s=a.script_words_per_s)
        kind, arg = parse_llm_spec(a.llm) if a.llm else ("script", "")
        if kind == "script":
            by_text = {
                WARMUP_TEXT: WARMUP_ANSWER,
                REFERENCE_TEXT: LONG_ANSWER,
                **scripted_answers(self.items),
            }
            replies = [
                WARMUP_ANSWER,
                *([LONG_ANSWER] if self._reference_wanted() else []),
                *scripted_replies(self.items),
            ]
            llm = (
                ScriptedLLM.from_file(arg, **script)
                if arg
                else ScriptedLLM(replies, by_text=by_text, **script)
            )
            self._script = None if arg else llm
            self.llm_url = await self._stack.enter_async_context(
                scripted_llm_server(llm, requests=self.requests)
            )
            self.sees_requests = True
            self.llm_model = "scripted"
        elif kind == "local":
            from agent.adapters.llm.llama_server import DEFAULT_MODEL_NAME, LocalLLMServer

            local = LocalLLMServer()
            self.llm_url = await asyncio.to_thread(local.start)
            self._stack.callback(local.stop)
            await asyncio.to_thread(local.warm, self.settings.llm.system_prompt)
            self.llm_model = DEFAULT_MODEL_NAME
        else:
            self.llm_url = a.llm_base_url or self.settings.llm.base_url
            self.llm_model = arg

    async def run(
        self,
        run: RunResult,
        on_item: Callable[[ItemResult], None],
        agentsession: str | None = None,
        caller: str = "browser",
    ) -> None:
        """All items through one worker: voxroom's, or AgentSession in `agentsession` config;
        said by a browser-like user, or by a phone caller as livekit-sip joins one (`caller`
        "sip", bench/sip_caller.py: everything said crosses a phone line)."""
        from agent.transports.tokens import create_join_token
        from bench.room_client import RoomUser
        from bench.sip_caller import sip_caller, sip_dispatch

        tag = agentsession or ("voxroom" if caller == "browser" else f"voxroom-{caller}")
        worker_log = self.dir / f"worker-{tag}.log"
        store = self.dir / f"turns-{tag}.sqlite3"
        metrics = self.dir / f"metrics-{tag}.jsonl"
        env = {
            "LIVEKIT_URL": self.server.url,
            "LIVEKIT_API_KEY": self.server.api_key,
            "LIVEKIT_API_SECRET": self.server.api_secret,
            "PYTHONUNBUFFERED": "1",
        }
        if agentsession is None:
            agent_name = "voxroom-bench"
            argv = ["-m", "agent.cli", "agent", "--agent-name", agent_name, "--idle-processes", "0"]
            env |= {
                "VOXROOM_LLM_PROVIDER": "openai",
                "VOXROOM_LLM_BASE_URL": self.llm_url,
                "VOXROOM_LLM_MODEL": self.llm_model,
                "VOXROOM_STORE_PATH": str(store),
            }
            if self.tools_config is not None:
                env["VOXROOM_CONFIG"] = str(self.tools_config)
        else:
            from bench.agentsession import AGENT_NAME as agent_name

            argv = ["-m", "bench.agentsession", agentsession]
            env |= {
                "VOXROOM_BENCH_LLM_BASE_URL": self.llm_url,
                "VOXROOM_BENCH_LLM_MODEL": self.llm_model,
                "VOXROOM_BENCH_METRICS": str(metrics),
            }
            if self.tools_config is not None:
                from bench.tool_corpus import OFFERED

                env["VOXROOM_BENCH_TOOLS"] = ",".join(OFFERED)
        settings = self.server.livekit_settings(agent_name)
        room = f"bench-{tag}-{int(time.time())}"
        with worker_process(argv, env, worker_log) as proc:
            usage = ProcessUsage(proc.pid)
            if caller == "sip":
                user = sip_caller(
                    self.server.url, settings, room, room_config=sip_dispatch(settings)
                )
            else:
                user = RoomUser(self.server.url, create_join_token(settings, room, "bench-user"))
            await user.connect()
            mic = OpenMic(user)
            try:
                await user.wait_for_state("listening", after=0, timeout_s=READY_TIMEOUT_S)
                self._session_wall = time.time() - time.monotonic()
                windows = await self._converse(user, mic, usage, run, on_item)
                run.notes.append(f"microphone underruns: {user.underruns}")
                if user.underruns:
                    log.warning(
                        "the bench user's microphone ran dry %d times: its audio had "
                        "gaps (a busy machine)",
                        user.underruns,
                    )
            finally:
                await mic.close()
                await user.close()
        if agentsession is None:
            _attach_voxroom_stages(run.items, windows, store)
            _attach_voxroom_yields(run.items, self._overlays, worker_log, self._session_wall)
        else:
            _attach_agentsession_stages(run.items, windows, metrics)
            _attach_agentsession_yields(run.items, self._overlays, metrics)

    async def _converse(
        self,
        user: Any,
        mic: OpenMic,
        usage: ProcessUsage,
        run: RunResult,
        on_item: Callable[[ItemResult], None],
    ) -> list[tuple[float, float]]:
        from bench.corpus import spoken

        warmup = await spoken(WARMUP_TEXT, "piper-joe")
        await mic.say(warmup)
        await self._wait_done(user, time.monotonic())
        self._reference, self._overlays = None, []
        if self._reference_wanted():
            self._reference = await self._reference_answer(user, mic)
            pauses = [] if self._reference is None else self._reference.pauses()
            run.notes.append(
                f"the long answer's own pauses of {GAP_MIN_S * 1000:.0f} ms or more, nobody "
                "speaking over it (start s: ms): "
                + ", ".join(f"{at:.2f}: {n * 1000:.0f}" for at, n in pauses)
            )
        windows = []
        for item in self.items:
            began = time.time()
            result = await self._say(user, mic, item, usage)
            windows.append((began, time.time()))
            run.items.append(result)
            on_item(result)
        return windows

    async def _reference_answer(self, user: Any, mic: OpenMic) -> ReferenceAnswer | None:
        """The reference question said, its long answer heard through with nobody speaking
        over it (None: no answer came)."""
        from bench.corpus import spoken, voiced_span

        pcm = await spoken(REFERENCE_TEXT, "piper-joe")
        ears, _, _, answered = await ask(
            user, mic, pcm, *voiced_span(pcm), timeout_s=ANSWER_TIMEOUT_S
        )
        await self._wait_done(user, time.monotonic())
        return None if answered is None else ReferenceAnswer(ears.heard(), answered)

    async def _say(self, user: Any, mic: OpenMic, item: Any, usage: ProcessUsage) -> ItemResult:
        barge_in = hasattr(item, "interruption")
        q = item.question if barge_in else item
        clock = ItemClock(usage)
        heard_from = len(user.transcripts)
        asked_from = len(self.requests)
        self._answer_misheard_with(q.answer)
        ears, spoke, said, answered = await ask(
            user, mic, q.pcm, q.speech_start, q.speech_end, timeout_s=ANSWER_TIMEOUT_S
        )
        over: list[float | None] = []
        if barge_in and answered is not None:
            await asyncio.sleep(max(0.0, answered + item.after_s - time.monotonic()))
            o = item.interruption
            self._answer_misheard_with(o.answer)
            over = await mic.say(o.pcm, marks=[o.speech_start, o.speech_end])
            wall = time.time() - time.monotonic()
            if item.kind in INTERRUPTION_KINDS and over[1] is not None:
                # Its answer first: an agent that waits out an unfinished-sounding
                # interruption is quiet and listening for longer than DONE_QUIET_S, and the
                # next item must not be taken for the rest of this one.
                end = over[1]
                await wait_until(
                    lambda: ears.first_audible_after(end) is not None,
                    INTERRUPTION_ANSWER_S,
                    poll_s=0.05,
                )
        await self._wait_done(user, time.monotonic())
        heard = ears.heard()
        result = ItemResult(
            item=item.id,
            voice=q.voice,
            kind=item.kind,
            stages={},
            voice_to_voice_ms=ms(said, answered),
            premature=cut_off(heard, spoke, said),
            cut_in_ms=cut_in_ms(heard, spoke, said),
            said="" if barge_in else q.text,
            transcript=final_transcript(user_finals(user, user.transcripts[heard_from:])),
        )
        overlay = None
        if over and over[0] is not None and over[1] is not None:
            measure_overlay(
                result, heard, over[0], over[1], answered=answered, reference=self._reference
            )
            overlay = Overlay(over[0], over[1], wall)
        self._overlays.append(overlay)
        self._score_words(result, item, heard, answered, over, asked_from)
        if (ear := self.fillers) is not None:
            stretches = await ear.transcribe_stretches(user, heard, answered)
            measure_answer(
                result, heard, said, answered, lambda a, b: ear.is_filler(stretches.get((a, b), ""))
            )
        clock.finish(result)
        return result

    def _answer_misheard_with(self, answer: Scripted) -> None:
        """The scripted double's reply to what its user says next when the agent mishears it:
        the reply it would have had heard right (a long answer to speak over, or a short
        one), not another item's."""
        if self._script is not None:
            self._script.unmatched = answer

    def _score_words(
        self,
        result: ItemResult,
        item: Any,
        heard: HeardAudio,
        answered: float | None,
        over: list[float | None],
        asked_from: int,
    ) -> None:
        """Words lost between what was said and what the LLM was asked for its answer: an
        interruption's words in the request behind the answer to it (the last one after its
        onset, before the agent's first sound after its end), a question's in the last
        request before its answer was first heard (a backchannel's: its question's)."""
        if not self.sees_requests:
            return  # the LLM is not the bench's scripted double: its requests are not seen
        if item.kind in INTERRUPTION_KINDS:
            if not over or over[0] is None or over[1] is None:
                return
            reply = heard.first_audible_after(max(heard.silenced_after(over[0]), over[1]))
            said = item.interruption.text
            asked = self.requests.asked_before(reply, asked_from, after=over[0])
        else:
            said = (item.question if hasattr(item, "interruption") else item).text
            asked = self.requests.asked_before(answered, asked_from)
        if said:
            score_words(result, said, asked)

    async def _wait_done(self, user: Any, since: float) -> None:
        await wait_quiet(
            user, Ears(user, max(0, len(user.audio) - 200)), since, timeout_s=ANSWER_TIMEOUT_S + 10
        )


def user_finals(user: Any, transcripts: list[Any]) -> list[str]:
    """The final `lk.transcription` texts among `transcripts` that transcribe `user`'s own
    microphone track (voxroom and AgentSession both name it in lk.transcribed_track_id)."""
    from agent.protocol import ATTR_TRACK_ID

    mine = set(user.room.local_participant.track_publications)
    return [t.text for t in transcripts if t.final and t.attributes.get(ATTR_TRACK_ID) in mine]


async def wait_quiet(user: Any, ears: Ears, since: float, *, timeout_s: float) -> None:
    """Until the agent is listening and has been quiet for DONE_QUIET_S since `since` (or
    `timeout_s`)."""

    def done() -> bool:
        now = time.monotonic()
        state = user.states[-1][1] if user.states else ""
        last = ears.last_audible()
        return (
            state == "listening"
            and now - since >= DONE_QUIET_S
            and (last is None or now - last >= DONE_QUIET_S)
        )

    await wait_until(done, timeout_s, poll_s=0.05)


async def ask(
    user: Any, mic: Any, pcm: np.ndarray, speech_start: int, speech_end: int, *, timeout_s: float
) -> tuple[Ears, float, float, float | None]:
    """Say `pcm` through `mic` and wait up to `timeout_s` for the agent's voice. Returns the
    ears on everything after the question began, when the speech started and ended (its
    samples `speech_start`/`speech_end`), and when the answer became audible (None: never)."""
    first = len(user.audio)
    spoke, said = await mic.say(pcm, marks=[speech_start, speech_end])
    assert spoke is not None and said is not None
    ears = Ears(user, first)
    await wait_until(lambda: ears.first_audible_after(said) is not None, timeout_s, poll_s=0.01)
    return ears, spoke, said, ears.first_audible_after(said)


class FillerEar:
    """Tells the agent's fillers from its answer by what a stretch of its speech says
    (Whisper on the audio the listener got): voxroom's tool fillers and its thinking filler."""

    SIMILAR = 0.6

    def __init__(self, stt: Any) -> None:
        from agent.pipeline.tool_round import FILLER_TEXTS
        from agent.voice.engine import FILLER_TEXT

        self._stt = stt
        self.texts = (*FILLER_TEXTS, FILLER_TEXT)

    def is_filler(self, said: str) -> bool:
        from state_machine.similarity import text_similarity

        return bool(said.strip()) and any(
            text_similarity(said, f) >= self.SIMILAR for f in self.texts
        )

    async def transcribe_stretches(
        self, user: Any, heard: HeardAudio, first: float | None
    ) -> dict[tuple[float, float], str]:
        """What each of the first stretches of the agent's speech from `first` on says, by
        its (start, end) on `heard` as bench.measure.measure_answer finds them, up to the
        first that is no filler."""
        from bench.measure import MAX_FILLERS, STRETCH_GAP_S

        out: dict[tuple[float, float], str] = {}
        start = first
        while start is not None and len(out) <= MAX_FILLERS:
            end = heard.silenced_after(start, STRETCH_GAP_S)
            pcm = [p for at, p in user.audio if start - 0.05 <= at <= end + 0.05]
            if pcm:
                out[(start, end)] = await self._stt.transcribe(np.concatenate(pcm))
            if not self.is_filler(out.get((start, end), "")):
                break
            start = heard.first_audible_after(end)
        return out


class Ears:
    """The agent's audio that reached `user` from frame `first` on, scanned incrementally."""

    def __init__(self, user: Any, first: int) -> None:
        self._user = user
        self._first = first
        self._scanned = first
        self._loud: list[float] = []

    def _scan(self) -> None:
        frames = self._user.audio
        for at, pcm in frames[self._scanned : len(frames)]:
            if pcm.size and int(np.abs(pcm.astype(np.int32)).max()) > 300:
                self._loud.append(at)
        self._scanned = len(frames)

    def first_audible_after(self, t: float) -> float | None:
        self._scan()
        return next((x for x in self._loud if x > t), None)

    def last_audible(self) -> float | None:
        self._scan()
        return self._loud[-1] if self._loud else None

    def heard(self) -> HeardAudio:
        from bench.room_client import RATE

        return HeardAudio(RATE, self._user.audio[self._first :])


class OpenMic:
    """The user's microphone stays open, as in a browser: 100 ms blocks of silence between
    utterances. One task writes everything: a capture cancelled in flight to start an
    utterance fails now and then with "InvalidState - failed to capture frame", the more
    often the busier the event loop (many users in one process, or a worker beside it)."""

    GAP_S = 0.1  # silence is written this much at a time; an utterance starts within it

    def __init__(self, user: Any) -> None:
        self._user = user
        self._utterances: asyncio.Queue[tuple[np.ndarray, list[int], asyncio.Future[Any]]] = (
            asyncio.Queue()
        )
        self._writer = asyncio.create_task(self._write())

    async def _write(self) -> None:
        while True:
            try:
                pcm, marks, said = self._utterances.get_nowait()
            except asyncio.QueueEmpty:
                try:
                    await self._user.silence(self.GAP_S)
                except Exception as e:  # a failed write of silence: go on, the next may work
                    log.warning("the microphone's silence failed: %s", e)
                    await asyncio.sleep(self.GAP_S)
                continue
            try:
                said.set_result(await self._user.speak(pcm, marks=marks))
            except Exception as e:
                said.set_exception(e)

    async def say(self, pcm: np.ndarray, marks: list[int] | None = None) -> list[float | None]:
        said: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._utterances.put_nowait((pcm, marks or [], said))
        return await said

    async def close(self) -> None:
        self._writer.cancel()
        await asyncio.gather(self._writer, return_exceptions=True)


@contextlib.contextmanager
def worker_process(
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    ready: str = "worker registered",
    timeout_s: float = READY_TIMEOUT_S,
    cwd: Path | None = None,
) -> Iterator[subprocess.Popen[str]]:
    """`python ARGV` with `env` added, its output in `log_path`; yields once it printed
    `ready`, and stops it (SIGTERM, then SIGKILL) afterwards."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = log_output(proc, log_path, ready)
    try:
        if not output.ready.wait(timeout_s):
            raise RuntimeError(
                f"{' '.join(argv)} did not print {ready!r} within "
                f"{timeout_s:.0f} s; its log:\n{log_path.read_text()[-3000:]}"
            )
        yield proc
    finally:
        stop_process(proc, 30)


def lower_priority(pid: int, niceness: int = 10) -> None:
    """Give every thread of process `pid` the scheduling niceness `niceness`; threads it
    starts later inherit it. On Linux niceness is per thread, so the process's own entry
    alone would leave the threads it already has at their old priority."""
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            os.setpriority(os.PRIO_PROCESS, int(task), niceness)


def _in_window(t: float, windows: list[tuple[float, float]]) -> int | None:
    for i, (a, b) in enumerate(windows):
        if a <= t <= b:
            return i
    return None


def _turn_of_each_item(
    items: list[ItemResult],
    windows: list[tuple[float, float]],
    turns: list[dict[str, Any]],
    at: str,
) -> list[tuple[ItemResult, dict[str, Any]]]:
    """Sets each item's count of the `turns` that ended (time `turns[k][at]`) during it, and
    pairs each item that has any with its turn: a question's last, a barge-in's or
    backchannel's first (the answer spoken over)."""
    per_item: dict[int, list[dict[str, Any]]] = {}
    for turn in turns:
        i = _in_window(turn[at], windows)
        if i is not None:
            per_item.setdefault(i, []).append(turn)
    paired = []
    for i, item in enumerate(items):
        found = per_item.get(i, [])
        item.turns = len(found)
        if found:
            paired.append((item, found[0] if item.kind in OVERLAY_KINDS else found[-1]))
    return paired


def _attach_voxroom_stages(
    items: list[ItemResult], windows: list[tuple[float, float]], store_path: Path
) -> None:
    """The stored turns' latencies, to the item during which each turn ended."""
    from agent.store.transcripts import read_turns

    if not store_path.exists():
        return
    for item, turn in _turn_of_each_item(items, windows, read_turns(store_path), "created_at"):
        item.stages = dict(turn["latency_ms"])
        item.heard_user = turn["user_text"]


def _event_lines(log_path: Path, marker: str = "voxroom.turns: ") -> list[dict[str, Any]]:
    """The turn engine's events as the worker logged them (agent.ops.metrics: one JSON object
    a line after `marker`, `t_ms` the wall-clock time)."""
    if not log_path.exists():
        return []
    out = []
    for line in log_path.read_text(errors="replace").splitlines():
        _, found, rest = line.partition(marker)
        if found:
            with contextlib.suppress(ValueError):
                out.append(json.loads(rest))
    return out


def _first_at_onset(
    events: list[dict[str, Any]], kind: str, overlay: Overlay
) -> dict[str, Any] | None:
    """The first `kind` event whose onset (the engine's clock: monotonic, as the bench's)
    falls in the user's sound `overlay`, give or take AGENT_ONSET_SLACK_S."""
    for e in events:
        if (
            e.get("event") == kind
            and "onset" in e
            and overlay.onset - AGENT_ONSET_SLACK_S <= float(e["onset"]) <= overlay.end
        ):
            return e
    return None


def _since_onset_ms(event: dict[str, Any], onset: dict[str, Any], session_wall: float) -> float:
    """From `onset`'s onset to `event`'s time, both logged by the worker. The worker logs an
    event's time on the wall clock (`t_ms`) through the wall clock's lead on the monotonic
    one as its session started, and an onset on the monotonic clock: `session_wall` is the
    bench's reading of that lead as the session started. Exact when the worker also logs the
    onset on its wall clock (`onset_ms`)."""
    if "onset_ms" in onset:
        return round(event["t_ms"] - onset["onset_ms"], 1)
    return round(event["t_ms"] - (float(onset["onset"]) + session_wall) * 1000, 1)


def _attach_voxroom_yields(
    items: list[ItemResult], overlays: list[Overlay | None], worker_log: Path, session_wall: float
) -> None:
    """Each interruption's stop and yield at the agent, from the worker's own events: the
    onset of its first sound that made the agent yield (the first PlaybackDucked's, or
    PlaybackPaused's) to the pause (the event's time), and to its first duck. An
    interruption that opens with a word the agent played on under ("Right, | and what
    ...") is two sounds: its stop counts from the first. A figure below 0, or later than
    MISSED_STOP_MS after the user's sound ended, is a clock that jumped between the
    session's start and the event (`_since_onset_ms`): left out."""
    events = _event_lines(worker_log)
    for item, overlay in zip(items, overlays, strict=True):
        if item.kind not in INTERRUPTION_KINDS or overlay is None:
            continue
        paused = _first_at_onset(events, "playback_paused", overlay)
        if paused is None:
            continue
        ducked = _first_at_onset(events, "playback_ducked", overlay) or paused
        first = min(ducked, paused, key=lambda e: float(e["onset"]))
        stop = _since_onset_ms(paused, first, session_wall)
        yielded = min(stop, _since_onset_ms(ducked, ducked, session_wall))
        if 0 <= yielded <= stop <= (overlay.end - overlay.onset) * 1000 + MISSED_STOP_MS:
            item.agent_stop_ms, item.agent_yield_ms = stop, yielded


def _attach_agentsession_yields(
    items: list[ItemResult], overlays: list[Overlay | None], metrics_path: Path
) -> None:
    """Each interruption's stop at the agent from AgentSession's own events (written by
    bench/agentsession.py, on the wall clock): the user's state turning "speaking" (its
    VAD's start of speech) to the agent's state leaving "speaking" (it paused or stopped its
    audio). AgentSession has no duck: its yield is its stop."""
    if not metrics_path.exists():
        return
    states = [
        m
        for m in map(json.loads, metrics_path.read_text().splitlines())
        if m.get("type") in ("user_state_changed", "agent_state_changed")
    ]
    for item, overlay in zip(items, overlays, strict=True):
        if item.kind not in INTERRUPTION_KINDS or overlay is None:
            continue
        onset, end = overlay.onset + overlay.wall, overlay.end + overlay.wall
        spoke = next(
            (
                m["collected_at"]
                for m in states
                if m["type"] == "user_state_changed"
                and m["new_state"] == "speaking"
                and onset - AGENT_ONSET_SLACK_S <= m["collected_at"] <= end
            ),
            None,
        )
        if spoke is None:
            continue
        stopped = next(
            (
                m["collected_at"]
                for m in states
                if m["type"] == "agent_state_changed"
                and m["old_state"] == "speaking"
                and m["collected_at"] >= spoke
            ),
            None,
        )
        if stopped is not None and stopped - spoke <= MISSED_STOP_MS / 1000:
            item.agent_stop_ms = item.agent_yield_ms = ms(spoke, stopped)


def agentsession_ms(seconds: float) -> float | None:
    """An AgentSession metric in ms; its "not measured" values (0 for an end of speech it
    did not detect, -1 for a synthesis with no audio) become None."""
    return round(seconds * 1000, 1) if seconds > 0 else None


def _attach_agentsession_stages(
    items: list[ItemResult], windows: list[tuple[float, float]], metrics_path: Path
) -> None:
    """AgentSession's metrics per reply (speech_id), in voxroom's stage names: endpoint =
    end_of_utterance_delay, stt = transcription_delay, llm_first_token = ttft, TTS first
    audio = the first synthesis's ttfb (first chunk ready has no counterpart)."""
    if not metrics_path.exists():
        return
    by_speech: dict[str, dict[str, Any]] = {}
    for line in metrics_path.read_text().splitlines():
        m = json.loads(line)
        sid = m.get("speech_id")
        if not sid:
            continue
        s = by_speech.setdefault(sid, {"at": m["collected_at"]})
        kind = m.get("type")
        if kind == "eou_metrics":
            s["at"] = m["collected_at"]
            s["endpoint"] = agentsession_ms(m["end_of_utterance_delay"])
            s["stt"] = agentsession_ms(m["transcription_delay"])
        elif kind == "llm_metrics" and s.get("llm_first_token") is None:
            s["llm_first_token"] = agentsession_ms(m["ttft"])
        elif kind == "tts_metrics" and s.get("tts_first_audio") is None:
            s["tts_first_audio"] = agentsession_ms(m["ttfb"])
    # A reply with no user turn behind it has no endpoint, and is no turn.
    replies = sorted((s for s in by_speech.values() if "endpoint" in s), key=lambda s: s["at"])
    for item, s in _turn_of_each_item(items, windows, replies, "at"):
        item.stages = {k: v for k, v in s.items() if k != "at"}
