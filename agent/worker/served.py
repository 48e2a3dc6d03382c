"""Whom a job serves: the user its dispatch (or else its room) metadata names, and the kinds
of participant it may serve (a phone caller only in a SIP dispatch rule's room)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the LiveKit SDK loads with the job, not with this module
    from livekit import rtc

log = logging.getLogger("voxroom.worker")


def served_identity(job_metadata: str, room_metadata: str) -> str | None:
    """The user the agent serves, when the dispatch's (or else the room's) metadata names one
    under `voxroom.user`; None: the first participant to join (of `served_kinds`)."""
    from agent.protocol import KEY_USER
    from agent.worker.profiles import dispatch_value

    return dispatch_value(
        job_metadata, room_metadata, KEY_USER, accept=lambda v: isinstance(v, str) and bool(v)
    )


def served_kinds(
    job_metadata: str, room_metadata: str
) -> list[rtc.ParticipantKind.ValueType] | None:
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
