"""Nobody but the candidate's bridge steers the copilot (real livekit-server, real `voxroom
agent` worker in copilot mode with the real Whisper and endpointing, the scripted LLM test
double, espeak questions).

Two third participants in the candidate's room publish a `meeting-audio` track and ask a
question into it: one with a plain join token that otherwise looks like a bridge (identity
"meeting-bridge-…", copilot-mode metadata, and it tries to give itself the bridge attribute),
one with a real bridge token made for another candidate. The copilot hears neither: the
candidate gets no answer and no transcript of theirs, and their words reach no LLM prompt.
Then the candidate's own bridge (its token names the candidate) asks a question, and that one
is answered: the copilot was listening all along.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agent.ops.livekit_server import LiveKitServer
from agent.protocol import (
    ATTR_AGENT_STATE,
    ATTR_ANSWER_STATUS,
    ATTR_BRIDGE_CANDIDATE,
    ATTR_QUESTION,
    MEETING_TRACK,
)
from agent.transports.room_io import set_attributes
from agent.transports.tokens import copilot_metadata, create_bridge_token, create_join_token
from bench.measure import require
from bench.room_client import CopilotClient, RoomUser, kept_answers
from tests.agent_process import scripted_llm_env, worker_beside_loop
from tests.fake_openai_server import fake_openai_server
from tests.marks import LIVEKIT_INTEGRATION
from tests.test_copilot_e2e import RecordingLLM
from tests.test_third_participant import say

pytestmark = LIVEKIT_INTEGRATION

ROOM = "copilot-intruder"
CANDIDATE = "candidate"
LOOKALIKE = "meeting-bridge-lookalike"  # a plain token: everything a bridge shows but its token
OTHERS_BRIDGE = "meeting-bridge-of-someone-else"  # a real bridge token, another candidate's
OURS = "meeting-bridge-ours"
INTRUDER_QUESTIONS = {
    LOOKALIKE: "What salary does the other candidate expect?",
    OTHERS_BRIDGE: "Tell me about your biggest weakness.",
}
INTRUDER_WORDS = ("salary", "weakness")
QUESTION = "Where did you go to university, and what did you study?"
REPLY = "- I studied computer science at the Technical University of Munich."


async def ask(user: RoomUser, text: str) -> asyncio.Task[None]:
    """Say `text` into `meeting-audio`, and keep the track going with silence (the pause that
    ends a question, were it heard); returns the silence's task."""
    await say(user, text)
    return asyncio.create_task(user.silence(60))


async def test_only_the_candidates_bridge_is_heard(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    settings = livekit_server.livekit_settings()
    log_path = tmp_path / "worker.log"
    llm = RecordingLLM([REPLY])
    lookalike = RoomUser(
        livekit_server.url,
        create_join_token(
            settings,
            ROOM,
            LOOKALIKE,
            dispatch_agent=False,
            metadata=json.dumps({"voxroom.mode": "copilot"}),
        ),
        track_name=MEETING_TRACK,
    )
    others_bridge = RoomUser(
        livekit_server.url,
        create_bridge_token(settings, ROOM, OTHERS_BRIDGE, "someone-else", copilot_mode=True),
        track_name=MEETING_TRACK,
    )
    ours = RoomUser(
        livekit_server.url,
        create_bridge_token(settings, ROOM, OURS, CANDIDATE, copilot_mode=True),
        track_name=MEETING_TRACK,
    )
    candidate = CopilotClient(CANDIDATE)
    speakers = (lookalike, others_bridge, ours)
    joined: list[RoomUser] = []
    silences: list[asyncio.Task[None]] = []

    async def join(user: RoomUser) -> None:
        await user.connect()
        joined.append(user)

    async with (
        fake_openai_server(llm) as base_url,
        worker_beside_loop(livekit_server, log_path, **scripted_llm_env(base_url)),
    ):
        # The candidate's token creates the room and dispatches their copilot, as the page does.
        await candidate.join(
            livekit_server.url,
            create_join_token(
                settings, ROOM, CANDIDATE, dispatch_metadata=copilot_metadata(CANDIDATE)
            ),
        )
        try:
            await require(
                lambda: (
                    (a := candidate.agent()) is not None
                    and a.attributes.get(ATTR_AGENT_STATE) == "listening"
                ),
                120,
                "the copilot never started listening",
            )
            # Its grants do not let a participant give itself the bridge attribute.
            await join(lookalike)
            await set_attributes(
                lookalike.room.local_participant, {ATTR_BRIDGE_CANDIDATE: CANDIDATE}
            )
            await join(others_bridge)
            silences += await asyncio.gather(
                *(
                    ask(user, INTRUDER_QUESTIONS[identity])
                    for user, identity in ((lookalike, LOOKALIKE), (others_bridge, OTHERS_BRIDGE))
                )
            )
            for identity in (LOOKALIKE, OTHERS_BRIDGE):
                await require(
                    lambda i=identity: (
                        f"{i}'s {MEETING_TRACK} ignored: not the bridge "
                        f"of {CANDIDATE}" in log_path.read_text()
                    ),
                    10,
                    f"the copilot never turned {identity}'s track down",
                )

            await join(ours)
            silences.append(await ask(ours, QUESTION))
            await require(
                lambda: bool(kept := kept_answers(candidate.answers)) and kept[-1].done_at,
                60,
                "the candidate's own bridge got no answer",
            )
            # Anything of the intruders' (asked seconds before) would have reached the
            # candidate before this answer was complete (an answer shown at the question's
            # comma and withdrawn when it went on was the candidate's own).
            [answer] = kept_answers(candidate.answers)
            asked = [a.attributes[ATTR_QUESTION].lower() for a in candidate.answers]
            assert all("university" in q for q in asked), asked
            assert answer.attributes[ATTR_ANSWER_STATUS] == "complete"
            heard = answer.attributes[ATTR_QUESTION].lower()
            assert "university" in heard, heard
            assert answer.text.strip() == REPLY.strip()
            said = " ".join(t.text.lower() for t in candidate.transcripts)
            assert "university" in said, said
            assert not any(word in said for word in INTRUDER_WORDS), said
            prompts = json.dumps(llm.requests).lower()
            assert not any(word in prompts for word in INTRUDER_WORDS)
            assert all(user.transcripts == [] for user in speakers)  # nothing to anyone else
            seen = candidate.room.remote_participants[LOOKALIKE].attributes
            assert ATTR_BRIDGE_CANDIDATE not in seen, dict(seen)
        finally:
            for task in silences:
                task.cancel()
            await asyncio.gather(*silences, return_exceptions=True)
            for user in joined:
                await user.close()
            await candidate.leave()
