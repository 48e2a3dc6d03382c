"""One job: join the room, wait for the user it serves, pick the room's profile and its
engines, then run the interview copilot or the voice agent until the user leaves."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agent.config import ProfileSettings, Settings, load_settings

if TYPE_CHECKING:  # livekit-agents is loaded by the job itself, not by its importers
    from livekit import rtc
    from livekit.agents import JobContext

log = logging.getLogger("voxroom.worker")


async def entrypoint(ctx: JobContext) -> None:
    """One job: join the room, wait for the user, converse until they leave."""
    from livekit.agents import AutoSubscribe

    from agent.adapters.providers import load_tts
    from agent.config import ConfigError
    from agent.transports.room_io import OUTPUT_RATE
    from agent.worker.job_llm import process_llm
    from agent.worker.profiles import profile_llm, profile_tts, requested_profile
    from agent.worker.served import served_identity, served_kinds

    settings = load_settings()
    userdata = ctx.proc.userdata
    await ctx.connect(auto_subscribe=AutoSubscribe.AUDIO_ONLY)
    named = served_identity(ctx.job.metadata, ctx.room.metadata)
    # Named (or a phone caller): nobody else who happens to join first is served in the
    # user's place.
    kinds = served_kinds(ctx.job.metadata, ctx.room.metadata)
    participant = await (
        ctx.wait_for_participant(identity=named, kind=kinds)
        if kinds
        else ctx.wait_for_participant(identity=named)
    )
    from agent.transports.room_io import requested_mode

    try:
        profile = settings.profile(requested_profile(ctx.job.metadata, ctx.room.metadata))
    except ConfigError as e:  # the dispatcher asked for an agent this pool does not have
        log.error("job %s in %s refused: %s", ctx.job.id, ctx.room.name, e)
        ctx.shutdown(f"refused: {e}")
        return
    # One client (and connection pool) per process and profile LLM.
    llm = profile_llm(
        userdata,
        settings,
        profile,
        lambda llm_settings: process_llm(replace(settings, llm=llm_settings)),
    )
    tts = profile_tts(
        userdata, settings, profile, lambda tts_settings: load_tts(OUTPUT_RATE, tts_settings)
    )
    if requested_mode(ctx.job.metadata, ctx.room) == "copilot":
        await _copilot_job(ctx, userdata, llm, tts)
    else:
        await _voice_job(ctx, settings, profile, participant, userdata, llm, tts)


async def _copilot_job(ctx: JobContext, userdata: dict[str, Any], llm: Any, tts: Any) -> None:
    """The interview copilot, until the candidate leaves."""
    from agent.copilot.room import run_copilot_session

    log.info("job %s: interview copilot in %s", ctx.job.id, ctx.room.name)
    await run_copilot_session(
        ctx.room,
        job_metadata=ctx.job.metadata,
        stt=userdata["stt"],
        llm=llm,
        tts=tts,
        turn_detector=userdata.get("turn_detector"),
    )
    ctx.shutdown("candidate left")


async def _voice_job(
    ctx: JobContext,
    settings: Settings,
    profile: ProfileSettings,
    participant: rtc.RemoteParticipant,
    userdata: dict[str, Any],
    llm: Any,
    tts: Any,
) -> None:
    """The voice agent of `profile` with `participant` (a phone caller's call included),
    until they leave."""
    from agent.transports.phone_call import PhoneCall, is_sip
    from agent.transports.room_session import run_room_session
    from agent.worker.profiles import caller_instructions, profile_toolbox

    log.info(
        "job %s: %s talking with %s in %s",
        ctx.job.id,
        profile.name,
        participant.identity,
        ctx.room.name,
    )
    phone = (
        PhoneCall(ctx.room, participant, settings.livekit, profile.transfer_to)
        if is_sip(participant)
        else None
    )
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
