"""agent/transports/web_server.py: the page, /api/config and the token service: what a token grants,
who may ask for one (loopback, shared secret, trusted proxy), the rate limit, and tokens that
livekit-server refuses (expired, forged, over-granted)."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import jwt
import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.config import ConfigError, LiveKitSettings, Settings
from agent.ops.livekit_server import LiveKitServer
from agent.transports.tokens import copilot_metadata
from agent.transports.web_server import (
    RateLimiter,
    WebSettings,
    access_of,
    browser_livekit_url,
    create_web_app,
    identify,
    is_loopback,
    parse_networks,
)
from tests.marks import DEV_SECRET
from tests.test_tokens import user_grants

SETTINGS = Settings(
    livekit=LiveKitSettings(
        url="http://127.0.0.1:7880",
        api_key="testkey",
        api_secret="a-test-secret-of-32-bytes-or-more",
    )
)
SECRET = "an-access-code-0123456789"
PROXY_AUTH = WebSettings(
    trusted_auth_header="X-Auth-User", trusted_proxies=parse_networks("::1, 127.0.0.1")
)


@pytest.fixture
def static_dir(tmp_path: Path) -> Path:
    (tmp_path / "index.html").write_text("<!doctype html><title>voxroom</title>")
    (tmp_path / "app.js").write_text("console.log('voxroom')")
    return tmp_path


@asynccontextmanager
async def serve(
    static_dir: Path,
    web_settings: WebSettings | None = None,
    settings: Settings = SETTINGS,
    **kwargs,
) -> AsyncIterator[TestClient]:
    app = create_web_app(settings, static_dir=static_dir, web_settings=web_settings, **kwargs)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield client


def decode(token: str, secret: str = SETTINGS.livekit.api_secret) -> dict:
    return jwt.decode(token, secret, algorithms=["HS256"])


# ---- the token ------------------------------------------------------------------------------


async def test_token_grants_one_room_a_microphone_and_the_agent(static_dir: Path) -> None:
    async with serve(static_dir) as client:
        resp = await client.post("/api/token", json={"room": "voxroom-demo", "name": "Alice"})
        assert resp.status == 200
        assert resp.headers["Cache-Control"] == "no-store"
        body = await resp.json()
    assert body["url"] == "ws://127.0.0.1:7880"
    claims = decode(body["token"])
    assert claims["iss"] == "testkey"
    assert claims["sub"] == body["identity"] and body["identity"].startswith("user-")
    assert claims["name"] == "Alice"
    assert claims["video"] == user_grants("voxroom-demo")
    assert claims["roomConfig"] == {
        "agents": [
            {
                "agentName": SETTINGS.livekit.agent_name,
                "metadata": json.dumps({"voxroom.user": claims["sub"]}),
            }
        ]
    }
    assert claims["exp"] - claims["nbf"] == 600
    assert SETTINGS.livekit.api_secret not in json.dumps(body)


async def test_token_lifetime_is_configurable_up_to_ten_minutes(static_dir: Path) -> None:
    async with serve(static_dir, WebSettings(token_ttl_s=60)) as client:
        body = await (await client.post("/api/token", json={"room": "r"})).json()
    claims = decode(body["token"])
    assert claims["exp"] - claims["nbf"] == 60
    for ttl in (0, 601, 86400):
        with pytest.raises(ConfigError, match="VOXROOM_WEB_TOKEN_TTL_S"):
            WebSettings(token_ttl_s=ttl)


async def test_every_caller_gets_its_own_identity(static_dir: Path) -> None:
    async with serve(static_dir) as client:
        first = await (await client.post("/api/token", json={"room": "r1"})).json()
        second = await (await client.post("/api/token", json={"room": "r1", "name": ""})).json()
    assert first["identity"] != second["identity"]
    assert "name" not in decode(second["token"])


async def test_copilot_token_makes_the_caller_the_candidate(static_dir: Path) -> None:
    async with serve(static_dir) as client:
        copilot, voice = [
            await (await client.post("/api/token", json={"room": "r", "copilot": on})).json()
            for on in (True, False)
        ]
    identity = copilot["identity"]
    [dispatch] = decode(copilot["token"])["roomConfig"]["agents"]
    # What `voxroom token --copilot` asks for, and the grants of any page user, no more.
    assert json.loads(dispatch["metadata"]) == {
        **json.loads(copilot_metadata(identity)),
        "voxroom.user": identity,
    }
    assert json.loads(dispatch["metadata"])["voxroom.candidate"] == identity
    assert decode(copilot["token"])["video"] == decode(voice["token"])["video"]
    [plain] = decode(voice["token"])["roomConfig"]["agents"]
    assert json.loads(plain["metadata"]) == {"voxroom.user": voice["identity"]}


@pytest.mark.parametrize("value", ["true", 1, None, {"on": True}])
async def test_copilot_must_be_a_boolean(static_dir: Path, value: object) -> None:
    async with serve(static_dir) as client:
        resp = await client.post("/api/token", json={"room": "r", "copilot": value})
        assert resp.status == 400
        assert (await resp.json())["error"] == "The copilot field must be true or false."


@pytest.mark.parametrize(
    "extra",
    [
        {"identity": "alice"},  # someone else's identity would evict them from the room
        {"ttl": 86400},
        {"grants": {"roomAdmin": True}},
        {"canPublishSources": ["camera", "screen_share"]},
        {"agent": "other"},
    ],
)
async def test_requests_for_more_than_the_minimum_are_refused(
    static_dir: Path, extra: dict
) -> None:
    async with serve(static_dir) as client:
        resp = await client.post("/api/token", json={"room": "r", **extra})
        assert resp.status == 400
        message = (await resp.json())["error"]
    assert message.startswith("Unknown field(s): ") and next(iter(extra)) in message
    assert message.endswith("Only the room, a display name and the copilot mode can be chosen.")


@pytest.mark.parametrize(
    "body",
    [
        {"room": ""},
        {"room": "has space"},
        {"room": "r" * 65},
        {"room": 7},
        {"name": "no room"},
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


# ---- the page -------------------------------------------------------------------------------


async def test_static_page_and_config_are_served(static_dir: Path) -> None:
    async with serve(static_dir) as client:
        index = await client.get("/")
        assert index.status == 200
        assert "<title>voxroom</title>" in await index.text()
        script = await client.get("/app.js")
        assert await script.text() == "console.log('voxroom')"
        assert (await client.get("/missing.js")).status == 404
        config = await client.get("/api/config")
        assert await config.json() == {"mode": "livekit", "access": "open"}


async def test_missing_build_says_how_to_build(tmp_path: Path) -> None:
    async with serve(tmp_path / "dist") as client:
        resp = await client.get("/")
        assert resp.status == 503
        assert "make web" in await resp.text()


def test_the_page_speaks_the_copilots_names_and_limit(repo_root: Path) -> None:
    """web/src has its own copies of the copilot's topics, attributes and upload limit, and of
    the typed messages' topic and bound."""
    from agent import protocol
    from agent.copilot.context.index import MAX_DOCUMENT_BYTES
    from agent.transports.typed_input import MAX_TYPED_CHARS

    page = "\n".join(
        (repo_root / "web" / "src" / name).read_text()
        for name in ("copilot.ts", "copilotDocuments.ts", "transcript.ts", "chat.ts")
    )
    assert f"MAX_DOCUMENT_BYTES = {MAX_DOCUMENT_BYTES:_};" in page
    assert f"MAX_CHAT_CHARS = {MAX_TYPED_CHARS:_};" in page
    assert f'maxlength="{MAX_TYPED_CHARS}"' in (repo_root / "web" / "index.html").read_text()
    for constant in (
        "TOPIC_CHAT",
        "TOPIC_COPILOT",
        "TOPIC_CONTEXT",
        "TOPIC_CONTEXT_STATUS",
        "TOPIC_COPILOT_CONTROL",
        "ATTR_CONTEXT_NAME",
        "ATTR_QUESTION",
        "ATTR_ANSWER_STATUS",
        "ATTR_SPEAK",
        "ATTR_WARM_PIECES",
        "ATTR_DOCUMENTS_FIT",
        "MEETING_TRACK",
        "ATTR_BRIDGE_CANDIDATE",
        "ATTR_SPEAKER",
        "SPEAKER_INTERVIEWER",
    ):
        name = getattr(protocol, constant)
        assert f"= '{name}';" in page, constant


# ---- who may ask ----------------------------------------------------------------------------


def _non_loopback_ipv4() -> str | None:
    """An address of this machine that is not loopback (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if is_loopback(address) else address


@asynccontextmanager
async def remote_client(static_dir: Path, web_settings: WebSettings):
    """A client that reaches the app from a non-loopback address of this machine, as another
    device on the network would."""
    address = _non_loopback_ipv4()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    app = create_web_app(SETTINGS, static_dir=static_dir, web_settings=web_settings)
    async with TestServer(app, host=address) as server:
        connector = aiohttp.TCPConnector(local_addr=(address, 0))
        async with aiohttp.ClientSession(connector=connector) as session:
            yield session, server


@pytest.mark.parametrize(
    ("web_settings", "headers", "status", "access"),
    [
        (WebSettings(), {}, 403, "closed"),
        (WebSettings(shared_secret=SECRET), {}, 401, "code"),
        (WebSettings(shared_secret=SECRET), {"Authorization": "Bearer wrong-code"}, 401, "code"),
        (WebSettings(shared_secret=SECRET), {"Authorization": f"Basic {SECRET}"}, 401, "code"),
        (WebSettings(shared_secret=SECRET), {"Authorization": f"Bearer {SECRET}"}, 200, "open"),
        # A forwarded loopback address from an untrusted peer is not believed.
        (WebSettings(), {"X-Forwarded-For": "127.0.0.1"}, 403, "closed"),
        # The trusted auth header counts only from the trusted proxy, which this peer is not.
        (
            WebSettings(
                trusted_auth_header="X-Auth-User", trusted_proxies=parse_networks("10.9.9.9")
            ),
            {"X-Auth-User": "alice"},
            403,
            "closed",
        ),
    ],
)
async def test_off_loopback_a_secret_is_required(
    static_dir: Path, web_settings: WebSettings, headers: dict, status: int, access: str
) -> None:
    async with remote_client(static_dir, web_settings) as (session, server):
        async with session.post(
            server.make_url("/api/token"), json={"room": "r"}, headers=headers
        ) as resp:
            assert resp.status == status
            if status != 200:
                message = (await resp.json())["error"]
                assert SECRET not in message and message.endswith(".")
            if status == 401:
                assert resp.headers["WWW-Authenticate"].startswith("Bearer")
        async with session.get(server.make_url("/api/config"), headers=headers) as resp:
            assert (await resp.json())["access"] == access
        async with session.get(server.make_url("/")) as resp:
            assert resp.status == 200  # the page itself is public: it holds no secret


@pytest.mark.parametrize(
    ("web_settings", "headers", "status"),
    [
        # A reverse proxy on this machine: its visitors must not count as local.
        (WebSettings(), {"X-Forwarded-For": "203.0.113.7"}, 403),
        (WebSettings(), {"Forwarded": "for=203.0.113.7"}, 403),
        (
            WebSettings(trusted_proxies=parse_networks("127.0.0.1")),
            {"X-Forwarded-For": "203.0.113.7"},
            403,
        ),
        (WebSettings(trusted_proxies=parse_networks("127.0.0.1")), {}, 403),
        (
            WebSettings(trusted_proxies=parse_networks("127.0.0.1")),
            {"X-Forwarded-For": "127.0.0.1"},
            200,
        ),
        (
            WebSettings(shared_secret=SECRET),
            {"X-Forwarded-For": "203.0.113.7", "Authorization": f"Bearer {SECRET}"},
            200,
        ),
        (PROXY_AUTH, {"X-Forwarded-For": "203.0.113.7", "X-Auth-User": "alice@example.org"}, 200),
        (PROXY_AUTH, {"X-Forwarded-For": "203.0.113.7", "X-Auth-User": " "}, 403),
    ],
)
async def test_behind_a_reverse_proxy(
    static_dir: Path, web_settings: WebSettings, headers: dict, status: int
) -> None:
    async with serve(static_dir, web_settings) as client:
        resp = await client.post("/api/token", json={"room": "r"}, headers=headers)
        assert resp.status == status


def test_client_address_through_a_chain_of_trusted_proxies() -> None:
    ws = WebSettings(trusted_proxies=parse_networks("10.0.0.0/8, 127.0.0.1"))
    # The left-most entries are whatever the client wrote; only the right-most untrusted hop
    # was added by a trusted proxy.
    chain = {"X-Forwarded-For": "127.0.0.1, 198.51.100.4, 10.1.2.3"}
    caller = identify("127.0.0.1", chain, ws)
    assert (caller.address, caller.local, caller.via_trusted_proxy) == ("198.51.100.4", False, True)
    caller = identify("192.0.2.50", chain, ws)  # not a trusted proxy: its header is ignored
    assert (caller.address, caller.local, caller.via_trusted_proxy) == ("192.0.2.50", False, False)
    assert identify("::1", {}, WebSettings()).local
    assert identify("::ffff:127.0.0.1", {}, WebSettings()).local
    assert access_of(identify(None, {}, WebSettings()), {}, WebSettings()) == "closed"


def test_web_settings_from_the_environment() -> None:
    ws = WebSettings.from_env(
        {
            "VOXROOM_WEB_SHARED_SECRET": SECRET,
            "VOXROOM_WEB_TRUSTED_AUTH_HEADER": "X-Forwarded-User",
            "VOXROOM_WEB_TRUSTED_PROXIES": "127.0.0.1, 10.0.0.0/8",
            "VOXROOM_WEB_TOKEN_TTL_S": "300",
            "VOXROOM_WEB_RATE_LIMIT_PER_MIN": "30",
        }
    )
    assert (ws.shared_secret, ws.trusted_auth_header, ws.token_ttl_s, ws.rate_per_min) == (
        SECRET,
        "X-Forwarded-User",
        300,
        30.0,
    )
    assert [str(n) for n in ws.trusted_proxies] == ["127.0.0.1/32", "10.0.0.0/8"]
    assert SECRET not in repr(ws)
    assert WebSettings.from_env({}) == WebSettings()


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"VOXROOM_WEB_SHARED_SECRET": "short"}, "at least 16"),
        ({"VOXROOM_WEB_TRUSTED_AUTH_HEADER": "X-User"}, "needs VOXROOM_WEB_TRUSTED_PROXIES"),
        (
            {"VOXROOM_WEB_TRUSTED_AUTH_HEADER": "X User", "VOXROOM_WEB_TRUSTED_PROXIES": "::1"},
            "header name",
        ),
        ({"VOXROOM_WEB_TRUSTED_PROXIES": "proxy.local"}, "not an IP address"),
        ({"VOXROOM_WEB_TOKEN_TTL_S": "ten"}, "must be a number"),
        ({"VOXROOM_WEB_RATE_LIMIT_PER_MIN": "0"}, "must be positive"),
    ],
)
def test_bad_web_settings_say_what_is_wrong(env: dict, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        WebSettings.from_env(env)


# ---- the rate limit -------------------------------------------------------------------------


def test_rate_limiter_is_a_token_bucket_per_client() -> None:
    now = [0.0]
    limiter = RateLimiter(10, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(10)] == [0.0] * 10
    assert limiter.take("a") == pytest.approx(6.0)  # one token every 6 s
    assert limiter.take("b") == 0.0  # another client has its own bucket
    now[0] = 5.0
    assert limiter.take("a") == pytest.approx(1.0)
    now[0] = 6.0
    assert limiter.take("a") == 0.0
    assert limiter.take("a") > 0


def test_rate_limiter_forgets_clients_whose_bucket_refilled() -> None:
    now = [0.0]
    limiter = RateLimiter(60, clock=lambda: now[0], max_clients=3)
    for key in "abc":
        limiter.take(key)
    now[0] = 120.0
    limiter.take("d")  # over the limit of clients: the refilled ones go
    assert set(limiter._buckets) == {"d"}


async def test_token_endpoint_answers_429_with_retry_after(static_dir: Path) -> None:
    now = [1000.0]
    async with serve(static_dir, WebSettings(rate_per_min=3), clock=lambda: now[0]) as client:
        statuses = [(await client.post("/api/token", json={"room": "r"})).status for _ in range(3)]
        assert statuses == [200] * 3
        resp = await client.post("/api/token", json={"room": "r"})
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "20"
        assert "Wait a minute" in (await resp.json())["error"]
        # Refused bodies and wrong codes count too: the limit also slows down guessing.
        assert (await client.post("/api/token", data=b"junk")).status == 429
        assert (await client.get("/api/config")).status == 200  # the page still loads
        now[0] += 20
        assert (await client.post("/api/token", json={"room": "r"})).status == 200


# ---- helpers --------------------------------------------------------------------------------


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


# ---- what livekit-server makes of the tokens ------------------------------------------------


def _tampered(token: str, **claims) -> str:
    """`token` with its payload changed and its signature kept, as a browser could try."""
    header, payload, signature = token.split(".")
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    data.update(claims)
    raw = base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()
    return f"{header}.{raw}.{signature}"


@pytest.mark.integration
@DEV_SECRET
async def test_livekit_server_refuses_expired_forged_and_over_granted_tokens(
    livekit_server: LiveKitServer, static_dir: Path
) -> None:
    from livekit import rtc
    from livekit.rtc.participant import PublishTrackError

    settings = Settings(livekit=livekit_server.livekit_settings())
    async with serve(static_dir, settings=settings) as client:
        body = await (await client.post("/api/token", json={"room": "refusals"})).json()
    token, secret = body["token"], livekit_server.api_secret
    claims = decode(token, secret)
    now = int(time.time())
    refused = {
        # Past the server's clock leeway (a minute).
        "token is expired": jwt.encode(
            {**claims, "nbf": now - 900, "exp": now - 300}, secret, algorithm="HS256"
        ),
        "signature is invalid": jwt.encode(
            claims, "not-the-secret-of-this-livekit-server", algorithm="HS256"
        ),
    }
    over_granted = _tampered(
        token,
        video={
            **claims["video"],
            "roomAdmin": True,
            "roomList": True,
            "canPublishSources": ["microphone", "camera", "screen_share"],
        },
    )
    for reason, bad in [*refused.items(), ("signature is invalid", over_granted)]:
        room = rtc.Room()
        with pytest.raises(rtc.ConnectError, match=reason):
            await room.connect(livekit_server.url, bad)

    # The token as issued joins, and can do only what it grants.
    room = rtc.Room()
    await room.connect(livekit_server.url, token)
    try:
        screen = rtc.LocalAudioTrack.create_audio_track("screen", rtc.AudioSource(48_000, 1))
        options = rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_SCREENSHARE_AUDIO)
        with pytest.raises(PublishTrackError):  # the server never accepts it
            await room.local_participant.publish_track(screen, options)
        async with aiohttp.ClientSession() as session:
            for method, request in (
                ("ListRooms", {}),
                ("RemoveParticipant", {"room": "refusals", "identity": "x"}),
            ):
                async with session.post(
                    f"{livekit_server.http_url}/twirp/livekit.RoomService/{method}",
                    json=request,
                    headers={"Authorization": f"Bearer {token}"},
                ) as resp:
                    assert resp.status == 401, method
    finally:
        await room.disconnect()
