"""Phone callers, end to end: a participant that joins a real livekit-server exactly as
livekit-sip joins a caller (bench/sip_caller.py: kind SIP, `sip.*` attributes, an audio track
with no source named after the participant, phone-band speech, DTMF data packets) talks to a
real `voxroom agent` worker (the scripted LLM double) dispatched by infra/sip/dispatch-rule.json's
room configuration.

The caller is heard and answered, with its number in the profile's instructions; its keypad
digits are a typed turn; its hanging up ends the session with every turn stored under its
number (masked in the log). The end_call tool hangs up on the caller (RemoveParticipant). A
browser participant who reaches the caller's room first is not taken for the caller."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from google.protobuf import json_format
from livekit import api, rtc
from livekit.protocol import sip

from agent.ops.livekit_server import LiveKitServer
from agent.protocol import KEY_PROFILE
from agent.store.transcripts import read_turns
from agent.testing.scripted_llm import ScriptedLLM, ScriptedToolTurn
from agent.testing.scripted_llm_server import scripted_llm_server
from agent.transports.keypad import keypad_text
from bench.measure import wait_until
from bench.room_client import RoomUser
from bench.sip_caller import CALLER_NUMBER, press, sip_caller
from tests.agent_process import agent_worker, scripted_llm_env
from tests.test_third_participant import joining, say, see_agent_already_there

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RULE = Path(__file__).resolve().parent.parent / "infra" / "sip" / "dispatch-rule.json"
QUESTION = "What are your opening hours?"
HOURS = "We are open from nine to five."
MENU = "You chose the bookings line."
GOODBYE = "Goodbye, and thank you for calling."
BROWSER_QUESTION = "Can you book me a table for two tonight?"
PRESS = "Please press four two and hash for me."
SENT = "I pressed them."
CONFIG = (
    "[profiles.phone]\n"
    'instructions = "You answer the phone for a shop. The caller is {caller_number}."\n'
    'tools = ["end_call", "send_digits"]\nkeypad = "text"\n'
)


def rule_room_config(**metadata: str) -> api.RoomConfiguration:
    """The room configuration the shipped dispatch rule gives each call, with `metadata` added
    to its agent's dispatch (a profile, as an operator's rule may name one)."""
    rule = json_format.Parse(RULE.read_text(), sip.CreateSIPDispatchRuleRequest())
    config = rule.dispatch_rule.room_config
    for agent in config.agents:
        agent.metadata = json.dumps({**json.loads(agent.metadata or "{}"), **metadata})
    return config


def _config(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "voxroom.toml"
    path.write_text(CONFIG, encoding="utf-8")
    return {"VOXROOM_CONFIG": str(path)}


def _read(log: Path) -> str:
    return log.read_text()


async def _wait_for_line(log: Path, text: str, timeout_s: float = 30) -> None:
    if not await wait_until(lambda: text in _read(log), timeout_s):
        pytest.fail(f"no {text!r} in the worker's log:\n" + _read(log)[-3000:])


async def _ask(caller: RoomUser, question: str, answers: int) -> None:
    """Say `question` (phone band, the line stays open) and wait for the agent's
    `answers`-th final transcript."""
    said = await say(caller, question)
    mic = asyncio.create_task(caller.silence(30))
    try:
        await caller.wait_for_state("speaking", after=said, timeout_s=30)
        assert caller.agent_identity is not None
        await caller.wait_for_finals(caller.agent_identity, answers, timeout_s=30)
    finally:
        mic.cancel()
        await asyncio.gather(mic, return_exceptions=True)


async def test_a_phone_caller_is_heard_answered_and_hanging_up_ends_the_session(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    requests: list[dict] = []
    llm = ScriptedLLM([HOURS, MENU], by_text={QUESTION: HOURS, keypad_text(["1"]): MENU})
    settings = livekit_server.livekit_settings()
    async with scripted_llm_server(llm, requests=requests) as base_url:
        with agent_worker(livekit_server, log, **scripted_llm_env(base_url), **_config(tmp_path)):
            caller = sip_caller(
                livekit_server.url,
                settings,
                "call-_+15105550123_a1",
                room_config=rule_room_config(**{KEY_PROFILE: "phone"}),
            )
            await caller.connect()
            try:
                await caller.wait_for_state("listening", after=0, timeout_s=120)
                await _ask(caller, QUESTION, 1)
                agent = caller.agent_identity
                assert agent is not None and caller.final_texts(agent) == [HOURS]
                # What the agent heard of the phone-band question.
                heard = caller.final_texts(caller.room.local_participant.identity)
                assert "opening hours" in heard[0].lower(), heard

                pressed = time.monotonic()
                await press(caller, "1")
                await caller.wait_for_state("speaking", after=pressed, timeout_s=30)
                assert await caller.wait_for_finals(agent, 2, timeout_s=30) == [HOURS, MENU]
                assert caller.final_texts(caller.room.local_participant.identity)[1] == (
                    keypad_text(["1"])
                )
            finally:
                await caller.close()  # the caller hangs up
            await _wait_for_line(log, "ended after 2 turns")

    system = requests[-1]["messages"][0]["content"]
    assert system == f"You answer the phone for a shop. The caller is {CALLER_NUMBER}."
    turns = read_turns(tmp_path / "transcripts.sqlite3")
    assert [t["agent_text"] for t in turns] == [HOURS, MENU]
    assert {t["caller"] for t in turns} == {CALLER_NUMBER}
    text = log.read_text()
    assert "talking with sip_+[REDACTED]23" in text
    assert CALLER_NUMBER not in text  # masked wherever it is logged
    assert "Traceback" not in text


async def test_a_browser_participant_is_not_the_caller_and_end_call_hangs_up(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    """The browser participant reaches the call's room first and speaks; the agent waits for
    the caller and answers the caller; its send_digits tool plays digits to the caller's line
    (SIP DTMF packets, as livekit-sip receives them), and its end_call tool removes the caller
    from the room."""
    log = tmp_path / "worker.log"
    room = "call-_+15105550123_b2"
    requests: list[dict] = []
    bye = ScriptedToolTurn(
        tool="end_call", arguments={"reason": "the caller is done"}, answer=GOODBYE
    )
    digits = ScriptedToolTurn(tool="send_digits", arguments={"digits": "42#"}, answer=SENT)
    llm = ScriptedLLM(
        [HOURS, digits, bye], by_text={QUESTION: HOURS, PRESS: digits, "That is all, bye.": bye}
    )
    settings = livekit_server.livekit_settings()
    async with scripted_llm_server(llm, requests=requests) as base_url:
        with agent_worker(livekit_server, log, **scripted_llm_env(base_url), **_config(tmp_path)):
            # As livekit-sip creates the room of a call: with the dispatch rule's configuration.
            async with api.LiveKitAPI(
                livekit_server.http_url, settings.api_key, settings.api_secret
            ) as lk:
                await lk.room.create_room(
                    api.CreateRoomRequest(
                        name=room, agents=rule_room_config(**{KEY_PROFILE: "phone"}).agents
                    )
                )
            browser = joining(livekit_server, room, "browser-1", dispatch_agent=False)
            caller = sip_caller(livekit_server.url, settings, room)
            removed = asyncio.Event()
            caller.room.on("disconnected", lambda reason: removed.set())
            heard_digits: list[tuple[str, str]] = []  # (digit, sender) as livekit-sip gets them
            caller.room.on(
                "sip_dtmf_received",
                lambda d: heard_digits.append(
                    (d.digit, d.participant.identity if d.participant else "")
                ),
            )
            await browser.connect()
            try:
                assert await wait_until(lambda: browser.agent_identity is not None, 120)
                browser_mic = asyncio.create_task(say(browser, BROWSER_QUESTION))
                await caller.connect()
                see_agent_already_there(caller)
                await caller.wait_for_state("listening", after=0, timeout_s=60)
                await browser_mic
                await _ask(caller, QUESTION, 1)
                await _ask(caller, PRESS, 2)
                assert await wait_until(lambda: len(heard_digits) == 3, 10), heard_digits
                assert heard_digits == [(d, caller.agent_identity) for d in "42#"]
                await _ask(caller, "That is all, bye.", 3)
                assert caller.agent_identity is not None
                assert caller.final_texts(caller.agent_identity) == [HOURS, SENT, GOODBYE]
                await asyncio.wait_for(removed.wait(), 30)  # hung up on
                assert caller.room.connection_state == rtc.ConnectionState.CONN_DISCONNECTED
            finally:
                await caller.close()
                await browser.close()
            await _wait_for_line(log, "ended after 3 turns")

    text = log.read_text()
    assert "talking with sip_+[REDACTED]23" in text and "browser-1 in" not in text
    assert "hanging up on sip_+[REDACTED]23" in text
    # Only the caller's words reached the LLM: the browser's question was never heard.
    users = [m["content"] for r in requests for m in r["messages"] if m["role"] == "user"]
    assert len(users) >= 3 and not any("table" in u.lower() for u in users), users
