"""The copilot's room-side rules that need no server: which mode a job runs in, who is the
bridge, and which metadata file names may be read."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from agent.copilot import (
    MEETING_TRACK,
    context_file,
    is_bridge,
    parse_metadata,
    requested_mode,
)

COPILOT = json.dumps({"voxroom.mode": "copilot"})


def _participant(identity: str, metadata: str = "", tracks: tuple[str, ...] = ()):
    pubs = {f"TR_{i}": SimpleNamespace(name=name) for i, name in enumerate(tracks)}
    return SimpleNamespace(identity=identity, metadata=metadata, track_publications=pubs)


def _room(metadata: str = "", *participants):
    return SimpleNamespace(metadata=metadata,
                           remote_participants={p.identity: p for p in participants})


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
    assert not is_bridge(_participant("candidate", tracks=("mic",)))


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
