from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import jwt
import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.config import LiveKitSettings, Settings
from agent.web_server import browser_livekit_url, create_web_app, is_loopback

SETTINGS = Settings(
    livekit=LiveKitSettings(
        url="http://127.0.0.1:7880",
        api_key="testkey",
        api_secret="a-test-secret-of-32-bytes-or-more",
    )
)


@pytest.fixture
def static_dir(tmp_path: Path) -> Path:
    (tmp_path / "index.html").write_text("<!doctype html><title>voxroom</title>")
    (tmp_path / "app.js").write_text("console.log('voxroom')")
    return tmp_path


@asynccontextmanager
async def serve(static_dir: Path, **kwargs) -> AsyncIterator[TestClient]:
    app = create_web_app(SETTINGS, static_dir=static_dir, **kwargs)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield client


def decode(token: str) -> dict:
    return jwt.decode(token, SETTINGS.livekit.api_secret, algorithms=["HS256"])


async def test_token_is_issued_for_the_room_and_identity(static_dir: Path) -> None:
    async with serve(static_dir) as client:
        resp = await client.post(
            "/api/token", json={"room": "voxroom-demo", "identity": "alice_1", "name": "Alice"}
        )
        assert resp.status == 200
        body = await resp.json()
    assert body["url"] == "ws://127.0.0.1:7880"
    assert body["identity"] == "alice_1"
    claims = decode(body["token"])
    assert claims["iss"] == "testkey"
    assert claims["sub"] == "alice_1"
    assert claims["name"] == "Alice"
    assert claims["video"]["room"] == "voxroom-demo"
    assert claims["video"]["roomJoin"] is True
    assert claims["roomConfig"]["agents"][0]["agentName"] == SETTINGS.livekit.agent_name
    assert 590 <= claims["exp"] - time.time() <= 600


async def test_identity_is_made_up_when_not_given(static_dir: Path) -> None:
    async with serve(static_dir) as client:
        first = await (await client.post("/api/token", json={"room": "r1"})).json()
        second = await (await client.post("/api/token", json={"room": "r1", "name": ""})).json()
    assert first["identity"] != second["identity"]
    assert decode(first["token"])["sub"] == first["identity"]
    assert "name" not in decode(second["token"])


@pytest.mark.parametrize(
    "body",
    [
        {"room": ""},
        {"room": "has space"},
        {"room": "r" * 65},
        {"room": 7},
        {"identity": "alice"},
        {"room": "ok", "identity": "a/b"},
        {"room": "ok", "name": "n" * 65},
        {"room": "ok", "name": ["list"]},
        ["room", "ok"],
    ],
)
async def test_bad_input_is_refused_with_a_plain_message(static_dir: Path, body: object) -> None:
    async with serve(static_dir) as client:
        resp = await client.post("/api/token", json=body)
        assert resp.status == 400
        message = (await resp.json())["error"]
    assert message.endswith(".") and "Traceback" not in message


async def test_body_that_is_not_json_is_refused(static_dir: Path) -> None:
    async with serve(static_dir) as client:
        resp = await client.post("/api/token", data=b"room=x")
        assert resp.status == 400
        assert "JSON" in (await resp.json())["error"]


async def test_static_page_is_served(static_dir: Path) -> None:
    async with serve(static_dir) as client:
        index = await client.get("/")
        assert index.status == 200
        assert "<title>voxroom</title>" in await index.text()
        script = await client.get("/app.js")
        assert script.status == 200
        assert await script.text() == "console.log('voxroom')"
        assert (await client.get("/missing.js")).status == 404


async def test_missing_build_says_how_to_build(tmp_path: Path) -> None:
    async with serve(tmp_path / "dist") as client:
        resp = await client.get("/")
        assert resp.status == 503
        assert "make web" in await resp.text()


def _non_loopback_ipv4() -> str | None:
    """An address of this machine that is not loopback (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if is_loopback(address) else address


@pytest.mark.parametrize(("allow_remote", "status"), [(False, 403), (True, 200)])
async def test_remote_requests_need_allow_remote(
    static_dir: Path, allow_remote: bool, status: int
) -> None:
    address = _non_loopback_ipv4()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    app = create_web_app(SETTINGS, static_dir=static_dir, allow_remote=allow_remote)
    async with TestServer(app, host=address) as server:
        # Connect from that address too, so the server sees a non-loopback peer.
        connector = aiohttp.TCPConnector(local_addr=(address, 0))
        async with aiohttp.ClientSession(connector=connector) as session:
            for request in (
                lambda: session.get(server.make_url("/")),
                lambda: session.post(server.make_url("/api/token"), json={"room": "r"}),
            ):
                async with request() as resp:
                    assert resp.status == status


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("192.168.1.20", False),
        ("::ffff:10.0.0.1", False),
        ("", False),
        (None, False),
        ("not-an-ip", False),
    ],
)
def test_is_loopback(address: str | None, expected: bool) -> None:
    assert is_loopback(address) is expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:7880", "ws://127.0.0.1:7880"),
        ("https://lk.example.org", "wss://lk.example.org"),
        ("ws://127.0.0.1:7880", "ws://127.0.0.1:7880"),
        ("wss://lk.example.org/base", "wss://lk.example.org/base"),
    ],
)
def test_browser_livekit_url(url: str, expected: str) -> None:
    assert browser_livekit_url(url) == expected

