"""The anchor of `voxroom bench --compare-agentsession`: a LiveKit Agents worker whose rooms
are run by livekit-agents' own AgentSession, with voxroom's engines as plugins (Whisper
tiny.en behind livekit's VAD StreamAdapter, the bundled Piper voice), livekit's OpenAI plugin
pointed at the same LLM server as voxroom, and livekit's bundled Silero VAD (offline).

Two configurations:
- `defaults`: AgentSession as it comes, minus the cloud: the local `v1-mini` turn detector
  (what its default resolves to outside LiveKit Cloud and dev mode) and VAD interruption
  (adaptive interruption calls LiveKit Cloud).
- `tuned`: voxroom's turn-taking numbers: endpoint after voxroom's cued silence (min_delay)
  and never later than its plain silence (max_delay), VAD turn detection, interruption after
  voxroom's barge-in length, false-interruption resume after voxroom's timeout; and
  preemptive generation on (the LLM started before the end of turn is confirmed).

Run by the bench as `python -m bench.agentsession CONFIG`; environment:
LIVEKIT_URL/LIVEKIT_API_KEY/LIVEKIT_API_SECRET, VOXROOM_BENCH_LLM_BASE_URL,
VOXROOM_BENCH_LLM_MODEL, VOXROOM_BENCH_METRICS (a JSON-lines file that gets every
AgentSession metrics event, with the wall-clock time it was collected, and its user and
agent state changes), and
VOXROOM_BENCH_TOOLS (comma-separated tool doubles of bench/tool_doubles.py the agent gets).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from agent.models import passive_openmp

if TYPE_CHECKING:  # livekit-agents loads in the worker the bench starts, not on import
    from livekit.agents import TurnHandlingOptions

CONFIGS = ("defaults", "tuned")
AGENT_NAME = "agentsession-bench"


def turn_handling(config: str) -> TurnHandlingOptions:
    """AgentSession's `turn_handling` for one configuration (see the module docstring)."""
    from livekit.agents import inference

    from state_machine.options import TurnOptions

    if config == "defaults":
        return {
            "turn_detection": inference.TurnDetector(version="v1-mini"),
            "interruption": {"mode": "vad"},
        }
    if config == "tuned":
        o = TurnOptions()
        return {
            # Its fastest: the LLM started on the interim transcript before the end of turn
            # is confirmed (livekit-agents 1.8.9 has it on by default; named so it stays on).
            "preemptive_generation": {"enabled": True},
            "turn_detection": "vad",
            "endpointing": {
                "mode": "fixed",
                "min_delay": o.endpoint.silence_cued_s,
                "max_delay": o.endpoint.silence_s,
            },
            "interruption": {
                "mode": "vad",
                "min_duration": o.barge_in_frames * o.frame_s,
                "false_interruption_timeout": o.false_interruption_s,
            },
        }
    raise ValueError(f"unknown AgentSession configuration {config!r}; known: {CONFIGS}")


def prewarm(proc: Any) -> None:
    """Load and warm the engines and the VAD once per job process."""
    from livekit.agents import inference
    from livekit.plugins import openai  # noqa: F401 (a 2 s import, not on the first turn)

    from agent.livekit_plugins import load_plugins

    proc.userdata["stt"], proc.userdata["tts"] = load_plugins()
    proc.userdata["vad"] = inference.VAD(model="silero")


async def entrypoint(ctx: Any) -> None:
    from livekit.agents import (
        Agent,
        AgentSession,
        AgentStateChangedEvent,
        MetricsCollectedEvent,
        UserStateChangedEvent,
    )
    from livekit.plugins import openai as lk_openai

    from agent.config import load_settings

    settings = load_settings()
    config = os.environ["VOXROOM_BENCH_AGENTSESSION"]
    ud = ctx.proc.userdata
    llm = lk_openai.LLM(
        model=os.environ["VOXROOM_BENCH_LLM_MODEL"],
        base_url=os.environ["VOXROOM_BENCH_LLM_BASE_URL"],
        api_key=os.environ.get("OPENAI_API_KEY") or "unused",
        temperature=settings.llm.temperature,
        max_completion_tokens=settings.llm.max_tokens,
    )
    session: AgentSession = AgentSession(
        stt=ud["stt"].with_vad(ud["vad"]),
        vad=ud["vad"],
        llm=llm,
        tts=ud["tts"],
        turn_handling=turn_handling(config),
    )
    metrics_path = os.environ.get("VOXROOM_BENCH_METRICS")
    if metrics_path:
        out = await asyncio.to_thread(open, metrics_path, "a", encoding="utf-8")

        def write(row: dict[str, Any]) -> None:
            out.write(json.dumps(row) + "\n")
            out.flush()

        @session.on("metrics_collected")
        def _collected(ev: MetricsCollectedEvent) -> None:
            write({"collected_at": time.time(), **ev.metrics.model_dump(mode="json")})

        # When its VAD heard the user start and when the agent stopped talking (an
        # interruption's stop at the agent, bench/livekit_path.py).
        @session.on("user_state_changed")
        def _user_state(ev: UserStateChangedEvent) -> None:
            write(
                {
                    "collected_at": ev.created_at,
                    "type": ev.type,
                    "old_state": ev.old_state,
                    "new_state": ev.new_state,
                }
            )

        @session.on("agent_state_changed")
        def _agent_state(ev: AgentStateChangedEvent) -> None:
            write(
                {
                    "collected_at": ev.created_at,
                    "type": ev.type,
                    "old_state": ev.old_state,
                    "new_state": ev.new_state,
                }
            )

        ctx.add_shutdown_callback(lambda: asyncio.to_thread(out.close))
    await ctx.connect()
    agent = Agent(instructions=settings.llm.system_prompt, tools=bench_tools())
    await session.start(agent=agent, room=ctx.room)


def bench_tools() -> list[Any]:
    """The tool doubles named in VOXROOM_BENCH_TOOLS (bench/tool_doubles.py) as livekit's
    `@function_tool`s: the same functions voxroom's worker loads as Python tools."""
    from livekit.agents import function_tool

    from bench import tool_doubles

    names = [n for n in os.environ.get("VOXROOM_BENCH_TOOLS", "").split(",") if n]
    return [function_tool(getattr(tool_doubles, name)) for name in names]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.agentsession")
    p.add_argument("config", choices=CONFIGS)
    p.add_argument("--agent-name", default=AGENT_NAME)
    p.add_argument("--log-level", default="INFO")
    p.add_argument(
        "--max-jobs",
        type=int,
        default=4,
        help="rooms the worker takes at once (voxroom loadtest sets its ladder's top)",
    )
    args = p.parse_args(argv)
    if args.max_jobs < 1:
        p.error("--max-jobs must be at least 1")
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    os.environ["VOXROOM_BENCH_AGENTSESSION"] = args.config  # read by the job processes
    passive_openmp()
    return asyncio.run(_serve(args.agent_name, args.max_jobs))


async def _serve(agent_name: str, max_jobs: int) -> int:
    from livekit.agents import AgentServer, JobExecutorType

    from agent.config import load_settings
    from agent.worker.drain import stop_on_signals

    lk = load_settings().livekit
    server = AgentServer(
        ws_url=lk.url,
        api_key=lk.api_key,
        api_secret=lk.api_secret,
        job_executor_type=JobExecutorType.PROCESS,
        num_idle_processes=0,
        # As voxroom's worker: load is session slots, not CPU (two shared cores read as full).
        load_fnc=lambda srv: len(srv.active_jobs) / max_jobs,
        load_threshold=0.999,
        initialize_process_timeout=120.0,
        port=0,
        setup_fnc=prewarm,
    )
    server.rtc_session(entrypoint, agent_name=agent_name)

    @server.on("worker_registered")
    def _registered(worker_id: str, _info: object) -> None:
        print(f"agentsession: worker registered as {worker_id}", flush=True)

    stop = stop_on_signals()
    run_task = asyncio.create_task(server.run(devmode=False))
    try:
        await asyncio.wait(
            [run_task, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        await server.aclose()
        await asyncio.gather(run_task, return_exceptions=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
