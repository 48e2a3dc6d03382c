"""Which agent a room gets: the profile named in its dispatch's or room's metadata, and what a
profile brings beyond the worker's shared engines (its own LLM client, voice and tools)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.config import ConfigError, load_settings
from agent.protocol import KEY_PROFILE
from agent.worker.profiles import profile_llm, profile_tts, requested_profile


def _settings(tmp_path: Path, text: str, **env: str):
    path = tmp_path / "voxroom.toml"
    path.write_text(text, encoding="utf-8")
    return load_settings(path, env=env)


def test_the_dispatch_names_the_profile_before_the_room_and_default_otherwise() -> None:
    job, room = json.dumps({KEY_PROFILE: "concierge"}), json.dumps({KEY_PROFILE: "chat"})
    assert requested_profile(job, room) == "concierge"
    assert requested_profile("", room) == "chat"
    assert requested_profile("not json", "") == "default"
    assert requested_profile(json.dumps({KEY_PROFILE: 7}), room) == "7"  # refused by name


def test_a_profile_that_changes_the_llm_gets_its_own_client_once(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path,
        "[profiles.cold]\n[profiles.cold.llm]\ntemperature = 0.0\n"
        '[profiles.same]\ninstructions = "Be brief."\n',
    )
    made = []

    def make(llm):
        made.append(llm)
        return object()

    userdata: dict = {}
    same = profile_llm(userdata, settings, settings.profile("same"), make)
    assert profile_llm(userdata, settings, settings.profile("default"), make) is same
    cold = profile_llm(userdata, settings, settings.profile("cold"), make)
    assert (
        cold is not same and profile_llm(userdata, settings, settings.profile("cold"), make) is cold
    )
    assert [m.temperature for m in made] == [settings.llm.temperature, 0.0]


def test_a_profile_voice_needs_a_tts_server_with_named_voices(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[profiles.night\]: voice = 'nova' needs"):
        _settings(tmp_path, '[profiles.night]\nvoice = "nova"\n')
    settings = _settings(
        tmp_path,
        '[tts]\nprovider = "openai"\nbase_url = "http://127.0.0.1:9"\n'
        '[profiles.night]\nvoice = "nova"\n',
    )
    userdata = {"tts": "shared"}
    made = []
    night = profile_tts(
        userdata,
        settings,
        settings.profile("night"),
        lambda tts: made.append(tts.voice) or f"tts-{tts.voice}",
    )
    assert night == "tts-nova" and made == ["nova"]
    assert profile_tts(userdata, settings, settings.profile("default"), None) == "shared"
