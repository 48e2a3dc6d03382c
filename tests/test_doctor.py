"""`voxroom doctor`: a row per configured engine, ok/FAIL with a reason, exit status 0 only
when every configured engine works. Against test doubles (the scripted OpenAI-compatible LLM
server, the fake Deepgram), dead URLs, and (slow) the bundled models."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from agent.apps.doctor import FAIL, OK, SKIP, Doctor, Speech, format_table
from agent.cli import main
from agent.config import LiveKitSettings, LLMSettings, Settings, STTSettings, TurnSettings
from agent.testing.deepgram_double_recognisers import silence, speech, word_code_recogniser
from agent.testing.deepgram_server_double import DeepgramServerDouble
from agent.testing.scripted_llm import ScriptedLLM
from agent.testing.scripted_llm_server import scripted_llm_server


def dead_url(port: int, scheme: str = "http", path: str = "/v1") -> str:
    return f"{scheme}://127.0.0.1:{port}{path}"


def openai_llm(base_url: str) -> Settings:
    return Settings(llm=LLMSettings(provider="openai", base_url=base_url, model="scripted"))


async def test_llm_streams_a_first_token_and_is_timed() -> None:
    llm = ScriptedLLM(["Hello there, how can I help?"], ttft_ms=120)
    async with scripted_llm_server(llm) as url:
        # a generous timeout: the machine running the tests may be busy
        [row] = await Doctor(openai_llm(url), only={"llm"}, timeout_s=30).run()
    assert row.name == "llm (scripted)"
    assert row.status == OK
    assert row.detail.startswith("first token 'Hello'")
    assert row.ms is not None and row.ms >= 120  # the time to the first token, not the listing


async def test_dead_llm_url_fails_with_a_clear_reason(dead_port: int) -> None:
    url = dead_url(dead_port)
    [row] = await Doctor(openai_llm(url), only={"llm"}).run()
    assert row.status == FAIL
    assert row.detail.startswith(f"llm: cannot reach {url} (")
    assert "check llm.base_url" in row.detail


@pytest.mark.slow
async def test_fallback_model_gets_its_own_row_and_the_bundled_model_answers() -> None:
    async with scripted_llm_server(ScriptedLLM(["Hi."])) as url:
        settings = openai_llm(url)
        settings = replace(settings, llm=replace(settings.llm, fallback="local"))
        rows = await Doctor(settings, only={"llm"}).run()
    assert [(r.name, r.status) for r in rows] == [
        ("llm (scripted)", OK),
        ("llm fallback (bundled)", OK),
    ], rows
    assert rows[1].detail.startswith("first token ")


async def test_dead_livekit_url_fails_and_unconfigured_deepgram_is_skipped(
    dead_port: int,
) -> None:
    url = dead_url(dead_port, "ws", "")
    settings = Settings(livekit=LiveKitSettings(url=url))
    rows = {r.name: r for r in await Doctor(settings, only={"livekit", "deepgram"}).run()}
    assert rows["livekit"].status == FAIL
    assert rows["livekit"].detail.startswith(f"livekit: cannot reach {url} (")
    assert rows["deepgram"].status == SKIP
    assert rows["deepgram"].detail == "stt.provider = whisper"


async def test_remote_livekit_needs_no_local_binary() -> None:
    settings = Settings(livekit=LiveKitSettings(url="wss://example.invalid"))
    rows = await Doctor(settings, only={"livekit"}, timeout_s=0.5).run()
    assert (rows[0].name, rows[0].status) == ("livekit-server", SKIP)


def _no_livekit_binary(monkeypatch) -> None:
    from agent.ops import livekit_server

    def missing(build: bool = True):
        raise livekit_server.LiveKitServerMissing("livekit-server v1 is needed (install hint)")

    monkeypatch.setattr(livekit_server, "find_livekit_server", missing)


@pytest.mark.integration
async def test_local_livekit_that_answers_needs_no_binary_here(livekit_server, monkeypatch) -> None:
    # The image on the host network: LiveKit on the shared loopback, no binary inside.
    _no_livekit_binary(monkeypatch)
    rows = await Doctor(
        Settings(livekit=livekit_server.livekit_settings()), only={"livekit"}, timeout_s=10
    ).run()
    assert [(r.name, r.status) for r in rows] == [("livekit-server", OK), ("livekit", OK)]
    assert rows[0].detail == f"none here, not needed: a LiveKit answers at {livekit_server.url}"


async def test_local_livekit_that_is_down_and_no_binary_fails_with_the_install_hint(
    monkeypatch, dead_port: int
) -> None:
    _no_livekit_binary(monkeypatch)
    settings = Settings(livekit=LiveKitSettings(url=dead_url(dead_port, "ws", "")))
    [row, _] = await Doctor(settings, only={"livekit"}, timeout_s=2).run()
    assert (row.name, row.status) == ("livekit-server", FAIL)
    assert row.detail == "LiveKitServerMissing: livekit-server v1 is needed (install hint)"


async def test_deepgram_hears_the_test_speech() -> None:
    async with DeepgramServerDouble(word_code_recogniser(["hello there general kenobi"])) as fake:
        stt = STTSettings(provider="deepgram", api_key="test-key", base_url=fake.url)
        test_speech = Speech(
            "Hello there, general Kenobi!", np.concatenate([speech(0, 4), silence(100)])
        )
        [row] = await Doctor(
            Settings(stt=stt), only={"deepgram"}, speech=test_speech, timeout_s=30
        ).run()
        assert (row.status, row.detail) == (OK, "heard 'hello there general kenobi' (match 1.00)")

        wrong = Speech("goodbye everyone", test_speech.pcm)
        [row] = await Doctor(Settings(stt=stt), only={"deepgram"}, speech=wrong).run()
        assert row.status == FAIL
        assert row.detail.startswith("heard 'hello there general kenobi' for 'goodbye everyone'")

        bad_key = replace(stt, api_key="wrong")
        [row] = await Doctor(Settings(stt=bad_key), only={"deepgram"}, speech=test_speech).run()
        assert row.status == FAIL
        assert "rejected the API key" in row.detail


def test_table_has_a_row_per_check() -> None:
    from agent.apps.doctor import CheckResult

    table = format_table(
        [
            CheckResult("piper", OK, 95.4, "3.4 s of speech"),
            CheckResult("deepgram", SKIP, None, "stt.provider = whisper"),
        ]
    )
    assert table.splitlines() == [
        "engine    status        ms  detail",
        "piper     ok            95  3.4 s of speech",
        "deepgram  skip              stt.provider = whisper",
    ]


def test_cli_json_and_exit_status_on_failure(monkeypatch, capsys, dead_port: int) -> None:
    monkeypatch.setenv("VOXROOM_LLM_PROVIDER", "openai")
    monkeypatch.setenv("VOXROOM_LLM_MODEL", "scripted")
    monkeypatch.setenv("VOXROOM_LLM_BASE_URL", dead_url(dead_port))
    assert main(["doctor", "--only", "llm", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert [(c["name"], c["status"]) for c in report["checks"]] == [("llm (scripted)", FAIL)]
    assert main(["doctor", "--only", "llm,tts"]) == 2


@pytest.mark.integration
def test_cli_exit_status_zero_when_everything_checked_works(
    livekit_server, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("LIVEKIT_URL", livekit_server.url)
    monkeypatch.setenv("LIVEKIT_API_KEY", livekit_server.api_key)
    monkeypatch.setenv("LIVEKIT_API_SECRET", livekit_server.api_secret)
    assert main(["doctor", "--only", "livekit"]) == 0
    out = capsys.readouterr().out
    assert "livekit-server  ok" in out and "accepted the key" in out


@pytest.mark.slow
async def test_piper_speaks_and_whisper_hears_it() -> None:
    rows = await Doctor(Settings(), only={"piper", "whisper"}).run()
    assert [(r.name, r.status) for r in rows] == [("piper", OK), ("whisper", OK)], rows
    assert rows[1].detail.startswith("heard ")


@pytest.mark.slow
async def test_the_bundled_turn_detector_scores_a_question_above_an_unfinished_start() -> None:
    from bench.speech import espeak

    speech = Speech("What time is it in Tokyo?", espeak("What time is it in Tokyo?"))
    [row] = await Doctor(Settings(), only={"turn"}, speech=speech).run()
    assert (row.name, row.status) == ("turn detector (text+smart-turn)", OK), row
    assert row.detail.startswith("P(complete) ")


async def test_a_turn_detector_turned_off_is_skipped() -> None:
    settings = Settings(turn=TurnSettings(detector="off"))
    [row] = await Doctor(settings, only={"turn"}).run()
    assert row.status == SKIP and row.detail == "turn.detector = off"
