"""agent/config.py: defaults, voxroom.toml, environment precedence, and the errors a
misconfiguration gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import ConfigError, LiveKitSettings, Settings, env_name, load_settings


@pytest.fixture(autouse=True)
def empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # load_settings(None) reads ./voxroom.toml: run each test where there is none.
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _toml(directory: Path, text: str, name: str = "voxroom.toml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


def test_defaults_without_file_or_environment() -> None:
    assert load_settings(env={}) == Settings()
    assert load_settings(env={}).livekit == LiveKitSettings(
        url="ws://127.0.0.1:7880", api_key="devkey", api_secret="secret", agent_name="voxroom"
    )


def test_toml_in_current_directory_is_read(empty_dir: Path) -> None:
    _toml(empty_dir, '[livekit]\nurl = "wss://lk.example.org"\n[llm]\nmax_tokens = 64\n')
    settings = load_settings(env={})
    assert settings.livekit.url == "wss://lk.example.org"
    assert settings.llm.max_tokens == 64


def test_environment_beats_toml(empty_dir: Path) -> None:
    path = _toml(
        empty_dir,
        '[livekit]\nurl = "ws://from-file:7880"\napi_key = "file-key"\n'
        "[llm]\nmax_tokens = 64\ntemperature = 0.9\n",
    )
    env = {"LIVEKIT_URL": "ws://from-env:7880", "VOXROOM_LLM_MAX_TOKENS": "200"}
    settings = load_settings(path, env=env)
    assert settings.livekit.url == "ws://from-env:7880"
    assert settings.llm.max_tokens == 200  # converted from the string
    # Settings the environment does not name still come from the file.
    assert settings.livekit.api_key == "file-key"
    assert settings.llm.temperature == 0.9


def test_voxroom_config_names_the_file(empty_dir: Path) -> None:
    path = _toml(empty_dir, '[livekit]\nagent_name = "other"\n', name="elsewhere.toml")
    assert load_settings(env={"VOXROOM_CONFIG": str(path)}).livekit.agent_name == "other"


def test_env_names() -> None:
    assert env_name("livekit", "api_secret") == "LIVEKIT_API_SECRET"
    assert env_name("llm", "api_key") == "OPENAI_API_KEY"
    assert env_name("stt", "api_key") == "DEEPGRAM_API_KEY"
    assert env_name("llm", "model") == "VOXROOM_LLM_MODEL"


def test_secrets_stay_out_of_repr() -> None:
    env = {
        "LIVEKIT_API_SECRET": "s3cr3t-livekit",
        "OPENAI_API_KEY": "s3cr3t-openai",
        "DEEPGRAM_API_KEY": "s3cr3t-deepgram",
    }
    assert "s3cr3t" not in repr(load_settings(env=env))


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[livekits]\nurl = "ws://x:7880"\n', r"unknown section\(s\) \['livekits'\]"),
        ('[livekit]\nurls = "ws://x:7880"\n', r"\[livekit\]: unknown key\(s\) \['urls'\]"),
        ("[livekit\n", r"is not valid TOML"),
        (
            '[llm]\nmax_tokens = "many"\n',
            r"llm\.max_tokens \(VOXROOM_LLM_MAX_TOKENS\): expected int",
        ),
    ],
)
def test_bad_file_is_rejected_with_a_clear_error(empty_dir: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(_toml(empty_dir, toml), env={})


def test_unknown_key_error_lists_the_known_ones(empty_dir: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(_toml(empty_dir, '[stt]\nmodl = "x"\n'), env={})
    assert "['api_key', 'base_url', 'model', 'model_dir', 'partials', 'provider']" in str(err.value)


def test_openai_stt_needs_a_server_or_a_key(empty_dir: Path) -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is required"):
        load_settings(env={"VOXROOM_STT_PROVIDER": "openai"})
    with pytest.raises(ConfigError, match=r"stt\.base_url must be an http\(s\) URL"):
        load_settings(env={"VOXROOM_STT_PROVIDER": "openai", "VOXROOM_STT_BASE_URL": "ws://x"})
    keyed = load_settings(env={"VOXROOM_STT_PROVIDER": "openai", "OPENAI_API_KEY": "sk-test"})
    assert keyed.stt.api_key == "sk-test"  # OpenAI's key when no STT key is set
    served = load_settings(
        env={
            "VOXROOM_STT_PROVIDER": "openai",
            "VOXROOM_STT_BASE_URL": "http://asr.internal:8000/v1",
            "VOXROOM_STT_MODEL": "large-v3",
        }
    )
    assert (served.stt.base_url, served.stt.model) == ("http://asr.internal:8000/v1", "large-v3")


def test_stt_model_dir_must_hold_a_model(empty_dir: Path) -> None:
    assert load_settings(env={}).stt.model_dir == ""
    with pytest.raises(ConfigError, match=r"stt\.model_dir must be a CTranslate2 Whisper folder"):
        load_settings(env={"VOXROOM_STT_MODEL_DIR": str(empty_dir)})
    (empty_dir / "model.bin").write_bytes(b"")
    assert load_settings(env={"VOXROOM_STT_MODEL_DIR": str(empty_dir)}).stt.model_dir == str(
        empty_dir
    )


@pytest.mark.parametrize(
    ("section", "key", "default", "other", "bad", "message"),
    [
        (
            "stt",
            "partials",
            "listening",
            "off",
            "sometimes",
            r"stt\.partials must be one of listening, always, off",
        ),
        (
            "turn",
            "detector",
            "text+smart-turn",
            "smart-turn",
            "vad",
            r"turn\.detector must be one of text\+smart-turn, text, smart-turn",
        ),
        ("turn", "barge_in", "duck", "pause", "stop", r"turn\.barge_in must be 'duck' or 'pause'"),
    ],
)
def test_a_setting_of_a_few_values_is_checked(
    empty_dir: Path, section: str, key: str, default: str, other: str, bad: str, message: str
) -> None:
    var = f"VOXROOM_{section}_{key}".upper()
    assert getattr(getattr(load_settings(env={}), section), key) == default
    assert getattr(getattr(load_settings(env={var: other}), section), key) == other
    with pytest.raises(ConfigError, match=message):
        load_settings(env={var: bad})


def test_missing_explicit_file(empty_dir: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(empty_dir / "nope.toml", env={})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LIVEKIT_URL": "127.0.0.1:7880"}, r"LIVEKIT_URL"),
        ({"LIVEKIT_URL": "ftp://host:7880"}, r"ws://host:7880"),
        ({"LIVEKIT_API_SECRET": ""}, r"LIVEKIT_API_KEY and LIVEKIT_API_SECRET"),
        ({"VOXROOM_LLM_PROVIDER": "anthropic"}, r"'local' or 'openai'"),
        ({"VOXROOM_LLM_PROVIDER": "openai", "OPENAI_API_KEY": "k"}, r"VOXROOM_LLM_MODEL"),
        ({"VOXROOM_LLM_PROVIDER": "openai", "VOXROOM_LLM_MODEL": "gpt"}, r"OPENAI_API_KEY"),
        (
            {
                "VOXROOM_LLM_PROVIDER": "openai",
                "VOXROOM_LLM_MODEL": "m",
                "VOXROOM_LLM_BASE_URL": "localhost:8080/v1",
            },
            r"llm\.base_url must be an http\(s\) URL",
        ),
        ({"VOXROOM_LLM_MAX_TOKENS": "0"}, r"max_tokens must be positive"),
        ({"VOXROOM_STT_PROVIDER": "deepgram"}, r"DEEPGRAM_API_KEY"),
        (
            {"VOXROOM_STT_PROVIDER": "vosk"},
            r"stt\.provider must be one of whisper, deepgram, openai",
        ),
        ({"VOXROOM_TTS_PROVIDER": "say"}, r"tts\.provider must be 'piper'"),
    ],
)
def test_invalid_settings_are_rejected(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env=env)


@pytest.mark.parametrize(
    "env",
    [
        # An OpenAI-compatible server of one's own needs no OpenAI key.
        {
            "VOXROOM_LLM_PROVIDER": "openai",
            "VOXROOM_LLM_MODEL": "qwen",
            "VOXROOM_LLM_BASE_URL": "http://127.0.0.1:8080/v1",
        },
        {
            "VOXROOM_LLM_PROVIDER": "openai",
            "VOXROOM_LLM_MODEL": "gpt-4o-mini",
            "OPENAI_API_KEY": "k",
        },
        {"VOXROOM_STT_PROVIDER": "deepgram", "DEEPGRAM_API_KEY": "k"},
        {"LIVEKIT_URL": "https://lk.example.org"},
    ],
)
def test_valid_provider_settings_are_accepted(env: dict[str, str]) -> None:
    load_settings(env=env)
