"""`voxroom token`: a join token for one room, with the least a voice user needs.

The user may join that one room, publish only a microphone, subscribe, and send data
(text chat). By default the token also asks LiveKit to dispatch the voxroom agent to the
room when the user joins, so no one has to create the room or the dispatch beforehand.
"""

from __future__ import annotations

import argparse
import datetime
import warnings

from agent.config import LiveKitSettings, load_settings

# The secret of `livekit-server --dev`, the default in agent/config.py.
_DEV_SECRET = LiveKitSettings().api_secret


def create_join_token(
    settings: LiveKitSettings,
    room: str,
    identity: str,
    *,
    name: str | None = None,
    ttl_s: int = 600,
    dispatch_agent: bool = True,
    metadata: str = "",
) -> str:
    """A signed JWT that lets `identity` join `room` on the server of `settings`."""
    import jwt
    from livekit import api

    if not room or not identity:
        raise ValueError("room and identity must not be empty")
    if ttl_s <= 0:
        raise ValueError(f"ttl_s must be positive, got {ttl_s}")
    grants = api.VideoGrants(
        room_join=True,
        room=room,
        can_publish=True,
        can_publish_sources=["microphone"],
        can_subscribe=True,
        can_publish_data=True,
    )
    token = (
        api.AccessToken(settings.api_key, settings.api_secret)
        .with_identity(identity)
        .with_grants(grants)
        .with_ttl(datetime.timedelta(seconds=ttl_s))
    )
    if name:
        token.with_name(name)
    if metadata:
        token.with_metadata(metadata)
    if dispatch_agent:
        token.with_room_config(
            api.RoomConfiguration(agents=[api.RoomAgentDispatch(agent_name=settings.agent_name)])
        )
    with warnings.catch_warnings():
        if settings.api_secret == _DEV_SECRET:
            # Short on purpose; a real deployment's secret still gets PyJWT's warning.
            warnings.simplefilter("ignore", jwt.InsecureKeyLengthWarning)
        return token.to_jwt()


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--room", required=True, help="room to join")
    parser.add_argument(
        "--identity", required=True, help="participant identity (unique in the room)"
    )
    parser.add_argument("--name", help="display name")
    parser.add_argument(
        "--ttl", type=_positive_int, default=600, metavar="SECONDS",
        help="how long the token may be used to join (default: 600)",
    )
    parser.add_argument(
        "--no-dispatch", action="store_true",
        help="do not ask LiveKit to dispatch the voxroom agent to the room",
    )


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    print(
        create_join_token(
            settings.livekit, args.room, args.identity,
            name=args.name, ttl_s=args.ttl, dispatch_agent=not args.no_dispatch,
        )
    )
    return 0
