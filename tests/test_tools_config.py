"""[tools] and [profiles.NAME] in voxroom.toml: what they parse to, the errors a mistake gets,
and the profile a room asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import (
    ConfigError,
    LLMSettings,
    MCPServerSettings,
    Settings,
    check_profile_tools,
    load_settings,
)


@pytest.fixture(autouse=True)
def empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _load(directory: Path, text: str) -> Settings:
    path = directory / "voxroom.toml"
    path.write_text(text)
    return load_settings(path, env={})


ISSUE_TOML = """
[tts]
provider = "openai"  # a server with named voices: the profile's voice
base_url = "http://127.0.0.1:9100/v1"

[tools]
python = ["mypkg.tools"]

[[tools.mcp]]
name = "weather"
command = ["python3", "weather_server.py"]
env = {WEATHER_KEY = "k-123456789"}
allow = ["get_weather"]
timeout_s = 5

[[tools.mcp]]
name = "calendar"
url = "http://127.0.0.1:9000/mcp"
headers = {Authorization = "Bearer t-123456789"}

[profiles.concierge]
instructions = "You are the hotel's concierge."
greeting = "Good evening, how can I help?"
voice = "nova"
tools = ["mcp:weather", "current_time", "end_conversation"]

[profiles.concierge.llm]
temperature = 0.1
max_tokens = 200
"""


def test_the_issue_s_toml_parses(empty_dir: Path) -> None:
    settings = _load(empty_dir, ISSUE_TOML)
    weather, calendar = settings.tools.mcp
    assert weather == MCPServerSettings(
        name="weather",
        command=("python3", "weather_server.py"),
        env={"WEATHER_KEY": "k-123456789"},
        allow=("get_weather",),
        timeout_s=5.0,
        cwd=str(empty_dir.resolve()),  # a relative script is found beside the config file
    )
    assert calendar.url == "http://127.0.0.1:9000/mcp" and calendar.command == ()
    assert calendar.headers == {"Authorization": "Bearer t-123456789"}
    assert calendar.allow is None and calendar.timeout_s == 10.0
    assert settings.tools.python == ("mypkg.tools",)
    assert "t-123456789" not in repr(settings) and "k-123456789" not in repr(settings)

    concierge = settings.profile("concierge")
    assert concierge.instructions == "You are the hotel's concierge."
    assert concierge.greeting == "Good evening, how can I help?"
    assert concierge.voice == "nova"
    assert concierge.tools == ("mcp:weather", "current_time", "end_conversation")
    assert (concierge.llm.temperature, concierge.llm.max_tokens) == (0.1, 200)
    assert concierge.llm.provider == settings.llm.provider  # the rest is [llm]'s


def test_the_default_profile_is_today_s_assistant(empty_dir: Path) -> None:
    settings = load_settings(env={"VOXROOM_LLM_SYSTEM_PROMPT": "Be brief."})
    default = settings.profile("default")
    assert default.instructions == "Be brief."
    assert default.tools == () and default.greeting == "" and default.voice == ""
    assert default.llm == settings.llm
    assert Settings().profile("default").instructions == LLMSettings().system_prompt
    overridden = _load(empty_dir, '[profiles.default]\ntools = ["current_time"]\n')
    assert overridden.profile("default").tools == ("current_time",)
    assert overridden.profile("default").instructions == LLMSettings().system_prompt


def test_an_unknown_profile_names_the_known_ones(empty_dir: Path) -> None:
    settings = _load(empty_dir, ISSUE_TOML)
    with pytest.raises(ConfigError, match=r"unknown profile 'concierg'; known: concierge, default"):
        settings.profile("concierg")


def test_a_profile_s_llm_is_validated_like_llm(empty_dir: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"\[profiles\.cloud\.llm\]: llm\.model \(VOXROOM_LLM_MODEL\) is "
        r"required",
    ):
        _load(empty_dir, '[profiles.cloud.llm]\nprovider = "openai"\nbase_url = "http://x/v1"\n')
    settings = _load(
        empty_dir,
        '[profiles.cloud.llm]\nprovider = "openai"\n'
        'base_url = "http://127.0.0.1:8080/v1"\nmodel = "qwen"\n',
    )
    assert settings.profile("cloud").llm.model == "qwen"
    assert settings.llm.provider == "local"  # [llm] itself is unchanged


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[tools]\npythn = ["x"]\n', r"\[tools\]: unknown key\(s\) \['pythn'\]"),
        ('[tools]\npython = "mypkg"\n', r"tools\.python must be a list of strings"),
        ("[tools]\ntimeout_s = 0\n", r"tools\.timeout_s must be a positive number"),
        ('[tools]\nmcp = {name = "x"}\n', r"tools\.mcp must be a list of tables"),
        (
            '[[tools.mcp]]\nname = "w"\ncommand = ["x"]\nurl = "http://h/mcp"\n',
            r"\[\[tools\.mcp\]\] 'w': set either command .* not both",
        ),
        ('[[tools.mcp]]\nname = "w"\n', r"\[\[tools\.mcp\]\] 'w': set either command .* neither"),
        (
            '[[tools.mcp]]\nname = "w"\ncommand = "python3 server.py"\n',
            r"'w' command must be a list of strings",
        ),
        ('[[tools.mcp]]\nname = "w"\ncommand = []\n', r"'w': command must be a non-empty list"),
        ('[[tools.mcp]]\nname = "w"\nurl = "ws://h/mcp"\n', r"'w': url must be an http\(s\) URL"),
        (
            '[[tools.mcp]]\nname = "w"\nurl = "http://h/mcp"\nheader = {}\n',
            r"\[\[tools\.mcp\]\] #1: unknown key\(s\) \['header'\]",
        ),
        (
            '[[tools.mcp]]\nname = "the weather"\nurl = "http://h/mcp"\n',
            r"#1: name must be letters, digits",
        ),
        (
            '[[tools.mcp]]\nname = "w"\nurl = "http://h/mcp"\nenv = {A = 1}\n',
            r"'w' env must be a table of strings",
        ),
        (
            '[[tools.mcp]]\nname = "w"\nurl = "http://h/mcp"\n'
            '[[tools.mcp]]\nname = "w"\nurl = "http://i/mcp"\n',
            r"more than one server named \['w'\]",
        ),
        (
            '[profiles.a]\ninstruction = "x"\n',
            r"\[profiles\.a\]: unknown key\(s\) \['instruction'\]",
        ),
        (
            '[profiles.a.llm]\napi_key = "x"\n',
            r"\[profiles\.a\.llm\]: unknown key\(s\) \['api_key'\]",
        ),
        ('[profiles.a.llm]\nmax_tokens = "many"\n', r"llm\.max_tokens .*expected int"),
        ("[profiles.a]\ngreeting = 3\n", r"\[profiles\.a\]: greeting must be text"),
        (
            '[profiles.a]\ntools = ["mcp:nowhere"]\n',
            r"no \[\[tools\.mcp\]\] server named \['nowhere'\]",
        ),
        ('[profiles."a b"]\n', r"a profile's name is letters, digits"),
    ],
)
def test_mistakes_get_precise_errors(empty_dir: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(empty_dir, toml)


def test_profiles_naming_unknown_tools_are_refused_once_the_tools_are_known(
    empty_dir: Path,
) -> None:
    settings = _load(empty_dir, ISSUE_TOML)
    available = {"get_weather", "current_time", "end_conversation", "mcp:weather", "mcp:calendar"}
    check_profile_tools(settings, available)
    with pytest.raises(
        ConfigError,
        match=r"\[profiles\.concierge\]: unknown tool\(s\) "
        r"\['end_conversation'\]; available: current_time",
    ):
        check_profile_tools(settings, available - {"end_conversation"})


def test_a_phone_profile_s_keypad_and_transfer_destinations(empty_dir: Path) -> None:
    settings = _load(
        empty_dir,
        '[profiles.phone]\nkeypad = "ignore"\ntools = ["transfer_call"]\n'
        '[profiles.phone.transfer_to]\nsales = "tel:+15105550111"\n'
        'desk = "sip:desk@pbx.example.org"\n',
    )
    phone = settings.profile("phone")
    assert phone.keypad == "ignore"
    assert phone.transfer_to == {"sales": "tel:+15105550111", "desk": "sip:desk@pbx.example.org"}
    assert settings.profile("default").keypad == "text"  # digits are typed turns by default
    with pytest.raises(
        ConfigError,
        match=r"\[profiles\.phone\] keypad must be one of text, "
        r"ignore, got 'beep'",
    ):
        _load(empty_dir, '[profiles.phone]\nkeypad = "beep"\n')
    with pytest.raises(ConfigError, match=r"transfer_to: 'sales' = '\+15105550111'.*tel: URI"):
        _load(empty_dir, '[profiles.phone.transfer_to]\nsales = "+15105550111"\n')
