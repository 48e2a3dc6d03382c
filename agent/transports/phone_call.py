"""A phone caller's call, as livekit-sip brings it into the room: the participant of kind SIP,
its number (`sip.phoneNumber`), and what the agent can do to the call through LiveKit's APIs
(the tools' `PhoneLine`, agent/adapters/tools/base.py): send keypad digits (SIP DTMF packets, which
livekit-sip plays to the caller), transfer it (the SIP service's TransferSIPParticipant) and
hang up (the room service's RemoveParticipant of the caller)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agent.protocol import ATTR_SIP_PHONE_NUMBER

if TYPE_CHECKING:
    from livekit import rtc

    from agent.config import LiveKitSettings

log = logging.getLogger(__name__)

# RFC 4733's event codes, which livekit-sip's DTMF packets carry beside the digit.
DTMF_CODES = {
    **{str(d): d for d in range(10)},
    "*": 10,
    "#": 11,
    "A": 12,
    "B": 13,
    "C": 14,
    "D": 15,
}
MAX_SENT_DIGITS = 32  # an extension or a PIN; more is the LLM running away
# What a caller's number may be to reach a prompt or the store: the SIP From header's user
# part is the caller's to write, so anything but a plain number is dropped, never read out.
PHONE_NUMBER = re.compile(r"^\+?[0-9]{3,15}$")


def is_sip(participant: rtc.Participant) -> bool:
    from livekit import rtc

    return participant.kind == rtc.ParticipantKind.PARTICIPANT_KIND_SIP


def caller_number(attributes: Mapping[str, str]) -> str:
    """The caller's number from livekit-sip's attributes; "" when hidden or not a number."""
    number = attributes.get(ATTR_SIP_PHONE_NUMBER, "").strip()
    return number if PHONE_NUMBER.match(number) else ""


def dtmf_digits(digits: str) -> list[tuple[int, str]]:
    """(code, digit) for each keypad digit of `digits` (spaces and dashes skipped); ValueError
    naming what is not a keypad digit."""
    keys = [c.upper() for c in digits if c not in " -"]
    if bad := sorted({c for c in keys if c not in DTMF_CODES}):
        raise ValueError(f"not keypad digits: {' '.join(bad)} (0-9, *, #, A-D)")
    if not keys or len(keys) > MAX_SENT_DIGITS:
        raise ValueError(f"send 1 to {MAX_SENT_DIGITS} digits, not {len(keys)}")
    return [(DTMF_CODES[k], k) for k in keys]


class PhoneCall:
    """The call of `caller` (a SIP participant) in `room`. `transfer_to`: the profile's
    destinations, name -> sip:/tel: URI; the API client is made on first use."""

    def __init__(
        self,
        room: rtc.Room,
        caller: rtc.RemoteParticipant,
        livekit: LiveKitSettings,
        transfer_to: Mapping[str, str],
    ) -> None:
        self._room = room
        self.identity = caller.identity
        self.number = caller_number(caller.attributes)
        self._livekit = livekit
        self._targets = dict(transfer_to)
        self._api: Any = None

    @property
    def transfer_targets(self) -> list[str]:
        return sorted(self._targets)

    async def send_digits(self, digits: str) -> None:
        """Play `digits` to the caller (through livekit-sip), in order."""
        for code, digit in dtmf_digits(digits):
            await self._room.local_participant.publish_dtmf(code=code, digit=digit)

    async def transfer(self, target: str) -> None:
        """Transfer the call to the profile's destination `target`; ValueError for a name the
        profile does not have, RuntimeError for a transfer the SIP service reports failed.
        The caller leaves the room once the transfer is done."""
        from livekit import api
        from livekit.protocol import sip

        uri = self._targets.get(target)
        if uri is None:
            known = ", ".join(self.transfer_targets) or "none"
            raise ValueError(f"no transfer destination {target!r}; known: {known}")
        log.info("transferring %s to %s", self.identity, target)
        # livekit-api waits as long as the destination may ring.
        outcome = await self._client().sip.transfer_sip_participant(
            api.TransferSIPParticipantRequest(
                room_name=self._room.name,
                participant_identity=self.identity,
                transfer_to=uri,
                play_dialtone=True,
            )
        )
        if outcome.status == sip.SIPTransferStatus.STS_TRANSFER_FAILED:
            reason = sip.SIPTransferReason.Name(outcome.reason)
            raise RuntimeError(f"the transfer to {target} failed ({reason})")

    async def hang_up(self) -> None:
        """End the call: the caller is removed from the room, and livekit-sip hangs up."""
        from livekit import api

        log.info("hanging up on %s", self.identity)
        await self._client().room.remove_participant(
            api.RoomParticipantIdentity(room=self._room.name, identity=self.identity)
        )

    async def aclose(self) -> None:
        if self._api is not None:
            await self._api.aclose()
            self._api = None

    def _client(self) -> Any:
        from livekit import api

        if self._api is None:
            lk = self._livekit
            self._api = api.LiveKitAPI(lk.url, lk.api_key, lk.api_secret)
        return self._api
