"""Which agent a room gets: the profile its dispatch (or else its room) metadata names under
`voxroom.profile`, "default" when none does; and what a profile needs beyond the worker's
shared engines (an LLM client of its own when it changes [llm], its tools, its instructions
with the phone caller's number)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agent.config import DEFAULT_PROFILE, LLMSettings, ProfileSettings, Settings, TTSSettings

if TYPE_CHECKING:  # the registry's MCP client libraries load with the worker's engines
    from agent.adapters.tools.registry import ToolRegistry
    from agent.adapters.tools.toolbox import Toolbox
    from agent.engines import LanguageModel, TextToSpeech

log = logging.getLogger("voxroom.worker")


# Where a profile's instructions get the caller's number: "You are on the phone with
# {caller_number}." (a plain replacement: instructions may hold other braces).
CALLER_FIELD = "{caller_number}"
NO_CALLER = "an unknown number"


def dispatch_value(
    job_metadata: str,
    room_metadata: str,
    key: str,
    *,
    accept: Callable[[Any], bool] = lambda v: v is not None,
) -> Any:
    """`key`'s value in the dispatch's metadata if `accept`ed, else in the room's; None."""
    from agent.transports.room_io import read_metadata

    for text, where in ((job_metadata, "dispatch"), (room_metadata, "room")):
        value = read_metadata(text, where, warn=False).get(key)
        if accept(value):
            return value
    return None


def requested_profile(job_metadata: str, room_metadata: str) -> str:
    """The profile named by the dispatch's metadata, else the room's; a name that is not a
    non-empty string is the caller's to refuse, so it is returned as given (stringified)."""
    from agent.protocol import KEY_PROFILE

    named = dispatch_value(job_metadata, room_metadata, KEY_PROFILE)
    if named is None:
        return DEFAULT_PROFILE
    return named if isinstance(named, str) else repr(named)


def caller_instructions(instructions: str, number: str) -> str:
    """`instructions` with CALLER_FIELD replaced by a phone caller's number (NO_CALLER when
    it is hidden or not a caller)."""
    return instructions.replace(CALLER_FIELD, number or NO_CALLER)


def profile_llm(
    userdata: dict[str, Any],
    settings: Settings,
    profile: ProfileSettings,
    make: Callable[[LLMSettings], LanguageModel],
) -> LanguageModel:
    """The LLM client for `profile`: the worker's own when the profile keeps [llm], else one
    per profile and process (`make(LLMSettings)` builds it), kept for its next rooms."""
    if profile.llm == settings.llm:
        key = "llm"
    else:
        key = f"llm:{profile.name}"
    if key not in userdata:
        userdata[key] = make(profile.llm)
    return userdata[key]


def profile_tts(
    userdata: dict[str, Any],
    settings: Settings,
    profile: ProfileSettings,
    make: Callable[[TTSSettings], TextToSpeech],
) -> TextToSpeech:
    """The TTS for `profile`: the worker's own, or (a profile's `voice`, which config allows
    only with a TTS server of named voices) one per voice and process, `make(TTSSettings)`."""
    if not profile.voice or profile.voice == settings.tts.voice:
        return userdata["tts"]
    key = f"tts:{profile.voice}"
    if key not in userdata:
        userdata[key] = make(replace(settings.tts, voice=profile.voice))
    return userdata[key]


def profile_toolbox(registry: ToolRegistry | None, profile: ProfileSettings) -> Toolbox | None:
    """The tools `profile` offers (None: it names none, or the worker has no registry)."""
    if not profile.tools or registry is None:
        return None
    return registry.toolbox(profile.tools)
