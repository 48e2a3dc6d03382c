"""`voxroom agent`: an agent worker on livekit-agents' worker layer (its wiring: the command's
arguments, the server with its load, prewarm, job entry and leases, the drain on SIGTERM).

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
counts from the moment the worker says it is available for it (agent/worker/load.py).
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
import logging
import os
import sys
from typing import TYPE_CHECKING

from agent.config import Settings, load_settings
from agent.worker.drain import drain, stop_on_signals
from agent.worker.job import entrypoint
from agent.worker.job_llm import LOCAL_LLM_URL_ENV
from agent.worker.load import LOAD_THRESHOLD, CpuMeter, SessionLoad, server_class
from agent.worker.process_engines import loaded_engines, prewarm, process_engines
from agent.worker.redispatch import RedispatchTask

if TYPE_CHECKING:  # livekit-agents loads when the worker serves, not when the CLI lists commands
    from livekit.agents import AgentServer

log = logging.getLogger("voxroom.worker")

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


async def _check_providers(settings: Settings) -> None:
    from agent.worker.provider_checks import ProviderError, check_providers

    try:
        for verified in await check_providers(settings):
            log.info("provider: %s", verified)
    except ProviderError as e:
        log.error("provider check failed: %s", e)


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
        engines = loaded_engines()
        box = profile_toolbox(engines.tools if engines is not None else None, profile)
        await asyncio.to_thread(local_llm.warm, profile.instructions, box.specs if box else [])
    session_load = SessionLoad(args.max_sessions, args.max_cpu)
    cpu = CpuMeter()

    def load(srv: AgentServer) -> float:
        return session_load.load(len(srv.active_jobs), cpu.share())

    server = server_class()(
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
    leases = RedispatchTask(settings) if args.redispatch else None

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
            await drain(server, stop, args.drain_timeout)
    finally:
        provider_check.cancel()
        if leases is not None:
            await leases.aclose()
        await server.aclose()
        await asyncio.gather(run_task, provider_check, return_exceptions=True)
        engines = loaded_engines()
        if engines is not None and engines.tools is not None:
            await asyncio.to_thread(engines.tools.close)  # the MCP servers' processes too
        if local_llm is not None:
            await asyncio.to_thread(local_llm.stop)
    return 0
