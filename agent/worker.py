"""`voxroom agent`: an agent worker on livekit-agents' worker layer.

The worker registers with the LiveKit server for explicit dispatch under the agent name
(default `voxroom`). LiveKit sends it a job per room; each job runs in a prewarmed process
whose speech models were loaded once (prewarm), not per job. With the bundled LLM the worker
starts one llama.cpp server for all its jobs and warms its prompt cache.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from agent.config import Settings, load_settings

log = logging.getLogger("voxroom.worker")

LOCAL_LLM_URL_ENV = "VOXROOM_LOCAL_LLM_URL"  # set by the worker for its job processes
SESSION_LOAD_THRESHOLD = 0.999  # full when every session slot is taken (LiveKit wants < 1)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent-name", default=None, help="dispatch name (default: livekit.agent_name)")
    p.add_argument(
        "--idle-processes",
        type=int,
        default=1,
        help="job processes kept prewarmed (models loaded) ahead of dispatch",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=4,
        help="conversations one worker takes before LiveKit sends jobs elsewhere",
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


def prewarm(proc: object) -> None:
    """Runs once in every job process before it takes a job: load and warm the speech models."""
    from agent.engine_loader import load_speech_engines
    from agent.room_session import OUTPUT_RATE
    from agent.transcript_store import TranscriptStore

    stt, tts = load_speech_engines(OUTPUT_RATE)
    proc.userdata["stt"] = stt  # type: ignore[attr-defined]
    proc.userdata["tts"] = tts  # type: ignore[attr-defined]
    proc.userdata["store"] = TranscriptStore()  # type: ignore[attr-defined]


async def entrypoint(ctx: object) -> None:
    """One job: join the room, wait for the user, converse until they leave."""
    from livekit.agents import AutoSubscribe, JobContext

    from agent.room_session import run_room_session

    assert isinstance(ctx, JobContext)
    settings = load_settings()
    userdata = ctx.proc.userdata
    if "llm" not in userdata:  # one client (and connection pool) per process
        userdata["llm"] = _process_llm(settings)
    await ctx.connect(auto_subscribe=AutoSubscribe.AUDIO_ONLY)
    participant = await ctx.wait_for_participant()
    from agent.copilot import requested_mode, run_copilot_session

    if requested_mode(ctx.job.metadata, ctx.room) == "copilot":
        log.info("job %s: interview copilot in %s", ctx.job.id, ctx.room.name)
        await run_copilot_session(
            ctx.room, job_metadata=ctx.job.metadata, stt=userdata["stt"], llm=userdata["llm"]
        )
        ctx.shutdown("candidate left")
        return
    log.info("job %s: talking with %s in %s", ctx.job.id, participant.identity, ctx.room.name)
    await run_room_session(
        ctx.room,
        participant,
        stt=userdata["stt"],
        tts=userdata["tts"],
        llm=userdata["llm"],
        system_prompt=settings.llm.system_prompt,
        store=userdata["store"],
    )
    ctx.shutdown("participant left")


def _process_llm(settings: Settings) -> object:
    """The LLM client of this job process, with the local fallback when configured."""
    from agent.llm_factory import make_llm

    local_url = os.environ.get(LOCAL_LLM_URL_ENV)
    llm = make_llm(settings.llm, local_base_url=local_url)
    if settings.llm.provider == "openai" and settings.llm.fallback == "local":
        from dataclasses import replace

        from agent.llm_fallback import FallbackLLM
        from agent.metrics import record_fallback

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
    if args.metrics_port is not None:
        from agent.metrics import prepare_multiprocess_dir

        prepare_multiprocess_dir()
    return asyncio.run(_serve(settings, args))


async def _serve(settings: Settings, args: argparse.Namespace) -> int:
    from livekit.agents import AgentServer, JobExecutorType

    local_llm = None
    if settings.llm.provider == "local" or settings.llm.fallback == "local":
        from agent.llm_local import LocalLLMServer

        local_llm = LocalLLMServer()
        url = await asyncio.to_thread(local_llm.start)
        await asyncio.to_thread(local_llm.warm, settings.llm.system_prompt)
        os.environ[LOCAL_LLM_URL_ENV] = url  # inherited by the job processes
        log.info("bundled LLM serving at %s", url)

    server = AgentServer(
        ws_url=settings.livekit.url,
        api_key=settings.livekit.api_key,
        api_secret=settings.livekit.api_secret,
        job_executor_type=JobExecutorType.PROCESS,
        num_idle_processes=args.idle_processes,
        # Load is the share of session slots in use, not CPU: the models' own bursts (an LLM
        # reply pins a core) would otherwise mark a worker with one conversation as full.
        load_fnc=lambda srv: len(srv.active_jobs) / args.max_sessions,
        load_threshold=SESSION_LOAD_THRESHOLD,
        initialize_process_timeout=120.0,
        port=args.health_port,
        setup_fnc=prewarm,
        prometheus_port=args.metrics_port,
        prometheus_multiproc_dir=os.environ.get("PROMETHEUS_MULTIPROC_DIR"),
    )
    server.rtc_session(entrypoint, agent_name=args.agent_name or settings.livekit.agent_name)

    @server.on("worker_registered")
    def _registered(worker_id: str, _info: object) -> None:
        # `voxroom demo` and the tests wait for this line.
        print(f"voxroom: worker registered as {worker_id} at {settings.livekit.url}", flush=True)

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    run_task = asyncio.create_task(server.run(devmode=False))
    try:
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait([run_task, stopped], return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            await _drain(server, stop, args.drain_timeout)
    finally:
        await server.aclose()
        await asyncio.gather(run_task, return_exceptions=True)
        if local_llm is not None:
            await asyncio.to_thread(local_llm.stop)
    return 0
