"""Settings from `voxroom.toml` and the environment, validated once at start.

Precedence: environment variable > voxroom.toml > default. Every setting has one
environment variable; the TOML file groups them in sections (`[livekit]`, `[llm]`, ...).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Collection
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


class ConfigError(ValueError):
    """A setting is missing or invalid; the message says which and how to fix it."""


@dataclass(frozen=True)
class LiveKitSettings:
    url: str = "ws://127.0.0.1:7880"
    api_key: str = "devkey"
    api_secret: str = field(default="secret", repr=False)
    agent_name: str = "voxroom"


# The providers of each engine (agent.adapters.providers has a factory for each name).
LLM_PROVIDERS = ("local", "openai")
STT_PROVIDERS = ("whisper", "deepgram", "openai")
TTS_PROVIDERS = ("piper", "openai")


@dataclass(frozen=True)
class LLMSettings:
    # "local": the bundled Qwen served by llama.cpp inside the worker;
    # "openai": OpenAI or any OpenAI-compatible server at base_url.
    provider: str = "local"
    base_url: str = ""
    model: str = ""
    api_key: str = field(default="", repr=False)
    max_tokens: int = 120
    temperature: float = 0.3
    # "local": when the primary has said nothing after first_token_budget_s (or failed), the
    # bundled model is asked too and the first to speak answers. Only for provider "openai".
    fallback: str = ""
    first_token_budget_s: float = 1.5
    system_prompt: str = (
        "You are a friendly voice assistant. Your replies are spoken aloud, so answer "
        "in one to three short, plain sentences. No lists, no markdown, no emoji."
    )


STT_PARTIALS = ("listening", "always", "off")


@dataclass(frozen=True)
class STTSettings:
    # "whisper" (bundled), "deepgram", or "openai": OpenAI's /audio/transcriptions or any
    # server that speaks it at base_url (a larger Whisper on another host).
    provider: str = "whisper"
    # DEEPGRAM_API_KEY; for "openai", OPENAI_API_KEY when this is not set.
    api_key: str = field(default="", repr=False)
    base_url: str = ""
    model: str = ""  # for "openai": the server's model name (default whisper-1)
    # Partial transcripts while the user speaks: "listening" (paused while the agent thinks or
    # speaks, so local decoding leaves the CPU to the LLM and TTS), "always", or "off" (only
    # the candidate transcript at each pause).
    partials: str = "listening"
    # A CTranslate2 conversion of another Whisper (a folder with model.bin, English-only or
    # multilingual) in place of the bundled tiny.en; `voxroom bench stt-ceiling --model-dir`
    # measures one on the listening corpus first.
    model_dir: str = ""


@dataclass(frozen=True)
class TTSSettings:
    # "piper": the bundled voice inside the worker; "openai": OpenAI's /audio/speech or any
    # server that speaks it at base_url.
    provider: str = "piper"
    base_url: str = ""
    model: str = "tts-1"
    voice: str = "alloy"
    api_key: str = field(default="", repr=False)


# agent.adapters.turn_detector.DETECTORS
TURN_DETECTORS = ("text+smart-turn", "text", "smart-turn", "livekit", "off")


@dataclass(frozen=True)
class TurnSettings:
    # The end-of-turn model whose score sets the endpoint silence (agent.adapters.turn_detector):
    # "text+smart-turn" (the default: SmolLM2-135M on the transcript, overruled by Smart
    # Turn when the voice trails off in a filler the transcript lacks), "text" alone,
    # "smart-turn" or "livekit" (audio alone), or "off" (silence and the punctuation cue).
    detector: str = "text+smart-turn"
    # How the agent gives way when the user makes a sound over its answer: "duck" (plays on
    # quieter while the sound is judged, stops once it is an interruption: a backchannel never
    # silences it) or "pause" (silent at once, resumed after a backchannel).
    barge_in: str = "duck"


BARGE_IN_MODES = ("duck", "pause")
STORE_SCHEMES = ("postgresql", "postgres")
REDIS_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class StoreSettings:
    # Where finished turns go: "" for the SQLite file at `path` (one host), or a PostgreSQL
    # URL (postgresql://user:password@host/db) that every worker and `voxroom transcripts`
    # reach. Secret: the URL may carry a password.
    url: str = field(default="", repr=False)
    # The SQLite file; "" for $XDG_DATA_HOME/voxroom/transcripts.sqlite3.
    path: str = ""
    # Room leases, each room's recent turns and the reply being spoken, shared by the workers
    # of every host (redis://host:6379/0). "": in the SQLite file, which only workers on one
    # host share.
    redis_url: str = field(default="", repr=False)


@dataclass(frozen=True)
class MCPServerSettings:
    """One `[[tools.mcp]]` entry: a server started over stdio (`command`) or reached over
    Streamable HTTP (`url`)."""

    name: str
    command: tuple[str, ...] = ()
    url: str = ""
    # Added to the few variables a stdio server inherits (PATH, HOME, ...); may hold secrets.
    env: dict[str, str] = field(default_factory=dict, repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # HTTP; may hold tokens
    allow: tuple[str, ...] | None = None  # the server's tools offered; None: all of them
    timeout_s: float = 10.0  # to connect and list, and for each call
    cwd: str = ""  # stdio: where the command runs ("": the config file's folder)

    @property
    def source(self) -> str:
        return f"mcp:{self.name}"


@dataclass(frozen=True)
class ToolsSettings:
    mcp: tuple[MCPServerSettings, ...] = ()
    python: tuple[str, ...] = ()  # modules whose @tool functions become tools
    timeout_s: float = 10.0  # a call's limit, unless the tool or its server sets one


@dataclass(frozen=True)
class ProfileTable:
    """A `[profiles.NAME]` table as written: what it overrides (None: not set)."""

    instructions: str | None = None
    greeting: str = ""
    voice: str = ""
    llm: dict[str, Any] = field(default_factory=dict)
    tools: tuple[str, ...] = ()
    keypad: str = "text"
    transfer_to: dict[str, str] = field(default_factory=dict)


# What a phone caller's keypad digits are to a profile: "text", a typed turn ("The caller
# pressed 1."); "ignore", nothing.
KEYPAD_MODES = ("text", "ignore")
# Where `transfer_call` may send a call: a SIP URI or a telephone number as TransferSIPParticipant
# takes it. Only the profile names them: the LLM picks a name, never dials what it was told.
TRANSFER_TARGET = re.compile(r"^(sip:|sips:|tel:)[^\s]+$")


@dataclass(frozen=True)
class ProfileSettings:
    """A named agent: its system prompt, greeting, TTS voice ("": tts.voice), LLM and tools
    (names; "mcp:SERVER" is all of a server's tools); for phone callers, what their keypad
    does and where `transfer_call` may send them (name -> sip:/tel: URI)."""

    name: str
    instructions: str
    greeting: str
    voice: str
    llm: LLMSettings
    tools: tuple[str, ...]
    keypad: str = "text"
    transfer_to: dict[str, str] = field(default_factory=dict)


DEFAULT_PROFILE = "default"
# What a profile may change of [llm] (the rest, keys included, is the worker's).
PROFILE_LLM_KEYS = ("provider", "base_url", "model", "temperature", "max_tokens")


@dataclass(frozen=True)
class Settings:
    livekit: LiveKitSettings = field(default_factory=LiveKitSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    stt: STTSettings = field(default_factory=STTSettings)
    tts: TTSSettings = field(default_factory=TTSSettings)
    turn: TurnSettings = field(default_factory=TurnSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    tools: ToolsSettings = field(default_factory=ToolsSettings)
    profiles: dict[str, ProfileTable] = field(default_factory=dict)

    def profile(self, name: str) -> ProfileSettings:
        """The profile `name` with [llm] under its overrides; "default" is the assistant of
        [llm] (its system prompt, no tools) unless [profiles.default] says otherwise."""
        table = self.profiles.get(name)
        if table is None:
            if name != DEFAULT_PROFILE:
                known = sorted({DEFAULT_PROFILE, *self.profiles})
                raise ConfigError(f"unknown profile {name!r}; known: {', '.join(known)}")
            table = ProfileTable()
        llm = replace(self.llm, **table.llm)
        return ProfileSettings(
            name=name,
            instructions=llm.system_prompt if table.instructions is None else table.instructions,
            greeting=table.greeting,
            voice=table.voice,
            llm=llm,
            tools=table.tools,
            keypad=table.keypad,
            transfer_to=table.transfer_to,
        )


# section -> dataclass, and the environment variable for each field (where it is not
# VOXROOM_<SECTION>_<FIELD>).
ENV_SECTIONS = {
    "livekit": LiveKitSettings,
    "llm": LLMSettings,
    "stt": STTSettings,
    "tts": TTSSettings,
    "turn": TurnSettings,
    "store": StoreSettings,
}
# Tables only the file can hold (lists of servers, named profiles): no environment variables.
FILE_ONLY_SECTIONS = ("tools", "profiles")
_ENV_ALIASES = {
    ("livekit", "url"): "LIVEKIT_URL",
    ("livekit", "api_key"): "LIVEKIT_API_KEY",
    ("livekit", "api_secret"): "LIVEKIT_API_SECRET",
    ("llm", "api_key"): "OPENAI_API_KEY",
    ("stt", "api_key"): "DEEPGRAM_API_KEY",
    ("tts", "api_key"): "OPENAI_API_KEY",
    ("store", "redis_url"): "VOXROOM_REDIS_URL",
}


def env_name(section: str, name: str) -> str:
    return _ENV_ALIASES.get((section, name), f"VOXROOM_{section.upper()}_{name.upper()}")


def load_settings(
    path: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None
) -> Settings:
    """Read and validate the settings. `path=None` uses ./voxroom.toml when it exists."""
    env = dict(os.environ if env is None else env)
    file_values: dict[str, Any] = {}
    toml_path = Path(path) if path else Path(env.get("VOXROOM_CONFIG", "voxroom.toml"))
    if path and not toml_path.exists():
        raise ConfigError(f"config file {toml_path} does not exist")
    if toml_path.exists():
        try:
            file_values = tomllib.loads(toml_path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{toml_path} is not valid TOML: {e}") from e
    known_sections = {*ENV_SECTIONS, *FILE_ONLY_SECTIONS}
    unknown = set(file_values) - known_sections
    if unknown:
        raise ConfigError(
            f"{toml_path}: unknown section(s) {sorted(unknown)}; known: {sorted(known_sections)}"
        )

    sections: dict[str, Any] = {}
    for section, cls in ENV_SECTIONS.items():
        given = file_values.get(section, {})
        known = {f.name for f in fields(cls)}
        bad = set(given) - known
        if bad:
            raise ConfigError(f"[{section}]: unknown key(s) {sorted(bad)}; known: {sorted(known)}")
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(env_name(section, f.name), given.get(f.name))
            if raw is None:
                continue
            values[f.name] = _coerce(section, f.name, raw, type(getattr(cls(), f.name)))
        sections[section] = cls(**values)
    if sections["stt"].provider == "openai" and not sections["stt"].api_key:
        sections["stt"] = replace(sections["stt"], api_key=env.get("OPENAI_API_KEY", ""))
    folder = toml_path.resolve().parent if toml_path.exists() else Path.cwd()
    sections["tools"] = parse_tools(file_values.get("tools", {}), folder)
    sections["profiles"] = parse_profiles(file_values.get("profiles", {}))
    settings = Settings(**sections)
    validate(settings)
    from agent.log_redaction import register_secrets

    # Secrets from a config file are masked in the logs as well as those from the environment.
    register_secrets(
        [
            settings.livekit.api_secret,
            settings.llm.api_key,
            settings.stt.api_key,
            settings.tts.api_key,
            *(urlparse(u).password or "" for u in (settings.store.url, settings.store.redis_url)),
            *(v for s in settings.tools.mcp for v in (*s.env.values(), *s.headers.values())),
        ]
    )
    return settings


def _coerce(section: str, name: str, raw: Any, typ: type) -> Any:
    try:
        return typ(raw)
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"{section}.{name} ({env_name(section, name)}): expected {typ.__name__}, got {raw!r}"
        ) from e


# A tool's name as the OpenAI tools API takes it; server and profile names likewise.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MCP_KEYS = {f.name for f in fields(MCPServerSettings)}
_TOOLS_KEYS = {"mcp", "python", "timeout_s"}
_PROFILE_KEYS = {f.name for f in fields(ProfileTable)}


def parse_tools(table: Any, folder: Path) -> ToolsSettings:
    """The [tools] table; a stdio server's `cwd` defaults to `folder` (the config file's)."""
    _keys("[tools]", table, _TOOLS_KEYS)
    timeout_s = _positive("tools.timeout_s", table.get("timeout_s", 10.0))
    python = _strings("tools.python", table.get("python", []))
    servers = table.get("mcp", [])
    if not isinstance(servers, list):
        raise ConfigError("tools.mcp must be a list of tables: write [[tools.mcp]]")
    parsed = tuple(_mcp_server(i, entry, timeout_s, folder) for i, entry in enumerate(servers))
    names = [s.name for s in parsed]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"[[tools.mcp]]: more than one server named {dupes}")
    return ToolsSettings(mcp=parsed, python=tuple(python), timeout_s=timeout_s)


def _mcp_server(index: int, entry: Any, timeout_s: float, folder: Path) -> MCPServerSettings:
    where = f"[[tools.mcp]] #{index + 1}"
    _keys(where, entry, _MCP_KEYS)
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ConfigError(f"{where}: name must be letters, digits, '_' or '-', got {name!r}")
    where = f"[[tools.mcp]] {name!r}"
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        raise ConfigError(
            f"{where}: set either command (a list: stdio) or url (Streamable "
            "HTTP), not " + ("both" if command is not None else "neither")
        )
    if command is not None and (not _strings(f"{where} command", command) or not command[0]):
        raise ConfigError(
            f'{where}: command must be a non-empty list, e.g. ["python3", "server.py"]'
        )
    if url is not None and (
        not isinstance(url, str) or urlparse(url).scheme not in ("http", "https")
    ):
        raise ConfigError(f"{where}: url must be an http(s) URL, got {url!r}")
    allow = entry.get("allow")
    return MCPServerSettings(
        name=name,
        command=tuple(command or ()),
        url=url or "",
        env=_string_table(f"{where} env", entry.get("env", {})),
        headers=_string_table(f"{where} headers", entry.get("headers", {})),
        allow=None if allow is None else tuple(_strings(f"{where} allow", allow)),
        timeout_s=_positive(f"{where} timeout_s", entry.get("timeout_s", timeout_s)),
        cwd=str(folder / entry.get("cwd", "")) if command is not None else "",
    )


def parse_profiles(table: Any) -> dict[str, ProfileTable]:
    if not isinstance(table, dict):
        raise ConfigError("profiles must be tables: write [profiles.NAME]")
    profiles = {}
    for name, entry in table.items():
        where = f"[profiles.{name}]"
        if not NAME_PATTERN.match(name):
            raise ConfigError(f"{where}: a profile's name is letters, digits, '_' or '-'")
        _keys(where, entry, _PROFILE_KEYS)
        llm = entry.get("llm", {})
        _keys(f"[profiles.{name}.llm]", llm, set(PROFILE_LLM_KEYS))
        texts = {k: entry[k] for k in ("instructions", "greeting", "voice") if k in entry}
        if bad := [k for k, v in texts.items() if not isinstance(v, str)]:
            raise ConfigError(f"{where}: {', '.join(bad)} must be text")
        defaults = LLMSettings()
        profiles[name] = ProfileTable(
            **texts,
            tools=tuple(_strings(f"{where} tools", entry.get("tools", []))),
            llm={k: _coerce("llm", k, v, type(getattr(defaults, k))) for k, v in llm.items()},
            keypad=_keypad(where, entry.get("keypad", "text")),
            transfer_to=_transfer_targets(where, entry.get("transfer_to", {})),
        )
    return profiles


def _keypad(where: str, value: Any) -> str:
    if value not in KEYPAD_MODES:
        raise ConfigError(f"{where} keypad must be one of {', '.join(KEYPAD_MODES)}, got {value!r}")
    return str(value)


def _transfer_targets(where: str, value: Any) -> dict[str, str]:
    targets = _string_table(f"{where} transfer_to", value)
    for name, uri in targets.items():
        if not NAME_PATTERN.match(name) or not TRANSFER_TARGET.match(uri):
            raise ConfigError(
                f"{where} transfer_to: {name!r} = {uri!r}: a name of letters, "
                "digits, '_' or '-' for a sip:, sips: or tel: URI, e.g. "
                'sales = "tel:+15105550123"'
            )
    return targets


def check_profile_tools(settings: Settings, available: Collection[str]) -> None:
    """ConfigError when a profile names a tool that is not in `available` (the names the
    tool registry knows once its sources listed their tools, "mcp:SERVER" included)."""
    for name in sorted({DEFAULT_PROFILE, *settings.profiles}):
        if unknown := [t for t in settings.profile(name).tools if t not in available]:
            raise ConfigError(
                f"[profiles.{name}]: unknown tool(s) {unknown}; "
                f"available: {', '.join(sorted(available)) or 'none'}"
            )


def _keys(where: str, table: Any, known: set[str]) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table, got {table!r}")
    if bad := set(table) - known:
        raise ConfigError(f"{where}: unknown key(s) {sorted(bad)}; known: {sorted(known)}")


def _strings(where: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of strings, got {value!r}")
    return value


def _string_table(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where} must be a table of strings, got {value!r}")
    return dict(value)


def _positive(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{where} must be a positive number of seconds, got {value!r}")
    return float(value)


def validate(s: Settings) -> None:
    for name, table in s.profiles.items():
        try:  # a profile's LLM must be as valid as [llm]
            _validate_llm(s.profile(name).llm)
        except ConfigError as e:
            raise ConfigError(f"[profiles.{name}.llm]: {e}") from e
        if table.voice and s.tts.provider != "openai":
            raise ConfigError(
                f"[profiles.{name}]: voice = {table.voice!r} needs tts.provider = 'openai' (a "
                "server with named voices); the bundled Piper speaks with its one voice"
            )
    if unknown := sorted(
        {t[4:] for p in s.profiles.values() for t in p.tools if t.startswith("mcp:")}
        - {m.name for m in s.tools.mcp}
    ):
        raise ConfigError(f"[profiles]: no [[tools.mcp]] server named {unknown}")

    url = urlparse(s.livekit.url)
    if url.scheme not in ("ws", "wss", "http", "https") or not url.netloc:
        raise ConfigError(
            f"livekit.url (LIVEKIT_URL) must look like ws://host:7880, got {s.livekit.url!r}"
        )
    if not s.livekit.api_key or not s.livekit.api_secret:
        raise ConfigError("LIVEKIT_API_KEY and LIVEKIT_API_SECRET must both be set")
    _validate_llm(s.llm)
    _validate_stt_tts_store(s)


def _validate_llm(llm: LLMSettings) -> None:
    if llm.provider not in LLM_PROVIDERS:
        raise ConfigError(f"llm.provider must be 'local' or 'openai', got {llm.provider!r}")
    if llm.provider == "openai":
        if llm.base_url and urlparse(llm.base_url).scheme not in ("http", "https"):
            raise ConfigError(f"llm.base_url must be an http(s) URL, got {llm.base_url!r}")
        if not llm.model:
            raise ConfigError(
                "llm.model (VOXROOM_LLM_MODEL) is required when llm.provider = 'openai'"
            )
        if not llm.base_url and not llm.api_key:
            raise ConfigError("OPENAI_API_KEY is required for api.openai.com (or set llm.base_url)")
    if llm.fallback not in ("", "local"):
        raise ConfigError(f"llm.fallback must be '' or 'local', got {llm.fallback!r}")
    if llm.first_token_budget_s <= 0:
        raise ConfigError("llm.first_token_budget_s must be positive")
    if llm.max_tokens <= 0:
        raise ConfigError("llm.max_tokens must be positive")


def _validate_stt_tts_store(s: Settings) -> None:
    if s.stt.provider not in STT_PROVIDERS:
        raise ConfigError(
            f"stt.provider must be one of {', '.join(STT_PROVIDERS)}, got {s.stt.provider!r}"
        )
    if s.stt.partials not in STT_PARTIALS:
        raise ConfigError(
            f"stt.partials must be one of {', '.join(STT_PARTIALS)}, got {s.stt.partials!r}"
        )
    if s.stt.model_dir and not (Path(s.stt.model_dir) / "model.bin").is_file():
        raise ConfigError(
            f"stt.model_dir must be a CTranslate2 Whisper folder with a model.bin, "
            f"got {s.stt.model_dir!r}"
        )
    if s.stt.provider == "deepgram" and not s.stt.api_key:
        raise ConfigError("DEEPGRAM_API_KEY is required when stt.provider = 'deepgram'")
    if s.stt.provider == "openai":
        if s.stt.base_url and urlparse(s.stt.base_url).scheme not in ("http", "https"):
            raise ConfigError(f"stt.base_url must be an http(s) URL, got {s.stt.base_url!r}")
        if not s.stt.base_url and not s.stt.api_key:
            raise ConfigError("OPENAI_API_KEY is required for api.openai.com (or set stt.base_url)")
    if s.turn.detector not in TURN_DETECTORS:
        raise ConfigError(
            f"turn.detector must be one of {', '.join(TURN_DETECTORS)}, got {s.turn.detector!r}"
        )
    if s.turn.barge_in not in BARGE_IN_MODES:
        raise ConfigError(f"turn.barge_in must be 'duck' or 'pause', got {s.turn.barge_in!r}")
    if s.tts.provider not in TTS_PROVIDERS:
        raise ConfigError(f"tts.provider must be 'piper' or 'openai', got {s.tts.provider!r}")
    if s.tts.provider == "openai":
        if s.tts.base_url and urlparse(s.tts.base_url).scheme not in ("http", "https"):
            raise ConfigError(f"tts.base_url must be an http(s) URL, got {s.tts.base_url!r}")
        if not s.tts.model or not s.tts.voice:
            raise ConfigError(
                "tts.model and tts.voice (VOXROOM_TTS_MODEL, VOXROOM_TTS_VOICE) are required "
                "when tts.provider = 'openai'"
            )
        if not s.tts.base_url and not s.tts.api_key:
            raise ConfigError("OPENAI_API_KEY is required for api.openai.com (or set tts.base_url)")
    if s.store.url and urlparse(s.store.url).scheme not in STORE_SCHEMES:
        raise ConfigError(
            "store.url (VOXROOM_STORE_URL) must be '' (the SQLite file) or a PostgreSQL URL "
            f"(postgresql://user:password@host/db), got scheme {urlparse(s.store.url).scheme!r}"
        )
    if s.store.redis_url and urlparse(s.store.redis_url).scheme not in REDIS_SCHEMES:
        raise ConfigError(
            "store.redis_url (VOXROOM_REDIS_URL) must be '' or a Redis URL "
            f"(redis://host:6379/0), got scheme {urlparse(s.store.redis_url).scheme!r}"
        )
