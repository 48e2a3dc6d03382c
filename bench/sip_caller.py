"""A phone caller as livekit-sip brings one into a room, for the tests and `voxroom bench
--caller sip`: a participant of kind SIP with livekit-sip's `sip.*` attributes, identity
`sip_<number>`, its audio published with no track source under the participant's identity,
and its voice carried as a phone line carries it (8 kHz G.711 mu-law and back,
bench/listen_corpus.py's `phone_line`); keypad digits are SIP DTMF data packets. livekit-sip
itself cannot be built here: this joins the room exactly as it does, through a real
livekit-server."""

from __future__ import annotations

import dataclasses
import datetime
import json
import secrets
from typing import Any

from livekit import api, rtc

from agent.config import LiveKitSettings
from agent.protocol import (
    ATTR_SIP_CALL_ID,
    ATTR_SIP_PHONE_NUMBER,
    ATTR_SIP_TRUNK_ID,
    KEY_USER_KIND,
    USER_KIND_SIP,
)
from agent.transports.phone_call import DTMF_CODES
from bench.listen_corpus import phone_line
from bench.room_client import RoomUser

CALLER_NUMBER = "+15105550123"
TRUNK_NUMBER = "+15105550100"


def sip_dispatch(settings: LiveKitSettings, **metadata: str) -> api.RoomConfiguration:
    """The room configuration of infra/sip/dispatch-rule.json: the agent dispatched to serve
    the phone caller (`metadata` added to the dispatch's, e.g. a profile)."""
    job = {KEY_USER_KIND: USER_KIND_SIP, **metadata}
    return api.RoomConfiguration(
        agents=[api.RoomAgentDispatch(agent_name=settings.agent_name, metadata=json.dumps(job))]
    )


def sip_caller(
    url: str,
    settings: LiveKitSettings,
    room: str,
    *,
    number: str = CALLER_NUMBER,
    room_config: api.RoomConfiguration | None = None,
    ttl_s: int = 600,
) -> RoomUser:
    """A RoomUser about to join `room` as livekit-sip joins a caller from `number`;
    `room_config` stands for the dispatch rule's (the agent's dispatch)."""
    identity = f"sip_{number}"
    attributes = {
        ATTR_SIP_PHONE_NUMBER: number,
        ATTR_SIP_CALL_ID: "SCL_" + secrets.token_hex(6),
        ATTR_SIP_TRUNK_ID: "ST_" + secrets.token_hex(6),
        "sip.trunkPhoneNumber": TRUNK_NUMBER,
        "sip.callStatus": "active",
    }
    token = (
        api.AccessToken(settings.api_key, settings.api_secret)
        .with_identity(identity)
        .with_name(f"Phone {number}")
        .with_kind("sip")
        .with_attributes(attributes)
        .with_grants(
            api.VideoGrants(
                room_join=True,
                room=room,
                can_publish=True,
                can_subscribe=True,
                can_publish_data=True,
            )
        )
        .with_ttl(datetime.timedelta(seconds=ttl_s))
    )
    if room_config is not None:
        token.with_room_config(room_config)
    return RoomUser(
        url,
        token.to_jwt(),
        track_name=identity,
        track_source=rtc.TrackSource.SOURCE_UNKNOWN,
        line=phone_line,
    )


def over_phone_line(item: Any) -> Any:
    """A corpus item (bench.corpus.Utterance or BargeIn) as a phone caller says it: every
    utterance of it over the phone line (for the simulate path, which has no room)."""
    if hasattr(item, "interruption"):
        return dataclasses.replace(
            item,
            question=over_phone_line(item.question),
            interruption=over_phone_line(item.interruption),
        )
    return dataclasses.replace(item, pcm=phone_line(item.pcm))


async def press(caller: RoomUser, digits: str) -> None:
    """Keypad digits, one SIP DTMF packet each, as livekit-sip sends them."""
    for digit in digits:
        await caller.room.local_participant.publish_dtmf(code=DTMF_CODES[digit], digit=digit)
