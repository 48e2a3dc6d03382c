"""`voxroom agent`: an agent worker on livekit-agents' worker layer.

The worker registers with the LiveKit server for explicit dispatch under the agent name
(default `voxroom`). LiveKit sends it a job per room. With the thread executor (the default)
every job is a thread of the worker process and all of them share one Whisper and one Piper
loaded at start, so an added conversation costs little memory; their inference already runs
in the process's inference threads, one call at a time per model replica (Whisper has two, one
per thread of agent/inference_pool.py; Piper one, tts/piper_tts.py), which is what makes
sharing them safe. With `--executor process` each job
runs in its own prewarmed process with its own copy of the models (isolation, more memory).
With the bundled LLM the worker starts one llama.cpp server for all its jobs.

Load: the share of session slots in use, or of the worker's CPU when that is higher; a job
counts from the moment the worker says it is available for it (see `VoxroomServer`).
Leases let another worker re-dispatch a room whose worker died (agent/worker/redispatch.py): in
Redis with `store.redis_url`, shared by the workers of every host together with each room's
recent turns and the reply being spoken (agent/store/shared_state.py); otherwise in the SQLite file
of the transcript store, which only one host's workers share. Finished turns go to that file
or to PostgreSQL (`store.url`, agent/store/transcripts.py). With both URLs set the worker
writes nothing to its filesystem but the caches: a read-only home (a pod's root filesystem)
does not stop it.

On SIGTERM it stops taking jobs and lets its conversations end, for at most
`--drain-timeout`; the rooms still open then lose their agent, and other workers dispatch
them again from the shared state, like those of a worker that died.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.config import Settings, load_settings

log = logging.getLogger("voxroom.worker")

LOCAL_LLM_URL_ENV = "VOXROOM_LOCAL_LLM_URL"  # set by the worker for its job processes
LOAD_THRESHOLD = 0.999  # full at load 1 (LiveKit wants the threshold below 1)
CPU_WINDOW_S = 10.0  # CPU load is averaged over this long: one reply's burst is not "full"
CHILDREN_REFRESH_S = 5.0  # how often the job processes counted in the CPU load are listed
EXECUTORS = ("thread", "process")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent-name", default=None, help="dispatch name (default: livekit.agent_name)")
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="thread",
        help="thread: jobs share the worker's models; process: a process and models per job",
    )
    p.add_argument(
        "--idle-processes",
        type=int,
        default=1,
        help="job processes (or threads) kept prewarmed ahead of dispatch",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=4,
        help="conversations one worker takes before LiveKit sends jobs elsewhere",
    )
    p.add_argument(
        "--max-cpu",
        type=float,
        default=0.9,
        help="share of the worker's cores (10 s average) at which it is full; 0: slots only",
    )
    p.add_argument(
        "--redispatch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="renew room leases and re-dispatch rooms whose worker died",
    )
    p.add_argument("--health-port", type=int, default=0, help="health-check HTTP port (0: any)")
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=600.0,
        help="on SIGTERM, seconds to let active conversations finish (no new jobs meanwhile)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus /metrics (every job process summed) on this port",
    )
    p.add_argument("--log-level", default="INFO")


@dataclass(frozen=True)
class ProcessEngines:
    """What every session of a process shares: the speech models, the end-of-turn model, the
    turn store, the shared room memory (None without `store.redis_url`) and the tool registry
    (its MCP servers' connections)."""

    stt: Any
    tts: Any
    store: Any
    turn_detector: Any = None
    memory: Any = None
    tools: Any = None


_engines: ProcessEngines | None = None
_engines_lock = threading.Lock()


def process_engines() -> ProcessEngines:
    """The process's engines, loaded and warmed by the first caller (blocking); job threads
    that ask meanwhile wait for that one load instead of starting their own."""
    global _engines
    with _engines_lock:
        if _engines is None:
            from agent.adapters.providers import load_speech_engines
            from agent.adapters.turn_detector import load_detector
            from agent.store.transcripts import open_turn_store
            from agent.transports.room_io import OUTPUT_RATE

            settings = load_settings()
            store = open_turn_store(settings.store)  # first: a store it cannot open fails fast
            stt, tts = load_speech_engines(OUTPUT_RATE, settings.stt, settings.tts)
            detector = load_detector(settings.turn.detector)
            _engines = ProcessEngines(stt, tts, store, detector,
                                      _room_memory(settings, store), _tool_registry(settings))
        return _engines


def _tool_registry(settings: Settings) -> Any:
    """The tools of [tools], listed (blocking). A source that cannot start, or a profile that
    names a tool nobody offers, is a clear error in the log; the worker serves on with the
    rest (`voxroom doctor` fails on them)."""
    from agent.adapters.tools.registry import ToolRegistry
    from agent.config import ConfigError

    registry = ToolRegistry(settings.tools)
    for status in registry.start().values():
        if status.ok:
            log.info("tools: %s offers %s", status.source, ", ".join(status.tools) or "none")
        else:
            log.error("tools: %s is unavailable: %s", status.source, status.detail)
    try:
        registry.check_profiles(settings)
    except ConfigError as e:
        log.error("%s", e)
    return registry


def _room_memory(settings: Settings, store: Any) -> Any:
    """Redis with store.redis_url; else the SQLite store's own file (one host); none for
    PostgreSQL without Redis (the turns are shared, a reply cut by a crash is not)."""
    from agent.transports.room_session import PERSISTED_HISTORY_TURNS

    if settings.store.redis_url:
        from agent.store.shared_state import RedisRoomMemory, connect_redis

        return RedisRoomMemory(connect_redis(settings.store.redis_url), PERSISTED_HISTORY_TURNS)
    from agent.store.transcripts import TranscriptStore

    if isinstance(store, TranscriptStore):
        from agent.store.room_memory_sqlite import SqliteRoomMemory

        return SqliteRoomMemory(store, PERSISTED_HISTORY_TURNS)
    return None


def prewarm(proc: object) -> None:
    """Runs in every job process (or job thread) before it takes a job."""
    from agent.log_redaction import install_log_redaction

    install_log_redaction()  # a job process's records are redacted before they are forwarded
    engines = process_engines()
    proc.userdata["stt"] = engines.stt  # type: ignore[attr-defined]
    proc.userdata["tts"] = engines.tts  # type: ignore[attr-defined]
    proc.userdata["store"] = engines.store  # type: ignore[attr-defined]
    proc.userdata["turn_detector"] = engines.turn_detector  # type: ignore[attr-defined]
    proc.userdata["memory"] = engines.memory  # type: ignore[attr-defined]
    proc.userdata["tools"] = engines.tools  # type: ignore[attr-defined]


@dataclass(frozen=True)
class SessionLoad:
    """A worker's load: sessions over `capacity`, or CPU over `max_cpu` when higher
    (`max_cpu` 0: sessions only). Load 1 is full."""

    capacity: int
    max_cpu: float = 0.9

    def __post_init__(self) -> None:
        if self.capacity < 1 or self.max_cpu < 0:
            raise ValueError("capacity must be >= 1 and max_cpu >= 0")

    @property
    def per_session(self) -> float:
        return 1.0 / self.capacity

    def load(self, sessions: int, cpu_share: float) -> float:
        cpu = cpu_share / self.max_cpu if self.max_cpu else 0.0
        return max(sessions * self.per_session, cpu)

    def effective(self, load: float, reserved: int) -> float:
        """`load` plus the jobs accepted but not yet running, each a session's share."""
        return load + reserved * self.per_session


class CpuMeter:
    """CPU of this process and its children as a share of the cores it may use, averaged
    over the last `window_s` (cgroup quota and CPU affinity respected)."""

    def __init__(self, window_s: float = CPU_WINDOW_S) -> None:
        import psutil

        self._proc = psutil.Process()
        self._window_s = window_s
        self._samples: collections.deque[tuple[float, float]] = collections.deque()
        self.cores = usable_cores()
        self._lock = threading.Lock()  # livekit-agents calls load_fnc from executor threads
        self._children: list[Any] = []
        self._children_at = -math.inf

    def share(self) -> float:
        import psutil

        if time.monotonic() - self._children_at >= CHILDREN_REFRESH_S:
            # Listing children scans all of /proc: ~9% of a 3-session worker's CPU when done
            # at every load report (py-spy), so the list is refreshed only now and then.
            self._children = self._proc.children(recursive=True)
            self._children_at = time.monotonic()
        spent = 0.0
        for p in (self._proc, *self._children):
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            spent += t.user + t.system
        now = time.monotonic()
        with self._lock:
            self._samples.append((now, spent))
            while len(self._samples) > 2 and now - self._samples[1][0] >= self._window_s:
                self._samples.popleft()
            (t0, c0), (t1, c1) = self._samples[0], self._samples[-1]
        if t1 - t0 < 1.0:
            return 0.0  # too short a window to tell
        # Children that exited take their CPU time with them: never below zero.
        return max(0.0, (c1 - c0) / (t1 - t0) / self.cores)


def usable_cores() -> float:
    cores = float(len(os.sched_getaffinity(0)))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return cores
    return min(cores, int(quota) / int(period)) if quota != "max" else cores


def _server_class() -> type:
    from livekit.agents import AgentServer

    class VoxroomServer(AgentServer):  # type: ignore[misc]
        """AgentServer whose jobs accepted but not yet running count a session's share each.

        livekit-agents 1.8 reserves a slot per accepted job (so two requests for one free
        slot do not both pass), but prices a reserved job at threshold / num_idle_processes
        while no job is running: with one idle process the second of two rooms created
        together is refused although slots are free, and LiveKit, with no other worker to
        try, never dispatches that room.
        """

        def __init__(self, *a: Any, session_load: SessionLoad, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.session_load = session_load

        def _get_effective_load(self) -> float:
            return self.session_load.effective(self._worker_load, self._reserved_slots)

    return VoxroomServer


async def entrypoint(ctx: object) -> None:
    """One job: join the room, wait for the user, converse until they leave."""
    from livekit.agents import AutoSubscribe, JobContext

    from agent.adapters.providers import load_tts
    from agent.config import ConfigError
    from agent.transports.phone_call import PhoneCall, is_sip
    from agent.transports.room_io import OUTPUT_RATE
    from agent.transports.room_session import run_room_session
    from agent.worker.profiles import (
        caller_instructions,
        profile_llm,
        profile_toolbox,
        profile_tts,
        requested_profile,
    )

    assert isinstance(ctx, JobContext)
    settings = load_settings()
    userdata = ctx.proc.userdata
    await ctx.connect(auto_subscribe=AutoSubscribe.AUDIO_ONLY)
    named = served_identity(ctx.job.metadata, ctx.room.metadata)
    # Named (or a phone caller): nobody else who happens to join first is served in the
    # user's place.
    kinds = served_kinds(ctx.job.metadata, ctx.room.metadata)
    participant = await (ctx.wait_for_participant(identity=named, kind=kinds) if kinds
                         else ctx.wait_for_participant(identity=named))
    from agent.copilot.room import run_copilot_session
    from agent.transports.room_io import requested_mode

    try:
        profile = settings.profile(requested_profile(ctx.job.metadata, ctx.room.metadata))
    except ConfigError as e:  # the dispatcher asked for an agent this pool does not have
        log.error("job %s in %s refused: %s", ctx.job.id, ctx.room.name, e)
        ctx.shutdown(f"refused: {e}")
        return
    # One client (and connection pool) per process and profile LLM.
    llm = profile_llm(userdata, settings, profile,
                      lambda llm_settings: _process_llm(replace(settings, llm=llm_settings)))
    tts = profile_tts(userdata, settings, profile,
                      lambda tts_settings: load_tts(OUTPUT_RATE, tts_settings))
    if requested_mode(ctx.job.metadata, ctx.room) == "copilot":
        log.info("job %s: interview copilot in %s", ctx.job.id, ctx.room.name)
        await run_copilot_session(
            ctx.room, job_metadata=ctx.job.metadata, stt=userdata["stt"], llm=llm,
            tts=tts, turn_detector=userdata.get("turn_detector"),
        )
        ctx.shutdown("candidate left")
        return
    log.info("job %s: %s talking with %s in %s", ctx.job.id, profile.name,
             participant.identity, ctx.room.name)
    phone = (PhoneCall(ctx.room, participant, settings.livekit, profile.transfer_to)
             if is_sip(participant) else None)
    await run_room_session(
        ctx.room,
        participant,
        stt=userdata["stt"],
        tts=tts,
        llm=llm,
        system_prompt=caller_instructions(profile.instructions, phone.number if phone else ""),
        toolbox=profile_toolbox(userdata.get("tools"), profile),
        greeting=profile.greeting,
        store=userdata["store"],
        memory=userdata.get("memory"),
        stt_partials=settings.stt.partials,
        barge_in=settings.turn.barge_in,
        turn_detector=userdata.get("turn_detector"),
        phone=phone,
        keypad=profile.keypad,
    )
    ctx.shutdown("participant left")


async def _check_providers(settings: Settings) -> None:
    from agent.worker.provider_checks import ProviderError, check_providers

    try:
        for verified in await check_providers(settings):
            log.info("provider: %s", verified)
    except ProviderError as e:
        log.error("provider check failed: %s", e)


def served_identity(job_metadata: str, room_metadata: str) -> str | None:
    """The user the agent serves, when the dispatch's (or else the room's) metadata names one
    under `voxroom.user`; None: the first participant to join (of `served_kinds`)."""
    from agent.protocol import KEY_USER
    from agent.worker.profiles import dispatch_value

    return dispatch_value(job_metadata, room_metadata, KEY_USER,
                          accept=lambda v: isinstance(v, str) and bool(v))


def served_kinds(job_metadata: str, room_metadata: str) -> list[int] | None:
    """The kinds of participant the agent may serve: a phone caller only ([SIP]) when the
    metadata's `voxroom.user_kind` is "sip" (a SIP dispatch rule's room: a person who joins
    from a browser is not the caller); None: livekit-agents' default (standard, SIP,
    connector)."""
    from livekit import rtc

    from agent.protocol import KEY_USER_KIND, USER_KIND_SIP
    from agent.worker.profiles import dispatch_value

    kind = dispatch_value(job_metadata, room_metadata, KEY_USER_KIND)
    if kind is None:
        return None
    if kind != USER_KIND_SIP:
        log.warning("%s %r unknown (known: %s), ignored", KEY_USER_KIND, kind, USER_KIND_SIP)
        return None
    return [rtc.ParticipantKind.PARTICIPANT_KIND_SIP]


def _process_llm(settings: Settings) -> object:
    """The LLM client of this job process, with the local fallback when configured."""
    from agent.adapters.providers import make_llm

    local_url = os.environ.get(LOCAL_LLM_URL_ENV)
    llm = make_llm(settings.llm, local_base_url=local_url)
    if settings.llm.provider == "openai" and settings.llm.fallback == "local":
        from agent.adapters.llm.fallback import FallbackLLM
        from agent.ops.metrics import record_fallback

        local = make_llm(
            replace(settings.llm, provider="local", model=""), local_base_url=local_url
        )
        llm = FallbackLLM(
            llm,
            local,
            first_token_budget_s=settings.llm.first_token_budget_s,
            on_fallback=lambda why: record_fallback("llm_local", why),
        )
    return llm


def stop_on_signals() -> asyncio.Event:
    """An event the running loop sets on Ctrl-C or SIGTERM: time to stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _drain(server: object, stop: asyncio.Event, timeout_s: float) -> None:
    """Take no new jobs and let the active conversations end, for at most `timeout_s`; a
    second signal stops at once."""
    n = len(server.active_jobs)  # type: ignore[attr-defined]
    print(f"voxroom: draining, {n} active conversation(s), up to {timeout_s:.0f} s", flush=True)
    stop.clear()
    drain = asyncio.create_task(server.drain(timeout=None))  # type: ignore[attr-defined]
    again = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait(
        [drain, again], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
    )
    for task in (drain, again):
        task.cancel()
    await asyncio.gather(drain, again, return_exceptions=True)
    print("voxroom: drained" if drain in done else "voxroom: stopping now", flush=True)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = load_settings(args.config)
    if args.metrics_port is not None and args.executor == "process":
        # Sessions in job processes: their metrics are summed from a multiprocess directory.
        # Job threads share the worker's registry, and must not: closing a session would mark
        # the whole worker process dead there.
        from agent.ops.metrics import prepare_multiprocess_dir

        prepare_multiprocess_dir()
    elif os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None):
        log.warning("PROMETHEUS_MULTIPROC_DIR ignored: job threads share one registry")
    return asyncio.run(_serve(settings, args))


async def _serve(settings: Settings, args: argparse.Namespace) -> int:
    from livekit.agents import JobExecutorType

    # A wrong key or URL is a clear error in the log at start, not a silent agent at the first
    # turn. It does not stop the worker: a provider down for a minute must not take the pool
    # down with it, and each turn has its fallbacks (`voxroom doctor` exits non-zero instead).
    provider_check = asyncio.create_task(_check_providers(settings), name="provider-check")
    local_llm = None
    if settings.llm.provider == "local" or settings.llm.fallback == "local":
        from agent.adapters.llm.llama_server import LocalLLMServer

        local_llm = LocalLLMServer()
        url = await asyncio.to_thread(local_llm.start)
        os.environ[LOCAL_LLM_URL_ENV] = url  # inherited by the job processes
        log.info("bundled LLM serving at %s", url)

    thread = args.executor == "thread"
    if thread:  # loaded before registering, so the first job does not wait for the models
        await asyncio.to_thread(process_engines)
    if local_llm is not None:
        # The default profile's prompt, and its tools where this process lists them.
        from agent.config import DEFAULT_PROFILE
        from agent.worker.profiles import profile_toolbox

        profile = settings.profile(DEFAULT_PROFILE)
        box = profile_toolbox(_engines.tools if _engines is not None else None, profile)
        await asyncio.to_thread(local_llm.warm, profile.instructions, box.specs if box else [])
    session_load = SessionLoad(args.max_sessions, args.max_cpu)
    cpu = CpuMeter()

    def load(srv: Any) -> float:
        return session_load.load(len(srv.active_jobs), cpu.share())

    server = _server_class()(
        session_load=session_load,
        ws_url=settings.livekit.url,
        api_key=settings.livekit.api_key,
        api_secret=settings.livekit.api_secret,
        job_executor_type=JobExecutorType.THREAD if thread else JobExecutorType.PROCESS,
        num_idle_processes=args.idle_processes,
        load_fnc=load,
        load_threshold=LOAD_THRESHOLD,
        initialize_process_timeout=120.0,
        port=args.health_port,
        setup_fnc=prewarm,
        prometheus_port=args.metrics_port,
        prometheus_multiproc_dir=None if thread else os.environ.get("PROMETHEUS_MULTIPROC_DIR"),
    )
    server.rtc_session(entrypoint, agent_name=args.agent_name or settings.livekit.agent_name)
    worker_id = ""
    leases = _RedispatchTask(settings) if args.redispatch else None

    @server.on("worker_registered")
    def _registered(registered_id: str, _info: object) -> None:
        nonlocal worker_id
        worker_id = registered_id
        # `voxroom demo` and the tests wait for this line.
        print(
            f"voxroom: worker registered as {registered_id} at {settings.livekit.url} "
            f"({args.executor} executor, {args.max_sessions} sessions)",
            flush=True,
        )
        if leases is not None:
            leases.start(server, lambda: worker_id)

    stop = stop_on_signals()
    run_task = asyncio.create_task(server.run(devmode=False))
    try:
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait([run_task, stopped], return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            await _drain(server, stop, args.drain_timeout)
    finally:
        provider_check.cancel()
        if leases is not None:
            await leases.aclose()
        await server.aclose()
        await asyncio.gather(run_task, provider_check, return_exceptions=True)
        if _engines is not None and _engines.tools is not None:
            await asyncio.to_thread(_engines.tools.close)  # the MCP servers' processes too
        if local_llm is not None:
            await asyncio.to_thread(local_llm.stop)
    return 0


class _RedispatchTask:
    """The lease loop of agent/worker/redispatch.py and what it holds open. Opened before the
    worker registers (a table it cannot open stops the worker with its reason); the loop
    starts once it registered, when LiveKit lists its jobs."""

    def __init__(self, settings: Settings) -> None:
        from livekit import api

        self._table = _open_leases(settings)
        lk = settings.livekit
        self._api = api.LiveKitAPI(lk.url, lk.api_key, lk.api_secret)
        self._task: asyncio.Task[None] | None = None

    def start(self, server: Any, worker_id: Callable[[], str]) -> None:
        """Start the loop; again (a re-registration) is a no-op."""
        from agent.worker.redispatch import Redispatcher

        if self._task is None:
            redispatcher = Redispatcher(self._table, self._api, lambda: server.active_jobs,
                                        worker_id)
            self._task = asyncio.create_task(redispatcher.run(), name="leases")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._api.aclose()
        self._table.close()


def _open_leases(settings: Settings) -> Any:
    """Redis' leases with store.redis_url, else the SQLite table in the store's file."""
    from agent.store.leases import LeaseTable

    if settings.store.redis_url:
        from agent.store.shared_state import RedisLeases, connect_redis

        return RedisLeases(connect_redis(settings.store.redis_url))
    from agent.store.transcripts import default_store_path, open_store_file

    return open_store_file(
        LeaseTable, default_store_path(settings.store.path), "keep the room leases in",
        "store.redis_url (VOXROOM_REDIS_URL), or store.path (VOXROOM_STORE_PATH) to a writable "
        "file")
