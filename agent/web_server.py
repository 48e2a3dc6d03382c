"""The web app of `voxroom demo`: the built page (web/dist) and the join-token endpoint.

`POST /api/token` takes `{"room", "identity"?, "name"?}` and answers `{"token", "url",
"identity"}`: a short-lived token that also dispatches the agent, and the LiveKit URL the
browser connects to. With no identity, one is made up, so two tabs never evict each other.
There is no authentication yet, so by default only this machine may ask.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from pathlib import Path
from urllib.parse import urlparse, urlunparse

from aiohttp import web

from agent.config import Settings
from agent.tokens import create_join_token

TOKEN_TTL_S = 600
_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_MAX_NAME = 64
_MISSING_BUILD = (
    "The web page is not built yet. Run `make web` (or `cd web && npm ci && npm run build`), "
    "then reload this page."
)

_SETTINGS = web.AppKey("settings", Settings)
_STATIC_DIR = web.AppKey("static_dir", Path)


def create_web_app(
    settings: Settings, *, static_dir: Path, allow_remote: bool = False
) -> web.Application:
    """The page at `/`, its files from `static_dir`, and `POST /api/token`.

    Unless `allow_remote`, requests from other machines get 403: anyone who reaches the token
    endpoint may join rooms and use the agent.
    """
    app = web.Application(middlewares=[] if allow_remote else [_loopback_only])
    app[_SETTINGS] = settings
    app[_STATIC_DIR] = static_dir
    app.router.add_post("/api/token", _issue_token)
    app.router.add_get("/", _index)
    if static_dir.is_dir():
        app.router.add_static("/", static_dir)
    return app


def browser_livekit_url(url: str) -> str:
    """The LiveKit URL as a browser's WebSocket wants it: http(s) becomes ws(s)."""
    parsed = urlparse(url)
    scheme = {"http": "ws", "https": "wss"}.get(parsed.scheme, parsed.scheme)
    return urlunparse(parsed._replace(scheme=scheme))


def is_loopback(address: str | None) -> bool:
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False  # e.g. a Unix socket peer has no IP: not vouched for as local
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


@web.middleware
async def _loopback_only(request: web.Request, handler) -> web.StreamResponse:
    if not is_loopback(request.remote):
        return _error(
            403,
            "This voxroom server only answers requests from its own machine. "
            "Start it with remote access allowed to use it from another device.",
        )
    return await handler(request)


async def _index(request: web.Request) -> web.StreamResponse:
    index = request.app[_STATIC_DIR] / "index.html"
    if not index.is_file():
        return web.Response(status=503, text=_MISSING_BUILD)
    return web.FileResponse(index, headers={"Cache-Control": "no-cache"})


async def _issue_token(request: web.Request) -> web.Response:
    try:
        body = await request.json()
    except ValueError:
        return _error(400, "The request body must be JSON.")
    if not isinstance(body, dict):
        return _error(400, "The request body must be a JSON object.")
    room = body.get("room")
    identity = body.get("identity") or f"user-{secrets.token_hex(4)}"
    name = body.get("name") or ""
    for label, value in (("Room name", room), ("Identity", identity)):
        if not isinstance(value, str) or not _ID_RE.fullmatch(value):
            return _error(
                400,
                f"{label} must be 1 to 64 characters: letters, digits, dot, dash or underscore.",
            )
    if not isinstance(name, str) or len(name) > _MAX_NAME:
        return _error(400, f"Display name must be text of at most {_MAX_NAME} characters.")
    livekit = request.app[_SETTINGS].livekit
    token = create_join_token(
        livekit, room, identity, name=name or None, ttl_s=TOKEN_TTL_S, dispatch_agent=True
    )
    return web.json_response(
        {"token": token, "url": browser_livekit_url(livekit.url), "identity": identity},
        headers={"Cache-Control": "no-store"},
    )


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)
