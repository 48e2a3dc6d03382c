"""agent/transports/tokens.py: the join token's claims, the `voxroom token` command, and the grants
as livekit-server enforces them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jwt
import pytest

from agent import cli
from agent.config import LiveKitSettings
from agent.ops.livekit_server import LiveKitServer
from agent.transports.tokens import create_join_token
from tests.marks import DEV_SECRET

SETTINGS = LiveKitSettings(
    url="ws://127.0.0.1:7880",
    api_key="key-1",
    api_secret="a-secret-that-is-long-enough-for-hs256",
    agent_name="voxroom-test",
)


def _claims(token: str, secret: str = SETTINGS.api_secret, key: str = SETTINGS.api_key) -> dict:
    # Verifies the signature too: the token must be signed with the configured secret.
    return jwt.decode(token, secret, algorithms=["HS256"], issuer=key)


def user_grants(room: str) -> dict[str, object]:
    """A user's join token's grants: to join `room`, publish its microphone and data, and
    subscribe."""
    return {
        "roomJoin": True,
        "room": room,
        "canPublish": True,
        "canPublishSources": ["microphone"],
        "canSubscribe": True,
        "canPublishData": True,
    }


def test_grants_are_minimal_and_for_one_room() -> None:
    claims = _claims(create_join_token(SETTINGS, "room-a", "user-1"))
    assert claims["sub"] == "user-1"
    assert claims["video"] == user_grants("room-a")
    # No server-wide grants, no hidden participant, no agent or SIP powers.
    assert set(claims) <= {"sub", "iss", "nbf", "exp", "video", "roomConfig"}


@pytest.mark.parametrize("ttl_s", [1, 600, 86400])
def test_ttl(ttl_s: int) -> None:
    claims = _claims(create_join_token(SETTINGS, "room-a", "user-1", ttl_s=ttl_s))
    assert claims["exp"] - claims["nbf"] == ttl_s


def test_dispatches_the_configured_agent_by_default() -> None:
    claims = _claims(create_join_token(SETTINGS, "room-a", "user-1"))
    # The agent is told whom it serves: nobody else who joins the room first.
    assert claims["roomConfig"] == {
        "agents": [{"agentName": "voxroom-test", "metadata": '{"voxroom.user": "user-1"}'}]
    }


def test_no_dispatch() -> None:
    claims = _claims(create_join_token(SETTINGS, "room-a", "user-1", dispatch_agent=False))
    assert "roomConfig" not in claims


def test_name_and_metadata() -> None:
    token = create_join_token(SETTINGS, "room-a", "user-1", name="Ann", metadata='{"lang":"en"}')
    claims = _claims(token)
    assert (claims["name"], claims["metadata"]) == ("Ann", '{"lang":"en"}')


@pytest.mark.parametrize(
    ("room", "identity", "ttl_s"), [("", "user-1", 600), ("room-a", "", 600), ("room-a", "u", 0)]
)
def test_invalid_arguments(room: str, identity: str, ttl_s: int) -> None:
    with pytest.raises(ValueError):
        create_join_token(SETTINGS, room, identity, ttl_s=ttl_s)


# --- `voxroom token` ------------------------------------------------------------------------


@pytest.fixture
def token_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The real `voxroom` dispatcher, limited to the token subcommand (the others load models),
    run in an empty directory with no LiveKit settings in the environment."""
    monkeypatch.setattr(cli, "SUBCOMMANDS", {"token": cli.SUBCOMMANDS["token"]})
    monkeypatch.chdir(tmp_path)
    for name in (
        "LIVEKIT_URL",
        "LIVEKIT_API_KEY",
        "LIVEKIT_API_SECRET",
        "VOXROOM_CONFIG",
        "VOXROOM_LIVEKIT_AGENT_NAME",
    ):
        monkeypatch.delenv(name, raising=False)
    return cli.main


def test_cli_prints_a_token_signed_with_the_configured_secret(
    token_cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "custom.toml"
    config.write_text(
        f'[livekit]\napi_key = "{SETTINGS.api_key}"\napi_secret = "{SETTINGS.api_secret}"\n'
        'agent_name = "helper"\n'
    )
    code = token_cli(
        [
            "--config",
            str(config),
            "token",
            "--room",
            "r",
            "--identity",
            "me",
            "--name",
            "Me",
            "--ttl",
            "60",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # just the token, for $(voxroom token ...)
    claims = _claims(out.strip())
    assert (claims["sub"], claims["name"], claims["video"]["room"]) == ("me", "Me", "r")
    assert claims["exp"] - claims["nbf"] == 60
    assert claims["roomConfig"] == {
        "agents": [{"agentName": "helper", "metadata": '{"voxroom.user": "me"}'}]
    }


def test_cli_environment_and_no_dispatch(
    token_cli, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LIVEKIT_API_KEY", SETTINGS.api_key)
    monkeypatch.setenv("LIVEKIT_API_SECRET", "secret-from-the-environment-0123456789")
    assert token_cli(["token", "--room", "r", "--identity", "me", "--no-dispatch"]) == 0
    claims = _claims(capsys.readouterr().out.strip(), "secret-from-the-environment-0123456789")
    assert "roomConfig" not in claims


def test_cli_rejects_bad_ttl_and_bad_config(
    token_cli, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        token_cli(["token", "--room", "r", "--identity", "me", "--ttl", "0"])
    assert exit_info.value.code == 2
    monkeypatch.setenv("LIVEKIT_URL", "localhost:7880")
    assert token_cli(["token", "--room", "r", "--identity", "me"]) == 2
    assert "LIVEKIT_URL" in capsys.readouterr().err


def test_dev_secret_token_is_quiet(recwarn: pytest.WarningsRecorder) -> None:
    create_join_token(LiveKitSettings(), "r", "me")
    assert not recwarn.list


def test_token_module_imports_no_livekit(repo_root: Path) -> None:
    # `voxroom token` must start fast: livekit is imported only when a token is made.
    code = (
        "import sys, agent.transports.tokens; "
        "assert 'livekit' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], cwd=repo_root, check=True)


# --- the grants, as the server enforces them ------------------------------------------------


@pytest.mark.integration
@DEV_SECRET  # LiveKitAPI signs its requests with it
async def test_server_sees_the_grants_and_accepts_a_microphone(
    livekit_server: LiveKitServer,
) -> None:
    from livekit import api, rtc

    room = rtc.Room()
    token = create_join_token(
        livekit_server.livekit_settings(), "grants", "user-1", dispatch_agent=False
    )
    await room.connect(livekit_server.url, token)
    try:
        mic = rtc.LocalAudioTrack.create_audio_track("mic", rtc.AudioSource(48000, 1))
        publication = await room.local_participant.publish_track(
            mic, rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
        )
        assert publication.sid.startswith("TR_")  # the server accepted it and named it
        async with api.LiveKitAPI(
            livekit_server.http_url, livekit_server.api_key, livekit_server.api_secret
        ) as lkapi:
            info = await lkapi.room.get_participant(
                api.RoomParticipantIdentity(room="grants", identity="user-1")
            )
        permission = info.permission
        assert list(permission.can_publish_sources) == [api.TrackSource.MICROPHONE]
        assert permission.can_subscribe and permission.can_publish_data
        assert not (permission.hidden or permission.can_update_metadata or permission.agent)
    finally:
        await room.disconnect()


# --- copilot tokens ---------------------------------------------------------------------------


def test_copilot_token_dispatches_the_agent_as_this_participants_copilot() -> None:
    from agent.transports.tokens import copilot_metadata

    metadata = copilot_metadata("cand", resume="cv.pdf", job_description="jobs/acme.md")
    claims = _claims(create_join_token(SETTINGS, "room-a", "cand", dispatch_metadata=metadata))
    [dispatch] = claims["roomConfig"]["agents"]
    assert dispatch["agentName"] == "voxroom-test"
    assert json.loads(dispatch["metadata"]) == {
        "voxroom.mode": "copilot",
        "voxroom.candidate": "cand",
        "voxroom.resume": "cv.pdf",
        "voxroom.job_description": "jobs/acme.md",
        "voxroom.user": "cand",
    }
    assert "metadata" not in claims  # the participant's own metadata stays empty


@pytest.mark.parametrize("name", ["", "/etc/passwd", "../secret.md", "docs/../../x.md"])
def test_copilot_documents_must_be_names_inside_the_context_directory(name: str) -> None:
    from agent.transports.tokens import copilot_metadata

    with pytest.raises(ValueError):
        copilot_metadata("cand", resume=name)


def test_cli_copilot_token(token_cli, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        token_cli(
            ["token", "--room", "r", "--identity", "me", "--copilot", "--resume", "resume.md"]
        )
        == 0
    )
    [dispatch] = _claims(
        capsys.readouterr().out.strip(), LiveKitSettings().api_secret, LiveKitSettings().api_key
    )["roomConfig"]["agents"]
    assert json.loads(dispatch["metadata"]) == {
        "voxroom.mode": "copilot",
        "voxroom.candidate": "me",
        "voxroom.resume": "resume.md",
        "voxroom.user": "me",
    }


def test_a_bridge_token_names_the_candidate_and_dispatches_nothing() -> None:
    from agent.transports.tokens import create_bridge_token

    claims = _claims(
        create_bridge_token(SETTINGS, "room-a", "meeting-bridge-x", "cand", copilot_mode=True)
    )
    assert claims["sub"] == "meeting-bridge-x"
    assert claims["attributes"] == {"voxroom.bridge.candidate": "cand"}
    assert json.loads(claims["metadata"]) == {"voxroom.mode": "copilot"}
    assert "roomConfig" not in claims
    # The same grants as a user's: a microphone, and no changing its own attributes.
    assert claims["video"] == _claims(create_join_token(SETTINGS, "room-a", "u"))["video"]
    with pytest.raises(ValueError):
        create_bridge_token(SETTINGS, "room-a", "meeting-bridge-x", "")


def test_no_other_token_names_a_candidate() -> None:
    from agent.transports.tokens import copilot_metadata

    for token in (
        create_join_token(SETTINGS, "room-a", "u"),
        create_join_token(SETTINGS, "room-a", "u", dispatch_metadata=copilot_metadata("u")),
    ):
        assert "attributes" not in _claims(token)


def test_cli_bridge_token(token_cli, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        token_cli(["token", "--room", "r", "--identity", "meeting-bridge-x", "--bridge-for", "me"])
        == 0
    )
    claims = _claims(
        capsys.readouterr().out.strip(), LiveKitSettings().api_secret, LiveKitSettings().api_key
    )
    assert claims["attributes"] == {"voxroom.bridge.candidate": "me"}
    assert "roomConfig" not in claims


@pytest.mark.parametrize(
    "extra",
    [
        ["--bridge-for", "me", "--copilot"],  # a bridge's token dispatches nothing
        ["--bridge-for", ""],
        ["--resume", "resume.md"],  # documents without --copilot
        ["--copilot", "--no-dispatch"],  # the mode rides on the dispatch
        ["--copilot", "--job-description", "../job.md"],
    ],
)
def test_cli_copilot_token_refuses_inconsistent_options(
    token_cli, extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert token_cli(["token", "--room", "r", "--identity", "me", *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("voxroom token: ")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--room", "r"], "give --candidate"),  # a bridge no copilot would listen to
        (["--token", "JWT", "--candidate", "me"], "the token's maker sets them"),
    ],
)
def test_the_bridge_names_its_candidate_in_the_token_it_makes(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    said: str,
) -> None:
    monkeypatch.setattr(cli, "SUBCOMMANDS", {"bridge": cli.SUBCOMMANDS["bridge"]})
    assert cli.main(["bridge", *args]) == 2  # refused before any audio device is opened
    assert said in capsys.readouterr().err
