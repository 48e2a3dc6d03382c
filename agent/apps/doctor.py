"""`voxroom doctor`: checks each configured engine end to end and prints what works.

One row per check: ok / FAIL / skip (not configured), the time of what it measured in ms, and
a one-line reason. The speech checks chain like a turn does: Piper speaks a test sentence,
Whisper (or Deepgram) must hear it back. Exit status 0 when every configured engine works.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from urllib.parse import urlparse

import numpy as np

from agent.config import ConfigError, Settings, ToolsSettings, load_settings
from agent.engines import INPUT_RATE, LanguageModel

SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."
# Share of the sentence's words a recogniser must get right (in order) to pass.
MIN_MATCH = 0.8
GROUPS = ("livekit", "piper", "whisper", "deepgram", "llm", "turn", "embedder", "store", "tools")
# The copilot's embedder must put a question nearer its paraphrase than an unrelated line.
EMBED_QUESTION, EMBED_NEAR, EMBED_FAR = (
    "How many years have you worked with Python?",
    "What is your experience with Python programming?",
    "The parcel was delivered to the wrong address.",
)
# The end-of-turn model must score a finished question above an unfinished start.
TURN_COMPLETE, TURN_UNFINISHED = "What time is it in Tokyo?", "Could you tell me."
OK, FAIL, SKIP = "ok", "FAIL", "skip"
_LLM_PROMPT = "Say hello in five words."


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # OK, FAIL or SKIP
    ms: float | None  # what the check measured (first token, decode, synthesis), or its duration
    detail: str


@dataclass(frozen=True)
class Speech:
    """A spoken sentence at 16 kHz, for the speech-to-text checks."""

    text: str
    pcm: np.ndarray


class CheckFailed(Exception):
    """The engine answered, but wrongly (the detail says how)."""


# A passed check's one-line detail and the time in ms of what it measured (first token,
# decode, synthesis), or None to report the check's whole duration.
Outcome = tuple[str, float | None]


class Doctor:
    """Runs the checks of the configured engines in order. `speech` replaces the sentence
    Piper speaks for the STT checks (a test feeds Deepgram's test double its own audio)."""

    def __init__(
        self,
        settings: Settings,
        *,
        only: set[str] | None = None,
        timeout_s: float = 5.0,
        model_timeout_s: float = 120.0,
        speech: Speech | None = None,
    ) -> None:
        self.settings = settings
        self.only = only or set(GROUPS)
        self.timeout_s = timeout_s
        self.model_timeout_s = model_timeout_s
        self._speech = speech
        self.results: list[CheckResult] = []

    async def run(self) -> list[CheckResult]:
        s = self.settings
        lk_local = urlparse(s.livekit.url).hostname in ("127.0.0.1", "localhost", "::1")
        stt, tts = s.stt.provider, s.tts.provider
        checks: list[tuple[str, str, str | None, Callable[[], Awaitable[Outcome]], float]] = [
            (
                "livekit",
                "livekit-server",
                None if lk_local else "LiveKit is not on this machine",
                self._livekit_binary,
                self.timeout_s,
            ),
            ("livekit", "livekit", None, self._livekit, self.timeout_s),
            (
                "piper",
                "piper",
                None if tts == "piper" else f"tts.provider = {tts}",
                self._piper,
                self.model_timeout_s,
            ),
            (
                "whisper",
                "whisper",
                None if stt == "whisper" else f"stt.provider = {stt}",
                self._whisper,
                self.model_timeout_s,
            ),
            (
                "deepgram",
                "deepgram",
                None if stt == "deepgram" else f"stt.provider = {stt}",
                self._deepgram,
                self.timeout_s * 2,
            ),
        ]
        if s.llm.provider == "local":
            checks.append(("llm", "llm (bundled)", None, self._local_llm, self.model_timeout_s))
        else:
            checks.append(
                ("llm", f"llm ({s.llm.model})", None, self._openai_llm, self.timeout_s * 2)
            )
            if s.llm.fallback == "local":
                checks.append(
                    ("llm", "llm fallback (bundled)", None, self._local_llm, self.model_timeout_s)
                )
        detector = s.turn.detector
        checks.append(
            (
                "turn",
                f"turn detector ({detector})",
                "turn.detector = off" if detector == "off" else None,
                self._turn_detector,
                self.model_timeout_s,
            )
        )
        checks.append(("embedder", "embedder (MiniLM)", None, self._embedder, self.model_timeout_s))
        store = "postgresql" if s.store.url else "sqlite"
        checks.append(("store", f"turn store ({store})", None, self._turn_store, self.timeout_s))
        checks.append(
            (
                "store",
                "shared state (redis)",
                None
                if s.store.redis_url
                else "store.redis_url not set: leases in the SQLite file, one host only",
                self._redis,
                self.timeout_s,
            )
        )
        tools = s.tools
        for server in tools.mcp:
            how = "stdio" if server.command else "http"
            checks.append(
                (
                    "tools",
                    f"tools {server.source} ({how})",
                    None,
                    partial(
                        self._tool_source, replace(tools, mcp=(server,), python=()), server.source
                    ),
                    server.timeout_s + self.timeout_s,
                )
            )
        for module in tools.python:
            checks.append(
                (
                    "tools",
                    f"tools python:{module}",
                    None,
                    partial(
                        self._tool_source,
                        replace(tools, mcp=(), python=(module,)),
                        f"python:{module}",
                    ),
                    self.timeout_s,
                )
            )
        if not tools.mcp and not tools.python:
            checks.append(
                (
                    "tools",
                    "tools",
                    "no [[tools.mcp]] or tools.python configured",
                    partial(self._tool_source, tools, "tools"),
                    self.timeout_s,
                )
            )
        for group, name, skip, check, limit in checks:
            if group not in self.only:
                continue
            if skip:
                self.results.append(CheckResult(name, SKIP, None, skip))
                continue
            self.results.append(await _timed(name, check, limit))
        return self.results

    # ---- LiveKit --------------------------------------------------------------------------

    async def _livekit_binary(self) -> Outcome:
        from agent.ops.livekit_server import LiveKitServerMissing, find_livekit_server
        from agent.worker.provider_checks import ProviderError, check_livekit

        try:
            path = find_livekit_server(build=False)
        except LiveKitServerMissing as missing:
            # A worker that shares LiveKit's loopback without running it (the image on the
            # host network, a sidecar) needs no binary; only a LiveKit that is not up does.
            try:
                await check_livekit(self.settings.livekit, timeout_s=self.timeout_s)
            except ProviderError:
                raise missing from None
            return f"none here, not needed: a LiveKit answers at {self.settings.livekit.url}", None
        done = await asyncio.to_thread(
            subprocess.run,
            [str(path), "--version"],
            capture_output=True,
            text=True,
            timeout=self.timeout_s,
        )
        if done.returncode != 0:
            raise CheckFailed(f"{path} --version exited with {done.returncode}")
        return f"{path} ({done.stdout.strip()})", None

    async def _livekit(self) -> Outcome:
        from agent.worker.provider_checks import check_livekit

        return await check_livekit(self.settings.livekit, timeout_s=self.timeout_s), None

    # ---- speech ---------------------------------------------------------------------------

    async def _piper(self) -> Outcome:
        from tts.piper_tts import PiperTTS

        tts = PiperTTS(output_rate=INPUT_RATE)
        await asyncio.to_thread(tts.load)
        await tts.synthesize("Hello.")  # the first inference allocates; time the second
        start = time.monotonic()
        pcm = await tts.synthesize(SENTENCE)
        ms = (time.monotonic() - start) * 1000
        seconds = pcm.size / INPUT_RATE
        if seconds < 0.1 * len(SENTENCE.split()):
            raise CheckFailed(f"only {seconds:.2f} s of audio for {len(SENTENCE.split())} words")
        if self._speech is None:
            self._speech = Speech(SENTENCE, pcm)
        return f"{seconds:.1f} s of speech for {len(SENTENCE.split())} words", ms

    def _speech_to_hear(self) -> Speech:
        if self._speech is not None:
            return self._speech
        if shutil.which("espeak-ng") is None:
            raise CheckFailed("no test speech: Piper did not speak and espeak-ng is not installed")
        self._speech = Speech(SENTENCE, espeak(SENTENCE))
        return self._speech

    async def _whisper(self) -> Outcome:
        from agent.adapters.stt.whisper import WhisperSTT

        speech = self._speech_to_hear()
        stt = WhisperSTT()
        await asyncio.to_thread(stt.load)
        await asyncio.to_thread(stt.warmup)
        start = time.monotonic()
        heard = await stt.transcribe(speech.pcm)
        return _judge_transcript(speech, heard), (time.monotonic() - start) * 1000

    async def _deepgram(self) -> Outcome:
        from agent.adapters.stt.deepgram import DeepgramSTT
        from agent.worker.provider_checks import check_deepgram

        await check_deepgram(self.settings.stt, timeout_s=self.timeout_s)
        speech = self._speech_to_hear()
        start = time.monotonic()
        heard = await DeepgramSTT.from_settings(self.settings.stt).transcribe(speech.pcm)
        return _judge_transcript(speech, heard), (time.monotonic() - start) * 1000

    async def _turn_detector(self) -> Outcome:
        from agent.adapters.turn_detector import make_detector

        detector = make_detector(self.settings.turn.detector)
        assert detector is not None
        await asyncio.to_thread(detector.load)
        pcm = self._speech_to_hear().pcm  # the audio models read audio: a real sentence
        start = time.monotonic()
        done = await detector.score(TURN_COMPLETE, pcm)
        ms = (time.monotonic() - start) * 1000
        unfinished = await detector.score(TURN_UNFINISHED, pcm[: pcm.size // 3])
        if detector.name.startswith("text") and not done > unfinished:
            raise CheckFailed(
                f"scored {TURN_COMPLETE!r} {done:.2f}, not above "
                f"{TURN_UNFINISHED!r} {unfinished:.2f}"
            )
        return f"P(complete) {done:.2f} for a finished question, {unfinished:.2f} unfinished", ms

    async def _embedder(self) -> Outcome:
        """The copilot's document index embeds with it (agent/adapters/embedder.py)."""
        from agent.adapters.embedder import MiniLMEmbedder

        embedder = MiniLMEmbedder()
        await asyncio.to_thread(embedder.load)
        start = time.monotonic()
        q, near, far = await asyncio.to_thread(
            embedder.embed, [EMBED_QUESTION, EMBED_NEAR, EMBED_FAR]
        )
        ms = _ms_since(start)
        close, unrelated = float(q @ near), float(q @ far)
        if not close > unrelated:
            raise CheckFailed(
                f"a paraphrase scored {close:.2f}, not above an unrelated line {unrelated:.2f}"
            )
        return f"cosine {close:.2f} to a paraphrase, {unrelated:.2f} to an unrelated line", ms

    # ---- tools ----------------------------------------------------------------------------

    async def _tool_source(self, tools: ToolsSettings, source: str) -> Outcome:
        """One MCP server or Python module: ok when it lists its tools."""
        from agent.adapters.tools.registry import ToolRegistry

        registry = ToolRegistry(tools)
        try:
            status = (await asyncio.to_thread(registry.start))[source]
        finally:
            await asyncio.to_thread(registry.close)
        if not status.ok:
            raise CheckFailed(status.detail)
        return f"{len(status.tools)} tool(s): {', '.join(status.tools)}", None

    # ---- shared state ---------------------------------------------------------------------

    async def _turn_store(self) -> Outcome:
        """PostgreSQL: connect, create the table if needed, read. SQLite: the file, or where it
        will be created, is writable (nothing is created here)."""
        from agent.store.transcripts import default_store_path, open_turn_store

        settings = self.settings.store
        if settings.url:

            def read() -> int:
                store = open_turn_store(settings)
                try:
                    return len(store.turns(limit=1))
                finally:
                    store.close()

            found = await asyncio.to_thread(read)
            where = urlparse(settings.url)
            return f"{where.hostname}:{where.port or 5432}{where.path} ({found} turn read)", None
        path = default_store_path(settings.path)
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not os.access(existing, os.W_OK):
            raise CheckFailed(
                f"{existing} is not writable: set store.path (VOXROOM_STORE_PATH) "
                "or store.url (VOXROOM_STORE_URL)"
            )
        return f"{path} ({'exists' if existing == path else 'will be created'})", None

    async def _redis(self) -> Outcome:
        """A lease-like key set with an expiry and read back."""
        from agent.store.shared_state import PREFIX, connect_redis

        def round_trip() -> str:
            client = connect_redis(self.settings.store.redis_url)
            try:
                key = f"{PREFIX}doctor"
                client.set(key, "ok", px=5000)
                if client.get(key) != "ok":
                    raise CheckFailed("a key set with an expiry did not read back")
                client.delete(key)
                return str(client.info("server").get("redis_version", "?"))
            finally:
                client.close()

        version = await asyncio.to_thread(round_trip)
        where = urlparse(self.settings.store.redis_url)
        return f"{where.hostname}:{where.port or 6379} (Redis {version})", None

    # ---- LLM ------------------------------------------------------------------------------

    async def _openai_llm(self) -> Outcome:
        from agent.adapters.providers import make_llm
        from agent.worker.provider_checks import check_openai_llm

        verified = await check_openai_llm(self.settings.llm, timeout_s=self.timeout_s)
        llm = make_llm(self.settings.llm)
        try:
            first, ms = await _first_token(llm, self.settings.llm.system_prompt)
        finally:
            await llm.aclose()  # type: ignore[attr-defined]  # OpenAIChatLLM's, not the Protocol's
        return f"first token {first!r}; {verified}", ms

    async def _local_llm(self) -> Outcome:
        from dataclasses import replace

        from agent.adapters.llm.llama_server import LocalLLMServer
        from agent.adapters.providers import make_llm

        server = LocalLLMServer(n_parallel=1)
        start = time.monotonic()
        try:
            url = await asyncio.to_thread(server.start)
            await asyncio.to_thread(server.warm, self.settings.llm.system_prompt)
            load_s = time.monotonic() - start
            llm = make_llm(
                replace(self.settings.llm, provider="local", model=""), local_base_url=url
            )
            try:
                first, ms = await _first_token(llm, self.settings.llm.system_prompt)
            finally:
                await llm.aclose()  # type: ignore[attr-defined]  # OpenAIChatLLM's, see above
        finally:
            await asyncio.to_thread(server.stop)
        return f"first token {first!r} (loaded and warmed in {load_s:.1f} s)", ms


async def _timed(name: str, check: Callable[[], Awaitable[Outcome]], limit_s: float) -> CheckResult:
    start = time.monotonic()
    try:
        async with asyncio.timeout(limit_s):
            detail, ms = await check()
    except TimeoutError:
        return CheckResult(name, FAIL, _ms_since(start), f"no result within {limit_s:g} s")
    except Exception as e:  # every failure becomes a row; the other checks still run
        return CheckResult(name, FAIL, _ms_since(start), _one_line(e))
    ms = _ms_since(start) if ms is None else round(ms, 1)
    return CheckResult(name, OK, ms, _one_line(detail))


async def _first_token(llm: LanguageModel, system_prompt: str) -> tuple[str, float]:
    """The first text delta of a reply and its time in ms; the request is closed after it."""
    messages = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": _LLM_PROMPT},
    ]
    start = time.monotonic()
    stream = llm.stream(messages)
    try:
        async for delta in stream:
            if isinstance(delta, str) and delta.strip():  # no tools offered: text only
                return delta.strip(), (time.monotonic() - start) * 1000
    finally:
        await stream.aclose()
    raise CheckFailed("the reply was empty")


def _judge_transcript(speech: Speech, heard: str) -> str:
    said, got = _words(speech.text), _words(heard)
    match = difflib.SequenceMatcher(None, said, got).ratio() if said else 0.0
    if match < MIN_MATCH:
        raise CheckFailed(f"heard {heard!r} for {speech.text!r} (match {match:.2f})")
    return f"heard {heard!r} (match {match:.2f})"


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def espeak(text: str) -> np.ndarray:
    """`text` spoken by espeak-ng at 16 kHz int16."""
    import soundfile as sf
    import soxr

    done = subprocess.run(
        ["espeak-ng", "-v", "en-us", "--stdout", text], capture_output=True, check=True
    )
    audio, rate = sf.read(io.BytesIO(done.stdout), dtype="float32")
    return (np.clip(soxr.resample(audio, rate, INPUT_RATE), -1, 1) * 32767).astype(np.int16)


def _ms_since(start: float) -> float:
    return round((time.monotonic() - start) * 1000, 1)


def _one_line(error: BaseException | str) -> str:
    text = str(error) if isinstance(error, str) else (str(error) or type(error).__name__)
    if isinstance(error, BaseException) and not isinstance(error, (CheckFailed, ConfigError)):
        text = f"{type(error).__name__}: {text}"
    return " ".join(text.split())


def format_table(results: list[CheckResult]) -> str:
    width = max([len("engine"), *(len(r.name) for r in results)])
    lines = [f"{'engine':<{width}}  {'status':<6}  {'ms':>8}  detail"]
    for r in results:
        ms = f"{r.ms:8.0f}" if r.ms is not None else " " * 8
        lines.append(f"{r.name:<{width}}  {r.status:<6}  {ms}  {r.detail}")
    return "\n".join(lines)


# ---- the subcommand -----------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--only",
        default=",".join(GROUPS),
        help=f"comma-separated checks to run (default: all of {','.join(GROUPS)})",
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds for each network check")


def run(args: argparse.Namespace) -> int:
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    if unknown := only - set(GROUPS):
        print(
            f"voxroom doctor: unknown check(s) {sorted(unknown)}; known: {', '.join(GROUPS)}",
            file=sys.stderr,
        )
        return 2
    settings = load_settings(args.config)
    results = asyncio.run(Doctor(settings, only=only, timeout_s=args.timeout).run())
    healthy = all(r.status != FAIL for r in results)
    if args.json:
        print(json.dumps({"ok": healthy, "checks": [asdict(r) for r in results]}, indent=2))
    else:
        print(format_table(results))
    return 0 if healthy else 1
