"""The web app of `voxroom demo`: the built page (web/dist), its configuration, and the join
endpoint: `POST /api/token` (LiveKit mode, here) or `POST /api/direct/offer` (direct mode,
agent/transports/direct.py).

`GET /api/config` answers `{"mode": "livekit" | "direct", "access": "open" | "code" |
"closed"}`: how the page connects, and whether this caller may join as is, needs the access
code, or cannot join at all.

`POST /api/token` takes `{"room", "name"?, "copilot"?}` and answers `{"token", "url",
"identity"}`: a token valid for `VOXROOM_WEB_TOKEN_TTL_S` (at most 600 s) that lets a made-up
identity join that one room, publish a microphone and subscribe, and that dispatches the agent
through the room configuration. With `"copilot": true` the agent is that identity's interview
copilot (agent.copilot.room), as `voxroom token --copilot` makes it. The API secret never leaves
this process.

Who may join:
- this machine (loopback peer, no forwarding headers): always, for development;
- anyone else with `Authorization: Bearer <VOXROOM_WEB_SHARED_SECRET>`;
- behind a reverse proxy listed in `VOXROOM_WEB_TRUSTED_PROXIES`: requests the proxy marked as
  authenticated with a non-empty `VOXROOM_WEB_TRUSTED_AUTH_HEADER`.
`X-Forwarded-For` is read only from the trusted proxies; a forwarded request is never local.
Join endpoints are rate limited per client address (token bucket,
`VOXROOM_WEB_RATE_LIMIT_PER_MIN`, 10 by default); over the limit they answer 429 with
Retry-After.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import os
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse, urlunparse

from aiohttp import web

from agent.config import ConfigError, Settings
from agent.transports.rate_limit import RateLimiter
from agent.transports.tokens import copilot_metadata, create_join_token

MAX_TOKEN_TTL_S = 600
ENV_TOKEN_TTL = "VOXROOM_WEB_TOKEN_TTL_S"
ENV_SHARED_SECRET = "VOXROOM_WEB_SHARED_SECRET"
ENV_TRUSTED_AUTH_HEADER = "VOXROOM_WEB_TRUSTED_AUTH_HEADER"
ENV_TRUSTED_PROXIES = "VOXROOM_WEB_TRUSTED_PROXIES"
ENV_RATE_LIMIT = "VOXROOM_WEB_RATE_LIMIT_PER_MIN"
MIN_SECRET_LENGTH = 16

_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_HEADER_RE = re.compile(r"[A-Za-z0-9-]{1,64}")
_MAX_NAME = 64
_TOKEN_FIELDS = frozenset({"room", "name", "copilot"})
_FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")
_MISSING_BUILD = (
    "The web page is not built yet. Run `make web` (or `cd web && npm ci && npm run build`), "
    "then reload this page."
)

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class WebSettings:
    """Who may use the join endpoints, and how much. From the environment: `from_env`."""

    token_ttl_s: int = MAX_TOKEN_TTL_S
    shared_secret: str = field(default="", repr=False)
    trusted_auth_header: str = ""
    trusted_proxies: tuple[IPNetwork, ...] = ()
    rate_per_min: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.token_ttl_s <= MAX_TOKEN_TTL_S:
            raise ConfigError(
                f"{ENV_TOKEN_TTL} must be 1 to {MAX_TOKEN_TTL_S} seconds, got {self.token_ttl_s}"
            )
        if self.shared_secret and len(self.shared_secret) < MIN_SECRET_LENGTH:
            raise ConfigError(
                f"{ENV_SHARED_SECRET} must be at least {MIN_SECRET_LENGTH} characters long"
            )
        if self.trusted_auth_header:
            if not _HEADER_RE.fullmatch(self.trusted_auth_header):
                raise ConfigError(
                    f"{ENV_TRUSTED_AUTH_HEADER} must be an HTTP header name, "
                    f"got {self.trusted_auth_header!r}"
                )
            if not self.trusted_proxies:
                raise ConfigError(
                    f"{ENV_TRUSTED_AUTH_HEADER} needs {ENV_TRUSTED_PROXIES}: the header is "
                    "believed only from the reverse proxy that sets it"
                )
        if not self.rate_per_min > 0:
            raise ConfigError(f"{ENV_RATE_LIMIT} must be positive, got {self.rate_per_min}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebSettings:
        env = os.environ if env is None else env
        values: dict[str, object] = {
            "shared_secret": env.get(ENV_SHARED_SECRET, ""),
            "trusted_auth_header": env.get(ENV_TRUSTED_AUTH_HEADER, "").strip(),
            "trusted_proxies": parse_networks(env.get(ENV_TRUSTED_PROXIES, "")),
        }
        for name, key, typ in (
            (ENV_TOKEN_TTL, "token_ttl_s", int),
            (ENV_RATE_LIMIT, "rate_per_min", float),
        ):
            if raw := env.get(name, "").strip():
                try:
                    values[key] = typ(raw)
                except ValueError as e:
                    raise ConfigError(f"{name} must be a number, got {raw!r}") from e
        return cls(**values)  # type: ignore[arg-type]  # each value parsed to its field's type

    @property
    def remote_access(self) -> bool:
        """Whether anyone off this machine can be let in."""
        return bool(self.shared_secret or self.trusted_auth_header)


def parse_networks(text: str) -> tuple[IPNetwork, ...]:
    """`"10.0.0.5, 192.168.0.0/16"` -> networks; ConfigError on anything else."""
    nets = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            nets.append(ipaddress.ip_network(part, strict=False))
        except ValueError as e:
            raise ConfigError(
                f"{ENV_TRUSTED_PROXIES}: {part!r} is not an IP address or network"
            ) from e
    return tuple(nets)


# ---- who is asking ---------------------------------------------------------------------------


def _ip(address: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not address:
        return None
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return None  # e.g. a Unix socket peer has no IP
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip


def is_loopback(address: str | None) -> bool:
    ip = _ip(address)
    return ip is not None and ip.is_loopback


def _in(address: str | None, networks: Iterable[IPNetwork]) -> bool:
    ip = _ip(address)
    return ip is not None and any(ip.version == n.version and ip in n for n in networks)


@dataclass(frozen=True)
class Caller:
    address: str  # the client, as far as it can be known; the rate limit's key
    local: bool  # on this machine, not forwarded by anyone
    via_trusted_proxy: bool


def identify(peer: str | None, headers: Mapping[str, str], web_settings: WebSettings) -> Caller:
    """The client behind a request from `peer`. X-Forwarded-For counts only when `peer` is a
    trusted proxy; then the client is the right-most address that is not a trusted proxy."""
    proxies = web_settings.trusted_proxies
    if _in(peer, proxies):
        hops = [h.strip() for h in headers.get("X-Forwarded-For", "").split(",") if h.strip()]
        if not hops:
            # Forwarded by a proxy that did not say for whom: not local, keyed by the proxy.
            return Caller(peer or "unknown", local=False, via_trusted_proxy=True)
        client = next((h for h in reversed(hops) if not _in(h, proxies)), hops[0])
        return Caller(client, local=is_loopback(client), via_trusted_proxy=True)
    # A forwarding header from anyone else is not believed, but it shows that the request
    # came through a proxy: a local proxy must not make every visitor look local.
    forwarded = any(h in headers for h in _FORWARDING_HEADERS)
    return Caller(
        peer or "unknown", local=is_loopback(peer) and not forwarded, via_trusted_proxy=False
    )


def _bearer(headers: Mapping[str, str]) -> str:
    scheme, _, value = headers.get("Authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def access_of(caller: Caller, headers: Mapping[str, str], web_settings: WebSettings) -> str:
    """ "open" (may join), "code" (needs the shared secret) or "closed" (cannot join)."""
    if caller.local:
        return "open"
    header = web_settings.trusted_auth_header
    if header and caller.via_trusted_proxy and headers.get(header, "").strip():
        return "open"
    secret = web_settings.shared_secret
    if secret and hmac.compare_digest(_bearer(headers).encode(), secret.encode()):
        return "open"
    return "code" if secret else "closed"


# ---- the app ---------------------------------------------------------------------------------

_WEB = web.AppKey("web_settings", WebSettings)
_LIMITER = web.AppKey("rate_limiter", RateLimiter)
_MODE = web.AppKey("mode", str)
_STATIC_DIR = web.AppKey("static_dir", Path)
_SETTINGS = web.AppKey("settings", Settings)


def build_web_app(
    *,
    static_dir: Path,
    web_settings: WebSettings,
    mode: str,
    api: Iterable[web.RouteDef],
    clock: Callable[[], float] = time.monotonic,
) -> web.Application:
    """The page, `GET /api/config` and the `api` routes (wrap join endpoints in `guarded`)."""
    app = web.Application()
    app[_WEB] = web_settings
    app[_LIMITER] = RateLimiter(web_settings.rate_per_min, clock=clock)
    app[_MODE] = mode
    app[_STATIC_DIR] = static_dir
    app.router.add_get("/api/config", _config)
    app.router.add_routes(api)
    app.router.add_get("/", _index)
    if static_dir.is_dir():
        app.router.add_static("/", static_dir)
    return app


def create_web_app(
    settings: Settings,
    *,
    static_dir: Path,
    web_settings: WebSettings | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> web.Application:
    """LiveKit mode: the page and `POST /api/token` for the LiveKit server of `settings`."""
    app = build_web_app(
        static_dir=static_dir,
        web_settings=web_settings or WebSettings(),
        mode="livekit",
        api=[web.post("/api/token", guarded(_issue_token))],
        clock=clock,
    )
    app[_SETTINGS] = settings
    return app


def guarded(handler: Handler) -> Handler:
    """A join endpoint: rate limited per client, then only for callers with access."""

    async def guard(request: web.Request) -> web.StreamResponse:
        web_settings = request.app[_WEB]
        caller = identify(request.remote, request.headers, web_settings)
        wait_s = request.app[_LIMITER].take(caller.address)
        if wait_s > 0:
            return error_response(
                429,
                "Too many join requests from this address. Wait a minute, then try again.",
                headers={"Retry-After": str(math.ceil(wait_s))},
            )
        access = access_of(caller, request.headers, web_settings)
        if access == "code":
            return error_response(
                401,
                "This voxroom server needs an access code to join from another device, and the "
                "code given is missing or wrong.",
                headers={"WWW-Authenticate": 'Bearer realm="voxroom"'},
            )
        if access == "closed":
            return error_response(
                403,
                "This voxroom server only lets its own machine join. To allow other devices, "
                f"its operator sets {ENV_SHARED_SECRET} (an access code) or runs it behind an "
                "authenticating reverse proxy.",
            )
        return await handler(request)

    return guard


def browser_livekit_url(url: str) -> str:
    """The LiveKit URL as a browser's WebSocket wants it: http(s) becomes ws(s)."""
    parsed = urlparse(url)
    scheme = {"http": "ws", "https": "wss"}.get(parsed.scheme, parsed.scheme)
    return urlunparse(parsed._replace(scheme=scheme))


async def _config(request: web.Request) -> web.Response:
    web_settings = request.app[_WEB]
    caller = identify(request.remote, request.headers, web_settings)
    return web.json_response(
        {"mode": request.app[_MODE], "access": access_of(caller, request.headers, web_settings)},
        headers={"Cache-Control": "no-store"},
    )


async def _index(request: web.Request) -> web.StreamResponse:
    index = request.app[_STATIC_DIR] / "index.html"
    if not index.is_file():
        return web.Response(status=503, text=_MISSING_BUILD)
    return web.FileResponse(index, headers={"Cache-Control": "no-cache"})


async def read_json_object(request: web.Request) -> dict | web.Response:
    """The request's JSON object body, or the 400 response to send instead."""
    try:
        body = await request.json()
    except ValueError:
        return error_response(400, "The request body must be JSON.")
    if not isinstance(body, dict):
        return error_response(400, "The request body must be a JSON object.")
    return body


async def _issue_token(request: web.Request) -> web.Response:
    body = await read_json_object(request)
    if isinstance(body, web.Response):
        return body
    # The lifetime, identity and permissions are the server's to choose, never the caller's.
    unknown = sorted(set(body) - _TOKEN_FIELDS)
    if unknown:
        return error_response(
            400,
            f"Unknown field(s): {', '.join(unknown)}. Only the room, a display name and the "
            "copilot mode can be chosen.",
        )
    room = body.get("room")
    name = body.get("name") or ""
    if not isinstance(room, str) or not _ID_RE.fullmatch(room):
        return error_response(
            400, "Room name must be 1 to 64 characters: letters, digits, dot, dash or underscore."
        )
    if not isinstance(name, str) or len(name) > _MAX_NAME:
        return error_response(400, f"Display name must be text of at most {_MAX_NAME} characters.")
    copilot = body.get("copilot", False)
    if not isinstance(copilot, bool):
        return error_response(400, "The copilot field must be true or false.")
    # Made up here: a chosen identity could evict the participant who has it.
    identity = f"user-{secrets.token_hex(4)}"
    livekit = request.app[_SETTINGS].livekit
    token = create_join_token(
        livekit,
        room,
        identity,
        name=name or None,
        ttl_s=request.app[_WEB].token_ttl_s,
        dispatch_agent=True,
        # The dispatch names the candidate: no one else in the room gets the answers.
        dispatch_metadata=copilot_metadata(identity) if copilot else "",
    )
    return web.json_response(
        {"token": token, "url": browser_livekit_url(livekit.url), "identity": identity},
        headers={"Cache-Control": "no-store"},
    )


def error_response(
    status: int, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A JSON error whose message the page shows as it is: one plain sentence or two."""
    return web.json_response({"error": message}, status=status, headers=headers)
