"""The copilot's room-side rules that need no server: which mode a job runs in (and what
happens to bad metadata: agent.transports.room_io reads it), who is the bridge and whose
meeting audio is heard, which metadata file names may be read, and who receives the answers."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.copilot.events import NotAQuestion, QuestionTranscript
from agent.copilot.room import (
    CopilotSession,
    LiveKitAnswerSink,
    bridges_for,
    context_file,
    is_bridge,
)
from agent.events import TurnScore
from agent.protocol import (
    ATTR_ANSWER_FINAL,
    ATTR_ANSWER_STATUS,
    ATTR_BRIDGE_CANDIDATE,
    ATTR_QUESTION,
    MEETING_TRACK,
    TOPIC_COPILOT,
)
from agent.transports.room_io import parse_metadata, read_metadata, requested_mode

COPILOT = json.dumps({"voxroom.mode": "copilot"})


def _participant(
    identity: str,
    metadata: str = "",
    tracks: tuple[str, ...] = (),
    attributes: dict[str, str] | None = None,
):
    pubs = {f"TR_{i}": SimpleNamespace(name=name) for i, name in enumerate(tracks)}
    return SimpleNamespace(
        identity=identity, metadata=metadata, track_publications=pubs, attributes=attributes or {}
    )


def _room(metadata: str = "", *participants):
    return SimpleNamespace(
        metadata=metadata, remote_participants={p.identity: p for p in participants}
    )


def test_metadata_is_a_json_object_or_nothing() -> None:
    assert parse_metadata(COPILOT) == {"voxroom.mode": "copilot"}
    for bad in ("", None, "not json", "[1, 2]", '"copilot"'):
        assert parse_metadata(bad) == {}


def test_copilot_mode_comes_from_the_dispatch_the_room_or_the_bridge() -> None:
    user = _participant("candidate")
    assert requested_mode("", _room("", user)) == "voice"
    assert requested_mode(COPILOT, _room("", user)) == "copilot"
    assert requested_mode("", _room(COPILOT, user)) == "copilot"
    assert requested_mode("", _room("", user, _participant("b", COPILOT))) == "copilot"
    assert requested_mode('{"voxroom.mode": "voice"}', _room("{oops", user)) == "voice"


def test_the_bridge_is_known_by_metadata_identity_or_track() -> None:
    assert is_bridge(_participant("x", COPILOT))
    assert is_bridge(_participant("meeting-bridge-laptop"))
    assert is_bridge(_participant("x", tracks=(MEETING_TRACK,)))
    assert is_bridge(_participant("x", attributes={ATTR_BRIDGE_CANDIDATE: "someone"}))
    assert not is_bridge(_participant("candidate", tracks=("mic",)))


def test_only_the_bridge_whose_token_names_the_candidate_is_heard() -> None:
    ours = _participant(
        "laptop", tracks=(MEETING_TRACK,), attributes={ATTR_BRIDGE_CANDIDATE: "cand"}
    )
    assert bridges_for(ours, "cand")
    assert not bridges_for(ours, "someone-else")
    assert not bridges_for(ours, None)  # no candidate yet: nobody's bridge
    # Whatever else a participant chooses for itself proves nothing.
    assert not bridges_for(_participant("meeting-bridge-x", COPILOT, (MEETING_TRACK,)), "cand")


def test_metadata_files_are_read_only_inside_the_context_directory(tmp_path: Path) -> None:
    inside = tmp_path / "docs"
    inside.mkdir()
    (inside / "resume.md").write_text("resume")
    (tmp_path / "secret.txt").write_text("secret")
    assert context_file(str(inside), "resume.md") == (inside / "resume.md").resolve()
    assert context_file(str(inside), "../secret.txt") is None
    assert context_file(str(inside), str(tmp_path / "secret.txt")) is None  # absolute path
    assert context_file(str(inside), "missing.md") is None
    assert context_file(str(inside), 42) is None
    assert context_file(None, "resume.md") is None  # no directory configured: nothing read


@pytest.mark.parametrize(
    ("dispatch", "logged"),
    [
        ("{not json", "dispatch metadata: not a JSON object"),
        ('["copilot"]', "dispatch metadata: not a JSON object"),
        ('{"voxroom.mode": "copliot"}', "unknown voxroom.mode 'copliot'"),
        ('{"voxroom.mode": 1}', "unknown voxroom.mode 1"),
    ],
)
def test_bad_dispatch_metadata_is_logged_and_the_voice_assistant_runs(
    dispatch: str, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="agent.transports.room_io"):
        assert requested_mode(dispatch, _room("", _participant("candidate"))) == "voice"
    assert logged in caplog.text
    assert "the voice assistant runs" in caplog.text


def test_metadata_keys_of_the_wrong_type_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    text = json.dumps(
        {
            "voxroom.mode": "copilot",
            "voxroom.candidate": ["a"],
            "voxroom.resume": "",
            "voxroom.job_description": "job.md",
        }
    )
    with caplog.at_level(logging.WARNING, logger="agent.transports.room_io"):
        assert read_metadata(text, "room") == {
            "voxroom.mode": "copilot",
            "voxroom.job_description": "job.md",
        }
    assert "voxroom.candidate must be a non-empty string" in caplog.text
    assert "voxroom.resume must be a non-empty string" in caplog.text
    caplog.clear()
    assert read_metadata("", "room") == read_metadata("{}", "room") == {}
    assert read_metadata("{oops", "room", warn=False) == {}
    assert caplog.text == ""  # no metadata is not a problem; warn=False is quiet


class RecordingLocalParticipant:
    """TEST DOUBLE: the agent's local participant, recording the text streams it opens."""

    def __init__(self) -> None:
        self.streams: list[dict] = []

    async def stream_text(self, **kwargs):
        record = {**kwargs, "written": [], "closed": None}
        self.streams.append(record)

        class Writer:
            async def write(self, text: str) -> None:
                record["written"].append(text)

            async def aclose(self, attributes: dict | None = None) -> None:
                record["closed"] = attributes

        return Writer()


async def test_answers_are_streamed_to_the_candidate_alone() -> None:
    local = RecordingLocalParticipant()
    sink = LiveKitAnswerSink(SimpleNamespace(local_participant=local), "candidate")
    await sink.open(3, "Why us?")
    await sink.write(3, "- Because")
    await sink.close(3, "complete")

    [stream] = local.streams
    assert stream["destination_identities"] == ["candidate"]  # not the bridge, not anyone else
    assert stream["topic"] == TOPIC_COPILOT
    assert stream["attributes"][ATTR_QUESTION] == "Why us?"
    assert stream["written"] == ["- Because"]
    assert stream["closed"] == {ATTR_ANSWER_FINAL: "true", ATTR_ANSWER_STATUS: "complete"}


async def test_the_interviewers_words_never_reach_the_worker_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = CopilotSession(_room(COPILOT), stt=None, llm=None, embedder=None)
    with caplog.at_level(logging.DEBUG, logger="agent.copilot.room"):
        session._log_event(
            QuestionTranscript(
                1.0, "Where did you study", final=True, utterance_id=1, heard="Where"
            )
        )
        session._log_event(NotAQuestion(2.0, utterance_id=2, text="I see, thanks"))
        session._log_event(TurnScore(3.0, 3, "What about Lisbon", score=0.2, ms=41.0))
        await asyncio.sleep(0)  # the spawned sends run (no candidate yet: nothing is sent)
    assert "question heard: 4 words" in caplog.text and "not_a_question" in caplog.text
    assert "turn_score" in caplog.text and "'score': 0.2" in caplog.text
    assert not any(w in caplog.text for w in ("study", "thanks", "Lisbon"))
